"""``ctxrank experiment`` (models x folds x seeds from a TOML spec; report tables, t-tests, figures) and
``ctxrank demo`` (the built-in ``demo`` experiment, or ``--quick``: one LambdaMART model)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightgbm

from ctxrank._checks import OptionText, resolve_threads
from ctxrank._io import claim_output_dir, lock_directory
from ctxrank._overrides import with_flags
from ctxrank.baselines.lambdamart import LambdaMART
from ctxrank.cli import flag_text
from ctxrank.cli._options import (
    THREADS,
    add_correction,
    add_declared,
    add_executor_options,
    add_json,
    add_overrides,
    add_progress,
    add_threads,
    add_track,
    non_negative_int,
    out,
    positive_int,
    print_json,
    seed_int,
    table,
)
from ctxrank.data.registry import load_fold
from ctxrank.data.summary import data_summary
from ctxrank.evaluation import evaluate_scores
from ctxrank.experiments import build_report, load_spec, run_experiment
from ctxrank.experiments.evidence import (
    ExperimentPaths,
    KeptEvidence,
    check_evidence,
    rebuild_report,
    refuse_evidence_as_output,
    resume_from_evidence,
    runs_said,
)
from ctxrank.experiments.executors import make_executor, refuse_data_parallel, slurm_shard
from ctxrank.experiments.recompute import recomputed_text
from ctxrank.experiments.spec import ExperimentSpec, correction_override
from ctxrank.experiments.store import SPEC_FILE, RunStore
from ctxrank.fit_summary import FitSummary
from ctxrank.metrics import mean_metrics, metric_convention
from ctxrank.tracking import RunLog, TrackedRun, Tracking, flat_params

DEMO_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
DEMO_JOBS = 2  #: worker processes of `ctxrank demo` (each run: 1 thread, so its numbers are the machine's)


def default_out(name: str, dataset: str | None = None) -> Path:
    """``results/<name>``, or ``results/<name>-<dataset>`` when ``--dataset`` overrides the spec's data,
    so that one spec run on two datasets never lands in (and is refused by) one directory."""
    return Path("results") / (f"{name}-{dataset}" if dataset else name)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"K/N"`` -> ``(K, N)`` (the range is checked by the runner); ``"auto"``: the Slurm job array
    task's (:func:`ctxrank.experiments.executors.slurm_shard`); None -> None."""
    if text is None:
        return None
    if text == "auto":
        return slurm_shard()
    k, sep, n = text.partition("/")
    if not (sep and k.strip().isdigit() and n.strip().isdigit()):
        raise ValueError(f"--shard must be K/N with 1 <= K <= N (e.g. 1/2), got {text!r}")
    return int(k), int(n)


def _say(text: str | OptionText) -> None:
    print(flag_text(text), flush=True)


