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

Steps 2 and 4 have two forms, owned here: NumPy on flat rows (:func:`prepare_split`,
:func:`merge_scores`, what training, evaluation and ``predict`` run) and torch operations on padded
lists (:func:`graph_cut`, :func:`graph_top_features`, :func:`graph_merge`), which the exported
re-ranking pipeline writes as ONNX nodes (``ctxrank.export.pipeline``); a test runs both on random
lists with ties. The saved settings are a :class:`~ctxrank.training.rerank_spec.RerankSpec`.

Leakage: initial scores on the training split from a model trained on that same split are
over-confident (the re-ranker learns to trust them more than it should). ``crossfit=K`` replaces them
by out-of-fold scores (K folds over queries); validation and test always use the model fitted on the
whole training split.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from ctxrank._checks import DEFAULT_THREADS, check_choice, resolve_threads
from ctxrank.baselines.lambdamart import LambdaMART, cross_fit_predict
from ctxrank.config import IDEAL_SCOPES
from ctxrank.data.lists import DEFAULT_TOP_K, initial_order, truncate_top_k
from ctxrank.data.ranking_data import RankingData
from ctxrank.training.rerank_spec import RerankSpec


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
    # 0.0 - rank, not -rank: the first item scores 0.0, as the exported graph writes it, not -0.0
    return 0.0 - _best_over_interchangeable(full, split.initial_scores, order0, final_rank)


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


# ---------------------------------------------------------------------------------- the graph form
# The cut and the merge as torch operations on padded lists (B, L), which ``torch.onnx.export`` writes
# as ONNX nodes (the exported re-ranking pipeline, ``ctxrank.export.pipeline``): the same selection,
# order and tie rule as :func:`prepare_split` and :func:`merge_scores` (tests/training/test_rerank.py runs
# both on random lists with ties). Orders are stable sorts (ONNX ``TopK``, O(L log L), the list length
# dynamic), a lexicographic key sorted one part at a time from the least significant; runs of tied
# places are found from their first places (:func:`_run_bounds`): nothing compares all pairs.
#
# The tie rule's hash has a second form here: :func:`ctxrank.data.ranking_data.feature_hash` (the
# reference) views the float32 bits and multiplies in wrapping uint64; ONNX (opset 17) has neither a bit
# cast nor a wrapping uint64 product, so the graph computes the bits by exact float32 arithmetic
# (:func:`float32_bits`) and the products as one exact float64 matrix product on 16-bit limbs
# (:func:`graph_feature_hash`): a few elementwise operations per feature value, none of them a gather.
_LN2 = float(np.log(2.0))
_FLT_MAX = float(np.finfo(np.float32).max)


