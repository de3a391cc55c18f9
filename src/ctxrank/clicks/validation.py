"""The validation objective of a ranker trained on an interaction log (early stopping, tuning).

On labelled data, early stopping and ``ctxrank tune`` maximise ``train.metric`` of the labels. On a
log the labels are clicks: their metric rewards a ranker for reproducing the logging ranker's order
(position bias), so selecting on it undoes the debiasing. On a log (``RankingData.shown_positions``
set) the objective is instead the **IPS estimate** of the ranker's DCG@k of the relevance (Joachims,
Swaminathan & Schnabel 2017, WSDM, "Unbiased Learning-to-Rank with Biased Feedback", eq. 5-6: the
inverse-propensity-weighted clicks of an additive ranking metric), from the run's propensities:
``(1 / S) sum_s sum_d c_d / p(k_d) * 1[r_d <= k] / log2(r_d + 1)``, ``r_d`` the item's rank under the
ranker, ``k_d`` the position it was shown at (:func:`ctxrank.clicks.offline.session_terms`).

* IPS and not SNIPS: IPS is unbiased for DCG@k (unclipped), which is what is asked of a tuned
  objective; SNIPS divides by ``sum c_d / p(k_d)``, which does not depend on the ranker, so on one log it
  selects the same epoch and trial as IPS and only rescales the number.
* DCG and not NDCG: NDCG divides by each session's ideal DCG of the unknown relevance, which clicks
  do not estimate; ``train.metric = "ndcg@k"`` or ``"dcg@k"`` therefore both validate on DCG@k
  (without ``@k``: the whole list). Other metrics have no such estimate here and are refused.
* The weights are clipped at ``train.propensity_clip`` (the run's bias/variance trade-off, as in
  training; None: unbiased).
* Propensities: ``train.debias = "ips"``'s (``train.propensity`` / ``train.propensity_eta``); with
  ``"dla"`` or ``"pal"`` the position tower's learned ``exp(t_k - t_1)`` of the epoch
  (:meth:`ctxrank.clicks.towers.PositionTower.propensities`); with ``"none"`` there are none, and the
  objective is the naive ``train.metric`` of the clicks, recorded as such.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ctxrank.clicks.weighting import DEBIAS, TOWER_METHODS, propensity_table
from ctxrank.data.ranking_data import RankingData
from ctxrank.metrics import parse_metric

if TYPE_CHECKING:  # the estimators (SciPy, scikit-learn) load only when a log is validated
    from ctxrank.clicks.propensity import Propensities

__all__ = ["ESTIMATED_METRICS", "LogObjective", "log_objective"]

#: ``train.metric`` names a log's validation can estimate (both as DCG@k of the relevance)
ESTIMATED_METRICS = ("ndcg", "dcg")


@dataclass(frozen=True)
class LogObjective:
    """How a ranker is validated on a log.

    Attributes:
        metric: the run's ``train.metric`` (e.g. ``"ndcg@10"``).
        estimator: ``"ips"`` (the IPS estimate of DCG@``k``) or ``"naive"`` (``metric`` of the clicks).
        k: the DCG cut-off (``"ips"``; None for ``"naive"``).
        source: where the propensities come from (``"ips"``), for :meth:`describe`.
        propensities: the given propensities; None when learned (set per epoch by
            :meth:`with_propensities`) or naive.
        clip: the largest inverse-propensity weight (None: unclipped).
    """

    metric: str
    estimator: str
    k: int | None = None
    source: str = ""
    propensities: Propensities | None = None
    clip: float | None = None

    @property
    def naive(self) -> bool:
        return self.estimator == "naive"

    @property
    def learned(self) -> bool:
        """The propensities are a position tower's, learned by the fit (none given)."""
        return not self.naive and self.propensities is None

    @property
    def name(self) -> str:
        """What the validation values measure, in a few words (``"IPS estimate of DCG@10"``,
        ``"ndcg@10 of the clicks of a log"``): how messages name them instead of ``train.metric``."""
        return f"{self.metric} of the clicks of a log" if self.naive else f"IPS estimate of DCG@{self.k}"

    def describe(self) -> str:
        """One line for the fit summary and the tuning study, e.g. ``"IPS estimate of DCG@10 on a click
        log (propensities (1/k)^1, weights clipped at 100)"``."""
        if self.naive:
            return f"{self.name} (naive: biased by the shown positions)"
        clip = "unclipped" if self.clip is None else f"weights clipped at {self.clip:g}"
        return f"{self.name} on a click log (propensities {self.source}, {clip})"

    def with_propensities(self, values: Sequence[float]) -> LogObjective:
        """This objective with learned propensities ``values`` (relative to position 1)."""
        from ctxrank.clicks.propensity import Propensities

        return dataclasses.replace(self, propensities=Propensities.given(values))

    def session_values(self, log: RankingData, scores: np.ndarray) -> np.ndarray:
        """float64 (S,) each session's IPS term; their mean is the estimate (their sum and count add
        up across shards of the log)."""
        if self.propensities is None:
            raise ValueError(f"session_values needs propensities; this objective is {self.describe()!r}")
        assert self.k is not None
        from ctxrank.clicks.offline import session_terms

        return session_terms(log, scores, self.propensities, metric="dcg", k=self.k, clip=self.clip)[0]

    def value(self, log: RankingData, scores: np.ndarray) -> float:
        """The estimate on the whole ``log`` (NaN for a log without sessions)."""
        per = self.session_values(log, scores)
        return float(per.mean()) if per.size else float("nan")


