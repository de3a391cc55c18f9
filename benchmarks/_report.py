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


def stored_report(name: str, report_text) -> str:
    """A block's content: ``report_text`` of the stored run ``name`` of evidence/bench/, in a code fence."""
    blob = json.loads((EVIDENCE / name.strip()).read_text())
    return "```text\n" + report_text(blob) + "```\n"


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


def machine_info(threads: int | None = None) -> dict:
    """What the timings were taken on: CPU model (``/proc/cpuinfo``), CPUs, memory, load, versions.

    ``threads`` is the torch thread count the benchmark asked for (recorded as given). The load average
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

    for mod, dist in (("torch", "torch"), ("numpy", "numpy"), ("sklearn", "scikit-learn")):
        try:  # the installed version, without importing the package (scikit-learn takes seconds)
            info[mod] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return info


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
    versions = [f"Python {info['python']}"] + [
        f"{m} {info[m]}" for m in ("torch", "numpy", "sklearn") if m in info
    ]
    return "; ".join(parts) + "; " + ", ".join(versions)


def markdown_table(header: list[str], rows: list[list], align: str | None = None) -> str:
    """A Markdown table; ``align`` is one character per column, ``l`` or ``r`` (default: first left)."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
