"""DASALC: Data Augmented Self-Attentive Latent Cross ranker (Qin et al., ICLR 2021).

Qin, Yan, Zhuang, Tay, Pasumarthi, Wang, Bendersky, Najork, "Are Neural Rankers still Outperformed by
Gradient Boosted Decision Trees?" (ICLR 2021) proposes three counter strategies, an input
transformation, data augmentation and listwise context, and one network combining them, DASALC.
**Sources.** Only the paper's first page could be read when this was checked, so no section or equation number
of it is cited; the formulas below are named by what they are and checked against the authors' released
TF-Ranking example
(``tensorflow_ranking/research/dasalc.py`` and the ``DocumentInteractionAttention`` of
``tensorflow_ranking/python/keras/layers.py`` at commit 672841f, which added the example), whose widths
and normalization layers this file follows except where listed below.

**1. Input transformation** (the paper's log1p, ``x~ = log_e(1 + |x|) (.) sign(x)``). Not a layer of
this model: it is the run config's ``transform``, shared by every neural model. DASALC implies
``transform = "log1p-zscore"`` (``DASALC.traits.run_defaults``): ``sign(x) * log1p(|x|)`` of the raw
features, then standardized with the training split's mean and std. The standardization is what the
authors' code does next with a batch normalization of the log1p features (at inference a batch norm
is exactly such a fixed affine map; its learned scale and shift are absorbed by the first linear layer);
ctxrank fits it once on the training split instead of estimating it batch by batch. The authors' code
also clips the log1p features to [-30, 30], which nothing in ctxrank needs (log1p of a float32 is at
most 89) and which is not done.

**2. Data augmentation**: Gaussian noise ``x~ + n``, ``n ~ N(0, sigma^2 I)``, on the (transformed)
inputs of every training batch, never at evaluation. Not a layer either: the run config's
``train.input_noise = sigma`` (``ctxrank.training.loop``), shared by every neural model, which DASALC
sets to 1.5 (the authors' Web30K value, ``input_noise_stddev``; their Yahoo value is 4.5, Istella
0.2). Both towers below read the same noised inputs. The authors' code draws the noise twice instead:
the item tower's on its batch-normalized log1p features, the attention tower's on its input projection
(``ReLU(W_in x~ + b_in)``), independently.

**3. Listwise context by self-attention, combined by a latent cross.** Per list of ``n`` real items
(``mask`` True), with ``x_i`` the item's input (features and categorical embeddings)::

    z_i   = BN(x_i)                                                    input batch norm
    h_i   = W_out g_K(... g_1(z_i)) + b_out,   g_k(u) = Dropout(BN(ReLU(W_k u + b_k)))   item tower
    a_i^0 = W_in z_i + b_in                                            (E = heads * head_size wide)
    a^l   = LayerNorm(a^(l-1) + Dropout(MHSA(a^(l-1))))                l = 1..attention_layers
    c_i   = W_c BN(a_i^L) + b_c                                        context, hidden[-1] wide
    h~_i  = (1 + c_i) (.) h_i                                          the latent cross
    s_i   = w . Dropout(ReLU(h~_i)) + b                                score

``MHSA`` is multi-head scaled dot-product self-attention over the real items of the list (Vaswani et
al. 2017; per head ``softmax_j(q_i . k_j / sqrt(head_size))`` over the real items ``j`` only). The
latent cross (Beutel et al., WSDM 2018) multiplies the item's hidden representation element-wise by
``1 +`` the projected context, so that a context of 0 leaves the plain feed-forward ranker; the
authors' code computes it as ``h (.) c + h``, the same thing. ``BN`` is batch normalization over the
real items of the batch (:class:`MaskedBatchNorm`: padded items never enter its statistics).

Where this implementation departs from the authors' code, for the reason given:

* The attention tower reads the batch-normalized ``z`` instead of the transformed features: with
  ``transform = "log1p-zscore"`` both are standardized features, and ``z`` is bounded by the batch
  whatever a raw column holds, so the attention logits cannot overflow float32 (QILCM's
  ``input_clip`` solves the same problem differently).
* Batch statistics are accumulated in float64 (features of 1e30 would overflow a float32 variance): on
  the CPU by PyTorch's own batch-norm kernel over the real items (its sums and variance are float64,
  its normalization float32, fused forward and backward), elsewhere by float64 tensor operations.
* The attention tower's input projection is linear and ``heads * head_size`` wide, its heads
  ``head_size`` wide each; the authors' layer projects to ``head_size`` with a ReLU, and its Keras
  ``MultiHeadAttention`` (``key_dim = head_size``) maps the ``heads`` heads back to ``head_size``, so its
  residual stream is ``head_size`` wide.
* Dropout acts on each attention layer's output, not also on its attention weights (the authors'
  ``MultiHeadAttention(dropout=...)`` drops both); LayerNorm ``eps`` is torch's 1e-5 (theirs 1e-12).
* The noise is one draw read by both towers, before the input batch norm (item 2 above).
* Each self-attention layer is a post-norm residual block without the feed-forward sublayer of a
  Transformer encoder, as the authors' layer (``LayerNorm(a + Dropout(MHA(a)))``).

**Ensemble** (the paper's "DASALC-ens"): an ensemble of DASALC models, trained alike but for their
training randomness, whose scores are averaged (not part of the released example). In
ctxrank that is the run config's ``ensemble = k`` (``ctxrank.training.ensemble``): k complete DASALC
runs with seeds ``train.seed .. train.seed + k - 1``, scored by the mean of their scores, saved and
exported as one model. Members differ by their seed only (a member with other hyperparameters is not a
seed-ensemble member).

**Loss**: ``default_loss = "listnet"`` with ``label_transform = "identity"``: the softmax cross
entropy ``-sum_i (y_i / sum_j y_j) log softmax(s)_i``, the default loss of the authors' example
(TF-Ranking's ``softmax_loss``).

**Defaults** (the authors' Web30K configuration): ``hidden = (512, 512)``, four attention layers of two
heads of 100, dropout 0.4, batch-norm momentum 0.1 (TensorFlow's 0.9 decay); their Adam learning rate,
1e-3, is ctxrank's default ``train.lr``.

Shapes: features ``(B, L, F)`` -> ``z`` ``(B, L, F')`` -> item tower ``h`` ``(B, L, D)`` and attention
``a`` ``(B, L, E)`` (logits ``(B, heads, L, L)``, never built: PyTorch's fused kernel) -> ``c``
``(B, L, D)`` -> scores ``(B, L)``, ``D = hidden[-1]``.

Scores depend on neither the order of the items (no position enters; permutation equivariant) nor the
padding; in training the batch norms couple the lists of a batch (as every batch norm does), at
evaluation and in an exported graph they apply the running statistics, a fixed affine map.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ctxrank._checks import check_dropout, check_int, check_int_list, check_positive
from ctxrank.models._attention import attend, attention_mask
from ctxrank.models._dropout import Dropout
from ctxrank.models.base import FLOAT_BYTES, ModelTraits, RankingModule

__all__ = ["DASALC", "DASALCConfig", "LatentCrossAttention", "MaskedBatchNorm"]

#: ``transform`` and ``train.input_noise`` that a DASALC run uses unless it sets them (module docstring)
DASALC_RUN_DEFAULTS: Mapping[str, Any] = {"transform": "log1p-zscore", "train.input_noise": 1.5}


@dataclass(frozen=True)
class DASALCConfig:
    """Attributes (defaults: the authors' Web30K configuration):
    hidden: widths of the item tower's ReLU layers (each followed by batch norm and dropout); its output
        projection ``h`` and the latent cross are ``hidden[-1]`` wide.
    attention_layers: self-attention layers of the context tower.
    heads: attention heads per layer.
    head_size: width of one head; the attention tower is ``heads * head_size`` wide.
    dropout: dropout probability after every hidden layer, every attention block and the latent cross.
    batch_norm_momentum: weight of the current batch in the running statistics of the batch norms
        (torch's convention: TensorFlow's decay ``0.9`` is ``0.1``).
    """

    #: the search space of ``ctxrank tune``: run-config key -> distribution (format: ``ctxrank.tune``);
    #: the input noise is searched over the paper's range (the shared space's is for unscaled inputs)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "loss": ("choice", ("listnet", "listmle", "lambdaloss", "approxndcg", "neuralndcg")),
        "model_params.hidden": ("choice", ((128, 128), (256, 256), (512, 512))),
        "model_params.attention_layers": ("int", 1, 4),
        "model_params.heads": ("choice", (1, 2, 4)),
        "model_params.head_size": ("choice", (32, 64, 100)),
        "model_params.dropout": ("float", 0.0, 0.7),
        "train.input_noise": ("choice", (0.0, 0.2, 0.5, 1.0, 1.5, 3.0, 4.5)),
    }

    hidden: tuple[int, ...] = (512, 512)
    attention_layers: int = 4
    heads: int = 2
    head_size: int = 100
    dropout: float = 0.4
    batch_norm_momentum: float = 0.1

    def __post_init__(self) -> None:
        check_int_list("model_params.hidden", self.hidden)
        if not self.hidden:
            raise ValueError(
                "model_params.hidden must hold at least one width (the latent cross is hidden[-1] wide)"
            )
        check_int("model_params.attention_layers", self.attention_layers)
        check_int("model_params.heads", self.heads)
        check_int("model_params.head_size", self.head_size)
        check_dropout("model_params.dropout", self.dropout)
        momentum = check_positive("model_params.batch_norm_momentum", self.batch_norm_momentum)
        if momentum > 1:
            raise ValueError(f"model_params.batch_norm_momentum must be in (0, 1], got {momentum}")


class MaskedBatchNorm(nn.Module):
    """Batch normalization (Ioffe & Szegedy 2015) over the REAL items of a batch of lists.

    ``v`` ``(B, L, W)``, ``mask`` ``(B, L)`` -> ``(B, L, W)``. In training: per column, the mean and the
    population variance over the items with ``mask`` True (accumulated in float64), ``(v - mean) /
    sqrt(var + eps) * weight + bias``; the running statistics move by ``momentum`` towards them (not
    when the batch has no real item). In evaluation: the running statistics, a fixed affine map.
    Padded items never enter a statistic; their outputs are arbitrary.
    """

    def __init__(self, width: int, momentum: float, eps: float = 1e-3) -> None:
        super().__init__()
        self.momentum, self.eps = float(momentum), float(eps)  # eps: TensorFlow's batch-norm default
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))
        self.register_buffer("running_mean", torch.zeros(width))
        self.register_buffer("running_var", torch.ones(width))

    def forward(self, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if not self.training:
            scale = torch.rsqrt(self.running_var + self.eps)
            return (v - self.running_mean) * (scale * self.weight) + self.bias
        return self._train_cpu(v, mask) if v.device.type == "cpu" else self._train_float64(v, mask)

    def _train_float64(self, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Training with the statistics computed by float64 tensor operations (devices whose batch-norm
        kernel accumulates in float32)."""
        real = mask[..., None]  # (B, L, 1)
        v64 = v.double()
        zero = torch.zeros((), dtype=torch.float64, device=v.device)
        n = real.sum(dim=(0, 1)).to(torch.float64)  # (1,)
        mean = torch.where(real, v64, zero).sum(dim=(0, 1)) / n.clamp(min=1)  # (W,)
        centered = v64 - mean
        var = torch.where(real, centered.square(), zero).sum(dim=(0, 1)) / n.clamp(min=1)  # (W,)
        out = (centered * torch.rsqrt(var + self.eps)).to(v.dtype)
        self._update_running(mean, var, n > 0)
        return out * self.weight + self.bias

    def _train_cpu(self, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Training on the CPU: ``torch.batch_norm`` of the real items (``(N, W)`` rows), padded rows 0;
        the same numbers as :meth:`_train_float64` to float rounding, a few fused passes over the items
        instead of a dozen float64 ones. Its sums of squares are float32: a batch whose values' squares
        summed could near float32's range (features of about 1e17 and more) goes the float64 way."""
        W = v.shape[-1]
        flat, keep = v.reshape(-1, W), mask.reshape(-1)
        every_item_real = bool(keep.all())
        real = flat if every_item_real else flat[keep]  # (N, W)
        with torch.no_grad():
            var, mean = torch.var_mean(real, dim=0, correction=0)  # (W,): the population variance
        n = real.shape[0]
        largest = mean.double().abs() + (var.double() * n).sqrt()  # (W,): bounds each column's |values|
        if n == 0 or not bool((largest.square() * n).max() < torch.finfo(v.dtype).max / 4):
            return self._train_float64(v, mask)  # no real item, or float32 squares could overflow
        # torch.batch_norm, not F.batch_norm: one real item is allowed (its variance is 0)
        normed = torch.batch_norm(real, self.weight, self.bias, None, None, True, 0.0, self.eps, False)
        self._update_running(mean, var, torch.tensor(True))
        if every_item_real:
            return normed.reshape(v.shape)
        return flat.new_zeros(flat.shape).index_put((keep,), normed).reshape(v.shape)

    @torch.no_grad()
    def _update_running(self, mean: torch.Tensor, var: torch.Tensor, any_real: torch.Tensor) -> None:
        """Move the running statistics by ``momentum`` towards the batch's (not when it has no real item)."""
        m = torch.where(any_real, self.momentum, 0.0).to(self.running_mean.dtype)  # no real item: keep
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), m)
        var32 = var.to(self.running_var.dtype).clamp(max=torch.finfo(self.running_var.dtype).max)
        self.running_var.lerp_(var32, m)