# ------------------------------------------------------------------------------------- experiment
def experiment(
    spec: str,
    *,
    out_dir: str | None = None,
    runs: int | None = None,
    dataset: str | None = None,
    shard: str | None = None,
    threads: int | None,
    overrides: Sequence[tuple[str, Any] | str] = (),
    correction: str | None = None,
    evidence: str | None = None,
    resume_from: str | None = None,
    report_only: bool = False,
    progress: bool = True,
    overwrite: bool = False,
    executor: str = "local",
    address: str | None = None,
    max_retries: int = 2,
    jobs: int = 1,
    tracking: Tracking | None = None,
    intro: Callable[[ExperimentSpec], str] | None = None,
) -> int:
    """Run (or resume) the experiment ``spec`` (a TOML file or a built-in name) and write its report;
    ``threads``: the ``runs.threads`` of every run (None: the spec's); ``executor`` ``"ray"`` runs each
    run as a task on the Ray cluster at ``address``; ``correction``
    (None: the spec's ``report.correction``) corrects the p-values of the report's family; ``evidence``:
    a directory to write the stored runs' evidence to (:mod:`ctxrank.experiments.evidence`);
    ``resume_from``: an evidence directory of this experiment whose runs (and their tuning trials) are
    restored into the directory first, the runs it lacks being run (:func:`_resume`); ``jobs``:
    local worker processes (the numbers do not depend on it); ``tracking``: log the experiment as one run
    (the spec's parameters, every stored run's mean test metrics, the report and the evidence:
    :func:`_log_experiment`).

    The directory is locked for the command (shared with the processes of the same experiment, e.g.
    its ``--shard`` processes; refused to another); it must be new, empty or an experiment directory
    unless ``overwrite`` (:mod:`ctxrank.cli._outputs`)."""
    refuse_data_parallel("experiment")  # under torchrun every rank would repeat every run
    runner = make_executor(executor, address=address, max_retries=max_retries, jobs=jobs)

    flags = (
        ("--runs", "runs.count", runs),
        ("--dataset", "data.dataset", dataset),
        (THREADS.flag, "runs.threads", threads),
    )
    given = [flag for flag in flags if flag[2] is not None]
    given += [("--correction", key, value) for key, value in correction_override(correction)]
    # another dataset's folds: all of them, unless --set data.folds names some
    every = with_flags(overrides, given, implied=[("data.folds", [])] if dataset is not None else [])
    loaded = load_spec(spec, every)
    if intro is not None:  # said of the spec as it will run, once it is known to be valid
        out(intro(loaded))
    if out_dir is None:
        where = default_out(loaded.name, loaded.data.dataset if dataset is not None else None)
    else:
        where = Path(out_dir)
    own = f"give the experiment a directory of its own (to continue from it: --resume-from {where})"
    refuse_evidence_as_output(where, "--out", own)
    if report_only and resume_from is None and not (where / "experiment.json").is_file():
        raise ValueError(f"{where}: not an experiment directory (no experiment.json)")
    parsed = parse_shard(shard)
    if tracking is not None:
        tracking.check()  # the package and the place, before any run
    with lock_directory(where, key=loaded.fingerprint(), what="experiment"):
        if resume_from is not None:
            _resume(loaded, where, resume_from, overwrite)
        if evidence is not None:  # what the evidence needs, before any run
            check_evidence(loaded, RunStore(where), evidence)
        tracked = _tracked_experiment(tracking, loaded, where)
        kept = None if evidence is None else KeptEvidence(loaded, RunStore(where), evidence, log=_say)
        with tracked if tracked is not None else contextlib.nullcontext():
            if kept is not None and report_only:  # the runs stored so far, whether they make a report yet
                _said_evidence(kept.write(), evidence, hint=False)
            with kept if kept is not None else contextlib.nullcontext():  # refreshed while runs are stored
                store = _run_and_report(loaded, where, report_only, overwrite, progress, parsed, runner)
            if kept is not None and not report_only:
                _said_evidence(kept.write(), evidence)
            if tracked is not None:
                _log_experiment(RunLog(tracked), loaded, store, where, evidence)
    return 0


def _said_evidence(counts: dict[str, int], evidence: str, *, hint: bool = True) -> None:
    """The evidence written (its counts); ``hint``: how to regenerate the report from it."""
    again = f"; regenerate the report with `ctxrank report {evidence}`" if hint else ""
    if counts["kept"]:  # runs of other shards' stores: in the evidence, not in this store's report
        again = f"; the report of every run it holds: `ctxrank report {evidence}`"
    _say(
        f"evidence: {evidence} ({runs_said(counts)}, {counts['rows']:,} per-query rows, "
        f"{counts['bytes'] / 1024:.0f} KiB){again}"
    )


def _resume(spec: Any, where: Path, evidence: str, overwrite: bool) -> None:
    """``--resume-from EVIDENCE``: claim ``where`` for ``spec`` and restore the runs of the evidence
    that it does not hold (:func:`ctxrank.experiments.evidence.resume_from_evidence`)."""
    claim_output_dir(where, overwrite=overwrite, what="experiment", ours=(SPEC_FILE,), keep=REUSED_ENTRIES)
    store = RunStore(where)
    store.claim(spec)
    restored, kept = resume_from_evidence(spec, store, evidence)
    _say(f"resumed from {evidence}: {restored} run(s) restored into {where}, {kept} already there")


