"""read_letor: values, conventions, every error naming file:line, fast path == careful path, cache."""

import gzip
import re
import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrank.data import letor
from ctxrank.data.cache import default_cache_dir
from ctxrank.data.letor import read_group_sizes, read_letor
from tests.conftest import REPO, SHARED_DATA

MQ2008 = REPO / "src" / "ctxrank" / "datasets" / "mq2008"

TINY = """\
2 qid:10 1:0.5 2:1.5 3:-1 #docid = A inc = 1
0 qid:10 1:0.25 3:2 #docid = B
1 qid:7 2:3e-2 #docid = C
"""


def write(tmp_path, text, name="f.txt", mode="w"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def test_tiny_file_values(tmp_path):
    d = read_letor(write(tmp_path, TINY), cache=False)
    np.testing.assert_array_equal(
        d.features, np.array([[0.5, 1.5, -1], [0.25, 0, 2], [0, 0.03, 0]], dtype=np.float32)
    )
    np.testing.assert_array_equal(d.labels, [2, 0, 1])
    assert d.query_ids.tolist() == ["10", "7"]
    assert d.query_offsets.tolist() == [0, 2, 3]
    assert d.docids.tolist() == ["A", "B", "C"]
    assert d.feature_names == ("f1", "f2", "f3")
    assert d.features.dtype == np.float32 and d.labels.dtype == np.float32


def test_gzip_bom_crlf_blank_and_comment_lines(tmp_path):
    text = "\ufeff" + "# header comment\n\n" + TINY.replace("\n", "\r\n") + "   \n"
    p = tmp_path / "f.txt.gz"
    with gzip.open(p, "wb") as fh:
        fh.write(text.encode("utf-8"))
    d = read_letor(p, cache=False)
    ref = read_letor(write(tmp_path, TINY), cache=False)
    np.testing.assert_array_equal(d.features, ref.features)
    assert d.docids.tolist() == ["A", "B", "C"]


def test_n_features_pads_and_limits(tmp_path):
    p = write(tmp_path, TINY)
    assert read_letor(p, n_features=5, cache=False).features.shape == (3, 5)
    with pytest.raises(ValueError, match=r"f\.txt:1: feature index 3 exceeds the limit of 2"):
        read_letor(p, n_features=2, cache=False)


def test_docids_none_when_some_lines_lack_them(tmp_path):
    d = read_letor(write(tmp_path, "1 qid:1 1:1 #docid = a\n0 qid:1 1:2\n"), cache=False)
    assert d.docids is None


# ------------------------------------------------------------------------------------ NULL tokens
NULLS = "2 qid:1 1:NULL 2:5\n1 qid:1 1:3 2:NULL\n0 qid:1 1:4 2:7\n1 qid:2 1:NULL 2:1\n"


def test_null_query_min_fill(tmp_path):
    d = read_letor(write(tmp_path, NULLS), cache=False)
    # query 1: feature 1 min over {3, 4} = 3; feature 2 min over {5, 7} = 5; query 2 lacks f1 -> 0
    np.testing.assert_array_equal(d.features, [[3, 5], [3, 5], [4, 7], [0, 1]])
    assert d.info["null_filled"] == 3


def test_null_constant_fill(tmp_path):
    d = read_letor(write(tmp_path, NULLS), null_fill=-1.0, cache=False)
    np.testing.assert_array_equal(d.features, [[-1, 5], [3, -1], [4, 7], [-1, 1]])
    assert d.info["null_filled"] == 3
    with pytest.raises(ValueError, match="null_fill"):
        read_letor(write(tmp_path, NULLS), null_fill="median", cache=False)
    for bad in (float("nan"), float("inf"), 1e40, True, None, [0.0]):  # silently filled before
        with pytest.raises(ValueError, match="finite number"):
            read_letor(write(tmp_path, NULLS), null_fill=bad, cache=False)
    assert read_letor(write(tmp_path, NULLS), null_fill=np.float32(2), cache=False).features[0, 0] == 2


def test_null_fill_rules_on_negative_and_positive_features(tmp_path):
    # feature 1 is positive, feature 2 negative (an LMIR-like log probability); query 2 lacks f1
    text = (
        "1 qid:1 1:NULL 2:-3.5\n"
        "0 qid:1 1:2.5 2:NULL\n"
        "2 qid:1 1:4 2:-7\n"
        "0 qid:2 1:NULL 2:NULL\n"
        "1 qid:2 1:NULL 2:-1\n"
    )
    p = write(tmp_path, text)
    query_min = read_letor(p, null_fill="query_min", cache=False)
    # the query's minimum over its non-NULL cells: f1 min{2.5, 4}, f2 min{-3.5, -7}; query 2: f1 -> 0
    np.testing.assert_array_equal(query_min.features, [[2.5, -3.5], [2.5, -7], [4, -7], [0, -1], [0, -1]])
    letor_min = read_letor(p, null_fill="letor_min", cache=False)
    # min(query minimum, 0): 0 for the positive f1, the query minimum for the negative f2
    np.testing.assert_array_equal(letor_min.features, [[0, -3.5], [2.5, -7], [4, -7], [0, -1], [0, -1]])
    assert query_min.info["null_filled"] == letor_min.info["null_filled"] == 5
    # a negative query minimum below an item's 0: both rules agree
    q = read_letor(write(tmp_path, "1 qid:1 1:NULL\n0 qid:1 1:-2\n0 qid:1 1:0\n", name="g.txt"), cache=False)
    r = read_letor(tmp_path / "g.txt", null_fill="letor_min", cache=False)
    np.testing.assert_array_equal(q.features, r.features)
    assert q.features[0, 0] == -2
    # the rules are part of the cache key: the same file, cached, gives each rule its own values
    c1 = read_letor(p, null_fill="query_min", cache_dir=tmp_path / "c")
    c2 = read_letor(p, null_fill="letor_min", cache_dir=tmp_path / "c")
    np.testing.assert_array_equal(c1.features, query_min.features)
    np.testing.assert_array_equal(c2.features, letor_min.features)
    with pytest.raises(ValueError, match=r"null_fill must be one of query_min, letor_min, keep or a finite"):
        read_letor(p, null_fill="LETOR_MIN", cache=False)


OHSUMED_MIN = SHARED_DATA / "ohsumed" / "Feature-min"


@pytest.mark.skipif(not OHSUMED_MIN.is_dir(), reason=f"no OHSUMED Feature-min files at {OHSUMED_MIN}")
def test_null_fill_rules_against_published_ohsumed_feature_min(tmp_path):
    """docs/data.md's measurement on one fold: NULL where LETOR's Feature-null files have it (BM25,
    log BM25, LMIR of a field without query term), read back with each rule, compared with Feature-min."""
    src = OHSUMED_MIN / "Fold1_testset.txt.gz"
    published = read_letor(src, cache=False)
    x = published.features
    mask = np.zeros(x.shape, dtype=bool)
    for base in (0, 15, 30):
        mask[:, base + 10 : base + 15] = (x[:, base] == 0)[:, None]
    lines = []
    with gzip.open(src, "rt") as fh:
        for row, line in enumerate(fh):
            body, _, comment = line.rstrip("\n").partition("#")
            tokens = body.split()
            for j in np.flatnonzero(mask[row]):
                assert tokens[j + 2].startswith(f"{j + 1}:")
                tokens[j + 2] = f"{j + 1}:NULL"
            lines.append(" ".join(tokens) + " #" + comment)
    null_file = write(tmp_path, "\n".join(lines) + "\n", name="Fold1_null.txt")
    share = {}
    for rule in ("query_min", "letor_min"):
        d = read_letor(null_file, null_fill=rule, cache=False)
        assert d.info["null_filled"] == mask.sum() > 5000
        np.testing.assert_array_equal(d.features[~mask], x[~mask])
        share[rule] = float(np.mean(d.features[mask] == x[mask]))
    assert share["letor_min"] > 0.99  # 99.5% over the five folds (docs/data.md)
    assert share["query_min"] < 0.75  # 60.0% over the five folds


# ------------------------------------------------------------------------------------ group files
def test_query_file_convention(tmp_path):
    p = write(tmp_path, "1 1:0.5\n0 2:1\n2 1:3\n", name="train.txt")
    write(tmp_path, "2\n1\n", name="train.txt.query")
    d = read_letor(p, cache=False)
    assert d.query_offsets.tolist() == [0, 2, 3]
    assert d.query_ids.tolist() == ["0", "1"]


def test_group_file_and_explicit_query_file(tmp_path):
    p = write(tmp_path, "1 1:0.5\n0 2:1\n2 1:3\n", name="x.txt")
    write(tmp_path, "1\n2\n", name="x.txt.group")
    assert read_letor(p, cache=False).query_offsets.tolist() == [0, 1, 3]
    q = write(tmp_path, "3\n", name="sizes")
    assert read_letor(p, query_file=q, cache=False).query_offsets.tolist() == [0, 3]


def test_group_sizes_must_sum_to_rows(tmp_path):
    p = write(tmp_path, "1 1:0.5\n0 2:1\n", name="x.txt")
    write(tmp_path, "3\n", name="x.txt.query")
    with pytest.raises(ValueError, match=r"x\.txt\.query: group sizes sum to 3 but .* has 2 rows"):
        read_letor(p, cache=False)


def test_bad_group_file_line(tmp_path):
    q = write(tmp_path, "2\nabc\n", name="g.query")
    with pytest.raises(ValueError, match=r"g\.query:2: expected a positive integer"):
        read_group_sizes(q)
    with pytest.raises(ValueError, match="empty group file"):
        read_group_sizes(write(tmp_path, "\n", name="e.query"))


def test_no_qid_and_no_group_file(tmp_path):
    with pytest.raises(ValueError, match=r"f\.txt:1: expected 'qid:<id>' .* needs a group file"):
        read_letor(write(tmp_path, "1 1:0.5\n"), cache=False)


# ---------------------------------------------------------------------------------- bad input
BAD = [
    ("1 qid:1 1:0.5\n0 1:0.3\n", 2, "expected 'qid:<id>' as the second token"),
    ("1 qid:1 1:0.5\n0 qi:1 1:0.3\n", 2, "expected 'qid:<id>' as the second token"),
    ("1 qid: 1:0.5\n", 1, "empty query id"),
    ("1 1:0.5\n0 qid:1 1:0.3\n", 2, "'qid:' found but earlier lines had no query id"),
    ("1 qid:1 1:abc\n", 1, "expected a number for feature 1, got 'abc'"),
    ("x qid:1 1:1\n", 1, "expected a numeric label"),
    ("1 qid:1 0:1\n", 1, "feature index must be >= 1"),
    ("1 qid:1 -2:1\n", 1, "feature index must be an integer >= 1"),
    ("1 qid:1 1.5:1\n", 1, "feature index must be an integer >= 1"),
    ("1 qid:1 2:1 2:3\n", 1, "feature 2 appears twice"),
    ("1 qid:1 1:nan\n", 1, "non-finite value 'nan'"),
    ("1 qid:1 1:inf\n", 1, "non-finite value 'inf'"),
    ("1 qid:1 1:1e39\n", 1, "non-finite value '1e39'"),
    ("nan qid:1 1:1\n", 1, "numeric label as the first token, got a non-finite value"),
    ("1 qid:1 1:\n", 1, "expected 'index:value', got '1:'"),
    ("1 qid:1 1:2 7\n", 1, "expected 'index:value', got '7'"),
    ("1 qid:1 1 :2\n", 1, "expected 'index:value'"),
    ("1 qid:1 1:2:3\n", 1, "expected a number for feature 1, got '2:3'"),
    ("1 1:2 qid:1\n", 1, "'qid:' must be the second token|earlier lines had no query id"),
    ("1 qid:1 99999999999:1\n", 1, "exceeds the limit"),
    ("1 qid:1 1:1\n0 qid:1 1:\x00\x01\n", 2, "NUL byte|expected"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD)
def test_malformed_line_names_file_and_line(tmp_path, text, line, message):
    p = write(tmp_path, "# a comment first\n" + text)
    with pytest.raises(ValueError, match=rf"f\.txt:{line + 1}: ") as info:
        read_letor(p, cache=False)
    assert re.search(message, str(info.value)), str(info.value)


def test_invalid_utf8_and_garbage_gzip(tmp_path):
    with pytest.raises(ValueError, match=r"f\.txt:2: not UTF-8"):
        read_letor(write(tmp_path, b"1 qid:1 1:1\n1 qid:1 1:\xff\xfe\n"), cache=False)
    p = write(tmp_path, b"\x1f\x8b" + b"garbage" * 10, name="bad.gz")
    with pytest.raises(ValueError, match=r"bad\.gz: cannot read compressed data"):
        read_letor(p, cache=False)


def test_empty_file(tmp_path):
    for text in ["", "\n\n", "# only a comment\n"]:
        with pytest.raises(ValueError, match=r"f\.txt: empty file"):
            read_letor(write(tmp_path, text), cache=False)
    with pytest.raises(ValueError, match="no such file"):
        read_letor(tmp_path / "missing.txt")


def test_reappearing_query_names_both_lines(tmp_path):
    text = "1 qid:1 1:1\n0 qid:2 1:2\n1 qid:1 1:3\n"
    with pytest.raises(ValueError, match=r"f\.txt:3: query id 1 reappears .*first seen at line 1"):
        read_letor(write(tmp_path, text), cache=False)


def test_regroup_gathers_rows_stably(tmp_path):
    text = "1 qid:b 1:1\n0 qid:a 1:2\n2 qid:b 1:3\n0 qid:a 1:4\n"
    d = read_letor(write(tmp_path, text), regroup=True, cache=False)
    assert d.query_ids.tolist() == ["b", "a"]
    np.testing.assert_array_equal(d.features[:, 0], [1, 3, 2, 4])
    np.testing.assert_array_equal(d.labels, [1, 2, 0, 0])


# ------------------------------------------------------------------------ fast path vs careful
def _random_letor(rng, n_lines, nulls=True):
    lines = []
    qid = 0
    for _ in range(n_lines):
        if rng.random() < 0.2:
            qid += 1
        feats = np.sort(rng.choice(np.arange(1, 30), size=rng.integers(0, 8), replace=False))
        if rng.random() < 0.3:
            rng.shuffle(feats)
        toks = [str(rng.integers(0, 5)), f"qid:{qid}"]
        for f in feats:
            scale = 10.0 ** rng.integers(-5, 5)
            v = "NULL" if nulls and rng.random() < 0.05 else repr(float(rng.normal() * scale))
            toks.append(f"{f}:{v}")
        line = " ".join(toks)
        if rng.random() < 0.5:
            line += f" #docid = d{rng.integers(1e6)} inc = 1"
        if rng.random() < 0.05:
            lines.append("")
        lines.append(line)
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), chunk=st.integers(16, 400))
def test_fast_path_equals_careful_path(tmp_path, seed, n, chunk):
    rng = np.random.default_rng(seed)
    text = _random_letor(rng, n).encode()
    fast = letor._parse_chunk_fast(text, 1, None, None)
    careful = letor._parse_chunk_careful(text, 1, "x", None, None)
    assert fast is not None
    w = max(fast.features.shape[1], careful.features.shape[1])
    pad = lambda f: np.pad(f, ((0, 0), (0, w - f.shape[1])))  # noqa: E731
    np.testing.assert_array_equal(pad(fast.features), pad(careful.features))
    np.testing.assert_array_equal(fast.labels, careful.labels)
    np.testing.assert_array_equal(fast.qids, careful.qids)
    np.testing.assert_array_equal(fast.lines, careful.lines)
    assert fast.docids == careful.docids
    # whole-file read, in small chunks, equals the one-chunk read
    p = write(tmp_path, text, name=f"r{seed}.txt")
    a = read_letor(p, cache=False, chunk_bytes=chunk, regroup=True)
    b = read_letor(p, cache=False, regroup=True)
    np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.query_offsets, b.query_offsets)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cut=st.integers(0, 10_000), junk=st.binary(min_size=1, max_size=6))
