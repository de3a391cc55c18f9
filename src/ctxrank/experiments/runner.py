"""Run an experiment: every model on every ``(seed, fold)`` run, stored as it finishes.

For each run the data are loaded once by the spec's ``DataSource``, as ``ctxrank train`` loads them
(the fold's files, or a random 60/20/20 query-level split drawn from the seed, as in the QILCM paper,
of one file, of synthetic data, or of every query of a registry dataset pooled under ``[data] protocol
= "random-splits"``), the initial LambdaMART is fitted once when the
protocol re-ranks (shared by every re-ranker of that run with default ``rerank.initial_params``), and
each model that has no stored result is trained with ``ctxrank.training.run.run_training`` and evaluated
once on the test split. A model with a grid (``[models.NAME.grid]``, ``ExperimentSpec.grids``) is
trained once per grid point on the training split, each point is scored on the validation split only,
and the best one is evaluated once on the test split; every point's validation score and the chosen
point are stored with the run. Per-query test metrics are written to the run store
(``ctxrank.experiments.store``) the moment a model's run ends, so a killed experiment resumes where it
stopped. On synthetic choice data the generator's own chooser is stored as the reference ``chooser``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ctxrank.clicks.simulate import logging_scores, simulate_clicks
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.sources import Columns, DataSource, TrainingData
from ctxrank.data.split import split_queries
from ctxrank.data.synth import LetorShape, synthetic_letor
from ctxrank.data.synth_choice import CATEGORICAL, FEATURES, make_choice_sessions
from ctxrank.experiments.anomaly import anomaly_scores, method_text
from ctxrank.experiments.provenance import code_version, run_context
from ctxrank.experiments.spec import REFERENCE, ExperimentSpec, err_max_label, in_spec_terms
from ctxrank.experiments.store import RunStore
from ctxrank.metrics import evaluate_queries
from ctxrank.training.build import missing_handling
from ctxrank.training.rerank import InitialRanker, InitialRankers
from ctxrank.training.run import run_training

__all__ = ["Unit", "load_unit", "pending_runs", "run_experiment"]


@dataclass
class Unit:
    """The data of one run: the three splits, where they came from, and reference test scores."""

    train: RankingData
    valid: RankingData
    test: RankingData
    split: dict[str, Any]
    reference_scores: np.ndarray | None = None
    #: ``[clicks]``: the true training and validation splits (``train`` and ``valid`` are then click
    #: logs simulated from them), for the skyline runs
    labelled: tuple[RankingData, RankingData] | None = None


class _Source:
    """What the runs of one experiment read: the spec's :class:`DataSource`; for synthetic choice data,
    the sessions generated once (a temporary table read as a data file) and the chooser's reference
    scores; for synthetic LETOR lists, the lists generated once per process (:func:`_letor_lists`)."""

    def __init__(self, spec: ExperimentSpec) -> None:
        self.spec = spec
        self._synthetic: tuple[DataSource, np.ndarray, dict[str, np.ndarray]] | None = None

    def data(self) -> DataSource:
        """The source split at random per run: the spec's file, or the synthetic sessions' table."""
        if not self.spec.synth:
            return self.spec.data
        if self._synthetic is None:
            sessions = make_choice_sessions(self.spec.sessions, seed=self.spec.synth_seed)
            self._tmp = tempfile.TemporaryDirectory()  # removed with this object
            path = str(Path(self._tmp.name) / "sessions.parquet")
            sessions.table.to_parquet(path)
            columns = Columns("session", "chosen", categorical=CATEGORICAL, numeric=FEATURES)
            source = dataclasses.replace(self.spec.data, data_file=path, columns=columns)
            reference = np.log(np.maximum(sessions.chooser_prob, 1e-300))
            rows = sessions.table.groupby(sessions.table["session"].astype(str), sort=False).indices
            self._synthetic = source, reference, rows
        return self._synthetic[0]

    def training(self, seed: int) -> TrainingData:
        """The run's random split of a file or of the synthetic data (``seed``), as ``ctxrank train
        --data FILE`` splits a file (:func:`~ctxrank.data.split.split_queries`)."""
        if self.spec.letor is None:
            return self.data().load_training(seed)
        full = _letor_lists(self.spec.letor, self.spec.synth_seed)
        train, valid, test, record = split_queries(full, self.spec.data.split_fractions, seed)
        return TrainingData(train, valid, test, f"{full.source} (random query split)", split=record)

    def reference_scores(self, test: RankingData) -> np.ndarray | None:
        """The synthetic chooser's log-probabilities of the rows of ``test`` (None for other data)."""
        if self._synthetic is None:
            return None
        _, reference, rows = self._synthetic
        return np.concatenate([reference[rows[str(q)]] for q in test.query_ids])


