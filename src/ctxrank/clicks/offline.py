"""Counterfactual (offline) evaluation of a new ranker from an interaction log.

The new ranker is given as one score per logged row; it re-ranks each session's shown items (ties
by :func:`ctxrank.data.ranking_data.order_by_score`'s rule). Its metric is

    V = E_sessions [ sum_d lambda(rank_new(d)) * rel(d) ],

``rel(d)`` the expected interaction of item d were it examined at position 1 (the click model's
relevance: a click is examination times relevance, examination at position k has probability p_k
relative to position 1), and ``lambda(r)`` a rank weight cut at ``k``:

* ``metric="clicks"``: ``lambda(r) = p_r`` for ``r <= k``: the expected clicks (interactions) in the
  new ranking's top k under the same examination curve, relative to the examination of position 1;
* ``metric="dcg"``: ``lambda(r) = 1 / log2(r + 1)`` for ``r <= k``: DCG@k of the relevance.

Estimators (Joachims, Swaminathan & Schnabel 2017, WSDM, "Unbiased Learning-to-Rank with Biased
Feedback": the IPS estimate of an additive ranking metric; Oosterhuis & de Rijke 2020, SIGIR,
"Policy-Aware Unbiased Learning to Rank for Top-k Rankings", for counterfactual evaluation from clicks):

* IPS: ``(1 / S) sum_s sum_d lambda(rank_new(d)) c_d w_d`` with ``w_d`` the (clipped) inverse
  propensity of the position d was shown at; unbiased for V unclipped.
* SNIPS: ``sum_s sum_d lambda(rank_new(d)) c_d w_d / sum_s sum_d c_d w_d``, the self-normalised ratio
  of Swaminathan & Joachims (2015), NeurIPS, "The Self-Normalized Estimator for Counterfactual
  Learning", with the inverse-propensity-weighted clicks as weights. It estimates the *normalised*
  metric ``V / E[sum_d rel(d)]`` (the rank weight the new ranking gives the relevance, on average:
  the "weighted" click metrics of Wang, Bendersky, Metzler & Najork 2016, SIGIR), in [0, max lambda];
  it trades a small bias for a lower variance and is 0 for a log without interactions.
* DR: ``(1 / S) sum_s sum_d lambda(rank_new(d)) [r_d + w_d (c_d - p_d r_d)]`` with a reward model
  ``r_d`` (an estimate of rel(d), e.g. ``RegressionEM.relevance``): the doubly robust estimator of
  Dudík, Langford & Li (2011), ICML, "Doubly Robust Policy Evaluation and Learning" (the direct
  method's reward plus the importance-weighted residual), with the position's propensity ``p_d`` as
  the treatment probability. Unclipped (``w_d = 1 / p_d``) it equals
  IPS exactly (each shown item's examination probability is known and positive); with clipped
  weights it corrects the clipped part by the reward model. :func:`click_reward` fits one on the log.

Intervals: percentile bootstrap over sessions (``scipy.stats.bootstrap``, paired, seeded); the
percentile method rather than BCa because BCa's jackknife costs S evaluations of S sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, special

from ctxrank.clicks.propensity import Propensities, _check_log, _check_options, session_bootstrap
from ctxrank.data.ranking_data import RankingData, order_by_score

__all__ = [
    "ESTIMATORS",
    "METRICS",
    "OfflineEstimate",
    "click_reward",
    "offline_estimates",
    "rank_weights",
    "session_terms",
]

METRICS = ("clicks", "dcg")
ESTIMATORS = ("ips", "snips", "dr")


@dataclass(frozen=True)
class OfflineEstimate:
    """One estimate of the new ranker's metric and its bootstrap interval over sessions."""

    estimator: str
    metric: str
    k: int
    value: float
    low: float
    high: float
    confidence: float
    sessions: int
    clip: float | None


