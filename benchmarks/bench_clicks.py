"""Step-time cost of ``train.debias`` (not a test): a training step (forward, loss, backward, Adam) on
one batch of a simulated position-based-model click log, naive against ``ips``, ``dla`` and ``pal``.

The log: sessions of a given length with Gaussian features; clicks from the position-based model
(examination ``1/k``). For each configuration of :data:`CONFIGS` (a model with its loss at a batch
shape; ``--model``/``--loss``/``--lists``/``--list-len``/``--features`` time one instead), each variant
runs ``--warmup`` steps, then ``--steps`` timed steps, in alternating rounds (``--rounds``) so that a
drifting machine load favours none; reported: the median seconds per step of each and its ratio to
naive training on the same batch (the target: at most ``1.3``).

Usage::

    .venv/bin/python benchmarks/bench_clicks.py --threads 1 --json FILE
    .venv/bin/python benchmarks/bench_clicks.py --model qilcm --loss attrank --threads 1
    .venv/bin/python benchmarks/bench_clicks.py --from-json FILE | --publish
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from _common import add_common_args
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
from ctxrank.clicks.towers import Debias
from ctxrank.clicks.weighting import propensity_table
from ctxrank.data.lists import pad_queries
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import get_loss
from ctxrank.registry import make_model


def log_batch(lists: int, list_len: int, features: int, seed: int):
    rng = np.random.default_rng(seed)
    n = lists * list_len
    X = rng.normal(size=(n, features)).astype(np.float32)
    position = np.tile(np.arange(1, list_len + 1), lists)
    clicks = (rng.random(n) < (1.0 / position) * (X[:, 0] > 0.5)).astype(np.float32)
    log = RankingData.from_arrays(X, clicks, np.repeat(np.arange(lists), list_len), position=position)
    return pad_queries(log, np.arange(lists))


def time_steps(model, debias, loss_fn, batch, steps: int) -> float:
    params = [*model.parameters(), *(debias.parameters() if debias is not None else [])]
    opt = torch.optim.Adam(params, lr=1e-3)
    start = time.perf_counter()
    for _ in range(steps):
        fn = loss_fn if debias is None else debias.wrap(loss_fn, batch.shown_positions)
        loss = model.training_loss(batch, fn)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


TARGET_RATIO = 1.3  # a debiased step over the naive step
VARIANTS = ("none", "ips", "dla", "pal")
#: (model, model_params, loss, lists, list length, features): the pointwise and linear scorers, whose
#: steps are short, at two shapes; the context models at the small one
CONFIGS = (
    ("mlp", {}, "listnet", 64, 20, 46),
    ("listnet", {}, "listnet", 64, 20, 46),
    ("listnet", {}, "listnet", 64, 100, 136),
    ("qilcm", {}, "attrank", 64, 20, 46),
    ("dlcm", {"gru": "torch", "encoder_widths": [64, 64]}, "attrank", 64, 20, 46),
    ("attn", {}, "lambdaloss", 64, 20, 46),
)


def measure(model_name, params, loss, lists, list_len, features, *, steps, warmup, rounds) -> dict:
    """Median seconds a step of each variant and its ratio to naive training, on one batch."""
    torch.manual_seed(0)
    batch = log_batch(lists, list_len, features, 0)
    loss_fn = get_loss(loss)
    model = make_model(model_name, features, params)
    propensity = torch.as_tensor(propensity_table((), 1.0, list_len))
    variants = {
        "none": None,
        "ips": Debias("ips", list_len, propensity=propensity, clip=100.0),
        "dla": Debias("dla", list_len, clip=100.0),
        "pal": Debias("pal", list_len, clip=100.0),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for debias in variants.values():
        time_steps(model, debias, loss_fn, batch, warmup)
    for _ in range(rounds):
        for name, debias in variants.items():
            times[name].append(time_steps(model, debias, loss_fn, batch, steps))
    base = statistics.median(times["none"])
    return {
        "model": model_name, "model_params": params, "loss": loss, "batch": [lists, list_len, features],
        "seconds_per_step": {k: statistics.median(v) for k, v in times.items()},
        "rounds_seconds": times,
        "ratio_to_naive": {k: statistics.median(v) / base for k, v in times.items()},
    }  # fmt: skip


def report_text(blob: dict) -> str:
    """The table and verdicts of a run, from its JSON ``blob`` (also a stored one: :func:`block_text`)."""
    lines = [machine_line(blob["machine"]) + (f"; code {blob['code']}" if blob.get("code") else "")]
    lines.append(
        f"one training step on a click log, median of {blob['rounds']} rounds of {blob['steps']} steps "
        f"(variants interleaved), {blob['threads']} thread(s); ratio to the naive step"
    )
    rows = []
    for r in blob["results"]:
        b, t, ratio = r["batch"], r["seconds_per_step"], r["ratio_to_naive"]
        rows.append(
            [r["model"], r["loss"], f"{b[0]} x {b[1]} x {b[2]}", f"{t['none'] * 1e3:.2f}"]
            + [f"{t[v] * 1e3:.2f} ({ratio[v]:.2f}x)" for v in VARIANTS[1:]]
        )
    header = ["model", "loss", "batch", "naive ms", "ips ms", "dla ms", "pal ms"]
    lines += ["", markdown_table(header, rows), ""]
    for r in blob["results"]:
        over = [v for v in VARIANTS[1:] if r["ratio_to_naive"][v] > blob["target_ratio"]]
        shape = "x".join(str(n) for n in r["batch"])
        verdict = "within the target" if not over else f"OVER the target: {', '.join(over)}"
        lines.append(f"{r['model']} {shape}: {verdict} of {blob['target_ratio']}x the naive step")
    return "\n".join(lines) + "\n"


# A page states a stored run between ``<!-- bench-clicks: FILE -->`` and ``<!-- /bench-clicks -->``;
# ``--publish`` rewrites each block from its file (tests/test_bench_evidence.py checks them).
BLOCK, block_text = stored_blocks("bench-clicks", report_text)


def evidence_problems(blob: dict) -> list[str]:
    """What a run lacks to be stored as evidence (empty: nothing): every configuration, 5 rounds or more."""
    problems = []
    done = [(r["model"], r["loss"], r["batch"]) for r in blob["results"]]
    expected = [(m, loss, [b, n, f]) for m, _, loss, b, n, f in CONFIGS]
    if done != expected:
        problems.append(f"configurations {done}, expected {expected}")
    if blob["rounds"] < 5:
        problems.append(f"{blob['rounds']} rounds, at least 5 expected")
    if not blob.get("code"):
        problems.append("no code recorded")
    return problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, isolate=False)
    p.add_argument("--model", help="time this model alone (with --loss and the batch shape options)")
    p.add_argument("--loss", default="listnet", help="--model's loss (default listnet)")
    p.add_argument("--lists", type=int, default=64)
    p.add_argument("--list-len", type=int, default=20)
    p.add_argument("--features", type=int, default=46)
    p.add_argument("--steps", type=int, default=30, help="timed steps a round (default 30)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    add_stored_args(p, "bench-clicks")
    a = p.parse_args(argv)
    if answer_stored_args(a, BLOCK, block_text, report_text):
        return 0
    torch.set_num_threads(a.threads)
    configs = CONFIGS if a.model is None else ((a.model, {}, a.loss, a.lists, a.list_len, a.features),)
    steps, warmup, rounds = (2, 1, 1) if a.quick else (a.steps, a.warmup, a.rounds)
    if a.quick:
        configs = tuple((m, params, loss, 4, 5, 6) for m, params, loss, *_ in configs)
    info = machine_info(threads=a.threads)
    print(machine_line(info), flush=True)
    results = []
    for config in configs:
        results.append(measure(*config, steps=steps, warmup=warmup, rounds=rounds))
        r = results[-1]
        print(
            f"{r['model']} {r['batch']}: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in r["ratio_to_naive"].items())
        )
    blob = {
        "benchmark": "bench_clicks",
        "quick": a.quick,
        "code": code_of_tree(),
        "threads": a.threads,
        "steps": steps,
        "warmup": warmup,
        "rounds": rounds,
        "machine": info,
        "target_ratio": TARGET_RATIO,
        "results": results,
    }
    print()
    print(report_text(blob), end="")
    emit_json(blob, a.json, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
