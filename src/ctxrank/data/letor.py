"""Reader for SVMlight / LETOR text files: ``label qid:Q idx:val ... # comment``.

``read_letor`` turns a LETOR file (plain or ``.gz``) into a :class:`RankingData` with a dense float32
feature matrix. It also reads the LightGBM/XGBoost convention (lines without ``qid:`` plus a
``<file>.query`` or ``<file>.group`` file of group sizes) and LETOR's "NULL" variant (the literal token
``NULL`` marks a missing value).

Design (why it is hand-written): scikit-learn's ``load_svmlight_file`` is fast but cannot report the
file and line of a bad row, silently accepts NaN/inf values and duplicate features, knows nothing of
``NULL`` tokens or ``#docid`` comments. So parsing is done here in two tiers:

* a **fast path** per chunk of about 4 MB of whole lines: the structure of every line (comments,
  tokens, colons, the position of ``qid:``) is checked with vectorized NumPy byte operations, then the
  numbers are converted by pandas' C tokenizer (about 3x faster than ``load_svmlight_file`` here);
* a **careful path**, line by line in Python, used only for a chunk the fast path declines (anything
  unusual: an error, non-numeric query ids, literal ``nan``). It is the single authority for error
  messages, which always name ``file:line`` and what was expected.

Memory: a first pass counts the lines (and refuses a line longer than ``max_line_bytes``, without
ever holding a whole line), the final float32 array is allocated once, and each chunk's small dense
block is copied into it; the peak is about 1x the final array plus O(rows) bookkeeping (line numbers,
query keys, docids) and one chunk's working set (about 15x the 4 MB chunk, or about 25x the longest
line when the careful path reads it). No Python object is created per value on the fast path. (A
sparse file whose largest feature index first appears late is widened, briefly holding 2x.) The dense
array is never allocated beyond ``max_dense_bytes``: the feature index that would make it larger is a
``file:line`` error before any allocation, so a tiny file cannot ask for gigabytes. An allocation below
the limit that fails anyway is a MemoryError naming the file, the array and its size.

Streams (a FIFO, a pipe, a process substitution, ``-``) cannot be read twice: they are read once, chunk
by chunk, each chunk's lines checked against ``max_line_bytes`` and the lines read so far against
``max_dense_bytes``, and the blocks joined at the end (peak about 2x the array); never cached.

Parsed files are cached (see :mod:`ctxrank.data.cache`): later loads of an unchanged file skip parsing.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ctxrank._checks import DEFAULT_NULL_FILL, NULL_FILL_RULES, OptionError, check_bytes, check_null_fill
from ctxrank.data import cache as _cache
from ctxrank.data.limits import DEFAULT_MAX_DENSE_BYTES, out_of_memory, size_text
from ctxrank.data.paths import STREAM, input_kind
from ctxrank.data.ranking_data import RankingData

__all__ = [
    "NULL_FILL_RULES",
    "DataWarning",
    "fill_missing",
    "missing_cells",
    "read_group_sizes",
    "read_letor",
]

DEFAULT_CHUNK_BYTES = 4 << 20
MAX_FEATURE_INDEX = 10_000_000  # a guard against "99999999999:1" allocating terabytes
# 1 MiB: about 100x the longest line of any registered dataset (Yahoo! set 1, 700 features, ~10 KB); it
# bounds the careful parser's per-line working set (~25x the line) and what is buffered to find a line end
DEFAULT_MAX_LINE_BYTES = 1 << 20
# NULL fills (``fill_missing``): the query minimum, or LETOR 3.0's Feature-min rule min(query minimum, 0)
_GROUP_LINE_BYTES = 4096  # a group file's line: a size of at most 18 digits, and spaces
_FAST_MAX_COLUMNS = 4096  # pandas' C tokenizer costs ~30 us per column: wider chunks go the careful way
_DOCID = re.compile(rb"docid[^\S\n]*=[^\S\n]*(\S+)")  # within one line
_COMMENT = re.compile(rb"#[^\n]*")
_WS_TABLE = bytes(1 if i in (9, 10, 11, 12, 13, 32) else 0 for i in range(256))  # byte -> is space
_F32_MAX = float(np.finfo(np.float32).max)
_BOM = b"\xef\xbb\xbf"
_INT_QID = re.compile(r"[+-]?[0-9]+")  # an integer query id (ASCII), normalized as an integer
# bytes the fast path handles outside comments: digits . + - e E : whitespace, and the letters of
# "qid" and "NULL"; anything else (literal nan/inf, string query ids, garbage) goes the careful way
_FAST_CHARS = b"0123456789.+-eE:qidNUL \t\n\r\x0b\x0c"


@dataclass
class _Block:
    """One chunk's rows. features may contain NaN where the file said NULL."""

    features: np.ndarray  # float32 [n, F_chunk]
    labels: np.ndarray  # float32 [n]
    qids: np.ndarray | None  # int64 [n] (fast path) or str [n] (careful path); None without qid:
    lines: np.ndarray  # int64 [n] 1-based line numbers
    docids: list | None  # str per row, None entries where a line had no docid
    counts: np.ndarray  # int64 [n] number of features listed on each row


