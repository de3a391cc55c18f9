"""Quality benchmark (not a test): ListNet vs LightGBM LambdaMART on the embedded MQ2008, 5 folds x seeds.

What it runs, per fold and seed (all on the LETOR 4.0 rotation folds, ``load_fold("mq2008", k)``):

* **ListNet** (``make_model("listnet")``: the paper's linear scorer, ``listnet`` loss), trained with
  ``ctxrank.training.loop.fit`` (Adam, early stopping on the validation metric, best weights restored).
  With ``--tune`` (default) every configuration of a small grid (``LISTNET_GRID``) is trained for every
  seed, and **each fold picks its configuration on that fold's validation split only** (mean over the
  seeds of the best-epoch validation metric). The test split is scored for every run but never looked
  at for any decision. ``--no-tune`` trains the single configuration ``LISTNET_FIXED`` instead.
* **MLP + ListNet loss** (``make_model("mlp")``, hidden 64-32 ReLU), the same way with ``MLP_GRID``
  (``--models`` drops it).
* **LambdaMART**: ``lightgbm.train`` with ``objective="lambdarank"``, ``label_gain`` 2^y-1,
  ``deterministic=True``, the parameters of ``ctxrank demo`` and early stopping on the validation split
  (``--threads`` LightGBM threads). The early-stopping metric is the same selection metric as for the
  neural models, computed by ctxrank (standard convention) through a ``feval``; for ``ndcg@10`` this
  picks the same iteration as LightGBM's built-in ``ndcg@10``, whose only difference (a query without a
  relevant document counts 1 instead of 0) is a constant.

Selection metric: ``--select-metric`` (default ``ndcg@10``; the LETOR baselines were selected on
validation ``map``). It drives early stopping, the per-fold grid choice and LightGBM's early stopping.

Features: the embedded files are LETOR's "QueryLevelNorm" version (each feature min-max scaled to [0, 1]
within its query). The script checks, per fold, what ctxrank's ``minmax`` and ``query-minmax``
transforms (fitted on train) do to them: on MQ2008 both return the input unchanged (every feature
already spans exactly [0, 1] on every training split, and per query), so every transform gives
bit-identical models and the table uses ``--transform none``. When they do change the features (other
data), ``--compare-transforms`` trains the fixed ListNet configuration with each and prints the
validation means.

Reported: test NDCG@1/3/5/10 and MAP, mean +- std over the folds x seeds runs, under two conventions:
``standard`` with ``no_relevant=0`` (ctxrank's default) and ``letor4`` (Microsoft's Eval-Score-4.0.pl:
the convention of the published LETOR 4.0 baseline tables; NDCG@k = 0 for a query with fewer than k
documents). Also the mean over folds per seed, and paired t-tests (``scipy.stats.ttest_rel``) over the
test queries of all folds, per seed.

Usage::

    .venv/bin/python benchmarks/bench_listnet_mq2008.py                      # 5 folds x seeds 0,1,2
    .venv/bin/python benchmarks/bench_listnet_mq2008.py --select-metric map  # LETOR's selection rule
    .venv/bin/python benchmarks/bench_listnet_mq2008.py --folds 1 --seeds 0 --no-tune   # quick look

Prints per-run progress lines with an ETA, Markdown tables and a JSON blob (``--json FILE`` also writes
it to a file). Nothing else is stored.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from _report import emit_json

METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
CONVENTIONS = ("standard", "letor4")

# ListNet: fixed configuration (``--no-tune``) and the per-fold grid (``--tune``, the default).
LISTNET_FIXED: dict[str, Any] = {
    "lr": 0.01,
    "batch_size": 80,
    "weight_decay": 0.0,
    "max_epochs": 200,
    "patience": 20,
    "label_transform": "exp",
}
LISTNET_GRID: dict[str, tuple] = {
    "lr": (0.003, 0.01, 0.03, 0.1),
    "batch_size": (16, 80),
    "weight_decay": (0.0, 1e-3),
}
MLP_FIXED: dict[str, Any] = {
    "lr": 0.003,
    "batch_size": 80,
    "weight_decay": 0.0,
    "max_epochs": 200,
    "patience": 20,
    "label_transform": "exp",
    "hidden": (64, 32),
    "dropout": 0.0,
}
MLP_GRID: dict[str, tuple] = {
    "lr": (0.001, 0.003, 0.01),
    "weight_decay": (0.0, 1e-3),
}
# LightGBM: the defaults of ctxrank.baselines.LambdaMART (the model of `ctxrank demo --quick`), more rounds.
LGB_PARAMS: dict[str, Any] = {
    "objective": "lambdarank",
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_data_in_leaf": 20,
    "deterministic": True,
    "force_col_wise": True,
    "verbose": -1,
}
LGB_ROUNDS = 1000
LGB_EARLY_STOPPING = 50

# Published anchor: LETOR 4.0 baseline, ListNet on MQ2008 (5-fold mean, Eval-Score-4.0.pl = our
# "letor4" convention, selected on validation MAP, QueryLevelNorm features). None = not found.
PUBLISHED_LISTNET: dict[str, float] | None = None
PUBLISHED_SOURCE = ""


# ----------------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One trained model on one fold and seed."""

    model: str
    fold: int
    seed: int
    config: dict[str, Any]
    valid_metric: float
    best_epoch: int
    epochs: int
    seconds: float
    # test per-query vectors: {convention: {metric: (Q,) float64}}
    test: dict[str, dict[str, np.ndarray]] = field(repr=False, default_factory=dict)


