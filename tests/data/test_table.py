"""read_table: CSV / TSV / gzip / Parquet, regrouping, categorical encoding, missing values, errors."""

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from ctxrank.data.table import (
    CategoricalEncoder,
    TableSpec,
    is_table_path,
    read_table,
    read_table_with_rows,
    refit_categorical,
    table_columns,
)

CSV = """\
qid,label,price,rating,brand,color
007,1,10.5,4,acme,red
007,0,3,NA,zeta,
8,2,7.25,,acme,blue
007,1,1e2,5,NA,red
"""
# rows of query 007 are not contiguous: regrouped to 007, 007, 007, 8


def write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_csv_values_regrouping_and_encoding(tmp_path):
    d = read_table(write(tmp_path, CSV), query="qid", label="label", categorical=["brand", "color"])
    assert d.query_ids.tolist() == ["007", "8"]  # strings kept as written, order of first appearance
    assert d.query_offsets.tolist() == [0, 3, 4]
    assert d.feature_names == ("price", "rating")
    nan = np.nan  # a missing cell stays missing (null_fill = "keep", the tables' default)
    np.testing.assert_array_equal(
        d.features, np.array([[10.5, 4], [3, nan], [100, 5], [7.25, nan]], np.float32)
    )
    np.testing.assert_array_equal(d.labels, [1, 0, 1, 2])
    assert d.features.dtype == np.float32 and d.labels.dtype == np.float32
    assert d.categorical_names == ("brand", "color")
    # sorted vocabularies: brand NA < acme < zeta ("NA" is a category, not missing), color blue < red
    assert d.categorical_cardinalities == (4, 3)
    np.testing.assert_array_equal(d.categorical, [[2, 2], [3, 0], [1, 2], [2, 1]])
    assert d.categorical.dtype == np.int64
    assert d.info["missing"] == 2 and d.info["null_filled"] == 0 and d.info["missing_columns"] == 1
    assert d.info["regrouped"] == 1
    assert d.info["categorical_missing"] == 1 and d.info["categorical_unknown"] == 0
    assert d.source.endswith("t.csv")


def test_regroup_false_names_rows(tmp_path):
    with pytest.raises(ValueError, match=r"t.csv: data row 4: query id 007 reappears .* data row 1"):
        read_table(
            write(tmp_path, CSV), query="qid", label="label", categorical=["brand", "color"], regroup=False
        )
    sorted_csv = "q,y,x\n1,0,1\n1,1,2\n2,0,3\n"
    d = read_table(write(tmp_path, sorted_csv, "s.csv"), query="q", label="y", regroup=False)
    assert d.info["regrouped"] == 0 and d.query_offsets.tolist() == [0, 2, 3]


def test_tsv_gzip_and_parquet_give_the_same_data(tmp_path):
    kw = dict(query="qid", label="label", categorical=["brand", "color"], docid="doc")
    text = CSV.replace("color\n", "color,doc\n", 1)
    text = "\n".join(line + f",d{i}" if i else line for i, line in enumerate(text.splitlines())) + "\n"
    ref = read_table(write(tmp_path, text), **kw)
    assert ref.docids.tolist() == ["d1", "d2", "d4", "d3"]
    tsv = write(tmp_path, text.replace(",", "\t"), "t.tsv")
    gz = tmp_path / "t.csv.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    pq = tmp_path / "t.parquet"
    pd.DataFrame(
        {
            "qid": ["007", "007", "8", "007"],
            "label": [1, 0, 2, 1],
            "price": [10.5, 3, 7.25, 100],
            "rating": pd.array([4, None, None, 5], dtype="Int64"),
            "brand": ["acme", "zeta", "acme", "NA"],
            "color": ["red", None, "blue", "red"],
            "doc": ["d1", "d2", "d3", "d4"],
        }
    ).to_parquet(pq)
    for p in (tsv, gz, pq):
        d = read_table(p, **kw)
        for field in ("features", "labels", "query_ids", "query_offsets", "docids", "categorical"):
            np.testing.assert_array_equal(getattr(d, field), getattr(ref, field), err_msg=f"{p.name} {field}")
        assert d.feature_names == ref.feature_names and d.info["missing"] == 2


