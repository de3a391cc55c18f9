"""Real choice datasets (ctxrank.data.choice): loaders, registry folds by decision maker, group ids,
the row-order helpers, and the order warning of order-reading models."""

import shutil
import warnings

import numpy as np
import pytest

from ctxrank.data.choice import (
    LAYOUTS,
    choice_frame,
    load_choice,
    shuffle_within_queries,
    sorted_feature_columns,
)
from ctxrank.data.registry import get_spec, is_available, load_fold, load_split
from ctxrank.data.split import group_split_indices, split_queries
from ctxrank.data.synth_choice import make_choice_sessions
from tests.conftest import make_ranking_data, rows_sorted_by

# situations, items, decision makers, list lengths: the published counts (README of the data)
SIZES = {
    "modecanada": (4324, 15520, 4324, (2, 4)),
    "swissmetro": (10719, 30474, 1191, (2, 3)),
    "car": (4654, 27924, 4654, (6, 6)),
    "electricity": (4308, 17232, 361, (4, 4)),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_each_dataset_loads_as_one_choice_per_situation(name):
    data = load_choice(name)
    n_q, n_items, n_groups, (lo, hi) = SIZES[name]
    assert (data.n_queries, data.n_items) == (n_q, n_items)
    assert len(set(data.group_ids)) == n_groups and data.group_ids.shape == (n_q,)
    assert data.query_lengths.min() == lo and data.query_lengths.max() == hi
    chosen = np.add.reduceat(data.labels, data.query_offsets[:-1])
    assert (chosen == 1).all() and set(np.unique(data.labels)) == {0.0, 1.0}
    layout = LAYOUTS[name]
    assert data.feature_names == layout.numeric and data.categorical_names == layout.categorical
    assert data.categorical_names[0] == "alt"
    ids = {"case", "ID", "GROUP", "SURVEY", "SP", "rownames", "id", "chid", "CHOICE", "noalt"}
    assert not ids & set(data.feature_names)  # id columns are never features
    assert is_available(name) and get_spec(name).embedded


def test_unavailable_alternatives_and_unknown_choices_are_dropped():
    frame = choice_frame("swissmetro")
    raw = __import__("pandas").read_csv(choice_frame.__globals__["choice_dir"]() / "swissmetro.csv.gz")
    known = raw[raw["CHOICE"] != 0]
    assert frame.attrs["dropped_situations"] == 9
    assert len(frame) == int(known[["TRAIN_AV", "SM_AV", "CAR_AV"]].to_numpy().sum())
    no_car = frame.groupby("situation", sort=False)["alt"].apply(tuple)
    assert ("train", "swissmetro") in set(no_car)  # CAR_AV = 0: the car is not offered
    chosen = frame[frame["chosen"] == 1].set_index("situation")["alt"]
    codes = {"train": 1, "swissmetro": 2, "car": 3}
    assert (chosen.map(codes).to_numpy() == known["CHOICE"].to_numpy()).all()


def test_the_checksum_is_verified_on_every_read(tmp_path):
    from ctxrank.data.choice import choice_dir

    shutil.copy(choice_dir() / "electricity.csv.gz", tmp_path / "electricity.csv.gz")
    assert load_choice("electricity", tmp_path).n_queries == 4308
    with open(tmp_path / "electricity.csv.gz", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ValueError, match="sha256"):
        load_choice("electricity", tmp_path)


@pytest.mark.parametrize("name", ["swissmetro", "electricity"])
def test_folds_split_by_decision_maker(name):
    f1, f2 = load_fold(name, 1), load_fold(name, 2)
    persons = [set(getattr(f1, s).group_ids) for s in ("train", "valid", "test")]
    assert not (persons[0] & persons[1] or persons[0] & persons[2] or persons[1] & persons[2])
    assert sum(getattr(f1, s).n_queries for s in ("train", "valid", "test")) == SIZES[name][0]
    assert set(f1.test.query_ids) != set(f2.test.query_ids)  # fold k: seed k - 1
    whole = load_split(name, "all")
    assert whole.n_queries == SIZES[name][0]
    # the vocabulary is the training split's (codes below each column's cardinality, all seen in train)
    cards = np.array(f1.train.categorical_cardinalities)
    assert (f1.train.categorical.max(0) < cards).all() and (f1.test.categorical.max(0) < cards).all()
    assert f1.train.info["categorical_encoder"]["columns"] == list(LAYOUTS[name].categorical)


def test_group_split_keeps_groups_whole_and_is_deterministic():
    data = make_ranking_data(90, seed=3)
    data = type(data)(**{**data.__dict__, "group_ids": np.array([f"p{i // 9}" for i in range(90)])})
    tr, _, te, record = split_queries(data, seed=4, by_group=True)
    assert record["groups"] == {"train": 6, "valid": 2, "test": 2}
    assert record["queries"] == {"train": 54, "valid": 18, "test": 18}
    assert not set(tr.group_ids) & set(te.group_ids)
    a = group_split_indices(data.group_ids, seed=4)
    b = group_split_indices(data.group_ids, seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    with pytest.raises(ValueError, match="no group ids"):
        split_queries(make_ranking_data(20), by_group=True)


def test_sorted_columns_are_found_and_shuffling_removes_the_order():
    data = make_ranking_data(60, min_len=3, seed=5)
    sorted_data = rows_sorted_by(data, 1)
    assert sorted_feature_columns(sorted_data) == ["f2"]
    assert sorted_feature_columns(data) == []
    shuffled = shuffle_within_queries(sorted_data, seed=0)
    assert sorted_feature_columns(shuffled) == []
    for q in range(data.n_queries):  # the same items, each query in place
        s = data.query_slice(q)
        assert sorted(shuffled.features[s, 0].tolist()) == sorted(sorted_data.features[s, 0].tolist())
    assert sorted_feature_columns(load_choice("swissmetro")) == ["headway"]  # train >= metro >= car (0)


def test_an_order_reading_model_is_warned_about_sorted_rows_unless_shuffled():
    from ctxrank.config import resolve_config
    from ctxrank.training.run import run_training

    data = rows_sorted_by(make_ranking_data(40, min_len=3, seed=6), 0)
    base = ["model=dcm", "model_params.hidden=8", "model_params.embed=4", "train.max_epochs=1"]
    with pytest.warns(UserWarning, match="sorted by f1"):
        run_training(resolve_config(None, base), data, data, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_training(resolve_config(None, [*base, "train.shuffle_items=true"]), data, data, progress=False)
        listnet = resolve_config(None, ["model=listnet", "train.max_epochs=1"])
        run_training(listnet, data, data, progress=False)


def test_synthetic_sessions_check_their_options():
    assert make_choice_sessions(np.int64(3), min_items=2, max_items=3).table.shape[0] >= 6
    for kwargs, message in (
        ({"n_sessions": 2**70}, "n_sessions must be at most"),
        ({"n_sessions": True}, "n_sessions must be a positive integer"),
        ({"utility_scale": float("inf")}, "utility_scale must be a positive number"),
    ):
        with pytest.raises(ValueError, match=message):
            make_choice_sessions(**{"n_sessions": 3, **kwargs})
