"""DASALC (Qin et al., ICLR 2021): the equations against a list written out, the masked batch norm against
torch's, padding and order invariants, gradients, the run defaults it implies (log1p transform, input
noise), training with several losses, tuning, re-ranking LambdaMART's top k and the estimator."""

import functools
import json
import math

import numpy as np
import pytest
import torch

from ctxrank.api import DASALCRanker, ListNetRanker
from ctxrank.config import RunConfig, resolve_config
from ctxrank.losses import LOSSES
from ctxrank.models.dasalc import DASALC, DASALCConfig, MaskedBatchNorm
from ctxrank.registry import MODELS, make_model
from ctxrank.training.loop import fit, seed_everything
from tests.conftest import make_ranking_data
from tests.model_checks import check_cli_tune_runs_two_trials, check_reranks_lambdamarts_top_k

SMALL = {"hidden": [8, 6], "attention_layers": 2, "heads": 2, "head_size": 3, "dropout": 0.0}
SMALL_SETS = [f"model_params.{k}={v}".replace(" ", "") for k, v in SMALL.items()]


def _model(n_features=4, seed=0, **params):
    torch.manual_seed(seed)
    return make_model("dasalc", n_features, {**SMALL, **params}).double()


def _batch(lengths, n_features=4, seed=0, pad_fill=0.0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    L = int(lengths.max())
    mask = torch.arange(L)[None, :] < lengths[:, None]
    x = torch.randn(len(lengths), L, n_features, generator=g, dtype=torch.float64)
    return torch.where(mask[..., None], x, torch.full_like(x, pad_fill)), mask


def _randomize_running_stats(model):
    g = torch.Generator().manual_seed(7)
    for m in model.modules():
        if isinstance(m, MaskedBatchNorm):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g))
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.bias.shape, generator=g))
    return model


# ---------------------------------------------------------------------------------------- equations
def _reference_scores(m: DASALC, x: torch.Tensor) -> torch.Tensor:
    """The module docstring's equations for ONE list ``x`` (n, F) in evaluation mode, written out with
    a loop over the heads (the layers' weights are the model's; the composition is written here)."""

    def bn(norm, v):
        return (v - norm.running_mean) / torch.sqrt(norm.running_var + norm.eps) * norm.weight + norm.bias

    z = bn(m.input_norm, x)
    h = z
    for layer, norm in zip(m.layers, m.layer_norms, strict=True):
        h = bn(norm, torch.relu(layer(h)))
    h = m.item_out(h)
    a = m.attention_in(z)
    for block in m.attention:
        E, H = a.shape[-1], block.heads
        d = E // H
        q, k, v = block.qkv(a).split(E, dim=-1)
        heads = []
        for j in range(H):
            cols = slice(j * d, (j + 1) * d)
            weights = torch.softmax(q[:, cols] @ k[:, cols].T / math.sqrt(d), dim=-1)  # (n, n)
            heads.append(weights @ v[:, cols])
        a = block.norm(a + block.out(torch.cat(heads, dim=-1)))
    c = m.context_out(bn(m.context_norm, a))
    return m.score(torch.relu((1 + c) * h)).squeeze(-1)  # the latent cross (1 + c) (.) h


def test_scores_match_the_equations_written_out():
    m = _randomize_running_stats(_model()).eval()
    x, mask = _batch([5, 3, 1])
    with torch.no_grad():
        got = m(x, mask)
        for b, n in enumerate(mask.sum(1).tolist()):
            torch.testing.assert_close(got[b, :n], _reference_scores(m, x[b, :n]), rtol=1e-10, atol=1e-12)


def test_a_zero_context_leaves_the_plain_feed_forward_ranker():
    """With ``c = 0`` the latent cross ``(1 + c) (.) h`` is ``h``: the scores are the item tower's alone and
    no longer depend on the other items of the list."""
    m = _randomize_running_stats(_model()).eval()
    with torch.no_grad():
        m.context_out.weight.zero_()
        m.context_out.bias.zero_()
    x, mask = _batch([5])
    with torch.no_grad():
        whole = m(x, mask)[0]
        alone = torch.stack([m(x[:, i : i + 1], mask[:, i : i + 1])[0, 0] for i in range(5)])
        torch.testing.assert_close(whole, alone, rtol=1e-12, atol=1e-12)
        m.context_out.bias.fill_(0.5)  # a context: the same scores scaled by 1.5 before the ReLU
        assert not torch.allclose(m(x, mask)[0], whole)


def test_the_context_makes_scores_depend_on_the_other_items():
    m = _randomize_running_stats(_model()).eval()
    x, mask = _batch([4])
    with torch.no_grad():
        before = m(x, mask)[0, 0]
        x2 = x.clone()
        x2[0, 3] += 3.0  # another item changes
        assert not torch.isclose(m(x2, mask)[0, 0], before)


