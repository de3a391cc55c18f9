"""ARSM estimator (ARSM-L2R paper, Algorithm 1) and the ARSM-L2R model."""

import itertools
import json
import math

import pytest
import torch

from ctxrank.arsm import (
    NegativeNDCG,
    arsm_estimate,
    arsm_surrogate,
    get_arsm_loss,
    pseudo_actions,
    reinforce_estimate,
    swap_pairs,
)
from ctxrank.cli import main
from ctxrank.config import RunConfig
from ctxrank.data.lists import ListBatch
from ctxrank.metrics import average_precision, ndcg
from ctxrank.registry import make_model
from tests.cli.test_train import MQ


def _dirichlet(shape, seed=0, dtype=torch.float64):
    e = torch.empty(shape, dtype=dtype).exponential_(generator=torch.Generator().manual_seed(seed))
    return e / e.sum(-1, keepdim=True)


@pytest.mark.parametrize("C", [2, 3, 4, 7])
def test_pseudo_actions_equal_explicit_swaps(C):
    B, L = 3, 6
    phi = torch.randn(B, L, C, dtype=torch.float64, generator=torch.Generator().manual_seed(C))
    log_pi = torch.log(_dirichlet((B, L, C), seed=C))
    z, z_swap = pseudo_actions(log_pi, phi)
    assert torch.equal(z, (log_pi - phi).argmin(-1))
    c, k = swap_pairs(C)
    assert z_swap.shape == (B, C * (C - 1) // 2, L)
    for s in range(c.numel()):
        swapped = log_pi.clone()
        swapped[..., [c[s], k[s]]] = log_pi[..., [k[s], c[s]]]
        assert torch.equal(z_swap[:, s], (swapped - phi).argmin(-1)), (c[s], k[s])


@pytest.mark.parametrize("k", [1, 3, 10, None])
def test_fast_ndcg_rows_equal_the_metrics_module(k):
    gen = torch.Generator().manual_seed(0)
    B, L, R = 6, 13, 400
    y = torch.randint(0, 4, (B, L), generator=gen).float()
    mask = torch.rand(B, L, generator=gen) > 0.3
    mask[0] = False  # empty list
    y[1] = 0  # no relevant item
    lists = torch.randint(0, B, (R,), generator=gen)
    z = torch.randint(0, 5, (R, L), generator=gen).float()  # many ties: broken by position
    fast = NegativeNDCG(k).rows(z, lists, y, mask)
    assert torch.allclose(fast, -ndcg(z, y[lists], mask[lists], k=k), atol=1e-6)
    assert torch.allclose(NegativeNDCG(k)(z[:B], y, mask), -ndcg(z[:B], y, mask, k=k))


def _expected_loss(actions, y, mask, loss_fn, ties):
    """loss of each action; ``ties="random"``: averaged over every order of the items (a uniformly
    random order breaks ties between equal levels), ``"position"``: in the input order."""
    n = actions.shape[-1]
    perms = list(itertools.permutations(range(n))) if ties == "random" else [tuple(range(n))]
    total = 0.0
    for p in perms:
        p = list(p)
        total = total + loss_fn(actions[:, p], y[p].expand(len(actions), n), mask[p].expand(len(actions), n))
    return total / len(perms)


def _exact_gradient(phi, y, mask, loss_fn, ties="random"):
    """d E[loss(z, y)] / d phi by enumerating all C^n actions of one list (and all orders of its items
    for random ties)."""
    phi = phi.clone().requires_grad_(True)
    n, C = phi.shape
    logp = torch.log_softmax(phi, -1)
    actions = torch.tensor(list(itertools.product(range(C), repeat=n)), dtype=torch.float64)
    losses = _expected_loss(actions, y, mask, loss_fn, ties)
    probs = torch.exp(logp[torch.arange(n), actions.long()].sum(-1))
    (probs * losses).sum().backward()
    return phi.grad


@pytest.mark.parametrize("ties", ["random", "position"])
@pytest.mark.parametrize("loss_name", ["ndcg", "ap"])
def test_estimator_is_unbiased_on_a_tiny_problem(loss_name, ties):
    # 2 items, C = 3, fixed logits: the mean of N independent draws must match the exact gradient
    # within Monte Carlo error (z-scores from the draws' own standard errors; fixed seed).
    phi = torch.tensor([[0.3, -0.2, 1.0], [-0.5, 0.4, 0.1]], dtype=torch.float64)
    y = torch.tensor([1.0, 0.0], dtype=torch.float64)
    mask = torch.ones(2, dtype=torch.bool)
    loss_fn = get_arsm_loss(loss_name, None)
    exact = _exact_gradient(phi, y, mask, loss_fn, ties)
    assert exact.abs().max() > 1e-3  # the test has something to detect
    N = 40000
    est = arsm_estimate(
        phi.expand(N, 2, 3),
        y.expand(N, 2),
        mask.expand(N, 2),
        loss_fn,
        generator=torch.Generator().manual_seed(123),
        ties=ties,
    ).grad
    mean, se = est.mean(0), est.std(0) / N**0.5
    z = (mean - exact) / se
    assert z.abs().max() < 4.0, (mean, exact, z)
    # and it is not trivially close: a biased variant (no centering of L) would be far off
    assert (mean - exact).abs().max() < 0.1 * exact.abs().max() + 4 * se.max()


def test_arsm_has_lower_variance_than_reinforce():
    phi = torch.tensor([[0.3, -0.2, 1.0], [-0.5, 0.4, 0.1]], dtype=torch.float64)
    y = torch.tensor([1.0, 0.0], dtype=torch.float64)
    mask = torch.ones(2, dtype=torch.bool)
    loss_fn = get_arsm_loss("ndcg", None)
    N = 20000
    args = (phi.expand(N, 2, 3), y.expand(N, 2), mask.expand(N, 2), loss_fn)
    arsm = arsm_estimate(*args, generator=torch.Generator().manual_seed(1)).grad
    reinforce = reinforce_estimate(*args, generator=torch.Generator().manual_seed(1))
    exact = _exact_gradient(phi, y, mask, loss_fn)
    assert torch.allclose(reinforce.mean(0), exact, atol=5 * (reinforce.std(0).max() / N**0.5))
    assert arsm.var(0).sum() < 0.5 * reinforce.var(0).sum()


def test_dedupe_changes_nothing_but_the_work():
    gen = torch.Generator().manual_seed(0)
    phi = torch.randn(4, 7, 6, generator=gen)
    y = torch.randint(0, 3, (4, 7), generator=gen).float()
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[2, 3:] = False
    pi = _dirichlet(phi.shape, dtype=torch.float32)
    for ties in ("random", "position"):  # random ties: the same tie orders from the same generator state
        a, b = (
            arsm_estimate(
                phi,
                y,
                mask,
                NegativeNDCG(10),
                pi=pi,
                dedupe=d,
                ties=ties,
                generator=torch.Generator().manual_seed(1),
            )
            for d in (True, False)
        )
        assert torch.equal(a.grad, b.grad) and torch.equal(a.loss, b.loss)
    assert torch.equal(a.grad, b.grad) and torch.equal(a.loss, b.loss)
    assert a.n_evaluated < b.n_evaluated == 4 * (1 + 15)


def test_plain_callable_losses_work_like_the_built_in_ones():
    gen = torch.Generator().manual_seed(0)
    phi = torch.randn(3, 5, 4, generator=gen)
    y = torch.randint(0, 2, (3, 5), generator=gen).float()
    mask = torch.ones(3, 5, dtype=torch.bool)
    pi = _dirichlet(phi.shape, dtype=torch.float32)

    def neg_ap(z, labels, m):
        return -average_precision(z, labels, m, reduction="none")

    a = arsm_estimate(phi, y, mask, neg_ap, pi=pi, generator=torch.Generator().manual_seed(1))
    b = arsm_estimate(
        phi, y, mask, get_arsm_loss("ap", None), pi=pi, generator=torch.Generator().manual_seed(1)
    )
    assert torch.allclose(a.grad, b.grad)


def test_padding_never_changes_the_estimate():
    """Exactly with position ties (random ties: the tie order is drawn for the padded shape, so padding
    changes the draw, not its distribution)."""
    gen = torch.Generator().manual_seed(0)
    phi = torch.randn(2, 5, 6, generator=gen)
    y = torch.randint(0, 3, (2, 5), generator=gen).float()
    mask = torch.ones(2, 5, dtype=torch.bool)
    pi = _dirichlet(phi.shape, dtype=torch.float32)
    ref = arsm_estimate(phi, y, mask, NegativeNDCG(3), pi=pi, ties="position")
    pad = 4  # junk features, labels and draws in the padding
    phi_p = torch.cat([phi, 50 * torch.randn(2, pad, 6, generator=gen)], 1)
    y_p = torch.cat([y, torch.full((2, pad), 2.0)], 1)
    mask_p = torch.cat([mask, torch.zeros(2, pad, dtype=torch.bool)], 1)
    pi_p = torch.cat([pi, _dirichlet((2, pad, 6), seed=5, dtype=torch.float32)], 1)
    for dedupe in (True, False):
        out = arsm_estimate(phi_p, y_p, mask_p, NegativeNDCG(3), pi=pi_p, dedupe=dedupe, ties="position")
        assert torch.allclose(out.grad[:, :5], ref.grad, atol=1e-6)
        assert torch.equal(out.grad[:, 5:], torch.zeros_like(out.grad[:, 5:]))
        assert torch.allclose(out.loss, ref.loss)


def test_surrogate_value_is_the_sampled_loss_and_its_gradient_the_estimate():
    gen = torch.Generator().manual_seed(0)
    phi = torch.randn(3, 5, 4, generator=gen, requires_grad=True)
    y = torch.randint(0, 3, (3, 5), generator=gen).float()
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False  # an empty list does not count in the mean
    est = arsm_estimate(phi, y, mask, NegativeNDCG(10), generator=torch.Generator().manual_seed(9))
    value = arsm_surrogate(phi, y, mask, NegativeNDCG(10), generator=torch.Generator().manual_seed(9))
    assert value.item() == pytest.approx(est.loss[[0, 2]].mean().item())
    value.backward()
    assert torch.allclose(phi.grad, est.grad / 2)


def test_single_item_lists_and_all_zero_labels_give_zero_finite_gradients():
    phi = torch.randn(2, 3, 5)
    y = torch.zeros(2, 3)
    mask = torch.tensor([[True, False, False], [True, True, True]])
    est = arsm_estimate(phi, y, mask, NegativeNDCG(10))
    assert torch.isfinite(est.grad).all() and torch.equal(est.grad, torch.zeros_like(est.grad))


# ---------------------------------------------------------------- the model


def _batch(gen, B=4, L=6, F=5, levels=3):
    return ListBatch(
        features=torch.rand(B, L, F, generator=gen),
        labels=torch.randint(0, levels, (B, L), generator=gen).float(),
        mask=torch.ones(B, L, dtype=torch.bool),
        query_index=torch.arange(B),
    )


def test_model_defaults_are_the_papers():
    model = make_model("arsm", 46)
    linears = [m for m in model.net if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(46, 500), (500, 20)]
    assert isinstance(model.net[1], torch.nn.Tanh)
    assert all(torch.equal(m.bias, torch.zeros_like(m.bias)) for m in linears)  # Glorot + zero bias
    bound = (6 / (46 + 500)) ** 0.5
    assert linears[0].weight.abs().max() <= bound


def test_prediction_scores():
    gen = torch.Generator().manual_seed(0)
    batch = _batch(gen)
    model = make_model("arsm", 5, {"hidden": [8], "n_levels": 4})
    with torch.no_grad():
        p = torch.softmax(model.logits(batch.features), -1)
        assert torch.allclose(model.score_batch(batch), p @ torch.tensor([1.0, 2, 3, 4]))
        model.config = type(model.config)(hidden=(8,), n_levels=4, score="argmax")
        top = model.score_batch(batch)
        assert torch.equal(top.floor(), (p.argmax(-1) + 1).float())
        model.config = type(model.config)(hidden=(8,), n_levels=4, score="expected_gain")
        assert torch.allclose(model.score_batch(batch), p @ torch.tensor([0.0, 1, 3, 7]))


def test_training_loss_backpropagates_the_estimate():
    gen = torch.Generator().manual_seed(0)
    batch = _batch(gen)
    model = make_model("arsm", 5, {"hidden": [8], "n_levels": 4})
    torch.manual_seed(3)
    loss = model.training_loss(batch, None)
    assert -1 <= loss.item() <= 0  # the value is the sampled -NDCG
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_labels_beyond_the_levels_are_refused():
    gen = torch.Generator().manual_seed(0)
    batch = _batch(gen, levels=6)
    model = make_model("arsm", 5, {"hidden": [8], "n_levels": 4})
    with pytest.raises(ValueError, match=r"n_levels=4 needs integer labels in 0..3"):
        model.training_loss(batch, None)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_levels": 1}, "n_levels must be an integer >= 2"),
        ({"loss": "mse"}, "model_params.loss: unknown 'mse'"),
        ({"score": "max"}, "model_params.score: unknown 'max'"),
        ({"loss_k": 0}, "loss_k must be a positive integer"),
    ],
)
def test_bad_options_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        make_model("arsm", 5, params)


