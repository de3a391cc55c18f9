"""Tests of ctxrank.losses: registry invariants, hand formulas, brute-force oracles, Chamfer memory bound."""

from __future__ import annotations

import inspect
import itertools
import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from ctxrank import losses as losses_module
from ctxrank.losses import (
    LOSSES,
    _min_along,
    approxndcg,
    attrank,
    chamfer_block_shape,
    chamfer_confusion,
    get_loss,
    lambdaloss,
    listmle,
    listnet,
    neuralndcg,
    ranknet,
    softrank,
    softrank_rank_distribution,
)

F64 = torch.float64

# Every registered loss with its defaults, plus the other documented variants of known losses.
_VARIANTS = {
    "listnet": [{"label_transform": "identity", "temperature": 0.5}, {"label_transform": "exp2"}],
    "attrank": [{"form": "dlcm"}, {"form": "dlcm_code"}],
    "softrank": [{"k": 3, "gain": "linear", "sigma": 0.5}],
    "ranknet": [{"sigma": 2.5}],
    "lambdaloss": [{"mu": 0.0, "gain": "linear", "sigma": 0.5}],
    "approxndcg": [{"alpha": 1.0, "gain": "linear"}],
    "neuralndcg": [
        {"transposed": True},
        {"tau": 0.3, "k": 3, "gain": "linear", "sinkhorn_iters": 7},
        {"transposed": True, "k": 2, "sinkhorn_iters": 0},
    ],
}
CASES = [(name, {}) for name in LOSSES] + [
    (name, kw) for name, kws in _VARIANTS.items() if name in LOSSES for kw in kws
]
CASE_IDS = [name + "".join(f"-{k}={v}" for k, v in kw.items()) for name, kw in CASES]
cases = pytest.mark.parametrize(("name", "kw"), CASES, ids=CASE_IDS)


def call(name, scores, labels, mask, kw, **more):
    return LOSSES[name](scores, labels, mask, **kw, **more)


