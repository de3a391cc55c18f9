"""Run configs: defaults, TOML, --set overrides, validation messages naming the option."""

import dataclasses
import re

import pytest

from ctxrank import _checks
from ctxrank._io import to_toml
from ctxrank.config import RunConfig, TrainConfig, apply_overrides, resolve_config
from ctxrank.registry import MODELS, Baseline


def test_defaults_are_the_paper_defaults():
    c = RunConfig()
    assert c.model == "listnet" and c.loss_name == "listnet"
    assert (c.train.lr, c.train.batch_size, c.train.max_epochs, c.train.metric) == (1e-3, 80, 100, "ndcg@10")


def test_toml_then_overrides(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text('model = "mlp"\n[model_params]\nhidden = [16]\n[train]\nlr = 0.01\npatience = 3\n')
    c = resolve_config(f, ["train.lr=3e-4", "loss=listmle", "model_params.dropout=0.1"])
    assert c.model == "mlp" and c.loss_name == "listmle"
    assert c.train.lr == 3e-4 and c.train.patience == 3
    assert dict(c.model_params) == {"hidden": [16], "dropout": 0.1}


def test_round_trip_through_dict_and_toml(tmp_path):
    c = resolve_config(None, ["model=mlp", "model_params.hidden=[8, 4]", "train.clip_grad_norm=1.0"])
    again = RunConfig.from_dict(c.to_dict())
    assert again.to_dict() == c.to_dict()
    f = tmp_path / "saved.toml"
    f.write_text(to_toml(c.to_dict()))
    assert resolve_config(f).to_dict() == c.to_dict()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.lr=-1"], r"train\.lr must be a positive number"),
        (["train.batch_size=0"], r"train\.batch_size must be a positive integer"),
        (["train.metric=ndcg@0"], r"train\.metric"),
        (["train.no_relevant=0.5"], r"train\.no_relevant"),
        (["train.nope=1"], r"train: unknown option\(s\) \['nope'\]"),
        (["model=nope"], r"unknown model 'nope'; valid models: .*listnet"),
        (["loss=nope"], r"unknown loss 'nope'; valid losses: .*listmle"),
        (["transform=nope"], r"unknown transform 'nope'"),
        (["model_params.hidden=[0]"], r"model_params\.hidden must be a list of positive integers"),
        (["model_params.width=3"], r"model_params: unknown option\(s\) \['width'\]"),
        (["loss_params.nope=3"], r"loss_params\.nope: not an option of loss 'listnet'"),
        (["nope=1"], r"unknown config key\(s\) \['nope'\]"),
        (["train.lr"], r"^overrides expects key=value"),  # the API's name; the command line's --set
    ],
)
def test_bad_values_name_the_option(overrides, message):
    with pytest.raises(ValueError, match=message):
        resolve_config(None, overrides)


def test_override_values_are_toml_literals_or_bare_strings():
    d = apply_overrides({}, ["a=1", "b=1.5", "c=[1,2]", "d=true", "e=listmle", 'f="x y"'])
    assert d == {"a": 1, "b": 1.5, "c": [1, 2], "d": True, "e": "listmle", "f": "x y"}


def test_bad_toml_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("model = \n")
    with pytest.raises(ValueError, match="invalid TOML"):
        resolve_config(f)
    with pytest.raises(ValueError, match="config file not found"):
        resolve_config(tmp_path / "missing.toml")


@pytest.mark.parametrize("table", ["train", "rerank"])
def test_train_and_rerank_must_be_tables_from_a_file_and_from_an_override(table):
    with pytest.raises(ValueError, match=r"^\[train\] and \[rerank\] must be tables$"):
        RunConfig.from_dict({"model": "dasalc", table: 5})
    with pytest.raises(ValueError, match=r"^\[train\] and \[rerank\] must be tables$"):
        RunConfig().with_overrides([(table, [1])])
    # the model's implied [train] values sit under the file's; an override keeps the values it does not set
    config = RunConfig.from_dict({"model": "dasalc", "train": {"lr": 0.5}})
    assert (config.train.lr, config.train.input_noise) == (0.5, 1.5)
    assert config.with_overrides([("train.seed", 7)]).train == dataclasses.replace(config.train, seed=7)


