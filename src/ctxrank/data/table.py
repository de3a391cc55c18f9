"""Reader for tabular ranking data: CSV / TSV (optionally gzipped) and Parquet.

One row per (query, item): a query-id column, a label column, numeric feature columns, optional
categorical columns (strings or integers, encoded to integer codes) and an optional docid column.

Conventions:

* **Row numbers** in error messages are *data rows*, 1-based, header excluded: data row 1 is the first
  row after the header (file line 2 of a CSV without blank lines or multi-line quoted fields). A
  structural fault (a row with more or fewer fields than the header, text that is not UTF-8, an
  unclosed quote) is named by its file line too: ``t.csv:9: data row 7: 8 fields, but the header has 9``.
* **Query grouping**: tabular data is often not sorted by query, so by default each query's rows are
  gathered (stably, queries in order of first appearance, rows in file order within a query). With
  ``regroup=False`` a query id that reappears after other queries is an error naming both rows.
  ``info["regrouped"]`` is 1 when rows were moved, else 0.
* **Missing values**: in CSV the usual NA spellings (empty cell, ``NA``, ``NaN``, ``null``, ``None``,
  ``N/A``, ...) mark a missing value in numeric and label columns; in query, docid and categorical
  columns only an empty cell is missing (so a category literally called ``"NA"`` survives). A missing
  numeric feature follows ``null_fill``, the rule of LETOR's ``NULL`` cells (``ctxrank.data.letor``):
  ``"keep"`` (the default for tables) leaves it missing (NaN) for the model to read under
  ``train.missing`` (LambdaMART reads it, a neural model with ``"indicator"`` learns a fill and an
  indicator, others refuse it naming the fix); ``"query_min"``, ``"letor_min"`` or a number fill it.
  ``info["missing"]`` counts the kept cells, ``info["null_filled"]`` the filled ones,
  ``info["missing_columns"]`` the columns with a missing cell. A missing label or query id is an
  error. A missing categorical value gets code 0, as does a category not in the encoder's vocabulary.
* **Categorical encoding** (:class:`CategoricalEncoder`): fitted on the training file only; code 0 is
  reserved for unknown / missing, known categories get 1..K in sorted (string) order. Pass the training
  encoder when reading validation / test files so their codes match and unseen categories map to 0.
  When one file is split into train / validation / test after reading, :func:`refit_categorical`
  re-fits the vocabulary on the training queries only and re-codes every split.
* **Interaction logs**: a ``position`` column (the 1-based position each item was shown at) is read
  into ``RankingData.shown_positions``, never as a feature; its rules (whole numbers ``1..n`` within
  each session) are :mod:`ctxrank.data.interactions`'s, and ``info["sessions_without_interaction"]``
  counts the sessions with no interaction (label > 0), which are kept.
* **File row order**: :func:`read_table_with_rows` also returns each row's 0-based data row in the
  file, so scores computed on the regrouped data can be written back in the file's row order (and a
  scores file in file order can be matched to the regrouped rows).
"""

from __future__ import annotations

import csv
import gzip
import os
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from ctxrank._checks import DEFAULT_TABLE_NULL_FILL, OptionError, check_bytes, check_null_fill
from ctxrank.data.categorical import CategoricalEncoder
from ctxrank.data.interactions import log_positions, sessions_without_interaction
from ctxrank.data.letor import missing_cells
from ctxrank.data.limits import DEFAULT_MAX_DENSE_BYTES, out_of_memory, size_text
from ctxrank.data.paths import input_kind
from ctxrank.data.ranking_data import RankingData, text_label_error

__all__ = [
    "TABLE_EXTENSIONS",
    "CategoricalEncoder",
    "TableSpec",
    "is_table_path",
    "read_table",
    "read_table_with_rows",
    "refit_categorical",
    "table_columns",
]

_F32_MAX = float(np.finfo(np.float32).max)
# pandas' default NA spellings, used for numeric and label columns
_NA_VALUES = [
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
]  # fmt: skip
_FORMATS = {".csv": ",", ".csv.gz": ",", ".tsv": "\t", ".tsv.gz": "\t", ".parquet": None, ".pq": None}
#: file name endings read by :func:`read_table` (case-insensitive)
TABLE_EXTENSIONS = tuple(_FORMATS)


def _format_of(path: str | os.PathLike) -> str | None:
    name = str(path).lower()
    return next((ext for ext in sorted(_FORMATS, key=len, reverse=True) if name.endswith(ext)), None)


def is_table_path(path: str | os.PathLike) -> bool:
    """True when the file name ends in a table extension (:data:`TABLE_EXTENSIONS`, any case)."""
    return _format_of(path) is not None


