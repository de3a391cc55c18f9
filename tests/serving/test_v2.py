"""The Open Inference Protocol (KServe v2) of ``ctxrank serve`` (ctxrank.serving.v2): called with Triton's
own HTTP client (tritonclient), JSON and binary tensors score as ``POST /rank``; every malformed
request is one 4xx ``{"error": ...}``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrank.serving.onnx_ranker import OnnxRanker
from ctxrank.serving.requests import Limits, RequestError
from ctxrank.serving.server import ServeOptions
from ctxrank.serving.v2 import parse_infer
from tests.conftest import make_ranking_data
from tests.serving.test_server import running

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
FAKE = SimpleNamespace(
    kind="onnx", n_features=2, categorical_names=(), categorical_cardinalities=(), allow_missing=False
)
LIMITS = Limits(max_rows=12, max_list=4)


@pytest.fixture(scope="module")
def qilcm(tmp_path_factory):
    """A small QILCM exported to ONNX (5 features) and some test rows."""
    import torch

    from ctxrank.config import resolve_config
    from ctxrank.data.transforms import make_transform
    from ctxrank.export import export_model
    from ctxrank.registry import make_model
    from ctxrank.training.checkpoint import save_checkpoint

    root = tmp_path_factory.mktemp("v2")
    train = make_ranking_data(10, 8, 5, seed=1)
    torch.manual_seed(0)
    small = {"encoder_width": 8, "att_hidden": [8], "rank_hidden": [8]}
    config = resolve_config(None, ["model=qilcm", *(f"model_params.{k}={v}" for k, v in small.items())])
    model = make_model("qilcm", 5, dict(small)).eval()
    save_checkpoint(root / "qilcm", model, config, make_transform("minmax").fit(train), train_data=train)
    export_model(root / "qilcm", "onnx", root / "qilcm.onnx")
    return OnnxRanker(root / "qilcm.onnx")


def _lists(seed: int = 3):
    """Two lists (5 and 3 items) as rows with query ids and as padded [2, 5, 5] tensors."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(8, 5)).astype(np.float32)
    features = np.zeros((2, 5, 5), dtype=np.float32)
    mask = np.zeros((2, 5), dtype=bool)
    features[0], mask[0] = rows[:5], True
    features[1, :3], mask[1, :3] = rows[5:], True
    return rows, ["a"] * 5 + ["b"] * 3, features, mask


def test_triton_client_binary_and_json_tensors_score_as_rank(qilcm):
    import tritonclient.http as triton

    rows, qid, features, mask = _lists()
    with running(qilcm) as (url, _):
        reference = np.array(
            httpx.post(f"{url}/rank", json={"qid": qid, "rows": rows.tolist()}).json()["scores"]
        )
        client = triton.InferenceServerClient(url.removeprefix("http://"))
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("qilcm")
        meta = client.get_model_metadata("qilcm")
        assert meta["inputs"] == [
            {"name": "features", "datatype": "FP32", "shape": [-1, -1, 5]},
            {"name": "mask", "datatype": "BOOL", "shape": [-1, -1]},
        ]
        assert meta["outputs"] == [{"name": "scores", "datatype": "FP32", "shape": [-1, -1]}]
        assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
        for binary in (True, False):
            inputs = [
                triton.InferInput("features", [2, 5, 5], "FP32"),
                triton.InferInput("mask", [2, 5], "BOOL"),
            ]
            inputs[0].set_data_from_numpy(features, binary_data=binary)
            inputs[1].set_data_from_numpy(mask, binary_data=binary)
            wanted = [triton.InferRequestedOutput("scores", binary_data=binary)]
            result = client.infer("qilcm", inputs, outputs=wanted, request_id="r1")
            scores = result.as_numpy("scores")
            assert scores.shape == (2, 5) and scores.dtype == np.float32
            np.testing.assert_allclose(scores[mask], reference, rtol=1e-6, atol=1e-6)
            assert (scores[~mask] == 0).all() and result.get_response()["id"] == "r1"
        # the same items with the padding elsewhere and an empty list (scored as rows, not as given)
        spread, where = np.zeros((3, 6, 5), dtype=np.float32), np.zeros((3, 6), dtype=bool)
        spread[0, [0, 1, 3, 4, 5]], where[0, [0, 1, 3, 4, 5]] = rows[:5], True
        spread[2, [1, 2, 4]], where[2, [1, 2, 4]] = rows[5:], True
        spread[~where] = np.nan  # padding values are never read
        inputs = [triton.InferInput("features", [3, 6, 5], "FP32"), triton.InferInput("mask", [3, 6], "BOOL")]
        inputs[0].set_data_from_numpy(spread)
        inputs[1].set_data_from_numpy(where)
        scores = client.infer("qilcm", inputs).as_numpy("scores")
        np.testing.assert_allclose(scores[where], reference, rtol=1e-6, atol=1e-6)
        assert (scores[~where] == 0).all()
        with pytest.raises(triton.InferenceServerException, match="not found; this server serves 'qilcm'"):
            client.get_model_metadata("other")
        client.close()


