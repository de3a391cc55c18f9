"""Context-aware self-attention ranker (Pobrotyn, Bartczak, Synowiec, Bialobrzeski, Bojar, 2020; allRank).

"Context-Aware Learning to Rank with Self-Attention", arXiv:2005.10084. **Sources.** Only the paper's
abstract could be read when this was checked, so no section or equation number of it is cited; the
architecture and defaults below are checked against the authors' released code, ``allegro/allRank``
(``allrank/models/model.py``, ``transformer.py``,
``positional.py``, ``reproducibility/configs/contextaware_web30k/``), every formula written out.

Every item is scored in the context of every other item of its list, in training and in inference.
Shapes: ``B`` lists padded to ``L`` items, ``F`` input features, ``d = d_fc``, ``h`` heads, ``mask``
(B, L) True = real item.

1. **Input layer** (allRank's ``FCModel``): a shared fully connected layer maps each item's features
   to ``d`` dimensions, ``h_i^(0) = a(W_fc x_i + b_fc)``: (B, L, F) -> (B, L, d). ``a`` is
   ``fc_activation``; the WEB30K configuration (``fc_model.sizes = [128]``, ``activation = null``,
   ``dropout = 0``, ``input_norm = false``) applies none, the default ``"identity"``.
2. **Encoder** (allRank's ``Encoder``, adapted from "The Annotated Transformer"): ``blocks``
   Transformer encoder blocks over the list, no positional encoding (the model is permutation-
   equivariant: permuting a list's items permutes its scores). Each block is multi-head self-attention
   (``Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V``, ``d_k = d / h``; ``MultiHead = Concat(head_1
   .. head_h) W^O``), then the position-wise feed-forward network ``FFN(x) = W_2 Dropout(ReLU(W_1 x +
   b_1)) + b_2`` of width ``d_ff``, each sublayer with a residual connection, dropout and layer
   normalization (:class:`ctxrank.models._attention.AttentionBlock`). ``norm_first=True`` (default)
   normalizes before each sublayer and once after the last block, ``x + Dropout(Sublayer(LN(x)))``, as
   allRank's ``SublayerConnection`` and ``Encoder.norm``; ``False`` is the post-norm ``LN(x +
   Dropout(Sublayer(x)))`` of Vaswani et al. Dropout also acts on the attention weights, as in allRank.
3. **Scoring head** (allRank's ``OutputLayer`` with ``d_output = 1``, no activation): a linear layer of
   the last block's output, ``s_i = w^T h_i^(N) + b``: (B, L).

**Padding.** Padded items are keys no query attends to (the softmax runs over the real items of the
list) and every other operation is per item, so a real item's score never depends on the padding
(``tests/models/test_attention_rankers.py`` pads lists with garbage and checks it).

**Re-ranking** (``rank_embedding = True``; allRank's learned positional encoding): when the lists are
an initial ranker's top k (``rerank.initial = "lambdamart"``: ``ctxrank.training.rerank`` orders each
list by initial score, ties by a hash of the features, so the order does not depend on file
positions), a learned ``d``-vector of each item's initial rank -- its row in the list, 0 = top; ranks
from ``max_rank`` on share one vector -- is added to ``h_i^(0)``. allRank's
``LearnedPositionalEncoding`` computes ``sqrt(d) h_i^(0) + P[rank_i]`` and maps ranks past its table
(and padded items) to a padding row that is never trained; here the vector is added to ``h^(0)`` as it
is and the last learned row is shared. The scores then depend on the row order, as a sequence model's
(DLCM) do. On whole lists without re-ranking the rows are in file order: leave it off. ``init_scores``
are not read (the export has no such input).

**Defaults** are allRank's context-aware WEB30K configuration with NDCGLoss2++
(``reproducibility/configs/contextaware_web30k/ndcgloss2pp.json``): ``d_fc = 128``, ``blocks = 4``
(``N``), ``heads = 4`` (``h``), ``d_ff = 512``, ``dropout = 0.3``, no output activation, and its loss,
NDCGLoss2++ of the LambdaLoss framework (``lambdaloss``, ``mu = 10``, ``sigma = 1``, the defaults of
``ctxrank.losses.lambdaloss``). That is not the best context-aware WEB30K result: allRank's
reproducibility guide names the ordinal loss the best context-aware ranker (``ordinal.json``: ``d_fc =
144``, ``h = 2``, ``dropout = 0.4``, a 4-output sigmoid head, which ctxrank does not have) and
NDCGLoss2++ the best MLP ranker. ``input_clip`` (1e6, as QILCM's) clamps the inputs: a raw 1e30 would
overflow the attention logits and the layer norm's variance to inf.

**Departures from allRank's code**, besides the rank embedding above: ``torch.nn.LayerNorm`` (biased
variance, ``eps = 1e-5`` inside the square root) where allRank divides by the unbiased std ``+ 1e-6``;
only the attention projections are Xavier-initialized (allRank: every weight matrix), the other layers
keep PyTorch's default initialization.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ctxrank._checks import check_bool, check_choice, check_dropout, check_int, check_positive
from ctxrank.models._attention import (
    AttentionBlock,
    EncodingRanker,
    RankEmbedding,
    attention_mask,
    attention_weight_bytes,
)
from ctxrank.models.base import ACTIVATIONS, FLOAT_BYTES, ModelTraits, make_activation

__all__ = ["FC_ACTIVATIONS", "ContextAwareAttention", "ContextAwareAttentionConfig"]

#: activations of the input layer: none (allRank's WEB30K configuration) or one of ``base.ACTIVATIONS``
FC_ACTIVATIONS: tuple[str, ...] = ("identity", *sorted(ACTIVATIONS))


@dataclass(frozen=True)
class ContextAwareAttentionConfig:
    """Attributes (defaults: allRank's context-aware WEB30K configuration):
    d_fc: width ``d`` of the input layer's output and of every encoder block (allRank's
        ``fc_model.sizes``, the Transformer's ``d_model``); a multiple of ``heads``.
    fc_activation: activation after the input layer: ``"identity"`` (none, allRank's WEB30K
        configuration) or ``"relu"``, ``"elu"``, ``"gelu"``, ``"tanh"``, ``"sigmoid"``.
    blocks: number ``N`` of encoder blocks.
    heads: attention heads ``H`` of each block.
    d_ff: hidden width of each block's feed-forward network.
    dropout: dropout probability on the attention weights, inside the feed-forward network and on
        each sublayer's output (training only).
    norm_first: layer norm before each sublayer and after the last block (allRank's implementation);
        False = after each residual (post-norm, Vaswani et al.).
    rank_embedding: add a learned embedding of each item's initial rank (its row: re-ranking an initial
        ranker's top k); False = permutation-equivariant (no positional information).
    max_rank: rows of the rank embedding; items at rank ``max_rank`` (0-based) and below share the last.
    input_clip: clamp the inputs to ``[-input_clip, input_clip]`` (overflow guard; None = off).
    """

    #: the search space of ``ctxrank tune``: run-config key -> distribution (format: ``ctxrank.tune``)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "loss": ("choice", ("lambdaloss", "listnet", "neuralndcg", "approxndcg", "attrank", "listmle")),
        "model_params.d_fc": ("choice", (64, 128, 256)),
        "model_params.blocks": ("int", 1, 4),
        "model_params.heads": ("choice", (1, 2, 4)),
        "model_params.d_ff": ("choice", (128, 256, 512)),
        "model_params.dropout": ("float", 0.0, 0.5),
    }

    d_fc: int = 128
    fc_activation: str = "identity"
    blocks: int = 4
    heads: int = 4
    d_ff: int = 512
    dropout: float = 0.3
    norm_first: bool = True
    rank_embedding: bool = False
    max_rank: int = 100
    input_clip: float | None = 1e6

    def __post_init__(self) -> None:
        check_int("model_params.d_fc", self.d_fc)
        check_choice("model_params.fc_activation", self.fc_activation, FC_ACTIVATIONS)
        check_int("model_params.blocks", self.blocks)
        check_int("model_params.heads", self.heads)
        if self.d_fc % self.heads:
            raise ValueError(
                f"model_params.d_fc ({self.d_fc}) must be a multiple of model_params.heads ({self.heads})"
            )
        check_int("model_params.d_ff", self.d_ff)
        check_dropout("model_params.dropout", self.dropout)
        check_bool("model_params.norm_first", self.norm_first)
        check_bool("model_params.rank_embedding", self.rank_embedding)
        check_int("model_params.max_rank", self.max_rank)
        if self.input_clip is not None:
            check_positive("model_params.input_clip", self.input_clip)


class ContextAwareAttention(EncodingRanker):
    """Self-attention ranker: ``(B, L, F)`` features -> ``(B, L)`` scores, each in the context of its list.

    See the module docstring for the equations, padding and the rank embedding.
    """

    name = "attn"
    config_class = ContextAwareAttentionConfig
    traits = ModelTraits(default_loss="lambdaloss")

    def __init__(
        self,
        n_features: int,
        config: ContextAwareAttentionConfig,
        *,
        categorical_cardinalities: Sequence[int] = (),
    ) -> None:
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        d = config.d_fc
        self.fc = nn.Linear(self.input_dim, d)
        self.fc_activation = (
            nn.Identity() if config.fc_activation == "identity" else make_activation(config.fc_activation)
        )
        self.rank_embedding = RankEmbedding(config.max_rank, d) if config.rank_embedding else None
        self.blocks = nn.ModuleList(
            AttentionBlock(d, config.heads, config.d_ff, config.dropout, norm_first=config.norm_first)
            for _ in range(config.blocks)
        )
        self.final_norm = nn.LayerNorm(d) if config.norm_first else None
        self.score = nn.Linear(d, 1)

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """When training, per item: the clamped input and the input layer, and per block what backward
        keeps of its two layer norms, the ``3 d`` projections, the attention output, the feed-forward
        hidden layer (with its ReLU and dropout), the residual sums and dropout masks, with the
        activations' gradients, and each head's log-sum-exps; with attention dropout the attention
        weights the math kernel builds, chunked above a budget
        (:func:`ctxrank.models._attention.attention_weight_bytes`). When scoring, the tensors of one
        block at a time (nothing is kept; PyTorch's fused kernel builds no ``(L, L)`` weights)."""
        cfg = self.config
        d, ff, h, L = cfg.d_fc, cfg.d_ff, cfg.heads, list_len
        width = 3 if training else 2
        blocks = cfg.blocks if training else 1
        per_item = self.input_floats(training=training) + width * (self.input_dim + 3 * d)
        per_item += blocks * (width * (12 * d + 3 * ff) + h) + width * 2 * d
        pairs = attention_weight_bytes(
            batch_size, h, L, L, layers=cfg.blocks, dropout=cfg.dropout, training=training
        )
        return FLOAT_BYTES * batch_size * list_len * per_item + pairs

    def encode(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The last block's output ``h^(N)`` (B, L, d) (after the final layer norm with ``norm_first``)."""
        self.check_mask(features, mask)
        x = self.item_inputs(features, categorical, clip=self.config.input_clip)  # (B, L, F')
        h = self.fc_activation(self.fc(x))  # (B, L, d): the input layer
        if self.rank_embedding is not None:
            h = h + self.rank_embedding(mask)
        key_mask = attention_mask(mask)  # (B, 1, 1, L) or None
        for block in self.blocks:
            h = block(h, None, key_mask)  # self-attention over the list
        return h if self.final_norm is None else self.final_norm(h)
