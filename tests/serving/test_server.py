"""``ctxrank serve`` (ctxrank.serving.server) and what it is made of: the /rank JSON (parsed and refused
field by field), the OnnxRanker, the DirectoryRanker. A real server on loopback (a free port, in a
thread; one test in a subprocess with SIGTERM) called with httpx; its scores equal `ctxrank predict`'s
for an exported ONNX file, a model directory and a re-ranking directory."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrank.cli import main
from ctxrank.serving.onnx_ranker import OnnxRanker
from ctxrank.serving.requests import Limits, RequestError, parse_request, rank_answer
from ctxrank.serving.server import HTTP_PARSERS, Batcher, ServeOptions, bind, load_ranker, make_server
from tests.conftest import REPO, make_ranking_data

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
FAKE = SimpleNamespace(
    feature_names=("f1", "f2"),
    n_features=2,
    categorical_names=(),
    categorical_vocab={},
    allow_missing=False,
)
CATS = SimpleNamespace(
    feature_names=("price", "stops"),
    n_features=2,
    categorical_names=("airline", "cabin"),
    categorical_vocab={"airline": ["LX", "UA"], "cabin": ["business", "economy"]},
    allow_missing=True,
)
LIMITS = Limits(max_rows=20, max_list=5)


# ------------------------------------------------------------------------------------ the JSON
def _parse(doc, ranker=FAKE, limits=LIMITS):
    return parse_request(doc if isinstance(doc, bytes) else json.dumps(doc).encode(), ranker, limits)


def test_rows_by_position_and_by_name_give_the_same_arrays():
    a = _parse({"qid": ["q", "r", "q"], "rows": [[1, 2.5], [3, 4], [5, 6]]})
    b = _parse(
        {"qid": ["q", "r", "q"], "rows": [{"f2": 2.5, "f1": 1}, {"f1": 3, "f2": 4}, {"f1": 5, "f2": 6}]}
    )
    for r in (a, b):
        assert r.X.dtype == np.float32 and r.X.tolist() == [[1, 2.5], [3, 4], [5, 6]]
        assert r.group.tolist() == [0, 1, 0] and r.query_ids == ["q", "r"] and r.codes is None
    one = _parse({"qid": 7, "rows": [[1, 2], [3, 4]]})
    assert one.group.tolist() == [0, 0] and one.query_ids == [7]


def test_categorical_values_are_coded_with_the_saved_vocabulary_and_null_is_missing():
    r = _parse(
        {"qid": "s", "rows": [[100, None, "UA", "economy"], [90, 1, "XX", None], [80, 0, "LX", "business"]]},
        CATS,
    )
    assert r.codes.tolist() == [[2, 2], [0, 0], [1, 1]]  # code of vocab[i] is i + 1; unknown and null 0
    assert np.isnan(r.X[0, 1]) and r.X[1, 1] == 1
    named = _parse(
        {"qid": "s", "rows": [{"price": 1, "stops": 0, "airline": "LX", "cabin": "economy"}]}, CATS
    )
    assert named.codes.tolist() == [[1, 2]]


@pytest.mark.parametrize(
    "body, status, field, words",
    [
        (b"{not json", 400, "body", "not JSON"),
        (b"\xff\xfe\x00", 400, "body", "not JSON"),
        (b'{"qid": "a", "rows": [[1, NaN]]}', 400, "body", "NaN is not JSON"),
        (b'{"qid": "a", "rows": [[1, -Infinity]]}', 400, "body", "-Infinity is not JSON"),
        (b"[" * 100_000, 400, "body", "nested too deeply"),
        (b"[1, 2]", 422, "body", "expected a JSON object"),
        ({"rows": [[1, 2]]}, 422, "qid", "missing"),
        ({"qid": "a"}, 422, "rows", "missing"),
        ({"qid": "a", "rows": [[1, 2]], "extra": 1}, 422, "extra", "unknown key"),
        ({"qid": "a", "rows": []}, 422, "rows", "empty"),
        ({"qid": "a", "rows": {"f1": 1}}, 422, "rows", "expected a list"),
        ({"qid": "a", "rows": [[1, 2]] * 21}, 413, "rows", "at most 20"),
        ({"qid": "a", "rows": [[1, 2]] * 6}, 413, "qid[0]", "at most 5 a query"),
        ({"qid": 1.5, "rows": [[1, 2]]}, 422, "qid", "expected a query id"),
        ({"qid": True, "rows": [[1, 2]]}, 422, "qid", "expected a query id"),
        ({"qid": ["a"], "rows": [[1, 2], [3, 4]]}, 422, "qid", "expected 2 query ids"),
        ({"qid": ["a", None], "rows": [[1, 2], [3, 4]]}, 422, "qid[1]", "string or an integer"),
        ({"qid": ["a", ["b"]], "rows": [[1, 2], [3, 4]]}, 422, "qid[1]", "string or an integer"),
        ({"qid": "a", "rows": [[1, 2, 3]]}, 422, "rows[0]", "2 feature values, got 3 values"),
        ({"qid": "a", "rows": [[1, 2], 5]}, 422, "rows[1]", "expected an array"),
        ({"qid": "a", "rows": [[1, "2"]]}, 422, "rows[0][1]", 'expected a number, got "2"'),
        ({"qid": "a", "rows": [[1, True]]}, 422, "rows[0][1]", "expected a number, got true"),
        ({"qid": "a", "rows": [[1, [2]]]}, 422, "rows[0][1]", "expected a number"),
        ({"qid": "a", "rows": [[1, {"x": 1}]]}, 422, "rows[0][1]", "expected a number"),
        ({"qid": "a", "rows": [[1, None]]}, 422, "rows[0][1]", "reads no missing values"),
        (b'{"qid": "a", "rows": [[1, 1e999]]}', 422, "rows[0][1]", "beyond float32"),
        ({"qid": "a", "rows": [[1, 1e39]]}, 422, "rows[0][1]", "beyond float32"),
        ({"qid": "a", "rows": [{"f1": 1}]}, 422, 'rows[0]["f2"]', "missing feature(s) ['f2']"),
        (
            {"qid": "a", "rows": [{"f1": 1, "f2": 2, "f9": 3}]},
            422,
            'rows[0]["f9"]',
            "unknown feature(s) ['f9']",
        ),
        ({"qid": "a", "rows": [{"f1": 1, "f2": "x"}]}, 422, 'rows[0]["f2"]', "expected a number"),
        ({"qid": "a", "rows": [{"f1": 1, "f2": 2}, [1, 2]]}, 422, "rows[1]", "expected an object"),
    ],
)
def test_a_malformed_request_names_its_field(body, status, field, words):
    with pytest.raises(RequestError) as info:
        _parse(body)
    assert (info.value.status, info.value.field) == (status, field)
    assert words in str(info.value)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["qid", "rows", "f1", "f2", "x"]), inner)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(doc=st.fixed_dictionaries({}, optional={"qid": _JSON, "rows": _JSON, "x": _JSON}) | _JSON)
def test_any_json_is_parsed_or_refused_with_a_request_error(doc):
    """Whatever JSON comes, the parser answers arrays or a RequestError with a status and a field:
    never another exception (a 500)."""
    for ranker in (FAKE, CATS):
        try:
            r = _parse(doc, ranker)
        except RequestError as exc:
            assert exc.status in (400, 413, 422) and exc.field
        else:
            assert r.X.shape == (len(doc["rows"]), 2) and r.X.dtype == np.float32


def test_categorical_refusals_name_the_cell():
    with pytest.raises(RequestError, match=r"rows\[0\]\[3\]: expected a category") as info:
        _parse({"qid": "s", "rows": [[1, 0, "LX", ["economy"]]]}, CATS)
    assert info.value.field == "rows[0][3]"
    with pytest.raises(RequestError, match="no feature names"):
        _parse(
            {"qid": "s", "rows": [{"f1": 1, "f2": 2}]}, SimpleNamespace(**{**vars(FAKE), "feature_names": ()})
        )


def test_the_answer_ranks_each_query_best_first_ties_by_row():
    r = _parse({"qid": ["q", "r", "q", "q", "r"], "rows": [[0, 0]] * 5})
    answer = rank_answer(r, np.array([0.5, 1.0, 2.0, 0.5, -1.0]))
    assert answer == {
        "scores": [0.5, 1.0, 2.0, 0.5, -1.0],
        "rankings": [{"qid": "q", "rows": [2, 0, 3]}, {"qid": "r", "rows": [1, 4]}],
    }
    with pytest.raises(RuntimeError, match="not finite"):
        rank_answer(r, np.array([0.5, np.nan, 2.0, 0.5, -1.0]))


# ------------------------------------------------------------------------------ options, errors
def test_options_are_checked_before_anything_starts(tmp_path, capsys):
    with pytest.raises(ValueError, match="port must be at most 65,535"):
        ServeOptions(port=70000)
    with pytest.raises(ValueError, match=r"max_list .* must not exceed max_rows"):
        ServeOptions(max_rows=10, max_list=11)
    with pytest.raises(ValueError, match="batch_wait_ms must be a number"):
        ServeOptions(batch_wait_ms=float("nan"))
    with pytest.raises(ValueError, match=r"read_timeout must be a number in \[0.001, 3600000\], got 0"):
        ServeOptions(read_timeout=0)
    with pytest.raises(ValueError, match="max_header_bytes must be an integer >= 1024, got 10"):
        ServeOptions(max_header_bytes=10)
    with pytest.raises(ValueError, match="max_connections must be a positive integer, got 0"):
        ServeOptions(max_connections=0)
    with pytest.raises(ValueError, match=r"log_level must be one of \['critical', .*\], got 'loud'"):
        ServeOptions(log_level="loud")
    assert main(["serve", "--model", str(tmp_path / "nothing.onnx")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    (tmp_path / "bad.onnx").write_bytes(b"not a graph")
    assert main(["serve", "--model", str(tmp_path / "bad.onnx")]) == 2
    assert "not an ONNX file onnxruntime can load" in capsys.readouterr().err
    assert main(["serve", "--model", str(tmp_path), "--port", "1"]) == 2  # a directory that is no model
    assert "ctxrank: error:" in capsys.readouterr().err
    assert main(["serve", "--model", "x.onnx", "--max-batch", "0"]) == 2  # argparse: a usage error
    assert "--max-batch" in capsys.readouterr().err
    taken = bind("127.0.0.1", 0)
    with pytest.raises(ValueError, match=r"cannot listen on 127\.0\.0\.1"):
        bind("127.0.0.1", taken.getsockname()[1])
    taken.close()


# -------------------------------------------------------------------------------------- models
@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A QILCM directory and its ONNX file, a re-ranking directory, and a LETOR test file."""
    import torch

    from ctxrank.config import RerankConfig, RunConfig, TrainConfig, resolve_config
    from ctxrank.data.transforms import make_transform
    from ctxrank.export import export_model
    from ctxrank.registry import make_model
    from ctxrank.training.checkpoint import save_checkpoint
    from ctxrank.training.run import run_training

    root = tmp_path_factory.mktemp("serve-models")
    train, test = make_ranking_data(20, 10, 5, seed=1), make_ranking_data(6, 12, 5, seed=2)
    torch.manual_seed(0)
    small = {"encoder_width": 8, "att_hidden": [8], "rank_hidden": [8]}
    model = make_model("qilcm", 5, dict(small)).eval()
    transform = make_transform("minmax").fit(train)
    config = resolve_config(None, ["model=qilcm", *(f"model_params.{k}={v}" for k, v in small.items())])
    save_checkpoint(root / "qilcm", model, config, transform, train_data=train)
    export_model(root / "qilcm", "onnx", root / "qilcm.onnx")
    lgb = {"n_estimators": 3, "num_leaves": 3, "min_data_in_leaf": 2, "early_stopping_rounds": None}
    rerank = RunConfig(
        model="mlp",
        model_params={"hidden": [4]},
        train=TrainConfig(max_epochs=1, batch_size=8),
        rerank=RerankConfig(initial="lambdamart", top_k=4, initial_params=lgb),
    )
    run_training(rerank, train, train, out=root / "rerank", progress=False)
    rows = zip(test.query_ids[test.query_index].tolist(), test.features.tolist(), strict=True)
    lines = (f"0 qid:{q[1:]} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(x)) for q, x in rows)
    (root / "test.txt").write_text("\n".join(lines) + "\n")
    return SimpleNamespace(root=root, test=test)


def _predicted(model_dir: Path, data_file: Path, capsys) -> np.ndarray:
    capsys.readouterr()
    assert main(["predict", "--model", str(model_dir), "--data", str(data_file), "-o", "-"]) == 0
    return np.array([float(s) for s in capsys.readouterr().out.split()])


@contextlib.contextmanager
def running(ranker, **options):
    """A server of ``ranker`` on a free loopback port, in a thread: yields (base URL, server)."""
    sock = bind("127.0.0.1", 0)
    server = make_server(ranker, ServeOptions(port=0, log_level="warning", **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", server
    finally:
        server.should_exit = True
        thread.join(20)
        assert not thread.is_alive()


def _request_of(test) -> dict:
    """The test data as one /rank request (qid per row: the LETOR file's ids)."""
    qid = [q[1:] for q in test.query_ids[test.query_index].tolist()]
    return {"qid": qid, "rows": test.features.tolist()}


@pytest.mark.parametrize("kind", ["onnx", "directory", "rerank"])
def test_served_scores_equal_ctxrank_predict(models, kind, capsys):
    path = {"onnx": "qilcm.onnx", "directory": "qilcm", "rerank": "rerank"}[kind]
    reference = _predicted(
        models.root / ("qilcm" if kind == "onnx" else path), models.root / "test.txt", capsys
    )
    ranker = load_ranker(models.root / path)
    body = _request_of(models.test)
    with running(ranker) as (url, _), httpx.Client(base_url=url) as client:
        assert client.get("/health").json() == {"status": "ok"}
        ready = client.get("/ready").json()
        assert ready["status"] == "ready" and ready["model"]["feature_names"] == [
            "f1",
            "f2",
            "f3",
            "f4",
            "f5",
        ]
        answer = client.post("/rank", json=body)
        assert answer.status_code == 200, answer.text
        scores = np.array(answer.json()["scores"])
        np.testing.assert_allclose(scores, reference, rtol=1e-5, atol=1e-5)
        # the rankings are the scores' order within each query; the same rows by name give the same
        for ranking in answer.json()["rankings"]:
            rows = [i for i, q in enumerate(body["qid"]) if q == ranking["qid"]]
            assert ranking["rows"] == sorted(rows, key=lambda i: (-scores[i], i))
        named = [dict(zip(ready["model"]["feature_names"], r, strict=True)) for r in body["rows"]]
        again = client.post("/rank", json={"qid": body["qid"], "rows": named}).json()["scores"]
        np.testing.assert_array_equal(again, scores)
        # a query alone gets the scores it has among the others (a list is scored on its own rows)
        first = [i for i, q in enumerate(body["qid"]) if q == body["qid"][0]]
        alone = client.post("/rank", json={"qid": "x", "rows": [body["rows"][i] for i in first]}).json()
        np.testing.assert_allclose(alone["scores"], scores[first], rtol=1e-6, atol=1e-6)


def test_concurrent_requests_are_batched_and_each_gets_its_own_scores(models):
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    body = _request_of(models.test)
    expected = ranker.predict(np.array(body["rows"], dtype=np.float32), body["qid"])
    calls = []
    predict = ranker.predict

    def slow_predict(x, qid, codes=None):  # slow enough that requests queue behind a running batch
        calls.append(len(x))
        time.sleep(0.05)
        return predict(x, qid, codes)

    ranker.predict = slow_predict
    results: list = [None] * 12
    with running(ranker, batch_wait_ms=20, max_batch=8) as (url, _), httpx.Client(base_url=url) as client:

        def call(i: int) -> None:
            shift = [[v + i for v in row] for row in body["rows"]]  # other rows: other scores
            results[i] = (shift, client.post("/rank", json={"qid": body["qid"], "rows": shift}))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        metrics = client.get("/metrics").text
    assert len(calls) < 12 and max(calls) > len(body["rows"])  # some requests shared a model call
    for shift, answer in results:
        assert answer.status_code == 200
        np.testing.assert_allclose(
            answer.json()["scores"], predict(np.array(shift, np.float32), body["qid"]), rtol=1e-6
        )
    assert not np.allclose(results[0][1].json()["scores"], results[5][1].json()["scores"])
    np.testing.assert_allclose(results[0][1].json()["scores"], expected, rtol=1e-6)
    assert re.search(r'ctxrank_requests_total\{endpoint="/rank",status="200"\} 12\.0', metrics)
    assert (
        re.search(r"ctxrank_batch_requests_count \d", metrics) and "ctxrank_request_seconds_bucket" in metrics
    )
    assert "ctxrank_inference_seconds_sum" in metrics and "ctxrank_batch_rows_sum" in metrics


def test_hostile_requests_get_a_json_4xx_never_a_500(models):
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    ok = {"qid": "a", "rows": [[0.1, 0.2, 0.3, 0.4, 0.5]]}
    with (
        running(ranker, max_rows=30, max_list=10, max_body_bytes=4096) as (url, _),
        httpx.Client(base_url=url) as client,
    ):
        cases = [
            (client.post("/rank", content=b"{", headers={"content-type": "application/json"}), 400, "body"),
            (
                client.post("/rank", content=json.dumps(ok), headers={"content-type": "text/plain"}),
                415,
                "content-type",
            ),
            (client.post("/rank", content=json.dumps(ok)), 415, "content-type"),  # no content type
            (client.post("/rank", json={"qid": "a", "rows": [[0.1] * 5] * 11}), 413, "qid[0]"),
            (
                client.post("/rank", json={"qid": "a", "rows": [[0.123456789] * 5] * 200}),
                413,
                "body",
            ),  # > 4096 B
            (client.post("/rank", json={"qid": list(range(31)), "rows": [[1] * 5] * 31}), 413, "rows"),
            (client.post("/rank", json={"qid": "a", "rows": [[1, 2, 3, 4, None]]}), 422, "rows[0][4]"),
            (client.post("/rank", json={"qid": "a", "rows": [{"f1": 1}]}), 422, 'rows[0]["f2"]'),
            (
                client.post("/rank", content=b"[" * 4000, headers={"content-type": "application/json"}),
                400,
                "body",
            ),
            (client.get("/rank"), 405, None),
            (client.get("/nothing"), 404, None),
        ]
        with client.stream(  # a chunked body without a length, over the limit
            "POST",
            "/rank",
            content=iter([b'{"qid": "a", "rows": [', b"[1, 2, 3, 4, 5]," * 400, b"]}"]),
            headers={"content-type": "application/json"},
        ) as streamed:
            streamed.read()
            cases.append((streamed, 413, "body"))
        for answer, status, field in cases:
            assert answer.status_code == status, answer.text
            assert answer.headers["content-type"] == "application/json"
            assert answer.json()["field"] == field and "Traceback" not in answer.text
        assert client.post("/rank", json=ok).status_code == 200  # still serving
        schema = client.get("/openapi.json").json()["paths"]["/rank"]["post"]["requestBody"]
        assert schema["content"]["application/json"]["schema"]["required"] == ["qid", "rows"]
        metrics = client.get("/metrics").text
    assert re.search(r'ctxrank_requests_total\{endpoint="/rank",status="413"\} 4\.0', metrics)
    assert re.search(r'ctxrank_requests_total\{endpoint="other",status="404"\} 1\.0', metrics)


def test_a_request_the_model_refuses_fails_alone_and_a_model_failure_is_a_json_500(models):
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    predict = ranker.predict

    def picky(x, qid, codes=None):
        if (np.asarray(x) == 666).any():
            raise ValueError("666 is refused")
        if (np.asarray(x) == 777).any():
            raise RuntimeError("the runtime broke")
        time.sleep(0.02)
        return predict(x, qid, codes)

    ranker.predict = picky
    answers: dict = {}
    with running(ranker, batch_wait_ms=50) as (url, _), httpx.Client(base_url=url) as client:

        def call(value: float) -> None:
            answers[value] = client.post("/rank", json={"qid": "a", "rows": [[value] * 5]})

        threads = [threading.Thread(target=call, args=(v,)) for v in (1.0, 666, 2.0, 777, 3.0)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [answers[v].status_code for v in (1.0, 2.0, 3.0)] == [200, 200, 200]
    assert answers[666].status_code == 422 and "666 is refused" in answers[666].json()["error"]
    assert answers[777].status_code == 500 and answers[777].json()["error"].startswith("internal error")
    assert "Traceback" not in answers[777].text


def test_a_lone_quick_request_is_scored_on_the_event_loop_and_a_slow_one_on_the_worker(models, monkeypatch):
    """Alone in the server, a request whose model call the last call predicts under Batcher.INLINE_S
    skips the worker thread; a slower one goes to the worker, so /health answers during it; failures
    scored on the loop are the same answers (422, a JSON 500 without traceback) on /rank and /v2."""
    monkeypatch.setattr(Batcher, "INLINE_S", 0.2)  # well above a loaded machine's hiccups
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    score_lists = ranker.score_lists
    threads: list[str] = []
    pause, scoring = {"s": 0.0}, threading.Event()

    def watched(features, *args):  # the graph run of /rank (through predict) and of /v2
        threads.append(threading.current_thread().name)
        if (features == 666).any():
            raise ValueError("666 is refused")
        if (features == 777).any():
            raise RuntimeError("the runtime broke")
        scoring.set()
        time.sleep(pause["s"])
        return score_lists(features, *args)

    ranker.score_lists = watched
    infer = "/v2/models/qilcm/infer"

    def tensors(value: float) -> dict:
        return {"inputs": [
            {"name": "features", "shape": [1, 1, 5], "datatype": "FP32", "data": [value] * 5},
            {"name": "mask", "shape": [1, 1], "datatype": "BOOL", "data": [True]},
        ]}  # fmt: skip

    def on_worker(name: str) -> bool:
        return name.startswith("ctxrank-model")

    with running(ranker) as (url, _), httpx.Client(base_url=url) as client:
        for _ in range(2):
            assert client.post("/rank", json={"qid": 1, "rows": [[0.5] * 5]}).status_code == 200
            assert client.post(infer, json=tensors(0.5)).status_code == 200
        assert on_worker(threads[0]) and not any(on_worker(name) for name in threads[1:])
        for route, body in (("/rank", {"qid": 1, "rows": [[666.0] * 5]}), (infer, tensors(666))):
            answer = client.post(route, json=body)
            assert answer.status_code == 422 and "666 is refused" in answer.json()["error"], answer.text
        for route, body in (("/rank", {"qid": 1, "rows": [[777.0] * 5]}), (infer, tensors(777))):
            answer = httpx.post(url + route, json=body)  # its own connection: uvicorn may close it
            assert answer.status_code == 500 and answer.json()["error"].startswith("internal error")
            assert "Traceback" not in answer.text
        assert not any(on_worker(name) for name in threads[1:])
        pause["s"] = 0.3  # scored on the loop once (predicted quick), then on the worker
        assert client.post("/rank", json={"qid": 1, "rows": [[0.5] * 5]}).status_code == 200
        assert not on_worker(threads[-1])
        pause["s"] = 1.0
        scoring.clear()
        slow = threading.Thread(target=client.post, args=(infer,), kwargs={"json": tensors(0.5)})
        slow.start()
        assert scoring.wait(10)
        with httpx.Client(base_url=url) as other:
            assert other.get("/health").status_code == 200
        assert slow.is_alive()  # /health answered while the worker scores
        slow.join()
        assert on_worker(threads[-1])


def test_requests_that_arrive_together_are_batched_though_each_would_be_quick_alone(models, monkeypatch):
    """The event loop scores a request itself only when no other is in flight: requests read while it
    was busy go to the batcher together."""
    monkeypatch.setattr(Batcher, "INLINE_S", 0.5)
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    score_lists = ranker.score_lists
    lists: list[int] = []  # lists per graph run: one a request
    pause, busy = {"s": 0.0}, threading.Event()

    def counted(features, *args):
        lists.append(len(features))
        if pause["s"]:
            busy.set()
            time.sleep(pause["s"])
            pause["s"] = 0.0
        return score_lists(features, *args)

    ranker.score_lists = counted
    one = {"qid": 1, "rows": [[0.5] * 5]}
    body = json.dumps(one).encode()
    request = b"POST /rank HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    request += b"content-length: %d\r\n\r\n%s" % (len(body), body)
    with running(ranker, batch_wait_ms=20) as (url, _), httpx.Client(base_url=url) as client:
        for _ in range(2):  # the first call times the model; the second is scored on the loop
            assert client.post("/rank", json=one).status_code == 200
        socks = [_connect(url) for _ in range(8)]
        for sock in socks:  # connected and served once: the server reads them from now on
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        pause["s"] = 0.3  # the loop busy scoring this one while eight more come
        first = threading.Thread(target=client.post, args=("/rank",), kwargs={"json": one})
        first.start()
        assert busy.wait(10)
        for sock in socks:
            sock.sendall(request)
        first.join()
        answers = [sock.recv(65536) for sock in socks]
        for sock in socks:
            sock.close()
    assert all(a.startswith(b"HTTP/1.1 200 ") for a in answers), answers
    assert lists[:3] == [1, 1, 1] and max(lists[3:]) > 1 and sum(lists[3:]) == 8, lists


def test_shutdown_finishes_the_requests_in_flight(models):
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    predict = ranker.predict
    started = threading.Event()

    def slow(x, qid, codes=None):
        started.set()
        time.sleep(0.5)
        return predict(x, qid, codes)

    ranker.predict = slow
    with running(ranker) as (url, server), httpx.Client(base_url=url) as client:
        result = {}
        t = threading.Thread(
            target=lambda: result.update(a=client.post("/rank", json={"qid": 1, "rows": [[1.0] * 5]}))
        )
        t.start()
        assert started.wait(10)
        server.should_exit = True  # what SIGTERM / SIGINT do (uvicorn's handler)
        t.join(10)
    assert result["a"].status_code == 200 and len(result["a"].json()["scores"]) == 1


# ------------------------------------------------------------------------- ONNX metadata
def _set(key, value):
    return lambda meta: {**meta, key: value}


def _without(key):
    return lambda meta: {k: v for k, v in meta.items() if k != key}


_RERANK = {"top_k": 4, "rank_feature": False, "score_feature": False, "trees": 3}
TAMPERED = {  # how the file's ctxrank.json is changed -> the words of the one-line ValueError
    "missing_values 'false'": (
        _set("missing_values", "false"),
        "'missing_values' must be true or false, got 'false'",
    ),
    "missing_values 1": (_set("missing_values", 1), "'missing_values' must be true or false, got 1"),
    "missing_values null": (_set("missing_values", None), "'missing_values' must be true or false"),
    "feature_names a string": (_set("feature_names", "f1"), "'feature_names' must be a list of strings"),
    "feature_names numbers": (
        _set("feature_names", [1, 2, 3, 4, 5]),
        "'feature_names' must be a list of strings",
    ),
    "feature_names null": (_set("feature_names", None), "'feature_names' must be a list of strings"),
    "feature_names twice": (_set("feature_names", ["f1"] * 5), "'feature_names' names a column twice"),
    "feature_names 4 of 5": (
        _set("feature_names", ["a", "b", "c", "d"]),
        "takes 5 features but its metadata names 4",
    ),
    "categorical_names an object": (
        _set("categorical_names", {"a": 1}),
        "'categorical_names' must be a list",
    ),
    "categorical_cardinalities short": (
        lambda m: {**m, "categorical_names": ["c"], "categorical_cardinalities": []},
        "'categorical_cardinalities' must be a list of 1 integers",
    ),
    "categorical_cardinalities huge": (
        lambda m: {**m, "categorical_names": ["c"], "categorical_cardinalities": [2**200]},
        "'categorical_cardinalities' must be an integer in [1, 2147483647], got an integer of 201 bits",
    ),
    "categorical_vocab a list": (_set("categorical_vocab", []), "'categorical_vocab' must be a JSON object"),
    "categorical_vocab of no column": (
        _set("categorical_vocab", {"zz": ["a"]}),
        "'categorical_vocab' has columns ['zz']",
    ),
    "categorical_vocab too long": (
        lambda m: {
            **m,
            "categorical_names": ["c"],
            "categorical_cardinalities": [2],
            "categorical_vocab": {"c": ["a", "b"]},
        },
        "'categorical_vocab.c' must hold at most 1 distinct categories",
    ),
    "model a number": (_set("model", 5), "'model' must be a non-empty string, got 5"),
    "model empty": (_set("model", ""), "'model' must be a non-empty string"),
    "transform a list": (_set("transform", ["minmax"]), "'transform' must be a non-empty string"),
    "inputs a string": (_set("inputs", "features"), "'inputs' must be a list of [name, shape, dtype"),
    "output empty": (_set("output", []), "'output' must be [name, shape, dtype, description]"),
    "ensemble a string": (_set("ensemble", "2"), "'ensemble' must be an integer in [1, 10000], got '2'"),
    "ensemble huge": (
        _set("ensemble", 10**400),
        "'ensemble' must be an integer in [1, 10000], got an integer",
    ),
    "ensemble 1e999": (
        lambda m: json.dumps({**m, "ensemble": 1}).replace('"ensemble": 1', '"ensemble": 1e999'),
        "'ensemble' must be an integer in [1, 10000], got inf",
    ),
    "rerank a list": (_set("rerank", [4]), "'rerank' must be a JSON object, got [4]"),
    "rerank.top_k a string": (_set("rerank", {**_RERANK, "top_k": "4"}), "'rerank.top_k' must be an integer"),
    "rerank.rank_feature 'false'": (
        _set("rerank", {**_RERANK, "rank_feature": "false"}),
        "'rerank.rank_feature' must be true or false",
    ),
    "rerank.trees missing": (
        _set("rerank", {k: v for k, v in _RERANK.items() if k != "trees"}),
        "'rerank.trees' is missing",
    ),
    "rerank unknown key": (
        _set("rerank", {**_RERANK, "dir": "x"}),
        "unknown key 'rerank.dir'; valid: rerank.top_k",
    ),
    "unknown key": (_set("evil", 1), "unknown key 'evil'; valid: model, ctxrank_version, transform"),
    "feature_names missing": (
        _without("feature_names"),
        "'feature_names' is missing (every exported file has",
    ),
    "model missing": (_without("model"), "'model' is missing"),
    "not an object": (lambda m: "[1, 2]", "expected a JSON object, got [1, 2]"),
    "not JSON": (lambda m: "{'model': 1}", "unreadable ONNX metadata (Expecting property name"),
    "NaN": (lambda m: json.dumps({**m, "ensemble": float("nan")}), "non-standard JSON constant NaN"),
    "deep JSON (recursion)": (
        lambda m: "[" * 200_000 + "]" * 200_000,
        "unreadable ONNX metadata (nested too deeply)",
    ),
    "deep JSON (bounded)": (
        _set("rerank", json.loads("[" * 40 + "]" * 40)),
        "ONNX metadata nested deeper than 32",
    ),
    "huge integer text": (
        lambda m: '{"model": ' + "9" * 5000 + "}",
        "unreadable ONNX metadata (Exceeds the limit",
    ),
}


def _with_meta(source: Path, target: Path, text: str) -> Path:
    """A copy of the ONNX file ``source`` whose ctxrank.json metadata is ``text``."""
    import onnx

    proto = onnx.load(str(source))
    (entry,) = [e for e in proto.metadata_props if e.key == "ctxrank.json"]
    entry.value = text
    onnx.save(proto, str(target))
    return target


@pytest.mark.parametrize("case", list(TAMPERED))
def test_tampered_onnx_metadata_is_one_value_error_naming_the_key(models, tmp_path, case):
    change, words = TAMPERED[case]
    original = json.loads(
        OnnxRanker(models.root / "qilcm.onnx").session.get_modelmeta().custom_metadata_map["ctxrank.json"]
    )
    changed = change(original)
    text = changed if isinstance(changed, str) else json.dumps(changed)
    path = _with_meta(models.root / "qilcm.onnx", tmp_path / "tampered.onnx", text)
    with pytest.raises(ValueError) as info:
        OnnxRanker(path)
    message = str(info.value)
    assert type(info.value) is ValueError and "\n" not in message and len(message) < 400, message
    assert message.startswith(f"{path}") and words in message, message


def test_a_tampered_onnx_file_is_a_one_line_error_of_ctxrank_serve(models, tmp_path, capsys, monkeypatch):
    import ctxrank.cli.serve

    def started(*args, **kwargs):  # the file loaded: a server would start (and block) here
        raise AssertionError("the tampered file was served")

    monkeypatch.setattr(ctxrank.cli.serve, "serve", started)
    original = (
        OnnxRanker(models.root / "qilcm.onnx").session.get_modelmeta().custom_metadata_map["ctxrank.json"]
    )
    for text in (original.replace('"missing_values": false', '"missing_values": "false"'), "[" * 200_000):
        path = _with_meta(models.root / "qilcm.onnx", tmp_path / "tampered.onnx", text)
        assert main(["serve", "--model", str(path), "--port", "0"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ctxrank: error: {path} (metadata ctxrank.json): ") and err.count("\n") == 1, (
            err
        )


def test_the_untampered_onnx_file_and_one_without_missing_values_load(models, tmp_path):
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    meta = json.loads(ranker.session.get_modelmeta().custom_metadata_map["ctxrank.json"])
    assert ranker.allow_missing is False and ranker.feature_names == ("f1", "f2", "f3", "f4", "f5")
    # files exported before the key was recorded have no missing_values: they read no NaN
    older = _with_meta(
        models.root / "qilcm.onnx", tmp_path / "older.onnx", json.dumps(_without("missing_values")(meta))
    )
    assert OnnxRanker(older).allow_missing is False
    ensemble = {**meta, "ensemble": 3, "rerank": _RERANK, "missing_values": True}
    both = OnnxRanker(_with_meta(models.root / "qilcm.onnx", tmp_path / "both.onnx", json.dumps(ensemble)))
    assert both.allow_missing is True and both.describe()["rerank"] == _RERANK


# ------------------------------------------------------------------- hostile or slow clients
def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(10)  # a server that never answers fails the test instead of hanging it
    return sock


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset ends it too)."""
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            out += chunk
    return out


RANK_HEAD = b"POST /rank HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"


@pytest.mark.parametrize("http", HTTP_PARSERS)
def test_an_oversized_header_is_refused_without_being_read_whole(models, http):
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    with running(ranker, max_header_bytes=4096, http=http) as (url, _), httpx.Client(base_url=url) as client:
        sock, sent, total = _connect(url), 0, 64 * 2**20
        try:  # a 64 MiB header line: the server stops reading it and closes the connection
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: ")
            while sent < total:
                sock.sendall(b"a" * 2**16)
                sent += 2**16
        except OSError:  # reset or broken pipe: the server closed the connection
            pass
        answer = _answer(sock)
        sock.close()
        assert sent < total and (answer == b"" or answer.startswith(b"HTTP/1.1 400 ")), (sent, answer[:80])
        assert client.get("/health", headers={"x-ok": "a" * 3000}).status_code == 200


@pytest.mark.parametrize("http", HTTP_PARSERS)
def test_a_stalled_body_gets_a_408_and_a_stalled_head_a_closed_connection(models, http):
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    with running(ranker, read_timeout=0.3, http=http) as (url, _), httpx.Client(base_url=url) as client:
        body, head, idle = _connect(url), _connect(url), _connect(url)
        start = time.monotonic()
        body.sendall(RANK_HEAD + b'{"qid": 1, ')  # 11 of the 100 bytes it declares, then nothing
        head.sendall(b"POST /rank HTTP/1.1\r\nhost: x\r\n")  # headers never finished
        answer, closed_head, closed_idle = _answer(body), _answer(head), _answer(idle)
        assert time.monotonic() - start < 8
        status, _, rest = answer.partition(b"\r\n")
        assert status == b"HTTP/1.1 408 Request Timeout" and b"connection: close" in rest
        assert json.loads(rest.partition(b"\r\n\r\n")[2]) == {
            "error": "body: not received within 0.3 s (the server's --read-timeout); 11 bytes came",
            "field": "body",
        }
        assert closed_head == b"" and closed_idle == b""  # closed, nothing sent
        for sock in (body, head, idle):
            sock.close()
        ok = client.post("/rank", json={"qid": 1, "rows": [[0.1] * 5]})  # keep-alive after it: fine
        time.sleep(0.5)
        assert ok.status_code == 200 and client.get("/health").status_code == 200
        metrics = client.get("/metrics").text
    assert re.search(r'ctxrank_requests_total\{endpoint="/rank",status="408"\} 1\.0', metrics)


@pytest.mark.parametrize("http", HTTP_PARSERS)
def test_connections_beyond_the_cap_get_503(models, http):
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    request = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
    with running(ranker, max_connections=2, http=http) as (url, _):
        first, second = _connect(url), _connect(url)
        for sock in (first, second):
            sock.sendall(request)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        third = _connect(url)
        third.sendall(request)
        assert _answer(third).startswith(b"HTTP/1.1 503 ")  # and closed
        third.close()
        second.close()
        time.sleep(0.2)
        again = _connect(url)
        again.sendall(request)
        assert again.recv(4096).startswith(b"HTTP/1.1 200 ")
        first.close()
        again.close()


@pytest.mark.parametrize("http", HTTP_PARSERS)
def test_a_client_that_hangs_up_mid_body_is_one_log_line(models, http, capfd):
    ranker = OnnxRanker(models.root / "qilcm.onnx")
    with running(ranker, http=http) as (url, _), httpx.Client(base_url=url) as client:
        capfd.readouterr()
        sock = _connect(url)
        sock.sendall(RANK_HEAD + b'{"qid": 1, ')
        time.sleep(0.2)
        sock.close()
        deadline = time.monotonic() + 10
        while "499" not in client.get("/metrics").text:
            assert time.monotonic() < deadline, "the disconnect was not seen"
            time.sleep(0.05)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "client disconnected before sending the whole body (11 bytes came)" in lines[0]
    assert lines[0].startswith("WARNING:")


@pytest.mark.parametrize(
    "host, exposed",
    [("127.0.0.1", None), ("::1", None), ("0.0.0.0", "every network interface"),
     ("::", "every network interface"), ("192.168.1.5", "a network address")],
)  # fmt: skip
def test_listening_beyond_loopback_says_what_it_exposes(monkeypatch, capsys, host, exposed):
    from ctxrank.serving import server

    class Listening:
        def getsockname(self):
            return (host, 8000)

    monkeypatch.setattr(
        server, "make_server", lambda ranker, options: SimpleNamespace(run=lambda sockets: None)
    )
    ranker = SimpleNamespace(kind="onnx", path="m.onnx")
    assert server.serve(ranker, ServeOptions(), Listening()) == 0
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if "warning" in line]
    if exposed is None:
        assert warnings == []
    else:
        assert warnings == [
            f"ctxrank serve: warning: {host} is {exposed}: other machines can reach this server, which "
            "has no authentication and no TLS; put a reverse proxy in front "
            "(docs/serving.md#authentication-and-tls)"
        ]
    assert "\n## Authentication and TLS\n" in (REPO / "docs" / "serving.md").read_text()


def test_ctxrank_serve_in_a_process_answers_and_stops_cleanly_on_sigterm(models):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    argv = [
        sys.executable,
        "-m",
        "ctxrank",
        "serve",
        "--model",
        str(models.root / "qilcm.onnx"),
        "--port",
        "0",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = re.search(r"on (http://127\.0\.0\.1:\d+) ", line).group(1)
        with httpx.Client(base_url=url) as client:
            deadline = time.monotonic() + 20
            while client.get("/ready").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            answer = client.post("/rank", json={"qid": "q", "rows": [[0.1, 0.2, 0.3, 0.4, 0.5]] * 3})
            assert answer.status_code == 200 and len(answer.json()["rankings"][0]["rows"]) == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert "stopped by signal 15" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# every model trainable on a table: exported where it can be (not LambdaMART: its model.txt is its format)
TABLE_MODELS = {
    "mlp": ["--model", "mlp", "--set", "model_params.hidden=[8]"],
    "qilcm": ["--model", "qilcm", "--set", "model_params.encoder_width=8"],
    "qilcm-over-lambdamart": [
        "--model", "qilcm", "--initial", "lambdamart", "--top-k", "5",
        "--set", "rerank.initial_params.n_estimators=5", "--set", "model_params.encoder_width=8",
    ],
    "lambdamart": ["--model", "lambdamart", "--set", "model_params.n_estimators=5"],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TABLE_MODELS))
def test_categorical_columns_by_name_score_as_ctxrank_predict(name, tmp_path, capsys):
    """A model trained on a table with named numeric and categorical columns (unseen categories
    included) is exported, served as its ONNX file and as its directory (``/ready`` names its real
    inputs) and scores through ``DirectoryRanker.predict``, rows by name: the scores of `ctxrank
    predict` on the table, within the documented tolerance (``check_tolerance``, docs/export.md)."""
    import pandas as pd
    import torch

    from ctxrank.data.categorical import CategoricalEncoder
    from ctxrank.export import check_tolerance
    from ctxrank.serving.directory import DirectoryRanker

    table, model, onnx_file = tmp_path / "s.csv", tmp_path / "m", tmp_path / "m.onnx"
    columns = ["--query-col", "session", "--label-col", "chosen", "--categorical", "airline,cabin"]
    numeric = ["price", "duration", "stops", "dep_hour"]
    assert main(["synth", "choice", "--sessions", "40", "--seed", "0", "--out", str(table)]) == 0
    train = [*columns, "--numeric", ",".join(numeric), "--no-progress"]
    if name != "lambdamart":
        train += ["--set", "train.max_epochs=1"]
    assert main(["train", *TABLE_MODELS[name], "--data", str(table), *train, "--out", str(model)]) == 0
    paths = [model]
    if name != "lambdamart":
        assert main(["export", "--model", str(model), "--format", "onnx", "--out", str(onnx_file)]) == 0
        paths.append(onnx_file)
    frame = pd.read_csv(table)
    frame.loc[::7, "airline"] = "never seen"  # code 0 (unknown), in the file and in the request alike
    frame.to_csv(table, index=False)
    reference = _predicted(model, table, capsys)
    rows = frame[[*numeric, "airline", "cabin"]].to_dict(orient="records")
    body = {"qid": frame["session"].tolist(), "rows": rows}
    # the documented tolerance, per list (session), around predict's scores
    sessions = frame["session"].to_numpy()
    tol = np.empty(len(frame))
    for s in np.unique(sessions):
        rows_of = sessions == s
        tol[rows_of] = float(
            check_tolerance(
                torch.tensor(reference[rows_of])[None], torch.ones(1, rows_of.sum(), dtype=torch.bool)
            )
        )
    for path in paths:
        ranker = load_ranker(path)
        assert ranker.categorical_names == ("airline", "cabin")
        with running(ranker) as (url, _), httpx.Client(base_url=url) as client:
            ready = client.get("/ready").json()["model"]
            answer = client.post("/rank", json=body)
        assert ready["feature_names"] == numeric and ready["categorical_names"] == ["airline", "cabin"]
        assert answer.status_code == 200, answer.text
        assert (np.abs(np.array(answer.json()["scores"]) - reference) <= tol).all(), path
    ranker = DirectoryRanker(model)
    codes = CategoricalEncoder.from_dict({"columns": ["airline", "cabin"], "vocab": ranker.categorical_vocab})
    scores = ranker.predict(frame[numeric].to_numpy(), sessions, codes.transform(frame[["airline", "cabin"]]))
    np.testing.assert_allclose(scores, reference, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_missing_values_are_served_where_the_file_says_the_model_reads_them(tmp_path, capsys):
    """``train.missing = "indicator"``: the exported file records ``missing_values``; ``null`` in a
    request is NaN, and the scores are `ctxrank predict`'s on the file with NULL cells."""
    rng = np.random.default_rng(0)
    lines, rows, qids = [], [], []
    for q in range(12):
        for _ in range(6):
            x = [None if (j == 2 and rng.random() < 0.3) else float(round(rng.normal(), 4)) for j in range(4)]
            lines.append(f"{int(rng.integers(0, 3))} qid:{q} " + " ".join(
                f"{j + 1}:{'NULL' if v is None else v}" for j, v in enumerate(x)
            ))  # fmt: skip
            rows.append(x)
            qids.append(q)
    data, model, onnx_file = tmp_path / "nulls.txt", tmp_path / "m", tmp_path / "m.onnx"
    data.write_text("\n".join(lines) + "\n")
    argv = ["train", "--model", "mlp", "--data", str(data), "--null-fill", "keep", "--no-progress"]
    argv += ["--set", "train.missing=indicator", "--set", "train.max_epochs=1", "--out", str(model)]
    assert main(argv) == 0
    assert main(["export", "--model", str(model), "--format", "onnx", "--out", str(onnx_file)]) == 0
    reference = _predicted(model, data, capsys)
    assert np.isfinite(reference).all()
    for path in (onnx_file, model):
        ranker = load_ranker(path)
        assert ranker.allow_missing
        with running(ranker) as (url, _), httpx.Client(base_url=url) as client:
            assert client.get("/ready").json()["model"]["missing_values"] is True
            answer = client.post("/rank", json={"qid": qids, "rows": rows})
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(answer.json()["scores"], reference, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"X: row 0, column 1 is inf"):
        OnnxRanker(onnx_file).predict(np.array([[0.0, np.inf, 0.0, 0.0]]), [0])


def test_rankings_of_tied_scores_do_not_depend_on_row_order():
    """Tied scores are ranked by the project's order-free rule (a hash of the features), so a request
    with its rows shuffled gets the same items in the same places (the row indices permuted)."""
    from ctxrank.serving.requests import RankRequest

    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 3)).astype(np.float32)
    scores = np.array([1.0, 2.0, 2.0, 2.0, 0.5, 2.0])  # four items tied at the top
    first = rank_answer(RankRequest(x, None, np.zeros(6, dtype=np.int64), ["q"]), scores)["rankings"][0]
    for seed in range(5):
        perm = np.random.default_rng(seed).permutation(6)
        got = rank_answer(RankRequest(x[perm], None, np.zeros(6, dtype=np.int64), ["q"]), scores[perm])
        assert [int(perm[r]) for r in got["rankings"][0]["rows"]] == first["rows"]
    assert first["rows"][4:] == [0, 4]


@pytest.mark.parametrize("package", ["fastapi", "uvicorn", "orjson", "prometheus_client", "httptools"])
def test_serve_without_its_extra_is_a_one_line_error(monkeypatch, capsys, package):
    """Without the serve extra (``make demo`` installs the base package), ``ctxrank serve`` names the
    missing package and the extra to install: no traceback."""
    modules = ("ctxrank.cli.serve", "ctxrank.serving.server", "ctxrank.serving.requests")
    for name in (*modules, "uvicorn.protocols.http.httptools_impl"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, package, None)
    assert main(["serve", "--model", "model.onnx"]) == 2
    err = capsys.readouterr().err
    install = "pip install 'ctxrank[serve]'"
    assert err == f"ctxrank: error: `ctxrank serve` needs the {package} package: {install}\n"
