"""ctxrank.experiments.executors: the Ray executor (against the local one), ``--shard auto`` (Slurm job
arrays) and the refusal of ``ctxrank experiment`` under torchrun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctxrank._checks import OptionError
from ctxrank.cli import flag_text, main
from ctxrank.data.synth import write_synthetic_letor
from ctxrank.experiments import build_report, load_spec, run_experiment
from ctxrank.experiments.executors import RayExecutor, _gpus, _train_run, make_executor, slurm_shard
from ctxrank.experiments.store import RunStore
from tests.conftest import make_ranking_data
from tests.experiments.test_experiments import ANOMALY_EXTRA, FAST_LM, FAST_NEURAL, _letor_spec
from tests.test_tune import _study
from tests.test_tune import run as run_cli

SRC = Path(__file__).resolve().parents[2] / "src"
QUIET = {"progress": False, "log": lambda _: None}

# re-rankers sharing the run's LambdaMART (one initial-ranker task per run) and the anomaly analysis
# (one unit task per run): every kind of task of the Ray executor
MODELS = {
    "lambdamart": f'model = "lambdamart"\n{FAST_LM}',
    "listnet": f'model = "listnet"\n{FAST_NEURAL}',
    "mnl": 'model = "mnl"',  # a maximum-likelihood fit: no epoch or batch keys
}
EXTRA = ANOMALY_EXTRA


# ------------------------------------------------------------------------------------ Slurm
def test_shard_auto_reads_the_slurm_job_array():
    env = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}
    assert slurm_shard({**env, "SLURM_ARRAY_TASK_MAX": "3"}) == (4, 4)  # --array=0-3: ids 0..3
    one = {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "5"}
    assert slurm_shard(one) == (1, 5)  # --array=1-5, no COUNT (older Slurm): MAX - MIN + 1
    stepped = {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "6"}
    assert slurm_shard({**stepped, "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "4"}) == (3, 4)
    whole = {**env, "SLURM_ARRAY_TASK_MAX": "3"}
    shards = [slurm_shard({**whole, "SLURM_ARRAY_TASK_ID": str(i)}) for i in range(4)]
    assert shards == [(1, 4), (2, 4), (3, 4), (4, 4)]  # every task a different shard, all of them
    with pytest.raises(OptionError, match=r"not a job array task \(outside Slurm") as info:
        slurm_shard({})
    assert info.value.fields == ("shard", "shard") and str(info.value).endswith("or give shard")
    assert flag_text(info.value.text).startswith("--shard auto reads") and "give --shard K/N" in flag_text(
        info.value.text
    )
    with pytest.raises(ValueError, match="outside a Slurm job"):
        slurm_shard({"SLURM_JOB_ID": "7"})
    listed = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "3"}  # --array=1,5,9
    with pytest.raises(ValueError, match="one range"):
        slurm_shard({**listed, "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "9"})
    with pytest.raises(ValueError, match="not an integer"):
        slurm_shard({"SLURM_ARRAY_TASK_ID": "x"})


def test_cli_shard_auto_outside_slurm_is_a_clear_error(tmp_path, capsys, monkeypatch):
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    path = _letor_spec(tmp_path, runs=1)
    assert main(["experiment", str(path), "--out", str(tmp_path / "o"), "--shard", "auto"]) == 2
    assert "SLURM_ARRAY_TASK_ID" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MAX", "2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    spec = ["experiment", str(path), "--out", str(tmp_path / "o"), "--no-progress", "--set", "runs.count=2"]
    assert main([*spec, "--shard", "auto"]) == 0  # task 2 of 2: the second run only
    stored = sorted(p.name for p in (tmp_path / "o" / "runs" / "mnl").iterdir())
    assert stored == ["seed1-fold0.json"]


# --------------------------------------------------------------------------------- torchrun
def test_experiment_under_torchrun_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    path = _letor_spec(tmp_path, runs=1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["experiment", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "2 torchrun processes" in err and "--executor ray" in err and "--shard" in err
    assert not (tmp_path / "o").exists()
    assert main(["demo", "--out", str(tmp_path / "d")]) == 2  # the demo experiment too
    monkeypatch.setenv("WORLD_SIZE", "1")  # torchrun with one process: nothing repeats
    assert main(["experiment", str(path), "--out", str(tmp_path / "o"), "--no-progress"]) == 0


@pytest.mark.slow
def test_torchrun_two_processes_refuse_the_experiment(tmp_path):
    path = _letor_spec(tmp_path, runs=1)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m"]
    cmd += ["ctxrank", "experiment", str(path), "--out", str(tmp_path / "o")]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode != 0
    assert "torchrun processes (WORLD_SIZE=2)" in res.stderr and "--executor ray" in res.stderr
    assert not (tmp_path / "o").exists()  # no rank ran anything


# -------------------------------------------------------------------------------------- Ray
def test_executor_names_and_options_are_checked():
    assert make_executor("local") is None
    assert make_executor("ray", address="head:6379", max_retries=0) == RayExecutor("head:6379", 0)
    with pytest.raises(ValueError, match="valid executors: local, ray"):
        make_executor("dask")
    with pytest.raises(OptionError) as info:
        make_executor("local", address="head:6379")
    assert str(info.value) == "address names a Ray cluster: it applies to executor ray only"
    assert flag_text(info.value.text) == "--address names a Ray cluster: it applies to --executor ray only"
    with pytest.raises(OptionError, match=r"^max_retries must be an integer in \[0, 2147483647\], got -1"):
        make_executor("ray", max_retries=-1)
    assert make_executor("local", jobs=1) is None and make_executor("local", jobs=3).jobs == 3
    with pytest.raises(OptionError, match=r"^jobs is for the local executor"):
        make_executor("ray", jobs=2)
    with pytest.raises(OptionError, match=r"^jobs must be an integer >= 1") as info:
        make_executor("local", jobs=0)
    assert info.value.fields == ("jobs",) and flag_text(info.value.text).startswith("--jobs must be")


def test_worker_processes_store_the_same_runs_and_report_as_one_process(tmp_path, capsys):
    """--jobs 2: the (seed, fold) units in two spawned worker processes; every number is the one of the
    sequential loop (each run is computed the same way), the report identical."""
    path = _letor_spec(tmp_path, runs=3, extra=EXTRA, models=MODELS)
    spec = load_spec(path)
    local = run_experiment(spec, tmp_path / "local", **QUIET)
    build_report(spec, local, tmp_path / "local")
    (tmp_path / "jobs" / "runs" / "mnl").mkdir(parents=True)  # one run stored before an interruption
    shutil.copy(local.run_path("mnl", 1, 0), tmp_path / "jobs" / "runs" / "mnl")
    argv = ["experiment", str(path), "--out", str(tmp_path / "jobs"), "--jobs", "2", "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    jobs = RunStore(tmp_path / "jobs")
    for m in spec.models:
        for s, f in spec.run_keys():
            a, b = local.load_run(m, s, f), jobs.load_run(m, s, f)
            for key in ("metrics", "query_ids", "config", "split", "context"):
                assert a.get(key) == b.get(key), (m, s, f, key)
    for s, f in spec.run_keys():
        assert local.load_unit(s, f) == jobs.load_unit(s, f)
    assert (tmp_path / "jobs" / "table.md").read_text() == (tmp_path / "local" / "table.md").read_text()


def test_a_run_asks_ray_for_a_gpu_when_its_device_is_cuda(tmp_path):
    over = ["models.listnet.train.device=cuda", 'models.mlp.model="mlp"', "models.mlp.train.device=auto"]
    spec = load_spec(_letor_spec(tmp_path), over)
    assert list(spec.models) == ["lambdamart", "listnet", "mnl", "mlp"]  # mnl: a SciPy fit, on the CPU
    assert [_gpus(spec, m, 0, cluster_gpus=0) for m in spec.models] == [0, 1, 0, 0]
    assert [_gpus(spec, m, 0, cluster_gpus=4) for m in spec.models] == [0, 1, 0, 1]  # auto: the cluster's


def _dies_once(spec, model, seed, fold, unit, initial, root):
    """A run whose worker process dies the first time (a lost node, an OOM kill), then runs."""
    marker = Path(os.environ["CTXRANK_TEST_MARKERS"]) / f"{model}-{seed}-{fold}"
    if model == "listnet" and seed == 1 and not marker.exists():
        marker.write_text("died")
        os._exit(1)
    return _train_run(spec, model, seed, fold, unit, initial, root)


def _raises(spec, model, seed, fold, unit, initial, root):
    if model == "mnl" and seed == 0:
        raise RuntimeError("boom")
    return _train_run(spec, model, seed, fold, unit, initial, root)


def _without_volatile(results: dict) -> dict:
    """results.json without what differs between two executions (time of day, seconds taken)."""
    return {k: v for k, v in results.items() if k not in ("created", "seconds", "fit_seconds")}


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    ray = pytest.importorskip("ray")
    markers = tmp_path_factory.mktemp("markers")
    os.environ["CTXRANK_TEST_MARKERS"] = str(markers)  # inherited by the workers started below
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    del os.environ["CTXRANK_TEST_MARKERS"]


@pytest.mark.slow
def test_ray_runs_store_the_same_runs_and_report_as_the_local_executor(tmp_path, ray_local):
    spec = load_spec(_letor_spec(tmp_path, runs=2, extra=EXTRA, models=MODELS))
    local = run_experiment(spec, tmp_path / "local", **QUIET)
    expected = build_report(spec, local, tmp_path / "local")
    # an interrupted experiment: one run and one unit were stored before it stopped
    (tmp_path / "ray" / "runs" / "mnl").mkdir(parents=True)
    shutil.copy(local.run_path("mnl", 0, 0), tmp_path / "ray" / "runs" / "mnl")
    (tmp_path / "ray" / "units").mkdir()
    shutil.copy(local.unit_path(0, 0), tmp_path / "ray" / "units")
    lines: list[str] = []
    ray = run_experiment(spec, tmp_path / "ray", progress=False, log=lines.append, executor=RayExecutor(
        max_retries=1, task=_dies_once
    ))  # fmt: skip
    assert "1 of 6 already stored" in lines[0]
    assert (Path(os.environ["CTXRANK_TEST_MARKERS"]) / "listnet-1-0").is_file()  # it died, then ran again
    for m in spec.models:
        for s, f in spec.run_keys():
            a, b = local.load_run(m, s, f), ray.load_run(m, s, f)
            for key in ("metrics", "query_ids", "config", "split", "code"):
                assert a.get(key) == b.get(key), (m, s, f, key)
            assert _without_volatile(a["summary"]) == _without_volatile(b["summary"])
    for s, f in spec.run_keys():
        assert local.load_unit(s, f) == ray.load_unit(s, f)
    got = build_report(spec, ray, tmp_path / "ray")
    assert _without_volatile(got) == _without_volatile(json.loads(json.dumps(expected)))
    assert (tmp_path / "ray" / "table.md").read_text() == (tmp_path / "local" / "table.md").read_text()


@pytest.mark.slow
def test_a_failing_ray_run_is_reported_and_the_others_are_stored(tmp_path, ray_local, capsys):
    spec = load_spec(_letor_spec(tmp_path, runs=2, models={k: MODELS[k] for k in ("lambdamart", "mnl")}))
    with pytest.raises(ValueError, match=r"1 run\(s\) failed .*run mnl seed 0 fold 0 failed: .*boom"):
        run_experiment(spec, tmp_path / "out", **QUIET, executor=RayExecutor(max_retries=3, task=_raises))
    store = RunStore(tmp_path / "out")
    assert [m for m in spec.models for s, f in spec.run_keys() if not store.has_run(m, s, f)] == ["mnl"]
    # the CLI: the stored runs are kept, the missing one runs again (here with the real task)
    argv = ["experiment", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "out"), "--no-progress"]
    argv += ["--executor", "ray"]
    assert main(argv) == 0
    assert "3 of 4 already stored" in capsys.readouterr().out and store.has_run("mnl", 0, 0)


# ----------------------------------------------------------------------------- tuning trials on Ray
TUNE_BASE = {"model": "listnet", "train": {"max_epochs": 3, "threads": 1}}


def _trials(study) -> list[tuple]:
    return [
        (t.number, t.state.name, t.params, t.value, t.intermediate_values, t.user_attrs.get("summary"))
        for t in sorted(study.trials, key=lambda t: t.number)
    ]


@pytest.mark.slow
def test_ray_trials_are_the_local_study_s_trials(tmp_path, ray_local):
    from ctxrank.tune import tune

    train, valid = make_ranking_data(30, seed=0), make_ranking_data(15, seed=1)
    local = tune(TUNE_BASE, train, valid, out=tmp_path / "local", trials=3)
    lines: list[str] = []
    one_at_a_time = RayExecutor(in_flight=1)  # the sampler then sees what it saw in the local loop
    ray = tune(
        TUNE_BASE, train, valid, out=tmp_path / "ray", trials=3, executor=one_at_a_time, log=lines.append
    )
    summaries = [{k: v for k, v in s[5].items() if k != "seconds"} for s in _trials(ray.study)]
    assert [s[:5] for s in _trials(ray.study)] == [s[:5] for s in _trials(local.study)]
    assert summaries == [{k: v for k, v in s[5].items() if k != "seconds"} for s in _trials(local.study)]
    assert all(len(t.intermediate_values) == 3 for t in ray.study.trials)  # reported by the actor, per epoch
    trial_lines = [line for line in lines if not line.startswith("  ")]  # not a trial's warnings under it
    assert [line.split(":")[0] for line in trial_lines] == ["trial 0", "trial 1", "trial 2"]
    assert (tmp_path / "ray" / "best.toml").read_text() == (tmp_path / "local" / "best.toml").read_text()


@pytest.mark.slow
def test_cli_tune_on_ray_runs_trials_side_by_side_and_continues_the_study(tmp_path, ray_local):
    for name, seed in (("train", 0), ("vali", 1)):
        write_synthetic_letor(tmp_path / f"{name}.txt", n_queries=30, list_size=8, n_features=5, seed=seed)
    argv = ["tune", "--model", "listnet", "--train", str(tmp_path / "train.txt"), "--valid"]
    argv += [str(tmp_path / "vali.txt"), "--set", "train.max_epochs=2", "--set", "train.threads=1"]
    argv += ["--executor", "ray", "--out", str(tmp_path / "t"), "--no-progress"]
    rc, out, err = run_cli(*argv, "--trials", "4")
    assert rc == 0, err
    study = _study(tmp_path / "t")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    starts = sorted(study.trials, key=lambda t: t.datetime_start)
    assert starts[1].datetime_start < starts[0].datetime_complete  # two CPUs: two trials in flight
    assert (tmp_path / "t" / "best.toml").is_file() and "best: trial" in out
    rc, out, err = run_cli(*argv, "--trials", "1")
    assert rc == 0, err
    assert len(_study(tmp_path / "t").trials) == 5


class _AlwaysPrune:
    def should_prune(self, trial_id, epoch, value):
        return True


def test_a_ray_trial_stops_when_the_reporter_prunes_it(ray_local):
    from ctxrank.config import RunConfig
    from ctxrank.experiments.executors import _tune_trial
    from ctxrank.training.rerank import InitialRankers
    from ctxrank.tune import StudyBase, _Job, search_space

    train, valid = make_ranking_data(20), make_ranking_data(10, seed=1)
    base = StudyBase.of(TUNE_BASE)
    job = _Job(base, search_space(base), train, valid, True, InitialRankers(train, valid))
    config = RunConfig.from_dict(TUNE_BASE)  # typed: no dict sent to the task and parsed back there
    reporter = ray_local.remote(_AlwaysPrune).remote()
    assert _tune_trial(job, config, 0, reporter) == {"state": "pruned"}
    job.prune = False
    assert _tune_trial(job, config, 0, reporter)["state"] == "complete"


def test_tune_executor_options_are_checked(tmp_path):
    from ctxrank.cli.tune import SearchOptions

    with pytest.raises(ValueError, match="valid executors: local, ray"):
        SearchOptions(executor="dask")
    with pytest.raises(ValueError, match="applies to executor ray"):
        SearchOptions(address="head:6379")
    rc = main(
        ["tune", "--model", "listnet", "--dataset", "mq2008", "--executor", "dask", "--out", str(tmp_path)]
    )
    assert rc == 2


def test_ray_in_flight_none_is_the_default_and_zero_is_refused():
    """``in_flight`` is user input: None asks for the default; 0 is an error, not a silent default."""
    assert RayExecutor().in_flight is None and RayExecutor(in_flight=3).in_flight == 3
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="in_flight must be a positive integer or None"):
            RayExecutor(in_flight=bad)


def _ignore_sigterm_and_sleep(ready) -> None:
    import signal
    import time

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(600)


def test_stopped_workers_that_ignore_sigterm_are_killed_after_the_grace_period():
    """A worker inside a long native call runs no Python handler: SIGKILL follows the grace period, so
    Ctrl-C or SIGTERM never waits for a unit to finish."""
    import multiprocessing
    import time

    from ctxrank.experiments.executors import _stop_workers

    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    worker = context.Process(target=_ignore_sigterm_and_sleep, args=(ready,))
    worker.start()
    assert ready.wait(120), "the worker did not start"
    start = time.monotonic()
    _stop_workers([worker], grace=0.5)
    assert worker.exitcode == -9 and time.monotonic() - start < 5


class _InterruptAfter:
    """A progress bar whose refresh raises KeyboardInterrupt once ``seconds`` have passed (Ctrl-C while
    the workers train); ``children``: the caller's child processes at that moment."""

    def __init__(self, seconds: float) -> None:
        import time

        self.n, self.deadline, self.children = 0, time.monotonic() + seconds, []

    def refresh(self) -> None:
        import multiprocessing
        import time

        if time.monotonic() > self.deadline:
            self.children = multiprocessing.active_children()
            raise KeyboardInterrupt


