"""Writing and checking an exported file: :func:`export_model` traces the module a model serves with
(:mod:`ctxrank.export.wrappers`, :mod:`ctxrank.export.pipeline`), writes it as TorchScript or ONNX
and accepts it only when the written file reproduces ``predict`` (see :mod:`ctxrank.export`)."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ctxrank._io import atomic_write
from ctxrank.baselines.lambdamart import LambdaMART
from ctxrank.data.ranking_data import RankingData
from ctxrank.export.pipeline import INITIAL_SCORES, RerankServing, splice_trees
from ctxrank.export.wrappers import ServingModel, serving_model
from ctxrank.training.checkpoint import load_model, read_meta
from ctxrank.training.ensemble import member_dir
from ctxrank.training.rerank_spec import RerankSpec

__all__ = [
    "CHECK_ATOL",
    "CHECK_MAX_TOP_K",
    "CHECK_RTOL",
    "EXPORT_FORMATS",
    "META_NAME",
    "ONNX_OPSET",
    "ExportResult",
    "check_tolerance",
    "example_inputs",
    "export_model",
]

EXPORT_FORMATS = ("torchscript", "onnx")
ONNX_OPSET = 17
#: the written file must give predict's scores within ATOL + RTOL * max |score| of each list of the
#: check batch: above float32 rounding amplified by the models' own conditioning (QILCM's eq. 8 where
#: a context value is near 0: 1e-5 relative, docs/export.md), far below what a trace that does not
#: generalize gives (an unrolled DLCM loop: 0.5); docs/export.md and docs/serving.md state it
CHECK_ATOL, CHECK_RTOL = 1e-4, 1e-4
#: a re-ranking pipeline is checked on lists of top_k + 3 items (the cut exercised) up to this top_k
CHECK_MAX_TOP_K = 200
META_NAME = "ctxrank.json"  # TorchScript extra file / ONNX metadata key with the input description


# ------------------------------------------------------------------------------------- export
@dataclass
class ExportResult:
    """What :func:`export_model` wrote.

    Attributes:
        path: the file.
        format: ``"torchscript"`` or ``"onnx"``.
        inputs: ``(name, shape, dtype, meaning)`` per input, in call order; output ``scores``.
        version: ``"TorchScript (torch X)"`` or ``"ONNX opset N"``.
        size: file size in bytes.
        max_abs_diff: largest score difference between the file and ``predict`` on the check batch
            (and on it with each list's rows shuffled, when ``checked_shuffled``).
        checked_shuffled: the model does not read the row order, and the check shuffled the rows.
        notes: what the caller must know (re-ranking inputs).
        meta: the JSON stored in the file (``ctxrank.json`` extra file / ONNX metadata).
    """

    path: Path
    format: str
    inputs: list[tuple[str, str, str, str]]
    version: str
    size: int
    max_abs_diff: float
    checked_shuffled: bool = False
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def example_inputs(serving: ServingModel, batch: int, length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A random batch for tracing and checking: raw features (B, L, F) that normalize to U(0.1, 0.9)
    (:meth:`FeatureNormalizer.raw_like`), prefix masks with one full row and the others shorter (at
    least 1 item), codes (B, L, C) in each column's vocabulary."""
    g = torch.Generator().manual_seed(seed)
    features = serving.normalizer.raw_like(torch.rand(batch, length, serving.n_features, generator=g))
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    lengths[0] = length
    mask = torch.arange(length)[None, :] < lengths[:, None]
    features = torch.where(mask[..., None], features, torch.zeros_like(features))
    if not serving.n_categorical:
        return features, mask
    cards = serving.model.categorical_cardinalities
    codes = torch.stack([torch.randint(0, c, (batch, length), generator=g) for c in cards], dim=-1)
    return features, mask, torch.where(mask[..., None], codes, torch.zeros_like(codes))


def _describe_inputs(serving: ServingModel) -> list[tuple[str, str, str, str]]:
    F_, C = serving.n_features, serving.n_categorical
    rows = [
        ("features", f"[B, L, {F_}]", "float32", "raw features (normalized inside)"),
        ("mask", "[B, L]", "bool", "True = real item, real items first in each row"),
    ]
    if C:
        rows.append(("categorical", f"[B, L, {C}]", "int64", "codes of the saved encoder, 0 = unknown"))
    return rows


def _max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float((a - b).abs()[mask].max()) if bool(mask.any()) else 0.0


def check_tolerance(ref: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The largest score difference allowed between a file and ``predict``, per list: ``CHECK_ATOL +
    CHECK_RTOL * max |score|`` over the list's real items, (B, 1) (docs/export.md, "What is
    guaranteed")."""
    top = torch.where(mask, ref.abs(), torch.zeros_like(ref)).amax(dim=1, keepdim=True)
    return CHECK_ATOL + CHECK_RTOL * top.double()


def _check(
    ref: torch.Tensor, got: torch.Tensor, mask: torch.Tensor, fmt: str, model: str, *, shuffled: bool = False
) -> float:
    """The largest difference of ``got`` from ``predict``'s ``ref`` (B, L); a ValueError saying what
    to do where a list's exceeds :func:`check_tolerance`."""
    excess = (got - ref).abs().double() - check_tolerance(ref, mask)
    bad = mask & ~(excess <= 0)  # NaN too
    if bool(bad.any()):
        b = int(bad.any(dim=1).nonzero()[0, 0])
        diff = float((got[b] - ref[b]).abs()[mask[b]].max())
        tol = float(check_tolerance(ref, mask)[b, 0])
        where = "with each list's rows shuffled " if shuffled else ""
        cause = (
            "its scores depend on the order of the rows of a list, which this model must not read"
            if shuffled
            else "the traced graph does not generalize to this batch (data-dependent control flow?) "
            "or rounds far more than float32 does"
        )
        raise ValueError(
            f"the exported {fmt} does not reproduce `predict` of this {model} on a batch of shape "
            f"{tuple(mask.shape)} {where}(list {b}: max abs score difference {diff:.3g} > the "
            f"tolerance {CHECK_ATOL:g} + {CHECK_RTOL:g} * max |score| = {tol:.3g}): {cause}; not "
            "written. No option changes this check: report it with the model directory's ctxrank.json"
        )
    return _max_diff(ref, got, mask)


def export_model(model_dir: str | os.PathLike, fmt: str, out: str | os.PathLike) -> ExportResult:
    """Export the model saved in ``model_dir`` to the file ``out`` as ``fmt`` (see :data:`EXPORT_FORMATS`).

    The model is traced on a batch of shape (3, 5); the written file is loaded back and run on a batch
    of shape (4, 7), built as a caller of ``predict`` builds it (the model's feature and categorical
    column names), and must give ``load_model(model_dir).predict``'s scores within
    :func:`check_tolerance` (``CHECK_ATOL + CHECK_RTOL * max |score|`` per list); a model that does
    not read the row order must give them too with each list's rows shuffled. Only then is ``out``
    replaced (atomically); on any error it is left as it was.

    Raises:
        ValueError: unknown format, not a model directory, a baseline, a normalizer that cannot be
            exported, a missing ONNX package, an export failure, or a file that does not reproduce the
            model (e.g. a trace that does not generalize to other batch shapes).
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ValueError(f"{model_dir}: no such model directory")
    meta = read_meta(model_dir)
    predictor = load_model(model_dir)
    initial = _initial_ranker(predictor)
    serving = _serving_graph(predictor, initial, fmt)
    file_meta, notes = _file_meta(serving, meta, predictor, model_dir)
    model_name = str(file_meta.get("model"))
    if fmt == "onnx":  # before any work: both are needed (export, check)
        _need("onnx")
        _need("onnxruntime")
    pipeline = initial is not None
    traced_inputs, check_inputs, run_inputs = _check_batches(serving, predictor, file_meta, pipeline)
    # the reference is predict's, on the batch built as a caller of predict builds it (names included)
    ref = _predict_batch(predictor, run_inputs, file_meta)
    # an order-free model's file must give each row its score wherever the row is in its list
    # (a re-ranking pipeline's cut orders the items by the order-free tie rule)
    shuffled = None if predictor.reads_row_order else _shuffle_rows(run_inputs, seed=2)
    diff = math.nan

    def write(tmp: Path) -> None:
        nonlocal diff
        with warnings.catch_warnings():
            # TorchScript and the TorchScript-based ONNX exporter are deprecated upstream (docs/export.md)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
            # torch.nn.GRU (DLCM gru="torch"): its initial state follows the batch size in the trace,
            # and the check below runs another batch size
            warnings.filterwarnings("ignore", message=r"Exporting a model to ONNX with a batch_size other")
            if fmt == "torchscript":
                _write_torchscript(serving, traced_inputs, check_inputs, tmp, file_meta)
            else:
                _write_onnx(serving, traced_inputs, tmp, file_meta, initial)
            got = _run_written(tmp, fmt, run_inputs)
            got_shuffled = None if shuffled is None else _run_written(tmp, fmt, shuffled[0])
        diff = _check(ref, got, run_inputs[1], fmt, model_name)
        if shuffled is not None:
            back = torch.zeros_like(got_shuffled).scatter_(1, shuffled[1], got_shuffled)
            diff = max(diff, _check(ref, back, run_inputs[1], fmt, model_name, shuffled=True))

    out = Path(out)
    atomic_write(out, write)
    return ExportResult(
        path=out,
        format=fmt,
        inputs=_describe_inputs(serving),
        version=f"TorchScript (torch {torch.__version__})"
        if fmt == "torchscript"
        else f"ONNX opset {ONNX_OPSET}",
        size=out.stat().st_size,
        max_abs_diff=diff,
        checked_shuffled=shuffled is not None,
        notes=notes,
        meta=file_meta,
    )


def _serving_graph(predictor: Any, initial: tuple[LambdaMART, RerankSpec] | None, fmt: str) -> nn.Module:
    """The module the file holds: the model's :func:`serving_model`, inside a :class:`RerankServing`
    for a re-ranking model (``initial``: :func:`_initial_ranker`'s), which only ONNX can hold."""
    if initial is not None and fmt != "onnx":
        raise ValueError(
            "a re-ranking model exports as one ONNX graph of the whole pipeline (LightGBM's trees, the "
            f"top-k cut, the re-ranker, the merge): use --format onnx; {fmt} cannot hold LightGBM's trees"
        )
    serving = serving_model(predictor).eval()
    return serving if initial is None else RerankServing(serving, initial[0].n_features, initial[1]).eval()


def _check_batches(
    serving: nn.Module, predictor: Any, file_meta: dict[str, Any], pipeline: bool
) -> tuple[tuple[torch.Tensor, ...], ...]:
    """(the traced batch (3, 5), the check batch (4, 7), the check batch as the written file takes it).
    A re-ranking ``pipeline``'s batches hold the trees' scores, an input of the traced module that the
    written file computes itself; its check lists have ``top_k + 3`` items (the cut is exercised) up to
    ``top_k`` = :data:`CHECK_MAX_TOP_K`."""
    if not pipeline:
        traced, check = example_inputs(serving, 3, 5, seed=0), example_inputs(serving, 4, 7, seed=1)
        return traced, check, check
    traced = _pipeline_inputs(serving, predictor, file_meta, 3, 5, seed=0)
    length = 7 if serving.top_k > CHECK_MAX_TOP_K else serving.top_k + 3
    check = _pipeline_inputs(serving, predictor, file_meta, 4, length, seed=1)
    return traced, check, check[:2] + check[3:]  # without initial_scores


def _initial_ranker(predictor: Any) -> tuple[LambdaMART, RerankSpec] | None:
    """(LambdaMART, re-rank settings) of a re-ranking model or ensemble; None otherwise."""
    initial = predictor.initial
    if initial is None:
        return None
    if not isinstance(initial, LambdaMART):  # validates the saved directory's initial ranker
        raise ValueError(
            f"the initial ranker is a {type(initial).__name__}; only LambdaMART's trees are exported"
        )
    if initial.list_features != "none":  # the trees read per-list z-scores the graph does not compute
        raise ValueError(
            f"the initial LambdaMART reads list_features = {initial.list_features!r}; only LambdaMART "
            "on the features as given is exported (train it with list_features = 'none')"
        )
    return initial, predictor.spec


def _pipeline_inputs(
    serving: RerankServing, predictor: Any, file_meta: dict[str, Any], batch: int, length: int, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """A random batch for a re-ranking pipeline: ``(features, mask, initial_scores[, categorical])`` as
    :func:`example_inputs` builds them (raw features from the re-ranker's normalizer, its first F
    columns), with ties: each list's items 1 and 2 copy item 0 (same initial score, identical
    features) and item 3 copies item 0's features but one (a tie of the trees' scores wherever that
    feature is not split on); ``initial_scores`` are LightGBM's for the real items, 0 at padding."""
    features, mask, *codes = example_inputs(serving.reranker, batch, length, seed)
    real = mask[..., None]
    features = features[..., : serving.n_features].clone()
    n_copy = min(3, length)
    features[:, 1:n_copy] = features[:, :1]
    if length > 3 and serving.n_features > 1:
        features[:, 3, 1:] = features[:, 0, 1:]
    features = torch.where(real, features, torch.zeros_like(features))
    codes = codes[0].clone() if codes else None
    if codes is not None:
        codes[:, 1:n_copy] = codes[:, :1]
        codes = torch.where(real, codes, torch.zeros_like(codes))
    data = _batch_data(features, mask, codes, file_meta)
    initial = _initial_ranker(predictor)[0]
    scores = torch.zeros(batch, length, dtype=torch.float64)
    scores[mask] = torch.from_numpy(initial.predict(data))
    return (features, mask, scores) + ((codes,) if codes is not None else ())


def _batch_data(
    features: torch.Tensor, mask: torch.Tensor, codes: torch.Tensor | None, file_meta: dict[str, Any]
) -> RankingData:
    """The real items of a padded batch as RankingData, one query a row, with the model's feature and
    categorical column names and cardinalities (the file's metadata): what ``predict`` gets from a
    reader of the user's table."""
    lengths = mask.sum(dim=1).numpy()
    names = tuple(str(n) for n in file_meta.get("feature_names") or ())
    categorical = {}
    if codes is not None:
        categorical = dict(
            categorical=codes[mask].numpy().astype(np.int64),
            categorical_names=tuple(str(c) for c in file_meta["categorical_names"]),
            categorical_cardinalities=tuple(int(c) for c in file_meta["categorical_cardinalities"]),
        )
    return RankingData(
        features=features[mask].numpy().astype(np.float32),
        labels=np.zeros(int(lengths.sum()), dtype=np.float32),
        query_ids=np.array([f"q{i}" for i in range(len(lengths))]),
        query_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        feature_names=names if len(names) == features.shape[-1] else (),
        **categorical,
    )


def _predict_batch(
    predictor: Any, inputs: tuple[torch.Tensor, ...], file_meta: dict[str, Any]
) -> torch.Tensor:
    """``predictor.predict`` (the library's whole scoring) on a padded batch -> (B, L), 0 at padding."""
    features, mask = inputs[:2]
    codes = inputs[2] if len(inputs) > 2 else None
    scores = predictor.predict(_batch_data(features, mask, codes, file_meta))
    out = torch.zeros(mask.shape, dtype=torch.float32)
    out[mask] = torch.from_numpy(np.asarray(scores, dtype=np.float32))
    return out


def _shuffle_rows(
    inputs: tuple[torch.Tensor, ...], seed: int
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """``(inputs with each list's real rows shuffled, index (B, L))``: row ``p`` of list ``b`` of the
    shuffled batch is row ``index[b, p]`` of ``inputs``. Identical rows (features and codes) keep their
    relative order: nothing can tell them apart but their place (a pipeline ranks them by it)."""
    features, mask = inputs[:2]
    codes = inputs[2] if len(inputs) > 2 else None
    rng = np.random.default_rng(seed)
    index = torch.arange(mask.shape[1]).repeat(mask.shape[0], 1)
    for b in range(mask.shape[0]):
        n = int(mask[b].sum())
        order = rng.permutation(n)
        rows = features[b, :n].numpy()
        keys = [
            rows[i].tobytes() + (b"" if codes is None else codes[b, i].numpy().tobytes()) for i in range(n)
        ]
        for key in set(keys):
            slots = [p for p in range(n) if keys[order[p]] == key]  # the group's places in the new order
            order[slots] = sorted(order[slots])
        index[b, :n] = torch.from_numpy(order)

    def gather(t: torch.Tensor) -> torch.Tensor:  # (B, L, K) rows in the shuffled order
        return torch.gather(t, 1, index[..., None].expand_as(t))

    shuffled = (gather(features), mask) + (() if codes is None else (gather(codes),))
    return shuffled, index


def _run_written(path: Path, fmt: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The written file's scores on ``inputs``; a file that fails there (e.g. a shape frozen by the
    trace) is a ValueError."""
    try:
        if fmt == "onnx":
            return torch.from_numpy(_run_onnx(path, inputs))
        with torch.no_grad():
            return torch.jit.load(str(path))(*inputs)
    except Exception as exc:
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        raise ValueError(
            f"the exported {fmt} does not reproduce the model on a batch of shape "
            f"{tuple(inputs[1].shape)}: it fails ({first}); not written"
        ) from None


def _file_meta(serving: ServingModel, meta: dict[str, Any], predictor: Any, model_dir: Path):
    """(JSON stored in the file, notes for the caller)."""
    ensemble = predictor.ensemble_size
    if ensemble:  # the inputs are every member's: the first member's directory describes them
        model_dir = model_dir / member_dir(0)
        meta, predictor = read_meta(model_dir), predictor.members[0]

    file_meta: dict[str, Any] = {
        "model": meta.get("model"),
        "ctxrank_version": meta.get("ctxrank_version"),
        "transform": meta.get("transform", {}).get("name"),
        "feature_names": meta.get("feature_names", []),
        "categorical_names": meta.get("categorical_names", []),
        "categorical_cardinalities": meta.get("categorical_cardinalities", []),
        # column -> categories; the code of vocab[col][i] is i + 1, anything else is 0 (unknown)
        "categorical_vocab": ((meta.get("table") or {}).get("encoder") or {}).get("vocab", {}),
        # NaN in features is a missing value the graph reads (train.missing = "indicator"); else refused
        "missing_values": predictor.scorer.config.train.missing == "indicator",
        "inputs": [list(r) for r in _describe_inputs(serving)],
        "output": ["scores", "[B, L]", "float32", "one score per item (padded positions arbitrary)"],
    }
    if ensemble:
        file_meta["ensemble"] = ensemble  # the scores are the mean of this many members' scores
    notes = []
    if predictor.initial is not None:
        spec = predictor.spec.exported(trees=int(predictor.initial.best_iteration_))
        n = int(predictor.initial.n_features)
        file_meta["feature_names"] = file_meta["feature_names"][:n]  # the initial ranker's: raw features
        file_meta["rerank"] = spec.to_json()
        file_meta["output"] = [
            "scores", "[B, L]", "float32",
            "-rank per item, the re-ranked top k first, then the rest in initial order (0 at padding)",
        ]  # fmt: skip
        notes.append(
            f"re-ranking model: the whole pipeline is one graph (LightGBM's {spec.trees} "
            f"trees, the top {spec.top_k} cut with ctxrank's tie rule, the re-ranker, the merge); the "
            "scores are -rank, equal to ctxrank predict's."
        )
    if not all(file_meta["feature_names"]):  # "" = fitted on unnamed arrays: the columns go by position
        file_meta["feature_names"] = []
    return file_meta, notes


def _write_torchscript(serving: ServingModel, inputs, check_inputs, path: Path, file_meta) -> None:
    try:
        with torch.no_grad():
            traced = torch.jit.trace(serving, inputs, check_inputs=[check_inputs])
    except torch.jit.TracingCheckError as exc:
        first = " ".join(line.strip() for line in str(exc).strip().splitlines()[:2])
        raise ValueError(
            f"the traced {serving.model.name} does not generalize to other batch shapes "
            f"(data-dependent control flow?); not written ({first})"
        ) from None
    torch.jit.save(traced, str(path), _extra_files={META_NAME: json.dumps(file_meta, indent=2)})


def _need(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"ONNX export needs the {module} package: pip install 'ctxrank[export]'") from None


def _write_onnx(serving: ServingModel, inputs, path: Path, file_meta, initial=None) -> None:
    """``torch.onnx.export``; a re-ranking pipeline (``initial``: LambdaMART and its re-rank settings)
    is exported with ``initial_scores`` as an input, which :func:`ctxrank.export.pipeline.splice_trees`
    then replaces by LightGBM's trees."""
    onnx = _need("onnx")
    names = [r[0] for r in _describe_inputs(serving)]
    if initial is not None:
        names.insert(2, INITIAL_SCORES)  # RerankServing.forward(features, mask, initial_scores, ...)
    try:
        torch.onnx.export(
            serving,
            inputs,
            str(path),
            input_names=names,
            output_names=["scores"],
            dynamic_axes={n: {0: "B", 1: "L"} for n in [*names, "scores"]},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
    except Exception as exc:  # an op without an ONNX form, ...
        raise ValueError(f"ONNX export of {serving.model.name} failed: {exc}") from exc
    proto = onnx.load(str(path))
    if initial is not None:
        lgbm = initial[0]
        splice_trees(proto, lgbm.booster_, lgbm.best_iteration_, lgbm.n_features_in_, lgbm.n_categorical_in_)
    _elu_as_exp(proto.graph, onnx)
    entry = proto.metadata_props.add()
    entry.key, entry.value = META_NAME, json.dumps(file_meta)
    onnx.save(proto, str(path))


def _elu_as_exp(graph: Any, onnx: Any, root: Any = None) -> int:
    """Rewrite every ``Elu`` node (in subgraphs too) as ``Where(x > 0, x, alpha * (Exp(x) - 1))``;
    returns how many. onnxruntime's ``Elu`` kernel is scalar code, its ``Exp`` vectorized: on QILCM
    (six ELU layers, 968 activations an item) the ELUs took about a quarter of a list's time before
    (benchmarks/bench_inference.py). ``Exp(x) - 1`` differs from ``expm1`` by < 1.2e-7 absolute."""
    root = graph if root is None else root
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    nodes, count = [], 0
    for node in graph.node:
        for attr in node.attribute:  # Loop / If bodies
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                count += _elu_as_exp(sub, onnx, root)
        if node.op_type != "Elu":
            nodes.append(node)
            continue
        alpha = next((a.f for a in node.attribute if a.name == "alpha"), 1.0)
        if not any(i.name == "ctxrank_one" for i in root.initializer):
            for name, value in (("ctxrank_zero", 0.0), ("ctxrank_one", 1.0)):
                root.initializer.append(numpy_helper.from_array(np.array(value, dtype=np.float32), name))
        x, y, p = node.input[0], node.output[0], f"{node.name or node.output[0]}/exp"
        negative = f"{p}_em1"
        nodes += [
            helper.make_node("Greater", [x, "ctxrank_zero"], [f"{p}_pos"], name=f"{p}_pos"),
            helper.make_node("Exp", [x], [f"{p}_exp"], name=f"{p}_exp"),
            helper.make_node("Sub", [f"{p}_exp", "ctxrank_one"], [negative], name=f"{p}_em1"),
        ]
        if alpha != 1.0:
            scale = f"{p}_alpha"
            root.initializer.append(numpy_helper.from_array(np.array(alpha, dtype=np.float32), scale))
            nodes.append(helper.make_node("Mul", [negative, scale], [f"{p}_neg"], name=f"{p}_neg"))
            negative = f"{p}_neg"
        nodes.append(helper.make_node("Where", [f"{p}_pos", x, negative], [y], name=f"{p}_where"))
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return count


def _run_onnx(path: Path, inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    ort = _need("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(["scores"], {n: t.numpy() for n, t in zip(names, inputs, strict=True)})[0]


# ------------------------------------------------------------------------------- Triton layout
#: Triton's ONNX Runtime backend: the tensor types of the exported graphs (Triton's DataType names)
_TRITON_TYPES = {"tensor(float)": "TYPE_FP32", "tensor(bool)": "TYPE_BOOL", "tensor(int64)": "TYPE_INT64"}
_TRITON_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
TRITON_MAX_BATCH = 64


def check_triton_name(name: str) -> str:
    """``name`` if it names a model of a Triton repository (its folder; letters, digits, ``_.-``)."""
    if not isinstance(name, str) or not _TRITON_NAME.fullmatch(name):
        raise ValueError(f"Triton model name: expected 1-128 letters, digits, '_', '.' or '-', got {name!r}")
    return name


def triton_config(path: str | os.PathLike, name: str, max_batch_size: int = TRITON_MAX_BATCH) -> str:
    """The ``config.pbtxt`` (Triton's ``ModelConfig`` in protobuf text) of the exported ONNX file ``path``
    for Triton's ``onnxruntime`` backend: every input and output of the graph, its first dimension
    (the lists, B) the batch dimension up to ``max_batch_size``, the others as in the graph (-1: any
    size, e.g. the items L)."""
    ort = _need("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def tensors(args: list[Any]) -> str:
        rows = []
        for arg in args:
            if arg.type not in _TRITON_TYPES:
                raise ValueError(f"{path}: tensor {arg.name!r} of type {arg.type} has no Triton type here")
            dims = ", ".join(str(d) if isinstance(d, int) else "-1" for d in arg.shape[1:])
            kind = _TRITON_TYPES[arg.type]
            rows.append(f'  {{\n    name: "{arg.name}"\n    data_type: {kind}\n    dims: [ {dims} ]\n  }}')
        return ",\n".join(rows)

    return (
        f'name: "{check_triton_name(name)}"\nbackend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n'
        f'default_model_filename: "model.onnx"\n'
        f"input [\n{tensors(session.get_inputs())}\n]\noutput [\n{tensors(session.get_outputs())}\n]\n"
    )


def export_triton(model_dir: str | os.PathLike, repo: str | os.PathLike, name: str) -> ExportResult:
    """Export the model saved in ``model_dir`` to ONNX (:func:`export_model`, checked) as the model
    ``name`` of the Triton model repository ``repo``: ``repo/name/1/model.onnx`` and
    ``repo/name/config.pbtxt`` (:func:`triton_config`). An existing ``repo/name`` is refused.

    Raises:
        ValueError: a bad name, an existing model folder, or any error of :func:`export_model`.
    """
    folder = Path(repo) / check_triton_name(name)
    if folder.exists():
        raise ValueError(f"{folder} exists; give another --triton-name or remove it")
    (folder / "1").mkdir(parents=True)
    try:
        result = export_model(model_dir, "onnx", folder / "1" / "model.onnx")
        text = triton_config(result.path, name)
        atomic_write(folder / "config.pbtxt", lambda tmp: tmp.write_text(text))
    except BaseException:
        for leftover in (folder / "1" / "model.onnx", folder / "config.pbtxt"):
            leftover.unlink(missing_ok=True)
        (folder / "1").rmdir()
        folder.rmdir()
        raise
    return result
