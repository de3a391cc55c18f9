"""``ctxrank train`` and ``ctxrank predict``: train a ranker, save it, score new lists.

Kept apart from :mod:`ctxrank.cli` (data and evaluation commands) so each module stays readable;
``cli.build_parser`` registers these subcommands through :func:`add_commands`.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def _fractions(text: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"expected three numbers TRAIN,VALID,TEST, got {text!r}")
    return values  # type: ignore[return-value]


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    from ctxrank.cli import _add_dataset_options, _add_table_options

    p = sub.add_parser(
        "train",
        parents=[common],
        help="train a ranker and save it",
        description=(
            "Train a model on a registered dataset fold (--dataset NAME --fold K), on files "
            "(--train F --valid F [--test F]) or on one file split at random by query into train / "
            "validation / test (--data F, 60/20/20 by default, drawn from train.seed), with early "
            "stopping on the validation split. Files may be LETOR/SVMlight or tables (.csv, .csv.gz, "
            ".tsv, .tsv.gz, .parquet, .pq) with the tabular-data options. Saves "
            "model.safetensors, ctxrank.json (metadata), config.toml (the resolved config), "
            "train_log.jsonl (one record per epoch) and, when a test split is given, test_metrics.json "
            "(the test split is evaluated once, at the end). The baselines save their own model files "
            "instead of the weights: LambdaMART model.txt (LightGBM), RankSVM and AdaRank everything in "
            "ctxrank.json. A model trained on a table saves its table spec (columns and categorical "
            "encoder) in ctxrank.json, so predict/evaluate read new tables the same way. Examples: "
            "`ctxrank train --model listnet --dataset mq2008 --fold 1 --out runs/listnet`; "
            "`ctxrank train --model qilcm --data sessions.csv --query-col session --label-col chosen "
            "--categorical airline,cabin --out runs/q`. A neural model's training state is saved "
            "atomically after every epoch in DIR/resume (removed when the run finishes); "
            "`ctxrank train --resume DIR` continues a killed run from its last finished epoch and ends "
            "bitwise as the uninterrupted run would have."
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
    p.add_argument("--out", metavar="DIR", help="output directory (required unless --resume)")
    p.add_argument(
        "--resume",
        metavar="DIR",
        help=(
            "continue the interrupted run in DIR from its last finished epoch, with the options, "
            "config and data it was started with (recorded in DIR/resume/run.json; other options, "
            "when given, must agree with them)"
        ),
    )
    p.add_argument(
        "--train", dest="train_file", metavar="FILE", help="training file (LETOR/SVMlight or a table)"
    )
    p.add_argument("--valid", dest="valid_file", metavar="FILE", help="validation file")
    p.add_argument("--test", dest="test_file", metavar="FILE", help="test file (evaluated once at the end)")
    p.add_argument(
        "--data",
        dest="data_file",
        metavar="FILE",
        help="one file (LETOR/SVMlight or a table), split at random by query into train/valid/test",
    )
    p.add_argument(
        "--split-fractions",
        type=_fractions,
        metavar="TR,VA,TE",
        help="query fractions of the --data split (default 0.6,0.2,0.2)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_dataset_options(p, defaults_text="not used by train")
    _add_table_options(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "predict",
        parents=[common],
        help="score a LETOR file or a table with a saved model",
        description=(
            "Score every row of a LETOR/SVMlight file, a table (.csv, .csv.gz, .tsv, .tsv.gz, .parquet, "
            ".pq) or a registered dataset split with a model saved by `ctxrank train`; writes one score "
            "per line, in the FILE's row order (also for a table whose rows are not grouped by query: "
            "the regrouping done for the model is undone). A table is read with the table spec saved "
            "with the model (columns, categorical encoder: unseen or missing categories get code 0, "
            "missing numbers 0); its label column is not read (it may be absent)."
        ),
    )
    p.add_argument("--model", required=True, metavar="DIR", help="directory written by `ctxrank train`")
    p.add_argument("--data", metavar="FILE", help="LETOR / SVMlight file or table to score")
    p.add_argument(
        "--output", "-o", required=True, metavar="FILE", help="scores file to write ('-' = stdout)"
    )
    _add_dataset_options(p, defaults_text="default test")
    _add_table_options(p, saved_spec=True)
    p.set_defaults(func=cmd_predict)


# ------------------------------------------------------------------------------------------- train
@dataclass
class TrainingData:
    """The splits ``ctxrank train`` uses and what to record about them."""

    train: Any
    valid: Any
    test: Any
    what: str
    meta: dict[str, Any] = field(default_factory=dict)  # extra ctxrank.json entries: table, split
    split: dict[str, Any] | None = None  # the --data split record


def _training_data(args: argparse.Namespace, seed: int) -> TrainingData:
    """The splits from --dataset/--fold, --train/--valid/--test or --data (split by query at random)."""
    from ctxrank.cli_table import reject_table_options

    files = (args.train_file, args.valid_file, args.test_file)
    if args.split_fractions is not None and args.data_file is None:
        raise ValueError("--split-fractions applies to --data FILE (one file split into train/valid/test)")
    if args.dataset is not None:
        if any(files) or args.data_file is not None:
            raise ValueError(
                "give either --dataset or data files (--train/--valid/--test or --data), not both"
            )
        if args.split is not None:
            raise ValueError("--split does not apply to train (it uses the fold's train/valid/test)")
        reject_table_options(args, f"--dataset {args.dataset}")
        from ctxrank.data.registry import load_fold

        fold = load_fold(
            args.dataset, args.fold or 1, root=args.data_root, variant=args.variant, cache=not args.no_cache
        )
        return TrainingData(fold.train, fold.valid, fold.test, f"{args.dataset} fold {args.fold or 1}")
    for opt in ("fold", "variant", "split"):
        if getattr(args, opt, None) is not None:
            raise ValueError(f"--{opt} applies to --dataset, not to data files")
    if args.data_file is not None:
        if any(files):
            raise ValueError("give either --data FILE (split at random) or --train/--valid/--test, not both")
        return _split_one_file(args, seed)
    if not (args.train_file and args.valid_file):
        raise ValueError(
            "give --dataset NAME [--fold K], --train FILE --valid FILE [--test FILE], or --data FILE"
        )
    from ctxrank.data.table import is_table_path

    given = [f for f in files if f]
    tables = [is_table_path(f) for f in given]
    if any(tables) and not all(tables):
        raise ValueError(
            f"--train/--valid/--test must all be tables or all LETOR files, got {', '.join(given)}"
        )
    if all(tables):
        return _read_table_files(args)
    reject_table_options(args, args.train_file)
    from ctxrank.data.letor import read_letor

    train = read_letor(args.train_file, query_file=args.query_file, cache=not args.no_cache)
    other = {"n_features": train.n_features, "cache": not args.no_cache}
    valid = read_letor(args.valid_file, **other)
    test = read_letor(args.test_file, **other) if args.test_file else None
    return TrainingData(train, valid, test, f"train {args.train_file}")


def _table_spec(args: argparse.Namespace, path: str):
    from ctxrank.cli_table import resolve_spec

    if args.query_file is not None:
        raise ValueError("--query-file applies to LETOR files; a table names its --query-col")
    return resolve_spec(args, path, purpose="train")


def _read_table_files(args: argparse.Namespace) -> TrainingData:
    """--train/--valid/--test tables: the encoder and the numeric columns come from the training file."""
    from dataclasses import replace

    from ctxrank.cli_table import read_table_file, table_meta
    from ctxrank.data.table import CategoricalEncoder

    spec = _table_spec(args, args.train_file)
    encoder = CategoricalEncoder()
    train, _ = read_table_file(args.train_file, spec, encoder=encoder)  # fits the encoder in place
    fitted = replace(spec, numeric=tuple(train.feature_names), encoder=encoder)
    valid, _ = read_table_file(args.valid_file, fitted)
    test = read_table_file(args.test_file, fitted)[0] if args.test_file else None
    meta = {"table": table_meta(spec, train, encoder)}
    return TrainingData(train, valid, test, f"train {args.train_file}", meta=meta)


def _split_one_file(args: argparse.Namespace, seed: int) -> TrainingData:
    """--data FILE: read it, split its queries at random (train.seed), re-fit the encoder on train."""
    from ctxrank.cli_table import read_table_file, reject_table_options, table_meta
    from ctxrank.data.split import DEFAULT_FRACTIONS, split_queries
    from ctxrank.data.table import CategoricalEncoder, is_table_path, refit_categorical

    path = args.data_file
    fractions = args.split_fractions or DEFAULT_FRACTIONS
    meta: dict[str, Any] = {}
    if is_table_path(path):
        spec = _table_spec(args, path)
        encoder = CategoricalEncoder()
        full, _ = read_table_file(path, spec, encoder=encoder)
        train, valid, test, record = split_queries(full, fractions, seed)
        if spec.categorical:  # the vocabulary of the whole file -> of the training queries only
            encoder, (train, valid, test) = refit_categorical(encoder, train, valid, test)
        meta["table"] = table_meta(spec, train, encoder)
    else:
        from ctxrank.data.letor import read_letor

        reject_table_options(args, path)
        full = read_letor(path, query_file=args.query_file, cache=not args.no_cache)
        train, valid, test, record = split_queries(full, fractions, seed)
    meta["split"] = record
    return TrainingData(train, valid, test, f"{path} (random query split)", meta=meta, split=record)


def _split_text(record: dict[str, Any]) -> str:
    q = record["queries"]
    fr = "/".join(f"{100 * f:g}" for f in record["fractions"])
    return (
        f"split: {sum(q.values())} queries of {record['source']} at random by query (seed {record['seed']}, "
        f"{fr} %): train {q['train']}, valid {q['valid']}, test {q['test']} queries"
    )


RESUME_DIR = "resume"  # OUT/resume: the training state of an unfinished run (ctxrank.training.resume)
PATH_OPTIONS = ("config", "train_file", "valid_file", "test_file", "data_file", "data_root", "query_file")
NOT_RECORDED = ("func", "resume", "no_progress", "debug", "command")


def _train_parser() -> argparse.ArgumentParser:
    from ctxrank.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["train"]


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value))


def _defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Every recorded option's default value (as JSON)."""
    return _jsonable({k: v for k, v in vars(parser.parse_args([])).items() if k not in NOT_RECORDED})


