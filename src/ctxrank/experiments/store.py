"""The run store of an experiment directory: one JSON file per finished run, written atomically.

Layout of ``OUT/``::

    experiment.json                   the specification and its fingerprint (checked on resume)
    runs/<model>/seed<S>-fold<F>.json one finished run: per-query test metrics, summary, config
    units/seed<S>-fold<F>.json        per-run data shared by the models (anomaly scores of test queries)

A run file appears only when its run is complete (``ctxrank._io.atomic_write``: temporary file, fsync,
rename), so an experiment killed at any point resumes with every finished run kept and no run counted
twice. Files are strict JSON (a NaN metric, e.g. a query without a relevant item under
``no_relevant = "skip"``, is written as ``null`` and read back as NaN): nothing is unpickled when
reading them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxrank._io import floats_or_nan, write_json

__all__ = ["RunStore"]

SPEC_FILE = "experiment.json"


class RunStore:
    """Read and write the runs of one experiment directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # ---------------------------------------------------------------- paths
    def run_path(self, model: str, seed: int, fold: int) -> Path:
        return self.root / "runs" / model / f"seed{seed}-fold{fold}.json"

    def unit_path(self, seed: int, fold: int) -> Path:
        return self.root / "units" / f"seed{seed}-fold{fold}.json"

    # ----------------------------------------------------------------- runs
    def has_run(self, model: str, seed: int, fold: int) -> bool:
        return self.run_path(model, seed, fold).is_file()

    def save_run(self, record: dict[str, Any]) -> None:
        write_json(self.run_path(record["model"], record["seed"], record["fold"]), record)

    def load_run(self, model: str, seed: int, fold: int) -> dict[str, Any]:
        """A stored run; its per-query ``metrics`` are float lists (``null`` -> NaN)."""
        path = self.run_path(model, seed, fold)
        record = _read(path)
        try:
            record["metrics"] = {k: floats_or_nan(v) for k, v in record["metrics"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path}: malformed run file ({exc!r})") from None
        return record

    def has_unit(self, seed: int, fold: int) -> bool:
        return self.unit_path(seed, fold).is_file()

    def save_unit(self, seed: int, fold: int, record: dict[str, Any]) -> None:
        write_json(self.unit_path(seed, fold), record)

    def load_unit(self, seed: int, fold: int) -> dict[str, Any]:
        """A stored unit; its ``anomaly_score`` is a float list (``null`` -> NaN)."""
        path = self.unit_path(seed, fold)
        record = _read(path)
        try:
            record["anomaly_score"] = floats_or_nan(record["anomaly_score"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: malformed unit file ({exc!r})") from None
        return record

    def has_results(self) -> bool:
        """Whether any run or unit file is stored (a first attempt that failed before its first run
        leaves only ``experiment.json``, which does not bind the directory)."""
        return any(p.suffix == ".json" for d in ("runs", "units") for p in (self.root / d).rglob("*.json"))

    # ----------------------------------------------------------------- spec
    def claim(self, spec: Any) -> None:
        """Record ``spec`` in a new directory, or check that an existing one holds runs of the same
        experiment (same data, models and protocol; ``runs.count``, threads and the report may change).
        A directory holding no run yet (a first attempt that failed, e.g. on a wrong data path) is
        claimed by the new spec.

        Raises:
            ValueError: the directory holds another experiment's runs.
        """
        path = self.root / SPEC_FILE
        if path.exists() and self.has_results():  # a directory without a stored run is claimed anew
            old = _read(path)
            if old.get("fingerprint") != spec.fingerprint():
                raise ValueError(
                    f"{self.root} holds runs of a different experiment ({old.get('name')!r}, other data, "
                    "models or protocol); choose another --out directory or delete this one"
                )
        write_json(path, {"name": spec.name, "fingerprint": spec.fingerprint(), "spec": spec.to_dict()})


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable run file ({exc})") from None
