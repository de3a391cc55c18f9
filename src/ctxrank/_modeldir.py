"""The metadata file of a saved model directory, shared by ``training.checkpoint`` (neural models) and the
baselines (which save their own directories): its name, its format version, how it is read, and the
checks every value read from it passes before anything is allocated from it.

It sits below both, so that ``training.checkpoint.load_model`` can load every kind of model while the
baselines never import ``training.checkpoint``.

A model directory is untrusted input (it may come from anywhere): every file is opened only after
``os.stat`` / ``os.fstat`` show a regular file of bounded size (a FIFO or a device is refused, never
read), ``ctxrank.json`` is bounded in size and nesting, and every value taken from it is type- and
range-checked here, with a one-line ``ValueError`` naming the file and the key.

**Digests**: ``ctxrank.json`` records under ``"sha256"`` the SHA-256 of every other file the model's
loader reads (``model.safetensors``; the ``ctxrank.json`` of the re-ranking model's initial ranker and
of each ensemble member, whose own ``"sha256"`` covers their files; LightGBM's ``model.txt`` has its
``model_sha256``), so one file changed or swapped in after saving is refused, by a digest computed
while the file is read and checked before anything is built from it (:func:`read_regular`). A
directory saved before digests were recorded loads with a :class:`IntegrityWarning`. The digests show
that the files belong together, not who wrote them (whoever can write the directory can recompute
them).

**Writing** one (:func:`claim_model_dir`): the directory must be new, empty or, with ``overwrite``,
anything (:func:`ctxrank._io.claim_output_dir`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import reprlib
import shutil
import stat
import warnings
from pathlib import Path, PurePosixPath
from typing import Any

# the bounds of a model config are those of a run config (``_checks``): a trained model is one a model
# directory may hold
from ctxrank._checks import MAX_CONFIG_LIST, model_param_problem
from ctxrank._io import claim_output_dir

FORMAT_VERSION = 1
META_FILE = "ctxrank.json"

#: the largest ``ctxrank.json`` read (bytes); RankSVM / AdaRank keep their weights in it
MAX_META_BYTES = 64 * 2**20
#: the deepest nesting of lists / objects accepted in ``ctxrank.json``
MAX_META_DEPTH = 32
#: the largest feature count a saved model may declare (LETOR's ``MAX_FEATURE_INDEX`` is smaller)
MAX_FEATURES = 2**24
#: the largest model weights file read (bytes)
MAX_WEIGHTS_BYTES = 16 * 2**30
#: the key of ``ctxrank.json`` recording the SHA-256 of the other files the loader reads
DIGESTS = "sha256"
#: what a model directory holds: the entries a saved model or ``ctxrank train --out`` writes
#: (and ``member-N`` directories of an ensemble), removed before an earlier model is replaced
MODEL_ENTRIES = (
    META_FILE,
    "model.safetensors",
    "model.txt",
    "config.toml",
    "train_log.jsonl",
    "test_metrics.json",
    "training_curves.png",
    "propensity.json",
    "initial",
    "resume",
)
MEMBER_PATTERN = re.compile(r"member-[0-9]{1,4}")  #: the directory of an ensemble member
#: entries that show a directory holds ctxrank's model: a saved one, or the record of a training run
MODEL_MARKS = (META_FILE, "resume/run.json")


class IntegrityWarning(UserWarning):
    """A model directory saved before ctxrank recorded its files' digests: loaded unchecked."""


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-standard JSON constant {name}")


def read_meta(directory: str | Path, *, sha256: str | None = None) -> dict[str, Any]:
    """``ctxrank.json`` of a model directory (JSON only, never unpickled), checked for its format (and
    its digest, when the enclosing model recorded one: ``sha256``).

    Raises:
        ValueError: not a model directory, not a regular file, larger than ``MAX_META_BYTES``,
            unreadable or nested deeper than ``MAX_META_DEPTH``, another format version or digest.
    """
    directory = Path(directory)
    path = directory / META_FILE
    if not os.path.lexists(path):
        raise ValueError(f"{directory}: not a ctxrank model directory (no {META_FILE})")
    raw = read_regular(path, MAX_META_BYTES, "model metadata", sha256=sha256)
    meta = parse_meta_json(raw, path)
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        found = meta.get("format_version") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{path}: unsupported model format {_short(found)} (expected {FORMAT_VERSION})")
    return meta


def parse_meta_json(raw: bytes | str, where: Any, what: str = "model metadata") -> Any:
    """Model metadata text parsed as strict JSON: UTF-8, at most ``MAX_META_BYTES``, no ``NaN`` /
    ``Infinity``, nested at most ``MAX_META_DEPTH`` levels (``where`` and ``what`` name it in errors).

    Raises:
        ValueError: too large, not JSON, or nested too deeply.
    """
    if len(raw) > MAX_META_BYTES:
        raise ValueError(f"{where}: the {what} is {len(raw):,} bytes, above the limit of {MAX_META_BYTES:,}")
    try:
        value = json.loads(
            raw.decode("utf-8") if isinstance(raw, bytes) else raw, parse_constant=_reject_constant
        )
    except RecursionError:
        raise ValueError(f"{where}: unreadable {what} (nested too deeply)") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, huge integers, NaN
        raise ValueError(f"{where}: unreadable {what} ({_first_line(exc)})") from None
    if _depth(value) > MAX_META_DEPTH:
        raise ValueError(f"{where}: {what} nested deeper than {MAX_META_DEPTH} levels")
    return value


