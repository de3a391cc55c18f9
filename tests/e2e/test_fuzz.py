"""Input fuzzing of the readers: ``read_letor``, the ``.query`` / ``.group`` reader and
``read_table``, on mutated real lines.

Every example is a real file (MQ2008 lines, a CSV/TSV of synthetic choice sessions, Parquet bytes)
damaged by a few mutations: truncation at any byte, binary garbage, flipped bytes, huge numbers,
10^6-character tokens, NaN / inf, latin-1 / UTF-16 encodings, CRLF or CR endings, a UTF-8 BOM, blank
lines, empty or non-contiguous query groups, bad labels, duplicate / zero / negative / too large
feature indices, rows with missing or extra fields, group files that do not add up. Each is read
three ways (no cache; cache on, empty: parse and store; cache on again: load from the cache) and the
outcome must be, all three times, either

* a successful load equal to what a small independent oracle in this file expects (row and query
  counts, every label, feature value, query id and docid: no row silently dropped or altered), or
* a ``ValueError`` naming the file and the line the oracle finds at fault (``file:line:``; for tables
  ``file: data row N: ... column``), or the file for whole-file faults (empty, unreadable gzip, group
  sizes that do not sum to the row count),

never another exception type and never a hang (a SIGALRM guard per example, and hypothesis'
``deadline``).

``CTXRANK_FUZZ_EXAMPLES`` sets the examples per test: unset (``make test``), a bounded, derandomized
run; ``make fuzz`` sets 5000 and draws random examples.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import itertools
import os
import re
import signal
import tempfile
import threading
import warnings
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from ctxrank.data import letor
from ctxrank.data.letor import read_group_sizes, read_letor
from ctxrank.data.table import read_table_with_rows
from tests.conftest import REPO

# ------------------------------------------------------------------------------------- settings
_ENV = os.environ.get("CTXRANK_FUZZ_EXAMPLES")
LONG_RUN = bool(_ENV)
EXAMPLES = int(_ENV) if _ENV else 100
HANG_SECONDS = 30  # one example (three reads) running longer than this is a hang

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=timedelta(seconds=10),
    derandomize=not LONG_RUN,  # make test: the same examples on every run; make fuzz: random
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


class Hang(BaseException):
    """A BaseException, so that no reader's ``except Exception`` can turn it into a ValueError."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise Hang in the main thread after ``seconds`` (SIGALRM; a no-op where that does not exist)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise Hang(f"an example ran for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------------------------ real lines
MQ2008 = REPO / "src" / "ctxrank" / "datasets" / "mq2008"
with gzip.open(MQ2008 / "S1.txt.gz", "rb") as _fh:
    MQ_LINES = [_fh.readline().rstrip(b"\n") for _ in range(400)]  # about 20 queries


def _choice_csv() -> bytes:
    from ctxrank.data.synth_choice import make_choice_sessions

    table = make_choice_sessions(30, min_items=2, max_items=6, seed=0).table
    return table.to_csv(index=False).encode()


CHOICE_LINES = _choice_csv().rstrip(b"\n").split(b"\n")  # header + one line per itinerary
TABLE_ROLES = dict(query="session", label="chosen", categorical=["airline", "cabin"])

BOM = b"\xef\xbb\xbf"
F32_MAX = float(np.finfo(np.float32).max)
NUMBER = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
INTEGER = re.compile(rb"[+-]?[0-9]+")
DOCID = re.compile(rb"docid[^\S\n]*=[^\S\n]*(\S+)")  # '#docid = X', within the line

MILLION = 10**6
NASTY = [
    b"1e308", b"1e309", b"-1e400", b"1e400", b"1e-400", b"4.9e-324", b"3.4028235e38", b"3.5e38",
    b"-3.4e38", b"1" * MILLION, b"9" * 5000, b"a" * MILLION, b"nan", b"NaN", b"-nan", b"inf", b"-inf",
    b"Infinity", b"NULL", b"null", b"", b"-", b".", b"e", b"1e", b"+", b"1.5", b"+1", b"-1", b"0", b"00",
    b"1e0", b"1.0", b"01", b".5", b"5.", b"+.5e-3", "١".encode(), "²".encode(), b"1_0", b"0x1F", b"True",
    b"high", "é".encode(), b"1:2", b"qid:3", b"\x00", b"\xff\xfe", "1\u00a02".encode(), b"1\x1c2",
]  # fmt: skip
NASTY_INDEX = [b"0", b"-3", b"47", b"61", b"99999999999", b"10000001", b"1.5", b"+1", b"1e0", b"01", b"007",
               "²".encode(), b"9" * 5000, b"qid", b"NULL", b""]  # fmt: skip


# ------------------------------------------------------------------------------------- helpers
def _check_same(outcomes):
    """The three reads (no cache, cache write, cache read) must agree."""
    first = outcomes[0]
    for other in outcomes[1:]:
        if isinstance(first, Exception) or isinstance(other, Exception):
            assert type(first) is type(other) and str(first) == str(other), (first, other)
            continue
        for name in ("features", "labels", "query_ids", "query_offsets"):
            np.testing.assert_array_equal(getattr(first, name), getattr(other, name), err_msg=name)
        assert (first.docids is None) == (other.docids is None)
        if first.docids is not None:
            np.testing.assert_array_equal(first.docids, other.docids)
        assert first.info == other.info and first.feature_names == other.feature_names
    return first


def _read_three_ways(read, cache_dir: Path):
    """Run ``read(cache, cache_dir)`` three ways; only ValueError may come out of the reader."""
    outcomes = []
    with warnings.catch_warnings(record=True) as caught, time_limit(HANG_SECONDS):
        warnings.simplefilter("always")
        for cache in (False, True, True):
            try:
                outcomes.append(read(cache, cache_dir))
            except ValueError as exc:
                outcomes.append(exc)
    assert not [w for w in caught if "cache" in str(w.message)], [str(w.message) for w in caught]
    return _check_same(outcomes)


def _assert_error(outcome, err: Err):
    """``outcome`` is a ValueError naming the file and line of one of the oracle's faults (a line of
    None: the file alone)."""
    assert isinstance(outcome, ValueError), f"loaded, but the oracle expected an error at {err.options}"
    msg = str(outcome)
    prefixes = [f"{file}:{line}: " if line is not None else f"{file}: " for file, line in err.options]
    assert msg.startswith(tuple(prefixes)), f"expected a message starting {prefixes}, got {msg[:300]!r}"
    assert len(msg) < 2000, f"a {len(msg)}-character message"


def _number(tok: bytes) -> float | None:
    """The value of a number token, None when it is not one (ASCII decimal, finite in float32)."""
    if not NUMBER.fullmatch(tok):
        return None
    value = float(tok)
    return value if abs(value) <= F32_MAX else None


