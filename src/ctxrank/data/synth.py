"""Synthetic LETOR files for benchmarks and tests (documented as synthetic; not for model claims).

``write_synthetic_letor`` writes an MSLR-shaped file: ``n_queries`` queries of ``list_size`` items,
``n_features`` dense features (values with 6 significant digits, as in the real files), labels 0..4
drawn from a noisy linear function of the features so that the data carry some ranking signal.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def write_synthetic_letor(
    path: str | os.PathLike,
    *,
    n_queries: int = 1000,
    list_size: int = 100,
    n_features: int = 136,
    max_label: int = 4,
    seed: int = 0,
    docids: bool = True,
    block_queries: int = 200,
) -> Path:
    """Write a synthetic LETOR text file (``.gz`` when the name ends with it) and return its path.

    Rows: ``label qid:Q 1:v1 ... F:vF #docid = D-q-i``. Memory: one block of queries at a time.
    """
    if min(n_queries, list_size, n_features, block_queries) < 1:
        raise ValueError("n_queries, list_size, n_features and block_queries must be >= 1")
    path = Path(path)
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=n_features) / np.sqrt(n_features)
    row_fmt = "%d qid:%d " + " ".join(f"{j}:%.6g" for j in range(1, n_features + 1))
    opener = __import__("gzip").open if path.suffix == ".gz" else open
    with opener(path, "wt") as fh:
        for q0 in range(0, n_queries, block_queries):
            nq = min(block_queries, n_queries - q0)
            x = rng.random((nq * list_size, n_features))
            utility = x @ weights + rng.normal(scale=0.3, size=x.shape[0])
            cuts = np.quantile(utility, np.linspace(0, 1, max_label + 2)[1:-1] ** 0.5)
            labels = np.searchsorted(cuts, utility)
            qids = np.repeat(np.arange(q0, q0 + nq) + 1, list_size)
            lines = []
            for i in range(x.shape[0]):
                line = row_fmt % (labels[i], qids[i], *x[i])
                if docids:
                    line += f" #docid = D-{qids[i]}-{i % list_size}"
                lines.append(line)
            fh.write("\n".join(lines) + "\n")
    return path
