"""Option groups shared by several commands (declared once here) and the terminal output helpers.

Each group is an ``add_*`` function that declares the options on a parser and, where a command takes
the group as one argument, a frozen dataclass built from the parsed options (:class:`DataOptions`,
:class:`TableOptions`). Only the command modules import it (``ctxrank --help`` does not), so it
names the readers' own constants (table extensions, NULL fill rules).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from ctxrank._checks import MAX_BYTES, MAX_INT, MAX_SEED, NULL_FILL_RULES, check_null_fill, parse_int
from ctxrank._io import dumps
from ctxrank._overrides import parse_override
from ctxrank.data.registry import get_spec
from ctxrank.data.table import TABLE_EXTENSIONS

EXTENSIONS_TEXT = ", ".join(TABLE_EXTENSIONS)


# ------------------------------------------------------------------------------------------ output
def out(text: str = "") -> None:
    """One line to stdout."""
    print(text, file=sys.stdout)


def note(text: str) -> None:
    """``ctxrank: note: ...`` to stderr."""
    print(f"ctxrank: note: {text}", file=sys.stderr)


def warn(text: str) -> None:
    """``ctxrank: warning: ...`` to stderr."""
    print(f"ctxrank: warning: {text}", file=sys.stderr)


def print_json(obj: Any) -> None:
    """``obj`` as strict JSON (NaN -> null) on stdout: the one JSON writer (:func:`ctxrank._io.dumps`)."""
    out(dumps(obj))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """A plain-text table; columns in ``right`` are right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(r: list[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


def key_value_lines(rows: Sequence[tuple[str, Any]], indent: str = "") -> str:
    """``key  value`` lines with the keys padded to one width."""
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{indent}{k.ljust(width)}  {v}" for k, v in rows)


# ----------------------------------------------------------------------------------- value parsers
def _bounded(minimum: int, maximum: int, what: str) -> Any:
    """An argparse type: an integer in ``[minimum, maximum]`` (``_checks.parse_int``), else a usage error
    naming the range; ``what`` is its name in ``--help`` errors."""

    def parse(text: str) -> int:
        try:
            return parse_int("the value", text, minimum, maximum)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {what} in [{minimum:,}, {maximum:,}], got {text[:40]!r}"
            ) from None

    parse.__name__ = what.replace(" ", "_")  # argparse names the type in its own messages
    return parse


#: argparse types of integer options: every integer flag uses one of these (a test checks it), so no
#: value out of range reaches NumPy, torch, LightGBM or a file-size limit
positive_int = _bounded(1, MAX_INT, "a positive integer")
non_negative_int = _bounded(0, MAX_INT, "an integer")
seed_int = _bounded(0, MAX_SEED, "a seed")
byte_count = _bounded(1, MAX_BYTES, "a number of bytes")
INT_TYPES = (positive_int, non_negative_int, seed_int, byte_count)


def null_fill_rule(text: str) -> str | float:
    """argparse type of ``--null-fill``: ``query_min``, ``letor_min`` or a finite number (a float),
    checked by ``_checks.check_null_fill``."""
    try:
        return check_null_fill("--null-fill", text if text in NULL_FILL_RULES else float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {', '.join(NULL_FILL_RULES)} or a finite number (the value of every NULL cell), "
            f"got {text!r}"
        ) from None


def split_fractions(text: str) -> tuple[float, float, float]:
    """argparse type of ``--split-fractions``: three numbers ``TRAIN,VALID,TEST`` (checked further by
    the split)."""
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"expected three numbers TRAIN,VALID,TEST, got {text!r}")
    return values  # type: ignore[return-value]


