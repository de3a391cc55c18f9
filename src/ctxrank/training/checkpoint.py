"""Saved models: a directory with ``model.safetensors`` (weights) and ``ctxrank.json`` (everything else).

``ctxrank.json`` records the model name and config, the loss, the feature count and names, the
normalizer state (JSON), the metric conventions, the ctxrank and torch versions and the training
summary and, for a model trained on a table (CSV / Parquet), the table spec under ``"table"`` (column
names and the fitted categorical encoder, so ``predict`` reads new files the same way) and the
train/valid/test split of ``ctxrank train --data FILE`` under ``"split"``; ``config.toml`` is the
resolved run config, for repeating the run. Nothing is pickled:
loading a checkpoint reads JSON and safetensors only, so it cannot execute code. Files are written
atomically (temporary file, fsync, rename). ``ctxrank.json`` records under ``"sha256"`` the SHA-256 of
every other file the loader reads (the weights; the initial ranker's and the ensemble members'
``ctxrank.json``, which record their own files'), and :func:`load_model` refuses a file changed after
saving (see ``_modeldir``).

The baselines (``registry.MODELS`` entries that are a ``registry.Baseline``) save their own directories,
told apart by ``kind`` in ``ctxrank.json``: ``"lightgbm"`` (LambdaMART, plus LightGBM's text
``model.txt``), ``"ranksvm"`` and ``"adarank"`` (everything in ``ctxrank.json``); :func:`load_model`
dispatches on it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import safetensors
import safetensors.torch
import torch

from ctxrank._io import atomic_write, sha256_file, to_toml, write_json
from ctxrank._modeldir import (
    DIGESTS,
    FORMAT_VERSION,
    MAX_FEATURES,
    MAX_WEIGHTS_BYTES,
    META_FILE,
    check_config_values,
    meta_cardinalities,
    meta_dict,
    meta_int,
    meta_str,
    meta_strings,
    read_meta,
    read_regular,
    recorded_digest,
    short,
    warn_unchecked,
)
from ctxrank._version import __version__
from ctxrank.config import RunConfig
from ctxrank.data.ranking_data import RankingData, check_feature_count
from ctxrank.data.transforms import Transform
from ctxrank.metrics import metric_convention
from ctxrank.models.base import RankingModule
from ctxrank.registry import MODELS, baseline_of_kind, get_model
from ctxrank.training.build import build_model, missing_problem
from ctxrank.training.ensemble import MEMBER_PATTERN, EnsemblePredictor
from ctxrank.training.predict import predict
from ctxrank.training.rerank import RerankPredictor
from ctxrank.training.rerank_spec import RerankSpec

__all__ = [
    "FORMAT_VERSION",
    "META_FILE",
    "WEIGHTS_FILE",
    "TorchPredictor",
    "load_model",
    "read_meta",
    "save_checkpoint",
    "save_ensemble",
]

WEIGHTS_FILE = "model.safetensors"


@dataclasses.dataclass
class TorchPredictor:
    """A trained neural ranker with its normalizer: raw RankingData in, flat scores out.

    The predictor protocol that callers ask instead of testing the type (``RerankPredictor``,
    ``EnsemblePredictor`` and the fitted baselines answer it too): ``ensemble_size`` (an ensemble's
    number of ``members``; 0), ``initial`` and ``spec`` (a re-ranking model's initial ranker and
    settings; None), ``scorer`` (the TorchPredictor whose module scores the lists: itself; None for a
    baseline), ``reads_row_order`` and ``save_model_dir`` (a run's model directory, what
    ``training.run.save_result`` calls; an ensemble has none: its members are saved as they are
    trained, then :func:`save_ensemble`)."""

    model: RankingModule
    transform: Transform
    config: RunConfig
    meta: dict[str, Any]
    ensemble_size = 0
    initial = spec = None
    scorer = property(lambda self: self)

    @property
    def n_features(self) -> int:
        return int(self.meta["n_features"])

    @property
    def reads_row_order(self) -> bool:
        """Whether its scores depend on the row order of a list (the registry entry's answer)."""
        return get_model(self.config.model).reads_row_order(self.config.model_params)

    def check_data(self, data: RankingData) -> None:
        check_feature_count(data, self.n_features)
        problem = missing_problem(self.config, data)  # NaN only under train.missing = "indicator"
        if problem is not None:
            raise ValueError(problem)

    def predict(self, data: RankingData, *, init_scores: np.ndarray | None = None) -> np.ndarray:
        self.check_data(data)
        data, tc = self.transform.transform(data), self.config.train
        return predict(
            self.model,
            data,
            init_scores=init_scores,
            batch_size=tc.eval_batch_size,
            max_memory_bytes=tc.max_memory_bytes,
        )

    def save_model_dir(
        self, directory: Path, config: RunConfig, *, layout: RankingData, **saved: Any
    ) -> Path:
        """:func:`save_checkpoint` of the model, its normalizer and ``config``'s metric conventions
        (``saved``: its ``summary``, ``extra`` and ``rerank``)."""
        conv = metric_convention("standard", no_relevant=config.train.no_relevant).to_dict()
        return save_checkpoint(
            directory, self.model, config, self.transform, train_data=layout, conventions=conv, **saved
        )


def save_checkpoint(
    directory: str | Path,
    model: Any,
    config: RunConfig,
    transform: Transform,
    *,
    train_data: RankingData,
    summary: dict[str, Any] | None = None,
    conventions: dict[str, Any] | None = None,
    rerank: RerankSpec | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write weights, metadata and the resolved config into ``directory``; returns the directory.

    ``extra``: more JSON-ready entries for ``ctxrank.json`` (e.g. ``"table"``, ``"split"``); they may
    not replace the standard keys.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    atomic_write(directory / WEIGHTS_FILE, lambda tmp: safetensors.torch.save_file(state, str(tmp)))
    inner = [] if rerank is None else [f"{rerank.dir}/{META_FILE}"]  # saved before this model
    meta = {
        "format_version": FORMAT_VERSION,
        "kind": "torch",
        "ctxrank_version": __version__,
        "torch_version": torch.__version__,
        "model": config.model,
        "model_config": _jsonable(dataclasses.asdict(model.config)),
        "loss": config.loss_name,
        "n_features": train_data.n_features,
        "feature_names": list(train_data.feature_names),
        "categorical_names": list(train_data.categorical_names),
        "categorical_cardinalities": list(model.categorical_cardinalities),
        "transform": transform.to_dict(),
        "run_config": config.to_dict(),
        "metric_conventions": conventions or {},
        "training": summary or {},
        "rerank": None if rerank is None else rerank.to_json(),
        DIGESTS: _digests(directory, [WEIGHTS_FILE, *inner]),
    }
    _write_meta(directory, meta, config, extra)
    return directory


def _digests(directory: Path, names: list[str]) -> dict[str, str]:
    """``{name: SHA-256}`` of the files ``names`` (relative paths) in ``directory``, as written."""
    return {name: sha256_file(directory / name) for name in names}


def _write_meta(
    directory: Path, meta: dict[str, Any], config: RunConfig, extra: dict[str, Any] | None
) -> None:
    """``ctxrank.json`` (``meta`` plus ``extra``, which may not replace a standard entry) and
    ``config.toml`` (the resolved run config), both written atomically."""
    if extra:
        clash = sorted(set(extra) & set(meta))
        if clash:
            raise ValueError(f"extra metadata may not replace the standard entries {clash}")
        meta.update(extra)
    write_json(directory / META_FILE, meta)
    atomic_write(directory / "config.toml", lambda tmp: tmp.write_text(to_toml(config.to_dict())))


def save_ensemble(
    directory: str | Path,
    config: RunConfig,
    members: list[str],
    predictor: Any,
    summary: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> Path:
    """The directory of a seed ensemble (``ctxrank.training.ensemble``): ``ctxrank.json`` with
    ``kind = "ensemble"`` naming the member directories inside it (already saved), and ``config.toml``."""
    directory = Path(directory)
    meta = {
        "format_version": FORMAT_VERSION,
        "kind": "ensemble",
        "ctxrank_version": __version__,
        "torch_version": torch.__version__,
        "model": config.model,
        "members": list(members),
        "n_features": predictor.n_features,
        "run_config": config.to_dict(),
        "training": summary,
        DIGESTS: _digests(directory, [f"{name}/{META_FILE}" for name in members]),
    }
    _write_meta(directory, meta, config, extra)
    return directory


def _load_ensemble(directory: Path, meta: dict[str, Any]) -> EnsemblePredictor:
    members = meta.get("members")
    if not isinstance(members, list) or not members:
        raise ValueError(f"{directory}: an ensemble's ctxrank.json must list its member directories")
    for name in members:
        if not isinstance(name, str) or not MEMBER_PATTERN.fullmatch(name):
            raise ValueError(f"{directory}: member {name!r} is not a member directory name (member-N)")
    where = directory / META_FILE
    return EnsemblePredictor(
        [
            _load(directory / name, nested=False, sha256=recorded_digest(meta, f"{name}/{META_FILE}", where))
            for name in members
        ]
    )


def load_model(directory: str | Path):
    """Rebuild a saved model for inference (``.predict(data)`` on raw, un-normalized data).

    The directory is untrusted input: every value of ``ctxrank.json`` is type- and range-checked before
    anything is built from it, the safetensors header must describe exactly the tensors of the model
    the config builds (checked on PyTorch's ``meta`` device, which allocates nothing) before the real
    model is built, ``rerank.dir`` must name a directory inside this one holding a model that does not
    re-rank itself, and only regular files are read (see ``_modeldir`` and SECURITY.md).

    Raises:
        ValueError: not a model directory, unknown format or model, metadata out of range, weights
            that do not fit the model; one line naming the file and the key.
    """
    return _load(Path(directory), nested=False, top=True)


def _load(directory: Path, *, nested: bool, sha256: str | None = None, top: bool = False):
    """The model of ``directory`` (``sha256``: of its ``ctxrank.json``, as the enclosing model recorded
    it; ``nested``: an initial ranker, which may not re-rank; ``top``: warn, once loaded, when no digest
    is recorded)."""
    meta = read_meta(directory, sha256=sha256)
    where = directory / META_FILE
    kind = meta.get("kind")
    if meta.get("table") is not None:
        _check_table(where, meta["table"])
    baseline = baseline_of_kind(kind) if isinstance(kind, str) else None  # lightgbm, ranksvm, adarank
    if baseline is not None:
        return baseline.load(directory)
    if kind not in ("torch", "ensemble"):
        raise ValueError(
            f"{where}: unknown model kind {short(kind)} (expected torch, lightgbm, ranksvm or adarank)"
        )
    model = _load_ensemble(directory, meta) if kind == "ensemble" else _load_neural(directory, meta, nested)
    if top and meta.get(DIGESTS) is None:
        warn_unchecked(directory)
    return model


def _load_neural(directory: Path, meta: dict[str, Any], nested: bool) -> TorchPredictor | RerankPredictor:
    """A neural model, re-ranking the initial ranker in ``rerank.dir`` when it names one."""
    where = directory / META_FILE
    predictor = _load_torch(directory, meta)
    rerank = meta.get("rerank")
    if rerank is None:
        return predictor
    if nested:
        raise ValueError(
            f"{where}: 'rerank': the initial ranker of a re-ranking model may not re-rank itself "
            "(rerank.dir nests at most one level)"
        )
    spec = RerankSpec.from_json(rerank, where)
    inside = _inside(directory, spec.dir)
    initial = _load(inside, nested=True, sha256=recorded_digest(meta, f"{spec.dir}/{META_FILE}", where))
    extra = spec.n_extra_features
    if int(initial.n_features) + extra != predictor.n_features:
        raise ValueError(
            f"{where}: 'n_features' is {predictor.n_features} but the initial ranker in 'rerank.dir' reads "
            f"{initial.n_features} features (+ {extra} rank/score feature(s))"
        )
    return RerankPredictor(initial, predictor, spec)


def _load_torch(directory: Path, meta: dict[str, Any]) -> TorchPredictor:
    """A neural model: metadata checked, weights header matched on the meta device, then built."""
    where = directory / META_FILE
    name = meta_str(meta, "model", where)
    if name not in MODELS or MODELS[name].kind != "torch":  # a model saved as a torch checkpoint
        raise ValueError(f"{where}: 'model' {short(name)} is not a neural model; valid: {', '.join(MODELS)}")
    n_features = meta_int(meta, "n_features", where, 1, MAX_FEATURES)
    meta_strings(meta, "feature_names", where, n_features)
    params = check_config_values(meta.get("model_config"), where, "model_config")
    cards = meta_cardinalities(meta, where, default=[])
    try:
        config = RunConfig.from_saved(meta_dict(meta, "run_config", where))
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise ValueError(f"{where}: 'run_config': {_one_line(exc)}") from None
    transform = _transform(where, meta, n_features)
    weights = directory / WEIGHTS_FILE
    digest = recorded_digest(meta, WEIGHTS_FILE, where)
    data = read_regular(weights, MAX_WEIGHTS_BYTES, "weights file", sha256=digest)
    header = _safetensors_header(weights, data)
    try:
        with torch.device("meta"):  # shapes only: a config asking for 4 TB allocates nothing here
            skeleton = build_model(config, n_features, cards, name=name, params=params)
    except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
        raise ValueError(f"{where}: 'model_config': {_one_line(exc)}") from None
    _match_header(weights, header, skeleton.state_dict())
    del skeleton
    model = build_model(config, n_features, cards, name=name, params=params)  # fits the file's size
    try:
        state = safetensors.torch.load(data)
    except (OSError, safetensors.SafetensorError) as exc:
        raise ValueError(f"{weights}: cannot read weights ({_one_line(exc)})") from None
    del data
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # pragma: no cover - the header check above matched names and shapes
        raise ValueError(f"{weights}: weights do not fit the model ({_one_line(exc)})") from None
    model.eval()
    return TorchPredictor(model=model, transform=transform, config=config, meta=meta)


def _transform(where: Path, meta: dict[str, Any], n_features: int) -> Transform:
    try:
        transform = Transform.from_dict(meta_dict(meta, "transform", where))
    except (TypeError, KeyError, AttributeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{where}: 'transform': {_one_line(exc)}") from None
    fitted = getattr(transform, "n_features_in_", None)
    if fitted is not None and fitted != n_features:
        raise ValueError(
            f"{where}: 'transform' was fitted on {fitted} features, 'n_features' is {n_features}"
        )
    return transform


def _check_table(where: Path, table: Any) -> None:
    from ctxrank.data.table import TableSpec  # pandas: loaded for a model trained on a table only

    try:
        TableSpec.from_dict(table)
    except (TypeError, KeyError, AttributeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{where}: 'table': {_one_line(exc)}") from None


def _inside(directory: Path, rel: str) -> Path:
    """``directory / rel`` for ``rerank.dir``: relative, no ``..``, and (symlinks resolved) strictly
    inside ``directory``."""
    where = directory / META_FILE
    parts = PurePosixPath(rel).parts
    if PurePosixPath(rel).is_absolute() or Path(rel).is_absolute() or ".." in parts or "\x00" in rel:
        raise ValueError(f"{where}: 'rerank.dir' must be a relative path without '..', got {short(rel)}")
    target = directory / rel
    base = directory.resolve()
    real = target.resolve()
    if real == base or base not in real.parents:
        raise ValueError(
            f"{where}: 'rerank.dir' {short(rel)} resolves to {real}, which is not inside the model directory"
        )
    return target


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                "BOOL": 1}  # fmt: skip


def _safetensors_header(path: Path, data: bytes) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (dtype, shape)}`` from a safetensors file's header, every entry checked against the
    file's size (the bytes a shape declares are bytes the file holds)."""
    if len(data) < 8:
        raise ValueError(f"{path}: cannot read weights (not a safetensors file: {len(data)} bytes)")
    n = int.from_bytes(data[:8], "little")
    body = len(data) - 8 - n
    if n > min(len(data) - 8, 2**27):
        raise ValueError(
            f"{path}: cannot read weights (not a safetensors file: a {n:,}-byte header in "
            f"{len(data):,} bytes)"
        )
    try:
        header = json.loads(data[8 : 8 + n].decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        text = _one_line(exc)
        raise ValueError(f"{path}: cannot read weights (unreadable safetensors header: {text})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header is not a JSON object")
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        ok = isinstance(entry, dict) and entry.get("dtype") in _DTYPE_BYTES
        shape, offsets = (entry.get("shape"), entry.get("data_offsets")) if ok else (None, None)
        ok = ok and isinstance(shape, list) and len(shape) <= 8
        ok = ok and all(type(d) is int and 0 <= d < 2**48 for d in shape)
        ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
        if not ok or not 0 <= offsets[0] <= offsets[1] <= body:
            raise ValueError(
                f"{path}: tensor {short(name)}: malformed safetensors header entry {short(entry)}"
            )
        if math.prod(shape) * _DTYPE_BYTES[entry["dtype"]] != offsets[1] - offsets[0]:
            raise ValueError(f"{path}: tensor {short(name)}: its shape {shape} does not match its bytes")
        out[name] = (entry["dtype"], tuple(shape))
    return out


def _match_header(path: Path, header: dict[str, tuple[str, tuple[int, ...]]], state: dict[str, Any]) -> None:
    """The tensors the config builds (names, shapes, dtypes) must be exactly those of the file."""
    names = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
             "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}  # fmt: skip
    missing = sorted(set(state) - set(header))
    unexpected = sorted(set(header) - set(state))
    if missing or unexpected:
        raise ValueError(
            f"{path}: weights do not fit the model of ctxrank.json (missing {short(missing)}, "
            f"unexpected {short(unexpected)})"
        )
    for name, tensor in state.items():
        want = (names.get(str(tensor.dtype).removeprefix("torch."), "?"), tuple(tensor.shape))
        if header[name] != want:
            raise ValueError(
                f"{path}: tensor {name!r} is {header[name][0]} {list(header[name][1])} in the file but the "
                f"model of ctxrank.json needs {want[0]} {list(want[1])} ('model_config', 'n_features')"
            )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

