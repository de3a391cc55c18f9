"""The public API: every re-exported name resolves, no two public classes share a name, and importing
ctxrank stays light."""

import importlib
import pkgutil
import subprocess
import sys

import pytest

import ctxrank
import ctxrank.data
import ctxrank.serving


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
