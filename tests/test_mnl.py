"""Multinomial logit: a linear scorer fitted by the log-likelihood of the chosen item."""

import torch

from ctxrank.data.lists import ListBatch
from ctxrank.losses import get_loss
from ctxrank.registry import make_model


def test_mnl_loss_is_the_negative_log_likelihood_of_the_choice():
    torch.manual_seed(0)
    model = make_model("mnl", 4)
    assert [type(m).__name__ for m in model.net] == ["Linear"]  # linear utilities
    x = torch.randn(2, 5, 4)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    labels = torch.zeros(2, 5)
    labels[0, 3] = 1
    labels[1, 1] = 1
    batch = ListBatch(features=x, labels=labels, mask=mask, query_index=torch.arange(2))
    loss = model.training_loss(batch, get_loss("listnet"))  # the model's default options apply
    v = model(x, mask).masked_fill(~mask, -torch.inf)
    expected = -(torch.log_softmax(v[0], -1)[3] + torch.log_softmax(v[1], -1)[1]) / 2
    assert torch.allclose(loss, expected)
    # an explicitly bound option wins over the model's default
    exp_form = model.training_loss(batch, lambda s, y, m: get_loss("listnet")(s, y, m, label_transform="exp"))
    assert not torch.allclose(exp_form, expected)
