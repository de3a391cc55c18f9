"""Rows of queries -> the padded lists an exported graph takes, and its scores back to the rows.

A served request holds ``X`` (N, F) feature rows and ``qid`` (N,) their query ids, rows of a query in
any place; an exported graph (``ctxrank export``, :mod:`ctxrank.export.pipeline`) takes
``features`` (B, L, F) float32, ``mask`` (B, L) bool (True = real item, real items first) and, for a
model with categorical columns, ``categorical`` (B, L, C) int64, and gives ``scores`` (B, L)::

    pad_rows(X, qid[, categorical]) -> PaddedLists(features, mask, categorical, rows)
    unpad_scores(scores (B, L), rows (B, L)) -> scores (N,)   (the caller's row order)

One list per query, in order of first appearance, its rows in their order in ``X`` (the graph's DLCM,
DCM and GSF read that order); ``rows[b, j]`` is the row of ``X`` at position ``j`` of list ``b``, -1 at
padding. Padding is 0 (features and codes), as in ``ctxrank.data.lists.ListBatch``.

NumPy only: the grouping is :func:`ctxrank.data.ranking_data.group_by_query` (what
``RankingData.from_arrays`` and the estimators use) and the layout
:func:`ctxrank.data.ranking_data.padded_rows` (what training batches use); ``ctxrank.data.lists``
itself is not imported, as it needs torch, which serving an ONNX file does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxrank.data.ranking_data import group_by_query, padded_rows

__all__ = ["PaddedLists", "group_rows", "pad_rows", "unpad_scores"]


@dataclass(frozen=True)
class PaddedLists:
    """B lists padded to L (the longest).

    Attributes:
        features: float32 (B, L, F); 0 at padding.
        mask: bool (B, L); True = real item, real items first.
        categorical: int64 (B, L, C) codes (0 at padding), or None.
        rows: int64 (B, L) the input row at each position, -1 at padding.
    """

    features: np.ndarray
    mask: np.ndarray
    categorical: np.ndarray | None
    rows: np.ndarray

    def inputs(self) -> dict[str, np.ndarray]:
        """The graph's inputs by name (``categorical`` only when there are codes)."""
        out = {"features": self.features, "mask": self.mask}
        if self.categorical is not None:
            out["categorical"] = self.categorical
        return out


def group_rows(qid: Any) -> np.ndarray:
    """int64 (B, L) input rows of each query (first appearance order), -1 at padding."""
    ids = np.asarray(qid)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"qid: expected a non-empty flat array of query ids, got shape {ids.shape}")
    _, offsets, order = group_by_query(ids)
    positions = padded_rows(offsets[:-1], np.diff(offsets))  # positions in the grouped rows
    if order is None:
        return positions
    return np.where(positions >= 0, order[np.maximum(positions, 0)], -1)


def pad_rows(X: Any, qid: Any, categorical: Any = None) -> PaddedLists:
    """Pad ``X`` (N, F) numbers and ``categorical`` (N, C) integer codes (or None) into one list per
    query of ``qid`` (N,).

    Raises:
        ValueError: shapes that do not agree, non-numeric ``X`` or non-integer codes.
    """
    x = np.asarray(X)
    if x.ndim != 2 or x.dtype.kind not in "fiu":
        raise ValueError(f"X: expected (N, F) numbers, got shape {x.shape} of dtype {x.dtype}")
    rows = group_rows(qid)
    if int((rows >= 0).sum()) != x.shape[0]:
        raise ValueError(f"qid: expected {x.shape[0]} query ids (one per row of X), got {np.shape(qid)}")
    real = rows >= 0
    take = np.maximum(rows, 0)
    features = x[take].astype(np.float32)  # (B, L, F)
    features[~real] = 0.0
    codes = None
    if categorical is not None:
        c = np.asarray(categorical)
        if c.ndim != 2 or c.shape[0] != x.shape[0] or c.dtype.kind not in "iu":
            raise ValueError(
                f"categorical: expected ({x.shape[0]}, C) integer codes, got {c.shape} {c.dtype}"
            )
        codes = c[take].astype(np.int64)
        codes[~real] = 0
    return PaddedLists(features=features, mask=real, categorical=codes, rows=rows)


def unpad_scores(scores: Any, rows: np.ndarray) -> np.ndarray:
    """The (N,) scores of the input rows from the graph's (B, L) scores (padding dropped)."""
    s = np.asarray(scores)
    if s.shape != rows.shape:
        raise ValueError(f"scores: expected shape {rows.shape} (the padded lists), got {s.shape}")
    real = rows >= 0
    out = np.empty(int(real.sum()), dtype=s.dtype)
    out[rows[real]] = s[real]
    return out