def batch(seed=0, B=4, L=6, dtype=F64, tie_free=False):
    """Random padded batch: each list has >= 2 real items, one relevant; padding inside and at the end."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, L, generator=g, dtype=dtype)
    if tie_free:
        labels = torch.stack([torch.randperm(L, generator=g) for _ in range(B)]).to(dtype) * (4.0 / L)
    else:
        labels = torch.randint(0, 5, (B, L), generator=g).to(dtype)
    mask = torch.rand(B, L, generator=g) > 0.25
    mask[:, :2] = True
    mask[0, -1] = False  # trailing padding
    mask[1, 2] = False  # interior padding
    labels[:, 0] = labels[:, 0].clamp(min=1.0)  # a relevant real item
    labels = torch.where(mask, labels, torch.zeros((), dtype=dtype))
    return scores, labels, mask


def grad_of(fn, scores):
    s = scores.detach().clone().requires_grad_(True)
    value = fn(s)
    (g,) = torch.autograd.grad(value.sum(), s)
    return value.detach(), g


# ----------------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------------


def test_get_loss():
    for name, fn in LOSSES.items():
        assert get_loss(name) is fn
    with pytest.raises(
        ValueError, match=r"unknown loss 'nope'; valid names: \['approxndcg', 'attrank', 'lambdaloss'"
    ):
        get_loss("nope")
    with pytest.raises(TypeError, match="loss name must be a str"):
        get_loss(None)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_common_signature(name):
    params = list(inspect.signature(LOSSES[name]).parameters.values())
    assert [p.name for p in params[:3]] == ["scores", "labels", "mask"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not p.empty for p in params[3:])
    assert inspect.signature(LOSSES[name]).parameters["reduction"].default == "mean"


# ----------------------------------------------------------------------------------------------------
# Invariants, for every registered loss
# ----------------------------------------------------------------------------------------------------


@cases
def test_padding_invariance(name, kw):
    scores, labels, mask = batch(seed=1)
    B, L = scores.shape
    base, base_grad = grad_of(lambda s: call(name, s, labels, mask, kw, reduction="none"), scores)
    # Insert 4 padded items between and after the real ones, holding arbitrary scores and labels.
    g = torch.Generator().manual_seed(7)
    total = L + 4
    pad_cols = torch.randperm(total, generator=g)[:4].sort().values
    real_cols = torch.tensor([c for c in range(total) if c not in set(pad_cols.tolist())])
    junk_s = torch.tensor([1e4, float("nan"), -float("inf"), 3.0], dtype=F64)
    junk_y = torch.tensor([4.0, float("nan"), -2.0, 1.0], dtype=F64)
    s2 = torch.empty(B, total, dtype=F64)
    y2 = torch.empty(B, total, dtype=F64)
    m2 = torch.zeros(B, total, dtype=torch.bool)
    s2[:, real_cols], y2[:, real_cols], m2[:, real_cols] = scores, labels, mask
    s2[:, pad_cols], y2[:, pad_cols] = junk_s, junk_y
    value, grad = grad_of(lambda s: call(name, s, y2, m2, kw, reduction="none"), s2)
    torch.testing.assert_close(value, base, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad[:, real_cols], base_grad, rtol=1e-10, atol=1e-12)
    assert torch.equal(grad[:, pad_cols], torch.zeros_like(grad[:, pad_cols]))
    assert torch.equal(grad[~m2], torch.zeros_like(grad[~m2]))


@cases
def test_no_relevant_and_empty_lists_give_zero(name, kw):
    scores, labels, mask = batch(seed=2, B=3)
    labels[1] = 0.0  # no relevant item
    mask[2] = False  # no real item
    labels[2] = 0.0
    value, grad = grad_of(lambda s: call(name, s, labels, mask, kw, reduction="none"), scores)
    assert torch.isfinite(value).all() and torch.isfinite(grad).all()
    assert value[0] != 0 and value[1] == 0 and value[2] == 0
    assert torch.equal(grad[1:], torch.zeros_like(grad[1:]))
    # the mean is over contributing lists only: here just list 0
    mean = call(name, scores, labels, mask, kw)
    assert mean.item() == pytest.approx(value[0].item(), rel=1e-12)


@cases
def test_empty_batch_is_finite_zero(name, kw):
    scores, labels, _ = batch(seed=3, B=2)
    for mask, y in ((torch.zeros(scores.shape, dtype=torch.bool), labels), (batch(3, B=2)[2], labels * 0)):
        for reduction in ("mean", "sum"):
            value, grad = grad_of(
                lambda s, m=mask, y=y, r=reduction: call(name, s, y, m, kw, reduction=r), scores
            )
            assert value.item() == 0.0 and torch.equal(grad, torch.zeros_like(grad))


@cases
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_extreme_scores_are_finite(name, kw, dtype):
    scores, labels, mask = batch(seed=4, B=6, L=8, dtype=dtype)
    g = torch.Generator().manual_seed(4)
    signs = torch.where(torch.rand(scores.shape, generator=g) > 0.5, 1.0, -1.0).to(dtype)
    extreme = signs * 1e4
    extreme[0, :3] = torch.tensor([1e4, 1e4, -1e4], dtype=dtype)  # ties at the extremes
    labels[1] = torch.tensor([4.0, 0, 0, 0, 0, 0, 0, 4.0], dtype=dtype) * mask[1]
    for s in (extreme, extreme * 0 + 1e4, -extreme):
        value, grad = grad_of(lambda x: call(name, x, labels, mask, kw, reduction="none"), s)
        assert torch.isfinite(value).all(), value
        assert torch.isfinite(grad).all()


@cases
def test_gradcheck_float64(name, kw):
    scores, labels, mask = batch(seed=5, B=3, L=5)
    labels[0, 1] = labels[0, 0] + 0.5  # keep the label order of listmle free of the gradcheck perturbation
    s = scores.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: call(name, x, labels, mask, kw, reduction="sum"), (s,))


def test_gradcheck_listmle_with_generator():
    scores, labels, mask = batch(seed=6, B=3, L=5)
    s = scores.clone().requires_grad_(True)

    def fn(x):
        return listmle(x, labels, mask, generator=torch.Generator().manual_seed(0), reduction="sum")

    assert torch.autograd.gradcheck(fn, (s,))


@cases
def test_batch_equals_loop_over_lists(name, kw):
    scores, labels, mask = batch(seed=7, B=5)
    whole = call(name, scores, labels, mask, kw, reduction="none")
    singles = torch.cat(
        [
            call(name, scores[b : b + 1], labels[b : b + 1], mask[b : b + 1], kw, reduction="none")
            for b in range(scores.shape[0])
        ]
    )
    torch.testing.assert_close(whole, singles, rtol=1e-12, atol=1e-12)
    assert whole.shape == (5,)


@cases
def test_reductions_agree_with_none(name, kw):
    scores, labels, mask = batch(seed=8, B=5)
    labels[3] = 0.0  # one non-contributing list
    none = call(name, scores, labels, mask, kw, reduction="none")
    assert call(name, scores, labels, mask, kw, reduction="sum").item() == pytest.approx(none.sum().item())
    assert call(name, scores, labels, mask, kw, reduction="mean").item() == pytest.approx(
        none.sum().item() / 4
    )
    assert call(name, scores, labels, mask, kw).item() == pytest.approx(none.sum().item() / 4)


@cases
def test_permutation_invariance(name, kw):
    scores, labels, mask = batch(seed=9, B=4, L=7, tie_free=True)
    g = torch.Generator().manual_seed(9)
    perm = torch.stack([torch.randperm(7, generator=g) for _ in range(4)])
    base = call(name, scores, labels, mask, kw, reduction="none")
    permuted = call(
        name, scores.gather(1, perm), labels.gather(1, perm), mask.gather(1, perm), kw, reduction="none"
    )
    torch.testing.assert_close(permuted, base, rtol=1e-10, atol=1e-12)


@cases
def test_nan_is_never_hidden(name, kw):
    scores, labels, mask = batch(seed=10, B=3)
    scores[0, 0] = float("nan")  # contributing list
    labels[1] = 0.0
    labels[1, 1] = float("nan")  # otherwise non-contributing list
    value = call(name, scores, labels, mask, kw, reduction="none")
    assert torch.isnan(value[:2]).all() and torch.isfinite(value[2])
    assert torch.isnan(call(name, scores, labels, mask, kw))


@cases
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_single_item_lists_are_zero(name, kw, dtype):
    """A one-item list is ranked perfectly: every loss is 0 there, with a zero gradient."""
    scores = torch.tensor([[3.0, 0.0], [-2.0, 0.0], [1e4, 0.0]], dtype=dtype)
    labels = torch.tensor([[2.0, 0.0], [1.0, 5.0], [4.0, 0.0]], dtype=dtype)
    mask = torch.tensor([[True, False], [True, False], [True, False]])
    value, grad = grad_of(lambda s: call(name, s, labels, mask, kw, reduction="none"), scores)
    assert torch.isfinite(value).all() and torch.isfinite(grad).all()
    torch.testing.assert_close(value, torch.zeros_like(value), rtol=0, atol=1e-6)
    torch.testing.assert_close(grad, torch.zeros_like(grad), rtol=0, atol=1e-6)


def _linear_options(name, kw):
    """``kw`` with the linear gain / identity label transform where the loss has that option."""
    params = inspect.signature(LOSSES[name]).parameters
    out = dict(kw)
    if "gain" in params:
        out["gain"] = "linear"
    if "label_transform" in params and kw.get("label_transform") == "exp2":
        out["label_transform"] = "identity"
    return out


@cases
def test_large_labels_are_finite(name, kw):
    """Labels up to 1e3 (e.g. click counts) in float32: finite values and gradients with a linear gain."""
    scores, labels, mask = batch(seed=14, B=4, L=6, dtype=torch.float32)
    labels = labels * 250.0  # grades 0..4 -> 0..1000
    opts = _linear_options(name, kw)
    value, grad = grad_of(lambda s: call(name, s, labels, mask, opts, reduction="none"), scores)
    assert torch.isfinite(value).all(), value
    assert torch.isfinite(grad).all()


def test_new_loss_option_errors():
    s, y, m = batch(seed=15)
    with pytest.raises(ValueError, match="sigma must be a positive number"):
        ranknet(s, y, m, sigma=0.0)
    with pytest.raises(ValueError, match="mu must be a number >= 0"):
        lambdaloss(s, y, m, mu=-1.0)
    with pytest.raises(ValueError, match=r"gain must be one of \['exp2', 'linear'\]"):
        lambdaloss(s, y, m, gain="exp")
    with pytest.raises(ValueError, match="alpha must be a positive number"):
        approxndcg(s, y, m, alpha=float("inf"))
    with pytest.raises(ValueError, match="tau must be a positive number"):
        neuralndcg(s, y, m, tau=0)
    with pytest.raises(ValueError, match="sinkhorn_iters must be an integer >= 0"):
        neuralndcg(s, y, m, sinkhorn_iters=-1)
    with pytest.raises(ValueError, match="transposed must be true or false"):
        neuralndcg(s, y, m, transposed="yes")
    with pytest.raises(ValueError, match="k must be a positive integer or None"):
        neuralndcg(s, y, m, k=0)


@cases
def test_input_errors(name, kw):
    scores, labels, mask = batch(seed=11)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        call(name, scores, labels, mask.int(), kw)
    with pytest.raises(ValueError, match="same shape"):
        call(name, scores, labels[:, :-1], mask, kw)
    with pytest.raises(ValueError, match=r"reduction must be one of \['mean', 'sum', 'none'\], got 'avg'"):
        call(name, scores, labels, mask, kw, reduction="avg")
    bad = labels.clone()
    bad[0, 0] = -1.0
    with pytest.raises(ValueError, match=r"labels must be >= 0 on real items"):
        call(name, scores, bad, mask, kw)


def test_option_errors():
    s, y, m = batch(seed=12)
    with pytest.raises(ValueError, match="temperature must be a positive number"):
        listnet(s, y, m, temperature=0.0)
    with pytest.raises(ValueError, match=r"label_transform must be one of \['exp', 'identity', 'exp2'\]"):
        listnet(s, y, m, label_transform="softmax")
    with pytest.raises(ValueError, match=r"form must be one of \['qilcm', 'dlcm', 'dlcm_code'\]"):
        attrank(s, y, m, form="ai2018")
    with pytest.raises(ValueError, match="sigma must be a positive number"):
        softrank(s, y, m, sigma=-1.0)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        softrank(s, y, m, k=0)
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator"):
        listmle(s, y, m, generator=0)


# ----------------------------------------------------------------------------------------------------
# Hand formulas and brute-force oracles (plain Python math)
# ----------------------------------------------------------------------------------------------------

S3 = [0.5, -1.0, 2.0]
Y3 = [2.0, 0.0, 1.0]


def one(values):
    return torch.tensor([values], dtype=F64)


def full(n):
    return torch.ones(1, n, dtype=torch.bool)


def test_listnet_hand():
    def softmax(xs):
        z = sum(math.exp(x) for x in xs)
        return [math.exp(x) / z for x in xs]

    for transform, target in (
        ("exp", softmax(Y3)),
        ("identity", [y / sum(Y3) for y in Y3]),
        ("exp2", [(2**y - 1) / sum(2**v - 1 for v in Y3) for y in Y3]),
    ):
        for temperature in (1.0, 2.5):
            p = softmax([s / temperature for s in S3])
            expected = -sum(t * math.log(q) for t, q in zip(target, p, strict=True))
            got = listnet(one(S3), one(Y3), full(3), temperature=temperature, label_transform=transform)
            assert got.item() == pytest.approx(expected, rel=1e-12)


def plackett_luce_nll(scores, order):
    nll = 0.0
    for pos in range(len(order)):
        rest = order[pos:]
        nll -= math.log(math.exp(scores[order[pos]]) / sum(math.exp(scores[k]) for k in rest))
    return nll


def test_listmle_brute_force():
    s = [0.3, -1.2, 2.0, 0.7, 0.0]
    y = [1.0, 3.0, 0.0, 2.0, 0.5]  # tie-free; label order: 1, 3, 0, 4, 2
    order = sorted(range(5), key=lambda i: -y[i])
    assert order == [1, 3, 0, 4, 2]
    # the brute-force PL probabilities form a distribution over the 5! orders
    assert sum(math.exp(-plackett_luce_nll(s, list(p))) for p in itertools.permutations(range(5))) == (
        pytest.approx(1.0, rel=1e-12)
    )
    got = listmle(one(s), one(y), full(5))
    assert got.item() == pytest.approx(plackett_luce_nll(s, order), rel=1e-12)
    # padding in the middle and at the end
    s_pad, y_pad = [*s[:2], 9.0, *s[2:], -3.0], [*y[:2], 4.0, *y[2:], 1.0]
    m = torch.tensor([[True, True, False, True, True, True, False]])
    assert listmle(one(s_pad), one(y_pad), m).item() == pytest.approx(plackett_luce_nll(s, order), rel=1e-12)


def test_listmle_ties():
    s = [0.2, 1.5, -0.4]
    y = [1.0, 1.0, 0.0]  # items 0 and 1 tie
    by_position = plackett_luce_nll(s, [0, 1, 2])
    swapped = plackett_luce_nll(s, [1, 0, 2])
    assert listmle(one(s), one(y), full(3)).item() == pytest.approx(by_position, rel=1e-12)
    seen = set()
    for seed in range(40):
        v = listmle(one(s), one(y), full(3), generator=torch.Generator().manual_seed(seed)).item()
        assert v == pytest.approx(by_position, rel=1e-12) or v == pytest.approx(swapped, rel=1e-12)
        seen.add(round(v, 9))
        again = listmle(one(s), one(y), full(3), generator=torch.Generator().manual_seed(seed)).item()
        assert again == v
    assert len(seen) == 2


def test_attrank_hand():
    def psi(x):
        return math.exp(x) if x > 0 else 0.0

    z = sum(math.exp(v) for v in S3)
    att = [math.exp(v) / z for v in S3]
    norm = sum(psi(v) for v in Y3)
    target = [psi(v) / norm for v in Y3]
    ce = -sum(t * math.log(a) for t, a in zip(target, att, strict=True))
    two_sided = ce - sum((1 - t) * math.log(1 - a) for t, a in zip(target, att, strict=True))
    args = (one(S3), one(Y3), full(3))
    assert attrank(*args).item() == pytest.approx(ce / 3, rel=1e-12)  # QILCM eq. 12: 1/n_q
    assert attrank(*args, form="qilcm").item() == pytest.approx(ce / 3, rel=1e-12)
    assert attrank(*args, form="dlcm").item() == pytest.approx(two_sided, rel=1e-12)
    assert attrank(*args, form="dlcm_code").item() == pytest.approx(ce, rel=1e-12)


def test_attrank_dlcm_log_one_minus_is_exact_at_extremes():
    # s = softmax([1e4, 0, -1e4]) puts all mass on item 0, whose label is 0: the exact loss is
    # -log s_2 - log(1 - s_1) - log(1 - s_3) = 1e4 + 1e4 + ~0. A naive log(1 - s) gives inf here.
    s, y = one([1e4, 0.0, -1e4]), one([0.0, 4.0, 0.0])
    for dtype in (F64, torch.float32):
        value = attrank(s.to(dtype), y.to(dtype), full(3), form="dlcm")
        assert value.item() == pytest.approx(2e4, rel=1e-6)
    # one-item list: 1 - s = 0 and 1 - y~ = 0, the term is 0 by definition
    assert attrank(one([3.0]), one([2.0]), full(1), form="dlcm").item() == 0.0


def simple_ndcg(scores, labels, k=None):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    cut = len(scores) if k is None else k
    dcg = sum((2 ** labels[i] - 1) / math.log2(r + 2) for r, i in enumerate(order[:cut]))
    ideal = sum((2**v - 1) / math.log2(r + 2) for r, v in enumerate(sorted(labels, reverse=True)[:cut]))
    return dcg / ideal


def test_softrank_small_sigma_is_true_ndcg():
    s = [0.3, -1.2, 2.0, 0.7, 0.0, 1.1]
    y = [1.0, 3.0, 0.0, 2.0, 1.0, 0.0]
    for k in (None, 2, 4):
        loss = softrank(one(s), one(y), full(6), sigma=1e-3, k=k)
        assert 1.0 - loss.item() == pytest.approx(simple_ndcg(s, y, k), abs=1e-12)
    # larger noise pulls the expected NDCG away from the true one (towards a random ranking)
    assert 1.0 - softrank(one(s), one(y), full(6), sigma=2.0).item() != pytest.approx(
        simple_ndcg(s, y), abs=1e-3
    )


def test_softrank_rank_distribution_brute_force():
    s = [0.3, -0.2, 0.9, 0.1]
    sigma = 0.4
    n = len(s)

    def beats(i, j):  # P(s_i + noise > s_j + noise)
        return 0.5 * math.erfc(-(s[i] - s[j]) / (2 * sigma))

    # rank of j = number of other items that beat it, each independently (the SoftRank model)
    expected = [[0.0] * n for _ in range(n)]
    for j in range(n):
        others = [i for i in range(n) if i != j]
        for outcome in itertools.product([0, 1], repeat=n - 1):
            p = math.prod(beats(i, j) if o else 1 - beats(i, j) for i, o in zip(others, outcome, strict=True))
            expected[j][sum(outcome)] += p
    got = softrank_rank_distribution(one(s), full(n), sigma)
    torch.testing.assert_close(got[0], torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-14)


def test_softrank_rank_distribution_sums_to_one():
    scores, _, mask = batch(seed=13, B=5, L=9)
    dist = softrank_rank_distribution(scores, mask, 0.3)
    assert dist.shape == (5, 9, 9)
    sums = dist.sum(-1)
    torch.testing.assert_close(sums[mask], torch.ones_like(sums[mask]), rtol=0, atol=1e-12)
    assert torch.equal(dist[~mask], torch.zeros_like(dist[~mask]))  # padded items have no rank
    n = mask.sum(-1)
    beyond = torch.arange(9)[None, None, :] >= n[:, None, None]  # ranks >= n are impossible
    assert torch.equal(dist[beyond.expand_as(dist)], torch.zeros_like(dist[beyond.expand_as(dist)]))
    # truncation keeps the first ranks exactly
    torch.testing.assert_close(softrank_rank_distribution(scores, mask, 0.3, max_rank=3), dist[..., :3])


# ----------------------------------------------------------------------------------------------------
# RankNet, LambdaLoss, ApproxNDCG, NeuralNDCG: the formulas as explicit loops over items and pairs
# ----------------------------------------------------------------------------------------------------

S6 = [0.3, -1.2, 2.0, 0.7, 0.05, 1.1]
Y6 = [1.0, 3.0, 0.0, 2.0, 1.0, 0.0]


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def gain_of(y, gain):
    return 2.0**y - 1.0 if gain == "exp2" else y


def ideal_dcg(labels, gain, k=None):
    ordered = sorted(labels, reverse=True)[: len(labels) if k is None else k]
    return sum(gain_of(v, gain) / math.log2(r + 2) for r, v in enumerate(ordered))


def ranks_by_score(scores):
    """1-based rank of every item, by descending score (the oracles use tie-free scores)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return {item: pos + 1 for pos, item in enumerate(order)}


