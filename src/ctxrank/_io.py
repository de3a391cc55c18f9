"""File output shared by every writer: atomic writes, the one JSON encoder and the TOML writer.

Every file ctxrank writes goes through :func:`atomic_write` (temporary file next to the target, fsync,
rename), so a killed process never leaves a half-written file under the target name. Every JSON
document, on disk or on stdout, goes through :func:`dumps`: strict JSON, where NaN and infinities
become ``null`` (never the ``NaN`` literal that other parsers reject), NumPy scalars and arrays become
Python numbers and lists, tuples become lists and paths become strings.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import Any


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
    temporary file's private 0600, so a teammate or a serving account can read models and scores.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        write(tmp)
        with tmp.open("rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
    raise TypeError(f"cannot write {type(v).__name__} as TOML")