def _recorded_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run's options as JSON, paths made absolute (so ``--resume`` works from any directory)."""
    options = {k: v for k, v in vars(args).items() if k not in NOT_RECORDED}
    for key in PATH_OPTIONS:
        if options.get(key) is not None:
            options[key] = str(Path(options[key]).absolute())
    return _jsonable(options)


def _command_line(options: dict[str, Any]) -> list[str]:
    """A ``ctxrank train`` argv repeating the recorded options (for the record; ``--resume`` reads
    the options themselves)."""
    parser = _train_parser()
    defaults = _defaults(parser)
    argv = ["ctxrank", "train"]
    for action in parser._actions:
        dest = action.dest
        if not action.option_strings or dest not in options or options[dest] == defaults.get(dest):
            continue
        flag, value = action.option_strings[0], options[dest]
        if isinstance(value, bool):
            argv.append(flag)
        elif dest == "overrides":
            for v in value:
                argv += [flag, str(v)]
        elif isinstance(value, list):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def _resumed_run(args: argparse.Namespace) -> tuple[argparse.Namespace, Any, dict[str, Any]]:
    """``--resume DIR``: the recorded options and config of the run in DIR (refusing a finished run,
    a directory without training state and options that differ from the recorded ones)."""
    from ctxrank._io import read_json_file
    from ctxrank.config import RunConfig
    from ctxrank.training.resume import RUN_FILE

    out = Path(args.resume)
    if args.out is not None and Path(args.out).absolute() != out.absolute():
        raise ValueError(f"--resume {out} continues the run in {out}; --out, when given, must be the same")
    run_file = out / RESUME_DIR / RUN_FILE
    if not run_file.is_file():
        if (out / "ctxrank.json").exists():
            raise ValueError(f"{out} already holds a finished model (ctxrank.json): nothing to resume")
        raise ValueError(
            f"{out}: no training state to resume ({run_file} is missing: the directory was not written by "
            "`ctxrank train --out`, or its run never started training)"
        )
    record = read_json_file(run_file, "run record")
    if not isinstance(record, dict) or record.get("kind") != "ctxrank-train-run":
        raise ValueError(f"{run_file}: not a ctxrank run record")
    try:
        saved, config = dict(record["options"]), RunConfig.from_dict(record["config"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{run_file}: malformed run record ({exc!r})") from None
    parser = _train_parser()
    defaults = _defaults(parser)
    given = _recorded_options(args)
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    differ = [
        f"{flags.get(k, k)} {v!r} (recorded: {saved.get(k)!r})"
        for k, v in given.items()
        if k != "out" and v != defaults.get(k) and v != saved.get(k)
    ]
    if differ:
        raise ValueError(
            f"--resume continues the run with the options it was started with ({run_file}); these differ: "
            + ", ".join(differ)
            + ". Resume without them, or start a new run with another --out"
        )
    # JSON gave lists where argparse gives tuples (--split-fractions, --categorical, --numeric)
    saved = {k: tuple(v) if isinstance(v, list) and k != "overrides" else v for k, v in saved.items()}
    resumed = argparse.Namespace(**{**vars(args), **saved})
    resumed.out, resumed.resume = str(out), str(out)
    return resumed, config, record


def cmd_train(args: argparse.Namespace) -> int:
    from ctxrank.cli import _out
    from ctxrank.registry import is_baseline

    record = None
    if args.resume is not None:
        args, config, record = _resumed_run(args)
    else:
        if args.out is None:
            raise ValueError("give --out DIR (or --resume DIR to continue an interrupted run)")
        config = _resolved_config(args)
    from ctxrank.training.distributed import init_from_env

    ctx = init_from_env(config.train.device)  # torchrun: data-parallel (ctxrank.training.distributed)
    if ctx.enabled:
        try:
            if is_baseline(config.model):
                raise ValueError(
                    f"torchrun data-parallel training applies to the neural models, not {config.model} "
                    "(for LambdaMART beyond one machine use LightGBM's own distributed training, e.g. "
                    "lightgbm.dask; see docs/training.md)"
                )
            if not ctx.is_main:
                _out = _quiet
            return _train(args, config, out=Path(args.out), main=ctx.is_main, say=_out, record=record)
        finally:
            import torch.distributed

            torch.distributed.destroy_process_group()
    return _train(args, config, out=Path(args.out), main=True, say=_out, record=record)


def _resolved_config(args: argparse.Namespace) -> Any:
    from ctxrank.config import resolve_config

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
    return resolve_config(args.config, overrides)


def _quiet(*_: Any) -> None:
    pass


def _train(
    args: argparse.Namespace,
    config: Any,
    *,
    out: Path,
    main: bool,
    say: Any,
    record: dict[str, Any] | None = None,
) -> int:
    """Train and save; ``record``: the run record of ``--resume`` (None: a new run)."""
    import os
    import shutil

    from ctxrank._io import write_json
    from ctxrank.cli import _table
    from ctxrank.metrics import mean_metrics, metric_convention
    from ctxrank.registry import is_baseline
    from ctxrank.training.distributed import world
    from ctxrank.training.loop import NonFiniteLossError
    from ctxrank.training.resume import RUN_FILE, STATE_FILE, StateDir
    from ctxrank.training.run import run_training

    _out = say
    state_dir = out / RESUME_DIR
    resume = record is not None
    if not resume and ((state_dir / RUN_FILE).exists() or (state_dir / STATE_FILE).exists()):
        raise ValueError(
            f"{out} holds an unfinished run ({state_dir}): continue it with `ctxrank train --resume {out}`, "
            f"or remove {state_dir} (or choose another --out) to start a new one"
        )
    if not resume and (out / "ctxrank.json").exists():
        raise ValueError(f"{out} already holds a saved model; choose another --out or remove it")
    if is_baseline(config.model) and config.model != "lambdamart" and args.categorical:
        raise ValueError(
            f"{config.model} uses numeric features only and would ignore the categorical columns "
            f"{','.join(args.categorical)}; drop --categorical and name the numeric columns with --numeric, "
            "or train a neural model (mlp, qilcm, dcm, ...) that embeds them"
        )
    td = _training_data(args, config.train.seed)
    train, valid, test, what = td.train, td.valid, td.test, td.what
    counts = f"train {train.n_queries} queries, valid {valid.n_queries}" + (
        f", test {test.n_queries}" if test is not None else ""
    )
    rr = config.rerank
    how = f" re-ranking LambdaMART's top {rr.top_k}" if rr.initial else ""
    if td.split is not None:
        _out(_split_text(td.split))
    if train.categorical is not None:
        cards = dict(zip(train.categorical_names, train.categorical_cardinalities, strict=True))
        _out(
            f"table: {train.n_features} numeric columns ({', '.join(train.feature_names)}), categorical "
            f"{', '.join(f'{k} ({v - 1} values + unknown)' for k, v in cards.items())}; "
            "the encoder is fitted on the training split"
        )
        if rr.initial:
            _out(
                "note: the initial ranker (LambdaMART) takes the categorical columns as LightGBM "
                "categorical features; the re-ranker embeds them"
            )
    _out(f"{config.model} ({config.loss_name} loss){how} on {what}: {counts}")
    if record is None:
        options = _recorded_options(args)
        record = {
            "format_version": 1,
            "kind": "ctxrank-train-run",
            "command": _command_line(options),
            "cwd": os.getcwd(),
            "options": options,
            "config": config.to_dict(),
        }
        world().barrier()  # under torchrun every rank has checked the directory before rank 0 writes
        if main:
            write_json(state_dir / RUN_FILE, record)
    else:
        done = StateDir(state_dir).saved_epoch()
        _out(
            f"resuming {out}: "
            + (
                f"epoch {done} was the last one saved; training goes on after it"
                if done is not None
                else "no epoch had finished; training starts from epoch 1"
            )
        )
    meta = {**td.meta, "command": {k: record[k] for k in ("command", "cwd", "options")}}
    t0 = time.perf_counter()
    try:
        result = run_training(
            config,
            train,
            valid,
            test,
            out=out if main else None,
            progress=not args.no_progress,
            log=_out,
            meta=meta,
            state_dir=state_dir,
            resume=resume,
        )
    except NonFiniteLossError as exc:
        import sys

        if getattr(args, "debug", False):
            raise
        best = StateDir(state_dir).best_file()
        where = (
            f"\nthe last good epoch's training state is kept in {state_dir}; its best weights are in "
            f"{best} (a safetensors state dict)"
            if best is not None
            else ""
        )
        if main:
            print(f"ctxrank: error: {exc}{where}", file=sys.stderr)
        return 1
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
        report = {
            "data": test.source,
            "metrics": means,
            "conventions": conv.to_dict(),
            "ideal": rr.ideal if rr.initial else "full",
            **({"split": td.split} if td.split is not None else {}),
            "query_ids": [str(q) for q in test.query_ids],
            "per_query": {
                k: [None if np.isnan(x) else float(x) for x in v] for k, v in result.test_metrics.items()
            },
        }
        rows = [(k, f"{v:.4f}") for k, v in means.items()]
        headers: tuple[str, ...] = ("test metric", config.model)
        if result.initial_test_metrics is not None:
            initial = mean_metrics(result.initial_test_metrics)
            report["initial_metrics"] = initial
            rows = [(k, f"{initial[k]:.4f}", v) for k, v in rows]
            headers = ("test metric", "lambdamart", f"{config.model} re-ranked")
        if main:
            write_json(out / "test_metrics.json", report)
        _out()
        _out(_table(headers, rows, right=tuple(range(1, len(headers)))))
    if main:  # the run is complete: its training state is no longer needed
        shutil.rmtree(state_dir, ignore_errors=True)
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

    from ctxrank.checkpoint import load_model, read_meta
    from ctxrank.cli import _load_data_rows
    from ctxrank.cli_table import to_file_order

    saved_table = read_meta(args.model).get("table")
    predictor = load_model(args.model)
    if args.dataset is not None and args.split is None:
        args.split = "test"
    data, file_rows = _load_data_rows(
        args, "data", n_features=predictor.n_features, purpose="predict", saved_table=saved_table
    )
    scores = to_file_order(predictor.predict(data), file_rows)  # the file's row order
    text = "".join(f"{s:.9g}\n" for s in scores.tolist())
    if args.output == "-":
        sys.stdout.write(text)
    else:
        from ctxrank._io import atomic_write

        atomic_write(Path(args.output), lambda tmp: tmp.write_text(text))
        print(f"wrote {data.n_items:,} scores ({data.n_queries:,} queries) to {args.output}", file=sys.stderr)
    return 0
