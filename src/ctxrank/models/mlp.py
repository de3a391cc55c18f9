"""MLPScorer: a feed-forward network scoring each item independently (no list context).

With ``hidden=()`` it is the linear neural network of ListNet (Cao et al., ICML 2007).
ListNet = MLPScorer + the ``listnet`` loss (top-one probability cross entropy).
MultinomialLogit = McFadden's conditional logit (linear utilities, additive alternative-specific
constants), fitted to its maximum likelihood by ``ctxrank.training.full_batch``: the classical
baseline of choice modelling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ctxrank._checks import (
    check_bool,
    check_choice,
    check_dropout,
    check_int,
    check_int_list,
    check_non_negative,
    check_positive,
)
from ctxrank.models.base import ACTIVATIONS, FLOAT_BYTES, ModelTraits, RankingModule, make_mlp, mlp_floats


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


class MLPScorer(RankingModule):
    """s_i = MLP(x_i): (B, L, F) -> (B, L)."""

    name = "mlp"
    config_class = MLPConfig
    traits = ModelTraits(
        scores_alone=True,  # s_i = MLP(x_i)
        summary="MLP: a feed-forward network scoring each item independently (no list context).",
    )

    def __init__(self, n_features: int, config: MLPConfig, *, categorical_cardinalities: Sequence[int] = ()):
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        self.net = make_mlp(self.input_dim, config.hidden, config.activation, config.dropout, 1)

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """The input and the MLP's layers, per item (``RankingModule.batch_memory``)."""
        mlp = mlp_floats(self.input_dim, self.config.hidden, 1, training=training)
        return FLOAT_BYTES * batch_size * list_len * (self.input_floats(training=training) + mlp)

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
    traits = ModelTraits(
        scores_alone=True,
        summary=(
            "ListNet (Cao, Qin, Liu, Tsai, Li; ICML 2007): a linear scorer trained with the top-one "
            "probability cross entropy."
        ),
    )


#: the default ``model_params.l2`` of ``mnl``: chosen on validation
MNL_L2_GRID: tuple[float, ...] = (0.0, 1e-4, 1e-3, 1e-2)


@dataclass(frozen=True)
class MNLConfig:
    """Attributes:
    alternative_specific: every feature also gets one coefficient per category of the *first*
        categorical column (the alternative: ``alt`` in the built-in choice datasets), i.e.
        alternative-specific coefficients; the only way a feature that is constant within a situation
        (income, trip purpose) can change a choice probability.
    l2: L2 penalty on the coefficients (all but the bias), on the mean negative log-likelihood per
        situation: ``NLL / Q + l2 / 2 * ||theta||^2``. Several values (the default: 0 and a log grid):
        each is fitted and the one with the best validation log-likelihood is kept; 0 is left out when
        the maximum likelihood does not exist (separation, ``ctxrank.training.separation``).
        ``(0.0,)``: the plain maximum-likelihood estimate only.
    solver: ``"lbfgs"`` (SciPy L-BFGS-B, exact gradient) or ``"newton"`` (SciPy trust-exact, exact
        gradient and Hessian; for up to a few hundred coefficients).
    max_iter: iteration cap of the solver.
    gtol: stop when the largest gradient component of the mean NLL is below this.
    """

    #: the search space of ``ctxrank tune`` with the transform (the L2 penalty is chosen on validation by
    #: the fit itself; no learning rate or loss: maximum likelihood)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "model_params.alternative_specific": ("choice", (False, True)),
    }

    alternative_specific: bool = False
    l2: tuple[float, ...] = MNL_L2_GRID
    solver: str = "lbfgs"
    max_iter: int = 1000
    gtol: float = 1e-7

    def __post_init__(self) -> None:
        check_bool("model_params.alternative_specific", self.alternative_specific)
        values = self.l2 if isinstance(self.l2, (tuple, list)) else (self.l2,)
        if not values:
            raise ValueError("model_params.l2 must hold at least one penalty (0.0 = none)")
        object.__setattr__(self, "l2", tuple(check_non_negative("model_params.l2", v) for v in values))
        check_choice("model_params.solver", self.solver, MNL_SOLVERS)
        check_int("model_params.max_iter", self.max_iter)
        check_positive("model_params.gtol", self.gtol)


