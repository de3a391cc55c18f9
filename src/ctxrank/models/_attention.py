"""Multi-head attention over padded lists: the building blocks of the self-attention rankers (``attn``,
``setrank``).

Shapes: ``B`` lists padded to ``L`` items, ``d`` the model width, ``h`` heads of ``d_k = d / h``.

* :class:`MultiHeadAttention`: Vaswani et al. (2017) multi-head attention,
  ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O``,
  ``head_j = softmax(Q W_j^Q (K W_j^K)^T / sqrt(d_k)) V W_j^V`` (Vaswani et al.'s eq. 1 and the
  multi-head formula of their sec. 3.2.2, the attention that ``attn`` and ``setrank`` build on), with
  ``K = V``. Padded items are keys that are never attended to: the softmax runs over the real items of
  the list only.
  The product is ``torch.nn.functional.scaled_dot_product_attention`` (PyTorch's fused kernels: flash /
  memory-efficient attention on GPU, a fused CPU kernel), not a hand-written softmax; it traces and
  exports to ONNX (opset 14+).
* :class:`AttentionBlock`: one Transformer block over the items, a multi-head attention sublayer and a
  row-wise feed-forward sublayer ``rFF(x) = W_2 ReLU(W_1 x + b_1) + b_2``, each with a residual
  connection and layer normalization, either after the residual (``LN(x + Sublayer(x))``, Vaswani et
  al.; SetRank's MAB) or before the sublayer (``x + Sublayer(LN(x))``, the form of allRank's
  implementation, ``allrank/models/transformer.py``).
* :class:`RankEmbedding`: a learned embedding of each item's initial rank.
* :func:`attention_mask`: the ``(B, 1, 1, L)`` key mask the kernel takes, from ``mask`` (B, L).
* :func:`attend`: the product itself, in query chunks where it would build the ``(B, h, L, L)`` weights.

**Memory.** PyTorch 2.13's CPU kernel (``_scaled_dot_product_flash_attention_for_cpu``) never
builds the ``(B, h, Lq, Lk)`` weights, with or without a key mask, in training and in scoring: it keeps
``(B, h, Lq)`` log-sum-exps for backward. With attention dropout in training (``dropout_p > 0``) PyTorch
falls back to its math kernel, which builds the weights, their softmax, a float dropout mask and the
dropped weights, and keeps the last three for backward (a batch of 4 lists of 1,251 items, 4 heads: 96
MiB a copy, about 290 MiB a layer). :func:`attend_with_dropout` runs that kernel's operations one by one
(the values and gradients for one mask) and keeps the softmax and a bool mask only (about 1.25 copies a
layer). Where the weights exceed :data:`ATTENTION_BLOCK_BYTES` (16 MiB), :func:`attend` cuts the queries
into chunks whose ``(B, h, chunk, Lk)`` weights fit it and runs each chunk under activation
checkpointing (``torch.utils.checkpoint``, non-reentrant): forward keeps no chunk's weights, backward
recomputes one chunk at a time with the same dropout mask (the RNG state is replayed), so the weights of
at most one chunk exist at once (at most :data:`CHUNK_COPIES` copies of 16 MiB, whatever the list
length). Each query's softmax runs over all its keys in every chunk, so chunking changes no value
(``tests/models/test_attention.py``); only the draws of the dropout mask differ from an unchunked call.
The cost is one more forward of the attention product in backward, only for lists whose weights exceed
the budget (measured on a loaded machine, a batch of 8 lists of 1,251 items: ``attn``'s step was no
slower chunked, 15.6 s against 16.9 s, docs/benchmarks.md). On CUDA, PyTorch's memory-efficient kernel
supports dropout without building the weights (its documentation; no GPU measured here); the chunks act
there too, so memory is bounded either way.

Padding never changes a real item: a padded item is no key of any query, every other operation is
per item, and the outputs at padded positions are never read by a real item. A list with no real item
at all (which no batch of the library holds, but a caller may pass) attends to its padding instead of
producing NaN, so its (meaningless) outputs stay finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ctxrank.models._dropout import Dropout, apply_mask, dropout, keep_mask, kept_scale
from ctxrank.models._jit import records_backward, tracing
from ctxrank.models.base import RankingModule

__all__ = [
    "ATTENTION_BLOCK_BYTES",
    "AttentionBlock",
    "MultiHeadAttention",
    "RankEmbedding",
    "attend",
    "attend_in_chunks",
    "attend_with_dropout",
    "attention_mask",
    "attention_weight_bytes",
    "query_chunk",
]

#: bytes of the ``(B, h, chunk, Lk)`` attention weights of one query chunk (one float copy) where the math
#: kernel builds them (attention dropout in training; module docstring)
ATTENTION_BLOCK_BYTES = 16 * 2**20
#: float copies of the ``(B, h, Lq, Lk)`` weights counted per layer when they are not chunked: the softmax
#: and a bool mask that :func:`attend_with_dropout` keeps for backward, and the scores, the float noise and
#: the dropped weights that exist while one layer runs (an upper bound)
KEPT_COPIES = 4
#: float copies of one chunk's weights alive at the peak of its recomputation and backward (scores,
#: softmax, dropout mask, dropped weights and the gradients of three of them, with margin)
CHUNK_COPIES = 8


def attention_mask(mask: torch.Tensor) -> torch.Tensor | None:
    """``mask`` (B, L) bool, True = real item -> the key mask (B, 1, 1, L) of
    ``scaled_dot_product_attention`` (True = may be attended to), or None when every item is real (the
    kernels without a mask are the fastest; not while a trace records, whose graph must hold any mask).
    A row without any real item attends to all its positions (finite outputs instead of NaN)."""
    if not tracing() and bool(mask.all()):
        return None
    keys = mask | ~mask.any(dim=-1, keepdim=True)  # (B, L)
    return keys[:, None, None, :]


def query_chunk(
    batch_size: int, heads: int, q_len: int, k_len: int, *, itemsize: int = 4, budget: int | None = None
) -> int:
    """Queries per chunk of :func:`attend`: ``q_len`` when the ``(B, h, Lq, Lk)`` weights fit ``budget``
    bytes (None: :data:`ATTENTION_BLOCK_BYTES`, read at the call), else the most whose ``(B, h, chunk,
    Lk)`` weights fit (at least 1)."""
    budget = ATTENTION_BLOCK_BYTES if budget is None else budget
    row = max(batch_size * heads * k_len * itemsize, 1)  # bytes of one query's weights
    return max(1, min(q_len, budget // row))


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None,
    dropout_p: float,
    *,
    budget: int | None = None,
) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d_k)) v`` per head with dropout ``dropout_p`` on the weights: ``q`` (B, h,
    Lq, d_k), ``k``, ``v`` (B, h, Lk, d_k), ``key_mask`` (B, 1, 1, Lk) or None -> (B, h, Lq, d_k).

    ``torch.nn.functional.scaled_dot_product_attention`` in one call, or, with ``dropout_p > 0`` (where
    PyTorch's CPU kernel builds the weights) and weights above ``budget`` bytes (None:
    :data:`ATTENTION_BLOCK_BYTES`), in query chunks of :func:`query_chunk`, each checkpointed (module
    docstring). Not while a trace records (export runs in eval mode, without dropout)."""
    if dropout_p > 0 and not tracing():
        B, h, Lq, _ = q.shape
        chunk = query_chunk(B, h, Lq, k.shape[2], itemsize=q.element_size(), budget=budget)
        if chunk < Lq:
            return attend_in_chunks(q, k, v, key_mask, dropout_p, chunk)
        if q.device.type == "cpu" and records_backward(q, k, v):
            return attend_with_dropout(q, k, v, key_mask, dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, dropout_p=dropout_p)