def test_train_encoder_applied_to_test_unseen_maps_to_zero(tmp_path):
    enc = CategoricalEncoder()
    kw = dict(query="qid", label="label", categorical=["brand"], numeric=["price", "rating"])
    train = read_table(write(tmp_path, CSV), **kw, encoder=enc)
    assert enc.is_fitted and enc.vocab_ == {"brand": ["NA", "acme", "zeta"]}
    test_csv = "qid,label,price,rating,brand,color\n1,0,1,1,zeta,x\n1,1,2,2,newco,y\n1,0,3,3,,z\n"
    saved = CategoricalEncoder.from_dict(json.loads(json.dumps(enc.to_dict())))
    test = read_table(write(tmp_path, test_csv, "test.csv"), **kw, encoder=saved)
    assert test.categorical[:, 0].tolist() == [3, 0, 0]  # zeta known; newco unseen; empty = missing
    assert test.info["categorical_unknown"] == 1 and test.info["categorical_missing"] == 1
    assert test.categorical_cardinalities == train.categorical_cardinalities == (4,)
    assert enc.vocab_ == saved.vocab_  # applying a fitted encoder does not refit it


def test_encoder_none_records_its_vocabulary(tmp_path):
    d = read_table(write(tmp_path, CSV), query="qid", label="label", categorical=["color"], numeric=["price"])
    enc = CategoricalEncoder.from_dict(d.info["categorical_encoder"])
    assert enc.vocab_ == {"color": ["blue", "red"]} and enc.cardinalities_ == (3,)
    json.dumps(d.info)  # JSON-safe


def test_encoder_min_count_and_direct_use():
    enc = CategoricalEncoder(min_count=2).fit({"c": ["a", "b", "a", None, 3, "3"]})
    assert enc.vocab_ == {"c": ["3", "a"]}  # values compared as strings; "b" seen once
    codes = enc.transform({"c": pd.Series(["a", "b", None, 3])})
    assert codes.tolist() == [[2], [0], [0], [1]]
    with pytest.raises(ValueError, match="missing"):
        enc.transform({"d": ["a"]})
    with pytest.raises(ValueError, match="not fitted"):
        CategoricalEncoder().transform({"c": ["a"]})
    with pytest.raises(ValueError, match="min_count"):
        CategoricalEncoder(min_count=0)


def test_encoder_min_count_is_checked_as_every_integer_option():
    assert CategoricalEncoder(min_count=np.int64(2)).min_count == 2  # a NumPy integer is an integer
    for bad in (True, 2.0, 2**70):
        with pytest.raises(ValueError, match="min_count must be"):
            CategoricalEncoder(min_count=bad)


def test_encoder_columns_must_match(tmp_path):
    enc = CategoricalEncoder().fit({"color": ["red"]})
    with pytest.raises(
        ValueError, match=r"fitted on categorical columns \['color'\], got \['brand', 'color'\]"
    ):
        read_table(
            write(tmp_path, CSV), query="qid", label="label", categorical=["brand", "color"], encoder=enc
        )


