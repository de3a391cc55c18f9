"""Scoring trained neural rankers: :func:`predict` (flat scores in file order), :func:`evaluate_model`
(per-query metric vectors) and :func:`set_threads`; the model with its normalizer, what ``load_model``
returns for a neural model, is ``ctxrank.training.checkpoint.TorchPredictor``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ctxrank._memory import AUTO
from ctxrank.data.lists import iterate_batches, scatter_scores
from ctxrank.data.ranking_data import RankingData
from ctxrank.metrics import evaluate_queries
from ctxrank.models.base import RankingModule
from ctxrank.training.memory import scoring_fits

__all__ = ["evaluate_model", "predict", "set_threads"]


def predict(
    model: RankingModule,
    data: RankingData,
    *,
    init_scores: np.ndarray | None = None,
    batch_size: int = 512,
    device: torch.device | str = "cpu",
    max_memory_bytes: int | str = AUTO,
) -> np.ndarray:
    """Scores float64 (N,) in the file order of ``data`` (no gradients, ``torch.inference_mode``).

    Batches of ``batch_size`` lists of similar length, each cut smaller when its estimated memory exceeds
    ``max_memory_bytes`` (``train.max_memory_bytes``) or, on the CPU, when it holds more than
    ``CPU_SCORING_ITEMS`` padded items or ``CPU_SCORING_BYTES`` estimated bytes (a list's scores
    change at most by float32 rounding); a list that does not fit alone is refused before anything is
    scored (:func:`ctxrank.training.memory.scoring_fits`)."""
    fits = scoring_fits(model, data, max_memory_bytes, device)
    was_training = model.training
    model.eval()
    out = np.full(data.n_items, np.nan, dtype=np.float64)
    try:
        with torch.inference_mode():
            for batch in iterate_batches(data, batch_size, init_scores=init_scores, fits=fits):
                batch = batch.to(device)
                scores = model.score_batch(batch)
                scatter_scores(batch, scores.double().cpu(), data.n_items, out=out)
    finally:
        model.train(was_training)
    return out


def evaluate_model(
    model: RankingModule,
    data: RankingData,
    metrics: Sequence[str] = ("ndcg@10",),
    *,
    init_scores: np.ndarray | None = None,
    batch_size: int = 512,
    **metric_options: Any,
) -> dict[str, np.ndarray]:
    """Per-query metric vectors of the model's scores on ``data``."""
    scores = predict(model, data, init_scores=init_scores, batch_size=batch_size)
    return evaluate_queries(scores, data.labels, data.query_offsets, metrics, **metric_options)


def set_threads(predictor: Any, threads: int) -> None:
    """Score with ``threads`` CPU threads: PyTorch's intra-op threads, and the ``num_threads`` of every
    part of ``predictor`` that has one (LambdaMART, AdaRank), through re-ranking pipelines
    (``initial``, ``reranker``) and ensembles (``members``)."""
    torch.set_num_threads(threads)
    parts = [predictor]
    while parts:
        part = parts.pop()
        if hasattr(part, "num_threads"):
            part.num_threads = threads
        inner = (getattr(part, "initial", None), getattr(part, "reranker", None))
        parts += [p for p in inner if p is not None] + list(getattr(part, "members", ()))
