"""Saved models: a directory with ``model.safetensors`` (weights) and ``ctxrank.json`` (everything else).

``ctxrank.json`` records the model name and config, the loss, the feature count and names, the
normalizer state (JSON), the metric conventions, the ctxrank and torch versions and the training
summary and, for a model trained on a table (CSV / Parquet), the table spec under ``"table"`` (column
names and the fitted categorical encoder, so ``predict`` reads new files the same way) and the
train/valid/test split of ``ctxrank train --data FILE`` under ``"split"``; ``config.toml`` is the
resolved run config, for repeating the run. Nothing is pickled:
loading a checkpoint reads JSON and safetensors only, so it cannot execute code. Files are written
atomically (temporary file, fsync, rename).

The baselines (``registry.MODELS`` entries that are a ``registry.Baseline``) save their own directories,
told apart by ``kind`` in ``ctxrank.json``: ``"lightgbm"`` (LambdaMART, plus LightGBM's text
``model.txt``), ``"ranksvm"`` and ``"adarank"`` (everything in ``ctxrank.json``); :func:`load_model`
dispatches on it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ctxrank._io import atomic_write, to_toml, write_json
from ctxrank._modeldir import FORMAT_VERSION, META_FILE, read_meta
from ctxrank.config import RunConfig
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.transforms import Transform
from ctxrank.models.residual import Residual
from ctxrank.registry import baseline_of_kind, make_model
from ctxrank.training.ensemble import MEMBER_PATTERN, EnsemblePredictor
from ctxrank.training.predict import TorchPredictor
from ctxrank.training.rerank import RerankPredictor

__all__ = [
    "FORMAT_VERSION",
    "META_FILE",
    "WEIGHTS_FILE",
    "load_model",
    "read_meta",
    "save_checkpoint",
    "save_ensemble",
    "update_meta",
]

WEIGHTS_FILE = "model.safetensors"


def save_checkpoint(
    directory: str | Path,
    model: Any,
    config: RunConfig,
    transform: Transform,
    *,
    train_data: RankingData,
    summary: dict[str, Any] | None = None,
    conventions: dict[str, Any] | None = None,
    rerank: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write weights, metadata and the resolved config into ``directory``; returns the directory.

    ``extra``: more JSON-ready entries for ``ctxrank.json`` (e.g. ``"table"``, ``"split"``); they may
    not replace the standard keys.
    """
    import safetensors.torch
    import torch

    from ctxrank import __version__

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    atomic_write(directory / WEIGHTS_FILE, lambda tmp: safetensors.torch.save_file(state, str(tmp)))
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
        "rerank": rerank,
    }
    if extra:
        clash = sorted(set(extra) & set(meta))
        if clash:
            raise ValueError(f"extra metadata may not replace the standard entries {clash}")
        meta.update(extra)
    write_json(directory / META_FILE, meta)
    atomic_write(directory / "config.toml", lambda tmp: tmp.write_text(to_toml(config.to_dict())))
    return directory


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
    import torch

    from ctxrank import __version__

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
    }
    if extra:
        clash = sorted(set(extra) & set(meta))
        if clash:
            raise ValueError(f"extra metadata may not replace the standard entries {clash}")
        meta.update(extra)
    write_json(directory / META_FILE, meta)
    atomic_write(directory / "config.toml", lambda tmp: tmp.write_text(to_toml(config.to_dict())))
    return directory


def _load_ensemble(directory: Path, meta: dict[str, Any]) -> EnsemblePredictor:
    members = meta.get("members")
    if not isinstance(members, list) or not members:
        raise ValueError(f"{directory}: an ensemble's ctxrank.json must list its member directories")
    for name in members:
        if not isinstance(name, str) or not MEMBER_PATTERN.fullmatch(name):
            raise ValueError(f"{directory}: member {name!r} is not a member directory name (member-N)")
    return EnsemblePredictor([load_model(directory / name) for name in members])


def update_meta(directory: str | Path, entries: dict[str, Any]) -> None:
    """Add JSON-ready ``entries`` to a saved model's ``ctxrank.json`` (atomically), e.g. after a
    baseline wrote its own metadata."""
    directory = Path(directory)
    meta = read_meta(directory)
    meta.update(entries)
    write_json(directory / META_FILE, meta)


def load_model(directory: str | Path):
    """Rebuild a saved model for inference (``.predict(data)`` on raw, un-normalized data).

    Raises:
        ValueError: not a model directory, unknown format or model, weights that do not fit the model.
    """
    directory = Path(directory)
    meta = read_meta(directory)
    kind = meta.get("kind")
    baseline = baseline_of_kind(kind)  # lightgbm, ranksvm, adarank
    if baseline is not None:
        return baseline.load(directory)
    if kind == "ensemble":
        return _load_ensemble(directory, meta)

    import safetensors
    import safetensors.torch

    if kind != "torch":
        raise ValueError(f"{directory}: unknown model kind {kind!r}")
    config = RunConfig.from_dict(meta["run_config"])
    model = make_model(
        meta["model"],
        int(meta["n_features"]),
        meta["model_config"],
        categorical_cardinalities=meta.get("categorical_cardinalities", ()),
    )
    if config.rerank.residual:
        model = Residual(model)
    weights = directory / WEIGHTS_FILE
    try:
        state = safetensors.torch.load_file(str(weights))
    except (OSError, safetensors.SafetensorError) as exc:
        raise ValueError(f"{weights}: cannot read weights ({exc})") from None
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatch
        raise ValueError(f"{weights}: weights do not fit the model ({exc})") from None
    if missing or unexpected:
        raise ValueError(
            f"{weights}: weights do not fit the model (missing {missing}, unexpected {unexpected})"
        )
    model.eval()
    transform = Transform.from_dict(meta["transform"])
    predictor = TorchPredictor(model=model, transform=transform, config=config, meta=meta)
    if meta.get("rerank"):
        rerank = meta["rerank"]
        return RerankPredictor(load_model(directory / rerank["dir"]), predictor, rerank)
    return predictor


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
