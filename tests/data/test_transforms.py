"""Feature normalizers: formulas, fit-on-train-only, constant features, finiteness, JSON round trip."""

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ctxrank.data import transforms
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.transforms import (
    TRANSFORMS,
    GlobalMinMax,
    Log1pZScore,
    QueryMinMax,
    QueryZScore,
    Transform,
    ZScore,
    ZScoreLog1p,
    make_transform,
)


def make_data(features, lengths=None, categorical=False, names=True) -> RankingData:
    x = np.asarray(features, dtype=np.float32)
    n, f = x.shape
    lengths = [n] if lengths is None else lengths
    assert sum(lengths) == n
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cat = np.arange(n, dtype=np.int64)[:, None] % 3 if categorical else None
    return RankingData(
        features=x,
        labels=np.arange(n, dtype=np.float32) % 3,
        query_ids=np.array([f"q{i}" for i in range(len(lengths))]),
        query_offsets=offsets,
        categorical=cat,
        categorical_names=("c",) if categorical else (),
        categorical_cardinalities=(3,) if categorical else (),
        feature_names=tuple(f"f{i + 1}" for i in range(f)) if names else (),
    )


def random_data(seed=0, n_queries=20, n_features=5, scale=10.0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 12, n_queries).tolist()
    x = rng.normal(size=(sum(lengths), n_features)) * scale
    x[:, 1] = np.abs(x[:, 1]) ** 3  # heavy tail
    x[:, 2] = 7.0  # constant
    return make_data(x, lengths, categorical=True)


TRAIN = make_data([[0, 10, 5], [2, 30, 5], [4, 20, 5]])
TEST = make_data([[-2, 20, 6], [1, 40, 5]])


def test_global_minmax_fitted_on_train_applied_to_test():
    t = GlobalMinMax().fit(TRAIN)
    np.testing.assert_array_equal(t.min_, [0, 10, 5])
    np.testing.assert_array_equal(t.max_, [4, 30, 5])
    np.testing.assert_allclose(t.transform(TRAIN).features, [[0, 0, 0], [0.5, 1, 0], [1, 0.5, 0]])
    # test values outside the train range are clipped to [0, 1]; a train-constant feature gives 0
    np.testing.assert_allclose(t.transform(TEST).features, [[0, 0.5, 0], [0.25, 1, 0]])
    unclipped = GlobalMinMax(clip=False).fit(TRAIN).transform(TEST).features
    np.testing.assert_allclose(unclipped, [[-0.5, 0.5, 0], [0.25, 1.5, 0]])


def test_zscore_and_log1p_zscore_formulas():
    d = random_data()
    x = d.features.astype(np.float64)
    for t, g in [(ZScore(), x), (Log1pZScore(), np.sign(x) * np.log1p(np.abs(x)))]:
        out = t.fit_transform(d).features
        mean, std = g.mean(0), g.std(0)
        expected = np.where(std > 0, (g - mean) / np.where(std > 0, std, 1), 0)
        expected[:, 2] = 0
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(t.mean_, mean, rtol=1e-12)
        assert t.std_[2] == 0
        nonconst = [0, 1, 3, 4]
        np.testing.assert_allclose(out[:, nonconst].mean(0), 0, atol=1e-5)
        np.testing.assert_allclose(out[:, nonconst].std(0), 1, atol=1e-5)


def test_log1p_is_signed_and_monotone():
    d = make_data([[-100.0], [-1.0], [0.0], [1.0], [100.0]])
    out = Log1pZScore().fit_transform(d).features[:, 0]
    assert np.all(np.diff(out) > 0)
    np.testing.assert_allclose(out, -out[::-1], atol=1e-6)  # odd function of a symmetric sample


def test_query_minmax_matches_loop_reference():
    d = random_data(seed=3)
    out = QueryMinMax().transform(d).features  # stateless: no fit needed
    for q in range(d.n_queries):
        block = d.features[d.query_slice(q)].astype(np.float64)
        lo, hi = block.min(0), block.max(0)
        expected = np.where(hi > lo, (block - lo) / np.where(hi > lo, hi - lo, 1), 0)
        np.testing.assert_allclose(out[d.query_slice(q)], expected, rtol=1e-6, atol=1e-7)
    assert out.min() >= 0 and out.max() <= 1
    assert np.all(out[:, 2] == 0)


def test_zscore_log1p_is_log1p_after_standardization():
    """``sign(z) * log1p(|z|)`` of the z-score with the training statistics (DASALC's log1p, Qin et al.
    2021, applies to the raw features instead: that order is log1p-zscore)."""
    train, test = random_data(seed=1), random_data(seed=2, scale=30.0)
    t = ZScoreLog1p().fit(train)
    x = train.features.astype(np.float64)
    mean, std = x.mean(0), x.std(0)
    np.testing.assert_allclose(t.mean_, mean, rtol=1e-12)
    for row, out in zip(test.features.astype(np.float64), t.transform(test).features, strict=True):
        for j in range(x.shape[1]):
            z = 0.0 if j == 2 else (row[j] - mean[j]) / std[j]  # feature 2 is constant
            assert out[j] == pytest.approx(math.copysign(math.log1p(abs(z)), z), rel=1e-6, abs=1e-7)
    # the other order (log first) is log1p-zscore: not the same numbers
    assert not np.allclose(t.transform(test).features, Log1pZScore().fit(train).transform(test).features)


