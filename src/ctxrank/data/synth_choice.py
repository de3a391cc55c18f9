"""Synthetic airline-itinerary choice sessions (SYNTHETIC data, for tests, demos and benchmarks).

The QILCM paper's user-choice task (and the Deep Choice Model's) uses airline booking sessions: one
session = the itineraries shown to a customer, the purchased one is the positive. The paper's data are
public (registry entry ``airline``: ``data_full_anonym.zip``, an anonymized version of the Deep Choice
Model's data) but not available here, and ctxrank does not know their file layout. This generator
imitates that shape so the choice models can be exercised end to end; nothing measured on it says
anything about real travellers.

Per session ``s`` (a route and a traveller):

* route: great-circle distance ``d_s`` (km, log-normal, ~300-9000), which sets the base flight time
  ``t_s = 0.6 + d_s / 800`` hours and the base fare ``f_s = 40 + 0.11 d_s`` (times a log-normal market
  factor): strong query-level shifts in the numeric features;
* ``n_s`` itineraries, uniform in ``[min_items, max_items]``: ``airline`` (8 carriers with their own fare
  levels and quality), ``cabin`` (economy / premium / business, 75/15/10 %), ``stops`` (0-2, more on long
  routes), ``dep_hour`` (0-23), ``duration`` (hours: ``t_s`` plus 35 % per stop plus layovers, noise) and
  ``price`` (``f_s`` x cabin factor 1 / 1.9 / 3.6 x 0.85 per stop x carrier level x noise);
* the traveller: a business (30 %) or leisure segment, and **taste coefficients drawn per session**
  (a mixed logit, McFadden & Train 2000): price sensitivity ``b_price`` on log price (log-normal,
  smaller for business), time sensitivity ``b_time`` on duration relative to ``t_s``, a stop penalty, a
  preferred departure hour with a session-specific weight on the circular distance to it, a cabin value
  (higher for business) and a loyalty bonus for one preferred carrier;
* utility ``V_sj`` from those, and exactly one choice drawn from ``softmax(V_s)`` (i.e. ``V + Gumbel``
  noise, the random-utility model).

:func:`make_choice_sessions` returns the table and the chooser's own probabilities ``softmax(V_s)``, the
ceiling reference: no model can beat the chooser's expected log-likelihood or, in expectation, its
P@1 (ranking by ``V``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ctxrank._checks import check_int, check_positive

AIRLINES = ("AA", "BA", "DL", "EK", "LH", "QR", "UA", "U2")
#: fare level and perceived quality (utility) per carrier; U2 is a low-cost carrier
_CARRIER_FARE = np.array([1.00, 1.05, 0.98, 1.15, 1.08, 1.12, 0.97, 0.62])
_CARRIER_QUALITY = np.array([0.0, 0.2, 0.1, 0.6, 0.3, 0.6, 0.0, -0.5])
CABINS = ("economy", "premium", "business")
_CABIN_SHARE = np.array([0.75, 0.15, 0.10])
_CABIN_FARE = np.array([1.0, 1.9, 3.6])
FEATURES = ("price", "duration", "stops", "dep_hour")
CATEGORICAL = ("airline", "cabin")


@dataclass
class ChoiceSessions:
    """``table``: one row per itinerary (``session``, ``item``, ``chosen`` 0/1, the numeric
    :data:`FEATURES` and the categorical :data:`CATEGORICAL` columns), grouped by session.
    ``chooser_prob``: float64 ``(N,)`` the chooser's probability of each row (sums to 1 per session)."""

    table: pd.DataFrame
    chooser_prob: np.ndarray

    def chooser_reference(self) -> dict[str, float]:
        """The chooser's mean log-likelihood of the observed choices and its expected P@1 / top-5 hit
        rate when ranking by its own probabilities (the ceiling for any model on this data)."""
        chosen = self.table["chosen"].to_numpy() == 1
        sess = self.table["session"].to_numpy()
        p = self.chooser_prob
        starts = np.flatnonzero(np.r_[True, sess[1:] != sess[:-1]])
        ends = np.r_[starts[1:], len(sess)]
        p1, p5 = [], []
        for a, b in zip(starts, ends, strict=True):  # loop over sessions (reporting only)
            order = np.argsort(-p[a:b], kind="stable")
            hit = chosen[a:b][order]
            p1.append(float(hit[0]))
            p5.append(float(hit[:5].any()))
        return {
            "log_likelihood": float(np.log(p[chosen]).mean()),
            "p@1": float(np.mean(p1)),
            "hit@5": float(np.mean(p5)),
            "expected_p@1": float(np.mean([p[a:b].max() for a, b in zip(starts, ends, strict=True)])),
        }