def test_mutated_lines_load_or_raise_the_same_way(seed, cut, junk):
    """Random garbage spliced into a valid file: fast path either agrees with the careful path or
    declines; the careful path either loads or raises ValueError naming a line."""
    rng = np.random.default_rng(seed)
    text = _random_letor(rng, 20).encode()
    cut %= len(text)
    mutated = text[:cut] + junk + text[cut:]
    try:
        careful = letor._parse_chunk_careful(mutated, 1, "x", None, None)
    except ValueError as exc:
        assert re.match(r"x:\d+: ", str(exc)), str(exc)
        assert letor._parse_chunk_fast(mutated, 1, None, None) is None
        return
    fast = letor._parse_chunk_fast(mutated, 1, None, None)
    if fast is not None:
        w = max(fast.features.shape[1], careful.features.shape[1])
        f = np.pad(fast.features, ((0, 0), (0, w - fast.features.shape[1])))
        c = np.pad(careful.features, ((0, 0), (0, w - careful.features.shape[1])))
        np.testing.assert_array_equal(f, c)
        np.testing.assert_array_equal(fast.qids.astype(str), careful.qids.astype(str))


def test_matches_sklearn_on_mq2008():
    from sklearn.datasets import load_svmlight_file

    for part in ("S1", "S4"):
        path = MQ2008 / f"{part}.txt.gz"
        x, y, q = load_svmlight_file(str(path), query_id=True, zero_based=False)
        d = read_letor(path, cache=False)
        np.testing.assert_array_equal(d.features, x.toarray().astype(np.float32))
        np.testing.assert_array_equal(d.labels, y.astype(np.float32))
        np.testing.assert_array_equal(np.repeat(d.query_ids.astype(np.int64), d.query_lengths), q)


