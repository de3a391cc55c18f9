"""Propensity estimators on seeded position-based-model logs, the Propensities value and its errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ctxrank.clicks.click_models import PositionBasedModel
from ctxrank.clicks.propensity import (
    Propensities,
    from_harvesting,
    from_randomized,
    from_regression_em,
)
from ctxrank.clicks.simulate import simulate_clicks
from ctxrank.data.ranking_data import RankingData


def simulate_pbm(
    *,
    n_sessions: int,
    eta: float = 1.0,
    n_queries: int = 40,
    n_items: int = 8,
    randomize: str = "none",
    n_rankers: int = 1,
    seed: int = 0,
) -> tuple[RankingData, dict]:
    """A seeded position-based-model log: each session shows all ``n_items`` items of a random query in
    its logging ranker's order (``randomize``: "swap" puts the top item at a uniform position, "shuffle"
    permutes the list); an item is clicked when examined (prob. (1 / position) ** eta) and relevant
    (prob. sigmoid of its features). Returns the log and the truth (relevance per row, rankers, ...)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n_queries, n_items, 3)).astype(np.float32)
    relevance = 1.0 / (1.0 + np.exp(-(features @ np.array([1.5, -1.0, 0.5]) - 0.5)))
    # ranker r scores items by a noisy copy of the relevance logit (different noise per ranker)
    ranker_scores = features @ np.array([1.5, -1.0, 0.5]) + rng.normal(
        scale=1.5, size=(n_rankers, n_queries, n_items)
    )
    query = rng.integers(n_queries, size=n_sessions)
    ranker = rng.integers(n_rankers, size=n_sessions)
    order = np.argsort(-ranker_scores[ranker, query], axis=1, kind="stable")  # (S, L) items by shown position
    original = np.empty_like(order)
    np.put_along_axis(original, order, np.arange(1, n_items + 1)[None, :].repeat(n_sessions, 0), axis=1)
    shown = original.copy()  # (S, L) the position of each item
    if randomize == "swap":
        k = rng.integers(1, n_items + 1, size=n_sessions)
        top = original == 1
        at_k = original == k[:, None]
        shown[top] = k
        shown[at_k & ~top] = 1
    elif randomize == "shuffle":
        shown = rng.permuted(np.tile(np.arange(1, n_items + 1), (n_sessions, 1)), axis=1)
    rel = relevance[query]  # (S, L)
    clicks = (rng.random(shown.shape) < (1.0 / shown) ** eta) & (rng.random(shown.shape) < rel)
    session = np.repeat(np.arange(n_sessions), n_items)
    log = RankingData.from_arrays(
        features[query].reshape(-1, 3),
        clicks.reshape(-1).astype(np.float32),
        qid=session,
        position=shown.reshape(-1),
    )
    log = dataclasses.replace(
        log,
        group_ids=np.array([f"q{q}" for q in query]),
        docids=np.array([f"d{i}" for i in range(n_items)] * n_sessions),
    )
    truth = {
        "relevance": rel.reshape(-1),
        "original": original.reshape(-1),
        "rankers": ranker,
        "curve": (1.0 / np.arange(1, n_items + 1)) ** eta,
        "query": query,
        "features": features,
        "query_relevance": relevance,
    }
    return log, truth


def _covers(props: Propensities, curve: np.ndarray) -> np.ndarray:
    return (np.asarray(props.lower) <= curve) & (curve <= np.asarray(props.upper))


@pytest.mark.parametrize(("randomize", "eta"), [("swap", 1.0), ("shuffle", 2.0)])
def test_randomized_sessions_recover_the_pbm_curve_within_the_interval(randomize, eta):
    log, truth = simulate_pbm(n_sessions=4000, n_items=6, eta=eta, randomize=randomize, seed=3)
    original = truth["original"] if randomize == "swap" else None
    props = from_randomized(log, original_positions=original, n_resamples=200, seed=1)
    assert props.method == "randomized" and props.sessions == 4000 and props.values[0] == 1.0
    assert _covers(props, truth["curve"]).all(), (props.lower, props.upper)
    assert np.all(np.asarray(props.upper) - np.asarray(props.lower) < 0.2)