def ranknet_loop(s, y, sigma):
    total = 0.0
    for i in range(len(s)):
        for j in range(len(s)):
            if y[i] > y[j]:
                total += -math.log(sigmoid(sigma * (s[i] - s[j])))
    return total


def lambdaloss_loop(s, y, sigma, mu, gain):
    """NDCG-Loss2++ with hard ranks: -sum_{y_i > y_j} (rho_ij + mu delta_ij) |G_i - G_j| log2 P_ij."""
    r = ranks_by_score(s)
    idcg = ideal_dcg(y, gain)

    def D(x):
        return math.log2(1 + x)

    total = 0.0
    for i in range(len(s)):
        for j in range(len(s)):
            if y[i] <= y[j]:
                continue
            G_gap = abs(gain_of(y[i], gain) - gain_of(y[j], gain)) / idcg
            rho = abs(1 / D(r[i]) - 1 / D(r[j]))
            gap = abs(r[i] - r[j])
            delta = abs(1 / D(gap) - 1 / D(gap + 1))
            total -= (rho + mu * delta) * G_gap * math.log2(sigmoid(sigma * (s[i] - s[j])))
    return total


def approxndcg_loop(s, y, alpha, gain):
    dcg = 0.0
    for x in range(len(s)):
        rank = 1.0 + sum(sigmoid(alpha * (s[z] - s[x])) for z in range(len(s)) if z != x)
        dcg += gain_of(y[x], gain) / math.log2(1 + rank)
    return 1.0 - dcg / ideal_dcg(y, gain)


