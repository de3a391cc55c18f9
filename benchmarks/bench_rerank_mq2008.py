"""Re-ranking LambdaMART's top-k on MQ2008: LambdaMART alone vs neural re-rankers (DLCM, QILCM, ...).

For every fold and seed: LightGBM LambdaMART is fitted on train (early stopping on validation
NDCG@10); its scores on the training split are in-sample, or out-of-fold with ``--crossfit K``; every
re-ranker in ``--models`` is trained on the top-k lists (``ctxrank.training.run.run_training`` with the
shared initial ranker) and evaluated on the FULL test queries (re-ranked top k first, the rest in
initial order; ideal DCG over every judged item). Metrics under the ``standard`` convention
(no-relevant = 0) and ``letor4``. Statistics: mean +- std over the fold x seed runs, improvement over
LambdaMART, and a paired t-test over test queries (each query's metric averaged over seeds; every
MQ2008 query is a test query exactly once over the 5 folds).

    .venv/bin/python benchmarks/bench_rerank_mq2008.py --models dlcm,qilcm --seeds 0,1,2
    .venv/bin/python benchmarks/bench_rerank_mq2008.py --models dlcm --crossfit 5      # leakage check
    .venv/bin/python benchmarks/bench_rerank_mq2008.py --models qilcm \
        --set qilcm:model_params.confusion_weight=0

``--set KEY=VALUE`` applies to every model, ``--set MODEL:KEY=VALUE`` to one (run-config keys, see
docs/training.md). Results are written as JSON with ``--out``. ``--merge FILE`` adds the seeds of an
earlier ``--out`` file (same models and settings, other seeds) to this run's tables and tests, so a
study can grow seed by seed; ``--seeds ''`` with ``--merge`` only recomputes the report.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy import stats

from ctxrank.config import resolve_config
from ctxrank.data.registry import load_fold
from ctxrank.metrics import evaluate_queries, mean_metrics
from ctxrank.training.rerank import InitialRanker
from ctxrank.training.run import run_training

METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
CONVENTIONS = ("standard", "letor4")


def per_query(scores, data) -> dict[str, dict[str, np.ndarray]]:
    return {
        conv: evaluate_queries(
            scores, data.labels, data.query_offsets, METRICS, convention=conv, no_relevant=0.0
        )
        for conv in CONVENTIONS
    }


def query_means(by_seed: dict, seeds: list[int], conv: str, metric: str) -> np.ndarray:
    """One value per test query (folds concatenated in order): its metric averaged over ``seeds``."""
    return np.mean([np.concatenate([np.asarray(v) for v in by_seed[s][conv][metric]]) for s in seeds], axis=0)


def compare_against(path: Path, per_q: dict, seeds: list[int], names: list[str]) -> dict:
    """Paired t-tests of this run's models against the same names in an earlier ``--out`` file."""
    prev = {
        n: {int(s): v for s, v in by_seed.items()}
        for n, by_seed in json.loads(path.read_text())["per_query"].items()
    }
    out: dict[str, dict] = {}
    for conv in CONVENTIONS:
        print(f"\n### this run vs {path} ({conv}; per-query means over common seeds, paired t-test)\n")
        print("| model | seeds | " + " | ".join(METRICS) + " |")
        print("|" + "---|" * (len(METRICS) + 2))
        for n in names:
            common = [s for s in seeds if s in prev.get(n, {})]
            if not common:
                continue
            cells = []
            for k in METRICS:
                a = query_means(per_q[n], common, conv, k)
                b = query_means(prev[n], common, conv, k)
                t = stats.ttest_rel(a, b)
                d = float(np.nanmean(a) - np.nanmean(b))
                out.setdefault(conv, {}).setdefault(n, {})[k] = {"diff": d, "p": float(t.pvalue)}
                cells.append(f"{d:+.4f} (p={t.pvalue:.3g})")
            print(f"| {n} | {','.join(map(str, common))} | " + " | ".join(cells) + " |")
    return out


