"""The neural model a run config names, built the same way for training, the memory check and a saved
model: the registry's model (``ctxrank.registry.make_model``), inside :class:`MissingIndicator` when
``train.missing = "indicator"`` (its inner model reads 2F features) and :class:`Residual` when
``rerank.residual``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxrank.config import RunConfig
from ctxrank.data.ranking_data import RankingData, missing_message
from ctxrank.models.base import RankingModule
from ctxrank.models.missing import MissingIndicator
from ctxrank.models.residual import Residual
from ctxrank.registry import is_baseline, make_model, reads_missing

__all__ = ["build_model", "missing_problem"]

_FILL = "fill them when reading (null_fill = query_min, letor_min or a number)"


def missing_problem(config: RunConfig, data: RankingData | None) -> str | None:
    """Why the model of ``config`` cannot read ``data``'s missing values (NaN) under ``train.missing``;
    None when it can, or there are none (``"native"``: LambdaMART reads them; ``"indicator"``: a
    neural model's learned fill and indicators; ``"error"``: nobody)."""
    if data is None:
        return None
    policy, model = config.train.missing, config.model
    if policy == "indicator" or (policy == "native" and reads_missing(model)):
        return None
    if policy == "error":
        return missing_message(data, "train.missing = 'error' refuses them", _FILL)
    if is_baseline(model):
        return missing_message(data, f"{model} does not read missing values", f"{_FILL}, or train lambdamart")
    return missing_message(
        data,
        f"{model} does not read missing values by itself",
        f"set train.missing = 'indicator' (a learned fill and a missing indicator per feature), or {_FILL}",
    )


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