def test_intervention_harvesting_recovers_the_pbm_curve_within_the_interval():
    log, truth = simulate_pbm(n_sessions=4000, n_items=6, n_rankers=3, seed=4)
    props = from_harvesting(log, truth["rankers"], n_resamples=300, seed=1)
    assert props.method == "harvesting" and props.values[0] == 1.0
    assert _covers(props, truth["curve"]).all(), (props.lower, props.upper)


def test_intervention_harvesting_is_not_the_naive_click_rate_curve():
    # the logging rankers put relevant items on top: the raw click-rate ratio is steeper than the truth
    log, truth = simulate_pbm(n_sessions=4000, n_items=6, n_rankers=3, seed=4)
    col = log.shown_positions - 1
    ctr = np.bincount(col, weights=log.labels) / np.bincount(col)
    props = from_harvesting(log, truth["rankers"], n_resamples=50, seed=1)
    assert not _covers(props, ctr / ctr[0]).all()


def test_regression_em_recovers_the_pbm_curve_and_the_relevance():
    log, truth = simulate_pbm(n_sessions=3000, n_items=6, n_rankers=3, seed=2)
    result = from_regression_em(log, n_resamples=10, tol=1e-3, seed=1)
    assert result.propensities.method == "regression_em"
    assert _covers(result.propensities, truth["curve"]).all()
    assert result.relevance.shape == (log.n_items,)
    assert np.corrcoef(result.relevance, truth["relevance"])[0, 1] > 0.95
    assert abs(result.relevance.mean() - truth["relevance"].mean()) < 0.05


def test_given_pbm_and_json_round_trip():
    pbm = Propensities.pbm(1.0, 4)
    assert pbm.values == (1.0, 0.5, 1 / 3, 0.25) and pbm.lower == pbm.values and pbm.sessions == 0
    log, _truth = simulate_pbm(n_sessions=500, n_items=4, randomize="shuffle", seed=0)
    estimated = from_randomized(log, n_resamples=50)
    for props in (pbm, Propensities.given([0.9, 0.5], relative=False), estimated):
        assert Propensities.from_json(props.to_json()) == props


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"method": "pbm"}', "missing keys"),
        ("[1, 2]", "expected an object"),
        ("{", "not valid JSON"),
    ],
)
def test_from_json_refuses_what_it_did_not_write(text, message):
    with pytest.raises(ValueError, match=message):
        Propensities.from_json(text)


def test_from_json_names_unknown_keys_and_wrong_types():
    good = Propensities.pbm(1.0, 2).to_json()
    with pytest.raises(ValueError, match=r"unknown keys \['eta'\]"):
        Propensities.from_json(good[:-1] + ', "eta": 1}')
    with pytest.raises(ValueError, match="values must be a list of numbers"):
        Propensities.from_json(good.replace('"values": [1.0, 0.5]', '"values": ["1", 0.5]'))
    with pytest.raises(ValueError, match="method: expected one of"):
        Propensities.from_json(good.replace('"pbm"', '"magic"'))


def test_weights_clip_and_name_positions_outside_the_curve():
    props = Propensities.given([1.0, 0.5, 0.0])
    np.testing.assert_allclose(props.weights(np.array([1, 2, 2]), clip=None), [1.0, 2.0, 2.0])
    np.testing.assert_allclose(props.weights(np.array([3, 2]), clip=1.5), [1.5, 1.5])
    with pytest.raises(ValueError, match="position 3 has propensity 0"):
        props.weights(np.array([1, 3]), clip=None)
    with pytest.raises(ValueError, match=r"row 1 was shown at position 4, outside the 1\.\.3"):
        props.weights(np.array([1, 4]), clip=10.0)
    with pytest.raises(ValueError, match="clip: expected None or a finite maximum weight >= 1"):
        props.weights(np.array([1]), clip=0.5)
    for clip in ("10", True, float("inf")):  # each one line naming clip, never a TypeError of math
        with pytest.raises(ValueError, match="clip: expected None or a finite maximum weight >= 1"):
            props.weights(np.array([1]), clip=clip)
    for eta in ("1", True, -1.0):  # likewise the position-based curve's eta
        with pytest.raises(ValueError, match="eta: expected a finite number >= 0"):
            Propensities.pbm(eta, 3)
    with pytest.raises(TypeError, match="positions: expected a 1-D integer array"):
        props.weights(np.array([1.0]), clip=None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"values": (0.5, 0.4), "lower": (0.5, 0.3), "upper": (0.5, 0.6)},
            "relative propensities must have p_1 = 1",
        ),
        ({"values": (1.0, float("nan"))}, "must be finite"),
        ({"values": (1.0, 0.5), "upper": (1.0, 0.4)}, "position 2: expected 0 <= lower <= value <= upper"),
        ({"values": (1.0,)}, "same K >= 1 entries"),
        ({"method": "guess"}, "method: expected one of"),
        ({"sessions": -1}, "sessions: expected an integer >= 0"),
    ],
)
def test_propensities_validate_their_fields(kwargs, message):
    fields = {
        "values": (1.0, 0.5),
        "lower": (1.0, 0.3),
        "upper": (1.0, 0.6),
        "method": "given",
        "sessions": 1,
    }
    with pytest.raises(ValueError, match=message):
        Propensities(**{**fields, **kwargs})


