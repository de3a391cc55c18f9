"""Export a saved neural ranker for serving: a TorchScript or ONNX file that scores RAW features.

:func:`export_model` turns a model directory of ``ctxrank train`` into one file that needs neither
ctxrank nor its normalizer at serving time. The file holds a :class:`ServingModel`::

    forward(features float32 (B, L, F), mask bool (B, L)[, categorical int64 (B, L, C)])
        -> scores float32 (B, L)

* ``features``: the RAW (un-normalized) features, in the model's feature order (``ctxrank.json``
  ``feature_names``); the saved normalizer (``transform``) is applied inside the graph, in float64 as
  :mod:`ctxrank.data.transforms` does, so the scores equal ``load_model(dir).predict(data)``.
* ``mask``: True = real item; real items come first in each row (the ``ListBatch`` convention; DLCM
  and DCM read the row order). Padded positions never change a real item's score or a normalization
  statistic: padded features and codes are replaced by 0 after normalization, as ``ListBatch`` pads.
* ``categorical``: only when the model was trained with categorical columns: the codes of the model's
  saved encoder (``ctxrank.json`` ``"table"``), 0 = unknown; codes outside the vocabulary count as 0.
* ``scores``: one per item; values at padded positions are arbitrary.

No registered model reads ``init_scores`` (their forward ignores them; DLCM dropped the authors'
residual), so they are never an input (``tests/export/test_export.py`` checks this for every model).

**Re-ranking models** (``rerank.initial = "lambdamart"``): ONNX only, ONE graph of the whole pipeline
(:mod:`ctxrank.export.pipeline`): LightGBM's trees (``DIR/initial/model.txt``) in float64, the top
``top_k`` cut with the project's order-free tie rule, the ``initial_rank`` / ``initial_score``
features, the normalizer and re-ranker, and the merge, on the same inputs as above (the F raw features
of the initial ranker); ``scores`` are ``-rank`` per row (re-ranked top k first, then the cut items
in initial order), the values of ``load_model(dir).predict`` (:func:`ctxrank.training.rerank.
merge_scores`). The re-ranker is exported with the initial scores as an input, which
:func:`ctxrank.export.pipeline.splice_trees` replaces by the tree nodes. TorchScript cannot hold the
trees: refused, pointing to ONNX. The check compares the file with ``predict`` on lists of ``top_k +
3`` items (up to ``top_k`` = :data:`CHECK_MAX_TOP_K`) with tied initial scores.

**Seed ensembles** (``ensemble = k``): one graph, :class:`EnsembleServing`, the mean of the k members'
serving models on the same inputs (a re-ranking ensemble's members share one initial ranker: one
pipeline graph whose re-ranker is the ensemble).

**Baselines** (LambdaMART, RankSVM, AdaRank) are not torch models and are refused; LightGBM's own
``model.txt`` in a LambdaMART directory is its serving format.

How: this module only wraps. The normalizer is the transform's own list form
(:meth:`ctxrank.data.transforms.Transform.normalize_lists`, the same equations as ``transform()``,
its statistics as buffers) and the ranker is the model's own forward, traced (``torch.jit.trace``).
A model whose forward loops over the list (DLCM's eq. 4 GRU, DCM's encoder) owns a traceable form of
that loop: while traced it runs the loop compiled by :func:`torch.jit.script`, so the length stays
dynamic (:mod:`ctxrank.models._jit`). ONNX goes through ``torch.onnx.export(dynamo=False)`` (the
TorchScript-based exporter, which turns those loops into ONNX ``Loop``), opset :data:`ONNX_OPSET`,
with dynamic batch and list axes. Every export is checked: the written file is
loaded back and run on a batch of another shape than the traced one, and must match ``predict`` (and,
for a model that does not read the row order, match it with each list's rows shuffled).
"""

from ctxrank.export.wrappers import EnsembleServing, FeatureNormalizer, ServingModel, serving_model
from ctxrank.export.write import (
    CHECK_ATOL,
    CHECK_MAX_TOP_K,
    CHECK_RTOL,
    EXPORT_FORMATS,
    META_NAME,
    ONNX_OPSET,
    ExportResult,
    check_tolerance,
    example_inputs,
    export_model,
)

__all__ = [
    "CHECK_ATOL",
    "CHECK_MAX_TOP_K",
    "CHECK_RTOL",
    "EXPORT_FORMATS",
    "META_NAME",
    "ONNX_OPSET",
    "EnsembleServing",
    "ExportResult",
    "FeatureNormalizer",
    "ServingModel",
    "check_tolerance",
    "example_inputs",
    "export_model",
    "serving_model",
]
