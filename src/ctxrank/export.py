"""Export a saved neural ranker for serving: a TorchScript or ONNX file that scores RAW features.

:func:`export_model` turns a model directory of ``ctxrank train`` into one file that needs neither
ctxrank nor its normalizer at serving time. The file holds a :class:`ServingModel`::

    forward(features float32 [B, L, F], mask bool [B, L][, categorical int64 [B, L, C]])
        -> scores float32 [B, L]

* ``features``: the RAW (un-normalized) features, in the model's feature order (``ctxrank.json``
  ``feature_names``); the saved normalizer (``transform``) is applied inside the graph, in float64 as
  :mod:`ctxrank.data.transforms` does, so the scores equal ``load_model(dir).predict(data)``.
* ``mask``: True = real item; real items come first in each row (the ``ListBatch`` convention; DLCM
  and DCM read the row order). Padded positions never change a real item's score or a normalization
  statistic: padded features and codes are replaced by 0 after normalization, as ``ListBatch`` pads.
* ``categorical``: only when the model was trained with categorical columns: the codes of the model's
  saved encoder (``ctxrank.json`` ``"table"``), 0 = unknown; codes outside the vocabulary count as 0.
* ``scores``: one per item; values at padded positions are arbitrary.

No registered model reads ``init_scores`` (their forward ignores them; DLCM dropped the authors'
residual), so they are never an input (``tests/test_export.py`` checks this for every model).

**Re-ranking models** (``rerank.initial = "lambdamart"``): only the neural re-ranker is exported. The
caller must build its input as :func:`ctxrank.training.rerank.prepare_split` does: score every item with the
initial ranker (LightGBM's ``DIR/initial/model.txt``), keep each query's top ``top_k`` ordered by
descending initial score (ties by input position) and append ``initial_rank`` (1-based, within the full
query) and/or ``initial_score`` as the last feature columns (``rerank`` in ``ctxrank.json`` says which).
The items cut off follow the re-ranked ones in their initial order
(:func:`ctxrank.training.rerank.merge_scores`).

**Baselines** (LambdaMART, RankSVM, AdaRank) are not torch models and are refused; LightGBM's own
``model.txt`` in a LambdaMART directory is its serving format.

How: the model's forward is traced (``torch.jit.trace``). DLCM and DCM run a recurrence whose length
is the list length; tracing would unroll it for the example's length, so their recurrences here are
TorchScript loops (:func:`torch.jit.script`) that keep the length dynamic, with the same equations as
the models (outputs agree to float32 rounding). ONNX goes through ``torch.onnx.export(dynamo=False)``
(the TorchScript-based exporter, which turns those loops into ONNX ``Loop``), opset
:data:`ONNX_OPSET`, with dynamic batch and list axes. Every export is checked: the written file is
loaded back and run on a batch of another shape than the traced one, and must match the eager model.
"""

from __future__ import annotations

import functools
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ctxrank.data.transforms import GlobalMinMax, Identity, Log1pZScore, QueryMinMax, Transform, ZScore

__all__ = ["EXPORT_FORMATS", "ONNX_OPSET", "ExportResult", "ServingModel", "export_model", "serving_model"]

EXPORT_FORMATS = ("torchscript", "onnx")
ONNX_OPSET = 17
#: the written file must give the eager model's scores within ATOL + RTOL * max |score| on the check
#: batch: far above float32 rounding (QILCM's query normalization amplifies it, docs/export.md), far
#: below what a trace that does not generalize gives (an unrolled DLCM loop: 0.5)
CHECK_ATOL, CHECK_RTOL = 1e-4, 1e-4
_F32_MAX = float(np.finfo(np.float32).max)
META_NAME = "ctxrank.json"  # TorchScript extra file / ONNX metadata key with the input description