def attend_with_dropout(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None, dropout_p: float
) -> torch.Tensor:
    """PyTorch's math kernel of ``scaled_dot_product_attention`` with dropout (the CPU's path in
    training), op for op: ``q`` and ``k^T`` each scaled by ``d_k^(-1/4)``, the key mask added as
    ``-inf``, the softmax, dropout, the product with ``v`` -- the same values and gradients, bit for bit,
    for the same dropout keep decisions (drawn by ``ctxrank.models._dropout.keep_mask``;
    tests/models/test_dropout.py). The softmax is ``torch.softmax`` where every query has a key (no key
    mask, or one from :func:`attention_mask`), PyTorch's ``_safe_softmax`` otherwise (rows without a key
    give 0, not NaN); the two are equal wherever a row has a key, and the check costs one small reduction
    where ``_safe_softmax`` reads every weight three more times. What differs from PyTorch's kernel is what
    backward keeps: the softmax and a bool dropout mask, not also the float dropout mask and the dropped
    weights (two ``(B, h, Lq, Lk)`` float32 tensors fewer a layer; the dropped weights are rebuilt in
    backward)."""
    s = math.sqrt(1.0 / math.sqrt(q.shape[-1]))  # sdp::calculate_scale(q).sqrt(), in double as PyTorch
    weights = torch.matmul(q * s, k.transpose(-2, -1) * s)  # (B, h, Lq, Lk)
    if key_mask is None:
        return _DroppedProduct.apply(torch.softmax(weights, -1), v, dropout_p)
    weights.add_(torch.where(key_mask.logical_not(), -math.inf, weights.new_zeros(())))
    every_row_has_a_key = bool(key_mask.any(dim=-1).all())
    weights = torch.softmax(weights, -1) if every_row_has_a_key else torch.ops.aten._safe_softmax(weights, -1)
    return _DroppedProduct.apply(weights, v, dropout_p)


