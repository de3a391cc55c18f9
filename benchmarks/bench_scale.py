"""Full-size run benchmark (not a test): the re-ranking protocol end to end on MSLR-WEB30K-shaped
SYNTHETIC files, stage by stage, with time and peak memory.

``--factor F`` scales WEB30K's Fold1: ``F x 31,531`` queries split 3/1/1 into train / valid / test (at
``F = 1``: 18,919 / 6,306 / 6,306), list lengths drawn by ``ctxrank.data.synth.mslr_list_sizes``
(log-normal, mean about 120 items, one list of 1,251 in each file), grades 0-4 with MSLR-like shares
(``MSLR_LABEL_SHARES``: mostly 0 and 1), 136 features, no docid comments (as in the real files). The
files are what ``ctxrank synth letor --lengths mslr --labels mslr --no-docids`` writes; they are
SYNTHETIC: times and memory are meaningful, model quality is not.

Stages (all in one fresh subprocess per factor, in the order ``ctxrank train --model M --initial
lambdamart`` runs them; the LambdaMART model and its cross-fitted scores are shared by the four
re-rankers as an experiment shares them):

* ``import``: torch, LightGBM and ctxrank imported (the interpreter's baseline resident set);
* ``parse``: ``read_letor`` of the three files (no cache);
* ``lambdamart``: LambdaMART fitted on train, early-stopped on valid (``InitialRanker.fit``);
* ``crossfit``: ``--crossfit`` K-fold out-of-fold LambdaMART scores of the training split;
* ``cut``: valid and test scored, the three splits cut to each query's top ``--top-k`` (100);
* per model (``qilcm``, ``dlcm``, ``dcm``, ``attn``): ``M: train`` = ``run_training`` with
  ``train.max_epochs = 1`` (top-k cut, normalizer, one epoch, validation), then ``M: test`` = the test
  split predicted through LambdaMART + the re-ranker and evaluated (NDCG@1/3/5/10, MAP).

Per stage: wall seconds, CPU seconds of the process (``time.process_time``: all its threads; on a
shared machine the wall time counts the waits for a core, the CPU time does not), rows it processes,
the peak resident set during the stage (Linux: the ``VmHWM`` mark is reset at the stage's start,
``/proc/self/clear_refs``; else ``ru_maxrss``, the peak so far) and the resident set after it. Before
each stage the C heap's free memory is handed back (glibc ``malloc_trim``), so a model's stages do not
count what an earlier model freed: each reads as in its own ``ctxrank train`` process. The whole run's
peak is the largest stage peak; it is reported above the ``import`` baseline and as a multiple of the
three dense float32 feature matrices (``rows x 136 x 4`` bytes), the issue's target being at most 1.5x.

Linearity: with several ``--factor`` values, a second table gives each stage's CPU milliseconds and peak
memory above the baseline per 1,000 rows at each factor, and the growth exponents of the wall time, the
CPU time and the peak between the smallest and the largest factor (``log(y2 / y1) / log(rows2 /
rows1)``; 1 = linear in rows).

    .venv/bin/python benchmarks/bench_scale.py --factor 0.02 --factor 0.05 --threads 1 --json FILE
    .venv/bin/python benchmarks/bench_scale.py --from-json A.json --from-json B.json   # both reported
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import _proc_status_mib, _reset_peak_rss, add_common_args, maxrss_mib, run_case
from _report import (
    EVIDENCE,
    emit_json,
    machine_info,
    machine_line,
    markdown_table,
    publish_blocks,
    publish_docs,
)

WEB30K_QUERIES = 31_531  # MSLR-WEB30K: queries of the five folds (each fold: 3/5 train, 1/5 valid, 1/5 test)
N_FEATURES = 136
MODELS = ("qilcm", "dlcm", "dcm", "attn")
SPLITS = (("train", 3), ("valid", 1), ("test", 1))  # fifths of the queries
QUICK_FACTOR = 0.002  # 63 queries: seconds


def split_queries(factor: float) -> dict[str, int]:
    """Queries of each split at ``factor`` x WEB30K (at least 3 each: cross-fitting needs folds)."""
    total = WEB30K_QUERIES * factor
    return {name: max(3, round(total * fifths / 5)) for name, fifths in SPLITS}


def write_files(factor: float, directory: Path, seed: int) -> dict[str, str]:
    """The three MSLR-shaped synthetic files (seeds ``seed``, ``seed + 1``, ``seed + 2``)."""
    from ctxrank.data.synth import MSLR_LABEL_SHARES, mslr_list_sizes, write_synthetic_letor

    paths = {}
    for i, (name, n) in enumerate(split_queries(factor).items()):
        path = directory / f"{name}.txt"
        write_synthetic_letor(
            path,
            n_queries=n,
            n_features=N_FEATURES,
            seed=seed + i,
            docids=False,
            list_sizes=mslr_list_sizes(n, seed + i),
            label_shares=MSLR_LABEL_SHARES,
        )
        paths[name] = str(path)
    return paths


class Stages:
    """Times and peak memory of consecutive stages of one process."""

    def __init__(self, measure: bool) -> None:
        self.measure, self.rows = measure, []

    def run(self, name: str, rows: int, work):
        import gc

        from ctxrank._allocator import release_free_memory

        gc.collect()
        release_free_memory()  # what an earlier stage freed is not this stage's
        reset = self.measure and _reset_peak_rss()
        before = _proc_status_mib("VmRSS") if self.measure else None
        t, cpu = time.perf_counter(), time.process_time()
        out = work()
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        peak = None
        if self.measure:
            peak = (_proc_status_mib("VmHWM") if reset else None) or maxrss_mib()
        self.rows.append(
            {
                "stage": name,
                "seconds": seconds,
                "cpu_seconds": cpu,
                "rows": int(rows),
                "rss_before_mib": before,
                "peak_rss_mib": peak,
                "rss_after_mib": _proc_status_mib("VmRSS") if self.measure else None,
                "peak_method": None if not self.measure else ("VmHWM reset" if reset else "ru_maxrss"),
            }
        )
        return out


def protocol(spec: dict, measure: bool) -> dict:
    """One factor's run: the stages of the module docstring on ``spec["paths"]``."""
    import numpy as np

    if spec.get("malloc", "ctxrank") == "ctxrank":  # as the ctxrank command sets its own process
        from ctxrank._allocator import limit_heap_growth

        limit_heap_growth()
    stages = Stages(measure)
    t0 = time.perf_counter()

    def imports():
        import lightgbm  # noqa: F401
        import torch

        torch.set_num_threads(spec["threads"])
        from ctxrank.training import run  # noqa: F401

    stages.run("import", 0, imports)
    from ctxrank.config import resolve_config
    from ctxrank.data.letor import read_letor
    from ctxrank.metrics import evaluate_queries
    from ctxrank.training.rerank import InitialRanker, prepare_split
    from ctxrank.training.run import EVAL_METRICS, run_training

    paths = spec["paths"]
    data = stages.run("parse", 0, lambda: {name: read_letor(paths[name], cache=False) for name, _ in SPLITS})
    train, valid, test = data["train"], data["valid"], data["test"]
    stages.rows[-1]["rows"] = sum(d.n_items for d in data.values())
    dense_mib = sum(d.features.nbytes for d in data.values()) / 2**20

    def config(model: str):
        overrides = [
            "train.max_epochs=1",
            f"train.threads={spec['threads']}",
            f"train.seed={spec['seed']}",
            f"rerank.top_k={spec['top_k']}",
            f"rerank.crossfit={spec['crossfit']}",
        ]
        if spec.get("eval_batch_size") is not None:  # scoring batches: lists at once (memory, not scores)
            overrides.append(f"train.eval_batch_size={spec['eval_batch_size']}")
        overrides.append(f"train.release_memory={spec.get('release_memory', 'epoch')}")
        return resolve_config(None, overrides, model=model, rerank={"initial": "lambdamart"})

    ranker = InitialRanker.for_config(config(spec["models"][0]))
    stages.run("lambdamart", train.n_items + valid.n_items, lambda: ranker.fit(train, valid))
    stages.rows[-1]["trees"] = int(ranker.model.best_iteration_)  # early stopping: not a linear quantity
    stages.run("crossfit", train.n_items, lambda: ranker.train_scores(train, spec["crossfit"]))

    def cut():  # what every re-ranking run does first (run_training repeats it: 0.2 s at factor 0.05)
        scores = {"train": ranker.train_scores(train, spec["crossfit"])}
        scores.update({name: ranker.model.predict(data[name]) for name in ("valid", "test")})
        return {name: prepare_split(data[name], scores[name], k=spec["top_k"]).top.n_items for name in data}

    kept = stages.run("cut", sum(d.n_items for d in data.values()), cut)
    results = {}
    for model in spec["models"]:
        cfg = config(model)
        result = stages.run(
            f"{model}: train",
            train.n_items + valid.n_items,
            lambda cfg=cfg: run_training(cfg, train, valid, None, progress=False, initial=ranker),
        )

        def test_metrics(result=result):
            scores = result.predictor.predict(test)
            return evaluate_queries(scores, test.labels, test.query_offsets, EVAL_METRICS)

        per = stages.run(f"{model}: test", test.n_items, test_metrics)
        results[model] = {
            "best_valid_metric": result.summary.get("best_valid_metric"),
            "test_ndcg@10": float(np.nanmean(per["ndcg@10"])),
        }
        del result
    baseline = stages.rows[0]["rss_after_mib"]
    peaks = [r["peak_rss_mib"] for r in stages.rows if r["peak_rss_mib"] is not None]
    peak = max(peaks) if peaks else None
    return {
        "factor": spec["factor"],
        "queries": {name: int(d.n_queries) for name, d in data.items()},
        "rows": {name: int(d.n_items) for name, d in data.items()},
        "top_k_rows": kept,
        "longest_list": int(max(d.query_lengths.max() for d in data.values())),
        "dense_mib": dense_mib,
        "baseline_mib": baseline,
        "peak_rss_mib": peak,
        "peak_over_baseline_mib": None if peak is None else peak - baseline,
        "peak_over_dense": None if peak is None else (peak - baseline) / dense_mib,
        "lambdamart_trees": int(ranker.model.best_iteration_),
        "seconds_total": time.perf_counter() - t0,
        "stages": stages.rows,
        "models": results,
    }


