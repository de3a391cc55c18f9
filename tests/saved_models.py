"""Tiny saved model directories of several kinds (a neural model, a re-ranking model, LambdaMART,
RankSVM, and a seed ensemble of two re-ranking models), built once per test module, for the tests that
tamper with model directories (``test_modeldir.py``, ``e2e/test_fuzz_untrusted.py``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

KINDS = ("mlp", "rerank", "lambdamart", "ranksvm")
_LGB = {"n_estimators": 2, "num_leaves": 3, "min_data_in_leaf": 2, "early_stopping_rounds": None}


def build(root: Path) -> dict[str, Path]:
    """``{kind: directory}`` of freshly trained tiny models under ``root``."""
    from ctxrank.config import RerankConfig, RunConfig, TrainConfig
    from ctxrank.training.run import run_training
    from tests.conftest import make_ranking_data

    data = make_ranking_data(n_queries=12, n_features=3)
    tc = TrainConfig(max_epochs=1, batch_size=8)
    rerank = RunConfig(
        model="qilcm",
        model_params={"encoder_width": 4, "att_hidden": [4], "rank_hidden": [4]},
        train=tc,
        rerank=RerankConfig(initial="lambdamart", top_k=5, initial_params=_LGB),
    )
    configs = {
        "mlp": RunConfig(model="mlp", model_params={"hidden": [4]}, train=tc),
        "rerank": rerank,
        "lambdamart": RunConfig(model="lambdamart", model_params=_LGB),  # baselines take no epochs
        "ranksvm": RunConfig(model="ranksvm", model_params={"C": 1.0}),
        "ensemble": dataclasses.replace(rerank, ensemble=2),  # not in KINDS: members of seeds 0 and 1
    }
    out = {}
    for kind, config in configs.items():
        run_training(config, data, data, out=root / kind, progress=False)
        out[kind] = root / kind
    return out


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def read(directory: Path) -> dict:
    return json.loads((directory / "ctxrank.json").read_text())


def write(directory: Path, meta: object) -> None:
    (directory / "ctxrank.json").write_text(json.dumps(meta))


def rehash(directory: Path) -> None:
    """Record in ``ctxrank.json`` the SHA-256 of the files its loader reads as they are now (the
    weights, the initial ranker's and the members' ``ctxrank.json``): what an attacker who can write the
    directory does, so that the checks behind the digests are reached."""
    meta = read(directory)
    rerank = meta.get("rerank") if isinstance(meta.get("rerank"), dict) else {}
    names = ["model.safetensors", *(f"{m}/ctxrank.json" for m in meta.get("members", []))]
    if isinstance(rerank.get("dir"), str):
        names.append(f"{rerank['dir']}/ctxrank.json")
    found = [n for n in names if (directory / n).is_file()]
    meta["sha256"] = {n: hashlib.sha256((directory / n).read_bytes()).hexdigest() for n in found}
    write(directory, meta)


def write_model_text(directory: Path, text: str) -> None:
    """Replace a LightGBM model's ``model.txt`` and recompute its SHA-256 in ``ctxrank.json`` (what an
    attacker who can write the directory does)."""
    data = text.encode()
    (directory / "model.txt").write_bytes(data)
    meta = read(directory)
    meta["model_sha256"] = hashlib.sha256(data).hexdigest()
    write(directory, meta)
