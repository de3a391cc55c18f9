"""Start-up benchmark (not a test): `python -m ctxrank --version` and `--help` against `python -c pass`.

Reference: the bare interpreter, ``python -c pass``, measured in the same run with the same Python and
environment. Each command runs ``--repeats`` times in a fresh subprocess (interleaved: pass, --version,
--help, pass, ...), after one unrecorded warm-up round that fills the file-system cache; the median
wall time of each is reported, with the difference to the bare interpreter and the ratio to it.
Target: under 0.3 s above the bare interpreter on 2 cores; neither command imports
torch, pandas, SciPy, LightGBM or scikit-learn (``tests/cli/test_main.py`` checks that).

    .venv/bin/python benchmarks/bench_startup.py [--repeats 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import add_common_args, summarize
from _report import emit_json, machine_info, machine_line, markdown_table

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.3
COMMANDS = {
    "python -c pass (reference)": ["-c", "pass"],
    "python -m ctxrank --version": ["-m", "ctxrank", "--version"],
    "python -m ctxrank --help": ["-m", "ctxrank", "--help"],
}


def _env() -> dict[str, str]:
    """This environment, with the repository's src/ first on PYTHONPATH (the ctxrank measured)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    return env


def _time_once(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure(repeats: int) -> dict[str, dict]:
    """Median (and spread) wall time of each command, ``repeats`` interleaved rounds after a warm-up."""
    env = _env()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for args in COMMANDS.values():  # warm-up, not recorded
        _time_once(args, env)
    for _ in range(repeats):
        for name, args in COMMANDS.items():
            times[name].append(_time_once(args, env))
    return {name: summarize(t) for name, t in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, threads=False, isolate=False)
    ap.add_argument("--repeats", type=int, default=20, help="runs of each command (median kept; default 20)")
    args = ap.parse_args(argv)
    repeats = 3 if args.quick else args.repeats
    info = machine_info()
    print(machine_line(info), flush=True)
    results = measure(repeats)
    ref = results["python -c pass (reference)"]["median_s"]
    rows = []
    for name, r in results.items():
        r["over_reference_s"] = r["median_s"] - ref
        r["ratio_to_reference"] = r["median_s"] / ref
        rows.append(
            [name, f"{r['median_s']:.3f}", f"{r['min_s']:.3f}", f"{r['over_reference_s']:+.3f}",
             f"{r['ratio_to_reference']:.2f}x"]
        )  # fmt: skip
    print(f"\nwall time of a fresh process, median of {repeats} runs each (interleaved)\n")
    print(markdown_table(["command", "median s", "min s", "minus reference s", "ratio"], rows))
    verdicts = {
        name: results[name]["over_reference_s"] < TARGET_S for name in COMMANDS if "ctxrank" in name
    }
    for name, ok in verdicts.items():
        print(f"{name}: {'within' if ok else 'OVER'} the target of {TARGET_S} s above the bare interpreter")
    blob = {
        "benchmark": "bench_startup",
        "quick": args.quick,
        "repeats": repeats,
        "machine": info,
        "target_over_reference_s": TARGET_S,
        "results": results,
        "within_target": verdicts,
    }
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
