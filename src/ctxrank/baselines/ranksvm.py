"""RankSVM: a linear SVM on within-query pairwise differences.

Herbrich, Graepel & Obermayer, "Support Vector Learning for Ordinal Regression" (ICANN 1999) and
Joachims, "Optimizing Search Engines using Clickthrough Data" (KDD 2002): learn ``w`` such that
``w · x_i > w · x_j`` whenever item i is more relevant than item j of the same query, by training a
binary linear SVM without intercept on the difference vectors ``x_i - x_j`` with target
``sign(y_i - y_j)``:

    min_w  1/2 ||w||^2 + C sum_{pairs p} loss(t_p w · (x_i - x_j))

Choices (all recorded in ``ctxrank.json``):

* **Features.** A global min-max scaling fitted on the training rows and stored with the model
  (LETOR's QueryLevelNorm files are already in [0, 1], user data is not; the SVM's regularizer is not
  scale-invariant). Not clipped: the scorer is linear and extrapolates.
* **Pairs.** Every within-query pair of items with different labels (:func:`pair_indices`: built per
  query with ``numpy.triu_indices`` on the query's items, vectorized; the loop runs over queries, not
  pairs). A query with more than ``max_pairs_per_query`` such pairs keeps a uniform random subset of
  that size (without replacement). Each pair is oriented at random (``x_i - x_j`` with target
  ``sign(y_i - y_j)``, or the negation of both), so both classes appear and the data is symmetric; the
  generator is ``numpy.random.default_rng(seed)``. Memory: ``n_pairs * F`` float64 for the stacked
  differences (MQ2008 Fold1: about 180,000 pairs x 46 features = 66 MB).
* **Solver.** scikit-learn's ``LinearSVC`` (liblinear), ``fit_intercept=False`` (an intercept has no
  meaning for differences). ``loss="squared_hinge"`` (default): the L2-loss SVM solved in the primal
  by liblinear's trust-region Newton method (``dual=False``), which is fast when pairs far outnumber
  features and needs no randomness. ``loss="hinge"``: the L1-loss SVM of Herbrich and Joachims
  (SVM-light / SVMrank), solved in the dual by coordinate descent (``dual=True``, its visiting order
  seeded with ``seed``). ``C`` multiplies the *sum* of pair losses (liblinear's convention; SVMrank
  divides its ``-c`` by the number of queries instead), so its good range depends on the data: hence the grid.
* **Model selection.** ``C`` is chosen from a grid (default ``(1e-3, 1e-2, 1e-1, 1)``) by the mean
  validation ``metric`` (default NDCG@10, ctxrank's standard convention, queries without a relevant
  item count ``no_relevant`` = 0); ties go to the first value of the grid. Without a validation split
  ``C`` must be a single number.
* **Score.** ``w · m(x)`` in float64 (``m`` = the stored scaling). Deterministic given ``seed``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxrank._checks import check_int, check_positive, check_seed
from ctxrank._io import float_or_nan
from ctxrank.baselines import _linear as lin
from ctxrank.baselines.lambdamart import NotFittedError, save_meta
from ctxrank.data.ranking_data import RankingData

__all__ = ["LOSSES", "NotFittedError", "RankSVM", "pair_indices"]

KIND = "ranksvm"
LOSSES = ("squared_hinge", "hinge")
DEFAULT_C = (1e-3, 1e-2, 1e-1, 1.0)


#: a query of more pairs than this (64 MiB of ``triu_indices``, about 2,900 items) is paired row by row
DENSE_PAIRS = 2**22


def _long_query_pairs(
    yq: np.ndarray, max_pairs: int | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs :func:`pair_indices` takes from one query (same pairs, same order, same random draws)
    without building its ``n (n - 1) / 2`` candidate pairs: O(n + pairs kept) memory. The pairs with
    different labels that start at item ``i`` number ``n - 1 - i`` less the later items of ``i``'s label;
    a kept pair's index in ``triu`` order then gives its row, and its column is found in that row alone."""
    n = yq.size
    _, label, counts = np.unique(yq, return_inverse=True, return_counts=True)
    order = np.argsort(label, kind="stable")  # items grouped by label, in position order
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)  # place within its label
    starting = (n - 1 - np.arange(n)) - (counts[label] - 1 - rank)  # (n,) differing pairs (i, j > i)
    total = int(starting.sum())
    if max_pairs is not None and total > max_pairs:
        keep = np.sort(rng.choice(total, size=max_pairs, replace=False))
    else:
        keep = np.arange(total)
    ends = np.cumsum(starting)
    rows = np.searchsorted(ends, keep, side="right")
    within = keep - (ends[rows] - starting[rows])
    cols = np.empty_like(rows)
    for r in np.unique(rows):
        at = rows == r
        cols[at] = np.flatnonzero(yq[r + 1 :] != yq[r])[within[at]] + r + 1
    return rows, cols