def test_a_loss_option_does_not_apply():
    with pytest.raises(ValueError, match="arsm trains its own arsm objective"):
        RunConfig(model="arsm", loss="listnet")
    assert RunConfig(model="arsm").loss_name == "arsm"


def test_cli_train_arsm_end_to_end(tmp_path, capsys):
    out = tmp_path / "arsm"
    argv = [
        "train", "--model", "arsm", "--dataset", "mq2008", "--fold", "1", "--out", str(out),
        "--set", "train.max_epochs=2", "--set", "train.threads=1", "--set", "model_params.hidden=[32]",
        "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0
    saved = json.loads((out / "test_metrics.json").read_text())["metrics"]
    assert 0.2 < saved["ndcg@10"] <= 1
    meta = json.loads((out / "ctxrank.json").read_text())
    assert meta["loss"] == "arsm" and meta["model_config"]["n_levels"] == 20
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--data", str(MQ / "S5.txt.gz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["ndcg@10"] == pytest.approx(
        saved["ndcg@10"], abs=1e-8
    )


def test_random_ties_make_the_expected_loss_independent_of_the_item_order():
    """With C levels a long list has ties; random ties: the sampled loss of a fixed action has the same
    distribution for a list and for any shuffle of its items (its expectation is the mean over every
    order, which a shuffle does not change), so the objective cannot reward the file order. Position
    ties: it depends on the order."""
    n, C = 6, 3
    gen = torch.Generator().manual_seed(0)
    phi = torch.randn(n, C, generator=gen, dtype=torch.float64)
    y = torch.tensor([2.0, 0.0, 1.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    mask = torch.ones(n, dtype=torch.bool)
    e = -torch.rand(n, C, generator=gen, dtype=torch.float64).log()  # Dirichlet(1, ..., 1): normalized
    pi = e / e.sum(-1, keepdim=True)  # Exp(1) draws, from the test's generator (not the global RNG)
    loss_fn = get_arsm_loss("ndcg", 3)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    z = (torch.log(pi) - phi).argmin(-1)
    assert len(set(z.tolist())) < n  # the fixed action has ties
    exact = _expected_loss(z[None].double(), y, mask, loss_fn, "random").item()
    exact_shuffled = _expected_loss(z[perm][None].double(), y[perm], mask[perm], loss_fn, "random").item()
    assert exact == pytest.approx(exact_shuffled, abs=1e-12)  # the expectation is order-free
    N = 20000
    draws = {}
    for name, order in (("as given", torch.arange(n)), ("shuffled", perm)):
        est = arsm_estimate(  # the same action z in every draw (fixed pi): only the tie order is random
            phi[order].expand(N, n, C),
            y[order].expand(N, n),
            mask[order].expand(N, n),
            loss_fn,
            generator=torch.Generator().manual_seed(7),
            pi=pi[order].expand(N, n, C),
        )
        assert torch.equal(est.z[0], z[order])
        draws[name] = est.loss
        se = est.loss.std().item() / N**0.5
        assert abs(est.loss.mean().item() - exact) < 4 * se
    # same distribution: the frequencies of each distinct loss value agree within sampling error
    values = torch.unique(torch.cat(list(draws.values())).round(decimals=12))
    for v in values:
        freq = [(d.round(decimals=12) == v).double().mean().item() for d in draws.values()]
        assert abs(freq[0] - freq[1]) < 4 * math.sqrt(2 * 0.25 / N)
    # position ties: the loss of the same action, every item at one level (pi's smallest column wins the
    # argmin of log pi - phi), depends on the order of the items
    flat = torch.zeros(1, n, C, dtype=torch.float64)
    tied = torch.tensor([0.1, 0.45, 0.45], dtype=torch.float64).expand(1, n, C)
    pos = [
        arsm_estimate(flat, y[o][None], mask[o][None], loss_fn, pi=tied, ties="position")
        for o in (torch.arange(n), perm)
    ]
    assert pos[0].z.tolist() == pos[1].z.tolist() == [[0] * n]
    assert pos[0].loss.item() != pytest.approx(pos[1].loss.item())
