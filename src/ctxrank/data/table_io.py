"""Reading tables for a saved model and keeping the file's row order.

:func:`ctxrank.data.table.read_table_with_rows` gathers each query's rows when a file is not sorted by
query. Scores written by ``predict`` and read by ``evaluate --scores`` are always in the FILE's row
order; :func:`to_file_order` / :func:`from_file_order` undo / apply the regrouping with its
``file_rows`` map. :func:`table_meta` is the ``"table"`` entry a model trained on a table saves.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ctxrank._checks import DEFAULT_TABLE_NULL_FILL, OptionError
from ctxrank.data.limits import DEFAULT_MAX_DENSE_BYTES
from ctxrank.data.table import TableSpec

__all__ = ["from_file_order", "read_table_file", "table_meta", "to_file_order"]


def read_table_file(
    path: str,
    spec: TableSpec,
    *,
    scoring: bool = False,
    encoder: Any = None,
    max_dense_bytes: int = DEFAULT_MAX_DENSE_BYTES,
    null_fill: str | float = DEFAULT_TABLE_NULL_FILL,
) -> tuple[Any, np.ndarray]:
    """``spec.read(path)`` with a hint when a text column was taken as numeric: ``(data, file_rows)``."""
    try:
        return spec.read(
            path, scoring=scoring, encoder=encoder, max_dense_bytes=max_dense_bytes, null_fill=null_fill
        )
    except ValueError as exc:
        if "expected a number" in str(exc) and spec.numeric is None:
            raise OptionError(
                "{msg} (every column that is not the query, label, docid, group, position or a {categorical} "
                "column is read as numeric: list text columns with {categorical}, or the features with "
                "{numeric})",
                msg=exc.text if isinstance(exc, OptionError) else str(exc),
            ) from None
        raise


def to_file_order(scores: np.ndarray, file_rows: np.ndarray | None) -> np.ndarray:
    """``(N,)`` scores of the (regrouped) data rows -> the same scores in the file's row order."""
    if file_rows is None:
        return scores
    out = np.empty_like(scores)
    out[file_rows] = scores
    return out


def from_file_order(scores: np.ndarray, file_rows: np.ndarray | None) -> np.ndarray:
    """``(N,)`` scores in the file's row order -> the (regrouped) data's row order."""
    return scores if file_rows is None else scores[file_rows]


def table_meta(spec: TableSpec, train: Any, encoder: Any) -> dict[str, Any]:
    """The ``"table"`` entry of a saved model: the spec with the training numeric columns and encoder;
    ``numeric_default``: the numeric columns were every other column of the file (no ``--numeric``), so
    a file to score with a column the spec lacks is refused (``ctxrank.data.sources``)."""
    saved = replace(
        spec, numeric=tuple(train.feature_names), encoder=encoder if spec.categorical else None
    ).to_dict()
    return {**saved, "numeric_default": spec.numeric is None}
