"""Training data larger than memory: query groups streamed from a directory of Parquet shards.

**Layout** (what :func:`write_shards` and ``ctxrank data-shards`` write; any tool may write it): a
directory of ``*.parquet`` files (shards, read in name order), each holding WHOLE queries, the rows of a
query contiguous. Columns, as the table reader (:mod:`ctxrank.data.table`) reads a Parquet file: ``qid``
(the query id, any type, read as text), ``label`` (numeric), optionally ``docid`` (text, not a feature),
and one numeric column per feature, every other column in file order (the same names and order in every
shard). A missing feature value (null or NaN), an inf, a text feature column, a missing label or a
query split across shards (or not contiguous in its shard) is an error naming the shard: a stream has no
missing-value handling, so shards are written with their missing cells filled (``--null-fill``).

**Interaction logs** (one session per query): the shards also hold the shown-position column, under the
log's own name (``data-shards --position-col COL`` writes it and records the name in the Parquet schema
metadata, key ``ctxrank.position``); it is never a feature. Training names it again (``--train-shards DIR
--position-col COL``: shards that record a position column are refused without it). The scan checks each
session's positions (:mod:`ctxrank.data.interactions`: whole numbers ``1..n``), holding one float64 per
row of a shard while it does; a session split across shards is an error naming it and its rows.

**Reading**: :class:`ShardStream` scans the shards' query-id columns once (how many queries, the longest
list, the checks above), then reads ``read_rows`` rows at a time (``pyarrow.parquet.ParquetFile.
iter_batches``, row group by row group, without pre-buffering: pyarrow's pre-buffer would hold a whole
shard), cut at query boundaries (the last query of a read waits for its other rows). pyarrow decodes a
row group of a column at a time, so a row group is read whole: ``data-shards`` writes row groups of at
most :data:`ROW_GROUP_ROWS` rows; shards written by another tool should keep theirs small too (the scan
records the largest, and the memory bound counts it).

**Shuffling**, one epoch (every draw from the run's ``np.random.Generator``, so seeded and resumable):

1. the shard order is a fresh permutation;
2. the queries read go into a shuffle buffer of ``shuffle_buffer`` queries; whenever it is full, a
   window of ``W`` queries is drawn from it at random (``W`` = half the buffer, rounded down to a
   multiple of ``batch_size``, at least one batch), and the window is cut into batches by the in-memory
   code itself (:func:`ctxrank.data.lists.iterate_batches`: length buckets or random, shuffled batch
   order; the same :class:`~ctxrank.data.lists.ListBatch` and padding); at the end of the shards the
   buffer is emptied in random windows the same way.

   A query read from a shard leaves the buffer after a geometric number of draws (each draw takes about
   half of it), so a batch mixes queries of about ``shuffle_buffer / queries per shard + 1`` shards;
   every query is seen once per epoch and an epoch has ``ceil(queries / batch_size)`` batches, as in
   memory.

**Ranks** (``torchrun``): rank ``r`` of ``W`` reads shards ``r, r + W, r + 2W, ...`` (name order), no
other. When the shard count is not a multiple of ``W`` (or shards differ in size) ranks hold different
numbers of queries; every rank still runs the same number of steps (DistributedDataParallel needs it):
the largest rank's ``ceil(queries / batch_size)``, a rank with fewer queries going on into a second,
reshuffled pass over its shards (as ``DistributedSampler`` pads by repetition). So the queries of
smaller ranks weigh more in that epoch: write a multiple of ``W`` shards of equal size
(``ctxrank data-shards --shards N``) to avoid it. Fewer shards than ranks is an error.

**Memory** is O(shuffle buffer + one read + one window), not O(data): :meth:`ShardStream.memory_bytes`
bounds it from the longest list and the feature count (``ctxrank train`` prints it).

pyarrow (and pandas) are imported by the functions that read or write shards, not with the module: the
training loop names :class:`ShardStream`, and importing an estimator must not need them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ctxrank._checks import OptionError
from ctxrank.data.interactions import log_positions
from ctxrank.data.ranking_data import RankingData

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctxrank.data.lists import ListBatch

__all__ = [
    "DEFAULT_READ_ROWS",
    "DEFAULT_SHUFFLE_BUFFER",
    "ShardStream",
    "rank_shards",
    "shard_paths",
    "write_shards",
]

QUERY, LABEL, DOCID = "qid", "label", "docid"  #: the key columns of a shard
POSITION_KEY = b"ctxrank.position"  #: the schema metadata key naming an interaction log's position column
DEFAULT_SHUFFLE_BUFFER = 1024  #: queries held for shuffling
DEFAULT_READ_ROWS = 65_536  #: rows read from a shard at a time
ROW_GROUP_ROWS = 16_384  #: the largest row group ``write_shards`` writes
SHARD_NAME = "part-{:05d}.parquet"
_F32_MAX = float(np.finfo(np.float32).max)


# ----------------------------------------------------------------------------------------- shards
def shard_paths(directory: str | Path) -> list[Path]:
    """The ``*.parquet`` files of ``directory``, in name order (an error when there are none)."""
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"{d}: not a directory of Parquet shards (`ctxrank data-shards` writes one)")
    paths = sorted(p for p in d.iterdir() if p.suffix == ".parquet" and p.is_file())
    if not paths:
        raise ValueError(f"{d}: no *.parquet shard in it (`ctxrank data-shards` writes them)")
    return paths


def rank_shards(paths: Sequence[Path], rank: int, world: int) -> list[Path]:
    """Rank ``rank``'s shards of ``world``: ``paths[rank::world]``; fewer shards than ranks is an error."""
    if len(paths) < world:
        raise ValueError(
            f"{len(paths)} shard(s) for {world} data-parallel processes: every process reads its own "
            f"shards, so write at least {world} (ctxrank data-shards --shards {world})"
        )
    return list(paths[rank::world])


