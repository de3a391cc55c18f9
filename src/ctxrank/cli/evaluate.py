"""``ctxrank evaluate`` (mean ranking metrics of scores or of a saved model) and ``ctxrank compare``
(paired t-tests between two sets of runs)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from ctxrank._declare import from_namespace
from ctxrank.cli._options import (
    MODEL_DIR,
    SCORING_SKIP,
    add_correction,
    add_data_source,
    add_json,
    add_model_dir,
    add_threads,
    key_value_lines,
    note,
    out,
    print_json,
    table,
)
from ctxrank.cli._scoring import load_for_scoring
from ctxrank.data.registry import get_spec
from ctxrank.data.scores import read_scores
from ctxrank.data.sources import DataSource
from ctxrank.data.table_io import from_file_order
from ctxrank.data.trec import item_ids, judgments, read_qrels, read_run
from ctxrank.evaluation import evaluate_scores, unevaluated_message
from ctxrank.experiments.compare import compare_runs, load_runs
from ctxrank.metrics import CHOICE_METRICS, format_metric, is_choice_data, metric_convention, parse_metric

DEFAULT_METRICS = "ndcg@1,ndcg@3,ndcg@5,ndcg@10,map"
_CHOICE = ("p@1", "recall@3", "mrr", "loglik")  # ctxrank.metrics.CHOICE_METRICS (help text without numpy)


def parse_metrics(text: str) -> list[str]:
    """``"ndcg@10, MAP"`` -> canonical metric names; at least one."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise ValueError("--metrics needs at least one metric, e.g. ndcg@10,map")
    return [format_metric(*parse_metric(m)) for m in names]


def _no_relevant(text: str) -> float | str:
    t = text.strip().lower()
    if t == "skip":
        return "skip"
    try:
        value = float(t)
    except ValueError:
        value = None
    if value not in (0.0, 1.0):
        raise argparse.ArgumentTypeError(f"expected 0, 1 or skip, got {text!r}")
    return value


# ------------------------------------------------------------------------------------ TREC runs
#: the measures of ``evaluate --run`` without ``--metrics`` (ir-measures' names)
DEFAULT_RUN_METRICS = "nDCG@1,nDCG@3,nDCG@5,nDCG@10,AP"


#: ``--gain`` -> how it reads in a table's conventions line
GAINS = {"exp2": "exp2 (2^y - 1)", "linear": "linear (y)"}


def evaluate_runs(
    runs: Sequence[str],
    *,
    qrels: str | None = None,
    source: DataSource | None = None,
    metrics: str | None = None,
    gain: str = "exp2",
    json: bool = False,
) -> int:
    """Evaluate TREC run files against qrels (the file ``qrels``, or the labels of ``source`` with the
    item ids of :func:`ctxrank.data.trec.item_ids`) with ir-measures (pytrec_eval). ``metrics``:
    comma-separated names of trec_eval (``ndcg_cut_10``, ``recip_rank``, ``map``) or ir-measures
    (``nDCG@10``, ``RR``, ``AP``). nDCG's gain is ``gain`` as in ``ctxrank evaluate``: ``exp2``
    (2^y - 1, the default of both, so one ranking gives one nDCG) or ``linear`` (y: trec_eval's own);
    the discount 1/log2(1+r) in both; an nDCG that names its own ``gains`` keeps them."""
    if gain not in GAINS:
        raise ValueError(f"--gain must be one of {', '.join(GAINS)}, got {gain!r}")
    try:
        import ir_measures
    except ImportError:
        raise ValueError("evaluate --run needs ir-measures: pip install 'ctxrank[trec]'") from None
    measures = _measures(ir_measures, metrics if metrics is not None else DEFAULT_RUN_METRICS)
    judged = _qrels(ir_measures, qrels, source)
    measures = [(label, _with_gain(m, gain, judged)) for label, m in measures]
    results: dict[str, dict[str, float]] = {}
    for run in runs:
        scored = [ir_measures.ScoredDoc(q, d, s) for q, d, s in read_run(run)]
        try:
            values = ir_measures.calc_aggregate([m for _, m in measures], judged, scored)
        except (ValueError, IndexError, KeyError) as exc:
            raise ValueError(f"{run}: cannot be measured ({exc})") from None
        results[run] = {label: float(values[m]) for label, m in measures}
    names = list(dict.fromkeys(label for label, _ in measures))
    if json:
        measured = {label: str(m) for label, m in measures}  # the name as given -> ir-measures' name
        print_json(
            {"qrels": qrels, "metrics": names, "measures": measured, "ndcg_gain": gain, "runs": results}
        )
        return 0
    judged_by = qrels if qrels is not None else "the labels of the data"
    out(f"qrels   {judged_by} (ir-measures {ir_measures.__version__})")
    out()
    rows = [(n, *(f"{results[r][n]:.4f}" for r in runs)) for n in names]
    out(table(("metric", *runs), rows, right=tuple(range(1, len(runs) + 1))))
    out()
    out(f"conventions: nDCG gain {GAINS[gain]}, discount 1/log2(1+r); the other measures as trec_eval's")
    return 0


