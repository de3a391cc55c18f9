"""HTTP serving benchmark (not a test): ``ctxrank serve`` on loopback vs the same graph in-process.

A QILCM at its default widths (random weights: speed does not depend on them) on ``--features`` 136
features, saved as ``ctxrank train`` saves it and exported to ONNX (``ctxrank.export.export_model``),
is served by ``ctxrank serve --threads 1`` in its own process on a free loopback port. One request is
one list of ``--items`` 100 items (rows by position, one query id), pre-serialized. Clients:
``--clients`` 1, 8 and 64 concurrent threads, each with its own ``httpx.Client`` (a keep-alive
connection), each sending its next request when the previous one is answered, for ``--seconds`` per
setting after ``--warmup`` untimed requests a client. Reported per setting: requests timed, p50 and
p99 latency (request sent to answer parsed, as a client sees it), throughput (requests/s), and the
mean number of requests per model call (the server's ``/metrics``: dynamic batching); at one client
also ``GET /health``, a round trip that does no work (the HTTP floor). The same is measured for the
Open Inference Protocol's ``POST /v2/models/qilcm/infer`` with the binary tensor data extension
(``features`` [1, items, features] FP32 and ``mask`` [1, items] BOOL as raw bytes after a JSON header,
the scores asked back binary; its scores checked against ``session.run`` first), once with httpx and
once with Triton's own client (``tritonclient.http``, what a KServe v2 user runs; its HTTP parser is in
C, where httpx's, h11, is pure Python and costs a few tenths of a millisecond a request).

Reference, in this process, one thread, on the same list: ``session.run`` of the same file
(``OnnxRanker.score_lists`` on the padded list: the graph alone) and ``OnnxRanker.predict`` (grouping
and padding included); and, to show where the time goes, the server's parsing and checking of the
request body alone (``ctxrank.serving.requests.parse_request``: ``json.loads``, then NumPy).
Printed: p50 at one client / in-process ``session.run`` p50, for ``/rank`` and for the v2 binary route
(each client); the target, at most 1.5, is the v2 binary route's with tritonclient.
The load generator shares the machine with the server: on a machine with few cores, many clients
measure the machine as much as the server.

    .venv/bin/python benchmarks/bench_serve.py [--items 100] [--features 136] [--clients 1,8,64]
        [--seconds 5] [--json FILE] [--quick]
    .venv/bin/python benchmarks/bench_serve.py --from-json FILE | --publish
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from _common import summarize, synthetic_ranking_data
from _report import (
    add_stored_args,
    answer_stored_args,
    code_of_tree,
    emit_json,
    machine_info,
    machine_line,
    markdown_table,
    stored_blocks,
)

TARGET_ONE_CLIENT_OVER_IN_PROCESS = 1.5  # p50 at one client within 1.5x of in-process
SRC = Path(__file__).resolve().parents[1] / "src"


def export_graph(workdir: Path, items: int, features: int, quick: bool) -> Path:
    """A QILCM model directory (random weights, minmax normalizer) exported to ONNX."""
    import torch

    from ctxrank.config import resolve_config
    from ctxrank.data.transforms import make_transform
    from ctxrank.export import export_model
    from ctxrank.registry import make_model
    from ctxrank.training.checkpoint import save_checkpoint

    params = {"encoder_width": 8, "att_hidden": [8], "rank_hidden": [8]} if quick else {}
    train = synthetic_ranking_data(8, items, features, seed=1)
    torch.manual_seed(0)
    model = make_model("qilcm", features, dict(params)).eval()
    overrides = ["model=qilcm", *(f"model_params.{k}={json.dumps(v)}" for k, v in params.items())]
    directory = save_checkpoint(
        workdir / "qilcm",
        model,
        resolve_config(None, overrides),
        make_transform("minmax").fit(train),
        train_data=train,
    )
    return export_model(directory, "onnx", workdir / "qilcm.onnx").path


def in_process(path: Path, x: np.ndarray, body: bytes, seconds: float, warmup: int) -> dict:
    """p50 / p99 of ``session.run`` on the padded list, of ``OnnxRanker.predict`` on its rows, and of
    the server's JSON parsing and checks of the request body (``parse_request``)."""
    from ctxrank.serving import OnnxRanker, pad_rows
    from ctxrank.serving.requests import Limits, parse_request

    ranker = OnnxRanker(path, threads=1)
    qid = np.zeros(len(x), dtype=np.int64)
    lists = pad_rows(x, qid)
    limits = Limits(max_rows=len(x), max_list=len(x))
    calls = {
        "session.run (graph alone)": lambda: ranker.score_lists(lists.features, lists.mask),
        "OnnxRanker.predict (padding included)": lambda: ranker.predict(x, qid),
        f"parse_request of the JSON body ({len(body) / 1024:.0f} KiB)": lambda: parse_request(
            body, ranker, limits
        ),
    }
    out = {}
    for label, fn in calls.items():
        for _ in range(warmup):
            fn()
        times, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds or len(times) < 20:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[label] = summarize(times)
    return out


