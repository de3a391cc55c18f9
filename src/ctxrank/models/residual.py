"""Residual re-ranking: the re-ranker's score is the initial ranker's score plus a learned correction.

``Residual(inner)`` scores ``init_scores + gate * inner(features, mask, ...)`` with a learned scalar
``gate`` initialized at exactly 0 (the "ReZero" gate of Bachlechner et al. 2021). An untrained residual
re-ranker therefore returns the initial scores themselves, bit for bit, and re-ranks the top k exactly as
the initial ranker (LambdaMART) did, ties included (:func:`ctxrank.training.rerank.merge_scores` keeps
tied items in their initial order). Training moves ``gate`` away from 0 and with it the inner model's
correction; ``ctxrank.training.run`` keeps the initial order when validation says training did not help.

The wrapper is generic over the neural models whose ``training_loss`` takes a ranking loss: the loss
sees ``init_scores + gate * scores`` wherever the inner model passes its scores to the loss, so extra
terms (QILCM's query confusion) are unchanged. Models with their own objective (ARSM-L2R) are refused.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ctxrank.data.lists import ListBatch
from ctxrank.models.base import FLOAT_BYTES, RankingModule, with_default_options

__all__ = ["Residual"]


class Residual(RankingModule):
    """``init_scores + gate * inner(...)``, ``gate`` a scalar parameter initialized at 0.

    The state dict holds ``gate`` and the inner model's weights under ``inner.``; ``name``, ``config``,
    the loss defaults and ``rerank_features`` are the inner model's.
    """

    def __init__(self, inner: RankingModule) -> None:
        nn.Module.__init__(self)  # not RankingModule.__init__: the inner model owns config and embeddings
        if not isinstance(inner, RankingModule):
            raise TypeError(f"Residual wraps a neural RankingModule, got {type(inner).__name__}")
        own = inner.traits.own_objective
        if own:
            raise ValueError(
                f"rerank.residual: {inner.name} trains its own {own} objective; a residual "
                "correction applies to models trained with a ranking loss"
            )
        self.adopt(inner)
        self.gate = nn.Parameter(torch.zeros(()))

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """The inner model's, plus the residual scores ``init_scores + gate * scores`` and their gradient."""
        inner = self.inner.batch_memory(batch_size, list_len, training=training)
        return inner + FLOAT_BYTES * batch_size * list_len * 8

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if init_scores is None:
            raise ValueError(
                "a residual re-ranker scores init_scores + a correction: init_scores are required"
            )
        correction = self.inner(features, mask, init_scores=init_scores, categorical=categorical)
        dtype = torch.promote_types(init_scores.dtype, correction.dtype)  # never rounds init_scores down
        return init_scores.to(dtype) + self.gate.to(dtype) * correction.to(dtype)

    def training_loss(self, batch: ListBatch, loss_fn: Callable[..., torch.Tensor]) -> torch.Tensor:
        """The inner model's training loss, with the ranking loss applied to the residual scores."""
        if batch.init_scores is None:
            raise ValueError("a residual re-ranker trains on init_scores + a correction: the batch has none")
        traits = self.inner.traits
        loss_fn = with_default_options(loss_fn, traits.default_loss, traits.default_loss_params)
        init = batch.init_scores

        def residual_loss(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, **kw):
            dtype = torch.promote_types(init.dtype, scores.dtype)
            return loss_fn(init.to(dtype) + self.gate.to(dtype) * scores.to(dtype), labels, mask, **kw)

        return self.inner.training_loss(batch, residual_loss)
