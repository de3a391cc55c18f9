"""The one set of option validators: run configs, model configs, losses and baselines use these.

Each check takes the option's full name as the user wrote it (``"train.lr"``, ``"model_params.k"``,
``"temperature"``), raises ``ValueError`` saying what was expected and what came, and returns the value
in its canonical Python type. NumPy scalars are accepted where Python numbers are; ``bool`` is never a
number. Nothing here imports anything of ctxrank: it sits at the bottom of the layering.

A message about options names them by their field names (``null_fill``, ``data_file``), as the API
knows them: :class:`OptionError` keeps them apart from the text (:class:`Field`), so the command line
writes each as its flag (``--null-fill``, ``--data FILE``) from the options' declarations.
"""

from __future__ import annotations

import math
import numbers
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

__all__ = [
    "DEFAULT_THREADS",
    "MAX_BYTES",
    "MAX_CONFIG_INT",
    "MAX_CONFIG_LIST",
    "MAX_INT",
    "MAX_SEED",
    "Field",
    "Key",
    "OptionError",
    "OptionText",
    "build_dataclass",
    "check_bool",
    "check_bytes",
    "check_choice",
    "check_dropout",
    "check_int",
    "check_int_list",
    "check_model_params",
    "check_named",
    "check_names",
    "check_no_relevant",
    "check_non_negative",
    "check_null_fill",
    "check_positive",
    "check_seed",
    "is_int",
    "is_number",
    "listed",
    "parse_int",
    "resolve_threads",
]

#: the largest integer option (counts, sizes, cutoffs, epochs, folds, trials): a C ``int``, what LightGBM,
#: liblinear and every index type downstream hold
MAX_INT = 2**31 - 1
#: the largest seed: LightGBM reads seeds as C ``int``, scikit-learn as 32-bit unsigned; torch and numpy
#: take more. Seeds derived by adding to a seed (ensemble members ``seed + i``) stay within it too
MAX_SEED = 2**31 - 1
#: the largest byte-count option (memory budgets, file-size limits): far above any machine, within int64
MAX_BYTES = 2**62
#: the largest integer of a neural model's config (a width, a level count, ...), in a run config and in a
#: saved ``ctxrank.json`` alike (``_modeldir.check_config_values``)
MAX_CONFIG_INT = 2**24
#: the longest list of a neural model's config (hidden widths, ...), in a run config and a saved model
MAX_CONFIG_LIST = 64


@dataclass(frozen=True)
class Field:
    """An option named in a message: its field name (``data_file``) and, for the command line, the
    value's name written after the flag (``FILE``: ``--data FILE``)."""

    name: str
    metavar: str = ""


@dataclass(frozen=True)
class Key:
    """A key of a config's table named in a message (``rerank.top_k``: the ``table`` and the key's
    ``name``), written so by the API and the command line (as a config file and ``--set`` take it); a
    caller that names the table's keys its own way (an experiment spec's ``[protocol] top_k``) writes
    them with :meth:`OptionText.render`'s ``key_of``."""

    table: str
    name: str

    def __str__(self) -> str:
        return f"{self.table}.{self.name}"


