"""The benchmarks whose runs are stored in evidence/bench/, and the step that stores a ``cpu_checks.sh`` run.

Each entry of :data:`STORED` names a benchmark script (its JSON's ``"benchmark"``), the tag of its
blocks in docs/*.md (``<!-- TAG: FILE ... -->`` ... ``<!-- /TAG -->``, the text ``block_text`` of the
script gives), what a run must hold to be evidence (the script's ``evidence_problems``; a ``--quick``
run never is), and, for the runs ``cpu_checks.sh`` produces, the stem of a stored file's name and the
section of docs/benchmarks.md that shows it. ``tests/test_bench_evidence.py`` checks every block
against its files and that every stored file backs a block.

    python benchmarks/cpu_evidence.py --store OUTDIR [--date YYYY-MM-DD]
    python benchmarks/cpu_evidence.py --publish      # rewrite every benchmark block of docs/*.md

``--store`` copies each JSON file of ``OUTDIR`` that is evidence to ``evidence/bench/STEM-DATE.json``
(a stored file is never replaced), shows the files of each benchmark in its section of
docs/benchmarks.md (a new block after the section's first ``console`` fence, or the section's block
now naming the new files: the files it named before are listed, to be removed or shown elsewhere) and
rewrites the blocks. Files that are not evidence are named with the reason and not stored.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _report
from _report import ROOT, publish_blocks, publish_docs

PAGE = ROOT / "docs" / "benchmarks.md"


def _scale_problems(blob: dict) -> list[str]:
    done = blob["complete"] and all(run["stages"] and run["settings"] for run in blob["runs"])
    return [] if done else ["a stage or the settings of a run are missing"]


def _attn_step_problems(blob: dict) -> list[str]:
    """allRank's rows, the ratios and the same-weights check; a row per list kind for each ctxrank model
    of ``--models`` (runs before that option timed ``attn`` alone) and for each of allRank's two."""
    if not (blob["allrank"]["available"] and blob["ratios"] and blob["forward_check"]):
        return ["allRank's rows, the ratios or the same-weights check are missing"]
    rows = (len(set(blob.get("models", ["attn"]))) + 2) * len(blob["lengths"])
    return [] if len(blob["results"]) == rows else ["a row is missing"]


def _missing_problems(blob: dict) -> list[str]:
    """Every rule of each model on the 5 folds."""
    import missing_ohsumed

    rules = {"lambdamart": missing_ohsumed.RULES, "listnet": missing_ohsumed.NEURAL_RULES}
    for model, by_rule in blob["results"].items():
        if tuple(by_rule) != rules[model]:
            return [f"{model}: rules {list(by_rule)}, expected {list(rules[model])}"]
        if not all(len(v) == 5 for values in by_rule.values() for v in values.values()):
            return [f"{model}: not every rule on the 5 folds"]
    return []


def _serving_stem(blob: dict) -> str:
    """``serving-avx512``, ``serving-avx2``: the instruction set of torch's kernels in the run."""
    return "serving-" + blob["machine"]["torch_cpu_capability"].lower()


@dataclass(frozen=True)
class Stored:
    """A benchmark whose runs are stored in evidence/bench/ (module docstring)."""

    script: str
    tag: str
    problems: Callable[[dict], list[str]] | None = None  # None: the script's ``evidence_problems``
    stem: str | Callable[[dict], str] | None = None  # None: stored and shown by hand, not by --store
    section: str | None = None  # the heading of docs/benchmarks.md whose block shows --store's files

    @property
    def module(self):
        return importlib.import_module(self.script)

    def problems_of(self, blob: dict) -> list[str]:
        if blob.get("quick") is not False:
            return ["a --quick run (a smoke test) is not evidence"]
        return (self.problems or self.module.evidence_problems)(blob)

    def file_name(self, blob: dict, date: str) -> str:
        stem = self.stem(blob) if callable(self.stem) else self.stem
        return f"{stem}-{date}.json"


STORED = (
    Stored("bench_scale", "bench-scale", _scale_problems),
    Stored("bench_attn_step", "bench-attn-step", _attn_step_problems),
    Stored("missing_ohsumed", "bench-missing", _missing_problems),
    Stored("bench_pipeline_graph", "bench-pipeline-graph", stem="pipeline-graph",
           section="## Whole-pipeline ONNX graph"),
    Stored("bench_inference", "bench-serving", stem=_serving_stem,
           section="## Serving one list: the graph against its arithmetic floor"),
    Stored("bench_serve", "bench-serve", stem="serve", section="## Serving over HTTP"),
    Stored("bench_startup", "bench-startup", stem="startup",
           section="## Start-up: `ctxrank --version` and `--help`"),
    Stored("bench_batch_predict", "bench-batch-predict", stem="batch-predict",
           section="## Batch scoring on Ray Data"),
    Stored("bench_clicks", "bench-clicks", stem="clicks-step",
           section="## Debiased training: the step's cost"),
)  # fmt: skip
BY_SCRIPT = {s.script: s for s in STORED}


