"""TREC run files and qrels: what trec_eval, ir-measures and the shared tasks of the field read.

A run file has one line per scored item, ``QUERY Q0 DOCID RANK SCORE RUN``, the items of each query
ranked by score, ties by decreasing docid as trec_eval orders them (so the rank column is the order
trec_eval evaluates, and the file does not depend on the data's row order); a qrels file one
line per judged item, ``QUERY 0 DOCID RELEVANCE``. Item ids are the data's docids (a LETOR file's
``#docid = ...`` comments, a table's docid column), else the item's 1-based row number in its file
(:func:`item_ids`), so ``ctxrank predict --format trec`` and the qrels written from the same file
agree. Scoring runs is ir-measures' job (``ctxrank evaluate --run``, :mod:`ctxrank.cli.evaluate`);
written here: the two small writers, as no library writes a run from arrays in this layout, and a
strict reader of both files.

An id is one column of a whitespace-separated line, and a reader keeps one value per (query, item):
so every query id and item id is checked before anything is written (:func:`check_ids`: non-empty,
printable, without whitespace; no item id twice in a query), and a file read with an id twice in a
query is refused too (:func:`read_run`, :func:`read_qrels`), never scored with one of its lines.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["check_ids", "item_ids", "judgments", "read_qrels", "read_run", "run_lines", "write_lines"]

_FIX = "give ids without spaces, tabs or newlines (e.g. replace them with '_') to write TREC files"


def _id_problem(text: str) -> str | None:
    """What makes ``text`` unfit for a column of a TREC line (None: fit): empty, whitespace of any
    kind, or a character that is not printable."""
    if not text:
        return "is empty"
    if text.isprintable() and " " not in text:  # str.isprintable: False for every other whitespace
        return None
    if any(c.isspace() for c in text):
        return "contains whitespace"
    return "contains a character that is not printable"


def check_ids(data: Any, ids: np.ndarray) -> None:
    """Refuse, before anything is written, ids that a TREC file cannot hold: a query id or item id that
    is empty, holds whitespace or is not printable (the line would have other columns), and an item id
    twice within one query (a reader keeps one of its values).

    Raises:
        ValueError: naming the query, the item's row (1-based, in the data's order) and the id.
    """
    offsets = data.query_offsets
    for q, query in enumerate(data.query_ids):
        text = str(query)
        problem = _id_problem(text)
        if problem is not None:
            raise ValueError(f"query id {text!r} (query {q + 1} of the data) {problem}: {_FIX}")
        a, b = int(offsets[q]), int(offsets[q + 1])
        seen: dict[str, int] = {}
        for row in range(a, b):
            doc = str(ids[row])
            problem = _id_problem(doc)
            if problem is not None:
                raise ValueError(f"query {text!r}, row {row + 1}: item id {doc!r} {problem}: {_FIX}")
            if doc in seen:
                raise ValueError(
                    f"query {text!r}: item id {doc!r} appears twice (rows {seen[doc] + 1} and {row + 1}); "
                    "a TREC reader keeps one value per item of a query: give each item of a query its own id"
                )
            seen[doc] = row


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
    if not np.isfinite(scores).all():
        row = int(np.flatnonzero(~np.isfinite(scores))[0])
        raise ValueError(f"score {scores[row]!r} of row {row + 1}: a TREC run needs finite scores")
    check_ids(data, ids)
    scores = scores + 0.0  # -0.0 + 0.0 is 0.0: no "-0.0" in the file
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
    check_ids(data, ids)
    query_of = np.repeat(data.query_ids, data.query_lengths)
    return [(str(q), str(d), int(y)) for q, d, y in zip(query_of, ids, labels.tolist(), strict=True)]


def write_lines(lines: list[str], out: str | Path | IO[str]) -> None:
    """``lines`` to the text stream or file ``out`` (the caller decides about replacing a file)."""
    text = "".join(line + "\n" for line in lines)
    if hasattr(out, "write"):
        out.write(text)
    else:
        Path(out).write_text(text)


def _lines(path: str | Path) -> Any:
    """``(line number, fields)`` of every non-blank line of the text file (gzip when ``.gz``)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        for number, line in enumerate(f, start=1):
            fields = line.split()
            if fields:
                yield number, fields


def _read(
    path: str | Path, what: str, layout: str, width: int, column: int, value: Any, expected: str
) -> list[tuple[str, str, Any]]:
    """``(query, item id, value)`` of every line of a TREC file of ``width`` columns (``layout``), the
    value ``value(text)`` of the line's ``column`` (a ValueError: not ``expected``). An item twice in a
    query is refused (a reader keeps one of its values)."""
    rows, first = [], {}
    try:
        for number, fields in _lines(path):
            where = f"{path}:{number}"
            if len(fields) != width:
                raise ValueError(
                    f"{where}: not a {what} line ({len(fields)} columns; expected {width}: {layout})"
                )
            query, doc = fields[0], fields[2]
            try:
                v = value(fields[column])
            except ValueError:
                text = fields[column]
                raise ValueError(f"{where}: column {column + 1} {text!r} is not {expected}") from None
            if (query, doc) in first:
                raise ValueError(
                    f"{where}: item {doc!r} of query {query!r} again (first at line {first[query, doc]}); "
                    f"a {what} holds each item of a query once (a reader would keep one of its values)"
                )
            first[query, doc] = number
            rows.append((query, doc, v))
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read the {what} ({exc})") from None
    if not rows:
        raise ValueError(f"{path}: no {what} line ({layout})")
    return rows


def _score(text: str) -> float:
    """A run's score: a finite number."""
    score = float(text)
    if not math.isfinite(score):
        raise ValueError(text)
    return score


def read_run(path: str | Path) -> list[tuple[str, str, float]]:
    """``(query, item id, score)`` of every line of the TREC run file ``path`` (``.gz`` read as gzip).

    Raises:
        ValueError: a line of other than 6 columns, a score that is not a finite number, an item twice
            in a query, or no line; with file:line.
    """
    return _read(path, "TREC run", "QUERY Q0 DOCID RANK SCORE RUN", 6, 4, _score, "a finite score")


def read_qrels(path: str | Path) -> list[tuple[str, str, int]]:
    """``(query, item id, relevance)`` of every line of the TREC qrels file ``path``.

    Raises:
        ValueError: a line of other than 4 columns, a relevance that is not an integer, an item twice
            in a query, or no line; with file:line.
    """
    return _read(path, "qrels", "QUERY 0 DOCID RELEVANCE", 4, 3, int, "an integer relevance grade")
