"""The arithmetic of position propensities and inverse-propensity (IPS) weights, in NumPy: one module for
LambdaMART's per-item weights (``ctxrank.baselines.lambdamart``), ``train.debias`` and the estimators of
``ctxrank.clicks`` (which imports LambdaMART, so neither could hold it for the other).

The position-based model (Craswell et al. 2008; Richardson et al. 2007) explains a click as examination
times relevance, ``P(c_i = 1) = p(k_i) r_i`` with ``k_i`` the position item ``i`` was shown at and
``p(k)`` the examination probability of position ``k`` (its *propensity*); weighting a click by
``1 / p(k_i)`` makes it an unbiased estimate of the relevance (Joachims, Swaminathan & Schnabel 2017,
WSDM, "Unbiased Learning-to-Rank with Biased Feedback", eq. 5). Clipping caps the weight at ``clip``
(section 5 there; Strehl et al. 2010): a small bias for a bounded variance.

The checks here are predicates: each option's own message (``train.propensity``, LambdaMART's
``propensity``) stays with the option.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxrank._checks import is_number

__all__ = ["capped_inverse", "curve", "is_clip", "is_eta", "is_probability", "pairwise_item_weights"]


def is_probability(p: Any) -> bool:
    """A propensity: a number (not a bool) in ``(0, 1]``."""
    return is_number(p) and 0 < p <= 1


def is_eta(eta: Any) -> bool:
    """An exponent of the position-based curve ``(1 / k)^eta``: a finite number ``> 0``."""
    return is_number(eta) and math.isfinite(eta) and eta > 0


def is_clip(clip: Any) -> bool:
    """A cap on the weight ``1 / p``: a finite number ``>= 1``."""
    return is_number(clip) and math.isfinite(clip) and clip >= 1


def curve(values: Sequence[float] | np.ndarray | None, eta: float | None, n_positions: int) -> np.ndarray:
    """float64 ``(P,)`` the examination probabilities of positions ``1..P``: ``values`` as given (when
    non-empty), else the position-based model's ``(1 / k)^eta`` for ``k = 1..n_positions``."""
    if values is not None and len(values):
        return np.asarray(values, dtype=np.float64)
    if eta is None:
        raise ValueError("a propensity curve needs its values or eta")
    return (1.0 / np.arange(1, n_positions + 1, dtype=np.float64)) ** eta


def capped_inverse(p: np.ndarray, clip: float | None) -> np.ndarray:
    """float64, the shape of ``p``: ``min(1 / p, clip)`` (``clip`` None: ``1 / p``; ``p = 0`` weighs
    ``clip``, or inf unclipped)."""
    p = np.asarray(p, dtype=np.float64)
    inverse = np.divide(1.0, p, out=np.full(p.shape, np.inf), where=p > 0)
    return inverse if clip is None else np.minimum(inverse, float(clip))


def pairwise_item_weights(inverse: np.ndarray, interacted: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """float64 ``(N,)`` per-item IPS weights for a pairwise objective whose item gradient sums its pairs
    (LightGBM's lambdarank multiplies each item's gradient by its weight), mean 1.

    The propensity-weighted pairwise estimator (Joachims et al. 2017, eq. 5 and its pairwise form of
    Propensity SVM-Rank; Wang, Bendersky, Metzler & Najork 2016, SIGIR, "Learning to Rank with Selection
    Bias in Personal Search") weighs each pair (interacted item i, other item j) by ``1 / p(k_i)``. Here an
    interacted item weighs its ``inverse`` (its gradient sums its own pairs: exact), an item without
    interaction the mean ``inverse`` of its session's interacted items (exact when a session has one
    interaction, or its interactions share a propensity; otherwise an approximation), an item of a
    session without interaction 1 (it has no pairs); then all are scaled to mean 1 (the trees' Newton
    steps do not change under a common factor).

    Args:
        inverse: float64 ``(N,)`` each item's (capped) ``1 / p`` (:func:`capped_inverse`).
        interacted: bool ``(N,)`` label ``> 0``.
        lengths: int ``(S,)`` the sessions' item counts (consecutive rows), summing to ``N``.
    """
    n = lengths.size
    session = np.repeat(np.arange(n), lengths)
    n_interacted = np.bincount(session, weights=interacted, minlength=n)
    total = np.bincount(session, weights=np.where(interacted, inverse, 0.0), minlength=n)
    per_session = np.where(n_interacted > 0, total / np.maximum(n_interacted, 1), 1.0)
    weights = np.where(interacted, inverse, per_session[session])
    return weights / weights.mean() if weights.size else weights
