"""The training loop of neural rankers.

:func:`fit` reads top to bottom: Adam, shuffled batches of queries (length buckets or drawn at
random: ``train.batching``, :func:`batching`), the model's ``training_loss``, optional gradient
clipping, validation metric after every epoch, early stopping with patience and ``min_delta``, best
weights restored at the end. The test split never enters here.
Each step is a named function below, in the order :func:`fit` calls them.

Determinism: :func:`seed_everything` seeds torch; batch order comes from ``np.random.default_rng(seed)``;
with the same seed and thread count two runs on CPU give bitwise-equal weights and metrics (tested).

Devices and scale: ``train.device`` (``cpu``, ``cuda``, ``auto``) and ``train.precision`` (``fp32``,
``bf16``, ``fp16``); under ``torchrun`` the same :func:`fit` trains data-parallel with
``DistributedDataParallel`` (see :mod:`ctxrank.training.distributed`).

Data larger than memory: ``train`` may be a :class:`~ctxrank.data.stream.ShardStream` (query groups read
from Parquet shards with a shuffle buffer; under torchrun each rank reads its own shards and every rank
runs the same number of steps); the batches are the same :class:`~ctxrank.data.lists.ListBatch`.

Memory: before its first batch :func:`fit` refuses a run whose largest batch, or whose longest
validation list, would need more than ``train.max_memory_bytes`` (:mod:`ctxrank.training.memory`);
validation scores in batches cut to fit.

Click logs: ``train.debias`` (``"ips"``, ``"dla"``, ``"pal"``) trains on a log's clicks through
:class:`ctxrank.clicks.towers.Debias`, which wraps the loss the model's ``training_loss`` receives; its
position towers are optimized with the model (and saved with the resumable state), never part of it.

Crash safety: with ``state_dir`` :func:`fit` writes a resumable training state atomically after every
epoch (:mod:`ctxrank.training.resume`; rank 0 only) and, with ``resume=True``, continues from it: the
final weights, history and metrics are bitwise those of an uninterrupted run (same seed and thread
count).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from ctxrank._allocator import release_free_memory
from ctxrank._io import dumps
from ctxrank.clicks.towers import Debias
from ctxrank.clicks.validation import LogObjective, log_objective
from ctxrank.clicks.weighting import TOWER_METHODS, propensity_table
from ctxrank.config import TrainConfig
from ctxrank.data.lists import ListBatch, iterate_batches
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.stream import ShardStream
from ctxrank.fit_summary import FitSummary
from ctxrank.metrics import evaluate_queries
from ctxrank.models.base import RankingModule, with_default_options
from ctxrank.training.diagnostics import epoch_cap, report, stalled
from ctxrank.training.distributed import DistContext, resolve_device, world
from ctxrank.training.memory import check_training, scoring_fits
from ctxrank.training.predict import predict
from ctxrank.training.resume import StateDir, TrainingState, check_same_run, fingerprint

__all__ = [
    "FitResult",
    "LossFn",
    "NonFiniteLossError",
    "batching",
    "fit",
    "seed_everything",
    "validation_objective",
]

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/inf loss or gradient; the message names the epoch and batch."""


@dataclass
class FitResult:
    """What :func:`fit` learned about the run (the model itself is updated in place)."""

    best_epoch: int
    best_metric: float
    metric: str
    epochs_run: int
    stopped_early: bool
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    resumed_from_epoch: int | None = None
    batching: str = "buckets"
    warnings: list[str] = field(default_factory=list)  # ctxrank.training.diagnostics' messages
    validation: str | None = None  # what best_metric measures on a validation log (None: labels)
    validation_metric: str | None = None  # its name in a few words (LogObjective.name; None: labels)
    #: the validation log's objective (learned propensities: the tower's at the end of the fit), for a
    #: re-ranker's comparison with its initial ranker on the same estimate; None on labelled data
    objective: LogObjective | None = field(default=None, repr=False)

    def summary(self) -> FitSummary:
        """The fit's :class:`FitSummary` (its ``seconds`` the loop's; a run sets the whole run's)."""
        return FitSummary(
            best_epoch=self.best_epoch,
            best_valid_metric=self.best_metric,
            metric=self.metric,
            epochs_run=self.epochs_run,
            stopped_early=self.stopped_early,
            seconds=self.seconds,
            resumed_from_epoch=self.resumed_from_epoch,
            batching=self.batching,
            warnings=tuple(self.warnings),
            validation=self.validation,
            validation_metric=self.validation_metric,
        )