def test_mq2008_counts():
    parts = [read_letor(MQ2008 / f"S{i}.txt.gz") for i in range(1, 6)]
    assert [p.n_items for p in parts] == [2933, 3635, 3062, 2707, 2874]
    assert [p.n_queries for p in parts] == [157, 157, 157, 157, 156]
    assert sum(p.queries_without_relevant() for p in parts) == 220
    assert all(p.n_features == 46 for p in parts)
    assert parts[0].label_histogram() == {0.0: 2316, 1.0: 427, 2.0: 190}


def test_peak_memory_at_most_twice_the_dense_array(tmp_path):
    rng = np.random.default_rng(0)
    n, f = 20_000, 60
    x = rng.random((n, f)).astype(np.float32)
    with (tmp_path / "big.txt").open("w") as fh:
        for i in range(n):
            values = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(x[i]))
            fh.write(f"{i % 5} qid:{i // 50} {values}\n")
    dense = n * f * 4
    tracemalloc.start()
    d = read_letor(tmp_path / "big.txt", cache=False, chunk_bytes=1 << 20)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert d.features.shape == (n, f)
    rows = n * 64  # O(rows) bookkeeping allowance: labels, line numbers, query keys, docids
    chunk_work = 40 << 20  # one 1 MiB chunk's working set (per-byte masks, pandas table)
    assert peak <= 2 * dense + rows + chunk_work, (peak, dense)


