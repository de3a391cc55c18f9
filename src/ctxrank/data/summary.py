"""Summary statistics of a :class:`~ctxrank.data.ranking_data.RankingData` (``ctxrank data-info``)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["data_summary", "label_text"]


def label_text(v: float) -> str:
    """A label as text: ``2`` for 2.0, ``0.5`` for 0.5."""
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def data_summary(data: Any, threshold: float = 1.0) -> dict[str, Any]:
    """Queries, items, features, label histogram, list lengths, queries without a relevant item
    (label >= ``threshold``), filled NULL / missing cells and cells kept missing, as a JSON-ready dict."""
    lengths = data.query_lengths
    hist = data.label_histogram()
    return {
        "source": data.source,
        "queries": data.n_queries,
        "items": data.n_items,
        "features": data.n_features,
        "label_histogram": {label_text(k): v for k, v in sorted(hist.items())},
        "list_length": {
            "min": int(lengths.min()),
            "median": float(np.median(lengths)),
            "mean": float(lengths.mean()),
            "max": int(lengths.max()),
        },
        "relevance_threshold": threshold,
        "queries_without_relevant": data.queries_without_relevant(threshold),
        # NULL cells of a LETOR file; missing numeric cells of a table
        "null_filled": int(data.info.get("null_filled", data.info.get("missing_filled", 0))),
        # cells kept missing (NaN: null_fill = "keep"), which only LambdaMART reads
        "missing": int(np.count_nonzero(np.isnan(data.features))),
    }