def test_query_zscore_by_loops_over_queries():
    d = random_data(seed=3)
    out = QueryZScore().transform(d).features  # stateless: no fit needed
    for q in range(d.n_queries):
        rows = d.features[d.query_slice(q)].astype(np.float64)
        for j in range(rows.shape[1]):
            col = [float(v) for v in rows[:, j]]
            mean = sum(col) / len(col)
            std = math.sqrt(sum((v - mean) ** 2 for v in col) / len(col))
            for i, v in enumerate(col):
                expected = 0.0 if max(col) == min(col) else (v - mean) / std
                assert out[d.query_slice(q)][i, j] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert np.all(out[:, 2] == 0)
    # nothing is learned: fitting on another split changes nothing
    np.testing.assert_array_equal(
        QueryZScore().fit(TRAIN).transform(TEST).features, QueryZScore().transform(TEST).features
    )


def test_query_minmax_ignores_fit_split():
    fitted = QueryMinMax().fit(TRAIN)
    np.testing.assert_array_equal(fitted.transform(TEST).features, QueryMinMax().transform(TEST).features)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_registry_transform_contract(name):
    train, test = random_data(seed=1), random_data(seed=2)
    t = make_transform(name)
    assert isinstance(t, TRANSFORMS[name]) and t.name == name
    out = t.fit(train).transform(test)
    assert out.features.dtype == np.float32 and out.features.shape == test.features.shape
    assert np.isfinite(out.features).all()
    # only the features change; the input is not modified
    assert out.categorical is test.categorical and out.labels is test.labels
    np.testing.assert_array_equal(out.query_offsets, test.query_offsets)
    assert out.feature_names == test.feature_names
    np.testing.assert_array_equal(test.features, random_data(seed=2).features)
    if name != "none":
        assert np.all(out.features[:, 2] == 0)  # constant feature -> 0, even on another split


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_json_round_trip(name):
    train, test = random_data(seed=1), random_data(seed=2)
    t = make_transform(name).fit(train)
    d = json.loads(json.dumps(t.to_dict()))
    back = Transform.from_dict(d)
    assert type(back) is type(t) and back.is_fitted
    np.testing.assert_array_equal(back.transform(test).features, t.transform(test).features)
    assert TRANSFORMS[name].from_dict(d).to_dict() == t.to_dict()
    # an unfitted transform round-trips as unfitted
    assert not Transform.from_dict(json.loads(json.dumps(make_transform(name).to_dict()))).is_fitted


def test_minmax_clip_param_round_trips():
    t = Transform.from_dict(json.loads(json.dumps(GlobalMinMax(clip=False).fit(TRAIN).to_dict())))
    assert t.clip is False
    assert t.transform(TEST).features.min() < 0


def test_from_dict_errors():
    d = ZScore().fit(TRAIN).to_dict()
    with pytest.raises(ValueError, match=r"GlobalMinMax\.from_dict got a dict for ZScore"):
        GlobalMinMax.from_dict(d)
    with pytest.raises(ValueError, match="valid names"):
        Transform.from_dict({**d, "name": "nope"})
    with pytest.raises(ValueError, match="'std_' must be 3 finite numbers"):
        Transform.from_dict({**d, "state": {"mean_": [0, 0, 0], "std_": [1, 1]}})


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"valid names: \['log1p-zscore', 'minmax', 'none'"):
        make_transform("min-max")


def test_misuse_errors():
    with pytest.raises(ValueError, match="not fitted"):
        ZScore().transform(TRAIN)
    with pytest.raises(ValueError, match="fitted on 3 features, got data with 2"):
        GlobalMinMax().fit(TRAIN).transform(make_data([[1, 2]]))
    renamed = TRAIN.with_features(TRAIN.features, ["f1", "x", "f3"])
    with pytest.raises(ValueError, match="feature 1 is 'x', expected 'f2'"):
        ZScore().fit(TRAIN).transform(renamed)
    with pytest.raises(TypeError, match="clip must be a bool"):
        GlobalMinMax(clip="yes")


@pytest.mark.parametrize(
    "name", ["minmax", "zscore", "log1p-zscore", "query-minmax", "zscore-log1p", "query-zscore"]
)
def test_non_finite_input_is_an_error_not_hidden(name):
    bad = TRAIN.features.copy()
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match="feature f3 of row 1 is inf; features must be finite"):
        make_transform(name).fit_transform(TRAIN.with_features(bad))


