"""Training throughput benchmark (not a test): queries/s of every model's training step, CPU or GPU.

Two parts (``--parts``, default both):

**models**: for EVERY neural model of the registry (``ctxrank.registry.MODELS``; QILCM twice, with
the exact Chamfer term over all ordered query pairs of the batch, its default, and with
``confusion_pairs=80`` sampled pairs; DLCM twice, ``gru="paper"`` (eq. 4, a Python loop over steps) and
``gru="torch"`` (the fused ``nn.GRU``); every other model with its defaults), one training step is
exactly the inner loop of ``ctxrank.training.loop.fit``: the next batch of ``iterate_batches``
(length buckets, seeded shuffling, padding built on the fly) -> ``model.training_loss`` with the
model's default loss (none for ARSM, which trains its own objective) -> finiteness check -> backward
-> Adam (lr 1e-3) -> ``loss.item()``. Data: MSLR-shaped synthetic lists (``--batch`` 80 lists a
batch, the QILCM paper's, of ``--items`` 100 items with ``--features`` 136 uniform features and
labels 0..4), ``--threads`` 2, on the CPU or (``--device cuda``) the first GPU: the model there, each
batch moved to it inside the timed step, and the peak of torch's CUDA tensor memory recorded too.
Each model runs in a fresh subprocess: ``--warmup`` steps, then ``--repeats`` timed steps, each on a
new batch; queries/s = batch / median step time. Peak memory: the growth of the subprocess's peak
resident set (``ru_maxrss``) during the steps, over what it held with the data and the model built
(see ``benchmarks/_common.py``). References in the same run: QILCM's queries/s (each model's ratio to
it; the issue's target: DLCM and DCM within 2x of QILCM, i.e. ratio >= 0.5) and the target of 240
queries/s for QILCM.

**naive** (ListNet on MQ2008 Fold1, the earlier comparison): the ctxrank loop and ``fit()`` against the
same linear model and loss written as a plain per-query Python loop:

* **ctxrank training loop**: the inner loop of ``fit`` as above, ``listnet`` loss, whole epochs over
  the 471 training queries after one warm-up epoch; queries/s = 471 / epoch time.
* **ctxrank ``fit()`` epochs**: ``fit`` itself with early stopping disabled; its per-epoch ``seconds``
  record, which also includes scoring the 157 validation queries after every epoch.
* **Reference, naive loop**: the same linear model (``nn.Linear(46, 1)``) and the same loss written per
  query: a plain Python loop over the queries in a shuffled order, one query at a time, no padding, no
  batching, ``loss = -(softmax(y) * log_softmax(s)).sum()``, backward and an Adam step **per query** (the
  original ListNet's per-query gradient descent). Queries without a relevant document have loss 0 in
  ctxrank (zero gradient); the naive loop skips them (``continue``), which only flatters the reference.
  A second reference accumulates the per-query gradients and steps once per 80 queries (the same update
  schedule as ctxrank), to separate the cost of optimizer steps from that of the per-query loop.
  Before timing, the naive per-query loss is checked against ``ctxrank.losses.listnet`` on a batch.
* **Inference**: ``ctxrank.training.predict.predict`` (default ``batch_size=512`` queries,
  ``torch.inference_mode``) on the Fold1 test split (156 queries) and on all 784 queries, against a
  naive per-query scoring loop.

**batching**: the per-epoch cost of drawing QILCM's training batches at random (its default,
``train.batching = "model"`` -> ``QILCM.batching = "random"``: eq. 13 pairs the queries of a batch)
instead of from length buckets (``"buckets"``, every other model's default). QILCM with its defaults
(exact two-sided Chamfer term) trains whole epochs over MQ2008 Fold1's 471 training queries (whole
lists, 5-121 items), ``--naive-batch`` 80 queries a batch, exactly the inner loop of ``fit``; one
warm-up epoch, then ``--batching-epochs`` timed epochs for each batching, alternating. Reported: the
median epoch time (wall and CPU), the padded cells ``sum_batches B * L_max`` per epoch against the real
items (a load-independent measure of the work), and the ratio random / buckets.

Every timing is repeated and the median is reported (the minimum is printed too). Prints a machine
line, Markdown tables, the ratios, and writes ``--json``.

Usage::

    .venv/bin/python benchmarks/bench_train_throughput.py [--threads 2] [--batch 80] [--items 100]
        [--features 136] [--warmup 2] [--repeats 10] [--models qilcm,dlcm-paper,...]
        [--parts models,naive,batching] [--batching-epochs 3] [--device cpu|cuda (models part only)]
        [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import (
    PeakCUDA,
    PeakRSS,
    add_common_args,
    child_main,
    cuda_info,
    run_case,
    summarize,
    synthetic_ranking_data,
    time_training_steps,
)
from _report import emit_json, machine_info, machine_line, markdown_table

TARGET_QILCM_QPS = 240.0  # QILCM training throughput target, queries/s
WITHIN = 2.0  # DLCM and DCM within 2x of QILCM's queries/s


def model_configs(pairs: int) -> dict[str, tuple[str, dict]]:
    """label -> (registry name, model params): the issue's list, then any other registry entry."""
    from ctxrank.registry import MODELS

    configs: dict[str, tuple[str, dict]] = {
        "qilcm": ("qilcm", {}),  # exact Chamfer term over all ordered pairs (the default)
        f"qilcm-pairs{pairs}": ("qilcm", {"confusion_pairs": pairs}),
        "dlcm-paper": ("dlcm", {"gru": "paper"}),
        "dlcm-torch": ("dlcm", {"gru": "torch"}),
        "dcm": ("dcm", {}),
        "arsm": ("arsm", {}),
        "listnet": ("listnet", {}),
        "mnl": ("mnl", {}),
    }
    covered = {name for name, _ in configs.values()}
    # every other neural model of the registry (mlp, the QILCM ablations, new models)
    for name in sorted(n for n in MODELS if MODELS[n].traits.torch_module):
        if name not in covered:
            configs[name] = (name, {})
    return configs


