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

:class:`LetorShape` declares the options once (``ctxrank synth letor``'s flags, an experiment's
``[data] letor`` table); :func:`synthetic_letor` generates the same lists in memory, exactly as reading
the written file gives them.
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ctxrank._checks import Field, OptionError, check_choice, check_int, check_named
from ctxrank._declare import POSITIVE_INT, declared, option, unflatten
from ctxrank._memory import available_bytes, format_bytes
from ctxrank.data.ranking_data import RankingData

__all__ = [
    "MSLR_LABEL_SHARES",
    "MSLR_MAX_LIST",
    "MSLR_MEAN_LIST",
    "SYNTH_CONTEXTS",
    "SYNTH_LABELS",
    "SYNTH_LENGTHS",
    "LetorShape",
    "mslr_list_sizes",
    "synthetic_letor",
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
#: queries generated at a time, at most (the file's and the lists in memory alike: the grades are cut
#: at each block's quantiles)
BLOCK_QUERIES = 200
_LINES_PER_WRITE = 4096
#: zlib level of a ``.gz`` file: 1 writes about 15x faster than Python's default 9 for a file about 14%
#: larger (measured on 20,000 rows of 136 features); the text inside is the same
GZIP_LEVEL = 1


@dataclass(frozen=True)
class LetorShape:
    """The lists to generate: the options of ``ctxrank synth letor`` (its flags) and of an experiment's
    ``[data] letor`` table (their names), declared once and checked here for both. The seed is not
    part of the shape (``--seed``, ``[data] synth_seed``)."""

    queries: int = option(1000, "--queries", "queries (default 1000)", parse=POSITIVE_INT, metavar="N")
    items: int = option(
        100, "--items", "items per query with --lengths fixed (default 100)", parse=POSITIVE_INT, metavar="L"
    )
    features: int = option(136, "--features", "dense features (default 136)", parse=POSITIVE_INT, metavar="F")
    max_label: int = option(4, "--max-label", "labels 0..K (default 4)", parse=POSITIVE_INT, metavar="K")
    lengths: str = option(
        "fixed", "--lengths",
        "list lengths: fixed (--items each, the default) or mslr (MSLR-WEB30K-shaped: log-normal, mean "
        "about 120, one list of 1,251)",
        choices=SYNTH_LENGTHS,
    )  # fmt: skip
    labels: str = option(
        "quantile", "--labels",
        "label shares: quantile (the default) or mslr (grades 0-4, mostly 0 and 1, as in MSLR-WEB30K)",
        choices=SYNTH_LABELS,
    )  # fmt: skip
    context: str = option(
        "none", "--context",
        "how relevance depends on the list: none (each item's own features, the default) or relative "
        "(lists at very different levels; an item is relevant when typical of its list)",
        choices=SYNTH_CONTEXTS,
    )  # fmt: skip

    def __post_init__(self) -> None:
        for name in ("queries", "items", "features", "max_label"):
            check_named(Field(name), check_int, getattr(self, name))
        check_named(Field("lengths"), check_choice, self.lengths, SYNTH_LENGTHS)
        check_named(Field("labels"), check_choice, self.labels, SYNTH_LABELS)
        check_named(Field("context"), check_choice, self.context, SYNTH_CONTEXTS)
        if self.labels == "mslr" and self.max_label != len(MSLR_LABEL_SHARES) - 1:
            raise OptionError(
                "{labels} mslr gives grades 0..{top}: leave {max_label} out (got {given})",
                top=len(MSLR_LABEL_SHARES) - 1, given=self.max_label,
            )  # fmt: skip
        if self.lengths == "mslr" and self.items != LetorShape.items:
            raise OptionError(
                "{items} applies to {lengths} fixed; {lengths} mslr draws each list's length (got {given})",
                given=self.items,
            )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LetorShape:
        """The shape of a table of option names (a spec's ``[data] letor``, a record's); unknown names
        are errors listing the valid ones."""
        if not isinstance(d, Mapping):
            raise ValueError(f"must be a table of {[name for name, _ in declared(cls)]}, got {d!r}")
        return unflatten(cls, d, what="key")

    def list_sizes(self, seed: int) -> np.ndarray:
        """int64 (queries,) the length of each list: ``items`` each, or :func:`mslr_list_sizes`."""
        if self.lengths == "mslr":
            return mslr_list_sizes(self.queries, seed)
        return np.full(self.queries, self.items, dtype=np.int64)

    @property
    def label_shares(self) -> tuple[float, ...] | None:
        """The shares of the grades (``labels = "mslr"``), or None: the quantile rule."""
        return MSLR_LABEL_SHARES if self.labels == "mslr" else None

    def describe(self, sizes: np.ndarray | None = None) -> str:
        """``"300 queries x 20 items, 10 features, labels 0..4, context relative"`` (with ``sizes``
        (queries,) of MSLR-shaped lengths: their mean and longest)."""
        shape = f"{self.items} items"
        if self.lengths == "mslr":
            shape = "MSLR-shaped lists" if sizes is None else (
                f"{sizes.mean():.1f} items on average (longest {sizes.max()})"
            )  # fmt: skip
        labels = ", MSLR label shares" if self.labels == "mslr" else ""
        context = "" if self.context == "none" else f", context {self.context}"
        grades = f"labels 0..{self.max_label}{labels}{context}"
        return f"{self.queries:,} queries x {shape}, {self.features} features, {grades}"


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
    block_queries: int = BLOCK_QUERIES,
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
    levels = _label_cuts(max_label, label_shares)
    path = Path(path)
    row_fmt = "%d qid:%d " + " ".join(f"{j}:%.6g" for j in range(1, n_features + 1))
    check_room(path, sizes, n_features, row_fmt, docids)
    opener = partial(gzip.open, compresslevel=GZIP_LEVEL) if path.suffix == ".gz" else open
    bar = tqdm(total=int(sizes.sum()), unit="row", unit_scale=True, disable=not progress, dynamic_ncols=True)
    with opener(path, "wt") as fh, bar:
        for q0, q1, x, labels in _generated(sizes, n_features, levels, seed, block_queries, context):
            block_sizes = sizes[q0:q1]
            starts = np.concatenate([[0], np.cumsum(block_sizes)[:-1]])
            qids = np.repeat(np.arange(q0, q1) + 1, block_sizes)
            item = np.arange(x.shape[0]) - np.repeat(starts, block_sizes)  # place within the query
            for r0 in range(0, x.shape[0], _LINES_PER_WRITE):
                lines = []
                for i in range(r0, min(r0 + _LINES_PER_WRITE, x.shape[0])):
                    lines.append(_line(row_fmt, labels[i], qids[i], x[i], item[i] if docids else None))
                fh.write("\n".join(lines) + "\n")
                bar.update(len(lines))
    return path


def synthetic_letor(shape: LetorShape, seed: int = 0) -> RankingData:
    """The lists ``ctxrank synth letor`` writes for ``shape`` and ``seed``, generated in memory: the
    RankingData that reading its file gives (features as its text holds them, 6 significant digits,
    float32; query ids ``"1".."Q"``; docids ``D-q-i``), without the file. ``source`` describes the
    generator and its parameters (no path).

    Raises:
        OptionError: ``shape`` is not a :class:`LetorShape` (checked there).
        ValueError: the lists would not fit in the memory the machine can give (before any is made).
    """
    if not isinstance(shape, LetorShape):
        raise TypeError(f"shape must be a LetorShape, got {type(shape).__name__}")
    sizes = shape.list_sizes(seed)
    rows, width = int(sizes.sum()), shape.features
    block = max(int(sizes.max()), min(BLOCK_ROWS, rows))
    need, (free, where) = 4 * rows * width + 2 * 8 * block * width, available_bytes("cpu")
    if need > free:
        raise ValueError(
            f"synthetic lists of {rows:,} rows x {width} features need about {format_bytes(need)} of memory "
            f"and the machine can give {format_bytes(free)} (the {where}): ask for fewer queries, items or "
            "features"
        )
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    features = np.empty((rows, width), dtype=np.float32)
    labels = np.empty(rows, dtype=np.float32)
    levels = _label_cuts(shape.max_label, shape.label_shares)
    for q0, q1, x, grades in _generated(sizes, width, levels, seed, BLOCK_QUERIES, shape.context):
        features[offsets[q0] : offsets[q1]] = _as_written(x)
        labels[offsets[q0] : offsets[q1]] = grades
    qids = np.arange(1, shape.queries + 1)
    item = np.arange(rows) - np.repeat(offsets[:-1], sizes)
    query_of_row = np.repeat(qids, sizes).astype(str)
    docids = np.char.add(np.char.add("D-", query_of_row), np.char.add("-", item.astype(str)))
    docids = docids.astype(f"U{int(np.char.str_len(docids).max())}")  # the reader's width
    return RankingData(
        features=features,
        labels=labels,
        query_ids=qids.astype(str),
        query_offsets=offsets,
        docids=docids,
        feature_names=tuple(f"f{i}" for i in range(1, width + 1)),
        source=f"SYNTHETIC letor lists ({shape.describe(sizes)}; seed {seed})",
        info={"null_filled": 0},
    )


def _label_cuts(max_label: int, label_shares: Sequence[float] | None) -> np.ndarray:
    """The quantiles at which utilities become the grades 0..max_label (module docstring)."""
    if label_shares is None:
        return np.linspace(0, 1, max_label + 2)[1:-1] ** 0.5
    shares = np.asarray(label_shares, dtype=np.float64)
    if shares.shape != (max_label + 1,) or shares.min() < 0 or not np.isclose(shares.sum(), 1.0):
        raise ValueError(f"label_shares must be {max_label + 1} non-negative shares summing to 1")
    return np.cumsum(shares)[:-1]


def _generated(
    sizes: np.ndarray, n_features: int, levels: np.ndarray, seed: int, block_queries: int, context: str
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(q0, q1, x, labels)`` of each block of queries ``[q0, q1)`` (:func:`_blocks`): float64 features
    (rows, F) and int grades (rows,), drawn as the module docstring says from one generator of ``seed``
    (the blocks in order: the same numbers for the file and for the lists in memory)."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=n_features) / np.sqrt(n_features)
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
        yield q0, q1, x, np.searchsorted(cuts, utility)


#: ``10.0 ** k`` for k = 0..22, exactly (every one is a float64)
_POW10 = np.array([float(10**k) for k in range(23)])


def _as_written(x: np.ndarray) -> np.ndarray:
    """float32 of ``x`` (float64) as a file's ``%.6g`` text holds it and a reader reads it back: each
    value rounded to 6 significant digits. Vectorised: ``rint(x * 10^k) / 10^k`` (both steps correctly
    rounded in float64); a value whose scaled form lies within 1e-6 of a rounding tie, or outside
    10^k's exact range, is formatted as the file's text is."""
    a = np.abs(x)
    nonzero = a > 0
    shift = 5 - np.floor(np.log10(np.where(nonzero, a, 1.0)))
    fast = nonzero & (shift >= 0) & (shift < _POW10.size)
    scale = _POW10[np.where(fast, shift, 0).astype(np.int64)]
    scaled = x * scale
    k = np.rint(scaled)
    tie = np.abs(np.abs(scaled - np.trunc(scaled)) - 0.5) < 1e-6
    fast &= (np.abs(k) >= 1e5) & (np.abs(k) <= 1e6) & ~tie
    out = np.where(fast, k / scale, x)
    slow = nonzero & ~fast
    if slow.any():
        out[slow] = [float(f"{v:.6g}") for v in x[slow]]
    return out.astype(np.float32)


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