class _DroppedProduct(torch.autograd.Function):
    """``Dropout(P) V`` for attention weights ``P`` (B, h, Lq, Lk) and values ``V`` (B, h, Lk, d_k), keeping
    ``P`` (which the softmax keeps anyway), a bool mask of the kept weights and ``V``; backward rebuilds
    ``Dropout(P)`` from them (``ctxrank.models._dropout`` draws the mask and rounds its scale)."""

    @staticmethod
    def forward(ctx: Any, weights: torch.Tensor, v: torch.Tensor, p: float) -> torch.Tensor:
        kept, scale = keep_mask(weights, p), kept_scale(weights, p)
        ctx.save_for_backward(weights, kept, v, scale)
        return torch.matmul(weights.mul(kept.view(torch.uint8)).mul_(scale), v)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        weights, kept, v, scale = ctx.saved_tensors
        dropped_weights = apply_mask(weights.mul(scale), kept)  # Dropout(P) as forward computed it
        d_dropped = torch.matmul(grad, v.transpose(-2, -1))
        d_v = torch.matmul(dropped_weights.transpose(-2, -1), grad)
        return apply_mask(d_dropped.mul_(scale), kept), d_v, None


def attend_in_chunks(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None,
    dropout_p: float,
    chunk: int,
) -> torch.Tensor:
    """:func:`attend` for ``chunk`` queries at a time, each chunk checkpointed (its weights are rebuilt in
    backward, with the same dropout mask): every query still attends to all ``Lk`` keys, so the values
    are those of one call (with ``dropout_p = 0``, the same numbers to float rounding)."""
    parts = [
        checkpoint(_sdpa, part, k, v, key_mask, dropout_p, use_reentrant=False, preserve_rng_state=True)
        for part in q.split(chunk, dim=2)
    ]
    return torch.cat(parts, dim=2)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None, dropout_p: float
) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, dropout_p=dropout_p)


def attention_weight_bytes(
    batch_size: int, heads: int, q_len: int, k_len: int, *, layers: int, dropout: float, training: bool
) -> int:
    """Upper bound of the bytes of attention weights that ``layers`` stacked :func:`attend` calls hold at
    a training step's peak (float32): none without attention dropout or when scoring (PyTorch's fused
    kernel; its ``(B, h, Lq)`` log-sum-exps are per item, counted by the caller); with dropout,
    :data:`KEPT_COPIES` copies of the weights per layer when they fit :data:`ATTENTION_BLOCK_BYTES`,
    else :data:`CHUNK_COPIES` copies of one chunk's (the chunks keep nothing between forward and
    backward)."""
    if not training or dropout == 0:
        return 0
    row = 4 * batch_size * heads * k_len  # bytes of one query's weights
    chunk = query_chunk(batch_size, heads, q_len, k_len)
    if chunk >= q_len:
        return layers * KEPT_COPIES * row * q_len
    return CHUNK_COPIES * row * chunk


