"""QILCM: equations, masks, invariances, the QN layer and the ablation variants."""

import numpy as np
import pytest
import torch

from ctxrank.config import TrainConfig
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import chamfer_confusion, get_loss
from ctxrank.metrics import evaluate_queries, mean_metrics
from ctxrank.models._dropout import Dropout
from ctxrank.registry import MODELS, make_model
from ctxrank.training.loop import fit, seed_everything
from ctxrank.training.predict import predict
from tests.conftest import make_ranking_data

SMALL = {"encoder_width": 8, "att_hidden": [16, 8], "rank_hidden": [16, 8]}


def _model(**over):
    seed_everything(0)
    return make_model("qilcm", 5, {**SMALL, **over}).double()


def _batch(b=3, n=6, f=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, f, generator=g, dtype=torch.float64)
    lengths = torch.tensor([n, n - 2, 1][:b])
    mask = torch.arange(n)[None, :] < lengths[:, None]
    x = x * mask.unsqueeze(-1)
    y = torch.randint(0, 3, (b, n), generator=g).double() * mask
    return x, y, mask


def test_permutation_equivariance():
    m = _model()
    x, _, mask = _batch()
    perm = torch.tensor([2, 0, 3, 1, 4, 5])  # stays within the real items of row 0
    full = torch.ones_like(mask)
    s = m(x, full)
    sp = m(x[:, perm], full)
    torch.testing.assert_close(sp, s[:, perm])


def test_padding_never_changes_scores_attention_loss_or_chamfer():
    m = _model()
    x, y, mask = _batch()
    pad = 4
    xp = torch.cat([x, torch.randn(3, pad, 5, dtype=torch.float64) * 100], dim=1)
    yp = torch.cat([y, torch.full((3, pad), 2.0, dtype=torch.float64)], dim=1)
    mp = torch.cat([mask, torch.zeros(3, pad, dtype=torch.bool)], dim=1)
    a, b = m.details(x, mask), m.details(xp, mp)
    torch.testing.assert_close(b.scores[:, :6][mask], a.scores[mask])
    torch.testing.assert_close(b.attention[:, :6], a.attention)
    assert torch.all(b.attention[:, 6:] == 0)
    loss = get_loss("attrank")
    torch.testing.assert_close(loss(b.scores, yp, mp), loss(a.scores, y, mask))
    torch.testing.assert_close(
        chamfer_confusion(b.normalized, mp), chamfer_confusion(a.normalized, mask), rtol=1e-9, atol=1e-9
    )


def test_query_normalization_has_weighted_mean_zero_and_variance_one():
    m = _model(eps=1e-10)  # eq. 8's epsilon shrinks the variance of low-variance dimensions; take it ~0
    x, _, mask = _batch(b=2, n=6)
    out = m.details(x, mask)
    a = out.attention
    mean = torch.einsum("bl,bld->bd", a, out.normalized)
    var = torch.einsum("bl,bld->bd", a, (out.normalized - mean[:, None]) ** 2)
    torch.testing.assert_close(mean, torch.zeros_like(mean), atol=1e-9, rtol=0)
    # variance 1 up to eps, except dimensions that are constant within the list (variance 0)
    nonconst = var > 0.5
    assert nonconst.float().mean() > 0.5
    torch.testing.assert_close(var[nonconst], torch.ones_like(var[nonconst]), atol=1e-4, rtol=0)
    assert torch.all(var[~nonconst] < 1e-3)  # the rest are dimensions constant within the list


def test_attention_pooling_matches_equations_3_to_5():
    m = _model()
    x, _, mask = _batch(b=1, n=4)
    out = m.details(x, mask)
    h = torch.cat([x, m.encoder(x)], dim=-1)
    logits = m.mlp_att(h).squeeze(-1)[0]
    a = torch.exp(logits) / torch.exp(logits).sum()
    torch.testing.assert_close(out.attention[0], a)
    torch.testing.assert_close(out.context[0], (a[:, None] * h[0]).sum(0))


@pytest.mark.parametrize("case", ["single", "constant", "zero_labels"])
def test_finite_loss_and_gradients_in_edge_cases(case):
    m = _model(confusion_weight=1e-3)
    x, y, mask = _batch()
    if case == "single":
        mask = torch.zeros_like(mask)
        mask[:, 0] = True
    if case == "constant":
        x = torch.ones_like(x)
    if case == "zero_labels":
        y = torch.zeros_like(y)
    from ctxrank.data.lists import ListBatch

    batch = ListBatch(features=x, labels=y * mask, mask=mask, query_index=torch.arange(3))
    loss = m.training_loss(batch, get_loss("attrank"))
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_confusion_term_is_added_with_its_weight():
    from ctxrank.data.lists import ListBatch

    x, y, mask = _batch()
    batch = ListBatch(features=x, labels=y, mask=mask, query_index=torch.arange(3))
    base = _model(confusion_weight=0.0).training_loss(batch, get_loss("attrank"))
    m = _model(confusion_weight=0.5)
    out = m.details(x, mask)
    expected = base + 0.5 * chamfer_confusion(out.normalized, mask)
    torch.testing.assert_close(m.training_loss(batch, get_loss("attrank")), expected)


