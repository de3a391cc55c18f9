"""``--track mlflow[:URI]`` / ``--track tensorboard[:DIR]`` (ctxrank.tracking): the option's parsing and
checks, and what ``train``, ``tune`` and ``experiment`` log, read back with the real packages
(``MlflowClient`` on the file store, TensorBoard's ``EventAccumulator``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ctxrank.cli import main
from ctxrank.data.synth import write_synthetic_letor
from ctxrank.tracking import KINDS, RunLog, TrackedRun, Tracking, flat_params, metric_name
from tests.conftest import REPO

EPOCHS = 3
QUICK = (
    "--set",
    f"train.max_epochs={EPOCHS}",
    "--set",
    "train.patience=10",
    "--threads",
    "1",
    "--no-progress",
)


@pytest.fixture(scope="module")
def letor(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "d.txt"
    write_synthetic_letor(path, n_queries=40, list_size=10, n_features=5, seed=3)
    return path


# ---------------------------------------------------------------------------------- the option
@pytest.mark.parametrize(
    ("text", "kind", "location"),
    [
        ("mlflow", "mlflow", "./mlruns"),
        ("tensorboard", "tensorboard", "./tensorboard"),
        ("mlflow:/tmp/x", "mlflow", "/tmp/x"),
        ("mlflow:http://localhost:5000", "mlflow", "http://localhost:5000"),
        ("mlflow:file:///tmp/x", "mlflow", "file:///tmp/x"),
        ("tensorboard:logs/tb", "tensorboard", "logs/tb"),
    ],
)
def test_the_option_parses_kind_and_uri(text, kind, location):
    t = Tracking.parse(text)
    assert (t.kind, t.location) == (kind, location)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("wandb", "unknown tracker 'wandb'; valid: mlflow, tensorboard"),
        ("mlflow:", "nothing after the colon"),
        ("mlflow:ftp://host/x", "unsupported URI"),
        ("mlflow:http://", "names no host"),
        ("tensorboard:http://host/x", "takes a local directory"),
    ],
)
def test_a_bad_kind_or_uri_is_refused_when_parsed(text, message):
    with pytest.raises(ValueError, match=message):
        Tracking.parse(text)


def test_an_api_user_reads_the_field_tracking_and_the_cli_the_flag_track(tmp_path, capsys):
    from ctxrank._checks import OptionError
    from ctxrank.cli import flag_text

    with pytest.raises(OptionError) as info:
        Tracking.parse("mlflow:http://")
    assert str(info.value) == "tracking mlflow:URI: 'http://' names no host (e.g. http://localhost:5000)"
    assert info.value.fields == ("tracking",)
    assert flag_text(info.value.text).startswith("--track mlflow:URI: 'http://' names no host")
    (tmp_path / "notes.db").write_text("my notes")
    with pytest.raises(OptionError, match=r"^tracking mlflow:sqlite:///\S+: \S+ is not an SQLite database"):
        Tracking.parse(f"mlflow:sqlite:///{tmp_path / 'notes.db'}").check()
    assert main(["train", "--model", "listnet", "--dataset", "mq2008", "--track", "mlflow:http://"]) == 2
    assert capsys.readouterr().err.endswith(
        "error: argument --track: --track mlflow:URI: 'http://' names no host (e.g. http://localhost:5000)\n"
    )


def test_the_cli_refuses_a_bad_kind_as_a_usage_error(capsys):
    assert main(["train", "--model", "listnet", "--dataset", "mq2008", "--out", "x", "--track", "wandb"]) == 2
    assert "unknown tracker 'wandb'; valid: mlflow, tensorboard" in capsys.readouterr().err
    assert KINDS == ("mlflow", "tensorboard")


def test_an_unusable_place_is_a_clean_error_before_training(tmp_path, letor, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("not a directory")
    other = tmp_path / "other"
    (other / "sub").mkdir(parents=True)
    (other / "notes.txt").write_text("x")
    for track, message in [
        (f"mlflow:{a_file}", "a file, not a directory"),
        (f"tensorboard:{a_file}", "a file, not a directory"),
        (f"mlflow:{other}", "no MLflow file store"),
    ]:
        out = tmp_path / "model"
        code = main(
            ["train", "--model", "listnet", "--data", str(letor), "--out", str(out), *QUICK, "--track", track]
        )
        assert code == 2
        assert message in capsys.readouterr().err
        assert not out.exists()  # refused before the directory was claimed or any data read


def _tables(path: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(path) as db:
        return sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))


def _database(path: Path, *tables: str) -> Path:
    import sqlite3

    with sqlite3.connect(path) as db:
        for t in tables:
            db.execute(f"CREATE TABLE {t} (id INTEGER)")
    db.close()
    return path


def test_a_database_of_other_tables_is_refused_before_mlflow_or_optuna_write_theirs(tmp_path, letor, capsys):
    """``--track mlflow:sqlite:///FILE`` and ``tune --storage sqlite:///FILE`` on a user's own SQLite
    database (tables not MLflow's / Optuna's) are refused before any table is added or data read; a file
    that is no SQLite database too. A database of the tool's own tables is accepted."""
    pytest.importorskip("mlflow")
    mine = _database(tmp_path / "mine.db", "customers", "orders")
    not_sqlite = tmp_path / "notes.db"
    not_sqlite.write_text("my notes")
    out = tmp_path / "model"
    train = ["train", "--model", "listnet", "--data", str(letor), "--out", str(out), *QUICK]
    for db, message in [
        (mine, "holds tables that are not MLflow's (customers, orders)"),
        (not_sqlite, "is not an SQLite database"),
    ]:
        assert main([*train, "--track", f"mlflow:sqlite:///{db}"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert not out.exists()
    tune = ["tune", "--model", "listnet", "--data", str(letor), "--trials", "1", "--out", str(tmp_path / "t")]
    assert main([*tune, *QUICK[:2], "--no-progress", "--storage", f"sqlite:///{mine}"]) == 2
    assert "holds tables that are not Optuna's (customers, orders)" in capsys.readouterr().err
    assert _tables(mine) == ["customers", "orders"] and not_sqlite.read_text() == "my notes"
    Tracking(
        "mlflow", f"sqlite:///{_database(tmp_path / 'ml.db', 'experiments', 'runs', 'alembic_version')}"
    ).check()
    from ctxrank.tune import check_storage

    check_storage(f"sqlite:///{_database(tmp_path / 'optuna.db', 'studies', 'trials')}")
    with pytest.raises(ValueError, match=r"not Optuna's \(experiments, runs\)"):
        check_storage(f"sqlite:///{tmp_path / 'ml.db'}")  # MLflow's database is not Optuna's


def test_an_unreachable_server_is_refused_at_once():
    import socket

    with socket.socket() as s:  # a free port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ValueError, match="cannot reach the tracking server"):
        Tracking.parse(f"mlflow:http://127.0.0.1:{port}").check()


def test_a_missing_package_names_the_extra(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    with pytest.raises(ValueError, match=r"needs the mlflow package: pip install 'ctxrank\[track\]'"):
        Tracking("mlflow", str(tmp_path / "m")).check()


def test_neither_tracker_is_imported_without_track():
    code = (
        "import sys, ctxrank, ctxrank.cli.train, ctxrank.cli.tune, ctxrank.cli.experiment, ctxrank.tracking\n"
        "from ctxrank.cli import build_parser; build_parser(['train', 'tune', 'experiment'])\n"
        "bad = [m for m in ('mlflow', 'tensorboard', 'torch.utils.tensorboard') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env={"PYTHONPATH": str(REPO / "src")})


def test_names_and_params():
    assert metric_name("valid_ndcg@10") == "valid_ndcg_at_10" and metric_name("a b/c:d-e.f") == "a b/c:d-e.f"
    assert metric_name("p(x)") == "p_x_"
    assert flat_params({"model": "mlp", "train": {"lr": 1e-3}, "loss_params": {}}) == {
        "model": "mlp",
        "train.lr": 1e-3,
    }


class _Broken(TrackedRun):
    name = "broken"

    def __init__(self):
        self.calls = 0

    def log_metrics(self, metrics, step=None):
        self.calls += 1
        raise ConnectionError("server went away")


def test_a_tracker_failing_mid_run_warns_once_and_training_goes_on():
    run = _Broken()
    log = RunLog(run)
    with pytest.warns(UserWarning, match="experiment tracking stopped: ConnectionError: server went away"):
        log({"epoch": 1, "train_loss": 1.0, "valid_ndcg@10": 0.5, "seconds": 0.1})
    log({"epoch": 2, "train_loss": 0.9, "valid_ndcg@10": 0.6, "seconds": 0.1})  # no second warning, no error
    assert run.calls == 1


# --------------------------------------------------------------------------------- TensorBoard
def test_train_with_tensorboard_writes_one_scalar_per_epoch(tmp_path, letor):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = tmp_path / "tb"
    out = tmp_path / "model"
    argv = ["train", "--model", "listnet", "--data", str(letor), "--out", str(out), *QUICK]
    assert main([*argv, "--track", f"tensorboard:{tb}"]) == 0
    (run_dir,) = tb.iterdir()
    assert run_dir.name.startswith("model-")
    events = EventAccumulator(str(run_dir))
    events.Reload()
    scalars = events.Tags()["scalars"]
    for tag in ("train_loss", "valid_ndcg_at_10"):
        assert [e.step for e in events.Scalars(tag)] == list(range(1, EPOCHS + 1))
    assert "test_ndcg_at_10" in scalars and "summary.best_epoch" in scalars
    logged = [e.value for e in events.Scalars("valid_ndcg_at_10")]
    saved = [r["valid_ndcg@10"] for r in map(_json, (out / "train_log.jsonl").read_text().splitlines())]
    assert logged == pytest.approx(saved, rel=1e-6)  # float32 in the event file


def _json(line: str) -> dict:
    import json

    return json.loads(line)


# -------------------------------------------------------------------------------------- MLflow
@pytest.fixture(scope="module")
def mlflow_client(tmp_path_factory):
    """An ``MlflowClient`` of a fresh file store, and its URI."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from ctxrank.tracking import _file_store_allowed

    store = tmp_path_factory.mktemp("mlruns")
    uri = store.as_uri()
    with _file_store_allowed():
        client = MlflowClient(tracking_uri=uri)
    return client, store


def _runs(client, name=None):
    experiment = client.get_experiment_by_name("ctxrank")
    runs = client.search_runs([experiment.experiment_id])
    return [r for r in runs if name is None or r.info.run_name == name]


def test_train_with_mlflow_logs_params_epochs_test_metrics_and_the_model(tmp_path, letor, mlflow_client):
    client, store = mlflow_client
    out = tmp_path / "listnet-run"
    argv = ["train", "--model", "listnet", "--data", str(letor), "--out", str(out), *QUICK]
    assert main([*argv, "--track", f"mlflow:{store}"]) == 0
    (run,) = _runs(client, "listnet-run")
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["model"] == "listnet" and params["train.max_epochs"] == str(EPOCHS)
    assert params["data.data_file"] == str(letor)  # the data option as given
    for name in ("train_loss", "valid_ndcg_at_10"):
        history = client.get_metric_history(run.info.run_id, name)
        assert [m.step for m in history] == list(range(1, EPOCHS + 1))
    test = _json((out / "test_metrics.json").read_text())["metrics"]
    assert run.data.metrics["test_ndcg_at_10"] == pytest.approx(test["ndcg@10"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "model")}
    assert {"model/ctxrank.json", "model/model.safetensors", "model/train_log.jsonl"} <= artifacts
    assert not [a for a in artifacts if Path(a).name.startswith(".")]  # no .ctxrank.lock, no temporary file
    assert run.data.tags["ctxrank.command"].startswith("ctxrank train --model listnet")


def test_tune_with_mlflow_logs_one_nested_run_per_trial(tmp_path, letor, mlflow_client):
    client, store = mlflow_client
    argv = ["tune", "--model", "listnet", "--data", str(letor), "--trials", "2", "--out", str(tmp_path / "t")]
    assert main([*argv, *QUICK[:2], "--threads", "1", "--no-progress", "--track", f"mlflow:{store}"]) == 0
    (study,) = _runs(client, "tune-listnet")
    trials = [r for r in _runs(client) if r.data.tags.get("mlflow.parentRunId") == study.info.run_id]
    assert sorted(r.info.run_name for r in trials) == ["trial-0", "trial-1"]
    for r in trials:
        assert {"train.lr", "transform", "trial", "state"} <= set(r.data.params)
        assert "valid_ndcg_at_10" in r.data.metrics and r.info.status == "FINISHED"
    values = client.get_metric_history(study.info.run_id, "trial_valid_ndcg_at_10")
    assert sorted(m.step for m in values) == [0, 1]
    assert {"space.train.lr", "train.max_epochs", "trials"} <= set(study.data.params)
    artifacts = {a.path for a in client.list_artifacts(study.info.run_id, "study")}
    assert {"study/best.toml", "study/trials.csv", "study/tune.json"} <= artifacts


def test_experiment_with_mlflow_logs_each_run_and_the_report(tmp_path, letor, mlflow_client):
    client, store = mlflow_client
    spec = tmp_path / "tiny.toml"
    (tmp_path / letor.name).write_bytes(letor.read_bytes())
    spec.write_text(
        f'name = "tracked"\n[data]\nfile = "{letor.name}"\n[runs]\ncount = 2\n'
        '[report]\nmetrics = ["ndcg@10", "map"]\ntarget = "listnet"\n'
        '[models.lambdamart]\nmodel = "lambdamart"\n'
        "model_params = { n_estimators = 10, early_stopping_rounds = 5, min_data_in_leaf = 5 }\n"
        '[models.listnet]\nmodel = "listnet"\ntrain = { max_epochs = 2, patience = 1, batch_size = 16 }\n'
    )
    argv = ["experiment", str(spec), "--out", str(tmp_path / "e"), "--evidence", str(tmp_path / "ev")]
    assert main([*argv, "--no-progress", "--track", f"mlflow:{store}"]) == 0
    (run,) = _runs(client, "tracked")
    assert run.info.status == "FINISHED"
    assert run.data.params["models.listnet.train.max_epochs"] == "2" and run.data.params["runs"] == "2"
    metrics = run.data.metrics
    for model in ("lambdamart", "listnet"):
        for seed in (0, 1):
            assert f"{model}/seed{seed}-fold0/ndcg_at_10" in metrics
    stored = _json((tmp_path / "e" / "runs" / "listnet" / "seed1-fold0.json").read_text())["metrics"]["map"]
    assert metrics["listnet/seed1-fold0/map"] == pytest.approx(sum(stored) / len(stored))
    report = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert {"report/table.md", "report/results.json"} <= report
    assert client.list_artifacts(run.info.run_id, "evidence")


def test_the_estimators_fit_takes_tracking(tmp_path):
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ctxrank import Ranker

    rng = np.random.default_rng(0)
    X, y, qid = rng.normal(size=(60, 4)), rng.integers(0, 3, 60), np.repeat(np.arange(10), 6)
    est = Ranker(model="listnet", max_epochs=2, patience=5, threads=1)
    est.fit(X, y, qid=qid, tracking=f"tensorboard:{tmp_path / 'tb'}")
    (run_dir,) = (tmp_path / "tb").iterdir()
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [e.step for e in events.Scalars("train_loss")] == [1, 2]
    assert [e.value for e in events.Scalars("train_loss")] == pytest.approx(
        est.evals_result_["train"]["loss"]
    )
    with pytest.raises(TypeError, match="expected a Tracking or text"):
        est.fit(X, y, qid=qid, tracking=3)


def test_a_resumed_run_logs_every_epoch_once(tmp_path, letor, monkeypatch):
    """Killed after epoch 1's state was saved (the tracked run ends KILLED), resumed with --track: the new
    tracked run has epoch 1 (from the saved history, at the end) and the epochs trained after the resume,
    each once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ctxrank.training.resume import StateDir

    save = StateDir.save

    def save_then_die(self, state):
        save(self, state)
        raise KeyboardInterrupt

    out, tb = tmp_path / "model", tmp_path / "tb"
    monkeypatch.setattr(StateDir, "save", save_then_die)
    argv = ["train", "--model", "listnet", "--data", str(letor), "--out", str(out), *QUICK]
    assert main([*argv, "--track", f"tensorboard:{tb}"]) == 130
    monkeypatch.setattr(StateDir, "save", save)
    assert main(["train", "--resume", str(out), "--no-progress", "--track", f"tensorboard:{tb}"]) == 0
    killed, resumed = sorted(tb.iterdir())
    events = {}
    for run in (killed, resumed):
        events[run] = EventAccumulator(str(run))
        events[run].Reload()
    (status,) = events[killed].Tensors("status/text_summary")  # the killed run says it was killed
    assert status.tensor_proto.string_val == [b"KILLED"]
    assert "status/text_summary" not in events[resumed].Tags()["tensors"]
    assert sorted(e.step for e in events[resumed].Scalars("train_loss")) == list(range(1, EPOCHS + 1))