def test_a_position_without_clicks_gets_zero_and_finite_clipped_weights():
    log, _ = simulate_pbm(n_sessions=400, n_items=4, randomize="shuffle", seed=5)
    labels = np.where(log.shown_positions == 4, 0.0, log.labels).astype(np.float32)
    props = from_randomized(dataclasses.replace(log, labels=labels), n_resamples=50)
    assert props.values[3] == 0.0 and props.lower[3] == 0.0 and np.isfinite(props.upper).all()
    assert np.isfinite(props.weights(log.shown_positions, clip=20.0)).all()


def test_estimators_name_what_is_missing():
    log, truth = simulate_pbm(n_sessions=40, n_items=4, randomize="shuffle", seed=6)
    one = log.subset([0])
    with pytest.raises(ValueError, match=r"position 1: 1, position 2: 1.*need min_sessions=30"):
        from_randomized(one)
    zero = dataclasses.replace(log, labels=np.zeros_like(log.labels))
    with pytest.raises(ValueError, match="no click at position 1"):
        from_randomized(zero, n_resamples=50)
    with pytest.raises(ValueError, match="needs at least 2 sessions, got 1"):
        from_regression_em(one, n_resamples=5)
    with pytest.raises(ValueError, match="the log has no click"):
        from_regression_em(zero)
    with pytest.raises(ValueError, match=r"needs two or more logging rankers, got \[0\]"):
        from_harvesting(log, np.zeros(log.n_queries, dtype=int))
    with pytest.raises(ValueError, match="needs the logged query id of each session"):
        from_harvesting(dataclasses.replace(log, group_ids=None), truth["rankers"])
    with pytest.raises(ValueError, match="no shown positions"):
        from_randomized(dataclasses.replace(log, shown_positions=None))
    with pytest.raises(ValueError, match="n_resamples: expected an integer >= 2"):
        from_randomized(log, n_resamples=1)


def test_randomized_sessions_compare_each_position_with_position_1_of_the_lists_that_reach_it():
    """Lists of 3 and 6 items, the short lists' top items the more relevant: position 1's click rate
    over every session would mix them in, and positions 4-6 (shown only in the long lists) came out at a
    tenth of their examination."""
    labels, qid, scores = [], [], []
    for q in range(20):
        n, top = (3, 4.0) if q % 2 else (6, 1.0)
        labels += [top] + [0.0] * (n - 1)
        qid += [f"q{q}"] * n
        scores += list(range(n, 0, -1))
    data = RankingData.from_arrays(np.zeros((len(labels), 2)), np.array(labels, np.float32), np.array(qid))
    model = PositionBasedModel(eta=1.0, eps_minus=0.0)
    made = simulate_clicks(
        data, np.array(scores, float), model, sessions=40_000, top_k=6, randomize="swap", seed=0
    )
    props = from_randomized(made.log, original_positions=made.original_positions, n_resamples=200, seed=0)
    curve = 1.0 / np.arange(1, 7)
    np.testing.assert_allclose(props.values, curve, atol=0.03)
    assert _covers(props, curve).sum() >= 5
