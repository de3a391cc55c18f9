"""Ranking scorers for scikit-learn's model selection (``GridSearchCV``, ``cross_val_score``).

A scorer is called as ``scorer(estimator, X, y, **metadata)``; a ranking metric needs the query of
every row. Two ways to give it, both with ``cv=GroupKFold(...)`` and ``groups=`` the query ids (so
that no query is split between folds):

* **metadata routing** (``sklearn.set_config(enable_metadata_routing=True)``): pass ``qid=`` to
  ``GridSearchCV.fit`` / ``cross_val_score(params={"qid": ...})``; the estimators request ``qid`` in
  ``fit``, ``predict`` and ``score`` by default and :class:`RankingScorer` requests it too, so every
  fold receives its rows' query ids.
* **a query column**: ``Ranker(query_column="qid")`` with a DataFrame ``X`` holding that column; no
  metadata is needed (works without routing, e.g. with scikit-learn's defaults).
"""

from __future__ import annotations

from typing import Any

from sklearn.utils.metadata_routing import MetadataRequest

from ctxrank.metrics import metric_convention, parse_metric

__all__ = ["RankingScorer", "make_ranking_scorer", "ndcg_scorer"]


class RankingScorer:
    """``scorer(estimator, X, y, qid=None, group=None)`` = ``estimator.score(X, y, qid=..., metric=...)``.

    Args:
        metric: any metric of ``ctxrank.metrics`` (``"ndcg@10"``, ``"map"``, ``"err@10"``, ...).
        convention: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        no_relevant: the value of a query with no relevant item (0.0, 1.0 or ``"skip"``).
    """

    def __init__(self, metric: str = "ndcg@10", *, convention: str = "standard", no_relevant: Any = 0.0):
        parse_metric(metric)
        metric_convention(convention, no_relevant=no_relevant)
        self.metric, self.convention, self.no_relevant = metric, convention, no_relevant

    def __call__(self, estimator: Any, X: Any, y: Any, qid: Any = None, group: Any = None) -> float:
        return estimator.score(
            X,
            y,
            qid=qid,
            group=group,
            metric=self.metric,
            convention=self.convention,
            no_relevant=self.no_relevant,
        )

    def get_metadata_routing(self) -> Any:
        """Requests ``qid`` and ``group`` for ``score`` (used when metadata routing is enabled)."""
        request = MetadataRequest(owner=type(self).__name__)
        request.score.add_request(param="qid", alias=True)
        request.score.add_request(param="group", alias=True)
        return request

    def __repr__(self) -> str:
        options = f"convention={self.convention!r}, no_relevant={self.no_relevant!r}"
        return f"RankingScorer({self.metric!r}, {options})"


def make_ranking_scorer(metric: str, **options: Any) -> RankingScorer:
    """A :class:`RankingScorer` for ``metric`` (``convention=``, ``no_relevant=``)."""
    return RankingScorer(metric, **options)


def ndcg_scorer(k: int = 10, **options: Any) -> RankingScorer:
    """The NDCG@k scorer (standard convention: gain 2^y - 1, discount 1/log2(1 + rank))."""
    return RankingScorer(f"ndcg@{k}", **options)
