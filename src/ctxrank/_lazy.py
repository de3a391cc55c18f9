"""Lazy re-exports (PEP 562) so that ``import ctxrank`` and ``ctxrank --help`` stay fast: torch,
LightGBM and pandas are imported only when a name that needs them is first used."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list]]:
    """Return ``(__getattr__, __dir__)`` for a package whose ``exports`` map name -> module."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list:
        return sorted(exports)

    return __getattr__, __dir__
