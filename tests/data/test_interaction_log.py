"""Reading an interaction log: shown positions from tables and Parquet shards, the bad-log rules, the
log summary of ``data-info``."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ctxrank.data.interactions import log_positions
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.sources import Columns, DataSource, ModelInputs
from ctxrank.data.stream import ShardStream, write_shards
from ctxrank.data.summary import data_summary
from ctxrank.data.table import read_table

# three sessions of two queries; rows not sorted by position; s3 has no click
LOG = """session,query,item,pos,click,f1
s1,q1,a,2,0,0.1
s1,q1,b,1,1,0.5
s1,q1,c,3,1,0.2
s2,q1,a,1,0,0.5
s2,q1,c,2,1,0.2
s3,q2,d,1,0,0.3
s3,q2,e,2,0,0.9
"""
COLS = {"query": "session", "label": "click", "docid": "item", "group": "query", "position": "pos"}


@pytest.fixture
def log_csv(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text(LOG)
    return path


def test_a_log_table_fills_shown_positions_and_the_position_is_no_feature(log_csv, tmp_path):
    for path in (log_csv, tmp_path / "log.parquet"):
        if path.suffix == ".parquet":
            pd.read_csv(log_csv).to_parquet(path)
        data = read_table(path, **COLS)  # numeric=None: every other column
        assert data.feature_names == ("f1",)
        assert data.shown_positions.tolist() == [2, 1, 3, 1, 2, 1, 2]
        assert data.shown_positions.dtype == np.int32
        assert data.group_ids.tolist() == ["q1", "q1", "q2"]
        assert data.info["sessions_without_interaction"] == 1


def test_positions_follow_rows_that_are_regrouped(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("session,pos,click,f1\ns1,1,1,0\ns2,1,0,0\ns1,2,0,0\ns2,2,1,0\n")
    data = read_table(path, query="session", label="click", position="pos")
    assert data.query_ids.tolist() == ["s1", "s2"]
    assert data.shown_positions.tolist() == [1, 2, 1, 2]
    assert data.labels.tolist() == [1, 0, 0, 1]


@pytest.mark.parametrize(
    "row, message",
    [
        ("s2,q1,c,,1,0.2", r"data row 5: session 's2': missing position in column 'pos'"),
        (
            "s2,q1,c,1.5,1,0.2",
            r"data row 5: session 's2': position 1.5 in column 'pos' is not a whole number",
        ),
        (
            "s2,q1,c,0,1,0.2",
            r"data row 5: session 's2': position 0 in column 'pos' is not a whole number >= 1",
        ),
        ("s2,q1,c,1,1,0.2", r"data row 5: session 's2': position 1 is repeated \(also at data row 4\)"),
        ("s2,q1,c,3,1,0.2", r"data row 5: session 's2': position 3 but no row at position 2 \(2 row\(s\)"),
        ("s2,q1,c,x,1,0.2", r"data row 5: column 'pos': expected a number, got 'x'"),
    ],
    ids=["missing", "fraction", "zero", "repeated", "gap", "text"],
)
def test_a_bad_log_is_refused_naming_file_session_and_row(tmp_path, row, message):
    path = tmp_path / "bad.csv"
    path.write_text(LOG.replace("s2,q1,c,2,1,0.2", row))
    with pytest.raises(ValueError, match=rf"^{path}: {message}"):
        read_table(path, **COLS)


def test_a_session_whose_first_rows_are_missing_is_refused(tmp_path):
    """A session starting above position 1 (its first rows lost): an interaction there would be one on
    an item the log does not show."""
    path = tmp_path / "bad.csv"
    path.write_text("session,pos,click,f1\ns1,2,1,0\ns1,3,0,0\n")
    with pytest.raises(ValueError, match="data row 1: session 's1': position 2 but no row at position 1"):
        read_table(path, query="session", label="click", position="pos")


def test_log_positions_names_the_gap_of_each_session_not_later_positions():
    """Positions 1, 2, 4, 5: the row at 4 is named (no row at 3), not the one at 5."""
    values = np.array([1, 2, 5, 4], dtype=float)
    with pytest.raises(ValueError, match=r"^x: r3: session 'a': position 4 but no row at position 3"):
        log_positions(values, np.array([0, 4]), np.array(["a"]), np.arange(4), "x", lambda r: f"r{r}", "p")


def test_the_position_column_is_not_read_for_a_model(log_csv):
    """A model's saved table spec (numeric: every other column) with position and group columns: rows to
    score or evaluate are read without the position (so a file without it too), and neither column is
    an extra column of the file."""
    saved = {**COLS, "numeric": ["f1"], "categorical": [], "numeric_default": True}
    source = DataSource(data_file=str(log_csv), columns=Columns())
    for purpose in ("predict", "evaluate"):
        data, _ = source.load(purpose=purpose, model=ModelInputs(table=saved))
        assert data.shown_positions is None and data.feature_names == ("f1",)
    no_position = log_csv.with_name("labelled.csv")
    pd.read_csv(log_csv).drop(columns="pos").to_csv(no_position, index=False)
    data, _ = replace(source, data_file=str(no_position)).load(
        purpose="evaluate", model=ModelInputs(table=saved)
    )
    assert data.labels.tolist() == [0, 1, 1, 0, 1, 0, 0]


def test_the_summary_of_a_log_is_counted_by_hand(log_csv):
    s = data_summary(read_table(log_csv, **COLS))["log"]
    assert s["sessions"] == 3 and s["queries"] == 2
    # position 1: s1 b (click), s2 a, s3 d -> 1/3; position 2: s1 a, s2 c (click), s3 e -> 1/3;
    # position 3: s1 c (click) -> 1/1
    assert s["ctr_by_position"] == [
        {"position": 1, "impressions": 3, "interactions": 1, "ctr": 1 / 3},
        {"position": 2, "impressions": 3, "interactions": 1, "ctr": 1 / 3},
        {"position": 3, "impressions": 1, "interactions": 1, "ctr": 1.0},
    ]
    assert s["interactions_per_session"] == {"mean": 1.0, "histogram": {"0": 1, "1": 1, "2": 1}}
    assert s["sessions_without_interaction"] == 1


def test_labelled_data_have_no_log_summary(log_csv):
    assert "log" not in data_summary(read_table(log_csv, query="session", label="click", numeric=["f1"]))


def _log(n_sessions: int) -> RankingData:
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 5, size=n_sessions)
    qid = np.repeat([f"s{i}" for i in range(n_sessions)], lengths)
    position = np.concatenate([rng.permutation(n) + 1 for n in lengths])
    return RankingData.from_arrays(
        rng.normal(size=(qid.size, 2)), (position == 1).astype(float), qid, position=position,
        feature_names=("f1", "f2"),
    )  # fmt: skip


def test_log_shards_keep_positions_and_need_the_column_named(tmp_path):
    data = _log(12)
    write_shards([data], tmp_path / "sh", shards=2, position="pos")
    with pytest.raises(ValueError, match="shown positions are column 'pos'"):
        ShardStream.open(tmp_path / "sh")
    stream = ShardStream.open(tmp_path / "sh", position="pos", read_rows=5)  # reads cut sessions
    assert stream.feature_names == ("f1", "f2")
    read = RankingData.concat(list(stream.chunks()))
    assert sorted(read.query_ids.tolist()) == sorted(data.query_ids.tolist())
    for q in data.query_ids.tolist():
        assert positions_of(read, q) == positions_of(data, q)


def test_a_bad_log_shard_is_refused_at_open_naming_session_and_row(tmp_path):
    (tmp_path / "sh").mkdir()
    frame = pd.DataFrame({"qid": ["a", "a", "b", "b"], "label": [1, 0, 0, 1], "pos": [1, 2, 1, 3], "f": 0.0})
    pq.write_table(pa_table(frame), tmp_path / "sh" / "p0.parquet")
    with pytest.raises(
        ValueError, match=r"p0.parquet: row 4: session 'b': position 3 but no row at position 2"
    ):
        ShardStream.open(tmp_path / "sh", position="pos")


def test_a_session_split_across_shards_is_named_with_its_rows(tmp_path):
    (tmp_path / "sh").mkdir()
    for name, rows in (("p0", ["a", "b"]), ("p1", ["c", "b"])):
        frame = pd.DataFrame({"qid": rows, "label": [1, 0], "pos": [1, 1], "f": 0.0})
        pq.write_table(pa_table(frame), tmp_path / "sh" / f"{name}.parquet")
    with pytest.raises(ValueError, match=r"p1.parquet: row 2: query / session 'b' is in two shards \(also in "
                       r"p0.parquet, row 2\)"):  # fmt: skip
        ShardStream.open(tmp_path / "sh", position="pos")


def pa_table(frame):
    import pyarrow as pa

    return pa.Table.from_pandas(frame, preserve_index=False)


def positions_of(data: RankingData, query: str) -> list[int]:
    q = data.query_ids.tolist().index(query)
    return data.shown_positions[data.query_offsets[q] : data.query_offsets[q + 1]].tolist()


def test_an_experiment_spec_reads_a_log_by_its_position_col(tmp_path):
    from ctxrank.experiments import load_spec
    from ctxrank.experiments import runner as runner_mod
    from ctxrank.experiments.evidence import spec_from_record

    rows = ["session,pos,click,f1"] + [
        f"s{s},{p},{int(p == 1)},{s * p}" for s in range(20) for p in (1, 2, 3)
    ]
    (tmp_path / "log.csv").write_text("\n".join(rows) + "\n")
    text = """name = "log"
[data]
file = "log.csv"
query_col = "session"
label_col = "click"
{extra}
[runs]
count = 1
[models.lambdamart]
model = "lambdamart"
[models.mlp]
model = "mlp"
"""
    (tmp_path / "log.toml").write_text(text.format(extra='position_col = "pos"'))
    spec = load_spec(tmp_path / "log.toml")
    assert spec.data.columns.position_col == "pos"
    unit = runner_mod.load_unit(spec, 0, 0)
    assert unit.train.feature_names == ("f1",) and unit.train.shown_positions is not None
    again = spec_from_record({"spec": spec.to_dict(), "fingerprint": spec.fingerprint()})
    assert again.data.columns.position_col == "pos"
    (tmp_path / "plain.toml").write_text(text.format(extra='numeric = ["f1"]'))
    plain = load_spec(tmp_path / "plain.toml")
    assert "position_col" not in plain.to_dict()["data"] and plain.fingerprint() != spec.fingerprint()
    with pytest.raises(ValueError, match=r"\[data\] position_col 'session' is also the query_col"):
        load_spec(tmp_path / "log.toml", ["data.position_col=session"])