def columns(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated distinct column names."""
    names = tuple(c.strip() for c in text.split(","))
    if not names or any(not c for c in names):
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, got {text!r}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a column is listed twice in {text!r}")
    return names


# ---------------------------------------------------------------------------- single shared flags
def add_json(p: argparse.ArgumentParser | Any, help: str = "machine-readable output") -> None:
    """``--json``."""
    p.add_argument("--json", action="store_true", help=help)


def override(text: str) -> Any:
    """argparse type of ``--set``: the typed ``(dotted key, value)`` pair (``ctxrank._overrides``)."""
    try:
        return parse_override(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--set ")) from None


def add_overrides(p: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable), parsed into ``overrides``: typed ``(key, value)`` pairs."""
    p.add_argument(
        "--set", dest="overrides", type=override, action="append", default=[], metavar="KEY=VALUE", help=help
    )


def add_data_root(p: argparse.ArgumentParser | Any, help: str, *, root_first: bool = False) -> None:
    """``--data-root DIR`` (alias ``--root``), parsed into ``data_root``."""
    flags = ("--root", "--data-root") if root_first else ("--data-root", "--root")
    p.add_argument(*flags, dest="data_root", metavar="DIR", help=help)


def add_executor_options(p: argparse.ArgumentParser, unit: str, local: str, threads: str) -> None:
    """``--executor``, ``--address``, ``--max-retries`` (:mod:`ctxrank.experiments.executors`): where
    each ``unit`` (a run, a trial) executes; ``local`` says what the default does, ``threads`` which
    key sets the CPUs of a Ray task."""
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help=f"local (default): {local}; ray: each {unit} is a Ray task with {threads} CPUs, its result "
        "recorded by this process (needs ctxrank[ray])",
    )
    p.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray cluster to join (e.g. HEAD:6379 or ray://HEAD:10001; default: RAY_ADDRESS, a cluster "
        "started on this machine, else a new local one)",
    )
    p.add_argument(
        "--max-retries",
        type=non_negative_int,
        default=2,
        metavar="N",
        help=f"Ray: retries of a {unit} whose worker process or node died (default 2)",
    )


#: what ``--threads`` means in every command
THREADS_HELP = (
    "CPU threads of the computation: PyTorch's intra-op threads and LightGBM's threads ({what}). "
    "Results can differ in the last digits between thread counts; the count is recorded"
)


def add_threads(p: argparse.ArgumentParser | Any, what: str) -> None:
    """``--threads N`` (>= 1), the one declaration of every command that computes; ``what`` says which
    setting it fills (e.g. ``train.threads``, or "default: the libraries' own")."""
    p.add_argument("--threads", type=positive_int, metavar="N", help=THREADS_HELP.format(what=what))


def add_train_files(p: argparse.ArgumentParser, *, test: bool = True) -> None:
    """The data files of a training run (``ctxrank train``, ``ctxrank tune``): ``--train --valid``,
    ``--test`` (with ``test``; tune never reads a test split), or one ``--data`` file split at random
    (``--split-fractions``, ``--group-col``: ``ctxrank.data.split``), parsed into the
    ``TrainOptions`` fields ``train_file valid_file test_file data_file split_fractions group_col``."""
    p.add_argument(
        "--train", dest="train_file", metavar="FILE", help="training file (LETOR/SVMlight or a table)"
    )
    p.add_argument("--valid", dest="valid_file", metavar="FILE", help="validation file")
    if test:
        p.add_argument(
            "--test", dest="test_file", metavar="FILE", help="test file (evaluated once at the end)"
        )
    parts = "train/valid/test" if test else "train/valid (its test part is not read)"
    p.add_argument(
        "--data",
        dest="data_file",
        metavar="FILE",
        help=f"one file (LETOR/SVMlight or a table), split at random (train.seed) by query into {parts}",
    )
    p.add_argument(
        "--split-fractions",
        type=split_fractions,
        metavar="TR,VA,TE",
        help="query (or --group-col group) fractions of the --data split (default 0.6,0.2,0.2)",
    )
    p.add_argument(
        "--group-col",
        dest="group_col",
        metavar="COL",
        help=(
            "split the --data table by this column's groups instead of by query (the decision maker: "
            "all the answers of one person go to the same split; the fractions then count groups). "
            "The query column itself is allowed: one group a situation, the default split"
        ),
    )


#: ``ctxrank.experiments.stats.CORRECTIONS`` (a test checks they agree; importing that needs SciPy)
CORRECTIONS = ("none", "holm", "bh")


def add_correction(p: argparse.ArgumentParser, what: str, default: str | None = None) -> None:
    """``--correction holm|bh|none``: the multiple-comparison correction of a family of p-values (the
    raw p is shown beside the corrected one); ``what`` says which family."""
    p.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default=default,
        help=f"correct the p-values for multiple comparisons ({what}): holm (Holm-Bonferroni, family-wise "
        "error), bh (Benjamini-Hochberg, false discovery rate) or none",
    )


def add_progress(p: argparse.ArgumentParser) -> None:
    """``--no-progress``."""
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