@pytest.mark.parametrize("name", ["minmax", "zscore", "log1p-zscore", "zscore-log1p"])
def test_a_global_normalizer_fits_on_the_values_present_and_passes_missing_ones_through(name):
    """A NaN is a missing value (``null_fill = "keep"``): skipped by ``fit``, kept by ``transform``
    (the model fills it: ``train.missing = "indicator"``); the other values map as if it were absent."""
    holes = TRAIN.features.copy()
    holes[1, 2] = np.nan
    fitted = make_transform(name).fit(TRAIN.with_features(holes))
    present = np.delete(np.arange(TRAIN.n_items), [1])
    out = fitted.transform(TRAIN.with_features(holes)).features
    assert np.isnan(out[1, 2]) and np.isfinite(np.delete(out, [1], axis=0)).all()
    full = make_transform(name).fit(TRAIN).transform(TRAIN).features
    others = [j for j in range(TRAIN.n_features) if j != 2]
    np.testing.assert_allclose(out[:, others], full[:, others], rtol=1e-6)  # other features unchanged
    column = TRAIN.features[present, 2].astype(np.float64)
    state = fitted.to_dict()["state"]
    if name == "minmax":
        assert state["min_"][2] == column.min() and state["max_"][2] == column.max()
    elif name == "zscore":
        want = [column.mean(), column.std()]
        np.testing.assert_allclose([state["mean_"][2], state["std_"][2]], want, rtol=1e-9)
    every = TRAIN.features.copy()
    every[:, 2] = np.nan  # never present: a constant 0 where a value comes later
    later = make_transform(name).fit(TRAIN.with_features(every)).transform(TRAIN).features
    assert np.all(later[:, 2] == 0)


@pytest.mark.parametrize("name", ["query-minmax", "query-zscore"])
def test_a_per_query_normalizer_refuses_missing_values(name):
    holes = TRAIN.features.copy()
    holes[1, 2] = np.nan
    with pytest.raises(ValueError, match="feature f3 of row 1 is nan; a per-query normalizer reads no"):
        make_transform(name).fit_transform(TRAIN.with_features(holes))


@pytest.mark.parametrize(
    "name", ["minmax", "zscore", "log1p-zscore", "query-minmax", "zscore-log1p", "query-zscore"]
)
def test_row_blocks_give_the_same_result(name, monkeypatch):
    d = random_data(seed=4)
    full = make_transform(name).fit(d).transform(d).features
    monkeypatch.setattr(transforms, "_BLOCK_ELEMENTS", 7)  # blocks of 1 row
    blocked = make_transform(name).fit(d).transform(d).features
    np.testing.assert_allclose(blocked, full, rtol=1e-6, atol=1e-6)


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    train=hnp.arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 3)), elements=finite32),
    test_rows=hnp.arrays(np.float32, st.tuples(st.integers(1, 6), st.just(1)), elements=finite32),
)
def test_finite_input_gives_finite_output(train, test_rows):
    test = np.repeat(test_rows, train.shape[1], axis=1)
    n = train.shape[0]
    d_train = make_data(train, [1, n - 1] if n > 1 else [1])
    d_test = make_data(test)
    for t in [make_transform(name) for name in TRANSFORMS] + [GlobalMinMax(clip=False)]:
        t.fit(d_train)
        for d in (d_train, d_test):
            out = t.transform(d).features
            assert np.isfinite(out).all(), (t, d.features, out)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_list_form_equals_the_transform(name):
    """``normalize_lists`` on padded lists (here with numpy as the array library; the export runs the
    same code with torch, tests/export/test_export.py) gives ``transform``'s numbers on the real items, and
    ``raw_lists`` inverts it."""
    train, test = random_data(1), random_data(2, scale=30.0)
    t = make_transform(name).fit(train)
    assert t.has_list_form()
    B, L = test.n_queries, int(np.diff(test.query_offsets).max())
    x = np.full((B, L, test.n_features), -1e6)  # garbage at padded positions
    mask = np.zeros((B, L), dtype=bool)
    for q in range(B):
        a, b = test.query_offsets[q : q + 2]
        x[q, : b - a], mask[q, : b - a] = test.features[a:b], True
    params = t.list_params()
    got = t.normalize_lists(x, mask, params, np)[mask].astype(np.float32)
    np.testing.assert_array_equal(got, t.transform(test).features)
    if name in ("minmax", "zscore", "log1p-zscore", "zscore-log1p"):
        y = np.random.default_rng(0).uniform(0.1, 0.9, size=(3, test.n_features))
        back = t.normalize_lists(t.raw_lists(y, params, np), np.ones((3,), bool), params, np)
        live = params["scale"] > 0
        np.testing.assert_allclose(back[:, live], y[:, live], rtol=1e-9)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@pytest.mark.parametrize("small_blocks", [False, True])
def test_in_place_gives_the_same_values_without_a_second_array(name, small_blocks, monkeypatch):
    if small_blocks:  # every block read before its rows are overwritten, also with blocks of one row
        monkeypatch.setattr(transforms, "_BLOCK_ELEMENTS", 7)
    d = random_data(seed=5)
    t = make_transform(name).fit(d)
    copied = t.transform(d).features
    owned = RankingData(**{**d.__dict__, "features": d.features.copy()})
    done = t.transform(owned, in_place=True)
    np.testing.assert_array_equal(done.features, copied)
    if name != "none":  # "none" returns the data itself
        assert np.shares_memory(done.features, owned.features)
        assert not np.shares_memory(copied, d.features)  # the default leaves the input alone
