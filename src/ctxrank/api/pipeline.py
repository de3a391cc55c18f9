"""The re-ranking protocol as an estimator: an initial ranker (LambdaMART) ranks every query, a neural
re-ranker re-orders each query's top ``top_k`` (``ctxrank.training.rerank``), trained through
``run_training`` exactly as ``ctxrank train --initial lambdamart --top-k K --crossfit C``."""

from __future__ import annotations

from typing import Any

from sklearn.base import BaseEstimator

from ctxrank._checks import OptionError
from ctxrank.api.estimators import LambdaMARTRanker, QILCMRanker, Ranker
from ctxrank.config import RerankConfig, RunConfig
from ctxrank.registry import get_model

__all__ = ["RerankPipeline"]


class RerankPipeline(Ranker):
    """``RerankPipeline(initial=LambdaMARTRanker(...), reranker=QILCMRanker(...), top_k=100, crossfit=5)``
    (the defaults are ``ctxrank train``'s, declared once: ``top_k`` 100, no cross-fitting).

    Args:
        initial: a :class:`LambdaMARTRanker` (unfitted; its parameters configure the initial ranker);
            None = ``LambdaMARTRanker()``.
        reranker: a neural estimator (``QILCMRanker``, ``DLCMRanker``, ``Ranker(model=...)``, ...);
            None = ``QILCMRanker()``.
        top_k: items re-ranked per query (the rest follow in the initial order).
        crossfit: K >= 2: out-of-fold initial scores on the training queries (K folds); 0 = off.
        rank_feature, score_feature: append the initial rank / score as features (None = the
            re-ranker's default).
        query_column: as for :class:`Ranker`.

    ``predict`` returns full-query scores (re-ranked top k first). Nested parameters work with
    scikit-learn tools: ``{"reranker__lr": [1e-3, 3e-4], "top_k": [50, 100]}``.
    """

    def __init__(
        self,
        initial: Any = None,
        reranker: Any = None,
        *,
        top_k: int = RerankConfig.top_k,
        crossfit: int = RerankConfig.crossfit,
        rank_feature: bool | None = None,
        score_feature: bool | None = None,
        query_column: str | None = None,
    ) -> None:
        self.initial = initial
        self.reranker = reranker
        self.top_k = top_k
        self.crossfit = crossfit
        self.rank_feature = rank_feature
        self.score_feature = score_feature
        self.query_column = query_column

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return BaseEstimator.get_params(self, deep)

    def set_params(self, **params: Any) -> RerankPipeline:
        return BaseEstimator.set_params(self, **params)

    def _parts(self) -> tuple[Any, Any]:
        initial = self.initial if self.initial is not None else LambdaMARTRanker()
        reranker = self.reranker if self.reranker is not None else QILCMRanker()
        if not isinstance(initial, LambdaMARTRanker):
            raise ValueError(f"initial: expected a LambdaMARTRanker, got {type(initial).__name__}")
        if not isinstance(reranker, Ranker) or isinstance(reranker, RerankPipeline):
            raise ValueError(f"reranker: expected a neural ctxrank estimator, got {type(reranker).__name__}")
        return initial, reranker

    def model_name(self) -> str:
        return self._parts()[1].model_name()

    def reranker_estimator(self) -> Any:
        """The re-ranker's estimator (``reranker``, or the default ``QILCMRanker()``)."""
        return self._parts()[1]

    @property
    def missing(self) -> str:
        """The re-ranker's ``missing``: how the pipeline's neural model reads NaN (its initial ranker,
        LambdaMART, reads NaN itself)."""
        return getattr(self.reranker_estimator(), "missing", "native")

    def run_config(self) -> RunConfig:
        """The re-ranker's run config with ``[rerank]`` set from the pipeline's parameters (checked by
        ``RerankConfig``; an error names them as the caller knows them: ``top_k``, not ``rerank.top_k``)."""
        initial, reranker = self._parts()
        base = reranker.run_config()
        first = initial.run_config()
        initial_params = {**first.model_params, "seed": first.train.seed}
        if first.train.debias != "none":  # its debias and propensities, as the class's arguments
            initial_params.update(get_model("lambdamart").debias_params(first.train))
        if first.train.threads is not None:
            initial_params["num_threads"] = first.train.threads
        rerank = {
            "initial": "lambdamart",
            **{name: getattr(self, name) for name in _OWN if getattr(self, name) is not None},
            "initial_params": initial_params,
        }
        try:
            return base.with_overrides([("rerank", rerank)])
        except OptionError as exc:  # the keys it names are the pipeline's parameters (the key's name)
            raise ValueError(exc.text.render(key_of=lambda key: key.name)) from None


#: the pipeline's parameters that are ``RerankConfig`` fields of the same name
_OWN = ("top_k", "crossfit", "rank_feature", "score_feature")
