"""scikit-learn-compatible rankers over ctxrank's training engine and model directories.

Design: one class, :class:`Ranker` (``Ranker(model="qilcm", **params)``), for every registered model,
and one subclass per model family with the model fixed and every parameter in its signature
(:class:`QILCMRanker`, :class:`ListNetRanker`, ..., :class:`LambdaMARTRanker`, :class:`RankSVMRanker`,
:class:`AdaRankRanker`, :class:`SelfAttentionRanker`, :class:`SetRankRanker`), generated from the
registry: the parameters are a neural model's config dataclass fields, ``loss`` / ``loss_params`` /
``normalizer`` (the run config's ``transform``), the ``TrainConfig`` fields (``seed`` is
``random_state``) and ``verbose``; a baseline's constructor parameters. They cannot drift from the CLI.

Training is ``ctxrank.training.run.run_training``, the engine of ``ctxrank train``: the same run config,
seed, normalizer, early stopping and model directory. Without ``eval_set`` the training data is also
the validation data of early stopping and model selection (the neural models and LambdaMART then
select on the training metric, RankSVM chooses its ``C`` on it); pass ``eval_set`` for a real
validation split.
"""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ctxrank._modeldir import claim_model_dir, remove_model_entries
from ctxrank.api._inputs import Inputs, reads_missing_values, to_ranking_data
from ctxrank.api._params import AUTO_VERBOSE, param_spec, run_config, shows_progress
from ctxrank.config import RunConfig
from ctxrank.metrics import evaluate_queries
from ctxrank.registry import MODELS, get_model
from ctxrank.tracking import RunLog, Tracking, flat_params
from ctxrank.training.run import run_training, save_result

__all__ = ["ESTIMATOR_OF_MODEL", "Ranker"]


#: what ``fit(..., eval_set=...)`` accepts, for its messages
EVAL_SET_FORMS = (
    "give eval_set=(X_valid, y_valid, qid_valid), or eval_set=[(X_valid, y_valid)] with eval_qid=[qid_valid] "
    "(XGBoost's form) or eval_group=[query_sizes_valid] (LightGBM's form), or (X_valid, y_valid) alone when "
    "the estimator has query_column"
)


#: the estimator parameters that name DataFrame columns (not the model's): the query ids, the shown positions
_COLUMN_PARAMS = ("query_column", "position_column")


def _only_one(value: Any, name: str) -> Any:
    """``value``, or the single element of a one-element list (LightGBM / XGBoost pass lists)."""
    if isinstance(value, list):
        if len(value) != 1:
            raise ValueError(f"{name}: one validation set is supported, got a list of {len(value)}")
        return value[0]
    return value


