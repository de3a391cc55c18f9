"""Step-time benchmark (not a test): ctxrank's self-attention ranker ``attn`` against allRank's own model.

One training step (forward, loss, backward, Adam step) at the paper's WEB30K configuration of the
context-aware ranker (Pobrotyn et al. 2020; allRank's ``reproducibility/configs/contextaware_web30k``):
an input layer of 128 without activation, 4 encoder blocks, 4 heads, feed-forward width 512, dropout
0.3; on MSLR-shaped synthetic lists (default: batch 64 lists x 100 items x 136 features, uniform [0, 1)
features, labels 0-4), on the CPU or (``--device cuda``) the first GPU, where each step ends with
``torch.cuda.synchronize()`` and the peak of torch's CUDA tensor memory is recorded too. Rows, each
timed the same way:

* **ctxrank attn**: ``make_model("attn", 136)`` (the defaults are that configuration) trained by its
  ``training_loss`` with ctxrank's ``lambdaloss`` (NDCGLoss2++, mu = 10, sigma = 1: the paper's loss);
* **allRank, same loss**: allRank's ``make_model`` with that configuration (``fc_model.sizes = [128]``,
  ``activation = null``, ``transformer = {N: 4, d_ff: 512, h: 4, dropout: 0.3}``, ``d_output = 1``),
  the same batch and ctxrank's ``lambdaloss``: the two models compared on equal terms;
* **allRank, its own step**: allRank's model with allRank's ``lambdaLoss(weighing_scheme=
  "ndcgLoss2PP_scheme", k=None, mu=10, sigma=1)`` (padded labels -1, its convention).

Reported: the median (and fastest) step time over ``--rounds`` rounds that interleave the rows (each
round runs every row for ``--repeats`` steps after ``--warmup`` steps, each in a fresh subprocess), so
that a drift of the machine's load reaches every row alike; training queries per second (batch / median
step); peak RSS growth (``benchmarks/_common.py``, the largest of the rounds); and the ratios ctxrank /
allRank of queries per second, at the median steps and at the fastest steps. ``--lengths full`` (every
list ``--items`` long: ctxrank then calls the attention kernel without a mask), ``mixed`` (lengths
uniform in [items / 5, items], seed 0: both models mask the padding) or ``both`` (default).

**Other ctxrank models** (``--models attn,setrank,dasalc,qilcm``, default ``attn``): each named model
at its defaults with its default loss (``attn``: ``lambdaloss``, the row above) gets a row ``ctxrank
NAME + LOSS`` timed the same way on the same batch (QILCM: its exact query-confusion term over all
pairs; its features are the batch's), and its queries/s ratio over each allRank row: the issue's CPU
targets compare every context model's step with allRank's. ``setrank@allrank`` is SetRank at allRank's
configuration (width 128, 4 blocks, 4 heads, d_ff 512, dropout 0.3; SetRank's defaults, 6 blocks of width
256 with 8 heads, do about six times allRank's multiply-adds an item): the same arithmetic, so its ratio
measures the code.

**On a loaded machine** (``--alternate``): every row is built in this one process and the rows take one
step each in turn, the order reversed every other time, so that a change of the machine's load within
seconds reaches every row alike (fresh subprocesses per round see the load of their own minutes); the
peak memory is then not measured.

**Same function, same weights** (``forward_check`` in the output): allRank's weights are copied into a
ctxrank ``attn`` (``q``, ``k``, ``v``, ``o`` linears -> ``q_proj``, ``kv_proj = [W_k; W_v]``, ``out_proj``;
feed-forward, norms, input and output layers one to one), both in eval mode on a padded batch; the max
absolute difference of the real items' scores is printed twice: with allRank's layer norm as it is
(``a (x - mean) / (std + 1e-6) + b`` with the UNBIASED std: not ``torch.nn.LayerNorm``, so the scores
differ by a few tenths of a percent) and with allRank's norms computed as ``torch.nn.LayerNorm``
(biased variance, eps 1e-5 under the square root), where the two must agree to float32 rounding.

**allRank** (``--allrank DIR``): allRank 1.4.3 installed apart from the project's environment::

    /work/main/.venv/bin/pip install --no-deps --target /work/wt/allrank-pkgs allrank
    /work/main/.venv/bin/python benchmarks/bench_attn_step.py --allrank /work/wt/allrank-pkgs

``DIR`` goes first on ``sys.path`` of this script (and its subprocesses) only. allRank's packages import
torchvision, gcsfs and ``pkg_resources``, which its model and loss never use; ``benchmarks/_allrank_stubs``
holds stand-ins for them and is put LAST on ``sys.path`` (a real installation wins), see its README.md.
Without ``--allrank`` the script imports ``allrank`` from the environment if it can; when it cannot, the
allRank rows are skipped and the reason is printed and recorded (``allrank.error``).

    .venv/bin/python benchmarks/bench_attn_step.py [--allrank DIR] [--threads 2] [--batch 64]
        [--items 100] [--features 136] [--lengths both|full|mixed] [--rounds 3] [--repeats 5]
        [--models attn,setrank,setrank@allrank,dasalc,qilcm] [--alternate]
        [--device cpu|cuda] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from _common import PeakCUDA, PeakRSS, add_common_args, child_main, cuda_info, run_case, summarize
from _report import (
    code_of_tree,
    emit_json,
    machine_info,
    machine_line,
    markdown_table,
    publish_docs,
    stored_blocks,
)

STUBS = Path(__file__).resolve().parent / "_allrank_stubs"
#: the paper's WEB30K configuration, as allRank's reproducibility config writes it
ALLRANK_CONFIG = {
    "fc_model": {"sizes": [128], "input_norm": False, "activation": None, "dropout": 0.0},
    "transformer": {"N": 4, "d_ff": 512, "h": 4, "positional_encoding": None, "dropout": 0.3},
    "post_model": {"output_activation": None, "d_output": 1},
}
ROWS = {
    "ctxrank": "ctxrank attn + ctxrank lambdaloss",
    "allrank-same-loss": "allRank + ctxrank lambdaloss",
    "allrank-own": "allRank + allRank lambdaLoss (its own step)",
}
#: ctxrank models ``--models`` may name besides ``attn`` (each at its defaults, with its default loss;
#: ``NAME@allrank``: at allRank's configuration, :data:`AT_ALLRANK`)
OTHER_MODELS = ("setrank", "setrank@allrank", "dasalc", "qilcm", "dlcm", "mlp", "listnet")


def _setrank_at_allrank(cfg: dict) -> dict:
    """SetRank's MSAB blocks at allRank's width, blocks, heads, feed-forward width and dropout."""
    t = cfg["transformer"]
    width = cfg["fc_model"]["sizes"][-1]
    return {"d_model": width, "blocks": t["N"], "heads": t["h"], "d_ff": t["d_ff"], "dropout": t["dropout"]}


#: ``NAME@allrank`` -> the model parameters that give NAME allRank's configuration (:data:`ALLRANK_CONFIG`):
#: the same arithmetic an item, so the step measures the code, not the model's size
AT_ALLRANK = {"setrank": _setrank_at_allrank}


def model_of_row(row: str) -> tuple[str, dict]:
    """``(model name, model parameters)`` of a ``ctxrank-NAME`` or ``ctxrank-NAME@allrank`` row."""
    name, _, size = row.removeprefix("ctxrank-").partition("@")
    return name, (AT_ALLRANK[name](ALLRANK_CONFIG) if size else {})


def row_label(row: str) -> str:
    """The printed name of a row: :data:`ROWS`, or ``ctxrank NAME + LOSS`` for ``ctxrank-NAME``."""
    if row in ROWS:
        return ROWS[row]
    name, params = model_of_row(row)
    size = " at allRank's configuration" if params else ""
    return f"ctxrank {name}{size} + {default_loss_name(name)}"


def default_loss_name(name: str) -> str:
    from ctxrank.registry import get_model

    traits = get_model(name).traits
    options = ", ".join(f"{k}={v}" for k, v in traits.default_loss_params.items())
    loss = traits.default_loss or "listnet"
    return f"{loss} ({options})" if options else loss


def import_allrank(path: str | None) -> dict:
    """``{"available": True, "version", "file"}`` or ``{"available": False, "error"}``; ``path`` (a
    ``pip --target`` directory) goes first on ``sys.path``, the stubs last."""
    if path:
        sys.path.insert(0, str(Path(path).resolve()))
    sys.path.append(str(STUBS))
    try:
        import allrank
        from allrank.models.losses import lambdaLoss  # noqa: F401
        from allrank.models.model import make_model  # noqa: F401
    except Exception as exc:  # any import failure is reported, never hidden
        return {"available": False, "error": f"{type(exc).__name__}: {exc}", "path": path}
    from importlib import metadata

    try:
        version = metadata.version("allrank")
    except metadata.PackageNotFoundError:
        version = None
    return {"available": True, "version": version, "file": allrank.__file__, "path": path}


def allrank_model(n_features: int):
    """allRank's context-aware Transformer at :data:`ALLRANK_CONFIG`."""
    import copy

    from allrank.config import TransformerConfig
    from allrank.models.model import make_model

    cfg = copy.deepcopy(ALLRANK_CONFIG)
    return make_model(
        fc_model=cfg["fc_model"],
        transformer=TransformerConfig(**cfg["transformer"]),
        post_model=cfg["post_model"],
        n_features=n_features,
    )


