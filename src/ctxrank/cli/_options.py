"""Command-line flags of shared options, and the terminal output helpers.

Options are declared once, on the fields of the typed requests (:mod:`ctxrank._declare`, e.g.
:class:`~ctxrank.data.sources.DataSource`); :func:`add_declared` turns the declarations into flags,
whose parsed values :func:`ctxrank._declare.from_namespace` turns back into the request. The few
flags that belong to no request (``--json``, ``--set``, ``--threads``, the executor's) are declared
here. Only the command modules import it (``ctxrank --help`` does not).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ctxrank._checks import OptionError, OptionText
from ctxrank._declare import INT_READERS, THREADS, Option, declared
from ctxrank._io import dumps
from ctxrank._overrides import SET
from ctxrank.cli import flag_text
from ctxrank.data.sources import EXTENSIONS_TEXT, TABLES, DataSource
from ctxrank.tracking import TRACK


# ------------------------------------------------------------------------------------------ output
def out(text: str = "") -> None:
    """One line to stdout."""
    print(text, file=sys.stdout)


def note(text: str | OptionText) -> None:
    """``ctxrank: note: ...`` to stderr (the options a library note names written as their flags)."""
    print(f"ctxrank: note: {flag_text(text)}", file=sys.stderr)


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
@functools.cache
def argparse_type(read: Callable[[str], Any]) -> Callable[[str], Any]:
    """The argparse type of a declared text reader (:mod:`ctxrank._declare`): its ``ValueError``
    becomes a usage error with the reader's message (one adapter per reader, so a test can tell the
    integer types apart)."""

    def parse(text: str) -> Any:
        try:
            return read(text)
        except ValueError as exc:  # an OptionError's options named by their flags
            raise argparse.ArgumentTypeError(
                flag_text(exc.text if isinstance(exc, OptionError) else str(exc))
            ) from None

    parse.__name__ = read.__name__  # argparse names the type in its own messages
    return parse


#: argparse types of integer options: every integer flag uses one of these (a test checks it), so no
#: value out of range reaches NumPy, torch, LightGBM or a file-size limit
positive_int, non_negative_int, seed_int, byte_count = (argparse_type(r) for r in INT_READERS)
INT_TYPES = (positive_int, non_negative_int, seed_int, byte_count)


# ---------------------------------------------------------------------------- single shared flags
def add_json(p: argparse.ArgumentParser | Any, help: str = "machine-readable output") -> None:
    """``--json``."""
    p.add_argument("--json", action="store_true", help=help)


def add_overrides(p: argparse.ArgumentParser, help: str) -> None:
    """:data:`SET`, parsed into ``overrides``, on a command that has no declared request."""
    p.add_argument(
        SET.flag,
        dest="overrides",
        type=argparse_type(SET.parse),
        action="append",
        default=[],
        metavar=SET.metavar,
        help=help,
    )


def add_data_root(p: argparse.ArgumentParser | Any, help: str, *, root_first: bool = False) -> None:
    """The declared ``--data-root DIR`` (alias ``--root``; ``DataSource.data_root``) with this command's
    ``help``, for the dataset commands that take no other data option."""
    opt = dict(declared(DataSource))["data_root"]
    flags = (*opt.aliases, opt.flag) if root_first else (opt.flag, *opt.aliases)
    p.add_argument(*flags, dest="data_root", metavar=opt.metavar, help=help)


def add_executor_options(
    p: argparse.ArgumentParser | Any,
    unit: str = "",
    local: str = "",
    threads: str = "",
    *,
    names: Sequence[str] = ("executor", "address", "max_retries"),
    jobs: int | None = None,
) -> None:
    """The options ``names`` of :class:`~ctxrank.experiments.executors.ExecutorOptions`: where each
    ``unit`` (a run, a trial) executes; ``local`` says what the default does, ``threads`` which key sets
    the CPUs of a Ray task, ``jobs`` the default of ``--jobs`` (it parses to None when not given). Each
    parses to its field's name."""
    from ctxrank.experiments.executors import ExecutorOptions

    words = {"unit": unit, "local": local, "threads": threads, "jobs": jobs}
    defaults = ("shard", "executor", "address", "max_retries")
    add_declared(p, ExecutorOptions, only=names, fill=words, defaults=defaults)


def add_threads(p: argparse.ArgumentParser | Any, what: str) -> None:
    """:data:`~ctxrank._declare.THREADS` (``TrainConfig.threads``' declaration) on a command that does
    not train; ``what`` says which setting it fills (e.g. ``runs.threads``, or "default: the
    libraries' own")."""
    help = THREADS.help.format(threads=what)
    p.add_argument(THREADS.flag, type=argparse_type(THREADS.parse), metavar=THREADS.metavar, help=help)


#: ``--model DIR``: a model directory saved by ``ctxrank train``, the one declaration of every command
#: that reads a saved model (predict, evaluate, export, serve). ``ctxrank train`` / ``tune``'s
#: ``--model NAME`` is another option: ``RunConfig.model``, a registry name.
MODEL_DIR = Option("--model", "a model directory saved by `ctxrank train`{what}", metavar="DIR", path=True)