def neuralsort_loop(s, tau, iters, transposed):
    """NeuralSort P[i][j] (rank i, item j) by loops, then Sinkhorn (columns, rows) in plain floats."""
    n = len(s)
    P = []
    for i in range(1, n + 1):
        logits = [((n + 1 - 2 * i) * s[j] - sum(abs(s[j] - s[k]) for k in range(n))) / tau for j in range(n)]
        top = max(logits)
        z = sum(math.exp(v - top) for v in logits)
        P.append([math.exp(v - top) / z for v in logits])
    M = [list(col) for col in zip(*P, strict=True)] if transposed else P
    for _ in range(iters):
        for c in range(n):  # columns
            tot = sum(M[r][c] for r in range(n))
            for r in range(n):
                M[r][c] /= tot
        for r in range(n):  # rows
            tot = sum(M[r])
            M[r] = [v / tot for v in M[r]]
    return M  # ranks x items, or items x ranks when transposed


def neuralndcg_loop(s, y, tau, k, gain, transposed, iters):
    n = len(s)
    cut = n if k is None else k

    def d(rank):
        return 1.0 / math.log2(rank + 1) if rank <= cut else 0.0

    M = neuralsort_loop(s, tau, iters, transposed)
    if transposed:
        dcg = sum(gain_of(y[j], gain) * sum(M[j][i] * d(i + 1) for i in range(n)) for j in range(n))
    else:
        dcg = sum(d(i + 1) * sum(M[i][j] * gain_of(y[j], gain) for j in range(n)) for i in range(n))
    return 1.0 - dcg / ideal_dcg(y, gain, k)


