"""train.debias: inverse-propensity weights in every loss, the DLA and PAL position towers, the checks."""

import functools
from dataclasses import replace

import numpy as np
import pytest
import torch

from ctxrank.clicks.towers import Debias, PositionTower
from ctxrank.clicks.weighting import ips_weights, propensity_table
from ctxrank.config import RerankConfig, RunConfig, TrainConfig
from ctxrank.data.lists import iterate_batches, pad_queries, truncate_top_k
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import LOSSES, get_loss
from ctxrank.metrics import evaluate_queries
from ctxrank.registry import MODELS, make_model
from ctxrank.training.loop import fit, seed_everything
from ctxrank.training.predict import predict

NEURAL = sorted(name for name in MODELS if MODELS[name].traits.torch_module)
TRAINS_ON_A_LOSS = [n for n in NEURAL if not MODELS[n].traits.own_objective]
SMALL_PARAMS = {
    "dlcm": {"encoder_widths": [8, 8]},
    "dcm": {"hidden": 8, "embed": 8},
    "attn": {"d_fc": 8, "heads": 2, "d_ff": 8, "blocks": 1},
    "setrank": {"d_model": 8, "heads": 2, "d_ff": 8, "blocks": 1},
    **{
        n: {"encoder_width": 8, "att_hidden": [8], "rank_hidden": [8]}
        for n in NEURAL
        if n.startswith("qilcm")
    },
}


def simulate_pbm_log(n_sessions, seed, *, list_len=10, eta=1.0, noise=0.05):
    """A position-based-model click log (Craswell et al. 2008) and the true labels of its items.

    Feature 0 carries the relevance; feature 1 is what the logging ranker sorted by (unrelated to the
    relevance), so position bias teaches a naive learner feature 1. Clicks: examination ``(1/k)^eta``
    times a click probability of ``noise`` (irrelevant) or ``1`` (relevant)."""
    rng = np.random.default_rng(seed)
    n = n_sessions * list_len
    X = rng.normal(size=(n, 4)).astype(np.float32)
    relevance = (X[:, 0] > 0.8).astype(np.float32)
    logger = X[:, 1] + 0.3 * rng.normal(size=n)
    qid = np.repeat(np.arange(n_sessions), list_len)
    order = np.lexsort((-logger, qid))  # each session by the logger's score
    X, relevance, qid = X[order], relevance[order], qid[order]
    position = np.tile(np.arange(1, list_len + 1), n_sessions)
    p_click = (1.0 / position) ** eta * np.where(relevance > 0, 1.0, noise)
    clicks = (rng.random(n) < p_click).astype(np.float32)
    log = RankingData.from_arrays(X, clicks, qid, position=position)
    truth = RankingData.from_arrays(X, relevance, qid)
    return log, truth


def _ndcg(model, truth):
    return float(
        np.nanmean(
            evaluate_queries(predict(model, truth), truth.labels, truth.query_offsets, ["ndcg@5"])["ndcg@5"]
        )
    )


def _train(log, valid, model="listnet", seed=0, params=None, loss=None, state_dir=None, **train):
    seed_everything(seed)
    m = make_model(model, log.n_features, params)
    cfg = TrainConfig(
        **{"batch_size": 32, "max_epochs": 4, "patience": 4, "lr": 0.05, "threads": 1, "seed": seed, **train}
    )
    loss_fn = get_loss(loss or MODELS[model].traits.default_loss)
    fit(m, loss_fn, log, valid, cfg, progress=False, state_dir=state_dir)
    return m


def _random_lists(seed, B=5, L=7):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, L, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 3, (B, L), generator=g).double()
    mask = torch.arange(L)[None, :] < torch.randint(1, L + 1, (B, 1), generator=g)
    return scores, labels, mask


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_unit_weights_give_the_unweighted_loss_and_other_weights_change_it(name):
    scores, labels, mask = _random_lists(0)
    loss = get_loss(name)
    plain = loss(scores, labels, mask)
    (grad,) = torch.autograd.grad(plain, scores)
    ones = loss(scores, labels, mask, weights=torch.ones_like(labels))
    (grad_ones,) = torch.autograd.grad(ones, scores)
    assert torch.equal(plain, ones) and torch.equal(grad, grad_ones)
    uneven = torch.linspace(0.2, 3.0, labels.numel(), dtype=labels.dtype).view_as(labels)
    assert not torch.allclose(loss(scores, labels, mask, weights=uneven), plain)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_ips_with_all_propensities_one_is_the_unweighted_loss(name):
    scores, labels, mask = _random_lists(1)
    shown = torch.where(mask, torch.arange(1, mask.shape[1] + 1), 0)
    debias = Debias("ips", mask.shape[1], propensity=torch.ones(mask.shape[1]), clip=None)
    loss = get_loss(name)
    assert torch.allclose(
        debias.wrap(loss, shown)(scores, labels, mask), loss(scores, labels, mask), atol=1e-6
    )


