"""``ctxrank datasets``, ``ctxrank data-info``, ``ctxrank synth`` and ``ctxrank data-shards``: the data
commands.

``data-shards`` writes data files (LETOR, tables) or a registered split as the Parquet shards that
``ctxrank train --train-shards`` streams (:mod:`ctxrank.data.stream`), one input file in memory at a time.

``synth`` writes SYNTHETIC files for tests, demos and benchmarks: ``synth choice`` airline-itinerary
choice sessions (the chooser's own probabilities go to a SEPARATE ``<stem>.chooser.csv`` so they can
never be read as a feature), ``synth letor`` an MSLR-shaped LETOR text file. Nothing measured on
them says anything about real data; every run says so.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ctxrank._checks import check_choice
from ctxrank._declare import declared, from_namespace
from ctxrank._io import atomic_write, claim_output_dir, writing
from ctxrank.cli._options import (
    SCORING_SKIP,
    add_data_root,
    add_data_source,
    add_declared,
    add_json,
    add_progress,
    key_value_lines,
    note,
    out,
    positive_int,
    print_json,
    seed_int,
    table,
)
from ctxrank.cli._outputs import check_output_file
from ctxrank.clicks import click_models as cm
from ctxrank.clicks import simulate as sim
from ctxrank.data import registry
from ctxrank.data.download import DownloadOptions, download_dataset
from ctxrank.data.sources import DataSource, ModelInputs
from ctxrank.data.stream import write_shards
from ctxrank.data.summary import data_summary
from ctxrank.data.synth import LetorShape, write_synthetic_letor
from ctxrank.data.synth_choice import make_choice_sessions
from ctxrank.data.table import TABLE_EXTENSIONS, _format_of

SYNTHETIC_NOTE = "note: these data are SYNTHETIC (generated, not measured); use them for tests and demos only"


# --------------------------------------------------------------------------------------- datasets
def datasets(*, data_root: str | None = None, json: bool = False) -> int:
    """The table of known datasets: features, labels, folds, presence, download, location."""
    specs = list(registry.DATASETS.values())
    if json:
        print_json([_spec_dict(spec, data_root) for spec in specs])
        return 0
    rows = []
    for spec in specs:
        present, where = _presence(spec, data_root)
        download = "auto" if spec.url else "manual"
        rows.append((spec.name, spec.n_features, spec.labels_text, spec.n_folds, present, download, where))
    headers = ("name", "features", "labels", "folds", "present", "download", "location")
    out(table(headers, rows, right=(1, 3)))
    out()
    out(
        "Files go in --data-root DIR, else $CTXRANK_DATA/<name>, else ~/.local/share/ctxrank/<name> "
        "(MQ2008 and the choice datasets: embedded in the package)."
    )
    out(
        "`ctxrank datasets show NAME` prints citation, layout and download details; `ctxrank datasets "
        "download NAME` fetches the ones marked auto."
    )
    return 0


def datasets_show(name: str, *, data_root: str | None = None, json: bool = False) -> int:
    """Everything known about one dataset."""
    spec = registry.get_spec(name)
    d = _spec_dict(spec, data_root)
    if json:
        print_json(d)
        return 0
    rows = []
    for k, v in d.items():
        if k == "fold_table":
            continue
        if isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        rows.append((k, "-" if v is None or v == "" else v))
    out(key_value_lines(rows))
    out()
    out(table(("fold", "train", "valid", "test"), spec.fold_table(), right=(0,)))
    return 0


def datasets_download(
    name: str,
    *,
    data_root: str | None = None,
    sha256: str | None = None,
    url: str | None = None,
    keep_archive: bool = False,
    progress: bool = True,
    max_extract_bytes: int | None = None,
    max_members: int | None = None,
) -> int:
    """Download, verify and unpack a dataset (the archive's caps: ``ctxrank.data.download.extract``)."""
    spec = registry.get_spec(name)
    if url is None and spec.url is not None and sha256 is None and spec.sha256 is None:
        note(f"no known sha256 for {spec.url}; the archive is not verified")
    if url is not None and sha256 is None:
        note(f"no --sha256 given; {url} is not verified")
    caps = {"max_extract_bytes": max_extract_bytes, "max_members": max_members}
    where = download_dataset(
        spec.name,
        root=data_root,
        url=url,
        sha256=sha256,
        progress=progress,
        keep_archive=keep_archive,
        **{k: v for k, v in caps.items() if v is not None},
    )
    out(f"{spec.display_name} is ready in {where}")
    if data_root is None and spec.embedded:
        out(f"(load it with --data-root {where}; without a root the embedded copy is used)")
    return 0


def _presence(spec: Any, root: str | None) -> tuple[str, str]:
    if root is None and spec.embedded:
        return "embedded", str(registry.embedded_dir(spec))
    return ("yes" if registry.is_available(spec, root=root) else "no"), str(registry.dataset_root(spec, root))


def _spec_dict(spec: Any, root: str | None) -> dict[str, Any]:
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


# -------------------------------------------------------------------------------------- data-info
def data_info(source: DataSource, *, threshold: float = 1.0, json: bool = False) -> int:
    """Statistics of a data file (``source.data_file``) or a registered dataset split (default: all
    splits)."""
    data, _ = source.load(purpose="info", note=note)
    summary = data_summary(data, threshold=threshold)
    if json:
        print_json(summary)
    else:
        out(summary_text(summary))
    return 0


def summary_text(s: dict[str, Any]) -> str:
    """The ``data-info`` text of a :func:`ctxrank.data.summary.data_summary`."""
    n_items = s["items"]
    labels = "  ".join(f"{k}: {v:,} ({100.0 * v / n_items:.1f}%)" for k, v in s["label_histogram"].items())
    ll = s["list_length"]
    nr = s["queries_without_relevant"]
    cat = s.get("categorical", {})
    rows = [
        ("source", s["source"]),
        ("queries", f"{s['queries']:,}"),
        ("items", f"{n_items:,}"),
        ("features", f"{s['features']:,}" + (f" numeric, {len(cat)} categorical" if cat else "")),
        ("labels", labels),
        ("list length", f"min {ll['min']}  median {ll['median']:g}  mean {ll['mean']:.2f}  max {ll['max']}"),
        (
            f"queries with no relevant item (label >= {s['relevance_threshold']:g})",
            f"{nr:,} ({100.0 * nr / max(s['queries'], 1):.1f}%)",
        ),
        ("NULL cells filled", f"{s['null_filled']:,}"),
    ]
    if s["missing"]:  # kept missing (null_fill = keep): said only when there are some
        rows.append(("missing (NaN) cells", f"{s['missing']:,}"))
    for name, c in cat.items():
        missing = f"{c['missing']:,} cells missing or unseen"
        rows.append((f"categorical {name}", f"{c['values']:,} values, {missing}"))
    if "log" in s:  # an interaction log (--position-col)
        rows.extend(_log_rows(s["log"]))
    return key_value_lines(rows)


def _log_rows(log: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``data-info`` lines of an interaction log (:func:`ctxrank.data.summary.log_summary`)."""
    per = log["interactions_per_session"]
    no = log["sessions_without_interaction"]
    rows = [("sessions", f"{log['sessions']:,}")]
    if log["queries"] is not None:
        rows.append(("distinct queries (--group-col)", f"{log['queries']:,}"))
    histogram = "  ".join(f"{k}: {v:,}" for k, v in per["histogram"].items())
    rows += [
        ("interactions per session", f"mean {per['mean']:.3f}  (sessions by count: {histogram})"),
        ("sessions without interaction", f"{no:,} ({100.0 * no / max(log['sessions'], 1):.1f}%)"),
    ]
    rows += [
        (f"CTR at position {c['position']}", f"{c['ctr']:.4f} ({c['interactions']:,} / {c['impressions']:,})")
        for c in log["ctr_by_position"]
    ]
    return rows


# ------------------------------------------------------------------------------------ data-shards
def data_shards(
    files: list[str],
    source: DataSource,
    *,
    out_dir: str,
    shards: int | None = None,
    shard_rows: int | None = None,
    overwrite: bool = False,
) -> int:
    """The queries of ``files`` (each read whole, one at a time: each must fit in memory, together they
    need not) or of ``source``'s registered split, as Parquet shards in ``out_dir`` (``shards``: that
    many of equal size, query i to shard i mod N; ``shard_rows``: consecutive shards of about N rows)."""
    if (shards is None) == (shard_rows is None):
        raise ValueError(
            "give --shards N (N shards of equal size) or --shard-rows N (shards of about N rows)"
        )
    target = Path(out_dir)
    if target.exists() and not target.is_dir():
        raise ValueError(f"--out {target} is a file; give a directory")
    if target.is_dir():
        old = [p for p in target.iterdir() if p.suffix == ".parquet"]
        if old and not overwrite:
            raise ValueError(
                f"--out {target} holds {len(old)} Parquet file(s); give --overwrite to replace them "
                "(other files are kept), or another directory"
            )
    if files and source.dataset is not None:
        raise ValueError("give data files or --dataset NAME, not both")
    sources = [replace(source, data_file=f) for f in files] if files else [source]
    counted = {"queries": 0, "rows": 0}

    def parts() -> Any:
        width = None
        for s in sources:  # one file in memory at a time; later LETOR files widened to the first's features
            inputs = ModelInputs(n_features=width)
            data, _ = s.load(purpose="train", default_split="train", model=inputs, note=note)
            width = data.n_features
            counted["queries"] += data.n_queries
            counted["rows"] += data.n_items
            yield data

    old = [p for p in target.iterdir() if p.suffix == ".parquet"] if target.is_dir() else []
    position = source.columns.position_col  # an interaction log's positions: written, named in the metadata
    written = write_shards(parts(), target, shards=shards, shard_rows=shard_rows, position=position)
    for p in set(old) - set(written):  # --overwrite: the earlier shards that the new ones did not replace
        p.unlink()
    out(
        f"wrote {counted['queries']:,} queries ({counted['rows']:,} rows) in {len(written)} Parquet "
        f"shard(s) to {target}; train on them with --train-shards {target}"
    )
    return 0


# ------------------------------------------------------------------------------------------ synth
def chooser_path(path: str | Path) -> Path:
    """``sessions.csv`` / ``sessions.csv.gz`` / ``sessions.parquet`` -> ``sessions.chooser.csv``."""
    path = Path(path)
    ext = _format_of(path)
    name = path.name[: -len(ext)] if ext else path.name
    return path.with_name(f"{name}.chooser.csv")


def _write_table(frame: Any, path: Path, fmt: str) -> None:
    if fmt in (".parquet", ".pq"):
        atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))
    else:
        sep = "\t" if fmt.startswith(".tsv") else ","
        comp = "gzip" if fmt.endswith(".gz") else None
        atomic_write(path, lambda tmp: frame.to_csv(tmp, sep=sep, index=False, compression=comp))


def synth_choice(
    path: str,
    *,
    sessions: int = 1000,
    seed: int = 0,
    min_items: int = 10,
    max_items: int = 60,
    utility_scale: float = 1.5,
    json: bool = False,
) -> int:
    """Synthetic choice sessions to the table ``path`` and the chooser's probabilities beside it."""
    target = Path(path)
    fmt = _format_of(target)
    if fmt is None:
        raise ValueError(f"{target}: --out must end in one of {', '.join(TABLE_EXTENSIONS)}")
    chooser = chooser_path(target)
    if chooser.resolve() == target.resolve():
        raise ValueError(f"{target}: choose a name whose chooser file ({chooser.name}) differs from it")
    made = make_choice_sessions(
        sessions, min_items=min_items, max_items=max_items, utility_scale=utility_scale, seed=seed
    )
    frame = made.table
    _write_table(frame, target, fmt)
    probs = pd.DataFrame(
        {"session": frame["session"], "item": frame["item"], "chooser_prob": made.chooser_prob}
    )
    atomic_write(chooser, lambda tmp: probs.to_csv(tmp, index=False, float_format="%.9g"))
    ref = made.chooser_reference()
    summary = {
        "synthetic": True,
        "file": str(target),
        "chooser_file": str(chooser),
        "sessions": int(sessions),
        "rows": len(frame),
        "seed": seed,
        "min_items": min_items,
        "max_items": max_items,
        "utility_scale": utility_scale,
        "columns": [str(c) for c in frame.columns],
        "chooser_reference": ref,
    }
    if json:
        print_json(summary)
        return 0
    out(
        f"wrote {len(frame):,} itineraries in {sessions:,} sessions to {target} "
        f"(seed {seed}; columns {', '.join(summary['columns'])})"
    )
    out(f"wrote the chooser's probabilities to {chooser} (session, item, chooser_prob: not a feature)")
    out(
        f"chooser reference (the ceiling for any model on these data): log-likelihood "
        f"{ref['log_likelihood']:.4f} per session, P@1 {ref['p@1']:.4f} "
        f"(expected {ref['expected_p@1']:.4f}), hit@5 {ref['hit@5']:.4f}"
    )
    out(SYNTHETIC_NOTE)
    return 0


def synth_letor(
    path: str, shape: LetorShape, *, seed: int = 0, docids: bool = True, progress: bool = False
) -> int:
    """A synthetic LETOR file of ``shape`` (:class:`~ctxrank.data.synth.LetorShape`: list lengths,
    label shares, list context) at ``path`` (gzip when it ends in .gz), with a progress bar of the rows
    written when ``progress``."""
    sizes = shape.list_sizes(seed)
    target = Path(path)
    if target.parent != Path():
        target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{target.suffix}")  # keep the .gz suffix for the writer
    try:
        with writing(target, tmp):  # a full disk names the file
            write_synthetic_letor(
                tmp,
                n_queries=shape.queries,
                list_size=shape.items,
                n_features=shape.features,
                max_label=shape.max_label,
                seed=seed,
                docids=docids,
                list_sizes=sizes,
                label_shares=shape.label_shares,
                context=shape.context,
                progress=progress,
            )
            tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    out(f"wrote {shape.describe(sizes)} (seed {seed}) to {target}")
    out(SYNTHETIC_NOTE)
    return 0


#: ``synth clicks`` flag -> click-model parameter
CLICK_FLAGS = {
    "eta": "--eta",
    "eps_minus": "--eps-minus",
    "eps_plus": "--eps-plus",
    "continuation": "--continuation",
    "gamma": "--gamma",
    "sat_minus": "--sat-minus",
    "sat_plus": "--sat-plus",
}


def truth_path(path: str | Path) -> Path:
    """``log.csv`` -> ``log.truth.csv``, ``log.parquet`` -> ``log.truth.parquet``."""
    path = Path(path)
    ext = _format_of(path) or ""
    return path.with_name(f"{path.name[: len(path.name) - len(ext)]}.truth{ext}")


def synth_clicks(
    source: DataSource,
    *,
    out_path: str,
    click_model: str = "pbm",
    params: dict[str, Any] | None = None,
    sessions: int = 10_000,
    top_k: int = 10,
    randomize: str = "none",
    shuffle_n: int | None = None,
    relevance: str = "exponential",
    logging_fraction: float = 0.01,
    part_sessions: int = 100_000,
    seed: int = 0,
    overwrite: bool = False,
    progress: bool = False,
) -> int:
    """A simulated click log of the labelled ``source`` (see :mod:`ctxrank.clicks.simulate`): one table
    ``out_path`` (.csv, .parquet, ...) with the true labels in ``<stem>.truth<ext>``, or, for any other
    name, a directory of resumable Parquet parts of ``part_sessions`` sessions each. ``params``: the
    click model's parameters given (the others default)."""
    check_choice("click model", click_model, tuple(cm.CLICK_MODELS))
    params = {} if params is None else dict(params)
    valid = [f.name for f in fields(cm.CLICK_MODELS[click_model])]
    wrong = [CLICK_FLAGS[k] for k in params if k not in valid]
    if wrong:
        raise ValueError(
            f"{', '.join(wrong)} does not apply to --click-model {click_model}; its parameters: "
            f"{', '.join(CLICK_FLAGS[k] for k in valid)}"
        )
    model = cm.click_model(click_model, **params)
    sim.check_options(
        sessions=sessions, top_k=top_k, randomize=randomize, shuffle_n=shuffle_n, relevance=relevance,
        chunk_sessions=part_sessions,
    )  # fmt: skip
    sim.check_fraction(logging_fraction)
    options = {
        "top_k": top_k,
        "randomize": randomize,
        "shuffle_n": shuffle_n,
        "relevance": relevance,
        "seed": seed,
    }
    target = Path(out_path)
    one_file = _format_of(target) is not None
    if one_file:
        for path in (target, truth_path(target)):
            check_output_file(path, overwrite=overwrite, flag="--out")
    elif claim_output_dir(target, overwrite=overwrite, what="click log", ours=(sim.MANIFEST,)):
        if overwrite:  # start over
            for p in target.glob("*"):
                if p.name == sim.MANIFEST or re.fullmatch(r"(part|truth)-\d{5}\.parquet", p.name):
                    p.unlink()
        else:
            sim.check_resumable(target, model, sessions=sessions, chunk_sessions=part_sessions, **options)
    data, _ = source.load(purpose="train", default_split="train", note=note)
    n_logger = max(1, round(logging_fraction * data.n_queries))
    note(f"training the logging ranker (LambdaMART) on {n_logger:,} of the {data.n_queries:,} queries")
    scores = sim.logging_scores(data, fraction=logging_fraction, seed=seed)
    if one_file:
        made = sim.simulate_clicks(
            data, scores, model, sessions=sessions, chunk_sessions=part_sessions, progress=progress, **options
        )
        frame, truth = sim.log_frames(made)
        fmt = _format_of(target)
        _write_table(frame, target, fmt)
        _write_table(truth, truth_path(target), fmt)
        rows, clicks, where = (
            made.log.n_items,
            int(made.log.labels.sum()),
            f"{target} (true labels: {truth_path(target)})",
        )
    else:
        parts = sim.write_log_parts(
            data,
            scores,
            model,
            target,
            sessions=sessions,
            chunk_sessions=part_sessions,
            progress=progress,
            **options,
        )
        rows = clicks = None
        n_parts = -(-sessions // part_sessions)
        where = (
            f"{n_parts} Parquet part(s) part-NNNNN.parquet in {target} ({len(parts)} written now, the others "
            "by an earlier run; true labels: truth-NNNNN.parquet)"
        )
    counts = "" if rows is None else f", {rows:,} rows, {clicks:,} clicks"
    how = f"{model.name}, top {top_k}, randomize {randomize}, seed {seed}"
    out(f"wrote {sessions:,} sessions{counts} ({how}) to {where}")
    out(
        "read it as a log with --query-col session --label-col click --group-col query --docid-col item "
        "--position-col position; the true labels are for the full-information skyline only"
    )
    out(SYNTHETIC_NOTE)
    return 0


# ---------------------------------------------------------------------------------------- parsers
def add_datasets_parser(sub: Any, common: argparse.ArgumentParser) -> None:
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
    add_data_root(p, "check this directory")
    add_json(p)
    p.set_defaults(run=lambda a: datasets(data_root=a.data_root, json=a.json))
    dsub = p.add_subparsers(dest="datasets_command", metavar="{show,download}")
    ps = dsub.add_parser(
        "show",
        parents=[common],
        help="everything known about one dataset",
        description="Citation, fold table, file layout, download address and checksum status of one dataset.",
    )
    ps.add_argument("name", metavar="NAME", help="dataset name or alias (case-insensitive)")
    add_data_root(ps, "check this directory")
    add_json(ps)
    ps.set_defaults(run=lambda a: datasets_show(a.name, data_root=a.data_root, json=a.json))
    _add_download_parser(dsub, common)


def _add_download_parser(dsub: Any, common: argparse.ArgumentParser) -> None:
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
    add_data_root(
        pd,
        "target directory (default $CTXRANK_DATA/<name>, else ~/.local/share/ctxrank/<name>)",
        root_first=True,
    )
    add_declared(pd, DownloadOptions, only=("sha256", "url"))
    pd.add_argument("--keep-archive", action="store_true", help="keep the archive after unpacking")
    add_declared(pd, DownloadOptions, only=("max_extract_bytes", "max_members"))
    add_progress(pd)
    pd.set_defaults(
        run=lambda a: datasets_download(
            a.name,
            data_root=a.data_root,
            sha256=a.sha256,
            url=a.url,
            keep_archive=a.keep_archive,
            progress=not a.no_progress,
            max_extract_bytes=a.max_extract_bytes,
            max_members=a.max_members,
        )
    )


def add_data_info_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "data-info",
        parents=[common],
        help="statistics of a LETOR file, a table or a registered dataset",
        description=(
            "Queries, items, features, label histogram, list-length statistics (min/median/mean/max), "
            "queries with no relevant item and NULL cells filled, for a LETOR/SVMlight FILE (.txt or .gz), "
            "a table (.csv/.tsv/.parquet, with --query-col and --label-col) or a registered --dataset "
            "(default: the whole dataset, all splits). For an interaction log (--position-col; sessions as "
            "--query-col, the interaction as --label-col, the logged query as --group-col) also: sessions, "
            "distinct queries, interactions per session, sessions without interaction and the "
            "click-through rate by position (interactions / impressions). "
            "Example: `ctxrank data-info --dataset mq2008`."
        ),
    )
    p.add_argument(
        "file", nargs="?", metavar="FILE", help="LETOR / SVMlight file (.txt or .gz) or a table (.csv, ...)"
    )
    skip = (*(k for k in SCORING_SKIP if k != "group_col"), "data_file")  # a log's queries: --group-col
    add_data_source(p, defaults="neither: all, the whole dataset", skip=skip)
    p.add_argument(
        "--threshold", type=float, default=1.0, help="relevant means label >= THRESHOLD (default 1)"
    )
    add_json(p)
    p.set_defaults(
        run=lambda a: data_info(
            from_namespace(DataSource, {**vars(a), "data_file": a.file}),
            threshold=a.threshold,
            json=a.json,
        )
    )


def add_data_shards_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "data-shards",
        parents=[common],
        help="write data files as Parquet shards to train from with --train-shards",
        description=(
            "Write the queries of LETOR / SVMlight files or tables (FILE ..., each read whole, one at a "
            "time: each must fit in memory, together they need not) or of a registered --dataset split "
            "as Parquet shards part-NNNNN.parquet in DIR: columns qid, label, docid (when known) and one "
            "column per feature, whole queries in each shard (docs/data.md, 'Data larger than memory'). "
            "`ctxrank train --train-shards DIR` streams them."
        ),
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="LETOR / SVMlight files or tables, in order")
    add_data_source(p, defaults="default: train", skip=(*SCORING_SKIP, "data_file"))
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--shards", type=positive_int, metavar="N",
        help="N shards of about equal size (query i to shard i mod N): a multiple of the torchrun processes",
    )  # fmt: skip
    how.add_argument(
        "--shard-rows", type=positive_int, metavar="N",
        help="consecutive shards, each closed at the first query boundary at or after N rows",
    )  # fmt: skip
    p.add_argument("--out", required=True, metavar="DIR", help="the directory of shards to write")
    p.add_argument("--overwrite", action="store_true", help="replace the Parquet files already in DIR")
    p.set_defaults(
        run=lambda a: data_shards(
            a.files,
            from_namespace(DataSource, {**vars(a), "data_file": None}),
            out_dir=a.out,
            shards=a.shards,
            shard_rows=a.shard_rows,
            overwrite=a.overwrite,
        )
    )


