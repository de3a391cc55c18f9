"""OHSUMED with its NULL cells left missing (``null_fill = "keep"``) against the same cells filled
(``query_min``, ``letor_min``): LambdaMART (LightGBM's own missing-value handling) and a neural model
(ListNet; with the cells missing, ``train.missing = "indicator"``: a learned fill and a missing
indicator per feature).

Not a test and not a timing: a measurement on real data, quoted in docs/data.md. The shared copy holds
the published ``Feature-min`` files, not ``Feature-null``; the NULL cells are re-created with the rule
of ``benchmarks/null_fill_ohsumed.py`` (a field's BM25 / LMIR features where the field holds no query
term), written as ``ohsumed/Feature-null/FoldK_testset.txt`` in a temporary data root, and read through
the registry (``load_fold("ohsumed", K, variant="Feature-null", null_fill=RULE)``). For each of the 5
folds LambdaMART (LightGBM's defaults, seed 0, 1 thread, early stopping on the fold's validation
split) is trained once per rule and tested once; ListNet (z-scored features, seed 0, 1 thread, the
run config's defaults otherwise) with ``keep`` + indicators and with ``letor_min``. The fold is the unit
of the paired t-test (n = 5), p corrected by Holm over each model's family (its comparisons of
``keep`` x 2 metrics).

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/missing_ohsumed.py [--data ../shared/data]
        [--json FILE]      # the run's per-fold metrics (evidence/bench/ for a page's block)
        [--from-json FILE] # the report of a stored run; runs nothing
        [--publish]        # rewrite the bench-missing blocks of docs/*.md from evidence/bench/
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import (
    code_of_tree,
    emit_json,
    machine_info,
    publish_docs,
    stored_blocks,
)
from null_fill_ohsumed import null_cells, write_null_file

ROOT = Path(__file__).resolve().parents[1]
RULES = ("keep", "query_min", "letor_min")
NEURAL_RULES = ("keep", "letor_min")
METRICS = ("ndcg@10", "map")


def recreate_feature_null(data_root: Path, into: Path) -> int:
    """``into/ohsumed/Feature-null/FoldK_testset.txt`` for K = 1..5; returns the NULL cells written."""
    from ctxrank.data.letor import read_letor

    out = into / "ohsumed" / "Feature-null"
    out.mkdir(parents=True)
    cells = 0
    for k in range(1, 6):
        src = data_root / "ohsumed" / "Feature-min" / f"Fold{k}_testset.txt.gz"
        mask = null_cells(read_letor(src, cache=False).features)
        write_null_file(src, out / f"Fold{k}_testset.txt", mask)
        cells += int(mask.sum())
    return cells


def run(root: Path) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Test metrics per model, rule and fold."""
    from ctxrank.baselines.lambdamart import LambdaMART
    from ctxrank.config import resolve_config
    from ctxrank.data.registry import load_fold
    from ctxrank.metrics import evaluate_queries, mean_metrics
    from ctxrank.training.run import run_training

    def metrics(scores, test):
        means = mean_metrics(evaluate_queries(scores, test.labels, test.query_offsets, list(METRICS)))
        return {m: float(means[m]) for m in METRICS}

    results = {
        "lambdamart": {rule: {m: [] for m in METRICS} for rule in RULES},
        "listnet": {rule: {m: [] for m in METRICS} for rule in NEURAL_RULES},
    }
    for k in range(1, 6):
        for rule in RULES:
            fold = load_fold("ohsumed", k, root=root, variant="Feature-null", null_fill=rule, cache=False)
            model = LambdaMART(seed=0, num_threads=1).fit(fold.train, fold.valid)
            for m, v in metrics(model.predict(fold.test), fold.test).items():
                results["lambdamart"][rule][m].append(v)
            if rule in NEURAL_RULES:
                sets = ["model=listnet", "transform=zscore", "train.seed=0", "train.threads=1"]
                sets += ["train.missing=indicator"] if rule == "keep" else []
                result = run_training(resolve_config(None, sets), fold.train, fold.valid, progress=False)
                for m, v in metrics(result.predictor.predict(fold.test), fold.test).items():
                    results["listnet"][rule][m].append(v)
    return results


def report_text(blob: dict) -> str:
    """The table and the tests of a run, from its JSON ``blob`` (also a stored one: :func:`block_text`)."""
    from ctxrank.experiments.stats import holm

    results = blob["results"]
    cells, code = blob["cells"], blob["code"]
    lines = [f"OHSUMED, 5 folds, {cells:,} NULL cells re-created; seed 0, 1 thread; code {code}"]
    lines += ["", "| model | null_fill | " + " | ".join(METRICS) + " |", "|---|---|" + "---:|" * len(METRICS)]
    for model, by_rule in results.items():
        for rule, values in by_rule.items():
            per_metric = (values[m] for m in METRICS)
            cells_text = [f"{np.mean(v):.4f} ± {np.std(v, ddof=1):.4f}" for v in per_metric]
            lines.append(f"| {model} | `{rule}` | " + " | ".join(cells_text) + " |")
    for model, by_rule in results.items():
        pairs = [(other, m) for other in list(by_rule)[1:] for m in METRICS]
        raw = [float(stats.ttest_rel(by_rule["keep"][m], by_rule[other][m]).pvalue) for other, m in pairs]
        family = f"p Holm-corrected over {len(pairs)} (raw p)"
        lines += ["", f"{model}, keep - filled, paired t over the 5 folds, {family}:"]
        for (other, m), p, q in zip(pairs, raw, holm(raw), strict=True):
            diff = np.mean(by_rule["keep"][m]) - np.mean(by_rule[other][m])
            lines.append(f"  vs {other}, {m}: {diff:+.4f}, p {q:.2g} (raw {p:.2g})")
    return "\n".join(lines) + "\n"


# A page states a stored run between ``<!-- bench-missing: FILE -->`` and ``<!-- /bench-missing -->``
# (FILE: a ``--json`` file under evidence/bench/); tests/test_bench_evidence.py checks each block.
BLOCK, block_text = stored_blocks("bench-missing", report_text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="holds ohsumed/")
    ap.add_argument("--json", metavar="FILE", help="write the run's per-fold metrics here")
    ap.add_argument("--from-json", metavar="FILE", help="print the report of a stored run; runs nothing")
    ap.add_argument("--publish", action="store_true", help="rewrite the bench-missing blocks of docs/*.md")
    args = ap.parse_args(argv)
    if args.publish:
        publish_docs(BLOCK, block_text)
        return 0
    if args.from_json:
        print(report_text(json.loads(Path(args.from_json).read_text())), end="")
        return 0
    if not (args.data / "ohsumed" / "Feature-min").is_dir():
        print(f"no OHSUMED Feature-min files under {args.data}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cells = recreate_feature_null(args.data, Path(tmp))
        results = run(Path(tmp))
    blob = {
        "benchmark": "missing_ohsumed",
        "quick": False,
        "code": code_of_tree(),
        "cells": cells,
        "machine": machine_info(1),
        "results": results,
    }
    print(report_text(blob), end="")
    if args.json:
        emit_json(blob, args.json, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
