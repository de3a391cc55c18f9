"""Binary cache of parsed data files.

The first parse of a file writes ``<cache_dir>/<hash of path and options>.npz``; later loads reuse it
when the stored key still matches: the file's absolute path, its size and the sha256 of its whole
content (and the same of the group file), and the parse options. A cache never answers for a file whose
content changed, whatever its modification time says; a file touched without a change is still served
from the cache. The content is hashed again after a parse: a file edited while it was parsed is not
cached. A stale entry (the key differs) or a corrupt one (unreadable archive, wrong arrays, checksum
mismatch) is detected and rebuilt, never trusted. The archive is read with ``allow_pickle=False``:
loading a cache never runs code. Writes are atomic (temporary file, fsync, rename).

Cost: hashing reads the file once more (sha256 of the bytes on disk: a gzip file's compressed ones);
``benchmarks/bench_parser.py`` reports it against a parse and a cached reload.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from ctxrank._io import sha256_file
from ctxrank.data.ranking_data import RankingData

CACHE_VERSION = 2  # 1: keyed on size, mtime and the first MiB's hash
_ARRAYS = ("features", "labels", "query_ids", "query_offsets", "docids")


class CacheWarning(UserWarning):
    """A cache entry was ignored (stale, unreadable) or could not be written; the file is parsed anyway
    (the CLI prints it as one line: ``ctxrank: warning: ...``)."""


def default_cache_dir() -> Path:
    """``$CTXRANK_CACHE_DIR``, else ``$XDG_CACHE_HOME/ctxrank``, else ``~/.cache/ctxrank``."""
    env = os.environ.get("CTXRANK_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ctxrank"


def file_key(path: Path) -> dict:
    """``{"path", "size", "sha256"}`` of ``path``: where it is and its whole content."""
    return {"path": str(path.resolve()), "size": path.stat().st_size, "sha256": sha256_file(path)}


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
        h.update(memoryview(arr.reshape(-1)).cast("B"))  # 1-d: a (N, 0) array has no bytes to cast
    return h.hexdigest()


def cached_parse(
    path: Path,
    options: dict,
    parse: Callable[[], RankingData],
    *,
    cache_dir: str | os.PathLike | None = None,
    extra_files: Sequence[Path] = (),
) -> RankingData:
    """Return the cached parse of ``path`` under ``options``, parsing (and caching) when needed."""
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = _key(path, options, extra_files)
    name = hashlib.sha256(json.dumps([key["file"]["path"], options], sort_keys=True).encode()).hexdigest()
    entry = directory / f"{name[:32]}.npz"
    if entry.is_file():
        data, why = _load(entry, key)
        if data is not None:
            return replace(data, source=str(path))  # the path as the caller spelled it this time
        warnings.warn(f"ignoring cache {entry} for {path}: {why}; re-parsing", CacheWarning, stacklevel=3)
    data = parse()
    if _key(path, options, extra_files) != key:  # edited while it was parsed: which content was read?
        warnings.warn(
            f"not caching {path}: it changed while it was read (its content hash differs from before)",
            CacheWarning,
            stacklevel=3,
        )
        return data
    try:
        _store(entry, key, data)
    except OSError as exc:
        warnings.warn(f"could not write cache {entry}: {exc}", CacheWarning, stacklevel=3)
    return data


def _key(path: Path, options: dict, extra_files: Sequence[Path]) -> dict:
    return {
        "version": CACHE_VERSION,
        "file": file_key(path),
        "options": options,
        "extra": [file_key(Path(p)) for p in extra_files],
    }


def _load(entry: Path, key: dict) -> tuple[RankingData | None, str]:
    try:
        with np.load(entry, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            stored = meta.get("key")
            if isinstance(stored, dict) and stored.get("version") != CACHE_VERSION:
                return None, f"stale (cache format {stored.get('version')}, another ctxrank version's)"
            if stored != key:
                return None, "stale (the file's content or the options changed)"
            arrays = {n: z[n] for n in _ARRAYS if n in z.files}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        return None, f"unreadable ({type(exc).__name__}: {exc})"
    if _checksum(arrays) != meta.get("checksum"):
        return None, "corrupt (checksum mismatch)"
    try:
        data = RankingData(
            features=arrays["features"],
            labels=arrays["labels"],
            query_ids=arrays["query_ids"],
            query_offsets=arrays["query_offsets"],
            docids=arrays.get("docids"),
            feature_names=tuple(meta["feature_names"]),
            source=meta["source"],
            info=meta["info"],
        )
    except (KeyError, ValueError, TypeError) as exc:
        return None, f"inconsistent ({exc})"
    return data, ""


def _store(entry: Path, key: dict, data: RankingData) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    arrays = {
        "features": data.features,
        "labels": data.labels,
        "query_ids": data.query_ids,
        "query_offsets": data.query_offsets,
    }
    if data.docids is not None:
        arrays["docids"] = data.docids
    meta = {
        "key": key,
        "checksum": _checksum(arrays),
        "feature_names": list(data.feature_names),
        "source": data.source,
        "info": data.info,
    }
    fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=entry.stem, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, entry)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
