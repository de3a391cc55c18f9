"""Benchmark figures a page states come from stored JSON (evidence/bench/): each ``<!-- bench-scale: FILE
... -->`` block of docs/*.md is what ``benchmarks/bench_scale.py --from-json FILE ...`` reports of those
files, each ``<!-- bench-attn-step: FILE -->`` block what ``benchmarks/bench_attn_step.py --from-json
FILE`` reports (``bench-missing``: ``benchmarks/missing_ohsumed.py``), and every stored file backs a
block. Likewise the GPU runs of evidence/bench-gpu/ and the ``<!-- bench-gpu: RUN ... -->`` blocks
(``benchmarks/gpu_evidence.py``)."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_attn_step
import bench_scale
import gpu_evidence
import missing_ohsumed

PAGES = sorted((REPO / "docs").glob("*.md"))


def _blocks(module=bench_scale):
    """``(page, match)`` of every block of ``module.BLOCK`` (bench_scale's or gpu_evidence's) in docs/."""
    return [(page, m) for page in PAGES for m in module.BLOCK.finditer(page.read_text())]


def _assert_blocks_are_current(module, script: str) -> list:
    """Every block of ``module`` is ``module.block_text`` of what it names; returns the blocks."""
    blocks = _blocks(module)
    assert blocks, f"docs/benchmarks.md shows the runs that {script} stores"
    for page, m in blocks:
        assert m.group(3) == module.block_text(m.group(2)), (
            f"{page.name}: the block of {m.group(2)} differs from its stored runs; run "
            f"`python benchmarks/{script} --publish`"
        )
    return blocks


def test_every_bench_scale_block_is_what_its_stored_runs_report():
    _assert_blocks_are_current(bench_scale, "bench_scale.py")


def test_every_bench_attn_step_block_is_what_its_stored_run_reports():
    _assert_blocks_are_current(bench_attn_step, "bench_attn_step.py")


def test_every_bench_missing_block_is_what_its_stored_run_reports():
    _assert_blocks_are_current(missing_ohsumed, "missing_ohsumed.py")


def test_every_stored_benchmark_run_backs_a_block_and_is_complete():
    stored = {p.name: json.loads(p.read_text()) for p in (REPO / "evidence" / "bench").glob("*.json")}
    for module in (bench_scale, bench_attn_step, missing_ohsumed):
        named = {name for _, m in _blocks(module) for name in m.group(2).split()}
        mine = {name for name, blob in stored.items() if blob["benchmark"] == module.__name__}
        assert named <= mine, f"{module.__name__} blocks name files it did not store: {sorted(named - mine)}"
        assert mine <= named, f"stored files no block shows: {sorted(mine - named)}"
    for name, blob in stored.items():
        assert not blob["quick"], name
        if blob["benchmark"] == "bench_scale":
            assert blob["complete"] and all(run["stages"] and run["settings"] for run in blob["runs"]), name
        elif blob["benchmark"] == "bench_attn_step":  # allRank's rows, the ratios, the same-weights check
            assert blob["allrank"]["available"] and blob["ratios"] and blob["forward_check"], name
            assert len(blob["results"]) == 3 * len(blob["lengths"]), name
        else:  # missing_ohsumed: every rule of each model on the 5 folds
            assert blob["benchmark"] == "missing_ohsumed", name
            rules = {"lambdamart": missing_ohsumed.RULES, "listnet": missing_ohsumed.NEURAL_RULES}
            for model, by_rule in blob["results"].items():
                assert tuple(by_rule) == rules[model], name
                assert all(len(v) == 5 for values in by_rule.values() for v in values.values()), name


def test_publish_rewrites_a_stale_block(tmp_path):
    """A block whose numbers were edited by hand is put back from the files."""
    name = next(iter(_blocks()))[1].group(2)
    good = f"text\n<!-- bench-scale: {name} -->\n{bench_scale.block_text(name)}<!-- /bench-scale -->\n"
    page = tmp_path / "page.md"
    page.write_text(good.replace("| parse |", "| parse (edited) |"))
    assert bench_scale.publish(page) and page.read_text() == good
    assert not bench_scale.publish(page)


def test_a_block_naming_a_missing_file_fails():
    with pytest.raises(FileNotFoundError):
        bench_scale.block_text("missing.json")


# ---------------------------------------------------------------------- GPU runs (evidence/bench-gpu/)

def test_every_bench_gpu_block_is_what_its_stored_runs_give_and_every_run_is_shown():
    blocks = _assert_blocks_are_current(gpu_evidence, "gpu_evidence.py")
    named = {name for _, m in blocks for name in m.group(2).split()}
    stored = {p.name for p in gpu_evidence.EVIDENCE.iterdir() if p.is_dir()}
    assert named == stored
    for name in stored:
        run = gpu_evidence.EVIDENCE / name
        assert all((run / f).is_file() for f in (*gpu_evidence.FILES, "run.json")), name
        assert json.loads((run / "attn_step_cuda.json").read_text())["device"] == "cuda", name
        assert gpu_evidence.tests_of(run)["tests"] > 0, name


def test_storing_a_gpu_run_refuses_an_incomplete_folder_and_never_replaces_one(tmp_path, monkeypatch):
    src = next(p for p in sorted(gpu_evidence.EVIDENCE.iterdir()) if p.is_dir())
    monkeypatch.setattr(gpu_evidence, "EVIDENCE", tmp_path / "evidence")
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu-tests.xml").write_bytes((src / "gpu-tests.xml").read_bytes())
    with pytest.raises(SystemExit, match=r"missing attn_step_cuda\.json"):
        gpu_evidence.store(out, "x", "abc1234", "", "cmd")
    for f in gpu_evidence.FILES:
        (out / f).write_bytes((src / f).read_bytes())
    with pytest.raises(SystemExit, match="must be a commit id"):
        gpu_evidence.store(out, "x", "HEAD", "", "cmd")
    dest = gpu_evidence.store(out, "x", "abc1234", "", "cmd")
    assert json.loads((dest / "run.json").read_text())["code"] == "`abc1234`"
    with pytest.raises(SystemExit, match="never replaced"):
        gpu_evidence.store(out, "x", "abc1234", "", "cmd")


def test_gpu_checks_stops_at_once_without_cuda(tmp_path):
    import subprocess

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_checks.sh"), str(tmp_path / "o")],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 2 and "no CUDA device visible to torch" in proc.stderr
