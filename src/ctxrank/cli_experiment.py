"""``ctxrank experiment`` and ``ctxrank compare`` (thin over :mod:`ctxrank.experiments`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["add_commands", "load_runs"]


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    from ctxrank.experiments.spec import builtin_names

    p = sub.add_parser(
        "experiment",
        parents=[common],
        help="run models x folds x seeds from a TOML spec; report tables, t-tests and figures",
        description=(
            "Run an experiment specification (a TOML file, or a built-in name: "
            f"{', '.join(builtin_names())}). Every finished run is stored at once in OUT/runs, so an "
            "interrupted experiment resumes where it stopped when run again with the same --out. "
            "The report (results.json, table.md, table.csv, PNG figures) is written to OUT. "
            "See docs/experiments.md."
        ),
    )
    p.add_argument("spec", metavar="CONFIG", help="TOML file or built-in experiment name")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="experiment directory (default: results/<name>, or results/<name>-<dataset> with --dataset)",
    )
    p.add_argument("--runs", type=int, metavar="N", help="override runs.count (e.g. 3 for a quick look)")
    p.add_argument("--dataset", metavar="NAME", help="override data.dataset (a registered dataset)")
    p.add_argument("--threads", type=int, metavar="N", help="override runs.threads")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any spec key, e.g. models.qilcm.model_params.confusion_weight=0 (repeatable)",
    )
    p.add_argument(
        "--shard",
        metavar="K/N",
        help="run only shard K of N (every N-th run from the K-th), e.g. 1/2 and 2/2 in two processes "
        "with the same --out; the report covers the runs stored so far (rebuild it with --report-only)",
    )
    p.add_argument("--report-only", action="store_true", help="rebuild the report from the stored runs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_experiment)

    p = sub.add_parser(
        "compare",
        parents=[common],
        help="per-metric difference of two sets of runs with paired t-tests",
        description=(
            "Compare two sets of runs: A and B are each an experiment model (OUT:MODEL or "
            "OUT/runs/MODEL), a run file (OUT/runs/MODEL/seedS-foldF.json) or the output of "
            "`ctxrank evaluate --json`. Runs are paired by (seed, fold); queries by query id (each "
            "query's value averaged over its runs). Paired two-sided Student's t-tests (SciPy)."
        ),
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument("--metrics", help="comma-separated (default: every metric both have)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_compare)


def default_out(name: str, dataset: str | None = None) -> Path:
    """``results/<name>``, or ``results/<name>-<dataset>`` when ``--dataset`` overrides the spec's data,
    so that one spec run on two datasets never lands in (and is refused by) one directory."""
    return Path("results") / (f"{name}-{dataset}" if dataset else name)


def cmd_experiment(args: argparse.Namespace) -> int:
    from ctxrank.experiments import build_report, load_spec, run_experiment
    from ctxrank.experiments.store import RunStore

    overrides = list(args.overrides)
    if args.runs is not None:
        overrides.append(f"runs.count={args.runs}")
    if args.dataset is not None:
        overrides += [f"data.dataset={args.dataset}", "data.folds=[]"]
    if args.threads is not None:
        overrides.append(f"runs.threads={args.threads}")
    spec = load_spec(args.spec, overrides)
    out = Path(args.out) if args.out else default_out(spec.name, args.dataset and spec.data.dataset)
    if args.report_only:
        store = RunStore(out)
        if not (out / "experiment.json").is_file():
            raise ValueError(f"{out}: not an experiment directory (no experiment.json)")
        store.claim(spec)
    else:
        store = run_experiment(
            spec, out, progress=not args.no_progress, log=_say, shard=_parse_shard(args.shard)
        )
    build_report(spec, store, out)
    sys.stdout.write("\n" + (out / "table.md").read_text())
    figures = sorted(p.name for p in out.glob("*.png"))
    _say(
        f"\nreport: {out}/results.json, table.md, table.csv" + (f", {', '.join(figures)}" if figures else "")
    )
    return 0


def _parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    k, sep, n = text.partition("/")
    if not (sep and k.strip().isdigit() and n.strip().isdigit()):
        raise ValueError(f"--shard must be K/N with 1 <= K <= N (e.g. 1/2), got {text!r}")
    return int(k), int(n)  # the range is checked by runner.shard_keys


def _say(text: str) -> None:
    print(text, flush=True)


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
        try:
            d = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{f}: not a JSON run file ({exc})") from None
        if "per_query" in d and "query_ids" in d:  # ctxrank evaluate --json
            runs[("evaluate", 0)] = {"query_ids": d["query_ids"], "metrics": d["per_query"]}
        elif {"seed", "fold", "query_ids", "metrics"} <= set(d):
            runs[(d["seed"], d["fold"])] = {"query_ids": d["query_ids"], "metrics": d["metrics"]}
        else:
            raise ValueError(f"{f}: neither an experiment run file nor `ctxrank evaluate --json` output")
    return runs


def compare_runs(a: dict, b: dict, metrics: list[str] | None = None) -> dict[str, Any]:
    """Per metric: means of A and B over their common runs, and paired tests over runs and queries."""
    from ctxrank.experiments.report import query_means, run_means
    from ctxrank.experiments.stats import paired_test

    keys = sorted(set(a) & set(b), key=str)
    if not keys:
        raise ValueError(f"A and B have no run in common (A: {sorted(a, key=str)}, B: {sorted(b, key=str)})")
    ra, rb = [a[k] for k in keys], [b[k] for k in keys]
    common = sorted(set(ra[0]["metrics"]).intersection(*(r["metrics"] for r in ra + rb)))
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
    return {"runs": [list(k) for k in keys], "metrics": out}


def cmd_compare(args: argparse.Namespace) -> int:
    metrics = [m.strip() for m in args.metrics.split(",")] if args.metrics else None
    res = compare_runs(load_runs(args.a), load_runs(args.b), metrics)
    if args.json:
        print(json.dumps({"a": args.a, "b": args.b, **res}, indent=2, default=float))
        return 0
    n = len(res["runs"])
    print(f"A = {args.a}\nB = {args.b}\n{n} common run(s); paired two-sided t-tests\n")
    print("| metric | A | B | A - B | p (runs) | p (queries) |")
    print("|---|---:|---:|---:|---:|---:|")
    for m, r in res["metrics"].items():
        pr, pq = r["runs"], r["queries"]
        print(
            f"| {m} | {r['a']:.4f} | {r['b']:.4f} | {r['a'] - r['b']:+.4f} | "
            f"{_p(pr['p'])} (n={pr['n']}) | {_p(pq['p'])} (n={pq['n']}) |"
        )
    if n < 2:
        print("\none common run: no test over runs (p n/a); the test over queries still applies")
    return 0


def _p(p: float) -> str:
    return "n/a" if not np.isfinite(p) else f"{p:.3g}"