# ------------------------------------------------------------------------------- dataset options
@dataclass(frozen=True)
class DataOptions:
    """Where a command's data come from, besides a file: a registered dataset split, and how to read.

    ``fold`` None means fold 1, ``split`` None the command's default split.
    """

    dataset: str | None = None
    fold: int | None = None
    split: str | None = None
    variant: str | None = None
    data_root: str | None = None
    query_file: str | None = None
    no_cache: bool = False
    regroup: bool = False
    max_dense_bytes: int | None = None
    max_line_bytes: int | None = None
    null_fill: str | float | None = None  #: ``--null-fill``; None: the reader's default (query_min)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DataOptions:
        return cls(
            dataset=args.dataset,
            fold=args.fold,
            split=args.split,
            variant=args.variant,
            data_root=args.data_root,
            query_file=args.query_file,
            no_cache=args.no_cache,
            regroup=args.regroup,
            max_dense_bytes=args.max_dense_bytes,
            max_line_bytes=args.max_line_bytes,
            null_fill=args.null_fill,
        )

    def resolved_split(self, default: str) -> str:
        """The split of a registered dataset to read, one rule for every command: ``--split`` if given,
        else the test split of ``--fold`` if given, else the command's ``default``."""
        if self.split is not None:
            return self.split
        return "test" if self.fold is not None else default

    def letor_options(self, *, group_file: bool = True) -> dict[str, Any]:
        """Keyword arguments of ``read_letor`` for a data file (``group_file``: pass ``--query-file``)."""
        options: dict[str, Any] = {"cache": not self.no_cache, "regroup": self.regroup}
        for name in ("max_dense_bytes", "max_line_bytes", "null_fill"):  # None: the reader's default
            if getattr(self, name) is not None:
                options[name] = getattr(self, name)
        if group_file:
            options["query_file"] = self.query_file
        return options

    def table_options(self) -> dict[str, Any]:
        """Keyword arguments of ``read_table`` / ``read_table_file`` (``--max-dense-bytes``, when given)."""
        return {} if self.max_dense_bytes is None else {"max_dense_bytes": self.max_dense_bytes}

    def registry_options(self) -> dict[str, Any]:
        """Keyword arguments of ``load_fold`` / ``load_split`` for ``--dataset`` (``--null-fill`` is
        refused for a choice dataset: its data are a table)."""
        options: dict[str, Any] = {
            "root": self.data_root,
            "variant": self.variant,
            "cache": not self.no_cache,
        }
        if self.null_fill is not None:
            if get_spec(self.dataset).layout == "choice":
                self.reject_null_fill(f"--dataset {self.dataset} (a choice dataset)")
            options["null_fill"] = self.null_fill
        return options

    def reject_null_fill(self, what: str) -> None:
        """``--null-fill`` given for a table: a clear error (tables have no NULL token)."""
        if self.null_fill is not None:
            raise ValueError(
                f"--null-fill applies to LETOR / SVMlight files (their NULL token); {what} is a table, "
                "where a missing feature is an empty cell or NA and is read as 0"
            )

    def reject_letor_options(self, what: str) -> None:
        """The LETOR reader's options given for the table ``what``: a clear error, not ignored."""
        if self.query_file is not None:
            raise ValueError("--query-file applies to LETOR files; a table names its --query-col")
        self.reject_null_fill(what)
        given = [
            flag
            for flag, value in (
                ("--regroup", self.regroup),  # a table's rows are always gathered by query
                ("--max-line-bytes", self.max_line_bytes),
            )
            if value not in (None, False)
        ]
        if given:
            raise ValueError(
                f"{', '.join(given)} applies to LETOR / SVMlight files; {what} is a table (its rows are "
                "gathered by query whatever their order, and it has no text lines to bound)"
            )


NO_DATA = DataOptions()  #: no dataset options given (a shared immutable default)


