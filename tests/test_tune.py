"""``ctxrank tune`` and ``ctxrank.tune``: search spaces of every registry entry, seeded and resumable
studies, pruning through fit's ``on_epoch`` hook, the test split never read, two processes on one
SQLite study, the outputs (best.toml accepted by ``train`` and by experiment specs, trials table,
plots), and the ``[tune]`` block of experiment specs."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import subprocess
import sys
import tomllib

import numpy as np
import optuna
import pytest

from ctxrank.cli import main
from ctxrank.config import RunConfig
from ctxrank.registry import MODELS, Baseline, make_model
from ctxrank.tune import (
    LOSS_SPACES,
    NEURAL_SPACE,
    StudyBase,
    TrialSeededTPE,
    _label,
    finished_trials,
    mask_url,
    search_space,
    trial_overrides,
    tune,
)
from tests.conftest import REPO, make_ranking_data, rows_sorted_by

TINY_EPOCHS = {"train": {"max_epochs": 2}}


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def letor(tmp_path):
    """train.txt / vali.txt / test.txt: three small synthetic LETOR files (5 features, labels 0-2)."""
    from ctxrank.data.synth import write_synthetic_letor

    for name, seed in (("train", 0), ("vali", 1), ("test", 2)):
        write_synthetic_letor(
            tmp_path / f"{name}.txt", n_queries=30, list_size=8, n_features=5, max_label=2, seed=seed
        )
    return tmp_path


def _study(path, name="listnet") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{path / 'study.db'}")


# ----------------------------------------------------------------------------------- search spaces
@pytest.mark.parametrize("name", list(MODELS))
def test_every_registry_entry_declares_a_space_whose_samples_are_valid_configs(name):
    entry = MODELS[name]
    space = search_space({"model": name})
    assert space.params, f"{name} declares no search space"
    if isinstance(entry, Baseline):
        assert not space.losses and "train.lr" not in space.params  # LightGBM etc. have no epochs
    elif entry.traits.full_batch:  # maximum likelihood: no epochs, no loss
        assert not space.losses and set(space.params) == {"transform", *entry.config_class.SEARCH_SPACE}
    else:
        assert set(NEURAL_SPACE) <= set(space.params)
    base = StudyBase.of({"model": name}).config
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), direction="maximize")
    for _ in range(6):
        trial = study.ask()
        config = base.with_overrides(trial_overrides(trial, space))  # validates every value
        if not isinstance(entry, Baseline):
            make_model(name, 5, config.model_params)
        study.tell(trial, 0.0)


def test_declared_losses_exist_and_the_loss_options_follow_the_trial_loss():
    space = search_space({"model": "qilcm"})
    assert space.params["loss"][1][:3] == ("attrank", "listnet", "listmle")
    assert space.losses["listnet"] == LOSS_SPACES["listnet"] and space.losses["attrank"] == {}
    assert space.losses["lambdaloss"] == {"loss_params.sigma": ("log", 0.25, 4.0)}
    first = {k: v[1] if v[0] != "choice" else _label(v[1][0]) for k, v in space.params.items()}
    trial = optuna.trial.FixedTrial({**first, "loss": "listmle"})
    overrides = trial_overrides(trial, space)
    keys = [key for key, _ in overrides]
    assert dict(overrides)["loss"] == "listmle" and not [k for k in keys if k.startswith("loss_params")]
    config = StudyBase.of({"model": "qilcm"}).config.with_overrides(overrides)
    assert config.model_params["att_hidden"] == [128]  # a tuple choice comes back as a TOML list


def test_keys_the_base_config_sets_are_fixed_not_searched():
    base = {"model": "qilcm", "train": {"lr": 0.003}, "model_params": {"confusion_weight": 0.0}}
    space = search_space(base)
    assert "train.lr" not in space.params and "model_params.confusion_weight" not in space.params
    assert "model_params.encoder_width" in space.params
    # a loss option set: the loss is fixed too (its options would not fit another loss)
    fixed = search_space({"model": "mlp", "loss": "listnet", "loss_params": {"temperature": 2.0}})
    assert "loss" not in fixed.params and fixed.losses == {"listnet": {}}
    assert search_space({"model": "mlp", "loss": "listnet"}).losses == {"listnet": LOSS_SPACES["listnet"]}


def test_the_logit_searches_sgd_knobs_only_when_a_residual_wrapper_trains_it_by_sgd():
    assert "train.lr" not in search_space({"model": "mnl"}).params
    residual = search_space({"model": "mnl", "rerank": {"initial": "lambdamart", "residual": True}})
    assert {"train.lr", "train.input_noise"} <= set(residual.params) and residual.losses


def test_a_study_with_nothing_to_search_runs_one_trial(letor, tmp_path):
    from ctxrank.data.letor import read_letor

    train, valid = (read_letor(letor / f"{s}.txt") for s in ("train", "vali"))
    base = {"model": "mnl", "transform": "zscore", "model_params": {"alternative_specific": False}}
    result = tune(base, train, valid, out=tmp_path / "t", trials=3)
    assert result.ran == 1 and len(result.study.trials) == 1 and result.best is not None
    assert tune(base, train, valid, out=tmp_path / "t", trials=3).ran == 0  # resumed: already done


def test_plots_skip_the_importances_when_the_metric_never_varied(tmp_path):
    from ctxrank.tune import _plots

    study = optuna.create_study(direction="maximize")
    lr = {"train.lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)}
    for value in (0.001, 0.01, 0.1):  # a parameter that varied, a metric that did not (fANOVA would fail)
        study.add_trial(
            optuna.trial.create_trial(
                params={"train.lr": value},
                distributions=lr,
                value=0.5,
                user_attrs={"config": {"model": "mnl"}},
            )
        )
    assert _plots(study, tmp_path, "mrr", "") == ["optimization_history.png"]


def test_qilcm_ablation_variants_do_not_search_what_they_fix():
    full = search_space({"model": "qilcm"}).params
    no_confusion = search_space({"model": "qilcm-variant2"}).params
    assert "model_params.confusion_weight" in full and "model_params.confusion_form" in full
    assert full["model_params.dropout"] == ("float", 0.0, 0.5)  # QILCM's space has dropout
    assert "model_params.dropout" in no_confusion  # the variants fix the confusion term, not dropout
    assert not any(k.startswith("model_params.confusion") for k in no_confusion)
    assert set(search_space({"model": "qilcm-variant1"}).params) == set(full)


def test_lambdamart_searches_lightgbm_parameters_with_the_truncation_level():
    params = search_space({"model": "lambdamart"}).params
    assert {"num_leaves", "learning_rate", "min_data_in_leaf", "feature_fraction", "max_position"} == {
        k.split(".", 1)[1] for k in params
    }


def test_malformed_spaces_are_refused():
    from ctxrank.tune import _check_distribution

    for bad in [("log", 0, 1), ("int", 1.5, 3), ("float", 2, 1), ("choice", ()), ("uniform", 0, 1), [0, 1]]:
        with pytest.raises(ValueError, match="search space x"):
            _check_distribution("x", bad)
    with pytest.raises(ValueError, match="unknown loss"):
        _check_distribution("loss", ("choice", ("listnet", "nope")))


# ------------------------------------------------------------------------------------ the sampler
def test_trial_seeded_tpe_repeats_a_study_and_parallel_workers_draw_apart():
    def draws(seed):
        study = optuna.create_study(sampler=TrialSeededTPE(seed), direction="maximize")
        out = []
        for _ in range(3):
            t = study.ask()
            out.append(t.suggest_float("x", 0, 1))
            study.tell(t, out[-1])
        return out

    assert draws(0) == draws(0) and draws(0) != draws(1)
    # two workers on one study: the random start-up draws differ by trial number
    study = optuna.create_study(direction="maximize")
    a, b = TrialSeededTPE(0), TrialSeededTPE(0)
    t0, t1 = study.ask(), study.ask()
    v0 = a.sample_independent(
        study, t0._cached_frozen_trial, "x", optuna.distributions.FloatDistribution(0, 1)
    )
    v1 = b.sample_independent(
        study, t1._cached_frozen_trial, "x", optuna.distributions.FloatDistribution(0, 1)
    )
    assert v0 != v1


def test_mask_url_hides_the_password():
    assert mask_url("postgresql://me:secret@db:5432/x") == "postgresql://me:***@db:5432/x"
    assert mask_url("sqlite:////tmp/a.db") == "sqlite:////tmp/a.db"


# --------------------------------------------------------------------------------- studies (library)
def test_a_study_is_seeded_and_an_existing_one_continues(tmp_path):
    train, valid = make_ranking_data(30, seed=0), make_ranking_data(15, seed=1)
    base = {"model": "listnet", **TINY_EPOCHS}
    a = tune(base, train, valid, out=tmp_path / "a", trials=3)
    b = tune(base, train, valid, out=tmp_path / "b", trials=3)
    assert [t.params for t in a.study.trials] == [t.params for t in b.study.trials]
    assert [t.value for t in a.study.trials] == [t.value for t in b.study.trials]
    again = tune(base, train, valid, out=tmp_path / "a", trials=2)
    assert len(again.study.trials) == 5 and again.ran == 2
    # with total=True only the trials still missing run (an experiment resuming its study)
    assert tune(base, train, valid, out=tmp_path / "a", trials=5, total=True).ran == 0
    with pytest.raises(ValueError, match="was started with another"):
        tune({**base, "transform": "zscore"}, train, valid, out=tmp_path / "a", trials=1)


def test_the_row_order_warning_is_shown_by_the_first_trial_only(tmp_path):
    import warnings

    data = rows_sorted_by(make_ranking_data(30, min_len=3, seed=6), 0)
    base = {"model": "dcm", "model_params": {"hidden": 8, "embed": 4}, **TINY_EPOCHS}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning recorded, none deduplicated by its location
        result = tune(base, data, data, out=tmp_path / "t", trials=3)
    assert result.ran == 3
    said = [str(w.message) for w in caught if "sorted by f1" in str(w.message)]
    assert len(said) == 1, said


def test_on_epoch_is_called_after_every_epoch_and_its_exception_ends_the_fit():
    from ctxrank.training.run import run_training

    seen = []

    class Stop(Exception):
        pass

    def on_epoch(record):
        epoch, value = record["epoch"], record["valid_ndcg@10"]
        seen.append((epoch, value))
        if epoch == 2:
            raise Stop

    config = RunConfig.from_dict({"model": "listnet", "train": {"max_epochs": 5}})
    with pytest.raises(Stop):
        run_training(
            config, make_ranking_data(20), make_ranking_data(10, seed=1), progress=False, on_epoch=on_epoch
        )
    assert [e for e, _ in seen] == [1, 2] and all(np.isfinite(v) for _, v in seen)


def test_trials_are_pruned_on_the_per_epoch_validation_metric(tmp_path, monkeypatch):
    reported = []
    real_report = optuna.Trial.report

    def report(self, value, step):
        reported.append((self.number, step))
        real_report(self, value, step)

    monkeypatch.setattr(optuna.Trial, "report", report)
    monkeypatch.setattr(optuna.Trial, "should_prune", lambda self: self.number >= 1)
    train, valid = make_ranking_data(30, seed=0), make_ranking_data(15, seed=1)
    result = tune({"model": "listnet", "train": {"max_epochs": 3}}, train, valid, out=tmp_path, trials=3)
    states = [t.state for t in result.study.trials]
    assert states == [optuna.trial.TrialState.COMPLETE] + [optuna.trial.TrialState.PRUNED] * 2
    assert reported[:3] == [(0, 1), (0, 2), (0, 3)] and (1, 2) not in reported  # stopped after epoch 1
    assert finished_trials(result.study) == 3
    assert "| 1 | pruned |" in result.table


# ------------------------------------------------------------------------------------------ CLI
def test_cli_tune_writes_the_outputs_and_train_reproduces_the_best_trial(letor, tmp_path):
    d = letor
    common = ("--train", str(d / "train.txt"), "--valid", str(d / "vali.txt"))
    out_dir = tmp_path / "tune"
    rc, out, err = run(
        "tune", "--model", "listnet", *common, "--trials", "3", "--set", "train.max_epochs=3",
        "--out", str(out_dir), "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    assert "searching train.lr, transform, train.input_noise, loss_params.temperature" in out
    assert "fixed by the configuration: train.max_epochs" in out
    assert "| trial | state | valid ndcg@10 |" in out  # the Markdown table
    for name in ("study.db", "best.toml", "trials.csv", "tune.json", "optimization_history.png"):
        assert (out_dir / name).is_file(), name
    with (out_dir / "trials.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 and {r["state"] for r in rows} == {"complete"}
    summary = json.loads((out_dir / "tune.json").read_text())
    assert summary["trials"] == {"complete": 3} and summary["storage"].startswith("sqlite:///")
    best = summary["best"]
    # best.toml is a run config `ctxrank train --config` accepts; trained again it is the best trial
    rc, _, err = run(
        "train", "--config", str(out_dir / "best.toml"), *common, "--test", str(d / "test.txt"),
        "--out", str(tmp_path / "m"), "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    meta = json.loads((tmp_path / "m" / "ctxrank.json").read_text())
    assert meta["training"]["best_valid_metric"] == pytest.approx(best["value"], abs=1e-9)
    # the same --out continues the study
    rc, out, err = run(
        "tune", "--model", "listnet", *common, "--trials", "1", "--set", "train.max_epochs=3",
        "--out", str(out_dir), "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    assert len(_study(out_dir).trials) == 4
    assert "best: trial" in out and "train it: ctxrank train --config" in out


def test_a_run_configs_tune_block_sets_the_search_and_train_refuses_it(letor, tmp_path):
    """``[tune]`` in a run config (trials, prune) is read by ``ctxrank tune --config``; the command
    line wins; unknown keys and bad values are errors; ``ctxrank train`` says where the block belongs."""
    common = ("--train", str(letor / "train.txt"), "--valid", str(letor / "vali.txt"), "--no-progress")
    config = tmp_path / "run.toml"
    config.write_text('model = "listnet"\n[train]\nmax_epochs = 2\n[tune]\ntrials = 2\nprune = false\n')
    rc, out, err = run("tune", "--config", str(config), *common, "--out", str(tmp_path / "a"))
    assert rc == 0, err
    study = _study(tmp_path / "a")
    assert len(study.trials) == 2 and "2 trials" in out
    assert "tune" not in tomllib.loads((tmp_path / "a" / "best.toml").read_text())
    rc, _, err = run("tune", "--config", str(config), *common, "--trials", "1", "--out", str(tmp_path / "b"))
    assert rc == 0 and len(_study(tmp_path / "b").trials) == 1, err
    for block, message in [
        ("[tune]\ntrials = 0\n", "trials must be a positive integer, got 0"),
        ("[tune]\nprune = 1\n", "prune must be true or false"),
        ("[tune]\nsampler = 'tpe'\n", "unknown key(s) ['sampler']; valid keys: ['trials', 'prune']"),
    ]:
        config.write_text('model = "listnet"\n' + block)
        rc, _, err = run("tune", "--config", str(config), *common, "--out", str(tmp_path / "c"))
        assert rc == 2 and message in err, (block, err)
    config.write_text('model = "listnet"\n[tune]\ntrials = 2\n')
    test = ("--test", str(letor / "test.txt"))
    rc, _, err = run("train", "--config", str(config), *common, *test, "--out", str(tmp_path / "m"))
    assert rc == 2 and "[tune] (trials, prune) is read by `ctxrank tune --config FILE`" in err


def test_cli_tune_never_reads_the_test_split(monkeypatch, tmp_path):
    import ctxrank.data.registry as registry
    import ctxrank.tune as tuning

    read, tests_given = [], []
    real_read, real_run = registry._read_split, tuning.run_training

    def spy_read(spec, split, *args, **kwargs):
        read.append(split)
        return real_read(spec, split, *args, **kwargs)

    def spy_run(config, train, valid, test=None, **kwargs):
        tests_given.append(test)
        return real_run(config, train, valid, test, **kwargs)

    monkeypatch.setattr(registry, "_read_split", spy_read)
    monkeypatch.setattr(tuning, "run_training", spy_run)
    rc, _, err = run(
        "tune", "--model", "listnet", "--dataset", "mq2008", "--fold", "1", "--trials", "1",
        "--set", "train.max_epochs=1", "--out", str(tmp_path / "t"), "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    assert sorted(read) == ["train", "valid"] and tests_given == [None]


def test_cli_tune_options_are_checked(letor, tmp_path):
    files = ("--train", str(letor / "train.txt"), "--valid", str(letor / "vali.txt"))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    for argv, message in [
        (("--trials", "0"), "positive integer"),
        (("--timeout", "-3"), "positive number of seconds"),
        (("--storage", "study.db"), "database URL"),
        (("--storage", "nosuchdb://x/y"), "storage nosuchdb://x/y"),
        (("--test", "x.txt"), "unrecognized arguments"),
        (("--study-name", " "), "must not be empty"),
        (("--set", "train.lr=-1"), "train.lr"),
    ]:
        rc, _, err = run("tune", "--model", "listnet", *files, "--out", str(tmp_path / "o"), *argv)
        assert rc == 2 and message in err, (argv, err)
    rc, _, err = run("tune", "--model", "listnet", *files, "--out", str(tmp_path / "busy"))
    assert rc == 2 and "holds files that ctxrank did not write (notes.txt)" in err
    rc, _, err = run("tune", *files, "--out", str(tmp_path / "o2"))
    assert rc == 2 and "give --model" in err


def test_cli_tune_with_a_storage_url_and_study_name(letor, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    rc, _, err = run(
        "tune", "--model", "lambdamart", "--train", str(letor / "train.txt"),
        "--valid", str(letor / "vali.txt"),
        "--set", "model_params.n_estimators=10", "--trials", "2", "--storage", url, "--study-name", "lm",
        "--out", str(tmp_path / "o"), "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    assert not (tmp_path / "o" / "study.db").exists()
    assert len(optuna.load_study(study_name="lm", storage=url).trials) == 2
    best = tomllib.loads((tmp_path / "o" / "best.toml").read_text())
    assert best["model"] == "lambdamart" and best["model_params"]["n_estimators"] == 10


def _user_sqlite(path):
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("create table mine (x integer)")
        db.execute("insert into mine values (42)")
        db.commit()


def test_tune_refuses_an_out_directory_of_the_users_files_unless_overwrite(letor, tmp_path):
    """The user's trials.csv / best.toml / study.db (their own SQLite file) in --out: refused, byte for
    byte unchanged (Optuna adds no table); --overwrite replaces the files of tune's names, keeps the
    others; a study ctxrank started there is continued, and so is one after --overwrite."""
    out = tmp_path / "mine"
    out.mkdir()
    mine = {"trials.csv": b"my,table\n", "best.toml": b"# mine\n", "notes.txt": b"kept"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    _user_sqlite(out / "study.db")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    argv = (
        "tune", "--model", "lambdamart", "--train", str(letor / "train.txt"),
        "--valid", str(letor / "vali.txt"), "--set", "model_params.n_estimators=3", "--trials", "1",
        "--out", str(out), "--no-progress",
    )  # fmt: skip
    for files in (("study.db",), ("trials.csv", "best.toml"), ("study.db", "best.toml", "notes.txt")):
        for name in set(before) - set(files):
            (out / name).unlink(missing_ok=True)
        for name in files:
            (out / name).write_bytes(before[name])
        rc, _, err = run(*argv)
        assert rc == 2 and f"holds files that ctxrank did not write ({', '.join(sorted(files))})" in err, err
        assert "--overwrite" in err and {p.name: p.read_bytes() for p in out.iterdir()} == {
            n: before[n] for n in files
        }
    for name, data in before.items():
        (out / name).write_bytes(data)
    rc, _, err = run(*argv, "--overwrite")
    assert rc == 0, err
    assert (out / "notes.txt").read_bytes() == b"kept"
    assert (out / "trials.csv").read_bytes() != mine["trials.csv"]
    assert len(_study(out, "lambdamart").trials) == 1  # a new study in a new file: the user's was replaced
    rc, _, err = run(*argv)  # ctxrank's study now: continued without --overwrite
    assert rc == 0, err
    assert len(_study(out, "lambdamart").trials) == 2


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_every_file_tune_writes_gets_the_umask_mode(letor, tmp_path, umask):
    import stat

    out = tmp_path / "t"
    old = os.umask(umask)
    try:
        rc, _, err = run(
            "tune", "--model", "lambdamart", "--train", str(letor / "train.txt"),
            "--valid", str(letor / "vali.txt"), "--set", "model_params.n_estimators=3", "--trials", "2",
            "--out", str(out), "--no-progress",
        )  # fmt: skip
    finally:
        os.umask(old)
    assert rc == 0, err
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert {"study.db", "trials.csv", "best.toml", "tune.json", "optimization_history.png"} <= set(modes)
    assert set(modes.values()) == {0o666 & ~umask}, modes


def test_the_tune_api_claims_its_directory_too(letor, tmp_path):
    from ctxrank.data.letor import read_letor

    out = tmp_path / "mine"
    out.mkdir()
    _user_sqlite(out / "study.db")
    data = read_letor(letor / "train.txt")
    base = {"model": "lambdamart", "model_params": {"n_estimators": 3}}
    with pytest.raises(ValueError, match=r"did not write \(study.db\).*pass overwrite=True"):
        tune(base, data, data, out=out, trials=1)
    assert sorted(p.name for p in out.iterdir()) == ["study.db"]
    result = tune(base, data, data, out=out, trials=1, overwrite=True)
    assert len(result.study.trials) == 1


def test_two_processes_share_one_sqlite_study(letor, tmp_path):
    argv = [
        sys.executable, "-m", "ctxrank", "tune", "--model", "listnet", "--train", str(letor / "train.txt"),
        "--valid", str(letor / "vali.txt"), "--trials", "2", "--set", "train.max_epochs=2",
        "--out", str(tmp_path / "shared"), "--no-progress",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    trials = _study(tmp_path / "shared").trials
    assert len(trials) == 4 and {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    params = {tuple(sorted(t.params.items())) for t in trials}
    assert len(params) == 4  # no configuration tried twice
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]


def test_help_imports_neither_optuna_nor_torch():
    """``ctxrank --help`` imports neither; ``ctxrank tune --help`` imports the tune command's module
    (and torch with it) but not Optuna, an optional extra: the help shows without it."""
    code = (
        "import sys\n"
        "from ctxrank.cli import main\n"
        "loaded = lambda: ' '.join(m for m in ('optuna', 'torch', 'numpy') if m in sys.modules) or 'none'\n"
        "assert main(['--help']) == 0\n"
        "print('loaded:', loaded())\n"
        "assert main(['tune', '--help']) == 0\n"
        "print('loaded:', loaded())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = [line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("loaded: ")]
    assert loaded == ["none", "torch numpy"]


# ------------------------------------------------------------------------------------- experiments
def _spec_text(data_file, extra=""):
    return f"""
