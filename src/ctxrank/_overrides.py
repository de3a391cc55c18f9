"""Dotted-key overrides of nested configs, typed end to end.

An override is ``(dotted key, value)``, e.g. ``("train.lr", 3e-4)`` or ``("models.qilcm.grid", {})``.
Text ``KEY=VALUE`` (the command line's ``--set``, a user's string) is parsed once, here, by
:func:`parse_override`; from there on the value stays typed: the flags of ``ctxrank train``, an
experiment's protocol, grid points and tune trials are pairs, never text parsed back. :func:`set_path`
is the one setter of a dotted key (``ctxrank.config.apply_overrides``, spec tables, trials). No NumPy or
torch here: the command line's parser uses it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from typing import Any

__all__ = ["FlagSetting", "Override", "parse_override", "set_path", "with_flags"]

#: ``(dotted key, typed value)``
Override = tuple[str, Any]
#: a command's own flag setting a config key: ``(the flag, dotted key, typed value)``, e.g.
#: ``("--model", "model", "qilcm")``
FlagSetting = tuple[str, str, Any]


def parse_override(text: str) -> Override:
    """``KEY=VALUE`` as a person types it: the dotted key and the value, a TOML literal (``3e-4``,
    ``[64, 64]``, ``true``, ``{}``) or else a bare string (``listmle``).

    Raises:
        ValueError: no ``=`` or an empty key.
    """
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ValueError(f"--set expects key=value, got {text!r}")
    raw = raw.strip()
    try:
        return key, tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return key, raw  # a bare string such as listmle


def read_override(text: str) -> Override:
    """The command-line reader of ``--set`` (:mod:`ctxrank._declare`): :func:`parse_override`, its
    message without the flag (argparse puts the flag in front)."""
    try:
        return parse_override(text)
    except ValueError as exc:
        raise ValueError(str(exc).removeprefix("--set ")) from None


def set_path(d: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted ``key`` of the nested dict ``d`` to ``value`` in place (tables created as needed;
    a tuple becomes a list, as TOML gives it).

    Raises:
        ValueError: a part of the key names a value that is not a table.
    """
    *sections, leaf = key.split(".")
    for i, part in enumerate(sections):
        d = d.setdefault(part, {})
        if not isinstance(d, dict):
            raise ValueError(f"--set {key}: {'.'.join(sections[: i + 1])!r} is not a section")
    d[leaf] = list(value) if isinstance(value, tuple) else value


def with_flags(
    overrides: Sequence[Override | str], flags: Sequence[FlagSetting], implied: Sequence[Override] = ()
) -> list[Override]:
    """The overrides of one command: ``implied`` (keys a flag resets, e.g. ``--dataset`` the spec's
    folds; a ``--set`` of the same key wins), then ``--set``'s ``overrides``, then the ``flags`` that
    were given.

    A flag and a ``--set`` naming the same key, or one a key inside the other (``--model qilcm`` with
    ``--set model.width=8``), would leave one of them silently unused: refused.

    Raises:
        ValueError: such a pair (the message names both), or an override text without ``=``.
    """
    pairs = [parse_override(o) if isinstance(o, str) else (o[0], o[1]) for o in overrides]
    for flag, key, _ in flags:
        for other, _value in pairs:
            inside, holds = other.startswith(f"{key}."), key.startswith(f"{other}.")
            if other == key or inside or holds:
                what = "a key inside it" if inside else "the table that holds it" if holds else "it"
                raise ValueError(f"{flag} sets {key} and --set {other} sets {what}: give one of them")
    return [*implied, *pairs, *((key, value) for _, key, value in flags)]
