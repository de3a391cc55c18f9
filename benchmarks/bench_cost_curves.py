"""Cost curves (not a test): training-step time and peak memory of each model against the number
of queries and against the list length, MSLR-shaped inputs (136 features), CPU.

One training step is the inner loop of ``ctxrank.training.loop.fit``: a batch -> ``model.training_loss``
with the model's default loss (and its default options) -> backward -> Adam (lr 1e-3). Every model
runs at its defaults (the papers' settings: DLCM's 1,024-wide GRU, ``attn``'s 4 blocks with dropout
0.3 and the ``lambdaloss`` loss, SetRank's 6 blocks of 256, ...). Models (``--models``): ``qilcm``,
``dlcm``, ``dcm``, ``attn``, ``setrank``, ``dasalc``, ``gsf`` and ``listnet`` (a linear scorer: the
reference). Each model runs in a fresh subprocess per axis (and mode), its points in ascending order
(``benchmarks/_common.py``: ``run_case``; one subprocess per point would spend most of the run
starting Python and torch on a loaded machine); before each point the garbage is collected and freed
heap is handed back to the OS (glibc ``malloc_trim``) and a fresh model is built (same seed), and the
peak-RSS mark is reset, so a point's peak is its own (a larger earlier point would otherwise hide it; the
points only grow). A point whose predicted step time (the last step time scaled by the growth exponent
of the last two points, between 1 and 2) exceeds ``--max-step-s`` is not run and recorded as skipped.

**(a) Queries** (``--queries``, default 1,000 to 31,531 = WEB30K's query count): a synthetic
:class:`RankingData` of ``Q`` queries of ``--items`` (100: the top-100 re-ranking protocol) items is
built in the subprocess, then ``--warmup`` + ``--repeats`` steps draw batches of ``--batch`` (80, the
default ``train.batch_size``) from ``iterate_batches`` (seeded shuffling; length buckets, or random
batches for QILCM, as ``fit`` does). **Epoch time is extrapolated, not measured**: the median step
time x ``ceil(Q / batch)`` steps (every batch has the same shape here, and nothing in a step reads the
other queries). Peak memory: the subprocess's absolute peak resident set during the steps (``VmHWM``
after a reset: interpreter and libraries, the data, the model and the steps; not the synthetic data
generator's own temporaries, which come before), beside the features' own bytes.

**(b) List length** (``--lengths``, default 10 to 1,251 = WEB30K's longest list), one batch of
``--length-batch`` (8) lists, reused by every step: ``unpadded`` (every list ``L`` items) and
``padded`` (one list of ``L`` items, the others ``--short`` (10) items, all padded to ``L``). Peak
memory: the growth of the peak resident set during the steps over what the process held with the
model and the batch built (``peak_rss_delta_mib``), beside ctxrank's own estimate of the step
(``ctxrank.training.memory``: the weights, their gradients and Adam's state, the padded batch, the
model's ``batch_memory`` and the loss's ``loss_memory``; the check ``train.max_memory_bytes`` runs
before allocating) and their ratio. ``--modes`` picks one of the two.

Output: Markdown tables (with each point's step time over ListNet's at the same point of the same run,
``step_over_reference``), ``--json FILE``, and with ``--plot DIR`` two PNG figures
(``cost_curves_queries.png``, ``cost_curves_length.png``: log-log axes, one line per model).

    .venv/bin/python benchmarks/bench_cost_curves.py --threads 1 --json bench-results/cost_curves.json
        --plot docs/images
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from _common import (
    PeakRSS,
    add_common_args,
    child_main,
    run_case,
    summarize,
    synthetic_ranking_data,
    time_training_steps,
)
from _report import emit_json, machine_info, machine_line, markdown_table

MODELS = ("qilcm", "dlcm", "dcm", "attn", "setrank", "dasalc", "gsf", "listnet")
REFERENCE = "listnet"
MODES = ("unpadded", "padded")


def _estimate_bytes(model, B: int, L: int, F: int) -> int:
    """ctxrank's estimate of a training step on ``B`` lists padded to ``L`` (what
    ``ctxrank.training.memory.check_training`` compares with ``train.max_memory_bytes``)."""
    from ctxrank.losses import loss_memory
    from ctxrank.training.memory import input_bytes

    need = model.state_memory(training=True) + input_bytes(B, L, F, 0, training=True)
    need += model.batch_memory(B, L, training=True)
    options = dict(model.traits.default_loss_params)
    return need + (0 if model.traits.own_objective else loss_memory(model.traits.default_loss, B, L, options))


def point_case(spec: dict, measure_memory: bool) -> dict:
    """``warmup + repeats`` training steps of one model at one point of one axis (module docstring)."""
    import torch

    from ctxrank.data.lists import ListBatch, iterate_batches
    from ctxrank.losses import get_loss
    from ctxrank.registry import make_model

    torch.set_num_threads(spec["threads"])
    F, steps = spec["features"], spec["warmup"] + spec["repeats"]
    torch.manual_seed(0)
    t_build = time.perf_counter()
    if spec["axis"] == "queries":
        data = synthetic_ranking_data(spec["queries"], spec["items"], F, seed=0)
        data_mib = data.features.nbytes / 2**20
    model = make_model(spec["model"], F)
    model.train()
    loss_fn = get_loss(model.traits.default_loss)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if spec["axis"] == "queries":
        B, L = spec["batch"], spec["items"]
        gen = np.random.default_rng(0)
        bucket = model.traits.batching == "buckets"
        batches = iterate_batches(data, B, shuffle=True, generator=gen, bucket=bucket)
    else:
        B, L = spec["batch"], spec["length"]
        lengths = torch.full((B,), L) if spec["mode"] == "unpadded" else torch.full((B,), spec["short"])
        lengths[0] = L
        mask = torch.arange(L)[None, :] < lengths[:, None]
        g = torch.Generator().manual_seed(L)
        fixed = ListBatch(
            features=torch.rand(B, L, F, generator=g) * mask[..., None],
            labels=torch.randint(0, 5, (B, L), generator=g).float() * mask,
            mask=mask,
            query_index=torch.arange(B),
        )
        data_mib = fixed.features.numel() * 4 / 2**20
    build_s = time.perf_counter() - t_build
    next_batch = (lambda: next(batches)) if spec["axis"] == "queries" else (lambda: fixed)
    with PeakRSS(measure_memory) as mem:
        times = time_training_steps(model, loss_fn, opt, next_batch, steps, spec["warmup"], spec["model"])
    step = summarize(times)
    out = {
        "step": step,
        "median_s": step["median_s"],
        "build_s": build_s,
        "data_mib": data_mib,
        "estimate_mib": _estimate_bytes(model, B, L, F) / 2**20,
        "parameters": sum(p.numel() for p in model.parameters()),
        **mem.as_dict(),
    }
    if spec["axis"] == "queries":
        out["epoch_steps"] = math.ceil(spec["queries"] / B)
        out["epoch_s_extrapolated"] = step["median_s"] * out["epoch_steps"]
    elif out["peak_rss_delta_mib"]:
        out["estimate_over_measured"] = out["estimate_mib"] / out["peak_rss_delta_mib"]
    return out


def _release_memory() -> None:
    """Collect garbage and hand freed heap back to the OS (glibc ``malloc_trim``), so that the next point's
    peak-RSS growth is measured from a resident set without the previous point's freed memory."""
    import gc

    from ctxrank._allocator import release_free_memory

    gc.collect()
    release_free_memory()


