"""Experiment tracking: ``--track mlflow[:URI]`` and ``--track tensorboard[:DIR]``.

:class:`Tracking` says where runs are logged (parsed and checked from the text before any work);
:meth:`Tracking.start` opens a :class:`TrackedRun`, the one small interface the commands log through:
``log_params``, ``log_metrics`` at a step, ``log_artifact`` (a file or a directory), ``child`` (a nested
run) and ``end``. Two implementations:

* MLflow (``mlflow-skinny`` or ``mlflow``), through ``MlflowClient`` (no global active run): a local
  file store by default (``./mlruns``; MLflow 3 keeps it in maintenance mode behind
  ``MLFLOW_ALLOW_FILE_STORE``, which is set while ctxrank opens such a store), or any tracking URI
  (``file:``, ``http(s)://`` server, a database URL). Runs go to the experiment named by
  ``MLFLOW_EXPERIMENT_NAME``, else ``ctxrank``; a child run is tagged with its parent
  (``mlflow.parentRunId``).
* TensorBoard (``tensorboard``, written with ``torch.utils.tensorboard``): every run is a directory
  ``DIR/NAME-TIME`` of event files (a child run a directory inside its parent's); metrics are scalars,
  parameters a text summary (and the HParams dashboard's record when the run ends), artifacts are not
  copied (TensorBoard keeps none): their paths are listed in a text summary.

MLflow and TensorBoard are imported only by :meth:`Tracking.start` (``import ctxrank`` and the CLI
without ``--track`` load neither); a missing package is a ``ValueError`` naming the ``track`` extra.
Metric names are made valid for both (:func:`metric_name`: ``valid_ndcg@10`` -> ``valid_ndcg_at_10``).

The training hook is :class:`RunLog`, the ``on_epoch`` callback of
:func:`ctxrank.training.loop.fit` (and of ``run_training``): each epoch's record (``train_loss``,
``valid_<metric>``: what ``train_log.jsonl`` and the training curves hold) is logged at step ``epoch``
as the epoch ends; :meth:`RunLog.finish` logs the records no epoch reported (a baseline's iterations,
the epochs before a ``--resume``). A tracker that fails in the middle of a run (a server gone) gives a
warning and stops logging; the training goes on.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import socket
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from ctxrank._checks import OptionError, OptionText
from ctxrank._declare import Option, declared_as
from ctxrank._io import LOCK_FILE, check_own_database, is_ctxrank_temp

__all__ = [
    "DEFAULTS",
    "KINDS",
    "TRACK",
    "RunLog",
    "TrackOptions",
    "TrackedRun",
    "Tracking",
    "flat_params",
    "metric_name",
]

#: tracker kind -> its default location (``--track KIND`` without ``:URI``)
DEFAULTS = {"mlflow": "./mlruns", "tensorboard": "./tensorboard"}
KINDS = tuple(DEFAULTS)
#: how to get the Python package of each kind (named as the kind)
INSTALL = "pip install 'ctxrank[track]'"
#: URI schemes ``--track mlflow:URI`` accepts (besides a plain directory path)
MLFLOW_SCHEMES = ("file", "http", "https", "sqlite", "postgresql", "mysql", "mssql")
FORMS = (
    "mlflow, mlflow:DIR, mlflow:file:///DIR, mlflow:http(s)://HOST[:PORT], mlflow:sqlite:///FILE (or another "
    "database URL), tensorboard, tensorboard:DIR"
)
EXPERIMENT = "ctxrank"  # the MLflow experiment unless MLFLOW_EXPERIMENT_NAME names one


# ----------------------------------------------------------------------------------------- names
def metric_name(name: str) -> str:
    """``name`` as a metric name valid in MLflow (alphanumerics, ``_ - . : /`` and spaces) and
    TensorBoard: ``@`` becomes ``_at_`` (``ndcg@10`` -> ``ndcg_at_10``), any other character ``_``."""
    return re.sub(r"[^\w\-.:/ ]", "_", name.replace("@", "_at_"))


def flat_params(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The leaves of a nested dict under dotted keys (``{"train": {"lr": 1e-3}}`` -> ``{"train.lr":
    1e-3}``); an empty table is left out."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flat_params(v, key + "."))
        else:
            out[key] = v
    return out


def _text(value: Any) -> str:
    """A parameter's value as text: strings as they are, anything else as JSON (``[128, 64]``, ``null``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


