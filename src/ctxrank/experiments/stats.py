"""Statistics for experiment reports: paired tests of two models, bootstrap CIs, Holm, mean +- std.

An experiment is ``models x runs`` where a run is one ``(seed, fold)`` (published folds) or one
``(seed, random split)`` (one file, a random 60/20/20 query split per run). Testing the target model
against a baseline over the runs as if they were independent (the QILCM paper's Student's t-test over
its 20 runs) pseudo-replicates: the runs sharing a test fold share its queries (and a deterministic
model such as LambdaMART gives identical runs across seeds), and repeated random splits overlap in
their test and training queries, so the plain test's variance is too small and its p-values too small.
The tests here, by name (``TESTS``), each with its unit of replication (``UNITS``):

================================  =======  =========================================================
name                              unit     what
================================  =======  =========================================================
``queries``                       queries  paired t-test over queries, each query's value averaged
                                           over the seeds (runs) it was tested in; default for folds
``queries-permutation``           queries  paired randomization (sign-flip) test over the same values
                                           (Smucker, Allan & Carterette 2007)
``folds``                         folds    blocked by fold: each fold's run means averaged over the
                                           seeds, paired t-test over the folds (n = folds: small)
``corrected-resampled``           runs     corrected resampled t-test (Nadeau & Bengio 2003) over the
                                           runs' mean differences; default for random splits
``runs-plain``                    runs     the paper's plain paired t-test over the runs, kept to
                                           compare with its tables only (anticonservative)
================================  =======  =========================================================

Every test returns one dict: ``test``, ``unit``, ``n`` (units used), ``n_excluded`` (pairs dropped
because a value was NaN, e.g. ``no_relevant="skip"``), ``diff`` (mean difference a - b over the units),
``statistic``, ``df`` (t tests), ``p`` (two-sided), ``ci`` (``[low, high]`` of the mean difference),
``ci_method``, ``confidence``, ``reason`` (None, or why there is no p-value: then ``p`` is None).
Degenerate cases are explicit: every difference 0 -> statistic 0, p 1, CI ``[0, 0]``; every difference
equal and non-zero -> p 0 (t tests; SciPy alone returns NaN for both); fewer than 2 units (3 for the
tests over runs and folds) -> p None with a reason.

SciPy does the work where it can: ``ttest_rel`` / ``ttest_1samp``, ``permutation_test``, ``bootstrap``
and the t distribution. Written here because SciPy has no such function: the Nadeau-Bengio variance
correction (``corrected_resampled_test``) and Holm's step-down correction (``holm``;
``scipy.stats.false_discovery_control`` is Benjamini-Hochberg / -Yekutieli, which control the false
discovery rate, not the family-wise error, and statsmodels would be a large dependency for six lines).
:func:`adjust` applies a family's correction by name (:data:`CORRECTIONS`): Holm by default, BH through
SciPy.
``benchmarks/sim_null_tests.py`` measures every test's rejection rate where the null holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "CORRECTIONS",
    "DEFAULT_CORRECTION",
    "DEFAULT_TEST",
    "MIN_RUNS",
    "TESTS",
    "UNITS",
    "adjust",
    "bootstrap_ci",
    "check_test",
    "corrected_resampled_test",
    "fold_test",
    "holm",
    "mean_std",
    "paired_test",
    "permutation_test",
    "query_ttest",
    "runs_plain_test",
    "seed_average",
]

#: test name -> one line saying what it is (captions and results.json use it)
TESTS = {
    "queries": "Student's paired t-test over queries (scipy.stats.ttest_rel), each query's value "
    "averaged over the runs it was tested in",
    "queries-permutation": "paired randomization test over queries (Smucker, Allan & Carterette 2007; "
    "scipy.stats.permutation_test, sign flips), each query's value averaged over the runs it was tested in",
    "folds": "Student's paired t-test over folds (blocked by fold: each fold's run means averaged over "
    "its seeds)",
    "corrected-resampled": "corrected resampled t-test over runs (Nadeau & Bengio 2003: variance x "
    "(1/J + n_test/n_train))",
    "runs-plain": "Student's paired t-test over runs, as in the QILCM paper (runs treated as "
    "independent: anticonservative, for comparing with the paper's tables only)",
}
#: test name -> its unit of replication
UNITS = {
    "queries": "queries",
    "queries-permutation": "queries",
    "folds": "folds",
    "corrected-resampled": "runs",
    "runs-plain": "runs",
}
#: protocol -> its default test: published folds -> queries (each query tested once, averaged over its
#: seeds); repeated random splits -> the corrected resampled t-test (overlapping test sets)
#: the defaults hold their level in every simulated null scenario (docs/experiments.md, "Statistics"):
#: the query-level tests do not when training shifts a whole fold, which seed-averaging cannot remove
DEFAULT_TEST = {"folds": "folds", "random-splits": "corrected-resampled"}
#: the tests over runs (and folds) need at least this many units
MIN_RUNS = 3
CONFIDENCE = 0.95


def check_test(name: str) -> str:
    """``name`` if it is a test of ``TESTS``, else ``ValueError`` listing the valid names."""
    if name not in TESTS:
        hint = " ('runs' is now 'runs-plain': the paper's plain t-test over runs)" if name == "runs" else ""
        raise ValueError(f"unknown test {name!r}{hint}; valid tests: {', '.join(TESTS)}")
    return name


# --------------------------------------------------------------------------------- helpers
def seed_average(values: Any) -> np.ndarray:
    """``(S, Q)`` per-query values of S runs (NaN = not tested in that run) -> ``(Q,)`` the mean over
    the runs each query was tested in (NaN for a query never tested)."""
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    cnt = ok.sum(axis=0)
    tot = np.where(ok, v, 0.0).sum(axis=0)
    return np.divide(tot, cnt, out=np.full(tot.shape, np.nan), where=cnt > 0)


def _differences(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """``(d, ok, n_excluded)``: a - b over the pairs where both are finite."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired samples must be 1-D of the same shape, got {a.shape} and {b.shape}")
    ok = np.isfinite(a) & np.isfinite(b)
    return a[ok] - b[ok], ok, int((~ok).sum())