@functools.lru_cache(maxsize=1)
def _letor_lists(shape: LetorShape, seed: int) -> RankingData:
    """The synthetic lists of ``[data] synth = "letor"``, generated once per process (every run, and
    every unit of a worker process, splits the same lists; an MSLR-shaped 1/6 of WEB30K is about 600,000
    rows: hundreds of MB, not to be made again per run). Not to be modified: the runs share it."""
    return synthetic_letor(shape, seed)


def load_unit(spec: ExperimentSpec, seed: int, fold: int, source: _Source | None = None) -> Unit:
    """Train / valid / test of run ``(seed, fold)``, loaded by the spec's :class:`DataSource`: a
    registry fold, every query of a dataset pooled, or a file (or the synthetic sessions) split at
    random from ``seed``, as ``ctxrank train`` loads them. Errors name the spec's ``[data]`` keys."""
    unit = _labelled_unit(spec, seed, fold, source)
    return unit if spec.clicks is None else _click_unit(spec, unit, seed, fold)


def _labelled_unit(spec: ExperimentSpec, seed: int, fold: int, source: _Source | None) -> Unit:
    try:
        if spec.registry_folds:
            return _fold_unit(spec, seed, fold)
        source = source or _Source(spec)
        data = spec.data.load_pooled_split(seed) if spec.data.dataset else source.training(seed)
    except ValueError as exc:
        raise in_spec_terms(exc) from exc
    record = dict(data.split)
    if data.train.categorical is not None:
        record["categorical"] = "vocabulary re-fitted on the training split"
    return Unit(data.train, data.valid, data.test, record, source.reference_scores(data.test))


def _click_unit(spec: ExperimentSpec, unit: Unit, seed: int, fold: int) -> Unit:
    """``unit`` with its training and validation splits replaced by click logs simulated from them
    (``[clicks]``, :class:`~ctxrank.experiments.spec.ClicksSpec`), the true splits kept for the skyline.

    Computed again, identically, wherever the run's data are loaded (one process, worker processes, a
    resumed store): every random draw comes from ``[clicks] seed`` and the run's ``(seed, fold)``, so
    every model and method of a run learns from the same log (its ``sha256`` is in the split record).
    """
    c = spec.clicks
    assert c is not None
    train_seed, valid_seed, logging_seed = (
        int(s) % 2**31 for s in np.random.SeedSequence([c.seed, seed, fold]).generate_state(3)
    )
    top = err_max_label(spec)
    max_label = (
        float(top) if top is not None else float(max(unit.train.labels.max(), unit.valid.labels.max()))
    )
    options = {
        "top_k": c.top_k, "randomize": c.randomize, "shuffle_n": c.shuffle_n, "relevance": c.relevance,
        "max_label": max_label,
    }  # fmt: skip
    model = c.model()
    logs, record = [], {}
    sessions = {
        "train": c.sessions,
        "valid": max(1, round(c.sessions * unit.valid.n_queries / unit.train.n_queries)),
    }
    for name, data, log_seed in (("train", unit.train, train_seed), ("valid", unit.valid, valid_seed)):
        scores = logging_scores(data, fraction=c.logging_fraction, seed=logging_seed, train=unit.train)
        log = simulate_clicks(data, scores, model, sessions=sessions[name], seed=log_seed, **options).log
        clicked = np.add.reduceat(log.labels, log.query_offsets[:-1]) > 0
        log = log.subset(np.flatnonzero(clicked))  # a session without a click carries no signal
        record[name] = {
            "sessions": sessions[name],
            "sessions_with_clicks": int(clicked.sum()),
            "clicks": int(log.labels.sum()),
            "seed": log_seed,
            "sha256": _log_digest(log),
        }
        logs.append(log)
    record["logging_seed"] = logging_seed
    record["validation"] = (
        "the validation log (early stopping, grids, tuning), by each run's own objective: the IPS estimate "
        "of DCG@k for a debiased run, the clicks' metric for a naive one (its fit summary's validation)"
    )
    split = {**unit.split, "clicks": record}
    return dataclasses.replace(
        unit, train=logs[0], valid=logs[1], split=split, labelled=(unit.train, unit.valid)
    )


