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

TRAIN_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")


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
            "(the test split is evaluated once, at the end). Example: "
            "`ctxrank train --model listnet --dataset mq2008 --fold 1 --out runs/listnet`."
        ),
    )
    p.add_argument("--model", help="model name (e.g. listnet, mlp); default: the config file's, else listnet")
    p.add_argument("--loss", help="ranking loss (default: the model's own)")
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
    import functools

    from ctxrank.checkpoint import save_checkpoint, write_json
    from ctxrank.cli import _out, _table
    from ctxrank.config import resolve_config
    from ctxrank.data.transforms import make_transform
    from ctxrank.losses import get_loss
    from ctxrank.metrics import evaluate_queries, mean_metrics, metric_convention
    from ctxrank.models import make_model
    from ctxrank.train import fit, predict, seed_everything

    overrides = list(args.overrides)
    if args.model:
        overrides.append(f"model={args.model}")
    if args.loss:
        overrides.append(f"loss={args.loss}")
    if args.seed is not None:
        overrides.append(f"train.seed={args.seed}")
    config = resolve_config(args.config, overrides)
    out = Path(args.out)
    if (out / "ctxrank.json").exists():
        raise ValueError(f"{out} already holds a saved model; choose another --out or remove it")
    train, valid, test, what = _training_data(args)
    tc = config.train
    _out(
        f"{config.model} ({config.loss_name} loss) on {what}: train {train.n_queries} queries, "
        f"valid {valid.n_queries}" + (f", test {test.n_queries}" if test is not None else "")
    )

    seed_everything(tc.seed, tc.threads)
    transform = make_transform(config.transform).fit(train)
    train_n, valid_n = transform.transform(train), transform.transform(valid)
    model = make_model(
        config.model,
        train.n_features,
        config.model_params,
        categorical_cardinalities=train.categorical_cardinalities,
    )
    loss_fn = functools.partial(get_loss(config.loss_name), **config.loss_params)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_log.jsonl").unlink(missing_ok=True)
    t0 = time.perf_counter()
    result = fit(
        model, loss_fn, train_n, valid_n, tc, log_path=out / "train_log.jsonl", progress=not args.no_progress
    )
    conv = metric_convention("standard", no_relevant=tc.no_relevant)
    save_checkpoint(
        out, model, config, transform, train_data=train, summary=result.to_dict(), conventions=conv.to_dict()
    )
    _out(
        f"best epoch {result.best_epoch} of {result.epochs_run} "
        f"(valid {tc.metric} {result.best_metric:.4f}), "
        f"{time.perf_counter() - t0:.1f} s; saved to {out}"
    )
    if test is not None:
        scores = predict(model, transform.transform(test))
        per_query = evaluate_queries(
            scores, test.labels, test.query_offsets, TRAIN_METRICS, no_relevant=tc.no_relevant
        )
        means = mean_metrics(per_query)
        write_json(
            out / "test_metrics.json",
            {
                "data": test.source,
                "metrics": means,
                "conventions": conv.to_dict(),
                "query_ids": [str(q) for q in test.query_ids],
                "per_query": {
                    k: [None if np.isnan(x) else float(x) for x in v] for k, v in per_query.items()
                },
            },
        )
        _out()
        _out(_table(("test metric", "mean"), [(k, f"{v:.4f}") for k, v in means.items()], right=(1,)))
    return 0


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
