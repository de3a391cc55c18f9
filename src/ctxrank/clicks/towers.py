"""Position towers trained with a ranker on a click log, and ``train.debias`` applied to a ranking loss.

:class:`Debias` turns any ranking loss ``loss_fn(scores, labels, mask, **options)`` of
``ctxrank.losses`` into its debiased version for one batch (:meth:`Debias.wrap`); the training step
passes that to the model's ``training_loss``, so every neural model (context models included) is
debiased without a change of its own: it still only scores items. The towers see the shown position of
each item at training only; a trained model scores without it (predict, export and serving take no
position).

* ``"ips"``: the labels weighted by clipped, self-normalised inverse propensities of given
  propensities (:mod:`ctxrank.clicks.weighting`).
* ``"dla"``: dual learning (Ai, Bi, Luo, Guo & Croft 2018, SIGIR, "Unbiased Learning to Rank with
  Unbiased Propensity Estimation", eq. 6-7 and Algorithm 1): a propensity tower (one logit ``t_k``
  per position ``k``, the paper's position-only propensity model) and the ranker are trained together,
  each weighted by the other. The ranker's clicks get the inverse propensity weight
  ``p_1 / p_k = exp(t_1 - t_k)`` (the softmax of the tower, relative to the first position shown),
  the tower's clicks the inverse relevance weight ``r_first / r_i = exp(s_first - s_i)`` (the softmax of
  the ranker's scores over the list, relative to the item shown first); both weights are constants
  (no gradient through them), clipped and self-normalised like IPS's, and the tower minimizes the
  softmax cross entropy (``listnet`` with ``label_transform="identity"``: the paper's loss). The
  ranker minimizes the run's loss. The optimized value is the sum of both.
* ``"pal"``: an additive position tower: a logit ``b_k`` per position added to the ranker's score at
  training, dropped at serving (the shallow tower of Zhao et al. 2019, RecSys, "Recommending What Video
  to Watch Next", section 4.3). Under a softmax loss, ``softmax(s + b)_i`` is proportional to
  ``exp(b_k) exp(s_i)``: examination times relevance, the factorisation of PAL (Guo, Yu, Wang, Wang,
  Liu & Zheng 2019, RecSys, "PAL: a position-bias aware learning framework for CTR prediction").
  The tower starts at 0 (no position effect).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ctxrank.clicks.weighting import DEBIAS, TOWER_METHODS, ips_weights, normalise_weights
from ctxrank.losses import listnet

__all__ = ["Debias", "PositionTower"]


class PositionTower(nn.Module):
    """A learned logit for each shown position ``1..P``: int64 ``(B, L)`` positions (0 at padding) ->
    float32 ``(B, L)`` logits (0 at padding). Starts at 0."""

    def __init__(self, n_positions: int) -> None:
        super().__init__()
        if isinstance(n_positions, bool) or not isinstance(n_positions, int) or n_positions < 1:
            raise ValueError(f"n_positions must be an int >= 1, got {n_positions!r}")
        self.logit = nn.Parameter(torch.zeros(n_positions))

    @property
    def n_positions(self) -> int:
        return int(self.logit.numel())

    def forward(self, shown_positions: torch.Tensor) -> torch.Tensor:
        if shown_positions.numel() and int(shown_positions.max()) > self.n_positions:
            raise ValueError(
                f"positions up to {int(shown_positions.max())} shown, but the position tower was built "
                f"for {self.n_positions} (the training log's deepest position)"
            )
        table = torch.cat([self.logit.new_zeros(1), self.logit])  # index 0: padding
        return table[shown_positions]

    def propensities(self) -> torch.Tensor:
        """float ``(P,)`` relative examination ``p_k / p_1 = exp(t_k - t_1)`` the tower has learned."""
        with torch.no_grad():
            return torch.exp(self.logit - self.logit[0])


def _shown_first(shown: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """int64 ``(B, 1)``: the column of the item shown first in each list (its smallest shown position)."""
    return torch.where(mask, shown.float(), math.inf).argmin(-1, keepdim=True)  # float: fast argmin


def _relative_to_first(
    values: torch.Tensor, first: torch.Tensor, mask: torch.Tensor, clip: float | None
) -> torch.Tensor:
    """``(B, L)`` ``exp(v_first - v_i)``: the inverse of item ``i``'s softmax share relative to the item
    shown first in its list (column ``first``, :func:`_shown_first`), computed in log space and capped
    at ``clip`` (``log`` of it before ``exp``: no overflow); 0 on padding."""
    v = values.detach().float()
    log_ratio = v.gather(-1, first) - v  # (B, L)
    top = math.log(clip) if clip is not None else 80.0  # exp(80) is finite in float32
    log_ratio = torch.where(mask, log_ratio, torch.zeros((), device=v.device)).clamp(max=top)
    return torch.exp(log_ratio)


class Debias(nn.Module):
    """``train.debias`` for one training run: the towers it learns and :meth:`wrap`.

    Args:
        method: one of :data:`ctxrank.clicks.weighting.DEBIAS` but ``"none"``.
        n_positions: the deepest shown position of the training log (the towers' size).
        propensity: float ``(n_positions,)`` examination probabilities (``"ips"`` only).
        clip: the largest inverse-propensity (or DLA inverse-relevance) weight; None: no cap.
    """

    def __init__(
        self,
        method: str,
        n_positions: int,
        *,
        propensity: torch.Tensor | None = None,
        clip: float | None = None,
    ) -> None:
        super().__init__()
        if method not in DEBIAS or method == "none":
            methods = [m for m in DEBIAS if m != "none"]
            raise ValueError(f"train.debias: expected one of {methods}, got {method!r}")
        if (method == "ips") != (propensity is not None):
            raise ValueError("propensity is given for train.debias = 'ips', and only for it")
        self.method, self.clip = method, clip
        self.tower = PositionTower(n_positions) if method in TOWER_METHODS else None
        given = None if propensity is None else propensity.float()
        self.register_buffer("propensity", given, persistent=False)

    def wrap(
        self, loss_fn: Callable[..., torch.Tensor], shown_positions: torch.Tensor | None
    ) -> Callable[..., torch.Tensor]:
        """``loss_fn`` debiased for a batch whose items were shown at ``shown_positions`` (int64
        ``(B, L)``, 0 at padding)."""
        if shown_positions is None:
            raise ValueError(
                f"train.debias = {self.method!r} needs the shown position of every item (a click log's "
                "position column, RankingData.shown_positions); this training batch has none"
            )
        shown, clip = shown_positions, self.clip

        def ips(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, **kw: Any) -> torch.Tensor:
            assert self.propensity is not None
            weights = ips_weights(shown, labels, mask, self.propensity, clip)
            return loss_fn(scores, labels, mask, weights=weights, **kw)

        def pal(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, **kw: Any) -> torch.Tensor:
            assert self.tower is not None
            bias = self.tower(shown)
            dtype = torch.promote_types(scores.dtype, bias.dtype)
            return loss_fn(scores.to(dtype) + bias.to(dtype), labels, mask, **kw)

        def dla(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, **kw: Any) -> torch.Tensor:
            assert self.tower is not None
            logits = self.tower(shown)  # (B, L)
            first = _shown_first(shown, mask)
            to_ranker = normalise_weights(_relative_to_first(logits, first, mask, clip), labels, mask, clip)
            to_tower = normalise_weights(_relative_to_first(scores, first, mask, clip), labels, mask, clip)
            ranker = loss_fn(scores, labels, mask, weights=to_ranker, **kw)
            tower = listnet(logits, labels.float(), mask, label_transform="identity", weights=to_tower)
            return ranker + tower

        return {"ips": ips, "pal": pal, "dla": dla}[self.method]
