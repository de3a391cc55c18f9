"""Speed and equality benchmark (not a test): the estimator API against ``ctxrank train`` on MQ2008 Fold 1.

Per repeat, in alternating order (so that a warm-up or a drifting machine load favours neither):

* **CLI**: ``ctxrank train --model M --dataset mq2008 --fold 1 --seed S --set train.max_epochs=E
  --set train.threads=T --no-progress --out DIR`` in this process (``ctxrank.cli.main``): reads the
  fold, trains, saves the model directory, evaluates the test split once.
* **API**: ``load_fold("mq2008", 1)``, ``Ranker(model=M, random_state=S, max_epochs=E, threads=T)
  .fit(train, eval_set=valid)``, ``predict(test)``, ``save(DIR)``: the same work.

Equality: the test scores of the API estimator and of the CLI's saved model (``load_model(DIR)``) on
the same test rows must be bitwise equal (``max_abs_diff`` 0), as must their test NDCG@10.
Reported: min and median seconds of each, and the ratio API / CLI (the reference: the CLI, measured in
the same run).

Usage::

    .venv/bin/python benchmarks/bench_api_vs_cli.py --model listnet --epochs 5 --repeats 3
    .venv/bin/python benchmarks/bench_api_vs_cli.py --model qilcm --epochs 2 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_common_args
from _report import emit_json, machine_info, machine_line, markdown_table


def run_cli(model: str, epochs: int, seed: int, threads: int, out: Path) -> tuple[float, np.ndarray, float]:
    """Seconds of ``ctxrank train``, its saved model's test scores and test NDCG@10."""
    from ctxrank.cli import main
    from ctxrank.data.registry import load_fold
    from ctxrank.training.checkpoint import load_model

    argv = ["train", "--model", model, "--dataset", "mq2008", "--fold", "1", "--seed", str(seed)]
    argv += ["--set", f"train.max_epochs={epochs}", "--set", f"train.threads={threads}"]
    t0 = time.perf_counter()
    code = main([*argv, "--no-progress", "--out", str(out)])
    seconds = time.perf_counter() - t0
    assert code == 0, f"ctxrank train failed ({code})"
    import json

    ndcg = json.loads((out / "test_metrics.json").read_text())["metrics"]["ndcg@10"]
    return seconds, load_model(out).predict(load_fold("mq2008", 1).test), ndcg


def run_api(model: str, epochs: int, seed: int, threads: int, out: Path) -> tuple[float, np.ndarray, float]:
    """Seconds of load + fit + predict + save through the estimator API, test scores, test NDCG@10."""
    from ctxrank.api import Ranker
    from ctxrank.data.registry import load_fold

    t0 = time.perf_counter()
    fold = load_fold("mq2008", 1)
    tr, va, te = fold.train, fold.valid, fold.test
    est = Ranker(model, random_state=seed, max_epochs=epochs, threads=threads)
    est.fit(
        tr.features,
        tr.labels.astype(int),
        qid=tr.query_index,
        eval_set=(va.features, va.labels.astype(int), va.query_index),
    )
    scores = est.predict(te.features, qid=te.query_index)
    est.save(out)
    seconds = time.perf_counter() - t0
    return seconds, scores, est.score(te.features, te.labels, qid=te.query_index)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="listnet", help="a neural model of the registry (default listnet)")
    ap.add_argument("--epochs", type=int, default=5, help="train.max_epochs (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each (default 3)")
    add_common_args(ap, isolate=False)
    args = ap.parse_args()
    if args.quick:
        args.epochs, args.repeats = 1, 1
    info = machine_info(args.threads)
    print(machine_line(info))
    times: dict[str, list[float]] = {"cli": [], "api": []}
    diffs, ndcgs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = ("cli", "api") if r % 2 == 0 else ("api", "cli")
            got = {}
            for which in order:
                fn = run_cli if which == "cli" else run_api
                got[which] = fn(args.model, args.epochs, args.seed, args.threads, Path(tmp) / f"{which}{r}")
                times[which].append(got[which][0])
            diffs.append(float(np.max(np.abs(got["api"][1] - got["cli"][1]))))
            ndcgs.append((got["cli"][2], got["api"][2]))
            cli_s, api_s = got["cli"][0], got["api"][0]
            print(f"repeat {r + 1}: cli {cli_s:.2f} s, api {api_s:.2f} s, max |diff| {diffs[-1]:g}")
    summary = {k: {"min": min(v), "median": statistics.median(v)} for k, v in times.items()}
    ratio = summary["api"]["median"] / summary["cli"]["median"]
    rows = [[k, f"{s['min']:.2f}", f"{s['median']:.2f}"] for k, s in summary.items()]
    print(markdown_table(["path", "min s", "median s"], rows, align="lrr"))
    print(f"ratio api / cli (median): {ratio:.3f}; max |score diff| {max(diffs):g}; "
          f"test ndcg@10 cli {ndcgs[0][0]:.6f} api {ndcgs[0][1]:.6f}")  # fmt: skip
    blob = {
        "benchmark": "api_vs_cli",
        "quick": args.quick,
        "model": args.model,
        "epochs": args.epochs,
        "seed": args.seed,
        "threads": args.threads,
        "times": times,
        "summary": summary,
        "ratio_api_over_cli": ratio,
        "max_abs_score_diff": max(diffs),
        "test_ndcg10_cli_api": ndcgs,
        "machine": info,
    }
    emit_json(blob, args.json, echo=False)
    return 0 if max(diffs) == 0.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
