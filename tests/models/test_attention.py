"""Bounded memory on long lists: the attention of ``attn`` and ``setrank`` is computed in
checkpointed query chunks where PyTorch would build the ``(B, h, L, L)`` weights (attention dropout in
training), with the values of one call; DASALC's attention is PyTorch's fused kernel; the training memory
of the models whose memory could grow with the square of the list length grows linearly, and the
estimates (``batch_memory``) still bound it, so a 1,251-item list passes the check before allocation."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ctxrank.models._attention as attention
from ctxrank.config import TrainConfig
from ctxrank.data.lists import ListBatch
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import LOSSES, loss_memory
from ctxrank.models._attention import attend, attend_in_chunks, attention_mask, query_chunk
from ctxrank.registry import make_model
from ctxrank.training.memory import MemoryBudgetError, check_training
from tests.training.test_memory import _PeakBytes


def _qkv(lengths=(37, 10, 1), heads=2, d_k=4, seed=0):
    """float64 ``q, k, v`` (B, h, L, d_k) requiring grad and the key mask of lists of ``lengths``."""
    g = torch.Generator().manual_seed(seed)
    B, L = len(lengths), max(lengths)
    q, k, v = (torch.randn(B, heads, L, d_k, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), attention_mask(mask)


def _value_and_grads(fn, q, k, v):
    out = fn(q, k, v)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)  # every output gets a gradient
    return (out, *torch.autograd.grad((out * w).sum(), (q, k, v)))


@pytest.mark.parametrize("lengths", [(37, 10, 1), (37, 37, 37)], ids=["masked", "full"])
@pytest.mark.parametrize("chunk", [1, 5, 36])
def test_attention_in_chunks_is_one_call(lengths, chunk):
    """Without dropout, the checkpointed chunks give the values and gradients of one
    ``scaled_dot_product_attention`` call (every query attends to all keys in its chunk)."""
    q, k, v, key_mask = _qkv(lengths)
    one = _value_and_grads(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask), q, k, v
    )
    got = _value_and_grads(lambda q, k, v: attend_in_chunks(q, k, v, key_mask, 0.0, chunk), q, k, v)
    for a, b in zip(got, one, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_checkpointed_chunks_replay_their_dropout_mask_in_backward():
    """With dropout, backward rebuilds each chunk's weights with the forward's dropout mask: values and
    gradients equal those of the same chunks computed without checkpointing from the same seed."""
    q, k, v, key_mask = _qkv()

    def plain(q, k, v):
        parts = [
            F.scaled_dot_product_attention(part, k, v, attn_mask=key_mask, dropout_p=0.3)
            for part in q.split(8, dim=2)
        ]
        return torch.cat(parts, dim=2)

    torch.manual_seed(5)
    ref = _value_and_grads(plain, q, k, v)
    torch.manual_seed(5)
    got = _value_and_grads(lambda q, k, v: attend_in_chunks(q, k, v, key_mask, 0.3, 8), q, k, v)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.manual_seed(6)
    other = _value_and_grads(lambda q, k, v: attend_in_chunks(q, k, v, key_mask, 0.3, 8), q, k, v)
    assert not torch.allclose(other[0], got[0])  # another seed, other masks: the dropout is live


def test_attend_chunks_only_with_dropout_above_the_budget(monkeypatch):
    calls = []
    real = attention.attend_in_chunks
    monkeypatch.setattr(
        attention, "attend_in_chunks", lambda *a: calls.append(a[-1]) or real(*a)
    )  # records the chunk size
    q, k, v, key_mask = _qkv()  # weights of 3 x 2 x 37 x 37 float64 = 65,712 bytes
    with torch.no_grad():
        attend(q, k, v, key_mask, 0.0, budget=1000)  # no dropout: PyTorch's fused kernel, one call
        attend(q, k, v, key_mask, 0.3, budget=10**6)  # the weights fit: one call
        attend(q, k, v, key_mask, 0.3, budget=3 * 2 * 37 * 8 * 5)  # 5 queries' weights fit
        attend(q, k, v, key_mask, 0.3, budget=1)  # not even one: one query at a time
    assert calls == [5, 1]
    assert query_chunk(3, 2, 37, 37, itemsize=8, budget=10**6) == 37


SMALL = {
    "attn": {"d_fc": 16, "blocks": 2, "heads": 2, "d_ff": 16, "dropout": 0.3},
    "setrank": {"d_model": 16, "blocks": 2, "heads": 2, "d_ff": 16, "dropout": 0.2},
    "setrank-imsab": {"d_model": 16, "blocks": 2, "heads": 2, "d_ff": 16, "dropout": 0.2, "block": "imsab"},
    "dasalc": {"hidden": [16, 16], "attention_layers": 2, "heads": 2, "head_size": 8, "dropout": 0.3},
    "dlcm": {"encoder_widths": [16, 16], "gru_hidden": 16},
}
N_FEATURES = 8


def _peak(name: str, lengths: list[int]) -> tuple[int, int]:
    """Peak bytes of the tensors a training step (forward, default loss, backward) allocates on lists of
    ``lengths`` (padded to the longest), and the model's estimate of them."""
    torch.manual_seed(0)
    model = make_model(name.split("-")[0], N_FEATURES, SMALL[name])
    model.train()
    B, L = len(lengths), max(lengths)
    mask = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]
    g = torch.Generator().manual_seed(L)
    batch = ListBatch(
        features=torch.rand(B, L, N_FEATURES, generator=g) * mask[..., None],
        labels=torch.randint(0, 3, (B, L), generator=g).float() * mask,
        mask=mask,
        query_index=torch.arange(B),
    )
    tracker = _PeakBytes()
    with tracker:
        model.training_loss(batch, LOSSES["listnet"]).backward()
    weights = model.state_memory(training=False)
    bound = model.batch_memory(B, L, training=True) + model.state_memory(training=True) - weights
    return tracker.peak, bound + loss_memory("listnet", B, L)