# ------------------------------------------------------------------------------------------ cache
def test_cache_hit_skips_parsing(tmp_path, monkeypatch):
    p = write(tmp_path, TINY)
    first = read_letor(p, cache_dir=tmp_path / "c")
    monkeypatch.setattr(letor, "_parse", lambda *a, **k: pytest.fail("parsed again despite a valid cache"))
    second = read_letor(p, cache_dir=tmp_path / "c")
    np.testing.assert_array_equal(first.features, second.features)
    assert second.docids.tolist() == ["A", "B", "C"]
    assert second.query_ids.tolist() == ["10", "7"]


def _edit_keeping_size_and_mtime(path, offset, new_byte):
    """Replace one byte of ``path`` and put its modification time back: size and mtime unchanged."""
    import os

    st = path.stat()
    raw = bytearray(path.read_bytes())
    raw[offset] = new_byte
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_cache_keys_on_the_whole_content_not_size_mtime_or_head(tmp_path):
    # a label past the first MiB changed, size and mtime kept: the cache must not serve the stale parse
    p = write(tmp_path, "".join(f"{i % 3} qid:{i // 10} 1:{i}.5 2:0.25\n" for i in range(60_000)))
    assert p.stat().st_size > 1 << 20
    before = read_letor(p, cache_dir=tmp_path / "c")
    last = p.read_bytes().rindex(b"\n", 0, p.stat().st_size - 1) + 1  # the last line's label
    assert before.labels[-1] == 2 and last > 1 << 20
    _edit_keeping_size_and_mtime(p, last, ord("0"))
    with pytest.warns(UserWarning, match="stale"):
        after = read_letor(p, cache_dir=tmp_path / "c")
    assert after.labels[-1] == 0 and after.label_histogram() == read_letor(p, cache=False).label_histogram()
    assert after.label_histogram() != before.label_histogram()


