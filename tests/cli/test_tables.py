"""Tables (CSV / Parquet) end to end in `ctxrank train`, `predict`, `evaluate`; `ctxrank synth`."""

import importlib.util
import json

import numpy as np
import pandas as pd
import pytest

from ctxrank.cli import main
from ctxrank.data.letor import read_letor
from ctxrank.data.split import query_split_indices
from ctxrank.data.synth_choice import make_choice_sessions
from ctxrank.data.table import TableSpec, read_table
from ctxrank.training.checkpoint import load_model, read_meta
from tests.conftest import REPO

MQ = REPO / "src" / "ctxrank" / "datasets" / "mq2008"
QUICK = ["--set", "train.max_epochs=2", "--set", "train.threads=1", "--no-progress"]
COLS = ["--query-col", "session", "--label-col", "chosen", "--docid-col", "item"]
CAT = ["--categorical", "airline,cabin"]
SMALL_QILCM = [
    "--set",
    "model_params.encoder_width=8",
    "--set",
    "model_params.att_hidden=[16]",
    "--set",
    "model_params.rank_hidden=[16]",
]
SMALL_MLP = ["--set", "model_params.hidden=[8]"]
# choice data (one chosen item a session): train reports the choice metrics (ctxrank.metrics.CHOICE_METRICS)
METRICS = ("p@1", "recall@3", "mrr", "loglik")


QILCM_SEED = 4


@pytest.fixture(scope="module")
def table():
    """150 sessions s0..s149; one carrier appears only in a test session, one only in a validation
    session of the qilcm run's split (seed QILCM_SEED)."""
    t = make_choice_sessions(150, min_items=5, max_items=20, seed=3).table
    _, valid_q, test_q = query_split_indices(150, (0.6, 0.2, 0.2), seed=QILCM_SEED)
    for q, carrier in ((test_q[0], "XX"), (valid_q[0], "YY")):
        t.loc[t.index[t["session"] == f"s{q}"][0], "airline"] = carrier
    return t


@pytest.fixture(scope="module")
def csv_file(tmp_path_factory, table):
    path = tmp_path_factory.mktemp("tables") / "sessions.csv"
    table.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def qilcm_run(tmp_path_factory, csv_file):
    out = tmp_path_factory.mktemp("runs") / "q"
    argv = ["train", "--model", "qilcm", "--data", str(csv_file), *COLS, *CAT, "--out", str(out)]
    assert main([*argv, *SMALL_QILCM, *QUICK, "--seed", str(QILCM_SEED)]) == 0
    return out


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory, csv_file):
    out = tmp_path_factory.mktemp("runs") / "m"
    argv = ["train", "--model", "mlp", "--data", str(csv_file), *COLS, *CAT, "--out", str(out)]
    assert main([*argv, *SMALL_MLP, *QUICK]) == 0
    return out


