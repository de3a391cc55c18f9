"""The version of ctxrank: the one place it is written (pyproject.toml reads it, model directories and
``ctxrank --version`` report it)."""

__version__ = "0.1.0"
