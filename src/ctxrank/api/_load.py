"""A fitted estimator from a model directory (``ctxrank train --out`` or ``Ranker.save``): the model
itself through ``training.checkpoint.load_model`` (the one loader of the CLI), the parameters from the
saved run config, the learned attributes from ``ctxrank.json`` and ``train_log.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ctxrank.api import estimators
from ctxrank.api._params import param_spec
from ctxrank.api.pipeline import RerankPipeline
from ctxrank.config import RunConfig, TrainConfig
from ctxrank.data.categorical import CategoricalEncoder
from ctxrank.data.ranking_data import RankingData
from ctxrank.fit_summary import FitSummary
from ctxrank.registry import get_model
from ctxrank.training.checkpoint import load_model, read_meta
from ctxrank.training.run import RunResult

__all__ = ["load"]


def load(path: str | Path) -> Any:
    """The fitted estimator of the model directory ``path`` (written by ``ctxrank train --out`` or an
    estimator's ``save``): ``predict``, ``score`` and ``save`` work; the class follows the saved model.

    Raises:
        ValueError: not a model directory, or one without its run config (very old directories).
    """

    path = Path(path)
    meta = read_meta(path)
    predictor = load_model(path)
    saved = meta.get("run_config")
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: the model directory records no run config; it cannot become an estimator")
    config = RunConfig.from_saved(saved)
    api = meta.get("api") or {}
    est = _estimator(config, api)
    history = _history(path)
    summary = FitSummary.from_json(meta.get("training") or {})
    layout = _layout(meta, predictor)
    est._set_fitted(
        RunResult(config=config, summary=summary, predictor=predictor, history=history, layout=layout)
    )
    _set_inputs(est, meta, api, layout)
    return est


def _estimator(config: RunConfig, api: dict[str, Any]) -> Any:
    """An unfitted estimator with the saved run config's parameters (a RerankPipeline when re-ranking)."""
    cls = getattr(estimators, str(api.get("estimator", "")), None)
    if not (isinstance(cls, type) and issubclass(cls, estimators.Ranker)) or cls is RerankPipeline:
        cls = estimators.ESTIMATOR_OF_MODEL.get(config.model, estimators.Ranker)
    params = _params_of(config)
    if cls is estimators.Ranker:
        params["model"] = config.model
    query_column = api.get("query_column")
    rr = config.rerank
    if not rr.initial:
        columns = {k: api[k] for k in ("query_column", "position_column") if api.get(k) is not None}
        return cls(**params, **columns)
    initial, debias = get_model("lambdamart").debias_of_params(rr.initial_params)  # its train.debias
    first = {
        "random_state": initial.pop("seed", config.train.seed),
        "threads": initial.pop("num_threads", None),
    }
    return RerankPipeline(
        estimators.LambdaMARTRanker(**initial, **first, **debias),
        cls(**params),
        top_k=rr.top_k,
        crossfit=rr.crossfit,
        rank_feature=rr.rank_feature,
        score_feature=rr.score_feature,
        query_column=query_column,
    )


def _params_of(config: RunConfig) -> dict[str, Any]:
    """Estimator parameters from a run config (``train.seed`` -> ``random_state``)."""
    spec = param_spec(config.model)
    params = {k: v for k, v in config.model_params.items() if k in spec.model}
    if not get_model(config.model).config_params:
        params.update(
            {
                k: v
                for k, v in (("random_state", config.train.seed), ("threads", config.train.threads))
                if k in spec.train
            }
        )
        params.update({k: getattr(config.train, k) for k in get_model(config.model).debias_train_keys})
        return params
    if "loss" in spec.run:
        params["loss"] = config.loss
        params["loss_params"] = dict(config.loss_params) or None
    params["normalizer"] = config.transform
    for name in (f for f in TrainConfig.__dataclass_fields__):
        params["random_state" if name == "seed" else name] = getattr(config.train, name)
    return {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}


def _history(path: Path) -> list[dict[str, Any]]:
    log = path / "train_log.jsonl"
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _layout(meta: dict[str, Any], predictor: Any) -> RankingData:
    """A one-row RankingData with the training layout (feature and categorical names), what saving
    the model again needs."""
    n = int(predictor.n_features)
    names = tuple(str(x) for x in meta.get("feature_names") or ())
    cat_names = tuple(str(x) for x in meta.get("categorical_names") or ())
    cards = tuple(int(c) for c in meta.get("categorical_cardinalities") or ())
    return RankingData(
        features=np.zeros((1, n), np.float32),
        labels=np.zeros(1, np.float32),
        query_ids=np.array(["0"]),
        query_offsets=np.array([0, 1], dtype=np.int64),
        categorical=np.zeros((1, len(cat_names)), np.int64) if cat_names else None,
        feature_names=names if len(names) == n else (),
        categorical_names=cat_names,
        categorical_cardinalities=cards,
    )


def _set_inputs(est: Any, meta: dict[str, Any], api: dict[str, Any], layout: RankingData) -> None:
    """``n_features_in_``, ``feature_names_in_``, ``categorical_features_``, ``encoder_``."""
    cats = tuple(api.get("categorical_features") or ())
    enc = api.get("encoder") or (meta.get("table") or {}).get("encoder")
    est.encoder_ = CategoricalEncoder.from_dict(enc) if enc else None
    if not cats and est.encoder_ is not None:
        cats = tuple(est.encoder_.columns_ or ())
    est.categorical_features_ = cats
    est.n_features_in_ = layout.n_features + len(cats)
    names = api.get("feature_names_in")
    if names:
        est.feature_names_in_ = np.asarray(names, dtype=object)
