"""``python -m ctxrank``: the same as the ``ctxrank`` console script."""

from ctxrank.cli import program

program()
