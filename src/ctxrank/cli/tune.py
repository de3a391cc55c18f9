"""``ctxrank tune``: search a model's hyperparameters on the validation split with Optuna
(:mod:`ctxrank.tune`), then write the best configuration, the table of trials and plots of the search.

The training run of every trial is described as ``ctxrank train`` describes one (a
:class:`~ctxrank.training.request.TrainRequest`: the data source, a config file, ``--set`` and the
run-config flags), without a test split; what the search does is :class:`SearchOptions`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ctxrank._checks import check_int
from ctxrank._declare import flag_of, flatten
from ctxrank.cli._options import (
    add_declared,
    add_executor_options,
    add_progress,
    add_track,
    note,
    out,
    positive_int,
)
from ctxrank.config import RunConfig, apply_overrides, load_toml
from ctxrank.data.sources import DataSource
from ctxrank.experiments.executors import make_executor
from ctxrank.experiments.spec import TuneSpec
from ctxrank.tracking import RunLog, TrackedRun, Tracking, flat_params
from ctxrank.training.distributed import resolve_device
from ctxrank.training.memory import check_model_size
from ctxrank.training.request import TrainRequest


@dataclass(frozen=True)
class SearchOptions:
    """How the search runs. ``trials``: trials this process runs (several processes may share one
    study; None: the ``--config`` file's ``[tune] trials``, else 20); ``storage``: a database URL (None:
    ``OUT/study.db``); ``study_name`` None: the model's name; ``timeout``: seconds after which no new
    trial starts (None: no limit); ``prune``: stop unpromising trials early on their per-epoch
    validation metric (None: the file's ``[tune] prune``, else True); ``executor`` ``"ray"``: each
    trial is a Ray task on the cluster at ``address`` (``max_retries``: of a trial whose worker died),
    as many at a time as the cluster's CPUs hold ``train.threads`` each."""

    trials: int | None = None
    storage: str | None = None
    study_name: str | None = None
    timeout: float | None = None
    prune: bool | None = None
    executor: str = "local"
    address: str | None = None
    max_retries: int = 2

    def __post_init__(self) -> None:
        check_int("--trials", self.trials, allow_none=True)
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ValueError(f"--timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.study_name is not None and not self.study_name.strip():
            raise ValueError("--study-name must not be empty")

        make_executor(self.executor, address=self.address, max_retries=self.max_retries)  # checks them
        if self.storage is not None and "://" not in self.storage:
            raise ValueError(
                "--storage must be a database URL Optuna accepts (sqlite:///FILE, postgresql://USER@HOST/DB, "
                f"mysql://...), got {self.storage!r}"
            )


def tune(
    request: TrainRequest,
    search: SearchOptions,
    *,
    out_dir: str,
    progress: bool = True,
    overwrite: bool = False,
    tracking: Tracking | None = None,
) -> int:
    """Tune the ``request``'s model on its training / validation data; write the results to ``out_dir`` (new,
    empty or a study's, which is continued; with ``overwrite`` a directory of other files:
    :func:`ctxrank.tune.claim_study_dir`). ``tracking``: log the study as one run and each trial this
    call runs as a nested run (:mod:`ctxrank.tracking`)."""
    try:
        from ctxrank import tune as tuning
    except ImportError as exc:
        raise ValueError(str(exc)) from None

    where = Path(out_dir)
    study_base, search = _checked_study(tuning, request, search, where, overwrite, tracking)
    config = study_base.config
    td = request.data.load_training(config.train.seed, test=False)  # the test split is never read
    train, valid, what = td.train, td.valid, td.what
    space = tuning.search_space(study_base)
    fixed = sorted(k for k in tuning.flat_keys(study_base.values) if k != "model")
    _announce(config, space, search, td, fixed)
    executor = make_executor(search.executor, address=search.address, max_retries=search.max_retries)
    tracked = _tracked_study(tracking, request, search, study_base.values, space, where, config)
    log = RunLog(tracked) if tracked is not None else None
    with tracked if tracked is not None else contextlib.nullcontext():
        result = tuning.tune(
            study_base,
            train,
            valid,
            out=where,
            trials=search.trials,
            storage=search.storage,
            study_name=search.study_name,
            timeout=search.timeout,
            prune=search.prune,
            describe=what,
            log=out if progress else None,
            executor=executor,
            overwrite=overwrite,
            on_trial=None if log is None else lambda trial: log.guarded(_log_trial, log.run, trial, config),
        )
        if log is not None:
            best = result.study.best_trial if result.best is not None else None
            if best is not None:
                log.log({f"best_valid_{config.train.metric}": best.value}, best.number)
            for name in result.files:
                log.artifact(where / name, "study")
    _report(result, where, request, config.train.metric)
    return 0


def _checked_study(
    tuning: Any,
    request: TrainRequest,
    search: SearchOptions,
    where: Path,
    overwrite: bool,
    tracking: Tracking | None,
) -> tuple[Any, SearchOptions]:
    """Every check before any data is read: the options, the base configuration (validated once: the
    study's base), the search with the file's ``[tune]``, the model's size, the tracker, the output
    directory and the storage."""
    if request.data.test_file is not None:
        raise ValueError("tune reads the training and validation splits only; --test does not apply")
    base, block = _base_config(request)
    search = _with_file_search(search, block, request.config)
    study_base = tuning.StudyBase.of(base)
    config = study_base.config
    check_model_size(config, 1, device=resolve_device(config.train.device))  # one feature: a lower bound
    if tracking is not None:
        tracking.check()  # the package and the place
    tuning.claim_study_dir(where, overwrite=overwrite, storage=search.storage)
    tuning.check_storage(tuning.storage_url(where, search.storage))
    if request.data.train_shards is not None:
        raise ValueError(
            "--train-shards (training data streamed from disk) is for ctxrank train; tune on a sample of "
            "the queries that fits in memory (--train FILE)"
        )
    return study_base, search


def _announce(config: Any, space: Any, search: SearchOptions, td: Any, fixed: list[str]) -> None:
    """What the study searches, on which data (``td``: its training data), and the keys the
    configuration ``fixed``."""
    out(
        f"tune {config.model} on {td.what}: train {td.train.n_queries} queries, valid {td.valid.n_queries} "
        f"(the test split is not read); valid {config.train.metric}, {search.trials} trials"
        + (f" or {search.timeout:g} s" if search.timeout else "")
    )
    out(f"searching {', '.join(space.keys()) or 'nothing (every key is fixed)'}")
    if fixed:
        out(f"fixed by the configuration: {', '.join(fixed)}")


def _tracked_study(
    tracking: Tracking | None,
    request: TrainRequest,
    search: SearchOptions,
    base: dict[str, Any],
    space: Any,
    where: Path,
    config: Any,
) -> TrackedRun | None:
    """The tracker's run of the study, its parameters logged: the base configuration's fixed keys
    (dotted), each searched key's distribution (``space.train.lr``), the data options given and the
    number of trials."""
    if tracking is None:
        return None
    name = search.study_name or config.model
    tags = {"ctxrank.command": "tune", "ctxrank.out": str(where.absolute()), "ctxrank.study": name}
    searched = {f"space.{k}": list(v) for k, v in space.params.items()}
    for loss, params in space.losses.items():
        searched.update({f"space.{loss}.{k}": list(v) for k, v in params.items()})
    data = {f"data.{k}": v for k, v in flatten(request.data).items() if v not in (None, False, ())}
    params = {**flat_params(base), **searched, **data, "trials": search.trials}
    return tracking.start(f"tune-{name}", tags=tags, params=params)


def _log_trial(study_run: TrackedRun, trial: Any, config: Any) -> None:
    """A finished trial: a nested run with its parameters and validation metric (Optuna's value), and
    that value in the study's run at step = the trial's number."""
    metric = f"valid_{config.train.metric}"
    state = trial.state.name.lower()
    with study_run.child(f"trial-{trial.number}") as child:
        child.log_params({**trial.params, "trial": trial.number, "state": state})
        if trial.value is not None:
            child.log_metrics({metric: trial.value})
        if state == "fail":
            child.end("FAILED")
    if trial.value is not None:
        study_run.log_metrics({f"trial_{metric}": trial.value}, trial.number)


def _base_config(request: TrainRequest) -> tuple[dict[str, Any], Any]:
    """The run config as a dict (the ``--config`` file, then ``--set`` and the flags), not validated,
    and the file's ``[tune]`` block (None without one)."""
    overrides = request.config_overrides()
    d = apply_overrides(load_toml(request.config) if request.config is not None else {}, overrides)
    block = d.pop("tune", None)
    if "model" not in d:
        raise ValueError("give --model NAME (or a --config file that names its model)")
    return d, block


#: the keys of a run config's ``[tune]`` block (the command line's --trials and --no-prune win)
FILE_SEARCH_KEYS = ("trials", "prune")


def _with_file_search(search: SearchOptions, block: Any, config: str | None) -> SearchOptions:
    """``search`` with what the command line left unset taken from the ``--config`` file's ``[tune]``
    block (``trials``, ``prune``; checked as an experiment's ``[tune]``), else the defaults (20 trials,
    pruning on)."""
    block = {} if block is None else block
    where = f"[tune] of {config}" if config is not None else "[tune]"
    if not isinstance(block, dict):
        raise ValueError(f"{where} must be a table ({', '.join(FILE_SEARCH_KEYS)})")
    unknown = sorted(set(block) - set(FILE_SEARCH_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; valid keys: {list(FILE_SEARCH_KEYS)}")
    try:
        file = TuneSpec.from_dict(block)
    except ValueError as err:
        raise ValueError(f"{where}: {str(err).removeprefix('[tune] ')}") from None
    return replace(
        search,
        trials=file.trials if search.trials is None else search.trials,
        prune=file.prune if search.prune is None else search.prune,
    )


def _report(result: Any, where: Path, request: TrainRequest, metric: str) -> None:
    study = result.study
    n = len(study.get_trials(deepcopy=False))
    out()
    out(result.table.rstrip("\n"))
    out()
    if result.best is None:
        note(f"no trial of study {study.study_name!r} completed yet: no best configuration")
    else:
        best = study.best_trial
        out(
            f"best: trial {best.number} of {n}, valid {metric} {best.value:.4f}; "
            f"its configuration: {where / 'best.toml'}"
        )
    out(f"wrote {where}/" + ", ".join(result.files) + f" ({result.ran} trials in {result.seconds:.1f} s)")
    if result.best is not None:
        out("train it: " + " ".join(_train_command(request, where)))


def _train_command(request: TrainRequest, where: Path) -> list[str]:
    """The ``ctxrank train`` command that trains the best configuration on the same data: the data
    options as given (files, split, columns, reading options; paths absolute), ``best.toml`` for every
    run-config key (model, seed, ``--set`` values)."""
    config_free = replace(request, given=(), overrides=(), config=str(where / "best.toml"))
    argv = config_free.command_line("DIR")[:-2]  # without its --out
    if request.data.dataset is None and request.data.data_file is None:
        argv += [flag_of(DataSource, "test_file"), "TEST_FILE"]
    return [*argv, "--out", "DIR"]


# ---------------------------------------------------------------------------------------- parser
TUNE_DESCRIPTION = (
    "Search a model's hyperparameters with Optuna (TPE sampler, seeded; unpromising neural trials pruned "
    "on their per-epoch validation metric) on a registered dataset fold, on --train/--valid files or on "
    "one --data file split at random by query. Each trial is a training run as `ctxrank train` does it, on "
    "the training split with early stopping on the validation split; it is scored by the validation "
    "train.metric. The test split is never read. The search space of each model is declared next to its "
    "config (docs/tuning.md); keys set with --config or --set are fixed. The study is kept in DIR/study.db "
    "(or --storage URL): running the command again with the same --out continues it, and several "
    "processes or machines may work on one study at once. Writes DIR/best.toml (the best configuration: "
    "`ctxrank train --config DIR/best.toml` trains it), trials.csv, optimization_history.png, "
    "param_importances.png and tune.json. Example: `ctxrank tune --model qilcm --dataset mq2008 --fold 1 "
    "--trials 50 --out runs/tune-qilcm`."
)


def add_tune_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "tune",
        parents=[common],
        help="search a model's hyperparameters (Optuna)",
        description=TUNE_DESCRIPTION,
    )
    help = {
        "model": "model name (a neural model or a baseline; see `ctxrank train --help`)",
        "loss": "fix the ranking loss of a neural model (default: searched where declared)",
        "config": "TOML run config: the base of every trial (its keys fixed)",
        "seed": "train.seed of every trial, and the sampler's seed (default 0)",
        "initial": "re-rank this initial ranker's top-k lists",
        "top_k": "items re-ranked per query (rerank.top_k)",
        "crossfit": "out-of-fold initial scores with K folds",
    }
    fill = {
        "defaults": "not used by tune",
        "parts": "train/valid (its test part is not read)",
        "threads": "train.threads of every trial",
        "set": "fix a config value, e.g. --set train.max_epochs=20 (repeatable)",
    }
    add_declared(p, RunConfig, help=help, fill=fill)
    add_declared(p, TrainRequest, help=help, fill=fill, skip=("test_file",))  # tune never reads a test split
    p.add_argument(
        "--trials",
        type=positive_int,
        metavar="N",
        help="trials to run here (default: the --config file's [tune] trials, else 20)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (the same DIR continues)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a --out DIR holding other files: files of the names tune writes (study.db, "
        "trials.csv, best.toml, ...) are replaced, the others kept",
    )
    p.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna storage URL shared by several processes or machines, e.g. postgresql://user@host/db "
        "(default: sqlite:///DIR/study.db)",
    )
    p.add_argument("--study-name", metavar="NAME", help="study name in the storage (default: the model name)")
    p.add_argument(
        "--timeout", type=_seconds, metavar="SECONDS", help="start no trial after this many seconds"
    )
    p.add_argument(
        "--no-prune",
        action="store_true",
        help="train every trial to its end (no pruning; also: prune = false in the --config file's [tune])",
    )
    add_executor_options(p, "trial", "the trials here, one after the other", "train.threads")
    add_track(p, "the study as one run (its fixed keys, search space and each trial's value) and each "
              "trial as a nested run (its parameters and value)")  # fmt: skip
    add_progress(p)
    p.set_defaults(run=_run_tune)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _run_tune(a: argparse.Namespace) -> int:
    search = SearchOptions(
        trials=a.trials,
        storage=a.storage,
        study_name=a.study_name,
        timeout=a.timeout,
        prune=False if a.no_prune else None,
        executor=a.executor,
        address=a.address,
        max_retries=a.max_retries,
    )
    request = TrainRequest.of(a)
    return tune(
        request, search, out_dir=a.out, progress=not a.no_progress, overwrite=a.overwrite, tracking=a.track
    )
