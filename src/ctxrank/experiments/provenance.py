"""Where a result comes from: the code (git commit, ctxrank version) and the environment (package
versions, machine), recorded in every run file and in ``results.json``."""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

__all__ = ["code_version", "environment", "run_context"]


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


def environment() -> dict[str, Any]:
    """The git commit (and whether the checkout has changes), package versions and machine."""
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
        "machine": _machine(),
    }


def run_context(threads: int, device: str) -> dict[str, Any]:
    """What a run was computed with besides its code: ``threads`` (the run's CPU threads, PyTorch's and
    LightGBM's), ``device`` (``cpu``, or the CUDA device's name), the package versions and the
    machine; recorded as ``context`` in every run file (results can differ between thread counts)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    return {"threads": threads, "device": name, "versions": _versions(), "machine": _machine()}
