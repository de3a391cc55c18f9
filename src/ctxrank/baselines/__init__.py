"""Baseline rankers outside the neural models: ``LambdaMART`` (LightGBM's lambdarank objective),
``RankSVM`` (pairwise linear SVM, scikit-learn's LinearSVC) and ``AdaRank`` (Xu & Li 2007, boosting
single features on MAP or NDCG).

Names are re-exported lazily, so importing this package imports neither LightGBM nor scikit-learn.
"""

from ctxrank._lazy import lazy_exports

_EXPORTS = {
    "AdaRank": "ctxrank.baselines.adarank",
    "LambdaMART": "ctxrank.baselines.lambdamart",
    "RankSVM": "ctxrank.baselines.ranksvm",
    "cross_fit_predict": "ctxrank.baselines.lambdamart",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