class Ranker(BaseEstimator):
    """A ranker for any model of ``ctxrank.registry.MODELS``: ``Ranker(model="qilcm", lr=3e-4, ...)``.

    Parameters: ``model`` and the model's parameters (see ``docs/models.md`` or the per-model
    subclasses, e.g. ``QILCMRanker``, whose signatures list them with their defaults), plus
    ``query_column`` (a DataFrame column holding the query ids, for scikit-learn tools that pass only
    ``X`` and ``y``: ``GridSearchCV`` / ``cross_val_score`` without metadata routing) and
    ``position_column`` (an interaction log's DataFrame column of shown positions: read by ``fit``,
    never a feature, dropped by ``predict`` / ``score``).

    Learned attributes: ``n_features_in_``, ``feature_names_in_`` (DataFrame input), ``best_epoch_``
    (best epoch; LambdaMART's best iteration, AdaRank's best round; None for RankSVM),
    ``evals_result_`` (``{"train": {"loss": [...]}, "valid": {metric: [...]}}`` per epoch),
    ``categorical_features_``, ``encoder_`` (the fitted ``CategoricalEncoder`` or None),
    ``run_`` (the ``RunResult``: ``config``, ``summary`` (a ``FitSummary``, which also reads as the
    mapping ``ctxrank.json["training"]`` records), ``predictor``, ``history``).
    """

    _fixed_model: ClassVar[str | None] = None  # set by the per-model subclasses
    # metadata routing (sklearn.set_config(enable_metadata_routing=True)): query ids are requested
    __metadata_request__fit = {"qid": True, "group": True, "position": True}  # noqa: RUF012
    __metadata_request__predict = {"qid": True, "group": True}  # noqa: RUF012
    __metadata_request__score = {"qid": True, "group": True}  # noqa: RUF012

    def __init__(self, model: str = RunConfig.model, **params: Any) -> None:
        self.model = model
        for key, value in params.items():
            setattr(self, key, value)

    # ------------------------------------------------------------------ params
    def model_name(self) -> str:
        """The registry name of the model this estimator trains."""
        return self._fixed_model or self.model

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The parameters set (``Ranker``: ``model`` and those given; a per-model subclass: all)."""
        own = {k: v for k, v in vars(self).items() if not k.startswith("_") and not k.endswith("_")}
        return {"model": self.model, **own} if self._fixed_model is None else own

    def set_params(self, **params: Any) -> Ranker:
        """Set parameters (``model`` first); their values are checked by ``fit``.

        Raises:
            ValueError: a name that is no parameter of the model (``Invalid parameter ...``, as
                scikit-learn says, listing the valid ones), or ``model`` on a per-model subclass.
        """
        if "model" in params and self._fixed_model is not None:
            raise ValueError(f"{type(self).__name__} trains {self._fixed_model}; model cannot be set")
        model = params.get("model", self.model_name())
        if self._fixed_model is not None:
            valid = list(self.get_params(deep=False))
        elif isinstance(model, str) and model in MODELS:
            valid = ["model", *param_spec(model).defaults, *_COLUMN_PARAMS]
        else:  # no parameter names to check against: fit refuses the model, listing the valid ones
            valid = list(params)
        unknown = [key for key in params if key not in valid]
        if unknown:
            raise ValueError(
                f"Invalid parameter {unknown[0]!r} for estimator {type(self).__name__} (model {model!r}). "
                f"Valid parameters are: {valid!r}."
            )
        for key, value in params.items():
            setattr(self, key, value)
        return self

    def run_config(self) -> RunConfig:
        """The resolved run config of these parameters (what ``ctxrank train`` would train)."""
        params = self.get_params(deep=False)
        for name in ("model", *_COLUMN_PARAMS):
            params.pop(name, None)
        return run_config(self.model_name(), params)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        name = self.model_name()
        entry = MODELS.get(name) if isinstance(name, str) else None  # fit refuses an unknown one
        tags.input_tags.categorical = entry is None or entry.traits.reads_categorical
        tags.input_tags.allow_nan = reads_missing_values(self)  # LambdaMART, or missing="indicator"
        tags.input_tags.string = True
        return tags

    # --------------------------------------------------------------- training
    def fit(
        self,
        X: Any,
        y: Any,
        *,
        qid: Any = None,
        group: Any = None,
        eval_set: Any = None,
        eval_qid: Any = None,
        eval_group: Any = None,
        categorical_features: Any = None,
        init_scores: Any = None,
        tracking: Tracking | str | None = None,
        position: Any = None,
    ) -> Ranker:
        """Train on ``X`` (rows in any order) with labels ``y`` and query ids ``qid`` (or ``group``).

        Args:
            eval_set: ``(X_valid, y_valid, qid_valid)`` (or ``(X_valid, y_valid)`` with
                ``query_column``, ``eval_qid`` or ``eval_group``; a list of one such tuple is accepted):
                the validation split of early stopping and model selection.
            eval_qid: ``[qid_valid]``, the validation rows' query ids (XGBoost's form).
            eval_group: ``[sizes_valid]``, the validation queries' sizes (LightGBM's form).
            categorical_features: column names (DataFrame) or indices (array) to embed; default: the
                DataFrame's ``category`` / object / string / bool columns.
            init_scores: not supported by a single ranker (ValueError); an initial ranker's scores are
                :class:`RerankPipeline`'s job.
            position: an interaction log's (N,) 1-based shown position of each row (``y`` holds the
                interactions, ``qid`` the sessions), as LightGBM's ``Dataset(position=...)``: within a
                session the positions are 1..n without gaps; never a feature (``predict`` takes
                none). Or name a DataFrame column with ``position_column``.
            tracking: log the fit to an experiment tracker, as ``ctxrank train --track`` does (the run
                config, each epoch's training loss and validation metric, the summary):
                ``"mlflow"``, ``"mlflow:URI"``, ``"tensorboard:DIR"`` or a
                :class:`ctxrank.tracking.Tracking`.
        """
        if init_scores is not None:
            raise ValueError(
                "init_scores: a single ranker does not take initial scores; to re-rank an initial "
                "ranker's top k use ctxrank.api.RerankPipeline(initial=..., reranker=...)"
            )
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        config = self.run_config()
        train = to_ranking_data(
            self, X, y, qid, group, fit=True, categorical_features=categorical_features, position=position
        )
        _check_labels(train.data.labels, config, "y")
        valid = self._eval_data(eval_set, eval_qid, eval_group, config)
        if valid is None:  # selection on the training data (see the module docstring)
            valid = train.data
        verbose = shows_progress(self.get_params(deep=False).get("verbose", AUTO_VERBOSE))
        tags = {"ctxrank.api": f"{type(self).__name__}.fit"}
        log = RunLog.of(tracking, config.model, tags=tags, params=flat_params(config.to_dict()))
        with log.run if log is not None else contextlib.nullcontext():
            result = run_training(config, train.data, valid, progress=verbose, on_epoch=log)
            if log is not None:
                log.finish(result.history, result.summary)
        self._set_fitted(result)
        return self

    def _eval_data(self, eval_set: Any, eval_qid: Any, eval_group: Any, config: RunConfig) -> Any:
        """The validation RankingData of ``fit``'s ``eval_set`` (with ``eval_qid`` / ``eval_group``)."""
        if eval_set is None:
            if eval_qid is not None or eval_group is not None:
                raise ValueError(f"eval_qid / eval_group are given without eval_set; {EVAL_SET_FORMS}")
            return None
        eval_set = _only_one(eval_set, "eval_set")
        if not isinstance(eval_set, tuple) or len(eval_set) not in (2, 3):
            raise ValueError(f"eval_set: got {type(eval_set).__name__}; {EVAL_SET_FORMS}")
        X, y, qid = (*eval_set, None)[:3]
        queries = {
            "qid_valid": qid,
            "eval_qid": _only_one(eval_qid, "eval_qid"),
            "eval_group": _only_one(eval_group, "eval_group"),
        }
        given = [name for name, v in queries.items() if v is not None]
        if len(given) > 1:
            raise ValueError(f"eval_set: the validation queries are given twice ({', '.join(given)})")
        if not given and getattr(self, "query_column", None) is None:
            raise ValueError(f"eval_set: the validation rows need their query ids; {EVAL_SET_FORMS}")
        ids = queries["eval_qid"] if qid is None else qid
        try:
            data = to_ranking_data(self, X, y, ids, queries["eval_group"], fit=False).data
        except ValueError as exc:
            raise ValueError(f"eval_set: {exc}") from None
        _check_labels(data.labels, config, "eval_set")
        return data

    def _set_fitted(self, result: Any) -> None:
        """Learned attributes from a ``RunResult``."""
        self.run_ = result
        self.best_epoch_ = result.summary.best_step
        self.evals_result_ = _evals_result(result.history)

    # -------------------------------------------------------------- inference
    def predict(self, X: Any, *, qid: Any = None, group: Any = None) -> np.ndarray:
        """float64 (N,) scores, one per row of ``X`` in ``X``'s row order (higher = ranked first).

        Without ``qid`` / ``group`` (and ``query_column``), a model that scores each item alone (no
        list context: LambdaMART, RankSVM, AdaRank, ListNet, MLP, MNL; :meth:`scores_rows_alone`)
        scores the rows as they are; a context model needs the query ids (ValueError naming ``qid``).
        """
        check_is_fitted(self, "run_")
        alone = qid is None and group is None and getattr(self, "query_column", None) is None
        if alone and self.scores_rows_alone():
            group = np.ones(_n_rows(X), dtype=np.int64)  # each row a list of one: its score is its own
        inputs = to_ranking_data(self, X, None, qid, group, fit=False)
        return self._predict_inputs(inputs)

    def scores_rows_alone(self) -> bool:
        """The fitted model scores an item without the others of its list: the model has no list
        context (``scores_alone`` in the registry), its normalizer is not per query, and it re-ranks
        no initial ranker's top k."""
        config = self.run_.config
        per_query = config.transform.startswith("query-")
        return bool(model_class_scores_alone(config.model)) and not per_query and not config.rerank.initial

    def _predict_inputs(self, inputs: Inputs) -> np.ndarray:
        return inputs.to_caller_order(np.asarray(self.run_.predictor.predict(inputs.data), dtype=np.float64))

    def score(
        self,
        X: Any,
        y: Any,
        *,
        qid: Any = None,
        group: Any = None,
        metric: str = "ndcg@10",
        convention: str = "standard",
        no_relevant: float | str = 0.0,
    ) -> float:
        """Mean ``metric`` over the queries (default NDCG@10, the standard convention, a query with no
        relevant item counting 0); any metric of ``ctxrank.metrics`` by name and convention."""
        check_is_fitted(self, "run_")
        inputs = to_ranking_data(self, X, y, qid, group, fit=False)
        scores = np.asarray(self.run_.predictor.predict(inputs.data), dtype=np.float64)
        data = inputs.data
        per = evaluate_queries(
            scores, data.labels, data.query_offsets, [metric], convention=convention, no_relevant=no_relevant
        )[metric]
        return float(np.nanmean(per)) if np.isfinite(per).any() else float("nan")

    # ------------------------------------------------------------ persistence
    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the model directory of ``ctxrank train --out`` (weights, ``ctxrank.json``, ``config.toml``,
        ``train_log.jsonl``, ``training_curves.png``): ``ctxrank predict --model PATH`` and
        ``ctxrank export`` serve it, :func:`ctxrank.api.load` reads it back. ``path`` must be new or
        empty; ``overwrite=True`` writes into a directory of other files (kept unless named as a model's
        files) or replaces an earlier model (:func:`ctxrank._modeldir.claim_model_dir`)."""
        check_is_fitted(self, "run_")
        path = Path(path)
        if claim_model_dir(path, overwrite=overwrite, how="pass overwrite=True"):
            remove_model_entries(path)
        meta = {"api": self._api_meta()}
        table = self._table_meta()
        if table is not None:
            meta["table"] = table
        return save_result(self.run_, path, meta=meta)

    def _table_meta(self) -> dict[str, Any] | None:
        """The table spec of a model fitted on a DataFrame (``ctxrank.json["table"]``, as ``ctxrank
        train`` saves for a table): the numeric feature columns in the model's order, the categorical
        columns and encoder, and the query / label column names where ``fit`` could see them
        (``query_column``, or the name of a ``qid`` / ``y`` Series); None for arrays."""
        from ctxrank.data.table import TableSpec  # pandas: loaded when a DataFrame was fitted only

        columns = getattr(self, "table_columns_", None)
        if columns is None:
            return None

        cats = tuple(self.categorical_features_)
        numeric = tuple(str(n) for n in self.feature_names_in_ if str(n) not in set(cats))
        spec = TableSpec(
            query=columns["query"],
            label=columns["label"],
            categorical=cats,
            numeric=numeric,
            position=columns.get("position"),
        )
        return {**spec.to_dict(), "encoder": self._api_meta()["encoder"], "numeric_default": False}

    def _api_meta(self) -> dict[str, Any]:
        """What the estimator adds to ``ctxrank.json``: its class, its input columns and encoder."""
        names = getattr(self, "feature_names_in_", None)
        enc = self.encoder_ if getattr(self, "encoder_", None) is not None else None
        position_column = self.get_params().get("position_column")
        return {
            "estimator": type(self).__name__,
            "query_column": self.get_params().get("query_column"),
            **({"position_column": position_column} if position_column is not None else {}),
            "feature_names_in": None if names is None else [str(n) for n in names],
            "categorical_features": list(self.categorical_features_),
            "encoder": None if enc is None else enc.to_dict(),
        }


def _n_rows(X: Any) -> int:
    shape = getattr(X, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) > 0 else len(X)


def model_class_scores_alone(name: str) -> bool:
    """Model ``name`` scores each item alone (``traits.scores_alone`` of its registry entry)."""
    return get_model(name).traits.scores_alone


def _check_labels(labels: np.ndarray, config: RunConfig, what: str) -> None:
    """Labels a model's loss can use: >= 0, and integers for LambdaMART / AdaRank (label gains)."""
    negative = np.flatnonzero(labels < 0)
    if negative.size:
        raise ValueError(
            f"{what}: label {labels[negative[0]]:g} (row {int(negative[0])} after grouping by query): "
            f"{config.model} trains {config.objective}, which needs graded labels >= 0"
        )
    if config.model in ("lambdamart", "adarank-map", "adarank-ndcg") and not np.all(
        labels == np.round(labels)
    ):
        raise ValueError(
            f"{what}: {config.model} needs integer relevance grades (0, 1, 2, ...), got fractions"
        )


def _evals_result(history: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for record in history:
        for key, value in record.items():
            if key == "train_loss":
                out.setdefault("train", {}).setdefault("loss", []).append(value)
            elif key.startswith("valid_"):
                out.setdefault("valid", {}).setdefault(key.removeprefix("valid_"), []).append(value)
    return out


# ------------------------------------------------------------------------- per-model subclasses
def _subclass(class_name: str, model: str, doc: str) -> type[Ranker]:
    """A :class:`Ranker` with ``model`` fixed and every parameter in its signature."""
    defaults = {**param_spec(model).defaults, **dict.fromkeys(_COLUMN_PARAMS)}

    def __init__(self: Ranker, **params: Any) -> None:
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            raise TypeError(f"{class_name}() got unexpected parameter(s) {unknown}; valid: {list(defaults)}")
        for key, default in defaults.items():
            setattr(self, key, params.get(key, default))

    kw = inspect.Parameter.KEYWORD_ONLY
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [self_param, *(inspect.Parameter(k, kw, default=v) for k, v in defaults.items())]
    )
    __init__.__qualname__ = f"{class_name}.__init__"
    return type(
        class_name,
        (Ranker,),
        {"__init__": __init__, "_fixed_model": model, "__doc__": doc, "__module__": __name__},
    )


_FAMILIES = {  # class name -> (registry name, first line of its docstring)
    "QILCMRanker": ("qilcm", "QILCM (Zhu, Chen and He, AAAI 2019): query-invariant listwise context model."),
    "DLCMRanker": ("dlcm", "DLCM (Ai et al., SIGIR 2018): deep listwise context model (GRU re-ranker)."),
    "DCMRanker": ("dcm", "DCM: deep choice model over the list (recurrent context)."),
    "ListNetRanker": (
        "listnet",
        "ListNet (Cao et al., ICML 2007): per-item linear/MLP scorer, top-one loss.",
    ),
    "MLPRanker": ("mlp", "MLP scorer: per-item feed-forward network with any listwise loss."),
    "MNLRanker": ("mnl", "MNL: multinomial logit (per-item utility, choice probabilities)."),
    "ArsmL2RRanker": ("arsm", "ARSM-L2R: learning to rank trained with the ARSM gradient estimator."),
    "LambdaMARTRanker": ("lambdamart", "LambdaMART: LightGBM's lambdarank gradient-boosted trees."),
    "RankSVMRanker": ("ranksvm", "RankSVM: pairwise linear SVM (scikit-learn LinearSVC)."),
    "AdaRankRanker": ("adarank-ndcg", "AdaRank (Xu and Li, SIGIR 2007): boosting on NDCG@K or MAP."),
    "DASALCRanker": (
        "dasalc",
        "DASALC (Qin et al., ICLR 2021): self-attentive latent cross ranker, log1p inputs, input noise.",
    ),
    "GSFRanker": ("gsf", "GSF (Ai et al., ICTIR 2019): groupwise scoring functions over groups of m items."),
    "SelfAttentionRanker": (
        "attn",
        "Context-aware self-attention ranker (Pobrotyn et al. 2020, allRank): a Transformer over the list.",
    ),
    "SetRankRanker": (
        "setrank",
        "SetRank (Pang et al., SIGIR 2020): permutation-invariant stacked (induced) self-attention blocks.",
    ),
}


def _family(name: str) -> type[Ranker]:
    """The estimator class ``name`` of :data:`_FAMILIES`: ``Ranker`` with its model fixed, documented."""
    model, first = _FAMILIES[name]
    doc = (
        f"{first}\n\n``{name}(**params)`` is ``Ranker(model={model!r}, **params)`` with every parameter in "
        "its signature (defaults from the model's config; meanings in docs/models.md)."
    )
    return _subclass(name, model, doc)


QILCMRanker = _family("QILCMRanker")
DLCMRanker = _family("DLCMRanker")
DCMRanker = _family("DCMRanker")
ListNetRanker = _family("ListNetRanker")
MLPRanker = _family("MLPRanker")
MNLRanker = _family("MNLRanker")
ArsmL2RRanker = _family("ArsmL2RRanker")
_LambdaMARTBase = _family("LambdaMARTRanker")
RankSVMRanker = _family("RankSVMRanker")
_AdaRankBase = _family("AdaRankRanker")
DASALCRanker = _family("DASALCRanker")
GSFRanker = _family("GSFRanker")
SelfAttentionRanker = _family("SelfAttentionRanker")
SetRankRanker = _family("SetRankRanker")


class LambdaMARTRanker(_LambdaMARTBase):  # type: ignore[misc, valid-type]
    __doc__ = (
        _LambdaMARTBase.__doc__
        + "\n\nAfter ``fit``, as ``lightgbm.LGBMRanker``: ``booster_`` (the ``lightgbm.Booster``) and "
        "``feature_importances_`` (split counts per column of ``X``; gains: "
        "``booster_.feature_importance('gain')``, in the booster's column order)."
    )

    @property
    def booster_(self) -> Any:
        """The fitted ``lightgbm.Booster`` (its ``best_iteration_`` trees)."""
        check_is_fitted(self, "run_")
        model = self.run_.predictor
        if not hasattr(model, "booster_"):
            raise AttributeError(f"booster_: the fitted model is a {type(model).__name__}, not one booster")
        return model.booster_

    @property
    def feature_importances_(self) -> np.ndarray:
        """int64 (n_features_in_,): how many splits use each column of ``X``, in ``X``'s column order
        (LightGBM's ``split`` importance, ``LGBMRanker``'s default)."""
        booster = self.booster_
        counts = dict(zip(_booster_columns(self), booster.feature_importance("split"), strict=True))
        names = [str(c) for c in getattr(self, "feature_names_in_", range(self.n_features_in_))]
        return np.array([counts[n] for n in names], dtype=np.int64)


def _booster_columns(est: Any) -> list[str]:
    """The names of the booster's columns in its order (the numeric features, then the categorical
    codes), in the names of ``X``'s columns ("0", "1", ... for an array)."""
    layout = est.run_.layout
    numeric = list(layout.feature_names) or [str(i) for i in range(layout.n_features)]
    return [*numeric, *layout.categorical_names]


class AdaRankRanker(_AdaRankBase):  # type: ignore[misc, valid-type]
    __doc__ = (
        _AdaRankBase.__doc__ + "\n\n``metric='map'`` trains ``adarank-map``, an NDCG metric ``adarank-ndcg``."
    )

    def model_name(self) -> str:
        return "adarank-map" if str(self.metric).lower().startswith(("map", "ap")) else "adarank-ndcg"


#: registry name -> the estimator class that trains it (the generic Ranker for the QILCM variants)
ESTIMATOR_OF_MODEL: dict[str, type[Ranker]] = {
    **{model: globals()[cls] for cls, (model, _) in _FAMILIES.items()},
    "adarank-map": AdaRankRanker,
    "adarank-ndcg": AdaRankRanker,
}
assert set(ESTIMATOR_OF_MODEL) <= set(MODELS)