def _canonical_qid(q: bytes) -> str:
    if INTEGER.fullmatch(q):
        sign, digits = (q[:1], q[1:]) if q[:1] in b"+-" else (b"", q)
        digits = digits.lstrip(b"0") or b"0"
        return ("-" if sign == b"-" and digits != b"0" else "") + digits.decode()
    return q.decode()


# --------------------------------------------------------------------------------- LETOR oracle
class Err(Exception):
    """The oracle's verdict: an error naming ``file`` and ``line`` (None: the file alone); ``options``:
    several faults, any one of which the reader may report first."""

    def __init__(self, file: str, line, options: list | None = None):
        super().__init__(f"{file}:{line}")
        self.file, self.line, self.options = file, line, options or [(file, line)]


def oracle_letor(
    raw: bytes | None,
    *,
    name: str,
    n_features: int | None,
    regroup: bool,
    null_fill,
    group: bytes | None,
    group_name: str,
) -> dict:
    """What read_letor must return for the (decompressed) bytes ``raw``, or raise Err(file, line).

    Written from docs/data.md, independently of the reader: lines ``label qid:Q idx:val ... # c``,
    ASCII whitespace between tokens, ASCII decimal numbers that are finite in float32, 1-based integer
    indices up to ``n_features`` (or the 10^7 limit), each once per line, ``NULL`` values filled with
    the query minimum (absent features count as 0), blank and comment-only lines skipped.
    """
    if raw is None:
        raise Err(name, None)  # unreadable gzip stream
    if raw.startswith(BOM):
        raw = raw[3:]
    limit = n_features or letor.MAX_FEATURE_INDEX
    rows = []
    has_qid = None
    for line_no, line in enumerate(raw.split(b"\n"), start=1):
        body, hash_mark, comment = line.partition(b"#")
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            raise Err(name, line_no) from None
        tokens = body.split()  # ASCII whitespace
        if not tokens:
            continue
        if b"\x00" in body:  # a binary file
            raise Err(name, line_no)
        label = _number(tokens[0])
        if label is None:
            raise Err(name, line_no)
        rest = tokens[1:]
        line_qid = bool(rest) and rest[0].startswith(b"qid:")
        if has_qid is None:
            has_qid = line_qid
        if has_qid != line_qid:
            raise Err(name, line_no)
        qid = None
        if has_qid:
            if len(rest[0]) == 4:
                raise Err(name, line_no)
            qid, rest = _canonical_qid(rest[0][4:]), rest[1:]
        feats = {}
        for tok in rest:
            idx, colon, val = tok.partition(b":")
            if not colon or not re.fullmatch(rb"[0-9]+", idx) or len(idx.lstrip(b"0")) > 9:
                raise Err(name, line_no)
            k = int(idx)
            if not 1 <= k <= limit or k in feats:
                raise Err(name, line_no)
            value = None if val == b"NULL" else _number(val)
            if value is None and val != b"NULL":
                raise Err(name, line_no)
            feats[k] = value
        m = DOCID.search(comment) if hash_mark else None
        docid = m.group(1).decode("utf-8", "replace") if m else None
        rows.append((line_no, label, qid, feats, docid))
    if not rows:
        raise Err(name, None)  # empty file

    if has_qid:
        runs = []  # [qid, [row positions]]
        for i, row in enumerate(rows):
            if runs and runs[-1][0] == row[2]:
                runs[-1][1].append(i)
            else:
                runs.append([row[2], [i]])
        seen: dict[str, list] = {}
        for qid, members in runs:
            if qid in seen:
                if not regroup:
                    raise Err(name, rows[members[0]][0])
                seen[qid].extend(members)
            else:
                seen[qid] = list(members)
        query_ids = list(seen)
        groups = list(seen.values())
    else:
        if group is None:
            raise Err(name, rows[0][0])
        sizes = oracle_group_sizes(group, group_name)
        if sum(sizes) != len(rows):
            raise Err(group_name, None)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        groups = [list(range(a, b)) for a, b in itertools.pairwise(bounds)]
        query_ids = [str(i) for i in range(len(sizes))]

    order = [i for g in groups for i in g]
    width = max([n_features or 0] + [k for r in rows for k in r[3]])
    features = np.zeros((len(rows), width), dtype=np.float32)
    null_filled = 0
    out_row = 0
    for g in groups:
        block = np.zeros((len(g), width), dtype=np.float32)
        nulls = []
        for j, i in enumerate(g):
            for k, v in rows[i][3].items():
                if v is None:
                    nulls.append((j, k - 1))
                    block[j, k - 1] = np.nan
                else:
                    block[j, k - 1] = np.float32(v)
        for j, c in nulls:
            if null_fill in ("query_min", "letor_min"):
                column = block[:, c][~np.isnan(block[:, c])]
                fill = column.min() if column.size else 0.0
                block[j, c] = min(fill, 0.0) if null_fill == "letor_min" else fill
            else:
                block[j, c] = np.float32(null_fill)
            null_filled += 1
        features[out_row : out_row + len(g)] = block
        out_row += len(g)
    docids = [rows[i][4] for i in order]
    return {
        "features": features,
        "labels": np.array([rows[i][1] for i in order], dtype=np.float32),
        "query_ids": query_ids,
        "query_offsets": np.concatenate([[0], np.cumsum([len(g) for g in groups])]),
        "docids": None if None in docids else docids,
        "null_filled": null_filled,
    }


def oracle_group_sizes(data: bytes, name: str) -> list[int]:
    """Group sizes: one positive ASCII integer per line (blank lines skipped), at most 18 digits."""
    if data.startswith(BOM):
        data = data[3:]
    sizes = []
    for line_no, line in enumerate(data.split(b"\n"), start=1):
        text = line.strip()
        if not text:
            continue
        if not re.fullmatch(rb"[0-9]+", text) or len(text.lstrip(b"0")) > 18 or int(text) < 1:
            raise Err(name, line_no)
        sizes.append(int(text))
    if not sizes:
        raise Err(name, None)
    return sizes


def _check_letor(outcome, expected: dict):
    assert not isinstance(outcome, Exception), f"the oracle expected a load, got {outcome!r}"
    d = outcome
    np.testing.assert_array_equal(d.labels, expected["labels"])
    assert d.query_ids.tolist() == expected["query_ids"]
    np.testing.assert_array_equal(d.query_offsets, expected["query_offsets"])
    assert d.features.shape == expected["features"].shape
    np.testing.assert_array_equal(d.features, expected["features"])
    assert not np.isnan(d.features).any()
    assert d.info["null_filled"] == expected["null_filled"]
    if expected["docids"] is None:
        assert d.docids is None
    else:
        assert d.docids is not None and d.docids.tolist() == expected["docids"]


