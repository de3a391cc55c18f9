"""Synthetic LETOR files for benchmarks and tests (documented as synthetic; not for model claims).

``write_synthetic_letor`` writes an MSLR-shaped file: ``n_queries`` queries, ``n_features`` dense
features (values with 6 significant digits, as in the real files), labels 0..4 drawn from a noisy linear
function of the features so that the data carry some ranking signal.

List lengths: ``list_size`` items for every query, or per-query ``list_sizes`` (e.g.
:func:`mslr_list_sizes`, the shape of MSLR-WEB30K: mean about 120 items a query, longest 1,251). Labels:
by default the quantile rule below; ``label_shares`` sets the share of each grade instead (e.g.
:data:`MSLR_LABEL_SHARES`, mostly 0 and 1 as in MSLR-WEB30K).

List context (``context``, :data:`SYNTH_CONTEXTS`): ``"none"`` (the default) draws each item's utility
from its own features, ``u_i = x_i . w + e_i`` with ``x_i ~ U(0, 1)^F``, ``w ~ N(0, I / F)`` and noise
``e_i ~ N(0, 0.3^2)``. ``"relative"`` makes relevance a property of the list (the compromise effect:
Simonson 1989, "Choice based on reasons: the case of attraction and compromise effects", J. Consumer
Research 16(2)): every list q gets its own level ``m_q ~ N(0, LEVEL_SPREAD^2 I_F)``, its items
``x_i = m_q + U(0, 1)^F``, and an item is relevant when it is typical of its list::

    s_i = x_i . w                                   (a latent score)
    z_i = (s_i - mean_{j in q} s_j) / std_{j in q} s_j     (0 in a list where all s_j are equal)
    u_i = -|z_i| + e_i

The spread of the levels ``m_q . w`` (about ``LEVEL_SPREAD``) is several times the spread of ``s``
within a list (about 0.3), so an item's absolute features say little about its grade, and no function of
one item's features ranks every list right: the best item of one list is the worst of another. A grade
that were a monotone function of ``z_i`` alone would not need context (ranking a list by ``s_i`` already
orders it by ``z_i``); hence the non-monotone ``|z_i|``. The grades are the utilities cut at quantiles
as below; within a list they depend on the other items' features but not on their order.
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ctxrank._checks import check_choice
from ctxrank._memory import available_bytes, format_bytes

__all__ = [
    "MSLR_LABEL_SHARES",
    "MSLR_MAX_LIST",
    "MSLR_MEAN_LIST",
    "SYNTH_CONTEXTS",
    "SYNTH_LABELS",
    "SYNTH_LENGTHS",
    "mslr_list_sizes",
    "write_synthetic_letor",
]

#: ``ctxrank synth letor --lengths`` / ``--labels``: the shapes offered
SYNTH_LENGTHS = ("fixed", "mslr")
SYNTH_LABELS = ("quantile", "mslr")
#: ``ctxrank synth letor --context``: how an item's relevance depends on its list (module docstring)
SYNTH_CONTEXTS = ("none", "relative")
#: ``context = "relative"``: the standard deviation of each feature's per-list level ``m_q``
LEVEL_SPREAD = 1.0

#: MSLR-WEB30K: 3,771,125 rows in 31,531 queries (119.6 a query), the longest list 1,251 items
MSLR_MEAN_LIST = 3_771_125 / 31_531
MSLR_MAX_LIST = 1251
#: shares of grades 0..4, approximately those reported for MSLR-WEB30K (not measured here)
MSLR_LABEL_SHARES = (0.52, 0.32, 0.13, 0.02, 0.01)
_MSLR_SIGMA = 0.6  # log-normal spread of the list lengths (an assumption; the real histogram is not used)
#: rows generated at a time, at most (a block of ``block_queries`` queries stops short of it; a longer
#: query is a block of its own): 200 queries of up to 1,310 items fit, so MSLR-shaped files are as before
BLOCK_ROWS = 2**18
_LINES_PER_WRITE = 4096
#: zlib level of a ``.gz`` file: 1 writes about 15x faster than Python's default 9 for a file about 14%
#: larger (measured on 20,000 rows of 136 features); the text inside is the same
GZIP_LEVEL = 1


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
    context: str = "none",
    progress: bool = False,
) -> Path:
    """Write a synthetic LETOR text file (``.gz`` when the name ends with it) and return its path.

    Rows: ``label qid:Q 1:v1 ... F:vF [#docid = D-q-i]``. Memory: one block of ``block_queries``
    queries at a time, at most :data:`BLOCK_ROWS` rows unless one query is longer. A file that would not
    fit on its disk, or a query that would not fit in memory, is refused before anything is written
    (:func:`check_room`).

    Args:
        list_sizes: the items of each of the ``n_queries`` queries (instead of ``list_size`` each).
        label_shares: ``max_label + 1`` shares (summing to 1) of the grades 0..max_label: each block's
            utilities are cut at these quantiles. None: cuts at the quantiles ``sqrt(j / (K + 1))``.
        context: ``"none"`` or ``"relative"`` (:data:`SYNTH_CONTEXTS`, the module docstring's equations).
        progress: a progress bar of the rows written, on stderr (tqdm).
    """
    if min(n_queries, list_size, n_features, block_queries) < 1:
        raise ValueError("n_queries, list_size, n_features and block_queries must be >= 1")
    check_choice("context", context, SYNTH_CONTEXTS)
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
    row_fmt = "%d qid:%d " + " ".join(f"{j}:%.6g" for j in range(1, n_features + 1))
    check_room(path, sizes, n_features, row_fmt, docids)
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=n_features) / np.sqrt(n_features)
    opener = partial(gzip.open, compresslevel=GZIP_LEVEL) if path.suffix == ".gz" else open
    bar = tqdm(total=int(sizes.sum()), unit="row", unit_scale=True, disable=not progress, dynamic_ncols=True)
    with opener(path, "wt") as fh, bar:
        for q0, q1 in _blocks(sizes, block_queries):
            block_sizes = sizes[q0:q1]
            x = rng.random((int(block_sizes.sum()), n_features))
            starts = np.concatenate([[0], np.cumsum(block_sizes)[:-1]])
            if context == "relative":
                local = np.repeat(np.arange(q1 - q0), block_sizes)  # each row's list in the block
                x += rng.normal(scale=LEVEL_SPREAD, size=(q1 - q0, n_features))[local]
                utility = -np.abs(_list_zscore(x @ weights, starts, local))
            else:
                utility = x @ weights
            utility = utility + rng.normal(scale=0.3, size=x.shape[0])
            cuts = np.quantile(utility, levels)
            labels = np.searchsorted(cuts, utility)
            qids = np.repeat(np.arange(q0, q1) + 1, block_sizes)
            item = np.arange(x.shape[0]) - np.repeat(starts, block_sizes)  # place within the query
            for r0 in range(0, x.shape[0], _LINES_PER_WRITE):
                lines = []
                for i in range(r0, min(r0 + _LINES_PER_WRITE, x.shape[0])):
                    lines.append(_line(row_fmt, labels[i], qids[i], x[i], item[i] if docids else None))
                fh.write("\n".join(lines) + "\n")
                bar.update(len(lines))
    return path


def _list_zscore(score: np.ndarray, starts: np.ndarray, local: np.ndarray) -> np.ndarray:
    """float64 (rows,) ``(s - mean_q) / std_q`` of ``score`` (rows,) within each list (lists start at
    ``starts`` (Q,); ``local`` (rows,) = each row's list); 0 in a list whose scores are all equal."""
    counts = np.diff(np.append(starts, score.shape[0]))
    mean = np.add.reduceat(score, starts) / counts
    dev = score - mean[local]
    std = np.sqrt(np.add.reduceat(dev * dev, starts) / counts)
    constant = np.minimum.reduceat(score, starts) == np.maximum.reduceat(score, starts)
    return np.where(constant[local], 0.0, dev / np.where(constant, 1.0, std)[local])


def _line(row_fmt: str, label: int, qid: int, values: np.ndarray, item: int | None) -> str:
    """One row of the file: ``row_fmt`` filled, and its ``#docid`` comment unless ``item`` is None."""
    line = row_fmt % (label, qid, *values)
    return line if item is None else f"{line} #docid = D-{qid}-{item}"


def _blocks(sizes: np.ndarray, block_queries: int) -> Iterator[tuple[int, int]]:
    """``[q0, q1)`` query ranges of at most ``block_queries`` queries and :data:`BLOCK_ROWS` rows (one
    query at least). Labels are cut at each block's quantiles, so the blocks are part of the data."""
    q0 = 0
    while q0 < len(sizes):
        q1, rows = q0 + 1, int(sizes[q0])
        while q1 < min(q0 + block_queries, len(sizes)) and rows + sizes[q1] <= BLOCK_ROWS:
            rows += int(sizes[q1])
            q1 += 1
        yield q0, q1
        q0 = q1


def check_room(path: Path, sizes: np.ndarray, n_features: int, row_fmt: str, docids: bool) -> None:
    """Refuse, before anything is written, a file larger than the free space of its directory (its
    size estimated from 64 rows formatted as the file's, gzip-compressed for ``.gz``) or a block larger
    than the memory the machine can give (``8 x rows x features`` bytes for the features, twice).

    Raises:
        ValueError: either; the message gives both figures.
    """
    rows = int(sizes.sum())
    block = max(int(sizes.max()), min(BLOCK_ROWS, rows))
    need, (free, where) = 2 * 8 * block * n_features, available_bytes("cpu")
    if need > free:
        raise ValueError(
            f"a block of {block:,} rows x {n_features} features needs about {format_bytes(need)} of memory "
            f"and the machine can give {format_bytes(free)} (the {where}); the longest query has "
            f"{int(sizes.max()):,} items: ask for shorter lists or fewer features"
        )
    sample_rng = np.random.default_rng(0)  # not the file's generator: the file does not depend on it
    n = min(64, rows)
    item = int(sizes.max()) - 1 if docids else None  # the longest comment
    lines = [_line(row_fmt, 1, len(sizes), sample_rng.random(n_features), item) for _ in range(n)]
    text = "".join(f"{line}\n" for line in lines).encode()
    per_row = len(gzip.compress(text, GZIP_LEVEL) if path.suffix == ".gz" else text) / n
    size = per_row * rows
    directory = path.parent  # "." for a bare file name
    room = shutil.disk_usage(directory).free
    if size > room:
        raise ValueError(
            f"{rows:,} rows of {n_features} features take about {format_bytes(size)} "
            f"({per_row:.0f} bytes a row{', compressed' if path.suffix == '.gz' else ''}), and "
            f"{directory.resolve()} has {format_bytes(room)} free: ask for fewer queries, items or features"
        )
