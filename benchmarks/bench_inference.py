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
import tempfile
import time
from pathlib import Path

from _common import add_common_args, summarize, synthetic_ranking_data
from _report import emit_json, machine_info, machine_line, markdown_table

TARGET_QILCM_ONE_LIST_P50_S = 1e-3  # QILCM scoring one list, p50 target
TARGET_SERVING_OVER_MATMUL = 1.3  # QILCM's serving p50 <= 1.3x the same-size matrix product
ALLRANK_ONE_LIST_S = 2.7e-3  # allRank's context-aware Transformer, one list
REFERENCE = "linear (reference)"


def model_configs() -> dict[str, tuple[str, dict]]:
    """label -> (registry name, model params): the issue's list, then any other registry entry."""
    from ctxrank.registry import MODELS

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
    for name in sorted(n for n in MODELS if MODELS[n].traits.torch_module):
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


# ------------------------------------------------------------------------------------ serving
def multiply_adds(fn) -> int:
    """Multiply-adds of one call of ``fn()`` (``torch.utils.flop_counter``: matmuls, bmm, einsum)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() // 2


def onnx_session(path: Path):
    """The serving session: onnxruntime, CPU, one intra-op thread, sequential, ORT_ENABLE_ALL."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def exported(label: str, name: str, params: dict, F: int, workdir: Path):
    """A model of ``name`` with random weights and a min-max normalizer fitted on random lists, saved
    as ``ctxrank train`` saves it and exported by ``ctxrank.export.export_model`` to ONNX and
    TorchScript; (the loaded predictor, the onnxruntime session, the loaded TorchScript module)."""
    import torch

    from ctxrank.config import resolve_config
    from ctxrank.data.transforms import make_transform
    from ctxrank.export import export_model
    from ctxrank.registry import make_model
    from ctxrank.training.checkpoint import load_model, save_checkpoint

    train = synthetic_ranking_data(20, 100, F, seed=1)
    model = make_model(name, F, params).eval()
    overrides = [f"model={name}", *(f"model_params.{k}={v!r}".replace("'", '"') for k, v in params.items())]
    directory = save_checkpoint(
        workdir / label,
        model,
        resolve_config(None, overrides),
        make_transform("minmax").fit(train),
        train_data=train,
    )
    export_model(directory, "onnx", workdir / f"{label}.onnx")
    export_model(directory, "torchscript", workdir / f"{label}.pt")
    scripted = torch.jit.load(str(workdir / f"{label}.pt")).eval()
    return load_model(directory), onnx_session(workdir / f"{label}.onnx"), scripted


def interleaved(fns: dict, rounds: int, per_round: int, warmup: int, budget_s: float) -> dict[str, list]:
    """Seconds of each call of each ``fns`` entry, the entries taking turns (``per_round`` calls each
    per round), so that a change of the machine's load hits all of them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list] = {k: [] for k in fns}
    start = time.perf_counter()
    for r in range(rounds):
        for k, fn in fns.items():
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
        if r >= 2 and time.perf_counter() - start > budget_s:
            break
    return times


def serve_one(label: str, name: str, params: dict, args, L: int, F: int, workdir: Path) -> dict:
    """The eager model, its serving path and the same-size matrix product on one list (module doc)."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    predictor, session, scripted = exported(label, name, params, F, workdir)
    data = synthetic_ranking_data(1, L, F, seed=2)
    mask = torch.ones(1, L, dtype=torch.bool)
    x = torch.from_numpy(predictor.transform.transform(data).features[None])  # as predict normalizes
    model = predictor.model.eval()
    raw = torch.from_numpy(data.features[None])
    feeds = {"features": raw.numpy(), "mask": mask.numpy()}  # raw features: normalized inside
    expected = predictor.predict(data)  # what `ctxrank predict` writes
    with torch.inference_mode():
        diffs = {
            "onnx": float(np.abs(session.run(["scores"], feeds)[0][0] - expected).max()),
            "torchscript": float(np.abs(scripted(raw, mask)[0].numpy() - expected).max()),
        }
    # with autograd on: the flop counter's module hooks fail under no_grad / inference_mode
    macs = multiply_adds(lambda: model(x, mask)) / L
    served = multiply_adds(lambda: model.serving_scores(x, mask)) / L
    with torch.inference_mode():
        k, k_served = max(1, round(macs**0.5)), max(1, round(served**0.5))
        a, b = torch.rand(L, k), torch.rand(k, k)
        a2, b2 = torch.rand(L, k_served), torch.rand(k_served, k_served)
        fns = {
            "eager": lambda: model(x, mask),
            "onnx": lambda: session.run(["scores"], feeds),
            "torchscript": lambda: scripted(raw, mask),
            "matmul": lambda: a @ b,
            "matmul_serving_size": lambda: a2 @ b2,
        }
        times = interleaved(fns, args.serving_rounds, args.serving_per_round, args.warmup_one, args.budget_s)
    s = {k: summarize(v) for k, v in times.items()}
    best = min(("onnx", "torchscript"), key=lambda f: s[f]["p50_s"])
    floor = s["matmul"]["p50_s"]
    return {
        "multiply_adds_per_item": macs,
        "serving_multiply_adds_per_item": served,
        "matmul_k": k,
        "matmul_serving_size_k": k_served,
        "max_abs_diff_vs_predict": diffs,
        **s,
        "serving_format": best,
        "serving": s[best],
        "eager_over_matmul": s["eager"]["p50_s"] / floor,
        "serving_over_matmul": s[best]["p50_s"] / floor,
        "serving_over_matmul_serving_size": s[best]["p50_s"] / s["matmul_serving_size"]["p50_s"],
    }


