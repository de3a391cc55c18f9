"""Where the runs of an experiment, and the trials of a tuning study, execute: beyond the default
one-process loops of the runner and of ``study.optimize``.

* ``local`` (the default): this process runs the pending runs one after the other
  (:func:`ctxrank.experiments.runner.run_experiment`).
* ``local`` with ``jobs`` N > 1 (:class:`ProcessExecutor`, ``ctxrank experiment SPEC --jobs N``): the
  pending ``(seed, fold)`` units go to N worker processes on this machine, each unit to the next free
  worker, which runs its models one after the other as the local loop does, with ``runs.threads``
  threads. Each run is computed exactly as in one process, so the stored numbers do not depend on N:
  ``--jobs`` uses the cores of a machine without changing a result (``--threads`` does: PyTorch's
  reductions split over threads round differently).
* ``ray`` (:class:`RayExecutor`, ``ctxrank experiment SPEC --executor ray [--address ADDR]``, extra
  ``ctxrank[ray]``): every pending ``(model, seed, fold)`` run is a Ray task asking for ``runs.threads``
  CPUs, and one GPU when its ``train.device`` is ``cuda`` (or ``auto`` on a cluster with GPUs). The
  driver (the ``ctxrank experiment`` process) reads each run's data once and puts it in Ray's object
  store; when re-rankers share the run's LambdaMART initial ranker, one task per ``(seed, fold)``
  fits it and the re-rankers' tasks take it as an argument, as the local loop shares it. Results come
  back to the driver, which alone writes the run store: the workers need no shared filesystem and no
  copy of the data, only ctxrank installed. A task whose worker process or node dies is retried
  (``max_retries``); an exception raised by a run (e.g. a non-finite loss) is not, since a seeded run
  would raise it again: the other runs are still collected and stored, then the failures are reported.
  The store skips finished runs, so an interrupted experiment resumes as with the local executor.
* ``ray`` for a study (:meth:`RayExecutor.run_trials`, ``ctxrank tune ... --executor ray``): the driver
  asks the Optuna study for each trial's configuration and submits it as a Ray task asking for
  ``train.threads`` CPUs, as many at a time as the cluster's CPUs hold; the training data go to the
  object store once. A worker reports each epoch's validation metric to an actor on the driver's node,
  which records it in the study and answers whether the pruner stops the trial; the driver tells the
  study each result. The storage is opened only on the driver's node (an SQLite file works), and the
  driver records heartbeats for its running trials, so a killed driver's trials are failed after the
  grace period and run again, as with ``study.optimize``.
* shards: ``--shard K/N`` (:func:`ctxrank.experiments.runner.shard_keys`) and ``--shard auto``, which
  reads a Slurm job array's task id and count (:func:`slurm_shard`).
* ``torchrun``: an experiment is refused under it (:func:`refuse_data_parallel`): every rank would run
  every run. torchrun's data parallelism is for one training run (``torchrun ... -m ctxrank train``).

The stored runs (metrics, query ids, summaries, configs) are the same whichever executor ran them;
only ``seconds`` differ (tests/experiments/test_executors.py compares the stores and reports).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxrank._allocator import limit_heap_growth
from ctxrank._checks import MAX_INT, OptionError, check_int, is_int, resolve_threads
from ctxrank._declare import NON_NEGATIVE_INT, POSITIVE_INT, RAY_ADDRESS, declared_as, option
from ctxrank.config import RunConfig
from ctxrank.experiments.provenance import code_version, run_context
from ctxrank.experiments.runner import (
    Unit,
    _anomaly_unit,
    _run_one,
    _Source,
    load_unit,
    run_device,
    run_experiment,
)
from ctxrank.experiments.spec import REFERENCE, ExperimentSpec
from ctxrank.experiments.store import RunStore
from ctxrank.training.loop import NonFiniteLossError
from ctxrank.training.rerank import InitialRanker, InitialRankers

__all__ = [
    "EXECUTORS",
    "ExecutorOptions",
    "ProcessExecutor",
    "RayExecutor",
    "make_executor",
    "refuse_data_parallel",
    "slurm_shard",
]

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class ExecutorOptions:
    """Where the runs of an experiment (the trials of a study) execute: the options of
    :func:`make_executor` and of the experiment's shards, as ``ctxrank experiment`` and ``tune`` take
    them. ``{unit}``, ``{local}``, ``{threads}`` and ``{jobs}`` in a help are the command's words."""

    shard: str | None = option(
        None,
        "--shard",
        "run only shard K of N (every N-th run from the K-th), e.g. 1/2 and 2/2 in two processes with the "
        "same --out; the report covers the runs stored so far (rebuild it with --report-only). auto: this "
        "Slurm job array task's shard (SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT)",
        metavar="K/N",
    )
    executor: str = option(
        "local",
        "--executor",
        "local (default): {local}; ray: each {unit} is a Ray task with {threads} CPUs, its result recorded "
        "by this process (needs ctxrank[ray])",
        choices=EXECUTORS,
    )
    address: str | None = declared_as(None, RAY_ADDRESS)
    max_retries: int = option(
        2,
        "--max-retries",
        "Ray: retries of a {unit} whose worker process or node died (default 2)",
        parse=NON_NEGATIVE_INT,
        metavar="N",
    )
    jobs: int = option(
        1,
        "--jobs",
        "run the (seed, fold) units in N local worker processes (default {jobs}); unlike --threads, the "
        "numbers are the same for every N",
        parse=POSITIVE_INT,
        metavar="N",
    )