# ----------------------------------------------------------------------------------- batch norm
def test_masked_batch_norm_is_torchs_batch_norm_of_the_real_items():
    torch.manual_seed(0)
    v = torch.randn(3, 5, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    garbage = torch.where(mask[..., None], v, torch.full_like(v, 1e6))  # padding must not count
    ours = MaskedBatchNorm(4, momentum=0.1)
    ref = torch.nn.BatchNorm1d(4, eps=1e-3, momentum=0.1)
    out = ours(garbage, mask)
    torch.testing.assert_close(out[mask], ref(v[mask]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours.running_mean, ref.running_mean)
    # running variance: the population variance (TensorFlow's, the authors' framework; torch's own
    # BatchNorm uses the unbiased one)
    real = v[mask].double()
    expected = 0.9 * 1.0 + 0.1 * real.var(0, unbiased=False)
    torch.testing.assert_close(ours.running_var, expected.float())
    # evaluation: the running statistics, a fixed affine map
    ours.eval()
    torch.testing.assert_close(
        ours(v, mask), (v - ours.running_mean) / torch.sqrt(ours.running_var + 1e-3), rtol=1e-6, atol=1e-6
    )


def test_a_batch_without_real_items_leaves_the_running_statistics():
    norm = MaskedBatchNorm(3, momentum=0.5)
    out = norm(torch.randn(2, 4, 3), torch.zeros(2, 4, dtype=torch.bool))
    assert torch.isfinite(out).all()
    assert torch.equal(norm.running_mean, torch.zeros(3)) and torch.equal(norm.running_var, torch.ones(3))


# ----------------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_padding_never_changes_real_scores(training):
    """Padded items enter neither an attention weight nor a batch statistic (dropout off)."""
    m = _randomize_running_stats(_model())
    m.train(training)
    x, mask = _batch([4, 2, 3], pad_fill=0.0)
    wide_x = torch.cat([x, torch.full((3, 5, 4), 1e6, dtype=torch.float64)], dim=1)  # garbage padding
    wide_mask = torch.cat([mask, torch.zeros(3, 5, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        wide = m(wide_x, wide_mask)[:, : mask.shape[1]]
        torch.testing.assert_close(wide[mask], m(x, mask)[mask], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_permutation_equivariance(training):
    m = _randomize_running_stats(_model())
    m.train(training)
    x, mask = _batch([6, 6])
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        torch.testing.assert_close(m(x[:, perm], mask)[:, :], m(x, mask)[:, perm], rtol=1e-10, atol=1e-12)


def test_eval_is_deterministic_and_the_seed_fixes_the_weights():
    x, mask = _batch([5, 2])
    a, b = _model(seed=3).eval(), _model(seed=3).eval()
    with torch.no_grad():
        assert torch.equal(a(x, mask), a(x, mask)) and torch.equal(a(x, mask), b(x, mask))
        assert not torch.equal(a(x, mask), _model(seed=4).eval()(x, mask))


def test_single_item_and_empty_lists_are_finite():
    m = _model(dropout=0.3)
    x, mask = _batch([1, 1, 3])
    mask[1] = False  # an empty row
    for training in (True, False):
        m.train(training)
        scores = m(x, mask)
        assert torch.isfinite(scores).all()
        loss = LOSSES["listnet"](scores, torch.ones_like(scores), mask)
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_gradcheck_float64(training):
    m = _randomize_running_stats(_model(hidden=[3], head_size=2))
    m.train(training)
    x, mask = _batch([3, 2], n_features=4)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: m(t, mask)[mask], (x,), eps=1e-6, atol=1e-5)


# ------------------------------------------------------------------------------ run defaults
def test_a_dasalc_run_uses_the_log1p_transform_and_input_noise_unless_it_sets_them():
    config = resolve_config(None, ["model=dasalc"])
    assert config.transform == "log1p-zscore" and config.train.input_noise == 1.5
    assert config.to_dict()["transform"] == "log1p-zscore"  # recorded, so a saved run reloads as it was
    back = RunConfig.from_dict(config.to_dict())
    assert (back.transform, back.train.input_noise) == ("log1p-zscore", 1.5)
    own = resolve_config(None, ["model=dasalc", "transform=minmax", "train.input_noise=0.0"])
    assert (own.transform, own.train.input_noise) == ("minmax", 0.0)
    other = resolve_config(None, ["model=mlp"])  # the other models keep the shared defaults
    assert (other.transform, other.train.input_noise) == ("minmax", 0.0)
    assert DASALCRanker().normalizer == "log1p-zscore" and DASALCRanker().input_noise == 1.5
    assert ListNetRanker().normalizer == "minmax" and ListNetRanker().input_noise == 0.0
    assert DASALCRanker(**{"max_epochs": 1}).run_config().train.input_noise == 1.5


def test_loss_defaults_to_the_softmax_cross_entropy():
    config = resolve_config(None, ["model=dasalc"])
    assert config.loss_name == "listnet" and config.effective_loss_params == {"label_transform": "identity"}


def test_config_validation():
    with pytest.raises(ValueError, match=r"model_params\.hidden must hold at least one width"):
        DASALCConfig(hidden=())
    with pytest.raises(ValueError, match=r"model_params\.heads must be a positive integer"):
        DASALCConfig(heads=0)
    with pytest.raises(ValueError, match=r"batch_norm_momentum must be in \(0, 1\]"):
        DASALCConfig(batch_norm_momentum=1.5)
    with pytest.raises(ValueError, match=r"model_params\.dropout must be < 1"):
        DASALCConfig(dropout=1.0)
    with pytest.raises(ValueError, match="head_size"):  # an unknown key lists the valid ones
        resolve_config(None, ["model=dasalc", "model_params.width=3"])
    assert MODELS["dasalc"].cls is DASALC and not DASALC.traits.reads_order


# ------------------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def splits():
    return make_ranking_data(40, seed=1), make_ranking_data(15, seed=2), make_ranking_data(15, seed=3)


@pytest.mark.parametrize("loss", ["listnet", "listmle", "lambdaloss", "approxndcg", "ranknet"])
def test_trains_with_several_losses(splits, loss):
    from ctxrank.config import TrainConfig

    train, valid, _ = splits
    seed_everything(0)
    model = make_model("dasalc", train.n_features, {**SMALL, "dropout": 0.2})
    config = TrainConfig(max_epochs=3, batch_size=8, threads=1, input_noise=0.5)
    result = fit(model, functools.partial(LOSSES[loss]), train, valid, config, progress=False)
    assert all(np.isfinite(h["train_loss"]) for h in result.history) and np.isfinite(result.best_metric)
    assert any(float(norm.running_var.sum()) != norm.running_var.numel() for norm in model.layer_norms)


def test_reranks_lambdamarts_top_k(splits):
    check_reranks_lambdamarts_top_k(splits, DASALC, "model=dasalc", *SMALL_SETS)


def test_cli_tune_runs_two_trials(tmp_path):
    small = ("model_params.hidden=[8]", "model_params.head_size=4")
    out = check_cli_tune_runs_two_trials(tmp_path, "dasalc", *small)
    assert "model_params.attention_layers" in out and "train.input_noise" in out


def test_estimator_fits_predicts_and_records_the_recipe(tmp_path):
    train = make_ranking_data(20, seed=5)
    est = DASALCRanker(**SMALL, max_epochs=2, batch_size=8, threads=1)
    est.fit(train.features, train.labels, qid=train.query_index)
    scores = est.predict(train.features, qid=train.query_index)
    assert scores.shape == (train.n_items,) and np.isfinite(scores).all()
    est.save(tmp_path / "m")
    recorded = json.loads((tmp_path / "m" / "ctxrank.json").read_text())["run_config"]
    assert recorded["transform"] == "log1p-zscore" and recorded["train"]["input_noise"] == 1.5


@pytest.mark.parametrize("lengths", [[5, 5, 5], [5, 2, 4], [1, 0, 0]], ids=["full", "mixed", "one item"])
def test_the_cpu_batch_norm_equals_the_float64_one_to_float_rounding(lengths):
    """Training on the CPU runs torch's batch-norm kernel over the real items: its outputs at real items,
    its gradients and its running statistics equal those of the float64 tensor operations (the path of
    other devices) to float32 rounding, also for features of 1e30 (the kernel accumulates in float64)."""
    g = torch.Generator().manual_seed(0)
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
    for magnitude in (1.0, 1e30):
        v = (torch.randn(3, 5, 6, generator=g) * magnitude).requires_grad_(True)
        grad = torch.randn(3, 5, 6, generator=g)
        results = []
        for path in ("_train_cpu", "_train_float64"):
            norm = MaskedBatchNorm(6, momentum=0.3)
            with torch.no_grad():
                norm.weight.copy_(torch.rand(6, generator=torch.Generator().manual_seed(1)) + 0.5)
                norm.bias.copy_(torch.randn(6, generator=torch.Generator().manual_seed(2)))
            out = getattr(norm, path)(v, mask)
            grads = torch.autograd.grad(out, (v, norm.weight, norm.bias), grad * mask[..., None])
            results.append((out[mask], *grads, norm.running_mean, norm.running_var))
        for fast, reference in zip(*results, strict=True):
            assert torch.isfinite(fast).all()
            scale = float(reference.detach().abs().max())
            torch.testing.assert_close(fast, reference, rtol=2e-5, atol=2e-5 * scale)


def test_training_on_the_cpu_reads_no_float64_copy_of_the_activations():
    """The CPU path normalizes in float32 (torch's kernel): no float64 tensor of the activations' size
    is saved for backward (the float64 path saved several)."""
    norm = MaskedBatchNorm(8, momentum=0.1)
    v = torch.randn(4, 6, 8, requires_grad=True)
    mask = torch.arange(6)[None, :] < torch.tensor([[6], [3], [5], [1]])
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        norm(v, mask)
    assert saved and not [t for t in saved if t.dtype == torch.float64 and t.numel() >= 8 * 15]