def _result(name: str, d: np.ndarray, n_excluded: int, **kw: Any) -> dict[str, Any]:
    out = {
        "test": name,
        "unit": UNITS[name],
        "n": int(d.size),
        "n_excluded": n_excluded,
        "diff": float(d.mean()) if d.size else float("nan"),
        "statistic": None,
        "df": None,
        "p": None,
        "ci": None,
        "ci_method": None,
        "confidence": CONFIDENCE,
        "reason": None,
    }
    out.update(kw)
    return out


def _too_few(name: str, d: np.ndarray, n_excluded: int, minimum: int) -> dict[str, Any] | None:
    if d.size >= minimum:
        return None
    unit = UNITS[name]
    if unit == "queries":
        why = f"fewer than {minimum} queries with a finite value for both models (got {d.size})"
    else:
        why = f"no test over {unit} is possible: fewer than {minimum} {unit} per model (got {d.size})"
    return _result(name, d, n_excluded, reason=why)


def _constant(d: np.ndarray) -> bool:
    """Every difference equal up to rounding (SciPy's t-test returns NaN there)."""
    return bool(np.ptp(d) <= 1e-12 * max(1.0, abs(float(d.mean()))))


def _t_test(name: str, d: np.ndarray, n_excluded: int, scale: float, minimum: int, **extra: Any) -> dict:
    """t = mean(d) / sqrt(scale * s^2), df = n - 1, two-sided p; CI mean(d) +- t_{df} sqrt(scale s^2).

    ``scale`` = 1/n is Student's paired t-test (SciPy's ``ttest_1samp`` on d, which it is checked
    against); ``1/n + n_test/n_train`` is Nadeau & Bengio's correction.
    """
    few = _too_few(name, d, n_excluded, minimum)
    if few is not None:
        return {**few, **extra}
    n, diff = d.size, float(d.mean())
    df = n - 1
    if _constant(d):
        stat = 0.0 if diff == 0 else float(np.sign(diff) * np.inf)
        return _result(
            name, d, n_excluded, statistic=stat, df=df, p=float(diff == 0), ci=[diff, diff],
            ci_method="t interval (every difference equal: zero width)", **extra,
        )  # fmt: skip
    se = float(np.sqrt(scale * d.var(ddof=1)))
    stat = diff / se
    p = float(2 * stats.t.sf(abs(stat), df))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df) * se)
    ci_method = "t interval" + (" with the corrected variance" if name == "corrected-resampled" else "")
    return _result(
        name, d, n_excluded, statistic=stat, df=df, p=p, ci=[diff - half, diff + half],
        ci_method=ci_method, **extra,
    )  # fmt: skip


