"""One training run end to end, as ``ctxrank train`` and the experiment runner do it.

:func:`run_training` takes a resolved :class:`RunConfig` and the train/valid(/test) splits and:

* fits the model its registry entry names (``entry.fit``): a baseline (``lambdamart``, ``ranksvm``,
  ``adarank-map``, ``adarank-ndcg``) fits itself alone on whole lists (it has its own feature handling;
  ``transform`` does not apply) and records its ``training_summary()`` (best iteration, chosen ``C``,
  kept rounds, ...); a neural model is handed :func:`_train_neural`, which
* when ``rerank.initial = "lambdamart"``: fits LambdaMART, scores every split (out-of-fold
  on train with ``rerank.crossfit = K``), keeps each query's top ``rerank.top_k`` and trains the
  neural re-ranker on those lists (``ctxrank.training.rerank``);
* otherwise trains the neural model on whole lists; a model with ``traits.full_batch`` (the
  conditional logit ``mnl``) is fitted to its maximum likelihood by ``ctxrank.training.full_batch``
  (SciPy, all situations at once) instead of SGD epochs.

``train.shuffle_items`` shuffles the items inside every training query first (seeded); without it, a
model that reads the row order (DCM, DLCM) gets a warning when the rows are sorted by a feature.

The normalizer is fitted on the (prepared) training split only. The test split, when given, is
evaluated once at the end. With ``out`` the model is saved (``ctxrank.training.checkpoint``); a re-ranking
model keeps its initial ranker in ``out/initial`` and ``load_model(out)`` applies both.

Data larger than memory: ``train`` may be a :class:`~ctxrank.data.stream.ShardStream` (Parquet shards
read a piece at a time; valid and test stay in memory). The normalizer is then fitted in one streaming
pass (``Transform.fit_stream``; under torchrun every rank reads its own shards and the statistics are
merged, so all ranks fit the same one) and the neural model trains on the stream. What needs the whole
training split in memory is refused with a message: a baseline (LambdaMART, RankSVM, AdaRank), an
initial ranker (``rerank.initial``), a full-batch fit (``mnl``) and ``train.shuffle_items``.

With ``state_dir`` a neural model's training state is saved after every epoch and ``resume=True``
continues from it (``ctxrank.training.resume``). Everything before the neural training is recomputed on
resume: the normalizer and, for re-ranking, the initial ranker (LightGBM with ``deterministic=True``, the
run's seed and thread count: the same model and scores again). ``fit`` checks a fingerprint of the lists
it trains on, so a resume whose recomputed inputs differ is refused instead of continuing silently. A
baseline has no epochs: resuming it trains it again.

:func:`run_training` reads as its steps, for every kind of model: the entry's ``fit`` (for a neural model
:func:`_train_neural`: :func:`_prepare_rerank`, the initial ranker and top-k lists when re-ranking, then
:func:`_fit_neural`, the normalizer, model, loss and ``fit``), :func:`save_result` and
:func:`_evaluate_test`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ctxrank._checks import OptionError
from ctxrank._io import atomic_write, dumps
from ctxrank.clicks.validation import LogObjective
from ctxrank.clicks.weighting import estimate_method
from ctxrank.config import RunConfig
from ctxrank.data.choice import shuffle_within_queries, sorted_feature_columns
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.stream import ShardStream
from ctxrank.data.transforms import Transform, make_transform
from ctxrank.fit_summary import FitSummary, TrainMetric
from ctxrank.losses import get_loss
from ctxrank.metrics import (
    CHOICE_METRICS,
    evaluate_queries,
    is_choice_data,
    mean_over_queries,
)
from ctxrank.models.base import RankingModule
from ctxrank.models.residual import Residual
from ctxrank.registry import Fitted, ModelEntry, get_model
from ctxrank.training.build import build_model, missing_handling, missing_problem
from ctxrank.training.checkpoint import TorchPredictor, save_ensemble
from ctxrank.training.curves import CURVES_FILE, plot_training_curves
from ctxrank.training.diagnostics import report, worse_than_initial
from ctxrank.training.distributed import resolve_device, world
from ctxrank.training.ensemble import EnsemblePredictor, member_dir
from ctxrank.training.full_batch import fit_full_batch
from ctxrank.training.loop import fit, seed_everything, validation_objective
from ctxrank.training.memory import check_model_size, check_training
from ctxrank.training.predict import predict
from ctxrank.training.rerank import (
    InitialRanker,
    RerankPredictor,
    RerankSplit,
    evaluation_target,
    prepare_split,
)
from ctxrank.training.rerank_spec import RerankSpec

__all__ = [
    "EVAL_METRICS",
    "INITIAL_DIR",
    "RunResult",
    "rerank_features",
    "run_training",
    "save_result",
    "validation_metric",
    "with_estimated_propensities",
]

EVAL_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
INITIAL_DIR = "initial"
PROPENSITY_FILE = "propensity.json"  #: a model directory's propensities estimated from its training log


@dataclass
class RunResult:
    """What a run produced. ``test_scores`` are full-query scores in the test file's row order.

    ``predictor``: a ``TorchPredictor``, a ``RerankPredictor`` or a fitted baseline (``.predict(data)``
    on raw data). ``history``: the per-epoch records of a neural fit (``train_log.jsonl``); a
    baseline's per-iteration validation metrics when it has them. ``layout``: the first query of the
    data the model was fitted on (feature names, categorical columns), what :func:`save_result` needs.
    """

    config: RunConfig
    summary: FitSummary
    test_scores: np.ndarray | None = None
    test_metrics: dict[str, np.ndarray] | None = None
    initial_test_metrics: dict[str, np.ndarray] | None = None
    predictor: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    layout: RankingData | None = None


@dataclass
class _Rerank:
    """The initial ranker of a re-ranking run and the train / valid splits prepared with it (their top-k
    copies, after the data the run's largest arrays, are dropped once the re-ranker is trained)."""

    initial: Any  # a fitted LambdaMART
    train: RerankSplit | None
    valid: RerankSplit | None
    spec: RerankSpec  # saved as ctxrank.json's "rerank"


def validation_metric(predictor: Any, valid: RankingData, config: RunConfig) -> float:
    """Mean ``train.metric`` of ``predictor``'s scores on ``valid`` (queries whose metric is NaN under
    ``no_relevant = "skip"`` left out; NaN when none is left): what ``ctxrank tune`` maximizes, and
    what a baseline's summary reports as ``train_metric``."""
    return _mean_metric(predictor.predict(valid), valid, config.train)


def rerank_features(config: RunConfig) -> tuple[bool, bool]:
    """(rank_feature, score_feature): the config's choice, else the model's default."""
    wanted = get_model(config.model).traits.rerank_features
    rr = config.rerank
    rank = rr.rank_feature if rr.rank_feature is not None else "rank" in wanted
    score = rr.score_feature if rr.score_feature is not None else "score" in wanted
    return rank, score


def check_reads_categorical(model: str, categorical: Sequence[str]) -> None:
    """ValueError when ``model`` is a baseline that reads no categorical columns and ``categorical``
    names some: trained without them, it would ignore them silently."""
    if categorical and not get_model(model).traits.reads_categorical:
        raise ValueError(
            f"{model} uses numeric features only and would ignore the categorical columns "
            f"{','.join(categorical)}: leave them out (or one-hot encode them into numeric columns), or "
            "train a model that reads them (lambdamart, or a neural model: mlp, qilcm, dcm, ...)"
        )



def _check_data(
    config: RunConfig,
    train: RankingData | ShardStream,
    valid: RankingData,
    test: RankingData | None,
    meta: dict[str, Any] | None,
    log: Any,
) -> dict[str, Any] | None:
    """The splits against what ``config``'s model reads, before any work: missing values (NaN) under
    ``train.missing`` (a stream reads a missing value as 0) and categorical columns; what is done with
    the missing cells is said (``log``) and returned in ``meta["missing"]``."""
    for split in (valid, test) if isinstance(train, ShardStream) else (train, valid, test):
        problem = missing_problem(config, split)
        if problem is not None:
            raise ValueError(problem)
    check_reads_categorical(config.model, tuple(getattr(train, "categorical_names", ()) or ()))
    handling = missing_handling(config, (train, valid, test))
    if handling is None:
        return meta
    if log is not None:
        log(handling["text"])
    return {**(meta or {}), "missing": handling}

def run_training(
    config: RunConfig,
    train: RankingData | ShardStream,
    valid: RankingData,
    test: RankingData | None = None,
    *,
    out: str | Path | None = None,
    progress: bool = True,
    metrics: tuple[str, ...] | None = None,
    log: Any = None,
    initial: InitialRanker | None = None,
    meta: dict[str, Any] | None = None,
    state_dir: str | Path | None = None,
    resume: bool = False,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> RunResult:
    """Train per ``config``; save to ``out`` when given; evaluate ``test`` once when given.

    ``metrics``: test metrics; None = ``metrics.CHOICE_METRICS`` (P@1, recall@3, MRR, log-likelihood)
    when every test query has exactly one item labelled 1 (choice data), else :data:`EVAL_METRICS`.

    ``meta``: extra JSON-ready entries for the saved ``ctxrank.json`` (``ctxrank train`` records the
    table spec and the data split there).

    ``initial``: the :class:`~ctxrank.training.rerank.InitialRanker` of a re-ranking run, to share one
    among several re-rankers (an experiment's runs, tune's trials: ``InitialRankers``); None: the one
    the config asks for (``InitialRanker.for_config``), fitted here.

    ``state_dir`` / ``resume``: passed to :func:`ctxrank.training.loop.fit` (crash-safe per-epoch state).

    ``on_epoch``: passed to :func:`ctxrank.training.loop.fit`, called with the epoch's record (``epoch``,
    ``train_loss``, ``valid_<metric>``, ...) after every epoch of a neural model (``ctxrank.tune`` prunes
    trials there, ``ctxrank.tracking.RunLog`` logs them); baselines have no epochs (their
    ``RunResult.history`` holds their iterations), and the members of an ensemble (``ensemble > 1``) are
    not reported.
    """
    out = Path(out) if out is not None else None
    t0 = time.perf_counter()
    if isinstance(train, ShardStream):
        check_streaming(config, train)
    meta = _check_data(config, train, valid, test, meta, log)
    given, (config, estimated) = config, with_estimated_propensities(config, train, log)
    entry = get_model(config.model)
    if metrics is None:  # the task's metrics: choice data (one chosen item a query) or graded relevance
        choice = test is not None and is_choice_data(test.labels, test.query_offsets)
        metrics = CHOICE_METRICS if choice else EVAL_METRICS
    evaluate = functools.partial(_evaluate, metrics=metrics, no_relevant=config.train.no_relevant)
    if config.ensemble > 1:
        members = _train_members(
            config,
            train,
            valid,
            out=out,
            progress=progress,
            metrics=metrics,
            log=log,
            initial=initial,
            meta=meta,
            state_dir=state_dir,
            resume=resume,
        )
        return _ensemble_result(
            config, members, valid, test, out=out, meta=meta, evaluate=evaluate, t0=t0, given=given,
            estimated=estimated,
        )  # fmt: skip
    train_neural = functools.partial(
        _train_neural,
        initial=initial,
        say=log or (lambda *_: None),
        out=out,
        progress=progress,
        state_dir=state_dir,
        resume=resume,
        on_epoch=on_epoch,
    )
    fitted = entry.fit(config, train, valid, train_neural=train_neural)
    result = RunResult(
        config=given,
        summary=dataclasses.replace(
            fitted.summary, seconds=time.perf_counter() - t0, propensity=_record(estimated)
        ),
        predictor=fitted.predictor,
        history=fitted.history,
        layout=fitted.layout,
    )
    if out is not None:
        save_result(result, out, meta=meta, write_log=False)  # a neural fit wrote train_log.jsonl as it went
    if test is not None:
        _evaluate_test(result, test, evaluate)
    return result


def with_estimated_propensities(
    config: RunConfig, train: RankingData | ShardStream, log: Any = None
) -> tuple[RunConfig, Any]:
    """``(config the fit reads, estimate)``: with ``train.propensity = "estimate:METHOD"``, the training
    log's propensities estimated first (:func:`ctxrank.clicks.estimate.estimate_propensities`, seeded by
    ``train.seed``) and ``config`` with their values (:func:`~ctxrank.clicks.estimate.training_curve`)
    for the IPS weights and the validation estimate; otherwise ``(config, None)``."""
    tc = config.train
    method = estimate_method(tc.propensity)
    if method is None:
        return config, None
    from ctxrank.clicks.estimate import estimate_propensities, training_curve

    made = estimate_propensities(train, method, seed=tc.seed)
    curve = training_curve(made, tc.propensity_clip)
    if log is not None:
        level = f"{made.confidence:.0%}"
        points = ", ".join(
            f"{k}: {v:.3f} [{lo:.3f}, {hi:.3f}]"
            for k, (v, lo, hi) in enumerate(zip(made.values, made.lower, made.upper, strict=True), 1)
        )
        log(
            f"propensities estimated from the training log by {method} ({made.sessions:,} sessions; "
            f"p_k / p_1 with {level} intervals): {points}"
        )
    return dataclasses.replace(config, train=dataclasses.replace(tc, propensity=curve)), made


def _record(estimated: Any) -> dict[str, Any] | None:
    """The fit summary's ``propensity``: the estimate as its JSON file holds it (None when given)."""
    return None if estimated is None else json.loads(estimated.to_json())


def _train_neural(
    entry: ModelEntry,
    config: RunConfig,
    train: RankingData | ShardStream,
    valid: RankingData,
    *,
    initial: InitialRanker | None,
    say: Callable[[str], None],
    **fit_options: Any,
) -> Fitted:
    """A neural entry's ``fit``: the order of the training items, the initial ranker's top-k lists when
    re-ranking, then the normalizer, model and training (:func:`_fit_neural`); the predictor applies the
    normalizer (and the initial ranker) to raw data."""
    train = _order_of_items(config, entry, train)
    rerank = _prepare_rerank(config, train, valid, initial, say) if config.rerank.initial else None
    model, transform, summary, history = _fit_neural(config, train, valid, rerank, **fit_options)
    fit_train = rerank.train.top if rerank is not None and rerank.train is not None else train
    layout = fit_train.first_query() if isinstance(fit_train, ShardStream) else fit_train.subset([0])
    predictor: Any = TorchPredictor(
        model=model, transform=transform, config=config, meta={"n_features": layout.n_features}
    )
    if rerank is not None:  # its top-k lists are freed on return
        predictor = RerankPredictor(rerank.initial, predictor, rerank.spec)
    return Fitted(predictor, summary, history, layout)


def check_streaming(config: RunConfig, stream: ShardStream) -> None:
    """What cannot train from a stream of shards (module docstring), or a shuffle buffer smaller than a
    batch: a ValueError saying why."""
    needs = None
    if not get_model(config.model).streams:
        needs = (
            f"{config.model} is a baseline fitted on the whole training split at once (LightGBM and the "
            "others read it in memory)"
        )
    elif config.rerank.initial:
        needs = (
            "re-ranking fits an initial ranker (LambdaMART) on the whole training split and cross-fits "
            "its scores"
        )
    elif config.fits_by_maximum_likelihood:
        needs = f"{config.model} is fitted to its maximum likelihood on all queries at once"
    elif config.train.shuffle_items:
        needs = (
            "train.shuffle_items shuffles the items of the training split in memory (shuffle them when "
            "writing the shards)"
        )
    if needs is not None:
        raise OptionError(
            "{train_shards} streams the training queries from disk, but {needs}: give {train_file:FILE} "
            "instead, or train a neural model (mlp, qilcm, dlcm, dcm, attn, ...) on the shards",
            needs=needs,
        )
    if config.train.batch_size > stream.shuffle_buffer:
        raise OptionError(
            "the shuffle buffer ({size} queries) must hold at least one batch "
            "(train.batch_size = {batch_size}): raise {shuffle_buffer}",
            size=stream.shuffle_buffer,
            batch_size=config.train.batch_size,
        )


def _train_members(config: RunConfig, train: RankingData, valid: RankingData, **kw: Any) -> list[RunResult]:
    """``config.ensemble`` runs with seeds ``train.seed + i`` (model directories ``out/member-i``, training
    states ``state_dir/member-i``); a re-ranking ensemble shares one initial ranker (the first seed's)."""
    out, state_dir, initial = kw.pop("out"), kw.pop("state_dir"), kw.pop("initial")
    if config.rerank.initial and initial is None:
        initial = InitialRanker.for_config(config)
    members = []
    for i in range(config.ensemble):
        tc = dataclasses.replace(config.train, seed=config.train.seed + i)
        result = run_training(
            dataclasses.replace(config, train=tc, ensemble=1),
            train,
            valid,
            None,
            out=None if out is None else out / member_dir(i),
            state_dir=None if state_dir is None else Path(state_dir) / member_dir(i),
            initial=initial,
            **kw,
        )
        members.append(result)
    return members


def _ensemble_result(
    config: RunConfig,
    members: list[RunResult],
    valid: RankingData,
    test: RankingData | None,
    *,
    out: Path | None,
    meta: dict[str, Any] | None,
    evaluate: Callable[[np.ndarray, RankingData], dict[str, np.ndarray]],
    t0: float,
    given: RunConfig,
    estimated: Any,
) -> RunResult:
    """The mean of the members' scores: its validation metric (full queries), saved directory, test.
    ``config``: what the members were fitted with; ``given``: the run's config as given (saved), which
    differs by estimated propensities (``estimated``)."""
    predictor = EnsemblePredictor([m.predictor for m in members])
    tc = config.train
    scores, objective = predictor.predict(valid), validation_objective(tc, None, valid)
    if objective is None or objective.naive:
        per = evaluate_queries(
            scores, valid.labels, valid.query_offsets, [tc.metric], no_relevant=tc.no_relevant
        )[tc.metric]
    else:  # a log validated by given propensities
        per = objective.session_values(valid, scores)
    summary = FitSummary(
        ensemble=config.ensemble,
        seeds=tuple(tc.seed + i for i in range(config.ensemble)),
        metric=tc.metric,
        best_valid_metric=float(np.nanmean(per)) if np.isfinite(per).any() else float("nan"),
        members=tuple(m.summary for m in members),
        seconds=time.perf_counter() - t0,
        validation=None if objective is None else objective.describe(),
        validation_metric=None if objective is None else objective.name,
        propensity=_record(estimated),
    )
    if out is not None:
        members_dirs = [member_dir(i) for i in range(len(members))]
        save_ensemble(out, given, members_dirs, predictor, summary.to_json(), meta)
        _save_propensity(out, summary)
    result = RunResult(config=given, summary=summary, predictor=predictor)
    if test is not None:
        _evaluate_test(result, test, evaluate)
    return result


#: how the warning of :func:`_order_of_items` starts (a trial of ``ctxrank tune`` after the first hides it)
ROW_ORDER_WARNING = "the items of every training query are sorted by"


def _order_of_items(config: RunConfig, entry: ModelEntry, train: Any) -> Any:
    """``train.shuffle_items``: the training rows of every query in a random order (seed
    ``train.seed``). Otherwise, for a model that reads the row order, a warning when the rows of every
    query are sorted by a feature (the order then tells the model that feature's rank)."""
    if isinstance(train, ShardStream):  # read from disk: refuse_streaming refused shuffle_items
        return train
    if config.train.shuffle_items:
        return shuffle_within_queries(train, config.train.seed)
    if entry.reads_row_order(config.model_params) and not config.rerank.initial:
        columns = sorted_feature_columns(train)
        if columns:
            warnings.warn(
                f"{ROW_ORDER_WARNING} {', '.join(columns)}; {config.model} "
                "reads the row order, so it can learn that order instead of the features (its scores "
                "change when the rows are shuffled). Set train.shuffle_items = true to train without it, "
                "or make sure the rows are in the order users saw them (docs/choice.md)",
                stacklevel=3,
            )
    return train


def _evaluate(
    scores: np.ndarray, data: RankingData, *, metrics: tuple[str, ...], no_relevant: float | str
) -> dict[str, np.ndarray]:
    return evaluate_queries(scores, data.labels, data.query_offsets, metrics, no_relevant=no_relevant)


def _prepare_rerank(
    config: RunConfig,
    train: RankingData,
    valid: RankingData,
    initial: InitialRanker | None,
    say: Callable[[str], None],
) -> _Rerank:
    """Fit (or take) the initial ranker, score train (out-of-fold with ``crossfit``) and valid, and keep
    each query's top k."""
    rr = config.rerank
    rank_f, score_f = rerank_features(config)
    say(
        f"initial ranker: LambdaMART, top {rr.top_k}"
        + (f", {rr.crossfit}-fold cross-fitting" if rr.crossfit else "")
    )
    ranker = InitialRanker.for_config(config) if initial is None else initial
    model = ranker.fit(train, valid)
    train_scores = ranker.train_scores(train, rr.crossfit)
    prep = functools.partial(prepare_split, k=rr.top_k, rank_feature=rank_f, score_feature=score_f)
    spec = RerankSpec(rr.top_k, rank_f, score_f, dir=INITIAL_DIR, crossfit=rr.crossfit, ideal=rr.ideal)
    return _Rerank(model, prep(train, train_scores), prep(valid, model.predict(valid)), spec)


def _fit_neural(
    config: RunConfig,
    train: RankingData,
    valid: RankingData,
    rerank: _Rerank | None,
    *,
    out: Path | None,
    progress: bool,
    state_dir: str | Path | None,
    resume: bool,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[RankingModule, Transform, FitSummary, list[dict[str, Any]]]:
    """Fit the normalizer on the (prepared) training split, build the model and its loss, train it.
    Returns the model, the normalizer, the summary and the per-epoch records."""
    tc = config.train
    fit_train, fit_valid = train, valid
    train_init = valid_init = None
    if rerank is not None:
        assert rerank.train is not None and rerank.valid is not None  # dropped only after this fit
        fit_train, fit_valid = rerank.train.top, rerank.valid.top
        train_init, valid_init = rerank.train.top_initial_scores, rerank.valid.top_initial_scores
    seed_everything(tc.seed, tc.threads)
    cards = fit_train.categorical_cardinalities
    device = resolve_device(tc.device)
    check_model_size(config, fit_train.n_features, cards, device)  # before building it
    transform = _fit_transform(config, fit_train, device)
    model = build_model(config, fit_train.n_features, cards)  # residual: a correction starting at 0
    loss_fn = _loss_of(config, model)
    # the top-k lists of a re-ranking run are gathered from the splits when read: a row-wise normalizer
    # goes with each read (nothing copied), a per-query one normalizes one copy of them in place; whole
    # lists are the caller's data: normalized into new arrays
    normalize = functools.partial(transform.transform, in_place=rerank is not None)
    if config.fits_by_maximum_likelihood:
        check_training(model, loss_fn, fit_train, tc, torch.device("cpu"), full_batch=True)
        fitted_mle = _fit_by_maximum_likelihood(
            config,
            model,
            normalize(fit_train),
            normalize(fit_valid),
            fit_valid,
            valid_init,
            reranks=rerank is not None,
        )
        return model, transform, fitted_mle, []  # no epochs
    log_path = None if out is None else _train_log(out, resume)
    if isinstance(fit_train, ShardStream):
        normalized = fit_train.with_transform(transform)  # each read normalized as it comes
    else:
        normalized = normalize(fit_train)
    fitted = fit(
        model,
        loss_fn,
        normalized,
        normalize(fit_valid),
        tc,
        train_init_scores=train_init,
        valid_init_scores=valid_init,
        log_path=log_path,
        progress=progress,
        state_dir=state_dir,
        resume=resume,
        on_epoch=on_epoch,
    )
    summary = fitted.summary()
    if rerank is not None:
        summary = _against_initial(
            summary, config, model, fit_valid, valid_init, summary.best_valid_metric, fitted.objective
        )
    # the model's whole config (defaults included: e.g. QILCM's confusion_direction) and the fit's
    # batching are recorded with the summary, so every result file names them
    model_config = json.loads(json.dumps(dataclasses.asdict(model.config), default=str))
    summary = dataclasses.replace(summary, model_config=model_config)
    return model, transform, summary, fitted.history


def _fit_transform(config: RunConfig, train: RankingData | ShardStream, device: torch.device) -> Transform:
    """The run's normalizer fitted on the (prepared) training split; a stream's in one pass over this
    rank's shards (under torchrun the ranks merge their statistics)."""
    transform = make_transform(config.transform)
    if isinstance(train, ShardStream):
        return transform.fit_stream(train.chunks(), merge=_all_gather(device))
    return transform.fit(train)


def _loss_of(config: RunConfig, model: RankingModule) -> Callable[..., torch.Tensor] | None:
    """The ranking loss the trainer minimizes, with its options; None for a model that trains its own
    objective (e.g. ARSM-L2R)."""
    if model.traits.own_objective:
        return None
    return functools.partial(get_loss(config.loss_name), **config.effective_loss_params)


def _train_log(out: Path, resume: bool) -> Path:
    """``out/train_log.jsonl``, removed unless the fit resumes (a resumed fit rewrites it from the saved
    history)."""
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    if not resume:
        log_path.unlink(missing_ok=True)
    return log_path


def _fit_by_maximum_likelihood(
    config: RunConfig,
    model: RankingModule,
    train: RankingData,
    valid: RankingData,
    raw_valid: RankingData,
    valid_init: np.ndarray | None,
    *,
    reranks: bool,
) -> FitSummary:
    """Fit ``model`` to its maximum likelihood on the normalized ``train`` (full batch) and return its
    summary; a re-ranker's also holds its ``train.metric`` on the ``valid`` lists and its comparison with
    the initial ranker's on the same lists."""
    tc = config.train
    fitted = fit_full_batch(model, train, valid)
    if reranks:  # its train.metric on the validation lists, as a baseline's summary has it
        scores = predict(
            model,
            valid,
            init_scores=valid_init,
            batch_size=tc.eval_batch_size,
            max_memory_bytes=tc.max_memory_bytes,
        )
        reranker = _mean_metric(scores, valid, tc)
        fitted = dataclasses.replace(fitted, train_metric=TrainMetric(tc.metric, reranker))
        fitted = _against_initial(fitted, config, model, raw_valid, valid_init, reranker)
    return fitted


def _all_gather(device: torch.device) -> Callable[[np.ndarray], list[np.ndarray]] | None:
    """Under torchrun: every rank's float64 vector, in rank order (a streaming fit's statistics)."""
    ctx = world()
    if not ctx.enabled:
        return None
    if ctx.world_size > 1 and device.type == "cuda":
        device = torch.device("cuda", ctx.local_rank)
    return lambda v: [t.numpy() for t in ctx.all_gather(torch.from_numpy(np.ascontiguousarray(v)), device)]


def _mean_metric(scores: np.ndarray, data: RankingData, tc: Any) -> float:
    """Mean ``train.metric`` of ``scores`` on ``data`` (:func:`ctxrank.metrics.mean_over_queries`)."""
    return mean_over_queries(scores, data, tc.metric, tc.no_relevant)


def _against_initial(
    summary: FitSummary,
    config: RunConfig,
    model: RankingModule,
    valid: RankingData,
    valid_init: np.ndarray,
    reranker: float,
    objective: LogObjective | None = None,
) -> FitSummary:
    """``summary`` with the initial scores' validation ``train.metric`` on the same top-k lists
    (``initial_valid_metric``), against the re-ranker's (``reranker``): a residual re-ranker that does
    not gain keeps the initial order; any other one that is worse is a :class:`TrainingWarning`. On a
    validation log, ``objective`` (the fit's) estimates both."""
    tc = config.train
    if objective is None or objective.naive:
        initial = _mean_metric(valid_init, valid, tc)
    else:
        initial = objective.value(valid, valid_init)
    summary = dataclasses.replace(summary, initial_valid_metric=initial)
    if config.rerank.residual:  # the model is a Residual correction of the initial scores
        summary = _keep_initial_if_better(model, initial, tc, summary)
        reranker = summary.best_valid_metric
    worse = worse_than_initial(reranker, initial, tc.metric, top_k=config.rerank.top_k, model=config.model)
    return summary.with_warnings(report([worse], stacklevel=4))


def _keep_initial_if_better(model: Residual, initial: float, tc: Any, summary: FitSummary) -> FitSummary:
    """Residual re-ranking departs from the initial order only where validation gains: when the best
    trained epoch does not beat the initial scores' validation metric (``initial``) by more than
    ``train.min_delta``, ``gate`` is set to 0 (the re-ranker then returns the initial scores) and the
    summary says epoch 0. The summary's ``residual`` records the choice."""
    keep = not summary.best_valid_metric > initial + tc.min_delta
    if keep:
        with torch.no_grad():
            model.gate.zero_()
        summary = dataclasses.replace(summary, best_epoch=0, best_valid_metric=initial)
    return dataclasses.replace(summary, residual={"initial_valid_metric": initial, "kept_initial": keep})


def save_result(
    result: RunResult, out: str | Path, *, meta: dict[str, Any] | None = None, write_log: bool = True
) -> Path:
    """Save a run's model directory (the one format of ``ctxrank train --out`` and the estimator API):
    the predictor's ``save_model_dir`` (a baseline's own files, a neural model's checkpoint, a re-ranking
    model's initial ranker in ``out/initial`` and checkpoint; ``ctxrank.json["training"]`` the
    summary), then ``train_log.jsonl`` (with ``write_log``) and ``training_curves.png`` from
    ``result.history``.

    ``meta``: extra JSON-ready entries for ``ctxrank.json`` (e.g. ``"table"``, ``"split"``). The caller
    has checked ``out`` (:func:`ctxrank._modeldir.claim_model_dir`: ``ctxrank train``, ``Ranker.save``)."""
    out, config = Path(out), result.config
    if result.layout is None:
        raise ValueError("this RunResult has no layout of its training data; it cannot be saved")
    summary = result.summary.to_json()
    result.predictor.save_model_dir(out, config, summary=summary, layout=result.layout, extra=meta)
    _save_propensity(out, result.summary)
    if write_log and result.history and "train_loss" in result.history[0]:
        text = "".join(dumps(r, indent=None) + "\n" for r in result.history)
        atomic_write(out / "train_log.jsonl", lambda tmp: tmp.write_text(text))
    unit = "epoch" if result.history and "train_loss" in result.history[0] else "iteration"
    plot_training_curves(
        result.history, out / CURVES_FILE, title=f"{config.model}: training curves", x_label=unit
    )
    return out


def _save_propensity(out: Path, summary: FitSummary) -> None:
    """``out/propensity.json``: the propensities estimated from the training log (the fit summary's
    ``propensity``), the file ``train.propensity`` and ``ctxrank clicks offline --propensity`` read."""
    if summary.propensity is not None:
        text = json.dumps(summary.propensity) + "\n"
        atomic_write(out / PROPENSITY_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _evaluate_test(
    result: RunResult, test: RankingData, evaluate: Callable[[np.ndarray, RankingData], dict[str, np.ndarray]]
) -> None:
    """Score ``test`` once with ``result.predictor`` into ``result``: a re-ranking run's top-k lists of the
    initial ranker, scored by the re-ranker, evaluated as ``rerank.ideal`` says, and the initial scores."""
    predictor, rr = result.predictor, result.config.rerank
    if not rr.initial:
        result.test_scores = predictor.predict(test)
        result.test_metrics = evaluate(result.test_scores, test)
        return
    split = predictor.prepare(test)
    scores, data = evaluation_target(split, predictor.top_scores(split), rr.ideal)
    result.test_scores = scores if rr.ideal == "full" else None
    result.test_metrics = evaluate(scores, data)
    result.initial_test_metrics = evaluate(split.initial_scores, test)
