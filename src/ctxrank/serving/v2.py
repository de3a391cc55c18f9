"""The Open Inference Protocol (KServe v2, as Triton speaks it) on ``ctxrank serve``, beside ``/rank``.

Routes (https://kserve.github.io/website/docs/concepts/architecture/data-plane/v2-protocol)::

    GET  /v2                          server metadata: name, version, extensions ["binary_tensor_data"]
    GET  /v2/health/live              200 while the process serves
    GET  /v2/health/ready             200 once the model is loaded and the batcher runs, else 503
    GET  /v2/models/{name}            model metadata: its input and output tensors
    GET  /v2/models/{name}/ready      as /v2/health/ready
    POST /v2/models/{name}/infer      tensors in, scores out

The tensors are the exported graph's (docs/export.md): inputs ``features`` FP32 [B, L, F], ``mask``
BOOL [B, L] (True = a real item) and, for a model with categorical columns, ``categorical`` INT64
[B, L, C] (the model's codes); output ``scores`` FP32 [B, L], 0 at padding. Each list's real items
are scored together, in their order in the list, as the rows of one query of ``/rank``: the request
goes through the same checks and the same batcher; alone in its batch, with real items first in every
list and no empty list, it is scored on its own tensors (``RankRequest.lists``: no regrouping).

Tensor data come as JSON (``"data"``: flat or nested, row-major) or with the binary tensor data
extension: the body is a JSON header of ``Inference-Header-Content-Length`` bytes, then each input
with ``"parameters": {"binary_data_size": n}`` as raw little-endian bytes, in the header's order
(BOOL one byte an element). The scores come back binary when the request's parameters say
``binary_data_output`` or the ``scores`` output asks ``"binary_data": true``.

Every refusal is one 4xx ``{"error": message}`` (v2's error object): a bad header length, an unknown
or missing tensor, a wrong datatype or shape, data of the wrong size or type, a value that is not
finite (NaN only where the model reads missing values), a tensor over ``--max-list`` items a list
or ``--max-rows`` items in all (413), a body over ``--max-body-bytes`` (413).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import orjson
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from ctxrank._checks import FLOAT32_MAX
from ctxrank._version import __version__
from ctxrank.serving.requests import Limits, RankRequest, RequestError, header

__all__ = ["HEADER_LENGTH", "add_v2_routes", "infer_answer", "model_metadata", "parse_infer", "v2_infer"]

HEADER_LENGTH = b"inference-header-content-length"  # as an ASGI scope names it
_DTYPES = {"FP32": np.dtype("<f4"), "BOOL": np.dtype("?"), "INT64": np.dtype("<i8")}
_JSON_TYPES = {"FP32": {int, float}, "BOOL": {bool}, "INT64": {int}}
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


def check_model_name(name: str) -> str:
    """``name`` if it is a model name of the protocol's URLs (letters, digits, ``_.-``; 1-128)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"model name: expected 1-128 letters, digits, '_', '.' or '-', got {name!r}")
    return name


def tensor_specs(ranker: Any) -> list[tuple[str, str, list[int]]]:
    """The inputs ``(name, datatype, shape)`` of ``ranker`` (-1: any size)."""
    specs = [("features", "FP32", [-1, -1, ranker.n_features]), ("mask", "BOOL", [-1, -1])]
    if ranker.categorical_names:
        specs.append(("categorical", "INT64", [-1, -1, len(ranker.categorical_names)]))
    return specs


def model_metadata(name: str, ranker: Any) -> dict[str, Any]:
    """``GET /v2/models/{name}``: the tensors a client sends and gets."""
    inputs = [{"name": n, "datatype": d, "shape": s} for n, d, s in tensor_specs(ranker)]
    return {
        "name": name,
        "versions": ["1"],
        "platform": "onnxruntime_onnx" if ranker.kind == "onnx" else "ctxrank",
        "inputs": inputs,
        "outputs": [{"name": "scores", "datatype": "FP32", "shape": [-1, -1]}],
    }


def _error(message: str, status: int = 400) -> RequestError:
    return RequestError(message, field=None, status=status)