def merge_results(
    path: Path, per_q: dict, runs: dict, seeds: list[int], names: list[str], n_folds: int
) -> list[int]:
    """Add an earlier ``--out`` file's seeds to ``per_q``/``runs`` in place; returns the seeds added.

    Refuses a file that lacks one of ``names`` or repeats a seed already present, so no run is counted
    twice and every model has the same seeds.
    """
    blob = json.loads(path.read_text())
    prev = blob["per_query"]
    missing = [n for n in names if n not in prev]
    if missing:
        raise SystemExit(f"--merge {path}: no results for {missing} (it has {sorted(prev)})")
    new = sorted({int(s) for s in prev[names[0]]})
    clash = sorted(set(new) & set(seeds))
    if clash:
        raise SystemExit(f"--merge {path}: seeds {clash} are already in this run")
    for n in names:
        if sorted(int(s) for s in prev[n]) != new:
            raise SystemExit(f"--merge {path}: {n} has seeds {sorted(prev[n])}, expected {new}")
        for s in new:
            if len(prev[n][str(s)]["standard"]["map"]) != n_folds:
                raise SystemExit(f"--merge {path}: {n} seed {s} does not have {n_folds} folds")
            per_q[n][s] = {
                c: {k: [np.asarray(v, dtype=float) for v in prev[n][str(s)][c][k]] for k in METRICS}
                for c in CONVENTIONS
            }
        runs[n] += [r for r in blob["runs"].get(n, []) if r["seed"] in new]
    print(f"merged seeds {new} from {path} (args there: {blob['args']})")
    return new


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="dlcm,qilcm", help="comma-separated re-rankers")
    ap.add_argument("--folds", default="1,2,3,4,5")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--top-k", type=int, default=100)
    ap.add_argument(
        "--crossfit", type=int, default=0, help="K-fold out-of-fold initial scores on train (0 = off)"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="[MODEL:]KEY=VALUE")
    ap.add_argument(
        "--compare",
        default="",
        metavar="A:B,...",
        help="extra paired comparisons besides every model vs LambdaMART (e.g. qilcm:dlcm)",
    )
    ap.add_argument(
        "--against",
        type=Path,
        metavar="FILE",
        help="an earlier --out file (e.g. without --crossfit): paired t-test of each model against its "
        "namesake there, over test queries (per-query means over the seeds both runs have)",
    )
    ap.add_argument(
        "--merge",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="an earlier --out file with the same models and settings on other seeds: its per-query "
        "results join this run's (repeatable)",
    )
    ap.add_argument("--out", type=Path, help="write all results (per-query vectors included) as JSON")
    args = ap.parse_args()

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    folds = [int(f) for f in args.folds.split(",")]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not seeds and not args.merge:
        ap.error("--seeds is empty: give seeds to run, or --merge files to report on")
    common = [o for o in args.overrides if ":" not in o.split("=", 1)[0]]
    per_model = {m: [o.split(":", 1)[1] for o in args.overrides if o.startswith(f"{m}:")] for m in models}
    names = ["lambdamart", *models]
    comparisons = [(m, "lambdamart") for m in models]
    for pair in filter(None, (c.strip() for c in args.compare.split(","))):
        a, sep, b = pair.partition(":")
        if not sep or a not in names or b not in names:
            ap.error(f"--compare takes A:B pairs of {names}, got {pair!r}")
        comparisons.append((a, b))
    # results[name][seed][conv][metric] -> list of per-query arrays over folds (file order per fold)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    per_q: dict[str, dict[int, dict[str, dict[str, list]]]] = {
        n: {s: {c: {m: [] for m in METRICS} for c in CONVENTIONS} for s in seeds} for n in names
    }
    seconds: dict[str, float] = {n: 0.0 for n in names}
    total = len(folds) * len(seeds)
    t_start = time.perf_counter()
    done = 0
    for fold_k in folds:
        fold = load_fold("mq2008", fold_k)
        for seed in seeds:
            t0 = time.perf_counter()
            initial = InitialRanker(seed, args.threads)  # shared by the re-rankers of this run
            lm = initial.fit(fold.train, fold.valid)
            seconds["lambdamart"] += time.perf_counter() - t0
            results = {"lambdamart": per_query(lm.predict(fold.test), fold.test)}
            for m in models:
                overrides = [
                    f"model={m}",
                    "rerank.initial=lambdamart",
                    f"rerank.top_k={args.top_k}",
                    f"rerank.crossfit={args.crossfit}",
                    f"train.seed={seed}",
                    f"train.threads={args.threads}",
                    *common,
                    *per_model[m],
                ]
                config = resolve_config(None, overrides)
                t0 = time.perf_counter()
                r = run_training(
                    config,
                    fold.train,
                    fold.valid,
                    fold.test,
                    progress=False,
                    initial=initial,
                )
                seconds[m] += time.perf_counter() - t0
                results[m] = per_query(r.test_scores, fold.test)
                runs[m].append({"fold": fold_k, "seed": seed, **r.summary})
            for n, res in results.items():
                for c in CONVENTIONS:
                    for k in METRICS:
                        per_q[n][seed][c][k].append(res[c][k])
            done += 1
            elapsed = time.perf_counter() - t_start
            line = "  ".join(f"{n} {mean_metrics(results[n]['standard'])['ndcg@10']:.4f}" for n in names)
            print(
                f"[{done}/{total}] fold {fold_k} seed {seed}: test ndcg@10 {line}  "
                f"(elapsed {elapsed:.0f} s, eta {elapsed / done * (total - done):.0f} s)",
                flush=True,
            )
    for path in args.merge:
        seeds += merge_results(path, per_q, runs, seeds, names, len(folds))

    report = {
        "args": json.loads(json.dumps(vars(args), default=str)),
        "seconds": seconds,
        "runs": runs,
    }
    for conv in CONVENTIONS:
        print(f"\n### {conv} convention (no-relevant = 0), {len(folds)} folds x {len(seeds)} seeds\n")
        header = "| model | " + " | ".join(METRICS) + " |"
        print(header)
        print("|" + "---|" * (len(METRICS) + 1))
        table, run_means = {}, {}
        for n in names:
            # one value per (fold, seed) run: the mean over that fold's test queries
            vals = {
                k: np.array([np.nanmean(a) for s in seeds for a in per_q[n][s][conv][k]]) for k in METRICS
            }
            run_means[n] = vals
            table[n] = {
                k: (float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0) for k, v in vals.items()
            }
            print(f"| {n} | " + " | ".join(f"{m:.4f} ± {s:.4f}" for m, s in table[n].values()) + " |")
        print(
            "\nimprovement of A over B; paired t-test p over test queries (per-query means over seeds)"
            "; runs: paired over the fold x seed runs (the QILCM paper's test)\n"
        )
        print("| A vs B | " + " | ".join(METRICS) + " |")
        print("|" + "---|" * (len(METRICS) + 1))
        tests = {}
        for n, base in comparisons:
            cells = []
            key = n if base == "lambdamart" else f"{n}_vs_{base}"
            tests[key] = {}
            for k in METRICS:
                a = query_means(per_q[n], seeds, conv, k)
                b = query_means(per_q[base], seeds, conv, k)
                t = stats.ttest_rel(a, b)
                t_runs = stats.ttest_rel(run_means[n][k], run_means[base][k])
                imp = (table[n][k][0] / table[base][k][0] - 1) * 100
                tests[key][k] = {
                    "improvement_pct": imp,
                    "t": float(t.statistic),
                    "p": float(t.pvalue),
                    "queries": a.size,
                    "p_runs": float(t_runs.pvalue),
                    "runs": run_means[n][k].size,
                }
                cells.append(f"{imp:+.2f}% (p={t.pvalue:.2g}; runs {t_runs.pvalue:.2g})")
            print(f"| {n} vs {base} | " + " | ".join(cells) + " |")
        report[conv] = {"table": table, "comparisons": tests}
    if args.against:
        report["against"] = compare_against(args.against, per_q, seeds, names)
    print("\ntraining seconds per model (all runs):", {k: round(v, 1) for k, v in seconds.items()})
    if args.out:
        report["per_query"] = {
            n: {
                str(s): {
                    c: {k: [v.tolist() for v in per_q[n][s][c][k]] for k in METRICS} for c in CONVENTIONS
                }
                for s in seeds
            }
            for n in names
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
