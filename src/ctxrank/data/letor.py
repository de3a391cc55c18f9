"""Reader for SVMlight / LETOR text files: ``label qid:Q idx:val ... # comment``.

``read_letor`` turns a LETOR file (plain or ``.gz``) into a :class:`RankingData` with a dense float32
feature matrix. It also reads the LightGBM/XGBoost convention (lines without ``qid:`` plus a
``<file>.query`` or ``<file>.group`` file of group sizes) and LETOR's "NULL" variant (the literal token
``NULL`` marks a missing value).

Design (why it is hand-written): scikit-learn's ``load_svmlight_file`` is fast but cannot report the
file and line of a bad row, silently accepts NaN/inf values and duplicate features, knows nothing of
``NULL`` tokens or ``#docid`` comments. So parsing is done here in two tiers:

* a **fast path** per chunk of about 16 MB of whole lines: the structure of every line (comments,
  tokens, colons, the position of ``qid:``) is checked with vectorized NumPy byte operations, then the
  numbers are converted by pandas' C tokenizer (about 3x faster than ``load_svmlight_file`` here);
* a **careful path**, line by line in Python, used only for a chunk the fast path declines (anything
  unusual: an error, non-numeric query ids, literal ``nan``). It is the single authority for error
  messages, which always name ``file:line`` and what was expected.

Memory: chunks are parsed into small dense blocks and copied once into the final array, so the peak is
about 2x the final float32 array plus O(rows) bookkeeping (line numbers, query keys, docids) and one
chunk's working set; no Python object is created per value.

Parsed files are cached (see :mod:`ctxrank.data.cache`): later loads of an unchanged file skip parsing.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ctxrank.data.ranking_data import RankingData

__all__ = ["read_group_sizes", "read_letor"]

DEFAULT_CHUNK_BYTES = 16 << 20
MAX_FEATURE_INDEX = 10_000_000  # a guard against "99999999999:1" allocating terabytes
_DOCID = re.compile(rb"docid\s*=\s*(\S+)")
_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 32]] = True
# bytes allowed outside comments on the fast path: digits . + - e E : whitespace, and the letters of
# "qid" and "NULL"; anything else (literal nan/inf, string query ids, garbage) goes the careful way
_F32_MAX = float(np.finfo(np.float32).max)
_FAST_OK = _WS.copy()
_FAST_OK[[ord(c) for c in "0123456789.+-eE:qidNUL"]] = True


@dataclass
class _Block:
    """One chunk's rows. features may contain NaN where the file said NULL."""

    features: np.ndarray  # float32 [n, F_chunk]
    labels: np.ndarray  # float32 [n]
    qids: np.ndarray | None  # int64 [n] (fast path) or str [n] (careful path); None without qid:
    lines: np.ndarray  # int64 [n] 1-based line numbers
    docids: list | None  # str per row, None entries where a line had no docid


