"""What RankSVM and AdaRank share: parameter checks, the stored min-max scaling, validation metrics and
the JSON-only saved-model format.

Both models are linear scorers ``s(x) = w · m(x)`` over the min-max scaled features
``m(x) = (x - min) / (max - min)`` (min and max over the training rows, a feature constant on train
maps to 0; :class:`ctxrank.data.transforms.GlobalMinMax` with ``clip=False``: a linear scorer
extrapolates beyond the training range, clipping would only create ties). A saved model is one
``ctxrank.json`` file holding the parameters, the scaling and the weights as JSON numbers (which
round-trip exactly), so loading reads JSON and nothing else: it cannot execute code.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import numpy as np

from ctxrank._checks import is_int
from ctxrank._modeldir import META_FILE, read_meta
from ctxrank.baselines.lambdamart import FittedBaseline, _normalize_no_relevant
from ctxrank.data.ranking_data import RankingData, require_ranking_data
from ctxrank.data.transforms import GlobalMinMax, Transform
from ctxrank.metrics import evaluate_queries, format_metric, parse_metric


# -------------------------------------------------------------------------------- parameter checks
def check_no_relevant(value: Any) -> float | str:
    return _normalize_no_relevant(value)


def check_metric(name: str, value: Any, allowed: tuple[str, ...] | None = None) -> str:
    """A ctxrank metric name (``ctxrank.metrics.parse_metric``), canonical form; ``allowed`` restricts
    the base names."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a metric name such as 'ndcg@10', got {value!r}")
    try:
        base, k = parse_metric(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if allowed is not None and base not in allowed:
        forms = " or ".join(f"'{b}@K'" if b == "ndcg" else f"'{b}'" for b in allowed)
        raise ValueError(f"{name} must be {forms}, got {value!r}")
    return format_metric(base, k)


def check_params(cls: type, params: Mapping[str, Any]) -> None:
    """Unknown parameter names -> ValueError listing the valid ones (instead of Python's TypeError)."""
    valid = sorted(cls._PARAMS)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown parameter(s) {unknown}; valid parameters: {valid}")


# ------------------------------------------------------------------------------------------- data
def check_data(data: Any, what: str) -> RankingData:
    return require_ranking_data(data, what)


def check_same_features(train: RankingData, valid: RankingData | None) -> None:
    if valid is not None and valid.n_features != train.n_features:
        raise ValueError(f"train has {train.n_features} features but valid has {valid.n_features}")


def fit_scaler(train: RankingData) -> GlobalMinMax:
    """Global min-max over the training rows, without clipping (see the module docstring)."""
    return GlobalMinMax(clip=False).fit(train)


def scaled(scaler: Transform, data: RankingData) -> np.ndarray:
    """float64 ``(N, F)`` scaled features (computed in float64, stored as float32 by the transform)."""
    return scaler.transform(data).features.astype(np.float64)


class LinearScorer(FittedBaseline):
    """What RankSVM and AdaRank share: their parameters (``_PARAMS``) and, once fitted,
    ``score = w · m(x)`` over the stored min-max scaling ``scaler_`` and weights ``coef_``, and the
    metadata both save."""

    _FITTED = "coef_"
    _PARAMS: tuple[str, ...] = ()

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters (RankSVM's ``C`` as a float or a tuple of floats)."""
        return {name: getattr(self, name) for name in self._PARAMS}

    def set_params(self, **params: Any) -> Self:
        """Set parameters (validated as in the constructor). Returns self."""
        check_params(type(self), params)
        self.__init__(**{**self.get_params(), **params})
        return self

    def __repr__(self) -> str:
        defaults = type(self)().get_params()
        shown = [f"{k}={v!r}" for k, v in self.get_params().items() if v != defaults[k]]
        return f"{type(self).__name__}({', '.join(shown)})"

    def predict(self, data: RankingData) -> np.ndarray:
        """float64 ``(N,)`` scores ``w · m(x)`` of every row of ``data``.

        Raises:
            ValueError: not fitted, or a feature count other than the training one.
        """
        self._predict_data(data)
        return np.ascontiguousarray(scaled(self.scaler_, data) @ self.coef_, dtype=np.float64)

    def _linear_meta(self) -> dict[str, Any]:
        """The saved fields common to both: features, scaling, weights and the metric conventions."""
        return {
            "n_features": int(self.n_features_in_),
            "feature_names": list(self.feature_names_in_),
            "scaler": self.scaler_.to_dict(),
            "coef": [float(v) for v in self.coef_],
            "metric_conventions": {
                "metric": self.metric,
                "gain": "exp2",
                "convention": "standard",
                "no_relevant": self.no_relevant,
                "ties": "stable by input position",
            },
        }


def per_query(scores: np.ndarray, data: RankingData, metric: str, no_relevant: float | str) -> np.ndarray:
    """float64 ``(Q,)`` per-query ``metric`` (standard convention, ties by input order; NaN = skipped)."""
    return evaluate_queries(scores, data.labels, data.query_offsets, [metric], no_relevant=no_relevant)[
        metric
    ]


def mean_metric(scores: np.ndarray, data: RankingData, metric: str, no_relevant: float | str) -> float:
    """Mean of :func:`per_query` over the queries that are not skipped."""
    v = per_query(scores, data, metric, no_relevant)
    kept = v[~np.isnan(v)]
    if kept.size == 0:
        raise ValueError(
            f"{data.source or 'the data'}: no query has a relevant item, so {metric} with "
            "no_relevant='skip' is undefined"
        )
    return float(kept.mean())


# ------------------------------------------------------------------------------------ persistence
def read_kind(
    directory: str | Path, kind: str, what: str
) -> tuple[Path, dict[str, Any], dict[str, Any], int]:
    """``(path of ctxrank.json, its content, the saved params, the feature count)`` of ``directory``
    (JSON only), checked to be a ``kind`` model; the loaders name that path in their messages."""
    directory = Path(directory)
    meta = read_meta(directory)
    if meta.get("kind") != kind:
        raise ValueError(
            f"{directory}: a {meta.get('kind')!r} model, not {what} one (ctxrank.load_model loads any kind)"
        )
    path = directory / META_FILE
    params = meta.get("params")
    if not isinstance(params, dict):
        raise ValueError(f"{path}: 'params' missing from the model metadata")
    n = meta.get("n_features")
    if not is_int(n) or n < 1:
        raise ValueError(f"{path}: 'n_features' must be an integer >= 1, got {n!r}")
    return path, meta, params, int(n)


def float_vector(directory: Path, meta: Mapping[str, Any], key: str, n: int) -> np.ndarray:
    """``meta[key]`` as a float64 ``(n,)`` vector of finite numbers, or a ValueError naming the key."""
    value = meta.get(key)
    if not isinstance(value, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(f"{directory}: {key!r} must be a list of numbers in the model metadata")
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (n,) or not np.isfinite(arr).all():
        raise ValueError(f"{directory}: {key!r} must hold {n} finite numbers, got {arr.shape[0]}")
    return arr


def load_scaler(directory: Path, meta: Mapping[str, Any], n_features: int) -> Transform:
    try:
        scaler = Transform.from_dict(meta.get("scaler"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{directory}: bad 'scaler' in the model metadata ({exc})") from None
    if not isinstance(scaler, GlobalMinMax) or scaler.clip or scaler.n_features_in_ != n_features:
        raise ValueError(
            f"{directory}: 'scaler' must be an unclipped min-max scaling fitted on {n_features} features"
        )
    return scaler