name = "tuned"
[data]
file = "{data_file}"
[runs]
count = 1
[defaults]
train = {{ max_epochs = 2 }}
[models.lambdamart]
model = "lambdamart"
model_params = {{ n_estimators = 10 }}
[models.listnet]
model = "listnet"
[report]
target = "listnet"
test = "runs-plain"
{extra}
"""


def test_experiment_tune_block_tunes_every_model_then_tests_once(letor, tmp_path, monkeypatch):
    import ctxrank.tune as tuning
    from ctxrank.experiments import load_spec, run_experiment

    tests_given = []
    real_run = tuning.run_training

    def spy_run(config, train, valid, test=None, **kwargs):
        tests_given.append(test)
        return real_run(config, train, valid, test, **kwargs)

    monkeypatch.setattr(tuning, "run_training", spy_run)
    path = tmp_path / "spec.toml"
    path.write_text(_spec_text(letor / "train.txt", "[tune]\ntrials = 2\nseed = 3\n"))
    spec = load_spec(path)
    assert spec.tune is not None and spec.tune.trials == 2 and spec.tune.seed == 3
    store = run_experiment(spec, tmp_path / "exp", progress=False, log=lambda _: None)
    assert tests_given == [None] * 4  # 2 trials x 2 models, validation only
    for model in ("lambdamart", "listnet"):
        record = store.load_run(model, 0, 0)
        study_dir = tmp_path / "exp" / record["tune"]["dir"]
        assert record["tune"]["trials"] == 2 and (study_dir / "best.toml").is_file()
        best = tomllib.loads((study_dir / "best.toml").read_text())
        assert record["config"] == RunConfig.from_dict(best).to_dict()  # the chosen config was tested
    # the evidence keeps every trial of every study, the tested one marked
    import pandas as pd

    from ctxrank.experiments.evidence import write_evidence

    write_evidence(spec, store, tmp_path / "evidence")
    trials = pd.read_csv(tmp_path / "evidence" / "trials.csv.gz")
    assert list(trials.columns[:6]) == ["model", "seed", "fold", "trial", "chosen", "state"]
    assert sorted(set(trials["model"])) == ["lambdamart", "listnet"] and len(trials) == 4
    for model in ("lambdamart", "listnet"):
        mine = trials[trials["model"] == model]
        chosen = store.load_run(model, 0, 0)["tune"]["best_trial"]
        assert mine.loc[mine["chosen"] == 1, "trial"].tolist() == [chosen]
    # resumed: the studies are complete, nothing is tuned again
    tests_given.clear()
    run_experiment(spec, tmp_path / "exp", progress=False, log=lambda _: None)
    assert tests_given == []
    # best.toml is accepted as an experiment's model table (config = FILE, relative to the spec)
    spec_text = _spec_text(letor / "train.txt").replace(
        '[models.listnet]\nmodel = "listnet"',
        f'[models.listnet]\nconfig = "exp/{record["tune"]["dir"]}/best.toml"',
    )
    path.write_text(spec_text)
    assert load_spec(path).models["listnet"] == {**best, "train": {**best["train"], "max_epochs": 2}}


def test_runs_copied_with_their_studies_are_reused_and_without_them_refused_before_any_run(
    letor, tmp_path, monkeypatch, capsys
):
    """A tuned experiment's runs copied into another ``--out`` (docs/context-models.md) are reused with
    their studies (``tune/``, which may be copied there before the first run too); copied without them,
    ``--evidence`` is refused before any run, naming the study to copy, not after hours of runs."""
    import shutil

    import ctxrank.tune as tuning
    from ctxrank.experiments import load_spec, run_experiment

    path = tmp_path / "spec.toml"
    path.write_text(_spec_text(letor / "train.txt", "[tune]\ntrials = 2\nseed = 3\n"))
    first = tmp_path / "first"
    run_experiment(load_spec(path), first, progress=False, log=lambda _: None)
    trained = []
    monkeypatch.setattr(tuning, "run_training", lambda *a, **k: trained.append(1))
    argv = ["experiment", str(path), "--out", str(tmp_path / "second"), "--no-progress"]
    shutil.copytree(first / "runs", tmp_path / "second" / "runs")
    assert main([*argv, "--evidence", str(tmp_path / "evidence")]) == 2
    err = capsys.readouterr().err
    assert "the trials of run lambdamart seed 0 fold 0 are missing" in err and "copy its tune/" in err
    assert not (tmp_path / "evidence").exists() and not (tmp_path / "second" / "experiment.json").exists()
    shutil.copytree(first / "tune", tmp_path / "second" / "tune")
    assert main([*argv, "--evidence", str(tmp_path / "evidence")]) == 0
    assert trained == []  # every run and study reused
    assert (tmp_path / "evidence" / "trials.csv.gz").is_file()


def test_an_experiment_resumes_from_its_partial_evidence_in_a_new_directory(
    letor, tmp_path, monkeypatch, capsys
):
    """``--resume-from EVIDENCE``: an experiment whose evidence was kept part-way (one shard of two) and
    whose run store is gone continues in a new ``--out``: the evidence's runs and their studies' trials
    are restored, only the other runs are tuned and trained, and the final evidence equals that of an
    uninterrupted experiment (every per-query value; every trial, less its seconds)."""
    import shutil

    import pandas as pd
    import pyarrow.parquet as pq

    import ctxrank.tune as tuning

    path = tmp_path / "spec.toml"
    path.write_text(_spec_text(letor / "train.txt", "[tune]\ntrials = 2\nseed = 3\n"))

    def run(out, *extra):
        argv = ["experiment", str(path), "--out", str(tmp_path / out), "--runs", "2", "--no-progress"]
        return main([*argv, *extra])

    assert run("whole", "--evidence", str(tmp_path / "whole-ev")) == 0
    part = str(tmp_path / "part-ev")
    assert run("first", "--shard", "1/2", "--evidence", part) == 0
    shutil.rmtree(tmp_path / "first")  # the session ended: only the evidence was kept
    trained = []
    real_run = tuning.run_training
    monkeypatch.setattr(tuning, "run_training", lambda *a, **k: trained.append(1) or real_run(*a, **k))
    capsys.readouterr()
    assert run("second", "--resume-from", part, "--evidence", part) == 0
    assert "resumed from" in capsys.readouterr().out
    assert len(trained) == 4  # seed 1's two studies of 2 trials; seed 0 was restored
    whole, resumed = (pq.read_table(tmp_path / d / "runs.parquet") for d in ("whole-ev", "part-ev"))
    assert resumed.equals(whole)
    trials = [pd.read_csv(tmp_path / d / "trials.csv.gz") for d in ("whole-ev", "part-ev")]
    trials = [t.drop(columns="seconds") for t in trials]
    pd.testing.assert_frame_equal(trials[1], trials[0])
    trained.clear()
    assert run("second", "--resume-from", part) == 0 and trained == []  # nothing left to run or restore
    assert run("third", "--resume-from", str(tmp_path / "whole")) == 2  # a run store, not evidence
    assert "not an evidence directory" in capsys.readouterr().err
    other = tmp_path / "other.toml"
    other.write_text(path.read_text().replace('model = "listnet"', 'model = "mlp"'))
    argv = ["experiment", str(other), "--out", str(tmp_path / "fourth"), "--resume-from", part]
    assert main([*argv, "--no-progress"]) == 2
    assert "the evidence of another experiment" in capsys.readouterr().err and trained == []


def test_experiment_tune_ensemble_trains_the_chosen_config_as_a_seed_ensemble(letor, tmp_path, monkeypatch):
    """``[tune] ensemble = k``: the trials are single models (a finished study is reused as it is), the
    chosen configuration is trained k times (seeds s..s+k-1) and tested once as their mean score; the
    conditional logit's maximum-likelihood fit does not depend on the seed and stays one model."""
    import shutil

    import ctxrank.experiments.runner as runner
    from ctxrank.experiments import load_spec, run_experiment
    from ctxrank.experiments.store import RunStore

    def text(tune):
        mnl = '[models.mnl]\nmodel = "mnl"\n[report]'
        return _spec_text(letor / "train.txt", tune).replace("[report]", mnl)

    path = _write(tmp_path / "spec.toml", text("[tune]\ntrials = 2\n"))
    single = load_spec(path)
    run_experiment(single, tmp_path / "single", progress=False, log=lambda _: None)
    path.write_text(text("[tune]\ntrials = 2\nensemble = 3\n"))
    spec = load_spec(path)
    assert spec.tune is not None and spec.tune.ensemble == 3
    assert spec.fingerprint() != single.fingerprint()
    (tmp_path / "ens").mkdir()
    shutil.copytree(tmp_path / "single" / "tune", tmp_path / "ens" / "tune")  # the finished studies
    final = []
    real_run = runner.run_training

    def spy_run(config, train, valid, test=None, **kwargs):
        if test is not None:
            final.append(config)
        return real_run(config, train, valid, test, **kwargs)

    monkeypatch.setattr(runner, "run_training", spy_run)
    store = run_experiment(spec, tmp_path / "ens", progress=False, log=lambda _: None)
    assert [(c.model, c.ensemble) for c in final] == [("lambdamart", 3), ("listnet", 3), ("mnl", 1)]
    alone = RunStore(tmp_path / "single").load_run("mnl", 0, 0)
    assert store.load_run("mnl", 0, 0)["metrics"] == alone["metrics"]
    for model in ("lambdamart", "listnet"):
        one, ens = RunStore(tmp_path / "single").load_run(model, 0, 0), store.load_run(model, 0, 0)
        assert ens["tune"]["trials"] == 2 and ens["tune"]["best_trial"] == one["tune"]["best_trial"]
        assert ens["config"] == {**one["config"], "ensemble": 3}
        assert ens["summary"]["ensemble"] == 3
        if model == "listnet":  # seeds matter for a neural model: the ensemble's scores differ
            assert ens["metrics"]["ndcg@10"] != one["metrics"]["ndcg@10"]
    # a model that is an ensemble already: one place only
    path.write_text(
        _spec_text(letor / "train.txt", "[tune]\nensemble = 3\n").replace(
            'model = "listnet"', 'model = "listnet"\nensemble = 2'
        )
    )
    with pytest.raises(ValueError, match=r"models.listnet.*set the seed ensemble in one place"):
        load_spec(path)


