"""Offline (counterfactual) estimates of a new ranker's metric on seeded position-based-model logs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ctxrank.clicks.offline import offline_estimates, rank_weights
from ctxrank.clicks.propensity import Propensities
from tests.clicks.test_propensity import simulate_pbm

K = 6
PBM = Propensities.pbm(1.0, K)


def _truth(truth: dict, beta: np.ndarray, metric: str, k: int) -> tuple[float, float]:
    """The simulator's true metric V of the ranker scoring features by ``beta`` and V / E[sum rel]."""
    qscores = truth["features"] @ beta  # (Q, L)
    rank = np.argsort(np.argsort(-qscores, axis=1), axis=1)
    rel = truth["query_relevance"]
    value = (rank_weights(metric, k, PBM, K)[rank] * rel).sum(1).mean()
    return float(value), float(value / rel.sum(1).mean())


def _scores(truth: dict, beta: np.ndarray) -> np.ndarray:
    return (truth["features"] @ beta)[truth["query"]].reshape(-1)


RANKERS = [np.array([1.5, -1.0, 0.5]), np.array([-1.5, 1.0, -0.5]), np.array([1.0, 0.0, 0.0])]


@pytest.mark.parametrize("metric", ["clicks", "dcg"])
def test_intervals_cover_the_simulated_truth_for_several_rankers(metric):
    log, truth = simulate_pbm(n_sessions=2000, n_items=K, seed=11)
    for beta in RANKERS:
        value, normalised = _truth(truth, beta, metric, 4)
        est = offline_estimates(
            log, _scores(truth, beta), PBM, metric=metric, k=4, reward=truth["relevance"], n_resamples=300
        )
        for name, target in (("ips", value), ("snips", normalised), ("dr", value)):
            assert est[name].low <= target <= est[name].high, (name, beta, est[name], target)


def test_estimates_separate_a_good_from_a_bad_ranker():
    log, truth = simulate_pbm(n_sessions=2000, n_items=K, seed=12)
    good, bad = RANKERS[0], RANKERS[1]
    est = {tuple(b): offline_estimates(log, _scores(truth, b), PBM, k=3, n_resamples=50) for b in (good, bad)}
    assert est[tuple(good)]["ips"].low > est[tuple(bad)]["ips"].high
    assert est[tuple(good)]["snips"].low > est[tuple(bad)]["snips"].high


def test_doubly_robust_corrects_the_bias_of_clipped_weights():
    log, truth = simulate_pbm(n_sessions=3000, n_items=K, seed=13)
    beta = RANKERS[1]  # puts the logging ranker's bottom items on top: their weights are clipped
    value, _ = _truth(truth, beta, "clicks", K)
    est = offline_estimates(
        log, _scores(truth, beta), PBM, k=K, clip=2.0, reward=truth["relevance"], n_resamples=200
    )
    assert est["ips"].high < value  # clipping makes IPS underestimate
    assert est["dr"].low <= value <= est["dr"].high
    unclipped = offline_estimates(log, _scores(truth, beta), PBM, k=K, reward=0.5 * truth["relevance"])
    assert unclipped["dr"].value == pytest.approx(unclipped["ips"].value)  # DR = IPS unclipped


def test_edge_logs_give_finite_estimates():
    log, truth = simulate_pbm(n_sessions=50, n_items=K, seed=14)
    scores = _scores(truth, RANKERS[0])
    silent = dataclasses.replace(log, labels=np.zeros_like(log.labels))
    est = offline_estimates(silent, scores, PBM, reward=truth["relevance"], n_resamples=50)
    assert all(e.value == e.low == e.high == 0.0 for n, e in est.items() if n != "dr")
    assert np.isfinite(est["dr"].value) and est["dr"].low <= est["dr"].value <= est["dr"].high
    one = offline_estimates(log.subset([0]), scores[:K], PBM, n_resamples=50)
    assert all(np.isfinite([e.value, e.low, e.high]).all() for e in one.values())
    zero_at_last = Propensities.given([1.0, 0.5, 0.3, 0.2, 0.1, 0.0])
    clipped = offline_estimates(log, scores, zero_at_last, clip=5.0, n_resamples=50)
    assert all(np.isfinite([e.value, e.low, e.high]).all() for e in clipped.values())


def test_the_ranking_not_the_row_order_decides():
    log, truth = simulate_pbm(n_sessions=200, n_items=K, seed=15)
    scores = _scores(truth, RANKERS[2])
    a = offline_estimates(log, scores, PBM, n_resamples=50, seed=3)
    b = offline_estimates(log, scores * 10.0 + 1.0, PBM, n_resamples=50, seed=3)  # same order
    assert a == b


def test_errors_name_the_argument():
    log, truth = simulate_pbm(n_sessions=20, n_items=K, seed=16)
    scores = _scores(truth, RANKERS[0])
    with pytest.raises(ValueError, match=rf"scores: expected {log.n_items} numbers"):
        offline_estimates(log, scores[:-1], PBM)
    bad = scores.copy()
    bad[7] = np.nan
    with pytest.raises(ValueError, match="scores: row 7 is nan"):
        offline_estimates(log, bad, PBM)
    with pytest.raises(ValueError, match=r"metric: expected one of \['clicks', 'dcg'\]"):
        offline_estimates(log, scores, PBM, metric="ndcg")
    with pytest.raises(ValueError, match=r"needs the propensities of ranks 1\.\.4, they cover 1\.\.3"):
        offline_estimates(log, scores, Propensities.pbm(1.0, 3), k=4)
    with pytest.raises(ValueError, match="relative to position 1"):
        offline_estimates(log, scores, Propensities.given([0.9] * K, relative=False))
    with pytest.raises(ValueError, match=r"row \d+ was shown at position 6, outside the 1\.\.5"):
        offline_estimates(log, scores, Propensities.pbm(1.0, 5), metric="dcg")
    with pytest.raises(ValueError, match="reward: expected"):
        offline_estimates(log, scores, PBM, reward=np.ones(3))