# -------------------------------------------------------------------------------------- Tracking
@dataclass(frozen=True)
class Tracking:
    """Where runs are logged: ``kind`` (``mlflow`` or ``tensorboard``) and ``uri`` (None: the kind's
    default, :data:`DEFAULTS`). The form is checked here; :meth:`check` checks the place (a directory
    that can be written, the package installed) and :meth:`start` opens a run.

    Raises:
        ValueError: an unknown kind (listing the valid ones) or a malformed URI.
    """

    kind: str
    uri: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in DEFAULTS:
            raise ValueError(f"unknown tracker {self.kind!r}; valid: {', '.join(KINDS)} (forms: {FORMS})")
        if self.uri is None:
            return
        if not isinstance(self.uri, str) or not self.uri.strip():
            raise OptionError(
                "{tracking} {kind}:URI needs a non-empty URI or directory, got {uri!r}",
                kind=self.kind,
                uri=self.uri,
            )
        scheme = _scheme(self.uri)
        if self.kind == "tensorboard" and scheme not in ("", "file"):
            raise OptionError("{tracking} tensorboard:DIR takes a local directory, got {uri!r}", uri=self.uri)
        if self.kind == "mlflow" and scheme not in ("", *MLFLOW_SCHEMES):
            raise OptionError(
                "{tracking} mlflow:URI: unsupported URI {uri!r}; expected a directory or a URI of {schemes}",
                uri=self.uri,
                schemes=", ".join(s + ":" for s in MLFLOW_SCHEMES),
            )
        if scheme in ("http", "https") and not urlparse(self.uri).netloc:
            raise OptionError(
                "{tracking} mlflow:URI: {uri!r} names no host (e.g. http://localhost:5000)", uri=self.uri
            )

    @classmethod
    def parse(cls, text: str) -> Tracking:
        """``KIND`` or ``KIND:URI`` (``mlflow:http://host:5000``: the URI is everything after the first
        colon)."""
        kind, sep, uri = text.partition(":")
        if sep and not uri:
            raise ValueError(f"expected KIND or KIND:URI, got {text!r} (nothing after the colon)")
        return cls(kind.strip(), uri if sep else None)

    @property
    def location(self) -> str:
        """The URI or directory runs go to (the default when none was given)."""
        return DEFAULTS[self.kind] if self.uri is None else self.uri

    @property
    def directory(self) -> Path | None:
        """The local directory of a file store or of TensorBoard's event files (None for a server or a
        database)."""
        loc = self.location
        scheme = _scheme(loc)
        if scheme == "file":
            return Path(urlparse(loc).path)
        return Path(loc) if scheme == "" else None

    def __str__(self) -> str:
        return f"{self.kind}:{self.location}"

    def check(self) -> None:
        """Check, before any work, that runs can be logged: the package is installed, a local directory
        can be written (and, for MLflow, is new, empty or a file store already).

        Raises:
            ValueError: what is wrong and how to fix it.
        """
        if importlib.util.find_spec(self.kind) is None:
            raise OptionError(
                "{tracking} {kind} needs the {kind} package: {install}", kind=self.kind, install=INSTALL
            )
        if self.kind == "mlflow" and _scheme(self.location) in ("sqlite", "postgresql", "mysql", "mssql"):
            missing = [m for m in ("sqlalchemy", "alembic") if importlib.util.find_spec(m) is None]
            if missing:
                raise ValueError(
                    f"an MLflow database store ({self.location}) needs {' and '.join(missing)} "
                    "(pip install mlflow, or pip install sqlalchemy alembic)"
                )
        where = OptionText.of("{tracking} {value}", value=self)
        if self.kind == "mlflow" and _scheme(self.location) == "sqlite":
            check_own_database(self.location, owner="MLflow", tables=_mlflow_tables(), where=where)
        if _scheme(self.location) in ("http", "https"):
            _check_reachable(self.location, where)
        directory = self.directory
        if directory is None:
            return
        if directory.exists() and not directory.is_dir():
            raise ValueError(f"{where}: a file, not a directory")
        ancestor = directory
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
            raise ValueError(f"{where}: cannot create or write {directory} ({ancestor} is not writable)")
        if self.kind == "mlflow" and directory.is_dir() and not _is_file_store(directory):
            raise ValueError(
                f"{where}: the directory holds other files and is no MLflow file store (no .trash, no "
                "experiment with meta.yaml); give a new or empty directory"
            )

    def start(
        self, name: str, *, tags: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None
    ) -> TrackedRun:
        """Open a run named ``name`` and log its ``params`` (tags: MLflow tags; TensorBoard writes
        them as text); a run whose parameters cannot be logged is ended as ``FAILED``.

        Raises:
            ValueError: the package is missing, the place is unusable, the server refused.
        """
        self.check()
        if self.kind == "mlflow":
            run: TrackedRun = _MLflowRun.open(self.location, name, tags or {})
        else:
            run = _TensorBoardRun.open(self.directory, name, tags or {})
        if params:
            try:
                run.log_params(params)
            except Exception:
                run.end("FAILED")
                raise
        return run