def test_cache_keys_on_the_group_files_content(tmp_path):
    p = write(tmp_path, "1 1:0.5\n0 2:1\n2 1:3\n", name="x.txt")
    q = write(tmp_path, "\n" * (1 << 20) + "1\n2\n", name="x.txt.query")  # blank lines skipped
    assert read_letor(p, cache_dir=tmp_path / "c").query_offsets.tolist() == [0, 1, 3]
    _edit_keeping_size_and_mtime(q, 1 << 20, ord("2"))  # past the first MiB
    _edit_keeping_size_and_mtime(q, (1 << 20) + 2, ord("1"))
    with pytest.warns(UserWarning, match="stale"):
        assert read_letor(p, cache_dir=tmp_path / "c").query_offsets.tolist() == [0, 2, 3]


def test_touched_file_with_the_same_content_is_served_from_the_cache(tmp_path, monkeypatch):
    import os

    p = write(tmp_path, TINY)
    first = read_letor(p, cache_dir=tmp_path / "c")
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    monkeypatch.setattr(letor, "_parse", lambda *a, **k: pytest.fail("parsed again for an unchanged content"))
    np.testing.assert_array_equal(read_letor(p, cache_dir=tmp_path / "c").features, first.features)


def test_a_file_changed_while_it_is_parsed_is_not_cached(tmp_path, monkeypatch):
    p = write(tmp_path, TINY)
    parse = letor._parse

    def edit_then_parse(*args, **kwargs):
        data = parse(*args, **kwargs)
        p.write_text(TINY.replace("0.5", "0.75"))  # after the parse read it, before the cache is written
        return data

    monkeypatch.setattr(letor, "_parse", edit_then_parse)
    with pytest.warns(UserWarning, match="changed while it was read"):
        read_letor(p, cache_dir=tmp_path / "c")
    monkeypatch.setattr(letor, "_parse", parse)
    assert read_letor(p, cache_dir=tmp_path / "c").features[0, 0] == np.float32(0.75)


