"""Position propensities: the probability that a user examines each shown position, and their
estimators from an interaction log.

A log is a ``RankingData`` with ``shown_positions`` (1-based): one query = one logged session, its
labels = the interactions (an item counts as clicked where its label is > 0), ``group_ids`` = the
logged query id of each session, ``docids`` = the item ids. Every estimator is vectorised over
sessions and gives a bootstrap confidence interval over sessions (SciPy's ``scipy.stats.bootstrap``,
percentile method, seeded).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from ctxrank._checks import is_number
from ctxrank._propensity import capped_inverse, curve, is_clip
from ctxrank.data.ranking_data import RankingData

__all__ = [
    "METHODS",
    "Propensities",
    "RegressionEM",
    "from_harvesting",
    "from_randomized",
    "from_regression_em",
    "session_bootstrap",
]

METHODS = ("randomized", "harvesting", "regression_em", "given", "pbm")
_JSON_KEYS = ("method", "relative", "confidence", "sessions", "values", "lower", "upper")


@dataclass(frozen=True)
class Propensities:
    """Examination probabilities p_1..p_K of the shown positions, with confidence intervals.

    Attributes:
        values: K propensities; relative to position 1 (``values[0] == 1``) when ``relative``, else
            absolute examination probabilities in [0, 1].
        lower, upper: K bounds of the ``confidence`` interval of each value (equal to it when given).
        method: how they were obtained, one of :data:`METHODS`.
        sessions: the number of logged sessions the estimate used (0 when given).
        confidence: the level of the intervals, in (0, 1).
        relative: whether ``values`` are relative to position 1.
    """

    values: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    method: str
    sessions: int
    confidence: float = 0.95
    relative: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method: expected one of {list(METHODS)}, got {self.method!r}")
        k = len(self.values)
        if k == 0 or len(self.lower) != k or len(self.upper) != k:
            raise ValueError(
                f"values, lower and upper must have the same K >= 1 entries, got "
                f"{k}, {len(self.lower)}, {len(self.upper)}"
            )
        v, lo, hi = (np.asarray(a, dtype=np.float64) for a in (self.values, self.lower, self.upper))
        if not (np.isfinite(v).all() and np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise ValueError(f"propensities and their bounds must be finite, got {list(self.values)}")
        bad = np.flatnonzero((lo < 0) | (lo > v) | (v > hi))
        if bad.size:
            p = int(bad[0])
            raise ValueError(
                f"position {p + 1}: expected 0 <= lower <= value <= upper, got "
                f"{self.lower[p]}, {self.values[p]}, {self.upper[p]}"
            )
        if self.relative and v[0] != 1.0:
            raise ValueError(f"relative propensities must have p_1 = 1, got {self.values[0]}")
        if not self.relative and v.max() > 1.0:
            raise ValueError(f"absolute propensities must be <= 1, got {v.max()}")
        if isinstance(self.sessions, bool) or not isinstance(self.sessions, int) or self.sessions < 0:
            raise ValueError(f"sessions: expected an integer >= 0, got {self.sessions!r}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence: expected a level in (0, 1), got {self.confidence}")

    @property
    def n_positions(self) -> int:
        return len(self.values)

    def at(self, positions: Any) -> np.ndarray:
        """float64 (N,) the propensity of each 1-based position (an error names one outside 1..K)."""
        pos = np.asarray(positions)
        if pos.ndim != 1 or not np.issubdtype(pos.dtype, np.integer):
            raise TypeError(f"positions: expected a 1-D integer array, got {pos.dtype} {pos.shape}")
        out = np.flatnonzero((pos < 1) | (pos > self.n_positions))
        if out.size:
            r = int(out[0])
            raise ValueError(
                f"positions: row {r} was shown at position {int(pos[r])}, outside the 1..{self.n_positions} "
                f"the propensities cover"
            )
        return np.asarray(self.values, dtype=np.float64)[pos - 1]

    def weights(self, positions: Any, *, clip: float | None) -> np.ndarray:
        """float64 (N,) inverse propensities 1 / p of rows shown at 1-based ``positions``, at most
        ``clip`` (the largest weight, >= 1; None: unclipped, which refuses a position with p = 0)."""
        if clip is not None and not is_clip(clip):
            raise ValueError(f"clip: expected None or a finite maximum weight >= 1, got {clip!r}")
        p = self.at(positions)
        zero = np.flatnonzero(p == 0)
        if clip is None and zero.size:
            raise ValueError(
                f"position {int(np.asarray(positions)[zero[0]])} has propensity 0 (no click was "
                f"observed there): pass clip= to bound its weight"
            )
        return capped_inverse(p, clip)

    # -------------------------------------------------------------- given
    @classmethod
    def given(cls, values: Sequence[float], *, relative: bool = True) -> Propensities:
        """Known propensities (zero-width intervals)."""
        v = tuple(float(x) for x in values)
        return cls(values=v, lower=v, upper=v, method="given", sessions=0, relative=relative)

    @classmethod
    def pbm(cls, eta: float, n_positions: int) -> Propensities:
        """The position-based model's curve p_k = (1 / k) ** eta, k = 1..n_positions (Joachims,
        Swaminathan & Schnabel 2017, "Unbiased Learning-to-Rank with Biased Feedback", WSDM)."""
        if not is_number(eta) or not math.isfinite(eta) or eta < 0:
            raise ValueError(f"eta: expected a finite number >= 0, got {eta!r}")
        if isinstance(n_positions, bool) or not isinstance(n_positions, int) or n_positions < 1:
            raise ValueError(f"n_positions: expected an integer >= 1, got {n_positions!r}")
        v = tuple(float(x) for x in curve(None, eta, n_positions))
        return cls(values=v, lower=v, upper=v, method="pbm", sessions=0)

    # --------------------------------------------------------------- JSON
    def to_json(self) -> str:
        return json.dumps(
            {
                "method": self.method,
                "relative": self.relative,
                "confidence": self.confidence,
                "sessions": self.sessions,
                "values": list(self.values),
                "lower": list(self.lower),
                "upper": list(self.upper),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Propensities:
        """The value written by :meth:`to_json`; any other key, a missing key or a wrong type is an
        error naming it."""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"propensities JSON: not valid JSON ({e})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"propensities JSON: expected an object, got {type(obj).__name__}")
        unknown = sorted(set(obj) - set(_JSON_KEYS))
        missing = [k for k in _JSON_KEYS if k not in obj]
        if unknown or missing:
            raise ValueError(
                f"propensities JSON: unknown keys {unknown}, missing keys {missing}; "
                f"expected {list(_JSON_KEYS)}"
            )
        for key in ("values", "lower", "upper"):
            seq = obj[key]
            if not isinstance(seq, list) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in seq
            ):
                raise ValueError(f"propensities JSON: {key} must be a list of numbers, got {seq!r}")
        if not isinstance(obj["relative"], bool):
            raise ValueError(f"propensities JSON: relative must be true or false, got {obj['relative']!r}")
        if isinstance(obj["confidence"], bool) or not isinstance(obj["confidence"], int | float):
            raise ValueError(f"propensities JSON: confidence must be a number, got {obj['confidence']!r}")
        return cls(
            values=tuple(float(x) for x in obj["values"]),
            lower=tuple(float(x) for x in obj["lower"]),
            upper=tuple(float(x) for x in obj["upper"]),
            method=obj["method"],
            sessions=obj["sessions"],
            confidence=float(obj["confidence"]),
            relative=obj["relative"],
        )


# ------------------------------------------------------------------- helpers
def _check_log(log: Any, what: str) -> np.ndarray:
    """int64 (N,) the shown positions of a log, after checking it is one."""
    if not isinstance(log, RankingData):
        raise TypeError(f"{what}: expected a RankingData log, got {type(log).__name__}")
    if log.shown_positions is None:
        raise ValueError(
            f"{what}: the data has no shown positions (RankingData.from_arrays(..., position=...)): "
            f"it is not an interaction log"
        )
    return log.shown_positions.astype(np.int64)


def _check_options(n_resamples: int, confidence: float, seed: int) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 2:
        raise ValueError(f"n_resamples: expected an integer >= 2, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: expected a level in (0, 1), got {confidence!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an integer, got {seed!r}")


def _n_positions(n_positions: int | None, shown: np.ndarray) -> int:
    if n_positions is None:
        return int(shown.max()) if shown.size else 1
    if isinstance(n_positions, bool) or not isinstance(n_positions, int) or n_positions < 1:
        raise ValueError(f"n_positions: expected None or an integer >= 1, got {n_positions!r}")
    return n_positions


def _per_session(
    session: np.ndarray, column: np.ndarray, value: np.ndarray, shape: tuple[int, int]
) -> np.ndarray:
    """float64 ``shape`` = (S, C): the sum of ``value`` of the rows of each (session, column)."""
    flat = np.bincount(session * shape[1] + column, weights=value, minlength=shape[0] * shape[1])
    return flat.reshape(shape)


def session_bootstrap(
    samples: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray],
    *,
    n_resamples: int,
    confidence: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(estimate, low, high)``: a statistic of per-session arrays and its percentile bootstrap
    interval over sessions (``scipy.stats.bootstrap``, paired resampling of sessions, seeded).

    Args:
        samples: arrays of shape (S, ...) with one row per session.
        statistic: ``f(*samples)`` of arrays shaped (..., S) (sessions last) reducing the last axis;
            it returns one value or a vector (C,) leading the batch axis.
    """
    samples = [np.asarray(s, dtype=np.float64) for s in samples]
    _check_two_sessions(samples[0].shape[0])
    moved = [np.moveaxis(s, 0, -1) for s in samples]
    estimate = np.asarray(statistic(*moved), dtype=np.float64)
    n = samples[0].shape[0]
    width = int(np.prod(samples[0].shape[1:], dtype=np.int64)) * len(samples)
    res = stats.bootstrap(
        samples,
        lambda *a, axis=-1: statistic(*a),
        paired=True,
        vectorized=True,
        axis=0,
        n_resamples=n_resamples,
        batch=max(1, 4_000_000 // max(1, n * width)),
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return estimate, np.asarray(res.confidence_interval.low), np.asarray(res.confidence_interval.high)


def _check_two_sessions(n: int) -> None:
    if n < 2:
        raise ValueError(f"a bootstrap interval over sessions needs at least 2 sessions, got {n}")


def _relative_ctr(clicks: np.ndarray, shown: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """(K, ...) click rate at each position k over the rate at position 1 in the sessions whose lists
    reach k (inputs (K, ..., S); ``depth``: each session's deepest shown position, the same in every
    row k, so that the bootstrap resamples it with the others).
    Over all sessions, position 1's rate would mix in the sessions of lists too short to show k, whose
    compared items need not be as relevant: on a swap log of 3- and 6-item lists whose short lists' top
    items are the more relevant, position 4 came out at a tenth of its examination
    (``tests/clicks/test_propensity.py``)."""
    k = clicks.shape[0]
    reach = depth >= np.arange(1, k + 1, dtype=np.float64).reshape((k,) + (1,) * (depth.ndim - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        first = (clicks[0] * reach).sum(-1) / (shown[0] * reach).sum(-1)
        return clicks.sum(-1) / shown.sum(-1) / first


def _finish(estimate, low, high, method: str, sessions: int, confidence: float) -> Propensities:
    bad = np.flatnonzero(~(np.isfinite(low) & np.isfinite(high)))
    if bad.size:
        raise ValueError(
            f"{method}: too few clicks for a finite {confidence:.0%} interval at positions "
            f"{(bad + 1).tolist()}; log more sessions"
        )
    estimate = np.asarray(estimate, dtype=np.float64)
    low, high = np.minimum(low, estimate), np.maximum(high, estimate)
    return Propensities(
        values=tuple(float(x) for x in estimate),
        lower=tuple(float(x) for x in np.maximum(low, 0.0)),
        upper=tuple(float(x) for x in high),
        method=method,
        sessions=sessions,
        confidence=confidence,
    )


# ------------------------------------------------------------ randomised
def from_randomized(
    log: RankingData,
    *,
    original_positions: Any = None,
    n_positions: int | None = None,
    min_sessions: int = 30,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Propensities:
    """Propensities from randomised sessions (swap interventions).

    Joachims, Swaminathan & Schnabel (2017), "Unbiased Learning-to-Rank with Biased Feedback", WSDM:
    the swap intervention puts the logging ranker's top item at a random position k; since that item's
    relevance does not depend on k, ``p_k / p_1 = CTR(top item shown at k) / CTR(top item shown at 1)``
    (the click-through-rate ratio of their swap experiment), position 1's rate taken over the sessions
    whose lists reach k (lists of several lengths). The interval is a bootstrap over sessions.

    Args:
        log: the randomised sessions only (labels > 0 = clicked).
        original_positions: (N,) the 1-based position the logging ranker gave each row before the
            randomisation: only rows it put first are compared. None: every shown list was shuffled
            uniformly (every item's position is random), so every row is compared.
        n_positions: K (None: the largest compared position shown).
        min_sessions: the fewest sessions that must show a compared item at each position 1..K.

    Raises:
        ValueError: naming each position shown in fewer than ``min_sessions`` sessions, or with no
            click at position 1.
    """
    shown = _check_log(log, "from_randomized")
    _check_options(n_resamples, confidence, seed)
    if isinstance(min_sessions, bool) or not isinstance(min_sessions, int) or min_sessions < 1:
        raise ValueError(f"min_sessions: expected an integer >= 1, got {min_sessions!r}")
    compared = np.ones(log.n_items, dtype=bool)
    if original_positions is not None:
        orig = np.asarray(original_positions)
        if orig.shape != (log.n_items,) or not np.issubdtype(orig.dtype, np.integer):
            raise ValueError(
                f"original_positions: expected {log.n_items} integer positions, got {orig.dtype} {orig.shape}"
            )
        compared = orig == 1
    k = _n_positions(n_positions, shown[compared])
    compared &= shown <= k
    session = log.query_index[compared]
    col = shown[compared] - 1
    clicked = (log.labels[compared] > 0).astype(np.float64)
    clicks = _per_session(session, col, clicked, (log.n_queries, k))
    counts = _per_session(session, col, np.ones_like(clicked), (log.n_queries, k))
    depth = np.maximum.reduceat(shown, log.query_offsets[:-1]).astype(np.float64)  # each session's deepest
    used = counts.sum(1) > 0
    clicks, counts, depth = clicks[used], counts[used], np.repeat(depth[used, None], k, axis=1)
    per_position = (counts > 0).sum(0)
    few = np.flatnonzero(per_position < min_sessions)
    if few.size:
        detail = ", ".join(f"position {p + 1}: {int(per_position[p])}" for p in few)
        raise ValueError(
            f"from_randomized: too few randomised sessions showing a compared item ({detail}); "
            f"need min_sessions={min_sessions} at each position 1..{k}"
        )
    if clicks[:, 0].sum() == 0:
        raise ValueError(
            "from_randomized: no click at position 1 among the compared items: nothing to compare with"
        )
    est, lo, hi = session_bootstrap(
        (clicks, counts, depth), _relative_ctr, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    return _finish(est, lo, hi, "randomized", int(used.sum()), confidence)


# ------------------------------------------------------------ harvesting
def _pairwise_log_fit(c_pairs: np.ndarray, n_pairs: np.ndarray) -> np.ndarray:
    """(K, ...) propensities relative to position 1 from pairwise weighted clicks.

    ``c_pairs`` (K, K, ...): ``c[k, k']`` the weighted clicks at k of the pairs shown at both k and k';
    ``n_pairs`` the same without the weights (raw click counts). Each pair with clicks on both sides
    gives ``log p_k - log p_k' = log c[k, k'] - log c[k', k]``, weighted by the inverse delta-method
    variance ``1 / (1 / n[k, k'] + 1 / n[k', k])``; the weighted least-squares solution with
    ``log p_1 = 0`` is a graph-Laplacian system. A position with no click in any pair gets 0.
    """
    c = np.moveaxis(c_pairs, (0, 1), (-2, -1))
    n = np.moveaxis(n_pairs, (0, 1), (-2, -1))
    nt = np.swapaxes(n, -1, -2)
    both = (c > 0) & (np.swapaxes(c, -1, -2) > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(both, 1.0 / (1.0 / np.where(both, n, 1) + 1.0 / np.where(both, nt, 1)), 0.0)
        y = np.where(
            both, np.log(np.where(both, c, 1)) - np.log(np.where(both, np.swapaxes(c, -1, -2), 1)), 0.0
        )
    lap = -w + np.eye(w.shape[-1]) * w.sum(-1)[..., None]
    rhs = (w * y).sum(-1)
    theta = np.linalg.pinv(lap[..., 1:, 1:]) @ rhs[..., 1:, None]
    logp = np.concatenate([np.zeros((*theta.shape[:-2], 1)), theta[..., 0]], axis=-1)
    clicked = c.sum(-1) > 0
    p = np.where(clicked, np.exp(logp), 0.0)
    p[..., 0] = 1.0
    return np.moveaxis(p, -1, 0)


def from_harvesting(
    log: RankingData,
    rankers: Any,
    *,
    n_positions: int | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Propensities:
    """Propensities by intervention harvesting across two or more logging rankers.

    Agarwal, Zaitsev, Wang, Li, Najork & Joachims (2019), "Estimating Position Bias without Intrusive
    Interventions", WSDM. A query-item pair (q, d) that rankers placed at positions k and k' is in the
    interventional set S(k, k'). With n_i the sessions of ranker i and pi_i(k | q, d) the share of
    ranker i's sessions of q that showed d at k, each click on (q, d) at k is weighted by
    ``1 / w(q, d, k)``, ``w(q, d, k) = sum_i n_i pi_i(k | q, d)``, which gives every pair the same
    exposure at both positions; the weighted clicks ``c(k; k, k')`` over S(k, k') then estimate
    ``p_k r(k, k')`` and ``c(k'; k, k')`` estimate ``p_k' r(k, k')`` with the same relevance mass,
    so ``p_k / p_k' = c(k; k, k') / c(k'; k, k')`` (their weighted click counts). The ratios of all
    pairs are combined, as in their AllPairs estimator, though by weighted least squares in log space
    (:func:`_pairwise_log_fit`) rather than by their likelihood. Interval: bootstrap over sessions
    (the weights w held at the full log's values).

    Args:
        log: the sessions of every ranker; ``group_ids`` the logged query ids, ``docids`` the items.
        rankers: (S,) the logging ranker of each session (ints or strings), two or more distinct.

    Raises:
        ValueError: fewer than two rankers, no query ids or item ids, a position in no interventional
            pair with clicks (named).
    """
    shown = _check_log(log, "from_harvesting")
    _check_options(n_resamples, confidence, seed)
    if log.group_ids is None or log.docids is None:
        raise ValueError(
            "from_harvesting: the log needs the logged query id of each session (group_ids) and the "
            "item ids (docids): harvesting compares the same query-item pair across rankers"
        )
    ranker = np.asarray(rankers)
    if ranker.shape != (log.n_queries,):
        raise ValueError(
            f"rankers: expected one ranker id per session ({log.n_queries}), got shape {ranker.shape}"
        )
    names, ranker_code = np.unique(ranker, return_inverse=True)
    if names.size < 2:
        raise ValueError(f"from_harvesting: needs two or more logging rankers, got {names.tolist()}")
    k = _n_positions(n_positions, shown)
    keep = shown <= k
    session = log.query_index[keep]
    col = shown[keep] - 1
    clicked = (log.labels[keep] > 0).astype(np.float64)
    query = np.unique(log.group_ids, return_inverse=True)[1][session]
    pair = np.unique(
        np.stack([query, np.unique(log.docids, return_inverse=True)[1][keep]]), axis=1, return_inverse=True
    )[1].ravel()
    rk = ranker_code[session]
    n_ranker = np.bincount(ranker_code, minlength=names.size).astype(np.float64)
    # sessions of ranker i for query q, and of (q, d) shown at k by ranker i
    sess_qi = np.unique(np.stack([query, rk, session]), axis=1)
    qi_count = np.zeros((query.max() + 1, names.size))
    np.add.at(qi_count, (sess_qi[0], sess_qi[1]), 1.0)
    n_pairs = int(pair.max()) + 1
    m = np.zeros((n_pairs, names.size, k))
    np.add.at(m, (pair, rk, col), 1.0)
    pair_query = np.zeros(n_pairs, dtype=np.int64)
    pair_query[pair] = query
    share = m / np.maximum(qi_count[pair_query][:, :, None], 1.0)
    w = (n_ranker[None, :, None] * share).sum(1)  # (P, K)
    present = w > 0
    other = present[pair].copy()  # (N', K): the positions k' forming S(k, k') with each row's pair
    other[np.arange(col.size), col] = False
    rows, partner = np.nonzero(other)
    index = col[rows] * k + partner
    weighted = clicked[rows] / w[pair[rows], col[rows]]
    c_s = _per_session(session[rows], index, weighted, (log.n_queries, k * k))
    n_s = _per_session(session[rows], index, clicked[rows], (log.n_queries, k * k))
    in_pairs = np.bincount(col[rows], minlength=k) > 0
    clicked_pairs = (n_s.sum(0).reshape(k, k) > 0) & (n_s.sum(0).reshape(k, k).T > 0)
    lonely = np.flatnonzero(~in_pairs)
    if lonely.size:
        raise ValueError(
            f"from_harvesting: positions {(lonely + 1).tolist()} hold no query-item pair that another "
            f"ranker showed elsewhere: no intervention to harvest there"
        )
    reach = _reachable(clicked_pairs)
    cut = np.flatnonzero(~reach & (n_s.sum(0).reshape(k, k).sum(1) > 0))
    if cut.size:
        raise ValueError(
            f"from_harvesting: positions {(cut + 1).tolist()} are linked to position 1 by no chain of "
            f"interventional pairs with clicks on both sides: their propensity is not identified"
        )
    used = np.bincount(session[rows], minlength=log.n_queries) > 0

    def statistic(c, n):
        shape = (k, k, *c.shape[1:-1])
        return _pairwise_log_fit(c.sum(-1).reshape(shape), n.sum(-1).reshape(shape))

    est, lo, hi = session_bootstrap(
        (c_s, n_s), statistic, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    return _finish(est, lo, hi, "harvesting", int(used.sum()), confidence)


def _reachable(adjacent: np.ndarray) -> np.ndarray:
    """bool (K,) the positions connected to position 1 through pairs in ``adjacent`` (K, K)."""
    reach = np.zeros(adjacent.shape[0], dtype=bool)
    reach[0] = True
    for _ in range(adjacent.shape[0]):
        nxt = reach | adjacent[reach].any(0)
        if (nxt == reach).all():
            break
        reach = nxt
    return reach


# --------------------------------------------------------- regression-EM
@dataclass(frozen=True)
class RegressionEM:
    """The result of :func:`from_regression_em`.

    Attributes:
        propensities: the examination curve relative to position 1.
        relevance: float64 (N,) each logged row's click probability were it shown at position 1
            (``theta_1 * gamma``), a reward model for the doubly robust estimator.
        model: the fitted relevance classifier (reads ``log.features``).
        iterations: the EM iterations run.
    """

    propensities: Propensities
    relevance: np.ndarray = field(repr=False)
    model: Any = field(repr=False)
    iterations: int = 0


def _em(x, c, col, k, row_weight, theta, model, max_iter, tol):
    """Regression-EM from ``theta`` (K,) on rows weighted by ``row_weight``:
    ``(theta, gamma, iterations)``."""
    weight_k = np.bincount(col, weights=row_weight, minlength=k)
    xx = np.concatenate([x, x])
    yy = np.concatenate([np.ones(c.size), np.zeros(c.size)])
    gamma = np.full(c.size, 0.5) if not hasattr(model, "classes_") else model.predict_proba(x)[:, 1]
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007
        th = theta[col]
        denom = np.maximum(1.0 - th * gamma, 1e-12)
        seen_irrelevant = np.where(c > 0, 0.0, th * (1.0 - gamma) / denom)
        relevant = np.where(c > 0, 1.0, (1.0 - th) * gamma / denom)
        new_theta = np.bincount(col, weights=row_weight * (c + seen_irrelevant), minlength=k) / np.maximum(
            weight_k, 1e-12
        )
        model.fit(xx, yy, sample_weight=np.concatenate([relevant, 1.0 - relevant]) * np.tile(row_weight, 2))
        gamma = np.clip(model.predict_proba(x)[:, 1], 1e-6, 1 - 1e-6)
        done = np.abs(new_theta - theta).max() < tol
        theta = new_theta
        if done:
            break
    return theta, gamma, iterations


def from_regression_em(
    log: RankingData,
    *,
    estimator: Any = None,
    n_positions: int | None = None,
    max_iter: int = 100,
    tol: float = 1e-4,
    n_resamples: int = 100,
    confidence: float = 0.95,
    seed: int = 0,
) -> RegressionEM:
    """Propensities and relevance by regression-EM.

    Wang, Golbandi, Bendersky, Metzler & Najork (2018), "Position Bias Estimation for Unbiased
    Learning to Rank in Personal Search", WSDM. Click model ``P(c = 1 | d, k) = theta_k gamma(d)``.
    E-step (their posteriors of examination E and relevance R given a click c):
    ``P(E = 1, R = 0 | c = 0) = theta (1 - gamma) / (1 - theta gamma)``,
    ``P(E = 0, R = 1 | c = 0) = (1 - theta) gamma / (1 - theta gamma)``, both 1 for the clicked part.
    M-step: ``theta_k`` = the mean over rows shown at k of ``c + (1 - c) P(E = 1, R = 0 | c = 0)``;
    ``gamma`` = a classifier regressed on the features with the posterior relevance as target (their
    regression step; here the expected labels as sample weights instead of sampled labels, which
    makes the fit deterministic). The interval is a bootstrap over sessions (``scipy.stats.bootstrap``,
    percentile): each resample reruns the EM, warm-started from the full log's fit, on the sessions
    drawn (as row weights), so it includes the regression's own uncertainty.

    Args:
        estimator: a scikit-learn classifier with ``sample_weight`` and ``predict_proba`` (cloned;
            None: ``LogisticRegression(warm_start=True)``: each M-step's fit, and each resample's EM,
            starts from the previous coefficients, which the next fit moves only a little; about ten
            times faster than fitting from zero, the same fixed point within the solver's tolerance).
            A classifier of your own is refitted as it is (give it ``warm_start=True`` if it has one).
        max_iter, tol: EM stops after ``max_iter`` iterations or when no theta moves by ``tol``.
        n_resamples: bootstrap resamples, each an EM run (the cost grows with it).
    """
    shown = _check_log(log, "from_regression_em")
    _check_options(n_resamples, confidence, seed)
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter: expected an integer >= 1, got {max_iter!r}")
    if not tol > 0:
        raise ValueError(f"tol: expected a number > 0, got {tol!r}")
    k = _n_positions(n_positions, shown)
    keep = shown <= k
    col = shown[keep] - 1
    x = log.features[keep]
    c = (log.labels[keep] > 0).astype(np.float64)
    if c.sum() == 0:
        raise ValueError("from_regression_em: the log has no click: nothing to estimate from")
    empty = np.flatnonzero(np.bincount(col, minlength=k) == 0)
    if empty.size:
        raise ValueError(f"from_regression_em: no logged row at positions {(empty + 1).tolist()}")
    model = clone(LogisticRegression(warm_start=True) if estimator is None else estimator)
    theta, _, iterations = _em(x, c, col, k, np.ones(c.size), np.full(k, 0.5), model, max_iter, tol)
    if theta[0] <= 0:
        raise ValueError(
            "from_regression_em: the position-1 examination converged to 0: no curve relative to it"
        )
    session = log.query_index[keep]
    n_sessions = log.n_queries
    _check_two_sessions(np.unique(session).size)

    def refit(drawn: np.ndarray) -> np.ndarray:
        row_weight = np.bincount(drawn.astype(np.int64), minlength=n_sessions)[session].astype(np.float64)
        th, _, _ = _em(x, c, col, k, row_weight, theta.copy(), copy.deepcopy(model), max_iter, tol)
        return th / th[0] if th[0] > 0 else np.full(k, np.nan)

    rng = np.random.default_rng(seed)
    res = stats.bootstrap(
        (np.unique(session).astype(np.float64),),
        refit,
        vectorized=False,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        rng=rng,
    )
    props = _finish(
        theta / theta[0],
        np.asarray(res.confidence_interval.low),
        np.asarray(res.confidence_interval.high),
        "regression_em",
        int(np.unique(session).size),
        confidence,
    )
    relevance = theta[0] * model.predict_proba(log.features)[:, 1]
    return RegressionEM(propensities=props, relevance=relevance, model=model, iterations=iterations)
