"""SetRank: a permutation-invariant ranking model (Pang, Xu, Ai, Lan, Cheng, Wen, SIGIR 2020).

"SetRank: Learning a Permutation-Invariant Ranking Model for Information Retrieval", arXiv:1912.05891.
**Sources.** Only the paper's abstract could be read when this was checked, so no section or equation number
of it is cited. The blocks are those of the Set Transformer (Lee et al., ICML 2019, arXiv:1810.00825: MAB,
SAB, ISAB), which SetRank names MSAB and
IMSAB; the layers, loss and defaults are checked against the authors' released code, ``pl8787/SetRank``
(``src/RankTransformer_model.py``, ``src/modules.py``, ``scripts/train_transformer_istella.sh``).

A list is a set: stacked (induced) multi-head self-attention blocks learn every item's representation
from the whole set, and the scores are permutation-equivariant (permuting the items permutes their
scores), so the ranking is permutation-invariant. Shapes: ``B`` lists padded to ``L`` items, ``F``
input features, ``d = d_model``, ``m`` inducing points, ``mask`` (B, L) True = real item.

1. **Representation layer**: each item's features are mapped to ``d`` dimensions,
   ``z_i^(0) = ReLU(W_E x_i + b_E)`` (B, L, d) (the authors' code: one dense ReLU layer, then dropout),
   plus, with ``rank_embedding``, the ordinal embedding of its initial rank (below).
2. **Encoding layer**: ``blocks`` blocks, each an MSAB or an IMSAB:

   * attention: ``Attn(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V``,
     ``Multihead(Q, K, V) = Concat(head_1..head_h) W^O`` (:class:`ctxrank.models._attention.
     MultiHeadAttention`; padded items are keys never attended to);
   * MAB: ``MAB(Q, K, V) = LN(B + rFF(B))``, ``B = LN(Q + Multihead(Q, K, V))``, ``rFF`` a
     row-wise feed-forward network ``W_2 ReLU(W_1 x + b_1) + b_2`` of width ``d_ff``
     (:class:`ctxrank.models._attention.AttentionBlock` with ``norm_first=False``);
   * MSAB: ``MSAB(X) = MAB(X, X, X)``;
   * IMSAB: ``IMSAB_m(X) = MAB(X, H, H)``, ``H = MAB(I_m, X, X)`` (B, m, d), with ``I_m``
     ``m`` learned inducing points (m, d): the items attend to ``m`` summaries of the set instead of to
     each other (``O(L m)`` instead of ``O(L^2)``). The inducing points attend to the real items only.

   ``block = "msab"`` stacks MSABs (SetRank_MSAB), ``"imsab"`` IMSABs (SetRank_IMSAB).
3. **Ranking layer**: ``s_i = rFF_1(z_i^(N))``, a linear layer to one score (B, L) (the code's
   ``dense(1)``).

**Loss**: the attention rank loss, the cross entropy between the normalized label gains
``psi(y_i) / sum_j psi(y_j)`` (``psi(y) = exp(y)`` for ``y > 0``, else 0) and ``softmax(s)``; the
authors' code computes it as ``softmax_cross_entropy_with_logits`` without any other term, which is
``ctxrank.losses.attrank`` with ``form = "dlcm_code"``: ``SetRank.traits.default_loss_params`` bind it
unless the run sets a form (``--set loss_params.form=qilcm`` etc.; any registered loss works).

**Ordinal embedding** (``rank_embedding = True``: SetRank^init): when re-ranking an initial ranker's
top k (``rerank.initial = "lambdamart"``; ``ctxrank.training.rerank`` orders each list by initial
score, ties by a hash of the features, never by file position), a learned ``d``-vector per initial rank
-- the item's row, 0 = top; ranks from ``max_rank`` on share one -- is added to ``z^(0)`` once. The
scores then depend on the row order. Without it (default) SetRank is permutation-equivariant.
``init_scores`` are not read (the export has no such input).

**Defaults** from the authors' released script (``scripts/train_transformer_istella.sh``):
``num_blocks = 6``, ``hidden_units = 256`` (``d``), ``num_heads = 8``, ``num_induced = 20`` (``m``),
``dropout_rate = 0.0``; ``rFF`` width ``4 d`` (their ``feedforward``). One default differs: the
script's ``num_induced = 20`` makes every block an IMSAB, while ``block`` defaults to ``"msab"``
(``--set model_params.block=imsab`` is the script's model). Its ``pos_embed = False`` (no ordinal
embedding) is the default here too. Departures from that code, which follow the formulas above: the
attention projections are linear (the code puts a ReLU on ``Q``, ``K``, ``V``) and followed by ``W^O``
(the code has no output projection); an IMSAB is two complete MABs, each with its ``rFF`` (the code
applies attention, residual and layer norm twice, then one ``rFF``); the ordinal embedding is added once,
to the representation (the code adds it before every block); dropout also acts after each attention
sublayer and inside and after each ``rFF`` (the code: on the attention weights and after the
representation layer only; all are 0 by default); no Gaussian kernel or multi-layer abstraction of the
features (options of their script) is applied. ``input_clip`` (1e6, as QILCM's) clamps the inputs
before the representation layer (overflow guard).

**Padding.** A real item's score never depends on the padding: padded items are no key of any query,
every other operation is per item (``tests/models/test_attention_rankers.py``).
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
from ctxrank.models._dropout import Dropout, dropout
from ctxrank.models.base import FLOAT_BYTES, ModelTraits

__all__ = ["SETRANK_BLOCKS", "SetRank", "SetRankConfig"]

SETRANK_BLOCKS: tuple[str, ...] = ("msab", "imsab")


@dataclass(frozen=True)
class SetRankConfig:
    """Attributes (defaults: the authors' released script):
    d_model: width ``d`` of the representations (their ``hidden_units``); a multiple of ``heads``.
    heads: attention heads of every MAB.
    blocks: number of stacked MSAB / IMSAB blocks.
    d_ff: hidden width of each MAB's row-wise feed-forward network (their code: ``4 d``).
    block: ``"msab"`` (SetRank_MSAB) or ``"imsab"`` (SetRank_IMSAB; the blocks of the authors' script).
    inducing_points: ``m``, the learned inducing points of each IMSAB (unused by MSAB).
    dropout: dropout probability after the representation layer, on the attention weights, inside and
        after each feed-forward network and after each attention sublayer (training only).
    rank_embedding: add the ordinal embedding of each item's initial rank (its row: re-ranking an
        initial ranker's top k; SetRank^init); False = permutation-equivariant.
    max_rank: rows of the ordinal embedding; items at rank ``max_rank`` (0-based) and below share the
        last.
    input_clip: clamp the inputs to ``[-input_clip, input_clip]`` (overflow guard; None = off).
    """

    #: the search space of ``ctxrank tune``: run-config key -> distribution (format: ``ctxrank.tune``)
    SEARCH_SPACE: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "loss": ("choice", ("attrank", "listnet", "listmle", "lambdaloss", "neuralndcg")),
        "model_params.d_model": ("choice", (64, 128, 256)),
        "model_params.blocks": ("int", 1, 6),
        "model_params.heads": ("choice", (1, 2, 4, 8)),
        "model_params.block": ("choice", SETRANK_BLOCKS),
        "model_params.inducing_points": ("choice", (10, 20, 40)),
        "model_params.dropout": ("float", 0.0, 0.5),
    }

    d_model: int = 256
    heads: int = 8
    blocks: int = 6
    d_ff: int = 1024
    block: str = "msab"
    inducing_points: int = 20
    dropout: float = 0.0
    rank_embedding: bool = False
    max_rank: int = 100
    input_clip: float | None = 1e6

    def __post_init__(self) -> None:
        check_int("model_params.d_model", self.d_model)
        check_int("model_params.heads", self.heads)
        if self.d_model % self.heads:
            raise ValueError(
                f"model_params.d_model ({self.d_model}) must be a multiple of model_params.heads "
                f"({self.heads})"
            )
        check_int("model_params.blocks", self.blocks)
        check_int("model_params.d_ff", self.d_ff)
        check_choice("model_params.block", self.block, SETRANK_BLOCKS)
        check_int("model_params.inducing_points", self.inducing_points)
        check_dropout("model_params.dropout", self.dropout)
        check_bool("model_params.rank_embedding", self.rank_embedding)
        check_int("model_params.max_rank", self.max_rank)
        if self.input_clip is not None:
            check_positive("model_params.input_clip", self.input_clip)


class InducedBlock(nn.Module):
    """IMSAB: ``MAB(X, H, H)`` with ``H = MAB(I_m, X, X)``, ``I_m`` (m, d) learned
    (initialized ``N(0, 0.1^2)``, as the authors' code)."""

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, m: int) -> None:
        super().__init__()
        self.inducing = nn.Parameter(torch.randn(m, d_model) * 0.1)
        self.summarize = AttentionBlock(d_model, heads, d_ff, dropout, norm_first=False)  # H = MAB(I, X, X)
        self.attend = AttentionBlock(d_model, heads, d_ff, dropout, norm_first=False)  # MAB(X, H, H)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """``x`` (B, L, d), ``key_mask`` (B, 1, 1, L) or None -> (B, L, d)."""
        inducing = self.inducing.unsqueeze(0).expand(x.shape[0], -1, -1)  # (B, m, d)
        h = self.summarize(inducing, x, key_mask)  # (B, m, d): the m points attend to the real items
        return self.attend(x, h, None)  # every item attends to the m summaries


class SetBlock(nn.Module):
    """MSAB: ``MAB(X, X, X)``."""

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.mab = AttentionBlock(d_model, heads, d_ff, dropout, norm_first=False)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        return self.mab(x, None, key_mask)


class SetRank(EncodingRanker):
    """SetRank: ``(B, L, F)`` features -> ``(B, L)`` permutation-equivariant scores (module docstring)."""

    name = "setrank"
    config_class = SetRankConfig
    #: SetRank's attention rank loss is the authors' softmax cross entropy (module docstring)
    traits = ModelTraits(default_loss="attrank", default_loss_params={"form": "dlcm_code"})

    def __init__(
        self, n_features: int, config: SetRankConfig, *, categorical_cardinalities: Sequence[int] = ()
    ) -> None:
        super().__init__(n_features, config, categorical_cardinalities=categorical_cardinalities)
        d = config.d_model
        self.represent = nn.Linear(self.input_dim, d)  # W_E, b_E
        self.dropout = Dropout(config.dropout)
        self.rank_embedding = RankEmbedding(config.max_rank, d) if config.rank_embedding else None
        args = (d, config.heads, config.d_ff, config.dropout)
        self.blocks = nn.ModuleList(
            InducedBlock(*args, config.inducing_points) if config.block == "imsab" else SetBlock(*args)
            for _ in range(config.blocks)
        )
        self.score = nn.Linear(d, 1)  # rFF_1 of the ranking layer

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """When training, per item: the clamped input and the representation layer, and per MAB what
        backward keeps of the ``3 d`` projections, the attention output, two residual sums and layer
        norms, the feed-forward hidden layer (with its ReLU and dropout) and the dropout masks, with the
        activations' gradients (an IMSAB: two MABs, the ``m`` inducing points' counted as ``ceil(m / L)``
        per item) and each head's log-sum-exps; with attention dropout the attention weights the math
        kernel builds, per pair of items (MSAB) or of item and inducing point (IMSAB, twice), chunked
        above a budget (:func:`ctxrank.models._attention.attention_weight_bytes`). When scoring, one
        block at a time (PyTorch's fused kernel builds no weights)."""
        cfg = self.config
        d, ff, h, L, m = cfg.d_model, cfg.d_ff, cfg.heads, list_len, cfg.inducing_points
        width = 3 if training else 2
        blocks = cfg.blocks if training else 1
        per_block = width * (12 * d + 3 * ff) + 2 * h
        shapes = [(L, L)]
        if cfg.block == "imsab":
            shapes = [(m, L), (L, m)]  # H = MAB(I_m, X, X), then MAB(X, H, H)
            per_block += width * (12 * d + 3 * ff) * -(-m // max(L, 1))
        per_item = self.input_floats(training=training) + width * (self.input_dim + 4 * d)
        per_item += blocks * per_block
        pairs = sum(
            attention_weight_bytes(
                batch_size, h, q, k, layers=cfg.blocks, dropout=cfg.dropout, training=training
            )
            for q, k in shapes
        )
        return FLOAT_BYTES * batch_size * list_len * per_item + pairs

    def encode(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``z^(N)`` (B, L, d), the encoding layer's output."""
        self.check_mask(features, mask)
        x = self.item_inputs(features, categorical, clip=self.config.input_clip)  # (B, L, F')
        # (B, L, d): the representation layer, Dropout(ReLU(.))
        z = dropout(self.represent(x), self.dropout.p, self.training, relu=True)
        if self.rank_embedding is not None:
            z = z + self.rank_embedding(mask)  # X + P, the ordinal embedding
        key_mask = attention_mask(mask)  # (B, 1, 1, L) or None
        for block in self.blocks:
            z = block(z, key_mask)
        return z