def _predicted(done: list[tuple[int, float]], n: int) -> float | None:
    """Step time predicted at ``n`` from the points run so far: the last step time scaled by the growth
    exponent of the last two points (between 1 and 2; 2 from a single point)."""
    if not done:
        return None
    (n1, t1), (n2, t2) = done[-2] if len(done) > 1 else done[-1], done[-1]
    slope = math.log(t2 / t1) / math.log(n2 / n1) if n2 > n1 and t1 > 0 and t2 > 0 else 2.0
    return t2 * (n / n2) ** min(max(slope, 1.0), 2.0)


def series_case(spec: dict, measure_memory: bool) -> dict:
    """One model along one axis (and mode), points in ascending order in this process; freed memory is
    released before each point (:func:`_release_memory`). On the length axis a point predicted slower
    than ``spec["max_step_s"]`` is recorded as skipped, and so are the longer ones after it (a step's
    shape does not change with the number of queries: nothing is skipped on that axis)."""
    key = "queries" if spec["axis"] == "queries" else "length"
    out, done = {}, []
    for n in spec["points"]:
        predicted = _predicted(done, n) if key == "length" else None
        if predicted is not None and predicted > spec["max_step_s"]:
            out[str(n)] = {"skipped": f"predicted step {predicted:.0f} s > {spec['max_step_s']:g} s"}
            continue
        _release_memory()
        r = out[str(n)] = point_case({**spec, key: n}, measure_memory)
        done.append((n, r["median_s"]))
    return out


