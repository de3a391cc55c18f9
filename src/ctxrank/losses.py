"""Listwise ranking losses over padded, masked batches of lists, and QILCM's query-confusion loss.

Every ranking loss is a pure function ``(scores, labels, mask, *, options..., reduction="mean") -> Tensor``:

* ``scores``  float ``(B, L)``: model scores, higher = ranked first. Values at padded positions are
  arbitrary (even NaN/inf): they never reach the computation and get an exact zero gradient.
* ``labels``  float ``(B, L)``: graded relevance ``>= 0`` (a negative label on a real item raises
  ``ValueError``); ``0`` on padding.
* ``mask``    bool  ``(B, L)``: ``True`` = real item.

Conventions shared by all of them:

* **Contributing list.** A list *contributes* when it has at least one real item with label ``> 0``
  (which implies at least one real item). A list that does not contribute (no real item, or no relevant
  item) has the value ``0`` exactly and passes a zero gradient to every score.
* **Reduction.** ``"none"``: one value per list, ``(B,)``. ``"sum"``: the sum of those values.
  ``"mean"``: the sum divided by the number of contributing lists (at least 1, so an all-empty batch
  gives ``0``, not ``0/0``). Non-contributing lists are therefore neither in the numerator nor in the
  denominator: adding an empty or all-irrelevant list to a batch changes nothing. (QILCM eq. 12 divides
  by the batch size ``|B|``; the two agree when every list in the batch has a relevant item.)
* **Padding.** Padded items never change a value or a gradient: in softmax-type sums they get a finite
  fill ``finfo(dtype).min / 2`` (``exp`` of it underflows to exactly 0, and unlike ``-inf`` an
  all-padded row stays finite, so no NaN appears even in discarded branches of ``torch.where``).
* **Numerics.** Everything is computed in ``log`` space with ``log_softmax`` / ``logsumexp`` /
  ``logcumsumexp``: no NaN or inf for scores of ``±1e4``. The work dtype is ``scores.dtype`` promoted to
  at least float32.
* **NaN.** A NaN score or label on a real item makes that list's value NaN (also in means and sums), even
  for a list that would otherwise not contribute: a real NaN is never hidden.

**Weights** (every loss of the registry, one mechanism, :class:`_Lists`): ``weights=w``, a float
``(B, L)`` tensor ``>= 0`` (finite on real items; padding ignored), splits into a list's weight, the mean
weight of its labels ``m = sum_i w_i y_i / sum_i y_i``, which multiplies the list's value
(:meth:`_Lists.reduce`), and relative weights ``w / m``, which multiply the labels (mean 1 over the
list's labels). So a list's value is ``m * L(s, (w / m) * y)``, and with one click (a cascade user's
session) ``w_i * L(s, e_i)`` for every loss: the click's weight scales that click's contribution, as in
the inverse-propensity-weighted (IRW) loss of Ai, Bi, Luo, Guo & Croft 2018 (SIGIR, "Unbiased Learning to
Rank with Unbiased Propensity Estimation", eq. 6, ``sum_{clicked i} l(f, x_i) / P(o_i = 1)``) and the IPS
risk of Joachims, Swaminathan & Schnabel 2017 (WSDM, eq. 5). The ULTRA toolkit
(``ULTR-Community/ULTRA_pytorch``, ``BaseAlgorithm.softmax_loss``) applies its ``propensity_weights``
the same way to the softmax loss: the target normalised over the weighted clicks, the list's cross
entropy multiplied back by the list's weighted click sum; dividing that sum by the list's unweighted
label sum keeps weights of all ones exactly the unweighted loss. Its use is inverse-propensity scoring
of a click log (``ctxrank.clicks.weighting``): with clicks ``c`` drawn by the position-based model,
``P(c_i = 1) = p(rank_i) r_i``, ``E[c_i / p(rank_i)] = r_i`` (Wang et al. 2016, SIGIR). Per loss, what
the weighted clicks estimate:

* **unbiased** (exact): ListNet with ``label_transform="identity"``. ``sum_i y_i`` times the list's
  value is ``sum_i w_i c_i (-log softmax(s)_i)``, the IRW softmax loss (Ai et al. 2018, eq. 6 with
  their softmax ``l``), whose expectation over the clicks is ``R_q L_q(r)``: the full-information loss
  times the list's relevance sum ``R_q = sum_i r_i`` (the objective ``sum_q R_q L_q`` of dual
  learning). The list's value itself divides by the click count, a per-list self-normalisation (exact
  when a list has one click).
* **per click, exactly, on one-click lists; standard practice on lists with several clicks**: every
  other loss (ListNet's ``"exp"`` and ``"exp2"`` targets, AttRank in every form, SoftRank, LambdaLoss,
  ApproxNDCG, NeuralNDCG, ListMLE, RankNet, whose pairs of a lone click are then weighted by its weight
  as in ULTRA's pairwise loss). With several clicks the relative weights reweight the clicks within the
  list through the labels; the NDCG losses (``IDCG - DCG`` of the weighted clicks is not linear in
  them), the exponential targets and gains and the order-based losses are then not unbiased. The
  relative weights of 0/1 clicks are at most the list's click count, so ``2^(w c / m)`` gains stay
  small; weights whose products with the labels overflow the work dtype are refused.

Weights of all ones give exactly the unweighted loss (tested for every loss).

Losses (``LOSSES`` registry; ``get_loss(name)``):

* :func:`listnet`: top-one probability cross entropy (Cao et al. 2007, ICML).
* :func:`listmle`: Plackett-Luce negative log-likelihood of the label order (Xia et al. 2008).
* :func:`attrank`: attention-rank cross entropy, QILCM eq. 11-12 or DLCM eq. 11 (Ai et al. 2018), or
  the variant of DLCM's released code.
* :func:`softrank`: 1 - expected NDCG under Gaussian score noise (Taylor et al. 2008; DLCM eq. 8).
* :func:`ranknet`: pairwise logistic loss on pairs with different labels (Burges et al. 2005).
* :func:`lambdaloss`: LambdaLoss with the NDCG-Loss2++ weights (Wang et al. 2018, CIKM).
* :func:`approxndcg`: 1 - NDCG with a sigmoid-smoothed rank (Qin, Liu & Li 2010).
* :func:`neuralndcg`: 1 - NDCG@k of the NeuralSort relaxation, Sinkhorn-scaled (Pobrotyn & Białobrzeski
  2021), and its transposed variant.

Not in the registry (different signature): :func:`chamfer_confusion`, QILCM's query-confusion loss
(eq. 13-14) over item representations ``(B, L, D)``.

Memory: :func:`loss_memory` bounds the bytes of the tensors a loss allocates (forward and backward) on a
``(B, L)`` batch, :func:`chamfer_memory` those of the confusion loss: O(B L) for ListNet, ListMLE and
AttRank; O(B L^2) for the pairwise and sorting losses (RankNet, LambdaLoss, ApproxNDCG, NeuralNDCG,
SoftRank's ``pi`` table, plus its O(B L min(k, L) sqrt(L)) rank distributions).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ctxrank._checks import check_bool, check_choice, check_int, check_non_negative, check_positive
from ctxrank.metrics import check_score_inputs

__all__ = [
    "ATTRANK_FORMS",
    "CHAMFER_DIRECTIONS",
    "CHAMFER_FORMS",
    "LABEL_TRANSFORMS",
    "LOSSES",
    "REDUCTIONS",
    "SOFTRANK_GAINS",
    "approxndcg",
    "attrank",
    "chamfer_block_shape",
    "chamfer_confusion",
    "chamfer_memory",
    "get_loss",
    "lambdaloss",
    "listmle",
    "listnet",
    "loss_memory",
    "neuralndcg",
    "ranknet",
    "softrank",
    "softrank_rank_distribution",
]

REDUCTIONS: tuple[str, ...] = ("mean", "sum", "none")
LABEL_TRANSFORMS: tuple[str, ...] = ("exp", "identity", "exp2")
ATTRANK_FORMS: tuple[str, ...] = ("qilcm", "dlcm", "dlcm_code")
SOFTRANK_GAINS: tuple[str, ...] = ("exp2", "linear")
CHAMFER_FORMS: tuple[str, ...] = ("sum", "mean")
CHAMFER_DIRECTIONS: tuple[str, ...] = ("two-sided", "one-sided")
DEFAULT_BLOCK_BYTES = 64 * 2**20


# ----------------------------------------------------------------------------------------------------
# Shared machinery
# ----------------------------------------------------------------------------------------------------


def _neg(dtype: torch.dtype) -> float:
    """Finite stand-in for ``-inf`` in softmax-type sums: ``exp(neg - x)`` is exactly 0 for real ``x``."""
    return torch.finfo(dtype).min / 2


class _Lists:
    """Validated inputs of a ranking loss.

    Attributes:
        s: ``(B, L)`` scores in the work dtype, 0 on padding (padded scores are cut off from the graph).
        y: ``(B, L)`` labels in the work dtype, 0 on padding.
        mask: ``(B, L)`` bool, True = real item.
        n: ``(B,)`` number of real items (work dtype).
        rel: ``(B, L)`` bool, real item with label > 0.
        contrib: ``(B,)`` bool, the list has a relevant item.
        nan: ``(B,)`` bool, NaN score or label on a real item.
        scale: ``(B,)`` the list's weight, the mean weight of its labels ``m = sum_i w_i y_i / sum_i y_i``
            (1 without weights or without a label ``> 0``); :meth:`reduce` multiplies each list's value
            by it, and ``y`` holds the labels times the relative weights ``w / m`` (module docstring,
            "Weights").
    """

    def __init__(
        self,
        scores: torch.Tensor,
        labels: torch.Tensor,
        mask: torch.Tensor,
        weights: torch.Tensor | None = None,
    ):
        check_score_inputs(scores, labels, mask, floating=True)
        self.dtype = torch.promote_types(scores.dtype, torch.float32)
        zero = torch.zeros((), dtype=self.dtype, device=scores.device)
        self.mask = mask
        self.s = torch.where(mask, scores.to(self.dtype), zero)  # (B, L)
        self.y = torch.where(mask, labels.to(self.dtype), zero)  # (B, L)
        self.scale = torch.ones(mask.shape[0], dtype=self.dtype, device=scores.device)  # (B,)
        if weights is not None:
            w = _item_weights(weights, mask, self.dtype)
            mass = (w * self.y).sum(-1)  # (B,)
            if bool(torch.isinf(mass).any()):
                raise ValueError("weights times labels overflow the work dtype: cap the weights (a clip)")
            total = self.y.sum(-1)  # (B,)
            self.scale = torch.where(total > 0, _safe_div(mass, total), self.scale)
            self.y = self.y * _safe_div(w, self.scale[:, None])  # a zero scale has zero weights on labels
        bad = torch.isnan(scores) | torch.isnan(labels)
        self.nan = (bad & mask).any(-1)  # (B,)
        if bool((self.y < 0).any()):
            bad_vals = torch.unique(self.y[self.y < 0])[:5].tolist()
            raise ValueError(f"labels must be >= 0 on real items (graded relevance), got {bad_vals}")
        self.rel = (self.y > 0) & mask  # (B, L)
        self.contrib = self.rel.any(-1)  # (B,)
        self.n = mask.sum(-1).to(self.dtype)  # (B,)
        self.neg = _neg(self.dtype)

    def logits(self, scores: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, L)`` scores with padding replaced by the finite ``-inf`` stand-in."""
        return torch.where(self.mask, self.s if scores is None else scores, self.neg)

    def reduce(self, per_list: torch.Tensor, reduction: str) -> torch.Tensor:
        """Zero non-contributing lists, make NaN lists NaN, and apply the reduction."""
        zero = torch.zeros((), dtype=per_list.dtype, device=per_list.device)
        per_list = per_list + self.s[:, :0].sum(-1)  # keeps the graph (zero gradient) if nothing is real
        out = torch.where(self.contrib, per_list * self.scale.to(per_list.dtype), zero)
        out = torch.where(self.nan, torch.full_like(zero, float("nan")), out)
        if reduction == "none":
            return out
        total = out.sum()
        if reduction == "sum":
            return total
        return total / self.contrib.sum().clamp(min=1).to(total.dtype)