def add_dataset_options(p: argparse.ArgumentParser, *, defaults_text: str, saved_model: bool = False) -> None:
    """``--dataset --fold --split --variant --data-root`` and ``--query-file --no-cache --regroup
    --max-dense-bytes --max-line-bytes --null-fill``. ``saved_model``: the command reads data for a
    ``--model``, whose training ``--null-fill`` is the default."""
    g = p.add_argument_group("registered dataset")
    g.add_argument("--dataset", metavar="NAME", help="a dataset of `ctxrank datasets` instead of a file")
    g.add_argument("--fold", type=non_negative_int, metavar="K", help="fold number (default 1)")
    g.add_argument(
        "--split",
        choices=("train", "valid", "vali", "test", "all"),
        help=f"which split of the fold (--fold K alone: fold K's test split; {defaults_text})",
    )
    g.add_argument(
        "--variant", metavar="V", help="feature variant (OHSUMED: QueryLevelNorm, Feature-min, ...)"
    )
    add_data_root(
        g,
        "directory holding the dataset's files "
        "(default $CTXRANK_DATA/<name>, else ~/.local/share/ctxrank/<name>)",
    )
    p.add_argument("--query-file", metavar="FILE", help="group-size file for a data file without qid:")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the binary parse cache")
    p.add_argument(
        "--regroup",
        action="store_true",
        help="gather the rows of a query that reappears after other queries (LETOR files; default: error)",
    )
    p.add_argument(
        "--max-dense-bytes",
        type=byte_count,
        metavar="N",
        help="refuse a data file whose dense matrix would exceed N bytes, before reading it: a LETOR file's "
        "lines x largest feature index x 4, a table's rows x columns x 4 (default 2 GiB)",
    )
    p.add_argument(
        "--max-line-bytes",
        type=byte_count,
        metavar="N",
        help="refuse a LETOR file with a line longer than N bytes (default 1 MiB)",
    )
    p.add_argument(
        "--null-fill",
        type=null_fill_rule,
        metavar="RULE",
        help="what a LETOR NULL cell (a missing value) becomes: query_min (the feature's minimum over the "
        "query's other items), letor_min (min(that minimum, 0): closest to LETOR 3.0's Feature-min files) or "
        "a number (docs/data.md). Default query_min"
        + ("; with --model, the rule the model was trained with" if saved_model else "")
        + ". Not for tables",
    )


# --------------------------------------------------------------------------------- table options
#: the table option group's flags, by field of :class:`TableOptions`
TABLE_FLAGS = {
    "query_col": "--query-col",
    "label_col": "--label-col",
    "categorical": "--categorical",
    "numeric": "--numeric",
    "docid_col": "--docid-col",
}


@dataclass(frozen=True)
class TableOptions:
    """The column roles of a table file (``--query-col --label-col --categorical --numeric
    --docid-col``); None = not given."""

    query_col: str | None = None
    label_col: str | None = None
    categorical: tuple[str, ...] | None = None
    numeric: tuple[str, ...] | None = None
    docid_col: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TableOptions:
        return cls(
            query_col=args.query_col,
            label_col=args.label_col,
            categorical=args.categorical,
            numeric=args.numeric,
            docid_col=args.docid_col,
        )

    def given(self) -> list[str]:
        """The flags given (not None)."""
        return [TABLE_FLAGS[f.name] for f in fields(self) if getattr(self, f.name) is not None]

    def reject(self, what: str) -> None:
        """Table flags given for LETOR data / a registered dataset: a clear error."""
        flags = self.given()
        if flags:
            raise ValueError(
                f"{', '.join(flags)} apply to table files ({EXTENSIONS_TEXT}); {what} is not one "
                "(LETOR / SVMlight data carry their own query ids and labels)"
            )


NO_COLUMNS = TableOptions()  #: no table options given (a shared immutable default)


def add_table_options(p: argparse.ArgumentParser, *, saved_spec: bool = False) -> None:
    """The "tabular data" option group. ``saved_spec``: the command can take them from a saved model."""
    note_text = (
        " With --model, the spec saved with the model is used; options given must agree with it."
        if saved_spec
        else ""
    )
    g = p.add_argument_group(
        "tabular data",
        description=(
            f"For data files ending in {EXTENSIONS_TEXT}: one row per (query, item), with a header. "
            "Not allowed for LETOR files." + note_text
        ),
    )
    g.add_argument("--query-col", metavar="COL", help="query / session id column (ids read as strings)")
    g.add_argument("--label-col", metavar="COL", help="relevance label column, e.g. a 0/1 `chosen` column")
    g.add_argument(
        "--categorical",
        type=columns,
        metavar="A,B,...",
        help="categorical columns: integer codes fitted on the training split (0 = unseen or missing)",
    )
    g.add_argument(
        "--numeric",
        type=columns,
        metavar="C,D,...",
        help="numeric feature columns, in this order (default: every other column, in file order)",
    )
    g.add_argument("--docid-col", metavar="COL", help="optional item id column (not a feature)")
