"""The GPU figures of the docs from stored runs of ``benchmarks/gpu_checks.sh`` (evidence/bench-gpu/).

A stored run is a folder ``evidence/bench-gpu/NAME/`` with what ``gpu_checks.sh OUTDIR`` wrote (the
tests' JUnit XML, the two benchmarks' JSON, ``torch.txt``, ``nvidia-smi.csv``) and ``run.json``: the
code it ran (a commit, and how the tree differed from it if it did) and the command. A page shows runs
in a block ``<!-- bench-gpu: NAME ... -->`` ... ``<!-- /bench-gpu -->`` whose text is :func:`block_text`
of them; ``tests/test_bench_evidence.py`` checks that every block is what its runs give.

    python benchmarks/gpu_evidence.py --store OUTDIR NAME --commit SHA [--tree-note TEXT] [--command C]
    python benchmarks/gpu_evidence.py --publish      # rewrite every bench-gpu block of docs/*.md
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from _report import publish_blocks, publish_docs

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "evidence" / "bench-gpu"
BLOCK = re.compile(r"(<!-- bench-gpu: ([^>]*?) -->\n)(.*?)(<!-- /bench-gpu -->)", re.S)
FILES = ("gpu-tests.xml", "attn_step_cuda.json", "train_throughput_cuda.json", "torch.txt", "nvidia-smi.csv")
ATTN_ROWS = (
    ("ctxrank attn + ctxrank lambdaloss", "ctxrank `attn`"),
    ("allRank + ctxrank lambdaloss", "allRank, same loss"),
    ("allRank + allRank lambdaLoss (its own step)", "allRank, its own step"),
)


def tests_of(run: Path) -> dict:
    """The JUnit XML of a run: ``{"tests", "failures", "errors", "skipped"}`` and the failed names."""
    suite = next(ET.parse(run / "gpu-tests.xml").getroot().iter("testsuite"))
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = [
        case.get("name")
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    return {**counts, "failed": failed}


def load(name: str) -> dict:
    run = EVIDENCE / name
    attn = json.loads((run / "attn_step_cuda.json").read_text())
    return {
        "name": name,
        "run": json.loads((run / "run.json").read_text()),
        "tests": tests_of(run),
        "attn": attn,
        "throughput": json.loads((run / "train_throughput_cuda.json").read_text())["models"],
        "machine": attn["machine"],
    }


def _machine(m: dict) -> str:
    return (
        f"{m['gpu']} ({m['gpu_memory_gib']} GiB, CUDA {m['cuda']}), {m['usable_cpus']} CPUs "
        f"({m['cpu']}), torch {m['torch']}, Python {m['python']}, torch threads {m['threads']}"
    )


def block_text(names: str) -> str:
    """A block's content: the named runs' tests, ``attn`` step against allRank and every model's step."""
    runs = [load(n) for n in names.split()]
    machines = {_machine(r["machine"]) for r in runs}
    out = [f"Machine: {machines.pop()}.", ""] if len(machines) == 1 else []
    for r in runs:
        t = r["tests"]
        passed = t["tests"] - t["failures"] - t["errors"] - t["skipped"]
        state = f"{passed} of {t['tests']} GPU tests passed" + (
            f", FAILED: {', '.join(t['failed'])}" if t["failed"] else ""
        )
        where = "" if len(runs) > 1 and not machines else f"{_machine(r['machine'])}; "
        out.append(f"- `{r['name']}`: {where}code {r['run']['code']}; {state}.")
    out.append("")
    a0 = runs[0]["attn"]
    out.append(
        f"`attn` training step against allRank {a0['allrank']['version']} (batch {a0['batch']} lists x "
        f"{a0['items']} items x {a0['features']} features; {a0['rounds']} interleaved rounds of "
        f"{a0['repeats']} steps after {a0['warmup']} warm-up steps; median step, ms, and peak CUDA tensor "
        "memory, MiB, of each run):"
    )
    out.append("")
    head = "| step | lists | " + " | ".join(f"{r['name']} ms" for r in runs) + " | peak CUDA MiB |"
    out += [head, "|---|---|" + "---:|" * (len(runs) + 1)]
    L = a0["items"]
    for kind, lists in (("full", f"{L} items"), ("mixed", f"{max(1, L // 5)}-{L} items")):
        for key, label in ATTN_ROWS:
            cells = [r["attn"]["results"][f"{key}, {kind}"] for r in runs]
            ms = " | ".join(f"{c['median_s'] * 1000:.1f}" for c in cells)
            out.append(f"| {label} | {lists} | {ms} | {cells[0]['peak_cuda_delta_mib']:,.0f} |")
    out.append("")
    for kind in ("full", "mixed"):
        for theirs in ("allRank + ctxrank lambdaloss", "allRank + allRank lambdaLoss (its own step)"):
            key = f"ctxrank / {theirs}, {kind}"
            ratios = ", ".join(f"{r['attn']['ratios'][key]['median']:.2f}" for r in runs)
            label = dict(ATTN_ROWS)[theirs]
            out.append(f"- queries/s of ctxrank over {label}, {kind} lists: **{ratios}** (median steps)")
    check = a0["forward_check"]
    out.append(
        f"- same weights, eval mode: max |allRank - ctxrank| = {check['torch_layer_norm']:.1e} with "
        f"torch's layer norm in allRank ({check['allrank_layer_norm']:.1e} with allRank's own)"
    )
    out.append("")
    t0 = runs[0]["throughput"]
    out.append(
        f"Every model's training step (batch {t0['batch']} lists x {t0['items']} items x {t0['features']} "
        f"features, {t0['warmup']} warm-up and {t0['repeats']} timed steps; queries/s at the median step "
        "of each run, and peak CUDA tensor memory, MiB):"
    )
    out.append("")
    head = "| model | parameters | " + " | ".join(f"{r['name']} queries/s" for r in runs)
    head += " | peak CUDA MiB |"
    out += [head, "|---|---:|" + "---:|" * (len(runs) + 1)]
    for label, row in t0["results"].items():
        qps = " | ".join(f"{r['throughput']['results'][label]['queries_per_s']:,.0f}" for r in runs)
        out.append(f"| {label} | {row['parameters']:,} | {qps} | {row['peak_cuda_delta_mib']:,.0f} |")
    return "\n".join(out) + "\n"