class LatentCrossAttention(nn.Module):
    """One self-attention layer of the context tower: ``a + Dropout(MHSA(a))``, then LayerNorm.

    Keys of padded items get no weight; a list with no real item attends uniformly (finite garbage at
    padded positions only).
    """

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.dropout = Dropout(dropout) if dropout > 0 else nn.Identity()
        self.norm = nn.LayerNorm(width)

    def forward(self, a: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """``a`` (B, L, E), ``key_mask`` (B, 1, 1, L) of :func:`ctxrank.models._attention.attention_mask`
        or None (every item real) -> (B, L, E). The product is PyTorch's fused kernel
        (``scaled_dot_product_attention`` without dropout on the weights): it never builds the
        ``(B, heads, L, L)`` logits, so memory grows linearly with the list length."""
        B, L, E = a.shape
        q, k, v = (
            t.reshape(B, L, self.heads, E // self.heads).transpose(1, 2)  # (B, heads, L, E / heads)
            for t in self.qkv(a).chunk(3, dim=-1)
        )
        mixed = attend(q, k, v, key_mask, 0.0).transpose(1, 2).reshape(B, L, E)  # softmax(q k^T / sqrt) v
        return self.norm(a + self.dropout(self.out(mixed)))


class DASALC(RankingModule):
    """DASALC: ``(B, L, F)`` features -> ``(B, L)`` scores (module docstring: equations and choices)."""

    name = "dasalc"
    config_class = DASALCConfig
    #: TF-Ranking's softmax cross entropy: the label distribution ``y / sum y`` (module docstring)
    traits = ModelTraits(
        default_loss_params={"label_transform": "identity"}, run_defaults=DASALC_RUN_DEFAULTS
    )

    def __init__(
        self, n_features: int, config: DASALCConfig, *, categorical_cardinalities: Sequence[int] = ()
    ) -> None:
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        c, F = config, self.input_dim
        self.input_norm = MaskedBatchNorm(F, c.batch_norm_momentum)
        self.layers = nn.ModuleList()
        self.layer_norms = nn.ModuleList()
        width = F
        for w in c.hidden:
            self.layers.append(nn.Linear(width, w))
            self.layer_norms.append(MaskedBatchNorm(w, c.batch_norm_momentum))
            width = w
        D = c.hidden[-1]
        self.item_out = nn.Linear(width, D)  # h
        E = c.heads * c.head_size
        self.attention_in = nn.Linear(F, E)  # a^0
        self.attention = nn.ModuleList(
            LatentCrossAttention(E, c.heads, c.dropout) for _ in range(c.attention_layers)
        )
        self.context_norm = MaskedBatchNorm(E, c.batch_norm_momentum)
        self.context_out = nn.Linear(E, D)  # c
        self.dropout = Dropout(c.dropout) if c.dropout > 0 else nn.Identity()
        self.score = nn.Linear(D, 1)

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """Training (everything kept for backward), per item: the input and its float64 batch norm, every
        hidden layer (linear, ReLU, float64 batch norm, dropout), each attention block's projections,
        residual, LayerNorm and each head's log-sum-exps (PyTorch's fused kernel builds no ``(L, L)``
        logits), the context and the latent cross. Scoring: the few of these alive at once (one
        layer's tensors)."""
        c, F = self.config, self.input_dim
        E, D, W = c.heads * c.head_size, c.hidden[-1], max(c.hidden)
        B, L = batch_size, list_len
        if not training:
            per_item = self.input_floats(training=False) + 4 * F + 4 * W + 6 * E + 4 * D + 2 + c.heads
            return FLOAT_BYTES * B * L * per_item
        bn = 14  # float64 copies (2 units a value), centered, normalized, affine
        per_item = (
            self.input_floats(training=True)
            + bn * F
            + sum((4 + bn) * w for w in c.hidden)
            + c.attention_layers * (16 * E + c.heads)
            + E
            + bn * E
            + 10 * D
            + 2
        )
        return FLOAT_BYTES * B * L * 3 * per_item

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        self.check_mask(features, mask)
        z = self.input_norm(self.item_inputs(features, categorical), mask)  # (B, L, F)
        h = z
        for layer, norm in zip(self.layers, self.layer_norms, strict=True):
            h = self.dropout(norm(torch.relu(layer(h)), mask))  # (B, L, w)
        h = self.item_out(h)  # (B, L, D)
        a = self.attention_in(z)  # (B, L, E)
        key_mask = attention_mask(mask)  # (B, 1, 1, L) or None
        for block in self.attention:
            a = block(a, key_mask)
        context = self.context_out(self.context_norm(a, mask))  # (B, L, D)
        crossed = (1 + context) * h  # the latent cross
        return self.score(self.dropout(torch.relu(crossed))).squeeze(-1)
