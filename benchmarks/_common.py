"""Shared measurement helpers of the speed benchmarks (imported by them; not a benchmark itself).

* **Timings**: ``time.perf_counter`` around each measured call, after warm-up calls that are not
  recorded; :func:`summarize` gives the median (= p50), p99, min and mean of the recorded times.
* **Peak memory**: in a FRESH subprocess per configuration (:func:`run_case`), so that one configuration
  cannot inherit another's heap. Just before the measured work the process's peak-RSS mark is reset to
  its current resident set (Linux: ``echo 5 > /proc/self/clear_refs``) and that resident set is read
  (``VmRSS``); just after, the peak (``VmHWM``, which ``getrusage(...).ru_maxrss`` also reports) is
  read. ``peak_rss_delta_mib`` = peak - resident set before: the extra resident memory the work needed
  at its peak (activations, gradients, optimizer state, a parser's intermediates) over what the process
  already held (interpreter, libraries, inputs, model); ``peak_rss_mib`` = the absolute peak during the
  work. Where the mark cannot be reset, the delta is that of ``ru_maxrss`` (the peak so far, so work
  that stays under an earlier transient peak reads as 0); ``peak_memory_method`` says which was used.
  ``tracemalloc`` is not used: it sees only Python's allocator, not torch's or NumPy's C allocations.
  With ``--isolate none`` every configuration runs in the benchmark's own process (faster, for smoke
  tests) and the peak-memory fields are ``None``: memory freed by an earlier configuration but kept by
  the C allocator would hide part of a later one's growth.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ISOLATE_CHOICES = ("subprocess", "none")
DEVICE_CHOICES = ("cpu", "cuda")


def maxrss_mib() -> float:
    """The process's peak resident set so far, MiB (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _proc_status_mib(key: str) -> float | None:
    """``VmRSS`` / ``VmHWM`` of this process from ``/proc/self/status``, MiB (None off Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 2**10
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the peak-RSS mark to the current resident set (Linux >= 4.0); False when not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class PeakRSS:
    """``with PeakRSS(enabled) as mem: work()`` -> ``mem.delta_mib`` (peak resident set during the block
    minus the resident set at its start) and ``mem.peak_mib`` (the peak); None when not ``enabled``."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.delta_mib: float | None = None
        self.peak_mib: float | None = None
        self.method: str | None = None
        self._base = 0.0

    def __enter__(self) -> PeakRSS:
        if self.enabled:
            import gc

            gc.collect()
            rss = _proc_status_mib("VmRSS")
            if rss is not None and _reset_peak_rss():
                self.method = "VmHWM after clear_refs reset - VmRSS before"
                self._base = _proc_status_mib("VmRSS") or rss
            else:
                self.method = "ru_maxrss after - ru_maxrss before"
                self._base = maxrss_mib()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            hwm = _proc_status_mib("VmHWM") if self.method.startswith("VmHWM") else None
            self.peak_mib = hwm if hwm is not None else maxrss_mib()
            self.delta_mib = max(0.0, self.peak_mib - self._base)

    def as_dict(self) -> dict:
        return {
            "peak_rss_delta_mib": self.delta_mib,
            "peak_rss_mib": self.peak_mib,
            "peak_memory_method": self.method,
        }


class PeakCUDA:
    """``with PeakCUDA(device) as gpu: work()`` -> ``gpu.delta_mib``: the peak of the CUDA memory that
    torch allocated during the block minus what it held at its start (``torch.cuda.max_memory_allocated``
    after ``reset_peak_memory_stats``); None on the CPU. Tensors only, not the caching allocator's
    reserve nor the CUDA context."""

    def __init__(self, device: str) -> None:
        self.enabled = device != "cpu"
        self.delta_mib: float | None = None
        self._base = 0

    def __enter__(self) -> PeakCUDA:
        if self.enabled:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            import torch

            torch.cuda.synchronize()
            self.delta_mib = (torch.cuda.max_memory_allocated() - self._base) / 2**20

    def as_dict(self) -> dict:
        return {"peak_cuda_delta_mib": self.delta_mib} if self.enabled else {}


def cuda_info(device: str) -> dict:
    """The GPU a ``--device cuda`` run timed on (name, memory, CUDA version); ``{}`` on the CPU."""
    if device == "cpu":
        return {}
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device on this machine")
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "cuda": torch.version.cuda,
        "gpu_multiprocessors": props.multi_processor_count,
    }