def test_default_cache_dir_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXRANK_CACHE_DIR", str(tmp_path / "here"))
    read_letor(write(tmp_path, TINY))
    assert default_cache_dir() == tmp_path / "here"
    assert len(list((tmp_path / "here").glob("*.npz"))) == 1


def test_stale_cache_is_rebuilt(tmp_path):
    p = write(tmp_path, TINY)
    read_letor(p, cache_dir=tmp_path / "c")
    p.write_text(TINY.replace("0.5", "0.75"))
    with pytest.warns(UserWarning, match="stale"):
        d = read_letor(p, cache_dir=tmp_path / "c")
    assert d.features[0, 0] == np.float32(0.75)


def test_options_are_part_of_the_key(tmp_path):
    p = write(tmp_path, NULLS)
    a = read_letor(p, cache_dir=tmp_path / "c")
    b = read_letor(p, cache_dir=tmp_path / "c", null_fill=-1.0)
    assert a.features[0, 0] == 3 and b.features[0, 0] == -1


@pytest.mark.parametrize("damage", ["truncate", "flip", "pickle"])
def test_corrupt_or_hostile_cache_is_never_trusted(tmp_path, damage):
    p = write(tmp_path, TINY)
    good = read_letor(p, cache_dir=tmp_path / "c")
    (entry,) = (tmp_path / "c").glob("*.npz")
    raw = entry.read_bytes()
    marker = tmp_path / "pwned"
    if damage == "truncate":
        entry.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip":
        # change one feature value inside the stored array, keeping the archive readable
        with np.load(entry, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["features"][0, 0] = 42
        np.savez(entry, **arrays)
    else:
        import pickle

        class Evil:
            def __reduce__(self):
                return (open, (str(marker), "w"))

        arrays = {"meta": np.array([Evil()], dtype=object), "features": np.zeros(1)}
        with entry.open("wb") as fh:
            np.savez(fh, **arrays)
        assert b"pwned" in entry.read_bytes() or pickle  # the payload really is in the file
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = read_letor(p, cache_dir=tmp_path / "c")
    from ctxrank.data.cache import CacheWarning

    # a ctxrank warning: the CLI prints it as one line, "ctxrank: warning: ignoring cache ..."
    assert any("ignoring cache" in str(w.message) and w.category is CacheWarning for w in caught)
    np.testing.assert_array_equal(d.features, good.features)
    assert not marker.exists()


def test_cached_load_reports_the_path_as_given(tmp_path, monkeypatch):
    p = write(tmp_path, TINY)
    read_letor(p, cache_dir=tmp_path / "c")
    monkeypatch.chdir(tmp_path)
    assert read_letor("f.txt", cache_dir=tmp_path / "c").source == "f.txt"


# ------------------------------------------------------------------ resources bounded by the data
_CAPPED = """
import resource, sys, time
from ctxrank.data.letor import read_letor
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
cap = vm + {headroom}
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
t0 = time.perf_counter()
try:
    d = read_letor(sys.argv[1], cache=False, **{kwargs})
    print("LOADED", d.features.shape)
except (ValueError, MemoryError) as exc:
    print(type(exc).__name__, exc)
print("seconds", time.perf_counter() - t0)
"""


def _read_capped(path, headroom=256 << 20, **kwargs):
    """read_letor in a subprocess whose address space is capped at its size after import + headroom:
    the outcome (a line), or the subprocess failing (a MemoryError traceback)."""
    import os
    import subprocess
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("the memory cap reads /proc/self/status")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    code = _CAPPED.format(headroom=headroom, kwargs=repr(kwargs))
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome, seconds = proc.stdout.strip().splitlines()
    return outcome, float(seconds.split()[1])


@pytest.mark.parametrize("rows", [80, 400])  # 1.4 KB asking 3.0 GiB; 400 rows asking 14.9 GiB
def test_wide_index_refused_before_allocating_under_memory_cap(tmp_path, rows):
    p = write(tmp_path, "".join(f"1 qid:{i // 4} 3:1 9999999:1\n" for i in range(rows)))
    outcome, seconds = _read_capped(p)
    assert outcome.startswith(f"ValueError {p}:1: feature index 9999999 makes the dense feature matrix")
    assert "max_dense_bytes" in outcome and "--max-dense-bytes" in outcome and seconds < 5
    # the limit is a keyword: a small one refuses a small file, a raised one accepts it
    small = write(tmp_path, "0 qid:1 1:1\n" + "0 qid:1 300:1\n" * 999, "small.txt")
    with pytest.raises(
        ValueError,
        match=r"small\.txt:2: feature index 300 makes .* = 1\.1 MiB, above max_dense_bytes = 1,000,000",
    ):
        read_letor(small, cache=False, max_dense_bytes=1_000_000)
    assert read_letor(small, cache=False, max_dense_bytes=1_200_000).features.shape == (1000, 300)
    with pytest.raises(ValueError, match=r"small\.txt: n_features = 300 over 1000 lines makes"):
        read_letor(small, cache=False, n_features=300, max_dense_bytes=1_000_000)


def test_allocation_failure_below_the_limit_names_the_file_the_array_and_the_option(tmp_path):
    # a 546-byte file, 21 rows with feature index 9,999,999: 801 MiB, under the 2 GiB limit, above
    # what the capped process has left: MemoryError with a message, not NumPy's bare one
    p = write(tmp_path, "".join(f"1 qid:{i // 4} 3:1 9999999:1\n" for i in range(21)))
    assert p.stat().st_size < 600
    outcome, _ = _read_capped(p)
    assert outcome.startswith(
        f"MemoryError {p}: cannot allocate a 21 x 9,999,999 float32 array (801.1 MiB) while reading it: "
        "out of memory"
    ), outcome
    assert "max_dense_bytes = 2,147,483,648" in outcome and "--max-dense-bytes N" in outcome


def test_long_line_refused_and_wide_line_read_within_memory_cap(tmp_path):
    line = "1 qid:1 " + " ".join(f"{i}:0.5" for i in range(1, 300_001)) + "\n"  # 3.6 MB
    p = write(tmp_path, "0 qid:1 1:1\n" + line)
    outcome, seconds = _read_capped(p)
    assert outcome.startswith(f"ValueError {p}:2: line longer than max_line_bytes = 1,048,576 bytes")
    assert "--max-line-bytes" in outcome and seconds < 2
    outcome, seconds = _read_capped(p, max_line_bytes=8 << 20)  # raised: the careful path reads it
    assert outcome == "LOADED (2, 300000)" and seconds < 10


def test_gzip_of_one_huge_line_fails_fast_under_memory_cap(tmp_path):
    # 1 GiB of "1:1 " without a newline, as 1024 concatenated gzip members of 1 MiB each: ~1 MB on disk
    member = gzip.compress(b"1:1 " * (1 << 18), compresslevel=9)
    p = tmp_path / "bomb.txt.gz"
    p.write_bytes(gzip.compress(b"0 qid:1 1:1\n1 qid:1 ") + member * 1024)
    assert p.stat().st_size < 2 << 20
    outcome, seconds = _read_capped(p)
    assert outcome.startswith(f"ValueError {p}:2: line longer than max_line_bytes") and seconds < 3


def test_chunked_reader_never_buffers_past_the_line_limit(tmp_path):
    p = write(tmp_path, "0 qid:1 " + "1:1 " * 5000 + "\n")
    # the counting pass is the authority; _iter_chunks refuses too (a file grown since it was counted)
    with pytest.raises(ValueError, match=r"f\.txt:1: line longer than max_line_bytes = 1,000 bytes"):
        list(letor._iter_chunks(p, 64, 1000))


def test_one_long_line_among_short_ones_does_not_go_through_a_padded_table(tmp_path):
    short = "".join(f"0 qid:1 1:{i}\n" for i in range(2000))
    text = short + "1 qid:1 " + " ".join(f"{i}:1" for i in range(1, 5001)) + "\n"
    assert letor._parse_chunk_fast(text.encode(), 1, None, None) is None  # 2001 x 10002 cells: careful
    d = read_letor(write(tmp_path, text), cache=False, dense=False)
    assert d.features.shape == (2001, 5000) and d.features[-1].sum() == 5000


def test_cache_does_not_bypass_the_limits(tmp_path):
    p = write(tmp_path, "".join(f"1 qid:1 2000:{i}\n" for i in range(1, 201)))  # 200 x 2000 x 4 = 1.6 MB
    d = read_letor(p, cache_dir=tmp_path / "c", max_dense_bytes=2_000_000)
    assert d.features.shape == (200, 2000)
    with pytest.raises(ValueError, match=r"f\.txt:1: feature index 2000 makes .* above max_dense_bytes"):
        read_letor(p, cache_dir=tmp_path / "c", max_dense_bytes=1_000_000)
    with pytest.raises(ValueError, match=r"f\.txt:1: line longer than max_line_bytes = 10 bytes"):
        read_letor(p, cache_dir=tmp_path / "c", max_dense_bytes=2_000_000, max_line_bytes=10)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "8G"])