def add_model_dir(p: argparse.ArgumentParser | Any, what: str = "", *, required: bool = True,
                  metavar: str = "DIR") -> None:  # fmt: skip
    """:data:`MODEL_DIR` (parsed into ``model``); ``what`` ends its help (e.g. " (instead of --scores)")."""
    help = MODEL_DIR.help.format(what=what)
    p.add_argument(MODEL_DIR.flag, dest="model", required=required, metavar=metavar, help=help)


def add_track(p: argparse.ArgumentParser | Any, what: str) -> None:
    """:data:`TRACK` (parsed into ``track``: a ``Tracking`` or None); ``what`` says what is logged."""
    help = TRACK.help.format(track=what)
    p.add_argument(
        TRACK.flag, dest="track", type=argparse_type(TRACK.parse), metavar=TRACK.metavar, help=help
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


# ---------------------------------------------------------------------------- declared options
#: what the placeholders of declared help texts say unless a command fills them
HELP_FILL = {
    "defaults": "the command's default",
    "parts": "train/valid/test",
    "saved": "",
    "threads": "train.threads",
    "set": "override a config value, e.g. --set train.lr=3e-4 --set model_params.hidden=[64] (repeatable)",
}
#: the help of the "tabular data" section
TABLES_TEXT = (
    f"For data files ending in {EXTENSIONS_TEXT}: one row per (query, item), with a header. "
    "Not allowed for LETOR files."
)
SAVED_SPEC_TEXT = " With --model, the spec saved with the model is used; options given must agree with it."


def add_declared(
    p: argparse.ArgumentParser,
    cls: type,
    *,
    skip: Sequence[str] = (),
    only: Sequence[str] | None = None,
    defaults: Sequence[str] = (),
    help: dict[str, str] | None = None,
    fill: dict[str, Any] | None = None,
    sections: dict[str, str] | None = None,
) -> None:
    """The flags of the options declared on ``cls`` and its groups (:mod:`ctxrank._declare`), but
    ``skip`` (or ``only`` those named); each parses to its field's name and type, an integer through
    the shared :data:`INT_TYPES`. An option in ``defaults`` defaults to its field's default, any other
    to None (the callee's default). ``help`` replaces an option's help text for this command, ``fill``
    fills the placeholders of the declared texts (:data:`HELP_FILL`), ``sections`` describes a
    ``--help`` section (by the options' ``group``)."""
    groups: dict[str, Any] = {}
    words = {**HELP_FILL, **(fill or {})}
    field_defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name, opt in declared(cls):
        if name in skip or (only is not None and name not in only):
            continue
        target: Any = p
        if opt.group:
            if opt.group not in groups:
                described = {TABLES: TABLES_TEXT, **(sections or {})}.get(opt.group)
                groups[opt.group] = p.add_argument_group(opt.group, description=described)
            target = groups[opt.group]
        kwargs: dict[str, Any] = {"dest": name, "help": (help or {}).get(name, opt.help).format(**words)}
        if opt.switch:
            kwargs["action"] = "store_true"
        else:
            if opt.many:
                kwargs.update(action="append", default=[])
            if opt.parse is not None:
                kwargs["type"] = _argparse_type_of(opt.parse)
            if opt.choices is not None:
                kwargs["choices"] = opt.choices
            if opt.metavar is not None:
                kwargs["metavar"] = opt.metavar
            if name in defaults:
                kwargs["default"] = field_defaults[name]
        target.add_argument(opt.flag, *opt.aliases, **kwargs)


def _argparse_type_of(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """The argparse type of a declared reader: an integer reader's shared one of :data:`INT_TYPES`
    (so every integer flag is one a test range-checks), any other wrapped by :func:`argparse_type`."""
    return INT_TYPES[INT_READERS.index(parse)] if parse in INT_READERS else argparse_type(parse)


#: the options of data read for a saved model or described (predict, evaluate, data-info): no
#: training files
SCORING_SKIP = (
    "train_file", "valid_file", "test_file", "split_fractions", "group_col", "train_shards", "shuffle_buffer",
    "read_rows",
)  # fmt: skip


def add_data_source(
    p: argparse.ArgumentParser,
    *,
    defaults: str,
    saved_model: bool = False,
    skip: Sequence[str] = (),
    data_help: str | None = None,
) -> None:
    """The options of a :class:`~ctxrank.data.sources.DataSource` but ``skip``: ``defaults`` says
    which split ``--dataset`` reads without ``--split``; ``saved_model``: the command reads data for a
    ``--model`` (its training ``--null-fill`` and table spec are the defaults); ``data_help``: what
    ``--data`` is for this command."""
    saved = "; with --model, the rule the model was trained with" if saved_model else ""
    add_declared(
        p,
        DataSource,
        skip=skip,
        help={} if data_help is None else {"data_file": data_help},
        fill={"defaults": defaults, "saved": saved},
        sections={TABLES: TABLES_TEXT + (SAVED_SPEC_TEXT if saved_model else "")},
    )
