"""The data a command names: a data FILE (LETOR / SVMlight, or a table by its extension) or a
registered dataset split (:class:`~ctxrank.cli._options.DataOptions`), read into a RankingData.

A table's column roles come from :class:`~ctxrank.cli._options.TableOptions` or, for ``predict`` /
``evaluate --model``, from the table spec saved with the model: options given anyway must agree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ctxrank.cli._options import TABLE_FLAGS, DataOptions, TableOptions, note
from ctxrank.data.letor import read_letor
from ctxrank.data.registry import get_spec, load_split
from ctxrank.data.table import TableSpec, is_table_path, table_columns
from ctxrank.data.table_io import read_table_file

PURPOSES = ("train", "predict", "evaluate", "scores", "info")
_SPEC_KEYS = {"query_col": "query", "label_col": "label", "categorical": "categorical",
              "numeric": "numeric", "docid_col": "docid"}  # fmt: skip


def _fmt(v: Any) -> str:
    if v is None:
        return "(none)"
    if isinstance(v, tuple | list):
        return ",".join(v) if v else "(none)"
    return str(v)


def _completed(spec: Any, given: TableOptions, path: str) -> Any:
    """A saved spec with the query / label column names it lacks (a model fitted through the API with
    unnamed ``qid`` / ``y``) taken from ``--query-col`` / ``--label-col``."""
    if spec.query is None:
        if given.query_col is None:
            raise ValueError(
                f"{path}: the model was fitted through the API with query ids that had no column name, so "
                "its saved table spec names no query column: give --query-col COL"
            )
        spec = dataclasses.replace(spec, query=given.query_col)
    if spec.label is None and given.label_col is not None:
        spec = dataclasses.replace(spec, label=given.label_col)
    return spec


def _check_saved(spec: Any, given: TableOptions) -> None:
    """Options given with a model must agree with its saved table spec."""
    for name, key in _SPEC_KEYS.items():
        value = getattr(given, name)
        if value is None:
            continue
        want = getattr(spec, key)
        if key in ("categorical", "numeric"):
            same = tuple(value) == tuple(() if want is None else want)
        else:
            same = value == want
        if not same:
            raise ValueError(
                f"{TABLE_FLAGS[name]} {_fmt(value)} does not match the model's saved table spec "
                f"({key} column(s): {_fmt(want)}); leave the option out to use the saved spec"
            )


def resolve_spec(given: TableOptions, path: str, *, purpose: str, saved: dict[str, Any] | None = None):
    """The :class:`~ctxrank.data.table.TableSpec` for reading the table ``path``.

    Args:
        purpose: ``train`` (label required; numeric default every other column), ``predict`` (label
            optional), ``evaluate`` (with a model: label required), ``scores`` (``evaluate --scores``:
            only query and label needed; numeric default none), ``info`` (``data-info``).
        saved: the model's saved table spec (``ctxrank.json["table"]``), or None.
    """
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {PURPOSES}, got {purpose!r}")
    if saved is not None:
        spec = _completed(TableSpec.from_dict(saved), given, path)
        _check_saved(spec, given)
        if purpose != "predict" and spec.label is None:
            raise ValueError(f"{path}: the model's table spec has no label column; cannot evaluate")
        return spec
    if given.query_col is None:
        raise ValueError(
            f"{path} is a table: give --query-col COL (the query / session id column)"
            + (" and --label-col COL (the label column)" if purpose != "predict" else "")
        )
    if given.label_col is None and purpose != "predict":
        raise ValueError(f"{path} is a table: give --label-col COL (the relevance / choice label column)")
    if purpose == "predict" and given.categorical:
        raise ValueError(
            "--categorical needs the encoder fitted at training time, but this model was not trained "
            "on a table (its ctxrank.json has no table spec)"
        )
    numeric = given.numeric
    if numeric is None and purpose == "scores":
        numeric = ()
    return TableSpec(
        query=given.query_col,
        label=given.label_col,
        categorical=given.categorical if given.categorical is not None else (),
        numeric=numeric,
        docid=given.docid_col,
    )


def load_data_rows(
    file: str | None,
    source: DataOptions,
    table: TableOptions,
    *,
    default_split: str = "all",
    n_features: int | None = None,
    purpose: str = "info",
    saved_table: dict[str, Any] | None = None,
    saved_null_fill: str | float | None = None,
) -> tuple[Any, Any]:
    """``(data, file_rows)``: the RankingData named by ``file`` or by ``source.dataset``.

    A table file is read with ``read_table`` (``file_rows``: each row's data row in the file, see
    :mod:`ctxrank.data.table_io`), any other file with ``read_letor`` (``file_rows`` None: file order).
    ``n_features`` (a saved model's feature count) pads a sparse LETOR file whose last features are
    absent. ``purpose`` and ``saved_table`` decide how a table's columns are read (:func:`resolve_spec`);
    ``saved_null_fill`` (a saved model's ``--null-fill``, :func:`model_null_fill`) is the default rule
    of LETOR data.
    """
    if file is not None and source.dataset is not None:
        raise ValueError("give either a data file or --dataset, not both")
    if file is None and source.dataset is None:
        raise ValueError("give a data file or --dataset NAME (see `ctxrank datasets`)")
    source = _with_saved_null_fill(file, source, saved_null_fill)
    if file is None:
        return _load_registered(source, table, default_split), None
    for opt in ("fold", "split", "variant"):
        if getattr(source, opt) is not None:
            raise ValueError(f"--{opt} applies to --dataset, not to a data file")

    if is_table_path(file):
        source.reject_letor_options(file)
        spec = resolve_spec(table, file, purpose=purpose, saved=saved_table)
        if saved_table is not None and saved_table.get("numeric_default") is True:
            _reject_extra_columns(file, spec)
        return read_table_file(file, spec, scoring=purpose == "predict", **source.table_options())

    table.reject(file)
    data = read_letor(file, **source.letor_options())
    data = data if n_features is None else _model_width(data, n_features)
    file_rows = data.info.get("file_rows")  # --regroup moved rows: map scores back to the file's order
    if file_rows is None:
        return data, None

    return data, np.asarray(file_rows, dtype=np.int64)


def model_null_fill(meta: dict[str, Any]) -> str | float | None:
    """The ``--null-fill`` a saved model was trained with (``ctxrank.json``'s recorded ``command``
    options), or None (not given, or a model not saved by ``ctxrank train``)."""
    command = meta.get("command")
    options = command.get("options") if isinstance(command, dict) else None
    return options.get("null_fill") if isinstance(options, dict) else None


def _with_saved_null_fill(file: str | None, source: DataOptions, saved: str | float | None) -> DataOptions:
    """``source`` with the model's ``--null-fill`` when none is given and the data are LETOR (a table
    has no NULL token); a rule given that differs from the model's is used, with a note."""
    if saved is None or source.null_fill == saved:
        return source
    if source.null_fill is not None:
        note(f"--null-fill {source.null_fill}: the model was trained with --null-fill {saved}")
        return source
    if file is not None:
        if is_table_path(file):
            return source
    elif source.dataset is not None:
        if get_spec(source.dataset).layout == "choice":
            return source
    return dataclasses.replace(source, null_fill=saved)


def _reject_extra_columns(file: str, spec: Any) -> None:
    """A table scored by a model whose numeric columns were every other column of its training file
    holds only the columns of the model's table spec (another column would have been a feature)."""
    if spec.numeric is None:
        return
    known = {spec.query, spec.label, spec.docid, *spec.categorical, *spec.numeric}
    extra = [c for c in table_columns(file) if c not in known]
    if extra:
        raise ValueError(
            f"{file}: column(s) {extra[:10]} are not in the model's saved table spec (numeric: "
            f"{_fmt(spec.numeric)}; categorical: {_fmt(spec.categorical)}); the model would ignore them: "
            "drop them, or train with --numeric naming the feature columns"
        )


def _model_width(data: Any, n_features: int) -> Any:
    """A LETOR file read for a model of ``n_features`` features: a dense file (most rows list every
    feature 1..F, as LETOR files do) must have exactly the model's F; a sparse file whose largest index
    is below F is widened with zeros, with a note saying how many features are read as 0."""
    have = data.n_features
    if have > n_features:
        raise ValueError(
            f"{data.source}: lists feature index {have} but the model was trained on {n_features} features"
        )
    if have == n_features:
        return data
    full = data.info.get("rows_listing_all")
    if full is not None and have > 0 and 2 * full >= data.n_items:
        raise ValueError(
            f"{data.source}: every row lists {have} features but the model was trained on {n_features}: "
            "this file does not have the model's feature layout (another dataset?)"
        )
    note(
        f"{data.source}: its largest feature index is {have} but the model reads {n_features} features: "
        f"features {have + 1}..{n_features} ({n_features - have}) are absent and read as 0"
    )
    features = np.zeros((data.n_items, n_features), dtype=np.float32)
    features[:, :have] = data.features
    names = tuple(data.feature_names) + tuple(f"f{i}" for i in range(have + 1, n_features + 1))
    return dataclasses.replace(data, features=features, feature_names=names)


def _load_registered(source: DataOptions, table: TableOptions, default_split: str) -> Any:
    table.reject(f"--dataset {source.dataset}")
    return load_split(
        source.dataset,
        source.resolved_split(default_split),
        1 if source.fold is None else source.fold,
        **source.registry_options(),
    )
