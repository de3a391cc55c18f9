"""The shape of the code beyond what ruff checks: comments and docs say what the code does, not which
tracker issue asked for it.

How branched a function may be is ruff's McCabe check (``C901``, ``max-complexity`` in
pyproject.toml, for src/ctxrank): it counts the independent paths through a function, so a flat
function (an argument parser, a table of options) is not cut at a line count, and a function with many
branches is cut into named steps at its seams.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

# ------------------------------------------------------------------------ comments explain the code
#: where the code, the tests and the docs live (CHANGELOG.md keeps the project's history and SECURITY.md
#: its guarantees: neither is searched for tracker references; the tests SECURITY.md names are checked)
PROSE = ["src", "tests", "docs", "benchmarks", "README.md", "Makefile"]
#: a tracker reference: "issue" and a number (either case, plural too), or a number after "(#"
TRACKER_REFERENCE = re.compile(r"\b[Ii]ssues? \d+|\(#\d+\)")


def tracker_references(paths: list[Path], base: Path = REPO) -> list[str]:
    """``path:line text`` (path relative to ``base``) for every line of the text files under ``paths``
    that names an issue."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]
    found = []
    for file in files:
        if file.suffix not in {".py", ".md", ".toml", ".sh", ".txt", ""} or "__pycache__" in file.parts:
            continue
        for n, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if TRACKER_REFERENCE.search(line):
                found.append(f"{file.relative_to(base).as_posix()}:{n} {line.strip()}")
    return found


def test_no_issue_numbers_in_code_tests_or_docs():
    """A comment says what the code does and why; the tracker's history lives in CHANGELOG.md."""
    found = tracker_references([REPO / p for p in PROSE])
    assert not found, "issue numbers (say what the code does instead):\n" + "\n".join(found)


def test_a_tracker_reference_is_found(tmp_path):
    issue, number = "Issue", "30"  # written apart, so that this file holds no reference itself
    (tmp_path / "a.py").write_text(f"x = 1  # see {issue.lower()} {number}\n")
    (tmp_path / "b.md").write_text(f"Fixed (#{number}).\n{issue} numbers are not an {issue} text.\n")
    (tmp_path / "c.toml").write_text(f"# {issue}s {number} and 31\n")
    found = tracker_references([tmp_path], base=tmp_path)
    assert [f.split(" ", 1)[0] for f in found] == ["a.py:1", "b.md:1", "c.toml:1"]


def test_every_test_security_md_names_exists():
    """SECURITY.md states each guarantee with the tests that hold it: every ``tests/...py`` file and
    ``::test_name`` it names (a bare ``::name`` belongs to the file named before it) exists."""
    missing = []
    for line in (REPO / "SECURITY.md").read_text(encoding="utf-8").splitlines():
        current = None
        for m in re.finditer(r"`(tests/[\w/]+\.py)?(::\w+)?[^`]*`", line if line.startswith("|") else ""):
            path, name = m.group(1), m.group(2)
            current = path or current
            if path and not (REPO / path).is_file():
                missing.append(path)
            elif name and current and not re.search(rf"def {name[2:]}\b", (REPO / current).read_text()):
                missing.append(current + name)
    assert not missing, f"SECURITY.md names tests that do not exist: {missing}"
