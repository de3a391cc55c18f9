"""AdaRank (Xu & Li 2007, Algorithm 1): the first rounds against values computed by hand, query
weights, the no-immediate-repeat rule, the degenerate alpha, validation stopping, determinism,
JSON-only persistence."""

import itertools
import json
import math
import pickle

import numpy as np
import pytest
import torch

from ctxrank.baselines.adarank import MIN_DENOMINATOR, AdaRank, alpha
from ctxrank.data.ranking_data import RankingData
from ctxrank.metrics import evaluate_queries, mean_metrics
from ctxrank.training.checkpoint import FORMAT_VERSION, META_FILE, load_model
from tests.conftest import make_ranking_data

L2 = 1.0 / math.log2(3.0)  # NDCG of a single relevant item ranked 2nd (gain 1)
L3 = 1.0 / math.log2(4.0)  # ... ranked 3rd


def _data(features, labels, lengths):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return RankingData(
        features=np.asarray(features, dtype=np.float32),
        labels=np.asarray(labels, dtype=np.float32),
        query_ids=np.array([f"q{i}" for i in range(len(lengths))]),
        query_offsets=offsets,
    )


def _hand_made():
    """Three queries, two features already in [0, 1] (min 0, max 1: the scaling changes nothing).

    query A: labels [1, 0]     f0 = [1, 0]      f1 = [0, 1]
    query B: labels [0, 1]     f0 = [1, 0]      f1 = [0, 1]
    query C: labels [0, 1, 0]  f0 = [0, 1, .5]  f1 = [1, 0, .5]

    f0 ranks the relevant item 1st, 2nd, 1st; f1 ranks it 2nd, 1st, 3rd.
    """
    f0 = [1, 0, 1, 0, 0, 1, 0.5]
    f1 = [0, 1, 0, 1, 1, 0, 0.5]
    labels = [1, 0, 0, 1, 0, 1, 0]
    return _data(np.column_stack([f0, f1]), labels, [2, 2, 3])


# E(h_k, q) by hand: rows = features, columns = queries A, B, C
BY_HAND = {
    "map": np.array([[1.0, 0.5, 1.0], [0.5, 1.0, 1.0 / 3.0]]),
    "ndcg@10": np.array([[1.0, L2, 1.0], [L2, 1.0, L3]]),
}


@pytest.fixture(scope="module")
def small():
    return make_ranking_data(60, seed=1), make_ranking_data(25, seed=2)


# -------------------------------------------------------------------------------------- by hand


@pytest.mark.parametrize("metric", ["map", "ndcg@10"])
def test_first_two_rounds_equal_the_formula_by_hand(metric):
    data = _hand_made()
    e = BY_HAND[metric]
    model = AdaRank(metric=metric)
    assert np.allclose(model.feature_performance(data.features.astype(np.float64), data), e, atol=1e-12)

    m = AdaRank(metric=metric, n_rounds=2, patience=None).fit(data)
    # round 1: P_1 = 1/3; f0 has the larger weighted performance; alpha_1 = 1/2 ln(sum(1+E) / sum(1-E))
    assert e[0].sum() > e[1].sum()
    a1 = 0.5 * math.log((3 + e[0].sum()) / (3 - e[0].sum()))
    assert m.history_[0]["feature"] == 0 and m.history_[0]["alpha"] == pytest.approx(a1, rel=1e-12)
    if metric == "map":
        assert a1 == pytest.approx(0.5 * math.log(11.0), rel=1e-12)  # (3 + 2.5) / (3 - 2.5)
    # f_1 = alpha_1 h_0 ranks like f0: P_2(i) = exp(-E(f0, q_i)) / Z
    p2 = np.exp(-e[0]) / np.exp(-e[0]).sum()
    # round 2: f0 may not be chosen again, so f1, with alpha from P_2
    a2 = 0.5 * math.log((p2 @ (1 + e[1])) / (p2 @ (1 - e[1])))
    assert m.history_[1]["feature"] == 1 and m.history_[1]["alpha"] == pytest.approx(a2, rel=1e-12)
    assert m.rounds_run_ == 2

    one = AdaRank(metric=metric, n_rounds=1).fit(data)
    assert one.rounds_ == [(0, pytest.approx(a1, rel=1e-12))]
    np.testing.assert_allclose(one.query_weights_, p2, rtol=1e-12)
    assert one.query_weights_.sum() == pytest.approx(1.0, abs=1e-15)
    assert np.argmax(one.query_weights_) == 1  # query B, the one f0 ranks badly, weighs most
    np.testing.assert_allclose(one.coef_, [a1, 0.0], rtol=1e-12)
    np.testing.assert_allclose(one.predict(data), a1 * data.features[:, 0], rtol=1e-6)


