"""Step-time benchmark (not a test): the cost of QILCM's Chamfer query-confusion term (eq. 13-14).

One QILCM training step (forward, AttRank loss, backward, Adam step) at the paper's batch of 80 queries
with 100 items each (top-100 re-ranking), F = 47 inputs (MQ2008's 46 features + the initial rank),
default widths (encoder 100, MLP_att and MLP_rank 256-128, so the normalized representations have
2 (47 + 100) = 294 dimensions). Measured with ``torch.set_num_threads(--threads)``:

* **reference**: the step without the confusion term (``confusion_weight = 0``: ablation variant 2);
* **exact**: the step with the exact term over all 80 x 80 ordered query pairs (``confusion_pairs``
  unset, the paper's eq. 13), ``form = "sum"`` and ``"mean"`` (same cost, different scale), with the
  paper's two-sided Chamfer distance (QILCM eq. 14, the default) and the one-sided form
  (``confusion_direction = "one-sided"``);
* **sampled**: the unbiased estimate over P sampled ordered pairs (``confusion_pairs = P``), both
  directions.

The ratio two-sided / one-sided of each pair of configurations is printed as well (the second
direction should cost little: ``m + m^T`` for the exact matrix, the column minima of the same distance
blocks for sampled pairs).

Reported: median step time of each, and the ratio (step - reference) / reference, the cost of the term
relative to the rest of the step; the peak memory of each configuration. Then the **spread of the
sampled estimate** (not a timing): on the normalized representations of one batch (an untrained QILCM,
same shapes), ``--draws`` independent draws of the estimate for each sampled pair count, against the
exact term: the relative standard deviation of the value (std / exact) and the mean relative error of
the gradient with respect to the representations (||g_sampled - g_exact|| / ||g_exact||).

Each configuration runs in a fresh subprocess (``--isolate none``: all in this process, no peak memory);
peak memory is the growth of the peak resident set during the steps over what the process held with the
batch and the model built (``benchmarks/_common.py``). Inputs are uniform [0, 1] random features (the
cost does not depend on their values); every timing is repeated ``--repeats`` times after ``--warmup``
steps.

    .venv/bin/python benchmarks/bench_qilcm_step.py [--threads 2] [--batch 80] [--items 100]
        [--lengths full|mq2008] [--json FILE]

``--lengths mq2008``: list lengths as in training on MQ2008 (drawn from Fold1's queries, cut at
``--items``), where the exact term skips most padding (its blocks are cut to their longest list).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from _common import PeakRSS, add_common_args, child_main, run_case, summarize
from _report import emit_json, machine_info, machine_line, markdown_table


def step_case(spec: dict, measure_memory: bool) -> dict:
    """``warmup + repeats`` QILCM training steps with ``spec["params"]`` on one random batch."""
    import torch

    from ctxrank.data.lists import ListBatch
    from ctxrank.losses import get_loss
    from ctxrank.registry import make_model

    torch.set_num_threads(spec["threads"])
    gen = torch.Generator().manual_seed(0)
    B, L, F = spec["batch"], spec["items"], spec["features"]
    lengths = torch.tensor(spec["lengths"]) if spec["lengths"] else torch.full((B,), L)
    batch = ListBatch(
        features=torch.rand(B, L, F, generator=gen),
        labels=torch.randint(0, 3, (B, L), generator=gen).float(),
        mask=torch.arange(L)[None, :] < lengths[:, None],
        query_index=torch.arange(B),
    )
    torch.manual_seed(0)
    model = make_model("qilcm", F, spec["params"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = get_loss("attrank")
    times = []
    with PeakRSS(measure_memory) as mem:
        for i in range(spec["warmup"] + spec["repeats"]):
            t0 = time.perf_counter()
            loss = model.training_loss(batch, loss_fn)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if i >= spec["warmup"]:
                times.append(time.perf_counter() - t0)
    return {
        "step": summarize(times),
        "median_s": statistics.median(times),
        "min_s": min(times),
        **mem.as_dict(),
    }


def list_lengths(kind: str, B: int, L: int) -> list[int] | None:
    """``None`` (every list ``L`` items) or ``B`` lengths drawn (seed 0) from MQ2008 Fold1's training
    queries, cut at ``L`` (top-L re-ranking: 5 to 100 items, mean 20 at L = 100)."""
    if kind == "full":
        return None
    import numpy as np

    from ctxrank.data.registry import load_fold

    sizes = np.minimum(np.diff(load_fold("mq2008", 1).train.query_offsets), L)
    return np.random.default_rng(0).choice(sizes, B).tolist()


def estimate_spread(B: int, L: int, F: int, pair_counts: list[int], draws: int) -> dict:
    """Relative std of the sampled Chamfer estimate's value and relative error of its gradient."""
    import torch

    from ctxrank.losses import chamfer_confusion
    from ctxrank.registry import make_model

    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = make_model("qilcm", F, {})
    mask = torch.ones(B, L, dtype=torch.bool)
    with torch.no_grad():
        reps = model.details(torch.rand(B, L, F, generator=gen), mask).normalized
    reps.requires_grad_(True)
    exact = chamfer_confusion(reps, mask)
    (g_exact,) = torch.autograd.grad(exact, reps)
    out = {"exact_value": exact.item(), "draws": draws}
    for p in pair_counts:
        g = torch.Generator().manual_seed(1)
        values, errors = [], []
        for _ in range(draws):
            est = chamfer_confusion(reps, mask, pairs=p, generator=g)
            (g_est,) = torch.autograd.grad(est, reps)
            values.append(est.item())
            errors.append(((g_est - g_exact).norm() / g_exact.norm()).item())
        v = torch.tensor(values, dtype=torch.float64)
        out[str(p)] = {
            "mean_over_exact": (v.mean() / exact.item()).item(),
            "value_relative_std": (v.std() / exact.item()).item(),
            "gradient_relative_error": statistics.mean(errors),
        }
    return out


