"""QILCM: Query-Invariant Listwise Context Model (Zhu, Chen and He, AAAI 2019).

Shapes: B lists, L items (padded), F input features, D = F + E (E = encoder width, 100), mask (B, L).

* Item encoder (eq. 1-2): x^(1) = ELU(W1 x + b1), x^(2) = ELU(W2 x^(1) + b2), h = [x ; x^(2)]  (B, L, D).
  ``x`` holds the numerical features (min-max normalized to [0, 1] on train: the run config's
  ``transform = "minmax"``), learned embeddings of categorical columns, and the initial ranker's rank
  (and optionally score) as extra numerical features when re-ranking (``rerank_features``).
* Item pooling (eq. 3-5): a = masked softmax_i(MLP_att(h_i)) (B, L); c = sum_i a_i h_i (B, D);
  refined h~_i = [c (.) h_i ; h_i] [B, L, 2D].
* Query normalization (eq. 6-8, parameter-free): c-bar = sum_i a_i h~_i, sigma-bar^2 = sum_i a_i
  (h~_i - c-bar)^2, h-bar_i = (h~_i - c-bar) / (sigma-bar + eps)  [B, L, 2D].
* Ranking layer (eq. 9): s = masked softmax_i(MLP_rank(h-bar_i)). ``forward`` returns the logits
  MLP_rank(h-bar_i) (B, L): the softmax is monotone, so they rank identically, and the AttRank loss
  applies the (log-)softmax itself (numerically safer than log(softmax)).
* Objective (eq. 10): L = L_rank + lambda * L_conf, L_rank = AttRank (eq. 11-12: the ``attrank`` loss,
  ``form="qilcm"``, the model's default loss), L_conf = Chamfer query-confusion loss (eq. 13-14) between
  the normalized item sets h-bar of every pair of lists in the batch (``ctxrank.losses.chamfer_confusion``).

Choices where the paper is silent (all options of :class:`QILCMConfig`):

* sigma-bar = sqrt(var + ``var_floor``): about 20% of (query, feature) pairs of MQ2008 are constant
  within a query, and d sqrt(v)/dv is infinite at v = 0 (NaN gradients); the floor (1e-12) keeps the
  gradient finite and changes sigma-bar by at most 1e-6. ``eps`` (1e-5, the batch-norm default) is
  the paper's epsilon of eq. 8.
* ``input_clip`` (1e6): the inputs ``x`` are clamped to ``[-input_clip, input_clip]`` before the
  encoder. Min-max normalized features live in [0, 1] on train, but a test value far outside the
  training range (a 1e30 in a raw column) maps far outside it too, and eq. 5 multiplies
  representations (``c (.) h``): beyond ~1e19 float32 overflows to inf and the QN layer turns it into
  NaN. The clamp never acts on data within a million times the training range; ``None`` disables it.
* Padded items get attention weight exactly 0 (masked softmax), so they never change c, c-bar,
  sigma-bar, the scores of real items or the Chamfer term.
* Chamfer term: ``confusion_form="sum"`` with ``confusion_direction="two-sided"`` (the defaults) is the
  paper's eq. 13-14: eq. 14 sums the nearest-neighbour squared distances from q1 to q2 *and* from q2 to
  q1, between 2D-dimensional vectors (10^4-10^5 times the ranking loss on MQ2008).
  ``confusion_direction="one-sided"`` keeps only the first sum (half the term); ``confusion_form="mean"``
  averages each sum over its list's items and the dimensions (scale-free). ``confusion_pairs`` samples that
  many ordered query pairs (an unbiased estimate).
* Batches: eq. 13 averages over the queries of a training batch, so which queries share a batch
  changes the objective. ``QILCM.traits.batching = "random"``: unless ``train.batching`` says otherwise,
  ``fit`` draws batches uniformly at random instead of grouping queries of similar length
  (docs/training.md).
* Serving (:meth:`QILCM.serving_scores`, what ``ctxrank export`` writes): the same scores by fewer
  operations. Since ``sum_i a_i = 1``, the mean of eq. 6 is ``c-bar = [c (.) c ; c]`` and the centered
  h~ is ``[c (.) d_i ; d_i]`` with ``d_i = h_i - c``; eq. 7 is ``[c^2 (.) v ; v]`` with ``v = sum_i a_i
  d_i^2``. The first layer of MLP_rank, ``W = [W1 W2]`` (H x 2D), applied to h-bar of eq. 8 is then
  ``(W1 diag(c / (sigma-bar_1 + eps)) + W2 diag(1 / (sigma-bar_2 + eps))) d_i + b``: one (H x D) matrix
  per list, applied to the D-wide ``d_i``. The (B, L, 2D) tensors of eq. 5-8 are never built and the
  layer does half the multiply-adds (QILCM's default widths, 136 features: 210k instead of 271k per
  item). Every item MLP runs on the flattened (B*L, .) items.
* ``dropout`` (default 0, the paper's model; not in the paper): dropout after every hidden ELU layer of
  the encoder (eq. 1), MLP_att (eq. 3) and MLP_rank (eq. 9), in training only. Padded items stay out of
  every sum (the masks come after it); at evaluation and in the served graph it is the identity.
* Ablations (Table 3): variant 1 = ``pooling="mean"`` (plain average pooling, unweighted mean and
  variance); variant 2 = ``confusion_weight=0``; variant 3 = ``confusion_weight=0, query_norm=False``.
  Without the QN layer a non-zero confusion weight applies the Chamfer term to h~.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

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
from ctxrank.data.lists import ListBatch
from ctxrank.losses import CHAMFER_DIRECTIONS, chamfer_confusion, chamfer_memory
from ctxrank.models._dropout import Dropout
from ctxrank.models.base import FLOAT_BYTES, ModelTraits, RankingModule, make_mlp, mlp_floats

VARIANTS = {
    "full": {},
    "variant1": {"pooling": "mean"},
    "variant2": {"confusion_weight": 0.0},
    "variant3": {"confusion_weight": 0.0, "query_norm": False},
}


@dataclass(frozen=True)
class QILCMConfig:
    """Attributes (paper defaults: encoder 100 ELUs, MLPs of 256 and 128 ELUs):
    encoder_width: width of both ELU layers of eq. 1.
    att_hidden: hidden widths of MLP_att (eq. 3).
    rank_hidden: hidden widths of MLP_rank (eq. 9).
    pooling: ``"attention"`` (eq. 3-4) or ``"mean"`` (ablation variant 1).
    query_norm: apply the QN layer (eq. 6-8); False = ablation variant 3.
    confusion_weight: lambda of eq. 10 (0 = no confusion term: variants 2 and 3).
    confusion_form: ``"sum"`` (QILCM eq. 14's sums of squared distances) or ``"mean"`` (scale-free).
    confusion_direction: ``"two-sided"`` (QILCM eq. 14: both directions) or ``"one-sided"``.
    confusion_pairs: None = all ordered pairs of the batch; an int = that many sampled pairs.
    eps: epsilon of eq. 8.
    var_floor: added to the variance under the square root (finite gradients for constant features).
    input_clip: clamp the inputs to ``[-input_clip, input_clip]`` (overflow guard; None = off).
    dropout: dropout after each hidden ELU layer of the encoder, MLP_att and MLP_rank (0 = the paper's).
    """

    #: the search space of ``ctxrank tune``: run-config key -> distribution (format: ``ctxrank.tune``)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "loss": ("choice", ("attrank", "listnet", "listmle", "lambdaloss", "approxndcg", "neuralndcg")),
        "model_params.encoder_width": ("choice", (50, 100, 200)),
        "model_params.att_hidden": ("choice", ((128,), (256, 128))),
        "model_params.rank_hidden": ("choice", ((128,), (256, 128), (512, 256))),
        "model_params.confusion_weight": ("log", 1e-6, 1e-2),  # lambda of eq. 10
        "model_params.confusion_form": ("choice", ("sum", "mean")),
        "model_params.confusion_direction": ("choice", ("two-sided", "one-sided")),
        "model_params.dropout": ("float", 0.0, 0.5),
    }

    encoder_width: int = 100
    att_hidden: tuple[int, ...] = (256, 128)
    rank_hidden: tuple[int, ...] = (256, 128)
    pooling: str = "attention"
    query_norm: bool = True
    confusion_weight: float = 1e-4
    confusion_form: str = "sum"
    confusion_direction: str = "two-sided"
    confusion_pairs: int | None = None
    eps: float = 1e-5
    var_floor: float = 1e-12
    input_clip: float | None = 1e6
    dropout: float = 0.0

    def __post_init__(self) -> None:
        check_int("model_params.encoder_width", self.encoder_width)
        check_int_list("model_params.att_hidden", self.att_hidden)
        check_int_list("model_params.rank_hidden", self.rank_hidden)
        check_choice("model_params.pooling", self.pooling, ("attention", "mean"))
        check_bool("model_params.query_norm", self.query_norm)
        check_non_negative("model_params.confusion_weight", self.confusion_weight)
        check_choice("model_params.confusion_form", self.confusion_form, ("sum", "mean"))
        check_choice("model_params.confusion_direction", self.confusion_direction, CHAMFER_DIRECTIONS)
        check_int("model_params.confusion_pairs", self.confusion_pairs, allow_none=True)
        check_positive("model_params.eps", self.eps)
        check_positive("model_params.var_floor", self.var_floor)
        if self.input_clip is not None:
            check_positive("model_params.input_clip", self.input_clip)
        check_dropout("model_params.dropout", self.dropout)


class QILCMOutput(NamedTuple):
    """Everything QILCM computes for a batch (for inspection and the training loss)."""

    scores: torch.Tensor  # (B, L) MLP_rank logits (eq. 9 before the softmax)
    attention: torch.Tensor  # (B, L) a_i of eq. 3 (0 at padding)
    context: torch.Tensor  # (B, D) c of eq. 4
    normalized: torch.Tensor  # (B, L, 2D) h-bar of eq. 8 (h~ when query_norm is off)


def _elu_dropout(p: float) -> list[nn.Module]:
    """ELU, then dropout when ``p > 0`` (none at 0: the paper's layers, state-dict keys unchanged)."""
    return [nn.ELU(), *([Dropout(p)] if p > 0 else [])]


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the list dimension with padded entries exactly 0 (all-padded rows give zeros)."""
    neg = torch.finfo(logits.dtype).min
    weights = torch.softmax(logits.masked_fill(~mask, neg), dim=-1)
    return weights * mask


def context_and_deviations(
    h: torch.Tensor, a: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c, d)``: the context ``c = sum_i a_i h_i`` of eq. 4 (B, 1, D) and the deviations ``d_i = h_i
    - c`` (B, L, D) of the items ``h`` (B, L, D) under the weights ``a`` (B, L) (summing to 1 over the
    real items; 0 at padding).

    Both are taken around the list's smallest real value ``m`` of each dimension: ``c = m + sum_i a_i
    (h_i - m)``, ``d_i = (h_i - m) - sum_j a_j (h_j - m)``. A dimension constant within the list (a
    categorical column or a per-query feature with one value, a one-item list) then has ``d = 0`` and
    ``c = h`` exactly; summed directly, ``c`` misses ``h`` by a rounding error that depends on the row
    order, and eq. 8 divides ``d`` by ``sigma-bar + eps`` (about 1e-5 there): every score of the list
    moved by up to 1e-3 when its rows were shuffled. The error of ``d`` is now relative to the
    dimension's spread within the list, not to its value. An all-padded list gives ``c = 0``."""
    real = mask.unsqueeze(-1)  # (B, L, 1)
    low = torch.where(real, h, torch.full_like(h, float("inf"))).amin(dim=1, keepdim=True)  # (B, 1, D)
    low = torch.where(real.any(dim=1, keepdim=True), low, torch.zeros_like(low))
    shifted = h - low  # exact where h_i = m (Sterbenz), in particular for constant dimensions
    mean = torch.bmm(a.unsqueeze(1), shifted)  # (B, 1, D)
    return low + mean, shifted - mean


class _RealItems:
    """Applies a per-item module to the real items of a ``(B, L, K)`` tensor only, packed as
    ``(N, K)``; padded rows come back 0. The MLPs of eq. 1-3 and 9 act item by item, so this changes no
    real item's value, and a batch of mixed lengths (MQ2008's top 100: 5 to 100 items, mean 20) skips
    most of the padded work. Without padding the module gets the tensor as it is."""

    def __init__(self, mask: torch.Tensor) -> None:
        self.index = None if bool(mask.all()) else mask.nonzero(as_tuple=True)

    def __call__(self, module: nn.Module, t: torch.Tensor) -> torch.Tensor:
        if self.index is None:
            return module(t)
        out = module(t[self.index])  # (N, K')
        return out.new_zeros(*t.shape[:2], out.shape[-1]).index_put(self.index, out)


class QILCM(RankingModule):
    """Query-invariant listwise context model (see the module docstring for the equations)."""

    name = "qilcm"
    config_class = QILCMConfig
    traits = ModelTraits(
        default_loss="attrank",
        rerank_features=("rank",),
        batching="random",  # eq. 13 pairs the queries of a batch: batches of any lengths (docs/training.md)
    )

    def __init__(
        self, n_features: int, config: QILCMConfig, *, categorical_cardinalities: Sequence[int] = ()
    ):
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        e, p = config.encoder_width, config.dropout
        self.encoder = nn.Sequential(  # eq. 1-2: two ELU layers of width e
            nn.Linear(self.input_dim, e), *_elu_dropout(p), nn.Linear(e, e), *_elu_dropout(p)
        )
        d = self.input_dim + e
        self.mlp_att = make_mlp(d, config.att_hidden, "elu", p, 1)
        self.mlp_rank = make_mlp(2 * d, config.rank_hidden, "elu", p, 1)

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """Per item: the clamped input, the encoder (eq. 1-2), ``h``, MLP_att (eq. 3) and MLP_rank (eq.
        9) on packed copies of the real items, the ``2D``-wide tensors of eq. 5-8; when training, the
        Chamfer term (eq. 13-14, :func:`ctxrank.losses.chamfer_memory`) on the ``(B, L, 2D)`` h-bar."""
        cfg = self.config
        d, e = self.input_dim, cfg.encoder_width
        D = d + e
        per_item = (
            self.input_floats(training=training)
            + (3 if training else 2) * (2 * d + 4 * e + 4 * D)
            + mlp_floats(D, cfg.att_hidden, 1, training=training)
            + mlp_floats(2 * D, cfg.rank_hidden, 1, training=training)
            + (14 if training else 7) * 2 * D
        )
        total = FLOAT_BYTES * batch_size * list_len * per_item
        if training and cfg.confusion_weight > 0:
            total += chamfer_memory(batch_size, list_len, 2 * D, pairs=cfg.confusion_pairs)
        return total

    def details(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        categorical: torch.Tensor | None = None,
    ) -> QILCMOutput:
        """Scores plus attention weights, context vectors and normalized representations."""
        cfg = self.config
        x = self.item_inputs(features, categorical, clip=cfg.input_clip)  # (B, L, F')
        per_item = _RealItems(mask)
        h = torch.cat([x, per_item(self.encoder, x)], dim=-1)  # eq. 1-2: (B, L, D)
        if cfg.pooling == "attention":
            a = masked_softmax(per_item(self.mlp_att, h).squeeze(-1), mask)  # eq. 3: (B, L)
        else:  # variant 1: average pooling
            m = mask.to(h.dtype)
            a = m / m.sum(-1, keepdim=True).clamp_min(1.0)
        c, d_ = context_and_deviations(h, a, mask)  # eq. 4: c (B, 1, D), d_i = h_i - c (B, L, D)
        if cfg.query_norm:  # eq. 6-7 of h~ = [c (.) h ; h]: mean [c (.) c ; c], centered [c (.) d ; d]
            v = torch.bmm(a.unsqueeze(1), d_.square())  # (B, 1, D)
            centered = torch.cat([c * d_, d_], dim=-1)  # (B, L, 2D)
            sigma = torch.sqrt(torch.cat([c * c * v, v], dim=-1) + cfg.var_floor)  # (B, 1, 2D)
            normalized = centered * (1.0 / (sigma + cfg.eps))  # eq. 8: a (B, 1, 2D) reciprocal, fewer passes
        else:
            normalized = torch.cat([c * h, h], dim=-1)  # eq. 5: (B, L, 2D)
        c = c.squeeze(1)
        if per_item.index is not None:  # padded rows exactly 0 (never used, kept clean)
            normalized = normalized * mask.unsqueeze(-1)
        scores = per_item(self.mlp_rank, normalized).squeeze(-1)  # eq. 9 logits
        return QILCMOutput(scores=scores, attention=a, context=c, normalized=normalized)

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.details(features, mask, categorical=categorical).scores

    def serving_scores(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``forward``'s scores with eq. 5-8 folded into MLP_rank's first layer (module docstring)."""
        cfg = self.config
        x = self.item_inputs(features, categorical, clip=cfg.input_clip)
        b, n = mask.shape
        flat = x.reshape(b * n, x.shape[-1])  # (B*L, F')
        h = torch.cat([flat, self.encoder(flat)], dim=-1)  # eq. 1-2: (B*L, D)
        d = self.input_dim + cfg.encoder_width  # a constant of the traced graph, not a Shape op
        if cfg.pooling == "attention":
            a = masked_softmax(self.mlp_att(h).reshape(b, n), mask)  # eq. 3: (B, L)
        else:
            m = mask.to(h.dtype)
            a = m / m.sum(-1, keepdim=True).clamp_min(1.0)
        h = h.reshape(b, n, d)
        c, centered = context_and_deviations(h, a, mask)  # eq. 4: c (B, 1, D), d_i (B, L, D)
        first = self.mlp_rank[0]
        w1, w2 = first.weight[:, :d], first.weight[:, d:]  # (H, D) each
        if cfg.query_norm:
            v = torch.bmm(a.unsqueeze(1), centered * centered)  # (B, 1, D)
            g1 = c / (torch.sqrt(c * c * v + cfg.var_floor) + cfg.eps)  # eq. 7-8, first half
            g2 = 1.0 / (torch.sqrt(v + cfg.var_floor) + cfg.eps)  # second half
            folded = w1 * g1 + w2 * g2  # (B, H, D)
        else:  # variant 3: h~ = [c (.) h ; h] itself
            centered, folded = h, w1 * c + w2
        z = torch.baddbmm(first.bias, centered, folded.transpose(1, 2))  # (B, L, H)
        return self.mlp_rank[1:](z.reshape(b * n, z.shape[-1])).reshape(b, n)

    def confusion_loss(self, normalized: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """lambda-free L_conf of QILCM eq. 13-14 on the normalized item sets of the batch."""
        cfg = self.config
        return chamfer_confusion(
            normalized,
            mask,
            form=cfg.confusion_form,
            direction=cfg.confusion_direction,
            pairs=cfg.confusion_pairs,
        )

    def training_loss(self, batch: ListBatch, loss_fn: Callable[..., torch.Tensor]) -> torch.Tensor:
        """Eq. 10: ranking loss + confusion_weight * Chamfer query-confusion loss."""
        out = self.details(batch.features, batch.mask, categorical=batch.categorical)
        loss = loss_fn(out.scores, batch.labels, batch.mask)
        if self.config.confusion_weight > 0:
            loss = loss + self.config.confusion_weight * self.confusion_loss(out.normalized, batch.mask)
        return loss


def _variant(name: str, overrides: dict) -> type[QILCM]:
    """A registry entry for an ablation variant: QILCM with other config defaults (Table 3)."""
    fields = [
        (k, type(getattr(QILCMConfig(), k)), dataclasses.field(default=v)) for k, v in overrides.items()
    ]
    # the variant fixes these options: not searched (without a confusion term, nor its form)
    fixed = {f"model_params.{k}" for k in overrides}
    if overrides.get("confusion_weight") == 0:
        fixed |= {k for k in QILCMConfig.SEARCH_SPACE if k.startswith("model_params.confusion_")}
    space = {k: v for k, v in QILCMConfig.SEARCH_SPACE.items() if k not in fixed}
    config_cls = dataclasses.make_dataclass(
        f"QILCM{name.title()}Config",
        fields,
        bases=(QILCMConfig,),
        frozen=True,
        namespace={"SEARCH_SPACE": space},
    )
    return type(f"QILCM{name.title()}", (QILCM,), {"name": f"qilcm-{name}", "config_class": config_cls})


QILCM_VARIANTS = {f"qilcm-{name}": _variant(name, over) for name, over in VARIANTS.items() if name != "full"}