# ------------------------------------------------------------------------- LETOR mutations
def _pick(draw, lines):
    return draw(st.integers(0, len(lines) - 1))


def _tokens(line: bytes) -> list[bytes]:
    return line.split(b" ")


def m_truncate_line(draw, lines):
    i = _pick(draw, lines)
    lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]


def m_garbage(draw, lines):
    i = _pick(draw, lines)
    at = draw(st.integers(0, len(lines[i])))
    lines[i] = lines[i][:at] + draw(st.binary(min_size=1, max_size=8)) + lines[i][at:]


def m_flip(draw, lines):
    i = _pick(draw, lines)
    if lines[i]:
        at = draw(st.integers(0, len(lines[i]) - 1))
        b = lines[i][at] ^ draw(st.integers(1, 255))
        lines[i] = lines[i][:at] + bytes([b]) + lines[i][at + 1 :]


def m_token(draw, lines):
    """Replace one token (label, qid, a feature, a comment word) with a nasty one."""
    i = _pick(draw, lines)
    toks = _tokens(lines[i])
    j = draw(st.integers(0, len(toks) - 1))
    toks[j] = draw(st.sampled_from(NASTY))
    lines[i] = b" ".join(toks)


def m_label(draw, lines):
    i = _pick(draw, lines)
    toks = _tokens(lines[i])
    toks[0] = draw(st.sampled_from(NASTY))
    lines[i] = b" ".join(toks)


def _feature_positions(toks):
    return [
        j for j, t in enumerate(toks) if b":" in t and not t.startswith(b"qid:") and j > 1 and b"#" not in t
    ]


def _rewrite_feature(draw, lines, rewrite):
    """Replace one feature token ``index:value`` of a random line by ``rewrite(draw, index, value)``."""
    i = _pick(draw, lines)
    toks = _tokens(lines[i])
    pos = _feature_positions(toks)[:46]
    if pos:
        j = draw(st.sampled_from(pos))
        index, value = toks[j].split(b":", 1)
        toks[j] = rewrite(draw, index, value)
        lines[i] = b" ".join(toks)


def m_value(draw, lines):
    _rewrite_feature(draw, lines, lambda draw, k, _: k + b":" + draw(st.sampled_from(NASTY)))


def m_index(draw, lines):
    _rewrite_feature(draw, lines, lambda draw, _, value: draw(st.sampled_from(NASTY_INDEX)) + b":" + value)


def m_duplicate_feature(draw, lines):
    i = _pick(draw, lines)
    toks = _tokens(lines[i])
    pos = _feature_positions(toks)[:46]
    if pos:
        toks.insert(draw(st.sampled_from(pos)), toks[draw(st.sampled_from(pos))])
        lines[i] = b" ".join(toks)


def m_qid(draw, lines):
    """Another line's query id (non-contiguous groups), an empty or odd one, or none at all."""
    i = _pick(draw, lines)
    toks = _tokens(lines[i])
    if len(toks) > 1:
        other = _tokens(lines[_pick(draw, lines)])
        choice = draw(st.sampled_from(["other", "empty", "odd", "drop", "spelling"]))
        if choice == "drop":
            del toks[1]
        elif choice == "other" and len(other) > 1:
            toks[1] = other[1]
        elif choice == "spelling":  # the same number written otherwise: '+Q', '0Q' are Q; 'Q.0' is not
            q = toks[1][4:]
            toks[1] = b"qid:" + draw(st.sampled_from([b"+" + q, b"0" + q, b"-0" + q, q + b".0", q + b"e0"]))
        else:
            toks[1] = b"qid:" + (b"" if choice == "empty" else draw(st.sampled_from(NASTY)))
        lines[i] = b" ".join(toks)


def m_index_spelling(draw, lines):
    """A feature index written otherwise: '0k' is k; '+k', 'k.0', 'ke0', 'k.' are not indices."""

    def spell(draw, k, value):
        return (
            draw(st.sampled_from([b"0" + k, b"+" + k, k + b".0", k + b"e0", k + b".", k + b"E0"]))
            + b":"
            + value
        )

    _rewrite_feature(draw, lines, spell)


def m_huge(draw, lines):
    """A 10^6-character token: a comment (valid), a value, an index, a label or garbage."""
    i = _pick(draw, lines)
    toks = _tokens(lines[i])
    pos = _feature_positions(toks)[:46] or [0]
    j = draw(st.sampled_from(pos))
    kind = draw(st.sampled_from(["comment", "comment", "value", "index", "label", "garbage"]))
    if kind == "comment":
        lines[i] += b" #" + b"x" * MILLION
    elif kind == "value" and j > 0:
        toks[j] = toks[j].split(b":")[0] + b":" + b"1" * MILLION
    elif kind == "index" and j > 0:
        toks[j] = b"1" * MILLION + b":1"
    elif kind == "label":
        toks[0] = b"2" * MILLION
    else:
        toks[j] = b"a" * MILLION
    if kind != "comment":
        lines[i] = b" ".join(toks)


def m_cut_comment(draw, lines):
    """Cut a line inside its '#docid = ...' comment, often just after 'docid', '=' or '= '."""
    i = _pick(draw, lines)
    at = lines[i].find(b"#")
    if at >= 0:
        lines[i] = lines[i][: at + draw(st.sampled_from([6, 7, 8, 9]) | st.integers(0, 30))]


def m_move_line(draw, lines):
    i, j = _pick(draw, lines), _pick(draw, lines)
    lines.insert(j, lines.pop(i))


def m_blank_lines(draw, lines):
    extra = draw(st.sampled_from([b"", b"   ", b"\t", b"# a comment", b"  #docid = X", b"\r", b"\x0c"]))
    lines.insert(draw(st.integers(0, len(lines))), extra)


def m_empty_group(draw, lines):
    """Every line of one query becomes a comment: the query is gone (not an empty group)."""
    qid = _tokens(lines[_pick(draw, lines)])[1:2]
    for i, line in enumerate(lines):
        if _tokens(line)[1:2] == qid:
            lines[i] = b"#" + line


def m_null(draw, lines):
    for _ in range(draw(st.integers(1, 4))):
        _rewrite_feature(draw, lines, lambda _draw, k, _value: k + b":NULL")


def m_unicode(draw, lines):
    i = _pick(draw, lines)
    at = draw(st.integers(0, len(lines[i])))
    char = draw(st.sampled_from(["é", "\u00a0", "\u2003", "\u0085", "\ufeff", "\u2028", "١"]))
    lines[i] = lines[i][:at] + char.encode() + lines[i][at:]


