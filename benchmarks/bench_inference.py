"""Inference latency benchmark (not a test): re-ranking one list, and a batch of lists, per model, CPU.

For every neural model of the registry (``ctxrank.registry.MODELS``; DLCM twice, ``gru="paper"``
and ``gru="torch"``; every model with its default widths and random weights: latency does not depend on
the weights' values) and for the reference, a plain linear scorer ``nn.Linear(F, 1)`` over the
features, one call is ``model(features, mask)`` on prebuilt tensors, the model in ``eval()`` mode,
under ``torch.inference_mode()``. Inputs: uniform [0, 1) features, ``--items`` 100 items a list,
``--features`` 136 (the MSLR shape), every item real (mask all True). Three settings:

* one list of 100 items, 1 thread (``--one-thread``);
* one list of 100 items, ``--threads`` 2;
* a batch of ``--lists`` 1,000 lists of 100 items, ``--threads`` 2.

Each (setting, model): warm-up calls, then timed calls (``time.perf_counter`` around each) until
``--repeats-one`` / ``--repeats-batch`` calls, or until ``--budget-s`` seconds have passed once at
least 100 (one list) / 5 (batch) calls are timed; the number of timed calls is reported (p99 over
fewer than 100 calls is close to the maximum). Reported: p50 and p99 latency, the mean, the ratio of
each model's p50 to the linear scorer's p50 in the same setting, and lists/s at p50. The issue's target:
QILCM, one list, p50 < 1 ms (allRank's context-aware Transformer: 2.7 ms).

    .venv/bin/python benchmarks/bench_inference.py [--threads 2] [--lists 1000] [--items 100]
        [--features 136] [--models qilcm,dlcm-paper,...] [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import add_common_args, summarize
from _report import emit_json, machine_info, machine_line, markdown_table

TARGET_QILCM_ONE_LIST_P50_S = 1e-3  # issue 9
ALLRANK_ONE_LIST_S = 2.7e-3  # allRank's context-aware Transformer, one list (issue 9)
REFERENCE = "linear (reference)"


def model_configs() -> dict[str, tuple[str, dict]]:
    """label -> (registry name, model params): the issue's list, then any other registry entry."""
    from ctxrank.registry import MODELS, is_baseline

    configs: dict[str, tuple[str, dict]] = {
        "qilcm": ("qilcm", {}),
        "dlcm-paper": ("dlcm", {"gru": "paper"}),
        "dlcm-torch": ("dlcm", {"gru": "torch"}),
        "dcm": ("dcm", {}),
        "arsm": ("arsm", {}),
        "listnet": ("listnet", {}),
        "mnl": ("mnl", {}),
    }
    covered = {name for name, _ in configs.values()}
    for name in sorted(n for n in MODELS if not is_baseline(n)):
        if name not in covered:
            configs[name] = (name, {})
    return configs