def batching(model: RankingModule, config: TrainConfig) -> str:
    """The batching of a fit: ``train.batching``, or the model's ``traits.batching`` when it is
    ``"model"`` (``"random"`` for QILCM, ``"buckets"`` for the others)."""
    return model.traits.batching if config.batching == "model" else config.batching


def seed_everything(seed: int, threads: int | None = None) -> None:
    """Seed torch (CPU and CUDA) and optionally fix the CPU thread count."""
    torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)


class _TrainingLoss(torch.nn.Module):
    """``forward(batch) -> model.training_loss(batch, loss_fn)``: the module DistributedDataParallel
    wraps, so that every parameter used by the loss (QILCM's confusion term, ARSM's surrogate) goes
    through DDP's forward and its gradients are all-reduced. With ``debias`` (``train.debias``) the loss
    is debiased for each batch's shown positions, after the model's default loss options are bound."""

    def __init__(self, model: RankingModule, loss_fn: LossFn | None, debias: Debias | None = None) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.debias = debias

    def forward(self, batch: Any) -> torch.Tensor:
        if self.debias is None:
            return self.model.training_loss(batch, self.loss_fn)
        assert self.loss_fn is not None
        traits = self.model.traits
        loss_fn = with_default_options(self.loss_fn, traits.default_loss, traits.default_loss_params)
        return self.model.training_loss(batch, self.debias.wrap(loss_fn, batch.shown_positions))


@dataclass
class _Trainer:
    """What every step of one :func:`fit` call shares: the model, its optimizer and the run's RNG."""

    model: RankingModule
    step: torch.nn.Module  # _TrainingLoss, DDP-wrapped under torchrun
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    generator: np.random.Generator  # batch order
    config: TrainConfig
    ctx: DistContext
    device: torch.device
    autocast_dtype: torch.dtype | None
    debias: Debias | None = None  # train.debias: its towers train with the model and are saved with its state


@dataclass
class _Progress:
    """Early-stopping bookkeeping: saved with the training state, restored on resume."""

    history: list[dict[str, Any]] = field(default_factory=list)
    best_metric: float = -math.inf
    best_epoch: int = 0
    best_state: dict[str, torch.Tensor] | None = None
    bad_epochs: int = 0
    start: int = 1  # first epoch to run
    resumed_from: int | None = None


