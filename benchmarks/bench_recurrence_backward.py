"""Before/after benchmark (not a test): the per-step loops of DLCM's eq. 4 GRU and of SoftRank.

The profile of a DLCM training step (``gru="paper"``, 80 lists x 100 items x 136 features, the authors'
1,024 width; ``torch.profiler``, sorted by self CPU time) showed ``aten::fill_`` at 25% and ``aten::add_``
at 11% of the step, under 100 ``SelectBackward0`` calls: the loop read step ``t`` as ``xp[:, t]``, and
the backward of each of those T selects builds a zero-filled gradient of the whole ``(B, T, 3H)``
input projection and adds it to the total, O(T^2) memory traffic for O(T) useful numbers. The fix
iterates over ``xp.unbind(1)``, whose backward stacks the T step gradients once. SoftRank's rank
recursion (``ctxrank.losses._insert_items``) had the same pattern over the items of a block.

Each case times, in this one process and interleaved (reference, fixed, reference, ...), the library's
code against a **reference**: the same computation with the previous per-step indexing, written out
below. Both run on the same inputs and weights; the script first checks that the loss and every
gradient are equal (they are sums of the same numbers), then reports the median time of each and the
ratio reference / fixed.

* ``dlcm-paper step``: one DLCM training step (forward, two-sided AttRank loss, backward, no optimizer
  step, which both share), ``--batch`` x ``--items`` x ``--features``, default widths;
* ``softrank loss``: forward + backward of ``ctxrank.losses.softrank`` on ``--batch`` lists of
  ``--items`` random scores.

    .venv/bin/python benchmarks/bench_recurrence_backward.py [--threads 2] [--batch 80] [--items 100]
        [--repeats 5] [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

from _common import add_common_args
from _report import emit_json, machine_info, machine_line, markdown_table


def indexed_gru_forward(self, seq, lengths):
    """``PaperGRU.forward`` as it was before the fix: step ``t`` read as ``xp[:, t]`` (reference)."""
    import torch

    B, T, _ = seq.shape
    H = self.hidden_size
    h = seq.new_zeros(B, H)
    xp = self.input_proj(seq)
    live = torch.arange(T)[None, :] < lengths[:, None]
    outputs = []
    for t in range(T):
        xu, xr, xc = xp[:, t].split(H, dim=-1)
        hu, hr = self.gate_proj(h).split(H, dim=-1)
        u = torch.sigmoid(xu + hu)
        r = torch.sigmoid(xr + hr)
        c = torch.tanh(xc + self.cand_proj(r * h))
        h = torch.where(live[:, t, None], torch.lerp(h, c, u), h)
        outputs.append(h)
    return torch.stack(outputs, dim=1), h


def indexed_insert_items(state, beats):
    """``ctxrank.losses._insert_items`` as it was before the fix: ``beats[:, t]`` (reference)."""
    import torch.nn.functional as F

    for t in range(beats.shape[1]):
        p = beats[:, t, :, None]
        shifted = F.pad(state[..., :-1], (1, 0))
        state = state + p * (shifted - state)
    return state


@contextlib.contextmanager
def reference(enabled: bool):
    """Swap the previous per-step indexing in for the duration (the library's code otherwise)."""
    from ctxrank import losses
    from ctxrank.models.dlcm import PaperGRU

    if not enabled:
        yield
        return
    saved = PaperGRU.forward, losses._insert_items
    PaperGRU.forward, losses._insert_items = indexed_gru_forward, indexed_insert_items
    try:
        yield
    finally:
        PaperGRU.forward, losses._insert_items = saved


def dlcm_case(B: int, L: int, F: int, widths: tuple[int, ...] | None = None):
    """A closure running one DLCM step (loss + backward); returns (loss, gradients)."""
    import torch

    from ctxrank.losses import get_loss
    from ctxrank.registry import make_model

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(B, L, F, generator=gen)
    y = torch.randint(0, 3, (B, L), generator=gen).float()
    mask = torch.ones(B, L, dtype=torch.bool)
    torch.manual_seed(0)
    model = make_model("dlcm", F, {"gru": "paper", "encoder_widths": widths})
    loss_fn = get_loss("attrank")

    def run():
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model(x, mask), y, mask, form="dlcm")
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    return run