def test_weights_are_checked():
    scores, labels, mask = _random_lists(2)
    with pytest.raises(ValueError, match="finite and >= 0"):
        LOSSES["listnet"](scores, labels, mask, weights=torch.full_like(labels, -1.0))
    with pytest.raises(ValueError, match="shape of the labels"):
        LOSSES["listnet"](scores, labels, mask, weights=torch.ones(2, 2, dtype=labels.dtype))


def test_ips_weights_clip_then_self_normalise_over_the_batch_clicks():
    shown = torch.tensor([[1, 2, 3, 0], [1, 2, 3, 4]])
    mask = shown > 0
    clicks = torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0]])
    p = torch.tensor([1.0, 0.5, 0.25, 0.01])
    w = ips_weights(shown, clicks, mask, p, clip=10.0)
    raw = torch.tensor([2.0, 1.0, 10.0])  # 1/p of the clicks, position 4 capped at 10
    expected = raw * 3 / raw.sum()
    assert torch.allclose(w[clicks > 0], expected)
    assert float(w[clicks > 0].mean()) == pytest.approx(1.0)
    assert w[0, 3] == 0  # padding
    with pytest.raises(ValueError, match="beyond the 4 propensities"):
        ips_weights(shown + 1, clicks, mask, p, clip=None)


def test_propensities_given_or_by_eta_and_positions_beyond_them_refused():
    assert propensity_table((), 2.0, 3) == pytest.approx([1.0, 0.25, 1 / 9])
    with pytest.raises(
        ValueError,
        match=r"train\.propensity gives 2 positions, but the log shows items at positions up to 10",
    ):
        propensity_table((1.0, 0.5), None, 10)


def test_shown_positions_reach_the_batches_and_survive_top_k():
    log, _ = simulate_pbm_log(4, 0, list_len=5)
    batch = pad_queries(log, [0, 1])
    assert torch.equal(batch.shown_positions[batch.mask], torch.from_numpy(log.shown_positions[:10]).long())
    assert batch.shown_positions.dtype == torch.int64
    scores = -log.shown_positions.astype(np.float64)  # keeps positions 1..3
    top, rows = truncate_top_k(log, scores, 3)
    assert np.array_equal(top.shown_positions, log.shown_positions[rows])
    assert set(top.shown_positions.tolist()) == {1, 2, 3}
    assert next(iterate_batches(top, 4)).shown_positions is not None
    padded = pad_queries(RankingData.concat([log.subset([0]), top.subset([1])]), [0, 1])  # 5 and 3 items
    assert padded.shown_positions.tolist() == [[1, 2, 3, 4, 5], [1, 2, 3, 0, 0]]
    labelled = pad_queries(RankingData.from_arrays(log.features, log.labels, log.query_index), [0])
    assert labelled.shown_positions is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ips_dla_and_pal_rank_better_than_naive_training_on_a_pbm_log(seed):
    log, _ = simulate_pbm_log(400, seed)
    _, valid = simulate_pbm_log(100, seed + 100)  # model selection on labelled sessions (as a skyline's)
    _, test = simulate_pbm_log(200, seed + 200)
    naive = _ndcg(_train(log, valid), test)
    for debias, extra in (("ips", {"propensity_eta": 1.0}), ("dla", {}), ("pal", {})):
        assert _ndcg(_train(log, valid, debias=debias, **extra), test) > naive + 0.03, debias


@pytest.mark.parametrize("seed", [0, 2])
def test_ips_with_the_softmax_loss_of_ai_et_al_debiases_a_pbm_log(seed):
    """ListNet's ``identity`` target weighted per click (the IRW softmax loss) closes much of the gap
    that position bias opens; a weighting cancelled by each list's normaliser closes little of it."""
    log, _ = simulate_pbm_log(400, seed)
    _, valid = simulate_pbm_log(100, seed + 100)
    _, test = simulate_pbm_log(200, seed + 200)
    ndcg = {}
    for debias, extra in (("none", {}), ("ips", {"propensity_eta": 1.0})):
        seed_everything(seed)
        model = make_model("listnet", log.n_features, None)
        cfg = TrainConfig(
            batch_size=32, max_epochs=4, patience=4, lr=0.05, threads=1, seed=seed, debias=debias, **extra
        )
        softmax_loss = functools.partial(get_loss("listnet"), label_transform="identity")
        fit(model, softmax_loss, log, valid, cfg, progress=False)
        ndcg[debias] = _ndcg(model, test)
    assert ndcg["ips"] > ndcg["none"] + 0.05, ndcg


