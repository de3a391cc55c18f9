"""RankSVM: pair construction against a brute-force double loop, subsampling, learning a linear ground
truth, C selection, scaling, determinism, JSON-only persistence."""

import dataclasses
import json
import math
import pickle

import numpy as np
import pytest

from ctxrank.baselines.ranksvm import RankSVM, pair_indices
from ctxrank.data.ranking_data import RankingData
from ctxrank.metrics import evaluate_queries, mean_metrics
from ctxrank.training.checkpoint import FORMAT_VERSION, META_FILE, load_model
from tests.conftest import make_ranking_data

QUICK = {"C": (0.01, 1.0)}


def _ndcg10(scores, data):
    return mean_metrics(evaluate_queries(scores, data.labels, data.query_offsets, ["ndcg@10"]))["ndcg@10"]


def _data(features, labels, lengths):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return RankingData(
        features=np.asarray(features, dtype=np.float32),
        labels=np.asarray(labels, dtype=np.float32),
        query_ids=np.array([f"q{i}" for i in range(len(lengths))]),
        query_offsets=offsets,
    )


def _linear_truth(n_queries, seed, w=(2.0, -1.0, 0.5, 0.0)):
    """Labels 0-3 from an exact linear utility (no noise), features on very different scales."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 16, size=n_queries)
    n = int(lengths.sum())
    x = rng.normal(size=(n, len(w)))
    utility = x @ np.asarray(w)
    labels = np.digitize(utility, [-1.0, 0.5, 2.0])
    x = x * np.array([1.0, 100.0, 0.01, 5.0]) + np.array([0.0, 50.0, 3.0, -2.0])  # user-scale features
    return _data(x, labels, lengths), utility


@pytest.fixture(scope="module")
def small():
    return make_ranking_data(60, seed=1), make_ranking_data(25, seed=2)


# ------------------------------------------------------------------------------------------- pairs


def _brute_force_pairs(labels, offsets):
    out = set()
    for q in range(len(offsets) - 1):
        for i in range(offsets[q], offsets[q + 1]):
            for j in range(i + 1, offsets[q + 1]):
                if labels[i] != labels[j]:
                    out.add(frozenset((i, j)))
    return out


def test_pairs_equal_a_brute_force_double_loop():
    labels = np.array([2, 0, 1, 1, 0, 3, 3, 0, 1, 2, 2, 2], dtype=np.float32)
    offsets = np.array([0, 5, 6, 8, 12])  # lengths 5, 1 (no pair), 2, 4 (ties inside)
    first, second, target = pair_indices(
        labels, offsets, max_pairs_per_query=None, rng=np.random.default_rng(0)
    )
    got = [frozenset((int(a), int(b))) for a, b in zip(first, second, strict=True)]
    assert len(got) == len(set(got))  # no pair twice
    assert set(got) == _brute_force_pairs(labels, offsets)
    assert np.array_equal(target, np.sign(labels[first] - labels[second]))
    assert set(np.unique(target)) == {-1.0, 1.0}  # random orientation: both classes
    q_of = np.searchsorted(offsets, np.arange(len(labels)), side="right") - 1
    assert np.array_equal(q_of[first], q_of[second])  # never across queries
    assert first.dtype == second.dtype == np.int64 and target.dtype == np.float64


def test_pairs_on_a_real_dataset_match_brute_force(small):
    tr, _ = small
    first, second, target = pair_indices(
        tr.labels, tr.query_offsets, max_pairs_per_query=None, rng=np.random.default_rng(1)
    )
    got = {frozenset((int(a), int(b))) for a, b in zip(first, second, strict=True)}
    assert got == _brute_force_pairs(tr.labels, tr.query_offsets)
    assert np.array_equal(target, np.sign(tr.labels[first] - tr.labels[second]))
    assert 0.4 < np.mean(target > 0) < 0.6


def test_subsampling_caps_pairs_per_query():
    rng = np.random.default_rng(3)
    lengths = [30, 4, 25]
    labels = rng.integers(0, 3, size=sum(lengths)).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    full = _brute_force_pairs(labels, offsets)
    first, second, _ = pair_indices(labels, offsets, max_pairs_per_query=10, rng=np.random.default_rng(0))
    got = [frozenset((int(a), int(b))) for a, b in zip(first, second, strict=True)]
    assert set(got) <= full and len(set(got)) == len(got)
    q_of = np.searchsorted(offsets, first, side="right") - 1
    per_query = np.bincount(q_of, minlength=3)
    n_full = [sum(1 for p in full if offsets[q] <= min(p) < offsets[q + 1]) for q in range(3)]
    assert list(per_query) == [min(10, n) for n in n_full] and n_full[1] <= 6
    again = pair_indices(labels, offsets, max_pairs_per_query=10, rng=np.random.default_rng(0))
    other = pair_indices(labels, offsets, max_pairs_per_query=10, rng=np.random.default_rng(1))
    assert np.array_equal(first, again[0]) and np.array_equal(second, again[1])
    assert {frozenset(p) for p in zip(other[0], other[1], strict=True)} != set(got)
    m = RankSVM(C=0.1, max_pairs_per_query=10).fit(_data(rng.normal(size=(59, 3)), labels, lengths))
    assert m.n_pairs_ == sum(min(10, n) for n in n_full)


def test_a_single_pair_still_gives_both_classes():
    labels = np.array([0, 1], dtype=np.float32)
    for seed in range(8):  # whichever way the pair is oriented
        first, second, target = pair_indices(labels, np.array([0, 2]), rng=np.random.default_rng(seed))
        assert len(target) == 1
        assert target[0] == np.sign(labels[first[0]] - labels[second[0]])
    data = _data([[0.0, 1.0], [1.0, 0.0], [0.3, 0.3]], [0, 1, 1], [3])
    m = RankSVM(C=1.0).fit(data)  # two pairs, possibly of one orientation
    assert m.coef_[0] > m.coef_[1]


# ------------------------------------------------------------------------------------------ learning


def test_recovers_a_linear_ground_truth_and_beats_random():
    train, _ = _linear_truth(80, seed=0)
    valid, _ = _linear_truth(30, seed=1)
    test, utility = _linear_truth(40, seed=2)
    m = RankSVM().fit(train, valid)
    scores = m.predict(test)
    # within every query, the order of the scores is the order of the true utility
    from scipy.stats import spearmanr

    rhos = [
        spearmanr(scores[test.query_slice(q)], utility[test.query_slice(q)]).statistic
        for q in range(test.n_queries)
    ]
    assert np.mean(rhos) > 0.95
    # the learned direction, mapped back to raw features, is the true one
    w_raw = m.coef_ / (m.scaler_.max_ - m.scaler_.min_)
    w_true = np.array([2.0, -1.0, 0.5, 0.0]) / np.array([1.0, 100.0, 0.01, 5.0])
    cosine = w_raw @ w_true / np.linalg.norm(w_raw) / np.linalg.norm(w_true)
    assert cosine > 0.99
    ours = _ndcg10(scores, test)
    random = np.mean([_ndcg10(np.random.default_rng(s).random(test.n_items), test) for s in range(5)])
    assert ours > 0.95 and ours > random + 0.25


def test_noisy_data_beats_random_by_a_clear_margin(small):
    tr, va = small
    te = make_ranking_data(40, seed=3)
    m = RankSVM(**QUICK).fit(tr, va)
    ours = _ndcg10(m.predict(te), te)
    random = np.mean([_ndcg10(np.random.default_rng(s).random(te.n_items), te) for s in range(5)])
    assert ours > random + 0.15


def test_C_is_chosen_on_validation(small):
    tr, va = small
    grid = (1e-4, 1e-2, 1.0)
    m = RankSVM(C=grid).fit(tr, va)
    assert list(m.grid_scores_) == list(grid)
    assert m.C_ == max(grid, key=lambda c: m.grid_scores_[c])  # first best on ties
    assert m.best_score_ == m.grid_scores_[m.C_]
    assert m.best_score_ == pytest.approx(_ndcg10(m.predict(va), va), abs=1e-12)
    for c in grid:  # each entry is the validation NDCG@10 of that C fitted alone
        assert m.grid_scores_[c] == pytest.approx(_ndcg10(RankSVM(C=c).fit(tr).predict(va), va), abs=1e-12)
    with pytest.raises(ValueError, match=r"C is a grid of 3 values.*pass valid"):
        RankSVM(C=grid).fit(tr)
    alone = RankSVM(C=0.5).fit(tr)
    assert alone.C_ == 0.5 and alone.grid_scores_ == {} and alone.best_score_ is None
    summary = m.training_summary()
    assert summary["C"] == m.C_ and summary["n_pairs"] == m.n_pairs_ and len(summary["grid"]) == 3


def test_min_max_scaling_is_fitted_on_train_and_makes_feature_scales_irrelevant(small):
    tr, va = small
    scale = np.array([1000.0, 0.001, 1.0, 50.0, 7.0], dtype=np.float32)
    shift = np.array([5.0, -3.0, 0.0, 100.0, 1.0], dtype=np.float32)

    def rescaled(d):
        return d.with_features((d.features * scale + shift).astype(np.float32))

    a = RankSVM(**QUICK).fit(tr, va)
    b = RankSVM(**QUICK).fit(rescaled(tr), rescaled(va))
    assert np.allclose(b.scaler_.min_, tr.features.min(0) * scale + shift, rtol=1e-6)
    assert a.C_ == b.C_
    np.testing.assert_allclose(b.predict(rescaled(va)), a.predict(va), rtol=1e-3, atol=1e-3)
    wide = va.with_features(va.features * 10)  # beyond the training range: extrapolated, not clipped
    assert len(np.unique(a.predict(wide))) == va.n_items


def test_hinge_loss_and_determinism(small):
    tr, va = small
    for loss in ("squared_hinge", "hinge"):
        a = RankSVM(**QUICK, loss=loss, seed=3, max_pairs_per_query=20).fit(tr, va)
        b = RankSVM(**QUICK, loss=loss, seed=3, max_pairs_per_query=20).fit(tr, va)
        c = RankSVM(**QUICK, loss=loss, seed=4, max_pairs_per_query=20).fit(tr, va)
        assert np.array_equal(a.coef_, b.coef_) and np.array_equal(a.predict(va), b.predict(va))
        assert not np.array_equal(a.coef_, c.coef_)  # the seed reaches subsampling and orientation
    assert RankSVM(loss="hinge").objective == "pairwise-hinge"


# --------------------------------------------------------------------------------------- persistence


def test_save_load_identical_scores(small, tmp_path, monkeypatch):
    tr, va = small
    m = RankSVM(**QUICK).fit(tr, va)
    out = m.save(tmp_path / "svm", run_config={"model": "ranksvm", "train": {"seed": 0}})
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", META_FILE]
    meta = json.loads((out / META_FILE).read_text())
    assert meta["kind"] == "ranksvm" and meta["format_version"] == FORMAT_VERSION
    assert meta["params"]["C"] == [0.01, 1.0] and len(meta["coef"]) == 5 and meta["C"] == m.C_
    assert meta["scaler"]["name"] == "minmax" and meta["scaler"]["params"] == {"clip": False}

    def no_unpickling(*args, **kwargs):
        raise AssertionError("loading a RankSVM must not unpickle")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, no_unpickling)
    for loaded in (RankSVM.load(out), load_model(out)):
        assert isinstance(loaded, RankSVM) and loaded.n_features == 5
        assert np.array_equal(loaded.predict(va), m.predict(va))
        assert loaded.get_params() == m.get_params() and loaded.C_ == m.C_
        assert loaded.grid_scores_ == m.grid_scores_


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # unpickling this would create the marker file
        return (open, (str(self.marker), "w"))


def test_a_planted_pickle_is_refused_without_running_code(small, tmp_path):
    tr, _va = small
    out = RankSVM(C=0.1).fit(tr).save(tmp_path / "svm")
    marker = tmp_path / "pwned"
    for protocol in (0, pickle.HIGHEST_PROTOCOL):
        (out / META_FILE).write_bytes(pickle.dumps(_Planted(marker), protocol=protocol))
        for load in (RankSVM.load, load_model):
            with pytest.raises(ValueError, match="unreadable model metadata"):
                load(out)
    assert not marker.exists()


def test_load_rejects_foreign_or_inconsistent_metadata(small, tmp_path):
    tr, _va = small
    out = RankSVM(C=0.1).fit(tr).save(tmp_path / "svm")
    meta = json.loads((out / META_FILE).read_text())
    cases = [
        ({**meta, "kind": "adarank"}, "not a RankSVM one"),
        ({**meta, "coef": meta["coef"][:-1]}, "'coef' must hold 5 finite numbers"),
        ({**meta, "coef": "0.1, 0.2"}, "'coef' must be a list of numbers"),
        ({**meta, "params": {**meta["params"], "C": -1}}, "C must be a positive number"),
        ({**meta, "params": {**meta["params"], "kernel": "rbf"}}, r"unknown parameter\(s\) \['kernel'\]"),
        ({**meta, "scaler": {"name": "zscore"}}, "bad 'scaler'|must be an unclipped min-max"),
    ]
    for bad, message in cases:
        (out / META_FILE).write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=message):
            RankSVM.load(out)



def test_a_nan_validation_score_round_trips(small, tmp_path):
    """Strict JSON writes a NaN grid score as null; loading reads it back as NaN (not a load error)."""
    tr, va = small
    out = RankSVM(C=[0.1, 1.0]).fit(tr, va).save(tmp_path / "svm")
    meta = json.loads((out / META_FILE).read_text())
    meta["grid_scores"][0][1] = None
    (out / META_FILE).write_text(json.dumps(meta))
    loaded = RankSVM.load(out)
    assert math.isnan(loaded.grid_scores_[meta["grid_scores"][0][0]])
    assert loaded.best_score_ == meta["best_score"]
    no_valid = RankSVM(C=0.1).fit(tr).save(tmp_path / "svm2")
    assert RankSVM.load(no_valid).best_score_ is None  # no validation: None, not NaN


# -------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"C": 0}, "C must be a positive number"),
        ({"C": []}, "C must be a number > 0 or a non-empty list"),
        ({"C": [0.1, 0.1]}, "C: the grid has repeated values"),
        ({"C": "1"}, "C must be a positive number"),
        ({"loss": "log"}, "loss must be one of"),
        ({"max_pairs_per_query": 0}, "max_pairs_per_query must be a positive integer or None"),
        ({"metric": "ndcg@0"}, "metric: cutoff"),
        ({"no_relevant": 0.5}, "no_relevant must be"),
        ({"tol": -1.0}, "tol must be"),
        ({"max_iter": 1.5}, "max_iter must be a positive integer"),
        ({"seed": -1}, "seed must be an integer >= 0"),
    ],
)
def test_bad_parameters_name_the_parameter(params, message):
    with pytest.raises(ValueError, match=message):
        RankSVM(**params)


def test_not_fitted_feature_mismatch_and_no_pairs(small, tmp_path):
    tr, _va = small
    m = RankSVM(C=0.1)
    with pytest.raises(ValueError, match="not fitted"):
        m.predict(tr)
    with pytest.raises(ValueError, match="not fitted"):
        m.save(tmp_path / "x")
    fewer = make_ranking_data(10, n_features=4, seed=5)
    with pytest.raises(ValueError, match="train has 5 features but valid has 4"):
        RankSVM(**QUICK).fit(tr, fewer)
    m.fit(tr)
    with pytest.raises(ValueError, match=r"trained on 5 features but .* has 4"):
        m.predict(fewer)
    with pytest.raises(TypeError, match="RankingData"):
        m.predict(tr.features)
    flat = dataclasses.replace(tr, labels=np.ones_like(tr.labels))
    with pytest.raises(ValueError, match="no pair to learn from"):
        RankSVM(C=0.1).fit(flat)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['kernel'\]"):
        m.set_params(kernel="rbf")
    assert m.set_params(C=0.3).C == 0.3 and "C=0.3" in repr(m)


@pytest.mark.parametrize("cap", [None, 1, 37, 1000])
def test_long_queries_give_the_same_pairs_without_building_them_all(cap, monkeypatch):
    """A query's candidate pairs were all built (``triu_indices``: 3.2 GB for one 20,000-item query)
    even to keep 1,000 of them. Long queries are now paired row by row: the same pairs, in the same
    order, from the same random draws, as the dense path gives."""
    from ctxrank.baselines import ranksvm

    rng = np.random.default_rng(3)
    lengths, grades = [1, 2, 5, 60, 200, 7], [2, 2, 3, 5, 1, 3]  # 1 grade: no pair at all
    labels = np.concatenate([rng.integers(0, k, n) for k, n in zip(grades, lengths, strict=True)])
    labels = labels.astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    dense = pair_indices(labels, offsets, max_pairs_per_query=cap, rng=np.random.default_rng(0))
    monkeypatch.setattr(ranksvm, "DENSE_PAIRS", 0)  # every query row by row
    long = pair_indices(labels, offsets, max_pairs_per_query=cap, rng=np.random.default_rng(0))
    for a, b in zip(dense, long, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_long_query_keeps_its_pairs_in_memory_of_the_pairs_kept():
    """6,000 items: 18 million candidate pairs (~600 MB to enumerate) for 1,000 kept; NumPy's allocations
    (traced by tracemalloc) stay within a few MB."""
    import tracemalloc

    labels = np.random.default_rng(0).integers(0, 3, 6000).astype(np.float32)
    tracemalloc.start()
    try:
        first, second, _ = pair_indices(
            labels, np.array([0, 6000]), max_pairs_per_query=1000, rng=np.random.default_rng(0)
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert first.size == 1000 and np.all(labels[first] != labels[second]) and np.all(first != second)
    assert peak < 8 * 2**20, f"{peak:,} bytes"
