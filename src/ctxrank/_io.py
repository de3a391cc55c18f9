"""File output shared by every writer: atomic writes, the one JSON encoder and the TOML writer.

Every file ctxrank writes goes through :func:`atomic_write` (temporary file next to the target, fsync,
rename), so a killed process never leaves a half-written file under the target name, every file gets the
umask's mode, and a failed write (a full disk, ...) is an ``OSError`` naming the file. Every JSON
document, on disk or on stdout, goes through :func:`dumps`: strict JSON, where NaN and infinities
become ``null`` (never the ``NaN`` literal that other parsers reject), NumPy scalars and arrays become
Python numbers and lists, tuples become lists and paths become strings. :func:`lock_directory` gives
an output directory one writer (or the processes of one experiment) and clears the temporary files of
killed writes; :func:`claim_output_dir` is the one rule of what an output directory may already hold.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path, PurePath
from typing import Any

from ctxrank._checks import OptionError, OptionText

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locks
    fcntl = None  # type: ignore[assignment]


def jsonable(value: Any) -> Any:
    """``value`` with NaN/inf -> None, NumPy -> Python, tuples -> lists, paths -> str (recursively)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":  # arrays and NumPy scalars
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, PurePath):
        return str(value)
    return value


def dumps(obj: Any, *, indent: int | None = 2, sort_keys: bool = False) -> str:
    """Strict JSON text of ``obj`` (see :func:`jsonable`); raises TypeError on other objects."""
    return json.dumps(jsonable(obj), indent=indent, sort_keys=sort_keys, allow_nan=False)


def fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable (no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    """The process umask (read by setting and restoring it: the standard library has no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary file next to ``path``, fsync it, then rename it to ``path``.

    The file gets the mode a plain ``open(path, "w")`` would give (0666 less the umask), not the
    temporary file's private 0600, so a teammate or a serving account can read models and scores; the
    mode is set after ``write``, which may have replaced the temporary file (``safetensors`` does).

    Raises:
        OSError: a failed write (a full disk, a quota, an I/O error, ...), naming ``path`` (and, for a
            full disk, its directory); ``path`` is left as it was and no temporary file remains.
    """
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(tmp_name)
        write(tmp)
        with tmp.open("rb+") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _write_error(exc, path, tmp) from exc
        raise


#: errors of a device without room: the message says the disk is full and where
_DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def _write_error(exc: OSError, path: Path, tmp: Path | None = None) -> OSError:
    """``exc``, raised while writing ``path`` (through its temporary file ``tmp``), as an ``OSError``
    whose message names ``path`` (a full disk or quota: and the directory that needs room); its
    ``errno`` is kept."""
    why = exc.strerror or str(exc) or type(exc).__name__
    other = exc.filename if exc.filename not in (None, str(path), str(tmp)) else None
    if other is not None:  # another file failed inside ``write`` (e.g. a missing input)
        why = f"{why}: {other}"
    if exc.errno in _DISK_FULL:
        text = (
            f"cannot write {path}: the disk is full ({why}); free space where {path.parent} is, or write "
            "to another disk"
        )
    else:
        text = f"cannot write {path}: {why}"
    err = OSError(text)
    err.errno = exc.errno
    return err


@contextlib.contextmanager
def writing(path: Path, tmp: Path | None = None) -> Iterator[None]:
    """Name ``path`` in an ``OSError`` raised inside (a writer that streams into ``tmp`` or ``path``
    itself, e.g. a download): see :func:`atomic_write`."""
    try:
        yield
    except OSError as exc:
        raise _write_error(exc, path, tmp) from exc


def sha256_file(path: str | Path) -> str:
    """The SHA-256 (hex) of the file ``path``, read in chunks (``hashlib.file_digest``: a large file is
    never held whole)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as strict JSON (:func:`dumps`) to ``path``, atomically."""
    text = dumps(obj) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_json_file(path: Path, what: str) -> Any:
    """A JSON file's content; a missing, non-UTF-8 or non-JSON file (e.g. a pickle) is a ValueError."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: missing {what}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a valid {what} (expected JSON: {exc})") from None


def float_or_nan(value: Any) -> float:
    """A float read back from strict JSON: ``null`` (how NaN and infinities are written) -> NaN."""
    return math.nan if value is None else float(value)


def floats_or_nan(values: Any) -> list[float]:
    """A list of floats read back from strict JSON (``null`` -> NaN)."""
    return [float_or_nan(v) for v in values]


def to_toml(d: Mapping[str, Any]) -> str:
    """A small TOML writer for saved configs (scalars, lists and nested tables)."""
    lines: list[str] = []
    _write_table(lines, d, prefix="")
    return "\n".join(lines).lstrip("\n") + "\n"


def _write_table(lines: list[str], d: Mapping[str, Any], prefix: str) -> None:
    tables = []
    for k, v in d.items():
        if isinstance(v, Mapping):
            tables.append((k, v))
        elif v is not None:
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in tables:
        name = f"{prefix}.{k}" if prefix else k
        lines.append(f"\n[{name}]")
        _write_table(lines, v, name)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):  # an inline table
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def override_text(key: str, value: Any) -> str:
    """``KEY=VALUE`` that ``--set`` reads back as ``(key, value)`` (a command line to show or repeat)."""
    return f"{key}={_toml_value(value)}"


# ------------------------------------------------------------------------------- output directories
LOCK_FILE = ".ctxrank.lock"  #: the lock file ctxrank keeps in every output directory it writes
#: the temporary files of :func:`atomic_write` (``tempfile.mkstemp``: 8 characters of [a-z0-9_])
TEMP_FILE = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def is_ctxrank_temp(name: str) -> bool:
    """Whether ``name`` is a temporary file of :func:`atomic_write` (``.NAME.XXXXXXXX.tmp``)."""
    return TEMP_FILE.fullmatch(name) is not None


def remove_orphaned_temps(directory: Path) -> list[Path]:
    """Delete the temporary files that killed writes of :func:`atomic_write` left in ``directory`` and
    below (only ctxrank's own ``.NAME.XXXXXXXX.tmp`` files); the paths removed. Call it only while
    holding the directory's lock alone (:func:`lock_directory`): another writer's file would go too."""
    removed = []
    for root, _, files in os.walk(directory):
        for name in files:
            if is_ctxrank_temp(name):
                path = Path(root) / name
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def claim_output_dir(
    directory: str | Path,
    *,
    overwrite: bool,
    what: str,
    ours: Iterable[str] = (),
    keep: Iterable[str] = (),
    how: str = "give --overwrite",
) -> bool:
    """The one rule of every writer of an output directory (``ctxrank train``, ``experiment``, ``tune``,
    the estimators' and baselines' ``save``): ctxrank writes into a directory that is new, empty or its
    own, never into one holding files it did not write unless ``overwrite`` (then files of the names it
    writes are replaced, the others kept). Call it before any work.

    ``ours``: entries (relative paths) that show ctxrank wrote the directory, each written there before
    anything else (a model's ``ctxrank.json``, an experiment's ``experiment.json``, a study's lock);
    ``keep``: other entries of ctxrank's that may come first. Its lock file and the temporary files of
    killed writes are ctxrank's too. ``what`` names the output and ``how`` the option that lifts the
    refusal, for the message. Returns whether one of ``ours`` exists: the caller continues that output,
    replaces it or refuses.

    Raises:
        ValueError: ``directory`` is a file, or holds files ctxrank did not write (named) and
            ``overwrite`` is false.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} is a file; give a directory for the {what}")
    if not directory.is_dir():
        return False
    if any(os.path.lexists(directory / name) for name in ours):
        return True
    allowed = {LOCK_FILE, *keep}
    names = (p.name for p in directory.iterdir())
    foreign = sorted(n for n in names if n not in allowed and not is_ctxrank_temp(n))
    if foreign and not overwrite:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ValueError(
            f"{directory} holds files that ctxrank did not write ({shown}); choose a new or empty directory "
            f"for the {what}, or {how} to write there anyway (files of the names it writes are replaced, "
            "the others are kept)"
        )
    return False


class DirectoryLock:
    """A lock held on an output directory (:func:`lock_directory`) until :meth:`release` (or the end of
    a ``with`` block, or the process's exit)."""

    def __init__(self, directory: Path, fd: int | None, *, first: bool, created: bool) -> None:
        self.directory = directory
        self.first = first  #: no other process held the lock when it was taken
        self._fd = fd
        self._created = created  # lock_directory made the directory

    def release(self) -> None:
        """Drop the lock; the last holder removes the lock file, and the directory when the lock made
        it and nothing was written there (a command that failed early leaves nothing behind)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with _gate(self.directory) as gate:
                if gate is not None and _try_flock(fd, fcntl.LOCK_EX):  # no other holder
                    (self.directory / LOCK_FILE).unlink(missing_ok=True)
                    if self._created and not any(self.directory.iterdir()):
                        self.directory.rmdir()
        finally:
            os.close(fd)  # closing the descriptor drops its flock

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        try:
            self.release()
        except OSError:
            # releasing failed while another error propagates (out of memory: listing the directory
            # fails with ENOMEM too): that error is the one to report, not the directory; the next
            # holder of the lock removes the lock file
            if exc is None:
                raise


@contextlib.contextmanager
def one_writer_at_a_time(directory: str | Path) -> Iterator[None]:
    """A short critical section over ``directory`` (created if missing): an exclusive ``flock`` on the
    directory itself, so that the processes of one experiment (its shards) write a directory of several
    files (an evidence directory) one after the other, never interleaved. Nothing is locked where
    ``fcntl`` does not exist (Windows)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    with _gate(directory):
        yield


@contextlib.contextmanager
def _gate(directory: Path) -> Iterator[int | None]:
    """A short exclusive ``flock`` on ``directory`` itself (None: the directory was removed)."""
    try:
        gate = os.open(directory, os.O_RDONLY)
    except FileNotFoundError:
        yield None
        return
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        yield None if os.fstat(gate).st_nlink == 0 else gate  # removed while we waited
    finally:
        os.close(gate)


def lock_directory(directory: str | Path, *, key: str | None = None, what: str = "output") -> DirectoryLock:
    """Take the lock of output ``directory`` (created if missing) for this process.

    ``key`` None: an exclusive lock (one writer: ``ctxrank train``). A ``key`` (an experiment's spec
    fingerprint): a lock shared with the processes holding the same key (the shards of one experiment,
    which coordinate through their run store) and refused to any other. The lock is ``flock`` on
    ``DIR/.ctxrank.lock``, which also records the holders' pids for the error message; the check and
    the record are made under a short ``flock`` on the directory itself. The process that takes the
    lock first (no other holder) removes the temporary files of killed writes
    (:func:`remove_orphaned_temps`). Where ``fcntl`` does not exist (Windows) nothing is locked.

    Raises:
        ValueError: another process holds the lock (exclusively, or with another key); the message names
            the directory and the holders' pids.
    """
    directory = Path(directory)
    if fcntl is None:  # pragma: no cover - Windows
        directory.mkdir(parents=True, exist_ok=True)
        return DirectoryLock(directory, None, first=True, created=False)
    while True:  # again if the directory is removed (by a holder's release) while we wait for it
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        with _gate(directory) as gate:
            if gate is None:
                continue
            fd, first = _join(directory, key, what)
            try:
                if first:  # under the gate: no process of the same key can have started a write yet
                    remove_orphaned_temps(directory)
            except BaseException:
                os.close(fd)
                raise
        break
    return DirectoryLock(directory, fd, first=first, created=created)


def _join(directory: Path, key: str | None, what: str) -> tuple[int, bool]:
    """Under the gate: the lock file's descriptor, locked, and whether no other process held it."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        first = _try_flock(fd, fcntl.LOCK_EX)
        holders = {} if first else _lock_record(fd)
        if not first and (key is None or holders.get("key") != key or not _try_flock(fd, fcntl.LOCK_SH)):
            raise ValueError(_busy_text(directory, holders, key, what))
        pids = [os.getpid()] if first else [*_live(holders.get("pids")), os.getpid()]
        _write_lock_record(fd, {"key": key, "pids": pids})
        if first and key is not None:
            fcntl.flock(fd, fcntl.LOCK_SH)  # let the processes of the same key join
    except BaseException:
        os.close(fd)
        raise
    return fd, first


def _try_flock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _lock_record(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        record = json.loads(os.read(fd, 1 << 16).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_lock_record(fd: int, record: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (dumps(record, indent=None) + "\n").encode("utf-8"))


def _live(pids: Any) -> list[int]:
    """The recorded pids whose process still exists (a holder that exited has dropped its lock)."""
    if not isinstance(pids, list):
        return []
    alive = []
    for pid in pids:
        if isinstance(pid, int) and pid > 0:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except OSError:
                pass
            alive.append(pid)
    return alive


def _busy_text(directory: Path, holders: dict[str, Any], key: str | None, what: str) -> str:
    pids = _live(holders.get("pids"))
    by = f"pid {', '.join(str(p) for p in pids)}" if pids else "a process whose pid is not recorded"
    if key is not None and holders.get("key") not in (None, key):
        how = f"another {what} with a different specification is running there ({by})"
    else:
        how = f"another ctxrank process is writing it ({by})"
    return (
        f"{directory} is locked: {how}; wait for it to finish, or choose another directory "
        f"(the lock is {directory / LOCK_FILE}, released when that process exits)"
    )


# ------------------------------------------------------------------------------- SQLite databases
_SQLITE_HEADER = b"SQLite format 3\x00"


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite database URL (``sqlite:///FILE``, ``sqlite+pysqlite:////ABS/FILE``, as
    SQLAlchemy reads them), None for another database or an in-memory one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0].lower() != "sqlite" or not rest.startswith("/"):
        return None
    name = rest[1:].partition("?")[0]
    return None if name in ("", ":memory:") else Path(name)


def check_own_database(url: str, *, owner: str, tables: Iterable[str], where: str | OptionText) -> None:
    """Refuse, before anything is written, to let ``owner`` (MLflow, Optuna) add its tables to an SQLite
    database that holds others: the file of ``url`` must be new, empty, or a database whose tables are
    all ``owner``'s (``tables``, with ``alembic_version``, the migrations' record both keep): one that
    ``owner`` created, through ctxrank or not. Other databases are not checked.

    Raises:
        OptionError: ``where`` (the option and its value), the file is no SQLite database or names its
            foreign tables.
    """
    path = sqlite_file(url)
    if path is None or not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return
    if not path.is_file():
        raise OptionError(
            "{where}: {path} is not a file; give an SQLite database file", where=where, path=path
        )
    try:
        with path.open("rb") as fh:
            header = fh.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise OptionError("{where}: cannot read {path} ({exc})", where=where, path=path, exc=exc) from None
    if header != _SQLITE_HEADER:
        raise OptionError(
            "{where}: {path} is not an SQLite database; give a new file or {owner}'s database",
            where=where,
            path=path,
            owner=owner,
        )
    try:
        with contextlib.closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as db:
            found = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    except sqlite3.Error as exc:
        raise OptionError(
            "{where}: cannot read the SQLite database {path} ({exc})", where=where, path=path, exc=exc
        ) from None
    known = {*tables, "alembic_version"}
    foreign = sorted(n for n in found if n not in known and not n.startswith("sqlite_"))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OptionError(
            "{where}: {path} holds tables that are not {owner}'s ({shown}); {owner} would add its own "
            "tables to that database: give a new file or a database {owner} created",
            where=where,
            path=path,
            owner=owner,
            shown=shown,
        )