def test_dla_learns_decreasing_propensities():
    log, _ = simulate_pbm_log(400, 0, eta=1.0)
    seed_everything(0)
    tower = PositionTower(10)
    assert torch.equal(tower.propensities(), torch.ones(10))
    debias = Debias("dla", 10, clip=100.0)
    model = make_model("listnet", log.n_features)
    opt = torch.optim.Adam([*model.parameters(), *debias.parameters()], lr=0.05)
    for _ in range(3):
        for batch in iterate_batches(log, 32, shuffle=True, generator=np.random.default_rng(0)):
            loss = model.training_loss(batch, debias.wrap(LOSSES["listnet"], batch.shown_positions))
            opt.zero_grad()
            loss.backward()
            opt.step()
    learned = debias.tower.propensities()
    assert learned[0] == 1 and learned[1] < 0.8 and learned[4] < learned[1]


@pytest.mark.parametrize("name", TRAINS_ON_A_LOSS)
def test_every_neural_model_trains_a_step_with_each_debias_and_scores_without_positions(name):
    log, truth = simulate_pbm_log(6, 0, list_len=5)
    for debias, extra in (("ips", {"propensity_eta": 1.0}), ("dla", {}), ("pal", {})):
        model = _train(
            log,
            truth,
            model=name,
            params=SMALL_PARAMS.get(name),
            max_epochs=1,
            batch_size=3,
            debias=debias,
            **extra,
        )
        assert all(torch.isfinite(p).all() for p in model.parameters()), (name, debias)
        fresh = make_model(name, log.n_features, SMALL_PARAMS.get(name))
        assert model.state_dict().keys() == fresh.state_dict().keys()  # no tower in the served model
        assert np.isfinite(predict(model, truth)).all()  # labelled data without positions


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("debias", ["ips", "dla", "pal"])
def test_every_loss_debiased_is_finite_with_gradients(name, debias):
    log, _ = simulate_pbm_log(8, 3, list_len=6, eta=2.0)
    batch = pad_queries(log, np.arange(8))
    extra = {"propensity": propensity_table((), 2.0, 6)} if debias == "ips" else {}
    module = Debias(debias, 6, clip=100.0, **{k: torch.as_tensor(v) for k, v in extra.items()})
    scores = torch.randn(batch.mask.shape, requires_grad=True)
    value = module.wrap(get_loss(name), batch.shown_positions)(scores, batch.labels, batch.mask)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(scores.grad).all()


def test_debias_checks_name_the_option():
    log, truth = simulate_pbm_log(6, 0, list_len=5)
    with pytest.raises(ValueError, match=r"train\.debias = 'ips' learns from a click log"):
        _train(truth, truth, debias="ips", propensity_eta=1.0)
    with pytest.raises(ValueError, match=r"train\.propensity gives 3 positions"):
        _train(log, truth, debias="ips", propensity=(1.0, 0.5, 0.3))
    with pytest.raises(ValueError, match=r"needs train\.propensity"):
        TrainConfig(debias="ips")
    with pytest.raises(ValueError, match=r"train\.propensity / train\.propensity_eta"):
        TrainConfig(debias="dla", propensity_eta=1.0)
    with pytest.raises(ValueError, match=r"train\.propensity_clip must be a finite number >= 1"):
        TrainConfig(propensity_clip=0.5)
    with pytest.raises(ValueError, match=r"train.debias must be one of \['none', 'ips', 'dla', 'pal'\]"):
        TrainConfig(debias="nope")
    with pytest.raises(ValueError, match=r"train\.debias: ranksvm is a baseline and does not use it"):
        RunConfig(model="ranksvm", train=TrainConfig(debias="pal"))
    with pytest.raises(ValueError, match=r"train\.debias = 'dla': lambdamart learns from a click log with"):
        RunConfig(model="lambdamart", train=TrainConfig(debias="dla"))
    with pytest.raises(ValueError, match=r"train\.debias: mnl is fitted to its maximum likelihood"):
        RunConfig(model="mnl", train=TrainConfig(debias="pal"))
    with pytest.raises(ValueError, match=r"train\.debias: arsm trains its own arsm objective"):
        RunConfig(model="arsm", train=TrainConfig(debias="pal"))
    with pytest.raises(ValueError, match=r"loss_params\.weights: not an option"):  # they come from the log
        RunConfig(model="listnet", loss_params={"weights": 1.0})
    RunConfig(
        model="mnl", train=TrainConfig(debias="pal"), rerank=RerankConfig(initial="lambdamart", residual=True)
    )