def _run(spec: dict, args) -> dict:
    """One series; a failure (e.g. out of memory) is recorded for its points, not raised."""
    try:
        return run_case(Path(__file__), spec, args.isolate, series_case)
    except RuntimeError as exc:
        return {str(n): {"failed": str(exc).splitlines()[0][:300]} for n in spec["points"]}


def _report(label: str, r: dict) -> None:
    if "skipped" in r or "failed" in r:
        print(f"  {label}: {r.get('skipped') or 'FAILED ' + r['failed']}", flush=True)
        return
    parts = [f"step {r['median_s'] * 1000:.0f} ms"]
    if "epoch_s_extrapolated" in r:
        parts.append(f"epoch ~{r['epoch_s_extrapolated']:.0f} s")
    if r.get("peak_rss_mib") is not None:
        parts.append(f"peak RSS {r['peak_rss_mib']:,.0f} MiB (+{r['peak_rss_delta_mib']:,.0f} in the steps)")
    parts.append(f"estimate {r['estimate_mib']:,.0f} MiB")
    print(f"  {label}: " + ", ".join(parts), flush=True)


def _spec(args, axis: str, name: str, points: list[int], **extra) -> dict:
    return {
        "axis": axis,
        "model": name,
        "points": points,
        "features": args.features,
        "threads": args.threads,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "max_step_s": args.max_step_s,
        **extra,
    }


def run_queries(args, models: list[str]) -> dict:
    counts = [int(q) for q in args.queries.split(",")]
    print(
        f"\n## (a) Queries: {args.items} items a query, batch {args.batch}, {args.features} features, "
        f"{args.warmup} warm-up + {args.repeats} timed steps; epoch time = median step x steps "
        "(extrapolated)",
        flush=True,
    )
    results: dict = {}
    for name in models:
        spec = _spec(args, "queries", name, counts, items=args.items, batch=args.batch)
        results[name] = _run(spec, args)
        for q in counts:
            _report(f"{name} Q={q:,}", results[name][str(q)])
    return {"counts": counts, "results": results}


def run_lengths(args, models: list[str], modes: list[str]) -> dict:
    lengths = [int(n) for n in args.lengths.split(",")]
    print(
        f"\n## (b) List length: batch {args.length_batch} lists, {args.features} features, padded = one "
        f"list of L items and {args.length_batch - 1} of {args.short}; {args.warmup} warm-up + "
        f"{args.repeats} timed steps; skipped when the predicted step exceeds {args.max_step_s:g} s",
        flush=True,
    )
    results: dict = {}
    for mode in modes:
        results[mode] = {}
        for name in models:
            spec = _spec(args, "length", name, lengths, mode=mode, short=args.short, batch=args.length_batch)
            results[mode][name] = _run(spec, args)
            for n in lengths:
                _report(f"{mode} {name} L={n:,}", results[mode][name][str(n)])
    return {"lengths": lengths, "modes": modes, "results": results}


def _fmt(value: float | None) -> str:
    """Three significant digits at most, thousands separated; ``–`` for not measured."""
    if value is None:
        return "–"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _cell(r: dict, key: str, scale: float = 1.0) -> str:
    if "skipped" in r:
        return "skipped"
    if "failed" in r:
        return "failed"
    v = r.get(key)
    return _fmt(None if v is None else v * scale)


def add_ratios(blob: dict) -> None:
    """``step_over_reference``: each point's median step over the reference model's (ListNet's) at the
    same point of the same run, where both were measured."""
    series = []
    if "queries" in blob:
        series.append(blob["queries"]["results"])
    if "length" in blob:
        series += list(blob["length"]["results"].values())
    for results in series:
        ref = results.get(REFERENCE, {})
        for res in results.values():
            for point, r in res.items():
                base = ref.get(point, {}).get("median_s")
                if base and "median_s" in r:
                    r["step_over_reference"] = r["median_s"] / base


