"""Training data larger than memory (``ctxrank.data.stream``): Parquet shards of whole queries,
read a piece at a time with a shuffle buffer; normalizers fitted in one streaming pass equal the in-memory
fit; torchrun ranks read disjoint shards; the streaming path trains under a memory cap below the data
size, where the in-memory path fails."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from ctxrank.cli import main
from ctxrank.config import TrainConfig
from ctxrank.data import stream as stream_module
from ctxrank.data.ranking_data import RankingData
from ctxrank.data.stream import ShardStream, rank_shards, shard_paths, write_shards
from ctxrank.data.synth import write_synthetic_letor
from ctxrank.data.transforms import TRANSFORMS, make_transform
from ctxrank.losses import listnet
from ctxrank.registry import make_model
from ctxrank.training.loop import fit, seed_everything
from tests.conftest import make_ranking_data
from tests.training.test_memory import _capped_cli

SRC = Path(__file__).resolve().parents[2] / "src"


def _pieces(data: RankingData, cuts) -> list[RankingData]:
    """``data`` cut into consecutive pieces of whole queries at the query positions ``cuts``."""
    bounds = [0, *cuts, data.n_queries]
    return [data.subset(np.arange(a, b)) for a, b in itertools.pairwise(bounds) if b > a]


def _with_missing(data: RankingData, seed: int) -> RankingData:
    """Some NaN (missing) values, one feature missing everywhere and one constant."""
    x = data.features.copy()
    rng = np.random.default_rng(seed)
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:, 0] = np.nan
    x[:, 1] = 3.0
    return data.with_features(x)


# ------------------------------------------------------------------------------ normalizers
# the per-query normalizers refuse missing values: only the global ones read them
CASES = [(name, False) for name in sorted(TRANSFORMS)] + [
    (n, True) for n in sorted(TRANSFORMS) if not n.startswith("query")
]


@pytest.mark.parametrize(
    ("name", "missing"), CASES, ids=[f"{n}-{'missing' if m else 'dense'}" for n, m in CASES]
)
def test_streaming_fit_equals_the_in_memory_fit(name, missing):
    """Every normalizer fitted in one pass over pieces (any cut, and as two data-parallel ranks whose
    statistics are merged) gives the in-memory fit's state: min / max exactly, the z-scores' mean and
    std within float64 rounding; the transformed features agree."""
    data = make_ranking_data(60, max_len=15, n_features=6, seed=3)
    data = data.with_features(data.features * np.array([1, 10, 1e3, 1e-3, 5, 100], dtype=np.float32) + 7)
    if missing:
        data = _with_missing(data, 4)
    reference = make_transform(name).fit(data)
    rng = np.random.default_rng(0)
    for cuts in ([], [1], sorted(rng.choice(np.arange(1, 60), 7, replace=False))):
        pieces = _pieces(data, cuts)
        streamed = make_transform(name).fit_stream(iter(pieces))
        k = max(1, len(pieces) // 2)
        local = [_local_stats(make_transform(name), own) for own in (pieces[:k], pieces[k:])]  # 2 ranks
        merged = make_transform(name).fit_stream(iter(pieces[:k]), merge=lambda _v, local=local: local)
        for fitted in (streamed, merged):
            got, want = fitted.to_dict(), reference.to_dict()
            assert got["n_features_in"] == want["n_features_in"]
            assert got["feature_names_in"] == want["feature_names_in"]
            if want["state"] is None:
                assert got["state"] is None
                continue
            for key, values in want["state"].items():
                if name == "minmax":
                    assert got["state"][key] == values, key  # a running min / max is exact
                else:
                    np.testing.assert_allclose(got["state"][key], values, rtol=1e-12, atol=1e-12, err_msg=key)
            np.testing.assert_allclose(
                fitted.transform(data).features, reference.transform(data).features, rtol=1e-6, atol=1e-6
            )


def _local_stats(transform, pieces):
    """One rank's statistics vector over its pieces (what ``fit_stream`` gathers from each rank)."""
    acc = transform._stream_start(6)  # a rank without pieces: the neutral statistics
    for p in pieces:
        acc = transform._stream_add(acc, p)
    return acc


