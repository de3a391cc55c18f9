"""``ctxrank predict``: score a file or a registered split with a saved model: a model directory of
``ctxrank train`` or an ONNX file of ``ctxrank export`` (a neural ranker or a whole re-ranking
pipeline). An ONNX file is scored with onnxruntime alone: this module imports no torch
(:mod:`ctxrank.cli._scoring` loads a model directory's torch only for a directory)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ctxrank._checks import OptionError, listed, resolve_threads
from ctxrank._declare import POSITIVE_INT, RAY_ADDRESS, from_namespace
from ctxrank._io import atomic_write
from ctxrank.cli._options import (
    SCORING_SKIP,
    add_data_source,
    add_model_dir,
    add_threads,
    argparse_type,
    note,
)
from ctxrank.cli._outputs import check_output_file
from ctxrank.cli._scoring import is_onnx, load_for_scoring
from ctxrank.data.sources import DataSource
from ctxrank.data.table import is_table_path
from ctxrank.data.table_io import to_file_order
from ctxrank.data.trec import item_ids, run_lines, write_lines


def predict(
    model: str,
    *,
    output: str,
    source: DataSource,
    overwrite: bool = False,
    threads: int | None,
    format: str = "scores",
    run_name: str = "ctxrank",
) -> int:
    """Score every row of ``source`` (its ``data_file``, or a registered split, default test) with a
    saved model (a model directory, or an exported ``.onnx`` file: :mod:`ctxrank.cli._scoring`) and
    write to ``output`` (``-``: stdout; an existing file only with ``overwrite``), with ``threads`` CPU
    threads (None: the libraries' defaults). ``format``: ``scores`` (one score a line,
    in the file's row order) or ``trec`` (a TREC run named ``run_name``: :mod:`ctxrank.data.trec`)."""
    if format not in PREDICT_FORMATS:
        raise ValueError(f"--format must be one of {', '.join(PREDICT_FORMATS)}, got {format!r}")
    if output != "-":
        check_output_file(output, overwrite=overwrite, flag="--output")
    file = source.data_file
    if is_onnx(model) and file is not None and is_table_path(file) and source.columns.query_col is None:
        raise OptionError(
            "{path} is a table: give {query_col:COL} (an ONNX file records no query column)", path=file
        )
    predictor, inputs = load_for_scoring(model, threads)
    ranking, file_rows = source.load(default_split="test", purpose="predict", model=inputs, note=note)
    scores = predictor.predict(ranking)
    if format == "trec":
        lines = run_lines(ranking, scores, item_ids(ranking, file_rows), run_name)
    else:
        lines = [f"{s!r}" for s in to_file_order(scores, file_rows).tolist()]  # exact, the file's order
    if output == "-":
        write_lines(lines, sys.stdout)
        return 0
    atomic_write(Path(output), lambda tmp: write_lines(lines, tmp))
    what = f"a TREC run of {ranking.n_items:,} items" if format == "trec" else f"{ranking.n_items:,} scores"
    print(f"wrote {what} ({ranking.n_queries:,} queries) to {output}", file=sys.stderr)
    return 0


def predict_shards(
    model: str,
    *,
    shards: str,
    output: str,
    source: DataSource,
    workers: int | None,
    address: str | None,
    threads: int | None,
    overwrite: bool = False,
    format: str = "scores",
) -> int:
    """Score the Parquet ``shards`` directory with the ONNX file ``model`` on Ray Data
    (:func:`ctxrank.serving.batch.score_shards`: ``workers`` actors of ``threads`` threads, default 1
    each; ``address``: a Ray cluster) and write the scores as Parquet files in the directory ``output``
    (new or empty; ``overwrite``: its earlier ``*.parquet`` files are removed first)."""
    given = [f for f in ("data_file", "dataset") if getattr(source, f) is not None]
    if given:
        raise OptionError("--shards DIR is the data to score: give no {given}", given=listed(given))
    if format != "scores":
        raise ValueError(f"--shards writes Parquet score files: --format {format} applies to --data only")
    if not is_onnx(model):
        raise ValueError(
            f"--shards scores with an ONNX file (`ctxrank export`), not a model directory: {model}"
        )
    target = Path(output)
    if output == "-" or (target.exists() and not target.is_dir()):
        raise ValueError(f"--output {output}: with --shards, give a directory for the Parquet score files")
    old = sorted(target.glob("*.parquet")) if target.is_dir() else []
    if old and not overwrite:
        raise ValueError(
            f"--output {output} holds {len(old)} Parquet file(s); give --overwrite to replace them, or a new "
            "directory"
        )
    from ctxrank.serving.batch import score_shards  # onnxruntime and ray: optional extras

    for path in old:
        path.unlink()
    done = score_shards(
        model, shards, output, workers=1 if workers is None else workers,
        threads=resolve_threads(threads), address=address,
    )  # fmt: skip
    print(
        f"wrote the scores of {done['rows']:,} rows ({done['queries']:,} queries, {done['shards']} shards) "
        f"to {output}",
        file=sys.stderr,
    )
    return 0


def _run(a: argparse.Namespace) -> int:
    source = from_namespace(DataSource, a)
    if a.shards is None:
        for flag, value in (("--workers", a.workers), (RAY_ADDRESS.flag, a.address)):
            if value is not None:
                raise ValueError(f"{flag} applies to --shards DIR (batch scoring on Ray) only")
        return predict(
            a.model, output=a.output, source=source, overwrite=a.overwrite, threads=a.threads,
            format=a.format, run_name=a.run_name,
        )  # fmt: skip
    return predict_shards(
        a.model, shards=a.shards, output=a.output, source=source, workers=a.workers, address=a.address,
        threads=a.threads, overwrite=a.overwrite, format=a.format,
    )  # fmt: skip


#: what ``predict --format`` writes
PREDICT_FORMATS = ("scores", "trec")


def add_predict_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "predict",
        parents=[common],
        help="score a LETOR file or a table with a saved model",
        description=(
            "Score every row of a LETOR/SVMlight file, a table (.csv, .csv.gz, .tsv, .tsv.gz, .parquet, "
            ".pq) or a registered dataset split with a model saved by `ctxrank train` or an ONNX file of "
            "`ctxrank export` (a table is then read by the file's feature names, with --query-col); "
            "writes one score per line, in the FILE's row order (also for a table whose rows are not "
            "grouped by query: the regrouping done for the model is undone). A table is read with the "
            "table spec saved with the model (columns, categorical encoder: unseen or missing categories "
            "get code 0, missing numbers 0); its label column is not read (it may be absent)."
        ),
    )
    add_model_dir(
        p,
        " or an ONNX file of `ctxrank export` (a neural ranker or a whole re-ranking pipeline; scored with "
        "onnxruntime alone, without torch, one thread unless --threads)",
        metavar="PATH",
    )
    p.add_argument(
        "--output", "-o", required=True, metavar="FILE", help="scores file to write ('-' = stdout)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace the --output FILE if it exists")
    p.add_argument(
        "--format",
        choices=PREDICT_FORMATS,
        default="scores",
        help="scores (default): one score a line in the file's row order; trec: a TREC run file (QUERY Q0 "
        "DOCID RANK SCORE RUN; docids from the data, else each row's number in the file)",
    )
    p.add_argument("--run-name", default="ctxrank", metavar="NAME", help="the run's name in a TREC run file")
    add_threads(p, "default: the libraries' own; a saved LambdaMART's: its training count")
    add_data_source(
        p,
        defaults="neither: fold 1's test split",
        saved_model=True,
        skip=SCORING_SKIP,
        data_help="LETOR / SVMlight file or table to score",
    )
    shards = p.add_argument_group("batch scoring on Ray Data (an ONNX --model; the ray extra)")
    shards.add_argument(
        "--shards",
        metavar="DIR",
        help="score a directory of Parquet shards (`ctxrank data-shards`) instead of --data, one Ray task "
        "per shard (a shard holds whole queries), and write Parquet score files (columns shard, row, qid"
        "[, docid], score) to the --output DIR",
    )
    shards.add_argument(
        "--workers",
        type=argparse_type(POSITIVE_INT),
        metavar="N",
        help="Ray actors scoring shards at once (default 1), each with --threads threads (default 1)",
    )
    shards.add_argument(RAY_ADDRESS.flag, dest="address", metavar=RAY_ADDRESS.metavar, help=RAY_ADDRESS.help)
    p.set_defaults(run=_run)
