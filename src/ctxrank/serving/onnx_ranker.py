"""`OnnxRanker`: an exported ONNX ranker under onnxruntime, rows of queries in, one score a row out.

::

    ranker = OnnxRanker("qilcm.onnx")               # onnxruntime + NumPy only: no torch, no ctxrank model
    scores = ranker.predict(X, qid)                  # X (N, F) raw features, qid (N,) -> scores (N,)

The file is one of ``ctxrank export --format onnx`` (a neural ranker, its normalizer inside) or of
:mod:`ctxrank.export.pipeline` (trees, cut and re-ranker in one graph): inputs ``features`` float32
(B, L, F), ``mask`` bool (B, L), optionally ``categorical`` int64 (B, L, C); output ``scores``
(B, L). The file's metadata entry ``ctxrank.json`` (docs/export.md) gives the feature names (the
order of ``X``'s columns), the categorical columns and their vocabulary, and whether missing values
(NaN) may be given (``missing_values``; absent: no). A file without that entry is served by position
only, its feature count read from the graph's input shape. The entry is untrusted input, checked by
:func:`check_file_meta` with the model directory's validators (``ctxrank._modeldir``).

:meth:`OnnxRanker.predict` checks its inputs before running the graph: ``X`` numeric (N, F) with the
file's F, finite (NaN only where the file says the model reads missing values), values within float32;
``qid`` one id a row; codes (N, C) integers. Rows are grouped by query and padded by
:mod:`ctxrank.serving.padding` (all rows of a query form one list, in their order in ``X``).

The session runs the graph as docs/export.md "Serving one list fast" recommends: CPU, all graph
optimizations, sequential execution, ``threads`` intra-op threads (default 1).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from ctxrank._checks import FLOAT32_MAX, check_int
from ctxrank._modeldir import (
    MAX_FEATURES,
    meta_bool,
    meta_cardinalities,
    meta_dict,
    meta_int,
    meta_keys,
    meta_str,
    meta_strings,
    parse_meta_json,
    short,
)
from ctxrank.serving.padding import pad_rows, unpad_scores
from ctxrank.training.rerank_spec import RerankSpec

__all__ = ["META_KEY", "OnnxRanker", "check_file_meta"]

META_KEY = "ctxrank.json"  # the metadata entry ctxrank.export writes (ctxrank.export.META_NAME)
_INPUTS = ("features", "mask", "categorical")


#: the keys of ``ctxrank.json`` every exported file has (``ctxrank.export``), and those it may have
#: (``missing_values`` is absent from files exported before 2026-11-27: no missing values)
REQUIRED_KEYS = (
    "model", "ctxrank_version", "transform", "feature_names", "categorical_names",
    "categorical_cardinalities", "categorical_vocab", "inputs", "output",
)  # fmt: skip
OPTIONAL_KEYS = ("missing_values", "ensemble", "rerank")


def check_file_meta(meta: Any, where: str) -> dict[str, Any]:
    """The ``ctxrank.json`` metadata of an exported file, every key checked with the model directory's
    validators (:mod:`ctxrank._modeldir`): strict types (booleans are JSON ``true`` / ``false`` only),
    integers in range, no unknown key, categorical columns, cardinalities and vocabularies that agree.

    Raises:
        ValueError: one line naming ``where`` and the key at fault.
    """
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: expected a JSON object, got {short(meta)}")
    meta_keys(meta, REQUIRED_KEYS, OPTIONAL_KEYS, where)
    meta_str(meta, "model", where, max_len=256)
    for key in ("ctxrank_version", "transform"):  # null when the model directory recorded none
        if meta[key] is not None:
            meta_str(meta, key, where, max_len=256)
    names = meta_strings(meta, "feature_names", where)
    if len(names) > MAX_FEATURES:
        raise ValueError(f"{where}: 'feature_names' names {len(names):,} features; at most {MAX_FEATURES:,}")
    cats = meta_strings(meta, "categorical_names", where)
    for key, values in (("feature_names", names), ("categorical_names", cats)):
        if len(set(values)) != len(values):
            raise ValueError(f"{where}: {key!r} names a column twice: {short(values)}")
    cards = meta["categorical_cardinalities"]
    if not isinstance(cards, list) or len(cards) != len(cats):
        raise ValueError(
            f"{where}: 'categorical_cardinalities' must be a list of {len(cats)} integers (one per "
            f"categorical column), got {short(cards)}"
        )
    cards = meta_cardinalities(meta, where)
    vocab = meta_dict(meta, "categorical_vocab", where)
    unknown = sorted(set(vocab) - set(cats))
    if unknown:
        raise ValueError(
            f"{where}: 'categorical_vocab' has columns {short(unknown)} that are not categorical_names "
            f"{short(cats)}"
        )
    for column, card in zip(cats, cards, strict=True):
        words = meta_strings(vocab, column, where, name=f"categorical_vocab.{column}")
        if len(words) >= card or len(set(words)) != len(words):
            raise ValueError(
                f"{where}: 'categorical_vocab.{column}' must hold at most {card - 1} distinct categories "
                f"(its cardinality {card} less the unknown code 0), got {len(words)}"
            )
    for key, shape in (("inputs", "a list of [name, shape, dtype, description]"), ("output", None)):
        rows = meta[key] if key == "inputs" else [meta[key]]
        if (
            not isinstance(rows, list)
            or not 0 < len(rows) <= 8
            or not all(
                isinstance(r, list) and len(r) == 4 and all(isinstance(v, str) for v in r) for r in rows
            )
        ):
            raise ValueError(
                f"{where}: {key!r} must be {shape or '[name, shape, dtype, description]'} (strings), "
                f"got {short(meta[key])}"
            )
    meta_bool(meta, "missing_values", where, default=False)
    if "ensemble" in meta:
        meta_int(meta, "ensemble", where, 1, 10_000)
    if "rerank" in meta:
        RerankSpec.from_json(meta["rerank"], where, exported=True)
    return meta


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
        where = f"{self.path} (metadata {META_KEY})"
        return check_file_meta(parse_meta_json(text, where, "ONNX metadata"), where)

    def _check_graph(self) -> None:
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        unknown = sorted(set(inputs) - set(_INPUTS))
        if "features" not in inputs or "mask" not in inputs or unknown or "scores" not in outputs:
            raise ValueError(
                f"{self.path}: not a ranking graph of ctxrank: expected inputs features, mask[, categorical] "
                f"and output scores, got inputs {sorted(inputs)} and outputs {outputs}"
            )
        meta = self.meta  # checked: check_file_meta
        names = meta.get("feature_names", [])
        width = inputs["features"].shape[-1] if len(inputs["features"].shape) == 3 else None
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
        cats = tuple(meta.get("categorical_names", ()))
        if bool(cats) != ("categorical" in inputs):
            raise ValueError(
                f"{self.path}: its metadata names categorical columns {list(cats)} but the graph "
                f"{'takes' if 'categorical' in inputs else 'does not take'} a categorical input"
            )
        self.categorical_names = cats
        vocab = meta.get("categorical_vocab", {})
        self.categorical_vocab = {c: list(vocab.get(c, [])) for c in cats}
        self.categorical_cardinalities = tuple(meta.get("categorical_cardinalities", ()))
        self.allow_missing = meta.get("missing_values", False)

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
            cards = list(self.categorical_cardinalities)
            if codes.dtype.kind not in "iu" or (
                len(cards) == codes.shape[1] and codes.size and ((codes < 0) | (codes >= cards)).any()
            ):
                raise ValueError(f"categorical: expected integer codes in [0, cardinality) {cards}")
        lists = pad_rows(x, qid, categorical)
        return unpad_scores(self.score_lists(lists.features, lists.mask, lists.categorical), lists.rows)

    def predict_data(self, data: Any) -> np.ndarray:
        """float32 (N,) scores of a :class:`~ctxrank.data.ranking_data.RankingData` in its row order
        (its queries are its lists), checked as :meth:`predict` checks ``X``."""
        return self.predict(data.features, data.query_index, data.categorical)

    def table_spec(self) -> dict[str, Any] | None:
        """The table spec (:meth:`ctxrank.data.table.TableSpec.to_dict`) a table to score is read with:
        the file's feature names as the numeric columns, its categorical columns and vocabulary; no
        query or label column (the file records none: the reader's options give them). None when the
        file names no features (a table is then read with the reader's options alone)."""
        if not self.feature_names:
            return None
        cats = list(self.categorical_names)
        encoder = {"min_count": 1, "columns": cats, "vocab": self.categorical_vocab} if cats else None
        names = list(self.feature_names)
        return {
            "query": None,
            "label": None,
            "docid": None,
            "numeric": names,
            "categorical": cats,
            "encoder": encoder,
        }
