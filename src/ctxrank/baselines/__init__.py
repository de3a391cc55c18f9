"""Baseline rankers outside the neural models: ``LambdaMART`` (LightGBM's lambdarank objective).

Names are re-exported lazily, so importing this package does not import LightGBM.
"""

from ctxrank._lazy import lazy_exports

_EXPORTS = {
    "LambdaMART": "ctxrank.baselines.lambdamart",
    "cross_fit_predict": "ctxrank.baselines.lambdamart",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
