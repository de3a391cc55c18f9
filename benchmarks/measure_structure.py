"""The structural measures of the house: how many shapes one request has, how often code branches on
the kind of model, how often contracts are read by string key, and how big ``src`` is.

    python benchmarks/measure_structure.py [SRC]        # default: src/ctxrank

Each figure is a count over the source tree, read with ``ast`` (not regular expressions), so that
comments, docstrings and help strings do not count:

* ``declared``: places an option is declared: a dataclass field or a function parameter of that name
  with a default, a flag string (``"--top-k"``) given to ``option(...)`` or ``add_argument(...)``, or
  a ``.get("top_k", default)`` of a table;
* ``validated``: calls of a check or reader (``check_*``, ``parse_*``, ``meta_*``, ``_check``) that
  name the option in a string argument (``"rerank.top_k"``, ``"top_k"``);
* ``kind branches``: ``is_baseline(...)`` calls and ``isinstance`` tests against a model-kind class
  (the registry's entries, the predictors, the wrappers), outside ``registry.py``;
* ``key reads``: ``x["key"]`` / ``x.get("key")`` where ``x`` is named like a fit summary or re-rank
  settings (``summary``, ``fit_summary``, ``rerank``, ``rr``, ``meta_rerank``), outside functions
  named ``to_json`` / ``from_json`` / ``to_dict`` / ``from_dict`` (serialization);
* ``lines``: all lines and non-blank lines of ``*.py``.

It prints one JSON object; the closing note of a structural change states it before and after.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

OPTIONS = ("top_k", "threads", "null_fill", "model")
KIND_CLASSES = re.compile(
    r"^(Baseline|RankingModule|\w*Predictor|Residual|MissingIndicator|LambdaMART|RankSVM|AdaRank|"
    r"\w*Entry|LambdaMARTRanker|RerankPipeline)$"
)
CONTRACT_NAMES = re.compile(
    r"^(s|summary|fit_summary|\w+_summary|training|rerank|rr|meta_rerank|rerank_meta)$"
)
SERIALIZERS = {"to_json", "from_json", "to_dict", "from_dict", "to_record", "from_record"}


def _string_args(call: ast.Call) -> list[str]:
    return [a.value for a in [*call.args, *(k.value for k in call.keywords)]
            if isinstance(a, ast.Constant) and isinstance(a.value, str)]  # fmt: skip


def _func_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _names_option(text: str, name: str) -> bool:
    return re.search(rf"(^|[.\s\[]){name}($|[\s.\]:])", text) is not None


class _Counter(ast.NodeVisitor):
    def __init__(self) -> None:
        self.declared = {o: 0 for o in OPTIONS}
        self.validated = {o: 0 for o in OPTIONS}
        self.kind_branches = 0
        self.key_reads = 0
        self.where: dict[str, list[str]] = {"kind": [], "keys": []}
        self._func: list[str] = []
        self.file = ""
        self.is_registry = False

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        positional = args.args[len(args.args) - len(args.defaults) :]
        keyword = [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
        with_defaults = [*positional, *keyword]
        for a in with_defaults:
            if a.arg in OPTIONS and a.arg != "model":
                self.declared[a.arg] += 1
        self._func.append(node.name)
        self.generic_visit(node)
        self._func.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for stmt in node.body:
            field = isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
            if field and stmt.value is not None:
                name = stmt.target.id
                if name in OPTIONS and (name != "model" or "str" in ast.unparse(stmt.annotation)):
                    self.declared[name] += 1
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        fname = _func_name(node)
        strings = _string_args(node)
        for o in OPTIONS:
            flag = "--" + o.replace("_", "-")
            if fname in ("option", "add_argument", "Option") and flag in strings:
                self.declared[o] += 1
            if fname == "get" and node.args and strings[:1] == [o] and len(node.args) > 1:
                self.declared[o] += 1
            if re.match(r"^_?(check|parse|meta)\w*$", fname) and any(_names_option(s, o) for s in strings):
                self.validated[o] += 1
        if not self.is_registry:
            if fname == "is_baseline":
                self._kind(node)
            elif fname == "isinstance" and len(node.args) == 2:
                classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                names = [c.id if isinstance(c, ast.Name) else getattr(c, "attr", "") for c in classes]
                if any(KIND_CLASSES.match(n) for n in names):
                    self._kind(node)
        if fname == "get" and isinstance(node.func, ast.Attribute) and strings[:1]:
            self._key_read(node.func.value, node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if (
            isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
            and isinstance(node.ctx, ast.Load)
        ):
            self._key_read(node.value, node)
        self.generic_visit(node)

    def _kind(self, node: ast.AST) -> None:
        self.kind_branches += 1
        self.where["kind"].append(f"{self.file}:{node.lineno}")

    def _key_read(self, target: ast.AST, node: ast.AST) -> None:
        name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
        if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
            name = str(target.slice.value)  # meta["rerank"]["top_k"]
        if CONTRACT_NAMES.match(name) and not (set(self._func) & SERIALIZERS):
            self.key_reads += 1
            self.where["keys"].append(f"{self.file}:{node.lineno}")


def measure(src: Path) -> dict:
    counter = _Counter()
    lines = non_blank = 0
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        lines += text.count("\n")
        non_blank += sum(1 for line in text.splitlines() if line.strip())
        counter.file = str(path.relative_to(src))
        counter.is_registry = path.name == "registry.py" and path.parent == src
        counter.visit(ast.parse(text))
    return {
        "declared": counter.declared,
        "validated": counter.validated,
        "kind_branches_outside_registry": counter.kind_branches,
        "contract_key_reads": counter.key_reads,
        "lines": lines,
        "non_blank_lines": non_blank,
        "where": counter.where,
    }


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src" / "ctxrank"
    result = measure(root)
    verbose = "--where" in sys.argv
    print(json.dumps(result if verbose else {k: v for k, v in result.items() if k != "where"}, indent=1))