def test_alpha_formula_and_its_degenerate_case():
    p = np.array([0.2, 0.3, 0.5])
    e = np.array([0.9, 0.4, 0.7])
    assert alpha(p, e) == pytest.approx(0.5 * math.log((p @ (1 + e)) / (p @ (1 - e))), rel=1e-15)
    assert alpha(p, np.zeros(3)) == 0.0
    cap = 0.5 * math.log(2.0 / MIN_DENOMINATOR)
    assert alpha(p, np.ones(3)) == pytest.approx(cap, rel=1e-15)  # E = 1 on every weighted query
    assert math.isfinite(alpha(p, np.ones(3) - 1e-17))


def test_a_perfect_feature_gets_the_finite_capped_alpha():
    rng = np.random.default_rng(0)
    lengths = [5, 7, 6, 4]
    n = sum(lengths)
    labels = rng.integers(0, 3, size=n)
    labels[[0, 5, 12, 18]] = 2  # every query has a relevant item
    perfect = labels + 0.1 * rng.random(n)  # sorts every query by label (ties broken by noise)
    data = _data(np.column_stack([rng.random(n), perfect, rng.random(n)]), labels, lengths)
    m = AdaRank(metric="ndcg@10", n_rounds=3, patience=None).fit(data)
    first = m.history_[0]
    assert first["feature"] == 1 and first["train"] == pytest.approx(1.0, abs=1e-12)
    assert first["alpha"] == pytest.approx(0.5 * math.log(2.0 / MIN_DENOMINATOR), rel=1e-12)
    assert all(math.isfinite(h["alpha"]) for h in m.history_)
    assert m.best_round_ == 1 and np.isfinite(m.predict(data)).all()


# ---------------------------------------------------------------------------------------- weights


def test_query_weights_sum_to_one_and_favour_badly_ranked_queries(small):
    tr, _ = small
    m = AdaRank(metric="map", n_rounds=4, patience=None).fit(tr)
    assert m.best_round_ == len(m.rounds_)
    p = m.query_weights_
    assert p.shape == (tr.n_queries,) and p.sum() == pytest.approx(1.0, abs=1e-12) and (p > 0).all()
    e = evaluate_queries(m.predict(tr), tr.labels, tr.query_offsets, ["map"])["map"]
    np.testing.assert_allclose(p, np.exp(-e) / np.exp(-e).sum(), rtol=1e-9)
    worse, better = np.argmin(e), np.argmax(e)
    assert e[worse] < e[better] and p[worse] > p[better]


def test_skipped_queries_leave_algorithm_1(small):
    tr, va = small
    labels = tr.labels.copy()
    for q in range(0, tr.n_queries, 3):
        labels[tr.query_slice(q)] = 0
    tr0 = RankingData(**{**tr.__dict__, "labels": labels})
    n_rel = tr0.n_queries - tr0.queries_without_relevant()
    m = AdaRank(metric="ndcg@10", n_rounds=3, no_relevant="skip").fit(tr0, va)
    assert m.query_weights_.shape == (n_rel,)
    zero = AdaRank(metric="ndcg@10", n_rounds=3, no_relevant=0.0).fit(tr0, va)
    assert zero.query_weights_.shape == (tr0.n_queries,)
    assert zero.history_[0]["feature"] == m.history_[0]["feature"]  # constant E: same argmax
    assert zero.history_[0]["alpha"] < m.history_[0]["alpha"]  # but E = 0 damps alpha


# --------------------------------------------------------------------------------- stopping rules


def test_never_the_same_feature_twice_in_a_row(small):
    tr, _ = small
    m = AdaRank(metric="ndcg@10", n_rounds=30, patience=None).fit(tr)
    features = [h["feature"] for h in m.history_]
    assert len(features) == 30 and all(a != b for a, b in itertools.pairwise(features))
    single = make_ranking_data(20, n_features=1, seed=4)
    s = AdaRank(n_rounds=10).fit(single)
    assert s.rounds_run_ == 1 and s.stop_reason_.startswith("no candidate")


def test_validation_stopping_keeps_the_best_round(small):
    tr, va = small
    m = AdaRank(metric="ndcg@10", n_rounds=200, patience=5).fit(tr, va)
    valid = [h["valid"] for h in m.history_]
    best = int(np.argmax(valid))  # first maximum
    assert m.best_round_ == best + 1 and m.best_score_ == valid[best]
    assert m.rounds_run_ == len(valid) < 200 and m.stop_reason_ == "patience"
    assert m.rounds_run_ - m.best_round_ == 5 and max(valid[best + 1 :]) <= valid[best]
    assert len(m.rounds_) == m.best_round_ and m.selected_on_ == "valid"
    # the kept model is f_{t*}: its validation NDCG@10 is the recorded one, bit for bit
    got = mean_metrics(evaluate_queries(m.predict(va), va.labels, va.query_offsets, ["ndcg@10"]))
    assert got["ndcg@10"] == m.best_score_
    coef = np.zeros(5)
    for k, a in m.rounds_:
        coef[k] += a
    assert np.array_equal(coef, m.coef_)
    # without validation: selection on the training mean of E(f_t)
    t = AdaRank(metric="ndcg@10", n_rounds=15, patience=None).fit(tr)
    train = [h["train"] for h in t.history_]
    assert t.selected_on_ == "train" and t.best_round_ == int(np.argmax(train)) + 1
    assert t.rounds_run_ == 15 and t.training_summary()["best_train_metric"] == max(train)


