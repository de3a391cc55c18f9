"""Click models: sampled click rates against the exact probabilities, the models' defining properties,
parameter checks and the registry."""

from __future__ import annotations

import numpy as np
import pytest

from ctxrank.clicks.click_models import (
    CLICK_MODELS,
    CascadeModel,
    DependentClickModel,
    DynamicBayesianNetwork,
    PositionBasedModel,
    click_model,
    label_relevance,
)

# two kinds of session: a graded list, and a shorter one (padding after 4 items)
REL = np.array([[1.0, 0.0, 0.5, 1.0, 0.2, 0.0], [0.0, 1.0, 1.0, 0.3, 0.0, 0.0]])
MASK = np.array([[True] * 6, [True] * 4 + [False] * 2])
MODELS = [
    PositionBasedModel(eta=1.0, eps_minus=0.1),
    PositionBasedModel(eta=2.0, eps_minus=0.05, eps_plus=0.9),
    CascadeModel(eps_minus=0.1, eps_plus=0.8),
    DependentClickModel(continuation=(0.7, 0.5)),
    DynamicBayesianNetwork(gamma=0.8, sat_minus=0.1, sat_plus=0.6),
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: f"{m.name}")
def test_sampled_click_rates_match_the_exact_probabilities(model):
    n = 20_000  # sessions of each kind; tolerance: 5 binomial standard deviations
    rel, mask = np.repeat(REL, n, axis=0), np.repeat(MASK, n, axis=0)
    clicks = model.sample(rel, mask, np.random.default_rng(0))
    assert clicks.dtype == np.bool_ and clicks.shape == rel.shape
    assert not clicks[~mask].any()
    p = model.click_probability(REL, MASK)
    rate = clicks.reshape(2, n, 6).mean(axis=1)
    tol = 5 * np.sqrt(p * (1 - p) / n) + 1e-12
    np.testing.assert_array_less(np.abs(rate - p), tol + 1e-3 * (p == 0))


def test_exact_probabilities_by_hand():
    rel, mask = np.array([[1.0, 0.0, 1.0]]), np.ones((1, 3), bool)
    np.testing.assert_allclose(
        PositionBasedModel(eta=1.0, eps_minus=0.1).click_probability(rel, mask), [[1.0, 0.05, 1 / 3]]
    )
    # cascade with a = 0.8, 0.1, 0.8: 0.8, 0.2 * 0.1, 0.2 * 0.9 * 0.8
    np.testing.assert_allclose(CascadeModel(eps_plus=0.8).click_probability(rel, mask), [[0.8, 0.02, 0.144]])
    # DBN gamma 0.5, a = 1, 0.1, 1, s = 0.5, 0, 0.5: E = 1, 0.5 * (1 - 0.5), 0.25 * 0.5 * (1 - 0)
    dbn = DynamicBayesianNetwork(gamma=0.5, sat_minus=0.0, sat_plus=0.5)
    np.testing.assert_allclose(dbn.click_probability(rel, mask), [[1.0, 0.025, 0.125]])


def test_cascade_is_dcm_without_continuation_and_dbn_with_full_perseverance_and_satisfaction():
    rng = np.random.default_rng(1)
    rel, mask = rng.random((5, 7)), np.ones((5, 7), bool)
    cascade = CascadeModel(eps_minus=0.2, eps_plus=0.9).click_probability(rel, mask)
    dcm = DependentClickModel(eps_minus=0.2, eps_plus=0.9, continuation=(0.0,)).click_probability(rel, mask)
    dbn = DynamicBayesianNetwork(eps_minus=0.2, eps_plus=0.9, gamma=1.0, sat_minus=1.0, sat_plus=1.0)
    np.testing.assert_allclose(dcm, cascade)
    np.testing.assert_allclose(dbn.click_probability(rel, mask), cascade)


def test_cascade_clicks_at_most_once_and_is_deterministic_per_seed():
    rel = np.full((2000, 10), 0.5)
    mask = np.ones_like(rel, dtype=bool)
    a = CascadeModel().sample(rel, mask, np.random.default_rng(3))
    assert a.sum(axis=1).max() == 1
    b = CascadeModel().sample(rel, mask, np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, CascadeModel().sample(rel, mask, np.random.default_rng(4)))


def test_dcm_continuation_past_its_end_repeats_the_last_value():
    np.testing.assert_allclose(DependentClickModel(continuation=(0.9, 0.3)).lambdas(4), [0.9, 0.3, 0.3, 0.3])


def test_label_relevance_rules():
    y = np.array([0, 1, 2, 4])
    np.testing.assert_allclose(label_relevance(y, 4), [0, 1 / 15, 3 / 15, 1])
    np.testing.assert_allclose(label_relevance(y, 4, "linear"), [0, 0.25, 0.5, 1])
    np.testing.assert_allclose(label_relevance(y, 4, "binary", threshold=2), [0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"one of \['exponential', 'linear', 'binary'\], got 'log'"):
        label_relevance(y, 4, "log")
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\], got 0.0..4.0"):
        label_relevance(y, 2)


def test_registry_and_refusals():
    assert sorted(CLICK_MODELS) == ["cascade", "dbn", "dcm", "pbm"]
    assert click_model("pbm", eta=2.0) == PositionBasedModel(eta=2.0)
    with pytest.raises(
        ValueError, match=r"unknown click model 'ubm'; valid: \['cascade', 'dbn', 'dcm', 'pbm'\]"
    ):
        click_model("ubm")
    with pytest.raises(
        ValueError, match=r"'cascade' has no parameter\(s\) \['eta'\]; valid: \['eps_minus', 'eps_plus'\]"
    ):
        click_model("cascade", eta=1.0)
    with pytest.raises(ValueError, match=r"eps_minus must be a probability in \[0, 1\], got 1.5"):
        PositionBasedModel(eps_minus=1.5)
    with pytest.raises(ValueError, match=r"eta must be a finite number >= 0, got -1"):
        PositionBasedModel(eta=-1)
    with pytest.raises(ValueError, match=r"eta must be a finite number >= 0, got True"):
        PositionBasedModel(eta=True)  # a bool is not read as eta = 1
    with pytest.raises(ValueError, match=r"continuation\[2\] must be a probability"):
        DependentClickModel(continuation=(0.5, 2.0))
    with pytest.raises(ValueError, match=r"gamma must be a probability"):
        DynamicBayesianNetwork(gamma=float("nan"))
    with pytest.raises(ValueError, match=r"relevance must lie in \[0, 1\]"):
        CascadeModel().sample(np.array([[2.0]]), np.ones((1, 1), bool), np.random.default_rng(0))
    with pytest.raises(TypeError, match="mask must be bool"):
        CascadeModel().click_probability(np.zeros((1, 2)), np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"both be \(S, K\), got \(1, 2\) and \(1, 3\)"):
        CascadeModel().click_probability(np.zeros((1, 2)), np.ones((1, 3), bool))
