"""The splits ``ctxrank train`` reads: a registered dataset fold, train/valid/test files (LETOR or
tables), or one file split at random by query."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ctxrank.cli._options import DataOptions, TableOptions
from ctxrank.cli._source import resolve_spec
from ctxrank.data.letor import read_letor
from ctxrank.data.registry import load_fold
from ctxrank.data.split import DEFAULT_FRACTIONS, group_column, split_queries
from ctxrank.data.table import CategoricalEncoder, is_table_path, refit_categorical
from ctxrank.data.table_io import read_table_file, table_meta


@dataclass
class TrainingData:
    """The splits ``ctxrank train`` uses and what to record about them."""

    train: Any
    valid: Any
    test: Any
    what: str
    meta: dict[str, Any] = field(default_factory=dict)  # extra ctxrank.json entries: table, split
    split: dict[str, Any] | None = None  # the --data split record


@dataclass(frozen=True)
class TrainFiles:
    """``--train/--valid/--test`` files or one ``--data`` file with its ``--split-fractions``."""

    train: str | None = None
    valid: str | None = None
    test: str | None = None
    data: str | None = None
    fractions: tuple[float, float, float] | None = None
    group_col: str | None = None  # --group-col: split --data by this column's groups (decision makers)


def training_data(files: TrainFiles, source: DataOptions, columns: TableOptions, seed: int) -> TrainingData:
    """The splits from --dataset/--fold, --train/--valid/--test or --data (split by query at random)."""
    given = (files.train, files.valid, files.test)
    if files.fractions is not None and files.data is None:
        raise ValueError("--split-fractions applies to --data FILE (one file split into train/valid/test)")
    if files.group_col is not None and files.data is None:
        raise ValueError(
            "--group-col applies to --data TABLE (one table split by group into train/valid/test); "
            "a registered choice dataset (--dataset) is split by decision maker already"
        )
    if source.dataset is not None:
        if any(f is not None for f in given) or files.data is not None:
            raise ValueError(
                "give either --dataset or data files (--train/--valid/--test or --data), not both"
            )
        return _registered_fold(source, columns)
    for opt in ("fold", "variant", "split"):
        if getattr(source, opt) is not None:
            raise ValueError(f"--{opt} applies to --dataset, not to data files")
    if files.data is not None:
        if any(f is not None for f in given):
            raise ValueError("give either --data FILE (split at random) or --train/--valid/--test, not both")
        return _split_one_file(files, source, columns, seed)
    if files.train is None or files.valid is None:
        raise ValueError(
            "give --dataset NAME [--fold K], --train FILE --valid FILE [--test FILE], or --data FILE"
        )

    named = [f for f in given if f is not None]
    tables = [is_table_path(f) for f in named]
    if any(tables) and not all(tables):
        raise ValueError(
            f"--train/--valid/--test must all be tables or all LETOR files, got {', '.join(named)}"
        )
    if all(tables):
        return _read_table_files(files, source, columns)
    return _read_letor_files(files, source, columns)


def _registered_fold(source: DataOptions, columns: TableOptions) -> TrainingData:
    if source.split is not None:
        raise ValueError("--split does not apply to train (it uses the fold's train/valid/test)")
    columns.reject(f"--dataset {source.dataset}")
    fold = 1 if source.fold is None else source.fold
    data = load_fold(source.dataset, fold, **source.registry_options())
    return TrainingData(data.train, data.valid, data.test, f"{source.dataset} fold {fold}")


def _read_letor_files(files: TrainFiles, source: DataOptions, columns: TableOptions) -> TrainingData:
    columns.reject(files.train)
    train = read_letor(files.train, **source.letor_options())
    other = {"n_features": train.n_features, **source.letor_options(group_file=False)}
    valid = read_letor(files.valid, **other)
    test = read_letor(files.test, **other) if files.test is not None else None
    return TrainingData(train, valid, test, f"train {files.train}")


def _table_spec(source: DataOptions, columns: TableOptions, path: str):
    source.reject_letor_options(path)
    return resolve_spec(columns, path, purpose="train")


def _read_table_files(files: TrainFiles, source: DataOptions, columns: TableOptions) -> TrainingData:
    """--train/--valid/--test tables: the encoder and the numeric columns come from the training file."""
    spec = _table_spec(source, columns, files.train)
    encoder = CategoricalEncoder()
    limits = source.table_options()
    train, _ = read_table_file(files.train, spec, encoder=encoder, **limits)  # fits the encoder in place
    fitted = replace(spec, numeric=tuple(train.feature_names), encoder=encoder)
    valid, _ = read_table_file(files.valid, fitted, **limits)
    test = read_table_file(files.test, fitted, **limits)[0] if files.test is not None else None
    meta = {"table": table_meta(spec, train, encoder)}
    return TrainingData(train, valid, test, f"train {files.train}", meta=meta)


def _split_one_file(files: TrainFiles, source: DataOptions, columns: TableOptions, seed: int) -> TrainingData:
    """--data FILE: read it, split its queries at random (train.seed), re-fit the encoder on train."""
    path = files.data
    fractions = DEFAULT_FRACTIONS if files.fractions is None else files.fractions
    meta: dict[str, Any] = {}
    if is_table_path(path):
        spec = _table_spec(source, columns, path)
        spec = replace(spec, group=group_column(files.group_col, spec.query))
        encoder = CategoricalEncoder()
        full, _ = read_table_file(path, spec, encoder=encoder, **source.table_options())
        by_group, name = spec.group is not None, f"--group-col {files.group_col}"
        train, valid, test, record = split_queries(full, fractions, seed, by_group=by_group, group_name=name)
        if spec.categorical:  # the vocabulary of the whole file -> of the training queries only
            encoder, (train, valid, test) = refit_categorical(encoder, train, valid, test)
        meta["table"] = table_meta(spec, train, encoder)
    else:
        columns.reject(path)
        if files.group_col is not None:
            raise ValueError(f"--group-col applies to tables; {path} is a LETOR / SVMlight file")
        full = read_letor(path, **source.letor_options())
        train, valid, test, record = split_queries(full, fractions, seed)
    meta["split"] = record
    how = "random query split" if files.group_col is None else f"random split by {files.group_col}"
    return TrainingData(train, valid, test, f"{path} ({how})", meta=meta, split=record)