def test_determinism_and_threads_restored(small):
    tr, va = small
    before = torch.get_num_threads()
    a = AdaRank(metric="map", n_rounds=20).fit(tr, va)
    b = AdaRank(metric="map", n_rounds=20).fit(tr, va)
    assert torch.get_num_threads() == before
    assert a.history_ == b.history_ and np.array_equal(a.predict(va), b.predict(va))


# ------------------------------------------------------------------------------------ persistence


def test_save_load_identical_scores(small, tmp_path, monkeypatch):
    tr, va = small
    m = AdaRank(metric="ndcg@5", n_rounds=20).fit(tr, va)
    out = m.save(tmp_path / "ada", run_config={"model": "adarank-ndcg", "train": {"seed": 0}})
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", META_FILE]
    meta = json.loads((out / META_FILE).read_text())
    assert meta["kind"] == "adarank" and meta["format_version"] == FORMAT_VERSION
    assert meta["params"]["metric"] == "ndcg@5" and len(meta["rounds"]) == m.best_round_
    assert meta["objective"] == "adarank-ndcg@5" and meta["min_denominator"] == MIN_DENOMINATOR

    def no_unpickling(*args, **kwargs):
        raise AssertionError("loading an AdaRank must not unpickle")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, no_unpickling)
    for loaded in (AdaRank.load(out), load_model(out)):
        assert isinstance(loaded, AdaRank) and loaded.n_features == 5
        assert np.array_equal(loaded.predict(va), m.predict(va))
        assert loaded.get_params() == m.get_params() and loaded.rounds_ == m.rounds_


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # unpickling this would create the marker file
        return (open, (str(self.marker), "w"))


def test_a_planted_pickle_is_refused_without_running_code(small, tmp_path):
    tr, _ = small
    out = AdaRank(n_rounds=3).fit(tr).save(tmp_path / "ada")
    marker = tmp_path / "pwned"
    for protocol in (0, pickle.HIGHEST_PROTOCOL):
        (out / META_FILE).write_bytes(pickle.dumps(_Planted(marker), protocol=protocol))
        for load in (AdaRank.load, load_model):
            with pytest.raises(ValueError, match="unreadable model metadata"):
                load(out)
    assert not marker.exists()


def test_load_rejects_inconsistent_metadata(small, tmp_path):
    tr, _ = small
    out = AdaRank(n_rounds=5, patience=None).fit(tr).save(tmp_path / "ada")
    meta = json.loads((out / META_FILE).read_text())
    cases = [
        ({**meta, "kind": "ranksvm"}, "not an AdaRank one"),
        ({**meta, "rounds": meta["rounds"][:-1]}, "not the sum of the rounds' alphas"),
        ({**meta, "rounds": [[9, 0.5]]}, r"bad AdaRank round \(9, 0.5\)"),
        ({**meta, "params": {**meta["params"], "metric": "err@3"}}, "metric must be 'map' or 'ndcg@K'"),
    ]
    for bad, message in cases:
        (out / META_FILE).write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=message):
            AdaRank.load(out)


# ----------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"metric": "err@10"}, r"metric must be 'map' or 'ndcg@K'"),
        ({"metric": "p@5"}, r"metric must be 'map' or 'ndcg@K'"),
        ({"metric": "ndcg@x"}, "metric: cutoff"),
        ({"n_rounds": 0}, "n_rounds must be a positive integer"),
        ({"patience": 0}, "patience must be a positive integer or None"),
        ({"no_relevant": 2}, "no_relevant must be"),
        ({"num_threads": 0}, "num_threads must be a positive integer or None"),
    ],
)
def test_bad_parameters_name_the_parameter(params, message):
    with pytest.raises(ValueError, match=message):
        AdaRank(**params)


def test_not_fitted_and_feature_mismatch(small, tmp_path):
    tr, _va = small
    m = AdaRank(n_rounds=3)
    with pytest.raises(ValueError, match="not fitted"):
        m.predict(tr)
    fewer = make_ranking_data(10, n_features=4, seed=5)
    with pytest.raises(ValueError, match="train has 5 features but valid has 4"):
        m.fit(tr, fewer)
    m.fit(tr)
    with pytest.raises(ValueError, match=r"trained on 5 features but .* has 4"):
        m.predict(fewer)
    assert AdaRank(metric="MAP").metric == "map" and AdaRank(metric="NDCG @ 3").objective == "adarank-ndcg@3"
