"""An interaction log read as ranking data: the rules its shown positions obey.

A log maps onto :class:`~ctxrank.data.ranking_data.RankingData` as: one logged session = one query
(list), the interaction (a click 0/1, or a graded one) = the label, the logged query id = the group
(``group_ids``), the item id = the docid, the 1-based position each item was shown at =
``shown_positions``. Every shown item is a row, so within a session the positions are exactly
``1..n`` (n = the session's rows) in any row order: a missing, fractional or repeated position, a gap
or a first position above 1 (rows missing) is an error naming the session and the row. An interaction
is on a shown row by construction, so these rules also cover "an interaction outside the shown
positions". A session without any interaction (every label 0) is kept and counted
(``info["sessions_without_interaction"]``); each learner decides whether it uses it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["log_positions", "sessions_without_interaction"]


def log_positions(
    values: np.ndarray,
    offsets: np.ndarray,
    session_ids: np.ndarray,
    rows: np.ndarray,
    source: str,
    where: Callable[[int], str],
    column: str,
) -> np.ndarray:
    """int32 (N,) shown positions, checked session by session.

    Args:
        values: float (N,) the position column, rows grouped by session (NaN: missing).
        offsets: int64 (Q + 1,) the sessions' row offsets.
        session_ids: (Q,) the session ids (for messages).
        rows: int64 (N,) each row's 0-based row in the caller's input (for messages).
        source: what the messages start with: the file, or the argument.
        where: a caller's row (0-based) in messages, e.g. ``"data row 7"`` for row 6.
        column: the position column's name (for messages).

    Raises:
        ValueError: ``"<source>: <where>: session 's1': ..."`` for the first offending row (in the
            caller's order) of the first rule broken: a missing position, one that is not a whole
            number >= 1, one repeated within a session, positions that are not ``1..n`` without gaps.
    """
    values = np.asarray(values, dtype=np.float64)
    lengths = np.diff(offsets)
    session = np.repeat(np.arange(lengths.size), lengths)

    def fail(bad: np.ndarray, text: Callable[[int], str]) -> None:
        if bad.size:
            i = int(bad[np.argmin(rows[bad])])
            session_id = str(session_ids[session[i]])[:40]
            raise ValueError(f"{source}: {where(int(rows[i]))}: session {session_id!r}: {text(i)}")

    fail(
        np.flatnonzero(np.isnan(values)),
        lambda i: (
            f"missing position in column {column!r} (every row of a log is a shown item, with its position)"
        ),
    )
    fail(
        np.flatnonzero((values != np.floor(values)) | (values < 1) | (values > np.iinfo(np.int32).max)),
        lambda i: f"position {values[i]:g} in column {column!r} is not a whole number >= 1",
    )
    order = np.lexsort((values, session))  # by session, then position
    ranked = values[order]
    same = np.flatnonzero((ranked[1:] == ranked[:-1]) & (session[order][1:] == session[order][:-1]))
    fail(
        order[same + 1],
        lambda i: (
            f"position {values[i]:g} is repeated (also at "
            f"{where(int(rows[order[np.flatnonzero(order == i)[0] - 1]]))}); each shown position is one row"
        ),
    )
    expected = np.arange(values.size) - np.repeat(offsets[:-1], lengths) + 1  # 1..n within each session
    wrong = ranked != expected  # from a session's first gap on, each of its later positions is wrong too
    first = wrong & ~np.concatenate([[False], wrong[:-1]])
    first[offsets[:-1][lengths > 0]] = wrong[offsets[:-1][lengths > 0]]
    gap = np.flatnonzero(first)
    fail(
        order[gap],
        lambda i: (
            f"position {values[i]:g} but no row at position {int(expected[np.flatnonzero(order == i)[0]])} "
            f"({lengths[session[i]]} row(s): positions must be 1..n without gaps, since every shown item "
            "is a row; a gap or a first position above 1 means rows of the session are missing)"
        ),
    )
    return values.astype(np.int32)


def sessions_without_interaction(labels: np.ndarray, offsets: np.ndarray) -> int:
    """How many sessions (rows ``offsets[q]:offsets[q + 1]`` of ``labels`` (N,)) have no label > 0."""
    lengths = np.diff(offsets)
    hits = np.add.reduceat((labels > 0).astype(np.int64), offsets[:-1]) if labels.size else np.zeros(0)
    return int(np.count_nonzero((hits == 0) & (lengths > 0)))
