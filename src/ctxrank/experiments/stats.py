"""Statistics for experiment reports: paired t-tests (SciPy), Holm's correction, mean +- std.

The QILCM paper reports Student's t-test p-values of QILCM against the best baseline over its 20 runs;
``paired_test`` is SciPy's ``ttest_rel`` with the degenerate cases made explicit (SciPy returns NaN
when every difference is equal). Holm's step-down correction is written here because SciPy has none
(``scipy.stats.false_discovery_control`` is Benjamini-Hochberg / -Yekutieli, which control the false
discovery rate, not the family-wise error) and statsmodels would be a large dependency for six lines.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

__all__ = ["holm", "mean_std", "paired_test"]


def paired_test(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Two-sided paired t-test of ``a`` vs ``b`` over the pairs where both are finite.

    Returns ``{"diff": mean(a - b), "t": ..., "p": ..., "n": pairs}``. Degenerate cases: fewer than 2
    pairs -> p NaN; every difference 0 -> t 0, p 1; every difference equal (up to rounding) and
    non-zero -> p 0.
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
    if np.ptp(d) <= 1e-12 * max(1.0, abs(diff)):  # equal differences up to rounding
        return {
            "diff": diff,
            "t": 0.0 if diff == 0 else float(np.sign(diff) * np.inf),
            "p": float(diff == 0),
            "n": n,
        }
    res = stats.ttest_rel(a[ok], b[ok])
    return {"diff": diff, "t": float(res.statistic), "p": float(res.pvalue), "n": n}


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (Holm, 1979), in the input order; NaN stays NaN.

    The i-th smallest of m p-values becomes ``max_{j<=i} min(1, (m - j + 1) p_(j))``.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m:
        order = ok[np.argsort(p[ok], kind="stable")]
        scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
        out[order] = np.maximum.accumulate(scaled)
    return out


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sample std) over the finite values; std 0 for one value, NaN for none."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0