def _body(inputs, *, binary=b"", outputs=None, parameters=None) -> tuple[bytes, dict]:
    doc = {"inputs": inputs}
    if outputs is not None:
        doc["outputs"] = outputs
    if parameters is not None:
        doc["parameters"] = parameters
    header = json.dumps(doc).encode()
    return header + binary, ({"Inference-Header-Content-Length": str(len(header))} if binary else {})


def _json_inputs(b=1, length=2, features=None, mask=None):
    features = features if features is not None else [0.5] * (b * length * 2)
    mask = mask if mask is not None else [True] * (b * length)
    return [
        {"name": "features", "shape": [b, length, 2], "datatype": "FP32", "data": features},
        {"name": "mask", "shape": [b, length], "datatype": "BOOL", "data": mask},
    ]


def _binary_inputs(features: np.ndarray, mask: np.ndarray, *, extra=b"", size=None):
    f, m = features.astype("<f4").tobytes(), mask.tobytes()  # a uint8 mask: its own bytes
    inputs = [
        {"name": "features", "shape": list(features.shape), "datatype": "FP32",
         "parameters": {"binary_data_size": len(f) if size is None else size}},
        {"name": "mask", "shape": list(mask.shape), "datatype": "BOOL",
         "parameters": {"binary_data_size": len(m)}},
    ]  # fmt: skip
    return _body(inputs, binary=f + m + extra)


def _parse(body_headers, header_length="auto"):
    body, headers = body_headers
    length = headers.get("Inference-Header-Content-Length") if header_length == "auto" else header_length
    return parse_infer(body, length, FAKE, LIMITS)


def test_json_and_binary_tensors_give_the_same_rows_and_empty_lists_are_skipped():
    features = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    mask = np.array([[True, True, False], [False, False, False]])
    a, frame = _parse(_binary_inputs(features, mask))
    b, _ = _parse(_body(_json_inputs(2, 3, features.tolist(), mask.ravel().tolist())))
    for r in (a, b):
        assert r.X.tolist() == [[0, 1], [2, 3]] and r.group.tolist() == [0, 0] and r.query_ids == [0]
    assert frame["binary"] is False and frame["mask"].tolist() == mask.tolist()
    assert a.lists is None  # an empty list: scored as rows
    prefix, _ = _parse(_binary_inputs(features[:1], mask[:1]))
    assert prefix.lists[0].tolist() == [[[0, 1], [2, 3], [0, 0]]] and prefix.lists[1].tolist() == [
        mask[0].tolist()
    ]
    _, frame = _parse(_body(_json_inputs(), parameters={"binary_data_output": True}))
    assert frame["binary"] is True
    _, frame = _parse(_body(_json_inputs(), outputs=[{"name": "scores"}]))  # no parameters: JSON scores
    assert frame["binary"] is False


GOOD = np.ones((1, 2, 2), dtype=np.float32), np.ones((1, 2), dtype=bool)