LETOR_MUTATIONS = [
    m_truncate_line, m_garbage, m_flip, m_token, m_label, m_value, m_index, m_index_spelling,
    m_duplicate_feature, m_qid, m_move_line, m_blank_lines, m_empty_group, m_null, m_unicode, m_huge,
    m_cut_comment,
]  # fmt: skip


def _file_level(draw, text: bytes) -> bytes:
    """Line endings, BOM, encodings, truncation at any byte."""
    ending = draw(st.sampled_from([b"\n"] * 6 + [b"\r\n", b"\r\n", b"\r"]))
    if ending != b"\n":
        text = text.replace(b"\n", ending)
    if draw(st.integers(0, 4)) == 0:
        text = BOM + text
    encoding = draw(st.sampled_from(["utf-8"] * 10 + ["latin-1", "utf-16"]))
    if encoding != "utf-8":
        text = text.decode("utf-8", "replace").encode(encoding, "replace")
    if draw(st.integers(0, 3)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


@st.composite
def letor_files(draw):
    start = draw(st.integers(0, len(MQ_LINES) - 1))
    lines = MQ_LINES[start : start + draw(st.integers(1, 30))]
    for _ in range(draw(st.sampled_from([0, 1, 1, 2, 3]))):
        draw(st.sampled_from(LETOR_MUTATIONS))(draw, lines)
    text = b"\n".join(lines) + (b"\n" if draw(st.integers(0, 5)) else b"")
    return _file_level(draw, text)


def _compress(draw, raw: bytes) -> tuple[bytes, bytes | None]:
    """(file bytes, decompressed content or None when the damaged stream cannot be read)."""
    data = gzip.compress(raw, mtime=0)
    damage = draw(st.sampled_from(["none", "none", "truncate", "flip"]))
    if damage == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "flip":
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    if not data.startswith(b"\x1f\x8b"):
        return data, data
    try:
        return data, gzip.decompress(data)
    except Exception:  # BadGzipFile, EOFError, zlib.error, ...: the reader must name the file
        return data, None


def _chunk_sizes(raw: bytes):
    """Read sizes: tiny ones split the BOM and every line; 16 bytes against a 10^6-byte line (62,500
    reads) shows a read loop that is not linear."""
    small = [1, 2, 3, 7] if len(raw) < 30_000 else [16, 16]
    return st.sampled_from([*small, 64, 500, 4096, letor.DEFAULT_CHUNK_BYTES])


# ---------------------------------------------------------------------------------- LETOR tests
@FUZZ
@given(data=st.data())
def test_fuzz_read_letor(data):
    raw = data.draw(letor_files())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        gz = data.draw(st.integers(0, 4)) == 0
        path = tmp / ("f.txt.gz" if gz else "f.txt")
        content = raw
        if gz:
            file_bytes, content = _compress(data.draw, raw)
        else:
            file_bytes = raw
        path.write_bytes(file_bytes)
        opts = dict(
            n_features=data.draw(st.sampled_from([None, None, 46, 60])),
            regroup=data.draw(st.booleans()),
            null_fill=data.draw(st.sampled_from(["query_min", "letor_min", 0.5])),
            chunk_bytes=data.draw(_chunk_sizes(raw)),
        )
        outcome = _read_three_ways(lambda c, d: read_letor(path, cache=c, cache_dir=d, **opts), tmp / "cache")
        kw = {k: opts[k] for k in ("n_features", "regroup", "null_fill")}
        try:
            expected = oracle_letor(content, name=str(path), group=None, group_name="", **kw)
        except Err as err:
            event("error expected")
            _assert_error(outcome, err)
            return
        event("load expected")
        _check_letor(outcome, expected)


def _group_file_mutation(draw, sizes: list[int]) -> bytes:
    lines = [str(s).encode() for s in sizes]
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(
            st.sampled_from(["off", "split", "merge", "nasty", "garbage", "blank", "zero", "flip", "extra"])
        )
        i = draw(st.integers(0, len(lines) - 1))
        if len(lines[i]) > 18 or (i + 1 < len(lines) and len(lines[i + 1]) > 18):
            kind = "blank"  # no arithmetic on 10^6-digit sizes
        if kind == "off":
            lines[i] = (
                str(int(lines[i]) + draw(st.sampled_from([-1, 1]))).encode() if lines[i].isdigit() else b"1"
            )
        elif kind == "split" and lines[i].isdigit() and int(lines[i]) > 1:
            a = draw(st.integers(1, int(lines[i]) - 1))
            lines[i : i + 1] = [str(a).encode(), str(int(lines[i]) - a).encode()]
        elif kind == "merge" and i + 1 < len(lines) and lines[i].isdigit() and lines[i + 1].isdigit():
            lines[i : i + 2] = [str(int(lines[i]) + int(lines[i + 1])).encode()]
        elif kind == "nasty":
            lines[i] = draw(
                st.sampled_from([b"9" * MILLION, b"9" * 19, b"99999999999999999999", b"9223372036854775807",
                                 b"-2", b"+3", b"2.0", b"1e3", b"2 1", b"0x2", "²".encode(), b"", b" 3 "])
            )  # fmt: skip
        elif kind == "garbage":
            lines[i] += draw(st.binary(min_size=1, max_size=4))
        elif kind == "blank":
            lines.insert(i, draw(st.sampled_from([b"", b"  ", b"\t"])))
        elif kind == "zero":
            lines.insert(i, b"0")
        elif kind == "flip" and lines[i]:
            lines[i] = bytes([lines[i][0] ^ draw(st.integers(1, 255))]) + lines[i][1:]
        elif kind == "extra":
            lines.append(b"1")
    text = b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")
    return _file_level(draw, text)


@FUZZ
@given(data=st.data())
def test_fuzz_group_files(data):
    """Files without qid: plus a .query / .group file (LightGBM / XGBoost), both damaged."""
    start = data.draw(st.integers(0, len(MQ_LINES) - 1))
    lines = MQ_LINES[start : start + data.draw(st.integers(1, 40))]
    qids = [line.split(b" ")[1] for line in lines]
    sizes = [len(list(g)) for _, g in itertools.groupby(qids)]
    lines = [re.sub(rb" qid:\S+", b"", line) for line in lines]
    for _ in range(data.draw(st.integers(0, 1))):
        data.draw(st.sampled_from([m_truncate_line, m_garbage, m_blank_lines, m_value, m_move_line]))(
            data.draw, lines
        )
    raw = b"\n".join(lines) + b"\n"
    group = _group_file_mutation(data.draw, sizes)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = tmp / "train.txt"
        path.write_bytes(raw)
        how = data.draw(st.sampled_from([".query", ".group", "explicit"]))
        gpath = tmp / ("sizes.txt" if how == "explicit" else "train.txt" + how)
        gpath.write_bytes(group)
        query_file = gpath if how == "explicit" else None

        def read(cache, cache_dir):
            return read_letor(path, query_file=query_file, cache=cache, cache_dir=cache_dir)

        outcome = _read_three_ways(read, tmp / "cache")
        try:
            expected = oracle_letor(
                raw, name=str(path), n_features=None, regroup=False, null_fill="query_min",
                group=group, group_name=str(gpath),
            )  # fmt: skip
        except Err as err:
            event("error expected")
            _assert_error(outcome, err)
            return
        event("load expected")
        _check_letor(outcome, expected)
        # the group reader alone
        try:
            want = oracle_group_sizes(group, str(gpath))
        except Err as err:
            with pytest.raises(ValueError) as info:
                read_group_sizes(gpath)
            _assert_error(info.value, err)
        else:
            assert read_group_sizes(gpath).tolist() == want


# --------------------------------------------------------------------------------- table oracle
NA_SPELLINGS = {
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>",
    "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
}  # fmt: skip


class Unsure(Exception):
    """The oracle cannot say what pandas makes of this cell: only the weak checks apply."""


BAD = "bad"  # a cell the reader must reject (not False: 0.0 == False)


def _cell_number(cell: str) -> float | str | None:
    """A numeric cell: its value, None when missing, BAD when it must be rejected."""
    if cell in NA_SPELLINGS:
        return None
    b = cell.encode("utf-8", "surrogateescape")
    if NUMBER.fullmatch(b):
        value = float(b)
        return value if abs(value) <= F32_MAX else BAD
    if cell != cell.strip() or cell.lower() in ("true", "false"):
        raise Unsure(cell)
    return BAD


def oracle_table(raw: bytes, *, name: str, sep: str, regroup: bool) -> dict:
    """What read_table_with_rows must return, from the csv module and docs/data.md; raises Err(file,
    line) for a structural fault (several: any may come first), Err(file, ("row", N, column)) for a
    cell fault (only looked for when the file's structure is sound)."""
    faults = []  # (file, line or None)
    body = raw[3:] if raw.startswith(BOM) else raw
    for line_no, line in enumerate(body.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            faults.append((name, line_no))
            break
    text = body.decode("utf-8", "replace")
    csv.field_size_limit(1 << 30)
    if '"' in text or "\x00" in text:
        raise Unsure("quotes / NUL: pandas' and the csv module's tokenizers may differ")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    records = []
    start = 1
    for rec in reader:
        if rec and not (len(rec) == 1 and not rec[0].strip(" \t")):
            records.append((start, rec))
        start = reader.line_num + 1
    if re.search(r"(^|[\r\n])[ \t]*\r" + re.escape(sep), text):
        # pandas drops the leading empty field of a row after a blank line ending in a lone CR; the
        # reader reports it where the row's missing cells move, not where it gains a field
        raise Unsure("a row starting with an empty field after a blank line ending in CR")
    if len(records) > 1 and not "".join(records[-1][1]).strip(" \t"):
        raise Unsure("a last line of tabs / spaces: pandas drops it after a CR blank line, else reads it")
    if not records:
        raise Err(name, None, [*faults, (name, None)])  # empty file
    header = records[0][1]
    cols = [c if c else f"Unnamed: {j}" for j, c in enumerate(header)]
    roles = [TABLE_ROLES["query"], TABLE_ROLES["label"], *TABLE_ROLES["categorical"]]
    named = [c for c in header if c]
    if len(set(named)) != len(named):
        faults.append((name, None))  # repeated names
    wrong = [line_no for line_no, rec in records[1:] if len(rec) != len(header)]
    if wrong:
        faults.append((name, wrong[0]))
    if any(r not in cols for r in roles) or len(records) == 1:
        faults.append((name, None))  # absent column, no data rows
    if faults:
        raise Err(*faults[0], faults)
    rows = [rec for _, rec in records[1:]]
    col = {c: j for j, c in enumerate(cols)}

    def bad(r, c):
        return Err(name, ("row", r + 1, c))

    q = [row[col["session"]] for row in rows]
    if "" in q:
        raise bad(q.index(""), "session")
    labels = [_cell_number(row[col["chosen"]]) for row in rows]
    if BAD in labels:
        raise bad(labels.index(BAD), "chosen")
    if None in labels:
        raise bad(labels.index(None), "chosen")
    numeric = [c for c in cols if c not in roles]
    x = np.zeros((len(rows), len(numeric)), dtype=np.float32)
    for j, c in enumerate(numeric):
        values = [_cell_number(row[col[c]]) for row in rows]
        if BAD in values:
            raise bad(values.index(BAD), c)
        x[:, j] = [0.0 if v is None else v for v in values]
    first = {}
    for i, qid in enumerate(q):
        first.setdefault(qid, i)
    order = sorted(range(len(rows)), key=lambda i: first[q[i]])
    if order != list(range(len(rows))) and not regroup:
        again = next(i for i in range(1, len(rows)) if first[q[i]] < first[q[i - 1]])
        raise bad(again, None)  # a reappearing query id, named by its rows
    cats = {c: [row[col[c]] or None for row in rows] for c in TABLE_ROLES["categorical"]}
    return {
        "file_rows": order,
        "features": x[order],
        "labels": np.array([labels[i] for i in order], dtype=np.float32),
        "query_ids": list(first),
        "feature_names": tuple(numeric),
        "categories": {c: [v[i] for i in order] for c, v in cats.items()},
    }


def _table_mutation(draw, lines: list[bytes], sep: bytes):
    kind = draw(
        st.sampled_from(
            ["truncate", "garbage", "flip", "cell", "cell", "drop_cell", "add_cell", "empty_query",
             "move", "blank", "dup_header", "unicode"]
        )
    )  # fmt: skip
    i = _pick(draw, lines)
    cells = lines[i].split(sep)
    if kind == "truncate":
        m_truncate_line(draw, lines)
    elif kind == "garbage":
        m_garbage(draw, lines)
    elif kind == "flip":
        m_flip(draw, lines)
    elif kind == "cell":
        j = draw(st.integers(0, len(cells) - 1))
        cells[j] = draw(st.sampled_from([*NASTY, b"NA", b"N/A", b"None", b"  ", b" 1.5 ", b"TRUE"]))
        lines[i] = sep.join(cells)
    elif kind == "drop_cell" and len(cells) > 1:
        del cells[draw(st.integers(0, len(cells) - 1))]
        lines[i] = sep.join(cells)
    elif kind == "add_cell":
        cells.insert(draw(st.integers(0, len(cells))), draw(st.sampled_from([b"", b"1", b"x"])))
        lines[i] = sep.join(cells)
    elif kind == "empty_query" and i > 0:
        cells[0] = b""
        lines[i] = sep.join(cells)
    elif kind == "move" and len(lines) > 2:
        lines.insert(draw(st.integers(1, len(lines) - 1)), lines.pop(draw(st.integers(1, len(lines) - 1))))
    elif kind == "blank":
        lines.insert(draw(st.integers(1, len(lines))), draw(st.sampled_from([b"", b"  ", b"\t", b"\r"])))
    elif kind == "dup_header":
        header = lines[0].split(sep)
        j, k = draw(st.integers(0, len(header) - 1)), draw(st.integers(0, len(header) - 1))
        header[j] = header[k]
        lines[0] = sep.join(header)
    elif kind == "unicode":
        m_unicode(draw, lines)


@FUZZ
@given(data=st.data())
def test_fuzz_read_table(data):
    fmt = data.draw(st.sampled_from([".csv", ".csv", ".tsv", ".csv.gz"]))
    sep = b"\t" if fmt == ".tsv" else b","
    start = data.draw(st.integers(1, len(CHOICE_LINES) - 1))
    body = CHOICE_LINES[start : start + data.draw(st.integers(1, 60))]
    lines = [line.replace(b",", sep) for line in [CHOICE_LINES[0], *body]]
    for _ in range(data.draw(st.integers(0, 3))):
        _table_mutation(data.draw, lines, sep)
    raw = _file_level(data.draw, b"\n".join(lines) + (b"\n" if data.draw(st.integers(0, 5)) else b""))
    regroup = data.draw(st.booleans())
    note(f"file ({len(raw)} bytes): {raw[:3000]!r}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("t" + fmt)
        path.write_bytes(gzip.compress(raw, mtime=0) if fmt.endswith(".gz") else raw)

        outcomes = []  # read_table has no parse cache: two reads must simply agree
        with time_limit(HANG_SECONDS):
            for _ in range(2):
                try:
                    outcomes.append(read_table_with_rows(path, **TABLE_ROLES, regroup=regroup))
                except ValueError as exc:
                    outcomes.append(exc)
        outcome = outcomes[0]
        if isinstance(outcome, Exception):
            assert str(outcome) == str(outcomes[1])
        try:
            expected = oracle_table(raw, name=str(path), sep=sep.decode(), regroup=regroup)
        except Unsure:
            event("oracle unsure (weak check)")
            _weak_table_check(outcome, path, raw)
            return
        except Err as err:
            event("cell error expected" if isinstance(err.line, tuple) else "structural error expected")
            if isinstance(err.line, tuple):
                _, row, column = err.line
                assert isinstance(outcome, ValueError), (
                    f"loaded; expected an error at data row {row} {column}"
                )
                msg = str(outcome)
                assert msg.startswith(f"{path}: data row {row}: "), msg[:300]
                shown = column if column is None or len(column) <= 40 else column[:40] + "..."
                assert column is None or repr(shown) in msg, msg[:300]
                assert len(msg) < 2000
            else:
                _assert_error(outcome, err)
            return
        event("load expected")
        assert not isinstance(outcome, Exception), f"the oracle expected a load, got {outcome!r}"
        d, file_rows = outcome
        assert file_rows.tolist() == expected["file_rows"]
        assert d.query_ids.tolist() == expected["query_ids"]
        assert d.feature_names == expected["feature_names"]
        np.testing.assert_array_equal(d.labels, expected["labels"])
        np.testing.assert_array_equal(d.features, expected["features"])
        from ctxrank.data.table import CategoricalEncoder

        enc = CategoricalEncoder.from_dict(d.info["categorical_encoder"])
        decoded = enc.decode(d.categorical)
        for c, values in expected["categories"].items():
            assert decoded[c].tolist() == values, c


def _weak_table_check(outcome, path: Path, raw: bytes):
    """Where the oracle is unsure: a ValueError naming the file (and a line or a data row), or a load
    with finite features and no more rows than the file has lines."""
    if isinstance(outcome, Exception):
        msg = str(outcome)
        assert re.match(rf"{re.escape(str(path))}(:\d+: |: data row \d+: |: )", msg), msg[:300]
        assert len(msg) < 2000
        return
    d, _ = outcome
    assert np.isfinite(d.features).all() and np.isfinite(d.labels).all()
    assert d.n_items <= raw.count(b"\n") + raw.count(b"\r") + 1


# ----------------------------------------------------------------------------------- Parquet
@settings(FUZZ, max_examples=max(10, EXAMPLES // 4))
@given(data=st.data())
def test_fuzz_parquet_bytes(data):
    """Damaged Parquet files: a ValueError naming the file, or a load of finite values."""
    table = pd.read_csv(io.BytesIO(b"\n".join(CHOICE_LINES)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.parquet"
        table.to_parquet(path)
        raw = path.read_bytes()
        if data.draw(st.booleans()):
            raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        else:
            at = data.draw(st.integers(0, len(raw) - 1))
            raw = raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
        path.write_bytes(raw)
        with time_limit(HANG_SECONDS):
            try:
                d, _ = read_table_with_rows(path, **TABLE_ROLES)
            except ValueError as exc:
                assert str(exc).startswith(f"{path}: "), str(exc)[:300]
                return
        assert np.isfinite(d.features).all() and np.isfinite(d.labels).all()


# ------------------------------------------------------------------ regressions the fuzzer found
def _letor(tmp_path, content: bytes, name="f.txt", **kw):
    p = tmp_path / name
    p.write_bytes(content)
    return read_letor(p, cache=False, **kw)


LINE = b"2 qid:7 1:0.5 3:1.5 #docid = A\n0 qid:7 2:0.25 #docid = B\n"


@pytest.mark.parametrize("chunk_bytes", [1, 2, 3, 4, 64])
def test_bom_with_reads_shorter_than_the_bom(tmp_path, chunk_bytes):
    """The BOM was stripped only when the first read held all 3 of its bytes (chunk_bytes < 3 failed
    with "expected a numeric label, got '\\ufeff2'")."""
    d = _letor(tmp_path, BOM + LINE, chunk_bytes=chunk_bytes)
    assert d.labels.tolist() == [2, 0] and d.docids.tolist() == ["A", "B"]


def test_long_line_with_small_reads_is_linear(tmp_path):
    """A line longer than one read was re-concatenated on every read: quadratic in the line length
    (a 4 MB comment read 16 bytes at a time took about 30 s, now 0.2 s)."""
    import time

    t = time.perf_counter()
    d = _letor(
        tmp_path, LINE + b"1 qid:7 1:1 #" + b"x" * (4 << 20) + b"\n", chunk_bytes=16, max_line_bytes=8 << 20
    )
    assert time.perf_counter() - t < 5
    assert d.labels.tolist() == [2, 0, 1]
    with pytest.raises(ValueError, match=r"f\.txt:2: expected 'index:value', got 'aaaa"):
        _letor(
            tmp_path,
            LINE[:30] + b"\n1 qid:7 1:1 " + b"a" * MILLION + b"\n",
            chunk_bytes=64,
            max_line_bytes=2 * MILLION,
        )


@pytest.mark.parametrize("token", [b"1e0:5", b"+1:5", b"1.0:5", b"1.:5"])
def test_index_must_be_digits_on_both_paths(tmp_path, token):
    """The fast path read these as index 1 (pandas parses them as numbers), the careful path rejected
    them: whether a file loaded depended on how it was cut into chunks."""
    text = b"1 qid:1 " + token + b"\n"
    assert letor._parse_chunk_fast(text, 1, None, None) is None
    with pytest.raises(ValueError, match=r"f\.txt:1: feature index must be an integer"):
        _letor(tmp_path, text)


def test_index_check_at_the_end_of_a_chunk():
    """The digit check of the fast path must not read past a short last token (no final newline)."""
    block = letor._parse_chunk_fast(b"1 qid:1 1234567:4 1:5", 1, None, None)
    assert block is not None and block.features[0, 0] == 5 and block.features[0, 1234566] == 4


def test_query_ids_normalized_the_same_on_both_paths(tmp_path):
    """'qid:1e3' and 'qid:1.0' were 1000 and 1 on the fast path, '1e3' and '1.0' on the careful one;
    '+5' stayed '+5' on the careful path next to a non-numeric id, so 'qid:+5' and 'qid:5' lines became
    two queries or one depending on the chunk."""
    d = _letor(tmp_path, b"1 qid:1e3 1:1\n0 qid:1000 1:2\n2 qid:1.0 1:3\n")
    assert d.query_ids.tolist() == ["1e3", "1000", "1.0"]
    d = _letor(tmp_path, b"1 qid:abc 1:1\n1 qid:+5 1:1\n0 qid:5 1:2\n1 qid:-0 1:1\n0 qid:0 1:1\n")
    assert d.query_ids.tolist() == ["abc", "5", "0"]
    assert d.query_offsets.tolist() == [0, 1, 3, 5]
    d = _letor(tmp_path, b"1 qid:+5 1:1\n0 qid:005 1:2\n")  # fast path
    assert d.query_ids.tolist() == ["5"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 qid:1 ²:1\n".encode(), "feature index must be an integer"),
        (b"1 qid:1 " + b"1" * 5000 + b":1\n", r"feature index 1{40}\.\.\. exceeds the limit"),
        ("1 qid:1 1:١\n".encode(), "expected a number for feature 1"),
        (b"1 qid:1 1:1_0\n", r"expected a number for feature 1, got '1_0'"),
        ("1 qid:1 1:1\u00a02:3\n".encode(), "expected a number for feature 1"),
        (b"1 qid:1 1:1\x1c2:3\n", "expected a number for feature 1"),
    ],
)
def test_careful_path_errors_name_the_line(tmp_path, text, message):
    """int() of a non-ASCII digit or of a 5000-digit index raised a bare ValueError without file:line;
    float() took '1_0' and Arabic-Indic digits, str.split() non-ASCII spaces (the fast path and the
    docs do not)."""
    with pytest.raises(ValueError, match=rf"f\.txt:1: {message}"):
        _letor(tmp_path, text)


def test_unicode_digit_and_huge_query_ids_are_strings(tmp_path):
    """int() of these raised a bare ValueError; they are string query ids."""
    d = _letor(tmp_path, "1 qid:² 1:1\n".encode() + b"1 qid:" + b"1" * 5000 + b" 1:1\n")
    assert d.query_ids.tolist() == ["²", "1" * 5000]


def test_docid_does_not_run_into_the_next_line(tmp_path):
    """'#docid =' at the end of a line took the next line's first token as its docid (fast path)."""
    d = _letor(tmp_path, b"2 qid:7 1:0.5 #docid =\n0 qid:7 2:0.25 #docid = B\n")
    assert d.docids is None
    text = b"2 qid:7 1:0.5 #docid =\n0 qid:7 2:0.25 #docid = B\n"
    for block in (
        letor._parse_chunk_fast(text, 1, None, None),
        letor._parse_chunk_careful(text, 1, "x", None, None),
    ):
        assert block.docids == [None, "B"]


def test_file_without_features_can_be_cached(tmp_path):
    """A file whose lines have no features (F = 0) crashed the cache write with TypeError
    (memoryview cannot cast a [N, 0] array)."""
    p = tmp_path / "f.txt"
    p.write_bytes(b"0 qid:1\n1 qid:1\n")
    for _ in range(2):  # parse and store, then load
        d = read_letor(p, cache_dir=tmp_path / "c")
        assert d.features.shape == (2, 0) and d.query_offsets.tolist() == [0, 2]


@pytest.mark.parametrize(
    ("sizes", "error"),
    [
        (b"99999999999999999999\n", r"g\.query:1: expected a positive integer group size"),
        (b"9" * 5000 + b"\n", r"g\.query:1: expected a positive integer group size"),
        (b"9223372036854775807\n9223372036854775807\n", r"g\.query:1: expected a positive integer"),
        (b"999999999999999999\n999999999999999999\n", r"group sizes sum to 1999999999999999998 but"),
        (BOM + b"2\n1\n", None),
    ],
)
def test_group_file_sizes(tmp_path, sizes, error):
    """Huge sizes raised OverflowError or int()'s digit-limit ValueError without file:line, two large
    sizes overflowed int64 ('sum to -2'), and a BOM was rejected."""
    p = tmp_path / "f.txt"
    p.write_bytes(b"1 1:0.5\n0 2:1\n2 1:3\n")
    (tmp_path / "g.query").write_bytes(sizes)
    if error is None:
        assert read_letor(p, query_file=tmp_path / "g.query", cache=False).query_offsets.tolist() == [0, 2, 3]
    else:
        with pytest.raises(ValueError, match=error):
            read_letor(p, query_file=tmp_path / "g.query", cache=False)


def test_chunk_bytes_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="chunk_bytes must be a positive integer"):
        _letor(tmp_path, LINE, chunk_bytes=0)


def _table(tmp_path, content: bytes, name="t.csv", **kw):
    p = tmp_path / name
    p.write_bytes(content)
    return read_table_with_rows(p, query="q", label="y", **kw)[0]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (b"q,y,x,c\n1,0,1.5,a\n1,1,2", r"t\.csv:3: data row 2: 3 fields, but the header has 4"),  # cut
        (b"q,y,x,c\n1,0,1.5,a\n1,1\n\n2,0,3,b\n", r"t\.csv:3: data row 2: 2 fields"),
        (b"q,y,x\n1,0,5,7\n1,1,6,8\n", r"t\.csv:2: data row 1: 4 fields, but the header has 3"),
        (b"q,y,x,c\n1,0,1.5,a,\n1,1,2,b,\n", r"t\.csv:2: data row 1: 5 fields"),
        (b"q,y,x,c\n1,0,1.5,a\n\n1,1,2,b,E\n", r"t\.csv:4: data row 2: 5 fields"),
        (b'q,y,x,c\n1,0,1.5,"a\nb"\n1,1,2,b,E\n', r"t\.csv:4: data row 2: 5 fields"),
        (b'q,y,x,c\n1,0,1.5,a\n\n1,1,2,"b\n2,0,1,c\n', r"t\.csv:4: data row 2: .*unexpected end of data"),
        (b"q,y,x,c\n1,0,1.5,\xe9\n", r"t\.csv:2: not UTF-8 text"),
        (b"q,y\n\xe9x,0,0\n,x,1,0\n", r"t\.csv:2: data row 1: 3 fields, but the header has 2"),  # make fuzz
        ("q,y,x\n1,0,1\n".encode("utf-16"), r"t\.csv:1: not UTF-8 text"),
        (b"q,y,x,x\n1,0,1,2\n", r"t\.csv: repeated column names in the header: \['x'\]"),
    ],
)
def test_table_rows_with_the_wrong_field_count(tmp_path, text, error):
    """A row with fewer fields than the header (a truncated file) loaded silently, its missing cells
    filled; a first row with more fields became pandas' implicit index and shifted every column (the
    third case loaded as q=0, y=5, x=7); tokenizer and decoding errors named no line (or pandas' line,
    which skips quoted newlines, when a byte that is not UTF-8 stopped the recount); pandas renamed a
    repeated header name to 'x.1'."""
    with pytest.raises(ValueError, match=error):
        _table(tmp_path, text)


@pytest.mark.parametrize(
    "text",
    [b"x1,q,y,x2\r\r,7,1,5\r", b"x1,q,y,x2,x3\n\r,7,1,5,\n", b"x1,q,y,x2\r1,7,1,\r  \r,7,1,\r"],
)
def test_table_row_shifted_by_pandas_after_a_cr_blank_line(tmp_path, text):
    """pandas drops the leading empty field of a row that follows a blank line ending in a lone CR:
    the first case loaded as x1=7, q=1, y=5 (instead of x1 missing, q=7, y=1, x2=5). Found by make fuzz."""
    with pytest.raises(ValueError, match=r"t\.csv:\d: data row \d: its fields came out shifted"):
        _table(tmp_path, text)
    d = _table(tmp_path, text.replace(b"\r", b"\n"))  # the same rows with LF endings load
    assert d.query_ids.tolist() == ["7"]


def test_table_empty_cells_are_still_missing_values(tmp_path):
    """The short-row check must not reject empty cells, in the last column or elsewhere."""
    d = _table(tmp_path, b"q,y,x,z\n1,0,,\n1,1,2,\n2,0,3,NA\n")
    nan = np.nan
    np.testing.assert_array_equal(d.features, [[nan, nan], [2, nan], [3, nan]])
    assert d.info["missing"] == 4 and d.info["missing_columns"] == 2


def test_table_messages_stay_short(tmp_path):
    """A 10^6-character name or value went whole into the message (1 MB errors)."""
    with pytest.raises(ValueError) as info:
        _table(tmp_path, b"q,y," + b"a" * MILLION + b"\n1,0,1\n", numeric=["x"])
    assert len(str(info.value)) < 1000
    with pytest.raises(ValueError, match=r"column 'x': expected a number, got '9{40}'$"):
        _table(tmp_path, b"q,y,x\n1,0," + b"9" * MILLION + b"x\n")
    with pytest.raises(ValueError, match=r"column 'b{40}\.\.\.': expected a number, got 'x'$"):  # make fuzz
        _table(tmp_path, b"q,y," + b"b" * MILLION + b"\n1,0,x\n")
    with pytest.raises(ValueError, match=r"data row 1: column 'x': (expected a number|value 'inf')") as info:
        _table(tmp_path, b"q,y,x\n1,0," + b"9" * MILLION + b"\n")
    assert len(str(info.value)) < 1000


# ----------------------------------------------------------------------------- NaN / inf rule
@pytest.mark.parametrize(
    "token", ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400", "-1e400", "1e39"]
)
def test_letor_nan_or_inf_feature_is_a_load_error(tmp_path, token):
    """NaN / inf / beyond-float32 values never load (they would surface as NaN weights later)."""
    for line in (f"1 qid:1 1:{token}\n", f"{token} qid:1 1:1\n"):
        with pytest.raises(ValueError, match=r"f\.txt:2: expected .*(non-finite|got)"):
            _letor(tmp_path, ("0 qid:1 1:1\n" + line).encode())


def test_letor_null_is_the_one_missing_value(tmp_path):
    d = _letor(tmp_path, b"1 qid:1 1:NULL 2:3\n0 qid:1 1:2 2:NULL\n")
    np.testing.assert_array_equal(d.features, [[2, 3], [2, 3]])
    assert d.info["null_filled"] == 2


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_table_nan_is_missing_and_inf_is_an_error(tmp_path, fmt):
    """Tables: NaN (the CSV NA spellings, a Parquet NaN or null) is a missing value, filled by
    null_fill and counted; inf and values beyond float32 are errors naming the row and the column."""
    frame = pd.DataFrame({"q": ["a", "a", "b"], "y": [1.0, 0.0, 2.0], "x": [1.5, np.nan, 2.0]})
    path = tmp_path / f"t.{fmt}"
    (frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path))
    d, _ = read_table_with_rows(path, query="q", label="y", null_fill=-1.0)
    np.testing.assert_array_equal(d.features[:, 0], [1.5, -1.0, 2.0])
    assert d.info["null_filled"] == 1
    for bad in (np.inf, -np.inf, 1e39):
        frame["x"] = [1.5, bad, 2.0]
        (frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path))
        with pytest.raises(ValueError, match=rf"t\.{fmt}: data row 2: column 'x': value .* not a finite"):
            read_table_with_rows(path, query="q", label="y")
    frame["x"] = [1.5, 1.0, 2.0]
    frame["y"] = [1.0, np.nan, 2.0]
    (frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path))
    with pytest.raises(ValueError, match=rf"t\.{fmt}: data row 2: missing label in column 'y'"):
        read_table_with_rows(path, query="q", label="y")
