"""ctxrank.models._dropout: PyTorch's CPU dropout arithmetic, bitwise for the same keep decisions, drawn
from one 32-bit PCG64DXSM word an element with the same keep rate and scale, keeping a bool mask for backward.

The bitwise tests draw the keep decisions as ``F.dropout`` does (fixture ``torchs_draws``), so that they
compare the arithmetic with PyTorch's own kernels, generator state included."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctxrank.data.lists import ListBatch
from ctxrank.losses import LOSSES
from ctxrank.models import _dropout
from ctxrank.models._dropout import Dropout, dropout
from ctxrank.registry import make_model


@pytest.fixture
def torchs_draws(monkeypatch):
    """``keep_mask`` drawing as ``F.dropout`` on the CPU does: ``bernoulli_(1 - p)`` on a float tensor."""

    def bernoulli_keep(like, p):
        return torch.empty_like(like).bernoulli_(1 - p) != 0

    monkeypatch.setattr(_dropout, "keep_mask", bernoulli_keep)
    monkeypatch.setattr("ctxrank.models._attention.keep_mask", bernoulli_keep)


def _saved(fn, *args):
    """(output, the tensors autograd saved while ``fn(*args)`` ran)."""
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = fn(*args)
    return out, saved


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
@pytest.mark.parametrize("shape", [(80, 100, 64), (7,), (3, 1, 5)])
def test_dropout_equals_torchs_bitwise_and_keeps_a_bool_mask(relu, p, shape, torchs_draws):
    x = torch.randn(*shape, requires_grad=True)
    grad = torch.randn(*shape)
    torch.manual_seed(1)
    ref = F.dropout(F.relu(x) if relu else x, p, True)
    ref_state = torch.get_rng_state()
    (ref_grad,) = torch.autograd.grad(ref, x, grad)
    torch.manual_seed(1)
    out, saved = _saved(lambda: dropout(x, p, True, relu=relu))
    assert torch.equal(torch.get_rng_state(), ref_state)  # the same draws: later ones stay the same too
    (out_grad,) = torch.autograd.grad(out, x, grad)
    assert torch.equal(out, ref)
    assert torch.equal(out_grad, ref_grad)
    big = [t for t in saved if t.numel() == x.numel()]
    assert big and all(t.dtype == torch.bool for t in big), [(t.dtype, t.shape) for t in saved]


def test_dropout_is_the_identity_in_eval_and_at_p_0_and_torchs_elsewhere(torchs_draws):
    x = torch.randn(4, 5, requires_grad=True)
    assert dropout(x, 0.5, False) is x
    assert dropout(x, 0.0, True) is x
    assert torch.equal(dropout(x, 0.5, False, relu=True), F.relu(x))
    torch.manual_seed(0)
    ref = F.dropout(x, 1.0, True)
    torch.manual_seed(0)
    assert torch.equal(dropout(x, 1.0, True), ref)  # p = 1: torch's own (all zero)
    with torch.no_grad():
        torch.manual_seed(0)
        ref = F.dropout(x, 0.3, True)
        torch.manual_seed(0)
        assert torch.equal(dropout(x, 0.3, True), ref)
    m = Dropout(0.25)
    assert m.state_dict() == {} and "p=0.25" in repr(m)
    with pytest.raises(ValueError, match="between 0 and 1"):
        Dropout(1.5)


@pytest.mark.parametrize(
    "name, params",
    [
        ("attn", {}),
        ("setrank", {"dropout": 0.3}),
        ("qilcm", {"dropout": 0.3}),
        ("dasalc", {"dropout": 0.3}),
        ("gsf", {"dropout": 0.3}),
        ("dcm", {"dropout": 0.3}),
        ("dlcm", {"dropout": 0.3, "encoder_widths": [16, 16], "gru_hidden": 8}),
    ],
)
def test_a_training_step_with_the_bool_mask_dropout_equals_torchs_bitwise(
    name, params, monkeypatch, torchs_draws
):
    """Every model's dropout goes through ``_dropout.dropout``: its loss and gradients equal those of the
    same step with PyTorch's ``F.dropout``, bitwise."""
    B, L, n_features = 4, 9, 6
    g = torch.Generator().manual_seed(0)
    batch = ListBatch(
        features=torch.randn(B, L, n_features, generator=g),
        labels=torch.randint(0, 3, (B, L), generator=g).float(),
        mask=torch.arange(L)[None, :] < torch.tensor([[9], [5], [1], [7]]),
        query_index=torch.arange(B),
        init_scores=torch.randn(B, L, generator=g),
        positions=torch.arange(B * L).reshape(B, L),
    )

    def step():
        torch.manual_seed(0)
        model = make_model(name, n_features, params).train()
        loss = model.training_loss(batch, LOSSES[model.traits.default_loss or "listnet"])
        weights = [p for p in model.parameters() if p.requires_grad]
        return loss, torch.autograd.grad(loss, weights, allow_unused=True)

    loss, grads = step()
    masked = []
    real = _dropout._MaskedDropout.apply
    monkeypatch.setattr(_dropout._MaskedDropout, "apply", lambda *a: masked.append(1) or real(*a))
    loss, grads = step()
    assert masked, "the model never called the bool-mask dropout"

    def torchs(x, p, training, *, relu=False):
        return F.dropout(F.relu(x) if relu else x, p, training)

    monkeypatch.setattr(_dropout, "dropout", torchs)
    for module in ("_attention", "setrank"):
        monkeypatch.setattr(f"ctxrank.models.{module}.dropout", torchs)
    monkeypatch.setattr(Dropout, "forward", lambda self, x: F.dropout(x, self.p, self.training))
    ref_loss, ref_grads = step()
    assert torch.equal(loss, ref_loss)
    for a, b in zip(grads, ref_grads, strict=True):
        assert (a is None) == (b is None) and (a is None or torch.equal(a, b))