def padded(values, fill):
    """``values`` with one padded item inside and one at the end (mask returned too)."""
    row = [*values[:2], fill, *values[2:], fill]
    mask = torch.tensor([[True, True, False] + [True] * (len(values) - 2) + [False]])
    return one(row), mask


@pytest.mark.parametrize("sigma", [1.0, 0.3])
def test_ranknet_loop(sigma):
    expected = ranknet_loop(S6, Y6, sigma)
    assert ranknet(one(S6), one(Y6), full(6), sigma=sigma).item() == pytest.approx(expected, rel=1e-12)
    (s, m), (y, _) = padded(S6, 9.0), padded(Y6, 4.0)
    assert ranknet(s, y, m, sigma=sigma).item() == pytest.approx(expected, rel=1e-12)
    # all labels equal: no pair, value 0
    assert ranknet(one(S6), one([2.0] * 6), full(6)).item() == 0.0


@pytest.mark.parametrize(
    ("sigma", "mu", "gain"), [(1.0, 10.0, "exp2"), (0.5, 0.0, "linear"), (2.0, 3.0, "exp2")]
)
def test_lambdaloss_loop(sigma, mu, gain):
    expected = lambdaloss_loop(S6, Y6, sigma, mu, gain)
    got = lambdaloss(one(S6), one(Y6), full(6), sigma=sigma, mu=mu, gain=gain)
    assert got.item() == pytest.approx(expected, rel=1e-12)
    (s, m), (y, _) = padded(S6, 9.0), padded(Y6, 4.0)
    assert lambdaloss(s, y, m, sigma=sigma, mu=mu, gain=gain).item() == pytest.approx(expected, rel=1e-12)


def test_lambdaloss_mu0_gradient_is_lambdarank():
    """mu = 0: the gradient w.r.t. s_i is LambdaRank's lambda, sum_j |dNDCG_ij| (-sigma / ln 2) (1 - P_ij)."""
    s = torch.tensor([S6], dtype=F64, requires_grad=True)
    lambdaloss(s, one(Y6), full(6), mu=0.0, sigma=1.0).backward()
    r = ranks_by_score(S6)
    idcg = ideal_dcg(Y6, "exp2")
    expected = [0.0] * 6
    for i in range(6):
        for j in range(6):
            if Y6[i] > Y6[j]:
                swap = abs(2 ** Y6[i] - 2 ** Y6[j]) * abs(1 / math.log2(1 + r[i]) - 1 / math.log2(1 + r[j]))
                lam = swap / idcg * (1 - sigmoid(S6[i] - S6[j])) / math.log(2)
                expected[i] -= lam
                expected[j] += lam
    torch.testing.assert_close(s.grad[0], torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("alpha", "gain"), [(10.0, "exp2"), (1.0, "linear"), (0.3, "exp2")])
def test_approxndcg_loop(alpha, gain):
    expected = approxndcg_loop(S6, Y6, alpha, gain)
    got = approxndcg(one(S6), one(Y6), full(6), alpha=alpha, gain=gain)
    assert got.item() == pytest.approx(expected, rel=1e-12)
    (s, m), (y, _) = padded(S6, 9.0), padded(Y6, 4.0)
    assert approxndcg(s, y, m, alpha=alpha, gain=gain).item() == pytest.approx(expected, rel=1e-12)
    # a large alpha gives the true NDCG
    sharp = approxndcg(one(S6), one(Y6), full(6), alpha=1e5).item()
    assert 1.0 - sharp == pytest.approx(simple_ndcg(S6, Y6), abs=1e-9)


@pytest.mark.parametrize(
    ("tau", "k", "gain", "transposed", "iters"),
    [
        (1.0, None, "exp2", False, 50),
        (1.0, None, "exp2", True, 50),
        (0.5, 3, "linear", False, 3),
        (0.5, 3, "linear", True, 3),
        (2.0, 2, "exp2", True, 0),
    ],
)
def test_neuralndcg_loop(tau, k, gain, transposed, iters):
    expected = neuralndcg_loop(S6, Y6, tau, k, gain, transposed, iters)
    kw = {"tau": tau, "k": k, "gain": gain, "transposed": transposed, "sinkhorn_iters": iters}
    assert neuralndcg(one(S6), one(Y6), full(6), **kw).item() == pytest.approx(expected, rel=1e-10)
    (s, m), (y, _) = padded(S6, 9.0), padded(Y6, 4.0)
    assert neuralndcg(s, y, m, **kw).item() == pytest.approx(expected, rel=1e-10)


