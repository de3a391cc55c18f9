"""Do the offline estimators' intervals cover the truth? Checked on logs simulated from labelled data.

:func:`offline_coverage` simulates ``logs`` seeded logs from labelled data with the position-based click
model (:mod:`ctxrank.clicks.simulate`, the logging LambdaMART's top k shown), evaluates several rankers
of different quality on each log with every estimator of :mod:`ctxrank.clicks.offline` (IPS, SNIPS and
DR, unclipped and with clipped weights; DR's reward model :func:`~ctxrank.clicks.offline.click_reward`
fitted on each log's features, and, for contrast, a constant one) and records whether each interval
covers the simulator's truth.

The truth is computed exactly, not simulated: the logging ranker's scores are made strict (ties broken
once by a seeded draw), so each query always shows the same top k, and a session draws its query
uniformly. The metric of a ranker is then ``V = (1 / Q) sum_q sum_{d in top k(q)} lambda(rank_new(d))
a_d`` with ``a_d = eps_minus + (eps_plus - eps_minus) rel(d)`` the click probability of item d at
position 1 (the examination there is 1), ``rank_new`` the ranker's order of the shown items (the same
tie rule as the estimators) and ``lambda`` :func:`~ctxrank.clicks.offline.rank_weights`; SNIPS
targets ``V / ((1 / Q) sum_q sum_d a_d)``. The estimators are given the simulator's true propensities
``(1 / r)^eta``: the check is of the estimators, not of a propensity estimate.

The rankers (:data:`RANKERS`): ``labels`` (the true labels: the best), ``noisy-labels`` (the labels
plus standard normal noise, drawn once), ``logging`` (the logging ranker: the estimate of its clicks
is the log's own click rate) and ``reversed`` (the logging order upside down: the items shown lowest,
with the largest weights, go first: the hardest case for clipping).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ctxrank.clicks import simulate as sim
from ctxrank.clicks.click_models import PositionBasedModel, label_relevance
from ctxrank.clicks.offline import METRICS, click_reward, offline_estimates, rank_weights
from ctxrank.clicks.propensity import Propensities
from ctxrank.data.ranking_data import RankingData, order_by_score

__all__ = [
    "ESTIMATORS",
    "KIND",
    "RANKERS",
    "check_coverage_options",
    "coverage_counts",
    "coverage_table",
    "offline_coverage",
    "record_text",
]

#: the rankers checked, best first (see the module)
RANKERS = ("labels", "noisy-labels", "logging", "reversed")
#: the estimators checked: each of IPS, SNIPS, DR unclipped, then with the weights clipped at ``clip``,
#: and DR clipped with a constant reward model (the intercept-only fit: a reward model that knows nothing)
ESTIMATORS = ("ips", "snips", "dr", "ips-clipped", "snips-clipped", "dr-clipped", "dr-clipped-constant")
#: what a record says it is (``kind``)
KIND = "ctxrank offline coverage"


def check_coverage_options(
    *,
    logs: int,
    sessions: int,
    top_k: int,
    metrics: tuple[str, ...],
    k: int,
    clip: float,
    n_resamples: int,
    confidence: float,
) -> None:
    """Refuse bad options of :func:`offline_coverage` before any work.

    Raises:
        ValueError: naming the option, what was expected and what came.
    """
    for name, value, least in (
        ("logs", logs, 1), ("sessions", sessions, 2), ("k", k, 1), ("n_resamples", n_resamples, 1)
    ):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name}: expected an integer >= {least}, got {value!r}")
    sim.check_options(sessions=sessions, top_k=top_k)
    if not metrics or len(set(metrics)) != len(metrics) or not set(metrics) <= set(METRICS):
        raise ValueError(f"metrics: expected distinct names among {list(METRICS)}, got {list(metrics)!r}")
    if isinstance(clip, bool) or not isinstance(clip, int | float) or not 1.0 <= clip < float("inf"):
        raise ValueError(f"clip: expected a finite maximum weight >= 1, got {clip!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: expected a level in (0, 1), got {confidence!r}")


def _strict(scores: np.ndarray, seed: int) -> np.ndarray:
    """float64 (N,) scores in the same order as ``scores`` with every tie broken by a seeded draw."""
    order = np.lexsort((np.random.default_rng([seed, 11]).random(scores.size), -scores))
    strict = np.empty(scores.size)
    strict[order] = -np.arange(scores.size, dtype=np.float64)
    return strict


def _shown_rows(data: RankingData, logging: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, query)``: int64 rows of every query's top ``top_k`` by the strict ``logging`` scores, by
    query then shown position, and the query of each."""
    order = order_by_score(data.query_index, logging, data.features)
    rank = np.arange(data.n_items) - np.repeat(data.query_offsets[:-1], data.query_lengths)
    shown = order[rank < top_k]
    return shown, data.query_index[shown]