MNL_SOLVERS = ("lbfgs", "newton")


class MultinomialLogit(RankingModule):
    """Multinomial (conditional) logit (McFadden 1974): utilities linear in the parameters,

        v_j = w . x_j + b + sum_c a_c[k_cj]  (+ B[k_0j] . x_j with ``alternative_specific``)

    with ``a_c`` one constant per category of categorical column c (alternative-specific constants;
    code 0, unknown, is a category like the others) and ``P(choose j) = softmax(v)_j`` over the
    situation's alternatives. ``ctxrank train`` / ``run_training`` fit it to its **maximum likelihood**
    with a full-batch SciPy solver (``traits.full_batch``: :mod:`ctxrank.training.full_batch`), not by
    SGD epochs; ``fit`` (SGD) still works on it, with ListNet's cross entropy with
    ``label_transform="identity"`` = ``-log softmax(v)_chosen``. The bias ``b`` cancels in the softmax.
    """

    name = "mnl"
    config_class = MNLConfig
    traits = ModelTraits(
        default_loss_params={"label_transform": "identity"},
        scores_alone=True,  # the utility v_j of an alternative is its own
        full_batch=True,
        summary="MNL: the multinomial (conditional) logit (McFadden 1974), fitted to its maximum likelihood.",
    )

    def __init__(self, n_features: int, config: MNLConfig, *, categorical_cardinalities: Sequence[int] = ()):
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        self.embedding = None  # constants enter additively, not through an embedding
        self.net = nn.Sequential(nn.Linear(n_features, 1))
        cards = self.categorical_cardinalities
        self.constants = nn.ModuleList(nn.Embedding(c, 1) for c in cards)
        self.specific = nn.Embedding(cards[0], n_features) if config.alternative_specific and cards else None
        with torch.no_grad():
            for p in (*self.constants.parameters(), *(self.specific.parameters() if self.specific else ())):
                p.zero_()

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """Utilities, one constant a categorical column, the alternative-specific products (per item)."""
        n = self.n_features
        per_item = n + 4 + 2 * len(self.constants) + (2 * n if self.specific is not None else 0)
        return FLOAT_BYTES * batch_size * list_len * (3 if training else 2) * per_item

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if features.shape[-1] != self.n_features:
            raise ValueError(f"model expects {self.n_features} features, got {features.shape[-1]}")
        v = self.net(features).squeeze(-1)  # (B, L)
        if not self.categorical_cardinalities:
            return v
        if categorical is None:
            raise ValueError("this model was trained with categorical columns; none were given")
        for i, table in enumerate(self.constants):
            codes = categorical[..., i]
            v = v + table(torch.where(codes < table.num_embeddings, codes, 0)).squeeze(-1)
        if self.specific is not None:
            codes = categorical[..., 0]
            codes = torch.where(codes < self.specific.num_embeddings, codes, 0)
            v = v + (self.specific(codes) * features).sum(-1)
        return v

    def coefficient_labels(self, data: Any) -> dict[str, list[str]]:
        """A name for every coefficient, by parameter: the feature (``w``), ``column=level`` (constants;
        ``<unknown>`` for code 0), ``feature|alt=level`` (alternative-specific). ``data``: a
        RankingData of the fitted layout; levels named from its ``info["categorical_encoder"]``."""
        features = list(data.feature_names) or [f"f{i + 1}" for i in range(self.n_features)]
        vocab = data.info.get("categorical_encoder", {}).get("vocab", {})

        def levels(c: int) -> list[str]:
            name = data.categorical_names[c] if c < len(data.categorical_names) else f"cat{c + 1}"
            known = vocab.get(name, [])
            return [
                f"{name}={'<unknown>' if k == 0 else (known[k - 1] if k <= len(known) else k)}"
                for k in range(self.categorical_cardinalities[c])
            ]

        out = {"net.0.weight": features, "net.0.bias": ["bias"]}
        out.update({f"constants.{c}.weight": levels(c) for c in range(len(self.constants))})
        if self.specific is not None:
            out["specific.weight"] = [f"{f}|{level}" for level in levels(0) for f in features]
        return out
