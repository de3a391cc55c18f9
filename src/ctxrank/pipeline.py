"""One training run end to end, as ``ctxrank train`` and the experiment runner do it.

:func:`run_training` takes a resolved :class:`RunConfig` and the train/valid(/test) splits and:

* ``model`` a baseline (``config.BASELINE_MODELS``: ``lambdamart``, ``ranksvm``, ``adarank-map``,
  ``adarank-ndcg``): fits it alone on whole lists (it has its own feature handling; ``transform`` does
  not apply) and records its ``training_summary()`` (best iteration, chosen ``C``, kept rounds, ...);
* otherwise, when ``rerank.initial = "lambdamart"``: fits LambdaMART, scores every split (out-of-fold
  on train with ``rerank.crossfit = K``), keeps each query's top ``rerank.top_k`` and trains the
  neural re-ranker on those lists (``ctxrank.rerank``);
* otherwise: trains the neural model on whole lists.

The normalizer is fitted on the (prepared) training split only. The test split, when given, is
evaluated once at the end. With ``out`` the model is saved (``ctxrank.checkpoint``); a re-ranking
model keeps its initial ranker in ``out/initial`` and ``load_model(out)`` applies both.

With ``state_dir`` a neural model's training state is saved after every epoch and ``resume=True``
continues from it (``ctxrank.resume``). Everything before the neural training is recomputed on resume:
the normalizer and, for re-ranking, the initial ranker (LightGBM with ``deterministic=True``, the run's
seed and thread count: the same model and scores again). ``fit`` checks a fingerprint of the lists it
trains on, so a resume whose recomputed inputs differ is refused instead of continuing silently. A
baseline has no epochs: resuming it trains it again.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxrank.config import BASELINE_MODELS, RunConfig
from ctxrank.data.ranking_data import RankingData

EVAL_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
INITIAL_DIR = "initial"


@dataclass
class RunResult:
    """What a run produced. ``test_scores`` are full-query scores in the test file's row order."""

    config: RunConfig
    summary: dict[str, Any]
    test_scores: np.ndarray | None = None
    test_metrics: dict[str, np.ndarray] | None = None
    initial_test_metrics: dict[str, np.ndarray] | None = None
    predictor: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def _lambdamart(config: RunConfig, params: dict[str, Any]):
    from ctxrank.baselines.lambdamart import LambdaMART

    tc = config.train
    defaults = {"seed": tc.seed, "num_threads": tc.threads or 1}
    return LambdaMART(**{**defaults, **params})


def rerank_features(config: RunConfig) -> tuple[bool, bool]:
    """(rank_feature, score_feature): the config's choice, else the model's default."""
    from ctxrank.models import MODELS

    wanted = getattr(MODELS.get(config.model), "rerank_features", ())
    rr = config.rerank
    rank = rr.rank_feature if rr.rank_feature is not None else "rank" in wanted
    score = rr.score_feature if rr.score_feature is not None else "score" in wanted
    return rank, score


