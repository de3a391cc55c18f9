"""Parser benchmark (not a test): ctxrank.read_letor vs scikit-learn load_svmlight_file(query_id=True).

Reference: scikit-learn's Cython SVMlight parser, ``load_svmlight_file(path, query_id=True,
zero_based=False)`` followed by ``.toarray().astype(float32)`` so both produce the same dense float32
matrix, measured in the same run on the same files. Files: the five embedded MQ2008 files (gzip) and a
synthetic MSLR-shaped plain-text file (136 features, 100 items a query, ``--rows`` rows, default
1,000,000, 1.69 GB; written by ``ctxrank.data.synth.write_synthetic_letor``, the same file as
``ctxrank synth letor --queries 10000 --items 100 --features 136 --seed 0 --out FILE``, which ``--file``
accepts instead).

Each parse runs in a fresh subprocess (best time of ``--repeats`` runs, largest peak), after a warm-up
parse of a small file so that lazy imports count neither as parsing time nor as parsing memory. Peak
memory: the peak resident set during the parse minus the resident set before it (see
``benchmarks/_common.py``; the result array is included, so compare with the dense size). ``read_letor``
runs with ``cache=False`` (a real parse). Cached reload: the first ``read_letor`` with the binary cache
on (parse + cache write, once, into an empty cache directory), then ``--repeats`` reloads from the
cache, each in a fresh subprocess (time and peak memory). Content hash: the cache's key hashes the
whole file (sha256, ``ctxrank.data.cache.file_key``) on every cached load and twice on a first load;
its time on the synthetic file is reported against ctxrank's parse and the cached reload.

Reported: seconds, MB/s (file size on disk / seconds, 1 MB = 1e6 bytes), the speed ratio scikit-learn
time / ctxrank time, peak memory of both and its multiple of the dense float32 result, and the cached
reload time against the first load and against scikit-learn's parse, and the content hash's time as a
ratio of the parse time and of the reload time.

    .venv/bin/python benchmarks/bench_parser.py [--rows 1000000] [--repeats 3] [--keep DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import PeakRSS, add_common_args, child_main, run_case
from _report import emit_json, machine_info, machine_line, markdown_table

ROOT = Path(__file__).resolve().parents[1]
MQ2008 = ROOT / "src" / "ctxrank" / "datasets" / "mq2008"
WARM = MQ2008 / "S4.txt.gz"  # the small file parsed first by every subprocess
BYTES_PER_ROW = 1330  # about, for 136 features written with 6 significant digits


def parse_case(spec: dict, measure_memory: bool) -> dict:
    """One parse of ``spec["path"]`` by ``spec["which"]``: ``sklearn``, ``ctxrank`` (no cache),
    ``ctxrank-first`` (cache on, empty: parse + write), ``ctxrank-cached`` (reload from the cache) or
    ``hash`` (the cache key's content hash alone)."""
    from sklearn.datasets import load_svmlight_file

    from ctxrank.data.letor import read_letor

    load_svmlight_file(spec["warm"], query_id=True, zero_based=False)
    read_letor(spec["warm"], cache=False)
    which, path = spec["which"], spec["path"]
    with PeakRSS(measure_memory) as mem:
        t = time.perf_counter()
        if which == "sklearn":
            x, _, _ = load_svmlight_file(path, query_id=True, zero_based=False)
            x = x.toarray().astype(np.float32)  # the same dense float32 result ctxrank returns
            shape = x.shape
        elif which == "ctxrank":
            shape = read_letor(path, cache=False).features.shape
        elif which in ("ctxrank-first", "ctxrank-cached"):
            shape = read_letor(path, cache=True, cache_dir=spec["cache_dir"]).features.shape
        elif which == "hash":
            from ctxrank.data.cache import file_key

            file_key(Path(path))
            shape = ()
        else:
            raise ValueError(f"unknown parser {which!r}")
        seconds = time.perf_counter() - t
    return {"seconds": seconds, "shape": list(shape), **mem.as_dict()}


def best_of(spec: dict, repeats: int, isolate: str) -> dict:
    """Best time of ``repeats`` runs; the largest peak memory of them."""
    runs = [run_case(Path(__file__), spec, isolate, parse_case) for _ in range(repeats)]
    best = dict(min(runs, key=lambda r: r["seconds"]))
    peaks = [r["peak_rss_delta_mib"] for r in runs if r["peak_rss_delta_mib"] is not None]
    best["peak_rss_delta_mib"] = max(peaks) if peaks else None
    best["runs_s"] = [r["seconds"] for r in runs]
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, threads=False)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the synthetic file (default 1M)")
    ap.add_argument(
        "--mb", type=float, default=None, help="size of the synthetic file in MB instead of --rows"
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs per file and parser (best time kept)")
    ap.add_argument(
        "--keep", type=Path, default=None, help="directory to keep (and reuse) the synthetic file"
    )
    ap.add_argument("--file", type=Path, default=None, help="an existing synthetic LETOR file to use instead")
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child, parse_case)
    mq_files = [MQ2008 / f"S{i}.txt.gz" for i in range(1, 6)]
    if args.quick:
        args.rows, args.mb, args.repeats, mq_files = 2000, None, 1, mq_files[:1]

    from ctxrank.data.synth import write_synthetic_letor

    info = machine_info()
    print(machine_line(info), flush=True)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="ctxrank-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.file is not None:
        synth = args.file
    else:
        n_queries = max(1, round(args.mb * 1e6 / (100 * BYTES_PER_ROW))) if args.mb else -(-args.rows // 100)
        synth = workdir / f"synthetic-mslr-{n_queries * 100}rows.txt"
        if not synth.exists():
            t = time.perf_counter()
            write_synthetic_letor(synth, n_queries=n_queries, list_size=100, n_features=136, seed=0)
            print(f"wrote {synth} ({synth.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.0f} s")

    rows = []
    for f in [*mq_files, synth]:
        mb = f.stat().st_size / 1e6
        spec = {"path": str(f), "warm": str(WARM)}
        sk = best_of({**spec, "which": "sklearn"}, args.repeats, args.isolate)
        cx = best_of({**spec, "which": "ctxrank"}, args.repeats, args.isolate)
        assert sk["shape"] == cx["shape"], (sk, cx)
        dense_mib = float(np.prod(cx["shape"])) * 4 / 2**20
        row = {
            "file": f.name,
            "synthetic": f == synth,
            "rows": cx["shape"][0],
            "features": cx["shape"][1],
            "mb_on_disk": mb,
            "sklearn_s": sk["seconds"],
            "ctxrank_s": cx["seconds"],
            "sklearn_mb_per_s": mb / sk["seconds"],
            "ctxrank_mb_per_s": mb / cx["seconds"],
            "speed_ratio_sklearn_over_ctxrank": sk["seconds"] / cx["seconds"],
            "sklearn_peak_delta_mib": sk["peak_rss_delta_mib"],
            "ctxrank_peak_delta_mib": cx["peak_rss_delta_mib"],
            "dense_mib": dense_mib,
            "sklearn_runs_s": sk["runs_s"],
            "ctxrank_runs_s": cx["runs_s"],
        }
        rows.append(row)
        print(f"  {f.name}: scikit-learn {sk['seconds']:.3f} s, ctxrank {cx['seconds']:.3f} s", flush=True)

    # cached reload: first load into an empty cache (parse + write), then reloads
    cache = Path(tempfile.mkdtemp(prefix="ctxrank-bench-cache-"))
    spec = {"path": str(synth), "warm": str(WARM), "cache_dir": str(cache)}
    first = run_case(Path(__file__), {**spec, "which": "ctxrank-first"}, args.isolate, parse_case)
    again = best_of({**spec, "which": "ctxrank-cached"}, args.repeats, args.isolate)
    shutil.rmtree(cache)
    hashed = best_of({**spec, "which": "hash"}, args.repeats, args.isolate)

    def mib(x):
        return "–" if x is None else f"{x:,.0f}"

    def times(x, dense):
        return "–" if x is None or dense <= 0 else f"{x / dense:.2f}"

    header = [
        "file",
        "MB on disk",
        "rows",
        "scikit-learn s",
        "ctxrank s",
        "speed ratio (sk / ctx)",
        "sk MB/s",
        "ctx MB/s",
        "sk peak MiB",
        "ctx peak MiB",
        "dense MiB",
        "sk peak / dense",
        "ctx peak / dense",
    ]
    table = []
    for r in rows:
        table.append(
            [
                r["file"],
                f"{r['mb_on_disk']:.1f}",
                f"{r['rows']:,}",
                f"{r['sklearn_s']:.3f}",
                f"{r['ctxrank_s']:.3f}",
                f"{r['speed_ratio_sklearn_over_ctxrank']:.2f}x",
                f"{r['sklearn_mb_per_s']:.1f}",
                f"{r['ctxrank_mb_per_s']:.1f}",
                mib(r["sklearn_peak_delta_mib"]),
                mib(r["ctxrank_peak_delta_mib"]),
                f"{r['dense_mib']:.1f}",
                times(r["sklearn_peak_delta_mib"], r["dense_mib"]),
                times(r["ctxrank_peak_delta_mib"], r["dense_mib"]),
            ]
        )
    print()
    print(markdown_table(header, table))
    print()
    mq = [r for r in rows if not r["synthetic"]]
    total = sum(r["sklearn_s"] for r in mq) / sum(r["ctxrank_s"] for r in mq)
    print(f"MQ2008 ({len(mq)} files) total: ctxrank is {total:.2f}x the speed of scikit-learn")
    big = rows[-1]
    memory = ""
    if big["ctxrank_peak_delta_mib"] is not None:
        memory = (
            f"; peak memory {times(big['ctxrank_peak_delta_mib'], big['dense_mib'])}x (ctxrank) vs "
            f"{times(big['sklearn_peak_delta_mib'], big['dense_mib'])}x (scikit-learn) the dense array"
        )
    print(
        f"synthetic ({big['rows']:,} rows, {big['mb_on_disk']:.0f} MB): {big['ctxrank_mb_per_s']:.1f} MB/s "
        f"ctxrank vs {big['sklearn_mb_per_s']:.1f} MB/s scikit-learn "
        f"(ratio {big['speed_ratio_sklearn_over_ctxrank']:.2f}x){memory}"
    )
    cache_blob = {
        "first_load_s": first["seconds"],
        "first_load_peak_delta_mib": first["peak_rss_delta_mib"],
        "reload_s": again["seconds"],
        "reload_runs_s": again["runs_s"],
        "reload_peak_delta_mib": again["peak_rss_delta_mib"],
        "first_over_reload": first["seconds"] / again["seconds"],
        "sklearn_parse_over_reload": big["sklearn_s"] / again["seconds"],
        "hash_s": hashed["seconds"],
        "hash_over_parse": hashed["seconds"] / big["ctxrank_s"],
        "hash_over_reload": hashed["seconds"] / again["seconds"],
    }
    print(
        f"cache: first load (parse + write) {first['seconds']:.3f} s "
        f"(peak {mib(first['peak_rss_delta_mib'])} MiB), cached reload {again['seconds']:.3f} s "
        f"(peak {mib(again['peak_rss_delta_mib'])} MiB): {cache_blob['first_over_reload']:.1f}x faster "
        f"than the first load, {cache_blob['sklearn_parse_over_reload']:.1f}x faster than "
        "scikit-learn's parse"
    )
    print(
        f"content hash (the cache key, sha256 of the whole file): {hashed['seconds']:.3f} s "
        f"({big['mb_on_disk'] / hashed['seconds']:.0f} MB/s) = {cache_blob['hash_over_parse']:.3f}x "
        f"ctxrank's parse, {cache_blob['hash_over_reload']:.2f}x the cached reload (which includes it)"
    )
    blob = {
        "benchmark": "bench_parser",
        "quick": args.quick,
        "repeats": args.repeats,
        "isolate": args.isolate,
        "machine": info,
        "rows": rows,
        "cache": cache_blob,
    }
    emit_json(blob, args.json, echo=False)
    if args.keep is None and args.file is None:
        shutil.rmtree(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
