"""ctxrank.serving.padding: rows of queries (any order) <-> the padded lists of an exported graph; the
layout is the one of training batches (``ctxrank.data.lists.pad_queries``), checked against it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrank.data.lists import pad_queries
from ctxrank.data.ranking_data import RankingData
from ctxrank.serving.padding import group_rows, pad_rows, unpad_scores
from tests.conftest import REPO


@settings(max_examples=60, deadline=None)
@given(
    qid=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=30),
    n_features=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_pad_rows_is_the_layout_of_training_batches_and_unpads_to_the_rows(qid, n_features, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(len(qid), n_features)).astype(np.float32)
    codes = rng.integers(0, 5, size=(len(qid), 2))
    lists = pad_rows(x, qid, codes)
    # the training path: the same rows grouped by RankingData, padded by ctxrank.data.lists
    data = RankingData.from_arrays(
        x, qid=qid, categorical=codes, categorical_names=("a", "b"), categorical_cardinalities=(5, 5)
    )
    batch = pad_queries(data, np.arange(data.n_queries))
    np.testing.assert_array_equal(lists.features, batch.features.numpy())
    np.testing.assert_array_equal(lists.mask, batch.mask.numpy())
    np.testing.assert_array_equal(lists.categorical, batch.categorical.numpy())
    # every row once, at its place; padding is 0 and -1
    assert sorted(lists.rows[lists.mask].tolist()) == list(range(len(qid)))
    np.testing.assert_array_equal(lists.features[lists.mask], x[lists.rows[lists.mask]])
    assert (lists.rows[~lists.mask] == -1).all() and not lists.features[~lists.mask].any()
    # a score per position comes back to its row
    scores = np.where(lists.mask, lists.rows * 10.0, np.nan)
    np.testing.assert_array_equal(unpad_scores(scores, lists.rows), np.arange(len(qid)) * 10.0)


def test_queries_in_order_of_first_appearance_rows_in_their_order():
    rows = group_rows(["b", "a", "b", "c", "a", "b"])
    assert rows.tolist() == [[0, 2, 5], [1, 4, -1], [3, -1, -1]]
    lists = pad_rows(np.arange(6, dtype=np.float32)[:, None], [7, 7, 7, 7, 7, 7])
    assert lists.features.shape == (1, 6, 1) and lists.mask.all() and lists.categorical is None
    assert set(lists.inputs()) == {"features", "mask"}


def test_padding_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="qid: expected a non-empty"):
        pad_rows(np.zeros((0, 2)), [])
    with pytest.raises(ValueError, match="qid: expected 3 query ids"):
        pad_rows(np.zeros((3, 2)), ["a", "b"])
    with pytest.raises(ValueError, match=r"X: expected \(N, F\) numbers"):
        pad_rows(np.array([["x", "y"]]), ["a"])
    with pytest.raises(ValueError, match="categorical: expected"):
        pad_rows(np.zeros((2, 2)), ["a", "b"], np.zeros((2, 1)))  # float codes
    with pytest.raises(ValueError, match="missing query id"):
        pad_rows(np.zeros((2, 2)), ["a", None])
    with pytest.raises(ValueError, match="scores: expected shape"):
        unpad_scores(np.zeros((2, 2)), np.zeros((1, 2), dtype=np.int64))


def test_the_padding_and_the_onnx_ranker_import_no_torch():
    code = (
        "import sys; import ctxrank.serving.padding, ctxrank.serving.onnx_ranker, ctxrank.serving.requests; "
        "import ctxrank.serving.server, ctxrank.cli.serve; "
        "bad = [m for m in ('torch', 'lightgbm') if m in sys.modules]; assert not bad, bad"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(REPO / "src")}
    )
    assert proc.returncode == 0, proc.stderr
