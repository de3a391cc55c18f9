"""Rejection rates of the report's paired tests where the null holds by construction.

Simulates many experiments in which two models have the same expected metric, built like the two
protocols of the reproduction specs, and counts how often each test of ``ctxrank.experiments.stats``
rejects at alpha = 0.05. A test that holds up rejects about 5% of the time (its reference, the nominal
level, is printed beside it as a ratio); the paper's plain t-test over runs rejects far more often.

The data (per query, NDCG@10-like; parameters in ``SCENARIOS``):

* ``folds``: 784 queries (MQ2008's size) in 5 folds of ~157 test queries, 4 seeds per fold (20 runs).
  Model A is deterministic (LambdaMART: identical across seeds), model B a neural model.
  y_A[s, q] = mu_q + w_A[q] + t_A[f(q)]
  y_B[s, q] = mu_q + w_B[q] + t_B[f(q)] + r_B[s, f(q)] + e_B[s, q]
* ``random-splits``: a pool of 784 queries, 20 runs, each a random query-level 60/20/20 split
  (157 test queries); both models are retrained per run:
  y_m[j, q] = mu_q + w_m[q] + r_m[j] + e_m[j, q] for the test queries q of run j.

mu_q: the query's difficulty (between-query sd 0.39, measured on MQ2008 Fold 1); w_m[q]: the model's
own per-query advantage, stable across seeds (the seed correlation; sd chosen so that a single run's
per-query difference A - B has sd 0.16, as measured between LambdaMART and QILCM/DLCM on MQ2008 Fold 1);
e: per-query seed noise (sd 0.08: a per-query seed correlation of about 0.75 for a neural model);
t: the fold's training-set effect on a whole model, shared by its seeds; r: one run's (seed's) effect on
its whole test mean. Every effect has mean 0 and is drawn afresh per simulated experiment (a new pool
of queries too), so neither model is better in expectation: the null holds. t and r are not measured
(assumptions): "no-training-effect" sets them to 0 (the per-query scores plus exchangeable noise: the
query-level tests' null exactly), "realistic" assumes a seed-to-seed sd of 0.005 of a fold's mean and
a training-set sd of 0.003, "large-training-effect" 0.01 for both.

Usage::

    python benchmarks/sim_null_tests.py --experiments 2000 --seed 0 --json out.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ctxrank.experiments import stats

ALPHA = 0.05
N_QUERIES = 784
N_FOLDS = 5
N_SEEDS = 4
N_SPLITS = 20
SPLIT = (0.6, 0.2, 0.2)
#: scenario -> sds: mu (between queries), w (each model's per-query effect), e_a / e_b (per-query seed
#: noise), t (fold training effect, fold protocol), r (one run's effect)
SCENARIOS = {
    "no-training-effect": {"mu": 0.39, "w": 0.098, "e_a": 0.04, "e_b": 0.08, "t": 0.0, "r": 0.0},
    "realistic": {"mu": 0.39, "w": 0.098, "e_a": 0.04, "e_b": 0.08, "t": 0.003, "r": 0.005},
    "large-training-effect": {"mu": 0.39, "w": 0.098, "e_a": 0.04, "e_b": 0.08, "t": 0.01, "r": 0.01},
}
PROTOCOL_TESTS = {
    "folds": ("queries", "queries-permutation", "folds", "runs-plain"),
    "random-splits": ("corrected-resampled", "queries", "queries-permutation", "runs-plain"),
}


def fold_experiment(rng: np.random.Generator, p: dict) -> dict[str, np.ndarray]:
    """One simulated fold-protocol experiment: per-query values ``(S, Q)`` of A and B, each query's fold."""
    fold = np.arange(N_QUERIES) % N_FOLDS
    mu = rng.normal(0, p["mu"], N_QUERIES)
    a = mu + rng.normal(0, p["w"], N_QUERIES) + rng.normal(0, p["t"], N_FOLDS)[fold]
    b = mu + rng.normal(0, p["w"], N_QUERIES) + rng.normal(0, p["t"], N_FOLDS)[fold]
    ya = np.broadcast_to(a, (N_SEEDS, N_QUERIES))  # deterministic: identical across seeds
    yb = (
        b + rng.normal(0, p["r"], (N_SEEDS, N_FOLDS))[:, fold] + rng.normal(0, p["e_b"], (N_SEEDS, N_QUERIES))
    )
    return {"a": ya, "b": yb, "fold": fold}


def split_experiment(rng: np.random.Generator, p: dict) -> dict[str, np.ndarray]:
    """One simulated random-splits experiment: ``(J, Q)`` values of A and B, NaN where not tested."""
    n_test = round(SPLIT[2] * N_QUERIES)
    mu = rng.normal(0, p["mu"], N_QUERIES)
    base = {m: mu + rng.normal(0, p["w"], N_QUERIES) for m in "ab"}
    tested = np.zeros((N_SPLITS, N_QUERIES), dtype=bool)
    for j in range(N_SPLITS):
        tested[j, rng.permutation(N_QUERIES)[:n_test]] = True
    out = {}
    for m, e in (("a", p["e_a"]), ("b", p["e_b"])):
        y = base[m] + rng.normal(0, p["r"], (N_SPLITS, 1)) + rng.normal(0, e, (N_SPLITS, N_QUERIES))
        out[m] = np.where(tested, y, np.nan)
    out["ratio"] = n_test / (N_QUERIES - n_test)  # n_test / n_train (train + validation queries)
    return out