def _item_weights(weights: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(B, L)`` checked label weights in ``dtype``, 0 on padding (module docstring, "Weights")."""
    if not isinstance(weights, torch.Tensor) or not weights.dtype.is_floating_point:
        raise TypeError(f"weights must be a float torch.Tensor (B, L) or None, got {type(weights).__name__}")
    if weights.shape != mask.shape:
        raise ValueError(
            f"weights must have the shape of the labels {tuple(mask.shape)}, got {tuple(weights.shape)}"
        )
    w = torch.where(mask, weights.to(dtype), torch.zeros((), dtype=dtype, device=weights.device))
    if not bool((torch.isfinite(w) & (w >= 0)).all()):
        bad = w[~(torch.isfinite(w) & (w >= 0))][:5].tolist()
        raise ValueError(f"weights must be finite and >= 0 on real items, got {bad}")
    return w


def _masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``sum_j values_j`` over ``mask`` along the last axis (``torch.where``, so padding can be anything)."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum(-1)


def _gain(y: torch.Tensor, gain: str) -> torch.Tensor:
    if gain == "exp2":
        return torch.expm1(y * math.log(2.0))  # 2^y - 1, exact near 0
    return y


# ----------------------------------------------------------------------------------------------------
# ListNet
# ----------------------------------------------------------------------------------------------------


def _top_one_target(lists: _Lists, label_transform: str) -> torch.Tensor:
    """``(B, L)`` target top-one distribution ``P_y``; rows of contributing lists sum to 1, 0 on padding."""
    if label_transform == "exp":
        return torch.softmax(lists.logits(lists.y), dim=-1)
    g = lists.y if label_transform == "identity" else _gain(lists.y, "exp2")
    total = g.sum(-1, keepdim=True)  # (B, 1)
    return _safe_div(g, total)


def listnet(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    label_transform: str = "exp",
    weights: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """ListNet: cross entropy between top-one probabilities of labels and scores (Cao et al. 2007).

    With the top-one probability ``P_s(j) = phi(s_j) / sum_k phi(s_k)`` and ``phi = exp`` (ListNet
    paper, sections 3.1 and 3.2), the loss of a list is

        ``L = - sum_j P_y(j) log P_s(j)``,  ``log P_s = log_softmax(s / temperature)``

    over the real items of the list (padding is excluded from the softmax denominators).

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels ``>= 0``.
        mask: ``(B, L)`` bool, True = real item.
        temperature: ``> 0``; divides the scores (not the labels).
        label_transform: how labels become ``P_y``: ``"exp"`` = ``softmax(y)`` (ListNet's ``phi = exp``,
            default), ``"identity"`` = ``y / sum y``, ``"exp2"`` = ``(2^y - 1) / sum (2^y - 1)``.
        weights: ``(B, L)`` item weights ``>= 0`` (inverse-propensity weights of a click log), or None: each
            list's value is scaled by its labels' mean weight ``m`` and its labels by ``w / m`` (module
            docstring, "Weights"). With ``"identity"``, the list's value times its click count is the IRW
            softmax loss of Ai et al. 2018, an unbiased estimate of the full-information loss times the list's
            relevance sum; the other targets: per click on one-click lists, standard practice otherwise.
        reduction: ``"mean"`` (over contributing lists), ``"sum"`` or ``"none"`` (``(B,)``).

    Returns:
        Scalar, or ``(B,)`` for ``reduction="none"``. Lists without a relevant item give 0.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    check_choice("label_transform", label_transform, LABEL_TRANSFORMS)
    temperature = check_positive("temperature", temperature)
    lists = _Lists(scores, labels, mask, weights)
    log_p = torch.log_softmax(lists.logits(lists.s / temperature), dim=-1)  # (B, L)
    target = _top_one_target(lists, label_transform)  # (B, L)
    per_list = -_masked_sum(target * log_p, lists.mask)  # (B,)
    return lists.reduce(per_list, reduction)


# ----------------------------------------------------------------------------------------------------
# ListMLE
# ----------------------------------------------------------------------------------------------------


def _label_order(lists: _Lists, generator: torch.Generator | None) -> torch.Tensor:
    """``(B, L)`` permutation: real items by descending label, then padding."""
    key = torch.where(lists.mask, lists.y, float("-inf"))  # (B, L); padding sorts last
    if generator is None:
        return torch.argsort(key, dim=-1, descending=True, stable=True)  # ties: input position
    noise = torch.rand(key.shape, generator=generator, device=generator.device).to(key.device)
    shuffle = torch.argsort(noise, dim=-1)  # (B, L) random permutation per list
    order = torch.argsort(key.gather(-1, shuffle), dim=-1, descending=True, stable=True)
    return shuffle.gather(-1, order)  # ties: random


def listmle(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    weights: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """ListMLE: Plackett-Luce negative log-likelihood of the label order (Xia et al. 2008).

    Sorting the ``n`` real items by label, descending, gives the order ``pi``; the DLCM paper (section 4.4)
    writes its Plackett-Luce probability ``P(pi | s) = prod_i exp(s_pi(i)) / sum_{k >= i} exp(s_pi(k))``,
    so

        ``L = sum_{i=1}^{n} ( logsumexp_{k >= i} s_pi(k) - s_pi(i) )``,

    computed for all lists at once as a reversed ``logcumsumexp`` over the sorted scores; padded items
    are sorted last and excluded from every denominator.

    Ties among equal labels: with ``generator=None`` they are broken by input position (earlier item
    first), which is deterministic; with a ``torch.Generator`` they are broken uniformly at random (the
    usual ListMLE practice), reproducibly for a given generator state. The random keys are drawn for the
    whole ``(B, L)`` batch, so the tie order (not the tie-free value) depends on the padded shape.

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels ``>= 0``.
        mask: ``(B, L)`` bool, True = real item.
        generator: random tie-breaking; ``None`` = by position.
        weights: ``(B, L)`` item weights ``>= 0`` (inverse-propensity weights of a click log), or None: each
            list's value is scaled by its labels' mean weight ``m`` and its labels by ``w / m`` (module
            docstring, "Weights"). On a one-click list: the click's weight times the unweighted value; with
            several clicks the weights reorder them (standard practice, no unbiasedness).
        reduction: ``"mean"`` (over contributing lists), ``"sum"`` or ``"none"`` (``(B,)``).

    Returns:
        Scalar, or ``(B,)`` for ``reduction="none"``. Lists without a relevant item give 0.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    lists = _Lists(scores, labels, mask, weights)
    order = _label_order(lists, generator)  # (B, L)
    valid = lists.mask.gather(-1, order)  # (B, L), a prefix of each row
    s_sorted = torch.where(valid, lists.s.gather(-1, order), lists.neg)  # (B, L)
    # log of the Plackett-Luce denominators: logsumexp_{k >= i} s_(k)
    tail = torch.logcumsumexp(s_sorted.flip(-1), dim=-1).flip(-1)  # (B, L)
    per_list = _masked_sum(tail - s_sorted, valid)  # (B,)
    return lists.reduce(per_list, reduction)


# ----------------------------------------------------------------------------------------------------
# AttRank
# ----------------------------------------------------------------------------------------------------


def _log_one_minus_softmax(z: torch.Tensor, lse: torch.Tensor, neg: float) -> torch.Tensor:
    """``(B, L)`` exact ``log(1 - softmax(z)_i) = logsumexp_{k != i} z_k - logsumexp_k z_k``.

    ``logsumexp_{k != i}`` is combined from exclusive prefix and suffix ``logcumsumexp`` (O(L) memory).
    Where ``i`` is the only real item the result is a meaningless finite number; callers mask it.
    """
    fill = torch.full_like(z[:, :1], neg)  # (B, 1)
    before = torch.cat([fill, torch.logcumsumexp(z, dim=-1)[:, :-1]], dim=-1)  # lse_{k < i}
    after = torch.cat([torch.logcumsumexp(z.flip(-1), dim=-1).flip(-1)[:, 1:], fill], dim=-1)  # lse_{k > i}
    return torch.logaddexp(before, after) - lse


def attrank(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    form: str = "qilcm",
    weights: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """AttRank: cross entropy between a label attention and the score softmax (Ai et al. 2018).

    Labels are normalized with the truncated exponential ``psi(x) = exp(x)`` if ``x > 0`` else ``0``
    (QILCM eq. 11; DLCM's ``a^y``): ``y~_i = psi(y_i) / sum_j psi(y_j)``. The model's
    attention is ``s_i = softmax(scores)_i`` over the real items (QILCM eq. 9). Per list, with ``n`` real
    items:

    * ``form="qilcm"`` (default), QILCM eq. 12:
      ``L = -(1/n) sum_i y~_i log s_i``.
    * ``form="dlcm"``, DLCM eq. 11, two-sided:
      ``L = -sum_i [ y~_i log s_i + (1 - y~_i) log(1 - s_i) ]``, with ``log(1 - s_i)`` computed exactly
      as ``logsumexp_{k != i} scores_k - logsumexp_k scores_k``. For a one-item list ``1 - s_1 = 0`` and
      ``1 - y~_1 = 0``; the term ``0 * log 0`` is defined as 0 (the list's value is then 0).
    * ``form="dlcm_code"``, DLCM's released code (``QingyaoAi/Deep-Listwise-Context-Model-for-Ranking-
      Refinement``, ``RankLSTM_model.py``, ``loss_func='softmax'``): ``softmax_cross_entropy_with_logits``
      with the ``psi``-normalized labels, i.e. ``L = -sum_i y~_i log s_i`` (no ``1/n``, no second term).

    Default ``"qilcm"``: this project's QILCM and DCM-with-AttRank use eq. 12 (QILCM's paper says it
    replaces DCM's loss by "the AttRank loss used in DLCM and our method"); the DLCM model passes
    ``form="dlcm"`` explicitly.

    Args:
        scores: ``(B, L)`` scores (logits of the attention).
        labels: ``(B, L)`` graded labels ``>= 0``.
        mask: ``(B, L)`` bool, True = real item.
        form: ``"qilcm"``, ``"dlcm"`` or ``"dlcm_code"``.
        weights: ``(B, L)`` item weights ``>= 0`` (inverse-propensity weights of a click log), or None: each
            list's value is scaled by its labels' mean weight ``m`` and its labels by ``w / m`` (module
            docstring, "Weights"). On a one-click list: the click's weight times the unweighted value (the
            psi-normalised target is the click); with several clicks the target ``softmax(w c)`` is not linear
            in the weighted clicks (standard practice, no unbiasedness).
        reduction: ``"mean"`` (over contributing lists), ``"sum"`` or ``"none"`` (``(B,)``).

    Returns:
        Scalar, or ``(B,)`` for ``reduction="none"``. Lists without a relevant item give 0.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    check_choice("form", form, ATTRANK_FORMS)
    lists = _Lists(scores, labels, mask, weights)
    z = lists.logits()  # (B, L)
    lse = torch.logsumexp(z, dim=-1, keepdim=True)  # (B, 1)
    log_s = z - lse  # (B, L) log softmax
    target = torch.softmax(torch.where(lists.rel, lists.y, lists.neg), dim=-1)  # (B, L) psi-normalized
    per_list = -_masked_sum(target * log_s, lists.mask)  # (B,)
    if form == "qilcm":
        per_list = per_list / lists.n.clamp(min=1)
    elif form == "dlcm":
        log_rest = _log_one_minus_softmax(z, lse, lists.neg)  # (B, L)
        two_or_more = lists.mask & (lists.n >= 2)[:, None]
        per_list = per_list - _masked_sum((1 - target) * log_rest, two_or_more)
    return lists.reduce(per_list, reduction)


# ----------------------------------------------------------------------------------------------------
# SoftRank
# ----------------------------------------------------------------------------------------------------


def _insert_items(state: torch.Tensor, beats: torch.Tensor) -> torch.Tensor:
    """Add items one at a time to the rank distributions.

    Args:
        state: ``(B, L, R)`` ``P[b, j, r]`` = probability that item ``j`` has 0-based rank ``r``.
        beats: ``(B, T, L)`` ``pi[b, i, j]`` for the ``T`` items ``i`` added in this block.
    """
    for beats_t in beats.unbind(1):  # unbind: one backward stack, not T zero-filled selects
        p = beats_t[:, :, None]  # (B, L, 1): item i is ranked above j -> j moves down one rank
        shifted = F.pad(state[..., :-1], (1, 0))  # (B, L, R): P(r - 1), mass beyond R dropped
        state = state + p * (shifted - state)
    return state


def _rank_distribution(s: torch.Tensor, mask: torch.Tensor, sigma: float, ranks: int) -> torch.Tensor:
    """``(B, L, R)`` SoftRank rank distributions of the real items (rows of padded items are 0)."""
    B, L = s.shape
    diff = s[:, :, None] - s[:, None, :]  # (B, L, L): s_i - s_j
    # pi_ij = P(s_i' > s_j') = Phi((s_i - s_j) / (sqrt(2) sigma)) = erfc(-(s_i - s_j) / (2 sigma)) / 2
    pi = 0.5 * torch.erfc(-diff / (2.0 * sigma))  # (B, L, L)
    eye = torch.eye(L, dtype=torch.bool, device=s.device)
    pair = mask[:, :, None] & mask[:, None, :] & ~eye  # padded items and the item itself never shift
    pi = torch.where(pair, pi, torch.zeros((), dtype=s.dtype, device=s.device))
    state = torch.zeros((B, L, ranks), dtype=s.dtype, device=s.device)
    state[..., 0] = 1.0  # alone, every item has rank 0
    active = torch.nonzero(mask.any(0)).flatten()  # items i that are real in some list
    beats = pi.index_select(1, active)  # (B, T, L)
    T = beats.shape[1]
    block = max(1, math.isqrt(max(T - 1, 0)) + 1)  # ~sqrt(T) items per checkpointed block
    use_ckpt = torch.is_grad_enabled() and beats.requires_grad and T > block
    for start in range(0, T, block):
        part = beats[:, start : start + block]
        if use_ckpt:
            state = checkpoint(_insert_items, state, part, use_reentrant=False)
        else:
            state = _insert_items(state, part)
    return torch.where(mask[:, :, None], state, torch.zeros((), dtype=s.dtype, device=s.device))


def softrank_rank_distribution(
    scores: torch.Tensor, mask: torch.Tensor, sigma: float = 0.1, *, max_rank: int | None = None
) -> torch.Tensor:
    """SoftRank rank distributions ``p_j(r)`` (Taylor et al. 2008; DLCM eq. 8 and recursion).

    Each real score gets independent Gaussian noise ``N(s_j, sigma^2)``; item ``i`` is ranked above
    ``j`` with probability ``pi_ij = Phi((s_i - s_j) / (sqrt(2) sigma))``. Starting from ``p_j(0) = 1``,
    the real items ``i != j`` are added one at a time:
    ``p_j(r) <- p_j(r - 1) pi_ij + p_j(r) (1 - pi_ij)``. Padded items are never added, so they cannot
    shift a real item's rank.

    Cost: ``L`` sequential steps, each O(B L R) (R = ``max_rank`` or L), plus the O(B L^2) table of
    ``pi``. Memory: O(B L^2 + B L R) forward; for backward, blocks of ~sqrt(L) steps are checkpointed
    (recomputed), so about ``2 sqrt(L)`` states of size ``(B, L, R)`` are kept instead of ``L``.

    Args:
        scores: ``(B, L)`` scores.
        mask: ``(B, L)`` bool, True = real item.
        sigma: noise standard deviation, ``> 0``.
        max_rank: keep 0-based ranks ``< max_rank`` only (exact for those ranks; mass beyond is dropped);
            ``None`` = all ``L`` ranks.

    Returns:
        ``(B, L, R)``: ``[b, j, r]`` = probability that item ``j`` has 0-based rank ``r`` among the real
        items of list ``b``. Rows of real items sum to 1 (with ``max_rank=None``); rows of padded items
        are 0; ranks ``>= n_b`` have probability 0.
    """
    sigma = check_positive("sigma", sigma)
    max_rank = check_int("max_rank", max_rank, allow_none=True)
    lists = _Lists(scores, torch.zeros_like(scores), mask)
    L = scores.shape[1]
    return _rank_distribution(lists.s, mask, sigma, L if max_rank is None else min(max_rank, L))


def softrank(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    sigma: float = 0.1,
    k: int | None = None,
    gain: str = "exp2",
    weights: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """SoftRank: one minus the expected NDCG@k under Gaussian score noise (Taylor et al. 2008).

    With the rank distributions ``p_j(r)`` of :func:`softrank_rank_distribution` (DLCM eq. 8; DLCM
    uses ``sigma = 0.1``),

        ``E[DCG@k] = sum_j g(y_j) sum_{r < k} p_j(r) D(r)``,  ``D(r) = 1 / log2(r + 2)`` (0-based rank),
        ``L = 1 - E[DCG@k] / IDCG@k``,

    where ``g(y) = 2^y - 1`` (``gain="exp2"``) or ``y`` (``"linear"``) and ``IDCG@k`` is the DCG@k of all
    the list's real items sorted by label. Padded items never enter the recursion or the ideal DCG.

    Cost and memory (``R = min(k, L)``): ``L`` sequential steps of O(B L R) each (no Python loop over
    lists or pairs), the ``(B, L, L)`` pairwise table, and about ``2 sqrt(L)`` checkpointed states of
    ``(B, L, R)`` for backward, ``B * L * R * 4`` bytes each in float32. A cutoff ``k`` makes it
    cheaper and is exact for NDCG@k.

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels ``>= 0``.
        mask: ``(B, L)`` bool, True = real item.
        sigma: noise standard deviation, ``> 0``.
        k: NDCG cutoff (``None`` = whole list; ``k > L`` = whole list).
        gain: ``"exp2"`` or ``"linear"``.
        weights: ``(B, L)`` item weights ``>= 0`` (inverse-propensity weights of a click log), or None: each
            list's value is scaled by its labels' mean weight ``m`` and its labels by ``w / m`` (module
            docstring, "Weights"). On a one-click list: the click's weight times the unweighted value; with
            several clicks the ideal-DCG normaliser of the weighted clicks makes it standard practice
            (biased).
        reduction: ``"mean"`` (over contributing lists), ``"sum"`` or ``"none"`` (``(B,)``).

    Returns:
        Scalar, or ``(B,)`` for ``reduction="none"``. Lists without a relevant item give 0.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    check_choice("gain", gain, SOFTRANK_GAINS)
    sigma = check_positive("sigma", sigma)
    k = check_int("k", k, allow_none=True)
    lists = _Lists(scores, labels, mask, weights)
    L = scores.shape[1]
    R = L if k is None else min(k, L)
    g = _gain(lists.y, gain)  # (B, L), 0 on padding
    disc = 1.0 / torch.log2(torch.arange(R, dtype=lists.dtype, device=scores.device) + 2.0)  # (R,)
    if R == 0:  # L == 0: nothing to rank
        return lists.reduce(torch.zeros(scores.shape[0], dtype=lists.dtype, device=scores.device), reduction)
    probs = _rank_distribution(lists.s, lists.mask, sigma, R)  # (B, L, R)
    expected_disc = (probs * disc).sum(-1)  # (B, L)
    edcg = (g * expected_disc).sum(-1)  # (B,)
    ideal = (torch.sort(g, dim=-1, descending=True).values[:, :R] * disc).sum(-1)  # (B,)
    per_list = 1.0 - _safe_div(edcg, ideal)
    return lists.reduce(per_list, reduction)


# ----------------------------------------------------------------------------------------------------
# Pairwise and metric-driven losses: RankNet, LambdaLoss (NDCG-Loss2++), ApproxNDCG, NeuralNDCG
# ----------------------------------------------------------------------------------------------------


def _label_pairs(lists: _Lists) -> torch.Tensor:
    """``(B, L, L)`` bool: ``[b, i, j]`` = both real and ``y_i > y_j`` (each unordered pair at most once)."""
    real = lists.mask[:, :, None] & lists.mask[:, None, :]
    return real & (lists.y[:, :, None] > lists.y[:, None, :])


def _ideal_dcg(g: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """``(B,)`` DCG of the gains ``g`` (0 on padding) sorted descending, ``1 / log2(r + 1)`` at 1-based
    rank ``r``, over the first ``k`` ranks (``None`` = all)."""
    top = torch.sort(g, dim=-1, descending=True).values[:, : g.shape[1] if k is None else k]
    ranks = torch.arange(top.shape[1], dtype=g.dtype, device=g.device) + 2.0  # r + 1
    return (top / torch.log2(ranks)).sum(-1)


def _safe_div(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` where ``den > 0``, else ``num / 1`` (a list without a relevant item: masked later)."""
    return num / torch.where(den > 0, den, torch.ones_like(den))


def ranknet(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    sigma: float = 1.0,
    weights: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """RankNet: logistic loss on every pair of real items with different labels (Burges et al. 2005).

    For a pair with ``y_i > y_j`` the model's probability that ``i`` is ranked above ``j`` is
    ``P_ij = sigmoid(sigma (s_i - s_j))`` and the target is 1, so the cross entropy of the pair is
    ``-log P_ij = log(1 + exp(-sigma (s_i - s_j)))`` (RankNet eq. 1-3 with target ``P̄_ij = 1``). Per list

        ``L = sum_{i, j real: y_i > y_j} softplus(-sigma (s_i - s_j))``

    (a sum over pairs, as in the paper's cost; pairs with equal labels are not used). ``softplus`` keeps
    it exact for scores of ``±1e4``.

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels ``>= 0``.
        mask: ``(B, L)`` bool, True = real item.
        sigma: ``> 0``, the steepness of the sigmoid.
        weights: ``(B, L)`` item weights ``>= 0`` (inverse-propensity weights of a click log), or None: each
            list's value is scaled by its labels' mean weight ``m`` and its labels by ``w / m`` (module
            docstring, "Weights"). On a one-click list: each of the click's pairs weighted by the click's
            weight (as ULTRA's pairwise loss); with several clicks the weights reorder them (standard
            practice).
        reduction: ``"mean"`` (over contributing lists), ``"sum"`` or ``"none"`` (``(B,)``).

    Returns:
        Scalar, or ``(B,)`` for ``reduction="none"``. Lists without a relevant item give 0; a list whose
        real items all share one label has no pair and gives 0 too.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    sigma = check_positive("sigma", sigma)
    lists = _Lists(scores, labels, mask, weights)
    diff = lists.s[:, :, None] - lists.s[:, None, :]  # (B, L, L): s_i - s_j
    pair_loss = F.softplus(-sigma * diff)  # (B, L, L)
    per_list = torch.where(_label_pairs(lists), pair_loss, 0.0).sum((1, 2))  # (B,)
    return lists.reduce(per_list, reduction)


def _current_ranks(lists: _Lists) -> torch.Tensor:
    """``(B, L)`` 1-based rank of every item in the ranking by the current (detached) scores; padding
    after the real items. Tied scores take consecutive ranks in input order (a stable sort)."""
    order = torch.argsort(lists.logits().detach(), dim=-1, descending=True, stable=True)  # (B, L)
    positions = torch.arange(1, order.shape[1] + 1, dtype=lists.dtype, device=order.device)
    return torch.empty_like(lists.s).scatter_(-1, order, positions.expand_as(lists.s))


def lambdaloss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    sigma: float = 1.0,
    mu: float = 10.0,
    gain: str = "exp2",
    weights: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """LambdaLoss with the NDCG-Loss2++ weights (Wang, Li, Golbandi, Bendersky & Najork 2018, CIKM).

    LambdaLoss, NDCG-Loss2++ (Wang et al. 2018): with the hard assignment of the current ranking (items
    sorted by score, 1-based ranks ``r_i``), the loss of a list is

        ``L = - sum_{i, j real: y_i > y_j} w_ij log2 sigmoid(sigma (s_i - s_j))``,
        ``w_ij = (rho_ij + mu delta_ij) |G_i - G_j|``,

    * ``G_i = g(y_i) / IDCG``, ``g(y) = 2^y - 1`` (``gain="exp2"``) or ``y`` (``"linear"``), ``IDCG`` the
      DCG of the list's real items sorted by label;
    * ``D(r) = log2(1 + r)``; ``rho_ij = |1/D(r_i) - 1/D(r_j)|`` (LambdaRank's NDCG swap weight);
    * ``delta_ij = |1/D(|r_i - r_j|) - 1/D(|r_i - r_j| + 1)|`` (NDCG-Loss2's weight).

    ``mu = 0`` is the LambdaRank loss of the framework. The weights depend on the scores only through the
    ranks and are constants for autograd, as in the paper (and allRank). Tied scores take consecutive
    ranks in input order.

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels ``>= 0``.
        mask: ``(B, L)`` bool, True = real item.
        sigma: ``> 0``, the steepness of the sigmoid.
        mu: ``>= 0``, the weight of NDCG-Loss2's ``delta_ij`` against LambdaRank's ``rho_ij``
            (default 10, allRank's).
        gain: ``"exp2"`` or ``"linear"``.
        weights: ``(B, L)`` item weights ``>= 0`` (inverse-propensity weights of a click log), or None: each
            list's value is scaled by its labels' mean weight ``m`` and its labels by ``w / m`` (module
            docstring, "Weights"). On a one-click list: the click's weight times the unweighted value; with
            several clicks the ideal-DCG normaliser and ``|G_i - G_j|`` of the weighted clicks make it
            standard practice (biased).
        reduction: ``"mean"`` (over contributing lists), ``"sum"`` or ``"none"`` (``(B,)``).

    Returns:
        Scalar, or ``(B,)`` for ``reduction="none"``. Lists without a relevant item give 0.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    check_choice("gain", gain, SOFTRANK_GAINS)
    sigma = check_positive("sigma", sigma)
    mu = check_non_negative("mu", mu)
    lists = _Lists(scores, labels, mask, weights)
    g = _gain(lists.y, gain)  # (B, L), 0 on padding
    G = _safe_div(g, _ideal_dcg(g)[:, None])  # (B, L)
    r = _current_ranks(lists)  # (B, L)
    inv_d = 1.0 / torch.log2(1.0 + r)  # (B, L)
    rho = (inv_d[:, :, None] - inv_d[:, None, :]).abs()  # (B, L, L)
    gap = (r[:, :, None] - r[:, None, :]).abs().clamp(min=1.0)  # (B, L, L); the diagonal is no pair
    delta = (1.0 / torch.log2(1.0 + gap) - 1.0 / torch.log2(2.0 + gap)).abs()
    weight = (rho + mu * delta) * (G[:, :, None] - G[:, None, :]).abs()  # (B, L, L)
    diff = lists.s[:, :, None] - lists.s[:, None, :]  # (B, L, L)
    pair_loss = weight * F.softplus(-sigma * diff) / math.log(2.0)  # -w log2 sigmoid
    per_list = torch.where(_label_pairs(lists), pair_loss, 0.0).sum((1, 2))  # (B,)
    return lists.reduce(per_list, reduction)


def approxndcg(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    alpha: float = 10.0,
    gain: str = "exp2",
    weights: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """ApproxNDCG: one minus NDCG with a smooth rank (Qin, Liu & Li 2010, Information Retrieval 13(4)).

    The rank of item ``x`` among the real items, ``1 + sum_{y != x} 1[s_y > s_x]``, is approximated by
    the sigmoid of the score difference with temperature ``alpha``:

        ``rank~_x = 1 + sum_{y real, y != x} sigmoid(alpha (s_y - s_x))``,
        ``L = 1 - (1 / IDCG) sum_{x real} g(y_x) / log2(1 + rank~_x)``,

    ``g(y) = 2^y - 1`` (``gain="exp2"``) or ``y`` (``"linear"``), ``IDCG`` the DCG of the real items
    sorted by label. As ``alpha`` grows, ``rank~`` tends to the true rank (ties counting half each).

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels ``>= 0``.
        mask: ``(B, L)`` bool, True = real item.
        alpha: ``> 0``, the sigmoid's scale (larger = closer to the true rank, steeper gradients).
        gain: ``"exp2"`` or ``"linear"``.
        weights: ``(B, L)`` item weights ``>= 0`` (inverse-propensity weights of a click log), or None: each
            list's value is scaled by its labels' mean weight ``m`` and its labels by ``w / m`` (module
            docstring, "Weights"). On a one-click list: the click's weight times the unweighted value; with
            several clicks the ideal-DCG normaliser of the weighted clicks makes it standard practice
            (biased).
        reduction: ``"mean"`` (over contributing lists), ``"sum"`` or ``"none"`` (``(B,)``).

    Returns:
        Scalar, or ``(B,)`` for ``reduction="none"``. Lists without a relevant item give 0.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    check_choice("gain", gain, SOFTRANK_GAINS)
    alpha = check_positive("alpha", alpha)
    lists = _Lists(scores, labels, mask, weights)
    L = scores.shape[1]
    others = lists.mask[:, None, :] & ~torch.eye(L, dtype=torch.bool, device=scores.device)  # (B, L, L)
    above = torch.sigmoid(alpha * (lists.s[:, None, :] - lists.s[:, :, None]))  # [b, x, y]: s_y > s_x
    rank = 1.0 + torch.where(others, above, 0.0).sum(-1)  # (B, L)
    g = _gain(lists.y, gain)  # (B, L), 0 on padding
    dcg = _masked_sum(g / torch.log2(1.0 + rank), lists.mask)  # (B,)
    per_list = 1.0 - _safe_div(dcg, _ideal_dcg(g))
    return lists.reduce(per_list, reduction)


def _sinkhorn_steps(log_p: torch.Tensor, valid: torch.Tensor, neg: float, steps: int) -> torch.Tensor:
    """``steps`` log-space Sinkhorn iterations on ``(B, L, L)``: normalize columns, then rows, over the
    ``valid`` block (invalid entries stay at the finite fill ``neg``)."""
    for _ in range(steps):
        log_p = torch.where(valid, log_p - torch.logsumexp(log_p, dim=1, keepdim=True), neg)
        log_p = torch.where(valid, log_p - torch.logsumexp(log_p, dim=2, keepdim=True), neg)
    return log_p


def _neuralsort_sinkhorn(lists: _Lists, tau: float, iters: int, *, transposed: bool = False) -> torch.Tensor:
    """``(B, L, L)`` NeuralSort relaxation of the sorting permutation, Sinkhorn-scaled (probabilities).

    NeuralSort (Grover et al. 2019, eq. 4), over the ``n`` real items of each list: row ``i`` (1-based rank)
    ``P[i, :] = softmax(((n + 1 - 2i) s - A 1) / tau)`` with ``(A 1)_j = sum_k |s_j - s_k|``. Rows ``i > n``
    and padded columns are 0. Then ``iters`` Sinkhorn iterations (columns, then rows; in log space) make
    the ``n x n`` block approximately doubly stochastic; the last step normalizes rows (ranks) exactly.
    ``transposed=True`` scales ``P^T`` instead (same steps on the transpose) so that the last step
    normalizes every item's distribution over ranks exactly; the result is returned as items x ranks.
    """
    s = lists.s  # (B, L), 0 on padding
    n = lists.n  # (B,)
    L = s.shape[1]
    spread = _masked_sum((s[:, :, None] - s[:, None, :]).abs(), lists.mask[:, None, :])  # (B, L): (A 1)_j
    i = torch.arange(1, L + 1, dtype=s.dtype, device=s.device)  # (L,)
    coef = n[:, None] + 1.0 - 2.0 * i  # (B, L) rows
    rows = i[None, :] <= n[:, None]  # (B, L) real ranks
    valid = rows[:, :, None] & lists.mask[:, None, :]  # (B, ranks, items)
    logits = (coef[:, :, None] * s[:, None, :] - spread[:, None, :]) / tau  # (B, L, L)
    log_p = torch.where(valid, logits, lists.neg)
    log_p = torch.where(valid, torch.log_softmax(log_p, dim=-1), lists.neg)  # NeuralSort's row softmax
    if transposed:
        log_p, valid = log_p.transpose(1, 2), valid.transpose(1, 2)
    block = max(1, math.isqrt(iters))
    use_ckpt = torch.is_grad_enabled() and log_p.requires_grad
    for start in range(0, iters, block):
        steps = min(block, iters - start)
        if use_ckpt:
            log_p = checkpoint(_sinkhorn_steps, log_p, valid, lists.neg, steps, use_reentrant=False)
        else:
            log_p = _sinkhorn_steps(log_p, valid, lists.neg, steps)
    return torch.where(valid, log_p.exp(), 0.0)


def neuralndcg(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    tau: float = 1.0,
    k: int | None = None,
    gain: str = "exp2",
    transposed: bool = False,
    sinkhorn_iters: int = 50,
    weights: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """NeuralNDCG: one minus NDCG@k of the NeuralSort-relaxed sort (Pobrotyn & Białobrzeski 2021).

    With ``P`` the Sinkhorn-scaled NeuralSort matrix of the scores (:func:`_neuralsort_sinkhorn`; row
    ``i`` = rank, column ``j`` = item), ``g_j = g(y_j)`` and the discount ``d(i) = 1 / log2(i + 1)`` for
    ranks ``i <= k`` (0 beyond):

    * vanilla (``transposed=False``): ``NeuralNDCG@k = (1 / IDCG@k) sum_{i <= k} d(i) (P g)_i`` — the
      relaxed sort's "quasi-sorted" gains, discounted by rank;
    * ``transposed=True``: ``NeuralNDCG^T@k = (1 / IDCG@k) sum_j g_j (P^T d)_j`` — every item's gain times
      its expected discount, with Sinkhorn scaling applied to ``P^T`` (its last step normalizes the
      items' rank distributions instead of the ranks' item distributions);

    and ``L = 1 - NeuralNDCG``. The two variants agree when Sinkhorn has converged. As ``tau -> 0``, ``P``
    tends to the sorting permutation and the loss to ``1 - NDCG@k``.

    Cost: ``(B, L, L)`` per Sinkhorn step, ``sinkhorn_iters`` steps; in training, blocks of
    ~``sqrt(sinkhorn_iters)`` steps are checkpointed (recomputed in backward), so about
    ``2 sqrt(sinkhorn_iters)`` ``(B, L, L)`` tensors are kept.

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels ``>= 0``.
        mask: ``(B, L)`` bool, True = real item.
        tau: ``> 0``, NeuralSort's temperature (smaller = closer to the hard sort).
        k: NDCG cutoff (``None`` = whole list).
        gain: ``"exp2"`` or ``"linear"``.
        transposed: the transposed variant.
        sinkhorn_iters: ``>= 0`` Sinkhorn iterations (0 = NeuralSort's row-stochastic matrix as is).
        weights: ``(B, L)`` item weights ``>= 0`` (inverse-propensity weights of a click log), or None: each
            list's value is scaled by its labels' mean weight ``m`` and its labels by ``w / m`` (module
            docstring, "Weights"). On a one-click list: the click's weight times the unweighted value; with
            several clicks the ideal-DCG normaliser of the weighted clicks makes it standard practice
            (biased).
        reduction: ``"mean"`` (over contributing lists), ``"sum"`` or ``"none"`` (``(B,)``).

    Returns:
        Scalar, or ``(B,)`` for ``reduction="none"``. Lists without a relevant item give 0.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    check_choice("gain", gain, SOFTRANK_GAINS)
    tau = check_positive("tau", tau)
    k = check_int("k", k, allow_none=True)
    transposed = check_bool("transposed", transposed)
    sinkhorn_iters = check_int("sinkhorn_iters", sinkhorn_iters, 0)
    lists = _Lists(scores, labels, mask, weights)
    L = scores.shape[1]
    g = _gain(lists.y, gain)  # (B, L), 0 on padding
    ranks = torch.arange(1, L + 1, dtype=lists.dtype, device=scores.device)
    disc = torch.where(ranks <= (L if k is None else k), 1.0 / torch.log2(ranks + 1.0), 0.0)  # (L,)
    P = _neuralsort_sinkhorn(lists, tau, sinkhorn_iters, transposed=transposed)
    if transposed:  # P: (B, items, ranks)
        dcg = (g * (P @ disc)).sum(-1)  # (B,)
    else:  # P: (B, ranks, items)
        dcg = ((P @ g[:, :, None]).squeeze(-1) * disc).sum(-1)
    per_list = 1.0 - _safe_div(dcg, _ideal_dcg(g, k))
    return lists.reduce(per_list, reduction)


# ----------------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------------

LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "listnet": listnet,
    "listmle": listmle,
    "attrank": attrank,
    "softrank": softrank,
    "ranknet": ranknet,
    "lambdaloss": lambdaloss,
    "approxndcg": approxndcg,
    "neuralndcg": neuralndcg,
}


#: float32 values a loss keeps per item and per pair of items of a list (forward, what backward keeps, the
#: gradients): an upper bound of the tensors each one allocates (``tests/training/test_memory.py`` checks it)
_PER_ITEM = 64
_PER_PAIR = {"ranknet": 6, "lambdaloss": 12, "approxndcg": 6}


def loss_memory(name: str, batch_size: int, list_len: int, options: dict[str, Any] | None = None) -> int:
    """Bytes of the tensors the loss ``name`` (a key of :data:`LOSSES`; any other name: a loss of O(B L)
    memory) allocates on a ``(batch_size, list_len)`` batch with ``options``, forward and backward."""
    B, L, options = batch_size, list_len, options or {}
    floats = _PER_ITEM * B * L + _PER_PAIR.get(name, 0) * B * L * L
    if name == "neuralndcg":  # the (B, L, L) NeuralSort matrix, checkpointed Sinkhorn blocks
        floats += (17 + 5 * math.isqrt(int(options.get("sinkhorn_iters", 50)))) * B * L * L
    if name == "softrank":  # the (B, L, L) table of pi, ~sqrt(L) checkpointed (B, L, R) states
        k = options.get("k")
        R = L if k is None else min(int(k), L)
        floats += 10 * B * L * L + (5 * math.isqrt(L) + 8) * B * L * R
    return 4 * floats


def chamfer_memory(
    batch_size: int,
    list_len: int,
    dim: int,
    *,
    pairs: int | None = None,
    max_block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> int:
    """Bytes of the tensors :func:`chamfer_confusion` allocates (forward and backward) on ``(B, L, D)``
    representations: masked and centered copies and their gradients, the argmin indices kept for backward
    (``(B L, B)`` exact, ``(P, L)`` sampled) and one block of distances (:func:`chamfer_block_shape`)."""
    B, L, D = batch_size, list_len, dim
    rows, cols = chamfer_block_shape(B, L, D, max_block_bytes=max_block_bytes, sampled=pairs is not None)
    pair = 8 * L * L + (12 * L * D if pairs is not None else 0)  # the (L, L) distances, gathered rows
    kept = 24 * B * B * L + 16 * B * B if pairs is None else 40 * pairs * L
    block = min(rows * cols, B * B if pairs is None else pairs)  # pairs computed at once
    return 4 * 10 * B * L * (D + 2) + kept + block * pair


def get_loss(name: str) -> Callable[..., torch.Tensor]:
    """The ranking loss registered as ``name`` in :data:`LOSSES`.

    Raises:
        ValueError: unknown name (the message lists the valid names).
    """
    if not isinstance(name, str):
        raise TypeError(f"loss name must be a str, one of {sorted(LOSSES)}, got {type(name).__name__}")
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; valid names: {sorted(LOSSES)}") from None


# ----------------------------------------------------------------------------------------------------
# Query confusion (Chamfer)
# ----------------------------------------------------------------------------------------------------


def chamfer_block_shape(
    batch_size: int,
    list_len: int,
    dim: int,
    *,
    itemsize: int = 4,
    max_block_bytes: int = DEFAULT_BLOCK_BYTES,
    sampled: bool = False,
) -> tuple[int, int]:
    """Block shape ``(q1 queries, q2 queries)`` that :func:`chamfer_confusion` uses within a memory budget.

    A pair ``(q1, q2)`` costs about ``itemsize * 4 L^2`` bytes of block temporaries (the ``(L, L)`` squared
    distances, with margin), plus ``itemsize * 4 L D`` for the gathered item rows when pairs are sampled.
    Blocks are whole ``q1`` rows against all ``B`` queries when one row fits
    (``(max(1, budget // (B * pair)), B)``), else one ``q1`` against as many ``q2`` as fit (at least one),
    so ``q1 * q2 * pair <= max_block_bytes`` unless a single pair is larger than the budget.
    For sampled pairs a block holds ``q1 * q2`` pairs.
    """
    pair = itemsize * (4 * list_len * list_len + (4 * list_len * dim if sampled else 0))
    per_pair_fit = max(1, max_block_bytes // max(pair, 1))
    B = max(batch_size, 1)
    if per_pair_fit >= B:
        return per_pair_fit // B, B
    return 1, per_pair_fit


class _PairMins(torch.autograd.Function):
    """Nearest-neighbour squared distances of a block of query pairs, both directions, with a sparse
    backward.

    ``h (B, L, D)``, ``mask (B, L)``, pairs ``q1, q2 (c,)`` -> ``(c, L)`` rows ``to_q2``: for item ``i``
    of ``q1[p]``, ``min_{j in q2[p]} ||h_i - h_j||^2``, then (``two_sided``) ``(c, L)`` rows ``to_q1``:
    for item ``j`` of ``q2[p]``, ``min_{i in q1[p]} ||h_i - h_j||^2``; 0 at padded items. Both are the
    row and column minima of one ``(c, L, L)`` block ``|a_i|^2 + |b_j|^2 - 2 a_i.b_j`` (``+inf`` where
    ``i`` or ``j`` is padding).

    Why by hand: autograd through two dense ``min`` of the block spends dense ``(c, L, L)`` gradients and
    two batched products in backward for a gradient with one non-zero per row and per column. Here the
    backward is ``d ||a - b||^2 = 2 (a - b) . (da - db)`` at the argmins, two row gathers and two
    ``index_add`` over ``h.view(B L, D)``: O(c L D) instead of O(c L^2 D). Only the indices are saved
    (the rows are gathered again in backward), so blocks need no checkpointing.
    """

    @staticmethod
    def forward(
        ctx, h: torch.Tensor, mask: torch.Tensor, q1: torch.Tensor, q2: torch.Tensor, two_sided: bool
    ):
        A, H = h[q1], h[q2]  # (c, L, D)
        m1, m2 = mask[q1], mask[q2]  # (c, L)
        sq1 = torch.where(m1, (A * A).sum(-1), float("inf"))
        sq2 = torch.where(m2, (H * H).sum(-1), float("inf"))
        dist = torch.baddbmm(sq1[:, :, None] + sq2[:, None, :], A, H.transpose(1, 2), alpha=-2.0)
        L = h.shape[1]
        own = torch.arange(L, device=h.device)
        to_q2, nearest = dist.min(-1)  # (c, L): over j, for each i
        # flat rows of h.view(B L, D): each real item, and its nearest item in the other list
        items, near, m = [q1[:, None] * L + own], [q2[:, None] * L + nearest], [m1]
        out = [torch.where(m1, to_q2, 0.0)]
        if two_sided:
            to_q1, nearest = dist.min(-2)  # (c, L): over i, for each j
            items.append(q2[:, None] * L + own)
            near.append(q1[:, None] * L + nearest)
            m.append(m2)
            out.append(torch.where(m2, to_q1, 0.0))
        ctx.save_for_backward(
            h, torch.cat(items).flatten(), torch.cat(near).flatten(), torch.cat(m).flatten()
        )
        return torch.cat(out)  # (c, L) or (2c, L)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        h, items, near, m = ctx.saved_tensors
        flat = h.reshape(-1, h.shape[-1])  # (B L, D)
        w = torch.where(m, 2.0 * grad.flatten(), 0.0)
        diff = (flat.index_select(0, items) - flat.index_select(0, near)) * w[:, None]
        grad_h = torch.zeros_like(flat)
        grad_h.index_add_(0, items, diff)
        grad_h.index_add_(0, near, diff, alpha=-1.0)
        return grad_h.view_as(h), None, None, None, None


def _chamfer_pairs(
    reps: torch.Tensor,
    mask: torch.Tensor,
    weight: torch.Tensor,
    q1: torch.Tensor,
    q2: torch.Tensor,
    two_sided: bool,
) -> torch.Tensor:
    """``(c,)`` Chamfer distances ``d[q1[p], q2[p]]`` of a block of pairs (both lists non-empty).

    One-sided: ``sum_{i in q1} w_i min_{j in q2} ||h_i - h_j||^2``. Two-sided (QILCM eq. 14) adds
    ``sum_{j in q2} w_j min_{i in q1} ||h_i - h_j||^2``: the column minima of the same block
    (:class:`_PairMins`).
    """
    nearest = _PairMins.apply(reps, mask, q1, q2, two_sided).clamp(min=0.0)  # (c, L) or (2c, L)
    w = torch.cat([weight[q1], weight[q2]]) if two_sided else weight[q1]
    return (w * nearest).sum(-1).view(2 if two_sided else 1, len(q1)).sum(0)


def _in_float32(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Run ``fn(reps, mask, ...)`` in float32 with autocast off: under ``train.precision="bf16"/"fp16"``
    the squared distances ``|a|^2 + |b|^2 - 2 a.b`` would lose every significant digit in 16 bits."""

    @functools.wraps(fn)
    def wrapper(reps: torch.Tensor, mask: torch.Tensor, **kw: Any) -> torch.Tensor:
        if not isinstance(reps, torch.Tensor):
            return fn(reps, mask, **kw)  # fn raises the TypeError
        with torch.autocast(reps.device.type, enabled=False):
            return fn(reps.float() if reps.dtype in (torch.float16, torch.bfloat16) else reps, mask, **kw)

    return wrapper


class _ChamferInputs(NamedTuple):
    """Centered, masked representations and what every block needs (see :func:`chamfer_confusion`)."""

    h: torch.Tensor  # (B, L, D) centered on the batch's mean real item, 0 at padding
    mask: torch.Tensor  # (B, L) bool, True = real item
    weight: torch.Tensor  # (B, L) weight of item i of q in the sum over q's items
    nonempty: torch.Tensor  # (B,) bool
    n_lists: int  # |B|: lists with at least one real item


def _check_chamfer_args(reps: Any, mask: Any, **options: Any) -> None:
    """Validate the inputs and options of :func:`chamfer_confusion` (errors name the option)."""
    check_choice("form", options["form"], CHAMFER_FORMS)
    check_choice("direction", options["direction"], CHAMFER_DIRECTIONS)
    check_choice("reduction", options["reduction"], REDUCTIONS)
    if not isinstance(reps, torch.Tensor) or not isinstance(mask, torch.Tensor):
        raise TypeError("reps and mask must be torch.Tensors")
    if not reps.dtype.is_floating_point or reps.dim() != 3:
        raise ValueError(
            f"reps must be a float tensor of shape (B, L, D), got {reps.dtype} {tuple(reps.shape)}"
        )
    if mask.dtype != torch.bool or mask.shape != reps.shape[:2]:
        raise ValueError(
            f"mask must be a bool tensor of shape {tuple(reps.shape[:2])}, "
            f"got {mask.dtype} {tuple(mask.shape)}"
        )
    check_int("pairs", options["pairs"], allow_none=True)
    check_int("chunk_size", options["chunk_size"], allow_none=True)
    budget = options["max_block_bytes"]
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"max_block_bytes must be an int >= 1, got {budget!r}")
    generator = options["generator"]
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def _chamfer_inputs(reps: torch.Tensor, mask: torch.Tensor, form: str) -> _ChamferInputs:
    """Mask, center (a constant for autograd: distances are shift-invariant and centering shrinks the
    norms, with them the round-off of the expansion) and the per-item weights of ``form``."""
    D = reps.shape[-1]
    zero = torch.zeros((), dtype=reps.dtype, device=reps.device)
    padded = not bool(mask.all())  # without padding the masks change nothing: their passes are skipped
    with torch.no_grad():
        real = torch.where(mask[..., None], reps, zero) if padded else reps
        center = (real.sum((0, 1)) / mask.sum().clamp(min=1)).to(reps.dtype)  # (D,)
    h = reps - center  # (B, L, D)
    if padded:  # padded rows never reach the math
        h = torch.where(mask[..., None], h, zero)
    n_items = mask.sum(-1)  # (B,)
    weight = mask.to(reps.dtype)
    if form == "mean":
        weight = weight / (n_items.clamp(min=1).to(reps.dtype)[:, None] * max(D, 1))
    return _ChamferInputs(
        h=h,
        mask=mask,
        weight=weight,
        nonempty=n_items > 0,
        n_lists=int((n_items > 0).sum()),
    )


#: the fixed cost of one block of the exact Chamfer matrix (forward and backward), in multiply-adds
#: of its distance product: about 0.2 ms on one CPU core (estimated from the times of the exact term on
#: 80 x 100 x 472 with 4 to 20 lists a group side, fastest at 8 to 10, not measured directly)
CHAMFER_BLOCK_COST = 2 * 10**7


def _chamfer_group_size(extents: list[int], dim: int, max_side: int) -> int:
    """Lists a group of the exact Chamfer matrix, for lists sorted by ``extents``: the size (at most
    ``max_side``) minimizing the multiply-adds of one block per unordered pair of groups (a group with
    itself included), each cut to its groups' longest lists: ``D (S^2 + sum_g s_g^2) / 2`` with ``s_g`` =
    lists x longest extent of group ``g`` and ``S`` their sum, plus :data:`CHAMFER_BLOCK_COST` per
    block. Mixed lengths favour small groups (less padding), equal lengths a few lists (the blocks of a
    group with itself compute both orders of its pairs, the overhead favours fewer blocks)."""
    B = len(extents)

    def cost(size: int) -> float:
        sides = [(min(g + size, B) - g) * extents[min(g + size, B) - 1] for g in range(0, B, size)]
        n = len(sides)
        return dim * (sum(sides) ** 2 + sum(s * s for s in sides)) / 2 + CHAMFER_BLOCK_COST * n * (n + 1) / 2

    return min(range(1, max(1, min(max_side, B)) + 1), key=cost)


class _ListGroup(NamedTuple):
    """Consecutive lists ``[start, stop)`` of the length-sorted batch and the items they keep: ``n`` =
    the longest extent among them (every block cuts the group to its first ``n`` items)."""

    start: int
    stop: int
    n: int


def _group_operands(h: torch.Tensor, sq_j: torch.Tensor, g: _ListGroup) -> tuple[torch.Tensor, torch.Tensor]:
    """``(left, right)``, each ``(size n, D + 2)``, with ``left_i . right_j = |h_i|^2 + |h_j|^2 - 2 h_i.h_j``
    for items ``i``, ``j`` of the group (``+inf`` where either is padding): ``left = [h, |h|^2, 1]``,
    ``right = [-2 h, 1, |h|^2]``, so one matrix product gives the squared distances with no bias pass."""
    hg, sq = h[g.start : g.stop, : g.n], sq_j[g.start : g.stop, : g.n, None]
    one = torch.ones_like(sq)
    left = torch.cat([hg, sq, one], -1)
    right = torch.cat([hg * -2.0, one, sq], -1)
    return left.view(-1, left.shape[-1]), right.view(-1, right.shape[-1])


def _min_along(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x.min(dim)``: the minima along ``dim`` and the index of the first of each. On the CPU by NumPy's
    ``argmin`` (vectorized; torch's CPU ``min`` with indices is a scalar loop, 1.2x to 2.4x as long on
    a block of squared distances), the values gathered at those indices."""
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return x.min(dim)
    index = torch.from_numpy(x.numpy().argmin(dim))
    return x.gather(dim, index.unsqueeze(dim)).squeeze(dim), index


class _NearestInLists(torch.autograd.Function):
    """Every item's squared distance to its nearest item in every list, with a sparse backward.

    ``h (B, L, D)`` (0 at padding), ``mask (B, L)``, ``groups``: consecutive :class:`_ListGroup` covering
    the lists with a real item -> ``(B, L, B)``: ``out[q1, i, q2] = min_{j in q2} ||h[q1, i] -
    h[q2, j]||^2``, 0 where ``i`` is padding or ``q2`` has no real item.

    Each unordered pair of groups is one ``(n1, n2)`` block of squared distances (one matrix product,
    :func:`_group_operands`): its row minima over each ``q2`` give ``out`` for the items of the first
    group, its column minima over each ``q1`` the items of the second group (a group with itself: the row
    minima only), so every distance is computed once for both directions.

    Why by hand: autograd through dense ``min`` of the blocks spends dense block-sized products in backward
    for a gradient with one non-zero per ``(i, q2)``: ``d ||h_i - h_j||^2 = 2 (h_i - h_j) . (dh_i -
    dh_j)`` at the argmin ``j``. With ``S`` the ``(B L, B L)`` sparse matrix of the incoming gradient at
    ``(i, j)``, the gradient is ``2 (r + c) h - 2 (S + S^T) h`` (``r``, ``c`` its row and column sums):
    two sparse products with ``B L B`` non-zeros, O(B L B D) instead of O(B L B L D). Only the argmin
    indices are kept (``(B, L, B)``); where ``out`` is 0 by definition the index is the item itself, so
    whatever gradient arrives there contributes nothing.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, mask: torch.Tensor, groups: list[_ListGroup]) -> torch.Tensor:
        B, L, _ = h.shape
        index = torch.int32 if B * L * B < 2**31 else torch.int64  # the sparse matrices' index type
        sq_j = torch.where(mask, (h * h).sum(-1), float("inf"))  # (B, L): a padded item is never the nearest
        out = h.new_zeros(B, L, B)
        own = torch.arange(B * L, dtype=index, device=h.device).view(B, L, 1)
        near = own.expand(B, L, B).clone()  # flat row of h.view(B L, D) of the nearest item
        operands = [_group_operands(h, sq_j, g) for g in groups]
        for a, (g1, (left, _)) in enumerate(zip(groups, operands, strict=True)):
            s1 = g1.stop - g1.start
            first1 = torch.arange(g1.start, g1.stop, device=h.device) * L  # (s1,): flat row of each list
            for g2, (_, right) in zip(groups[a:], operands[a:], strict=True):
                s2 = g2.stop - g2.start
                dist = torch.mm(left, right.T)  # (s1 n1, s2 n2)
                values, j = _min_along(dist.view(s1 * g1.n, s2, g2.n), -1)  # over the items of each q2
                first2 = torch.arange(g2.start, g2.stop, device=h.device) * L
                out[g1.start : g1.stop, : g1.n, g2.start : g2.stop] = values.view(s1, g1.n, s2)
                near[g1.start : g1.stop, : g1.n, g2.start : g2.stop] = (j + first2).view(s1, g1.n, s2)
                if g2 is not g1:  # over the items of each q1: (s1, s2 n2) -> (s2, n2, s1)
                    values, i = _min_along(dist.view(s1, g1.n, s2 * g2.n), 1)
                    out[g2.start : g2.stop, : g2.n, g1.start : g1.stop] = values.T.view(s2, g2.n, s1)
                    near[g2.start : g2.stop, : g2.n, g1.start : g1.stop] = (i + first1[:, None]).T.view(
                        s2, g2.n, s1
                    )
        if not bool(mask.all()):
            valid = mask[:, :, None] & mask.any(-1)[None, None, :]  # (B, L, B)
            out = torch.where(valid, out, 0.0)
            near = torch.where(valid, near, own)
        ctx.save_for_backward(h, near)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        h, near = ctx.saved_tensors
        B, L, D = h.shape
        n = B * L
        flat = h.reshape(n, D)
        g, cols = grad.reshape(-1) * -2.0, near.reshape(-1)  # entry e: row e // B, column cols[e]
        weight = grad.sum(-1).reshape(-1) + torch.zeros_like(flat[:, 0]).index_add_(0, cols, grad.reshape(-1))
        # S h: row i sums g_e h[cols[e]] over its B entries; S^T h: row j over the entries with cols[e] = j
        row_starts = torch.arange(0, n * B, B, dtype=cols.dtype, device=h.device)
        by_col = torch.argsort(cols, stable=True)
        col_starts = torch.zeros_like(row_starts)
        col_starts[1:] = torch.bincount(cols, minlength=n)[:-1].cumsum(0)
        rows_of_col, g_by_col = by_col.div(B, rounding_mode="floor").to(cols.dtype), g[by_col]
        # 2 (r + c) h - 2 S h - 2 S^T h, the -2 in the sparse values
        grad_h = torch.empty_like(flat)
        for span in _column_slices(flat):
            part = flat[:, span].contiguous()
            S_h = F.embedding_bag(cols, part, row_starts, mode="sum", per_sample_weights=g)
            S_t_h = F.embedding_bag(rows_of_col, part, col_starts, mode="sum", per_sample_weights=g_by_col)
            grad_h[:, span] = S_h.add_(S_t_h)
        return grad_h.addcmul_(flat, (2.0 * weight)[:, None]).view_as(h), None, None


#: bytes of the columns of a dense matrix that a sparse product on the CPU takes at a time
#: (:func:`_column_slices`): about a core's L2 cache
SPARSE_PRODUCT_BYTES = 2**20


def _column_slices(x: torch.Tensor) -> list[slice]:
    """Slices of the columns of ``x (n, D)`` for sparse products (gathers of weighted rows) one slice at a
    time: on the CPU, slices of about :data:`SPARSE_PRODUCT_BYTES` (the products gather rows of ``x`` at
    random, and slices that stay in cache took 0.4x the time of the whole ``(8000, 472)`` float32 matrix
    at once); elsewhere all columns at once."""
    n, D = x.shape
    width = D if x.device.type != "cpu" else max(8, SPARSE_PRODUCT_BYTES // max(n * x.element_size(), 1))
    return [slice(start, start + width) for start in range(0, D, width)]


def _chamfer_exact(x: _ChamferInputs, max_side: int, two_sided: bool, reduction: str) -> torch.Tensor:
    """Every ordered pair: the one-directional matrix ``m`` (:class:`_NearestInLists`), then ``m + m^T``
    (QILCM eq. 14: ``d(q1, q2) = m[q1, q2] + m[q2, q1]``) for the two-sided form.

    The lists are taken in the order of their extent (last real item + 1), in groups of at most
    ``max_side`` (:func:`_chamfer_group_size`), each group cut to its longest list, so padding is
    mostly never multiplied: in a batch of mixed lengths (MQ2008's top 100: 5 to 100 items, mean 20)
    the padded product is many times the real one."""
    B = x.h.shape[0]
    if B == 0:
        return _chamfer_reduce(x.h.reshape(-1)[:0].view(0, 0), x, two_sided, reduction)
    positions = torch.arange(1, x.mask.shape[1] + 1, device=x.mask.device)
    extent = torch.where(x.mask, positions, 0).amax(-1)  # (B,)
    ext = extent.tolist()
    in_order = all(a <= b for a, b in itertools.pairwise(ext))  # e.g. lists of one length: no reordering
    order = None if in_order else torch.argsort(extent, stable=True)
    h, mask, weight = x.h, x.mask, x.weight
    if order is not None:
        ext = extent[order].tolist()
        h, mask, weight = h[order], mask[order], weight[order]
    step = _chamfer_group_size(ext, x.h.shape[-1], max_side)
    groups = [_ListGroup(s, min(s + step, B), ext[min(s + step, B) - 1]) for s in range(0, B, step)]
    groups = [g for g in groups if g.n > 0]  # lists without a real item: every distance to them is 0
    nearest = _NearestInLists.apply(h, mask, groups)  # (B, L, B)
    matrix = (weight[:, :, None] * nearest.clamp(min=0.0)).sum(1)  # (B, B), lists in extent order
    if order is not None:
        back = torch.argsort(order)
        matrix = matrix[back][:, back]
    return _chamfer_reduce(matrix, x, two_sided, reduction)


def _chamfer_reduce(matrix: torch.Tensor, x: _ChamferInputs, two_sided: bool, reduction: str) -> torch.Tensor:
    """The one-directional ``(B, B)`` matrix -> eq. 14's (diagonal exactly 0) and its reduction."""
    B = matrix.shape[0]
    matrix = matrix.masked_fill(torch.eye(B, dtype=torch.bool, device=matrix.device), 0.0)
    if two_sided:
        matrix = matrix + matrix.T
    if reduction == "none":
        return matrix
    total = matrix.sum()
    return total if reduction == "sum" else total / max(x.n_lists, 1) ** 2


def _chamfer_sampled(
    x: _ChamferInputs,
    pairs: int,
    generator: torch.Generator | None,
    block: int,
    two_sided: bool,
    reduction: str,
) -> torch.Tensor:
    """``pairs`` ordered pairs drawn uniformly with replacement from the non-empty lists, ``block``
    pairs at a time."""
    h, device, M = x.h, x.h.device, x.n_lists
    if M > 0:
        draw = torch.randint(
            M, (2, pairs), generator=generator, device=device if generator is None else generator.device
        ).to(device)
        ids = torch.nonzero(x.nonempty).flatten()  # (M,)
        q1, q2 = ids[draw[0]], ids[draw[1]]  # (P,)
    else:
        q1 = q2 = torch.zeros(pairs, dtype=torch.long, device=device)
    off_diag = torch.nonzero(q1 != q2).flatten()  # diagonal pairs are exactly 0: not computed
    parts = [
        _chamfer_pairs(h, x.mask, x.weight, q1[idx], q2[idx], two_sided) for idx in off_diag.split(block)
    ]
    values = torch.cat(parts) if parts else h.reshape(-1)[:0]  # empty, still in the graph
    sampled = h.new_zeros(pairs).index_put((off_diag,), values)  # (P,), 0 on q1 == q2
    if reduction == "none":
        return sampled
    mean = sampled.mean()
    return mean if reduction == "mean" else mean * M**2


@_in_float32
def chamfer_confusion(
    reps: torch.Tensor,
    mask: torch.Tensor,
    *,
    form: str = "sum",
    direction: str = "two-sided",
    pairs: int | None = None,
    generator: torch.Generator | None = None,
    chunk_size: int | None = None,
    max_block_bytes: int = DEFAULT_BLOCK_BYTES,
    reduction: str = "mean",
) -> torch.Tensor:
    """QILCM's query-confusion loss: mean Chamfer distance between the item sets of two queries.

    QILCM eq. 13-14 (``form="sum"``, ``direction="two-sided"``: the defaults), over the normalized item
    representations ``h`` (QILCM eq. 8):

        ``L_conf = 1/|B|^2 sum_{q1} sum_{q2} d_CH(q1, q2)``,
        ``d_CH(q1, q2) = sum_{i in q1} min_{j in q2} ||h_{q1,i} - h_{q2,j}||^2
        + sum_{j in q2} min_{i in q1} ||h_{q1,i} - h_{q2,j}||^2``.

    ``direction="one-sided"`` keeps only the first sum (over all ordered pairs its mean is exactly half of eq.
    13, and its ``(B, B)`` matrix is not symmetric). ``form="mean"`` is a scale-free variant: each sum over
    the items of a list is divided by that list's
    length and by ``D``. The paper's sum form grows with the list length and ``D``: with ~300-dimensional
    unit-variance representations it is typically 10^4-10^5 times a ranking loss, so its weight
    ``lambda`` (QILCM eq. 10) must be tiny.

    Definitions at the edges: the sums run over real items only (padded rows of ``reps`` may hold
    anything, even NaN); a pair with a list without real items has ``d = 0`` (no nearest point);
    ``|B|`` is the number of lists with at least one real item (so padding the batch with empty lists
    changes nothing). The diagonal ``d_CH(q, q)`` is exactly 0 mathematically (every point is its own
    nearest point); the expansion below would leave round-off, so it is set to exactly 0, with zero
    gradient (its true gradient).

    Computation: no Python loop over pairs or items. Squared distances use
    ``||a||^2 + ||b||^2 - 2 a.b`` (one matrix product per block) on representations centered on the mean
    real item of the batch (distances are shift-invariant; centering reduces round-off), clamped at 0,
    so two identical items in different queries give about ``eps * ||h - mean||^2`` rather than exactly 0.
    Exact: the one-directional matrix ``m[q1, q2] = sum_{i in q1} min_{j in q2} ||.||^2`` is computed and
    the two-sided one is ``m + m^T`` (no second pass). The ``(B, L, B, L)`` tensor is never built:
    the lists, sorted by length, are cut into groups, each group trimmed to its longest list, and the
    blocks (one per unordered pair of groups, within the budget of :func:`chamfer_block_shape`) are
    computed one at a time, so padding is mostly never multiplied; a block's row minima give one
    direction and its column minima the other, so each distance is computed once. Autograd keeps only
    the argmin indices, ``(B, L, B)`` integers at most, so training memory is bounded too; the backward
    is two sparse products with ``B L B`` non-zeros (:class:`_NearestInLists`). On top of the block
    budget come tensors of the size of ``reps`` (a masked copy, its gradient). Ties in the min send the
    gradient to the first nearest point (a valid subgradient).

    Sampled estimate (``pairs=P``): ``P`` ordered pairs ``(q1, q2)`` are drawn uniformly with replacement
    from the non-empty lists (``q1 == q2`` allowed, value 0). Each draw has expectation
    ``1/|B|^2 sum_{q1,q2} d_CH``, so the mean over draws is an unbiased estimate of ``L_conf``, and of its
    gradient; cost O(P L^2 D) instead of O(|B|^2 L^2 D). Both directions of a pair are the row and
    column minima of the same ``(L, L)`` block, with a hand-written sparse backward that keeps only the
    argmin indices (:class:`_PairMins`).

    Args:
        reps: ``(B, L, D)`` float item representations.
        mask: ``(B, L)`` bool, True = real item.
        form: ``"sum"`` (paper, default) or ``"mean"``.
        direction: ``"two-sided"`` (QILCM eq. 14, default) or ``"one-sided"`` (the first sum only).
        pairs: ``None`` = exact over all pairs; an int ``P >= 1`` = sampled estimate.
        generator: ``torch.Generator`` for the sampled pairs.
        chunk_size: exact: at most this many queries a side of a block; sampled: ``chunk_size * B``
            pairs per block; ``None`` = from ``max_block_bytes``.
        max_block_bytes: memory budget of one block's temporaries when ``chunk_size`` is None
            (default 64 MiB).
        reduction: exact: ``"mean"`` (eq. 13), ``"sum"`` (``sum_{q1,q2} d_CH``) or ``"none"`` (the
            ``(B, B)`` matrix ``d_CH[q1, q2]``, symmetric when two-sided). Sampled: ``"mean"`` (unbiased
            for eq. 13), ``"sum"`` (mean times ``|B|^2``, unbiased for the double sum) or ``"none"`` (the
            ``(P,)`` sampled values).

    Returns:
        Scalar, ``(B, B)`` or ``(P,)``.
    """
    _check_chamfer_args(
        reps,
        mask,
        form=form,
        direction=direction,
        reduction=reduction,
        pairs=pairs,
        chunk_size=chunk_size,
        max_block_bytes=max_block_bytes,
        generator=generator,
    )
    B, L, D = reps.shape
    x = _chamfer_inputs(reps, mask, form)
    if chunk_size is not None:
        rows, cols = min(chunk_size, max(B, 1)), max(B, 1)
    else:
        rows, cols = chamfer_block_shape(
            B, L, D, itemsize=reps.element_size(), max_block_bytes=max_block_bytes, sampled=pairs is not None
        )
    two_sided = direction == "two-sided"
    if pairs is None:  # square blocks of at most rows x cols pairs (chunk_size: at most chunk_size a side)
        side = rows if chunk_size is not None else math.isqrt(rows * cols)
        return _chamfer_exact(x, side, two_sided, reduction)
    return _chamfer_sampled(x, pairs, generator, rows * cols, two_sided, reduction)
