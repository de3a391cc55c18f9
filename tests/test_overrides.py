"""ctxrank._overrides: typed ``(dotted key, value)`` overrides; text is parsed once, at the command line."""

import pytest

from ctxrank import _overrides
from ctxrank.cli import main
from ctxrank.config import apply_overrides
from ctxrank.data.synth import write_synthetic_letor


def test_parse_and_set():
    assert _overrides.parse_override(" train.lr = 3e-4") == ("train.lr", 3e-4)
    assert _overrides.parse_override("loss=listmle") == ("loss", "listmle")  # a bare string
    assert _overrides.parse_override("models.x={}") == ("models.x", {})
    assert _overrides.parse_override("a.b=[64, 64]") == ("a.b", [64, 64])
    with pytest.raises(ValueError, match="expects key=value"):
        _overrides.parse_override("train.lr")
    d = {"train": {"lr": 1.0}}
    out = apply_overrides(d, [("train.lr", 0.5), ("model_params.hidden", (8, 8)), "loss=listmle"])
    assert out == {"train": {"lr": 0.5}, "model_params": {"hidden": [8, 8]}, "loss": "listmle"}
    assert d == {"train": {"lr": 1.0}}  # a copy
    with pytest.raises(ValueError, match=r"'train\.lr' is not a section"):
        apply_overrides(d, [("train.lr.x", 1)])


def _count_parses(monkeypatch):
    calls = []
    real = _overrides.parse_override

    def counting(text):
        calls.append(text)
        return real(text)

    import sys

    for module in list(sys.modules.values()):  # every module that imported the parser by name
        if getattr(module, "parse_override", None) is real:
            monkeypatch.setattr(module, "parse_override", counting)
    return calls


def test_flags_and_protocol_values_travel_typed_never_as_text(tmp_path, monkeypatch, capsys):
    """``--model`` became the text "model=qilcm" parsed back as TOML, ``--threads`` "runs.threads=1":
    now the only text parsed is what the user typed after ``--set`` (once each)."""
    import importlib

    for name in ("ctxrank.cli.train", "ctxrank.cli.experiment"):  # so that their names are patched too
        importlib.import_module(name)
    data = tmp_path / "d.txt"
    write_synthetic_letor(data, n_queries=30, list_size=8, n_features=4, seed=0)
    calls = _count_parses(monkeypatch)
    argv = ["train", "--model", "mlp", "--data", str(data), "--seed", "3", "--threads", "1", "--no-progress"]
    assert main([*argv, "--initial", "lambdamart", "--top-k", "5", "--set", "train.max_epochs=1",
                 "--out", str(tmp_path / "m")]) == 0  # fmt: skip
    assert calls == ["train.max_epochs=1"]
    spec = tmp_path / "s.toml"
    spec.write_text(
        f'name = "s"\n[data]\nfile = "{data}"\n[runs]\ncount = 1\n[protocol]\ninitial = "lambdamart"\n'
        '[models.lambdamart]\nmodel = "lambdamart"\n[models.mlp]\nmodel = "mlp"\ntrain = { max_epochs = 1 }\n'
    )
    calls.clear()
    argv = ["experiment", str(spec), "--out", str(tmp_path / "e"), "--runs", "1", "--threads", "1"]
    assert main([*argv, "--set", "report.test=\"queries\"", "--no-progress"]) == 0
    assert calls == ['report.test="queries"']
