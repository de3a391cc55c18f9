"""Crash safety of training: per-epoch training state, `ctxrank train --resume`, determinism.

The kill test runs `python -m ctxrank train` in a subprocess, SIGKILLs it in the middle of an epoch and
resumes it (in this process); the determinism test compares a run in this process with one in a
subprocess; everything else runs in-process on small data.
"""

import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ctxrank.cli import main
from ctxrank.config import RunConfig, TrainConfig, resolve_config
from ctxrank.data.synth import write_synthetic_letor
from ctxrank.losses import LOSSES, listnet
from ctxrank.registry import make_model
from ctxrank.training.loop import NonFiniteLossError, fit, seed_everything
from ctxrank.training.resume import STATE_FILE, StateDir, TrainingState
from tests.conftest import make_ranking_data

SRC = Path(__file__).resolve().parents[2] / "src"
# an MLP with dropout, so that torch's RNG state matters as well as the batch order and Adam's state
TRAIN = [
    *("--model", "mlp", "--no-progress"),
    *("--set", "model_params.hidden=[32]", "--set", "model_params.dropout=0.2"),
    *("--set", "train.max_epochs=4", "--set", "train.patience=10", "--set", "train.batch_size=4"),
    *("--set", "train.lr=0.01", "--set", "train.threads=1", "--seed", "3"),
]
FILES = ("model.safetensors", "test_metrics.json")


@pytest.fixture(scope="module")
def letor(tmp_path_factory):
    d = tmp_path_factory.mktemp("letor")
    for i, name in enumerate(("tr", "va", "te")):
        n = 200 if name == "tr" else 40
        write_synthetic_letor(d / f"{name}.txt", n_queries=n, list_size=20, n_features=12, seed=i)
    return d


def _argv(letor, out):
    files = [str(letor / f"{n}.txt") for n in ("tr", "va", "te")]
    return ["train", "--train", files[0], "--valid", files[1], "--test", files[2], "--out", str(out), *TRAIN]


def _env():
    return {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}


def _ctxrank(*argv):
    return [sys.executable, "-m", "ctxrank", *argv]


def _log(out):
    """train_log.jsonl without the timings."""
    records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