def fit(
    model: RankingModule,
    loss_fn: LossFn | None,
    train: RankingData | ShardStream,
    valid: RankingData,
    config: TrainConfig,
    *,
    train_init_scores: np.ndarray | None = None,
    valid_init_scores: np.ndarray | None = None,
    log_path: str | Path | None = None,
    progress: bool = True,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    state_dir: str | Path | None = None,
    resume: bool = False,
) -> FitResult:
    """Train ``model`` in place and restore its best validation weights.

    Args:
        model: a :class:`RankingModule` (already built for ``train.n_features`` features).
        loss_fn: ``(scores, labels, mask) -> scalar`` ranking loss (e.g. ``ctxrank.losses.listnet``),
            or None for a model with its own objective (``model.traits.own_objective``, e.g. ARSM-L2R);
            the model's ``training_loss`` decides how it is used.
        train, valid: normalized data; valid drives early stopping and model selection only. ``train``
            may be a :class:`~ctxrank.data.stream.ShardStream` (normalizing its reads), streamed from
            disk every epoch (then without ``train_init_scores``).
        config: optimization settings (``TrainConfig``).
        train_init_scores, valid_init_scores: flat (N,) initial scores for re-ranking models.
        log_path: a JSON-lines file receiving one record per epoch.
        progress: show a tqdm progress bar (loss and validation metric).
        on_epoch: called with the epoch's record (``{"epoch", "train_loss", "valid_<metric>",
            "best_epoch", "seconds"}``, as ``log_path`` gets it) after every epoch's validation, model
            selection, log and saved state; an exception it raises ends the fit and propagates
            (``ctxrank.tune`` raises Optuna's ``TrialPruned`` here to prune a trial on its per-epoch
            validation metric; ``ctxrank.tracking.RunLog`` logs the record to a tracker).
        state_dir: write a resumable training state here after every epoch (atomically; rank 0 only;
            see :mod:`ctxrank.training.resume`). A directory that already holds a state needs
            ``resume=True``.
        resume: continue from the state in ``state_dir`` (from epoch 1 when none was saved yet): same
            weights, Adam state, RNG states, early-stopping counters and history as when it was
            saved, so the run ends bitwise as an uninterrupted one. The model, ``config``, data and
            process count must be the run's (else ``ValueError``).

    Returns:
        FitResult with the best epoch, its validation metric and the per-epoch history.

    Raises:
        NonFiniteLossError: a batch gave a NaN/inf loss; the model keeps its last good weights and
            ``state_dir`` the state of the last finished epoch.
        ValueError: ``resume`` with a state of another run, or a damaged state; a state in
            ``state_dir`` without ``resume``.
    """
    if loss_fn is None and not model.traits.own_objective:
        raise ValueError(f"{model.name} needs a loss function (it has no objective of its own)")
    if isinstance(train, ShardStream) and train_init_scores is not None:
        raise ValueError(
            "a streamed training split has no initial scores (re-ranking reads the data in memory)"
        )
    device = resolve_device(config.device)
    debias = _debias_of(model, loss_fn, train, config)
    objective = validation_objective(config, train, valid)
    check_training(model, loss_fn, train, config, device)  # before any batch
    scoring_fits(model, valid, config.max_memory_bytes, device)  # validation's longest list, scored alone
    trainer = _make_trainer(model, loss_fn, config, debias)
    state = _Progress()
    store, run_info = None, {}
    if state_dir is not None:
        store = StateDir(state_dir)
        run_info = _run_info(trainer, train, valid, train_init_scores, valid_init_scores)
        _restore_state(trainer, state, store, run_info, resume)
    log = _open_log(log_path, state, resume) if trainer.ctx.is_main else None
    t_start = time.perf_counter()
    bar = tqdm(
        range(state.start, config.max_epochs + 1),
        desc=f"train {model.name}",
        unit="epoch",
        disable=not (progress and trainer.ctx.is_main),
    )
    try:
        for epoch in bar:
            t_epoch = time.perf_counter()
            train_loss = _train_epoch(trainer, state, train, train_init_scores, epoch, store)
            release_free_memory()  # the steps' freed activations go back to the system
            value = _validation_metric(trainer, valid, valid_init_scores, objective)
            _select(trainer, state, epoch, value)
            record = _log_epoch(state, log, epoch, train_loss, value, config.metric, t_epoch, trainer.model)
            bar.set_postfix(loss=f"{record['train_loss']:.4f}", **{config.metric: f"{value:.4f}"})
            stop = state.bad_epochs >= config.patience
            if store is not None:
                _save_state(trainer, state, store, epoch, stop, run_info)
            if on_epoch is not None:
                on_epoch(record)
            if stop:
                break
    finally:
        bar.close()
        if log is not None:
            log.close()
        release_free_memory()
    return _finish(trainer, state, time.perf_counter() - t_start, objective)


def validation_objective(
    config: TrainConfig, train: RankingData | ShardStream | None, valid: RankingData
) -> LogObjective | None:
    """What the validation metric of a fit on ``train`` measures when ``valid`` is an interaction log
    (:func:`ctxrank.clicks.validation.log_objective`; None on labelled data), checked before any work.
    ``train`` None: scores of no single fit (a seed ensemble), whose position towers (``train.debias =
    "dla"`` / ``"pal"``) give no one set of propensities: the naive metric of the clicks."""
    deepest = None if train is None else _deepest_position(train)
    learned = deepest if config.debias in TOWER_METHODS else None  # the position tower's size
    learned_elsewhere = train is None and config.debias in TOWER_METHODS
    return log_objective(
        config.metric,
        valid,
        debias="none" if learned_elsewhere else config.debias,
        propensity=config.propensity,
        propensity_eta=config.propensity_eta,
        clip=config.propensity_clip,
        learned_positions=learned,
    )


def _deepest_position(train: RankingData | ShardStream) -> int | None:
    """The deepest shown position of a training log (None: not a log). A log's positions are ``1..n`` in
    every session (checked when it is read), so a stream's is its longest list, known from its scan."""
    if isinstance(train, ShardStream):
        return None if train.position is None else train.longest_query()[0]
    if train.shown_positions is None:
        return None
    return int(train.shown_positions.max()) if train.n_items else 1