def train_case(spec: dict, measure_memory: bool) -> dict:
    """Time ``warmup + repeats`` training steps of one model configuration (see the module docstring)."""
    import torch

    from ctxrank.data.lists import iterate_batches
    from ctxrank.losses import get_loss
    from ctxrank.registry import make_model

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    B, steps = spec["batch"], spec["warmup"] + spec["repeats"]
    data = synthetic_ranking_data(B * steps, spec["items"], spec["features"], seed=spec["seed"])
    device = spec.get("device", "cpu")
    model = make_model(spec["name"], spec["features"], spec["params"]).to(device)
    model.train()
    loss_fn = get_loss(model.traits.default_loss) if model.traits.default_loss else None
    opt = torch.optim.Adam(model.parameters(), lr=spec["lr"])
    gen = np.random.default_rng(spec["seed"])
    batches = iterate_batches(data, B, shuffle=True, generator=gen)
    with PeakRSS(measure_memory) as mem, PeakCUDA(device) as gpu:
        times = time_training_steps(
            model, loss_fn, opt, lambda: next(batches), steps, spec["warmup"], spec["label"], device
        )
    step = summarize(times)
    return {
        "label": spec["label"],
        "model": spec["name"],
        "params": spec["params"],
        "parameters": sum(p.numel() for p in model.parameters()),
        "step": step,
        "queries_per_s": B / step["median_s"],
        **mem.as_dict(),
        **gpu.as_dict(),
    }


