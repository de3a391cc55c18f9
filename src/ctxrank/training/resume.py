"""Crash-safe training state: written atomically after every epoch, read back to resume a run.

:func:`ctxrank.training.loop.fit` with ``state_dir`` saves, after every finished epoch (rank 0 only under
torchrun), everything needed to continue bitwise-identically: model weights, Adam's state, the best
weights so far, the early-stopping counters and history, the numpy batch-order generator's state,
torch's RNG state(s) and the fp16 gradient scaler's state. ``ctxrank train`` keeps it in ``OUT/resume``
and ``ctxrank train --resume OUT`` continues from it.

Layout of a state directory::

    state.json                          the manifest, written last: the commit point
    state-EEEE-XXXXXXXX.safetensors     model weights, optimizer tensors (Adam moments, step), torch RNG
    best-EEEE-XXXXXXXX.safetensors      best weights so far (a plain state dict; new file when they change)
    run.json                            (``ctxrank train``) the command's options and resolved config

Write order, so that a kill at any instant leaves either the previous complete state or the new one:
the tensor files are written under fresh names (temporary file, fsync, rename), the directory is
fsynced, then ``state.json`` is replaced atomically (temporary file, fsync, rename, directory fsync),
and only then are the files no manifest names any more deleted. ``state.json`` records each file's
size and SHA-256, checked before the file is parsed.

Nothing is pickled: the manifest is strict JSON (NaN written as ``null``, read back as NaN where a float
is expected: the best metric and the history's numbers; scalars of the optimizer and scaler, the numpy
generator's ``bit_generator.state``, a JSON dict), the tensors are safetensors. Loading never executes
code; a file that is not what the manifest says is refused with a ``ValueError``.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
import safetensors.torch
import torch

from ctxrank._io import atomic_write, dumps, float_or_nan, read_json_file, write_json
from ctxrank._io import fsync_dir as _fsync_dir
from ctxrank.data.gathered import is_gathered

FORMAT_VERSION = 1
STATE_FILE = "state.json"
RUN_FILE = "run.json"


@dataclass
class TrainingState:
    """What :func:`ctxrank.training.loop.fit` needs to continue after ``epoch``.

    ``optimizer`` is ``optimizer.state_dict()["state"]`` (per-parameter tensors and scalars);
    ``torch_rng`` / ``cuda_rng`` hold one RNG state per rank (one entry outside torchrun);
    ``run`` describes the run (model, train config, data fingerprints, world size) and must match
    when resuming.
    """

    epoch: int
    model: dict[str, torch.Tensor]
    best: dict[str, torch.Tensor]
    best_epoch: int
    best_metric: float
    bad_epochs: int
    stopped: bool
    history: list[dict[str, Any]]
    optimizer: dict[int, dict[str, Any]]
    numpy_rng: dict[str, Any]
    torch_rng: list[torch.Tensor]
    cuda_rng: list[torch.Tensor] | None = None
    scaler: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)


def fingerprint(data: Any, init_scores: np.ndarray | None = None) -> str:
    """SHA-256 of what training reads from a RankingData (features, labels, query offsets, categorical
    codes) and of the initial scores: the same data give the same fingerprint."""
    h = hashlib.sha256()
    arrays = [data.features, data.labels, data.query_offsets, data.categorical, init_scores]
    for a in arrays:
        if a is None:
            h.update(b"none")
        elif is_gathered(a):  # the bytes of the copy it stands for, a block at a time
            h.update(f"{a.dtype.str}{a.shape}".encode())
            for _, block in a.blocks():
                h.update(block.data)
        else:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.data)
    return h.hexdigest()


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    blob = safetensors.torch.save({k: v.detach().cpu().contiguous() for k, v in tensors.items()})
    atomic_write(path, lambda tmp: tmp.write_bytes(blob))
    return {"file": path.name, "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}


def _read_tensors(directory: Path, entry: Any) -> dict[str, torch.Tensor]:
    """The tensors of a file named in the manifest, after checking its size and SHA-256."""
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        raise ValueError(f"{directory / STATE_FILE}: malformed file entry {entry!r}")
    name = entry["file"]
    if Path(name).name != name or not name.endswith(".safetensors"):
        raise ValueError(f"{directory / STATE_FILE}: refusing file name {name!r}")
    path = directory / name
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read training state ({exc})") from None
    if len(blob) != entry.get("bytes") or hashlib.sha256(blob).hexdigest() != entry.get("sha256"):
        raise ValueError(
            f"{path}: does not match the SHA-256 recorded in {STATE_FILE} (changed or damaged); not loaded"
        )
    try:
        return safetensors.torch.load(blob)
    except (safetensors.SafetensorError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{path}: not a safetensors file ({exc})") from None


class StateDir:
    """The training state directory of one run: :meth:`save` after each epoch, :meth:`load` to resume."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._best: tuple[int, dict[str, Any]] | None = None  # (best epoch, file entry) last written

    @property
    def manifest(self) -> Path:
        return self.directory / STATE_FILE

    def exists(self) -> bool:
        return self.manifest.is_file()

    def save(self, state: TrainingState) -> Path:
        """Write ``state`` (see the module docstring for the order); returns the manifest's path."""
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        tag = f"{state.epoch:04d}-{secrets.token_hex(4)}"
        tensors = {f"model.{k}": v for k, v in state.model.items()}
        scalars: dict[str, dict[str, Any]] = {}
        for idx, entry in state.optimizer.items():
            for name, value in entry.items():
                if isinstance(value, torch.Tensor):
                    tensors[f"optimizer.{int(idx)}.{name}"] = value
                else:
                    scalars.setdefault(str(int(idx)), {})[name] = value
        for r, t in enumerate(state.torch_rng):
            tensors[f"rng.torch.{r}"] = t
        for r, t in enumerate(state.cuda_rng or ()):
            tensors[f"rng.cuda.{r}"] = t
        files = {"state": _write_tensors(d / f"state-{tag}.safetensors", tensors)}
        if (
            self._best is not None
            and self._best[0] == state.best_epoch
            and (d / self._best[1]["file"]).is_file()
        ):
            files["best"] = self._best[1]  # unchanged since the last save
        else:
            files["best"] = _write_tensors(d / f"best-{tag}.safetensors", state.best)
        _fsync_dir(d)
        manifest = {
            "format_version": FORMAT_VERSION,
            "kind": "ctxrank-training-state",
            "epoch": state.epoch,
            "best_epoch": state.best_epoch,
            "best_metric": state.best_metric,
            "bad_epochs": state.bad_epochs,
            "stopped": state.stopped,
            "history": state.history,
            "numpy_rng": state.numpy_rng,
            "optimizer_scalars": scalars,
            "world_size": len(state.torch_rng),
            "cuda_rng": state.cuda_rng is not None,
            "scaler": state.scaler,
            "run": state.run,
            "files": files,
        }
        write_json(self.manifest, manifest)
        _fsync_dir(d)
        self._best = (state.best_epoch, files["best"])
        keep = {e["file"] for e in files.values()}
        for path in d.iterdir():  # earlier states, files of an interrupted write, temporary files
            stale = path.suffix == ".safetensors" and path.name not in keep
            if stale or (path.name.startswith(".") and path.name.endswith(".tmp")):
                path.unlink(missing_ok=True)
        return self.manifest

    def load(self) -> TrainingState | None:
        """The saved state, or None when no epoch has been saved.

        Raises:
            ValueError: a manifest or file that is damaged, not JSON / safetensors (e.g. a pickle), or
                does not match its recorded SHA-256.
        """
        if not self.exists():
            return None
        m = read_json_file(self.manifest, "training state manifest")
        if not isinstance(m, dict) or m.get("kind") != "ctxrank-training-state":
            raise ValueError(f"{self.manifest}: not a ctxrank training state")
        if m.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{self.manifest}: unsupported training state format {m.get('format_version')!r}"
            )
        try:
            tensors = _read_tensors(self.directory, m["files"]["state"])
            best = _read_tensors(self.directory, m["files"]["best"])
            world_size = int(m["world_size"])
            model, optimizer = {}, {}
            for key, value in tensors.items():
                if key.startswith("model."):
                    model[key[len("model.") :]] = value
                elif key.startswith("optimizer."):
                    _, idx, name = key.split(".", 2)
                    optimizer.setdefault(int(idx), {})[name] = value
            for idx, entry in m["optimizer_scalars"].items():
                optimizer.setdefault(int(idx), {}).update(entry)
            torch_rng = [tensors[f"rng.torch.{r}"] for r in range(world_size)]
            cuda_rng = [tensors[f"rng.cuda.{r}"] for r in range(world_size)] if m["cuda_rng"] else None
            state = TrainingState(
                epoch=int(m["epoch"]),
                model=model,
                best=best,
                best_epoch=int(m["best_epoch"]),
                best_metric=float_or_nan(m["best_metric"]),  # the metric of a finished epoch
                bad_epochs=int(m["bad_epochs"]),
                stopped=bool(m["stopped"]),
                history=[_history_record(r) for r in m["history"]],
                optimizer=optimizer,
                numpy_rng=dict(m["numpy_rng"]),
                torch_rng=torch_rng,
                cuda_rng=cuda_rng,
                scaler=dict(m["scaler"]),
                run=dict(m["run"]),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{self.manifest}: malformed training state ({exc!r})") from None
        self._best = (state.best_epoch, m["files"]["best"])
        return state

    def saved_epoch(self) -> int | None:
        """The epoch of the saved state (None when nothing is saved); reads the manifest only."""
        if not self.exists():
            return None
        m = read_json_file(self.manifest, "training state manifest")
        epoch = m.get("epoch") if isinstance(m, dict) else None
        if not isinstance(epoch, int):
            raise ValueError(f"{self.manifest}: not a ctxrank training state")
        return epoch

    def best_file(self) -> Path | None:
        """The file holding the best weights of the saved state (None when nothing is saved)."""
        if not self.exists():
            return None
        m = read_json_file(self.manifest, "training state manifest")
        try:
            return self.directory / m["files"]["best"]["file"]
        except (KeyError, TypeError):
            return None


def _history_record(record: dict[str, Any]) -> dict[str, Any]:
    """An epoch record of the history as ``fit`` made it: every value is a number (``null`` -> NaN)."""
    return {k: float_or_nan(v) if v is None else v for k, v in record.items()}


def check_same_run(saved: dict[str, Any], current: dict[str, Any], where: Path) -> None:
    """Refuse to resume a state saved by a different run (model, train config, data, world size)."""
    current = json.loads(dumps(current))  # tuples -> lists, NaN -> None, as saved
    diffs = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += [
                f"{key}.{k}: saved {a.get(k)!r}, now {b.get(k)!r}"
                for k in sorted(set(a) | set(b))
                if a.get(k) != b.get(k)
            ]
        else:
            diffs.append(f"{key}: saved {a!r}, now {b!r}")
    if diffs:
        raise ValueError(
            f"{where}: the saved training state belongs to a different run; resuming needs the same "
            "model, training settings, data and number of processes (" + "; ".join(diffs) + ")"
        )