def test_streaming_fit_refuses_inf_and_pieces_of_other_features():
    data = make_ranking_data(10, n_features=3)
    bad = data.features.copy()
    bad[4, 2] = np.inf
    with pytest.raises(ValueError, match="features must be finite"):
        make_transform("zscore").fit_stream([data, data.with_features(bad)])
    with pytest.raises(ValueError, match="same features"):
        make_transform("minmax").fit_stream([data, make_ranking_data(10, n_features=4)])
    with pytest.raises(ValueError, match="without rows"):
        make_transform("minmax").fit_stream([])


# ----------------------------------------------------------------------------- shards and reading
@pytest.fixture
def data() -> RankingData:
    d = make_ranking_data(90, max_len=20, n_features=4, seed=5)
    return RankingData(**{**d.__dict__, "docids": np.array([f"d{i}" for i in range(d.n_items)])})


def _signature(features: np.ndarray, labels: np.ndarray) -> tuple:
    """A query's content, independent of where it is read (order of its rows kept)."""
    return (labels.tobytes(), features.round(5).tobytes())


def _queries_of(data: RankingData) -> list[tuple]:
    return sorted(_signature(data.features[data.query_slice(q)], data.labels[data.query_slice(q)])
                  for q in range(data.n_queries))  # fmt: skip


@pytest.mark.parametrize("how", [{"shards": 4}, {"shard_rows": 150}])
def test_shards_hold_whole_queries_and_read_back_as_written(data, tmp_path, how, monkeypatch):
    """``write_shards`` from several pieces, in row groups of 13 rows; reads of a few rows, row group by
    row group, cut queries, which are joined again: the stream's queries are the data's (ids, docids,
    features, labels)."""
    monkeypatch.setattr(stream_module, "ROW_GROUP_ROWS", 13)
    paths = write_shards(_pieces(data, [30, 61]), tmp_path, **how)
    assert paths == shard_paths(tmp_path) and len(paths) > 1
    assert min(pq.ParquetFile(p).metadata.num_row_groups for p in paths) > 3
    stream = ShardStream.open(tmp_path, read_rows=7)
    assert stream.n_queries == data.n_queries and stream.n_items == data.n_items
    assert stream.longest_query() == (
        int(data.query_lengths.max()),
        data.query_ids[np.argmax(data.query_lengths)],
    )
    read = RankingData.concat(list(stream.chunks()))
    assert sorted(read.query_ids) == sorted(data.query_ids)
    order = {q: i for i, q in enumerate(data.query_ids)}
    back = read.subset(np.argsort([order[q] for q in read.query_ids]))
    np.testing.assert_array_equal(back.features, data.features)
    np.testing.assert_array_equal(back.labels, data.labels)
    np.testing.assert_array_equal(back.docids, data.docids)
    assert back.feature_names == data.feature_names
    if "shards" in how:  # query i of all pieces to shard i mod 4: equal sizes
        assert sorted(s.queries for s in stream.scans) == [22, 22, 23, 23]


def test_an_epoch_reads_every_query_once_in_a_seeded_shuffled_order(data, tmp_path):
    """``ceil(Q / B)`` batches of padded lists (the in-memory ListBatch); every query once; the same
    seed gives the same batches, another epoch another order; windows mix queries of several shards."""
    write_shards([data], tmp_path, shards=5)
    stream = ShardStream.open(tmp_path, shuffle_buffer=24, read_rows=16)
    epoch = list(stream.batches(8, np.random.default_rng(1)))
    assert len(epoch) == stream.steps(8) == 12
    seen = [
        _signature(b.features[i][b.mask[i]].numpy(), b.labels[i][b.mask[i]].numpy())
        for b in epoch
        for i in range(b.batch_size)
    ]
    assert sorted(seen) == _queries_of(data)
    for b in epoch:  # padding is 0, real items first
        assert not b.features[~b.mask].any() and not b.labels[~b.mask].any()
    again = list(stream.batches(8, np.random.default_rng(1)))
    assert all(np.array_equal(a.features, b.features) for a, b in zip(epoch, again, strict=True))
    rng = np.random.default_rng(1)
    first, second = list(stream.batches(8, rng)), list(stream.batches(8, rng))
    assert [b.features.sum().item() for b in first] != [b.features.sum().item() for b in second]
    qid_of = {_queries_of(data.subset([q]))[0]: data.query_ids[q] for q in range(data.n_queries)}
    shard_of = {}
    for k, path in enumerate(stream.shards):
        shard_of.update({q: k for q in pq.read_table(path, columns=["qid"]).column("qid").to_pylist()})
    first = {qid_of[sig] for sig in seen[: epoch[0].batch_size]}
    assert len({shard_of[q] for q in first}) > 1  # a buffer of 24 queries mixes shards of 18


