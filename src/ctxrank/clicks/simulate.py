"""Simulating an interaction log from labelled data: the standard semi-synthetic protocol.

Joachims, Swaminathan & Schnabel (2017), "Unbiased learning-to-rank with biased feedback", and
Ai, Bi, Luo, Guo & Croft (2018), "Unbiased learning to rank with unbiased propensity estimation": a
logging ranker trained on a small fraction of the training queries with their true labels
(:func:`logging_scores`: LambdaMART on 1% of the queries) ranks every query; each session draws a query
(with replacement), shows its top ``k`` by the logging score, optionally randomised, and a click model
(:mod:`ctxrank.clicks.click_models`) draws the clicks from the true labels.

:func:`simulate_clicks` returns a :class:`ClickLog`: ``log``, a RankingData read like any logged table
(one query = one session, labels = clicks, ``shown_positions`` 1..k, ``group_ids`` = the original query
id, ``docids`` = the original docids or ``"<query>:<row in query>"``, the items' features), and beside it
``true_labels`` (aligned with the log's rows) for the full-information skyline
(:meth:`ClickLog.skyline`): never inside the log, so no reader can take them for a feature.

Randomness: session chunk ``c`` (``chunk_sessions`` sessions each) draws from
``np.random.default_rng([seed, c])``, so a log written in parts (:func:`write_log_parts`, resumable)
is the same, part for part, as the one made in memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ctxrank._io import atomic_write
from ctxrank.baselines.lambdamart import LambdaMART
from ctxrank.clicks.click_models import RELEVANCE_RULES, _ClickModel, label_relevance
from ctxrank.data.ranking_data import RankingData, require_ranking_data

__all__ = [
    "LOG_COLUMNS",
    "RANDOMIZATIONS",
    "ClickLog",
    "check_fraction",
    "check_options",
    "check_resumable",
    "log_frames",
    "logging_scores",
    "simulate_clicks",
    "write_log_parts",
]

#: the key columns of a written log, before the features
LOG_COLUMNS = ("session", "query", "item", "position", "click")
SORT_CELLS = 1 << 22  # sessions x list length sorted at once (bounds the memory of long lists)
MANIFEST = "manifest.json"  #: a directory of parts: its configuration and the parts written


@dataclass(frozen=True)
class ClickLog:
    """A simulated log and its truth.

    Attributes:
        log: the interaction log (see the module docstring); ``info`` holds the simulation's settings.
        true_labels: float32 (N,) the true label of each logged row (simulation only).
        source_rows: int64 (N,) each logged row's row in the labelled data.
        click_probability: float64 (N,) the click model's exact probability of the click on each logged
            row, given its session's shown list (``model.click_probability``): the truth the offline
            estimators are checked against.
        original_positions: int32 (N,) the 1-based position the logging ranker gave each row before the
            randomisation (``randomize``; the shown position without one): what a swap experiment
            records, and ``from_randomized(log, original_positions=...)`` reads.
    """

    log: RankingData
    true_labels: np.ndarray
    source_rows: np.ndarray
    click_probability: np.ndarray
    original_positions: np.ndarray

    def skyline(self) -> RankingData:
        """The log with its true labels: the full-information run on the same sessions."""
        return replace(self.log, labels=self.true_labels, info=dict(self.log.info))


def check_fraction(fraction: float) -> None:
    """Refuse a share of training queries for :func:`logging_scores` outside (0, 1]."""
    if isinstance(fraction, bool) or not (isinstance(fraction, float | int) and 0.0 < fraction <= 1.0):
        raise ValueError(
            f"the logging ranker's fraction of training queries must be in (0, 1], got {fraction!r}"
        )


def logging_scores(
    data: RankingData, *, fraction: float = 0.01, seed: int = 0, train: RankingData | None = None
) -> np.ndarray:
    """float64 (N,) scores of ``data`` by the standard logging ranker: LambdaMART (100 trees, no early
    stopping) trained on ``fraction`` of the queries of ``train`` (default ``data``), at least one,
    drawn without replacement from ``seed``.

    Raises:
        ValueError: ``fraction`` outside (0, 1].
    """
    check_fraction(fraction)
    train = data if train is None else train
    n = max(1, round(fraction * train.n_queries))  # the CLI's note says the same count
    picked = np.sort(np.random.default_rng([seed, 7]).choice(train.n_queries, n, replace=False))
    ranker = LambdaMART(n_estimators=100, early_stopping_rounds=None, min_data_in_leaf=1, seed=seed)
    return ranker.fit(train.subset(picked)).predict(data).astype(np.float64)


def _int(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


def check_options(
    *,
    sessions: int,
    top_k: int = 10,
    randomize: str = "none",
    shuffle_n: int | None = None,
    relevance: str = "exponential",
    chunk_sessions: int = 100_000,
) -> None:
    """Refuse bad options of :func:`simulate_clicks` before any work (the CLI calls it before reading).

    Raises:
        ValueError: naming the option, what was expected and what came.
    """
    _int("sessions", sessions, 1)
    _int("top_k", top_k, 1)
    _int("chunk_sessions", chunk_sessions, 1)
    if randomize not in RANDOMIZATIONS:
        raise ValueError(f"randomize must be one of {list(RANDOMIZATIONS)}, got {randomize!r}")
    if (randomize == "shuffle_top") != (shuffle_n is not None):
        raise ValueError(
            "shuffle_n (the n of the top n shuffled) goes with randomize='shuffle_top', and only with it"
        )
    if shuffle_n is not None:
        _int("shuffle_n", shuffle_n, 2)
    if relevance not in RELEVANCE_RULES:
        raise ValueError(f"relevance must be one of {list(RELEVANCE_RULES)}, got {relevance!r}")


def _checked_scores(data: RankingData, scores: Any, model: Any) -> np.ndarray:
    """float64 (N,) scores, after checking the data, the scores and the model."""
    require_ranking_data(data)
    if not isinstance(model, _ClickModel):
        raise TypeError(f"model must be a click model (click_model(name, ...)), got {type(model).__name__}")
    if data.shown_positions is not None:
        raise ValueError(
            f"{data.source}: is a log already (it has shown positions); simulate from labelled data"
        )
    s = np.asarray(scores, dtype=np.float64)
    if s.shape != (data.n_items,):
        raise ValueError(f"scores: expected one per row ({data.n_items},), got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError(f"scores: row {int(np.flatnonzero(~np.isfinite(s))[0])} is not finite")
    return s


def _max_label(data: RankingData, max_label: float | None) -> float:
    top = float(data.labels.max())
    if max_label is None:
        if top <= 0:
            raise ValueError(f"{data.source}: no item has a label above 0; nothing to click")
        return top
    if not max_label >= top:
        raise ValueError(f"max_label {max_label} is below the data's largest label {top}")
    return float(max_label)


def _shown(
    data: RankingData, scores: np.ndarray, queries: np.ndarray, k: int, tie_rng: np.random.Generator
) -> np.ndarray:
    """int64 (S, k) the row within its query shown at each position (top k by score, ties broken by
    uniform random keys drawn per session); -1 where the query has fewer rows."""
    lengths = data.query_lengths[queries]
    width = int(lengths.max())
    block = max(1, SORT_CELLS // width)
    shown = np.full((queries.size, k), -1, dtype=np.int64)
    col = np.arange(width)
    for lo in range(0, queries.size, block):
        q, n = queries[lo : lo + block], lengths[lo : lo + block]
        valid = col < n[:, None]
        rows = np.where(valid, data.query_offsets[q][:, None] + col, 0)
        neg = np.where(valid, -scores[rows], np.inf)  # padding sorts last
        order = np.lexsort((tie_rng.random(neg.shape), neg), axis=1)[:, :k]
        shown[lo : lo + block, : order.shape[1]] = np.where(order < n[:, None], order, -1)
    return shown


def _swap(perm: np.ndarray, n_shown: np.ndarray, shuffle_n: int | None, rng: np.random.Generator) -> None:
    rows = np.arange(perm.shape[0])
    other = (rng.random(rows.size) * n_shown).astype(np.int64)
    perm[rows, 0], perm[rows, other] = other, 0


def _swap_pair(
    perm: np.ndarray, n_shown: np.ndarray, shuffle_n: int | None, rng: np.random.Generator
) -> None:
    rows = np.arange(perm.shape[0])
    first = (rng.random(rows.size) * n_shown).astype(np.int64)
    second = (rng.random(rows.size) * np.maximum(n_shown - 1, 1)).astype(np.int64)
    second = np.where(n_shown > 1, second + (second >= first), first)
    perm[rows, first], perm[rows, second] = second, first


def _shuffle_top(
    perm: np.ndarray, n_shown: np.ndarray, shuffle_n: int | None, rng: np.random.Generator
) -> None:
    s, k = perm.shape
    top = np.minimum(n_shown, shuffle_n)[:, None]
    keys = np.where(np.arange(k) < top, rng.random((s, k)), np.arange(k) + 1.0)
    perm[:] = np.argsort(keys, axis=1, kind="stable")


#: ``randomize`` -> how it reorders ``perm`` (int64 (S, K), in place) given each row's shown count, the
#: ``shuffle_n`` and the generator. none; swap: the item at position 1 with one at a uniform position of
#: the shown list (the swap intervention of Joachims et al. 2017; position 1 drawn = no swap); swap_pair:
#: two distinct uniform positions (RandPair, Radlinski & Joachims 2006, "Minimally invasive randomization
#: for collecting unbiased preferences from clickthrough logs"); shuffle_top: a uniform permutation of
#: the top n
_RANDOMIZERS = {"none": None, "swap": _swap, "swap_pair": _swap_pair, "shuffle_top": _shuffle_top}
RANDOMIZATIONS = tuple(_RANDOMIZERS)


def _permutation(
    mask: np.ndarray, randomize: str, shuffle_n: int | None, rng: np.random.Generator
) -> np.ndarray:
    """int64 (S, K) the positions' new order (a permutation of the shown prefix of each row)."""
    s, k = mask.shape
    perm = np.broadcast_to(np.arange(k), (s, k)).copy()
    reorder = _RANDOMIZERS[randomize]
    if reorder is not None:
        reorder(perm, mask.sum(axis=1), shuffle_n, rng)
    return perm