@pytest.mark.parametrize("masked", [False, True, "a list without keys"])
@pytest.mark.parametrize("shape", [(6, 4, 30, 8), (3, 2, 7, 5)])
def test_attention_with_dropout_equals_torchs_math_kernel_bitwise_and_keeps_no_dropped_weights(
    masked, shape, torchs_draws
):
    """``attend_with_dropout`` is PyTorch's CPU path of ``scaled_dot_product_attention`` with dropout: the
    same outputs, gradients and generator draws, bit for bit, keeping no float ``(B, h, Lq, Lk)`` tensor
    but the softmax for backward."""
    from ctxrank.models._attention import attend_with_dropout

    B, h, L, _ = shape
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(*shape, generator=g, requires_grad=True) for _ in range(3))
    lengths = torch.randint(1, L + 1, (B, 1), generator=g)
    if masked == "a list without keys":
        lengths[0] = 0  # PyTorch's kernel gives that list's queries 0, not NaN
    key_mask = (torch.arange(L)[None, :] < lengths)[:, None, None, :] if masked else None
    grad = torch.randn(*shape, generator=g)
    torch.manual_seed(3)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, dropout_p=0.3)
    ref_state = torch.get_rng_state()
    ref_grads = torch.autograd.grad(ref, (q, k, v), grad)
    torch.manual_seed(3)
    out, saved = _saved(lambda: attend_with_dropout(q, k, v, key_mask, 0.3))
    assert torch.equal(torch.get_rng_state(), ref_state)
    grads = torch.autograd.grad(out, (q, k, v), grad)
    assert torch.equal(out, ref)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads, strict=True))
    square = {t.untyped_storage().data_ptr(): t.dtype for t in saved if t.shape == (B, h, L, L)}
    assert sorted(map(str, square.values())) == ["torch.bool", "torch.float32"]  # the mask, the softmax


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_keep_mask_keeps_each_element_with_probability_1_minus_p_and_scales_by_its_inverse(p):
    """The keep decisions: independent Bernoulli(1 - p) (the rate within 5 binomial standard deviations,
    no correlation between neighbours), kept elements scaled by ``1 / (1 - p)`` as ``F.dropout`` rounds
    it, dropped ones 0; the mean of the output is the input's (dropout's expectation)."""
    n = 2_000_000
    torch.manual_seed(0)
    x = torch.ones(n, requires_grad=True)
    out = dropout(x, p, True)
    kept = out != 0
    rate = kept.double().mean().item()
    assert abs(rate - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5
    assert torch.equal(out[kept], torch.full((int(kept.sum()),), 1.0).div_(1 - p))  # torch's scale, bitwise
    both = (kept[1:] & kept[:-1]).double().mean().item()  # neighbours both kept: (1 - p)^2 if independent
    assert abs(both - (1 - p) ** 2) < 5 * ((1 - p) ** 2 * (1 - (1 - p) ** 2) / n) ** 0.5
    assert abs(out.double().mean().item() - 1.0) < 5 * (p / (1 - p) / n) ** 0.5
    torch.manual_seed(0)
    assert torch.equal(dropout(x, p, True), out)  # seeded: the same draws again


def test_keep_mask_is_a_pcg64dxsm_stream_seeded_by_one_draw_of_torchs_generator():
    """The keep decisions are 32-bit words of NumPy's PCG64DXSM (about 1 ns an element with the comparison,
    where torch's int32 ``random_`` takes 2-3 ns and its float ``bernoulli_`` about 13) below
    ``round((1 - p) 2^32)``, seeded by one 63-bit draw of torch's default generator: a call leaves the
    generator where that one draw does, whatever the size; the attention's dropout draws the same way."""
    from ctxrank.models._attention import attend_with_dropout

    def expected(shape, p):
        torch.manual_seed(5)
        seed = int(torch.randint(2**63 - 1, ()))
        n = math.prod(shape)
        words = np.random.PCG64DXSM(seed).random_raw(-(-n // 2)).view(np.uint32)[:n]
        return torch.from_numpy(words < round((1 - p) * 2**32)).view(shape), torch.get_rng_state()

    x = torch.rand(8, 50, 17, requires_grad=True) + 0.5  # no zeros: the kept elements are the non-zeros
    keep, state = expected(x.shape, 0.3)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.3, True) != 0, keep)
    assert torch.equal(torch.get_rng_state(), state)
    q = torch.randn(2, 3, 7, 4, requires_grad=True)
    _, state = expected((2, 3, 7, 7), 0.3)
    torch.manual_seed(5)
    attend_with_dropout(q, q, q, None, 0.3)
    assert torch.equal(torch.get_rng_state(), state)
