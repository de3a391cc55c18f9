"""ARSM-L2R: categorical relevance levels from an MLP, trained with the ARSM estimator (Dadaneh et al.).

``phi_j = T_theta(x_j)`` (``C`` logits per item, eq. 1); ``z_j ~ Cat(softmax(phi_j))``; training
minimizes ``E[loss(z, y)]`` (eq. 2) for a non-differentiable ``loss`` (negative NDCG@10 by default) with
the gradient of :mod:`ctxrank.arsm` (Algorithm 1, eq. 6-7). Defaults are the paper's: ``C = 20``, one
hidden layer of 500 tanh units, Glorot (Xavier uniform) weights and zero biases (section 3.4).

Prediction (section 2.4): ``score = sum_{c=1..C} c * p_c`` (``score="expected"``); also ``"argmax"``
(the most probable level, ties broken by expected level) and ``"expected_gain"`` (``sum_c (2^(c-1) - 1)
p_c``, the expected NDCG gain of the level ``c - 1``).

The paper trains with Adam at lr 1e-4 for 2000 epochs, keeping the best validation epoch; ctxrank's
defaults (lr 1e-3, early stopping) apply unless the run config says otherwise.

Choices the paper leaves open (options): the cutoff of "truncated NDCG" (``loss_k = 10``); the order of
equal sampled levels in the loss (``ties``): with ``C = 20`` levels every list longer than 20 has ties,
and ranking them by input position would let the objective reward the file order (OHSUMED's training
files are ordered in a way that correlates with the labels), which the continuous test score cannot
use; ``ties="random"`` (default) orders them at random per list and draw (seeded: the training RNG of
the Dirichlet draws), ``"position"`` by input position as :mod:`ctxrank.metrics` does; training labels
must lie in ``0..C-1`` (the model's levels are meant to cover the true levels, section 2.4).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ctxrank._checks import check_bool, check_choice, check_dropout, check_int, check_int_list
from ctxrank.arsm import ARSM_LOSSES, ARSM_TIES, arsm_surrogate, get_arsm_loss
from ctxrank.data.lists import ListBatch
from ctxrank.models.base import ACTIVATIONS, FLOAT_BYTES, ModelTraits, RankingModule, make_mlp, mlp_floats

SCORES = ("expected", "argmax", "expected_gain")


@dataclass(frozen=True)
class ArsmL2RConfig:
    """Attributes:
    n_levels: ``C``, the number of categorical relevance levels (ARSM-L2R paper: 20).
    hidden: hidden layer widths of ``T_theta`` (ARSM-L2R paper: one layer of 500).
    activation: one of ``ctxrank.models.base.ACTIVATIONS`` (ARSM-L2R paper: tanh).
    loss: the non-differentiable loss, a name in ``ctxrank.arsm.ARSM_LOSSES`` (``ndcg`` = negative NDCG).
    loss_k: its cutoff (``None`` = whole list).
    score: prediction score, one of ``expected`` (ARSM-L2R paper), ``argmax``, ``expected_gain``.
    dedupe: evaluate each distinct pseudo-action once (exact; faster when many swaps coincide).
    dropout: dropout after each hidden layer.
    ties: order of equal sampled levels in the loss: ``random`` (per list and draw) or ``position``.
    """

    #: the search space of ``ctxrank tune``: run-config key -> distribution (format: ``ctxrank.tune``)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "model_params.n_levels": ("choice", (5, 10, 20)),
        "model_params.hidden": ("choice", ((100,), (500,))),
        "model_params.dropout": ("float", 0.0, 0.5),
    }

    n_levels: int = 20
    hidden: tuple[int, ...] = (500,)
    activation: str = "tanh"
    loss: str = "ndcg"
    loss_k: int | None = 10
    score: str = "expected"
    dedupe: bool = True
    dropout: float = 0.0
    ties: str = "random"

    def __post_init__(self) -> None:
        check_int("model_params.n_levels", self.n_levels, 2)
        check_choice("model_params.ties", self.ties, ARSM_TIES)
        check_int_list("model_params.hidden", self.hidden)
        for name, value, valid in (
            ("activation", self.activation, ACTIVATIONS),
            ("loss", self.loss, ARSM_LOSSES),
            ("score", self.score, SCORES),
        ):
            if value not in valid:
                raise ValueError(f"model_params.{name}: unknown {value!r}; valid: {', '.join(sorted(valid))}")
        check_int("model_params.loss_k", self.loss_k, allow_none=True)
        check_bool("model_params.dedupe", self.dedupe)
        check_dropout("model_params.dropout", self.dropout)


class ArsmL2R(RankingModule):
    """``(B, L, F) -> phi (B, L, C) -> scores (B, L)``; trained with :func:`ctxrank.arsm.arsm_surrogate`."""

    name = "arsm"
    config_class = ArsmL2RConfig
    traits = ModelTraits(default_loss="", own_objective="arsm")

    def __init__(
        self, n_features: int, config: ArsmL2RConfig, *, categorical_cardinalities: Sequence[int] = ()
    ) -> None:
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        self.net = make_mlp(self.input_dim, config.hidden, config.activation, config.dropout, config.n_levels)
        for m in self.net:
            if isinstance(m, nn.Linear):  # Glorot initialization (ARSM-L2R paper, section 3.4)
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        self.arsm_loss = get_arsm_loss(config.loss, config.loss_k)
        levels = torch.arange(1, config.n_levels + 1, dtype=torch.float32)
        self.register_buffer("levels", levels, persistent=False)
        self.register_buffer("gains", torch.exp2(levels - 1) - 1, persistent=False)

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """The MLP ``T_theta`` per item; when training, the estimator's ``(B, L, C)`` draws and gradients and
        its ``(B, L, S)`` pseudo-actions (``S = C (C - 1) / 2`` swaps, int64) with their losses."""
        C = self.config.n_levels
        mlp = mlp_floats(self.input_dim, self.config.hidden, C, training=training)
        estimator = 12 * C + 16 * (C * (C - 1) // 2) + 16 if training else 3 * C
        per_item = self.input_floats(training=training) + mlp + estimator
        return FLOAT_BYTES * batch_size * list_len * per_item

    def logits(self, features: torch.Tensor, categorical: torch.Tensor | None = None) -> torch.Tensor:
        """``phi``: ``(B, L, F)`` -> ``(B, L, C)`` (eq. 1)."""
        return self.net(self.item_inputs(features, categorical))

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        p = torch.softmax(self.logits(features, categorical), dim=-1)  # (B, L, C)
        expected = p @ self.levels
        if self.config.score == "expected":
            return expected
        if self.config.score == "expected_gain":
            return p @ self.gains
        # argmax level, ties (and equal argmax across items) ordered by the expected level
        top = p.argmax(-1).to(expected.dtype) + 1
        return top + expected / (self.config.n_levels + 1)

    def training_loss(
        self, batch: ListBatch, loss_fn: Callable[..., torch.Tensor] | None = None
    ) -> torch.Tensor:
        """The ARSM surrogate of ``E[loss(z, y)]`` (value: the mean sampled loss); ignores ``loss_fn``."""
        labels = batch.labels[batch.mask]
        C = self.config.n_levels
        if labels.numel() and (
            labels.min() < 0 or labels.max() > C - 1 or not torch.equal(labels, labels.round())
        ):
            raise ValueError(
                f"ARSM-L2R with n_levels={C} needs integer labels in 0..{C - 1}; got labels in "
                f"[{labels.min().item():g}, {labels.max().item():g}] (raise model_params.n_levels)"
            )
        phi = self.logits(batch.features, batch.categorical)
        cfg = self.config
        return arsm_surrogate(phi, batch.labels, batch.mask, self.arsm_loss, dedupe=cfg.dedupe, ties=cfg.ties)