def softrank_case(B: int, L: int):
    import torch

    from ctxrank.losses import softrank

    gen = torch.Generator().manual_seed(0)
    s0 = torch.randn(B, L, generator=gen)
    y = torch.randint(0, 3, (B, L), generator=gen).float()
    mask = torch.ones(B, L, dtype=torch.bool)

    def run():
        s = s0.clone().requires_grad_(True)
        loss = softrank(s, y, mask)
        loss.backward()
        return loss.detach(), [s.grad]

    return run


def compare(name: str, run, repeats: int) -> dict:
    with reference(True):
        ref_loss, ref_grads = run()
    loss, grads = run()
    pairs = list(zip([ref_loss, *ref_grads], [loss, *grads], strict=True))
    max_diff = max(float((a - b).abs().max()) for a, b in pairs)
    if any(float((a - b).abs().max()) > 1e-6 * float(a.abs().max().clamp(min=1e-30)) for a, b in pairs):
        raise SystemExit(f"{name}: the fixed code does not compute what the reference does ({max_diff})")
    times = {"reference": [], "fixed": []}
    for _ in range(repeats):  # interleaved, so that drifts in the machine's speed hit both alike
        for which in ("reference", "fixed"):
            with reference(which == "reference"):
                t0 = time.perf_counter()
                run()
                times[which].append(time.perf_counter() - t0)
    ref, fixed = statistics.median(times["reference"]), statistics.median(times["fixed"])
    print(
        f"  {name}: reference {ref * 1000:.1f} ms, fixed {fixed * 1000:.1f} ms, {ref / fixed:.2f}x",
        flush=True,
    )
    return {
        "reference_s": times["reference"],
        "fixed_s": times["fixed"],
        "median_reference_s": ref,
        "median_fixed_s": fixed,
        "speedup": ref / fixed,
        "max_abs_difference": max_diff,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, isolate=False)
    ap.add_argument("--batch", type=int, default=80, help="lists per batch (default 80)")
    ap.add_argument("--items", type=int, default=100, help="items per list (default 100)")
    ap.add_argument("--features", type=int, default=136, help="DLCM input features (default 136, MSLR)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls of each (default 5)")
    args = ap.parse_args(argv)
    import torch

    if args.quick:
        args.batch, args.items, args.features, args.repeats = 4, 12, 8, 2
    torch.set_num_threads(args.threads)
    info = machine_info(args.threads)
    print(machine_line(info), flush=True)
    B, L, F = args.batch, args.items, args.features
    print(
        f"before/after, {B} lists x {L} items, {args.threads} threads, "
        f"median of {args.repeats} interleaved calls"
    )
    results = {
        "dlcm-paper step": compare(
            "dlcm-paper step", dlcm_case(B, L, F, (16, 16) if args.quick else None), args.repeats
        ),
        "softrank loss": compare("softrank loss", softrank_case(B, L), args.repeats),
    }
    print()
    rows = [
        [
            k,
            f"{r['median_reference_s'] * 1000:.1f}",
            f"{r['median_fixed_s'] * 1000:.1f}",
            f"{r['speedup']:.2f}x",
        ]
        for k, r in results.items()
    ]
    print(markdown_table(["case", "reference (xp[:, t]) ms", "fixed (unbind) ms", "speedup"], rows))
    emit_json(
        {
            "benchmark": "bench_recurrence_backward",
            "quick": args.quick,
            "batch": B,
            "items": L,
            "features": F,
            "threads": args.threads,
            "repeats": args.repeats,
            "machine": info,
            "results": results,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
