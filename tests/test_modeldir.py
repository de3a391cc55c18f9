"""Untrusted model directories: every value of ``ctxrank.json`` is checked before anything
is allocated or recursed into, ``rerank.dir`` stays inside the directory, only regular files are read,
and LightGBM's ``model.txt`` is validated before LightGBM parses it. Every failure is a one-line
``ValueError`` naming the file, never another exception, a crash, a hang or a huge allocation."""

from __future__ import annotations

import json
import os
import re
import resource
import struct
import subprocess
import sys

import numpy as np
import pytest

from ctxrank.training.checkpoint import load_model
from tests import saved_models as sm
from tests.conftest import REPO
from tests.e2e.test_fuzz import time_limit


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return sm.build(tmp_path_factory.mktemp("saved"))


def _refused(directory, *patterns):
    with time_limit(30):
        with pytest.raises(ValueError) as info:
            load_model(directory)
    msg = str(info.value)
    assert "\n" not in msg, msg
    for p in patterns:
        assert re.search(p, msg), msg
    return msg


def test_every_kind_loads_and_predicts(models):
    from tests.conftest import make_ranking_data

    data = make_ranking_data(n_queries=12, n_features=3)
    for kind, directory in models.items():
        assert load_model(directory).predict(data).shape == (data.n_items,), kind


def test_every_kind_saves_a_run_in_one_call_as_training_saved_it(models, tmp_path):
    """``save_model_dir``, the one save of every kind of predictor (``training.run.save_result`` calls it): a
    loaded model saved again with its run config, summary and layout writes the same files (the
    re-ranking model its initial ranker too), byte for byte but for the digests of LightGBM's
    ``model.txt`` (a loaded booster writes it without its parameter block), and scores the same."""
    from ctxrank.config import RunConfig
    from ctxrank.data.ranking_data import RankingData
    from tests.conftest import make_ranking_data

    def unhashed(path):
        return re.sub(rb'"(model_)?sha256": ("[0-9a-f]{64}"|\{[^}]*\})', b"", path.read_bytes())

    data = make_ranking_data(n_queries=12, n_features=3)
    for kind in sm.KINDS:
        directory, meta, out = models[kind], sm.read(models[kind]), tmp_path / kind
        names = meta["feature_names"] or None
        layout = RankingData.from_arrays(np.zeros((1, meta["n_features"])), qid=[0], feature_names=names)
        config = RunConfig.from_saved(meta["run_config"])
        loaded = load_model(directory)
        loaded.save_model_dir(out, config, summary=meta["training"], layout=layout)
        files = sorted(p.relative_to(out) for p in out.rglob("*.*"))
        assert files == sorted(p.relative_to(directory) for p in directory.rglob("*.*") if p.suffix not in (
            ".png", ".jsonl")), kind  # the curves and the log are save_result's
        for rel in (f for f in files if f.name != "model.txt"):
            assert unhashed(out / rel) == unhashed(directory / rel), (kind, rel)
        np.testing.assert_array_equal(load_model(out).predict(data), loaded.predict(data))


# ------------------------------------------------------------------------------ sizes and types
def test_huge_tensor_request_is_refused_before_allocating(models, tmp_path):
    d = sm.copy(models["mlp"], tmp_path / "m")
    meta = sm.read(d)
    meta["n_features"] = 2**24  # with hidden [2**24]: a 1 PB weight matrix
    meta["feature_names"] = []
    meta["model_config"]["hidden"] = [2**24]
    meta["transform"]["n_features_in"] = None
    sm.write(d, meta)
    _refused(d, "ctxrank.json|model.safetensors")


