"""``ctxrank serve``: an HTTP server for one ranker (FastAPI on uvicorn), with dynamic batching.

Endpoints (docs/serving.md has the JSON and a walk-through)::

    POST /rank      {"qid": ..., "rows": [...]} -> {"scores": [...], "rankings": [...]}
                    (the JSON: ctxrank.serving.requests)
    GET  /health    liveness: 200 while the process serves
    GET  /ready     readiness: 200 with the model's description once it is loaded and the batcher runs,
                    503 while shutting down
    GET  /metrics   Prometheus text: requests by endpoint and status, latency, batch sizes, inference time
    /v2/...         the Open Inference Protocol (KServe v2), JSON and binary tensors (ctxrank.serving.v2)

The model is an exported ONNX file (:class:`~ctxrank.serving.onnx_ranker.OnnxRanker`: onnxruntime, no
torch) or a model directory of ``ctxrank train`` (:class:`~ctxrank.serving.directory.DirectoryRanker`:
ctxrank's own predict, re-ranking pipelines included); both are loaded, and the socket bound, before
the server starts, so a bad path or a port in use is a plain error.

**Dynamic batching** (:class:`Batcher`): checked requests wait in an asyncio queue; one worker takes
the first, then every request already queued, and, while other requests are still arriving (their
bodies being read or parsed), waits for them up to ``batch_wait_ms`` after the first, up to
``max_batch`` requests. The batch is scored in one call (one padded graph run for an ONNX file; lists
are padded to the batch's longest) on a worker thread, so the event loop keeps reading requests
meanwhile, and each request gets its rows' scores. A lone request waits for nobody: at one client the
latency is that of one request, scored on the event loop itself when it is quick (:class:`Batcher`).
When a batch fails, its requests are scored one by one, so that one request the model refuses does
not fail the others.

**Limits**: the body (``max_body_bytes``, 413), the rows of a request (``max_rows``, 413), the rows of a
query (``max_list``, 413). A malformed request gets a 4xx JSON answer ``{"error": ..., "field": ...}``
naming the offending field; nothing answers with a traceback (an unexpected failure is a 500 with a
one-line JSON message, its traceback in the server's log).

**Shutdown**: SIGTERM or SIGINT stops accepting connections, lets the requests in flight finish (up to
``shutdown_timeout`` seconds), then stops the batcher; the process exits with status 0.

Why FastAPI + uvicorn: the most used ASGI stack in Python, both already well kept, with lifespan hooks
and graceful shutdown; a ranker needs one POST route and its own batching, not a model-serving
framework's (LitServe, BentoML, Ray Serve, Triton each bring their own process model and
batching, and several dependencies, for what one asyncio queue does here).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11
import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ctxrank._checks import OptionError, check_choice, check_int
from ctxrank._declare import NON_NEGATIVE_INT, POSITIVE_INT, option
from ctxrank.serving.onnx_ranker import OnnxRanker
from ctxrank.serving.requests import Limits, RankRequest, RequestError, header, parse_request, rank_answer
from ctxrank.serving.v2 import add_v2_routes, check_model_name, v2_infer

__all__ = ["Batcher", "ServeOptions", "bind", "create_app", "load_ranker", "serve"]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
HTTP_PARSERS = ("httptools", "h11")
_log = logging.getLogger("uvicorn.error")  # uvicorn's log: its handler, its --log-level


def _host(text: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"expected a host name or address, got {text!r}")
    return text


@dataclass(frozen=True)
class ServeOptions:
    """The server's settings (``ctxrank serve`` flags; the API builds this directly)."""

    host: str = option(
        "127.0.0.1",
        "--host",
        "address to listen on (default 127.0.0.1: this machine only)",
        parse=_host,
        metavar="HOST",
    )
    port: int = option(
        8000,
        "--port",
        "TCP port (default 8000; 0: any free port, printed at start)",
        parse=NON_NEGATIVE_INT,
        metavar="N",
    )
    max_batch: int = option(
        32,
        "--max-batch",
        "most requests scored in one model call (default 32; 1: no batching)",
        parse=POSITIVE_INT,
        metavar="N",
    )
    batch_wait_ms: float = option(
        2.0,
        "--batch-wait-ms",
        "how long the first request of a batch waits for requests still arriving "
        "(default 2 ms; never when none is arriving)",
        parse=float,
        metavar="MS",
    )
    max_rows: int = option(
        10_000,
        "--max-rows",
        "most rows in one request (default 10,000; more: 413)",
        parse=POSITIVE_INT,
        metavar="N",
    )
    max_list: int = option(
        1_000,
        "--max-list",
        "most rows of one query in a request (default 1,000; more: 413)",
        parse=POSITIVE_INT,
        metavar="N",
    )
    max_body_bytes: int = option(
        16 * 2**20,
        "--max-body-bytes",
        "largest request body (default 16 MiB; more: 413)",
        parse=POSITIVE_INT,
        metavar="BYTES",
    )
    max_header_bytes: int = option(
        16 * 2**10,
        "--max-header-bytes",
        "largest request line and headers (default 16 KiB; more: 400 and the connection closed)",
        parse=POSITIVE_INT,
        metavar="BYTES",
    )
    read_timeout: float = option(
        30.0,
        "--read-timeout",
        "seconds a client has to send a request's headers (from connecting or from its previous "
        "answer), and again its body (slower: 408 or the connection closed; default 30)",
        parse=float,
        metavar="S",
    )
    max_connections: int = option(
        512,
        "--max-connections",
        "most open connections served at once (default 512; beyond: 503 until some close)",
        parse=POSITIVE_INT,
        metavar="N",
    )
    shutdown_timeout: float = option(
        30.0,
        "--shutdown-timeout",
        "seconds a SIGTERM / SIGINT waits for requests in flight (default 30)",
        parse=float,
        metavar="S",
    )
    http: str = option(
        "httptools",
        "--http",
        "the HTTP/1.1 parser: httptools (default; llhttp, in C) or h11 (pure Python, slower); both with "
        "the same bounds and deadlines",
        choices=HTTP_PARSERS,
    )
    log_level: str = option(
        "info", "--log-level", "uvicorn's log level (default info; no access log)", choices=LOG_LEVELS
    )
    model_name: str | None = option(
        None,
        "--model-name",
        "the model's name in the /v2 routes (default: the file's or directory's name without suffix)",
        parse=check_model_name,
        metavar="NAME",
    )

    def __post_init__(self) -> None:
        check_int("port", self.port, 0, maximum=65535)
        for name in ("max_batch", "max_rows", "max_list", "max_body_bytes"):
            check_int(name, getattr(self, name))
        check_int("max_header_bytes", self.max_header_bytes, 1024, maximum=2**24)
        check_int("max_connections", self.max_connections, maximum=2**20)
        for name, value, low in (
            ("batch_wait_ms", self.batch_wait_ms, 0),
            ("shutdown_timeout", self.shutdown_timeout, 0),
            ("read_timeout", self.read_timeout, 0.001),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= 3600_000:
                raise ValueError(f"{name} must be a number in [{low:g}, 3600000], got {value!r}")
        if self.max_list > self.max_rows:
            raise ValueError(f"max_list ({self.max_list:,}) must not exceed max_rows ({self.max_rows:,})")
        check_choice("log_level", self.log_level, LOG_LEVELS)
        check_choice("http", self.http, HTTP_PARSERS)
        if self.model_name is not None:
            check_model_name(self.model_name)


def load_ranker(path: str | Path, *, threads: int = 1) -> Any:
    """An :class:`OnnxRanker` for a file, a ``DirectoryRanker`` for a directory (needs torch).

    Raises:
        ValueError: no such file or directory, or one that does not load.
    """
    path = Path(path)
    if path.is_dir():
        from ctxrank.serving.directory import DirectoryRanker  # torch: only for a model directory

        return DirectoryRanker(path, threads=threads)
    if path.is_file():
        return OnnxRanker(path, threads=threads)
    raise ValueError(f"--model {path}: no such file or directory (an .onnx file or a model directory)")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: a free one).

    Raises:
        ValueError: an unknown host, or an address that cannot be bound (in use, not this machine's).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as exc:
        raise OptionError(
            "{host} {name}: not an address of this machine ({exc})", name=host, exc=exc
        ) from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


# --------------------------------------------------------------------------------------- metrics
class Metrics:
    """The Prometheus metrics of one app, in their own registry."""

    ENDPOINTS = ("/rank", "/health", "/ready", "/metrics")

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "ctxrank_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "ctxrank_request_seconds",
            "request latency (body read to answer sent) by endpoint",
            ["endpoint"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10),
            registry=r,
        )
        self.batch_requests = Histogram(
            "ctxrank_batch_requests",
            "requests per model call",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.batch_rows = Histogram(
            "ctxrank_batch_rows",
            "rows per model call",
            buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000),
            registry=r,
        )
        self.inference = Histogram(
            "ctxrank_inference_seconds",
            "time of one model call (a batch)",
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 5),
            registry=r,
        )

    def endpoint(self, path: str) -> str:
        if path.startswith("/v2"):
            return "/v2 infer" if path.endswith("/infer") else "/v2"
        return path if path in self.ENDPOINTS else "other"


