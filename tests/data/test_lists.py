"""List batching: padding contract, round trips, bucketing, seeded shuffling, top-k truncation."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrank.data.lists import (
    ListBatch,
    iterate_batches,
    pad_queries,
    padding_fraction,
    scatter_scores,
    truncate_top_k,
)
from ctxrank.data.ranking_data import RankingData, feature_hash, feature_hash_multipliers


def make_data(lengths, n_features=3, seed=0, categorical=True, docids=True, names=True) -> RankingData:
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return RankingData(
        features=(rng.normal(size=(n, n_features)) + 1).astype(np.float32),  # nonzero everywhere
        labels=rng.integers(1, 5, n).astype(np.float32),
        query_ids=np.array([f"q{i}" for i in range(len(lengths))]),
        query_offsets=offsets,
        docids=np.array([f"d{i}" for i in range(n)]) if docids else None,
        categorical=rng.integers(1, 4, (n, 2)) if categorical else None,
        categorical_names=("a", "b") if categorical else (),
        categorical_cardinalities=(4, 4) if categorical else (),
        feature_names=tuple(f"f{i + 1}" for i in range(n_features)) if names else (),
    )


SKEWED = [2] * 40 + [50] * 8 + [3, 45, 4, 60] * 4


def test_pad_queries_values_and_padding_are_exact():
    d = make_data([3, 1, 4, 2])
    init = np.arange(d.n_items, dtype=np.float32) + 1
    b = pad_queries(d, [2, 1, 0], init_scores=init)
    assert b.features.shape == (3, 4, 3) and b.labels.shape == (3, 4) and b.mask.dtype == torch.bool
    assert b.features.dtype == torch.float32 and b.categorical.dtype == torch.int64
    assert b.query_index.tolist() == [2, 1, 0]
    assert b.mask.tolist() == [[True] * 4, [True, False, False, False], [True] * 3 + [False]]
    assert b.positions.tolist() == [[4, 5, 6, 7], [3, -1, -1, -1], [0, 1, 2, -1]]
    pad = ~b.mask
    assert torch.all(b.features[pad] == 0) and torch.all(b.labels[pad] == 0)
    assert torch.all(b.init_scores[pad] == 0) and torch.all(b.categorical[pad] == 0)
    real = b.positions[b.mask].numpy()
    np.testing.assert_array_equal(b.features[b.mask].numpy(), d.features[real])
    np.testing.assert_array_equal(b.labels[b.mask].numpy(), d.labels[real])
    np.testing.assert_array_equal(b.init_scores[b.mask].numpy(), init[real])
    np.testing.assert_array_equal(b.categorical[b.mask].numpy(), d.categorical[real])
    assert b.lengths.tolist() == [4, 1, 3] and b.batch_size == 3 and b.list_len == 4


def test_pad_queries_max_len_and_options():
    d = make_data([5, 2], categorical=False)
    b = pad_queries(d, np.array([0, 1]), max_len=3)
    assert b.list_len == 3 and b.positions.tolist() == [[0, 1, 2], [5, 6, -1]]
    assert b.categorical is None and b.init_scores is None
    moved = b.to("cpu")
    assert isinstance(moved, ListBatch) and moved.features.device.type == "cpu" and moved.categorical is None
    with pytest.raises(ValueError, match=r"query positions must lie in \[0, 2\)"):
        pad_queries(d, [0, 2])
    with pytest.raises(ValueError, match="non-empty"):
        pad_queries(d, [])
    with pytest.raises(ValueError, match="max_len"):
        pad_queries(d, [0], max_len=0)
    with pytest.raises(ValueError, match="init_scores must be a flat array of N = 7"):
        pad_queries(d, [0], init_scores=np.zeros(6))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("bucket", [False, True])
def test_every_query_once_per_epoch_and_scatter_round_trip(shuffle, bucket):
    d = make_data(SKEWED)
    gen = np.random.default_rng(0) if shuffle else None
    seen = []
    out = np.full(d.n_items, np.nan, dtype=np.float32)
    for b in iterate_batches(d, 5, shuffle=shuffle, generator=gen, bucket=bucket):
        assert b.batch_size <= 5
        seen.extend(b.query_index.tolist())
        # a "model" scoring each item with its first feature; padding scores must be ignored
        scores = torch.where(b.mask, b.features[..., 0], torch.tensor(123.0))
        scatter_scores(b, scores, d.n_items, out=out)
        np.testing.assert_array_equal(b.features[b.mask].numpy(), d.features[b.positions[b.mask].numpy()])
    assert sorted(seen) == list(range(d.n_queries))
    np.testing.assert_array_equal(out, d.features[:, 0])  # file order recovered


def test_scatter_scores_new_array_and_errors():
    d = make_data([2, 3])
    b = pad_queries(d, [1])
    out = scatter_scores(b, np.array([[1.0, 2.0, 3.0]]), d.n_items)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out[2:], [1, 2, 3])
    assert np.isnan(out[:2]).all()  # rows not in the batch stay visible as missing
    with pytest.raises(ValueError, match="batch shape"):
        scatter_scores(b, np.zeros((1, 2)), d.n_items)


def test_bucketing_reduces_padding_on_skewed_lengths():
    d = make_data(SKEWED)
    plain = padding_fraction(iterate_batches(d, 8, bucket=False))
    sorted_ = padding_fraction(iterate_batches(d, 8, bucket=True))
    mixed = padding_fraction(iterate_batches(d, 8, shuffle=True, generator=np.random.default_rng(0)))
    assert sorted_ < 0.1 < 0.3 < plain
    assert mixed < sorted_ + 0.1  # the length jitter costs little padding
    lengths = [b.lengths.max().item() for b in iterate_batches(d, 8)]
    assert lengths == sorted(lengths)  # without shuffling: shortest batches first


def _epoch(d, seed, **kw):
    gen = np.random.default_rng(seed)
    return [b.query_index.tolist() for b in iterate_batches(d, 4, shuffle=True, generator=gen, **kw)]


@pytest.mark.parametrize("bucket", [False, True])
def test_same_seed_same_batches_different_seed_different_order(bucket):
    d = make_data(SKEWED)
    assert _epoch(d, 7, bucket=bucket) == _epoch(d, 7, bucket=bucket)
    assert _epoch(d, 7, bucket=bucket) != _epoch(d, 8, bucket=bucket)
    gen = np.random.default_rng(7)
    e1 = [b.query_index.tolist() for b in iterate_batches(d, 4, shuffle=True, generator=gen, bucket=bucket)]
    e2 = [b.query_index.tolist() for b in iterate_batches(d, 4, shuffle=True, generator=gen, bucket=bucket)]
    assert e1 != e2  # one generator across epochs: a new order each epoch
    # batch compositions (not only their order) change between epochs
    assert {tuple(sorted(b)) for b in e1} != {tuple(sorted(b)) for b in e2}


def test_drop_last():
    d = make_data(SKEWED)  # 64 queries
    batches = list(iterate_batches(d, 10, drop_last=True))
    assert [b.batch_size for b in batches] == [10] * 6
    gen = np.random.default_rng(0)
    dropped = []
    for _ in range(2):
        qs = [
            b.query_index.tolist()
            for b in iterate_batches(d, 10, shuffle=True, generator=gen, drop_last=True)
        ]
        assert all(len(q) == 10 for q in qs) and len(qs) == 6
        flat = [q for batch in qs for q in batch]
        assert len(set(flat)) == 60
        dropped.append(set(range(64)) - set(flat))
    assert dropped[0] != dropped[1]  # a random remainder, not always the longest queries


def test_iterate_batches_argument_errors():
    d = make_data([2, 3])
    with pytest.raises(ValueError, match="explicit generator"):
        iterate_batches(d, 2, shuffle=True)  # raised at the call, not at the first next()
    with pytest.raises(TypeError, match=r"numpy.random.Generator"):
        iterate_batches(d, 2, shuffle=True, generator=0)
    with pytest.raises(ValueError, match="batch_size"):
        iterate_batches(d, 0)
    with pytest.raises(ValueError, match="length_jitter"):
        iterate_batches(d, 2, length_jitter=-1)
    b = next(iterate_batches(d, 2, init_scores=torch.arange(5.0)))
    assert b.init_scores[b.mask].tolist() == [0, 1, 2, 3, 4]


def test_padding_fraction():
    d = make_data([1, 3])
    assert padding_fraction([pad_queries(d, [0, 1])]) == pytest.approx(2 / 6)
    assert padding_fraction([]) == 0.0


# ---------------------------------------------------------------------------------- truncate_top_k
def test_truncate_top_k_handmade_with_ties():
    d = make_data([5, 2, 3])
    #                 q0: rows 0-4            q1: rows 5-6  q2: rows 7-9
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9, 1.0, 2.0, -1.0, -1.0, -1.0])
    t, rows = truncate_top_k(d, scores, k=3, add_rank_feature=True)
    # ties broken by a hash of the features, not by position: rows 1 and 4 (0.9) first in some fixed
    # order, then one of the two 0.5 rows (0, 2); q2's three -1.0 rows in a fixed order
    h = feature_hash(d.features)
    tie_first = sorted([1, 4], key=lambda r: h[r])
    assert rows.tolist() == [
        *tie_first,
        min([0, 2], key=lambda r: h[r]),
        6,
        5,
        *sorted([7, 8, 9], key=lambda r: h[r]),
    ]
    assert t.query_offsets.tolist() == [0, 3, 5, 8]
    assert t.query_ids.tolist() == d.query_ids.tolist()
    np.testing.assert_array_equal(t.labels, d.labels[rows])
    np.testing.assert_array_equal(t.features[:, :3], d.features[rows])
    assert t.feature_names == ("f1", "f2", "f3", "initial_rank")
    assert t.features[:, 3].tolist() == [1.5, 1.5, 3.5, 1, 2, 2, 2, 2]  # tied scores: the average rank
    assert t.docids.tolist() == [f"d{r}" for r in rows]
    np.testing.assert_array_equal(t.categorical, d.categorical[rows])
    assert t.info["truncated_items"] == 2


def test_truncate_top_k_larger_than_lists_and_score_feature():
    d = make_data([2, 3], names=False, categorical=False, docids=False)
    scores = torch.tensor([1.0, 3.0, 2.0, 2.0, 5.0])
    t, rows = truncate_top_k(d, scores, k=100, add_rank_feature=True, add_score_feature=True)
    h = feature_hash(d.features)
    assert rows.tolist() == [1, 0, 4, *sorted([2, 3], key=lambda r: h[r])]  # whole lists, by score
    assert t.n_items == d.n_items and t.query_offsets.tolist() == d.query_offsets.tolist()
    assert t.feature_names == ("", "", "", "initial_rank", "initial_score")  # unnamed stay unnamed
    assert t.features[:, 3].tolist() == [1, 2, 1, 2.5, 2.5]
    assert t.features[:, 4].tolist() == [3, 1, 5, 2, 2]
    t0, _ = truncate_top_k(d, scores, k=1)
    assert t0.n_features == 3 and t0.feature_names == () and t0.query_offsets.tolist() == [0, 1, 2]


def test_truncate_top_k_errors():
    d = make_data([2, 3])
    with pytest.raises(ValueError, match="k must be a positive integer"):
        truncate_top_k(d, np.zeros(5), k=0)
    with pytest.raises(ValueError, match="row 3 has nan"):
        truncate_top_k(d, np.array([0, 0, 0, np.nan, 0]))
    with pytest.raises(ValueError, match="N = 5"):
        truncate_top_k(d, np.zeros(4))


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=6),
    k=st.integers(1, 8),
    data=st.data(),
)
def test_truncate_top_k_matches_loop_reference(lengths, k, data):
    d = make_data(lengths, categorical=False)
    scores = np.array(data.draw(st.lists(st.integers(0, 3), min_size=d.n_items, max_size=d.n_items)), float)
    t, rows = truncate_top_k(d, scores, k=k, add_rank_feature=True)
    expected, expected_rank = [], []
    for q in range(d.n_queries):
        start = d.query_offsets[q]
        key = {
            r: (-scores[r], int(feature_hash(d.features[[r]])[0]), r)
            for r in range(start, d.query_offsets[q + 1])
        }
        items = sorted(key, key=key.get)[:k]
        expected.extend(items)
        # average rank among the items of the whole query with the same score
        expected_rank.extend(
            1 + sum(scores[o] > scores[r] for o in key) + (sum(scores[o] == scores[r] for o in key) - 1) / 2
            for r in items
        )
    assert rows.tolist() == expected
    assert t.features[:, -1].tolist() == expected_rank


# ------------------------------------------------------------------ order invariance on real data
@pytest.fixture(scope="module")
def mq2008_test_with_lambdamart_ties():
    from ctxrank.baselines.lambdamart import LambdaMART
    from ctxrank.data.registry import load_fold

    fold = load_fold("mq2008", 1)
    ranker = LambdaMART(n_estimators=10, early_stopping_rounds=None, seed=0).fit(fold.train)
    return fold.test, ranker.predict(fold.test).astype(np.float64)


def _shuffle_within_queries(data: RankingData, seed: int):
    """(the data with each query's items in a random order, perm: new row i = old row perm[i])."""
    rng = np.random.default_rng(seed)
    perm = np.lexsort((rng.random(data.n_items), data.query_index))
    shuffled = RankingData(
        features=data.features[perm],
        labels=data.labels[perm],
        query_ids=data.query_ids,
        query_offsets=data.query_offsets,
        docids=None if data.docids is None else data.docids[perm],
        source=data.source,
    )
    return shuffled, perm


def _model_scores(model, top: RankingData, init: np.ndarray) -> np.ndarray:
    out = np.full(top.n_items, np.nan, dtype=np.float32)
    with torch.no_grad():
        for batch in iterate_batches(top, 64, init_scores=init):
            scatter_scores(batch, model.score_batch(batch), top.n_items, out=out)
    return out


def test_shuffling_items_permutes_every_models_scores_on_mq2008(mq2008_test_with_lambdamart_ties):
    """MQ2008 Fold1 test with LambdaMART's real ties: the rank feature of tied items and the order of
    the re-ranking lists must not depend on file position."""
    from ctxrank.registry import MODELS, make_model
    from ctxrank.training.rerank import merge_scores, prepare_split

    data, init = mq2008_test_with_lambdamart_ties
    q = data.query_index
    order = np.lexsort((init, q))
    tied = np.zeros(data.n_items, dtype=bool)
    same = (q[order][1:] == q[order][:-1]) & (init[order][1:] == init[order][:-1])
    tied[order[1:][same]] = tied[order[:-1][same]] = True
    assert tied.sum() > 300  # LambdaMART's real ties (697 rows with the CLI's default rounds)

    h = feature_hash(data.features)
    by_item = np.lexsort((h, q))
    dup = (q[by_item][1:] == q[by_item][:-1]) & np.all(
        data.features[by_item][1:] == data.features[by_item][:-1], axis=1
    )
    duplicate = np.zeros(data.n_items, dtype=bool)  # another item of its query has the same features
    duplicate[by_item[1:][dup]] = duplicate[by_item[:-1][dup]] = True
    assert duplicate.sum() > 10  # interchangeable items exist: the merge's averaging is exercised

    split = prepare_split(data, init, k=100, rank_feature=True)
    # the first query with more than 100 items makes the cut itself depend on the tie rule
    assert (data.query_lengths > 100).any()
    for seed in (1,):
        shuffled, perm = _shuffle_within_queries(data, seed)
        split2 = prepare_split(shuffled, init[perm], k=100, rank_feature=True)
        # the same lists in the same order; items with identical features (and score) may trade places
        np.testing.assert_array_equal(split2.top.features, split.top.features)
        np.testing.assert_array_equal(split2.top.labels, split.top.labels)
        np.testing.assert_array_equal(data.features[perm[split2.rows]], data.features[split.rows])
        # rank features identical up to the permutation: per original item
        rank1 = np.empty(data.n_items)
        rank1[split.rows] = split.top.features[:, -1]
        rank2 = np.empty(data.n_items)
        rank2[perm[split2.rows]] = split2.top.features[:, -1]
        kept = np.zeros(data.n_items, dtype=bool)
        kept[split.rows] = True
        np.testing.assert_array_equal(rank2[kept], rank1[kept])
        # tied initial scores give equal rank features
        r = split.top.features[:, -1]
        s = init[split.rows]
        qq = q[split.rows]
        eq = (qq[1:] == qq[:-1]) & (s[1:] == s[:-1])
        assert eq.any() and np.array_equal(r[1:][eq], r[:-1][eq])
        for name in sorted(n for n in MODELS if MODELS[n].traits.torch_module):
            torch.manual_seed(0)
            model = make_model(name, split.top.n_features).eval()
            s1 = _model_scores(model, split.top, split.top_initial_scores)
            s2 = _model_scores(model, split2.top, split2.top_initial_scores)
            np.testing.assert_array_equal(s2, s1, err_msg=name)  # same inputs, bitwise the same
            per_item1 = np.full(data.n_items, np.nan)
            per_item1[split.rows] = s1
            per_item2 = np.full(data.n_items, np.nan)
            per_item2[perm[split2.rows]] = s2
            if not MODELS[name].traits.reads_order:  # orderless: every item keeps its score exactly
                np.testing.assert_array_equal(per_item2, per_item1, err_msg=name)
            # the merged full-query scores of every row, sequence models included, are the same
            # whatever the file order: interchangeable items (identical features and initial score,
            # which the cut at k and the list order can only tell apart by position) share the best
            # of their ranks
            full1 = merge_scores(split, s1)[perm]
            full2 = merge_scores(split2, s2)
            np.testing.assert_array_equal(full2, full1, err_msg=name)


def test_feature_hash_of_chosen_rows_in_row_blocks_equals_the_hash_of_their_copy():
    """``feature_hash(features, rows)`` gathers the rows a block at a time (no copy of them all, no
    uint64 temporary of them all): the same hashes as hashing the gathered rows at once."""
    rng = np.random.default_rng(0)
    x = rng.random((10_000, 136), dtype=np.float32)  # about 3 row blocks of 136 features
    rows = np.sort(rng.choice(10_000, 9_000, replace=False))
    by_blocks = feature_hash(x, rows)
    mult = feature_hash_multipliers(136)
    at_once = (x[rows].view(np.uint32).astype(np.uint64) * mult).sum(axis=1, dtype=np.uint64)
    np.testing.assert_array_equal(by_blocks, at_once)
    np.testing.assert_array_equal(feature_hash(x[rows]), at_once)
