"""User-choice ranking on SYNTHETIC airline sessions: QILCM vs DCM vs DLCM vs LambdaMART vs MNL.

The QILCM paper's second task (Table 4): predict the itinerary a customer buys among those shown;
P@1 and P@5, averages over runs with t-tests. The paper's data are proprietary, so this benchmark uses
``ctxrank.data.synth_choice`` (mixed logit with per-session tastes; documented as synthetic — nothing
here is a claim about real travellers). Protocol per run (seed ``s``):

* one dataset of ``--sessions`` sessions (``make_choice_sessions(seed=--data-seed)``), read through
  ``read_table`` (numeric: price, duration, stops, dep_hour; categorical: airline, cabin);
* a query-level random 60/20/20 train/validation/test split drawn from ``s``
  (``ctxrank.data.split.split_queries``), the categorical vocabulary re-fitted on train only;
* every model trained on train with early stopping on validation MRR (``train.metric=mrr``), seed ``s``;
  LambdaMART gets the categorical codes as extra numeric columns (LightGBM trees split on them);
* test metrics per session: P@1, P@5 (precision: at most 0.2 with one chosen item), hit@5 (the chosen
  item is in the top 5; = 5 x P@5 with one chosen item), MRR, NDCG@10, and the log-likelihood of the
  chosen item under ``softmax(scores)`` (not meaningful for LambdaMART's unnormalized scores, shown anyway);
* the chooser's own probabilities on the same test sessions: the ceiling reference.

Statistics: mean +- std over runs; the QILCM paper's test — a paired t-test over runs — of QILCM against
each model. Settings that deviate from the models' defaults, for cost on 2 CPU cores (override with
``--set MODEL:KEY=VALUE``): QILCM's Chamfer term over 80 sampled query pairs a batch (its unbiased
estimate, ``confusion_pairs=80``, instead of all 6,400); DLCM with encoder widths (64, 64) instead of
its 1024-wide default (the choice data have 11 input columns).

    .venv/bin/python benchmarks/bench_choice.py [--sessions 20000] [--seeds 0,1,2,3,4]
        [--models mnl,lambdamart,dcm,dlcm,qilcm] [--threads 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import stats

from _report import emit_json
from ctxrank.config import resolve_config
from ctxrank.data.split import query_split_indices, split_queries
from ctxrank.data.synth_choice import CATEGORICAL, FEATURES, make_choice_sessions
from ctxrank.data.table import read_table, refit_categorical
from ctxrank.metrics import evaluate_queries
from ctxrank.training.run import run_training

METRICS = ("p@1", "p@5", "mrr", "ndcg@10")
DEFAULT_SETTINGS = {
    "qilcm": ["model_params.confusion_pairs=80"],
    "dlcm": ["model_params.encoder_widths=[64,64]", "model_params.gru=torch"],
}


def session_log_likelihood(scores: np.ndarray, labels: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per session: log softmax(scores)[chosen], averaged over the chosen items (vectorized)."""
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    sess = np.repeat(np.arange(lengths.size), lengths)
    m = np.maximum.reduceat(scores, starts)
    lse = np.log(np.add.reduceat(np.exp(scores - m[sess]), starts)) + m
    logp = scores - lse[sess]
    chosen = labels > 0
    return np.add.reduceat(np.where(chosen, logp, 0.0), starts) / np.maximum(
        np.add.reduceat(chosen.astype(float), starts), 1
    )