def grid_configs(fixed: dict[str, Any], grid: dict[str, tuple], tune: bool) -> list[dict[str, Any]]:
    if not tune:
        return [dict(fixed)]
    keys = list(grid)
    return [{**fixed, **dict(zip(keys, values, strict=True))} for values in itertools.product(*grid.values())]


def config_label(cfg: dict[str, Any], grid: dict[str, tuple]) -> str:
    keys = list(grid) or ["lr", "batch_size", "weight_decay"]
    short = {"lr": "lr", "batch_size": "bs", "weight_decay": "wd", "label_transform": "lt"}
    return " ".join(
        f"{short.get(k, k)}={cfg[k]:g}" if isinstance(cfg[k], float) else f"{short.get(k, k)}={cfg[k]}"
        for k in keys
    )


def test_vectors(scores: np.ndarray, data) -> dict[str, dict[str, np.ndarray]]:
    from ctxrank.metrics import evaluate_queries

    return {
        conv: evaluate_queries(
            scores, data.labels, data.query_offsets, METRICS, convention=conv, no_relevant=0.0
        )
        for conv in CONVENTIONS
    }


def train_neural(model_name: str, cfg: dict[str, Any], fold_data, seed: int, args) -> Run:
    from ctxrank.config import TrainConfig
    from ctxrank.losses import get_loss
    from ctxrank.registry import make_model
    from ctxrank.training.loop import fit, seed_everything
    from ctxrank.training.predict import predict

    train, valid, test = fold_data
    params = {"hidden": tuple(cfg["hidden"]), "dropout": cfg["dropout"]} if model_name == "mlp" else {}
    # Seed *before* building the model: fit() re-seeds torch only after the weights were initialized.
    seed_everything(seed, args.threads)
    model = make_model(model_name, train.n_features, params)
    tc = TrainConfig(
        lr=cfg["lr"],
        batch_size=cfg["batch_size"],
        weight_decay=cfg["weight_decay"],
        max_epochs=cfg["max_epochs"],
        patience=cfg["patience"],
        metric=args.select_metric,
        seed=seed,
        threads=args.threads,
    )
    loss = functools.partial(get_loss("listnet"), label_transform=cfg["label_transform"])
    t0 = time.perf_counter()
    result = fit(model, loss, train, valid, tc, progress=False)
    seconds = time.perf_counter() - t0
    scores = predict(model, test)
    return Run(
        model=model_name,
        fold=0,
        seed=seed,
        config=dict(cfg),
        valid_metric=result.best_metric,
        best_epoch=result.best_epoch,
        epochs=result.epochs_run,
        seconds=seconds,
        test=test_vectors(scores, test),
    )