def test_ranks_read_disjoint_shards_and_step_together(data, tmp_path):
    """Rank r of W reads shards r, r + W, ...; with 5 shards on 2 ranks rank 0 holds more queries, and
    rank 1 goes on into a second pass so both run the larger number of steps; fewer shards than ranks
    is an error."""
    write_shards([data], tmp_path, shards=5)
    paths = shard_paths(tmp_path)
    assert rank_shards(paths, 0, 2) == paths[0::2] and rank_shards(paths, 1, 2) == paths[1::2]
    ranks = [ShardStream.open(tmp_path, rank=r, world=2, shuffle_buffer=16) for r in range(2)]
    assert set(ranks[0].shards).isdisjoint(ranks[1].shards)
    assert ranks[0].n_queries + ranks[1].n_queries == data.n_queries
    steps = max(s.steps(8) for s in ranks)
    assert ranks[1].steps(8) < steps
    assert len(list(ranks[1].batches(8, np.random.default_rng(0), steps=steps))) == steps
    with pytest.raises(ValueError, match=r"5 shard\(s\) for 6 data-parallel processes"):
        ShardStream.open(tmp_path, rank=0, world=6)


def _table(rows: dict) -> pa.Table:
    return pa.table(rows)


@pytest.mark.parametrize(
    ("shards", "message"),
    [
        ({"a": {"qid": ["1", "1", "2", "1"], "label": [0, 1, 0, 1], "f1": [0.1, 0.2, 0.3, 0.4]}},
         "not contiguous"),
        (
            {"a": {"qid": ["1", "2"], "label": [0, 1], "f1": [0.1, 0.2]},
             "b": {"qid": ["2", "3"], "label": [0, 1], "f1": [0.1, 0.2]}},
            "in two shards",
        ),
        ({"a": {"qid": ["1", "2"], "label": [0, 1], "f1": ["x", "y"]}}, "not numeric"),
        ({"a": {"qid": ["1", "2"], "label": [0, 1], "f1": [0.1, 0.2]},
          "b": {"qid": ["3", "4"], "label": [0, 1], "f2": [0.1, 0.2]}}, "columns differ"),
        ({"a": {"qid": ["1", "2"], "f1": [0.1, 0.2]}}, "no 'label' column"),
        ({"a": {"qid": ["1", None], "label": [0, 1], "f1": [0.1, 0.2]}}, "missing query id"),
    ],
)  # fmt: skip
def test_a_bad_shard_is_refused_naming_it(tmp_path, shards, message):
    for name, rows in shards.items():
        pq.write_table(_table(rows), tmp_path / f"{name}.parquet")
    with pytest.raises(ValueError, match=message):
        ShardStream.open(tmp_path)