def float32_bits(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The IEEE-754 bits of float32 ``x`` (any shape) as float32 ``(high, low)`` with ``bits = high 2^23
    + low`` (``high`` < 2^9, ``low`` < 2^24, both integers), by exact float32 arithmetic (ONNX has no bit
    cast at opset 17). For ``|x| = (2^23 + M) 2^(E - 150)`` (normal) or ``M 2^-149`` (subnormal):
    ``e`` = ``floor(log2 |x|)`` or one less (float32's ``log`` with a margin of 0.01, far above its
    error), clipped to [-126, 126]; ``2^(1 - e)`` from float32's ``exp``, snapped to the exact power
    (:func:`_nearest_power_of_two`); then ``n = |x| 2^(23 - e)`` is exact: ``2^23 + M`` (or ``M`` when
    subnormal) times 1 or 2, and ``high = e + 126 (+ 1 when n >= 2^24)``, ``low = n (/ 2)``. ``-0.0``
    keeps its sign bit; every NaN gives the canonical quiet NaN ``0x7FC00000`` (the NaN of ctxrank's
    readers; ONNX cannot read a NaN's sign or payload)."""
    x = x.float()
    a = x.abs()
    e = torch.floor(torch.log(torch.clamp(a, min=2.0**-126)) * (1.0 / _LN2) - 0.01).clamp(-126.0, 126.0)
    scale = _nearest_power_of_two(torch.exp((1.0 - e) * _LN2)).float()  # 2^(1 - e), exactly
    n = a * scale * 2.0**22
    over = n >= 2.0**24  # e = floor(log2 |x|) - 1
    low = torch.where(over, n * 0.5, n)
    high = e + 126.0 + over.float()
    finite = a <= _FLT_MAX  # not inf, not NaN
    low = torch.where(finite, low, torch.where(torch.isnan(x), 2.0**22, 0.0))
    high = torch.where(finite, high, 255.0)
    negative = x + torch.reciprocal(x) < 0  # -0.0 too (1 / -0.0 = -inf), and -inf (-inf + -0.0)
    return torch.where(negative, high + 256.0, high), low


def _nearest_power_of_two(q: torch.Tensor) -> torch.Tensor:
    """float64: ``2^k`` for float32 ``q = 2^k (1 + d)``, ``|d| < 2^-10``, ``2^-126 <= q < 2^128``: ``q 2^52
    + q`` rounds ``q`` to the float64 grid of ``q 2^52`` (spacing ``2^k``, or ``2^(k - 1)`` when ``d <
    0``), and the difference is exact (Sterbenz). Arithmetic, not a cast pair (float32 to bfloat16 and
    back), which ONNX Runtime's graph optimisations have removed as a no-op in some versions."""
    q = q.double()
    big = q * 2.0**52
    return (big + q) - big


def hash_limb_bits(n_features: int) -> int:
    """The width of the limbs (16, 8, 4, 2 or 1 bits) into which :func:`hash_weights` cuts the hash's
    constants for F features: the widest whose column sums stay exact in float64, ``F 2^(24 + w) <=
    2^53``."""
    for bits in (16, 8, 4, 2, 1):
        if n_features <= 2 ** (29 - bits):
            return bits
    raise ValueError(f"the exported tie rule's hash supports at most 2^28 features, got {n_features}")


def hash_weights(mult: np.ndarray) -> torch.Tensor:
    """float64 (2F, 2K): the uint64 (F,) constants of the tie rule's hash (``feature_hash_multipliers``)
    cut into K limbs of :func:`hash_limb_bits` bits, least significant first: row f (``high`` of
    :func:`float32_bits`) holds feature f's limbs in the last K columns, row F + f (``low``) in the
    first K."""
    f = mult.size
    bits = hash_limb_bits(f)
    k = 64 // bits
    limbs = np.stack([(mult >> np.uint64(bits * j)) & np.uint64(2**bits - 1) for j in range(k)], axis=1)
    weights = np.zeros((2 * f, 2 * k))
    weights[:f, k:] = limbs
    weights[f:, :k] = limbs
    return torch.from_numpy(weights)


def graph_feature_hash(features: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ctxrank.data.ranking_data.feature_hash` of float32 rows (..., F) as ``(hash >> 32, hash &
    0xFFFFFFFF)`` int64 (...,), ``weights`` = :func:`hash_weights`: ``sum_f bits_f m_f mod 2^64`` with
    ``m_f`` in K limbs of w bits: one float64 matrix product gives ``sum_f low_f limb_j`` and ``sum_f
    high_f limb_j`` (< 2^53: exact), combined in int64 (``+ 2^23 x`` the second: < 2^62), then the
    carries from limb to limb."""
    high, low = float32_bits(features)  # (..., F)
    k = weights.shape[1] // 2
    bits = 64 // k
    sums = (torch.cat([high, low], dim=-1).double() @ weights).long()  # (..., 2K)
    limb_sums = sums[..., :k] + sums[..., k:] * 2**23  # (..., K): sum_f bits_f limb_j(m_f)
    digits, carry = [], None
    for j in range(k):
        total = limb_sums[..., j] if carry is None else limb_sums[..., j] + carry
        carry = torch.div(total, 2**bits, rounding_mode="trunc")  # total >= 0: the floor, one ONNX Div
        digits.append(total - carry * 2**bits)  # bits j w .. (j + 1) w - 1 of the hash

    def half(part: list[torch.Tensor]) -> torch.Tensor:
        out = part[0]
        for j, digit in enumerate(part[1:], start=1):
            out = out + digit * 2 ** (bits * j)
        return out

    return half(digits[k // 2 :]), half(digits[: k // 2])


def hash_key(high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """int64 (...,): one key ordered as the 64-bit hash ``(high, low)`` (two 32-bit halves, as
    :func:`graph_feature_hash` gives them): ``(high - 2^31) 2^32 + low`` spans exactly int64's range,
    so comparing keys compares the unsigned hashes."""
    return (high - 2**31) * 2**32 + low


def _argsort(key: torch.Tensor, descending: bool) -> torch.Tensor:
    """int64 (B, L): the stable order of each row of ``key`` (B, L), equal keys by position. Exported
    as ONNX ``TopK``, whose tie rule is the same (the lower index first: the operator's specification and
    onnxruntime's comparator); the exporter writes only the plain ``sort``, so eager torch asks for a
    stable one."""
    if torch.onnx.is_in_onnx_export():
        return torch.sort(key, 1, descending).indices
    return torch.sort(key, dim=1, descending=descending, stable=True).indices


def tied_items(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """bool (B, L): the real items whose initial score (float64 (B, L)) another real item of the row
    shares, from one sort: the only items whose place the tie rule's hash decides."""
    s = torch.where(mask, scores, torch.full_like(scores, -torch.inf))
    order = _argsort(s, descending=True)
    row = torch.cumsum(torch.ones_like(order), dim=1) - 1
    real = take(mask, order)
    sorted_scores = take(s, order)
    as_previous = (row > 0) & real & real.roll(1, 1) & (sorted_scores == sorted_scores.roll(1, 1))
    tied = as_previous | as_previous.roll(-1, 1)  # by place: as the previous or as the next
    return torch.zeros_like(order).scatter(1, order, tied.long()) > 0


def tie_keys(features: torch.Tensor, tied: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """int64 (B, L): :func:`hash_key` of the raw float32 features (B, L, F) of the ``tied`` items (B, L),
    the key of hash 0 elsewhere: the hash is computed for the tied items alone (gathered, a dynamic
    count), as the others' places do not depend on it."""
    # one spare row after the last, always hashed and then dropped: onnxruntime fails on an empty count
    spare_tied = torch.cat([tied.reshape(-1), torch.ones_like(tied.reshape(-1)[:1])])  # (B L + 1,)
    rows = torch.nonzero(spare_tied)[:, 0]
    flat = features.reshape(-1, features.shape[-1])
    hashed = hash_key(*graph_feature_hash(torch.cat([flat, flat[:1]]).index_select(0, rows), weights))
    keys = torch.full_like(spare_tied, -(2**63), dtype=torch.long)  # the key of hash 0
    return keys.scatter(0, rows, hashed)[:-1].reshape(tied.shape)


def initial_places(
    scores: torch.Tensor, mask: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(place, order)`` int64 (B, L) of :func:`ctxrank.data.lists.initial_order` within each row:
    descending ``scores`` (float64 (B, L)), ties by the hash ``key`` (:func:`tie_keys`) ascending, then
    by position; padded items after every real one. ``place`` maps item -> place, ``order`` place ->
    item (permutations of 0..L-1). Two stable sorts, the less significant key first: O(L log L)."""
    s = torch.where(mask, scores, torch.full_like(scores, -torch.inf))
    by_key = _argsort(torch.where(mask, key, torch.full_like(key, -(2**63))), descending=False)
    order = take(by_key, _argsort(take(s, by_key), descending=True))
    row = torch.cumsum(torch.ones_like(order), dim=1) - 1  # (B, L) 0..L-1
    return torch.zeros_like(order).scatter(1, order, row), order


def _run_bounds(new_run: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(run, start, end)`` int64 (B, L) of each place of rows cut into runs of consecutive places
    (``new_run`` bool (B, L): a run starts there; place 0 always does): the run's index, its first
    place and the place after its last. The runs' first places are scattered to their runs' indices
    (the other places to distinct spare slots, L + 1 and after), in a row of L: after the last run, L."""
    row = torch.cumsum(torch.ones_like(new_run, dtype=torch.long), dim=1) - 1
    length = row[:, -1:] + 1  # (B, 1) L, a tensor: the exported length stays dynamic
    run = torch.cumsum(new_run.long(), dim=1) - 1
    firsts = torch.cat([row, row, row[:, :1]], dim=1) * 0 + length  # (B, 2 L + 1) all L
    firsts = firsts.scatter(1, torch.where(new_run, run, row + length + 1), row)
    return run, torch.gather(firsts, 1, run), torch.gather(firsts, 1, run + 1)


def average_ranks(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """float64 (B, L) 1-based rank by descending score of each place of lists in initial order
    (``scores`` float64 and ``mask`` bool (B, L) by place), tied scores sharing their average rank
    (:func:`ctxrank.data.lists.truncate_top_k`'s ``initial_rank``): ``#{j: s_j > s_i} + (#{j: s_j = s_i}
    + 1) / 2`` over real ``j``; ties are runs of the initial order."""
    row = torch.cumsum(torch.ones_like(mask, dtype=torch.long), dim=1) - 1
    new_run = (row == 0) | (scores != scores.roll(1, 1)) | (mask != mask.roll(1, 1))
    _, start, end = _run_bounds(new_run)
    return start.double() + ((end - start).double() + 1.0) / 2.0


def take(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x`` (B, L[, D]) at the positions ``index`` (B, M) of each row -> (B, M[, D]); with D, whole rows
    of the flattened (B L, D) (ONNX ``Gather``, a copy per row, not one index per value)."""
    if x.dim() == 2:
        return torch.gather(x, 1, index)
    b, length = x.shape[0], x.shape[1]
    rows = index + torch.arange(b, device=index.device).unsqueeze(1) * length
    return x.reshape(b * length, x.shape[-1]).index_select(0, rows.reshape(-1)).reshape(b, -1, x.shape[-1])


class GraphCut(NamedTuple):
    """The cut of padded lists (:func:`graph_cut`).

    Attributes:
        place: int64 (B, L) each item's 0-based place in the initial order (a permutation per row).
        order: int64 (B, L) the item at each place.
        kept: int64 (B, L') the kept items in initial order, L' = min(L, top_k).
        kept_mask: bool (B, L') the kept places that hold a real item.
        top_k: the items kept per list.
    """

    place: torch.Tensor
    order: torch.Tensor
    kept: torch.Tensor
    kept_mask: torch.Tensor
    top_k: int


def graph_cut(
    features: torch.Tensor,
    mask: torch.Tensor,
    initial_scores: torch.Tensor,
    weights: torch.Tensor,
    top_k: int,
) -> GraphCut:
    """:func:`prepare_split`'s cut of padded lists: raw float32 features (B, L, F), mask bool (B, L),
    float64 initial scores (B, L) -> each row ordered by :func:`initial_places` (the tie rule's hash
    from ``weights`` = :func:`hash_weights` of ``feature_hash_multipliers(F)``), its first ``top_k``
    kept."""
    keys = tie_keys(features, tied_items(initial_scores, mask), weights)
    place, order = initial_places(initial_scores, mask, keys)
    kept = order[:, :top_k]  # (B, L') with L' = min(L, k)
    return GraphCut(place, order, kept, take(mask, kept), top_k)


def graph_top_features(
    features: torch.Tensor,
    mask: torch.Tensor,
    initial_scores: torch.Tensor,
    cut: GraphCut,
    rank_feature: bool,
    score_feature: bool,
) -> torch.Tensor:
    """float32 (B, L', F + extra): the kept items' raw features in initial order, then the initial rank
    (:func:`average_ranks`) and / or score, as :func:`prepare_split` appends them."""
    columns = [take(features, cut.kept)]
    if rank_feature:
        ranks = average_ranks(take(initial_scores, cut.order), take(mask, cut.order))  # by place
        columns.append(ranks[:, : cut.top_k].float().unsqueeze(-1))
    if score_feature:
        columns.append(take(initial_scores, cut.kept).float().unsqueeze(-1))
    return torch.cat(columns, dim=-1) if len(columns) > 1 else columns[0]


def graph_merge(
    top_scores: torch.Tensor,
    cut: GraphCut,
    features: torch.Tensor,
    mask: torch.Tensor,
    initial_scores: torch.Tensor,
) -> torch.Tensor:
    """:func:`merge_scores` of padded lists: the re-ranker's scores (B, L') of ``cut.kept`` -> float32
    (B, L) ``-rank`` per input row (0 at padding): the kept items by score (ties by initial place),
    then the rest in initial order; interchangeable rows share their group's best rank."""
    top_k = cut.top_k
    y = torch.where(cut.kept_mask, top_scores, torch.full_like(top_scores, -torch.inf))
    by_score = _argsort(y, descending=True)  # (B, L') kept slots, best first; ties by initial place
    kept_row = torch.cumsum(torch.ones_like(by_score), dim=1) - 1
    kept_rank = torch.zeros_like(by_score).scatter(1, by_score, kept_row)  # (B, L')
    row = torch.cumsum(torch.ones_like(cut.place), dim=1) - 1  # (B, L) 0..L-1
    by_place = torch.where(row < top_k, torch.gather(kept_rank, 1, row.clamp(max=top_k - 1)), row)
    best = _best_over_interchangeable_graph(by_place, cut.order, features, mask, initial_scores)
    rank = torch.gather(best, 1, cut.place)  # back to the input's rows
    return torch.where(mask, -rank.float(), 0.0)


def _best_over_interchangeable_graph(
    by_place: torch.Tensor,
    order: torch.Tensor,
    features: torch.Tensor,
    mask: torch.Tensor,
    scores: torch.Tensor,
) -> torch.Tensor:
    """int64 (B, L) ``by_place`` (a rank per place) with each run of interchangeable rows (adjacent in
    the initial order, same score, identical features) given the run's best rank."""
    row = torch.cumsum(torch.ones_like(order), dim=1) - 1
    real, placed_scores, placed = take(mask, order), take(scores, order), take(features, order)

    def previous(x: torch.Tensor) -> torch.Tensor:  # x by place -> x of the previous place (place 0: its own)
        return torch.cat([x[:, :1], x[:, :-1]], dim=1)

    same = (
        (row > 0)
        & real
        & previous(real)
        & (placed_scores == previous(placed_scores))
        & ((placed == previous(placed)).float().amin(dim=-1) > 0)  # all features equal
    )
    # the minimum of each run: sorted by (run, rank), a run's first sorted place holds it
    run, start, _ = _run_bounds(~same)
    length = torch.cumsum(torch.ones_like(by_place[:1]), dim=1)[:, -1:]  # (1, 1) L
    by_run = torch.sort(run * length + by_place, dim=1).values  # by_place < L
    return torch.gather(by_run, 1, start) - run * length  # (B, L) by place


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
        spec: the re-rank settings (saved as ``ctxrank.json["rerank"]``).

    The predictor protocol of ``TorchPredictor``: not an ensemble; its ``scorer`` is the re-ranker; it
    does not read the row order (the cut orders the items by the order-free tie rule).
    """

    ensemble_size = 0
    reads_row_order = False
    scorer = property(lambda self: self.reranker)

    def __init__(self, initial, reranker, spec: RerankSpec) -> None:
        self.initial, self.reranker, self.spec = initial, reranker, spec

    @property
    def n_features(self) -> int:
        return int(self.initial.n_features)

    def prepare(self, data: RankingData) -> RerankSplit:
        """``data`` scored by the initial ranker and cut to each query's top k (:func:`prepare_split`)."""
        return prepare_split(
            data,
            self.initial.predict(data),
            k=self.spec.top_k,
            rank_feature=self.spec.rank_feature,
            score_feature=self.spec.score_feature,
        )

    def top_scores(self, split: RerankSplit) -> np.ndarray:
        """The re-ranker's scores of ``split.top`` (N',)."""
        return self.reranker.predict(split.top, init_scores=split.top_initial_scores)

    def predict(self, data: RankingData) -> np.ndarray:
        split = self.prepare(data)
        return merge_scores(split, self.top_scores(split))

    def save_model_dir(self, directory: Path, config: Any, **saved: Any) -> Path:
        """The initial ranker's directory (``spec.dir``), then the re-ranker's checkpoint around it."""
        self.initial.save(directory / self.spec.dir, run_config=config.to_dict(), overwrite=True)
        return self.reranker.save_model_dir(directory, config, rerank=self.spec, **saved)