class _MetricsMiddleware:
    """Counts every HTTP request by endpoint and status and times it (a plain ASGI middleware)."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def send_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            endpoint = self.metrics.endpoint(scope.get("path", ""))
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)


# --------------------------------------------------------------------------------------- batching
def _refused(exc: ValueError) -> RequestError:
    """The model's own refusal of a request's rows (a 422)."""
    return RequestError(f"rows: the model refuses them: {exc}", field="rows")


@dataclass
class _Job:
    request: RankRequest
    future: asyncio.Future


class Batcher:
    """Groups concurrent requests into one model call (see the module docstring).

    ``arriving`` counts requests whose body is being read or checked (the route keeps it); the worker
    waits for more requests only while it is positive. A request alone in the server (no other request
    in flight: ``in_flight()``, uvicorn's running request tasks; nothing queued or being scored) whose
    call is predicted to take at most ``INLINE_S`` (from the last call's time per row) is scored on the
    event loop itself: no hop to the worker thread and back, which costs two thread wake-ups. A longer
    call goes to the worker, so the loop never stalls long; concurrent requests go to the queue, so
    they are batched as before.
    """

    INLINE_S = 0.005

    def __init__(self, ranker: Any, *, max_batch: int, batch_wait_ms: float, metrics: Metrics) -> None:
        self.ranker, self.max_batch, self.wait_s = ranker, max_batch, batch_wait_ms / 1000.0
        self.metrics = metrics
        self.arriving = 0
        self.busy = False  # the worker is scoring a batch
        self.in_flight: Any = lambda: 1  # requests in flight, this one included (make_server sets it)
        self.seconds_per_row = math.inf  # of the last model call (none yet: no inline call)
        self.queue: asyncio.Queue[_Job] = asyncio.Queue()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxrank-model")
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.executor.shutdown(wait=True)

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    async def score(self, request: RankRequest) -> np.ndarray:
        """The request's (N,) scores, once its batch has run."""
        alone = not self.busy and self.arriving <= 0 and self.queue.empty() and self.in_flight() <= 1
        if alone and request.n_rows * self.seconds_per_row <= self.INLINE_S:
            try:
                return self._predict([request])[0]
            except ValueError as exc:
                raise _refused(exc) from None
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(_Job(request, future))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.wait_s
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                remaining = deadline - loop.time()
                if self.arriving <= 0 or remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), remaining))
                except TimeoutError:
                    break
            batch = [job for job in batch if not job.future.done()]  # a client that went away
            if batch:
                self.busy = True
                try:
                    await self._score(batch)
                finally:
                    self.busy = False

    async def _score(self, batch: list[_Job]) -> None:
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self.executor, self._predict, [j.request for j in batch])
        except Exception as exc:
            if len(batch) > 1:  # find the request at fault: each alone
                for job in batch:
                    await self._score([job])
                return
            job = batch[0]
            if not job.future.done():
                job.future.set_exception(_refused(exc) if isinstance(exc, ValueError) else exc)
            return
        for job, scores in zip(batch, results, strict=True):
            if not job.future.done():
                job.future.set_result(scores)

    def _predict(self, requests: list[RankRequest]) -> list[np.ndarray]:
        """One model call for all ``requests`` (their queries kept apart), on the worker thread (or the
        event loop: :meth:`score`)."""
        start = time.perf_counter()
        sizes = [r.n_rows for r in requests]
        lists = requests[0].lists
        if len(requests) == 1 and lists is not None and hasattr(self.ranker, "score_lists"):
            scores = self.ranker.score_lists(*lists)[lists[1]]  # a lone v2 request: its own tensors
        else:
            x = np.concatenate([r.X for r in requests]) if len(requests) > 1 else requests[0].X
            offsets = np.cumsum([0, *(len(r.query_ids) for r in requests[:-1])])
            qid = np.concatenate([r.group + o for r, o in zip(requests, offsets, strict=True)])
            codes = None
            if requests[0].codes is not None:
                codes = np.concatenate([r.codes for r in requests])
            scores = np.asarray(self.ranker.predict(x, qid, codes))
        elapsed = time.perf_counter() - start
        self.seconds_per_row = elapsed / max(sum(sizes), 1)
        self.metrics.inference.observe(elapsed)
        self.metrics.batch_requests.observe(len(requests))
        self.metrics.batch_rows.observe(sum(sizes))
        return [scores] if len(requests) == 1 else np.split(scores, np.cumsum(sizes)[:-1])


