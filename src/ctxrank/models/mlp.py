"""MLPScorer: a feed-forward network scoring each item independently (no list context).

With ``hidden=()`` it is the linear neural network of ListNet (Cao et al., ICML 2007).
ListNet = MLPScorer + the ``listnet`` loss (top-one probability cross entropy).
MultinomialLogit = the same linear scorer + the log-likelihood of the chosen item under
``softmax(scores)`` (McFadden's conditional logit), the classical baseline of choice modelling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ctxrank._checks import check_dropout, check_int_list
from ctxrank.models.base import ACTIVATIONS, Ranker, make_mlp


@dataclass(frozen=True)
class MLPConfig:
    """Attributes:
    hidden: widths of the hidden layers; ``()`` = a linear scorer.
    activation: one of ``ctxrank.models.base.ACTIVATIONS``.
    dropout: dropout probability after each hidden layer.
    """

    #: the search space of ``ctxrank tune``: run-config key -> distribution (format: ``ctxrank.tune``)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "loss": (
            "choice",
            ("listnet", "listmle", "attrank", "ranknet", "lambdaloss", "approxndcg", "neuralndcg"),
        ),
        "model_params.hidden": ("choice", ((64,), (64, 32), (128, 64), (256, 128))),
        "model_params.dropout": ("float", 0.0, 0.5),
    }

    hidden: tuple[int, ...] = (64, 32)
    activation: str = "relu"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        check_int_list("model_params.hidden", self.hidden)
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"model_params.activation: unknown {self.activation!r}; "
                f"valid: {', '.join(sorted(ACTIVATIONS))}"
            )
        check_dropout("model_params.dropout", self.dropout)


@dataclass(frozen=True)
class ListNetConfig(MLPConfig):
    """ListNet's defaults: the paper's linear neural network (no hidden layer)."""

    #: a linear scorer with its own loss: only the shared options (learning rate, transform, the loss's
    #: temperature) are searched
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    hidden: tuple[int, ...] = ()


class MLPScorer(Ranker):
    """s_i = MLP(x_i): (B, L, F) -> (B, L)."""

    name = "mlp"
    config_class = MLPConfig
    default_loss = "listnet"

    def __init__(self, n_features: int, config: MLPConfig, *, categorical_cardinalities: Sequence[int] = ()):
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        self.net = make_mlp(self.input_dim, config.hidden, config.activation, config.dropout, 1)

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.net(self.item_inputs(features, categorical)).squeeze(-1)


class ListNet(MLPScorer):
    """ListNet (Cao et al. 2007): a linear scorer trained with the top-one probability cross entropy."""

    name = "listnet"
    config_class = ListNetConfig
    default_loss = "listnet"


class MultinomialLogit(MLPScorer):
    """Multinomial (conditional) logit (McFadden 1974): linear utilities ``v_j = w . x_j + b`` and
    ``P(choose j) = softmax(v)_j``, fitted by maximum likelihood of the chosen items.

    The loss is ListNet's cross entropy with ``label_transform="identity"``: for one chosen item per
    list (label 1, the others 0) that is exactly ``-log softmax(v)_chosen``; with several positives it is
    the mean log-likelihood over them. Categorical columns enter through learned embeddings (i.e.
    alternative-specific constants per category when the embedding is 1-wide).
    """

    name = "mnl"
    config_class = ListNetConfig
    default_loss = "listnet"
    default_loss_params: ClassVar[Mapping[str, Any]] = {"label_transform": "identity"}