@dataclass(frozen=True)
class OptionText:
    """A message naming options: text, :class:`Field` and :class:`Key` parts, in order. ``str()`` names
    each field by its name (the API's words); :meth:`render` by ``name_of`` (the command line: its
    flag), each key by ``key_of`` (default ``table.name``)."""

    parts: tuple[str | Field | Key, ...]

    @classmethod
    def of(cls, template: str, **values: Any) -> OptionText:
        """The message of ``template``: ``{name}`` is ``values[name]`` when given (an
        :class:`OptionText`, :class:`Field` or :class:`Key` spliced in, anything else as ``format`` writes
        it: ``{name!r}`` too), else the option ``name`` (``{data_file:FILE}``: a :class:`Field` with the
        metavar ``FILE``)."""
        parts: list[str | Field | Key] = []
        for literal, name, spec, conversion in string.Formatter().parse(template):
            if literal:
                parts.append(literal)
            if name is None:
                continue
            if name not in values:
                parts.append(Field(name, spec or ""))
            elif isinstance(values[name], OptionText):
                parts.extend(values[name].parts)
            elif isinstance(values[name], Field | Key):
                parts.append(values[name])
            else:
                value = values[name]
                value = {"r": repr, "s": str, "a": ascii}[conversion](value) if conversion else value
                parts.append(format(value, spec or ""))
        return cls(tuple(parts))

    @property
    def fields(self) -> tuple[str, ...]:
        """The field names the message names, in order."""
        return tuple(p.name for p in self.parts if isinstance(p, Field))

    def render(
        self, name_of: Callable[[Field], str] | None = None, key_of: Callable[[Key], str] = str
    ) -> str:
        """The text, each field written by ``name_of`` (None: its field name), each key by ``key_of``."""
        field_of = name_of if name_of is not None else (lambda field: field.name)
        return "".join(
            p if isinstance(p, str) else key_of(p) if isinstance(p, Key) else field_of(p) for p in self.parts
        )

    def __str__(self) -> str:
        return self.render()


def listed(names: Sequence[str | Key], sep: str = ", ") -> OptionText:
    """The fields ``names`` (or keys) one after the other, ``sep`` between them (``null_fill, regroup``)."""
    parts: list[str | Field | Key] = []
    for i, name in enumerate(names):
        part = Field(name) if isinstance(name, str) else name
        parts.extend((sep, part) if i else (part,))
    return OptionText(tuple(parts))


class OptionError(ValueError):
    """A caller's mistake in options, its message an :class:`OptionText` (:meth:`OptionText.of`'s
    ``template`` and ``values``): ``str()`` names the fields (``split_fractions applies to
    data_file``), ``ctxrank``'s command line their flags (``--split-fractions applies to --data
    FILE``). ``fields``: the names, for a caller to act on."""

    def __init__(self, template: str | OptionText, **values: Any) -> None:
        self.text = template if isinstance(template, OptionText) else OptionText.of(template, **values)
        super().__init__(str(self.text))

    @property
    def fields(self) -> tuple[str, ...]:
        return self.text.fields

    def __reduce__(self) -> tuple[Any, ...]:  # across processes with its fields, not only its text
        return (type(self), (self.text,))


#: the name a check is given by :func:`check_named`, where the option stands in its message
_NAMED = "\x00option\x00"


def check_named(option: Field | Key, check: Callable[..., Any], value: Any, *args: Any) -> Any:
    """``check(name, value, *args)``, a check of this module, its error an :class:`OptionError` naming
    ``option`` as a part of the message (each caller writes it its own way), not as text."""
    try:
        return check(_NAMED, value, *args)
    except ValueError as exc:
        parts: list[str | Field | Key] = []
        for i, piece in enumerate(str(exc).split(_NAMED)):
            parts.extend(([option] if i else []) + ([piece] if piece else []))
        raise OptionError(OptionText(tuple(parts))) from None


def is_int(x: Any) -> bool:
    """An integer (Python or NumPy), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool) and not _is_numpy_bool(x)


def is_number(x: Any) -> bool:
    """A real number (Python or NumPy int / float), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and not _is_numpy_bool(x)


def _is_numpy_bool(x: Any) -> bool:
    return type(x).__name__ == "bool_" and type(x).__module__ == "numpy"


def check_positive(name: str, value: Any) -> float:
    """A finite number > 0."""
    if not is_number(value) or not math.isfinite(value) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def check_non_negative(name: str, value: Any) -> float:
    """A finite number >= 0."""
    if not is_number(value) or not math.isfinite(value) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def check_dropout(name: str, value: Any) -> float:
    """A dropout probability in [0, 1)."""
    value = check_non_negative(name, value)
    if value >= 1:
        raise ValueError(f"{name} must be < 1, got {value}")
    return value


