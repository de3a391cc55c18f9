"""`CategoricalEncoder`: integer codes for categorical columns (code 0 = unknown or missing), fitted on
the training split. Used by the table reader (``ctxrank.data.table``) and by
``RankingData.from_frame`` (pandas DataFrames, the estimator API).

pandas is imported when columns are encoded, not with the module: ``RankingData`` and the estimators
hold an encoder without needing pandas (``tests/test_package.py`` checks the estimators' imports)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxrank._checks import check_int

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CategoricalEncoder"]


class CategoricalEncoder:
    """Integer codes for categorical columns; code 0 is reserved for unknown or missing values.

    Fitted on the training split: each column's vocabulary is its distinct non-missing values
    (as strings) seen at least ``min_count`` times, in sorted order, coded 1..K. At transform time a
    value outside the vocabulary, or a missing value, gets 0.

    Args:
        min_count: categories seen fewer times than this in the training data are left out of the
            vocabulary (they become 0, "unknown"), which bounds the size of embedding tables.

    Attributes:
        columns_: the column names, in the order of the code matrix's columns.
        vocab_: column name -> list of its categories (the category with code c is ``vocab_[col][c-1]``).
        cardinalities_: per column, K + 1 (the vocabulary size including the reserved code 0).
    """

    def __init__(self, min_count: int = 1) -> None:
        self.min_count = check_int("min_count", min_count)
        self.columns_: tuple[str, ...] | None = None
        self.vocab_: dict[str, list[str]] = {}

    @property
    def is_fitted(self) -> bool:
        return self.columns_ is not None

    @property
    def cardinalities_(self) -> tuple[int, ...]:
        self._check_fitted()
        return tuple(len(self.vocab_[c]) + 1 for c in self.columns_)  # type: ignore[union-attr]

    def fit(self, columns: Mapping[str, Any]) -> CategoricalEncoder:
        """Learn each column's vocabulary.

        Args:
            columns: column name -> N values (a pandas Series, array or list); None/NaN = missing.
                Values are compared as strings (``str(value)``).

        Returns:
            self.
        """
        if not columns:
            raise ValueError("CategoricalEncoder.fit needs at least one column")
        vocab = {}
        for name, values in columns.items():
            s, missing = _as_strings(values)
            counts = s[~missing].value_counts()
            vocab[str(name)] = sorted(str(v) for v in counts.index[counts.to_numpy() >= self.min_count])
        self.vocab_ = vocab
        self.columns_ = tuple(vocab)
        return self

    def transform(self, columns: Mapping[str, Any]) -> np.ndarray:
        """int64 (N, C) codes, columns in ``columns_`` order (extra input columns are ignored)."""
        return self._encode(columns)[0]

    def fit_transform(self, columns: Mapping[str, Any]) -> np.ndarray:
        return self.fit(columns).transform(columns)

    def _encode(self, columns: Mapping[str, Any]) -> tuple[np.ndarray, int, int]:
        """(codes int64 (N, C), number of unknown non-missing values, number of missing values)."""
        self._check_fitted()
        lacking = [c for c in self.columns_ if c not in columns]  # type: ignore[union-attr]
        if lacking:
            raise ValueError(
                f"CategoricalEncoder was fitted on columns {list(self.columns_)}; missing {lacking}"
            )
        import pandas as pd  # frames only (see the module's docstring)

        parts, unknown, n_missing = [], 0, 0
        for name in self.columns_:  # type: ignore[union-attr]
            s, missing = _as_strings(columns[name])
            codes = pd.Index(self.vocab_[name], dtype=object).get_indexer(s).astype(np.int64) + 1  # -1 -> 0
            codes[missing] = 0
            unknown += int(np.sum((codes == 0) & ~missing))
            n_missing += int(missing.sum())
            parts.append(codes)
        n = parts[0].size
        if any(p.size != n for p in parts):
            raise ValueError("categorical columns have different lengths")
        return np.stack(parts, axis=1), unknown, n_missing

    def decode(self, codes: np.ndarray) -> dict[str, np.ndarray]:
        """Inverse of :meth:`transform`: int (N, C) codes -> column name -> object (N,) categories
        (``None`` for code 0, unknown or missing)."""
        self._check_fitted()
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != len(self.columns_):  # type: ignore[arg-type]
            raise ValueError(f"expected codes of shape [N, {len(self.columns_)}], got {codes.shape}")  # type: ignore[arg-type]
        out = {}
        for j, name in enumerate(self.columns_):  # type: ignore[union-attr]
            table = np.array([None, *self.vocab_[name]], dtype=object)
            col = codes[:, j]
            if col.size and (col.min() < 0 or col.max() >= table.size):
                raise ValueError(f"codes of column {name!r} must lie in [0, {table.size}), got {col.max()}")
            out[name] = table[col]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: ``{"min_count": int, "columns": [...] | None, "vocab": {col: [str, ...]}}``."""
        return {
            "min_count": self.min_count,
            "columns": None if self.columns_ is None else list(self.columns_),
            "vocab": {c: list(v) for c, v in self.vocab_.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CategoricalEncoder:
        """Rebuild an encoder from :meth:`to_dict` output."""
        enc = cls(min_count=int(d.get("min_count", 1)))
        if d.get("columns") is not None:
            columns = tuple(str(c) for c in d["columns"])
            vocab = d.get("vocab") or {}
            if set(vocab) != set(columns):
                raise ValueError(f"encoder vocab names {sorted(vocab)}, columns {list(columns)}")
            enc.vocab_ = {c: [str(v) for v in vocab[c]] for c in columns}
            for c, v in enc.vocab_.items():
                if len(set(v)) != len(v):
                    raise ValueError(f"encoder vocabulary of column {c!r} has duplicates")
            enc.columns_ = columns
        return enc

    def _check_fitted(self) -> None:
        if self.columns_ is None:
            raise ValueError("CategoricalEncoder is not fitted: call fit() on the training data first")

    def __repr__(self) -> str:
        if self.columns_ is None:
            return f"CategoricalEncoder(min_count={self.min_count}, unfitted)"
        cards = dict(zip(self.columns_, self.cardinalities_, strict=True))
        return f"CategoricalEncoder(min_count={self.min_count}, cardinalities={cards})"


def _as_strings(values: Any) -> tuple[pd.Series, np.ndarray]:
    """(values as an object Series of str with None where missing, bool (N,) missing mask)."""
    import pandas as pd  # frames only (see the module's docstring)

    s = values if isinstance(values, pd.Series) else pd.Series(values, dtype=object)
    missing = s.isna().to_numpy()
    out = np.full(len(s), None, dtype=object)
    if (~missing).any():
        out[~missing] = s[~missing].astype(str).to_numpy(dtype=object)
    return pd.Series(out, dtype=object), missing
