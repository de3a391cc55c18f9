"""Benchmark figures a page states come from stored JSON (evidence/bench/): each ``<!-- bench-scale: FILE
... -->`` block of docs/*.md is what ``benchmarks/bench_scale.py --from-json FILE ...`` reports of those
files, and every stored file backs a block."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_scale

PAGES = sorted((REPO / "docs").glob("*.md"))


def _blocks():
    return [(page, m) for page in PAGES for m in bench_scale.BLOCK.finditer(page.read_text())]


def test_every_bench_scale_block_is_what_its_stored_runs_report():
    blocks = _blocks()
    assert blocks, "docs/benchmarks.md states the full-size run from evidence/bench/"
    for page, m in blocks:
        assert m.group(3) == bench_scale.block_text(m.group(2)), (
            f"{page.name}: the bench-scale block of {m.group(2)} differs from its files; run "
            "`python benchmarks/bench_scale.py --publish`"
        )


def test_every_stored_benchmark_run_backs_a_block_and_is_complete():
    named = {name for _, m in _blocks() for name in m.group(2).split()}
    stored = {p.name for p in (REPO / "evidence" / "bench").glob("*.json")}
    assert named <= stored, f"blocks name files that are not stored: {sorted(named - stored)}"
    assert stored <= named, f"stored files no block shows: {sorted(stored - named)}"
    for name in stored:
        blob = json.loads((REPO / "evidence" / "bench" / name).read_text())
        assert blob["benchmark"] == "bench_scale" and blob["complete"] and not blob["quick"], name
        assert all(run["stages"] and run["settings"] for run in blob["runs"]), name


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