def direction_ratios(rows: dict) -> dict[str, float]:
    """Median step time of each two-sided configuration over its one-sided twin (printed)."""
    directions = {}
    for name, r in rows.items():
        one_name = f"{name}, one-sided"
        if one_name in rows:
            directions[name] = r["median_s"] / rows[one_name]["median_s"]
            print(f"two-sided / one-sided step time, {name}: {directions[name]:.3f}")
    return directions


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--batch", type=int, default=80, help="queries per batch (default 80, the paper's)")
    ap.add_argument("--items", type=int, default=100, help="items per list (default 100: top-100)")
    ap.add_argument("--features", type=int, default=47, help="input features (default 47 = 46 + rank)")
    ap.add_argument(
        "--lengths",
        choices=("full", "mq2008"),
        default="full",
        help="list lengths: every list --items long (default), or drawn from MQ2008 Fold1's queries cut at "
        "--items (mixed lengths, as in training)",
    )
    ap.add_argument("--pairs", default="80,640", help="comma-separated sampled pair counts")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--draws", type=int, default=30, help="draws of each sampled estimate (spread part)")
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child, step_case)
    if args.quick:
        args.batch, args.items, args.repeats, args.warmup, args.pairs, args.draws = 4, 10, 2, 1, "2", 3

    info = machine_info(args.threads)
    print(machine_line(info), flush=True)
    B, L, F = args.batch, args.items, args.features
    lengths = list_lengths(args.lengths, B, L)
    shape = (
        f"{L} items"
        if lengths is None
        else f"{min(lengths)}-{max(lengths)} items (mean {sum(lengths) / B:.1f})"
    )
    print(
        f"QILCM step, batch {B} queries x {shape}, {F} features, {args.threads} threads, median of "
        f"{args.repeats} steps after {args.warmup} warm-up steps, isolate={args.isolate}",
        flush=True,
    )
    cases = [("reference: no confusion term (lambda = 0)", {"confusion_weight": 0.0})]
    one = {"confusion_direction": "one-sided"}
    for form in ("sum", "mean"):
        cases.append((f"exact, all {B}x{B} pairs, form={form}", {"confusion_form": form}))
    cases.append((f"exact, all {B}x{B} pairs, form=sum, one-sided", {"confusion_form": "sum", **one}))
    for p in (int(x) for x in args.pairs.split(",") if x.strip()):
        cases.append((f"sampled, {p} pairs, form=sum", {"confusion_pairs": p}))
        cases.append((f"sampled, {p} pairs, form=sum, one-sided", {"confusion_pairs": p, **one}))
    rows = {}
    for name, params in cases:
        spec = {
            "params": params,
            "batch": B,
            "items": L,
            "features": F,
            "lengths": lengths,
            "threads": args.threads,
            "repeats": args.repeats,
            "warmup": args.warmup,
        }
        rows[name] = {"params": params, **run_case(Path(__file__), spec, args.isolate, step_case)}
        print(f"  {name}: {rows[name]['median_s'] * 1000:.1f} ms", flush=True)
    ref = rows[cases[0][0]]["median_s"]
    table = []
    for name, r in rows.items():
        r["term_over_rest"] = (r["median_s"] - ref) / ref
        ratio = "(reference)" if name == cases[0][0] else f"{r['term_over_rest']:.2f}"
        peak = r["peak_rss_delta_mib"]
        table.append(
            [
                name,
                f"{r['median_s'] * 1000:.1f}",
                f"{r['min_s'] * 1000:.1f}",
                ratio,
                "–" if peak is None else f"{peak:,.0f}",
            ]
        )
    print()
    header = ["step", "median ms", "min ms", "confusion term / rest of the step", "peak RSS delta MiB"]
    print(markdown_table(header, table))
    directions = direction_ratios(rows)
    counts = [int(x) for x in args.pairs.split(",") if x.strip()]
    spread = estimate_spread(B, L, F, counts, args.draws)
    print(
        f"\nSampled estimate vs the exact term ({args.draws} draws each, "
        f"exact value {spread['exact_value']:.4g}):"
    )
    print(
        markdown_table(
            ["pairs", "mean / exact", "value: std / exact", "gradient: mean relative error"],
            [
                [
                    p,
                    f"{spread[str(p)]['mean_over_exact']:.3f}",
                    f"{spread[str(p)]['value_relative_std']:.3f}",
                    f"{spread[str(p)]['gradient_relative_error']:.3f}",
                ]
                for p in counts
            ],
        )
    )
    blob = {
        "benchmark": "bench_qilcm_step",
        "quick": args.quick,
        "batch": B,
        "items": L,
        "lengths": args.lengths,
        "features": F,
        "threads": args.threads,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "isolate": args.isolate,
        "machine": info,
        "results": rows,
        "two_sided_over_one_sided": directions,
        "sampled_estimate_spread": spread,
    }
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
