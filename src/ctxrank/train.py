"""Training and scoring of neural rankers.

:func:`fit` reads top to bottom: Adam, shuffled length-bucketed batches of queries, the model's
``training_loss``, optional gradient clipping, validation metric after every epoch, early stopping
with patience and ``min_delta``, best weights restored at the end. The test split never enters here.

Determinism: :func:`seed_everything` seeds torch; batch order comes from ``np.random.default_rng(seed)``;
with the same seed and thread count two runs on CPU give bitwise-equal weights and metrics (tested).

Devices and scale: ``train.device`` (``cpu``, ``cuda``, ``auto``) and ``train.precision`` (``fp32``,
``bf16``, ``fp16``); under ``torchrun`` the same :func:`fit` trains data-parallel with
``DistributedDataParallel`` (see :mod:`ctxrank.distributed`).

Crash safety: with ``state_dir`` :func:`fit` writes a resumable training state atomically after every
epoch (:mod:`ctxrank.resume`; rank 0 only) and, with ``resume=True``, continues from it: the final
weights, history and metrics are bitwise those of an uninterrupted run (same seed and thread count).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ctxrank.config import TrainConfig
from ctxrank.data.lists import iterate_batches, scatter_scores
from ctxrank.data.ranking_data import RankingData
from ctxrank.distributed import DistContext, resolve_device, world
from ctxrank.metrics import evaluate_queries
from ctxrank.models.base import Ranker

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "best_epoch": self.best_epoch,
            "best_valid_metric": self.best_metric,
            "metric": self.metric,
            "epochs_run": self.epochs_run,
            "stopped_early": self.stopped_early,
            "seconds": self.seconds,
            "resumed_from_epoch": self.resumed_from_epoch,
        }


def seed_everything(seed: int, threads: int | None = None) -> None:
    """Seed torch (CPU and CUDA) and optionally fix the CPU thread count."""
    torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)


def predict(
    model: Ranker,
    data: RankingData,
    *,
    init_scores: np.ndarray | None = None,
    batch_size: int = 512,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """Scores float64 [N] in the file order of ``data`` (no gradients, ``torch.inference_mode``)."""
    was_training = model.training
    model.eval()
    out = np.full(data.n_items, np.nan, dtype=np.float64)
    try:
        with torch.inference_mode():
            for batch in iterate_batches(data, batch_size, init_scores=init_scores):
                batch = batch.to(device)
                scores = model.score_batch(batch)
                scatter_scores(batch, scores.double().cpu(), data.n_items, out=out)
    finally:
        model.train(was_training)
    return out


def evaluate_model(
    model: Ranker,
    data: RankingData,
    metrics: Sequence[str] = ("ndcg@10",),
    *,
    init_scores: np.ndarray | None = None,
    batch_size: int = 512,
    **metric_options: Any,
) -> dict[str, np.ndarray]:
    """Per-query metric vectors of the model's scores on ``data``."""
    scores = predict(model, data, init_scores=init_scores, batch_size=batch_size)
    return evaluate_queries(scores, data.labels, data.query_offsets, metrics, **metric_options)


class _TrainingLoss(torch.nn.Module):
    """``forward(batch) -> model.training_loss(batch, loss_fn)``: the module DistributedDataParallel
    wraps, so that every parameter used by the loss (QILCM's confusion term, ARSM's surrogate) goes
    through DDP's forward and its gradients are all-reduced."""

    def __init__(self, model: Ranker, loss_fn: LossFn | None) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, batch: Any) -> torch.Tensor:
        return self.model.training_loss(batch, self.loss_fn)


def _subset_scores(scores: np.ndarray | None, data: RankingData, queries: np.ndarray) -> np.ndarray | None:
    return None if scores is None else np.asarray(scores)[data.query_rows(queries)]


def _validation_metric(
    model: Ranker,
    valid: RankingData,
    config: TrainConfig,
    init_scores: np.ndarray | None,
    ctx: DistContext,
    device: torch.device,
) -> float:
    """Mean validation metric; under torchrun each rank scores a disjoint shard and the sums are
    all-reduced (queries whose metric is NaN under ``no_relevant="skip"`` are left out)."""
    queries = ctx.shard(valid.n_queries, seed=0, epoch=0, shuffle=False)
    part = valid if not ctx.enabled else valid.subset(queries)
    scores = predict(
        model,
        part,
        init_scores=_subset_scores(init_scores, valid, queries) if ctx.enabled else init_scores,
        batch_size=config.eval_batch_size,
        device=device,
    )
    per = evaluate_queries(
        scores, part.labels, part.query_offsets, [config.metric], no_relevant=config.no_relevant
    )[config.metric]
    ok = np.isfinite(per)
    total, count = ctx.all_reduce_sum(np.array([per[ok].sum(), ok.sum()]), device)
    return float(total / count) if count else float("nan")


