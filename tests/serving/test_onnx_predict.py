"""``ctxrank predict --model FILE.onnx``: an exported ranker or whole re-ranking pipeline scored with
onnxruntime alone (no torch imported), with the scores of ``predict --model DIR``."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ctxrank.cli import main
from tests.conftest import make_ranking_data

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A QILCM directory, a re-ranking directory (LambdaMART + MLP), their ONNX files, a LETOR file."""
    import torch

    from ctxrank.config import RerankConfig, RunConfig, TrainConfig, resolve_config
    from ctxrank.data.transforms import make_transform
    from ctxrank.export import export_model
    from ctxrank.registry import make_model
    from ctxrank.training.checkpoint import save_checkpoint
    from ctxrank.training.run import run_training

    root = tmp_path_factory.mktemp("onnx-predict")
    train, test = make_ranking_data(20, 10, 5, seed=1), make_ranking_data(6, 12, 5, seed=2)
    torch.manual_seed(0)
    small = {"encoder_width": 8, "att_hidden": [8], "rank_hidden": [8]}
    transform = make_transform("minmax").fit(train)
    config = resolve_config(None, ["model=qilcm", *(f"model_params.{k}={v}" for k, v in small.items())])
    save_checkpoint(root / "qilcm", make_model("qilcm", 5, small).eval(), config, transform, train_data=train)
    lgb = {"n_estimators": 3, "num_leaves": 3, "min_data_in_leaf": 2, "early_stopping_rounds": None}
    rerank = RunConfig(
        model="mlp",
        model_params={"hidden": [4]},
        train=TrainConfig(max_epochs=1, batch_size=8),
        rerank=RerankConfig(initial="lambdamart", top_k=4, initial_params=lgb),
    )
    with pytest.warns(UserWarning):  # the one-epoch re-ranker is worse than its trees: said, not a test
        run_training(rerank, train, train, out=root / "rerank", progress=False)
    for name in ("qilcm", "rerank"):
        export_model(root / name, "onnx", root / f"{name}.onnx")
    rows = zip(test.query_ids[test.query_index].tolist(), test.features.tolist(), strict=True)
    lines = (f"0 qid:{q[1:]} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(x)) for q, x in rows)
    (root / "test.txt").write_text("\n".join(lines) + "\n")
    return SimpleNamespace(root=root, test=test)


def _predicted(model: Path, data: Path, capsys, *extra: str) -> np.ndarray:
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", str(data), "-o", "-", *extra]) == 0
    return np.array([float(s) for s in capsys.readouterr().out.split()])


@pytest.mark.parametrize("name", ["qilcm", "rerank"])
def test_an_onnx_file_predicts_the_scores_of_its_model_directory(models, name, capsys):
    data = models.root / "test.txt"
    want = _predicted(models.root / name, data, capsys)
    got = _predicted(models.root / f"{name}.onnx", data, capsys)
    assert got.shape == (models.test.n_items,)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * (1 + np.abs(want).max()))