def start_server(path: Path, max_batch: int, batch_wait_ms: float) -> tuple[subprocess.Popen, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p),
    }
    argv = [
        *(sys.executable, "-m", "ctxrank", "serve", "--model", str(path), "--port", "0", "--threads", "1"),
        *("--max-batch", str(max_batch), "--batch-wait-ms", str(batch_wait_ms), "--log-level", "warning"),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    found = re.search(r" on (http://[\w.]+:\d+) ", line)
    if found is None:
        proc.kill()
        raise RuntimeError(f"the server did not start: {line}{proc.stderr.read()[-3000:]}")
    return proc, found.group(1)


def check_v2(url: str, path: Path, x: np.ndarray, body: bytes, headers: dict) -> None:
    """The v2 route's scores of ``x`` are the graph's (else the benchmark times a wrong answer)."""
    import httpx

    from ctxrank.serving import OnnxRanker

    answer = httpx.post(f"{url}{ROUTES['v2'][0]}", content=body, headers=headers, timeout=60)
    answer.raise_for_status()
    expected = OnnxRanker(path, threads=1).score_lists(x[None], np.ones((1, len(x)), dtype=bool))[0]
    np.testing.assert_allclose(v2_scores(answer.content, answer.headers), expected, rtol=1e-6, atol=1e-6)


def batch_counts(text: str) -> tuple[float, float]:
    """(model calls, requests scored) from the server's /metrics text."""
    count = re.search(r"^ctxrank_batch_requests_count (\S+)$", text, re.M)
    total = re.search(r"^ctxrank_batch_requests_sum (\S+)$", text, re.M)
    return (float(count.group(1)), float(total.group(1))) if count and total else (0.0, 0.0)


def v2_request(x: np.ndarray) -> tuple[bytes, dict[str, str]]:
    """A binary infer body of one list ``x`` (L, F) and its headers (the binary tensor extension)."""
    features, mask = x[None].astype("<f4").tobytes(), np.ones((1, len(x)), dtype=bool).tobytes()
    header = json.dumps({
        "inputs": [
            {"name": "features", "shape": [1, *x.shape], "datatype": "FP32",
             "parameters": {"binary_data_size": len(features)}},
            {"name": "mask", "shape": [1, len(x)], "datatype": "BOOL",
             "parameters": {"binary_data_size": len(mask)}},
        ],
        "parameters": {"binary_data_output": True},
    }).encode()  # fmt: skip
    headers = {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(header)),
    }
    return header + features + mask, headers


def v2_scores(content: bytes, headers: Any) -> np.ndarray:
    """The FP32 scores after the JSON header of a binary infer answer."""
    return np.frombuffer(content[int(headers["inference-header-content-length"]) :], dtype="<f4")


ROUTES = {  # route -> (path, how an answer is read)
    "rank": ("/rank", lambda answer: answer.json()),
    "v2": ("/v2/models/qilcm/infer", lambda answer: v2_scores(answer.content, answer.headers)),
}


