"""DCM: pointer-network choice model."""

import pytest
import torch

from ctxrank.config import RunConfig
from ctxrank.registry import MODELS, make_model


def _model(**params):
    torch.manual_seed(0)
    return make_model("dcm", 5, {"hidden": 16, "embed": 8, **params})


def _inputs(seed=0, B=3, L=6):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, 5, generator=gen)
    lengths = torch.tensor([3, L, 1])[:B]
    mask = torch.arange(L)[None, :] < lengths[:, None]
    return x, mask


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_padding_never_changes_a_real_score(cell):
    model = _model(cell=cell).eval()
    x, mask = _inputs()
    ref = model(x, mask)
    x_pad = torch.cat([x, 1e3 * torch.randn(3, 5, 5)], 1)
    mask_pad = torch.cat([mask, torch.zeros(3, 5, dtype=torch.bool)], 1)
    x_junk = torch.where(mask[..., None], x, torch.randn_like(x) * 50)  # junk in existing padding too
    out = model(x_pad, mask_pad)[:, :6]
    assert torch.allclose(out[mask], ref[mask], atol=1e-5)
    assert torch.allclose(model(x_junk, mask)[mask], ref[mask], atol=1e-5)


def test_each_row_is_scored_as_if_alone():
    model = _model().eval()
    x, mask = _inputs()
    batch = model(x, mask)
    for b in range(3):
        n = int(mask[b].sum())
        alone = model(x[b : b + 1, :n], mask[b : b + 1, :n])
        assert torch.allclose(alone[0], batch[b, :n], atol=1e-5)


def test_pointer_scores_equal_the_written_equations():
    model = _model().eval()
    x, mask = _inputs()
    b, n = 1, int(mask[1].sum())
    with torch.no_grad():
        e = model.embed(x[b, :n])
        h_all, (hn, cn) = model.encoder(e[None])
        d, _ = model.decoder(model.go[None], (hn[0], cn[0]))
        u = model.v(torch.tanh(model.W1(h_all[0]) + model.W2(d))).squeeze(-1)
        assert torch.allclose(model(x, mask)[b, :n], u, atol=1e-6)


def test_order_matters_as_in_the_original():
    model = _model().eval()
    x, mask = _inputs()
    perm = torch.tensor([2, 1, 0, 3, 4, 5])
    a = model(x, mask)[1]
    b = model(x[:, perm], mask)[1][perm]  # same items, other reading order
    assert not torch.allclose(a, b, atol=1e-4)


def test_real_items_must_come_first():
    model = _model()
    x, _ = _inputs()
    mask = torch.tensor([[False, True, True, False, False, False]] * 3)
    with pytest.raises(ValueError, match="real items first"):
        model(x, mask)


def test_categorical_embeddings_and_unseen_codes():
    torch.manual_seed(0)
    model = make_model("dcm", 5, {"hidden": 16, "embed": 8}, categorical_cardinalities=[4, 3]).eval()
    x, mask = _inputs()
    codes = torch.randint(0, 3, (3, 6, 2))
    out = model(x, mask, categorical=codes)
    unseen = codes.clone()
    unseen[..., 0] = 99  # beyond the vocabulary -> the reserved unknown code 0
    known0 = codes.clone()
    known0[..., 0] = 0
    assert torch.isfinite(out[mask]).all()
    assert torch.allclose(model(x, mask, categorical=unseen), model(x, mask, categorical=known0))


def test_empty_lists_give_finite_scores_and_gradients():
    model = _model()
    x = torch.randn(2, 4, 5)
    mask = torch.tensor([[True, True, False, False], [False] * 4])
    out = model(x, mask)
    assert torch.isfinite(out).all()
    out[mask].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_defaults_and_registry():
    assert MODELS["dcm"].traits.default_loss == "attrank"
    cfg = RunConfig(model="dcm", loss="listnet", loss_params={"label_transform": "identity"})
    assert cfg.loss_name == "listnet"
    with pytest.raises(ValueError, match=r"model_params\.cell"):
        make_model("dcm", 5, {"cell": "rnn"})


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_traced_encoder_loop_equals_the_packed_encoder(cell):
    """``encode_steps`` (the loop a trace records, for export) and ``encode_packed`` (training's
    cuDNN path) compute the same outputs and final states, empty rows included."""
    model = _model(cell=cell).double().eval()
    gen = torch.Generator().manual_seed(3)
    e = torch.randn(4, 6, 8, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([3, 6, 0, 1])
    h_packed, state_packed = model.encode_packed(e, lengths)
    h_steps, state_steps = model.encode_steps(e, lengths)
    torch.testing.assert_close(h_steps, h_packed, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(state_steps, state_packed, rtol=1e-12, atol=1e-12)
