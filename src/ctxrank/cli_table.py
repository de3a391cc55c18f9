"""Tabular data (CSV / TSV / Parquet) in ``ctxrank train``, ``predict``, ``evaluate`` and ``data-info``.

A data file whose name ends in a table extension (``.csv``, ``.csv.gz``, ``.tsv``, ``.tsv.gz``,
``.parquet``, ``.pq``) is read with :func:`ctxrank.data.table.read_table`; any other file with
``read_letor``. The column roles come from one shared option group ("tabular data": ``--query-col``,
``--label-col``, ``--categorical``, ``--numeric``, ``--docid-col``) or, for ``predict`` / ``evaluate
--model``, from the table spec saved with the model (:class:`ctxrank.data.table.TableSpec`): options
given anyway must agree with it.

Row order: ``read_table`` gathers each query's rows when a file is not sorted by query. Scores written
by ``predict`` and scores read by ``evaluate --scores`` are always in the FILE's row order; the
regrouping is undone / applied here with the ``file_rows`` map of ``read_table_with_rows``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from ctxrank.data.table import TABLE_EXTENSIONS, TableSpec

#: the option group's flags, by argparse destination
TABLE_FLAGS = {
    "query_col": "--query-col",
    "label_col": "--label-col",
    "categorical": "--categorical",
    "numeric": "--numeric",
    "docid_col": "--docid-col",
}
PURPOSES = ("train", "predict", "evaluate", "scores", "info")
EXTENSIONS_TEXT = ", ".join(TABLE_EXTENSIONS)


def _columns(text: str) -> tuple[str, ...]:
    names = tuple(c.strip() for c in text.split(","))
    if not names or any(not c for c in names):
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, got {text!r}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a column is listed twice in {text!r}")
    return names


def add_table_options(p: argparse.ArgumentParser, *, saved_spec: bool = False) -> None:
    """The "tabular data" option group. ``saved_spec``: the command can take them from a saved model."""
    note = (
        " With --model, the spec saved with the model is used; options given must agree with it."
        if saved_spec
        else ""
    )
    g = p.add_argument_group(
        "tabular data",
        description=(
            f"For data files ending in {EXTENSIONS_TEXT}: one row per (query, item), with a header. "
            "Not allowed for LETOR files." + note
        ),
    )
    g.add_argument("--query-col", metavar="COL", help="query / session id column (ids read as strings)")
    g.add_argument("--label-col", metavar="COL", help="relevance label column, e.g. a 0/1 `chosen` column")
    g.add_argument(
        "--categorical",
        type=_columns,
        metavar="A,B,...",
        help="categorical columns: integer codes fitted on the training split (0 = unseen or missing)",
    )
    g.add_argument(
        "--numeric",
        type=_columns,
        metavar="C,D,...",
        help="numeric feature columns, in this order (default: every other column, in file order)",
    )
    g.add_argument("--docid-col", metavar="COL", help="optional item id column (not a feature)")


def given_table_options(args: argparse.Namespace) -> list[str]:
    """The tabular flags given on the command line (empty for commands without the group)."""
    return [flag for dest, flag in TABLE_FLAGS.items() if getattr(args, dest, None) is not None]


def reject_table_options(args: argparse.Namespace, what: str) -> None:
    """Tabular flags given for LETOR data / a registered dataset: a clear error."""
    flags = given_table_options(args)
    if flags:
        raise ValueError(
            f"{', '.join(flags)} apply to table files ({EXTENSIONS_TEXT}); {what} is not one "
            "(LETOR / SVMlight data carry their own query ids and labels)"
        )


def _fmt(v: Any) -> str:
    if v is None:
        return "(none)"
    if isinstance(v, (tuple, list)):
        return ",".join(v) if v else "(none)"
    return str(v)


def resolve_spec(
    args: argparse.Namespace, path: str, *, purpose: str, saved: dict[str, Any] | None = None
) -> TableSpec:
    """The :class:`TableSpec` for reading ``path``.

    Args:
        purpose: ``train`` (label required; numeric default every other column), ``predict`` (label
            optional), ``evaluate`` (with a model: label required), ``scores`` (``evaluate --scores``:
            only query and label needed; numeric default none), ``info`` (``data-info``).
        saved: the model's saved table spec (``ctxrank.json["table"]``), or None.
    """
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {PURPOSES}, got {purpose!r}")
    given = {
        "query": getattr(args, "query_col", None),
        "label": getattr(args, "label_col", None),
        "categorical": getattr(args, "categorical", None),
        "numeric": getattr(args, "numeric", None),
        "docid": getattr(args, "docid_col", None),
    }
    flags = dict(zip(given, TABLE_FLAGS.values(), strict=True))
    if saved is not None:
        spec = TableSpec.from_dict(saved)
        for key, value in given.items():
            if value is None:
                continue
            want = getattr(spec, key)
            same = tuple(value) == tuple(want or ()) if key in ("categorical", "numeric") else value == want
            if not same:
                raise ValueError(
                    f"{flags[key]} {_fmt(value)} does not match the model's saved table spec "
                    f"({key} column(s): {_fmt(want)}); leave the option out to use the saved spec"
                )
        if purpose != "predict" and spec.label is None:
            raise ValueError(f"{path}: the model's table spec has no label column; cannot evaluate")
        return spec
    if given["query"] is None:
        raise ValueError(
            f"{path} is a table: give --query-col COL (the query / session id column)"
            + (" and --label-col COL (the label column)" if purpose != "predict" else "")
        )
    if given["label"] is None and purpose != "predict":
        raise ValueError(f"{path} is a table: give --label-col COL (the relevance / choice label column)")
    if purpose == "predict" and given["categorical"]:
        raise ValueError(
            "--categorical needs the encoder fitted at training time, but this model was not trained "
            "on a table (its ctxrank.json has no table spec)"
        )
    numeric = given["numeric"]
    if numeric is None and purpose == "scores":
        numeric = ()
    return TableSpec(
        query=given["query"],
        label=given["label"],
        categorical=given["categorical"] or (),
        numeric=numeric,
        docid=given["docid"],
    )


def read_table_file(
    path: str, spec: TableSpec, *, scoring: bool = False, encoder: Any = None
) -> tuple[Any, np.ndarray]:
    """``spec.read(path)`` with a hint when a text column was taken as numeric: ``(data, file_rows)``."""
    try:
        return spec.read(path, scoring=scoring, encoder=encoder)
    except ValueError as exc:
        msg = str(exc)
        if "expected a number" in msg and spec.numeric is None:
            raise ValueError(
                f"{msg} (every column that is not the query, label, docid or a --categorical column is "
                "read as numeric: list text columns with --categorical, or the features with --numeric)"
            ) from None
        raise


def to_file_order(scores: np.ndarray, file_rows: np.ndarray | None) -> np.ndarray:
    """Scores of the (regrouped) data rows -> the same scores in the file's row order."""
    if file_rows is None:
        return scores
    out = np.empty_like(scores)
    out[file_rows] = scores
    return out


def from_file_order(scores: np.ndarray, file_rows: np.ndarray | None) -> np.ndarray:
    """Scores in the file's row order -> the (regrouped) data's row order."""
    return scores if file_rows is None else scores[file_rows]


def table_meta(spec: TableSpec, train: Any, encoder: Any) -> dict[str, Any]:
    """The ``"table"`` entry of a saved model: the spec with the training numeric columns and encoder."""
    from dataclasses import replace

    return replace(
        spec, numeric=tuple(train.feature_names), encoder=encoder if spec.categorical else None
    ).to_dict()