def read_regular(path: str | Path, max_bytes: int, what: str, *, sha256: str | None = None) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes`` bytes (and, when
    ``sha256`` is given, have that digest: hashed while it is read, checked before it is returned).

    Checked with ``os.stat`` before opening (a FIFO, socket or device is never opened, so never blocks)
    and again with ``os.fstat`` on the file opened non-blocking (a file swapped in between is refused).

    Raises:
        ValueError: missing, not a regular file, too large, unreadable, another digest.
    """
    path = Path(path)
    try:
        st = os.stat(path)
        _check_regular(path, st, max_bytes, what)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    digest = hashlib.sha256() if sha256 is not None else None
    try:
        st = os.fstat(fd)
        _check_regular(path, st, max_bytes, what)
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 2**26))
            if not chunk:
                break
            if digest is not None:
                digest.update(chunk)
            chunks.append(chunk)
            left -= len(chunk)
        if os.read(fd, 1):
            raise ValueError(f"{path}: the {what} grew while it was read")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if digest is not None and digest.hexdigest() != sha256:
        raise ValueError(
            f"{path} was changed after it was saved: sha256 {digest.hexdigest()} expected {sha256} (recorded "
            f"in the model's {META_FILE}); save the model again, or restore the file"
        )
    return b"".join(chunks)


def _check_regular(path: Path, st: os.stat_result, max_bytes: int, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path}: the {what} is not a regular file (a FIFO, device or directory is refused)")
    if st.st_size > max_bytes:
        raise ValueError(f"{path}: the {what} is {st.st_size:,} bytes, above the limit of {max_bytes:,}")


def recorded_digest(meta: dict[str, Any], name: str, where: Any) -> str | None:
    """The SHA-256 that ``ctxrank.json`` (``meta``, read from ``where``) records for the file ``name``
    (a path relative to its directory); None for a directory saved before digests were recorded (no
    ``"sha256"`` at all: :func:`warn_unchecked`).

    Raises:
        ValueError: ``"sha256"`` is not an object, or records no well-formed digest of ``name``.
    """
    digests = meta.get(DIGESTS)
    if digests is None:
        return None
    key = PurePosixPath(name).as_posix()
    if not isinstance(digests, dict):
        raise ValueError(f"{where}: {DIGESTS!r} must be a JSON object of file digests, got {_short(digests)}")
    value = digests.get(key)
    if not isinstance(value, str) or re.fullmatch(r"[0-9a-f]{64}", value) is None:
        raise ValueError(
            f"{where}: {DIGESTS!r} records no SHA-256 of {key} (got {_short(value)}); the metadata was "
            "edited after the model was saved"
        )
    return value


def warn_unchecked(directory: Path) -> None:
    """The warning for a model directory saved before ctxrank recorded its files' digests."""
    warnings.warn(
        f"{directory / META_FILE} records no file digests (saved by an older ctxrank): whether its files "
        "were changed after saving cannot be checked; save the model again to record them",
        IntegrityWarning,
        stacklevel=3,
    )


# ---------------------------------------------------------------------------------- writing one
def claim_model_dir(directory: str | Path, *, overwrite: bool, how: str = "give --overwrite") -> bool:
    """Check that a model may be saved into ``directory`` before any work: new or empty, or, with
    ``overwrite``, holding other files (kept unless named as a model's files) or an earlier model (see
    :func:`ctxrank._io.claim_output_dir`). Returns whether it holds an earlier model (a saved one or a
    training run's record), whose files the caller removes (:func:`remove_model_entries`) before
    writing, so that none is left beside the new model's.

    Raises:
        ValueError: a file, a directory of other files, or an earlier model, without ``overwrite``.
    """
    directory = Path(directory)
    resume = directory / "resume"
    keep = ("resume",) if resume.is_dir() and not any(resume.iterdir()) else ()  # a run killed at its start
    earlier = claim_output_dir(
        directory, overwrite=overwrite, what="model", ours=MODEL_MARKS, keep=keep, how=how
    )
    if earlier and not overwrite:
        saved = os.path.lexists(directory / META_FILE)
        held = "a saved model" if saved else f"a training run ({MODEL_MARKS[1]})"
        raise ValueError(
            f"{directory} already holds {held}; choose another directory, or {how} to replace it"
        )
    return earlier


