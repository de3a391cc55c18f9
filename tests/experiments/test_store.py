"""Run and unit files of an experiment directory are validated when read back: schema,
keys, equal lengths, finite values or null; a bad file is a ValueError naming it and the fault."""

from __future__ import annotations

import json

import pytest

from ctxrank.experiments.compare import compare_runs, load_runs
from ctxrank.experiments.store import RunStore

GOOD = {
    "model": "mlp",
    "seed": 0,
    "fold": 1,
    "query_ids": ["q1", "q2", "q3"],
    "metrics": {"ndcg@10": [0.5, None, 1.0], "map": [0.25, 0.5, 0.75]},
    "split": {"queries": {"train": 6, "valid": 2, "test": 3}},
}


def _store(tmp_path, record):
    store = RunStore(tmp_path)
    path = store.run_path("mlp", 0, 1)
    path.parent.mkdir(parents=True)
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    return store, path


def test_good_run_file_loads_with_null_as_nan(tmp_path):
    store, _ = _store(tmp_path, GOOD)
    r = store.load_run("mlp", 0, 1, metrics=("ndcg@10",))
    assert r["metrics"]["ndcg@10"][0] == 0.5 and r["metrics"]["ndcg@10"][1] != r["metrics"]["ndcg@10"][1]


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (lambda r: {}, "no 'model', 'seed', 'fold', 'query_ids', 'metrics'"),
        (lambda r: [], "not a JSON object"),
        (lambda r: {**r, "metrics": {**r["metrics"], "map": [0.25, 0.5]}}, r"'metrics.map' has 2 values"),
        (lambda r: {**r, "metrics": {**r["metrics"], "map": [0.25, "x", 0.5]}}, r"'metrics.map'\[1\]"),
        (lambda r: {**r, "metrics": {**r["metrics"], "map": [0.25, True, 0.5]}}, r"'metrics.map'\[1\]"),
        (lambda r: {**r, "metrics": {**r["metrics"], "map": 0.5}}, "'metrics.map' must be a list"),
        (lambda r: {**r, "metrics": {}}, "'metrics' must map"),
        (lambda r: {**r, "query_ids": ["q1", "q1", "q3"]}, "twice"),
        (lambda r: {**r, "query_ids": [1, 2, 3]}, "'query_ids' must be a list of strings"),
        (lambda r: {**r, "seed": "0"}, "'seed' must be an integer"),
        (lambda r: {**r, "fold": 2}, "'fold' is 2, its path says 1"),
        (lambda r: {**r, "model": "dcm"}, "'model' is 'dcm'"),
        (lambda r: {**r, "split": {"queries": {"train": 1}}}, "'split.queries'"),
        (lambda r: {**r, "split": [1]}, "'split' must be a JSON object"),
        (lambda r: {**r, "metrics": {"map": [1, 1, 1]}}, r"no per-query values of \['ndcg@10'\]"),
    ],
)
def test_bad_run_files_are_named_errors(tmp_path, change, pattern):
    store, path = _store(tmp_path, change(json.loads(json.dumps(GOOD))))
    with pytest.raises(ValueError, match=pattern) as info:
        store.load_run("mlp", 0, 1, metrics=("ndcg@10",))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_or_infinite_metric_is_refused(tmp_path, token):
    """Python's json reads NaN / Infinity literals: a NaN in a metric list would silently change a mean
    (null is the only way to leave a query out)."""
    text = json.dumps(GOOD).replace("0.75", token)
    store, _ = _store(tmp_path, text)
    with pytest.raises(ValueError, match=r"'metrics.map'\[2\].*finite number or null"):
        store.load_run("mlp", 0, 1)


@pytest.mark.parametrize("text", ["", "{", "[" * 100000, '{"seed": ' + "9" * 5000 + "}"])
def test_unreadable_run_files(tmp_path, text):
    store, path = _store(tmp_path, text)
    with pytest.raises(ValueError, match="unreadable run file") as info:
        store.load_run("mlp", 0, 1)
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match="unreadable run file") as info:  # `ctxrank compare` reads it alike
        load_runs(str(path))
    assert str(path) in str(info.value)


def test_short_metric_list_cannot_change_a_comparison(tmp_path):
    """The issue's case: B's list one value short silently paired the wrong queries; now an error."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(GOOD))
    short = json.loads(json.dumps(GOOD))
    short["metrics"]["map"] = [0.9, 0.9]
    b.write_text(json.dumps(short))
    with pytest.raises(ValueError, match=rf"{b}: malformed file: 'metrics.map' has 2 values"):
        compare_runs(load_runs(str(a)), load_runs(str(b)))
    nan = json.dumps(GOOD).replace("0.75", "NaN")
    b.write_text(nan)
    with pytest.raises(ValueError, match="finite number or null"):
        load_runs(str(b))


def test_evaluate_json_output_is_checked_too(tmp_path):
    f = tmp_path / "e.json"
    f.write_text(json.dumps({"query_ids": ["a", "b"], "per_query": {"map": [0.5]}}))
    with pytest.raises(ValueError, match=r"'metrics\.map' has 1 values for 2"):
        load_runs(str(f))


def test_unit_files(tmp_path):
    store = RunStore(tmp_path)
    path = store.unit_path(0, 1)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"seed": 0, "query_ids": ["a", "b"], "anomaly_score": [0.1, None]}))
    assert store.load_unit(0, 1)["anomaly_score"][0] == 0.1
    cases = [({}, "'query_ids'"), ({"query_ids": ["a"], "anomaly_score": [1, 2]}, "2 values for 1")]
    for bad, pattern in [*cases, ([], "not a JSON object")]:
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=pattern):
            store.load_unit(0, 1)
