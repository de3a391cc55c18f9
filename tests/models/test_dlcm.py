"""DLCM (Ai et al., SIGIR 2018): equations against a plain reference, padding and order invariants, gradients,
loss defaults, registry/config, and a synthetic task where list context is needed."""

import functools
import itertools
import json

import numpy as np
import pytest
import torch

from ctxrank.cli import main
from ctxrank.config import RunConfig, TrainConfig, resolve_config
from ctxrank.data.lists import pad_queries
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import attrank, get_loss, listmle
from ctxrank.metrics import evaluate_queries, mean_metrics
from ctxrank.models.dlcm import DLCM, DLCMConfig, PaperGRU
from ctxrank.registry import MODELS, make_model
from ctxrank.training.loop import fit, seed_everything
from ctxrank.training.predict import predict
from tests.conftest import REPO

SMALL = {"encoder_widths": [6, 4], "gru_hidden": 5, "k": 3}
VARIANTS = [
    pytest.param({"gru": g, "direction": d, "bidirectional": b}, id=f"{g}-{d}{'-bi' if b else ''}")
    for g, d, b in itertools.product(("paper", "torch"), ("reverse_rank", "rank"), (False, True))
]


def _model(n_features=4, seed=0, **params):
    torch.manual_seed(seed)
    return make_model("dlcm", n_features, {**SMALL, **params}).double().eval()


