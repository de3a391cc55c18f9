"""ctxrank.experiments.stats: the paired tests against independent computations, their degenerate cases,
and their rejection rate where the null holds (a small run of benchmarks/sim_null_tests.py)."""

import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from ctxrank.experiments import stats

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "sim_null_tests.py"


def _sim():
    spec = importlib.util.spec_from_file_location("sim_null_tests", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------ against hand computations
def test_permutation_test_equals_exact_enumeration_of_the_sign_flips():
    rng = np.random.default_rng(0)
    for n, shift in ((6, 0.0), (9, 0.4), (12, 0.8)):
        a = rng.normal(size=n)
        b = a - shift - rng.normal(size=n) * 0.5
        b[0] = a[0]  # a zero difference: flipping its sign changes nothing
        d = a - b
        signs = np.array(list(itertools.product([-1.0, 1.0], repeat=n)))
        null = (signs * d).mean(axis=1)
        expected = np.mean(np.abs(null) >= abs(d.mean()) * (1 - 1e-12))
        res = stats.permutation_test(a, b, n_resamples=9999, ci=False)
        assert res["exact"] and res["test"] == "queries-permutation" and res["unit"] == "queries"
        assert res["p"] == pytest.approx(expected, rel=1e-12) and res["n"] == n
        assert res["statistic"] == pytest.approx(d.mean())
    big = stats.permutation_test(rng.normal(size=40), rng.normal(size=40), n_resamples=999, seed=3, ci=False)
    assert not big["exact"] and big["n_resamples"] == 999 and big["seed"] == 3
    x, y = rng.normal(size=40), rng.normal(size=40)
    first, second = (stats.permutation_test(x, y, n_resamples=999, seed=3, ci=False) for _ in range(2))
    assert first["p"] == second["p"]  # seeded: the same data give the same p


def test_corrected_resampled_test_equals_the_nadeau_bengio_formula_by_hand():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.5, 0.02, 20), rng.normal(0.49, 0.02, 20)
    ratio = 157 / 627
    res = stats.corrected_resampled_test(a, b, test_train_ratio=ratio)
    d = a - b
    J = len(d)
    var = sum((x - d.mean()) ** 2 for x in d) / (J - 1)
    t = d.mean() / math.sqrt((1 / J + ratio) * var)
    p = 2 * sps.t.sf(abs(t), J - 1)
    half = sps.t.ppf(0.975, J - 1) * math.sqrt((1 / J + ratio) * var)
    assert res["statistic"] == pytest.approx(t) and res["p"] == pytest.approx(p) and res["df"] == J - 1
    assert res["ci"] == pytest.approx([d.mean() - half, d.mean() + half])
    assert res["test_train_ratio"] == ratio and res["unit"] == "runs" and res["n"] == J
    # ratio 0 is the plain test, which is SciPy's ttest_rel
    plain = stats.runs_plain_test(a, b)
    assert stats.corrected_resampled_test(a, b, test_train_ratio=0.0)["p"] == pytest.approx(plain["p"])
    assert plain["p"] == pytest.approx(sps.ttest_rel(a, b).pvalue) and plain["p"] < res["p"]
    with pytest.raises(ValueError, match="test_train_ratio"):
        stats.corrected_resampled_test(a, b, test_train_ratio=-1.0)


def test_query_test_over_seed_averaged_queries_equals_a_t_test_by_hand():
    rng = np.random.default_rng(2)
    S, Q = 4, 30
    a, b = rng.uniform(size=(S, Q)), rng.uniform(size=(S, Q))
    a[1, 3] = np.nan  # query 3 not scored in seed 1: averaged over the other seeds
    a[:, 7] = np.nan  # query 7 never scored for a: excluded, and counted
    qa, qb = stats.seed_average(a), stats.seed_average(b)
    assert qa[3] == pytest.approx(np.mean(a[[0, 2, 3], 3])) and math.isnan(qa[7])
    res = stats.query_ttest(qa, qb, n_resamples=999)
    d = [qa[q] - qb[q] for q in range(Q) if q != 7]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    t = mean / (sd / math.sqrt(n))
    assert res["n"] == n == 29 and res["n_excluded"] == 1 and res["diff"] == pytest.approx(mean)
    assert res["statistic"] == pytest.approx(t) and res["p"] == pytest.approx(2 * sps.t.sf(abs(t), n - 1))
    lo, hi = res["ci"]
    assert lo < mean < hi and res["ci_method"].startswith("BCa bootstrap")


def test_fold_test_averages_the_seeds_of_each_fold_then_tests_over_folds():
    rng = np.random.default_rng(3)
    folds = np.tile(np.arange(1, 6), 4)  # seed-major: seed 0 on folds 1-5, then seed 1, ...
    a, b = rng.normal(0.5, 0.03, 20), rng.normal(0.5, 0.03, 20)
    res = stats.fold_test(a, b, folds)
    fa = [np.mean(a[folds == f]) for f in range(1, 6)]
    fb = [np.mean(b[folds == f]) for f in range(1, 6)]
    ref = sps.ttest_rel(fa, fb)
    assert res["n"] == 5 and res["unit"] == "folds" and res["folds"] == [1, 2, 3, 4, 5]
    assert res["p"] == pytest.approx(ref.pvalue) and res["statistic"] == pytest.approx(ref.statistic)
    assert stats.fold_test(a[:10], b[:10], np.tile([1, 2], 5))["reason"].startswith("no test over folds")