def _tracked_experiment(tracking: Tracking | None, spec: Any, where: Path) -> TrackedRun | None:
    """The tracker's run of the experiment, the spec's parameters logged (dotted keys:
    ``models.qilcm.train.lr``, ``data.dataset``, ``runs``, ...)."""
    if tracking is None:
        return None
    tags = {"ctxrank.command": "experiment", "ctxrank.out": str(where.absolute())}
    tags["ctxrank.fingerprint"] = spec.fingerprint()
    return tracking.start(spec.name, tags=tags, params=flat_params(spec.to_dict()))


#: the report's files (:func:`ctxrank.experiments.build_report`) logged as artifacts, with its figures
REPORT_FILES = ("results.json", "table.md", "table.csv")


def _log_experiment(log: RunLog, spec: Any, store: RunStore, where: Path, evidence: str | None) -> None:
    """Every stored run's mean test metrics, named ``MODEL/seedS-foldF/METRIC``; the report (under
    ``report``) and the evidence directory (under ``evidence``)."""
    for seed, fold in spec.run_keys():
        for model in spec.run_names():
            if store.has_run(model, seed, fold):
                means = mean_metrics(store.load_run(model, seed, fold)["metrics"])
                log.log({f"{model}/seed{seed}-fold{fold}/{k}": v for k, v in means.items()})
    for path in [*(where / name for name in REPORT_FILES), *sorted(where.glob("*.png"))]:
        if path.is_file():
            log.artifact(path, "report")
    if evidence is not None:
        log.artifact(evidence, "evidence")


def report(evidence: str, *, out_dir: str | None = None, correction: str | None = None) -> int:
    """Regenerate an experiment's report (tables, p-values, figures) from its stored ``evidence``,
    training nothing; in ``out_dir`` (new, or written by an earlier ``report`` of the same evidence),
    else in a temporary directory; the table is printed."""
    with tempfile.TemporaryDirectory(prefix="ctxrank-report-") as tmp:
        where = Path(tmp) if out_dir is None else Path(out_dir)
        if out_dir is not None:
            refuse_evidence_as_output(where, "--out", "give the report a directory of its own")
            claim_output_dir(where, overwrite=False, what="report", ours=(SPEC_FILE,))
        rebuild_report(evidence, where, correction=correction, studies=out_dir is not None)
        sys.stdout.write((where / "table.md").read_text())
        if out_dir is not None:
            _say(f"\nreport: {where}/results.json, table.md, table.csv")
    return 0


#: what an experiment directory may hold before its experiment.json: runs copied from another one, and
#: their tuning studies
REUSED_ENTRIES = ("runs", "units", "tune")


def _run_and_report(
    loaded: Any,
    where: Path,
    report_only: bool,
    overwrite: bool,
    progress: bool,
    shard: tuple[int, int] | None,
    runner: Any,
) -> Any:
    """Under the directory's lock: check it, run the pending runs (or none), write and print the report;
    returns the run store."""
    claim_output_dir(where, overwrite=overwrite, what="experiment", ours=(SPEC_FILE,), keep=REUSED_ENTRIES)
    if report_only:
        store = RunStore(where)
        store.claim(loaded)
    else:
        store = run_experiment(loaded, where, progress=progress, log=_say, shard=shard, executor=runner)
    build_report(loaded, store, where)
    sys.stdout.write("\n" + (where / "table.md").read_text())
    warned = training_warnings(loaded, store)
    if warned:
        _say(f"\ntraining warnings ({len(warned)}; recorded in each run's summary):")
        for line in warned:
            _say(f"  {line}")
    figures = sorted(p.name for p in where.glob("*.png"))
    shown = "".join(f", {name}" for name in figures)
    _say(f"\nreport: {where}/results.json, table.md, table.csv{shown}")
    return store