def _section_span(text: str, heading: str) -> tuple[int, int]:
    """Start and end of the section of ``text`` under the line ``heading`` (up to the next heading of
    its level or above)."""
    found = re.search(rf"^{re.escape(heading)}\n", text, re.M)
    if found is None:
        raise SystemExit(f"{PAGE.name}: no section {heading!r}")
    level = len(heading) - len(heading.lstrip("#"))
    after = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, found.end())
    return found.start(), after.start() if after else len(text)


def show(page: Path, entry: Stored, names: list[str]) -> list[str]:
    """Make ``entry``'s section of ``page`` show the stored files ``names`` in one block; returns the
    files the section's block named before (no longer shown there)."""
    text = page.read_text()
    start, end = _section_span(text, entry.section)
    section = text[start:end]
    block = entry.module.BLOCK.search(section)
    if block is not None:
        before = block.group(2).split()
        opening = f"<!-- {entry.tag}: {' '.join(names)} -->\n"
        section = section[: block.start(1)] + opening + section[block.end(1) :]
    else:
        before = []
        fence = re.search(r"^```console\n.*?^```\n", section, re.M | re.S)
        if fence is None:
            raise SystemExit(f"{page.name}, {entry.section!r}: no ```console fence to show the run after")
        new = f"\n<!-- {entry.tag}: {' '.join(names)} -->\n<!-- /{entry.tag} -->\n"
        section = section[: fence.end()] + new + section[fence.end() :]
    page.write_text(text[:start] + section + text[end:])
    publish_blocks(page, entry.module.BLOCK, entry.module.block_text)
    return [name for name in before if name not in names]


def store(outdir: Path, date: str, page: Path = PAGE) -> tuple[list[str], list[str]]:
    """Store every JSON run of ``outdir`` that is evidence (module docstring); returns (the stored file
    names, a line for each file refused or no longer shown)."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise SystemExit(f"--date must be YYYY-MM-DD, got {date!r}")
    stored: dict[str, list[str]] = {}
    notes = []
    for path in sorted(outdir.glob("*.json")):
        try:
            blob = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            notes.append(f"{path.name}: not JSON ({exc})")
            continue
        entry = BY_SCRIPT.get(blob.get("benchmark"))
        if entry is None or entry.section is None:
            notes.append(f"{path.name}: benchmark {blob.get('benchmark')!r} is not stored by this step")
            continue
        problems = entry.problems_of(blob)
        dest = None if problems else _report.EVIDENCE / entry.file_name(blob, date)
        if dest is not None and dest.exists():
            problems = [f"evidence/bench/{dest.name} exists: a stored run is never replaced"]
        if problems:
            notes.append(f"{path.name}: not stored: {'; '.join(problems)}")
            continue
        shutil.copyfile(path, dest)
        stored.setdefault(entry.script, []).append(dest.name)
    for script, names in stored.items():
        for old in show(page, BY_SCRIPT[script], names):
            notes.append(f"evidence/bench/{old}: no longer shown in {page.name}: remove it or show it")
    return [name for names in stored.values() for name in names], notes


def publish() -> None:
    """Rewrite every benchmark block of docs/*.md from evidence/bench/."""
    for entry in STORED:
        publish_docs(entry.module.BLOCK, entry.module.block_text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", metavar="OUTDIR", type=Path, help="store the runs of a cpu_checks.sh OUTDIR")
    today = datetime.date.today().isoformat()
    ap.add_argument("--date", default=today, help="--store: the date in the stored files' names (today)")
    ap.add_argument("--publish", action="store_true", help="rewrite every benchmark block of docs/*.md")
    args = ap.parse_args(argv)
    if not (args.store or args.publish):
        ap.error("give --store OUTDIR or --publish")
    status = 0
    if args.store:
        if not args.store.is_dir():
            raise SystemExit(f"--store: {args.store} is not a directory")
        names, notes = store(args.store, args.date)
        for name in names:
            print(f"stored evidence/bench/{name}")
        for note in notes:
            print(note)
        status = 1 if notes else 0
    if args.publish:
        publish()
    return status


if __name__ == "__main__":
    sys.exit(main())