def make_batch(B: int, L: int, F: int, lengths: list[int] | None):
    """Features (B, L, F) uniform [0, 1) (0 on padding), labels 0-4 (0 on padding), mask (B, L)."""
    import torch

    g = torch.Generator().manual_seed(0)
    n = torch.tensor(lengths) if lengths else torch.full((B,), L)
    mask = torch.arange(L)[None, :] < n[:, None]
    x = torch.rand(B, L, F, generator=g) * mask[..., None]
    y = torch.randint(0, 5, (B, L), generator=g).float() * mask
    return x, y, mask


def build_step(spec: dict):
    """``(step, model)``: one training step of the row ``spec["row"]`` on one fixed batch (forward, loss,
    backward, Adam step; on CUDA it ends with a synchronize), and its model."""
    import torch

    if not spec["row"].startswith("ctxrank"):
        import_allrank(spec["allrank"])
    from ctxrank.data.lists import ListBatch
    from ctxrank.losses import get_loss
    from ctxrank.registry import make_model

    torch.set_num_threads(spec["threads"])
    device = spec["device"]
    B, L, F = spec["batch"], spec["items"], spec["features"]
    x, y, mask = (t.to(device) for t in make_batch(B, L, F, spec["lengths"]))
    torch.manual_seed(0)
    ours = get_loss("lambdaloss")  # NDCGLoss2++, mu = 10, sigma = 1
    if spec["row"] == "ctxrank":
        model = make_model("attn", F).to(device)
        batch = ListBatch(features=x, labels=y, mask=mask, query_index=torch.arange(B, device=device))

        def loss_of_step():
            return model.training_loss(batch, ours)
    elif spec["row"].startswith("ctxrank-"):
        from ctxrank.models.base import with_default_options
        from ctxrank.registry import get_model

        name, params = model_of_row(spec["row"])
        traits = get_model(name).traits
        loss_name = traits.default_loss or "listnet"
        loss_fn = with_default_options(get_loss(loss_name), loss_name, traits.default_loss_params)
        model = make_model(name, F, params).to(device)
        batch = ListBatch(features=x, labels=y, mask=mask, query_index=torch.arange(B, device=device))

        def loss_of_step():
            return model.training_loss(batch, loss_fn)
    else:
        from allrank.models.losses import lambdaLoss

        model = allrank_model(F).to(device)
        padded = ~mask  # allRank: True = padded item
        indices = torch.arange(L, device=device).expand(B, L)
        y_allrank = torch.where(mask, y, torch.full_like(y, -1.0))  # its padded-label convention

        def loss_of_step():
            scores = model(x, padded, indices)
            if spec["row"] == "allrank-same-loss":
                return ours(scores, y, mask)
            return lambdaLoss(
                scores, y_allrank, weighing_scheme="ndcgLoss2PP_scheme", k=None, mu=10.0, sigma=1.0
            )

    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = loss_of_step()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device != "cpu":
            torch.cuda.synchronize()  # the step's kernels have finished

    return step, model