def test_train_config_is_frozen():
    with pytest.raises(AttributeError):
        TrainConfig().lr = 1.0  # type: ignore[misc]


def test_rerank_section_and_nested_overrides(tmp_path):
    c = resolve_config(
        None, ["rerank.initial=lambdamart", "rerank.top_k=50", "rerank.initial_params.num_leaves=15"]
    )
    assert c.rerank.initial == "lambdamart" and c.rerank.top_k == 50
    assert dict(c.rerank.initial_params) == {"num_leaves": 15}
    f = tmp_path / "saved.toml"
    f.write_text(to_toml(c.to_dict()))
    assert "[rerank.initial_params]" in f.read_text()
    assert resolve_config(f).to_dict() == c.to_dict()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rerank.initial=bm25", r"rerank\.initial must be"),
        ("rerank.crossfit=1", r"rerank\.crossfit must be 0 \(off\) or an integer >= 2"),
        ("rerank.top_k=0", r"rerank\.top_k must be a positive integer"),
        ("rerank.ideal=half", r"rerank\.ideal must be"),
        ("rerank.rank_feature=3", r"rerank\.rank_feature must be true or false"),
    ],
)
def test_bad_rerank_values(override, message):
    with pytest.raises(ValueError, match=message):
        resolve_config(None, [override])


# ------------------------------------------------------------------------------ typos are errors
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model=lambdamart", "train.max_epochs=2"],
            "train.max_epochs: lambdamart is a baseline and does not",
        ),
        (["model=adarank-map", "train.lr=0.1", "train.patience=3"], "train.lr, train.patience: adarank-map"),
        (
            ["model=ranksvm", "train.device=auto"],
            "of [train] it reads train.seed, train.threads, train.no_rel",
        ),
        (
            ["model=lambdamart", "model_params.num_leavs=31"],
            "unknown LightGBM parameter 'num_leavs'; did you",
        ),
        (["model=lambdamart", "model_params.num_leaf=31"], "is LambdaMART's named parameter 'num_leaves'"),
    ],
)
def test_settings_a_baseline_would_ignore_are_errors(overrides, message):
    with pytest.raises(ValueError) as info:
        resolve_config(None, overrides)
    assert message in str(info.value)


def test_settings_a_baseline_reads_are_accepted():
    c = resolve_config(None, ["model=lambdamart", "train.seed=3", "train.threads=2", "train.no_relevant=1"])
    assert (c.train.seed, c.train.threads) == (3, 2)
    # train.metric: the validation metric the run reports and `ctxrank tune` maximizes
    assert resolve_config(None, ["model=lambdamart", "train.metric=loglik"]).train.metric == "loglik"
    c = resolve_config(
        None, ["model=lambdamart", "model_params.max_bin=63", "model_params.lambdarank_norm=false"]
    )
    assert c.model_params["max_bin"] == 63  # LightGBM's own parameter names and aliases pass
    assert resolve_config(None, ["model=lambdamart", "model_params.max_bins=63"]).model == "lambdamart"


# ------------------------------------------------------------ what every model optimizes, as messages say
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_registry_entry_states_what_it_optimizes(name):
    """``RunConfig.objective`` (what ``ctxrank train`` prints as "MODEL (trains ...)") comes from the
    registry entry: a baseline's ``trains``, the maximum likelihood of a full-batch model (the logit:
    not the loss it would use under SGD), a model's own objective, else its loss."""
    entry = MODELS[name]
    config = resolve_config(None, [f"model={name}"])
    if isinstance(entry, Baseline):
        assert config.objective.startswith(entry.trains) and config.loss_name in config.objective
    elif entry.traits.full_batch:
        assert config.fits_by_maximum_likelihood and "maximum likelihood" in config.objective
        assert config.loss_name not in config.objective
        residual = resolve_config(
            None, [f"model={name}", "rerank.initial=lambdamart", "rerank.residual=true"]
        )  # trained by SGD then: its loss
        assert residual.objective == f"the {residual.loss_name} loss"
    elif entry.traits.own_objective:
        assert config.objective == f"its own {entry.traits.own_objective} objective"
    else:
        assert config.objective == f"the {config.loss_name} loss"