def test_bootstrap_ci_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(4)
    covered, trials = 0, 200
    for i in range(trials):
        d = rng.exponential(0.1, size=60) - 0.1  # skewed, true mean 0
        lo, hi = stats.bootstrap_ci(d, n_resamples=999, seed=i)
        covered += lo <= 0.0 <= hi
    assert 0.88 <= covered / trials <= 0.99
    pct = stats.bootstrap_ci(rng.normal(size=60), n_resamples=999, method="percentile")
    assert pct[0] < pct[1]


# ----------------------------------------------------------------------------------- degenerate cases
@pytest.mark.parametrize("name", list(stats.TESTS))
def test_degenerate_cases_are_explicit(name):
    def run(a, b):
        a, b = np.asarray(a, float), np.asarray(b, float)
        if name == "queries":
            return stats.query_ttest(a, b)
        if name == "queries-permutation":
            return stats.permutation_test(a, b)
        if name == "folds":
            return stats.fold_test(a, b, np.arange(a.size))
        if name == "corrected-resampled":
            return stats.corrected_resampled_test(a, b, test_train_ratio=0.25)
        return stats.runs_plain_test(a, b)

    x = np.array([0.3, 0.5, 0.7, 0.2, 0.9])
    same = run(x, x)  # every difference 0 -> p 1 (SciPy's t-test alone gives NaN)
    assert same["p"] == 1.0 and same["ci"] == [0.0, 0.0] and same["test"] == name
    assert same["unit"] == stats.UNITS[name] and same["reason"] is None
    assert run(x + 0.1, x)["p"] < 0.07  # a constant non-zero difference (t tests: p 0; sign flips: 2/32)
    one = run([0.5], [0.4])
    assert one["p"] is None and one["reason"] and one["n"] == 1
    with_nan = run([np.nan, *x], [0.1, *(x - 0.05)])
    assert with_nan["n"] == 5 and with_nan["n_excluded"] == 1
    if stats.UNITS[name] != "queries":  # fewer than 3 runs (folds): no test over runs is possible
        two = run([0.5, 0.6], [0.4, 0.3])
        assert two["p"] is None and f"no test over {stats.UNITS[name]} is possible" in two["reason"]


def test_unknown_test_names_are_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"valid tests: queries, queries-permutation, folds"):
        stats.check_test("wilcoxon")
    with pytest.raises(ValueError, match="'runs' is now 'runs-plain'"):
        stats.check_test("runs")
    assert set(stats.DEFAULT_TEST.values()) <= set(stats.TESTS) and set(stats.UNITS) == set(stats.TESTS)


def test_holm_accepts_the_none_of_a_missing_p_value():
    out = stats.holm([0.01, None, 0.04])
    assert math.isnan(out[1]) and out[0] == pytest.approx(0.02) and out[2] == pytest.approx(0.04)


# ------------------------------------------------------------------------------ simulation under H0
def test_default_tests_hold_their_level_under_the_null_and_the_plain_test_does_not():
    """A few hundred simulated null experiments per protocol (benchmarks/sim_null_tests.py). The
    defaults (whatever DEFAULT_TEST names) must reject near 5%; the plain over-runs test far more: were
    the default the plain test, the first assertions would fail."""
    sim = _sim()
    n = 300
    # folds protocol: without a training effect shared by a fold's queries every test but the plain one
    # holds; with such effects ("realistic") only the blocked test does -- the default must be one of those
    folds = sim.simulate(
        "folds", n, 0, scenario="no-training-effect", tests=("queries", "folds", "runs-plain")
    )
    assert 0.02 <= folds[stats.DEFAULT_TEST["folds"]]["rate"] <= 0.09, folds
    assert folds["runs-plain"]["rate"] >= 0.15, folds
    realistic = sim.simulate("folds", n, 0, scenario="realistic", tests=("queries", "folds", "runs-plain"))
    assert 0.02 <= realistic[stats.DEFAULT_TEST["folds"]]["rate"] <= 0.09, realistic
    assert realistic["runs-plain"]["rate"] >= 0.15, realistic
    # random splits: the corrected resampled t-test is near 5% without training effects and conservative
    # (below 5%) with them
    for scenario, low in (("no-training-effect", 0.015), ("realistic", 0.0)):
        tests = ("corrected-resampled", "runs-plain")
        splits = sim.simulate("random-splits", n, 0, scenario=scenario, tests=tests)
        assert low <= splits[stats.DEFAULT_TEST["random-splits"]]["rate"] <= 0.09, (scenario, splits)
        assert splits["runs-plain"]["rate"] >= 0.15, (scenario, splits)