def tables(blob: dict) -> str:
    out = []
    if "queries" in blob:
        q = blob["queries"]
        counts = q["counts"]
        header = [
            "model",
            *(f"epoch s, Q={c:,}" for c in counts),
            *(f"peak RSS MiB, Q={c:,}" for c in counts),
        ]
        rows = [
            [name, *(_cell(res[str(c)], "epoch_s_extrapolated") for c in counts)]
            + [_cell(res[str(c)], "peak_rss_mib") for c in counts]
            for name, res in q["results"].items()
        ]
        out += [
            "(a) queries: epoch time (extrapolated from the median step) and peak RSS",
            markdown_table(header, rows),
        ]
    if "length" in blob:
        lg = blob["length"]
        for mode in lg["modes"]:
            res = lg["results"][mode]
            header = ["model", *(f"L={n:,}" for n in lg["lengths"])]
            rows = [
                [name, *(_cell(r[str(n)], "median_s", 1000) for n in lg["lengths"])]
                for name, r in res.items()
            ]
            out += [f"(b) list length, {mode}: step ms (median)", markdown_table(header, rows)]
            rows = [
                [
                    name,
                    *(
                        f"{_cell(r[str(n)], 'peak_rss_delta_mib')} / {_cell(r[str(n)], 'estimate_mib')}"
                        if "skipped" not in r[str(n)] and "failed" not in r[str(n)]
                        else _cell(r[str(n)], "x")
                        for n in lg["lengths"]
                    ),
                ]
                for name, r in res.items()
            ]
            out += [
                f"(b) list length, {mode}: peak RSS delta MiB / ctxrank's estimate MiB",
                markdown_table(header, rows),
            ]
    ratios = []
    if "queries" in blob:
        q = blob["queries"]
        ratios.append(("(a) queries", q["results"], q["counts"], "Q"))
    if "length" in blob:
        lg = blob["length"]
        ratios += [(f"(b) list length, {m}", lg["results"][m], lg["lengths"], "L") for m in lg["modes"]]
    for title, results, points, var in ratios:
        if REFERENCE not in results:
            continue
        header = ["model", *(f"{var}={n:,}" for n in points)]
        rows = [
            [name, *(_cell(r[str(n)], "step_over_reference") for n in points)] for name, r in results.items()
        ]
        out += [
            f"{title}: step time / {REFERENCE}'s (the reference) at the same point",
            markdown_table(header, rows),
        ]
    return "\n\n".join(out)


def _series(res: dict, xs: list[int], key: str) -> tuple[list[int], list[float]]:
    pts = [(x, res[str(x)].get(key)) for x in xs if res[str(x)].get(key)]
    return [p[0] for p in pts], [p[1] for p in pts]


def _save_figure(plt, fig, title: str, path: Path) -> str:
    """Title ``fig``, write it to ``path`` (PNG, 80 dpi), close it; returns the path written."""
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return str(path)


def _log_axes(ax) -> None:
    """Log-log axes with a grid; an axis without data (peak memory under ``--isolate none``) says so."""
    if ax.lines and any(len(line.get_xdata()) for line in ax.lines):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    else:
        ax.text(0.5, 0.5, "not measured (--isolate none)", ha="center", va="center", transform=ax.transAxes)


