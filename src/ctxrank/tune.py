"""Hyperparameter search on Optuna: search spaces, studies, and what a study leaves behind.

**Search spaces** are declared next to each model: ``SEARCH_SPACE`` on a neural model's config class
(e.g. ``QILCMConfig.SEARCH_SPACE``) and ``search_space`` on a baseline's registry entry
(``ctxrank.registry.MODELS["lambdamart"].search_space``). Every neural model also searches
:data:`NEURAL_SPACE` (learning rate, feature transform, input noise), and the options of the loss a
trial trains with come from :data:`LOSS_SPACES`; a model fitted to its maximum likelihood (the
conditional logit ``mnl``, unless wrapped by ``rerank.residual``) searches only the transform of it and
its own space. A space maps a run-config key, dotted as ``--set`` takes it, to a
distribution::

    ("float", low, high)     uniform              ("log", low, high)       log-uniform
    ("int", low, high)       uniform integer      ("log-int", low, high)   log-uniform integer
    ("choice", (a, b, ...))  one of the values (tuples such as hidden widths allowed)

A key the base configuration sets (a ``--config`` file, ``--set``, an experiment's model table) is
fixed, not searched; setting any ``loss_params`` key fixes ``loss`` too. A study with nothing left to
search runs one trial (every further one would train the same configuration).

**A study** (:func:`tune`) samples configurations with Optuna's TPE sampler, trains each with
:func:`ctxrank.training.run.run_training` on the training split, stopping early on the validation split
as ``ctxrank train`` does, and scores it by the mean validation ``train.metric`` of the trained model
(every query, the model's own ``no_relevant``). The test split is never given to it. Neural trials are
pruned on their per-epoch validation metric (``MedianPruner``: a trial whose metric is below the median
of the earlier trials' at the same epoch stops). Seeds: every trial trains with the base
``train.seed``; the sampler's random draws of trial ``n`` are seeded by ``(seed, n)``, so a study is
repeatable and two processes sharing a study draw different configurations.

**Storage**: an SQLite file ``OUT/study.db`` by default, or any database URL Optuna accepts (e.g.
``postgresql://user@host/db``), so that several processes or machines work on one study at once.
Opening an existing study continues it; a study started for another model, metric, search space or
data is refused.

**The output directory** is new, empty or a study's (its ``.study.lock``, taken before the study is
opened, or ``tune.json``): one of other files is refused unless ``overwrite``, which replaces the files
of the names a study writes there, ``study.db`` included (a database ctxrank did not create is never
extended with Optuna's tables; :func:`claim_study_dir`).

**Outputs** (:func:`write_report`): ``best.toml`` (the best configuration, a run config that
``ctxrank train --config`` and an experiment's ``[models.NAME]`` accept), ``trials.csv`` and a
Markdown table of the trials, ``optimization_history.png`` and ``param_importances.png``, ``tune.json``
(the study's summary).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import csv
import io
import json
import re
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

try:
    import optuna
except ImportError as exc:  # pragma: no cover - optuna is in the dev extra
    raise ImportError(
        "ctxrank tune needs Optuna: pip install 'ctxrank[tune]' (or pip install optuna)"
    ) from exc

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ctxrank._io import atomic_write, check_own_database, claim_output_dir, dumps, to_toml, write_json
from ctxrank._overrides import Override
from ctxrank.clicks.validation import LogObjective
from ctxrank.config import RunConfig
from ctxrank.data.ranking_data import RankingData
from ctxrank.fit_summary import FitSummary
from ctxrank.losses import LOSSES
from ctxrank.registry import Baseline, get_model
from ctxrank.training.diagnostics import TrainingWarning
from ctxrank.training.loop import NonFiniteLossError, validation_objective
from ctxrank.training.rerank import InitialRankers
from ctxrank.training.resume import fingerprint
from ctxrank.training.run import (
    ROW_ORDER_WARNING,
    run_training,
    validation_metric,
    with_estimated_propensities,
)

__all__ = [
    "KINDS",
    "LOSS_SPACES",
    "NEURAL_SPACE",
    "STUDY_FILE",
    "SearchSpace",
    "StudyBase",
    "TuneResult",
    "check_storage",
    "claim_study_dir",
    "finished_trials",
    "make_pruner",
    "open_study",
    "rdb_storage",
    "search_space",
    "tune",
    "validation_metric",
    "write_report",
]

KINDS = ("float", "log", "int", "log-int", "choice")
STUDY_FILE = "study.db"
LOCK_NAME = ".study.lock"
#: entries that show a directory holds ctxrank's study: the lock made before the study, the report
STUDY_MARKS = (LOCK_NAME, "tune.json")
#: searched for every neural model (a model's own ``SEARCH_SPACE`` may override a key)
NEURAL_SPACE: dict[str, tuple[Any, ...]] = {
    "train.lr": ("log", 1e-4, 1e-2),
    "transform": (
        "choice",
        ("minmax", "zscore", "query-minmax", "log1p-zscore", "zscore-log1p", "query-zscore"),
    ),
    "train.input_noise": ("choice", (0.0, 0.01, 0.05, 0.1)),  # Gaussian input noise (a recipe)
}
#: loss name -> the space of its options (a loss without an entry has none searched)
LOSS_SPACES: dict[str, dict[str, tuple[Any, ...]]] = {
    "listnet": {"loss_params.temperature": ("log", 0.25, 4.0)},
    "softrank": {"loss_params.sigma": ("log", 0.01, 1.0)},
    "ranknet": {"loss_params.sigma": ("log", 0.25, 4.0)},
    "lambdaloss": {"loss_params.sigma": ("log", 0.25, 4.0)},
    "approxndcg": {"loss_params.alpha": ("log", 1.0, 100.0)},
    "neuralndcg": {"loss_params.tau": ("log", 0.1, 10.0)},
}
#: a trial's summary entries kept in the study (neural: epochs; baselines: their selection)
SUMMARY_KEYS = (
    "best_epoch",
    "epochs_run",
    "best_iteration",
    "best_round",
    "C",
    "seconds",
    "warnings",
    "validation",
)


def _stored(value: Any) -> Any:
    """``value`` as the study's storage keeps a user attribute: JSON (strict: NaN -> null, tuples ->
    lists). Optuna's storage is the one place a study's configurations are serialized; in this process
    they stay typed (a trial's :class:`RunConfig`, the validated :class:`StudyBase`)."""
    return json.loads(dumps(value))


# ------------------------------------------------------------------------------------ base
@dataclass(frozen=True)
class StudyBase:
    """The base configuration of a study, validated once, before its first trial: ``values``, the run
    config as written (a dict as TOML gives it: the keys it sets are fixed, not searched), and
    ``config``, the same as a :class:`RunConfig`; every trial is ``config`` with the trial's suggestions
    set (:func:`trial_overrides`)."""

    values: dict[str, Any]
    config: RunConfig

    @classmethod
    def of(cls, base: Mapping[str, Any] | StudyBase) -> StudyBase:
        """``base`` (a copy of it) and its validated run config; a :class:`StudyBase` as it is.

        Raises:
            ValueError: ``base`` is no valid run config.
        """
        if isinstance(base, StudyBase):
            return base
        values = copy.deepcopy(dict(base))
        return cls(values, RunConfig.from_dict(values))


# ------------------------------------------------------------------------------------ search space
@dataclass(frozen=True)
class SearchSpace:
    """What one study searches: ``params`` (key -> distribution) and, per loss a trial may train with,
    the space of that loss's options (``losses``; one entry when the loss is fixed)."""

    params: dict[str, tuple[Any, ...]]
    losses: dict[str, dict[str, tuple[Any, ...]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _stored({"params": self.params, "losses": self.losses})

    def keys(self) -> list[str]:
        return [*self.params, *sorted({k for space in self.losses.values() for k in space})]


def flat_keys(d: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys of the leaves of a nested run-config dict."""
    out: list[str] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        out += flat_keys(v, key + ".") if isinstance(v, Mapping) and v else [key]
    return out


def search_space(base: Mapping[str, Any] | StudyBase) -> SearchSpace:
    """The space searched for the run config ``base`` (a dict as TOML gives it, or a
    :class:`StudyBase`): the model's declared space (plus :data:`NEURAL_SPACE` for a neural model) less
    the keys ``base`` sets."""
    base = StudyBase.of(base)
    config = base.config
    entry = get_model(config.model)
    fixed = set(flat_keys(base.values))
    if any(k.startswith("loss_params.") for k in fixed):
        fixed.add("loss")
    declared, own = entry.tune_space(config, NEURAL_SPACE)  # own: the objective with no loss to search
    params = {k: v for k, v in declared.items() if k not in fixed}
    losses: dict[str, dict[str, tuple[Any, ...]]] = {}
    if not own:
        names = params["loss"][1] if "loss" in params else (config.loss_name,)
        for name in names:
            losses[name] = {k: v for k, v in LOSS_SPACES.get(name, {}).items() if k not in fixed}
    for key, dist in [*params.items(), *(kv for s in losses.values() for kv in s.items())]:
        _check_distribution(key, dist)
    return SearchSpace(params, losses)


def _check_distribution(key: str, dist: Any) -> None:
    if not isinstance(dist, tuple) or not dist or dist[0] not in KINDS:
        raise ValueError(f"search space {key}: expected (kind, ...) with kind one of {KINDS}, got {dist!r}")
    kind = dist[0]
    if kind == "choice":
        if len(dist) != 2 or not isinstance(dist[1], tuple) or not dist[1]:
            raise ValueError(f"search space {key}: expected ('choice', (values...)), got {dist!r}")
        if key == "loss" and any(c not in LOSSES for c in dist[1]):
            raise ValueError(f"search space loss: unknown loss in {dist[1]}; valid: {', '.join(LOSSES)}")
        return
    ok = len(dist) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in dist[1:])
    if not ok or not dist[1] < dist[2] or (kind.startswith("log") and dist[1] <= 0):
        raise ValueError(f"search space {key}: expected ({kind!r}, low, high) with low < high, got {dist!r}")
    if kind.endswith("int") and not all(isinstance(x, int) for x in dist[1:]):
        raise ValueError(f"search space {key}: integer bounds expected, got {dist!r}")


def _label(value: Any) -> Any:
    """How a choice is shown to Optuna (and in tables): scalars as they are, a tuple as its TOML
    literal, e.g. ``"[128, 64]"``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(list(value))


def _suggest(trial: optuna.Trial, key: str, dist: tuple[Any, ...]) -> Any:
    kind = dist[0]
    if kind in ("float", "log"):
        return trial.suggest_float(key, dist[1], dist[2], log=kind == "log")
    if kind in ("int", "log-int"):
        return trial.suggest_int(key, dist[1], dist[2], log=kind == "log-int")
    labels = {_label(c): c for c in dist[1]}
    return labels[trial.suggest_categorical(key, list(labels))]


def trial_overrides(trial: optuna.Trial, space: SearchSpace) -> list[Override]:
    """The values ``trial`` suggests, as typed ``(dotted key, value)`` overrides of the study's base
    (:meth:`RunConfig.with_overrides`): the space's keys in order (the loss among them), then the options
    of the trial's loss."""
    suggested = {key: _suggest(trial, key, dist) for key, dist in space.params.items()}
    loss = suggested["loss"] if "loss" in space.params else next(iter(space.losses), "")
    suggested.update({key: _suggest(trial, key, dist) for key, dist in space.losses.get(loss, {}).items()})
    return list(suggested.items())


# ------------------------------------------------------------------------------------------ sampler
class TrialSeededTPE(optuna.samplers.BaseSampler):
    """Optuna's TPE sampler whose random draws for trial ``n`` are seeded by ``(seed, n)``.

    One seeded ``TPESampler`` would give two processes sharing a study the same random start-up
    configurations; the storage numbers trials uniquely, so seeding by the trial number keeps a study
    repeatable (one process: the same trials again) and parallel workers apart. TPE keeps no state
    between trials besides its random generator (it reads the history from the study), so a TPE
    sampler per trial samples as one would.
    """

    def __init__(self, seed: int, **tpe_options: Any) -> None:
        self.seed = seed
        self._options = {"constant_liar": True, **tpe_options}
        self._samplers: dict[int, optuna.samplers.TPESampler] = {}

    def _tpe(self, trial: optuna.trial.FrozenTrial) -> optuna.samplers.TPESampler:
        sampler = self._samplers.get(trial.number)
        if sampler is None:
            seed = int(np.random.SeedSequence([self.seed, trial.number]).generate_state(1)[0])
            sampler = self._samplers[trial.number] = optuna.samplers.TPESampler(seed=seed, **self._options)
        return sampler

    def infer_relative_search_space(self, study, trial):
        return self._tpe(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._tpe(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._tpe(trial).sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self._tpe(trial).before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self._tpe(trial).after_trial(study, trial, state, values)
        self._samplers.pop(trial.number, None)

    def reseed_rng(self) -> None:  # the draws are seeded per trial: nothing to reseed
        pass


# ------------------------------------------------------------------------------------------ studies
def mask_url(url: str) -> str:
    """A database URL without its password (for messages and ``tune.json``)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def storage_url(out: str | Path, storage: str | None) -> str:
    """``storage``, or the SQLite file ``OUT/study.db``."""
    if storage is None:
        return f"sqlite:///{(Path(out) / STUDY_FILE).absolute()}"
    if not isinstance(storage, str) or "://" not in storage:
        raise ValueError(
            f"--storage must be a database URL Optuna accepts (sqlite:///FILE, postgresql://..., "
            f"mysql://...), got {storage!r}"
        )
    return storage


def claim_study_dir(
    out: str | Path, *, overwrite: bool, storage: str | None, how: str = "give --overwrite"
) -> bool:
    """Check ``out`` for a study (:func:`ctxrank._io.claim_output_dir`): new, empty, a study's (which
    is continued), or with ``overwrite`` one of other files, whose ``study.db`` (the default storage) is
    then removed: replaced, never extended. Returns whether ``out`` holds a study.

    Raises:
        ValueError: a file, or a directory of other files without ``overwrite``.
    """
    out = Path(out)
    ours = claim_output_dir(out, overwrite=overwrite, what="tuning study", ours=STUDY_MARKS, how=how)
    if not ours and storage is None:
        (out / STUDY_FILE).unlink(missing_ok=True)  # not ctxrank's (refused above without overwrite)
    return ours


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    """An exclusive lock on ``OUT/.study.lock`` while a study is opened (two processes creating one
    SQLite schema at once would collide); without ``fcntl`` the file is made but not locked."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / LOCK_NAME).open("a") as fh:
        if fcntl is None:  # pragma: no cover - Windows
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def make_pruner(prune: bool) -> optuna.pruners.BasePruner:
    """``MedianPruner`` (5 start-up trials, 2 warm-up epochs) when ``prune``, else none."""
    if prune:
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2)
    return optuna.pruners.NopPruner()


def check_storage(url: str) -> None:
    """Refuse an SQLite file at ``url`` that holds tables Optuna did not create, before Optuna adds its
    own (:func:`ctxrank._io.check_own_database`); other databases are Optuna's to check."""
    from optuna.storages._rdb.models import BaseModel

    check_own_database(
        url, owner="Optuna", tables=BaseModel.metadata.tables, where=f"storage {mask_url(url)}"
    )


def rdb_storage(url: str) -> optuna.storages.RDBStorage:
    """The storage at ``url``: SQLite waits up to 2 minutes for a lock held by another process; a trial
    whose process was killed is failed after 2 minutes without a heartbeat, and run again once.

    Raises:
        ValueError: a bad URL, a missing database driver, an unreachable server, an SQLite database
            that holds tables not Optuna's (:func:`ctxrank._io.check_own_database`).
    """
    check_storage(url)
    engine: dict[str, Any] = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # the heartbeat
        try:
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine,
                heartbeat_interval=30,
                grace_period=120,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1),
            )
        except Exception as exc:
            raise ValueError(f"storage {mask_url(url)}: {type(exc).__name__}: {exc}") from None


def open_study(
    out: str | Path, *, storage: str | None, study_name: str, seed: int, prune: bool
) -> optuna.Study:
    """Create the study ``study_name`` in ``storage`` (default ``OUT/study.db``), or load it."""
    url = storage_url(out, storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with _lock(Path(out)):
        return optuna.create_study(
            storage=rdb_storage(url),
            study_name=study_name,
            sampler=TrialSeededTPE(seed),
            pruner=make_pruner(prune),
            direction="maximize",
            load_if_exists=True,
        )


def _check_setup(study: optuna.Study, setup: dict[str, Any], where: str) -> None:
    """Record what the study searches; refuse to continue a study set up otherwise."""
    old = study.user_attrs.get("ctxrank")
    if old is None:
        study.set_user_attr("ctxrank", setup)
        return
    differ = [k for k in setup if dumps(old.get(k), sort_keys=True) != dumps(setup[k], sort_keys=True)]
    if differ:
        raise ValueError(
            f"study {study.study_name!r} in {where} was started with another {', '.join(differ)} "
            f"(recorded: {dumps({k: old.get(k) for k in differ}, indent=None)}); continue it with the same "
            "options, or give another --out / --study-name"
        )


def finished_trials(study: optuna.Study) -> int:
    """Trials that count against a budget: complete, pruned, or failed by a non-finite loss (a trial
    of a killed process is not: it is run again)."""
    S = optuna.trial.TrialState
    return sum(
        1
        for t in study.get_trials(deepcopy=False)
        if t.state in (S.COMPLETE, S.PRUNED) or (t.state == S.FAIL and "error" in t.user_attrs)
    )


# ------------------------------------------------------------------------------------------ tune
@dataclass
class TuneResult:
    """A finished :func:`tune`: the study, the best run config (None when no trial completed)."""

    study: optuna.Study
    best: RunConfig | None
    space: SearchSpace
    ran: int  # trials run by this call
    seconds: float
    files: list[str] = field(default_factory=list)
    table: str = ""  # the Markdown table of the trials


@dataclass
class _Job:
    """What every trial of one :func:`tune` call shares."""

    base: StudyBase
    space: SearchSpace
    train: RankingData
    valid: RankingData
    prune: bool
    initials: InitialRankers
    log_objective: LogObjective | None = None  # the study's objective when ``valid`` is a log
    order_warned: bool = False  # the training data's row-order warning: the same for every trial

    def initial_kw(self, config: RunConfig) -> dict[str, Any]:
        """The initial ranker of a re-ranking trial, shared by every trial that asks for the same one
        (fitted once: ``InitialRankers``)."""
        return {"initial": self.initials.for_config(config)} if config.rerank.initial else {}

    def config_for(self, trial: optuna.Trial) -> RunConfig:
        """The run config ``trial`` suggests (recorded in the trial's ``config`` attribute)."""
        config = self.base.config.with_overrides(trial_overrides(trial, self.space))
        trial.set_user_attr("config", _stored(config.to_dict()))
        return config

    def score(
        self, config: RunConfig, should_prune: Callable[[int, float], bool] | None
    ) -> tuple[float, dict[str, Any]]:
        """Train ``config``; its validation metric and summary. ``should_prune(epoch, value)`` is asked
        after every epoch with a finite validation metric (None: never pruned).

        Raises:
            optuna.TrialPruned: ``should_prune`` said so.
            NonFiniteLossError: the loss became NaN or infinite.
        """

        def report(record: dict[str, Any]) -> None:
            epoch, value = record["epoch"], record[f"valid_{config.train.metric}"]
            if np.isfinite(value) and should_prune is not None and should_prune(epoch, value):
                raise optuna.TrialPruned(f"valid {config.train.metric} {value:.4f} at epoch {epoch}")

        with warnings.catch_warnings():
            if self.order_warned:  # shown by the first trial, not repeated by each of the others
                warnings.filterwarnings("ignore", message=ROW_ORDER_WARNING, category=UserWarning)
            # recorded in the summary's "warnings" and shown on the trial's line, not as loose lines
            warnings.simplefilter("ignore", TrainingWarning)
            result = run_training(
                config,
                self.train,
                self.valid,
                None,  # the test split never enters a trial
                progress=False,
                on_epoch=report if self.prune else None,
                **self.initial_kw(config),
            )
        self.order_warned = True
        stored = result.summary.to_json()
        summary = {k: stored[k] for k in SUMMARY_KEYS if k in stored}
        return self._value(result, config), summary

    def _value(self, result: Any, config: RunConfig) -> float:
        """The trial's objective: ``train.metric`` of the validation labels; on a log the study's
        :class:`LogObjective` (its given propensities, or the trial's own fit's estimate with the
        propensities its position tower learned)."""
        objective = self.log_objective
        if objective is None or objective.naive:
            return validation_metric(result.predictor, self.valid, config)
        if objective.propensities is not None:
            return objective.value(self.valid, result.predictor.predict(self.valid))
        return float(result.summary.best_valid_metric)

    def objective(self, trial: optuna.Trial) -> float:
        """Optuna's objective in this process (``study.optimize``)."""

        def should_prune(epoch: int, value: float) -> bool:
            trial.report(value, epoch)
            return trial.should_prune()

        try:
            value, summary = self.score(self.config_for(trial), should_prune)
        except NonFiniteLossError as exc:
            trial.set_user_attr("error", str(exc))
            raise
        trial.set_user_attr("summary", summary)
        return value


def tune(
    base: Mapping[str, Any] | StudyBase,
    train: RankingData,
    valid: RankingData,
    *,
    out: str | Path,
    trials: int,
    total: bool = False,
    storage: str | None = None,
    study_name: str | None = None,
    timeout: float | None = None,
    prune: bool = True,
    seed: int | None = None,
    describe: str = "",
    log: Callable[[str], None] | None = None,
    initials: InitialRankers | None = None,
    executor: Any = None,
    overwrite: bool = False,
    on_trial: Callable[[optuna.trial.FrozenTrial], None] | None = None,
) -> TuneResult:
    """Search configurations of the run config ``base`` (a dict as TOML gives it, or a
    :class:`StudyBase` validated before) on ``train`` / ``valid``; write the study's report to ``out``
    (:func:`write_report`).

    Args:
        trials: trials this call runs; with ``total=True``, the study's budget instead: only the
            trials still missing are run (an experiment resuming a study).
        storage, study_name: a database URL (default ``sqlite:///OUT/study.db``) and the study's name
            (default: the model's name). An existing study is continued.
        timeout: stop starting trials after this many seconds.
        prune: prune neural trials on their per-epoch validation metric (``MedianPruner``).
        seed: the sampler's seed (default: the base ``train.seed``, which every trial trains with).
        describe: what the data are, for the report (e.g. ``"mq2008 fold 1"``).
        initials: the initial rankers fitted on ``train`` / ``valid`` so far (an experiment's run shares
            them with its re-rankers); None: new ones, shared by this study's trials.
        executor: where the trials run: None, this process (``study.optimize``); an object with
            ``run_trials(job, study, trials=, timeout=, callback=, storage=)``, e.g.
            :class:`ctxrank.experiments.executors.RayExecutor` (each trial a Ray task).
        overwrite: write into an ``out`` of other files (:func:`claim_study_dir`).
        on_trial: called with each trial this call runs once it has finished (complete, pruned or
            failed), after its progress line (``ctxrank tune --track`` logs it to a tracker).
    """
    claim_study_dir(out, overwrite=overwrite, storage=storage, how="pass overwrite=True")
    say = log or (lambda _: None)
    base = StudyBase.of(base)
    config = base.config
    space = search_space(base)
    out = Path(out)
    name = study_name or config.model
    sampler_seed = config.train.seed if seed is None else seed
    # None: labelled validation; propensities estimated from the training log score every trial
    objective = validation_objective(with_estimated_propensities(config, train)[0].train, train, valid)
    if objective is not None and objective.learned and isinstance(get_model(config.model), Baseline):
        raise ValueError(
            f"tune {config.model} on a click log with train.debias = {config.train.debias!r}: LightGBM's "
            "position debiasing learns no propensities to score a trial by (only the clicks' metric, which "
            "rewards the logging order); give them: train.debias = 'ips' with train.propensity or "
            "train.propensity_eta"
        )
    if objective is not None and objective.learned and config.ensemble > 1:
        raise ValueError(
            f"tune on a click log with train.debias = {config.train.debias!r} scores a trial by its position "
            f"tower's propensities, and a seed ensemble (ensemble = {config.ensemble}) has one per member: "
            "tune with ensemble = 1, or give the propensities (train.debias = 'ips')"
        )
    study = open_study(out, storage=storage, study_name=name, seed=sampler_seed, prune=prune)
    setup = {
        "model": config.model,
        "metric": config.train.metric,
        "sampler_seed": sampler_seed,
        "base": _stored(base.values),
        "space": space.to_dict(),
        "data": {"train": fingerprint(train), "valid": fingerprint(valid), "describe": describe},
    }
    validation = None if objective is None else objective.describe()
    if validation is not None:  # a validation log: what every trial's value estimates
        setup["validation"] = validation
    _check_setup(study, setup, str(out))
    n = max(0, trials - finished_trials(study)) if total else trials
    if not space.keys():  # every trial would train the same configuration
        n = min(n, max(0, 1 - finished_trials(study)))
        say(f"tune {config.model}: nothing to search (the base configuration fixes every key); one trial")
    initials = InitialRankers(train, valid) if initials is None else initials
    job = _Job(base, space, train, valid, prune, initials, objective)
    t0 = time.perf_counter()
    before = len(study.get_trials(deepcopy=False))
    shown = config.train.metric if objective is None else objective.name  # what a trial's value measures
    progress = _progress(say, shown, on_trial)
    if n and executor is not None:
        executor.run_trials(
            job, study, trials=n, timeout=timeout, callback=progress, storage=storage_url(out, storage)
        )
    elif n:
        study.optimize(
            job.objective, n_trials=n, timeout=timeout, catch=(NonFiniteLossError,), callbacks=[progress]
        )
    ran = len(study.get_trials(deepcopy=False)) - before
    result = TuneResult(study, None, space, ran, time.perf_counter() - t0)
    write_report(
        result,
        out,
        metric=config.train.metric,
        describe=describe,
        storage=storage,
        validation=validation,
        validation_metric=None if objective is None else objective.name,
    )
    return result


def _progress(
    say: Callable[[str], None], metric: str, on_trial: Callable[[optuna.trial.FrozenTrial], None] | None
) -> Callable[[optuna.Study, Any], None]:
    def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        state = trial.state.name.lower()
        value = f"valid {metric} {trial.value:.4f}" if trial.value is not None else state
        if trial.state == optuna.trial.TrialState.PRUNED and trial.intermediate_values:
            step = max(trial.intermediate_values)
            value = f"pruned at epoch {step} (valid {metric} {trial.intermediate_values[step]:.4f})"
        params = ", ".join(f"{k}={_shown(v)}" for k, v in trial.params.items())
        say(f"trial {trial.number}: {value}; {params}")
        for warning in FitSummary.from_json(trial.user_attrs.get("summary", {})).warnings:
            say(f"  trial {trial.number} warning: {warning}")
        if on_trial is not None:
            on_trial(trial)

    return callback


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# ------------------------------------------------------------------------------------------ report
def _rows(study: optuna.Study) -> tuple[list[str], list[list[Any]]]:
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    params = sorted({k for t in trials for k in t.params})
    headers = ["trial", "state", "value", "epochs", "seconds", *params]
    rows = []
    for t in trials:
        epochs_run = FitSummary.from_json(t.user_attrs.get("summary", {})).epochs_run
        epochs = max(t.intermediate_values, default="") if epochs_run is None else epochs_run
        seconds = t.duration.total_seconds() if t.duration is not None else ""
        rows.append(
            [t.number, t.state.name.lower(), t.value if t.value is not None else "", epochs, seconds]
            + [t.params.get(k, "") for k in params]
        )
    return headers, rows


def trials_markdown(study: optuna.Study, metric: str) -> str:
    """The trials as a Markdown table (value = the validation metric; the best trial starred)."""
    headers, rows = _rows(study)
    best = _best(study)
    headers = [f"valid {metric}" if h == "value" else h for h in headers]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        mark = " *" if best is not None and r[0] == best.number else ""
        lines.append("| " + " | ".join([f"{r[0]}{mark}", *(_shown(v) for v in r[1:])]) + " |")
    return "\n".join(lines) + "\n"


def _best(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    try:
        return study.best_trial
    except ValueError:  # no complete trial yet
        return None


def write_report(
    result: TuneResult,
    out: Path,
    *,
    metric: str,
    describe: str = "",
    storage: str | None = None,
    validation: str | None = None,
    validation_metric: str | None = None,
) -> None:
    """``best.toml``, ``trials.csv``, the plots and ``tune.json`` in ``out``; fills ``result``.
    ``validation``: what the trials' value estimates on a validation log (``tune.json["validation"]``
    and ``best.toml``'s header; None on labelled data: ``metric`` of the labels); ``validation_metric``
    its name in a few words (``LogObjective.name``), which labels the values in the table, the header
    and the plots instead of ``metric``."""
    study = result.study
    shown = metric if validation_metric is None else validation_metric
    headers, rows = _rows(study)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    text = buf.getvalue()
    atomic_write(out / "trials.csv", lambda tmp: tmp.write_text(text))
    result.table = trials_markdown(study, shown)
    files = ["trials.csv"]
    best = _best(study)
    if best is not None:  # read back from the storage: the best trial may be another process's
        result.best = RunConfig.from_saved(best.user_attrs["config"])
        toml = _best_toml(study, best, shown, describe, validation)
        atomic_write(out / "best.toml", lambda tmp: tmp.write_text(toml))
        files.append("best.toml")
    files += _plots(study, out, shown, describe)
    summary = {
        "study": study.study_name,
        "storage": mask_url(storage_url(out, storage)),
        "metric": metric,
        "direction": "maximize",
        "data": describe,
        "trials": _counts(study),
        "best": None
        if best is None
        else {
            "trial": best.number,
            "value": best.value,
            "params": best.params,
            "config": best.user_attrs["config"],
        },
        "space": result.space.to_dict(),
        "seconds_this_run": result.seconds,
        "trials_this_run": result.ran,
    }
    if validation is not None:
        summary["validation"] = validation
    write_json(out / "tune.json", summary)
    result.files = [*files, "tune.json"]


def _counts(study: optuna.Study) -> dict[str, int]:
    return dict(collections.Counter(t.state.name.lower() for t in study.get_trials(deepcopy=False)))


def _best_toml(
    study: optuna.Study, best: optuna.trial.FrozenTrial, metric: str, describe: str, validation: str | None
) -> str:
    n = sum(1 for t in study.get_trials(deepcopy=False) if t.state.is_finished())
    on = f" on {describe}" if describe else ""
    header = (
        f"# The best configuration of study {study.study_name!r} (ctxrank tune): trial {best.number} of {n}, "
        f"valid {metric} {best.value:.4f}{on}.\n"
        + (f"# Validation: {validation}.\n" if validation is not None else "")
        + "# Train it: ctxrank train --config best.toml ... (or use it as an experiment's [models.NAME])\n"
    )
    return header + to_toml(_without_empty_tables(best.user_attrs["config"]))


def _without_empty_tables(d: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            v = _without_empty_tables(v)
            if not v:
                continue
        out[k] = v
    return out


def _plots(study: optuna.Study, out: Path, metric: str, describe: str) -> list[str]:
    """``optimization_history.png`` and ``param_importances.png`` (Optuna's matplotlib plots, titled
    and labelled); the importances need two complete trials, a parameter that varied and a metric
    that did."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    from optuna.visualization import matplotlib as vis

    complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        return []
    what = f"{complete[0].user_attrs['config']['model']}" + (f" on {describe}" if describe else "")
    written = []
    # Optuna's plots switch matplotlib to its ggplot style: keep that inside these two figures
    with warnings.catch_warnings(), matplotlib.rc_context():
        warnings.simplefilter("ignore")  # Optuna's ExperimentalWarning for the matplotlib plots
        ax = vis.plot_optimization_history(study, target_name=f"valid {metric}")
        _titled(
            ax, f"Tuning {what}\nvalidation {metric} of each complete trial (dots) and the best so far (line)"
        )
        ax.set_xlabel("trial number (in the order the trials started)")
        ax.set_ylabel(f"validation {metric} (higher is better)")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        _save(plt, ax.figure, out / "optimization_history.png")
        written.append("optimization_history.png")
        varied = [k for k in complete[0].params if len({_label(t.params.get(k)) for t in complete}) > 1]
        if len(complete) >= 2 and varied and len({t.value for t in complete}) > 1:
            evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)  # the same plot again
            ax = vis.plot_param_importances(study, evaluator=evaluator, target_name=f"valid {metric}")
            _titled(
                ax,
                f"Tuning {what}: which hyperparameters mattered\n"
                f"fANOVA importance over {len(complete)} complete trials (the bars sum to 1)",
            )
            ax.set_xlabel(f"importance: share of the variance of validation {metric} it explains")
            ax.set_ylabel("hyperparameter (run-config key)")
            _save(plt, ax.figure, out / "param_importances.png")
            written.append("param_importances.png")
    return written


def _titled(ax: Any, title: str) -> None:
    """``title`` on the left, replacing Optuna's (which it sets centred or on the left)."""
    ax.set_title("", loc="center")
    ax.set_title(title, loc="left", fontsize=11)


def _save(plt: Any, fig: Any, path: Path) -> None:
    fig.set_size_inches(9, 5.5)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