def _with_gain(measure: Any, gain: str, judged: list[Any]) -> Any:
    """``measure`` with nDCG's gain ``gain``: ``exp2`` maps each grade y of ``judged`` to 2^y - 1 (a
    grade below 1 to 0); ``linear`` is trec_eval's own (y). Another measure, or an nDCG given its own
    ``gains``, as it is."""
    if measure.NAME != "nDCG" or gain == "linear" or "gains" in measure.params:
        return measure
    grades = {int(j.relevance) for j in judged}
    return measure(gains={y: 2**y - 1 if y > 0 else 0 for y in sorted(grades)})


def _measures(ir_measures: Any, text: str) -> list[tuple[str, Any]]:
    """``(label, measure)`` of the names in ``text``: trec_eval names first (``P`` may mean several
    cutoffs), then ir-measures names; the label is the name as given when it names one measure. An
    unknown name is a ValueError with examples."""
    measures = []
    for name in (t.strip() for t in text.split(",")):
        if not name:
            continue
        try:
            found = list(ir_measures.parse_trec_measure(name))
        except (ValueError, NameError, KeyError, TypeError):
            try:
                found = [ir_measures.parse_measure(name)]
            except (ValueError, NameError, KeyError, TypeError, SyntaxError):
                raise ValueError(
                    f"--metrics: unknown measure {name!r}; trec_eval names (ndcg_cut_10, recip_rank, map, "
                    "P_5) or ir-measures names (nDCG@10, RR, AP, P@5, R@100)"
                ) from None
        measures += [(name if len(found) == 1 else str(m), m) for m in found]
    if not measures:
        raise ValueError("--metrics: no measure named")
    return measures


def _qrels(ir_measures: Any, path: str | None, source: DataSource | None) -> list[Any]:
    """The judgments: the qrels file, or the labels of the data of ``source``."""
    if path is not None:
        if source is not None and (source.data_file is not None or source.dataset is not None):
            raise ValueError("give either --qrels FILE or the labelled data (--data / --dataset), not both")
        return [ir_measures.Qrel(q, d, y) for q, d, y in read_qrels(path)]
    if source is None or (source.data_file is None and source.dataset is None):
        raise ValueError(
            "evaluate --run needs the judgments: --qrels FILE, or the labelled data (--data / --dataset)"
        )
    data, file_rows = source.load(default_split="test", purpose="scores", note=note)
    return [ir_measures.Qrel(q, d, y) for q, d, y in judgments(data, item_ids(data, file_rows))]


# --------------------------------------------------------------------------------------- evaluate
def evaluate(
    *,
    source: DataSource,
    scores: str | None = None,
    model: str | None = None,
    metrics: str | None = None,
    convention: str = "standard",
    no_relevant: float | str = 0.0,
    gain: str = "exp2",
    threshold: float = 1.0,
    max_label: float | None = None,
    json: bool = False,
    threads: int | None,
) -> int:
    """Evaluate a scores file (``scores``) or a saved model (``model``, scoring with ``threads`` CPU
    threads; None: the libraries' defaults) on the labelled data of ``source``. ``metrics``
    None: ``ctxrank.metrics.CHOICE_METRICS`` on choice data (one item labelled 1 per query, the rest 0),
    else :data:`DEFAULT_METRICS`."""
    names = parse_metrics(metrics) if metrics is not None else None
    if max_label is None and source.dataset is not None:  # the dataset's grade scale (ERR)
        max_label = get_spec(source.dataset).max_label
    conv = metric_convention(
        convention, gain=gain, no_relevant=no_relevant, threshold=threshold, max_label=max_label
    )
    if (scores is None) == (model is None):
        raise ValueError("give exactly one of --scores FILE or --model DIR")
    ranking, values = _scored_data(source, scores, model, threads)
    if names is None:
        choice = is_choice_data(ranking.labels, ranking.query_offsets)
        names = list(CHOICE_METRICS) if choice else parse_metrics(DEFAULT_METRICS)
    report = evaluate_scores(values, ranking, names, conv)
    problem = unevaluated_message(report)
    if problem is not None:
        raise ValueError(problem)
    if json:
        print_json({"data": report.pop("data"), "scores": scores, "model": model, **report})
        return 0
    means, counts = report["metrics"], report["queries_evaluated"]
    out(f"data    {ranking.source} ({ranking.n_queries:,} queries, {ranking.n_items:,} items)")
    out(f"scores  {scores}" if scores is not None else f"model   {model}")
    out()
    rows = [(k, f"{means[k]:.4f}" if math.isfinite(means[k]) else "nan", counts[k]) for k in names]
    out(table(("metric", "mean", "queries"), rows, right=(1, 2)))
    out()
    out(conventions_text(conv))
    return 0


