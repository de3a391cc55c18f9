"""Options declared once: a dataclass field carries its flag, help, check and default
(:func:`option`), and every entrance reads them from there.

The command line builds its arguments from the declarations (``ctxrank.cli._options.add_declared``)
and the values back into the typed dataclass (:func:`from_namespace`); the API and the experiment
runner build the same dataclass directly. A dataclass field whose type is itself a declared dataclass
is a group of options (composed, not flattened): :func:`declared` walks it, and its options keep
their own field names, so each name stands once among all the groups of a request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxrank._checks import MAX_BYTES, MAX_INT, MAX_SEED, NULL_FILL_RULES, check_null_fill, parse_int

__all__ = [
    "RAY_ADDRESS", "THREADS", "Option", "declared", "declared_as", "declared_keys", "field_default",
    "flag_of", "flatten", "from_namespace", "option", "unflatten",
]  # fmt: skip


@dataclass(frozen=True)
class Option:
    """How one option is given.

    Attributes:
        flag: its command-line flag (``--null-fill``); the dataclass field's name is its name everywhere
            else (a record, the API, an error message of a spec).
        help: one sentence or two: what it does, its default.
        parse: text -> checked value (raises ``ValueError`` naming the expected form); None: the text.
        metavar: the value's name in ``--help``.
        choices: the accepted values (text).
        switch: a flag without a value (True when given).
        group: the ``--help`` section it is listed under ("" = the command's own options).
        path: the value is a file or directory path (recorded absolute, so a record is replayed from
            any directory).
        aliases: other flags of the same option.
        many: the flag may be repeated; the values are collected in order.
    """

    flag: str
    help: str
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    switch: bool = False
    group: str = ""
    path: bool = False
    aliases: tuple[str, ...] = ()
    many: bool = False


def option(default: Any, flag: str, help: str, **how: Any) -> Any:
    """A dataclass field declared as an option (see :class:`Option` for ``how``)."""
    return declared_as(default, Option(flag, help, **how))


def declared_as(default: Any, opt: Option) -> Any:
    """A dataclass field declared as ``opt``, an option that several requests share (e.g. ``--threads``)."""
    return field(default=default, metadata={"option": opt})


def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default (its factory's value for a mutable one)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    assert f.default_factory is not dataclasses.MISSING, f"field {f.name} has no default"
    return f.default_factory()


def _group_type(f: dataclasses.Field) -> type | None:
    """The declared dataclass of a group field (its default is an instance of it), else None."""
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return type(default) if dataclasses.is_dataclass(default) and "option" not in f.metadata else None


def declared(cls: type) -> Iterator[tuple[str, Option]]:
    """``(field name, Option)`` of every option of ``cls`` and of its groups, in declaration order."""
    for key, opt in _declared_at(cls, ""):
        yield key.rpartition(".")[2], opt


def declared_keys(cls: type) -> dict[str, str]:
    """``{option name: dotted key}`` of the options of ``cls`` and its groups (the key of an override:
    ``seed`` -> ``train.seed`` on a :class:`~ctxrank.config.RunConfig`)."""
    return {key.rpartition(".")[2]: key for key, _ in _declared_at(cls, "")}


def _declared_at(cls: type, prefix: str) -> Iterator[tuple[str, Option]]:
    for f in dataclasses.fields(cls):
        if "option" in f.metadata:
            yield prefix + f.name, f.metadata["option"]
        elif (group := _group_type(f)) is not None:
            yield from _declared_at(group, f"{prefix}{f.name}.")


def flag_of(cls: type, name: str) -> str:
    """The command-line flag of option ``name`` of ``cls`` (or of one of its groups)."""
    for option_name, opt in declared(cls):
        if option_name == name:
            return opt.flag
    raise KeyError(f"{cls.__name__} declares no option {name!r}")


def from_namespace(cls: type, values: Mapping[str, Any] | Any) -> Any:
    """An instance of ``cls`` from parsed values by option name (an ``argparse.Namespace`` or a
    mapping); an option absent from ``values`` (a command that does not declare it) keeps its
    default."""
    given = vars(values) if not isinstance(values, Mapping) else values
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if "option" in f.metadata:
            if f.name in given:
                kwargs[f.name] = given[f.name]
        elif (group := _group_type(f)) is not None:
            kwargs[f.name] = from_namespace(group, given)
    return cls(**kwargs)


def flatten(obj: Any) -> dict[str, Any]:
    """``{option name: value}`` of ``obj`` and its groups (a record's one flat level)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if "option" in f.metadata:
            out[f.name] = value
        elif _group_type(f) is not None:
            out.update(flatten(value))
    return out


def unflatten(
    cls: type, flat: Mapping[str, Any], convert: Callable[[str, Any], Any] | None = None, what: str = "option"
) -> Any:
    """The inverse of :func:`flatten` (``convert(name, value)`` turns a recorded value back into the
    option's type, e.g. a JSON list into a tuple); ``what`` names the values in errors.

    Raises:
        ValueError: a name that is no option of ``cls``, listing the valid ones.
    """
    names = [name for name, _ in declared(cls)]
    unknown = sorted(set(flat) - set(names))
    if unknown:
        raise ValueError(f"unknown {what}(s) {unknown}; valid: {names}")
    values = {k: (convert(k, v) if convert is not None else v) for k, v in flat.items()}
    return from_namespace(cls, values)


# ------------------------------------------------------------------------------- text readers
# Each reads one command-line value and checks it with ctxrank._checks (the one validator of the rule);
# a ValueError says what was expected, in the terms of --help.
def _bounded(minimum: int, maximum: int, what: str) -> Callable[[str], int]:
    def read(text: str) -> int:
        try:
            return parse_int("the value", text, minimum, maximum)
        except ValueError:
            raise ValueError(f"expected {what} in [{minimum:,}, {maximum:,}], got {text[:40]!r}") from None

    read.__name__ = what.replace(" ", "_")  # argparse names the type in its own messages
    return read


#: integer readers: every integer option uses one of these, so no value out of range reaches NumPy,
#: torch, LightGBM or a file-size limit
POSITIVE_INT = _bounded(1, MAX_INT, "a positive integer")
NON_NEGATIVE_INT = _bounded(0, MAX_INT, "an integer")
SEED = _bounded(0, MAX_SEED, "a seed")
BYTE_COUNT = _bounded(1, MAX_BYTES, "a number of bytes")
INT_READERS = (POSITIVE_INT, NON_NEGATIVE_INT, SEED, BYTE_COUNT)

#: ``--threads N``, the one declaration of the CPU threads of every command that computes (the field
#: ``TrainConfig.threads`` of a training run; ``ctxrank.cli._options.add_threads`` elsewhere). Not given
#: (None): ctxrank sets no count where the library has its own default (PyTorch's intra-op threads, a
#: saved LambdaMART's training count); where ctxrank must pass a count itself (a baseline's
#: ``num_threads``, the initial ranker's, a Ray task's CPUs, a served model) it passes
#: ``ctxrank._checks.resolve_threads(None)``, 1. ``{threads}`` in the help says which setting it fills.
RAY_ADDRESS = Option(
    "--address",
    "Ray cluster to join (e.g. HEAD:6379 or ray://HEAD:10001; default: RAY_ADDRESS, a cluster started "
    "on this machine, else a new local one)",
    metavar="ADDR",
)

THREADS = Option(
    "--threads",
    "CPU threads of the computation: PyTorch's intra-op threads and LightGBM's threads ({threads}). "
    "Results can differ in the last digits between thread counts",
    parse=POSITIVE_INT,
    metavar="N",
)


def null_fill_text(text: str) -> str | float:
    """A ``null_fill`` rule (``query_min``, ``letor_min``) or a finite number, by ``check_null_fill``."""
    try:
        return check_null_fill("null_fill", text if text in NULL_FILL_RULES else float(text))
    except ValueError:
        raise ValueError(
            f"expected {', '.join(NULL_FILL_RULES)} or a finite number (the value of every NULL cell), "
            f"got {text!r}"
        ) from None


def fractions_text(text: str) -> tuple[float, float, float]:
    """Three numbers ``TRAIN,VALID,TEST`` (checked further by the split)."""
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise ValueError(f"expected three numbers TRAIN,VALID,TEST, got {text!r}")
    return values  # type: ignore[return-value]


def columns_text(text: str) -> tuple[str, ...]:
    """Comma-separated distinct column names."""
    names = tuple(c.strip() for c in text.split(","))
    if not names or any(not c for c in names):
        raise ValueError(f"expected comma-separated column names, got {text!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"a column is listed twice in {text!r}")
    return names