# ------------------------------------------------------------------------------------ integer ranges
def _integer_keys():
    """(model, dotted key, value) for every integer option of a run config: [train], [rerank], ensemble,
    every model's model_params (neural configs and baselines' parameters), every loss option."""
    import dataclasses
    import inspect

    from ctxrank.config import RerankConfig
    from ctxrank.losses import LOSSES
    from ctxrank.registry import MODELS, Baseline

    def is_int_type(kind):
        return ("int" in str(kind) and "str" not in str(kind)) or kind is int

    keys = [("mlp", f"train.{f.name}") for f in dataclasses.fields(TrainConfig) if is_int_type(f.type)]
    keys += [("qilcm", f"rerank.{f.name}") for f in dataclasses.fields(RerankConfig) if is_int_type(f.type)]
    keys += [("mlp", "ensemble"), ("qilcm", "rerank.initial_params.seed")]
    for name, entry in MODELS.items():
        if isinstance(entry, Baseline):
            params = inspect.signature(entry.cls.__init__).parameters.values()
            keys += [(name, f"model_params.{p.name}") for p in params if is_int_type(p.annotation)]
        else:
            fields = dataclasses.fields(entry.config_class)
            keys += [(name, f"model_params.{f.name}") for f in fields if is_int_type(f.type)]
    for loss, fn in LOSSES.items():
        params = inspect.signature(fn).parameters.values()
        keys += [(f"mlp:{loss}", f"loss_params.{p.name}") for p in params if is_int_type(p.annotation)]
    return keys


INTEGER_KEYS = _integer_keys()


def test_integer_keys_are_found():
    keys = {key for _, key in INTEGER_KEYS}
    assert {"train.seed", "train.batch_size", "rerank.top_k", "model_params.hidden", "loss_params.k"} <= keys


@pytest.mark.parametrize(("model", "key"), INTEGER_KEYS, ids=[f"{m}-{k}" for m, k in INTEGER_KEYS])
def test_huge_integers_are_refused_when_the_config_is_built(model, key):
    """``train.seed = 99999999999999999999`` passed validation and failed after the data were read
    ('Overflow when unpacking long long'); every integer a config gives is range-checked when the
    config is built, with a message naming the option (lists: each element)."""
    model, _, loss = model.partition(":")
    huge = 99999999999999999999
    value = f"[{huge}]" if key.endswith(("hidden", "encoder_widths", "eval_at")) else str(huge)
    if key.endswith("encoder_widths"):
        value = f"[8, {huge}]"
    sets = [f"model={model}", f"{key}={value}", *([f"loss={loss}"] if loss else [])]
    if key.startswith("rerank."):
        sets.append("rerank.initial=lambdamart")
    with pytest.raises(ValueError, match=key.rsplit(".", 1)[-1]) as info:
        resolve_config(None, sets)
    assert "\n" not in str(info.value)


def test_ensemble_seeds_stay_within_the_largest_seed():
    from ctxrank._checks import MAX_SEED

    resolve_config(None, [f"train.seed={MAX_SEED}"])
    with pytest.raises(ValueError, match="ensemble = 2 trains with seeds up to"):
        resolve_config(None, [f"train.seed={MAX_SEED}", "ensemble=2"])


def test_model_sizes_are_bounded_as_when_a_saved_model_is_loaded():
    """``--set model_params.hidden=[100000000]`` tried to allocate 18.4 GB: the bounds of a loaded
    ``ctxrank.json`` (``_checks.MAX_CONFIG_INT``, ``MAX_CONFIG_LIST``) apply to a run config too."""
    from ctxrank._checks import MAX_CONFIG_INT, MAX_CONFIG_LIST

    resolve_config(None, ["model=mlp", f"model_params.hidden=[{MAX_CONFIG_INT}]"])  # the bound itself
    for model, sets in [
        ("mlp", [f"model_params.hidden=[{MAX_CONFIG_INT + 1}]"]),
        ("mlp", [f"model_params.hidden=[{', '.join(['4'] * (MAX_CONFIG_LIST + 1))}]"]),
        ("dcm", [f"model_params.hidden={MAX_CONFIG_INT + 1}"]),
        ("qilcm", [f"model_params.encoder_width={MAX_CONFIG_INT + 1}"]),
        ("dlcm", [f"model_params.gru_hidden={MAX_CONFIG_INT + 1}"]),
        ("arsm", [f"model_params.n_levels={MAX_CONFIG_INT + 1}"]),
    ]:
        with pytest.raises(ValueError, match=r"model_params\.\w+ .*(limit|at most)"):
            resolve_config(None, [f"model={model}", *sets])


