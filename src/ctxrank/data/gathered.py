"""A feature matrix of rows gathered from another one when read, never held whole.

A re-ranking run trains on each query's top k items of a split (``truncate_top_k``): with WEB30K-like
lists that is 0.7 of the rows, and a copy of them beside the split itself was 0.56x the dense features
of the three splits held during the whole fit (docs/benchmarks.md, "Full-size runs").
:class:`GatheredRows` stands for that copy: row ``i`` is ``base[rows[i]]`` followed by ``extra[i]`` (the
appended initial-rank / initial-score columns), normalized by a row-wise transform when one is attached,
and built only for the rows a reader asks for (a padded batch, a block of a normalizer's fit, a block
of a hash). Every value read is the one the copy held, bit for bit: the same gather and the same
element-wise normalization, only done per block.

It is read-only and implements what ctxrank's readers use of a float32 (N, F) ndarray: ``shape``,
``ndim``, ``dtype``, ``size``, ``len``, indexing by a slice, an integer or boolean array (optionally
with a column selection), ``min``, ``blocks`` and ``np.asarray`` (a full copy, for a reader that needs
one; built a block at a time).

NumPy has no lazily gathered array and the copy is what this replaces, so it is written here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["GatheredRows", "is_gathered"]

_BLOCK_ELEMENTS = 1 << 22  # values gathered at a time when a reader asks for every row (16 MB float32)


class GatheredRows:
    """float32 (N', F + E) rows ``base[rows]`` with ``extra`` (N', E) appended, optionally normalized.

    Args:
        base: float32 (N, F) the matrix the rows come from (not copied: it must not change while this
            is read).
        rows: int64 (N',) the row of ``base`` of each row.
        extra: float32 (N', E) columns appended after the gathered ones, or None.
        normalize: a row-wise map of float32 (n, F + E) blocks to float32 blocks of the same shape (what
            a fitted row-wise normalizer's ``transform`` attaches), or None.
    """

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(
        self, base: np.ndarray, rows: np.ndarray, extra: np.ndarray | None = None, normalize: Any = None
    ) -> None:
        if base.ndim != 2 or base.dtype != np.float32:
            raise ValueError(f"base must be a float32 (N, F) matrix, got {base.dtype} {base.shape}")
        rows = np.asarray(rows, dtype=np.int64)
        if extra is not None and (extra.ndim != 2 or extra.shape[0] != rows.size):
            raise ValueError(f"extra must be (N' = {rows.size}, E), got {extra.shape}")
        self.base, self.rows, self.extra, self.normalize = base, rows, extra, normalize
        width = base.shape[1] + (0 if extra is None else extra.shape[1])
        self.shape = (int(rows.size), int(width))

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"GatheredRows(shape={self.shape}, normalized={self.normalize is not None})"

    def with_normalize(self, normalize: Any) -> GatheredRows:
        """The same rows read through ``normalize`` (nothing copied)."""
        return GatheredRows(self.base, self.rows, self.extra, normalize)

    def take(self, index: np.ndarray) -> np.ndarray:
        """float32 (n, F + E): rows ``index`` (int64 positions in ``0..N'-1``), gathered and normalized."""
        f = self.base.shape[1]
        out = np.empty((index.size, self.shape[1]), dtype=np.float32)
        source = self.rows[index]
        if self.extra is None:
            np.take(self.base, source, axis=0, out=out)
        else:
            out[:, :f] = self.base[source]
            out[:, f:] = self.extra[index]
        return out if self.normalize is None else self.normalize(out)

    def __getitem__(self, key: Any) -> np.ndarray:
        columns: Any = None
        if isinstance(key, tuple):
            if len(key) != 2:
                raise IndexError(f"GatheredRows takes [rows] or [rows, columns], got {len(key)} indices")
            key, columns = key
        if isinstance(key, slice):
            index = np.arange(*key.indices(self.shape[0]), dtype=np.int64)
        elif isinstance(key, (int, np.integer)):
            index = np.array([key], dtype=np.int64)
        else:
            index = np.asarray(key)
            if index.dtype == bool:
                if index.shape != (self.shape[0],):
                    raise IndexError(f"a boolean row index needs {self.shape[0]} entries, got {index.shape}")
                index = np.flatnonzero(index)
            elif index.dtype.kind not in "iu":
                raise IndexError(f"rows must be a slice, an integer or integer/boolean array: {index.dtype}")
        index = index.astype(np.int64, copy=False)
        if index.size and (index.min() < -self.shape[0] or index.max() >= self.shape[0]):
            raise IndexError(f"row index out of range for {self.shape[0]} rows")
        out = self.take(np.where(index < 0, index + self.shape[0], index))
        if isinstance(key, (int, np.integer)):
            out = out[0]
        return out if columns is None else out[..., columns]

    def blocks(self, elements: int = _BLOCK_ELEMENTS) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, block)`` of consecutive rows, about ``elements`` values each."""
        step = max(1, elements // max(self.shape[1], 1))
        for a in range(0, self.shape[0], step):
            yield a, self[a : a + step]

    def min(self) -> np.float32:
        """The smallest value (NaN when any value is NaN, as ``ndarray.min``)."""
        if self.size == 0:
            raise ValueError("zero-size array to reduction operation minimum which has no identity")
        return min((b.min() for _, b in self.blocks()), key=lambda v: (not np.isnan(v), v))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if copy is False:
            raise ValueError("GatheredRows has no array to view: its rows are gathered when read (a copy)")
        out = np.empty(self.shape, dtype=np.float32)
        for a, block in self.blocks():
            out[a : a + block.shape[0]] = block
        return out if dtype is None else out.astype(dtype, copy=False)


def is_gathered(features: Any) -> bool:
    """Whether ``features`` is a :class:`GatheredRows` (not an ndarray)."""
    return isinstance(features, GatheredRows)
