"""The data ``predict`` / ``evaluate --model`` read for a saved model (``DataSource.load``): a
LETOR file's feature count against the model's (a 46-feature MQ2008 model on a 45-feature
OHSUMED file must not write scores), a table's columns against the model's table spec."""

from __future__ import annotations

import pytest

from ctxrank.cli._options import note
from ctxrank.data.sources import DataSource, ModelInputs


def load_data_rows(file, *, purpose, n_features=None, saved_table=None):
    """The rows ``predict`` reads from ``file`` for a model of ``n_features`` / ``saved_table``."""
    model = ModelInputs(n_features=n_features, table=saved_table)
    return DataSource(data_file=file).load(purpose=purpose, model=model, note=note)


def _letor(path, n_rows, n_features, *, sparse=False):
    lines = []
    for i in range(n_rows):
        feats = [(j, (i + j) % 7 / 7) for j in range(1, n_features + 1)]
        if sparse:
            feats = [(j, v) for j, v in feats if (i + j) % 3 == 0] or [(1, 0.5)]
        lines.append(f"{i % 3} qid:{i // 4} " + " ".join(f"{j}:{v:.3f}" for j, v in feats))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_dense_file_with_fewer_features_than_the_model_is_an_error(tmp_path):
    f = _letor(tmp_path / "ohsumed.txt", 12, 45)
    with pytest.raises(ValueError, match=r"every row lists 45 features but the model was trained on 46"):
        load_data_rows(str(f), n_features=46, purpose="predict")


def test_file_with_more_features_than_the_model_is_an_error(tmp_path):
    f = _letor(tmp_path / "wide.txt", 12, 47)
    with pytest.raises(ValueError, match=r"lists feature index 47 but the model was trained on 46"):
        load_data_rows(str(f), n_features=46, purpose="predict")


def test_sparse_file_below_the_model_count_is_padded_with_a_note(tmp_path, capsys):
    f = _letor(tmp_path / "sparse.txt", 12, 10, sparse=True)
    data, _ = load_data_rows(str(f), n_features=46, purpose="predict")
    assert data.n_features == 46 and not data.features[:, 10:].any()
    err = capsys.readouterr().err
    assert "ctxrank: note:" in err and "(36) are absent and read as 0" in err
    assert data.feature_names[-1] == "f46"


def test_exact_count_loads_silently(tmp_path, capsys):
    f = _letor(tmp_path / "ok.txt", 12, 46)
    data, _ = load_data_rows(str(f), n_features=46, purpose="predict")
    assert data.n_features == 46 and capsys.readouterr().err == ""


def test_table_with_extra_columns_against_the_saved_spec_is_an_error(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("q,y,a,b,extra\n1,0,0.5,0.1,9\n1,1,0.2,0.3,8\n")
    spec = {"query": "q", "label": "y", "docid": None, "numeric": ["a", "b"], "categorical": [],
            "numeric_default": True}  # fmt: skip
    with pytest.raises(ValueError, match=r"column\(s\) \['extra'\] are not in the model's saved table spec"):
        load_data_rows(str(f), purpose="predict", saved_table=spec)
    given = {**spec, "numeric_default": False}  # trained with --numeric a,b: other columns are not features
    data, _ = load_data_rows(str(f), purpose="predict", saved_table=given)
    assert data.n_features == 2
    f.write_text("q,y,a,b\n1,0,0.5,0.1\n1,1,0.2,0.3\n")
    data, _ = load_data_rows(str(f), purpose="predict", saved_table=spec)
    assert data.n_features == 2


def test_cli_predict_refuses_another_datasets_file(tmp_path, capsys):
    """End to end: a model trained on 46 features, a dense 45-feature file: exit 2, nothing written."""
    from ctxrank.cli import main

    train = _letor(tmp_path / "train.txt", 40, 46)
    out = tmp_path / "model"
    sets = ["--set", "model_params.n_estimators=2", "--set", "model_params.min_data_in_leaf=2"]
    assert main(["train", "--data", str(train), "--model", "lambdamart", "--out", str(out), *sets]) == 0
    other = _letor(tmp_path / "other.txt", 12, 45)
    capsys.readouterr()
    rc = main(["predict", "--model", str(out), "--data", str(other), "--output", str(tmp_path / "s.txt")])
    err = capsys.readouterr().err
    assert rc == 2 and "every row lists 45 features" in err, err
    assert not (tmp_path / "s.txt").exists()


def test_cli_table_model_trained_on_every_column_refuses_an_extra_column(tmp_path, capsys):
    from ctxrank.cli import main

    rows = [f"s{i // 4},{int(i % 4 == 0)},{(i * 7) % 11},{(i * 3) % 5}" for i in range(40)]
    train = tmp_path / "train.csv"
    train.write_text("session,chosen,price,stops\n" + "\n".join(rows) + "\n")
    out = tmp_path / "m"
    argv = ["train", "--model", "lambdamart", "--data", str(train), "--query-col", "session"]
    argv += ["--label-col", "chosen", "--out", str(out), "--set", "model_params.n_estimators=2"]
    argv += ["--set", "model_params.min_data_in_leaf=2", "--no-progress"]
    assert main(argv) == 0
    extra = tmp_path / "new.csv"
    extra.write_text("session,chosen,price,stops,dep_hour\n" + "\n".join(r + ",7" for r in rows) + "\n")
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--data", str(extra), "--output", str(tmp_path / "s")]) == 2
    assert "['dep_hour'] are not in the model's saved table spec" in capsys.readouterr().err
    assert main(["predict", "--model", str(out), "--data", str(train), "--output", str(tmp_path / "s")]) == 0


def test_a_pooled_split_draws_one_random_split_of_every_query_of_a_dataset_from_its_seed():
    """``load_pooled_split``: every query of a registered dataset once, split at random from the seed
    (a choice dataset by decision maker), as an experiment's ``protocol = "random-splits"``."""
    source = DataSource(dataset="mq2008", split_fractions=(0.5, 0.25, 0.25))
    first, again = source.load_pooled_split(0), source.load_pooled_split(0)
    ids = [set(map(str, d.query_ids)) for d in (first.train, first.valid, first.test)]
    assert sum(map(len, ids)) == len(set().union(*ids)) == 784  # MQ2008's queries, each once
    assert first.split["fractions"] == [0.5, 0.25, 0.25] and "pooled" in first.split
    assert first.test.query_ids.tolist() == again.test.query_ids.tolist()
    assert first.test.query_ids.tolist() != source.load_pooled_split(1).test.query_ids.tolist()
    choice = DataSource(dataset="electricity").load_pooled_split(0)
    people = [set(d.group_ids.tolist()) for d in (choice.train, choice.valid, choice.test)]
    assert not (people[0] & people[1] or people[0] & people[2] or people[1] & people[2])
    with pytest.raises(ValueError, match="a pooled split is of a registered dataset"):
        DataSource(data_file="d.txt").load_pooled_split(0)
