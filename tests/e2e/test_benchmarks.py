"""Smoke tests of the speed benchmarks: each script runs with ``--quick`` in a subprocess and
writes valid JSON with the fields it promises. Benchmarks are not tests: nothing here checks a timing.

``--threads 1`` and ``--isolate none`` keep them fast (on a loaded machine two torch threads can be many
times slower than one); one test runs the fresh-subprocess path that measures peak memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ctxrank
from ctxrank.registry import MODELS

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
pytestmark = pytest.mark.slow


def run_bench(script: str, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / f"{script}.json"
    env = dict(os.environ)
    src = str(Path(ctxrank.__file__).resolve().parents[1])  # the ctxrank this test imports
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick", "--json", str(out), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    assert "machine: " in proc.stdout and "|---|" in proc.stdout  # machine line and a Markdown table
    blob = json.loads(out.read_text())
    assert blob["quick"] is True
    assert blob["machine"]["cpu"]
    return blob


def test_serve(tmp_path):
    blob = run_bench("bench_serve.py", tmp_path)
    assert set(blob["served"]) == {"1", "4"} and len(blob["in_process"]) == 3
    for r in [*blob["served"].values(), *blob["in_process"].values()]:
        assert r["n"] >= 1 and 0 < r["p50_s"] <= r["p99_s"]
    assert blob["served"]["1"]["health_round_trip"]["n"] >= 20
    assert blob["served"]["4"]["mean_requests_per_model_call"] >= 1
    assert blob["verdicts"]["one_client_p50_over_in_process"] > 0
    assert set(blob["served_v2"]) == {"1", "4"} and blob["verdicts"]["v2_one_client_p50_over_in_process"] > 0


def test_parser(tmp_path):
    blob = run_bench("bench_parser.py", tmp_path, "--isolate", "none")
    synth = blob["rows"][-1]
    assert synth["synthetic"] and synth["rows"] == 2000 and synth["features"] == 136
    for row in blob["rows"]:
        assert row["sklearn_mb_per_s"] > 0 and row["ctxrank_mb_per_s"] > 0
        assert row["ctxrank_peak_delta_mib"] is None  # not measured without isolation
    assert blob["cache"]["reload_s"] > 0 and blob["cache"]["first_load_s"] > 0


def test_train_throughput_every_model(tmp_path):
    blob = run_bench("bench_train_throughput.py", tmp_path, "--isolate", "none", "--threads", "1")
    results = blob["models"]["results"]
    neural = {name for name in MODELS if MODELS[name].traits.torch_module}
    assert {r["model"] for r in results.values()} == neural  # every neural model of the registry
    assert {"qilcm", "qilcm-pairs80", "dlcm-paper", "dlcm-torch", "dcm", "arsm", "listnet", "mnl"} <= set(
        results
    )
    assert results["qilcm-pairs80"]["params"] == {"confusion_pairs": 80}
    assert results["dlcm-paper"]["params"] == {"gru": "paper"}
    for r in results.values():
        assert r["queries_per_s"] > 0 and r["step"]["n"] == 2
    assert results["qilcm"]["ratio_to_qilcm"] == pytest.approx(1.0)
    assert {"dlcm-paper_over_qilcm", "dcm_over_qilcm", "qilcm_over_target_240"} <= set(
        blob["models"]["verdicts"]
    )
    assert blob["naive"]["ratio_vs_naive_step_per_query"] > 0
    batching = blob["batching"]  # QILCM's random batches against length buckets
    assert batching["random"]["epochs"] == 1 and batching["random_over_buckets_epoch_s"] > 0
    assert batching["random"]["padded_cells"] >= batching["buckets"]["padded_cells"] >= batching["real_items"]


def test_train_throughput_isolated_measures_peak_memory(tmp_path):
    blob = run_bench(
        "bench_train_throughput.py", tmp_path, "--parts", "models", "--models", "mnl", "--threads", "1"
    )
    r = blob["models"]["results"]["mnl"]
    assert r["peak_rss_mib"] > 0 and r["peak_rss_delta_mib"] >= 0 and r["peak_memory_method"]


def test_inference(tmp_path):
    blob = run_bench("bench_inference.py", tmp_path, "--threads", "1", "--one-thread", "1")
    assert list(blob["settings"]) == ["one list, 1 thread", "8 lists, 1 thread"]
    for setting in blob["settings"].values():
        res = setting["results"]
        assert set(res) >= {"linear (reference)", "qilcm", "dlcm-paper", "dlcm-torch", "dcm", "arsm", "mnl"}
        assert res["linear (reference)"]["p50_over_linear"] == pytest.approx(1.0)
        for r in res.values():
            assert 0 < r["p50_s"] <= r["p99_s"]
    assert any(k.startswith("qilcm_one list") for k in blob["verdicts"])


@pytest.mark.parametrize("lengths", ["full", "mq2008"])
def test_qilcm_step(tmp_path, lengths):
    blob = run_bench(
        "bench_qilcm_step.py", tmp_path, "--isolate", "none", "--threads", "1", "--lengths", lengths
    )
    assert blob["lengths"] == lengths
    rows = blob["results"]
    # reference, exact sum / mean / sum one-sided, one sampled count two-sided and one-sided
    assert len(rows) == 6
    assert all(r["median_s"] > 0 for r in rows.values())
    assert len(blob["two_sided_over_one_sided"]) == 2


def test_arsm_step(tmp_path):
    blob = run_bench("bench_arsm_step.py", tmp_path, "--isolate", "none", "--threads", "1")
    assert len(blob["results"]) == 2
    for row in blob["results"].values():
        assert row["ratio_arsm"] > 0 and row["ratio_arsm_dedupe"] > 0


def test_attn_step(tmp_path):
    """allRank is not a dependency: without it the script times ctxrank's rows and records why the
    others are missing; with it (``--allrank DIR``, docs/benchmarks.md), the ratios and the forward check
    on shared weights."""
    blob = run_bench("bench_attn_step.py", tmp_path, "--isolate", "none", "--threads", "1")
    ours = {"ctxrank attn + ctxrank lambdaloss, full", "ctxrank attn + ctxrank lambdaloss, mixed"}
    assert ours <= set(blob["results"])
    assert all(r["queries_per_s"] > 0 and r["step"]["n"] == 2 for r in blob["results"].values())
    if blob["allrank"]["available"]:
        assert len(blob["results"]) == 6 and len(blob["ratios"]) == 4
        assert blob["forward_check"]["torch_layer_norm"] < 1e-4
    else:
        assert "allrank" in blob["allrank"]["error"] and set(blob["results"]) == ours
        assert blob["ratios"] == {} and blob["forward_check"] is None


def test_attn_step_times_setrank_at_allranks_configuration(tmp_path):
    """``--models setrank@allrank``: SetRank's blocks at allRank's width, depth, heads, feed-forward width
    and dropout, so its step does the arithmetic of allRank's (and ``attn``'s) and measures the code."""
    from ctxrank.registry import make_model

    blob = run_bench(
        "bench_attn_step.py", tmp_path, "--isolate", "none", "--threads", "1", "--models", "setrank@allrank"
    )
    label = "ctxrank setrank at allRank's configuration"
    rows = [r for k, r in blob["results"].items() if k.startswith(label)]
    assert len(rows) == 2 and all(r["queries_per_s"] > 0 for r in rows)
    same_size = sum(p.numel() for p in make_model("attn", blob["features"]).parameters())
    # allRank's size, not SetRank's defaults (5.9 times as many parameters)
    assert all(abs(r["parameters"] / same_size - 1) < 1e-3 for r in rows)
    defaults = sum(p.numel() for p in make_model("setrank", blob["features"]).parameters())
    assert defaults > 5 * same_size


def test_recurrence_backward(tmp_path):
    # the script exits non-zero if the fixed loops and the reference differ in the loss or a gradient
    blob = run_bench("bench_recurrence_backward.py", tmp_path, "--threads", "1")
    assert set(blob["results"]) == {"dlcm-paper step", "softrank loss"}
    for r in blob["results"].values():
        assert r["max_abs_difference"] <= 1e-6 and r["speedup"] > 0


def test_clicks_step(tmp_path):
    """Each debiasing method's step against naive training on the same batch, for every configuration."""
    blob = run_bench("bench_clicks.py", tmp_path, "--threads", "1")
    assert [r["model"] for r in blob["results"]] == ["mlp", "listnet", "listnet", "qilcm", "dlcm", "attn"]
    for r in blob["results"]:
        assert set(r["ratio_to_naive"]) == {"none", "ips", "dla", "pal"}
        assert r["ratio_to_naive"]["none"] == pytest.approx(1.0)
        assert all(t > 0 for t in r["seconds_per_step"].values())