# ---------------------------------------------------------------------------------- normalizers
class FeatureNormalizer(nn.Module):
    """A fitted :class:`Transform` as torch ops: raw float [B, L, F] (+ mask [B, L]) -> float32 [B, L, F].

    Arithmetic in float64 like :mod:`ctxrank.data.transforms`, so the result equals ``transform()``:

    * ``none``: unchanged.
    * ``minmax`` / ``zscore`` / ``log1p-zscore``: ``(g(x) - shift) * scale`` per feature with the
      training statistics (``scale`` = 0 for a feature constant on train), ``g`` = identity or
      ``sign(x) log1p(|x|)``; clipped to [0, 1] (``minmax``, ``clip=True``) or to the float32 range.
    * ``query-minmax``: min and max over the REAL items of each list (padding is excluded from both),
      ``(x - min) / (max - min)`` clipped to [0, 1]; 0 where a feature is constant in the list.
    """

    def __init__(self, transform: Transform, n_features: int) -> None:
        super().__init__()
        kind = type(transform)
        if kind not in (Identity, GlobalMinMax, ZScore, Log1pZScore, QueryMinMax):
            raise ValueError(
                f"the normalizer {transform.name!r} ({kind.__name__}) cannot be exported: only none, "
                "minmax, zscore, log1p-zscore and query-minmax are written into the graph"
            )
        self.kind = "query" if kind is QueryMinMax else "none" if kind is Identity else "affine"
        self.log = kind is Log1pZScore
        self.clip01 = kind is GlobalMinMax and transform.clip
        shift = divisor = np.zeros(n_features)
        if self.kind == "affine":
            if not transform.is_fitted:
                raise ValueError(f"the saved normalizer {transform.name!r} is not fitted; cannot export it")
            if kind is GlobalMinMax:
                shift, divisor = transform.min_, transform.max_ - transform.min_
            else:
                shift, divisor = transform.mean_, transform.std_
        nonconst = divisor > 0
        scale = np.zeros_like(divisor, dtype=np.float64)
        scale[nonconst] = 1.0 / divisor[nonconst]
        self.register_buffer("shift", torch.as_tensor(np.asarray(shift, dtype=np.float64)))  # (F,)
        self.register_buffer("scale", torch.as_tensor(scale))  # (F,)

    def raw_like(self, u: torch.Tensor) -> torch.Tensor:
        """Raw float32 features whose normalized values are ``0.1 + 0.8 u`` (``u`` [..., F] in [0, 1]):
        inside the training range and never clipped (for the export check)."""
        if self.kind != "affine":
            return u.float()
        spread = torch.where(self.scale > 0, 1.0 / self.scale, torch.ones_like(self.scale))
        y = self.shift + (0.1 + 0.8 * u.double()) * spread
        if self.log:
            y = torch.sign(y) * torch.expm1(torch.abs(y).clamp_max(80.0))
        return y.clamp(-_F32_MAX, _F32_MAX).float()

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.kind == "none":
            return features.float()
        x = features.double()  # (B, L, F)
        if self.kind == "query":
            real = mask.unsqueeze(-1)  # (B, L, 1)
            inf = torch.full_like(x, float("inf"))
            lo = torch.where(real, x, inf).amin(dim=1, keepdim=True)  # (B, 1, F) over real items only
            hi = torch.where(real, x, -inf).amax(dim=1, keepdim=True)
            rng = hi - lo
            nonconst = rng > 0  # False for a constant feature and for a list without real items
            inv = torch.where(nonconst, 1.0 / rng, torch.zeros_like(rng))
            lo = torch.where(nonconst, lo, torch.zeros_like(lo))
            return torch.clamp((x - lo) * inv, 0.0, 1.0).float()
        if self.log:
            x = torch.sign(x) * torch.log1p(torch.abs(x))
        y = (x - self.shift) * self.scale
        y = torch.clamp(y, 0.0, 1.0) if self.clip01 else torch.clamp(y, -_F32_MAX, _F32_MAX)
        return y.float()