def _debias_of(
    model: RankingModule, loss_fn: LossFn | None, train: RankingData | ShardStream, config: TrainConfig
) -> Debias | None:
    """``train.debias`` for this fit, checked before any work: the training log must carry shown
    positions (within ``train.propensity`` for ``"ips"``) and the model train on a ranking loss."""
    if config.debias == "none":
        return None
    what = f"train.debias = {config.debias!r}"
    if loss_fn is None:
        raise ValueError(f"{what} needs a ranking loss; {model.name} trains its own objective")
    deepest = _deepest_position(train)
    if deepest is None:
        raise ValueError(
            f"{what} learns from a click log: the training data need the shown position of every item "
            "(RankingData.from_arrays(..., position=...), a log's position column); these have none"
        )
    if isinstance(train, ShardStream) and train.world > 1 and config.debias in TOWER_METHODS:
        raise ValueError(
            f"{what} learns a position tower as deep as the longest list, which each process's shards "
            "give apart: train it from shards in one process (or with train.debias = 'ips')"
        )
    propensity = None
    if config.debias == "ips":
        table = propensity_table(config.propensity, config.propensity_eta, deepest)
        propensity = torch.as_tensor(table, dtype=torch.float32)
    return Debias(config.debias, deepest, propensity=propensity, clip=config.propensity_clip)