# --------------------------------------------------------------------------------------- the app
_RANK_SCHEMA = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["qid", "rows"],
                    "properties": {
                        "qid": {"description": "one query id (string or integer) or one per row"},
                        "rows": {
                            "type": "array",
                            "description": "arrays (F values, then C categorical) or objects by name",
                        },
                    },
                }
            }
        },
    }
}


class _Disconnected(Exception):
    """The client closed its connection before it sent the whole body (nobody to answer)."""


async def _read_body(
    scope: dict, receive: Any, limit: int, timeout: float, *, json_only: bool = True
) -> bytes:
    """The request's body (JSON unless not ``json_only``): at most ``limit`` bytes, all of it within
    ``timeout`` seconds."""
    kind = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
    if json_only and kind != "application/json":
        raise RequestError(
            f"content-type: expected application/json, got {kind or 'none'}", field="content-type", status=415
        )
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(
            f"body: {int(declared):,} bytes; at most {limit:,} (the server's --max-body-bytes)",
            field="body",
            status=413,
        )
    chunks, size, more = [], 0, True
    host, port = scope.get("client") or ("?", 0)
    try:
        async with asyncio.timeout(timeout):
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect
                chunk, more = message.get("body", b""), message.get("more_body", False)
                size += len(chunk)
                if size > limit:
                    raise RequestError(
                        f"body: more than {limit:,} bytes (the server's --max-body-bytes)",
                        field="body",
                        status=413,
                    )
                chunks.append(chunk)
    except TimeoutError:
        _log.warning("%s:%s: no whole body within %g s (--read-timeout): answered 408", host, port, timeout)
        raise RequestError(
            f"body: not received within {timeout:g} s (the server's --read-timeout); {size:,} bytes came",
            field="body",
            status=408,
        ) from None
    except ClientDisconnect:
        _log.warning("%s:%s: client disconnected before sending the whole body (%s bytes came)",
                     host, port, f"{size:,}")  # fmt: skip
        raise _Disconnected from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _error_answer(path: str, error: dict[str, Any], status: int, headers: dict | None = None) -> JSONResponse:
    """An error's JSON answer: ``{"error", "field"}``, or the Open Inference Protocol's ``{"error"}``
    under /v2."""
    body = {"error": error["error"]} if path.startswith("/v2") else error
    return JSONResponse(body, status_code=status, headers=headers)


