"""TREC run files and qrels: what trec_eval, ir-measures and the shared tasks of the field read.

A run file has one line per scored item, ``QUERY Q0 DOCID RANK SCORE RUN``, the items of each query
ranked by score, ties by decreasing docid as trec_eval orders them (so the rank column is the order
trec_eval evaluates, and the file does not depend on the data's row order); a qrels file one
line per judged item, ``QUERY 0 DOCID RELEVANCE``. Item ids are the data's docids (a LETOR file's
``#docid = ...`` comments, a table's docid column), else the item's 1-based row number in its file
(:func:`item_ids`), so ``ctxrank predict --format trec`` and the qrels written from the same file
agree. Reading and scoring runs is ir-measures' job (``ctxrank evaluate --run``, :mod:`ctxrank.cli.evaluate`);
written here: the two small writers, as no library writes a run from arrays in this layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["item_ids", "judgments", "run_lines", "write_lines"]


def item_ids(data: Any, file_rows: np.ndarray | None = None) -> np.ndarray:
    """str (N,) the id of each item of ``data``: its docid, else its 1-based row in the file it was read
    from (``file_rows``: each data row's file row, None = the same order)."""
    if data.docids is not None:
        return np.asarray(data.docids).astype(str)
    rows = np.arange(data.n_items) if file_rows is None else np.asarray(file_rows)
    return (rows + 1).astype(str)


def run_lines(data: Any, scores: np.ndarray, ids: np.ndarray, run_name: str) -> list[str]:
    """``QUERY Q0 DOCID RANK SCORE RUN`` lines: each query's items by decreasing score, ties broken by
    decreasing item id, trec_eval's order (it does not depend on the rows' order in the data)."""
    if not run_name or any(c.isspace() for c in run_name):
        raise ValueError(f"the run name must be one word (no spaces), got {run_name!r}")
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (data.n_items,):
        raise ValueError(f"expected {data.n_items} scores, got shape {scores.shape}")
    lines = []
    offsets = data.query_offsets
    for q, query in enumerate(data.query_ids):
        a, b = int(offsets[q]), int(offsets[q + 1])
        id_rank = np.unique(ids[a:b], return_inverse=True)[1]
        order = np.lexsort((-id_rank, -scores[a:b]))  # score descending, then the item id descending
        values = scores[a:b].tolist()  # Python floats: repr is the shortest text that reads back exactly
        for rank, i in enumerate(order.tolist(), start=1):
            lines.append(f"{query} Q0 {ids[a + i]} {rank} {values[i]!r} {run_name}")
    return lines


def judgments(data: Any, ids: np.ndarray) -> list[tuple[str, str, int]]:
    """``(query, item id, relevance)`` of every item of ``data`` (its label, an integer grade): the
    qrels of labelled data."""
    labels = data.labels
    if not np.array_equal(labels, np.round(labels)):
        raise ValueError("qrels need integer relevance grades; these labels are not whole numbers")
    query_of = np.repeat(data.query_ids, data.query_lengths)
    return [(str(q), str(d), int(y)) for q, d, y in zip(query_of, ids, labels.tolist(), strict=True)]


def write_lines(lines: list[str], out: str | Path | IO[str]) -> None:
    """``lines`` to the text stream or file ``out`` (the caller decides about replacing a file)."""
    text = "".join(line + "\n" for line in lines)
    if hasattr(out, "write"):
        out.write(text)
    else:
        Path(out).write_text(text)