def plot(blob: dict, out_dir: str) -> list[str]:
    """Two PNGs in ``out_dir`` (log-log, one line per model); returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    written = []
    style = {"linewidth": 1.2, "markersize": 3, "marker": "o"}
    load = blob["machine"].get("load_average_1_5_15") or ["?"]
    note = f"{blob['threads']} thread(s), 1-min load average at start {load[0]}"
    if "queries" in blob:
        q = blob["queries"]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
        for name, res in q["results"].items():
            axes[0].plot(*_series(res, q["counts"], "epoch_s_extrapolated"), label=name, **style)
            axes[1].plot(*_series(res, q["counts"], "peak_rss_mib"), label=name, **style)
        axes[0].set_ylabel("epoch time, s (median step x steps)")
        axes[1].set_ylabel("peak RSS, MiB (whole process)")
        for ax in axes:
            ax.set_xlabel("training queries")
            _log_axes(ax)
        axes[1].legend(fontsize=7, ncol=2)
        title = f"Cost vs queries ({blob['items']} items, batch {blob['batch']}; {note})"
        written.append(_save_figure(plt, fig, title, Path(out_dir) / "cost_curves_queries.png"))
    if "length" in blob:
        lg = blob["length"]
        fig, axes = plt.subplots(2, len(lg["modes"]), figsize=(4.5 * len(lg["modes"]), 6.4), squeeze=False)
        for col, mode in enumerate(lg["modes"]):
            for name, res in lg["results"][mode].items():
                axes[0][col].plot(*_series(res, lg["lengths"], "median_s"), label=name, **style)
                axes[1][col].plot(*_series(res, lg["lengths"], "peak_rss_delta_mib"), label=name, **style)
            axes[0][col].set_title(mode, fontsize=9)
            axes[0][col].set_ylabel("step time, s")
            axes[1][col].set_ylabel("peak RSS growth in the steps, MiB")
            axes[1][col].set_xlabel("list length L")
        for ax in (a for row in axes for a in row):
            _log_axes(ax)
        axes[0][-1].legend(fontsize=7, ncol=2)
        title = f"Cost vs list length (batch {blob['length_batch']} lists; {note})"
        written.append(_save_figure(plt, fig, title, Path(out_dir) / "cost_curves_length.png"))
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated models (default: all eight)")
    ap.add_argument("--axes", default="queries,length", help="which curves: queries, length or both")
    ap.add_argument("--queries", default="1000,3000,10000,31531", help="query counts of axis (a)")
    ap.add_argument("--items", type=int, default=100, help="items a query on axis (a) (default 100)")
    ap.add_argument("--batch", type=int, default=80, help="lists a batch on axis (a) (default 80)")
    ap.add_argument("--lengths", default="10,30,100,300,1000,1251", help="list lengths of axis (b)")
    ap.add_argument("--length-batch", type=int, default=8, help="lists a batch on axis (b) (default 8)")
    ap.add_argument("--short", type=int, default=10, help="length of the short lists of a padded batch")
    ap.add_argument("--modes", default=",".join(MODES), help="axis (b): unpadded, padded or both")
    ap.add_argument("--features", type=int, default=136)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-step-s", type=float, default=60.0, help="skip points predicted slower (s a step)")
    ap.add_argument("--plot", metavar="DIR", help="write the PNG figures to DIR")
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child, series_case)
    if args.quick:
        args.queries, args.items, args.batch = "20,60", 6, 8
        args.lengths, args.length_batch, args.short, args.repeats = "4,12", 3, 2, 1
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise SystemExit(f"unknown --models {unknown}; valid: {', '.join(MODELS)}")
    axes = {a.strip() for a in args.axes.split(",")}
    if not axes or not axes <= {"queries", "length"}:
        raise SystemExit(f"--axes must name queries and/or length, got {args.axes!r}")

    info = machine_info(args.threads)
    print(machine_line(info), flush=True)
    started = time.perf_counter()
    blob = {
        "benchmark": "bench_cost_curves",
        "quick": args.quick,
        "machine": info,
        "threads": args.threads,
        "features": args.features,
        "items": args.items,
        "batch": args.batch,
        "length_batch": args.length_batch,
        "short": args.short,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "isolate": args.isolate,
        "reference": REFERENCE,
    }
    if "queries" in axes:
        blob["queries"] = run_queries(args, models)
    if "length" in axes:
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        if not modes or not set(modes) <= set(MODES):
            raise SystemExit(f"--modes must name unpadded and/or padded, got {args.modes!r}")
        blob["length"] = run_lengths(args, models, modes)
    blob["wall_s"] = time.perf_counter() - started
    add_ratios(blob)
    print()
    print(tables(blob))
    print(f"\ntotal wall time {blob['wall_s']:.0f} s")
    if args.plot:
        blob["figures"] = plot(blob, args.plot)
        print("figures: " + ", ".join(blob["figures"]))
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
