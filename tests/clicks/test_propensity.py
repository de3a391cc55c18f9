"""Propensity estimators on seeded position-based-model logs, the Propensities value and its errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ctxrank.clicks.propensity import (
    Propensities,
    from_harvesting,
    from_randomized,
    from_regression_em,
)
from ctxrank.data.ranking_data import RankingData


def simulate_pbm(
    *,
    n_sessions: int,
    eta: float = 1.0,
    n_queries: int = 40,
    n_items: int = 8,
    randomize: str = "none",
    n_rankers: int = 1,
    seed: int = 0,
) -> tuple[RankingData, dict]:
    """A seeded position-based-model log: each session shows all ``n_items`` items of a random query in
    its logging ranker's order (``randomize``: "swap" puts the top item at a uniform position, "shuffle"
    permutes the list); an item is clicked when examined (prob. (1 / position) ** eta) and relevant
    (prob. sigmoid of its features). Returns the log and the truth (relevance per row, rankers, ...)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n_queries, n_items, 3)).astype(np.float32)
    relevance = 1.0 / (1.0 + np.exp(-(features @ np.array([1.5, -1.0, 0.5]) - 0.5)))
    # ranker r scores items by a noisy copy of the relevance logit (different noise per ranker)
    ranker_scores = features @ np.array([1.5, -1.0, 0.5]) + rng.normal(scale=1.5, size=(n_rankers, n_queries, n_items))
    query = rng.integers(n_queries, size=n_sessions)
    ranker = rng.integers(n_rankers, size=n_sessions)
    order = np.argsort(-ranker_scores[ranker, query], axis=1, kind="stable")  # (S, L) items by shown position
    original = np.empty_like(order)
    np.put_along_axis(original, order, np.arange(1, n_items + 1)[None, :].repeat(n_sessions, 0), axis=1)
    shown = original.copy()  # (S, L) the position of each item
    if randomize == "swap":
        k = rng.integers(1, n_items + 1, size=n_sessions)
        top = original == 1
        at_k = original == k[:, None]
        shown[top] = k
        shown[at_k & ~top] = 1
    elif randomize == "shuffle":
        shown = rng.permuted(np.tile(np.arange(1, n_items + 1), (n_sessions, 1)), axis=1)
    rel = relevance[query]  # (S, L)
    clicks = (rng.random(shown.shape) < (1.0 / shown) ** eta) & (rng.random(shown.shape) < rel)
    session = np.repeat(np.arange(n_sessions), n_items)
    log = RankingData.from_arrays(
        features[query].reshape(-1, 3),
        clicks.reshape(-1).astype(np.float32),
        qid=session,
        position=shown.reshape(-1),
    )
    log = dataclasses.replace(
        log,
        group_ids=np.array([f"q{q}" for q in query]),
        docids=np.array([f"d{i}" for i in range(n_items)] * n_sessions),
    )
    truth = {
        "relevance": rel.reshape(-1),
        "original": original.reshape(-1),
        "rankers": ranker,
        "curve": (1.0 / np.arange(1, n_items + 1)) ** eta,
        "query": query,
        "features": features,
        "query_relevance": relevance,
    }
    return log, truth