def remove_model_entries(directory: str | Path) -> None:
    """Remove what an earlier model wrote in ``directory`` (:data:`MODEL_ENTRIES`, ``member-N``); other
    files stay."""
    directory = Path(directory)
    names = [*MODEL_ENTRIES, *(p.name for p in directory.iterdir() if MEMBER_PATTERN.fullmatch(p.name))]
    for name in names:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


# ------------------------------------------------------------------------------ typed values
def meta_int(
    meta: dict[str, Any], key: str, where: Any, lo: int, hi: int, *, default: Any = ..., name: str = ""
) -> int:
    """``meta[key]``, an integer (not a bool) in ``[lo, hi]``; ``default`` when absent (if given)."""
    value = meta.get(key, default) if isinstance(meta, dict) else None
    if value is ...:
        raise ValueError(f"{where}: {name or key!r} is missing from the model metadata")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{where}: {name or key!r} must be an integer in [{lo}, {hi}], got {_short(value)}")
    return value


def meta_bool(meta: dict[str, Any], key: str, where: Any, *, default: Any = ..., name: str = "") -> bool:
    value = meta.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{where}: {name or key!r} must be true or false, got {_short(value)}")
    return value


def meta_str(meta: dict[str, Any], key: str, where: Any, *, name: str = "", max_len: int = 4096) -> str:
    value = meta.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= max_len:
        raise ValueError(f"{where}: {name or key!r} must be a non-empty string, got {_short(value)}")
    return value


def meta_dict(meta: dict[str, Any], key: str, where: Any, *, name: str = "", optional: bool = False) -> dict:
    value = meta.get(key)
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {name or key!r} must be a JSON object, got {_short(value)}")
    return value


def meta_keys(meta: dict, required: tuple, optional: tuple, where: Any, prefix: str = "") -> None:
    """ValueError naming the first key of ``meta`` that is neither ``required`` nor ``optional``, or the
    first ``required`` one missing (``prefix``: the entry's dotted name, e.g. ``"rerank."``)."""
    unknown = sorted(set(meta) - set(required) - set(optional))
    if unknown:
        valid = ", ".join(f"{prefix}{k}" for k in (*required, *optional))
        raise ValueError(f"{where}: unknown key {short(prefix + unknown[0])}; valid: {valid}")
    missing = [k for k in required if k not in meta]
    if missing:
        every = ", ".join(f"{prefix}{k}" for k in required)
        raise ValueError(f"{where}: {prefix + missing[0]!r} is missing (every exported file has {every})")


def meta_strings(
    meta: dict[str, Any], key: str, where: Any, n: int | None = None, *, name: str = ""
) -> list[str]:
    """``meta[key]``: a list of strings (of length ``n`` when given); absent = empty."""
    value = meta.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: {name or key!r} must be a list of strings, got {_short(value)}")
    if n is not None and value and len(value) != n:
        raise ValueError(f"{where}: {name or key!r} must name {n} items, got {len(value)}")
    return value


def meta_cardinalities(meta: dict[str, Any], where: Any, *, default: Any = ...) -> list[int]:
    """``meta["categorical_cardinalities"]``: a list of at most ``MAX_CONFIG_LIST * 64`` code counts (one
    per categorical column, the unknown code 0 included), each an integer in [1, 2^31 - 1]; ``default``
    when absent (if given)."""
    key = "categorical_cardinalities"
    value = meta.get(key, default)
    if value is ...:
        raise ValueError(f"{where}: {key!r} is missing from the model metadata")
    if not isinstance(value, list) or len(value) > MAX_CONFIG_LIST * 64:
        raise ValueError(f"{where}: {key!r} must be a list, got {_short(value)}")
    return [meta_int({"c": c}, "c", where, 1, 2**31 - 1, name=key) for c in value]


def meta_floats(meta: dict[str, Any], key: str, where: Any, *, max_len: int, name: str = "") -> list[float]:
    """``meta[key]``: a list of at most ``max_len`` finite numbers."""
    value = meta.get(key)
    ok = isinstance(value, list) and len(value) <= max_len
    ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    if not ok or not all(math.isfinite(float(v)) for v in value):
        raise ValueError(
            f"{where}: {name or key!r} must be a list of at most {max_len} finite numbers, "
            f"got {_short(value)}"
        )
    return [float(v) for v in value]


def check_config_values(values: Any, where: Any, key: str) -> dict[str, Any]:
    """A model config read from metadata: a flat object of scalars and short lists of scalars, every
    integer within ``_checks.MAX_CONFIG_INT`` (so no option can ask for an unbounded model)."""
    if not isinstance(values, dict):
        raise ValueError(f"{where}: {key!r} must be a JSON object, got {_short(values)}")
    for k, v in values.items():
        problem = model_param_problem(v)
        if problem is not None:
            raise ValueError(f"{where}: '{key}.{k}' {problem}")
    return values


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative: no recursion on hostile input)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            if d > MAX_META_DEPTH:
                return d
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters (messages stay one short line)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = reprlib.repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def short(value: Any, limit: int = 60) -> str:
    """Public form of :func:`_short` for the loaders."""
    return _short(value, limit)
