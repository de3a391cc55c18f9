"""Step-time benchmark (not a test): one ARSM-L2R training step vs one ListNet step, same MLP.

Both steps (forward, loss, backward, Adam step) use the same network: F inputs -> 500 tanh -> output, the
ARSM-L2R paper's scorer (seed 004, section 3.4), with C = 20 outputs for ARSM (one Dirichlet draw per
item, all C(C-1)/2 = 190 swaps, negative NDCG@10) and 1 output for ListNet (top-one cross entropy).
Batches: ``--batch`` MQ2008 queries (Fold 1 training split, as the trainer batches them: by length, so
the batches are padded to similar lengths; every batch of the epoch is timed and the medians compared),
and a synthetic batch of ``--batch`` lists of ``--items`` items (the MSLR/QILCM shape).

Reported: median step time of ListNet (the reference), ARSM without and with ``dedupe`` (distinct
pseudo-actions evaluated once), and the ratio ARSM / ListNet. Target (issue 6): at most 5x.

    .venv/bin/python benchmarks/bench_arsm_step.py [--threads 2] [--batch 80] [--items 100]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from _report import emit_json
from ctxrank.data.lists import ListBatch, iterate_batches
from ctxrank.data.registry import load_fold
from ctxrank.data.transforms import make_transform
from ctxrank.losses import get_loss
from ctxrank.models import make_model


def step_times(kind: str, batches: list[ListBatch], n_features: int, repeats: int) -> list[float]:
    torch.manual_seed(0)
    if kind == "listnet":
        model = make_model("mlp", n_features, {"hidden": [500], "activation": "tanh"})
        loss_fn = get_loss("listnet")
    else:
        model = make_model("arsm", n_features, {"dedupe": kind == "arsm-dedupe"})
        loss_fn = None
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    times = []
    for r in range(repeats + 1):
        for batch in batches:
            t0 = time.perf_counter()
            loss = model.training_loss(batch, loss_fn)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if r > 0:  # the first pass warms up
                times.append(time.perf_counter() - t0)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=80)
    ap.add_argument("--items", type=int, default=100, help="items per synthetic list")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes over the batches")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    fold = load_fold("mq2008", 1)
    train = make_transform("minmax").fit(fold.train).transform(fold.train)
    mq = list(iterate_batches(train, args.batch))
    gen = torch.Generator().manual_seed(0)
    B, L, F = args.batch, args.items, train.n_features
    synth = [
        ListBatch(
            features=torch.rand(B, L, F, generator=gen),
            labels=torch.randint(0, 3, (B, L), generator=gen).float(),
            mask=torch.ones(B, L, dtype=torch.bool),
            query_index=torch.arange(B),
        )
    ]
    lengths = [int(b.mask.shape[1]) for b in mq]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; MQ2008 Fold1 train: {len(mq)} "
        f"batches of {B} queries padded to {min(lengths)}-{max(lengths)} items; synthetic: {B} x {L}",
        flush=True,
    )
    results: dict[str, dict] = {}
    for label, batches in (("mq2008", mq), (f"synthetic {B}x{L}", synth)):
        row = {}
        for kind in ("listnet", "arsm", "arsm-dedupe"):
            row[kind] = statistics.median(step_times(kind, batches, F, args.repeats))
            print(f"  {label} {kind}: {row[kind] * 1000:.1f} ms", flush=True)
        results[label] = row
    print("\n| batches | ListNet ms | ARSM ms | ARSM dedupe ms | ARSM / ListNet | dedupe / ListNet |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, row in results.items():
        ref = row["listnet"]
        row["ratio_arsm"] = row["arsm"] / ref
        row["ratio_arsm_dedupe"] = row["arsm-dedupe"] / ref
        print(
            f"| {label} | {ref * 1000:.1f} | {row['arsm'] * 1000:.1f} | {row['arsm-dedupe'] * 1000:.1f} | "
            f"{row['ratio_arsm']:.2f} | {row['ratio_arsm_dedupe']:.2f} |"
        )
    blob = {
        "benchmark": "bench_arsm_step",
        "batch": B,
        "threads": args.threads,
        "results": results,
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
    }
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
