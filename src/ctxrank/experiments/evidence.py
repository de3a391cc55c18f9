"""Stored evidence of an experiment: what its report is computed from, compact enough for the repository.

An evidence directory (``ctxrank experiment SPEC --evidence DIR`` writes it from the run store;
``ctxrank report DIR`` regenerates every table, p-value and figure from it, training nothing)::

    spec.json       the experiment's specification (``ExperimentSpec.to_dict``), its fingerprint and
                    the SHA-256 digest of every other file of the directory (``digests``)
    runs.parquet    one row per (model, seed, fold, test query): the query's value of every metric
    runs.json.gz    per run, the rest of its run file: resolved config, split, training summary, grid,
                    seconds, code (git commit, uncommitted changes) and context (threads, device,
                    package versions, machine; CPU model and PyTorch's CPU instruction set since
                    2026-12-06)
    units.json.gz   the per-run records shared by the models (anomaly scores), when there are any
    trials.csv.gz   the experiment's tuning studies (``[tune]``), one row a trial: model, seed, fold,
                    trial, chosen (1 for the trial the run trained and tested), state, validation value,
                    epochs, seconds and the trial's hyperparameters (data: ``ctxrank report`` does not
                    read it)

Every read checks the files against their digests (:func:`check_digests`): a file changed, added or
removed after the evidence was written (a hand-edited ``runs.parquet`` would change the report's
tables) is refused, naming it; ``trials.csv.gz``, which the report does not read, may be left out. An
evidence directory written before digests were recorded is read with a warning (its files cannot be
checked); :func:`record_digests` records them.

Restoring writes the run files back, so the report of :mod:`ctxrank.experiments.report` runs unchanged
on them: a regenerated table equals the one built from the original run store. Parquet (pyarrow,
zstd) keeps the per-query values exact (float64) at a few bytes each.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ctxrank._checks import OptionError, OptionText
from ctxrank._declare import option
from ctxrank._io import (
    atomic_write,
    claim_output_dir,
    dumps,
    floats_or_nan,
    one_writer_at_a_time,
    sha256_file,
)
from ctxrank._overrides import Override
from ctxrank.config import apply_overrides
from ctxrank.experiments.report import build_report
from ctxrank.experiments.spec import (
    AnomalySpec,
    ClicksSpec,
    ExperimentSpec,
    GridSpec,
    ReportSpec,
    TuneSpec,
    correction_override,
    data_from_record,
    settings_from_record,
)
from ctxrank.experiments.store import RunStore, check_run

__all__ = [
    "EVIDENCE_FILES",
    "EvidenceWarning",
    "KeptEvidence",
    "check_digests",
    "check_evidence",
    "read_evidence",
    "rebuild_report",
    "record_digests",
    "refuse_evidence_as_output",
    "restore_runs",
    "resume_from_evidence",
    "runs_said",
    "spec_from_record",
    "write_evidence",
]

SPEC = "spec.json"
RUNS = "runs.parquet"
RUN_META = "runs.json.gz"
UNITS = "units.json.gz"
TRIALS = "trials.csv.gz"
#: the files of an evidence directory (``units.json.gz`` only with anomaly records, ``trials.csv.gz``
#: only for a tuned experiment)
EVIDENCE_FILES = (SPEC, RUNS, RUN_META, UNITS, TRIALS)
#: the files ``spec.json`` records the digests of; of them, the one a reader may find left out (data
#: that ``ctxrank report`` does not read)
DIGESTED = EVIDENCE_FILES[1:]
_OPTIONAL = (TRIALS,)
DIGESTS = "digests"  #: the key of ``spec.json`` that maps each file to its SHA-256 (hex)
_KEY_COLUMNS = ("model", "seed", "fold", "query_id")
#: the columns of every row of ``trials.csv.gz`` (the rest: the studies' hyperparameters)
_TRIAL_COLUMNS = ("model", "seed", "fold", "trial", "chosen", "state", "value", "epochs", "seconds")
_METRICS = "evidence_metrics"  #: in runs.json.gz: the metrics a run file held (columns of runs.parquet)


def write_evidence(spec: ExperimentSpec, store: RunStore, to: str | Path) -> dict[str, int]:
    """Write the evidence of every run and unit stored in ``store`` to the directory ``to``, with the
    runs, units and trials of an earlier evidence of the same experiment that ``store`` lacks (those of
    shards run in other run stores, on other machines or in other sessions: a write never drops
    another process's runs; a run both hold is written as ``store`` has it). Another experiment's
    evidence is refused. Returns counts: ``runs``, ``kept`` (of them, from the earlier evidence),
    ``stored`` (from ``store``), ``rows`` (per-query rows) and ``bytes`` written."""
    to = Path(to)
    _check_target(to, spec)
    stored = _stored_runs(spec, store)
    kept, kept_units, kept_trials = _earlier_evidence(spec, store, to)
    if not stored and not kept:
        raise ValueError(f"{store.root}: no stored run to keep as evidence")
    order = {(m, s, f): i for i, (m, (s, f)) in enumerate(product(spec.run_names(), spec.run_keys()))}
    runs = sorted(stored + kept, key=lambda r: order[(r["model"], r["seed"], r["fold"])])
    metrics = sorted({k for r in runs for k in r["metrics"]})
    columns: dict[str, list[Any]] = {c: [] for c in (*_KEY_COLUMNS, *metrics)}
    for r in runs:
        n = len(r["query_ids"])
        columns["model"] += [r["model"]] * n
        columns["seed"] += [r["seed"]] * n
        columns["fold"] += [r["fold"]] * n
        columns["query_id"] += list(r["query_ids"])
        for k in metrics:
            columns[k] += list(r["metrics"][k]) if k in r["metrics"] else [None] * n
    table = pa.table(
        {
            **{c: columns[c] for c in ("model", "query_id")},
            "seed": pa.array(columns["seed"], pa.int64()),
            "fold": pa.array(columns["fold"], pa.int64()),
            **{k: pa.array(np.asarray(columns[k], dtype=np.float64), pa.float64()) for k in metrics},
        }
    )
    to.mkdir(parents=True, exist_ok=True)
    atomic_write(to / RUNS, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
    meta = [
        {**{k: v for k, v in r.items() if k not in ("query_ids", "metrics")}, _METRICS: list(r["metrics"])}
        for r in runs
    ]
    _write_gz(to / RUN_META, meta)
    units = [
        {"seed": s, "fold": f, **store.load_unit(s, f)} for s, f in spec.run_keys() if store.has_unit(s, f)
    ]
    units = sorted(units + kept_units, key=lambda u: spec.run_keys().index((u["seed"], u["fold"])))
    if units:
        _write_gz(to / UNITS, units)
    elif (to / UNITS).exists():
        (to / UNITS).unlink()
    trials = _trials(store, stored)
    if kept_trials is not None and not kept_trials.empty:  # in the order of the runs, as a whole write's
        trials = pd.concat([trials, kept_trials], ignore_index=True, sort=False)
        rank = [order[k] for k in zip(trials["model"], trials["seed"], trials["fold"], strict=True)]
        trials = trials.iloc[np.argsort(rank, kind="stable")].reset_index(drop=True)
    if trials is not None:
        atomic_write(to / TRIALS, lambda tmp: _write_csv_gz(tmp, trials))
    elif (to / TRIALS).exists():
        (to / TRIALS).unlink()
    _write_record(to, {"name": spec.name, "fingerprint": spec.fingerprint(), "spec": spec.to_dict()})
    size = sum((to / name).stat().st_size for name in EVIDENCE_FILES if (to / name).exists())
    counts = {"runs": len(runs), "kept": len(kept), "stored": len(stored)}
    return {**counts, "rows": table.num_rows, "bytes": size}


class EvidenceWarning(UserWarning):
    """Evidence written before its files' digests were recorded: read unchecked."""


def _write_record(to: Path, record: dict[str, Any]) -> None:
    """``spec.json``: ``record`` with the digests of the files of ``to`` (written last, after them)."""
    record = {**record, DIGESTS: {name: sha256_file(to / name) for name in DIGESTED if (to / name).is_file()}}
    atomic_write(to / SPEC, lambda tmp: tmp.write_text(dumps(record, indent=1) + "\n"))


def record_digests(path: str | Path) -> dict[str, str]:
    """Record in ``spec.json`` the digests of the files of the evidence at ``path`` as they are now
    (evidence written before digests were kept); the spec record is checked first and kept as it is.
    Returns the digests.

    Raises:
        ValueError: no evidence directory, or a spec record that does not match its fingerprint.
    """
    path = Path(path)
    record = _read_json(path / SPEC)
    spec_from_record(record, path / SPEC)
    _write_record(path, {k: v for k, v in record.items() if k != DIGESTS})
    return _read_json(path / SPEC)[DIGESTS]


def check_digests(path: str | Path, record: Any) -> None:
    """Refuse the evidence at ``path`` when one of its files is not the one ``spec.json`` (``record``)
    recorded: its SHA-256 differs, it is missing (``trials.csv.gz`` may be) or it was added. A record
    without digests (evidence written by an older ctxrank) gives a warning: its files are read unchecked.

    Raises:
        ValueError: naming the file and what differs, in one line.
    """
    path = Path(path)
    recorded = record.get(DIGESTS) if isinstance(record, dict) else None
    if recorded is None:
        warnings.warn(
            f"{path}: {SPEC} records no digests of its files (evidence written before they were kept): "
            "its files are read unchecked; record them with "
            "ctxrank.experiments.evidence.record_digests(PATH) once the files are known to be right",
            EvidenceWarning,
            stacklevel=3,
        )
        return
    hexdigest = re.compile(r"[0-9a-f]{64}")
    if not isinstance(recorded, dict) or any(
        k not in DIGESTED or not isinstance(v, str) or not hexdigest.fullmatch(v) for k, v in recorded.items()
    ):
        raise ValueError(
            f"{path / SPEC}: malformed {DIGESTS!r} (expected SHA-256 hex digests of {', '.join(DIGESTED)})"
        )
    for name in DIGESTED:
        file, digest = path / name, recorded.get(name)
        if digest is None:
            if file.exists():
                raise ValueError(
                    f"{file}: not a file of this evidence ({SPEC} records no digest of it: it was added "
                    "after the evidence was written); remove it, or write the evidence again"
                )
        elif not file.is_file():
            if name not in _OPTIONAL:
                raise ValueError(f"{file}: missing; {SPEC} records its digest: restore the file")
        elif sha256_file(file) != digest:
            raise ValueError(
                f"{file}: its SHA-256 differs from the one {SPEC} records (the file was changed after the "
                "evidence was written); restore it, or write the evidence again with "
                "`ctxrank experiment --evidence`"
            )


def runs_said(counts: dict[str, int]) -> str:
    """``N runs`` of a write's ``counts``, with those kept from the earlier evidence when there are."""
    kept = counts["kept"]
    return f"{counts['runs']} runs" + (f", {kept} of them kept from its earlier write" if kept else "")


def _earlier_evidence(
    spec: ExperimentSpec, store: RunStore, to: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """``(runs, units, trials)`` of the evidence already at ``to`` (this experiment's:
    :func:`_check_target`) that ``store`` lacks: the runs of ``spec`` and their studies' rows of
    ``trials.csv.gz`` (None without that file), the units of its run keys. Empty where ``to`` holds no
    evidence yet.

    Raises:
        ValueError: the earlier evidence cannot be read (its message says how to replace it).
    """
    if not (to / SPEC).is_file():
        return [], [], None
    try:
        _, runs, units = read_evidence(to)
        trials = pd.read_csv(to / TRIALS) if (to / TRIALS).is_file() else None
    except (OSError, ValueError, EOFError) as exc:
        raise OptionError(
            "{evidence} {to}: its runs cannot be read to keep those this run store lacks ({exc}); move it "
            "away to write a new evidence",
            to=to,
            exc=exc,
        ) from None
    keys = set(spec.run_keys())
    wanted = {(m, s, f) for m in spec.run_names() for s, f in keys}
    runs = [r for r in runs if (k := (r["model"], r["seed"], r["fold"])) in wanted and not store.has_run(*k)]
    units = [u for u in units if (u["seed"], u["fold"]) in keys and not store.has_unit(u["seed"], u["fold"])]
    if trials is not None:
        lacked = {(r["model"], r["seed"], r["fold"]) for r in runs}
        mine = [k in lacked for k in zip(trials["model"], trials["seed"], trials["fold"], strict=True)]
        trials = trials[mine]
        other = [c for c in trials.columns if c not in _TRIAL_COLUMNS and trials[c].isna().all()]
        trials = trials.drop(columns=other)  # the hyperparameters of runs not kept
    return runs, units, trials


#: how often (seconds) ``ctxrank experiment --evidence`` rewrites the evidence while runs are stored
REFRESH_SECONDS = 600.0


@dataclass(frozen=True)
class ExperimentPaths:
    """Where ``ctxrank experiment`` keeps its runs (``out``), writes their evidence (``evidence``) and
    restores runs from (``resume_from``)."""

    out: str | None = option(
        None,
        "--out",
        "experiment directory (default: results/<name>, or results/<name>-<dataset> with --dataset)",
        metavar="DIR",
    )
    evidence: str | None = option(
        None,
        "--evidence",
        "also write the stored runs' evidence to DIR (per-query metrics in Parquet, each run's config, "
        "split, threads, versions and commit): `ctxrank report DIR` regenerates the report from it; kept up "
        f"to date every {REFRESH_SECONDS / 60:g} minutes while runs are stored, and written when the runs "
        "end in an error",
        metavar="DIR",
    )
    resume_from: str | None = option(
        None,
        "--resume-from",
        "first restore into --out the runs stored in this experiment's evidence directory (with their tuning "
        "trials) that --out does not hold, then run the others: an experiment whose evidence was kept "
        "part-way (--report-only --evidence DIR) continues in a new directory or on another machine",
        metavar="EVIDENCE",
    )


class KeptEvidence:
    """The evidence of an experiment kept up to date while it runs (``ctxrank experiment --evidence``):
    a thread rewrites it from the run store every ``every`` seconds (:data:`REFRESH_SECONDS`) when runs
    were stored since the last write, and it is written once more when the runs end in an error, so
    that an experiment stopped part-way leaves the evidence of the runs it finished, to keep and
    continue from (:func:`resume_from_evidence`). The writes of the experiment's processes (its shards)
    to the directory come one after the other.

    Use as a context manager around the runs, then :meth:`write` for the final evidence. A refresh that
    fails is reported through ``log`` (the next one, or the final write, tries again)."""

    def __init__(
        self,
        spec: ExperimentSpec,
        store: RunStore,
        to: str | Path,
        *,
        every: float | None = None,
        log: Any = print,
    ) -> None:
        self.spec, self.store, self.to, self.log = spec, store, Path(to), log
        self.every = REFRESH_SECONDS if every is None else every
        self._written: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ctxrank-evidence", daemon=True)

    def __enter__(self) -> KeptEvidence:
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._stop.set()
        self._thread.join()
        if exc_type is not None:  # the runs failed or were interrupted: keep what they stored
            self._refresh("kept: the runs stored before the error")

    def write(self) -> dict[str, int]:
        """Write the evidence of every stored run now (:func:`write_evidence`); its counts."""
        with one_writer_at_a_time(self.to):
            counts = write_evidence(self.spec, self.store, self.to)
        self._written = counts["stored"]
        return counts

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._refresh("refreshed")

    def _refresh(self, what: str) -> None:
        keys = self.spec.run_keys()
        stored = sum(self.store.has_run(m, s, f) for m in self.spec.run_names() for s, f in keys)
        if not stored or stored == self._written:
            return
        try:
            counts = self.write()
        except Exception as exc:  # a refresh never ends the runs (the final write raises)
            why = exc.text if isinstance(exc, OptionError) else str(exc)
            self.log(
                OptionText.of(
                    "evidence: {to} not written ({kind}: {why})", to=self.to, kind=type(exc).__name__, why=why
                )
            )
        else:
            self.log(f"evidence: {self.to} {what} ({runs_said(counts)})")


def read_evidence(
    path: str | Path, overrides: Sequence[Override] = ()
) -> tuple[ExperimentSpec, list[dict[str, Any]], list[dict[str, Any]]]:
    """``(spec, run records, unit records)`` of an evidence directory, validated (every run as a run
    file would be: ``ctxrank.experiments.store.check_run``); ``overrides`` of the spec: see
    :func:`spec_from_record`."""
    path = Path(path)
    for name in (SPEC, RUNS, RUN_META):
        if not (path / name).is_file():
            raise ValueError(f"{path}: not an evidence directory (no {name}; see docs/experiments.md)")
    record = _read_json(path / SPEC)
    spec = spec_from_record(record, path / SPEC, overrides)
    check_digests(path, record)
    table = pq.read_table(path / RUNS)
    cols = table.column_names
    if any(c not in cols for c in _KEY_COLUMNS):
        raise ValueError(f"{path / RUNS}: needs the columns {list(_KEY_COLUMNS)}, has {cols}")
    data = {c: table.column(c).to_pylist() for c in _KEY_COLUMNS}
    values = {c: table.column(c).to_numpy(zero_copy_only=False) for c in cols if c not in _KEY_COLUMNS}
    rows: dict[tuple[str, int, int], list[int]] = {}
    for i, key in enumerate(zip(data["model"], data["seed"], data["fold"], strict=True)):
        rows.setdefault(key, []).append(i)
    runs = []
    for meta in _read_gz(path / RUN_META):
        if not isinstance(meta, dict) or not isinstance(meta.get(_METRICS), list):
            raise ValueError(f"{path / RUN_META}: malformed run entry (no {_METRICS!r} list)")
        names = meta.pop(_METRICS)
        key = (meta.get("model"), meta.get("seed"), meta.get("fold"))
        idx = rows.get(key, [])
        unknown = [k for k in names if k not in values]
        if unknown:
            raise ValueError(f"{path / RUNS}: no column of the metric(s) {unknown} of run {key}")
        run = {
            **meta,
            "query_ids": [data["query_id"][i] for i in idx],
            "metrics": {k: floats_or_nan(values[k][idx]) for k in names},
        }
        runs.append(check_run(f"{path} ({key[0]} seed {key[1]} fold {key[2]})", run))
    units = _read_gz(path / UNITS) if (path / UNITS).is_file() else []
    return spec, runs, units


def restore_runs(
    path: str | Path, into: str | Path, overrides: Sequence[Override] = (), *, studies: bool = False
) -> tuple[ExperimentSpec, RunStore]:
    """The evidence at ``path`` written back as a run store in ``into`` (a new or empty directory, or
    one restored from the same evidence before): ``(spec, store)``, ready for ``build_report``; with
    ``studies``, the tuned runs' studies' ``trials.csv`` too (when the evidence holds them), for copying
    its runs with their ``tune/`` into another experiment. The spec with ``overrides``
    (:func:`spec_from_record`)."""
    spec, runs, units = read_evidence(path, overrides)
    store = RunStore(into)
    store.claim(spec)
    _restore(spec, store, Path(path), runs, units, trials="if-kept" if studies else "no")
    return spec, store


def resume_from_evidence(spec: ExperimentSpec, store: RunStore, path: str | Path) -> tuple[int, int]:
    """Write into ``store`` (claimed by ``spec``) every run of ``spec`` that the evidence at ``path``
    holds and ``store`` does not, with its unit and, for a tuned run, its study's ``trials.csv`` (so that
    the evidence written later holds its trials again): an experiment whose evidence was kept part-way
    (``--report-only --evidence``) continues in a new run store, on another machine or in another
    session. Returns ``(restored, already stored)``.

    Raises:
        ValueError: ``path`` holds another experiment's evidence, or a tuned run without its trials.
    """
    path = Path(path)
    if not (path / SPEC).is_file():
        raise OptionError("{resume_from} {path}: not an evidence directory (no {spec})", path=path, spec=SPEC)
    if not spec.matches_record(_read_json(path / SPEC)):
        raise OptionError(
            "{resume_from} {path}: the evidence of another experiment (other data, models or protocol)",
            path=path,
        )
    _, runs, units = read_evidence(path)
    return _restore(spec, store, path, runs, units, trials="yes")


def _restore(
    spec: ExperimentSpec,
    store: RunStore,
    path: Path,
    runs: list[dict[str, Any]],
    units: list[dict[str, Any]],
    *,
    trials: str,
) -> tuple[int, int]:
    """Write the ``runs`` and ``units`` of the evidence at ``path`` that ``spec`` has and ``store``
    lacks, and the studies' trials of the tuned ones: ``trials`` ``"yes"`` (required), ``"if-kept"``
    (when the evidence holds ``trials.csv.gz``) or ``"no"``. Returns ``(restored, already stored)``."""
    keys = set(spec.run_keys())
    wanted = {(m, s, f) for m in spec.run_names() for s, f in keys}
    runs = [r for r in runs if (r["model"], r["seed"], r["fold"]) in wanted]
    missing = [r for r in runs if not store.has_run(r["model"], r["seed"], r["fold"])]
    wanted_trials = trials == "yes" or (trials == "if-kept" and (path / TRIALS).is_file())
    studies = _study_trials(path, store, missing) if wanted_trials else {}
    for unit in units:
        seed, fold = unit.pop("seed"), unit.pop("fold")
        if (seed, fold) in keys and not store.has_unit(seed, fold):
            store.save_unit(seed, fold, unit)
    for run in missing:  # the study first: a run file stands for a finished run with its trials
        key = (run["model"], run["seed"], run["fold"])
        if key in studies:
            text = studies[key].to_csv(index=False)
            study = store.study_path(*key)
            study.mkdir(parents=True, exist_ok=True)
            atomic_write(study / "trials.csv", lambda tmp, text=text: tmp.write_text(text))
        store.save_run(run)
    return len(missing), len(runs) - len(missing)


def _study_trials(path: Path, store: RunStore, runs: list[dict[str, Any]]) -> dict[tuple[str, int, int], Any]:
    """The ``trials.csv`` of every tuned run of ``runs`` as its study wrote it (the evidence's rows of
    that run, less the run's key and ``chosen``, and less the other studies' hyperparameters)."""
    tuned = [r for r in runs if isinstance(r.get("tune"), dict)]
    if not tuned:
        return {}
    for r in tuned:  # where the runner keeps it, not a path out of the experiment directory
        where = str(store.study_path(r["model"], r["seed"], r["fold"]).relative_to(store.root))
        if r["tune"].get("dir") != where:
            raise ValueError(
                f"{path / RUN_META}: run {r['model']} seed {r['seed']} fold {r['fold']} records its study in "
                f"{r['tune'].get('dir')!r}, not {where!r}"
            )
    if not (path / TRIALS).is_file():
        raise ValueError(f"{path}: no {TRIALS}, but its runs were tuned: their trials are missing")
    try:
        frame = pd.read_csv(path / TRIALS)
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{path / TRIALS}: unreadable evidence file ({exc})") from None
    first = ["trial", "state", "value", "epochs", "seconds"]
    need = list(_TRIAL_COLUMNS)
    if any(c not in frame.columns for c in need):
        raise ValueError(f"{path / TRIALS}: needs the columns {need}, has {list(frame.columns)}")
    out = {}
    for r in tuned:
        key = (r["model"], r["seed"], r["fold"])
        rows = frame[(frame["model"] == key[0]) & (frame["seed"] == key[1]) & (frame["fold"] == key[2])]
        if rows.empty:
            run = f"{key[0]} seed {key[1]} fold {key[2]}"
            raise ValueError(f"{path / TRIALS}: no trial of the tuned run {run}")
        params = sorted(c for c in frame.columns if c not in need and rows[c].notna().any())
        out[key] = rows[first + params]
    return out


def rebuild_report(
    path: str | Path, out: str | Path, *, correction: str | None = None, studies: bool = False
) -> dict[str, Any]:
    """The report of the evidence at ``path`` (``results.json``, ``table.md``, ``table.csv``, figures)
    written to ``out`` (:func:`restore_runs` puts the run files there), training nothing;
    ``correction`` overrides the spec's ``report.correction`` (the override of ``ctxrank experiment
    --correction``: ``spec.correction_override``); ``studies``: restore the tuned runs' study trials too
    (``ctxrank report --out DIR``). Returns the results dict."""
    spec, store = restore_runs(path, out, correction_override(correction), studies=studies)
    return build_report(spec, store, out)


def spec_from_record(record: Any, where: Any = SPEC, overrides: Sequence[Override] = ()) -> ExperimentSpec:
    """The :class:`ExperimentSpec` of ``experiment.json`` / ``spec.json`` (``ExperimentSpec.to_dict``),
    with typed ``overrides`` set in that dict before the spec is built (as :func:`load_spec
    <ctxrank.experiments.spec.load_spec>` sets them in a spec file's; a report setting such as
    ``report.correction``), checked against the fingerprint recorded beside it."""
    if not isinstance(record, dict) or not isinstance(record.get("spec"), dict):
        raise ValueError(f"{where}: not an experiment record (no 'spec' object)")
    d = apply_overrides(record["spec"], overrides)
    try:
        spec = ExperimentSpec(
            name=d["name"],
            title=d["title"],
            **data_from_record(d["data"]),
            models=d["models"],
            runs=d["runs"],
            **settings_from_record(d),
            report=_dataclass(ReportSpec, d["report"]),
            anomaly=None if d["anomaly"] is None else _dataclass(AnomalySpec, d["anomaly"]),
            source=d["source"],
            grids={m: GridSpec(axes=_axes(g["axes"])) for m, g in d["grids"].items()},
            tune=None if d["tune"] is None else _dataclass(TuneSpec, d["tune"]),
            clicks=None if d.get("clicks") is None else ClicksSpec.from_dict(d["clicks"], list(d["models"])),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{where}: malformed experiment record ({type(exc).__name__}: {exc})") from None
    except ValueError as exc:  # a value the spec refuses (an unsafe model name, a run count, ...)
        raise ValueError(f"{where}: {exc}") from None
    if spec.fingerprint() != record.get("fingerprint"):
        raise ValueError(
            f"{where}: the specification does not match its fingerprint {record.get('fingerprint')!r} "
            f"(it gives {spec.fingerprint()!r}): the file was edited, or written by another version"
        )
    return spec


def check_evidence(spec: ExperimentSpec, store: RunStore, to: str | Path) -> None:
    """What :func:`write_evidence` will need, checked before an experiment runs (so that hours of runs
    do not end in a refusal): ``to`` new, empty or this experiment's evidence, and the study of every
    tuned run already stored in ``store`` (runs copied from another experiment's ``runs/`` need its
    ``tune/`` too), and ``to`` apart from the run store (:func:`_check_apart`)."""
    _check_apart(Path(to), store)
    _check_target(Path(to), spec)
    _study_files(store, _stored_runs(spec, store))


def refuse_evidence_as_output(path: str | Path, option: str, hint: str) -> None:
    """Refuse ``path``, the output directory given as ``option``, when it holds an experiment's evidence
    (whose files the generic refusal would call foreign); ``hint`` ends the message."""
    path = Path(path)
    if (path / SPEC).is_file() and (path / RUNS).is_file():
        raise ValueError(f"{option} {path} holds an experiment's evidence ({SPEC}, {RUNS}): {hint}")


#: the directories of a run store (``ctxrank.experiments.store``): the runs write there
_STORE_DIRS = ("runs", "units", "tune")


def _check_apart(to: Path, store: RunStore) -> None:
    """Refuse an evidence directory that is the run store's, holds it, or is one of its directories
    (``runs/``, ``units/``, ``tune/``): the runs would fill it with files the evidence does not own,
    and its write after hours of runs would be refused. A directory of its own inside the store's is
    fine (``--out results/x --evidence results/x/evidence``)."""
    where, root = to.resolve(), store.root.resolve()
    inside = where.is_relative_to(root) and where != root
    if root.is_relative_to(where) or (inside and where.relative_to(root).parts[0] in _STORE_DIRS):
        what = "is" if where == root else "holds" if root.is_relative_to(where) else "is inside the runs of"
        raise OptionError(
            "{evidence} {to} {what} the experiment directory {root} ({out}): the runs are written there; "
            "give the evidence a directory of its own (e.g. {own})",
            to=to,
            what=what,
            root=store.root,
            own=store.root / "evidence",
        )


def _stored_runs(spec: ExperimentSpec, store: RunStore) -> list[dict[str, Any]]:
    keys = spec.run_keys()
    return [store.load_run(m, s, f) for m in spec.run_names() for s, f in keys if store.has_run(m, s, f)]


def _study_files(store: RunStore, runs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Path]]:
    """``(run, its study's trials.csv)`` of every run tuned by ``[tune]`` (it records its study's
    directory and chosen trial).

    Raises:
        ValueError: a tuned run whose study has no ``trials.csv`` (moved, pruned, or not copied with it).
    """
    out = []
    for r in runs:
        tuned = r.get("tune")
        if not isinstance(tuned, dict) or "dir" not in tuned:
            continue
        path = store.root / tuned["dir"] / "trials.csv"
        if not path.is_file():
            run = f"{r['model']} seed {r['seed']} fold {r['fold']}"
            raise ValueError(
                f"{path}: the trials of run {run} are missing: its study directory {tuned['dir']} is not "
                f"in {store.root} (a run copied from another experiment's runs/ needs that experiment's "
                f"{tuned['dir']} too: copy its tune/ beside runs/)"
            )
        out.append((r, path))
    return out


def _trials(store: RunStore, runs: list[dict[str, Any]]) -> Any:
    """Every trial of the tuning studies of ``runs`` (:func:`_study_files`), one row a trial, the run's
    key first; None without a tuned run."""
    frames = []
    for r, path in _study_files(store, runs):
        tuned = r["tune"]
        frame = pd.read_csv(path)
        chosen = (frame["trial"] == tuned.get("best_trial")).astype(int)
        key = {"model": r["model"], "seed": r["seed"], "fold": r["fold"]}
        first = pd.DataFrame(key, index=frame.index)
        parts = [first, frame.iloc[:, :1], chosen.rename("chosen"), frame.iloc[:, 1:]]
        frames.append(pd.concat(parts, axis=1))
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True, sort=False)


def _write_csv_gz(path: Path, frame: Any) -> None:
    """``frame`` as gzipped CSV with no time stamp in the gzip header (the same trials, the same bytes)."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as f:
        f.write(frame.to_csv(index=False).encode())


def _dataclass(cls: type, d: dict[str, Any]) -> Any:
    """``cls(**d)`` with JSON lists turned back into the tuples the fields hold."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            v = d[f.name]
            values[f.name] = tuple(v) if isinstance(v, list) and "tuple" in str(f.type) else v
    return cls(**values)


def _axes(axes: list) -> tuple:
    return tuple((name, tuple(points)) for name, points in axes)


def _check_target(to: Path, spec: ExperimentSpec) -> None:
    """``to`` new, empty, or holding this experiment's evidence (``_io.claim_output_dir``)."""
    if claim_output_dir(to, overwrite=False, what="evidence", ours=(SPEC,)):
        old = _read_json(to / SPEC)
        if not spec.matches_record(old):
            raise OptionError(
                "{evidence} {to} holds the evidence of another experiment; give another one", to=to
            )


def _write_gz(path: Path, obj: Any) -> None:
    text = dumps(obj)
    atomic_write(path, lambda tmp: tmp.write_bytes(gzip.compress(text.encode(), mtime=0)))


def _read_gz(path: Path) -> Any:
    try:
        return json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{path}: unreadable evidence file ({exc})") from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable evidence file ({exc})") from None
