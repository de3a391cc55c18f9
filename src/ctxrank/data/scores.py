"""Scores files: one float per line, in the row order of a data file (``ctxrank predict`` writes them,
``ctxrank evaluate --scores`` reads them)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from ctxrank.data.paths import input_kind

__all__ = ["read_scores"]


def read_scores(
    path: str | os.PathLike, n_expected: int | None = None, data_name: str = "the data"
) -> np.ndarray:
    """``(N,)`` float64 scores of a scores file, one float per line, in the data file's row order.

    Trailing blank lines are ignored; any other line that is not a finite number is an error naming
    ``file:line``. With ``n_expected`` the count must match.
    """
    path = Path(path)
    input_kind(path, "scores file", why=": write the scores to a file first")
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
