"""From a flat :class:`RankingData` to padded per-query tensors, and back.

* :class:`ListBatch`: B queries padded to a common length L. ``mask`` is True on real items; padded
  features, labels, initial scores, categorical codes and shown positions are exactly 0 and padded
  ``positions`` are -1.
* :func:`pad_queries`: one batch from chosen queries (a (B, L) row-index matrix, then one gather).
* :func:`iterate_batches`: an epoch of batches, with length bucketing to limit padding and seeded
  shuffling through an explicit ``np.random.Generator``.
* :func:`scatter_scores`: (B, L) predictions back into a flat (N,) array in file order.
* :func:`truncate_top_k`: each query's top-k items by an initial score (e.g. LambdaMART), with the
  initial rank / score optionally appended as features (the re-ranking setting of DLCM and QILCM).
  Nothing depends on where an item sits in the file: tied initial scores get the same (average) rank
  feature, and the displayed order breaks ties by the item's features (:func:`initial_order`).

Nothing here loops over items or queries in Python; only over batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from ctxrank.data.gathered import GatheredRows, is_gathered
from ctxrank.data.ranking_data import RankingData, order_by_score, padded_rows

__all__ = [
    "DEFAULT_TOP_K",
    "ListBatch",
    "initial_order",
    "iterate_batches",
    "pad_queries",
    "padding_fraction",
    "scatter_scores",
    "truncate_top_k",
]


@dataclass(frozen=True, eq=False)
class ListBatch:
    """B queries padded to length L (the longest list of the batch).

    Attributes:
        features: float32 (B, L, F); 0 at padded positions.
        labels: float32 (B, L); 0 at padded positions.
        mask: bool (B, L); True = real item, False = padding. Real items come first in each row.
        query_index: int64 (B,); position of each list's query in the source RankingData.
        init_scores: float32 (B, L) initial scores (0 at padding), or None.
        categorical: int64 (B, L, C) categorical codes (0 at padding), or None.
        positions: int64 (B, L) row of each item in the source RankingData (-1 at padding), or None.
        shown_positions: int64 (B, L) 1-based position at which each item was shown, for an interaction
            log (``RankingData.shown_positions``; 0 at padding), or None (labelled data).
    """

    features: torch.Tensor
    labels: torch.Tensor
    mask: torch.Tensor
    query_index: torch.Tensor
    init_scores: torch.Tensor | None = None
    categorical: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    shown_positions: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return int(self.mask.shape[0])

    @property
    def list_len(self) -> int:
        """L, the padded list length."""
        return int(self.mask.shape[1])

    @property
    def lengths(self) -> torch.Tensor:
        """int64 (B,) number of real items of each list."""
        return self.mask.sum(dim=1)

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> ListBatch:
        """A copy with every tensor on ``device``."""
        moved = {}
        for f in fields(self):
            t = getattr(self, f.name)
            moved[f.name] = None if t is None else t.to(device, non_blocking=non_blocking)
        return replace(self, **moved)

    def pin_memory(self) -> ListBatch:
        """A copy with every tensor in pinned (page-locked) memory, for faster host-to-GPU copies."""
        return replace(
            self,
            **{
                f.name: None if getattr(self, f.name) is None else getattr(self, f.name).pin_memory()
                for f in fields(self)
            },
        )


def _flat_scores(values, n_items: int, what: str) -> np.ndarray:
    """A float array (N,) from a numpy array, tensor or sequence; checks the length."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    arr = np.asarray(values)
    if arr.shape != (n_items,):
        raise ValueError(f"{what} must be a flat array of N = {n_items} values, got shape {arr.shape}")
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{what} must be numeric, got dtype {arr.dtype}")
    return arr


def _row_matrix(data: RankingData, queries: np.ndarray, max_len: int | None) -> np.ndarray:
    """int64 (B, L) row indices of the queries' items, -1 for padding."""
    lengths = data.query_lengths[queries]
    if max_len is not None:
        lengths = np.minimum(lengths, max_len)
    return padded_rows(data.query_offsets[queries], lengths)


