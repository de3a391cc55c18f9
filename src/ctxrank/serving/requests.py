"""The JSON of ``POST /rank``: parsed and checked into arrays, and the answer built from the scores.

Request (one or many queries; rows of a query anywhere)::

    {"qid": "q1" | ["q1", "q1", "q2", ...],          one id for all rows, or one per row (string or integer)
     "rows": [[0.3, 1.0, ...], ...]                   by position: F feature values, then C categorical values
           | [{"f1": 0.3, "f2": 1.0, ...}, ...]}      by name: every feature (and categorical column) once

Answer::

    {"scores": [s_0, ..., s_{N-1}],                   one a row, in the request's row order
     "rankings": [{"qid": "q1", "rows": [2, 0, 1]}, ...]}   rows, best first (ties: order_by_score)

A feature value is a number (JSON integer or float); ``null`` is a missing value, accepted only where the
model reads missing values (the model's ``allow_missing``); NaN / Infinity literals are not JSON and
are refused, as is any value beyond float32. A categorical value is a string, an integer, a boolean or
``null`` (unknown); it is coded with the model's saved vocabulary (``str(value)``, as at training;
unknown values get code 0).

Every problem is a :class:`RequestError` with an HTTP status (400 not JSON, 413 over a limit, 422 a
field) and the offending field (``rows[3][7]``, ``rows[2]["price"]``, ``qid[5]``). Written by hand
rather than as a pydantic model: the rows go to NumPy in one ``np.array`` call after a type check per
row (``set(map(type, row))``), and a field is located only when something is wrong, where a pydantic
model would validate and box every value, then copy them again into NumPy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from ctxrank._checks import FLOAT32_MAX
from ctxrank.data.categorical import CategoricalEncoder
from ctxrank.data.ranking_data import order_by_score

__all__ = ["Limits", "RankRequest", "RequestError", "header", "parse_request", "rank_answer"]

_KEYS = ("qid", "rows")
_NUMBER = (int, float)
_CATEGORY = (str, int, bool, float, type(None))


class RequestError(ValueError):
    """A request the server refuses: ``status`` (400, 413, 415, 422), ``field`` (or None), message."""

    def __init__(self, message: str, *, field: str | None = None, status: int = 422) -> None:
        super().__init__(message)
        self.field, self.status = field, status

    def body(self) -> dict[str, Any]:
        return {"error": str(self), "field": self.field}


def header(scope: dict, name: bytes) -> str | None:
    """The first value of an ASGI request's header ``name`` (lower-case), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


@dataclass(frozen=True)
class Limits:
    """Bounds of one request: ``max_rows`` rows in all, ``max_list`` rows in one query."""

    max_rows: int
    max_list: int


@dataclass(frozen=True)
class RankRequest:
    """A checked request: ``X`` float32 (N, F), ``codes`` int64 (N, C) or None, ``group`` int64 (N,)
    (each row's query, 0..Q-1 in order of first appearance) and ``query_ids`` (Q,) as the client gave
    them; ``lists``: the same rows already as an exported graph's inputs ``(features, mask,
    categorical or None)`` (a v2 request whose lists are laid out as the padding lays them out: a
    graph scores them as they are), else None."""

    X: np.ndarray
    codes: np.ndarray | None
    group: np.ndarray
    query_ids: list[Any]
    lists: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])


def _refuse_constant(name: str) -> float:
    raise RequestError(
        f"body: {name} is not JSON (give null for a missing value, where the model reads missing values)",
        field="body",
        status=400,
    )


