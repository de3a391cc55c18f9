"""Step-time benchmark (not a test): one ARSM-L2R training step vs one ListNet step, same MLP.

Both steps (forward, loss, backward, Adam step) use the same network: F inputs -> 500 tanh -> output, the
ARSM-L2R paper's scorer (ARSM-L2R paper, section 3.4), with C = 20 outputs for ARSM (one Dirichlet draw per
item, all C(C-1)/2 = 190 swaps, negative NDCG@10) and 1 output for ListNet (top-one cross entropy).
Batches: ``--batch`` MQ2008 queries (Fold 1 training split, as the trainer batches them: by length, so
the batches are padded to similar lengths; every batch of the epoch is timed and the medians compared),
and a synthetic batch of ``--batch`` lists of ``--items`` items (the MSLR/QILCM shape; ``--features``
features, default MQ2008's 46).

Reported: median step time of ListNet (the reference), ARSM without and with ``dedupe`` (distinct
pseudo-actions evaluated once), the ratio ARSM / ListNet (target: at most 5x), and the peak
memory of each. Each (batches, model) configuration runs in a fresh subprocess (``--isolate none``: all
in this process, no peak memory); peak memory is the growth of the peak resident set during the steps
over what the process held with the batches and the model built (``benchmarks/_common.py``).

    .venv/bin/python benchmarks/bench_arsm_step.py [--threads 2] [--batch 80] [--items 100] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from _common import PeakRSS, add_common_args, child_main, run_case, summarize
from _report import emit_json, machine_info, machine_line, markdown_table

KINDS = ("listnet", "arsm", "arsm-dedupe")


def make_batches(spec: dict) -> list:
    """The batches of one configuration: MQ2008 Fold1 training batches, or one synthetic batch."""
    import torch

    from ctxrank.data.lists import ListBatch, iterate_batches
    from ctxrank.data.registry import load_fold
    from ctxrank.data.transforms import make_transform

    B = spec["batch"]
    if spec["data"] == "mq2008":
        fold = load_fold("mq2008", 1)
        train = make_transform("minmax").fit(fold.train).transform(fold.train)
        batches = list(iterate_batches(train, B))
        return batches[: spec["max_batches"]] if spec["max_batches"] else batches
    gen = torch.Generator().manual_seed(0)
    L, F = spec["items"], spec["features"]
    return [
        ListBatch(
            features=torch.rand(B, L, F, generator=gen),
            labels=torch.randint(0, 3, (B, L), generator=gen).float(),
            mask=torch.ones(B, L, dtype=torch.bool),
            query_index=torch.arange(B),
        )
    ]


def step_case(spec: dict, measure_memory: bool) -> dict:
    """``repeats + 1`` passes over the configuration's batches (the first pass warms up)."""
    import torch

    from ctxrank.losses import get_loss
    from ctxrank.registry import make_model

    torch.set_num_threads(spec["threads"])
    batches = make_batches(spec)
    n_features = int(batches[0].features.shape[-1])
    torch.manual_seed(0)
    if spec["kind"] == "listnet":
        model = make_model("mlp", n_features, {"hidden": [500], "activation": "tanh"})
        loss_fn = get_loss("listnet")
    else:
        model = make_model("arsm", n_features, {"dedupe": spec["kind"] == "arsm-dedupe"})
        loss_fn = None
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    times = []
    with PeakRSS(measure_memory) as mem:
        for r in range(spec["repeats"] + 1):
            for batch in batches:
                t0 = time.perf_counter()
                loss = model.training_loss(batch, loss_fn)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if r > 0:  # the first pass warms up
                    times.append(time.perf_counter() - t0)
    lengths = [int(b.mask.shape[1]) for b in batches]
    return {
        "step": summarize(times),
        "median_s": statistics.median(times),
        "batches": len(batches),
        "padded_lengths": [min(lengths), max(lengths)],
        "features": n_features,
        **mem.as_dict(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--batch", type=int, default=80)
    ap.add_argument("--items", type=int, default=100, help="items per synthetic list")
    ap.add_argument("--features", type=int, default=46, help="synthetic features (default 46, MQ2008's)")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes over the batches")
    ap.add_argument("--max-batches", type=int, default=0, help="MQ2008 batches to time (default 0: all)")
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child, step_case)
    if args.quick:
        args.batch, args.items, args.repeats, args.max_batches = 8, 10, 1, 3

    info = machine_info(args.threads)
    print(machine_line(info), flush=True)
    B = args.batch
    print(
        f"ARSM vs ListNet step, batches of {B}: MQ2008 Fold1 train and synthetic {B} x {args.items} "
        f"({args.features} features), {args.threads} threads, isolate={args.isolate}",
        flush=True,
    )
    results: dict[str, dict] = {}
    for data in ("mq2008", "synthetic"):
        row: dict = {}
        for kind in KINDS:
            spec = {
                "data": data,
                "kind": kind,
                "batch": B,
                "items": args.items,
                "features": args.features,
                "repeats": args.repeats,
                "max_batches": args.max_batches,
                "threads": args.threads,
            }
            row[kind] = run_case(Path(__file__), spec, args.isolate, step_case)
            print(f"  {data} {kind}: {row[kind]['median_s'] * 1000:.1f} ms", flush=True)
        first = row["listnet"]
        lo, hi = first["padded_lengths"]
        label = (
            f"MQ2008 Fold1 ({first['batches']} batches, padded to {lo}-{hi} items)"
            if data == "mq2008"
            else f"synthetic {B} x {args.items}"
        )
        results[label] = row

    def mib(x):
        return "–" if x is None else f"{x:,.0f}"

    table = []
    for label, row in results.items():
        ref = row["listnet"]["median_s"]
        row["ratio_arsm"] = row["arsm"]["median_s"] / ref
        row["ratio_arsm_dedupe"] = row["arsm-dedupe"]["median_s"] / ref
        table.append(
            [
                label,
                f"{ref * 1000:.1f}",
                f"{row['arsm']['median_s'] * 1000:.1f}",
                f"{row['arsm-dedupe']['median_s'] * 1000:.1f}",
                f"{row['ratio_arsm']:.2f}",
                f"{row['ratio_arsm_dedupe']:.2f}",
                *(mib(row[k]["peak_rss_delta_mib"]) for k in KINDS),
            ]
        )
    header = [
        "batches",
        "ListNet ms",
        "ARSM ms",
        "ARSM dedupe ms",
        "ARSM / ListNet",
        "dedupe / ListNet",
        "ListNet peak MiB",
        "ARSM peak MiB",
        "dedupe peak MiB",
    ]
    print()
    print(markdown_table(header, table))
    print()
    for label, row in results.items():
        ok = "met" if row["ratio_arsm"] <= 5 else "NOT met"
        print(f"{label}: ARSM step = {row['ratio_arsm']:.2f}x the ListNet step (target <= 5x: {ok})")
    blob = {
        "benchmark": "bench_arsm_step",
        "quick": args.quick,
        "batch": B,
        "items": args.items,
        "features": args.features,
        "threads": args.threads,
        "repeats": args.repeats,
        "isolate": args.isolate,
        "machine": info,
        "results": results,
    }
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
