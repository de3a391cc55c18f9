"""The one propensity arithmetic (``ctxrank._propensity``) and its users agree: LambdaMART's IPS weights,
``train.debias``'s propensity table, the estimators' ``Propensities`` and the simulator's PBM."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ctxrank._propensity import capped_inverse, curve, is_clip, is_eta, is_probability, pairwise_item_weights
from ctxrank.baselines.lambdamart import ips_weights
from ctxrank.clicks.click_models import PositionBasedModel
from ctxrank.clicks.propensity import Propensities
from ctxrank.clicks.weighting import propensity_table
from ctxrank.data.ranking_data import RankingData


@pytest.mark.parametrize("eta", [0.5, 1.0, 2.0])
def test_every_user_has_the_same_position_based_curve(eta):
    expected = (1.0 / np.arange(1, 7)) ** eta
    np.testing.assert_array_equal(curve(None, eta, 6), expected)
    np.testing.assert_array_equal(propensity_table((), eta, 6), expected)
    np.testing.assert_array_equal(Propensities.pbm(eta, 6).values, expected)
    np.testing.assert_array_equal(PositionBasedModel(eta=eta).examination(6), expected)
    np.testing.assert_array_equal(curve([1.0, 0.5], None, 6), [1.0, 0.5])  # values: as given


def test_capped_inverse_caps_and_never_warns_on_a_zero_propensity():
    p = np.array([1.0, 0.5, 0.01, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(capped_inverse(p, 10.0), [1.0, 2.0, 10.0, 10.0])
        np.testing.assert_array_equal(capped_inverse(p, None), [1.0, 2.0, 100.0, np.inf])
    np.testing.assert_array_equal(
        Propensities.given([1.0, 0.5, 0.0]).weights(np.array([3, 2]), clip=4), [4, 2]
    )


def test_lambdamart_weights_are_the_shared_pairwise_weights_of_the_capped_inverse():
    rng = np.random.default_rng(0)
    position = np.tile(np.arange(1, 6), 4)
    clicks = (rng.random(20) < 0.4).astype(np.float32)
    log = RankingData.from_arrays(
        np.zeros((20, 1), np.float32), clicks, np.repeat(list("abcd"), 5), position=position
    )
    p = curve(None, 1.0, 5)
    expected = pairwise_item_weights(capped_inverse(p[position - 1], 3.0), clicks > 0, log.query_lengths)
    np.testing.assert_array_equal(ips_weights(log, 1.0, clip=3.0), expected)
    np.testing.assert_array_equal(ips_weights(log, list(p), clip=3.0), expected)
    assert expected.mean() == pytest.approx(1.0)


def test_the_predicates_refuse_bools_and_non_finite_values():
    assert is_probability(1) and is_probability(np.float32(0.5)) and not is_probability(True)
    assert not any(is_probability(p) for p in (0.0, 1.5, float("nan"), "0.5"))
    assert is_eta(2) and not any(is_eta(e) for e in (0, -1, float("inf"), True, None))
    assert is_clip(1) and not any(is_clip(c) for c in (0.5, float("inf"), float("nan"), True, "10"))
