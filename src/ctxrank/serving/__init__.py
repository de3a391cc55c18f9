"""Serving: a ranker behind HTTP, and the pieces it is made of.

* :class:`OnnxRanker` (:mod:`.onnx_ranker`): an exported ONNX graph under onnxruntime; ``predict(X,
  qid) -> scores``; needs neither torch nor a model directory.
* :class:`DirectoryRanker` (:mod:`.directory`): a model directory of ``ctxrank train``, through
  ctxrank's own predict (re-ranking pipelines included); needs torch.
* :func:`pad_rows`, :func:`unpad_scores` (:mod:`.padding`): rows of queries <-> the padded
  ``features (B, L, F)``, ``mask (B, L)`` (, ``categorical (B, L, C)``) of an exported graph.
* A re-ranking model's one ONNX graph (LambdaMART's trees, the top-k cut, the re-ranker, the merge;
  written by ``ctxrank export``, :mod:`ctxrank.export.pipeline`) is served by :class:`OnnxRanker`
  like any exported graph: serving only loads and serves.
* :mod:`.requests`: the JSON of ``POST /rank``; :mod:`.server`: ``ctxrank serve`` (FastAPI + uvicorn,
  dynamic batching, health, readiness, Prometheus metrics). docs/serving.md walks through them.

Lazy: importing ``ctxrank.serving`` loads nothing of these; onnxruntime, torch and FastAPI load with
the module that needs them.
"""

from ctxrank._lazy import lazy_exports

_EXPORTS = {
    "OnnxRanker": "ctxrank.serving.onnx_ranker",
    "DirectoryRanker": "ctxrank.serving.directory",
    "PaddedLists": "ctxrank.serving.padding",
    "pad_rows": "ctxrank.serving.padding",
    "unpad_scores": "ctxrank.serving.padding",
    "load_ranker": "ctxrank.serving.server",
    "ServeOptions": "ctxrank.serving.server",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