def pad_queries(
    data: RankingData,
    queries: Iterable[int] | np.ndarray,
    *,
    init_scores: np.ndarray | torch.Tensor | None = None,
    max_len: int | None = None,
) -> ListBatch:
    """Pad the given queries' lists into one :class:`ListBatch`.

    Args:
        data: the source dataset (N rows, F features).
        queries: B query positions (0..Q-1), in the order wanted in the batch.
        init_scores: optional flat (N,) initial scores aligned with the rows of ``data``.
        max_len: keep at most the first ``max_len`` items of each query in file order (no truncation
            by default). To keep the best items by a score, use :func:`truncate_top_k` first.

    Returns:
        ListBatch with L = the longest (possibly truncated) list among the queries.

    Raises:
        ValueError: empty or out-of-range ``queries``, ``max_len < 1``, ``init_scores`` of the wrong length.
    """
    q = np.asarray(queries if not isinstance(queries, torch.Tensor) else queries.cpu().numpy())
    if q.ndim != 1 or q.size == 0:
        raise ValueError(f"queries must be a non-empty 1-d list of query positions, got shape {q.shape}")
    if q.dtype.kind not in "iu":
        raise TypeError(f"queries must be integer positions, got dtype {q.dtype}")
    q = q.astype(np.int64)
    if q.min() < 0 or q.max() >= data.n_queries:
        raise ValueError(f"query positions must lie in [0, {data.n_queries}), got {q.min()}..{q.max()}")
    if max_len is not None and (not isinstance(max_len, (int, np.integer)) or max_len < 1):
        raise ValueError(f"max_len must be a positive integer or None, got {max_len!r}")

    rows = _row_matrix(data, q, max_len)  # (B, L)
    mask = rows >= 0
    real = rows[mask]  # (n_real,) rows in batch order
    b, width = rows.shape

    features = np.zeros((b, width, data.n_features), dtype=np.float32)
    features[mask] = data.features[real]
    labels = np.zeros((b, width), dtype=np.float32)
    labels[mask] = data.labels[real]
    init = None
    if init_scores is not None:
        flat = _flat_scores(init_scores, data.n_items, "init_scores")
        init_np = np.zeros((b, width), dtype=np.float32)
        init_np[mask] = flat[real]
        init = torch.from_numpy(init_np)
    cat = None
    if data.categorical is not None:
        cat_np = np.zeros((b, width, data.categorical.shape[1]), dtype=np.int64)
        cat_np[mask] = data.categorical[real]
        cat = torch.from_numpy(cat_np)
    shown = None
    if data.shown_positions is not None:
        shown_np = np.zeros((b, width), dtype=np.int64)
        shown_np[mask] = data.shown_positions[real]
        shown = torch.from_numpy(shown_np)
    return ListBatch(
        features=torch.from_numpy(features),
        labels=torch.from_numpy(labels),
        mask=torch.from_numpy(mask),
        query_index=torch.from_numpy(q),
        init_scores=init,
        categorical=cat,
        positions=torch.from_numpy(rows),
        shown_positions=shown,
    )


def _batch_plan(
    lengths: np.ndarray,
    batch_size: int,
    *,
    shuffle: bool,
    generator: np.random.Generator | None,
    bucket: bool,
    length_jitter: float,
    drop_last: bool,
    fits: Callable[[int, int], bool] | None = None,
) -> list[np.ndarray]:
    """The query positions of each batch of one epoch (batches that do not ``fit`` cut to fit)."""
    n = lengths.size
    if shuffle:
        assert generator is not None
        order = generator.permutation(n)
        if drop_last:  # drop a random remainder, not always the same (longest) queries
            order = order[: n - n % batch_size]
        if bucket:
            # sort by length with random tie-breaking; the jitter lets lists whose lengths differ by
            # less than a factor (1 + length_jitter) trade places, so batches change between epochs
            keys = lengths[order] * (1.0 + length_jitter * generator.random(order.size))
            order = order[np.argsort(keys, kind="stable")]
    else:
        order = np.argsort(lengths, kind="stable") if bucket else np.arange(n)
    cuts = list(range(batch_size, order.size, batch_size))
    batches = [b for b in np.split(order, cuts) if b.size]
    if drop_last and batches and batches[-1].size < batch_size:
        batches.pop()
    if fits is not None:
        batches = [part for b in batches for part in _cut_to_fit(b, lengths, fits)]
    if shuffle:
        batches = [batches[i] for i in generator.permutation(len(batches))]
    return batches


