"""The neural model a run config names, built the same way for training, the memory check and a saved
model: the registry's model (``ctxrank.registry.make_model``), inside :class:`MissingIndicator` when
``train.missing = "indicator"`` (its inner model reads 2F features) and :class:`Residual` when
``rerank.residual``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxrank.config import RunConfig
from ctxrank.data.ranking_data import RankingData, missing_message
from ctxrank.models.base import RankingModule
from ctxrank.models.missing import MissingIndicator
from ctxrank.models.residual import Residual
from ctxrank.registry import get_model, make_model

__all__ = ["build_model", "missing_handling", "missing_problem"]

_FILL = "fill them when reading (null_fill = query_min, letor_min or a number: --null-fill RULE)"

#: how ``null_fill`` filled a missing value, for :func:`missing_handling`'s line
_FILLED = {
    "query_min": "filled with the feature's minimum over the query's other items (null_fill = query_min)",
    "letor_min": "filled with min(the query's minimum, 0) (null_fill = letor_min)",
}


def missing_problem(config: RunConfig, data: RankingData | None) -> str | None:
    """Why the model of ``config`` cannot read ``data``'s missing values (NaN) under ``train.missing``;
    None when it can, or there are none (``"native"``: LambdaMART reads them; ``"indicator"``: a
    neural model's learned fill and indicators; ``"error"``: nobody)."""
    if data is None:
        return None
    policy, model, entry = config.train.missing, config.model, get_model(config.model)
    if policy == "indicator" or (policy == "native" and entry.traits.reads_missing):
        return None
    if policy == "error":
        return missing_message(data, "train.missing = 'error' refuses them", _FILL)
    if not entry.missing_indicator:
        return missing_message(data, f"{model} does not read missing values", f"{_FILL}, or train lambdamart")
    return missing_message(
        data,
        f"{model} does not read missing values by itself",
        "set train.missing = 'indicator' (--set train.missing=indicator: a learned fill and a missing "
        f"indicator per feature), or {_FILL}",
    )


def missing_handling(config: RunConfig, splits: Sequence[Any]) -> dict[str, Any] | None:
    """What a run does with the missing feature values of its ``splits`` (RankingData; None and
    streams skipped): ``{"cells", "columns", "kept", "filled", "text"}``, ``text`` the line
    ``ctxrank train`` prints (``"12 missing cells in 2 columns: kept missing (NaN) for lambdamart, which
    reads them"``); None when there is none. Call it after :func:`missing_problem` found none."""
    kept = filled = columns = 0
    nan_columns: Any = None
    null_fill = None
    read = set()  # the splits of one file (--data split at random) share its reader's counts
    for data in splits:
        if not isinstance(data, RankingData):
            continue
        info = data.info
        whole = info.get("split_of", data.source)
        if info.get("null_filled") and whole not in read:
            read.add(whole)
            filled += int(info["null_filled"])
            null_fill = info.get("null_fill", null_fill)
            columns = max(columns, int(info.get("missing_columns", 0)))
        nan = np.isnan(data.features)
        if nan.any():
            kept += int(nan.sum())
            found = nan.any(axis=0)
            nan_columns = (
                found if nan_columns is None or nan_columns.shape != found.shape else nan_columns | found
            )
    if kept + filled == 0:
        return None
    parts = []
    if kept:
        if config.train.missing == "indicator":
            how = "kept missing (NaN): the model learns a fill and a missing indicator per feature"
        else:
            how = f"kept missing (NaN) for {config.model}, which reads them (LightGBM)"
        parts.append(how if not filled else f"{kept:,} {how}")
        columns = max(columns, int(nan_columns.sum()))
    if filled:
        how = _FILLED.get(null_fill, f"filled with {null_fill}" if null_fill is not None else "filled")
        parts.append(how if not kept else f"{filled:,} {how}")
    cells = kept + filled
    text = f"{cells:,} missing cell(s) in {columns} column(s): " + "; ".join(parts)
    return {"cells": cells, "columns": columns, "kept": kept, "filled": filled, "text": text}


def build_model(
    config: RunConfig,
    n_features: int,
    categorical_cardinalities: Sequence[int] = (),
    *,
    name: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> RankingModule:
    """An untrained model of ``config`` for data of ``n_features`` features (``name`` / ``params``: a
    saved model's own, else ``config.model`` / ``config.model_params``)."""
    name = config.model if name is None else name
    params = config.model_params if params is None else params
    indicator = config.train.missing == "indicator"
    width = 2 * n_features if indicator else n_features
    model = make_model(name, width, params, categorical_cardinalities=categorical_cardinalities)
    if indicator:
        model = MissingIndicator(model, n_features)
    return Residual(model) if config.rerank.residual else model