# ---------------------------------------------------------------------------------- query level
def bootstrap_ci(
    d: Any, *, n_resamples: int = 9999, seed: int = 0, confidence: float = CONFIDENCE, method: str = "BCa"
) -> list[float]:
    """Bootstrap confidence interval of the mean of the paired differences ``d`` (``scipy.stats.bootstrap``
    on ``d``: resampling the differences is the paired bootstrap; Efron & Tibshirani 1993, ch. 14 for BCa).

    ``method`` "BCa" (default: bias-corrected and accelerated, second-order accurate) or "percentile".
    Every difference equal -> ``[d, d]`` (BCa is undefined there); fewer than 2 values -> ``[nan, nan]``.
    """
    d = np.asarray(d, dtype=np.float64)
    if d.size < 2:
        return [float("nan"), float("nan")]
    if _constant(d):
        return [float(d.mean()), float(d.mean())]
    res = stats.bootstrap(
        (d,), np.mean, confidence_level=confidence, n_resamples=n_resamples, method=method,
        rng=np.random.default_rng(seed), vectorized=True,
    )  # fmt: skip
    return [float(res.confidence_interval.low), float(res.confidence_interval.high)]


def _query_ci(out: dict, d: np.ndarray, ci: bool, n_resamples: int, seed: int) -> dict:
    """The query-level tests' CI: BCa bootstrap over queries (None with ``ci=False``)."""
    if out["reason"] is not None or _constant(d):
        return out  # no CI (too few) or the zero-width one already set
    if ci:
        out["ci"] = bootstrap_ci(d, n_resamples=n_resamples, seed=seed)
        out["ci_method"] = f"BCa bootstrap over queries ({n_resamples} resamples, seed {seed})"
    else:
        out["ci"], out["ci_method"] = None, None
    return out


def query_ttest(a: Any, b: Any, *, ci: bool = True, n_resamples: int = 9999, seed: int = 0) -> dict[str, Any]:
    """Paired t-test over queries (test ``queries``): ``a``, ``b`` are ``(Q,)`` per-query values, each
    already averaged over the seeds (runs) the query was tested in (:func:`seed_average`), so every query
    counts once.

    t = mean(d) / (s_d / sqrt(n)), df = n - 1, d = a - b over the n queries where both are finite
    (Student 1908; SciPy's ``ttest_rel``). CI: BCa bootstrap of mean(d) over queries (``ci=False``
    skips it). Valid when the queries' differences are independent: the seed-to-seed (training) noise
    of a whole run, shared by its test queries, must be small against the per-query differences, which
    averaging over the seeds helps; the ``folds`` test does not need that.
    """
    d, _, excl = _differences(a, b)
    out = _t_test("queries", d, excl, 1.0 / max(d.size, 1), 2)
    return _query_ci(out, d, ci, n_resamples, seed)


