"""Missing feature values for the neural models: a learned fill and a missing indicator.

``MissingIndicator(inner, n_features)`` reads features (B, L, F) that may hold NaN (a missing value:
``null_fill = "keep"``, NaN in the API's ``X``) and gives the inner model (built for 2F features)

    x' = [where(isnan(x), fill, x), isnan(x)]        (B, L, 2F)

with ``fill`` (F,) a learned parameter, initialized at 0 (the training mean after z-scoring), and the
0/1 indicator telling the model which values were missing, as gradient-boosted trees learn a direction
for missing values per split. NaN never reaches the inner model, so every model, loss and export path
is unchanged; the wrapper is chosen by ``train.missing = "indicator"`` and recorded with the run config,
so a saved model rebuilds it. Normalizers skip NaN when fitting and pass it through
(:mod:`ctxrank.data.transforms`). Written here because no library wraps a torch ranking model this way;
the form is the usual one of tabular deep learning (a mean / learned fill plus a missingness indicator).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from ctxrank.data.lists import ListBatch
from ctxrank.models.base import FLOAT_BYTES, RankingModule

__all__ = ["MissingIndicator"]


class MissingIndicator(RankingModule):
    """NaN features -> a learned fill plus indicators, then the inner model (built for ``2 * n_features``).

    The state dict holds ``fill`` (F,) and the inner model's weights under ``inner.``; ``name``,
    ``config``, the loss defaults and ``rerank_features`` are the inner model's.
    """

    def __init__(self, inner: RankingModule, n_features: int) -> None:
        nn.Module.__init__(self)  # not RankingModule.__init__: the inner model owns config and embeddings
        if not isinstance(inner, RankingModule):
            raise TypeError(f"MissingIndicator wraps a neural RankingModule, got {type(inner).__name__}")
        if inner.n_features != 2 * n_features:
            raise ValueError(f"the inner model reads {inner.n_features} features; expected 2 x {n_features}")
        self.adopt(inner)
        self.n_features = n_features  # the raw features; the inner model reads 2 x n_features
        self.fill = nn.Parameter(torch.zeros(n_features))

    def expand(self, features: torch.Tensor) -> torch.Tensor:
        """(..., F) features with NaN -> (..., 2F): filled values, then the 0/1 missing indicators."""
        missing = torch.isnan(features)
        filled = torch.where(missing, self.fill.to(features.dtype), features)
        return torch.cat([filled, missing.to(features.dtype)], dim=-1)

    def batch_memory(self, batch_size: int, list_len: int, *, training: bool) -> int:
        """The inner model's, plus the expanded (B, L, 2F) inputs and their indicator mask."""
        inner = self.inner.batch_memory(batch_size, list_len, training=training)
        return inner + FLOAT_BYTES * batch_size * list_len * 3 * self.n_features

    def forward(
        self,
        features: torch.Tensor,
        mask: torch.Tensor,
        *,
        init_scores: torch.Tensor | None = None,
        categorical: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.inner(self.expand(features), mask, init_scores=init_scores, categorical=categorical)

    def training_loss(self, batch: ListBatch, loss_fn: Callable[..., torch.Tensor]) -> torch.Tensor:
        """The inner model's training loss on the expanded features (the fill is learned through it)."""
        expanded = dataclasses.replace(batch, features=self.expand(batch.features))
        return self.inner.training_loss(expanded, loss_fn)
