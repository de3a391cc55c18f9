"""Estimator inputs -> :class:`RankingData`: NumPy arrays (any real dtype) or pandas DataFrames (numeric
columns, and ``category`` / object / string / bool columns as categorical codes), query ids as
``qid`` (one per row, any order), ``group`` (consecutive sizes) or a DataFrame column
(``query_column``). Rows are grouped by query here; :attr:`Inputs.order` maps scores back to the
caller's row order. scikit-learn's own ``check_array`` / ``validate_data`` keep ``n_features_in_``
and ``feature_names_in_`` and check them at predict time. An interaction log's shown positions
(``fit(..., position=...)``, or the DataFrame column ``position_column``) are checked session by
session (:mod:`ctxrank.data.interactions`) and kept in ``RankingData.shown_positions``, never as a
feature; prediction takes none (the column, when there, is dropped)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sklearn.utils.validation import check_array, validate_data

from ctxrank.data.categorical import CategoricalEncoder
from ctxrank.data.interactions import log_positions, sessions_without_interaction
from ctxrank.data.ranking_data import (
    RankingData,
    frame_columns,
    group_by_query,
    query_ids_of,
    text_label_error,
)
from ctxrank.registry import get_model

__all__ = ["Inputs", "reads_missing_values", "to_ranking_data"]

_QID, _LABEL = "__ctxrank_qid__", "__ctxrank_label__"


@dataclass
class Inputs:
    """``data``: rows grouped by query; ``order``: data row i is the caller's row ``order[i]`` (None:
    same order)."""

    data: RankingData
    order: np.ndarray | None

    def to_caller_order(self, scores: np.ndarray) -> np.ndarray:
        if self.order is None:
            return scores
        out = np.empty_like(scores)
        out[self.order] = scores
        return out


def _is_frame(X: Any) -> bool:
    pd = sys.modules.get("pandas")  # X cannot be a DataFrame where pandas was never imported
    return pd is not None and isinstance(X, pd.DataFrame)


def to_ranking_data(
    est: Any,
    X: Any,
    y: Any,
    qid: Any,
    group: Any,
    *,
    fit: bool,
    categorical_features: Any = None,
    position: Any = None,
) -> Inputs:
    """Check and convert the inputs of ``fit`` (``fit=True``: remember columns, fit the categorical
    encoder) or ``predict`` / ``score`` (check them against what ``fit`` saw). ``position``: (N,) the
    1-based shown position of each row of an interaction log (``fit`` only).

    Raises:
        ValueError: naming the argument (``X``, ``y``, ``qid``, ``group``, ``categorical_features``,
            ``position``).
    """
    position_column = getattr(est, "position_column", None)
    if position_column is not None:
        X, position = _split_position_column(X, position, position_column, fit)
    query_column = getattr(est, "query_column", None)
    names = {"query": query_column if query_column is not None else _name(qid), "label": _name(y)}
    if position is not None:
        names["position"] = position_column if position_column is not None else _name(position)
    if query_column is not None:
        X, qid = _split_query_column(X, qid, group, query_column)
    frame = _is_frame(X)
    if not frame:
        X = check_array(X, dtype="numeric", ensure_all_finite=False, input_name="X")
    validate_data(est, X, reset=fit, skip_check_array=True)
    n = X.shape[0]
    if y is not None:
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"y: expected {n} labels (one per row of X), got shape {y.shape}")
        if y.dtype.kind in "OUS" and any(isinstance(v, str | bytes) for v in y.tolist()):
            text = [v for v in y.tolist() if isinstance(v, str | bytes)]
            how = "map {what} to {to} first, e.g. y = pd.Series(y).map({mapping}).to_numpy()"
            raise text_label_error(f"y: Unknown label type {y.dtype}: y", text, how)
        if y.dtype.kind not in "biuf":
            raise ValueError(f"y: Unknown label type {y.dtype}; expected graded relevance labels (numbers)")
    ids = query_ids_of(n, qid, group)
    order = group_by_query(ids)[2]
    if fit:
        est.categorical_features_ = _categorical_names(X, categorical_features, frame)
        est.table_columns_ = names if frame else None
    cats = est.categorical_features_
    if not cats and not frame:
        data = RankingData.from_arrays(X, y, ids, allow_missing=True)
    else:
        df = _as_frame(X, frame)
        if fit:
            est.encoder_ = CategoricalEncoder() if cats else None
        numeric = tuple(c for c in df.columns if c not in set(cats))
        df = df.assign(**{_QID: np.asarray(ids).astype(str)})
        if y is not None:
            df[_LABEL] = y
        data = RankingData.from_frame(
            df,
            query=_QID,
            label=None if y is None else _LABEL,
            categorical=cats,
            numeric=numeric,
            encoder=est.encoder_,
            allow_missing=True,
        )
    if position is not None:
        data = _with_positions(data, position, order)
    if not reads_missing_values(est):
        _refuse_missing(est, data, order)
    return Inputs(data, order)


def _with_positions(data: RankingData, position: Any, order: np.ndarray | None) -> RankingData:
    """``data`` with the checked shown positions (``position`` (N,) in the caller's row order) and the
    count of its sessions without interaction."""
    n = data.n_items
    try:
        if hasattr(position, "to_numpy"):  # pandas: NA -> NaN
            values = position.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            values = np.asarray(position, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"position: expected whole numbers >= 1 (the 1-based shown position of each row), "
            f"got {np.asarray(position).dtype} values"
        ) from None
    if values.shape != (n,):
        raise ValueError(f"position: expected {n} values (one per row of X), got shape {values.shape}")
    rows = np.arange(n, dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
    shown = log_positions(
        values[rows], data.query_offsets, data.query_ids, rows, "position", lambda r: f"row {r}", "position"
    )
    info = {
        **data.info,
        "sessions_without_interaction": sessions_without_interaction(data.labels, data.query_offsets),
    }
    return replace(data, shown_positions=shown, info=info)


def _split_position_column(X: Any, position: Any, column: str, fit: bool) -> tuple[Any, Any]:
    """(X without the shown-position column ``column``, its values: None unless ``fit``)."""
    if not _is_frame(X):
        if not fit:
            return X, None
        raise ValueError(
            f"X: position_column={column!r} needs a pandas DataFrame with that column, got {type(X).__name__}"
        )
    if position is not None:
        raise ValueError(f"position: the positions come from X[{column!r}] (position_column); do not pass it")
    if column not in X.columns:
        if fit:
            raise ValueError(
                f"X: no position column {column!r} (position_column); columns: {list(X.columns)[:40]}"
            )
        return X, None  # rows to score need no position
    return X.drop(columns=[column]), (X[column] if fit else None)


def _refuse_missing(est: Any, data: RankingData, order: np.ndarray | None) -> None:
    """ValueError for an estimator that does not read missing values (NaN) in ``data``'s features:
    the first one (the caller's row and column), how many, and the fix for this estimator."""
    if data.features.size == 0 or not np.isnan(data.features.min()):  # NaN propagates
        return
    nan = np.isnan(data.features)
    rows, cols = np.nonzero(nan)
    caller = rows if order is None else order[rows]
    first = int(np.argmin(caller))
    column = repr(data.feature_names[cols[first]]) if data.feature_names else int(cols[first])
    name = type(est).__name__
    if not get_model(est.model_name()).missing_indicator:
        fix = "impute X first, or use LambdaMARTRanker (LightGBM reads missing values)"
    else:
        reranker = est.reranker_estimator() if hasattr(est, "reranker_estimator") else None
        option = (
            f'{name}(missing="indicator")'
            if reranker is None
            else f'{name}(reranker={type(reranker).__name__}(missing="indicator"))'
        )
        fix = (
            f"fit {option} (a learned fill and a missing indicator per feature), "
            "impute X first, or use LambdaMARTRanker"
        )
    raise ValueError(
        f"X: row {int(caller[first])}, column {column} is missing (NaN / None / NA; "
        f"{int(nan.sum()):,} missing value(s) in {np.unique(rows).size} row(s)); "
        f"{name} (model {est.model_name()}) does not read missing values: {fix}"
    )


def reads_missing_values(est: Any) -> bool:
    """The estimator reads NaN (a missing value) in ``X``: LambdaMART (LightGBM), or a neural model
    with ``missing="indicator"`` (a learned fill and a missing indicator); the others refuse it."""
    indicator = getattr(est, "missing", "native") == "indicator"
    return get_model(est.model_name()).traits.reads_missing or indicator


def _name(values: Any) -> str | None:
    """The column name of a pandas Series (``qid=df["session"]``, ``y=df["chosen"]``), else None."""
    name = getattr(values, "name", None) if hasattr(values, "to_numpy") else None
    return name if isinstance(name, str) and name else None


def _split_query_column(X: Any, qid: Any, group: Any, column: str) -> tuple[Any, Any]:
    """(X without the query column, its values) for an estimator with ``query_column``."""
    if not _is_frame(X):
        raise ValueError(
            f"X: query_column={column!r} needs a pandas DataFrame with that column, got {type(X).__name__}"
        )
    if column not in X.columns:
        raise ValueError(f"X: no query column {column!r} (query_column); columns: {list(X.columns)[:40]}")
    if qid is not None or group is not None:
        raise ValueError(
            f"qid: the query ids come from X[{column!r}] (query_column); do not pass qid or group"
        )
    return X.drop(columns=[column]), X[column].to_numpy()


def _categorical_names(X: Any, categorical_features: Any, frame: bool) -> tuple[str, ...]:
    """The categorical columns: names (DataFrame) or indices (array) given, else, for a DataFrame, the
    columns of dtype category / object / string / bool."""
    if categorical_features is None:
        return frame_columns(X, None, None, None, None)[1] if frame else ()
    if isinstance(categorical_features, (str, int)):
        categorical_features = [categorical_features]
    names = [str(c) for c in categorical_features]
    valid = [str(c) for c in X.columns] if frame else [str(i) for i in range(X.shape[1])]
    unknown = [c for c in names if c not in valid]
    if unknown:
        what = "columns of X" if frame else f"column indices 0..{X.shape[1] - 1}"
        raise ValueError(f"categorical_features: unknown column(s) {unknown}; the {what} are {valid[:40]}")
    if len(set(names)) != len(names):
        raise ValueError(f"categorical_features: a column is named twice: {names}")
    return tuple(names)


def _as_frame(X: Any, frame: bool) -> Any:
    """A DataFrame with string column names ("0", "1", ... for an array)."""
    import pandas as pd

    if frame:
        return X.set_axis([str(c) for c in X.columns], axis=1)
    return pd.DataFrame(X, columns=[str(i) for i in range(X.shape[1])])
