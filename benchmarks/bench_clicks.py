"""Step-time cost of ``train.debias`` (not a test): a training step (forward, loss, backward, Adam) on
one batch of a simulated position-based-model click log, naive against ``ips``, ``dla`` and ``pal``.

The log: ``--lists`` sessions of ``--list-len`` items, ``--features`` Gaussian features; clicks from the
position-based model (examination ``1/k``). Each variant runs ``--warmup`` steps, then ``--steps`` timed
steps, in alternating rounds (``--rounds``) so that a drifting machine load favours none; reported: the
median seconds per step of each and its ratio to naive (the target of the issue: at most 1.3).

Usage::

    .venv/bin/python benchmarks/bench_clicks.py --model listnet --loss listnet
    .venv/bin/python benchmarks/bench_clicks.py --model qilcm --loss attrank --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from ctxrank.clicks.towers import Debias
from ctxrank.clicks.weighting import propensity_table
from ctxrank.data.lists import pad_queries
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import get_loss
from ctxrank.registry import make_model


def log_batch(lists: int, list_len: int, features: int, seed: int):
    rng = np.random.default_rng(seed)
    n = lists * list_len
    X = rng.normal(size=(n, features)).astype(np.float32)
    position = np.tile(np.arange(1, list_len + 1), lists)
    clicks = (rng.random(n) < (1.0 / position) * (X[:, 0] > 0.5)).astype(np.float32)
    log = RankingData.from_arrays(X, clicks, np.repeat(np.arange(lists), list_len), position=position)
    return pad_queries(log, np.arange(lists))


def time_steps(model, debias, loss_fn, batch, steps: int) -> float:
    params = [*model.parameters(), *(debias.parameters() if debias is not None else [])]
    opt = torch.optim.Adam(params, lr=1e-3)
    start = time.perf_counter()
    for _ in range(steps):
        fn = loss_fn if debias is None else debias.wrap(loss_fn, batch.shown_positions)
        loss = model.training_loss(batch, fn)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="listnet")
    p.add_argument("--loss", default="listnet")
    p.add_argument("--lists", type=int, default=64)
    p.add_argument("--list-len", type=int, default=20)
    p.add_argument("--features", type=int, default=46)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    batch = log_batch(a.lists, a.list_len, a.features, 0)
    loss_fn = get_loss(a.loss)
    model = make_model(a.model, a.features)
    variants = {
        "none": None,
        "ips": Debias(
            "ips", a.list_len, propensity=torch.as_tensor(propensity_table((), 1.0, a.list_len)), clip=100.0
        ),
        "dla": Debias("dla", a.list_len, clip=100.0),
        "pal": Debias("pal", a.list_len, clip=100.0),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for debias in variants.values():
        time_steps(model, debias, loss_fn, batch, a.warmup)
    for _ in range(a.rounds):
        for name, debias in variants.items():
            times[name].append(time_steps(model, debias, loss_fn, batch, a.steps))
    base = statistics.median(times["none"])
    print(
        f"model={a.model} loss={a.loss} batch={a.lists}x{a.list_len} features={a.features} "
        f"threads={a.threads}"
    )
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:5s} {med * 1e3:8.3f} ms/step  ratio to naive {med / base:5.2f}")


if __name__ == "__main__":
    main()
