"""Inverse-propensity weights of the clicks of a log, and the checks of the given propensities.

The position-based model (Craswell et al. 2008; Richardson et al. 2007) explains a click as examination
times relevance, ``P(c_i = 1) = p(k_i) r_i`` with ``k_i`` the position item ``i`` was shown at and
``p(k)`` the examination probability of position ``k`` (its *propensity*). Weighting each click by
``1 / p(k_i)`` makes it an unbiased estimate of the relevance, ``E[c_i / p(k_i)] = r_i``: inverse
propensity scoring (IPS) for learning to rank (Wang, Bendersky, Metzler & Najork 2016, SIGIR, "Learning
to Rank with Selection Bias in Personal Search", eq. 4; Joachims, Swaminathan & Schnabel 2017, WSDM,
"Unbiased Learning-to-Rank with Biased Feedback", eq. 5). :func:`ips_weights` computes, per batch:

1. ``v_i = min(1 / p(k_i), clip)``: **clipping** caps a weight at ``clip`` (equivalently, every
   propensity below ``1 / clip`` counts as ``1 / clip``), trading a small bias for bounded variance
   (Joachims et al. 2017, section 5; Strehl et al. 2010).
2. ``w_i = v_i * n / sum_{clicked j} v_j``, over the ``n`` clicked items (label ``> 0``) of the whole
   **batch**: **self-normalisation** (SNIPS: Swaminathan & Joachims 2015, NeurIPS, "The
   Self-Normalized Estimator for Counterfactual Learning"), dividing by the weights' sum instead of the
   number of clicks. The mean weight of a click is 1, so the loss keeps the scale of naive training (the
   same learning rate works); the batch, not the list, is the unit, because a list has typically one
   click, and normalising within it would cancel its weight. With ``p(k) <= 1``, ``v >= 1`` and a
   normalised weight is at most ``min(clip, n)``.

The losses multiply each list's value by the mean weight ``m`` of its clicks and its labels by ``w / m``
(``ctxrank.losses``, "Weights": the per-click weighted form of Ai et al. 2018), so only the weights of
clicked items matter; the weights of the others are computed the same way. The batch self-normalisation
stays right with that form: a loss is proportional to the scale of the weights,
and on a batch of one-click lists the ``"mean"`` reduction is exactly the self-normalised
estimate ``sum_q v_q L_q / sum_q v_q`` of the lists' losses ``L_q`` (``v_q``: the capped inverse
propensity of list ``q``'s click).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ctxrank._propensity import curve, is_clip, is_eta, is_probability

__all__ = [
    "DEBIAS",
    "ESTIMATES",
    "TOWER_METHODS",
    "check_propensity",
    "estimate_method",
    "ips_weights",
    "normalise_weights",
    "propensity_table",
]

#: ``train.debias``: ``"none"`` (naive training on the clicks), ``"ips"`` (given propensities),
#: ``"dla"`` (a propensity tower learned jointly), ``"pal"`` (an additive position tower)
DEBIAS: tuple[str, ...] = ("none", "ips", "dla", "pal")
#: the ``train.debias`` values that learn a position tower (as deep as the training log's deepest position)
TOWER_METHODS: tuple[str, ...] = ("dla", "pal")
#: ``train.propensity`` values that estimate the propensities from the training log before training
#: (``ctxrank.clicks.estimate``): by randomised sessions or by regression-EM, as
#: ``ctxrank clicks propensity --method`` names them
ESTIMATES: tuple[str, ...] = ("estimate:randomized", "estimate:regression-em")


def estimate_method(propensity: object) -> str | None:
    """The estimator named by ``train.propensity`` (``"randomized"`` / ``"regression-em"``), None for
    given values; a text starting with ``estimate:`` that names no estimator is an error listing them."""
    if not isinstance(propensity, str) or not propensity.startswith("estimate:"):
        return None
    if propensity not in ESTIMATES:
        hint = (
            " (harvesting needs each session's logging ranker: estimate with `ctxrank clicks propensity "
            "--method harvesting --ranker-col COL --out FILE`, then give the FILE)"
            if propensity == "estimate:harvesting"
            else ""
        )
        raise ValueError(f"train.propensity: expected one of {list(ESTIMATES)}, got {propensity!r}{hint}")
    return propensity.removeprefix("estimate:")


def check_propensity(values: Sequence[float], eta: float | None, clip: float | None) -> None:
    """Validate ``train.propensity`` (per-position values in ``(0, 1]``), ``train.propensity_eta``
    (``> 0``, finite) and ``train.propensity_clip`` (``>= 1``, finite, or None); errors name them. Python
    numbers only (a NumPy float32 is refused): a run config is written as TOML. ``values`` may instead be
    one of :data:`ESTIMATES` (estimated from the training log)."""
    estimated = estimate_method(values) is not None
    if not estimated and not isinstance(values, (tuple, list)):
        raise TypeError(f"train.propensity must be a list of numbers, got {type(values).__name__}")
    for k, p in enumerate(() if estimated else values, 1):
        if not (_python_number(p) and is_probability(p)):
            raise ValueError(
                f"train.propensity: the examination probability of position {k} must be a number in "
                f"(0, 1], got {p!r}"
            )
    if eta is not None and not (_python_number(eta) and is_eta(eta)):
        raise ValueError(f"train.propensity_eta must be a finite number > 0 or None, got {eta!r}")
    if values and eta is not None:
        raise ValueError("give train.propensity (per-position values) or train.propensity_eta, not both")
    if clip is not None and not (_python_number(clip) and is_clip(clip)):
        raise ValueError(f"train.propensity_clip must be a finite number >= 1 or None, got {clip!r}")


def _python_number(x: object) -> bool:
    return isinstance(x, (int, float))


def propensity_table(values: Sequence[float], eta: float | None, max_position: int) -> np.ndarray:
    """float64 ``(P,)`` examination probabilities of positions ``1..P`` (``P = max_position``): the given
    ``values`` (an error when the log shows items beyond them), or ``(1 / k)^eta``
    (:func:`ctxrank._propensity.curve`).

    The seam of propensities estimated from a log (``ctxrank.clicks.propensity``): such an estimate is
    passed here as ``values``."""
    if estimate_method(values) is not None:  # ctxrank.training.run resolves it before any fit
        raise ValueError(
            f"train.propensity = {values!r} is estimated from a training log: no log was given to estimate "
            "it from"
        )
    if values:
        if max_position > len(values):
            raise ValueError(
                f"train.propensity gives {len(values)} positions, but the log shows items at positions up "
                f"to {max_position}: give one value per position"
            )
    elif eta is None:
        raise ValueError("propensities need train.propensity (per-position values) or train.propensity_eta")
    return curve(values, eta, max_position)


def normalise_weights(
    weights: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, clip: float | None
) -> torch.Tensor:
    """``(B, L)``: ``weights`` capped at ``clip``, then self-normalised so the clicked items (label
    ``> 0``) of the batch have mean weight 1 (module docstring, steps 1-2); 0 on padding. A batch
    without a click keeps the capped weights (they multiply zero labels)."""
    w = weights if clip is None else weights.clamp(max=clip)
    w = torch.where(mask, w, torch.zeros((), dtype=w.dtype, device=w.device))
    clicked = mask & (labels > 0)
    total = torch.where(clicked, w, torch.zeros((), dtype=w.dtype, device=w.device)).sum()
    n = clicked.sum().to(w.dtype)
    scale = torch.where(total > 0, n / total.clamp(min=torch.finfo(w.dtype).tiny), torch.ones_like(total))
    return w * scale


def ips_weights(
    shown_positions: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    propensity: torch.Tensor,
    clip: float | None,
) -> torch.Tensor:
    """float32 ``(B, L)`` clipped, self-normalised inverse-propensity weights (module docstring).

    Args:
        shown_positions: int64 ``(B, L)`` 1-based shown positions (0 at padding).
        labels: ``(B, L)`` clicks (or graded interactions), ``>= 0``.
        mask: bool ``(B, L)``, True = real item.
        propensity: float ``(P,)`` examination probabilities of positions ``1..P``, in ``(0, 1]``.
        clip: the largest weight ``1 / p`` (None: no cap).
    """
    if bool((shown_positions > propensity.numel()).any()):  # padding holds 0: no mask needed
        raise ValueError(
            f"a batch shows items at positions up to {int(shown_positions[mask].max())}, beyond the "
            f"{propensity.numel()} propensities of train.propensity"
        )
    index = (shown_positions - 1).clamp(min=0)  # padding reads position 1; masked below
    inverse = 1.0 / propensity.to(device=labels.device, dtype=torch.float32)[index]  # (B, L)
    return normalise_weights(inverse, labels, mask, clip)
