"""The serving path: ``RankingModule.serving_scores`` (QILCM's folded query normalization) equals ``forward``;
the ONNX file of a full-size QILCM under onnxruntime (one thread, all graph optimizations) gives the
scores of ``ctxrank predict``; the exported graph's ELU rewrite."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from ctxrank.cli import main
from ctxrank.config import resolve_config
from ctxrank.data.transforms import make_transform
from ctxrank.export import export_model
from ctxrank.export.write import _elu_as_exp
from ctxrank.registry import MODELS, make_model
from ctxrank.training.checkpoint import save_checkpoint
from tests.conftest import make_ranking_data

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
QILCMS = sorted(name for name in MODELS if name.startswith("qilcm"))
SMALL = {"encoder_width": 8, "att_hidden": [16], "rank_hidden": [16, 8]}


def _batch(seed: int, b: int = 5, n: int = 9, f: int = 6, constant: bool = False):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, n, f, generator=g)
    if constant:  # a feature constant in every list: eq. 8 divides its float32 rounding by ~eps
        x[:, :, 2] = 0.25
    lengths = torch.tensor([n, 1, 4, n - 1, 2])[:b]
    mask = torch.arange(n)[None, :] < lengths[:, None]
    return torch.where(mask[..., None], x, torch.zeros(())), mask


@pytest.mark.parametrize("name", QILCMS)
def test_qilcm_serving_scores_equal_forward_for_every_variant(name):
    torch.manual_seed(0)
    model = make_model(name, 6, dict(SMALL)).eval()
    x, mask = _batch(1)
    with torch.no_grad():
        ref, got = model(x, mask), model.serving_scores(x, mask)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got[mask].numpy(), ref[mask].numpy(), rtol=1e-5, atol=1e-6)
    # padding never changes a real item's score (the folded form pools over real items only)
    longer = torch.cat([x, torch.rand(5, 3, 6)], dim=1)
    more_mask = torch.cat([mask, torch.zeros(5, 3, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        padded = model.serving_scores(longer, more_mask)[:, :9]
    np.testing.assert_allclose(padded[mask].numpy(), got[mask].numpy(), rtol=1e-6, atol=1e-6)
    # a constant feature: both forms divide rounding noise of ~1e-8 by eps = 1e-5 (each is 6e-5 off a
    # float64 forward here); the tolerance of query-normalized models in tests/export/test_export.py (QN_TOL)
    x, mask = _batch(1, constant=True)
    with torch.no_grad():
        ref, got = model(x, mask), model.serving_scores(x, mask)
    np.testing.assert_allclose(got[mask].numpy(), ref[mask].numpy(), atol=1e-4 * (1 + ref.abs().max()))


def test_qilcm_serving_scores_with_categorical_columns():
    torch.manual_seed(1)
    model = make_model("qilcm", 6, dict(SMALL), categorical_cardinalities=(4, 3)).eval()
    x, mask = _batch(2)
    codes = torch.randint(0, 3, (*mask.shape, 2))
    with torch.no_grad():
        ref, got = model(x, mask, categorical=codes), model.serving_scores(x, mask, codes)
    np.testing.assert_allclose(got[mask].numpy(), ref[mask].numpy(), rtol=1e-5, atol=1e-5)


def test_every_other_model_serves_its_forward():
    for name in sorted(n for n in MODELS if n in ("mlp", "listnet", "dlcm", "dcm")):
        model = make_model(name, 6, {}).eval()
        x, mask = _batch(3)
        with torch.no_grad():
            assert torch.equal(model.serving_scores(x, mask), model(x, mask))


def test_the_elu_rewrite_matches_torch_also_with_alpha_and_in_a_loop(tmp_path):
    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.elu(x) + torch.nn.functional.elu(2 * x, alpha=0.5)

    x = torch.linspace(-30, 30, 6001).reshape(1, -1)
    path = tmp_path / "elu.onnx"
    torch.onnx.export(Net(), (x,), str(path), input_names=["x"], opset_version=17, dynamo=False)
    proto = onnx.load(str(path))
    loop = onnx.helper.make_graph([onnx.helper.make_node("Elu", ["y"], ["z"])], "body", [], [])
    proto.graph.node.append(onnx.helper.make_node("If", [], [], then_branch=loop, else_branch=loop))
    assert _elu_as_exp(proto.graph, onnx) == 4  # two at the top level, one in each branch
    assert not [n for n in proto.graph.node if n.op_type == "Elu"]
    del proto.graph.node[-1]  # the If only showed the recursion
    onnx.save(proto, str(path))
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, Net()(x).numpy(), rtol=1e-6, atol=3e-7)


def test_full_size_qilcm_onnx_under_onnxruntime_gives_the_scores_of_ctxrank_predict(tmp_path, capsys):
    """QILCM at its default widths on 136 features and 100-item lists, the serving benchmark's shape."""
    train, test = make_ranking_data(8, 100, 136, seed=1, min_len=100), make_ranking_data(3, 100, 136, seed=2)
    torch.manual_seed(0)
    model = make_model("qilcm", 136, {}).eval()
    transform = make_transform("minmax").fit(train)
    save_checkpoint(tmp_path / "m", model, resolve_config(None, ["model=qilcm"]), transform, train_data=train)
    export_model(tmp_path / "m", "onnx", tmp_path / "q.onnx")
    ops = {n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node}
    assert not ops & {"Elu", "Einsum"}  # ELU rewritten; pooling and the folded layer as MatMuls
    rows = zip(test.labels.tolist(), test.query_index.tolist(), test.features.tolist(), strict=True)
    lines = (f"{int(y)} qid:{q} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(x)) for y, q, x in rows)
    (tmp_path / "test.txt").write_text("\n".join(lines) + "\n")
    argv = ["predict", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "test.txt"), "-o", "-"]
    assert main(argv) == 0
    predicted = np.array([float(s) for s in capsys.readouterr().out.split()], dtype=np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(tmp_path / "q.onnx"), options, providers=["CPUExecutionProvider"])
    lengths = np.diff(test.query_offsets)
    features = np.zeros((test.n_queries, lengths.max(), 136), dtype=np.float32)
    mask = np.arange(lengths.max())[None, :] < lengths[:, None]
    features[mask] = test.features
    scores = session.run(["scores"], {"features": features, "mask": mask})[0][mask]
    np.testing.assert_allclose(scores, predicted, rtol=1e-5, atol=1e-5 * (1 + np.abs(predicted).max()))
