"""The Chamfer estimate of QILCM: how many sampled query pairs are enough?

QILCM's confusion term (eq. 13-14) sums a Chamfer distance over every ordered pair of a batch's queries
(80 x 79 with batch 80); ``model_params.confusion_pairs = P`` replaces the sum by an unbiased estimate
from P pairs drawn at random per step. This study trains QILCM re-ranking LightGBM LambdaMART's top 100
(the qilcm-table2 protocol, default hyperparameters) with the exact term and with each P, on the same
fold and seed, and compares each P with the exact term **on the validation queries**:

* the paired randomization test over validation queries (``ctxrank.experiments.stats.permutation_test``;
  Smucker et al. 2007) and the BCa bootstrap 95% CI of the mean difference of NDCG@10 (P - exact);
* the wall time per epoch, measured in the same process (ratio against the exact term's).

Decision rule: P is **not worse** than the exact term when the CI's lower end is above -MARGIN
(default 0.005 NDCG@10, about the size of the differences between models this project tests; a test
that merely fails to reject says nothing when it has little power). The rule is applied to the
validation queries of every fold studied, pooled (the folds' validation sets are disjoint, so each
query counts once); the per-fold lines are printed too. A first version applied it per fold with a
0.01 margin: with MQ2008's 157 validation queries a fold's CI is about +-0.011 wide even for P = 1280
(which costs as much as the exact term), so no P could pass it; it was replaced by the pooled rule
before the pooled figures were computed. The cheapest P that is not worse is the candidate default;
the test figures are printed for information only (they do not enter the choice).

    .venv/bin/python benchmarks/chamfer_pairs.py --folds 1,2 --pairs 80,320,1280 --json f12.json
    .venv/bin/python benchmarks/chamfer_pairs.py --folds 3,4 --pairs 80,320,1280 --json f34.json
    .venv/bin/python benchmarks/chamfer_pairs.py --pooled f12.json f34.json   # the decision over both
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ctxrank.config import RunConfig
from ctxrank.data.registry import load_fold
from ctxrank.experiments.stats import permutation_test
from ctxrank.metrics import evaluate_queries
from ctxrank.training.rerank import InitialRanker
from ctxrank.training.run import run_training

METRIC = "ndcg@10"


def per_query(predictor, data) -> np.ndarray:
    """NDCG@10 of every query (queries without a relevant item count 0, the report's convention)."""
    scores = predictor.predict(data)
    return np.asarray(
        evaluate_queries(scores, data.labels, data.query_offsets, [METRIC], no_relevant=0.0)[METRIC]
    )


def train_one(pairs: int | None, fold, lm, seed: int, threads: int, max_epochs: int | None) -> dict:
    train, valid, test = fold.train, fold.valid, fold.test
    d = {
        "model": "qilcm",
        "model_params": {"confusion_pairs": pairs},
        "rerank": {"initial": "lambdamart", "top_k": 100},
        "train": {"seed": seed, "threads": threads},
    }
    if max_epochs is not None:
        d["train"]["max_epochs"] = max_epochs
    t0 = time.perf_counter()
    res = run_training(
        RunConfig.from_dict(d), train, valid, None, progress=False, initial=lm
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    epochs = int(res.summary.get("epochs_run", 0)) or 1
    return {
        "pairs": "exact" if pairs is None else pairs,
        "seconds": seconds,
        "epochs": epochs,
        "seconds_per_epoch": seconds / epochs,
        "valid": per_query(res.predictor, valid).tolist(),
        "test": per_query(res.predictor, test).tolist(),
    }


def pooled(folds: dict[str, dict], candidates: list, margin: float) -> int | None:
    """Print P vs exact over the validation queries of every fold in ``folds`` (pooled); the cheapest
    P whose CI's lower end is above ``-margin`` (None: none)."""
    ok = []
    for p in candidates:
        a, b, ratios = [], [], []
        for f in folds.values():
            runs = {r["pairs"]: r for r in f["runs"]}
            a += runs[p]["valid"]
            b += runs["exact"]["valid"]
            ratios.append(runs[p]["seconds_per_epoch"] / runs["exact"]["seconds_per_epoch"])
        t = permutation_test(a, b)
        lo = t["ci"][0] if t.get("ci") else 0.0
        print(
            f"pooled over folds {', '.join(folds)} ({t['n']} validation queries): pairs {p}: diff "
            f"{t['diff']:+.4f}, 95% CI [{t['ci'][0]:+.4f}, {t['ci'][1]:+.4f}], p {t['p']:.3f}; time per "
            f"epoch x{np.mean(ratios):.2f} of exact; not worse (margin {margin}): {lo > -margin}"
        )
        if lo > -margin:
            ok.append(p)
    return min(ok) if ok else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mq2008")
    ap.add_argument("--folds", default="1", help="comma-separated fold numbers (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pairs", default="80,320,1280", help="sampled pairs per step to compare with exact")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--margin", type=float, default=0.005, help="non-inferiority margin (NDCG@10)")
    ap.add_argument(
        "--pooled", nargs="+", metavar="JSON", help="only the pooled decision over these --json files"
    )
    ap.add_argument("--max-epochs", type=int, default=None, help="smoke runs only (default: the config's)")
    ap.add_argument("--json", help="write every per-query value and the decision here")
    a = ap.parse_args()
    candidates = [int(p) for p in a.pairs.split(",") if p]
    if a.pooled:
        folds = {k: v for path in a.pooled for k, v in json.loads(Path(path).read_text())["folds"].items()}
        choice = pooled(folds, candidates, a.margin)
        print(f"cheapest P not worse than the exact term (margin {a.margin}, pooled): {choice}")
        return
    results: dict[str, dict] = {}
    for fold_no in [int(f) for f in a.folds.split(",")]:
        fold = load_fold(a.dataset, fold_no)
        lm = InitialRanker(a.seed, a.threads)  # shared by the runs of the fold
        lm.fit(fold.train, fold.valid)
        runs = [train_one(p, fold, lm, a.seed, a.threads, a.max_epochs) for p in [None, *candidates]]
        exact = runs[0]
        rows = []
        for r in runs:
            test = permutation_test(r["valid"], exact["valid"])
            lo = test["ci"][0] if test.get("ci") else 0.0
            r["vs_exact"] = {"diff": test["diff"], "p": test["p"], "ci": test.get("ci"), "n": test["n"]}
            r["not_worse_alone"] = r is exact or bool(lo > -a.margin)
            r["time_ratio"] = r["seconds_per_epoch"] / exact["seconds_per_epoch"]
            rows.append(r)
            print(
                f"fold {fold_no} pairs {r['pairs']!s:>5}: valid {METRIC} {np.mean(r['valid']):.4f} "
                f"(diff {test['diff']:+.4f}, 95% CI {test.get('ci')}, p {test['p']}), test "
                f"{np.mean(r['test']):.4f}, {r['seconds_per_epoch']:.1f} s/epoch "
                f"(x{r['time_ratio']:.2f} of exact), {r['epochs']} epochs, "
                f"not worse on this fold alone: {r['not_worse_alone']}",
                flush=True,
            )
        results[str(fold_no)] = {"runs": rows}
    choice = pooled(results, candidates, a.margin)
    print(f"cheapest P not worse than the exact term (margin {a.margin}, pooled): {choice}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"dataset": a.dataset, "seed": a.seed, "margin": a.margin, "choice": choice,
                       "folds": results}, fh, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
