"""``ctxrank train``: train a ranker, save it; ``--resume`` a killed run.

A training run is ``(DataSource, RunConfig)``; the flags build the
:class:`~ctxrank.training.request.TrainRequest` (the source, a ``--config`` file, ``--set`` and the
run-config flags), which a run records in ``OUT/resume/run.json`` and in the model's ``ctxrank.json``;
``--resume`` reads it back from there.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch.distributed

from ctxrank._declare import flatten
from ctxrank._io import lock_directory, read_json_file, write_json
from ctxrank._memory import format_bytes
from ctxrank._modeldir import claim_model_dir, remove_model_entries
from ctxrank.cli._options import (
    add_declared,
    add_progress,
    add_track,
    out,
    table,
    warn,
)
from ctxrank.config import RunConfig
from ctxrank.data.stream import ShardStream
from ctxrank.evaluation import metrics_report, unevaluated_message
from ctxrank.fit_summary import FitSummary
from ctxrank.metrics import mean_metrics, metric_convention
from ctxrank.registry import MODELS
from ctxrank.tracking import RunLog, TrackedRun, Tracking, flat_params
from ctxrank.training.distributed import init_from_env, resolve_device, world
from ctxrank.training.loop import NonFiniteLossError
from ctxrank.training.memory import check_model_size
from ctxrank.training.request import FLAGS, TrainRequest
from ctxrank.training.resume import RUN_FILE, STATE_FILE, StateDir
from ctxrank.training.run import check_reads_categorical, check_streaming, run_training

RESUME_DIR = "resume"  # OUT/resume: the training state of an unfinished run (ctxrank.training.resume)
RUN_KIND = "ctxrank-train-run"


# ------------------------------------------------------------------------------------------- train
def train(
    request: TrainRequest,
    *,
    out_dir: str | None = None,
    resume: str | None = None,
    progress: bool = True,
    debug: bool = False,
    overwrite: bool = False,
    tracking: Tracking | None = None,
) -> int:
    """Train the ``request``'s ranker and save it to ``out_dir``, or continue the interrupted run in
    ``resume``.

    ``out_dir`` must be new, empty or hold a finished or unfinished ctxrank model; ``overwrite``: write
    there anyway, replacing a previous model (:mod:`ctxrank.cli._outputs`). ``tracking``: log the run
    (parameters, each epoch, test metrics, the model directory) to MLflow or TensorBoard
    (:mod:`ctxrank.tracking`; not part of the run's record: a ``--resume`` may add or drop it)."""
    record = None
    if resume is not None and overwrite:
        raise ValueError("--overwrite starts a new run in --out DIR; --resume DIR continues the one there")
    if resume is not None:
        request, config, record = _resumed_run(request, out_dir, resume)
        out_dir = resume
    else:
        if out_dir is None:
            raise ValueError("give --out DIR (or --resume DIR to continue an interrupted run)")
        config = request.run_config()
    if tracking is not None:
        tracking.check()  # the package and the place, before any data is read

    check_model_size(config, 1, device=resolve_device(config.train.device))  # before the data: 1 feature

    ctx = init_from_env(config.train.device)  # torchrun: data-parallel (ctxrank.training.distributed)
    run = _Run(
        request,
        config,
        Path(out_dir),
        record,
        progress=progress,
        debug=debug,
        overwrite=overwrite,
        tracking=tracking,
    )
    if not ctx.enabled:
        return run.execute()
    try:
        if not MODELS[config.model].distributed:
            raise ValueError(
                f"torchrun data-parallel training applies to the neural models, not {config.model} "
                "(for LambdaMART beyond one machine use LightGBM's own distributed training, e.g. "
                "lightgbm.dask; see docs/training.md)"
            )
        result = replace(run, main=ctx.is_main).execute()
        ctx.barrier()  # a rank that tears its gloo group down while another still works aborts (SIGABRT)
        return result
    finally:
        torch.distributed.destroy_process_group()


def _read_run_record(directory: Path) -> dict[str, Any]:
    """``DIR/resume/run.json`` of an unfinished run (refusing a finished run or a foreign file)."""
    run_file = directory / RESUME_DIR / RUN_FILE
    if not run_file.is_file():
        if (directory / "ctxrank.json").exists():
            raise ValueError(f"{directory} already holds a finished model (ctxrank.json): nothing to resume")
        raise ValueError(
            f"{directory}: no training state to resume ({run_file} is missing: the directory was not "
            "written by `ctxrank train --out`, or its run never started training)"
        )
    record = read_json_file(run_file, "run record")
    if not isinstance(record, dict) or record.get("kind") != RUN_KIND:
        raise ValueError(f"{run_file}: not a ctxrank run record")
    return record


def _resumed_run(given: TrainRequest, out_dir: str | None, resume: str) -> tuple[TrainRequest, Any, dict]:
    """``--resume DIR``: the recorded request and config of the run in DIR; options given as well must
    agree with the recorded ones."""
    directory = Path(resume)
    if out_dir is not None and Path(out_dir).absolute() != directory.absolute():
        raise ValueError(
            f"--resume {directory} continues the run in {directory}; --out, when given, must be the same"
        )
    record = _read_run_record(directory)
    run_file = directory / RESUME_DIR / RUN_FILE
    try:
        saved = TrainRequest.from_record(dict(record["options"]))
        config = RunConfig.from_saved(record["config"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{run_file}: malformed run record ({exc!r})") from None
    now, then, defaults = given.to_record(), saved.to_record(), TrainRequest().to_record()
    differ = [
        f"{FLAGS[k]} {_shown(v)} (recorded: {_shown(then[k])})"
        for k, v in now.items()
        if v != defaults[k] and v != then[k]
    ]
    if differ:
        raise ValueError(
            f"--resume continues the run with the options it was started with ({run_file}); these differ: "
            + ", ".join(differ)
            + ". Resume without them, or start a new run with another --out"
        )
    return saved, config, record


def _shown(value: Any) -> str:
    return repr(tuple(value)) if isinstance(value, list) else repr(value)


@dataclass(frozen=True)
class _Run:
    """One training run of ``ctxrank train``, in named steps. ``record``: the run record of
    ``--resume`` (None: a new run); ``main``: this process writes files and prints (rank 0)."""

    request: TrainRequest
    config: Any
    out_dir: Path
    record: dict[str, Any] | None
    progress: bool = True
    debug: bool = False
    main: bool = True
    overwrite: bool = False
    tracking: Tracking | None = None

    @property
    def state_dir(self) -> Path:
        return self.out_dir / RESUME_DIR

    def say(self, text: str = "") -> None:
        if self.main:
            out(text)

    def execute(self) -> int:
        """Lock the directory, check, read the data, record the run, train, save, report; the exit
        status."""
        if not self.main:  # rank 0 holds the lock for every rank of a torchrun job
            self._check_directory()
            return self._execute()
        with lock_directory(self.out_dir, what="training run"):  # released: nothing left if it failed
            self._check_directory()
            return self._execute()

    def _execute(self) -> int:
        self._check_categorical()
        ctx = world()
        td = self.request.data.load_training(self.config.train.seed, rank=ctx.rank, world=ctx.world_size)
        if isinstance(td.train, ShardStream):
            check_streaming(self.config, td.train)  # before anything is said or trained
        self._describe(td)
        record = self._start()
        try:
            tracked = self._tracked_run(record)
        except Exception:
            self._forget()  # nothing trained: the same command starts afresh
            raise
        with tracked if tracked is not None else contextlib.nullcontext():
            status = self._train(td, record, RunLog(tracked) if tracked is not None else None)
            if status and tracked is not None:
                tracked.end("FAILED")
        return status

    def _train(self, td: Any, record: dict[str, Any], log: RunLog | None) -> int:
        """Train, save, report (and log to the tracker); the exit status."""
        recorded = ("command", "cwd", "options", "data_parallel")
        meta = {**td.meta, "command": {k: record[k] for k in recorded if k in record}}
        t0 = time.perf_counter()
        try:
            result = run_training(
                self.config,
                td.train,
                td.valid,
                td.test,
                out=self.out_dir if self.main else None,
                progress=self.progress,
                log=self.say,
                meta=meta,
                state_dir=self.state_dir,
                resume=self.record is not None,
                on_epoch=log,
            )
        except NonFiniteLossError as exc:
            if self.debug:
                raise
            return self._non_finite(exc)
        except Exception:
            if not StateDir(self.state_dir).exists():
                self._forget()  # refused or failed before an epoch was saved: the same --out starts afresh
            raise
        self._summary_line(result.summary, time.perf_counter() - t0)
        test = self._test_report(result, td) if result.test_metrics is not None else None
        if self.main:  # the run is complete: its training state is no longer needed
            shutil.rmtree(self.state_dir, ignore_errors=True)
        if log is not None:
            _log_result(log, result, test, self.out_dir)
        return 0

    def _tracked_run(self, record: dict[str, Any]) -> TrackedRun | None:
        """The tracker's run of this training run (rank 0 only), its parameters logged: the resolved run
        config under dotted keys (``train.lr``) and the data options given (``data.dataset``)."""
        if self.tracking is None or not self.main:
            return None
        tags = {"ctxrank.command": " ".join(record["command"]), "ctxrank.out": str(self.out_dir.absolute())}
        data = {f"data.{k}": v for k, v in flatten(self.request.data).items() if v not in (None, False, ())}
        params = {**flat_params(self.config.to_dict()), **data}
        return self.tracking.start(self.out_dir.absolute().name, tags=tags, params=params)

    def _check_directory(self) -> None:
        """A new run's ``--out``: new, empty, or with ``--overwrite`` anything
        (:func:`ctxrank._modeldir.claim_model_dir`); an unfinished run there is pointed to ``--resume``."""
        out_dir, state_dir = self.out_dir, self.state_dir
        if self.record is not None:
            return
        if not self.overwrite and ((state_dir / RUN_FILE).exists() or (state_dir / STATE_FILE).exists()):
            raise ValueError(
                f"{out_dir} holds an unfinished run ({state_dir}): continue it with `ctxrank train --resume "
                f"{out_dir}`, or start a new one with another --out (or --overwrite to replace it)"
            )
        claim_model_dir(out_dir, overwrite=self.overwrite)

    def _check_categorical(self) -> None:
        check_reads_categorical(self.config.model, self.request.data.columns.categorical or ())

    def _describe(self, td: Any) -> None:
        """What is trained on what: the split, the table's columns, the model."""
        train, valid, test, config = td.train, td.valid, td.test, self.config
        counts = f"train {train.n_queries} queries, valid {valid.n_queries}" + (
            f", test {test.n_queries}" if test is not None else ""
        )
        rr = config.rerank
        how = f" re-ranking LambdaMART's top {rr.top_k}" if rr.initial else ""
        if td.split is not None:
            self.say(_split_text(td.split))
        if train.categorical is not None:
            cards = dict(zip(train.categorical_names, train.categorical_cardinalities, strict=True))
            self.say(
                f"table: {train.n_features} numeric columns ({', '.join(train.feature_names)}), categorical "
                f"{', '.join(f'{k} ({v - 1} values + unknown)' for k, v in cards.items())}; "
                "the encoder is fitted on the training split"
            )
            if rr.initial:
                self.say(
                    "note: the initial ranker (LambdaMART) takes the categorical columns as LightGBM "
                    "categorical features; the re-ranker embeds them"
                )
        self.say(f"{config.model} (trains {config.objective}){how} on {td.what}: {counts}")
        if isinstance(train, ShardStream):
            bound = train.memory_bytes(config.train.batch_size)
            self.say(
                f"streaming {train.describe()} (this process); shuffle buffer {train.shuffle_buffer} "
                f"queries, reads of {train.read_rows:,} rows: at most about {format_bytes(bound)} of "
                "training rows held at once (docs/data.md)"
            )
        dp = data_parallel(config.train.batch_size)
        if dp is not None:
            self.say(
                f"data-parallel (torchrun, {dp['backend']}): world size {dp['world_size']} ({dp['nodes']} "
                f"node(s) x {dp['processes_per_node']} processes); train.batch_size "
                f"{dp['batch_size_per_process']} queries per process, global batch {dp['global_batch']} "
                "queries"
            )

    def _start(self) -> dict[str, Any]:
        """A new run: write its record (``OUT/resume/run.json``); a resumed one: say where it goes on."""
        if self.record is not None:
            done = StateDir(self.state_dir).saved_epoch()
            self.say(
                f"resuming {self.out_dir}: "
                + (
                    f"epoch {done} was the last one saved; training goes on after it"
                    if done is not None
                    else "no epoch had finished; training starts from epoch 1"
                )
            )
            return self.record
        parallel = data_parallel(self.config.train.batch_size)
        launcher = parallel["launcher"] if parallel else ()
        record = {
            "format_version": 1,
            "kind": RUN_KIND,
            "command": self.request.command_line(self.out_dir, launcher),
            "cwd": os.getcwd(),
            "options": self.request.to_record(),
            "config": self.config.to_dict(),
            **({"data_parallel": parallel} if parallel else {}),
        }
        if self.main:
            self._replace_previous()  # before the barrier: no rank may see the old model's state
        world().barrier()  # under torchrun every rank has checked the directory before rank 0 writes
        if self.main:
            write_json(self.state_dir / RUN_FILE, record)
        return record

    def _forget(self) -> None:
        """Remove the record :meth:`_start` wrote for a new run (a resumed run keeps its own)."""
        if self.record is None and self.main:
            (self.state_dir / RUN_FILE).unlink(missing_ok=True)
            if self.state_dir.is_dir() and not any(self.state_dir.iterdir()):
                self.state_dir.rmdir()

    def _replace_previous(self) -> None:
        """``--overwrite`` on a directory of an earlier ctxrank model: its files go first (none is left
        beside the new model's); a directory of other files keeps them."""
        earlier = (self.out_dir / "ctxrank.json").exists() or (self.state_dir / RUN_FILE).exists()
        if self.overwrite and earlier:
            remove_model_entries(self.out_dir)

    def _non_finite(self, exc: Exception) -> int:
        best = StateDir(self.state_dir).best_file()
        where = (
            f"\nthe last good epoch's training state is kept in {self.state_dir}; its best weights are in "
            f"{best} (a safetensors state dict)"
            if best is not None
            else ""
        )
        if self.main:
            print(f"ctxrank: error: {exc}{where}", file=sys.stderr)
        return 1

    def _summary_line(self, s: FitSummary, seconds: float) -> None:
        if s.epochs_run is not None:
            initial = s.initial_valid_metric
            against = f"; initial ranker {initial:.4f} on the same lists" if initial is not None else ""
            self.say(
                f"best epoch {s.best_epoch} of {s.epochs_run} "
                f"(valid {s.valid_metric_name} {s.best_valid_metric:.4f}{against}), "
                f"{seconds:.1f} s; saved to {self.out_dir}"
            )
        else:
            self.say(f"{_baseline_summary(s)}{_train_metric(s)}, {seconds:.1f} s; saved to {self.out_dir}")

    def _test_report(self, result: Any, td: Any) -> dict[str, Any]:
        """``test_metrics.json`` (:func:`ctxrank.evaluation.metrics_report`) and the printed table; the
        report."""
        config, rr = self.config, self.config.rerank
        conv = metric_convention("standard", no_relevant=config.train.no_relevant)
        report = metrics_report(result.test_metrics, td.test, conv)
        problem = unevaluated_message(report)
        if problem is not None:  # the model is saved already: say it, do not fail the run
            warn(f"test metrics: {problem}")
        report["ideal"] = rr.ideal if rr.initial else "full"
        if td.split is not None:
            report["split"] = td.split
        means = report["metrics"]
        rows: list[tuple[str, ...]] = [(k, f"{v:.4f}") for k, v in means.items()]
        headers: tuple[str, ...] = ("test metric", config.model)
        if result.initial_test_metrics is not None:
            initial = mean_metrics(result.initial_test_metrics)
            report["initial_metrics"] = initial
            rows = [(k, f"{initial[k]:.4f}", v) for k, v in rows]
            headers = ("test metric", "lambdamart", f"{config.model} re-ranked")
        if self.main:
            write_json(self.out_dir / "test_metrics.json", report)
        self.say()
        self.say(table(headers, rows, right=tuple(range(1, len(headers)))))
        return report


def _log_result(log: RunLog, result: Any, test: dict[str, Any] | None, out_dir: Path) -> None:
    """After a training run: the epochs not logged yet (a baseline's iterations, those before a
    ``--resume``), the summary's numbers (``summary.best_epoch``, ...), the mean test metrics
    (``test_ndcg@10``, the initial ranker's ``initial_test_...``) and the model directory."""
    log.finish(result.history, result.summary)
    if test is not None:
        log.log({f"test_{k}": v for k, v in test["metrics"].items()})
        log.log({f"initial_test_{k}": v for k, v in test.get("initial_metrics", {}).items()})
    log.artifact(out_dir, "model")


def data_parallel(batch_size: int) -> dict[str, Any] | None:
    """The data-parallel layout of this torchrun process group (None outside one): world size,
    nodes x processes per node, backend, per-process and global batch, and the torchrun command
    (``launcher``) that starts the same layout again."""
    ctx = world()
    if not ctx.enabled:
        return None
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", max(1, ctx.world_size // per_node)))
    launcher = ["torchrun", "--standalone"] if nodes == 1 else ["torchrun", f"--nnodes={nodes}"]
    return {
        "world_size": ctx.world_size,
        "nodes": nodes,
        "processes_per_node": per_node,
        "backend": str(torch.distributed.get_backend()),
        "batch_size_per_process": batch_size,
        "global_batch": ctx.world_size * batch_size,
        # several nodes: add the cluster's rendezvous options (--rdzv-endpoint ...) on every node
        "launcher": [*launcher, f"--nproc-per-node={per_node}"],
    }


def _split_text(record: dict[str, Any]) -> str:
    q = record["queries"]
    fr = "/".join(f"{100 * f:g}" for f in record["fractions"])
    groups = record.get("groups")
    by = "by group" if groups else "by query"
    text = (
        f"split: {sum(q.values())} queries of {record['source']} at random {by} (seed {record['seed']}, "
        f"{fr} %): train {q['train']}, valid {q['valid']}, test {q['test']} queries"
    )
    if groups:
        text += f" of {groups['train']}, {groups['valid']}, {groups['test']} groups"
    return text


def _train_metric(s: FitSummary) -> str:
    """A baseline's ``train.metric`` on validation, when it is not the metric it selected on."""
    tm = s.train_metric
    if tm is None or tm.name == s.metric:
        return ""
    return f"; valid {tm.name} {tm.valid:.4f} (train.metric)"


def _baseline_summary(s: FitSummary) -> str:
    """One line from the summary of a fit without epochs (LambdaMART, RankSVM, AdaRank, the full-batch
    fit, a seed ensemble)."""
    valid = s.best_valid_metric
    on_valid = f" (valid {s.valid_metric_name} {valid:.4f})" if valid is not None else ""
    if s.best_iteration is not None:
        return f"best iteration {s.best_iteration}{on_valid}"
    if s.log_likelihood is not None:  # the conditional logit's full-batch maximum likelihood
        return _maximum_likelihood_line(s, on_valid)
    if s.C is not None:
        return f"C = {s.C:g}{on_valid}, {s.n_pairs:,} training pairs"
    if s.ensemble is not None:
        return f"seed ensemble of {s.ensemble} models{on_valid}"
    if s.best_round is not None:
        if valid is None:
            on_valid = f" (train {s.metric} {s.best_train_metric:.4f})"
        return f"best round {s.best_round} of {s.rounds_run}{on_valid}"
    return "trained"


def _maximum_likelihood_line(s: FitSummary, on_valid: str) -> str:
    state = "converged" if s.converged else f"NOT converged: {s.stop}"
    if s.mle_exists is False and s.l2 == 0:
        state += "; no finite maximum: separation"
    grid = len(s.tried or ())
    l2 = f"l2 {s.l2:g}" + (f" chosen on validation from {grid} values" if grid > 1 else "")
    if s.l2_grid_edge:
        l2 += f", the {s.l2_grid_edge} of them"
    return (
        f"maximum likelihood ({s.solver}, {s.iterations} iterations, {state}, {l2}): "
        f"train log-likelihood {s.log_likelihood:.4f} per situation{on_valid}, "
        f"fit {s.fit_seconds:.2f} s"
    )


# ---------------------------------------------------------------------------------------- parsers
TRAIN_DESCRIPTION = (
    "Train a model on a registered dataset fold (--dataset NAME --fold K), on files "
    "(--train F --valid F [--test F]) or on one file split at random by query into train / "
    "validation / test (--data F, 60/20/20 by default, drawn from train.seed), with early "
    "stopping on the validation split. Files may be LETOR/SVMlight or tables (.csv, .csv.gz, "
    ".tsv, .tsv.gz, .parquet, .pq) with the tabular-data options. Saves "
    "model.safetensors, ctxrank.json (metadata), config.toml (the resolved config), "
    "train_log.jsonl (one record per epoch), training_curves.png (loss and validation metric per "
    "epoch) and, when a test split is given, test_metrics.json "
    "(the test split is evaluated once, at the end). The baselines save their own model files "
    "instead of the weights: LambdaMART model.txt (LightGBM), RankSVM and AdaRank everything in "
    "ctxrank.json. A model trained on a table saves its table spec (columns and categorical "
    "encoder) in ctxrank.json, so predict/evaluate read new tables the same way. Examples: "
    "`ctxrank train --model listnet --dataset mq2008 --fold 1 --out runs/listnet`; "
    "`ctxrank train --model qilcm --data sessions.csv --query-col session --label-col chosen "
    "--categorical airline,cabin --out runs/q`. A neural model's training state is saved "
    "atomically after every epoch in DIR/resume (removed when the run finishes); "
    "`ctxrank train --resume DIR` continues a killed run from its last finished epoch and ends "
    "bitwise as the uninterrupted run would have."
)


def add_train_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "train", parents=[common], help="train a ranker and save it", description=TRAIN_DESCRIPTION
    )
    threads = (
        "train.threads; default: PyTorch's own count for a neural model, 1 for a baseline; the count is "
        "recorded in the model directory"
    )
    fill = {"defaults": "not used by train", "threads": threads}
    add_declared(p, RunConfig, fill=fill)
    add_declared(p, TrainRequest, fill=fill)
    p.add_argument(
        "--out",
        metavar="DIR",
        help="output directory (required unless --resume): new, empty, or holding a ctxrank model",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write to an --out DIR that holds a saved model, an unfinished run or other files: the "
        "earlier model's files are removed, other files are kept (a file of a name train writes is replaced)",
    )
    p.add_argument(
        "--resume",
        metavar="DIR",
        help=(
            "continue the interrupted run in DIR from its last finished epoch, with the options, "
            "config and data it was started with (recorded in DIR/resume/run.json; other options, "
            "when given, must agree with them)"
        ),
    )
    add_track(p, "the run config, each epoch's training loss and validation metric, the test metrics and "
              "(MLflow) the model directory")  # fmt: skip
    add_progress(p)
    p.set_defaults(run=_run_train)


def _run_train(a: argparse.Namespace) -> int:
    return train(
        TrainRequest.of(a),
        out_dir=a.out,
        resume=a.resume,
        progress=not a.no_progress,
        debug=a.debug,
        overwrite=a.overwrite,
        tracking=a.track,
    )
