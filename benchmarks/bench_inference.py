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
    .venv/bin/python benchmarks/bench_inference.py --from-json FILE | --publish    # the serving section

Instruction sets: ``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2`` restrict
torch's kernels (the eager model, TorchScript, the matrix product) to AVX2 on an AVX-512 machine. ONNX
Runtime's kernels (MLAS) choose their instruction set from the CPU's flags when it loads and no runtime
setting restricts them: under that restriction the ONNX rows still run AVX-512 (the JSON records both:
``machine.torch_cpu_capability``, ``machine.cpu_vector_flags``), so the AVX2 figure of the served graph
is its TorchScript row there, and the ONNX file's needs an AVX2 machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import add_common_args, summarize, synthetic_ranking_data
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
    chunks = args.serving_per_round
    rounds = {k: [float(np.median(v[i : i + chunks])) for i in range(0, len(v), chunks)]
              for k, v in times.items()}  # fmt: skip
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
        "onnx_over_matmul": s["onnx"]["p50_s"] / floor,
        "torchscript_over_matmul": s["torchscript"]["p50_s"] / floor,
        "round_medians_s": rounds,
    }


def serving_section(configs: dict, args, L: int, F: int) -> dict:
    """One list, one thread: :func:`serve_one` per model, and the table."""
    import torch

    torch.set_num_threads(1)
    print(f"\n## serving: one list of {L} items x {F} features, 1 thread", flush=True)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, (name, params) in configs.items():
            r = out[label] = serve_one(label, name, params, args, L, F, Path(tmp))
            ms = {k: r[k]["p50_s"] * 1e3 for k in ("eager", "onnx", "torchscript", "matmul")}
            print("  " + label + ": " + ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items()), flush=True)
    return out


SERVING_NOTE = (
    "ONNX = the `ctxrank export --format onnx` file under onnxruntime (CPU, intra_op_num_threads=1, "
    "ORT_ENABLE_ALL); TorchScript = the `--format torchscript` file (torch.jit.load, 1 thread); both "
    "take raw features; serving = the faster of the two; matmul = torch (L, K) @ (K, K), K^2 = the "
    "eager model's multiply-adds per item (and the serving graph's); all take turns (interleaved rounds)"
)


def serving_report(serving: dict, machine: dict) -> str:
    """The serving table, the QILCM verdict and the instruction sets (from a run's JSON)."""
    rows = []
    for label, r in serving.items():
        ms = {k: r[k]["p50_s"] * 1e3 for k in ("eager", "onnx", "torchscript", "matmul")}
        ms["matmul_serving_size"] = r["matmul_serving_size"]["p50_s"] * 1e3
        rows.append([
            label, f"{r['multiply_adds_per_item'] / 1e3:,.0f}k",
            f"{r['serving_multiply_adds_per_item'] / 1e3:,.0f}k", r["onnx"]["n"], f"{ms['eager']:.3f}",
            f"{ms['onnx']:.3f}", f"{ms['torchscript']:.3f}", f"{ms['matmul']:.3f}",
            f"{ms['matmul_serving_size']:.3f}", f"{ms['eager'] / ms['matmul']:.2f}",
            f"{r['serving_over_matmul']:.2f} ({r['serving_format']})",
            f"{r['serving_over_matmul_serving_size']:.2f}",
            f"{max(r['max_abs_diff_vs_predict'].values()):.1e}",
        ])  # fmt: skip
    header = ["model", "MACs/item", "serving MACs/item", "timed calls each", "eager p50 ms", "ONNX p50 ms",
              "TorchScript p50 ms", "matmul p50 ms", "matmul (serving MACs) p50 ms", "eager / matmul",
              "serving / matmul", "serving / matmul (serving MACs)", "max abs export - predict"]  # fmt: skip
    lines = [SERVING_NOTE, "", markdown_table(header, rows), ""]
    q, target = serving.get("qilcm"), TARGET_SERVING_OVER_MATMUL
    capability, restricted = machine.get("torch_cpu_capability"), machine.get("isa_environment")
    if capability:
        flags = machine["cpu_vector_flags"]
        best = next((f.upper() for f in ("avx512f", "avx2") if f in flags), "neither AVX2 nor AVX-512")
        lines.append(
            f"instruction sets: torch's kernels (eager, TorchScript, matmul) {capability}"
            + (f" ({', '.join(f'{k}={v}' for k, v in restricted.items())})" if restricted else "")
            + f"; ONNX Runtime's chosen from the CPU's flags ({best}), not restricted by any setting"
        )
    if q is not None and restricted:  # only TorchScript and the floor run the restricted instruction set
        ratio = q["torchscript_over_matmul"]
        lines.append(
            f"QILCM TorchScript p50 / matmul p50, both {capability}: {ratio:.2f} (target <= {target}: "
            f"{'met' if ratio <= target else 'NOT met'}); ONNX / matmul = {q['onnx_over_matmul']:.2f} "
            f"sets ONNX Runtime's {best} kernels against the {capability} matmul (no {capability} figure)"
        )
    elif q is not None:
        ratio = q["serving_over_matmul"]
        verdict = "met" if ratio <= target else "NOT met"
        lines.append(f"QILCM serving p50 / matmul p50 = {ratio:.2f} (target <= {target}: {verdict})")
    return "\n".join(lines) + "\n"