def test_startup(tmp_path):
    blob = run_bench("bench_startup.py", tmp_path)
    results = blob["results"]
    assert list(results) == [
        "python -c pass (reference)",
        "python -m ctxrank --version",
        "python -m ctxrank --help",
        "ctxrank predict --model m.onnx (3 rows)",
        "import torch, sklearn.base (reference)",
        "from ctxrank import QILCMRanker",
    ]
    for name in ("python -c pass (reference)", "import torch, sklearn.base (reference)"):
        assert results[name]["ratio_to_reference"] == pytest.approx(1.0)
    assert results["from ctxrank import QILCMRanker"]["reference"] == "import torch, sklearn.base (reference)"
    for r in results.values():
        assert r["n"] == 3 and r["median_s"] > 0
    assert set(blob["within_target"]) == {
        "python -m ctxrank --version", "python -m ctxrank --help", "ctxrank predict --model m.onnx (3 rows)",
        "from ctxrank import QILCMRanker",
    }  # fmt: skip


def test_chamfer_pairs_study_runs_and_its_pooled_decision_reads_its_json(tmp_path):
    """benchmarks/chamfer_pairs.py (a quality study, not a speed benchmark) at one epoch per training."""
    env = {**os.environ, "PYTHONPATH": str(Path(ctxrank.__file__).resolve().parents[1])}
    out = tmp_path / "f1.json"
    cmd = [sys.executable, str(BENCH / "chamfer_pairs.py"), "--max-epochs", "1", "--pairs", "80"]
    proc = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    blob = json.loads(out.read_text())
    runs = blob["folds"]["1"]["runs"]
    assert [r["pairs"] for r in runs] == ["exact", 80] and len(runs[1]["valid"]) == 157  # Fold1 validation
    assert "pooled over folds 1 (157 validation queries): pairs 80: diff" in proc.stdout
    again = subprocess.run([*cmd, "--pooled", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.splitlines()[-1] == proc.stdout.splitlines()[-1]  # the same decision from the JSON


def test_cost_curves(tmp_path):
    """Both axes, both modes, the extrapolated epoch time, ctxrank's estimate beside each point and the
    two log-log figures (small PNGs, as committed to docs/images)."""
    img = tmp_path / "img"
    args = ["--isolate", "none", "--threads", "1", "--models", "listnet,attn", "--plot", str(img)]
    blob = run_bench("bench_cost_curves.py", tmp_path, *args)
    queries, length = blob["queries"], blob["length"]
    assert set(queries["results"]) == {"listnet", "attn"} and length["modes"] == ["unpadded", "padded"]
    for res in queries["results"].values():
        for q in queries["counts"]:
            r = res[str(q)]
            assert r["epoch_steps"] == -(-q // blob["batch"])
            assert r["epoch_s_extrapolated"] == pytest.approx(r["median_s"] * r["epoch_steps"])
            assert r["peak_rss_delta_mib"] is None  # not measured without isolation
    first = str(queries["counts"][0])
    assert queries["results"]["listnet"][first]["step_over_reference"] == pytest.approx(1.0)
    for mode in length["modes"]:
        assert length["results"][mode]["attn"]["4"]["step_over_reference"] > 0
        for name, res in length["results"][mode].items():
            assert all(res[str(n)]["median_s"] > 0 for n in length["lengths"]), (mode, name)
            assert all(res[str(n)]["estimate_mib"] > 0 for n in length["lengths"])
    names = sorted(Path(p).name for p in blob["figures"])
    assert names == ["cost_curves_length.png", "cost_curves_queries.png"]
    for p in blob["figures"]:
        assert 0 < Path(p).stat().st_size < 150_000


def test_cost_curves_isolated_measures_peak_memory_and_skips_slow_points(tmp_path):
    """In a subprocess each point's peak RSS growth is measured beside the estimate; a point predicted
    slower than --max-step-s is recorded as skipped, not run."""
    args = ["--threads", "1", "--models", "listnet", "--axes", "length", "--modes", "padded"]
    blob = run_bench("bench_cost_curves.py", tmp_path, *args, "--max-step-s", "1e-9")
    res = blob["length"]["results"]["padded"]["listnet"]  # --quick: lengths 4 and 12
    assert res["4"]["peak_rss_delta_mib"] is not None and res["4"]["peak_memory_method"]
    assert res["12"]["skipped"].startswith("predicted step")
    assert "queries" not in blob


def test_stream(tmp_path):
    """bench_stream.py: both paths at both sizes, every query trained on, a positive speed ratio."""
    blob = run_bench("bench_stream.py", tmp_path, "--isolate", "none", "--threads", "1")
    assert [r["queries"] for r in blob["results"]] == [40, 160]
    for r in blob["results"]:
        assert r["same_process"]["queries"] == r["queries"]
        assert {c["queries"] for c in r["cases"].values()} == {r["queries"]}
        assert r["speed_ratio_stream_over_memory"] > 0


def test_scale(tmp_path):
    """The full-size run's script at two tiny factors (one re-ranker, 2-fold cross-fitting): every stage
    timed and measured in its subprocess, rows adding up, the linearity table between the factors."""
    factors = ["--factor", "0.001", "--factor", "0.002"]
    blob = run_bench("bench_scale.py", tmp_path, *factors, "--models", "dcm", "--crossfit", "2")
    small, large = blob["runs"]
    assert [s["stage"] for s in small["stages"]] == [
        "import", "parse", "lambdamart", "crossfit", "cut", "dcm: train", "dcm: test"
    ]  # fmt: skip
    for run in blob["runs"]:
        rows = run["rows"]
        assert run["longest_list"] == 1251  # every file holds WEB30K's longest list
        stages = {s["stage"]: s for s in run["stages"]}
        assert stages["parse"]["rows"] == sum(rows.values())
        assert stages["crossfit"]["rows"] == rows["train"]
        assert all(s["seconds"] > 0 and s["peak_rss_mib"] >= run["baseline_mib"] * 0.5 for s in run["stages"])
        assert run["peak_over_dense"] > 0
        assert run["dense_mib"] == pytest.approx(sum(rows.values()) * 136 * 4 / 2**20)
        assert run["top_k_rows"]["train"] <= rows["train"]
    assert large["queries"]["train"] > small["queries"]["train"]
    assert [row["stage"] for row in blob["linearity"]] == [s["stage"] for s in small["stages"][1:]]
    assert all(row["time_exponent"] is not None for row in blob["linearity"])
