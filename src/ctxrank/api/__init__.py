"""scikit-learn-compatible estimators over ctxrank's training engine and model directories.

* :class:`Ranker` (``Ranker(model="qilcm", **params)``) and one subclass per model family with every
  parameter in its signature: :class:`QILCMRanker`, :class:`DLCMRanker`, :class:`DCMRanker`,
  :class:`ListNetRanker`, :class:`MLPRanker`, :class:`MNLRanker`, :class:`ArsmL2RRanker`,
  :class:`LambdaMARTRanker`, :class:`RankSVMRanker`, :class:`AdaRankRanker`, :class:`DASALCRanker`,
  :class:`GSFRanker`, :class:`SelfAttentionRanker`, :class:`SetRankRanker`.
* :class:`RerankPipeline`: an initial ranker's top k re-ranked by a neural model.
* :func:`load`: a fitted estimator from a model directory (``ctxrank train --out`` or ``save``).
* :func:`ndcg_scorer`, :func:`make_ranking_scorer`: scorers for ``GridSearchCV`` / ``cross_val_score``.

See docs/api.md for a walk-through.
"""

from ctxrank.api._load import load
from ctxrank.api.estimators import (
    ESTIMATOR_OF_MODEL,
    AdaRankRanker,
    ArsmL2RRanker,
    DASALCRanker,
    DCMRanker,
    DLCMRanker,
    GSFRanker,
    LambdaMARTRanker,
    ListNetRanker,
    MLPRanker,
    MNLRanker,
    QILCMRanker,
    Ranker,
    RankSVMRanker,
    SelfAttentionRanker,
    SetRankRanker,
)
from ctxrank.api.pipeline import RerankPipeline
from ctxrank.api.scoring import RankingScorer, make_ranking_scorer, ndcg_scorer

__all__ = [
    "ESTIMATOR_OF_MODEL",
    "AdaRankRanker",
    "ArsmL2RRanker",
    "DASALCRanker",
    "DCMRanker",
    "DLCMRanker",
    "GSFRanker",
    "LambdaMARTRanker",
    "ListNetRanker",
    "MLPRanker",
    "MNLRanker",
    "QILCMRanker",
    "RankSVMRanker",
    "Ranker",
    "RankingScorer",
    "RerankPipeline",
    "SelfAttentionRanker",
    "SetRankRanker",
    "load",
    "make_ranking_scorer",
    "ndcg_scorer",
]