#: ``--track KIND[:URI]``, the one declaration of every command that logs to an experiment tracker
#: (``train``, ``tune``, ``experiment``): parsed and checked into a :class:`ctxrank.tracking.Tracking`;
#: ``{track}`` in its help says what the command logs
TRACK = Option(
    "--track",
    "log to an experiment tracker: mlflow[:URI] (a local MLflow file store, default ./mlruns; URI: a "
    "directory, file:///DIR, http(s)://HOST:PORT or a database URL) or tensorboard[:DIR] (event files, "
    "default ./tensorboard). Logs {track}. Needs ctxrank[track] (docs/training.md, Tracking)",
    parse=Tracking.parse,
    metavar="KIND[:URI]",
)


@dataclass(frozen=True)
class TrackOptions:
    """The experiment tracker of a command (:data:`TRACK`): ``tracking`` is its name in the API (the
    ``tracking=`` of ``run_training``, ``run_experiment``, ``tune``) and in the library's errors."""

    tracking: Tracking | None = declared_as(None, TRACK)  # noqa: RUF009 (a field() with its metadata)


def _scheme(uri: str) -> str:
    """The URI scheme of ``uri`` ("" for a plain path; a one-letter scheme is a Windows drive)."""
    if not uri.startswith("file:") and "://" not in uri:
        return ""
    scheme = urlparse(uri).scheme.lower()
    return "" if len(scheme) == 1 else scheme.split("+")[0]  # postgresql+psycopg2 -> postgresql


def _mlflow_tables() -> set[str]:
    """The names of the tables of an MLflow database (its SQLAlchemy models' tables)."""
    try:
        import mlflow.store.model_registry.dbmodels.models
        import mlflow.store.tracking.dbmodels.models  # noqa: F401 (registers the tables)
        from mlflow.store.db.base_sql_model import Base
    except ImportError as exc:
        raise ValueError(f"an MLflow database store needs mlflow (pip install mlflow) ({exc})") from None
    return set(Base.metadata.tables)