def serving_section(configs: dict, args, L: int, F: int) -> dict:
    """One list, one thread: :func:`serve_one` per model, and the table."""
    import torch

    torch.set_num_threads(1)
    print(f"\n## serving: one list of {L} items x {F} features, 1 thread", flush=True)
    print(
        "ONNX = the `ctxrank export --format onnx` file under onnxruntime (CPU, intra_op_num_threads=1, "
        "ORT_ENABLE_ALL); TorchScript = the `--format torchscript` file (torch.jit.load, 1 thread); both "
        "take raw features; serving = the faster of the two; matmul = torch (L, K) @ (K, K), K^2 = the "
        "eager model's multiply-adds per item (and the serving graph's); all take turns (interleaved rounds)",
        flush=True,
    )
    rows, out = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, (name, params) in configs.items():
            r = out[label] = serve_one(label, name, params, args, L, F, Path(tmp))
            ms = {k: r[k]["p50_s"] * 1e3 for k in ("eager", "onnx", "torchscript", "matmul")}
            m2 = r["matmul_serving_size"]["p50_s"] * 1e3
            print("  " + label + ": " + ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items()), flush=True)
            rows.append([
                label, f"{r['multiply_adds_per_item'] / 1e3:,.0f}k",
                f"{r['serving_multiply_adds_per_item'] / 1e3:,.0f}k", r["onnx"]["n"], f"{ms['eager']:.3f}",
                f"{ms['onnx']:.3f}", f"{ms['torchscript']:.3f}", f"{ms['matmul']:.3f}", f"{m2:.3f}",
                f"{ms['eager'] / ms['matmul']:.2f}",
                f"{r['serving_over_matmul']:.2f} ({r['serving_format']})",
                f"{r['serving_over_matmul_serving_size']:.2f}",
                f"{max(r['max_abs_diff_vs_predict'].values()):.1e}",
            ])  # fmt: skip
    header = ["model", "MACs/item", "serving MACs/item", "timed calls each", "eager p50 ms", "ONNX p50 ms",
              "TorchScript p50 ms", "matmul p50 ms", "matmul (serving MACs) p50 ms", "eager / matmul",
              "serving / matmul", "serving / matmul (serving MACs)", "max abs export - predict"]  # fmt: skip
    print()
    print(markdown_table(header, rows))
    if "qilcm" in out:
        ratio = out["qilcm"]["serving_over_matmul"]
        verdict = "met" if ratio <= TARGET_SERVING_OVER_MATMUL else "NOT met"
        target = TARGET_SERVING_OVER_MATMUL
        print(f"\nQILCM serving p50 / matmul p50 = {ratio:.2f} (target <= {target}: {verdict})")
    return out


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
    ap.add_argument("--serving-rounds", type=int, default=40, help="serving section: rounds (default 40)")
    ap.add_argument(
        "--serving-per-round", type=int, default=25, help="serving section: calls of each per round (25)"
    )
    ap.add_argument("--no-serving", action="store_true", help="skip the serving section")
    ap.add_argument("--serving-only", action="store_true", help="only the serving section")
    args = ap.parse_args(argv)
    if args.quick:
        args.lists, args.items, args.repeats_one, args.repeats_batch = 8, 10, 5, 2
        args.warmup_one, args.warmup_batch, args.budget_s = 1, 1, 1.0
        args.serving_rounds, args.serving_per_round = 3, 2

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
    serving = {} if args.no_serving else serving_section(configs, args, L, F)
    if args.serving_only:
        emit_json({"benchmark": "bench_inference", "quick": args.quick, "machine": info,
                   "serving": serving}, args.json, echo=False)  # fmt: skip
        return 0
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
        "serving": serving,
        "verdicts": verdicts,
    }
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