def step_case(spec: dict, measure_memory: bool) -> dict:
    """``warmup + repeats`` training steps of one row (``spec["row"]``) on one fixed batch."""
    step, model = build_step(spec)
    times = []
    with PeakRSS(measure_memory) as mem, PeakCUDA(spec["device"]) as gpu:
        for i in range(spec["warmup"] + spec["repeats"]):
            t0 = time.perf_counter()
            step()
            if i >= spec["warmup"]:
                times.append(time.perf_counter() - t0)
    step = summarize(times)
    return {
        "times_s": times,
        "median_s": step["median_s"],
        "parameters": sum(p.numel() for p in model.parameters()),
        **mem.as_dict(),
        **gpu.as_dict(),
    }


def copy_allrank_weights(src, dst) -> None:
    """allRank's weights into a ctxrank ``attn`` of the same configuration (module docstring)."""
    import torch

    with torch.no_grad():
        dst.fc.load_state_dict(src.input_layer.layers[0].state_dict())
        for theirs, ours in zip(src.encoder.layers, dst.blocks, strict=True):
            q, k, v, o = theirs.self_attn.linears
            ours.attention.q_proj.load_state_dict(q.state_dict())
            ours.attention.kv_proj.weight.copy_(torch.cat([k.weight, v.weight]))
            ours.attention.kv_proj.bias.copy_(torch.cat([k.bias, v.bias]))
            ours.attention.out_proj.load_state_dict(o.state_dict())
            ours.ff1.load_state_dict(theirs.feed_forward.w_1.state_dict())
            ours.ff2.load_state_dict(theirs.feed_forward.w_2.state_dict())
            for norm, sub in ((ours.norm1, theirs.sublayer[0]), (ours.norm2, theirs.sublayer[1])):
                norm.weight.copy_(sub.norm.a_2)
                norm.bias.copy_(sub.norm.b_2)
        dst.final_norm.weight.copy_(src.encoder.norm.a_2)
        dst.final_norm.bias.copy_(src.encoder.norm.b_2)
        dst.score.load_state_dict(src.output_layer.w_1.state_dict())