def training_warnings(spec: Any, store: RunStore) -> list[str]:
    """``"MODEL seed S fold F: MESSAGE"`` for every warning a stored run's training recorded (a re-ranker
    worse than its initial ranker, a run cut while improving, a stalled run, ...), in run order."""
    found = []
    for seed, fold in spec.run_keys():
        for model in spec.run_names():
            if store.has_run(model, seed, fold):
                summary = FitSummary.from_json(store.load_run(model, seed, fold).get("summary") or {})
                for warning in summary.warnings:
                    text = warning.removeprefix(f"{model}: ")  # the message names its model first
                    found.append(f"{model} seed {seed} fold {fold}: {text}")
    return found


# ------------------------------------------------------------------------------------------- demo
def demo(
    *,
    out_dir: str | None = None,
    runs: int | None = None,
    threads: int | None,
    overrides: Sequence[tuple[str, Any] | str] = (),
    progress: bool = True,
    jobs: int = 2,
) -> int:
    """The ``make demo`` job: the built-in ``demo`` experiment (:func:`experiment`; default ``out_dir``
    results/demo) in ``jobs`` worker processes, each run with ``threads`` threads (None: the demo spec's
    ``runs.threads``); its first line says what runs, from the spec as ``--runs``, ``--threads`` and
    ``--set`` make it."""

    def intro(spec: ExperimentSpec) -> str:
        seeds, threads = spec.runs, spec.train.threads
        return (
            "ctxrank demo: the `demo` experiment (a small QILCM Table 2) on the embedded MQ2008 Fold1: "
            f"LambdaMART, and ListNet, DLCM and QILCM re-ranking its top {spec.rerank.top_k}, {seeds} "
            f"seed{'s' if seeds != 1 else ''}, paired t-tests over test queries; {threads} "
            f"thread{'s' if threads != 1 else ''} a run, {jobs} run(s) at a time. Stored runs are reused: "
            "run it again to see the report at once."
        )

    code = experiment(
        "demo",
        out_dir=out_dir,
        runs=runs,
        threads=threads,
        overrides=overrides,
        progress=progress,
        jobs=jobs,
        intro=intro,
    )
    where = Path(out_dir) if out_dir is not None else default_out("demo")
    _say("\n" + against_stored_evidence(where / "results.json", STORED_DEMO))
    return code


#: the stored evidence of the demo (relative to the working directory: `make demo` runs in the
#: repository root), which `ctxrank demo` compares its table with
STORED_DEMO = Path("evidence") / "demo"


def against_stored_evidence(results_json: Path, evidence: Path) -> str:
    """The report ``results_json`` against the one regenerated from ``evidence``
    (:func:`ctxrank.experiments.recompute.recomputed_text`), or why it is not compared."""
    if not (evidence / "spec.json").is_file():
        return f"not compared with stored evidence: no {evidence} in {Path.cwd()} (the repository has it)"
    fresh = json.loads(results_json.read_text())
    stored_spec = json.loads((evidence / "spec.json").read_text())
    if stored_spec.get("fingerprint") != fresh.get("fingerprint"):  # another experiment: nothing to rebuild
        return recomputed_text(stored_spec, fresh, str(evidence))
    with tempfile.TemporaryDirectory(prefix="ctxrank-demo-") as tmp:
        stored = rebuild_report(evidence, tmp)
    return recomputed_text(stored, fresh, str(evidence))


