"""``ctxrank clicks propensity LOG ... --out FILE`` (position propensities estimated from an interaction
log, :mod:`ctxrank.clicks.propensity`) and ``ctxrank clicks offline LOG (--model DIR | --scores FILE)
--propensity FILE`` (IPS and SNIPS estimates of a ranker's click metric from the log,
:mod:`ctxrank.clicks.offline`), each with its bootstrap intervals over sessions."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ctxrank._checks import OptionError
from ctxrank._declare import from_namespace
from ctxrank._io import atomic_write
from ctxrank.cli._options import (
    SCORING_SKIP,
    add_data_source,
    add_json,
    add_model_dir,
    add_threads,
    key_value_lines,
    note,
    out,
    positive_int,
    print_json,
    seed_int,
    table,
)
from ctxrank.cli._outputs import check_output_file
from ctxrank.cli._scoring import load_for_scoring
from ctxrank.clicks import offline as off
from ctxrank.clicks import propensity as prop
from ctxrank.config import read_propensity_file
from ctxrank.data.scores import read_scores
from ctxrank.data.sources import DataSource
from ctxrank.data.table import is_table_path, table_columns
from ctxrank.data.table_io import from_file_order, to_file_order

#: ``--method``: the estimators of :mod:`ctxrank.clicks.propensity` (``from_randomized``, ...)
METHODS = ("randomized", "harvesting", "regression-em")
#: what reads a log's sessions, clicks and shown positions, as ``synth clicks`` writes it
LOG_COLUMNS_TEXT = (
    "--query-col the session, --label-col the click, --position-col the shown position; --group-col the "
    "logged query and --docid-col the item, which harvesting needs: what `synth clicks` writes"
)


def propensity(
    source: DataSource,
    *,
    method: str,
    out_file: str,
    ranker_col: str | None = None,
    original_position_col: str | None = None,
    positions: int | None = None,
    min_sessions: int | None = None,
    resamples: int | None = None,
    confidence: float = 0.95,
    seed: int = 0,
    overwrite: bool = False,
    json: bool = False,
) -> int:
    """Estimate the log's propensities by ``method`` and write them to ``out_file`` (JSON, read by
    ``train.propensity`` and ``clicks offline --propensity``); ``resamples`` None: the estimator's
    default bootstrap size. Every option is checked before the log is read."""
    if method not in METHODS:
        raise ValueError(f"--method: expected one of {', '.join(METHODS)}, got {method!r}")
    if (ranker_col is not None) != (method == "harvesting"):
        raise ValueError(
            "--method harvesting needs --ranker-col COL (the logging ranker of each session)"
            if ranker_col is None
            else f"--ranker-col is read by --method harvesting only (not {method})"
        )
    if original_position_col is not None and method != "randomized":
        raise ValueError(f"--original-position-col is read by --method randomized only (not {method})")
    if min_sessions is not None and method != "randomized":
        raise ValueError(f"--min-sessions is read by --method randomized only (not {method})")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"--confidence: expected a level in (0, 1), got {confidence}")
    check_output_file(out_file, overwrite=overwrite, flag="--out")
    extra = [c for c in (ranker_col, original_position_col) if c is not None]
    log, per_row = _read_log(source, extra)
    options: dict[str, Any] = {"n_positions": positions, "confidence": confidence, "seed": seed}
    if resamples is not None:
        options["n_resamples"] = resamples
    if method == "randomized":
        original = None if original_position_col is None else per_row[original_position_col]
        if original is not None and not np.issubdtype(original.dtype, np.integer):
            raise ValueError(f"--original-position-col {original_position_col}: expected integer positions")
        if min_sessions is not None:
            options["min_sessions"] = min_sessions
        made = prop.from_randomized(log, original_positions=original, **options)
    elif method == "harvesting":
        made = prop.from_harvesting(log, _per_session(log, per_row[ranker_col], ranker_col), **options)
    else:
        made = prop.from_regression_em(log, **options).propensities
    text = made.to_json()
    atomic_write(Path(out_file), lambda tmp: tmp.write_text(text + "\n", encoding="utf-8"))
    if json:
        print_json({"out": out_file, **dataclasses.asdict(made)})
        return 0
    out(f"log     {log.source} ({log.n_queries:,} sessions, {log.n_items:,} rows)")
    out(f"method  {method} ({made.sessions:,} sessions used), relative to position 1")
    out()
    level = f"{made.confidence:.0%} interval"
    rows = [
        (k, f"{v:.4f}", f"[{lo:.4f}, {hi:.4f}]")
        for k, (v, lo, hi) in enumerate(zip(made.values, made.lower, made.upper, strict=True), 1)
    ]
    out(table(("position", "propensity", level), rows, right=(0, 1)))
    out()
    out(f"wrote {out_file}: train with --debias ips --propensity {out_file}")
    return 0


def offline(
    source: DataSource,
    *,
    propensity_file: str,
    model: str | None = None,
    scores: str | None = None,
    metric: str = "clicks",
    k: int = 10,
    clip: float | None = None,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    threads: int | None = None,
    json: bool = False,
) -> int:
    """IPS and SNIPS estimates of the ``metric`` @ ``k`` of a ranker (a saved ``model`` or a ``scores``
    file, one score per log row) from the log, with ``propensity_file``'s propensities."""
    if (model is None) == (scores is None):
        raise ValueError("give exactly one of --model DIR or --scores FILE (the ranker to evaluate)")
    if metric not in off.METRICS:
        raise ValueError(f"--metric: expected one of {', '.join(off.METRICS)}, got {metric!r}")
    if clip is not None and not 1.0 <= clip < float("inf"):
        raise ValueError(f"--clip: expected a finite maximum weight >= 1, got {clip}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"--confidence: expected a level in (0, 1), got {confidence}")
    propensities = _propensities(propensity_file)
    # the log's sessions, interactions and shown positions (no features: a model reads its own below)
    log, file_rows = source.load(default_split="test", purpose="scores", note=note)
    if log.shown_positions is None:
        raise OptionError("{log} is not an interaction log: give {position_col:COL}", log=log.source)
    if model is not None:  # the rows as the model reads them (its saved columns), scored, in the log's order
        predictor, inputs = load_for_scoring(model, threads)
        rows, model_rows = source.load(default_split="test", purpose="evaluate", model=inputs, note=note)
        in_file_order = to_file_order(predictor.predict(rows), model_rows)
    else:
        in_file_order = read_scores(scores, log.n_items, data_name=log.source or "the log")
    values = from_file_order(in_file_order, file_rows)
    estimates = off.offline_estimates(
        log, values, propensities, metric=metric, k=k, clip=clip, n_resamples=resamples,
        confidence=confidence, seed=seed,
    )  # fmt: skip
    if json:
        print_json(
            {
                "log": log.source,
                "model": model,
                "scores": scores,
                "propensity": propensity_file,
                "estimates": {name: dataclasses.asdict(e) for name, e in estimates.items()},
            }
        )
        return 0
    weights = "unclipped" if clip is None else f"clipped at {clip:g}"
    rows = [
        ("log", f"{log.source} ({log.n_queries:,} sessions, {log.n_items:,} rows)"),
        ("ranker", f"model {model}" if model is not None else f"scores {scores}"),
        ("propensity", f"{propensity_file} ({propensities.method}, {propensities.n_positions} positions)"),
        ("metric", f"{metric}@{k}, inverse-propensity weights {weights}"),
    ]
    out(key_value_lines(rows))
    out()
    level = f"{confidence:.0%} interval"
    table_rows = [(e.estimator, f"{e.value:.4f}", f"[{e.low:.4f}, {e.high:.4f}]") for e in estimates.values()]
    out(table(("estimator", "value", level), table_rows, right=(1,)))
    out()
    out(
        "ips: the metric per session; snips: self-normalised, the metric per unit of relevance "
        f"(bootstrap over {log.n_queries:,} sessions, docs/clicks.md)"
    )
    return 0


def _propensities(path: str) -> prop.Propensities:
    """The propensities JSON file given as ``--propensity``, read as ``train.propensity`` reads it."""
    read_propensity_file(path)  # the same checks and messages
    return prop.Propensities.from_json(Path(path).read_text(encoding="utf-8"))


def _read_log(source: DataSource, extra: list[str]) -> tuple[Any, dict[str, np.ndarray]]:
    """The log (training columns: labels = interactions) and ``extra`` columns' values in its row order;
    without ``--numeric``, the features are every column that has no other role."""
    path = source.data_file
    if extra:
        if path is None or not is_table_path(path):
            raise OptionError("{extra} need the log as a table file", extra=", ".join(extra))
        columns = table_columns(path)
        missing = [c for c in extra if c not in columns]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]!r}; its columns: {', '.join(columns)}")
        cols = source.columns
        if cols.numeric is None:
            roles = {cols.query_col, cols.label_col, cols.docid_col, cols.position_col, source.group_col}
            taken = roles | set(cols.categorical or ()) | set(extra)
            numeric = tuple(c for c in columns if c not in taken)
            source = dataclasses.replace(source, columns=dataclasses.replace(cols, numeric=numeric))
    log, file_rows = source.load(default_split="train", purpose="train", note=note)
    if log.shown_positions is None:
        raise OptionError(
            "{log} is not an interaction log: give {position_col:COL} (the shown position of each row)",
            log=log.source,
        )
    if not extra:
        return log, {}
    reader = pd.read_parquet if str(path).lower().endswith((".parquet", ".pq")) else _read_csv
    frame = reader(path, columns=extra)
    return log, {c: from_file_order(frame[c].to_numpy(), file_rows) for c in extra}


