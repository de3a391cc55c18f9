"""A saved model loaded to score data (``predict``, ``evaluate --model``): a model directory of
``ctxrank train`` (torch; LightGBM for trees) or an ONNX file of ``ctxrank export`` (onnxruntime only:
neither torch nor scikit-learn is imported)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxrank._checks import resolve_threads
from ctxrank._modeldir import read_meta
from ctxrank.data.sources import ModelInputs

#: the onnxruntime an ONNX file needs comes with these extras (pyproject.toml)
ONNX_EXTRA = "pip install 'ctxrank[serve]' (or [export])"


def load_for_scoring(path: str | Path, threads: int | None) -> tuple[Any, ModelInputs]:
    """The model saved in ``path`` (an ``.onnx`` file or a model directory), set to ``threads`` CPU
    threads (None: the libraries' defaults; an ONNX file's: 1), and what it says about the data it reads
    (:class:`~ctxrank.data.sources.ModelInputs`). The model has ``predict(RankingData) -> (N,) scores``."""
    if is_onnx(path):
        return load_onnx(path, threads)
    from ctxrank.training.checkpoint import load_model  # torch: only for a model directory
    from ctxrank.training.predict import set_threads

    meta = read_meta(path)
    predictor = load_model(path)
    if threads is not None:
        set_threads(predictor, threads)
    return predictor, ModelInputs.of(meta, predictor.n_features)


def is_onnx(path: str | Path) -> bool:
    """``path`` names an ONNX file (a file, or a name ending in ``.onnx``), not a model directory."""
    return Path(path).is_file() or Path(path).suffix == ".onnx"


class _OnnxPredictor:
    """An :class:`~ctxrank.serving.onnx_ranker.OnnxRanker` with the model interface of the loader:
    ``predict(RankingData) -> (N,) scores``."""

    def __init__(self, ranker: Any) -> None:
        self.ranker = ranker
        self.n_features = ranker.n_features

    def predict(self, data: Any) -> Any:
        return self.ranker.predict_data(data)


def load_onnx(path: str | Path, threads: int | None) -> tuple[Any, ModelInputs]:
    """:func:`load_for_scoring` of an ONNX file: its feature count and table columns come from the
    file's metadata; it records no ``null_fill`` (the data's own rule applies)."""
    try:
        from ctxrank.serving.onnx_ranker import OnnxRanker  # onnxruntime: an optional extra
    except ModuleNotFoundError as exc:
        raise ValueError(f"{path}: scoring an ONNX file needs {exc.name}: {ONNX_EXTRA}") from None
    ranker = OnnxRanker(path, threads=resolve_threads(threads))
    return _OnnxPredictor(ranker), ModelInputs(ranker.n_features, ranker.table_spec())
