"""The public API: every re-exported name resolves, no two public classes share a name, and importing
ctxrank stays light; the built distribution (``make dist``) holds every file of the package and runs
from a fresh environment."""

import importlib
import math
import os
import pkgutil
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import ctxrank
import ctxrank.data
import ctxrank.serving
from tests.conftest import REPO


@pytest.mark.parametrize("module", [ctxrank, ctxrank.data, ctxrank.serving])
def test_every_export_resolves(module):
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


def test_importing_an_estimator_loads_neither_pandas_nor_pyarrow_nor_lightgbm():
    """``from ctxrank import QILCMRanker`` loads what the model needs (torch, scikit-learn): pandas and
    pyarrow only when a DataFrame or a table is used, LightGBM only for LambdaMART. scikit-learn itself
    imports pandas where it is installed (1.9: ``sklearn.utils.fixes``), so the child makes pandas and
    pyarrow unimportable (as where they are not installed): the import must not need them."""
    code = (
        "import sys\n"
        "sys.modules.update(pandas=None, pyarrow=None)\n"
        "from ctxrank import QILCMRanker\n"
        "print(*(m for m in ('torch', 'sklearn', 'lightgbm', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["torch", "sklearn"]


def test_import_does_not_pull_torch():
    code = (
        "import sys, ctxrank, ctxrank.cli, ctxrank.serving; "
        "print(*(m in sys.modules for m in ('torch', 'lightgbm', 'fastapi', 'onnxruntime')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False", "False"]


def _public_classes() -> dict[str, set[str]]:
    """Class name -> where a public class of that name is defined (``module.qualname``), over every
    module of the package (``__main__`` runs the CLI, so it is left out)."""
    found: dict[str, set[str]] = {}
    for info in pkgutil.walk_packages(ctxrank.__path__, "ctxrank."):
        if info.name == "ctxrank.__main__":
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, type) and not name.startswith("_") and obj.__module__ == info.name:
                found.setdefault(obj.__name__, set()).add(f"{obj.__module__}.{obj.__qualname__}")
    return found


def test_no_two_public_classes_share_a_name():
    """``Ranker`` was both the neural models' base (now ``RankingModule``) and the estimator."""
    classes = _public_classes()
    assert classes["Ranker"] == {"ctxrank.api.estimators.Ranker"}
    assert classes["RankingModule"] == {"ctxrank.models.base.RankingModule"}
    assert "QILCMRanker" in classes  # the estimators made with type() are seen too
    shared = {name: sorted(where) for name, where in classes.items() if len(where) > 1}
    assert not shared, f"public classes sharing a name: {shared}"


# ------------------------------------------------------------------------------ the distribution
@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist and the wheel ``make dist`` builds (``python -m build``: the wheel is built from the
    sdist), from a copy of the source tree, with the installed setuptools (offline)."""
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, tree / name)
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tree / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(tree)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("ctxrank-*-py3-none-any.whl")
    return wheel


@pytest.mark.slow
def test_the_wheel_holds_every_file_of_the_package(dist):
    """Package data included: the embedded datasets, the shipped experiment specs, their READMEs."""
    src = REPO / "src"
    files = {
        p.relative_to(src).as_posix()
        for p in (src / "ctxrank").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    with zipfile.ZipFile(_wheel(dist)) as zf:
        shipped = {n for n in zf.namelist() if n.startswith("ctxrank/")}
    assert {"ctxrank/datasets/mq2008/S1.txt.gz", "ctxrank/experiments/configs/demo.toml"} <= files
    assert files - shipped == set(), f"files of src/ctxrank missing from the wheel: {sorted(files - shipped)}"
    assert shipped - files == set(), f"files in the wheel that src/ctxrank lacks: {sorted(shipped - files)}"
    from ctxrank._version import __version__

    assert _wheel(dist).name == f"ctxrank-{__version__}-py3-none-any.whl"
    assert (dist / f"ctxrank-{__version__}.tar.gz").is_file()


@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_environment_trains_and_predicts(dist, tmp_path):
    """The wheel alone (no source tree on the path) in a new virtual environment whose site-packages
    sees this environment's packages (torch, LightGBM, ...: a ``.pth`` line, so nothing is downloaded
    and this environment's own ctxrank is not seen): ``ctxrank --version``, then ``train`` and
    ``predict`` on the embedded MQ2008 (package data read from the installed package)."""
    from ctxrank import load_fold
    from ctxrank._version import __version__

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    outer = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    Path(site, "outer_packages.pth").write_text("".join(f"{p}\n" for p in outer))
    # no PYTHONPATH for pip either: a source tree on it (its egg-info) would make the wheel "already
    # satisfied" and leave the new environment without ctxrank
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         "--no-index", str(_wheel(dist))],
        check=True, env=env,
    )  # fmt: skip

    def run(*argv: str) -> str:
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout

    where = run(str(python), "-c", "import ctxrank; print(ctxrank.__file__)")
    assert Path(where.strip()).is_relative_to(site), where
    cli = str(venv / "bin" / "ctxrank")
    assert run(cli, "--version").strip() == f"ctxrank {__version__}"
    common = ["--dataset", "mq2008", "--threads", "1"]
    trees = ["--set", "model_params.n_estimators=2"]
    run(cli, "train", "--model", "lambdamart", *common, *trees, "--out", "model")
    run(cli, "predict", "--model", "model", *common, "--output", "scores.txt")
    scores = [float(line) for line in (tmp_path / "scores.txt").read_text().split()]
    assert len(scores) == load_fold("mq2008", 1).test.n_items  # fold 1's test split, every row
    assert all(math.isfinite(s) for s in scores) and len(set(scores)) > 1