def pair_indices(
    labels: np.ndarray,
    query_offsets: np.ndarray,
    *,
    max_pairs_per_query: int | None = 1000,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The training pairs of RankSVM: rows ``first``, ``second`` and target ``sign(y_first - y_second)``.

    For each query (rows ``query_offsets[q]:query_offsets[q + 1]``), every unordered pair of its items
    with different labels, from ``numpy.triu_indices``; more than ``max_pairs_per_query`` of them are
    subsampled uniformly without replacement (kept in ``triu`` order). Then each pair is swapped with
    probability 1/2, so ``target`` is +1 or -1 at random. If every target still has the same sign (a
    handful of pairs), the first pair is swapped, so that both classes are present.

    Python loops over the queries only; the pairs of a query are built with array operations. A query of
    more than :data:`DENSE_PAIRS` candidate pairs (a few thousand items) is paired without building them
    all (:func:`_long_query_pairs`: the same pairs and draws, memory of the pairs kept).

    Args:
        labels: ``(N,)`` graded labels.
        query_offsets: ``(Q + 1,)`` int64 query boundaries.
        max_pairs_per_query: cap per query (``None`` = no cap).
        rng: the generator (subsampling, then orientation).

    Returns:
        ``first`` int64 ``(P,)``, ``second`` int64 ``(P,)`` (global row indices, same query, different
        labels) and ``target`` float64 ``(P,)`` in ``{-1, +1}`` equal to ``sign(y[first] - y[second])``.
    """
    y = np.asarray(labels)
    off = np.asarray(query_offsets, dtype=np.int64)
    firsts, seconds = [], []
    triu_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for q in range(off.size - 1):
        a, n = int(off[q]), int(off[q + 1] - off[q])
        if n < 2:
            continue
        yq = y[a : a + n]
        if n * (n - 1) // 2 > DENSE_PAIRS:  # a long query: its pairs row by row, the same ones
            i, j = _long_query_pairs(yq, max_pairs_per_query, rng)
        else:
            if n not in triu_cache:
                triu_cache[n] = np.triu_indices(n, k=1)
            i, j = triu_cache[n]  # (n(n-1)/2,) each
            differ = yq[i] != yq[j]
            i, j = i[differ], j[differ]
            if max_pairs_per_query is not None and i.size > max_pairs_per_query:
                keep = np.sort(rng.choice(i.size, size=max_pairs_per_query, replace=False))
                i, j = i[keep], j[keep]
        firsts.append(i + a)
        seconds.append(j + a)
    first = np.concatenate([np.zeros(0, dtype=np.int64), *firsts]).astype(np.int64)  # (P,)
    second = np.concatenate([np.zeros(0, dtype=np.int64), *seconds]).astype(np.int64)  # (P,)
    if first.size == 0:
        return first, second, np.zeros(0, dtype=np.float64)
    swap = rng.random(first.size) < 0.5  # (P,)
    first, second = np.where(swap, second, first), np.where(swap, first, second)
    target = np.sign(y[first].astype(np.float64) - y[second].astype(np.float64))
    if np.all(target == target[0]):  # one class only (few pairs): LinearSVC needs both
        first[0], second[0] = second[0], first[0]
        target[0] = -target[0]
    return first, second, target


class RankSVM(lin.LinearScorer):
    """Pairwise linear SVM ranker (see the module docstring for every choice).

    Args:
        C: one regularization constant, or a grid of them chosen by the validation ``metric``.
        loss: ``"squared_hinge"`` (primal Newton, default) or ``"hinge"`` (dual coordinate descent).
        max_pairs_per_query: at most this many pairs per query (uniform subsample); ``None`` = all.
        metric: validation metric choosing ``C`` (any ctxrank metric name, default ``"ndcg@10"``).
        no_relevant: that metric's value for a validation query without relevant item (0, 1, "skip").
        tol: liblinear's stopping tolerance.
        max_iter: liblinear's iteration limit (a ``ConvergenceWarning`` when reached).
        seed: pair subsampling and orientation, and the dual solver's order.

    Learned attributes: ``coef_`` float64 ``(F,)`` weights on the scaled features, ``C_`` the chosen
    constant, ``grid_scores_`` ``{C: mean validation metric}`` (empty without validation),
    ``best_score_`` (the chosen ``C``'s validation metric, None without validation), ``n_pairs_``,
    ``scaler_`` (:class:`~ctxrank.data.transforms.GlobalMinMax`, unclipped), ``n_features_in_``,
    ``feature_names_in_``, ``converged_`` (False when liblinear hit ``max_iter`` for the chosen ``C``).

    Only ``features`` are used; ``RankingData.categorical`` is ignored.
    """

    _PARAMS = ("C", "loss", "max_pairs_per_query", "metric", "no_relevant", "tol", "max_iter", "seed")

    def __init__(
        self,
        *,
        C: float | Sequence[float] = DEFAULT_C,
        loss: str = "squared_hinge",
        max_pairs_per_query: int | None = 1000,
        metric: str = "ndcg@10",
        no_relevant: float | str = 0.0,
        tol: float = 1e-4,
        max_iter: int = 1000,
        seed: int = 0,
    ) -> None:
        if isinstance(C, (list, tuple, np.ndarray)):
            if len(C) == 0:
                raise ValueError("C must be a number > 0 or a non-empty list of them, got an empty list")
            grid = tuple(check_positive("C", c) for c in C)
            if len(set(grid)) != len(grid):
                raise ValueError(f"C: the grid has repeated values: {list(C)!r}")
            self.C: float | tuple[float, ...] = grid
        else:
            self.C = check_positive("C", C)
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {list(LOSSES)}, got {loss!r}")
        self.loss = loss
        self.max_pairs_per_query = check_int(
            "max_pairs_per_query", max_pairs_per_query, 1, allow_none=True
        )
        self.metric = lin.check_metric("metric", metric)
        self.no_relevant = lin.check_no_relevant(no_relevant)
        self.tol = check_positive("tol", tol)
        self.max_iter = check_int("max_iter", max_iter, 1)
        self.seed = check_seed("seed", seed)

    @property
    def grid(self) -> tuple[float, ...]:
        return self.C if isinstance(self.C, tuple) else (self.C,)

    @property
    def objective(self) -> str:
        """What is minimized, e.g. ``"pairwise-squared-hinge"`` (``RunConfig.loss_name``)."""
        return "pairwise-" + self.loss.replace("_", "-")

    # --------------------------------------------------------------- training
    def _svm(self, c: float):
        from sklearn.svm import LinearSVC

        return LinearSVC(
            C=c,
            loss=self.loss,
            dual=self.loss == "hinge",  # liblinear: hinge only in the dual; squared hinge in the primal
            fit_intercept=False,
            tol=self.tol,
            max_iter=self.max_iter,
            random_state=self.seed,
        )

    def fit(self, train: RankingData, valid: RankingData | None = None) -> RankSVM:
        """Fit on ``train``'s pairs; with ``valid``, choose ``C`` from the grid by ``metric``.

        Raises:
            TypeError: not RankingData.
            ValueError: a grid of ``C`` without ``valid``, different feature counts, no query of
                ``train`` with two different labels (no pair), non-finite features or labels.
        """
        from sklearn.exceptions import ConvergenceWarning

        lin.check_data(train, "train")
        if valid is not None:
            lin.check_data(valid, "valid")
        lin.check_same_features(train, valid)
        if valid is None and len(self.grid) > 1:
            raise ValueError(
                f"C is a grid of {len(self.grid)} values, chosen on a validation split: pass valid, or "
                "give a single C"
            )
        if not np.isfinite(train.labels).all():
            raise ValueError(f"train ({train.source or 'training split'}): labels must be finite")
        scaler = lin.fit_scaler(train)
        x = lin.scaled(scaler, train)  # (N, F) float64
        rng = np.random.default_rng(self.seed)
        first, second, target = pair_indices(
            train.labels, train.query_offsets, max_pairs_per_query=self.max_pairs_per_query, rng=rng
        )
        if first.size == 0:
            raise ValueError(
                f"train ({train.source or 'training split'}): no query has two items with different "
                "labels, so there is no pair to learn from"
            )
        diffs = x[first] - x[second]  # (P, F) float64
        x_valid = lin.scaled(scaler, valid) if valid is not None else None

        best = None
        grid_scores: dict[float, float] = {}
        for c in self.grid:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                svm = self._svm(c).fit(diffs, target)
            converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
            w = np.ascontiguousarray(svm.coef_.ravel(), dtype=np.float64)  # (F,)
            score = None
            if x_valid is not None:
                score = lin.mean_metric(x_valid @ w, valid, self.metric, self.no_relevant)
                grid_scores[c] = score
            if best is None or (score is not None and score > best[2]):
                best = (c, w, score, converged)
        c, w, score, converged = best
        if not converged:
            warnings.warn(
                f"RankSVM: liblinear reached max_iter={self.max_iter} for the chosen C={c:g} "
                "(raise max_iter or tol)",
                ConvergenceWarning,
                stacklevel=2,
            )
        self.scaler_ = scaler
        self.coef_ = w
        self.C_ = float(c)
        self.grid_scores_ = grid_scores
        self.best_score_ = score
        self.converged_ = converged
        self.n_pairs_ = int(first.size)
        self.n_features_in_ = train.n_features
        self.feature_names_in_ = tuple(train.feature_names)
        return self

    def training_summary(self) -> dict[str, Any]:
        """What ``ctxrank train`` records: the chosen ``C``, its validation metric, the grid, the pairs."""
        self._check_fitted()
        return {
            "C": self.C_,
            "metric": self.metric,
            "best_valid_metric": self.best_score_,
            "grid": {repr(c): v for c, v in self.grid_scores_.items()},
            "n_pairs": self.n_pairs_,
            "converged": self.converged_,
        }

    # ------------------------------------------------------------ persistence
    def save(
        self, directory: str | Path, *, run_config: Mapping[str, Any] | None = None, overwrite: bool = False
    ) -> Path:
        """Write ``ctxrank.json`` (``"kind": "ranksvm"``: parameters, scaling, weights as JSON numbers)
        and ``config.toml`` when ``run_config`` is given. JSON only, written atomically, into a new or
        empty directory (``overwrite``: any; :func:`ctxrank._modeldir.claim_model_dir`). Returns the
        directory."""
        import sklearn

        self._check_fitted()
        params = self.get_params()
        params["C"] = list(self.C) if isinstance(self.C, tuple) else self.C
        meta = {
            "scikit_learn_version": sklearn.__version__,
            "params": params,
            "C": self.C_,
            "best_score": self.best_score_,
            "grid_scores": [[c, v] for c, v in self.grid_scores_.items()],
            "n_pairs": self.n_pairs_,
            "converged": self.converged_,
            "objective": self.objective,
            **self._linear_meta(),
        }
        return save_meta(directory, KIND, meta, run_config, overwrite)

    @classmethod
    def load(cls, directory: str | Path) -> RankSVM:
        """Load a model saved by :meth:`save` (reads ``ctxrank.json`` only; never unpickles).

        Raises:
            ValueError: not a ctxrank model directory, another kind of model, or metadata that is
                incomplete or inconsistent.
        """
        directory, meta, params, n = lin.read_kind(directory, KIND, "a RankSVM")
        try:
            lin.check_params(cls, params)
            model = cls(**params)
            c = check_positive("C", meta.get("C"))
            grid_scores = {float(k): float_or_nan(v) for k, v in meta.get("grid_scores") or []}
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{directory}: bad RankSVM metadata ({exc})") from None
        model.scaler_ = lin.load_scaler(directory, meta, n)
        model.coef_ = lin.float_vector(directory, meta, "coef", n)
        model.C_ = c
        model.grid_scores_ = grid_scores
        # None without validation (no grid scores); else a float, NaN written as null by strict JSON
        model.best_score_ = float_or_nan(meta.get("best_score")) if grid_scores else None
        model.n_pairs_ = int(meta.get("n_pairs") or 0)
        model.converged_ = bool(meta.get("converged", True))
        model.n_features_in_ = n
        model.feature_names_in_ = tuple(str(s) for s in meta.get("feature_names") or ())
        return model
