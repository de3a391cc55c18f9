"""Numerical edge cases across every model and loss of the registries.

Every (model, loss) pair must give a finite loss and finite gradients on: lists of length 1, all-equal
labels, all-zero labels, all-equal features, features of 1e30 (as normalized data could never hold,
but a raw un-normalized column can), and a batch that mixes them with padding. Labels outside ARSM's
range are a clear error, not a silent clamp.
"""

import functools

import numpy as np
import pytest
import torch

from ctxrank.config import TrainConfig
from ctxrank.data.lists import ListBatch
from ctxrank.data.ranking_data import RankingData
from ctxrank.losses import LOSSES
from ctxrank.registry import MODELS, make_model
from ctxrank.training.loop import fit

F = 4
SMALL = {
    "dlcm": {"encoder_widths": [8, 8]},
    "dcm": {"embed": 8, "hidden": 8},
    "arsm": {"hidden": [8], "n_levels": 5},
    "attn": {"d_fc": 8, "heads": 2, "d_ff": 8, "blocks": 2},
    "setrank": {"d_model": 8, "heads": 2, "d_ff": 8, "blocks": 2},
}


def _models_and_losses():
    for name, cls in sorted(MODELS.items()):
        if not cls.traits.torch_module:  # whole-list baselines have no padded batches
            continue
        if cls.traits.own_objective:
            yield name, None
        else:
            for loss in sorted(LOSSES):
                yield name, loss


def _batch(features, labels, lengths):
    B, L = len(lengths), max(lengths)
    mask = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]
    x = torch.zeros(B, L, F)
    y = torch.zeros(B, L)
    for b, n in enumerate(lengths):
        x[b, :n] = features[b][:n]
        y[b, :n] = labels[b][:n]
    return ListBatch(features=x, labels=y, mask=mask, query_index=torch.arange(B))


def _cases():
    g = torch.Generator().manual_seed(0)
    rand = torch.rand(3, 6, F, generator=g)
    graded = torch.tensor([[2.0, 0, 1, 0, 3, 1]] * 3)
    return {
        "single-item lists": _batch(rand, graded, [1, 1, 1]),
        "all-equal labels": _batch(rand, torch.full((3, 6), 2.0), [6, 4, 2]),
        "all-zero labels": _batch(rand, torch.zeros(3, 6), [6, 4, 2]),
        "all-equal features": _batch(torch.full((3, 6, F), 0.5), graded, [6, 4, 2]),
        "features of 1e30": _batch(rand * 1e30, graded, [6, 4, 2]),
        "mixed with padding": _batch(
            torch.stack([rand[0], torch.full((6, F), 0.5), rand[2] * 1e30]), graded, [1, 6, 3]
        ),
    }


CASES = _cases()


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(("model_name", "loss_name"), list(_models_and_losses()))
def test_finite_loss_and_gradients(model_name, loss_name, case):
    torch.manual_seed(0)
    model = make_model(model_name, F, SMALL.get(model_name, {}))
    loss_fn = None if loss_name is None else functools.partial(LOSSES[loss_name])
    loss = model.training_loss(CASES[case], loss_fn)
    assert torch.isfinite(loss), f"{model_name}/{loss_name} on {case}: loss {loss}"
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), f"{model_name}/{loss_name} {case}: {name}"
    model.eval()
    with torch.no_grad():
        b = CASES[case]
        scores = model(b.features, b.mask)
    assert torch.isfinite(scores[b.mask]).all(), f"{model_name} scores on {case}"


def test_arsm_labels_beyond_its_levels_are_a_clear_error():
    model = make_model("arsm", F, SMALL["arsm"])  # 5 levels: labels 0..4
    batch = _batch(torch.rand(2, 3, F), torch.tensor([[0.0, 7, 1], [1, 2, 0]]), [3, 3])
    with pytest.raises(ValueError, match=r"n_levels=5 needs integer labels in 0\.\.4"):
        model.training_loss(batch, None)
    halves = _batch(torch.rand(1, 3, F), torch.tensor([[0.5, 1, 0]]), [3])
    with pytest.raises(ValueError, match="integer labels"):
        model.training_loss(halves, None)


@pytest.mark.parametrize("model_name", ["mlp", "qilcm", "dlcm", "dcm"])
def test_training_on_degenerate_data_runs_to_a_finite_result(model_name):
    """``fit`` end to end on a split whose every query has one item or no relevant item."""
    rng = np.random.default_rng(0)
    lengths = np.array([1, 1, 3, 1, 4, 1, 2, 1])
    n = int(lengths.sum())
    data = RankingData(
        features=rng.random((n, F)).astype(np.float32),
        labels=np.zeros(n, dtype=np.float32),  # no relevant item anywhere
        query_ids=np.array([f"q{i}" for i in range(lengths.size)]),
        query_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
    )
    model = make_model(model_name, F, SMALL.get(model_name, {}))
    loss = LOSSES[model.traits.default_loss]
    res = fit(
        model, loss, data, data, TrainConfig(max_epochs=2, batch_size=3), progress=False
    )
    assert all(np.isfinite(h["train_loss"]) for h in res.history)
    assert np.isfinite(res.best_metric)
