"""The import graph of ``src/ctxrank``: no cycles, between modules or between packages, and every
import goes down the layering; imports inside functions only for a listed reason (``DEFERRED``).

Every import statement is read with ``ast`` (module level, inside functions, under ``TYPE_CHECKING``,
relative ones too), so a deferred import cannot hide a cycle. Layering, top to bottom (see
docs/architecture.md): cli -> api / experiments / tune / tracking / export / serving -> training ->
config -> registry -> models, losses, arsm, baselines -> data, metrics -> _io, _checks, _version.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "ctxrank"

# (layer, module-name prefixes), top layer first; a module may import its own layer or lower ones
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("cli", ("ctxrank.cli", "ctxrank.__main__")),
    (
        "applications",
        (
            "ctxrank.api",
            "ctxrank.experiments",
            "ctxrank.tune",
            "ctxrank.tracking",
            "ctxrank.export",
            "ctxrank.serving",
        ),
    ),
    ("training", ("ctxrank.training",)),
    ("config", ("ctxrank.config",)),
    ("registry", ("ctxrank.registry",)),
    ("models", ("ctxrank.models", "ctxrank.losses", "ctxrank.arsm", "ctxrank.baselines", "ctxrank.clicks")),
    ("data", ("ctxrank.data", "ctxrank.metrics", "ctxrank.evaluation")),
    (
        "base",
        (
            "ctxrank._allocator",
            "ctxrank._io",
            "ctxrank._checks",
            "ctxrank._declare",
            "ctxrank._lazy",
            "ctxrank._memory",
            "ctxrank._modeldir",
            "ctxrank._overrides",
            "ctxrank._propensity",
            "ctxrank._version",
            "ctxrank.fit_summary",
        ),
    ),
]
PACKAGE_ROOT = "ctxrank"  # the lazy facade for users: imports only _lazy and _version, imported by no module


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ``name`` (a module, or an attribute of one); None outside ctxrank."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> dict[str, int]:
    """ctxrank modules imported anywhere in ``module`` -> first line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(name: str, line: int) -> None:
        target = _resolve(name)
        if target is not None and target != module:
            found.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "ctxrank" or alias.name.startswith("ctxrank."):
                    add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not (source == "ctxrank" or source.startswith("ctxrank.")):
                continue
            for alias in node.names:  # ``from pkg import submodule`` imports the submodule
                full = f"{source}.{alias.name}"
                add(full if full in MODULES else source, node.lineno)
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _layer(module: str) -> int | None:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") or module.startswith(p + "_") for p in prefixes):
            return i
    return None


def _package(module: str) -> str:
    """The top-level unit of ``module``: ``ctxrank.training.run`` -> ``ctxrank.training``."""
    return ".".join(module.split(".")[:2])


def _package_graph(graph: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """``graph`` with each module replaced by its package (imports inside one package dropped)."""
    out: dict[str, dict[str, int]] = {_package(m): {} for m in graph}
    for module, targets in graph.items():
        for target in targets:
            if _package(target) != _package(module) and PACKAGE_ROOT not in (module, target):
                out[_package(module)].setdefault(_package(target), 0)
    return out


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of ``graph`` with more than one node (Tarjan), each as one cycle
    through its nodes found by a walk inside the component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_a_cycle(graph, comp) for comp in components]


def _a_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A closed walk ``a -> b -> ... -> a`` inside one strongly connected component."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in members)
        back = [w for w in nxt if w in seen]
        if back:
            return [*path[path.index(back[0]) :], back[0]]
        path.append(nxt[0])
        seen.add(nxt[0])


def _edge(a: str, b: str) -> str:
    return f"{a} -> {b} ({MODULES[a].relative_to(SRC)}:{GRAPH[a][b]})"


def test_the_scan_sees_deferred_and_relative_imports():
    # checkpoint imports the table reader inside a function; ``from ctxrank import tune`` (in a
    # function of cli/tune.py) is an import of the submodule
    assert "ctxrank.data.table" in GRAPH["ctxrank.training.checkpoint"]
    assert "ctxrank.tune" in GRAPH["ctxrank.cli.tune"]
    # ``from ctxrank.baselines import _linear as lin`` is an import of the submodule
    assert "ctxrank.baselines._linear" in GRAPH["ctxrank.baselines.adarank"]


def test_the_propensity_arithmetic_is_one_module_below_baselines_and_clicks():
    # LambdaMART's IPS weights and ctxrank.clicks compute the curve, the cap and the weights in one place
    for user in (
        "ctxrank.baselines.lambdamart",
        "ctxrank.clicks.weighting",
        "ctxrank.clicks.propensity",
        "ctxrank.clicks.click_models",
    ):
        assert "ctxrank._propensity" in GRAPH[user], user


