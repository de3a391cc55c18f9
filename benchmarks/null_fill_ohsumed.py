"""How well each ``read_letor`` NULL fill reproduces LETOR 3.0's published OHSUMED Feature-min files.

Not a test and not a timing: a fidelity measurement on real data, quoted in docs/data.md.

Which cells were NULL. The shared copy (``shared/data/ohsumed``) has the published ``Feature-min`` files
but not the ``Feature-null`` ones. In the published ``Feature-null`` files (read in
``meta-toolkit/meta``, ``data/OHSUMED/Feature-null/Fold2/testset.txt``, commit ca344dfe: the first
16,000 characters and the stretch from character 150,000, about 50 lines, with NULLs in each field) a
cell is ``NULL`` exactly when it is one of the five features BM25, log(BM25), LMIR.DIR, LMIR.JM,
LMIR.ABS of a field (title: 11-15, abstract: 26-30,
title + abstract: 41-45) and the document has no query term in that field (the field's term frequency,
feature 1 / 16 / 31, is 0); every other value there equals the Feature-min file's. This script takes
that rule to mark the NULL cells of each Feature-min file, writes the file again with ``NULL`` in them
(a re-created Feature-null file), reads it with each fill rule and compares the filled cells with the
published values.

Reported per rule: NULL cells, the share whose filled value equals the published one (to float32
precision: both come from the same 6-decimal text), and the largest absolute difference.

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/null_fill_ohsumed.py [--data shared/data]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIELDS = (0, 15, 30)  # 0-based start of the title, abstract, title + abstract feature blocks
NULLABLE = range(10, 15)  # BM25, log(BM25), LMIR.DIR, LMIR.JM, LMIR.ABS within a block (0-based)
RULES = ("query_min", "letor_min")


def null_cells(features: np.ndarray) -> np.ndarray:
    """bool [N, 45]: the cells LETOR's Feature-null files hold as NULL (module docstring)."""
    mask = np.zeros(features.shape, dtype=bool)
    for base in FIELDS:
        no_term = features[:, base] == 0
        for j in NULLABLE:
            mask[:, base + j] = no_term
    return mask


def write_null_file(src: Path, dst: Path, mask: np.ndarray) -> None:
    """``src`` again, with ``NULL`` as the value of every cell in ``mask`` (rows in file order)."""
    with gzip.open(src, "rt") as fin, dst.open("w") as fout:
        for row, line in enumerate(fin):
            body, hash_mark, comment = line.rstrip("\n").partition("#")
            tokens = body.split()
            for t in range(2, len(tokens)):
                idx = int(tokens[t].split(":", 1)[0])
                if mask[row, idx - 1]:
                    tokens[t] = f"{idx}:NULL"
            fout.write(" ".join(tokens) + (" #" + comment if hash_mark else "") + "\n")


def measure(data_root: Path) -> dict[str, dict[str, float]]:
    from ctxrank.data.letor import read_letor

    totals = {rule: {"cells": 0, "equal": 0, "max_abs": 0.0} for rule in RULES}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(1, 6):
            src = data_root / "ohsumed" / "Feature-min" / f"Fold{k}_testset.txt.gz"
            published = read_letor(src, cache=False)
            mask = null_cells(published.features)
            null_path = Path(tmp) / f"Fold{k}_null.txt"
            write_null_file(src, null_path, mask)
            for rule in RULES:
                filled = read_letor(null_path, null_fill=rule, cache=False)
                assert filled.info["null_filled"] == int(mask.sum())
                np.testing.assert_array_equal(filled.features[~mask], published.features[~mask])
                diff = np.abs(filled.features[mask].astype(np.float64) - published.features[mask])
                t = totals[rule]
                t["cells"] += int(mask.sum())
                t["equal"] += int((diff <= 1e-6 * np.maximum(1.0, np.abs(published.features[mask]))).sum())
                t["max_abs"] = max(t["max_abs"], float(diff.max(initial=0.0)))
    return totals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="holds ohsumed/")
    args = ap.parse_args(argv)
    if not (args.data / "ohsumed" / "Feature-min").is_dir():
        print(f"no OHSUMED Feature-min files under {args.data}", file=sys.stderr)
        return 2
    totals = measure(args.data)
    print("| null_fill | NULL cells | equal to the published Feature-min value | max abs difference |")
    print("|---|---|---|---|")
    for rule, t in totals.items():
        share = t["equal"] / t["cells"] if t["cells"] else float("nan")
        print(f"| `{rule}` | {t['cells']:,} | {t['equal']:,} ({100 * share:.2f}%) | {t['max_abs']:.4g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
