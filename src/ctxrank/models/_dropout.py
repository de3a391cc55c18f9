"""Dropout that keeps a bool mask for backward instead of a float one (training memory).

On the CPU, ``torch.nn.functional.dropout`` (PyTorch 2.13, ``at::native::dropout``) draws a float32
noise tensor (``bernoulli_(1 - p)``, then divided by ``1 - p``) and multiplies the input by it; autograd
then keeps that float noise for backward: 4 bytes an element, and a ``ReLU`` before it keeps its float
output too. :func:`dropout` draws the same noise with the same generator calls and computes the same
product, so its outputs are bitwise those of ``F.dropout`` (``F.dropout(F.relu(x))`` with ``relu=True``),
and keeps one bool an element; its gradient is ``grad * s`` on kept elements (``s`` = the noise's
kept value, ``1 / (1 - p)`` as PyTorch rounds it), 0 elsewhere: the same numbers as autograd's through
``F.dropout`` (only the sign of exact zeros may differ; tests/models/test_dropout.py).

On other devices PyTorch's fused kernel already keeps a bool mask, with its own generator draws:
:func:`dropout` calls it there. Eval mode (and ``p = 0``) is the identity, as ``nn.Dropout``.

Written by hand because no library offers it: PyTorch's CPU dropout has no bool-mask variant.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ctxrank.models._jit import records_backward

__all__ = ["Dropout", "apply_mask", "draw_noise", "dropout"]


def draw_noise(like: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's CPU dropout noise for a tensor like ``like``: ``bernoulli_(1 - p)`` divided by ``1 - p``,
    the same generator calls in the same order (``at::native::dropout``), and its kept value ``s`` as a
    0-d tensor rounded as PyTorch rounds it."""
    noise = torch.empty_like(like).bernoulli_(1 - p)
    noise.div_(1 - p)
    return noise, noise.new_full((), 1.0).div_(1 - p)


class _MaskedDropout(torch.autograd.Function):
    """``y = r(x) * noise`` (``r`` = ReLU or the identity), saving where the gradient flows as bool (ReLU:
    ``y > 0``; otherwise the kept elements) and the kept value ``s`` of the noise."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, relu: bool) -> torch.Tensor:  # type: ignore[override]
        noise, scale = draw_noise(x, p)
        out = (F.relu(x) if relu else x) * noise
        # ReLU: the gradient flows where relu(x) > 0 and the element was kept, i.e. where out > 0
        # (relu(x) > 0 times s > 1 stays > 0); without ReLU, where the element was kept
        ctx.save_for_backward(out > 0 if relu else noise != 0, scale)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        flows, scale = ctx.saved_tensors
        return apply_mask(grad.mul(scale), flows), None, None


def apply_mask(t: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``t`` times ``keep`` (bool, its shape) in place: ``t`` where ``keep``, 0 elsewhere. Multiplying by
    the mask's bytes is about 16 times faster than ``masked_fill_`` on the CPU (PyTorch 2.13, one
    thread) and leaves ``t * 0`` where ``F.dropout``'s ``grad * noise`` does."""
    return t.mul_(keep.view(torch.uint8))


def dropout(x: torch.Tensor, p: float, training: bool, *, relu: bool = False) -> torch.Tensor:
    """``F.dropout(x, p, training)`` (``F.dropout(F.relu(x), ...)`` with ``relu``), bitwise, keeping a
    bool mask for backward on the CPU (module docstring). ``x`` any shape."""
    if not (training and p > 0):
        return F.relu(x) if relu else x
    if p >= 1 or x.device.type != "cpu" or not records_backward(x):
        return F.dropout(F.relu(x) if relu else x, p, training)
    return _MaskedDropout.apply(x, p, relu)


class Dropout(nn.Module):
    """``nn.Dropout(p)`` through :func:`dropout` (the same outputs, a bool mask kept for backward); the
    same state dict (none)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