def test_numeric_selection_and_null_fill(tmp_path):
    """``null_fill`` fills a table's missing cells by LETOR's rules: a number, the query's minimum of
    the feature (0 where the whole query lacks it), min(that, 0)."""
    kw = dict(query="qid", label="label", numeric=["rating", "price"])
    d = read_table(write(tmp_path, CSV), **kw, null_fill=-1.0)
    assert d.feature_names == ("rating", "price") and d.categorical is None
    np.testing.assert_array_equal(d.features[:, 0], [4, -1, 5, -1])  # regrouped: 007 x 3, then 8
    assert d.info["null_filled"] == 2 and d.info["null_fill"] == -1.0 and "missing" not in d.info
    d = read_table(write(tmp_path, CSV), **kw, null_fill="query_min")
    np.testing.assert_array_equal(d.features[:, 0], [4, 4, 5, 0])
    with pytest.raises(ValueError, match="null_fill must be one of query_min, letor_min, keep"):
        read_table(write(tmp_path, CSV), **kw, null_fill="zero")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q,y,x\n1,0,1\n1,1,abc\n", r"data row 2: column 'x': expected a number, got 'abc'"),
        ("q,y,x\n1,0,1\n1,1,inf\n", r"data row 2: column 'x': value .* not a finite float32"),
        ("q,y,x\n1,0,1\n1,1,1e40\n", r"data row 2: column 'x': value .* not a finite float32"),
        ("q,y,x\n1,0,1\n1,,2\n", r"data row 2: missing label in column 'y'"),
        ("q,y,x\n1,0,1\n1,high,2\n", r"data row 2: label column 'y' holds text \('high'\): labels must be"),
        ("q,y,x\n1,0,1\n,1,2\n", r"data row 2: missing query id in column 'q'"),
        ("", r"empty file"),
        ("q,y,x\n", r"empty file \(no data rows\)"),
        ("q,y,z\n1,0,1\n", r"no column\(s\) \['x'\]; the file has columns \['q', 'y', 'z'\]"),
    ],
)
def test_errors_name_column_and_row(tmp_path, text, message):
    p = write(tmp_path, text)
    with pytest.raises(ValueError, match=message):
        read_table(p, query="q", label="y", numeric=["x"])


def test_argument_errors(tmp_path):
    p = write(tmp_path, CSV)
    with pytest.raises(ValueError, match="unsupported file type"):
        read_table(tmp_path / "t.xlsx", query="qid", label="label")
    with pytest.raises(ValueError, match="no such file"):
        read_table(tmp_path / "absent.csv", query="qid", label="label")
    with pytest.raises(ValueError, match="must be distinct"):
        read_table(p, query="qid", label="qid")
    with pytest.raises(ValueError, match=r"numeric columns \['brand'\] are also"):
        read_table(p, query="qid", label="label", categorical=["brand"], numeric=["brand"])
    with pytest.raises(TypeError, match="not a single string"):
        read_table(p, query="qid", label="label", categorical="brand")
    bad_pq = tmp_path / "bad.parquet"
    bad_pq.write_text("not parquet")
    with pytest.raises(ValueError, match="cannot read as Parquet"):
        read_table(bad_pq, query="qid", label="label")


def test_parquet_integer_and_bool_columns(tmp_path):
    pq = tmp_path / "t.parquet"
    pd.DataFrame(
        {
            "q": [5, 5, 6],
            "y": [0.0, 1.0, 2.0],
            "flag": [True, False, True],
            "store": pd.array([10, None, 10], dtype="Int64"),
        }
    ).to_parquet(pq)
    d = read_table(pq, query="q", label="y", categorical=["store"])
    assert d.query_ids.tolist() == ["5", "6"]
    assert d.features[:, 0].tolist() == [1, 0, 1]
    assert d.categorical[:, 0].tolist() == [1, 0, 1]
    enc = CategoricalEncoder.from_dict(d.info["categorical_encoder"])
    assert enc.vocab_ == {"store": ["10"]}  # integers kept as "10", not "10.0"


# ------------------------------------------------------------- file row order, specs, refitting
def test_file_rows_undo_the_regrouping(tmp_path):
    d, rows = read_table_with_rows(
        write(tmp_path, CSV), query="qid", label="label", categorical=["brand", "color"]
    )
    assert rows.tolist() == [0, 1, 3, 2] and rows.dtype == np.int64  # query 007's rows, then 8's
    file_labels = np.empty(4, np.float32)
    file_labels[rows] = d.labels
    assert file_labels.tolist() == [1, 0, 2, 1]  # the label column in file order
    _, same = read_table_with_rows(write(tmp_path, "q,y\n1,0\n2,1\n", "s.csv"), query="q", label="y")
    assert same.tolist() == [0, 1]


def test_label_none_reads_unlabelled_data(tmp_path):
    text = "qid,price,brand\n1,3,acme\n1,4,zeta\n2,5,\n"
    d = read_table(write(tmp_path, text), query="qid", label=None, categorical=["brand"])
    assert d.labels.tolist() == [0, 0, 0] and d.labels.dtype == np.float32
    assert d.feature_names == ("price",)