def run_models(args) -> dict:
    configs = model_configs(args.pairs)
    if args.models:
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        unknown = [m for m in wanted if m not in configs]
        if unknown:
            raise SystemExit(f"unknown --models {unknown}; valid: {', '.join(configs)}")
        configs = {k: configs[k] for k in wanted}
    print(
        f"\n## Training throughput: batch {args.batch} lists x {args.items} items x {args.features} "
        f"features, {args.threads} threads, {args.warmup} warm-up + {args.repeats} timed steps, "
        f"isolate={args.isolate}, device {args.device}",
        flush=True,
    )
    results = {}
    for label, (name, params) in configs.items():
        spec = {
            "label": label,
            "name": name,
            "params": params,
            "batch": args.batch,
            "items": args.items,
            "features": args.features,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "threads": args.threads,
            "lr": 1e-3,
            "seed": 0,
            "device": args.device,
        }
        r = run_case(Path(__file__), spec, args.isolate, train_case)
        results[label] = r
        print(
            f"  {label}: {r['step']['median_s'] * 1000:.1f} ms/step, {r['queries_per_s']:,.1f} queries/s",
            flush=True,
        )

    sampled = f"qilcm-pairs{args.pairs}"
    refs = [k for k in ("qilcm", sampled) if k in results]
    for r in results.values():
        for ref in refs:
            r[f"ratio_to_{ref}"] = r["queries_per_s"] / results[ref]["queries_per_s"]

    def mib(x):
        return "–" if x is None else f"{x:,.0f}"

    header = ["model", "params", "step ms (median)", "step ms (min)", "queries/s"]
    header += [f"x {ref}" for ref in refs] + ["peak RSS delta MiB", "peak RSS MiB"]
    cuda = args.device == "cuda"
    header += ["peak CUDA delta MiB"] if cuda else []
    rows = []
    for label, r in results.items():
        rows.append(
            [
                label,
                f"{r['parameters']:,}",
                f"{r['step']['median_s'] * 1000:.1f}",
                f"{r['step']['min_s'] * 1000:.1f}",
                f"{r['queries_per_s']:,.1f}",
                *[f"{r[f'ratio_to_{ref}']:.2f}" for ref in refs],
                mib(r["peak_rss_delta_mib"]),
                mib(r["peak_rss_mib"]),
                *([mib(r["peak_cuda_delta_mib"])] if cuda else []),
            ]
        )
    print()
    print(markdown_table(header, rows))
    print()
    verdicts = {}
    for ref in refs:
        q = results[ref]["queries_per_s"]
        verdicts[f"{ref}_over_target_{TARGET_QILCM_QPS:g}"] = q / TARGET_QILCM_QPS
        print(
            f"{ref}: {q:,.1f} queries/s = {q / TARGET_QILCM_QPS:.2f}x the target {TARGET_QILCM_QPS:g} "
            f"queries/s ({'met' if q >= TARGET_QILCM_QPS else 'NOT met'})"
        )
    if "qilcm" in results:
        for label in ("dlcm-paper", "dlcm-torch", "dcm"):
            if label in results:
                ratio = results[label]["ratio_to_qilcm"]
                verdicts[f"{label}_over_qilcm"] = ratio
                print(
                    f"{label}: {ratio:.2f}x QILCM's queries/s (target: within {WITHIN:g}x, i.e. >= "
                    f"{1 / WITHIN:.2f}x: {'met' if ratio >= 1 / WITHIN else 'NOT met'})"
                )
    return {
        "batch": args.batch,
        "items": args.items,
        "features": args.features,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "isolate": args.isolate,
        "device": args.device,
        "target_qilcm_queries_per_s": TARGET_QILCM_QPS,
        "results": results,
        "verdicts": verdicts,
    }