def _request_error(path: str, exc: RequestError) -> JSONResponse:
    close = {"connection": "close"} if exc.status == 408 else None  # a stalled client: let it go
    return _error_answer(path, exc.body(), exc.status, close)


def _internal_error(path: str, exc: Exception) -> JSONResponse:
    message = f"internal error ({type(exc).__name__}); the server's log has the details"
    return _error_answer(path, {"error": message, "field": None}, 500)


def _add_error_handlers(app: FastAPI) -> None:
    """The app's error answers: a bad request, an HTTP error of the framework (404, 405, ...) and any
    other exception (500) as ``{"error", "field"}`` JSON; a client gone: 499, counted only."""

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> JSONResponse:
        return _request_error(request.url.path, exc)

    @app.exception_handler(_Disconnected)
    async def disconnected(request: Request, exc: _Disconnected) -> Response:
        return Response(status_code=499)  # never sent (nobody listens); counted in /metrics as nginx does

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error_answer(request.url.path, {"error": str(exc.detail), "field": None}, exc.status_code)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return _internal_error(request.url.path, exc)


class _DirectInfer:
    """``POST /v2/models/{name}/infer`` as a plain ASGI handler in front of the FastAPI app and its
    middleware (no routing table, dependencies, validation or request objects: a tenth of a
    millisecond a request or more); every other request goes to FastAPI. Same checks and answers,
    errors as the app's handlers."""

    PREFIX, SUFFIX = "/v2/models/", "/infer"

    def __init__(self, app: Any, infer: Any) -> None:
        self.app, self.infer = app, infer

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if not (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and path.startswith(self.PREFIX)
            and path.endswith(self.SUFFIX)
        ):
            await self.app(scope, receive, send)
            return
        try:
            response = await self.infer(path[len(self.PREFIX) : -len(self.SUFFIX)], scope, receive)
        except RequestError as exc:
            response = _request_error(path, exc)
        except _Disconnected:
            response = Response(status_code=499)  # as the app's handler: counted, never sent
        except Exception as exc:
            _log.exception("Exception in ASGI application")  # the traceback in the log, as uvicorn's
            response = _internal_error(path, exc)
        await response(scope, receive, send)


