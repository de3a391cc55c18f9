"""The one set of option validators: run configs, model configs, losses and baselines use these.

Each check takes the option's full name as the user wrote it (``"train.lr"``, ``"model_params.k"``,
``"temperature"``), raises ``ValueError`` saying what was expected and what came, and returns the value
in its canonical Python type. NumPy scalars are accepted where Python numbers are; ``bool`` is never a
number. Nothing here imports anything of ctxrank: it sits at the bottom of the layering.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

__all__ = [
    "build_dataclass",
    "check_bool",
    "check_choice",
    "check_dropout",
    "check_int",
    "check_int_list",
    "check_non_negative",
    "check_positive",
    "is_int",
    "is_number",
]


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


def check_int(name: str, value: Any, minimum: int = 1, *, allow_none: bool = False) -> int | None:
    """An integer >= ``minimum`` (or None with ``allow_none``)."""
    if value is None and allow_none:
        return None
    if not is_int(value) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {what}{' or None' if allow_none else ''}, got {value!r}")
    return int(value)


def check_int_list(name: str, value: Any) -> tuple[int, ...]:
    """A tuple of positive integers (a TOML list arrives as a tuple; see :func:`build_dataclass`)."""
    if not isinstance(value, tuple) or not all(is_int(v) and v >= 1 for v in value):
        raise ValueError(f"{name} must be a list of positive integers, got {value!r}")
    return tuple(int(v) for v in value)


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