def run_training(
    config: RunConfig,
    train: RankingData,
    valid: RankingData,
    test: RankingData | None = None,
    *,
    out: str | Path | None = None,
    progress: bool = True,
    metrics: tuple[str, ...] = EVAL_METRICS,
    log: Any = None,
    initial: Any = None,
    train_initial_scores: np.ndarray | None = None,
    meta: dict[str, Any] | None = None,
    state_dir: str | Path | None = None,
    resume: bool = False,
) -> RunResult:
    """Train per ``config``; save to ``out`` when given; evaluate ``test`` once when given.

    ``meta``: extra JSON-ready entries for the saved ``ctxrank.json`` (``ctxrank train`` records the
    table spec and the data split there).

    ``initial`` (a fitted initial ranker) and ``train_initial_scores`` (e.g. out-of-fold scores) let
    several re-rankers share one initial ranker (the experiment runner and benchmarks do this).

    ``state_dir`` / ``resume``: passed to :func:`ctxrank.train.fit` (crash-safe per-epoch state).
    """
    from ctxrank.metrics import evaluate_queries, metric_convention

    say = log or (lambda *_: None)
    out = Path(out) if out is not None else None
    tc = config.train
    conv = metric_convention("standard", no_relevant=tc.no_relevant)
    t0 = time.perf_counter()

    def evaluate(scores: np.ndarray, data: RankingData) -> dict[str, np.ndarray]:
        return evaluate_queries(scores, data.labels, data.query_offsets, metrics, no_relevant=tc.no_relevant)

    baseline = BASELINE_MODELS.get(config.model)
    if baseline is not None:
        model = baseline.build(config.model_params, tc).fit(train, valid)
        summary = {**model.training_summary(), "seconds": time.perf_counter() - t0}
        if out is not None:
            model.save(out, run_config=config.to_dict())
            if meta:
                from ctxrank.checkpoint import update_meta

                update_meta(out, meta)
        result = RunResult(config=config, summary=summary, predictor=model)
        if test is not None:
            result.test_scores = model.predict(test)
            result.test_metrics = evaluate(result.test_scores, test)
        return result

    from ctxrank.checkpoint import TorchPredictor, save_checkpoint
    from ctxrank.data.transforms import make_transform
    from ctxrank.losses import get_loss
    from ctxrank.models import make_model
    from ctxrank.rerank import RerankPredictor, evaluation_target, prepare_split
    from ctxrank.train import fit, predict, seed_everything

    rr = config.rerank
    if not rr.initial:
        initial = None
    splits: dict[str, Any] = {}
    fit_train, fit_valid = train, valid
    train_init = valid_init = None
    if rr.initial:
        rank_f, score_f = rerank_features(config)
        say(
            f"initial ranker: LambdaMART, top {rr.top_k}"
            + (f", {rr.crossfit}-fold cross-fitting" if rr.crossfit else "")
        )
        if initial is None:
            initial = _lambdamart(config, dict(rr.initial_params)).fit(train, valid)
        if train_initial_scores is not None:
            train_scores = np.asarray(train_initial_scores, dtype=np.float64)
        elif rr.crossfit:
            from ctxrank.baselines.lambdamart import cross_fit_predict

            params = {k: v for k, v in initial.get_params().items() if k != "seed"}
            train_scores = cross_fit_predict(train, n_folds=rr.crossfit, seed=tc.seed, **params)
        else:
            train_scores = initial.predict(train)
        prep = functools.partial(prepare_split, k=rr.top_k, rank_feature=rank_f, score_feature=score_f)
        splits["train"] = prep(train, train_scores)
        splits["valid"] = prep(valid, initial.predict(valid))
        fit_train, fit_valid = splits["train"].top, splits["valid"].top
        train_init, valid_init = splits["train"].top_initial_scores, splits["valid"].top_initial_scores

    seed_everything(tc.seed, tc.threads)
    transform = make_transform(config.transform).fit(fit_train)
    model = make_model(
        config.model,
        fit_train.n_features,
        config.model_params,
        categorical_cardinalities=fit_train.categorical_cardinalities,
    )
    loss_fn = (
        None  # the model trains its own objective (e.g. ARSM-L2R)
        if model.own_objective
        else functools.partial(get_loss(config.loss_name), **config.effective_loss_params)
    )
    log_path = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        log_path = out / "train_log.jsonl"
        if not resume:  # a resumed fit rewrites it from the saved history
            log_path.unlink(missing_ok=True)
    fitted = fit(
        model,
        loss_fn,
        transform.transform(fit_train),
        transform.transform(fit_valid),
        tc,
        train_init_scores=train_init,
        valid_init_scores=valid_init,
        log_path=log_path,
        progress=progress,
        state_dir=state_dir,
        resume=resume,
    )
    summary = {**fitted.to_dict(), "seconds": time.perf_counter() - t0}
    rerank_meta = None
    if initial is not None:
        rank_f, score_f = rerank_features(config)
        rerank_meta = {
            "dir": INITIAL_DIR,
            "top_k": rr.top_k,
            "rank_feature": rank_f,
            "score_feature": score_f,
            "crossfit": rr.crossfit,
            "ideal": rr.ideal,
        }
    torch_predictor = TorchPredictor(
        model=model, transform=transform, config=config, meta={"n_features": fit_train.n_features}
    )
    predictor = torch_predictor if initial is None else RerankPredictor(initial, torch_predictor, rerank_meta)
    if out is not None:
        if initial is not None:
            initial.save(out / INITIAL_DIR, run_config=config.to_dict())
        save_checkpoint(
            out,
            model,
            config,
            transform,
            train_data=fit_train,
            summary=summary,
            conventions=conv.to_dict(),
            rerank=rerank_meta,
            extra=meta,
        )
    result = RunResult(config=config, summary=summary, predictor=predictor)
    if test is not None:
        if initial is None:
            result.test_scores = predict(model, transform.transform(test))
            result.test_metrics = evaluate(result.test_scores, test)
        else:
            init_scores = initial.predict(test)
            split = prepare_split(
                test,
                init_scores,
                k=rr.top_k,
                rank_feature=rerank_meta["rank_feature"],
                score_feature=rerank_meta["score_feature"],
            )
            top_scores = predict(model, transform.transform(split.top), init_scores=split.top_initial_scores)
            scores, data = evaluation_target(split, top_scores, rr.ideal)
            result.test_scores = scores if rr.ideal == "full" else None
            result.test_metrics = evaluate(scores, data)
            result.initial_test_metrics = evaluate(init_scores, test)
    return result