def publish(page: Path) -> bool:
    """Rewrite ``page``'s bench-gpu blocks from their runs; whether anything changed."""
    return publish_blocks(page, BLOCK, block_text)


def store(outdir: Path, name: str, commit: str, tree_note: str, command: str) -> Path:
    """Copy a ``gpu_checks.sh`` output folder to evidence/bench-gpu/NAME with its ``run.json``."""
    missing = [f for f in FILES if not (outdir / f).is_file()]
    if missing:
        raise SystemExit(f"{outdir}: not a complete gpu_checks.sh run, missing {', '.join(missing)}")
    dest = EVIDENCE / name
    if dest.exists():
        raise SystemExit(f"{dest} exists: a stored run is never replaced; pick another NAME")
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise SystemExit(f"--commit must be a commit id, got {commit!r}")
    dest.mkdir(parents=True)
    for f in FILES:
        shutil.copy(outdir / f, dest / f)
    code = f"`{commit}`" + (f" ({tree_note})" if tree_note else "")
    (dest / "run.json").write_text(json.dumps({"code": code, "command": command}, indent=1) + "\n")
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", nargs=2, metavar=("OUTDIR", "NAME"), help="store a gpu_checks.sh run")
    ap.add_argument("--commit", help="--store: the commit the run's code was")
    ap.add_argument("--tree-note", default="", help="--store: how the run's tree differed from --commit")
    ap.add_argument("--command", default="benchmarks/gpu_checks.sh OUTDIR ALLRANK_DIR", help="--store")
    ap.add_argument("--publish", action="store_true", help="rewrite the bench-gpu blocks of docs/*.md")
    args = ap.parse_args(argv)
    if args.store:
        if not args.commit:
            ap.error("--store needs --commit")
        print(store(Path(args.store[0]), args.store[1], args.commit, args.tree_note, args.command))
    if args.publish:
        publish_docs(BLOCK, block_text)
    if not (args.store or args.publish):
        ap.error("give --store OUTDIR NAME or --publish")
    return 0


if __name__ == "__main__":
    sys.exit(main())