def check_int(
    name: str, value: Any, minimum: int = 1, *, maximum: int = MAX_INT, allow_none: bool = False
) -> int | None:
    """An integer in ``[minimum, maximum]`` (or None with ``allow_none``); ``maximum`` defaults to
    :data:`MAX_INT`, so that no integer a user gives reaches NumPy, torch or C code out of range."""
    if value is None and allow_none:
        return None
    if not is_int(value) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {what}{' or None' if allow_none else ''}, got {_shown(value)}")
    if value > maximum:
        raise ValueError(f"{name} must be at most {maximum:,}, got {_shown(value)}")
    return int(value)


def check_seed(name: str, value: Any) -> int:
    """A seed: an integer in ``[0, MAX_SEED]``."""
    return check_int(name, value, 0, maximum=MAX_SEED)


#: the CPU threads of a run that sets none (``--threads`` not given, ``train.threads`` None, no
#: ``runs.threads``): one, so that its numbers do not depend on the machine's cores
DEFAULT_THREADS = 1


def resolve_threads(value: Any, name: str = "threads") -> int:
    """The CPU threads ``value`` asks for (``--threads``, ``train.threads``, ``runs.threads``): None
    means :data:`DEFAULT_THREADS`, else a positive integer. The one place that decides what "no
    threads given" means for the threads ctxrank sets itself: a baseline's ``num_threads``, the initial
    ranker's, the CPUs a Ray task asks for. (PyTorch's intra-op threads are left at PyTorch's own
    default by ``train.threads = None``: ``ctxrank.training.loop.seed_everything``.)"""
    return DEFAULT_THREADS if value is None else check_int(name, value)


#: what a LETOR ``NULL`` cell becomes, besides a number (``ctxrank.data.letor``; docs/data.md);
#: ``"keep"`` leaves it a missing value (NaN), for a model that reads missing values (LambdaMART)
NULL_FILL_RULES: tuple[str, ...] = ("query_min", "letor_min", "keep")
DEFAULT_NULL_FILL = "query_min"
#: a table's (and a DataFrame's) missing cell stays missing by default: the model reads it under
#: ``train.missing``; LETOR's ``NULL`` token is filled by :data:`DEFAULT_NULL_FILL` (its files' convention)
DEFAULT_TABLE_NULL_FILL = "keep"
FLOAT32_MAX = 3.4028234663852886e38  #: a value beyond it becomes inf in the float32 features


def check_null_fill(name: str, value: Any) -> str | float:
    """A ``null_fill``: a rule of :data:`NULL_FILL_RULES`, or a finite number within float32 (returned
    as a float, so ``0`` and ``0.0`` are one setting). The one check of the reader, the command line
    and experiment specs."""
    if isinstance(value, str) and value in NULL_FILL_RULES:
        return value
    if not (is_number(value) and math.isfinite(float(value)) and abs(float(value)) <= FLOAT32_MAX):
        raise ValueError(
            f"{name} must be one of {', '.join(NULL_FILL_RULES)} or a finite number within float32 (the "
            f"value of every NULL cell), got {_shown(value)}"
        )
    return float(value)


def check_fractions(name: str, value: Any) -> tuple[float, float, float]:
    """Split fractions: three positive finite numbers (train, valid, test) summing to 1 (not bools)."""
    fr = tuple(value) if isinstance(value, (list, tuple)) else ()
    good = len(fr) == 3 and all(is_number(f) and math.isfinite(float(f)) and f > 0 for f in fr)
    if not good or abs(sum(float(f) for f in fr) - 1.0) > 1e-6:
        raise ValueError(
            f"{name} must be three positive numbers (train, valid, test) summing to 1, got {_shown(value)}"
        )
    return tuple(float(f) for f in fr)  # type: ignore[return-value]


def check_no_relevant(name: str, value: Any) -> float | str:
    """The value of a query without a relevant item: 0, 1 (as floats) or ``"skip"``; ``True`` / ``False``
    are refused (they would pass as 1 and 0). The one check of configs and metric conventions."""
    if isinstance(value, str) and value == "skip":
        return value
    if not is_number(value) or value not in (0, 1):
        raise ValueError(f"{name} must be 0, 1 or 'skip', got {_shown(value)}")
    return float(value)


