"""What a command may write: the output directories and files the user owns.

A command never replaces what it did not write unless the user says so (``--overwrite``):

* An output **directory** (``train --out``, ``experiment --out``) is new, empty, or written by ctxrank:
  a model directory holds ``ctxrank.json`` (a saved model) or ``resume/`` (an unfinished run); an
  experiment directory holds ``experiment.json``, or only ``runs/`` and ``units/`` (runs copied from
  another experiment to be reused). Any other entry is the user's, and the directory is refused. The
  lock file ``.ctxrank.lock`` and the temporary files of killed writes (``.NAME.XXXXXXXX.tmp``) are
  ctxrank's own.
* An output **file** (``predict --output``, ``export --out``) must not exist.

``--overwrite`` lifts both refusals: files of the names the command writes are replaced, a previous
model's files are removed first (``train``), other files are left as they are. Nothing here imports
NumPy or torch.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

#: every entry a ``ctxrank train --out DIR`` writes (ctxrank.checkpoint, the baselines, training.run)
MODEL_ENTRIES = (
    "ctxrank.json",
    "model.safetensors",
    "model.txt",
    "config.toml",
    "train_log.jsonl",
    "test_metrics.json",
    "initial",
    "resume",
)


def foreign_entries(directory: Path, allowed: Iterable[str] = ()) -> list[str]:
    """The names in ``directory`` that are neither in ``allowed`` nor ctxrank's lock or temporary
    files, sorted ([] for a missing directory)."""
    from ctxrank._io import LOCK_FILE, is_ctxrank_temp

    if not directory.is_dir():
        return []
    keep = {LOCK_FILE, *allowed}
    return sorted(p.name for p in directory.iterdir() if p.name not in keep and not is_ctxrank_temp(p.name))


def refuse_foreign(directory: Path, names: list[str], what: str) -> None:
    """The error for an output directory holding the user's files ``names`` (no ``--overwrite``)."""
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    raise ValueError(
        f"{directory} holds files that ctxrank did not write ({shown}); choose a new or empty --out "
        f"directory for the {what}, or give --overwrite to write there anyway (files of the names it "
        "writes are replaced, the others are kept)"
    )


def check_output_file(path: str | Path, *, overwrite: bool, flag: str) -> None:
    """Refuse an output file that exists (unless ``overwrite``) or is a directory."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file name")
    if path.exists() and not overwrite:
        raise ValueError(f"{flag} {path} exists; give --overwrite to replace it, or another file name")


def remove_model_entries(directory: Path) -> None:
    """``--overwrite``: remove what a previous ``ctxrank train`` wrote in ``directory``
    (:data:`MODEL_ENTRIES`), so no file of the old model is left beside the new one."""
    for name in MODEL_ENTRIES:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