def test_the_towers_are_saved_with_the_resumable_state(tmp_path):
    log, truth = simulate_pbm_log(20, 0, list_len=5)
    first = _train(log, truth, debias="dla", max_epochs=2, state_dir=tmp_path)
    seed_everything(0)
    again = make_model("listnet", log.n_features)
    cfg = TrainConfig(batch_size=32, max_epochs=2, patience=4, lr=0.05, threads=1, seed=0, debias="dla")
    fit(again, get_loss("listnet"), log, truth, cfg, progress=False, state_dir=tmp_path, resume=True)
    for a, b in zip(first.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    naive = TrainConfig(batch_size=32, max_epochs=2, patience=4, lr=0.05, threads=1, seed=0)
    with pytest.raises(ValueError):
        fit(
            make_model("listnet", log.n_features),
            get_loss("listnet"),
            log,
            truth,
            naive,
            progress=False,
            state_dir=tmp_path,
            resume=True,
        )


@pytest.mark.parametrize("debias", ["ips", "dla", "pal"])
def test_a_log_streamed_from_shards_trains_debiased_as_in_memory(tmp_path, debias):
    """A log larger than memory (``data-shards --position-col``, ``train --train-shards``) debiases as the
    same log in memory: the stream's batches carry the shown positions, the towers are as deep as its
    longest session, and the weights change the training (ips's first-epoch loss differs from naive)."""
    from ctxrank.data.stream import ShardStream, write_shards

    log, truth = simulate_pbm_log(24, 4, list_len=6)
    named = replace(log, feature_names=tuple(f"f{j}" for j in range(log.n_features)))
    write_shards([named], tmp_path / "sh", shards=2, position="pos")
    stream = ShardStream.open(tmp_path / "sh", position="pos")
    extra = {"propensity_eta": 1.0} if debias == "ips" else {}
    losses = {}
    for mode, more in (("none", {}), (debias, extra)):
        seed_everything(0)
        m = make_model("mlp", log.n_features, None)
        cfg = TrainConfig(batch_size=8, max_epochs=1, lr=0.05, threads=1, seed=0, debias=mode, **more)
        result = fit(m, get_loss("listnet"), stream, truth, cfg, progress=False)
        losses[mode] = result.history[0]["train_loss"]
        assert np.isfinite(predict(m, truth)).all()
    assert losses["none"] != losses[debias]


# every loss, with each option that changes how a list is normalised
PER_CLICK = [
    *[(name, {}) for name in sorted(LOSSES)],
    ("listnet", {"label_transform": "identity"}),
    ("listnet", {"label_transform": "exp2"}),
    ("attrank", {"form": "dlcm"}),
    ("attrank", {"form": "dlcm_code"}),
    *[(name, {"gain": "linear"}) for name in ("softrank", "lambdaloss", "approxndcg", "neuralndcg")],
]


@pytest.mark.parametrize(("name", "params"), PER_CLICK)
def test_a_lists_only_click_scales_its_lists_loss_by_its_weight(name, params):
    """On lists with one click, a list's value and gradient are its click's weight times the unweighted
    ones, also for the losses that normalise a list by its own labels (the target's sum, AttRank's
    softmax over the clicks, the ideal DCG) and ListNet's default `exp` target."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(4, 6, dtype=torch.bool)
    clicks = torch.zeros(4, 6, dtype=torch.float64)
    clicked = torch.tensor([0, 2, 5, 3])
    clicks[torch.arange(4), clicked] = 1.0
    weights = 1.0 + 4.0 * torch.rand(4, 6, generator=g, dtype=torch.float64)
    loss = get_loss(name)
    plain = loss(scores, clicks, mask, reduction="none", **params)
    weighted = loss(scores, clicks, mask, weights=weights, reduction="none", **params)
    click_weight = weights[torch.arange(4), clicked]
    torch.testing.assert_close(weighted, click_weight * plain)
    (grad,) = torch.autograd.grad((click_weight * plain).sum(), scores)
    (grad_weighted,) = torch.autograd.grad(weighted.sum(), scores)
    torch.testing.assert_close(grad_weighted, grad)
    assert not torch.allclose(weighted.mean(), plain.mean())


def _click_outcomes(examination, relevance):
    """Every click vector ``(2^L, L)`` of one list under the position-based model, and its probability."""
    n = examination.numel()
    outcomes = torch.tensor([[(k >> i) & 1 for i in range(n)] for k in range(2**n)], dtype=torch.float64)
    p_click = examination * relevance
    prob = (outcomes * p_click + (1 - outcomes) * (1 - p_click)).prod(-1)
    return outcomes, prob


def test_the_inverse_propensity_weighted_softmax_loss_is_unbiased_exactly_on_a_pbm_list():
    """Ai et al. 2018 (SIGIR), eq. 6: over every click outcome of a position-based-model list, the
    expected IRW softmax loss ``sum_i c_i / p(k_i) * -log softmax(s)_i`` (ListNet's ``identity``
    target: the list's value times its click count) equals the full-information one, ``sum_i r_i *
    -log softmax(s)_i`` (the list's value on the true relevance times its relevance sum); so does its
    gradient. Exact: the outcomes are enumerated, not sampled."""
    examination = torch.tensor([1.0, 0.6, 0.3, 0.1], dtype=torch.float64)  # shown at positions 1..4
    relevance = torch.tensor([0.2, 0.9, 0.5, 1.0], dtype=torch.float64)
    scores = torch.tensor([[0.3, -1.2, 2.0, 0.5]], dtype=torch.float64, requires_grad=True)
    outcomes, prob = _click_outcomes(examination, relevance)
    mask = torch.ones(len(outcomes), 4, dtype=torch.bool)
    listnet = get_loss("listnet")
    per_outcome = listnet(
        scores.expand(len(outcomes), 4), outcomes, mask, label_transform="identity",
        weights=(1 / examination).expand(len(outcomes), 4), reduction="none",
    )  # fmt: skip
    expected = (prob * outcomes.sum(-1) * per_outcome).sum()
    full = relevance.sum() * listnet(scores, relevance[None], mask[:1], label_transform="identity")
    torch.testing.assert_close(expected, full)
    (grad_expected,) = torch.autograd.grad(expected, scores)
    (grad_full,) = torch.autograd.grad(full, scores)
    torch.testing.assert_close(grad_expected, grad_full)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_weighted_losses_stay_finite_on_edge_lists(name, dtype):
    """A list without a click, a one-item list, a padded list and weights at a large clip (100, the
    most ``2^(w c)`` gains allow in float32) give finite values and gradients, 0 for the list without a
    click."""
    scores = torch.tensor(
        [[0.5, -1.0, 2.0], [1.0, 0.0, 0.0], [3.0, 1.0, -2.0], [0.1, 0.2, 0.3]],
        dtype=dtype,
        requires_grad=True,
    )
    mask = torch.tensor([[True, True, True], [True, False, False], [True, True, False], [True] * 3])
    clicks = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 0, 1]], dtype=dtype)
    weights = torch.tensor([[100.0, 100, 100], [100, 1, 1], [1, 100, 1], [100, 1, 0.01]], dtype=dtype)
    value = get_loss(name)(scores, clicks, mask, weights=weights, reduction="none")
    (grad,) = torch.autograd.grad(value.sum(), scores)
    assert torch.isfinite(value).all() and torch.isfinite(grad).all(), (value, grad)
    assert value[0] == 0 and (grad[0] == 0).all()


def test_weights_overflowing_the_labels_are_refused():
    scores, mask = torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="overflow"):
        get_loss("listnet")(scores, torch.tensor([[2.0, 0]]), mask, weights=torch.full((1, 2), 3e38))


def test_ips_training_weighs_one_click_sessions():
    """Through ``train.debias = "ips"``: on one-click sessions, the clicks shown low (small propensity)
    weigh more than those shown on top, so the debiased loss differs from the naive one (batch
    self-normalisation keeps the mean click weight 1, not each list's)."""
    shown = torch.arange(1, 6).expand(3, 5)
    mask = torch.ones(3, 5, dtype=torch.bool)
    clicks = torch.zeros(3, 5)
    clicks[torch.arange(3), torch.tensor([0, 1, 4])] = 1.0
    scores = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    module = Debias("ips", 5, propensity=torch.as_tensor(propensity_table((), 1.0, 5)), clip=None)
    for name in ("attrank", "lambdaloss"):
        loss = get_loss(name)
        naive = loss(scores, clicks, mask, reduction="none")
        debiased = module.wrap(loss, shown)(scores, clicks, mask, reduction="none")
        raw = torch.tensor([1.0, 2.0, 5.0])  # 1/p of the clicks' positions, normalised to mean 1
        torch.testing.assert_close(debiased, naive * raw * 3 / raw.sum())