def test_limits_must_be_positive_integers(tmp_path, bad):
    with pytest.raises(ValueError, match="must be a positive integer"):
        read_letor(write(tmp_path, TINY), cache=False, max_dense_bytes=bad)
    with pytest.raises(ValueError, match="must be a positive integer"):
        read_letor(write(tmp_path, TINY), cache=False, max_line_bytes=bad)


# ------------------------------------------------------------------------------- truncated files
DENSE = "2 qid:1 1:1 2:2 3:3\n1 qid:1 1:4 2:5 3:6\n0 qid:2 1:7 2:8 3:9\n"


def test_file_cut_inside_its_last_line_is_reported(tmp_path):
    p = write(tmp_path, DENSE[:-5])  # "0 qid:2 1:7 2:8" without 3:9 and the newline
    with pytest.warns(letor.DataWarning) as caught:
        d = read_letor(p, cache=False)
    messages = [str(w.message) for w in caught]
    assert any(m.startswith(f"{p}:3: lists 2 of the 3 features that 2 of the 3 rows list") for m in messages)
    assert f"{p}:3: the file does not end with a newline (cut short?)" in messages
    assert d.features[2].tolist() == [7, 8, 0]
    # the dataset registry's dense files: an error
    with pytest.raises(
        ValueError, match=r"f\.txt:3: lists 2 of the 3 features that every row of this dataset lists"
    ):
        read_letor(p, cache=False, dense=True)
    # re-issued when the parse comes from the cache
    for _ in range(2):
        with pytest.warns(letor.DataWarning) as again:
            read_letor(p, cache_dir=tmp_path / "c")
        assert [str(w.message) for w in again] == messages