def test_neuralndcg_limits():
    # a small temperature gives the hard sort, so the true NDCG@k; both variants
    for k in (None, 2, 4):
        for transposed in (False, True):
            v = neuralndcg(one(S6), one(Y6), full(6), tau=1e-4, k=k, transposed=transposed).item()
            assert 1.0 - v == pytest.approx(simple_ndcg(S6, Y6, k), abs=1e-9)
    # the variants differ before Sinkhorn converges and agree after
    few = [
        neuralndcg(one(S6), one(Y6), full(6), transposed=t, sinkhorn_iters=1).item() for t in (False, True)
    ]
    many = [
        neuralndcg(one(S6), one(Y6), full(6), transposed=t, sinkhorn_iters=500).item() for t in (False, True)
    ]
    assert abs(few[0] - few[1]) > 1e-4
    assert many[0] == pytest.approx(many[1], abs=1e-9)


# ----------------------------------------------------------------------------------------------------
# Chamfer query confusion
# ----------------------------------------------------------------------------------------------------


def naive_chamfer(reps, mask, form, direction="two-sided"):
    """QILCM eq. 13-14 written out: explicit loops over query pairs and items (torch ops only for the
    vectors, so autograd works). Two-sided eq. 14:
    ``d(q1, q2) = sum_{i in q1} min_{j in q2} ||h_i - h_j||^2 + sum_{j in q2} min_{i in q1} ||h_i - h_j||^2``;
    ``form="mean"`` divides each sum by its list's length and by D."""
    B, L, D = reps.shape

    def sq_dist(q1, i, q2, j):
        return ((reps[q1, i] - reps[q2, j]) ** 2).sum()

    d = [[reps.new_zeros(()) for _ in range(B)] for _ in range(B)]
    for q1 in range(B):
        items1 = [i for i in range(L) if mask[q1, i]]
        for q2 in range(B):
            items2 = [j for j in range(L) if mask[q2, j]]
            if not items1 or not items2 or q1 == q2:
                continue  # an empty list has no nearest point; d(q, q) = 0
            first = reps.new_zeros(())
            for i in items1:  # sum_{i in q1} min_{j in q2}
                first = first + min(sq_dist(q1, i, q2, j) for j in items2)
            second = reps.new_zeros(())
            for j in items2:  # sum_{j in q2} min_{i in q1}
                second = second + min(sq_dist(q1, i, q2, j) for i in items1)
            if form == "mean":
                first, second = first / (len(items1) * D), second / (len(items2) * D)
            d[q1][q2] = first + second if direction == "two-sided" else first
    return torch.stack([torch.stack(row) for row in d])


def chamfer_batch(seed=0, B=5, L=4, D=3):
    g = torch.Generator().manual_seed(seed)
    reps = torch.randn(B, L, D, generator=g, dtype=F64)
    mask = torch.rand(B, L, generator=g) > 0.3
    mask[:, 0] = True
    mask[2] = False  # an empty list
    mask[3, 1:] = False  # a one-item list
    reps[~mask] = float("nan")  # padded rows hold garbage
    return reps, mask


@pytest.mark.parametrize("direction", ["two-sided", "one-sided"])
@pytest.mark.parametrize("form", ["sum", "mean"])
def test_chamfer_against_naive_loop(form, direction):
    reps, mask = chamfer_batch()
    clean = torch.where(mask[..., None], reps, 0.0).requires_grad_(True)
    naive = naive_chamfer(clean, mask, form, direction)
    n_nonempty = 4
    (naive_grad,) = torch.autograd.grad(naive.sum() / n_nonempty**2, clean)
    for kwargs in (
        {},
        {"chunk_size": 1},
        {"chunk_size": 2},
        {"max_block_bytes": 1},
        {"max_block_bytes": 500},
    ):
        r = reps.clone().requires_grad_(True)
        kwargs = {**kwargs, "form": form, "direction": direction}
        matrix = chamfer_confusion(r, mask, reduction="none", **kwargs)
        torch.testing.assert_close(matrix, naive.detach(), rtol=1e-12, atol=1e-12)
        assert torch.equal(matrix.diagonal(), torch.zeros(5, dtype=F64))
        if direction == "two-sided":
            assert torch.equal(matrix, matrix.T)  # eq. 14 is symmetric
        total = chamfer_confusion(r, mask, reduction="sum", **kwargs)
        assert total.item() == pytest.approx(naive.sum().item(), rel=1e-12)
        mean = chamfer_confusion(r, mask, **kwargs)
        assert mean.item() == pytest.approx(naive.sum().item() / n_nonempty**2, rel=1e-12)
        (grad,) = torch.autograd.grad(mean, r)
        torch.testing.assert_close(grad[mask], naive_grad[mask], rtol=1e-10, atol=1e-12)
        assert torch.equal(grad[~mask], torch.zeros_like(grad[~mask]))


def test_chamfer_blocks_cut_to_their_longest_list_match_the_dense_form():
    """Lists of mixed lengths (0-12 items, holes in the mask, shuffled): the exact term sorts them by
    extent and cuts every block to its longest list; against the dense ``(B, L, B, L)`` distance
    tensor (``torch.cdist``), values and gradients, and permuting the lists permutes the matrix."""
    g = torch.Generator().manual_seed(7)
    B, L, D = 40, 12, 3
    reps = torch.randn(B, L, D, generator=g, dtype=F64)
    lengths = torch.randint(0, L + 1, (B,), generator=g)
    mask = (torch.arange(L)[None, :] < lengths[:, None]) & (torch.rand(B, L, generator=g) > 0.1)
    clean = torch.where(mask[..., None], reps, 0.0)

    def dense(h):
        dist = torch.cdist(h.reshape(B * L, D), h.reshape(B * L, D)).pow(2).view(B, L, B, L)
        dist = dist.masked_fill(~mask[None, None, :, :], float("inf"))  # j must be a real item of q2
        nearest = dist.amin(-1)  # (B, L, B): item i of q1 to its nearest in q2
        nearest = torch.where(mask[:, :, None] & mask.any(-1)[None, None, :], nearest, 0.0)
        m = nearest.sum(1).masked_fill(torch.eye(B, dtype=torch.bool), 0.0)  # (B, B)
        return m + m.T

    r1 = clean.clone().requires_grad_(True)
    expected = dense(r1)
    (g1,) = torch.autograd.grad(expected.sum(), r1)
    for chunk in (None, 1, 3):  # groups from the cost model, single lists, groups of 3
        r2 = clean.clone().requires_grad_(True)
        got = chamfer_confusion(r2, mask, reduction="none", chunk_size=chunk)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
        (g2,) = torch.autograd.grad(got.sum(), r2)
        torch.testing.assert_close(g2, g1, rtol=1e-8, atol=1e-10)
    perm = torch.randperm(B, generator=g)
    permuted = chamfer_confusion(clean[perm], mask[perm], reduction="none")
    torch.testing.assert_close(permuted, got.detach()[perm][:, perm], rtol=1e-10, atol=1e-10)


