"""Published tables: blocks of README.md and docs/*.md regenerated from stored evidence.

A page states an experiment's numbers only inside a marked block::

    <!-- evidence: demo -->
    | model | ndcg@1 | ... |            (the headline table of the report's table.md, verbatim)
    ...
    <!-- /evidence -->

or another table of the report: ``<!-- evidence: NAME#baselines -->`` (the target against each other
model, corrected p) or ``<!-- evidence: NAME#anomaly -->`` (QILCM's Figure 2: the per-query gap by
anomaly bucket). ``NAME`` is the directory ``evidence/NAME`` of the repository.
:func:`published_blocks` finds the blocks, :func:`headline` cuts the table (by default the headline:
means, the target's improvement, corrected p and CI) out of a regenerated ``table.md``, and
``python -m ctxrank.experiments.published [--check]`` rewrites (or checks) every block;
``tests/test_evidence.py`` fails on any difference.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from ctxrank.experiments.evidence import rebuild_report

__all__ = ["Block", "headline", "published_blocks", "regenerate", "report_table"]

#: the first line of each kind of table a block can publish (``NAME`` or ``NAME#KIND``)
TABLE_HEADS = {"": "| model |", "anomaly": "| bucket |", "baselines": "| baseline |"}
_KINDS = "|".join(f"#{kind}" for kind in TABLE_HEADS if kind)
_BLOCK = re.compile(rf"<!-- evidence: ([A-Za-z0-9_.+-]+(?:{_KINDS})?) -->\n(.*?)<!-- /evidence -->", re.S)


class Block:
    """One marked block: the page, the evidence name, the text between the markers."""

    def __init__(self, page: Path, name: str, text: str) -> None:
        self.page, self.name, self.text = page, name, text

    @property
    def directory(self) -> str:
        """The evidence directory's name: ``NAME`` of ``NAME`` or ``NAME#KIND``."""
        return self.name.partition("#")[0]


def published_blocks(root: Path) -> list[Block]:
    """Every evidence block of ``root``'s README.md and docs/*.md, in page order."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    found = [(p, m) for p in pages if p.is_file() for m in _BLOCK.finditer(p.read_text())]
    return [Block(p, m.group(1), m.group(2)) for p, m in found]


def headline(table_md: str, head: str = TABLE_HEADS[""]) -> str:
    """A table of a report's ``table.md`` with its caption: the lines from the one starting with
    ``head`` (default: the headline table of means, the target's improvement, corrected p and CI) to
    the first blank line after it, and the paragraph before it (the test and what its p-value means;
    for the anomaly table, its unit and method)."""
    lines = table_md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    first = start - 1
    while first > 0 and lines[first - 1].strip():
        first -= 1
    return "\n".join([*lines[first : start - 1], "", *lines[start:end]]) + "\n"


def report_table(root: Path, directory: str) -> str:
    """``table.md`` of ``evidence/DIRECTORY``'s report, regenerated (nothing is trained)."""
    with tempfile.TemporaryDirectory(prefix="ctxrank-published-") as tmp:
        rebuild_report(root / "evidence" / directory, tmp)
        return (Path(tmp) / "table.md").read_text()


def regenerate(root: Path, name: str, table_md: str | None = None) -> str:
    """The table ``name`` (``NAME`` or ``NAME#KIND``) publishes from ``evidence/NAME``'s report
    (``table_md``: that report's ``table.md`` when already regenerated)."""
    directory, _, kind = name.partition("#")
    return headline(report_table(root, directory) if table_md is None else table_md, TABLE_HEADS[kind])


def _marked(name: str, text: str) -> str:
    return f"<!-- evidence: {name} -->\n{text}<!-- /evidence -->"


def main(argv: list[str] | None = None) -> int:
    """Rewrite every evidence block of the repository (``--check``: exit 1 if any is stale)."""
    argv = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parents[3]
    stale = []
    tables: dict[str, str] = {}  # one report a directory, whatever number of its tables a page shows
    for block in published_blocks(root):
        if block.directory not in tables:
            tables[block.directory] = report_table(root, block.directory)
        fresh = regenerate(root, block.name, tables[block.directory])
        if fresh != block.text:
            stale.append(f"{block.page.relative_to(root)}: evidence {block.name}")
            if "--check" not in argv:
                old, new = _marked(block.name, block.text), _marked(block.name, fresh)
                block.page.write_text(block.page.read_text().replace(old, new))
    for line in stale:
        print(("stale: " if "--check" in argv else "rewrote: ") + line)
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    raise SystemExit(main())
