"""The ARSM-L2R experiment (ARSM-L2R paper, Tables 2-3): 5-fold cross-validation, ARSM-L2R vs its baselines.

For every dataset and fold: RankSVM, ListNet, AdaRank-MAP, AdaRank-NDCG and ARSM-L2R are trained on the
fold's training split (model selection on its validation split) and evaluated once on its test split,
through ``ctxrank.training.run.run_training`` (the same path as ``ctxrank train --model NAME``).
Metrics: NDCG@1/3/5/10 and MAP per test query, under ctxrank's ``standard`` convention (a query with
no relevant item scores 0; NDCG over the whole list when it is shorter than k) and under the dataset's
official evaluation script convention (``letor3`` for OHSUMED / LETOR 3.0, ``letor4`` for MQ2008 /
LETOR 4.0; see docs/metrics.md). The table averages the five fold means (LETOR's way); the paired t-test
compares ARSM-L2R with each baseline over all test queries (each query is a test query exactly once).

Published reference rows: ARSM-L2R Table 3 (OHSUMED; its baseline rows are LETOR 3.0's official
results, its ARSM-L2R row the paper's own run). For MQ2008 the seed has no table (its Table 2 is
MQ2007), and the official LETOR 4.0 MQ2008 baseline rows could not be found in any source reachable
here, so none are printed.

    .venv/bin/python benchmarks/bench_arsm_letor.py [--datasets ohsumed,mq2008] [--folds 1,2,3,4,5]
        [--models ranksvm,listnet,adarank-map,adarank-ndcg,arsm] [--seed 0] [--set arsm:train.lr=1e-4]

OHSUMED is read from ``../shared/data`` (``CTXRANK_DATA`` or ``--root`` elsewhere); MQ2008 is embedded.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from scipy import stats

from _report import emit_json
from ctxrank.config import resolve_config
from ctxrank.data.registry import load_fold
from ctxrank.metrics import evaluate_queries
from ctxrank.training.run import run_training

METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
OFFICIAL = {"ohsumed": "letor3", "mq2008": "letor4"}
#: ARSM-L2R paper, Table 3 (OHSUMED, 5-fold averages): baseline rows = LETOR 3.0 official results.
PUBLISHED = {
    "ohsumed": {
        "ranksvm": (0.4958, 0.4207, 0.4164, 0.4140, 0.4468),
        "listnet": (0.5326, 0.4732, 0.4432, 0.4410, 0.4495),
        "adarank-map": (0.5388, 0.4682, 0.4613, 0.4429, 0.4418),
        "adarank-ndcg": (0.5330, 0.4790, 0.4673, 0.4496, 0.4424),
        "arsm": (0.5601, 0.4642, 0.4546, 0.4460, 0.4503),
    }
}
#: neural models' training settings for this experiment (overridable with --set MODEL:KEY=VALUE)
DEFAULT_SETTINGS = {
    "arsm": ["train.max_epochs=100", "train.patience=20"],
    "listnet": ["train.max_epochs=100", "train.patience=20"],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="ohsumed,mq2008")
    ap.add_argument("--folds", default="1,2,3,4,5")
    ap.add_argument("--models", default="ranksvm,listnet,adarank-map,adarank-ndcg,arsm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--root", help="data root for datasets that are not embedded")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="[MODEL:]KEY=VALUE")
    ap.add_argument("--json", metavar="FILE", help="write the results (per-query vectors included)")
    args = ap.parse_args(argv)

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    folds = [int(f) for f in args.folds.split(",")]
    root = (
        args.root
        or os.environ.get("CTXRANK_DATA")
        or str(Path(__file__).resolve().parents[2] / "shared/data")
    )
    report: dict = {"args": vars(args), "datasets": {}}
    for ds in (d.strip() for d in args.datasets.split(",") if d.strip()):
        convs = ("standard", OFFICIAL.get(ds, "standard"))
        # per_q[model][conv][metric] -> list over folds of per-query arrays
        per_q = {m: {c: {k: [] for k in METRICS} for c in convs} for m in models}
        seconds = dict.fromkeys(models, 0.0)
        runs: dict[str, list] = {m: [] for m in models}  # per fold: best epoch, chosen C, rounds, ...
        t_start = time.perf_counter()
        for i, fold_k in enumerate(folds):
            fold = load_fold(ds, fold_k, root=None if ds == "mq2008" else root)
            line = []
            for m in models:
                overrides = [
                    f"model={m}",
                    f"train.seed={args.seed}",
                    f"train.threads={args.threads}",
                    *DEFAULT_SETTINGS.get(m, []),
                    *(o for o in args.overrides if ":" not in o.split("=", 1)[0]),
                    *(o.split(":", 1)[1] for o in args.overrides if o.startswith(f"{m}:")),
                ]
                t0 = time.perf_counter()
                r = run_training(
                    resolve_config(None, overrides), fold.train, fold.valid, fold.test, progress=False
                )
                seconds[m] += time.perf_counter() - t0
                runs[m].append({k: v for k, v in r.summary.items() if k != "history"})
                for c in convs:
                    vals = evaluate_queries(
                        r.test_scores, fold.test.labels, fold.test.query_offsets, METRICS, convention=c
                    )
                    for k in METRICS:
                        per_q[m][c][k].append(vals[k])
                line.append(f"{m} {np.mean(per_q[m]['standard']['ndcg@10'][-1]):.4f}")
            el = time.perf_counter() - t_start
            print(
                f"[{ds} fold {fold_k}] test ndcg@10: {'  '.join(line)} "
                f"(elapsed {el:.0f} s, eta {el / (i + 1) * (len(folds) - i - 1):.0f} s)",
                flush=True,
            )
        out = {"seconds": seconds, "runs": runs, "tables": {}, "tests": {}}
        for c in convs:
            print(f"\n### {ds}, {c} convention, mean of {len(folds)} fold means (seed {args.seed})\n")
            print("| model | " + " | ".join(METRICS) + " |")
            print("|" + "---|" * (len(METRICS) + 1))
            table = {
                m: {k: float(np.mean([np.nanmean(a) for a in per_q[m][c][k]])) for k in METRICS}
                for m in models
            }
            for m in models:
                print(f"| {m} | " + " | ".join(f"{table[m][k]:.4f}" for k in METRICS) + " |")
            if c == OFFICIAL.get(ds) and ds in PUBLISHED:
                for m, row in PUBLISHED[ds].items():
                    print(
                        f"| {m} (published, ARSM-L2R Table 3) | " + " | ".join(f"{v:.4f}" for v in row) + " |"
                    )
            out["tables"][c] = table
            if "arsm" in models:
                print("\nARSM-L2R vs each model, paired t-test over test queries:\n")
                print("| vs | " + " | ".join(METRICS) + " |")
                print("|" + "---|" * (len(METRICS) + 1))
                tests = {}
                for m in (x for x in models if x != "arsm"):
                    cells, tests[m] = [], {}
                    for k in METRICS:
                        a = np.concatenate(per_q["arsm"][c][k])
                        b = np.concatenate(per_q[m][c][k])
                        t = stats.ttest_rel(a, b)
                        d = float(np.nanmean(a) - np.nanmean(b))
                        tests[m][k] = {"diff": d, "p": float(t.pvalue)}
                        cells.append(f"{d:+.4f} (p={t.pvalue:.2g})")
                    print(f"| {m} | " + " | ".join(cells) + " |")
                out["tests"][c] = tests
        print("\ntraining seconds per model (all folds):", {k: round(v, 1) for k, v in seconds.items()})
        for m in models:
            if "best_epoch" in runs[m][0]:
                print(
                    f"{m}: best epoch / epochs run per fold:",
                    [(r["best_epoch"], r["epochs_run"]) for r in runs[m]],
                )
        out["per_query"] = {
            m: {c: {k: [a.tolist() for a in per_q[m][c][k]] for k in METRICS} for c in convs} for m in models
        }
        report["datasets"][ds] = out
    if args.json:
        emit_json(report, args.json, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