def _log_digest(log: RankingData) -> str:
    """SHA-256 of what a model learns from a log: features, clicks, sessions and shown positions."""
    h = hashlib.sha256()
    for a in (log.features, log.labels, log.query_offsets, log.shown_positions):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def click_method(spec: ExperimentSpec, model: str, config: Any) -> dict[str, str]:
    """What a ``[clicks]`` run learns from (``labels``: ``"clicks"`` or ``"true"``) and how (``method``:
    ``skyline``, ``naive``, or the debiasing, ``train.debias``)."""
    assert spec.clicks is not None
    labels = spec.clicks.labels(model)
    return {"labels": labels, "method": spec.clicks.method(labels == "true", config.train.debias)}


def _fold_unit(spec: ExperimentSpec, seed: int, fold: int) -> Unit:
    """Run ``(seed, fold)`` of a registry dataset's folds."""
    f = dataclasses.replace(spec.data, fold=fold).load_training(seed).fold
    method = "published fold" if spec.has_folds else f"random 60/20/20 split by person, seed {fold - 1}"
    split = {"method": method, "dataset": f.dataset, "fold": fold, "variant": f.variant}
    split["queries"] = {s: getattr(f, s).n_queries for s in ("train", "valid", "test")}
    return Unit(f.train, f.valid, f.test, split)


def pending_runs(
    spec: ExperimentSpec, store: RunStore, shard: tuple[int, int] | None = None
) -> list[tuple[int, int, str]]:
    """``(seed, fold, model)`` of every run without a stored result, in run order (of one shard)."""
    keys = shard_keys(spec.run_keys(), shard)
    return [(s, f, m) for s, f in keys for m in spec.run_names() if not store.has_run(m, s, f)]


def shard_keys(keys: list[tuple[int, int]], shard: tuple[int, int] | None) -> list[tuple[int, int]]:
    """The ``(seed, fold)`` runs of shard ``(k, n)``: every n-th run starting at the k-th (1-based).

    Shards are disjoint and cover every run, so ``n`` processes (or machines sharing a directory) given
    shards ``1/n .. n/n`` run each ``(seed, fold)`` exactly once; run files are written atomically under
    unique temporary names, so they can share one experiment directory.
    """
    if shard is None:
        return list(keys)
    k, n = shard
    if not (isinstance(k, int) and isinstance(n, int) and 1 <= k <= n):
        raise ValueError(f"shard must be K/N with 1 <= K <= N, got {k}/{n}")
    return [key for i, key in enumerate(keys) if i % n == k - 1]