def linearity(runs: list[dict]) -> list[dict]:
    """Per stage: seconds and peak above the baseline per 1,000 rows at each factor, and the growth
    exponent between the smallest and the largest factor (1 = linear in rows)."""
    out = []
    first, last = runs[0], runs[-1]
    for i, stage in enumerate(first["stages"]):
        if stage["stage"] == "import":
            continue
        row = {"stage": stage["stage"], "per_1k_rows": []}
        for run in runs:
            s = run["stages"][i]
            peak = None if s["peak_rss_mib"] is None else s["peak_rss_mib"] - run["baseline_mib"]
            row["per_1k_rows"].append(
                {
                    "factor": run["factor"],
                    "rows": s["rows"],
                    "ms": 1000 * s["seconds"] / s["rows"] * 1000,
                    "cpu_ms": 1000 * s["cpu_seconds"] / s["rows"] * 1000,
                    "peak_mib": None if peak is None else peak / s["rows"] * 1000,
                }
            )
        a, b = first["stages"][i], last["stages"][i]
        ratio = math.log(b["rows"] / a["rows"]) if b["rows"] != a["rows"] else None
        row["time_exponent"] = None if ratio is None else math.log(b["seconds"] / a["seconds"]) / ratio
        row["cpu_time_exponent"] = (
            None if ratio is None else math.log(b["cpu_seconds"] / a["cpu_seconds"]) / ratio
        )
        if ratio is not None and a["peak_rss_mib"] is not None:
            pa, pb = a["peak_rss_mib"] - first["baseline_mib"], b["peak_rss_mib"] - last["baseline_mib"]
            row["memory_exponent"] = math.log(pb / pa) / ratio if pa > 0 and pb > 0 else None
        else:
            row["memory_exponent"] = None
        out.append(row)
    return out