def test_huge_tensor_request_allocates_nothing(models, tmp_path):
    """Under a 6 GiB address-space cap (a 4 TB tensor would fail with MemoryError or be killed)."""
    d = sm.copy(models["mlp"], tmp_path / "m")
    meta = sm.read(d)
    meta["model_config"]["hidden"] = [2**24]
    meta["n_features"] = 2**18  # a 2**42-element (16 TB) first layer
    meta["feature_names"] = []
    meta["transform"]["state"] = None  # unfitted: no per-feature state to check first
    sm.write(d, meta)
    code = (
        "import resource, sys; from ctxrank.training.checkpoint import load_model\n"
        "import torch\n"
        "resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))\n"
        f"try:\n    load_model({str(d)!r})\nexcept ValueError as e:\n    print('REFUSED', e); sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and "REFUSED" in r.stdout and "'model_config'" not in r.stderr, r.stderr[-2000:]
    assert "model.safetensors" in r.stdout and "'net.0.weight'" in r.stdout, r.stdout


@pytest.mark.parametrize(
    ("key", "value", "pattern"),
    [
        ("n_features", 2**70, "'n_features'"),
        ("n_features", "46", "'n_features'"),
        ("n_features", -1, "'n_features'"),
        ("model_config", {"hidden": [2**40]}, "model_config.hidden"),
        ("model_config", {"hidden": list(range(1, 200))}, "model_config.hidden"),
        ("model_config", {"hidden": [[4]]}, "model_config.hidden"),
        ("model_config", [], "'model_config'"),
        ("categorical_cardinalities", [2**40], "categorical_cardinalities"),
        ("transform", {"name": "minmax", "params": {"bogus": 1}}, "'transform'"),
        ("transform", None, "'transform'"),
        ("run_config", None, "'run_config'"),
        ("model", "lambdamart", "'model'"),
        ("model", ["mlp"], "'model'"),
        ("kind", {"x": 1}, "model kind"),
        ("format_version", 2, "unsupported model format"),
        ("table", {"query": 5}, "'table'"),
    ],
)
def test_bad_values_are_one_line_errors(models, tmp_path, key, value, pattern):
    d = sm.copy(models["mlp"], tmp_path / "m")
    meta = sm.read(d)
    meta[key] = value
    sm.write(d, meta)
    _refused(d, re.escape(str(d / "ctxrank.json")) + "|model.safetensors", pattern)


@pytest.mark.parametrize("kind", sm.KINDS)
def test_every_missing_key_is_a_value_error(models, tmp_path, kind):
    """Not a KeyError: each key of ctxrank.json deleted in turn (the ones a loader needs are named)."""
    src = models[kind]
    for key in sm.read(src):
        d = sm.copy(src, tmp_path / f"{kind}-{key}")
        meta = sm.read(d)
        del meta[key]
        sm.write(d, meta)
        try:
            with time_limit(30):
                load_model(d)
        except ValueError as exc:
            assert "\n" not in str(exc) and "ctxrank" in str(exc), (key, exc)


def test_deeply_nested_or_huge_metadata_is_refused(models, tmp_path):
    d = sm.copy(models["mlp"], tmp_path / "m")
    (d / "ctxrank.json").write_text("[" * 100000 + "]" * 100000)
    _refused(d, "nested")
    (d / "ctxrank.json").write_text('{"format_version": 1, "x": ' + "[" * 40 + "]" * 40 + "}")
    _refused(d, "nested deeper")
    (d / "ctxrank.json").write_text('{"format_version": NaN}')
    _refused(d, "unreadable model metadata")
    (d / "ctxrank.json").write_text('{"format_version": ' + "9" * 5000 + "}")
    _refused(d, "unreadable model metadata")


# ---------------------------------------------------------------------------------- weights file
def test_weights_fifo_is_refused_without_blocking(models, tmp_path):
    d = sm.copy(models["mlp"], tmp_path / "m")
    (d / "model.safetensors").unlink()
    os.mkfifo(d / "model.safetensors")
    _refused(d, "model.safetensors", "not a regular file")


def test_metadata_that_is_a_device_or_fifo_is_refused(models, tmp_path):
    d = sm.copy(models["mlp"], tmp_path / "m")
    (d / "ctxrank.json").unlink()
    (d / "ctxrank.json").symlink_to("/dev/zero")
    _refused(d, "ctxrank.json", "not a regular file")
    (d / "ctxrank.json").unlink()
    os.mkfifo(d / "ctxrank.json")
    _refused(d, "ctxrank.json", "not a regular file")


def _header(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _write_safetensors(path, header, body):
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + body)


@pytest.mark.parametrize("lie", ["shape", "offsets", "header_length", "dtype", "extra"])
def test_safetensors_header_that_lies_is_refused(models, tmp_path, lie):
    d = sm.copy(models["mlp"], tmp_path / "m")
    w = d / "model.safetensors"
    header, body = _header(w)
    name = next(k for k in header if k != "__metadata__")
    if lie == "shape":
        header[name]["shape"] = [2**40, 2**40]
    elif lie == "offsets":
        header[name]["data_offsets"] = [0, 2**62]
    elif lie == "dtype":
        header[name]["dtype"] = "F64"
    elif lie == "extra":
        header["extra"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
    _write_safetensors(w, header, body)
    if lie == "header_length":
        w.write_bytes(struct.pack("<Q", 2**63) + w.read_bytes()[8:])
    sm.rehash(d)  # an attacker records the new file's digest: the header checks must refuse it
    msg = _refused(d, "model.safetensors")
    assert "changed after it was saved" not in msg, msg


# --------------------------------------------------------------------------------------- rerank.dir
@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        (".", "not inside"),
        ("", "rerank.dir"),
        ("/tmp", "relative path"),
        ("../x", "relative path"),
        ("initial/../..", "relative path"),
        ("nowhere", "records no SHA-256 of nowhere/ctxrank.json"),
        (5, "rerank.dir"),
    ],
)
def test_rerank_dir_must_stay_inside(models, tmp_path, value, pattern):
    d = sm.copy(models["rerank"], tmp_path / "r")
    meta = sm.read(d)
    meta["rerank"]["dir"] = value
    sm.write(d, meta)
    _refused(d, pattern)