def _check_reachable(uri: str, where: OptionText, timeout: float = 10.0) -> None:
    """A TCP connection to the server of ``uri`` opens within ``timeout`` seconds (MLflow's own client
    retries an unreachable server for minutes before it fails)."""
    url = urlparse(uri)
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
        with socket.create_connection((url.hostname, port), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        raise OptionError("{where}: cannot reach the tracking server ({exc})", where=where, exc=exc) from None


def _is_file_store(directory: Path) -> bool:
    """``directory`` is empty or looks like an MLflow file store."""
    entries = list(directory.iterdir())
    return not entries or (directory / ".trash").is_dir() or any((e / "meta.yaml").is_file() for e in entries)


# ------------------------------------------------------------------------------------- runs
class TrackedRun:
    """One run of a tracker; a context manager that ends it (``FAILED`` when an exception leaves the
    block, ``KILLED`` on Ctrl-C)."""

    name: str

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log parameters (values as text: JSON for lists and None)."""
        raise NotImplementedError

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Log metric values at ``step`` (None: 0); names pass through :func:`metric_name`."""
        raise NotImplementedError

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        """Log a file or a directory (its files), under ``name`` (None: at the top)."""
        raise NotImplementedError

    def child(self, name: str) -> TrackedRun:
        """A nested run (a tuning trial in its study)."""
        raise NotImplementedError

    def end(self, status: str = "FINISHED") -> None:
        """End the run (``FINISHED``, ``FAILED`` or ``KILLED``)."""
        raise NotImplementedError

    def __enter__(self) -> TrackedRun:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        status = "FINISHED" if kind is None else "KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED"
        try:
            self.end(status)
        except Exception as err:  # the work is done (or failed on its own): a tracker does not fail it
            warnings.warn(
                f"experiment tracking: the run could not be ended: {_first_line(err)}", stacklevel=2
            )


@contextlib.contextmanager
def _file_store_allowed() -> Iterator[None]:
    """``MLFLOW_ALLOW_FILE_STORE=true`` while a store is opened: MLflow 3 refuses its file store (in
    maintenance mode, still MLflow's ``./mlruns`` layout) without it."""
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if before is None:
            del os.environ["MLFLOW_ALLOW_FILE_STORE"]
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = before


def _mlflow_client(uri: str) -> Any:
    """An ``MlflowClient`` of the store at ``uri`` (a path becomes a ``file:`` URI)."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise OptionError(
            "{tracking} mlflow needs mlflow-skinny (or mlflow): {install} ({exc})", install=INSTALL, exc=exc
        ) from None
    if _scheme(uri) == "":
        uri = Path(uri).absolute().as_uri()
    with _file_store_allowed():
        return MlflowClient(tracking_uri=uri)


class _MLflowRun(TrackedRun):
    """A run in an MLflow tracking store (``MlflowClient``)."""

    def __init__(self, client: Any, run_id: str, experiment_id: str, name: str) -> None:
        self.client, self.run_id, self.experiment_id, self.name = client, run_id, experiment_id, name
        self.ended = False

    @classmethod
    def open(
        cls, uri: str, name: str, tags: Mapping[str, Any], parent: _MLflowRun | None = None
    ) -> _MLflowRun:
        try:
            if parent is None:
                client = _mlflow_client(uri)
                from mlflow.environment_variables import MLFLOW_EXPERIMENT_NAME

                experiment = MLFLOW_EXPERIMENT_NAME.get() or EXPERIMENT
                found = client.get_experiment_by_name(experiment)
                experiment_id = found.experiment_id if found is not None else _create(client, experiment)
            else:
                client, experiment_id = parent.client, parent.experiment_id
            all_tags = {k: _text(v) for k, v in tags.items()}
            if parent is not None:
                all_tags["mlflow.parentRunId"] = parent.run_id
            run = client.create_run(experiment_id, run_name=name, tags=all_tags)
        except ValueError:
            raise
        except Exception as exc:  # MlflowException, a connection error: no traceback for the user
            raise OptionError(
                "{tracking} mlflow:{uri}: {kind}: {why}",
                uri=uri,
                kind=type(exc).__name__,
                why=_first_line(exc),
            ) from None
        return cls(client, run.info.run_id, experiment_id, name)

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        items = [Param(k, _text(v)[:MAX_PARAM_VAL_LENGTH]) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + MAX_PARAMS_TAGS_PER_BATCH])

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(metric_name(k), float(v), now, step or 0) for k, v in metrics.items() if v is not None
        ]
        for i in range(0, len(items), 1000):  # MLflow's limit of metrics per batch
            self.client.log_batch(self.run_id, metrics=items[i : i + 1000])

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        path = Path(path)
        if not path.is_dir():
            self.client.log_artifact(self.run_id, str(path), artifact_path=name)
            return
        for file in _output_files(path):  # not ctxrank's lock and temporary files
            folder = PurePosixPath(*((name,) if name else ()), *file.relative_to(path).parent.parts)
            self.client.log_artifact(
                self.run_id, str(file), artifact_path=str(folder) if folder.parts else None
            )

    def child(self, name: str) -> _MLflowRun:
        return _MLflowRun.open("", name, {}, parent=self)

    def end(self, status: str = "FINISHED") -> None:
        if not self.ended:
            self.ended = True
            self.client.set_terminated(self.run_id, status)


def _output_files(directory: Path) -> list[Path]:
    """The files of an output directory, in name order, less ctxrank's own bookkeeping: its lock file
    (:data:`ctxrank._io.LOCK_FILE`) and the temporary files of writes in progress."""
    return sorted(
        p for p in directory.rglob("*") if p.is_file() and p.name != LOCK_FILE and not is_ctxrank_temp(p.name)
    )


def _create(client: Any, name: str) -> str:
    """Create the experiment ``name`` (another process may have created it meanwhile)."""
    try:
        return client.create_experiment(name)
    except Exception:
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


class _TensorBoardRun(TrackedRun):
    """A directory of TensorBoard event files (``torch.utils.tensorboard.SummaryWriter``)."""

    def __init__(self, writer: Any, directory: Path, name: str) -> None:
        self.writer, self.directory, self.name = writer, directory, name
        self.params: dict[str, Any] = {}
        self.last: dict[str, float] = {}  # each metric's last value (the HParams record)
        self.artifacts: list[str] = []
        self.ended = False

    @classmethod
    def open(cls, root: Path | None, name: str, tags: Mapping[str, Any]) -> _TensorBoardRun:
        assert root is not None  # Tracking.__post_init__: TensorBoard writes to a local directory
        stamp = time.strftime("%Y%m%d-%H%M%S")
        directory = root / f"{_safe_dir(name)}-{stamp}"
        n = 1
        while directory.exists():  # two runs of one name in one second
            n += 1
            directory = root / f"{_safe_dir(name)}-{stamp}-{n}"
        run = cls._at(directory, name)
        if tags:
            run.writer.add_text("tags", _table({k: _text(v) for k, v in tags.items()}), 0)
        return run

    @classmethod
    def _at(cls, directory: Path, name: str) -> _TensorBoardRun:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise OptionError(
                "{tracking} tensorboard needs the tensorboard package: {install} ({exc})",
                install=INSTALL,
                exc=exc,
            ) from None
        try:
            return cls(SummaryWriter(log_dir=str(directory)), directory, name)
        except OSError as exc:
            raise OptionError(
                "{tracking} tensorboard: cannot write {directory}: {exc}", directory=directory, exc=exc
            ) from None

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.params.update(params)
        self.writer.add_text("params", _table({k: _text(v) for k, v in params.items()}), 0)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        for k, v in metrics.items():
            if v is not None:
                self.writer.add_scalar(metric_name(k), float(v), step or 0)
                self.last[metric_name(k)] = float(v)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        self.artifacts.append(f"{name or Path(path).name}: {Path(path).absolute()}")
        self.writer.add_text("artifacts", "\n\n".join(self.artifacts), 0)

    def child(self, name: str) -> _TensorBoardRun:
        return _TensorBoardRun._at(self.directory / _safe_dir(name), name)

    def end(self, status: str = "FINISHED") -> None:
        if self.ended:
            return
        self.ended = True
        if self.params and self.last:  # the HParams dashboard: this run's parameters and final metrics
            from torch.utils.tensorboard.summary import hparams

            values = {
                k: v if isinstance(v, (bool, int, float, str)) else _text(v) for k, v in self.params.items()
            }
            for summary in hparams(values, self.last):
                self.writer.file_writer.add_summary(summary)
        if status != "FINISHED":
            self.writer.add_text("status", status, 0)
        self.writer.close()


def _safe_dir(name: str) -> str:
    return re.sub(r"[^\w.\-]", "_", name) or "run"


def _table(values: Mapping[str, str]) -> str:
    """A Markdown table for TensorBoard's text dashboard."""
    rows = "\n".join(f"| {k} | {v.replace('|', '/')} |" for k, v in values.items())
    return "| name | value |\n|---|---|\n" + rows


# --------------------------------------------------------------------------------- training hook
class RunLog:
    """The ``on_epoch`` callback of :func:`ctxrank.training.loop.fit` that logs each epoch's record
    (``train_loss`` and ``valid_<metric>``, the training curves' values) to ``run`` at step ``epoch``.
    A failing tracker warns once and logs nothing more (the training goes on)."""

    def __init__(self, run: TrackedRun) -> None:
        self.run = run
        self.logged: set[int] = set()
        self.failed = False

    def __call__(self, record: Mapping[str, Any]) -> None:
        values = {k: v for k, v in record.items() if k == "train_loss" or k.startswith("valid_")}
        self.log(values, int(record["epoch"]))
        self.logged.add(int(record["epoch"]))

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Log ``metrics`` unless the tracker failed before (then warn once, go on)."""
        self.guarded(self.run.log_metrics, metrics, step)

    def artifact(self, path: str | Path, name: str | None = None) -> None:
        """Log the file or directory ``path`` (as :meth:`log`: a failure warns, nothing more)."""
        self.guarded(self.run.log_artifact, path, name)

    def guarded(self, fn: Any, *args: Any) -> None:
        """``fn(*args)`` unless the tracker failed before; an exception warns once and stops logging."""
        if self.failed:
            return
        try:
            fn(*args)
        except Exception as exc:
            self.failed = True
            warnings.warn(
                f"experiment tracking stopped: {type(exc).__name__}: {_first_line(exc)}", stacklevel=3
            )

    def finish(self, history: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> None:
        """After the run: the records of ``history`` that no epoch reported (a baseline's iterations,
        the epochs of a run before its ``--resume``) and the numbers of the run's ``summary``
        (``summary.best_epoch``, ``summary.best_valid_metric``, ...)."""
        for record in history:
            if int(record["epoch"]) not in self.logged:
                self(record)
        numbers = {
            f"summary.{k}": v
            for k, v in summary.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        self.log(numbers)

    @classmethod
    def of(cls, tracking: Tracking | str | None, name: str, **start: Any) -> RunLog | None:
        """The log of a run started by :meth:`Tracking.start` (``tracking`` as a :class:`Tracking` or
        its text, ``mlflow:./mlruns``; ``start``: its tags and params); None without ``tracking``."""
        if tracking is None:
            return None
        if isinstance(tracking, str):
            tracking = Tracking.parse(tracking)
        if not isinstance(tracking, Tracking):
            raise TypeError(
                f"tracking: expected a Tracking or text such as 'mlflow:./mlruns', got {tracking!r}"
            )
        return cls(tracking.start(name, **start))
