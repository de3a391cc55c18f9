"""Devices, mixed precision and torchrun data-parallel training (ctxrank.training.distributed and
training.loop.fit)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ctxrank.config import TrainConfig, resolve_config
from ctxrank.data.synth import write_synthetic_letor
from ctxrank.losses import listnet
from ctxrank.registry import make_model
from ctxrank.training.checkpoint import load_model
from ctxrank.training.distributed import DistContext, resolve_device
from ctxrank.training.loop import fit
from ctxrank.training.run import run_training
from tests.conftest import make_ranking_data
from tests.export.test_export import NEURAL, SMALL

SRC = Path(__file__).resolve().parents[2] / "src"


def test_resolve_device_on_a_cpu_machine(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="must be 'cpu', 'cuda'"):
        resolve_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")  # selection only: nothing is allocated
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


def test_train_config_checks_device_and_precision():
    with pytest.raises(ValueError, match=r"train\.device"):
        TrainConfig(device="gpu")
    with pytest.raises(ValueError, match=r"train\.precision"):
        TrainConfig(precision="fp8")
    data = make_ranking_data(20, seed=1)
    model = make_model("mlp", data.n_features, {})
    with pytest.raises(ValueError, match="fp16' needs a CUDA device"):
        fit(model, listnet, data, data, TrainConfig(precision="fp16", max_epochs=1), progress=False)


@pytest.mark.parametrize("name", [n for n in NEURAL if n != "mnl"])  # mnl: a float64 SciPy fit, no epochs
def test_bf16_autocast_trains_every_model_on_cpu_with_finite_loss(tmp_path, name):
    """Every neural model's own code under autocast, hand-written backward passes included (DLCM's paper
    GRU multiplied bf16 gradients by float32 weights until its recurrence was kept in float32)."""
    train, valid = make_ranking_data(24, max_len=8, seed=2), make_ranking_data(8, max_len=8, seed=3)
    overrides = [f"model={name}", "train.max_epochs=2", "train.precision=bf16", *SMALL.get(name, [])]
    run_training(resolve_config(None, overrides), train, valid, out=tmp_path / name, progress=False)
    log = [json.loads(line) for line in (tmp_path / name / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all(np.isfinite(r["train_loss"]) for r in log)
    model = load_model(tmp_path / name).model
    assert all(p.dtype == torch.float32 for p in model.parameters())  # autocast, not a cast of the weights


def test_shards_are_equal_for_training_and_disjoint_for_validation():
    n, world = 23, 3
    train = [DistContext(r, world).shard(n, seed=5, epoch=2, shuffle=True) for r in range(world)]
    assert {len(s) for s in train} == {8} and set(np.concatenate(train)) == set(range(n))  # padded
    again = DistContext(1, world).shard(n, seed=5, epoch=2, shuffle=True)
    assert np.array_equal(again, train[1])  # same seed and epoch: same shard on every call
    assert not np.array_equal(DistContext(1, world).shard(n, seed=5, epoch=3, shuffle=True), train[1])
    valid = [DistContext(r, world).shard(n, seed=0, epoch=0, shuffle=False) for r in range(world)]
    assert sorted(np.concatenate(valid).tolist()) == list(range(n))  # no query twice
    assert np.array_equal(DistContext().shard(5, seed=0, epoch=0, shuffle=True), np.arange(5))


def _train(tmp_path, out, nproc, batch_size):
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd = [
        *(launcher if nproc > 1 else [sys.executable]),
        "-m",
        "ctxrank",
        "train",
        "--model",
        "mlp",
        "--train",
        str(tmp_path / "tr.txt"),
        "--valid",
        str(tmp_path / "va.txt"),
        "--out",
        str(tmp_path / out),
        "--no-progress",
        *("--set", f"train.batch_size={batch_size}", "--set", "train.max_epochs=6"),
        *("--set", "train.threads=1", "--set", "train.lr=0.003"),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_torchrun_two_gloo_processes_match_one_process_with_the_same_global_batch(tmp_path):
    write_synthetic_letor(tmp_path / "tr.txt", n_queries=240, list_size=20, n_features=10, seed=1)
    write_synthetic_letor(tmp_path / "va.txt", n_queries=80, list_size=20, n_features=10, seed=2)
    two = _train(tmp_path, "two", nproc=2, batch_size=10)  # global batch 2 x 10
    assert two.returncode == 0, two.stderr[-3000:]
    one = _train(tmp_path, "one", nproc=1, batch_size=20)
    assert one.returncode == 0, one.stderr[-3000:]
    logs = {
        k: [json.loads(line) for line in (tmp_path / k / "train_log.jsonl").read_text().splitlines()]
        for k in ("one", "two")
    }
    assert len(logs["two"]) == 6  # one log line per epoch: only rank 0 writes
    v1 = np.array([r["valid_ndcg@10"] for r in logs["one"]])
    v2 = np.array([r["valid_ndcg@10"] for r in logs["two"]])
    assert v2[-1] > v2[0] + 0.005  # it learns
    assert abs(v1.max() - v2.max()) < 0.01  # same best validation NDCG within tolerance
    assert np.abs(v1 - v2).max() < 0.02
    assert two.stdout.count("best epoch") == 1  # the other rank prints nothing
    assert (tmp_path / "two" / "model.safetensors").is_file()
    # the world size and the global batch are printed and recorded with a command that repeats the run
    assert two.stdout.count("world size 2 (1 node(s) x 2 processes)") == 1
    assert "10 queries per process, global batch 20 queries" in two.stdout
    recorded = json.loads((tmp_path / "two" / "ctxrank.json").read_text())["command"]
    dp = recorded["data_parallel"]
    assert (dp["world_size"], dp["global_batch"], dp["backend"]) == (2, 20, "gloo")
    command = recorded["command"]
    assert command[:6] == ["torchrun", "--standalone", "--nproc-per-node=2", "-m", "ctxrank", "train"]
    assert "data_parallel" not in json.loads((tmp_path / "one" / "ctxrank.json").read_text())["command"]
    again = _rerun(command, tmp_path / "two", tmp_path / "again")
    assert again.returncode == 0, again.stderr[-3000:]
    logs["again"] = [json.loads(x) for x in (tmp_path / "again" / "train_log.jsonl").read_text().splitlines()]
    for k in ("two", "again"):
        for r in logs[k]:
            del r["seconds"]
    assert logs["again"] == logs["two"]  # the same run: every loss and metric, bitwise


def _rerun(command, out, new_out):
    """Run a recorded ``torchrun ... -m ctxrank train ... --out OUT`` again into ``new_out``."""
    assert command[0] == "torchrun" and command[-2:] == ["--out", str(out)]
    argv = [sys.executable, "-m", "torch.distributed.run", *command[1:-1], str(new_out)]
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_torchrun_refuses_a_baseline_with_a_pointer_to_lightgbm_dask(tmp_path):
    write_synthetic_letor(tmp_path / "tr.txt", n_queries=20, list_size=5, n_features=4, seed=1)
    write_synthetic_letor(tmp_path / "va.txt", n_queries=10, list_size=5, n_features=4, seed=2)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "ctxrank",
    ]
    cmd += ["train", "--model", "lambdamart", "--train", str(tmp_path / "tr.txt"), "--valid"]
    cmd += [str(tmp_path / "va.txt"), "--out", str(tmp_path / "lm")]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode != 0 and "lightgbm.dask" in res.stderr
    # each rank prints its own line, saying which rank it is
    for rank in (0, 1):
        assert f"ctxrank: error (rank {rank} of 2): " in res.stderr, res.stderr[-2000:]


_GLOO_THREADS_AFTER_DESTROY = """
import glob, gc
import torch, torch.distributed as dist
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
del model
dist.destroy_process_group()
gc.collect()
print(sorted(open(t + "/comm").read().strip() for t in glob.glob("/proc/self/task/*")))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads listed from Linux's /proc")
def test_pytorch_still_keeps_a_ddp_gloo_group_running_after_destroy_process_group():
    """Why ``ctxrank.cli.program`` ends a torchrun worker with ``os._exit``: a DistributedDataParallel
    module's gloo group outlives ``destroy_process_group`` with its threads running, and the ordinary
    exit around them aborted a finished run now and then. When this fails PyTorch has fixed it, and the
    ``os._exit`` can go."""
    res = subprocess.run(
        [sys.executable, "-c", _GLOO_THREADS_AFTER_DESTROY], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "pt_gloo_runloop" in res.stdout, res.stdout


_EXIT_AS_A_TORCHRUN_WORKER = """
import atexit, sys
atexit.register(lambda: print("atexit ran"))
sys.argv = ["ctxrank", *sys.argv[1:]]
from ctxrank.cli import program
program()
"""


@pytest.mark.parametrize("worker", [True, False])
@pytest.mark.parametrize(("argv", "status"), [(["--version"], 0), (["no-such-command"], 2)])
def test_the_program_exits_with_mains_status_its_output_and_atexit_functions_kept(worker, argv, status):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TORCHELASTIC_RUN_ID", None)
    env.pop("PYTHONUNBUFFERED", None)  # stdout block-buffered into the pipe: os._exit would lose it
    if worker:
        env["TORCHELASTIC_RUN_ID"] = "test"  # what torchrun sets in each worker
    command = [sys.executable, "-c", _EXIT_AS_A_TORCHRUN_WORKER, *argv]
    res = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == status, res.stderr
    assert res.stdout.endswith("atexit ran\n")
    assert ("ctxrank" in res.stdout) if status == 0 else ("no-such-command" in res.stderr)
