"""Fuzzing of untrusted metadata: ``ctxrank.json`` of real tiny saved models of several kinds
(a neural model, a re-ranking model and its initial ranker, LambdaMART, RankSVM) and experiment run
files, each mutated at a few random places (values replaced by hostile ones: huge or negative
integers, wrong types, path tricks, nested containers; keys deleted). Loading must give a result or a
``ValueError``, never another exception, a hang (SIGALRM guard) or a huge allocation (an address-space
cap a few GiB above the process's size while the example runs).

Conventions of ``tests/e2e/test_fuzz.py``: derandomized and bounded in ``make test``; ``make fuzz``
(``CTXRANK_FUZZ_EXAMPLES``) runs more, random examples.
"""

from __future__ import annotations

import contextlib
import copy
import json
import resource
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from ctxrank.experiments.compare import load_runs
from ctxrank.experiments.store import RunStore
from ctxrank.training.checkpoint import load_model
from tests import saved_models as sm
from tests.e2e.test_fuzz import EXAMPLES, FUZZ, time_limit

HANG_SECONDS = 30
HEADROOM = 4 * 2**30  # bytes of address space an example may add


@contextlib.contextmanager
def memory_cap():
    """Cap the address space at the current size + HEADROOM (a huge allocation fails as MemoryError)."""
    try:
        size = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
        old = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (size + HEADROOM, old[1]))
    except (OSError, ValueError):  # no /proc or no rlimit: run uncapped
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2, 3, 4, 2**24, 2**31, 2**63, 10**7]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from([".", "..", "/", "/etc", "initial", "../initial", "initial/..", "./initial", "x" * 300,
                     "mlp", "qilcm", "lambdamart", "torch", "lightgbm", "ranksvm", "minmax", "none"]),
    st.lists(st.integers(-10, 2**40), max_size=5),
    st.lists(st.floats(), max_size=4),
    st.dictionaries(st.text(max_size=6), st.integers(-5, 2**33), max_size=3),
    st.recursive(st.integers(0, 3), lambda c: st.lists(c, max_size=3), max_leaves=20),
)  # fmt: skip


def _paths(value, prefix=()):
    """Every path (tuple of keys / indices) into a parsed JSON value, the root excluded."""
    out = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        out.append((*prefix, k))
        out.extend(_paths(v, (*prefix, k)))
    return out


def mutate(data, value):
    """``value`` with 1-3 places replaced by hostile values or deleted."""
    value = copy.deepcopy(value)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = _paths(value)
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = value
        for k in path[:-1]:
            parent = parent[k]
        if data.draw(st.booleans(), label="delete"):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(HOSTILE, label="value")
    return value


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return sm.build(tmp_path_factory.mktemp("saved"))


def _outcome(fn):
    """Run ``fn`` under the hang guard and the memory cap: its result or the ValueError."""
    with time_limit(HANG_SECONDS), memory_cap():
        try:
            return fn()
        except ValueError as exc:
            assert "\n" not in str(exc).strip(), str(exc)
            return exc


@pytest.mark.parametrize("target", [*sm.KINDS, "rerank/initial"])
def test_fuzz_model_metadata(models, target):
    kind, _, sub = target.partition("/")
    original = sm.read(models[kind] / sub)

    @settings(FUZZ, max_examples=max(10, EXAMPLES // 4))
    @given(data=st.data())
    def run(data):
        meta = mutate(data, original)
        with tempfile.TemporaryDirectory() as tmp:
            d = sm.copy(models[kind], Path(tmp) / "m")
            (d / sub / "ctxrank.json").write_text(json.dumps(meta))
            if sub:  # the enclosing model's digest of it, recomputed: the fuzz reaches the inner loader
                sm.rehash(d)
            note(json.dumps(meta)[:2000])
            _outcome(lambda: load_model(d))

    run()


@pytest.fixture(scope="module")
def onnx_file(models, tmp_path_factory):
    """The mlp model exported to ONNX, and its ctxrank.json metadata."""
    onnx = pytest.importorskip("onnx")
    from ctxrank.export import export_model

    path = tmp_path_factory.mktemp("onnx") / "mlp.onnx"
    export_model(models["mlp"], "onnx", path)
    (entry,) = [e for e in onnx.load(str(path)).metadata_props if e.key == "ctxrank.json"]
    return path, json.loads(entry.value)


def test_fuzz_onnx_metadata(onnx_file):
    """The ``ctxrank.json`` metadata of an exported ONNX file, mutated: ``OnnxRanker`` loads it or
    refuses it with one ValueError (a TypeError, an AttributeError or a string read as a boolean is a
    failure)."""
    import onnx

    from ctxrank.serving.onnx_ranker import OnnxRanker

    path, original = onnx_file
    proto = onnx.load(str(path))
    (entry,) = [e for e in proto.metadata_props if e.key == "ctxrank.json"]

    @settings(FUZZ, max_examples=max(10, EXAMPLES // 4))
    @given(data=st.data())
    def run(data):
        meta = mutate(data, original)
        key = data.draw(st.sampled_from([*sorted(original), "ensemble", "rerank", "unknown"]), label="key")
        meta[key] = data.draw(HOSTILE, label="top-level value")  # most leaves are deep: aim at the keys too
        note(json.dumps(meta)[:2000])
        entry.value = json.dumps(meta)
        with tempfile.TemporaryDirectory() as tmp:
            onnx.save(proto, str(Path(tmp) / "m.onnx"))
            ranker = _outcome(lambda: OnnxRanker(Path(tmp) / "m.onnx"))
        if not isinstance(ranker, ValueError):  # loaded: what it read is what the file says, typed
            assert ranker.allow_missing is meta.get("missing_values", False)
            assert list(ranker.feature_names) == meta["feature_names"]

    run()


GOOD_RUN = {
    "model": "mlp",
    "seed": 0,
    "fold": 1,
    "query_ids": ["q1", "q2", "q3"],
    "metrics": {"ndcg@10": [0.5, None, 1.0], "map": [0.25, 0.5, 0.75]},
    "split": {"queries": {"train": 6, "valid": 2, "test": 3}},
    "summary": {"best_epoch": 1},
    "seconds": 1.5,
}


@settings(FUZZ)
@given(data=st.data())
def test_fuzz_run_files(data):
    record = mutate(data, GOOD_RUN)
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(tmp)
        path = store.run_path("mlp", 0, 1)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(record))
        note(json.dumps(record)[:2000])
        _outcome(lambda: store.load_run("mlp", 0, 1, metrics=("ndcg@10", "map")))
        _outcome(lambda: load_runs(str(path)))
        unit = {"seed": 0, "query_ids": record.get("query_ids"), "anomaly_score": record.get("metrics")}
        store.unit_path(0, 1).parent.mkdir(parents=True)
        store.unit_path(0, 1).write_text(json.dumps(unit))
        _outcome(lambda: store.load_unit(0, 1))
    shutil.rmtree(tmp, ignore_errors=True)
