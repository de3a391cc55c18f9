"""ctxrank: learning to rank with listwise context models on PyTorch.

The public API is re-exported here lazily (see ``ctxrank._lazy``): ``from ctxrank import read_letor``.
"""

from ctxrank._lazy import lazy_exports
from ctxrank._version import __version__

_EXPORTS = {
    "DataSource": "ctxrank.data.sources",
    "RankingData": "ctxrank.data.ranking_data",
    "read_letor": "ctxrank.data.letor",
    "read_table": "ctxrank.data.table",
    "iterate_batches": "ctxrank.data.lists",
    "truncate_top_k": "ctxrank.data.lists",
    "make_transform": "ctxrank.data.transforms",
    "DATASETS": "ctxrank.data.registry",
    "load_fold": "ctxrank.data.registry",
    "evaluate_queries": "ctxrank.metrics",
    "mean_metrics": "ctxrank.metrics",
    "metric_convention": "ctxrank.metrics",
    "LOSSES": "ctxrank.losses",
    "get_loss": "ctxrank.losses",
    "MODELS": "ctxrank.registry",
    "make_model": "ctxrank.registry",
    "fit": "ctxrank.training.loop",
    "predict": "ctxrank.training.predict",
    "load_model": "ctxrank.training.checkpoint",
    "resolve_config": "ctxrank.config",
    "limit_heap_growth": "ctxrank._allocator",
    # scikit-learn-compatible estimators (ctxrank.api)
    "Ranker": "ctxrank.api",
    "QILCMRanker": "ctxrank.api",
    "DLCMRanker": "ctxrank.api",
    "DCMRanker": "ctxrank.api",
    "ListNetRanker": "ctxrank.api",
    "MLPRanker": "ctxrank.api",
    "MNLRanker": "ctxrank.api",
    "ArsmL2RRanker": "ctxrank.api",
    "LambdaMARTRanker": "ctxrank.api",
    "RankSVMRanker": "ctxrank.api",
    "AdaRankRanker": "ctxrank.api",
    "DASALCRanker": "ctxrank.api",
    "GSFRanker": "ctxrank.api",
    "SelfAttentionRanker": "ctxrank.api",
    "SetRankRanker": "ctxrank.api",
    "RerankPipeline": "ctxrank.api",
    "ndcg_scorer": "ctxrank.api",
    "make_ranking_scorer": "ctxrank.api",
}
__all__ = ["__version__", *sorted(_EXPORTS)]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