def log_objective(
    metric: str,
    valid: RankingData,
    *,
    debias: str,
    propensity: Sequence[float] = (),
    propensity_eta: float | None = None,
    clip: float | None = None,
    learned_positions: int | None = None,
) -> LogObjective | None:
    """The objective of validating on ``valid``: None for labelled data (no shown positions), else a
    :class:`LogObjective`, checked before any training.

    Args:
        metric: ``train.metric``.
        debias: ``train.debias`` (``"none"``: naive; ``"ips"``: ``propensity`` / ``propensity_eta``;
            ``"dla"`` / ``"pal"``: the tower's, learned for ``learned_positions`` positions).
        clip: ``train.propensity_clip``.

    Raises:
        ValueError: a metric without an IPS estimate here, validation positions the propensities (or
            the learned tower) do not cover, an unknown ``debias``.
    """
    if valid.shown_positions is None:
        return None
    from ctxrank.clicks.propensity import Propensities

    if debias == "none":
        return LogObjective(metric, "naive")
    base, k = parse_metric(metric)
    if base not in ESTIMATED_METRICS:
        raise ValueError(
            f"train.metric = {metric!r}: on a click log the validation metric is the IPS estimate of "
            f"DCG@k (train.debias = {debias!r}); expected one of {[f'{m}@K' for m in ESTIMATED_METRICS]}"
        )
    deepest = int(valid.shown_positions.max()) if valid.n_items else 1
    k = k if k is not None else (int(valid.query_lengths.max()) if valid.n_queries else 1)
    if debias == "ips":
        table = propensity_table(propensity, propensity_eta, deepest)
        source = f"(1/k)^{propensity_eta:g}" if propensity_eta is not None else "train.propensity"
        given = Propensities.given(table / table[0])
        return LogObjective(metric, "ips", k, source, given, clip)
    if debias in TOWER_METHODS:
        if learned_positions is None or deepest > learned_positions:
            raise ValueError(
                f"the validation log shows items at positions up to {deepest}, beyond the "
                f"{learned_positions} positions of the training log that train.debias = {debias!r} learns "
                "propensities for"
            )
        return LogObjective(metric, "ips", k, f"learned by the {debias} position tower", None, clip)
    raise ValueError(f"train.debias: expected one of {list(DEBIAS)}, got {debias!r}")