def read_letor(
    path: str | os.PathLike,
    *,
    query_file: str | os.PathLike | None = None,
    null_fill: str | float = DEFAULT_NULL_FILL,
    regroup: bool = False,
    n_features: int | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    dense: bool | None = None,
    max_dense_bytes: int = DEFAULT_MAX_DENSE_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> RankingData:
    """Read a LETOR / SVMlight file into a :class:`RankingData`.

    Args:
        path: ``.txt`` or ``.gz`` file, lines ``label qid:Q idx:val ... [# comment]``, or a stream: a
            FIFO, a pipe or process substitution (``/dev/fd/N``, ``<(zcat f.gz)``), ``-`` for standard
            input (read once, as it comes, never cached; the same limits hold). Blank lines and
            lines holding only a comment are skipped. Feature indices are 1-based; absent features
            are 0 (SVMlight convention). Numeric query ids (an optional sign and ASCII digits) are
            normalized as integers (``qid:007`` -> ``"7"``); other query ids are kept as written.
        query_file: for files without ``qid:`` (LightGBM/XGBoost convention), a file with one group
            size per line. When None, ``<path>.query`` then ``<path>.group`` are tried (also with a
            ``.gz`` suffix removed). Query ids are then ``"0"``, ``"1"``, ... in file order.
        null_fill: what replaces the token ``NULL`` (a missing value):

            * ``"query_min"`` (default): the minimum of that feature over the query's other items
              (those without ``NULL`` there);
            * ``"letor_min"``: the smaller of that minimum and 0, ``min(query minimum, 0)``: the value
              LETOR 3.0's published OHSUMED "Feature-min" files hold in 99.53% of the NULL cells
              (``"query_min"``: 60.00%; docs/data.md, benchmarks/null_fill_ohsumed.py);
            * a number: that number;
            * ``"keep"``: left missing, NaN, for a model that reads missing values itself
              (LambdaMART: LightGBM's own missing-value handling); the other models refuse NaN.

            Both minimum rules give 0 where the whole query lacks the feature. The count of filled
            cells is in ``data.info["null_filled"]``, of kept ones in ``data.info["missing"]``.
        regroup: rows of one query must be contiguous; a query id that reappears after other queries
            is an error naming both lines, unless ``regroup=True``, which gathers each query's rows
            (stably, queries in order of first appearance).
        n_features: fix the feature count (an index above it is an error); default: the largest
            index in the file.
        cache: reuse / write a binary cache of the parsed arrays (see ``ctxrank.data.cache``); never
            for a stream.
        cache_dir: where the cache lives (default ``$CTXRANK_CACHE_DIR`` or ``~/.cache/ctxrank``).
        chunk_bytes: size of the text chunks parsed at once.
        dense: whether every row lists every feature ``1..F`` (LETOR files do; SVMlight files that omit
            zeros do not). ``True``: a row listing fewer features is an error naming ``file:line`` (a
            truncated or damaged line; the dataset registry passes it for its dense datasets).
            ``None`` (default): when at least half of the rows list all F features, each row listing
            fewer is reported with a warning (``file:line``). ``False``: no check.
        max_dense_bytes: the largest float32 feature matrix (rows x features x 4 bytes, rows counted
            as the file's lines) the reader may allocate; a feature index that would exceed it is an
            error naming its ``file:line``, raised before anything is allocated. Default 2 GiB (the
            largest file of every registered dataset fits). On the command line: ``--max-dense-bytes``.
        max_line_bytes: the longest line accepted (bytes, after decompression); a longer line is an
            error naming its ``file:line``, found without holding the line in memory. Default 1 MiB.

    A file that does not end with a newline (cut short?) gives a warning naming its last line. The
    warnings are kept in ``data.info["warnings"]`` and re-issued when the data comes from the cache.

    Returns:
        RankingData with features float32 (N, F), labels float32 (N,), query ids, query offsets,
        docids (from ``#docid = ...`` comments, when every line has one) and ``info``.

    Raises:
        ValueError: a missing file (with the near names of its directory), a directory, device or
            socket, a malformed line (named ``file:line``, with what was expected), NaN/inf values,
            an empty file, group sizes that do not match the row count, a reappearing query id, a
            line longer than ``max_line_bytes``, a dense matrix above ``max_dense_bytes``, a short row
            with ``dense=True``.
        MemoryError: the dense matrix, within ``max_dense_bytes``, does not fit in the memory left; the
            message names the file, the array and its size, and how to refuse such a file instead.
    """
    path = Path("/dev/stdin") if str(path) == "-" else Path(path)
    stream = input_kind(path, "data file", streams=True) == STREAM
    null_fill = check_null_fill("null_fill", null_fill)
    if n_features is not None and not 1 <= n_features <= MAX_FEATURE_INDEX:
        raise ValueError(f"n_features must lie in [1, {MAX_FEATURE_INDEX}], got {n_features}")
    check_bytes("chunk_bytes", chunk_bytes)
    check_bytes("max_dense_bytes", max_dense_bytes)
    check_bytes("max_line_bytes", max_line_bytes)
    if dense not in (None, True, False):
        raise ValueError(f"dense must be True, False or None, got {dense!r}")
    limits = _Limits(int(max_dense_bytes), int(max_line_bytes))
    group_path = _find_query_file(path, query_file)
    group_stream = group_path is not None and input_kind(group_path, "group file", streams=True) == STREAM
    options = {
        "null_fill": null_fill,
        "regroup": regroup,
        "n_features": n_features,
        "query_file": str(group_path) if group_path else None,
        # the limits and checks are part of the key: a file parsed under a higher limit is parsed (and
        # refused) again under a lower one, never served from the cache past the check
        "dense": dense,
        "max_dense_bytes": limits.dense_bytes,
        "max_line_bytes": limits.line_bytes,
    }

    def parse() -> RankingData:
        return _parse(path, group_path, null_fill, regroup, n_features, chunk_bytes, dense, limits, stream)

    if cache and not (stream or group_stream):  # a stream is read once: no content to key a cache on
        data = _cache.cached_parse(
            path, options, parse, cache_dir=cache_dir, extra_files=[group_path] if group_path else []
        )
    else:
        data = parse()
    for message in data.info.get("warnings", []):
        warnings.warn(message, DataWarning, stacklevel=2)
    return data


class DataWarning(UserWarning):
    """A data file loaded, but looks damaged (no final newline, rows shorter than the others)."""


@dataclass(frozen=True)
class _Limits:
    dense_bytes: int
    line_bytes: int

    def line_error(self, name: str, line_no: int) -> ValueError:
        return ValueError(
            f"{name}:{line_no}: line longer than max_line_bytes = {self.line_bytes:,} bytes (pass "
            "read_letor(..., max_line_bytes=N), on the command line --max-line-bytes N, to accept it)"
        )

    def dense_error(self, where: str, rows: int, width: int, what: str) -> ValueError:
        need = rows * width * 4
        return ValueError(
            f"{where}: {what} makes the dense feature matrix {rows:,} rows (the file's lines) x "
            f"{width:,} features x 4 bytes = {size_text(need)}, above max_dense_bytes = "
            f"{self.dense_bytes:,} ({size_text(self.dense_bytes)}); if that is intended, raise the limit: "
            f"read_letor(..., max_dense_bytes={need}) or, on the command line, --max-dense-bytes {need}"
        )

    def memory_error(self, name: str, exc: MemoryError) -> MemoryError:
        matrix = "the dense feature matrix is lines x largest feature index x 4 bytes"
        return out_of_memory(name, exc, matrix, self.dense_bytes, "read_letor")


# --------------------------------------------------------------------------------------- parsing
def _parse(
    path: Path,
    group_path: Path | None,
    null_fill: str | float,
    regroup: bool,
    n_features: int | None,
    chunk_bytes: int,
    dense: bool | None,
    limits: _Limits,
    stream: bool = False,
) -> RankingData:
    """Read the file (counting its lines first) or the stream (once) and build its RankingData; an
    allocation that fails below the limits is a MemoryError naming the file, the array and its size."""
    name = str(path)
    try:
        if stream:
            features, blocks, n_lines, ends_with_newline = _read_stream(
                path, name, n_features, chunk_bytes, limits
            )
        else:
            n_lines, ends_with_newline = _count_lines(path, limits.line_bytes)
            max_width = _widest_allowed(name, n_lines, n_features, limits)
            features, blocks = _read_blocks(path, name, n_lines, n_features, chunk_bytes, max_width, limits)
        return _rows_to_data(
            name, features, blocks, (n_lines, ends_with_newline), group_path, null_fill, regroup, dense
        )
    except MemoryError as exc:
        raise limits.memory_error(name, exc) from None


def _rows_to_data(
    name: str,
    features: np.ndarray,
    blocks: list[_Block],
    lines_read: tuple[int, bool],
    group_path: Path | None,
    null_fill: str | float,
    regroup: bool,
    dense: bool | None,
) -> RankingData:
    """The RankingData of the parsed blocks: short rows, query groups (or the group file), NULL fills.
    ``lines_read``: the file's line count and whether it ends with a newline."""
    n_lines, ends_with_newline = lines_read
    width = features.shape[1]
    labels = np.concatenate([b.labels for b in blocks])
    lines = np.concatenate([b.lines for b in blocks])
    counts = np.concatenate([b.counts for b in blocks])
    notes = _short_rows(name, counts, lines, width, dense)
    if not ends_with_newline:
        notes.append(f"{name}:{n_lines}: the file does not end with a newline (cut short?)")
    docids = _joined_docids(blocks)
    regrouped: dict[str, Any] = {}
    if blocks[0].qids is not None:  # every block has query ids, or none has (the chunk parsers check)
        keys = _merge_keys([b.qids for b in blocks])  # type: ignore[misc]
        order, offsets = _group_rows(keys, lines, name, regroup)
        if order is not None:  # regrouped: notes the file row of each data row, info["file_rows"]
            regrouped = {"file_rows": order.tolist()}
            features, labels, lines = features[order], labels[order], lines[order]
            docids = None if docids is None else docids[order]
            keys = keys[order]
        query_ids = np.asarray(keys[offsets[:-1]]).astype(str)
    else:
        offsets, query_ids = _groups_from_file(name, group_path, lines, labels.size)
    missing = missing_cells(features, offsets, null_fill)
    return RankingData(
        features=features,
        labels=labels,
        query_ids=query_ids,
        query_offsets=offsets,
        docids=docids,
        feature_names=tuple(f"f{i}" for i in range(1, width + 1)),
        source=name,
        # rows listing every feature 1..F: predict / evaluate --model tell a dense file from a sparse one
        info={
            **missing,
            "rows_listing_all": int(np.count_nonzero(counts >= width)),
            **({"warnings": notes} if notes else {}),
            **regrouped,
        },
    )


def _widest_allowed(name: str, n_lines: int, n_features: int | None, limits: _Limits) -> int:
    """The widest matrix ``max_dense_bytes`` allows for ``n_lines`` rows (capped by ``n_features``); a
    larger feature index is refused before anything is allocated."""
    max_width = min(n_features or MAX_FEATURE_INDEX, limits.dense_bytes // (4 * max(n_lines, 1)))
    if n_features is not None and n_features > max_width:
        raise limits.dense_error(name, n_lines, n_features, f"n_features = {n_features} over {n_lines} lines")
    return max_width


def _read_blocks(
    path: Path,
    name: str,
    n_lines: int,
    n_features: int | None,
    chunk_bytes: int,
    max_width: int,
    limits: _Limits,
) -> tuple[np.ndarray, list[_Block]]:
    """Parse the file chunk by chunk (fast path, else careful path): ``(features float32 (N, F), the
    non-empty blocks without their features)``.

    The final array is allocated once, for the file's line count (an upper bound on its rows), and each
    chunk's block is copied in and dropped: peak = 1x the dense array + one chunk's work.
    """
    features = None
    blocks: list[_Block] = []
    has_qid: bool | None = None
    n_rows = 0
    for chunk, first_line in _iter_chunks(path, chunk_bytes, limits.line_bytes):
        block = _parse_chunk(chunk, first_line, name, has_qid, n_features, max_width, limits, n_lines)
        n = block.labels.size
        if n == 0:
            continue
        if n_rows + n > n_lines:
            raise ValueError(f"{name}: the file changed while it was read (more lines than counted)")
        if has_qid is None:
            has_qid = block.qids is not None
        width = max(n_features or 0, block.features.shape[1])
        if features is None:
            features = np.zeros((n_lines, width), dtype=np.float32)
        elif width > features.shape[1]:  # a sparse file whose indices grow: widen (once, usually)
            wider = np.zeros((n_lines, width), dtype=np.float32)
            wider[:n_rows, : features.shape[1]] = features[:n_rows]
            features = wider
        features[n_rows : n_rows + n, : block.features.shape[1]] = block.features
        n_rows += n
        block.features = None  # type: ignore[assignment]
        blocks.append(block)
    if features is None:
        raise ValueError(f"{name}: empty file (no data lines)")
    return features[:n_rows], blocks


def _parse_chunk(
    chunk: bytes,
    first_line: int,
    name: str,
    has_qid: bool | None,
    n_features: int | None,
    max_width: int,
    limits: _Limits,
    n_lines: int,
) -> _Block:
    """One chunk's block: the fast path, else the careful one (which names any fault's line)."""
    block = _parse_chunk_fast(chunk, first_line, has_qid, n_features, max_width)
    if block is None:
        block = _parse_chunk_careful(
            chunk, first_line, name, has_qid, n_features, max_width=max_width, limits=limits, n_lines=n_lines
        )
    return block


def _read_stream(
    path: Path, name: str, n_features: int | None, chunk_bytes: int, limits: _Limits
) -> tuple[np.ndarray, list[_Block], int, bool]:
    """A stream (pipe, FIFO), read once without counting its lines first: ``(features float32 (N, F),
    the non-empty blocks without their features, lines read, whether the last ends with a newline)``.

    Each chunk's lines are checked against ``max_line_bytes``, and the lines read so far against
    ``max_dense_bytes`` (the widest matrix allowed for them, at least one feature wide, before the chunk
    is parsed), so an endless stream stops at a limit. The blocks are copied into one array at the end:
    peak = 2x the dense array + one chunk's work.
    """
    parts: list[np.ndarray] = []
    blocks: list[_Block] = []
    has_qid: bool | None = None
    n_lines, width, last = 0, n_features or 0, b"\n"
    for chunk, first_line in _iter_chunks(path, chunk_bytes, limits.line_bytes):
        _check_line_lengths(chunk, first_line, name, limits)
        n_lines = first_line - 1 + chunk.count(b"\n") + (not chunk.endswith(b"\n"))
        last = chunk[-1:]
        if n_lines * max(width, 1) * 4 > limits.dense_bytes:
            where = f"{name}:{n_lines}"
            raise limits.dense_error(where, n_lines, max(width, 1), f"line {n_lines:,} of the stream")
        max_width = _widest_allowed(name, n_lines, n_features, limits)
        block = _parse_chunk(chunk, first_line, name, has_qid, n_features, max_width, limits, n_lines)
        if block.labels.size == 0:
            continue
        has_qid = block.qids is not None
        width = max(width, block.features.shape[1])
        parts.append(block.features)
        block.features = None  # type: ignore[assignment]
        blocks.append(block)
    if not blocks:
        raise ValueError(f"{name}: empty file (no data lines)")
    features = np.zeros((sum(len(part) for part in parts), width), dtype=np.float32)
    row = 0
    for i, part in enumerate(parts):
        features[row : row + len(part), : part.shape[1]] = part
        row += len(part)
        parts[i] = None  # type: ignore[call-overload]
    return features, blocks, n_lines, last == b"\n"


def _check_line_lengths(chunk: bytes, first_line: int, name: str, limits: _Limits) -> None:
    """A line of ``chunk`` (whole lines) longer than ``max_line_bytes``: an error naming it."""
    ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
    lengths = np.diff(np.concatenate([[-1], ends, [len(chunk)]])) - 1  # the last: after the last newline
    too_long = np.flatnonzero(lengths > limits.line_bytes)
    if too_long.size:
        raise limits.line_error(name, first_line + int(too_long[0]))


def _joined_docids(blocks: list[_Block]) -> np.ndarray | None:
    """The docids of every row, or None unless every line of every block has one."""
    docid_lists = [b.docids for b in blocks]
    if all(d is not None and None not in d for d in docid_lists):
        return np.array([d for dl in docid_lists for d in dl])  # type: ignore[union-attr]
    return None


def _groups_from_file(
    name: str, group_path: Path | None, lines: np.ndarray, n_rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64 (Q+1,), query ids "0", "1", ...) of a file without ``qid:``, from its group file."""
    if group_path is None:
        raise OptionError(
            "{name}:{line}: expected 'qid:<id>' as the second token; a file without query ids needs a "
            "group file ({names}, one group size per line, or {query_file})",
            name=name,
            line=lines[0],
            names=_group_file_names(name),
        )
    sizes = read_group_sizes(group_path, max_total=n_rows, data_name=name)
    total = sum(sizes.tolist())  # Python ints: no int64 overflow
    if total != n_rows:
        raise ValueError(f"{group_path}: group sizes sum to {total} but {name} has {n_rows} rows")
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return offsets, np.arange(sizes.size).astype(str)


def _short_rows(
    name: str, counts: np.ndarray, lines: np.ndarray, width: int, dense: bool | None
) -> list[str]:
    """Check that rows list every feature 1..F (``dense``); returns warnings, raises for dense=True."""
    if dense is False or width == 0:
        return []
    short = counts < width  # no duplicates and no index above F: a row listing F features lists 1..F
    if not short.any():
        return []
    full = int(counts.size - short.sum())
    if dense is None and 2 * full < counts.size:  # a sparse file: most rows omit some features
        return []
    i = int(np.flatnonzero(short)[0])
    more = int(short.sum()) - 1
    others = f" ({more} more such row(s))" if more else ""
    text = (
        f"{name}:{lines[i]}: lists {counts[i]} of the {width} features that "
        + ("every row of this dataset lists" if dense else f"{full} of the {counts.size} rows list")
        + f"{others}: a truncated or damaged line?"
    )
    if dense:
        raise ValueError(text)
    return [text + " The missing features are read as 0 (pass dense=False if the file omits zeros)."]


@contextmanager
def _open(path: Path) -> Iterator[Any]:
    """The file's bytes, decompressed when it starts with gzip's magic; opened once (a stream cannot be
    opened again), its first bytes peeked at."""
    with path.open("rb") as raw:
        if raw.peek(2)[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=raw, mode="rb") as fh:
                yield fh
        else:
            yield raw


def _count_lines(path: Path, max_line_bytes: int) -> tuple[int, bool]:
    """(lines in the (decompressed) file, counting a last line without a newline; whether the file
    ends with a newline). Raises at the first line longer than ``max_line_bytes`` (block by block:
    a gzip holding one huge line fails after reading ``max_line_bytes``, holding one block)."""
    count, last = 0, b"\n"
    current = 0  # bytes of the line being read, since its start
    try:
        with _open(path) as fh:
            while block := fh.read(DEFAULT_CHUNK_BYTES):
                ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
                if ends.size:
                    lengths = np.diff(ends, prepend=-1) - 1  # bytes before each newline
                    lengths[0] += current
                    too_long = np.flatnonzero(lengths > max_line_bytes)
                    if too_long.size:
                        raise _LineTooLong(count + int(too_long[0]) + 1)
                    current = len(block) - int(ends[-1]) - 1
                else:
                    current += len(block)
                if current > max_line_bytes:
                    raise _LineTooLong(count + ends.size + 1)
                count += ends.size
                last = block[-1:]
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: cannot read compressed data ({exc})") from exc
    except _LineTooLong as exc:
        raise _Limits(0, max_line_bytes).line_error(str(path), exc.line_no) from None
    return count + (last != b"\n"), last == b"\n"


class _LineTooLong(Exception):
    def __init__(self, line_no: int) -> None:
        self.line_no = line_no


def _iter_chunks(path: Path, chunk_bytes: int, max_line_bytes: int) -> Iterator[tuple[bytes, int]]:
    """Yield (whole lines, 1-based number of the chunk's first line). The start of a line longer than
    one read is kept until its end, but never more than ``max_line_bytes`` of it."""
    try:
        with _open(path) as fh:
            line_no = 1
            pending: list[bytes] = []  # the start of a line longer than one read, joined once complete
            pending_len = 0
            data = fh.read(max(chunk_bytes, len(_BOM)))
            if data.startswith(_BOM):  # UTF-8 byte order mark
                data = data[len(_BOM) :] or fh.read(chunk_bytes)
            while True:
                if not data:
                    if pending:
                        yield b"".join(pending), line_no
                    return
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # no newline yet: keep reading (a very long line)
                    pending.append(data)
                    pending_len += len(data)
                    if pending_len > max_line_bytes:  # the file grew since it was counted
                        raise _Limits(0, max_line_bytes).line_error(str(path), line_no)
                else:
                    chunk = b"".join([*pending, data[:cut]]) if pending else data[:cut]
                    pending = [data[cut:]] if cut < len(data) else []
                    pending_len = len(data) - cut
                    yield chunk, line_no
                    line_no += chunk.count(b"\n")
                data = fh.read(chunk_bytes)
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: cannot read compressed data ({exc})") from exc


def _parse_chunk_fast(
    chunk: bytes, first_line: int, has_qid: bool | None, n_features: int | None, max_width: int | None = None
):
    """Vectorized parse of one chunk; None when anything is unusual (the careful path decides): also
    a feature index above ``max_width``, and a chunk whose padded table (rows x longest line) would
    cost much more than the text itself or need more than ``_FAST_MAX_COLUMNS`` columns.

    Structure checks work on token and colon positions (NumPy), never on a Python object per value:
    every data line must be ``label qid:Q i:v i:v ...`` (or ``label i:v ...`` in a group-file file)
    with exactly one colon inside each token after the first.
    """
    body = _COMMENT.sub(b"", chunk) if b"#" in chunk else chunk  # comments run to the end of the line
    if body.translate(None, delete=_FAST_CHARS):  # a byte the fast path does not handle
        return None
    a = np.frombuffer(body, dtype=np.uint8)
    if a.size == 0:
        return _empty_block()
    t = _scan_tokens(a, body)
    if t is None:
        return _empty_block()
    if not (_colons_ok(a, t) and _qids_ok(a, body, t, has_qid) and _digits_ok(a, t)):
        return None
    t.release()  # the per-byte arrays, before pandas builds its table
    table = _fast_table(body, t)
    if table is None:
        return None
    return _table_block(table, t, chunk, first_line, n_features, max_width)


@dataclass
class _Tokens:
    """Where the tokens, colons and ``qid:`` of one chunk are (``_parse_chunk_fast``'s working set)."""

    ws: np.ndarray | None  # bool [bytes]: whitespace
    starts: np.ndarray | None  # bool [bytes]: first byte of a token
    tok_pos: np.ndarray | None  # int [tokens]: first byte of every token
    tok_line: np.ndarray | None  # int [tokens]: line of each token
    n_lines: int
    tokens_per_line: np.ndarray  # int [lines]
    first_tok: np.ndarray  # int [lines]: index of each line's first token
    data_line: np.ndarray  # bool [lines]: the line holds a token
    colons: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # byte positions
    colon_tok: np.ndarray | None = None  # int [colons]: the token holding each colon
    colons_per_line: np.ndarray | None = None  # int [lines]
    q: np.ndarray | None = None  # int: byte position of every 'qid:'
    chunk_qid: bool = False  # the chunk's lines have 'qid:'

    def release(self) -> None:
        self.ws = self.starts = self.tok_pos = self.tok_line = None


def _scan_tokens(a: np.ndarray, body: bytes) -> _Tokens | None:
    """Token positions and tokens per line of a non-empty chunk; None when it holds no token."""
    ws = np.frombuffer(body.translate(_WS_TABLE), dtype=bool)
    newlines = np.flatnonzero(a == 10)
    n_lines = newlines.size + int(a[-1] != 10)
    starts = ~ws
    starts[1:] &= ws[:-1]
    tok_pos = np.flatnonzero(starts)  # first byte of every token
    if tok_pos.size == 0:
        return None
    tok_line = np.searchsorted(newlines, tok_pos)  # line of each token
    tokens_per_line = np.bincount(tok_line, minlength=n_lines)
    first_tok = np.cumsum(tokens_per_line) - tokens_per_line  # index of each line's first token
    data_line = tokens_per_line > 0
    return _Tokens(ws, starts, tok_pos, tok_line, n_lines, tokens_per_line, first_tok, data_line)


def _colons_ok(a: np.ndarray, t: _Tokens) -> bool:
    """Exactly one colon inside every token after a line's first (none in the label), never next to
    whitespace; fills ``t.colons``, ``t.colon_tok``, ``t.colons_per_line``."""
    assert t.ws is not None and t.tok_pos is not None and t.tok_line is not None
    colons = np.flatnonzero(a == 58)
    t.colons = colons
    t.colons_per_line = np.zeros(t.n_lines, dtype=np.int64)
    if colons.size:
        if colons[0] == 0 or colons[-1] == a.size - 1 or t.ws[colons - 1].any() or t.ws[colons + 1].any():
            return False
        colon_tok = np.searchsorted(t.tok_pos, colons, side="right") - 1
        if np.any(colon_tok[1:] == colon_tok[:-1]):  # two colons in one token
            return False
        colon_line = t.tok_line[colon_tok]
        if np.any(colon_tok == t.first_tok[colon_line]):  # a colon in the label token
            return False
        t.colon_tok = colon_tok
        t.colons_per_line = np.bincount(colon_line, minlength=t.n_lines)
    data = t.data_line
    return not np.any(t.colons_per_line[data] != t.tokens_per_line[data] - 1)  # a token without colon


def _qids_ok(a: np.ndarray, body: bytes, t: _Tokens, has_qid: bool | None) -> bool:
    """'qid:' opens the second token of every data line (or of none, as in earlier chunks); the letters
    q, i, d appear nowhere else. Fills ``t.q``, ``t.chunk_qid``."""
    assert t.starts is not None and t.tok_pos is not None and t.tok_line is not None
    q = np.flatnonzero((a[:-3] == 113) & (a[1:-2] == 105) & (a[2:-1] == 100) & (a[3:] == 58))
    if not body.count(b"q") == body.count(b"i") == body.count(b"d") == q.size:  # letters elsewhere
        return False
    t.q, t.chunk_qid = q, q.size > 0
    if not t.chunk_qid:
        return has_qid is not True
    if has_qid is False or not t.starts[q].all():
        return False
    q_tok = np.searchsorted(t.tok_pos, q)
    q_line = t.tok_line[q_tok]
    if np.any(q_tok - t.first_tok[q_line] != 1):
        return False
    return not np.any(np.bincount(q_line, minlength=t.n_lines)[t.data_line] != 1)


def _digits_ok(a: np.ndarray, t: _Tokens) -> bool:
    """Feature indices are plain digits and numeric query ids a sign and digits, as the careful path
    reads them (pandas would read '1e0', '+1' or '1.0' as 1; 'qid:1e3' is the string id "1e3")."""
    assert t.ws is not None and t.tok_pos is not None and t.q is not None
    if t.colons.size:
        idx_start = t.tok_pos[t.colon_tok]
        idx_len = t.colons - idx_start  # >= 1: no colon opens a token (checked before)
        if t.chunk_qid:
            idx_len[np.searchsorted(t.colons, t.q + 3)] = 0  # the 'qid:' tokens
        if not _digits_before(a, idx_start, idx_len, max_len=9):
            return False
    return not (t.chunk_qid and not _digits_until_space(a, t.ws, t.q + 4, max_len=18))


def _fast_table(body: bytes, t: _Tokens) -> np.ndarray | None:
    """The chunk as a float64 table ``[rows, label (qid) index value index value ...]`` padded with NaN,
    read by pandas' C tokenizer; None when it would be too wide or pandas refuses it."""
    assert t.colons_per_line is not None
    clean = body.replace(b":", b" ")
    if t.chunk_qid:
        clean = clean.replace(b"qid", b"   ")
    pairs = t.colons_per_line[t.data_line] - int(t.chunk_qid)
    n_cols = (2 if t.chunk_qid else 1) + 2 * int(pairs.max())
    if n_cols > _FAST_MAX_COLUMNS or pairs.size * n_cols * 8 > max(16 * len(body), 1 << 20):
        return None  # one very long line among short ones: the padded table would dwarf the chunk
    try:
        table = pd.read_csv(
            io.BytesIO(clean),
            sep=r"\s+",
            header=None,
            names=range(n_cols),
            dtype=np.float64,
            engine="c",
            keep_default_na=False,
            na_values=["NULL", ""],  # "": the missing tail of a shorter line
            skip_blank_lines=True,
        ).to_numpy()
    except (ValueError, pd.errors.ParserError):
        return None
    if table.shape != (int(t.data_line.sum()), n_cols):
        return None
    return table


def _table_block(
    table: np.ndarray,
    t: _Tokens,
    chunk: bytes,
    first_line: int,
    n_features: int | None,
    max_width: int | None,
) -> _Block | None:
    """The chunk's block from its table, after checking the numbers (finite float32 labels, integer
    query ids, feature indices in range and not repeated on a line); None when one is unusual."""
    assert t.colons_per_line is not None
    pairs = t.colons_per_line[t.data_line] - int(t.chunk_qid)
    n_head = 2 if t.chunk_qid else 1
    labels = table[:, 0]
    if not (np.abs(labels) <= _F32_MAX).all():  # also false for NaN
        return None
    qids = None
    if t.chunk_qid:
        qv = table[:, 1]
        if not np.isfinite(qv).all() or np.any(qv != np.floor(qv)) or np.any(np.abs(qv) > 2**53):
            return None
        qids = qv.astype(np.int64)
    idx = table[:, n_head::2]
    val = table[:, n_head + 1 :: 2]
    valid = np.arange(idx.shape[1]) < pairs[:, None]
    idx_v = idx[valid]
    if idx_v.size and not _indices_ok(idx, val, valid, idx_v, n_features, max_width):
        return None
    width = int(idx_v.max()) if idx_v.size else 0
    features = np.zeros((labels.size, width), dtype=np.float32)
    rows, cols = np.nonzero(valid)
    features[rows, idx[rows, cols].astype(np.int64) - 1] = val[rows, cols]
    data_lines = np.flatnonzero(t.data_line)
    docids = _docids(chunk, data_lines)
    lines = first_line + data_lines
    return _Block(features, labels.astype(np.float32), qids, lines, docids, pairs.astype(np.int64))


def _indices_ok(
    idx: np.ndarray,
    val: np.ndarray,
    valid: np.ndarray,
    idx_v: np.ndarray,
    n_features: int | None,
    max_width: int | None,
) -> bool:
    """Feature indices are integers in ``1..min(n_features, max_width)``, values fit float32 (NULL's
    NaN passes) and no index repeats on a line."""
    if not np.isfinite(idx_v).all() or np.any(idx_v != np.floor(idx_v)) or idx_v.min() < 1:
        return False
    limit = n_features or MAX_FEATURE_INDEX
    if idx_v.max() > (limit if max_width is None else min(limit, max_width)):
        return False
    if np.any(np.abs(val[valid]) > _F32_MAX):  # inf, or beyond float32 (NULL's NaN passes)
        return False
    # duplicates: indices are usually increasing within a line; otherwise sort and compare
    padded = np.where(valid, idx, 0.0)
    if not np.all((np.diff(padded, axis=1) > 0) | ~valid[:, 1:]):
        srt = np.sort(np.where(valid, idx, -np.arange(1.0, idx.shape[1] + 1)), axis=1)  # pads distinct
        if np.any(np.diff(srt, axis=1) == 0):
            return False
    return True


def _digits_before(a: np.ndarray, start: np.ndarray, length: np.ndarray, max_len: int) -> bool:
    """Whether every ``a[start[i]:start[i] + length[i]]`` (``start`` sorted) is ASCII digits and no
    length exceeds max_len (a loop over the text length, not over the texts)."""
    if length.size == 0:
        return True
    longest = int(length.max())
    if longest > max_len:
        return False
    for k in range(longest):
        at = start + k
        if at[-1] >= a.size:  # start is sorted: a short last token near the end of the chunk
            np.minimum(at, a.size - 1, out=at)
        bad = (a[at] - np.uint8(48)) > 9  # uint8: bytes below '0' wrap around to large values
        bad &= length > k
        if bad.any():
            return False
    return True


def _digits_until_space(a: np.ndarray, ws: np.ndarray, start: np.ndarray, max_len: int) -> bool:
    """Whether the text from each ``start`` to the next whitespace (or the end) is an optional sign and
    1..max_len ASCII digits."""
    n = a.size
    if start.size == 0:
        return True
    if start.max() >= n:
        return False
    first = a[start]
    pos = start + ((first == 43) | (first == 45))  # '+' / '-'
    alive = np.ones(pos.size, dtype=bool)
    for k in range(max_len + 1):
        at = pos + k
        clipped = np.minimum(at, n - 1)
        ended = (at >= n) | ws[clipped]
        if k == 0 and ended.any():  # empty, or a sign alone
            return False
        ch = a[clipped]
        if np.any(alive & ~ended & ((ch < 48) | (ch > 57))):
            return False
        alive &= ~ended
        if not alive.any():
            return True
    return False


def _docids(chunk: bytes, data_lines: np.ndarray) -> list | None:
    """docid per data line from '#docid = X' comments (None entries where absent)."""
    if b"docid" not in chunk:
        return None
    positions, ids = [], []
    for m in _DOCID.finditer(chunk):
        positions.append(m.start())
        ids.append(m.group(1).decode("utf-8", "replace"))
    newlines = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
    line = np.searchsorted(newlines, np.asarray(positions))
    per_line: dict[int, str] = {}
    for i, d in zip(line.tolist(), ids, strict=True):
        per_line.setdefault(i, d)
    return [per_line.get(i) for i in data_lines.tolist()]


def _empty_block() -> _Block:
    none = np.zeros(0, np.int64)
    return _Block(np.zeros((0, 0), np.float32), np.zeros(0, np.float32), None, none, None, none)


def _parse_chunk_careful(
    chunk: bytes,
    first_line: int,
    name: str,
    has_qid: bool | None,
    n_features: int | None,
    *,
    max_width: int | None = None,
    limits: _Limits | None = None,
    n_lines: int = 0,
) -> _Block:
    """Line-by-line parse with precise errors. Reference behaviour for the fast path.

    ``max_width``: the widest matrix ``limits.dense_bytes`` allows for ``n_lines`` rows; a larger
    feature index is an error (before the chunk's block is allocated)."""
    rows = _CarefulRows(n_features or MAX_FEATURE_INDEX, max_width, limits, n_lines)
    for i, raw in enumerate(chunk.split(b"\n")):
        line_no = first_line + i
        where = f"{name}:{line_no}"
        body_bytes, hash_mark, comment = raw.partition(b"#")  # comments may hold any bytes
        try:
            body = body_bytes.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        tokens = [t.decode() for t in body_bytes.split()]  # ASCII whitespace, as in the fast path
        if not tokens:
            continue
        if "\x00" in body:
            raise ValueError(f"{where}: NUL byte in the data (binary file?)")
        label = _number(tokens[0], where, "a numeric label as the first token")
        rest = tokens[1:]
        line_qid = bool(rest) and rest[0].startswith("qid:")
        if has_qid is None:
            has_qid = line_qid
        if has_qid:
            rows.add_qid(rest, line_qid, where)
            rest = rest[1:]
        elif line_qid:
            raise ValueError(f"{where}: 'qid:' found but earlier lines had no query id")
        rows.add_pairs(rest, where)
        rows.labels.append(label)
        rows.lines.append(line_no)
        m = _DOCID.search(comment) if hash_mark else None
        rows.docids.append(m.group(1).decode("utf-8", "replace") if m else None)
    return rows.block(bool(has_qid))


class _CarefulRows:
    """The rows ``_parse_chunk_careful`` has read so far, and the checks of one line's tokens."""

    def __init__(self, limit: int, max_width: int | None, limits: _Limits | None, n_lines: int) -> None:
        self.limit, self.max_width, self.limits, self.n_lines = limit, max_width, limits, n_lines
        self.counts: list[int] = []
        self.labels: list[float] = []
        self.qids: list[str] = []
        self.int_qids = True  # every query id an integer of at most 18 digits: int64 keys
        self.lines: list[int] = []
        self.docids: list = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []

    def add_qid(self, rest: list[str], line_qid: bool, where: str) -> None:
        """The query id of a line that must have one (``rest``: the tokens after the label)."""
        if not line_qid:
            got = repr(rest[0][:40]) if rest else "the end of the line"
            raise ValueError(f"{where}: expected 'qid:<id>' as the second token, got {got}")
        qid = rest[0][4:]
        if not qid:
            raise ValueError(f"{where}: empty query id in 'qid:'")
        if _INT_QID.fullmatch(qid):  # '007' -> '7', '+5' -> '5', '-0' -> '0', as int64 keys would
            sign = "-" if qid[0] == "-" else ""
            digits = qid.lstrip("+-").lstrip("0") or "0"
            qid = (sign if digits != "0" else "") + digits
            self.int_qids &= len(digits) <= 18
        else:
            self.int_qids = False
        self.qids.append(qid)

    def add_pairs(self, tokens: list[str], where: str) -> None:
        """The ``index:value`` tokens of the row being read."""
        seen: set[int] = set()
        row = len(self.labels)
        rows, cols, vals = self.rows, self.cols, self.vals  # local names: this loop runs per value
        top = self.limit if self.max_width is None else min(self.limit, self.max_width)
        for tok in tokens:
            idx_text, colon, val_text = tok.partition(":")
            if not colon or not idx_text or not val_text:
                raise ValueError(f"{where}: expected 'index:value', got {tok[:40]!r}")
            # the usual index first; anything else gets every check, in order, from _index
            idx = int(idx_text) if len(idx_text) < 10 and idx_text.isdigit() and idx_text.isascii() else 0
            if not 1 <= idx <= top:
                idx = self._index(idx_text, where)
            if idx in seen:
                raise ValueError(f"{where}: feature {idx} appears twice on the line")
            seen.add(idx)
            value = np.nan if val_text == "NULL" else _number(val_text, where, f"a number for feature {idx}")
            rows.append(row)
            cols.append(idx - 1)
            vals.append(value)
        self.counts.append(len(seen))

    def _index(self, idx_text: str, where: str) -> int:
        limit = self.limit
        if not (idx_text.isascii() and idx_text.isdigit()):
            if idx_text == "qid":
                raise ValueError(f"{where}: 'qid:' must be the second token")
            raise ValueError(f"{where}: feature index must be an integer >= 1, got {idx_text[:40]!r}")
        if len(idx_text.lstrip("0")) > len(str(limit)):  # before int(), which refuses 4300+ digits
            shown = idx_text if len(idx_text) <= 40 else idx_text[:40] + "..."
            raise ValueError(f"{where}: feature index {shown} exceeds the limit of {limit}")
        idx = int(idx_text)
        if idx < 1:
            raise ValueError(f"{where}: feature index must be >= 1 (1-based), got {idx}")
        if idx > limit:
            raise ValueError(f"{where}: feature index {idx} exceeds the limit of {limit}")
        if self.max_width is not None and idx > self.max_width:
            assert self.limits is not None
            raise self.limits.dense_error(where, self.n_lines, idx, f"feature index {idx}")
        return idx

    def block(self, has_qid: bool) -> _Block:
        n = len(self.labels)
        width = max(self.cols) + 1 if self.cols else 0
        features = np.zeros((n, width), dtype=np.float32)
        if self.rows:
            features[np.asarray(self.rows), np.asarray(self.cols)] = np.asarray(self.vals, dtype=np.float64)
        key: np.ndarray | None = None
        if has_qid and n:
            # keep integer ids as int64 so fast and careful chunks merge without string conversion
            qids = self.qids
            key = np.array([int(q) for q in qids], dtype=np.int64) if self.int_qids else np.asarray(qids)
        return _Block(
            features,
            np.asarray(self.labels, dtype=np.float32),
            key,
            np.asarray(self.lines, dtype=np.int64),
            self.docids if any(d is not None for d in self.docids) else None,
            np.asarray(self.counts, dtype=np.int64),
        )


def _number(text: str, where: str, expected: str) -> float:
    try:
        if not text.isascii() or "_" in text:  # float() also takes '1_0' and non-ASCII digits
            raise ValueError
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: expected {expected}, got {text[:40]!r}") from None
    if not abs(value) <= _F32_MAX:
        raise ValueError(f"{where}: expected {expected}, got a non-finite value {text[:40]!r}")
    return value


# ------------------------------------------------------------------------------------- grouping
def _merge_keys(parts: list[np.ndarray]) -> np.ndarray:
    if all(p.dtype.kind == "i" for p in parts):
        return np.concatenate(parts)
    return np.concatenate([p.astype(str) for p in parts])


def _group_rows(keys: np.ndarray, lines: np.ndarray, name: str, regroup: bool):
    """Query offsets; with regroup, the row order that makes each query contiguous.

    Returns (row order or None when already contiguous, offsets int64 (Q+1,)).
    """
    change = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    starts = np.concatenate([[0], change])
    run_keys = keys[starts]
    uniq, first_run = np.unique(run_keys, return_index=True)
    if uniq.size == starts.size:
        return None, np.concatenate([starts, [keys.size]]).astype(np.int64)
    if not regroup:
        # the earliest run whose key was seen in an earlier run
        _, inverse = np.unique(run_keys, return_inverse=True)
        again = np.flatnonzero(first_run[inverse] != np.arange(starts.size))[0]
        earlier = first_run[inverse[again]]
        raise ValueError(
            f"{name}:{lines[starts[again]]}: query id {run_keys[again]!s} reappears after other queries "
            f"(first seen at line {lines[starts[earlier]]}); rows of a query must be contiguous "
            "(pass regroup=True, or --regroup, to gather them)"
        )
    # order queries by first appearance, rows stable within a query
    _, inverse = np.unique(keys, return_inverse=True)
    first_row = np.full(uniq.size, keys.size, dtype=np.int64)
    np.minimum.at(first_row, inverse, np.arange(keys.size))
    rank = np.empty_like(first_row)
    rank[np.argsort(first_row, kind="stable")] = np.arange(uniq.size)
    order = np.argsort(rank[inverse], kind="stable")
    sizes = np.bincount(rank[inverse], minlength=uniq.size)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return order, offsets


def fill_missing(features: np.ndarray, offsets: np.ndarray, null_fill: str | float) -> int:
    """Replace NaN (from NULL tokens) in place; returns the number of cells filled.

    ``"query_min"``: the minimum of the feature over the query's non-NULL cells; ``"letor_min"``: the
    smaller of that minimum and 0; both 0 when every cell of the query is NULL; a number: that number.
    """
    if null_fill == "keep":  # missing values stay NaN
        return 0
    missing_rows = np.flatnonzero(np.isnan(features).any(axis=1))
    if missing_rows.size == 0:
        return 0
    sub = features[missing_rows]
    r, c = np.nonzero(np.isnan(sub))
    if null_fill in NULL_FILL_RULES:
        query_of_row = np.searchsorted(offsets, missing_rows, side="right") - 1
        fill = np.zeros(r.size, dtype=np.float32)
        # per query, min over the non-NULL values, column block by column block to bound memory
        for c0 in range(0, features.shape[1], 32):
            block = features[:, c0 : c0 + 32]
            mins = np.fmin.reduceat(block, offsets[:-1], axis=0)  # (Q, 32), NaN where all NaN
            sel = (c >= c0) & (c < c0 + 32)
            fill[sel] = mins[query_of_row[r[sel]], c[sel] - c0]
        fill = np.nan_to_num(fill, nan=0.0)  # the whole query lacks the feature: 0
        if null_fill == "letor_min":
            fill = np.minimum(fill, np.float32(0.0))
    else:
        fill = np.float32(float(null_fill))
    sub[r, c] = fill
    features[missing_rows] = sub
    return int(r.size)


def missing_cells(features: np.ndarray, offsets: np.ndarray, null_fill: str | float) -> dict[str, Any]:
    """Apply ``null_fill`` to the NaN cells of ``features`` (N, F) in place (``fill_missing``); the
    entries of ``RankingData.info``: ``null_filled`` (cells filled), and when there are some,
    ``null_fill`` (the rule that filled them), ``missing`` (cells kept NaN) and ``missing_columns``
    (columns that had a missing cell)."""
    columns = int(np.isnan(features).any(axis=0).sum()) if features.size else 0
    filled = fill_missing(features, offsets, null_fill)
    kept = int(np.count_nonzero(np.isnan(features))) if null_fill == "keep" else 0
    return {
        "null_filled": filled,
        **({"null_fill": null_fill} if filled else {}),
        **({"missing": kept} if kept else {}),
        **({"missing_columns": columns} if columns else {}),
    }


# -------------------------------------------------------------------------------- group files
def _find_query_file(path: Path, query_file: str | os.PathLike | None) -> Path | None:
    if query_file is not None:
        qf = Path(query_file)
        input_kind(qf, "group file", streams=True)
        return qf
    for candidate in _group_file_candidates(path):
        if candidate.is_file():
            return candidate
    return None


def _group_file_candidates(path: Path) -> list[Path]:
    """The group files tried for ``path``, in order: ``<path>.query``, ``<path>.group``, and for a
    ``.gz`` file the same without ``.gz`` (``rank.test.gz`` -> ``rank.test.query``)."""
    stems = [str(path)] + ([str(path.with_suffix(""))] if path.suffix == ".gz" else [])
    return [Path(stem + ext) for stem in stems for ext in (".query", ".group")]


def _group_file_names(name: str) -> str:
    names = [p.name for p in _group_file_candidates(Path(name))]
    return ", ".join(names[:-1]) + " or " + names[-1]


def read_group_sizes(
    path: str | os.PathLike, *, max_total: int | None = None, data_name: str = "the data file"
) -> np.ndarray:
    """Group sizes (one positive integer per line) of a LightGBM ``.query`` / XGBoost ``.group`` file
    (a regular file or a stream).

    Args:
        max_total: the rows of ``data_name`` the sizes are for: reading a stream stops at the first
            size that takes the sum above it (an error naming the line), so an endless stream ends (a
            regular file is read whole: the caller compares the sum).

    Returns:
        int64 (Q,). Raises ValueError naming ``file:line`` for anything but a positive integer.
    """
    path = Path(path)
    stream = input_kind(path, "group file", streams=True) == STREAM
    sizes: list[int] = []
    total, line_no = 0, 0
    with path.open("rb") as fh:
        while raw := fh.readline(_GROUP_LINE_BYTES):  # bounded: a stream without newlines ends here
            line_no += 1
            if len(raw) == _GROUP_LINE_BYTES and not raw.endswith(b"\n"):
                raise ValueError(
                    f"{path}:{line_no}: expected a positive integer group size (at most 18 digits), got a "
                    f"line of {_GROUP_LINE_BYTES:,} bytes or more"
                )
            if line_no == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            text = raw.strip()
            if not text:
                continue
            if not text.isdigit() or len(text.lstrip(b"0")) > 18 or int(text) < 1:  # isdigit: ASCII
                raise ValueError(
                    f"{path}:{line_no}: expected a positive integer group size (at most 18 digits), "
                    f"got {text[:40]!r}"
                )
            sizes.append(int(text))
            total += sizes[-1]
            if stream and max_total is not None and total > max_total:
                raise ValueError(
                    f"{path}:{line_no}: group sizes sum to {total} by this line, but {data_name} has "
                    f"{max_total} rows"
                )
    if not sizes:
        raise ValueError(f"{path}: empty group file")
    return np.asarray(sizes, dtype=np.int64)
