"""``ctxrank clicks propensity LOG ... --out FILE`` (position propensities estimated from an interaction
log, :mod:`ctxrank.clicks.propensity`), ``ctxrank clicks offline LOG (--model DIR | --scores FILE)
--propensity FILE`` (IPS, SNIPS and DR estimates of a ranker's click metric from the log,
:mod:`ctxrank.clicks.offline`), each with its bootstrap intervals over sessions, and ``ctxrank clicks
coverage --out DIR`` (those intervals checked against the exact truth on logs simulated from labelled
data, :mod:`ctxrank.clicks.coverage`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ctxrank._checks import OptionError
from ctxrank._declare import from_namespace
from ctxrank._io import atomic_write, claim_output_dir
from ctxrank.cli._options import (
    SCORING_SKIP,
    add_data_source,
    add_json,
    add_model_dir,
    add_progress,
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
from ctxrank.clicks import click_models as cm
from ctxrank.clicks import coverage as cov
from ctxrank.clicks import offline as off
from ctxrank.clicks import propensity as prop
from ctxrank.clicks import simulate as sim
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
    reward_model: str | None = None,
    metric: str = "clicks",
    k: int = 10,
    clip: float | None = None,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    threads: int | None = None,
    json: bool = False,
) -> int:
    """IPS, SNIPS and DR estimates of the ``metric`` @ ``k`` of a ranker (a saved ``model`` or a
    ``scores`` file, one score per log row) from the log, with ``propensity_file``'s propensities. DR's
    reward model (:func:`~ctxrank.clicks.offline.click_reward`) reads the log's features, or, given
    ``reward_model`` (a saved model), that model's score, calibrated on the log."""
    if (model is None) == (scores is None):
        raise ValueError("give exactly one of --model DIR or --scores FILE (the ranker to evaluate)")
    if metric not in off.METRICS:
        raise ValueError(f"--metric: expected one of {', '.join(off.METRICS)}, got {metric!r}")
    if clip is not None and not 1.0 <= clip < float("inf"):
        raise ValueError(f"--clip: expected a finite maximum weight >= 1, got {clip}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"--confidence: expected a level in (0, 1), got {confidence}")
    propensities = _propensities(propensity_file)
    if reward_model is not None and not Path(reward_model).exists():
        raise ValueError(f"--reward-model {reward_model}: no such model directory or .onnx file")
    # the log's sessions, interactions and shown positions, with its features for the default reward
    # model (a model reads its own columns below)
    purpose = "train" if reward_model is None else "scores"
    log, file_rows = source.load(default_split="test", purpose=purpose, note=note)
    if log.shown_positions is None:
        raise OptionError("{log} is not an interaction log: give {position_col:COL}", log=log.source)
    if reward_model is None and log.n_features == 0:
        raise ValueError(
            f"{log.source} has no feature column for DR's reward model: give --numeric COLS or "
            "--reward-model DIR"
        )
    if model is not None:  # the rows as the model reads them (its saved columns), scored, in the log's order
        in_file_order = _scores_of(source, model, threads)
    else:
        in_file_order = read_scores(scores, log.n_items, data_name=log.source or "the log")
    values = from_file_order(in_file_order, file_rows)
    if reward_model is None:
        reward = off.click_reward(log, propensities)
        reward_text = f"fitted on the log's {log.n_features} features (position-based likelihood)"
    else:
        calibrated = from_file_order(_scores_of(source, reward_model, threads), file_rows)
        reward = off.click_reward(log, propensities, calibrated)
        reward_text = f"the score of {reward_model}, calibrated on the log (position-based likelihood)"
    estimates = off.offline_estimates(
        log, values, propensities, metric=metric, k=k, clip=clip, reward=reward, n_resamples=resamples,
        confidence=confidence, seed=seed,
    )  # fmt: skip
    if json:
        print_json(
            {
                "log": log.source,
                "model": model,
                "scores": scores,
                "propensity": propensity_file,
                "reward_model": reward_model,
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
        ("reward", f"DR's reward model {reward_text}"),
    ]
    out(key_value_lines(rows))
    out()
    level = f"{confidence:.0%} interval"
    table_rows = [(e.estimator, f"{e.value:.4f}", f"[{e.low:.4f}, {e.high:.4f}]") for e in estimates.values()]
    out(table(("estimator", "value", level), table_rows, right=(1,)))
    out()
    dr_note = "equal to ips, as the weights are not clipped" if clip is None else "corrects the clipping"
    out(
        "ips: the metric per session; snips: self-normalised, the metric per unit of relevance; dr: the "
        f"reward model's metric plus the weighted residual ({dr_note}) (bootstrap over "
        f"{log.n_queries:,} sessions, docs/clicks.md)"
    )
    return 0


#: the record ``clicks coverage --out DIR`` writes in DIR
COVERAGE_FILE = "coverage.json"


def coverage(
    source: DataSource,
    *,
    out_dir: str,
    logs: int = 50,
    sessions: int = 2000,
    top_k: int = 10,
    eta: float = 1.0,
    eps_minus: float = 0.1,
    eps_plus: float = 1.0,
    relevance: str = "exponential",
    logging_fraction: float = 0.01,
    metrics: str = ",".join(off.METRICS),
    k: int = 10,
    clip: float = 5.0,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    overwrite: bool = False,
    progress: bool = False,
    json: bool = False,
) -> int:
    """Check the offline estimators on ``logs`` logs simulated from the labelled ``source``
    (:func:`ctxrank.clicks.coverage.offline_coverage`); write the record to ``out_dir/coverage.json``
    and print its table. Every option is checked before the data are read."""
    from ctxrank.experiments.provenance import environment  # torch: only for this command

    model = cm.click_model("pbm", eta=eta, eps_minus=eps_minus, eps_plus=eps_plus)
    names = tuple(metrics.split(","))
    if len(set(names)) != len(names) or not set(names) <= set(off.METRICS):
        raise ValueError(
            f"--metrics: expected distinct names among {', '.join(off.METRICS)}, got {metrics!r}"
        )
    cov.check_coverage_options(
        logs=logs, sessions=sessions, top_k=top_k, metrics=names, k=k, clip=clip, n_resamples=resamples,
        confidence=confidence,
    )  # fmt: skip
    sim.check_options(sessions=sessions, top_k=top_k, relevance=relevance)
    sim.check_fraction(logging_fraction)
    claim_output_dir(out_dir, overwrite=overwrite, what="coverage record", ours=(COVERAGE_FILE,))
    target = Path(out_dir) / COVERAGE_FILE
    check_output_file(str(target), overwrite=overwrite, flag="--out")
    made_by = environment()  # the code as it starts
    data, _ = source.load(purpose="train", default_split="train", note=note)
    if data.shown_positions is not None:
        raise ValueError(f"{data.source} is a log (it has shown positions); give labelled data")
    record = cov.offline_coverage(
        data, logs=logs, sessions=sessions, model=model, top_k=top_k, relevance=relevance,
        logging_fraction=logging_fraction, metrics=names, k=k, clip=clip, n_resamples=resamples,
        confidence=confidence, seed=seed, progress=progress,
    )  # fmt: skip
    record["environment"] = made_by
    text = cov.record_text(record)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    if json:
        print_json({"out": str(target), "counts": record["counts"], "seconds": record["seconds"]})
        return 0
    out(cov.coverage_table(record))
    out(f"wrote {target} ({len(record['rows']):,} checks, {record['seconds']:g} s)")
    return 0


def _scores_of(source: DataSource, model: str, threads: int | None) -> np.ndarray:
    """(N,) the saved ``model``'s score of each row of the log, in the file's row order (the rows read
    as the model reads them: its saved columns)."""
    predictor, inputs = load_for_scoring(model, threads)
    rows, model_rows = source.load(default_split="test", purpose="evaluate", model=inputs, note=note)
    return to_file_order(predictor.predict(rows), model_rows)


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
            "IPS, SNIPS and DR estimates of a ranker's click metric from the log, without showing it to "
            "users. `coverage`: whether those estimates' intervals cover the truth on logs simulated from "
            "labelled data."
        ),
    )
    csub = p.add_subparsers(dest="clicks_command", metavar="{propensity,offline,coverage}", required=True)
    _add_propensity_parser(csub, common)
    _add_offline_parser(csub, common)
    _add_coverage_parser(csub, common)


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
        help="estimate a ranker's click metric from a log (IPS, SNIPS, DR)",
        description=(
            "Counterfactual evaluation: how a ranker (--model DIR, or --scores FILE with one score per log "
            "row) would do on the log's sessions, estimated from the logged clicks weighted by the inverse "
            "propensity of their shown position (IPS, Joachims et al. 2017), self-normalised (SNIPS, "
            "Swaminathan and Joachims 2015) and doubly robust (DR, Dudik, Langford and Li 2011: a reward "
            "model's estimate plus the weighted residual clicks; equal to IPS unless --clip), with bootstrap "
            "intervals over sessions. --metric clicks: the "
            "expected clicks in the ranker's top k; dcg: DCG@k of the relevance."
        ),
    )
    _log_options(p)
    add_model_dir(p, " (the ranker to evaluate)", required=False)
    p.add_argument(
        "--scores", metavar="FILE", help="one score per log row, in file order (instead of --model)"
    )
    p.add_argument(
        "--reward-model", metavar="DIR",
        help="DR's reward model: a saved model (directory or .onnx) whose score is calibrated on the log "
        "(default: a position-corrected logistic regression on the log's features)",
    )  # fmt: skip
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
            reward_model=a.reward_model,
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


