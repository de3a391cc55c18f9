"""docs/models.md is generated from the code (``python -m ctxrank.api.models_doc``) and must be current."""

from ctxrank.api.models_doc import DOC_PATH, describe, main, render_models_md
from ctxrank.losses import LOSSES
from ctxrank.registry import MODELS


def test_models_md_is_current():
    assert DOC_PATH.read_text() == render_models_md(), (
        "docs/models.md is stale: run `PYTHONPATH=src python -m ctxrank.api.models_doc`"
    )
    assert main(["--check"]) == 0


def test_every_model_parameter_and_loss_is_documented():
    from ctxrank.api._params import param_spec

    text = render_models_md()
    for name in MODELS:
        assert f"## `{name}`" in text
        for key in param_spec(name).model:
            assert f"| `{key}` |" in text, (name, key)
    for name in LOSSES:
        assert f"### `{name}`" in text


def test_describe_reads_docstring_entries():
    doc = """Attributes:
        a, b: shared
            meaning.
        c: one.
    """
    assert describe(doc) == {"a": "shared meaning.", "b": "shared meaning.", "c": "one."}
