"""Dotted-key overrides of nested configs, typed end to end.

An override is ``(dotted key, value)``, e.g. ``("train.lr", 3e-4)`` or ``("models.qilcm.grid", {})``.
Text ``KEY=VALUE`` (the command line's ``--set``, a user's string) is parsed once, here, by
:func:`parse_override`; from there on the value stays typed: the flags of ``ctxrank train``, an
experiment's protocol, grid points and tune trials are pairs, never text parsed back. :func:`set_path`
is the one setter of a dotted key (``ctxrank.config.apply_overrides``, spec tables, trials). No NumPy or
torch here: the command line's parser uses it.

Errors name the overrides as the option ``overrides`` (:class:`~ctxrank._checks.OptionError`: the
parameter of ``RunConfig.with_overrides``, ``load_spec``, ...), which the command line writes as ``--set``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from typing import Any

from ctxrank._checks import Field, OptionError
from ctxrank._declare import Option

__all__ = ["SET", "FlagSetting", "Override", "parse_override", "set_path", "with_flags"]

#: ``(dotted key, typed value)``
Override = tuple[str, Any]
#: an option setting a config key: ``(the option, dotted key, typed value)``; the option is a flag the
#: user typed (text, e.g. ``("--model", "model", "qilcm")``) or a declared option named by its field
#: (:class:`~ctxrank._checks.Field`, written as its flag by the command line)
FlagSetting = tuple[str | Field, str, Any]
#: what an override's text must be
_FORM = "expects key=value, got {text!r}"


def parse_override(text: str) -> Override:
    """``KEY=VALUE`` as a person types it: the dotted key and the value, a TOML literal (``3e-4``,
    ``[64, 64]``, ``true``, ``{}``) or else a bare string (``listmle``).

    Raises:
        OptionError: no ``=`` or an empty key.
    """
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise OptionError("{overrides} " + _FORM, text=text)
    raw = raw.strip()
    try:
        return key, tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return key, raw  # a bare string such as listmle


def read_override(text: str) -> Override:
    """The command-line reader of ``--set`` (:data:`SET`): :func:`parse_override`, its message without
    the option (argparse puts the flag in front)."""
    try:
        return parse_override(text)
    except OptionError:
        raise ValueError(_FORM.format(text=text)) from None


#: ``--set KEY=VALUE`` (repeatable): the typed ``overrides`` of a run config (``TrainRequest.overrides``)
#: or of an experiment spec; ``{set}`` in its help says which
SET = Option("--set", "{set}", parse=read_override, metavar="KEY=VALUE", many=True)


def set_path(d: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted ``key`` of the nested dict ``d`` to ``value`` in place (tables created as needed;
    a tuple becomes a list, as TOML gives it).

    Raises:
        OptionError: a part of the key names a value that is not a table.
    """
    *sections, leaf = key.split(".")
    for i, part in enumerate(sections):
        d = d.setdefault(part, {})
        if not isinstance(d, dict):
            section = ".".join(sections[: i + 1])
            raise OptionError("{overrides} {key}: {section!r} is not a section", key=key, section=section)
    d[leaf] = list(value) if isinstance(value, tuple) else value


def with_flags(
    overrides: Sequence[Override | str], flags: Sequence[FlagSetting], implied: Sequence[Override] = ()
) -> list[Override]:
    """The overrides of one request: ``implied`` (keys an option resets, e.g. ``--dataset`` the spec's
    folds; an override of the same key wins), then the ``overrides``, then the options of ``flags``
    that were given.

    An option and an override naming the same key, or one a key inside the other (``model = qilcm``
    with the override ``model.width=8``), would leave one of them silently unused: refused.

    Raises:
        OptionError: such a pair (the message names both), or an override text without ``=``.
    """
    pairs = [parse_override(o) if isinstance(o, str) else (o[0], o[1]) for o in overrides]
    for flag, key, _ in flags:
        for other, _value in pairs:
            inside, holds = other.startswith(f"{key}."), key.startswith(f"{other}.")
            if other == key or inside or holds:
                what = "a key inside it" if inside else "the table that holds it" if holds else "it"
                raise OptionError(
                    "{flag} sets {key} and {overrides} {other} sets {what}: give one of them",
                    flag=flag, key=key, other=other, what=what,
                )  # fmt: skip
    return [*implied, *pairs, *((key, value) for _, key, value in flags)]