def train_lambdamart(fold_data, seed: int, args) -> Run:
    import lightgbm as lgb

    from ctxrank.metrics import evaluate_queries

    train, valid, test = fold_data
    max_label = int(max(train.labels.max(), valid.labels.max(), test.labels.max()))
    params = {
        **LGB_PARAMS,
        "metric": "None",
        "label_gain": [2.0**y - 1.0 for y in range(max_label + 1)],
        "num_threads": args.threads,
        "seed": seed,
    }
    name = args.select_metric

    def feval(preds, dataset):  # the selection metric, exactly as ctxrank computes it for the neural models
        value = evaluate_queries(preds, valid.labels, valid.query_offsets, [name], no_relevant=0.0)
        return name, float(np.nanmean(value[next(iter(value))])), True

    train_set = lgb.Dataset(train.features, label=train.labels, group=train.query_lengths)
    valid_set = lgb.Dataset(
        valid.features, label=valid.labels, group=valid.query_lengths, reference=train_set
    )
    evals: dict[str, Any] = {}
    t0 = time.perf_counter()
    booster = lgb.train(
        params,
        train_set,
        num_boost_round=LGB_ROUNDS,
        valid_sets=[valid_set],
        valid_names=["valid"],
        feval=feval,
        callbacks=[lgb.early_stopping(LGB_EARLY_STOPPING, verbose=False), lgb.record_evaluation(evals)],
    )
    seconds = time.perf_counter() - t0
    best = booster.best_score["valid"][name]
    scores = booster.predict(test.features, num_iteration=booster.best_iteration)
    return Run(
        model="lambdamart",
        fold=0,
        seed=seed,
        config={
            "rounds": LGB_ROUNDS,
            "early_stopping": LGB_EARLY_STOPPING,
            **{k: v for k, v in params.items() if k not in ("verbose",)},
        },
        valid_metric=float(best),
        best_epoch=int(booster.best_iteration),
        epochs=len(evals["valid"][name]),
        seconds=seconds,
        test=test_vectors(scores, test),
    )


# ----------------------------------------------------------------------------------------------------
# Transforms
# ----------------------------------------------------------------------------------------------------


def transform_check(folds: dict[int, Any]) -> dict[str, Any]:
    """Max |change| that each transform (fitted on train) makes to the train/valid/test features."""
    from ctxrank.data.transforms import make_transform

    out: dict[str, Any] = {}
    for name in ("minmax", "query-minmax"):
        worst = 0.0
        for f in folds.values():
            t = make_transform(name).fit(f.train)
            for split in (f.train, f.valid, f.test):
                worst = max(worst, float(np.abs(t.transform(split).features - split.features).max()))
        out[name] = worst
    return out


def apply_transform(name: str, f) -> tuple:
    from ctxrank.data.transforms import make_transform

    t = make_transform(name).fit(f.train)
    return t.transform(f.train), t.transform(f.valid), t.transform(f.test)


# ----------------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------------


