"""DCM reads the displayed order: its P@1 on rows sorted by price vs the same rows shuffled.

Car (real data, ``ctxrank.data.choice``), splits 1..``--splits`` by respondent. Within every situation the
six vehicles are put in ascending price order (as a shop might display them). DCM is trained on that
order (a) and with ``train.shuffle_items = true`` (b); each is tested on the price-sorted rows and on the
same rows shuffled within situations (seeded). A model that ignores order (the conditional logit) scores
the same on both; DCM trained on sorted rows learns the position, and its P@1 moves when the order goes.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_choice_order.py [--splits 2] [--epochs 30]
"""

from __future__ import annotations

import argparse
import warnings
from dataclasses import replace

import numpy as np

from ctxrank.config import resolve_config
from ctxrank.data.choice import shuffle_within_queries, sorted_feature_columns
from ctxrank.data.registry import load_fold
from ctxrank.metrics import evaluate_queries
from ctxrank.training.run import run_training


def sorted_by(data, column: str):
    """Rows of every situation in ascending order of ``column`` (stable)."""
    j = data.feature_names.index(column)
    keys = data.query_index * 1e9 + data.features[:, j].astype(np.float64)  # prices are < 1e9
    rows = np.argsort(keys, kind="stable")
    return replace(
        data,
        features=data.features[rows],
        labels=data.labels[rows],
        docids=None if data.docids is None else data.docids[rows],
        categorical=None if data.categorical is None else data.categorical[rows],
    )


def p_at_1(predictor, data) -> float:
    s = predictor.predict(data)
    return float(np.mean(evaluate_queries(s, data.labels, data.query_offsets, ["p@1"])["p@1"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--splits", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args(argv)
    rows = []
    for split in range(1, args.splits + 1):
        fold = load_fold("car", split)
        tr, va, te = (sorted_by(d, "price") for d in (fold.train, fold.valid, fold.test))
        assert "price" in sorted_feature_columns(tr)
        te_shuffled = shuffle_within_queries(te, seed=100 + split)
        base = [f"train.seed={split - 1}", "train.threads=1", f"train.max_epochs={args.epochs}"]
        base += ["train.patience=5", "train.metric=loglik"]
        for name, extra in (
            ("mnl", ["model=mnl", "transform=zscore", "model_params.alternative_specific=true"]),
            ("dcm (sorted rows)", ["model=dcm"]),
            ("dcm (train.shuffle_items)", ["model=dcm", "train.shuffle_items=true"]),
        ):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                r = run_training(resolve_config(None, [*base, *extra]), tr, va, progress=False)
            warned = any("sorted by" in str(w.message) for w in caught)
            rows.append((split, name, p_at_1(r.predictor, te), p_at_1(r.predictor, te_shuffled), warned))
            print(f"split {split} {name}: P@1 sorted {rows[-1][2]:.4f}, shuffled {rows[-1][3]:.4f}, "
                  f"warned {warned}", flush=True)  # fmt: skip
    print("\n| model | P@1, test rows sorted by price | P@1, same rows shuffled | difference | warned |")
    print("|---|---|---|---|---|")
    for name in dict.fromkeys(r[1] for r in rows):
        a = np.array([r[2] for r in rows if r[1] == name])
        b = np.array([r[3] for r in rows if r[1] == name])
        w = "yes" if all(r[4] for r in rows if r[1] == name) else "no"
        print(f"| {name} | {a.mean():.4f} | {b.mean():.4f} | {a.mean() - b.mean():+.4f} | {w} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