def test_an_interrupted_process_executor_stops_its_workers_and_no_other_child(tmp_path):
    """Ctrl-C stops the pool's workers, not the other child processes of the caller (a notebook's), and
    a stopped worker starts none of the units still queued (it used to train one, SIGKILLed 10 s later)."""
    import multiprocessing

    from ctxrank.experiments.executors import ProcessExecutor

    slow = 'train = { max_epochs = 100000, patience = 100000 }'
    models = {"mlp": f'model = "mlp"\n{slow}', "listnet": f'model = "listnet"\n{slow}'}
    spec = load_spec(_letor_spec(tmp_path, runs=3, models=models))  # 3 units, 2 workers: 1 queued
    store = RunStore(tmp_path / "e")
    store.claim(spec)
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    other = context.Process(target=_ignore_sigterm_and_sleep, args=(ready,))
    other.start()
    try:
        assert ready.wait(120)
        bar = _InterruptAfter(15)
        todo = [(s, f, m) for s, f in spec.run_keys() for m in models]
        with pytest.raises(KeyboardInterrupt):
            ProcessExecutor(2)(spec, store, keys=spec.run_keys(), todo=todo, need_units=set(), bar=bar)
        assert other.is_alive()
        workers = [c for c in bar.children if c is not other]
        assert len(workers) == 2 and all(w.exitcode in (0, 143) for w in workers), workers  # none killed
        assert multiprocessing.active_children() == [other]  # every worker ended and reaped
    finally:
        other.kill()
        other.join()