def _make_trainer(
    model: RankingModule, loss_fn: LossFn | None, config: TrainConfig, debias: Debias | None = None
) -> _Trainer:
    """Device, seeds, the (DDP-wrapped) loss module, Adam and the fp16 gradient scaler, in the order
    that keeps runs bitwise reproducible."""
    ctx = world()
    device = resolve_device(config.device)
    if ctx.enabled and device.type == "cuda":
        device = torch.device("cuda", ctx.local_rank)
    if config.precision == "fp16" and device.type != "cuda":
        raise ValueError("train.precision='fp16' needs a CUDA device; use 'bf16' on CPU")
    seed_everything(config.seed, config.threads)
    generator = np.random.default_rng(config.seed)
    model.to(device)
    loss_module = _TrainingLoss(model, loss_fn, debias)
    loss_module.to(device)
    step: torch.nn.Module = loss_module
    if ctx.enabled:
        step = DistributedDataParallel(step, device_ids=[device.index] if device.type == "cuda" else None)
    # the model's parameters first, in their order, then the debiasing towers' (none without them)
    optimizer = torch.optim.Adam(loss_module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    return _Trainer(
        model=model,
        step=step,
        optimizer=optimizer,
        scaler=torch.amp.GradScaler("cuda", enabled=config.precision == "fp16"),
        generator=generator,
        config=config,
        ctx=ctx,
        device=device,
        autocast_dtype={"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision),
        debias=debias,
    )


def _run_info(
    trainer: _Trainer,
    train: RankingData | ShardStream,
    valid: RankingData,
    train_init_scores: np.ndarray | None,
    valid_init_scores: np.ndarray | None,
) -> dict[str, Any]:
    """What identifies the run in its saved state (checked on resume)."""
    settings = dataclasses.asdict(trainer.config)
    for key in ("max_memory_bytes", "release_memory"):  # change no number: a run may resume under others
        del settings[key]
    return {
        "model": trainer.model.name,
        "train_config": settings,
        "world_size": trainer.ctx.world_size,
        "train_data": (
            train.fingerprint() if isinstance(train, ShardStream) else fingerprint(train, train_init_scores)
        ),
        "valid_data": fingerprint(valid, valid_init_scores),
    }


def _restore_state(
    trainer: _Trainer, state: _Progress, store: StateDir, run_info: dict[str, Any], resume: bool
) -> None:
    """With ``resume``: load the saved state (if any) into the model, Adam, the scaler, the RNGs and
    ``state``. Without: refuse a directory that holds another run's state."""
    saved = store.load() if resume else None
    if saved is None and not resume and store.exists():
        raise ValueError(
            f"{store.manifest} holds the training state of another run: resume it (resume=True, "
            "`ctxrank train --resume`) or remove it"
        )
    if saved is None:
        return
    check_same_run(saved.run, run_info, store.manifest)
    try:
        _load_weights(trainer, saved.model)
    except RuntimeError as exc:
        raise ValueError(f"{store.directory}: saved weights do not fit the model ({exc})") from None
    opt_state = trainer.optimizer.state_dict()
    opt_state["state"] = saved.optimizer
    trainer.optimizer.load_state_dict(opt_state)
    if saved.scaler:
        trainer.scaler.load_state_dict(saved.scaler)
    trainer.generator.bit_generator.state = saved.numpy_rng
    torch.set_rng_state(saved.torch_rng[trainer.ctx.rank])
    if saved.cuda_rng is not None and trainer.device.type == "cuda":
        torch.cuda.set_rng_state(saved.cuda_rng[trainer.ctx.rank], trainer.device)
    state.history = saved.history
    state.best_metric, state.best_epoch, state.bad_epochs = (
        saved.best_metric,
        saved.best_epoch,
        saved.bad_epochs,
    )
    state.best_state = {k: v.to(trainer.device) for k, v in saved.best.items()}
    state.resumed_from = saved.epoch
    state.start = trainer.config.max_epochs + 1 if saved.stopped else saved.epoch + 1


def _open_log(log_path: str | Path | None, state: _Progress, resume: bool) -> IO[str] | None:
    """The JSON-lines epoch log; a resumed run rewrites it from the saved history first (empty when
    the run was killed before its first epoch's state was committed: that epoch is logged once)."""
    if log_path is None:
        return None
    log = Path(log_path).open("w" if resume else "a")
    for record in state.history:  # the finished epochs again: a killed run may have logged one more
        log.write(dumps(record, indent=None) + "\n")
    return log


def _epoch_batches(
    trainer: _Trainer, train: RankingData | ShardStream, train_init_scores: np.ndarray | None, epoch: int
) -> Iterator[ListBatch]:
    """This rank's shuffled training batches of ``epoch``. In memory, under torchrun, its queries come
    from ``DistributedSampler``; a stream reads this rank's own shards, as many steps as the largest
    rank's (every rank must step together)."""
    config, ctx = trainer.config, trainer.ctx
    bucket = batching(trainer.model, config) == "buckets"
    if isinstance(train, ShardStream):
        steps = None
        if ctx.enabled:
            mine = torch.tensor([train.steps(config.batch_size)], dtype=torch.int64)
            steps = max(int(t.item()) for t in ctx.all_gather(mine, trainer.device))
        return train.batches(config.batch_size, trainer.generator, bucket=bucket, steps=steps)
    part, part_init = train, train_init_scores
    if ctx.enabled:  # DistributedSampler: this rank's queries, reshuffled every epoch
        queries = ctx.shard(train.n_queries, seed=config.seed, epoch=epoch, shuffle=True)
        part, part_init = train.subset(queries), _subset_scores(train_init_scores, train, queries)
    return iterate_batches(
        part,
        config.batch_size,
        shuffle=True,
        generator=trainer.generator,
        bucket=bucket,
        init_scores=part_init,
    )


def _train_epoch(
    trainer: _Trainer,
    state: _Progress,
    train: RankingData | ShardStream,
    train_init_scores: np.ndarray | None,
    epoch: int,
    store: StateDir | None,
) -> float:
    """One pass over this rank's shuffled training queries; the mean training loss over all ranks."""
    config, ctx, device = trainer.config, trainer.ctx, trainer.device
    trainer.model.train()
    total, n_lists = 0.0, 0
    batches = _epoch_batches(trainer, train, train_init_scores, epoch)
    for i, batch in enumerate(batches):
        batch = _with_input_noise(batch.to(device), config.input_noise)
        dtype = trainer.autocast_dtype
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = trainer.step(batch)
        _check_finite(trainer, state, loss, epoch, i, batch, store)
        _optimizer_step(trainer, loss)
        total += loss.item() * batch.batch_size
        n_lists += batch.batch_size
        if config.release_memory == "step":  # the step's freed activations (train.release_memory)
            release_free_memory()
    total, n_lists = ctx.all_reduce_sum(np.array([total, n_lists]), device)
    return float(total / max(n_lists, 1))


def _with_input_noise(batch: Any, sigma: float) -> Any:
    """The batch with ``N(0, sigma^2)`` noise added to the features of its real items (``train.input_noise``;
    padding stays 0). Drawn from torch's global generator, which ``fit`` seeds and the resumable state
    saves, so runs stay reproducible and a resumed run draws the same noise."""
    if sigma == 0:
        return batch
    noise = torch.randn(batch.features.shape, dtype=batch.features.dtype, device=batch.features.device)
    noise = torch.where(batch.mask[..., None], noise * sigma, torch.zeros((), dtype=noise.dtype))
    return dataclasses.replace(batch, features=batch.features + noise)


def _check_finite(
    trainer: _Trainer,
    state: _Progress,
    loss: torch.Tensor,
    epoch: int,
    i: int,
    batch: Any,
    store: StateDir | None,
) -> None:
    """Raise NonFiniteLossError (after restoring the best weights) when any rank's loss is NaN/inf."""
    finite = torch.isfinite(loss.detach())
    ctx = trainer.ctx
    if ctx.enabled:  # every rank must take the same decision
        finite = bool(ctx.all_reduce_sum(np.array([float(not finite)]), trainer.device)[0] == 0)
    if finite:
        return
    if state.best_state is not None:
        trainer.model.load_state_dict(state.best_state)
    kept = ""
    if store is not None and epoch > 1:
        kept = (
            f" The training state of epoch {epoch - 1} and the best weights (epoch "
            f"{state.best_epoch}) are kept in {store.directory}."
        )
    raise NonFiniteLossError(
        f"non-finite training loss ({loss.item()}) at epoch {epoch}, batch {i + 1} "
        f"(queries {batch.query_index[:5].tolist()}...); "
        "the model keeps its last good weights. "
        "Try a lower train.lr or train.clip_grad_norm." + kept
    )


def _optimizer_step(trainer: _Trainer, loss: torch.Tensor) -> None:
    """Backward (scaled under fp16), optional gradient clipping, Adam step."""
    optimizer, scaler = trainer.optimizer, trainer.scaler
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    if trainer.config.clip_grad_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), trainer.config.clip_grad_norm)
    scaler.step(optimizer)
    scaler.update()


