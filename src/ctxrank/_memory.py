"""How much memory a run may use: ``train.max_memory_bytes``, ``"auto"`` resolved to what the machine
can give now, and byte counts as text.

``"auto"`` on the CPU is the smallest of: ``MemAvailable`` of ``/proc/meminfo`` (what the kernel can give
without swapping), the room left under a cgroup v2 memory limit (``memory.max - memory.current``) and the
room left under an address-space limit (``RLIMIT_AS`` minus ``VmSize``), each where it exists; elsewhere
the physical memory free (``os.sysconf``). On CUDA it is the device's free memory
(``torch.cuda.mem_get_info``). Nothing here imports anything of ctxrank, nor torch but for CUDA.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

__all__ = ["AUTO", "available_bytes", "budget_bytes", "device_kind", "format_bytes"]

#: ``train.max_memory_bytes = "auto"``: what the machine can give when the check runs
AUTO = "auto"
#: ``"auto"`` where the system reports no free memory at all (no ``/proc``, no ``sysconf``)
FALLBACK_BYTES = 4 * 2**30


def format_bytes(n: float) -> str:
    """``4.00 GiB``, ``12.3 MiB`` (two significant places where it matters)."""
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.1f} MiB"


def budget_bytes(option: Any, device: Any = "cpu") -> tuple[int, str]:
    """The budget in bytes and how it was set, for messages: ``option`` an int (bytes) or ``"auto"``
    (:func:`available_bytes` of ``device``)."""
    if option == AUTO:
        free, where = available_bytes(device)
        return free, f"train.max_memory_bytes = 'auto' ({format_bytes(free)}: the {where})"
    return int(option), f"train.max_memory_bytes = {int(option)} ({format_bytes(int(option))})"


def device_kind(device: Any) -> str:
    """``"cpu"``, ``"cuda"``, ...: the type of ``device``, a ``torch.device`` or its name (``"cuda:1"``)."""
    return getattr(device, "type", str(device).split(":")[0])


def available_bytes(device: Any = "cpu") -> tuple[int, str]:
    """What ``device`` (a ``torch.device`` or its name) can allocate now, and where the figure comes from."""
    if device_kind(device) == "cuda":
        import torch  # here: the CPU's figure needs no torch (``ctxrank synth`` imports none)

        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"free memory of {device}"
    found = [(v, w) for v, w in (_meminfo(), _cgroup(), _address_space()) if v is not None]
    return min(found, key=lambda item: item[0]) if found else _sysconf_free()


def _meminfo() -> tuple[int | None, str]:
    value = _read_key(Path("/proc/meminfo"), "MemAvailable:")
    return (None if value is None else value * 1024), "MemAvailable of /proc/meminfo"


def _cgroup() -> tuple[int | None, str]:
    base = Path("/sys/fs/cgroup")
    try:
        limit = (base / "memory.max").read_text().strip()
        used = int((base / "memory.current").read_text())
    except (OSError, ValueError):
        return None, ""
    if not limit.isdigit():  # "max": no limit
        return None, ""
    return max(int(limit) - used, 0), "room under the cgroup memory limit"


def _address_space() -> tuple[int | None, str]:
    if resource is None:  # pragma: no cover - Windows
        return None, ""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    size = _read_key(Path("/proc/self/status"), "VmSize:")
    if soft == resource.RLIM_INFINITY or size is None:
        return None, ""
    return max(soft - size * 1024, 0), "room under the address-space limit (ulimit -v)"


def _read_key(path: Path, key: str) -> int | None:
    """The number after ``key`` in a ``/proc`` file (kB), or None."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _sysconf_free() -> tuple[int, str]:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), "free physical memory"
    except (AttributeError, OSError, ValueError):  # pragma: no cover - no sysconf (Windows)
        return FALLBACK_BYTES, "fixed 4 GiB of a system that reports no free memory"