def run_experiment(
    spec: ExperimentSpec,
    out: str | Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
    shard: tuple[int, int] | None = None,
    executor: Callable[..., None] | None = None,
) -> RunStore:
    """Run every pending ``(seed, fold, model)`` of ``spec`` into the store at ``out``; returns it.

    ``shard=(k, n)``: only the runs of shard k of n (:func:`shard_keys`), for parallel processes.
    ``executor``: runs the pending runs instead of this process's loop, e.g. on a Ray cluster
    (:mod:`ctxrank.experiments.executors`; None = here, one after the other).

    Raises:
        ValueError: ``out`` holds another experiment's runs, or a run fails (the message names it; the
            runs finished before it are kept).
    """
    keys = shard_keys(spec.run_keys(), shard)  # a bad shard is refused before anything is written
    store = RunStore(out)
    store.claim(spec)
    names = spec.run_names()
    todo = pending_runs(spec, store, shard)
    need_units = {(s, f) for s, f in keys if spec.anomaly and not store.has_unit(s, f)}
    total = len(keys) * len(names)
    log(
        f"{spec.name}: {len(names)} models x {len(keys)} runs"
        + (f" (shard {shard[0]}/{shard[1]} of the {len(spec.run_keys())} runs)" if shard else "")
        + f" on {spec.describe_data()}; {total - len(todo)} of {total} already stored in {store.root}"
    )
    code = code_version()
    source = _Source(spec)
    bar = tqdm(total=total, initial=total - len(todo), disable=not progress, unit="run", dynamic_ncols=True)
    try:
        if executor is not None:  # ctxrank.experiments.executors: stores each run as it comes back
            executor(spec, store, keys=keys, todo=todo, need_units=need_units, bar=bar)
            return store
        for seed, fold in keys:
            missing = [m for s, f, m in todo if (s, f) == (seed, fold)]
            if not missing and (seed, fold) not in need_units:
                continue
            unit = load_unit(spec, seed, fold, source)
            shared = InitialRankers(unit.train, unit.valid)
            for m in missing:
                bar.set_description(f"seed {seed} fold {fold} {m}")
                t0 = time.perf_counter()
                try:
                    record = _run_one(spec, m, seed, fold, unit, shared, store.root)
                except Exception as exc:
                    raise ValueError(f"run {m} seed {seed} fold {fold} failed: {exc}") from exc
                record["seconds"] = time.perf_counter() - t0
                record["code"] = code
                record["context"] = run_context(spec.train.threads, run_device(spec, m, seed))
                store.save_run(record)
                bar.update(1)
                shown = ", ".join(f"{k} {np.nanmean(v):.4f}" for k, v in list(record["metrics"].items())[:3])
                bar.write(f"  seed {seed} fold {fold} {m}: {shown} ({record['seconds']:.0f} s)")
            if (seed, fold) in need_units:
                store.save_unit(seed, fold, _anomaly_unit(spec, unit, shared, seed))
    finally:
        bar.close()
    return store


def run_device(spec: ExperimentSpec, name: str, seed: int) -> str:
    """The ``train.device`` of a run (``cpu`` for the synthetic data's reference chooser)."""
    return spec.run_config(name, seed).train.device if name in spec.models else "cpu"


def _initial_kw(config: Any, shared: InitialRankers) -> dict[str, Any]:
    """``run_training`` keywords: a re-ranker's initial ranker, shared by the run's re-rankers."""
    return {"initial": shared.for_config(config)} if config.rerank.initial else {}


def _evaluate(spec: ExperimentSpec, scores: np.ndarray, test: RankingData) -> dict[str, list[float]]:
    rep = spec.report
    per = evaluate_queries(
        scores,
        test.labels,
        test.query_offsets,
        list(rep.metrics),
        convention=rep.convention,
        no_relevant=rep.no_relevant,
        max_label=err_max_label(spec),
    )
    return {k: np.asarray(v, dtype=np.float64).tolist() for k, v in per.items()}


def _validation_score(config: Any, predictor: Any, valid: RankingData) -> float:
    """Mean ``train.metric`` of ``predictor`` on the validation split (full queries; queries without a
    relevant item scored ``train.no_relevant``): the grid's selection criterion."""
    metric, tc = config.train.metric, config.train
    per = evaluate_queries(
        predictor.predict(valid), valid.labels, valid.query_offsets, [metric], no_relevant=tc.no_relevant
    )
    values = np.asarray(per[metric], dtype=np.float64)
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")


def _select_on_validation(
    spec: ExperimentSpec,
    model: str,
    seed: int,
    train: RankingData,
    valid: RankingData,
    shared: InitialRankers,
) -> tuple[Any, Any, dict[str, Any]]:
    """Train every grid point of ``model`` on ``train``, score each on ``valid`` (the test split is not
    an argument: it cannot be read here); returns the best point's config, its ``RunResult`` and the
    grid record (every point's validation score, the chosen index and values)."""
    points, best = [], None
    for i, point in enumerate(spec.grids[model].points()):
        config = spec.run_config(model, seed, point)
        r = run_training(config, train, valid, None, progress=False, **_initial_kw(config, shared))
        score = _validation_score(config, r.predictor, valid)
        points.append({"values": point, "valid": score, "best_epoch": r.summary.best_epoch})
        if best is None or (np.isfinite(score) and not score <= best[0]):  # NaN never wins; ties: first
            best = (score if np.isfinite(score) else -np.inf, i, config, r)
    _, chosen, config, r = best
    record = {
        "metric": config.train.metric,
        "no_relevant": config.train.no_relevant,
        "axes": [name for name, _ in spec.grids[model].axes],
        "points": points,
        "chosen": chosen,
        "chosen_values": points[chosen]["values"],
    }
    return config, r, record


