"""The debiasing table of a click experiment: each model's debiased runs against its naive run and skyline.

A click experiment (a spec with ``[clicks]``) trains each model naive (on the clicks, no debiasing),
with debiasing methods (``train.debias``) and on the true labels (``[clicks] skyline``). A model's
*family* is the spec's runs with the same ``model`` and ``model_params``; its naive run is the one
trained on clicks with ``train.debias`` unset or ``"none"``. For each method run ``m`` of a family::

    gap closed(m) = (mean(m) - mean(naive)) / (mean(skyline) - mean(naive))

(100%: as good as the full-information skyline; 0: no better than naive training; negative: worse;
undefined when the skyline is not above the naive run). Each method run and the skyline is compared
with its naive run by the report's own test (``[report] test``), the p-values corrected over all those
comparisons of the experiment by the report's correction (``[report] correction``).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxrank.clicks.weighting import DEBIAS
from ctxrank.experiments import stats
from ctxrank.experiments.evidence import restore_runs
from ctxrank.experiments.report import _fmt_p, _pair, collect, run_means
from ctxrank.experiments.spec import ClicksSpec

__all__ = ["Family", "debiasing_table", "families", "gap_closed"]

#: the method columns: every ``train.debias`` but naive training, in its order (LambdaMART's ``pal`` is
#: LightGBM's own debiasing)
METHODS = tuple(m for m in DEBIAS if m != "none")


@dataclass(frozen=True)
class Family:
    """One model's runs in a click experiment: ``methods`` maps ``train.debias`` to the run's name."""

    model: str
    naive: str
    methods: dict[str, str]
    skyline: str | None


def families(spec: Mapping[str, Any]) -> list[Family]:
    """The families of a click experiment's spec (``ExperimentSpec.to_dict()``, as ``results.json`` and
    ``spec.json`` record it), in the spec's order of their naive runs."""
    if not spec.get("clicks"):
        raise ValueError(f"experiment {spec.get('name')!r} has no [clicks] section: not a click experiment")
    skyline = set(spec["clicks"]["skyline"])
    groups: dict[str, dict[str, Any]] = {}
    for name, m in spec["models"].items():
        key = json.dumps([m["model"], m.get("model_params") or {}], sort_keys=True)
        group = groups.setdefault(key, {"model": m["model"], "naive": [], "methods": {}, "skyline": []})
        method = ClicksSpec.method(name in skyline, (m.get("train") or {}).get("debias", "none"))
        if method in ("skyline", "naive"):
            group[method].append(name)
        elif method in group["methods"]:
            first = group["methods"][method]
            raise ValueError(f"runs {first!r} and {name!r} of one model both debias by {method}")
        else:
            group["methods"][method] = name
    out = []
    for g in groups.values():
        if len(g["naive"]) != 1 or len(g["skyline"]) > 1:
            raise ValueError(
                f"model {g['model']}: a family needs one naive run and at most one skyline, got naive "
                f"{g['naive']} and skyline {g['skyline']}"
            )
        out.append(Family(g["model"], g["naive"][0], g["methods"], g["skyline"][0] if g["skyline"] else None))
    return out


def gap_closed(means: Mapping[str, float], family: Family, run: str) -> float | None:
    """The share (in %) of the gap between ``family``'s naive run and its skyline that ``run`` closes, from
    the runs' means; None without a skyline or when the skyline is not above the naive run."""
    if family.skyline is None:
        return None
    gap = means[family.skyline] - means[family.naive]
    return None if gap <= 0 else 100.0 * (means[run] - means[family.naive]) / gap


def _rows(spec: Any, store: Any, metric: str) -> list[dict[str, Any]]:
    """Per family: the means of its runs on ``metric``, each method's gap closed, and each method's and
    the skyline's test against the naive run, p corrected over the experiment's comparisons."""
    keys, records = collect(spec, store)
    if not keys:
        raise ValueError(f"{spec.name}: no run is finished by every model")
    means = {m: float(run_means(r, metric).mean()) for m, r in records.items()}
    rows, tests = [], []
    for family in families(spec.to_dict()):
        compared = [*family.methods.values(), *([family.skyline] if family.skyline else [])]
        row = {"family": family, "means": means, "p": {}}
        for run in compared:
            tests.append((row, run, _pair(records[run], records[family.naive], metric, spec)))
        rows.append(row)
    adjusted = stats.adjust([t[2]["p"] for t in tests], spec.report.correction)
    for (row, run, _), p in zip(tests, adjusted, strict=True):
        row["p"][run] = float(p)
    return rows


def _cell(row: dict[str, Any], run: str | None, *, gap: bool = True) -> str:
    if run is None:
        return "-"
    family, means = row["family"], row["means"]
    parts = []
    if gap:
        closed = gap_closed(means, family, run)
        parts.append("no gap" if closed is None else f"{closed:+.0f}%")
    if run in row["p"]:
        parts.append(f"p {_fmt_p(row['p'][run])}")
    return f"{means[run]:.4f}" + (f" ({', '.join(parts)})" if parts else "")


def debiasing_table(root: Path, directories: list[str], metric: str) -> str:
    """The debiasing table of the evidence directories ``root/evidence/D`` (one row per model family),
    regenerated from their runs (nothing is trained)."""
    lines = [
        f"Mean {metric} over runs of each model trained on the clicks without debiasing (naive), with "
        "each debiasing method (`train.debias`; LambdaMART's pal is LightGBM's position debiasing) and on "
        "the true labels (skyline). In brackets: the share of the gap between naive and skyline the run "
        "closes ((method - naive) / (skyline - naive)), and its test against the naive run, p corrected "
        "over every such comparison of the experiment (the report's test and correction).",
        "",
        f"| evidence | model | naive | {' | '.join(METHODS)} | skyline |",
        "|---|---|---:|" + "---:|" * len(METHODS) + "---:|",
    ]
    for directory in directories:
        with tempfile.TemporaryDirectory(prefix="ctxrank-debiasing-") as tmp:
            spec, store = restore_runs(root / "evidence" / directory, tmp)
            rows = _rows(spec, store, metric)
        for row in rows:
            family = row["family"]
            cells = [_cell(row, family.methods.get(m)) for m in METHODS]
            naive, skyline = f"{row['means'][family.naive]:.4f}", _cell(row, family.skyline, gap=False)
            lines.append(f"| `{directory}` | {family.model} | {naive} | {' | '.join(cells)} | {skyline} |")
    return "\n".join(lines) + "\n"