# ------------------------------------------------------------------ the one set of validators (_checks)
def _bools():
    import numpy as np

    return [True, False, np.True_, np.False_]


@pytest.mark.parametrize("value", _bools())
@pytest.mark.parametrize(
    "check",
    [
        lambda v: _checks.check_positive("x", v),
        lambda v: _checks.check_non_negative("x", v),
        lambda v: _checks.check_dropout("x", v),
        lambda v: _checks.check_int("x", v, 0),
        lambda v: _checks.check_int("x", v, 0, allow_none=True),
        lambda v: _checks.check_seed("x", v),
        lambda v: _checks.check_bytes("x", v),
        lambda v: _checks.check_crossfit("x", v),
        lambda v: _checks.check_int_list("x", (v,)),
        lambda v: _checks.check_null_fill("x", v),
        lambda v: _checks.check_no_relevant("x", v),
        lambda v: _checks.resolve_threads(v),
    ],
)
def test_no_numeric_check_takes_a_bool_for_a_number(check, value):
    """``True == 1`` and ``False == 0``: a bool (Python's or NumPy's) passes no numeric check."""
    assert not _checks.is_number(value) and not _checks.is_int(value)
    with pytest.raises(ValueError, match="must be"):
        check(value)


def test_check_names_is_the_one_check_of_a_list_of_names():
    assert _checks.check_names("m", ["a", "b"]) == ("a", "b")
    assert _checks.check_names("m", " a, b ,") == ("a", "b")  # the command line's comma-separated form
    assert _checks.check_names("m", ()) == ()
    for bad in (5, ["a", 1], None):
        with pytest.raises(ValueError, match="m must be a list of strings"):
            _checks.check_names("m", bad)


@pytest.mark.parametrize(
    ("override", "name", "valid"),
    [
        (("train.precision", "fp8"), "train.precision", "PRECISIONS"),
        (("rerank.initial", "bm25"), "rerank.initial", "INITIAL_RANKERS"),
        (("rerank.ideal", "half"), "rerank.ideal", "IDEAL_SCOPES"),
    ],
)
def test_config_checks_its_choices_with_the_one_choice_check(override, name, valid):
    """config.py writes no choice check by hand: its messages are ``_checks.check_choice``'s, over the
    values it declares once (``ctxrank.training.rerank`` takes ``IDEAL_SCOPES`` from it)."""
    from ctxrank import config
    from ctxrank.training import rerank

    values = getattr(config, valid)
    with pytest.raises(ValueError) as expected:
        _checks.check_choice(name, override[1], values)
    with pytest.raises(ValueError) as got:
        resolve_config(None, [override])
    assert str(got.value) == str(expected.value)
    assert rerank.IDEAL_SCOPES is config.IDEAL_SCOPES


def test_no_relevant_true_is_refused_by_the_run_config_and_the_spec(tmp_path):
    """``True == 1.0``: a bool never passes as the no-relevant value (the run config's and the report's)."""
    from ctxrank.experiments import load_spec

    with pytest.raises(ValueError, match=r"train\.no_relevant must be 0, 1 or 'skip', got True"):
        resolve_config(None, [("train.no_relevant", True)])
    with pytest.raises(ValueError, match=r"\[report\] no_relevant must be 0, 1 or 'skip', got True"):
        load_spec("demo", [("report.no_relevant", True)])
    assert load_spec("demo", [("report.no_relevant", 1)]).report.no_relevant == 1.0