def test_table_columns_and_extensions(tmp_path):
    assert table_columns(write(tmp_path, CSV)) == ["qid", "label", "price", "rating", "brand", "color"]
    pq = tmp_path / "t.pq"
    pd.DataFrame({"a": [1], "b": ["x"]}).to_parquet(pq)
    assert table_columns(pq) == ["a", "b"]
    assert is_table_path("x.CSV") and is_table_path("x.tsv.gz") and is_table_path(pq)
    assert not is_table_path("x.txt") and not is_table_path("x.gz")
    with pytest.raises(ValueError, match="no such file"):
        table_columns(tmp_path / "none.csv")


def test_decode_inverts_transform():
    enc = CategoricalEncoder().fit({"c": ["b", "a", None, "b"]})
    codes = enc.transform({"c": ["a", "b", "zz", None]})
    assert codes[:, 0].tolist() == [1, 2, 0, 0]
    assert enc.decode(codes)["c"].tolist() == ["a", "b", None, None]
    with pytest.raises(ValueError, match="must lie in"):
        enc.decode(np.array([[3]]))


def test_refit_categorical_uses_the_training_split_only(tmp_path):
    text = "q,y,x,brand\n1,1,0,acme\n1,0,1,zeta\n2,1,0,acme\n2,0,1,only_test\n3,0,1,\n"
    enc = CategoricalEncoder()
    full = read_table(write(tmp_path, text), query="q", label="y", categorical=["brand"], encoder=enc)
    assert enc.vocab_ == {"brand": ["acme", "only_test", "zeta"]}
    train, test = full.subset([0]), full.subset([1, 2])
    new, (train2, test2) = refit_categorical(enc, train, test)
    assert new.vocab_ == {"brand": ["acme", "zeta"]} and enc.vocab_["brand"][1] == "only_test"
    assert train2.categorical[:, 0].tolist() == [1, 2] and train2.categorical_cardinalities == (3,)
    assert test2.categorical[:, 0].tolist() == [1, 0, 0]  # only_test -> unknown, missing -> 0
    assert test2.info["categorical_unknown"] == 1 and test2.info["categorical_missing"] == 1
    # the same codes as reading the test rows from their own file with the training encoder
    own = read_table(
        write(tmp_path, "q,y,x,brand\n2,1,0,acme\n2,0,1,only_test\n3,0,1,\n", "te.csv"),
        query="q", label="y", categorical=["brand"], encoder=new,
    )  # fmt: skip
    np.testing.assert_array_equal(own.categorical, test2.categorical)


def test_table_spec_round_trip_and_scoring(tmp_path):
    enc = CategoricalEncoder().fit({"brand": ["acme", "zeta"]})
    spec = TableSpec(query="qid", label="label", categorical=["brand"], numeric=["price"], docid="doc",
                     encoder=enc)  # fmt: skip
    d = spec.to_dict()
    json.dumps(d)
    back = TableSpec.from_dict(d)
    assert back == spec and back.encoder.vocab_ == enc.vocab_ and back.categorical == ("brand",)
    # data to be scored: no label and no docid column
    data, rows = back.read(write(tmp_path, "qid,price,brand\n1,2,zeta\n1,3,new\n"), scoring=True)
    assert data.labels.tolist() == [0, 0] and data.docids is None
    assert data.categorical[:, 0].tolist() == [2, 0] and rows.tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"no column\(s\) \['label', 'doc'\]"):
        back.read(write(tmp_path, "qid,price,brand\n1,2,zeta\n", "u.csv"))
    with pytest.raises(ValueError, match="needs a 'query' column name"):
        TableSpec.from_dict({"label": "y"})


# ------------------------------------------------------------------------------------ size bound
_CAPPED = """
import resource, sys
from ctxrank.data.table import read_table
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize:")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), vm + (256 << 20)))
try:
    d = read_table(sys.argv[1], query="q", label="y", **{kwargs})
    print("LOADED", d.features.shape)
except (ValueError, MemoryError) as exc:
    print(type(exc).__name__, exc)
"""


