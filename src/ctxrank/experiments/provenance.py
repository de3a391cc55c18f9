"""Where a result comes from: the code (git commit, ctxrank version) and the environment (package
versions, machine: CPU model and the instruction set PyTorch dispatches to), recorded in every run file
and in ``results.json``.

The same code and seeds give bit-identical numbers on one machine, but PyTorch's CPU kernels are
chosen by the CPU's vector instructions (``torch.backends.cpu.get_cpu_capability()``: ``AVX512``,
``AVX2``, ``DEFAULT``; ``ATEN_CPU_CAPABILITY`` lowers it): their float sums differ in the last bits,
and early stopping can turn that into a different epoch and different metrics. A run therefore
records the capability it was computed with."""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

__all__ = ["code_version", "cpu_capability", "cpu_model", "environment", "run_context"]


def code_version() -> dict[str, Any]:
    """``{"git_sha", "git_dirty", "ctxrank"}`` of the code running now (SHA None outside a checkout)."""
    env = environment()
    return {"git_sha": env["git_sha"], "git_dirty": env["git_dirty"], "ctxrank": env["versions"]["ctxrank"]}


def _versions() -> dict[str, str | None]:
    """The Python and package versions of this process."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("ctxrank", "torch", "numpy", "scipy", "scikit-learn", "lightgbm", "pandas"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            versions[pkg] = None
    return versions


def _machine() -> str:
    return f"{platform.system()} {platform.machine()}"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s ``model name``; else ``platform.processor()``, else
    ``"unknown"``)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_capability() -> str:
    """The instruction set PyTorch's CPU kernels dispatch to in this process (``AVX512``, ``AVX2``,
    ``DEFAULT``, ...: ``torch.backends.cpu.get_cpu_capability()``, lowered by ``ATEN_CPU_CAPABILITY``)."""
    return torch.backends.cpu.get_cpu_capability()


def _hardware() -> dict[str, str]:
    """The machine a number was computed on: ``machine`` (OS, architecture), ``cpu`` (model) and
    ``cpu_capability`` (:func:`cpu_capability`)."""
    return {"machine": _machine(), "cpu": cpu_model(), "cpu_capability": cpu_capability()}


def environment() -> dict[str, Any]:
    """The git commit (and whether the checkout has changes), package versions and machine (OS and
    architecture, CPU model, PyTorch's CPU instruction set)."""
    versions = _versions()
    try:
        here = Path(__file__).resolve().parent
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha, dirty = None, ""
    return {
        "git_sha": sha,
        "git_dirty": bool(dirty),
        "versions": versions,
        **_hardware(),
    }


def run_context(threads: int, device: str) -> dict[str, Any]:
    """What a run was computed with besides its code: ``threads`` (the run's CPU threads, PyTorch's and
    LightGBM's), ``device`` (``cpu``, or the CUDA device's name), the package versions and the
    machine (``machine``, ``cpu``, ``cpu_capability``: :func:`_hardware`); recorded as ``context`` in
    every run file (results can differ between thread counts and between CPU instruction sets). Runs
    stored before the CPU was recorded have ``machine`` only."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    return {"threads": threads, "device": name, "versions": _versions(), **_hardware()}
