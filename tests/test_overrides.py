"""ctxrank._overrides: typed ``(dotted key, value)`` overrides; text is parsed once, at the command line."""

import pytest

from ctxrank import _overrides
from ctxrank._checks import Field, OptionError
from ctxrank.cli import flag_text, main
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


def test_a_flag_and_a_set_of_the_same_key_are_refused_rather_than_one_dropped(tmp_path, capsys):
    """``--model qilcm --set model.width=8`` trained qilcm without a word about the --set (the flag,
    applied after it, replaced the table it made); ``--seed 3 --set train.seed=4`` dropped one seed."""
    flags = [("--model", "model", "qilcm"), ("--seed", "train.seed", 3)]
    expected = [("train.lr", 0.1), ("model", "qilcm"), ("train.seed", 3)]
    assert _overrides.with_flags(["train.lr=0.1"], flags) == expected
    for given, what in (
        ("model.width=8", "--model sets model and --set model.width sets a key inside it"),
        ("model=listnet", "--model sets model and --set model sets it"),
        ("train.seed=4", "--seed sets train.seed and --set train.seed sets it"),
        ("train={}", "--seed sets train.seed and --set train sets the table that holds it"),
    ):
        with pytest.raises(OptionError) as info:
            _overrides.with_flags([given], flags)
        assert flag_text(info.value.text) == f"{what}: give one of them"  # the command line's words
        assert str(info.value) == f"{what}: give one of them".replace("--set", "overrides")  # the API's
    # a key a flag implies (--dataset resets the spec's folds) yields to a --set of it
    implied = [("data.folds", [])]
    assert _overrides.with_flags(["data.folds=[1]"], [("--dataset", "data.dataset", "x")], implied) == [
        ("data.folds", []), ("data.folds", [1]), ("data.dataset", "x")
    ]  # fmt: skip
    # through the entrances, before any data is read or any directory written
    data = ["--data", str(tmp_path / "missing.txt")]
    for argv in (
        ["train", "--model", "qilcm", "--set", "model.width=8", *data, "--out", str(tmp_path / "m")],
        ["tune", "--model", "qilcm", "--set", "model=mlp", *data, "--out", str(tmp_path / "t")],
        ["experiment", "demo", "--runs", "2", "--set", "runs.count=3", "--out", str(tmp_path / "e")],
    ):
        assert main(argv) == 2
        assert "give one of them" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
    # without the flag, a table where the model's name belongs says where its parameters go
    assert main(["train", "--set", "model.width=8", *data, "--out", str(tmp_path / "m")]) == 2
    assert "its parameters are model_params (model_params.width)" in capsys.readouterr().err


def test_with_overrides_sets_typed_pairs_on_a_config_and_validates_once():
    """``RunConfig.with_overrides``: the typed setter of every entrance, with no dict round trip; it
    agrees with the overrides set on the config's own dict."""
    from ctxrank.config import RunConfig

    base = RunConfig(model="mlp", model_params={"hidden": (8,)})
    rerank = {"initial": "lambdamart", "top_k": 5}
    pairs = [("train.lr", 0.5), ("model_params.dropout", 0.1), ("rerank", rerank)]
    new = base.with_overrides(pairs)
    assert new.train.lr == 0.5 and new.model_params == {"hidden": (8,), "dropout": 0.1}
    assert new.rerank.initial == "lambdamart" and new.rerank.top_k == 5 and new.rerank.crossfit == 0
    assert base.train.lr == 1e-3 and base.model_params == {"hidden": (8,)}  # a new config
    assert new.to_dict() == RunConfig.from_dict(apply_overrides(base.to_dict(), pairs)).to_dict()
    # several keys of one table are validated together: top_k alone would need an initial ranker
    both = base.with_overrides([("rerank.initial", "lambdamart"), ("rerank.top_k", 7)])
    assert both.rerank.top_k == 7
    with pytest.raises(ValueError, match=r"rerank\.top_k must be a positive integer, got 0"):
        both.with_overrides([("rerank.top_k", 0)])
    with pytest.raises(ValueError, match=r"unknown config key 'nope' \(in 'nope\.x'\); valid keys: \['ens"):
        base.with_overrides([("nope.x", 1)])
    with pytest.raises(ValueError, match=r"train: unknown option\(s\) \['nope'\]"):
        base.with_overrides([("train.nope", 1)])


def test_override_errors_name_the_overrides_for_api_users_and_the_cli_writes_set(tmp_path, capsys):
    """``RunConfig.with_overrides``, ``resolve_config`` and ``load_spec`` take ``overrides``: their errors
    name that option, which only the command line writes as ``--set`` (where the user typed it)."""
    from ctxrank.config import RunConfig, resolve_config
    from ctxrank.experiments.spec import load_spec

    for call, message in (
        (lambda: RunConfig().with_overrides([("train.lr.x", 1)]), "train.lr.x: 'train.lr' is not a section"),
        (lambda: resolve_config(None, ["train.lr"]), "expects key=value, got 'train.lr'"),
        (lambda: load_spec("demo", ["runs.count.x=1"]), "runs.count.x: 'runs.count' is not a section"),
    ):
        with pytest.raises(OptionError) as info:
            call()
        assert str(info.value) == f"overrides {message}" and info.value.fields == ("overrides",)
        assert flag_text(info.value.text) == f"--set {message}"
    config = tmp_path / "c.toml"
    config.write_text("[train]\nlr = 0.1\n")
    data = ["--data", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "m")]
    assert main(["train", "--config", str(config), "--set", "train.lr.x=1", *data]) == 2
    assert capsys.readouterr().err == "ctxrank: error: --set train.lr.x: 'train.lr' is not a section\n"
    assert main(["experiment", "demo", "--set", "runs.count.x=1", "--out", str(tmp_path / "e")]) == 2
    assert capsys.readouterr().err == "ctxrank: error: --set runs.count.x: 'runs.count' is not a section\n"
    assert main(["train", "--set", "train.lr", *data]) == 2
    assert "argument --set: expects key=value, got 'train.lr'" in capsys.readouterr().err
    # a run-config option given by name and an override of its key: the API names both fields
    flags = [(Field("model"), "model", "qilcm")]
    with pytest.raises(OptionError, match=r"^model sets model and overrides model sets it: give one"):
        _overrides.with_flags([("model", "mlp")], flags)
    assert not any(p.name != "c.toml" for p in tmp_path.iterdir())