def test_missing_features_inf_or_missing_labels_are_errors(tmp_path):
    """A missing feature was read as 0, silently: a stream has no missing-value handling."""
    for cells in ([0.5, None, 1.0], [0.5, 1.0, float("nan")]):
        pq.write_table(_table({"qid": [1, 1, 2], "label": [0, 1, 2], "f1": cells}), tmp_path / "a.parquet")
        with pytest.raises(ValueError, match=r"feature 'f1' is missing .*data-shards --null-fill RULE"):
            list(ShardStream.open(tmp_path).chunks())
    pq.write_table(_table({"qid": [1, 1, 2], "label": [0, 1, 2], "f1": [0.5, 1, 2]}), tmp_path / "a.parquet")
    chunk = RankingData.concat(list(ShardStream.open(tmp_path).chunks()))
    assert list(chunk.query_ids) == ["1", "2"] and chunk.features[:, 0].tolist() == [0.5, 1, 2]
    pq.write_table(
        _table({"qid": [1, 2], "label": [0, 1], "f1": [0.5, float("inf")]}), tmp_path / "a.parquet"
    )
    with pytest.raises(ValueError, match="not a finite float32"):
        list(ShardStream.open(tmp_path).chunks())
    pq.write_table(_table({"qid": [1, 2], "label": [0, None], "f1": [0.5, 1.0]}), tmp_path / "a.parquet")
    with pytest.raises(ValueError, match="missing or non-finite label"):
        list(ShardStream.open(tmp_path).chunks())
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no \*\.parquet shard"):
        ShardStream.open(tmp_path / "empty")