def rank_weights(metric: str, k: int, propensities: Propensities, n_ranks: int) -> np.ndarray:
    """float64 (n_ranks,) ``lambda(r)`` for ranks r = 1..n_ranks (0 beyond ``k``; see the module)."""
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {list(METRICS)}, got {metric!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k: expected an integer >= 1, got {k!r}")
    ranks = np.arange(1, n_ranks + 1)
    top = ranks <= k
    if metric == "dcg":
        return np.where(top, 1.0 / np.log2(ranks + 1.0), 0.0)
    if min(k, n_ranks) > propensities.n_positions:
        raise ValueError(
            f"metric 'clicks' at k={k} needs the propensities of ranks 1..{min(k, n_ranks)}, "
            f"they cover 1..{propensities.n_positions}"
        )
    p = np.zeros(n_ranks)
    p[top] = np.asarray(propensities.values, dtype=np.float64)[: int(top.sum())]
    return p


def offline_estimates(
    log: RankingData,
    scores: Any,
    propensities: Propensities,
    *,
    metric: str = "clicks",
    k: int = 10,
    clip: float | None = None,
    reward: Any = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, OfflineEstimate]:
    """IPS, SNIPS and (given ``reward``) DR estimates of a new ranker's metric from a log.

    Args:
        log: the interaction log (labels = interactions, ``shown_positions`` 1-based).
        scores: (N,) the new ranker's score of each logged row.
        propensities: the examination curve of the log's positions (relative to position 1).
        metric, k: the metric (see the module) and its cut-off.
        clip: the largest inverse-propensity weight (None: unclipped).
        reward: (N,) the reward model's expected interaction of each row at position 1, for DR.

    Returns:
        ``{"ips": ..., "snips": ..., "dr": ...}`` (``"dr"`` only with a reward).

    Raises:
        ValueError: scores or reward of the wrong length or not finite, positions the propensities do
            not cover, an unknown metric, k < 1.
    """
    _check_options(n_resamples, confidence, seed)
    samples = session_terms(log, scores, propensities, metric=metric, k=k, clip=clip, reward=reward)
    n = log.n_queries

    def statistic(ips, mass, *dr):
        total = mass.sum(-1)
        snips = np.divide(ips.sum(-1), total, out=np.zeros_like(total), where=total > 0)
        return np.stack([ips.mean(-1), snips, *(d.mean(-1) for d in dr)])

    if all(np.ptp(a) == 0 for a in samples):  # one value per session everywhere: no spread to resample
        est = statistic(*samples)
        low = high = est
    else:
        est, low, high = session_bootstrap(
            samples, statistic, n_resamples=n_resamples, confidence=confidence, seed=seed
        )
    names = ESTIMATORS if reward is not None else ESTIMATORS[:2]
    return {
        name: OfflineEstimate(
            estimator=name,
            metric=metric,
            k=k,
            value=float(est[i]),
            low=float(min(low[i], est[i])),
            high=float(max(high[i], est[i])),
            confidence=confidence,
            sessions=n,
            clip=clip,
        )
        for i, name in enumerate(names)
    }


def session_terms(
    log: RankingData,
    scores: Any,
    propensities: Propensities,
    *,
    metric: str = "clicks",
    k: int = 10,
    clip: float | None = None,
    reward: Any = None,
) -> list[np.ndarray]:
    """The per-session terms of the estimators (module docstring), without an interval: float64 (S,)
    arrays ``[ips, mass]`` (and ``dr`` with a reward), ``ips[s] = sum_d lambda(rank_new(d)) c_d w_d``,
    ``mass[s] = sum_d c_d w_d``. IPS is ``ips.mean()``, SNIPS ``ips.sum() / mass.sum()``, DR
    ``dr.mean()``; sums over sessions, they add up across shards of a log. Arguments and errors as
    :func:`offline_estimates`'."""
    shown = _check_log(log, "offline_estimates")
    if not isinstance(propensities, Propensities):
        raise TypeError(f"propensities: expected a Propensities, got {type(propensities).__name__}")
    if not propensities.relative:
        raise ValueError("propensities: expected propensities relative to position 1 (relative=True)")
    s = _row_values(scores, log.n_items, "scores")
    lam = rank_weights(metric, k, propensities, int(log.query_lengths.max()))
    w = propensities.weights(shown, clip=clip)
    order = order_by_score(log.query_index, s, log.features)
    new_rank = np.empty(log.n_items, dtype=np.int64)
    new_rank[order] = np.arange(log.n_items) - np.repeat(log.query_offsets[:-1], log.query_lengths)
    gain = lam[new_rank]  # lambda(rank_new(d)) per row
    clicks = log.labels.astype(np.float64)
    session = log.query_index
    n = log.n_queries
    ips_s = np.bincount(session, weights=gain * clicks * w, minlength=n)
    mass_s = np.bincount(session, weights=clicks * w, minlength=n)
    samples = [ips_s, mass_s]
    if reward is not None:
        r = _row_values(reward, log.n_items, "reward")
        p = propensities.at(shown)
        samples.append(np.bincount(session, weights=gain * (r + w * (clicks - p * r)), minlength=n))
    return samples


def _row_values(values: Any, n: int, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name}: expected {n} numbers (one per logged row), got {arr.dtype} {arr.shape}")
    arr = arr.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name}: row {int(bad[0])} is {arr[bad[0]]}, expected a finite number")
    return arr