# ------------------------------------------------------------------------ recurrences as loops
def _paper_gru_loop(
    xp: torch.Tensor, w_gate: torch.Tensor, w_cand: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """DLCM's eq. 4 GRU (:class:`ctxrank.models.dlcm.PaperGRU`) as a loop over the T steps.

    ``xp`` (B, T, 3H) input projections, ``w_gate`` (2H, H), ``w_cand`` (H, H), ``lengths`` (B,) ->
    outputs (B, T, H), state (B, H) after each row's last real step (frozen afterwards).
    """
    H = w_cand.size(0)
    h = torch.zeros(xp.size(0), H, dtype=xp.dtype, device=xp.device)
    outputs: list[torch.Tensor] = []
    for t in range(xp.size(1)):
        x_t = xp[:, t]
        g = F.linear(h, w_gate)  # (B, 2H)
        u = torch.sigmoid(x_t[:, :H] + g[:, :H])
        r = torch.sigmoid(x_t[:, H : 2 * H] + g[:, H:])
        c = torch.tanh(x_t[:, 2 * H :] + F.linear(r * h, w_cand))
        h = torch.where((lengths > t).unsqueeze(1), torch.lerp(h, c, u), h)
        outputs.append(h)
    return torch.stack(outputs, dim=1), h


def _rnn_loop(
    xp: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor, lengths: torch.Tensor, lstm: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One-layer ``torch.nn.LSTM`` / ``GRU`` equations as a loop, stopping at each row's length.

    ``xp`` (B, T, G H) = ``x W_ih^T + b_ih`` (G = 4 for LSTM, 3 for GRU) -> outputs (B, T, H) (0 after
    the row's length, as ``pad_packed_sequence`` gives), ``h`` and ``c`` (B, H) after the last real step
    (``c`` = ``h`` for a GRU). The state of an empty row stays 0.
    """
    H = w_hh.size(1)
    h = torch.zeros(xp.size(0), H, dtype=xp.dtype, device=xp.device)
    c = torch.zeros_like(h)
    outputs: list[torch.Tensor] = []
    for t in range(xp.size(1)):
        x_t = xp[:, t]
        g = F.linear(h, w_hh, b_hh)
        if lstm:  # gates i, f, g, o
            i = torch.sigmoid(x_t[:, :H] + g[:, :H])
            f = torch.sigmoid(x_t[:, H : 2 * H] + g[:, H : 2 * H])
            cand = torch.tanh(x_t[:, 2 * H : 3 * H] + g[:, 2 * H : 3 * H])
            o = torch.sigmoid(x_t[:, 3 * H :] + g[:, 3 * H :])
            c_new = f * c + i * cand
            h_new = o * torch.tanh(c_new)
        else:  # gates r, z, n
            r = torch.sigmoid(x_t[:, :H] + g[:, :H])
            z = torch.sigmoid(x_t[:, H : 2 * H] + g[:, H : 2 * H])
            n = torch.tanh(x_t[:, 2 * H :] + r * g[:, 2 * H :])
            h_new = (1.0 - z) * n + z * h
            c_new = h_new
        live = (lengths > t).unsqueeze(1)
        h = torch.where(live, h_new, h)
        c = torch.where(live, c_new, c)
        outputs.append(torch.where(live, h_new, torch.zeros_like(h_new)))
    return torch.stack(outputs, dim=1), h, c


@functools.cache
def _scripted(name: str) -> Any:
    """The TorchScript-compiled loop ``name`` (compiled once, on first use)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*", category=DeprecationWarning)
        return torch.jit.script(globals()[name])


def _dlcm_scores(model: Any, x: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None):
    """:class:`ctxrank.models.dlcm.DLCM` forward with the recurrence over all L steps (no data-dependent
    ``T``); padded steps come after the real ones and never reach a real output or ``s_n``."""
    from ctxrank.models.dlcm import PaperGRU

    B, L = mask.shape
    lengths = mask.sum(dim=1)  # (B,)
    h = model.represent(x, categorical)  # (B, L, alpha)
    outs, states = [], []
    for order, gru in zip(model.orders, model.grus, strict=True):
        idx = model.feed_order(lengths, L, order)  # (B, L) item fed at each step
        seq = h.gather(1, idx[..., None].expand_as(h))  # (B, L, alpha) in feeding order
        if isinstance(gru, PaperGRU):
            o_steps, s_n = _scripted("_paper_gru_loop")(
                gru.input_proj(seq), gru.gate_proj.weight, gru.cand_proj.weight, lengths
            )
        else:  # torch.nn.GRU's equations, over all L steps (causal: real steps come first)
            xp = F.linear(seq, gru.weight_ih_l0, gru.bias_ih_l0)
            o_steps, s_n, _ = _scripted("_rnn_loop")(xp, gru.weight_hh_l0, gru.bias_hh_l0, lengths, False)
        outs.append(o_steps.gather(1, idx[..., None].expand(B, L, model.hidden)))  # back to items
        states.append(s_n)
    return model.local_ranking(torch.cat(outs, dim=-1), torch.cat(states, dim=-1))


def _dcm_scores(model: Any, x: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None):
    """:class:`ctxrank.models.dcm.DCM` forward with the packed encoder replaced by a length-masked loop."""
    lstm = model.config.cell == "lstm"
    enc = model.encoder
    e = model.embed(model.item_inputs(x, categorical))  # (B, L, embed)
    xp = F.linear(e, enc.weight_ih_l0, enc.bias_ih_l0)
    h, h_n, c_n = _scripted("_rnn_loop")(xp, enc.weight_hh_l0, enc.bias_hh_l0, mask.sum(dim=1), lstm)
    go = model.go.expand(h.shape[0], -1)
    out = model.decoder(go, (h_n, c_n) if lstm else h_n)
    d = out[0] if isinstance(out, tuple) else out  # (B, H)
    return model.v(torch.tanh(model.W1(h) + model.W2(d)[:, None, :])).squeeze(-1)  # (B, L)


def _recurrent_scorers() -> dict[type, Any]:
    from ctxrank.models.dcm import DCM
    from ctxrank.models.dlcm import DLCM

    return {DLCM: _dlcm_scores, DCM: _dcm_scores}


# ------------------------------------------------------------------------------ serving module
class ServingModel(nn.Module):
    """Normalizer + ranker: ``(features [B, L, F] raw float32, mask [B, L] bool[, categorical int64
    [B, L, C]]) -> scores float32 [B, L]`` (see the module docstring for the contract)."""

    def __init__(self, model: nn.Module, transform: Transform) -> None:
        super().__init__()
        self.model = model.eval()
        self.normalizer = FeatureNormalizer(transform, model.n_features)
        self.n_features = int(model.n_features)
        self.n_categorical = len(model.categorical_cardinalities)
        self._scorer = next((fn for cls, fn in _recurrent_scorers().items() if isinstance(model, cls)), None)

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, categorical: torch.Tensor | None = None
    ) -> torch.Tensor:
        real = mask.unsqueeze(-1)  # (B, L, 1)
        x = self.normalizer(features, mask)
        x = torch.where(real, x, torch.zeros_like(x))  # padded features are 0, as in ListBatch
        if self.n_categorical:
            if categorical is None:
                raise ValueError(f"this model needs categorical codes [B, L, {self.n_categorical}]")
            categorical = torch.where(real, categorical.clamp_min(0), torch.zeros_like(categorical))
        else:
            categorical = None
        if self._scorer is not None:
            return self._scorer(self.model, x, mask, categorical)
        return self.model(x, mask, categorical=categorical)


def serving_model(predictor: Any) -> ServingModel:
    """The :class:`ServingModel` of a loaded model (``ctxrank.checkpoint.load_model``).

    A ``RerankPredictor`` gives its neural re-ranker (see the module docstring).

    Raises:
        ValueError: a baseline (not a torch model), or a normalizer that cannot be exported.
    """
    from ctxrank.training.predict import TorchPredictor
    from ctxrank.training.rerank import RerankPredictor

    if isinstance(predictor, RerankPredictor):
        predictor = predictor.reranker
    if not isinstance(predictor, TorchPredictor):
        kind = type(predictor).__name__
        hint = (
            "; LightGBM's own model.txt in the model directory is its serving format"
            if kind == "LambdaMART"
            else ""
        )
        raise ValueError(
            f"{kind} is a baseline, not a torch model: export applies to the neural models{hint}"
        )
    return ServingModel(predictor.model, predictor.transform)


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
        max_abs_diff: largest score difference between the file and the eager model on the check batch.
        notes: what the caller must know (re-ranking inputs).
        meta: the JSON stored in the file (``ctxrank.json`` extra file / ONNX metadata).
    """

    path: Path
    format: str
    inputs: list[tuple[str, str, str, str]]
    version: str
    size: int
    max_abs_diff: float
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def example_inputs(serving: ServingModel, batch: int, length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A random batch for tracing and checking: raw features [B, L, F] that normalize to U(0.1, 0.9)
    (:meth:`FeatureNormalizer.raw_like`), prefix masks with one full row and the others shorter (at
    least 1 item), codes [B, L, C] in each column's vocabulary."""
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


def _check(ref: torch.Tensor, got: torch.Tensor, mask: torch.Tensor, what: str) -> float:
    diff = _max_diff(ref, got, mask)
    tol = CHECK_ATOL + CHECK_RTOL * float(ref.abs()[mask].max())
    if not diff <= tol:  # also catches NaN
        raise ValueError(
            f"the exported {what} does not reproduce the model on a batch of shape "
            f"{tuple(mask.shape)} (max abs score difference {diff:.3g} > {tol:.3g}); not written"
        )
    return diff


def export_model(model_dir: str | os.PathLike, fmt: str, out: str | os.PathLike) -> ExportResult:
    """Export the model saved in ``model_dir`` to the file ``out`` as ``fmt`` (see :data:`EXPORT_FORMATS`).

    The model is traced on a batch of shape (3, 5); the written file is loaded back and run on a batch
    of shape (4, 7), and must give the eager model's scores within ``CHECK_ATOL + CHECK_RTOL * max
    |score|``. Only then is ``out`` replaced (atomically); on any error it is left as it was.

    Raises:
        ValueError: unknown format, not a model directory, a baseline, a normalizer that cannot be
            exported, a missing ONNX package, an export failure, or a file that does not reproduce the
            model (e.g. a trace that does not generalize to other batch shapes).
    """
    from ctxrank._io import atomic_write
    from ctxrank.checkpoint import load_model, read_meta

    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ValueError(f"{model_dir}: no such model directory")
    meta = read_meta(model_dir)
    predictor = load_model(model_dir)
    serving = serving_model(predictor).eval()
    file_meta, notes = _file_meta(serving, meta, predictor, model_dir)
    if fmt == "onnx":  # before any work: both are needed (export, check)
        _need("onnx")
        _need("onnxruntime")
    traced_inputs = example_inputs(serving, 3, 5, seed=0)
    check_inputs = example_inputs(serving, 4, 7, seed=1)
    with torch.no_grad():
        ref = serving(*check_inputs)
    diff = math.nan

    def write(tmp: Path) -> None:
        nonlocal diff
        with warnings.catch_warnings():
            # TorchScript and the TorchScript-based ONNX exporter are deprecated upstream (docs/export.md)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
            if fmt == "torchscript":
                _write_torchscript(serving, traced_inputs, check_inputs, tmp, file_meta)
                with torch.no_grad():
                    got = torch.jit.load(str(tmp))(*check_inputs)
            else:
                _write_onnx(serving, traced_inputs, tmp, file_meta)
                got = torch.from_numpy(_run_onnx(tmp, check_inputs))
        diff = _check(ref, got, check_inputs[1], fmt)

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
        notes=notes,
        meta=file_meta,
    )


def _file_meta(serving: ServingModel, meta: dict[str, Any], predictor: Any, model_dir: Path):
    """(JSON stored in the file, notes for the caller)."""
    from ctxrank.training.rerank import RerankPredictor

    file_meta: dict[str, Any] = {
        "model": meta.get("model"),
        "ctxrank_version": meta.get("ctxrank_version"),
        "transform": meta.get("transform", {}).get("name"),
        "feature_names": meta.get("feature_names", []),
        "categorical_names": meta.get("categorical_names", []),
        "categorical_cardinalities": meta.get("categorical_cardinalities", []),
        # column -> categories; the code of vocab[col][i] is i + 1, anything else is 0 (unknown)
        "categorical_vocab": ((meta.get("table") or {}).get("encoder") or {}).get("vocab", {}),
        "inputs": [list(r) for r in _describe_inputs(serving)],
        "output": ["scores", "[B, L]", "float32", "one score per item (padded positions arbitrary)"],
    }
    notes = []
    if isinstance(predictor, RerankPredictor):
        rr = predictor.meta
        flags = (("initial_rank", rr["rank_feature"]), ("initial_score", rr["score_feature"]))
        added = [name for name, on in flags if on]
        file_meta["rerank"] = {k: rr.get(k) for k in ("top_k", "rank_feature", "score_feature")}
        notes.append(
            "re-ranking model: only the neural re-ranker is exported. Build its lists as "
            "ctxrank.training.rerank.prepare_split does: score every item with the initial ranker "
            f"({model_dir / rr['dir'] / 'model.txt'}), keep each query's top {rr['top_k']} in descending "
            "initial score (ties by input position)"
            + (f", append {' and '.join(added)} as the last feature column(s)" if added else "")
            + "; the items cut off follow the re-ranked ones in their initial order."
        )
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
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"ONNX export needs the {module} package: pip install 'ctxrank[export]'") from None


def _write_onnx(serving: ServingModel, inputs, path: Path, file_meta) -> None:
    onnx = _need("onnx")
    names = [r[0] for r in _describe_inputs(serving)]
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
    entry = proto.metadata_props.add()
    entry.key, entry.value = META_NAME, json.dumps(file_meta)
    onnx.save(proto, str(path))


def _run_onnx(path: Path, inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    ort = _need("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(["scores"], {n: t.numpy() for n, t in zip(names, inputs, strict=True)})[0]
