"""What a finished fit says about itself: the checks that turn a model worse than it should be into a
warning, in one place.

Each check returns a message (None when all is well) that names what happened, with the numbers, and
what to change. :func:`report` issues each one as a
:class:`TrainingWarning` (``ctxrank train`` prints it as one ``ctxrank: warning:`` line; the estimators
and :func:`ctxrank.training.run.run_training` raise it through :mod:`warnings`); the fit records them in
its summary (``FitSummary.warnings``: ``ctxrank.json["training"]``, an experiment's result records).

* :func:`epoch_cap`: the run reached ``train.max_epochs`` with its last epoch its best (early stopping
  never triggered: more epochs would probably have helped);
* :func:`stalled`: the training loss or the weights' norm stayed constant (to :data:`STALL_RTOL`
  relative) over the last :data:`STALL_EPOCHS` or more epochs while the kept weights are of an epoch
  before them (a collapsed model, zero gradients, a learning rate too small to move the weights);
* :func:`worse_than_initial`: a re-ranker whose validation metric is below its initial ranker's on the
  same validation lists (the saved pipeline ranks worse than the initial ranker alone);
* :func:`grid_edge`: a penalty chosen on validation at the largest or smallest value of its grid (the
  best value may lie outside it).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

__all__ = [
    "STALL_EPOCHS",
    "STALL_RTOL",
    "TrainingWarning",
    "epoch_cap",
    "grid_edge",
    "grid_edge_of",
    "report",
    "stalled",
    "worse_than_initial",
]

#: epochs of constant training loss that make a stalled run
STALL_EPOCHS = 3
#: "constant": every loss of those epochs within this fraction of their largest magnitude (an epoch's
#: loss is a mean of float32 batch losses: a model whose weights do not move repeats it to ~1e-7)
STALL_RTOL = 1e-6


class TrainingWarning(UserWarning):
    """A fit that ended with a model worse than it should be: the message says what and what to change."""


def epoch_cap(
    history: Sequence[dict[str, Any]], max_epochs: int, metric: str, shown: str | None = None
) -> str | None:
    """The run used all ``max_epochs`` epochs (at least 2) and its last one is its best: the validation
    metric was still improving when training stopped. ``shown``: what the values measure when it is not
    ``metric`` of the labels (a click log's estimate, e.g. ``IPS estimate of DCG@10``)."""
    if len(history) < 2 or len(history) < max_epochs or history[-1]["best_epoch"] != history[-1]["epoch"]:
        return None
    key = f"valid_{metric}"
    before, last = max(r[key] for r in history[:-1]), history[-1][key]
    name = metric if shown is None else shown
    return (
        f"training stopped at train.max_epochs = {max_epochs} while the validation {name} was "
        f"still improving (its best epoch is the last one: {before:.4f} before, {last:.4f} at epoch "
        f"{history[-1]['epoch']}); the model is probably under-trained: raise train.max_epochs "
        "(--set train.max_epochs=N; max_epochs= in the Python API) or the learning rate (train.lr)"
    )


def _flat_tail(values: Sequence[float]) -> int:
    """How many trailing ``values`` lie within :data:`STALL_RTOL` of their largest magnitude."""
    run = 1
    while run < len(values):
        window = values[-(run + 1) :]
        if max(window) - min(window) > STALL_RTOL * max(abs(v) for v in window):
            break
        run += 1
    return run


def stalled(history: Sequence[dict[str, Any]], best_epoch: int) -> str | None:
    """Over the last :data:`STALL_EPOCHS` or more epochs the training loss, or the weights' norm
    (``weight_norm``: the weights stopped moving), stayed constant (to :data:`STALL_RTOL`), and the kept
    weights are of an epoch no later than the first of them."""
    if len(history) < STALL_EPOCHS:
        return None
    losses = [float(r["train_loss"]) for r in history]
    norms = [float(r["weight_norm"]) for r in history] if all("weight_norm" in r for r in history) else []
    by_loss, by_weights = _flat_tail(losses), _flat_tail(norms) if norms else 0
    run = max(by_loss, by_weights)
    first = history[-run]["epoch"]
    if run < STALL_EPOCHS or best_epoch > first:
        return None
    what = (
        f"the training loss stayed at {losses[-1]:.7g}"
        if by_loss >= by_weights
        else f"the weights stopped moving (their norm stayed at {norms[-1]:.7g})"
    )
    return (
        f"training stalled: {what} for the last {run} epochs ({first}-{history[-1]['epoch']}; constant to "
        f"{STALL_RTOL:g} relative) and the model kept epoch {best_epoch}'s weights: it stopped learning "
        "(gradients zero, e.g. a model collapsed to constant scores, or a learning rate too small to move "
        "the weights). Try another learning rate (train.lr: lower after a collapse, higher when the "
        "weights barely move), gradient clipping (train.clip_grad_norm), another seed (train.seed) or "
        "another model"
    )


def worse_than_initial(
    reranker: float, initial: float, metric: str, *, top_k: int, model: str, initial_name: str = "lambdamart"
) -> str | None:
    """The re-ranker's validation metric is below its initial ranker's on the same top-k lists."""
    if not reranker < initial:  # NaN (no query with a relevant item) is no evidence either way
        return None
    return (
        f"{model}: the re-ranker is worse than its initial ranker ({initial_name}) on the validation "
        f"queries: valid {metric} {reranker:.4f} against {initial:.4f} on the same top-{top_k} lists "
        f"({reranker - initial:+.4f}); the saved model ranks worse than {initial_name} alone. Train it "
        "longer (train.max_epochs; max_epochs= in the Python API), change its learning rate (train.lr), "
        "re-rank more items (rerank.top_k / --top-k; top_k= in RerankPipeline), or use another "
        "re-ranker (rerank.residual = true keeps the initial order unless it gains on validation)"
    )


def grid_edge_of(grid: Sequence[float], chosen: float) -> str | None:
    """``"largest"`` when ``chosen`` is the largest of ``grid`` (at least 2 values), ``"smallest"`` when
    it is the smallest and not 0 (no penalty: nothing lies below it), else None."""
    values = sorted(set(grid))
    if len(values) < 2 or chosen == 0 or values[0] < chosen < values[-1]:
        return None
    return "largest" if chosen == values[-1] else "smallest"


def grid_edge(name: str, grid: Sequence[float], chosen: float, *, model: str) -> str | None:
    """The value of ``name`` chosen on validation lies at an edge of the ``grid`` fitted
    (:func:`grid_edge_of`): the best value may lie beyond it."""
    edge = grid_edge_of(grid, chosen)
    if edge is None:
        return None
    values = sorted(set(grid))
    change = (
        f"add larger values (e.g. {values[-1] * 10:g}, {values[-1] * 100:g})"
        if edge == "largest"
        else f"add smaller values (e.g. {values[0] / 10:g}, {values[0] / 100:g})"
    )
    shown = ", ".join(f"{v:g}" for v in values)
    return (
        f"{model}: the {name} chosen on validation ({chosen:g}) is the {edge} of the values fitted "
        f"({shown}): the best one may lie beyond them; {change} to {name} (--set {name}=[...])"
    )


def report(
    messages: Sequence[str | None], *, category: type[Warning] = TrainingWarning, stacklevel: int = 2
) -> list[str]:
    """Issue each message (Nones dropped) as a ``category`` warning; the messages, which the caller
    records in its summary (:meth:`FitSummary.with_warnings <ctxrank.fit_summary.FitSummary>`)."""
    found = [m for m in messages if m]
    for message in found:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    return found
