"""The shape of the code: no function in src/ctxrank longer than 80 code lines.

A function's length counts every line from its ``def`` to its last line (signature, body, blank and
comment lines, nested functions), minus the lines of its docstring. Methods and nested functions are
checked too, each on its own. A longer function should be split into named steps that read top to
bottom (see ``data/letor.py``'s ``_parse`` or ``metrics.evaluate_queries``).

Why not ruff's PLR0915 (too-many-statements): statement counts do not follow length here.
``AdaRank._fit`` has 64 code lines and 55 statements, ``LambdaMART.fit`` 86 lines and 55 statements,
``chamfer_confusion`` 94 lines and 54: any ``max-statements`` that flags the two long ones also flags
``AdaRank._fit``, and 55, the smallest that today's short functions satisfy, flags nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .conftest import REPO

SRC = REPO / "src" / "ctxrank"
MAX_CODE_LINES = 80


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the end of the function, minus its docstring's lines."""
    assert node.end_lineno is not None
    total = node.end_lineno - node.lineno + 1
    first = node.body[0] if node.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
        and first.end_lineno is not None
    ):
        total -= first.end_lineno - first.lineno + 1
    return total


def function_lengths(root: Path, base: Path = REPO) -> list[tuple[str, int]]:
    """``("path:line qualified.name", code lines)`` for every function and method below ``root``
    (paths relative to ``base``)."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str, path: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append((f"{path}:{child.lineno} {name}", code_lines(child)))
                visit(child, f"{name}.", path)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", path)
            else:
                visit(child, prefix, path)

    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(base).as_posix()
        visit(ast.parse(file.read_text(encoding="utf-8"), filename=rel), "", rel)
    return found


def test_no_function_over_80_code_lines():
    too_long = [(where, n) for where, n in function_lengths(SRC) if n > MAX_CODE_LINES]
    listing = "\n".join(f"  {where}: {n} code lines" for where, n in sorted(too_long, key=lambda x: -x[1]))
    assert not too_long, (
        f"{len(too_long)} function(s) in src/ctxrank over {MAX_CODE_LINES} code lines (def to end, "
        f"docstring excluded); split them into named steps:\n{listing}"
    )


COUNTED = '''
def short(x):
    """One line of docs.

    And more.
    """
    # a comment counts

    return x


class K:
    @staticmethod
    def method():
        def inner():
            return 1

        return inner()
'''


def test_counting_rule(tmp_path):
    (tmp_path / "m.py").write_text(COUNTED)
    lengths = {where: n for where, n in function_lengths(tmp_path, base=tmp_path)}
    # short: def, comment, blank, return (the 4-line docstring is not counted); decorators are not
    # counted either (the count starts at ``def``); a nested function counts in its parent too
    assert lengths == {"m.py:2 short": 4, "m.py:14 K.method": 5, "m.py:15 K.method.inner": 2}


# ------------------------------------------------------------------------ comments explain the code
#: where the code, the tests and the docs live (CHANGELOG.md keeps the project's history, SECURITY.md
#: its guarantees: neither is checked)
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