def _scored_data(
    source: DataSource, scores: str | None, model: str | None, threads: int | None
) -> tuple[Any, Any]:
    """``(RankingData, (N,) scores in its row order)`` from a scores file or a saved model."""
    if model is not None:
        predictor, inputs = load_for_scoring(model, threads)
        ranking, _ = source.load(default_split="test", purpose="evaluate", model=inputs, note=note)
        return ranking, predictor.predict(ranking)

    ranking, file_rows = source.load(default_split="test", purpose="scores", note=note)
    values = read_scores(scores, ranking.n_items, data_name=ranking.source or "the data")
    return ranking, from_file_order(values, file_rows)


def conventions_text(conv: Any) -> str:
    """The metric convention, one choice a line."""
    d = conv.to_dict()
    gain = GAINS.get(d["gain"], d["gain"])
    rows = [
        ("convention", d["name"]),
        ("gain", gain),
        ("discount", d["discount"]),
        (
            "no relevant item",
            f"{d['no_relevant']}" + (" (excluded from means)" if d["no_relevant"] == "skip" else ""),
        ),
        ("relevant means", f"label >= {d['threshold']:g} (P, MAP, MRR)"),
        ("ERR maximum grade", "-" if d.get("max_label") is None else f"{d['max_label']:g}"),
        ("ties", d["tie_rule"]),
        ("cutoff beyond list", d["k_beyond_list"]),
        ("source", d["source"]),
    ]
    return "conventions:\n" + key_value_lines(rows, indent="  ")


# ---------------------------------------------------------------------------------------- compare
def compare(
    a: str, b: str, *, metrics: Sequence[str] | None = None, json: bool = False, correction: str = "holm"
) -> int:
    """Per-metric difference of two sets of runs, with paired t-tests over runs and over queries, each
    test's p-values corrected over the metrics (``correction``)."""
    chosen = list(metrics) if metrics is not None else None
    res = compare_runs(load_runs(a), load_runs(b), chosen, correction=correction)
    if json:
        print_json({"a": a, "b": b, **res})
        return 0
    n = len(res["runs"])
    family = "not corrected" if correction == "none" else f"{correction}-corrected over the metrics, raw p"
    out(f"A = {a}\nB = {b}\n{n} common run(s); paired two-sided t-tests; p {family}\n")
    out("| metric | A | B | A - B | p (runs) | p (queries) |")
    out("|---|---:|---:|---:|---:|---:|")
    for m, r in res["metrics"].items():
        pr, pq = r["runs"], r["queries"]
        out(
            f"| {m} | {r['a']:.4f} | {r['b']:.4f} | {r['a'] - r['b']:+.4f} | "
            f"{_p_pair(pr, correction)} (n={pr['n']}) | {_p_pair(pq, correction)} (n={pq['n']}) |"
        )
    if n < 2:
        out("\none common run: no test over runs (p n/a); the test over queries still applies")
    return 0


def _p(p: float | None) -> str:
    return "n/a" if p is None or not math.isfinite(p) else f"{p:.3g}"


def _p_pair(test: dict[str, Any], correction: str) -> str:
    """A test's p for the table: the corrected one with the raw one beside it."""
    if correction == "none" or test["p"] is None:
        return _p(test["p"])
    return f"{_p(test['p_adjusted'])} (raw {_p(test['p'])})"