def _load(body: bytes) -> Any:
    """The JSON document of ``body``: orjson (about 10x the standard library on a list of 100 x 136
    numbers, the bulk of a request's time); a body orjson refuses is read again by the standard
    library, whose errors name the problem (``NaN``, nesting, a number beyond float64 -> infinity,
    refused later as beyond float32)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body, parse_constant=_refuse_constant)
    except RequestError:
        raise
    except RecursionError:
        raise RequestError("body: JSON nested too deeply", field="body", status=400) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise RequestError(f"body: not JSON ({str(exc)[:200]})", field="body", status=400) from None


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _query_ids(qid: Any, n: int) -> list[Any]:
    def ok(q: Any) -> bool:
        return type(q) is str or type(q) is int

    if ok(qid):
        return [qid] * n
    if type(qid) is not list:
        raise RequestError(
            f"qid: expected a query id (string or integer) or a list of one per row, got {_shown(qid)}",
            field="qid",
        )
    if len(qid) != n:
        raise RequestError(f"qid: expected {n} query ids (one per row), got {len(qid)}", field="qid")
    if not set(map(type, qid)) <= {str, int}:
        i = next(i for i, q in enumerate(qid) if not ok(q))
        raise RequestError(
            f"qid[{i}]: expected a string or an integer, got {_shown(qid[i])}", field=f"qid[{i}]"
        )
    return qid


def _group(ids: list[Any], limits: Limits) -> tuple[np.ndarray, list[Any]]:
    index: dict[Any, int] = {}
    group = np.fromiter((index.setdefault(q, len(index)) for q in ids), dtype=np.int64, count=len(ids))
    sizes = np.bincount(group)
    if int(sizes.max()) > limits.max_list:
        q = int(np.argmax(sizes))
        first = int(np.argmax(group == q))
        raise RequestError(
            f"qid[{first}]: query {_shown(ids[first])} has {int(sizes[q]):,} rows; at most "
            f"{limits.max_list:,} a query (the server's --max-list)",
            field=f"qid[{first}]",
            status=413,
        )
    return group, list(index)


def _numbers(values: list[list[Any]], allow_missing: bool, where: Any) -> np.ndarray:
    """float32 (N, F) of rows of JSON values, checked; ``where(i, j)`` names a cell."""
    allowed = {int, float, type(None)} if allow_missing else {int, float}
    types: set[type] = set()
    for row in values:
        types.update(map(type, row))
    if not types <= allowed:
        bad = ((i, j) for i, row in enumerate(values) for j, v in enumerate(row) if type(v) not in allowed)
        i, j = next(bad)
        v = values[i][j]
        what = "null (a missing value), but this model reads no missing values" if v is None else _shown(v)
        raise RequestError(f"{where(i, j)}: expected a number, got {what}", field=where(i, j))
    n = len(values)
    x = np.array(values, dtype=np.float64) if n else np.zeros((0, 0))
    over = np.abs(x) > FLOAT32_MAX  # also inf (1e999 parses to inf); NaN is False here
    if over.any():
        i, j = (int(k) for k in np.argwhere(over)[0])
        raise RequestError(
            f"{where(i, j)}: {values[i][j]!r} is beyond float32 (|x| <= {FLOAT32_MAX:.4g})", field=where(i, j)
        )
    return x.astype(np.float32)


def _codes(ranker: Any, columns: list[list[Any]], where: Any) -> np.ndarray:
    """int64 (N, C) codes of the categorical values (one list a column) with the model's vocabulary."""
    for j, col in enumerate(columns):
        if not set(map(type, col)) <= set(_CATEGORY):
            i = next(i for i, v in enumerate(col) if type(v) not in _CATEGORY)
            raise RequestError(
                f"{where(i, j)}: expected a category (string, integer, boolean or null), "
                f"got {_shown(col[i])}",
                field=where(i, j),
            )
    names = list(ranker.categorical_names)
    encoder = CategoricalEncoder.from_dict({"columns": names, "vocab": ranker.categorical_vocab})
    return encoder.transform(
        {c: [None if v is None else str(v) for v in col] for c, col in zip(names, columns, strict=True)}
    )


def _positional(ranker: Any, rows: list[Any]) -> tuple[np.ndarray, np.ndarray | None]:
    f, cats = ranker.n_features, ranker.categorical_names
    width = f + len(cats)
    for i, row in enumerate(rows):
        if type(row) is not list or len(row) != width:
            what = f"{f} feature values" + (
                f" then {len(cats)} categorical values ({', '.join(cats)})" if cats else ""
            )
            got = f"{len(row)} values" if type(row) is list else _shown(row)
            raise RequestError(f"rows[{i}]: expected an array of {what}, got {got}", field=f"rows[{i}]")
    numbers = rows if not cats else [row[:f] for row in rows]
    x = _numbers(numbers, ranker.allow_missing, lambda i, j: f"rows[{i}][{j}]")
    if not cats:
        return x, None
    columns = [[row[f + j] for row in rows] for j in range(len(cats))]
    return x, _codes(ranker, columns, lambda i, j: f"rows[{i}][{f + j}]")