def _read_csv(path: str, *, columns: list[str]) -> pd.DataFrame:
    sep = "\t" if str(path).lower().endswith((".tsv", ".tsv.gz")) else ","
    return pd.read_csv(path, sep=sep, usecols=columns)


def _per_session(log: Any, values: np.ndarray, column: str) -> np.ndarray:
    """(S,) the value of ``column`` of each session; a session with two values is an error naming it."""
    first = values[log.query_offsets[:-1]]
    differs = np.flatnonzero(np.asarray(values != np.repeat(first, log.query_lengths)))
    if differs.size:
        q = int(log.query_index[differs[0]])
        raise ValueError(f"--ranker-col {column}: session {str(log.query_ids[q])!r} has more than one ranker")
    return first


# ---------------------------------------------------------------------------------------- parsers
def add_clicks_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "clicks",
        parents=[common],
        help="position propensities of a click log; a ranker's offline click metric from it",
        description=(
            "Learning from an interaction log (one row per shown item: session, position, click; "
            "docs/clicks.md). `propensity`: the examination probability of each position, estimated from "
            "the log, written as JSON for `ctxrank train --debias ips --propensity FILE`. `offline`: "
            "IPS and SNIPS estimates of a ranker's click metric from the log, without showing it to users."
        ),
    )
    csub = p.add_subparsers(dest="clicks_command", metavar="{propensity,offline}", required=True)
    _add_propensity_parser(csub, common)
    _add_offline_parser(csub, common)


