"""The model registry: every model a run config can name, neural and baseline, behind one protocol.

``MODELS[name]`` is a :class:`ModelEntry`: a :class:`NeuralEntry` (a
:class:`~ctxrank.models.base.RankingModule` subclass, built by :func:`make_model` and trained by
``ctxrank.training``) or a :class:`Baseline` (a non-neural model trained by its own library: LambdaMART,
RankSVM, AdaRank). Both answer the same questions (their :class:`~ctxrank.models.base.ModelTraits`, the
``[train]`` keys they read, their loss, the checks of a run config naming them, their resolved
parameters, search space and description, ``fit`` -> a predictor, which saves its own model directory:
``save_model_dir``), so the code above asks the entry and never which kind of model it is; a saved
directory records its ``kind``, from which ``ctxrank.training.checkpoint.load_model`` loads it. Tests
that must hold "for every model" parametrize over this one dict, so a new model cannot be left out of
them.

Layering: the registry sits above ``models`` and ``baselines`` (it imports both) and below ``config``
(which looks names up here, and hands its run configs to the entries' checks); models and baselines know
nothing of either.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ctxrank._checks import MAX_INT, OptionError, check_int, is_int, resolve_threads
from ctxrank.baselines.adarank import AdaRank
from ctxrank.baselines.lambdamart import LambdaMART
from ctxrank.baselines.ranksvm import RankSVM
from ctxrank.clicks.validation import log_objective
from ctxrank.clicks.weighting import estimate_method
from ctxrank.fit_summary import FitSummary, TrainMetric
from ctxrank.losses import LOSSES
from ctxrank.metrics import mean_over_queries, parse_metric
from ctxrank.models import DCM, DLCM, QILCM, ArsmL2R, ListNet, MLPScorer, MultinomialLogit, RankingModule
from ctxrank.models.attn import ContextAwareAttention
from ctxrank.models.base import ModelTraits
from ctxrank.models.dasalc import DASALC
from ctxrank.models.gsf import GSF
from ctxrank.models.qilcm import QILCM_VARIANTS
from ctxrank.models.setrank import SetRank

__all__ = [
    "BASELINE_TRAIN_KEYS",
    "DEBIAS_TRAIN_KEYS",
    "FULL_BATCH_TRAIN_KEYS",
    "MODELS",
    "Baseline",
    "Description",
    "Fitted",
    "ModelEntry",
    "NeuralEntry",
    "baseline_of_kind",
    "get_model",
    "loss_options",
    "make_model",
]

#: the ``[train]`` keys a baseline reads (seed and threads go to its own parameters where it has them;
#: no_relevant is the convention of its test metrics; metric is the validation metric its run reports
#: and ``ctxrank tune`` maximizes, computed from its scores: its own stopping or selection rule is set by
#: its ``model_params``); the others configure the neural training loop
BASELINE_TRAIN_KEYS = ("seed", "threads", "no_relevant", "metric", "missing")
#: the ``[train]`` keys of learning from a click log, read by a baseline that debiases
#: (:attr:`Baseline.debias`)
DEBIAS_TRAIN_KEYS = ("debias", "propensity", "propensity_eta", "propensity_clip")
#: the constructor arguments of a debiasing baseline's class (``LambdaMART``) that ``DEBIAS_TRAIN_KEYS`` set
_DEBIAS_ARGS = ("debias", "propensity", "propensity_clip")
#: the ``[train]`` keys a maximum-likelihood fit (``mnl``) reads: a baseline's, the memory cap of its
#: full batch and the scoring batch; it has no epochs, optimizer, device or precision to set
FULL_BATCH_TRAIN_KEYS = (*BASELINE_TRAIN_KEYS, "max_memory_bytes", "eval_batch_size")
#: what a maximum-likelihood fit optimizes (``RunConfig.objective``)
MAXIMUM_LIKELIHOOD = "its maximum likelihood (full batch, SciPy; no loss, no epochs)"


@dataclass
class Fitted:
    """What an entry's ``fit`` returns: ``predictor`` (``.predict(data)`` on raw data: a
    ``TorchPredictor``, a ``RerankPredictor`` or a fitted baseline), the fit's ``summary``, its
    per-epoch (per-iteration) ``history`` and ``layout``, the first query of the data it was fitted on."""

    predictor: Any
    summary: FitSummary
    history: list[dict[str, Any]]
    layout: Any


@dataclass(frozen=True)
class Description:
    """What docs/models.md and ``--help`` say of an entry: ``cls`` (its class), ``reference`` (one line),
    ``objective`` (what it trains) and ``documented`` (the class whose docstrings explain its
    ``model_params``)."""

    cls: type
    reference: str
    objective: str
    documented: type


class ModelEntry(Protocol):
    """The protocol of every registry entry (:class:`NeuralEntry`, :class:`Baseline`); ``config`` is a
    ``ctxrank.config.RunConfig`` (duck-typed: the config sits above the registry)."""

    name: str
    cls: type
    kind: str  # what its saved ctxrank.json records ("torch" for every neural model)
    traits: ModelTraits
    # what the code around a model may do with it (True for the torch modules ``ctxrank.training``
    # trains): count its weights, gradients and Adam state against ``train.max_memory_bytes`` before
    # training; train it from a stream of shards; train it data-parallel under torchrun; wrap it in the
    # missing indicator; re-rank an initial ranker's top k with it; its estimator's parameters are its
    # config dataclass's and the training loop's (False: its class's own constructor's)
    sized_before_training: bool
    streams: bool
    distributed: bool
    missing_indicator: bool
    reranks: bool
    config_params: bool

    def reads_row_order(self, model_params: Mapping[str, Any]) -> bool: ...
    def train_keys(self, *, residual: bool = False) -> tuple[str, ...] | None: ...
    def saved_run(self, d: Mapping[str, Any]) -> dict[str, Any]: ...
    def loss_name(self, loss: str, model_params: Mapping[str, Any]) -> str: ...
    def objective_text(self, config: Any) -> str: ...
    def check_run(self, config: Any) -> None: ...
    def resolved_params(self, model_params: Mapping[str, Any]) -> dict[str, Any]: ...
    def tune_space(self, config: Any, neural_space: Mapping[str, Any]) -> tuple[dict[str, Any], str]: ...
    def describe(self) -> Description: ...
    def fit(self, config: Any, train: Any, valid: Any, *, train_neural: Callable[..., Fitted]) -> Fitted: ...


def loss_options(fn: Any) -> list[str]:
    """Keyword-only options of a loss function settable from a config (not ``reduction``, ``generator``,
    ``weights``)."""
    return [
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("reduction", "generator", "weights")
    ]


def _check_unread_train(train: Any, reads: tuple[str, ...], who: str, see: str) -> None:
    """A ``[train]`` key set for a model whose fit does not read it is an error, not silently ignored."""
    unused = [
        f"train.{f.name}"
        for f in dataclasses.fields(train)
        if f.name not in reads and getattr(train, f.name) != f.default
    ]
    if unused:
        raise ValueError(
            f"{', '.join(unused)}: {who} and does not use {'it' if len(unused) == 1 else 'them'}; "
            f"of [train] it reads {', '.join(f'train.{k}' for k in reads)} only ({see})"
        )


@dataclass(frozen=True)
class NeuralEntry:
    """A neural model: ``cls``, a :class:`RankingModule` subclass (its ``config_class`` holds its
    ``model_params``), trained by ``ctxrank.training``."""

    cls: type[RankingModule]
    kind = "torch"
    sized_before_training = streams = distributed = missing_indicator = reranks = config_params = True

    @property
    def name(self) -> str:
        return self.cls.name

    @property
    def traits(self) -> ModelTraits:
        return self.cls.traits

    @property
    def config_class(self) -> type:
        return self.cls.config_class

    def make_config(self, params: Mapping[str, Any] | None = None) -> Any:
        return self.cls.make_config(params)

    def reads_row_order(self, model_params: Mapping[str, Any]) -> bool:
        return self.cls.reads_row_order(model_params)

    def train_keys(self, *, residual: bool = False) -> tuple[str, ...] | None:
        """The ``[train]`` keys its fit reads (``residual``: ``rerank.residual``, which trains a
        maximum-likelihood model by SGD); None: every key (the neural training loop)."""
        return FULL_BATCH_TRAIN_KEYS if self.traits.full_batch and not residual else None

    def saved_run(self, d: Mapping[str, Any]) -> dict[str, Any]:
        """A saved run-config dict as a run config reads it today (a neural model's: unchanged)."""
        return dict(d)

    def loss_name(self, loss: str, model_params: Mapping[str, Any]) -> str:
        return loss or self.traits.own_objective or self.traits.default_loss

    def objective_text(self, config: Any) -> str:
        if config.fits_by_maximum_likelihood:
            return MAXIMUM_LIKELIHOOD
        if self.traits.own_objective:
            return f"its own {self.traits.own_objective} objective"
        return f"the {config.loss_name} loss"

    def check_run(self, config: Any) -> None:
        """A run of this model: its loss and loss options, its ``model_params`` (they must build its
        config dataclass: unknown keys and bad values raise here), a maximum-likelihood fit's
        ``[train]`` keys and the initial ranker's parameters, before data is read."""
        own = self.traits.own_objective
        if own and config.rerank.residual:
            raise ValueError(
                f"rerank.residual: {config.model} trains its own {own} objective; a residual correction "
                "applies to models trained with a ranking loss"
            )
        if config.loss and config.loss not in LOSSES and config.loss != own:
            raise ValueError(f"loss: unknown loss {config.loss!r}; valid losses: {', '.join(sorted(LOSSES))}")
        self.make_config(config.model_params)
        if config.fits_by_maximum_likelihood:
            self._check_maximum_likelihood(config)
        if config.rerank.initial:  # the initial ranker's parameters fail before data is read, too
            try:
                get_model(config.rerank.initial).build(config.rerank.initial_params, config.train)
            except ValueError as exc:
                why = str(exc).removeprefix("model_params: ")
                raise ValueError(f"rerank.initial_params: {why}") from None
        if own:
            if config.loss not in ("", own) or config.loss_params:
                raise ValueError(
                    f"loss: {config.model} trains its own {own} objective (see model_params); "
                    "loss and loss_params do not apply"
                )
            if config.train.debias != "none":
                raise ValueError(
                    f"train.debias: {config.model} trains its own {own} objective; debiasing applies to "
                    "models trained with a ranking loss"
                )
            return
        options = loss_options(LOSSES[config.loss_name])
        for key, value in config.loss_params.items():
            if key not in options:
                raise ValueError(
                    f"loss_params.{key}: not an option of loss {config.loss_name!r} "
                    f"(options: {', '.join(options) or 'none'})"
                )
            if is_int(value):  # the loss checks its own ranges when called; no integer overflows first
                check_int(f"loss_params.{key}", value, -MAX_INT - 1)

    def _check_maximum_likelihood(self, config: Any) -> None:
        """A maximum-likelihood fit (``mnl``): only the ``[train]`` keys it reads, no loss but the
        default one a saved config records, and no seed ensemble (the fit does not depend on the seed)."""
        if config.ensemble > 1:
            raise ValueError(
                f"ensemble = {config.ensemble}: {config.model} is fitted to its maximum likelihood, which "
                "does not depend on the seed: every member would be the same model; ensemble applies when "
                "SGD trains it (rerank.residual = true)"
            )
        _check_unread_train(
            config.train,
            FULL_BATCH_TRAIN_KEYS,
            f"{config.model} is fitted to its maximum likelihood (full batch, SciPy)",
            "its own settings are model_params: l2, solver, max_iter, gtol",
        )
        implied = self.traits.default_loss_params
        if config.loss not in ("", self.traits.default_loss) or any(
            k not in implied or implied[k] != v for k, v in config.loss_params.items()
        ):
            raise ValueError(
                f"loss: {config.model} is fitted to its maximum likelihood (no loss); loss and loss_params "
                "apply only when SGD trains it (rerank.residual = true)"
            )

    def resolved_params(self, model_params: Mapping[str, Any]) -> dict[str, Any]:
        """Its config dataclass of ``model_params`` as a dict (tuples as lists)."""
        resolved = dataclasses.asdict(self.make_config(model_params))
        return {k: list(v) if isinstance(v, tuple) else v for k, v in resolved.items()}

    def tune_space(self, config: Any, neural_space: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """The space ``ctxrank tune`` searches (``neural_space`` and its config class's ``SEARCH_SPACE``)
        and the objective that has no loss to search ("" when the loss is searched)."""
        if config.fits_by_maximum_likelihood:  # no epochs, learning rate or loss to search
            return {
                "transform": neural_space["transform"],
                **self.config_class.SEARCH_SPACE,
            }, "maximum likelihood"
        return {**neural_space, **self.config_class.SEARCH_SPACE}, self.traits.own_objective

    def describe(self) -> Description:
        traits, cls = self.traits, self.cls
        reference = traits.summary or (inspect.getdoc(inspect.getmodule(cls)) or "").splitlines()[0]
        loss = traits.own_objective or traits.default_loss
        objective = f"default loss: `{loss}`" + (" (its own objective)" if traits.own_objective else "")
        if traits.full_batch:  # no loss: its loss is for SGD (rerank.residual) only
            objective = (
                f"objective: {MAXIMUM_LIKELIHOOD}; loss `{loss}` only when SGD trains it (rerank.residual)"
            )
        if traits.run_defaults:  # run-config values the model implies (e.g. DASALC's transform, noise)
            implied = ", ".join(f"`{k} = {v!r}`" for k, v in traits.run_defaults.items())
            objective += f"; unless the run sets them: {implied}"
        return Description(cls, reference, objective, self.config_class)

    def fit(self, config: Any, train: Any, valid: Any, *, train_neural: Callable[..., Fitted]) -> Fitted:
        """``train_neural(self, config, train, valid)``: the training loop of ``ctxrank.training``, which
        sits above the registry and hands itself in."""
        return train_neural(self, config, train, valid)


_BASELINE_TRAITS = ModelTraits(
    default_loss="", scores_alone=True, torch_module=False, reads_categorical=False
)


@dataclass(frozen=True)
class Baseline:
    """How a run config's ``model = NAME`` builds one of the non-neural baselines.

    Attributes:
        name: its registry name.
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
        debias: ``train.debias`` value -> the class's own ``debias`` argument, for a baseline that learns
            from a click log (it then reads :data:`DEBIAS_TRAIN_KEYS`, and ``model_params`` may not set
            the class's ``debias`` / ``propensity`` / ``propensity_clip``); empty: it reads labels only.
        traits: every baseline scores an item alone and is fitted by its own library; LightGBM reads
            missing values and categorical columns itself.
    """

    name: str
    cls: type
    kind: str
    trains: str
    objective: Callable[[Mapping[str, Any]], str]
    fixed: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    seed: str = ""
    threads: str = ""
    search_space: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    debias: Mapping[str, str] = field(default_factory=dict)
    traits: ModelTraits = _BASELINE_TRAITS
    sized_before_training = streams = distributed = missing_indicator = reranks = config_params = False

    def reads_row_order(self, model_params: Mapping[str, Any]) -> bool:
        return False

    def train_keys(self, *, residual: bool = False) -> tuple[str, ...] | None:
        return (*BASELINE_TRAIN_KEYS, *self.debias_train_keys)

    @property
    def debias_train_keys(self) -> tuple[str, ...]:
        """:data:`DEBIAS_TRAIN_KEYS` for a baseline that debiases a click log, else none."""
        return DEBIAS_TRAIN_KEYS if self.debias else ()

    @property
    def debias_args(self) -> tuple[str, ...]:
        """The class's constructor arguments that ``train.debias`` and its propensities set (none for a
        baseline that does not debias): not ``model_params``, nor its estimator's model parameters."""
        return _DEBIAS_ARGS if self.debias else ()

    def loss_name(self, loss: str, model_params: Mapping[str, Any]) -> str:
        return self.objective(model_params)

    def saved_run(self, d: Mapping[str, Any]) -> dict[str, Any]:
        """A saved run-config dict of this model whose ``model_params`` hold the class's ``debias`` /
        ``propensity`` / ``propensity_clip`` (saved before ``train.debias`` set them), with them moved
        to ``train.debias`` and its propensities (:meth:`debias_of_params`); other dicts unchanged."""
        params = d.get("model_params")
        if not isinstance(params, Mapping) or not set(params) & set(self.debias_args):
            return dict(d)
        rest, train = self.debias_of_params(params)
        return {**d, "model_params": rest, "train": {**(d.get("train") or {}), **train}}

    def debias_of_params(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``params`` (the class's constructor arguments, e.g. ``rerank.initial_params``) less the
        debiasing ones, and the ``[train]`` values that set them (:meth:`debias_params` inverted:
        ``debias="lightgbm"`` is ``train.debias = "pal"``, a number ``propensity`` is ``propensity_eta``;
        ``{}`` for ``"none"``)."""
        rest = {k: v for k, v in params.items() if k not in self.debias_args}
        debias = params.get("debias", "none") if self.debias else "none"
        if debias == "none":
            return rest, {}
        train = {"debias": next((ours for ours, theirs in self.debias.items() if theirs == debias), debias)}
        if debias == "ips":
            propensity = params.get("propensity")
            key = "propensity_eta" if isinstance(propensity, int | float) else "propensity"
            train.update({key: propensity, "propensity_clip": params.get("propensity_clip")})
        return rest, train

    def objective_text(self, config: Any) -> str:
        """``trains``, with the objective's name unless it says it already (e.g. ``pairwise-hinge``)."""
        name = config.loss_name
        return self.trains if name.lower() in self.trains.lower() else f"{self.trains}: {name}"

    def check_run(self, config: Any) -> None:
        """A baseline's run: no loss (but the one a saved config records), no initial ranker, only the
        ``[train]`` keys it reads, and ``model_params`` it builds with (before data is read)."""
        if config.loss and config.loss != self.objective(config.model_params):
            raise OptionError("loss: {name} trains {trains}; {loss} does not apply", name=config.model,
                              trains=self.trains)  # fmt: skip
        if config.loss_params:
            raise ValueError(f"loss_params: {config.model} trains {self.trains}; loss_params do not apply")
        if config.rerank.initial:
            raise ValueError(
                f"rerank.initial: {config.model} is a baseline that ranks whole lists"
                + (" (it is itself the initial ranker)" if config.model == "lambdamart" else "")
                + "; re-ranking an initial ranker's top k applies to the neural models"
            )
        _check_unread_train(
            config.train,
            self.train_keys(),
            f"{config.model} is a baseline",
            "its own settings are model_params, see docs/baselines.md",
        )
        if config.train.missing == "indicator":
            raise ValueError(
                f"train.missing = 'indicator' applies to the neural models; {config.model} is a baseline "
                "(lambdamart reads missing values itself: train.missing = 'native')"
            )
        taken = [k for k in self.debias_args if k in config.model_params]
        if taken:
            raise ValueError(
                f"model_params: {taken[0]} is not a model parameter of {self.name}: a click log is "
                f"debiased by {', '.join(f'train.{k}' for k in DEBIAS_TRAIN_KEYS)} (train.debias: "
                f"{self._debias_values()})"
            )
        train = config.train
        if estimate_method(train.propensity) is not None:  # the curve comes with the training log
            train = dataclasses.replace(train, propensity=(1.0,))
        self.build(config.model_params, train, debiased=True)

    def resolved_params(self, model_params: Mapping[str, Any]) -> dict[str, Any]:
        """Its constructor's parameters, leaving out those ``[train]`` fills (``seed`` / ``threads``)
        unless ``model_params`` sets them."""
        from_train = {self.seed, self.threads, *self.debias_args} - {""} - set(model_params)
        params = self.build(model_params).get_params()
        return {k: v for k, v in params.items() if k not in from_train}

    def tune_space(self, config: Any, neural_space: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        return dict(self.search_space), "baseline"

    def describe(self) -> Description:
        reference = (inspect.getdoc(self.cls) or "").splitlines()[0]
        return Description(self.cls, reference, f"objective: {self.trains}", self.cls)

    def fit(self, config: Any, train: Any, valid: Any, *, train_neural: Callable[..., Fitted]) -> Fitted:
        """Fit on whole lists; the summary adds ``train_metric``: ``train.metric`` of the fitted model on
        ``valid`` (its own selection, e.g. LambdaMART's early stopping, follows its ``model_params``)."""
        tc = config.train
        model = self.build(config.model_params, tc, debiased=True)
        objective = None  # a click log validates by the run's IPS estimate (``ips``) or naively (``none``)
        if self.debias and valid is not None and tc.debias in ("none", "ips"):
            objective = log_objective(
                model.metric, valid, debias=tc.debias, propensity=tc.propensity,
                propensity_eta=tc.propensity_eta, clip=tc.propensity_clip,
            )  # fmt: skip
        model = model.fit(train, valid, **({} if objective is None else {"valid_objective": objective}))
        metric = mean_over_queries(model.predict(valid), valid, tc.metric, tc.no_relevant)
        summary = FitSummary.from_json(model.training_summary())  # the baseline's public record of its fit
        summary = dataclasses.replace(summary, train_metric=TrainMetric(tc.metric, metric))
        return Fitted(model, summary, _curves(model), train.subset([0]))

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

    def _debias_values(self) -> str:
        """``train.debias``'s values for this model, for messages."""
        meaning = {"ips": "inverse-propensity weights", "pal": "LightGBM's position debiasing, an additive "
                   "position term: the tree-side analogue of PAL"}  # fmt: skip
        return ", ".join(f"{v} ({meaning[v]})" if v in meaning else v for v in self.debias)

    def debias_params(self, train: Any) -> dict[str, Any]:
        """The class's debiasing arguments of ``train.debias`` and its propensities (a ``TrainConfig``);
        a value this model has not is a ValueError naming the valid ones."""
        if train.debias not in self.debias:
            raise ValueError(
                f"train.debias = {train.debias!r}: {self.name} learns from a click log with train.debias "
                f"{self._debias_values()}; {train.debias} applies to the neural models"
            )
        out = {"debias": self.debias[train.debias]}
        if train.debias == "ips":
            out["propensity"] = list(train.propensity) if train.propensity else train.propensity_eta
            out["propensity_clip"] = train.propensity_clip
        return out

    def build(self, model_params: Mapping[str, Any], train: Any = None, *, debiased: bool = False) -> Any:
        """An unfitted model; ``debiased``: of a run, with ``train.debias`` and its propensities (a
        baseline that debiases, :attr:`debias`). Raises ValueError (``model_params: ...``) for bad
        parameters."""
        params = self.params(model_params, train)
        if debiased and self.debias:
            params.update(self.debias_params(train))
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


def _curves(model: Any) -> list[dict[str, Any]]:
    """Per-iteration validation metrics of a fitted baseline (LambdaMART's ``evals_result_``, AdaRank's
    ``history_``) as curve records; [] for one without (RankSVM)."""
    valid = (getattr(model, "evals_result_", None) or {}).get("valid", {})
    metric = getattr(model, "metric", "")
    if metric in valid:
        return [{"epoch": i + 1, f"valid_{metric}": v} for i, v in enumerate(valid[metric])]
    rounds = getattr(model, "history_", None) or []
    if rounds and rounds[0].get("valid") is not None:
        return [{"epoch": i + 1, f"valid_{metric}": r["valid"]} for i, r in enumerate(rounds)]
    return []


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
        name="lambdamart",
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
        # train.debias = "pal": LightGBM's position debiasing (its Dataset(position=...)), the additive
        # position term of PAL fitted by the trees; "dla" (a propensity tower) has no tree-side analogue
        debias={"none": "none", "ips": "ips", "pal": "lightgbm"},
        traits=dataclasses.replace(
            _BASELINE_TRAITS,
            reads_missing=True,  # LightGBM's own missing-value handling (use_missing, the default)
            reads_categorical=True,  # LightGBM's categorical features
        ),
    ),
    "ranksvm": Baseline(
        name="ranksvm",
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
        name="adarank-map",
        cls=AdaRank,
        kind="adarank",
        trains="AdaRank's boosting on MAP (numpy, ctxrank's metrics)",
        objective=lambda params: "adarank-map",
        fixed={"metric": ("map", "map")},
        threads="num_threads",
        search_space={"model_params.patience": ("int", 5, 100)},
    ),
    "adarank-ndcg": Baseline(
        name="adarank-ndcg",
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

#: name -> registry entry (a neural model's :class:`NeuralEntry` or a :class:`Baseline`), sorted by name.
MODELS: dict[str, NeuralEntry | Baseline] = dict(
    sorted({**{cls.name: NeuralEntry(cls) for cls in _NEURAL}, **_BASELINES}.items())
)


def get_model(name: str) -> NeuralEntry | Baseline:
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
    """An untrained neural model ``name`` for ``n_features`` features; ``params`` build its config
    (ValueError for a baseline or an unknown name)."""
    entry = get_model(name)
    if isinstance(entry, Baseline):
        raise ValueError(f"{name!r} is a baseline ({entry.trains}), not a neural model")
    return entry.cls(
        n_features, entry.make_config(params), categorical_cardinalities=categorical_cardinalities
    )