def click_reward(
    log: RankingData, propensities: Propensities, inputs: Any = None, *, l2: float = 1e-3
) -> np.ndarray:
    """float64 (N,) a reward model for DR: each row's expected interaction were it shown at position 1.

    ``rel(x) = m * sigmoid(b + x @ beta)`` (``m`` the log's largest interaction), fitted by maximum
    likelihood of the position-based model with the examination known: the interaction at position k,
    scaled to ``c / m`` in [0, 1], has mean ``p_k rel(x) / m`` (Bernoulli for clicks, the fractional
    logit of Papke & Wooldridge 1996 for graded interactions). This is the click model of Wang,
    Golbandi, Bendersky, Metzler & Najork (2018, WSDM, regression-EM) with ``theta_k`` fixed to the
    given propensities, so the likelihood is maximised directly (L-BFGS from the intercept-only fit;
    not convex in general: an unclicked row at ``p_k < 1`` adds a non-convex term) instead of by EM.

    Args:
        inputs: (N, F) the model's inputs (default: ``log.features``), standardised per column
            (a constant column is dropped); e.g. (N, 1) a ranker's scores to calibrate.
        l2: the ridge penalty on ``beta`` (not on ``b``), per row.

    Raises:
        ValueError: inputs of the wrong shape or not finite, a log without interactions.
    """
    shown = _check_log(log, "click_reward")
    x = np.asarray(log.features if inputs is None else inputs, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] != log.n_items:
        raise ValueError(
            f"inputs: expected ({log.n_items}, F) values (one row per logged row), got {x.shape}"
        )
    if not np.isfinite(x).all():
        raise ValueError("inputs: expected finite values")
    c = log.labels.astype(np.float64)
    top = float(c.max()) if c.size else 0.0
    if not top > 0:
        raise ValueError("click_reward: the log has no interaction: nothing to fit a reward to")
    y = c / top
    sd = x.std(axis=0)
    keep = sd > 0
    z_in = (x[:, keep] - x[:, keep].mean(axis=0)) / sd[keep]
    design = np.hstack([np.ones((x.shape[0], 1)), z_in])
    p = propensities.at(shown)
    n = float(x.shape[0])
    eps = 1e-12

    def loss(beta: np.ndarray) -> tuple[float, np.ndarray]:
        z = design @ beta
        sig = special.expit(z)
        q = np.clip(p * sig, eps, 1.0 - eps)
        nll = -(y * np.log(q) + (1.0 - y) * np.log1p(-q)).sum() / n
        # d nll / d z = (1 - sigmoid) (q - y) / (1 - q)
        grad_z = (1.0 - sig) * (q - y) / (1.0 - q) / n
        penalty = 0.5 * l2 * float(beta[1:] @ beta[1:])
        grad = design.T @ grad_z
        grad[1:] += l2 * beta[1:]
        return float(nll + penalty), grad

    start = np.zeros(design.shape[1])
    start[0] = special.logit(np.clip(y.mean() / max(float(p.mean()), eps), 1e-6, 1 - 1e-6))
    fit = optimize.minimize(loss, start, jac=True, method="L-BFGS-B")
    return top * special.expit(design @ fit.x)