def fit(
    model: Ranker,
    loss_fn: LossFn | None,
    train: RankingData,
    valid: RankingData,
    config: TrainConfig,
    *,
    train_init_scores: np.ndarray | None = None,
    valid_init_scores: np.ndarray | None = None,
    log_path: str | Path | None = None,
    progress: bool = True,
    on_improve: Callable[[int, float], None] | None = None,
    state_dir: str | Path | None = None,
    resume: bool = False,
) -> FitResult:
    """Train ``model`` in place and restore its best validation weights.

    Args:
        model: a :class:`Ranker` (already built for ``train.n_features`` features).
        loss_fn: ``(scores, labels, mask) -> scalar`` ranking loss (e.g. ``ctxrank.losses.listnet``),
            or None for a model with its own objective (``model.own_objective``, e.g. ARSM-L2R);
            the model's ``training_loss`` decides how it is used.
        train, valid: normalized data; valid drives early stopping and model selection only.
        config: optimization settings (``TrainConfig``).
        train_init_scores, valid_init_scores: flat [N] initial scores for re-ranking models.
        log_path: a JSON-lines file receiving one record per epoch.
        progress: show a tqdm progress bar (loss and validation metric).
        on_improve: called with (epoch, metric) after each new best epoch (e.g. to save a checkpoint).
        state_dir: write a resumable training state here after every epoch (atomically; rank 0 only;
            see :mod:`ctxrank.resume`). A directory that already holds a state needs ``resume=True``.
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
    from tqdm.auto import tqdm

    if loss_fn is None and not model.own_objective:
        raise ValueError(f"{model.name} needs a loss function (it has no objective of its own)")
    ctx = world()
    device = resolve_device(config.device)
    if ctx.enabled and device.type == "cuda":
        device = torch.device("cuda", ctx.local_rank)
    if config.precision == "fp16" and device.type != "cuda":
        raise ValueError("train.precision='fp16' needs a CUDA device; use 'bf16' on CPU")
    seed_everything(config.seed, config.threads)
    generator = np.random.default_rng(config.seed)
    model.to(device)
    step: torch.nn.Module = _TrainingLoss(model, loss_fn)
    if ctx.enabled:
        from torch.nn.parallel import DistributedDataParallel

        step = DistributedDataParallel(step, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision)
    scaler = torch.amp.GradScaler("cuda", enabled=config.precision == "fp16")
    main = ctx.is_main
    history: list[dict[str, Any]] = []
    best_metric, best_epoch, best_state, bad_epochs = -math.inf, 0, None, 0
    store, run_info, start, resumed_from = None, {}, 1, None
    if state_dir is not None:
        from ctxrank.resume import StateDir, TrainingState, check_same_run, fingerprint

        store = StateDir(state_dir)
        run_info = {
            "model": model.name,
            "train_config": dataclasses.asdict(config),
            "world_size": ctx.world_size,
            "train_data": fingerprint(train, train_init_scores),
            "valid_data": fingerprint(valid, valid_init_scores),
        }
        saved = store.load() if resume else None
        if saved is None and not resume and store.exists():
            raise ValueError(
                f"{store.manifest} holds the training state of another run: resume it (resume=True, "
                "`ctxrank train --resume`) or remove it"
            )
        if saved is not None:
            check_same_run(saved.run, run_info, store.manifest)
            try:
                model.load_state_dict(saved.model)
            except RuntimeError as exc:
                raise ValueError(f"{store.directory}: saved weights do not fit the model ({exc})") from None
            opt_state = optimizer.state_dict()
            opt_state["state"] = saved.optimizer
            optimizer.load_state_dict(opt_state)
            if saved.scaler:
                scaler.load_state_dict(saved.scaler)
            generator.bit_generator.state = saved.numpy_rng
            torch.set_rng_state(saved.torch_rng[ctx.rank])
            if saved.cuda_rng is not None and device.type == "cuda":
                torch.cuda.set_rng_state(saved.cuda_rng[ctx.rank], device)
            history = saved.history
            best_metric, best_epoch, bad_epochs = saved.best_metric, saved.best_epoch, saved.bad_epochs
            best_state = {k: v.to(device) for k, v in saved.best.items()}
            resumed_from = saved.epoch
            start = config.max_epochs + 1 if saved.stopped else saved.epoch + 1
    log = None
    if log_path is not None and main:
        log = Path(log_path).open("w" if resumed_from is not None else "a")
        for record in history:  # the finished epochs again: a killed run may have logged one more
            log.write(json.dumps(record) + "\n")
    t_start = time.perf_counter()
    bar = tqdm(
        range(start, config.max_epochs + 1),
        desc=f"train {model.name}",
        unit="epoch",
        disable=not (progress and main),
    )
    try:
        for epoch in bar:
            model.train()
            t_epoch = time.perf_counter()
            total, n_lists = 0.0, 0
            part, part_init = train, train_init_scores
            if ctx.enabled:  # DistributedSampler: this rank's queries, reshuffled every epoch
                queries = ctx.shard(train.n_queries, seed=config.seed, epoch=epoch, shuffle=True)
                part, part_init = train.subset(queries), _subset_scores(train_init_scores, train, queries)
            batches = iterate_batches(
                part, config.batch_size, shuffle=True, generator=generator, init_scores=part_init
            )
            for i, batch in enumerate(batches):
                batch = batch.to(device)
                with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                    loss = step(batch)
                finite = torch.isfinite(loss.detach())
                if ctx.enabled:  # every rank must take the same decision
                    finite = bool(ctx.all_reduce_sum(np.array([float(not finite)]), device)[0] == 0)
                if not finite:
                    if best_state is not None:
                        model.load_state_dict(best_state)
                    kept = ""
                    if store is not None and epoch > 1:
                        kept = (
                            f" The training state of epoch {epoch - 1} and the best weights (epoch "
                            f"{best_epoch}) are kept in {store.directory}."
                        )
                    raise NonFiniteLossError(
                        f"non-finite training loss ({loss.item()}) at epoch {epoch}, batch {i + 1} "
                        f"(queries {batch.query_index[:5].tolist()}...); "
                        "the model keeps its last good weights. "
                        "Try a lower train.lr or train.clip_grad_norm." + kept
                    )
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                if config.clip_grad_norm is not None:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad_norm)
                scaler.step(optimizer)
                scaler.update()
                total += loss.item() * batch.batch_size
                n_lists += batch.batch_size
            total, n_lists = ctx.all_reduce_sum(np.array([total, n_lists]), device)
            value = _validation_metric(model, valid, config, valid_init_scores, ctx, device)
            improved = value > best_metric + config.min_delta or best_state is None
            if improved:
                best_metric, best_epoch, bad_epochs = value, epoch, 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                if on_improve is not None and main:
                    on_improve(epoch, value)
            else:
                bad_epochs += 1
            record = {
                "epoch": epoch,
                "train_loss": float(total / max(n_lists, 1)),
                f"valid_{config.metric}": value,
                "best_epoch": best_epoch,
                "seconds": time.perf_counter() - t_epoch,
            }
            history.append(record)
            if log is not None:
                log.write(json.dumps(record) + "\n")
                log.flush()
            bar.set_postfix(loss=f"{record['train_loss']:.4f}", **{config.metric: f"{value:.4f}"})
            stop = bad_epochs >= config.patience
            if store is not None:  # every rank's RNG state, then rank 0 writes
                torch_rng = ctx.all_gather(torch.get_rng_state(), device)
                cuda_rng = None
                if device.type == "cuda":
                    cuda_rng = ctx.all_gather(torch.cuda.get_rng_state(device), device)
                if main:
                    store.save(
                        TrainingState(
                            epoch=epoch,
                            model=model.state_dict(),
                            best=best_state,
                            best_epoch=best_epoch,
                            best_metric=best_metric,
                            bad_epochs=bad_epochs,
                            stopped=stop,
                            history=history,
                            optimizer=optimizer.state_dict()["state"],
                            numpy_rng=generator.bit_generator.state,
                            torch_rng=torch_rng,
                            cuda_rng=cuda_rng,
                            scaler=scaler.state_dict(),
                            run=run_info,
                        )
                    )
            if stop:
                break
    finally:
        bar.close()
        if log is not None:
            log.close()
    assert best_state is not None
    model.load_state_dict(best_state)
    model.to("cpu")  # checkpoints and predictions are device-independent
    model.eval()
    return FitResult(
        best_epoch=best_epoch,
        best_metric=best_metric,
        metric=config.metric,
        epochs_run=len(history),
        stopped_early=len(history) < config.max_epochs,
        seconds=time.perf_counter() - t_start,
        history=history,
        resumed_from_epoch=resumed_from,
    )
