"""The model registry: every model a run config can name, neural and baseline, in one plain dict.

``MODELS[name]`` is either a :class:`~ctxrank.models.base.RankingModule` subclass (a neural model, built by
:func:`make_model` and trained by ``ctxrank.training``) or a :class:`Baseline` (a non-neural model
trained by its own library: LambdaMART, RankSVM, AdaRank). Tests that must hold "for every model"
parametrize over this one dict, so a new model cannot be left out of them.

Layering: the registry sits above ``models`` and ``baselines`` (it imports both) and below ``config``
(which looks names up here); models and baselines know nothing of either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxrank._checks import resolve_threads
from ctxrank.baselines.adarank import AdaRank
from ctxrank.baselines.lambdamart import LambdaMART
from ctxrank.baselines.ranksvm import RankSVM
from ctxrank.metrics import parse_metric
from ctxrank.models import DCM, DLCM, QILCM, ArsmL2R, ListNet, MLPScorer, MultinomialLogit, RankingModule
from ctxrank.models.attn import ContextAwareAttention
from ctxrank.models.dasalc import DASALC
from ctxrank.models.gsf import GSF
from ctxrank.models.qilcm import QILCM_VARIANTS
from ctxrank.models.setrank import SetRank

__all__ = [
    "MODELS",
    "Baseline",
    "baseline_of_kind",
    "get_model",
    "is_baseline",
    "make_model",
    "model_class",
    "reads_missing",
]


@dataclass(frozen=True)
class Baseline:
    """How a run config's ``model = NAME`` builds one of the non-neural baselines.

    Attributes:
        cls: the model class (its module imports LightGBM / scikit-learn only when fitting).
        kind: the ``kind`` its saved ``ctxrank.json`` records (``ctxrank.load_model`` dispatches on it).
        trains: what it optimizes and with which library, for messages.
        objective: ``RunConfig.loss_name`` given ``model_params``.
        fixed: parameters the name implies (``adarank-map``: ``metric = "map"``), checked against
            ``model_params``: ``{name: (default, allowed base metric)}`` for metrics.
        seed, threads: the class's parameters that receive ``train.seed`` and ``train.threads``
            (unless ``model_params`` sets them), or ``""`` when it has none.
        search_space: what ``ctxrank tune`` searches: run-config key -> distribution (format:
            ``ctxrank.tune``), as ``SEARCH_SPACE`` on a neural model's config class.
        reads_missing: the model reads missing feature values (NaN) itself (LightGBM); every other
            model refuses them (:func:`ctxrank.data.ranking_data.missing_message`).
        reads_categorical: the model reads categorical columns itself (LightGBM's categorical
            features); every other baseline uses the numeric columns only and refuses data with
            categorical columns rather than ignore them.
        scores_alone: an item's score depends on that item alone (every baseline here), as
            ``RankingModule.scores_alone``.
    """

    cls: type
    kind: str
    trains: str
    objective: Callable[[Mapping[str, Any]], str]
    fixed: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    seed: str = ""
    threads: str = ""
    search_space: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    reads_missing: bool = False
    reads_categorical: bool = False
    scores_alone: bool = True

    def params(self, model_params: Mapping[str, Any], train: Any = None) -> dict[str, Any]:
        """The constructor's keyword arguments: implied, then seed/threads from ``train`` (a
        ``TrainConfig``), then ``model_params``. Raises ValueError naming ``model_params.<key>`` for a
        conflict."""
        out: dict[str, Any] = {}
        for key, (default, base) in self.fixed.items():
            value = model_params.get(key, default)
            try:
                ok = isinstance(value, str) and parse_metric(value)[0] == base
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(
                    f"model_params.{key}: this model trains {self.trains}, so {key} must be a "
                    f"{base} metric, got {value!r}"
                )
            out[key] = default
        if train is not None:
            if self.seed:
                out[self.seed] = train.seed
            if self.threads:
                out[self.threads] = resolve_threads(train.threads, "train.threads")
        out.update(model_params)
        return out

    def build(self, model_params: Mapping[str, Any], train: Any = None) -> Any:
        """An unfitted model. Raises ValueError (``model_params: ...``) for bad parameters."""
        params = self.params(model_params, train)
        names = getattr(self.cls, "_PARAMS", None)
        if names is not None:
            unknown = sorted(set(params) - set(names))
            if unknown:
                raise ValueError(
                    f"model_params: unknown option(s) {unknown} for {self.cls.__name__}; "
                    f"valid options: {sorted(names)}"
                )
        try:
            model = self.cls(**params)
            check = getattr(model, "check_params", None)  # LambdaMART: LightGBM's parameter names
            if check is not None:
                check()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"model_params: {exc}") from None
        return model

    def load(self, directory: str | Path) -> Any:
        """The saved model; metadata of the wrong type anywhere is a ValueError naming the file (the
        loaders check each value they read; this turns a check they lack into the same kind of error)."""
        try:
            return self.cls.load(directory)
        except (TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
            raise ValueError(
                f"{Path(directory) / 'ctxrank.json'}: malformed {self.kind} model metadata "
                f"({type(exc).__name__}: {str(exc)[:200]})"
            ) from None


_NEURAL: tuple[type[RankingModule], ...] = (
    ArsmL2R,
    DCM,
    DLCM,
    ListNet,
    MLPScorer,
    MultinomialLogit,
    QILCM,
    *QILCM_VARIANTS.values(),  # ablations of QILCM Table 3: qilcm-variant1, -variant2, -variant3
    DASALC,
    GSF,
    ContextAwareAttention,  # the context-aware self-attention ranker (Pobrotyn et al. 2020): "attn"
    SetRank,
)

_BASELINES: dict[str, Baseline] = {
    "lambdamart": Baseline(
        cls=LambdaMART,
        kind="lightgbm",
        trains="LightGBM's lambdarank objective",
        objective=lambda params: "lambdarank",
        seed="seed",
        threads="num_threads",
        search_space={
            "model_params.num_leaves": ("log-int", 7, 255),
            "model_params.learning_rate": ("log", 0.01, 0.3),
            "model_params.min_data_in_leaf": ("log-int", 1, 200),
            "model_params.feature_fraction": ("float", 0.5, 1.0),
            # LightGBM's lambdarank_truncation_level (LambdaMART's max_position parameter)
            "model_params.max_position": ("log-int", 5, 100),
        },
        reads_missing=True,  # LightGBM's own missing-value handling (use_missing, the default)
        reads_categorical=True,  # LightGBM's categorical features
    ),
    "ranksvm": Baseline(
        cls=RankSVM,
        kind="ranksvm",
        trains="a pairwise linear SVM (scikit-learn LinearSVC, liblinear)",
        objective=lambda params: "pairwise-" + str(params.get("loss", "squared_hinge")).replace("_", "-"),
        seed="seed",
        search_space={
            "model_params.C": ("log", 1e-4, 1e2),
            "model_params.loss": ("choice", ("hinge", "squared_hinge")),
        },
    ),
    "adarank-map": Baseline(
        cls=AdaRank,
        kind="adarank",
        trains="AdaRank's boosting on MAP (numpy, ctxrank's metrics)",
        objective=lambda params: "adarank-map",
        fixed={"metric": ("map", "map")},
        threads="num_threads",
        search_space={"model_params.patience": ("int", 5, 100)},
    ),
    "adarank-ndcg": Baseline(
        cls=AdaRank,
        kind="adarank",
        trains="AdaRank's boosting on NDCG@K (numpy, ctxrank's metrics)",
        objective=lambda params: "adarank-" + str(params.get("metric", "ndcg@10")).replace(" ", "").lower(),
        fixed={"metric": ("ndcg@10", "ndcg")},
        threads="num_threads",
        search_space={
            "model_params.metric": ("choice", ("ndcg@5", "ndcg@10", "ndcg@20")),
            "model_params.patience": ("int", 5, 100),
        },
    ),
}

#: name -> neural model class (a RankingModule subclass) or Baseline, sorted by name.
MODELS: dict[str, type[RankingModule] | Baseline] = dict(
    sorted({**{cls.name: cls for cls in _NEURAL}, **_BASELINES}.items())
)


def get_model(name: str) -> type[RankingModule] | Baseline:
    """``MODELS[name]``; an unknown name is a ValueError listing the valid ones."""
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        if isinstance(name, Mapping):  # `model.width = 8`, meant for the model's parameters
            raise ValueError(
                f"model is the model's name, not a table (got {dict(name)!r}); its parameters are "
                f"model_params (model_params.{next(iter(name), 'NAME')}); valid models: {', '.join(MODELS)}"
            ) from None
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(MODELS)}") from None


def reads_missing(name: str) -> bool:
    """Model ``name`` reads missing feature values (NaN) itself: only LambdaMART (LightGBM)."""
    entry = get_model(name)
    return isinstance(entry, Baseline) and entry.reads_missing


def is_baseline(name: str) -> bool:
    """Whether ``name`` is a registered non-neural baseline."""
    return isinstance(MODELS.get(name), Baseline)


def model_class(name: str) -> type[RankingModule]:
    """The neural model class registered as ``name`` (ValueError for a baseline or an unknown name)."""
    entry = get_model(name)
    if isinstance(entry, Baseline):
        raise ValueError(f"{name!r} is a baseline ({entry.trains}), not a neural model")
    return entry


def baseline_of_kind(kind: Any) -> Baseline | None:
    """The baseline whose saved ``ctxrank.json`` records ``kind`` (None for none)."""
    return next((b for b in _BASELINES.values() if b.kind == kind), None)


def make_model(
    name: str,
    n_features: int,
    params: Mapping[str, Any] | None = None,
    *,
    categorical_cardinalities: Sequence[int] = (),
) -> RankingModule:
    """An untrained neural model ``name`` for ``n_features`` features; ``params`` build its config."""
    cls = model_class(name)
    return cls(n_features, cls.make_config(params), categorical_cardinalities=categorical_cardinalities)
