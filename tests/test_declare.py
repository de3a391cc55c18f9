"""Options declared once (``ctxrank._declare``): each flag of a request (``DataSource``, its
``Columns`` and ``ReadOptions``, ``RunConfig``) has one declaration, on its field; every command
builds the flag from it and parses it back into the same typed field; the experiment runner and the
command line build equal sources for the same data."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from ctxrank._declare import declared, flag_of, from_namespace
from ctxrank.cli import COMMANDS, build_parser
from ctxrank.config import RunConfig, TrainConfig
from ctxrank.data.sources import Columns, DataSource, ReadOptions
from ctxrank.training.request import FLAGS, TrainRequest

SRC = Path(__file__).resolve().parents[1] / "src" / "ctxrank"
REQUESTS = (DataSource, RunConfig)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def _commands_with_data() -> list[str]:
    return [name for name in ("train", "tune", "predict", "evaluate", "data-info") if name in COMMANDS]


def _declaring_files(flag: str) -> list[str]:
    """The package files where ``"FLAG",`` stands (a declaration or an ``add_argument``)."""
    pattern = re.compile(rf'"{re.escape(flag)}"\s*,')
    return sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if pattern.search(p.read_text()))


#: flags of other options that happen to share a data option's flag, and why
SAME_FLAG_OTHER_OPTION = {
    ("--dataset", "cli/experiment.py"): "experiment: overrides the spec's data.dataset (folds reset)",
    ("--fold", "cli/experiment.py"): "demo --quick: the fold of the embedded MQ2008 it fits LambdaMART on",
}


def test_every_data_option_is_written_once_in_the_source():
    """No ``add_argument("--null-fill", ...)`` beside the declaration: the flag of each data option
    appears once as a string literal in the package, in data/sources.py."""
    for name, opt in declared(DataSource):
        files = [f for f in _declaring_files(opt.flag) if (opt.flag, f) not in SAME_FLAG_OTHER_OPTION]
        assert files == ["data/sources.py"], (name, opt.flag)


def test_train_and_tune_declare_no_training_flag_of_their_own():
    """``--model``, ``--seed``, ``--top-k``, ... of a training run: declared on the run config's own
    fields only (``--threads`` in ctxrank._declare, shared; other commands' ``--model DIR`` is another
    option: a saved model)."""
    names = [name for name, _ in declared(RunConfig)]
    assert names == [
        "model", "loss", "seed", "threads", "debias", "propensity", "propensity_eta", "propensity_clip",
        "initial", "top_k", "crossfit",
    ]  # fmt: skip
    for name, opt in declared(RunConfig):
        files = _declaring_files(opt.flag)
        assert "cli/tune.py" not in files and "cli/train.py" not in files, (name, opt.flag)
        assert [f for f in files if f in ("config.py", "_declare.py")] in (["config.py"], ["_declare.py"])
    own = [name for name, _ in declared(TrainRequest)]  # its own, then the data source's: no run option
    assert own == ["config", "overrides", *(name for name, _ in declared(DataSource))]


def test_model_is_a_registry_name_in_train_and_tune_and_one_directory_option_elsewhere():
    from ctxrank.cli._options import MODEL_DIR

    # the run config's field, the directory option, and an example in _overrides.py's documentation
    assert _declaring_files("--model") == ["_overrides.py", "cli/_options.py", "config.py"]
    for command, parser in _subparsers().items():
        action = next((a for a in parser._actions if "--model" in a.option_strings), None)
        if command in ("train", "tune"):
            assert action.metavar == "NAME" and "model name" in action.help, command
        elif action is not None:
            assert action.metavar in ("DIR", "PATH") and action.help.startswith(MODEL_DIR.help.split("{")[0])
            assert action.dest == "model", command


def test_threads_is_one_declaration_shared_by_every_command():
    from ctxrank.cli._options import THREADS

    assert dict(declared(TrainConfig))["threads"] is THREADS
    assert _declaring_files("--threads") == ["_declare.py"]
    for command, parser in _subparsers().items():
        for action in parser._actions:
            if "--threads" in action.option_strings:
                assert action.metavar == "N" and action.dest == "threads", command


def test_the_commands_take_threads_from_the_parser_with_no_default_of_their_own(monkeypatch):
    """``--threads`` not given is the parser's None, passed through to each command's function, which
    gives ``threads`` no default of its own (there were three: None, 1 and the spec's); where ctxrank
    must pass a count itself, ``resolve_threads`` decides what None is (``demo --quick``: 1)."""
    import inspect

    from ctxrank.cli import _scoring, evaluate, experiment, export, predict, serve

    functions = (
        evaluate.evaluate, experiment.experiment, experiment.demo, experiment.quick_demo, export.export,
        serve.serve_model, predict.predict, predict.predict_shards, _scoring.load_for_scoring,
    )  # fmt: skip
    for function in functions:
        default = inspect.signature(function).parameters["threads"].default
        assert default is inspect.Parameter.empty, function.__qualname__

    class Stop(Exception):
        pass

    def lambdamart(**params):
        seen.update(params)
        raise Stop

    seen: dict = {}
    monkeypatch.setattr(experiment, "LambdaMART", lambdamart)
    for argv, threads in ((["demo", "--quick"], 1), (["demo", "--quick", "--threads", "3"], 3)):
        args = build_parser().parse_args(argv)
        with pytest.raises(Stop):
            args.run(args)
        assert seen["num_threads"] == threads


def test_track_is_one_declaration_shared_by_train_tune_and_experiment():
    from ctxrank.cli._options import TRACK
    from ctxrank.tracking import Tracking

    assert _declaring_files("--track") == ["tracking.py"]
    having = {}
    for command, parser in _subparsers().items():
        for action in parser._actions:
            if "--track" in action.option_strings:
                having[command] = action
    assert set(having) == {"train", "tune", "experiment"}
    for command, action in having.items():
        assert action.dest == "track" and action.metavar == TRACK.metavar, command
        assert action.type("tensorboard:tb") == Tracking("tensorboard", "tb"), command


@pytest.mark.parametrize("command", _commands_with_data())
def test_each_command_builds_the_declared_flags_with_the_fields_names(command):
    """Every flag of a command that is a declared option parses into its field (``dest``) and is not
    declared twice (argparse would refuse a duplicate, but not the same option under a second flag)."""
    parser = _subparsers()[command]
    by_flag = {flag: a for a in parser._actions for flag in a.option_strings}
    declared_flags = {opt.flag: name for cls in REQUESTS for name, opt in declared(cls)}
    seen = []
    for flag, action in by_flag.items():
        if flag in declared_flags:
            assert action.dest == declared_flags[flag], (command, flag, action.dest)
            seen.append(action.dest)
    dests = [a.dest for a in parser._actions]
    assert len(dests) == len(set(dests)), f"{command}: a dest is declared twice: {dests}"
    assert "dataset" in seen and "null_fill" in seen and "query_col" in seen


def test_predict_builds_the_same_source_as_the_api():
    parser = build_parser()
    argv = ["predict", "--model", "m", "-o", "-", "--dataset", "ohsumed", "--fold", "2", "--null-fill", "-1"]
    args = parser.parse_args(argv)
    source = from_namespace(DataSource, args)
    assert source == DataSource(dataset="ohsumed", fold=2, read=ReadOptions(null_fill=-1.0))
    assert isinstance(source.read.null_fill, float) and isinstance(source.fold, int)


def test_train_options_compose_the_data_source_and_record_flat():
    argv = [
        "train", "--model", "mlp", "--data", "s.csv", "--query-col", "q", "--label-col", "y",
        "--categorical", "a,b", "--max-dense-bytes", "1000", "--top-k", "20", "--out", "run",
    ]  # fmt: skip
    options = TrainRequest.of(build_parser().parse_args(argv))
    assert options.data == DataSource(
        data_file="s.csv",
        columns=Columns(query_col="q", label_col="y", categorical=("a", "b")),
        read=ReadOptions(max_dense_bytes=1000),
    )
    assert options.given == (("model", "mlp"), ("top_k", 20))
    assert options.config_overrides() == [("model", "mlp"), ("rerank.top_k", 20)]  # the fields' keys
    flat = options.to_record()
    assert list(flat) == list(FLAGS)  # one flat level: the recorded names are the option names
    assert TrainRequest.from_record(flat).to_record() == flat
    with pytest.raises(ValueError, match=r"unknown recorded option\(s\) \['nope'\]; valid: \['model'"):
        TrainRequest.from_record({**flat, "nope": 1})


def test_a_bad_value_is_refused_by_the_declared_reader_with_the_flag_named(capsys):
    for argv, expected in (
        (["--fold", "-1"], "argument --fold: expected an integer in [0,"),
        (["--max-dense-bytes", "0"], "argument --max-dense-bytes: expected a number of bytes in [1,"),
        (["--null-fill", "median"], "argument --null-fill: expected query_min, letor_min, keep or a finite"),
        (["--categorical", "a,a"], "argument --categorical: a column is listed twice"),
    ):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["data-info", "f.txt", *argv])
        assert expected in capsys.readouterr().err, argv


def test_the_experiment_runner_builds_the_source_the_cli_builds(tmp_path):
    """The same OHSUMED fold through `ctxrank train --dataset ...` and through an experiment's
    ``[data]``: one DataSource."""
    from ctxrank.experiments.spec import load_spec

    data = [("data.dataset", "ohsumed"), ("data.folds", []), ("data.root", str(tmp_path))]
    spec = load_spec("qilcm-table2", [*data, ("data.null_fill", "letor_min")])
    argv = ["train", "--dataset", "ohsumed", "--fold", "3", "--data-root", str(tmp_path)]
    argv += ["--null-fill", "letor_min", "--out", "x"]
    from_cli = TrainRequest.of(build_parser().parse_args(argv)).data
    assert dataclasses.replace(spec.data, fold=3) == dataclasses.replace(from_cli, data_root=str(tmp_path))


def test_flag_of_names_the_declared_flag():
    assert flag_of(DataSource, "null_fill") == "--null-fill"
    assert flag_of(DataSource, "data_root") == "--data-root"
    with pytest.raises(KeyError):
        flag_of(DataSource, "nope")
