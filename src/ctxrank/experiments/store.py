"""The run store of an experiment directory: one JSON file per finished run, written atomically.

Layout of ``OUT/``::

    experiment.json                   the specification and its fingerprint (checked on resume)
    runs/<model>/seed<S>-fold<F>.json one finished run: per-query test metrics, summary, config
    units/seed<S>-fold<F>.json        per-run data shared by the models (anomaly scores of test queries)
    tune/<model>/seed<S>-fold<F>/     a tuned run's study (``[tune]``): trials.csv, best.toml, study.db

A run file appears only when its run is complete (``ctxrank._io.atomic_write``: temporary file, fsync,
rename), so an experiment killed at any point resumes with every finished run kept and no run counted
twice. Files are strict JSON (a NaN metric, e.g. a query without a relevant item under
``no_relevant = "skip"``, is written as ``null`` and read back as NaN): nothing is unpickled when
reading them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ctxrank._io import floats_or_nan, write_json

__all__ = ["RunStore", "check_run", "read_run_json"]

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

    def study_path(self, model: str, seed: int, fold: int) -> Path:
        """The directory of a run's tuning study (``[tune]``), which its run file records relative to
        the root."""
        return self.root / "tune" / model / f"seed{seed}-fold{fold}"

    # ----------------------------------------------------------------- runs
    def has_run(self, model: str, seed: int, fold: int) -> bool:
        return self.run_path(model, seed, fold).is_file()

    def save_run(self, record: dict[str, Any]) -> None:
        write_json(self.run_path(record["model"], record["seed"], record["fold"]), record)

    def load_run(
        self, model: str, seed: int, fold: int, metrics: tuple[str, ...] | list[str] = ()
    ) -> dict[str, Any]:
        """A stored run, validated (:func:`check_run`; ``metrics``: the metrics it must hold); its
        per-query ``metrics`` are float lists (``null`` -> NaN)."""
        path = self.run_path(model, seed, fold)
        record = check_run(path, read_run_json(path), metrics)
        for key, want in (("model", model), ("seed", seed), ("fold", fold)):
            if record[key] != want:
                raise ValueError(
                    f"{path}: malformed run file: '{key}' is {record[key]!r}, its path says {want!r}"
                )
        return record

    def has_unit(self, seed: int, fold: int) -> bool:
        return self.unit_path(seed, fold).is_file()

    def save_unit(self, seed: int, fold: int, record: dict[str, Any]) -> None:
        write_json(self.unit_path(seed, fold), record)

    def load_unit(self, seed: int, fold: int) -> dict[str, Any]:
        """A stored unit, validated: ``query_ids`` and ``anomaly_score`` (a float list, ``null`` ->
        NaN) of equal length."""
        path = self.unit_path(seed, fold)
        record = read_run_json(path)
        if not isinstance(record, dict):
            raise ValueError(f"{path}: malformed unit file: not a JSON object")
        ids = _query_ids(path, record)
        record["anomaly_score"] = _vector(path, record, "anomaly_score", len(ids))
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
            old = read_run_json(path)
            if not spec.matches_record(old):
                raise ValueError(
                    f"{self.root} holds runs of a different experiment ({old.get('name')!r}, other data, "
                    "models or protocol); choose another --out directory or delete this one"
                )
        write_json(path, {"name": spec.name, "fingerprint": spec.fingerprint(), "spec": spec.to_dict()})


def read_run_json(path: Path) -> Any:
    """The JSON document of a stored record (run, unit or experiment file); a ValueError naming ``path``
    when it cannot be read."""
    try:
        return json.loads(path.read_text())
    except RecursionError:
        raise ValueError(f"{path}: unreadable run file (nested too deeply)") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, huge integers
        text = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ValueError(f"{path}: unreadable run file ({text})") from None


def check_run(path: Any, record: Any, metrics: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """A run record read from ``path``, validated: a JSON object with ``model`` (str), ``seed`` and
    ``fold`` (integers), ``query_ids`` (distinct strings) and ``metrics`` (metric name -> one finite
    number or ``null`` per query, every vector as long as ``query_ids``), holding every metric of
    ``metrics``; ``split.queries`` (when present) counts train, valid and test queries. Returns it
    with the vectors as float lists (``null`` -> NaN).

    Raises:
        ValueError: naming ``path`` and what is wrong.
    """
    if not isinstance(record, dict):
        raise ValueError(f"{path}: malformed run file: not a JSON object")
    missing = [k for k in ("model", "seed", "fold", "query_ids", "metrics") if k not in record]
    if missing:
        raise ValueError(f"{path}: malformed run file: no {', '.join(repr(k) for k in missing)}")
    if not isinstance(record["model"], str):
        raise ValueError(f"{path}: malformed run file: 'model' must be a string")
    for key in ("seed", "fold"):
        if isinstance(record[key], bool) or not isinstance(record[key], int):
            raise ValueError(
                f"{path}: malformed run file: {key!r} must be an integer, got {record[key]!r:.40}"
            )
    n = len(_query_ids(path, record))
    per = record["metrics"]
    if not isinstance(per, dict) or not per:
        raise ValueError(f"{path}: malformed run file: 'metrics' must map metric names to per-query values")
    absent = [m for m in metrics if m not in per]
    if absent:
        raise ValueError(
            f"{path}: malformed run file: no per-query values of {absent} (it has {sorted(per)})"
        )
    record["metrics"] = {k: _vector(path, per, k, n, prefix="metrics.") for k in per}
    split = record.get("split")
    if split is not None and not isinstance(split, dict):
        raise ValueError(f"{path}: malformed run file: 'split' must be a JSON object")
    if split is not None and "queries" in split:  # random splits count their queries (published folds: no)
        queries = split["queries"]
        if not isinstance(queries, dict) or not all(
            isinstance(queries.get(k), int) and not isinstance(queries.get(k), bool) and queries[k] >= 0
            for k in ("train", "valid", "test")
        ):
            raise ValueError(f"{path}: malformed run file: 'split.queries' must count train, valid and test")
    return record


def _query_ids(path: Any, record: dict[str, Any]) -> list[str]:
    ids = record.get("query_ids")
    if not isinstance(ids, list) or not all(isinstance(q, str) for q in ids):
        raise ValueError(f"{path}: malformed file: 'query_ids' must be a list of strings")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: malformed file: 'query_ids' lists a query twice")
    return ids


def _vector(path: Any, record: dict[str, Any], key: str, n: int, prefix: str = "") -> list[float]:
    """``record[key]``: ``n`` finite numbers or nulls (a skipped value) -> floats, NaN for null."""
    values = record.get(key)
    if not isinstance(values, list):
        raise ValueError(f"{path}: malformed file: '{prefix}{key}' must be a list of numbers")
    if len(values) != n:
        raise ValueError(
            f"{path}: malformed file: '{prefix}{key}' has {len(values)} values for {n} queries in 'query_ids'"
        )
    for i, v in enumerate(values):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)):
            raise ValueError(
                f"{path}: malformed file: '{prefix}{key}'[{i}] is {v!r:.40}; expected a finite number or "
                "null (a query left out)"
            )
    return floats_or_nan(values)