def make_executor(
    name: str, *, address: str | None = None, max_retries: int = 2, jobs: int = 1
) -> RayExecutor | ProcessExecutor | None:
    """The executor ``name`` for :func:`~ctxrank.experiments.runner.run_experiment` (None = local, in
    this process; ``jobs`` > 1: local worker processes).

    Raises:
        ValueError: an unknown name, ``address`` without ``ray``, ``jobs`` with ``ray``.
    """
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; valid executors: {', '.join(EXECUTORS)}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise OptionError("{jobs} must be an integer >= 1, got {value!r}", value=jobs)
    if name == "local":
        if address is not None:
            raise OptionError("{address} names a Ray cluster: it applies to {executor} ray only")
        return ProcessExecutor(jobs) if jobs > 1 else None
    if jobs > 1:
        raise OptionError("{jobs} is for the local executor; on Ray every run is a task already")
    if not is_int(max_retries) or not 0 <= max_retries <= MAX_INT:
        raise OptionError(
            "{max_retries} must be an integer in [0, {most}], got {value!r}", most=MAX_INT, value=max_retries
        )
    return RayExecutor(address=address, max_retries=max_retries)


# ------------------------------------------------------------------------------------ torchrun
def refuse_data_parallel(command: str, environ: Mapping[str, str] = os.environ) -> None:
    """Refuse to run ``ctxrank COMMAND`` as one of several torchrun processes (``WORLD_SIZE`` > 1).

    Raises:
        ValueError: the message says what to use instead.
    """
    try:
        world = int(environ.get("WORLD_SIZE", "1"))
    except ValueError:
        world = 1
    if world <= 1:
        return
    raise ValueError(
        f"`ctxrank {command}` is running as one of {world} torchrun processes (WORLD_SIZE={world}): each "
        f"would run every run of the experiment ({world} times the work, each line {world} times), so it "
        "is refused. Start it as one process and spread its runs with `--executor ray [--address ADDR]` "
        "(a Ray cluster), or with `--shard K/N` (`--shard auto` in a Slurm job array) in processes "
        "sharing the --out directory. torchrun's data parallelism applies to one training run: "
        "`torchrun --nproc-per-node N -m ctxrank train ...`"
    )


