"""The CUDA path (``train.device = "auto"``): every neural model trains, predicts and exports on a GPU.

Every test here but the first is marked ``gpu`` and skipped on a machine without CUDA (tests/conftest.py);
run them alone with ``pytest -m gpu``. No GPU was available where they were written: they have not run
yet (docs/benchmarks.md, "GPU")."""

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

from .conftest import make_ranking_data
from .test_export import NEURAL, SMALL

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
    overrides = [f"model={name}", "train.device=auto", "train.max_epochs=2", f"train.precision={precision}"]
    config = resolve_config(None, [*overrides, *SMALL.get(name, [])])
    result = run_training(config, train, valid, out=tmp_path / name, progress=False)
    return result, valid


@pytest.mark.gpu
@pytest.mark.parametrize("name", NEURAL)
def test_every_model_trains_predicts_and_exports_on_cuda(tmp_path, name):
    torch.cuda.reset_peak_memory_stats()
    result, valid = _trained(tmp_path, name)
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