class TritonCaller:
    """One binary infer call of ``x`` with Triton's own HTTP client (``tritonclient.http``, on
    geventhttpclient's C parser): the request built from the NumPy tensors, the scores read back. Its
    gevent connection belongs to the thread that made it: one client a thread that calls."""

    def __init__(self, url: str, x: np.ndarray) -> None:
        import tritonclient.http as triton

        self.triton, self.url, self.local, self.clients = (
            triton,
            url.removeprefix("http://"),
            threading.local(),
            [],
        )
        self.features, self.mask = x[None], np.ones((1, len(x)), dtype=bool)

    @property
    def client(self) -> Any:
        if not hasattr(self.local, "client"):
            self.local.client = self.triton.InferenceServerClient(self.url, network_timeout=60)
            self.clients.append(self.local.client)
        return self.local.client

    def __call__(self) -> np.ndarray:
        t = self.triton
        features = t.InferInput("features", list(self.features.shape), "FP32")
        features.set_data_from_numpy(self.features, binary_data=True)
        mask = t.InferInput("mask", list(self.mask.shape), "BOOL")
        mask.set_data_from_numpy(self.mask, binary_data=True)
        wanted = [t.InferRequestedOutput("scores", binary_data=True)]
        return self.client.infer("qilcm", [features, mask], outputs=wanted).as_numpy("scores")

    def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):  # a gevent client closed from another thread
                client.close()


