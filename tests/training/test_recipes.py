"""The training recipes: input transforms (tests/data/test_transforms.py has their formulas), input noise,
residual re-ranking, seed ensembles; and one tiny `ctxrank train` on MQ2008 per new loss and option."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from ctxrank.cli import main
from ctxrank.config import RerankConfig, RunConfig, TrainConfig, resolve_config
from ctxrank.data.lists import ListBatch, initial_order
from ctxrank.data.transforms import make_transform
from ctxrank.fit_summary import FitSummary
from ctxrank.losses import LOSSES
from ctxrank.models.residual import Residual
from ctxrank.registry import MODELS, make_model
from ctxrank.training.checkpoint import TorchPredictor, load_model
from ctxrank.training.ensemble import EnsemblePredictor
from ctxrank.training.loop import _with_input_noise, fit
from ctxrank.training.rerank import RerankPredictor, prepare_split
from ctxrank.training.rerank_spec import RerankSpec
from ctxrank.training.run import _keep_initial_if_better, _mean_metric, run_training
from tests.conftest import make_ranking_data

SMALL = {
    "dlcm": {"encoder_widths": [8, 8]},
    "dcm": {"embed": 8, "hidden": 8},
    "attn": {"d_fc": 8, "heads": 2, "d_ff": 8, "blocks": 2},
    "setrank": {"d_model": 8, "heads": 2, "d_ff": 8, "blocks": 2},
}


@pytest.fixture(scope="module")
def splits():
    return tuple(make_ranking_data(n_queries=n, seed=s) for n, s in ((30, 0), (12, 1), (12, 2)))


# ----------------------------------------------------------------------------------------------------
# Input noise (train.input_noise)
# ----------------------------------------------------------------------------------------------------


def test_input_noise_touches_real_items_only():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    batch = ListBatch(
        features=torch.zeros(2, 3, 4), labels=torch.zeros(2, 3), mask=mask, query_index=torch.arange(2)
    )
    assert _with_input_noise(batch, 0.0) is batch
    torch.manual_seed(0)
    noisy = _with_input_noise(batch, 0.5)
    assert torch.equal(noisy.features[~mask], torch.zeros_like(noisy.features[~mask]))
    assert (noisy.features[mask] != 0).all()
    assert noisy.features[mask].std().item() == pytest.approx(0.5, rel=0.5)
    assert torch.equal(batch.features, torch.zeros(2, 3, 4))  # the input batch is not modified


def test_input_noise_option():
    with pytest.raises(ValueError, match=r"train\.input_noise must be a number >= 0"):
        TrainConfig(input_noise=-0.1)
    c = resolve_config(None, ["model=mlp", "train.input_noise=0.2"])
    assert c.train.input_noise == 0.2 and c.to_dict()["train"]["input_noise"] == 0.2


def _weights(splits, **train):
    train_d, valid_d, _ = splits
    torch.manual_seed(0)
    model = make_model("mlp", train_d.n_features, {"hidden": [8]})
    fit(model, LOSSES["listnet"], train_d, valid_d, TrainConfig(max_epochs=2, **train), progress=False)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_input_noise_is_seeded_and_changes_training(splits):
    noisy = _weights(splits, input_noise=0.3)
    assert torch.equal(noisy, _weights(splits, input_noise=0.3))  # reproducible
    assert not torch.equal(noisy, _weights(splits))  # and really applied


# ----------------------------------------------------------------------------------------------------
# Residual re-ranking (rerank.residual)
# ----------------------------------------------------------------------------------------------------


class _FixedInitial:
    """An initial ranker returning given scores."""

    def __init__(self, scores, n_features):
        self.scores, self.n_features = scores, n_features

    def predict(self, data):
        return self.scores


def _residual_models():
    return [n for n, c in sorted(MODELS.items()) if c.traits.torch_module and not c.traits.own_objective]


@pytest.mark.parametrize("name", _residual_models())
def test_untrained_residual_reranker_reproduces_the_initial_order_exactly(name, splits):
    data = splits[2]
    rng = np.random.default_rng(3)
    init = np.round(rng.normal(size=data.n_items), 1) * 1e3 + 0.25  # many exact ties
    init[:4] = 7.0  # ties at the top of the first query
    split = prepare_split(data, init, k=6, rank_feature=True)
    torch.manual_seed(0)
    model = Residual(make_model(name, split.top.n_features, SMALL.get(name, {})))
    assert model.gate.item() == 0.0
    config = RunConfig(model=name, rerank=RerankConfig(initial="lambdamart", residual=True))
    reranker = TorchPredictor(model, make_transform("minmax").fit(split.top), config, {"n_features": 6})
    spec = RerankSpec(top_k=6, rank_feature=True, score_feature=False)
    final = RerankPredictor(_FixedInitial(init, data.n_features), reranker, spec).predict(data)
    # the re-ranked order of every query is the initial order, ties included
    order = np.lexsort((-final, data.query_index))
    np.testing.assert_array_equal(order, initial_order(data, init))
    # and the top-k scores are the initial scores themselves
    top = reranker.predict(split.top, init_scores=split.top_initial_scores)
    np.testing.assert_array_equal(top, split.top_initial_scores.astype(np.float64))


def test_residual_training_loss_sees_init_plus_gated_correction(splits):
    data = splits[0]
    inner = make_model("mlp", data.n_features, {"hidden": [8]})
    model = Residual(inner)
    seen = {}

    def loss(scores, labels, mask, **kw):
        seen["scores"] = scores
        return LOSSES["listnet"](scores, labels, mask)

    from ctxrank.data.lists import iterate_batches

    init = np.arange(data.n_items, dtype=np.float32)
    batch = next(iter(iterate_batches(data, 4, init_scores=init)))
    with torch.no_grad():
        model.gate.fill_(0.5)
    value = model.training_loss(batch, loss)
    expected = batch.init_scores + 0.5 * inner.score_batch(batch)
    torch.testing.assert_close(seen["scores"][batch.mask], expected[batch.mask])
    value.backward()
    assert model.gate.grad is not None and all(p.grad is not None for p in inner.parameters())


def test_residual_keeps_the_initial_order_unless_validation_gains(splits):
    valid = splits[1]
    model = Residual(make_model("mlp", valid.n_features, {"hidden": [8]}))
    with torch.no_grad():
        model.gate.fill_(0.7)
    perfect = valid.labels.astype(np.float32)  # initial scores that rank perfectly: NDCG 1
    summary = FitSummary(best_valid_metric=0.8, best_epoch=3)
    tc = TrainConfig()
    kept = _keep_initial_if_better(model, _mean_metric(perfect, valid, tc), tc, summary)
    assert kept.residual == {"initial_valid_metric": 1.0, "kept_initial": True}
    assert model.gate.item() == 0.0 and kept.best_epoch == 0 and kept.best_valid_metric == 1.0
    with torch.no_grad():
        model.gate.fill_(0.7)
    worse = -perfect  # initial scores that rank worst
    trained = _keep_initial_if_better(model, _mean_metric(worse, valid, tc), tc, summary)
    assert not trained.residual["kept_initial"]
    assert model.gate.item() == pytest.approx(0.7) and trained.best_epoch == 3


def test_residual_option_errors():
    with pytest.raises(ValueError, match=r"rerank\.residual = true needs an initial ranker"):
        resolve_config(None, ["model=mlp", "rerank.residual=true"])
    with pytest.raises(ValueError, match=r"rerank\.residual must be true or false"):
        resolve_config(None, ["model=mlp", "rerank.initial=lambdamart", "rerank.residual=1"])
    with pytest.raises(ValueError, match=r"rerank\.residual: arsm trains its own"):
        resolve_config(None, ["model=arsm", "rerank.initial=lambdamart", "rerank.residual=true"])
    with pytest.raises(ValueError, match="init_scores are required"):
        Residual(make_model("mlp", 3, {}))(torch.zeros(1, 2, 3), torch.ones(1, 2, dtype=torch.bool))


# ----------------------------------------------------------------------------------------------------
# Seed ensembles (ensemble = k)
# ----------------------------------------------------------------------------------------------------


def test_ensemble_is_the_mean_of_its_members(splits, tmp_path):
    train, valid, test = splits
    config = resolve_config(
        None, ["model=mlp", "model_params.hidden=[8]", "train.max_epochs=2", "ensemble=3"]
    )
    assert config.to_dict()["ensemble"] == 3
    result = run_training(config, train, valid, test, out=tmp_path / "ens", progress=False)
    meta = json.loads((tmp_path / "ens" / "ctxrank.json").read_text())
    assert meta["kind"] == "ensemble" and meta["members"] == ["member-0", "member-1", "member-2"]
    assert meta["training"]["seeds"] == [0, 1, 2]
    members = [load_model(tmp_path / "ens" / m) for m in meta["members"]]
    seeds = [m.config.train.seed for m in members]
    assert seeds == [0, 1, 2]
    scores = [m.predict(test) for m in members]
    assert not np.array_equal(scores[0], scores[1])  # different seeds, different models
    loaded = load_model(tmp_path / "ens")
    assert isinstance(loaded, EnsemblePredictor)
    np.testing.assert_allclose(loaded.predict(test), np.mean(scores, axis=0), rtol=1e-12)
    np.testing.assert_allclose(result.test_scores, np.mean(scores, axis=0), rtol=1e-12)



def test_an_ensemble_exports_as_one_graph_of_its_members_mean(splits, tmp_path):
    """``ctxrank export`` of an ensemble directory: one file whose scores are the mean of the members'
    own serving models (each exported alone too), for both formats; the file says how many members."""
    from ctxrank.export import EnsembleServing, example_inputs, export_model, serving_model

    train, valid, _ = splits
    options = ["model=mlp", "model_params.hidden=[8]", "train.max_epochs=2", "ensemble=3"]
    run_training(resolve_config(None, options), train, valid, None, out=tmp_path / "ens", progress=False)
    serving = serving_model(load_model(tmp_path / "ens"))
    assert isinstance(serving, EnsembleServing) and len(serving.members) == 3
    # every member's weights once: 3 x the parameters of one member, each under members.i
    keys = list(serving.state_dict())
    assert all(k.startswith("members.") for k in keys)
    assert len(keys) == 3 * len(serving.members[0].state_dict())
    members = [serving_model(load_model(tmp_path / "ens" / f"member-{i}")) for i in range(3)]
    inputs = example_inputs(members[0], 4, 6, seed=2)
    with torch.no_grad():
        alone = [m(*inputs) for m in members]
        assert not torch.equal(alone[0], alone[1])
        torch.testing.assert_close(serving(*inputs), torch.stack(alone).mean(0), rtol=0, atol=1e-6)
    result = export_model(tmp_path / "ens", "torchscript", tmp_path / "ens.pt")
    assert result.meta["ensemble"] == 3 and result.meta["feature_names"] == list(train.feature_names)
    with torch.no_grad():
        got = torch.jit.load(str(tmp_path / "ens.pt"))(*inputs)
    torch.testing.assert_close(got, torch.stack(alone).mean(0), rtol=1e-5, atol=1e-5)
    cli = ["export", "--model", str(tmp_path / "ens"), "--format", "torchscript"]
    cli += ["--out", str(tmp_path / "e.pt")]
    assert main(cli) == 0 and (tmp_path / "e.pt").is_file()
    pytest.importorskip("onnxruntime")
    assert export_model(tmp_path / "ens", "onnx", tmp_path / "ens.onnx").meta["ensemble"] == 3


def test_ensemble_option_and_member_names(tmp_path):
    with pytest.raises(ValueError, match="ensemble must be a positive integer"):
        resolve_config(None, ["model=mlp", "ensemble=0"])
    d = tmp_path / "bad"
    d.mkdir()
    (d / "ctxrank.json").write_text(
        json.dumps({"format_version": 1, "kind": "ensemble", "members": ["../x"]})
    )
    with pytest.raises(ValueError, match=r"member '\.\./x' is not a member directory name"):
        load_model(d)


# ----------------------------------------------------------------------------------------------------
# One tiny `ctxrank train` on MQ2008 per new loss and option
# ----------------------------------------------------------------------------------------------------

QUICK = ["--set", "train.max_epochs=1", "--set", "train.threads=1", "--no-progress"]
RUNS = {
    "ranknet": ["--loss", "ranknet", "--set", "loss_params.sigma=2.0"],
    "lambdaloss": ["--loss", "lambdaloss", "--set", "loss_params.mu=5.0"],
    "approxndcg": ["--loss", "approxndcg", "--set", "loss_params.alpha=5.0"],
    "neuralndcg": [
        "--loss",
        "neuralndcg",
        "--set",
        "loss_params.transposed=true",
        "--set",
        "loss_params.k=10",
    ],
    "zscore-log1p": ["--set", "transform=zscore-log1p"],
    "query-zscore": ["--set", "transform=query-zscore"],
    "input_noise": ["--set", "train.input_noise=0.1"],
    "residual": ["--set", "rerank.initial=lambdamart", "--set", "rerank.residual=true"],
    "ensemble": ["--set", "ensemble=2"],
}


@pytest.mark.parametrize("what", sorted(RUNS))
def test_tiny_mq2008_run(what, tmp_path):
    out = tmp_path / what
    argv = ["train", "--model", "mlp", "--dataset", "mq2008", "--fold", "1", "--out", str(out)]
    assert main([*argv, "--set", "model_params.hidden=[16]", *QUICK, *RUNS[what]]) == 0
    meta = json.loads((out / "ctxrank.json").read_text())
    cfg = meta["run_config"]
    recorded = {
        "ranknet": cfg["loss_params"].get("sigma") == 2.0,
        "lambdaloss": cfg["loss_params"].get("mu") == 5.0,
        "approxndcg": cfg["loss_params"].get("alpha") == 5.0,
        "neuralndcg": cfg["loss_params"].get("transposed") is True,
        "zscore-log1p": cfg["transform"] == "zscore-log1p",
        "query-zscore": cfg["transform"] == "query-zscore",
        "input_noise": cfg["train"]["input_noise"] == 0.1,
        "residual": cfg["rerank"]["residual"] is True and "residual" in meta["training"],
        "ensemble": cfg["ensemble"] == 2 and meta["kind"] == "ensemble",
    }
    assert recorded[what], cfg
    if what in LOSSES:
        assert cfg["loss"] == what
    metrics = json.loads((out / "test_metrics.json").read_text())["metrics"]
    assert 0.1 < metrics["ndcg@10"] <= 1.0
    model = load_model(out)
    from ctxrank.data.letor import read_letor
    from tests.conftest import REPO

    test = read_letor(REPO / "src" / "ctxrank" / "datasets" / "mq2008" / "S5.txt.gz")
    assert np.isfinite(model.predict(test)).all()


def test_dataclass_fields_are_recorded():
    """Every new option is a field of the recorded config."""
    assert "input_noise" in {f.name for f in dataclasses.fields(TrainConfig)}
    assert "residual" in {f.name for f in dataclasses.fields(RerankConfig)}
    assert RunConfig().to_dict()["ensemble"] == 1