def _truth(
    data: RankingData,
    rows: np.ndarray,
    query: np.ndarray,
    attract: np.ndarray,
    scores: np.ndarray,
    propensities: Propensities,
    metric: str,
    k: int,
) -> tuple[float, float]:
    """``(V, V / E[sum a])`` of the ranker ``scores`` over every query's shown list (module docstring)."""
    order = order_by_score(query, scores[rows], data.features[rows])
    lengths = np.bincount(query, minlength=data.n_queries)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    new_rank = np.empty(rows.size, dtype=np.int64)
    new_rank[order] = np.arange(rows.size) - np.repeat(starts, lengths)
    lam = rank_weights(metric, k, propensities, int(lengths.max()))
    value = float((lam[new_rank] * attract).sum() / data.n_queries)
    return value, value / float(attract.sum() / data.n_queries)


def offline_coverage(
    data: RankingData,
    *,
    logs: int = 50,
    sessions: int = 2000,
    model: PositionBasedModel | None = None,
    top_k: int = 10,
    relevance: str = "exponential",
    logging_fraction: float = 0.01,
    metrics: tuple[str, ...] = METRICS,
    k: int = 10,
    clip: float = 5.0,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """The coverage record of the estimators on ``logs`` logs simulated from the labelled ``data``.

    Args:
        model: the position-based click model (default ``eta = 1``, ``eps_minus = 0.1``).
        logging_fraction: the logging LambdaMART's share of ``data``'s queries
            (:func:`~ctxrank.clicks.simulate.logging_scores`).
        clip: the largest inverse-propensity weight of the ``*-clipped`` estimators.
        seed: the logging ranker, its tie-break and the noisy ranker draw from it; log ``j`` is
            simulated with seed ``seed + j`` and its intervals are bootstrapped with seed ``j``.

    Returns:
        ``{"kind", "parameters", "data", "truth", "rows", "counts", "seconds"}``: ``rows`` one per
        (log, ranker, metric, estimator) with the estimate, its interval, the truth and ``covered``;
        ``counts`` (:func:`coverage_counts`) the covered rows per estimator and ranker.

    Raises:
        TypeError / ValueError: bad options (before any work), labelled data without a positive label.
    """
    model = PositionBasedModel() if model is None else model
    if not isinstance(model, PositionBasedModel):
        raise TypeError(
            "model: expected the position-based model (the estimators' propensities are its examination), "
            f"got {type(model).__name__}"
        )
    metrics = tuple(metrics)
    check_coverage_options(
        logs=logs, sessions=sessions, top_k=top_k, metrics=metrics, k=k, clip=clip, n_resamples=n_resamples,
        confidence=confidence,
    )  # fmt: skip
    sim.check_options(sessions=sessions, top_k=top_k, relevance=relevance)
    sim.check_fraction(logging_fraction)
    if not isinstance(data, RankingData) or data.shown_positions is not None:
        raise TypeError("data: expected labelled RankingData (not a log)")
    started = time.perf_counter()
    top_label = float(data.labels.max())
    if not top_label > 0:
        raise ValueError(f"{data.source}: no item has a label above 0; nothing to click")
    logging = _strict(sim.logging_scores(data, fraction=logging_fraction, seed=seed), seed)
    noise = np.random.default_rng([seed, 13]).standard_normal(data.n_items)
    scores = {
        "labels": data.labels.astype(np.float64),
        "noisy-labels": data.labels + noise,
        "logging": logging,
        "reversed": -logging,
    }
    shown_k = min(top_k, int(data.query_lengths.max()))
    props = Propensities.pbm(model.eta, shown_k)
    rows, query = _shown_rows(data, logging, top_k)
    rel = label_relevance(data.labels[rows], top_label, relevance)
    attract = model.eps_minus + (model.eps_plus - model.eps_minus) * rel
    truth = {
        (r, m): _truth(data, rows, query, attract, scores[r], props, m, k) for r in RANKERS for m in metrics
    }
    records = []
    for j in tqdm(range(logs), unit="log", disable=not progress):
        made = sim.simulate_clicks(
            data, logging, model, sessions=sessions, top_k=top_k, relevance=relevance, max_label=top_label,
            seed=seed + j,
        )  # fmt: skip
        log = made.log
        clicked = log.labels.max() > 0
        reward = click_reward(log, props) if clicked else np.zeros(log.n_items)
        constant = click_reward(log, props, np.zeros(log.n_items)) if clicked else reward
        for ranker in RANKERS:
            s = scores[ranker][made.source_rows]
            for metric in metrics:
                value, normalised = truth[ranker, metric]
                for clipped, model_reward, suffix, names in (
                    (None, reward, "", ("ips", "snips", "dr")),
                    (clip, reward, "-clipped", ("ips", "snips", "dr")),
                    (clip, constant, "-clipped-constant", ("dr",)),
                ):
                    est = offline_estimates(
                        log, s, props, metric=metric, k=k, clip=clipped, reward=model_reward,
                        n_resamples=n_resamples, confidence=confidence, seed=j,
                    )  # fmt: skip
                    for name in names:
                        e = est[name]
                        target = normalised if name == "snips" else value
                        records.append(
                            {
                                "log": j,
                                "ranker": ranker,
                                "metric": metric,
                                "estimator": name + suffix,
                                "value": e.value,
                                "low": e.low,
                                "high": e.high,
                                "truth": target,
                                "covered": bool(e.low <= target <= e.high),
                            }
                        )
    return {
        "kind": KIND,
        "parameters": {
            "logs": logs,
            "sessions": sessions,
            "click_model": {
                "name": model.name,
                "eta": model.eta,
                "eps_minus": model.eps_minus,
                "eps_plus": model.eps_plus,
            },
            "top_k": top_k,
            "relevance": relevance,
            "logging_fraction": logging_fraction,
            "metrics": list(metrics),
            "k": k,
            "clip": clip,
            "n_resamples": n_resamples,
            "confidence": confidence,
            "seed": seed,
            "propensities": "the simulator's (1/r)^eta",
            "reward": "click_reward on each log's features; -constant: on no feature (intercept only)",
        },
        "data": {"source": data.source, "queries": data.n_queries, "items": data.n_items},
        "truth": [
            {"ranker": r, "metric": m, "value": v, "normalised": n} for (r, m), (v, n) in truth.items()
        ],
        "rows": records,
        "counts": coverage_counts(records),
        "seconds": round(time.perf_counter() - started, 1),
    }


def coverage_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``{estimator: {ranker: covered, ..., "covered": all covered, "checked": all rows}}`` of ``rows``."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        c = counts.setdefault(row["estimator"], {"covered": 0, "checked": 0})
        c.setdefault(row["ranker"], 0)
        c[row["ranker"]] += int(row["covered"])
        c["covered"] += int(row["covered"])
        c["checked"] += 1
    return counts


def coverage_table(record: dict[str, Any]) -> str:
    """The markdown table of a coverage record, recomputed from its rows: per estimator, the intervals
    covering the truth of each ranker (over logs and metrics), in all, and the mean relative error of the
    estimates ``(estimate - truth) / truth``."""
    if not isinstance(record, dict) or record.get("kind") != KIND:
        raise ValueError(f"not an offline coverage record (kind {KIND!r})")
    rows, p = record["rows"], record["parameters"]
    counts = coverage_counts(rows)
    rankers = [r for r in RANKERS if any(row["ranker"] == r for row in rows)]
    first = rows[0]["estimator"]
    per = {r: sum(row["ranker"] == r and row["estimator"] == first for row in rows) for r in rankers}
    model = p["click_model"]
    metrics = ", ".join(f"{m}@{p['k']}" for m in p["metrics"])
    lines = [
        f"{p['logs']} logs of {p['sessions']:,} sessions simulated from {record['data']['source']} "
        f"({record['data']['queries']:,} queries; position-based model, eta {model['eta']:g}, "
        f"eps_minus {model['eps_minus']:g}; the top {p['top_k']} of a LambdaMART trained on "
        f"{p['logging_fraction']:g} of the queries shown), each ranker's {metrics} estimated on each log. "
        f"Cell: the {p['confidence']:.0%} bootstrap intervals ({p['n_resamples']} resamples over sessions) "
        f"that cover the exact truth, out of the checks (logs x metrics); clipped: weights at most "
        f"{p['clip']:g}; DR's reward model fitted on each log's features (constant: on none, the "
        "intercept-only fit). Error: mean (estimate - truth) / truth.",
        "",
        "| estimator | " + " | ".join(f"{r} (of {per[r]})" for r in rankers) + " | covered | error |",
        "|---|" + "---:|" * (len(rankers) + 2),
    ]
    for name in ESTIMATORS:
        if name not in counts:
            continue
        c = counts[name]
        mine = [row for row in rows if row["estimator"] == name]
        error = float(np.mean([(row["value"] - row["truth"]) / row["truth"] for row in mine if row["truth"]]))
        cells = " | ".join(str(c[r]) for r in rankers)
        share = c["covered"] / c["checked"]
        lines.append(f"| {name} | {cells} | {c['covered']}/{c['checked']} ({share:.1%}) | {error:+.1%} |")
    return "\n".join(lines) + "\n"


def record_text(record: dict[str, Any]) -> str:
    """A coverage record as JSON text, one line per row of ``rows`` (diffable, compact)."""
    head = {key: value for key, value in record.items() if key != "rows"}
    rows = ",\n".join(json.dumps(row, separators=(",", ":")) for row in record["rows"])
    text = json.dumps(head, indent=1)
    return text[:-2] + ',\n "rows": [\n' + rows + "\n ]\n}\n"
