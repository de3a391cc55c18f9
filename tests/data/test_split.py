"""Random query-level train / validation / test split (ctxrank.data.split)."""

import re
from dataclasses import replace

import numpy as np
import pytest

from ctxrank.data.split import query_split_indices, split_queries
from tests.conftest import make_ranking_data


@pytest.mark.parametrize("n", [3, 7, 150, 1001])
def test_split_is_disjoint_covers_every_query_and_is_deterministic(n):
    tr, va, te = query_split_indices(n, seed=5)
    assert np.array_equal(np.sort(np.concatenate([tr, va, te])), np.arange(n))  # disjoint + cover
    assert min(tr.size, va.size, te.size) >= 1
    assert va.size == max(1, round(0.2 * n)) == te.size and tr.size == n - 2 * va.size
    for a, b in zip((tr, va, te), query_split_indices(n, seed=5), strict=True):
        assert np.array_equal(a, b)
    assert all(np.all(np.diff(p) > 0) for p in (tr, va, te))  # file order within a split
    if n >= 7:
        assert not np.array_equal(tr, query_split_indices(n, seed=6)[0])


def test_split_queries_keeps_whole_queries_and_records_the_split():
    data = make_ranking_data(50, seed=2)
    train, valid, test, record = split_queries(data, (0.5, 0.3, 0.2), seed=1)
    assert record["queries"] == {"train": 25, "valid": 15, "test": 10}
    assert record["seed"] == 1 and record["fractions"] == [0.5, 0.3, 0.2]
    assert sum(record["items"].values()) == data.n_items
    ids = [set(p.query_ids.tolist()) for p in (train, valid, test)]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert set().union(*ids) == set(data.query_ids.tolist())
    for part in (train, valid, test):
        for q, qid in enumerate(part.query_ids):
            src = data.query_slice(int(np.flatnonzero(data.query_ids == qid)[0]))
            np.testing.assert_array_equal(part.features[part.query_slice(q)], data.features[src])
    assert test.source.endswith("[test split]")


def test_split_errors():
    with pytest.raises(ValueError, match="too few to split"):
        query_split_indices(2)
    assert [p.size for p in query_split_indices(3)] == [1, 1, 1]
    with pytest.raises(ValueError, match="summing to 1"):
        query_split_indices(10, (0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="three positive numbers"):
        query_split_indices(10, (1.0, 0.0))


def test_too_few_queries_or_groups_say_so_without_negative_counts():
    # a column with one group (e.g. "--group-col") is too few queries, said in words, not "(got -1/1/1)"
    for n in (0, 1, 2):
        with pytest.raises(ValueError, match=rf"^{n} quer(y is|ies are) too few to split .* least 3 queries"):
            query_split_indices(n)
    with pytest.raises(ValueError) as info:  # 4 queries, 10/45/45: valid 2 + test 2 leave none to train
        query_split_indices(4, (0.1, 0.45, 0.45))
    message = str(info.value)
    assert message.startswith("4 queries are too few to split 0.1/0.45/0.45")
    assert not re.search(r"-\d", message)  # no negative count
    assert "validation gets 2 and test 2" in message and "leaving 0 for training" in message
    with pytest.raises(ValueError, match="leaving 0 for training"):  # 3 + 1 of 3: was "got -1/1/3"
        query_split_indices(3, (0.1, 0.05, 0.85))
    data = make_ranking_data(12, seed=1)
    one_group = replace(data, group_ids=np.array(["r1"] * 12))
    with pytest.raises(ValueError, match=r"^--group-col person has only 1 distinct value: .* least 3 groups"):
        split_queries(one_group, by_group=True, group_name="--group-col person")
    two = replace(data, group_ids=np.array(["r1", "r2"] * 6))
    with pytest.raises(ValueError, match=r"^group_ids of synthetic\(seed=1\) has only 2 distinct values"):
        split_queries(two, by_group=True)
