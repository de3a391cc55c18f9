"""The CUDA path (``train.device = "auto"``): every neural model trains, predicts and exports on a GPU.

Every test here but the first is marked ``gpu`` and skipped on a machine without CUDA (tests/conftest.py);
run them alone with ``pytest -m gpu``, or with the GPU timings by ``benchmarks/gpu_checks.sh``
(docs/benchmarks.md, "GPU", says where and when they last ran)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ctxrank.config import resolve_config
from ctxrank.export import export_model
from ctxrank.training.checkpoint import load_model
from ctxrank.training.distributed import resolve_device
from ctxrank.training.predict import predict
from ctxrank.training.run import run_training
from tests.conftest import make_ranking_data
from tests.export.test_export import NEURAL, SMALL

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_auto_is_cuda_when_available_and_cpu_otherwise(monkeypatch):
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")


def test_the_gpu_marker_skips_without_cuda(request):
    marked = [i for i in request.session.items if i.get_closest_marker("gpu") is not None]
    assert marked, "the GPU tests are collected"
    skipped = [i for i in marked if any(m.name == "skip" for m in i.iter_markers())]
    assert (skipped == marked) != torch.cuda.is_available()


def _trained(tmp_path, name, precision="fp32"):
    train, valid = make_ranking_data(24, max_len=8, seed=1), make_ranking_data(8, max_len=8, seed=2)
    overrides = [f"model={name}"]
    if name != "mnl":  # mnl is fitted by SciPy on the CPU: no device, precision or epochs to set
        overrides += ["train.device=auto", "train.max_epochs=2", f"train.precision={precision}"]
    config = resolve_config(None, [*overrides, *SMALL.get(name, [])])
    result = run_training(config, train, valid, out=tmp_path / name, progress=False)
    return result, valid


@pytest.mark.gpu
@pytest.mark.parametrize("name", NEURAL)
def test_every_model_trains_predicts_and_exports_on_cuda(tmp_path, name):
    torch.cuda.reset_peak_memory_stats()
    result, valid = _trained(tmp_path, name)
    if name != "mnl":
        assert torch.cuda.max_memory_allocated() > 0  # it trained on the GPU (fit then moves it to the CPU)
    predictor = result.predictor
    on_cpu = load_model(tmp_path / name).predict(valid)  # the checkpoint loads on a CPU
    model = predictor.model.to("cuda")
    on_gpu = predict(model, predictor.transform.transform(valid), device="cuda")
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-4, atol=1e-4)
    for fmt in ("torchscript", "onnx"):
        assert export_model(tmp_path / name, fmt, tmp_path / f"{name}.{fmt}").max_abs_diff < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["qilcm", "dlcm", "dcm", "listnet"])
def test_bf16_autocast_on_cuda_trains_with_finite_losses(tmp_path, name):
    result, _ = _trained(tmp_path, name, precision="bf16")
    log = (tmp_path / name / "train_log.jsonl").read_text().splitlines()
    assert len(log) == 2 and all(np.isfinite(json.loads(line)["train_loss"]) for line in log)
    assert next(result.predictor.model.parameters()).dtype == torch.float32  # autocast, not cast weights


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["qilcm", "attn", "listnet"])
def test_fp16_with_the_gradient_scaler_trains_with_finite_losses(tmp_path, name):
    result, _ = _trained(tmp_path, name, precision="fp16")
    log = (tmp_path / name / "train_log.jsonl").read_text().splitlines()
    assert len(log) == 2 and all(np.isfinite(json.loads(line)["train_loss"]) for line in log)
    assert next(result.predictor.model.parameters()).dtype == torch.float32


class _Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so nothing on the way catches it."""


@pytest.mark.gpu
def test_a_run_killed_on_cuda_resumes_with_the_cuda_rng_to_the_same_model(tmp_path, monkeypatch):
    """Dropout on a GPU draws from CUDA's generator: its state is saved with each epoch's state and
    restored on resume, so a run killed after epoch 2 resumes to the uninterrupted run's weights (up to
    float32 rounding of GPU reductions; without the restored state the dropout masks differ and the
    weights are far apart)."""
    import ctxrank.training.resume as resume_mod
    from ctxrank.config import TrainConfig
    from ctxrank.losses import listnet
    from ctxrank.registry import make_model
    from ctxrank.training.loop import fit, seed_everything
    from ctxrank.training.resume import StateDir

    train, valid = make_ranking_data(60, seed=11), make_ranking_data(20, seed=12)
    config = TrainConfig(max_epochs=4, patience=10, batch_size=8, lr=0.01, device="cuda", threads=1)

    def run(state_dir, resume=False):
        seed_everything(0)
        model = make_model("mlp", train.n_features, {"hidden": [16], "dropout": 0.2})
        fit(model, listnet, train, valid, config, progress=False, state_dir=state_dir, resume=resume)
        return model

    reference = run(tmp_path / "whole")
    fsync_dir, calls = resume_mod._fsync_dir, {"fsync": 0}

    def killed_after_epoch_2(d):
        fsync_dir(d)
        calls["fsync"] += 1
        if calls["fsync"] == 4:  # the manifest of epoch 2 committed
            raise _Killed

    with monkeypatch.context() as m, pytest.raises(_Killed):
        m.setattr(resume_mod, "_fsync_dir", killed_after_epoch_2)
        run(tmp_path / "killed")
    saved = StateDir(tmp_path / "killed").load()
    assert saved.epoch == 2 and saved.cuda_rng is not None
    resumed = run(tmp_path / "killed", resume=True)
    expected = reference.state_dict()
    for key, ours in resumed.state_dict().items():
        torch.testing.assert_close(ours.cpu(), expected[key].cpu(), rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.gpu
def test_the_cli_trains_on_cuda_and_the_model_predicts_on_the_cpu(tmp_path, capsys):
    from ctxrank.cli import main
    from ctxrank.data.synth import write_synthetic_letor

    files = []
    for i, name in enumerate(("tr", "va", "te")):
        files.append(tmp_path / f"{name}.txt")
        n = 60 if name == "tr" else 20
        write_synthetic_letor(files[-1], n_queries=n, list_size=20, n_features=12, seed=i)
    out = tmp_path / "run"
    argv = ["train", "--train", str(files[0]), "--valid", str(files[1]), "--test", str(files[2])]
    argv += ["--out", str(out), "--model", "attn", "--no-progress", "--set", "train.device=cuda"]
    argv += ["--set", "train.max_epochs=2", *(f"--set={s}" for s in SMALL["attn"])]
    assert main(argv) == 0, capsys.readouterr().err
    assert json.loads((out / "test_metrics.json").read_text())
    scores = tmp_path / "scores.txt"
    assert main(["predict", "--model", str(out), "--data", str(files[2]), "--output", str(scores)]) == 0
    assert len(scores.read_text().splitlines()) == 20 * 20