def report_text(blob: dict) -> str:
    """The serving section of a run, from its JSON ``blob`` (also a stored one: :func:`block_text`)."""
    st = blob["serving_settings"]
    head = machine_line(blob["machine"]) + f"; code {blob['code']}\n"
    head += (
        f"serving: one list of {st['items']} items x {st['features']} features, 1 thread; {st['rounds']} "
        f"rounds of {st['per_round']} calls each after {st['warmup']} warm-up calls\n\n"
    )
    return head + serving_report(blob["serving"], blob["machine"])


# A page states a stored run's serving section between ``<!-- bench-serving: FILE ... -->`` and
# ``<!-- /bench-serving -->``; ``--publish`` rewrites each block from its files.
BLOCK, block_text = stored_blocks("bench-serving", report_text)


def evidence_problems(blob: dict) -> list[str]:
    """What a run lacks to be stored as evidence (empty: nothing): QILCM served, the code, the
    instruction sets, and scores equal to ``predict``'s."""
    problems = []
    if "qilcm" not in blob.get("serving", {}):
        problems.append("no serving section with QILCM")
    if not blob.get("code") or not blob["machine"].get("torch_cpu_capability"):
        problems.append("no code or instruction set recorded")
    for label, r in blob.get("serving", {}).items():
        diff = max(r["max_abs_diff_vs_predict"].values())
        if diff > 1e-3:
            problems.append(f"{label}: exported scores differ from predict by {diff:g}")
    return problems


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
    add_stored_args(ap, "bench-serving")
    args = ap.parse_args(argv)
    if answer_stored_args(args, BLOCK, block_text, report_text):
        return 0
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

    threads = 1 if args.serving_only else args.threads  # the serving section runs one thread
    info = machine_info(threads, (("onnxruntime", "onnxruntime"),), isa=True)
    info["one_list_threads"] = args.one_thread
    print(machine_line(info), flush=True)
    L, F = args.items, args.features
    serving = {} if args.no_serving else serving_section(configs, args, L, F)
    head = {
        "benchmark": "bench_inference",
        "quick": args.quick,
        "code": code_of_tree(),
        "machine": info,
        "serving_settings": {
            "items": L,
            "features": F,
            "rounds": args.serving_rounds,
            "per_round": args.serving_per_round,
            "warmup": args.warmup_one,
            "budget_s": args.budget_s,
        },
        "target_serving_over_matmul": TARGET_SERVING_OVER_MATMUL,
        "serving": serving,
    }
    if serving:
        print()
        print(serving_report(serving, info), end="")
    if args.serving_only:
        emit_json(head, args.json, echo=False)
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
        **head,
        "threads": args.threads,
        "reference": "nn.Linear(features, 1) on the same inputs",
        "target_qilcm_one_list_p50_s": TARGET_QILCM_ONE_LIST_P50_S,
        "settings": blob_settings,
        "verdicts": verdicts,
    }
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
