"""Full-batch maximum-likelihood fitting of a model whose log-likelihood is concave in its parameters
(the conditional logit, ``models.mlp.MultinomialLogit``: ``full_batch = True``).

The objective is the exact mean negative log-likelihood of the chosen alternatives over the training
situations, plus an optional L2 penalty on every parameter but the (cancelling) bias::

    f(theta) = 1/Q sum_q [ -1/|C_q| sum_{j in C_q} log softmax(v_q(theta))_j ] + l2/2 ||theta||^2

computed in float64 on all situations at once (padded lists, ``mask`` keeps padding out of the
softmax), its gradient by autograd (exact), and minimized with SciPy: ``"lbfgs"`` =
``scipy.optimize.minimize(method="L-BFGS-B")``, ``"newton"`` = ``method="trust-exact"`` with the exact
Hessian (``torch.autograd.functional.hessian``). Several ``l2`` values: fitted in increasing order, each
warm-started from the previous, and the one with the best validation log-likelihood is kept (ties: the
smaller penalty). A situation without a chosen alternative adds nothing. Deterministic: no randomness.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ctxrank.data.lists import pad_queries
from ctxrank.data.ranking_data import RankingData
from ctxrank.models.base import Ranker

__all__ = ["fit_full_batch", "mean_log_likelihood"]


@dataclass
class _Lists:
    """All situations of a split as float64 padded tensors."""

    features: torch.Tensor  # (Q, L, F)
    chosen: torch.Tensor  # (Q, L) float64, 1 = chosen
    mask: torch.Tensor  # (Q, L) bool
    categorical: torch.Tensor | None  # (Q, L, C)
    weight: torch.Tensor  # (Q, L) chosen / number chosen (0 for a situation without a choice)

    @classmethod
    def of(cls, data: RankingData) -> _Lists:
        b = pad_queries(data, np.arange(data.n_queries))
        chosen = ((b.labels > 0) & b.mask).to(torch.float64)
        n = chosen.sum(-1, keepdim=True)
        return cls(b.features.double(), chosen, b.mask, b.categorical, chosen / n.clamp_min(1))


def _nll_of(v: torch.Tensor, lists: _Lists) -> torch.Tensor:
    """Mean over situations of -log P(chosen) (averaged over a situation's chosen items); v (Q, L)."""
    logp = torch.log_softmax(v.masked_fill(~lists.mask, -torch.inf), dim=-1)
    return -(torch.where(lists.mask, logp, 0.0) * lists.weight).sum() / v.shape[0]


def _nll(model: Ranker, lists: _Lists) -> torch.Tensor:
    return _nll_of(model(lists.features, lists.mask, categorical=lists.categorical), lists)


def mean_log_likelihood(model: Ranker, data: RankingData) -> float:
    """Mean log-likelihood of the chosen alternatives per situation under ``softmax(model scores)``."""
    with torch.no_grad():
        dtype = next(model.parameters()).dtype
        lists = _Lists.of(data)
        model.double()
        try:
            return -float(_nll(model, lists))
        finally:
            model.to(dtype)


class _Objective:
    """``f(theta)``, its gradient and Hessian for SciPy; theta = the model's flat parameters, swapped
    in with ``torch.func.functional_call`` (the model's own tensors are not touched)."""

    def __init__(self, model: Ranker, lists: _Lists, l2: float) -> None:
        self.model, self.lists, self.l2 = model, lists, l2
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.sizes = [p.numel() for _, p in named]
        bias = getattr(getattr(model, "net", [None])[-1], "bias", None)
        self.penalized = torch.cat(
            [torch.full((p.numel(),), 0.0 if p is bias else 1.0, dtype=torch.float64) for _, p in named]
        )

    def value(self, theta: torch.Tensor) -> torch.Tensor:
        parts = torch.split(theta, self.sizes)
        params = {n: t.view(s) for n, t, s in zip(self.names, parts, self.shapes, strict=True)}
        lists = self.lists
        v = torch.func.functional_call(
            self.model, params, (lists.features, lists.mask), {"categorical": lists.categorical}
        )
        return _nll_of(v, lists) + 0.5 * self.l2 * (self.penalized * theta * theta).sum()

    def fun_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        theta = torch.from_numpy(x).requires_grad_(True)
        value = self.value(theta)
        (grad,) = torch.autograd.grad(value, theta)
        return float(value.detach()), grad.numpy().copy()

    def hess(self, x: np.ndarray) -> np.ndarray:
        return torch.autograd.functional.hessian(self.value, torch.from_numpy(x)).numpy().copy()


def _minimize(objective: _Objective, x0: np.ndarray, config: Any) -> tuple[np.ndarray, dict[str, Any]]:
    from scipy.optimize import minimize

    if config.solver == "newton":
        res = minimize(
            objective.fun_grad,
            x0,
            jac=True,
            hess=objective.hess,
            method="trust-exact",
            options={"gtol": config.gtol, "maxiter": config.max_iter},
        )
    else:
        res = minimize(
            objective.fun_grad,
            x0,
            jac=True,
            method="L-BFGS-B",
            options={"gtol": config.gtol, "ftol": 1e-15, "maxiter": config.max_iter, "maxcor": 30},
        )
    _, grad = objective.fun_grad(res.x)
    info = {
        "converged": bool(res.success),
        "iterations": int(res.nit),
        "max_abs_gradient": float(np.max(np.abs(grad))) if grad.size else 0.0,
        "message": str(res.message),
    }
    return res.x, info


def fit_full_batch(model: Ranker, train: RankingData, valid: RankingData | None) -> dict[str, Any]:
    """Fit ``model`` (in place) to its penalized maximum likelihood on ``train``; choose ``l2`` on
    ``valid`` when the config lists several. Returns a JSON-ready summary (``log_likelihood`` = mean per
    training situation at the optimum, ``valid_log_likelihood``, ``l2``, solver diagnostics, seconds)."""
    t0 = time.perf_counter()
    config = model.config
    dtype = next(model.parameters()).dtype
    model.double().train(False)
    lists = _Lists.of(train)
    valid_lists = _Lists.of(valid) if valid is not None and len(config.l2) > 1 else None
    params = [p for p in model.parameters() if p.requires_grad]
    x = torch.nn.utils.parameters_to_vector(params).detach().numpy().astype(np.float64)
    tried, best = [], None
    for l2 in sorted(config.l2):
        objective = _Objective(model, lists, l2)
        x, info = _minimize(objective, x, config)
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.from_numpy(x), params)
            score = -float(_nll(model, valid_lists)) if valid_lists is not None else None
        tried.append({"l2": l2, "valid_log_likelihood": score, **info})
        if best is None or (score is not None and score > best[1]):
            best = (x.copy(), score, l2, info)
    assert best is not None
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.from_numpy(best[0]), params)
        train_ll = -float(_nll(model, lists))
    model.to(dtype)
    return {
        "fit": "full-batch maximum likelihood",
        "solver": {"lbfgs": "scipy L-BFGS-B", "newton": "scipy trust-exact"}[config.solver],
        "l2": best[2],
        "log_likelihood": train_ll,
        "valid_log_likelihood": best[1],
        "metric": "loglik",
        "best_valid_metric": best[1],
        "tried": tried,
        **{k: v for k, v in best[3].items() if k != "message"},
        "fit_seconds": time.perf_counter() - t0,
    }
