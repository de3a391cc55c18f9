"""Synthetic LETOR files for benchmarks and tests (documented as synthetic; not for model claims).

``write_synthetic_letor`` writes an MSLR-shaped file: ``n_queries`` queries, ``n_features`` dense
features (values with 6 significant digits, as in the real files), labels 0..4 drawn from a noisy linear
function of the features so that the data carry some ranking signal.

List lengths: ``list_size`` items for every query, or per-query ``list_sizes`` (e.g.
:func:`mslr_list_sizes`, the shape of MSLR-WEB30K: mean about 120 items a query, longest 1,251). Labels:
by default the quantile rule below; ``label_shares`` sets the share of each grade instead (e.g.
:data:`MSLR_LABEL_SHARES`, mostly 0 and 1 as in MSLR-WEB30K).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "MSLR_LABEL_SHARES",
    "MSLR_MAX_LIST",
    "MSLR_MEAN_LIST",
    "SYNTH_LABELS",
    "SYNTH_LENGTHS",
    "mslr_list_sizes",
    "write_synthetic_letor",
]

#: ``ctxrank synth letor --lengths`` / ``--labels``: the shapes offered
SYNTH_LENGTHS = ("fixed", "mslr")
SYNTH_LABELS = ("quantile", "mslr")

#: MSLR-WEB30K: 3,771,125 rows in 31,531 queries (119.6 a query), the longest list 1,251 items
MSLR_MEAN_LIST = 3_771_125 / 31_531
MSLR_MAX_LIST = 1251
#: shares of grades 0..4, approximately those reported for MSLR-WEB30K (not measured here)
MSLR_LABEL_SHARES = (0.52, 0.32, 0.13, 0.02, 0.01)
_MSLR_SIGMA = 0.6  # log-normal spread of the list lengths (an assumption; the real histogram is not used)


def mslr_list_sizes(n_queries: int, seed: int = 0) -> np.ndarray:
    """int64 (Q,) list lengths shaped like MSLR-WEB30K's: log-normal with mean :data:`MSLR_MEAN_LIST`
    (spread ``sigma = 0.6``, an assumption), clipped to [1, :data:`MSLR_MAX_LIST`], and one list (the
    longest drawn) set to exactly :data:`MSLR_MAX_LIST` items, so that every file has the real
    dataset's longest list."""
    if n_queries < 1:
        raise ValueError(f"n_queries must be >= 1, got {n_queries}")
    rng = np.random.default_rng(seed)
    mu = np.log(MSLR_MEAN_LIST) - _MSLR_SIGMA**2 / 2  # mean of a log-normal = exp(mu + sigma^2 / 2)
    drawn = np.rint(rng.lognormal(mu, _MSLR_SIGMA, size=n_queries))
    sizes = np.clip(drawn, 1, MSLR_MAX_LIST).astype(np.int64)
    sizes[np.argmax(sizes)] = MSLR_MAX_LIST
    return sizes


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
    list_sizes: Sequence[int] | np.ndarray | None = None,
    label_shares: Sequence[float] | None = None,
) -> Path:
    """Write a synthetic LETOR text file (``.gz`` when the name ends with it) and return its path.

    Rows: ``label qid:Q 1:v1 ... F:vF [#docid = D-q-i]``. Memory: one block of queries at a time.

    Args:
        list_sizes: the items of each of the ``n_queries`` queries (instead of ``list_size`` each).
        label_shares: ``max_label + 1`` shares (summing to 1) of the grades 0..max_label: each block's
            utilities are cut at these quantiles. None: cuts at the quantiles ``sqrt(j / (K + 1))``.
    """
    if min(n_queries, list_size, n_features, block_queries) < 1:
        raise ValueError("n_queries, list_size, n_features and block_queries must be >= 1")
    sizes = np.full(n_queries, list_size, dtype=np.int64)
    if list_sizes is not None:
        sizes = np.asarray(list_sizes, dtype=np.int64)
        if sizes.shape != (n_queries,) or sizes.min() < 1:
            raise ValueError(f"list_sizes must hold {n_queries} positive sizes, got shape {sizes.shape}")
    levels = np.linspace(0, 1, max_label + 2)[1:-1] ** 0.5
    if label_shares is not None:
        shares = np.asarray(label_shares, dtype=np.float64)
        if shares.shape != (max_label + 1,) or shares.min() < 0 or not np.isclose(shares.sum(), 1.0):
            raise ValueError(f"label_shares must be {max_label + 1} non-negative shares summing to 1")
        levels = np.cumsum(shares)[:-1]
    path = Path(path)
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=n_features) / np.sqrt(n_features)
    row_fmt = "%d qid:%d " + " ".join(f"{j}:%.6g" for j in range(1, n_features + 1))
    opener = __import__("gzip").open if path.suffix == ".gz" else open
    with opener(path, "wt") as fh:
        for q0 in range(0, n_queries, block_queries):
            nq = min(block_queries, n_queries - q0)
            block_sizes = sizes[q0 : q0 + nq]
            x = rng.random((int(block_sizes.sum()), n_features))
            utility = x @ weights + rng.normal(scale=0.3, size=x.shape[0])
            cuts = np.quantile(utility, levels)
            labels = np.searchsorted(cuts, utility)
            qids = np.repeat(np.arange(q0, q0 + nq) + 1, block_sizes)
            starts = np.concatenate([[0], np.cumsum(block_sizes)[:-1]])
            item = np.arange(x.shape[0]) - np.repeat(starts, block_sizes)  # place within the query
            lines = []
            for i in range(x.shape[0]):
                line = row_fmt % (labels[i], qids[i], *x[i])
                if docids:
                    line += f" #docid = D-{qids[i]}-{item[i]}"
                lines.append(line)
            fh.write("\n".join(lines) + "\n")
    return path