def _cut_to_fit(batch: np.ndarray, lengths: np.ndarray, fits: Callable[[int, int], bool]) -> list[np.ndarray]:
    """``batch`` as is when ``fits(B, L)``, else cut into consecutive parts, each as many lists as fit
    (at least one: a list too long alone is the caller's to refuse)."""
    if fits(batch.size, int(lengths[batch].max())):
        return [batch]
    parts, start = [], 0
    while start < batch.size:
        stop, longest = start + 1, int(lengths[batch[start]])
        while stop < batch.size and fits(stop + 1 - start, max(longest, int(lengths[batch[stop]]))):
            longest = max(longest, int(lengths[batch[stop]]))
            stop += 1
        parts.append(batch[start:stop])
        start = stop
    return parts


def iterate_batches(
    data: RankingData,
    batch_size: int,
    *,
    shuffle: bool = False,
    generator: np.random.Generator | None = None,
    bucket: bool = True,
    init_scores: np.ndarray | torch.Tensor | None = None,
    drop_last: bool = False,
    length_jitter: float = 0.1,
    max_len: int | None = None,
    fits: Callable[[int, int], bool] | None = None,
) -> Iterator[ListBatch]:
    """One epoch of :class:`ListBatch` objects; every query appears exactly once (unless ``drop_last``).

    Batching: with ``bucket=True`` queries are sorted by length and cut into batches of
    ``batch_size`` so that lists of similar length are padded together. Without shuffling the
    batches come shortest first; with ``shuffle=True``:

    * queries are sorted by ``length * (1 + length_jitter * u)`` with ``u ~ U[0, 1)`` drawn per query
      and epoch: ties in length are broken at random and lists whose lengths differ by less than a
      factor ``1 + length_jitter`` may trade places, so batches change between epochs while the
      padding stays within about ``length_jitter`` of the sorted minimum (0 = only ties mixed);
    * the order of the batches is shuffled.

    With ``bucket=False`` batches follow file order, or a random permutation when shuffling.
    The batch plan is drawn when this function is called (not lazily), so the generator's state
    after the call does not depend on how far the iterator is consumed.

    Args:
        data: the dataset (Q queries).
        batch_size: queries per batch (the last batch may be smaller).
        shuffle: randomize batches; requires ``generator``.
        generator: the only source of randomness (``np.random.default_rng(seed)``); reuse one
            generator across epochs to get a different, reproducible order each epoch.
        bucket: group queries of similar length.
        init_scores: optional flat (N,) initial scores, padded into ``ListBatch.init_scores``.
        drop_last: drop the incomplete last batch. When shuffling, the dropped queries are random
            (different each epoch); otherwise they are the last ones (the longest when bucketing).
        length_jitter: see above (>= 0; only used when shuffling with ``bucket=True``).
        max_len: passed to :func:`pad_queries` (keep the first ``max_len`` items in file order).
        fits: ``fits(B, L)``, whether a batch of ``B`` lists padded to ``L`` items may be built (e.g. a
            memory budget: ``ctxrank.training.memory.scoring_fits``); a batch that does not fit is cut
            into consecutive smaller ones (at least one list each). Batches are not merged.

    Returns:
        An iterator of ListBatch of at most ``batch_size`` lists, each padded to its own longest list.

    Raises:
        ValueError: ``shuffle=True`` without a generator, ``batch_size`` < 1, ``length_jitter`` < 0.
        TypeError: a generator that is not an ``np.random.Generator``.
    """
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not np.isfinite(length_jitter) or length_jitter < 0:
        raise ValueError(f"length_jitter must be a finite number >= 0, got {length_jitter!r}")
    if generator is not None and not isinstance(generator, np.random.Generator):
        raise TypeError(
            f"generator must be a numpy.random.Generator (np.random.default_rng(seed)), got {type(generator)}"
        )
    if shuffle and generator is None:
        raise ValueError("shuffle=True needs an explicit generator=np.random.default_rng(seed)")
    if init_scores is not None:
        init_scores = _flat_scores(init_scores, data.n_items, "init_scores")
    plan = _batch_plan(
        data.query_lengths,
        int(batch_size),
        shuffle=shuffle,
        generator=generator,
        bucket=bucket,
        length_jitter=float(length_jitter),
        drop_last=drop_last,
        fits=fits,
    )

    def _gen() -> Iterator[ListBatch]:
        for queries in plan:
            yield pad_queries(data, queries, init_scores=init_scores, max_len=max_len)

    return _gen()


