"""Shared output of the benchmark scripts (imported by them; not a benchmark itself)."""

from __future__ import annotations

import json


def emit_json(blob: dict, path: str | None = None, *, echo: bool = True) -> None:
    """Print ``blob`` as a fenced JSON block (``echo``) and write it to ``path`` when given.

    Values JSON does not know (paths, numpy scalars) are written as their ``str``.
    """
    text = json.dumps(blob, indent=1, default=str)
    if echo:
        print()
        print("```json")
        print(text)
        print("```")
    if path:
        with open(path, "w") as fh:
            fh.write(text + "\n")