@pytest.mark.parametrize("name", list(SMALL))
def test_training_memory_grows_linearly_with_the_list_length(name, monkeypatch):
    """A batch of one long list among short ones, 64 then 512 items long (8x): the tensors of a training
    step grow at most 9x (linearly, plus rounding; the square would be 64x), with the attention chunk
    budget cut to 64 KiB so that the chunks act at these sizes; the estimate bounds them at both.
    (QILCM is not here: its Chamfer term is quadratic up to its block budget, ``chamfer_block_shape``,
    64 MiB, and tests/test_losses.py checks its blocks.)"""
    monkeypatch.setattr(attention, "ATTENTION_BLOCK_BYTES", 2**16)
    short, long = _peak(name, [64, 9, 5]), _peak(name, [512, 9, 5])
    for got, bound in (short, long):
        assert got <= bound, f"{name}: {got:,} bytes allocated, estimate {bound:,}"
    assert long[0] <= 9 * short[0], f"{name}: {short[0]:,} -> {long[0]:,} bytes for 8x the length"


def test_chunks_cut_the_peak_of_attention_with_dropout(monkeypatch):
    """``attn`` with dropout on a 512-item list: the chunked step allocates less than half of the unchunked
    one (which keeps 4 copies of the weights of every block)."""
    monkeypatch.setattr(attention, "ATTENTION_BLOCK_BYTES", 2**50)
    unchunked, _ = _peak("attn", [512, 9, 5])
    monkeypatch.setattr(attention, "ATTENTION_BLOCK_BYTES", 2**16)
    chunked, _ = _peak("attn", [512, 9, 5])
    assert chunked < unchunked / 2, (chunked, unchunked)


def _one_long_query(n_long: int = 1251, n_short: int = 3) -> RankingData:
    rng = np.random.default_rng(0)
    lengths = [n_long] + [20] * n_short
    n = sum(lengths)
    return RankingData(
        features=rng.random((n, N_FEATURES), dtype=np.float32),
        labels=rng.integers(0, 3, n).astype(np.float32),
        query_ids=np.array([f"q{i}" for i in range(len(lengths))]),
        query_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        feature_names=tuple(f"f{j}" for j in range(N_FEATURES)),
    )


def test_a_1251_item_list_passes_the_check_before_allocation_because_of_the_chunks(monkeypatch):
    """WEB30K's longest list (1,251 items) with ``attn`` (dropout 0.3, 4 heads) in a batch of 4 lists
    padded to it: the attention weights of one block are 4 x 4 x 1,251^2 floats = 100 MB, kept 4 times a
    block without chunks. With the chunks the estimate fits 256 MiB; without them (budget unlimited) the
    same run is refused before allocating."""
    data = _one_long_query()
    params = {**SMALL["attn"], "heads": 4}
    model = make_model("attn", N_FEATURES, params)
    config = TrainConfig(batch_size=4, max_memory_bytes=256 * 2**20)
    listnet = functools.partial(LOSSES["listnet"])
    check_training(model, listnet, data, config, "cpu")  # fits: returns
    monkeypatch.setattr(attention, "ATTENTION_BLOCK_BYTES", 2**50)
    with pytest.raises(MemoryBudgetError, match="query 'q0' has 1,251 items"):
        check_training(model, listnet, data, config, "cpu")
