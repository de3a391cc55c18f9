"""Devices and data-parallel training with ``torch.distributed`` (an existing engine; nothing custom).

* :func:`resolve_device`: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (CUDA when available).
* Data parallelism: launch ``torchrun --nproc-per-node N -m ctxrank train ...``. torchrun sets
  ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``...; :func:`init_from_env` then starts the process group
  (``gloo`` on CPU, ``nccl`` on CUDA, one GPU per local rank). ``ctxrank.training.loop.fit`` wraps the
  model in ``DistributedDataParallel`` (gradients all-reduced every step), gives each rank its share of the
  training queries with ``torch.utils.data.DistributedSampler`` (reshuffled every epoch from the seed,
  padded to equal counts so every rank runs the same number of steps), evaluates a disjoint shard of
  the validation queries on each rank and all-reduces the metric sums, so early stopping decides the
  same on every rank. Only rank 0 writes logs and checkpoints. ``train.batch_size`` is per process: the
  global batch is ``WORLD_SIZE x batch_size`` queries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DistributedSampler

__all__ = ["DistContext", "init_from_env", "resolve_device", "world"]


def resolve_device(name: str | torch.device = "cpu") -> torch.device:
    """A ``torch.device`` for ``name``; ``"auto"`` = CUDA when available, else CPU.

    Raises:
        ValueError: an unknown name, or CUDA asked for on a machine without it.
    """
    text = str(name)
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        raise ValueError(f"train.device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {text!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"train.device={text!r} but CUDA is not available here (use 'cpu' or 'auto')")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"train.device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {text!r}")
    return device


@dataclass(frozen=True)
class DistContext:
    """This process's place in a data-parallel run (``world_size == 1``: not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, n: int, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
        """This rank's indices of ``range(n)``: ``DistributedSampler`` (equal counts, padded by
        repetition) for training; a contiguous disjoint split (no repeats) when ``shuffle`` is False."""
        if not self.enabled:
            return np.arange(n)
        if not shuffle:
            return np.array_split(np.arange(n), self.world_size)[self.rank]

        sampler = DistributedSampler(
            range(n), num_replicas=self.world_size, rank=self.rank, shuffle=True, seed=seed
        )
        sampler.set_epoch(epoch)
        return np.fromiter(iter(sampler), dtype=np.int64)

    def all_reduce_sum(self, values: np.ndarray, device: torch.device) -> np.ndarray:
        """Element-wise sum over ranks (float64)."""
        t = torch.as_tensor(np.asarray(values, dtype=np.float64), device=device)
        if self.enabled:
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
        return t.cpu().numpy()

    def barrier(self) -> None:
        """Wait for every rank (no-op outside torchrun)."""
        if self.enabled:
            torch.distributed.barrier()

    def all_gather(self, tensor: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
        """Every rank's copy of ``tensor`` (same shape and dtype on every rank), on CPU, in rank order."""
        if not self.enabled:
            return [tensor.cpu()]
        t = tensor.to(device)
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        torch.distributed.all_gather(out, t)
        return [x.cpu() for x in out]


def world() -> DistContext:
    """The current process group's context (not distributed when none is initialized)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return DistContext(
            rank=torch.distributed.get_rank(),
            world_size=torch.distributed.get_world_size(),
            local_rank=int(os.environ.get("LOCAL_RANK", 0)),
        )
    return DistContext()


def init_from_env(device: str = "cpu") -> DistContext:
    """Start the process group when launched by torchrun (``WORLD_SIZE`` > 1); returns the context.

    ``gloo`` for CPU devices, ``nccl`` for CUDA (each process then uses ``cuda:LOCAL_RANK``).
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return DistContext()
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        cuda = resolve_device(device).type == "cuda"
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
    return world()