def fmt_duration(s: float) -> str:
    s = max(0, round(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def run_means(run: Run, conv: str) -> dict[str, float]:
    return {m: float(np.mean(run.test[conv][m])) for m in METRICS}


def summary(runs: list[Run], conv: str) -> dict[str, dict[str, float]]:
    """Per metric: mean and std (ddof=1) over runs of the per-run test means, and per-seed fold means."""
    out = {}
    for m in METRICS:
        vals = np.array([run_means(r, conv)[m] for r in runs])
        seeds = sorted({r.seed for r in runs})
        per_seed = {s: float(np.mean([run_means(r, conv)[m] for r in runs if r.seed == s])) for s in seeds}
        out[m] = {
            "mean": float(vals.mean()),
            "std": float(vals.std(ddof=1)) if vals.size > 1 else 0.0,
            "n_runs": int(vals.size),
            "fold_mean_per_seed": per_seed,
            "std_of_seed_means": float(np.std(list(per_seed.values()), ddof=1)) if len(per_seed) > 1 else 0.0,
        }
    return out


def markdown_table(results: dict[str, list[Run]], conv: str, published: dict[str, float] | None) -> str:
    head = "| model | " + " | ".join(m.upper().replace("NDCG", "NDCG") for m in METRICS) + " |"
    lines = [head, "|---|" + "---:|" * len(METRICS)]
    for name, runs in results.items():
        s = summary(runs, conv)
        cells = [f"{s[m]['mean']:.4f} ± {s[m]['std']:.4f}" for m in METRICS]
        lines.append(f"| {name} ({len(runs)} runs) | " + " | ".join(cells) + " |")
    if published is not None and conv == "letor4":
        cells = [f"{published[m]:.4f}" if m in published else "–" for m in METRICS]
        lines.append("| ListNet, LETOR 4.0 published baseline | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seed_table(results: dict[str, list[Run]], conv: str) -> str:
    seeds = sorted({r.seed for runs in results.values() for r in runs})
    lines = [
        "| model | metric | " + " | ".join(f"seed {s}" for s in seeds) + " | std over seeds |",
        "|---|---|" + "---:|" * (len(seeds) + 1),
    ]
    for name, runs in results.items():
        s = summary(runs, conv)
        for m in ("ndcg@10", "map"):
            cells = [f"{s[m]['fold_mean_per_seed'][sd]:.4f}" for sd in seeds]
            lines.append(f"| {name} | {m} | " + " | ".join(cells) + f" | {s[m]['std_of_seed_means']:.4f} |")
    return "\n".join(lines)


def paired_tests(a: list[Run], b: list[Run], metric: str = "ndcg@10") -> list[dict[str, Any]]:
    """Per seed: ttest_rel over the test queries of all folds (a vs b), both conventions; also over the
    queries with at least one relevant document (no_relevant='skip')."""
    from scipy.stats import ttest_rel

    out = []
    for seed in sorted({r.seed for r in a}):
        ra = sorted((r for r in a if r.seed == seed), key=lambda r: r.fold)
        rb = sorted((r for r in b if r.seed == seed), key=lambda r: r.fold)
        if [r.fold for r in ra] != [r.fold for r in rb]:
            continue
        row: dict[str, Any] = {"seed": seed, "folds": [r.fold for r in ra]}
        for conv in CONVENTIONS:
            xa = np.concatenate([r.test[conv][metric] for r in ra])
            xb = np.concatenate([r.test[conv][metric] for r in rb])
            t = ttest_rel(xa, xb)
            row[conv] = {
                "n": int(xa.size),
                "mean_a": float(xa.mean()),
                "mean_b": float(xb.mean()),
                "t": float(t.statistic),
                "p": float(t.pvalue),
            }
        out.append(row)
    return out


def paired_tests_with_relevant(
    a: list[Run], b: list[Run], has_rel: dict[int, np.ndarray], metric: str = "ndcg@10"
) -> list[dict[str, Any]]:
    from scipy.stats import ttest_rel

    rows = paired_tests(a, b, metric)
    for row in rows:
        ra = sorted((r for r in a if r.seed == row["seed"]), key=lambda r: r.fold)
        rb = sorted((r for r in b if r.seed == row["seed"]), key=lambda r: r.fold)
        keep = np.concatenate([has_rel[r.fold] for r in ra])
        for conv in CONVENTIONS:
            xa = np.concatenate([r.test[conv][metric] for r in ra])[keep]
            xb = np.concatenate([r.test[conv][metric] for r in rb])[keep]
            t = ttest_rel(xa, xb)
            row[f"{conv}_relevant_only"] = {
                "n": int(xa.size),
                "mean_a": float(xa.mean()),
                "mean_b": float(xb.mean()),
                "t": float(t.statistic),
                "p": float(t.pvalue),
            }
    return rows


# ----------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--folds", default="1,2,3,4,5", help="comma-separated folds (default 1,2,3,4,5)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--threads", type=int, default=2, help="torch and LightGBM CPU threads (default 2)")
    p.add_argument(
        "--select-metric",
        default="ndcg@10",
        help="validation metric for early stopping and model selection (default ndcg@10; LETOR: map)",
    )
    p.add_argument(
        "--models",
        default="listnet,lambdamart,mlp",
        help="comma-separated subset of listnet,lambdamart,mlp (default all three)",
    )
    tune = p.add_mutually_exclusive_group()
    tune.add_argument(
        "--tune",
        dest="tune",
        action="store_true",
        default=True,
        help="per-fold grid search on validation (default)",
    )
    tune.add_argument(
        "--no-tune",
        dest="tune",
        action="store_false",
        help="train only the fixed configurations LISTNET_FIXED / MLP_FIXED",
    )
    p.add_argument("--transform", default="none", help="feature transform fitted on train (default none)")
    p.add_argument(
        "--compare-transforms",
        action="store_true",
        help="if a transform changes the features, compare none/minmax/query-minmax on validation",
    )
    p.add_argument("--json", metavar="FILE", help="also write the JSON blob to FILE")
    args = p.parse_args(argv)
    from ctxrank.metrics import format_metric, parse_metric

    args.select_metric = format_metric(*parse_metric(args.select_metric))  # canonical (fit() needs it)
    args.folds = [int(x) for x in args.folds.split(",") if x.strip()]
    args.seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    args.models = [x.strip() for x in args.models.split(",") if x.strip()]
    bad = set(args.models) - {"listnet", "lambdamart", "mlp"}
    if bad:
        p.error(f"unknown model(s) {sorted(bad)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import lightgbm as lgb
    import scipy
    import torch

    from ctxrank.data.registry import load_fold

    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    folds = {k: load_fold("mq2008", k) for k in args.folds}
    changes = transform_check(folds)
    print(
        f"MQ2008 folds {args.folds}, seeds {args.seeds}, threads {args.threads}, "
        f"selection metric {args.select_metric}, tune {args.tune}, transform {args.transform}"
    )
    print(
        "transform check (max |change| to train/valid/test features, fitted on train): "
        + ", ".join(f"{k} {v:.3g}" for k, v in changes.items())
    )
    transform_report: dict[str, Any] = {"max_abs_change": changes, "used": args.transform}
    if args.compare_transforms and any(v > 0 for v in changes.values()):
        cmp = {}
        for name in ("none", "minmax", "query-minmax"):
            vals = [
                train_neural("listnet", LISTNET_FIXED, apply_transform(name, f), s, args).valid_metric
                for f in folds.values()
                for s in args.seeds
            ]
            cmp[name] = float(np.mean(vals))
            print(f"  {name}: mean valid {args.select_metric} {cmp[name]:.4f}")
        transform_report["valid_comparison"] = cmp
    elif all(v == 0 for v in changes.values()):
        print("  every transform leaves the features bit-identical: all give the same models; using 'none'")
    data = {k: apply_transform(args.transform, f) for k, f in folds.items()}
    has_rel = {
        k: np.array(
            [
                (f.test.labels[a:b] > 0).any()
                for a, b in zip(f.test.query_offsets[:-1], f.test.query_offsets[1:], strict=True)
            ]
        )
        for k, f in folds.items()
    }

    plans: list[tuple[str, list[dict[str, Any]], dict[str, tuple]]] = []
    if "listnet" in args.models:
        plans.append(("listnet", grid_configs(LISTNET_FIXED, LISTNET_GRID, args.tune), LISTNET_GRID))
    if "mlp" in args.models:
        plans.append(("mlp", grid_configs(MLP_FIXED, MLP_GRID, args.tune), MLP_GRID))
    grids = {name: grid for name, _, grid in plans}
    # rough cost weights for the ETA (seconds per fit, measured on the 2-core reference machine)
    cost = {"listnet": 1.0, "mlp": 2.0, "lambdamart": 1.0}
    jobs: list[tuple[str, int, int, dict[str, Any] | None]] = []
    for k in args.folds:
        for seed in args.seeds:
            if "lambdamart" in args.models:
                jobs.append(("lambdamart", k, seed, None))
            for name, configs, _ in plans:
                jobs.extend((name, k, seed, c) for c in configs)
    total_cost = sum(
        cost[j[0]] * (4.0 if j[3] is not None and j[3]["batch_size"] <= 16 else 1.0) for j in jobs
    )

    all_runs: dict[str, list[Run]] = {"listnet": [], "mlp": [], "lambdamart": []}
    done_cost = 0.0
    t_jobs = time.perf_counter()
    for i, (name, k, seed, cfg) in enumerate(jobs, 1):
        if name == "lambdamart":
            run = train_lambdamart(data[k], seed, args)
        else:
            run = train_neural(name, cfg, data[k], seed, args)
        run.fold = k
        all_runs[name].append(run)
        done_cost += cost[name] * (4.0 if cfg is not None and cfg["batch_size"] <= 16 else 1.0)
        elapsed = time.perf_counter() - t_jobs
        eta = elapsed / done_cost * (total_cost - done_cost)
        label = config_label(cfg, grids[name]) if cfg is not None else "lgb"
        s = run_means(run, "standard")
        print(
            f"[{i:4d}/{len(jobs)}] {name:10s} fold {k} seed {seed} {label:32s} "
            f"valid {args.select_metric} {run.valid_metric:.4f} (best {run.best_epoch}/{run.epochs}) "
            f"test ndcg@10 {s['ndcg@10']:.4f} map {s['map']:.4f} | {run.seconds:5.1f} s, "
            f"elapsed {fmt_duration(elapsed)}, ETA {fmt_duration(eta)}",
            flush=True,
        )

    # ---- per-fold selection on validation only
    selected: dict[str, list[Run]] = {}
    choices: dict[str, dict[int, dict[str, Any]]] = {}
    grid_valid: dict[str, dict[str, dict[int, float]]] = {}
    for name, configs, grid in plans:
        runs = all_runs[name]
        choices[name] = {}
        grid_valid[name] = {}
        sel: list[Run] = []
        for k in args.folds:
            best_cfg, best_val = None, -math.inf
            for c in configs:
                vals = [r.valid_metric for r in runs if r.fold == k and r.config == c]
                v = float(np.mean(vals))
                grid_valid[name].setdefault(config_label(c, grid), {})[k] = v
                if v > best_val:
                    best_cfg, best_val = c, v
            choices[name][k] = {
                "config": config_label(best_cfg, grid),
                "valid_mean": best_val,
                "best_epochs": [r.best_epoch for r in runs if r.fold == k and r.config == best_cfg],
            }
            sel.extend(r for r in runs if r.fold == k and r.config == best_cfg)
        selected[name] = sel
    if "lambdamart" in args.models:
        selected["lambdamart"] = all_runs["lambdamart"]

    display = {
        "listnet": "ListNet (linear)",
        "lambdamart": "LightGBM LambdaMART",
        "mlp": "MLP 64-32 + ListNet loss",
    }
    results = {display[n]: selected[n] for n in ("listnet", "lambdamart", "mlp") if n in selected}
    total = time.perf_counter() - t_start

    print()
    print(
        f"## Test metrics, mean ± std over {len(args.folds)} folds x {len(args.seeds)} seeds "
        f"(selection: validation {args.select_metric}{', per-fold grid' if args.tune else ', fixed config'})"
    )
    for conv in CONVENTIONS:
        print()
        print(
            f"### convention `{conv}`"
            + (" (no_relevant=0)" if conv == "standard" else " (Eval-Score-4.0.pl rules)")
        )
        print()
        print(markdown_table(results, conv, PUBLISHED_LISTNET))
    for conv in CONVENTIONS:
        print()
        print(f"### mean over folds per seed (`{conv}`)")
        print()
        print(seed_table(results, conv))
    for name in choices:
        print()
        print(
            f"### {display[name]}: configuration chosen per fold (validation {args.select_metric}, "
            f"mean over seeds)"
        )
        print()
        print("| fold | chosen | valid | best epochs per seed |")
        print("|---:|---|---:|---|")
        for k, c in choices[name].items():
            print(f"| {k} | {c['config']} | {c['valid_mean']:.4f} | {c['best_epochs']} |")
        if args.tune:
            print()
            print(f"grid, mean validation {args.select_metric} over seeds (per fold):")
            for lab, per in grid_valid[name].items():
                print(
                    f"  {lab:32s} "
                    + " ".join(f"{per[k]:.4f}" for k in args.folds)
                    + f"   mean {np.mean(list(per.values())):.4f}"
                )

    tests = {}
    if "listnet" in selected and "lambdamart" in selected:
        tests["listnet_vs_lambdamart"] = paired_tests_with_relevant(
            selected["listnet"], selected["lambdamart"], has_rel
        )
    if "mlp" in selected and "lambdamart" in selected:
        tests["mlp_vs_lambdamart"] = paired_tests_with_relevant(
            selected["mlp"], selected["lambdamart"], has_rel
        )
    if "mlp" in selected and "listnet" in selected:
        tests["mlp_vs_listnet"] = paired_tests_with_relevant(selected["mlp"], selected["listnet"], has_rel)
    if tests:
        print()
        print("### paired t-tests on test NDCG@10 (scipy.stats.ttest_rel over the test queries of all folds)")
        print()
        print(
            "| comparison (a vs b) | seed | queries | standard: a − b | p | letor4: a − b | p "
            "| with a relevant doc: n | a − b | p |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for cmp_name, rows in tests.items():
            for r in rows:
                st, l4, sr = r["standard"], r["letor4"], r["standard_relevant_only"]
                print(
                    f"| {cmp_name} | {r['seed']} | {st['n']} "
                    f"| {st['mean_a'] - st['mean_b']:+.4f} | {st['p']:.3g} "
                    f"| {l4['mean_a'] - l4['mean_b']:+.4f} | {l4['p']:.3g} | {sr['n']} "
                    f"| {sr['mean_a'] - sr['mean_b']:+.4f} | {sr['p']:.3g} |"
                )

    blob = {
        "benchmark": "bench_listnet_mq2008",
        "dataset": "mq2008 (embedded, QueryLevelNorm)",
        "folds": args.folds,
        "seeds": args.seeds,
        "threads": args.threads,
        "select_metric": args.select_metric,
        "tune": args.tune,
        "transform": transform_report,
        "metrics": list(METRICS),
        "conventions": {"standard": {"no_relevant": 0.0}, "letor4": "Eval-Score-4.0.pl"},
        "results": {
            conv: {name: summary(runs, conv) for name, runs in results.items()} for conv in CONVENTIONS
        },
        "chosen_configs": choices,
        "grid_valid": grid_valid if args.tune else {},
        "fixed_configs": {
            "listnet": LISTNET_FIXED,
            "mlp": {**MLP_FIXED, "hidden": list(MLP_FIXED["hidden"])},
        },
        "grids": {"listnet": LISTNET_GRID, "mlp": MLP_GRID},
        "lambdamart": {
            "params": LGB_PARAMS,
            "rounds": LGB_ROUNDS,
            "early_stopping": LGB_EARLY_STOPPING,
            "best_iterations": {f"{r.fold}/{r.seed}": r.best_epoch for r in all_runs["lambdamart"]},
        },
        "paired_tests_ndcg@10": tests,
        "published_listnet_letor4": PUBLISHED_LISTNET,
        "published_source": PUBLISHED_SOURCE,
        "fits": len(jobs),
        "seconds": total,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "lightgbm": lgb.__version__,
            "numpy": np.__version__,
            "scipy": scipy.__version__,
        },
        "machine": platform.machine() + ", " + (platform.processor() or "cpu"),
    }
    print()
    print(f"total {fmt_duration(total)} for {len(jobs)} fits")
    emit_json(blob, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
