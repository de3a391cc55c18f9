"""[data] synth = "letor": experiments on synthetic LETOR lists generated in memory, shaped by the
options of `ctxrank synth letor` ([data] letor), recorded by their parameters, never by a path."""

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from ctxrank.cli import main
from ctxrank.data.letor import read_letor
from ctxrank.data.synth import LetorShape, synthetic_letor
from ctxrank.experiments import load_spec, runner
from ctxrank.experiments.evidence import spec_from_record
from ctxrank.experiments.spec import err_max_label

TINY = ["data.letor.queries=20", "data.letor.items=5", "data.letor.features=3"]


@pytest.mark.parametrize(
    ("spec", "override", "message"),
    [
        ("context-pays", "data.letor.list_size=5", "letor: unknown key(s) ['list_size']; valid: ['queries',"),
        ("context-pays", "data.letor.queries=0", "letor.queries must be a positive integer, got 0"),
        ("context-pays", "data.letor.features=2.5", "letor.features must be a positive integer, got 2.5"),
        ("context-pays", "data.letor.items=true", "letor.items must be a positive integer, got True"),
        ("context-pays", "data.letor.lengths=long", "letor.lengths must be one of ['fixed', 'mslr'], got"),
        ("context-pays", "data.letor.context=rank", "letor.context must be one of ['none', 'relative']"),
        (
            "context-pays",
            "data.letor={labels='mslr', max_label=2}",
            "letor.labels mslr gives grades 0..4: leave letor.max_label out (got 2)",
        ),
        (
            "context-pays",
            "data.letor.lengths=mslr",  # its items = 20 would be ignored
            "letor.items applies to letor.lengths fixed; letor.lengths mslr draws each list's length",
        ),
        ("context-pays", "data.letor=3", "letor: must be a table of ['queries', 'items', 'features',"),
        ("context-pays", "data.sessions=500", "sessions applies to synth = 'choice'"),
        ("context-pays", "data.null_fill=0", "null_fill: synthetic lists have no missing feature value"),
        ("context-pays", "data.synth=lists", "synth must be one of ['choice', 'letor'], got 'lists'"),
        ("choice", "data.letor.queries=50", "letor applies to synth = 'letor'"),
        ("qilcm-table2", "data.letor.queries=50", "letor applies to synth = 'letor'"),
    ],
)
def test_the_letor_table_is_checked_like_every_spec_key(spec, override, message):
    with pytest.raises(ValueError, match=re.escape(f"[data] {message}")):
        load_spec(spec, [override])
    assert load_spec("context-pays", ["data.letor.labels=mslr"]).letor.labels == "mslr"  # grades 0..4


def test_context_pays_generates_the_lists_its_header_command_writes(tmp_path, monkeypatch):
    """The built-in spec names no file: its [data] letor and synth_seed are the parameters of the
    command in its header, whose file holds exactly the lists the runs split."""
    from importlib import resources

    spec = load_spec("context-pays")
    assert spec.letor == LetorShape(queries=300, items=20, features=10, context="relative")
    assert spec.synth == "letor" and spec.synth_seed == 0 and not spec.data.data_file
    text = (resources.files("ctxrank.experiments") / "configs" / "context-pays.toml").read_text()
    (command,) = [line[1:].split() for line in text.splitlines() if "ctxrank synth letor" in line]
    monkeypatch.chdir(tmp_path)
    assert main([*command[1:-1], "lists.txt", "--no-progress"]) == 0  # --out FILE
    read, made = read_letor("lists.txt", cache=False), synthetic_letor(spec.letor, spec.synth_seed)
    assert np.array_equal(read.features, made.features) and np.array_equal(read.labels, made.labels)
    assert read.query_ids.tolist() == made.query_ids.tolist()


