"""Batch-scoring benchmark (not a test): ``ctxrank predict --shards`` on Ray Data with 1 and 2 workers
against the single-process ``ctxrank predict --data`` of the same rows.

Setup: synthetic lists (``--queries`` x ``--items`` rows of 46 features), one Parquet table and the
same rows as ``--shards`` Parquet shards (``write_shards``: whole queries); a QILCM at its default widths
exported to ONNX (``ctxrank export``). Reference: ``ctxrank predict --model m.onnx --data table.parquet
--query-col qid`` in this process (onnxruntime, 1 thread: the same graph and session settings). Each
Ray row: ``score_shards`` (``predict --shards``) with W actors of 1 thread each, on a local Ray started
once before the timings (its start-up is reported apart, not in the rate); the output files are
removed between repeats. Reported: the median wall time of ``--repeats`` runs after a warm-up run,
rows/s, and the ratio of each rate to the reference's (measured in the same run, interleaved).

    .venv/bin/python benchmarks/bench_batch_predict.py [--queries 400 --items 50 --shards 8] [--json FILE]
    .venv/bin/python benchmarks/bench_batch_predict.py --from-json FILE | --publish
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import add_common_args, summarize
from _report import (
    add_stored_args,
    answer_stored_args,
    code_of_tree,
    emit_json,
    machine_info,
    machine_line,
    markdown_table,
    stored_blocks,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

N_FEATURES = 46
REFERENCE = "single process (reference)"
CASES = (REFERENCE, "Ray Data, 1 worker", "Ray Data, 2 workers")


def setup(work: Path, queries: int, items: int, shards: int) -> None:
    """``work/m.onnx`` (QILCM, default widths), ``work/table.parquet`` and ``work/shards/``."""
    import torch

    from ctxrank.config import resolve_config
    from ctxrank.data.ranking_data import RankingData
    from ctxrank.data.stream import write_shards
    from ctxrank.data.transforms import make_transform
    from ctxrank.export import export_model
    from ctxrank.registry import make_model
    from ctxrank.training.checkpoint import save_checkpoint

    rng = np.random.default_rng(0)
    x = rng.random((queries * items, N_FEATURES)).astype(np.float32)
    names = [f"f{j + 1}" for j in range(N_FEATURES)]  # recorded in the ONNX file: columns read by name
    data = RankingData.from_arrays(
        x, rng.integers(0, 3, len(x)), group=[items] * queries, feature_names=names
    )
    torch.manual_seed(0)
    model = make_model("qilcm", N_FEATURES, {}).eval()
    transform = make_transform("minmax").fit(data)
    save_checkpoint(work / "qilcm", model, resolve_config(None, ["model=qilcm"]), transform, train_data=data)
    export_model(work / "qilcm", "onnx", work / "m.onnx")
    write_shards([data], work / "shards", shards=shards, shard_rows=None)
    import pandas as pd

    frames = [pd.read_parquet(p) for p in sorted((work / "shards").glob("*.parquet"))]
    pd.concat(frames, ignore_index=True).to_parquet(work / "table.parquet", index=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, threads=False, isolate=False)
    ap.add_argument("--queries", type=int, default=400, help="lists (default 400)")
    ap.add_argument("--items", type=int, default=50, help="items per list (default 50)")
    ap.add_argument("--shards", type=int, default=8, help="Parquet shards (default 8)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each (median kept; default 3)")
    add_stored_args(ap, "bench-batch-predict")
    args = ap.parse_args(argv)
    if answer_stored_args(args, BLOCK, block_text, report_text):
        return 0
    queries, repeats = (40, 1) if args.quick else (args.queries, args.repeats)
    info = machine_info(extra=(("onnxruntime", "onnxruntime"), ("ray", "ray")))
    print(machine_line(info), flush=True)
    import ray

    from ctxrank.cli import main as ctxrank
    from ctxrank.serving.batch import score_shards

    rows = queries * args.items
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        setup(work, queries, args.items, args.shards)
        t0 = time.perf_counter()
        # the Ray workers import this checkout's ctxrank too (set here, when the benchmark runs, never when
        # the module is imported: a test importing it must not change its process's environment)
        src = str(ROOT / "src")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        ray_start_s = time.perf_counter() - t0
        ray.data.DataContext.get_current().enable_progress_bars = False

        def reference() -> None:
            table = str(work / "table.parquet")
            argv = ["predict", "--model", str(work / "m.onnx"), "--data", table, "--query-col", "qid",
                    "-o", str(work / "s.txt"), "--overwrite", "--threads", "1"]  # fmt: skip
            assert ctxrank(argv) == 0

        def on_ray(workers: int):
            def run() -> None:
                shutil.rmtree(work / "out", ignore_errors=True)
                score_shards(work / "m.onnx", work / "shards", work / "out", workers=workers, threads=1)

            return run

        cases = dict(zip(CASES, (reference, on_ray(1), on_ray(2)), strict=True))
        times: dict[str, list[float]] = {name: [] for name in cases}
        for run in cases.values():  # warm-up, not recorded
            run()
        for _ in range(repeats):
            for name, run in cases.items():
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
        ray.shutdown()
    results = {name: {**summarize(t), "times_s": t} for name, t in times.items()}
    ref = rows / results[REFERENCE]["median_s"]
    for r in results.values():
        r["rows_per_s"] = rows / r["median_s"]
        r["ratio_to_reference"] = r["rows_per_s"] / ref
    blob = {
        "benchmark": "bench_batch_predict",
        "quick": args.quick,
        "code": code_of_tree(),
        "queries": queries,
        "items": args.items,
        "features": N_FEATURES,
        "shards": args.shards,
        "repeats": repeats,
        "ray_start_s": ray_start_s,
        "machine": info,
        "results": results,
    }
    print()
    print(report_text(blob), end="")
    emit_json(blob, args.json, echo=False)
    return 0


def report_text(blob: dict) -> str:
    """The table of a run, from its JSON ``blob`` (also a stored one: :func:`block_text`)."""
    rows = blob["queries"] * blob["items"]
    table = [[name, f"{r['median_s']:.3f}", f"{r['rows_per_s']:,.0f}", f"{r['ratio_to_reference']:.2f}x"]
             for name, r in blob["results"].items()]  # fmt: skip
    lines = [machine_line(blob["machine"]) + (f"; code {blob['code']}" if blob.get("code") else "")]
    lines.append(
        f"{blob['queries']} lists x {blob['items']} items ({rows:,} rows, {blob['shards']} shards), "
        f"QILCM ONNX, median of {blob['repeats']} runs; "
        f"Ray start-up {blob['ray_start_s']:.2f} s (not in the rates)"
    )
    lines += ["", markdown_table(["scoring", "median s", "rows/s", "rate vs reference"], table)]
    return "\n".join(lines) + "\n"


# A page states a stored run between ``<!-- bench-batch-predict: FILE -->`` and
# ``<!-- /bench-batch-predict -->``; ``--publish`` rewrites each block from its file.
BLOCK, block_text = stored_blocks("bench-batch-predict", report_text)


def evidence_problems(blob: dict) -> list[str]:
    """What a run lacks to be stored as evidence (empty: nothing): the three rows, 3 runs or more."""
    problems = []
    if tuple(blob["results"]) != CASES:
        problems.append(f"rows {list(blob['results'])}, expected {list(CASES)}")
    if blob["repeats"] < 3:
        problems.append(f"{blob['repeats']} runs of each row, at least 3 expected")
    if not blob.get("code"):
        problems.append("no code recorded")
    return problems


if __name__ == "__main__":
    raise SystemExit(main())