def _run_one(
    spec: ExperimentSpec, model: str, seed: int, fold: int, unit: Unit, shared: InitialRankers, root: Path
) -> dict[str, Any]:
    base = {"model": model, "seed": seed, "fold": fold, "query_ids": [str(q) for q in unit.test.query_ids]}
    if model == REFERENCE and spec.synth and model not in spec.models:
        return {**base, "metrics": _evaluate(spec, unit.reference_scores, unit.test), "reference": True}
    if spec.clicks is not None and unit.labelled is not None and spec.clicks.labels(model) == "true":
        unit = dataclasses.replace(unit, train=unit.labelled[0], valid=unit.labelled[1])  # the skyline
    tuned: dict[str, Any] = {}
    if model in spec.grids:
        config, r, grid = _select_on_validation(spec, model, seed, unit.train, unit.valid, shared)
        base["grid"] = grid
        if config.rerank.ideal == "full":  # the test split, once, for the chosen point
            r.test_scores = r.predictor.predict(unit.test)
    else:
        if spec.tune is not None:  # the study validates the run config (once)
            config, tuned["tune"] = _tuned(spec, model, seed, fold, unit, shared, root)
        else:
            config = spec.run_config(model, seed)
        kw = _initial_kw(config, shared)
        r = run_training(config, unit.train, unit.valid, unit.test, progress=False, **kw)
    if r.test_scores is None:
        raise ValueError("rerank.ideal = 'top-k' runs cannot be stored by an experiment (no full scores)")
    missing = missing_handling(config, (unit.train, unit.valid, unit.test))
    return {
        **base,
        "metrics": _evaluate(spec, r.test_scores, unit.test),
        "summary": r.summary.to_json(),
        "config": config.to_dict(),
        "split": unit.split,
        **({"missing": missing} if missing is not None else {}),  # what was done with the missing cells
        **({"clicks": click_method(spec, model, config)} if spec.clicks is not None else {}),
        **tuned,
    }


def _tuned(
    spec: ExperimentSpec, model: str, seed: int, fold: int, unit: Unit, shared: InitialRankers, root: Path
) -> tuple[Any, dict[str, Any]]:
    """``[tune]``: search the model's configuration on the run's train / valid splits (the study in
    ``OUT/tune/MODEL/seedS-foldF`` resumes to its budget); the chosen config and what to record."""
    from ctxrank.tune import finished_trials, tune

    assert spec.tune is not None
    where = RunStore(root).study_path(model, seed, fold)
    result = tune(
        spec.run_dict(model, seed),
        unit.train,
        unit.valid,
        out=where,
        trials=spec.tune.trials,
        total=True,
        seed=spec.tune.seed,
        prune=spec.tune.prune,
        describe=f"seed {seed} fold {fold}" if fold else f"seed {seed} (random split)",
        initials=shared,
    )
    if result.best is None:
        raise ValueError(f"tuning found no configuration: no trial of {where / 'study.db'} completed")
    best = result.study.best_trial
    record = {
        "trials": finished_trials(result.study),
        "best_trial": best.number,
        "best_valid": best.value,
        "metric": result.best.train.metric,
        "params": best.params,
        "dir": str(where.relative_to(root)),
        "seed": spec.tune.seed,
    }
    # the chosen configuration, as a seed ensemble (trials were single models); a maximum-likelihood fit
    # does not depend on the seed: it stays one model, the ensemble's scores
    if spec.tune.ensemble > 1 and not result.best.fits_by_maximum_likelihood:
        return dataclasses.replace(result.best, ensemble=spec.tune.ensemble), record
    return result.best, record


def _anomaly_unit(spec: ExperimentSpec, unit: Unit, shared: InitialRankers, seed: int) -> dict[str, Any]:
    a = spec.anomaly
    initial = shared.get(InitialRanker(seed, spec.train.threads))  # the protocol's default LambdaMART
    scores = anomaly_scores(
        unit.train,
        initial.train_scores(unit.train, 0),
        unit.test,
        initial.model.predict(unit.test),
        top=a.top,
        n_estimators=a.n_estimators,
        seed=seed,
    )
    return {
        "seed": seed,
        "query_ids": [str(q) for q in unit.test.query_ids],
        "anomaly_score": scores.tolist(),
        "method": method_text(a.top, a.n_estimators),
    }