def forward_check(B: int, L: int, F: int, allrank_path: str | None) -> dict:
    """Max |score difference| of the real items, allRank vs ctxrank on allRank's weights (eval mode)."""
    import torch
    import torch.nn.functional as nnf

    import_allrank(allrank_path)
    from allrank.models import transformer as allrank_transformer

    from ctxrank.registry import make_model

    torch.manual_seed(0)
    theirs = allrank_model(F).eval()
    ours = make_model("attn", F).eval()
    copy_allrank_weights(theirs, ours)
    lengths = torch.randint(1, L + 1, (B,), generator=torch.Generator().manual_seed(1))
    lengths[0] = L
    x, _, mask = make_batch(B, L, F, lengths.tolist())
    indices = torch.arange(L).expand(B, L)
    out = {"batch": B, "items": L, "lengths": f"{int(lengths.min())}-{int(lengths.max())}"}
    with torch.no_grad():
        ref = ours(x, mask)
        out["max_abs_score"] = float(ref[mask].abs().max())
        out["allrank_layer_norm"] = float((theirs(x, ~mask, indices) - ref)[mask].abs().max())
        original = allrank_transformer.LayerNorm.forward
        try:  # allRank's norms as torch.nn.LayerNorm computes them
            allrank_transformer.LayerNorm.forward = lambda self, t: nnf.layer_norm(
                t, t.shape[-1:], self.a_2, self.b_2, eps=1e-5
            )
            out["torch_layer_norm"] = float((theirs(x, ~mask, indices) - ref)[mask].abs().max())
        finally:
            allrank_transformer.LayerNorm.forward = original
    return out


