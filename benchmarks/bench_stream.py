"""Streaming training benchmark (not a test): Parquet shards streamed (``ctxrank.data.stream``) against the
same data held in memory, at two data sizes.

Data: synthetic MSLR-shaped queries (``_common.synthetic_ranking_data``: ``--items`` items, 136 features)
at ``--queries`` and 4x that many queries, written as 8 Parquet shards (``write_shards``). Each case runs
in a fresh subprocess (``_common.run_case``) and does one ``ctxrank train``-like run of the MLP (listnet
loss, ``train.batch_size`` 32, one epoch, 20 validation queries in memory): fit the ``minmax``
normalizer, then train.

* ``stream``: ``ShardStream.open`` + ``fit_stream`` (one pass) + one epoch read from the shards
  (shuffle buffer ``--shuffle-buffer`` queries, reads of 16,384 rows).
* ``memory``: the shards read into one RankingData (the in-memory path's data), ``fit`` + ``transform``
  + one epoch of ``iterate_batches`` from memory.

Before the measured work every case imports pandas and pyarrow and trains one epoch on the validation queries
(torch's first ``fit`` imports its compiler stack and sets up its allocator once: ~170 MiB that no data size
changes). Reported per case: the peak resident set over the resident set before the work
(``peak_rss_delta_mib``; see ``benchmarks/_common.py``), its multiple of the decoded float32 feature matrix,
and the epoch's queries per second. The reference of the speed ratio is the in-memory epoch measured in the
same process as the streamed one (a ``ratio`` case: both epochs, alternately, ``--repeats`` times, best of
each): ratio = streamed queries/s / in-memory queries/s.

    .venv/bin/python benchmarks/bench_stream.py [--queries 2000] [--threads 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import PeakRSS, add_common_args, child_main, run_case, synthetic_ranking_data
from _report import emit_json, machine_info, machine_line, markdown_table

FEATURES, SHARDS, READ_ROWS = 136, 8, 16_384


def _part(n_queries: int, items: int, seed: int):
    """Synthetic queries with ids unique across parts (a query id is in one shard only)."""
    import dataclasses

    import numpy as np

    data = synthetic_ranking_data(n_queries, items, FEATURES, seed=seed)
    return dataclasses.replace(data, query_ids=np.array([f"s{seed}-q{i}" for i in range(n_queries)]))


def _setup(spec: dict):
    """The model, loss, config and validation split of a case (built before the measured work)."""
    import functools

    import torch

    from ctxrank.config import TrainConfig
    from ctxrank.losses import get_loss
    from ctxrank.registry import make_model

    torch.set_num_threads(spec["threads"])
    valid = synthetic_ranking_data(20, spec["items"], FEATURES, seed=9)
    import pandas  # noqa: F401  (imported before the measured work, as the CLI has it by then)
    import pyarrow.parquet  # noqa: F401

    model = make_model("mlp", FEATURES, {})
    config = TrainConfig(max_epochs=1, batch_size=32, seed=0, threads=spec["threads"])
    loss_fn = functools.partial(get_loss("listnet"))
    _epoch(model, loss_fn, valid, valid, config)  # warm-up: torch's first fit imports and allocates once
    return model, loss_fn, config, valid


def _stream(spec: dict):
    from ctxrank.data.stream import ShardStream

    return ShardStream.open(spec["shards"], shuffle_buffer=spec["shuffle_buffer"], read_rows=READ_ROWS)


def _epoch(model, loss_fn, train, valid, config) -> float:
    from ctxrank.training.loop import fit

    t = time.perf_counter()
    fit(model, loss_fn, train, valid, config, progress=False)
    return time.perf_counter() - t


def run(spec: dict, measure_memory: bool) -> dict:
    """One case: ``stream`` or ``memory`` (time and peak memory), or ``ratio`` (both epochs, same process)."""
    from ctxrank.data.ranking_data import RankingData
    from ctxrank.data.transforms import make_transform

    model, loss_fn, config, valid = _setup(spec)
    valid = make_transform("minmax").fit(valid).transform(valid)
    if spec["mode"] == "ratio":
        stream = _stream(spec)
        stream = stream.with_transform(make_transform("minmax").fit_stream(stream.chunks()))
        data = RankingData.concat(list(stream.chunks()))  # normalized already
        times = {"stream": [], "memory": []}
        for _ in range(spec["repeats"]):
            times["stream"].append(_epoch(model, loss_fn, stream, valid, config))
            times["memory"].append(_epoch(model, loss_fn, data, valid, config))
        return {"queries": data.n_queries, **{f"{k}_s": min(v) for k, v in times.items()}}
    with PeakRSS(measure_memory) as mem:
        t = time.perf_counter()
        stream = _stream(spec)
        if spec["mode"] == "stream":
            train = stream.with_transform(make_transform("minmax").fit_stream(stream.chunks()))
        else:
            raw = RankingData.concat(list(stream.chunks()))
            train = make_transform("minmax").fit(raw).transform(raw)
            del raw
        prepared = time.perf_counter() - t
        seconds = _epoch(model, loss_fn, train, valid, config)
    return {"queries": train.n_queries, "prepare_s": prepared, "epoch_s": seconds, **mem.as_dict()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--queries", type=int, default=2000, help="queries of the smaller size (default 2000)")
    ap.add_argument("--items", type=int, default=100, help="items a query (default 100)")
    ap.add_argument("--shuffle-buffer", type=int, default=256, help="queries (default 256)")
    ap.add_argument("--repeats", type=int, default=2, help="epochs of each path in the ratio case")
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child, run)
    if args.quick:
        args.queries, args.items, args.repeats = 40, 10, 1
    info = machine_info(args.threads)
    print(machine_line(info), flush=True)
    with tempfile.TemporaryDirectory(prefix="ctxrank-bench-stream-") as tmp:  # shards deleted after the run
        rows, results = _measure(args, Path(tmp))
    header = [
        "queries x items",
        "features MiB",
        "path",
        "peak RSS delta MiB",
        "x features",
        "queries/s (epoch)",
    ]
    print(markdown_table(header, rows))
    emit_json({"quick": args.quick, "machine": info, "results": results}, args.json, echo=False)
    return 0


def _measure(args: argparse.Namespace, work: Path) -> tuple[list[list], list[dict]]:
    """Both sizes: write the shards, run the cases; (table rows, results)."""
    from ctxrank.data.stream import write_shards

    rows, results = [], []
    for factor in (1, 4):
        n = args.queries * factor
        directory = work / f"q{n}"
        parts = (_part(n // 4, args.items, seed) for seed in range(4))  # a quarter in memory at a time
        write_shards(parts, directory, shards=SHARDS)
        decoded_mib = n * args.items * FEATURES * 4 / 2**20
        spec = {
            "shards": str(directory),
            "items": args.items,
            "threads": args.threads,
            "shuffle_buffer": args.shuffle_buffer,
            "repeats": args.repeats,
        }
        case = {
            mode: run_case(Path(__file__), {**spec, "mode": mode}, args.isolate, run)
            for mode in ("stream", "memory")
        }
        ratio = run_case(Path(__file__), {**spec, "mode": "ratio"}, args.isolate, run)
        qps = {k: ratio["queries"] / ratio[f"{k}_s"] for k in ("stream", "memory")}
        result = {
            "queries": n,
            "items": args.items,
            "features": FEATURES,
            "decoded_features_mib": decoded_mib,
            "disk_mib": sum(p.stat().st_size for p in directory.iterdir()) / 2**20,
            "cases": case,
            "same_process": {**ratio, "stream_qps": qps["stream"], "memory_qps": qps["memory"]},
            "speed_ratio_stream_over_memory": qps["stream"] / qps["memory"],
        }
        results.append(result)
        for mode in ("stream", "memory"):
            peak = case[mode]["peak_rss_delta_mib"]
            shown = ["-", "-"] if peak is None else [f"{peak:.0f}", f"{peak / decoded_mib:.2f}"]
            rows.append([f"{n:,} x {args.items}", f"{decoded_mib:.0f}", mode, *shown, f"{qps[mode]:.0f}"])
        ratio_text = f"{result['speed_ratio_stream_over_memory']:.2f}"
        rows.append(["", "", "ratio stream / memory", "", "", ratio_text])
    return rows, results


if __name__ == "__main__":
    sys.exit(main())
