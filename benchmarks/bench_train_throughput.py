"""Throughput benchmark (not a test): ListNet training and scoring speed on MQ2008 Fold1, CPU.

Measured in one process, with ``torch.set_num_threads(--threads)`` (default 2), batch size 80 queries
(the QILCM paper's), Adam lr 1e-3, the ``listnet`` loss:

* **ctxrank training loop**: exactly the inner loop of ``ctxrank.train.fit``: ``iterate_batches`` (length
  buckets, seeded shuffling, padding built on the fly) -> ``model.training_loss`` -> backward -> Adam.
  Whole epochs over the 471 training queries, after one warm-up epoch; queries/s = 471 / epoch time.
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
* **Inference**: ``ctxrank.train.predict`` (default ``batch_size=512`` queries, ``torch.inference_mode``)
  on the Fold1 test split (156 queries) and on all 784 queries, against a naive per-query scoring loop.

Every timing is repeated (``--epochs`` timed epochs, ``--repeats`` for inference) and the median is
reported (the minimum is printed too): the reference machine is a shared 2-core VM. Prints a Markdown
table, the ratios, and a JSON blob.

Usage::

    .venv/bin/python benchmarks/bench_train_throughput.py [--threads 2] [--epochs 10] [--naive-epochs 3]
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import sys
import time

import numpy as np

from _report import emit_json


def median_min(xs: list[float]) -> tuple[float, float]:
    return statistics.median(xs), min(xs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--batch-size", type=int, default=80, help="queries per batch (default 80, QILCM)")
    p.add_argument("--epochs", type=int, default=10, help="timed epochs for the ctxrank loop (default 10)")
    p.add_argument("--naive-epochs", type=int, default=3, help="timed epochs for the naive loops (default 3)")
    p.add_argument("--repeats", type=int, default=30, help="repeats of each inference timing (default 30)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--json", metavar="FILE", help="also write the JSON blob to FILE")
    args = p.parse_args(argv)

    import torch

    from ctxrank.config import TrainConfig
    from ctxrank.data.lists import iterate_batches
    from ctxrank.data.registry import load_fold, load_split
    from ctxrank.losses import listnet
    from ctxrank.models import make_model
    from ctxrank.train import fit, predict

    torch.set_num_threads(args.threads)
    fold = load_fold("mq2008", 1)
    train, valid, test = fold.train, fold.valid, fold.test
    everything = load_split("mq2008", "all", 1)
    Q = train.n_queries
    off = train.query_offsets
    has_rel = np.array([(train.labels[a:b] > 0).any() for a, b in itertools.pairwise(off)])
    print(
        f"MQ2008 Fold1 train: {Q} queries, {train.n_items} items ({int((~has_rel).sum())} queries without a "
        f"relevant document); batch {args.batch_size} queries; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )

    # ------------------------------------------------------------------ correctness of the reference
    torch.manual_seed(0)
    check_model = make_model("listnet", train.n_features)
    batch = next(iterate_batches(train, args.batch_size))
    lib = float(listnet(check_model.score_batch(batch), batch.labels, batch.mask).detach())
    per_query = []
    for b in range(batch.batch_size):
        m = batch.mask[b]
        s = check_model.net(batch.features[b][m]).squeeze(-1)
        y = batch.labels[b][m]
        if (y > 0).any():
            per_query.append(float(-(torch.softmax(y, 0) * torch.log_softmax(s, 0)).sum()))
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
            for batch in iterate_batches(train, args.batch_size, shuffle=True, generator=gen):
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
        f"timing naive per-query loop (gradients accumulated, Adam step per {args.batch_size} queries) ...",
        flush=True,
    )
    t_naive_acc = naive_epochs(args.naive_epochs, args.batch_size)

    print("timing fit() epochs (train loop + validation scoring) ...", flush=True)
    torch.manual_seed(0)
    model = make_model("listnet", train.n_features)
    n_fit = args.epochs + 1
    cfg = TrainConfig(
        lr=args.lr,
        batch_size=args.batch_size,
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
        for _ in range(args.repeats):
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
        for _ in range(args.repeats):
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
        med, best = median_min(times)
        rec = {
            "median_s": med,
            "min_s": best,
            "queries_per_s": n_queries / med,
            "queries_per_s_best": n_queries / best,
            "n": len(times),
        }
        rows.append((name, rec))
        return rec

    r_ctx = add(f"ctxrank training loop (batch {args.batch_size}, padded)", t_ctx, Q)
    add("ctxrank fit() epoch (train + validation scoring)", t_fit, Q)
    r_naive = add("naive per-query loop, Adam step per query", t_naive, Q)
    r_acc = add(f"naive per-query loop, step per {args.batch_size} queries", t_naive_acc, Q)
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
        f"{ratio_acc:.1f}x the naive loop with one step per {args.batch_size} queries"
    )
    for name in r_inf:
        rr = r_inf[name]["predict"]["queries_per_s"] / r_inf[name]["naive"]["queries_per_s"]
        r_inf[name]["ratio"] = rr
        print(f"inference on {name}: predict() is {rr:.1f}x the naive per-query scoring loop")
    blob = {
        "benchmark": "bench_train_throughput",
        "dataset": "mq2008 fold 1",
        "train_queries": Q,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "results": dict(rows),
        "ratio_vs_naive_step_per_query": ratio,
        "ratio_vs_naive_step_per_batch": ratio_acc,
        "inference_ratios": {k: v["ratio"] for k, v in r_inf.items()},
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
    }
    emit_json(blob, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