def test_complete_and_sparse_files_give_no_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_letor(write(tmp_path, DENSE), cache=False, dense=True)
        read_letor(write(tmp_path, TINY, "sparse.txt"), cache=False)  # rows 1 of 3 full: sparse
        read_letor(write(tmp_path, DENSE + "1 qid:3 2:1\n", "zeros.txt"), cache=False, dense=False)
    with pytest.warns(letor.DataWarning, match=r"zeros\.txt:4: lists 1 of the 3 features"):
        read_letor(tmp_path / "zeros.txt", cache=False)


def test_registry_dataset_with_a_cut_file_is_an_error(tmp_path):
    from ctxrank.data.registry import load_split

    root = tmp_path / "MQ2008"
    (root / "Fold1").mkdir(parents=True)
    lines = gzip.decompress((MQ2008 / "S5.txt.gz").read_bytes()).splitlines(keepends=True)
    (root / "Fold1" / "test.txt").write_bytes(b"".join(lines[:-1]) + lines[-1][: lines[-1].index(b" 46:")])
    for name in ("train.txt", "vali.txt"):
        (root / "Fold1" / name).write_bytes(b"".join(lines[:30]))
    with pytest.raises(
        ValueError, match=rf"test\.txt:{len(lines)}: lists 45 of the 46 features that every row"
    ):
        load_split("mq2008", "test", 1, root=tmp_path, cache=False)


def test_chunk_bytes_is_checked_as_every_integer_option(tmp_path):
    p = write(tmp_path, "1 qid:1 1:0.5\n0 qid:1 1:0.25\n")
    assert read_letor(p, cache=False, chunk_bytes=np.int64(8)).n_items == 2  # a NumPy integer is one
    for bad in (True, 2**70):
        with pytest.raises(ValueError, match="chunk_bytes must be"):
            read_letor(p, cache=False, chunk_bytes=bad)
