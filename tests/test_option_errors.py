"""Library errors name options by their field names (the API's words); the command line writes the
same errors with the options' declared flags, from the fields the error carries."""

from __future__ import annotations

import ast
import pickle
import string
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ctxrank._checks import OptionError, OptionText
from ctxrank._declare import declared, flag_of
from ctxrank.cli import flag_text, main, option_classes, option_flag
from ctxrank.data.sources import DataSource, ReadOptions
from ctxrank.data.split import split_queries
from tests.conftest import make_ranking_data

SRC = Path(__file__).resolve().parents[1] / "src" / "ctxrank"


def test_an_api_user_reads_field_names_and_the_cli_their_flags():
    source = DataSource(train_file="a.txt", valid_file="b.txt", split_fractions=(0.5, 0.3, 0.2))
    with pytest.raises(OptionError) as info:
        source.load_training(seed=0)
    assert str(info.value) == "split_fractions applies to data_file (one file split into train/valid/test)"
    assert info.value.fields == ("split_fractions", "data_file")
    assert flag_text(info.value.text) == (
        "--split-fractions applies to --data FILE (one file split into train/valid/test)"
    )
    with pytest.raises(OptionError, match=r"^give either dataset or data files \(train_file/valid_file/test"):
        DataSource(dataset="mq2008", data_file="x.txt").load_training(seed=0)


def test_the_cli_prints_the_flags_of_the_same_error(capsys):
    assert main(["data-info", "--dataset", "mq2008", "--regroup", "--categorical", "a"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "ctxrank: error: --categorical apply to table files (.csv, .csv.gz, .tsv, .tsv.gz, .parquet, .pq); "
        "--dataset mq2008 is not one (LETOR / SVMlight data carry their own query ids and labels)\n"
    )


def test_a_split_by_group_and_a_note_name_the_field():
    one_group = replace(make_ranking_data(12, seed=1), group_ids=np.array(["r1"] * 12))
    name = OptionText.of("{group_col} {name}", name="person")
    with pytest.raises(OptionError) as info:
        split_queries(one_group, by_group=True, group_name=name)
    assert str(info.value).startswith("group_col person has only 1 distinct value")
    assert flag_text(info.value.text).startswith("--group-col person has only 1 distinct value")
    source = DataSource(dataset="mq2008", read=ReadOptions(null_fill=0.0))
    notes: list = []
    source._with_model_null_fill("letor_min", notes.append)
    assert [str(n) for n in notes] == ["null_fill 0.0: the model was trained with null_fill letor_min"]
    assert flag_text(notes[0]) == "--null-fill 0.0: the model was trained with --null-fill letor_min"


def test_an_option_error_crosses_processes_with_its_fields():
    error = OptionError("{null_fill}: {what} has no missing value", what="x.csv")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is OptionError and again.fields == ("null_fill",) and str(again) == str(error)


def _named_fields(tree: ast.AST) -> set[str]:
    """The fields every ``OptionError`` / ``OptionText.of`` template and ``listed([...])`` names."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in ("OptionError", "of") and node.args:
            values = {k.arg for k in node.keywords}
            for const in ast.walk(node.args[0]):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    found |= {f for _, f, _, _ in string.Formatter().parse(const.value) if f} - values
        if name == "listed" and node.args and isinstance(node.args[0], ast.List):
            found |= {e.value for e in node.args[0].elts if isinstance(e, ast.Constant)}
    return found


def test_every_field_a_library_error_names_is_a_declared_option():
    named = set()
    for path in SRC.rglob("*.py"):
        named |= _named_fields(ast.parse(path.read_text()))
    assert {"split_fractions", "data_file", "null_fill", "query_col", "group_col"} <= named
    assert {"train_shards", "shuffle_buffer", "loss", "host"} <= named
    for field in sorted(named):
        assert option_flag(field).startswith("--"), field


def test_a_field_name_stands_for_one_flag_among_the_option_classes():
    flags: dict[str, set[str]] = {}
    for cls in option_classes():
        for name, opt in declared(cls):
            flags.setdefault(name, set()).add(opt.flag)
    assert {"data_file", "top_k", "max_rows"} <= set(flags)
    assert {name: f for name, f in flags.items() if len(f) > 1} == {}
    assert option_flag("train_file") == flag_of(DataSource, "train_file") == "--train"
    assert option_flag("top_k") == "--top-k" and option_flag("max_body_bytes") == "--max-body-bytes"
    with pytest.raises(KeyError, match="no command declares an option 'nope'"):
        option_flag("nope")


def test_training_and_serving_errors_name_fields_that_the_cli_writes_as_flags():
    from types import SimpleNamespace

    from ctxrank.config import RunConfig
    from ctxrank.training.run import check_streaming

    with pytest.raises(OptionError) as info:
        check_streaming(RunConfig(model="lambdamart"), SimpleNamespace(shuffle_buffer=1024))
    assert str(info.value).startswith("train_shards streams the training queries from disk, but lambdamart ")
    assert info.value.fields == ("train_shards", "train_file")
    assert flag_text(info.value.text).endswith(": give --train FILE instead, or train a neural model (mlp, "
                                               "qilcm, dlcm, dcm, attn, ...) on the shards")  # fmt: skip
    with pytest.raises(OptionError) as info:
        check_streaming(RunConfig(model="mlp"), SimpleNamespace(shuffle_buffer=4))
    assert str(info.value).endswith("(train.batch_size = 80): raise shuffle_buffer")
    assert flag_text(info.value.text).endswith("(train.batch_size = 80): raise --shuffle-buffer")
    pytest.importorskip("uvicorn")
    from ctxrank.serving.server import bind

    with pytest.raises(OptionError) as info:
        bind("x..y", 0)
    assert str(info.value).startswith("host x..y: not an address of this machine (")
    assert flag_text(info.value.text).startswith("--host x..y: not an address of this machine (")
