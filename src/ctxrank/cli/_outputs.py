"""What a command may write: the output files the user owns.

A command never replaces what it did not write unless the user says so (``--overwrite``). An output
**directory** (``train --out``, ``experiment --out``, ``tune --out``, and the API's ``save``) follows
one rule, :func:`ctxrank._io.claim_output_dir`. An output **file** (``predict --output``, ``export
--out``) must not exist; ``--overwrite`` replaces it. Nothing here imports NumPy or torch.
"""

from __future__ import annotations

from pathlib import Path


def check_output_file(path: str | Path, *, overwrite: bool, flag: str) -> None:
    """Refuse an output file that exists (unless ``overwrite``) or is a directory."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file name")
    if path.exists() and not overwrite:
        raise ValueError(f"{flag} {path} exists; give --overwrite to replace it, or another file name")
