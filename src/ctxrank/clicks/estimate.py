"""Propensities estimated from the training log itself: ``train.propensity = "estimate:randomized"`` or
``"estimate:regression-em"`` (:data:`ctxrank.clicks.weighting.ESTIMATES`), for ``train.debias = "ips"``.

Before any fit, :func:`estimate_propensities` estimates the examination curve ``p_k / p_1`` of the
training log with its bootstrap confidence intervals over sessions (:mod:`ctxrank.clicks.propensity`):

* ``randomized``: the click-through-rate ratios of randomised sessions (Joachims, Swaminathan &
  Schnabel 2017, "Unbiased Learning-to-Rank with Biased Feedback", WSDM; :func:`from_randomized`
  without original positions). Every session's shown list must have been shuffled uniformly, so that an
  item's relevance does not depend on its position: a simulated log says how it was randomised (its
  ``info["simulation"]``) and is refused unless its whole shown list was shuffled (``shuffle_top`` with
  ``shuffle_n`` at least its deepest position); a log read from a file cannot say, and is taken to be
  one (estimate the randomised sessions of a mixed log apart: ``ctxrank clicks propensity``).
* ``regression-em``: a position-based click model fitted to the features (Wang, Golbandi, Bendersky,
  Metzler & Najork 2018, "Position Bias Estimation for Unbiased Learning to Rank in Personal Search",
  WSDM; :func:`from_regression_em`), which needs no randomisation.

:func:`training_curve` turns the estimate into the per-position values the IPS weights read.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ctxrank.clicks.propensity import Propensities, from_randomized, from_regression_em
from ctxrank.data.ranking_data import RankingData

__all__ = ["estimate_propensities", "training_curve"]

#: estimates of this process, by the log's digest, method and seed (an experiment's models and a
#: study's trials estimate on the same log): the most recent few
_CACHE: dict[tuple[str, str, int, int | None], Propensities] = {}
_CACHE_SIZE = 8


def _digest(log: RankingData) -> str:
    h = hashlib.sha256()
    for a in (log.features, log.labels, log.query_offsets, log.shown_positions):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _check_randomized(log: RankingData) -> None:
    """Refuse a simulated log whose shown lists were not shuffled whole (module docstring)."""
    settings = log.info.get("simulation")
    if not isinstance(settings, dict):
        return  # a log read from a file: the option states it was shuffled
    randomize, n = settings.get("randomize"), settings.get("shuffle_n")
    deepest = int(log.shown_positions.max()) if log.n_items else 1
    if randomize != "shuffle_top":
        raise ValueError(
            f"train.propensity = 'estimate:randomized' compares the clicks of positions whose items were "
            f"shuffled uniformly, but this log was simulated with randomize = {randomize!r}"
            + (
                " (a swap moves only the logging ranker's top item, and the log does not say which row it "
                "was; its truth file's original_position does: estimate with `ctxrank clicks propensity "
                "--method randomized --original-position-col` and give --propensity FILE)"
                if randomize in ("swap", "swap_pair")
                else ""
            )
            + ": simulate it with randomize = 'shuffle_top', or use 'estimate:regression-em'"
        )
    if n is not None and deepest > n:
        raise ValueError(
            f"train.propensity = 'estimate:randomized': the log's lists were shuffled in their top {n} only "
            f"(shuffle_n = {n}) but show positions up to {deepest}, which were not randomised: set "
            f"shuffle_n >= {deepest}, or use 'estimate:regression-em'"
        )


def estimate_propensities(
    log: Any, method: str, *, seed: int, n_resamples: int | None = None
) -> Propensities:
    """The examination curve of the training ``log`` (positions 1..its deepest) estimated by ``method``
    (``"randomized"`` or ``"regression-em"``), with bootstrap intervals (seeded by ``seed``;
    ``n_resamples`` None: the estimator's default, 1000 resamples for ``randomized``, 100 EM runs for
    ``regression-em``).

    Raises:
        ValueError: ``log`` is not an in-memory interaction log, a randomised estimate of a log that
            was not shuffled (module docstring), or what the estimator refuses (too few sessions or
            clicks at a position, named).
    """
    what = f"train.propensity = 'estimate:{method}'"
    if not isinstance(log, RankingData):
        raise ValueError(
            f"{what} estimates from the training log in memory, not from shards read in pieces: estimate "
            "with `ctxrank clicks propensity LOG --method ... --out FILE` and give --propensity FILE"
        )
    if log.shown_positions is None:
        raise ValueError(
            f"{what} estimates from a click log: the training data need the shown position of every "
            "item (a log's position column); these have none"
        )
    key = (_digest(log), method, seed, n_resamples)
    if key in _CACHE:
        return _CACHE[key]
    options: dict[str, Any] = {"seed": seed}
    if n_resamples is not None:
        options["n_resamples"] = n_resamples
    try:
        if method == "randomized":
            _check_randomized(log)
            made = from_randomized(log, **options)
        elif method == "regression-em":
            made = from_regression_em(log, **options).propensities
        else:
            raise ValueError(f"method: expected 'randomized' or 'regression-em', got {method!r}")
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(what) else f"{what}: {text}") from None
    _CACHE[key] = made
    while len(_CACHE) > _CACHE_SIZE:
        del _CACHE[next(iter(_CACHE))]
    return made


def training_curve(estimate: Propensities, clip: float | None) -> tuple[float, ...]:
    """The per-position values the IPS weights read (``train.propensity``, in ``(0, 1]``): the estimate
    capped at 1 (a position examined as often as the first gets weight 1) and, with ``clip``, at least
    ``1 / clip`` (the weight the clip gives it anyway).

    Raises:
        ValueError: an estimate of 0 (no click seen there) without ``clip`` (its weight would be
            infinite), naming the position.
    """
    values = np.minimum(np.asarray(estimate.values, dtype=np.float64), 1.0)
    if clip is None:
        zero = np.flatnonzero(values <= 0)
        if zero.size:
            raise ValueError(
                f"the estimated propensity of position {int(zero[0]) + 1} is 0 (no click there): set "
                "train.propensity_clip to bound its weight, or log more sessions"
            )
    else:
        values = np.maximum(values, 1.0 / clip)
    return tuple(float(v) for v in values)