def _batch(lengths, n_features=4, seed=0, pad_fill=0.0):
    """float64 features (B, L, F) with real items first, and the mask."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    L = int(lengths.max())
    mask = torch.arange(L)[None, :] < lengths[:, None]
    x = torch.randn(len(lengths), L, n_features, generator=g, dtype=torch.float64)
    if pad_fill is not None:
        x = torch.where(mask[..., None], x, torch.full_like(x, pad_fill))
    return x, mask


# ---------------------------------------------------------------------------------------- equations
def _reference_scores(m: DLCM, X: torch.Tensor) -> torch.Tensor:
    """Eqs. 3-5 for ONE list X (n, F) in rank order, written out item by item (no batching)."""
    enc = m.encoder
    W1, b1, W2, b2 = enc[0].weight, enc[0].bias, enc[2].weight, enc[2].bias
    elu = torch.nn.functional.elu
    xs = [torch.cat([x, elu(W2 @ elu(W1 @ x + b1) + b2)]) for x in X]  # x' = [x; z2]
    n, H = len(xs), m.hidden
    outs, states = [], []
    for order, gru in zip(m.orders, m.grus, strict=True):
        assert isinstance(gru, PaperGRU)
        Wx, bx = gru.input_proj.weight, gru.input_proj.bias
        Wux, Wrx, Wcx = Wx[:H], Wx[H : 2 * H], Wx[2 * H :]
        bu, br, bc = bx[:H], bx[H : 2 * H], bx[2 * H :]
        Wus, Wrs = gru.gate_proj.weight[:H], gru.gate_proj.weight[H:]
        Ws = gru.cand_proj.weight
        fed = list(reversed(range(n))) if order == "reverse_rank" else list(range(n))
        o = torch.zeros(H, dtype=X.dtype)
        out = [None] * n
        for i in fed:  # eq. 4
            u = torch.sigmoid(Wux @ xs[i] + Wus @ o + bu)
            r = torch.sigmoid(Wrx @ xs[i] + Wrs @ o + br)
            s = torch.tanh(Wcx @ xs[i] + Ws @ (r * o) + bc)
            o = (1 - u) * o + u * s
            out[i] = o  # the output at the step where d_i was fed
        outs.append(torch.stack(out))
        states.append(o)
    outputs, s_n = torch.cat(outs, dim=1), torch.cat(states)  # (n, A), (A,)
    scores = torch.zeros(n, dtype=X.dtype)
    for j in range(m.config.k):  # eq. 5, one hidden unit at a time
        c_j = torch.tanh(m.W_phi[:, j, :] @ s_n + m.b_phi[:, j])  # (A,)
        scores = scores + m.V_phi[j] * (outputs @ c_j)
    return scores


@pytest.mark.parametrize("direction", ["reverse_rank", "rank"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_scores_match_the_equations_written_out(direction, bidirectional):
    m = _model(direction=direction, bidirectional=bidirectional)
    x, mask = _batch([6, 3, 1])
    with torch.no_grad():
        got = m(x, mask)
        for b, n in enumerate(mask.sum(1).tolist()):
            torch.testing.assert_close(got[b, :n], _reference_scores(m, x[b, :n]), rtol=1e-12, atol=1e-12)


def test_shapes_and_authors_defaults():
    m = make_model("dlcm", 46)
    assert isinstance(m, DLCM) and m.config == DLCMConfig()
    # authors' code: x' has --embed_size 1024 columns, abstraction widths [(F+beta)//2, beta], GRU alpha
    assert [lin.out_features for lin in m.encoder if isinstance(lin, torch.nn.Linear)] == [512, 978]
    assert (m.alpha, m.hidden, m.orders) == (1024, 1024, ("reverse_rank",))
    assert (m.W_phi.shape, m.b_phi.shape, m.V_phi.shape) == ((1024, 3, 1024), (1024, 3), (3,))
    assert DLCMConfig().resolved_encoder_widths(2000) == ()  # F >= 1024: x' = x
    assert make_model("dlcm", 3, {"encoder_widths": []}).alpha == 3  # beta = 0
    bi = _model(bidirectional=True, direction="rank")
    assert bi.orders == ("rank", "reverse_rank") and bi.context_width == 2 * bi.hidden
    x, mask = _batch([4, 2])
    o, s = bi.context(x, mask)
    assert o.shape == (2, 4, 10) and s.shape == (2, 10) and bi(x, mask).shape == (2, 4)


def test_feed_order_reverses_within_each_length():
    idx = DLCM.feed_order(torch.tensor([4, 2, 0]), 5, "reverse_rank")
    assert idx.tolist() == [[3, 2, 1, 0, 4], [1, 0, 2, 3, 4], [0, 1, 2, 3, 4]]
    assert torch.equal(idx.gather(1, idx), torch.arange(5).expand(3, 5))  # an involution
    assert DLCM.feed_order(torch.tensor([2]), 3, "rank").tolist() == [[0, 1, 2]]


# ---------------------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("params", VARIANTS)
def test_padding_never_changes_real_scores(params):
    m = _model(**params)
    x, mask = _batch([7, 4, 1, 2], seed=1)
    base = m(x, mask)
    # random (huge) features in the padded slots, plus 5 extra padded columns
    g = torch.Generator().manual_seed(9)
    noisy = torch.where(mask[..., None], x, 1e3 * torch.randn(x.shape, generator=g, dtype=x.dtype))
    extra = torch.randn(4, 5, 4, generator=g, dtype=x.dtype)
    x2 = torch.cat([noisy, extra], dim=1).requires_grad_(True)
    mask2 = torch.cat([mask, torch.zeros(4, 5, dtype=torch.bool)], dim=1)
    out = m(x2, mask2)
    torch.testing.assert_close(out[:, :7][mask], base[mask], rtol=0, atol=1e-12)
    out[mask2].sum().backward()  # real scores do not depend on padded features at all
    assert torch.all(x2.grad[~mask2] == 0) and x2.grad[mask2].abs().sum() > 0


def test_a_naive_whole_row_reversal_would_leak_padding():
    """The check above has teeth: reversing whole rows (padding first) changes the context."""
    m = _model()
    x, mask = _batch([5, 2], pad_fill=None)
    lengths = mask.sum(1)
    with torch.no_grad():
        xp = m.represent(x)
        _, naive = m.grus[0](xp.flip(1), torch.full_like(lengths, x.shape[1]))
        _, s_n = m.context(x, mask)
    torch.testing.assert_close(naive[0], s_n[0])  # full row: the same
    assert not torch.allclose(naive[1], s_n[1])  # short row: padding entered the state


@pytest.mark.parametrize("params", VARIANTS)
def test_order_matters_for_real_items_only(params):
    m = _model(**params)
    x, mask = _batch([6, 3], seed=2)
    base = m(x, mask)
    perm = torch.tensor([2, 0, 5, 1, 4, 3])
    xp = x.clone()
    xp[0, :6] = x[0, perm]
    permuted = m(xp, mask)
    # a per-item scorer would give permuted[0, j] == base[0, perm[j]]; DLCM reads the order
    assert (permuted[0, :6] - base[0, perm]).abs().max() > 1e-6
    torch.testing.assert_close(permuted[1, :3], base[1, :3], rtol=0, atol=1e-12)  # other list untouched
    # shuffling the padded slots of row 1 changes nothing
    xs = x.clone()
    xs[1, 3:] = torch.randn(3, 4, dtype=x.dtype)
    torch.testing.assert_close(m(xs, mask)[mask], base[mask], rtol=0, atol=1e-12)


def test_feeding_direction_changes_the_model_function():
    fwd, rev = _model(direction="rank"), _model(direction="reverse_rank")
    rev.load_state_dict(fwd.state_dict())  # same weights, only the order differs
    x, mask = _batch([5])
    assert not torch.allclose(fwd(x, mask), rev(x, mask))


@pytest.mark.parametrize("params", VARIANTS)
def test_batch_equals_loop_over_single_lists(params):
    m = _model(**params)
    x, mask = _batch([5, 1, 8, 3, 8], seed=3)
    batched = m(x, mask)
    for b, n in enumerate(mask.sum(1).tolist()):
        single = m(x[b : b + 1, :n], mask[b : b + 1, :n])
        torch.testing.assert_close(batched[b, :n], single[0], rtol=0, atol=1e-12)


def test_empty_rows_and_all_padded_batches_are_finite():
    m = _model(bidirectional=True)
    x, mask = _batch([3, 1, 1])
    mask[1:] = False
    assert torch.isfinite(m(x, mask)).all()
    assert torch.isfinite(m(x, torch.zeros_like(mask))).all()
    torch.testing.assert_close(m(x, mask)[0, :3], m(x[:1, :3], mask[:1, :3])[0], rtol=0, atol=1e-12)


def test_mask_must_put_real_items_first():
    m = _model()
    x, mask = _batch([3, 3])
    mask[0, 1] = False
    with pytest.raises(ValueError, match="real items first"):
        m(x, mask)


# ---------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("gru", ["paper", "torch"])
def test_finite_gradients_on_edge_lists(gru):
    m = _model(gru=gru, bidirectional=True).train()
    x, mask = _batch([1, 4, 3, 1])
    x[2, :3] = 0.7  # all-equal features
    mask[3] = False  # an empty list
    labels = torch.tensor([[1.0, 0, 0, 0], [2, 0, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]], dtype=x.dtype)
    for loss_fn in (functools.partial(attrank, form="dlcm"), listmle, get_loss("softrank")):
        m.zero_grad()
        loss = loss_fn(m(x, mask), labels, mask)
        loss.backward()
        grads = [p.grad for p in m.parameters()]
        assert torch.isfinite(loss) and all(g is not None and torch.isfinite(g).all() for g in grads)
        assert sum(g.abs().sum() for g in grads) > 0


@pytest.mark.parametrize("gru", ["paper", "torch"])
def test_gradcheck_float64(gru):
    m = _model(n_features=3, gru=gru, encoder_widths=[3, 2], gru_hidden=3, k=2, bidirectional=True)
    x, mask = _batch([3, 2], n_features=3)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda f: m(f, mask)[mask], (x,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("B", [5, 200])  # the projections' gradients of all 7 steps at once; of 3, 3 and 1
def test_the_paper_grus_written_out_backward_equals_autograd_of_its_steps(monkeypatch, B):
    """Training runs the paper GRU (input projections and eq. 4's recurrence) through ``_PaperGRUSteps``
    (its gates kept in four tensors, its backward through time written out, the projections' gradients
    formed a block of steps at a time): the outputs and state are bitwise those of ``input_proj`` then
    ``paper_gru_steps``, the gradients of the input, the projection's weight and bias and both recurrent
    matrices are autograd's of those steps (float64, lists of 7, 3, 0, 1 and 5 steps), and gradcheck
    passes. Scoring (no gradients) and tracing run the plain steps."""
    from ctxrank.models import dlcm

    torch.manual_seed(0)
    T, D, H = 7, 4, 6
    seq = torch.randn(B, T, D, dtype=torch.float64, requires_grad=True)
    gru = dlcm.PaperGRU(D, H).double()
    weights = gru.weights()
    lengths = torch.tensor([7, 3, 0, 1, 5] * (B // 5))
    ref_out, ref_state = dlcm.paper_gru_steps(gru.input_proj(seq), *weights[2:], lengths)
    out, state = gru(seq, lengths)
    assert torch.equal(out, ref_out) and torch.equal(state, ref_state)
    g_out, g_state = torch.randn_like(out), torch.randn_like(state)
    wrt = (seq, *weights)
    ref = torch.autograd.grad((ref_out * g_out).sum() + (ref_state * g_state).sum(), wrt)
    got = torch.autograd.grad((out * g_out).sum() + (state * g_state).sum(), wrt)
    assert dlcm._steps_per_block(B) == (3 if B == 200 else 103)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    small = (torch.randn(3, 4, 2, dtype=torch.float64), torch.randn(9, 2, dtype=torch.float64),
             torch.randn(9, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64),
             torch.randn(3, 3, dtype=torch.float64))  # fmt: skip
    monkeypatch.setattr(dlcm, "_steps_per_block", lambda B: 3)  # blocks of 3, 1 (the first) steps
    step = functools.partial(dlcm._PaperGRUSteps.apply, lengths=torch.tensor([4, 2, 0]))
    assert torch.autograd.gradcheck(step, tuple(t.requires_grad_(True) for t in small))
    monkeypatch.undo()
    calls = []
    real = dlcm._PaperGRUSteps.apply
    monkeypatch.setattr(dlcm._PaperGRUSteps, "apply", lambda *a: calls.append(1) or real(*a))
    m = _model(gru="paper").train()
    x, mask = _batch([3, 4])
    m(x, mask).sum().backward()
    assert calls == [1]
    with torch.no_grad():
        m(x, mask)
    assert calls == [1]


@pytest.mark.parametrize("bidirectional", [False, True])
def test_training_keeps_neither_the_abstraction_nor_the_reordered_inputs_and_grads_are_unchanged(
    bidirectional, monkeypatch
):
    """In training the input abstraction (eq. 3) is recomputed in backward (checkpointed) and the items
    are reordered by indexing, so backward keeps neither the abstraction's hidden layers nor a second
    copy of ``x'``: the loss and every gradient are bitwise those of keeping them (the encoder run
    plainly, ``gather`` for the reordering)."""
    from ctxrank.models import dlcm

    x, mask = _batch([5, 3, 1, 4])
    params = {"encoder_widths": [7, 5], "bidirectional": bidirectional, "gru": "paper"}

    def step():
        m = _model(**params).train()
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            loss = (m(x, mask) * torch.linspace(-1, 1, x.shape[1], dtype=x.dtype)).sum()
        return loss, torch.autograd.grad(loss, list(m.parameters())), saved

    loss, grads, saved = step()
    assert not [t.shape for t in saved if t.shape[-1:] == (7,)]  # the abstraction's first layer (width 7)
    monkeypatch.setattr(dlcm, "checkpoint", lambda fn, *a, **k: fn(*a))
    monkeypatch.setattr(dlcm, "_reorder", lambda t, idx: t.gather(1, idx[..., None].expand_as(t)))
    ref_loss, ref_grads, ref_saved = step()
    assert [t.shape for t in ref_saved if t.shape[-1:] == (7,)]  # what the test would catch
    assert torch.equal(loss, ref_loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads, strict=True))

    def copies_of_x_prime(tensors):  # x' = [x; z2] is 4 + 5 = 9 wide
        return len({t.untyped_storage().data_ptr() for t in tensors if t.shape[-1:] == (9,)})

    assert copies_of_x_prime(saved) < copies_of_x_prime(ref_saved)


# ---------------------------------------------------------------------------------------- loss
def test_training_loss_defaults_to_the_dlcm_attrank_form():
    data = _context_data(6, seed=4)
    batch = pad_queries(data, np.arange(6))
    m = make_model("dlcm", data.n_features, SMALL)
    scores = m.score_batch(batch)
    expect = {f: attrank(scores, batch.labels, batch.mask, form=f) for f in ("dlcm", "qilcm")}
    assert not torch.allclose(expect["dlcm"], expect["qilcm"])
    assert MODELS["dlcm"].traits.default_loss == "attrank"
    for fn, want in [
        (get_loss("attrank"), expect["dlcm"]),  # the bare registered function
        (functools.partial(get_loss("attrank")), expect["dlcm"]),  # as cli/pipeline build it
        (functools.partial(attrank, form="qilcm"), expect["qilcm"]),  # an explicit form wins
        (functools.partial(listmle), listmle(scores, batch.labels, batch.mask)),  # other losses as is
    ]:
        torch.testing.assert_close(m.training_loss(batch, fn), want)


# ---------------------------------------------------------------------------------------- registry
def test_registry_config_and_validation():
    assert MODELS["dlcm"].cls is DLCM
    cfg = resolve_config(
        None,
        [
            "model=dlcm",
            "model_params.encoder_widths=[8,4]",
            "model_params.direction=rank",
            "model_params.bidirectional=true",
            "loss_params.form=dlcm_code",
        ],
    )
    assert cfg.loss_name == "attrank" and dict(cfg.loss_params) == {"form": "dlcm_code"}
    m = make_model("dlcm", 5, cfg.model_params)
    assert m.config.encoder_widths == (8, 4) and m.orders == ("rank", "reverse_rank")
    for bad, option in [
        ({"encoder_widths": [8]}, "encoder_widths"),
        ({"encoder_widths": [8, 0]}, "encoder_widths"),
        ({"gru_hidden": 0}, "gru_hidden"),
        ({"k": 0}, "k"),
        ({"direction": "up"}, "direction"),
        ({"bidirectional": 1}, "bidirectional"),
        ({"gru": "lstm"}, "gru"),
        ({"dropout": 1.0}, "dropout"),
        ({"hidden": [3]}, "unknown option"),
    ]:
        with pytest.raises(ValueError, match=f"model_params.*{option}"):
            RunConfig(model="dlcm", model_params=bad)


def test_categorical_columns_are_embedded():
    torch.manual_seed(0)
    m = make_model("dlcm", 2, SMALL, categorical_cardinalities=[4, 3])
    x, mask = _batch([3, 2], n_features=2)
    cat = torch.randint(0, 5, (2, 3, 2))
    assert m.input_dim == 2 + 2 + 2 and torch.isfinite(m.float()(x.float(), mask, categorical=cat)).all()


# ---------------------------------------------------------------------------------------- learning
def _context_data(n_queries, seed):
    """Relevance needs the list: the sign of a hidden query type t decides whether high or low x1 is
    relevant; t shows only in the LIST MEAN of the noisy x2 (per item x2 = t + 2 N(0, 1))."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 15, size=n_queries)
    t = np.repeat(rng.choice([-1.0, 1.0], size=n_queries), lengths)
    n = int(lengths.sum())
    x1 = rng.normal(size=n)
    x2 = t + 2.0 * rng.normal(size=n)
    x = np.stack([x1, x2, rng.normal(size=n), rng.normal(size=n)], axis=1).astype(np.float32)
    labels = np.digitize(t * x1, [0.3, 1.0]).astype(np.float32)
    return RankingData(
        features=x,
        labels=labels,
        query_ids=np.array([f"q{i}" for i in range(n_queries)]),
        query_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        source=f"context(seed={seed})",
    )