def with_codes_as_features(data):
    """LambdaMART's view: the categorical codes appended as numeric columns."""
    codes = data.categorical.astype(np.float32)
    return replace(
        data,
        features=np.concatenate([data.features, codes], axis=1),
        feature_names=(*data.feature_names, *data.categorical_names),
        categorical=None,
        categorical_names=(),
        categorical_cardinalities=(),
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=20000)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--models", default="mnl,lambdamart,dcm,dlcm,qilcm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="[MODEL:]KEY=VALUE")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument(
        "--merge",
        action="append",
        default=[],
        metavar="FILE",
        help="add the runs of an earlier --json output (same sessions, data seed, models and --set; "
        "other seeds); repeatable. With --seeds '' only the report is recomputed.",
    )
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not seeds and not args.merge:
        ap.error("nothing to do: --seeds is empty and nothing is merged")

    sessions = make_choice_sessions(args.sessions, seed=args.data_seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sessions.parquet"
        sessions.table.to_parquet(path)
        data = read_table(path, query="session", label="chosen", categorical=CATEGORICAL, numeric=FEATURES)
    assert data.n_items == len(sessions.table)  # sessions are contiguous: rows stay in table order
    ref = sessions.chooser_reference()
    print(
        f"SYNTHETIC choice data: {data.n_queries} sessions, {data.n_items} itineraries; chooser on all "
        f"sessions: log-lik {ref['log_likelihood']:.4f}, P@1 {ref['p@1']:.4f}",
        flush=True,
    )
    names = [*models, "chooser"]
    cols = (*METRICS, "hit@5", "log_lik")
    results = {n: {k: [] for k in cols} for n in names}
    seconds = dict.fromkeys(models, 0.0)
    all_seeds: list[int] = []
    for path in args.merge:
        all_seeds += merge_runs(path, args, models, seeds + all_seeds, results, seconds)
    t_start = time.perf_counter()
    for i, seed in enumerate(seeds):
        tr, va, te, _ = split_queries(data, seed=seed)
        _, (tr, va, te) = refit_categorical(_encoder_of(data), tr, va, te)
        test_q = query_split_indices(data.n_queries, seed=seed)[2]
        rows = np.concatenate([np.arange(data.query_offsets[q], data.query_offsets[q + 1]) for q in test_q])
        scores_of = {"chooser": np.log(sessions.chooser_prob[rows])}
        for m in models:
            overrides = [
                f"model={m}",
                f"train.seed={seed}",
                f"train.threads={args.threads}",
                "train.metric=mrr",
                *DEFAULT_SETTINGS.get(m, []),
                *(o for o in args.overrides if ":" not in o.split("=", 1)[0]),
                *(o.split(":", 1)[1] for o in args.overrides if o.startswith(f"{m}:")),
            ]
            splits = (
                (tr, va, te) if m != "lambdamart" else tuple(with_codes_as_features(d) for d in (tr, va, te))
            )
            t0 = time.perf_counter()
            r = run_training(resolve_config(None, overrides), *splits, progress=False)
            seconds[m] += time.perf_counter() - t0
            scores_of[m] = r.test_scores
        line = []
        for n, s in scores_of.items():
            per = evaluate_queries(s, te.labels, te.query_offsets, METRICS)
            for k in METRICS:
                results[n][k].append(float(np.mean(per[k])))
            # one chosen item per session (and >= 5 items): hit@5 = 5 x P@5
            results[n]["hit@5"].append(5 * results[n]["p@5"][-1])
            ll = session_log_likelihood(np.asarray(s, dtype=np.float64), te.labels, te.query_offsets)
            results[n]["log_lik"].append(float(ll.mean()))
            line.append(f"{n} {results[n]['p@1'][-1]:.4f}")
        el = time.perf_counter() - t_start
        print(
            f"[run {i + 1}/{len(seeds)} seed {seed}] test P@1: {'  '.join(line)} "
            f"(elapsed {el:.0f} s, eta {el / (i + 1) * (len(seeds) - i - 1):.0f} s)",
            flush=True,
        )
    all_seeds += seeds
    n_runs = len(all_seeds)
    print(
        f"\n### test, mean ± std over {n_runs} runs, seeds {all_seeds} "
        f"(SYNTHETIC data, {data.n_queries} sessions)\n"
    )
    print("| model | " + " | ".join(cols) + " |")
    print("|" + "---|" * (len(cols) + 1))
    for n in names:
        cells = [
            f"{np.mean(results[n][k]):.4f} ± {np.std(results[n][k], ddof=1) if n_runs > 1 else 0:.4f}"
            for k in cols
        ]
        print(f"| {n} | " + " | ".join(cells) + " |")
    tests = {}
    if "qilcm" in models and n_runs > 1:
        print("\nQILCM vs each model: improvement and paired t-test over runs (the QILCM paper's test)\n")
        print("| vs | " + " | ".join(cols) + " |")
        print("|" + "---|" * (len(cols) + 1))
        for n in (x for x in names if x != "qilcm"):
            cells, tests[n] = [], {}
            for k in cols:
                a, b = np.array(results["qilcm"][k]), np.array(results[n][k])
                t = stats.ttest_rel(a, b)
                imp = (a.mean() / b.mean() - 1) * 100 if k != "log_lik" else float(a.mean() - b.mean())
                tests[n][k] = {"diff": float(a.mean() - b.mean()), "p": float(t.pvalue)}
                cells.append(f"{imp:+.2f}{'%' if k != 'log_lik' else ''} (p={t.pvalue:.2g})")
            print(f"| {n} | " + " | ".join(cells) + " |")
    print("\ntraining seconds per model (all runs):", {k: round(v, 1) for k, v in seconds.items()})
    emit_json(
        {
            "args": vars(args),
            "seeds": all_seeds,
            "chooser_all_sessions": ref,
            "results": results,
            "tests": tests,
            "seconds": seconds,
        },
        args.json,
        echo=False,
    )
    return 0


def merge_runs(path, args, models, taken, results, seconds) -> list[int]:
    """Append the runs stored in an earlier ``--json`` output to ``results``/``seconds``; its seeds.

    Refuses files made with other data (sessions, data seed), other models or other ``--set`` options,
    and seeds that are already in this study.
    """
    blob = json.loads(Path(path).read_text())
    old = blob["args"]
    for key in ("sessions", "data_seed", "models", "overrides"):
        if old[key] != getattr(args, key):
            raise SystemExit(f"--merge {path}: {key} there is {old[key]!r}, here {getattr(args, key)!r}")
    old_seeds = blob.get("seeds") or [int(s) for s in old["seeds"].split(",") if s.strip()]
    if clash := sorted(set(old_seeds) & set(taken)):
        raise SystemExit(f"--merge {path}: seeds {clash} are already in this study")
    for n, per_metric in results.items():
        for k, values in per_metric.items():
            values += blob["results"][n][k]
    for m in models:
        seconds[m] += blob["seconds"][m]
    print(f"merged seeds {old_seeds} from {path}", flush=True)
    return old_seeds


def _encoder_of(data):
    from ctxrank.data.table import CategoricalEncoder

    return CategoricalEncoder.from_dict(data.info["categorical_encoder"])


if __name__ == "__main__":
    raise SystemExit(main())