def add_synth_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "synth",
        parents=[common],
        help="write SYNTHETIC data (choice sessions table, LETOR file, click log) for tests and demos",
        description=(
            "Write synthetic data files. `choice`: airline-itinerary choice sessions as a table "
            "(one row per itinerary, `chosen` 0/1), with the chooser's probabilities in a separate "
            "<stem>.chooser.csv. `letor`: an MSLR-shaped LETOR text file. `clicks`: a click log "
            "simulated from labelled data by a click model. The data are generated, "
            "not measured: results on them say nothing about real data."
        ),
    )
    ssub = p.add_subparsers(dest="synth_command", metavar="{choice,letor,clicks}", required=True)
    _add_synth_choice_parser(ssub, common)
    _add_synth_letor_parser(ssub, common)
    _add_synth_clicks_parser(ssub, common)


def _add_synth_choice_parser(ssub: Any, common: argparse.ArgumentParser) -> None:
    pc = ssub.add_parser(
        "choice",
        parents=[common],
        help="airline-itinerary choice sessions (a table)",
        description=(
            "Synthetic choice sessions (mixed logit with per-session tastes; see "
            "ctxrank.data.synth_choice): columns session, item, chosen, price, duration, stops, "
            "dep_hour, airline, cabin. Writes FILE (.csv, .csv.gz, .tsv, .tsv.gz, .parquet, .pq) and "
            "<stem>.chooser.csv (session, item, chooser_prob: NOT a feature) and prints the chooser's "
            "reference. Train on it with e.g. `ctxrank train --model qilcm --data FILE --query-col "
            "session --label-col chosen --docid-col item --categorical airline,cabin --out runs/q`."
        ),
    )
    pc.add_argument("--sessions", type=positive_int, default=1000, metavar="N", help="default 1000")
    pc.add_argument("--seed", type=seed_int, default=0, help="random seed (default 0)")
    pc.add_argument("--min-items", type=positive_int, default=10, metavar="N", help="default 10")
    pc.add_argument("--max-items", type=positive_int, default=60, metavar="N", help="default 60")
    pc.add_argument(
        "--utility-scale",
        type=float,
        default=1.5,
        metavar="X",
        help="utility multiplier: larger = more predictable choices (default 1.5)",
    )
    pc.add_argument("--out", required=True, metavar="FILE", help="the table to write")
    add_json(pc, "machine-readable summary")
    pc.set_defaults(
        run=lambda a: synth_choice(
            a.out,
            sessions=a.sessions,
            seed=a.seed,
            min_items=a.min_items,
            max_items=a.max_items,
            utility_scale=a.utility_scale,
            json=a.json,
        )
    )