def summarize(times: Sequence[float]) -> dict:
    """Seconds -> ``{"n", "median_s", "p50_s", "p99_s", "min_s", "mean_s"}`` (linear interpolation)."""
    t = np.asarray(times, dtype=np.float64)
    if t.size == 0:
        raise ValueError("no timings recorded")
    p50, p99 = np.percentile(t, [50, 99])
    return {
        "n": int(t.size),
        "median_s": float(p50),
        "p50_s": float(p50),
        "p99_s": float(p99),
        "min_s": float(t.min()),
        "mean_s": float(t.mean()),
    }


def time_training_steps(model, loss_fn, optimizer, next_batch: Callable[[], object], steps: int, warmup: int,
                        label: str, device: str = "cpu") -> list[float]:
    """Seconds of each training step (forward, loss, backward, optimizer step; the loss read back so the
    step has finished, on a GPU too) after the first ``warmup``; ``next_batch()`` gives each step's
    batch, moved to ``device`` inside the timed step (as ``fit`` moves it)."""
    import torch

    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        batch = next_batch()
        loss = model.training_loss(batch if device == "cpu" else batch.to(device), loss_fn)
        if not torch.isfinite(loss):
            raise RuntimeError(f"{label}: non-finite loss at step {i}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def run_case(script: str | Path, spec: dict, isolate: str, local: Callable[[dict, bool], dict]) -> dict:
    """Run one benchmark configuration and return its result dict.

    ``isolate="subprocess"``: ``python SCRIPT --child JSON`` in a fresh interpreter (same environment);
    the script must answer ``--child`` by printing ``json.dumps(local(spec, True))`` as its last line
    (:func:`child_main`). ``isolate="none"``: ``local(spec, False)`` in this process.
    """
    if isolate == "none":
        return local(spec, False)
    if isolate != "subprocess":
        raise ValueError(f"isolate must be one of {ISOLATE_CHOICES}, got {isolate!r}")
    proc = subprocess.run(
        [sys.executable, str(script), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"benchmark case {spec} failed (exit {proc.returncode}):\n"
            f"{proc.stderr[-4000:]}{proc.stdout[-2000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_main(spec_json: str, local: Callable[[dict, bool], dict]) -> int:
    """The ``--child`` side of :func:`run_case`: run one configuration, print its result as JSON."""
    print(json.dumps(local(json.loads(spec_json), True)), flush=True)
    return 0


def synthetic_ranking_data(n_queries: int, list_size: int, n_features: int, seed: int = 0):
    """An in-memory MSLR-shaped :class:`RankingData`: ``n_queries`` lists of ``list_size`` items,
    ``n_features`` uniform [0, 1) features (float32, as after min-max scaling), labels 0..4 cut from a
    noisy linear utility: the recipe of ``ctxrank.data.synth.write_synthetic_letor`` without the text
    file (speed does not depend on the values; this skips writing and parsing).
    """
    from ctxrank.data.ranking_data import RankingData

    rng = np.random.default_rng(seed)
    n = n_queries * list_size
    x = rng.random((n, n_features), dtype=np.float32)
    w = rng.normal(size=n_features) / np.sqrt(n_features)
    utility = x @ w + rng.normal(scale=0.3, size=n)
    cuts = np.quantile(utility, np.linspace(0, 1, 6)[1:-1] ** 0.5)
    labels = np.searchsorted(cuts, utility).astype(np.float32)
    return RankingData(
        features=x,
        labels=labels,
        query_ids=np.array([f"q{i}" for i in range(n_queries)]),
        query_offsets=np.arange(0, n + 1, list_size, dtype=np.int64),
        feature_names=tuple(f"f{j + 1}" for j in range(n_features)),
        source=f"synthetic MSLR-shaped (seed={seed})",
    )


def add_common_args(ap, *, threads: bool = True, isolate: bool = True, device: bool = False) -> None:
    """The options every speed benchmark shares: --threads, --quick, --json, --isolate, --child, and
    --device where the benchmark can time on a GPU."""
    import argparse

    if threads:
        ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: checks the script runs (seconds)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    if isolate:
        ap.add_argument(
            "--isolate",
            choices=ISOLATE_CHOICES,
            default="subprocess",
            help="run each configuration in a fresh subprocess (default; measures its peak memory) "
            "or in this process (none: faster, no peak memory)",
        )
        ap.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)  # internal: one configuration
    if device:
        ap.add_argument(
            "--device",
            choices=DEVICE_CHOICES,
            default="cpu",
            help="where the models run (default cpu); cuda: the first GPU, its peak tensor memory recorded",
        )