def lengths_of(kind: str, B: int, L: int) -> list[int] | None:
    if kind == "full":
        return None
    import numpy as np

    return np.random.default_rng(0).integers(max(1, L // 5), L + 1, size=B).tolist()


def row_spec(args, row: str, lengths: list[int] | None) -> dict:
    """What :func:`build_step` (and :func:`step_case`: ``repeats``, ``warmup``) read of one row."""
    keys = ("allrank", "batch", "items", "features", "threads", "repeats", "warmup", "device")
    return {"row": row, **{k: getattr(args, k) for k in keys}, "lengths": lengths}


def run_rows(args, rows: list[str], kinds: tuple[str, ...]) -> dict[str, list[dict]]:
    """Every row, ``args.rounds`` times, interleaved (a drift of the machine's load reaches every row)."""
    runs: dict[str, list[dict]] = {}
    for kind in kinds:
        lengths = lengths_of(kind, args.batch, args.items)
        for rnd in range(args.rounds):
            for row in rows:
                key = f"{row_label(row)}, {kind}"
                r = run_case(Path(__file__), row_spec(args, row, lengths), args.isolate, step_case)
                runs.setdefault(key, []).append({"row": row, "lengths": kind, "shape": lengths, **r})
                print(f"  round {rnd + 1}, {key}: median {r['median_s'] * 1000:.1f} ms", flush=True)
    return runs


def alternate_rows(args, rows: list[str], kinds: tuple[str, ...]) -> dict[str, list[dict]]:
    """Every row built in this process, then one step of each in turn (the order reversed every other
    time), ``rounds x repeats`` times after ``warmup`` steps each: a drift of the machine's load reaches
    every row within seconds (a loaded machine), at the cost of the peak memory (not measured)."""
    import torch

    torch.set_num_threads(args.threads)
    runs: dict[str, list[dict]] = {}
    for kind in kinds:
        lengths = lengths_of(kind, args.batch, args.items)
        built = {}
        for row in rows:
            step, model = build_step(row_spec(args, row, lengths))
            for _ in range(args.warmup):
                step()
            built[row] = (step, sum(p.numel() for p in model.parameters()), [])
        for i in range(args.rounds * args.repeats):
            for row in rows if i % 2 == 0 else rows[::-1]:
                step, _, times = built[row]
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
        for row, (_, parameters, times) in built.items():
            key = f"{row_label(row)}, {kind}"
            median = summarize(times)["median_s"]
            runs[key] = [
                {
                    "row": row,
                    "lengths": kind,
                    "shape": lengths,
                    "times_s": times,
                    "median_s": median,
                    "parameters": parameters,
                    "peak_rss_delta_mib": None,
                }
            ]
            print(f"  alternated, {key}: median {median * 1000:.1f} ms", flush=True)
    return runs


def combine(runs: dict[str, list[dict]], B: int) -> dict[str, dict]:
    """Each row's steps of all rounds -> its result (median, fastest, queries/s, peak)."""
    results: dict[str, dict] = {}
    for key, parts in runs.items():
        step = summarize([t for part in parts for t in part["times_s"]])
        peaks = [p["peak_rss_delta_mib"] for p in parts if p["peak_rss_delta_mib"] is not None]
        first = parts[0]
        results[key] = {
            "row": first["row"],
            "lengths": first["lengths"],
            "step": step,
            "median_s": step["median_s"],
            "min_s": step["min_s"],
            "queries_per_s": B / step["median_s"],
            "queries_per_s_at_min": B / step["min_s"],
            "parameters": first["parameters"],
            "peak_rss_delta_mib": max(peaks) if peaks else None,
            "peak_cuda_delta_mib": max((p.get("peak_cuda_delta_mib") or 0.0) for p in parts) or None,
            "rounds": [{k: v for k, v in p.items() if k != "shape"} for p in parts],
        }
    return results


def lists_label(kind: str, B: int, L: int) -> str:
    """``"100 items"`` for full lists, ``"20-100 items"`` for the mixed lengths of :func:`lengths_of`."""
    lengths = lengths_of(kind, B, L)
    return f"{L} items" if lengths is None else f"{min(lengths)}-{max(lengths)} items"


def report_text(blob: dict) -> str:
    """The tables and lines a run prints, from its JSON ``blob`` (also a stored one: :func:`block_text`)."""
    B, L, F = blob["batch"], blob["items"], blob["features"]
    cuda = blob["device"] != "cpu"
    lines = [machine_line(blob["machine"]) + (f"; code {blob['code']}" if blob.get("code") else "")]
    allrank = blob["allrank"]
    lines.append(f"allRank {allrank['version']}" if allrank["available"] else f"allRank: {allrank['error']}")
    lines.append(
        f"training step, batch {B} lists x {L} items x {F} features, paper configuration (d_fc 128, "
        f"4 blocks, 4 heads, d_ff 512, dropout 0.3), device {blob['device']}, {blob['threads']} threads; "
        f"{blob['rounds']} interleaved rounds, each {blob['repeats']} steps after {blob['warmup']} "
        f"warm-up steps; isolate={blob['isolate']}"
        + ("; rows alternated step by step in one process" if blob.get("alternate") else "")
    )
    header = ["step", "lists", "median ms", "min ms", "queries/s", "peak RSS delta MiB"]
    header += ["peak CUDA delta MiB"] if cuda else []
    table = []
    for r in blob["results"].values():
        peak = r["peak_rss_delta_mib"]
        table.append(
            [
                row_label(r["row"]),
                lists_label(r["lengths"], B, L),
                f"{r['median_s'] * 1000:.1f}",
                f"{r['min_s'] * 1000:.1f}",
                f"{r['queries_per_s']:.1f}",
                "–" if peak is None else f"{peak:,.0f}",
                *([f"{r['peak_cuda_delta_mib'] or 0:,.0f}"] if cuda else []),
            ]
        )
    lines += ["", markdown_table(header, table), ""]
    for name, value in blob["ratios"].items():
        lines.append(
            f"queries/s ratio {name}: {value['median']:.2f} (median steps), {value['min']:.2f} (fastest)"
        )
    check = blob["forward_check"]
    if check is not None:
        lines.append(
            f"\nsame weights, eval mode, {check['batch']} lists of {check['lengths']} items (max |score| "
            f"{check['max_abs_score']:.3g}): max |allRank - ctxrank| = {check['allrank_layer_norm']:.2e} "
            f"with allRank's layer norm (unbiased std + 1e-6), {check['torch_layer_norm']:.2e} with "
            "torch.nn.LayerNorm's"
        )
    return "\n".join(lines) + "\n"


# A page states a stored run between ``<!-- bench-attn-step: FILE -->`` and ``<!-- /bench-attn-step -->``
# (FILE: a ``--json`` file under evidence/bench/); ``--publish`` rewrites each block from its file, and
# tests/test_bench_evidence.py fails when a block differs from what its file gives.
BLOCK, block_text = stored_blocks("bench-attn-step", report_text)


def ratios_of(results: dict[str, dict], kinds: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Each ctxrank row's queries/s over each allRank row's, at the median steps and at the fastest steps."""
    ratios = {}
    for kind in kinds:
        ours_rows = [r for r in results.values() if r["row"].startswith("ctxrank") and r["lengths"] == kind]
        for ours in ours_rows:
            label = "ctxrank" if ours["row"] == "ctxrank" else row_label(ours["row"])
            for row in ("allrank-same-loss", "allrank-own"):
                theirs = results[f"{ROWS[row]}, {kind}"]
                ratios[f"{label} / {ROWS[row]}, {kind}"] = {
                    "median": ours["queries_per_s"] / theirs["queries_per_s"],
                    "min": theirs["min_s"] / ours["min_s"],
                }
    return ratios


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, device=True)
    ap.add_argument("--allrank", metavar="DIR", help="a `pip install --target` directory holding allrank")
    ap.add_argument("--batch", type=int, default=64, help="lists per batch (default 64, allRank's config)")
    ap.add_argument("--items", type=int, default=100, help="items per list (default 100)")
    ap.add_argument("--features", type=int, default=136, help="features (default 136, MSLR-WEB30K)")
    ap.add_argument("--lengths", choices=("both", "full", "mixed"), default="both")
    ap.add_argument(
        "--models",
        default="attn",
        help=f"comma-separated ctxrank models to time (default attn): attn, {', '.join(OTHER_MODELS)}",
    )
    ap.add_argument("--repeats", type=int, default=5, help="measured steps of each row in each round")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds over the rows, interleaved (default 3): load drift hits all",
    )
    ap.add_argument(
        "--alternate",
        action="store_true",
        help="all rows in this process, one step of each in turn (a loaded machine; no peak memory)",
    )
    ap.add_argument("--from-json", metavar="FILE", help="print the report of a stored run; runs nothing")
    ap.add_argument(
        "--publish",
        action="store_true",
        help="rewrite the bench-attn-step blocks of docs/*.md from their files in evidence/bench/",
    )
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child, step_case)
    if args.publish:
        publish_docs(BLOCK, block_text)
        return 0
    if args.from_json:
        print(report_text(json.loads(Path(args.from_json).read_text())), end="")
        return 0
    if args.quick:
        args.batch, args.items, args.features, args.repeats, args.warmup, args.rounds = 4, 12, 10, 2, 1, 1

    info = {**machine_info(args.threads), **cuda_info(args.device)}
    print(machine_line(info), flush=True)
    allrank = import_allrank(args.allrank)
    if allrank["available"]:
        print(f"allRank {allrank['version']} from {allrank['file']}", flush=True)
    else:
        print(f"allRank not importable, its rows are skipped: {allrank['error']}", flush=True)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(models) - {"attn", *OTHER_MODELS})
    if unknown or not models:
        ap.error(f"--models: unknown {unknown or 'none given'}; valid: attn, {', '.join(OTHER_MODELS)}")
    ours = ["ctxrank" if m == "attn" else f"ctxrank-{m}" for m in models]
    kinds = ("full", "mixed") if args.lengths == "both" else (args.lengths,)
    theirs = [r for r in ROWS if r != "ctxrank" and allrank["available"]]
    runs = (alternate_rows if args.alternate else run_rows)(args, ours + theirs, kinds)
    results = combine(runs, args.batch)
    blob = {
        "benchmark": "bench_attn_step",
        "quick": args.quick,
        "code": code_of_tree(),
        "batch": args.batch,
        "items": args.items,
        "features": args.features,
        "lengths": list(kinds),
        "models": models,
        "threads": args.threads,
        "device": args.device,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "rounds": args.rounds,
        "isolate": args.isolate,
        "alternate": args.alternate,
        "machine": info,
        "allrank": allrank,
        "configuration": ALLRANK_CONFIG,
        "results": results,
        "ratios": ratios_of(results, kinds) if allrank["available"] else {},
        "forward_check": (
            forward_check(min(args.batch, 8), args.items, args.features, args.allrank)
            if allrank["available"]
            else None
        ),
    }
    print()
    print(report_text(blob), end="")
    emit_json(blob, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