def load(url: str, route: str, body: bytes, headers: dict, clients: int, seconds: float, warmup: int,
         x: np.ndarray | None = None) -> dict:  # fmt: skip
    """``clients`` concurrent request loops of ``route`` for ``seconds`` (a thread and a keep-alive
    ``httpx.Client`` each; route ``v2-triton``: a :class:`TritonCaller` each); latency of every timed
    request."""
    import httpx

    path, read = ROUTES["v2" if route == "v2-triton" else route]
    sessions = [httpx.Client(base_url=url, timeout=60) for _ in range(clients)]
    triton = {id(c): TritonCaller(url, x) for c in sessions} if route == "v2-triton" else None

    def one(client: httpx.Client) -> float:
        t0 = time.perf_counter()
        if triton:
            triton[id(client)]()
            return time.perf_counter() - t0
        answer = client.post(path, content=body, headers=headers)
        answer.raise_for_status()
        read(answer)
        return time.perf_counter() - t0

    def health(client: httpx.Client) -> float:  # the HTTP floor: a round trip that does no work
        t0 = time.perf_counter()
        client.get("/health").raise_for_status()
        return time.perf_counter() - t0

    def loop(client: httpx.Client, times: list[float], stop: float) -> None:
        times.append(one(client))  # at least one a client
        while time.perf_counter() < stop:
            times.append(one(client))

    try:
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(lambda c: [one(c) for _ in range(warmup)], sessions))
            calls_before, scored_before = batch_counts(sessions[0].get("/metrics").text)
            per_client: list[list[float]] = [[] for _ in sessions]
            start = time.perf_counter()
            stop = start + seconds
            list(pool.map(lambda i: loop(sessions[i], per_client[i], stop), range(clients)))
            wall = time.perf_counter() - start
        calls, scored = batch_counts(sessions[0].get("/metrics").text)
        times = [t for ts in per_client for t in ts]
        floor = [health(sessions[0]) for _ in range(max(20, len(times)))] if clients == 1 else None
    finally:
        for client in [*sessions, *(triton or {}).values()]:
            client.close()
    result = summarize(times)
    if floor is not None:
        result["health_round_trip"] = summarize(floor)
    result["requests_per_s"] = len(times) / wall
    result["mean_requests_per_model_call"] = (scored - scored_before) / max(calls - calls_before, 1.0)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100, help="items of the list of a request (default 100)")
    ap.add_argument("--features", type=int, default=136, help="features per item (default 136, MSLR)")
    ap.add_argument(
        "--clients", default="1,8,64", help="concurrent clients, comma-separated (default 1,8,64)"
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="timed seconds per setting (default 5)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed requests per client first (default 5)")
    ap.add_argument("--max-batch", type=int, default=32, help="the server's --max-batch (default 32)")
    ap.add_argument(
        "--batch-wait-ms", type=float, default=2.0, help="the server's --batch-wait-ms (default 2)"
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes: checks the script runs (seconds)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    add_stored_args(ap, "bench-serve")
    args = ap.parse_args(argv)
    if answer_stored_args(args, BLOCK, block_text, report_text):
        return 0
    if args.quick:
        args.items, args.features, args.seconds, args.warmup, args.clients = 10, 8, 0.5, 2, "1,4"
    clients = [int(c) for c in args.clients.split(",")]
    info = machine_info(1, tuple((d, d) for d in ("onnxruntime", "fastapi", "uvicorn")), isa=True)
    print(machine_line(info), flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        path = export_graph(Path(tmp), args.items, args.features, args.quick)
        x = np.random.default_rng(0).random((args.items, args.features), dtype=np.float32)
        body = json.dumps({"qid": "q", "rows": x.tolist()}).encode()
        requests = {"rank": (body, {"content-type": "application/json"}), "v2": v2_request(x)}
        reference = in_process(path, x, body, args.seconds, args.warmup)
        proc, url = start_server(path, args.max_batch, args.batch_wait_ms)
        try:
            check_v2(url, path, x, *requests["v2"])
            served = {
                route: {
                    c: load(url, route, *requests[route.split("-")[0]], c, args.seconds, args.warmup, x)
                    for c in clients
                }
                for route in (*ROUTES, "v2-triton")
            }
        finally:
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(30)
        if status != 0:
            raise RuntimeError(f"the server exited with {status}: {proc.stderr.read()[-2000:]}")

    graph = reference["session.run (graph alone)"]
    rows = [
        [
            f"in process: {label}",
            "",
            f"{r['n']:,}",
            f"{r['p50_s'] * 1e3:.3f}",
            f"{r['p99_s'] * 1e3:.3f}",
            "",
            "",
        ]
        for label, r in reference.items()
    ]
    labels = {
        "rank": "HTTP /rank (JSON, httpx)",
        "v2": "HTTP /v2 infer (binary tensors, httpx)",
        "v2-triton": "HTTP /v2 infer (binary tensors, tritonclient)",
    }
    for route, by_clients in served.items():
        for c, r in by_clients.items():
            if "health_round_trip" in r and route == "rank":
                h = r["health_round_trip"]
                rows.append(["HTTP GET /health (no work)", str(c), f"{h['n']:,}", f"{h['p50_s'] * 1e3:.3f}",
                             f"{h['p99_s'] * 1e3:.3f}", "", ""])  # fmt: skip
            rows.append([
                labels[route], str(c), f"{r['n']:,}", f"{r['p50_s'] * 1e3:.3f}", f"{r['p99_s'] * 1e3:.3f}",
                f"{r['requests_per_s']:,.0f}", f"{r['mean_requests_per_model_call']:.2f}",
            ])  # fmt: skip
    shape = f"one list of {args.items} items x {args.features} features a request"
    print(f"\nQILCM ONNX, {shape}, server --threads 1\n")
    header = ["path", "clients", "requests", "p50 ms", "p99 ms", "requests/s", "requests / model call"]
    print(markdown_table(header, rows, "lrrrrrr"))
    verdicts = {}
    for route, key in (
        ("rank", "one_client_p50_over_in_process"),
        ("v2", "v2_one_client_p50_over_in_process"),
        ("v2-triton", "v2_tritonclient_one_client_p50_over_in_process"),
    ):
        if clients[0] != 1:
            break
        ratio = served[route][1]["p50_s"] / graph["p50_s"]
        verdicts[key] = ratio
        ok = ratio <= TARGET_ONE_CLIENT_OVER_IN_PROCESS
        print(
            f"\n{labels[route]}: p50 at 1 client / in-process session.run p50: {ratio:.2f}x "
            f"(target <= {TARGET_ONE_CLIENT_OVER_IN_PROCESS}x: {'met' if ok else 'not met'})"
        )
    emit_json(
        {
            "benchmark": "bench_serve",
            "quick": args.quick,
            "code": code_of_tree(),
            "machine": info,
            "settings": {
                "items": args.items,
                "features": args.features,
                "seconds": args.seconds,
                "clients": clients,
                "warmup": args.warmup,
                "max_batch": args.max_batch,
                "batch_wait_ms": args.batch_wait_ms,
                "server_threads": 1,
            },
            "target_one_client_over_in_process": TARGET_ONE_CLIENT_OVER_IN_PROCESS,
            "in_process": reference,
            "served": {str(c): r for c, r in served["rank"].items()},
            "served_v2": {str(c): r for c, r in served["v2"].items()},
            "served_v2_tritonclient": {str(c): r for c, r in served["v2-triton"].items()},
            "verdicts": verdicts,
        },
        args.json,
    )
    return 0


# ------------------------------------------------------------------ the stored run (evidence/bench/)
#: the served routes of a run's JSON (its keys) and their rows' labels
SERVED_LABELS = {
    "served": "HTTP /rank (JSON)",
    "served_v2": "HTTP /v2 infer (binary tensors, httpx)",
    "served_v2_tritonclient": "HTTP /v2 infer (binary tensors, tritonclient)",
}
VERDICT_LABELS = {
    "one_client_p50_over_in_process": "HTTP /rank (JSON)",
    "v2_one_client_p50_over_in_process": "HTTP /v2 infer (binary tensors, httpx)",
    "v2_tritonclient_one_client_p50_over_in_process": "HTTP /v2 infer (binary tensors, tritonclient)",
}


def report_text(blob: dict) -> str:
    """The table and verdicts of a run, from its JSON ``blob`` (also a stored one: :func:`block_text`)."""
    st = blob["settings"]
    def latency(label: str, clients: str, r: dict) -> list[str]:
        return [label, clients, f"{r['n']:,}", f"{r['p50_s'] * 1e3:.3f}", f"{r['p99_s'] * 1e3:.3f}"]

    rows = [[*latency(f"in process: {label}", "", r), "", ""] for label, r in blob["in_process"].items()]
    for key, by_clients in blob.items():
        if not key.startswith("served"):
            continue
        for c, r in by_clients.items():
            if key == "served" and "health_round_trip" in r:
                rows.append([*latency("HTTP GET /health (no work)", c, r["health_round_trip"]), "", ""])
            rows.append([*latency(SERVED_LABELS.get(key, key), c, r), f"{r['requests_per_s']:,.0f}",
                         f"{r['mean_requests_per_model_call']:.2f}"])  # fmt: skip
    lines = [machine_line(blob["machine"]) + f"; code {blob['code']}"]
    lines.append(
        f"QILCM ONNX, one list of {st['items']} items x {st['features']} features a request, server "
        f"--threads {st['server_threads']} --max-batch {st['max_batch']} "
        f"--batch-wait-ms {st['batch_wait_ms']}; "
        f"{st['seconds']:g} s per setting after {st['warmup']} warm-up requests a client"
    )
    header = ["path", "clients", "requests", "p50 ms", "p99 ms", "requests/s", "requests / model call"]
    lines += ["", markdown_table(header, rows, "lrrrrrr"), ""]
    target = blob["target_one_client_over_in_process"]
    for key, ratio in blob["verdicts"].items():
        lines.append(
            f"{VERDICT_LABELS.get(key, key)}: p50 at 1 client / in-process session.run p50: {ratio:.2f}x "
            f"(target <= {target}x: {'met' if ratio <= target else 'not met'})"
        )
    return "\n".join(lines) + "\n"


# A page states a stored run between ``<!-- bench-serve: FILE -->`` and ``<!-- /bench-serve -->``;
# ``--publish`` rewrites each block from its file (tests/test_bench_evidence.py checks them).
BLOCK, block_text = stored_blocks("bench-serve", report_text)


def evidence_problems(blob: dict) -> list[str]:
    """What a run lacks to be stored as evidence (empty: nothing): 1, 8 and 64 clients on /rank and v2
    (httpx), and on v2 through tritonclient when the run timed it (runs before it did not), the target
    and each route's one-client ratio."""
    problems = []
    optional = {"served_v2_tritonclient": "v2_tritonclient_one_client_p50_over_in_process"}
    routes = [k for k in SERVED_LABELS if k not in optional or k in blob]
    for key in routes:
        clients = sorted(blob.get(key, {}), key=int)
        if clients != ["1", "8", "64"]:
            problems.append(f"{key}: clients {clients}, expected 1, 8, 64")
    wanted = {k for k in VERDICT_LABELS if k not in optional.values() or "served_v2_tritonclient" in routes}
    if set(blob.get("verdicts", {})) != wanted:
        found = sorted(blob.get("verdicts", {}))
        problems.append(f"one-client ratios {found}, expected {sorted(wanted)}")
    if blob.get("target_one_client_over_in_process") is None or not blob.get("code"):
        problems.append("no target or code recorded")
    return problems


if __name__ == "__main__":
    sys.exit(main())
