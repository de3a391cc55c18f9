"""Benchmark figures a page states come from stored JSON (evidence/bench/): each block of docs/*.md of a
benchmark of ``benchmarks/cpu_evidence.py``'s ``STORED`` (``<!-- bench-scale: FILE ... -->``,
``<!-- bench-serve: FILE -->``, ...) is what that script's ``block_text`` reports of the files it names,
and every stored file is complete evidence (never a ``--quick`` run) that backs a block.
``cpu_evidence.py --store`` stores the runs of ``benchmarks/cpu_checks.sh`` and shows them in the docs.
Likewise the GPU runs of evidence/bench-gpu/ and the ``<!-- bench-gpu: RUN ... -->`` blocks
(``benchmarks/gpu_evidence.py``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import _report
import bench_scale
import cpu_evidence
import gpu_evidence

PAGES = sorted((REPO / "docs").glob("*.md"))
FIXTURES = REPO / "tests" / "bench_fixtures"  # tiny real runs (not --quick) of the stored benchmarks
STORED_RUNS = {p.name: json.loads(p.read_text()) for p in (REPO / "evidence" / "bench").glob("*.json")}


def _blocks(module=bench_scale, pages=PAGES):
    """``(page, match)`` of every block of ``module.BLOCK`` in ``pages``."""
    return [(page, m) for page in pages for m in module.BLOCK.finditer(page.read_text())]


def _assert_blocks_are_current(module, script: str, pages=PAGES) -> list:
    """Every block of ``module`` is ``module.block_text`` of what it names; returns the blocks."""
    blocks = _blocks(module, pages)
    for page, m in blocks:
        assert m.group(3) == module.block_text(m.group(2)), (
            f"{page.name}: the block of {m.group(2)} differs from its stored runs; run "
            f"`python benchmarks/{script} --publish`"
        )
    return blocks


@pytest.mark.parametrize("entry", cpu_evidence.STORED, ids=lambda e: e.script)
def test_every_block_is_what_its_stored_runs_report(entry):
    blocks = _assert_blocks_are_current(entry.module, f"{entry.script}.py")
    mine = [name for name, blob in STORED_RUNS.items() if blob["benchmark"] == entry.script]
    assert blocks or not mine, f"docs/benchmarks.md shows the runs that {entry.script}.py stores"


def test_every_stored_benchmark_run_backs_a_block_and_is_complete():
    by_script = {entry.script: entry for entry in cpu_evidence.STORED}
    for name, blob in STORED_RUNS.items():
        assert blob["benchmark"] in by_script, f"{name}: no benchmark of cpu_evidence.STORED stores it"
        assert by_script[blob["benchmark"]].problems_of(blob) == [], name
    for entry in cpu_evidence.STORED:
        named = {name for _, m in _blocks(entry.module) for name in m.group(2).split()}
        mine = {name for name, blob in STORED_RUNS.items() if blob["benchmark"] == entry.script}
        assert named <= mine, f"{entry.script} blocks name files it did not store: {sorted(named - mine)}"
        assert mine <= named, f"stored files no block shows: {sorted(mine - named)}"


def test_an_attn_step_run_with_other_models_is_complete_with_a_row_per_model():
    """``bench_attn_step.py --models attn,qilcm``: a row per model and list kind besides allRank's two; a
    run from before ``--models`` (no ``models`` key) timed ``attn`` alone."""
    entry = cpu_evidence.BY_SCRIPT["bench_attn_step"]
    stored = next(blob for blob in STORED_RUNS.values() if blob["benchmark"] == "bench_attn_step")
    assert entry.problems_of(stored) == []
    kinds = stored["lengths"]
    before = json.loads(json.dumps(stored))
    before.pop("models", None)
    before["results"] = {
        name: row for name, row in stored["results"].items() if not name.startswith("ctxrank ")
    }
    for kind in kinds:
        before["results"][f"ctxrank attn + ctxrank lambdaloss, {kind}"] = {}
    assert entry.problems_of(before) == []
    run = json.loads(json.dumps(before))
    run["models"] = ["attn", "qilcm"]
    assert entry.problems_of(run) == ["a row is missing"]
    for kind in kinds:
        run["results"][f"ctxrank qilcm + attrank, {kind}"] = {}
    assert entry.problems_of(run) == []
    del run["results"][f"allRank + ctxrank lambdaloss, {kinds[0]}"]
    assert entry.problems_of(run) == ["a row is missing"]


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


# ------------------------------------------------ the runs of cpu_checks.sh, stored by cpu_evidence.py
CHECKED = [entry for entry in cpu_evidence.STORED if entry.section]  # stored by --store
FIXTURE_OF = {  # a tiny real run of each (not --quick; sizes far below the evidence settings)
    "bench_pipeline_graph": "pipeline_graph.json",
    "bench_inference": "serving_avx512.json",
    "bench_serve": "serve.json",
    "bench_startup": "startup.json",
    "bench_batch_predict": "batch_predict.json",
    "bench_clicks": "clicks_step.json",
}
#: what each benchmark's run loses to stop being evidence (``evidence_problems`` must name it)
INCOMPLETE = {
    "bench_pipeline_graph": lambda b: b["results"].pop(),
    "bench_inference": lambda b: b["serving"].clear(),
    "bench_serve": lambda b: b["served_v2"].pop("64"),
    "bench_startup": lambda b: b["results"].pop("from ctxrank import QILCMRanker"),
    "bench_batch_predict": lambda b: b["results"].pop("Ray Data, 2 workers"),
    "bench_clicks": lambda b: b["results"].pop(),
}


def _fixture(entry) -> dict:
    return json.loads((FIXTURES / FIXTURE_OF[entry.script]).read_text())


def test_every_benchmark_that_cpu_checks_runs_is_stored_by_cpu_evidence():
    script = (REPO / "benchmarks" / "cpu_checks.sh").read_text()
    assert {e.script for e in CHECKED} == set(FIXTURE_OF)
    assert all(f"benchmarks/{e.script}.py" in script for e in CHECKED)


@pytest.mark.parametrize("entry", CHECKED, ids=lambda e: e.script)
def test_a_run_reports_its_ratio_and_target_and_is_evidence_only_when_complete(entry, tmp_path, capsys):
    blob = _fixture(entry)
    assert entry.problems_of(blob) == []
    text = entry.module.report_text(blob)
    assert text.startswith("machine: ") and "|---|" in text and blob["code"] in text
    if entry.script != "bench_batch_predict":  # the only one without a target
        assert "target" in text
    path = tmp_path / "run.json"
    path.write_text(json.dumps(blob))
    assert entry.module.main(["--from-json", str(path)]) == 0
    assert capsys.readouterr().out == text
    INCOMPLETE[entry.script](blob)
    assert entry.problems_of(blob), f"{entry.script}: an incomplete run passes as evidence"


def test_a_pipeline_graph_run_with_the_tied_cases_is_evidence_only_with_all_four():
    """A run of bench_pipeline_graph that has the tied cases (its results carry ``tied_items_share``)
    needs all four; a run from before them (as the stored ones) the first two; a tied row names its
    trees and share of tied items."""
    module = cpu_evidence.BY_SCRIPT["bench_pipeline_graph"].module
    blob = _fixture(cpu_evidence.BY_SCRIPT["bench_pipeline_graph"])
    assert module.evidence_problems(blob) == []
    tied = [{**r, "case": f"tied-{r['case']}", "trees": 3, "tied_items_share": 0.96} for r in blob["results"]]
    run = {**blob, "results": [{**r, "tied_items_share": 0.2} for r in blob["results"]] + tied}
    assert module.evidence_problems(run) == []
    text = module.report_text(run)
    assert "| MQ2008 fold 1 test, 3 trees of 2 leaves (96% of items tied) |" in text
    assert "| MQ2008 fold 1 test |" in text and "tied-1000: graph / reference" in text
    run["results"].pop()
    assert module.evidence_problems(run) == [
        "cases ['mq2008', '1000', 'tied-mq2008'], expected ['mq2008', '1000', 'tied-mq2008', 'tied-1000']"
    ]


def test_a_quick_run_is_never_evidence(tmp_path, monkeypatch):
    entry = cpu_evidence.BY_SCRIPT["bench_serve"]
    blob = {**_fixture(entry), "quick": True}
    monkeypatch.setattr(_report, "EVIDENCE", tmp_path)
    (tmp_path / "serve-quick.json").write_text(json.dumps(blob))
    with pytest.raises(ValueError, match="--quick run"):
        entry.module.block_text("serve-quick.json")
    assert entry.problems_of(blob) == ["a --quick run (a smoke test) is not evidence"]


def _store_setup(tmp_path, monkeypatch):
    """An OUTDIR with every fixture and an AVX2 serving run, an empty evidence/bench/, a copy of the page."""
    monkeypatch.setattr(_report, "EVIDENCE", tmp_path / "evidence")
    (tmp_path / "evidence").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    for name in FIXTURE_OF.values():
        shutil.copy(FIXTURES / name, out / name)
    shutil.copy(FIXTURES / "serving_avx2.json", out / "serving_avx2.json")
    page = tmp_path / "benchmarks.md"
    page.write_text((REPO / "docs" / "benchmarks.md").read_text())
    return out, page


def test_store_shows_each_run_in_its_section_and_refuses_what_is_no_evidence(tmp_path, monkeypatch):
    out, page = _store_setup(tmp_path, monkeypatch)
    quick = {**json.loads((out / "serve.json").read_text()), "quick": True}
    (out / "serve_quick.json").write_text(json.dumps(quick))
    old = json.loads((out / "serving_avx512.json").read_text())
    del old["machine"]["torch_cpu_capability"]  # a run of the script before it recorded the instruction set
    (out / "serving_old.json").write_text(json.dumps(old))
    names, notes = cpu_evidence.store(out, "2026-12-07", page)
    assert sorted(names) == [
        "batch-predict-2026-12-07.json", "clicks-step-2026-12-07.json", "pipeline-graph-2026-12-07.json",
        "serve-2026-12-07.json", "serving-avx2-2026-12-07.json", "serving-avx512-2026-12-07.json",
        "startup-2026-12-07.json",
    ]  # fmt: skip
    assert notes == [
        "serve_quick.json: not stored: a --quick run (a smoke test) is not evidence",
        "serving_old.json: not stored: no code or instruction set recorded",
    ]
    text = page.read_text()
    for entry in CHECKED:
        blocks = _assert_blocks_are_current(entry.module, entry.script, [page])
        assert len(blocks) == 1, entry.script
        start, end = cpu_evidence._section_span(text, entry.section)
        assert start < blocks[0][1].start() < end, f"{entry.script}: its block is outside {entry.section!r}"
    serving = next(m for _, m in _blocks(cpu_evidence.BY_SCRIPT["bench_inference"].module, [page]))
    assert serving.group(2) == "serving-avx2-2026-12-07.json serving-avx512-2026-12-07.json"
    assert "QILCM TorchScript p50 / matmul p50, both AVX2: " in serving.group(3)  # the AVX2 figure
    # the same date again: nothing is replaced
    again, notes = cpu_evidence.store(out, "2026-12-07", page)
    assert again == [] and len(notes) == 2 + len(names)
    assert sum("exists: a stored run is never replaced" in n for n in notes) == len(names)
    assert page.read_text() == text


def test_a_later_run_replaces_the_run_its_section_shows_and_names_the_one_left(tmp_path, monkeypatch):
    out, page = _store_setup(tmp_path, monkeypatch)
    for f in set(FIXTURE_OF.values()) - {"serve.json"} | {"serving_avx2.json"}:
        (out / f).unlink()
    cpu_evidence.store(out, "2026-12-07", page)
    names, notes = cpu_evidence.store(out, "2026-12-08", page)
    assert names == ["serve-2026-12-08.json"]
    assert notes == [
        "evidence/bench/serve-2026-12-07.json: no longer shown in benchmarks.md: remove it or show it"
    ]
    blocks = _assert_blocks_are_current(cpu_evidence.BY_SCRIPT["bench_serve"].module, "bench_serve", [page])
    assert [m.group(2) for _, m in blocks] == ["serve-2026-12-08.json"]


STUB_PYTHON = """#!/usr/bin/env bash
echo "${ATEN_CPU_CAPABILITY:-default} $*" >> "$STUB_LOG"
case "$*" in *bench_serve.py*) echo "the server did not start" >&2; exit 3;; esac
while [ $# -gt 0 ]; do [ "$1" = --json ] && echo '{}' > "$2"; shift; done
"""


def test_cpu_checks_reports_a_failed_step_and_still_runs_the_others(tmp_path):
    stub = tmp_path / "python"
    stub.write_text(STUB_PYTHON)
    stub.chmod(0o755)
    log = tmp_path / "calls.log"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(stub), "STUB_LOG": str(log)}
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "cpu_checks.sh"), str(tmp_path / "o"), "--quick"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    calls = log.read_text().splitlines()
    steps = (REPO / "benchmarks" / "cpu_checks.sh").read_text().count("\nstep ")  # one call each
    assert len(calls) == steps == len(CHECKED) + 1 and all("--quick --json" in c for c in calls)
    assert [c.split()[0] for c in calls] == ["default", "default", "avx2"] + ["default"] * (steps - 3)
    assert "serve: FAILED, exit 3 (see " in proc.stdout and "the server did not start" in proc.stdout
    assert "batch-predict: ok" in proc.stdout and "startup: ok" in proc.stdout
    assert not (tmp_path / "o" / "serve.json").exists() and (tmp_path / "o" / "startup.json").exists()
    env["LIMIT_SCALE"] = "x"
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "cpu_checks.sh"), str(tmp_path / "o")],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "LIMIT_SCALE must be a positive integer" in proc.stderr


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


def test_importing_the_benchmarks_leaves_the_environment_alone():
    """A benchmark module changes nothing in its importer's environment (bench_batch_predict set
    PYTHONPATH at import, and a later test's ``pip`` then found the source tree instead of the wheel)."""
    import os
    import subprocess

    code = (
        "import os, sys; before = dict(os.environ); sys.path.insert(0, 'benchmarks'); "
        "import cpu_evidence; [__import__(s.script) for s in cpu_evidence.STORED]; "
        "print(sorted(set(os.environ.items()) ^ set(before.items())))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
