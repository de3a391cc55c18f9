"""The ARSM gradient estimator for categorical relevance labels (ARSM-L2R Algorithm 1, eq. 5-7).

ARSM-L2R (Dadaneh, Boluki, Zhou, Qian) models the relevance label of item j as a categorical variable
``z_j ~ Cat(softmax(phi_j))`` over ``C`` levels and minimizes ``E[loss(z, y)]`` for a loss that need not
be differentiable (negative NDCG@k by default). Augment-REINFORCE-Swap-Merge (Yin, Yue, Zhou, ICML
2019) estimates ``d E / d phi`` without bias from one Dirichlet draw per item:

1. ``pi_j ~ Dir(1_C)``; ``z_j = argmin_k (ln pi_jk - phi_jk)`` (an exact sample of ``Cat(softmax(phi_j))``).
2. For every pair ``k < c`` the pseudo-action ``z^{c<->k}``: the same argmin after swapping entries ``c``
   and ``k`` of every ``pi_j`` of the list (one swap shared by all items, as in eq. 6).
3. The loss matrix ``L`` (``C x C``, symmetric): ``L_cc = loss(z, y)``, ``L_ck = L_kc = loss(z^{c<->k}, y)``.
4. ``g_jc = sum_k (L_ck - mean_m L_mk) (1/C - pi_jk)``, the estimate of ``d E / d phi_jc`` (eq. 6).
5. Gradients reach the network through the surrogate ``sum_jc g_jc phi_jc`` (eq. 7).

Everything is vectorized over the lists of a batch and over the ``C(C-1)/2`` swaps: the swapped argmins
come from each item's three smallest values of ``ln pi - phi`` (a swap of ``c`` and ``k`` only changes
those two entries, so the minimum over the rest is the first of the three smallest not in ``{c, k}``),
and the loss is evaluated once on the ``(B * S, L)`` stack of pseudo-action label vectors. With
``dedupe=True`` (exact) swaps that change no item's argmin reuse ``loss(z)`` instead of being
evaluated.

Losses are callables ``(z, y, mask) -> (B,)`` where ``z`` are the sampled levels ``0..C-1`` as float
scores (ties broken by input position, as everywhere in :mod:`ctxrank.metrics`). With ``C = 20`` levels
a list of more than 20 items always has ties, so the tie rule is part of the objective: ``ties="random"``
(the default of :func:`arsm_estimate` and :func:`arsm_surrogate`) evaluates every action of a draw on
the lists' items in one uniformly random order per list (drawn from the same generator as the Dirichlet
draws, shared by the sampled action and its pseudo-actions), so equal levels are ordered at random and
the expected loss does not depend on the order of the items in the file; ``ties="position"`` keeps the
input order (file order rewarded wherever it correlates with the labels). ``ARSM_LOSSES``
holds the built-in ones: ``ndcg`` (negative truncated NDCG@k, the paper's), ``ap`` (negative average
precision) and ``err`` (negative expected reciprocal rank); they also evaluate many actions of the same
lists at once (``rows``), the fast path the estimator uses.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ctxrank import metrics

ArsmLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

__all__ = [
    "ARSM_LOSSES",
    "ARSM_TIES",
    "ArsmEstimate",
    "MetricLoss",
    "NegativeNDCG",
    "arsm_estimate",
    "arsm_surrogate",
    "get_arsm_loss",
    "pseudo_actions",
    "reinforce_estimate",
    "swap_pairs",
]


class MetricLoss:
    """``-metric(z, y)`` for a :mod:`ctxrank.metrics` function (standard convention, no relevant item = 0).

    ``loss(z, y, mask) -> (B,)``; ``loss.rows(z, lists, y, mask)`` evaluates many actions of the same
    lists at once: ``z`` ``(R, L)`` actions, ``lists`` ``(R,)`` the list of each, ``y``/``mask`` ``(B, L)``.
    """

    def __init__(self, metric: str, k: int | None) -> None:
        self.metric, self.k = metric, k

    def __call__(self, z: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return -getattr(metrics, self.metric)(z, y, mask, k=self.k, reduction="none")

    def rows(self, z: torch.Tensor, lists: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self(z, y[lists], mask[lists])

    def __repr__(self) -> str:
        return f"-{self.metric}@{self.k}" if self.k else f"-{self.metric}"


class NegativeNDCG(MetricLoss):
    """``-NDCG@k`` (the ARSM-L2R paper's loss), with a fast :meth:`rows`: the ideal DCG and gains are
    computed once per list, and only the top ``k`` of each action are selected (``topk`` on a tie-free
    integer key ``z * L + (L - 1 - position)``, i.e. ties between equal levels broken by input position,
    exactly as :func:`ctxrank.metrics.ndcg` does). Equal to ``-metrics.ndcg`` (``gain="exp2"``, standard
    convention, no relevant item = 0); the tests check it."""

    def __init__(self, k: int | None = 10) -> None:
        super().__init__("ndcg", k)

    def rows(self, z: torch.Tensor, lists: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        L = z.shape[-1]
        kk = L if self.k is None else min(self.k, L)
        dtype = _score_dtype(y)
        zero = torch.zeros((), dtype=dtype, device=y.device)
        gains = torch.where(mask, torch.expm1(y.to(dtype) * math.log(2.0)), zero)  # (B, L)
        disc = 1.0 / torch.log2(torch.arange(2, kk + 2, device=y.device, dtype=dtype))  # (kk,)
        idcg = (torch.topk(gains, kk, dim=-1).values * disc).sum(-1)  # (B,)
        pos = torch.arange(L - 1, -1, -1, device=z.device)
        key = torch.where(mask[lists], z.long() * L + pos, -1)  # (R, L), unique within a row
        top_key, top = torch.topk(key, kk, dim=-1)  # descending
        g = torch.where(top_key >= 0, gains[lists[:, None], top], zero)  # (R, kk)
        dcg = (g * disc).sum(-1)
        den = idcg[lists]
        return -torch.where(den > 0, dcg / torch.where(den > 0, den, 1.0), zero)


#: how equal sampled levels are ordered when the loss is evaluated (see the module docstring)
ARSM_TIES: tuple[str, ...] = ("random", "position")

#: name -> factory ``(k) -> loss``; the paper optimizes ``ndcg``.
ARSM_LOSSES: dict[str, Callable[..., MetricLoss]] = {
    "ndcg": NegativeNDCG,
    "ap": functools.partial(MetricLoss, "average_precision"),
    "err": functools.partial(MetricLoss, "err"),
}


def get_arsm_loss(name: str, k: int | None = 10) -> MetricLoss:
    """The built-in non-differentiable loss ``name`` at cutoff ``k`` (None = whole list)."""
    if name not in ARSM_LOSSES:
        raise ValueError(f"unknown ARSM loss {name!r}; valid: {', '.join(sorted(ARSM_LOSSES))}")
    return ARSM_LOSSES[name](k=k)


@functools.lru_cache(maxsize=16)
def swap_pairs(n_levels: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The ``S = C(C-1)/2`` swaps ``(c, k)`` with ``k < c``: two int64 ``(S,)`` tensors ``c`` and ``k``."""
    c, k = torch.tril_indices(n_levels, n_levels, offset=-1, device=device)
    return c, k


def pseudo_actions(log_pi: torch.Tensor, phi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampled action and every swapped pseudo-action (Algorithm 1, lines 3 and 6).

    Args:
        log_pi: ``(B, L, C)`` log Dirichlet draws ``ln pi``.
        phi: ``(B, L, C)`` logits.

    Returns:
        ``z`` int64 ``(B, L)`` = argmin_k (ln pi_jk - phi_jk), and ``z_swap`` int64 ``(B, S, L)``: for swap
        ``s = (c_s, k_s)`` (:func:`swap_pairs`), the argmin after exchanging ``ln pi_jc`` and ``ln pi_jk``.
    """
    C = phi.shape[-1]
    if C < 2:
        raise ValueError(f"ARSM needs at least 2 categories, got {C}")
    v = log_pi - phi  # (B, L, C)
    z = v.argmin(-1)
    c, k = swap_pairs(C, str(phi.device))
    # smallest value over the entries other than c and k: the first of the 3 smallest not in {c, k}
    n_low = min(3, C)
    low_v, low_i = torch.topk(v, n_low, dim=-1, largest=False, sorted=True)  # (B, L, n_low)
    rest_v = torch.full((*v.shape[:2], c.numel()), torch.inf, dtype=v.dtype, device=v.device)  # (B, L, S)
    rest_i = torch.zeros(rest_v.shape, dtype=torch.int64, device=v.device)
    for r in reversed(range(n_low)):  # 3 steps: the r-th smallest wins where it is not swapped
        i_r = low_i[..., r : r + 1]  # (B, L, 1)
        free = (i_r != c) & (i_r != k)  # (B, L, S)
        rest_v = torch.where(free, low_v[..., r : r + 1], rest_v)
        rest_i = torch.where(free, i_r, rest_i)
    # the swapped entries: position c now holds ln pi_k, position k holds ln pi_c
    at_c = log_pi[..., k] - phi[..., c]  # (B, L, S)
    at_k = log_pi[..., c] - phi[..., k]
    best_ck = torch.where(at_c < at_k, c, k)
    best_ck_v = torch.minimum(at_c, at_k)
    z_swap = torch.where(best_ck_v < rest_v, best_ck, rest_i)  # (B, L, S)
    return z, z_swap.transpose(1, 2)


def _losses(
    z_swap: torch.Tensor,
    z: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    loss_fn: ArsmLoss,
    dedupe: bool,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``loss(z)`` ``(B,)``, ``loss(z_swap)`` ``(B, S)`` and the number of loss evaluations made.

    With ``dedupe`` a pseudo-action equal to ``z`` on every real item (a swap that moves no argmin)
    reuses ``loss(z)`` instead of being evaluated again.
    """
    B, S = z_swap.shape[:2]
    dev = z.device
    if dedupe:
        changed = ((z_swap != z[:, None, :]) & mask[:, None, :]).any(-1)  # (B, S)
        rows_b, rows_s = changed.nonzero(as_tuple=True)
    else:
        rows_b = torch.arange(B, device=dev).repeat_interleave(S)
        rows_s = torch.arange(S, device=dev).repeat(B)
    lists = torch.cat([torch.arange(B, device=dev), rows_b])  # (B + R,)
    actions = torch.cat([z, z_swap[rows_b, rows_s]]).to(_score_dtype(labels))  # (B + R, L)
    if hasattr(loss_fn, "rows"):
        values = loss_fn.rows(actions, lists, labels, mask)
    else:
        values = loss_fn(actions, labels[lists], mask[lists])
    if values.shape != lists.shape:
        raise ValueError(f"the ARSM loss must return one value per list, got shape {tuple(values.shape)}")
    loss_z = values[:B]
    loss_swap = loss_z[:, None].expand(B, S).clone()
    loss_swap[rows_b, rows_s] = values[B:]
    return loss_z, loss_swap, int(lists.numel())


def _tie_order(
    ties: str, mask: torch.Tensor, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor | None:
    """``(B, L)`` a uniformly random order of each list's positions (``ties="random"``), or None."""
    if ties not in ARSM_TIES:
        raise ValueError(f"ties must be one of {list(ARSM_TIES)}, got {ties!r}")
    if ties == "position":
        return None
    return torch.rand(mask.shape, generator=generator, device=device).argsort(-1)


def _reorder(order: torch.Tensor | None, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each ``(B, L)`` / ``(B, S, L)`` tensor with its last axis in ``order`` (unchanged when None)."""
    if order is None:
        return tensors
    out = []
    for t in tensors:
        idx = order if t.dim() == 2 else order[:, None, :].expand_as(t)
        out.append(torch.gather(t, -1, idx))
    return tuple(out)


def _score_dtype(labels: torch.Tensor) -> torch.dtype:
    return labels.dtype if labels.dtype.is_floating_point else torch.float32


@dataclass
class ArsmEstimate:
    """One ARSM draw for a batch of lists.

    Attributes:
        grad: ``(B, L, C)`` estimate of ``d E[loss] / d phi`` (0 at padded items).
        loss: ``(B,)`` ``loss(z, y)`` of the sampled action.
        z: ``(B, L)`` sampled levels ``0..C-1``.
        n_evaluated: how many loss evaluations were made (distinct pseudo-actions with ``dedupe``).
    """

    grad: torch.Tensor
    loss: torch.Tensor
    z: torch.Tensor
    n_evaluated: int


@torch.no_grad()
def arsm_estimate(
    phi: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    loss_fn: ArsmLoss,
    *,
    generator: torch.Generator | None = None,
    dedupe: bool = True,
    pi: torch.Tensor | None = None,
    ties: str = "random",
) -> ArsmEstimate:
    """ARSM estimate of the gradient of ``E_{z ~ Cat(softmax(phi))}[loss(z, y)]`` w.r.t. ``phi``.

    Seed 004, Algorithm 1 / eq. 6: ``g_jc = sum_k (L_ck - Lbar_k)(1/C - pi_jk)``, ``Lbar_k = mean_c L_ck``.

    Args:
        phi: ``(B, L, C)`` logits (not modified, no gradient taken here).
        labels: ``(B, L)`` true labels.
        mask: ``(B, L)`` bool, True = real item.
        loss_fn: ``(z, y, mask) -> (B,)``.
        generator: torch RNG for the Dirichlet draws (default: the global one).
        dedupe: skip evaluating pseudo-actions equal to ``z`` (same result, less work).
        pi: ``(B, L, C)`` Dirichlet draws to use instead of drawing them (common random numbers).
        ties: ``"random"`` (equal sampled levels in a random order per list and draw, from
            ``generator``) or ``"position"`` (input order); see the module docstring.
    """
    if phi.dim() != 3 or phi.shape[:2] != labels.shape or labels.shape != mask.shape:
        raise ValueError(
            f"expected phi (B, L, C) with labels and mask (B, L); got {tuple(phi.shape)}, "
            f"{tuple(labels.shape)}, {tuple(mask.shape)}"
        )
    B, C = phi.shape[0], phi.shape[-1]
    # pi ~ Dir(1_C) as normalized Exp(1) draws
    if pi is None:
        e = torch.empty(phi.shape, dtype=phi.dtype, device=phi.device).exponential_(generator=generator)
        pi = e / e.sum(-1, keepdim=True)
    elif pi.shape != phi.shape:
        raise ValueError(f"pi must have phi's shape {tuple(phi.shape)}, got {tuple(pi.shape)}")
    log_pi = torch.log(pi)
    z, z_swap = pseudo_actions(log_pi, phi)
    order = _tie_order(ties, mask, generator, phi.device)
    loss_z, loss_swap, n_eval = _losses(*_reorder(order, z_swap, z, labels, mask), loss_fn, dedupe)
    loss_z, loss_swap = loss_z.to(phi.dtype), loss_swap.to(phi.dtype)
    c, k = swap_pairs(C, str(phi.device))
    Lmat = loss_z[:, None, None].expand(B, C, C).clone()  # diagonal = loss(z)
    Lmat[:, c, k] = loss_swap
    Lmat[:, k, c] = loss_swap
    centered = Lmat - Lmat.mean(1, keepdim=True)  # L_ck - Lbar_k
    grad = torch.bmm(1.0 / C - pi, centered.transpose(1, 2))  # (B, L, C): sum_k (1/C - pi_jk) D_ck
    grad = torch.where(mask[..., None], grad, torch.zeros((), dtype=grad.dtype, device=grad.device))
    return ArsmEstimate(grad=grad, loss=loss_z, z=z, n_evaluated=n_eval)


def arsm_surrogate(
    phi: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    loss_fn: ArsmLoss,
    *,
    generator: torch.Generator | None = None,
    dedupe: bool = True,
    ties: str = "random",
) -> torch.Tensor:
    """Scalar to backpropagate (eq. 7): its gradient w.r.t. ``phi`` is the ARSM estimate averaged over the
    lists with at least one item, and its value is the mean sampled loss ``loss(z, y)`` (for logging).
    ``ties``: see :func:`arsm_estimate`.
    """
    est = arsm_estimate(phi, labels, mask, loss_fn, generator=generator, dedupe=dedupe, ties=ties)
    live = mask.any(-1)
    n = live.sum().clamp(min=1)
    surrogate = (est.grad * phi).sum() / n
    value = torch.where(live, est.loss, torch.zeros_like(est.loss)).sum() / n
    return surrogate - surrogate.detach() + value


@torch.no_grad()
def reinforce_estimate(
    phi: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    loss_fn: ArsmLoss,
    *,
    generator: torch.Generator | None = None,
    ties: str = "random",
) -> torch.Tensor:
    """Plain REINFORCE (score-function) estimate ``loss(z) * d log p(z) / d phi`` ``(B, L, C)``, the
    baseline ARSM is compared with (same sampling of ``z``, same ``ties`` rule)."""
    C = phi.shape[-1]
    e = torch.empty(phi.shape, dtype=phi.dtype, device=phi.device).exponential_(generator=generator)
    z = (torch.log(e) - phi).argmin(-1)  # Gumbel-type exact sample of Cat(softmax(phi))
    order = _tie_order(ties, mask, generator, phi.device)
    z_o, y_o, m_o = _reorder(order, torch.where(mask, z, 0), labels, mask)
    loss = loss_fn(z_o.to(_score_dtype(labels)), y_o, m_o).to(phi.dtype)
    score = torch.nn.functional.one_hot(z, C).to(phi.dtype) - torch.softmax(phi, -1)
    return torch.where(mask[..., None], loss[:, None, None] * score, torch.zeros((), dtype=phi.dtype))