def _read_capped(path, **kwargs):
    """read_table in a subprocess whose address space is its size after import + 256 MiB."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    if not sys.platform.startswith("linux"):
        pytest.skip("the memory cap reads /proc/self/status")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    code = _CAPPED.format(kwargs=repr(kwargs))
    argv = [sys.executable, "-c", code, str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def _bomb(path, members):
    """A .csv.gz of ``members`` x 8 MiB of rows ``1,0,0.5`` (1M rows each, 12 KB compressed)."""
    member = gzip.compress(b"1,0,0.5\n" * (1 << 20), compresslevel=9)
    path.write_bytes(gzip.compress(b"q,y,x\n") + member * members)
    return path


def test_a_gzip_bomb_table_is_refused_before_it_is_read_under_a_memory_cap(tmp_path):
    # the file: 3 MB of .csv.gz holding 2 GiB of text, 268M rows (3.2 GB as float32 cells)
    p = _bomb(tmp_path / "bomb.csv.gz", 256)
    assert p.stat().st_size < 3.2e6
    outcome = _read_capped(p)
    assert outcome.startswith(
        f"ValueError {p}: more than 178,956,970 rows (counted so far) x 3 columns x 4 bytes is above "
        "max_dense_bytes = 2,147,483,648 (2.00 GiB)"
    ), outcome
    assert "read_table(..., max_dense_bytes=N)" in outcome and "--max-dense-bytes N" in outcome


def test_the_table_bound_is_a_keyword_checked_before_reading(tmp_path):
    small = _bomb(tmp_path / "small.csv.gz", 1)  # 1M rows x 3 columns x 4 bytes = 12 MB
    with pytest.raises(ValueError, match=r"small\.csv\.gz: more than 83,333 rows .* = 1,000,000"):
        read_table(small, query="q", label="y", max_dense_bytes=1_000_000)
    assert read_table(small, query="q", label="y", max_dense_bytes=12_582_912).n_items == 1 << 20
    pq = tmp_path / "t.parquet"
    pd.DataFrame({"q": np.arange(1000) // 10, "y": 0, "x": 0.5, "z": 1}).to_parquet(pq)
    message = r"t\.parquet: 1,000 rows x 4 columns x 4 bytes = 15\.6 KiB, above max_dense_bytes = 10,000"
    with pytest.raises(ValueError, match=message):
        read_table(pq, query="q", label="y", max_dense_bytes=10_000)
    assert read_table(pq, query="q", label="y", max_dense_bytes=16_000).n_items == 1000
    for bad in (0, -1, True, 1.5, "2G"):
        with pytest.raises(ValueError, match="max_dense_bytes must be a positive integer"):
            read_table(pq, query="q", label="y", max_dense_bytes=bad)


def test_a_table_that_fits_the_bound_but_not_the_memory_is_a_memory_error_with_a_message(tmp_path):
    outcome = _read_capped(_bomb(tmp_path / "b.csv.gz", 64))  # 67M rows: 805 MB of cells, under 2 GiB
    assert outcome.startswith(f"MemoryError {tmp_path / 'b.csv.gz'}: cannot allocate "), outcome
    assert "while reading it: out of memory (the table is 67,108,864 rows x 3 columns x 4 bytes" in outcome
    assert "--max-dense-bytes N" in outcome


def test_a_text_label_column_says_labels_must_be_numbers_not_categorical(tmp_path):
    # the hint for a text label speaks of labels, not of --categorical (features)
    p = write(tmp_path, "q,chosen,x\n1,no,1\n1,yes,2\n2,Yes,3\n2,no,4\n")
    with pytest.raises(ValueError) as info:
        read_table(p, query="q", label="chosen")
    message = str(info.value)
    assert message.startswith(f"{p}: data row 1: label column 'chosen' holds text ('Yes', 'no', 'yes'): ")
    assert "replace them by 1 (chosen) and 0 in the file: {'Yes': 1, 'yes': 1, 'no': 0}" in message
    assert "categorical" not in message
