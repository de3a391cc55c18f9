"""A saved model loaded to score data (``predict``, ``evaluate --model``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxrank.data.sources import ModelInputs
from ctxrank.training.checkpoint import load_model, read_meta
from ctxrank.training.predict import set_threads


def load_for_scoring(path: str | Path, threads: int | None) -> tuple[Any, ModelInputs]:
    """The model saved in ``path``, set to ``threads`` CPU threads (None: the libraries' defaults),
    and what it says about the data it reads (:class:`~ctxrank.data.sources.ModelInputs`)."""
    meta = read_meta(path)
    predictor = load_model(path)
    if threads is not None:
        set_threads(predictor, threads)
    return predictor, ModelInputs.of(meta, predictor.n_features)