def test_no_command_module_imports_another_command():
    """A command adapts its flags to a request of the layers below (``tune`` takes the training request
    from ``ctxrank.training.request``, not from the ``train`` command)."""
    from ctxrank.cli import COMMANDS

    commands = {f"ctxrank.cli.{c.module}" for c in COMMANDS.values()}
    assert {m: sorted(commands & set(GRAPH[m]) - {m}) for m in commands} == {m: [] for m in commands}


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    text = "\n".join(
        " -> ".join(c) + "\n    " + "\n    ".join(_edge(a, b) for a, b in itertools.pairwise(c))
        for c in cycles
    )
    assert not cycles, f"import cycles in src/ctxrank:\n{text}"


def test_no_import_cycles_between_packages():
    """A module beside a package that imports the package and is imported by it runs back up the
    layers even where no module cycle exists (``checkpoint.py`` imported ``training.predict`` and
    ``training/run.py`` imported it): the graph of packages and top-level modules has no cycle."""
    cycles = _cycles(_package_graph(GRAPH))
    text = "\n".join(
        " -> ".join(c)
        + "".join(
            f"\n    {_edge(a, b)}"
            for pa, pb in itertools.pairwise(c)
            for a in sorted(GRAPH)
            if _package(a) == pa
            for b in GRAPH[a]
            if _package(b) == pb
        )
        for c in cycles
    )
    assert not cycles, f"import cycles between packages of src/ctxrank:\n{text}"


def test_the_package_cycle_check_sees_the_old_checkpoint_edge():
    old = {
        "ctxrank.checkpoint": {"ctxrank.training.predict": 56},
        "ctxrank.training.predict": {},
        "ctxrank.training.run": {"ctxrank.checkpoint": 50},
    }
    assert _cycles(_package_graph(old)) == [["ctxrank.checkpoint", "ctxrank.training", "ctxrank.checkpoint"]]
    assert _layer("ctxrank.checkpoint") is None  # and a top-level checkpoint.py would have no layer


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if m != PACKAGE_ROOT and _layer(m) is None)
    assert not missing, f"add these modules to a layer of tests/test_imports.py LAYERS: {missing}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != PACKAGE_ROOT))
def test_imports_go_down_the_layering(module):
    here = _layer(module)
    if here is None:
        pytest.skip("unclassified (see test_every_module_has_a_layer)")
    upward = [
        f"{_edge(module, target)}: {LAYERS[here][0]} imports {LAYERS[_layer(target)][0]}"
        for target in GRAPH[module]
        if target != PACKAGE_ROOT and _layer(target) is not None and _layer(target) < here
    ]
    assert not upward, "imports upward:\n" + "\n".join(upward)


def test_the_library_never_imports_the_cli():
    cli = _layer("ctxrank.cli")
    offenders = [
        _edge(m, t)
        for m in sorted(GRAPH)
        if _layer(m) != cli
        for t in GRAPH[m]
        if t != PACKAGE_ROOT and _layer(t) == cli
    ]
    assert not offenders, "library modules import the CLI:\n" + "\n".join(offenders)


def test_the_package_root_imports_only_the_lazy_loader_and_the_version():
    assert set(GRAPH[PACKAGE_ROOT]) <= {"ctxrank._lazy", "ctxrank._version"}


def test_no_module_imports_the_package_root():
    """The root is the users' facade: a module reads the version from ``_version.py`` and a name from
    the module that defines it, so its imports stay in the layer graph."""
    offenders = sorted(_edge(m, PACKAGE_ROOT) for m in GRAPH if PACKAGE_ROOT in GRAPH[m])
    assert not offenders, "modules import the package root:\n" + "\n".join(offenders)


# ------------------------------------------------------------------------ imports inside functions
# The library imports at module level (the CLI imports a command's module only when it runs). An import
# stays inside a function only for one of these reasons; none is needed to break a cycle.
OPTIONAL = (
    "an optional extra of pyproject.toml (ctxrank.tune needs optuna, evaluate --run ir-measures): the module "
    "works without it"
)
FRAMES = (
    "public API: pandas / pyarrow load when a DataFrame or a table is used, not with the estimators, "
    "RankingData or the model loader (tests/test_package.py)"
)
LIGHTGBM = "public API: LightGBM loads to fit, save or load LambdaMART, not with the registry that lists it"
SKLEARN = "public API: scikit-learn loads to fit or save RankSVM, not with the registry that lists it"
TORCH_FREE = (
    "serving an ONNX file needs onnxruntime, not torch: the model-directory ranker (torch, LightGBM) loads "
    "only to serve a directory"
)
ESTIMATORS = (
    "the click-log estimators (SciPy, scikit-learn) load when a validation split is a log, not with the "
    "training loop that every run imports"
)
FIGURES = "matplotlib (slow to import; Agg chosen as pyplot's backend) loads when a figure is drawn"