@pytest.mark.parametrize(
    "body_headers, header_length, status, words",
    [
        (_binary_inputs(*GOOD), "x", 400, "Inference-Header-Content-Length: expected a byte count"),
        (_binary_inputs(*GOOD), "0", 400, "expected a byte count in [1,"),
        (_binary_inputs(*GOOD), "99999", 400, "expected a byte count in [1,"),
        (_binary_inputs(*GOOD), "3", 400, "the inference header is not JSON"),
        ((b"[1]", {}), "auto", 400, "must be a JSON object"),
        (_body(_json_inputs()[:1]), "auto", 400, "expected the tensors features, mask once each"),
        (_body([*_json_inputs(), {"name": "x"}]), "auto", 400, "expected the tensors features, mask"),
        (_body(_json_inputs()[::-1] + _json_inputs()[:1]), "auto", 400, "once each"),
        (_body({"features": 1}), "auto", 400, "inputs: expected a list of tensors"),
        (_body(_json_inputs(), outputs=[{"name": "logits"}]), "auto", 400, "unknown output 'logits'"),
        (_body(_json_inputs(), parameters={"binary_data_output": 1}), "auto", 400, "expected true or false"),
        (_body(_json_inputs(), parameters=[1]), "auto", 400, "request.parameters: expected a JSON"),
        ((json.dumps({"id": 5, "inputs": []}).encode(), {}), "auto", 400, "id: expected a string"),
        (
            _body([{**_json_inputs()[0], "datatype": "FP64"}, _json_inputs()[1]]),
            "auto", 400, "expected datatype FP32, got FP64",
        ),
        (
            _body([{**_json_inputs()[0], "shape": [1, 2, 3]}, _json_inputs()[1]]),
            "auto", 400, "expected shape [-1, -1, 2]",
        ),
        (
            _body([{**_json_inputs()[0], "shape": [1, -2, 2]}, _json_inputs()[1]]),
            "auto", 400, "expected shape [-1, -1, 2]",
        ),
        (_body(_json_inputs(features=[0.5] * 3)), "auto", 400, "expected 4 values"),
        (
            _body([{**_json_inputs()[0], "shape": [2**40, 2**40, 2], "data": []}, _json_inputs()[1]]),
            "auto", 400, f"expected {2**81:,} values",  # the element count is exact, never wrapped
        ),
        (_body(_json_inputs(features=[0.5, "1", 0.5, 0.5])), "auto", 400, "expected FP32 values"),
        (_body(_json_inputs(features=[0.5, True, 0.5, 0.5])), "auto", 400, "expected FP32 values"),
        (_body(_json_inputs(mask=[1, 1])), "auto", 400, "expected BOOL values"),
        (_body(_json_inputs(features=[[0.5, 0.5], [0.5]])), "auto", 400, "expected 4 values"),
        (_body(_json_inputs(features=[[0.5], [0.5, 0.5], [1], [2]])), "auto", 400, "expected FP32"),
        (
            _body(_json_inputs(features=[0.5, 1e39, 0.5, 0.5])),
            "auto", 422, "features[0, 0, 1]: 1e+39 is beyond float32",
        ),
        (_body(_json_inputs(mask=[False, False])), "auto", 422, "no real item"),
        (
            _body([_json_inputs()[0], {**_json_inputs(1, 3)[1]}]),
            "auto", 400, "the tensors' [B, L] differ",
        ),
        (_body(_json_inputs(1, 5)), "auto", 413, "at most 4 (the server's --max-list)"),
        (_body(_json_inputs(4, 4)), "auto", 413, "16 items; at most 12 (the server's --max-rows)"),
        (_binary_inputs(*GOOD, size=15), "auto", 400, "binary_data_size must be 16"),
        (_binary_inputs(*GOOD, extra=b"\0"), "auto", 400, "1 bytes of binary data after the tensors"),
        (_binary_inputs(np.full((1, 2, 2), np.nan, np.float32), GOOD[1]), "auto", 422, "reads no NaN"),
        (_binary_inputs(GOOD[0], np.full((1, 2), 2, np.uint8)), "auto", 400, "BOOL bytes must be 0 or 1"),
    ],
)  # fmt: skip
def test_a_malformed_infer_request_is_one_request_error(body_headers, header_length, status, words):
    with pytest.raises(RequestError) as caught:
        _parse(body_headers, header_length)
    assert caught.value.status == status and words in str(caught.value), str(caught.value)


def test_categorical_codes_are_checked_against_the_cardinalities():
    cats = SimpleNamespace(
        **{**vars(FAKE), "categorical_names": ("a", "b"), "categorical_cardinalities": (3, 2)}
    )
    codes = {"name": "categorical", "shape": [1, 2, 2], "datatype": "INT64", "data": [0, 1, 2, 2]}
    with pytest.raises(RequestError, match=r"categorical\[0, 1, 1\]: code 2; expected \[0, 2\)"):
        parse_infer(_body([*_json_inputs(), codes])[0], None, cats, LIMITS)
    good, _ = parse_infer(_body([*_json_inputs(), {**codes, "data": [0, 1, 2, 1]}])[0], None, cats, LIMITS)
    assert good.codes.tolist() == [[0, 1], [2, 1]] and good.lists[2].tolist() == [[[0, 1], [2, 1]]]


