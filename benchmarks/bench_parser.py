"""Parser benchmark: ctxrank.read_letor vs scikit-learn load_svmlight_file(query_id=True).

Reference: scikit-learn's Cython SVMlight parser, measured in the same process on the same files.
Files: the five embedded MQ2008 files (gzip) and a synthetic MSLR-shaped plain-text file
(136 features, >= 200 MB, written by ctxrank.data.synth). Peak memory of each parser is measured in a
fresh subprocess (ru_maxrss delta over the interpreter's baseline), so one run cannot inflate another.
Also times the cached reload.

    .venv/bin/python benchmarks/bench_parser.py [--mb 200] [--out bench-out]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MQ2008 = ROOT / "src" / "ctxrank" / "datasets" / "mq2008"

CHILD = r"""
import json, resource, sys, time
import numpy as np
which, path = sys.argv[1], sys.argv[2]
from sklearn.datasets import load_svmlight_file
from ctxrank.data.letor import read_letor
warm = sys.argv[3]  # parse a small file first so lazy imports do not count as parsing memory
load_svmlight_file(warm, query_id=True, zero_based=False)
read_letor(warm, cache=False)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if which == "sklearn":
    x, y, q = load_svmlight_file(path, query_id=True, zero_based=False)
    x = x.toarray().astype(np.float32)  # the same dense float32 result ctxrank returns
    shape = x.shape
else:
    d = read_letor(path, cache=False)
    shape = d.features.shape
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(json.dumps({"seconds": dt, "peak_kb": peak, "shape": list(shape)}))
"""


def run_child(which: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, which, str(path), str(MQ2008 / "S4.txt.gz")],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def best_of(which: str, path: Path, repeats: int) -> dict:
    runs = [run_child(which, path) for _ in range(repeats)]
    best = min(runs, key=lambda r: r["seconds"])
    best["peak_kb"] = max(r["peak_kb"] for r in runs)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200.0, help="size of the synthetic file in MB (>= 200)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per file and parser (best time kept)")
    ap.add_argument("--keep", type=Path, default=None, help="directory to keep the synthetic file in")
    args = ap.parse_args()

    from ctxrank.data.letor import read_letor
    from ctxrank.data.synth import write_synthetic_letor

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="ctxrank-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    synth = workdir / f"synthetic-mslr-{int(args.mb)}mb.txt"
    if not synth.exists():
        n_queries = max(1, int(args.mb * 1e6 / (100 * 1330)))  # about 1,330 bytes a row
        t = time.perf_counter()
        write_synthetic_letor(synth, n_queries=n_queries, list_size=100, n_features=136, seed=0)
        print(f"wrote {synth} ({synth.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.0f} s")

    files = [MQ2008 / f"S{i}.txt.gz" for i in range(1, 6)] + [synth]
    rows = []
    print(
        f"{'file':<28}{'MB':>8}{'sklearn s':>11}{'ctxrank s':>11}{'speed ratio':>13}"
        f"{'sk peak MB':>12}{'ctx peak MB':>13}{'dense MB':>10}{'peak/dense':>12}"
    )
    for f in files:
        mb = f.stat().st_size / 1e6
        sk = best_of("sklearn", f, args.repeats)
        cx = best_of("ctxrank", f, args.repeats)
        assert sk["shape"] == cx["shape"], (sk, cx)
        dense_mb = np.prod(cx["shape"]) * 4 / 1e6
        ratio = sk["seconds"] / cx["seconds"]
        row = {
            "file": f.name,
            "mb_on_disk": mb,
            "sklearn_s": sk["seconds"],
            "ctxrank_s": cx["seconds"],
            "speed_ratio_sklearn_over_ctxrank": ratio,
            "sklearn_peak_mb": sk["peak_kb"] / 1e3,
            "ctxrank_peak_mb": cx["peak_kb"] / 1e3,
            "dense_mb": dense_mb,
        }
        rows.append(row)
        print(
            f"{f.name:<28}{mb:>8.1f}{sk['seconds']:>11.3f}{cx['seconds']:>11.3f}{ratio:>12.2f}x"
            f"{sk['peak_kb'] / 1e3:>12.0f}{cx['peak_kb'] / 1e3:>13.0f}{dense_mb:>10.0f}"
            f"{cx['peak_kb'] / 1e3 / dense_mb:>12.2f}"
        )
    mq = [r for r in rows if r["file"].startswith("S")]
    total = sum(r["sklearn_s"] for r in mq) / sum(r["ctxrank_s"] for r in mq)
    print(f"MQ2008 S1..S5 total: ctxrank is {total:.2f}x the speed of scikit-learn")
    big = rows[-1]
    print(
        f"synthetic: {big['mb_on_disk'] / big['ctxrank_s']:.0f} MB/s ctxrank vs "
        f"{big['mb_on_disk'] / big['sklearn_s']:.0f} MB/s scikit-learn "
        f"(ratio {big['speed_ratio_sklearn_over_ctxrank']:.2f}x)"
    )

    # cached reload
    cache = Path(tempfile.mkdtemp(prefix="ctxrank-bench-cache-"))  # empty: the first load must parse
    os.environ["CTXRANK_CACHE_DIR"] = str(cache)
    t = time.perf_counter()
    read_letor(synth)
    first = time.perf_counter() - t
    t = time.perf_counter()
    read_letor(synth)
    again = time.perf_counter() - t
    print(
        f"cache: first load (parse + write) {first:.2f} s, cached reload {again:.2f} s "
        f"({first / again:.1f}x faster)"
    )
    print(json.dumps({"rows": rows, "cache_first_s": first, "cache_reload_s": again}))
    shutil.rmtree(cache)
    if args.keep is None:
        for p in sorted(workdir.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        workdir.rmdir()


if __name__ == "__main__":
    main()