#: (file under src/ctxrank, imported package or ctxrank module) -> why it is imported inside a function
DEFERRED: dict[tuple[str, str], str] = {
    ("api/_inputs.py", "pandas"): FRAMES,
    ("api/estimators.py", "ctxrank.data.table"): FRAMES,
    ("data/categorical.py", "pandas"): FRAMES,
    ("data/choice.py", "pandas"): FRAMES,
    ("data/ranking_data.py", "pandas"): FRAMES,
    ("data/stream.py", "pandas"): FRAMES,  # the training loop names ShardStream
    ("data/stream.py", "pyarrow"): FRAMES,
    ("training/checkpoint.py", "ctxrank.data.table"): FRAMES,
    ("baselines/lambdamart.py", "lightgbm"): LIGHTGBM,
    ("_memory.py", "torch"): "torch (seconds to import) only for a CUDA device's free memory: the CPU's "
    "figure is read from the system, and `ctxrank synth`, which checks it, imports no torch",
    ("baselines/ranksvm.py", "sklearn"): SKLEARN,
    ("clicks/validation.py", "ctxrank.clicks.offline"): ESTIMATORS,
    ("clicks/validation.py", "ctxrank.clicks.propensity"): ESTIMATORS,
    ("training/run.py", "ctxrank.clicks.estimate"): "the click-log estimators (SciPy, scikit-learn) load "
    "when a run estimates its propensities from its training log (train.propensity = 'estimate:...')",
    ("config.py", "ctxrank.clicks.propensity"): "public API: a propensities file (train.propensity) is read "
    "by its estimators' module (SciPy, scikit-learn), loaded only when a run config names one",
    ("cli/__init__.py", "ctxrank.data.sources"): "the data options' flags, read only to write a library "
    "error that names them: `ctxrank --help` and `--version` import no command module (NumPy)",
    ("cli/__init__.py", "ctxrank.tracking"): "the tracker option's flag, read only to write a library error "
    "that names it",
    ("cli/__init__.py", "ctxrank.data.download"): "the download options' flags, read only to write a "
    "library error that names one",
    ("cli/__init__.py", "ctxrank.data.synth"): "the synthetic lists' flags, read only to write a library "
    "error that names one",
    ("cli/__init__.py", "ctxrank.config"): "the run options' flags, read only to write a library error "
    "that names one the data options do not declare",
    ("cli/__init__.py", "ctxrank.training.request"): "the training request's own flags (--config, --set), "
    "read only to write a library error that names one",
    ("cli/__init__.py", "ctxrank.experiments.executors"): "the executor options' flags (torch), read only "
    "to write a library error that names one",
    ("cli/_options.py", "ctxrank.experiments.executors"): "the executor options' declarations (torch), read "
    "by the commands that run experiments or studies only",
    ("cli/__init__.py", "ctxrank.experiments.evidence"): "the experiment's paths' flags (pandas, pyarrow), "
    "read only to write a library error that names one",
    ("cli/__init__.py", "ctxrank.serving.server"): "the serve options' flags (the serve extra), read only "
    "to write a library error that names one no other declared class has",
    ("cli/clicks.py", "ctxrank.experiments.provenance"): "the coverage record's provenance (git commit, "
    "versions; torch for the CPU's instruction set), read by `clicks coverage` only: `clicks propensity` and "
    "`clicks offline --scores` import no torch",
    ("cli/tune.py", "ctxrank.tune"): OPTIONAL,
    ("cli/evaluate.py", "ir_measures"): OPTIONAL,
    ("experiments/executors.py", "ctxrank.tune"): OPTIONAL,
    ("experiments/executors.py", "optuna"): OPTIONAL,
    ("experiments/executors.py", "ray"): OPTIONAL,
    ("experiments/runner.py", "ctxrank.tune"): OPTIONAL,
    ("export/pipeline.py", "onnx"): OPTIONAL,  # the export extra
    ("experiments/report.py", "matplotlib"): FIGURES,
    ("serving/server.py", "ctxrank.serving.directory"): TORCH_FREE,
    ("cli/_scoring.py", "ctxrank.training.checkpoint"): TORCH_FREE,  # predict --model FILE.onnx: no torch
    ("cli/_scoring.py", "ctxrank.training.predict"): TORCH_FREE,
    ("cli/_scoring.py", "ctxrank.serving.onnx_ranker"): OPTIONAL,  # onnxruntime: the serve / export extra
    ("serving/batch.py", "ray"): OPTIONAL,  # the ray extra
    ("cli/predict.py", "ctxrank.serving.batch"): OPTIONAL,  # predict --shards: ray and onnxruntime
    ("serving/batch.py", "pyarrow"): FRAMES,  # a shard is read by the Ray worker that scores it
    ("data/stream.py", "ctxrank.data.lists"): TORCH_FREE,  # data/sources.py (every CLI's options) imports it
    ("training/curves.py", "matplotlib"): FIGURES,
    ("tune.py", "matplotlib"): FIGURES,
    ("tune.py", "optuna"): FIGURES,  # optuna.visualization.matplotlib (optuna itself: module level)
    ("tracking.py", "mlflow"): OPTIONAL,
    ("tracking.py", "torch"): OPTIONAL,  # torch.utils.tensorboard, which needs the tensorboard package
}