def _add_synth_letor_parser(ssub: Any, common: argparse.ArgumentParser) -> None:
    pl = ssub.add_parser(
        "letor",
        parents=[common],
        help="an MSLR-shaped LETOR text file",
        description=(
            "A synthetic LETOR/SVMlight file (`label qid:Q 1:v ... F:v #docid = D-q-i`; .gz when FILE ends "
            "with it): N queries of L items, F dense features, labels 0..4 from a noisy linear function."
        ),
    )
    add_declared(pl, LetorShape, defaults=[name for name, _ in declared(LetorShape)])
    pl.add_argument("--seed", type=seed_int, default=0, help="random seed (default 0)")
    pl.add_argument(
        "--no-docids", action="store_true", help="no '#docid = ...' comments (as in MSLR's files)"
    )
    pl.add_argument("--out", required=True, metavar="FILE", help="the file to write (.txt or .gz)")
    add_progress(pl)
    pl.set_defaults(
        run=lambda a: synth_letor(
            a.out,
            from_namespace(LetorShape, a),
            seed=a.seed,
            docids=not a.no_docids,
            progress=not a.no_progress,
        )
    )


def _probabilities(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers such as 0.6,0.5,0.4, got {text!r}"
        ) from None


def _add_synth_clicks_parser(ssub: Any, common: argparse.ArgumentParser) -> None:
    pk = ssub.add_parser(
        "clicks",
        parents=[common],
        help="a click log simulated from labelled data (a click model over a logging ranker's top k)",
        description=(
            "Simulate an interaction log from labelled data (FILE, a table or --dataset): a logging ranker "
            "(LambdaMART trained on --logging-fraction of the queries) ranks each query; each session draws "
            "a query at random, shows its top k (optionally randomised) and a click model draws the clicks "
            "from the true labels (docs/clicks.md). Writes OUT (.csv, .parquet, ...: columns session, query, "
            "item, position, click and the features) and the true labels beside it in <stem>.truth<ext> "
            "(never a feature); OUT without a table extension: a directory of Parquet parts, resumable."
        ),
    )
    pk.add_argument("file", nargs="?", metavar="FILE", help="labelled LETOR / SVMlight file or table")
    add_data_source(pk, defaults="default: train", skip=(*SCORING_SKIP, "data_file"))
    pk.add_argument("--click-model", choices=sorted(cm.CLICK_MODELS), default="pbm", help="default pbm")
    pk.add_argument("--eta", type=float, help="pbm: examination (1/r)^ETA (default 1)")
    pk.add_argument(
        "--eps-minus", type=float, help="click probability of an examined non-relevant item (0.1)"
    )
    pk.add_argument("--eps-plus", type=float, help="click probability of an examined most relevant item (1)")
    pk.add_argument(
        "--continuation", type=_probabilities, metavar="L1,L2,...",
        help="dcm: probability of going on after a click at position 1, 2, ... (last repeats; 0.6,0.5,0.4)",
    )  # fmt: skip
    pk.add_argument("--gamma", type=float, help="dbn: perseverance (0.9)")
    pk.add_argument("--sat-minus", type=float, help="dbn: satisfaction of a clicked non-relevant item (0)")
    pk.add_argument("--sat-plus", type=float, help="dbn: satisfaction of a clicked most relevant item (0.7)")
    pk.add_argument("--sessions", type=positive_int, default=10_000, metavar="N", help="default 10000")
    pk.add_argument(
        "--top-k", type=positive_int, default=10, metavar="K", help="items shown per session (10)"
    )
    pk.add_argument(
        "--randomize", choices=sim.RANDOMIZATIONS, default="none", help="of the shown list (default none)"
    )
    pk.add_argument("--shuffle-n", type=positive_int, metavar="N", help="the N of --randomize shuffle_top")
    pk.add_argument(
        "--relevance", choices=cm.RELEVANCE_RULES, default="exponential",
        help="labels to [0, 1]: exponential (2^y-1)/(2^max-1) (default), linear y/max, binary y >= 1",
    )  # fmt: skip
    pk.add_argument(
        "--logging-fraction", type=float, default=0.01, metavar="X",
        help="share of the queries the logging LambdaMART is trained on (default 0.01, at least one query)",
    )  # fmt: skip
    pk.add_argument(
        "--part-sessions", type=positive_int, default=100_000, metavar="N", help="sessions per part (100000)"
    )
    pk.add_argument("--seed", type=seed_int, default=0, help="random seed (default 0)")
    pk.add_argument(
        "--out", required=True, metavar="OUT", help="the table, or the directory of parts, to write"
    )
    pk.add_argument("--overwrite", action="store_true", help="replace OUT (and its truth file)")
    add_progress(pk)
    pk.set_defaults(
        run=lambda a: synth_clicks(
            from_namespace(DataSource, {**vars(a), "data_file": a.file}),
            out_path=a.out,
            click_model=a.click_model,
            params={k: getattr(a, k) for k in CLICK_FLAGS if getattr(a, k) is not None},
            sessions=a.sessions,
            top_k=a.top_k,
            randomize=a.randomize,
            shuffle_n=a.shuffle_n,
            relevance=a.relevance,
            logging_fraction=a.logging_fraction,
            part_sessions=a.part_sessions,
            seed=a.seed,
            overwrite=a.overwrite,
            progress=not a.no_progress,
        )
    )
