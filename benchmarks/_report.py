"""Shared output of the benchmark scripts (imported by them; not a benchmark itself)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where a benchmark's stored runs live (a page's blocks are regenerated from them by the tests)
EVIDENCE = ROOT / "evidence" / "bench"


def block_pattern(tag: str) -> re.Pattern:
    """The regex of a page's ``<!-- TAG: FILE -->`` ... ``<!-- /TAG -->`` blocks (groups: opening line,
    its argument, content, closing line), for :func:`publish_blocks`."""
    return re.compile(rf"(<!-- {tag}: ([^>]*?) -->\n)(.*?)(<!-- /{tag} -->)", re.S)


def load_stored(name: str) -> dict:
    """The stored run ``name`` of evidence/bench/; a ``--quick`` run is refused (it is no measurement)."""
    blob = json.loads((EVIDENCE / name.strip()).read_text())
    if blob.get("quick"):
        raise ValueError(f"evidence/bench/{name.strip()} is a --quick run: a smoke test, not evidence")
    return blob


def stored_report(names: str, report_text) -> str:
    """A block's content: ``report_text`` of each stored run of evidence/bench/ that ``names`` lists
    (separated by spaces), a blank line between them, in a code fence."""
    reports = [report_text(load_stored(name)) for name in names.split()]
    return "```text\n" + "\n".join(reports) + "```\n"


def stored_blocks(tag: str, report_text):
    """``(BLOCK, block_text)`` of a benchmark whose pages show its stored runs in ``<!-- TAG: FILES -->``
    ... ``<!-- /TAG -->`` blocks: the blocks' regex (:func:`block_pattern`) and the text of a block's
    files (:func:`stored_report` with the script's ``report_text``), which ``--publish``,
    cpu_evidence.py and tests/test_bench_evidence.py read."""
    return block_pattern(tag), lambda names: stored_report(names, report_text)


def add_stored_args(ap, tag: str) -> None:
    """``--from-json FILE`` (print a stored run's report) and ``--publish`` (rewrite the ``tag`` blocks)."""
    ap.add_argument("--from-json", metavar="FILE", help="print the report of a stored run; runs nothing")
    ap.add_argument(
        "--publish", action="store_true", help=f"rewrite the {tag} blocks of docs/*.md from evidence/bench/"
    )


def answer_stored_args(args, block, block_text, report_text) -> bool:
    """Do what ``--publish`` / ``--from-json`` ask (:func:`add_stored_args`); whether either was given."""
    if args.publish:
        publish_docs(block, block_text)
    elif args.from_json:
        print(report_text(json.loads(Path(args.from_json).read_text())), end="")
    return bool(args.publish or args.from_json)


def code_of_tree() -> str:
    """The commit a run measured, with ``+changes`` when the working tree differed from it."""
    from ctxrank.experiments.provenance import code_version

    code = code_version()
    return (code.get("git_sha") or "unknown")[:7] + ("+changes" if code.get("git_dirty") else "")


def publish_blocks(page, block, text_of) -> bool:
    """Rewrite each block of ``page`` (a ``pathlib.Path``) matched by the regex ``block`` (groups: opening
    line, its argument, content, closing line) with ``text_of(argument)``; whether anything changed."""
    text = page.read_text()
    new = block.sub(lambda m: m.group(1) + text_of(m.group(2)) + m.group(4), text)
    if new != text:
        page.write_text(new)
    return new != text


def publish_docs(block, text_of) -> None:
    """:func:`publish_blocks` on every page of docs/, naming each page it rewrote (a script's
    ``--publish``)."""
    for page in sorted((ROOT / "docs").glob("*.md")):
        if publish_blocks(page, block, text_of):
            print(f"rewrote {page.relative_to(ROOT)}")


def emit_json(blob: dict, path: str | None = None, *, echo: bool = True) -> None:
    """Print ``blob`` as a fenced JSON block (``echo``) and write it to ``path`` when given.

    Values JSON does not know (paths, numpy scalars) are written as their ``str``.
    """
    text = json.dumps(blob, indent=1, default=str)
    if echo:
        print()
        print("```json")
        print(text)
        print("```")
    if path:
        with open(path, "w") as fh:
            fh.write(text + "\n")


def machine_info(threads: int | None = None, extra: tuple = (), isa: bool = False) -> dict:
    """What the timings were taken on: CPU model (``/proc/cpuinfo``), CPUs, memory, load, versions.

    ``threads`` is the torch thread count the benchmark asked for (recorded as given); ``extra``: more
    ``(key, distribution)`` pairs whose installed versions are recorded (``("onnxruntime",
    "onnxruntime")``); ``isa``: also :func:`instruction_sets` (imports torch). The load average
    at the start is recorded because the timings are only meaningful on an otherwise idle machine.
    """
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 2**20, 1)
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    info = {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "memory_gib": mem_gib,
        "load_average_1_5_15": load,
        "threads": threads,
        "python": platform.python_version(),
    }
    from importlib import metadata

    for mod, dist in (("torch", "torch"), ("numpy", "numpy"), ("sklearn", "scikit-learn"), *extra):
        try:  # the installed version, without importing the package (scikit-learn takes seconds)
            info[mod] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    if isa:
        info.update(instruction_sets())
    return info


#: environment variables that restrict the instruction set of torch's own kernels, of MKL (torch's
#: matrix products on x86) and of oneDNN
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def instruction_sets() -> dict:
    """What vector instructions the timings used: the CPU's vector flags (``/proc/cpuinfo``), the
    instruction set torch's CPU kernels dispatch to (``torch.backends.cpu.get_cpu_capability()``), and
    the :data:`ISA_VARIABLES` set in the environment. ONNX Runtime's kernels (MLAS) choose theirs from
    the CPU's flags when the library loads; no runtime setting restricts them."""
    import os

    import torch

    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return {
        "cpu_vector_flags": sorted(f for f in flags if f.startswith(("avx", "amx", "fma"))),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "isa_environment": {k: os.environ[k] for k in ISA_VARIABLES if k in os.environ},
    }


def machine_line(info: dict) -> str:
    """One line for the top of a benchmark's output (from :func:`machine_info`)."""
    parts = [f"machine: {info['cpu']}", f"{info['usable_cpus']} of {info['logical_cpus']} CPUs usable"]
    if info.get("memory_gib") is not None:
        parts.append(f"{info['memory_gib']} GiB")
    if info.get("load_average_1_5_15") is not None:
        parts.append("load average " + " ".join(f"{x:.2f}" for x in info["load_average_1_5_15"]))
    if info.get("threads") is not None:
        parts.append(f"torch threads {info['threads']}")
    if info.get("gpu"):
        parts.append(f"GPU {info['gpu']} ({info['gpu_memory_gib']} GiB, CUDA {info['cuda']})")
    if info.get("torch_cpu_capability"):
        restricted = ", ".join(f"{k}={v}" for k, v in info["isa_environment"].items())
        kernels = f"torch CPU kernels {info['torch_cpu_capability']}"
        parts.append(kernels + (f" ({restricted})" if restricted else ""))
    versions = [f"Python {info['python']}"] + [
        f"{m} {info[m]}" for m in ("torch", "numpy", "sklearn", *VERSIONS_SHOWN) if m in info
    ]
    return "; ".join(parts) + "; " + ", ".join(versions)


#: the versions of :func:`machine_info`'s ``extra`` packages that :func:`machine_line` shows
VERSIONS_SHOWN = ("onnxruntime", "lightgbm", "ray", "fastapi", "uvicorn")


def markdown_table(header: list[str], rows: list[list], align: str | None = None) -> str:
    """A Markdown table; ``align`` is one character per column, ``l`` or ``r`` (default: first left)."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