def table_columns(path: str | os.PathLike) -> list[str]:
    """The column names of a table file (the CSV/TSV header, or the Parquet schema), without reading rows."""
    path = Path(path)
    fmt = _format_of(path)
    if fmt is None:
        raise ValueError(f"{path}: unsupported file type; expected one of {sorted(_FORMATS)}")
    _check_table_path(path)
    sep = _FORMATS[fmt]
    if sep is None:
        try:
            return [str(c) for c in pq.read_schema(path).names if not str(c).startswith("__index_level_")]
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise ValueError(f"{path}: cannot read as Parquet ({type(exc).__name__}: {exc})") from exc
    try:
        return [str(c) for c in pd.read_csv(path, sep=sep, nrows=0).columns]
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: empty file (no header, no data rows)") from None
    except (UnicodeDecodeError, pd.errors.ParserError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read as {fmt} ({exc})") from exc


# ----------------------------------------------------------------------------------------- spec
@dataclass(frozen=True)
class TableSpec:
    """How to read a table: column roles and the fitted categorical encoder.

    A model trained on a table saves its spec (``to_dict()``, under ``"table"`` in ``ctxrank.json``) so
    new files are read with the same numeric columns, in the same order, and the same categorical codes
    (``TableSpec.from_dict(meta["table"]).read(path, scoring=True)``).

    Attributes:
        query, label, docid: column names (``label`` None: no labels; ``docid`` None: no docid column;
            ``query`` None only in the spec of a model fitted through the API with unnamed query ids,
            completed by the reader's ``--query-col`` before reading).
        categorical: categorical column names.
        numeric: numeric feature columns in order; None = every other column of the file.
        encoder: the fitted :class:`CategoricalEncoder` (None before training, or without categorical
            columns). Not compared by ``==``.
        group: the column of each query's group (decision maker, user; ``RankingData.group_ids``), an
            id and never a feature, or None. Read only for training (``--group-col``).
        position: the shown-position column of an interaction log (``RankingData.shown_positions``),
            never a feature, or None. Not read for scoring: a model takes no position.
    """

    query: str | None
    label: str | None = None
    categorical: tuple[str, ...] = ()
    numeric: tuple[str, ...] | None = None
    docid: str | None = None
    encoder: CategoricalEncoder | None = field(default=None, compare=False)
    group: str | None = None
    position: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "categorical", _names(self.categorical, "categorical"))
        if self.numeric is not None:
            object.__setattr__(self, "numeric", _names(self.numeric, "numeric"))

    def read(
        self,
        path: str | os.PathLike,
        *,
        scoring: bool = False,
        encoder: CategoricalEncoder | None = None,
        max_dense_bytes: int = DEFAULT_MAX_DENSE_BYTES,
        null_fill: str | float = DEFAULT_TABLE_NULL_FILL,
    ) -> tuple[RankingData, np.ndarray]:
        """:func:`read_table_with_rows` with this spec: ``(data, file_rows)``.

        Args:
            scoring: the file is data to be scored: the label column is not read (it may be absent
                or empty; labels are 0) and the docid column may be absent (docids None).
            encoder: overrides ``self.encoder`` (e.g. a fresh one to fit on a training file).
            max_dense_bytes: the reader's bound (:func:`read_table`).
            null_fill: what a missing numeric feature becomes (:func:`read_table`).
        """
        if self.query is None:
            raise OptionError(
                "{path}: the model's table spec names no query column (it was fitted through the API "
                "with unnamed query ids): give {query_col:COL}",
                path=path,
            )
        label, docid, group, position = self.label, self.docid, self.group, self.position
        if scoring:
            label = position = None
            present = set(table_columns(path))
            docid = docid if docid in present else None
            group = group if group in present else None
        enc = encoder if encoder is not None else self.encoder
        return read_table_with_rows(
            path,
            query=self.query,
            label=label,
            categorical=self.categorical,
            numeric=self.numeric,
            encoder=enc if self.categorical else None,
            docid=docid,
            group=group,
            position=position,
            max_dense_bytes=max_dense_bytes,
            null_fill=null_fill,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``{"query", "label", "docid", "numeric", "categorical", "encoder"}``."""
        return {
            "query": self.query,
            "label": self.label,
            "docid": self.docid,
            "numeric": None if self.numeric is None else list(self.numeric),
            "categorical": list(self.categorical),
            "encoder": None if self.encoder is None else self.encoder.to_dict(),
            **({"group": self.group} if self.group is not None else {}),
            **({"position": self.position} if self.position is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TableSpec:
        if not isinstance(d, Mapping) or "query" not in d or not isinstance(d["query"], str | None):
            raise ValueError(f"a table spec needs a 'query' column name (or null), got {d!r}")
        enc = d.get("encoder")
        return cls(
            query=d["query"],
            label=d.get("label"),
            categorical=tuple(d.get("categorical") or ()),
            numeric=None if d.get("numeric") is None else tuple(d["numeric"]),
            docid=d.get("docid"),
            encoder=None if enc is None else CategoricalEncoder.from_dict(enc),
            group=d.get("group"),
            position=d.get("position"),
        )


# -------------------------------------------------------------------------------------- reader
def read_table(
    path: str | os.PathLike,
    *,
    query: str,
    label: str | None,
    categorical: Sequence[str] = (),
    numeric: Sequence[str] | None = None,
    encoder: CategoricalEncoder | None = None,
    docid: str | None = None,
    regroup: bool = True,
    null_fill: str | float = DEFAULT_TABLE_NULL_FILL,
    group: str | None = None,
    max_dense_bytes: int = DEFAULT_MAX_DENSE_BYTES,
    position: str | None = None,
) -> RankingData:
    """Read a CSV / TSV / Parquet file with one row per (query, item) into a :class:`RankingData`.

    Args:
        path: ``.csv``, ``.csv.gz``, ``.tsv``, ``.tsv.gz`` (header line required), ``.parquet`` or ``.pq``.
        query: name of the query-id column (ids kept as strings, e.g. ``"007"`` stays ``"007"`` in CSV).
        label: name of the relevance-label column (numeric). ``None``: the file has no labels (data to
            be scored); every label is 0.
        categorical: names of categorical columns, encoded with ``encoder``.
        numeric: names of the numeric feature columns, in this order; default: every column that is
            not the query, label, docid or a categorical column, in file order.
        encoder: a :class:`CategoricalEncoder`. Unfitted: it is fitted on this file (in place) and
            used. Fitted (the training encoder): applied as is, unseen categories get code 0. None: a
            fresh encoder is fitted on this file; only right for the training split (its JSON form is
            kept in ``info["categorical_encoder"]``, rebuild it with ``CategoricalEncoder.from_dict``).
        docid: optional name of a document-id column (missing ids become ``""``).
        regroup: gather each query's rows when the file is not sorted by query (default True);
            False makes a reappearing query id an error.
        null_fill: what a missing numeric feature becomes: ``"keep"`` (default: NaN, a missing value
            for the model, see ``train.missing``), ``"query_min"`` (the feature's minimum over the
            query's other items), ``"letor_min"`` (min(that minimum, 0)) or a number; as LETOR's
            ``NULL`` cells (``read_letor``).
        group: optional name of a group-id column (the decision maker of each query, e.g. a
            respondent), read as text into ``group_ids``; every row of a query must hold the same id.
        max_dense_bytes: the largest table, rows x columns (of the file, all of them) x 4 bytes, the
            reader may take on; a larger one is an error before its rows are read (Parquet: from its
            metadata; CSV / TSV: its lines counted, up to the limit, so a small gzip that expands to
            gigabytes is refused after reading that much). Default 2 GiB, as ``read_letor``'s; the
            reader's peak is several times that bound (pandas' float64 columns, Python strings for text
            cells). On the command line: ``--max-dense-bytes``.
        position: optional name of the shown-position column of an interaction log (one session per
            query, the interaction as the label), read into ``shown_positions``, never a feature:
            within each session the positions are whole numbers ``1..n`` in any row order
            (:mod:`ctxrank.data.interactions`); ``info["sessions_without_interaction"]`` counts the
            sessions whose labels are all 0 (kept).

    Returns:
        RankingData with features float32 (N, F) (``feature_names`` = numeric columns), labels float32
        (N,), query ids (str) in order of first appearance, docids, categorical int64 (N, C) codes with
        names and cardinalities (when ``categorical`` is given), and ``info`` with ``null_filled``,
        ``null_fill``, ``missing`` (kept missing cells) and ``missing_columns`` (when there are some),
        ``regrouped`` and, with categorical columns, ``categorical_unknown`` (non-missing values outside
        the vocabulary), ``categorical_missing`` and ``categorical_encoder`` (the encoder's JSON form).

    Raises:
        ValueError: unsupported extension, unreadable or empty file (no data rows), absent or repeated
            columns, a row with more or fewer fields than the header or text that is not UTF-8 (naming
            the file line), a non-numeric or non-finite value in a numeric or label column (naming the
            column and the first offending data row), a missing label or query id (naming the row), a
            reappearing query id with ``regroup=False``, an encoder fitted on other columns, a table
            above ``max_dense_bytes``.
        MemoryError: the table, within ``max_dense_bytes``, does not fit in the memory left; the message
            names the file, the array and its size, and how to refuse such a table instead.
    """
    return read_table_with_rows(
        path,
        query=query,
        label=label,
        categorical=categorical,
        numeric=numeric,
        encoder=encoder,
        docid=docid,
        regroup=regroup,
        null_fill=null_fill,
        group=group,
        max_dense_bytes=max_dense_bytes,
        position=position,
    )[0]


def read_table_with_rows(
    path: str | os.PathLike,
    *,
    query: str,
    label: str | None,
    categorical: Sequence[str] = (),
    numeric: Sequence[str] | None = None,
    encoder: CategoricalEncoder | None = None,
    docid: str | None = None,
    regroup: bool = True,
    null_fill: str | float = DEFAULT_TABLE_NULL_FILL,
    group: str | None = None,
    max_dense_bytes: int = DEFAULT_MAX_DENSE_BYTES,
    position: str | None = None,
) -> tuple[RankingData, np.ndarray]:
    """:func:`read_table`, plus where each row came from.

    Returns:
        ``(data, file_rows)``: ``file_rows`` int64 (N,) is the 0-based data row of the file (header
        excluded) of each row of ``data``; the identity unless the rows were regrouped. Scores
        ``s`` (N,) computed on ``data`` are in file order as ``out[file_rows] = s``; scores ``t`` (N,)
        in file order are in ``data``'s order as ``t[file_rows]``.
    """
    path = Path(path)
    name = str(path)
    fmt = _table_format(path)
    categorical = _names(categorical, "categorical")
    if numeric is not None:
        numeric = _names(numeric, "numeric")
    null_fill = check_null_fill("null_fill", null_fill)
    if encoder is not None and not isinstance(encoder, CategoricalEncoder):
        raise TypeError(f"encoder must be a CategoricalEncoder, got {type(encoder).__name__}")
    check_bytes("max_dense_bytes", max_dense_bytes)
    special = _special_columns(query, label, categorical, docid, numeric, group, position)
    ids = [c for c in (docid, group) if c is not None]
    shape: dict[str, int] = {}  # rows and columns, once counted
    try:
        df = _read_frame(path, fmt, [query, *categorical, *ids], max_dense_bytes, shape)
        numeric = _feature_columns(df, name, special, numeric)
        q_str = _query_ids(df, query, name)
        labels = _labels(df, label, name)
        features = _numeric_features(df, numeric, name)
        info: dict[str, Any] = {}
        codes, cat_names, cards = _categorical_codes(df, categorical, encoder, info)
        docids = None
        if docid is not None:
            d = df[docid]
            docids = np.where(d.isna().to_numpy(), "", d.astype(str).to_numpy(dtype=object)).astype(str)

        uniques, offsets, order = _group_by_query(q_str, regroup, name)
        info["regrouped"] = int(order is not None)
        if order is not None:
            features, labels = features[order], labels[order]
            codes = None if codes is None else codes[order]
            docids = None if docids is None else docids[order]
        info.update(missing_cells(features, offsets, null_fill))
        file_rows = order.astype(np.int64) if order is not None else np.arange(len(df), dtype=np.int64)
        group_ids = None if group is None else _group_ids(df[group], file_rows, offsets, name, group)
        shown = None
        if position is not None:
            values = _numeric(df[position], position, name)[0][file_rows]
            shown = log_positions(
                values, offsets, uniques, file_rows, name, lambda row: f"data row {row + 1}", position
            )
            info["sessions_without_interaction"] = sessions_without_interaction(labels, offsets)
        data = RankingData(
            features=np.ascontiguousarray(features),
            labels=labels.astype(np.float32),
            query_ids=np.asarray(uniques, dtype=object).astype(str),
            query_offsets=offsets,
            docids=docids,
            categorical=codes,
            feature_names=tuple(numeric),
            categorical_names=cat_names,
            categorical_cardinalities=cards,
            source=name,
            info=info,
            group_ids=group_ids,
            shown_positions=shown,
        )
        return data, file_rows
    except MemoryError as exc:
        cells = "the table is rows x columns x 4 bytes"
        if shape:
            size = size_text(shape["rows"] * shape["columns"] * 4)
            cells = f"the table is {shape['rows']:,} rows x {shape['columns']} columns x 4 bytes = {size}"
        raise out_of_memory(name, exc, cells, max_dense_bytes, "read_table") from None


def _group_ids(
    column: pd.Series, file_rows: np.ndarray, offsets: np.ndarray, name: str, col: str
) -> np.ndarray:
    """str (Q,) the group id of each query; every row of a query must hold the same, non-missing one."""
    missing = column.isna().to_numpy()
    if missing.any():
        raise ValueError(
            f"{name}: data row {int(np.argmax(missing)) + 1}: missing group id in column {col!r}"
        )
    values = column.astype(str).to_numpy(dtype=object)[file_rows]
    first = values[offsets[:-1]]
    differs = values != np.repeat(first, np.diff(offsets))
    if differs.any():
        i = int(file_rows[np.argmax(differs)])
        raise ValueError(
            f"{name}: data row {i + 1}: group id {values[np.argmax(differs)]!s} differs from the one of "
            f"the first row of its query ({col!r} must be constant within a query)"
        )
    return first.astype(str)


def _table_format(path: Path) -> str:
    """The table format of ``path`` (a key of ``_FORMATS``); an error for another type or no file."""
    fmt = _format_of(path)
    if fmt is None:
        raise ValueError(f"{path}: unsupported file type; expected one of {sorted(_FORMATS)}")
    _check_table_path(path)
    return fmt


def _check_table_path(path: Path) -> None:
    """A table is a regular file: missing (with near names), a FIFO, a device, ... are errors."""
    why = " (it is read more than once): write it to a file first; LETOR / SVMlight text can come from a pipe"
    input_kind(path, "table", why=why)


def _special_columns(
    query: str,
    label: str | None,
    categorical: Sequence[str],
    docid: str | None,
    numeric: Sequence[str] | None,
    group: str | None = None,
    position: str | None = None,
) -> list[str]:
    """The query, label, categorical, docid, group and position columns: distinct, and none of them
    numeric."""
    special = [query, *([label] if label is not None else []), *categorical] + [
        c for c in (docid, group, position) if c is not None
    ]
    if len(set(special)) != len(special):
        raise ValueError(
            f"query, label, docid, group, position and categorical columns must be distinct, got {special}"
        )
    if numeric is not None:
        clash = sorted(set(numeric) & set(special))
        if clash:
            raise ValueError(
                f"numeric columns {clash} are also the query, label, docid, position or categorical column"
            )
    return special


def _feature_columns(
    df: pd.DataFrame, name: str, special: list[str], numeric: Sequence[str] | None
) -> tuple[str, ...]:
    """Checks that the named columns exist (once each) and the file has rows; returns the numeric
    feature columns (by default every column that is not ``special``)."""
    available = [str(c) for c in df.columns]
    wanted = special + (list(numeric) if numeric is not None else [])
    absent = [c for c in wanted if c not in available]
    if absent:
        raise ValueError(f"{name}: no column(s) {absent}; the file has columns {_short(available)}")
    if len(set(available)) != len(available):
        raise ValueError(f"{name}: repeated column names in the header")
    if numeric is None:
        numeric = tuple(c for c in available if c not in set(special))
    if len(df) == 0:
        raise ValueError(f"{name}: empty file (no data rows)")
    return tuple(numeric)


def _query_ids(df: pd.DataFrame, query: str, name: str) -> np.ndarray:
    """The query id of each row, as strings (object (N,)); a missing one is an error."""
    q_raw = df[query]
    q_missing = q_raw.isna().to_numpy()
    if q_missing.any():
        raise ValueError(
            f"{name}: data row {int(np.argmax(q_missing)) + 1}: missing query id in column {query!r}"
        )
    return q_raw.astype(str).to_numpy(dtype=object)


def _labels(df: pd.DataFrame, label: str | None, name: str) -> np.ndarray:
    """float32 (N,) labels (0 without a label column); a missing one is an error."""
    if label is None:
        return np.zeros(len(df), dtype=np.float32)
    column = df[label]
    if not (pd.api.types.is_numeric_dtype(column.dtype) or pd.api.types.is_bool_dtype(column.dtype)):
        cells = column.astype(object)
        text = (pd.to_numeric(cells, errors="coerce").isna() & cells.notna()).to_numpy()
        if text.any():
            where = f"{name}: data row {int(np.argmax(text)) + 1}: label column {label!r}"
            how = "replace {what} by {to} in the file: {mapping}"
            raise text_label_error(where, cells[text].astype(str).unique(), how)
        column = cells
    labels, missing = _numeric(column, label, name)
    if missing.any():
        raise ValueError(f"{name}: data row {int(np.argmax(missing)) + 1}: missing label in column {label!r}")
    return labels


def _numeric_features(df: pd.DataFrame, numeric: Sequence[str], name: str) -> np.ndarray:
    """float32 (N, F) features, NaN where a value is missing."""
    features = np.empty((len(df), len(numeric)), dtype=np.float32)
    for j, col in enumerate(numeric):
        features[:, j] = _numeric(df[col], col, name)[0]
    return features


def _categorical_codes(
    df: pd.DataFrame, categorical: Sequence[str], encoder: CategoricalEncoder | None, info: dict[str, Any]
) -> tuple[np.ndarray | None, tuple[str, ...], tuple[int, ...]]:
    """int64 (N, C) codes (None without categorical columns), column names, cardinalities; fits a
    new encoder or checks the given one, and records the counts and the encoder in ``info``."""
    if not categorical:
        if encoder is not None and encoder.is_fitted:
            raise ValueError(f"an encoder fitted on {list(encoder.columns_)} was given but categorical=()")  # type: ignore[arg-type]
        return None, (), ()
    if encoder is None:
        encoder = CategoricalEncoder()
    columns = {c: df[c] for c in categorical}
    if not encoder.is_fitted:
        encoder.fit(columns)
    elif set(encoder.columns_) != set(categorical):  # type: ignore[arg-type]
        raise ValueError(
            f"the encoder was fitted on categorical columns {list(encoder.columns_)}, "  # type: ignore[arg-type]
            f"got {list(categorical)}"
        )
    codes, unknown, n_missing = encoder._encode(columns)
    info.update(categorical_unknown=unknown, categorical_missing=n_missing)
    info["categorical_encoder"] = encoder.to_dict()
    return codes, tuple(encoder.columns_), encoder.cardinalities_  # type: ignore[arg-type]


def _group_by_query(q_str: np.ndarray, regroup: bool, name: str) -> tuple[Any, np.ndarray, np.ndarray | None]:
    """Queries in order of first appearance: ``(query ids, offsets int64 (Q + 1,), order)``, where
    ``order`` (N,) gathers each query's rows (stably), or is None when they are together already."""
    qcode, uniques = pd.factorize(q_str)
    qcode = qcode.astype(np.int64)
    order = None
    if np.any(qcode[1:] < qcode[:-1]):
        if not regroup:
            again = int(np.flatnonzero(qcode[1:] < qcode[:-1])[0]) + 1
            first = int(np.argmax(qcode == qcode[again]))
            raise ValueError(
                f"{name}: data row {again + 1}: query id {q_str[again][:40]!s} reappears after other queries "
                f"(first seen at data row {first + 1}); pass regroup=True to gather its rows"
            )
        order = np.argsort(qcode, kind="stable")
    sizes = np.bincount(qcode, minlength=len(uniques))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return uniques, offsets, order


def refit_categorical(
    encoder: CategoricalEncoder, train: RankingData, *others: RankingData
) -> tuple[CategoricalEncoder, list[RankingData]]:
    """Re-fit a categorical vocabulary on ``train`` only and re-code ``train`` and ``others``.

    For one file read with an encoder fitted on all of it and then split by query: the new encoder
    (same ``min_count``) learns only the categories of the training rows, so a category seen only in
    validation / test rows becomes code 0 there, exactly as if the splits had been separate files read
    with the training encoder. ``info["categorical_unknown"]`` / ``["categorical_missing"]`` of each
    returned split are recounted.

    Returns:
        (the new encoder, [train, *others] re-coded), in the order given.
    """
    if train.categorical is None:
        raise ValueError("refit_categorical needs data with categorical columns")
    if tuple(train.categorical_names) != tuple(encoder.columns_ or ()):
        raise ValueError(
            f"the data's categorical columns {list(train.categorical_names)} are not the encoder's "
            f"{list(encoder.columns_ or ())}"
        )
    new = CategoricalEncoder(min_count=encoder.min_count).fit(encoder.decode(train.categorical))
    out = []
    for d in (train, *others):
        if d.categorical is None or tuple(d.categorical_names) != tuple(train.categorical_names):
            raise ValueError("every split must have the training split's categorical columns")
        values = encoder.decode(d.categorical)
        codes, unknown, n_missing = new._encode(values)
        info = {**d.info, "categorical_unknown": unknown, "categorical_missing": n_missing}
        info["categorical_encoder"] = new.to_dict()
        out.append(
            replace(
                d,
                categorical=codes,
                categorical_cardinalities=new.cardinalities_,
                info=info,
            )
        )
    return new, out


def _names(cols: Sequence[str], what: str) -> tuple[str, ...]:
    if isinstance(cols, str):
        raise TypeError(f"{what} must be a sequence of column names, not a single string {cols!r}")
    out = tuple(cols)
    if len(set(out)) != len(out):
        raise ValueError(f"{what} lists a column twice: {list(out)}")
    return out


def _read_frame(
    path: Path, fmt: str, text_cols: list[str], max_dense_bytes: int, shape: dict[str, int]
) -> pd.DataFrame:
    """The file as pandas reads it, after its size is checked (and kept in ``shape``: rows, columns)."""
    name = str(path)
    sep = _FORMATS[fmt]
    if sep is None:
        shape.update(_parquet_shape(path, max_dense_bytes))
        try:
            df = pd.read_parquet(path, dtype_backend="numpy_nullable")
            for c in df.columns:  # pyarrow checks a string column's UTF-8 only when it is converted
                dtype = df[c].dtype
                if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)):
                    df[c].to_numpy(dtype=object)
            return df
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise ValueError(f"{name}: cannot read as Parquet ({type(exc).__name__}: {exc})") from exc
    try:
        header = pd.read_csv(path, sep=sep, nrows=0)
        # pandas renames a repeated name ("x", "x.1"): read the header row as written too
        written = pd.read_csv(path, sep=sep, header=None, nrows=1, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{name}: empty file (no header, no data rows)") from None
    except (UnicodeDecodeError, pd.errors.ParserError, OSError, EOFError) as exc:
        raise _csv_error(path, fmt, exc, n_fields=None) from exc
    cols = [str(c) for c in header.columns]
    names = [c for c in (written.iloc[0].tolist() if len(written) else []) if c]  # "" -> "Unnamed: i"
    if len(set(names)) != len(names):
        repeated = sorted({c for c in names if names.count(c) > 1})
        raise ValueError(f"{name}: repeated column names in the header: {_short(repeated)}")
    shape.update(_csv_shape(path, fmt, len(cols), max_dense_bytes))
    text = set(text_cols)
    na_values = {c: ([""] if c in text else _NA_VALUES) for c in cols}
    try:
        df = pd.read_csv(
            path,
            sep=sep,
            dtype={c: str for c in cols if c in text},
            keep_default_na=False,
            na_values=na_values,
        )
    except (UnicodeDecodeError, pd.errors.ParserError, OSError, EOFError) as exc:
        raise _csv_error(path, fmt, exc, n_fields=len(cols)) from exc
    # pandas reads a row with fewer fields than the header with the missing ones as NA (a truncated
    # row would load silently), a first row with more fields as an implicit index (shifting every
    # column), and drops the leading empty field of a row that follows a blank line ending in a lone CR
    # (shifting that row). Each leaves the last column NA: only then are the rows recounted with the
    # csv module (slow path).
    if cols and (not isinstance(df.index, pd.RangeIndex) or df.iloc[:, -1].isna().any()):
        na_sets = [set(na_values[c]) for c in cols]
        problem = _bad_record(path, fmt, len(cols), strict=False, frame=df, na=na_sets)
        if problem is not None:
            raise ValueError(problem)
        if not isinstance(df.index, pd.RangeIndex):
            raise ValueError(f"{name}: data rows have more fields than the header ({len(cols)})")
    return df


def _parquet_shape(path: Path, max_dense_bytes: int) -> dict[str, int]:
    """A Parquet file's rows and columns (from its metadata), within ``max_dense_bytes`` as x 4 bytes."""
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise ValueError(f"{path}: cannot read as Parquet ({type(exc).__name__}: {exc})") from exc
    need = meta.num_rows * meta.num_columns * 4
    if need > max_dense_bytes:
        raise ValueError(
            f"{path}: {meta.num_rows:,} rows x {meta.num_columns} columns x 4 bytes = {size_text(need)}, "
            f"above max_dense_bytes = {max_dense_bytes:,} ({size_text(max_dense_bytes)}); if that is "
            f"intended, raise the limit: read_table(..., max_dense_bytes={need}) or, on the command line, "
            f"--max-dense-bytes {need}"
        )
    return {"rows": meta.num_rows, "columns": meta.num_columns}


def _csv_shape(path: Path, fmt: str, n_columns: int, max_dense_bytes: int) -> dict[str, int]:
    """A CSV / TSV file's rows (its lines after the header: quoted line breaks count too) and columns,
    within ``max_dense_bytes`` as x 4 bytes: counted block by block and refused as soon as the lines pass
    what the limit allows (a gzip that expands to gigabytes is refused after reading that much). A
    damaged gzip stream ends the count (``{}``): the reader names its fault."""
    most = max_dense_bytes // (4 * max(n_columns, 1))
    lines, last = 0, b"\n"
    try:
        with gzip.open(path, "rb") if fmt.endswith(".gz") else path.open("rb") as fh:
            while block := fh.read(4 << 20):
                lines += block.count(b"\n")
                last = block[-1:]
                if lines - 1 > most:  # the header's line aside
                    raise ValueError(
                        f"{path}: more than {most:,} rows (counted so far) x {n_columns} columns x 4 bytes "
                        f"is above max_dense_bytes = {max_dense_bytes:,} ({size_text(max_dense_bytes)}); if "
                        "that is intended, raise the limit: read_table(..., max_dense_bytes=N) or, on the "
                        "command line, --max-dense-bytes N"
                    )
    except (OSError, EOFError, zlib.error):
        return {}
    return {"rows": max(lines - 1 + (last != b"\n"), 0), "columns": n_columns}


def _short(names: list[str], limit: int = 40) -> list[str]:
    """Column names cut to ``limit`` characters, at most 50 of them, for messages."""
    out = [n if len(n) <= limit else n[:limit] + "..." for n in names[:50]]
    return [*out, "..."] if len(names) > 50 else out


def _open_text(path: Path, fmt: str):
    """The CSV/TSV file as text for the csv module (gzip by extension, as pandas infers it); bytes that
    are not UTF-8 are replaced: this reading looks at the structure only."""
    if fmt.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", errors="replace", newline="")
    return path.open("r", encoding="utf-8-sig", errors="replace", newline="")


def _bad_record(
    path: Path,
    fmt: str,
    n_fields: int,
    *,
    strict: bool,
    frame: pd.DataFrame | None = None,
    na: Sequence[set] = (),
) -> str | None:
    """Error path: ``"file:line: data row N: ..."`` for the first record whose field count differs
    from the header's (blank lines skipped, as pandas does), or for a quoting error (``strict``), or,
    given pandas' ``frame`` and each column's NA spellings ``na``, for a row after a blank line that
    starts with an empty field and whose missing cells pandas placed elsewhere; None when there is
    none. Uses the csv module, one record at a time."""
    sep = _FORMATS[fmt]
    old_limit = csv.field_size_limit(1 << 30)  # a 10^6-character field is data, not an error
    try:
        with _open_text(path, fmt) as fh:
            reader = csv.reader(fh, delimiter=sep, strict=strict)
            start, data_row, header_seen, after_blank = 1, 0, False, False
            try:
                for rec in reader:
                    line, start = start, reader.line_num + 1
                    if not rec or (len(rec) == 1 and not rec[0].strip(" \t")):
                        after_blank = True
                        continue
                    suspect, after_blank = after_blank and rec[0] == "", False
                    if not header_seen:
                        header_seen = True
                        continue
                    data_row += 1
                    if n_fields and len(rec) != n_fields:
                        return (
                            f"{path}:{line}: data row {data_row}: {len(rec)} fields, "
                            f"but the header has {n_fields}"
                        )
                    if suspect and frame is not None and data_row <= len(frame):
                        read = frame.iloc[data_row - 1].isna().tolist()
                        if read != [field in na[j] for j, field in enumerate(rec)]:
                            return (
                                f"{path}:{line}: data row {data_row}: its fields came out shifted (pandas "
                                "drops the leading empty field of a row after a blank line that ends in a "
                                "lone CR); remove the blank line or end lines with LF"
                            )
            except csv.Error as exc:
                return f"{path}:{start}: data row {data_row + 1}: cannot read as {fmt} ({exc})"
    except (OSError, EOFError, UnicodeDecodeError, csv.Error):
        return None
    finally:
        csv.field_size_limit(old_limit)
    return None


def _csv_error(path: Path, fmt: str, exc: Exception, n_fields: int | None) -> ValueError:
    """A ValueError naming ``file:line`` for pandas' tokenizer and decoding errors (slow path)."""
    if isinstance(exc, UnicodeDecodeError):
        line = _first_undecodable_line(path, fmt)
        if line is not None:
            return ValueError(f"{path}:{line}: not UTF-8 text ({exc.reason})")
    elif isinstance(exc, pd.errors.ParserError):
        problem = _bad_record(path, fmt, n_fields or 0, strict=True)
        if problem is not None:
            return ValueError(problem)
        m = re.search(r"line (\d+)", str(exc))  # pandas' own count (blank lines in, quoted newlines not)
        if m:
            return ValueError(f"{path}:{m.group(1)}: cannot read as {fmt} ({str(exc).strip()})")
    return ValueError(f"{path}: cannot read as {fmt} ({str(exc).strip()})")


def _first_undecodable_line(path: Path, fmt: str) -> int | None:
    """1-based number of the first line that is not UTF-8 (the byte order mark aside), else None."""
    try:
        with gzip.open(path, "rb") if fmt.endswith(".gz") else path.open("rb") as fh:
            for line_no, raw in enumerate(fh, start=1):
                if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    return line_no
    except (OSError, EOFError):
        return None
    return None


def _numeric(s: pd.Series, col: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(float32 (N,) values, NaN where missing; bool (N,) missing) of a numeric column."""
    (shown,) = _short([col])
    dtype = s.dtype
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype):
        values = s.to_numpy(dtype=np.float64, na_value=np.nan)
    elif pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype):
        coerced = pd.to_numeric(s, errors="coerce")
        bad = (coerced.isna() & s.notna()).to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"{name}: data row {i + 1}: column {shown!r}: expected a number, got {str(s.iloc[i])[:40]!r}"
            )
        values = coerced.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        raise ValueError(f"{name}: column {shown!r} has dtype {dtype}; expected numbers")
    missing = np.isnan(values)
    bad = ~missing & ~(np.abs(values) <= _F32_MAX)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"{name}: data row {i + 1}: column {shown!r}: value {str(s.iloc[i])[:40]!r} is not a finite "
            "float32 number"
        )
    return values.astype(np.float32), missing
