"""Tests of ctxrank.metrics: hand formulas, invariants, pytrec_eval oracle, LETOR script rules."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrank.metrics import (
    CONVENTIONS,
    METRIC_ALIASES,
    METRICS,
    MetricConvention,
    average_precision,
    dcg,
    err,
    evaluate_queries,
    format_metric,
    mean_metrics,
    mean_ndcg,
    metric_convention,
    ndcg,
    parse_metric,
    precision,
    recall,
    reciprocal_rank,
)

F64 = torch.float64
log2 = math.log2


def t(rows, dtype=F64):
    return torch.tensor(rows, dtype=dtype)


def full_mask(x):
    return torch.ones(x.shape, dtype=torch.bool)


# The running example: labels [2, 0, 1], scores [.1, .9, .5] -> ranked labels [0, 1, 2].
S = t([[0.1, 0.9, 0.5]])
Y = t([[2.0, 0.0, 1.0]])
M = full_mask(S)


def val(x):
    assert x.shape == (1,)
    return float(x[0])


# ----------------------------------------------------------------------------------------------------
# Hand formulas, standard convention
# ----------------------------------------------------------------------------------------------------


def test_dcg_hand():
    assert val(dcg(S, Y, M)) == pytest.approx(0 / log2(2) + 1 / log2(3) + 3 / log2(4), abs=1e-12)
    assert val(dcg(S, Y, M, gain="linear")) == pytest.approx(0 + 1 / log2(3) + 2 / log2(4), abs=1e-12)
    assert val(dcg(S, Y, M, k=2)) == pytest.approx(1 / log2(3), abs=1e-12)
    assert val(dcg(S, Y, M, k=1)) == 0.0
    assert val(dcg(S, Y, M, k=50)) == pytest.approx(val(dcg(S, Y, M)), abs=1e-15)


def test_ndcg_hand():
    ideal = 3 / log2(2) + 1 / log2(3)
    assert val(ndcg(S, Y, M)) == pytest.approx((1 / log2(3) + 3 / log2(4)) / ideal, abs=1e-12)
    assert val(ndcg(S, Y, M, k=2)) == pytest.approx((1 / log2(3)) / ideal, abs=1e-12)
    assert val(ndcg(S, Y, M, k=1)) == 0.0
    # k beyond the list = whole list (standard)
    assert val(ndcg(S, Y, M, k=10)) == pytest.approx(val(ndcg(S, Y, M)), abs=1e-15)
    lin_ideal = 2 + 1 / log2(3)
    assert val(ndcg(S, Y, M, gain="linear")) == pytest.approx((1 / log2(3) + 2 / 2) / lin_ideal, abs=1e-12)


def test_ndcg_ideal_labels_from_truncated_list():
    # The query has labels [2, 0, 1, 2]; only the first two items reached the re-ranker.
    s, y, m = t([[0.3, 0.7]]), t([[2.0, 0.0]]), torch.ones(1, 2, dtype=torch.bool)
    ideal_y = t([[2.0, 0.0, 1.0, 2.0]])
    dcg2 = 0 / log2(2) + 3 / log2(3)
    idcg2 = 3 / log2(2) + 3 / log2(3)
    got = ndcg(s, y, m, k=2, ideal_labels=ideal_y)
    assert val(got) == pytest.approx(dcg2 / idcg2, abs=1e-12)
    # Without ideal_labels the ideal is the truncated list itself.
    assert val(ndcg(s, y, m, k=2)) == pytest.approx(dcg2 / (3 + 0), abs=1e-12)
    # AP: 1 relevant retrieved at rank 2, 3 relevant in the query.
    assert val(average_precision(s, y, m, ideal_labels=ideal_y)) == pytest.approx((1 / 2) / 3, abs=1e-12)
    # P@2 standard divides by min(k, query length) = 2
    assert val(precision(s, y, m, k=2, ideal_labels=ideal_y)) == pytest.approx(0.5)
    # ideal_mask hides the padded tail of ideal_labels
    ideal_pad = t([[2.0, 0.0, 1.0, 2.0, 7.0]])
    ideal_m = torch.tensor([[True, True, True, True, False]])
    got2 = ndcg(s, y, m, k=2, ideal_labels=ideal_pad, ideal_mask=ideal_m)
    assert val(got2) == pytest.approx(dcg2 / idcg2, abs=1e-12)


def test_precision_hand():
    assert val(precision(S, Y, M, k=1)) == 0.0
    assert val(precision(S, Y, M, k=2)) == pytest.approx(1 / 2)
    assert val(precision(S, Y, M, k=3)) == pytest.approx(2 / 3)
    # standard: divide by min(k, n) = 3
    assert val(precision(S, Y, M, k=5)) == pytest.approx(2 / 3)
    assert val(precision(S, Y, M, k=3, threshold=2.0)) == pytest.approx(1 / 3)


def test_average_precision_hand():
    # relevant (>= 1) at ranks 2 and 3
    assert val(average_precision(S, Y, M)) == pytest.approx((1 / 2 + 2 / 3) / 2, abs=1e-12)
    # eq. 8 with raw labels: y = [0, 1, 2] by rank; w_2 = 1/2, w_3 = (1 + 2)/3
    graded = ((1 / 2) * 1 + (3 / 3) * 2) / (0 + 1 + 2)
    assert val(average_precision(S, Y, M, graded=True)) == pytest.approx(graded, abs=1e-12)
    # AP@2: only the rank-2 hit counts, denominator stays 2 relevant
    assert val(average_precision(S, Y, M, k=2)) == pytest.approx((1 / 2) / 2, abs=1e-12)
    assert val(average_precision(S, Y, M, threshold=2.0)) == pytest.approx((1 / 3) / 1, abs=1e-12)


def test_reciprocal_rank_hand():
    assert val(reciprocal_rank(S, Y, M)) == pytest.approx(1 / 2)
    assert val(reciprocal_rank(S, Y, M, threshold=2.0)) == pytest.approx(1 / 3)
    assert val(reciprocal_rank(S, Y, M, k=1)) == 0.0


def test_err_hand():
    # ranked labels [0, 1, 2]; R = (2^y - 1) / 2^max
    r = [0, 1 / 4, 3 / 4]
    expect = r[0] / 1 + (1 - r[0]) * r[1] / 2 + (1 - r[0]) * (1 - r[1]) * r[2] / 3
    assert val(err(S, Y, M)) == pytest.approx(expect, abs=1e-12)
    r4 = [0, 1 / 16, 3 / 16]
    expect4 = r4[1] / 2 + (1 - r4[1]) * r4[2] / 3
    assert val(err(S, Y, M, max_label=4)) == pytest.approx(expect4, abs=1e-12)
    assert val(err(S, Y, M, k=2)) == pytest.approx(r[1] / 2, abs=1e-12)
    with pytest.raises(ValueError, match="max_label"):
        err(S, Y, M, max_label=1)


def test_err_default_max_label_is_batch_max():
    s = t([[0.1, 0.9, 0.5], [0.2, 0.1, 0.0]])
    y = t([[2.0, 0.0, 1.0], [4.0, 0.0, 0.0]])
    m = full_mask(s)
    batched = err(s, y, m)
    assert float(batched[0]) == pytest.approx(val(err(s[:1], y[:1], m[:1], max_label=4)), abs=1e-12)
    assert float(batched[1]) == pytest.approx(15 / 16, abs=1e-12)


def test_ties_are_stable_by_position():
    s = t([[0.5, 0.5, 0.5, 0.5]])
    m = full_mask(s)
    assert val(reciprocal_rank(s, t([[0.0, 1.0, 0.0, 0.0]]), m)) == pytest.approx(1 / 2)
    assert val(reciprocal_rank(s, t([[0.0, 0.0, 0.0, 1.0]]), m)) == pytest.approx(1 / 4)
    assert val(reciprocal_rank(s, t([[1.0, 0.0, 0.0, 1.0]]), m)) == 1.0
    # partial ties: [.9, .5, .5] -> item 0, then 1 before 2
    s2, y2 = t([[0.5, 0.9, 0.5]]), t([[0.0, 0.0, 1.0]])
    assert val(reciprocal_rank(s2, y2, full_mask(s2))) == pytest.approx(1 / 3)
    assert val(dcg(s2, y2, full_mask(s2))) == pytest.approx(1 / log2(4), abs=1e-12)
    # long tied list: the stable order must hold beyond small-sort sizes
    n = 3000
    s3 = torch.zeros(1, n, dtype=F64)
    y3 = torch.zeros(1, n, dtype=F64)
    y3[0, 1234] = 1.0
    assert val(reciprocal_rank(s3, y3, full_mask(s3))) == pytest.approx(1 / 1235)


def test_huge_and_infinite_scores():
    s = t([[1e30, -1e30, 0.0, math.inf, -math.inf]])
    y = t([[1.0, 2.0, 0.0, 0.0, 1.0]])
    m = full_mask(s)
    # ranking: inf(0), 1e30(1), 0(0), -1e30(2), -inf(1)
    expect = 0 + 1 / log2(3) + 0 + 3 / log2(5) + 1 / log2(6)
    assert val(dcg(s, y, m)) == pytest.approx(expect, abs=1e-12)
    for name, fn in METRICS.items():
        kw = {"k": 3} if name in NEEDS_K else {}
        assert torch.isfinite(fn(s, y, m, **kw)).all(), name


def test_float32_and_integer_labels():
    s32, y32 = S.float(), Y.float()
    assert ndcg(s32, y32, M).dtype == torch.float32
    assert val(ndcg(s32, y32, M)) == pytest.approx(val(ndcg(S, Y, M)), abs=1e-6)
    yi = Y.long()
    assert val(ndcg(S, yi, M)) == pytest.approx(val(ndcg(S, Y, M)), abs=1e-6)
    assert val(average_precision(S, yi, M)) == pytest.approx(val(average_precision(S, Y, M)), abs=1e-6)


# ----------------------------------------------------------------------------------------------------
# Hand formulas, LETOR presets
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("conv", ["letor4", "letor3"])
def test_letor_ndcg_hand(conv):
    # ranked labels [0, 1, 2]; gains {0:0, 1:1, 2:3}; ranks 1, 2 undiscounted, rank 3 / log2(3)
    ideal = [3, 1, 0]
    dcg_l = [0, 0 + 1, 0 + 1 + 3 / log2(3)]
    idcg_l = [3, 3 + 1, 3 + 1 + 0]
    for k in (1, 2, 3):
        assert val(ndcg(S, Y, M, k=k, convention=conv)) == pytest.approx(
            dcg_l[k - 1] / idcg_l[k - 1], abs=1e-12
        )
    assert val(ndcg(S, Y, M, convention=conv)) == pytest.approx(dcg_l[2] / sum(ideal), abs=1e-12)
    # query shorter than k: NDCG@k = 0 (both scripts)
    assert val(ndcg(S, Y, M, k=4, convention=conv)) == 0.0
    assert val(ndcg(S, Y, M, k=10, convention=conv)) == 0.0
    assert val(dcg(S, Y, M, convention=conv)) == pytest.approx(dcg_l[2], abs=1e-12)


def test_letor_rank_two_is_undiscounted():
    s = t([[0.9, 0.8, 0.7, 0.6]])
    y = t([[0.0, 1.0, 0.0, 0.0]])
    m = full_mask(s)
    assert val(dcg(s, y, m, convention="letor4")) == 1.0
    assert val(dcg(s, y, m)) == pytest.approx(1 / log2(3))
    y4 = t([[0.0, 0.0, 0.0, 2.0]])
    assert val(dcg(s, y4, m, convention="letor4")) == pytest.approx(3 / log2(4))
    assert val(dcg(s, y4, m)) == pytest.approx(3 / log2(5))


def test_letor_precision_hand():
    # n = 3 with 2 relevant
    assert val(precision(S, Y, M, k=3, convention="letor4")) == pytest.approx(2 / 3)
    assert val(precision(S, Y, M, k=5, convention="letor4")) == pytest.approx(2 / 5)  # holes irrelevant
    assert val(precision(S, Y, M, k=3, convention="letor3")) == pytest.approx(2 / 3)
    assert val(precision(S, Y, M, k=5, convention="letor3")) == 0.0  # absent from the script's array
    assert val(precision(S, Y, M, k=5)) == pytest.approx(2 / 3)  # standard for contrast


@pytest.mark.parametrize("conv", ["letor4", "letor3"])
def test_letor_map_and_no_relevant(conv):
    assert val(average_precision(S, Y, M, convention=conv)) == pytest.approx((1 / 2 + 2 / 3) / 2)
    y0 = torch.zeros_like(Y)
    for fn, kw in ((ndcg, {"k": 2}), (average_precision, {}), (precision, {"k": 2}), (reciprocal_rank, {})):
        assert val(fn(S, y0, M, convention=conv, **kw)) == 0.0
        # the query stays in the mean
        two = fn(
            torch.cat([S, S]), torch.cat([Y, y0]), torch.cat([M, M]), convention=conv, reduction="mean", **kw
        )
        assert float(two) == pytest.approx(val(fn(S, Y, M, convention=conv, **kw)) / 2)


@pytest.mark.parametrize("conv", ["letor4", "letor3"])
def test_letor_rejects_what_the_script_fixes(conv):
    with pytest.raises(ValueError, match="gain"):
        ndcg(S, Y, M, gain="linear", convention=conv)
    with pytest.raises(ValueError, match="no_relevant"):
        ndcg(S, Y, M, no_relevant="skip", convention=conv)
    with pytest.raises(ValueError, match="threshold"):
        precision(S, Y, M, k=1, threshold=2.0, convention=conv)
    with pytest.raises(ValueError, match="labels"):
        ndcg(S, Y + 1, M, convention=conv)
    with pytest.raises(ValueError, match="labels"):
        average_precision(S, Y * 0.5, M, convention=conv)
    # labels outside {0,1,2} on padding are fine
    s, y, m = t([[0.1, 0.2]]), t([[1.0, 9.0]]), torch.tensor([[True, False]])
    assert val(ndcg(s, y, m, convention=conv)) == 1.0


# A loop-by-loop transcription of the LETOR scripts' rules (module docstring, items 1-9), used as a
# reference on random lists. Not the scripts' code: the per-query value the scripts' averages imply.
def _letor_reference(scores, labels, conv, k):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # Python's sort is stable
    rates = [int(labels[i]) for i in order]
    n = len(rates)
    gain = {0: 0, 1: 1, 2: 3}
    rel = {0: 0, 1: 1, 2: 1}

    def dcg_arr(rs, top):
        out, acc = [], 0.0
        for pos in range(top):
            r = rs[pos] if pos < len(rs) else 0
            acc += gain[r] if pos < 2 else gain[r] * math.log(2.0) / math.log(pos + 1.0)
            out.append(acc)
        return out

    # MAP
    num, ap = 0, 0.0
    for pos, r in enumerate(rates):
        if rel[r]:
            num += 1
            ap += num / (pos + 1)
    ap = ap / num if num else 0.0
    # P@k
    if conv == "letor4" or n >= k:
        p = sum(rel[r] for r in rates[:k]) / k
    else:
        p = 0.0
    # NDCG@k
    if n < k:
        nd = 0.0
    else:
        d = dcg_arr(rates, n)
        best = dcg_arr(sorted(rates, key=lambda r: -gain[r]), n)
        nd = d[k - 1] / best[k - 1] if best[k - 1] != 0 else 0.0
    return nd, p, ap


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), conv=st.sampled_from(["letor4", "letor3"]), k=st.integers(1, 12))
def test_letor_matches_script_rules_on_random_lists(seed, conv, k):
    rng = np.random.default_rng(seed)
    B, L = 40, 15
    lengths = rng.integers(0, L + 1, size=B)
    scores = rng.integers(0, 4, size=(B, L)).astype(np.float64)  # many ties
    labels = rng.integers(0, 3, size=(B, L)).astype(np.float64)
    mask = np.arange(L)[None, :] < lengths[:, None]
    s, y, m = torch.from_numpy(scores), torch.from_numpy(labels * mask), torch.from_numpy(mask)
    got_nd = ndcg(s, y, m, k=k, convention=conv).numpy()
    got_p = precision(s, y, m, k=k, convention=conv).numpy()
    got_ap = average_precision(s, y, m, convention=conv).numpy()
    for b in range(B):
        n = int(lengths[b])
        nd, p, ap = _letor_reference(list(scores[b, :n]), list(labels[b, :n]), conv, k)
        assert got_nd[b] == pytest.approx(nd, abs=1e-12)
        assert got_p[b] == pytest.approx(p, abs=1e-12)
        assert got_ap[b] == pytest.approx(ap, abs=1e-12)


# LETOR 4.0 MeanNDCG, computed independently: a transcription of Eval-Score-4.0.pl's EvalQuery / NDCG /
# DCG for one query (module docstring, items 1-4 and 10), with plain Python lists.
def _letor4_mean_ndcg_reference(scores, labels, k=None):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties keep file order
    rates = [int(labels[i]) for i in order]
    gain = {0: 0, 1: 1, 2: 3}

    def dcg_arr(rs):  # sub DCG with $topN = n
        out = [gain[rs[0]]]
        for pos in range(1, len(rs)):
            step = gain[rs[pos]] if pos < 2 else gain[rs[pos]] * math.log(2.0) / math.log(pos + 1.0)
            out.append(out[-1] + step)
        return out

    if not rates:
        return 0.0
    d, best = dcg_arr(rates), dcg_arr(sorted(rates, key=lambda r: -gain[r]))
    per_position = [d[i] / best[i] if best[i] != 0 else 0.0 for i in range(len(rates))]  # sub NDCG
    m = len(rates) if k is None else min(k, len(rates))
    return sum(per_position[:m]) / m


def test_mean_ndcg_hand():
    # running example: ranked labels [0, 1, 2], ideal [2, 1, 0]; gains 0, 1, 3; LETOR discount 1, 1, 1/log2(3)
    nd1, nd2, nd3 = 0 / 3, 1 / 4, (1 + 3 / log2(3)) / 4
    assert val(mean_ndcg(S, Y, M, convention="letor4")) == pytest.approx((nd1 + nd2 + nd3) / 3)
    assert val(mean_ndcg(S, Y, M, k=2, convention="letor4")) == pytest.approx((nd1 + nd2) / 2)
    assert val(mean_ndcg(S, Y, M, k=99, convention="letor4")) == pytest.approx((nd1 + nd2 + nd3) / 3)
    # standard discount 1/log2(1 + r), gain 2^y - 1
    s1, s2 = 0.0, (1 / log2(3)) / (3 + 1 / log2(3))
    s3 = (1 / log2(3) + 3 / 2) / (3 + 1 / log2(3))
    assert val(mean_ndcg(S, Y, M)) == pytest.approx((s1 + s2 + s3) / 3)
    # the mean over positions is not NDCG of the whole list
    assert val(mean_ndcg(S, Y, M, convention="letor4")) != pytest.approx(
        val(ndcg(S, Y, M, convention="letor4"))
    )
    # a query without relevant item: 0 (LETOR), or the no_relevant policy (standard)
    z = t([[0.0, 0.0]])
    assert val(mean_ndcg(z, z, full_mask(z), convention="letor4")) == 0.0
    assert val(mean_ndcg(z, z, full_mask(z), no_relevant=1.0)) == 1.0
    assert math.isnan(val(mean_ndcg(z, z, full_mask(z), no_relevant="skip")))
    with pytest.raises(ValueError, match="labels"):
        mean_ndcg(S, Y + 1, M, convention="letor4")


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), k=st.sampled_from([None, 1, 3, 12]))
def test_mean_ndcg_matches_script_rules_on_random_lists(seed, k):
    rng = np.random.default_rng(seed)
    B, L = 40, 15
    lengths = rng.integers(0, L + 1, size=B)
    scores = rng.integers(0, 4, size=(B, L)).astype(np.float64)  # many ties
    labels = rng.integers(0, 3, size=(B, L)).astype(np.float64)
    mask = np.arange(L)[None, :] < lengths[:, None]
    s, y, m = torch.from_numpy(scores), torch.from_numpy(labels * mask), torch.from_numpy(mask)
    for conv in ("letor4", "letor3"):
        got = mean_ndcg(s, y, m, k=k, convention=conv).numpy()
        for b in range(B):
            n = int(lengths[b])
            expect = _letor4_mean_ndcg_reference(list(scores[b, :n]), list(labels[b, :n]), k)
            assert got[b] == pytest.approx(expect, abs=1e-12)
    # and through evaluate_queries (file order, chunks), whose mean is the script's "Average" MeanNDCG
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat_s, flat_y = scores[mask], labels[mask]
    name = "meanndcg" if k is None else f"meanndcg@{k}"
    out = evaluate_queries(flat_s, flat_y, offsets, (name,), convention="letor4", max_chunk_elements=40)
    key = format_metric("mean_ndcg", k)
    expect = [
        _letor4_mean_ndcg_reference(list(scores[b, : lengths[b]]), list(labels[b, : lengths[b]]), k)
        for b in range(B)
    ]
    np.testing.assert_allclose(out[key], expect, rtol=0, atol=1e-12)
    assert mean_metrics(out)[key] == pytest.approx(sum(expect) / B, abs=1e-12)


# ----------------------------------------------------------------------------------------------------
# no_relevant, empty lists, errors
# ----------------------------------------------------------------------------------------------------

NEEDS_K = ("p", "recall")
NO_K = ("loglik",)  # the choice log-likelihood takes no cutoff
NO_REL_METRICS = [
    ("ndcg", ndcg, {"k": 3}),
    ("p", precision, {"k": 2}),
    ("map", average_precision, {}),
    ("mrr", reciprocal_rank, {}),
    ("err", err, {}),
]


@pytest.mark.parametrize(("name", "fn", "kw"), NO_REL_METRICS, ids=[x[0] for x in NO_REL_METRICS])
def test_no_relevant_policies(name, fn, kw):
    s = t([[0.1, 0.9, 0.5], [0.3, 0.2, 0.1]])
    y = t([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    m = full_mask(s)
    base = fn(s, y, m, **kw)
    assert float(base[1]) == 0.0
    one = fn(s, y, m, no_relevant=1.0, **kw)
    assert float(one[1]) == 1.0 and float(one[0]) == float(base[0])
    skip = fn(s, y, m, no_relevant="skip", **kw)
    assert math.isnan(float(skip[1])) and float(skip[0]) == float(base[0])
    assert float(fn(s, y, m, no_relevant="skip", reduction="mean", **kw)) == pytest.approx(float(base[0]))
    assert float(fn(s, y, m, reduction="mean", **kw)) == pytest.approx(float(base[0]) / 2)
    assert float(fn(s, y, m, no_relevant=1.0, reduction="mean", **kw)) == pytest.approx(
        (float(base[0]) + 1) / 2
    )
    # every list skipped: the mean of nothing is NaN
    assert math.isnan(float(fn(s[1:], y[1:], m[1:], no_relevant="skip", reduction="mean", **kw)))


@pytest.mark.parametrize("name", sorted(METRICS))
@pytest.mark.parametrize("conv", CONVENTIONS)
def test_all_masked_list_is_finite(name, conv):
    fn = METRICS[name]
    kw = {"k": 3} if name in NEEDS_K else {}
    s = t([[0.3, 0.2, 0.1], [5.0, -1.0, 2.0]])
    y = t([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0]])
    m = torch.tensor([[True, True, False], [False, False, False]])
    out = fn(s, y, m, convention=conv, **kw)
    assert torch.isfinite(out).all()
    assert float(out[1]) == 0.0
    if name != "dcg" and conv == "standard":
        assert float(fn(s, y, m, no_relevant=1.0, **kw)[1]) == 1.0
    # zero-length lists and an empty batch
    e = torch.zeros(2, 0, dtype=F64)
    assert torch.equal(fn(e, e, e.bool(), convention=conv, **kw), torch.zeros(2, dtype=F64))
    z = torch.zeros(0, 3, dtype=F64)
    assert fn(z, z, z.bool(), convention=conv, **kw).shape == (0,)


def test_single_item_lists():
    s, y, m = t([[0.4], [0.1]]), t([[1.0], [0.0]]), torch.ones(2, 1, dtype=torch.bool)
    assert ndcg(s, y, m).tolist() == [1.0, 0.0]
    assert precision(s, y, m, k=5).tolist() == [1.0, 0.0]
    assert average_precision(s, y, m).tolist() == [1.0, 0.0]
    assert reciprocal_rank(s, y, m).tolist() == [1.0, 0.0]
    assert err(s, y, m).tolist() == [0.5, 0.0]  # R = (2^1 - 1) / 2^1
    assert err(s, y, m, max_label=0.0 + 1).tolist() == [0.5, 0.0]


def test_nan_input_is_not_hidden():
    s = t([[0.1, math.nan, 0.5], [0.1, 0.2, math.nan]])
    y = t([[2.0, 0.0, 1.0], [1.0, 0.0, 7.0]])
    m = torch.tensor([[True, True, True], [True, True, False]])  # NaN on padding is ignored
    for name, fn in METRICS.items():
        kw = {"k": 2} if name in NEEDS_K else {}
        out = fn(s, y, m, **kw)
        assert math.isnan(float(out[0])), name
        assert math.isfinite(float(out[1])), name
        assert math.isnan(float(fn(s, y, m, reduction="mean", **kw))), name
    y_nan = t([[math.nan, 0.0, 1.0]])
    assert math.isnan(val(ndcg(S, y_nan, M)))


@pytest.mark.parametrize("name", sorted(METRICS))
def test_bad_arguments(name):
    fn = METRICS[name]
    for k in (0, -1):
        with pytest.raises(ValueError, match="k must be >= 1"):
            fn(S, Y, M, k=k)
    with pytest.raises(TypeError, match="k must be an int"):
        fn(S, Y, M, k=2.5)
    kw = {} if name in NO_K else {"k": 2}
    if name in NO_K:
        with pytest.raises(ValueError, match="takes no cutoff"):
            fn(S, Y, M, k=2)
    with pytest.raises(TypeError, match="mask must be a bool"):
        fn(S, Y, M.float(), **kw)
    with pytest.raises(ValueError, match="same shape"):
        fn(S, Y[:, :2], M, **kw)
    with pytest.raises(ValueError, match="reduction"):
        fn(S, Y, M, reduction="sum", **kw)
    with pytest.raises(ValueError, match="convention must be one of"):
        fn(S, Y, M, convention="letor5", **kw)


def test_precision_needs_k_and_bad_options():
    with pytest.raises(ValueError, match="cutoff"):
        precision(S, Y, M, k=None)
    with pytest.raises(ValueError, match="no_relevant"):
        ndcg(S, Y, M, no_relevant=0.5)
    with pytest.raises(ValueError, match="gain"):
        dcg(S, Y, M, gain="exp")
    with pytest.raises(ValueError, match="ideal_labels"):
        ndcg(S, Y, M, ideal_labels=t([[1.0], [2.0]]))


# ----------------------------------------------------------------------------------------------------
# Invariants over the registry
# ----------------------------------------------------------------------------------------------------


def _random_batch(seed, B=12, L=20, max_label=4, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, L + 1, (B,), generator=g)
    mask = torch.arange(L)[None, :] < lengths[:, None]
    scores = torch.rand(B, L, generator=g, dtype=dtype)  # tie-free with probability 1
    labels = torch.randint(0, max_label + 1, (B, L), generator=g).to(dtype) * mask
    return scores * mask, labels, mask


def _call(name, fn, s, y, m, conv, k):
    kw = {"convention": conv}
    if name == "err":
        kw["max_label"] = 2  # batch-independent
    if name in NEEDS_K or k is not None:
        kw["k"] = k or 5
    return fn(s, y, m, **kw)


CASES = [(n, c, k) for n in sorted(METRICS) for c in CONVENTIONS for k in (None, 3) if not (n in NO_K and k)]


@pytest.mark.parametrize(("name", "conv", "k"), CASES)
def test_permutation_invariance(name, conv, k):
    fn = METRICS[name]
    s, y, m = _random_batch(1, max_label=2)
    g = torch.Generator().manual_seed(2)
    perm = torch.stack([torch.randperm(s.shape[1], generator=g) for _ in range(s.shape[0])])
    ps, py, pm = (torch.gather(x, 1, perm) for x in (s, y, m))
    torch.testing.assert_close(_call(name, fn, s, y, m, conv, k), _call(name, fn, ps, py, pm, conv, k))


@pytest.mark.parametrize(("name", "conv", "k"), CASES)
def test_padding_invariance(name, conv, k):
    fn = METRICS[name]
    s, y, m = _random_batch(3, max_label=2)
    B, L = s.shape
    extra = 7
    g = torch.Generator().manual_seed(4)
    # interleave padding at random positions, with arbitrary scores and labels
    junk_s = torch.randn(B, extra, generator=g, dtype=F64) * 1e6
    junk_s[0, 0] = math.nan
    junk_s[1, 0] = math.inf
    junk_y = torch.randint(0, 50, (B, extra), generator=g).to(F64)
    big_s, big_y = torch.cat([s, junk_s], 1), torch.cat([y, junk_y], 1)
    big_m = torch.cat([m, torch.zeros(B, extra, dtype=torch.bool)], 1)
    perm = torch.stack([torch.randperm(L + extra, generator=g) for _ in range(B)])
    big_s, big_y, big_m = (torch.gather(x, 1, perm) for x in (big_s, big_y, big_m))
    # the padded version keeps the relative order of real items, so ties (none here) would not move
    torch.testing.assert_close(
        _call(name, fn, s, y, m, conv, k), _call(name, fn, big_s, big_y, big_m, conv, k)
    )


@pytest.mark.parametrize(("name", "conv", "k"), CASES)
def test_batch_equals_loop(name, conv, k):
    fn = METRICS[name]
    s, y, m = _random_batch(5, max_label=2)
    batched = _call(name, fn, s, y, m, conv, k)
    for b in range(s.shape[0]):
        n = int(m[b].sum())
        single = _call(name, fn, s[b : b + 1, :n], y[b : b + 1, :n], m[b : b + 1, :n], conv, k)
        torch.testing.assert_close(batched[b : b + 1], single)
    mean = fn(s, y, m, reduction="mean", **({"k": 5} if name in NEEDS_K else {}), convention=conv)
    torch.testing.assert_close(
        mean, fn(s, y, m, **({"k": 5} if name in NEEDS_K else {}), convention=conv).mean()
    )


def test_metrics_in_unit_range():
    s, y, m = _random_batch(7, B=50, L=30)
    for name, fn in METRICS.items():
        if name == "dcg":
            continue
        out = _call(name, fn, s, y, m, "standard", 10) if name in NEEDS_K else fn(s, y, m)
        if name in NO_K:  # a log-probability
            assert (out <= 0).all(), name
            continue
        assert ((out >= 0) & (out <= 1 + 1e-12)).all(), name
    # eq. 8 with raw labels is not bounded by 1: w_j = (sum of labels up to r_j) / r_j can exceed 1
    s2, y2 = t([[0.9, 0.1]]), t([[4.0, 1.0]])
    assert val(average_precision(s2, y2, full_mask(s2), graded=True)) == pytest.approx((4 * 4 + 2.5 * 1) / 5)
    assert val(average_precision(s2, y2, full_mask(s2))) == 1.0


def test_perfect_ranking_scores_one():
    _, y, m = _random_batch(8, B=30, L=25)
    perfect = y + 1e-3 * torch.rand(y.shape, dtype=F64)  # scores sorted like labels
    has_rel = ((y >= 1) & m).any(1)
    for conv in ("standard",):
        assert torch.allclose(
            ndcg(perfect, y, m, convention=conv)[has_rel], torch.ones(int(has_rel.sum()), dtype=F64)
        )
    assert torch.allclose(
        average_precision(perfect, y, m)[has_rel], torch.ones(int(has_rel.sum()), dtype=F64)
    )
    assert torch.allclose(reciprocal_rank(perfect, y, m)[has_rel], torch.ones(int(has_rel.sum()), dtype=F64))


# ----------------------------------------------------------------------------------------------------
# Oracle: pytrec_eval (trec_eval)
# ----------------------------------------------------------------------------------------------------

pytrec_eval = pytest.importorskip("pytrec_eval")
CUTS = (1, 3, 5, 10, 20, 100)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), zero_heavy=st.booleans())
def test_against_pytrec_eval(seed, zero_heavy):
    """100 lists per example x 10 examples = 1,000 lists, lengths 1..200, labels 0..4.

    trec_eval: ndcg_cut uses gain = label (linear) and 1/log2(1 + r); P_k divides by k; map and
    recip_rank count label >= 1 as relevant. Scores are distinct, so trec_eval's docno tie-break never acts.
    """
    rng = np.random.default_rng(seed)
    B, L = 100, 200
    lengths = rng.integers(1, L + 1, size=B)
    lengths[:5] = [1, 2, 3, 200, 7]
    mask = np.arange(L)[None, :] < lengths[:, None]
    if zero_heavy:
        labels = np.where(rng.random((B, L)) < 0.9, 0, rng.integers(1, 5, size=(B, L)))
    else:
        labels = rng.integers(0, 5, size=(B, L))
    labels = labels * mask
    scores = np.stack([rng.permutation(L) for _ in range(B)]).astype(np.float64) / L - 0.5
    qrel, run = {}, {}
    for b in range(B):
        n = int(lengths[b])
        qrel[f"q{b}"] = {f"d{i}": int(labels[b, i]) for i in range(n)}
        run[f"q{b}"] = {f"d{i}": float(scores[b, i]) for i in range(n)}
    cuts = ",".join(map(str, CUTS))
    res = pytrec_eval.RelevanceEvaluator(
        qrel, {f"ndcg_cut.{cuts}", f"P.{cuts}", f"recall.{cuts}", "map", "recip_rank", "ndcg"}
    ).evaluate(run)
    s, y, m = torch.from_numpy(scores), torch.from_numpy(labels.astype(np.float64)), torch.from_numpy(mask)
    n_items = lengths.astype(np.float64)

    def oracle(key):
        return np.array([res[f"q{b}"][key] for b in range(B)])

    np.testing.assert_allclose(ndcg(s, y, m, gain="linear").numpy(), oracle("ndcg"), atol=1e-6, rtol=0)
    np.testing.assert_allclose(average_precision(s, y, m).numpy(), oracle("map"), atol=1e-6, rtol=0)
    np.testing.assert_allclose(reciprocal_rank(s, y, m).numpy(), oracle("recip_rank"), atol=1e-6, rtol=0)
    for k in CUTS:
        np.testing.assert_allclose(
            ndcg(s, y, m, k=k, gain="linear").numpy(), oracle(f"ndcg_cut_{k}"), atol=1e-6, rtol=0
        )
        # ours (standard) divides by min(k, n); trec_eval by k
        ours_p = precision(s, y, m, k=k).numpy() * np.minimum(k, n_items) / k
        np.testing.assert_allclose(ours_p, oracle(f"P_{k}"), atol=1e-6, rtol=0)
        np.testing.assert_allclose(recall(s, y, m, k=k).numpy(), oracle(f"recall_{k}"), atol=1e-6, rtol=0)
    # exp2 gain == linear gain on the transformed labels 2^y - 1 (checked against the oracle too)
    qrel2 = {q: {d: int(2**r - 1) for d, r in docs.items()} for q, docs in qrel.items()}
    res2 = pytrec_eval.RelevanceEvaluator(qrel2, {"ndcg_cut.10"}).evaluate(run)
    np.testing.assert_allclose(
        ndcg(s, y, m, k=10).numpy(), [res2[f"q{b}"]["ndcg_cut_10"] for b in range(B)], atol=1e-6, rtol=0
    )


# ----------------------------------------------------------------------------------------------------
# Names, conventions, whole datasets
# ----------------------------------------------------------------------------------------------------


def test_parse_metric():
    assert parse_metric("ndcg@10") == ("ndcg", 10)
    assert parse_metric("NDCG@5") == ("ndcg", 5)
    assert parse_metric("map") == ("map", None)
    assert parse_metric("ap") == ("map", None)
    assert parse_metric("precision@3") == ("p", 3)
    assert parse_metric("p@1") == ("p", 1)
    assert parse_metric("mrr") == ("mrr", None)
    assert parse_metric("err@20") == ("err", 20)
    assert parse_metric("dcg") == ("dcg", None)
    assert parse_metric("recall@5") == ("recall", 5)
    assert parse_metric("MeanNDCG") == ("mean_ndcg", None) and parse_metric("mean_ndcg@5") == ("mean_ndcg", 5)
    valid = r"valid names: \['dcg', 'err', 'loglik', 'map', 'mean_ndcg', 'mrr', 'ndcg', 'p', 'recall'"
    with pytest.raises(ValueError, match=valid):
        parse_metric("hit@10")
    for bad in ("ndcg@0", "ndcg@x", "ndcg@-1", "p", "recall", "", "ndcg@10@2"):
        with pytest.raises(ValueError):
            parse_metric(bad)
    assert format_metric("ndcg", 10) == "ndcg@10" and format_metric("map", None) == "map"
    assert set(METRIC_ALIASES.values()) <= set(METRICS)


def test_metric_convention_record():
    c = metric_convention("letor4")
    d = c.to_dict()
    assert d["name"] == "letor4" and d["gain"] == "exp2" and d["threshold"] == 1.0 and d["no_relevant"] == 0.0
    assert "log2(r)" in d["discount"] and "stable" in d["tie_rule"] and "Eval-Score-4.0" in d["source"]
    assert "k" in d["k_beyond_list"]
    s = metric_convention(no_relevant="skip", gain="linear", threshold=2)
    assert s.to_dict()["no_relevant"] == "skip" and s.threshold == 2.0
    with pytest.raises(dataclasses_frozen_error()):
        c.gain = "linear"
    with pytest.raises(ValueError, match="convention must be one of"):
        MetricConvention(name="trec")


def dataclasses_frozen_error():
    import dataclasses

    return dataclasses.FrozenInstanceError


def _flat_example():
    # three queries of lengths 3, 0, 4 and 2, in file order
    scores = np.array([0.1, 0.9, 0.5, 0.3, 0.3, 0.8, 0.1, 2.0, 1.0])
    labels = np.array([2.0, 0.0, 1.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0])
    offsets = np.array([0, 3, 3, 7, 9])
    return scores, labels, offsets


def test_evaluate_queries_matches_manual():
    scores, labels, offsets = _flat_example()
    names = ("ndcg@2", "NDCG", "precision@2", "map", "mrr", "err", "dcg@3")
    out = evaluate_queries(scores, labels, offsets, names, max_label=2)
    assert list(out) == ["ndcg@2", "ndcg", "p@2", "map", "mrr", "err", "dcg@3"]
    for v in out.values():
        assert v.dtype == np.float64 and v.shape == (4,)
    # query 0 is the running example
    assert out["ndcg@2"][0] == pytest.approx((1 / log2(3)) / (3 + 1 / log2(3)))
    assert out["p@2"][0] == pytest.approx(0.5)
    assert out["map"][0] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert out["mrr"][0] == pytest.approx(0.5)
    # query 2: scores [.3, .3, .8, .1], labels [0, 1, 2, 0] -> ranked labels [2, 0, 1, 0] (tie: file order)
    assert out["ndcg"][2] == pytest.approx((3 + 1 / log2(4)) / (3 + 1 / log2(3)))
    assert out["dcg@3"][2] == pytest.approx(3 + 1 / log2(4))
    assert out["map"][2] == pytest.approx((1 + 2 / 3) / 2)
    assert out["mrr"][2] == 1.0
    # ERR uses the label scale's max grade (2) for every query
    assert out["err"][0] == pytest.approx(1 / 4 / 2 + (3 / 4) * (3 / 4) / 3)
    # empty query (1) and no-relevant query (3) give 0
    for v in out.values():
        assert v[1] == 0.0 and v[3] == 0.0
    # skip -> NaN, and mean_metrics ignores it
    skipped = evaluate_queries(scores, labels, offsets, ("map",), no_relevant="skip")
    assert np.isnan(skipped["map"][[1, 3]]).all()
    assert mean_metrics(skipped)["map"] == pytest.approx((out["map"][0] + out["map"][2]) / 2)
    assert mean_metrics(out)["mrr"] == pytest.approx((0.5 + 1.0) / 4)
    assert math.isnan(mean_metrics({"x": np.array([np.nan])})["x"])


def test_evaluate_queries_equals_batched_and_chunks():
    rng = np.random.default_rng(0)
    Q = 60
    lengths = rng.integers(0, 40, size=Q)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    N = int(offsets[-1])
    scores = rng.integers(0, 5, size=N).astype(np.float64)  # ties
    labels = rng.integers(0, 3, size=N).astype(np.float64)
    names = ("ndcg@5", "p@5", "map", "mrr", "err@10", "dcg")
    for conv in CONVENTIONS:
        whole = evaluate_queries(scores, labels, offsets, names, convention=conv, max_label=2)
        chunked = evaluate_queries(
            scores, labels, offsets, names, convention=conv, max_label=2, max_chunk_elements=50
        )
        L = int(lengths.max())
        pos = np.arange(L)[None, :]
        m = pos < lengths[:, None]
        idx = np.where(m, offsets[:-1, None] + pos, 0)
        s_t = torch.from_numpy(np.where(m, scores[idx], 0.0))
        y_t = torch.from_numpy(np.where(m, labels[idx], 0.0))
        m_t = torch.from_numpy(m)
        direct = {
            "ndcg@5": ndcg(s_t, y_t, m_t, k=5, convention=conv),
            "p@5": precision(s_t, y_t, m_t, k=5, convention=conv),
            "map": average_precision(s_t, y_t, m_t, convention=conv),
            "mrr": reciprocal_rank(s_t, y_t, m_t, convention=conv),
            "err@10": err(s_t, y_t, m_t, k=10, max_label=2, convention=conv),
            "dcg": dcg(s_t, y_t, m_t, convention=conv),
        }
        for name in names:
            np.testing.assert_allclose(whole[name], direct[name].numpy(), rtol=0, atol=1e-12)
            np.testing.assert_allclose(whole[name], chunked[name], rtol=0, atol=1e-12)


def test_evaluate_queries_bad_input():
    scores, labels, offsets = _flat_example()
    with pytest.raises(ValueError, match="valid names"):
        evaluate_queries(scores, labels, offsets, ("bogus",))
    with pytest.raises(ValueError, match="query_offsets"):
        evaluate_queries(scores, labels, np.array([0, 3, 8]))
    with pytest.raises(ValueError, match="query_offsets"):
        evaluate_queries(scores, labels, np.array([0, 5, 3, 9]))
    with pytest.raises(ValueError, match="same length"):
        evaluate_queries(scores[:-1], labels, offsets)
    out = evaluate_queries(np.zeros(0), np.zeros(0), np.array([0]), ("ndcg@10", "err"), max_label=4)
    assert out["ndcg@10"].shape == (0,)
    chunked = evaluate_queries(scores, labels, offsets, max_chunk_elements=np.int64(4))  # a NumPy integer
    assert np.array_equal(chunked["ndcg@10"], evaluate_queries(scores, labels, offsets)["ndcg@10"])
    for bad in (True, 0, 2**70):
        with pytest.raises(ValueError, match="max_chunk_elements must be"):
            evaluate_queries(scores, labels, offsets, max_chunk_elements=bad)


# ----------------------------------------------------------------------------------------------------
# Optional: the real Microsoft scripts, when the paths are given (not redistributed here).
#   CTXRANK_EVAL_SCORE_4=/path/Eval-Score-4.0.pl CTXRANK_EVAL_SCORE_3=/path/Eval-Score-3.0.pl pytest ...
# ----------------------------------------------------------------------------------------------------


def _write_letor_files(tmp_path, scores, labels, offsets):
    feat, pred = tmp_path / "test.txt", tmp_path / "pred.txt"
    with feat.open("w") as f, pred.open("w") as p:
        for q in range(len(offsets) - 1):
            for i in range(offsets[q], offsets[q + 1]):
                f.write(f"{int(labels[i])} qid:{q + 1} 1:0.5 #docid = D{q}_{i} inc = 1 prob = 0.5\n")
                p.write(f"{float(scores[i])!r}\n")
    return feat, pred


@pytest.mark.parametrize(
    ("version", "env"), [("letor4", "CTXRANK_EVAL_SCORE_4"), ("letor3", "CTXRANK_EVAL_SCORE_3")]
)
def test_against_microsoft_script(tmp_path, version, env):
    script = os.environ.get(env)
    if not script or not Path(script).is_file() or shutil.which("perl") is None:
        pytest.skip(f"set {env} to the path of the LETOR evaluation script (and have perl) to run this")
    rng = np.random.default_rng(11)
    Q = 80
    lengths = rng.integers(1, 40, size=Q)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    N = int(offsets[-1])
    scores = np.round(rng.normal(size=N), 1)  # ties
    labels = rng.integers(0, 3, size=N).astype(np.float64)
    feat, pred = _write_letor_files(tmp_path, scores, labels, offsets)
    out = tmp_path / "out.txt"
    subprocess.run(["perl", script, str(feat), str(pred), str(out), "1"], check=True, capture_output=True)
    text = out.read_text()
    names = [f"p@{k}" for k in range(1, 11)] + [f"ndcg@{k}" for k in range(1, 11)] + ["map", "mean_ndcg"]
    ours = evaluate_queries(scores, labels, offsets, names, convention=version)
    if version == "letor4":
        # per-query rows "qid\tP@1..P@10\tMAP" then "qid\tNDCG@1..NDCG@10\tMeanNDCG", 4 decimals
        rows = [line.split("\t") for line in text.splitlines() if re.match(r"^\d+\t", line)]
        p_rows, n_rows = rows[:Q], rows[Q:]
        for q in range(Q):
            got_p = [float(x) for x in p_rows[q][1:12]]
            got_n = [float(x) for x in n_rows[q][1:11]]
            for k in range(1, 11):
                assert ours[f"p@{k}"][q] == pytest.approx(got_p[k - 1], abs=5.1e-5)
                assert ours[f"ndcg@{k}"][q] == pytest.approx(got_n[k - 1], abs=5.1e-5)
            assert ours["map"][q] == pytest.approx(got_p[10], abs=5.1e-5)
            assert ours["mean_ndcg"][q] == pytest.approx(float(n_rows[q][11]), abs=5.1e-5)
        avg = [line.split("\t") for line in text.splitlines() if line.startswith("Average")]
        means = mean_metrics(ours)
        for k in range(1, 11):
            assert means[f"p@{k}"] == pytest.approx(float(avg[0][k]), abs=5.1e-5)
            assert means[f"ndcg@{k}"] == pytest.approx(float(avg[1][k]), abs=5.1e-5)
        assert means["mean_ndcg"] == pytest.approx(float(avg[1][11]), abs=5.1e-5)
    else:
        # full precision; per-query arrays have min(k_max, n) entries, the means divide by all queries
        def per_query(prefix):
            return [
                [float(x) for x in line.split("\t")[1:] if x.strip()]
                for line in text.splitlines()
                if line.startswith(prefix)
            ]

        prec, nd = per_query("precision of query"), per_query("NDCG of query")
        maps = [float(line.split("\t")[1]) for line in text.splitlines() if line.startswith("Map of query")]
        for q in range(Q):
            for k in range(1, 11):
                expect_p = prec[q][k - 1] if k <= len(prec[q]) else 0.0
                expect_n = nd[q][k - 1] if k <= len(nd[q]) else 0.0
                assert ours[f"p@{k}"][q] == pytest.approx(expect_p, abs=1e-9)
                assert ours[f"ndcg@{k}"][q] == pytest.approx(expect_n, abs=1e-9)
            assert ours["map"][q] == pytest.approx(maps[q], abs=1e-9)
        mean_line = next(line for line in text.splitlines() if line.startswith("NDCG:"))
        script_means = [float(x) for x in mean_line.split("\t")[1:] if x.strip()]
        means = mean_metrics(ours)
        for k in range(1, len(script_means) + 1):
            assert means[f"ndcg@{k}"] == pytest.approx(script_means[k - 1], abs=1e-9)


# ------------------------------------------------------------------------------- label validation
def test_labels_whose_exp2_gain_overflows_are_refused():
    offsets = np.array([0, 3, 5])
    scores = np.array([0.3, 0.2, 0.1, 1.0, 0.0])
    big = np.array([1024.0, 0.0, 1.0, 2.0, 0.0])
    for metric in ("ndcg@10", "dcg", "err"):
        with pytest.raises(
            ValueError, match=r"label 1024 at row 0 .* the largest usable label is 10\d\d\b"
        ) as exc:
            evaluate_queries(scores, big, offsets, (metric,), max_label=1023)
        assert "gain='linear'" in str(exc.value) and "--gain linear" in str(exc.value)
    # a list of 3 items with labels 1023 would sum to inf: the bound accounts for the list length
    with pytest.raises(ValueError, match=r"the largest usable label is 1022"):
        evaluate_queries(scores, np.array([1023.0, 1023, 1023, 0, 0]), offsets, ("ndcg",))
    # the linear gain has no such limit; the values are finite
    out = evaluate_queries(scores, big * 10, offsets, ("ndcg@10", "dcg"), gain="linear")
    assert all(np.isfinite(v).all() for v in out.values())
    # the batched metrics in float32 (training's validation): 2^y overflows float32 at y = 128
    s_t, y_t = torch.tensor([[0.3, 0.2]]), torch.tensor([[200.0, 1.0]])
    m_t = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"not finite in float32; the largest usable label is 126"):
        ndcg(s_t, y_t, m_t)
    with pytest.raises(ValueError, match=r"largest usable label is 127"):  # ERR does not sum gains
        err(s_t, y_t, m_t, max_label=200)
    assert torch.isfinite(ndcg(s_t, y_t, m_t, gain="linear")).all()


def test_negative_labels_are_refused_by_evaluation():
    offsets = np.array([0, 2, 4])
    labels = np.array([1.0, 0.0, 2.0, -1.0])
    for metric in ("ndcg@10", "map", "p@1", "mrr", "err", "recall@1"):
        with pytest.raises(
            ValueError,
            match=r"labels must be >= 0 \(graded relevance\), got -1 at row 3 \(query position 1\)",
        ):
            evaluate_queries(np.arange(4.0), labels, offsets, (metric,), max_label=2)
    s_t, y_t = torch.tensor([[0.3, 0.2, 0.0]]), torch.tensor([[1.0, -2.0, -5.0]])
    mask = torch.tensor([[True, True, False]])
    for fn, kw in (
        (ndcg, {}),
        (dcg, {}),
        (err, {"max_label": 2}),
        (precision, {"k": 1}),
        (average_precision, {}),
    ):
        with pytest.raises(ValueError, match=r"labels must be >= 0 \(graded relevance\), got -2$|got -2;"):
            fn(s_t, y_t, mask, **kw)
    # padding is never looked at
    assert float(ndcg(s_t, torch.tensor([[1.0, 0.0, -5.0]]), mask)) == 1.0


def test_err_max_label_is_a_recorded_convention_and_queries_are_independent():
    offsets = np.array([0, 2])
    scores, labels = np.array([1.0, 0.0]), np.array([1.0, 0.0])
    with pytest.raises(ValueError, match=r"ERR needs max_label, the largest grade of the label scale"):
        evaluate_queries(scores, labels, offsets, ("err",))
    alone = evaluate_queries(scores, labels, offsets, ("err",), max_label=4)["err"]
    # another query with a higher label in the same file does not change the first query's ERR
    more = evaluate_queries(
        np.array([1.0, 0.0, 1.0]), np.array([1.0, 0.0, 4.0]), np.array([0, 2, 3]), ("err",), max_label=4
    )["err"]
    assert more[0] == alone[0] == pytest.approx(1 / 16)
    with pytest.raises(ValueError, match=r"label 3 at row 0 \(query position 0\) is above max_label = 2"):
        evaluate_queries(np.array([1.0]), np.array([3.0]), np.array([0, 1]), ("err",), max_label=2)
    for bad in (-1, float("nan"), 1024):
        with pytest.raises(ValueError, match="max_label must lie in"):
            evaluate_queries(scores, labels, offsets, ("err",), max_label=bad)
    with pytest.raises(TypeError, match="max_label must be a number"):
        metric_convention(max_label="2")
    conv = metric_convention("letor4", max_label=2)
    assert conv.to_dict()["max_label"] == 2.0 and metric_convention().to_dict()["max_label"] is None
    from ctxrank.data.registry import get_spec

    assert get_spec("mq2008").max_label == 2 and get_spec("mslr-web10k").max_label == 4


# ------------------------------------------------------------------------------- choice metrics
def test_choice_log_likelihood_is_the_log_softmax_of_the_chosen_item():
    from ctxrank.metrics import choice_log_likelihood

    s = t([[1.0, 2.0, 3.0, 9.0], [0.5, -1.0, 0.0, 0.0]])
    y = t([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    m = torch.tensor([[True, True, True, False], [True, True, True, True]])  # the 9.0 is padding
    out = choice_log_likelihood(s, y, m)
    assert out[0].item() == pytest.approx(2.0 - math.log(math.exp(1) + math.exp(2) + math.exp(3)))
    lse = math.log(math.exp(0.5) + math.exp(-1.0) + 2.0)
    assert out[1].item() == pytest.approx(((0.5 - lse) + (0.0 - lse)) / 2)  # two chosen: their mean
    big = choice_log_likelihood(s * 1e6, y, m)  # log-softmax numerics: no overflow
    assert torch.isfinite(big).all() and big[0].item() == pytest.approx(-1e6)
    none = choice_log_likelihood(s, torch.zeros_like(y), m)  # no chosen item: no_relevant
    assert none.tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="no cutoff"):
        parse_metric("loglik@3")
    names = ["loglik", "p@1", "recall@2"]
    per = evaluate_queries([1.0, 2.0, 3.0, 0.0, 1.0], [0, 0, 1, 1, 0], [0, 3, 5], names)
    assert per["loglik"][0] == pytest.approx(3.0 - math.log(math.exp(1) + math.exp(2) + math.exp(3)))
    assert per["p@1"].tolist() == [1.0, 0.0] and per["recall@2"].tolist() == [1.0, 1.0]


def test_is_choice_data_and_the_one_over_k_bound_of_precision():
    from ctxrank.metrics import is_choice_data

    assert is_choice_data(np.array([0, 1, 0, 1, 0.0]), np.array([0, 3, 5]))
    assert not is_choice_data(np.array([0, 1, 1, 1, 0.0]), np.array([0, 3, 5]))  # two chosen
    assert not is_choice_data(np.array([0, 2, 0, 1, 0.0]), np.array([0, 3, 5]))  # graded
    # one chosen item: P@k <= 1/k, and recall@k (the hit rate) = k * P@k when every list has >= k items
    rng = np.random.default_rng(0)
    off = np.arange(0, 41, 5)
    y = np.zeros(40)
    y[off[:-1] + rng.integers(0, 5, size=8)] = 1
    per = evaluate_queries(rng.normal(size=40), y, off, ["p@3", "recall@3"])
    assert (per["p@3"] <= 1 / 3 + 1e-12).all()
    np.testing.assert_allclose(per["recall@3"], 3 * per["p@3"])