def make_choice_sessions(
    n_sessions: int = 1000,
    *,
    min_items: int = 10,
    max_items: int = 60,
    utility_scale: float = 1.5,
    seed: int = 0,
) -> ChoiceSessions:
    """Draw ``n_sessions`` synthetic itinerary-choice sessions (see the module docstring).

    ``utility_scale`` multiplies every utility (the inverse of the Gumbel noise's scale): larger values
    make choices more predictable (the chooser's P@1 is about 0.2 at 1.0 and 0.3 at 1.5 with the
    default session sizes).
    """
    _check_options(n_sessions, min_items, max_items, utility_scale)
    rng = np.random.default_rng(seed)
    n = rng.integers(min_items, max_items + 1, size=int(n_sessions))  # items per session, (S,)
    sess = np.repeat(np.arange(n.size), n)  # (N,)
    travel = _draw_sessions(rng, n.size)
    items = _draw_itineraries(rng, travel, sess)
    utility = utility_scale * _utility(travel, items, sess)
    starts = np.r_[0, np.cumsum(n)[:-1]]
    prob = _session_softmax(utility, sess, starts)
    chosen = _draw_choice(rng, prob, sess, starts, n)
    table = pd.DataFrame(
        {
            "session": np.char.add("s", sess.astype(str)),
            "item": np.arange(sess.size) - starts[sess],
            "chosen": chosen.astype(np.int64),
            "price": np.round(items["price"], 2),
            "duration": np.round(items["duration"], 2),
            "stops": items["stops"].astype(np.int64),
            "dep_hour": items["dep_hour"].astype(np.int64),
            "airline": np.asarray(AIRLINES)[items["airline"]],
            "cabin": np.asarray(CABINS)[items["cabin"]],
        }
    )
    return ChoiceSessions(table=table, chooser_prob=prob)


def _check_options(n_sessions: int, min_items: int, max_items: int, utility_scale: float) -> None:
    check_positive("utility_scale", utility_scale)
    for name, v in (("n_sessions", n_sessions), ("min_items", min_items), ("max_items", max_items)):
        check_int(name, v)
    if min_items < 2 or max_items < min_items:
        raise ValueError(f"need 2 <= min_items <= max_items, got {min_items}, {max_items}")


def _draw_sessions(rng: np.random.Generator, S: int) -> dict[str, np.ndarray]:
    """Session level, each ``(S,)``: the route (distance, base time and fare) and the traveller's tastes."""
    dist = np.exp(rng.normal(np.log(1500.0), 0.8, size=S)).clip(250, 12000)
    t = {"dist": dist, "base_time": 0.6 + dist / 800.0}
    t["base_fare"] = (40.0 + 0.11 * dist) * np.exp(rng.normal(0.0, 0.25, size=S))
    business = rng.random(S) < 0.3
    t["b_price"] = np.exp(rng.normal(np.where(business, 0.2, 1.0), 0.4))  # on log price
    t["b_time"] = np.exp(rng.normal(np.where(business, 0.6, -0.2), 0.5))  # on duration / base time
    t["b_stop"] = np.exp(rng.normal(-0.5, 0.5, size=S))
    t["pref_hour"] = rng.choice([7.0, 9.0, 13.0, 18.0, 21.0], size=S) + rng.normal(0, 1.5, size=S)
    t["b_hour"] = np.exp(rng.normal(-0.3, 0.6, size=S))
    t["b_cabin"] = np.where(business, 1.2, -0.6) + rng.normal(0, 0.5, size=S)
    t["fav_airline"] = rng.integers(0, len(AIRLINES), size=S)
    t["b_loyal"] = np.exp(rng.normal(-0.2, 0.7, size=S)) * (rng.random(S) < 0.6)
    return t