def test_dlcm_beats_a_per_item_scorer_when_context_matters():
    train, valid, test = _context_data(300, 0), _context_data(80, 1), _context_data(200, 2)
    cfg = TrainConfig(batch_size=32, max_epochs=20, patience=20, lr=0.01, seed=0, threads=1)
    loss = functools.partial(attrank, form="dlcm")
    ndcg = {}
    for name, params in [
        ("mlp", {"hidden": [32, 16]}),
        ("dlcm", {"encoder_widths": [16, 12], "gru_hidden": 16, "k": 3}),
    ]:
        seed_everything(0)
        model = make_model(name, train.n_features, params)
        fit(model, loss, train, valid, cfg, progress=False)
        per_query = evaluate_queries(predict(model, test), test.labels, test.query_offsets, ["ndcg@5"])
        ndcg[name] = mean_metrics(per_query)["ndcg@5"]
    assert ndcg["dlcm"] > ndcg["mlp"] + 0.1, ndcg


# ---------------------------------------------------------------------------------------- end to end
def test_cli_train_save_and_reload_on_mq2008(tmp_path, capsys):
    out = tmp_path / "dlcm"
    args = [
        "train",
        "--model",
        "dlcm",
        "--dataset",
        "mq2008",
        "--fold",
        "1",
        "--no-progress",
        "--out",
        str(out),
    ]
    for s in ("encoder_widths=[8,4]", "gru_hidden=8", "bidirectional=true"):
        args += ["--set", f"model_params.{s}"]
    args += ["--set", "train.max_epochs=1", "--set", "train.threads=1"]
    assert main(args) == 0
    saved = json.loads((out / "test_metrics.json").read_text())["metrics"]
    capsys.readouterr()
    test_file = REPO / "src" / "ctxrank" / "datasets" / "mq2008" / "S5.txt.gz"  # Fold1 test
    assert main(["evaluate", "--model", str(out), "--data", str(test_file), "--json"]) == 0
    reloaded = json.loads(capsys.readouterr().out)["metrics"]
    assert reloaded["ndcg@10"] == pytest.approx(saved["ndcg@10"], abs=1e-8)