def run_naive(args) -> dict:
    print("\n## ListNet on MQ2008 Fold1: ctxrank loop vs naive per-query loops", flush=True)
    import torch

    from ctxrank.config import TrainConfig
    from ctxrank.data.lists import iterate_batches
    from ctxrank.data.registry import load_fold, load_split
    from ctxrank.losses import listnet
    from ctxrank.registry import make_model
    from ctxrank.training.loop import fit
    from ctxrank.training.predict import predict

    torch.set_num_threads(args.threads)
    fold = load_fold("mq2008", 1)
    train, valid, test = fold.train, fold.valid, fold.test
    everything = load_split("mq2008", "all", 1)
    Q = train.n_queries
    off = train.query_offsets
    has_rel = np.array([(train.labels[a:b] > 0).any() for a, b in itertools.pairwise(off)])
    print(
        f"MQ2008 Fold1 train: {Q} queries, {train.n_items} items ({int((~has_rel).sum())} queries without a "
        f"relevant document); batch {args.naive_batch} queries; {torch.get_num_threads()} threads"
    )

    # ------------------------------------------------------------------ correctness of the reference
    torch.manual_seed(0)
    check_model = make_model("listnet", train.n_features)
    batch = next(iterate_batches(train, args.naive_batch))
    lib = float(listnet(check_model.score_batch(batch), batch.labels, batch.mask).detach())
    per_query = []
    for b in range(batch.batch_size):
        m = batch.mask[b]
        s = check_model.net(batch.features[b][m]).squeeze(-1)
        y = batch.labels[b][m]
        if (y > 0).any():
            per_query.append(float(-(torch.softmax(y, 0) * torch.log_softmax(s, 0)).sum().detach()))
    naive_value = float(np.mean(per_query))
    assert abs(lib - naive_value) < 1e-5 * max(1.0, abs(lib)), (lib, naive_value)
    print(f"reference check: ctxrank listnet loss {lib:.6f} == naive per-query mean {naive_value:.6f}")

    # ------------------------------------------------------------------ ctxrank training loop
    def ctxrank_epochs(n: int) -> list[float]:
        torch.manual_seed(0)
        model = make_model("listnet", train.n_features)
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        gen = np.random.default_rng(0)
        times = []
        for _ in range(n + 1):  # the first epoch is the warm-up
            model.train()
            t0 = time.perf_counter()
            for batch in iterate_batches(train, args.naive_batch, shuffle=True, generator=gen):
                loss = model.training_loss(batch, listnet)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            times.append(time.perf_counter() - t0)
        return times[1:]

    # ------------------------------------------------------------------ naive references
    feats = [torch.from_numpy(train.features[a:b]) for a, b in itertools.pairwise(off)]
    labs = [torch.from_numpy(train.labels[a:b]) for a, b in itertools.pairwise(off)]

    def naive_epochs(n: int, step_every: int) -> list[float]:
        torch.manual_seed(0)
        lin = torch.nn.Linear(train.n_features, 1)
        opt = torch.optim.Adam(lin.parameters(), lr=args.lr)
        gen = np.random.default_rng(0)
        times = []
        for _ in range(n + 1):
            t0 = time.perf_counter()
            order = gen.permutation(Q)
            pending = 0
            if step_every > 1:
                opt.zero_grad(set_to_none=True)
            for i, q in enumerate(order, 1):
                y = labs[q]
                if not has_rel[q]:
                    continue  # loss 0, zero gradient (as in ctxrank)
                s = lin(feats[q]).squeeze(-1)
                loss = -(torch.softmax(y, 0) * torch.log_softmax(s, 0)).sum()
                if step_every == 1:
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                else:
                    loss.backward()
                    pending += 1
                    if i % step_every == 0 or i == Q:
                        if pending:
                            for prm in lin.parameters():
                                prm.grad /= pending  # mean over contributing lists, as ctxrank
                            opt.step()
                        opt.zero_grad(set_to_none=True)
                        pending = 0
            times.append(time.perf_counter() - t0)
        return times[1:]

    print("timing ctxrank training loop ...", flush=True)
    t_ctx = ctxrank_epochs(args.epochs)
    print("timing naive per-query loop (Adam step per query) ...", flush=True)
    t_naive = naive_epochs(args.naive_epochs, 1)
    print(
        f"timing naive per-query loop (gradients accumulated, Adam step per {args.naive_batch} queries) ...",
        flush=True,
    )
    t_naive_acc = naive_epochs(args.naive_epochs, args.naive_batch)

    print("timing fit() epochs (train loop + validation scoring) ...", flush=True)
    torch.manual_seed(0)
    model = make_model("listnet", train.n_features)
    n_fit = args.epochs + 1
    cfg = TrainConfig(
        lr=args.lr,
        batch_size=args.naive_batch,
        max_epochs=n_fit,
        patience=n_fit + 1,
        seed=0,
        threads=args.threads,
    )
    res = fit(model, listnet, train, valid, cfg, progress=False)
    t_fit = [h["seconds"] for h in res.history][1:]

    # ------------------------------------------------------------------ inference
    def time_predict(data) -> list[float]:
        predict(model, data)  # warm-up
        out = []
        for _ in range(args.predict_repeats):
            t0 = time.perf_counter()
            predict(model, data)
            out.append(time.perf_counter() - t0)
        return out

    def time_naive_predict(data) -> list[float]:
        o = data.query_offsets
        xs = [torch.from_numpy(data.features[a:b]) for a, b in itertools.pairwise(o)]
        lin = model.net
        model.eval()

        def once():
            out = np.empty(data.n_items)
            with torch.inference_mode():
                for (a, b), x in zip(itertools.pairwise(o), xs, strict=True):
                    out[a:b] = lin(x).squeeze(-1).numpy()
            return out

        ref = once()
        assert np.allclose(ref, predict(model, data), atol=1e-5), "naive scores differ from predict()"
        times = []
        for _ in range(args.predict_repeats):
            t0 = time.perf_counter()
            once()
            times.append(time.perf_counter() - t0)
        return times

    print("timing inference ...", flush=True)
    inf = {}
    for name, data in (("Fold1 test", test), ("all 784 queries", everything)):
        inf[name] = {
            "queries": data.n_queries,
            "items": data.n_items,
            "predict": time_predict(data),
            "naive": time_naive_predict(data),
        }

    # ------------------------------------------------------------------ report
    rows = []

    def add(name: str, times: list[float], n_queries: int) -> dict[str, float]:
        med, best = statistics.median(times), min(times)
        rec = {
            "median_s": med,
            "min_s": best,
            "queries_per_s": n_queries / med,
            "queries_per_s_best": n_queries / best,
            "n": len(times),
        }
        rows.append((name, rec))
        return rec

    r_ctx = add(f"ctxrank training loop (batch {args.naive_batch}, padded)", t_ctx, Q)
    add("ctxrank fit() epoch (train + validation scoring)", t_fit, Q)
    r_naive = add("naive per-query loop, Adam step per query", t_naive, Q)
    r_acc = add(f"naive per-query loop, step per {args.naive_batch} queries", t_naive_acc, Q)
    r_inf = {}
    for name, d in inf.items():
        r_inf[name] = {
            "predict": add(f"predict() on {name}", d["predict"], d["queries"]),
            "naive": add(f"naive per-query scoring on {name}", d["naive"], d["queries"]),
        }

    print()
    print("| what | timed | median s | queries/s (median) | queries/s (best) |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['n']} | {r['median_s']:.4f} | {r['queries_per_s']:,.0f} "
            f"| {r['queries_per_s_best']:,.0f} |"
        )
    ratio = r_ctx["queries_per_s"] / r_naive["queries_per_s"]
    ratio_acc = r_ctx["queries_per_s"] / r_acc["queries_per_s"]
    print()
    print(
        f"training: ctxrank loop is {ratio:.1f}x the naive per-query loop (Adam step per query), "
        f"{ratio_acc:.1f}x the naive loop with one step per {args.naive_batch} queries"
    )
    for name in r_inf:
        rr = r_inf[name]["predict"]["queries_per_s"] / r_inf[name]["naive"]["queries_per_s"]
        r_inf[name]["ratio"] = rr
        print(f"inference on {name}: predict() is {rr:.1f}x the naive per-query scoring loop")
    return {
        "dataset": "mq2008 fold 1",
        "train_queries": Q,
        "threads": args.threads,
        "batch_size": args.naive_batch,
        "lr": args.lr,
        "results": dict(rows),
        "ratio_vs_naive_step_per_query": ratio,
        "ratio_vs_naive_step_per_batch": ratio_acc,
        "inference_ratios": {k: v["ratio"] for k, v in r_inf.items()},
    }