def _subset_scores(scores: np.ndarray | None, data: RankingData, queries: np.ndarray) -> np.ndarray | None:
    return None if scores is None else np.asarray(scores)[data.query_rows(queries)]


def _validation_metric(
    trainer: _Trainer, valid: RankingData, init_scores: np.ndarray | None, objective: LogObjective | None
) -> float:
    """Mean validation metric; under torchrun each rank scores a disjoint shard and the sums are
    all-reduced (queries whose metric is NaN under ``no_relevant="skip"`` are left out). On a log
    validated by IPS (``objective``), the mean of the sessions' IPS terms, with the position tower's
    propensities of this epoch under ``train.debias = "dla"`` / ``"pal"``."""
    model, config, ctx, device = trainer.model, trainer.config, trainer.ctx, trainer.device
    queries = ctx.shard(valid.n_queries, seed=0, epoch=0, shuffle=False)
    part = valid if not ctx.enabled else valid.subset(queries)
    scores = predict(
        model,
        part,
        init_scores=_subset_scores(init_scores, valid, queries) if ctx.enabled else init_scores,
        batch_size=config.eval_batch_size,
        device=device,
        max_memory_bytes=config.max_memory_bytes,
    )
    if objective is not None and not objective.naive:
        per = _learned(trainer, objective).session_values(part, scores)
    else:
        per = evaluate_queries(
            scores, part.labels, part.query_offsets, [config.metric], no_relevant=config.no_relevant
        )[config.metric]
    ok = np.isfinite(per)
    total, count = ctx.all_reduce_sum(np.array([per[ok].sum(), ok.sum()]), device)
    return float(total / count) if count else float("nan")


def _learned(trainer: _Trainer, objective: LogObjective) -> LogObjective:
    """``objective`` with the position tower's propensities of now when it has none given."""
    if not objective.learned:
        return objective
    assert trainer.debias is not None and trainer.debias.tower is not None
    return objective.with_propensities(trainer.debias.tower.propensities().double().cpu().tolist())


def _select(trainer: _Trainer, state: _Progress, epoch: int, value: float) -> None:
    """Model selection: keep the weights of a new best epoch, else count an epoch without improvement."""
    improved = value > state.best_metric + trainer.config.min_delta or state.best_state is None
    if improved:
        state.best_metric, state.best_epoch, state.bad_epochs = value, epoch, 0
        state.best_state = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    else:
        state.bad_epochs += 1


