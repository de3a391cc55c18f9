"""The ranking-refinement protocol of the DLCM and QILCM papers.

1. An initial ranker (LambdaMART) scores every item of every query.
2. Each query keeps its top ``k`` items (default 100; the whole list when shorter), ordered by the
   initial score; the initial rank and/or score can be appended as extra features (QILCM). The order
   is kept, so sequence models (DLCM) read the initial ranking.
3. A re-ranker scores the top-k lists.
4. Evaluation (:func:`merge_scores`): the re-ranked top k come first, the items cut off follow in
   their initial order, and metrics are computed on the FULL query — so the ideal DCG counts every
   judged item of the query, including those cut off by top-k, and a relevant item lost by the cut
   costs recall. ``ideal="top-k"`` instead evaluates the truncated lists alone (ideal DCG over the
   kept items only), which is what some re-ranking papers report; the choice is recorded.

Leakage: initial scores on the training split from a model trained on that same split are
over-confident (the re-ranker learns to trust them more than it should). ``crossfit=K`` replaces them
by out-of-fold scores (K folds over queries); validation and test always use the model fitted on the
whole training split.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxrank._checks import DEFAULT_THREADS, check_choice, resolve_threads
from ctxrank.baselines.lambdamart import LambdaMART, cross_fit_predict
from ctxrank.config import IDEAL_SCOPES
from ctxrank.data.lists import DEFAULT_TOP_K, initial_order, truncate_top_k
from ctxrank.data.ranking_data import RankingData


@dataclass(frozen=True)
class RerankSplit:
    """One split prepared for re-ranking.

    Attributes:
        full: the original split, every judged item (N rows).
        top: each query's top-k items, ordered by initial score (N' rows), with the extra features.
        rows: int64 (N',) row of each ``top`` item in ``full``.
        initial_scores: float64 (N,) initial scores of ``full``.
    """

    full: RankingData
    top: RankingData
    rows: np.ndarray
    initial_scores: np.ndarray

    @property
    def top_initial_scores(self) -> np.ndarray:
        """float32 (N',) initial scores of the ``top`` items (ListBatch.init_scores)."""
        return self.initial_scores[self.rows].astype(np.float32)


def prepare_split(
    data: RankingData,
    initial_scores: np.ndarray,
    *,
    k: int = DEFAULT_TOP_K,
    rank_feature: bool = False,
    score_feature: bool = False,
) -> RerankSplit:
    """Top-k truncation by ``initial_scores`` (see :func:`ctxrank.data.lists.truncate_top_k`); the top
    lists' features are gathered from ``data`` when read (the split holds ``data``: no copy of them)."""
    initial_scores = np.asarray(initial_scores, dtype=np.float64)
    top, rows = truncate_top_k(
        data, initial_scores, k, add_rank_feature=rank_feature, add_score_feature=score_feature, gather=True
    )
    return RerankSplit(full=data, top=top, rows=rows, initial_scores=initial_scores)


def merge_scores(split: RerankSplit, rerank_scores: np.ndarray) -> np.ndarray:
    """Full-query scores (N,): re-ranked top-k first (ties kept in initial order), then the rest.

    The values are ranks turned into scores (higher = better), so any metric computed on them sees
    this order. Interchangeable items (same query, same initial score, identical features: only their
    file position tells them apart, so it decides which of them the top-k cut keeps and where a
    sequence model sees each) all get the best rank of their group, the rank the re-ranker gave that
    feature vector: each row's score is the same whatever the order of the items in the file, and no
    other item shares it (scores are unique within a query outside such groups). Vectorized:
    ``lexsort``s, no loop over queries.
    """
    full, rows = split.full, split.rows
    rerank_scores = np.asarray(rerank_scores, dtype=np.float64)
    if rerank_scores.shape != rows.shape:
        raise ValueError(
            f"expected {rows.size} re-ranking scores (one per top-k item), got {rerank_scores.shape}"
        )
    if not np.isfinite(rerank_scores).all():
        raise ValueError("re-ranking scores must be finite")
    qidx = full.query_index  # (N,)
    n = full.n_items
    # new order of the kept items: by query, then re-ranker score, ties by their initial position
    kept_q = qidx[rows]
    initial_pos = np.arange(rows.size)  # top is already in initial order within each query
    order = np.lexsort((initial_pos, -rerank_scores, kept_q))
    final_rank = np.empty(n, dtype=np.int64)
    kept_starts = np.searchsorted(kept_q[order], kept_q[order], side="left")
    final_rank[rows[order]] = np.arange(rows.size) - kept_starts
    # items cut off: after every kept item, in initial order (ties: initial_order's rule, not position)
    cut = np.ones(n, dtype=bool)
    cut[rows] = False
    cut_rows = np.flatnonzero(cut)
    order0 = initial_order(full, split.initial_scores)
    if cut_rows.size:
        cut_sorted = order0[cut[order0]]
        cq = qidx[cut_sorted]
        starts = np.searchsorted(cq, cq, side="left")
        kept_per_query = split.top.query_lengths  # min(length, k)
        final_rank[cut_sorted] = kept_per_query[cq] + np.arange(cut_rows.size) - starts
    return -_best_over_interchangeable(full, split.initial_scores, order0, final_rank)


def _best_over_interchangeable(
    data: RankingData, initial_scores: np.ndarray, order: np.ndarray, rank: np.ndarray
) -> np.ndarray:
    """float64 (N,) ``rank`` with each group of interchangeable rows (same query, same initial score,
    identical features) given the group's best (lowest) rank. ``order`` is :func:`initial_order`'s, in
    which such rows are adjacent (equal hash of their features)."""
    q, s = data.query_index[order], initial_scores[order]
    same = (q[1:] == q[:-1]) & (s[1:] == s[:-1])
    candidates = np.flatnonzero(same)
    step = max(1, (1 << 20) // max(data.n_features, 1))  # pairs compared a block at a time: no copies of all
    for i in range(0, candidates.size, step):
        a, b = order[candidates[i : i + step]], order[candidates[i : i + step] + 1]
        same[candidates[i : i + step]] = (data.features[a] == data.features[b]).all(axis=1)
    rank = rank.astype(np.float64)
    if not same.any():
        return rank
    group = np.cumsum(np.concatenate([[True], ~same])) - 1
    best = np.full(group[-1] + 1, np.inf)
    np.minimum.at(best, group, rank[order])
    out = np.empty_like(rank)
    out[order] = best[group]
    return out


def evaluation_target(split: RerankSplit, rerank_scores: np.ndarray, ideal: str = "full"):
    """(scores, data) to evaluate: merged full-query scores, or the top-k lists alone."""
    check_choice("ideal", ideal, IDEAL_SCOPES)
    if ideal == "full":
        return merge_scores(split, rerank_scores), split.full
    return np.asarray(rerank_scores, dtype=np.float64), split.top


class InitialRanker:
    """The initial ranker of the protocol: LambdaMART fitted on a run's training split (early stopping
    on its validation split) and the training split's initial scores, in-sample or out-of-fold with
    ``crossfit`` K folds (``cross_fit_predict``: the same parameters and seed), each computed once. The
    one initial ranker of every entrance: ``ctxrank train`` and ``run_training``, the trials of
    ``ctxrank tune``, the runs of an experiment, its Ray tasks. ``key``: what its numbers depend on.
    """

    def __init__(
        self, seed: int = 0, threads: int = DEFAULT_THREADS, params: dict[str, Any] | None = None
    ) -> None:
        self.seed, self.threads, self.params = seed, threads, dict(params or {})
        self.model: Any = None
        self._train_scores: dict[int, np.ndarray] = {}

    @classmethod
    def for_config(cls, config: Any) -> InitialRanker:
        """The initial ranker a run config asks for: ``rerank.initial_params`` with ``train.seed`` and
        ``train.threads`` (``_checks.resolve_threads``: one thread when unset)."""
        tc = config.train
        return cls(tc.seed, resolve_threads(tc.threads, "train.threads"), dict(config.rerank.initial_params))

    @property
    def key(self) -> tuple:
        return (self.seed, self.threads, json.dumps(self.params, sort_keys=True, default=str))

    def fit(self, train: RankingData, valid: RankingData) -> Any:
        """The fitted LambdaMART (fitted on the first call; later calls return it)."""
        if self.model is None:
            params = {"seed": self.seed, "num_threads": self.threads, **self.params}
            self.model = LambdaMART(**params).fit(train, valid)
        return self.model

    def train_scores(self, train: RankingData, crossfit: int) -> np.ndarray:
        """float64 (N,) initial scores of the training split the model was fitted on: its predictions,
        or out-of-fold ones with ``crossfit`` >= 2 folds (computed once per ``crossfit``)."""
        if crossfit not in self._train_scores:
            if crossfit:
                params = {k: v for k, v in self.model.get_params().items() if k != "seed"}
                scores = cross_fit_predict(train, n_folds=crossfit, seed=self.seed, **params)
            else:
                scores = self.model.predict(train)
            self._train_scores[crossfit] = np.asarray(scores, dtype=np.float64)
        return self._train_scores[crossfit]


class InitialRankers:
    """The initial rankers of the runs on one train / valid pair (an experiment's ``(seed, fold)``
    unit, a tuning study): one :class:`InitialRanker` per ``key``, fitted once and shared by every
    re-ranker that asks for the same one."""

    def __init__(self, train: RankingData, valid: RankingData, fitted: Sequence[InitialRanker] = ()) -> None:
        self.train, self.valid = train, valid
        self._by_key = {ranker.key: ranker for ranker in fitted}

    def get(self, ranker: InitialRanker) -> InitialRanker:
        """The shared ranker with ``ranker``'s key, fitted (``ranker`` itself the first time)."""
        shared = self._by_key.setdefault(ranker.key, ranker)
        shared.fit(self.train, self.valid)
        return shared

    def for_config(self, config: Any) -> InitialRanker:
        return self.get(InitialRanker.for_config(config))


class RerankPredictor:
    """Initial ranker + re-ranker: raw RankingData in, full-query scores out (see :func:`merge_scores`).

    Args:
        initial: an object with ``predict(data)`` and ``n_features`` (e.g. LambdaMART).
        reranker: a ``TorchPredictor`` trained on the prepared top-k lists.
        meta: ``{"top_k", "rank_feature", "score_feature", ...}`` as saved in ``ctxrank.json``.
    """

    def __init__(self, initial, reranker, meta: dict) -> None:
        self.initial, self.reranker, self.meta = initial, reranker, dict(meta)

    @property
    def n_features(self) -> int:
        return int(self.initial.n_features)

    def prepare(self, data: RankingData) -> RerankSplit:
        """``data`` scored by the initial ranker and cut to each query's top k (:func:`prepare_split`)."""
        return prepare_split(
            data,
            self.initial.predict(data),
            k=int(self.meta["top_k"]),
            rank_feature=bool(self.meta["rank_feature"]),
            score_feature=bool(self.meta["score_feature"]),
        )

    def top_scores(self, split: RerankSplit) -> np.ndarray:
        """The re-ranker's scores of ``split.top`` (N',)."""
        return self.reranker.predict(split.top, init_scores=split.top_initial_scores)

    def predict(self, data: RankingData) -> np.ndarray:
        split = self.prepare(data)
        return merge_scores(split, self.top_scores(split))
