"""What a path named as input is, before a reader opens it.

:func:`input_kind` tells a regular file from a stream (a FIFO: a named pipe, a pipe such as ``-`` or
``/dev/stdin`` under ``cmd | ctxrank ...``, a process substitution ``<(zcat f.gz)``); everything else is
refused with a message saying what the path is: missing (with the near names of its directory: the
same name with or without a compression suffix, another case, a close spelling), a directory, a
character or block device (``/dev/zero`` would never end), a socket. Every reader reports a missing
file through :func:`missing_file_error`, so the hint is the same everywhere.
"""

from __future__ import annotations

import difflib
import itertools
import os
import stat
from pathlib import Path

__all__ = ["FILE", "STREAM", "input_kind", "missing_file_error", "near_names"]

FILE = "file"
STREAM = "stream"
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz")
MAX_LISTED = 10_000  # directory entries compared with a missing name (a huge directory is not listed whole)
MAX_NEAR = 5


def input_kind(
    path: str | os.PathLike, what: str = "data file", *, streams: bool = False, why: str = ""
) -> str:
    """:data:`FILE`, or :data:`STREAM` (a FIFO or pipe) when the reader takes ``streams``; a ValueError
    saying what ``path`` is otherwise (``what``: its role in messages, e.g. ``"group file"``; ``why``:
    appended to the refusal of a stream, e.g. how to give the data instead)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode  # never opens: a FIFO or device does not block here
    except FileNotFoundError:
        raise missing_file_error(path, "file" if what in ("data file", "table") else what) from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISFIFO(mode):
        if streams:
            return STREAM
        raise ValueError(
            f"{path} is a FIFO (a pipe or process substitution): a {what} must be a regular file{why}"
        )
    kind = (
        "a directory" if stat.S_ISDIR(mode)
        else "a character device" if stat.S_ISCHR(mode)
        else "a block device" if stat.S_ISBLK(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "an unknown kind of file"
    )  # fmt: skip
    raise ValueError(f"{path} is {kind}, not a {what}")


def missing_file_error(path: str | os.PathLike, noun: str = "file") -> ValueError:
    """``path: no such <noun>``, with the near names of its directory, or naming the missing directory."""
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        return ValueError(f"{path}: no such {noun} (no directory {parent})")
    near = near_names(path)
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    return ValueError(f"{path}: no such {noun}{hint}")


def near_names(path: str | os.PathLike, limit: int = MAX_NEAR) -> list[str]:
    """Existing paths near the missing ``path``, as the caller spelled its directory: the name plus or
    minus a compression suffix first, then the same name in another case, then close spellings among the
    directory's first :data:`MAX_LISTED` entries (``difflib``); at most ``limit``."""
    path = Path(path)
    try:
        with os.scandir(path.parent) as entries:
            listed = [e.name for e in itertools.islice(entries, MAX_LISTED)]
    except OSError:
        return []
    name = path.name
    present = set(listed)
    stem = next((name[: -len(s)] for s in COMPRESSION_SUFFIXES if name.endswith(s)), None)
    exact = [name + s for s in COMPRESSION_SUFFIXES] + ([stem] if stem else [])
    folded = [n for n in listed if n.lower() == name.lower()]
    close = difflib.get_close_matches(name, listed, n=limit, cutoff=0.75)
    found = [n for n in exact if n in present] + sorted(folded) + close
    unique = list(dict.fromkeys(n for n in found if n != name))
    return [str(path.parent / n) for n in unique[:limit]]
