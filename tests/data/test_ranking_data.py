"""RankingData.from_frame / from_arrays: missing query ids, labels and features, and text labels, are
errors naming the column and the row."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pandas as pd
import pytest

from ctxrank.data.ranking_data import RankingData


def _frame(**columns) -> pd.DataFrame:
    base = {"q": [1, 1, 2, 2], "y": [1, 0, 1, 0], "x": [0.1, 0.2, 0.3, 0.4]}
    return pd.DataFrame({**base, **columns}, index=[10, 11, 12, 13])


@pytest.mark.parametrize(
    "q",
    [
        [1.0, 1.0, np.nan, 2.0],
        ["a", "a", None, "b"],
        pd.array([1, 1, None, 2], dtype="Int64"),
        pd.array(["a", "a", None, "b"], dtype="string"),
        pd.Categorical(["a", "a", None, "b"]),
    ],
    ids=["float-nan", "object-none", "Int64-NA", "string-NA", "category-NaN"],
)
def test_a_missing_query_id_names_the_column_and_row(q):
    # a missing query id is named by its column and row, not NumPy's "'list' argument must have no negative
    # elements"
    with pytest.raises(ValueError, match=r"^query column 'q': row 2 \(index 12\) has no query id"):
        RankingData.from_frame(_frame(q=q), query="q", label="y")


@pytest.mark.parametrize(
    "qid",
    [np.array(["a", None, "b"], dtype=object), np.array([1.0, np.nan, 2.0], dtype=object), [1, pd.NA, 2]],
    ids=["object-None", "object-NaN", "list-NA"],
)
def test_from_arrays_with_a_missing_query_id_names_the_row(qid):
    with pytest.raises(ValueError, match=r"^qid: row 1 has a missing query id"):
        RankingData.from_arrays(np.ones((3, 1)), [1, 0, 1], qid)


@pytest.mark.parametrize(
    "y", [[1.0, np.nan, 1.0, 0.0], pd.array([1, None, 1, 0], dtype="Int64"), [1, None, 1, 0]]
)
def test_a_missing_label_names_the_column_and_row(y):
    with pytest.raises(ValueError, match=r"^label column 'y': row 1 \(index 11\) has no label"):
        RankingData.from_frame(_frame(y=y), query="q", label="y")


def test_a_missing_feature_names_the_column_and_row():
    with pytest.raises(ValueError, match=r"^X: row 1 \(index 11\), column 'x' is NaN, missing or infinite"):
        RankingData.from_frame(_frame(x=[0.1, None, 0.3, 0.4]), query="q", label="y")


def test_text_labels_say_labels_must_be_numbers_and_how_to_map_them():
    # the hint for a text label speaks of labels, not of --categorical (features)
    with pytest.raises(ValueError) as info:
        RankingData.from_frame(_frame(y=["yes", "no", "no", "yes"]), query="q", label="y")
    message = str(info.value)
    assert message.startswith("label column 'y' holds text ('no', 'yes'): labels must be numbers")
    assert "df['y'] = df['y'].map({'yes': 1, 'no': 0})" in message and "categorical" not in message
    with pytest.raises(ValueError, match=r"holds text \('bad', 'good', 'ok'\): .* higher = more relevant"):
        RankingData.from_frame(_frame(y=pd.Categorical(["good", "bad", "ok", "good"])), query="q", label="y")
    numeric_text = RankingData.from_frame(_frame(y=["1", "0", "2", "0"]), query="q", label="y")
    assert numeric_text.labels.tolist() == [1, 0, 2, 0]


def test_positions_follow_rows_through_regrouping_subset_and_concat():
    X = np.arange(10, dtype=np.float32).reshape(5, 2)
    data = RankingData.from_arrays(X, [1, 0, 0, 1, 0], ["b", "a", "b", "a", "a"], position=[1, 1, 2, 2, 3])
    assert data.query_ids.tolist() == ["b", "a"]
    assert data.shown_positions.tolist() == [1, 2, 1, 2, 3]
    assert data.shown_positions.dtype == np.int32
    assert data.subset([1]).shown_positions.tolist() == [1, 2, 3]
    assert RankingData.concat([data, data.subset([0])]).shown_positions.tolist() == [1, 2, 1, 2, 3, 1, 2]
    assert data.with_features(X[:, :1]).shown_positions is data.shown_positions


@pytest.mark.parametrize("bad", [[1, 0, 2, 3, 1], [1, 1.5, 2, 3, 1], [1, 2, 3], [1, 2, float("nan"), 1, 1]])
def test_positions_refuse_what_is_not_a_one_based_whole_number(bad):
    X = np.zeros((5, 2), np.float32)
    with pytest.raises(ValueError, match="position"):
        RankingData.from_arrays(X, None, [0, 0, 0, 1, 1], position=bad)


def test_log_and_labelled_data_do_not_concatenate():
    X = np.zeros((2, 1), np.float32)
    log = RankingData.from_arrays(X, [1, 0], [0, 0], position=[1, 2])
    with pytest.raises(ValueError, match="interaction log"):
        RankingData.concat([log, RankingData.from_arrays(X, [1, 0], [0, 0])])


def _full_data() -> RankingData:
    """A RankingData with every optional field set."""
    X = np.arange(12, dtype=np.float32).reshape(6, 2)
    data = RankingData.from_arrays(
        X, [1, 0, 2, 0, 1, 0], [0, 0, 0, 1, 1, 1], position=[1, 2, 3, 1, 2, 3],
        categorical=np.arange(6).reshape(6, 1) % 3, categorical_names=("c",), categorical_cardinalities=(3,),
    )
    return replace(
        data, docids=np.array([f"d{i}" for i in range(6)]), group_ids=np.array(["g0", "g1"])
    )


def test_row_fields_name_every_per_row_field():
    """What moves with a row (subset, shuffling, top-k truncation, LightGBM's subsets) is listed once:
    a per-row field added to RankingData and not to ``row_fields`` fails here."""
    data = _full_data()
    values = {f.name: getattr(data, f.name) for f in fields(data)}
    per_row = {k for k, v in values.items() if isinstance(v, np.ndarray) and v.shape[:1] == (data.n_items,)}
    assert per_row - {"features"} == set(data.row_fields(np.arange(data.n_items)))


def test_reordering_and_truncating_rows_keep_every_per_row_field_aligned():
    from ctxrank.data.choice import shuffle_within_queries
    from ctxrank.data.lists import truncate_top_k

    data = _full_data()

    def rows(d: RankingData) -> dict:
        columns = (d.features[:, 0], d.labels, d.categorical[:, 0], d.shown_positions)
        return {docid: values for docid, *values in zip(d.docids, *columns, strict=True)}

    shuffled = shuffle_within_queries(data, seed=3)
    cut, _ = truncate_top_k(data, -data.features[:, 0], 2)
    assert rows(shuffled) == rows(data)
    assert rows(cut) == {d: v for d, v in rows(data).items() if d in set(cut.docids)} and cut.n_items == 4
    assert cut.group_ids.tolist() == ["g0", "g1"]