def _header(body: bytes, header_length: str | None) -> tuple[dict[str, Any], memoryview]:
    """The JSON header of an infer body and the binary data after it."""
    size = len(body)
    if header_length is not None:
        if not header_length.isdigit() or not 0 < int(header_length) <= size:
            raise _error(
                f"Inference-Header-Content-Length: expected a byte count in [1, {size:,}] (the body's "
                f"size), got {header_length[:40]!r}"
            )
        size = int(header_length)
    try:
        doc = orjson.loads(body[:size])
    except orjson.JSONDecodeError as exc:
        raise _error(f"the inference header is not JSON ({str(exc)[:200]})") from None
    if type(doc) is not dict:
        raise _error("the inference header must be a JSON object with 'inputs'")
    return doc, memoryview(body)[size:]


def _object(doc: Any, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    if type(doc) is not dict:
        raise _error(f"{where}: expected a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - set(keys))
    if unknown:
        raise _error(f"{where}: unknown key {unknown[0]!r}; expected {', '.join(keys)}")
    return doc


def _flag(params: Any, key: str, where: str) -> bool:
    """The boolean ``params[key]`` (absent: False) of an object's ``parameters``."""
    if type(params) is not dict:
        raise _error(f"{where}.parameters: expected a JSON object, got {str(params)[:40]}")
    value = params.get(key, False)
    if type(value) is not bool:
        raise _error(f"{where}.parameters.{key}: expected true or false, got {str(value)[:40]}")
    return value


def _tensor(item: Any, spec: tuple[str, str, list[int]], binary: memoryview, start: int):
    """One input tensor (checked against ``spec``) and where the next binary tensor starts."""
    name, dtype, shape = spec
    where = f"inputs[{name!r}]"
    _object(item, ("name", "shape", "datatype", "parameters", "data"), where)
    if item.get("datatype") != dtype:
        raise _error(f"{where}: expected datatype {dtype}, got {str(item.get('datatype'))[:40]}")
    got = item.get("shape")
    if (
        type(got) is not list
        or len(got) != len(shape)
        or not all(type(d) is int and d >= 0 for d in got)
        or any(want != -1 and d != want for d, want in zip(got, shape, strict=True))
    ):
        want = "[" + ", ".join("-1" if d == -1 else str(d) for d in shape) + "]"
        raise _error(f"{where}: expected shape {want} (-1: any size), got {str(got)[:80]}")
    count = math.prod(got)  # exact: no int64 wrap-around for a hostile shape
    params = item.get("parameters", {})
    if type(params) is not dict:
        raise _error(f"{where}.parameters: expected a JSON object")
    if "binary_data_size" in params:
        size = params["binary_data_size"]
        want = count * _DTYPES[dtype].itemsize
        if "data" in item or type(size) is not int or size != want:
            raise _error(
                f"{where}: binary_data_size must be {want:,} (shape {got} of {dtype}) with no 'data', "
                f"got {str(size)[:40]}"
            )
        if start + size > len(binary):
            raise _error(f"{where}: {size:,} bytes of binary data announced, {len(binary) - start:,} left")
        return np.frombuffer(binary[start : start + size], dtype=_DTYPES[dtype]).reshape(got), start + size
    if "data" not in item:
        raise _error(f"{where}: no 'data' and no parameters.binary_data_size")
    try:
        values = np.array(item["data"], dtype=object).ravel()
    except ValueError:
        raise _error(f"{where}.data: nested lists of unequal lengths") from None
    if values.size != count:
        raise _error(f"{where}.data: expected {count:,} values (shape {got}), got {values.size:,}")
    if not set(map(type, values)) <= _JSON_TYPES[dtype]:
        raise _error(
            f"{where}.data: expected {dtype} values ({'/'.join(t.__name__ for t in _JSON_TYPES[dtype])})"
        )
    if dtype == "FP32":
        wide = values.astype(np.float64)
        over = np.abs(wide) > FLOAT32_MAX
        if over.any():
            at = [int(k) for k in np.unravel_index(int(np.argmax(over)), got)]
            raise _error(
                f"{name}{at}: {float(wide[over][0])!r} is beyond float32 (|x| <= {FLOAT32_MAX:.4g})", 422
            )
    try:
        array = values.astype(_DTYPES[dtype]).reshape(got)
    except OverflowError:
        raise _error(f"{where}.data: a value beyond {dtype}") from None
    return array, start


def parse_infer(
    body: bytes, header_length: str | None, ranker: Any, limits: Limits
) -> tuple[RankRequest, dict[str, Any]]:
    """The checked rows of an infer body (one query a list with a real item) and its answer's frame:
    ``{"id", "binary", "mask"}``.

    Raises:
        RequestError: see the module docstring.
    """
    doc, binary = _header(body, header_length)
    _object(doc, ("id", "parameters", "inputs", "outputs"), "the inference header")
    if type(doc.get("id", "")) is not str:
        raise _error(f"id: expected a string, got {str(doc['id'])[:40]}")
    binary_out = _flag(doc.get("parameters", {}), "binary_data_output", "the request")
    for i, output in enumerate(doc.get("outputs") or []):
        _object(output, ("name", "parameters"), f"outputs[{i}]")
        if output.get("name") != "scores":
            raise _error(
                f"outputs[{i}]: unknown output {str(output.get('name'))[:40]!r}; the model has 'scores'"
            )
        binary_out = _flag(output.get("parameters", {}), "binary_data", "outputs['scores']") or binary_out
    specs = {spec[0]: spec for spec in tensor_specs(ranker)}
    inputs = doc.get("inputs")
    if type(inputs) is not list:
        raise _error("inputs: expected a list of tensors")
    names = [
        item.get("name") if type(item) is dict and type(item.get("name")) is str else None for item in inputs
    ]
    unknown = [n for n in names if n not in specs]
    if unknown or len(set(names)) != len(names) or set(names) != set(specs):
        raise _error(f"inputs: expected the tensors {', '.join(specs)} once each, got {names}")
    tensors, start = {}, 0
    for item in inputs:
        tensors[item["name"]], start = _tensor(item, specs[item["name"]], binary, start)
    if start != len(binary):
        raise _error(f"{len(binary) - start:,} bytes of binary data after the tensors the header announces")
    features, mask = tensors["features"], tensors["mask"]
    if mask.size and mask.view(np.uint8).max() > 1:
        raise _error("mask: BOOL bytes must be 0 or 1")
    shapes = {n: t.shape[:2] for n, t in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise _error(f"inputs: the tensors' [B, L] differ: {shapes}")
    b, length = mask.shape
    if length > limits.max_list:
        raise _error(
            f"mask: lists of {length:,} items; at most {limits.max_list:,} (the server's --max-list)", 413
        )
    if b * length > limits.max_rows:
        raise _error(
            f"mask: {b * length:,} items; at most {limits.max_rows:,} (the server's --max-rows)", 413
        )
    sizes = mask.sum(axis=1)
    if not sizes.any():
        raise _error("mask: no real item (True) in any list", 422)
    categorical = tensors.get("categorical")
    full = bool(sizes.min() == length)
    if full:  # every item real: the rows are views of the tensors, no copy
        x = features.reshape(-1, features.shape[-1])
        codes = None if categorical is None else categorical.reshape(-1, categorical.shape[-1])
    else:
        x = features[mask]
        codes = None if categorical is None else categorical[mask]
    if not math.isfinite(x.sum(dtype=np.float64)):  # float32 values: finite sum unless a NaN or an inf
        bad = np.isinf(x) if ranker.allow_missing else ~np.isfinite(x)
        if bad.any():
            i, f = (int(k) for k in np.argwhere(bad)[0])
            where = [int(k) for k in np.argwhere(mask)[i]] + [f]
            what = "finite values" + ("" if ranker.allow_missing else " (this model reads no NaN)")
            raise _error(f"features{where}: {float(x[i, f])!r}; expected {what}", 422)
    cards = np.asarray(ranker.categorical_cardinalities, dtype=np.int64)
    if codes is not None and ((codes < 0) | (codes >= cards)).any():
        i, c = (int(k) for k in np.argwhere((codes < 0) | (codes >= cards))[0])
        where = [int(k) for k in np.argwhere(mask)[i]] + [c]
        raise _error(f"categorical{where}: code {int(codes[i, c])}; expected [0, {int(cards[c])})", 422)
    kept = np.flatnonzero(sizes)
    group = np.repeat(np.arange(len(kept), dtype=np.int64), sizes[kept])
    lists = None
    if full:
        lists = (features, mask, categorical)
    elif sizes.all() and (mask == (np.arange(length) < sizes[:, None])).all():  # real items first
        padding = ~mask[..., None]
        lists = (
            np.where(padding, np.float32(0), features),
            np.ascontiguousarray(mask),
            None if codes is None else np.where(padding, 0, categorical),
        )
    request = RankRequest(X=x, codes=codes, group=group, query_ids=kept.tolist(), lists=lists)
    return request, {"id": doc.get("id"), "binary": binary_out, "mask": mask}


def infer_answer(name: str, frame: dict[str, Any], scores: np.ndarray) -> Response:
    """The infer answer: ``scores`` (N,) of the real items put back in [B, L] (0 at padding)."""
    mask = frame["mask"]
    out = np.zeros(mask.shape, dtype="<f4")
    out[mask] = scores
    tensor: dict[str, Any] = {"name": "scores", "datatype": "FP32", "shape": list(mask.shape)}
    doc: dict[str, Any] = {"model_name": name, "model_version": "1", "outputs": [tensor]}
    if frame["id"] is not None:
        doc["id"] = frame["id"]
    if not frame["binary"]:
        tensor["data"] = out.ravel().tolist()
        return Response(orjson.dumps(doc), media_type="application/json")
    tensor["parameters"] = {"binary_data_size": out.nbytes}
    header = orjson.dumps(doc)
    return Response(
        header + out.tobytes(),
        media_type="application/octet-stream",
        headers={"Inference-Header-Content-Length": str(len(header))},
    )


def _check_model(requested: str, name: str) -> None:
    if requested != name:
        raise _error(f"model {requested[:80]!r} not found; this server serves {name!r}", 404)


def add_v2_routes(app: FastAPI, name: str, ranker: Any, ready: Any) -> None:
    """The protocol's GET routes on ``app`` for ``ranker`` under ``name``; ``ready()`` says whether the
    model serves (the infer route: :func:`v2_infer`)."""

    def readiness() -> Response:
        ok = ready()
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    @app.get("/v2")
    async def server_metadata() -> dict[str, Any]:
        return {"name": "ctxrank", "version": __version__, "extensions": ["binary_tensor_data"]}

    @app.get("/v2/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @app.get("/v2/health/ready")
    async def server_ready() -> Response:
        return readiness()

    @app.get("/v2/models/{requested}")
    async def metadata(requested: str) -> dict[str, Any]:
        _check_model(requested, name)
        return model_metadata(name, ranker)

    @app.get("/v2/models/{requested}/ready")
    async def model_ready(requested: str) -> Response:
        _check_model(requested, name)
        return readiness()


def v2_infer(name: str, ranker: Any, limits: Limits, read_body: Any, batcher: Any) -> Any:
    """``POST /v2/models/{requested}/infer`` as ``await infer(requested, scope, receive) -> Response``
    (an ASGI handler: ctxrank.serving.server serves it in front of FastAPI); ``read_body(scope,
    receive)`` reads a body within the server's limits and ``batcher`` scores."""

    async def infer(requested: str, scope: dict, receive: Any) -> Response:
        _check_model(requested, name)
        batcher.arriving += 1
        try:
            body = await read_body(scope, receive)
            parsed, frame = parse_infer(body, header(scope, HEADER_LENGTH), ranker, limits)
        finally:
            batcher.arriving -= 1
        return infer_answer(name, frame, await batcher.score(parsed))

    return infer