def read_letor(
    path: str | os.PathLike,
    *,
    query_file: str | os.PathLike | None = None,
    null_fill: str | float = "query_min",
    regroup: bool = False,
    n_features: int | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> RankingData:
    """Read a LETOR / SVMlight file into a :class:`RankingData`.

    Args:
        path: ``.txt`` or ``.gz`` file, lines ``label qid:Q idx:val ... [# comment]``. Blank lines and
            lines holding only a comment are skipped. Feature indices are 1-based; absent features
            are 0 (SVMlight convention). Numeric query ids are normalized as integers
            (``qid:007`` -> ``"7"``); other query ids are kept as written.
        query_file: for files without ``qid:`` (LightGBM/XGBoost convention), a file with one group
            size per line. When None, ``<path>.query`` then ``<path>.group`` are tried (also with a
            ``.gz`` suffix removed). Query ids are then ``"0"``, ``"1"``, ... in file order.
        null_fill: what replaces the token ``NULL`` (a missing value): ``"query_min"`` (default,
            LETOR's "Feature-min" rule: the minimum of that feature over the query's other items, 0
            when the whole query lacks it) or a number. The count of filled cells is in
            ``data.info["null_filled"]``.
        regroup: rows of one query must be contiguous; a query id that reappears after other queries
            is an error naming both lines, unless ``regroup=True``, which gathers each query's rows
            (stably, queries in order of first appearance).
        n_features: fix the feature count (an index above it is an error); default: the largest
            index in the file.
        cache: reuse / write a binary cache of the parsed arrays (see ``ctxrank.data.cache``).
        cache_dir: where the cache lives (default ``$CTXRANK_CACHE_DIR`` or ``~/.cache/ctxrank``).
        chunk_bytes: size of the text chunks parsed at once.

    Returns:
        RankingData with features float32 [N, F], labels float32 [N], query ids, query offsets,
        docids (from ``#docid = ...`` comments, when every line has one) and ``info``.

    Raises:
        ValueError: a malformed line (named ``file:line``, with what was expected), NaN/inf values,
            an empty file, group sizes that do not match the row count, a reappearing query id.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if isinstance(null_fill, str) and null_fill != "query_min":
        raise ValueError(f"null_fill must be 'query_min' or a number, got {null_fill!r}")
    if n_features is not None and not 1 <= n_features <= MAX_FEATURE_INDEX:
        raise ValueError(f"n_features must lie in [1, {MAX_FEATURE_INDEX}], got {n_features}")
    group_path = _find_query_file(path, query_file)
    options = {
        "null_fill": null_fill,
        "regroup": regroup,
        "n_features": n_features,
        "query_file": str(group_path) if group_path else None,
    }
    if cache:
        from ctxrank.data import cache as _cache

        return _cache.cached_parse(
            path,
            options,
            lambda: _parse(path, group_path, null_fill, regroup, n_features, chunk_bytes),
            cache_dir=cache_dir,
            extra_files=[group_path] if group_path else [],
        )
    return _parse(path, group_path, null_fill, regroup, n_features, chunk_bytes)


# --------------------------------------------------------------------------------------- parsing
def _parse(
    path: Path,
    group_path: Path | None,
    null_fill: str | float,
    regroup: bool,
    n_features: int | None,
    chunk_bytes: int,
) -> RankingData:
    name = str(path)
    blocks: list[_Block] = []
    has_qid: bool | None = None
    for chunk, first_line in _iter_chunks(path, chunk_bytes):
        block = _parse_chunk_fast(chunk, first_line, has_qid, n_features)
        if block is None:
            block = _parse_chunk_careful(chunk, first_line, name, has_qid, n_features)
        if block.labels.size == 0:
            continue
        if has_qid is None:
            has_qid = block.qids is not None
        blocks.append(block)
    if not blocks:
        raise ValueError(f"{name}: empty file (no data lines)")

    n_rows = sum(b.labels.size for b in blocks)
    width = n_features or max(b.features.shape[1] for b in blocks)
    features = np.zeros((n_rows, width), dtype=np.float32)
    start = 0
    for b in blocks:  # one copy per chunk into the final array; each block freed as we go
        features[start : start + b.labels.size, : b.features.shape[1]] = b.features
        start += b.labels.size
        b.features = None  # type: ignore[assignment]
    labels = np.concatenate([b.labels for b in blocks])
    lines = np.concatenate([b.lines for b in blocks])
    docid_lists = [b.docids for b in blocks]
    docids = None
    if all(d is not None and None not in d for d in docid_lists):
        docids = np.array([d for dl in docid_lists for d in dl])  # type: ignore[union-attr]

    if has_qid:
        keys = _merge_keys([b.qids for b in blocks])  # type: ignore[misc]
        order, offsets = _group_rows(keys, lines, name, regroup)
        if order is not None:
            features, labels, lines = features[order], labels[order], lines[order]
            docids = None if docids is None else docids[order]
            keys = keys[order]
        query_ids = np.asarray(keys[offsets[:-1]]).astype(str)
    else:
        if group_path is None:
            raise ValueError(
                f"{name}:{lines[0]}: expected 'qid:<id>' as the second token; a file without query ids "
                f"needs a group file ({name}.query or {name}.group, one group size per line)"
            )
        sizes = read_group_sizes(group_path)
        if int(sizes.sum()) != n_rows:
            raise ValueError(
                f"{group_path}: group sizes sum to {int(sizes.sum())} but {name} has {n_rows} rows"
            )
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        query_ids = np.arange(sizes.size).astype(str)

    null_filled = _fill_nulls(features, offsets, null_fill)
    return RankingData(
        features=features,
        labels=labels,
        query_ids=query_ids,
        query_offsets=offsets,
        docids=docids,
        feature_names=tuple(f"f{i}" for i in range(1, width + 1)),
        source=name,
        info={"null_filled": null_filled},
    )


def _iter_chunks(path: Path, chunk_bytes: int) -> Iterator[tuple[bytes, int]]:
    """Yield (whole lines, 1-based number of the chunk's first line)."""
    with path.open("rb") as raw:
        magic = raw.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    try:
        with opener(path, "rb") as fh:
            line_no = 1
            rest = b""
            first = True
            while True:
                data = fh.read(chunk_bytes)
                if first:
                    first = False
                    if data.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte order mark
                        data = data[3:]
                if not data:
                    if rest:
                        yield rest, line_no
                    return
                data = rest + data
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # no newline yet: keep reading (a very long line)
                    rest = data
                    continue
                chunk, rest = data[:cut], data[cut:]
                yield chunk, line_no
                line_no += chunk.count(b"\n")
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: cannot read compressed data ({exc})") from exc


def _parse_chunk_fast(chunk: bytes, first_line: int, has_qid: bool | None, n_features: int | None):
    """Vectorized parse of one chunk; None when anything is unusual (the careful path decides)."""
    a = np.frombuffer(chunk, dtype=np.uint8)
    if a.size == 0:
        return None
    is_nl = a == 10
    line_of = np.cumsum(is_nl, dtype=np.int32)
    line_of -= is_nl  # the newline belongs to its own line
    n_lines = int(line_of[-1]) + 1
    # comments: from '#' to the end of the line
    hashes = np.cumsum(a == 35, dtype=np.int32)
    line_starts = np.concatenate([[0], np.flatnonzero(is_nl) + 1])[:n_lines]
    before = hashes[line_starts] - (a[line_starts] == 35)
    in_comment = hashes > before[line_of]
    in_comment &= ~is_nl
    del hashes
    body = a.copy()
    body[in_comment] = 32
    if not _FAST_OK[body].all():
        return None
    ws = _WS[body]
    tok_start = ~ws
    tok_start[1:] &= ws[:-1]
    tokens_per_line = np.bincount(line_of[tok_start], minlength=n_lines)
    data_line = tokens_per_line > 0
    if not data_line.any():
        return _empty_block()
    tok_number = np.cumsum(tok_start, dtype=np.int32)  # token count up to each byte
    tok_before_line = tok_number[line_starts] - tok_start[line_starts]
    colons = np.flatnonzero(body == 58)
    if colons.size:
        if colons[-1] == body.size - 1 or ws[colons + 1].any() or colons[0] == 0 or ws[colons - 1].any():
            return None
        colon_tok = tok_number[colons]
        if np.any(colon_tok[1:] == colon_tok[:-1]):  # two colons in one token
            return None
        if np.any(colon_tok - tok_before_line[line_of[colons]] < 2):  # colon in the label token
            return None
    colons_per_line = np.bincount(line_of[colons], minlength=n_lines)
    if np.any(colons_per_line[data_line] != tokens_per_line[data_line] - 1):
        return None
    # 'qid:' must open the second token of every data line (or of none)
    q = np.flatnonzero(
        (body[:-3] == ord("q")) & (body[1:-2] == ord("i")) & (body[2:-1] == ord("d")) & (body[3:] == 58)
    )
    line_has_qid = np.bincount(line_of[q], minlength=n_lines) if q.size else np.zeros(n_lines, np.int64)
    chunk_qid = bool(line_has_qid[data_line].any())
    if chunk_qid:
        if np.any(line_has_qid[data_line] != 1) or not tok_start[q].all():
            return None
        if np.any(tok_number[q] - tok_before_line[line_of[q]] != 2):
            return None
        if has_qid is False:
            return None
    elif has_qid is True:
        return None
    letters = (body == ord("q")) | (body == ord("i")) | (body == ord("d"))
    if chunk_qid:
        letters[q] = letters[q + 1] = letters[q + 2] = False
    if letters.any():
        return None
    del letters, tok_start, tok_number, in_comment

    body[colons] = 32
    if chunk_qid:
        body[q] = body[q + 1] = body[q + 2] = 32
    if not data_line.all():  # drop blank / comment-only lines
        body = body[data_line[line_of]]
    pairs = colons_per_line[data_line] - (1 if chunk_qid else 0)
    n_head = 2 if chunk_qid else 1
    n_cols = n_head + 2 * int(pairs.max())
    try:
        table = pd.read_csv(
            io.BytesIO(body.tobytes()),
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
    n = int(data_line.sum())
    if table.shape != (n, n_cols):
        return None
    labels = table[:, 0]
    if not (np.abs(labels) <= _F32_MAX).all():  # also false for NaN
        return None
    qids = None
    if chunk_qid:
        qv = table[:, 1]
        if not np.isfinite(qv).all() or np.any(qv != np.floor(qv)) or np.any(np.abs(qv) > 2**53):
            return None
        qids = qv.astype(np.int64)
    idx = table[:, n_head::2]
    val = table[:, n_head + 1 :: 2]
    valid = np.arange(idx.shape[1]) < pairs[:, None]
    idx_v = idx[valid]
    if idx_v.size:
        if not np.isfinite(idx_v).all() or np.any(idx_v != np.floor(idx_v)) or idx_v.min() < 1:
            return None
        limit = n_features or MAX_FEATURE_INDEX
        if idx_v.max() > limit:
            return None
        if np.any(np.abs(val[valid]) > _F32_MAX):  # inf, or beyond float32 (NULL's NaN passes)
            return None
        # duplicates: indices are usually increasing within a line; otherwise sort and compare
        padded = np.where(valid, idx, 0.0)
        if not np.all((np.diff(padded, axis=1) > 0) | ~valid[:, 1:]):
            srt = np.sort(np.where(valid, idx, -np.arange(1.0, idx.shape[1] + 1)), axis=1)  # pads distinct
            if np.any(np.diff(srt, axis=1) == 0):
                return None
    width = int(idx_v.max()) if idx_v.size else 0
    features = np.zeros((n, width), dtype=np.float32)
    rows, cols = np.nonzero(valid)
    features[rows, idx[rows, cols].astype(np.int64) - 1] = val[rows, cols]
    lines = first_line + np.flatnonzero(data_line).astype(np.int64)
    return _Block(features, labels.astype(np.float32), qids, lines, _docids(chunk, line_starts, data_line))


def _docids(chunk: bytes, line_starts: np.ndarray, data_line: np.ndarray) -> list | None:
    """docid per data line from '#docid = X' comments (None entries where absent)."""
    hash_pos, ids = [], []
    for m in _DOCID.finditer(chunk):
        hash_pos.append(m.start())
        ids.append(m.group(1).decode("utf-8", "replace"))
    if not ids:
        return None
    line = np.searchsorted(line_starts, np.asarray(hash_pos), side="right") - 1
    per_line: list = [None] * line_starts.size
    for i, d in zip(line.tolist(), ids, strict=True):
        if per_line[i] is None:
            per_line[i] = d
    return [per_line[i] for i in np.flatnonzero(data_line)]


def _empty_block() -> _Block:
    return _Block(np.zeros((0, 0), np.float32), np.zeros(0, np.float32), None, np.zeros(0, np.int64), None)


def _parse_chunk_careful(
    chunk: bytes, first_line: int, name: str, has_qid: bool | None, n_features: int | None
) -> _Block:
    """Line-by-line parse with precise errors. Reference behaviour for the fast path."""
    limit = n_features or MAX_FEATURE_INDEX
    labels: list[float] = []
    qids: list[str] = []
    lines: list[int] = []
    docids: list = []
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for i, raw in enumerate(chunk.split(b"\n")):
        line_no = first_line + i
        where = f"{name}:{line_no}"
        body_bytes, hash_mark, comment = raw.partition(b"#")  # comments may hold any bytes
        try:
            body = body_bytes.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        tokens = body.split()
        if not tokens:
            continue
        if "\x00" in body:
            raise ValueError(f"{where}: NUL byte in the data (binary file?)")
        label = _number(tokens[0], where, "a numeric label as the first token")
        rest = tokens[1:]
        line_qid = bool(rest) and rest[0].startswith("qid:")
        if has_qid is None:
            has_qid = line_qid
        if has_qid and not line_qid:
            got = repr(rest[0][:40]) if rest else "the end of the line"
            raise ValueError(f"{where}: expected 'qid:<id>' as the second token, got {got}")
        if not has_qid and line_qid:
            raise ValueError(f"{where}: 'qid:' found but earlier lines had no query id")
        if has_qid:
            qid = rest[0][4:]
            if not qid:
                raise ValueError(f"{where}: empty query id in 'qid:'")
            qids.append(str(int(qid)) if qid.isdigit() else qid)
            rest = rest[1:]
        seen: set[int] = set()
        row = len(labels)
        for tok in rest:
            idx_text, colon, val_text = tok.partition(":")
            if not colon or not idx_text or not val_text:
                raise ValueError(f"{where}: expected 'index:value', got {tok[:40]!r}")
            if not idx_text.isdigit():
                if idx_text == "qid":
                    raise ValueError(f"{where}: 'qid:' must be the second token")
                raise ValueError(f"{where}: feature index must be an integer >= 1, got {idx_text[:40]!r}")
            idx = int(idx_text)
            if idx < 1:
                raise ValueError(f"{where}: feature index must be >= 1 (1-based), got {idx}")
            if idx > limit:
                raise ValueError(f"{where}: feature index {idx} exceeds the limit of {limit}")
            if idx in seen:
                raise ValueError(f"{where}: feature {idx} appears twice on the line")
            seen.add(idx)
            value = np.nan if val_text == "NULL" else _number(val_text, where, f"a number for feature {idx}")
            rows.append(row)
            cols.append(idx - 1)
            vals.append(value)
        labels.append(label)
        lines.append(line_no)
        m = _DOCID.search(comment) if hash_mark else None
        docids.append(m.group(1).decode("utf-8", "replace") if m else None)
    n = len(labels)
    width = max(cols) + 1 if cols else 0
    features = np.zeros((n, width), dtype=np.float32)
    if rows:
        features[np.asarray(rows), np.asarray(cols)] = np.asarray(vals, dtype=np.float64)
    if has_qid and n:
        # keep numeric ids as int64 so fast and careful chunks merge without string conversion
        qid_arr = np.asarray(qids)
        try:
            key: np.ndarray | None = qid_arr.astype(np.int64)
        except (ValueError, OverflowError):
            key = qid_arr
    else:
        key = None
    return _Block(
        features,
        np.asarray(labels, dtype=np.float32),
        key,
        np.asarray(lines, dtype=np.int64),
        docids if any(d is not None for d in docids) else None,
    )


def _number(text: str, where: str, expected: str) -> float:
    try:
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

    Returns (row order or None when already contiguous, offsets int64 [Q+1]).
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


def _fill_nulls(features: np.ndarray, offsets: np.ndarray, null_fill: str | float) -> int:
    """Replace NaN (from NULL tokens) in place; returns the number of cells filled."""
    missing_rows = np.flatnonzero(np.isnan(features).any(axis=1))
    if missing_rows.size == 0:
        return 0
    sub = features[missing_rows]
    r, c = np.nonzero(np.isnan(sub))
    if null_fill == "query_min":
        query_of_row = np.searchsorted(offsets, missing_rows, side="right") - 1
        fill = np.zeros(r.size, dtype=np.float32)
        # per query, min over the non-NULL values, column block by column block to bound memory
        for c0 in range(0, features.shape[1], 32):
            block = features[:, c0 : c0 + 32]
            mins = np.fmin.reduceat(block, offsets[:-1], axis=0)  # [Q, 32], NaN where all NaN
            sel = (c >= c0) & (c < c0 + 32)
            fill[sel] = mins[query_of_row[r[sel]], c[sel] - c0]
        fill = np.nan_to_num(fill, nan=0.0)
    else:
        fill = np.float32(float(null_fill))
    sub[r, c] = fill
    features[missing_rows] = sub
    return int(r.size)


# -------------------------------------------------------------------------------- group files
def _find_query_file(path: Path, query_file: str | os.PathLike | None) -> Path | None:
    if query_file is not None:
        qf = Path(query_file)
        if not qf.is_file():
            raise ValueError(f"{qf}: group file not found")
        return qf
    stems = [str(path)]
    if path.suffix == ".gz":
        stems.append(str(path.with_suffix("")))
    for stem in stems:
        for ext in (".query", ".group"):
            candidate = Path(stem + ext)
            if candidate.is_file():
                return candidate
    return None


def read_group_sizes(path: str | os.PathLike) -> np.ndarray:
    """Group sizes (one positive integer per line) of a LightGBM ``.query`` / XGBoost ``.group`` file.

    Returns:
        int64 [Q]. Raises ValueError naming ``file:line`` for anything but a positive integer.
    """
    path = Path(path)
    sizes = []
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            text = raw.strip()
            if not text:
                continue
            if not text.isdigit() or int(text) < 1:
                raise ValueError(
                    f"{path}:{line_no}: expected a positive integer group size, got {text[:40]!r}"
                )
            sizes.append(int(text))
    if not sizes:
        raise ValueError(f"{path}: empty group file")
    return np.asarray(sizes, dtype=np.int64)