def _evaluate_json(capsys, *argv):
    capsys.readouterr()
    assert main(["evaluate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_evaluate_defaults_to_the_choice_metrics_on_choice_data(qilcm_run, table, tmp_path, capsys):
    from ctxrank.cli.evaluate import _CHOICE
    from ctxrank.metrics import CHOICE_METRICS

    assert _CHOICE == CHOICE_METRICS == METRICS  # the help text's copy is the library's list
    test_csv = _test_split_file(qilcm_run, table, tmp_path / "test.csv")
    got = _evaluate_json(capsys, "--model", str(qilcm_run), "--data", str(test_csv))
    assert list(got["metrics"]) == list(CHOICE_METRICS)  # as `train` reported them
    graded = tmp_path / "graded.csv"
    t = pd.read_csv(test_csv)
    t.loc[t.index[0], "chosen"] = 2  # a grade: not choice data, so NDCG and MAP
    t.to_csv(graded, index=False)
    got = _evaluate_json(capsys, "--model", str(qilcm_run), "--data", str(graded))
    assert list(got["metrics"]) == ["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"]


def _test_split_file(run, table, path):
    """The rows of the run's test queries, in file order (what `--data` held out)."""
    ids = json.loads((run / "test_metrics.json").read_text())["query_ids"]
    part = table[table["session"].isin(set(ids))]
    assert part["session"].nunique() == len(ids)
    if str(path).endswith((".parquet", ".pq")):
        part.to_parquet(path, index=False)
    else:
        part.to_csv(path, index=False)
    return path


# ------------------------------------------------------------------------------------- train --data
def test_data_split_is_recorded_and_printed(tmp_path, csv_file, capsys):
    out = tmp_path / "m"
    argv = ["train", "--model", "mlp", "--data", str(csv_file), *COLS, *CAT, "--out", str(out)]
    assert main([*argv, *SMALL_MLP, *QUICK, "--seed", "11"]) == 0
    text = capsys.readouterr().out
    assert "split: 150 queries of" in text and "(seed 11, 60/20/20 %): train 90, valid 30, test 30" in text
    meta = read_meta(out)
    record = json.loads((out / "test_metrics.json").read_text())
    assert meta["split"] == record["split"]
    split = meta["split"]
    assert split["seed"] == 11 and split["fractions"] == [0.6, 0.2, 0.2]
    assert split["queries"] == {"train": 90, "valid": 30, "test": 30}
    assert sum(split["items"].values()) == len(pd.read_csv(csv_file))
    # the same seed draws the same test queries; another seed others
    again = tmp_path / "again"
    assert main([*argv[:-1], str(again), *SMALL_MLP, *QUICK, "--seed", "11"]) == 0
    other = tmp_path / "other"
    assert main([*argv[:-1], str(other), *SMALL_MLP, *QUICK, "--seed", "12"]) == 0
    ids = [json.loads((d / "test_metrics.json").read_text())["query_ids"] for d in (out, again, other)]
    assert ids[0] == ids[1] and ids[0] != ids[2]


def test_table_spec_is_saved(qilcm_run, table):
    spec = read_meta(qilcm_run)["table"]
    assert spec["query"] == "session" and spec["label"] == "chosen" and spec["docid"] == "item"
    assert spec["numeric"] == ["price", "duration", "stops", "dep_hour"]  # every other column, file order
    assert spec["categorical"] == ["airline", "cabin"]
    # the encoder is fitted on the training queries only: XX (test only) and YY (valid only) are unknown
    test_ids = json.loads((qilcm_run / "test_metrics.json").read_text())["query_ids"]
    train_q, _, test_q = query_split_indices(150, (0.6, 0.2, 0.2), seed=QILCM_SEED)
    assert test_ids == [f"s{q}" for q in test_q]
    train_rows = table[table["session"].isin({f"s{q}" for q in train_q})]
    vocab = spec["encoder"]["vocab"]
    assert vocab["airline"] == sorted(set(train_rows["airline"])) and "XX" not in vocab["airline"]
    assert vocab["cabin"] == sorted(set(train_rows["cabin"]))
    assert {"XX", "YY"} <= set(table["airline"])


def test_predict_and_evaluate_reproduce_test_metrics(qilcm_run, table, tmp_path, capsys):
    test_csv = _test_split_file(qilcm_run, table, tmp_path / "test.csv")
    saved = json.loads((qilcm_run / "test_metrics.json").read_text())
    via_model = _evaluate_json(capsys, "--model", str(qilcm_run), "--data", str(test_csv))
    assert via_model["query_ids"] == saved["query_ids"]
    for k in METRICS:
        assert via_model["metrics"][k] == pytest.approx(saved["metrics"][k], abs=1e-6), k
    scores = tmp_path / "scores.txt"
    assert main(["predict", "--model", str(qilcm_run), "--data", str(test_csv), "--output", str(scores)]) == 0
    assert np.loadtxt(scores).shape == (len(pd.read_csv(test_csv)),)
    via_scores = _evaluate_json(
        capsys, "--scores", str(scores), "--data", str(test_csv), "--query-col", "session",
        "--label-col", "chosen", "--metrics", ",".join(METRICS),
    )  # fmt: skip
    for k in METRICS:
        assert via_scores["metrics"][k] == pytest.approx(saved["metrics"][k], abs=1e-6), k
    # the column options may be repeated when they agree with the saved spec
    again = _evaluate_json(capsys, "--model", str(qilcm_run), "--data", str(test_csv), *COLS, *CAT)
    assert again["metrics"] == via_model["metrics"]


def test_parquet_input(tmp_path, table, capsys):
    pq = tmp_path / "sessions.parquet"
    table.to_parquet(pq, index=False)
    out = tmp_path / "m"
    argv = ["train", "--model", "mlp", "--data", str(pq), *COLS, *CAT, "--out", str(out)]
    assert main([*argv, *SMALL_MLP, *QUICK]) == 0
    test_pq = _test_split_file(out, table, tmp_path / "test.pq")
    saved = json.loads((out / "test_metrics.json").read_text())["metrics"]
    got = _evaluate_json(capsys, "--model", str(out), "--data", str(test_pq))["metrics"]
    for k in METRICS:
        assert got[k] == pytest.approx(saved[k], abs=1e-6), k


def test_train_valid_test_tables(tmp_path, table, capsys):
    sessions = table["session"].unique()
    parts = {"tr": sessions[:90], "va": sessions[90:120], "te": sessions[120:]}
    files = {}
    for name, ids in parts.items():
        part = table[table["session"].isin(set(ids))].copy()
        if name == "va":  # other column order, an extra column, a category unseen in training
            part = part[
                ["cabin", "chosen", "dep_hour", "session", "stops", "item", "airline", "price", "duration"]
            ]
            part["note"] = "x"
            part.loc[part.index[:3], "airline"] = "ZZ"
        files[name] = tmp_path / f"{name}.csv"
        part.to_csv(files[name], index=False)
    out = tmp_path / "m"
    argv = ["train", "--model", "mlp", "--train", str(files["tr"]), "--valid", str(files["va"])]
    argv += ["--test", str(files["te"]), *COLS, *CAT, "--numeric", "price,duration,stops,dep_hour"]
    assert main([*argv, "--out", str(out), *SMALL_MLP, *QUICK]) == 0
    meta = read_meta(out)
    assert meta["table"]["numeric"] == ["price", "duration", "stops", "dep_hour"]
    assert meta["feature_names"] == ["price", "duration", "stops", "dep_hour"]
    assert "split" not in meta
    train_airlines = set(pd.read_csv(files["tr"])["airline"])
    assert meta["table"]["encoder"]["vocab"]["airline"] == sorted(train_airlines)
    saved = json.loads((out / "test_metrics.json").read_text())["metrics"]
    got = _evaluate_json(capsys, "--model", str(out), "--data", str(files["te"]))["metrics"]
    for k in METRICS:
        assert got[k] == pytest.approx(saved[k], abs=1e-6), k


# ----------------------------------------------------------------------------------------- predict
def test_unseen_and_missing_values_at_predict_time(qilcm_run, table, tmp_path, capsys):
    train_q = query_split_indices(150, (0.6, 0.2, 0.2), seed=QILCM_SEED)[0]
    two = {f"s{q}" for q in train_q[:2]}  # training sessions: every category known
    new = table[table["session"].isin(two)].drop(columns=["chosen"]).copy()  # no labels
    new = new.astype({"price": object, "airline": object, "cabin": object})
    new.iloc[0, new.columns.get_loc("airline")] = "ZZ"  # unseen carrier
    new.iloc[1, new.columns.get_loc("cabin")] = "first"  # unseen cabin
    new.iloc[2, new.columns.get_loc("airline")] = None  # missing category
    new.iloc[3, new.columns.get_loc("price")] = None  # missing number
    path = tmp_path / "new.csv"
    new.to_csv(path, index=False)
    scores = tmp_path / "s.txt"
    argv = ["predict", "--model", str(qilcm_run), "--data", str(path), "--output", str(scores)]
    assert main(argv) == 2  # the missing number stays missing; qilcm was trained without a strategy
    err = capsys.readouterr().err
    assert "1 missing feature value(s) (NaN; first: feature price" in err and "--null-fill RULE" in err
    assert main([*argv, "--null-fill", "0"]) == 0
    values = np.loadtxt(scores)
    assert values.shape == (len(new),) and np.isfinite(values).all()
    # through the library: the saved spec maps unseen and missing categories to the reserved code 0
    spec = TableSpec.from_dict(read_meta(qilcm_run)["table"])
    data, rows = spec.read(path, scoring=True, null_fill=0.0)
    assert data.categorical_names == ("airline", "cabin")
    codes = data.categorical[np.argsort(rows)]  # file order
    assert codes[0, 0] == 0 and codes[1, 1] == 0 and codes[2, 0] == 0
    assert (codes[3:] > 0).all() and codes[0, 1] > 0 and codes[1, 0] > 0
    assert data.features[np.argsort(rows)][3, 0] == 0.0 and data.info["null_filled"] == 1
    assert data.info["categorical_unknown"] == 2 and data.info["categorical_missing"] == 1
    predictor = load_model(qilcm_run)
    np.testing.assert_allclose(predictor.predict(data)[np.argsort(rows)], values, rtol=1e-6, atol=1e-7)
    # an empty label column (sessions not yet decided) is not read either
    new.insert(2, "chosen", "")
    new.to_csv(path, index=False)
    argv = ["predict", "--model", str(qilcm_run), "--data", str(path), "--output", str(scores)]
    assert main([*argv, "--null-fill", "0", "--overwrite"]) == 0  # scores exists: replacing it is asked for
    np.testing.assert_allclose(np.loadtxt(scores), values, rtol=1e-6, atol=1e-7)


def test_a_run_refused_before_its_first_epoch_leaves_nothing_that_blocks_the_corrected_command(
    table, tmp_path, capsys
):
    """A table with a missing number, trained by qilcm without a missing-value strategy, is refused once
    the data are read (after the run's record was written): the refusal must not leave an "unfinished
    run" that the corrected command would have to --resume (with the refused config) or --overwrite."""
    holed = table.copy()
    holed.iloc[5, holed.columns.get_loc("price")] = None
    path = tmp_path / "holed.csv"
    holed.to_csv(path, index=False)
    out = tmp_path / "run"
    argv = [
        "train",
        "--model",
        "qilcm",
        "--data",
        str(path),
        *COLS,
        *CAT,
        "--out",
        str(out),
        *SMALL_QILCM,
        *QUICK,
    ]
    assert main(argv) == 2
    assert "missing feature value(s)" in capsys.readouterr().err
    assert not (out / "resume").exists()
    assert main([*argv, "--set", "train.missing=indicator"]) == 0
    assert (out / "ctxrank.json").is_file() and not (out / "resume").exists()


def test_predictions_are_in_file_row_order(mlp_run, table, tmp_path, capsys):
    shuffled = table.sample(frac=1.0, random_state=0).reset_index(drop=True)  # sessions interleaved
    files = {"sorted": tmp_path / "sorted.csv", "shuffled": tmp_path / "shuffled.csv"}
    table.to_csv(files["sorted"], index=False)
    shuffled.to_csv(files["shuffled"], index=False)
    assert read_table(files["shuffled"], query="session", label="chosen", numeric=()).info["regrouped"] == 1
    scores = {}
    for name, path in files.items():
        out = tmp_path / f"{name}.txt"
        assert main(["predict", "--model", str(mlp_run), "--data", str(path), "--output", str(out)]) == 0
        scores[name] = np.loadtxt(out)
    by_key = dict(zip(zip(table["session"], table["item"], strict=True), scores["sorted"], strict=True))
    expected = [by_key[k] for k in zip(shuffled["session"], shuffled["item"], strict=True)]
    np.testing.assert_allclose(scores["shuffled"], expected, rtol=1e-6, atol=1e-7)
    # evaluate --scores reads scores in the (unsorted) file's row order
    via_model = _evaluate_json(capsys, "--model", str(mlp_run), "--data", str(files["shuffled"]))
    via_scores = _evaluate_json(
        capsys, "--scores", str(tmp_path / "shuffled.txt"), "--data", str(files["shuffled"]),
        "--query-col", "session", "--label-col", "chosen",
    )  # fmt: skip
    for k in METRICS:
        assert via_scores["metrics"][k] == pytest.approx(via_model["metrics"][k], abs=1e-9), k


def test_rerank_with_a_table(tmp_path, csv_file, capsys):
    out = tmp_path / "rr"
    argv = ["train", "--model", "qilcm", "--initial", "lambdamart", "--top-k", "8", "--data", str(csv_file)]
    argv += [*COLS, *CAT, "--out", str(out), "--set", "rerank.initial_params.n_estimators=20"]
    assert main([*argv, *SMALL_QILCM, *QUICK]) == 0
    assert "LambdaMART) takes the categorical columns as LightGBM categorical" in capsys.readouterr().out
    assert read_meta(out)["table"]["categorical"] == ["airline", "cabin"]
    scores = tmp_path / "s.txt"
    assert main(["predict", "--model", str(out), "--data", str(csv_file), "--output", str(scores)]) == 0
    assert np.isfinite(np.loadtxt(scores)).all()


def test_baseline_on_a_table_saves_the_spec(tmp_path, csv_file, table, capsys):
    out = tmp_path / "lm"
    argv = ["train", "--model", "lambdamart", "--data", str(csv_file), "--query-col", "session"]
    argv += ["--label-col", "chosen", "--numeric", "price,duration,stops,dep_hour", "--out", str(out)]
    assert main([*argv, "--set", "model_params.n_estimators=10", "--no-progress"]) == 0
    meta = read_meta(out)
    assert meta["kind"] == "lightgbm" and meta["split"]["queries"]["test"] == 30
    assert meta["table"]["numeric"] == ["price", "duration", "stops", "dep_hour"]
    assert meta["table"]["categorical"] == [] and meta["table"]["encoder"] is None
    test_csv = _test_split_file(out, table, tmp_path / "test.csv")
    saved = json.loads((out / "test_metrics.json").read_text())["metrics"]
    got = _evaluate_json(capsys, "--model", str(out), "--data", str(test_csv))["metrics"]
    for k in METRICS:
        assert got[k] == pytest.approx(saved[k], abs=1e-9), k


def test_a_model_fitted_on_a_dataframe_names_the_items_of_a_trec_run_by_docid_col(table, csv_file, tmp_path):
    """A DataFrame estimator's saved table spec has no item id column: ``predict --docid-col`` adds it
    (item ids are never features), so the TREC run names the file's items; a feature column is refused."""
    from ctxrank.api import MLPRanker

    numeric = ["price", "duration", "stops", "dep_hour"]
    model = MLPRanker(max_epochs=1, hidden=(8,), random_state=0, threads=1)
    model.fit(table[numeric], table["chosen"], qid=table["session"]).save(tmp_path / "m")
    run = tmp_path / "run.trec"
    base = ["predict", "--model", str(tmp_path / "m"), "--data", str(csv_file), "--format", "trec"]
    assert main([*base, "--docid-col", "item", "--output", str(run)]) == 0
    pairs = {tuple(line.split()[0:3:2]) for line in run.read_text().splitlines()}
    assert pairs == set(zip(table["session"].astype(str), table["item"].astype(str), strict=True))
    assert main([*base, "--docid-col", "price", "--output", str(tmp_path / "bad.trec")]) == 2
    assert not (tmp_path / "bad.trec").exists()


# ------------------------------------------------------------------------------------------ errors
def test_spec_mismatch_is_an_error(qilcm_run, csv_file, tmp_path, capsys):
    base = ["predict", "--model", str(qilcm_run), "--data", str(csv_file), "--output", str(tmp_path / "s")]
    for extra, message in (
        (["--query-col", "item"], "--query-col item does not match the model's saved table spec"),
        (["--categorical", "airline"], "--categorical airline does not match the model's saved table spec"),
        (["--numeric", "price,stops"], "--numeric price,stops does not match"),
    ):
        assert main([*base, *extra]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--data", "{csv}", "--label-col", "chosen"], "is a table: give --query-col COL"),
        (["--data", "{csv}", "--query-col", "session"], "is a table: give --label-col COL"),
        (
            ["--data", "{csv}", "--query-col", "session", "--label-col", "chosen"],
            "list text columns with --categorical",
        ),
        (
            ["--train", "{mq}/S1.txt.gz", "--valid", "{mq}/S2.txt.gz", "--query-col", "qid"],
            "--query-col apply to table files (.csv",
        ),
        (["--dataset", "mq2008", "--categorical", "a"], "--categorical apply to table files"),
        (["--train", "{csv}", "--valid", "{mq}/S2.txt.gz"], "must all be tables or all LETOR files"),
        (["--data", "{csv}", "--train", "{csv}"], "give either --data FILE (split at random) or --train"),
        (["--train", "{csv}", "--valid", "{csv}", "--split-fractions", "0.5,0.3,0.2"], "applies to --data"),
        (["--data", "{csv}", *COLS, *CAT, "--split-fractions", "0.5,0.5,0.5"], "summing to 1"),
        (["--model", "ranksvm", "--data", "{csv}", *COLS, *CAT], "uses numeric features only"),
    ],
)
def test_train_errors(argv, message, csv_file, tmp_path, capsys):
    argv = [a.format(csv=csv_file, mq=MQ) for a in argv]
    model = [] if "--model" in argv else ["--model", "mlp"]
    quick = ["--no-progress"] if "ranksvm" in argv else QUICK  # a baseline refuses train.max_epochs
    assert main(["train", *model, *argv, "--out", str(tmp_path / "x"), *quick]) == 2
    assert message in capsys.readouterr().err


def test_evaluate_and_predict_errors(csv_file, mlp_run, tmp_path, capsys):
    scores = tmp_path / "s.txt"
    scores.write_text("0\n" * len(pd.read_csv(csv_file)))
    assert main(["evaluate", "--scores", str(scores), "--data", str(csv_file), "--query-col", "session"]) == 2
    assert "is a table: give --label-col COL" in capsys.readouterr().err
    assert main(["evaluate", "--scores", str(scores), "--data", str(csv_file)]) == 2
    assert "give --query-col COL (the query / session id column) and --label-col" in capsys.readouterr().err
    p = str(tmp_path / "p.txt")
    argv = ["predict", "--model", str(mlp_run), "--dataset", "mq2008", "--query-col", "q", "-o", p]
    assert main(argv) == 2
    assert "--query-col apply to table files" in capsys.readouterr().err
    letor = ["evaluate", "--model", str(mlp_run), "--data", str(MQ / "S1.txt.gz")]
    assert main([*letor, "--label-col", "chosen"]) == 2
    assert "--label-col apply to table files" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- synth
def test_synth_choice_writes_table_and_separate_chooser_file(tmp_path, capsys):
    out = tmp_path / "d" / "s.parquet"
    argv = ["synth", "choice", "--sessions", "20", "--seed", "2", "--out", str(out)]
    assert main([*argv, "--min-items", "4", "--max-items", "9"]) == 0
    text = capsys.readouterr().out
    assert "SYNTHETIC" in text and "P@1" in text and "hit@5" in text and "log-likelihood" in text
    frame = pd.read_parquet(out)
    ref = make_choice_sessions(20, min_items=4, max_items=9, seed=2)
    pd.testing.assert_frame_equal(frame, ref.table)
    assert "chooser_prob" not in frame.columns
    chooser = pd.read_csv(tmp_path / "d" / "s.chooser.csv")
    assert list(chooser.columns) == ["session", "item", "chooser_prob"]
    np.testing.assert_allclose(chooser["chooser_prob"], ref.chooser_prob, rtol=1e-8)
    data = read_table(out, query="session", label="chosen", categorical=["airline", "cabin"], docid="item")
    assert data.n_queries == 20 and data.feature_names == ("price", "duration", "stops", "dep_hour")
    csv = tmp_path / "s.csv"
    assert main(["synth", "choice", "--sessions", "5", "--out", str(csv), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["synthetic"] is True and summary["chooser_file"].endswith("s.chooser.csv")
    assert pd.read_csv(csv)["session"].nunique() == 5
    assert main(["synth", "choice", "--sessions", "5", "--out", str(tmp_path / "s.txt")]) == 2


def test_synth_letor_writes_a_readable_file(tmp_path, capsys):
    out = tmp_path / "l.txt.gz"
    argv = ["synth", "letor", "--queries", "7", "--items", "5", "--features", "3", "--seed", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    assert "SYNTHETIC" in capsys.readouterr().out
    data = read_letor(out, cache=False)
    assert (data.n_queries, data.n_items, data.n_features) == (7, 35, 3)
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left


def test_synth_letor_mslr_shape(tmp_path, capsys):
    """--lengths mslr / --labels mslr / --no-docids: WEB30K-shaped lists (its longest list, a mean near
    120), grades 0-4 mostly 0 and 1, no docid comments; --labels mslr refuses another --max-label."""
    out = tmp_path / "m.txt"
    argv = ["synth", "letor", "--queries", "60", "--features", "3", "--lengths", "mslr", "--labels", "mslr"]
    assert main([*argv, "--no-docids", "--out", str(out)]) == 0
    assert "longest 1251" in capsys.readouterr().out
    data = read_letor(out, cache=False)
    assert data.n_queries == 60 and data.query_lengths.max() == 1251 and data.docids is None
    assert 60 < np.median(data.query_lengths) < 160
    shares = np.bincount(data.labels.astype(int), minlength=5) / data.n_items
    assert shares[:2].sum() > 0.8 and shares[4] < 0.03
    assert main([*argv, "--max-label", "2", "--out", str(tmp_path / "x.txt")]) == 2
    assert "--labels mslr" in capsys.readouterr().err


def test_lambdamart_on_a_table_uses_the_categorical_columns(tmp_path, csv_file, capsys):
    out = tmp_path / "lm"
    argv = ["train", "--model", "lambdamart", "--data", str(csv_file), *COLS, *CAT, "--out", str(out)]
    assert main([*argv, "--set", "model_params.n_estimators=20"]) == 0
    assert read_meta(out)["n_categorical"] == 2 and read_meta(out)["table"]["categorical"] == [
        "airline",
        "cabin",
    ]
    scores = tmp_path / "s.txt"
    assert main(["predict", "--model", str(out), "--data", str(csv_file), "--output", str(scores)]) == 0
    assert np.isfinite(np.loadtxt(scores)).all()


@pytest.mark.parametrize(("flag", "value"), [("--regroup", None), ("--max-line-bytes", "10")])
def test_letor_reader_options_given_for_a_table_are_refused_not_ignored(csv_file, flag, value, capsys):
    argv = ["data-info", str(csv_file), *COLS[:4], flag, *([value] if value else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{flag} applies to LETOR / SVMlight files" in err and "is a table" in err, err
    extra = [flag, *([value] if value else [])]
    train = ["train", "--model", "mlp", "--data", str(csv_file), *COLS, *CAT, *extra]
    assert main([*train, "--out", str(csv_file.parent / "m")]) == 2
    assert f"{flag} applies to LETOR / SVMlight files" in capsys.readouterr().err


def test_data_info_summarises_each_categorical_column(table, tmp_path, capsys):
    """data-info names each categorical column with its distinct values and its missing cells, counted
    from the table itself, and says how many of the features are numeric."""
    holed = table.copy()
    holed.loc[holed.index[:7], "cabin"] = None
    path = tmp_path / "holed.csv"
    holed.to_csv(path, index=False)
    assert main(["data-info", str(path), *COLS, *CAT, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    expected = {
        name: {"values": int(holed[name].nunique()), "missing": int(holed[name].isna().sum())}
        for name in ("airline", "cabin")
    }
    assert info["categorical"] == expected and expected["cabin"]["missing"] == 7
    assert main(["data-info", str(path), *COLS, *CAT]) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert f"features {info['features']} numeric, 2 categorical" in lines
    cabin = expected["cabin"]
    assert f"categorical cabin {cabin['values']} values, 7 cells missing or unseen" in lines


def test_max_dense_bytes_bounds_a_table_too(csv_file, tmp_path, capsys):
    # the table reader is bounded (a small .csv.gz can expand to gigabytes)
    argv = ["data-info", str(csv_file), *COLS, *CAT, "--json"]
    assert main([*argv, "--max-dense-bytes", "1000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ctxrank: error: {csv_file}: more than ") and "--max-dense-bytes N" in err, err
    assert main([*argv, "--max-dense-bytes", str(1 << 30)]) == 0
    capsys.readouterr()
    train = ["train", "--model", "mlp", "--data", str(csv_file), *COLS, *CAT, "--max-dense-bytes", "1000"]
    assert main([*train, "--out", str(tmp_path / "m")]) == 2
    assert "above max_dense_bytes = 1,000" in capsys.readouterr().err


def test_group_col_with_one_distinct_value_says_so(table, tmp_path, capsys):
    # one group is too few queries, said in words, not "(got -1/1/1)"
    path = tmp_path / "one_region.csv"
    table.assign(region="eu").to_csv(path, index=False)
    argv = ["train", "--model", "mlp", "--data", str(path), *COLS, *CAT, "--group-col", "region"]
    assert main([*argv, "--out", str(tmp_path / "m")]) == 2
    assert capsys.readouterr().err == (
        "ctxrank: error: --group-col region has only 1 distinct value: a train/valid/test split by group "
        "needs at least 3 groups, one for each split\n"
    )


def test_a_text_label_column_is_explained_as_a_label_not_a_feature(table, tmp_path, capsys):
    # the hint for a label column of "yes" / "no" speaks of labels, not of --categorical (features)
    path = tmp_path / "yes_no.csv"
    table.assign(chosen=np.where(table["chosen"] > 0, "yes", "no")).to_csv(path, index=False)
    assert main(["data-info", str(path), *COLS, *CAT]) == 2
    err = capsys.readouterr().err.removeprefix(f"ctxrank: error: {path}: ")
    assert err.startswith("data row 1: label column 'chosen' holds text ('no', 'yes')"), err
    assert "{'yes': 1, 'no': 0}" in err and "--categorical" not in err and "--numeric" not in err


# ------------------------------------------------------------------------- missing cells of a table
@pytest.fixture(scope="module")
def holes(tmp_path_factory):
    """A CSV of 30 queries x 8 items whose feature b is an empty cell on about 30% of the rows, where
    the item is relevant: missingness itself carries the signal, which a fill with 0 hides."""
    rng = np.random.default_rng(0)
    rows = ["qid,label,a,b,c"]
    for q in range(30):
        for _ in range(8):
            a, b, c = rng.normal(size=3)
            missing = rng.random() < 0.3
            label = int(missing or a > 0.8)
            rows.append(f"{q},{label},{a:.3f},{'' if missing else f'{b:.3f}'},{c:.3f}")
    path = tmp_path_factory.mktemp("holes") / "holes.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def _scores_by_rule(capsys, model_dir, path, tmp_path):
    """Scores of ``predict`` on ``path`` with the model's own handling, and with the cells filled by 0."""
    out = {}
    for name, extra in (("own", []), ("zero", ["--null-fill", "0"])):
        argv = [
            "predict",
            "--model",
            str(model_dir),
            "--data",
            str(path),
            "-o",
            str(tmp_path / f"{name}.txt"),
        ]
        assert main([*argv, *extra]) == 0
        out[name] = np.loadtxt(tmp_path / f"{name}.txt")
    capsys.readouterr()
    return out


LEARNED = ["--set", "train.missing=indicator", "--set", "train.lr=0.05", "--set", "train.max_epochs=20"]


@pytest.mark.parametrize(
    ("model", "extra", "how"),
    [
        ("lambdamart", ["--set", "model_params.n_estimators=20"],
         "kept missing (NaN) for lambdamart, which reads them (LightGBM)"),
        ("listnet", LEARNED,
         "kept missing (NaN): the model learns a fill and a missing indicator per feature"),
    ],
)  # fmt: skip
def test_a_tables_missing_cells_reach_the_model_and_train_says_what_was_done(
    holes, tmp_path, capsys, model, extra, how
):
    out = tmp_path / model
    argv = ["train", "--model", model, "--data", str(holes), "--query-col", "qid", "--label-col", "label"]
    assert main([*argv, *extra, "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out.splitlines()
    frame = pd.read_csv(holes)
    missing = frame["b"].isna().to_numpy()
    assert (
        f"{int(missing.sum())} missing cell(s) in 1 column(s): {how}" in printed
    )  # the whole file: 3 splits
    assert json.loads((out / "ctxrank.json").read_text())["missing"]["kept"] == int(missing.sum())
    scores = _scores_by_rule(capsys, out, holes, tmp_path)
    assert np.array_equal(scores["own"][~missing], scores["zero"][~missing])  # complete rows: the same
    assert not np.allclose(scores["own"][missing], scores["zero"][missing])  # a missing cell is not a 0
    assert scores["own"][missing].mean() > scores["own"][~missing].mean()  # missingness was learned
    if model == "listnet" and importlib.util.find_spec("onnxruntime") is not None:  # the graph reads NaN
        import onnxruntime

        onnx = tmp_path / "m.onnx"
        assert main(["export", "--model", str(out), "--format", "onnx", "--out", str(onnx)]) == 0
        session = onnxruntime.InferenceSession(str(onnx))
        rows = frame["qid"].to_numpy() == 0
        features = frame.loc[rows, ["a", "b", "c"]].to_numpy(np.float32)[None]
        got = session.run(None, {"features": features, "mask": np.ones(features.shape[:2], bool)})[0][0]
        np.testing.assert_allclose(got, scores["own"][rows], rtol=1e-5, atol=1e-6)


def test_a_neural_model_refuses_a_tables_missing_cells_naming_the_options(holes, tmp_path, capsys):
    argv = ["train", "--model", "listnet", "--data", str(holes), "--query-col", "qid", "--label-col", "label"]
    assert main([*argv, *QUICK, "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing feature value(s) (NaN; first: feature b of row" in err[0]
    assert "--set train.missing=indicator" in err[0] and "--null-fill RULE" in err[0]
    assert main([*argv, *QUICK, "--null-fill", "query_min", "--out", str(tmp_path / "f")]) == 0
    printed = capsys.readouterr().out
    assert (
        "missing cell(s) in 1 column(s): filled with the feature's minimum over the query's other" in printed
    )