@pytest.fixture(scope="module")
def reference(letor):
    """An uninterrupted `ctxrank train` run in a subprocess."""
    out = letor / "reference"
    res = subprocess.run(
        _ctxrank(*_argv(letor, out)), capture_output=True, text=True, env=_env(), timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_run_killed_mid_epoch_resumes_to_bitwise_the_same_model_and_metrics(letor, reference, capsys):
    out = letor / "killed"
    proc = subprocess.Popen(
        _ctxrank(*_argv(letor, out)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    store, deadline = StateDir(out / "resume"), time.monotonic() + 120
    try:
        while (store.saved_epoch() or 0) < 1:  # poll until the first epoch's state is committed
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        seconds = json.loads(store.manifest.read_text())["history"][0]["seconds"]
        time.sleep(seconds / 2)  # into the next epoch
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    saved = store.saved_epoch()
    assert 1 <= saved < 4 and not (out / "ctxrank.json").exists()  # killed before the end

    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--no-progress"]) == 0  # here: one process start less
    assert f"epoch {saved} was the last one saved" in capsys.readouterr().out
    for name in FILES:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    assert _log(out) == _log(reference)  # the killed epoch is logged once
    meta = json.loads((out / "ctxrank.json").read_text())
    assert meta["training"]["resumed_from_epoch"] == saved
    assert not (out / "resume").exists()  # removed once the run is complete


def test_same_config_and_seed_give_bitwise_identical_runs(letor, reference, tmp_path):
    """A second run (in this process) equals the reference run (another process) byte for byte."""
    assert main(_argv(letor, tmp_path / "again")) == 0
    for name in FILES:
        assert (tmp_path / "again" / name).read_bytes() == (reference / name).read_bytes(), name
    assert _log(tmp_path / "again") == _log(reference)
    meta = json.loads((reference / "ctxrank.json").read_text())  # what repeating the run needs
    command = meta["command"]
    assert command["command"][:2] == ["ctxrank", "train"] and "--seed" in command["command"]
    assert command["options"]["train_file"] == str(letor / "tr.txt")
    assert meta["run_config"]["train"]["seed"] == 3 and meta["run_config"]["train"]["threads"] == 1


# ------------------------------------------------------------------------------------------ in-process
FAST = {"batch_size": 8, "max_epochs": 4, "patience": 10, "lr": 0.02, "threads": 1, "seed": 5}


@pytest.fixture(scope="module")
def data():
    return make_ranking_data(60, seed=11), make_ranking_data(20, seed=12)


def _fit(data, state_dir=None, resume=False, loss=listnet, log_path=None, **train):
    tr, va = data
    seed_everything(0)
    model = make_model("mlp", tr.n_features, {"hidden": [16], "dropout": 0.2})
    result = fit(
        model,
        loss,
        tr,
        va,
        TrainConfig(**{**FAST, **train}),
        progress=False,
        state_dir=state_dir,
        resume=resume,
        log_path=log_path,
    )
    return model, result


def _same(a, b):
    return all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("full") / "resume"
    model, result = _fit(data, state_dir)
    return model, result, state_dir


class _Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so nothing on the way catches it."""


@pytest.mark.parametrize("where", ["state-0002", "best-0002", "state.json#2", "after-manifest#2"])
def test_a_kill_while_writing_the_state_leaves_a_loadable_state(
    data, uninterrupted, tmp_path, monkeypatch, where
):
    import ctxrank.training.resume as resume_mod

    ref_model, ref_result, _ = uninterrupted
    assert ref_result.history[1]["best_epoch"] == 2  # epoch 2 improves, so it writes new best weights
    state_dir = tmp_path / "resume"
    replace, fsync_dir, calls = os.replace, resume_mod._fsync_dir, {"manifest": 0, "fsync": 0}

    def flaky_replace(src, dst):
        name = Path(dst).name
        if name == STATE_FILE:
            calls["manifest"] += 1
        if name.startswith(where) or (
            where == "state.json#2" and name == STATE_FILE and calls["manifest"] == 2
        ):
            raise _Killed
        replace(src, dst)

    def flaky_fsync_dir(d):
        calls["fsync"] += 1
        fsync_dir(d)
        if where == "after-manifest#2" and calls["fsync"] == 4:  # manifest of epoch 2 committed
            raise _Killed

    with monkeypatch.context() as m, pytest.raises(_Killed):
        m.setattr(os, "replace", flaky_replace)
        m.setattr(resume_mod, "_fsync_dir", flaky_fsync_dir)
        _fit(data, state_dir)
    (state_dir / "state-0002-deadbeef.safetensors").write_bytes(b"torn")  # leftovers of a real kill
    (state_dir / f".{STATE_FILE}.x1y2.tmp").write_bytes(b'{"epoch": 2, "fi')
    expected = 2 if where == "after-manifest#2" else 1
    assert StateDir(state_dir).load().epoch == expected  # the previous (or new) complete state

    model, result = _fit(data, state_dir, resume=True)
    assert _same(model, ref_model)
    assert [h["valid_ndcg@10"] for h in result.history] == [h["valid_ndcg@10"] for h in ref_result.history]
    assert result.resumed_from_epoch == expected
    manifest = json.loads((state_dir / STATE_FILE).read_text())
    left = sorted(p.name for p in state_dir.iterdir())
    assert left == sorted({STATE_FILE, *(e["file"] for e in manifest["files"].values())})  # junk cleaned


def test_resuming_a_finished_state_trains_no_more(data, uninterrupted):
    ref_model, ref_result, state_dir = uninterrupted
    model, result = _fit(data, state_dir, resume=True)
    assert _same(model, ref_model) and result.history == ref_result.history
    assert result.resumed_from_epoch == FAST["max_epochs"]


def test_releasing_the_heap_after_every_step_changes_no_number_and_resumes_across_values(
    data, uninterrupted, tmp_path, monkeypatch
):
    """``train.release_memory = "step"`` hands the heap back after every optimizer step (and after each
    epoch, as ``"epoch"`` does): the same weights and history bit for bit, and a state saved under one
    value resumes under the other (the setting is no part of the run's identity)."""
    import ctxrank.training.loop as loop

    ref_model, ref_result, _ = uninterrupted
    counts = {}
    for value in ("epoch", "step"):
        calls = []
        monkeypatch.setattr(loop, "release_free_memory", lambda calls=calls: calls.append(1))
        model, result = _fit(data, tmp_path / value, release_memory=value)
        numbers = [{k: v for k, v in h.items() if k != "seconds"} for h in result.history]
        assert _same(model, ref_model) and numbers == [
            {k: v for k, v in h.items() if k != "seconds"} for h in ref_result.history
        ]
        counts[value] = len(calls)
    steps = FAST["max_epochs"] * -(-data[0].n_queries // FAST["batch_size"])  # batches of 8 of 60 queries
    assert counts == {"epoch": FAST["max_epochs"] + 1, "step": FAST["max_epochs"] + 1 + steps}
    model, result = _fit(data, tmp_path / "epoch", resume=True, release_memory="step")
    assert _same(model, ref_model) and result.resumed_from_epoch == FAST["max_epochs"]
    with pytest.raises(ValueError, match=r"train\.release_memory.*'epoch', 'step'"):
        TrainConfig(release_memory="always")


def test_a_state_of_another_run_is_refused(data, uninterrupted):
    _, _, state_dir = uninterrupted
    with pytest.raises(ValueError, match=r"different run.*train_config\.lr: saved 0\.02, now 0\.03"):
        _fit(data, state_dir, resume=True, lr=0.03)
    with pytest.raises(ValueError, match="holds the training state of another run"):
        _fit(data, state_dir)  # a new run does not overwrite it silently


def _evil_pickle(marker):
    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    return pickle.dumps({"w": Evil()})


@pytest.mark.parametrize("target", ["state.json", "state", "best", "state-with-matching-sha256"])
def test_a_planted_pickle_is_refused_and_never_runs(data, tmp_path, target):
    state_dir = tmp_path / "resume"
    _fit(data, state_dir, max_epochs=2)
    marker = tmp_path / "pwned"
    blob = _evil_pickle(marker)
    manifest_path = state_dir / STATE_FILE
    manifest = json.loads(manifest_path.read_text())
    if target == "state.json":
        manifest_path.write_bytes(blob)
        message = "not a valid training state manifest"
    else:
        entry = manifest["files"]["best" if target == "best" else "state"]
        (state_dir / entry["file"]).write_bytes(blob)
        message = "does not match the SHA-256"
        if target == "state-with-matching-sha256":
            import hashlib

            entry.update(bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
            manifest_path.write_text(json.dumps(manifest))
            message = "not a safetensors file"
    with pytest.raises(ValueError, match=message):
        StateDir(state_dir).load()
    with pytest.raises(ValueError, match=message):
        _fit(data, state_dir, resume=True, max_epochs=2)
    assert not marker.exists()


def test_non_finite_loss_keeps_the_last_good_state(data, tmp_path):
    calls = {"n": 0}
    per_epoch = -(-data[0].n_queries // FAST["batch_size"])

    def breaks_in_epoch_3(scores, labels, mask):
        calls["n"] += 1
        loss = listnet(scores, labels, mask)
        return loss * float("nan") if calls["n"] > 2 * per_epoch + 1 else loss

    state_dir = tmp_path / "resume"
    with pytest.raises(NonFiniteLossError, match=r"epoch 3, batch 2 .*training state of epoch 2 .* kept in"):
        _fit(data, state_dir, loss=breaks_in_epoch_3)
    store = StateDir(state_dir)
    state = store.load()
    assert state.epoch == 2 and len(state.history) == 2
    assert store.best_file().name.startswith(f"best-{state.best_epoch:04d}")
    model = make_model("mlp", data[0].n_features, {"hidden": [16], "dropout": 0.2})
    import safetensors.torch

    model.load_state_dict(safetensors.torch.load_file(str(store.best_file())))  # plain weights


# ------------------------------------------------------------------------------------------ the CLI
def test_cli_non_finite_loss_says_where_the_last_good_state_is(letor, tmp_path, monkeypatch, capsys):
    calls = {"n": 0}

    def breaks_in_epoch_2(scores, labels, mask, **kw):
        calls["n"] += 1
        loss = listnet(scores, labels, mask, **kw)
        return loss * float("nan") if calls["n"] > 55 else loss  # 200 queries / batch 4 = 50 batches

    monkeypatch.setitem(LOSSES, "listnet", breaks_in_epoch_2)
    out = tmp_path / "nan"
    assert main([*_argv(letor, out), "--set", "train.max_epochs=2"]) == 1
    err = capsys.readouterr().err
    assert "non-finite training loss" in err and "epoch 2, batch 6" in err
    assert f"kept in {out / 'resume'}" in err and "best weights are in" in err
    assert StateDir(out / "resume").saved_epoch() == 1 and not (out / "ctxrank.json").exists()
    # a new run may not overwrite it; --resume with a different setting is refused
    assert main(_argv(letor, out)) == 2
    assert f"continue it with `ctxrank train --resume {out}`" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--seed", "4"]) == 2
    assert "--seed 4 (recorded: 3)" in capsys.readouterr().err


def test_cli_resume_refuses_a_directory_without_state_or_with_a_finished_model(reference, tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "no training state to resume" in capsys.readouterr().err
    assert main(["train", "--resume", str(reference)]) == 2
    assert "already holds a finished model" in capsys.readouterr().err
    assert main(["train", "--model", "mlp", "--dataset", "mq2008"]) == 2
    assert "give --out DIR" in capsys.readouterr().err


def test_cli_resume_refuses_a_planted_pickle_run_record(tmp_path, capsys):
    marker = tmp_path / "pwned"
    (tmp_path / "run" / "resume").mkdir(parents=True)
    (tmp_path / "run" / "resume" / "run.json").write_bytes(_evil_pickle(marker))
    assert main(["train", "--resume", str(tmp_path / "run")]) == 2
    assert "not a valid run record" in capsys.readouterr().err and not marker.exists()


def test_a_run_record_of_an_earlier_version_resumes(tmp_path, capsys):
    """``run.json`` as earlier versions wrote it (``--set`` as ``KEY=VALUE`` text, an ``out`` key, no newer
    data options) resumes: its request is read back, a differing option is refused, the run finishes."""
    for i, name in enumerate(("tr", "va")):
        write_synthetic_letor(tmp_path / f"{name}.txt", n_queries=20, list_size=8, n_features=5, seed=i)
    sets = ["train.max_epochs=1", "train.threads=1", "model_params.hidden=[8]"]
    options = {"model": "mlp", "loss": None, "config": None, "overrides": sets, "seed": 3, "threads": None}
    options |= {"initial": None, "top_k": None, "crossfit": None, "out": "/earlier/place"}
    options |= {"train_file": str(tmp_path / "tr.txt"), "valid_file": str(tmp_path / "va.txt")}
    config = resolve_config(None, [*sets, "model=mlp", "train.seed=3"]).to_dict()
    record = {"format_version": 1, "kind": "ctxrank-train-run", "command": ["ctxrank", "train"], "cwd": "/"}
    out = tmp_path / "run"
    (out / "resume").mkdir(parents=True)
    (out / "resume" / "run.json").write_text(json.dumps({**record, "options": options, "config": config}))
    assert main(["train", "--resume", str(out), "--seed", "4", "--no-progress"]) == 2
    assert "--seed 4 (recorded: 3)" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--seed", "3", "--no-progress"]) == 0
    assert "no epoch had finished; training starts from epoch 1" in capsys.readouterr().out
    meta = json.loads((out / "ctxrank.json").read_text())
    assert meta["run_config"]["train"]["seed"] == 3 and meta["run_config"]["model_params"]["hidden"] == [8]
    assert meta["command"]["options"] == options  # the record the run was started with, as it was


def test_recorded_config_round_trips():
    config = resolve_config(None, ["model=dlcm", "train.lr=0.003", "rerank.initial=lambdamart"])
    again = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))  # what --resume reads
    assert again.to_dict() == config.to_dict() and again.effective_loss_params == config.effective_loss_params


def test_reranker_resumes_with_a_refitted_initial_ranker(monkeypatch, tmp_path):
    """--initial lambdamart: the initial ranker is fitted again on resume (deterministic LightGBM)."""
    mq = SRC / "ctxrank" / "datasets" / "mq2008"
    argv = [
        *("train", "--model", "dlcm", "--initial", "lambdamart", "--top-k", "10", "--no-progress"),
        *(
            "--train",
            str(mq / "S1.txt.gz"),
            "--valid",
            str(mq / "S2.txt.gz"),
            "--test",
            str(mq / "S3.txt.gz"),
        ),
        *("--set", "model_params.encoder_widths=[8,8]", "--set", "rerank.initial_params.n_estimators=20"),
        *("--set", "train.max_epochs=3", "--set", "train.threads=1"),
    ]
    assert main([*argv, "--out", str(tmp_path / "ref")]) == 0
    replace, calls = os.replace, {"n": 0}

    def kill_at_second_manifest(src, dst):
        calls["n"] += Path(dst).name == STATE_FILE
        if calls["n"] == 2:
            raise _Killed
        replace(src, dst)

    with monkeypatch.context() as m, pytest.raises(_Killed):
        m.setattr(os, "replace", kill_at_second_manifest)
        main([*argv, "--out", str(tmp_path / "run")])
    assert StateDir(tmp_path / "run" / "resume").saved_epoch() == 1
    assert main(["train", "--resume", str(tmp_path / "run"), "--no-progress"]) == 0
    for name in FILES:
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
    initial = Path("initial") / "model.txt"
    assert (tmp_path / "run" / initial).read_bytes() == (tmp_path / "ref" / initial).read_bytes()


def test_a_nan_validation_metric_round_trips_through_the_state(tmp_path):
    """Strict JSON writes NaN as null; the state reads the best metric and the history's numbers back
    as NaN (not as a missing value, nor as -inf: resuming compares the next epochs with it)."""
    weights = {"w": torch.zeros(2)}
    store = StateDir(tmp_path)
    store.save(
        TrainingState(
            epoch=1,
            model=weights,
            best=weights,
            best_epoch=1,
            best_metric=math.nan,
            bad_epochs=0,
            stopped=False,
            history=[{"epoch": 1, "train_loss": 0.5, "valid_ndcg@10": math.nan, "best_epoch": 1}],
            optimizer={},
            numpy_rng={"state": 1},
            torch_rng=[torch.get_rng_state()],
        )
    )
    assert "NaN" not in (tmp_path / STATE_FILE).read_text()
    state = StateDir(tmp_path).load()
    assert math.isnan(state.best_metric) and math.isnan(state.history[0]["valid_ndcg@10"])
    assert state.history[0]["epoch"] == 1 and state.history[0]["train_loss"] == 0.5


def test_a_kill_before_the_first_state_is_committed_logs_each_epoch_once(
    data, uninterrupted, tmp_path, monkeypatch
):
    """Epoch 1 is logged, then the process dies writing its state: the resumed run starts again from
    epoch 1 and the log holds every epoch once."""
    ref_model, ref_result, _ = uninterrupted
    state_dir, log = tmp_path / "resume", tmp_path / "train_log.jsonl"
    replace = os.replace

    def killed_at_first_manifest(src, dst):
        if Path(dst).name == STATE_FILE:
            raise _Killed
        replace(src, dst)

    with monkeypatch.context() as m, pytest.raises(_Killed):
        m.setattr(os, "replace", killed_at_first_manifest)
        _fit(data, state_dir, log_path=log)
    assert [json.loads(line)["epoch"] for line in log.read_text().splitlines()] == [1]
    assert StateDir(state_dir).saved_epoch() is None
    model, result = _fit(data, state_dir, resume=True, log_path=log)
    assert _same(model, ref_model) and result.resumed_from_epoch is None
    epochs = [json.loads(line)["epoch"] for line in log.read_text().splitlines()]
    assert epochs == [h["epoch"] for h in ref_result.history] == list(range(1, len(epochs) + 1))
