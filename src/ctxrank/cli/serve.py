"""``ctxrank serve --model PATH [--host H] [--port N] ...``: an HTTP server for an exported ONNX file or
a model directory (:mod:`ctxrank.serving.server`; docs/serving.md). Every option is checked, the model
loaded and the port bound before the server starts, so each of those problems is a one-line error."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ctxrank._checks import resolve_threads
from ctxrank._declare import from_namespace
from ctxrank.cli._options import add_declared, add_model_dir, add_threads
from ctxrank.serving.server import ServeOptions, bind, load_ranker, serve


def serve_model(model: str, options: ServeOptions, *, threads: int | None) -> int:
    """Load ``model`` (an ``.onnx`` file or a model directory) to score with ``threads`` CPU threads
    (None: 1), bind ``options.host:port`` and serve until SIGTERM / SIGINT (exit status 0 after a
    graceful shutdown)."""
    ranker = load_ranker(model, threads=resolve_threads(threads))
    sock = bind(options.host, options.port)
    return serve(ranker, options, sock)


def add_serve_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "serve",
        parents=[common],
        help="serve an ONNX file or a model directory over HTTP (/rank, /health, /ready, /metrics, /v2)",
        description=(
            "Serve one ranker over HTTP (FastAPI + uvicorn): POST /rank takes the rows of one or many "
            'queries as JSON ({"qid": ..., "rows": [...]}, features by position or by name) and answers '
            "their scores and rankings; concurrent requests are batched into one model call. GET /health "
            "(liveness), /ready (readiness, the model's inputs), /metrics (Prometheus); /v2/... the Open "
            "Inference Protocol (KServe v2: padded tensors, JSON or binary; --model-name). The model is an "
            "ONNX file of `ctxrank export` (onnxruntime, no torch) or a model directory of `ctxrank train` "
            "(ctxrank's own predict; a re-ranking directory runs its whole pipeline). SIGTERM / SIGINT "
            "finish the requests in flight, then stop. Needs `pip install 'ctxrank[serve]'`. See "
            "docs/serving.md."
        ),
    )
    add_model_dir(p, ", or an .onnx file of `ctxrank export`", metavar="PATH")
    add_threads(
        p,
        "of one model call: onnxruntime's intra-op threads, or torch's and LightGBM's for a model "
        "directory; default 1",
    )
    add_declared(p, ServeOptions)
    p.set_defaults(**{f.name: f.default for f in dataclasses.fields(ServeOptions)})  # the declared defaults
    p.set_defaults(run=lambda a: serve_model(a.model, from_namespace(ServeOptions, a), threads=a.threads))
