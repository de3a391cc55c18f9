"""The C allocator of this process: glibc's heap kept from growing with freed blocks.

PyTorch's CPU tensors come from ``malloc``; on Linux that is glibc's, whose defaults let a training
loop's resident set grow well above the tensors alive (docs/benchmarks.md, "What a training step
keeps"). Two calls: :func:`limit_heap_growth` (a process setting, for the process's owner) and
:func:`release_free_memory` (after a fit). Both do nothing where the C library is not glibc. Written by
hand: no library sets glibc's allocator parameters. Imports nothing but the standard library (the
``ctxrank`` command calls it before loading torch).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

__all__ = ["MMAP_THRESHOLD_BYTES", "limit_heap_growth", "release_free_memory"]


def release_free_memory() -> None:
    """Give the C allocator's free pages back to the system (glibc's ``malloc_trim(0)``; nothing where
    the C library has no such call). A training step frees its activations, but glibc keeps the pages
    of the freed blocks inside its heap, so a process that trained (a notebook, a pipeline) would go on
    holding its largest step's memory. Measured at factor 0.25 of the scale benchmark: the resident set
    after DLCM's stage 1,160 MiB instead of 1,507; the peaks did not move (docs/benchmarks.md). A few
    milliseconds a call."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


#: :func:`limit_heap_growth`: blocks from this size up are mapped on their own and unmapped when freed
MMAP_THRESHOLD_BYTES = 4 * 2**20
#: glibc's ``mallopt`` parameters (``<malloc.h>``)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: environment variables by which a user sets glibc's allocator: :func:`limit_heap_growth` then does nothing
_USER_MALLOC_SETTINGS = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)


def limit_heap_growth() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD_BYTES` (and its trim threshold at twice that,
    glibc's own ratio) for this process; True when set.

    glibc maps a large block on its own (``mmap``) and unmaps it when freed, but raises that threshold
    to the size of each mapped block freed, up to 32 MiB: after a training step's first large tensor is
    freed, every tensor below 32 MiB comes from the heap, and the heap keeps the holes the step's
    activations leave behind (glibc returns only its top). A fixed threshold stops that raise. Measured
    on one training step of 80 lists x 100 items x 136 features (one thread, docs/benchmarks.md): the
    resident set's growth over 7 steps fell from about 660 to 400 MiB for DLCM, the step time unchanged;
    for ``attn`` little moved (its (80, 100, 128) tensors are just under 4 MiB: mapping those too halved
    its growth but cost 25-70% of its step in page faults).

    Called by the ``ctxrank`` command in its own process and its experiment workers, not by the library
    on import or in ``fit`` (a notebook's allocator is its owner's choice): call it there to get the
    command's memory behaviour. Nothing where the C library is not glibc, or where the user set glibc's
    allocator through its environment variables (``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES`` with
    ``glibc.malloc.``: theirs stays).
    """
    if _MALLOPT is None or any(name in os.environ for name in _USER_MALLOC_SETTINGS):
        return False
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return bool(_MALLOPT(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        _MALLOPT(_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_BYTES)
    )


def _glibc(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS; Windows has no CDLL(None))
        return None


_MALLOC_TRIM = _glibc("malloc_trim")
_MALLOPT = _glibc("mallopt")