def test_no_threads_given_means_default_threads_decided_in_one_function(monkeypatch):
    """``train.threads = None`` (no ``--threads``) is one thread for what ctxrank sets itself, decided by
    ``_checks.resolve_threads`` alone: a baseline's ``num_threads``, the initial ranker's threads."""
    from ctxrank.registry import MODELS
    from ctxrank.training.rerank import InitialRanker

    assert _checks.DEFAULT_THREADS == 1 and _checks.resolve_threads(None) == 1
    assert _checks.resolve_threads(3) == 3
    with pytest.raises(ValueError, match=r"train\.threads must be a positive integer, got 0"):
        _checks.resolve_threads(0, "train.threads")
    monkeypatch.setattr(_checks, "DEFAULT_THREADS", 3)  # every user follows the one constant
    assert MODELS["lambdamart"].params({}, TrainConfig())["num_threads"] == 3
    assert InitialRanker.for_config(resolve_config(None, ["rerank.initial=lambdamart"])).threads == 3
    assert MODELS["lambdamart"].params({}, TrainConfig(threads=2))["num_threads"] == 2


def test_no_module_decides_a_default_for_threads_by_itself():
    """No ``1 if threads is None else threads`` outside ``_checks.resolve_threads``, and no
    ``threads or DEFAULT`` / ``ex.in_flight or DEFAULT`` (the house rule against ``x or default`` on
    user input: ``in_flight`` is tested ``is None``)."""
    import ast
    from pathlib import Path

    def names(node):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
            n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
        }

    root = Path(_checks.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "_checks.py":
            continue
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            test = node.test if isinstance(node, ast.IfExp) else None
            none_test = (
                isinstance(test, ast.Compare)
                and isinstance(test.ops[0], ast.Is)
                and isinstance(test.comparators[0], ast.Constant)
                and test.comparators[0].value is None
                and "threads" in names(test.left)
            )
            first = node.values[0] if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) else None
            user = {"threads", "in_flight"}
            or_default = isinstance(first, ast.Name | ast.Attribute) and bool(user & names(first))
            if none_test or or_default:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.get_source_segment(text, node)}")
    assert not found, found


def test_a_models_run_defaults_fill_only_the_keys_a_run_leaves_unset(monkeypatch, tmp_path):
    """``ModelTraits.run_defaults`` (DASALC's transform and input noise): applied where a run config is
    resolved (CLI, TOML, spec, tune, saved configs all go through ``RunConfig.from_dict``) and as the
    estimator's defaults; a run that sets a key keeps its value; a saved config records the values."""
    from ctxrank.api._params import param_spec
    from ctxrank.models.mlp import MLPScorer
    from ctxrank.models.qilcm import QILCM

    implied = {"transform": "zscore", "train.input_noise": 0.3}
    for cls in (MLPScorer, QILCM):  # QILCM's ablations (its subclasses) have its traits
        monkeypatch.setattr(cls, "traits", dataclasses.replace(cls.traits, run_defaults=implied))
    config = resolve_config(None, ["model=mlp"])
    assert (config.transform, config.train.input_noise, config.train.lr) == ("zscore", 0.3, 1e-3)
    assert config.to_dict()["transform"] == "zscore" and config.to_dict()["train"]["input_noise"] == 0.3
    (tmp_path / "run.toml").write_text('model = "mlp"\ntransform = "none"\n[train]\ninput_noise = 0.0\n')
    own = resolve_config(tmp_path / "run.toml")
    assert (own.transform, own.train.input_noise) == ("none", 0.0)
    assert resolve_config(None, ["model=qilcm-variant1"]).transform == "zscore"  # a subclass inherits them
    assert resolve_config(None, ["model=dlcm"]).transform == "minmax"  # other models: the shared defaults
    spec = param_spec("mlp")
    assert spec.run["normalizer"] == "zscore" and spec.train["input_noise"] == 0.3
    assert RunConfig().transform == "minmax"  # the dataclass's own default is unchanged


