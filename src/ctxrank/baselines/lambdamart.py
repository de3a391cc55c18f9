"""LambdaMART: LightGBM's ``lambdarank`` objective behind a scikit-learn-style wrapper on RankingData.

LambdaMART (Burges, "From RankNet to LambdaRank to LambdaMART: An Overview", MSR-TR-2010-82) boosts
regression trees on the LambdaRank gradients of NDCG. LightGBM (Ke et al., NeurIPS 2017) implements it
as ``objective="lambdarank"``; this module only prepares the data, the gains, the early stopping and the
saved-model format.

Conventions (checked against LightGBM 4.x, see ``tests/baselines/test_lambdamart.py``):

* **Gain.** ``label_gain = [2^y - 1 for y in 0..max_label]`` (``max_label`` over the training and
  validation labels), so LightGBM's NDCG gain is ctxrank's ``gain="exp2"``. Labels must be
  non-negative integers (LightGBM uses them as indices into ``label_gain``).
* **Discount and cutoff.** LightGBM's NDCG@k uses ``1 / log2(1 + r)`` and the whole list when the
  query is shorter than k: ctxrank's ``convention="standard"``.
* **Queries with no relevant item.** LightGBM's ``ndcg@k`` metric counts such a query as **1**
  (``src/metric/rank_metric.hpp``, ``NDCGMetric::Eval``: "if all doc in this query are all negative,
  let its NDCG=1"); LightGBM 4.7 has no parameter to change this (its ranking parameters are
  ``lambdarank_truncation_level``, ``lambdarank_norm``, ``lambdarank_position_bias_regularization``,
  ``label_gain``, ``eval_at``). ctxrank's default is 0. The raw LightGBM values are kept in
  ``evals_result_`` unchanged; early stopping and ``best_score_`` use the value converted to this
  model's ``no_relevant`` convention (exact: the no-relevant queries add the constant ``n0`` to
  LightGBM's sum, so ``ctxrank = (lgb * Q - n0 + n0 * no_relevant) / Q``, or ``/ (Q - n0)`` without
  the ``n0`` terms for ``"skip"``). The selected iteration is the same under every convention up to
  floating-point rounding, since the conversion is increasing and affine.
* **Ties.** LightGBM's metric sorts a query's items with ``std::stable_sort`` on descending score
  (``src/metric/dcg_calculator.cpp``, ``DCGCalculator::CalDCG``): equal scores keep input order,
  which is ctxrank's rule. Tree ensembles produce many exact ties, so this matters; the tests check it
  on deliberately tied scores.

* **Click logs.** With ``debias`` the training split is an interaction log (``RankingData.shown_positions``
  set; labels = the interactions) and the trees learn relevance without the log's position bias, either
  by LightGBM's own position debiasing (``debias="lightgbm"``: its ``Dataset(position=...)``, LightGBM
  >= 4.1) or by inverse-propensity weights (``debias="ips"``: its per-item ``Dataset(weight=...)``,
  :func:`ips_weights`). The positions enter training only: the model's inputs are the features alone.
  A run config sets them by ``train.debias`` (``"pal"`` -> ``"lightgbm"``, ``"ips"``) and its
  propensities, as for every model (``ctxrank.registry``), never by ``model_params``.
* **Validating on a click log.** The clicks' NDCG rewards reproducing the logging order, so early
  stopping never reads it on a debiased fit whose validation split is a log (``shown_positions`` set).
  Given an IPS objective (``fit(valid_objective=...)``, which a run passes with ``train.debias =
  "ips"``: :func:`ctxrank.clicks.validation.log_objective`, the run's propensities and clip),
  LightGBM's metric is off (``metric="None"``) and a ``feval`` computing the IPS estimate of DCG@k of
  the relevance alone stops and selects the iteration. Without one (``"lightgbm"``: no propensities to
  estimate by; ``"ips"`` called without it) there is no early stopping: ``n_estimators`` trees are
  kept, with a warning, the clicks' NDCG only recorded. ``"none"`` (naive): the clicks' NDCG selects as
  on labels, recorded as naive. ``validation_`` / the fit summary's ``validation`` say which
  (``validation_metric_`` / ``validation_metric``: its name in a few words). (This
  module cannot build the objective itself: ``ctxrank.clicks`` imports it.)

Nothing here imports LightGBM at module import time.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ctxrank._checks import (
    MAX_INT,
    check_choice,
    check_int,
    check_no_relevant,
    check_seed,
    is_number,
    parse_int,
)
from ctxrank._checks import is_int as _is_int
from ctxrank._io import atomic_write, dumps, float_or_nan, floats_or_nan, to_toml, write_json
from ctxrank._modeldir import (
    FORMAT_VERSION,
    MAX_FEATURES,
    META_FILE,
    claim_model_dir,
    meta_cardinalities,
    meta_dict,
    meta_floats,
    meta_int,
    meta_str,
    meta_strings,
    read_meta,
    read_regular,
    short,
)
from ctxrank._propensity import capped_inverse, curve, is_clip, is_eta, is_probability, pairwise_item_weights
from ctxrank._version import __version__
from ctxrank.baselines._lgbtext import MAX_TREES, check_model_text
from ctxrank.data.ranking_data import RankingData, check_feature_count, require_ranking_data
from ctxrank.data.transforms import QueryZScore

__all__ = [
    "DEBIAS",
    "LambdaMART",
    "LogValidationWarning",
    "NotFittedError",
    "cross_fit_predict",
    "ips_weights",
]

MODEL_FILE = "model.txt"
KIND = "lightgbm"
#: LightGBM's limit on the items of one query (``DCGCalculator::kMaxPosition``).
MAX_QUERY_LENGTH = 10000
#: Largest label whose gain ``2^y - 1`` is a finite double.
MAX_LABEL = 1023
#: The largest ``model.txt`` read (bytes).
MAX_MODEL_BYTES = 2**31
_METRIC_RE = re.compile(r"\s*ndcg\s*@\s*(\d+)\s*", re.IGNORECASE)

# Named parameter -> the LightGBM parameter it sets (for rejecting duplicates in extra_lgb_params).
_LGB_NAME = {
    "n_estimators": "num_iterations",
    "learning_rate": "learning_rate",
    "num_leaves": "num_leaves",
    "min_data_in_leaf": "min_data_in_leaf",
    "feature_fraction": "feature_fraction",
    "bagging_fraction": "bagging_fraction",
    "lambda_l2": "lambda_l2",
    "max_position": "lambdarank_truncation_level",
    "early_stopping_rounds": "early_stopping_round",
    "eval_at": "eval_at",
    "metric": "metric",
    "seed": "seed",
    "num_threads": "num_threads",
    "deterministic": "deterministic",
    "verbose": "verbosity",
}
# ctxrank's own parameters (not LightGBM's): how validation NDCG is read, how a click log is debiased.
_OWN = ("no_relevant", "debias", "propensity", "propensity_clip", "list_features")
#: ``list_features`` values: the features alone, or with their per-list z-scores appended
LIST_FEATURES = ("none", "query-zscore")
#: ``debias`` values: naive training on the labels as given, LightGBM's position debiasing, IPS weights.
DEBIAS = ("none", "lightgbm", "ips")
# LightGBM parameters set here that no named parameter exposes.
_FIXED = {"objective": "always 'lambdarank'", "label_gain": "always 2^y - 1 (ctxrank's NDCG gain)"}


class NotFittedError(ValueError, AttributeError):
    """The model is used before ``fit`` (or ``load``)."""


class LogValidationWarning(UserWarning):
    """A fit validated on a click log without an estimate to stop by: every tree kept (``ctxrank train``
    prints it as one ``ctxrank: warning:`` line)."""


def save_meta(
    directory: str | Path,
    kind: str,
    meta: dict[str, Any],
    run_config: Mapping[str, Any] | None,
    overwrite: bool,
    *,
    files: Mapping[str, bytes] | None = None,
) -> Path:
    """Write a baseline's model directory: ``files`` (name -> content), ``config.toml`` (when
    ``run_config`` is given), then ``ctxrank.json`` (the format header, ``meta``, ``run_config``), each
    atomically, into a new or empty ``directory`` (``overwrite``: any;
    :func:`ctxrank._modeldir.claim_model_dir`). Returns the directory.

    Raises:
        ValueError: a parameter in ``meta["params"]`` that JSON cannot represent (nothing written).
    """
    for name, value in meta.get("params", {}).items():
        try:
            dumps(value)
        except TypeError:
            raise ValueError(f"cannot save parameter {name}={value!r}: not representable in JSON") from None
    directory = Path(directory)
    claim_model_dir(directory, overwrite=overwrite, how="pass overwrite=True")
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        atomic_write(directory / name, lambda tmp, content=content: tmp.write_bytes(content))
    if run_config is not None:
        text = to_toml(dict(run_config))
        atomic_write(directory / "config.toml", lambda tmp: tmp.write_text(text))
    header = {"format_version": FORMAT_VERSION, "kind": kind, "ctxrank_version": __version__}
    run = {"run_config": dict(run_config) if run_config is not None else None}
    write_json(directory / META_FILE, {**header, **meta, **run})
    return directory


class FittedBaseline:
    """What every baseline checks once fitted: ``fit`` / ``load`` set the attribute ``_FITTED``."""

    _FITTED = "booster_"
    # the predictor protocol of ``ctxrank.training.checkpoint.TorchPredictor``: a whole model, no torch
    # scorer
    ensemble_size, initial, spec, scorer = 0, None, None, None

    def save_model_dir(
        self, directory: Path, config: Any, *, summary: dict[str, Any], layout: Any, extra: Any = None
    ) -> Path:
        """The predictor protocol's save of a training run: :meth:`save` with ``config``'s run config
        (into ``directory`` as its caller claimed it), then ``extra`` and the fit's ``summary``
        (``"training"``, as a checkpoint records it) added to ``ctxrank.json``."""
        directory = self.save(directory, run_config=config.to_dict(), overwrite=True)
        write_json(directory / META_FILE, {**read_meta(directory), **(extra or {}), "training": summary})
        return directory

    def _check_fitted(self) -> None:
        if not hasattr(self, self._FITTED):
            name = type(self).__name__
            raise NotFittedError(f"this {name} is not fitted; call fit(train, valid) or {name}.load()")

    @property
    def n_features(self) -> int:
        """Feature count the model expects (``ctxrank.load_model``'s predictor protocol)."""
        self._check_fitted()
        return int(self.n_features_in_)

    def _predict_data(self, data: Any) -> RankingData:
        """``data`` checked for :meth:`predict`: fitted, a RankingData, the training feature count."""
        self._check_fitted()
        check_feature_count(data, self.n_features_in_)
        return data


def _aliases(name: str) -> set[str]:
    """LightGBM's aliases of a parameter, the name included (private LightGBM API, with a fallback)."""
    try:
        from lightgbm.basic import _ConfigAliases

        return set(_ConfigAliases.get(name)) | {name}
    except Exception:  # pragma: no cover - LightGBM moved its private alias table
        return {name}


_LGB_PARAMETERS: frozenset[str] | None = None


def _lgb_parameters() -> frozenset[str] | None:
    """Every parameter name and alias LightGBM accepts (its own table, ``LGBM_DumpParamAliases``
    through a private LightGBM API); None where that API is missing (then nothing is checked)."""
    global _LGB_PARAMETERS
    if _LGB_PARAMETERS is None:
        try:
            from lightgbm.basic import _ConfigAliases

            table = _ConfigAliases._get_all_param_aliases()
        except Exception:  # pragma: no cover - LightGBM moved its private alias table
            return None
        _LGB_PARAMETERS = frozenset(table) | frozenset(a for names in table.values() for a in names)
    return _LGB_PARAMETERS


def _check_lgb_name(name: str) -> None:
    """An extra parameter must be a LightGBM parameter or alias: a typo is never passed on (LightGBM
    would ignore it with a warning)."""
    known = _lgb_parameters()
    if known is None or name in known:
        return
    close = difflib.get_close_matches(
        name, list(dict.fromkeys([*_LGB_NAME, *_OWN, *sorted(known)])), n=3, cutoff=0.75
    )
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise ValueError(
        f"unknown LightGBM parameter {name!r}; {hint}valid: LambdaMART's parameters "
        f"{', '.join([*_LGB_NAME, *_OWN])}, or one of LightGBM's {len(known)} parameter names and "
        "aliases (https://lightgbm.readthedocs.io/en/latest/Parameters.html)"
    )


def _check_data(data: Any, what: str) -> RankingData:
    require_ranking_data(data, what)
    longest = int(data.query_lengths.max())
    if longest > MAX_QUERY_LENGTH:
        q = int(np.argmax(data.query_lengths))
        raise ValueError(
            f"{what}: query {str(data.query_ids[q])!r} has {longest:,} items; LightGBM's lambdarank accepts "
            f"at most {MAX_QUERY_LENGTH} per query (truncate the lists first)"
        )
    return data


def _check_labels(data: RankingData, what: str) -> int:
    """The largest label, after checking that every label is a non-negative integer."""
    y = data.labels
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(y) | (y < 0) | (y != np.floor(y)) | (y > MAX_LABEL)
    if bad.any():
        i, query = _first_row(data, bad)
        raise ValueError(
            f"{what} labels must be integers in [0, {MAX_LABEL}] (LightGBM's lambdarank indexes "
            f"label_gain = 2^y - 1 with them); found {float(y[i])!r} at row {i} (query "
            f"{query!r}) of {data.source or what}, {int(bad.sum())} such label(s) in all"
        )
    return int(y.max())


def _first_row(data: RankingData, bad: np.ndarray) -> tuple[int, Any]:
    """The first row where ``bad`` (bool ``(N,)``) holds, and the id of its query."""
    i = int(np.flatnonzero(bad)[0])
    return i, data.query_ids[int(np.searchsorted(data.query_offsets, i, side="right") - 1)]


def _normalize_no_relevant(value: Any) -> float | str:
    """The baselines' ``no_relevant`` parameter (``_checks.check_no_relevant``, as a run config's)."""
    return check_no_relevant("no_relevant", value)


class _EarlyStopping:
    """Early stopping on one validation metric, converted to ctxrank's no-relevant convention.

    LightGBM calls it after every iteration (after ``record_evaluation``, ``order`` 20). It keeps the
    first iteration with the highest converted value; with ``rounds`` it stops ``rounds`` iterations
    without a strict improvement later, and at the last iteration it stops too, so that
    ``lgb.train`` always truncates the returned booster to the best iteration.
    """

    def __init__(self, data_name: str, metric_name: str, rounds: int | None, convert) -> None:
        # instance attributes: lgb.train gives callbacks without an instance ``order`` a negative one
        self.order, self.before_iteration = 30, False
        self.data_name, self.metric_name, self.rounds, self.convert = data_name, metric_name, rounds, convert
        self.best_iter = -1  # 0-based
        self.best_score = -math.inf
        self.best_results: list = []

    def __call__(self, env) -> None:
        from lightgbm.callback import EarlyStopException

        results = env.evaluation_result_list or []
        for item in results:
            if item[0] == self.data_name and item[1] == self.metric_name:
                score = self.convert(float(item[2]))
                break
        else:  # pragma: no cover - LightGBM always reports the configured metric
            raise RuntimeError(f"LightGBM did not report {self.data_name} {self.metric_name}")
        if self.best_iter < 0 or score > self.best_score:
            self.best_iter, self.best_score, self.best_results = env.iteration, score, list(results)
        if self.rounds is None:
            return
        if env.iteration - self.best_iter >= self.rounds or env.iteration == env.end_iteration - 1:
            raise EarlyStopException(self.best_iter, self.best_results)


class LambdaMART(FittedBaseline):
    """LightGBM lambdarank with ctxrank's gain, metric conventions, data type and saved-model format.

    Parameters are stored as given; they are checked in :meth:`fit`. scikit-learn style:
    :meth:`get_params` / :meth:`set_params`, learned attributes end in ``_``.

    Args:
        n_estimators: boosting rounds at most (LightGBM ``num_iterations``).
        learning_rate, num_leaves, min_data_in_leaf, feature_fraction, bagging_fraction, lambda_l2:
            LightGBM's parameters of the same names (``bagging_freq = 1`` is set when
            ``bagging_fraction < 1``, unless given in ``extra_lgb_params``).
        max_position: LightGBM ``lambdarank_truncation_level`` (LightGBM's default 30): pairs are formed
            only with the items ranked in the top ``max_position`` by the current model (the "truncation
            level" of the LambdaMART overview, Sec. 3; ``max_position`` was its LightGBM 2.x name).
        early_stopping_rounds: stop after this many rounds without a strict improvement of ``metric``
            on the validation split, and keep the best iteration; ``None``: train ``n_estimators``
            rounds and keep them all (validation metrics are still recorded).
        eval_at: cutoff(s) of LightGBM's validation NDCG recorded in ``evals_result_`` (the
            cutoff of ``metric`` is always added).
        metric: early-stopping metric, ``"ndcg@K"`` (LightGBM's ``ndcg`` with ``eval_at`` K).
        no_relevant: ctxrank's NDCG of a validation query with no relevant item, ``0.0``, ``1.0`` or
            ``"skip"``, for early stopping and ``best_score_`` (LightGBM itself counts it as 1).
        seed: LightGBM ``seed`` (it derives the bagging, feature-fraction and binning seeds).
        num_threads: threads for training and prediction.
        deterministic: LightGBM ``deterministic`` (with ``force_col_wise``, set unless
            ``force_row_wise`` / ``force_col_wise`` is given): same data, seed and threads ->
            same model.
        verbose: LightGBM's log and an evaluation line every 10 rounds.
        debias: how a training split that is an interaction log (``shown_positions`` set; labels = the
            clicks, or graded interactions) is learned from: ``"none"`` (naive: the interactions as
            labels, the log's position bias included), ``"lightgbm"`` (LightGBM's position debiasing:
            the positions go to ``lgb.Dataset(position=...)``; LightGBM fits a bias factor per position
            added to the score in training only, the "GAM" decomposition ``s(x, pos) = f(x) + g(pos)``
            of its Advanced Topics page, regularised by ``lambdarank_position_bias_regularization``) or
            ``"ips"`` (inverse-propensity weights, :func:`ips_weights`). ``"lightgbm"`` and ``"ips"``
            need ``shown_positions`` on the training split. The validation split (early stopping) is
            read as given.
        propensity: for ``debias="ips"`` (and only then): the examination probability of each shown
            position, a sequence ``p_1..p_K`` in (0, 1] (every training position must be <= K), or a
            number ``eta > 0`` for the position-based model's ``p_r = (1/r)^eta``.
        propensity_clip: for ``debias="ips"``: the largest inverse propensity ``1/p`` used (weights
            above it are cut to it; >= 1), or None for no cut.
        list_features: ``"none"`` (the features as given) or ``"query-zscore"``: each numeric feature's
            z-score within its list (:class:`~ctxrank.data.transforms.QueryZScore`) appended to the
            features, in training and prediction alike (the trees' usual answer to list context: an
            item's value relative to the others shown). The model still takes the F given features.
        **extra_lgb_params: any other LightGBM parameter (e.g. ``max_bin``, ``lambdarank_norm``). The
            parameters above, their LightGBM aliases, ``objective`` and ``label_gain`` are rejected.

    Learned attributes: ``booster_`` (``lightgbm.Booster``; holds exactly ``best_iteration_`` trees
    when early stopping selected one), ``best_iteration_`` (trees used by :meth:`predict`),
    ``best_score_`` (validation ``metric`` at that iteration in the ``no_relevant`` convention, None
    without validation), ``n_features_in_``, ``feature_names_in_`` (tuple, empty when the data has
    none), ``evals_result_`` (``{"valid": {"ndcg@K": [value per iteration]}}``: LightGBM's own values,
    no-relevant queries counted as 1), ``label_gain_``, ``lgb_params_`` (what was passed to LightGBM).

    Categorical columns (``RankingData.categorical``, e.g. from ``read_table``) are passed to LightGBM
    as native categorical features after the numeric ones (``categorical_feature``: splits on sets of
    codes; code 0 = unknown). ``n_categorical_in_`` records how many; prediction needs the same count.
    ``categorical_names_in_`` and ``categorical_cardinalities_in_`` (tuples, empty without them) name the
    columns and their code counts (saved in ``ctxrank.json``, so a server advertises the real inputs).
    """

    def __init__(
        self,
        *,
        n_estimators: int = 1000,
        learning_rate: float = 0.05,
        num_leaves: int = 31,
        min_data_in_leaf: int = 20,
        feature_fraction: float = 1.0,
        bagging_fraction: float = 1.0,
        lambda_l2: float = 0.0,
        max_position: int = 30,
        early_stopping_rounds: int | None = 50,
        eval_at: int | Sequence[int] = 10,
        metric: str = "ndcg@10",
        no_relevant: float | str = 0.0,
        seed: int = 0,
        num_threads: int = 1,
        deterministic: bool = True,
        verbose: bool = False,
        debias: str = "none",
        propensity: float | Sequence[float] | None = None,
        propensity_clip: float | None = None,
        list_features: str = "none",
        **extra_lgb_params: Any,
    ) -> None:
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_data_in_leaf = min_data_in_leaf
        self.feature_fraction = feature_fraction
        self.bagging_fraction = bagging_fraction
        self.lambda_l2 = lambda_l2
        self.max_position = max_position
        self.early_stopping_rounds = early_stopping_rounds
        self.eval_at = eval_at
        self.metric = metric
        self.no_relevant = no_relevant
        self.seed = seed
        self.num_threads = num_threads
        self.deterministic = deterministic
        self.verbose = verbose
        self.debias = debias
        self.propensity = propensity
        self.propensity_clip = propensity_clip
        self.list_features = list_features
        self.extra_lgb_params = extra_lgb_params

    # ------------------------------------------------------------------ params
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The named parameters and the extra LightGBM parameters, in one flat dict."""
        named = {name: getattr(self, name) for name in (*_LGB_NAME, *_OWN)}
        return {**named, **self.extra_lgb_params}

    def set_params(self, **params: Any) -> LambdaMART:
        """Set named parameters; any other name becomes an extra LightGBM parameter. Returns self."""
        for name, value in params.items():
            if name in _LGB_NAME or name in _OWN:
                setattr(self, name, value)
            else:
                self.extra_lgb_params[name] = value
        return self

    def __repr__(self) -> str:
        defaults = LambdaMART.__init__.__kwdefaults__ or {}
        shown = [
            f"{k}={v!r}"
            for k, v in self.get_params().items()
            if k not in defaults or not _same(defaults[k], v)
        ]
        return f"LambdaMART({', '.join(shown)})"

    def check_params(self) -> None:
        """Check the parameters now (``fit`` checks them too): a bad value, or an extra parameter that is
        not LightGBM's, is a ValueError."""
        self._resolve()

    def _resolve(self) -> tuple[int, list[int], float | str]:
        """Check the named parameters: (metric cutoff, sorted eval_at, no_relevant)."""
        check_int("n_estimators", self.n_estimators)
        check_int("early_stopping_rounds", self.early_stopping_rounds, allow_none=True)
        check_int("max_position", self.max_position)
        check_seed("seed", self.seed)
        check_int("num_threads", self.num_threads, 0)
        m = _METRIC_RE.fullmatch(self.metric) if isinstance(self.metric, str) else None
        if m is None:
            raise ValueError(f"metric must be 'ndcg@K' with K >= 1 (LightGBM's ndcg), got {self.metric!r}")
        k = parse_int(f"cutoff in {self.metric[:40]!r}", m.group(1))
        eval_at = [self.eval_at] if _is_int(self.eval_at) else self.eval_at
        if (
            isinstance(eval_at, (str, bytes))
            or not isinstance(eval_at, Sequence)
            or not all(_is_int(e) and 1 <= e <= MAX_INT for e in eval_at)
        ):
            raise ValueError(
                f"eval_at must be an int in [1, {MAX_INT:,}] or a sequence of them, got {self.eval_at!r}"
            )
        cutoffs = sorted({int(e) for e in eval_at} | {k})  # LightGBM sorts eval_at itself too
        no_relevant = _normalize_no_relevant(self.no_relevant)
        self._check_debias()
        check_choice("list_features", self.list_features, LIST_FEATURES)
        for name, value in self.get_params().items():  # LightGBM reads its integers as C ints
            if _is_int(value) and not -MAX_INT - 1 <= value <= MAX_INT:
                raise ValueError(f"{name} must lie in [{-MAX_INT - 1:,}, {MAX_INT:,}], got {value}")
        for name, value in self.extra_lgb_params.items():
            _check_lgb_name(name)
            for own, lgb_name in _LGB_NAME.items():
                if name in _aliases(lgb_name):
                    raise ValueError(
                        f"LightGBM parameter {name!r} (= {lgb_name}) is LambdaMART's named parameter "
                        f"{own!r}; pass {own}={value!r} instead"
                    )
            for lgb_name, why in _FIXED.items():
                if name in _aliases(lgb_name):
                    raise ValueError(f"LightGBM parameter {name!r} cannot be set: {lgb_name} is {why}")
        return k, cutoffs, no_relevant

    def _check_debias(self) -> None:
        """``debias`` one of :data:`DEBIAS`; ``propensity`` / ``propensity_clip`` given exactly when they
        are read (with ``"ips"``); LightGBM's position-bias regularisation only with ``"lightgbm"``."""
        if not isinstance(self.debias, str) or self.debias not in DEBIAS:
            raise ValueError(f"debias must be one of {list(DEBIAS)}, got {self.debias!r}")
        if self.debias == "ips":
            if self.propensity is None:
                raise ValueError(
                    "debias='ips' needs propensity: the examination probability of each position "
                    "(a list p_1..p_K in (0, 1]) or eta > 0 for p_r = (1/r)^eta"
                )
            _propensity(self.propensity)
            if self.propensity_clip is not None:
                clip = self.propensity_clip
                if not is_clip(clip):
                    raise ValueError(
                        f"propensity_clip must be a number >= 1 (a cap on 1/p) or None, got {clip!r}"
                    )
        else:
            for name in ("propensity", "propensity_clip"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name} is read with debias='ips' only; debias is {self.debias!r} (set "
                        f"debias='ips' or leave {name} out)"
                    )
        if self.debias != "lightgbm":
            given = set(self.extra_lgb_params) & _aliases("lambdarank_position_bias_regularization")
            if given:
                raise ValueError(
                    f"LightGBM parameter {sorted(given)[0]!r} applies to LightGBM's position debiasing "
                    f"only; debias is {self.debias!r} (set debias='lightgbm': train.debias = 'pal' in a run)"
                )

    def _lgb_params(self, label_gain: list[float], cutoffs: list[int]) -> dict[str, Any]:
        extra = dict(self.extra_lgb_params)
        params: dict[str, Any] = {
            "objective": "lambdarank",
            "metric": "ndcg",
            "eval_at": cutoffs,
            "label_gain": label_gain,
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_data_in_leaf,
            "feature_fraction": self.feature_fraction,
            "bagging_fraction": self.bagging_fraction,
            "lambda_l2": self.lambda_l2,
            "lambdarank_truncation_level": self.max_position,
            "seed": self.seed,
            "num_threads": self.num_threads,
            "deterministic": self.deterministic,
            "verbosity": 1 if self.verbose else -1,
        }
        if self.bagging_fraction != 1.0 and not (set(extra) & _aliases("bagging_freq")):
            params["bagging_freq"] = 1
        if not (set(extra) & (_aliases("force_row_wise") | _aliases("force_col_wise"))):
            params["force_col_wise"] = True
        params.update(extra)
        return params

    # --------------------------------------------------------------- training
    def fit(
        self, train: RankingData, valid: RankingData | None = None, *, valid_objective: Any = None
    ) -> LambdaMART:
        """Fit on ``train``; with ``valid``, record its NDCG each round and stop early on ``metric``.

        ``valid_objective``: when ``valid`` is a click log, how it validates: a
        :class:`ctxrank.clicks.validation.LogObjective` (``log_objective(...)``; an IPS one is LightGBM's
        ``feval`` and alone stops and selects). Without it a debiased fit on a log keeps every tree (module
        docstring, "Validating on a click log").

        Raises:
            TypeError: not RankingData.
            ValueError: bad parameters, labels that are not non-negative integers (the message names
                the first one), feature counts that differ between the splits, a validation split
                whose queries all lack a relevant item under ``no_relevant="skip"``, or anything
                LightGBM rejects.
        """
        self._resolve()  # a bad list_features fails before the lists are normalised
        given = train
        train, valid = self._with_list_features(train), self._with_list_features(valid)
        valid_x = None if valid is None else _lgb_matrix(valid)
        self._fit(train, valid, _lgb_matrix(train), valid_x, valid_objective)
        self.n_features_in_, self.feature_names_in_ = given.n_features, tuple(given.feature_names)
        return self

    def _with_list_features(self, data: RankingData | None) -> RankingData | None:
        """``data`` with the features ``list_features`` adds (float32 (N, 2F) for ``"query-zscore"``:
        the F features, then their z-scores within each list); ``data`` itself for ``"none"``."""
        if data is None or self.list_features == "none":
            return data
        z = QueryZScore().fit(data).transform(data).features
        names = (*data.feature_names, *(f"{n}:query-zscore" for n in data.feature_names))
        return replace(data, features=np.concatenate([data.features, z], axis=1), feature_names=names)

    def _fit(
        self, train: RankingData, valid: RankingData | None, train_x: Any, valid_x: Any, objective: Any = None
    ) -> LambdaMART:
        """:meth:`fit` with LightGBM's inputs given: ``train_x`` / ``valid_x`` the splits' rows as one
        matrix or a list of consecutive row blocks (:func:`_query_rows`; the splits' own ``features`` are
        then not read)."""
        import lightgbm as lgb

        max_label, n_cat = _check_splits(train, valid)
        k, cutoffs, no_relevant = self._resolve()
        label_gain = [2.0**y - 1.0 for y in range(max_label + 1)]
        objective, rounds, validation = self._log_validation(valid, k, objective)
        for message in validation[-1]:  # its warnings
            warnings.warn(message, LogValidationWarning, stacklevel=3)
        params = self._lgb_params(label_gain, cutoffs)
        if objective is not None:  # only the feval's estimate decides, not the clicks' NDCG
            params["metric"] = "None"
        cat_idx = list(range(train.n_features, train.n_features + n_cat)) or "auto"
        train_set = lgb.Dataset(
            train_x,
            label=train.labels,
            group=train.query_lengths,
            categorical_feature=cat_idx,
            **self._debias_inputs(train),
        )
        monitor = None
        if valid is not None:
            monitor = _ValidationMonitor.build(
                self, valid, valid_x, train_set, cat_idx, f"ndcg@{k}", no_relevant, objective, rounds
            )
        try:
            booster = lgb.train(
                params,
                train_set,
                num_boost_round=self.n_estimators,
                valid_sets=[] if monitor is None else [monitor.dataset],
                valid_names=[] if monitor is None else ["valid"],
                callbacks=[] if monitor is None else monitor.callbacks,
                feval=None if monitor is None else monitor.feval,
            )
        except lgb.basic.LightGBMError as exc:
            raise ValueError(f"LightGBM rejected the parameters or data: {exc}") from exc
        self.lgb_params_, self.label_gain_ = params, label_gain
        self.n_features_in_, self.n_categorical_in_ = train.n_features, n_cat
        self.feature_names_in_ = tuple(train.feature_names)
        self.categorical_names_in_ = tuple(train.categorical_names) if n_cat else ()
        self.categorical_cardinalities_in_ = (
            tuple(int(c) for c in train.categorical_cardinalities) if n_cat else ()
        )
        self.validation_, self.validation_metric_, self.validation_warnings_ = validation
        self._select_iteration(booster, monitor)
        # the trees alone: a Booster read back from its model text holds none of the training state
        # (LightGBM's binned copy of the training and validation rows, their scores and gradients:
        # about a quarter of the float32 features, kept as long as the model otherwise); the same trees
        # (the text keeps every value exactly), so the same predictions
        self.booster_ = lgb.Booster(model_str=booster.model_to_string(num_iteration=-1))  # every tree
        self.booster_.best_iteration = booster.best_iteration
        return self

    def _log_validation(
        self, valid: RankingData | None, k: int, objective: Any
    ) -> tuple[Any, int | None, tuple[str | None, str | None, tuple[str, ...]]]:
        """How a validation split that is a click log (``shown_positions`` set) stops and selects, checked
        before training: ``(feval objective or None, early-stopping rounds, (validation, validation_metric,
        warnings))`` (module docstring, "Validating on a click log"; ``validation_metric`` its name in a few
        words, ``LogObjective.name``); ``validation`` and ``validation_metric`` None on labelled data."""
        if valid is None or valid.shown_positions is None:
            if objective is not None:
                raise ValueError(
                    "valid_objective applies to a validation split that is a click log (shown positions); "
                    f"{'no validation split was given' if valid is None else 'valid has none'}"
                )
            return None, self.early_stopping_rounds, (None, None, ())
        if objective is not None:
            described = (objective.describe(), objective.name, ())
            return None if objective.naive else objective, self.early_stopping_rounds, described
        name = f"ndcg@{k} of the clicks of a log"
        naive = f"{name} (naive: biased by the shown positions)"
        if self.debias == "none":
            return None, self.early_stopping_rounds, (naive, name, ())
        why = {
            "lightgbm": "LightGBM's position debiasing estimates no propensities to validate by",
            "ips": "no valid_objective (the IPS estimate, ctxrank.clicks.validation.log_objective) was given",
        }[self.debias]
        warned = ()
        if self.early_stopping_rounds is not None:
            warned = (
                f"early_stopping_rounds is not applied: the validation split is a click log and {why}, "
                f"so no early stopping: every tree is kept, up to n_estimators = {self.n_estimators} (the "
                "clicks' NDCG rewards the logging order; "
                "a run with train.debias = 'ips' stops on the IPS estimate)",
            )
        return (
            None,
            None,
            (f"{naive}, recorded only: {why}; no early stopping, every tree kept", name, warned),
        )

    def _debias_inputs(self, train: RankingData) -> dict[str, np.ndarray]:
        """``lgb.Dataset``'s ``position`` (``"lightgbm"``: the 1-based shown positions, which LightGBM
        reads as position ids, any distinct integers) or per-item ``weight`` (``"ips"``); none for
        ``"none"``. Raises ValueError when ``train`` has no shown positions."""
        if self.debias == "none":
            return {}
        if train.shown_positions is None:
            raise ValueError(
                f"debias={self.debias!r} needs the position each training item was shown at (an "
                "interaction log's position column; RankingData.shown_positions, from_arrays(..., "
                f"position=...)); {train.source or 'the training split'} has none (debias='none' trains "
                "on its labels as given)"
            )
        if self.debias == "lightgbm":
            return {"position": train.shown_positions}
        return {"weight": ips_weights(train, self.propensity, self.propensity_clip)}

    def _select_iteration(self, booster: Any, monitor: _ValidationMonitor | None) -> None:
        """``evals_result_``, ``best_iteration_`` and ``best_score_`` (in ``no_relevant``'s convention)."""
        evals = {} if monitor is None else monitor.evals
        self.evals_result_ = {
            name: {metric: [float(v) for v in values] for metric, values in per.items()}
            for name, per in evals.items()
        }
        if monitor is not None and monitor.stopper.rounds is not None:
            self.best_iteration_ = monitor.stopper.best_iter + 1
            self.best_score_ = float(monitor.stopper.best_score)
        else:
            self.best_iteration_ = int(booster.current_iteration())
            self.best_score_ = None
            if monitor is not None:  # no selection: the metric of the last iteration
                last = self.evals_result_["valid"][monitor.metric][-1]
                self.best_score_ = float(monitor.convert(last))
        assert booster.current_iteration() >= self.best_iteration_ >= 1, (
            booster.current_iteration(),
            self.best_iteration_,
        )

    def training_summary(self) -> dict[str, Any]:
        """What ``ctxrank train`` records: the trees kept and their validation metric (None without
        validation), in this model's ``no_relevant`` convention."""
        self._check_fitted()
        summary = {
            "best_iteration": int(self.best_iteration_),
            "metric": self.metric,
            "best_valid_metric": self.best_score_,
        }
        validation, warned = getattr(self, "validation_", None), getattr(self, "validation_warnings_", ())
        if warned:
            summary["warnings"] = list(warned)
        if validation is not None:
            summary["validation"] = validation
            summary["validation_metric"] = self.validation_metric_
        return summary

    # -------------------------------------------------------------- inference
    def predict(self, data: RankingData) -> np.ndarray:
        """float64 ``(N,)`` scores of every row of ``data`` with the first ``best_iteration_`` trees.

        Raises:
            ValueError: not fitted, or a feature count other than the training one.
        """
        self._predict_data(data)
        if _n_categorical(data) != self.n_categorical_in_:
            raise ValueError(
                f"the model was trained with {self.n_categorical_in_} categorical columns but "
                f"{data.source or 'the data'} has {_n_categorical(data)}"
            )
        return self._scores(_lgb_matrix(self._with_list_features(data)))

    def _scores(self, matrix: np.ndarray) -> np.ndarray:
        """float64 scores of the rows of LightGBM's input ``matrix`` (each row's alone: a row's score
        does not depend on the other rows predicted with it)."""
        scores = self.booster_.predict(
            matrix, num_iteration=self.best_iteration_, num_threads=self.num_threads
        )
        return np.ascontiguousarray(scores, dtype=np.float64)

    # ------------------------------------------------------------ persistence
    def save(
        self, directory: str | Path, *, run_config: Mapping[str, Any] | None = None, overwrite: bool = False
    ) -> Path:
        """Write ``model.txt`` (LightGBM's text format, the first ``best_iteration_`` trees) and
        ``ctxrank.json`` (``"kind": "lightgbm"``), plus ``config.toml`` when ``run_config`` is given.

        Every file is written atomically; ``ctxrank.json`` last, with the SHA-256 of ``model.txt``.
        ``directory`` must be new or empty; ``overwrite``: write into one of other files or of an earlier
        model (files of these names replaced; :func:`ctxrank._modeldir.claim_model_dir`). Returns the
        directory.
        """
        import lightgbm as lgb

        self._check_fitted()
        data = self.booster_.model_to_string(num_iteration=self.best_iteration_).encode("utf-8")
        meta = {
            "lightgbm_version": lgb.__version__,
            "model_file": MODEL_FILE,
            "model_sha256": hashlib.sha256(data).hexdigest(),
            "params": self.get_params(),
            "lightgbm_params": _jsonable(self.lgb_params_),
            "n_features": int(self.n_features_in_),
            "n_categorical": int(self.n_categorical_in_),
            "feature_names": list(self.feature_names_in_),
            "categorical_names": list(self.categorical_names_in_),
            "categorical_cardinalities": list(self.categorical_cardinalities_in_),
            "label_gain": list(self.label_gain_),
            "best_iteration": int(self.best_iteration_),
            "best_score": self.best_score_,
            "metric_conventions": {
                "metric": self.metric,
                "gain": "exp2",
                "convention": "standard",
                "no_relevant": _normalize_no_relevant(self.no_relevant),
                "ties": "stable by input position",
                "evals_result_no_relevant": 1.0,
            },
            "evals_result": self.evals_result_,
        }
        return save_meta(directory, KIND, meta, run_config, overwrite, files={MODEL_FILE: data})

    @classmethod
    def load(cls, directory: str | Path) -> LambdaMART:
        """Load a model saved by :meth:`save` (reads JSON and LightGBM's text format; never unpickles).

        Raises:
            ValueError: not a ctxrank model directory, another kind of model, a ``model.txt`` that
                is missing, changed since saving, or does not match the metadata.
        """
        directory = Path(directory)
        meta = read_meta(directory)
        if meta.get("kind") != KIND:
            raise ValueError(
                f"{directory}: a {meta.get('kind')!r} model, not a LightGBM one "
                "(ctxrank.load_model loads any kind)"
            )
        return cls._from_meta(directory, meta)

    @classmethod
    def _from_meta(cls, directory: Path, meta: dict[str, Any]) -> LambdaMART:
        import lightgbm as lgb

        where = directory / META_FILE
        params, n_features, n_categorical, best_iteration = _checked_meta(where, meta)
        path = directory / MODEL_FILE
        trees_input = n_features * (1 if params.get("list_features", "none") == "none" else 2)
        digest = meta_str(meta, "model_sha256", where)
        data = read_regular(path, MAX_MODEL_BYTES, "LightGBM model", sha256=digest)
        try:
            text = check_model_text(data.decode("utf-8"), trees_input + n_categorical, best_iteration)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not a LightGBM model ctxrank accepts: {exc}") from None
        try:
            booster = lgb.Booster(model_str=text)
        except lgb.basic.LightGBMError as exc:  # pragma: no cover - check_model_text accepted it
            raise ValueError(f"{path}: not a readable LightGBM model ({exc})") from None
        if (
            booster.num_feature() != trees_input + n_categorical
            or booster.current_iteration() != best_iteration
        ):  # pragma: no cover - check_model_text counted both
            raise ValueError(
                f"{path}: holds {booster.current_iteration()} trees over {booster.num_feature()} features, "
                f"the metadata says {best_iteration} over {n_features} (+ {n_categorical} categorical)"
            )
        model = cls(**params)
        model.booster_ = booster
        model.best_iteration_ = best_iteration
        evals = meta_dict(meta, "evals_result", where, optional=True)
        try:
            model.evals_result_ = _evals_result(evals)
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{where}: 'evals_result': {exc}") from None
        # None without validation; with it a float, NaN written as null by strict JSON
        best = meta.get("best_score")
        if best is not None and (isinstance(best, bool) or not isinstance(best, int | float)):
            raise ValueError(f"{where}: 'best_score' must be a number or null, got {short(best)}")
        model.best_score_ = float_or_nan(best) if "valid" in model.evals_result_ else None
        model.n_features_in_ = n_features
        model.n_categorical_in_ = n_categorical
        model.feature_names_in_ = tuple(meta_strings(meta, "feature_names", where, n_features))
        model.categorical_names_in_, model.categorical_cardinalities_in_ = _categorical_meta(
            meta, where, n_categorical
        )
        model.label_gain_ = meta_floats(meta, "label_gain", where, max_len=MAX_LABEL + 1)
        model.lgb_params_ = meta_dict(meta, "lightgbm_params", where, optional=True)
        return model


def _checked_meta(where: Path, meta: dict[str, Any]) -> tuple[dict[str, Any], int, int, int]:
    """``(params, n_features, n_categorical, best_iteration)`` of a LightGBM model's metadata, each
    checked (the parameters by :meth:`LambdaMART._resolve`, ``num_threads`` bounded)."""
    params = meta_dict(meta, "params", where)
    n_features = meta_int(meta, "n_features", where, 1, MAX_FEATURES)
    n_categorical = meta_int(meta, "n_categorical", where, 0, MAX_FEATURES, default=0)
    best_iteration = meta_int(meta, "best_iteration", where, 1, MAX_TREES)
    threads = params.get("num_threads", 1)
    if isinstance(threads, bool) or not isinstance(threads, int) or not -1 <= threads <= 1024:
        raise ValueError(
            f"{where}: 'params.num_threads' must be an integer in [-1, 1024], got {short(threads)}"
        )
    try:
        LambdaMART(**params)._resolve()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: 'params': {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    return params, n_features, n_categorical, best_iteration


def _categorical_meta(
    meta: dict[str, Any], where: Path, n_categorical: int
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``(categorical_names, categorical_cardinalities)`` of the metadata, ``n_categorical`` each (or
    both empty). A directory saved before they were recorded has only its table encoder
    (``"table"``, ``ctxrank train`` on a table): the encoder's columns, ``len(vocab) + 1`` codes each."""
    if "categorical_names" not in meta:
        encoder = (meta.get("table") or {}).get("encoder") or {}
        names = [str(c) for c in encoder.get("columns") or []]
        if len(names) != n_categorical:
            return (), ()
        return tuple(names), tuple(len(encoder.get("vocab", {}).get(c) or []) + 1 for c in names)
    names = meta_strings(meta, "categorical_names", where)
    cards = meta_cardinalities(meta, where)
    if names and not (len(names) == len(cards) == n_categorical):
        raise ValueError(
            f"{where}: {len(names)} categorical_names and {len(cards)} categorical_cardinalities for "
            f"n_categorical = {n_categorical}"
        )
    return tuple(names), tuple(cards)


def _n_categorical(data: RankingData) -> int:
    return 0 if data.categorical is None else int(data.categorical.shape[1])


def _lgb_matrix(data: RankingData, rows: np.ndarray | None = None) -> np.ndarray:
    """LightGBM's input: the numeric features, then the categorical codes (as float) when present; of
    the given ``rows`` only (a copy of them) when given."""
    x = data.features if rows is None else data.features[rows]
    if data.categorical is None:
        return x
    codes = data.categorical if rows is None else data.categorical[rows]
    return np.concatenate([x, codes.astype(np.float32)], axis=1)


def _query_rows(data: RankingData, queries: np.ndarray) -> tuple[RankingData, Any]:
    """``data.subset(queries)`` (``queries`` ascending) for its labels and lists, without a copy of the
    features: LightGBM's input of those rows is a list of views into ``data.features``, one per run of
    consecutive queries (``lgb.Dataset`` builds from a list of row blocks, ``LGBM_DatasetCreateFromMats``,
    what a single matrix goes through too: the same bins, trees and scores as from the copy). The
    returned subset's ``features`` is a zero-stride placeholder of the right shape, never read. With
    categorical columns (appended to the matrix as floats) the rows are copied, as before."""
    if data.categorical is not None:
        part = data.subset(queries)
        return part, _lgb_matrix(part)
    rows = data.query_rows(queries)
    offsets = np.concatenate([[0], np.cumsum(data.query_lengths[queries])]).astype(np.int64)
    f = data.n_features
    placeholder = np.broadcast_to(np.zeros((1, f), dtype=np.float32), (rows.size, f))
    part = replace(
        data,
        features=placeholder,
        query_ids=data.query_ids[queries],
        query_offsets=offsets,
        info=dict(data.info),
        group_ids=None if data.group_ids is None else data.group_ids[queries],
        **data.row_fields(rows),
    )
    runs = np.split(queries, np.flatnonzero(np.diff(queries) != 1) + 1)
    starts = data.query_offsets
    return part, [data.features[starts[run[0]] : starts[run[-1] + 1]] for run in runs]


def _propensity(propensity: Any) -> tuple[np.ndarray | None, float | None]:
    """``propensity`` checked: ``(values, None)``, float64 ``(K,)`` values in (0, 1], or ``(None, eta)``
    for the position-based ``p_r = (1/r)^eta``."""
    if is_number(propensity):
        if not is_eta(propensity):
            raise ValueError(
                f"propensity eta must be a finite number > 0 (p_r = (1/r)^eta), got {propensity!r}"
            )
        return None, float(propensity)
    if isinstance(propensity, (str, bytes)) or not isinstance(propensity, Sequence | np.ndarray):
        raise ValueError(
            f"propensity must be a list p_1..p_K in (0, 1] or a number eta > 0, got {short(propensity)}"
        )
    values = list(propensity)
    if not values or not all(is_probability(p) for p in values):
        raise ValueError(f"propensity must be a non-empty list of numbers in (0, 1], got {short(values)}")
    return np.asarray(values, dtype=np.float64), None


def ips_weights(data: RankingData, propensity: Any, clip: float | None = None) -> np.ndarray:
    """Per-item inverse-propensity weights of an interaction log for LightGBM's lambdarank: float64 ``(N,)``
    (:func:`ctxrank._propensity.pairwise_item_weights`: an interacted item weighs ``1 / p(pos_i)``, cut
    at ``clip`` when given, another item the mean of its session's interacted ones, an item of a session
    without interaction 1; mean 1 over ``data``).

    LightGBM multiplies each item's LambdaRank gradient and hessian by its weight
    (``RankingObjective::GetGradientsWithSampledQueries``, ``src/objective/rank_objective.hpp``), so a
    weight is per item, not per pair; ``min_sum_hessian_in_leaf`` and ``lambda_l2`` see their scale.
    Labels are left as given: lambdarank's labels index ``label_gain`` and must be integers, so they
    cannot carry the weights.

    Args:
        data: the log, with ``shown_positions`` (1-based).
        propensity: ``p_1..p_K`` in (0, 1] or ``eta`` for ``p_r = (1/r)^eta``.
        clip: the largest ``1/p`` used, or None.

    Raises:
        ValueError: no shown positions, a position beyond the ``K`` propensities (naming its row and
            session), or a bad ``propensity``.
    """
    if data.shown_positions is None:
        raise ValueError(f"{data.source or 'the data'} has no shown positions (RankingData.shown_positions)")
    values, eta = _propensity(propensity)
    positions = data.shown_positions.astype(np.int64)
    deepest = int(positions.max()) if positions.size else 1
    p = curve(values, eta, deepest)
    beyond = positions > p.size
    if beyond.any():
        i, session = _first_row(data, beyond)
        raise ValueError(
            f"propensity gives {p.size} positions but row {i} (session {session!r}) of "
            f"{data.source or 'the data'} was shown at position {int(positions[i])} "
            f"({int(beyond.sum())} such row(s)); give a propensity for every shown position"
        )
    return pairwise_item_weights(capped_inverse(p[positions - 1], clip), data.labels > 0, data.query_lengths)


def _predict_rows(model: LambdaMART, data: RankingData, rows: np.ndarray) -> np.ndarray:
    """``model.predict(data.subset(...))`` for the given rows, a block of about 16 MB of features at a
    time instead of a copy of them all (each row's score is its own)."""
    out = np.empty(rows.size, dtype=np.float64)
    step = max(1, (1 << 22) // max(data.n_features, 1))
    for a in range(0, rows.size, step):
        out[a : a + step] = model._scores(_lgb_matrix(data, rows[a : a + step]))
    return out


def _convention(n_queries: int, n0: int, no_relevant: float | str):
    """LightGBM's mean NDCG (no-relevant queries = 1) -> the mean under ``no_relevant``."""
    if no_relevant == 1.0 or n0 == 0:
        return lambda v: v
    if no_relevant == "skip":
        return lambda v: (v * n_queries - n0) / (n_queries - n0)
    return lambda v: (v * n_queries - n0) / n_queries


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return False


def _check_splits(train: RankingData, valid: RankingData | None) -> tuple[int, int]:
    """``(largest label, categorical column count)`` after checking the splits agree."""
    _check_data(train, "train")
    max_label = _check_labels(train, "train")
    n_cat = _n_categorical(train)
    if valid is not None:
        _check_data(valid, "valid")
        if valid.n_features != train.n_features:
            raise ValueError(f"train has {train.n_features} features but valid has {valid.n_features}")
        max_label = max(max_label, _check_labels(valid, "valid"))
        if _n_categorical(valid) != n_cat:
            raise ValueError(f"train has {n_cat} categorical columns but valid has {_n_categorical(valid)}")
    return max_label, n_cat


@dataclass
class _ValidationMonitor:
    """The validation set of a fit: LightGBM's dataset, the recorded evaluations, the early stopper,
    and the ``feval`` of a log's IPS estimate (None: LightGBM's NDCG)."""

    dataset: Any
    metric: str
    convert: Any
    evals: dict[str, Any]
    stopper: Any
    callbacks: list[Any]
    feval: Any = None

    @classmethod
    def build(
        cls,
        model: Any,
        valid: RankingData,
        valid_x: Any,
        train_set: Any,
        cat_idx: Any,
        metric: str,
        no_relevant: float | str,
        objective: Any = None,
        rounds: int | None = None,
    ):
        """``objective``: a log's :class:`~ctxrank.clicks.validation.LogObjective` estimated by IPS (its
        ``feval`` is then the stopping metric), else None; ``rounds``: the early-stopping rounds."""
        import lightgbm as lgb

        feval = None
        if objective is None:
            convert = cls._ndcg_convention(valid, no_relevant)
        else:
            metric, convert = f"ips_dcg@{objective.k}", float

            def feval(scores: np.ndarray, _dataset: Any) -> tuple[str, float, bool]:
                return metric, objective.value(valid, np.asarray(scores, dtype=np.float64)), True

        dataset = lgb.Dataset(
            valid_x,
            label=valid.labels,
            group=valid.query_lengths,
            reference=train_set,
            categorical_feature=cat_idx,
        )
        evals: dict[str, Any] = {}
        stopper = _EarlyStopping("valid", metric, rounds, convert)
        callbacks = [lgb.record_evaluation(evals), stopper]
        if model.verbose:
            callbacks.append(lgb.log_evaluation(period=10))
        return cls(dataset, metric, convert, evals, stopper, callbacks, feval)

    @staticmethod
    def _ndcg_convention(valid: RankingData, no_relevant: float | str):
        """LightGBM's validation NDCG -> ``no_relevant``'s convention (:func:`_convention`)."""
        n_queries = valid.n_queries
        # a query with no label > 0 has ideal DCG 0 (gain 2^0 - 1 = 0): LightGBM counts it as 1
        n0 = int(np.sum(np.maximum.reduceat(valid.labels, valid.query_offsets[:-1]) <= 0))
        if no_relevant == "skip" and n0 == n_queries:
            raise ValueError(
                f"valid ({valid.source or 'validation split'}): no query has a relevant item, so "
                "NDCG with no_relevant='skip' is undefined"
            )
        return _convention(n_queries, n0, no_relevant)


def _jsonable(params: Mapping[str, Any]) -> dict[str, Any]:
    """LightGBM's parameters for ``ctxrank.json``: values strict JSON cannot hold become their repr."""
    out = {}
    for k, v in params.items():
        try:
            dumps(v)
            out[k] = v
        except TypeError:
            out[k] = repr(v)
    return out


def _evals_result(saved: Mapping[str, Any]) -> dict[str, dict[str, list[float]]]:
    """``evals_result_`` read back from ``ctxrank.json``: ``{data: {metric: [value per iteration]}}``,
    with ``null`` (a NaN written as strict JSON) -> NaN."""
    return {
        data: {metric: floats_or_nan(values) for metric, values in per.items()} for data, per in saved.items()
    }


def cross_fit_predict(
    train: RankingData,
    n_folds: int = 5,
    seed: int = 0,
    *,
    valid_fraction: float = 0.2,
    return_folds: bool = False,
    **params: Any,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Out-of-fold LambdaMART scores for every row of the training split (cross-fitting).

    The queries are dealt into ``n_folds`` folds at random (``numpy.random.default_rng(seed)``; fold
    sizes differ by at most one). For each fold, a ``LambdaMART(**params)`` is fitted on the other
    folds' queries and scores the fold's rows, so no row is scored by a model that saw its query.
    The re-ranking pipeline uses these scores on the training split (top-k selection and initial
    rank/score features) so that the re-ranker trains on initial scores as (in)accurate as the ones
    it will meet on unseen queries, not on a model's in-sample fit.

    Early stopping: each fold model is early-stopped on a random ``valid_fraction`` of *its own*
    training queries (at least one query), not on the real validation split. Reasons: (1) the
    validation split selects the second stage (the re-ranker's early stopping and model choice); if
    its labels also chose the number of trees of the models that produce the training features, it
    would have been used twice and the second stage's validation score would be optimistic; (2) so
    every out-of-fold score is a function of training-split labels only, which is what cross-fitting
    promises, and the validation and test splits stay untouched until they are scored by the single
    full model. The price: a fold model fits ``(1 - 1/n_folds) * (1 - valid_fraction)`` of the
    training queries (64 % with the defaults), so out-of-fold scores are somewhat weaker than the
    full model's scores on validation and test, and score scales differ a little between folds (only
    the order within a query matters to top-k selection and rank features). ``valid_fraction=0``
    trains every fold model for ``n_estimators`` rounds without early stopping.

    Args:
        train: the training split.
        n_folds: K >= 2 folds over queries (at most the number of queries).
        seed: fold assignment and early-stopping split; also the models' ``seed`` unless ``params``
            has one.
        valid_fraction: share of each fold model's training queries held out for its early stopping,
            in [0, 1).
        return_folds: also return the fold (0..K-1) of each query.
        **params: :class:`LambdaMART` parameters.

    Returns:
        float64 ``(N,)`` out-of-fold scores, every row finite; with ``return_folds``, also int64
        ``(Q,)`` the fold of each query.
    """
    _check_data(train, "train")
    n_queries = train.n_queries
    if not _is_int(n_folds) or not 2 <= n_folds <= n_queries:
        raise ValueError(
            f"n_folds must be an int in [2, {n_queries}] (the number of queries), got {n_folds!r}"
        )
    if isinstance(valid_fraction, bool) or not (
        isinstance(valid_fraction, (int, float)) and 0.0 <= valid_fraction < 1.0
    ):
        raise ValueError(f"valid_fraction must be in [0, 1), got {valid_fraction!r}")
    params.setdefault("seed", seed)
    LambdaMART(**params)._resolve()  # bad parameters fail before any fitting
    train = LambdaMART(**params)._with_list_features(train)  # the folds' models read them as given

    rng = np.random.default_rng(seed)
    folds = np.empty(n_queries, dtype=np.int64)
    folds[rng.permutation(n_queries)] = np.arange(n_queries) % n_folds
    scores = np.full(train.n_items, np.nan, dtype=np.float64)
    for f in range(n_folds):
        held = np.flatnonzero(folds == f)
        rest = np.flatnonzero(folds != f)
        n_es = 0
        if valid_fraction > 0:
            n_es = min(max(1, round(valid_fraction * rest.size)), rest.size - 1)
        es = np.zeros(rest.size, dtype=bool)
        es[rng.permutation(rest.size)[:n_es]] = True
        fit_queries, es_queries = rest[~es], rest[es]
        model = LambdaMART(**params)
        # the fold's rows as views into train's features, not copies (_query_rows): same model
        fit_part, fit_x = _query_rows(train, fit_queries)
        es_part, es_x = _query_rows(train, es_queries) if n_es else (None, None)
        model._fit(fit_part, es_part, fit_x, es_x)
        del fit_part, fit_x, es_part, es_x
        held_rows = train.query_rows(held)
        scores[held_rows] = _predict_rows(model, train, held_rows)
    if not np.all(np.isfinite(scores)):  # pragma: no cover - every row belongs to exactly one fold
        raise RuntimeError("cross_fit_predict left rows without a finite score")
    return (scores, folds) if return_folds else scores
