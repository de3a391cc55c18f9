"""`DirectoryRanker`: a model directory of ``ctxrank train`` served through ctxrank's own loader and
predict, the path of ``ctxrank predict --model DIR`` (so its scores are that command's).

::

    ranker = DirectoryRanker("runs/q")       # any saved model: neural, baseline, re-ranking, ensemble
    scores = ranker.predict(X, qid)           # X (N, F) raw features, qid (N,) -> scores (N,)

A re-ranking directory (``--initial lambdamart``) runs its whole pipeline (initial ranker, top k,
re-ranker, merge: ``ctxrank.training.rerank.RerankPredictor``) on all rows of each query; ``X`` holds
the raw features only. The feature names, categorical columns and vocabulary are the directory's
``ctxrank.json``'s; missing values (NaN) are accepted where the model reads them
(``ctxrank.training.build.missing_problem``: LambdaMART, ``train.missing = "indicator"``).
Needs torch (and LightGBM for trees); an ONNX file is served without either (:mod:`.onnx_ranker`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ctxrank._checks import check_int
from ctxrank._modeldir import read_meta
from ctxrank.config import RunConfig
from ctxrank.data.ranking_data import RankingData, group_by_query
from ctxrank.training.build import missing_problem
from ctxrank.training.checkpoint import load_model
from ctxrank.training.ensemble import member_dir
from ctxrank.training.predict import set_threads

__all__ = ["DirectoryRanker"]


class DirectoryRanker:
    """A saved model directory (see the module docstring); the attributes of
    :class:`~ctxrank.serving.onnx_ranker.OnnxRanker` (``feature_names``, ``n_features``,
    ``categorical_names``, ``categorical_vocab``, ``allow_missing``) and its ``predict``.

    Raises:
        ValueError: not a model directory ctxrank can load (the loader's message).
    """

    kind = "model directory"

    def __init__(self, path: str | os.PathLike, *, threads: int = 1) -> None:
        self.path = Path(path)
        threads = check_int("threads", threads)
        if not self.path.is_dir():
            raise ValueError(f"{self.path}: no such model directory")
        meta = read_meta(self.path)
        self.predictor = load_model(self.path)
        set_threads(self.predictor, threads)
        self.meta = meta
        self.n_features = int(self.predictor.n_features)
        layout = read_meta(self.path / member_dir(0)) if self.predictor.ensemble_size else meta
        names = [str(n) for n in layout.get("feature_names") or []]
        # a re-ranker's names end with the columns it appends (initial_rank, ...): the raw ones come first
        self.feature_names: tuple[str, ...] = (
            tuple(names[: self.n_features]) if len(names) >= self.n_features else ()
        )
        # LambdaMART's loader reads them from its metadata (or, saved before they were, its table encoder)
        lgbm = getattr(self.predictor, "categorical_names_in_", None)
        cats = lgbm if lgbm is not None else layout.get("categorical_names") or ()
        cards = (
            self.predictor.categorical_cardinalities_in_
            if lgbm is not None
            else layout.get("categorical_cardinalities") or ()
        )
        self.categorical_names = tuple(str(c) for c in cats)
        self.categorical_cardinalities = tuple(int(c) for c in cards)
        vocab = ((layout.get("table") or {}).get("encoder") or {}).get("vocab") or {}
        self.categorical_vocab = {c: [str(v) for v in vocab.get(c, [])] for c in self.categorical_names}
        config = RunConfig.from_saved(meta["run_config"])
        probe = RankingData.from_arrays(np.full((1, 1), np.nan), qid=[0], allow_missing=True)
        self.allow_missing = missing_problem(config, probe) is None
        self.model_name = config.model

    def describe(self) -> dict[str, Any]:
        """What a client needs to call the model (served at ``/ready``)."""
        return {
            "kind": self.kind,
            "path": str(self.path),
            "model": self.model_name,
            "feature_names": list(self.feature_names),
            "n_features": self.n_features,
            "categorical_names": list(self.categorical_names),
            "missing_values": self.allow_missing,
            "rerank": self.meta.get("rerank"),
        }

    def predict(self, X: Any, qid: Any, categorical: Any = None) -> np.ndarray:
        """float64 (N,) scores of the rows of ``X`` (N, F) grouped by ``qid`` (N,), in ``X``'s order;
        ``categorical`` (N, C) codes of the model's encoder when it has categorical columns.

        Raises:
            ValueError: inputs the model refuses (feature count, NaN, ...; RankingData's and the
                model's own checks).
        """
        x = np.asarray(X)
        _, offsets, order = group_by_query(np.asarray(qid))
        if order is not None:
            x = x[order]
            categorical = None if categorical is None else np.asarray(categorical)[order]
        data = RankingData.from_arrays(
            x,
            group=np.diff(offsets),
            feature_names=self.feature_names,
            categorical=categorical,
            categorical_names=self.categorical_names,
            categorical_cardinalities=self.categorical_cardinalities,
            source="the request",
            allow_missing=self.allow_missing,
        )
        scores = np.asarray(self.predictor.predict(data), dtype=np.float64)
        if order is None:
            return scores
        out = np.empty_like(scores)
        out[order] = scores
        return out
