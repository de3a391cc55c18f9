"""GSF (Ai et al., ICTIR 2019): the groupwise scores against the groups enumerated by hand (every
m-permutation, cyclic windows), padding, order and determinism, gradients, training with several
losses, tuning, re-ranking LambdaMART's top k and the estimator."""

import functools
import itertools
import json

import numpy as np
import pytest
import torch

from ctxrank.api import GSFRanker
from ctxrank.config import TrainConfig, resolve_config
from ctxrank.losses import LOSSES
from ctxrank.models.gsf import GSF, GSFConfig
from ctxrank.registry import MODELS, make_model
from ctxrank.training.loop import fit, seed_everything
from tests.conftest import make_ranking_data
from tests.model_checks import check_cli_tune_runs_two_trials, check_reranks_lambdamarts_top_k

SMALL = {"hidden": [6, 5]}


def _model(n_features=3, seed=0, **params):
    torch.manual_seed(seed)
    return make_model("gsf", n_features, {**SMALL, **params}).double()


def _batch(lengths, n_features=3, seed=0, pad_fill=0.0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    L = int(lengths.max())
    mask = torch.arange(L)[None, :] < lengths[:, None]
    x = torch.randn(len(lengths), L, n_features, generator=g, dtype=torch.float64)
    return torch.where(mask[..., None], x, torch.full_like(x, pad_fill)), mask


def _g(m: GSF, group: torch.Tensor) -> torch.Tensor:
    """The groupwise scorer on ONE group: (m, F) features -> (m,) scores, from the concatenation."""
    return m.rest(m.first(group.reshape(-1)))


def _reference_all(m: GSF, x: torch.Tensor) -> torch.Tensor:
    """Every ordered m-tuple of distinct items of ONE list x (n, F), enumerated with itertools."""
    size, n = m.config.group_size, x.shape[0]
    total, count = torch.zeros(n, dtype=x.dtype), torch.zeros(n, dtype=x.dtype)
    for group in itertools.permutations(range(n), size):
        scores = _g(m, x[list(group)])
        for slot, item in enumerate(group):
            total[item] += scores[slot]
            count[item] += 1
    return total / count.clamp(min=1) if m.config.reduce == "mean" else total


def _reference_windows(m: GSF, x: torch.Tensor, order: list[int]) -> torch.Tensor:
    """The n cyclic windows of m consecutive items of ``order`` (items of ONE list x), by hand."""
    size, n = m.config.group_size, len(order)
    total = torch.zeros(x.shape[0], dtype=x.dtype)
    for start in range(n):
        group = [order[(start + t) % n] for t in range(size)]
        scores = _g(m, x[group])
        for slot, item in enumerate(group):
            total[item] += scores[slot]
    return total / size if m.config.reduce == "mean" else total


# ---------------------------------------------------------------------------------------- equations
@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_all_groups_match_the_permutations_enumerated(size, reduce):
    m = _model(group_size=size, groups="all", reduce=reduce).eval()
    x, mask = _batch([5, 3, 2, 1])
    with torch.no_grad():
        got = m(x, mask)
        for b, n in enumerate(mask.sum(1).tolist()):
            torch.testing.assert_close(got[b, :n], _reference_all(m, x[b, :n]), rtol=1e-10, atol=1e-12)
    if size > 1:  # a list shorter than m has no group of distinct items: scores 0
        assert torch.equal(got[3, :1], torch.zeros(1, dtype=got.dtype))


@pytest.mark.parametrize("size", [1, 2, 3, 6])
@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_evaluation_windows_follow_the_row_order(size, reduce):
    m = _model(group_size=size, reduce=reduce).eval()
    x, mask = _batch([5, 4, 2, 1])  # lists shorter than m wrap around
    with torch.no_grad():
        got = m(x, mask)
        for b, n in enumerate(mask.sum(1).tolist()):
            ref = _reference_windows(m, x[b, :n], list(range(n)))
            torch.testing.assert_close(got[b, :n], ref, rtol=1e-10, atol=1e-12)


def test_training_windows_follow_a_fresh_random_order_of_the_real_items():
    m = _model(group_size=3).train()
    x, mask = _batch([6, 4, 1])
    orders = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        got = m(x, mask)
        torch.manual_seed(seed)  # the same draw: the order the forward used
        pos, perm = m._order(mask)
        for b, n in enumerate(mask.sum(1).tolist()):
            order = perm[b, :n].tolist()
            assert sorted(order) == list(range(n))  # a permutation of the real items, padding after
            assert torch.equal(pos[b].gather(0, perm[b]), torch.arange(mask.shape[1]))
            ref = _reference_windows(m, x[b, :n], order)
            torch.testing.assert_close(got[b, :n], ref, rtol=1e-10, atol=1e-12)
        orders.append(perm[0].tolist())
    assert orders[0] != orders[1]  # another step, other groups


def test_group_size_one_is_a_univariate_scorer():
    for groups in ("window", "all"):
        m = _model(group_size=1, groups=groups).eval()
        x, mask = _batch([4])
        with torch.no_grad():
            alone = torch.stack([m(x[:, i : i + 1], mask[:, i : i + 1])[0, 0] for i in range(4)])
            torch.testing.assert_close(m(x, mask)[0], alone, rtol=1e-12, atol=1e-12)


def test_a_group_makes_scores_depend_on_the_other_items():
    m = _model().eval()
    x, mask = _batch([4])
    with torch.no_grad():
        before = m(x, mask)[0, 0]
        x2 = x.clone()
        x2[0, 1] += 2.0  # item 0's window partner changes
        assert not torch.isclose(m(x2, mask)[0, 0], before)


# ----------------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("groups", ["window", "all"])
def test_padding_never_enters_a_real_items_group(groups):
    m = _model(group_size=3, groups=groups).eval()
    x, mask = _batch([4, 2, 3])
    wide_x = torch.cat([x, torch.full((3, 4, 3), 1e6, dtype=torch.float64)], dim=1)  # garbage padding
    wide_mask = torch.cat([mask, torch.zeros(3, 4, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        wide = m(wide_x, wide_mask)[:, : mask.shape[1]]
        torch.testing.assert_close(wide[mask], m(x, mask)[mask], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_all_groups_are_permutation_equivariant(training):
    m = _model(groups="all", group_size=3)
    m.train(training)
    x, mask = _batch([5, 5])
    perm = torch.tensor([3, 0, 4, 1, 2])
    with torch.no_grad():
        torch.testing.assert_close(m(x[:, perm], mask), m(x, mask)[:, perm], rtol=1e-10, atol=1e-12)


def test_evaluation_windows_are_deterministic_and_read_the_row_order():
    m = _model().eval()
    x, mask = _batch([5])
    perm = torch.tensor([3, 0, 4, 1, 2])
    with torch.no_grad():
        assert torch.equal(m(x, mask), m(x, mask))
        assert not torch.allclose(m(x[:, perm], mask), m(x, mask)[:, perm])  # other neighbours
    assert GSF.traits.reads_order and MODELS["gsf"].cls is GSF
    assert GSF.reads_row_order({}) and not GSF.reads_row_order({"groups": "all"})  # no order warning


def test_the_seed_makes_training_groups_reproducible():
    m = _model().train()
    x, mask = _batch([6, 3])
    torch.manual_seed(5)
    a = m(x, mask)
    torch.manual_seed(5)
    assert torch.equal(a, m(x, mask))


def test_empty_rows_are_finite():
    for groups in ("window", "all"):
        m = _model(groups=groups, dropout=0.2)
        x, mask = _batch([3, 1, 2])
        mask[2] = False
        for training in (True, False):
            m.train(training)
            scores = m(x, mask)
            assert torch.isfinite(scores).all()
            LOSSES["listnet"](scores, torch.ones_like(scores), mask).backward()
            assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


@pytest.mark.parametrize("groups", ["window", "all"])
def test_gradcheck_float64(groups):
    m = _model(groups=groups, group_size=2, hidden=[4], activation="tanh").eval()
    x, mask = _batch([3, 2])
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: m(t, mask)[mask], (x,), eps=1e-6, atol=1e-6)


def test_gradcheck_float64_training_windows():
    m = _model(hidden=[4], activation="tanh").train()
    x, mask = _batch([4, 3])
    x.requires_grad_(True)

    def scores(t):
        torch.manual_seed(0)  # the same groups at every call
        return m(t, mask)[mask]

    assert torch.autograd.gradcheck(scores, (x,), eps=1e-6, atol=1e-6)


def test_config_validation_and_defaults():
    assert GSFConfig().group_size == 2 and GSFConfig().groups == "window"
    with pytest.raises(ValueError, match=r"model_params\.group_size must be a positive integer"):
        GSFConfig(group_size=0)
    with pytest.raises(ValueError, match=r"model_params\.groups must be one of \['window', 'all'\]"):
        GSFConfig(groups="some")
    with pytest.raises(ValueError, match=r"model_params\.reduce must be one of"):
        GSFConfig(reduce="max")
    with pytest.raises(ValueError, match=r"model_params\.activation must be one of"):
        GSFConfig(activation="swish")
    with pytest.raises(ValueError, match="group_size"):  # an unknown key lists the valid ones
        resolve_config(None, ["model=gsf", "model_params.m=3"])
    config = resolve_config(None, ["model=gsf"])
    assert config.loss_name == "listnet" and config.effective_loss_params == {"label_transform": "identity"}
    assert config.transform == "minmax" and config.train.input_noise == 0.0  # no implied run values


def test_the_memory_estimate_grows_as_the_groups():
    window = make_model("gsf", 5, {})
    exact = make_model("gsf", 5, {"groups": "all"})
    for model, power in ((window, 1), (exact, 2)):
        small, large = (model.batch_memory(4, L, training=True) for L in (50, 100))
        assert large / small == pytest.approx(2**power, rel=0.1)


# ------------------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def splits():
    return make_ranking_data(40, seed=1), make_ranking_data(15, seed=2), make_ranking_data(15, seed=3)


@pytest.mark.parametrize(
    ("loss", "groups"),
    [
        ("listnet", "window"),
        ("listmle", "window"),
        ("ranknet", "all"),
        ("lambdaloss", "window"),
        ("approxndcg", "all"),
    ],
)
def test_trains_with_several_losses(splits, loss, groups):
    train, valid, _ = splits
    seed_everything(0)
    model = make_model("gsf", train.n_features, {**SMALL, "groups": groups})
    config = TrainConfig(max_epochs=3, batch_size=8, threads=1, lr=0.01)
    result = fit(model, functools.partial(LOSSES[loss]), train, valid, config, progress=False)
    assert all(np.isfinite(h["train_loss"]) for h in result.history) and np.isfinite(result.best_metric)


def test_reranks_lambdamarts_top_k(splits):
    check_reranks_lambdamarts_top_k(splits, GSF, "model=gsf", "model_params.hidden=[8]")


def test_cli_tune_runs_two_trials(tmp_path):
    assert "model_params.group_size" in check_cli_tune_runs_two_trials(tmp_path, "gsf")


def test_estimator_fits_and_predicts(tmp_path):
    train = make_ranking_data(20, seed=5)
    est = GSFRanker(hidden=(8,), group_size=3, max_epochs=2, batch_size=8, threads=1)
    est.fit(train.features, train.labels, qid=train.query_index)
    scores = est.predict(train.features, qid=train.query_index)
    assert scores.shape == (train.n_items,) and np.isfinite(scores).all()
    np.testing.assert_array_equal(scores, est.predict(train.features, qid=train.query_index))
    est.save(tmp_path / "m")
    recorded = json.loads((tmp_path / "m" / "ctxrank.json").read_text())["run_config"]["model_params"]
    assert recorded["group_size"] == 3 and recorded["groups"] == "window"