def _draw_itineraries(
    rng: np.random.Generator, travel: dict[str, np.ndarray], sess: np.ndarray
) -> dict[str, np.ndarray]:
    """Itinerary level, each ``(N,)``: carrier, cabin, stops, departure hour, duration and price."""
    N = sess.size
    airline = rng.integers(0, len(AIRLINES), size=N)
    cabin = rng.choice(len(CABINS), size=N, p=_CABIN_SHARE)
    long_haul = (travel["dist"][sess] > 3000).astype(float)
    stops = np.minimum(rng.poisson(0.4 + 0.6 * long_haul), 2)
    dep_hour = rng.integers(0, 24, size=N)
    layover = stops * rng.uniform(0.75, 4.0, size=N)
    duration = travel["base_time"][sess] * (1 + 0.35 * stops) * np.exp(rng.normal(0, 0.08, size=N)) + layover
    price = (
        travel["base_fare"][sess]
        * _CARRIER_FARE[airline]
        * _CABIN_FARE[cabin]
        * 0.85**stops
        * np.exp(rng.normal(0, 0.18, size=N))
    )
    return {
        "airline": airline,
        "cabin": cabin,
        "stops": stops,
        "dep_hour": dep_hour,
        "duration": duration,
        "price": price,
    }


def _utility(travel: dict[str, np.ndarray], items: dict[str, np.ndarray], sess: np.ndarray) -> np.ndarray:
    """The systematic utility ``V_sj`` of every itinerary, ``(N,)`` (before ``utility_scale``)."""
    t = {k: v[sess] for k, v in travel.items()}
    hour_gap = np.abs(items["dep_hour"] - t["pref_hour"]) % 24
    hour_gap = np.minimum(hour_gap, 24 - hour_gap) / 12.0  # circular distance in [0, 1]
    cabin, airline = items["cabin"], items["airline"]
    return (
        -t["b_price"] * np.log(items["price"] / t["base_fare"])
        - t["b_time"] * (items["duration"] / t["base_time"] - 1)
        - t["b_stop"] * items["stops"]
        - t["b_hour"] * 2.0 * hour_gap
        + t["b_cabin"] * (cabin > 0) * (0.5 + 0.5 * (cabin == 2))
        + _CARRIER_QUALITY[airline]
        + t["b_loyal"] * (airline == t["fav_airline"])
    )


def _session_softmax(utility: np.ndarray, sess: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``softmax(V_s)`` within each session, ``(N,)`` (stable: the session maximum is subtracted)."""
    v_max = np.maximum.reduceat(utility, starts)
    e = np.exp(utility - v_max[sess])
    return e / np.add.reduceat(e, starts)[sess]


def _draw_choice(
    rng: np.random.Generator, prob: np.ndarray, sess: np.ndarray, starts: np.ndarray, n: np.ndarray
) -> np.ndarray:
    """One chosen item per session, bool ``(N,)``: an inverse-CDF draw within each session, vectorized."""
    cum = np.cumsum(prob)
    offset = np.r_[0.0, cum[np.cumsum(n)[:-1] - 1]]  # cumulative mass before each session
    u = rng.random(n.size)
    within = cum - offset[sess]
    before = np.r_[0.0, within[:-1]]
    before[starts] = 0.0
    chosen = (before <= u[sess]) & (u[sess] < within)
    # float round-off can leave a session without a hit at u ~ 1: give it to its last item
    missing = np.flatnonzero(np.add.reduceat(chosen.astype(int), starts) == 0)
    chosen[starts[missing] + n[missing] - 1] = True
    return chosen