def permutation_test(
    a: Any, b: Any, *, n_resamples: int = 9999, seed: int = 0, ci: bool = True
) -> dict[str, Any]:
    """Paired randomization test over queries (test ``queries-permutation``; Smucker, Allan & Carterette
    2007, "A comparison of statistical significance tests for information retrieval evaluation", CIKM).

    Under the null the two systems' values on a query are exchangeable, so each difference's sign is
    +-1 with probability 1/2; the statistic is mean(d) and p = P(|mean(s * d)| >= |mean(d)|) over the
    2^n sign vectors s: ``scipy.stats.permutation_test`` on the one sample d with
    ``permutation_type="samples"`` (which flips the signs of a single sample's values), exact when
    2^n <= ``n_resamples``, else ``n_resamples`` random sign vectors from ``seed`` (then
    p = (hits + 1) / (n_resamples + 1)). Every difference 0 -> p 1. CI: BCa bootstrap as
    :func:`query_ttest`.
    """
    d, _, excl = _differences(a, b)
    exact = d.size < 63 and 2**d.size <= n_resamples
    extra = {"n_resamples": n_resamples, "seed": seed, "exact": exact}
    few = _too_few("queries-permutation", d, excl, 2)
    if few is not None:
        return {**few, **extra}
    diff = float(d.mean())
    if not np.any(d):
        return _result(
            "queries-permutation", d, excl, statistic=0.0, p=1.0, ci=[0.0, 0.0],
            ci_method="every difference 0", **extra,
        )  # fmt: skip
    res = stats.permutation_test(  # one sample + "samples": the null distribution flips the signs
        (d,),
        lambda x, axis: np.mean(x, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        batch=max(1, 2_000_000 // max(d.size, 1)),
        rng=np.random.default_rng(seed),
    )
    out = _result("queries-permutation", d, excl, statistic=diff, p=float(min(1.0, res.pvalue)), **extra)
    if _constant(d):
        out.update(ci=[diff, diff], ci_method="every difference equal: zero width")
    return _query_ci(out, d, ci, n_resamples, seed)


# ------------------------------------------------------------------------------- folds and runs
def fold_test(a: Any, b: Any, folds: Any) -> dict[str, Any]:
    """Blocked by fold (test ``folds``): ``a``, ``b`` are ``(R,)`` run means of the two models and
    ``folds`` ``(R,)`` each run's fold; the runs of a fold (its seeds) are averaged, then Student's paired
    t-test over the F folds: t = mean(d_f) / (s / sqrt(F)), df = F - 1.

    The folds' test queries are disjoint, so the fold means are independent (up to the shared training
    queries); the price is a small n (5 for LETOR), hence little power. Fewer than ``MIN_RUNS`` folds ->
    no p-value. Runs with a NaN mean are dropped (counted in ``n_excluded``).
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    folds = np.asarray(folds)
    if not (a.shape == b.shape == folds.shape) or a.ndim != 1:
        raise ValueError(f"a, b and folds must be 1-D of one shape, got {a.shape}, {b.shape}, {folds.shape}")
    ok = np.isfinite(a) & np.isfinite(b)
    keys = np.unique(folds[ok])
    d = np.array([np.mean(a[ok & (folds == f)] - b[ok & (folds == f)]) for f in keys])
    return _t_test("folds", d, int((~ok).sum()), 1.0 / max(d.size, 1), MIN_RUNS, folds=keys.tolist())


def corrected_resampled_test(a: Any, b: Any, *, test_train_ratio: float) -> dict[str, Any]:
    """Corrected resampled t-test (test ``corrected-resampled``; Nadeau & Bengio 2003, "Inference for the
    generalization error", Machine Learning 52: 239-281, sec. 4; named so by Bouckaert & Frank 2004).

    ``a``, ``b``: ``(J,)`` run means of the two models over J random train/test splits; d_j = a_j - b_j,
    t = mean(d) / sqrt((1/J + n_test/n_train) s^2), df = J - 1, where s^2 is the sample variance of the
    d_j. The plain test uses 1/J, which assumes independent runs; overlapping training and test sets
    correlate them (correlation ~ n_test/n_train), so the plain variance is too small. SciPy has no such
    test (its ``ttest_rel`` is the uncorrected one), hence written here. ``test_train_ratio`` =
    n_test / n_train is recorded in the result; fewer than ``MIN_RUNS`` runs -> no p-value.
    """
    if not np.isfinite(test_train_ratio) or test_train_ratio < 0:
        raise ValueError(f"test_train_ratio must be a finite number >= 0, got {test_train_ratio!r}")
    d, _, excl = _differences(a, b)
    scale = 1.0 / max(d.size, 1) + test_train_ratio
    return _t_test("corrected-resampled", d, excl, scale, MIN_RUNS, test_train_ratio=float(test_train_ratio))


def runs_plain_test(a: Any, b: Any) -> dict[str, Any]:
    """The QILCM paper's test (``runs-plain``): Student's paired t-test over the runs' means as if the
    runs were independent, t = mean(d) / (s / sqrt(J)), df = J - 1 (SciPy's ``ttest_rel``). Runs that
    share a test fold or overlap are not independent, so this rejects far more often than its nominal
    level (``benchmarks/sim_null_tests.py``); kept only to compare with the paper's tables.
    """
    d, _, excl = _differences(a, b)
    return _t_test("runs-plain", d, excl, 1.0 / max(d.size, 1), MIN_RUNS)


# ------------------------------------------------------------------------------------- others
def paired_test(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Two-sided paired t-test of ``a`` vs ``b`` over the pairs where both are finite.

    Returns ``{"diff": mean(a - b), "t": ..., "p": ..., "n": pairs}``. Degenerate cases: fewer than 2
    pairs -> p NaN; every difference 0 -> t 0, p 1; every difference equal (up to rounding) and
    non-zero -> p 0. (The unlabelled building block of ``ctxrank compare``; reports use the named tests.)
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired samples must have the same shape, got {a.shape} and {b.shape}")
    ok = np.isfinite(a) & np.isfinite(b)
    d = a[ok] - b[ok]
    n = int(d.size)
    diff = float(d.mean()) if n else float("nan")
    if n < 2:
        return {"diff": diff, "t": float("nan"), "p": float("nan"), "n": n}
    if _constant(d):
        return {
            "diff": diff,
            "t": 0.0 if diff == 0 else float(np.sign(diff) * np.inf),
            "p": float(diff == 0),
            "n": n,
        }
    res = stats.ttest_rel(a[ok], b[ok])
    return {"diff": diff, "t": float(res.statistic), "p": float(res.pvalue), "n": n}


def holm(pvalues: Sequence[float | None]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (Holm, 1979), in the input order; NaN and None stay NaN.

    The i-th smallest of m p-values becomes ``max_{j<=i} min(1, (m - j + 1) p_(j))``.
    """
    p = np.array([np.nan if x is None else x for x in pvalues], dtype=np.float64)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m:
        order = ok[np.argsort(p[ok], kind="stable")]
        scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
        out[order] = np.maximum.accumulate(scaled)
    return out


#: multiple-comparison corrections of a family of p-values -> what each controls
CORRECTIONS = {
    "none": "no correction (raw p-values)",
    "holm": "Holm's step-down correction (controls the family-wise error rate)",
    "bh": "Benjamini-Hochberg (controls the false discovery rate; scipy.stats.false_discovery_control)",
}
DEFAULT_CORRECTION = "holm"


def adjust(pvalues: Sequence[float | None], method: str) -> np.ndarray:
    """The family's p-values corrected by ``method`` (a key of :data:`CORRECTIONS`), in the input
    order; NaN and None stay NaN and do not count in the family's size."""
    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r}; valid: {', '.join(CORRECTIONS)}")
    if method == "holm":
        return holm(pvalues)
    p = np.array([np.nan if x is None else x for x in pvalues], dtype=np.float64)
    if method == "bh":
        ok = np.isfinite(p)
        if ok.any():
            p[ok] = stats.false_discovery_control(p[ok], method="bh")
    return p


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sample std) over the finite values; std 0 for one value, NaN for none."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0
