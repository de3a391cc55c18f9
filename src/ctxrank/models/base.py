"""The model contract every ranker follows.

``forward(features, mask, *, init_scores=None, categorical=None) -> scores``

* ``features`` float (B, L, F), ``mask`` bool (B, L) (True = real item), ``init_scores`` (B, L) or None,
  ``categorical`` int64 (B, L, C) codes (0 = unknown) or None.
* ``scores`` float (B, L); values at padded positions are arbitrary (losses and metrics mask them).

``serving_scores(features, mask, categorical)`` is what an exported file computes
(``ctxrank.export``): ``forward``'s scores of the real items, in eval mode, by the fastest traceable route
the model knows (default: ``forward`` itself; QILCM folds its query normalization into a matrix).

``training_loss(batch, loss_fn)`` is what the trainer minimizes. The default is the ranking loss of
the scores; models with extra terms (QILCM's query confusion, ARSM's estimator) override it.

``batch_memory(B, L, training=...)`` is an upper bound of the bytes of the tensors one batch of ``B``
lists padded to ``L`` items allocates in the model (its activations, and with ``training`` what
autograd keeps for backward and the gradients of activations), counted as float32 values per item
(and per pair of items where a model compares items); ``state_memory`` the bytes of its weights (and of
gradients, Adam's moments and a transient copy when training). ``ctxrank.training.memory`` checks both
against ``train.max_memory_bytes`` before a batch is built; ``tests/training/test_memory.py`` checks that they
bound the tensors actually allocated, for every model of the registry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from ctxrank._checks import build_dataclass, check_model_params
from ctxrank.data.lists import ListBatch
from ctxrank.losses import LOSSES
from ctxrank.models._dropout import Dropout

#: bytes of one float32 value: the unit of the memory estimates (``RankingModule.batch_memory``)
FLOAT_BYTES = 4
#: copies of the weights a training step holds: the weights, their gradients, Adam's two moments and one
#: transient copy (a permuted weight of an einsum, the flattened weights of a fused recurrent layer)
TRAINING_COPIES = 5

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "sigmoid": nn.Sigmoid,
}


def make_activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; valid: {', '.join(sorted(ACTIVATIONS))}")
    return ACTIVATIONS[name]()


def make_mlp(
    in_dim: int, hidden: Sequence[int], activation: str, dropout: float, out_dim: int
) -> nn.Sequential:
    """``Linear -> activation (-> Dropout)`` per hidden width, then a ``Linear`` to ``out_dim``."""
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), make_activation(activation)]
        if dropout > 0:
            layers.append(Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


def mlp_floats(in_dim: int, hidden: Sequence[int], out_dim: int, *, training: bool) -> int:
    """Float32 values per item that a :func:`make_mlp` network keeps alive: every layer's input and
    output, with their activations, dropout masks and, when training, their gradients (an upper bound)."""
    return (3 if training else 2) * (in_dim + 2 * sum(hidden) + out_dim)


def embedding_dim(cardinality: int) -> int:
    """Embedding size rule for a categorical column with ``cardinality`` codes (incl. the unknown code):
    ``min(50, ceil(cardinality / 2))``, at least 1 (the fast.ai-style rule of thumb, capped at 50)."""
    return max(1, min(50, (cardinality + 1) // 2))


class CategoricalEmbedding(nn.Module):
    """One learned embedding per categorical column, concatenated: int64 (..., C) -> float (..., E)."""

    def __init__(self, cardinalities: Sequence[int]) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(int(c), embedding_dim(int(c))) for c in cardinalities)
        self.out_dim = sum(t.embedding_dim for t in self.tables)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        if codes.shape[-1] != len(self.tables):
            raise ValueError(f"expected {len(self.tables)} categorical columns, got {codes.shape[-1]}")
        # unseen codes beyond the vocabulary fall back to the reserved unknown code 0
        parts = [
            t(torch.where(codes[..., i] < t.num_embeddings, codes[..., i], 0))
            for i, t in enumerate(self.tables)
        ]
        return torch.cat(parts, dim=-1)


@dataclass(frozen=True)
class ModelTraits:
    """What the code around a model needs to know of it, as one value: a neural model class's
    ``traits``, a baseline registry entry's ``traits``; a wrapper (missing indicator, residual
    correction) has its inner model's.

    Attributes:
        default_loss: the loss a run uses when it names none ("" for a model without one).
        default_loss_params: options of ``default_loss`` the model implies.
        own_objective: non-empty: the model trains its own objective (e.g. ``"arsm"``),
            ``training_loss`` ignores ``loss_fn`` and a run's ``loss`` option does not apply.
        rerank_features: the ``"rank"`` / ``"score"`` features added when re-ranking.
        reads_order: the scores depend on the row order of a list (a recurrent encoder reads it: DCM,
            DLCM); ``reads_row_order(model_params)`` of the registry entry adds the options that make it.
        scores_alone: an item's score depends on that item alone (no list context): the model can score
            rows without their query ids (``predict(X)`` of the estimators, with a normalizer that is not
            per query).
        batching: training batches under ``train.batching = "model"``: ``"buckets"`` (queries of
            similar length: the loss is a mean of per-list terms, so batch composition changes only
            padding cost and SGD noise) or ``"random"`` (a loss that couples the lists of a batch, e.g.
            QILCM eq. 13).
        run_defaults: run-config values the model implies where a run does not set them
            (``RunConfig.from_dict``, hence every entrance, and the estimators' defaults):
            ``"transform"`` and ``"train.<field>"`` keys, e.g. DASALC's
            ``{"transform": "log1p-zscore", "train.input_noise": 1.5}``.
        full_batch: a run fits it to its maximum likelihood, all queries at once (the conditional logit
            ``mnl``; ``ctxrank.training.full_batch``), unless ``rerank.residual`` trains it by SGD.
        torch_module: a torch module trained by ``ctxrank.training`` (False: a baseline fitted by its own
            library on whole lists in memory); the code around a model asks its registry entry for the
            capabilities this implies (``streams``, ``distributed``, ...), not this.
        reads_missing: the model reads missing feature values (NaN) itself (LightGBM); every other
            model refuses them (:func:`ctxrank.data.ranking_data.missing_message`).
        reads_categorical: the model reads categorical columns itself (a neural model's embeddings,
            LightGBM's categorical features); the other baselines refuse data with categorical columns
            rather than ignore them.
        summary: one line for docs/models.md where the model's module docstring describes another model
            too (empty: that docstring's first line).
    """

    default_loss: str = "listnet"
    default_loss_params: Mapping[str, Any] = field(default_factory=dict)
    own_objective: str = ""
    rerank_features: tuple[str, ...] = ()
    reads_order: bool = False
    scores_alone: bool = False
    batching: str = "buckets"
    run_defaults: Mapping[str, Any] = field(default_factory=dict)
    full_batch: bool = False
    torch_module: bool = True
    reads_missing: bool = False
    reads_categorical: bool = True
    summary: str = ""


class RankingModule(nn.Module):
    """Base class of the neural models (an ``nn.Module``; the scikit-learn estimators are
    ``ctxrank.Ranker``): subclasses set ``name``, ``config_class``, their ``traits`` and implement
    forward."""

    name: ClassVar[str] = ""
    config_class: ClassVar[type] = object
    traits: ClassVar[ModelTraits] = ModelTraits()

    def __init__(
        self, n_features: int, config: Any, *, categorical_cardinalities: Sequence[int] = ()
    ) -> None:
        super().__init__()
        if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
            raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}"
            )
        self.n_features = n_features
        self.config = config
        self.categorical_cardinalities = tuple(int(c) for c in categorical_cardinalities)
        self.embedding = (
            CategoricalEmbedding(self.categorical_cardinalities) if categorical_cardinalities else None
        )

    @classmethod
    def reads_row_order(cls, params: Mapping[str, Any]) -> bool:
        """Whether the model built from ``params`` (``model_params``) reads the row order of a list:
        ``traits.reads_order``, or an option that makes it (the rank embedding of ``attn`` and
        ``setrank``)."""
        return cls.traits.reads_order

    @classmethod
    def make_config(cls, params: Mapping[str, Any] | None = None) -> Any:
        """The config dataclass of ``params``: every value within the bounds a saved model is loaded with
        (``_checks.check_model_params``: integers <= 2^24, lists <= 64), then the class's own checks."""
        params = dict(params or {})
        check_model_params("model_params", params)
        return build_dataclass(cls.config_class, params, "model_params")

    @property
    def input_dim(self) -> int:
        """Per-item input width after categorical embeddings are appended."""
        return self.n_features + (self.embedding.out_dim if self.embedding is not None else 0)

    @staticmethod
    def check_mask(features: torch.Tensor, mask: torch.Tensor) -> None:
        """``mask`` must be a bool (B, L) tensor matching ``features`` (B, L, F)."""
        if mask.dtype != torch.bool or mask.shape != features.shape[:2]:
            raise ValueError(
                f"mask must be a bool tensor of shape {tuple(features.shape[:2])}, "
                f"got {mask.dtype} {tuple(mask.shape)}"
            )

    def adopt(self, inner: RankingModule) -> None:
        """Become a wrapper of ``inner`` (a missing-value indicator, a residual correction): its weights
        under ``inner.``, its name, config, categorical columns and traits (loss defaults, re-ranking and
        batching needs: e.g. QILCM's random batches). Call after ``nn.Module.__init__`` (not
        ``RankingModule.__init__``: the inner model owns the config and the embeddings)."""
        self.inner = inner
        self.name = inner.name
        self.n_features = inner.n_features
        self.config = inner.config
        self.categorical_cardinalities = inner.categorical_cardinalities
        self.embedding = None
        self.traits = inner.traits

    def item_inputs(
        self, features: torch.Tensor, categorical: torch.Tensor | None, *, clip: float | None = None
    ) -> torch.Tensor:
        """(B, L, F) features (+ (B, L, C) codes) -> (B, L, input_dim); ``clip``: clamp them to
        ``[-clip, clip]`` (the ``input_clip`` overflow guard of QILCM, ``attn`` and SetRank)."""
        if features.shape[-1] != self.n_features:
            raise ValueError(f"model expects {self.n_features} features, got {features.shape[-1]}")
        if self.embedding is None:
            x = features
        elif categorical is None:
            raise ValueError("this model was trained with categorical columns; none were given")
        else:
            x = torch.cat([features, self.embedding(categorical)], dim=-1)
        return x if clip is None else x.clamp(-clip, clip)

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """Bytes of the tensors a batch of ``batch_size`` lists padded to ``list_len`` items allocates in
        this model (module docstring); the ranking loss's own are ``ctxrank.losses.loss_memory``."""
        raise NotImplementedError(f"{type(self).__name__} must estimate its batch memory")

    def input_floats(self, *, training: bool) -> int:
        """Float32 values per item of the model's input (features and categorical embeddings, copied
        where they are concatenated) and their gradients when training."""
        if self.embedding is None:
            return self.input_dim
        return (3 if training else 2) * self.input_dim

    def state_memory(self, *, training: bool) -> int:
        """Bytes of the weights and buffers; when ``training`` also their gradients, Adam's two moments
        and a transient copy (:data:`TRAINING_COPIES`). Works on the ``meta`` device (nothing read)."""
        weights = sum(p.numel() * p.element_size() for p in self.parameters())
        buffers = sum(b.numel() * b.element_size() for b in self.buffers())
        return weights * (TRAINING_COPIES if training else 1) + buffers

    def serving_scores(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``forward``'s scores for serving (eval mode, no ``init_scores``); the scores of real items
        equal ``forward``'s within float32 rounding. Models override it with a faster equivalent form."""
        return self(features, mask, categorical=categorical)

    def score_batch(self, batch: ListBatch) -> torch.Tensor:
        return self(batch.features, batch.mask, init_scores=batch.init_scores, categorical=batch.categorical)

    def training_loss(self, batch: ListBatch, loss_fn: Callable[..., torch.Tensor]) -> torch.Tensor:
        """The scalar the trainer minimizes (default: the ranking loss averaged over lists); when
        ``loss_fn`` is the model's ``default_loss``, its ``default_loss_params`` apply unless bound."""
        loss_fn = with_default_options(loss_fn, self.traits.default_loss, self.traits.default_loss_params)
        return loss_fn(self.score_batch(batch), batch.labels, batch.mask)


def with_default_options(
    loss_fn: Callable[..., torch.Tensor], loss_name: str, defaults: Mapping[str, Any]
) -> Callable[..., torch.Tensor]:
    """``loss_fn`` with ``defaults`` bound when it is the registered ``loss_name`` loss (possibly a
    ``functools.partial`` of it) and those options are not bound already."""
    if not defaults:
        return loss_fn
    fn, bound = loss_fn, {}
    while isinstance(fn, functools.partial):
        bound = {**fn.keywords, **bound}
        fn = fn.func
    if fn is not LOSSES.get(loss_name):
        return loss_fn
    missing = {k: v for k, v in defaults.items() if k not in bound}
    return functools.partial(loss_fn, **missing) if missing else loss_fn