class _Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so nothing on the way catches it."""


def test_a_streamed_run_killed_after_an_epoch_resumes_to_bitwise_the_same_weights(data, tmp_path):
    """The stream's shuffling draws from the run's generator, which the training state saves: a run
    killed after epoch 1 and resumed ends with the weights and history of an uninterrupted run."""
    write_shards([data], tmp_path / "sh", shards=3)
    valid = make_ranking_data(20, n_features=4, seed=6)

    def run(state_dir, resume=False, on_epoch=None):
        stream = ShardStream.open(tmp_path / "sh", shuffle_buffer=16, read_rows=50)
        seed_everything(0)
        model = make_model("mlp", 4, {"hidden": [16], "dropout": 0.2})
        config = TrainConfig(max_epochs=3, batch_size=8, seed=0, patience=10)
        kw = {"state_dir": state_dir, "resume": resume, "on_epoch": on_epoch, "progress": False}
        return model, fit(model, listnet, stream, valid, config, **kw)

    def kill(record):
        if record["epoch"] == 1:
            raise _Killed

    ref_model, ref = run(tmp_path / "a")
    with pytest.raises(_Killed):
        run(tmp_path / "b", on_epoch=kill)
    model, resumed = run(tmp_path / "b", resume=True)
    assert resumed.resumed_from_epoch == 1
    same = zip(model.state_dict().values(), ref_model.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in same)
    drop = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert drop(resumed.history) == drop(ref.history)


# -------------------------------------------------------------------------------- command line
@pytest.fixture
def letor(tmp_path):
    write_synthetic_letor(tmp_path / "tr.txt", n_queries=120, list_size=12, n_features=6, seed=1)
    write_synthetic_letor(tmp_path / "va.txt", n_queries=30, list_size=12, n_features=6, seed=2)
    return tmp_path


def test_train_from_shards_end_to_end(letor, capsys):
    """``data-shards`` then ``train --train-shards``: trains, saves a model that predicts LETOR files;
    the normalizer fitted on the stream is the one fitted on the file in memory."""
    t = letor
    assert main(["data-shards", str(t / "tr.txt"), "--shards", "3", "--out", str(t / "sh")]) == 0
    assert "wrote 120 queries (1,440 rows) in 3 Parquet shard(s)" in capsys.readouterr().out
    args = ["--valid", str(t / "va.txt"), "--test", str(t / "va.txt"), "--no-progress", "--model", "mlp"]
    sets = ["--set", "train.max_epochs=2", "--set", "transform=zscore", "--set", "train.batch_size=16"]
    assert (
        main(
            [
                "train",
                "--train-shards",
                str(t / "sh"),
                *args,
                *sets,
                "--shuffle-buffer",
                "40",
                "--out",
                str(t / "m"),
            ]
        )
        == 0
    )
    said = capsys.readouterr().out
    assert "streaming 120 queries (1,440 rows) in 3 of 3 shard(s)" in said and "best epoch" in said
    assert main(["train", "--train", str(t / "tr.txt"), *args, *sets, "--out", str(t / "mem")]) == 0
    saved = [json.loads((t / d / "ctxrank.json").read_text())["transform"] for d in ("m", "mem")]
    np.testing.assert_allclose(saved[0]["state"]["mean_"], saved[1]["state"]["mean_"], rtol=1e-12)
    np.testing.assert_allclose(saved[0]["state"]["std_"], saved[1]["state"]["std_"], rtol=1e-12)
    assert (
        main(["predict", "--model", str(t / "m"), "--data", str(t / "va.txt"), "-o", str(t / "p.txt")]) == 0
    )
    assert len((t / "p.txt").read_text().split()) == 360
    # the shards directory is not overwritten without --overwrite
    assert main(["data-shards", str(t / "tr.txt"), "--shards", "2", "--out", str(t / "sh")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (
        main(["data-shards", str(t / "tr.txt"), "--shards", "2", "--out", str(t / "sh"), "--overwrite"]) == 0
    )
    assert len(shard_paths(t / "sh")) == 2


def test_data_shards_refuses_missing_cells_and_fills_them_by_the_rule_given(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("q,y,a,b\n1,1,0.5,\n1,0,0.25,3\n2,1,1,2\n2,0,,4\n")
    argv = ["data-shards", str(table), "--query-col", "q", "--label-col", "y", "--shards", "1"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "2 missing feature value(s) (NaN): shards hold no missing value" in err and "--null-fill" in err
    assert main([*argv, "--null-fill", "query_min", "--out", str(tmp_path / "b")]) == 0
    chunk = RankingData.concat(list(ShardStream.open(tmp_path / "b").chunks()))
    assert chunk.features.tolist() == [[0.5, 3], [0.25, 3], [1, 2], [1, 4]]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "lambdamart"], "lambdamart is a baseline"),
        (["--model", "qilcm", "--initial", "lambdamart"], "re-ranking fits an initial ranker"),
        (["--model", "mnl"], "maximum likelihood"),
        (["--model", "mlp", "--set", "train.shuffle_items=true"], "shuffle_items"),
        (["--model", "mlp", "--shuffle-buffer", "4"], "must hold at least one batch"),
        (["--model", "mlp", "--train", "x.txt"], "without --train"),
    ],
)
def test_what_needs_the_data_in_memory_is_refused_from_shards(letor, capsys, extra, message):
    t = letor
    assert main(["data-shards", str(t / "tr.txt"), "--shard-rows", "500", "--out", str(t / "sh")]) == 0
    argv = ["train", "--train-shards", str(t / "sh"), "--valid", str(t / "va.txt"), "--out", str(t / "o")]
    assert main([*argv, *extra, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (t / "o" / "ctxrank.json").exists()


# ------------------------------------------------------------------------------------ memory cap
L, F = 100, 272
HEADROOM = 140 << 20  # bytes the capped process may add to what its imports take (a run of tiny shards
# takes about 110 MiB of it: reading, torch's training state, the saved model and its curves)


def _big_parts(n_parts: int, queries: int):
    """Synthetic queries in parts (values in eighths: the Parquet files stay small on disk)."""
    rng = np.random.default_rng(0)
    names = tuple(f"f{i}" for i in range(1, F + 1))
    for p in range(n_parts):
        n = queries * L
        x = rng.integers(0, 8, size=(n, F)).astype(np.float32) / 8
        y = rng.integers(0, 3, size=n).astype(np.float32)
        ids = np.array([f"{p}-{i}" for i in range(queries)])
        yield RankingData(x, y, ids, np.arange(0, n + 1, L, dtype=np.int64), feature_names=names)


@pytest.mark.slow
def test_streaming_trains_under_a_memory_cap_below_the_data_size_where_in_memory_fails(tmp_path):
    """Shards of 2,200 queries x 100 items x 272 features (239.4 MB of float32 features, decoded) and
    an address-space cap of 140 MiB above what the process's imports take: the streaming path trains an
    epoch (a shuffle buffer of 32 queries: 3.5 MB of features); the same data as one Parquet file,
    trained in memory under the same cap, fails (out of memory, one line)."""
    n_parts, per_part = 11, 200
    decoded = n_parts * per_part * L * F * 4
    assert decoded > 1.5 * HEADROOM
    write_shards(_big_parts(n_parts, per_part), tmp_path / "sh", shards=6)
    write_shards(_big_parts(n_parts, per_part), tmp_path / "one", shards=1)
    write_synthetic_letor(tmp_path / "va.txt", n_queries=3, list_size=L, n_features=F, seed=2)
    common = ["--valid", str(tmp_path / "va.txt"), "--model", "mlp", "--no-progress"]
    common += ["--set", "train.max_epochs=1", "--set", "train.threads=1", "--set", "train.batch_size=16"]
    # mimalloc (pyarrow's default pool) reserves 1 GiB of address space and every thread its arena:
    # under an address-space cap use the system allocator and few threads (docs/data.md)
    env = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "2", "ARROW_IO_THREADS": "1"}
    preload = ("ctxrank.cli.train", "ctxrank.cli.data", "matplotlib.pyplot", "sympy", "pyarrow.parquet")
    stream = [
        "train",
        "--train-shards",
        str(tmp_path / "sh"),
        "--shuffle-buffer",
        "32",
        "--read-rows",
        "1024",
    ]
    rc, err = _capped_cli(
        [*stream, *common, "--out", str(tmp_path / "s")], HEADROOM, preload=preload, env=env
    )
    assert rc == 0, err[-3000:]
    assert (tmp_path / "s" / "model.safetensors").is_file()
    table = ["train", "--train", str(tmp_path / "one" / "part-00000.parquet"), "--query-col", "qid"]
    table += ["--label-col", "label", "--valid", str(tmp_path / "one" / "part-00000.parquet")]
    rc, err = _capped_cli(
        [*table, *common[2:], "--out", str(tmp_path / "m")], HEADROOM, preload=preload, env=env
    )
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert "out of memory" in err or "ArrowMemoryError" in err, err[-3000:]


# ------------------------------------------------------------------------------------ torchrun
@pytest.mark.slow
def test_torchrun_ranks_train_from_disjoint_shards(letor):
    """Two gloo processes on 3 shards (not a multiple of 2: rank 1 goes on into a second pass) train
    together and rank 0 saves the model; the normalizer is the one of all shards (merged)."""
    t = letor
    assert main(["data-shards", str(t / "tr.txt"), "--shards", "3", "--out", str(t / "sh")]) == 0
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd = [*launcher, "-m", "ctxrank", "train", "--model", "mlp", "--train-shards", str(t / "sh")]
    cmd += ["--valid", str(t / "va.txt"), "--out", str(t / "dp"), "--no-progress", "--shuffle-buffer", "32"]
    cmd += ["--set", "train.max_epochs=2", "--set", "train.batch_size=8", "--set", "transform=zscore"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("best epoch") == 1
    assert proc.stdout.count("in 2 of 3 shard(s)") == 1  # rank 0 speaks: shards 0 and 2
    alone = make_transform("zscore").fit(RankingData.concat(list(ShardStream.open(t / "sh").chunks())))
    saved = json.loads((t / "dp" / "ctxrank.json").read_text())["transform"]["state"]
    np.testing.assert_allclose(saved["mean_"], alone.mean_, rtol=1e-12)
    np.testing.assert_allclose(saved["std_"], alone.std_, rtol=1e-12)


def test_tune_refuses_shards(letor, capsys):
    t = letor
    assert main(["data-shards", str(t / "tr.txt"), "--shards", "2", "--out", str(t / "sh")]) == 0
    argv = ["tune", "--model", "mlp", "--train-shards", str(t / "sh"), "--valid", str(t / "va.txt")]
    assert main([*argv, "--trials", "1", "--out", str(t / "tune")]) == 2
    assert "--train-shards (training data streamed from disk) is for ctxrank train" in capsys.readouterr().err