def test_rerank_dir_symlink_escape_is_refused(models, tmp_path):
    d = sm.copy(models["rerank"], tmp_path / "r")
    outside = sm.copy(d / "initial", tmp_path / "outside")
    meta = sm.read(d)
    meta["rerank"]["dir"] = "link"
    sm.write(d, meta)
    (d / "link").symlink_to(outside)
    _refused(d, "not inside the model directory")


def test_rerank_chain_is_refused(models, tmp_path):
    """A re-ranking model whose initial ranker is itself a re-ranking model (a chain, or a loop back to
    the top): at most one level."""
    d = sm.copy(models["rerank"], tmp_path / "r")
    inner = tmp_path / "r" / "inner"
    sm.copy(models["rerank"], inner)
    meta = sm.read(d)
    meta["rerank"]["dir"] = "inner"
    sm.write(d, meta)
    sm.rehash(d)
    _refused(d, "nests at most one level")
    meta["rerank"]["dir"] = "inner/initial"  # a real initial ranker, nested deeper: fine
    sm.write(d, meta)
    sm.rehash(d)
    load_model(d)


@pytest.mark.parametrize(
    ("key", "value"), [("top_k", 0), ("top_k", "5"), ("rank_feature", 1), ("score_feature", None)]
)
def test_rerank_options_are_checked(models, tmp_path, key, value):
    d = sm.copy(models["rerank"], tmp_path / "r")
    meta = sm.read(d)
    meta["rerank"][key] = value
    sm.write(d, meta)
    _refused(d, f"rerank.{key}")


def test_rerank_feature_count_must_match_the_initial_ranker(models, tmp_path):
    d = sm.copy(models["rerank"], tmp_path / "r")
    meta = sm.read(d)
    meta["rerank"]["rank_feature"] = not meta["rerank"]["rank_feature"]
    sm.write(d, meta)
    _refused(d, "initial ranker")


# ------------------------------------------------------------------------------- LightGBM text
def _tree0(text):
    a = text.index("Tree=0")
    b = text.index("Tree=1") if "Tree=1" in text else text.index("end of trees")
    return a, b


