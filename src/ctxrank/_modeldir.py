"""The metadata file of a saved model directory, shared by ``checkpoint`` (neural models) and the
baselines (which save their own directories): its name, its format version and how it is read.

It sits below both, so that ``checkpoint.load_model`` can load every kind of model while the
baselines never import ``checkpoint``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
META_FILE = "ctxrank.json"


def read_meta(directory: str | Path) -> dict[str, Any]:
    """``ctxrank.json`` of a model directory (JSON only, never unpickled), checked for its format.

    Raises:
        ValueError: not a model directory, unreadable metadata, another format version.
    """
    directory = Path(directory)
    path = directory / META_FILE
    if not path.is_file():
        raise ValueError(f"{directory}: not a ctxrank model directory (no {META_FILE})")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: unreadable model metadata ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: unsupported model format "
            f"{meta.get('format_version') if isinstance(meta, dict) else meta!r}"
        )
    return meta
