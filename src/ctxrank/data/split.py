"""Random query-level train / validation / test split of one dataset.

Used by ``ctxrank train --data FILE`` when a single file is given instead of separate splits. The split
is at the query level (all items of a query go to the same split, so no query leaks across splits):

1. ``perm = numpy.random.default_rng(seed).permutation(Q)`` over the queries in file order;
2. the validation split gets ``n_valid = max(1, round(fractions[1] * Q))`` queries, the test split
   ``n_test = max(1, round(fractions[2] * Q))``, the training split the rest
   (``Q - n_valid - n_test``, at least 1): the first ``n_train`` queries of ``perm`` train, the next
   ``n_valid`` validate, the last ``n_test`` test (150 queries at 60/20/20: 90/30/30);
3. each split keeps its queries in file order.

The same ``(Q, fractions, seed)`` always gives the same split (numpy's ``default_rng`` stream is stable
across platforms for a given numpy version).

**By group** (``by_group=True``, CLI ``--group-col``, experiment ``[data] group_col``): when several
queries belong to one decision maker (SwissMetro: 9 answers per respondent, Electricity: up to 12 per
customer), a query-level split puts the same person in training and test, and the test score measures
memory of that person. The same three steps then run over the *groups* (``data.group_ids``, in order of
first appearance): the fractions count groups, and every query goes to its group's split. A group
column that is the query column itself (one group a situation: each person answered once) is the
split by query, exactly (:func:`group_column`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ctxrank._checks import OptionError, OptionText, check_fractions
from ctxrank.data.ranking_data import RankingData

__all__ = ["DEFAULT_FRACTIONS", "group_column", "group_split_indices", "query_split_indices", "split_queries"]

DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)
SPLIT_NAMES = ("train", "valid", "test")


def query_split_indices(
    n_queries: int, fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Query positions (int64, ascending) of the train, validation and test splits.

    Raises:
        ValueError: bad fractions, or too few queries for every split to get at least one.
    """
    fr = check_fractions("split fractions", fractions)
    n = int(n_queries)
    if n < 3:
        raise ValueError(
            f"{n} {'query is' if n == 1 else 'queries are'} too few to split into train/valid/test: that "
            "needs at least 3 queries, one for each split"
        )
    return _split_positions(n, fr, seed, "queries")


def _split_positions(
    n: int, fr: tuple[float, float, float], seed: int, units: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three position sets of ``n >= 3`` units (queries or groups), or an error when the fractions
    leave the training split none."""
    n_valid = max(1, round(fr[1] * n))
    n_test = max(1, round(fr[2] * n))
    n_train = n - n_valid - n_test
    if n_train < 1:
        raise ValueError(
            f"{n} {units} are too few to split {fr[0]:g}/{fr[1]:g}/{fr[2]:g} into train/valid/test: "
            f"validation gets {n_valid} and test {n_test} (max(1, round(fraction x {n})) each), leaving "
            f"{max(n_train, 0)} for training; give more {units} or a larger training fraction"
        )
    perm = np.random.default_rng(seed).permutation(n)
    parts = (perm[:n_train], perm[n_train : n_train + n_valid], perm[n_train + n_valid :])
    return tuple(np.sort(p).astype(np.int64) for p in parts)  # type: ignore[return-value]


def group_split_indices(
    group_ids: np.ndarray,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    seed: int = 0,
    *,
    name: str | OptionText = "group_ids",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Query positions (int64, ascending) of train, validation and test when whole groups are split:
    :func:`query_split_indices` over the distinct groups (in order of first appearance), then each
    query follows its group. ``group_ids``: ``(Q,)`` one id per query; ``name``: what messages call
    them (e.g. ``OptionText.of("{group_col} person")``)."""
    fr = check_fractions("split fractions", fractions)
    _, first, inverse = np.unique(np.asarray(group_ids), return_index=True, return_inverse=True)
    if first.size < 3:
        raise OptionError(
            "{name} has only {n} distinct value{s}: a train/valid/test split by group needs at least 3 "
            "groups, one for each split",
            name=name,
            n=first.size,
            s="" if first.size == 1 else "s",
        )
    appearance = np.empty(first.size, dtype=np.int64)
    appearance[np.argsort(first, kind="stable")] = np.arange(first.size)
    codes = appearance[inverse.reshape(-1)]  # group of each query, numbered by first appearance
    parts = _split_positions(first.size, fr, seed, "groups")
    return tuple(np.flatnonzero(np.isin(codes, p)).astype(np.int64) for p in parts)  # type: ignore[return-value]


def split_queries(
    data: RankingData,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    seed: int = 0,
    *,
    by_group: bool = False,
    group_name: str | OptionText | None = None,
) -> tuple[RankingData, RankingData, RankingData, dict[str, Any]]:
    """Split ``data`` at random by query (or, ``by_group``, by ``data.group_ids``) into train /
    validation / test (see the module docstring). ``group_name``: what messages call the group ids
    (e.g. ``OptionText.of("{group_col} person")``; default ``"group_ids of <data.source>"``).

    Returns:
        ``(train, valid, test, record)``; ``record`` is JSON-ready: ``method``, ``seed``,
        ``fractions``, ``queries`` ({split: count}), ``items`` ({split: count}), ``source`` and, by
        group, ``groups`` ({split: count}).
    """
    fr = check_fractions("split fractions", fractions)
    if by_group:
        if data.group_ids is None:
            raise OptionError(
                "{data} has no group ids to split by ({group_col})", data=data.source or "the data"
            )
        name = group_name if group_name is not None else f"group_ids of {data.source or 'the data'}"
        idx = group_split_indices(data.group_ids, fr, seed, name=name)
    else:
        idx = query_split_indices(data.n_queries, fr, seed)
    parts = []
    for name, q in zip(SPLIT_NAMES, idx, strict=True):
        part = data.subset(q)
        # split_of: the reader's counts in ``info`` (null_filled, missing) are the whole data's
        info = {**part.info, "split_of": data.info.get("split_of", data.source)}
        parts.append(replace(part, source=f"{data.source} [{name} split]", info=info))
    what = "group" if by_group else "query"
    record = {
        "method": f"random {what}-level split: numpy.random.default_rng(seed).permutation({what}s)",
        "seed": int(seed),
        "fractions": list(fr),
        "queries": {n: p.n_queries for n, p in zip(SPLIT_NAMES, parts, strict=True)},
        "items": {n: p.n_items for n, p in zip(SPLIT_NAMES, parts, strict=True)},
        "source": data.source,
    }
    if by_group:
        record["groups"] = {n: len(set(p.group_ids)) for n, p in zip(SPLIT_NAMES, parts, strict=True)}
    return parts[0], parts[1], parts[2], record


def group_column(group_col: str | None, query_col: str) -> str | None:
    """The column whose groups split a table (``--group-col``, ``[data] group_col``): None (split by
    query) when none is given or it is the query column, whose groups are the queries themselves (the
    same split: :func:`group_split_indices` numbers groups in order of first appearance)."""
    return None if not group_col or group_col == query_col else group_col