def _log_epoch(
    state: _Progress,
    log: IO[str] | None,
    epoch: int,
    train_loss: float,
    value: float,
    metric: str,
    t_epoch: float,
    model: RankingModule,
) -> dict[str, Any]:
    """Append the epoch's record to the history and the JSON-lines log; ``weight_norm`` (the L2 norm of
    the trainable parameters after the epoch) tells a run whose weights stopped moving."""
    with torch.no_grad():
        norms = [p.detach().double().norm() for p in model.parameters() if p.requires_grad]
        weight_norm = float(torch.stack(norms).norm()) if norms else 0.0
    record = {
        "epoch": epoch,
        "train_loss": train_loss,
        f"valid_{metric}": value,
        "best_epoch": state.best_epoch,
        "weight_norm": weight_norm,
        "seconds": time.perf_counter() - t_epoch,
    }
    state.history.append(record)
    if log is not None:
        log.write(dumps(record, indent=None) + "\n")
        log.flush()
    return record


def _save_state(
    trainer: _Trainer, state: _Progress, store: StateDir, epoch: int, stop: bool, run_info: dict[str, Any]
) -> None:
    """Gather every rank's RNG state, then rank 0 writes the resumable state of ``epoch``."""
    ctx, device = trainer.ctx, trainer.device
    torch_rng = ctx.all_gather(torch.get_rng_state(), device)
    cuda_rng = None
    if device.type == "cuda":
        cuda_rng = ctx.all_gather(torch.cuda.get_rng_state(device), device)
    if not ctx.is_main:
        return
    store.save(
        TrainingState(
            epoch=epoch,
            model=_weights(trainer),
            best=state.best_state,
            best_epoch=state.best_epoch,
            best_metric=state.best_metric,
            bad_epochs=state.bad_epochs,
            stopped=stop,
            history=state.history,
            optimizer=trainer.optimizer.state_dict()["state"],
            numpy_rng=trainer.generator.bit_generator.state,
            torch_rng=torch_rng,
            cuda_rng=cuda_rng,
            scaler=trainer.scaler.state_dict(),
            run=run_info,
        )
    )


#: the prefix of the debiasing towers' weights in a saved training state (beside the model's)
_DEBIAS_PREFIX = "debias."


def _weights(trainer: _Trainer) -> dict[str, torch.Tensor]:
    """The model's weights, and the debiasing towers' under :data:`_DEBIAS_PREFIX` (resumable state)."""
    weights = dict(trainer.model.state_dict())
    if trainer.debias is not None:
        weights.update({_DEBIAS_PREFIX + k: v for k, v in trainer.debias.state_dict().items()})
    return weights


def _load_weights(trainer: _Trainer, weights: dict[str, torch.Tensor]) -> None:
    """Load :func:`_weights`' dict into the model and the debiasing towers."""
    towers = {k.removeprefix(_DEBIAS_PREFIX): v for k, v in weights.items() if k.startswith(_DEBIAS_PREFIX)}
    trainer.model.load_state_dict({k: v for k, v in weights.items() if not k.startswith(_DEBIAS_PREFIX)})
    if trainer.debias is not None:
        trainer.debias.load_state_dict(towers)
    elif towers:
        raise RuntimeError("the saved state holds debiasing towers (train.debias) this run does not train")


def _finish(trainer: _Trainer, state: _Progress, seconds: float, objective: LogObjective | None) -> FitResult:
    """Restore the best weights, move the model back to the CPU in eval mode, summarize; a stalled run
    and one cut by ``train.max_epochs`` while improving are warned about
    (:mod:`ctxrank.training.diagnostics`; rank 0 warns)."""
    model, config = trainer.model, trainer.config
    assert state.best_state is not None
    model.load_state_dict(state.best_state)
    model.to("cpu")  # checkpoints and predictions are device-independent
    model.eval()
    history = state.history
    shown = None if objective is None else objective.name
    found = (stalled(history, state.best_epoch), epoch_cap(history, config.max_epochs, config.metric, shown))
    problems = [f"{model.name}: {m}" for m in found if m]
    if trainer.ctx.is_main:
        report(problems, stacklevel=3)
    return FitResult(
        best_epoch=state.best_epoch,
        best_metric=state.best_metric,
        metric=config.metric,
        epochs_run=len(state.history),
        stopped_early=len(state.history) < config.max_epochs,
        seconds=seconds,
        history=state.history,
        resumed_from_epoch=state.resumed_from,
        batching=batching(model, config),
        warnings=problems,
        validation=None if objective is None else objective.describe(),
        validation_metric=shown,
        objective=None if objective is None else _learned(trainer, objective),
    )
