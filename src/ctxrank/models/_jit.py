"""Traceable recurrences: one loop for training and for ``torch.jit.trace`` (export).

``torch.jit.trace`` records the operations of one example batch, so a Python loop over the ``L`` items
of a list would be unrolled for the example's ``L`` and be wrong for any other length. The models whose
forward loops over the list (DLCM's eq. 4 GRU, DCM's encoder while traced) write that loop as a plain
function in TorchScript's subset of Python and call it through :func:`traceable_loop`: eagerly it is the
function itself (training and ``predict`` run it as ordinary Python), while a trace records it is the
same function compiled by ``torch.jit.script``, whose loop keeps the list length dynamic (and which
the TorchScript-based ONNX exporter turns into an ONNX ``Loop``). One source, so the exported file and
the model compute the same equations.

Loops iterate over ``x.transpose(0, 1)`` (a tensor iterates over its first dimension): eagerly that is
``unbind``, whose backward stacks the step gradients once (``x[:, t]`` would build a zero-filled
gradient of all of ``x`` per step, ``benchmarks/bench_recurrence_backward.py``); scripted it is one
select per step, which ONNX exports without sequence types.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["records_backward", "traceable_loop", "tracing"]


def tracing() -> bool:
    """True while ``torch.jit.trace`` (or the TorchScript-based ONNX exporter) records a forward."""
    return torch.jit.is_tracing()


def records_backward(*tensors: torch.Tensor) -> bool:
    """True when autograd records this forward for a backward through ``tensors``: gradients enabled, some
    of ``tensors`` requiring one, and no trace recording (export runs the forward only)."""
    return not tracing() and torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


@functools.cache
def _scripted(fn: Callable[..., Any]) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*", category=DeprecationWarning)
        return torch.jit.script(fn)


def traceable_loop(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` itself, or, while a trace records, ``fn`` compiled by ``torch.jit.script`` (once)."""
    return _scripted(fn) if tracing() else fn