# ---------------------------------------------------------------------------------------- parsers
def add_evaluate_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "evaluate",
        parents=[common],
        help="evaluate a scores file or a saved model against labelled data",
        description=(
            "Mean ranking metrics of a scores file (one float per line, in the data file's row order; the "
            "count must equal the number of rows), or of a model saved by `ctxrank train` (--model), "
            "against the labels of a LETOR file, a table (.csv/.tsv/.parquet) or a registered dataset "
            "split. A table is read with the model's saved table spec (--model) or with --query-col and "
            "--label-col (--scores). The conventions used (gain, discount, ties, no-relevant queries, "
            "cutoffs beyond the list) are printed with the result; --json adds per-query vectors with "
            "query ids."
        ),
    )
    p.add_argument("--scores", metavar="FILE", help="one score per line, in row order")
    add_model_dir(p, " (instead of --scores)", required=False)
    p.add_argument(
        "--run",
        dest="runs",  # not "run": the parsed command's function (set_defaults)
        action="append",
        default=[],
        metavar="FILE",
        help="a TREC run file (repeatable; instead of --scores / --model), judged by --qrels or by the "
        "labels of --data / --dataset; measures by ir-measures, named as in trec_eval (ndcg_cut_10, "
        f"recip_rank, map) or ir-measures (nDCG@10, RR, AP); default {DEFAULT_RUN_METRICS}",
    )
    p.add_argument("--qrels", metavar="FILE", help="TREC qrels (QUERY 0 DOCID RELEVANCE) for --run")
    p.add_argument(
        "--metrics",
        help="comma-separated: ndcg[@k], dcg[@k], map, p@k, recall@k, mrr[@k], err[@k], loglik (default "
        f"{DEFAULT_METRICS}; on choice data, one item labelled 1 per query: {','.join(_CHOICE)})",
    )
    p.add_argument(
        "--convention",
        choices=("standard", "letor4", "letor3"),
        default="standard",
        help="standard, or the rules of the LETOR 4.0 / 3.0 evaluation scripts (default standard)",
    )
    p.add_argument(
        "--no-relevant",
        type=_no_relevant,
        default=0.0,
        metavar="{0,1,skip}",
        help="value of a query without relevant items; skip = leave it out of the means (default 0)",
    )
    p.add_argument(
        "--gain",
        choices=tuple(GAINS),
        default="exp2",
        help="NDCG gain, for --scores / --model and --run alike (default exp2: 2^y-1; linear: y, "
        "trec_eval's)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=1.0,
        help="relevant means label >= THRESHOLD for P/MAP/MRR (default 1)",
    )
    p.add_argument(
        "--max-label",
        type=float,
        metavar="Y",
        help="ERR's maximum grade (the label scale's top, e.g. 2 for MQ2008; default: the --dataset's; "
        "required for ERR on a file)",
    )
    add_data_source(
        p,
        defaults="neither: fold 1's test split, as `ctxrank predict`",
        saved_model=True,
        skip=SCORING_SKIP,
        data_help="file with the labels: LETOR / SVMlight (.txt or .gz) or a table (.csv, .tsv, .parquet, "
        "...)",
    )
    add_json(p, "machine-readable output with per-query vectors")
    add_threads(p, "with --model; default: the libraries' own")
    p.set_defaults(run=_run_evaluate)


def _run_evaluate(a: argparse.Namespace) -> int:
    source = from_namespace(DataSource, a)
    if a.runs:
        given = [f for f, v in (("--scores", a.scores), (MODEL_DIR.flag, a.model)) if v is not None]
        if given:
            raise ValueError(f"give either --run FILE or {' / '.join(given)}, not both")
        ignored = [
            flag
            for flag, value, default in (
                ("--convention", a.convention, "standard"),
                ("--no-relevant", a.no_relevant, 0.0),
                ("--threshold", a.threshold, 1.0),
                ("--max-label", a.max_label, None),
            )
            if value != default
        ]
        if ignored:
            raise ValueError(
                f"{', '.join(ignored)}: not for --run (ir-measures measures runs with trec_eval's rules; "
                "only --gain applies); give them with --scores or --model"
            )
        return evaluate_runs(
            a.runs, qrels=a.qrels, source=source, metrics=a.metrics, gain=a.gain, json=a.json
        )
    if a.qrels is not None:
        raise ValueError("--qrels judges TREC run files: give --run FILE")
    return evaluate(
        source=source,
        scores=a.scores,
        model=a.model,
        metrics=a.metrics,
        convention=a.convention,
        no_relevant=a.no_relevant,
        gain=a.gain,
        threshold=a.threshold,
        max_label=a.max_label,
        json=a.json,
        threads=a.threads,
    )


def add_compare_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "compare",
        parents=[common],
        help="per-metric difference of two sets of runs with paired t-tests",
        description=(
            "Compare two sets of runs: A and B are each an experiment model (OUT:MODEL or "
            "OUT/runs/MODEL), a run file (OUT/runs/MODEL/seedS-foldF.json) or the output of "
            "`ctxrank evaluate --json`. Runs are paired by (seed, fold); queries by query id (each "
            "query's value averaged over its runs). Paired two-sided Student's t-tests (SciPy)."
        ),
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument("--metrics", help="comma-separated (default: every metric both have)")
    add_correction(p, "over the metrics compared, for each test; default holm", default="holm")
    add_json(p)
    p.set_defaults(
        run=lambda a: compare(
            a.a,
            a.b,
            metrics=[m.strip() for m in a.metrics.split(",")] if a.metrics is not None else None,
            json=a.json,
            correction=a.correction,
        )
    )
