"""The ``ctxrank`` command line: a thin layer over the library.

Commands (one module each group; every command is a plain function with keyword arguments, and
argparse only maps the parsed options onto that call)::

    ctxrank datasets [show NAME | download NAME]     cli/data.py: datasets, datasets_show, datasets_download
    ctxrank data-info FILE | --dataset NAME          cli/data.py: data_info
    ctxrank synth choice|letor|clicks ... --out FILE cli/data.py: synth_choice, synth_letor, synth_clicks
    ctxrank data-shards FILE... --out DIR            cli/data.py: data_shards (Parquet shards, --train-shards)
    ctxrank clicks propensity|offline LOG ...        cli/clicks.py: propensity, offline (click logs)
    ctxrank evaluate --data FILE (--scores F | --model DIR)   cli/evaluate.py: evaluate
    ctxrank compare A B                              cli/evaluate.py: compare
    ctxrank train --model NAME ... --out DIR         cli/train.py: train (TrainRequest), --resume DIR
    ctxrank predict --model PATH --data FILE -o F    cli/predict.py: predict (--shards DIR: Ray)
    ctxrank tune --model NAME ... --trials N --out DIR   cli/tune.py: tune (TrainRequest, SearchOptions)
    ctxrank experiment SPEC [--out DIR] ...          cli/experiment.py: experiment
    ctxrank report EVIDENCE [--out DIR]              cli/experiment.py: report
    ctxrank demo [--quick]                           cli/experiment.py: demo, quick_demo
    ctxrank export --model DIR --format F --out F    cli/export.py: export
    ctxrank serve --model PATH [--port N] ...        cli/serve.py: serve_model (ServeOptions)

Shared option groups and the output helpers are in :mod:`ctxrank.cli._options`. A data FILE ending in
.csv, .csv.gz, .tsv, .tsv.gz, .parquet or .pq is a table; any other file is LETOR / SVMlight.

Errors from the library (``ValueError``, ``OSError``) print as ``ctxrank: error: <message>`` (the
options an ``OptionError`` names by their field names written as their flags) and exit with status 2, as
does running out of memory (``MemoryError``, PyTorch's allocation failure, ``ENOMEM``: ``ctxrank: error:
out of memory: <what>``, whatever operation failed); ``--debug`` shows the traceback instead.
:func:`main` returns the exit status and never raises ``SystemExit``, so tests can call it in-process;
:func:`program` (the console script, ``python -m ctxrank``) owns its process and exits with it.
Ctrl-C exits with status 130 (``ctxrank: interrupted``) and SIGTERM (``kill``, ``timeout``, a
scheduler's preemption) with 143 (``ctxrank: terminated``), both after the command's cleanup: its
temporary files removed, its locks released, a running experiment's evidence written
(:func:`_sigterm_as_interrupt`).

The CLI imports a command's module only when that command runs: ``ctxrank --help`` lists the commands
from the static table :data:`COMMANDS` (name -> module, one-line help) and imports no command module,
so neither it nor ``--version`` loads NumPy, torch or pandas; ``ctxrank CMD ...`` imports only CMD's
module, which builds CMD's parser and imports at module level what CMD needs.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import importlib
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Collection, Iterator, Sequence
from typing import NamedTuple, NoReturn

from ctxrank._allocator import limit_heap_growth
from ctxrank._checks import Field, OptionError, OptionText
from ctxrank._declare import declared_keys, flag_of
from ctxrank._version import __version__

__all__ = ["COMMANDS", "Command", "build_parser", "main", "program"]


class Command(NamedTuple):
    """A command of the table: ``ctxrank.cli.<module>`` declares its parser in
    ``add_<name>_parser(sub, common)`` (``-`` of the name as ``_``), with ``help`` as its one line;
    ``extra``: the optional dependencies (``pip install 'ctxrank[EXTRA]'``) its module imports."""

    module: str
    help: str
    extra: str | None = None


#: command name -> its module and one-line help, in ``ctxrank --help`` order. ``ctxrank --help`` is
#: built from this table alone; ``ctxrank CMD ...`` imports only CMD's module (a test checks that each
#: module's parser declares the same line).
COMMANDS: dict[str, Command] = {
    "datasets": Command("data", "list known datasets; download one"),
    "data-info": Command("data", "statistics of a LETOR file, a table or a registered dataset"),
    "evaluate": Command("evaluate", "evaluate a scores file or a saved model against labelled data"),
    "train": Command("train", "train a ranker and save it"),
    "predict": Command("predict", "score a LETOR file or a table with a saved model"),
    "tune": Command("tune", "search a model's hyperparameters (Optuna)"),
    "synth": Command(
        "data", "write SYNTHETIC data (choice sessions table, LETOR file, click log) for tests and demos"
    ),
    "data-shards": Command("data", "write data files as Parquet shards to train from with --train-shards"),
    "clicks": Command(
        "clicks", "position propensities of a click log; a ranker's offline click metric from it"
    ),
    "experiment": Command(
        "experiment", "run models x folds x seeds from a TOML spec; report tables, t-tests and figures"
    ),
    "report": Command(
        "experiment", "regenerate an experiment's report from its stored evidence (no training)"
    ),
    "compare": Command("evaluate", "per-metric difference of two sets of runs with paired t-tests"),
    "export": Command("export", "write a saved neural model as a TorchScript or ONNX file for serving"),
    "serve": Command(
        "serve",
        "serve an ONNX file or a model directory over HTTP (/rank, /health, /ready, /metrics, /v2)",
        extra="serve",
    ),
    "demo": Command(
        "experiment", "the `make demo` job: a small QILCM Table 2 experiment on the embedded MQ2008"
    ),
}


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``ctxrank`` parser. Every command of :data:`COMMANDS` is listed with its one-line help; the
    full parser of each command in ``commands`` (default: every one) is added by its module, imported
    only then, and sets ``run`` (args -> status). The others are placeholders that parse nothing:
    ``build_parser(())`` is ``ctxrank --help``'s parser and imports no command module."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors"
    )
    parser = argparse.ArgumentParser(
        prog="ctxrank",
        description=(
            "ctxrank: learning to rank with listwise context models on PyTorch. "
            "Inspect LETOR data, train, tune and apply rankers, evaluate ranking scores with explicit metric "
            "conventions, run the demo."
        ),
        epilog="Run `ctxrank COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"ctxrank {__version__}")
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        if commands is None or name in commands:
            module = importlib.import_module(f"ctxrank.cli.{command.module}")
            getattr(module, f"add_{name.replace('-', '_')}_parser")(sub, common)
        else:
            sub.add_parser(name, help=command.help)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first argument that is not an option (``ctxrank``'s own options,
    ``--debug``, ``--version`` and ``--help``, take no value); None if it names no command."""
    name = next((a for a in argv if not a.startswith("-")), None)
    return name if name in COMMANDS else None


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """ctxrank's own warnings (e.g. a LETOR file without a final newline) as one line on stderr."""
    if category.__module__.startswith("ctxrank"):
        print(f"ctxrank: warning: {message}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the process ran out of memory: ``MemoryError`` (Python, NumPy), an
    ``OSError`` with ``ENOMEM`` (e.g. listing a directory while memory is exhausted), PyTorch's allocation
    failure (``RuntimeError``: "can't allocate memory", ``torch.OutOfMemoryError``)."""
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOMEM
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


#: the commands that train, whose out-of-memory message names the training options that bound memory
TRAINING_COMMANDS = ("train", "tune", "experiment", "demo")


def _memory_message(exc: BaseException, command: str | None) -> str:
    """One line for an out-of-memory failure: a reader's own message (what it could not allocate, and
    its option), else what failed and, for a command that trains, how to keep a run within the machine."""
    if type(exc) is MemoryError and str(exc) and "\n" not in str(exc):
        return f"out of memory: {exc}"
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)  # no path: not its fault
    detail = (text.splitlines() or ["the command needed more memory than this process may use"])[-1]
    if command not in TRAINING_COMMANDS:
        return f"out of memory: {detail.strip()[:200]}; --debug shows where"
    return (
        f"out of memory: {detail.strip()[:200]}. Set train.max_memory_bytes to the bytes a run may use, "
        "so that ctxrank refuses beforehand what would not fit ('auto' counts what the machine reports "
        "free when the run starts), lower train.batch_size, or keep fewer items per query (--initial "
        "lambdamart --top-k K); docs/training.md; --debug shows where"
    )


def flag_text(text: str | OptionText) -> str:
    """A library message (``str`` or :class:`~ctxrank._checks.OptionText`) as the command line says it:
    each option it names written as its declared flag (``data_file`` -> ``--data FILE``)."""
    return text.render(_flag) if isinstance(text, OptionText) else str(text)


def option_classes() -> Iterator[type]:
    """The classes whose declared options (:mod:`ctxrank._declare`) the commands take and library errors
    name, in the order a field's flag is looked up; each imported only when the classes before it do not
    declare the name (NumPy, the serve extra: not for `ctxrank --help`). A name stands for one flag among
    them all (a test checks it)."""
    from ctxrank.data.sources import DataSource
    from ctxrank.tracking import TrackOptions

    yield DataSource
    yield TrackOptions
    from ctxrank.data.download import DownloadOptions

    yield DownloadOptions
    from ctxrank.data.synth import LetorShape

    yield LetorShape
    from ctxrank.config import RunConfig
    from ctxrank.training.request import TrainRequest

    yield RunConfig
    yield TrainRequest
    from ctxrank.experiments.executors import ExecutorOptions

    yield ExecutorOptions
    from ctxrank.experiments.evidence import ExperimentPaths

    yield ExperimentPaths
    from ctxrank.serving.server import ServeOptions

    yield ServeOptions


def option_flag(name: str) -> str:
    """The command-line flag of the declared option ``name`` (``data_file`` -> ``--data``).

    Raises:
        KeyError: no class of :func:`option_classes` declares ``name``.
    """
    for cls in option_classes():
        if name in declared_keys(cls):
            return flag_of(cls, name)
    raise KeyError(f"no command declares an option {name!r}")


def _flag(field: Field) -> str:
    """The flag of a :class:`~ctxrank._checks.Field`, with its value's name when the message gives one."""
    flag = option_flag(field.name)
    return f"{flag} {field.metavar}" if field.metavar else flag


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C's ``KeyboardInterrupt`` is, so that the command's
    ``finally`` blocks run (:func:`_sigterm_as_interrupt`)."""


def _torchrun_worker() -> bool:
    """Whether this process is a worker torchrun started (its agent sets ``TORCHELASTIC_RUN_ID``)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def _rank_tag() -> str:
    """`` (rank R of W)`` in a torchrun worker, whose every rank prints its own error line (torchrun's
    ``RANK`` and ``WORLD_SIZE``); empty elsewhere."""
    if not _torchrun_worker():
        return ""
    return f" (rank {os.environ.get('RANK', '?')} of {os.environ.get('WORLD_SIZE', '?')})"


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM raises :class:`Terminated` instead of ending the process on the
    spot, which would leave a half-written temporary file (``synth letor``'s, a model's) and skip the
    evidence an interrupted experiment keeps. Left as it is where a handler is installed already (an
    application that calls :func:`main`), off the main thread, and in a torchrun worker (its agent
    ends the ranks with SIGTERM; a rank waiting in a collective could not raise it)."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        or _torchrun_worker()
    ):
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 usage or data error). Only the module of the
    command ``argv`` names is imported (none for ``--help``, ``--version`` or an unknown command)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_of(argv)
    try:
        parser = build_parser(() if command is None else (command,))
    except ModuleNotFoundError as exc:  # an optional dependency of the command's module
        if command is None or (exc.name or "ctxrank").startswith("ctxrank") or "--debug" in argv:
            raise
        extra = COMMANDS[command].extra
        install = f"pip install 'ctxrank[{extra}]'" if extra else f"pip install {exc.name}"
        print(f"ctxrank: error: `ctxrank {command}` needs the {exc.name} package: {install}", file=sys.stderr)
        return 2
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors: argparse has printed already
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    limit_heap_growth()  # the command owns its process: glibc's heap kept from fragmenting
    try:
        with warnings.catch_warnings(), _sigterm_as_interrupt():
            warnings.showwarning = _show_warning
            return int(args.run(args))
    except BrokenPipeError:  # `ctxrank ... | head`: stop quietly, as the reader went away
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1
    except (ValueError, OSError, MemoryError, RuntimeError) as exc:
        memory = _out_of_memory(exc)
        if args.debug or not (memory or isinstance(exc, ValueError | OSError)):
            raise
        traceback.clear_frames(exc.__traceback__)  # the failed step's tensors go before the message
        # an OptionError's options named by their flags
        text = flag_text(exc.text if isinstance(exc, OptionError) else str(exc))
        message = _memory_message(exc, command) if memory else text
        print(f"ctxrank: error{_rank_tag()}: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        if args.debug:
            raise
        terminated = isinstance(exc, Terminated)
        print(f"ctxrank: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130


def program() -> NoReturn:
    """The ``ctxrank`` program (the console script, ``python -m ctxrank``): :func:`main` on the process's
    arguments, its status the process's exit status.

    A torchrun worker ends with ``os._exit`` once its streams are flushed and the ``atexit`` functions
    have run, skipping the interpreter's finalization and C++'s static destructors. PyTorch keeps the gloo
    group of a ``DistributedDataParallel`` module alive after ``destroy_process_group`` (its
    ``pt_gloo_runloop`` and ``gloo_tcp_loop`` threads still run; ``tests/training/test_distributed.py``
    checks it), and the process's ordinary exit then aborted now and then after a complete run ("terminate
    called without an active exception", SIGABRT), failing the torchrun job that had written its model.
    """
    status = main()
    if _torchrun_worker():
        atexit._run_exitfuncs()  # what an ordinary exit runs and os._exit does not
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(status)
    raise SystemExit(status)
