"""ctxrank.data.synth: the synthetic LETOR writer's list-context option."""

import hashlib

import numpy as np
import pytest

from ctxrank.cli import main
from ctxrank.data.letor import read_letor
from ctxrank.data.synth import SYNTH_CONTEXTS, _list_zscore, write_synthetic_letor

# sha256 of files written before the context option existed (the default must write the same bytes)
BEFORE = [
    (dict(n_queries=7, list_size=5, n_features=3, seed=3),
     "63971d487f292c85848c710fbdd3e28c535d728d56139a0dbcaf74a778101524"),
    (dict(n_queries=6, list_size=4, n_features=2, seed=1, docids=False, block_queries=2,
          label_shares=(0.5, 0.3, 0.1, 0.05, 0.05)),
     "40cceb6d6576217160ee67a7ee8fa572e2b42532e97b3379c6e7602a38bf3bdc"),
]  # fmt: skip


@pytest.mark.parametrize("kw, digest", BEFORE)
def test_the_default_context_writes_the_same_bytes_as_before(tmp_path, kw, digest):
    for extra in ({}, {"context": "none"}):
        path = write_synthetic_letor(tmp_path / "s.txt", **kw, **extra)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("bad", ["Relative", "list", "", None, 1])
def test_an_unknown_context_is_refused_before_anything_is_written(tmp_path, bad):
    with pytest.raises(ValueError, match=r"context must be one of \['none', 'relative'\]"):
        write_synthetic_letor(tmp_path / "s.txt", n_queries=2, list_size=3, n_features=2, context=bad)
    assert not (tmp_path / "s.txt").exists()


def test_the_cli_offers_the_contexts_and_names_them(tmp_path, capsys):
    out = tmp_path / "r.txt"
    argv = ["synth", "letor", "--queries", "4", "--items", "5", "--features", "3", "--no-progress"]
    assert main([*argv, "--context", "relative", "--out", str(out)]) == 0
    assert "context relative" in capsys.readouterr().out and read_letor(out).n_queries == 4
    assert main([*argv, "--context", "rank", "--out", str(out)]) == 2
    assert "choose from 'none', 'relative'" in capsys.readouterr().err
    assert SYNTH_CONTEXTS == ("none", "relative")


def _latent(path, seed, n_features):
    """The file's lists, and each item's latent score ``s = x . w`` with the writer's weights."""
    data = read_letor(path)
    weights = np.random.default_rng(seed).normal(size=n_features) / np.sqrt(n_features)
    return data, data.features.astype(np.float64) @ weights


def _spearman(a, b):
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_relative_grades_follow_the_items_place_in_their_list_not_their_own_value(tmp_path):
    """A grade is -|z| of the item's latent score within ITS list: the same rule over the whole file
    (one item's value alone, the list ignored) explains almost none of it."""
    path = write_synthetic_letor(tmp_path / "r.txt", n_queries=60, list_size=15, n_features=6, seed=4,
                                 context="relative")  # fmt: skip
    data, s = _latent(path, 4, 6)
    starts = data.query_offsets[:-1]
    within = -np.abs(_list_zscore(s, starts, data.query_index))
    overall = -np.abs((s - s.mean()) / s.std())
    assert _spearman(data.labels, within) > 0.7
    assert abs(_spearman(data.labels, overall)) < 0.3
    # the lists' levels differ far more than the items within a list: absolute values mislead
    level_spread = np.std(np.add.reduceat(s, starts) / np.diff(data.query_offsets))
    assert level_spread > 2 * np.mean([s[data.query_slice(q)].std() for q in range(data.n_queries)])


def test_the_default_grades_follow_the_items_own_value(tmp_path):
    path = write_synthetic_letor(tmp_path / "n.txt", n_queries=60, list_size=15, n_features=6, seed=4)
    data, s = _latent(path, 4, 6)
    assert _spearman(data.labels, s) > 0.5


def test_the_list_zscore_ignores_row_order_and_the_lists_level():
    rng = np.random.default_rng(0)
    s = rng.normal(size=9)
    starts, local = np.array([0, 4, 5]), np.repeat([0, 1, 2], [4, 1, 4])
    z = _list_zscore(s, starts, local)
    order = np.concatenate([rng.permutation(4), [4], 5 + rng.permutation(4)])
    np.testing.assert_allclose(_list_zscore(s[order], starts, local), z[order])
    shifted = s + np.repeat([10.0, -3.0, 100.0], [4, 1, 4])  # a constant per list
    np.testing.assert_allclose(_list_zscore(shifted, starts, local), z, atol=1e-9)
    assert z[4] == 0.0  # a one-item list: no spread, no NaN
    assert np.all(np.isfinite(_list_zscore(np.ones(3), np.array([0]), np.zeros(3, dtype=int))))