@pytest.mark.parametrize("padded", [False, True])
def test_every_non_finite_value_is_found_and_float32_extremes_are_not(padded):
    """The check reads the rows in one pass (their float64 sum): each NaN / inf anywhere in a list is
    named by its cell, while float32's largest values, whose float32 sum would overflow, pass."""
    mask = np.array([[True, True, not padded]] * 2)
    big = np.full((2, 3, 2), np.finfo(np.float32).max, dtype=np.float32)
    request, _ = _parse(_binary_inputs(big, mask))
    assert request.X.shape == (6 - 2 * padded, 2) and (request.lists[0] == big * mask[..., None]).all()
    missing = SimpleNamespace(**{**vars(FAKE), "allow_missing": True})
    for cell in np.ndindex(2, 2, 2):
        for value, refused_by_missing in ((np.nan, False), (np.inf, True), (-np.inf, True)):
            features = big.copy()
            features[cell] = value
            body, headers = _binary_inputs(features, mask)
            with pytest.raises(RequestError, match=rf"features\[{cell[0]}, {cell[1]}, {cell[2]}\]: "):
                parse_infer(body, headers["Inference-Header-Content-Length"], FAKE, LIMITS)
            if refused_by_missing:
                with pytest.raises(RequestError, match=r"expected finite values"):
                    parse_infer(body, headers["Inference-Header-Content-Length"], missing, LIMITS)
            else:
                parse_infer(body, headers["Inference-Header-Content-Length"], missing, LIMITS)


def test_binary_data_missing_after_the_header_is_refused():
    body, headers = _binary_inputs(*GOOD)
    with pytest.raises(RequestError, match=r"features'\]: 16 bytes of binary data announced, 10 left"):
        parse_infer(body[:-8], headers["Inference-Header-Content-Length"], FAKE, LIMITS)


def test_over_http_v2_errors_are_the_protocols_error_object(qilcm):
    with running(qilcm, max_body_bytes=2048) as (url, _), httpx.Client(base_url=url) as client:
        answer = client.post(
            "/v2/models/qilcm/infer", content=b"{", headers={"Inference-Header-Content-Length": "9"}
        )
        assert answer.status_code == 400 and list(answer.json()) == ["error"]
        assert "Inference-Header-Content-Length" in answer.json()["error"]
        answer = client.post("/v2/models/nope/infer", content=b"{}")
        assert answer.status_code == 404 and answer.json() == {
            "error": "model 'nope' not found; this server serves 'qilcm'"
        }
        answer = client.post("/v2/models/qilcm/infer", content=b"x" * 4096)
        assert answer.status_code == 413 and list(answer.json()) == ["error"]
        assert client.get("/v2/health/live").status_code == 200
        assert client.get("/v2/models/qilcm/ready").json() == {"ready": True}
        assert 'endpoint="/v2 infer",status="413"' in client.get("/metrics").text


def test_the_model_name_is_checked_and_names_the_routes(qilcm):
    with pytest.raises(ValueError, match="model name: expected 1-128 letters"):
        ServeOptions(model_name="a b")
    with running(qilcm, model_name="ranker-1") as (url, _), httpx.Client(base_url=url) as client:
        assert client.get("/v2/models/ranker-1").json()["name"] == "ranker-1"
        assert client.get("/v2/models/qilcm").status_code == 404


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
_KEYS = ("name", "shape", "datatype", "parameters", "data", "binary_data_size", "inputs", "outputs", "id")


@st.composite
def _mutated_request(draw):
    """A valid request (JSON or binary) with some of its parts replaced by arbitrary JSON."""
    doc = {"inputs": _json_inputs(1, 2), "outputs": [{"name": "scores", "parameters": {"binary_data": True}}]}
    binary = draw(st.booleans())
    if binary:
        for item in doc["inputs"]:
            size = 16 if item["name"] == "features" else 2
            item["parameters"] = {"binary_data_size": size}
            del item["data"]
    parts = [doc, *doc["inputs"], doc["outputs"][0]]  # still mutated once detached from doc
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(parts))
        target[draw(st.sampled_from(_KEYS))] = draw(_JSON)
    header = json.dumps(doc).encode()
    tail = draw(st.binary(max_size=24)) if binary else b""
    length = draw(st.sampled_from([str(len(header)), None, draw(st.text(max_size=6))])) if binary else None
    return header + tail, length


@settings(max_examples=150, deadline=None)
@given(_mutated_request())
def test_any_mutated_infer_request_is_parsed_or_refused_with_a_request_error(request):
    body, length = request
    try:
        parse_infer(body, length, FAKE, LIMITS)
    except RequestError as exc:
        assert 400 <= exc.status < 500
