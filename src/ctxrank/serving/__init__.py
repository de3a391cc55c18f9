"""Serving a saved model: the whole re-ranking pipeline (LambdaMART's trees, the top-k cut, the
re-ranker and the merge) as one ONNX graph (:mod:`ctxrank.serving.pipeline`)."""
