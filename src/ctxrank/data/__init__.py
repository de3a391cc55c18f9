"""Data layer: readers (LETOR/SVMlight, CSV/Parquet), transforms, list batching, dataset registry."""

from ctxrank._lazy import lazy_exports

_EXPORTS = {
    "RankingData": "ctxrank.data.ranking_data",
    "read_letor": "ctxrank.data.letor",
    "read_group_sizes": "ctxrank.data.letor",
    "read_table": "ctxrank.data.table",
    "read_table_with_rows": "ctxrank.data.table",
    "refit_categorical": "ctxrank.data.table",
    "CategoricalEncoder": "ctxrank.data.categorical",
    "split_queries": "ctxrank.data.split",
    "ListBatch": "ctxrank.data.lists",
    "iterate_batches": "ctxrank.data.lists",
    "pad_queries": "ctxrank.data.lists",
    "scatter_scores": "ctxrank.data.lists",
    "truncate_top_k": "ctxrank.data.lists",
    "TRANSFORMS": "ctxrank.data.transforms",
    "make_transform": "ctxrank.data.transforms",
    "DATASETS": "ctxrank.data.registry",
    "Fold": "ctxrank.data.registry",
    "load_fold": "ctxrank.data.registry",
    "load_split": "ctxrank.data.registry",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