def check_crossfit(name: str, value: Any) -> int:
    """Cross-fitting folds of the initial ranker: 0 (off) or an integer >= 2."""
    if check_int(name, value, 0) == 1:
        raise ValueError(f"{name} must be 0 (off) or an integer >= 2, got 1")
    return int(value)


def check_bytes(name: str, value: Any, minimum: int = 1) -> int:
    """A number of bytes: an integer in ``[minimum, MAX_BYTES]``."""
    return check_int(name, value, minimum, maximum=MAX_BYTES)


def parse_int(name: str, text: str, minimum: int = 1, maximum: int = MAX_INT) -> int:
    """``text`` (a command-line value) as an integer in ``[minimum, maximum]`` (:func:`check_int`)."""
    digits = text.strip() if isinstance(text, str) else ""
    if not re.fullmatch(r"-?[0-9]{1,64}", digits):
        raise ValueError(f"{name} must be an integer in [{minimum:,}, {maximum:,}], got {_shown(text)}")
    return check_int(name, int(digits), minimum, maximum=maximum)


def check_int_list(name: str, value: Any, *, maximum: int = MAX_INT) -> tuple[int, ...]:
    """A tuple of integers in ``[1, maximum]`` (a TOML list arrives as a tuple: :func:`build_dataclass`)."""
    if not isinstance(value, tuple) or not all(is_int(v) and 1 <= v <= maximum for v in value):
        raise ValueError(
            f"{name} must be a list of positive integers (at most {maximum:,}), got {_shown(value)}"
        )
    return tuple(int(v) for v in value)


def check_names(name: str, value: Any) -> tuple[str, ...]:
    """A list of strings (a sequence: a TOML list, a tuple), or one string of comma-separated
    names (``"ndcg@1, map"``, as the command line writes it); returned as a tuple."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of strings, got {_shown(value)}")
    return tuple(value)


def model_param_problem(value: Any) -> str | None:
    """What makes ``value`` unfit as a neural model's config value (None: nothing): the bounds of
    :data:`MAX_CONFIG_INT` and :data:`MAX_CONFIG_LIST`, shared by run configs and saved models."""
    if isinstance(value, list | tuple) and len(value) > MAX_CONFIG_LIST:
        return f"lists {len(value)} values, at most {MAX_CONFIG_LIST} allowed"
    for item in value if isinstance(value, list | tuple) else [value]:
        if item is not None and not isinstance(item, bool | int | float | str):
            return f"must hold numbers or strings, got {_shown(value)}"
        if is_int(item) and abs(item) > MAX_CONFIG_INT:
            return f"= {_shown(item)} is above the limit of {MAX_CONFIG_INT:,}"
        if isinstance(item, float) and not math.isfinite(item):
            return f"must be finite, got {item}"
    return None


def check_model_params(section: str, values: Mapping[str, Any]) -> None:
    """Every value of a neural model's ``model_params`` within the bounds a saved model is loaded with
    (:func:`model_param_problem`)."""
    for key, value in values.items():
        problem = model_param_problem(value)
        if problem is not None:
            raise ValueError(
                f"{section}.{key} {problem} (model sizes are bounded as in a saved ctxrank.json)"
            )


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for a message: huge integers by their size, long texts cut."""
    if is_int(value) and abs(int(value)).bit_length() > 128:
        return f"an integer of {abs(int(value)).bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool) and not _is_numpy_bool(value):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return bool(value)


def check_choice(name: str, value: Any, valid: tuple[str, ...]) -> str:
    """One of the strings ``valid``."""
    if not isinstance(value, str) or value not in valid:
        raise ValueError(f"{name} must be one of {list(valid)}, got {value!r}")
    return value


def build_dataclass(cls: type, values: Mapping[str, Any], section: str) -> Any:
    """``cls(**values)`` with errors naming ``section`` and the valid keys; lists become tuples."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{section}: unknown option(s) {unknown}; valid options: {sorted(names)}")
    clean = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        return cls(**clean)
    except TypeError as exc:
        raise ValueError(f"{section}: {exc}") from None
