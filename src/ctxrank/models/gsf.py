"""GSF: Groupwise Scoring Functions (Ai, Wang, Bendersky, Golbandi, Najork; ICTIR 2019).

"Learning Groupwise Multivariate Scoring Functions Using Deep Neural Networks", arXiv:1811.04415.
**Sources.** Only the paper's abstract could be read when this was checked, so no section or equation number
of it is cited; the group sampling and the aggregation are checked against the authors' implementation in
TF-Ranking
(``tensorflow_ranking/python/model.py``, ``_GroupwiseRankingModel``, ``_form_group_indices_nd``,
``_rolling_window_indices``).

A scoring function ``g`` reads the features of a GROUP of ``m`` items at once, concatenated, and gives
``m`` scores, one per item of the group; an item's final score aggregates what every group containing
it gave it::

    g : R^(m F) -> R^m,   g(x_pi) = MLP([x_pi_1; x_pi_2; ...; x_pi_m])          the groupwise scorer
    s_i = sum over groups pi containing i of g(x_pi)_t,  t = the slot of i in pi   the final score

over the groups ``pi`` of the list, ordered ``m``-tuples of distinct items (permutations of size
``m``). ``m = 1`` is the plain univariate scorer (``mlp``); with ``m > 1`` a score depends on
the other items, the list context.

**Groups** (``model_params.groups``). All ordered ``m``-tuples of distinct items of a list of ``n`` are
``n! / (n - m)!``: exponential in ``m``, and already quadratic for pairs. Sampling groups makes it
practical; two forms:

* ``"all"``: the exact form, every ordered ``m``-tuple of distinct real items (each real item is in
  ``m (n-1)! / (n-m)!`` of them). Permutation equivariant; cost ``O(n^m)`` per list (the memory
  estimate refuses what does not fit). A list with fewer than ``m`` real items has no group: its
  scores are 0.
* ``"window"`` (default): the sampling of the authors' TF-Ranking implementation. The real items of a
  list are put in an order and the groups are the ``n`` cyclic windows of ``m`` consecutive items of
  that order, ``pi_g = (o_g, o_(g+1), ..., o_(g+m-1))`` with indices mod ``n``: every real item is in
  exactly ``m`` groups, once at each slot, and only real items enter a group (a list shorter than ``m``
  wraps around, repeating items). In TRAINING the order is a fresh uniformly random permutation of
  the real items at every step (torch's generator, which ``train.seed`` seeds: runs stay
  reproducible); at EVALUATION, prediction and in an exported graph it is the row order of the list
  (deterministic; in re-ranking, the initial ranking, so a group holds neighbours in it). Scores then
  depend on the row order (``reads_order``), like DLCM's. TF-Ranking shuffles in its EVAL mode too and
  keeps the row order in PREDICT only; its option to average over several shuffles
  (``num_shuffles``) is not offered.

**Aggregation** (``model_params.reduce``): ``"sum"`` is the plain sum over groups above; ``"mean"``
(default) divides it by the number of groups the item is in (``m`` for windows, a per-list constant
for ``"all"``), as TF-Ranking does (``div_no_nan(scores, counts)``): the same ranking, with a scale
that does not grow with the list length (the softmax losses' temperature stays the same for short and
long lists).

**Group size** ``m = 2`` by default: the smallest group that compares items (``m = 1`` has no context),
and the one for which the exact form is affordable (``O(n^2)``); larger groups are an option and a
tuned parameter (``SEARCH_SPACE``: 1, 2, 4, 8).

**Padding**: every group of a real item holds real items only (``"all"``: a tuple with a padded item
has weight 0; ``"window"``: windows run over the real items, mod ``n``); the scores of real items do
not depend on padding (at evaluation; in training the random order is drawn for the padded length, so
the same list draws other groups when padded otherwise). Padded positions get finite, arbitrary scores.

**Computation**: the first layer of ``g`` is linear in the concatenation, ``W [x_1; ...; x_m] =
sum_t W_t x_t``, so ``P_t = W_t x`` is computed once per item (``(B, L, H)``) and a group's first
pre-activation is the sum of its members' ``P_t`` (a gather for windows, a broadcast over ``m`` axes
for ``"all"``); the rest of ``g`` runs on the ``(B, groups, H)`` pre-activations.

Shapes: features ``(B, L, F)`` -> ``P`` ``(m, B, L, H)`` -> group outputs ``(B, L, m)`` (windows) or
``(B, L, ..., L, m)`` (``"all"``, ``m`` axes of ``L``) -> scores ``(B, L)``.

**Loss**: ``default_loss = "listnet"`` with ``label_transform = "identity"``: the softmax cross entropy
``-sum_i (y_i / sum_j y_j) log softmax(s)_i`` (TF-Ranking's ``softmax_loss``, in which the authors
implemented GSF).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ctxrank._checks import check_choice, check_dropout, check_int, check_int_list
from ctxrank.models._dropout import Dropout
from ctxrank.models.base import (
    ACTIVATIONS,
    FLOAT_BYTES,
    ModelTraits,
    RankingModule,
    make_activation,
    mlp_floats,
)

__all__ = ["GROUPS", "GSF", "REDUCTIONS", "GSFConfig"]

#: ``model_params.groups`` values (module docstring)
GROUPS: tuple[str, ...] = ("window", "all")
#: ``model_params.reduce`` values (module docstring)
REDUCTIONS: tuple[str, ...] = ("mean", "sum")


@dataclass(frozen=True)
class GSFConfig:
    """Attributes:
    group_size: ``m``, the items a group holds (1 = a univariate scorer).
    groups: ``"window"`` (cyclic windows over a random order in training, the row order at evaluation;
        each item in ``m`` groups) or ``"all"`` (every ordered ``m``-tuple of distinct items: exact,
        ``O(n^m)``).
    hidden: hidden widths of the groupwise scorer ``g`` (an MLP from ``m F`` inputs to ``m`` scores).
    activation: activation after each hidden layer (``ctxrank.models.base.ACTIVATIONS``).
    dropout: dropout probability after each hidden layer (training only).
    reduce: ``"mean"`` (the sum over an item's groups divided by their number) or ``"sum"`` (the plain
        sum).
    """

    #: the search space of ``ctxrank tune``: run-config key -> distribution (format: ``ctxrank.tune``)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "loss": ("choice", ("listnet", "listmle", "ranknet", "lambdaloss", "approxndcg")),
        "model_params.group_size": ("choice", (1, 2, 4, 8)),
        "model_params.hidden": ("choice", ((64, 32, 16), (128, 64), (256, 128, 64))),
        "model_params.dropout": ("float", 0.0, 0.5),
    }

    group_size: int = 2
    groups: str = "window"
    hidden: tuple[int, ...] = (64, 32, 16)
    activation: str = "relu"
    dropout: float = 0.0
    reduce: str = "mean"

    def __post_init__(self) -> None:
        check_int("model_params.group_size", self.group_size, maximum=64)
        check_choice("model_params.groups", self.groups, GROUPS)
        check_int_list("model_params.hidden", self.hidden)
        check_choice("model_params.activation", self.activation, tuple(sorted(ACTIVATIONS)))
        check_dropout("model_params.dropout", self.dropout)
        check_choice("model_params.reduce", self.reduce, REDUCTIONS)


def _slot_view(p: torch.Tensor, t: int, m: int) -> torch.Tensor:
    """``p`` ``(B, L, H)`` as ``(B, 1, .., L, .., 1, H)`` with ``L`` on axis ``1 + t`` of ``m`` axes."""
    for _ in range(t):
        p = p.unsqueeze(1)
    for _ in range(m - 1 - t):
        p = p.unsqueeze(-2)
    return p


class GSF(RankingModule):
    """Groupwise scoring function: ``(B, L, F)`` features -> ``(B, L)`` scores (module docstring)."""

    name = "gsf"
    config_class = GSFConfig
    #: with ``groups = "window"`` the evaluation groups follow the row order of the list
    traits = ModelTraits(default_loss_params={"label_transform": "identity"}, reads_order=True)

    @classmethod
    def reads_row_order(cls, params: Mapping[str, Any]) -> bool:
        """Windows follow the row order at evaluation; the exact form (``groups = "all"``) does not."""
        return params.get("groups", "window") != "all"

    def __init__(self, n_features: int, config: GSFConfig, *, categorical_cardinalities: Sequence[int] = ()):
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        m = config.group_size
        widths = (*config.hidden, m)
        self.first = nn.Linear(m * self.input_dim, widths[0])  # W = [W_1 ... W_m] of g's first layer
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers.append(make_activation(config.activation))
            if config.dropout > 0:
                layers.append(Dropout(config.dropout))
            layers.append(nn.Linear(a, b))
        self.rest = nn.Sequential(*layers)  # empty: g is linear

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """Per item: the input and its ``m`` first-layer projections ``P_t``; per group (``L`` windows or
        ``L^m`` tuples a list): the gathered projections, their sum, the rest of ``g`` and the scores."""
        c, L = self.config, list_len
        m, width = c.group_size, (*c.hidden, c.group_size)[0]
        rest = mlp_floats(width, c.hidden[1:], m, training=training) if c.hidden else 2 * m
        copies = 3 if training else 2
        per_item = self.input_floats(training=training) + copies * (m * width + 6 * m + 8)
        if c.groups == "window":
            per_group, groups = copies * (m + 1) * width + rest + 4 * m, 1
        else:
            per_group, groups = copies * (2 * width + m + 2) + rest + 2 * m, L ** (m - 1)
        return FLOAT_BYTES * batch_size * L * (per_item + groups * per_group)

    def projections(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``P_t = W_t x`` for the slots ``t = 0..m-1``: ``(B, L, F)`` -> ``m`` tensors ``(B, L, H)``."""
        F = self.input_dim
        return [x @ self.first.weight[:, t * F : (t + 1) * F].T for t in range(self.config.group_size)]

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        self.check_mask(features, mask)
        p = self.projections(self.item_inputs(features, categorical))
        if self.config.groups == "all":
            return self._all_groups(p, mask)
        return self._windows(p, mask)

    def _all_groups(self, p: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """Every ordered ``m``-tuple of distinct real items: ``(B, L, .., L, m)`` outputs, masked and
        summed per item and slot."""
        m, L = self.config.group_size, mask.shape[1]
        pre = sum(_slot_view(p_t, t, m) for t, p_t in enumerate(p)) + self.first.bias  # (B, L^m.., H)
        out = self.rest(pre)  # (B, L, .., L, m)
        valid = _slot_view(mask[..., None], 0, m).squeeze(-1)  # (B, L, 1.., 1)
        for t in range(1, m):
            valid = valid & _slot_view(mask[..., None], t, m).squeeze(-1)
        idx = torch.arange(L, device=mask.device)
        for t in range(m):
            for u in range(t + 1, m):  # distinct items in slots t and u
                ne = _slot_view(idx[None, :, None], t, m) != _slot_view(idx[None, :, None], u, m)
                valid = valid & ne.squeeze(-1)
        zero = torch.zeros((), dtype=out.dtype, device=out.device)
        total = torch.zeros_like(mask, dtype=out.dtype)  # (B, L)
        count = torch.zeros_like(mask, dtype=out.dtype)
        axes = list(range(1, m + 1))
        for t in range(m):
            others = [a for a in axes if a != 1 + t]
            scored = torch.where(valid, out[..., t], zero)
            total = total + (scored.sum(dim=others) if others else scored)
            hits = valid.to(out.dtype)
            count = count + (hits.sum(dim=others) if others else hits)
        return total / count.clamp(min=1) if self.config.reduce == "mean" else total

    def _order(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``pos`` (B, L): each item's place in the window order (real items ``0..n-1``, padding after);
        ``perm`` (B, L): its inverse (the item at each place). Training: a uniformly random order of the
        real items (torch's generator); evaluation: the row order."""
        B, L = mask.shape
        steps = torch.arange(L, device=mask.device).expand(B, L)
        if self.training:
            keys = torch.rand(B, L, device=mask.device) + (~mask).to(torch.float32) * 2  # real first
            perm = torch.argsort(keys, dim=1)
            pos = torch.argsort(perm, dim=1)
            return pos, perm
        real = mask.to(torch.int64)
        n = real.sum(dim=1, keepdim=True)
        pos = torch.where(mask, real.cumsum(1) - 1, n + (1 - real).cumsum(1) - 1)
        perm = torch.zeros_like(pos).scatter(1, pos, steps)
        return pos, perm

    def _windows(self, p: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """The ``L`` cyclic windows of ``m`` consecutive places of the order (mod the real count ``n``);
        window ``g`` is real for ``g < n``; item at place ``q`` is in windows ``q - t`` (mod ``n``) at slot
        ``t``."""
        m = self.config.group_size
        B, L = mask.shape
        H = p[0].shape[-1]
        pos, perm = self._order(mask)
        n = mask.sum(dim=1, keepdim=True).clamp(min=1)  # (B, 1)
        places = torch.arange(L, device=mask.device)[None, :]  # (1, L): window starts g
        pre = self.first.bias
        for t, p_t in enumerate(p):
            member = perm.gather(1, (places + t) % n)  # (B, L): the item in slot t of window g
            pre = pre + p_t.gather(1, member[..., None].expand(B, L, H))
        out = self.rest(pre)  # (B, L, m): window g's score for its slot t
        window = (pos[..., None] - torch.arange(m, device=mask.device)) % n[..., None]  # (B, L, m)
        total = out.gather(1, window).sum(dim=-1)  # (B, L)
        return total / m if self.config.reduce == "mean" else total
