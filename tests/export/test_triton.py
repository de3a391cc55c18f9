"""``ctxrank export --triton-repo DIR``: the whole-pipeline ONNX file as a model of a Triton model
repository, its ``config.pbtxt`` parsed against Triton's own schema (``ModelConfig`` of
model_config.proto, as tritonclient ships it) with protobuf's text format."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from ctxrank.cli import main
from ctxrank.config import RerankConfig, RunConfig, TrainConfig
from ctxrank.serving.onnx_ranker import OnnxRanker
from ctxrank.training.run import run_training
from tests.conftest import make_ranking_data

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def rerank(tmp_path_factory):
    """A re-ranking model directory (3 trees, top 4, an MLP): its export is the whole-pipeline graph."""
    root = tmp_path_factory.mktemp("triton")
    train = make_ranking_data(12, 8, 5, seed=1)
    lgb = {"n_estimators": 3, "num_leaves": 3, "min_data_in_leaf": 2, "early_stopping_rounds": None}
    config = RunConfig(
        model="mlp",
        model_params={"hidden": [4]},
        train=TrainConfig(max_epochs=1, batch_size=8),
        rerank=RerankConfig(initial="lambdamart", top_k=4, initial_params=lgb),
    )
    run_training(config, train, train, out=root / "ranker", progress=False)
    return root / "ranker"


def test_the_triton_repository_layout_follows_tritons_model_config_schema(rerank, tmp_path, capsys):
    repo = tmp_path / "repo"
    assert main(["export", "--model", str(rerank), "--format", "onnx", "--triton-repo", str(repo)]) == 0
    assert f"tritonserver --model-repository {repo}" in capsys.readouterr().out
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")) == [
        "ranker", "ranker/1", "ranker/1/model.onnx", "ranker/config.pbtxt",
    ]  # fmt: skip
    # the schema: an unknown field, a misspelled enum or a wrong type is a ParseError here
    config = text_format.Parse((repo / "ranker" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert (config.name, config.backend, config.max_batch_size) == ("ranker", "onnxruntime", 64)
    assert config.default_model_filename == "model.onnx"
    dtype = model_config_pb2.DataType.Name
    assert [(t.name, dtype(t.data_type), list(t.dims)) for t in config.input] == [
        ("features", "TYPE_FP32", [-1, 5]),
        ("mask", "TYPE_BOOL", [-1]),
    ]
    assert [(t.name, dtype(t.data_type), list(t.dims)) for t in config.output] == [
        ("scores", "TYPE_FP32", [-1])
    ]
    # the dims agree with the graph: its first dimension (B) is the batch one, variable
    graph = onnx.load(str(repo / "ranker" / "1" / "model.onnx")).graph
    for value in [*graph.input, *graph.output]:
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_param and not dims[0].dim_value
    # the file is the pipeline's ONNX export, unchanged: it serves as `--out FILE` does
    assert (
        main(["export", "--model", str(rerank), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    )
    x, qid = np.random.default_rng(0).normal(size=(9, 5)).astype(np.float32), [0] * 6 + [1] * 3
    np.testing.assert_array_equal(
        OnnxRanker(repo / "ranker" / "1" / "model.onnx").predict(x, qid),
        OnnxRanker(tmp_path / "p.onnx").predict(x, qid),
    )


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--format", "torchscript", "--triton-repo", "REPO"], "--triton-repo writes an ONNX file"),
        (["--format", "onnx", "--triton-repo", "REPO", "--overwrite"], "no --overwrite"),
        (
            ["--format", "onnx", "--triton-repo", "REPO", "--triton-name", "a/b"],
            "Triton model name: expected",
        ),
        (["--format", "onnx", "--out", "x.onnx", "--triton-name", "m"], "--triton-name names the model of"),
        (["--format", "onnx", "--triton-repo", "REPO", "--triton-name", "taken"], "exists; give another"),
    ],
)
def test_triton_options_are_checked_before_any_work(rerank, tmp_path, capsys, extra, words):
    (tmp_path / "taken").mkdir()
    args = [a.replace("REPO", str(tmp_path)) for a in extra]
    assert main(["export", "--model", str(rerank), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # nothing written
