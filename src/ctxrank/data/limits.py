"""The memory bound every reader shares, ``max_dense_bytes``, and the message of memory running out
below it.

A reader checks what a file asks for (LETOR: lines x largest feature index x 4 bytes; a table: rows x
columns x 4 bytes) against ``max_dense_bytes`` before allocating it. Below the bound an allocation can
still fail (a machine or a process with less memory): :func:`out_of_memory` turns that MemoryError into
one naming the file, the array and its size, and how to refuse such files instead.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_MAX_DENSE_BYTES", "out_of_memory", "size_text"]

# 2 GiB: above the largest file of every registered dataset (Istella-S train.txt, 2,043,304 rows x 220
# features = 1.68 GiB) while keeping the reader's peak (1-2x the array) within a common 8 GB machine
DEFAULT_MAX_DENSE_BYTES = 2 << 30


def size_text(n: int) -> str:
    """``n`` bytes as ``"15.6 KiB"`` / ``"1.5 MiB"`` / ``"2.98 GiB"``."""
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def out_of_memory(name: str, exc: MemoryError, matrix: str, limit: int, call: str) -> MemoryError:
    """The MemoryError of an allocation that failed below ``limit`` (``max_dense_bytes``) while reading
    ``name``: the array (NumPy's error carries its shape and dtype), what the limit bounds (``matrix``,
    e.g. ``"the table is 10 rows x 3 columns x 4 bytes = ..."``) and how to lower it (``call``: the
    reader, e.g. ``"read_letor"``)."""
    shape, dtype = getattr(exc, "shape", None), getattr(exc, "dtype", None)
    what = "its arrays"
    if shape is not None and dtype is not None:
        nbytes = int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize
        what = f"a {' x '.join(f'{n:,}' for n in shape)} {np.dtype(dtype)} array ({size_text(nbytes)})"
    return MemoryError(
        f"{name}: cannot allocate {what} while reading it: out of memory ({matrix}; max_dense_bytes = "
        f"{limit:,} ({size_text(limit)}) bounds it, the reader's peak is a few times that); free memory or "
        f"use a machine with more, or refuse such files before reading with a lower limit: {call}(..., "
        "max_dense_bytes=N) or, on the command line, --max-dense-bytes N"
    )
