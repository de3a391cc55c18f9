"""Data layer: readers (LETOR/SVMlight, CSV/Parquet), transforms, list batching, dataset registry."""

from ctxrank.data.ranking_data import RankingData

__all__ = ["RankingData"]
