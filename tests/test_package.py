"""The public API: every re-exported name resolves, and importing ctxrank stays light."""

import subprocess
import sys

import pytest

import ctxrank
import ctxrank.data


@pytest.mark.parametrize("module", [ctxrank, ctxrank.data])
def test_every_export_resolves(module):
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


def test_import_does_not_pull_torch():
    code = "import sys, ctxrank, ctxrank.cli; print('torch' in sys.modules, 'lightgbm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