class _App(FastAPI):
    """FastAPI, with every request counted (:class:`_MetricsMiddleware`) and ``POST /v2/.../infer``
    answered (:class:`_DirectInfer`) in front of its own middleware stack."""

    def build_middleware_stack(self) -> Any:
        stack = _DirectInfer(super().build_middleware_stack(), self.state.infer)
        return _MetricsMiddleware(stack, self.state.metrics)


def create_app(ranker: Any, options: ServeOptions) -> FastAPI:
    """The ASGI app serving ``ranker`` (an ``OnnxRanker`` or a ``DirectoryRanker``)."""
    metrics = Metrics()
    limits = Limits(max_rows=options.max_rows, max_list=options.max_list)
    batcher = Batcher(
        ranker, max_batch=options.max_batch, batch_wait_ms=options.batch_wait_ms, metrics=metrics
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        try:
            yield
        finally:
            await batcher.stop()

    app = _App(title="ctxrank", summary="scores and rankings of a ctxrank model", lifespan=lifespan)
    app.state.batcher, app.state.metrics, app.state.server = batcher, metrics, None

    _add_error_handlers(app)

    @app.post("/rank", openapi_extra=_RANK_SCHEMA)
    async def rank(request: Request) -> Response:
        batcher.arriving += 1
        try:
            body = await _read_body(
                request.scope, request.receive, options.max_body_bytes, options.read_timeout
            )
            parsed = parse_request(body, ranker, limits)
        finally:
            batcher.arriving -= 1
        scores = await batcher.score(parsed)
        answer = json.dumps(rank_answer(parsed, scores), separators=(",", ":"))
        return Response(answer.encode(), media_type="application/json")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        server = app.state.server
        if not batcher.running or (server is not None and server.should_exit):
            raise HTTPException(503, "not ready (starting or shutting down)")
        return JSONResponse({"status": "ready", "model": ranker.describe()})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def serving() -> bool:
        server = app.state.server
        return batcher.running and not (server is not None and server.should_exit)

    async def read_any_body(scope: dict, receive: Any) -> bytes:
        return await _read_body(scope, receive, options.max_body_bytes, options.read_timeout, json_only=False)

    name = check_model_name(options.model_name if options.model_name is not None else Path(ranker.path).stem)
    add_v2_routes(app, name, ranker, serving)
    app.state.infer = v2_infer(name, ranker, limits, read_any_body, batcher)
    return app


class _ReadDeadline:
    """A deadline on what the client owes outside a body read, for uvicorn's HTTP protocols.

    uvicorn has no timeout on a request head (its keep-alive timeout runs only while a connection is
    idle after an answer and stops at the first byte), so a client that opens connections and never
    finishes a request would hold them, and the connection cap with them, for ever. Here a connection
    is closed when, ``read_timeout`` seconds after it opened or after its previous answer, no whole
    request head has come (or the rest of a body the app did not read: a 413 or a 404 answered before
    it). The body a route reads has its own deadline there (a 408: :func:`_read_body`).
    """

    read_timeout = 30.0  # set per server by make_server
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def _owes(self) -> bool:
        """Whether the client owes a request head or the rest of a body the app did not read."""
        return self.cycle is None or self.cycle.response_complete

    def _watch(self) -> None:
        """Arm the deadline while the client owes a request head or an unread body, else cancel it."""
        if self._owes() and not self.transport.is_closing():
            if self._deadline is None:
                self._deadline = self.loop.call_later(self.read_timeout, self._expired)
        else:
            self._cancel()

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            where = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            _log.info("%s sent no whole request within %g s (--read-timeout): connection closed",
                      where, self.read_timeout)  # fmt: skip
            self.transport.close()


class _H11Protocol(_ReadDeadline, H11Protocol):
    """uvicorn's h11 protocol with the read deadline; h11 bounds the request line and headers
    (``h11_max_incomplete_event_size``: more is a 400 and the connection closed, the rest never read)."""

    def _owes(self) -> bool:
        return super()._owes() and self.conn.their_state in (h11.IDLE, h11.SEND_BODY)


class _HttpToolsProtocol(_ReadDeadline, HttpToolsProtocol):
    """uvicorn's httptools protocol (llhttp, in C) with the read deadline and a bound on an unfinished
    request head: once the bytes of a head not yet complete exceed ``max_header_bytes`` (counted from
    the read that began it when the previous request had all come, else from the read after), the
    answer is a 400 and the connection closed, the rest never read (httptools itself holds a head of
    any size)."""

    max_header_bytes = 16 * 2**10  # set per server by make_server
    _head_open = False  # a request head has begun and is not complete
    _head_bytes = 0  # its bytes counted so far
    _begun = 0  # requests begun in the read being parsed

    def data_received(self, data: bytes) -> None:
        was_open = self._head_open
        at_boundary = not was_open and (self.cycle is None or not self.cycle.more_body)
        self._begun = 0
        super().data_received(data)
        if not self._head_open or self.parser is None or self.transport.is_closing():
            return
        if not self._begun:  # the same head as before this read
            self._head_bytes += len(data)
        elif self._begun == 1 and at_boundary:  # the read began with this head
            self._head_bytes = len(data)
        # else the head began after another request's bytes in this read: counted from the next read
        if self._head_bytes > self.max_header_bytes:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            self._cancel()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open, self._head_bytes, self._begun = True, 0, self._begun + 1

    def on_headers_complete(self) -> None:
        self._head_open = False
        super().on_headers_complete()


class _Server(uvicorn.Server):
    """uvicorn's server, but a SIGTERM / SIGINT that shut it down gracefully is not raised again after
    (uvicorn re-raises it, which would end the process with the signal's status instead of 0)."""

    @contextlib.contextmanager
    def capture_signals(self):
        with super().capture_signals():
            yield
            self.signalled = list(self._captured_signals)
            self._captured_signals.clear()


def make_server(ranker: Any, options: ServeOptions) -> _Server:
    """The uvicorn server of ``ranker`` (not started: ``.run(sockets=[bind(...)])``)."""
    app = create_app(ranker, options)
    base = _HttpToolsProtocol if options.http == "httptools" else _H11Protocol
    bounds = {"read_timeout": options.read_timeout, "max_header_bytes": options.max_header_bytes}
    protocol = type(base.__name__, (base,), bounds)
    config = uvicorn.Config(
        app,
        log_level=options.log_level,
        access_log=False,
        timeout_graceful_shutdown=options.shutdown_timeout,
        lifespan="on",
        http=protocol,
        h11_max_incomplete_event_size=options.max_header_bytes,
        # uvicorn answers 503 once it counts this many connections, the one asking included
        limit_concurrency=options.max_connections + 1,
    )
    server = _Server(config)
    app.state.server = server  # /ready answers 503 once it should exit
    app.state.batcher.in_flight = lambda: len(server.server_state.tasks)  # a task per request
    return server


def exposure(host: str) -> str | None:
    """What listening on ``host`` (an address) exposes, or None for a loopback address."""
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        address = None
    if address is not None and address.is_loopback:
        return None
    where = (
        "every network interface" if address is not None and address.is_unspecified else "a network address"
    )
    return (
        f"{host} is {where}: other machines can reach this server, which has no authentication and no "
        "TLS; put a reverse proxy in front (docs/serving.md#authentication-and-tls)"
    )


def serve(ranker: Any, options: ServeOptions, sock: socket.socket | None = None) -> int:
    """Serve ``ranker`` until SIGTERM / SIGINT; returns 0 after a graceful shutdown."""
    sock = bind(options.host, options.port) if sock is None else sock
    host, port = sock.getsockname()[:2]
    server = make_server(ranker, options)
    where = f"[{host}]" if ":" in host else host
    print(f"ctxrank serve: {ranker.kind} {ranker.path} on http://{where}:{port} (POST /rank)", flush=True)
    exposed = exposure(host)
    if exposed:
        print(f"ctxrank serve: warning: {exposed}", file=sys.stderr, flush=True)
    server.run(sockets=[sock])
    signals = getattr(server, "signalled", [])
    print(
        f"ctxrank serve: stopped{' by signal ' + str(signals[0]) if signals else ''}",
        file=sys.stderr,
        flush=True,
    )
    return 0
