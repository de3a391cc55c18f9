"""Memory of training and scoring, estimated before anything is allocated (``train.max_memory_bytes``).

An estimate is an upper bound of the bytes of the tensors alive at a step's peak: the model's weights,
gradients and Adam state (``RankingModule.state_memory``), the padded batch itself (:func:`input_bytes`), the
model's activations (``RankingModule.batch_memory``) and the ranking loss's tensors
(``ctxrank.losses.loss_memory``). The process holds more (the data, Python, the allocator's slack). The
budget is ``train.max_memory_bytes``: a number of bytes, or ``"auto"``, what the device can give when the
check runs (``ctxrank._memory``).

* :func:`check_model_size`: the model's weights, gradients and Adam state, counted on PyTorch's ``meta``
  device (nothing allocated); ``ctxrank train`` checks it before reading the data (with one feature,
  a lower bound), training again with the data's features, before the model is built.
* :func:`check_training`: before the first epoch, the largest batch training can form:
  ``min(train.batch_size, queries)`` lists padded to the longest training list (every batch holding
  that list is padded to it); a full-batch fit (``mnl``) pads every query at once, in float64. A
  refusal names that query, its length, the estimate and the limit, and what would fit.
* :func:`scoring_fits`: scoring (``predict``) cuts a batch that does not fit into smaller ones (each
  list is scored on its own, so its scores change at most by float32 rounding, from its padded length)
  and refuses a list that does not fit alone.
  On the CPU a scoring batch also holds at most :data:`CPU_SCORING_ITEMS` padded items and
  :data:`CPU_SCORING_BYTES` of estimated memory (unless it is one list), whatever the budget: larger
  batches score no faster there and only hold more activations at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ctxrank._memory import budget_bytes, device_kind, format_bytes
from ctxrank.config import RunConfig
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.stream import ShardStream
from ctxrank.losses import LOSSES, loss_memory
from ctxrank.models.base import RankingModule
from ctxrank.registry import get_model
from ctxrank.training.build import build_model

__all__ = [
    "CPU_SCORING_BYTES",
    "CPU_SCORING_ITEMS",
    "MemoryBudgetError",
    "check_model_size",
    "check_training",
    "input_bytes",
    "scoring_fits",
]

#: padded items (lists x padded length) of one scoring batch on the CPU. Scoring 25,600 items (256 lists
#: of 100, 136 features, one thread) 16 lists at a time was as fast as all at once for QILCM, DCM, the
#: self-attention ranker and SetRank; DLCM took 15% longer at 32 lists, 4% at 64, the same at 128, while
#: the batch's activations grow with its items (DLCM: 826 MiB for 512 lists of 100), so a larger batch
#: costs memory and buys nothing. Each list is scored on its own, so its scores change only by float32
#: rounding when a smaller batch pads it to another length (tests/training/test_memory.py). GPUs keep the
#: whole
#: batch (the budget only).
CPU_SCORING_ITEMS = 1 << 14
#: estimated bytes (:func:`input_bytes` plus ``RankingModule.batch_memory``) of one scoring batch on the CPU.
#: Binds only the widest models at 136 features (DLCM's 1,024-wide GRU: 1.3 GiB estimated for 164 lists
#: of 100, about 62 lists fit; SetRank about 89): DLCM scored 64 lists at a time as fast as 164 (15.9
#: ms a list, one thread) and grew the process by 125 MiB instead of 393.
CPU_SCORING_BYTES = 512 * 2**20

#: what to do about a list too long for the budget (every refusal ends with it)
REMEDY = (
    "keep each query's top k items by an initial ranker (--initial lambdamart --top-k K, i.e. "
    "rerank.initial / rerank.top_k), or raise train.max_memory_bytes (docs/training.md)"
)


class MemoryBudgetError(ValueError):
    """A run or a batch would need more memory than ``train.max_memory_bytes`` allows."""


def input_bytes(
    batch_size: int, list_len: int, n_features: int, n_categorical: int, *, training: bool
) -> int:
    """Bytes of a padded batch (``data.lists.pad_queries``): the features (gathered, then padded; a noisy
    copy in training), labels, mask, row positions, initial scores and categorical codes."""
    per_item = 4 * n_features * (3 if training else 2) + 4 + 1 + 8 + 4 + 16 * n_categorical + 16
    return batch_size * list_len * per_item


def _step_bytes(
    model: RankingModule, data: RankingData | ShardStream, B: int, L: int, loss: tuple[str, dict] | None
) -> int:
    """A batch of ``B`` lists padded to ``L``: inputs and activations; with ``loss`` (training), the
    loss's tensors too."""
    n_cat = 0 if data.categorical is None else data.categorical.shape[1]
    need = input_bytes(B, L, data.n_features, n_cat, training=loss is not None)
    need += model.batch_memory(B, L, training=loss is not None)
    if loss is not None and not model.traits.own_objective:
        need += loss_memory(loss[0], B, L, loss[1])
    return need


def _loss_of(loss_fn: Any) -> tuple[str, dict[str, Any]]:
    """The registered name and the options of ``loss_fn`` (a loss of :data:`LOSSES` or a
    ``functools.partial`` of one); ``""`` for another callable (estimated as an O(B L) loss)."""
    fn, options = loss_fn, {}
    while isinstance(fn, functools.partial):
        options = {**fn.keywords, **options}
        fn = fn.func
    name = next((n for n, f in LOSSES.items() if f is fn), "")
    return name, options


