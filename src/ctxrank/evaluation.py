"""Evaluation reports: a ranking's per-query metrics under a named convention, as one dict.

The same dict is the output of ``ctxrank evaluate --json`` and the content of ``test_metrics.json``
written by ``ctxrank train``: the data's name and size, mean metrics, how many queries each mean is
over, the metric convention, query ids and per-query vectors (NaN = a skipped query; JSON null).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxrank.metrics import MetricConvention, evaluate_queries, mean_metrics

__all__ = ["evaluate_scores", "metrics_report", "unevaluated_message"]


def evaluate_scores(
    scores: np.ndarray, data: Any, metrics: Sequence[str], convention: MetricConvention
) -> dict[str, Any]:
    """The :func:`metrics_report` of ``(N,)`` ``scores`` in the row order of ``data`` (a RankingData)."""
    per_query = evaluate_queries(
        scores,
        data.labels,
        data.query_offsets,
        metrics,
        convention=convention.name,
        no_relevant=convention.no_relevant,
        threshold=convention.threshold,
        gain=convention.gain,
        max_label=convention.max_label,
    )
    return metrics_report(per_query, data, convention)


def metrics_report(
    per_query: Mapping[str, np.ndarray], data: Any, convention: MetricConvention
) -> dict[str, Any]:
    """``per_query`` (``{metric: (Q,) array}`` over the queries of ``data``) as a report dict.

    Keys: ``data``, ``queries``, ``items``, ``metrics`` (means over non-NaN queries),
    ``queries_evaluated``, ``conventions``, ``query_ids``, ``per_query``.
    """
    if any(len(v) != data.n_queries for v in per_query.values()):
        raise ValueError(f"per-query vectors must have one value per query ({data.n_queries})")
    return {
        "data": data.source,
        "queries": data.n_queries,
        "items": data.n_items,
        "metrics": mean_metrics(per_query),
        "queries_evaluated": {k: int(np.count_nonzero(~np.isnan(v))) for k, v in per_query.items()},
        "conventions": convention.to_dict(),
        "query_ids": [str(q) for q in data.query_ids],
        "per_query": {k: np.asarray(v, dtype=np.float64) for k, v in per_query.items()},
    }


def unevaluated_message(report: Mapping[str, Any]) -> str | None:
    """Why a report's mean is NaN, or None: the metrics for which every query was skipped (no query
    has a relevant item under ``no_relevant = skip``, or no query has an item at all)."""
    empty = [k for k, n in report["queries_evaluated"].items() if n == 0]
    if not empty:
        return None
    conv = report["conventions"]
    return (
        f"{report['data']}: every one of its {report['queries']} queries was skipped for "
        f"{', '.join(empty)}, so there is no mean (no query has an item labelled >= "
        f"{conv.get('threshold', 1)} and no-relevant = {conv.get('no_relevant')}): check the labels and "
        "--threshold, or count such queries with --no-relevant 0 or 1"
    )