def _log_options(p: argparse.ArgumentParser) -> None:
    """LOG and the options that read it (those of ``data-info``: a log's queries are ``--group-col``)."""
    p.add_argument("file", metavar="LOG", help=f"the interaction log, a table ({LOG_COLUMNS_TEXT})")
    skip = (
        *(k for k in SCORING_SKIP if k != "group_col"),
        "data_file",
        "dataset",
        "fold",
        "split",
        "variant",
    )
    add_data_source(p, defaults="", skip=(*skip, "data_root", "query_file"))


def _bootstrap_options(p: argparse.ArgumentParser, resamples: int | None, text: str) -> None:
    p.add_argument(
        "--resamples", type=positive_int, default=resamples, metavar="N", help=f"bootstrap resamples ({text})"
    )
    p.add_argument("--confidence", type=float, default=0.95, help="level of the intervals (default 0.95)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the bootstrap (default 0)")
    add_json(p)


def _add_propensity_parser(csub: Any, common: argparse.ArgumentParser) -> None:
    p = csub.add_parser(
        "propensity",
        parents=[common],
        help="estimate the examination probability of each shown position",
        description=(
            "Estimate the propensities p_k / p_1 of a click log, with bootstrap intervals over sessions: "
            "randomized (Joachims et al. 2017: sessions whose shown list was randomised, e.g. `synth clicks "
            "--randomize shuffle_top`; with --original-position-col only the items the logging ranker put "
            "first are compared, as in a swap experiment), harvesting (Agarwal et al. 2019: the same query "
            "and item shown at different positions by two or more logging rankers, --ranker-col) or "
            "regression-em (Wang et al. 2018: a position-based click model fitted to the features). "
            "Writes --out as JSON."
        ),
    )
    _log_options(p)
    p.add_argument("--method", required=True, choices=METHODS, help="the estimator")
    p.add_argument("--ranker-col", metavar="COL", help="harvesting: the logging ranker of each session")
    p.add_argument(
        "--original-position-col", metavar="COL",
        help="randomized: each row's position before the randomisation (default: lists shuffled whole)",
    )  # fmt: skip
    p.add_argument("--positions", type=positive_int, metavar="K", help="positions 1..K (default: all shown)")
    p.add_argument(
        "--min-sessions", type=positive_int, metavar="N",
        help="randomized: the fewest sessions showing a compared item at each position (default 30)",
    )  # fmt: skip
    _bootstrap_options(p, None, "default: 1000; regression-em 100, each an EM run")
    p.add_argument("--out", required=True, metavar="FILE", help="the propensities JSON file to write")
    p.add_argument("--overwrite", action="store_true", help="replace the --out FILE if it exists")
    p.set_defaults(
        run=lambda a: propensity(
            from_namespace(DataSource, {**vars(a), "data_file": a.file}),
            method=a.method,
            out_file=a.out,
            ranker_col=a.ranker_col,
            original_position_col=a.original_position_col,
            positions=a.positions,
            min_sessions=a.min_sessions,
            resamples=a.resamples,
            confidence=a.confidence,
            seed=a.seed,
            overwrite=a.overwrite,
            json=a.json,
        )
    )