def _edit_tree(text, key, new_value):
    """Replace ``key=`` of Tree=0, keeping tree_sizes consistent (so only the tree itself is wrong)."""
    a, b = _tree0(text)
    block = re.sub(rf"(?m)^{key}=.*$", f"{key}={new_value}", text[a:b], count=1)
    sizes = re.search(r"(?m)^tree_sizes=(.*)$", text).group(1).split(" ")
    sizes[0] = str(len(block.encode()))
    text = text[:a] + block + text[b:]
    return re.sub(r"(?m)^tree_sizes=.*$", "tree_sizes=" + " ".join(sizes), text, count=1)


def _lgb_refused(models, tmp_path, text, *patterns):
    d = sm.copy(models["lambdamart"], tmp_path / f"l{len(list(tmp_path.iterdir()))}")
    sm.write_model_text(d, text)
    return _refused(d, "model.txt", *patterns)


@pytest.fixture
def lgb_text(models):
    return (models["lambdamart"] / "model.txt").read_text()


def test_lightgbm_out_of_range_feature(models, tmp_path, lgb_text):
    _lgb_refused(models, tmp_path, _edit_tree(lgb_text, "split_feature", "99 0"), "split_feature 99")


def test_lightgbm_child_cycle(models, tmp_path, lgb_text):
    _lgb_refused(models, tmp_path, _edit_tree(lgb_text, "left_child", "0 -1"), "cycle|reached twice")
    _lgb_refused(models, tmp_path, _edit_tree(lgb_text, "left_child", "7 -1"), "out of range")


def test_lightgbm_nan_threshold(models, tmp_path, lgb_text):
    _lgb_refused(models, tmp_path, _edit_tree(lgb_text, "threshold", "nan 0.5"), "threshold")
    _lgb_refused(models, tmp_path, _edit_tree(lgb_text, "leaf_value", "1e999 0 0"), "leaf_value")


