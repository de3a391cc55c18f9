"""AdaRank: boosting single-feature rankers on a listwise IR measure.

Xu & Li, "AdaRank: A Boosting Algorithm for Information Retrieval", SIGIR 2007, Algorithm 1. With
``m`` training queries, weak rankers ``h_k(x) = m_k(x)`` (feature ``k`` after the stored min-max
scaling ``m``) and ``E(h, q) in [0, 1]`` the measure of the ranking of query ``q``'s items by ``h``:

1. ``P_1(i) = 1 / m``.
2. For ``t = 1, 2, ...``:

   * ``h_t = argmax_k sum_i P_t(i) E(h_k, q_i)`` (the weak ranker with the best weighted performance);
   * ``alpha_t = 1/2 ln( sum_i P_t(i) (1 + E(h_t, q_i)) / sum_i P_t(i) (1 - E(h_t, q_i)) )``;
   * ``f_t = sum_{s <= t} alpha_s h_s``;
   * ``P_{t+1}(i) = exp(-E(f_t, q_i)) / sum_j exp(-E(f_t, q_j))``.

``E`` is AP (``metric="map"``) or NDCG@K (``metric="ndcg@K"``), computed with
:func:`ctxrank.metrics.evaluate_queries` (standard convention: gain ``2^y - 1``, discount
``1/log2(1 + r)``, equal scores keep input order). The per-query performance of every single feature
is computed once, a ``(K, Q)`` matrix; each round evaluates only ``f_t``.

Decisions beyond the paper (all recorded in ``ctxrank.json``):

* **No immediate repeat.** The feature chosen in round ``t - 1`` is not a candidate in round ``t``.
  Without this rule the algorithm can stall: if ``h_t`` is chosen again, ``f_{t+1}`` may rank every
  query as ``f_t`` does (always so after round 1, when ``f_1`` is a multiple of ``h_1``), so ``P`` and
  the argmax do not change and every later round adds the same feature. RankLib's ``AdaRank`` also
  refuses consecutive selections, in a heavier way (``ciir.umass.edu.learning.boosting.AdaRank``,
  e.g. ``codelibs/ranklib``: with its default "enqueue" mode a feature chosen twice in a row is
  removed from the candidates and the previous round is rolled back; later passes put removed features
  back and drop a feature after ``maxSelCount = 5`` consecutive selections that leave the training
  score unchanged). RankLib also differs from Algorithm 1 in its weight update (multiplicative,
  ``P_{t+1}(i) ∝ P_t(i) exp(-alpha_t E(f_t, q_i))``) and stops when the training score improves by
  less than a tolerance; here Algorithm 1's update is used as written. With a single feature there is
  no candidate in round 2, so training stops after one round.
* **Degenerate alpha.** ``E`` lies in [0, 1], so the numerator is in [1, 2] and ``alpha_t >= 0``.
  When ``E(h_t, q_i) = 1`` on every query with weight (the weak ranker is perfect on the weighted
  training set), the denominator is 0 and ``alpha_t`` would be infinite; the denominator is floored at
  ``MIN_DENOMINATOR = 1e-6``, so ``alpha_t <= 1/2 ln(2 / 1e-6) ≈ 7.25`` (the feature dominates every
  earlier one, whose weights are typically below 1, without making ``f`` infinite).
* **Queries without relevant items.** Their ``E`` is the same for every ranker (``no_relevant``: 0
  by default, as in ctxrank's standard convention; 1; or ``"skip"``: such training queries are left
  out of Algorithm 1 and such validation queries out of the mean). They never change the argmax, but
  with ``E = 0`` they keep the largest weight in ``P`` and damp every ``alpha``.
* **Stopping and model selection.** At most ``n_rounds`` rounds. After every round the mean
  validation ``metric`` of ``f_t`` is computed (the training mean of ``E(f_t, q)`` when no
  validation split is given); the first round with the best value is kept, and training stops after
  ``patience`` rounds without a strict improvement. The returned model is ``f_{t*}``.
* **Ties among features.** The argmax takes the lowest feature index among equal weighted performances.

The score is ``w · m(x)`` with ``w_k = sum of the alpha_s of the rounds s <= t* that chose k``
(accumulated in round order, in float64), exactly the ``f_t`` evaluated during training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ctxrank._checks import check_int
from ctxrank._io import float_or_nan
from ctxrank.baselines import _linear as lin
from ctxrank.baselines.lambdamart import NotFittedError, save_meta
from ctxrank.data.ranking_data import RankingData

__all__ = ["MIN_DENOMINATOR", "AdaRank", "NotFittedError", "alpha"]

KIND = "adarank"
#: Floor of alpha's denominator sum_i P(i) (1 - E(h, q_i)) (see the module docstring).
MIN_DENOMINATOR = 1e-6


def alpha(weights: np.ndarray, performance: np.ndarray) -> float:
    """``1/2 ln( sum_i P(i) (1 + E_i) / max(sum_i P(i) (1 - E_i), MIN_DENOMINATOR) )`` (Algorithm 1)."""
    p = np.asarray(weights, dtype=np.float64)
    e = np.asarray(performance, dtype=np.float64)
    num = float(p @ (1.0 + e))
    den = float(p @ (1.0 - e))
    return 0.5 * math.log(num / max(den, MIN_DENOMINATOR))


def _softmax_neg(e: np.ndarray) -> np.ndarray:
    """``exp(-E_i) / sum_j exp(-E_j)``; E in [0, 1], so no overflow."""
    z = np.exp(-e)
    return z / z.sum()


class AdaRank(lin.LinearScorer):
    """AdaRank (Xu & Li 2007) with single-feature weak rankers; see the module docstring.

    Args:
        metric: the measure ``E``: ``"map"`` (AP) or ``"ndcg@K"`` (default ``"ndcg@10"``); also the
            validation metric.
        n_rounds: boosting rounds at most.
        patience: stop after this many rounds without a strict improvement of the selection metric
            (``None``: run ``n_rounds`` rounds, still keeping the best one).
        no_relevant: ``E`` of a query without relevant item: 0, 1 or "skip" (left out).
        num_threads: torch CPU threads for the metric computations during ``fit`` (set for the
            duration of ``fit`` and restored); ``None`` leaves torch's setting.

    Learned attributes: ``coef_`` float64 ``(F,)``, ``rounds_`` ``[(feature index, alpha), ...]``
    of the kept rounds, ``best_round_`` (1-based, = ``len(rounds_)``), ``rounds_run_``,
    ``best_score_`` (selection metric at ``best_round_``), ``selected_on_`` (``"valid"`` or
    ``"train"``), ``history_`` (per round: feature, alpha, train metric, valid metric or None),
    ``query_weights_`` (``P`` after the last kept round, over the training queries that are not
    skipped), ``scaler_``, ``n_features_in_``, ``feature_names_in_``, ``stop_reason_``.

    Only ``features`` are used; ``RankingData.categorical`` is ignored.
    """

    _PARAMS = ("metric", "n_rounds", "patience", "no_relevant", "num_threads")

    def __init__(
        self,
        *,
        metric: str = "ndcg@10",
        n_rounds: int = 500,
        patience: int | None = 50,
        no_relevant: float | str = 0.0,
        num_threads: int | None = 1,
    ) -> None:
        self.metric = lin.check_metric("metric", metric, allowed=("map", "ndcg"))
        self.n_rounds = check_int("n_rounds", n_rounds, 1)
        self.patience = check_int("patience", patience, 1, allow_none=True)
        self.no_relevant = lin.check_no_relevant(no_relevant)
        self.num_threads = check_int("num_threads", num_threads, 1, allow_none=True)

    @property
    def objective(self) -> str:
        """``"adarank-map"`` or ``"adarank-ndcg@K"`` (``RunConfig.loss_name``)."""
        return f"adarank-{self.metric}"

    # --------------------------------------------------------------- training
    def feature_performance(self, x: np.ndarray, data: RankingData) -> np.ndarray:
        """float64 ``(K, Q)``: ``E(h_k, q)`` for every feature ``k`` of the scaled ``x`` ``(N, K)``
        (NaN for skipped queries), one vectorized :func:`~ctxrank.metrics.evaluate_queries` per feature."""
        return np.stack(
            [lin.per_query(x[:, k], data, self.metric, self.no_relevant) for k in range(x.shape[1])]
        )

    def fit(self, train: RankingData, valid: RankingData | None = None) -> AdaRank:
        """Run Algorithm 1 on ``train``; select the round on ``valid`` (else on ``train``).

        Raises:
            TypeError: not RankingData.
            ValueError: different feature counts, or no training query left (all skipped).
        """
        lin.check_data(train, "train")
        if valid is not None:
            lin.check_data(valid, "valid")
        lin.check_same_features(train, valid)
        threads = None
        if self.num_threads is not None:
            threads = torch.get_num_threads()
            torch.set_num_threads(self.num_threads)
        try:
            self._fit(train, valid)
        finally:
            if threads is not None:
                torch.set_num_threads(threads)
        return self

    def _fit(self, train: RankingData, valid: RankingData | None) -> None:
        scaler = lin.fit_scaler(train)
        x = lin.scaled(scaler, train)  # (N, K)
        x_valid = lin.scaled(scaler, valid) if valid is not None else None
        n_features = x.shape[1]

        perf = self.feature_performance(x, train)  # (K, Q)
        kept = ~np.isnan(perf[0])  # queries in Algorithm 1 (NaN only under no_relevant="skip")
        if not kept.any():
            raise ValueError(
                f"train ({train.source or 'training split'}): no query has a relevant item, so AdaRank "
                f"with no_relevant='skip' has nothing to learn from"
            )
        perf = perf[:, kept]  # (K, m)
        m = perf.shape[1]
        weights = np.full(m, 1.0 / m)  # P_1, (m,)

        coef = np.zeros(n_features, dtype=np.float64)
        rounds: list[tuple[int, float]] = []
        history: list[dict[str, Any]] = []
        best = (-math.inf, 0, coef.copy(), weights.copy())  # (score, round, coef, P after it)
        previous = -1
        stop = "n_rounds"
        for t in range(1, self.n_rounds + 1):
            weighted = perf @ weights  # (K,) sum_i P_t(i) E(h_k, q_i)
            if previous >= 0:
                weighted[previous] = -math.inf  # no immediate repeat
            if not np.isfinite(weighted).any():
                stop = "no candidate feature (a single feature)"
                break
            k = int(np.argmax(weighted))  # first maximum: lowest index
            a = alpha(weights, perf[k])
            coef[k] += a
            rounds.append((k, a))
            previous = k

            f_train = x @ coef  # (N,) f_t
            e_f = lin.per_query(f_train, train, self.metric, self.no_relevant)[kept]  # (m,)
            weights = _softmax_neg(e_f)  # P_{t+1}
            train_score = float(e_f.mean())
            valid_score = None
            if x_valid is not None:
                valid_score = lin.mean_metric(x_valid @ coef, valid, self.metric, self.no_relevant)
            history.append({"feature": k, "alpha": a, "train": train_score, "valid": valid_score})
            score = valid_score if valid_score is not None else train_score
            if score > best[0]:
                best = (score, t, coef.copy(), weights.copy())
            elif self.patience is not None and t - best[1] >= self.patience:
                stop = "patience"
                break

        score, best_round, best_coef, best_weights = best
        self.scaler_ = scaler
        self.coef_ = best_coef
        self.rounds_ = rounds[:best_round]
        self.best_round_ = best_round
        self.rounds_run_ = len(rounds)
        self.best_score_ = float(score)
        self.selected_on_ = "valid" if valid is not None else "train"
        self.history_ = history
        self.query_weights_ = best_weights
        self.stop_reason_ = stop
        self.n_features_in_ = train.n_features
        self.feature_names_in_ = tuple(train.feature_names)

    def training_summary(self) -> dict[str, Any]:
        """What ``ctxrank train`` records: kept and run rounds, the selection metric, the features used."""
        self._check_fitted()
        return {
            "best_round": self.best_round_,
            "rounds_run": self.rounds_run_,
            "metric": self.metric,
            "selected_on": self.selected_on_,
            "best_valid_metric" if self.selected_on_ == "valid" else "best_train_metric": self.best_score_,
            "features_used": len({k for k, _ in self.rounds_}),
            "stop_reason": self.stop_reason_,
        }

    # ------------------------------------------------------------ persistence
    def save(
        self, directory: str | Path, *, run_config: Mapping[str, Any] | None = None, overwrite: bool = False
    ) -> Path:
        """Write ``ctxrank.json`` (``"kind": "adarank"``: parameters, scaling, the kept rounds and the
        weights as JSON numbers) and ``config.toml`` when ``run_config`` is given. JSON only, written
        atomically, into a new or empty directory (``overwrite``: any;
        :func:`ctxrank._modeldir.claim_model_dir`). Returns the directory."""
        self._check_fitted()
        meta = {
            "params": self.get_params(),
            "rounds": [[int(k), float(a)] for k, a in self.rounds_],
            "best_round": int(self.best_round_),
            "rounds_run": int(self.rounds_run_),
            "best_score": self.best_score_,
            "selected_on": self.selected_on_,
            "stop_reason": self.stop_reason_,
            "history": self.history_,
            "objective": self.objective,
            "min_denominator": MIN_DENOMINATOR,
            **self._linear_meta(),
        }
        return save_meta(directory, KIND, meta, run_config, overwrite)

    @classmethod
    def load(cls, directory: str | Path) -> AdaRank:
        """Load a model saved by :meth:`save` (reads ``ctxrank.json`` only; never unpickles).

        Raises:
            ValueError: not a ctxrank model directory, another kind of model, or metadata that is
                incomplete or inconsistent (the weights must be the sum of the rounds' alphas).
        """
        directory, meta, params, n = lin.read_kind(directory, KIND, "an AdaRank")
        try:
            lin.check_params(cls, params)
            model = cls(**params)
            rounds = [(int(k), float(a)) for k, a in meta["rounds"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{directory}: bad AdaRank metadata ({exc!r})") from None
        coef = lin.float_vector(directory, meta, "coef", n)
        summed = np.zeros(n, dtype=np.float64)
        for k, a in rounds:
            if not 0 <= k < n or not math.isfinite(a):
                raise ValueError(f"{directory}: bad AdaRank round ({k}, {a}) for {n} features")
            summed[k] += a
        if not np.array_equal(summed, coef):
            raise ValueError(f"{directory}: 'coef' is not the sum of the rounds' alphas")
        model.scaler_ = lin.load_scaler(directory, meta, n)
        model.coef_ = coef
        model.rounds_ = rounds
        model.best_round_ = len(rounds)
        model.rounds_run_ = int(meta.get("rounds_run") or len(rounds))
        model.selected_on_ = meta.get("selected_on")
        # strict JSON wrote NaN and -inf (no round kept) as null
        best = meta.get("best_score")
        model.best_score_ = float(best) if best is not None else (math.nan if rounds else -math.inf)
        model.history_ = [_history_record(r, model.selected_on_) for r in meta.get("history") or []]
        model.query_weights_ = None
        model.stop_reason_ = meta.get("stop_reason")
        model.n_features_in_ = n
        model.feature_names_in_ = tuple(str(s) for s in meta.get("feature_names") or ())
        return model


def _history_record(record: dict[str, Any], selected_on: str | None) -> dict[str, Any]:
    """A round of ``history_`` read back from ``ctxrank.json`` (``null`` -> NaN for the metrics; the
    valid metric stays None without validation)."""
    out = dict(record)
    out["train"] = float_or_nan(record.get("train"))
    if selected_on == "valid":
        out["valid"] = float_or_nan(record.get("valid"))
    return out