def quick_demo(
    *,
    fold: int = 1,
    seed: int = 0,
    rounds: int = 500,
    early_stopping: int = 50,
    learning_rate: float = 0.05,
    threads: int | None,
    json: bool = False,
) -> int:
    """``demo --quick``: the LambdaMART baseline on embedded MQ2008 fold ``fold`` with ``threads`` CPU
    threads (None: ``resolve_threads``'s 1); test metrics under the standard and LETOR 4.0 conventions."""
    t0 = time.perf_counter()
    data = load_fold("mq2008", fold)
    summaries = {s: data_summary(getattr(data, s)) for s in ("train", "valid", "test")}
    if not json:
        out(f"MQ2008 Fold{fold} (embedded copy; Qin & Liu, Introducing LETOR 4.0 Datasets, 2013)")
        out(_splits_table(summaries))
        out()
    model = LambdaMART(
        n_estimators=rounds,
        learning_rate=learning_rate,
        early_stopping_rounds=early_stopping,
        seed=seed,
        num_threads=resolve_threads(threads),
    )
    t1 = time.perf_counter()
    model.fit(data.train, data.valid)
    fit_seconds = time.perf_counter() - t1
    results, conventions = _demo_metrics(model.predict(data.test), data.test)
    total = time.perf_counter() - t0
    if json:
        fitted = {
            "library": f"lightgbm {lightgbm.__version__}",
            "params": model.lgb_params_,
            "best_iteration": model.best_iteration_,
            "max_rounds": rounds,
            "early_stopping_rounds": early_stopping,
            "fit_seconds": fit_seconds,
        }
        print_json(
            {"dataset": "mq2008", "fold": fold, "splits": summaries, "model": fitted,
             "test_metrics": results, "conventions": conventions, "seconds": total}
        )  # fmt: skip
        return 0
    out(
        f"LightGBM lambdarank (label_gain 2^y-1, lr {learning_rate}, seed {seed}, deterministic): "
        f"best iteration {model.best_iteration_} of at most {rounds} "
        f"(early stopping on valid NDCG@10, patience {early_stopping}), fit {fit_seconds:.1f} s"
    )
    _print_demo_metrics(results, data.test)
    out(f"done in {total:.1f} s")
    return 0