def test_lightgbm_truncated_file(models, tmp_path, lgb_text):
    end = lgb_text.index("end of trees")
    for cut in (end // 2, end - 30, end + 5, 10, 0):  # (after 'end of trees' nothing is read)
        _lgb_refused(models, tmp_path, lgb_text[:cut])


def test_lightgbm_huge_num_leaves(models, tmp_path, lgb_text):
    _lgb_refused(models, tmp_path, _edit_tree(lgb_text, "num_leaves", str(2**31 - 1)), "num_leaves")


def test_lightgbm_tree_sizes_and_header_lies(models, tmp_path, lgb_text):
    lied = re.sub(r"(?m)^tree_sizes=(\d+)", lambda m: f"tree_sizes={int(m.group(1)) + 10**6}", lgb_text)
    _lgb_refused(models, tmp_path, lied, "tree_sizes")
    wide = lgb_text.replace("max_feature_idx=2", "max_feature_idx=9")
    _lgb_refused(models, tmp_path, wide, "max_feature_idx")
    _lgb_refused(models, tmp_path, lgb_text.replace("num_class=1", "num_class=1\nbogus=1"), "unexpected")


def test_lightgbm_crafted_text_never_reaches_lightgbm(models, tmp_path, lgb_text):
    """The crafted files of the tests above, loaded in a child process: exit 0 with a ValueError (a
    LightGBM abort would be exit 134, a hang the timeout)."""
    d = sm.copy(models["lambdamart"], tmp_path / "l")
    sm.write_model_text(d, _edit_tree(lgb_text, "left_child", "0 -1"))
    code = (
        "from ctxrank.training.checkpoint import load_model\n"
        "from ctxrank.data.ranking_data import RankingData\n"
        f"try:\n    load_model({str(d)!r})\nexcept ValueError as e:\n    print('REFUSED', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and "REFUSED" in r.stdout, (r.returncode, r.stderr[-1000:])


def test_lightgbm_categorical_and_one_leaf_models_load(tmp_path):
    import dataclasses

    import numpy as np

    from ctxrank.baselines.lambdamart import LambdaMART
    from tests.conftest import make_ranking_data

    d = make_ranking_data(n_queries=30, n_features=2)
    cat = np.random.default_rng(0).integers(0, 8, size=(d.n_items, 1))
    d.labels[:] = (cat[:, 0] % 3).astype(np.float32)
    d = dataclasses.replace(d, categorical=cat, categorical_names=("c",), categorical_cardinalities=(8,))
    m = LambdaMART(n_estimators=2, num_leaves=4, min_data_in_leaf=2, early_stopping_rounds=None,
                   min_data_per_group=1, cat_smooth=0).fit(d)  # fmt: skip
    m.save(tmp_path / "cat")
    assert "num_cat=1" in (tmp_path / "cat" / "model.txt").read_text()
    np.testing.assert_array_equal(load_model(tmp_path / "cat").predict(d), m.predict(d))
    one = LambdaMART(n_estimators=2, min_data_in_leaf=10**6, early_stopping_rounds=None).fit(d)
    one.save(tmp_path / "one")
    np.testing.assert_array_equal(load_model(tmp_path / "one").predict(d), one.predict(d))


# ----------------------------------------------------------------------------------------- digests
#: files of a model directory that its loader does not read (records for people)
RECORDS = ("config.toml", "train_log.jsonl", "training_curves.png", "test_metrics.json")


def _flip_two_bytes(path):
    """Bit rot: two bytes near the end (the last tensor's values, where the header is not involved)."""
    raw = bytearray(path.read_bytes())
    for i in (len(raw) - 4, len(raw) - 9):
        raw[i] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("kind", [*sm.KINDS, "ensemble"])
def test_every_file_the_loader_reads_is_checked_against_its_recorded_digest(models, tmp_path, kind):
    """Two bytes flipped in any file of any kind of model directory (weights, model.txt, the initial
    ranker's and the members' files, nested): a one-line error naming that file; the records that the
    loader does not read may change."""
    from tests.conftest import make_ranking_data

    data = make_ranking_data(n_queries=12, n_features=3)
    files = sorted(p.relative_to(models[kind]) for p in models[kind].rglob("*") if p.is_file())
    checked = [f for f in files if f.name not in RECORDS and str(f) != "ctxrank.json"]
    assert kind == "ranksvm" or checked, files  # RankSVM keeps everything in ctxrank.json
    for rel in files:
        d = sm.copy(models[kind], tmp_path / f"{kind}-{len(list(tmp_path.iterdir()))}")
        _flip_two_bytes(d / rel)
        if rel in checked:
            msg = _refused(d, re.escape(f"{d / rel} was changed after it was saved: sha256 "), " expected ")
            assert re.search(r"sha256 [0-9a-f]{64} expected [0-9a-f]{64}", msg), msg
        elif rel.name in RECORDS:
            assert load_model(d).predict(data).shape == (data.n_items,)


def test_weights_of_another_run_with_the_same_shapes_are_refused(models, tmp_path):
    """The members of a seed ensemble have the same shapes and other values: swapping one's weights or
    a whole initial ranker of another run into a model is refused."""
    d = sm.copy(models["ensemble"], tmp_path / "e")
    (d / "member-0" / "model.safetensors").write_bytes((d / "member-1" / "model.safetensors").read_bytes())
    _refused(d, re.escape(str(d / "member-0" / "model.safetensors")), "changed after it was saved")
    r = sm.copy(models["rerank"], tmp_path / "r")
    (r / "model.safetensors").write_bytes((d / "member-1" / "model.safetensors").read_bytes())
    _refused(r, re.escape(str(r / "model.safetensors")), "changed after it was saved")
    r = sm.copy(models["rerank"], tmp_path / "r2")
    for name in ("ctxrank.json", "model.txt"):  # LambdaMART trained alone: the same kind, another run
        (r / "initial" / name).write_bytes((models["lambdamart"] / name).read_bytes())
    _refused(r, re.escape(str(r / "initial" / "ctxrank.json")), "changed after it was saved")


def test_the_digest_is_checked_before_the_weights_are_used(models, tmp_path, monkeypatch):
    import ctxrank.training.checkpoint as checkpoint

    def used(*_):
        raise AssertionError("the changed weights were parsed")

    monkeypatch.setattr(checkpoint, "_safetensors_header", used)
    monkeypatch.setattr(checkpoint, "build_model", used)
    d = sm.copy(models["mlp"], tmp_path / "m")
    _flip_two_bytes(d / "model.safetensors")
    _refused(d, "changed after it was saved")


def test_a_directory_saved_before_digests_loads_with_a_warning(models, tmp_path, capsys):
    """No ``"sha256"`` anywhere (what ctxrank wrote before): the model loads and predicts as before,
    with one warning that its integrity cannot be checked; on the command line, one line."""
    from ctxrank._modeldir import IntegrityWarning
    from ctxrank.cli import main
    from tests.conftest import make_ranking_data

    data = make_ranking_data(n_queries=12, n_features=3)
    for kind in ("mlp", "ensemble"):
        d = sm.copy(models[kind], tmp_path / kind)
        for path in d.rglob("ctxrank.json"):
            meta = sm.read(path.parent)
            meta.pop("sha256", None)  # LightGBM keeps its own model_sha256
            sm.write(path.parent, meta)
        with pytest.warns(IntegrityWarning, match="records no file digests.*cannot be checked") as caught:
            scores = load_model(d).predict(data)
        assert len(caught) == 1, [str(w.message) for w in caught]
        np.testing.assert_array_equal(scores, load_model(models[kind]).predict(data))
    file = tmp_path / "x.txt"
    file.write_text("1 qid:1 1:0.5 2:0.1 3:0.2\n0 qid:1 1:0.1 2:0.3 3:0.4\n")
    argv = ["predict", "--model", str(tmp_path / "mlp"), "--data", str(file), "--output", str(tmp_path / "s")]
    assert main(argv) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 1 and warned[0].startswith("ctxrank: warning:") and "cannot be checked" in warned[0]


def test_a_digest_record_without_the_file_or_of_another_type_is_refused(models, tmp_path):
    d = sm.copy(models["mlp"], tmp_path / "m")
    meta = sm.read(d)
    meta["sha256"] = {}
    sm.write(d, meta)
    _refused(d, "records no SHA-256 of model.safetensors")
    meta["sha256"] = ["x"]
    sm.write(d, meta)
    _refused(d, "'sha256' must be a JSON object")


# -------------------------------------------------------------------------------------- CLI
def test_cli_predict_with_a_crafted_model_exits_2_with_one_line(models, tmp_path, capsys):
    from ctxrank.cli import main

    d = sm.copy(models["rerank"], tmp_path / "r")
    meta = sm.read(d)
    meta["rerank"]["dir"] = "."
    sm.write(d, meta)
    data = tmp_path / "x.txt"
    data.write_text("1 qid:1 1:0.5 2:0.1 3:0.2\n0 qid:1 1:0.1 2:0.3 3:0.4\n")
    assert main(["predict", "--model", str(d), "--data", str(data), "--output", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ctxrank: error:") and "rerank.dir" in err[0], err
    assert not (tmp_path / "s").exists()


def test_cli_predict_with_changed_weights_exits_2_naming_the_file(models, tmp_path, capsys):
    from ctxrank.cli import main

    d = sm.copy(models["mlp"], tmp_path / "m")
    _flip_two_bytes(d / "model.safetensors")
    data = tmp_path / "x.txt"
    data.write_text("1 qid:1 1:0.5 2:0.1 3:0.2\n0 qid:1 1:0.1 2:0.3 3:0.4\n")
    assert main(["predict", "--model", str(d), "--data", str(data), "--output", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ctxrank: error: {d / 'model.safetensors'} was changed"), err
    assert not (tmp_path / "s").exists()


def test_rlimit_is_available():
    assert resource.getrlimit(resource.RLIMIT_AS)