def run_batching(args) -> dict:
    """QILCM epochs on MQ2008 Fold1 with random batches against length buckets (see the docstring)."""
    print("\n## QILCM epoch time: random batches (its default) vs length buckets, MQ2008 Fold1", flush=True)
    import torch

    from ctxrank.data.lists import iterate_batches
    from ctxrank.data.registry import load_fold
    from ctxrank.losses import get_loss
    from ctxrank.registry import make_model

    torch.set_num_threads(args.threads)
    train = load_fold("mq2008", 1).train
    if args.quick:
        train = train.subset(np.arange(40))
    loss_fn = get_loss("attrank")
    state = {}
    for kind in ("random", "buckets"):
        torch.manual_seed(0)
        model = make_model("qilcm", train.n_features)
        state[kind] = (model, torch.optim.Adam(model.parameters(), lr=1e-3), np.random.default_rng(0))

    def epoch(kind: str) -> tuple[float, float, int]:
        model, opt, gen = state[kind]
        model.train()
        t0, c0, cells = time.perf_counter(), time.process_time(), 0
        for batch in iterate_batches(
            train, args.naive_batch, shuffle=True, generator=gen, bucket=kind == "buckets"
        ):
            cells += batch.mask.numel()
            loss = model.training_loss(batch, loss_fn)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return time.perf_counter() - t0, time.process_time() - c0, cells

    times: dict[str, list[tuple[float, float, int]]] = {"random": [], "buckets": []}
    for i in range(args.batching_epochs + 1):
        for kind in times:
            result = epoch(kind)
            if i > 0:  # the first epoch of each is the warm-up
                times[kind].append(result)
    out: dict[str, Any] = {"train_queries": train.n_queries, "real_items": train.n_items}
    rows = []
    for kind, records in times.items():
        wall = statistics.median(r[0] for r in records)
        cpu = statistics.median(r[1] for r in records)
        cells = statistics.median(r[2] for r in records)
        out[kind] = {"epoch_s": wall, "epoch_cpu_s": cpu, "padded_cells": cells, "epochs": len(records)}
        rows.append(
            f"| {kind} | {len(records)} | {wall:.2f} | {cpu:.2f} | {cells:,.0f} | {train.n_items:,} |"
        )
    for key in ("epoch_s", "epoch_cpu_s", "padded_cells"):
        out[f"random_over_buckets_{key}"] = out["random"][key] / out["buckets"][key]
    print("| batching | epochs | median epoch s | median epoch CPU s | padded cells | real items |")
    print("|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(
        f"random / buckets: epoch time {out['random_over_buckets_epoch_s']:.2f}x, CPU time "
        f"{out['random_over_buckets_epoch_cpu_s']:.2f}x, "
        f"padded cells {out['random_over_buckets_padded_cells']:.2f}x"
    )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, device=True)
    ap.add_argument(
        "--parts",
        default="models,naive,batching",
        help="comma-separated: models, naive, batching (default all)",
    )
    ap.add_argument("--batching-epochs", type=int, default=3, help="batching part: timed epochs (default 3)")
    ap.add_argument("--batch", type=int, default=80, help="lists per batch (default 80, the QILCM paper's)")
    ap.add_argument("--items", type=int, default=100, help="models part: items per list (default 100)")
    ap.add_argument("--features", type=int, default=136, help="models part: features (default 136, MSLR)")
    ap.add_argument("--warmup", type=int, default=2, help="models part: untimed warm-up steps (default 2)")
    ap.add_argument("--repeats", type=int, default=10, help="models part: timed steps (default 10)")
    ap.add_argument("--pairs", type=int, default=80, help="models part: QILCM's sampled pairs (default 80)")
    ap.add_argument("--models", help="models part: comma-separated labels (default: all; see the output)")
    ap.add_argument("--naive-batch", type=int, default=80, help="naive part: queries per batch (default 80)")
    ap.add_argument("--epochs", type=int, default=10, help="naive part: timed ctxrank epochs (default 10)")
    ap.add_argument("--naive-epochs", type=int, default=3, help="naive part: timed naive epochs (default 3)")
    ap.add_argument(
        "--predict-repeats", type=int, default=30, help="naive part: repeats of each inference timing (30)"
    )
    ap.add_argument("--lr", type=float, default=1e-3, help="naive part: Adam learning rate")
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child, train_case)
    if args.quick:
        args.batch, args.items, args.warmup, args.repeats = 4, 10, 1, 2
        args.epochs, args.naive_epochs, args.predict_repeats, args.batching_epochs = 1, 1, 2, 1
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or set(parts) - {"models", "naive", "batching"}:
        raise SystemExit(f"--parts must name models, naive and/or batching, got {args.parts!r}")
    if args.device != "cpu" and parts != ["models"]:
        raise SystemExit(f"--device {args.device} times the models part only: add --parts models")

    import torch

    torch.set_num_threads(args.threads)
    info = {**machine_info(args.threads), **cuda_info(args.device)}
    print(machine_line(info), flush=True)
    blob = {
        "benchmark": "bench_train_throughput",
        "quick": args.quick,
        "threads": args.threads,
        "machine": info,
    }
    if "models" in parts:
        blob["models"] = run_models(args)
    if "naive" in parts:
        blob["naive"] = run_naive(args)
    if "batching" in parts:
        blob["batching"] = run_batching(args)
    emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