def _by_name(ranker: Any, rows: list[Any]) -> tuple[np.ndarray, np.ndarray | None]:
    names, cats = list(ranker.feature_names), list(ranker.categorical_names)
    if not names:
        raise RequestError(
            f"rows[0]: this model records no feature names; give each row as an array of its "
            f"{ranker.n_features} feature values",
            field="rows[0]",
        )
    expected = {*names, *cats}
    for i, row in enumerate(rows):
        if type(row) is not dict:
            raise RequestError(
                f"rows[{i}]: expected an object (rows[0] is one), got {_shown(row)}", field=f"rows[{i}]"
            )
        if row.keys() != expected:
            unknown = sorted(set(row) - expected)
            if unknown:
                raise RequestError(
                    f"rows[{i}]: unknown feature(s) {unknown[:10]}; the model's features are "
                    f"{names[:20]}{' ...' if len(names) > 20 else ''}"
                    + (f", categorical {cats}" if cats else ""),
                    field=f"rows[{i}][{json.dumps(unknown[0])}]",
                )
            missing = [c for c in [*names, *cats] if c not in row]
            raise RequestError(
                f"rows[{i}]: missing feature(s) {missing[:10]} ({len(missing)} in all); "
                "every row names every feature"
                + (" (null where a value is missing)" if ranker.allow_missing else ""),
                field=f"rows[{i}][{json.dumps(missing[0])}]",
            )
    x = _numbers(
        [[row[c] for c in names] for row in rows],
        ranker.allow_missing,
        lambda i, j: f"rows[{i}][{json.dumps(names[j])}]",
    )
    if not cats:
        return x, None
    columns = [[row[c] for row in rows] for c in cats]
    return x, _codes(ranker, columns, lambda i, j: f"rows[{i}][{json.dumps(cats[j])}]")


def parse_request(body: bytes, ranker: Any, limits: Limits) -> RankRequest:
    """The checked request of a ``POST /rank`` body for ``ranker`` (an ``OnnxRanker`` or a
    ``DirectoryRanker``: its ``feature_names``, ``n_features``, ``categorical_names``,
    ``categorical_vocab``, ``allow_missing``).

    Raises:
        RequestError: see the module docstring.
    """
    doc = _load(body)
    if type(doc) is not dict:
        raise RequestError(
            f'body: expected a JSON object {{"qid": ..., "rows": [...]}}, got {_shown(doc)}', field="body"
        )
    unknown = sorted(set(doc) - set(_KEYS))
    if unknown:
        raise RequestError(f"{unknown[0]}: unknown key; a request has {', '.join(_KEYS)}", field=unknown[0])
    for key in _KEYS:
        if key not in doc:
            raise RequestError(f"{key}: missing; a request has {', '.join(_KEYS)}", field=key)
    rows = doc["rows"]
    if type(rows) is not list:
        raise RequestError(f"rows: expected a list of rows, got {_shown(rows)}", field="rows")
    if not rows:
        raise RequestError("rows: empty; give at least one row", field="rows")
    if len(rows) > limits.max_rows:
        raise RequestError(
            f"rows: {len(rows):,} rows; at most {limits.max_rows:,} a request (the server's --max-rows)",
            field="rows",
            status=413,
        )
    ids = _query_ids(doc["qid"], len(rows))
    group, query_ids = _group(ids, limits)
    x, codes = _by_name(ranker, rows) if type(rows[0]) is dict else _positional(ranker, rows)
    return RankRequest(X=x, codes=codes, group=group, query_ids=query_ids)


def rank_answer(request: RankRequest, scores: np.ndarray) -> dict[str, Any]:
    """``{"scores": [...], "rankings": [{"qid": ..., "rows": [...]}, ...]}`` (see the module docstring).

    Raises:
        RuntimeError: a score that is not finite (the model's fault, not the request's).
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.shape != (request.n_rows,) or not np.isfinite(s).all():
        raise RuntimeError("the model gave scores that are not finite (or not one a row)")
    order = order_by_score(request.group, s, request.X)  # by query, best first, ties order-free
    bounds = np.cumsum(np.bincount(request.group))[:-1]
    rankings = [
        {"qid": q, "rows": part.tolist()}
        for q, part in zip(request.query_ids, np.split(order, bounds), strict=True)
    ]
    return {"scores": s.tolist(), "rankings": rankings}