def _chunk(
    data: RankingData,
    scores: np.ndarray,
    model: _ClickModel,
    sessions: int,
    first: int,
    rng: np.random.Generator,
    tie_rng: np.random.Generator,
    *,
    top_k: int,
    randomize: str,
    shuffle_n: int | None,
    relevance: str,
    max_label: float,
) -> ClickLog:
    queries = rng.integers(0, data.n_queries, sessions)
    shown = _shown(data, scores, queries, min(top_k, int(data.query_lengths.max())), tie_rng)
    mask = shown >= 0
    perm = _permutation(mask, randomize, shuffle_n, rng)  # row j shows the item the ranker put at perm[j]
    shown = np.take_along_axis(shown, perm, axis=1)
    source = np.where(mask, data.query_offsets[queries][:, None] + shown, 0)
    rel = np.where(mask, label_relevance(data.labels[source], max_label, relevance), 0.0)
    clicks = model.sample(rel, mask, rng)
    probability = model.click_probability(rel, mask)[mask]
    rows = source[mask]
    n_per = mask.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(n_per)]).astype(np.int64)
    if data.docids is not None:
        docids = data.docids[rows]
    else:
        docids = np.char.add(
            np.char.add(data.query_ids[queries].astype(str)[:, None], ":"), shown.astype(str)
        )[mask]
    log = RankingData(
        features=data.features[rows],
        labels=clicks[mask].astype(np.float32),
        query_ids=np.arange(first, first + sessions).astype(str),
        query_offsets=offsets,
        docids=docids,
        categorical=None if data.categorical is None else data.categorical[rows],
        feature_names=data.feature_names,
        categorical_names=data.categorical_names,
        categorical_cardinalities=data.categorical_cardinalities,
        source=f"clicks simulated from {data.source}",
        group_ids=data.query_ids[queries],
        shown_positions=np.broadcast_to(np.arange(1, mask.shape[1] + 1, dtype=np.int32), mask.shape)[mask],
    )
    original = (perm + 1).astype(np.int32)[mask]
    return ClickLog(log, data.labels[rows], rows.astype(np.int64), probability, original)