@dataclass(frozen=True)
class _Layout:
    """The column roles shared by every shard."""

    features: tuple[str, ...]
    docid: bool


def _layout(paths: Sequence[Path], position: str | None = None) -> _Layout:
    """Every shard's schema read (metadata only) and checked against the first one's; ``position``:
    the shown-position column of an interaction log's shards (not a feature), or None."""
    import pyarrow.parquet as pq

    first = None
    for path in paths:
        try:
            schema = pq.read_schema(path)
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise ValueError(f"{path}: cannot read as Parquet ({type(exc).__name__}: {exc})") from exc
        names = [n for n in schema.names if not n.startswith("__index_level_")]
        for key in (QUERY, LABEL):
            if key not in names:
                raise ValueError(
                    f"{path}: no {key!r} column; a shard has columns qid, label[, docid], features"
                )
        _check_position_column(path, names, (schema.metadata or {}).get(POSITION_KEY), position)
        features = tuple(n for n in names if n not in (QUERY, LABEL, DOCID, position))
        if not features:
            raise ValueError(f"{path}: no feature column (every column but qid, label, docid is a feature)")
        keys = (LABEL, *([position] if position is not None else []))
        bad = [n for n in (*keys, *features) if not _numeric_type(schema.field(n).type)]
        if bad:
            raise ValueError(f"{path}: column(s) {bad[:5]} are not numeric ({schema.field(bad[0]).type})")
        layout = _Layout(features, DOCID in names)
        if first is None:
            first = (path, layout)
        elif layout != first[1]:
            raise ValueError(
                f"{path}: its columns differ from those of {first[0]} (every shard needs the same qid, "
                f"label, docid and feature columns in the same order)"
            )
    assert first is not None
    return first[1]