def test_chamfer_exact_computes_each_unordered_pair_of_list_groups_once():
    """12 lists in groups of 3: one distance product per unordered pair of groups (4 x 5 / 2 = 10), whose
    row minima give one direction and column minima the other, not one per ordered pair (16)."""
    g = torch.Generator().manual_seed(3)
    reps, mask = torch.randn(12, 5, 4, generator=g), torch.ones(12, 5, dtype=torch.bool)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        chamfer_confusion(reps, mask, chunk_size=3)
    products = [e.name for e in prof.events() if e.name in ("aten::mm", "aten::addmm", "aten::bmm")]
    assert len(products) == 10, products


@pytest.mark.parametrize("slice_bytes", [None, 64])  # the backward's columns all at once, 8 at a time
@pytest.mark.parametrize("chunk", [None, 1, 2, 3])
def test_chamfer_exact_with_ties_and_padding_equals_the_dense_minimum(chunk, slice_bytes, monkeypatch):
    """Integers summing to 0 (every distance exact in float64 after the term's centering, so ties are
    exact too: repeated items within and across lists), padding inside and after the items, an empty
    list, mixed lengths: the exact term's matrix and gradients equal those of the dense ``(B, L, B, L)``
    distances through ``torch.min``, which sends a tie's gradient to its first item, as the term's
    argmins do (rows and columns of a block)."""
    if slice_bytes is not None:
        monkeypatch.setattr(losses_module, "SPARSE_PRODUCT_BYTES", slice_bytes)
    g = torch.Generator().manual_seed(11)
    B, L, D = 9, 7, 20
    reps = torch.randint(-1, 2, (B, L, D), generator=g).to(F64)
    reps[1, 3] = reps[1, 0]  # a tie within a list
    reps[4, :3] = reps[0, 2]  # ties across lists
    mask = torch.rand(B, L, generator=g) > 0.25
    mask[:, 0] = True
    mask[5] = False  # an empty list
    mask[6, 2:] = False  # a short list
    mask[7, 1] = False  # a hole
    reps[~mask] = 0.0
    reps[8, 0] -= reps.sum((0, 1))  # the real items sum to 0: the term's centering changes nothing
    reps[~mask] = float("nan")  # padded rows hold garbage

    def dense(r):
        h = torch.where(mask[..., None], r, 0.0)
        dist = ((h[:, :, None, None, :] - h[None, None, :, :, :]) ** 2).sum(-1)  # (B, L, B, L)
        dist = dist.masked_fill(~mask[None, None, :, :], float("inf"))
        nearest = dist.min(-1).values  # (B, L, B): the first of tied items gets the gradient
        nearest = torch.where(mask[:, :, None] & mask.any(-1)[None, None, :], nearest, 0.0)
        m = nearest.sum(1).masked_fill(torch.eye(B, dtype=torch.bool), 0.0)
        return m + m.T

    r1 = reps.clone().requires_grad_(True)
    expected = dense(r1)
    (g1,) = torch.autograd.grad((expected * torch.arange(B * B, dtype=F64).view(B, B)).sum(), r1)
    r2 = reps.clone().requires_grad_(True)
    got = chamfer_confusion(r2, mask, reduction="none", chunk_size=chunk)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-9)
    (g2,) = torch.autograd.grad((got * torch.arange(B * B, dtype=F64).view(B, B)).sum(), r2)
    torch.testing.assert_close(g2[mask], g1[mask], rtol=1e-12, atol=1e-9)
    assert torch.equal(g2[~mask], torch.zeros_like(g2[~mask]))