def _function_level_imports() -> dict[tuple[str, str], list[int]]:
    """(file, imported package or ctxrank module) -> lines, for every import inside a function."""
    found: dict[tuple[str, str], list[int]] = {}

    def names(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        assert not node.level, "no relative imports in src/ctxrank"
        source = node.module or ""
        return [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]

    for path in sorted(ROOT.rglob("*.py")):
        functions = [
            n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]  # fmt: skip
        for node in {n for f in functions for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)}:
            for name in names(node):
                key = _resolve(name) if name.split(".")[0] == "ctxrank" else name.split(".")[0]
                found.setdefault((path.relative_to(ROOT).as_posix(), key), []).append(node.lineno)
    return {k: sorted(set(v)) for k, v in found.items()}


def test_every_import_inside_a_function_has_a_listed_reason():
    found = _function_level_imports()
    listing = "\n".join(
        f"  {f}:{','.join(map(str, lines))} {what}: {DEFERRED.get((f, what), 'NOT LISTED')}"
        for (f, what), lines in sorted(found.items())
    )
    unlisted = sorted(set(found) - set(DEFERRED))
    assert not unlisted, (
        f"imports inside functions without a reason: {unlisted}; import at module level, or add the "
        f"reason to DEFERRED (an optional extra, a cycle, a lazy public API). All of them:\n{listing}"
    )
    stale = sorted(set(DEFERRED) - set(found))
    assert not stale, f"DEFERRED lists imports that no function makes any more: {stale}"


# ------------------------------------------------------------------------------ docs/architecture.md
ARCHITECTURE = SRC.parent / "docs" / "architecture.md"
_PATH = re.compile(r"`([\w./-]+(?:\.py|\.md|/))`")


def _doc_layers() -> list[tuple[str, list[str], str]]:
    """(layer, its modules' paths, what lives there) of each row of the page's layer table."""
    rows = []
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[0] != "layer" and not cells[0].startswith("-"):
            rows.append((cells[0], re.findall(r"`([^`]+)`", cells[1]), cells[2]))
    return rows


def _module_of(path: str) -> str:
    """``cli/`` -> ``ctxrank.cli``, ``tune.py`` -> ``ctxrank.tune``."""
    return "ctxrank." + path.removesuffix("/").removesuffix(".py").replace("/", ".")


def test_the_architecture_page_states_the_enforced_layers():
    rows = _doc_layers()
    assert [name for name, _, _ in rows] == [name for name, _ in LAYERS]
    for (name, paths, _), (_, prefixes) in zip(rows, LAYERS, strict=True):
        assert {_module_of(p) for p in paths} == set(prefixes), f"layer {name}: {paths} != {prefixes}"


def test_every_file_the_architecture_page_names_exists():
    """A file in a layer's row is under one of the row's packages, ``src/ctxrank`` or the repository;
    anywhere else on the page, under the repository or ``src/ctxrank``."""
    lines = ARCHITECTURE.read_text(encoding="utf-8").splitlines()
    named = [
        (path, [SRC.parent, ROOT])
        for line in lines
        if not line.startswith("| ")
        for path in _PATH.findall(line)
    ]
    for _, paths, description in _doc_layers():
        bases = [ROOT / p for p in paths if p.endswith("/")] + [ROOT, SRC.parent]
        named += [(path, bases) for path in _PATH.findall(description)]
    missing = sorted({path for path, bases in named if not any((base / path).exists() for base in bases)})
    assert len(named) > 40 and not missing, f"docs/architecture.md names files that do not exist: {missing}"