def test_experiment_tune_block_is_validated(letor, tmp_path):
    from ctxrank.experiments import load_spec

    path = tmp_path / "spec.toml"
    for block, message in [
        ("[tune]\ntrials = 0\n", r"\[tune\] trials must be a positive integer"),
        ("[tune]\ntrials = 2\nsampler = 'grid'\n", "unknown key"),
        ("[tune]\nprune = 1\n", "prune must be true or false"),
        ("[tune]\nensemble = 0\n", r"\[tune\] ensemble must be a positive integer"),
    ]:
        path.write_text(_spec_text(letor / "train.txt", block))
        with pytest.raises(ValueError, match=message):
            load_spec(path)
    plain = load_spec(_write(path, _spec_text(letor / "train.txt")))
    tuned = load_spec(_write(path, _spec_text(letor / "train.txt", "[tune]\ntrials = 2\n")))
    assert plain.tune is None and plain.fingerprint() != tuned.fingerprint()


def _write(path, text):
    path.write_text(text)
    return path


# ----------------------------------------------------------------- one split rule, one metric option
def test_cli_tune_splits_by_group_col_and_tunes_lambdamart_on_loglik(tmp_path, monkeypatch):
    """``tune --data TABLE --group-col person`` splits as ``train`` does (no person in two splits; it
    was an unknown option); ``train.metric=loglik`` is valid for LambdaMART (it was refused) and a
    trial's value is the validation log-likelihood of its scores; the suggested train command repeats
    the split."""
    import ctxrank.tune as tuning
    from ctxrank.data.choice import choice_frame

    frame = choice_frame("electricity")
    frame[frame["person"].astype(int) <= 30].to_csv(tmp_path / "elec.csv", index=False)
    seen = []
    real_run = tuning.run_training

    def spy_run(config, train, valid, test=None, **kwargs):
        result = real_run(config, train, valid, test, **kwargs)
        seen.append((train, valid, result.predictor.predict(valid)))
        return result

    monkeypatch.setattr(tuning, "run_training", spy_run)
    rc, out, err = run(
        "tune", "--model", "lambdamart", "--data", str(tmp_path / "elec.csv"), "--query-col", "situation",
        "--label-col", "chosen", "--group-col", "person", "--set", "train.metric=loglik",
        "--set", "model_params.n_estimators=5", "--trials", "2", "--out", str(tmp_path / "t"),
        "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    assert "random split by person" in out and "valid loglik" in out
    train, valid, scores = seen[0]
    assert not set(train.group_ids) & set(valid.group_ids)
    loglik = [  # log softmax of the chosen item's score, by hand
        scores[a:b][valid.labels[a:b] > 0][0] - np.log(np.exp(scores[a:b]).sum())
        for a, b in zip(valid.query_offsets[:-1], valid.query_offsets[1:], strict=True)
    ]
    study = optuna.load_study(study_name="lambdamart", storage=f"sqlite:///{tmp_path / 't' / 'study.db'}")
    first = min(study.trials, key=lambda t: t.number)
    assert first.value == pytest.approx(np.mean(loglik), abs=1e-9)
    train_it = next(line for line in out.splitlines() if line.startswith("train it:"))
    assert "--group-col person" in train_it and "--query-col situation" in train_it
    assert "--label-col chosen" in train_it and "--test" not in train_it


# ------------------------------------------------------------------ one typed base, one serialization
def test_the_base_configuration_is_validated_once_before_the_first_trial(monkeypatch, tmp_path):
    """``RunConfig.from_dict(base)`` ran in ``tune`` and again in ``search_space`` (and twice more from
    ``ctxrank tune``, once more for Ray): a :class:`StudyBase` is validated once and handed down."""
    from ctxrank import tune as tuning

    base = {"model": "listnet", "train": {"max_epochs": 2, "seed": 3}}
    calls: list[dict] = []
    original = RunConfig.from_dict.__func__

    def counting(cls, d):
        calls.append(d)
        return original(cls, d)

    monkeypatch.setattr(RunConfig, "from_dict", classmethod(counting))
    train, valid = make_ranking_data(20, seed=0), make_ranking_data(10, seed=1)
    result = tune(base, train, valid, out=tmp_path / "a", trials=2)
    # the base and the best trial's saved config; a trial is the base with its typed overrides
    assert [d for d in calls if d == base] == [base] and len(calls) == 1 + 1
    assert result.best is not None and result.best.train.seed == 3
    study_base = tuning.StudyBase.of(base)
    calls.clear()
    assert tuning.StudyBase.of(study_base) is study_base and tuning.search_space(study_base).params
    assert calls == []  # a StudyBase is not validated again
    study_base.values["train"]["seed"] = 7
    assert base["train"]["seed"] == 3  # the base is copied, not shared


def test_a_trial_configuration_is_the_typed_base_with_the_trials_overrides():
    """No ``json.loads(json.dumps(base))`` inside the process, no run config rebuilt from a dict: a trial
    is ``base.config.with_overrides(...)``, a tuple stays a tuple, the base is untouched; JSON is only
    what the study's storage keeps (the trial's ``config`` attribute)."""
    base = StudyBase.of({"model": "mlp", "model_params": {"hidden": (8, 4)}, "train": {"max_epochs": 2}})
    space = search_space(base)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), direction="maximize")
    overrides = trial_overrides(study.ask(), space)
    config = base.config.with_overrides(overrides)
    assert config.model_params["hidden"] == (8, 4) and isinstance(config.model_params["hidden"], tuple)
    assert config.train.max_epochs == 2 and dict(overrides)["train.lr"] == config.train.lr
    assert base.config.model_params == {"hidden": (8, 4)}
    assert config.model_params is not base.config.model_params


def test_a_trials_training_warnings_are_shown_on_its_own_lines():
    """A trial's training warnings (recorded in its summary, not issued loose between trials' lines,
    where they read as the previous trial's) follow its line, named by its number."""
    from types import SimpleNamespace

    import optuna

    from ctxrank.tune import _progress

    said = []
    trial = SimpleNamespace(
        number=4,
        state=optuna.trial.TrialState.COMPLETE,
        value=0.5,
        params={"train.lr": 0.001},
        intermediate_values={},
        user_attrs={"summary": {"warnings": ["mlp: training stopped at train.max_epochs = 2 ..."]}},
    )
    _progress(said.append, "ndcg@10", None)(None, trial)
    assert said == [
        "trial 4: valid ndcg@10 0.5000; train.lr=0.001",
        "  trial 4 warning: mlp: training stopped at train.max_epochs = 2 ...",
    ]