@pytest.mark.parametrize("dtype", [torch.float32, F64, torch.bfloat16])
def test_chamfer_min_along_either_dimension_is_torchs_min_ties_included(dtype):
    """The blocks' minima (NumPy's argmin on the CPU): torch.min's values and first indices of ties."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (6, 5, 7), generator=g).to(dtype)  # many ties
    for dim in (-1, 1):
        values, index = _min_along(x, dim)
        expected = x.min(dim)
        assert torch.equal(values, expected.values) and torch.equal(index, expected.indices)


def test_chamfer_gradcheck():
    reps, mask = chamfer_batch(seed=1)
    r = torch.where(mask[..., None], reps, 0.0).requires_grad_(True)
    for form in ("sum", "mean"):
        for direction in ("two-sided", "one-sided"):
            assert torch.autograd.gradcheck(
                lambda x, f=form, d=direction: chamfer_confusion(x, mask, form=f, direction=d, chunk_size=2),
                (r,),
                fast_mode=True,
            )
            assert torch.autograd.gradcheck(
                lambda x, f=form, d=direction: chamfer_confusion(
                    x, mask, form=f, direction=d, pairs=7, generator=torch.Generator().manual_seed(0)
                ),
                (r,),
                fast_mode=True,
            )


def test_chamfer_diagonal_and_duplicates():
    g = torch.Generator().manual_seed(2)
    reps = 300.0 + 30.0 * torch.randn(3, 50, 300, generator=g)  # large norms: expansion round-off is large
    reps[1] = reps[0].flip(0)  # the same item set in another order
    mask = torch.ones(3, 50, dtype=torch.bool)
    matrix = chamfer_confusion(reps, mask, reduction="none")
    assert torch.equal(matrix.diagonal(), torch.zeros(3))  # exactly 0
    assert (matrix >= 0).all()
    assert matrix[0, 1].item() < 1e-6 * matrix[0, 2].item()  # round-off only
    # an empty list in the batch changes nothing
    more = torch.cat([reps, torch.randn(1, 50, 300, generator=g)])
    more_mask = torch.cat([mask, torch.zeros(1, 50, dtype=torch.bool)])
    assert chamfer_confusion(more, more_mask).item() == pytest.approx(chamfer_confusion(reps, mask).item())


def test_chamfer_empty_batch():
    reps = torch.randn(3, 4, 2, requires_grad=True)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    for pairs in (None, 5):
        value = chamfer_confusion(reps, mask, pairs=pairs)
        (grad,) = torch.autograd.grad(value, reps)
        assert value.item() == 0.0 and torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("form", ["sum", "mean"])
@pytest.mark.parametrize("direction", ["two-sided", "one-sided"])
def test_chamfer_sampled_pairs_are_unbiased(direction, form):
    """Mean over many draws of the sampled estimate -> the exact eq. 13 value (and gradient), within
    4 standard errors estimated from the draws themselves."""
    reps, mask = chamfer_batch(seed=3, B=6, L=4, D=3)
    r = reps.clone().requires_grad_(True)
    kw = {"direction": direction, "form": form}
    exact = chamfer_confusion(r, mask, **kw)
    (exact_grad,) = torch.autograd.grad(exact, r)
    clean = torch.where(mask[..., None], reps, 0.0)
    assert exact.item() == pytest.approx(naive_chamfer(clean, mask, form, direction).sum().item() / 25)
    g = torch.Generator().manual_seed(0)
    draws, grads = [], []
    for _ in range(300):
        est = chamfer_confusion(r, mask, pairs=20, generator=g, **kw)
        draws.append(est.item())
        grads.append(torch.autograd.grad(est, r)[0])
    draws_t = torch.tensor(draws, dtype=F64)
    stderr = draws_t.std().item() / math.sqrt(len(draws))
    assert draws_t.std().item() > 0  # really random
    assert abs(draws_t.mean().item() - exact.item()) < 4 * stderr
    grads_t = torch.stack(grads)[:, mask]  # (draws, real items, D)
    grad_stderr = grads_t.std(0) / math.sqrt(len(draws))
    assert ((grads_t.mean(0) - exact_grad[mask]).abs() <= 4 * grad_stderr + 1e-12).float().mean() > 0.99
    # reproducible, shapes, and the sum is the mean scaled by |B|^2 (5 non-empty lists)
    a = chamfer_confusion(
        reps, mask, pairs=30, generator=torch.Generator().manual_seed(5), reduction="none", **kw
    )
    b = chamfer_confusion(
        reps, mask, pairs=30, generator=torch.Generator().manual_seed(5), reduction="none", **kw
    )
    assert a.shape == (30,) and torch.equal(a, b)
    total = chamfer_confusion(
        reps, mask, pairs=30, generator=torch.Generator().manual_seed(5), reduction="sum", **kw
    )
    assert total.item() == pytest.approx(a.mean().item() * 25)


def test_chamfer_two_sided_is_one_sided_plus_transpose():
    reps, mask = chamfer_batch(seed=4, B=7, L=6, D=5)
    one = chamfer_confusion(reps, mask, direction="one-sided", reduction="none")
    two = chamfer_confusion(reps, mask, reduction="none")
    torch.testing.assert_close(two, one + one.T, rtol=0, atol=0)
    assert chamfer_confusion(reps, mask).item() == pytest.approx(
        2 * chamfer_confusion(reps, mask, direction="one-sided").item()
    )
    # sampled: each pair's two-sided value is the sum of the two one-sided values of that pair
    g = dict(pairs=40, reduction="none")
    two_s = chamfer_confusion(reps, mask, generator=torch.Generator().manual_seed(1), **g)
    one_s = chamfer_confusion(
        reps, mask, direction="one-sided", generator=torch.Generator().manual_seed(1), **g
    )
    nonempty = torch.nonzero(mask.any(-1)).flatten()
    draw = torch.randint(len(nonempty), (2, 40), generator=torch.Generator().manual_seed(1))
    q1, q2 = nonempty[draw[0]], nonempty[draw[1]]
    torch.testing.assert_close(two_s, two[q1, q2])
    torch.testing.assert_close(one_s, one[q1, q2])


def test_chamfer_errors():
    reps, mask = chamfer_batch()
    with pytest.raises(ValueError, match=r"form must be one of \['sum', 'mean'\]"):
        chamfer_confusion(reps, mask, form="max")
    with pytest.raises(ValueError, match="mask must be a bool tensor of shape"):
        chamfer_confusion(reps, mask[:, :2])
    with pytest.raises(ValueError, match="reps must be a float tensor of shape"):
        chamfer_confusion(reps[0], mask)
    with pytest.raises(ValueError, match="pairs must be a positive integer"):
        chamfer_confusion(reps, mask, pairs=0)
    with pytest.raises(ValueError, match=r"direction must be one of \['two-sided', 'one-sided'\]"):
        chamfer_confusion(reps, mask, direction="both")


def test_chamfer_block_shape():
    # 80 x 100 x 300 float32: a pair costs 4 * 4 * 100^2 = 160 kB; 64 MiB holds 5 rows of 80 queries
    assert chamfer_block_shape(80, 100, 300) == (5, 80)
    assert chamfer_block_shape(80, 100, 300, max_block_bytes=8 * 2**20) == (1, 52)  # less than one row
    assert chamfer_block_shape(80, 100, 300, max_block_bytes=1) == (1, 1)
    for budget in (2**20, 5 * 2**20, 64 * 2**20):
        rows, cols = chamfer_block_shape(80, 100, 300, max_block_bytes=budget)
        assert rows * cols * 4 * 4 * 100 * 100 <= budget
        rows, cols = chamfer_block_shape(80, 100, 300, max_block_bytes=budget, sampled=True)
        assert rows * cols * 4 * (4 * 100 * 100 + 4 * 100 * 300) <= budget


def test_chamfer_memory_is_bounded():
    """B=80, L=100, D=300 (QILCM's batch): no operation allocates anywhere near the (B, L, B, L) tensor."""
    g = torch.Generator().manual_seed(0)
    reps = torch.randn(80, 100, 300, generator=g).requires_grad_(True)
    mask = torch.ones(80, 100, dtype=torch.bool)
    mask[::3, 60:] = False
    budget = 32 * 2**20  # blocks of 2 x 80 queries
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        value = chamfer_confusion(reps, mask, max_block_bytes=budget)
        value.backward()
    largest = max(e.cpu_memory_usage for e in prof.events())
    full_block = 80 * 100 * 80 * 100 * 4  # 256 MB
    assert largest <= budget + 2 * reps.numel() * 4 < full_block / 4
    assert torch.isfinite(value) and torch.isfinite(reps.grad).all()
