"""Where a request's data come from: one typed :class:`DataSource` for every entrance.

A source is a registered dataset (and fold or split), training files (``train_file``, ``valid_file``,
``test_file``), or one file (``data_file``: split at random by query for training, read whole for
scoring), or a directory of Parquet shards streamed for training (``train_shards``,
:mod:`ctxrank.data.stream`); each file is LETOR / SVMlight or a table (by its extension) with its
:class:`Columns`; :class:`ReadOptions` say how files are read and bounded. Errors name the options by
these field names (:class:`~ctxrank._checks.OptionError`; the command line writes their flags). Every
option is declared once, on its field (:func:`ctxrank._declare.option`): the command line builds its
flags from these declarations, the experiment runner and the API build the dataclasses directly, and all
of them load through :meth:`DataSource.load_training` (the train / valid / test splits of a training
run) or :meth:`DataSource.load` (one set of rows to score, evaluate or describe).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ctxrank._checks import OptionError, OptionText, listed
from ctxrank._declare import (
    BYTE_COUNT,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    columns_text,
    fractions_text,
    null_fill_text,
    option,
)
from ctxrank.data.letor import read_letor
from ctxrank.data.registry import get_spec, load_fold, load_split
from ctxrank.data.split import DEFAULT_FRACTIONS, group_column, split_queries
from ctxrank.data.stream import DEFAULT_READ_ROWS, DEFAULT_SHUFFLE_BUFFER, ShardStream
from ctxrank.data.table import (
    TABLE_EXTENSIONS,
    CategoricalEncoder,
    TableSpec,
    is_table_path,
    refit_categorical,
    table_columns,
)
from ctxrank.data.table_io import read_table_file, table_meta

__all__ = ["Columns", "DataSource", "ModelInputs", "ReadOptions", "TrainingData"]

#: the ``--help`` sections of the options
REGISTERED, READING, TABLES, FILES = "registered dataset", "reading data files", "tabular data", "data files"
STREAMING = "data larger than memory"
SPLITS = ("train", "valid", "vali", "test", "all")
#: what a table's columns are read for (:func:`table_spec`)
PURPOSES = ("train", "predict", "evaluate", "scores", "info")
EXTENSIONS_TEXT = ", ".join(TABLE_EXTENSIONS)


def _warn(text: str | OptionText) -> None:
    warnings.warn(str(text), stacklevel=3)


# ------------------------------------------------------------------------------------ read options
@dataclass(frozen=True)
class ReadOptions:
    """How data files are read and bounded (None: the reader's default)."""

    query_file: str | None = option(
        None, "--query-file", "group-size file for a data file without qid:", metavar="FILE", group=READING,
        path=True,
    )  # fmt: skip
    no_cache: bool = option(False, "--no-cache", "do not read or write the binary parse cache", switch=True,
                            group=READING)  # fmt: skip
    regroup: bool = option(
        False, "--regroup",
        "gather the rows of a query that reappears after other queries (LETOR files; default: error)",
        switch=True, group=READING,
    )  # fmt: skip
    max_dense_bytes: int | None = option(
        None, "--max-dense-bytes",
        "refuse a data file whose dense matrix would exceed N bytes, before reading it: a LETOR file's "
        "lines x largest feature index x 4, a table's rows x columns x 4 (default 2 GiB)",
        parse=BYTE_COUNT, metavar="N", group=READING,
    )  # fmt: skip
    max_line_bytes: int | None = option(
        None, "--max-line-bytes", "refuse a LETOR file with a line longer than N bytes (default 1 MiB)",
        parse=BYTE_COUNT, metavar="N", group=READING,
    )  # fmt: skip
    null_fill: str | float | None = option(
        None, "--null-fill",
        "what a missing feature value (a LETOR NULL cell, an empty or NA cell of a table) becomes: "
        "query_min (the feature's minimum over the query's other items), letor_min (min(that minimum, 0): "
        "closest to LETOR 3.0's Feature-min files), keep (left missing, NaN: lambdamart reads it, a neural "
        "model with --set train.missing=indicator learns a fill and an indicator) or a number "
        "(docs/data.md). Default: query_min for LETOR files, keep for tables{saved}",
        parse=null_fill_text, metavar="RULE", group=READING,
    )  # fmt: skip

    def letor_kwargs(self, *, group_file: bool = True) -> dict[str, Any]:
        """Keyword arguments of ``read_letor`` (``group_file``: pass ``query_file``)."""
        kwargs: dict[str, Any] = {"cache": not self.no_cache, "regroup": self.regroup}
        for name in ("max_dense_bytes", "max_line_bytes", "null_fill"):  # None: the reader's default
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        if group_file:
            kwargs["query_file"] = self.query_file
        return kwargs

    def table_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``read_table_file`` (``max_dense_bytes``, ``null_fill``, when given)."""
        return {
            name: getattr(self, name)
            for name in ("max_dense_bytes", "null_fill")
            if getattr(self, name) is not None  # None: the reader's default
        }

    def reject_for_table(self, what: str) -> None:
        """The LETOR reader's options given for the table ``what``: a clear error, not ignored."""
        if self.query_file is not None:
            raise OptionError("{query_file} applies to LETOR files; a table names its {query_col}")
        given = [
            name
            for name, value in (("regroup", self.regroup), ("max_line_bytes", self.max_line_bytes))
            if value not in (None, False)
        ]
        if given:
            raise OptionError(
                "{given} applies to LETOR / SVMlight files; {what} is a table (its rows are gathered by "
                "query whatever their order, and it has no text lines to bound)",
                given=listed(given),
                what=what,
            )


# ---------------------------------------------------------------------------------------- columns
@dataclass(frozen=True)
class Columns:
    """The column roles of a table file (None: not given)."""

    query_col: str | None = option(
        None, "--query-col", "query / session id column (ids read as strings)", metavar="COL", group=TABLES
    )
    label_col: str | None = option(
        None, "--label-col", "relevance label column, e.g. a 0/1 `chosen` column", metavar="COL", group=TABLES
    )
    categorical: tuple[str, ...] | None = option(
        None, "--categorical",
        "categorical columns: integer codes fitted on the training split (0 = unseen or missing)",
        parse=columns_text, metavar="A,B,...", group=TABLES,
    )  # fmt: skip
    numeric: tuple[str, ...] | None = option(
        None, "--numeric",
        "numeric feature columns, in this order (default: every other column, in file order)",
        parse=columns_text, metavar="C,D,...", group=TABLES,
    )  # fmt: skip
    docid_col: str | None = option(
        None, "--docid-col", "optional item id column (not a feature)", metavar="COL", group=TABLES
    )
    position_col: str | None = option(
        None, "--position-col",
        "an interaction log's shown-position column (1-based; not a feature; a model takes no position): "
        "each --query-col value is a session, each --label-col value its interaction (click 0/1 or graded)",
        metavar="COL", group=TABLES,
    )  # fmt: skip

    def given(self) -> list[str]:
        """The names of the options given (not None)."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None]

    def reject(self, what: str | OptionText) -> None:
        """Table options given for LETOR data / a registered dataset: a clear error."""
        names = self.given()
        if names:
            raise OptionError(
                "{names} apply to table files ({extensions}); {what} is not one (LETOR / SVMlight data carry "
                "their own query ids and labels)",
                names=listed(names),
                extensions=EXTENSIONS_TEXT,
                what=what,
            )

    def table_spec(self, path: str, *, purpose: str, saved: dict[str, Any] | None = None) -> TableSpec:
        """The :class:`~ctxrank.data.table.TableSpec` for reading the table ``path``.

        Args:
            purpose: ``train`` (label required; numeric default every other column), ``predict`` (label
                optional), ``evaluate`` (with a model: label required), ``scores`` (``evaluate
                --scores``: only query and label needed; numeric default none), ``info``.
            saved: the model's saved table spec (``ctxrank.json["table"]``), or None; columns given
                must agree with it.
        """
        if purpose not in PURPOSES:
            raise ValueError(f"purpose must be one of {PURPOSES}, got {purpose!r}")
        if saved is not None:
            spec = self._completed(TableSpec.from_dict(saved), path)
            self._check_saved(spec)
            if purpose != "predict" and spec.label is None:
                raise ValueError(f"{path}: the model's table spec has no label column; cannot evaluate")
            return spec
        if self.query_col is None:
            raise OptionError(
                "{path} is a table: give {query_col:COL} (the query / session id column)"
                + (" and {label_col:COL} (the label column)" if purpose != "predict" else ""),
                path=path,
            )
        if self.label_col is None and purpose != "predict":
            raise OptionError(
                "{path} is a table: give {label_col:COL} (the relevance / choice label column)", path=path
            )
        if purpose == "predict" and self.categorical:
            raise OptionError(
                "{categorical} needs the encoder fitted at training time, but this model was not trained "
                "on a table (its ctxrank.json has no table spec)"
            )
        numeric = () if self.numeric is None and purpose == "scores" else self.numeric
        categorical = self.categorical if self.categorical is not None else ()
        return TableSpec(
            self.query_col, self.label_col, categorical, numeric, docid=self.docid_col,
            position=self.position_col,
        )  # fmt: skip

    def _completed(self, spec: TableSpec, path: str) -> TableSpec:
        """A saved spec with the query / label column names it lacks (a model fitted through the API
        with unnamed ``qid`` / ``y``) taken from ``query_col`` / ``label_col``, and the item id column
        of a spec without one (a model trained without ``docid_col``, or fitted on a DataFrame) from
        ``docid_col``, its shown-position column likewise from ``position_col``."""
        if spec.query is None:
            if self.query_col is None:
                raise OptionError(
                    "{path}: the model was fitted through the API with query ids that had no column name, "
                    "so its saved table spec names no query column: give {query_col:COL}",
                    path=path,
                )
            spec = replace(spec, query=self.query_col)
        if spec.label is None and self.label_col is not None:
            spec = replace(spec, label=self.label_col)
        for key, given in (("docid", self.docid_col), ("position", self.position_col)):
            if getattr(spec, key) is None and given is not None:  # ids / positions are never a feature
                if given in (*(spec.numeric or ()), *spec.categorical):
                    raise OptionError(
                        "{path}: {option} {column}: the model reads column {column!r} as a feature, so it "
                        "cannot be the {what} column",
                        path=path,
                        option=listed([f"{key}_col"]),
                        column=given,
                        what="item id" if key == "docid" else "shown-position",
                    )
                spec = replace(spec, **{key: given})
        return spec

    def _check_saved(self, spec: TableSpec) -> None:
        """Columns given with a model must agree with its saved table spec."""
        for f in dataclasses.fields(self):
            value, key = getattr(self, f.name), f.name.removesuffix("_col")
            if value is None:
                continue
            want = getattr(spec, key)
            if key in ("categorical", "numeric"):
                same = tuple(value) == tuple(() if want is None else want)
            else:
                same = value == want
            if not same:
                raise OptionError(
                    "{option} {value} does not match the model's saved table spec ({key} column(s): "
                    "{want}); leave the option out to use the saved spec",
                    option=listed([f.name]),
                    value=_shown(value),
                    key=key,
                    want=_shown(want),
                )


def _shown(v: Any) -> str:
    if v is None:
        return "(none)"
    if isinstance(v, tuple | list):
        return ",".join(v) if v else "(none)"
    return str(v)


# ---------------------------------------------------------------------------------- what is loaded
@dataclass
class TrainingData:
    """The splits of a training run and what to record about them."""

    train: Any
    valid: Any
    test: Any
    what: str
    meta: dict[str, Any] = field(default_factory=dict)  # extra ctxrank.json entries: table, split
    split: dict[str, Any] | None = None  # the data_file split record
    fold: Any = None  # the registry's Fold (dataset name, fold, variant) of a registered dataset


@dataclass(frozen=True)
class ModelInputs:
    """What a saved model says about the data it reads: its feature count (a sparse LETOR file is
    widened to it), its table spec (``ctxrank.json["table"]``) and the ``null_fill`` it was trained
    with (the default rule of LETOR data read for it)."""

    n_features: int | None = None
    table: dict[str, Any] | None = None
    null_fill: str | float | None = None

    @classmethod
    def of(cls, meta: dict[str, Any], n_features: int | None) -> ModelInputs:
        """From a model's ``ctxrank.json`` (its recorded ``command`` options hold ``null_fill``)."""
        command = meta.get("command")
        options = command.get("options") if isinstance(command, dict) else None
        null_fill = options.get("null_fill") if isinstance(options, dict) else None
        return cls(n_features, meta.get("table"), null_fill)


# ------------------------------------------------------------------------------------- the source
@dataclass(frozen=True)
class DataSource:
    """Where the data come from: exactly one of ``dataset``, ``train_file`` + ``valid_file``
    (``test_file`` optional) or ``data_file``; ``columns`` for tables, ``read`` for every file."""

    dataset: str | None = option(
        None,
        "--dataset",
        "a dataset of `ctxrank datasets` instead of a file",
        metavar="NAME",
        group=REGISTERED,
    )
    fold: int | None = option(
        None, "--fold", "fold number (default 1)", parse=NON_NEGATIVE_INT, metavar="K", group=REGISTERED
    )
    split: str | None = option(
        None, "--split", "which split of the fold (--fold K alone: fold K's test split; {defaults})",
        choices=SPLITS, group=REGISTERED,
    )  # fmt: skip
    variant: str | None = option(
        None, "--variant", "feature variant (OHSUMED: QueryLevelNorm, Feature-min, ...)", metavar="V",
        group=REGISTERED,
    )  # fmt: skip
    data_root: str | None = option(
        None, "--data-root",
        "directory holding the dataset's files (default $CTXRANK_DATA/<name>, else "
        "~/.local/share/ctxrank/<name>)",
        metavar="DIR", group=REGISTERED, path=True, aliases=("--root",),
    )  # fmt: skip
    train_file: str | None = option(
        None, "--train", "training file (LETOR/SVMlight or a table)", metavar="FILE", group=FILES, path=True
    )
    valid_file: str | None = option(
        None, "--valid", "validation file", metavar="FILE", group=FILES, path=True
    )
    test_file: str | None = option(
        None, "--test", "test file (evaluated once at the end)", metavar="FILE", group=FILES, path=True
    )
    data_file: str | None = option(
        None, "--data",
        "one file (LETOR/SVMlight or a table), split at random (train.seed) by query into {parts}",
        metavar="FILE", group=FILES, path=True,
    )  # fmt: skip
    split_fractions: tuple[float, float, float] | None = option(
        None, "--split-fractions",
        "query (or --group-col group) fractions of the --data split (default 0.6,0.2,0.2)",
        parse=fractions_text, metavar="TR,VA,TE", group=FILES,
    )  # fmt: skip
    group_col: str | None = option(
        None, "--group-col",
        "split the --data table by this column's groups instead of by query (the decision maker: all the "
        "answers of one person go to the same split; the fractions then count groups). The query column "
        "itself is allowed: one group a situation, the default split. In an interaction log: the logged "
        "query id of each session (a query's sessions stay in one split; data-info counts the queries)",
        metavar="COL", group=FILES,
    )  # fmt: skip
    train_shards: str | None = option(
        None, "--train-shards",
        "stream the training queries from this directory of Parquet shards instead of reading them into "
        "memory (data larger than memory: docs/data.md); with --valid FILE [--test FILE], read in memory. "
        "Neural models only",
        metavar="DIR", group=STREAMING, path=True,
    )  # fmt: skip
    shuffle_buffer: int | None = option(
        None, "--shuffle-buffer",
        f"--train-shards: training queries held to shuffle across shards (default {DEFAULT_SHUFFLE_BUFFER}; "
        "the memory of the stream grows with it)",
        parse=POSITIVE_INT, metavar="N", group=STREAMING,
    )  # fmt: skip
    read_rows: int | None = option(
        None, "--read-rows",
        f"--train-shards: rows read from a shard at a time (default {DEFAULT_READ_ROWS:,})",
        parse=POSITIVE_INT, metavar="N", group=STREAMING,
    )  # fmt: skip
    columns: Columns = field(default_factory=Columns)
    read: ReadOptions = field(default_factory=ReadOptions)

    # ----------------------------------------------------------------------------------- checks
    def resolved_split(self, default: str) -> str:
        """The split of a registered dataset to read, one rule for every command: ``split`` if
        given, else the test split of ``fold`` if given, else the command's ``default``."""
        if self.split is not None:
            return self.split
        return "test" if self.fold is not None else default

    def _registry_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``load_fold`` / ``load_split`` (``null_fill`` is refused for a
        choice dataset: its data are a table)."""
        kwargs: dict[str, Any] = {
            "root": self.data_root,
            "variant": self.variant,
            "cache": not self.read.no_cache,
        }
        if self.read.null_fill is not None:
            table = tabular(None, self.dataset)
            if table is not None:
                raise OptionError("{null_fill}: {table} has no missing feature value to fill", table=table)
            kwargs["null_fill"] = self.read.null_fill
        return kwargs

    def _refuse_registry_options(self, what: str | OptionText) -> None:
        for name in ("fold", "variant", "split"):
            if getattr(self, name) is not None:
                raise OptionError(
                    "{option} applies to {dataset}, not to {what}", option=listed([name]), what=what
                )

    # ------------------------------------------------------------------------ training splits
    def load_training(self, seed: int, *, test: bool = True, rank: int = 0, world: int = 1) -> TrainingData:
        """The train / valid / test splits of a training run: a registered fold (``fold``, default
        1), ``train_file``/``valid_file``[/``test_file``], ``data_file`` split at random by query from
        ``seed``, or ``train_shards`` (the training split a :class:`~ctxrank.data.stream.ShardStream` of
        process ``rank`` of ``world``'s shards). ``test`` False: the test split is not read (a
        registered fold's test file) or dropped (the test part of a ``data_file`` split)."""
        streaming = {"shuffle_buffer": self.shuffle_buffer, "read_rows": self.read_rows}
        if self.train_shards is not None:
            return self._shards(test, rank, world)
        given_streaming = [k for k, v in streaming.items() if v is not None]
        if given_streaming:
            raise OptionError("{given} applies to {train_shards:DIR}", given=listed(given_streaming))
        given = (self.train_file, self.valid_file, self.test_file)
        if self.split_fractions is not None and self.data_file is None:
            raise OptionError(
                "{split_fractions} applies to {data_file:FILE} (one file split into train/valid/test)"
            )
        if self.group_col is not None and self.data_file is None:
            raise OptionError(
                "{group_col} applies to {data_file:TABLE} (one table split by group into "
                "train/valid/test); a registered choice dataset ({dataset}) is split by decision maker "
                "already"
            )
        if self.dataset is not None:
            if any(f is not None for f in given) or self.data_file is not None:
                raise OptionError(
                    "give either {dataset} or data files ({train_file}/{valid_file}/{test_file} or "
                    "{data_file}), not both"
                )
            return self._registered_fold(test)
        self._refuse_registry_options("data files")
        if self.data_file is not None:
            if any(f is not None for f in given):
                raise OptionError(
                    "give either {data_file:FILE} (split at random) or "
                    "{train_file}/{valid_file}/{test_file}, not both"
                )
            td = self._split_one_file(seed)
            return td if test else replace(td, test=None)
        if self.train_file is None or self.valid_file is None:
            raise OptionError(
                "give {dataset:NAME} [{fold:K}], {train_file:FILE} {valid_file:FILE} [{test_file:FILE}], or "
                "{data_file:FILE}"
            )
        named = [f for f in given if f is not None]
        tables = [is_table_path(f) for f in named]
        if any(tables) and not all(tables):
            raise OptionError(
                "{train_file}/{valid_file}/{test_file} must all be tables or all LETOR files, got {named}",
                named=", ".join(named),
            )
        return self._table_files() if all(tables) else self._letor_files()

    def _shards(self, test: bool, rank: int, world: int) -> TrainingData:
        """``train_shards`` streamed; ``valid_file`` / ``test_file`` read in memory (LETOR, or tables with the
        shards' feature columns)."""
        others = [
            k
            for k in ("dataset", "data_file", "train_file", "split_fractions", "group_col")
            if getattr(self, k) is not None
        ]
        if others:
            raise OptionError(
                "{train_shards} is the training split: give it without {others}", others=listed(others)
            )
        self._refuse_registry_options(listed(["train_shards"]))
        if self.valid_file is None:
            raise OptionError("{train_shards:DIR} needs {valid_file:FILE} (validation is read in memory)")
        if self.columns.categorical:
            raise OptionError("{categorical}: shards hold numeric features only (docs/data.md)")
        kwargs = {
            k: v
            for k, v in (("shuffle_buffer", self.shuffle_buffer), ("read_rows", self.read_rows))
            if v is not None
        }
        stream = ShardStream.open(
            self.train_shards, rank=rank, world=world, position=self.columns.position_col, **kwargs
        )
        test_file = self.test_file if test else None
        named = [f for f in (self.valid_file, test_file) if f is not None]
        tables = [is_table_path(f) for f in named]
        if any(tables) and not all(tables):
            raise OptionError(
                "{valid_file}/{test_file} must both be tables or both LETOR files, got {named}",
                named=", ".join(named),
            )
        meta: dict[str, Any] = {}
        if all(tables):
            spec = replace(self._training_spec(self.valid_file), numeric=stream.feature_names)
            limits = self.read.table_kwargs()
            valid = read_table_file(self.valid_file, spec, **limits)[0]
            test_data = read_table_file(test_file, spec, **limits)[0] if test_file is not None else None
            meta["table"] = table_meta(spec, stream, None)
        else:
            self.columns.reject(self.valid_file)
            other = {"n_features": stream.n_features, **self.read.letor_kwargs(group_file=False)}
            valid = read_letor(self.valid_file, **other)
            test_data = read_letor(test_file, **other) if test_file is not None else None
        for name, split in (("valid_file", valid), ("test_file", test_data)):
            if split is not None and split.n_features != stream.n_features:
                raise OptionError(
                    "{option} {source}: {n} features, but the shards have {shards}",
                    option=listed([name]),
                    source=split.source,
                    n=split.n_features,
                    shards=stream.n_features,
                )
        return TrainingData(stream, valid, test_data, f"shards {self.train_shards}", meta=meta)

    def _registered_fold(self, test: bool) -> TrainingData:
        if self.split is not None:
            raise OptionError("{split} does not apply to training (it uses the fold's train/valid/test)")
        self.columns.reject(OptionText.of("{dataset} {name}", name=self.dataset))
        fold = 1 if self.fold is None else self.fold
        kwargs = self._registry_kwargs()
        what = f"{self.dataset} fold {fold}"
        if test:
            data = load_fold(self.dataset, fold, **kwargs)
            return TrainingData(data.train, data.valid, data.test, what, fold=data)
        train, valid = (load_split(self.dataset, s, fold, **kwargs) for s in ("train", "valid"))
        return TrainingData(train, valid, None, what)

    def _letor_files(self) -> TrainingData:
        self.columns.reject(self.train_file)
        train = read_letor(self.train_file, **self.read.letor_kwargs())
        other = {"n_features": train.n_features, **self.read.letor_kwargs(group_file=False)}
        valid = read_letor(self.valid_file, **other)
        test = read_letor(self.test_file, **other) if self.test_file is not None else None
        return TrainingData(train, valid, test, f"train {self.train_file}")

    def _training_spec(self, path: str) -> TableSpec:
        self.read.reject_for_table(path)
        return self.columns.table_spec(path, purpose="train")

    def _table_files(self) -> TrainingData:
        """Training, validation and test tables: the encoder and the numeric columns come from the training
        file."""
        spec = self._training_spec(self.train_file)
        encoder = CategoricalEncoder()
        limits = self.read.table_kwargs()
        train, _ = read_table_file(self.train_file, spec, encoder=encoder, **limits)  # fits the encoder
        fitted = replace(spec, numeric=tuple(train.feature_names), encoder=encoder)
        valid, _ = read_table_file(self.valid_file, fitted, **limits)
        test = read_table_file(self.test_file, fitted, **limits)[0] if self.test_file is not None else None
        meta = {"table": table_meta(spec, train, encoder)}
        return TrainingData(train, valid, test, f"train {self.train_file}", meta=meta)

    def _split_one_file(self, seed: int) -> TrainingData:
        """``data_file``: read it, split its queries at random (``seed``), re-fit the encoder on train."""
        path = self.data_file
        fractions = DEFAULT_FRACTIONS if self.split_fractions is None else self.split_fractions
        meta: dict[str, Any] = {}
        if is_table_path(path):
            spec = self._training_spec(path)
            spec = replace(spec, group=group_column(self.group_col, spec.query))
            encoder = CategoricalEncoder()
            full, _ = read_table_file(path, spec, encoder=encoder, **self.read.table_kwargs())
            by_group, name = spec.group is not None, OptionText.of("{group_col} {name}", name=self.group_col)
            train, valid, test, record = split_queries(
                full, fractions, seed, by_group=by_group, group_name=name
            )
            if spec.categorical:  # the vocabulary of the whole file -> of the training queries only
                encoder, (train, valid, test) = refit_categorical(encoder, train, valid, test)
            meta["table"] = table_meta(spec, train, encoder)
        else:
            self.columns.reject(path)
            if self.group_col is not None:
                raise OptionError(
                    "{group_col} applies to tables; {path} is a LETOR / SVMlight file", path=path
                )
            full = read_letor(path, **self.read.letor_kwargs())
            train, valid, test, record = split_queries(full, fractions, seed)
        meta["split"] = record
        how = "random query split" if self.group_col is None else f"random split by {self.group_col}"
        return TrainingData(train, valid, test, f"{path} ({how})", meta=meta, split=record)

    def load_pooled_split(self, seed: int) -> TrainingData:
        """Every query of the registered ``dataset`` (its split ``all``: a fold's train + valid + test,
        each query once) split at random from ``seed`` into ``split_fractions``: by query, or by decision
        maker for a choice dataset (its group ids); the categorical vocabulary re-fitted on the training
        split. (A data file is split by :meth:`load_training`.)"""
        if self.dataset is None:
            raise ValueError("a pooled split is of a registered dataset (dataset = NAME)")
        fractions = DEFAULT_FRACTIONS if self.split_fractions is None else self.split_fractions
        full, _ = replace(self, split="all", fold=None, split_fractions=None).load(purpose="train")
        by_group = full.group_ids is not None
        train, valid, test, record = split_queries(full, fractions, seed, by_group=by_group)
        record["pooled"] = f"every query of {full.source}"
        if full.categorical is not None:
            encoder = CategoricalEncoder.from_dict(full.info["categorical_encoder"])
            _, (train, valid, test) = refit_categorical(encoder, train, valid, test)
        return TrainingData(train, valid, test, f"{self.dataset} (every query pooled)", split=record)

    # ------------------------------------------------------------------------------- one set of rows
    def load(
        self,
        *,
        default_split: str = "all",
        purpose: str = "info",
        model: ModelInputs | None = None,
        note: Callable[[str], None] = _warn,
    ) -> tuple[Any, np.ndarray | None]:
        """``(data, file_rows)``: the rows of ``data_file`` (read whole) or of a registered split
        (:meth:`resolved_split` with ``default_split``).

        A table is read with ``read_table_file`` (``file_rows``: each row's data row in the file), a
        LETOR file with ``read_letor`` (``file_rows`` None unless ``regroup`` moved rows).
        ``purpose`` says how a table's columns are read (:meth:`Columns.table_spec`); ``model`` (the
        saved model the rows are for) widens a sparse LETOR file to its feature count, reads a table
        with its saved spec, and makes its ``null_fill`` the default of the data read. ``note`` receives
        what the reader decided for the user (a warning by default).
        """
        training_only = [
            name
            for name in (
                "train_file", "valid_file", "test_file", "split_fractions", "train_shards", "shuffle_buffer",
                "read_rows",
            )
            if getattr(self, name) is not None
        ]  # fmt: skip
        if training_only:
            raise OptionError("{given}: training files, not rows to read here", given=listed(training_only))
        file = self.data_file
        if file is not None and self.dataset is not None:
            raise OptionError("give either a data file or {dataset}, not both")
        if file is None and self.dataset is None:
            raise OptionError("give a data file or {dataset:NAME} (see `ctxrank datasets`)")
        model = ModelInputs() if model is None else model
        source = self._with_model_null_fill(model.null_fill, note)
        if file is None:
            source.columns.reject(OptionText.of("{dataset} {name}", name=source.dataset))
            split, fold = source.resolved_split(default_split), 1 if source.fold is None else source.fold
            return load_split(source.dataset, split, fold, **source._registry_kwargs()), None
        source._refuse_registry_options("a data file")
        if is_table_path(file):
            source.read.reject_for_table(file)
            spec = source.columns.table_spec(file, purpose=purpose, saved=model.table)
            if self.group_col is not None:
                spec = replace(spec, group=group_column(self.group_col, spec.query))
            if model.table is not None and model.table.get("numeric_default") is True:
                _reject_extra_columns(file, spec)
            if model.table is not None:  # rows for a model, which takes no shown position
                spec = replace(spec, position=None)
            return read_table_file(file, spec, scoring=purpose == "predict", **source.read.table_kwargs())
        source.columns.reject(file)
        if self.group_col is not None:
            raise OptionError("{group_col} applies to tables; {file} is a LETOR / SVMlight file", file=file)
        data = read_letor(file, **source.read.letor_kwargs())
        if model.n_features is not None:
            data = _model_width(data, model.n_features, note)
        file_rows = data.info.get("file_rows")  # regroup moved rows: map scores back to the file's order
        return data, None if file_rows is None else np.asarray(file_rows, dtype=np.int64)

    def _with_model_null_fill(self, saved: str | float | None, note: Callable[[str], None]) -> DataSource:
        """This source with the model's ``null_fill`` when none is given (LETOR files and tables alike:
        the missing cells of the rows to score are handled as in training); a rule given that differs
        from the model's is used, with a note."""
        if saved is None or self.read.null_fill == saved:
            return self
        if self.read.null_fill is not None:
            given = self.read.null_fill
            note(
                OptionText.of(
                    "{null_fill} {given}: the model was trained with {null_fill} {saved}",
                    given=given,
                    saved=saved,
                )
            )
            return self
        if self.data_file is None and tabular(None, self.dataset) is not None:  # no missing cell to fill
            return self
        return replace(self, read=replace(self.read, null_fill=saved))


def tabular(file: str | None, dataset: str | None) -> str | OptionText | None:
    """What the data are when they are a table (so without LETOR's ``NULL`` token, and ``null_fill``
    does not apply): the table ``file``, or the choice ``dataset``; None for LETOR data. The one rule
    of the readers, the command line and experiment specs."""
    if file:
        return file if is_table_path(file) else None
    if dataset and get_spec(dataset).layout == "choice":
        return OptionText.of("{dataset} {name} (a choice dataset)", name=dataset)
    return None


def _reject_extra_columns(file: str, spec: TableSpec) -> None:
    """A table scored by a model whose numeric columns were every other column of its training file
    holds only the columns of the model's table spec (another column would have been a feature)."""
    if spec.numeric is None:
        return
    known = {spec.query, spec.label, spec.docid, spec.group, spec.position, *spec.categorical, *spec.numeric}
    extra = [c for c in table_columns(file) if c not in known]
    if extra:
        raise OptionError(
            "{file}: column(s) {extra} are not in the model's saved table spec (numeric: {numeric_cols}; "
            "categorical: {categorical_cols}); the model would ignore them: drop them, or train with "
            "{numeric} naming the feature columns",
            file=file,
            extra=extra[:10],
            numeric_cols=_shown(spec.numeric),
            categorical_cols=_shown(spec.categorical),
        )


def _model_width(data: Any, n_features: int, note: Callable[[str], None]) -> Any:
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
