"""User choice on REAL data: every choice model on the four embedded choice datasets, 5 splits each.

Datasets (``ctxrank.data.choice``, shipped in the package): ModeCanada, SwissMetro, Car, Electricity.
Split k (k = 1..5) is ``ctxrank.data.registry.load_fold(name, k)``: a random 60/20/20 split *by
decision maker* drawn from seed k - 1 (SwissMetro: 9 answers per respondent, Electricity: up to 12 per
customer stay in one split; ModeCanada and Car have one situation per person, so it is a situation
split), the categorical vocabulary re-fitted on train. Models (``--models``):

* ``mnl``: the conditional logit fitted to its maximum likelihood (``ctxrank.training.full_batch``,
  SciPy L-BFGS-B), alternative-specific constants for every categorical column and, with
  ``alternative_specific``, a coefficient per alternative for every feature (the only way the
  situation-level variables income, purpose, ... enter a logit); L2 penalty chosen on validation
  log-likelihood from (0, 1e-4, 1e-3, 1e-2); features z-scored (no clipping: the logit extrapolates).
* ``dcm``, ``qilcm``, ``dlcm``, ``listnet``: trained by ``ctxrank.training.loop.fit`` with early
  stopping on validation ``train.metric`` (default ``loglik``, the choice log-likelihood), at most
  ``--epochs`` epochs, patience 5; DLCM with encoder widths (64, 64) and QILCM with 80 sampled query
  pairs for its Chamfer term (cost on 2 CPU cores).
* ``lambdamart``: LightGBM lambdarank with the categorical columns as native categorical features.

Per split and model: P@1 (top-1 accuracy), MRR, the mean log-likelihood of the chosen alternative under
``softmax(scores)`` (not meaningful for LambdaMART, whose scores have no probability scale: shown in
brackets) and the fit seconds. Tests of each model against ``mnl`` and against ``lambdamart``:

* over test situations: per split a paired t-test over its test situations (``scipy.stats.ttest_rel``);
  pooled, each situation's difference averaged over the splits whose test set holds it, then a paired
  t-test over the distinct situations (splits overlap, so situations are not counted twice);
* across splits: ``ctxrank.experiments.stats.corrected_resampled_test`` (Nadeau & Bengio) on the 5
  split means, ``n_test / n_train`` = test situations over train + validation situations.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_choice_real.py [--datasets modecanada,...]
        [--splits 1,2,3,4,5] [--models mnl,lambdamart,listnet,dcm,dlcm,qilcm] [--epochs 30]
        [--json FILE] [--merge FILE ...] [--set MODEL:KEY=VALUE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

from ctxrank.config import resolve_config
from ctxrank.data.registry import load_fold
from ctxrank.experiments.stats import corrected_resampled_test
from ctxrank.metrics import evaluate_queries
from ctxrank.training.run import run_training

DATASETS = ("modecanada", "swissmetro", "car", "electricity")
MODELS = ("mnl", "lambdamart", "listnet", "dcm", "dlcm", "qilcm")
METRICS = ("p@1", "mrr", "loglik")
SETTINGS = {
    "mnl": [
        "model_params.alternative_specific=true",
        "model_params.l2=[0.0,0.0001,0.001,0.01]",
        "transform=zscore",
    ],
    "dlcm": ["model_params.encoder_widths=[64,64]", "model_params.gru=torch"],
    "qilcm": ["model_params.confusion_pairs=80"],
}
NEURAL = ("listnet", "dcm", "dlcm", "qilcm")


def run_one(name: str, split: int, model: str, args: argparse.Namespace) -> dict:
    """Train ``model`` on split ``split`` of ``name``; per-situation test metrics and the fit time."""
    fold = load_fold(name, split)
    overrides = [f"model={model}", f"train.seed={split - 1}", f"train.threads={args.threads}"]
    if model in NEURAL:
        overrides += [f"train.max_epochs={args.epochs}", "train.patience=5", f"train.metric={args.metric}"]
    overrides += SETTINGS.get(model, [])
    overrides += [o.split(":", 1)[1] for o in args.overrides if o.startswith(f"{model}:")]
    t0 = time.perf_counter()
    r = run_training(resolve_config(None, overrides), fold.train, fold.valid, fold.test, progress=False)
    seconds = time.perf_counter() - t0
    per = evaluate_queries(r.test_scores, fold.test.labels, fold.test.query_offsets, METRICS)
    return {
        "dataset": name,
        "split": split,
        "model": model,
        "seconds": seconds,
        "summary": {k: v for k, v in r.summary.items() if isinstance(v, (int, float, str, bool))},
        "queries": fold.test.query_ids.tolist(),
        "n_train": fold.train.n_queries + fold.valid.n_queries,
        "n_test": fold.test.n_queries,
        "metrics": {k: v.tolist() for k, v in per.items()},
    }


def _pooled(a: dict, b: dict, metric: str) -> tuple[float, float]:
    """Mean difference and p-value of the paired t-test over distinct test situations, each
    situation's difference averaged over the splits that test it."""
    diffs: dict[str, list[float]] = {}
    for s in a:
        if s not in b:
            continue
        for q, x, y in zip(a[s]["queries"], a[s]["metrics"][metric], b[s]["metrics"][metric], strict=True):
            diffs.setdefault(q, []).append(x - y)
    d = np.array([np.mean(v) for v in diffs.values()])
    if d.size < 2 or np.all(d == 0):
        return float(d.mean()) if d.size else float("nan"), 1.0
    return float(d.mean()), float(sps.ttest_1samp(d, 0.0).pvalue)


