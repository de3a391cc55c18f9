"""ctxrank train / predict / evaluate --model, end to end on the embedded MQ2008 and on files."""

import json

import numpy as np
import pytest

from ctxrank.cli import build_parser, main
from ctxrank.data.letor import read_letor
from ctxrank.training.request import TrainRequest
from tests.conftest import REPO

MQ = REPO / "src" / "ctxrank" / "datasets" / "mq2008"
QUICK = ["--set", "train.max_epochs=2", "--set", "train.threads=1", "--no-progress"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "listnet"
    code = main(
        ["train", "--model", "listnet", "--dataset", "mq2008", "--fold", "1", "--out", str(out), *QUICK]
    )
    assert code == 0
    return out


def test_train_writes_everything(trained):
    for name in ("model.safetensors", "ctxrank.json", "config.toml", "train_log.jsonl", "test_metrics.json"):
        assert (trained / name).is_file(), name
    metrics = json.loads((trained / "test_metrics.json").read_text())
    assert len(metrics["query_ids"]) == 156  # Fold1 test = S5
    assert 0.2 < metrics["metrics"]["ndcg@10"] <= 1
    assert len((trained / "train_log.jsonl").read_text().splitlines()) == 2


def test_predict_and_evaluate_with_the_saved_model(trained, tmp_path, capsys):
    out = tmp_path / "scores.txt"
    assert (
        main(["predict", "--model", str(trained), "--data", str(MQ / "S5.txt.gz"), "--output", str(out)]) == 0
    )
    scores = np.loadtxt(out)
    assert scores.shape == (read_letor(MQ / "S5.txt.gz").n_items,)
    capsys.readouterr()
    assert main(["evaluate", "--model", str(trained), "--data", str(MQ / "S5.txt.gz"), "--json"]) == 0
    via_model = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--scores", str(out), "--data", str(MQ / "S5.txt.gz"), "--json"]) == 0
    via_scores = json.loads(capsys.readouterr().out)
    saved = json.loads((trained / "test_metrics.json").read_text())["metrics"]
    # the scores file round-trips exactly, so both routes give the same numbers, not nearly the same
    from ctxrank.training.checkpoint import load_model

    assert np.array_equal(scores, load_model(trained).predict(read_letor(MQ / "S5.txt.gz")))
    assert via_model["per_query"] == via_scores["per_query"] and via_model["metrics"] == via_scores["metrics"]
    for k in ("ndcg@10", "map"):
        assert via_model["metrics"][k] == pytest.approx(saved[k], abs=1e-8)


@pytest.mark.parametrize("flags", [["--fold", "2"], [], ["--fold", "3", "--split", "valid"]])
def test_predict_then_evaluate_read_the_same_split_with_the_same_flags(trained, tmp_path, capsys, flags):
    """``--fold K`` alone is fold K's test split in both commands (evaluate read all 784 queries)."""
    from ctxrank.data.registry import load_split

    out = tmp_path / "s.txt"
    source = ["--dataset", "mq2008", *flags]
    assert main(["predict", "--model", str(trained), *source, "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", *source, "--scores", str(out), "--json"]) == 0
    via_scores = json.loads(capsys.readouterr().out)
    assert main(["evaluate", *source, "--model", str(trained), "--json"]) == 0
    via_model = json.loads(capsys.readouterr().out)
    fold = int(flags[1]) if flags else 1
    expected = load_split("mq2008", flags[3] if len(flags) > 2 else "test", fold)
    assert via_scores["queries"] == via_model["queries"] == expected.n_queries < 784
    assert via_scores["metrics"] == via_model["metrics"]


def test_train_on_files_with_a_config_file(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('model = "mlp"\nloss = "listmle"\n[model_params]\nhidden = [8]\n[train]\nmax_epochs = 1\n')
    out = tmp_path / "m"
    args = [
        "train",
        "--config",
        str(cfg),
        "--train",
        str(MQ / "S1.txt.gz"),
        "--valid",
        str(MQ / "S2.txt.gz"),
        "--out",
        str(out),
        "--no-progress",
        "--seed",
        "3",
    ]
    assert main(args) == 0
    meta = json.loads((out / "ctxrank.json").read_text())
    assert meta["model"] == "mlp" and meta["loss"] == "listmle" and meta["run_config"]["train"]["seed"] == 3
    assert not (out / "test_metrics.json").exists()
    assert main(args) == 2  # refuses to overwrite a saved model


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "nope"], "unknown model 'nope'; valid models:"),
        (["--loss", "nope"], "unknown loss 'nope'; valid losses:"),
        (["--set", "train.lr=-1"], "train.lr must be a positive number"),
        ([], "give --dataset NAME"),
    ],
)
def test_train_errors_are_clear(tmp_path, capsys, argv, message):
    extra = [] if argv == [] else ["--dataset", "mq2008"]
    assert main(["train", *argv, *extra, "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    assert message in capsys.readouterr().err


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    out = tmp_path_factory.mktemp("rr") / "dlcm"
    argv = [
        "train",
        "--model",
        "dlcm",
        "--initial",
        "lambdamart",
        "--top-k",
        "10",
        "--crossfit",
        "3",
        "--dataset",
        "mq2008",
        "--fold",
        "2",
        "--out",
        str(out),
        "--set",
        "model_params.encoder_widths=[16,16]",
        "--set",
        "rerank.initial_params.n_estimators=40",
        *QUICK,
    ]
    assert main(argv) == 0
    return out


def test_rerank_training_saves_both_models(reranker):
    meta = json.loads((reranker / "ctxrank.json").read_text())
    assert meta["rerank"] == {
        "dir": "initial",
        "top_k": 10,
        "rank_feature": False,
        "score_feature": False,
        "crossfit": 3,
        "ideal": "full",
    }
    assert meta["run_config"]["loss_params"] == {"form": "dlcm"}  # DLCM's AttRank form is recorded
    assert (reranker / "initial" / "ctxrank.json").is_file()
    metrics = json.loads((reranker / "test_metrics.json").read_text())
    assert set(metrics["initial_metrics"]) == set(metrics["metrics"])
    assert metrics["ideal"] == "full"


def test_rerank_predict_applies_both_models(reranker, tmp_path, capsys):
    data = MQ / "S1.txt.gz"  # Fold2 test
    assert main(["evaluate", "--model", str(reranker), "--data", str(data), "--json"]) == 0
    via_model = json.loads(capsys.readouterr().out)["metrics"]
    saved = json.loads((reranker / "test_metrics.json").read_text())["metrics"]
    for k in ("ndcg@1", "ndcg@10", "map"):
        assert via_model[k] == pytest.approx(saved[k], abs=1e-9)
    out = tmp_path / "s.txt"
    assert main(["predict", "--model", str(reranker), "--data", str(data), "--output", str(out)]) == 0
    assert np.loadtxt(out).shape == (read_letor(data).n_items,)


def test_lambdamart_as_a_model(tmp_path, capsys):
    out = tmp_path / "lm"
    argv = [
        "train",
        "--model",
        "lambdamart",
        "--dataset",
        "mq2008",
        "--fold",
        "1",
        "--out",
        str(out),
        "--set",
        "model_params.n_estimators=50",
        "--no-progress",
    ]
    assert main(argv) == 0
    assert (out / "model.txt").is_file()
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--data", str(MQ / "S5.txt.gz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["ndcg@10"] == pytest.approx(
        json.loads((out / "test_metrics.json").read_text())["metrics"]["ndcg@10"], abs=1e-9
    )
    assert (
        main(
            [
                "train",
                "--model",
                "lambdamart",
                "--loss",
                "listnet",
                "--dataset",
                "mq2008",
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "lambdarank objective" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("model", "params", "line", "kind"),
    [
        ("ranksvm", ["model_params.C=0.01"], "liblinear): pairwise-squared-hinge) on", "ranksvm"),
        ("adarank-ndcg", ["model_params.n_rounds=15"], "ctxrank's metrics): adarank-ndcg@10) on", "adarank"),
    ],
)
def test_classical_baselines_end_to_end(model, params, line, kind, tmp_path, capsys):
    out = tmp_path / model
    argv = [
        "train",
        "--model",
        model,
        "--dataset",
        "mq2008",
        "--fold",
        "1",
        "--out",
        str(out),
        "--no-progress",
    ]
    for p in params:
        argv += ["--set", p]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert line in printed and ("C = 0.01" in printed if model == "ranksvm" else "best round" in printed)
    curves = ["training_curves.png"] if model.startswith("adarank") else []  # AdaRank: metric per round
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["config.toml", "ctxrank.json", "test_metrics.json", *curves]
    )
    meta = json.loads((out / "ctxrank.json").read_text())
    assert meta["kind"] == kind and meta["n_features"] == 46
    saved = json.loads((out / "test_metrics.json").read_text())["metrics"]
    assert 0.3 < saved["ndcg@10"] <= 1
    assert main(["evaluate", "--model", str(out), "--data", str(MQ / "S5.txt.gz"), "--json"]) == 0
    via_model = json.loads(capsys.readouterr().out)["metrics"]
    for k in ("ndcg@1", "ndcg@10", "map"):
        assert via_model[k] == pytest.approx(saved[k], abs=1e-12)
    scores = tmp_path / "scores.txt"
    assert (
        main(["predict", "--model", str(out), "--data", str(MQ / "S5.txt.gz"), "--output", str(scores)]) == 0
    )
    assert np.loadtxt(scores).shape == (read_letor(MQ / "S5.txt.gz").n_items,)


@pytest.mark.parametrize(
    ("model", "trains"),
    [
        ("ranksvm", "a pairwise linear SVM (scikit-learn LinearSVC"),
        ("adarank-map", "AdaRank's boosting on MAP"),
    ],
)
def test_classical_baselines_refuse_a_loss(model, trains, tmp_path, capsys):
    argv = [
        "train",
        "--model",
        model,
        "--loss",
        "listnet",
        "--dataset",
        "mq2008",
        "--out",
        str(tmp_path / "x"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"loss: {model} trains {trains}" in err and "--loss does not apply" in err and "LightGBM" not in err
    )
    assert not (tmp_path / "x").exists()


def test_the_recorded_command_repeats_the_options(tmp_path, monkeypatch):
    """What `train` records (options as JSON, the command line) gives back the same options."""
    monkeypatch.chdir(tmp_path)
    argv = [
        *("train", "--model", "mlp", "--data", "s.csv", "--query-col", "q", "--label-col", "y"),
        *("--categorical", "a,b", "--split-fractions", "0.5,0.25,0.25", "--seed", "0", "--no-cache"),
        *("--set", "train.lr=0.1", "--set", "model_params.hidden=[8]", "--out", "run"),
    ]
    options = TrainRequest.of(build_parser().parse_args(argv))
    assert dict(options.given)["seed"] == 0 and options.data.columns.categorical == ("a", "b")
    assert options.data.read.no_cache
    record = json.loads(json.dumps(options.to_record()))
    assert record["data_file"] == str(tmp_path / "s.csv") and record["split_fractions"] == [0.5, 0.25, 0.25]
    assert TrainRequest.from_record(record).to_record() == record
    command = options.command_line("run")
    assert command[:2] == ["ctxrank", "train"] and command[-2:] == ["--out", str(tmp_path / "run")]
    again = TrainRequest.of(build_parser().parse_args(command[1:]))
    assert again.to_record() == record
    with pytest.raises(ValueError, match="unknown recorded option"):
        TrainRequest.from_record({**record, "nope": 1})


# ----------------------------------------------------------------------------- outputs the user owns
ONE_EPOCH = ["--set", "train.max_epochs=1", "--set", "train.threads=1"]


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    from ctxrank.data.synth import write_synthetic_letor

    d = tmp_path_factory.mktemp("small")
    for i, name in enumerate(("tr", "va")):
        write_synthetic_letor(d / f"{name}.txt", n_queries=20, list_size=8, n_features=5, seed=i)
    return ["--train", str(d / "tr.txt"), "--valid", str(d / "va.txt"), "--no-progress"]


def test_train_refuses_an_out_directory_of_the_users_files(small_files, tmp_path, capsys):
    from ctxrank._io import LOCK_FILE

    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.toml").write_text("# my own config\n")
    (out / "notes.txt").write_text("mine")
    argv = ["train", "--model", "listnet", *small_files, *ONE_EPOCH, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "holds files that ctxrank did not write (config.toml, notes.txt)" in err and "--overwrite" in err
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "notes.txt"]  # untouched, no lock left
    assert (out / "config.toml").read_text() == "# my own config\n"
    assert main([*argv, "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "ctxrank.json").is_file()
    assert not (out / LOCK_FILE).exists()


def _modes(root):
    """``{relative path: permission bits}`` of every file and directory below ``root``."""
    import stat

    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_every_file_train_and_export_write_gets_the_umask_mode(small_files, tmp_path, umask):
    """A seed ensemble of re-rankers (members, their initial rankers, weights, model.txt, metadata, logs,
    curves, test metrics) and its exported file: 0666 (directories 0777) less the umask, as
    ``open()`` gives, none of them private."""
    import os

    out = tmp_path / "ens"
    argv = [
        "train", "--model", "listnet", *small_files, "--test", small_files[3], *ONE_EPOCH,
        "--initial", "lambdamart", "--top-k", "4", "--set", "rerank.initial_params.n_estimators=3",
        "--set", "ensemble=2", "--out", str(out),
    ]  # fmt: skip
    old = os.umask(umask)
    try:
        assert main(argv) == 0
        exported = ["export", "--model", str(out), "--format", "onnx", "--out", str(tmp_path / "m.onnx")]
        assert main(exported) == 0
    finally:
        os.umask(old)
    modes = _modes(tmp_path / "ens")
    for name in ("member-1/model.safetensors", "member-1/initial/model.txt", "test_metrics.json"):
        assert name in modes, sorted(modes)
    wrong = {k: oct(v) for k, v in modes.items() if v != (0o777 if (out / k).is_dir() else 0o666) & ~umask}
    assert not wrong, wrong
    assert _modes(tmp_path)["m.onnx"] == 0o666 & ~umask


def test_train_overwrite_replaces_a_previous_model_and_nothing_else(small_files, tmp_path, capsys):
    out = tmp_path / "run"
    lm = ["--set", "model_params.n_estimators=3"]
    assert main(["train", "--model", "lambdamart", *small_files, *lm, "--out", str(out)]) == 0
    (out / "mine.txt").write_text("kept")
    argv = ["train", "--model", "listnet", *small_files, *ONE_EPOCH, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds a saved model; choose another directory, or give --overwrite" in err
    assert main([*argv, "--overwrite"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert "model.txt" not in names and "model.safetensors" in names and "mine.txt" in names
    assert json.loads((out / "ctxrank.json").read_text())["model"] == "listnet"
    assert main(["train", "--resume", str(out), "--overwrite"]) == 2
    assert "--overwrite starts a new run" in capsys.readouterr().err


def test_a_second_train_on_one_out_directory_is_refused_naming_the_holder(small_files, tmp_path, capsys):
    import os

    from ctxrank._io import lock_directory

    out = tmp_path / "busy"
    with lock_directory(out):  # stands for a `ctxrank train --out busy` still running
        assert main(["train", "--model", "listnet", *small_files, *ONE_EPOCH, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{out} is locked" in err and f"pid {os.getpid()}" in err
        assert (
            main(["train", "--model", "listnet", *small_files, *ONE_EPOCH, "--out", str(out), "--overwrite"])
            == 2
        )
    assert not out.exists()


def test_predict_refuses_an_existing_scores_file_unless_overwrite(trained, tmp_path, capsys):
    out = tmp_path / "scores.txt"
    out.write_text("my scores\n")
    argv = ["predict", "--model", str(trained), "--data", str(MQ / "S5.txt.gz"), "--output", str(out)]
    assert main(argv) == 2
    assert f"--output {out} exists; give --overwrite to replace it" in capsys.readouterr().err
    assert out.read_text() == "my scores\n"
    assert main([*argv, "--overwrite"]) == 0
    assert np.loadtxt(out).shape == (read_letor(MQ / "S5.txt.gz").n_items,)


def test_group_col_splits_a_table_by_decision_maker_and_choice_metrics_are_printed(tmp_path, capsys):
    from ctxrank.data.choice import choice_frame

    frame = choice_frame("electricity")
    frame = frame[frame["person"].astype(int) <= 60]  # 60 customers, 12 situations each
    frame.to_csv(tmp_path / "elec.csv", index=False)
    out = tmp_path / "mnl"
    argv = ["train", "--model", "mnl", "--data", str(tmp_path / "elec.csv"), "--query-col", "situation"]
    argv += ["--label-col", "chosen", "--categorical", "alt", "--group-col", "person", "--out", str(out)]
    assert main([*argv, "--set", "train.threads=1", "--no-progress"]) == 0  # no epochs: a likelihood fit
    text = capsys.readouterr().out
    assert "at random by group" in text and "of 36, 12, 12 groups" in text
    assert "maximum likelihood (scipy L-BFGS-B" in text
    for metric in ("p@1", "recall@3", "mrr", "loglik"):
        assert metric in text
    meta = json.loads((out / "ctxrank.json").read_text())
    assert meta["split"]["groups"] == {"train": 36, "valid": 12, "test": 12}
    assert "person" not in meta["feature_names"] and meta["table"]["group"] == "person"
    assert meta["command"]["options"]["group_col"] == "person"
    test_ids = json.loads((out / "test_metrics.json").read_text())["query_ids"]
    by_sit = dict(zip(frame["situation"].astype(str), frame["person"].astype(str), strict=False))
    train_persons = {by_sit[q] for q in set(by_sit) - set(test_ids)}
    assert not {by_sit[q] for q in test_ids} & train_persons or len(test_ids) == 0
    with pytest.raises(SystemExit):  # LETOR data and --train files have no group column to split by
        build_parser().parse_args(["train", "--group-col"])
    assert main(["train", "--model", "mnl", "--dataset", "mq2008", "--group-col", "x", "--out", "o"]) == 2


def _electricity(tmp_path, customers: int):
    """The first ``customers`` customers of Electricity (12 situations each) as ``elec.csv``."""
    from ctxrank.data.choice import choice_frame

    frame = choice_frame("electricity")
    frame[frame["person"].astype(int) <= customers].to_csv(tmp_path / "elec.csv", index=False)
    return ["--data", str(tmp_path / "elec.csv"), "--query-col", "situation", "--label-col", "chosen"]


def test_group_col_may_name_the_query_column_one_group_a_situation(tmp_path, capsys):
    """``--group-col`` naming the query column (each person one situation): every situation is its own
    group, which is the split by query exactly (it was refused: "columns must be distinct")."""
    data = _electricity(tmp_path, 20)
    runs = {}
    for name, extra in (("by-query", []), ("by-situation", ["--group-col", "situation"])):
        argv = ["train", "--model", "mnl", *data, "--categorical", "alt", *extra, "--no-progress"]
        assert main([*argv, "--out", str(tmp_path / name)]) == 0, capsys.readouterr().err
        meta = json.loads((tmp_path / name / "ctxrank.json").read_text())
        tested = json.loads((tmp_path / name / "test_metrics.json").read_text())["query_ids"]
        runs[name] = (meta["split"]["queries"], tested, meta["training"]["log_likelihood"])
    assert runs["by-query"] == runs["by-situation"] and len(runs["by-query"][1]) == 48
    assert meta["command"]["options"]["group_col"] == "situation"


def test_a_baseline_takes_train_metric_and_reports_it_on_validation(tmp_path, capsys):
    """``train.metric`` for LambdaMART (it was refused): the fitted model's validation value is in the
    summary and the log; its early stopping stays on its own ``model_params.metric``; the log says
    what it optimizes."""
    argv = ["train", "--model", "lambdamart", *_electricity(tmp_path, 30), "--group-col", "person"]
    argv += ["--set", "train.metric=loglik", "--set", "model_params.n_estimators=5"]
    assert main([*argv, "--out", str(tmp_path / "m"), "--no-progress"]) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    summary = json.loads((tmp_path / "m" / "ctxrank.json").read_text())["training"]
    assert summary["metric"] == "ndcg@10" and summary["train_metric"]["name"] == "loglik"
    assert f"valid loglik {summary['train_metric']['valid']:.4f} (train.metric)" in text
    assert "lambdamart (trains LightGBM's lambdarank objective) on" in text


# ------------------------------------------------------------------------------------ --null-fill
def _null_letor(path, seed):
    """24 queries of 6 items; feature 2 is positive where given and NULL on about a third of the items, so
    query_min (the query's smallest, > 0) and letor_min (0) fill it differently."""
    rng = np.random.default_rng(seed)
    lines = []
    for q in range(24):
        for _ in range(6):
            x = rng.normal(size=3)
            f2 = "NULL" if rng.random() < 0.3 else f"{1 + 2 * rng.random():.4f}"
            lines.append(f"{rng.integers(0, 3)} qid:{q} 1:{x[0]:.4f} 2:{f2} 3:{x[1]:.4f} 4:{x[2]:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_null_fill_is_recorded_resumed_and_reapplied_by_predict_and_evaluate(tmp_path, monkeypatch, capsys):
    from ctxrank.training.checkpoint import load_model
    from ctxrank.training.resume import StateDir

    train, valid = _null_letor(tmp_path / "tr.txt", 0), _null_letor(tmp_path / "va.txt", 1)
    out = tmp_path / "m"
    argv = ["train", "--model", "mlp", "--train", str(train), "--valid", str(valid), "--out", str(out)]
    argv += ["--null-fill", "letor_min", "--set", "train.max_epochs=2", "--set", "train.threads=1"]
    save = StateDir.save

    def save_then_die(self, state):  # killed once epoch 1 is saved
        save(self, state)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(StateDir, "save", save_then_die)
        assert main([*argv, "--no-progress"]) == 130
    record = json.loads((out / "resume" / "run.json").read_text())
    assert record["options"]["null_fill"] == "letor_min"
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--null-fill", "query_min", "--no-progress"]) == 2
    assert "--null-fill 'query_min' (recorded: 'letor_min')" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--null-fill", "letor_min", "--no-progress"]) == 0
    command = json.loads((out / "ctxrank.json").read_text())["command"]
    assert command["options"]["null_fill"] == "letor_min"
    at = command["command"].index("--null-fill")
    assert command["command"][at + 1] == "letor_min"
    replayed = TrainRequest.of(build_parser().parse_args(command["command"][1:]))
    assert replayed.to_record() == command["options"]
    # predict / evaluate --model read a LETOR file with the model's rule unless told otherwise
    model = load_model(out)
    rules = ("letor_min", "query_min")
    by_rule = {r: model.predict(read_letor(valid, null_fill=r, cache=False)) for r in rules}
    assert not np.array_equal(by_rule["letor_min"], by_rule["query_min"])  # the rule matters here
    capsys.readouterr()
    for rule, extra in (("letor_min", []), ("query_min", ["--null-fill", "query_min"])):
        scores = tmp_path / f"{rule}.txt"
        predict = ["predict", "--model", str(out), "--data", str(valid), "--output", str(scores), *extra]
        assert main(predict) == 0
        assert np.array_equal(np.loadtxt(scores), by_rule[rule])
        noted = "the model was trained with --null-fill letor_min" in capsys.readouterr().err
        assert noted == (rule == "query_min")
    assert main(["evaluate", "--model", str(out), "--data", str(valid), "--json"]) == 0
    via_model = json.loads(capsys.readouterr().out)
    scores = tmp_path / "letor_min.txt"
    assert main(["evaluate", "--scores", str(scores), "--data", str(valid), "--json"]) == 0
    assert via_model["per_query"] == json.loads(capsys.readouterr().out)["per_query"]


def test_a_numeric_null_fill_round_trips_through_the_recorded_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--model", "mlp", "--data", "d.txt", "--null-fill", "-1.5", "--out", "run"]
    options = TrainRequest.of(build_parser().parse_args(argv))
    assert options.data.read.null_fill == -1.5
    record = json.loads(json.dumps(options.to_record()))
    assert record["null_fill"] == -1.5 and TrainRequest.from_record(record).to_record() == record
    command = options.command_line("run")
    assert command[command.index("--null-fill") + 1] == "-1.5"
    assert TrainRequest.of(build_parser().parse_args(command[1:])).to_record() == record
    assert TrainRequest().data.read.null_fill is None  # not given: the reader's default
    from ctxrank.cli.tune import _train_command

    train_it = _train_command(options, tmp_path / "tune")  # `ctxrank tune`'s "train it:" line keeps it
    assert train_it[train_it.index("--null-fill") + 1] == "-1.5"


COMPUTING_COMMANDS = ("train", "tune", "predict", "evaluate", "export", "experiment", "demo")


def test_every_command_that_computes_takes_threads_with_one_meaning():
    """`--threads` existed for experiment and demo only; train and tune needed --set train.threads."""
    import argparse

    from ctxrank.cli._options import THREADS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in COMPUTING_COMMANDS:
        action = next((a for a in sub.choices[name]._actions if "--threads" in a.option_strings), None)
        assert action is not None, name
        assert action.help.startswith(THREADS.help.split("{")[0]), name
        assert action.type("3") == 3, name


def test_threads_reaches_the_computation_of_train_predict_and_evaluate(trained, tmp_path, capsys):
    import torch

    from ctxrank.training.predict import set_threads

    before = torch.get_num_threads()
    out = tmp_path / "t"
    argv = ["train", "--model", "mlp", "--dataset", "mq2008", "--fold", "1", "--out", str(out)]
    assert main([*argv, "--set", "train.max_epochs=1", "--threads", "1", "--no-progress"]) == 0
    assert json.loads((out / "ctxrank.json").read_text())["run_config"]["train"]["threads"] == 1
    for command in (["predict", "-o", str(tmp_path / "s.txt")], ["evaluate"]):
        torch.set_num_threads(2)
        argv = [command[0], "--model", str(trained), "--dataset", "mq2008", *command[1:], "--threads", "1"]
        assert main(argv) == 0
        assert torch.get_num_threads() == 1, command[0]

    class Part:
        num_threads = 4

    ensemble = type("Ensemble", (), {"members": [Part()]})()
    pipeline = type("Pipeline", (), {"initial": Part(), "reranker": ensemble})()
    set_threads(pipeline, 3)  # LightGBM-like parts of a re-ranking pipeline and of an ensemble
    assert pipeline.initial.num_threads == 3 and pipeline.reranker.members[0].num_threads == 3
    torch.set_num_threads(before)


def test_a_reranker_worse_than_its_initial_ranker_and_a_run_cut_while_improving_are_said(tmp_path, capsys):
    """ListNet re-ranking LambdaMART's top 10, 2 epochs: its validation NDCG@10 is far below
    LambdaMART's on the same lists, and its last epoch is its best. Each is one ``ctxrank: warning:``
    line saying by how much and what to change, and both are in ``ctxrank.json["training"]``."""
    import pandas as pd

    from tests.conftest import make_ranking_data

    data = make_ranking_data(100, max_len=20, seed=1)
    frame = pd.DataFrame(data.features, columns=[f"f{i}" for i in range(data.n_features)])
    frame["q"], frame["y"] = np.repeat(data.query_ids, data.query_lengths), data.labels.astype(int)
    frame.to_csv(tmp_path / "t.csv", index=False)
    argv = ["train", "--model", "listnet", "--initial", "lambdamart", "--top-k", "10", "--data"]
    argv += [str(tmp_path / "t.csv"), "--query-col", "q", "--label-col", "y", "--out", str(tmp_path / "m")]
    assert main([*argv, "--set", "rerank.initial_params.n_estimators=20", *QUICK]) == 0
    said = capsys.readouterr()
    lines = [line for line in said.err.splitlines() if line.startswith("ctxrank: warning:")]
    worse = [line for line in lines if "the re-ranker is worse than its initial ranker" in line]
    cut = [line for line in lines if "training stopped at train.max_epochs = 2 while" in line]
    assert len(worse) == 1 and len(cut) == 1, lines
    assert "listnet: the re-ranker is worse than its initial ranker (lambdamart)" in worse[0]
    assert "on the same top-10 lists" in worse[0] and "rerank.top_k" in worse[0] and "train.lr" in worse[0]
    assert "raise train.max_epochs" in cut[0]
    training = json.loads((tmp_path / "m" / "ctxrank.json").read_text())["training"]
    assert training["best_valid_metric"] < training["initial_valid_metric"]
    assert [w in " ".join(lines) for w in training["warnings"]] == [True, True]
    initial = f"initial ranker {training['initial_valid_metric']:.4f} on the same lists"
    assert f"(valid ndcg@10 {training['best_valid_metric']:.4f}; {initial})" in said.out


def test_an_older_run_record_still_reads():
    """A record written before the run-config flags moved to the config's fields: the old key order,
    ``--set`` as ``KEY=VALUE`` text, an ``out`` key and no newer data options."""
    old = {"model": "mlp", "loss": None, "config": None, "overrides": ["train.lr=0.1"], "seed": 3}
    old.update({"threads": None, "initial": None, "top_k": None, "crossfit": None, "out": "/runs/x"})
    options = TrainRequest.from_record({**old, "train_file": "/d/tr.txt", "valid_file": "/d/va.txt"})
    assert options.config_overrides() == [("train.lr", 0.1), ("model", "mlp"), ("train.seed", 3)]
    assert options.data.train_file == "/d/tr.txt" and options.data.read.null_fill is None
    assert TrainRequest.from_record(options.to_record()) == options
