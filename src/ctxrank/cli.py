"""The ``ctxrank`` command line: a thin layer over the library.

Subcommands::

    ctxrank datasets [--data-root DIR] [--json]          table of known datasets
    ctxrank datasets show NAME                           everything known about one dataset
    ctxrank datasets download NAME [--root DIR] [--sha256 HEX] [--url URL]
    ctxrank data-info FILE | --dataset NAME [--fold K] [--split train|valid|test|all] [--json]
    ctxrank evaluate --data FILE (--scores FILE | --model DIR) [--metrics ndcg@1,ndcg@10,map]
                     [--no-relevant 0|1|skip] [--convention standard|letor4|letor3] [--json]
    ctxrank train --model NAME (--dataset NAME --fold K | --train F --valid F [--test F] | --data F)
                  --out DIR [--config F.toml] [--set key=value ...] [--seed N]
    ctxrank predict --model DIR --data FILE --output scores.txt
    ctxrank export --model DIR --format torchscript|onnx --out FILE   one file for serving
    ctxrank synth choice|letor ... --out FILE             write SYNTHETIC data (tests, demos)
    ctxrank demo                                          LightGBM lambdarank on embedded MQ2008 Fold1

A data FILE ending in .csv, .csv.gz, .tsv, .tsv.gz, .parquet or .pq is a table (one row per query-item
pair; columns named by --query-col, --label-col, --categorical, --numeric, --docid-col, or by the spec
saved with a model); any other file is LETOR / SVMlight. See :mod:`ctxrank.cli_table`.

Errors from the library (``ValueError``, ``OSError``) print as ``ctxrank: error: <message>`` and exit
with status 2; ``--debug`` shows the traceback instead. :func:`main` returns the exit status and never
raises ``SystemExit``, so tests can call it in-process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxrank import __version__

DEFAULT_METRICS = "ndcg@1,ndcg@3,ndcg@5,ndcg@10,map"
DEMO_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")


# ---------------------------------------------------------------------------------------- helpers
def _out(text: str = "") -> None:
    print(text, file=sys.stdout)


def _json_value(v: Any) -> Any:
    """JSON-ready: NaN/inf -> None, numpy scalars and arrays -> Python, Paths -> str."""
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, np.ndarray):
        return _json_value(v.tolist())
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Path):
        return str(v)
    return v


def _print_json(obj: Any) -> None:
    _out(json.dumps(_json_value(obj), indent=2, allow_nan=False))


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """A plain-text table; columns in ``right`` are right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(r: list[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


def _label_text(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _parse_no_relevant(text: str) -> float | str:
    t = text.strip().lower()
    if t == "skip":
        return "skip"
    try:
        value = float(t)
    except ValueError:
        value = None
    if value not in (0.0, 1.0):
        raise argparse.ArgumentTypeError(f"expected 0, 1 or skip, got {text!r}")
    return value


def _parse_metrics(text: str) -> list[str]:
    from ctxrank.metrics import format_metric, parse_metric

    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise ValueError("--metrics needs at least one metric, e.g. ndcg@10,map")
    return [format_metric(*parse_metric(m)) for m in names]


# ------------------------------------------------------------------------------------- data access
def _load_data(args: argparse.Namespace, file_attr: str, *, n_features: int | None = None, **table: Any):
    """The RankingData of :func:`_load_data_rows` (the data only)."""
    return _load_data_rows(args, file_attr, n_features=n_features, **table)[0]


def _load_data_rows(
    args: argparse.Namespace,
    file_attr: str,
    *,
    n_features: int | None = None,
    purpose: str = "info",
    saved_table: dict[str, Any] | None = None,
):
    """``(data, file_rows)``: the RankingData named by FILE or by ``--dataset/--fold/--split``.

    FILE is read with ``read_table`` when its name ends in a table extension (``file_rows``: each
    row's data row in the file, see :mod:`ctxrank.cli_table`), else with ``read_letor``
    (``file_rows`` None: the rows are in file order). ``n_features`` (a saved model's feature count)
    pads a sparse LETOR file whose last features are absent. ``purpose`` and ``saved_table`` (a
    model's table spec) decide how a table's columns are read (:func:`ctxrank.cli_table.resolve_spec`).
    """
    from ctxrank.cli_table import read_table_file, reject_table_options, resolve_spec
    from ctxrank.data.table import is_table_path

    path = getattr(args, file_attr, None)
    if path is not None and args.dataset is not None:
        raise ValueError("give either a data file or --dataset, not both")
    if path is None and args.dataset is None:
        raise ValueError("give a data file or --dataset NAME (see `ctxrank datasets`)")
    if path is not None:
        for opt in ("fold", "split", "variant"):
            if getattr(args, opt, None) is not None:
                raise ValueError(f"--{opt} applies to --dataset, not to a data file")
        if is_table_path(path):
            if args.query_file is not None:
                raise ValueError("--query-file applies to LETOR files; a table names its --query-col")
            spec = resolve_spec(args, path, purpose=purpose, saved=saved_table)
            return read_table_file(path, spec, scoring=purpose == "predict")
        from ctxrank.data.letor import read_letor

        reject_table_options(args, path)
        data = read_letor(path, query_file=args.query_file, n_features=n_features, cache=not args.no_cache)
        return data, None
    from ctxrank.data.registry import load_split

    reject_table_options(args, f"--dataset {args.dataset}")

    data = load_split(
        args.dataset,
        args.split or "all",
        args.fold or 1,
        root=args.data_root,
        variant=args.variant,
        cache=not args.no_cache,
    )
    return data, None


def data_summary(data, threshold: float = 1.0) -> dict[str, Any]:
    """The statistics ``ctxrank data-info`` prints, as a dict (JSON-ready)."""
    lengths = data.query_lengths
    hist = data.label_histogram()
    return {
        "source": data.source,
        "queries": data.n_queries,
        "items": data.n_items,
        "features": data.n_features,
        "label_histogram": {_label_text(k): v for k, v in sorted(hist.items())},
        "list_length": {
            "min": int(lengths.min()),
            "median": float(np.median(lengths)),
            "mean": float(lengths.mean()),
            "max": int(lengths.max()),
        },
        "relevance_threshold": threshold,
        "queries_without_relevant": data.queries_without_relevant(threshold),
        # NULL cells of a LETOR file; missing numeric cells of a table
        "null_filled": int(data.info.get("null_filled", data.info.get("missing_filled", 0))),
    }


def _summary_text(s: dict[str, Any]) -> str:
    n_items = s["items"]
    labels = "  ".join(f"{k}: {v:,} ({100.0 * v / n_items:.1f}%)" for k, v in s["label_histogram"].items())
    ll = s["list_length"]
    nr = s["queries_without_relevant"]
    rows = [
        ("source", s["source"]),
        ("queries", f"{s['queries']:,}"),
        ("items", f"{n_items:,}"),
        ("features", f"{s['features']:,}"),
        ("labels", labels),
        ("list length", f"min {ll['min']}  median {ll['median']:g}  mean {ll['mean']:.2f}  max {ll['max']}"),
        (
            f"queries with no relevant item (label >= {s['relevance_threshold']:g})",
            f"{nr:,} ({100.0 * nr / max(s['queries'], 1):.1f}%)",
        ),
        ("NULL cells filled", f"{s['null_filled']:,}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def read_scores(
    path: str | os.PathLike, n_expected: int | None = None, data_name: str = "the data"
) -> np.ndarray:
    """Scores file: one float per line, in the row order of the data file.

    Trailing blank lines are ignored; any other line that is not a finite number is an error naming
    ``file:line``. With ``n_expected`` the count must match.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such scores file")
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    values = np.empty(len(lines), dtype=np.float64)
    for i, line in enumerate(lines):
        text = line.strip()
        try:
            v = float(text)
        except ValueError:
            raise ValueError(f"{path}:{i + 1}: expected one number per line, got {text[:60]!r}") from None
        if not math.isfinite(v):
            raise ValueError(f"{path}:{i + 1}: scores must be finite, got {text!r}")
        values[i] = v
    if n_expected is not None and values.size != n_expected:
        raise ValueError(
            f"{path} has {values.size:,} scores but {data_name} has {n_expected:,} rows; "
            "give one score per row, in the data file's row order"
        )
    return values


# -------------------------------------------------------------------------------------- commands
def cmd_datasets(args: argparse.Namespace) -> int:
    from ctxrank.data import registry

    sub = getattr(args, "datasets_command", None)
    if sub == "download":
        from ctxrank.data.download import download_dataset

        spec = registry.get_spec(args.name)
        if args.url is None and spec.url is not None and args.sha256 is None and spec.sha256 is None:
            print(
                f"ctxrank: note: no known sha256 for {spec.url}; the archive is not verified", file=sys.stderr
            )
        if args.url is not None and args.sha256 is None:
            print(f"ctxrank: note: no --sha256 given; {args.url} is not verified", file=sys.stderr)
        where = download_dataset(
            spec.name,
            root=args.data_root,
            url=args.url,
            sha256=args.sha256,
            progress=not args.no_progress,
            keep_archive=args.keep_archive,
        )
        _out(f"{spec.display_name} is ready in {where}")
        if args.data_root is None and spec.embedded:
            _out(f"(load it with --data-root {where}; without a root the embedded copy is used)")
        return 0
    if sub == "show":
        spec = registry.get_spec(args.name)
        if args.json:
            _print_json(_spec_dict(spec, args.data_root))
            return 0
        d = _spec_dict(spec, args.data_root)
        rows = []
        for k, v in d.items():
            if k == "fold_table":
                continue
            if isinstance(v, list):
                v = ", ".join(str(x) for x in v)
            rows.append((k, "-" if v is None or v == "" else v))
        width = max(len(k) for k, _ in rows)
        for k, v in rows:
            _out(f"{k.ljust(width)}  {v}")
        _out()
        _out(_table(("fold", "train", "valid", "test"), spec.fold_table(), right=(0,)))
        return 0

    rows = []
    for spec in registry.DATASETS.values():
        present, where = _presence(spec, args.data_root)
        rows.append(
            (
                spec.name,
                spec.n_features,
                spec.labels_text,
                spec.n_folds,
                present,
                "auto" if spec.url else "manual",
                where,
            )
        )
    if args.json:
        _print_json([_spec_dict(spec, args.data_root) for spec in registry.DATASETS.values()])
        return 0
    _out(
        _table(("name", "features", "labels", "folds", "present", "download", "location"), rows, right=(1, 3))
    )
    _out()
    _out(
        "Files go in --data-root DIR, else $CTXRANK_DATA/<name>, else ~/.local/share/ctxrank/<name> "
        "(MQ2008: embedded in the package)."
    )
    _out(
        "`ctxrank datasets show NAME` prints citation, layout and download details; `ctxrank datasets "
        "download NAME` fetches the ones marked auto."
    )
    return 0


def _presence(spec, root) -> tuple[str, str]:
    from ctxrank.data import registry

    if root is None and spec.embedded:
        return "embedded", str(registry.embedded_dir())
    return ("yes" if registry.is_available(spec, root=root) else "no"), str(registry.dataset_root(spec, root))


def _spec_dict(spec, root) -> dict[str, Any]:
    present, where = _presence(spec, root)
    return {
        "name": spec.name,
        "display_name": spec.display_name,
        "aliases": list(spec.aliases),
        "features": spec.n_features,
        "label_levels": list(spec.label_levels),
        "layout": spec.layout,
        "folds": spec.n_folds,
        "fold_table": [
            {"fold": k, "train": tr, "valid": va, "test": te} for k, tr, va, te in spec.fold_table()
        ],
        "variants": list(spec.variants) or None,
        "size": spec.size,
        "present": present,
        "location": where,
        "homepage": spec.homepage,
        "url": spec.url,
        "archive": spec.archive_name,
        "sha256": spec.sha256,
        "sha256_source": spec.sha256_source,
        "citation": spec.citation,
        "notes": spec.notes,
    }


def cmd_data_info(args: argparse.Namespace) -> int:
    data = _load_data(args, "file")
    summary = data_summary(data, threshold=args.threshold)
    if args.json:
        _print_json(summary)
    else:
        _out(_summary_text(summary))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ctxrank.metrics import evaluate_queries, mean_metrics, metric_convention

    metrics = _parse_metrics(args.metrics)
    conv = metric_convention(
        args.convention, gain=args.gain, no_relevant=args.no_relevant, threshold=args.threshold
    )
    if (args.scores is None) == (args.model is None):
        raise ValueError("give exactly one of --scores FILE or --model DIR")
    if args.model is not None:
        from ctxrank.checkpoint import load_model, read_meta

        saved_table = read_meta(args.model).get("table")
        predictor = load_model(args.model)
        data, _ = _load_data_rows(
            args, "data", n_features=predictor.n_features, purpose="evaluate", saved_table=saved_table
        )
        scores = predictor.predict(data)
    else:
        from ctxrank.cli_table import from_file_order

        data, file_rows = _load_data_rows(args, "data", purpose="scores")
        scores = read_scores(args.scores, data.n_items, data_name=data.source or "the data")
        scores = from_file_order(scores, file_rows)
    per_query = evaluate_queries(
        scores,
        data.labels,
        data.query_offsets,
        metrics,
        convention=conv.name,
        no_relevant=conv.no_relevant,
        threshold=conv.threshold,
        gain=conv.gain,
    )
    means = mean_metrics(per_query)
    counts = {k: int(np.count_nonzero(~np.isnan(v))) for k, v in per_query.items()}
    if args.json:
        _print_json(
            {
                "data": data.source,
                "scores": str(args.scores) if args.scores is not None else None,
                "model": str(args.model) if args.model is not None else None,
                "queries": data.n_queries,
                "items": data.n_items,
                "metrics": means,
                "queries_evaluated": counts,
                "conventions": conv.to_dict(),
                "query_ids": [str(q) for q in data.query_ids],
                "per_query": per_query,
            }
        )
        return 0
    _out(f"data    {data.source} ({data.n_queries:,} queries, {data.n_items:,} items)")
    _out(f"scores  {args.scores}" if args.scores is not None else f"model   {args.model}")
    _out()
    _out(
        _table(
            ("metric", "mean", "queries"),
            [(k, f"{means[k]:.4f}" if math.isfinite(means[k]) else "nan", counts[k]) for k in metrics],
            right=(1, 2),
        )
    )
    _out()
    _out(_conventions_text(conv))
    return 0


def _conventions_text(conv) -> str:
    d = conv.to_dict()
    gain = {"exp2": "exp2 (2^y - 1)", "linear": "linear (y)"}.get(d["gain"], d["gain"])
    rows = [
        ("convention", d["name"]),
        ("gain", gain),
        ("discount", d["discount"]),
        (
            "no relevant item",
            f"{d['no_relevant']}" + (" (excluded from means)" if d["no_relevant"] == "skip" else ""),
        ),
        ("relevant means", f"label >= {d['threshold']:g} (P, MAP, MRR)"),
        ("ties", d["tie_rule"]),
        ("cutoff beyond list", d["k_beyond_list"]),
        ("source", d["source"]),
    ]
    width = max(len(k) for k, _ in rows)
    return "conventions:\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.quick:
        return _quick_demo(args)
    from ctxrank.cli_experiment import cmd_experiment

    _out(
        "ctxrank demo: the `demo` experiment (a small QILCM Table 2) on the embedded MQ2008 Fold1: "
        "LambdaMART, and ListNet, DLCM and QILCM re-ranking its top 100, 3 seeds, paired t-tests over "
        "test queries. Stored runs are reused: run it again to see the report at once."
    )
    ns = argparse.Namespace(
        spec="demo",
        out=args.out,
        runs=args.runs,
        dataset=None,
        threads=args.threads,
        overrides=[],
        report_only=False,
        no_progress=args.no_progress,
    )
    return cmd_experiment(ns)


def _quick_demo(args: argparse.Namespace) -> int:
    import lightgbm as lgb

    from ctxrank.data.registry import load_fold
    from ctxrank.metrics import evaluate_queries, mean_metrics, metric_convention

    t0 = time.perf_counter()
    fold = load_fold("mq2008", args.fold)
    summaries = {s: data_summary(getattr(fold, s)) for s in ("train", "valid", "test")}
    if not args.json:
        _out(f"MQ2008 Fold{args.fold} (embedded copy; Qin & Liu, Introducing LETOR 4.0 Datasets, 2013)")
        rows = []
        for s, d in summaries.items():
            ll = d["list_length"]
            rows.append(
                (
                    s,
                    d["source"].split("(")[-1].rstrip(")"),
                    d["queries"],
                    f"{d['items']:,}",
                    d["features"],
                    " ".join(f"{k}:{v}" for k, v in d["label_histogram"].items()),
                    f"{ll['min']}/{ll['median']:g}/{ll['mean']:.1f}/{ll['max']}",
                    d["queries_without_relevant"],
                )
            )
        _out(
            _table(
                (
                    "split",
                    "files",
                    "queries",
                    "items",
                    "features",
                    "labels",
                    "len min/med/mean/max",
                    "no rel",
                ),
                rows,
                right=(2, 3, 4, 7),
            )
        )
        _out()

    max_label = int(max(fold.train.labels.max(), fold.valid.labels.max(), fold.test.labels.max()))
    params = {
        "objective": "lambdarank",
        "metric": "ndcg",
        "eval_at": [10],
        "label_gain": [2.0**y - 1.0 for y in range(max_label + 1)],
        "learning_rate": args.learning_rate,
        "num_leaves": 31,
        "min_data_in_leaf": 20,
        "deterministic": True,
        "force_col_wise": True,
        "num_threads": args.threads or 1,
        "seed": args.seed,
        "verbose": -1,
    }
    train_set = lgb.Dataset(fold.train.features, label=fold.train.labels, group=fold.train.query_lengths)
    valid_set = lgb.Dataset(
        fold.valid.features, label=fold.valid.labels, group=fold.valid.query_lengths, reference=train_set
    )
    t1 = time.perf_counter()
    booster = lgb.train(
        params,
        train_set,
        num_boost_round=args.rounds,
        valid_sets=[valid_set],
        valid_names=["valid"],
        callbacks=[lgb.early_stopping(args.early_stopping, verbose=False)],
    )
    fit_seconds = time.perf_counter() - t1
    scores = booster.predict(fold.test.features, num_iteration=booster.best_iteration)

    results = {}
    conventions = {}
    for name in ("standard", "letor4"):
        conv = metric_convention(name)
        per_query = evaluate_queries(
            scores, fold.test.labels, fold.test.query_offsets, DEMO_METRICS, convention=name
        )
        results[name] = mean_metrics(per_query)
        conventions[name] = conv.to_dict()
    total = time.perf_counter() - t0
    model = {
        "library": f"lightgbm {lgb.__version__}",
        "params": params,
        "best_iteration": booster.best_iteration,
        "max_rounds": args.rounds,
        "early_stopping_rounds": args.early_stopping,
        "fit_seconds": fit_seconds,
    }
    if args.json:
        _print_json(
            {
                "dataset": "mq2008",
                "fold": args.fold,
                "splits": summaries,
                "model": model,
                "test_metrics": results,
                "conventions": conventions,
                "seconds": total,
            }
        )
        return 0
    _out(
        f"LightGBM lambdarank (label_gain 2^y-1, lr {args.learning_rate}, seed {args.seed}, deterministic): "
        f"best iteration {booster.best_iteration} of at most {args.rounds} "
        f"(early stopping on valid NDCG@10, patience {args.early_stopping}), fit {fit_seconds:.1f} s"
    )
    _out()
    _out(f"test ({fold.test.n_queries} queries, {fold.test.n_items:,} items)")
    _out(
        _table(
            ("metric", "standard", "letor4"),
            [(m, f"{results['standard'][m]:.4f}", f"{results['letor4'][m]:.4f}") for m in DEMO_METRICS],
            right=(1, 2),
        )
    )
    _out()
    _out(
        "standard: gain 2^y-1, discount 1/log2(1+r), no-relevant queries score 0 and count in the mean, "
        "ties stable by file order."
    )
    _out(
        "letor4:   Eval-Score-4.0.pl rules: ranks 1-2 undiscounted then 1/log2(r), NDCG@k = 0 for a query "
        "shorter than k, no-relevant = 0."
    )
    n_norel = fold.test.queries_without_relevant()
    _out(f"{n_norel} of {fold.test.n_queries} test queries have no relevant item (scored 0 under both).")
    _out(f"done in {total:.1f} s")
    return 0


# ---------------------------------------------------------------------------------------- parser
def _add_dataset_options(p: argparse.ArgumentParser, *, defaults_text: str) -> None:
    g = p.add_argument_group("registered dataset")
    g.add_argument("--dataset", metavar="NAME", help="a dataset of `ctxrank datasets` instead of a file")
    g.add_argument("--fold", type=int, metavar="K", help="fold number (default 1)")
    g.add_argument(
        "--split",
        choices=("train", "valid", "vali", "test", "all"),
        help=f"which split of the fold ({defaults_text})",
    )
    g.add_argument(
        "--variant", metavar="V", help="feature variant (OHSUMED: QueryLevelNorm, Feature-min, ...)"
    )
    g.add_argument(
        "--data-root",
        "--root",
        dest="data_root",
        metavar="DIR",
        help="directory holding the dataset's files "
        "(default $CTXRANK_DATA/<name>, else ~/.local/share/ctxrank/<name>)",
    )
    p.add_argument("--query-file", metavar="FILE", help="group-size file for a data file without qid:")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the binary parse cache")


def _add_table_options(p: argparse.ArgumentParser, *, saved_spec: bool = False) -> None:
    from ctxrank.cli_table import add_table_options

    add_table_options(p, saved_spec=saved_spec)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors"
    )

    parser = argparse.ArgumentParser(
        prog="ctxrank",
        description=(
            "ctxrank: learning to rank with listwise context models on PyTorch. "
            "Inspect LETOR data, train and apply rankers, evaluate ranking scores with explicit metric "
            "conventions, run the demo."
        ),
        epilog="Run `ctxrank COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"ctxrank {__version__}")
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # datasets ---------------------------------------------------------------------------------
    p = sub.add_parser(
        "datasets",
        parents=[common],
        help="list known datasets; download one",
        description=(
            "Table of the dataset registry: feature count, label levels, folds, whether the files are "
            "present and where they go. Subcommands: `show NAME` (citation, layout, download details) "
            "and `download NAME`."
        ),
    )
    p.add_argument("--data-root", "--root", dest="data_root", metavar="DIR", help="check this directory")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_datasets)
    dsub = p.add_subparsers(dest="datasets_command", metavar="{show,download}")
    ps = dsub.add_parser(
        "show",
        parents=[common],
        help="everything known about one dataset",
        description="Citation, fold table, file layout, download address and checksum status of one dataset.",
    )
    ps.add_argument("name", metavar="NAME", help="dataset name or alias (case-insensitive)")
    ps.add_argument("--data-root", "--root", dest="data_root", metavar="DIR", help="check this directory")
    ps.add_argument("--json", action="store_true", help="machine-readable output")
    pd = dsub.add_parser(
        "download",
        parents=[common],
        help="download, verify and unpack a dataset",
        description=(
            "Download a dataset archive (streamed, atomic), verify its sha256 when known or given, unpack "
            ".zip/.tar.* archives and check the fold layout. RAR archives (LETOR 4.0) must be unpacked "
            "by hand. Datasets without a public direct address (Yahoo!, MQ2007, OHSUMED) need --url or "
            "a manual download; `ctxrank datasets show NAME` says where to get them."
        ),
    )
    pd.add_argument("name", metavar="NAME", help="dataset name or alias")
    pd.add_argument(
        "--root",
        "--data-root",
        dest="data_root",
        metavar="DIR",
        help="target directory (default $CTXRANK_DATA/<name>, else ~/.local/share/ctxrank/<name>)",
    )
    pd.add_argument("--sha256", metavar="HEX", help="expected sha256 of the archive (overrides the registry)")
    pd.add_argument("--url", metavar="URL", help="download address (overrides the registry's)")
    pd.add_argument("--keep-archive", action="store_true", help="keep the archive after unpacking")
    pd.add_argument("--no-progress", action="store_true", help="no progress bar")

    # data-info --------------------------------------------------------------------------------
    p = sub.add_parser(
        "data-info",
        parents=[common],
        help="statistics of a LETOR file, a table or a registered dataset",
        description=(
            "Queries, items, features, label histogram, list-length statistics (min/median/mean/max), "
            "queries with no relevant item and NULL cells filled, for a LETOR/SVMlight FILE (.txt or .gz), "
            "a table (.csv/.tsv/.parquet, with --query-col and --label-col) or a registered --dataset "
            "(default: the whole dataset, all splits). Example: `ctxrank data-info --dataset mq2008`."
        ),
    )
    p.add_argument(
        "file", nargs="?", metavar="FILE", help="LETOR / SVMlight file (.txt or .gz) or a table (.csv, ...)"
    )
    _add_dataset_options(p, defaults_text="default all: the whole dataset")
    _add_table_options(p)
    p.add_argument(
        "--threshold", type=float, default=1.0, help="relevant means label >= THRESHOLD (default 1)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_data_info)

    # evaluate ---------------------------------------------------------------------------------
    p = sub.add_parser(
        "evaluate",
        parents=[common],
        help="evaluate a scores file or a saved model against labelled data",
        description=(
            "Mean ranking metrics of a scores file (one float per line, in the data file's row order; the "
            "count must equal the number of rows), or of a model saved by `ctxrank train` (--model), "
            "against the labels of a LETOR file, a table (.csv/.tsv/.parquet) or a registered dataset "
            "split. A table is read with the model's saved table spec (--model) or with --query-col and "
            "--label-col (--scores). The conventions used (gain, discount, ties, no-relevant queries, "
            "cutoffs beyond the list) are printed with the result; --json adds per-query vectors with "
            "query ids."
        ),
    )
    p.add_argument(
        "--data",
        metavar="FILE",
        help="file with the labels: LETOR / SVMlight (.txt or .gz) or a table (.csv, .tsv, .parquet, ...)",
    )
    p.add_argument("--scores", metavar="FILE", help="one score per line, in row order")
    p.add_argument("--model", metavar="DIR", help="a model saved by `ctxrank train` (instead of --scores)")
    p.add_argument(
        "--metrics",
        default=DEFAULT_METRICS,
        help=f"comma-separated: ndcg[@k], dcg[@k], map, p@k, mrr[@k], err[@k] (default {DEFAULT_METRICS})",
    )
    p.add_argument(
        "--convention",
        choices=("standard", "letor4", "letor3"),
        default="standard",
        help="standard, or the rules of the LETOR 4.0 / 3.0 evaluation scripts (default standard)",
    )
    p.add_argument(
        "--no-relevant",
        type=_parse_no_relevant,
        default=0.0,
        metavar="{0,1,skip}",
        help="value of a query without relevant items; skip = leave it out of the means (default 0)",
    )
    p.add_argument(
        "--gain", choices=("exp2", "linear"), default="exp2", help="NDCG gain (default exp2: 2^y-1)"
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=1.0,
        help="relevant means label >= THRESHOLD for P/MAP/MRR (default 1)",
    )
    _add_dataset_options(p, defaults_text="default all")
    _add_table_options(p, saved_spec=True)
    p.add_argument("--json", action="store_true", help="machine-readable output with per-query vectors")
    p.set_defaults(func=cmd_evaluate)

    # train, predict ---------------------------------------------------------------------------
    from ctxrank.cli_train import add_commands

    add_commands(sub, common)

    # synth ------------------------------------------------------------------------------------
    from ctxrank.cli_synth import add_synth_command

    add_synth_command(sub, common)

    # experiment, compare ----------------------------------------------------------------------
    from ctxrank.cli_experiment import add_commands as add_experiment_commands

    add_experiment_commands(sub, common)

    # export -----------------------------------------------------------------------------------
    from ctxrank.cli_export import add_commands as add_export_commands

    add_export_commands(sub, common)

    # demo -------------------------------------------------------------------------------------
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="the `make demo` job: a small QILCM Table 2 experiment on the embedded MQ2008",
        description=(
            "Runs the built-in `demo` experiment (`ctxrank experiment demo`): on the embedded MQ2008 "
            "Fold1, LambdaMART and ListNet, DLCM and QILCM re-ranking its top 100, 3 seeds; prints the "
            "table with paired t-tests and writes the report (results.json, table.md/.csv, metrics.png) "
            "to --out. --quick instead fits one LightGBM lambdarank model and prints test NDCG@1/3/5/10 "
            "and MAP under the standard and LETOR 4.0 conventions (about ten seconds)."
        ),
    )
    p.add_argument("--out", metavar="DIR", default="results/demo", help="report directory (results/demo)")
    p.add_argument("--runs", type=int, metavar="N", help="runs of the demo experiment (default 3)")
    p.add_argument("--threads", type=int, help="threads (experiment: 2; --quick: 1, reproducible)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    q = p.add_argument_group("--quick: one LightGBM model")
    q.add_argument("--quick", action="store_true", help="LightGBM lambdarank alone, no experiment")
    q.add_argument("--fold", type=int, default=1, metavar="K", help="MQ2008 fold 1..5 (default 1)")
    q.add_argument("--seed", type=int, default=0, help="LightGBM seed (default 0)")
    q.add_argument("--rounds", type=int, default=500, help="maximum boosting rounds (default 500)")
    q.add_argument("--early-stopping", type=int, default=50, metavar="N", help="patience (default 50)")
    q.add_argument("--learning-rate", type=float, default=0.05, help="default 0.05")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 usage or data error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors: argparse has printed already
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `ctxrank ... | head`: stop quietly, as the reader went away
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1
    except (ValueError, OSError) as exc:
        if args.debug:
            raise
        print(f"ctxrank: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("ctxrank: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