def test_predict_on_an_onnx_file_imports_no_torch(models):
    """In a fresh process: the scores are written and neither torch nor scikit-learn nor SciPy loaded."""
    out = models.root / "fresh.txt"
    code = (
        "import sys\nfrom ctxrank.cli import main\n"
        f"assert main(['predict', '--model', {str(models.root / 'rerank.onnx')!r}, '--data', "
        f"{str(models.root / 'test.txt')!r}, '-o', {str(out)!r}, '--overwrite']) == 0\n"
        "print(sorted(m for m in ('torch', 'sklearn', 'scipy', 'lightgbm') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert len(out.read_text().split()) == models.test.n_items


def test_an_onnx_file_scores_a_table_by_its_feature_names(models, tmp_path, capsys):
    """The columns are found by the names the file records, in any order; the query column is given."""
    import pandas as pd

    test = models.test
    names = [f"f{j + 1}" for j in range(5)]  # the names make_ranking_data gives
    assert list(test.feature_names) == names
    frame = pd.DataFrame(test.features, columns=names).iloc[:, ::-1]
    frame.insert(0, "session", test.query_ids[test.query_index])
    frame.to_csv(tmp_path / "t.csv", index=False)
    want = _predicted(models.root / "qilcm.onnx", models.root / "test.txt", capsys)
    got = _predicted(models.root / "qilcm.onnx", tmp_path / "t.csv", capsys, "--query-col", "session")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_onnx_predict_errors_are_one_line(models, tmp_path, capsys):
    frame_file = tmp_path / "t.csv"
    frame_file.write_text("q,f1\nq1,0.5\n")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a graph")
    cases = [
        (["--model", str(models.root / "qilcm.onnx"), "--data", str(frame_file)], "--query-col"),
        (["--model", str(models.root / "qilcm.onnx"), "--data", str(frame_file), "--query-col", "q"], "'f2'"),
        (["--model", str(broken), "--data", str(models.root / "test.txt")], "not an ONNX file"),
    ]
    for argv, words in cases:
        capsys.readouterr()
        assert main(["predict", *argv, "-o", "-"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("ctxrank: error:") and "\n" not in err and words in err, err


# ----------------------------------------------------------------------------- Ray Data, --shards
def _shards(models, tmp_path) -> Path:
    assert (
        main(["data-shards", str(models.root / "test.txt"), "--shards", "3", "--out", str(tmp_path / "s")])
        == 0
    )
    return tmp_path / "s"


@pytest.mark.slow
def test_ray_batch_scoring_of_shards_equals_single_process_predict(models, tmp_path, capsys):
    """The whole pipeline's graph over 3 shards with 2 Ray workers: every row once, the scores of
    ``predict --data`` on the same rows (a query is scored whole: a split one would change its scores)."""
    pytest.importorskip("ray")
    import pandas as pd
    import pyarrow.parquet as pq

    shards = _shards(models, tmp_path)
    argv = ["predict", "--model", str(models.root / "rerank.onnx"), "--shards", str(shards), "-o"]
    assert main([*argv, str(tmp_path / "scores"), "--workers", "2"]) == 0
    got = pd.read_parquet(tmp_path / "scores").sort_values(["shard", "row"], ignore_index=True)
    assert len(got) == models.test.n_items
    for name, part in got.groupby("shard"):  # each shard's rows, as one file scored in this process
        table = pq.read_table(shards / name).to_pandas()
        assert part["row"].tolist() == list(range(len(table)))
        assert part["qid"].tolist() == table["qid"].astype(str).tolist()
        features = table.drop(columns=["qid", "label"])
        lines = (
            f"0 qid:{q} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(x))
            for q, x in zip(table["qid"], features.to_numpy().tolist(), strict=True)
        )
        (tmp_path / "one.txt").write_text("\n".join(lines) + "\n")
        want = _predicted(models.root / "rerank.onnx", tmp_path / "one.txt", capsys)
        np.testing.assert_allclose(part["score"].to_numpy(), want, rtol=1e-6, atol=1e-6)


def test_shard_scoring_options_are_checked_before_ray_starts(models, tmp_path, capsys):
    shards = _shards(models, tmp_path)
    onnx, directory = str(models.root / "qilcm.onnx"), str(models.root / "qilcm")
    out, letor = str(tmp_path / "out"), str(models.root / "test.txt")
    (tmp_path / "held").mkdir()
    (tmp_path / "held" / "old.parquet").write_bytes(b"")
    cases = [
        (["--model", directory, "--shards", str(shards), "-o", out], "not a model directory"),
        (["--model", onnx, "--shards", str(tmp_path), "-o", out], "no *.parquet shard"),
        (["--model", onnx, "--shards", str(shards), "-o", str(tmp_path / "held")], "--overwrite"),
        (["--model", onnx, "--shards", str(shards), "-o", "-"], "give a directory"),
        (["--model", onnx, "--shards", str(shards), "-o", out, "--format", "trec"], "--format trec"),
        (["--model", onnx, "--shards", str(shards), "-o", out, "--data", "x.txt"], "--data"),
        (["--model", onnx, "--data", letor, "-o", out, "--address", "h:1"], "--address"),
    ]
    for argv, words in cases:
        capsys.readouterr()
        assert main(["predict", *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("ctxrank: error:") and "\n" not in err and words in err, err
    assert not (tmp_path / "out").exists()
