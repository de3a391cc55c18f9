"""LambdaMART on OHSUMED with its NULL cells left missing (``null_fill = "keep"``, LightGBM's own
missing-value handling) against the same cells filled (``query_min``, ``letor_min``).

Not a test and not a timing: a measurement on real data, quoted in docs/data.md. The shared copy holds
the published ``Feature-min`` files, not ``Feature-null``; the NULL cells are re-created with the rule
of ``benchmarks/null_fill_ohsumed.py`` (a field's BM25 / LMIR features where the field holds no query
term), written as ``ohsumed/Feature-null/FoldK_testset.txt`` in a temporary data root, and read through
the registry (``load_fold("ohsumed", K, variant="Feature-null", null_fill=RULE)``). For each of the 5
folds LambdaMART (LightGBM's defaults, seed 0, 1 thread, early stopping on the fold's validation
split) is trained once per rule and tested once; the fold is the unit of the paired t-test (n = 5),
p corrected by Holm over the family (the 2 comparisons of ``keep`` x 2 metrics).

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/missing_ohsumed.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from null_fill_ohsumed import null_cells, write_null_file

ROOT = Path(__file__).resolve().parents[1]
RULES = ("keep", "query_min", "letor_min")
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


def run(root: Path) -> dict[str, dict[str, list[float]]]:
    """Test metrics per rule and fold."""
    from ctxrank.baselines.lambdamart import LambdaMART
    from ctxrank.data.registry import load_fold
    from ctxrank.metrics import evaluate_queries, mean_metrics

    results = {rule: {m: [] for m in METRICS} for rule in RULES}
    for k in range(1, 6):
        for rule in RULES:
            fold = load_fold("ohsumed", k, root=root, variant="Feature-null", null_fill=rule, cache=False)
            model = LambdaMART(seed=0, num_threads=1).fit(fold.train, fold.valid)
            test = fold.test
            values = evaluate_queries(model.predict(test), test.labels, test.query_offsets, list(METRICS))
            means = mean_metrics(values)
            for m in METRICS:
                results[rule][m].append(float(means[m]))
    return results


def main(argv: list[str] | None = None) -> int:
    from ctxrank.experiments.stats import holm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="holds ohsumed/")
    args = ap.parse_args(argv)
    if not (args.data / "ohsumed" / "Feature-min").is_dir():
        print(f"no OHSUMED Feature-min files under {args.data}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cells = recreate_feature_null(args.data, Path(tmp))
        results = run(Path(tmp))
    print(f"OHSUMED, 5 folds, {cells:,} NULL cells re-created; LambdaMART (LightGBM defaults), seed 0\n")
    print("| null_fill | " + " | ".join(METRICS) + " |")
    print("|---|" + "---:|" * len(METRICS))
    for rule in RULES:
        per_metric = (results[rule][m] for m in METRICS)
        cells_text = [f"{np.mean(v):.4f} ± {np.std(v, ddof=1):.4f}" for v in per_metric]
        print(f"| `{rule}` | " + " | ".join(cells_text) + " |")
    pairs = [(other, m) for other in RULES[1:] for m in METRICS]
    raw = [float(stats.ttest_rel(results["keep"][m], results[other][m]).pvalue) for other, m in pairs]
    adjusted = holm(raw)
    print("\nkeep - filled, paired t over the 5 folds, p Holm-corrected over the 4 comparisons (raw p):")
    for (other, m), p, q in zip(pairs, raw, adjusted, strict=True):
        diff = np.mean(results["keep"][m]) - np.mean(results[other][m])
        print(f"  vs {other}, {m}: {diff:+.4f}, p {q:.2g} (raw {p:.2g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
