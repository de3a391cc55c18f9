"""Full-batch maximum-likelihood fitting of a model whose utilities are linear in its parameters, so
that its log-likelihood is concave (the conditional logit, ``models.mlp.MultinomialLogit``:
``traits.full_batch``).

The objective is the exact mean negative log-likelihood of the chosen alternatives over the training
situations, plus an optional L2 penalty on every parameter but the (cancelling) bias::

    f(theta) = 1/Q sum_q [ -1/|C_q| sum_{j in C_q} log softmax(v_q(theta))_j ] + l2/2 ||theta||^2

computed in float64 on all situations at once (padded lists, ``mask`` keeps padding out of the
softmax), its gradient by autograd (exact), and minimized with SciPy: ``"lbfgs"`` =
``scipy.optimize.minimize(method="L-BFGS-B")``, ``"newton"`` = ``method="trust-exact"`` with the exact
Hessian (``torch.autograd.functional.hessian``). Several ``l2`` values: fitted from the largest down,
each warm-started from the previous (a regularisation path), and the one with the best validation
log-likelihood is kept (ties: the smaller penalty). A situation without a chosen alternative adds
nothing. Deterministic: no randomness.

What is reported is what happened, never a solver's word alone:

* **existence**: when ``l2`` lists 0, the training data are first checked for separation
  (:mod:`ctxrank.training.separation`: a direction along which the likelihood grows without a maximum,
  e.g. a categorical level present but never chosen). Then the unpenalized estimate does not exist:
  with other penalties in the list, 0 is not fitted (``tried`` says why); alone, it is fitted and the
  summary says ``"mle_exists": false``. Either way a :class:`FitWarning` names the coefficients that
  run off.
* **convergence**: ``converged`` is true only when the largest gradient component at the returned
  point is at most ``gtol`` (an iteration cap, a line search that gave up or a stall is not), and
  ``stop`` says which; a chosen fit that did not converge gives a :class:`FitWarning`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import minimize

from ctxrank.data.lists import pad_queries
from ctxrank.data.ranking_data import RankingData
from ctxrank.fit_summary import FitSummary
from ctxrank.models.base import RankingModule
from ctxrank.training.diagnostics import TrainingWarning, grid_edge, grid_edge_of, report
from ctxrank.training.separation import Undetermined, find_separation

__all__ = ["FitWarning", "fit_full_batch", "mean_log_likelihood"]

#: coefficients named in a separation warning (the summary names them all)
SHOWN = 8


class FitWarning(TrainingWarning):
    """A maximum-likelihood fit whose estimate does not exist (or whose existence could not be checked),
    that stopped before converging, or whose penalty was chosen at the edge of its grid."""


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


def _nll(model: RankingModule, lists: _Lists) -> torch.Tensor:
    return _nll_of(model(lists.features, lists.mask, categorical=lists.categorical), lists)


def mean_log_likelihood(model: RankingModule, data: RankingData) -> float:
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

    def __init__(self, model: RankingModule, lists: _Lists, l2: float) -> None:
        self.model, self.lists, self.l2 = model, lists, l2
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.sizes = [p.numel() for _, p in named]
        bias = getattr(getattr(model, "net", [None])[-1], "bias", None)
        self.penalized = torch.cat(
            [torch.full((p.numel(),), 0.0 if p is bias else 1.0, dtype=torch.float64) for _, p in named]
        )

    def utilities(self, theta: torch.Tensor, rows: slice = slice(None)) -> torch.Tensor:
        """``v`` (Q, L) of the situations ``rows`` under the flat parameters ``theta``."""
        parts = torch.split(theta, self.sizes)
        params = {n: t.view(s) for n, t, s in zip(self.names, parts, self.shapes, strict=True)}
        lists = self.lists
        cat = lists.categorical[rows] if lists.categorical is not None else None
        return torch.func.functional_call(
            self.model, params, (lists.features[rows], lists.mask[rows]), {"categorical": cat}
        )

    def value(self, theta: torch.Tensor) -> torch.Tensor:
        v = self.utilities(theta)
        return _nll_of(v, self.lists) + 0.5 * self.l2 * (self.penalized * theta * theta).sum()

    def fun_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        theta = torch.from_numpy(x).requires_grad_(True)
        value = self.value(theta)
        (grad,) = torch.autograd.grad(value, theta)
        return float(value.detach()), grad.numpy().copy()

    def hess(self, x: np.ndarray) -> np.ndarray:
        return torch.autograd.functional.hessian(self.value, torch.from_numpy(x)).numpy().copy()


def _minimize(objective: _Objective, x0: np.ndarray, config: Any) -> tuple[np.ndarray, dict[str, Any]]:
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
    largest = float(np.max(np.abs(grad))) if grad.size else 0.0
    if largest <= config.gtol:
        stop = "gradient"
    elif int(res.nit) >= config.max_iter:
        stop = f"iteration cap (model_params.max_iter = {config.max_iter})"
    else:
        stop = f"solver stopped: {res.message}"
    info = {
        "converged": stop == "gradient",
        "stop": stop,
        "iterations": int(res.nit),
        "max_abs_gradient": largest,
        "message": str(res.message),
    }
    return res.x, info


def _design_rows(objective: _Objective) -> tuple[Any, Any, np.ndarray]:
    """The rows of :func:`ctxrank.training.separation.find_separation` (sparse): ``D`` = a chosen minus
    an unchosen alternative's design row, ``E`` = a chosen minus its situation's first chosen one; and
    the situation of each row of ``D``. A design row is the gradient of an alternative's utility in the
    parameters (exact: the utilities are linear in them), a chunk of situations at a time."""
    lists = objective.lists
    n_params = int(sum(objective.sizes))
    chosen = (lists.chosen > 0) & lists.mask
    pairs = chosen[:, :, None] & (lists.mask & ~chosen)[:, None, :]  # (Q, L, L): chosen a, unchosen b
    first = chosen.to(torch.int64).argmax(-1)  # (Q,) the first chosen alternative
    others = chosen & (torch.arange(chosen.shape[1]) != first[:, None])  # (Q, L) the other chosen ones
    eye = torch.eye(n_params, dtype=torch.float64)
    step = max(1, 2**22 // max(1, lists.mask.shape[1] * n_params))
    d_parts, e_parts, where = [], [], []
    with torch.no_grad():
        for s in range(0, lists.mask.shape[0], step):
            rows = slice(s, s + step)
            v0 = objective.utilities(torch.zeros(n_params, dtype=torch.float64), rows)
            z = torch.stack([objective.utilities(eye[i], rows) - v0 for i in range(n_params)], -1)
            q, a, b = torch.nonzero(pairs[rows], as_tuple=True)
            d_parts.append(sp.csr_matrix((z[q, a] - z[q, b]).numpy()))
            where.append(q.numpy() + s)
            q, c = torch.nonzero(others[rows], as_tuple=True)
            e_parts.append(sp.csr_matrix((z[q, c] - z[q, first[rows][q]]).numpy().reshape(-1, n_params)))
    return sp.vstack(d_parts).tocsr(), sp.vstack(e_parts).tocsr(), np.concatenate(where)


def _separation(objective: _Objective, data: RankingData) -> dict[str, Any] | None:
    """None when the unpenalized maximum likelihood exists on ``data`` (the lists of ``objective``);
    else the situations separated and the coefficients that run off (named, with the way they go), or
    ``{"undetermined": why}`` when the check could not decide (the fit goes on)."""
    d_rows, e_rows, situation = _design_rows(objective)
    found = find_separation(d_rows, e_rows)
    if isinstance(found, Undetermined):
        return {"undetermined": found.reason}
    if found is None:
        return None
    labels = getattr(objective.model, "coefficient_labels", lambda _: {})(data)
    names = [
        f"{n}[{i}]" if n not in labels else labels[n][i]
        for n, size in zip(objective.names, objective.sizes, strict=True)
        for i in range(size)
    ]
    moving = found.coefficients()
    return {
        "situations": int(np.unique(situation[found.rows]).size),
        "of": int(data.n_queries),
        "complete": found.complete,  # false: at least these (the LP rounds ran out)
        "n_coefficients": int(moving.size),
        "coefficients": [f"{names[i]} -> {'+' if found.direction[i] > 0 else '-'}inf" for i in moving],
        **({"note": found.note} if found.note else {}),
    }


def _separation_text(model: RankingModule, sep: dict[str, Any], fitted_zero: bool, l2: float) -> str:
    shown = ", ".join(sep["coefficients"][:SHOWN])
    more = f" ({sep['n_coefficients']} in all)" if sep["n_coefficients"] > SHOWN else ""
    what = (
        "the unpenalized fit (l2 = 0) has no finite estimate: its scores depend on where the solver "
        "stopped; choose the penalty on validation instead (model_params.l2 = a list with positive "
        "values, the default), or merge / drop the never-chosen levels"
        if fitted_zero
        else f"l2 = 0 was not fitted; the penalty chosen on validation is {l2:g}"
    )
    return (
        f"{model.name}: the maximum likelihood does not exist on the training data: in "
        f"{'' if sep['complete'] else 'at least '}{sep['situations']} "
        f"of {sep['of']} situations the chosen alternative wins along a direction of the coefficients "
        f"(separation), so these coefficients run off to infinity without a maximum: {shown}{more} "
        f"(e.g. a categorical level present but never chosen); {what}"
    )


def fit_full_batch(model: RankingModule, train: RankingData, valid: RankingData | None) -> FitSummary:
    """Fit ``model`` (in place) to its penalized maximum likelihood on ``train``; choose ``l2`` on
    ``valid`` when the config lists several. Returns its :class:`FitSummary` (``log_likelihood`` = mean
    per training situation at the optimum, ``valid_log_likelihood``, ``l2``, ``separation`` (None when
    the unpenalized maximum exists or was not asked for), ``mle_exists``, solver diagnostics, seconds).

    Raises:
        ValueError: several penalties and no validation split to choose among them.
    """
    t0 = time.perf_counter()
    config = model.config
    penalties = sorted(config.l2, reverse=True)  # strongest first: each fit warm-starts the next
    if len(penalties) > 1 and valid is None:
        raise ValueError(
            f"model_params.l2 lists {len(penalties)} penalties, chosen on the validation split, and none "
            "was given; give a validation split or a single penalty"
        )
    dtype = next(model.parameters()).dtype
    model.double().train(False)
    lists = _Lists.of(train)
    valid_lists = _Lists.of(valid) if valid is not None and len(penalties) > 1 else None
    params = [p for p in model.parameters() if p.requires_grad]
    x = torch.nn.utils.parameters_to_vector(params).detach().numpy().astype(np.float64)
    sep = _separation(_Objective(model, lists, 0.0), train) if 0.0 in penalties else None
    separated = sep is not None and "undetermined" not in sep
    undetermined = sep is not None and not separated
    tried, best = [], None
    for l2 in penalties:
        if l2 == 0.0 and separated and len(penalties) > 1:
            tried.append({"l2": 0.0, "skipped": "no finite maximum likelihood (separation)"})
            continue
        x, info = _minimize(_Objective(model, lists, l2), x, config)
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.from_numpy(x), params)
            score = -float(_nll(model, valid_lists)) if valid_lists is not None else None
        tried.append({"l2": l2, "valid_log_likelihood": score, **info})
        if best is None or (score is not None and score >= best[1]):  # ties: the smaller penalty
            best = (x.copy(), score, l2, info)
    assert best is not None
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.from_numpy(best[0]), params)
        train_ll = -float(_nll(model, lists))
    model.to(dtype)
    fitted = [t["l2"] for t in tried if "skipped" not in t]
    found = report(_problems(model, sep, best[2], best[3], fitted), category=FitWarning, stacklevel=3)
    return FitSummary(
        fit="full-batch maximum likelihood",
        solver={"lbfgs": "scipy L-BFGS-B", "newton": "scipy trust-exact"}[config.solver],
        l2=best[2],
        log_likelihood=train_ll,
        valid_log_likelihood=best[1],
        metric="loglik",
        best_valid_metric=best[1],
        separation=sep,
        mle_exists=None if 0.0 not in penalties or undetermined else not separated,
        tried=tuple(tried),
        converged=best[3]["converged"],
        stop=best[3]["stop"],
        iterations=best[3]["iterations"],
        max_abs_gradient=best[3]["max_abs_gradient"],
        l2_grid_edge=grid_edge_of(fitted, best[2]),
        warnings=tuple(found),
        fit_seconds=time.perf_counter() - t0,
    )


def _problems(
    model: RankingModule, sep: dict[str, Any] | None, l2: float, info: dict[str, Any], fitted: list[float]
) -> list[str | None]:
    """The messages of the fit's :class:`FitWarning` warnings: separation (or a check that cannot decide),
    a chosen fit that did not converge, a penalty chosen at the edge of the grid."""
    problems: list[str | None] = []
    if sep is not None and "undetermined" in sep:
        problems.append(
            f"{model.name}: the separation check could not decide whether the unpenalized maximum "
            f"likelihood exists ({sep['undetermined']}); l2 = 0 was fitted like the other penalties"
            + (f" (the penalty chosen on validation is {l2:g})" if l2 else ", and chosen on validation")
            + ": an unpenalized estimate that exists converges, one that does not runs off (see "
            "'converged' and the coefficients); a positive penalty always has a finite estimate"
        )
    elif sep is not None:
        problems.append(_separation_text(model, sep, l2 == 0.0, l2))
    if not info["converged"]:
        problems.append(
            f"{model.name}: the fit with l2 = {l2:g} did not converge ({info['stop']}; largest gradient "
            f"component {info['max_abs_gradient']:.3g} > model_params.gtol after {info['iterations']} "
            "iterations): its estimate is where the solver stopped. Raise model_params.max_iter, try "
            'model_params.solver = "newton", or standardize the features (transform = "zscore")'
        )
    problems.append(grid_edge("model_params.l2", fitted, l2, model=model.name))
    return problems