def compare(runs: list[dict], name: str, model: str, ref: str, metric: str) -> dict:
    a = {r["split"]: r for r in runs if r["dataset"] == name and r["model"] == model}
    b = {r["split"]: r for r in runs if r["dataset"] == name and r["model"] == ref}
    common = sorted(set(a) & set(b))
    per_split_p = [
        float(sps.ttest_rel(a[s]["metrics"][metric], b[s]["metrics"][metric]).pvalue) for s in common
    ]
    ma = [float(np.mean(a[s]["metrics"][metric])) for s in common]
    mb = [float(np.mean(b[s]["metrics"][metric])) for s in common]
    ratio = float(np.mean([a[s]["n_test"] / a[s]["n_train"] for s in common])) if common else 0.0
    crt = corrected_resampled_test(np.array(ma), np.array(mb), test_train_ratio=ratio)
    _, p_pooled = _pooled({s: a[s] for s in common}, b, metric)
    return {
        "diff": float(np.mean(ma) - np.mean(mb)) if common else float("nan"),
        "p_situations_pooled": p_pooled,
        "splits_significant_5pct": int(sum(p < 0.05 for p in per_split_p)),
        "p_splits_corrected": crt.get("p"),
        "n_splits": len(common),
    }


def report(runs: list[dict], datasets: list[str], models: list[str]) -> str:
    lines = []
    for name in datasets:
        here = [r for r in runs if r["dataset"] == name]
        if not here:
            continue
        n = len({r["split"] for r in here})
        r0 = here[0]
        lines += [
            f"\n### {name} ({n} splits by decision maker; test {r0['n_test']} situations, "
            f"train+valid {r0['n_train']})\n",
            "| model | P@1 | MRR | log-lik | fit s | P@1 vs mnl: diff, p (situations / splits) | "
            "P@1 vs lambdamart: diff, p (situations / splits) |",
            "|---|---|---|---|---|---|---|",
        ]
        for m in models:
            rs = [r for r in here if r["model"] == m]
            if not rs:
                continue
            cell = {k: _mean_std([np.mean(r["metrics"][k]) for r in rs]) for k in METRICS}
            if m == "lambdamart":
                cell["loglik"] = f"({cell['loglik']})"
            secs = np.mean([r["seconds"] for r in rs])
            vs = [_vs(runs, name, m, ref) for ref in ("mnl", "lambdamart")]
            lines.append(
                f"| {m} | {cell['p@1']} | {cell['mrr']} | {cell['loglik']} | {secs:.1f} | {vs[0]} | {vs[1]} |"
            )
    return "\n".join(lines)


def _vs(runs: list[dict], name: str, m: str, ref: str) -> str:
    if m == ref or not any(r["model"] == ref and r["dataset"] == name for r in runs):
        return "-"
    c = compare(runs, name, m, ref, "p@1")
    p_split = c["p_splits_corrected"]
    shown = f"{p_split:.3f}" if p_split is not None else "n/a"
    return f"{c['diff']:+.4f}, {c['p_situations_pooled']:.3f} / {shown}"


def _mean_std(values: list[float]) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.4f} ± {v.std(ddof=1):.4f}" if v.size > 1 else f"{v.mean():.4f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--splits", default="1,2,3,4,5")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--metric", default="loglik", help="early-stopping metric of the neural models")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="MODEL:KEY=VALUE")
    ap.add_argument("--json", metavar="FILE", help="write every run here (rewritten after each run)")
    ap.add_argument("--merge", action="append", default=[], metavar="FILE", help="runs of earlier --json")
    args = ap.parse_args(argv)
    datasets = [d for d in args.datasets.split(",") if d]
    models = [m for m in args.models.split(",") if m]
    splits = [int(s) for s in args.splits.split(",") if s]
    runs: list[dict] = []
    for path in args.merge:
        runs += json.loads(Path(path).read_text())["runs"]
    done = {(r["dataset"], r["split"], r["model"]) for r in runs}
    for name in datasets:
        for split in splits:
            for m in models:
                if (name, split, m) in done:
                    continue
                r = run_one(name, split, m, args)
                runs.append(r)
                shown = ", ".join(f"{k} {np.mean(v):.4f}" for k, v in r["metrics"].items())
                print(f"{name} split {split} {m}: {shown} ({r['seconds']:.1f} s)", flush=True)
                if args.json:
                    Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs}))
    all_models = [m for m in MODELS if any(r["model"] == m for r in runs)]
    print(report(runs, datasets, all_models))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