def _add_offline_parser(csub: Any, common: argparse.ArgumentParser) -> None:
    p = csub.add_parser(
        "offline",
        parents=[common],
        help="estimate a ranker's click metric from a log (IPS, SNIPS)",
        description=(
            "Counterfactual evaluation: how a ranker (--model DIR, or --scores FILE with one score per log "
            "row) would do on the log's sessions, estimated from the logged clicks weighted by the inverse "
            "propensity of their shown position (IPS, Joachims et al. 2017) and self-normalised (SNIPS, "
            "Swaminathan and Joachims 2015), with bootstrap intervals over sessions. --metric clicks: the "
            "expected clicks in the ranker's top k; dcg: DCG@k of the relevance."
        ),
    )
    _log_options(p)
    add_model_dir(p, " (the ranker to evaluate)", required=False)
    p.add_argument(
        "--scores", metavar="FILE", help="one score per log row, in file order (instead of --model)"
    )
    p.add_argument(
        "--propensity",
        required=True,
        metavar="FILE",
        help="propensities JSON (ctxrank clicks propensity --out)",
    )
    p.add_argument("--metric", choices=off.METRICS, default="clicks", help="default clicks")
    p.add_argument("--k", type=positive_int, default=10, help="the metric's cut-off (default 10)")
    p.add_argument(
        "--clip", type=float, metavar="W", help="the largest inverse-propensity weight (default: none)"
    )
    _bootstrap_options(p, 1000, "default 1000")
    add_threads(p, "of scoring with --model; default: the libraries' own")
    p.set_defaults(
        run=lambda a: offline(
            from_namespace(DataSource, {**vars(a), "data_file": a.file}),
            propensity_file=a.propensity,
            model=a.model,
            scores=a.scores,
            metric=a.metric,
            k=a.k,
            clip=a.clip,
            resamples=a.resamples,
            confidence=a.confidence,
            seed=a.seed,
            threads=a.threads,
            json=a.json,
        )
    )
