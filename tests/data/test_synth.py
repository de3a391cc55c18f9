"""ctxrank.data.synth: the synthetic LETOR writer's list-context option, and its lists in memory."""

import hashlib
import re

import numpy as np
import pytest

from ctxrank._checks import OptionError
from ctxrank.cli import main
from ctxrank.data.letor import read_letor
from ctxrank.data.synth import (
    SYNTH_CONTEXTS,
    LetorShape,
    _as_written,
    _list_zscore,
    synthetic_letor,
    write_synthetic_letor,
)

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


# ---------------------------------------------------------------------- the lists in memory (LetorShape)
SHAPES = [
    (dict(queries=12, items=6, features=4, context="relative"), 0),
    (dict(queries=9, items=5, features=3, max_label=2), 7),
    (dict(queries=3, features=5, lengths="mslr", labels="mslr"), 2),
]  # fmt: skip


@pytest.mark.parametrize("shape, seed", SHAPES)
def test_the_lists_in_memory_are_what_reading_the_written_file_gives(tmp_path, shape, seed):
    """One generator, one declaration: ``synthetic_letor`` equals ``synth letor``'s file read back, to
    the bit (features rounded as the file's 6-digit text holds them), so an experiment that generates
    its lists gets the numbers of one that read the file."""
    argv = ["synth", "letor", "--no-progress", "--seed", str(seed), "--out", str(tmp_path / "s.txt")]
    flags = [a for k, v in shape.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    assert main([*argv, *flags]) == 0
    read, made = read_letor(tmp_path / "s.txt", cache=False), synthetic_letor(LetorShape(**shape), seed)
    for name in ("features", "labels", "query_ids", "query_offsets", "docids"):
        assert np.array_equal(getattr(made, name), getattr(read, name)), name
    assert made.feature_names == read.feature_names and made.features.dtype == np.float32
    again = synthetic_letor(LetorShape(**shape), seed)
    assert np.array_equal(again.features, made.features) and np.array_equal(again.labels, made.labels)
    assert made.source.startswith("SYNTHETIC letor lists (") and f"seed {seed})" in made.source


def test_values_are_rounded_exactly_as_the_files_text_writes_them():
    """``%.6g`` text read back, including ties, tiny and huge values, zeros and values near a power of
    ten, where a scaled rounding alone could differ in the last digit."""
    rng = np.random.default_rng(3)
    scales = rng.choice([1e-12, 1e-5, 1e-3, 1.0, 1e3, 1e9, 1e25], size=20_000)
    special = [0.0, -0.0, 5e-324, 123456.5, 0.1234565, 9.999995, 9.9999949999, 99999.95, 1e22, -2.5e-7]
    x = np.concatenate([rng.normal(size=20_000) * scales, rng.random(20_000), special])
    want = np.array([float(f"{v:.6g}") for v in x]).astype(np.float32)
    assert np.array_equal(_as_written(x), want)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(queries=0), "queries must be a positive integer, got 0"),
        (dict(features=2.5), "features must be a positive integer, got 2.5"),
        (dict(items=True), "items must be a positive integer, got True"),
        (dict(lengths="long"), "lengths must be one of ['fixed', 'mslr'], got 'long'"),
        (dict(context="rank"), "context must be one of ['none', 'relative'], got 'rank'"),
        (dict(labels="mslr", max_label=2), "labels mslr gives grades 0..4: leave max_label out (got 2)"),
        (dict(lengths="mslr", items=20), "items applies to lengths fixed; lengths mslr draws each list's"),
    ],
)
def test_a_bad_shape_is_refused_naming_its_option(kw, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        LetorShape(**kw)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['list_size'\]; valid: \['queries', 'items'"):
        LetorShape.from_dict({"list_size": 5})


def test_the_cli_refuses_items_with_mslr_lengths_instead_of_ignoring_them(tmp_path, capsys):
    argv = ["synth", "letor", "--queries", "3", "--lengths", "mslr", "--items", "50"]
    assert main([*argv, "--out", str(tmp_path / "m.txt")]) == 2
    err = capsys.readouterr().err
    assert "--items applies to --lengths fixed; --lengths mslr draws each list's length (got 50)" in err
    assert not any(tmp_path.iterdir())


def test_lists_beyond_the_memory_are_refused_before_any_is_made(monkeypatch):
    from ctxrank.data import synth

    monkeypatch.setattr(synth, "available_bytes", lambda device: (2**20, "test's figure"))
    need = r"of 200,000 rows x 136 features need about 518.8 MiB .* can give 1.0 MiB \(the test's figure\)"
    with pytest.raises(ValueError, match=need):
        synthetic_letor(LetorShape(queries=2000), 0)