def test_the_record_holds_the_parameters_never_a_path_and_reads_back():
    spec = load_spec("context-pays", TINY)
    record = spec.to_dict()
    assert record["data"]["letor"] == {
        "queries": 20, "items": 5, "features": 3, "max_label": 4, "lengths": "fixed", "labels": "quantile",
        "context": "relative",
    }  # fmt: skip
    assert record["data"]["file"] == "" and "/" not in json.dumps(record["data"])
    back = spec_from_record({"fingerprint": spec.fingerprint(), "spec": record})
    assert back.letor == spec.letor and back.fingerprint() == spec.fingerprint()
    other = load_spec("context-pays", [*TINY, "data.letor.items=6"])
    assert other.fingerprint() != spec.fingerprint()  # the shape is an input of the runs' numbers
    reseeded = load_spec("context-pays", [*TINY, "data.synth_seed=1"])
    assert reseeded.fingerprint() != spec.fingerprint()
    # records without the key (every other experiment) keep their fingerprints and bytes
    assert "letor" not in load_spec("choice").to_dict()["data"]


def test_runs_split_one_generation_of_the_lists_deterministically_and_record_no_path(monkeypatch):
    spec = load_spec("context-pays", TINY)
    calls = []
    made = runner.synthetic_letor
    monkeypatch.setattr(
        runner, "synthetic_letor", lambda shape, seed: calls.append(seed) or made(shape, seed)
    )
    runner._letor_lists.cache_clear()
    source = runner._Source(spec)
    first, second = (runner.load_unit(spec, seed, 0, source) for seed in (0, 1))
    again = runner.load_unit(spec, 0, 0)  # another source in the same process: the same lists
    assert calls == [0]  # generated once per process, split per run
    assert first.test.query_ids.tolist() != second.test.query_ids.tolist()
    assert np.array_equal(again.train.features, first.train.features)
    assert again.test.query_ids.tolist() == first.test.query_ids.tolist()
    assert first.split["queries"] == {"train": 12, "valid": 4, "test": 4}
    assert first.split["source"] == (
        "SYNTHETIC letor lists (20 queries x 5 items, 3 features, labels 0..4, context relative; seed 0)"
    )
    assert spec.run_names() == list(spec.models)  # no chooser reference: graded lists, not choices
    assert not spec.is_choice and err_max_label(spec) == 4
    runner._letor_lists.cache_clear()


def _documented_click_overrides() -> list[str]:
    """The ``--set`` values of the MSLR-shaped click experiment docs/experiments.md shows."""
    text = (Path(__file__).parents[2] / "docs" / "experiments.md").read_text(encoding="utf-8")
    (line,) = [x for x in text.splitlines() if x.startswith("ctxrank experiment clicks-mq2008 --set name=")]
    argv = shlex.split(line)
    assert argv[:3] == ["ctxrank", "experiment", "clicks-mq2008"] and len(argv) == 3 + 2 * argv.count("--set")
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]


def test_the_documented_click_experiment_on_mslr_shaped_lists():
    """clicks-mq2008 with its dataset unset and the 1/6-WEB30K shape, as docs/experiments.md runs it,
    builds (the folds of MQ2008 give way to random splits); a tiny one simulates its click logs from
    the lists' grades."""
    overrides = _documented_click_overrides()
    spec = load_spec("clicks-mq2008", overrides)
    assert spec.name == "clicks-mslr-synth" and "MSLR-shaped SYNTHETIC" in spec.title
    assert spec.letor == LetorShape(queries=5000, features=136, lengths="mslr", labels="mslr")
    assert spec.protocol == "random-splits" and spec.report.test == "corrected-resampled"
    small = ["data.letor.queries=6", "data.letor.features=3", "clicks.sessions=40"]
    unit = runner.load_unit(load_spec("clicks-mq2008", [*overrides, *small]), 0, 0)
    assert unit.labelled is not None and unit.train.shown_positions is not None
    assert unit.test.labels.max() <= 4 and unit.split["source"].startswith("SYNTHETIC letor lists (6 queries")
    runner._letor_lists.cache_clear()
    choice = "[clicks] simulates from graded relevance labels; synthetic choice sessions have choices"
    with pytest.raises(ValueError, match=re.escape(choice)):
        load_spec("clicks-mq2008", ["data.dataset=", "data.synth=choice"])