def simulate_clicks(
    data: RankingData,
    scores: Any,
    model: _ClickModel,
    *,
    sessions: int,
    top_k: int = 10,
    randomize: str = "none",
    shuffle_n: int | None = None,
    relevance: str = "exponential",
    max_label: float | None = None,
    seed: int = 0,
    chunk_sessions: int = 100_000,
    chunks: range | None = None,
    progress: bool = False,
) -> ClickLog:
    """A simulated log of ``sessions`` sessions over the labelled ``data``.

    Args:
        scores: (N,) the logging ranker's score of every row (e.g. :func:`logging_scores`); a query
            shows its rows by decreasing score, ties in a uniform random order drawn per session.
        model: a click model (:func:`ctxrank.clicks.click_models.click_model`).
        top_k: items shown per session (fewer when the query has fewer).
        randomize: one of :data:`RANDOMIZATIONS`, applied to every session's shown list;
            ``shuffle_n``: the n of ``shuffle_top``.
        relevance: the rule mapping labels to ``[0, 1]`` (:func:`label_relevance`), with ``max_label``
            (default: the data's largest label).
        chunks: the session chunks to make (default all); chunk c holds sessions
            ``c * chunk_sessions ..`` and draws from ``default_rng([seed, c])``.
        progress: a progress bar of the chunks made (tqdm, on stderr).

    Raises:
        TypeError / ValueError: bad arguments, naming them and what was expected.
    """
    opts = {"top_k": top_k, "randomize": randomize, "shuffle_n": shuffle_n, "relevance": relevance}
    check_options(sessions=sessions, chunk_sessions=chunk_sessions, **opts)
    s = _checked_scores(data, scores, model)
    top = _max_label(data, max_label)
    n_chunks = -(-sessions // chunk_sessions)
    if chunks is not None and (
        not isinstance(chunks, range) or not chunks or chunks[0] < 0 or chunks[-1] >= n_chunks
    ):
        raise ValueError(f"chunks must be a non-empty range within range(0, {n_chunks}), got {chunks!r}")
    parts = []
    for c in tqdm(range(n_chunks) if chunks is None else chunks, unit="chunk", disable=not progress):
        first = c * chunk_sessions
        rng, tie_rng = (np.random.default_rng(child) for child in np.random.SeedSequence([seed, c]).spawn(2))
        size = min(chunk_sessions, sessions - first)
        parts.append(_chunk(data, s, model, size, first, rng, tie_rng, **opts, max_label=top))
    log = (
        parts[0].log
        if len(parts) == 1
        else RankingData.concat([p.log for p in parts], source=parts[0].log.source)
    )
    settings = _settings(
        model, sessions=sessions, chunk_sessions=chunk_sessions, max_label=top, seed=seed, **opts
    )
    log = replace(log, info={"simulation": settings})
    return ClickLog(
        log,
        np.concatenate([p.true_labels for p in parts]),
        np.concatenate([p.source_rows for p in parts]),
        np.concatenate([p.click_probability for p in parts]),
        np.concatenate([p.original_positions for p in parts]),
    )


def _settings(model: _ClickModel, **options: Any) -> dict[str, Any]:
    """The simulation's settings, as JSON reads them back (tuples as lists)."""
    return json.loads(
        json.dumps({"click_model": {"name": model.name, **dataclasses.asdict(model)}, **options})
    )


def log_frames(clicks: ClickLog) -> tuple[Any, Any]:
    """``(log, truth)`` DataFrames: the log's columns :data:`LOG_COLUMNS` then the features (by name)
    and categorical codes; the truth's ``session, item, position, original_position, true_label,
    click_probability`` (the original position is the logging ranker's, before any randomisation: kept out
    of the log, whose every other column a reader takes as a feature).

    Raises:
        ValueError: a feature named like a key column.
    """
    log = clicks.log
    frame = log.to_frame(query="session", label="click", docid="item")
    clash = sorted({"query", "position"} & set(frame.columns))
    if clash:
        raise ValueError(f"features {clash} are named like columns of the log; rename them")
    session = frame.pop("session")
    item = frame.pop("item")
    click = frame.pop("click").astype(np.int8)
    keys = {
        "session": session,
        "query": np.repeat(log.group_ids, log.query_lengths),
        "item": item,
        "position": log.shown_positions,
        "click": click,
    }
    out = pd.concat([pd.DataFrame(keys), frame], axis=1)
    truth = pd.DataFrame(
        {
            "session": session,
            "item": item,
            "position": log.shown_positions,
            "original_position": clicks.original_positions,
            "true_label": clicks.true_labels,
            "click_probability": clicks.click_probability,
        }
    )
    return out, truth


def _fingerprint(data: RankingData, scores: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in (data.features, data.labels, data.query_offsets, scores):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _written_parts(target: Path, config: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    """The parts the manifest in ``target`` lists (none without one), after checking that it was
    written with ``config`` (the keys in ``skip`` not compared)."""
    manifest = target / MANIFEST
    if not manifest.exists():
        return []
    try:
        old = json.loads(manifest.read_text())
        old_config, parts = dict(old["config"]), [str(p) for p in old["parts"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{manifest} is not a click log's manifest ({exc}); give another directory"
        ) from None
    keys = {*old_config, *config} - set(skip)
    differ = sorted(k for k in keys if old_config.get(k) != config.get(k))
    if differ:
        raise ValueError(
            f"{target} holds a log of another configuration (differing: {', '.join(differ)}); give "
            "another directory, or the same options to resume it"
        )
    return parts


def check_resumable(
    out_dir: str | Path,
    model: _ClickModel,
    *,
    sessions: int,
    top_k: int = 10,
    randomize: str = "none",
    shuffle_n: int | None = None,
    relevance: str = "exponential",
    seed: int = 0,
    chunk_sessions: int = 100_000,
) -> None:
    """Refuse, before any work, a directory of parts (:func:`write_log_parts`) written with other
    options (the data and their largest label are compared when the data are read).

    Raises:
        ValueError: the differing options named, or a manifest ctxrank did not write.
    """
    options = {"top_k": top_k, "randomize": randomize, "shuffle_n": shuffle_n, "relevance": relevance}
    config = _settings(model, sessions=sessions, chunk_sessions=chunk_sessions, seed=seed, **options)
    _written_parts(Path(out_dir), config, skip=("data", "max_label"))


def write_log_parts(
    data: RankingData,
    scores: Any,
    model: _ClickModel,
    out_dir: str | Path,
    *,
    sessions: int,
    top_k: int = 10,
    randomize: str = "none",
    shuffle_n: int | None = None,
    relevance: str = "exponential",
    max_label: float | None = None,
    seed: int = 0,
    chunk_sessions: int = 100_000,
    progress: bool = False,
) -> list[Path]:
    """The log of :func:`simulate_clicks` as Parquet parts in ``out_dir``: ``part-NNNNN.parquet`` (the
    log, ``chunk_sessions`` sessions each) and ``truth-NNNNN.parquet`` beside each, with
    ``manifest.json`` (the configuration, the data's fingerprint and the parts written). A rerun skips
    the parts written and refuses another configuration or other data. Returns the parts written by
    this call (all of them: ``part-*.parquet`` in ``out_dir``).

    Raises:
        ValueError: bad options (as :func:`simulate_clicks`), or a manifest of another configuration
            (the differing keys named).
    """
    options = {"top_k": top_k, "randomize": randomize, "shuffle_n": shuffle_n, "relevance": relevance}
    check_options(sessions=sessions, chunk_sessions=chunk_sessions, **options)
    s = _checked_scores(data, scores, model)
    options.update(max_label=_max_label(data, max_label), seed=seed)
    config = _settings(model, sessions=sessions, chunk_sessions=chunk_sessions, **options)
    config["data"] = _fingerprint(data, s)
    target = Path(out_dir)
    manifest = target / MANIFEST
    done = _written_parts(target, config)
    n_chunks = -(-sessions // chunk_sessions)
    paths = [target / f"part-{c:05d}.parquet" for c in range(n_chunks)]

    def save() -> None:
        text = json.dumps({"config": config, "parts": done}, indent=1)
        atomic_write(manifest, lambda tmp: tmp.write_text(text))

    save()
    bar = tqdm(total=n_chunks, initial=len(done), unit="part", disable=not progress, dynamic_ncols=True)
    written = []
    for c, path in enumerate(paths):
        if path.name in done and path.exists():
            continue
        made = simulate_clicks(
            data,
            s,
            model,
            sessions=sessions,
            chunk_sessions=chunk_sessions,
            chunks=range(c, c + 1),
            **options,
        )
        frame, truth = log_frames(made)
        atomic_write(target / f"truth-{c:05d}.parquet", lambda tmp, t=truth: t.to_parquet(tmp, index=False))
        atomic_write(path, lambda tmp, f=frame: f.to_parquet(tmp, index=False))
        done += [] if path.name in done else [path.name]
        written.append(path)
        save()
        bar.update(1)
    bar.close()
    return written