def _add_coverage_parser(csub: Any, common: argparse.ArgumentParser) -> None:
    p = csub.add_parser(
        "coverage",
        parents=[common],
        help="check the offline estimators' intervals against the truth on logs simulated from labelled data",
        description=(
            "Simulate --logs seeded click logs from labelled data (FILE, a table or --dataset) with the "
            "position-based model over a logging LambdaMART's top k, as `synth clicks` does; estimate the "
            "click metric of four rankers (the true labels, the labels with noise, the logging ranker, its "
            "reverse) on each log by IPS, SNIPS and DR, unclipped and with --clip; count the intervals that "
            "cover the exact truth (computed from the labels, not simulated). Writes OUT/coverage.json "
            "(parameters, versions, one row per log, ranker, metric and estimator, the counts)."
        ),
    )
    p.add_argument("file", nargs="?", metavar="FILE", help="labelled LETOR / SVMlight file or table")
    add_data_source(p, defaults="default: train", skip=(*SCORING_SKIP, "data_file"))
    p.add_argument("--logs", type=positive_int, default=50, metavar="N", help="simulated logs (default 50)")
    p.add_argument("--sessions", type=positive_int, default=2000, metavar="N", help="per log (default 2000)")
    p.add_argument("--top-k", type=positive_int, default=10, metavar="K", help="items shown per session (10)")
    p.add_argument("--eta", type=float, default=1.0, help="examination (1/r)^ETA (default 1)")
    p.add_argument(
        "--eps-minus",
        type=float,
        default=0.1,
        help="click probability of an examined non-relevant item (0.1)",
    )
    p.add_argument(
        "--eps-plus", type=float, default=1.0, help="click probability of an examined most relevant item (1)"
    )
    p.add_argument(
        "--relevance", choices=cm.RELEVANCE_RULES, default="exponential",
        help="labels to [0, 1] (default exponential, as synth clicks)",
    )  # fmt: skip
    p.add_argument(
        "--logging-fraction", type=float, default=0.01, metavar="X",
        help="share of the queries the logging LambdaMART is trained on (default 0.01, at least one query)",
    )  # fmt: skip
    p.add_argument(
        "--metrics", default=",".join(off.METRICS), metavar="LIST",
        help=f"comma-separated, among {', '.join(off.METRICS)} (default: both)",
    )  # fmt: skip
    p.add_argument("--k", type=positive_int, default=10, help="the metrics' cut-off (default 10)")
    p.add_argument(
        "--clip", type=float, default=5.0, metavar="W",
        help="the largest inverse-propensity weight of the clipped estimators (default 5)",
    )  # fmt: skip
    _bootstrap_options(p, 1000, "default 1000")
    p.add_argument("--out", required=True, metavar="DIR", help="the directory of coverage.json")
    p.add_argument("--overwrite", action="store_true", help="replace DIR/coverage.json")
    add_progress(p)
    p.set_defaults(
        run=lambda a: coverage(
            from_namespace(DataSource, {**vars(a), "data_file": a.file}),
            out_dir=a.out,
            logs=a.logs,
            sessions=a.sessions,
            top_k=a.top_k,
            eta=a.eta,
            eps_minus=a.eps_minus,
            eps_plus=a.eps_plus,
            relevance=a.relevance,
            logging_fraction=a.logging_fraction,
            metrics=a.metrics,
            k=a.k,
            clip=a.clip,
            resamples=a.resamples,
            confidence=a.confidence,
            seed=a.seed,
            overwrite=a.overwrite,
            progress=not a.no_progress,
            json=a.json,
        )
    )