def time_calls(fn, warmup: int, repeats: int, min_repeats: int, budget_s: float) -> list[float]:
    """Seconds of each timed call of ``fn()`` after ``warmup`` untimed calls (see the module docstring)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= min_repeats and time.perf_counter() - start > budget_s:
            break
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, isolate=False)
    ap.add_argument("--one-thread", type=int, default=1, help="threads of the first one-list setting (1)")
    ap.add_argument("--lists", type=int, default=1000, help="lists in the batch setting (default 1000)")
    ap.add_argument("--items", type=int, default=100, help="items per list (default 100)")
    ap.add_argument("--features", type=int, default=136, help="features per item (default 136, MSLR)")
    ap.add_argument("--repeats-one", type=int, default=1000, help="timed calls, one list (default 1000)")
    ap.add_argument("--repeats-batch", type=int, default=20, help="timed calls, batch (default 20)")
    ap.add_argument("--warmup-one", type=int, default=20, help="warm-up calls, one list (default 20)")
    ap.add_argument("--warmup-batch", type=int, default=2, help="warm-up calls, batch (default 2)")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=30.0,
        help="stop timing a (setting, model) after this many seconds, once 100 (one list) or 5 "
        "(batch) calls are timed (default 30)",
    )
    ap.add_argument("--models", help="comma-separated labels (default: all; see the output)")
    args = ap.parse_args(argv)
    if args.quick:
        args.lists, args.items, args.repeats_one, args.repeats_batch = 8, 10, 5, 2
        args.warmup_one, args.warmup_batch, args.budget_s = 1, 1, 1.0

    import torch

    from ctxrank.registry import make_model

    configs = model_configs()
    if args.models:
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        unknown = [m for m in wanted if m not in configs]
        if unknown:
            raise SystemExit(f"unknown --models {unknown}; valid: {', '.join(configs)}")
        configs = {k: configs[k] for k in wanted}

    info = machine_info(args.threads)
    info["one_list_threads"] = args.one_thread
    print(machine_line(info), flush=True)
    L, F = args.items, args.features
    torch.manual_seed(0)
    models: dict[str, torch.nn.Module] = {}
    ref = torch.nn.Linear(F, 1)
    models[REFERENCE] = ref
    for label, (name, params) in configs.items():
        models[label] = make_model(name, F, params)
    for m in models.values():
        m.eval()

    def call(model, x, mask):
        if model is ref:
            return lambda: ref(x).squeeze(-1)
        return lambda: model(x, mask)

    gen = torch.Generator().manual_seed(0)

    def threads_label(n: int) -> str:
        return f"{n} thread" if n == 1 else f"{n} threads"

    settings = [(f"one list, {threads_label(args.one_thread)}", 1, args.one_thread)]
    if args.threads != args.one_thread:
        settings.append((f"one list, {threads_label(args.threads)}", 1, args.threads))
    settings.append((f"{args.lists:,} lists, {threads_label(args.threads)}", args.lists, args.threads))
    blob_settings: dict[str, dict] = {}
    for label, n_lists, threads in settings:
        torch.set_num_threads(threads)
        x = torch.rand(n_lists, L, F, generator=gen)
        mask = torch.ones(n_lists, L, dtype=torch.bool)
        one = n_lists == 1
        warmup = args.warmup_one if one else args.warmup_batch
        repeats = args.repeats_one if one else args.repeats_batch
        min_repeats = min(repeats, 100 if one else 5)
        print(f"\n## {label}: {n_lists} x {L} items x {F} features", flush=True)
        results: dict[str, dict] = {}
        with torch.inference_mode():
            for name, model in models.items():
                fn = call(model, x, mask)
                out = fn()
                if out.shape != (n_lists, L) or not bool(torch.isfinite(out).all()):
                    raise RuntimeError(
                        f"{name}: expected finite scores of shape {(n_lists, L)}, got {out.shape}"
                    )
                s = summarize(time_calls(fn, warmup, repeats, min_repeats, args.budget_s))
                s["lists_per_s"] = n_lists / s["p50_s"]
                results[name] = s
                print(f"  {name}: p50 {s['p50_s'] * 1000:.3f} ms, p99 {s['p99_s'] * 1000:.3f} ms", flush=True)
        base = results[REFERENCE]["p50_s"]
        table = []
        for name, s in results.items():
            s["p50_over_linear"] = s["p50_s"] / base
            table.append(
                [
                    name,
                    s["n"],
                    f"{s['p50_s'] * 1000:.3f}",
                    f"{s['p99_s'] * 1000:.3f}",
                    f"{s['mean_s'] * 1000:.3f}",
                    f"{s['p50_over_linear']:.1f}",
                    f"{s['lists_per_s']:,.0f}",
                ]
            )
        print()
        print(
            markdown_table(
                ["model", "timed calls", "p50 ms", "p99 ms", "mean ms", "p50 / linear p50", "lists/s (p50)"],
                table,
            )
        )
        blob_settings[label] = {
            "lists": n_lists,
            "items": L,
            "features": F,
            "threads": threads,
            "results": results,
        }

    verdicts = {}
    print()
    for label, n_lists, _ in settings:
        r = blob_settings[label]["results"].get("qilcm")
        if r is None or n_lists != 1:
            continue
        p50 = r["p50_s"]
        verdicts[f"qilcm_{label}_p50_s"] = p50
        print(
            f"QILCM, {label}: p50 {p50 * 1000:.3f} ms (target < {TARGET_QILCM_ONE_LIST_P50_S * 1000:g} ms: "
            f"{'met' if p50 < TARGET_QILCM_ONE_LIST_P50_S else 'NOT met'}; allRank's context-aware "
            f"Transformer: {ALLRANK_ONE_LIST_S * 1000:g} ms, not measured here)"
        )
    blob = {
        "benchmark": "bench_inference",
        "quick": args.quick,
        "threads": args.threads,
        "machine": info,
        "reference": "nn.Linear(features, 1) on the same inputs",
        "target_qilcm_one_list_p50_s": TARGET_QILCM_ONE_LIST_P50_S,
        "settings": blob_settings,
        "verdicts": verdicts,
    }
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
