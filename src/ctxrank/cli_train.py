"""``ctxrank train`` and ``ctxrank predict``: train a ranker, save it, score new lists.

Kept apart from :mod:`ctxrank.cli` (data and evaluation commands) so each module stays readable;
``cli.build_parser`` registers these subcommands through :func:`add_commands`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    from ctxrank.cli import _add_dataset_options

    p = sub.add_parser(
        "train",
        parents=[common],
        help="train a ranker and save it",
        description=(
            "Train a model on a registered dataset fold (--dataset NAME --fold K) or on files "
            "(--train F --valid F [--test F]), with early stopping on the validation split. Saves "
            "model.safetensors, ctxrank.json (metadata), config.toml (the resolved config), "
            "train_log.jsonl (one record per epoch) and, when a test split is given, test_metrics.json "
            "(the test split is evaluated once, at the end). The baselines save their own model files "
            "instead of the weights: LambdaMART model.txt (LightGBM), RankSVM and AdaRank everything in "
            "ctxrank.json. Example: "
            "`ctxrank train --model listnet --dataset mq2008 --fold 1 --out runs/listnet`."
        ),
    )
    p.add_argument(
        "--model",
        help=(
            "model name: a neural model (listnet, mlp, dlcm, qilcm, ...) or a baseline (lambdamart, "
            "ranksvm, adarank-map, adarank-ndcg; see docs/baselines.md); default: the config file's, "
            "else listnet"
        ),
    )
    p.add_argument(
        "--loss", help="ranking loss of a neural model (default: the model's own; baselines train their own)"
    )
    p.add_argument("--config", metavar="FILE", help="TOML run config (see docs/training.md)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set train.lr=3e-4 --set model_params.hidden=[64] (repeatable)",
    )
    p.add_argument("--seed", type=int, help="random seed (train.seed)")
    p.add_argument(
        "--initial",
        choices=("lambdamart",),
        help="re-rank the top-k lists of this initial ranker (trained first, saved in DIR/initial)",
    )
    p.add_argument(
        "--top-k", dest="top_k", type=int, help="items re-ranked per query (rerank.top_k, default 100)"
    )
    p.add_argument(
        "--crossfit",
        type=int,
        metavar="K",
        help="out-of-fold initial scores on the training split with K folds (rerank.crossfit; default off)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory for the saved model")
    p.add_argument("--train", dest="train_file", metavar="FILE", help="training file (LETOR/SVMlight)")
    p.add_argument("--valid", dest="valid_file", metavar="FILE", help="validation file")
    p.add_argument("--test", dest="test_file", metavar="FILE", help="test file (evaluated once at the end)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_dataset_options(p, defaults_text="not used by train")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "predict",
        parents=[common],
        help="score a LETOR file with a saved model",
        description=(
            "Score every row of a LETOR/SVMlight file (or a registered dataset split) with a model saved by "
            "`ctxrank train`; writes one score per line, in the file's row order."
        ),
    )
    p.add_argument("--model", required=True, metavar="DIR", help="directory written by `ctxrank train`")
    p.add_argument("--data", metavar="FILE", help="LETOR / SVMlight file to score")
    p.add_argument(
        "--output", "-o", required=True, metavar="FILE", help="scores file to write ('-' = stdout)"
    )
    _add_dataset_options(p, defaults_text="default test")
    p.set_defaults(func=cmd_predict)


# ------------------------------------------------------------------------------------------- train
def _training_data(args: argparse.Namespace):
    """(train, valid, test | None, description) from --dataset/--fold or --train/--valid/--test."""
    from ctxrank.data.letor import read_letor

    files = (args.train_file, args.valid_file, args.test_file)
    if args.dataset is not None:
        if any(files):
            raise ValueError("give either --dataset or --train/--valid/--test files, not both")
        if args.split is not None:
            raise ValueError("--split does not apply to train (it uses the fold's train/valid/test)")
        from ctxrank.data.registry import load_fold

        fold = load_fold(
            args.dataset, args.fold or 1, root=args.data_root, variant=args.variant, cache=not args.no_cache
        )
        return fold.train, fold.valid, fold.test, f"{args.dataset} fold {args.fold or 1}"
    if not (args.train_file and args.valid_file):
        raise ValueError("give --dataset NAME [--fold K], or both --train FILE and --valid FILE")
    train = read_letor(args.train_file, query_file=args.query_file, cache=not args.no_cache)
    other = {"n_features": train.n_features, "cache": not args.no_cache}
    valid = read_letor(args.valid_file, **other)
    test = read_letor(args.test_file, **other) if args.test_file else None
    return train, valid, test, f"train {args.train_file}"


def cmd_train(args: argparse.Namespace) -> int:
    from ctxrank.checkpoint import write_json
    from ctxrank.cli import _out, _table
    from ctxrank.config import resolve_config
    from ctxrank.metrics import mean_metrics, metric_convention
    from ctxrank.pipeline import run_training

    overrides = list(args.overrides)
    for flag, key in (
        ("model", "model"),
        ("loss", "loss"),
        ("seed", "train.seed"),
        ("initial", "rerank.initial"),
        ("top_k", "rerank.top_k"),
        ("crossfit", "rerank.crossfit"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides.append(f"{key}={value}")
    config = resolve_config(args.config, overrides)
    out = Path(args.out)
    if (out / "ctxrank.json").exists():
        raise ValueError(f"{out} already holds a saved model; choose another --out or remove it")
    train, valid, test, what = _training_data(args)
    counts = f"train {train.n_queries} queries, valid {valid.n_queries}" + (
        f", test {test.n_queries}" if test is not None else ""
    )
    rr = config.rerank
    how = f" re-ranking LambdaMART's top {rr.top_k}" if rr.initial else ""
    _out(f"{config.model} ({config.loss_name} loss){how} on {what}: {counts}")
    t0 = time.perf_counter()
    result = run_training(config, train, valid, test, out=out, progress=not args.no_progress, log=_out)
    s = result.summary
    if "best_epoch" in s:
        _out(
            f"best epoch {s['best_epoch']} of {s['epochs_run']} "
            f"(valid {s['metric']} {s['best_valid_metric']:.4f}), "
            f"{time.perf_counter() - t0:.1f} s; saved to {out}"
        )
    else:
        _out(f"{_baseline_summary(s)}, {time.perf_counter() - t0:.1f} s; saved to {out}")
    if result.test_metrics is not None:
        conv = metric_convention("standard", no_relevant=config.train.no_relevant)
        means = mean_metrics(result.test_metrics)
        record = {
            "data": test.source,
            "metrics": means,
            "conventions": conv.to_dict(),
            "ideal": rr.ideal if rr.initial else "full",
            "query_ids": [str(q) for q in test.query_ids],
            "per_query": {
                k: [None if np.isnan(x) else float(x) for x in v] for k, v in result.test_metrics.items()
            },
        }
        rows = [(k, f"{v:.4f}") for k, v in means.items()]
        headers: tuple[str, ...] = ("test metric", config.model)
        if result.initial_test_metrics is not None:
            initial = mean_metrics(result.initial_test_metrics)
            record["initial_metrics"] = initial
            rows = [(k, f"{initial[k]:.4f}", v) for k, v in rows]
            headers = ("test metric", "lambdamart", f"{config.model} re-ranked")
        write_json(out / "test_metrics.json", record)
        _out()
        _out(_table(headers, rows, right=tuple(range(1, len(headers)))))
    return 0


def _baseline_summary(s: dict[str, Any]) -> str:
    """One line from a baseline's ``training_summary()`` (LambdaMART, RankSVM, AdaRank)."""
    valid = s.get("best_valid_metric")
    on_valid = f" (valid {s['metric']} {valid:.4f})" if valid is not None else ""
    if "best_iteration" in s:
        return f"best iteration {s['best_iteration']}{on_valid}"
    if "C" in s:
        return f"C = {s['C']:g}{on_valid}, {s['n_pairs']:,} training pairs"
    if "best_round" in s:
        if valid is None:
            on_valid = f" (train {s['metric']} {s['best_train_metric']:.4f})"
        return f"best round {s['best_round']} of {s['rounds_run']}{on_valid}"
    return "trained"


# ----------------------------------------------------------------------------------------- predict
def cmd_predict(args: argparse.Namespace) -> int:
    import sys

    from ctxrank.checkpoint import load_model
    from ctxrank.cli import _load_data

    predictor = load_model(args.model)
    if args.dataset is not None and args.split is None:
        args.split = "test"
    data = _load_data(args, "data", n_features=predictor.n_features)
    scores = predictor.predict(data)
    text = "".join(f"{s:.9g}\n" for s in scores.tolist())
    if args.output == "-":
        sys.stdout.write(text)
    else:
        from ctxrank.checkpoint import atomic_write

        atomic_write(Path(args.output), lambda tmp: tmp.write_text(text))
        print(f"wrote {data.n_items:,} scores ({data.n_queries:,} queries) to {args.output}", file=sys.stderr)
    return 0
