"""Summary statistics of a :class:`~ctxrank.data.ranking_data.RankingData` (``ctxrank data-info``)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["data_summary", "label_text", "log_summary"]


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
        **({"categorical": categorical_summary(data)} if data.categorical is not None else {}),
        **({"log": log_summary(data)} if getattr(data, "shown_positions", None) is not None else {}),
    }


def categorical_summary(data: Any) -> dict[str, dict[str, int]]:
    """Each categorical column of a table: its distinct values (``values``, the reserved code 0 not
    counted) and its cells with code 0 (``missing``: missing or, on data the encoder was not fitted on,
    unseen)."""
    codes, cards = data.categorical, data.categorical_cardinalities
    return {
        name: {"values": int(card) - 1, "missing": int(np.count_nonzero(codes[:, j] == 0))}
        for j, (name, card) in enumerate(zip(data.categorical_names, cards, strict=True))
    }


def log_summary(data: Any) -> dict[str, Any]:
    """An interaction log's summary (``data.shown_positions`` set; an interaction is a label > 0):
    sessions, distinct queries (of ``group_ids``; None without), the raw position curve
    (``ctr_by_position[p - 1]``: interactions / impressions at position p, for p = 1..max, with both
    counts), interactions per session (mean and ``{count: sessions}``), sessions without interaction."""
    positions = data.shown_positions.astype(np.int64)
    hit = (data.labels > 0).astype(np.int64)
    impressions = np.bincount(positions, minlength=int(positions.max()) + 1)[1:]
    interactions = np.bincount(positions, weights=hit, minlength=impressions.size + 1)[1:].astype(np.int64)
    per_session = np.add.reduceat(hit, data.query_offsets[:-1])
    counts, sessions = np.unique(per_session, return_counts=True)
    return {
        "sessions": data.n_queries,
        "queries": None if data.group_ids is None else int(np.unique(data.group_ids).size),
        "ctr_by_position": [
            {"position": p + 1, "impressions": n, "interactions": k, "ctr": k / n}  # every p <= max is shown
            for p, (n, k) in enumerate(zip(impressions.tolist(), interactions.tolist(), strict=True))
        ],
        "interactions_per_session": {
            "mean": float(per_session.mean()),
            "histogram": {str(c): int(m) for c, m in zip(counts.tolist(), sessions.tolist(), strict=True)},
        },
        "sessions_without_interaction": int(np.count_nonzero(per_session == 0)),
    }