def _demo_metrics(scores: Any, test: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Mean test metrics and the convention records under ``standard`` and ``letor4``."""
    results, conventions = {}, {}
    for name in ("standard", "letor4"):
        report = evaluate_scores(scores, test, DEMO_METRICS, metric_convention(name))
        results[name], conventions[name] = report["metrics"], report["conventions"]
    return results, conventions


def _splits_table(summaries: dict[str, dict[str, Any]]) -> str:
    rows = []
    for s, d in summaries.items():
        ll = d["list_length"]
        rows.append(
            (
                s,
                d["source"].split("(")[-1].rstrip(")"),
                d["queries"],
                f"{d['items']:,}",
                d["features"],
                " ".join(f"{k}:{v}" for k, v in d["label_histogram"].items()),
                f"{ll['min']}/{ll['median']:g}/{ll['mean']:.1f}/{ll['max']}",
                d["queries_without_relevant"],
            )
        )
    headers = ("split", "files", "queries", "items", "features", "labels", "len min/med/mean/max", "no rel")
    return table(headers, rows, right=(2, 3, 4, 7))


def _print_demo_metrics(results: dict[str, Any], test: Any) -> None:
    out()
    out(f"test ({test.n_queries} queries, {test.n_items:,} items)")
    rows = [(m, f"{results['standard'][m]:.4f}", f"{results['letor4'][m]:.4f}") for m in DEMO_METRICS]
    out(table(("metric", "standard", "letor4"), rows, right=(1, 2)))
    out()
    out(
        "standard: gain 2^y-1, discount 1/log2(1+r), no-relevant queries score 0 and count in the mean, "
        "ties stable by file order."
    )
    out(
        "letor4:   Eval-Score-4.0.pl rules: ranks 1-2 undiscounted then 1/log2(r), NDCG@k = 0 for a query "
        "shorter than k, no-relevant = 0."
    )
    n_norel = test.queries_without_relevant()
    out(f"{n_norel} of {test.n_queries} test queries have no relevant item (scored 0 under both).")


# ---------------------------------------------------------------------------------------- parsers
def _builtin_names() -> list[str]:
    """The built-in experiment specs (read from the package directory: no import of the library)."""
    configs = Path(__file__).resolve().parents[1] / "experiments" / "configs"
    return sorted(p.name[: -len(".toml")] for p in configs.glob("*.toml"))


def add_experiment_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "experiment",
        parents=[common],
        help="run models x folds x seeds from a TOML spec; report tables, t-tests and figures",
        description=(
            "Run an experiment specification (a TOML file, or a built-in name: "
            f"{', '.join(_builtin_names())}). Every finished run is stored at once in OUT/runs, so an "
            "interrupted experiment resumes where it stopped when run again with the same --out. "
            "The report (results.json, table.md, table.csv, PNG figures) is written to OUT. "
            "See docs/experiments.md."
        ),
    )
    p.add_argument("spec", metavar="CONFIG", help="TOML file or built-in experiment name")
    add_declared(p, ExperimentPaths, only=("out",))
    p.add_argument(
        "--runs", type=positive_int, metavar="N", help="override runs.count (e.g. 3 for a quick look)"
    )
    p.add_argument("--dataset", metavar="NAME", help="override data.dataset (a registered dataset)")
    add_threads(p, "runs.threads of every run; the count is recorded")
    add_overrides(p, "override any spec key, e.g. models.qilcm.model_params.confusion_weight=0 (repeatable)")
    add_executor_options(p, names=("shard",))
    add_executor_options(p, "run", "the runs here, one after the other", "runs.threads")
    add_jobs(p, 1)
    p.add_argument("--report-only", action="store_true", help="rebuild the report from the stored runs")
    add_evidence_options(p)
    add_correction(
        p, "over the report table's family, the target against every baseline on every metric; default: "
        "the spec's report.correction, holm"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write to an --out DIR that holds other files than an experiment's (report files of the "
        "same names are replaced, the others kept); another experiment's directory is still refused",
    )
    add_track(p, "the experiment as one run: the spec's parameters, every stored run's mean test metrics "
              "(MODEL/seedS-foldF/METRIC) and (MLflow) the report and the --evidence directory")  # fmt: skip
    add_progress(p)
    p.set_defaults(
        run=lambda a: experiment(
            a.spec,
            out_dir=a.out,
            runs=a.runs,
            dataset=a.dataset,
            shard=a.shard,
            threads=a.threads,
            overrides=a.overrides,
            correction=a.correction,
            evidence=a.evidence,
            resume_from=a.resume_from,
            report_only=a.report_only,
            progress=not a.no_progress,
            overwrite=a.overwrite,
            executor=a.executor,
            address=a.address,
            max_retries=a.max_retries,
            jobs=1 if a.jobs is None else a.jobs,
            tracking=a.track,
        )
    )


# flag -> parameter of quick_demo / demo; each applies to one form of `ctxrank demo` only
QUICK_FLAGS = {
    "--fold": "fold",
    "--seed": "seed",
    "--rounds": "rounds",
    "--early-stopping": "early_stopping",
    "--learning-rate": "learning_rate",
    "--json": "json",
}
EXPERIMENT_FLAGS = {
    "--out": "out", "--runs": "runs", "--set": "overrides", "--no-progress": "no_progress", "--jobs": "jobs"
}  # fmt: skip


def add_evidence_options(p: Any) -> None:
    """``--evidence DIR`` (write it) and ``--resume-from EVIDENCE`` (continue from it)."""
    add_declared(p, ExperimentPaths, only=("evidence", "resume_from"))


def add_jobs(p: Any, default: int) -> None:
    """``--jobs N``: local worker processes of an experiment (``ProcessExecutor``; None: ``default``)."""
    add_executor_options(p, names=("jobs",), jobs=default)


def add_report_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "report",
        parents=[common],
        help="regenerate an experiment's report from its stored evidence (no training)",
        description=(
            "Rebuild the tables, p-values and figures of an experiment from an evidence directory written "
            "by `ctxrank experiment SPEC --evidence DIR` (the published ones are under evidence/ in the "
            "repository); prints table.md. Nothing is trained: this takes seconds."
        ),
    )
    p.add_argument("evidence", metavar="EVIDENCE", help="an evidence directory (e.g. evidence/demo)")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="keep results.json, table.md, table.csv and the figures in DIR, beside the restored run store "
        "(runs/, units/, and each tuned run's study trials in tune/: copy them into another experiment's "
        "--out to reuse its runs)",
    )
    add_correction(p, "override the spec's report.correction")
    p.set_defaults(run=lambda a: report(a.evidence, out_dir=a.out, correction=a.correction))


def add_demo_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="the `make demo` job: a small QILCM Table 2 experiment on the embedded MQ2008",
        description=(
            "Runs the built-in `demo` experiment (`ctxrank experiment demo`): on the embedded MQ2008 "
            "Fold1, LambdaMART and ListNet, DLCM and QILCM re-ranking its top 100, 3 seeds; prints the "
            "table with paired t-tests and writes the report (results.json, table.md/.csv, metrics.png) "
            "to --out. --quick instead fits one LambdaMART model (ctxrank's LightGBM lambdarank baseline) "
            "and prints test NDCG@1/3/5/10 and MAP under the standard and LETOR 4.0 conventions (about "
            "ten seconds). Options of one form are refused with the other."
        ),
    )
    add_threads(
        p, "default 1 a run, so that the numbers do not depend on the core count; the count is recorded"
    )
    e = p.add_argument_group("the demo experiment")
    add_jobs(e, DEMO_JOBS)
    e.add_argument("--out", metavar="DIR", help="report directory (default results/demo)")
    e.add_argument("--runs", type=positive_int, metavar="N", help="runs of the demo experiment (default 3)")
    add_overrides(e, "override a key of the demo spec, e.g. models.qilcm.train.max_epochs=1 (repeatable)")
    add_progress(e)
    q = p.add_argument_group("--quick: one LambdaMART model")
    q.add_argument("--quick", action="store_true", help="LambdaMART alone, no experiment")
    q.add_argument("--fold", type=non_negative_int, metavar="K", help="MQ2008 fold 1..5 (default 1)")
    q.add_argument("--seed", type=seed_int, help="LightGBM seed (default 0)")
    q.add_argument("--rounds", type=positive_int, help="maximum boosting rounds (default 500)")
    q.add_argument("--early-stopping", type=positive_int, metavar="N", help="patience (default 50)")
    q.add_argument("--learning-rate", type=float, help="default 0.05")
    add_json(q)
    p.set_defaults(run=_run_demo)


def _given(a: argparse.Namespace, flags: dict[str, str]) -> dict[str, Any]:
    """``{flag: value}`` of the flags given (not at their argparse default None / False / [])."""
    values = vars(a)
    return {
        flag: values[dest]
        for flag, dest in flags.items()
        if values[dest] is not None and values[dest] is not False and values[dest] != []
    }


def _run_demo(a: argparse.Namespace) -> int:
    quick, experiment_only = _given(a, QUICK_FLAGS), _given(a, EXPERIMENT_FLAGS)
    if a.quick:
        if experiment_only:
            raise ValueError(f"{', '.join(experiment_only)} apply to the demo experiment, not to --quick")
        return quick_demo(**{QUICK_FLAGS[f]: v for f, v in quick.items()}, threads=a.threads)
    if quick:
        raise ValueError(
            f"{', '.join(quick)} apply to `ctxrank demo --quick` only; the demo experiment takes "
            "--out, --runs, --threads, --jobs, --set and --no-progress"
        )
    return demo(
        out_dir=a.out,
        runs=a.runs,
        threads=a.threads,
        overrides=a.overrides,
        progress=not a.no_progress,
        jobs=DEMO_JOBS if a.jobs is None else a.jobs,
    )
