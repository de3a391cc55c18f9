"""Seed ensembles (``ensemble = k``): k models trained with seeds ``s .. s+k-1``, scored by their mean.

:class:`EnsemblePredictor` averages its members' scores. Members of a re-ranking run share one initial
ranker (the first member fits it; every member's directory keeps a copy): their top-k lists are the
same, so the ensemble averages the re-rankers' scores of those lists and then merges once
(:func:`ctxrank.training.rerank.merge_scores`), the average of k models' scores as for whole lists.

Saved as one directory: ``ctxrank.json`` with ``kind = "ensemble"`` and the member directories
``member-0 .. member-{k-1}`` (each a complete model directory, loadable alone);
``ctxrank.training.checkpoint.load_model`` returns an :class:`EnsemblePredictor`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxrank._modeldir import MEMBER_PATTERN
from ctxrank.data.ranking_data import RankingData
from ctxrank.training.rerank import RerankSplit, merge_scores

__all__ = ["MEMBER_PATTERN", "EnsemblePredictor", "member_dir"]


def member_dir(i: int) -> str:
    """The directory name of member ``i`` inside an ensemble's directory."""
    return f"member-{i}"


class EnsemblePredictor:
    """The mean of its members' scores: raw RankingData in, flat scores out.

    Args:
        members: predictors with ``predict(data)`` and ``n_features`` (``TorchPredictor``,
            ``RerankPredictor`` sharing one initial ranker, or baselines), all for the same features.
    """

    def __init__(self, members: Sequence[Any]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        n = {int(m.n_features) for m in members}
        if len(n) != 1:
            raise ValueError(f"ensemble members expect different feature counts {sorted(n)}")
        rerank = [m.initial is not None for m in members]
        if any(rerank) and not all(rerank):
            raise ValueError("ensemble members must all re-rank or all rank whole lists")
        self.members = list(members)

    @property
    def n_features(self) -> int:
        return int(self.members[0].n_features)

    # the predictor protocol of ``TorchPredictor``: the first member's (re-ranking members share one
    # initial ranker and its settings)
    ensemble_size = property(lambda self: len(self.members))
    initial = property(lambda self: self.members[0].initial)
    spec = property(lambda self: self.members[0].spec)
    reads_row_order = property(lambda self: self.members[0].reads_row_order)

    def prepare(self, data: RankingData) -> RerankSplit:
        """Re-ranking members: ``data`` cut to the top k of their shared initial ranker."""
        return self.members[0].prepare(data)

    def top_scores(self, split: RerankSplit) -> np.ndarray:
        """Re-ranking members: the mean of the re-rankers' scores of ``split.top`` (float64 (N',))."""
        return np.mean(
            [m.reranker.predict(split.top, init_scores=split.top_initial_scores) for m in self.members],
            axis=0,
        )

    def predict(self, data: RankingData) -> np.ndarray:
        if self.initial is not None:  # re-ranking members
            split = self.prepare(data)
            return merge_scores(split, self.top_scores(split))
        return np.mean([np.asarray(m.predict(data), dtype=np.float64) for m in self.members], axis=0)