def _check_position_column(
    path: Path, names: Sequence[str], recorded: bytes | None, position: str | None
) -> None:
    """The shown-position column named for a stream (``position``) is the one the shard records (its
    schema metadata, ``recorded``), and is in the shard."""
    declared = None if recorded is None else recorded.decode()
    if declared is not None and declared != position:
        raise OptionError(
            "{path}: the shards hold an interaction log whose shown positions are column {declared!r}"
            + (" (not a feature): give {position_col} {declared}" if position is None else ", not {given!r}"),
            path=path,
            declared=declared,
            given=position,
        )
    if position is not None and position not in names:
        raise OptionError(
            "{path}: no shown-position column {column!r} ({position_col}); the shard has columns {names}",
            path=path,
            column=position,
            names=list(names)[:20],
        )


def _numeric_type(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


@dataclass(frozen=True)
class _ShardScan:
    """What one pass over a shard's query ids found."""

    path: Path
    rows: int
    queries: int
    longest: int
    longest_qid: str
    row_group: int  # rows of its largest row group


def _runs(qids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts (int64) and ids of the runs of equal consecutive query ids."""
    change = np.ones(qids.size, dtype=bool)
    change[1:] = qids[1:] != qids[:-1]
    starts = np.flatnonzero(change)
    return starts, qids[starts]


def _qid_text(column: pa.Array | pa.ChunkedArray, where: str) -> np.ndarray:
    if column.null_count:
        raise ValueError(f"{where}: missing query id (null) in column {QUERY!r}")
    return np.asarray(column.to_numpy(zero_copy_only=False)).astype(str)


def _scan(path: Path, read_rows: int, position: str | None = None) -> tuple[_ShardScan, np.ndarray]:
    """One pass over a shard's ``qid`` column (and ``position`` column, checked session by session):
    counts, the longest list and the uint64 hash of every query id (for the check that no query is in
    two shards). A query id that comes back after other queries is an error."""
    import pandas as pd
    import pyarrow.parquet as pq

    counts: list[np.ndarray] = []
    ids: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    rows = 0
    last: str | None = None
    shard = pq.ParquetFile(path, pre_buffer=False)
    meta = shard.metadata
    row_group = max((meta.row_group(i).num_rows for i in range(meta.num_row_groups)), default=0)
    for batch in _reads(shard, read_rows, [QUERY, *([position] if position is not None else [])]):
        if position is not None:  # a null reads as NaN
            positions.append(np.asarray(batch.column(1).to_numpy(zero_copy_only=False), dtype=np.float64))
        qids = _qid_text(batch.column(0), f"{path}: rows {rows + 1}..{rows + batch.num_rows}")
        if qids.size == 0:
            continue
        starts, run_ids = _runs(qids)
        lengths = np.diff(np.append(starts, qids.size))
        if last is not None and run_ids[0] == last:  # the query goes on from the previous read
            counts[-1][-1] += lengths[0]
            starts, run_ids, lengths = starts[1:], run_ids[1:], lengths[1:]
        if lengths.size:
            counts.append(lengths.astype(np.int64))
            ids.append(run_ids)
        rows += batch.num_rows
        last = str(qids[-1])
    if rows == 0:
        raise ValueError(f"{path}: the shard holds no rows")
    lengths = np.concatenate(counts)
    run_ids = np.concatenate(ids)
    hashes = pd.util.hash_array(run_ids.astype(object))
    order = np.argsort(hashes, kind="stable")
    again = np.flatnonzero(hashes[order][1:] == hashes[order][:-1])
    if again.size:
        qid = run_ids[order[again[0] + 1]]
        raise ValueError(
            f"{path}: the rows of query {qid[:40]!s} are not contiguous (it comes back after other queries); "
            "a shard holds whole queries, each query's rows together"
        )
    if position is not None:
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        rows_of = np.arange(rows, dtype=np.int64)
        log_positions(np.concatenate(positions), offsets, run_ids, rows_of, str(path), _row_text, position)
    q = int(np.argmax(lengths))
    return _ShardScan(path, rows, int(lengths.size), int(lengths[q]), str(run_ids[q]), row_group), hashes


def _row_text(row: int) -> str:
    return f"row {row + 1}"


def _reads(shard: pq.ParquetFile, read_rows: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The shard's rows, ``read_rows`` at a time, row group by row group: a read never spans two row
    groups, so pyarrow holds one decoded row group at a time."""
    for i in range(shard.metadata.num_row_groups):
        yield from shard.iter_batches(batch_size=read_rows, row_groups=[i], columns=columns)


def _features(batch: pa.RecordBatch, names: Sequence[str], where: str) -> np.ndarray:
    """float32 (n, F); a missing value (null, NaN) or one that is not a finite float32 (an inf, or beyond
    float32 in a float64 column) is an error: a stream has no missing-value handling, so the shards are
    written with their missing cells filled (``data-shards --null-fill``). Each column is cast straight
    into the block (no float64 copy), then the block is checked at once."""
    out = np.empty((batch.num_rows, len(names)), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32 -> inf, refused below
        for j, name in enumerate(names):
            column = batch.column(name)
            if column.null_count:  # a null reads as NaN (booleans as floats), refused below
                column = column.cast("float64")
            out[:, j] = column.to_numpy(zero_copy_only=False)
    missing = np.isnan(out)
    if missing.any():
        i, j = (int(v) for v in np.argwhere(missing)[0])
        raise ValueError(
            f"{where}: row {i + 1} of this read: feature {names[j]!r} is missing (null or NaN; "
            f"{int(missing.sum()):,} in this read); a stream of shards reads no missing value: write the "
            "shards with their missing cells filled (ctxrank data-shards --null-fill RULE)"
        )
    bad = np.isinf(out)
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        value = batch.column(names[j])[i].as_py()
        raise ValueError(
            f"{where}: row {i + 1} of this read: feature {names[j]!r} is {value}, not a finite float32"
        )
    return out


def _labels(batch: pa.RecordBatch, where: str) -> np.ndarray:
    values = np.asarray(batch.column(LABEL).to_numpy(zero_copy_only=False), dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise ValueError(f"{where}: row {int(np.argmax(bad)) + 1} of this read: missing or non-finite label")
    return values.astype(np.float32)


# ----------------------------------------------------------------------------------------- stream
@dataclass(frozen=True, eq=False)
class ShardStream:
    """This process's shards of a directory (module docstring) and how they are read.

    Build it with :meth:`open`. ``transform``: a fitted normalizer applied to every read
    (:meth:`with_transform`).
    """

    directory: Path
    shards: tuple[Path, ...]
    all_shards: int
    feature_names: tuple[str, ...]
    scans: tuple[_ShardScan, ...]
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    read_rows: int = DEFAULT_READ_ROWS
    docids: bool = False
    position: str | None = None  #: an interaction log's shown-position column (read, never a feature)
    transform: Any = field(default=None)
    rank: int = 0
    world: int = 1

    @classmethod
    def open(
        cls,
        directory: str | Path,
        *,
        rank: int = 0,
        world: int = 1,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        read_rows: int = DEFAULT_READ_ROWS,
        position: str | None = None,
    ) -> ShardStream:
        """Rank ``rank``'s shards of ``directory``, their schemas (all shards') and query ids checked;
        ``position``: an interaction log's shown-position column (module docstring)."""
        for name, value in (("shuffle_buffer", shuffle_buffer), ("read_rows", read_rows)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        paths = shard_paths(directory)
        layout = _layout(paths, position)
        mine = rank_shards(paths, rank, world)
        scans, hashes = zip(*(_scan(p, read_rows, position) for p in mine), strict=True)
        _check_disjoint(scans, hashes)
        return cls(
            directory=Path(directory),
            shards=tuple(mine),
            all_shards=len(paths),
            feature_names=layout.features,
            scans=tuple(scans),
            shuffle_buffer=int(shuffle_buffer),
            read_rows=int(read_rows),
            docids=layout.docid,
            position=position,
            rank=rank,
            world=world,
        )

    # ------------------------------------------------------------------------------ what it holds
    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    @property
    def n_queries(self) -> int:
        """Queries of this process's shards."""
        return sum(s.queries for s in self.scans)

    @property
    def n_items(self) -> int:
        return sum(s.rows for s in self.scans)

    categorical: ClassVar[None] = None  #: shards hold numeric features only
    categorical_cardinalities: ClassVar[tuple[int, ...]] = ()

    def longest_query(self) -> tuple[int, str]:
        """Length and id of the longest list of this process's shards."""
        best = max(self.scans, key=lambda s: s.longest)
        return best.longest, best.longest_qid

    def memory_bytes(self, batch_size: int) -> int:
        """An upper bound of the bytes of data rows the stream holds at once: the buffer
        (``shuffle_buffer`` lists of the longest length, plus one read and the query it cut), a copy while
        it is re-cut, one read (decoded and normalized), the largest row group (pyarrow's decoded column
        chunks), the window and its padded batches; each row ``4 F + 12`` bytes (features, label, id)."""
        longest, _ = self.longest_query()
        row = 4 * self.n_features + 12
        buffer = self.shuffle_buffer * longest + self.read_rows + longest
        window = max(self._window(batch_size), batch_size) * longest
        row_group = max(s.row_group for s in self.scans)
        return int(row * (2 * buffer + 2 * self.read_rows + 2 * row_group + 2 * window))

    def with_transform(self, transform: Any) -> ShardStream:
        """The same stream with every read normalized by ``transform`` (fitted)."""
        return replace(self, transform=transform)

    def fingerprint(self) -> str:
        """SHA-256 of the shards' names, sizes and row counts, and of the reading settings: what a
        resumed run checks (the same shards give the same one)."""
        h = hashlib.sha256()
        for s in self.scans:
            h.update(f"{s.path.name}:{s.path.stat().st_size}:{s.rows}:{s.queries};".encode())
        h.update(f"{self.shuffle_buffer}:{self.read_rows}:{self.rank}/{self.world}".encode())
        return h.hexdigest()

    def describe(self) -> str:
        return (
            f"{self.n_queries:,} queries ({self.n_items:,} rows) in {len(self.shards)} of {self.all_shards} "
            f"shard(s) of {self.directory}"
        )

    # ------------------------------------------------------------------------------------ reading
    def chunks(self, order: Sequence[int] | None = None) -> Iterator[RankingData]:
        """The shards (in ``order``, default name order) as RankingData pieces of whole queries, about
        ``read_rows`` rows each, normalized by :attr:`transform` when it is set."""
        for i in range(len(self.shards)) if order is None else order:
            for chunk in self._shard_chunks(self.shards[i]):
                yield chunk if self.transform is None else self.transform.transform(chunk)

    def first_query(self) -> RankingData:
        """The first query of the first shard, raw (the layout a saved model records)."""
        chunk = next(self._shard_chunks(self.shards[0]))
        return chunk.subset([0])

    def _shard_chunks(self, path: Path) -> Iterator[RankingData]:
        import pandas as pd
        import pyarrow.parquet as pq

        keys = [QUERY, LABEL, *([DOCID] if self.docids else []), *([self.position] if self.position else [])]
        columns = [*keys, *self.feature_names]
        carry: RankingData | None = None
        rows = 0
        shard = pq.ParquetFile(path, pre_buffer=False)
        for batch in _reads(shard, self.read_rows, columns):
            where = f"{path}: rows {rows + 1}..{rows + batch.num_rows}"
            rows += batch.num_rows
            if batch.num_rows == 0:
                continue
            qids = _qid_text(batch.column(QUERY), where)
            starts, run_ids = _runs(qids)
            docids = None
            if self.docids:
                values = np.asarray(batch.column(DOCID).to_numpy(zero_copy_only=False), dtype=object)
                docids = np.where(pd.isna(values), "", values).astype(str)
            part = RankingData(
                features=_features(batch, self.feature_names, where),
                labels=_labels(batch, where),
                query_ids=run_ids,
                query_offsets=np.append(starts, qids.size).astype(np.int64),
                docids=docids,
                feature_names=self.feature_names,
                source=str(path),
                shown_positions=None
                if self.position is None
                else np.asarray(batch.column(self.position).to_numpy(zero_copy_only=False)).astype(np.int32),
            )
            if carry is not None:
                if carry.query_ids[-1] == part.query_ids[0]:  # the cut query goes on here
                    part = _join_first(carry, part)
                else:
                    part = RankingData.concat([carry, part], source=str(path))
            if part.n_queries > 1:
                yield part.subset(np.arange(part.n_queries - 1))
            carry = part.subset([part.n_queries - 1])  # its rows may go on in the next read
        if carry is not None:
            yield carry

    # ------------------------------------------------------------------------------------ batches
    def _window(self, batch_size: int) -> int:
        """Queries drawn from the buffer at once: half the buffer, a multiple of ``batch_size``
        (at least one batch)."""
        return max(1, (self.shuffle_buffer // 2) // batch_size) * batch_size

    def steps(self, batch_size: int) -> int:
        """Batches of one pass over this process's shards: ``ceil(queries / batch_size)``."""
        return -(-self.n_queries // batch_size)

    def batches(
        self,
        batch_size: int,
        generator: np.random.Generator,
        *,
        bucket: bool = True,
        steps: int | None = None,
    ) -> Iterator[ListBatch]:
        """One epoch of padded batches (module docstring); ``steps``: exactly that many, going on into
        further reshuffled passes when this process's shards give fewer (data-parallel ranks)."""
        if batch_size > self.shuffle_buffer:
            raise OptionError(
                "the shuffle buffer ({held} queries) must hold at least one batch (train.batch_size = "
                "{batch_size}): raise {shuffle_buffer}",
                held=self.shuffle_buffer,
                batch_size=batch_size,
            )
        done = 0
        while True:
            for batch in self._one_pass(batch_size, generator, bucket):
                if steps is not None and done >= steps:
                    return
                yield batch
                done += 1
            if steps is None or done >= steps:
                return

    def _one_pass(self, batch_size: int, generator: np.random.Generator, bucket: bool) -> Iterator[ListBatch]:
        window = self._window(batch_size)
        buffer: RankingData | None = None

        from ctxrank.data.lists import iterate_batches  # torch: only when a stream is batched

        def cut(data: RankingData) -> Iterator[ListBatch]:
            yield from iterate_batches(data, batch_size, shuffle=True, generator=generator, bucket=bucket)

        for chunk in self.chunks(generator.permutation(len(self.shards))):
            buffer = chunk if buffer is None else RankingData.concat([buffer, chunk], source=chunk.source)
            while buffer.n_queries >= self.shuffle_buffer:
                drawn = np.zeros(buffer.n_queries, dtype=bool)
                drawn[generator.choice(buffer.n_queries, window, replace=False)] = True
                taken = buffer.subset(np.flatnonzero(drawn))
                buffer = buffer.subset(np.flatnonzero(~drawn))
                yield from cut(taken)
        if buffer is None:
            return
        rest = generator.permutation(buffer.n_queries)
        for start in range(0, rest.size, window):
            yield from cut(buffer.subset(np.sort(rest[start : start + window])))


def _join_first(carry: RankingData, part: RankingData) -> RankingData:
    """``part`` with the rows of the one-query ``carry`` (the same query, cut by a read) in front."""
    lengths = np.diff(part.query_offsets)
    lengths[0] += carry.n_items
    return RankingData(
        features=np.concatenate([carry.features, part.features]),
        labels=np.concatenate([carry.labels, part.labels]),
        query_ids=part.query_ids,
        query_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        docids=None if part.docids is None else np.concatenate([carry.docids, part.docids]),
        feature_names=part.feature_names,
        source=part.source,
        shown_positions=None
        if part.shown_positions is None
        else np.concatenate([carry.shown_positions, part.shown_positions]),
    )


def _check_disjoint(scans: Sequence[_ShardScan], hashes: Sequence[np.ndarray]) -> None:
    """No query id in two shards (of this process: a process reads only its own)."""
    if len(scans) < 2:
        return
    owner = np.repeat(np.arange(len(scans)), [h.size for h in hashes])
    every = np.concatenate(hashes)
    order = np.argsort(every, kind="stable")
    twice = np.flatnonzero(every[order][1:] == every[order][:-1])
    if twice.size:
        a, b = owner[order[twice[0]]], owner[order[twice[0] + 1]]
        repeated = every[order[twice[0]]]
        (qid, row_a), (_, row_b) = (_find_query(scans[s].path, repeated) for s in (a, b))
        raise ValueError(
            f"{scans[b].path}: row {row_b + 1}: query / session {qid[:40]!r} is in two shards (also in "
            f"{scans[a].path.name}, row {row_a + 1}): a shard holds whole queries (an interaction log's "
            "whole sessions), every query in one shard"
        )


def _find_query(path: Path, hashed: np.uint64) -> tuple[str, int]:
    """The query id whose hash is ``hashed`` and its first row (0-based) in the shard ``path`` (an error
    message's second reading of the shard's ``qid`` column)."""
    import pandas as pd
    import pyarrow.parquet as pq

    qids = _qid_text(pq.read_table(path, columns=[QUERY]).column(0), str(path))
    row = int(np.flatnonzero(pd.util.hash_array(qids.astype(object)) == hashed)[0])
    return str(qids[row]), row


# ----------------------------------------------------------------------------------------- writer
def write_shards(
    parts: Iterable[RankingData],
    directory: str | Path,
    *,
    shard_rows: int | None = None,
    shards: int | None = None,
    position: str | None = None,
) -> list[Path]:
    """Write the queries of ``parts`` (read one after another, so only one part is in memory) as Parquet
    shards ``part-NNNNN.parquet`` in ``directory`` (the module docstring's layout: qid, label, docid when
    the parts have docids, the features by name), holding whole queries.

    ``shard_rows``: queries in order, a shard closed at the first query boundary at or after that many
    rows. ``shards``: that many shards, query ``i`` (counted over all parts) to shard ``i mod shards``,
    so shards are of about equal size (what data-parallel ranks want). Each shard is written under a
    temporary name and renamed when complete; nothing is left behind by a failure. ``position``: the
    column an interaction log's shown positions are written to (and recorded in the schema metadata);
    given exactly when the parts hold positions.

    Returns:
        The paths written, in order.
    """
    import pyarrow as pa

    if (shard_rows is None) == (shards is None):
        raise ValueError("give either shard_rows or shards")
    for name, value in (("shard_rows", shard_rows), ("shards", shards)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1
        ):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    cut = _ShardCut(shards=shards, shard_rows=shard_rows)
    files = _ShardFiles(d)
    try:
        for part in parts:
            if part.features.size and np.isnan(part.features.min()):  # NaN propagates
                raise OptionError(
                    "{source}: {n:,} missing feature value(s) (NaN): shards hold no missing value (a stream "
                    "has no missing-value handling); fill them when reading ({null_fill:RULE}: query_min, "
                    "letor_min or a number)",
                    source=part.source,
                    n=int(np.isnan(part.features).sum()),
                )
            if part.categorical is not None:
                raise ValueError(
                    f"{part.source}: categorical columns are not written to shards (the streaming path "
                    "reads numeric features only)"
                )
            if (part.shown_positions is None) != (position is None):
                raise ValueError(
                    f"{part.source}: "
                    + ("shown positions without a position column name to write them to"
                       if position is None else f"no shown positions to write to column {position!r}")
                )  # fmt: skip
            target = cut.assign(part.query_lengths)
            for s in np.unique(target).tolist():
                rows = part.subset(np.flatnonzero(target == s))
                frame = rows.to_frame(query=QUERY, label=LABEL, docid=DOCID)
                table = pa.Table.from_pandas(frame, preserve_index=False)
                if position is not None:
                    if position in frame.columns:
                        raise ValueError(f"{part.source}: the position column {position!r} is also a column")
                    table = table.add_column(
                        frame.shape[1] - part.n_features, position, pa.array(rows.shown_positions)
                    )
                    metadata = {**(table.schema.metadata or {}), POSITION_KEY: position.encode()}
                    table = table.replace_schema_metadata(metadata)
                files.write(s, table, part.source)
                if shards is None:  # consecutive shards: the earlier ones are complete
                    files.close_before(s)
        return files.commit()
    finally:
        files.discard()


@dataclass
class _ShardCut:
    """Which shard each query goes to, over the parts in order: ``shards`` round robin over the queries
    counted so far, or consecutive shards each closed at the first query boundary at or after
    ``shard_rows`` rows."""

    shards: int | None
    shard_rows: int | None
    queries: int = 0  # queries assigned so far
    shard: int = 0  # the open shard (shard_rows)
    held: int = 0  # its rows

    def assign(self, lengths: np.ndarray) -> np.ndarray:
        """(Q,) the shard of each of a part's ``Q`` queries, of ``lengths`` (Q,) rows."""
        if self.shards is not None:
            target = (self.queries + np.arange(lengths.size)) % self.shards
        else:
            target = np.empty(lengths.size, dtype=np.int64)
            for q, rows in enumerate(lengths.tolist()):  # a loop over queries: the writer is not the hot path
                if self.held >= self.shard_rows:
                    self.shard, self.held = self.shard + 1, 0
                target[q] = self.shard
                self.held += rows
        self.queries += lengths.size
        return target


class _ShardFiles:
    """The shard files of one :func:`write_shards` call: each written under a temporary name and
    renamed by :meth:`commit` once all are complete; :meth:`discard` removes what is left."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.writers: dict[int, Any] = {}  # shard -> its open pyarrow.parquet.ParquetWriter
        self.temporary: dict[int, Path] = {}  # shard -> its file until renamed

    def write(self, shard: int, table: Any, source: str) -> None:
        """Append the pyarrow ``table`` to ``shard``, whose columns it must have."""
        import pyarrow.parquet as pq

        if shard not in self.writers:
            self.temporary[shard] = self.directory / f".{SHARD_NAME.format(shard)}.tmp"
            self.writers[shard] = pq.ParquetWriter(self.temporary[shard], table.schema, compression="zstd")
        elif not table.schema.equals(self.writers[shard].schema):
            raise ValueError(f"{source}: its columns differ from those of the parts before it")
        self.writers[shard].write_table(table, row_group_size=ROW_GROUP_ROWS)

    def close_before(self, shard: int) -> None:
        for done in [k for k in self.writers if k < shard]:
            self.writers.pop(done).close()

    def commit(self) -> list[Path]:
        """Close every shard and rename it; the paths in shard order."""
        while self.writers:
            self.writers.popitem()[1].close()
        written = []
        for s in sorted(self.temporary):
            path = self.directory / SHARD_NAME.format(s)
            self.temporary.pop(s).replace(path)
            written.append(path)
        return written

    def discard(self) -> None:
        while self.writers:
            self.writers.popitem()[1].close()
        for tmp in self.temporary.values():
            tmp.unlink(missing_ok=True)
