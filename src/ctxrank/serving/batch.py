"""Batch scoring on Ray Data: an exported ONNX ranker (or whole re-ranking pipeline) over a directory
of Parquet shards (``ctxrank data-shards``), on this machine or on a Ray cluster.

::

    summary = score_shards("m.onnx", "shards/", "scores/", workers=2)            # a local Ray
    summary = score_shards("m.onnx", "s3://b/shards", "s3://b/scores", address="ray://head:10001")

**Whole queries.** A shard holds whole queries, each a contiguous run of rows (the layout of
:mod:`ctxrank.data.stream`, checked by :meth:`~ctxrank.data.stream.ShardStream.open` before Ray starts:
a query split across shards or rows is an error naming it). The Ray dataset has one row per shard
(``ray.data.from_items``) and ``map_batches`` gives each call one shard, which the worker reads whole
with pyarrow and scores; so a query is never split across batches. ``ray.data.read_parquet`` is not
used: its blocks are cut at Parquet batch boundaries, which may fall inside a query, and grouping its
rows by query again would move every row through Ray's object store; here only the scores move.

**Output.** Parquet files written by Ray Data (``Dataset.write_parquet``) under ``out``: one row per
scored row, columns ``shard`` (the shard's file name), ``row`` (its 0-based row in the shard), ``qid``,
``docid`` (when the shards have one) and ``score`` (float32, the graph's). On a cluster, the shards and
``out`` must be paths every node reads and writes (a shared file system, or ``s3://``-style URIs that
pyarrow opens), and the ONNX file a path every node reads.

**Features.** The shards' feature columns are read by the ONNX file's feature names (any order); a
file without names takes the shards' feature columns in their order, as many as the graph's input.

Workers: ``workers`` concurrent actors, each loading the ONNX file once, with ``threads`` onnxruntime
threads and as many Ray CPUs. Needs the ``ray`` extra and onnxruntime (``serve`` or ``export`` extra).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ctxrank._checks import check_int
from ctxrank.data.stream import DOCID, QUERY, ShardStream
from ctxrank.serving.onnx_ranker import OnnxRanker

__all__ = ["ShardScorer", "feature_columns", "score_shards"]


def feature_columns(ranker: OnnxRanker, shard_features: tuple[str, ...], where: str) -> list[str]:
    """The shard columns, in the graph's feature order, of ``ranker``'s features.

    Raises:
        ValueError: the shards lack a feature the file names, or (a file without names) their feature
            count differs from the graph's.
    """
    if ranker.feature_names:
        missing = [n for n in ranker.feature_names if n not in shard_features]
        if missing:
            raise ValueError(
                f"{where}: the shards have no column(s) {missing[:5]} of the model's features "
                f"(the shards' feature columns: {list(shard_features)[:10]})"
            )
        return list(ranker.feature_names)
    if len(shard_features) != ranker.n_features:
        raise ValueError(
            f"{where}: the shards have {len(shard_features)} feature columns; the model takes "
            f"{ranker.n_features} (its file names none, so they are taken by position)"
        )
    return list(shard_features)


class ShardScorer:
    """The Ray Data actor: scores the shards of a batch (one per call) with its own :class:`OnnxRanker`."""

    def __init__(self, model: str, columns: list[str], docids: bool, threads: int) -> None:
        self.ranker = OnnxRanker(model, threads=threads)
        self.columns, self.docids = columns, docids

    def score(self, shard: str) -> dict[str, np.ndarray]:
        """The output columns (module docstring) of one shard, read whole."""
        import pyarrow.parquet as pq

        keys = [QUERY, *([DOCID] if self.docids else [])]
        table = pq.read_table(shard, columns=[*keys, *self.columns])
        x = np.column_stack([table.column(c).to_numpy(zero_copy_only=False) for c in self.columns])
        qid = np.asarray(table.column(QUERY).to_numpy(zero_copy_only=False)).astype(str)
        scores = self.ranker.predict(x, qid)
        out = {
            "shard": np.full(len(qid), Path(shard).name),
            "row": np.arange(len(qid), dtype=np.int64),
            "qid": qid,
        }
        if self.docids:
            out[DOCID] = np.asarray(table.column(DOCID).to_numpy(zero_copy_only=False)).astype(str)
        return {**out, "score": scores.astype(np.float32)}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        parts = [self.score(str(s)) for s in batch["shard"]]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def score_shards(
    model: str | os.PathLike,
    shards: str | os.PathLike,
    out: str | os.PathLike,
    *,
    workers: int = 1,
    threads: int = 1,
    address: str | None = None,
) -> dict[str, Any]:
    """Score every row of the ``shards`` directory with the ONNX file ``model`` on Ray Data and write
    the scores under ``out`` (module docstring); Ray is started here unless it runs in this process
    (``address``: a cluster to join, e.g. ``HEAD:6379`` or ``ray://HEAD:10001``; None: ``RAY_ADDRESS``,
    else a new local Ray of ``workers * threads`` CPUs). Returns ``{"shards", "queries", "rows"}``.

    Raises:
        ValueError: bad options, shards or model (before Ray starts), or the ray extra missing.
    """
    workers, threads = check_int("workers", workers), check_int("threads", threads)
    ranker = OnnxRanker(model, threads=threads)  # the file checked here, loaded again by each actor
    if ranker.categorical_names:
        raise ValueError(
            f"{model}: the model reads categorical columns {list(ranker.categorical_names)}; shards hold "
            "numeric features only"
        )
    stream = ShardStream.open(shards)
    columns = feature_columns(ranker, stream.feature_names, str(shards))
    try:
        import ray
    except ModuleNotFoundError:
        raise ValueError("batch scoring on Ray needs the ray package: pip install 'ctxrank[ray]'") from None
    started = not ray.is_initialized()
    if started and (address is not None or os.environ.get("RAY_ADDRESS")):
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    elif started:
        cpus = workers * threads
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        items = [{"shard": str(p.resolve())} for p in stream.shards]
        dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            ShardScorer,
            fn_constructor_args=(str(Path(model).resolve()), columns, stream.docids, threads),
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=threads,
        )
        dataset.write_parquet(str(out))
    finally:
        if started:  # Ray started here ends here; one the caller runs is left running
            ray.shutdown()
    return {"shards": len(items), "queries": stream.n_queries, "rows": stream.n_items}