class MultiHeadAttention(nn.Module):
    """Multi-head attention with ``K = V`` (module docstring).

    ``q_proj`` holds ``W^Q`` (``d x d``, the ``h`` heads' ``W_j^Q`` stacked) and its bias, ``kv_proj``
    ``[W^K; W^V]`` (``2 d x d``), ``out_proj`` ``W^O``. Each ``d x d`` projection is initialized
    Xavier-uniform (as allRank, which Xavier-initializes every weight matrix of its model), biases 0 (as
    ``torch.nn.MultiheadAttention``; allRank leaves its biases at ``nn.Linear``'s default); attention
    dropout (on the attention weights, training only) as in Vaswani et al. and allRank.
    """

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"the model width {d_model} must be a multiple of the number of heads {heads}")
        self.d_model, self.heads, self.dropout = d_model, heads, dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        with torch.no_grad():
            for linear in (self.q_proj, self.kv_proj, self.out_proj):
                for block in linear.weight.split(d_model):  # W^Q, W^K, W^V, W^O: d x d each
                    nn.init.xavier_uniform_(block)
                nn.init.zeros_(linear.bias)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        """(B, N, d) -> (B, h, N, d_k)."""
        B, N, _ = t.shape
        return t.reshape(B, N, self.heads, self.d_model // self.heads).transpose(1, 2)

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor | None = None, key_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``query`` (B, Lq, d), ``keys`` (B, Lk, d) (None: self-attention, ``keys = query``),
        ``key_mask`` (B, 1, 1, Lk) bool from :func:`attention_mask` or None (every key is real)
        -> (B, Lq, d)."""
        k, v = self.kv_proj(query if keys is None else keys).split(self.d_model, dim=-1)
        out = attend(
            self._heads(self.q_proj(query)),
            self._heads(k),
            self._heads(v),
            key_mask,
            self.dropout if self.training else 0.0,
        )  # (B, h, Lq, d_k)
        B, _, Lq, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, self.d_model))


class AttentionBlock(nn.Module):
    """One Transformer block: attention sublayer, then ``rFF``, each with a residual and layer norm.

    ``norm_first=False`` (Vaswani et al.; SetRank's ``MAB(Q, K, K)``)::

        B = LN(Q + Dropout(MultiHead(Q, K, K)));   out = LN(B + Dropout(rFF(B)))

    ``norm_first=True`` (allRank's ``SublayerConnection``, its implementation of the context-aware ranker)::

        B = Q + Dropout(MultiHead(LN(Q), LN(K), LN(K)));   out = B + Dropout(rFF(LN(B)))

    ``rFF(x) = W_2 Dropout(ReLU(W_1 x + b_1)) + b_2`` (width ``d_ff``). Dropout is the identity in eval
    mode. ``keys = None`` is self-attention (``K = Q``).
    """

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, *, norm_first: bool) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.attention = MultiHeadAttention(d_model, heads, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)

    def rff(self, x: torch.Tensor) -> torch.Tensor:
        """Row-wise feed-forward ``W_2 Dropout(ReLU(W_1 x + b_1)) + b_2``: (..., d) -> (..., d)."""
        return self.ff2(dropout(self.ff1(x), self.dropout.p, self.training, relu=True))

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor | None = None, key_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``query`` (B, Lq, d), ``keys`` (B, Lk, d) or None (self-attention), ``key_mask`` (B, 1, 1, Lk)
        or None -> (B, Lq, d)."""
        if self.norm_first:
            q = self.norm1(query)
            kv = None if keys is None else self.norm1(keys)
            b = query + self.dropout(self.attention(q, kv, key_mask))
            return b + self.dropout(self.rff(self.norm2(b)))
        b = self.norm1(query + self.dropout(self.attention(query, keys, key_mask)))
        return self.norm2(b + self.dropout(self.rff(b)))


class RankEmbedding(nn.Module):
    """A learned ``d``-vector per initial rank: the item in row ``r`` of a list (0 = the initial top
    item) gets row ``min(r, max_rank - 1)`` of the table, so ranks from ``max_rank`` on share the last
    vector. Initialized ``N(0, 0.1^2)`` (SetRank's released code)."""

    def __init__(self, max_rank: int, d_model: int) -> None:
        super().__init__()
        self.table = nn.Embedding(max_rank, d_model)
        nn.init.normal_(self.table.weight, std=0.1)

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        """``mask`` (B, L) -> (B, L, d): the embedding of each row's rank (padded rows get one too; they
        are never attended to)."""
        rank = torch.ones_like(mask, dtype=torch.long).cumsum(dim=1) - 1  # (B, L): 0, 1, 2, ...
        return self.table(rank.clamp(max=self.table.num_embeddings - 1))


class EncodingRanker(RankingModule):
    """An attention ranker: ``forward`` scores ``encode``'s ``(B, L, d)`` output with ``score`` (``d -> 1``);
    with ``rank_embedding`` an item's row is its initial rank, so the scores read the row order."""

    @classmethod
    def reads_row_order(cls, params: Mapping[str, Any]) -> bool:
        return params.get("rank_embedding") is True

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.score(self.encode(features, mask, categorical)).squeeze(-1)  # (B, L)