def _f(x, fmt: str = "{:,.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def load_runs(paths: list[str | Path]) -> list[dict]:
    """The runs of earlier ``--json`` files, each with its file's machine, by factor."""
    runs = []
    for path in paths:
        earlier = json.loads(Path(path).read_text())
        runs += [{"machine": earlier["machine"], **run} for run in earlier["runs"]]
    return sorted(runs, key=lambda run: run["factor"])


def report_text(runs: list[dict]) -> str:
    """What :func:`report` prints."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        report(runs)
    return buffer.getvalue()


# A page states a run's tables between ``<!-- bench-scale: FILE [FILE ...] -->`` and ``<!-- /bench-scale -->``
# (FILE: a ``--json`` file under evidence/bench/); ``--publish`` rewrites each block from its files, and
# tests/test_bench_evidence.py fails when a block differs from what its files give.
BLOCK = re.compile(r"(<!-- bench-scale: ([^>]*?) -->\n)(.*?)(<!-- /bench-scale -->)", re.S)


def block_text(names: str) -> str:
    """A block's content: :func:`report_text` of the named files of evidence/bench/."""
    return report_text(load_runs([EVIDENCE / name for name in names.split()])).strip("\n") + "\n"


def publish(page: Path) -> bool:
    """Rewrite ``page``'s bench-scale blocks from their files; whether anything changed."""
    return publish_blocks(page, BLOCK, block_text)


def _malloc_note(run: dict) -> str:
    """The allocator setting of a run made with ``--malloc`` (earlier runs: glibc's defaults, unsaid)."""
    malloc = run.get("settings", {}).get("malloc")
    if malloc is None:
        return ""
    note = "; glibc's defaults" if malloc == "system" else "; the ctxrank command's allocator setting"
    if run["settings"].get("release_memory", "epoch") != "epoch":
        note += f"; train.release_memory = {run['settings']['release_memory']}"
    return note


def report(runs: list[dict]) -> None:
    for run in runs:
        rows = run["rows"]
        if "machine" in run:
            print(f"\nfactor {run['factor']}: {machine_line(run['machine'])}")
        print(
            f"\nfactor {run['factor']}: {sum(run['queries'].values()):,} queries, rows train "
            f"{rows['train']:,} / valid {rows['valid']:,} / test {rows['test']:,}, longest list "
            f"{run['longest_list']:,}; dense float32 features {run['dense_mib']:,.0f} MiB; baseline "
            f"(imports) {_f(run['baseline_mib'], '{:,.0f}')} "
            f"MiB; peak {_f(run['peak_rss_mib'], '{:,.0f}')} MiB = baseline + "
            f"{_f(run['peak_over_dense'], '{:.2f}')}x dense; LambdaMART {run['lambdamart_trees']} trees; "
            f"{run['seconds_total']:,.0f} s in all{_malloc_note(run)}\n"
        )
        print(
            markdown_table(
                [
                    "stage",
                    "seconds",
                    "CPU seconds",
                    "rows",
                    "peak RSS MiB",
                    "peak - baseline MiB",
                    "RSS after MiB",
                ],
                [
                    [
                        s["stage"],
                        f"{s['seconds']:,.2f}",
                        f"{s['cpu_seconds']:,.2f}",
                        f"{s['rows']:,}",
                        _f(s["peak_rss_mib"], "{:,.0f}"),
                        _f(
                            None if s["peak_rss_mib"] is None else s["peak_rss_mib"] - run["baseline_mib"],
                            "{:,.0f}",
                        ),
                        _f(s["rss_after_mib"], "{:,.0f}"),
                    ]
                    for s in run["stages"]
                ],
            )
        )
    if len(runs) > 1:
        lin = linearity(runs)
        factors = [r["factor"] for r in runs]
        header = (
            ["stage"]
            + [f"CPU ms / 1k rows @{f}" for f in factors]
            + [f"peak MiB / 1k rows @{f}" for f in factors]
            + ["wall-time exponent", "CPU-time exponent", "memory exponent"]
        )
        print("\nper 1,000 rows (peak above the baseline); exponent 1 = linear in rows\n")
        print(
            markdown_table(
                header,
                [
                    [row["stage"]]
                    + [_f(p["cpu_ms"], "{:,.1f}") for p in row["per_1k_rows"]]
                    + [_f(p["peak_mib"], "{:,.2f}") for p in row["per_1k_rows"]]
                    + [
                        _f(row["time_exponent"], "{:.2f}"),
                        _f(row["cpu_time_exponent"], "{:.2f}"),
                        _f(row["memory_exponent"], "{:.2f}"),
                    ]
                    for row in lin
                ],
            )
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--factor",
        type=float,
        action="append",
        help="size as a fraction of WEB30K's Fold1 (repeat for a linearity table; default 0.02)",
    )
    ap.add_argument(
        "--models", default=",".join(MODELS), help=f"re-rankers, comma-separated ({','.join(MODELS)})"
    )
    ap.add_argument("--crossfit", type=int, default=5, help="cross-fitting folds of the initial scores (5)")
    ap.add_argument("--top-k", type=int, default=100, help="items kept per query (100)")
    ap.add_argument(
        "--eval-batch-size",
        type=int,
        help="train.eval_batch_size: lists scored at once in validation and test (default: the config's)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--malloc",
        choices=("ctxrank", "system"),
        default="ctxrank",
        help="ctxrank: glibc's heap limited as the ctxrank command does (ctxrank._allocator."
        "limit_heap_growth, the default); system: glibc's defaults",
    )
    ap.add_argument(
        "--release-memory",
        choices=("epoch", "step"),
        default="epoch",
        help="train.release_memory: the C heap's freed pages handed back after each epoch (the default) "
        "or after every training step too",
    )
    ap.add_argument(
        "--keep", metavar="DIR", help="write the files under DIR and keep them (default: a temp dir)"
    )
    ap.add_argument(
        "--from-json",
        metavar="FILE",
        action="append",
        default=[],
        help="also report the runs of an earlier --json FILE (repeat; e.g. a full-size run and smaller ones)",
    )
    ap.add_argument(
        "--publish",
        action="store_true",
        help="rewrite the bench-scale blocks of docs/*.md from their files in evidence/bench/ (runs nothing)",
    )
    add_common_args(ap)
    ap.set_defaults(threads=1)
    next(x for x in ap._actions if x.dest == "threads").help = "torch and LightGBM threads (default 1)"
    a = ap.parse_args(argv)
    if a.child:
        from _common import child_main

        return child_main(a.child, protocol)
    if a.publish:
        publish_docs(BLOCK, block_text)
        return 0
    factors = sorted(a.factor or ([] if a.from_json else [QUICK_FACTOR] if a.quick else [0.02]))
    if factors and min(factors) <= 0:
        ap.error("--factor must be > 0")
    models = tuple(m for m in a.models.split(",") if m)
    info = machine_info(a.threads)
    print(machine_line(info))
    runs = load_runs(a.from_json)
    for factor in factors:
        root = Path(a.keep) / f"factor-{factor}" if a.keep else Path(tempfile.mkdtemp(prefix="bench-scale-"))
        root.mkdir(parents=True, exist_ok=True)
        try:
            t = time.perf_counter()
            paths = write_files(factor, root, a.seed)
            written = time.perf_counter() - t
            size = sum(Path(p).stat().st_size for p in paths.values())
            print(
                f"factor {factor}: wrote {size / 1e6:,.0f} MB of text in {written:,.0f} s to {root}",
                flush=True,
            )
            spec = {
                "factor": factor,
                "paths": paths,
                "models": models,
                "crossfit": a.crossfit,
                "top_k": a.top_k,
                "eval_batch_size": a.eval_batch_size,
                "threads": a.threads,
                "seed": a.seed,
                "malloc": a.malloc,
                "release_memory": a.release_memory,
            }
            run = run_case(__file__, spec, a.isolate, protocol)
            settings = {k: v for k, v in spec.items() if k not in ("factor", "paths")}
            run.update(text_mb=size / 1e6, write_seconds=written, machine=info, settings=settings)
            runs.append(run)
            save(runs, info, a, complete=False)
        finally:
            if not a.keep:
                shutil.rmtree(root, ignore_errors=True)
    runs.sort(key=lambda run: run["factor"])
    report(runs)
    save(runs, info, a, complete=True)
    return 0


def save(runs: list[dict], info: dict, a: argparse.Namespace, *, complete: bool) -> None:
    """The JSON of the runs so far (after every factor: a long run's smaller factors are kept)."""
    runs = sorted(runs, key=lambda run: run["factor"])
    blob = {
        "benchmark": "bench_scale",
        "synthetic": "MSLR-WEB30K-shaped (ctxrank.data.synth), not the real dataset",
        "quick": a.quick,
        "complete": complete,
        "machine": info,
        "load_average_end": list(os.getloadavg()),
        "runs": runs,
        "linearity": linearity(runs) if len(runs) > 1 else None,
    }
    emit_json(blob, a.json, echo=False)


if __name__ == "__main__":
    sys.exit(main())