# --------------------------------------------------------------------------------------- Slurm
def slurm_shard(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """``(K, N)`` of this Slurm job array task: task ``SLURM_ARRAY_TASK_ID`` of an array of
    ``SLURM_ARRAY_TASK_COUNT`` tasks numbered ``MIN, MIN+STEP, ..., MAX``, K counted from 1.

    Raises:
        ValueError: not in a job array, or an array whose task ids are not one range (``--array=1,5,9``).
    """
    if "SLURM_ARRAY_TASK_ID" not in environ:
        where = "a Slurm job" if "SLURM_JOB_ID" in environ else "Slurm"
        raise OptionError(
            "{shard} auto reads a Slurm job array's SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT, which "
            "are not set: this is not a job array task (outside {where}). Submit the command with "
            "`sbatch --array=1-N` (see docs/experiments.md), or give {shard:K/N}",
            where=where,
        )
    try:
        task = int(environ["SLURM_ARRAY_TASK_ID"])
        low = int(environ.get("SLURM_ARRAY_TASK_MIN", task))
        high = int(environ.get("SLURM_ARRAY_TASK_MAX", task))
        step = int(environ.get("SLURM_ARRAY_TASK_STEP", 1))
        count = int(environ.get("SLURM_ARRAY_TASK_COUNT", (high - low) // step + 1))
    except ValueError as exc:
        raise OptionError(
            "{shard} auto: a SLURM_ARRAY_TASK_* variable is not an integer ({exc})", exc=exc
        ) from None
    if step < 1 or (high - low) % step or (high - low) // step + 1 != count or (task - low) % step:
        raise OptionError(
            "{shard} auto needs a job array whose task ids are one range (--array=MIN-MAX[:STEP]); this "
            "one has {count} tasks between {low} and {high} (step {step}) and task id {task}: give "
            "{shard:K/N} yourself",
            count=count,
            low=low,
            high=high,
            step=step,
            task=task,
        )
    return (task - low) // step + 1, count


# ----------------------------------------------------------------------------------------- Ray
def _fitted(unit: Unit, initial: InitialRanker | None) -> InitialRankers:
    """The run's initial rankers, holding the one another task fitted (``_fit_initial``)."""
    return InitialRankers(unit.train, unit.valid, () if initial is None else (initial,))


@functools.cache
def _code() -> dict[str, Any]:
    return code_version()


def _fit_initial(spec: ExperimentSpec, unit: Unit, seed: int) -> InitialRanker:
    """Task: the run's LambdaMART initial ranker with the protocol's default parameters (as the local
    loop fits it), with its in-sample training scores."""
    initial = InitialRankers(unit.train, unit.valid).get(InitialRanker(seed, spec.train.threads))
    initial.train_scores(unit.train, 0)
    return initial


def _train_run(
    spec: ExperimentSpec, model: str, seed: int, fold: int, unit: Unit, initial: Any, root: str
) -> dict[str, Any]:
    """Task: one ``(model, seed, fold)`` run, the record the store keeps (with the worker's code).
    ``root``: the experiment directory's path, where a ``[tune]`` study of the run is kept (on the
    worker's filesystem: with ``[tune]`` on a cluster, give the workers a shared directory)."""
    t0 = time.perf_counter()
    record = _run_one(spec, model, seed, fold, unit, _fitted(unit, initial), Path(root))
    record["seconds"] = time.perf_counter() - t0
    record["code"] = _code()
    record["context"] = run_context(spec.train.threads, run_device(spec, model, seed))
    return record


def _unit_record(spec: ExperimentSpec, unit: Unit, seed: int, initial: Any) -> dict[str, Any]:
    """Task: the run's unit record (anomaly scores of its test queries)."""
    return _anomaly_unit(spec, unit, _fitted(unit, initial), seed)


def _needs_initial(spec: ExperimentSpec, model: str, seed: int) -> bool:
    """Whether ``runner._run_one`` takes the shared initial ranker for this model."""
    if model == REFERENCE and spec.synth and model not in spec.models:
        return False
    rerank = spec.run_config(model, seed).rerank
    return bool(rerank.initial and not rerank.initial_params)


def _gpus(spec: ExperimentSpec, model: str, seed: int, cluster_gpus: float) -> int:
    """GPUs a run's task asks for: 1 for ``train.device = "cuda"`` (or ``"cuda:N"``), and for
    ``"auto"`` when the cluster has GPUs (Ray hides the GPUs from a task that asks for none); else 0."""
    if model == REFERENCE and spec.synth and model not in spec.models:
        return 0
    return _device_gpus(spec.run_config(model, seed), cluster_gpus)


def _device_gpus(config: Any, cluster_gpus: float) -> int:
    """GPUs a task training ``config`` asks for (a baseline's config has no ``train.device``)."""
    device = str(getattr(getattr(config, "train", None), "device", "cpu"))
    return int(device.startswith("cuda") or (device == "auto" and cluster_gpus > 0))


class ProcessExecutor:
    """The pending runs in ``jobs`` local worker processes, a ``(seed, fold)`` unit a task (module
    docstring). Workers are spawned (no fork of a process holding threads); each writes its runs to the
    store as the local loop does (atomic files), and this process counts them on the progress bar."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs

    def __call__(self, spec: ExperimentSpec, store: RunStore, *, keys, todo, need_units, bar) -> None:
        """Run ``todo`` (and the units in ``need_units``) of the runs ``keys`` in the workers.

        Raises:
            ValueError: runs failed (each named; the others are stored).
        """
        every = spec.run_keys()
        units = sorted({(s, f) for s, f, _ in todo} | set(need_units), key=every.index)
        if not units:
            return
        names, errors = spec.run_names(), []
        context = multiprocessing.get_context("spawn")
        workers, others = min(self.jobs, len(units)), set(multiprocessing.active_children())
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_exit_on_sigterm) as pool:
            root, n = str(store.root), len(every)
            pending = {pool.submit(_run_unit, spec, root, every.index(u) + 1, n): u for u in units}
            try:
                while pending:
                    done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                    bar.n = sum(store.has_run(m, s, f) for s, f in keys for m in names)
                    bar.refresh()
                    for future in done:
                        seed, fold = pending.pop(future)
                        try:
                            future.result()
                        except Exception as exc:  # every failed unit is reported below
                            errors.append(f"seed {seed} fold {fold}: {exc}")
            except BaseException:  # Ctrl-C, SIGTERM: the workers stop now, not after their units
                pool.shutdown(wait=False, cancel_futures=True)
                # the pool's workers only: a notebook's other child processes are not ours to stop
                _stop_workers([c for c in multiprocessing.active_children() if c not in others])
                raise
        if errors:
            raise ValueError(f"{len(errors)} of {len(units)} units failed: " + "; ".join(errors))


#: set in a worker by its first SIGTERM: it starts no other unit (:func:`_run_unit`)
_STOPPING = threading.Event()


def _exit_on_sigterm() -> None:
    """Worker initializer: the first SIGTERM raises ``SystemExit(143)``, so that a stopped worker unwinds
    its run and leaves through Python's exit, whose finalizers release what it holds; later ones are
    ignored, so that they do not cut those finalizers short (the pool sends its own when it breaks).
    The pool catches an exception of a task and hands the worker its next one: after SIGTERM a worker
    refuses every unit at once, and leaves when the pool tells it to. Killed outright, a worker left its
    semaphores (tqdm's lock) to the resource tracker, which warned of leaked semaphores after
    ``ctxrank: terminated``."""

    def stop(signum: int, frame: object) -> None:
        _STOPPING.set()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _stop_workers(workers: list, grace: float = 10.0) -> None:
    """SIGTERM to each of ``workers`` (see :func:`_exit_on_sigterm`), SIGKILL to those still running
    after ``grace`` seconds (a worker inside a long native call runs no Python handler); returns when
    every one has ended.

    It polls their exit codes rather than joining them: the pool's manager thread may be joining the
    same processes, and once ``shutdown(wait=False)`` has been called nobody waits for that thread."""

    def wait_until(deadline: float) -> list:
        while (running := [w for w in workers if w.exitcode is None]) and time.monotonic() < deadline:
            time.sleep(0.02)
        return running

    for worker in workers:
        worker.terminate()
    for worker in wait_until(time.monotonic() + grace):
        worker.kill()
    wait_until(time.monotonic() + 10.0)


def _run_unit(spec: ExperimentSpec, root: str, index: int, count: int) -> None:
    """Worker: the pending runs of the ``index``-th of ``count`` units (the shard ``index/count``), with
    the allocator setting of the ``ctxrank`` command (:func:`ctxrank._allocator.limit_heap_growth`)."""
    if _STOPPING.is_set():  # stopped while its previous unit unwound (e.g. Ctrl-C, then SIGTERM)
        raise SystemExit(143)
    limit_heap_growth()
    run_experiment(spec, root, progress=False, log=lambda _: None, shard=(index, count))


@dataclass(frozen=True)
class RayExecutor:
    """Runs every pending run as a Ray task (module docstring). ``address``: the cluster to join
    (None: Ray's default, i.e. ``RAY_ADDRESS`` or a cluster started on this machine, else a new local
    one); ``max_retries``: retries of a task whose worker died; ``in_flight``: tasks submitted at a
    time (None: twice the runs the cluster's CPUs hold at once), which bounds the data held in the
    object store; ``task``: the function of a run's task (tests wrap it)."""

    address: str | None = None
    max_retries: int = 2
    in_flight: int | None = None
    task: Callable[..., dict[str, Any]] = _train_run

    def __post_init__(self) -> None:
        check_int("in_flight", self.in_flight, allow_none=True)  # None (not 0) asks for the default

    def __call__(self, spec: ExperimentSpec, store: RunStore, *, keys, todo, need_units, bar) -> None:
        """Run ``todo`` (and the units in ``need_units``) of the runs ``keys``; store each result as it
        comes back, with the code of the worker that ran it, and count it on ``bar``.

        Raises:
            ValueError: Ray is not installed, or runs failed (each named; the others are stored).
        """
        if not todo and not need_units:  # everything is stored: no cluster needed
            return
        with self._cluster():
            _RayRun(self, spec, store, bar).run(keys, todo, need_units)

    def run_trials(self, job: Any, study: Any, *, trials: int, timeout: float | None, callback, storage: str):
        """Run ``trials`` trials of the Optuna ``study`` (a :func:`ctxrank.tune.tune` job), each a Ray
        task; the driver asks the study for each trial's configuration and tells it the result, and
        ``callback(study, frozen_trial)`` follows each. ``storage``: the study's URL, which the pruning
        reporter (an actor on this node) opens; ``timeout``: seconds after which no trial starts.

        Raises:
            ValueError: Ray is not installed, or trials failed other than by a non-finite loss (each
                named; the other results are told to the study).
        """
        with self._cluster():
            _RayTrials(self, job, study, storage).run(trials, timeout, callback)

    @contextlib.contextmanager
    def _cluster(self) -> Iterator[None]:
        """Ray started (or joined at ``address``) for the block, unless it already runs here."""
        try:
            import ray
        except ImportError:
            raise OptionError(
                "{executor} ray needs Ray: pip install 'ctxrank[ray]' (or ray[default]) on the driver "
                "and on every node of the cluster"
            ) from None
        started = not ray.is_initialized()
        if started:
            ray.init(**({"address": self.address} if self.address else {"include_dashboard": False}))
        try:
            yield
        finally:
            if started:
                ray.shutdown()


class _RayRun:
    """The driver's side of one Ray execution: submit, collect, store."""

    def __init__(self, ex: RayExecutor, spec: ExperimentSpec, store: RunStore, bar: Any) -> None:
        import ray

        self.ray, self.spec, self.store, self.bar = ray, spec, store, bar
        cpus, threads = int(ray.cluster_resources().get("CPU", 1)), spec.train.threads
        if cpus < threads:
            raise ValueError(
                f"runs.threads = {threads} but the Ray cluster has {cpus} CPUs: no run could start"
            )
        self.gpus = float(ray.cluster_resources().get("GPU", 0))
        self.limit = 2 * max(1, cpus // threads) if ex.in_flight is None else ex.in_flight
        bar.write(
            f"ray: {cpus} CPUs, {threads} per run ({cpus // threads} runs at a time), "
            f"up to {self.limit} tasks in flight"
        )
        opts = {"num_cpus": threads, "max_retries": ex.max_retries, "retry_exceptions": False}
        self.initial = ray.remote(_fit_initial).options(**opts)
        self.train, self.opts = ray.remote(ex.task), opts
        self.unit = ray.remote(_unit_record).options(**opts)
        self.pending: dict[Any, tuple[str, int, int, str]] = {}
        self.failed: list[str] = []

    def run(self, keys: list[tuple[int, int]], todo: list[tuple[int, int, str]], need_units: set) -> None:
        source = _Source(self.spec)
        for seed, fold in keys:
            missing = [m for s, f, m in todo if (s, f) == (seed, fold)]
            if not missing and (seed, fold) not in need_units:
                continue
            if self.failed:  # stop submitting; collect what runs, then report
                break
            self.submit(seed, fold, missing, load_unit(self.spec, seed, fold, source), need_units)
            while len(self.pending) >= self.limit:
                self.collect()
        while self.pending:
            self.collect()
        if self.failed:
            raise ValueError(
                f"{len(self.failed)} run(s) failed (the others are stored; run again to retry): "
                + "; ".join(self.failed)
            )

    def submit(self, seed: int, fold: int, missing: list[str], unit: Unit, need_units: set) -> None:
        spec, ray = self.spec, self.ray
        unit_ref = ray.put(unit)
        anomaly = (seed, fold) in need_units
        shared = anomaly or any(_needs_initial(spec, m, seed) for m in missing)
        initial = self.initial.remote(spec, unit_ref, seed) if shared else None
        for m in missing:
            given = initial if _needs_initial(spec, m, seed) else None
            task = self.train.options(**self.opts, num_gpus=_gpus(spec, m, seed, self.gpus))
            run = task.remote(spec, m, seed, fold, unit_ref, given, str(self.store.root))
            self.pending[run] = ("run", seed, fold, m)
        if anomaly:
            self.pending[self.unit.remote(spec, unit_ref, seed, initial)] = ("unit", seed, fold, "")
        self.bar.set_description(f"ray: {len(self.pending)} tasks in flight")

    def collect(self) -> None:
        """Wait for one task; store its result (or note its failure)."""
        (ref,), _ = self.ray.wait(list(self.pending), num_returns=1)
        kind, seed, fold, model = self.pending.pop(ref)
        what = f"run {model} seed {seed} fold {fold}" if kind == "run" else f"unit seed {seed} fold {fold}"
        try:
            record = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None) or exc
            self.failed.append(f"{what} failed: {cause}")
            self.bar.write(f"  {what} failed: {cause}")
            return
        if kind == "unit":
            self.store.save_unit(seed, fold, record)
            return
        self.store.save_run(record)
        self.bar.update(1)
        shown = ", ".join(f"{k} {np.nanmean(v):.4f}" for k, v in list(record["metrics"].items())[:3])
        self.bar.write(f"  seed {seed} fold {fold} {model}: {shown} ({record['seconds']:.0f} s)")
        self.bar.set_description(f"ray: {len(self.pending)} tasks in flight")


# --------------------------------------------------------------------------------- tuning trials
class _TrialReporter:
    """Ray actor on the driver's node: records a trial's per-epoch validation metric in the study and
    says whether the study's pruner stops it (the workers need no access to the storage)."""

    def __init__(self, storage: str, study_name: str, prune: bool) -> None:
        import optuna

        from ctxrank.tune import make_pruner, rdb_storage

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.load_study(
            study_name=study_name, storage=rdb_storage(storage), pruner=make_pruner(prune)
        )

    def should_prune(self, trial_id: int, epoch: int, value: float) -> bool:
        import optuna

        trial = optuna.Trial(self.study, trial_id)
        trial.report(value, epoch)
        return trial.should_prune()


def _tune_trial(job: Any, config: RunConfig, trial_id: int, reporter: Any) -> dict[str, Any]:
    """Task: train one trial's configuration (``ctxrank.tune._Job.score``; the driver's typed
    :class:`RunConfig`, as Ray ships arguments); its outcome."""
    import optuna
    import ray

    def should_prune(epoch: int, value: float) -> bool:
        return ray.get(reporter.should_prune.remote(trial_id, epoch, value))

    try:
        value, summary = job.score(config, should_prune)
    except optuna.TrialPruned:
        return {"state": "pruned"}
    except NonFiniteLossError as exc:
        return {"state": "error", "error": str(exc)}
    return {"state": "complete", "value": value, "summary": summary}


class _RayTrials:
    """The driver's side of a study on Ray: ask, submit, wait, tell."""

    #: seconds between the heartbeats the driver records for its running trials (the storage fails a
    #: trial without one for its grace period, so a killed driver's trials are run again)
    HEARTBEAT = 20.0

    def __init__(self, ex: RayExecutor, job: Any, study: Any, storage: str) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray, self.job, self.study = ray, job, study
        base = job.base.config  # validated once, by the study (ctxrank.tune.StudyBase)
        threads = resolve_threads(base.train.threads, "train.threads")
        cpus = int(ray.cluster_resources().get("CPU", 1))
        if cpus < threads:
            raise ValueError(
                f"train.threads = {threads} but the Ray cluster has {cpus} CPUs: no trial could start"
            )
        self.slots = max(1, cpus // threads) if ex.in_flight is None else ex.in_flight
        job.initial_kw(base)  # a shared initial ranker is fitted once, here, and shipped with the job
        self.job_ref = ray.put(job)
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.reporter = (
            ray.remote(_TrialReporter)
            .options(num_cpus=0, scheduling_strategy=here)
            .remote(storage, study.study_name, job.prune)
        )
        gpus = _device_gpus(base, float(ray.cluster_resources().get("GPU", 0)))
        self.task = ray.remote(_tune_trial).options(
            num_cpus=threads, num_gpus=gpus, max_retries=ex.max_retries, retry_exceptions=False
        )
        self.pending: dict[Any, Any] = {}
        self.failed: list[str] = []

    def run(self, trials: int, timeout: float | None, callback) -> None:
        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study)  # a killed driver's trials: failed, run again
        t0, started, beat = time.monotonic(), 0, time.monotonic()
        while True:
            while (
                started < trials
                and len(self.pending) < self.slots
                and not self.failed
                and (timeout is None or time.monotonic() - t0 < timeout)
            ):
                with warnings.catch_warnings():  # "heartbeat ... with Study.optimize": recorded here
                    warnings.simplefilter("ignore", UserWarning)
                    trial = self.study.ask()
                config = self.job.config_for(trial)
                ref = self.task.remote(self.job_ref, config, trial._trial_id, self.reporter)
                self.pending[ref] = trial
                self.heartbeat([trial])
                started += 1
            if not self.pending:
                break
            done, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=self.HEARTBEAT)
            for ref in done:
                callback(self.study, self.tell(self.pending.pop(ref), ref))
            if time.monotonic() - beat >= self.HEARTBEAT:
                self.heartbeat(list(self.pending.values()))
                beat = time.monotonic()
        if self.failed:
            raise ValueError(
                f"{len(self.failed)} trial(s) failed (their results are in the study as failed trials; "
                "run again to go on): " + "; ".join(self.failed)
            )

    def heartbeat(self, trials: list[Any]) -> None:
        """Record that ``trials`` still run (what ``study.optimize``'s heartbeat thread does)."""
        storage = self.study._storage  # Optuna keeps no public handle; RDBStorage records heartbeats
        if hasattr(storage, "record_heartbeat"):
            for trial in trials:
                storage.record_heartbeat(trial._trial_id)

    def tell(self, trial: Any, ref: Any) -> Any:
        """Tell the study the outcome of ``trial``'s task ``ref``; the frozen trial."""
        import optuna

        state = optuna.trial.TrialState
        try:
            outcome = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None) or exc
            self.failed.append(f"trial {trial.number}: {cause}")
            return self.study.tell(trial, state=state.FAIL)
        if outcome["state"] == "pruned":
            return self.study.tell(trial, state=state.PRUNED)
        if outcome["state"] == "error":
            trial.set_user_attr("error", outcome["error"])
            return self.study.tell(trial, state=state.FAIL)
        trial.set_user_attr("summary", outcome["summary"])
        return self.study.tell(trial, outcome["value"])
