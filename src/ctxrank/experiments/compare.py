"""Load stored runs and compare two sets of them with paired t-tests (``ctxrank compare``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ctxrank.experiments.report import query_means, run_means
from ctxrank.experiments.stats import DEFAULT_CORRECTION, adjust, paired_test
from ctxrank.experiments.store import check_run, read_run_json
from ctxrank.metrics import metric_sort_key

__all__ = ["compare_runs", "load_runs"]


def load_runs(ref: str) -> dict[tuple, dict[str, Any]]:
    """Runs named by ``ref`` as ``{(seed, fold): {"query_ids": [...], "metrics": {name: [...]}}}``.

    ``ref``: ``OUT:MODEL``, a ``runs/MODEL`` directory, one run file, or ``ctxrank evaluate --json``
    output (one run keyed ``("evaluate", 0)``).

    Raises:
        ValueError: nothing readable there.
    """
    path = Path(ref)
    if not path.exists() and ":" in ref:
        root, _, model = ref.rpartition(":")
        path = Path(root) / "runs" / model
        if not path.is_dir():
            raise ValueError(f"{ref}: no runs of model {model!r} in {root} (no {path})")
    if path.is_dir():
        files = sorted(path.glob("seed*-fold*.json"))
        if not files:
            raise ValueError(f"{path}: no run files (seed<S>-fold<F>.json) here")
    elif path.is_file():
        files = [path]
    else:
        raise ValueError(f"{ref}: no such file or directory")
    runs = {}
    for f in files:
        d = read_run_json(f)
        if isinstance(d, dict) and "per_query" in d and "query_ids" in d:  # ctxrank evaluate --json
            r = check_run(f, {"model": "evaluate", "seed": 0, "fold": 0, "query_ids": d["query_ids"],
                              "metrics": d["per_query"]})  # fmt: skip
            runs[("evaluate", 0)] = {"query_ids": r["query_ids"], "metrics": r["metrics"]}
        elif isinstance(d, dict) and {"seed", "fold", "query_ids", "metrics"} <= set(d):
            r = check_run(f, d)
            runs[(r["seed"], r["fold"])] = {"query_ids": r["query_ids"], "metrics": r["metrics"]}
        else:
            raise ValueError(f"{f}: neither an experiment run file nor `ctxrank evaluate --json` output")
    return runs


def compare_runs(
    a: dict, b: dict, metrics: list[str] | None = None, correction: str = DEFAULT_CORRECTION
) -> dict[str, Any]:
    """Per metric: means of A and B over their common runs, and paired tests over runs and queries;
    each test's p-values corrected over the metrics compared (``correction``, default Holm; the raw
    ``p`` kept beside ``p_adjusted``)."""
    keys = sorted(set(a) & set(b), key=str)
    if not keys:
        raise ValueError(f"A and B have no run in common (A: {sorted(a, key=str)}, B: {sorted(b, key=str)})")
    ra, rb = [a[k] for k in keys], [b[k] for k in keys]
    common = sorted(set(ra[0]["metrics"]).intersection(*(r["metrics"] for r in ra + rb)), key=metric_sort_key)
    if metrics:
        missing = [m for m in metrics if m not in common]
        if missing:
            raise ValueError(f"metrics {missing} are not in both A and B (they have {common})")
    out = {}
    for m in metrics or common:
        qa, qb = query_means(ra, m), query_means(rb, m)
        qs = sorted(set(qa) & set(qb))
        out[m] = {
            "a": float(np.nanmean(run_means(ra, m))),
            "b": float(np.nanmean(run_means(rb, m))),
            "runs": paired_test(run_means(ra, m), run_means(rb, m)),
            "queries": paired_test([qa[q] for q in qs], [qb[q] for q in qs]),
        }
    for unit in ("runs", "queries"):  # one family per test: the metrics compared
        tests = [r[unit] for r in out.values()]
        for t, p in zip(tests, adjust([t["p"] for t in tests], correction), strict=True):
            t["p_adjusted"] = float(p) if np.isfinite(p) else None
    return {"runs": [list(k) for k in keys], "metrics": out, "correction": correction}
