"""Training curves: ``training_curves.png`` in every training run's directory.

One figure from a run's per-epoch records (``train_log.jsonl``: ``{"epoch", "train_loss",
"valid_<metric>", ...}``): the training loss (left axis) and the validation metric (right axis) per
epoch, the best epoch marked. A baseline with per-iteration validation metrics (LambdaMART's
``evals_result_``) gives records without ``train_loss``: only the metric is drawn. Drawn on a
matplotlib ``Figure`` (Agg canvas, no pyplot: no display needed, a notebook's backend is left alone),
written atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxrank._io import atomic_write

__all__ = ["CURVES_FILE", "plot_training_curves"]

CURVES_FILE = "training_curves.png"


def plot_training_curves(
    history: Sequence[dict[str, Any]], path: str | Path, *, title: str, x_label: str = "epoch"
) -> Path | None:
    """Draw the records' ``train_loss`` and ``valid_*`` values against ``epoch`` into the PNG ``path``.

    Returns the path, or None when there is nothing to draw (no records)."""
    if not history:
        return None
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    epochs = [int(r["epoch"]) for r in history]
    metric_key = next((k for k in history[0] if k.startswith("valid_")), None)
    fig = Figure(figsize=(7, 4.2), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xlabel(x_label)
    lines = []
    if "train_loss" in history[0]:
        lines += ax.plot(epochs, [r["train_loss"] for r in history], "o-", color="tab:blue", ms=3)
        lines[-1].set_label("training loss")
        ax.set_ylabel("training loss")
        metric_ax = ax.twinx()
    else:
        metric_ax = ax
    if metric_key is not None:
        metric = metric_key.removeprefix("valid_")
        values = [float("nan") if r.get(metric_key) is None else r[metric_key] for r in history]
        lines += metric_ax.plot(epochs, values, "s-", color="tab:orange", ms=3, label=f"validation {metric}")
        metric_ax.set_ylabel(f"validation {metric}")
        best = history[-1].get("best_epoch")
        if best:
            lines.append(metric_ax.axvline(best, color="gray", ls="--", lw=1, label=f"best {x_label} {best}"))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(handles=lines, loc="best", fontsize="small")
    fig.tight_layout()
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))
    return path