def run_tests(protocol: str, x: dict, tests: tuple[str, ...], n_resamples: int) -> dict[str, float | None]:
    """p-value of each test on one simulated experiment, computed as the report computes it."""
    qa, qb = stats.seed_average(x["a"]), stats.seed_average(x["b"])
    if protocol == "folds":
        run_a, run_b = _fold_run_means(x["a"], x["fold"]), _fold_run_means(x["b"], x["fold"])
        run_fold = np.tile(np.arange(N_FOLDS), N_SEEDS)
    else:
        run_a, run_b = np.nanmean(x["a"], axis=1), np.nanmean(x["b"], axis=1)
    out = {}
    for t in tests:
        if t == "queries":
            r = stats.query_ttest(qa, qb, ci=False)
        elif t == "queries-permutation":
            r = stats.permutation_test(qa, qb, n_resamples=n_resamples, seed=0, ci=False)
        elif t == "folds":
            r = stats.fold_test(run_a, run_b, run_fold)
        elif t == "corrected-resampled":
            r = stats.corrected_resampled_test(run_a, run_b, test_train_ratio=x["ratio"])
        else:
            r = stats.runs_plain_test(run_a, run_b)
        out[t] = r["p"]
    return out


def _fold_run_means(y: np.ndarray, fold: np.ndarray) -> np.ndarray:
    """``(S, Q)`` -> the ``S * F`` run means in seed-major order (seed 0 on every fold, then seed 1 ...)."""
    return np.array([y[s, fold == f].mean() for s in range(y.shape[0]) for f in range(N_FOLDS)])


def simulate(
    protocol: str,
    experiments: int,
    seed: int,
    *,
    scenario: str = "realistic",
    tests: tuple[str, ...] | None = None,
    n_resamples: int = 999,
    perm_experiments: int | None = None,
) -> dict[str, dict]:
    """Rejection rate at ``ALPHA`` of each test over ``experiments`` simulated null experiments (the
    permutation test, 100x slower than the others, over the first ``perm_experiments`` of them)."""
    tests = tests or PROTOCOL_TESTS[protocol]
    p = SCENARIOS[scenario]
    rng = np.random.default_rng([seed, list(PROTOCOL_TESTS).index(protocol), list(SCENARIOS).index(scenario)])
    make = fold_experiment if protocol == "folds" else split_experiment
    perm = "queries-permutation"
    n_perm = experiments if perm_experiments is None else min(perm_experiments, experiments)
    hits, done = dict.fromkeys(tests, 0), dict.fromkeys(tests, 0)
    for i in range(experiments):
        x = make(rng, p)
        now = tests if i < n_perm else tuple(t for t in tests if t != perm)
        for t, pv in run_tests(protocol, x, now, n_resamples).items():
            hits[t] += pv is not None and pv < ALPHA
            done[t] += 1
    out = {}
    for t in tests:
        n = done[t]
        ci = sps.binomtest(hits[t], n).proportion_ci(confidence_level=0.95, method="exact")
        out[t] = {
            "rate": hits[t] / n,
            "ci95": [float(ci.low), float(ci.high)],
            "rejections": hits[t],
            "experiments": n,
            "ratio_to_nominal": hits[t] / n / ALPHA,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiments", type=int, default=2000, help="simulated experiments per protocol")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resamples", type=int, default=999, help="sign flips of the permutation test")
    ap.add_argument(
        "--perm-experiments", type=int, default=300, help="experiments the (slow) permutation test runs on"
    )
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated of {list(SCENARIOS)}")
    ap.add_argument("--json", default=None, metavar="OUT")
    args = ap.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad:
        ap.error(f"unknown scenario(s) {bad}; valid: {list(SCENARIOS)}")
    start = time.perf_counter()
    rows = []
    print(f"Rejection rate at alpha = {ALPHA} where the null holds ({args.experiments} simulated experiments")
    print(f"per protocol and scenario, seed {args.seed}; 95% CI: Clopper-Pearson; ratio = rate / {ALPHA}).\n")
    print("| scenario | protocol | test | default | rejection rate | 95% CI | ratio | experiments |")
    print("|---|---|---|:-:|---:|---|---:|---:|")
    for scenario in scenarios:
        for protocol in PROTOCOL_TESTS:
            res = simulate(
                protocol,
                args.experiments,
                args.seed,
                scenario=scenario,
                n_resamples=args.resamples,
                perm_experiments=args.perm_experiments,
            )
            for t, r in res.items():
                default = stats.DEFAULT_TEST[protocol] == t
                rows.append({"scenario": scenario, "protocol": protocol, "test": t, "default": default, **r})
                lo, hi = r["ci95"]
                print(
                    f"| {scenario} | {protocol} | {t} | {'yes' if default else ''} | {r['rate']:.3f} | "
                    f"[{lo:.3f}, {hi:.3f}] | {r['ratio_to_nominal']:.2f} | {r['experiments']} |"
                )
    seconds = time.perf_counter() - start
    print(f"\n{seconds:.0f} s")
    if args.json:
        from _report import emit_json

        blob = {
            "benchmark": "sim_null_tests",
            "alpha": ALPHA,
            "seed": args.seed,
            "experiments": args.experiments,
            "resamples": args.resamples,
            "perm_experiments": args.perm_experiments,
            "scenarios": {s: SCENARIOS[s] for s in scenarios},
            "structure": {"queries": N_QUERIES, "folds": N_FOLDS, "seeds": N_SEEDS, "splits": N_SPLITS},
            "rows": rows,
            "seconds": seconds,
        }
        emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