def _longest(data: RankingData | ShardStream) -> tuple[int, str]:
    """Length and id of the longest query (0 without queries); of a stream, its scan's."""
    if isinstance(data, ShardStream):
        return data.longest_query()
    if data.n_queries == 0:
        return 0, ""
    q = int(np.argmax(data.query_lengths))
    return int(data.query_lengths[q]), str(data.query_ids[q])


def _largest(fits: Callable[[int], bool], high: int) -> int:
    """The largest ``n`` in ``[1, high]`` with ``fits(n)`` (``fits`` monotone), 0 for none."""
    low = 0
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def check_model_size(
    config: RunConfig, n_features: int, categorical_cardinalities: Sequence[int] = (), device: Any = "cpu"
) -> None:
    """Refuse the neural model of ``config`` when its weights, gradients and Adam state exceed
    ``train.max_memory_bytes``: counted on a copy built on PyTorch's ``meta`` device (shapes only, so
    ``model_params.hidden = [10**7]`` allocates nothing here). A baseline passes."""
    if not get_model(config.model).sized_before_training:
        return
    with torch.device("meta"):
        model = build_model(config, n_features, categorical_cardinalities)
    need = model.state_memory(training=True)
    limit, where = budget_bytes(config.train.max_memory_bytes, device)
    if need > limit:
        n = sum(p.numel() for p in model.parameters())
        raise MemoryBudgetError(
            f"{config.model} with these model_params has {n:,} weights (with {n_features} features): "
            f"training needs {format_bytes(need)} for its weights, gradients and Adam state, above "
            f"{where}; choose smaller model_params (docs/models.md) or raise train.max_memory_bytes"
        )


def check_training(
    model: RankingModule,
    loss_fn: Any,
    data: RankingData | ShardStream,
    config: Any,
    device: Any,
    *,
    full_batch: bool = False,
) -> None:
    """Refuse a training run whose largest batch would exceed ``config.max_memory_bytes`` (module
    docstring), naming the longest query; ``loss_fn`` as :func:`ctxrank.training.loop.fit` takes it."""
    limit, where = budget_bytes(config.max_memory_bytes, device)
    state = model.state_memory(training=True)
    L, qid = _longest(data)
    B = data.n_queries if full_batch else min(config.batch_size, data.n_queries)
    loss = _loss_of(loss_fn)
    scale = 2 if full_batch else 1  # the full-batch fit is float64

    def need(b: int, length: int) -> int:
        return state + scale * _step_bytes(model, data, b, length, loss)

    if need(B, L) <= limit:
        return
    batch = "all queries at once (a full-batch fit)" if full_batch else f"a training batch of {B} lists"
    if state > limit:
        fits = "the model alone exceeds it: choose smaller model_params"
    else:
        fit_b = 0 if full_batch else _largest(lambda b: need(b, L) <= limit, B)
        fit_l = _largest(lambda n: need(B, n) <= limit, L)
        fits = f"lists of at most {fit_l:,} items fit" + (
            f"; with these lists, train.batch_size = {fit_b} fits" if fit_b else ""
        )
    raise MemoryBudgetError(
        f"training {model.name}{f' ({loss[0]} loss)' if loss[0] else ''} needs about "
        f"{format_bytes(need(B, L))} by ctxrank's estimate, above {where}: query {qid!r} has {L:,} items "
        f"and {batch} is padded to it ({format_bytes(state)} of it for the weights, gradients and Adam "
        f"state); {fits}. To train anyway: {REMEDY}"
    )


def scoring_fits(
    model: RankingModule, data: RankingData, budget: Any, device: Any
) -> Callable[[int, int], bool]:
    """``fits(B, L)``: whether scoring a batch of ``B`` lists padded to ``L`` items stays within ``budget``
    (``train.max_memory_bytes``), the model's weights included, and on the CPU within
    :data:`CPU_SCORING_ITEMS` items and :data:`CPU_SCORING_BYTES` estimated bytes unless it is one
    list; refuses (``MemoryBudgetError``) when the longest list of ``data`` does not fit the budget
    alone."""
    limit, where = budget_bytes(budget, device)
    room = limit - model.state_memory(training=False)
    cpu = device_kind(device) == "cpu"

    def fits(batch_size: int, list_len: int) -> bool:
        need = _step_bytes(model, data, batch_size, list_len, None)
        if cpu and batch_size > 1 and (batch_size * list_len > CPU_SCORING_ITEMS or need > CPU_SCORING_BYTES):
            return False
        return need <= room

    L, qid = _longest(data)
    if L and not fits(1, L):
        fit_l = _largest(lambda n: fits(1, n), L)
        raise MemoryBudgetError(
            f"scoring query {qid!r} ({L:,} items) with {model.name} needs about "
            f"{format_bytes(_step_bytes(model, data, 1, L, None) + limit - room)} by ctxrank's estimate, "
            f"above {where}; lists of at most {fit_l:,} items fit. To score anyway: {REMEDY}"
        )
    return fits

