"""Anomalous-query analysis (QILCM paper, "Anomalous Query Analysis" and Figure 2).

Each query is represented by the mean feature vector of its top ``k`` items under the initial ranking
(k = 10 in the paper); scikit-learn's ``IsolationForest`` is fitted on the training queries and gives
every test query an anomaly score (here ``-score_samples``: higher = more anomalous). Test queries are
bucketed by that score and the per-query metric gap between two models (QILCM - DLCM in the paper) is
averaged per bucket, with a 95% confidence interval and a paired t-test.

The unit of the test is the query: a test query seen in several runs (every seed of its fold, or
several random splits) enters once, with its anomaly score and both models' metrics averaged over
those runs (``ctxrank.experiments.report.query_means``); pooling the (run, query) pairs would count
it once a run and make the p-values too small (pseudo-replication).

Choices the paper leaves open (documented here, options in ``[analysis.anomaly]``): the buckets are
equal-count quantile buckets of the anomaly scores pooled over all runs (``buckets``, default 5); the
initial ranking is the experiment's LambdaMART (fitted per run; in-sample on train); the forest uses
``n_estimators`` trees (default 100, scikit-learn's default) seeded with the run's seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats
from sklearn.ensemble import IsolationForest

from ctxrank.data.ranking_data import RankingData
from ctxrank.experiments.stats import paired_test

__all__ = ["anomaly_scores", "bucket_gaps", "method_text", "query_vectors"]


def query_vectors(data: RankingData, scores: np.ndarray, top: int = 10) -> np.ndarray:
    """float64 ``(Q, F)``: each query's mean feature vector over its ``top`` best-scored items
    (all items when the list is shorter). Ties keep file order."""
    q = np.repeat(np.arange(data.n_queries), data.query_lengths)
    order = np.lexsort((np.arange(data.n_items), -np.asarray(scores, dtype=np.float64), q))
    rank = np.arange(data.n_items) - data.query_offsets[q[order]]  # rank within its query
    keep = order[rank < top]
    sums = np.zeros((data.n_queries, data.n_features))
    np.add.at(sums, q[keep], data.features[keep].astype(np.float64))
    return sums / np.minimum(data.query_lengths, top)[:, None]


def method_text(top: int, n_estimators: int) -> str:
    """One line describing how ``anomaly_scores`` scores queries, for reports."""
    return (
        f"IsolationForest(n_estimators={n_estimators}, random_state=the run's seed) on the mean "
        f"features of each query's top {top} items under LambdaMART (fitted on train)"
    )


def anomaly_scores(
    train: RankingData,
    train_scores: np.ndarray,
    test: RankingData,
    test_scores: np.ndarray,
    *,
    top: int = 10,
    n_estimators: int = 100,
    seed: int = 0,
) -> np.ndarray:
    """float64 ``[Q_test]`` anomaly scores (higher = more unlike the training queries)."""
    forest = IsolationForest(n_estimators=n_estimators, random_state=seed)
    forest.fit(query_vectors(train, train_scores, top))
    return -forest.score_samples(query_vectors(test, test_scores, top))


def bucket_gaps(
    anomaly: np.ndarray, a: dict[str, np.ndarray], b: dict[str, np.ndarray], buckets: int
) -> dict[str, Any]:
    """Per-bucket mean gap ``a - b`` of per-query metrics, each value a test unit (a query, averaged
    over its runs).

    Args:
        anomaly: ``[n]`` anomaly score of every unit.
        a, b: metric name -> ``[n]`` per-unit values of the two models, aligned with ``anomaly``.
        buckets: number of equal-count buckets (by quantile of ``anomaly``; bucket 1 = least anomalous).

    Returns:
        JSON-ready ``{"edges": [...], "buckets": [{"bucket", "n", "score_range", metric: {"gap",
        "ci95", "p", "a", "b"}}]}``; NaN metric values (``no_relevant="skip"``) are left out.
    """
    anomaly = np.asarray(anomaly, dtype=np.float64)
    edges = np.quantile(anomaly, np.linspace(0, 1, buckets + 1))
    which = np.clip(np.searchsorted(edges, anomaly, side="right") - 1, 0, buckets - 1)
    rows = []
    for k in range(buckets):
        sel = which == k
        row: dict[str, Any] = {
            "bucket": k + 1,
            "n": int(sel.sum()),
            "score_range": [float(edges[k]), float(edges[k + 1])],
        }
        for metric in a:
            x, y = np.asarray(a[metric])[sel], np.asarray(b[metric])[sel]
            ok = np.isfinite(x) & np.isfinite(y)
            d = x[ok] - y[ok]
            test = paired_test(x, y)
            half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else np.nan
            row[metric] = {
                "gap": test["diff"],
                "ci95": float(half),
                "p": test["p"],
                "a": float(x[ok].mean()) if d.size else float("nan"),
                "b": float(y[ok].mean()) if d.size else float("nan"),
            }
        rows.append(row)
    return {"edges": edges.tolist(), "buckets": rows}