def test_dropout_is_off_by_default_and_acts_in_training_only():
    paper, dropped = _model(), _model(dropout=0.4)
    assert not any(isinstance(mod, Dropout) for mod in paper.modules())  # the paper's model
    assert any(isinstance(mod, Dropout) for mod in dropped.modules())
    # ... with the layers' keys of models saved before the option existed
    layers = (("encoder", (0, 2)), ("mlp_att", (0, 2, 4)))
    assert [k for k in paper.state_dict() if k.startswith(("encoder", "mlp_att"))] == [
        f"{m}.{i}.{w}" for m, ids in layers for i in ids for w in ("weight", "bias")
    ]
    # the option adds no parameter and draws nothing at initialization: the same weights, same seed
    assert [p.shape for p in dropped.parameters()] == [p.shape for p in paper.parameters()]
    assert all(torch.equal(p, q) for p, q in zip(dropped.parameters(), paper.parameters(), strict=True))
    x, _, mask = _batch()
    paper.eval(), dropped.eval()
    torch.testing.assert_close(dropped(x, mask), paper(x, mask))  # evaluation: the identity
    with torch.no_grad():
        torch.testing.assert_close(dropped.serving_scores(x, mask)[mask], paper(x, mask)[mask])
    dropped.train()
    torch.manual_seed(1)
    first = dropped(x, mask)
    assert not torch.allclose(first[mask], paper(x, mask)[mask])  # training: it acts
    # ... on real items only: padding changes no real item's training score under the same draws
    xp = torch.cat([x, torch.randn(3, 4, 5, dtype=torch.float64) * 100], dim=1)
    mp = torch.cat([mask, torch.zeros(3, 4, dtype=torch.bool)], dim=1)
    torch.manual_seed(1)
    torch.testing.assert_close(dropped(xp, mp)[:, :6][mask], first[mask])


@pytest.mark.parametrize("bad", [-0.1, 1.0, "0.2", True])
def test_dropout_is_validated(bad):
    with pytest.raises((ValueError, TypeError), match=r"model_params\.dropout"):
        make_model("qilcm", 5, {"dropout": bad})


def test_variants_are_registered_with_their_switches():
    assert MODELS["qilcm-variant1"].config_class().pooling == "mean"
    assert MODELS["qilcm-variant2"].config_class().confusion_weight == 0
    v3 = MODELS["qilcm-variant3"].config_class()
    assert v3.confusion_weight == 0 and v3.query_norm is False


def _shifted_task(n_queries, seed, n=20, f=6):
    """Queries whose features are shifted and scaled by a query-specific transform; relevance is the
    within-list rank of a fixed linear utility (so only within-query comparisons carry signal)."""
    rng = np.random.default_rng(seed)
    w = np.linspace(1.0, -1.0, f)
    xs, ys = [], []
    for _ in range(n_queries):
        z = rng.normal(size=(n, f))
        u = z @ w
        rank = np.argsort(np.argsort(-u))
        y = np.where(rank < 2, 2.0, np.where(rank < 5, 1.0, 0.0))
        scale = np.exp(rng.normal(scale=1.0, size=f))
        offset = rng.normal(scale=3.0, size=f)
        xs.append(z * scale + offset)
        ys.append(y)
    return RankingData(
        features=np.concatenate(xs).astype(np.float32),
        labels=np.concatenate(ys).astype(np.float32),
        query_ids=np.arange(n_queries).astype(str),
        query_offsets=np.arange(0, n * n_queries + 1, n),
    )


@pytest.mark.slow
def test_qn_layer_wins_on_query_level_shifts():
    tr, va, te = _shifted_task(160, 1), _shifted_task(40, 2), _shifted_task(60, 3)
    cfg = TrainConfig(batch_size=20, max_epochs=25, patience=25, lr=3e-3, threads=1)
    results = {}
    for name, params in [("qilcm", SMALL), ("qilcm-variant3", SMALL), ("mlp", {"hidden": [16, 8]})]:
        seed_everything(0)
        model = make_model(name, tr.n_features, params)
        fit(model, get_loss("attrank"), tr, va, cfg, progress=False)
        per_q = evaluate_queries(predict(model, te), te.labels, te.query_offsets, ["ndcg@5"])
        results[name] = mean_metrics(per_q)["ndcg@5"]
    assert results["qilcm"] > results["mlp"] + 0.05, results
    assert results["qilcm"] > results["qilcm-variant3"] + 0.05, results


def test_trains_on_letor_like_data():
    tr, va = make_ranking_data(40, seed=1), make_ranking_data(20, seed=2)
    seed_everything(0)
    model = make_model("qilcm", tr.n_features, SMALL)
    result = fit(
        model, get_loss("attrank"), tr, va, TrainConfig(batch_size=8, max_epochs=3, threads=1), progress=False
    )
    assert np.isfinite(result.best_metric)


def test_config_choices_are_checked_as_every_choice():
    from ctxrank.models.qilcm import QILCMConfig

    cases = (("pooling", "max", "'attention', 'mean'"), ("confusion_form", "all", "'sum', 'mean'"))
    for key, bad, valid in cases:
        with pytest.raises(ValueError, match=rf"model_params\.{key} must be one of \[{valid}\], got '{bad}'"):
            QILCMConfig(**{key: bad})