def padding_fraction(batches: Iterable[ListBatch]) -> float:
    """Fraction of padded entries over all (B, L) slots of the batches (0 = no padding)."""
    slots = 0
    real = 0
    for b in batches:
        slots += b.mask.numel()
        real += int(b.mask.sum())
    return 0.0 if slots == 0 else 1.0 - real / slots


def scatter_scores(
    batch: ListBatch,
    scores: torch.Tensor | np.ndarray,
    n_items: int,
    *,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Put a batch's (B, L) scores back into a flat (N,) array in the source data's row order.

    Args:
        batch: a batch from :func:`pad_queries` / :func:`iterate_batches` (needs ``positions``).
        scores: (B, L) scores (tensor, detached and moved to CPU here, or array); padding ignored.
        n_items: N, the number of rows of the source RankingData.
        out: optional float array (N,) to fill (e.g. across all batches of an epoch); rows not in the
            batch are left untouched. Without it, a new float32 (or float64 for float64 scores) array
            is returned, NaN where the batch has no item, so missing predictions are visible.

    Returns:
        The filled (N,) array (``out`` itself when given).
    """
    if batch.positions is None:
        raise ValueError("scatter_scores needs ListBatch.positions (batches built by pad_queries have them)")
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu().numpy()
    scores = np.asarray(scores)
    if scores.shape != tuple(batch.mask.shape):
        raise ValueError(f"scores must have the batch shape {tuple(batch.mask.shape)}, got {scores.shape}")
    pos = batch.positions.cpu().numpy()
    mask = pos >= 0
    if out is None:
        dtype = np.float64 if scores.dtype == np.float64 else np.float32
        out = np.full(n_items, np.nan, dtype=dtype)
    elif out.shape != (n_items,):
        raise ValueError(f"out must have shape ({n_items},), got {out.shape}")
    if mask.any() and pos.max() >= n_items:
        raise ValueError(f"batch positions go up to {pos.max()} but n_items is {n_items}")
    out[pos[mask]] = scores[mask]
    return out


DEFAULT_TOP_K = 100  #: items kept per query by the re-ranking protocol (the DLCM and QILCM papers)
def initial_order(data: RankingData, scores: np.ndarray) -> np.ndarray:
    """int64 (N,) rows grouped by query (in query order), each query by descending ``scores``, tied
    scores by the order-free tie rule (:func:`ctxrank.data.ranking_data.order_by_score`: a fixed hash
    of the items' float32 features, then position only for identical items). So shuffling the items of
    a query permutes this order's items and nothing else: sequence models that read the displayed
    order (DLCM, DCM) see the same lists."""
    s = _flat_scores(scores, data.n_items, "scores").astype(np.float64)
    return order_by_score(data.query_index, s, data.features)


def truncate_top_k(
    data: RankingData,
    scores: np.ndarray | torch.Tensor,
    k: int = DEFAULT_TOP_K,
    *,
    add_rank_feature: bool = False,
    add_score_feature: bool = False,
    gather: bool = False,
) -> tuple[RankingData, np.ndarray]:
    """Keep each query's top ``k`` items by ``scores``, ordered by descending score.

    Order invariance: nothing depends on where an item sits in the file. Items with equal scores are
    ordered (and, at the cutoff, kept) by the tie rule of :func:`initial_order` (a fixed hash of
    their feature values), and the ``initial_rank`` feature of tied items is their **average rank**
    (``scipy.stats.rankdata(method="average")`` within the query: scores [0.9, 0.5, 0.5] give ranks
    1, 2.5, 2.5), so shuffling a query's items permutes the rows and changes no value. A query with at
    most ``k`` items keeps all of them (reordered).

    Args:
        data: N rows, Q queries.
        scores: flat (N,) initial scores (e.g. LambdaMART predictions), finite.
        k: items kept per query (>= 1).
        add_rank_feature: append the initial rank (1-based, within the full query; ties: the
            average rank of the tied items) as a feature column named ``"initial_rank"``.
        add_score_feature: append the initial score as a feature column ``"initial_score"``
            (after ``"initial_rank"`` when both are added).
        gather: the kept rows' features as a :class:`~ctxrank.data.gathered.GatheredRows` of
            ``data.features`` (gathered when read, the same values) instead of a copy: no second
            (N', F) array while ``data`` is alive anyway (a re-ranking run's splits). ``data.features``
            must then not change while the result is used.

    Returns:
        (truncated RankingData with N' = sum(min(len_q, k)) rows and the same Q queries in the same
        order, ``rows`` int64 [N'] the row of each kept item in ``data``). With ``rows`` the full
        queries' labels (e.g. for the ideal DCG over all items) stay reachable. When new feature
        columns are added to data without feature names, the original columns are named
        ``"f1".."fF"``. ``info["truncated_items"]`` counts the dropped rows.

    Raises:
        ValueError: ``k < 1``, scores of the wrong length or with NaN/inf.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    s = _flat_scores(scores, data.n_items, "scores").astype(np.float64)
    if not np.isfinite(s).all():
        bad = int(np.flatnonzero(~np.isfinite(s))[0])
        raise ValueError(f"scores must be finite; row {bad} has {s[bad]}")

    n = data.n_items
    qidx = data.query_index  # (N,) non-decreasing
    position = np.arange(n, dtype=np.int64)
    order = initial_order(data, s)  # grouped by query, best first, ties by the items' features
    start = data.query_offsets[qidx[order]]
    rank = position - start  # 0-based place within the query
    keep = rank < k
    rows = order[keep]
    # average rank of tied scores: the sorted rows' (query, score) groups, each the mean of its places
    sq, ss = qidx[order], s[order]
    first = np.flatnonzero(np.concatenate([[True], (sq[1:] != sq[:-1]) | (ss[1:] != ss[:-1])]))
    end = np.append(first[1:], n)
    average = np.repeat((first + end - 1) / 2, end - first)  # 0-based; as scipy.stats.rankdata - 1
    kept_rank = (average - start)[keep]  # .5 for even ties
    new_offsets = np.concatenate([[0], np.cumsum(np.minimum(data.query_lengths, k))]).astype(np.int64)

    names = data.feature_names
    extra, extra_names = [], []
    if add_rank_feature:
        extra.append((kept_rank + 1).astype(np.float32))
        extra_names.append("initial_rank")
    if add_score_feature:
        extra.append(s[rows].astype(np.float32))
        extra_names.append("initial_score")
    f = data.n_features
    features: np.ndarray | GatheredRows
    if gather and not is_gathered(data.features):
        features = GatheredRows(data.features, rows, np.stack(extra, axis=1) if extra else None)
    else:  # the (N', F + extra) copy allocated once and filled in row blocks: no (N', F) gather beside it
        features = np.empty((rows.size, f + len(extra)), dtype=np.float32)
        step = max(1, (1 << 22) // max(f, 1))  # about 16 MB of float32 a block
        for a in range(0, rows.size, step):
            features[a : a + step, :f] = data.features[rows[a : a + step]]
        for j, column in enumerate(extra):
            features[:, f + j] = column
    if extra:  # unnamed features (arrays) get "" (no invented name for a fitted normalizer to bind)
        names = (*(names or ("",) * data.n_features), *extra_names)
    info = dict(data.info)
    info["truncated_items"] = info.get("truncated_items", 0) + int(n - rows.size)
    truncated = replace(
        data, features=features, query_offsets=new_offsets, feature_names=names, info=info,
        **data.row_fields(rows),
    )
    return truncated, rows
