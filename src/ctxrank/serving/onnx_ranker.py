"""`OnnxRanker`: an exported ONNX ranker under onnxruntime, rows of queries in, one score a row out.

::

    ranker = OnnxRanker("qilcm.onnx")               # onnxruntime + NumPy only: no torch, no ctxrank model
    scores = ranker.predict(X, qid)                  # X (N, F) raw features, qid (N,) -> scores (N,)

The file is one of ``ctxrank export --format onnx`` (a neural ranker, its normalizer inside) or of
:mod:`ctxrank.serving.pipeline` (trees, cut and re-ranker in one graph): inputs ``features`` float32
(B, L, F), ``mask`` bool (B, L), optionally ``categorical`` int64 (B, L, C); output ``scores``
(B, L). The file's metadata entry ``ctxrank.json`` (docs/export.md) gives the feature names (the
order of ``X``'s columns), the categorical columns and their vocabulary, and whether missing values
(NaN) may be given (``missing_values``; absent: no). A file without that entry is served by position
only, its feature count read from the graph's input shape.

:meth:`OnnxRanker.predict` checks its inputs before running the graph: ``X`` numeric (N, F) with the
file's F, finite (NaN only where the file says the model reads missing values), values within float32;
``qid`` one id a row; codes (N, C) integers. Rows are grouped by query and padded by
:mod:`ctxrank.serving.padding` (all rows of a query form one list, in their order in ``X``).

The session runs the graph as docs/export.md "Serving one list fast" recommends: CPU, all graph
optimizations, sequential execution, ``threads`` intra-op threads (default 1).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from ctxrank._checks import FLOAT32_MAX, check_int
from ctxrank.serving.padding import pad_rows, unpad_scores

__all__ = ["META_KEY", "OnnxRanker"]

META_KEY = "ctxrank.json"  # the metadata entry ctxrank.export writes (ctxrank.export.META_NAME)
_INPUTS = ("features", "mask", "categorical")


class OnnxRanker:
    """An ONNX ranking graph loaded with onnxruntime (see the module docstring).

    Args:
        path: the ``.onnx`` file.
        threads: onnxruntime's intra-op threads (a positive integer).

    Attributes:
        feature_names: the F feature names, in ``X``'s column order (empty when the file has none).
        categorical_names: the C categorical columns (empty: the graph takes no ``categorical``).
        categorical_vocab: column -> categories; the code of ``vocab[col][i]`` is ``i + 1``, else 0.
        allow_missing: the graph reads NaN as a missing value.
        meta: the file's ``ctxrank.json`` metadata (empty when absent).

    Raises:
        ValueError: no such file, not an ONNX file onnxruntime loads, or a graph without the inputs and
            output of an exported ranker.
    """

    kind = "onnx"

    def __init__(self, path: str | os.PathLike, *, threads: int = 1) -> None:
        self.path = Path(path)
        threads = check_int("threads", threads)
        if not self.path.is_file():
            raise ValueError(f"{self.path}: no such ONNX file")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: warnings about unused initializers are noise here
        try:
            self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own classes (InvalidProtobuf, Fail, ...)
            first = (str(exc).strip() or type(exc).__name__).splitlines()[0][:300]
            raise ValueError(f"{self.path}: not an ONNX file onnxruntime can load ({first})") from None
        self.meta = self._read_meta()
        self._check_graph()

    # ------------------------------------------------------------------------------ description
    def _read_meta(self) -> dict[str, Any]:
        text = self.session.get_modelmeta().custom_metadata_map.get(META_KEY)
        if text is None:
            return {}
        try:
            meta = json.loads(text)
        except ValueError:
            raise ValueError(f"{self.path}: its {META_KEY} metadata is not JSON") from None
        if not isinstance(meta, dict):
            raise ValueError(f"{self.path}: its {META_KEY} metadata is not a JSON object")
        return meta

    def _check_graph(self) -> None:
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        unknown = sorted(set(inputs) - set(_INPUTS))
        if "features" not in inputs or "mask" not in inputs or unknown or "scores" not in outputs:
            raise ValueError(
                f"{self.path}: not a ranking graph of ctxrank: expected inputs features, mask[, categorical] "
                f"and output scores, got inputs {sorted(inputs)} and outputs {outputs}"
            )
        meta = self.meta
        names = meta.get("feature_names") or []
        width = inputs["features"].shape[-1] if len(inputs["features"].shape) == 3 else None
        if names and not all(isinstance(n, str) for n in names):
            raise ValueError(f"{self.path}: feature_names of its metadata are not strings")
        if names and isinstance(width, int) and width != len(names):
            raise ValueError(
                f"{self.path}: the graph takes {width} features but its metadata names {len(names)}"
            )
        if not names and not isinstance(width, int):
            raise ValueError(
                f"{self.path}: neither its metadata nor the graph says how many features it takes"
            )
        self.feature_names: tuple[str, ...] = tuple(names)
        self.n_features = len(names) if names else int(width)  # type: ignore[arg-type]
        cats = tuple(str(c) for c in meta.get("categorical_names") or ())
        if bool(cats) != ("categorical" in inputs):
            raise ValueError(
                f"{self.path}: its metadata names categorical columns {list(cats)} but the graph "
                f"{'takes' if 'categorical' in inputs else 'does not take'} a categorical input"
            )
        self.categorical_names = cats
        vocab = meta.get("categorical_vocab") or {}
        self.categorical_vocab = {c: [str(v) for v in vocab.get(c, [])] for c in cats}
        self.allow_missing = bool(meta.get("missing_values", False))

    def describe(self) -> dict[str, Any]:
        """What a client needs to call the model (served at ``/ready``)."""
        return {
            "kind": self.kind,
            "path": str(self.path),
            "model": self.meta.get("model"),
            "feature_names": list(self.feature_names),
            "n_features": self.n_features,
            "categorical_names": list(self.categorical_names),
            "missing_values": self.allow_missing,
            "rerank": self.meta.get("rerank"),
        }

    # ---------------------------------------------------------------------------------- scoring
    def check_features(self, X: Any) -> np.ndarray:
        """``X`` as float32 (N, F), checked (see the module docstring)."""
        x = np.asarray(X)
        if x.ndim != 2 or x.dtype.kind not in "fiu":
            raise ValueError(
                f"X: expected (N, {self.n_features}) numbers, got shape {x.shape} of dtype {x.dtype}"
            )
        if x.shape[1] != self.n_features:
            raise ValueError(f"X: the model takes {self.n_features} features, got {x.shape[1]} columns")
        x64 = x.astype(np.float64, copy=False)
        bad = np.isinf(x64) | (np.abs(x64) > FLOAT32_MAX)
        if not self.allow_missing:
            bad |= np.isnan(x64)
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            what = "finite values within float32" + (
                "" if self.allow_missing else " (this model reads no NaN)"
            )
            raise ValueError(f"X: row {row}, column {col} is {float(x64[row, col])!r}; expected {what}")
        return x.astype(np.float32)

    def score_lists(
        self, features: np.ndarray, mask: np.ndarray, categorical: np.ndarray | None = None
    ) -> np.ndarray:
        """The graph's float32 (B, L) scores of padded lists (unchecked: :meth:`predict` checks)."""
        feeds = {"features": features, "mask": mask}
        if self.categorical_names:
            feeds["categorical"] = categorical
        return self.session.run(["scores"], feeds)[0]

    def predict(self, X: Any, qid: Any, categorical: Any = None) -> np.ndarray:
        """float32 (N,) scores of the rows of ``X`` (N, F) grouped by ``qid`` (N,); ``categorical``
        (N, C) codes of the file's encoder when the model has categorical columns."""
        x = self.check_features(X)
        if bool(self.categorical_names) != (categorical is not None):
            need = f"(N, {len(self.categorical_names)}) codes" if self.categorical_names else "None"
            raise ValueError(f"categorical: this model takes {need}")
        if categorical is not None and np.shape(categorical)[1:] != (len(self.categorical_names),):
            raise ValueError(
                f"categorical: expected (N, {len(self.categorical_names)}) codes, "
                f"got shape {np.shape(categorical)}"
            )
        if categorical is not None:
            codes = np.asarray(categorical)
            cards = [int(c) for c in self.meta.get("categorical_cardinalities") or ()]
            if codes.dtype.kind not in "iu" or (
                len(cards) == codes.shape[1] and codes.size and ((codes < 0) | (codes >= cards)).any()
            ):
                raise ValueError(f"categorical: expected integer codes in [0, cardinality) {cards}")
        lists = pad_rows(x, qid, categorical)
        return unpad_scores(self.score_lists(lists.features, lists.mask, lists.categorical), lists.rows)