def test_rerank_errors_name_their_keys_for_each_caller():
    """A :class:`RerankConfig` error names its keys (``rerank.top_k``), as the API and the command line
    (``--set``, a config file) write them; a caller with its own names writes them its way."""
    from ctxrank._checks import OptionError
    from ctxrank.cli import flag_text

    with pytest.raises(OptionError) as info:
        resolve_config(None, ["model=listnet", "rerank.top_k=5", "rerank.ideal=\"top-k\""])
    text = "rerank.top_k, rerank.ideal: apply to a re-ranking run (rerank.initial = 'lambdamart'); without"
    assert str(info.value).startswith(text) and flag_text(info.value.text).startswith(text)
    own = info.value.text.render(key_of=lambda key: f"[{key.table}] {key.name}")
    assert own.startswith("[rerank] top_k, [rerank] ideal: apply to a re-ranking run ([rerank] initial = ")
    with pytest.raises(OptionError, match=r"^rerank\.top_k must be a positive integer, got 0$"):
        resolve_config(None, ["rerank.initial=lambdamart", "rerank.top_k=0"])


@pytest.mark.parametrize(
    "key", ["rerank.top_k=5", "rerank.crossfit=3", "rerank.ideal=\"top-k\"", "rerank.rank_feature=true",
            "rerank.initial_params={num_leaves=7}"],
)
def test_a_rerank_key_without_an_initial_ranker_is_refused_not_ignored(key):
    name = key.split("=")[0]
    with pytest.raises(ValueError, match=rf"{re.escape(name)}: applies to a re-ranking run"):
        resolve_config(None, ["model=listnet", key])
    assert resolve_config(None, ["model=listnet", "rerank.initial=lambdamart", key]).rerank.initial


def test_a_maximum_likelihood_fit_refuses_a_loss_and_the_train_keys_it_does_not_read():
    """mnl is fitted by SciPy: a loss, its options and the epoch keys were silently ignored."""
    for over, match in (
        (["loss=lambdaloss"], r"loss: mnl is fitted to its maximum likelihood \(no loss\)"),
        (["loss_params.temperature=2.0"], r"loss and loss_params apply only when SGD trains it"),
        (["train.lr=0.1", "train.device=auto"], r"train\.lr, train\.device: mnl is fitted"),
    ):
        with pytest.raises(ValueError, match=match):
            resolve_config(None, ["model=mnl", *over])
    saved = resolve_config(None, ["model=mnl", "loss=listnet", 'loss_params.label_transform="identity"'])
    assert saved.fits_by_maximum_likelihood  # what a saved mnl config records loads again
    with pytest.raises(ValueError, match=r"ensemble = 3: mnl .* every member would be the same model"):
        resolve_config(None, ["model=mnl", "ensemble=3"])
    residual = ["model=mnl", "rerank.initial=lambdamart", "rerank.residual=true", "loss=lambdaloss"]
    assert resolve_config(None, [*residual, "train.lr=0.1"]).train.lr == 0.1  # SGD: every key applies
    assert resolve_config(None, [*residual, "ensemble=3"]).ensemble == 3


def test_a_model_saved_with_options_now_refused_still_loads_and_predicts_the_same(tmp_path):
    """Options that were silently ignored (they changed nothing) are refused for new runs, but a model
    directory that records them loads: ``RunConfig.from_saved`` drops what the run did not read."""
    import json

    import numpy as np

    from ctxrank.training.checkpoint import load_model
    from ctxrank.training.run import run_training
    from tests.conftest import make_ranking_data

    train, valid = make_ranking_data(20, seed=1), make_ranking_data(8, seed=2)
    for name, recorded in (
        ("mnl", {"loss": "lambdaloss", "train": {"lr": 0.5, "max_epochs": 3}, "ensemble": 2}),
        ("listnet", {"rerank": {"top_k": 5, "crossfit": 3}}),
    ):
        out = tmp_path / name
        over = [f"model={name}"] + (["train.max_epochs=1"] if name == "listnet" else [])
        run_training(resolve_config(None, over), train, valid, out=out, progress=False)
        before = load_model(out).predict(valid)
        meta = json.loads((out / "ctxrank.json").read_text())
        for key, value in recorded.items():
            if isinstance(value, dict):
                meta["run_config"][key] = {**meta["run_config"][key], **value}
            else:
                meta["run_config"][key] = value
        (out / "ctxrank.json").write_text(json.dumps(meta))
        with pytest.raises(ValueError, match=r"applies|apply|does not use"):
            RunConfig.from_dict(meta["run_config"])
        np.testing.assert_array_equal(load_model(out).predict(valid), before)
