"""`RankingData`: the in-memory form of a learning-to-rank dataset.

Every query's rows are contiguous: query ``q`` owns rows ``query_offsets[q]:query_offsets[q + 1]``.
This is the contract every reader produces and every later stage (transforms, list batching,
LightGBM groups, metrics) relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np


@dataclass(frozen=True, eq=False)
class RankingData:
    """A set of queries, each with a list of items (documents).

    Attributes:
        features: float32 [N, F] dense feature matrix (no NaN or inf).
        labels: float32 [N] graded relevance labels.
        query_ids: str [Q] query identifiers, in file order.
        query_offsets: int64 [Q + 1]; query q owns rows ``query_offsets[q]:query_offsets[q+1]``.
        docids: str [N] document identifiers (``#docid = ...`` comments), or None.
        categorical: int64 [N, C] integer codes of categorical columns (0 = reserved "unknown"), or None.
        feature_names: F names (``"f1".."fF"`` for LETOR files: the file's 1-based feature indices).
        categorical_names: C names of the categorical columns.
        categorical_cardinalities: C vocabulary sizes, each including the reserved code 0.
        source: where the data came from (a path or a dataset name), for messages.
        info: reader statistics, e.g. ``{"null_filled": 12}``.
        group_ids: str [Q] the group (decision maker, user) each query belongs to, or None. Several
            queries of one person share a group id; ``ctxrank.data.split`` can split by group so that
            no person is both in the training and the test split.
    """

    features: np.ndarray
    labels: np.ndarray
    query_ids: np.ndarray
    query_offsets: np.ndarray
    docids: np.ndarray | None = None
    categorical: np.ndarray | None = None
    feature_names: tuple[str, ...] = ()
    categorical_names: tuple[str, ...] = ()
    categorical_cardinalities: tuple[int, ...] = ()
    source: str = ""
    info: dict = field(default_factory=dict)
    group_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = self.labels.shape[0]
        if self.features.ndim != 2 or self.features.shape[0] != n:
            raise ValueError(f"features must be [N, F] with N = {n} labels, got shape {self.features.shape}")
        if self.features.dtype != np.float32 or self.labels.dtype != np.float32:
            raise TypeError(
                f"features and labels must be float32, got {self.features.dtype} and {self.labels.dtype}"
            )
        off = self.query_offsets
        if off.ndim != 1 or off.shape[0] != self.query_ids.shape[0] + 1:
            raise ValueError(
                f"query_offsets must have Q + 1 = {self.query_ids.shape[0] + 1} entries, got {off.shape}"
            )
        if off[0] != 0 or off[-1] != n or np.any(np.diff(off) <= 0):
            raise ValueError("query_offsets must start at 0, end at N and be strictly increasing")
        if self.group_ids is not None and self.group_ids.shape != self.query_ids.shape:
            raise ValueError(
                f"group_ids must have one entry per query ({self.query_ids.shape[0]}), "
                f"got {self.group_ids.shape}"
            )
        if self.docids is not None and self.docids.shape != (n,):
            raise ValueError(f"docids must have N = {n} entries, got {self.docids.shape}")
        if self.categorical is not None:
            if self.categorical.ndim != 2 or self.categorical.shape[0] != n:
                raise ValueError(f"categorical must be [N, C], got {self.categorical.shape}")
            if len(self.categorical_names) != self.categorical.shape[1]:
                raise ValueError("categorical_names must name every categorical column")
            if len(self.categorical_cardinalities) != self.categorical.shape[1]:
                raise ValueError("categorical_cardinalities must give every categorical column's size")
        if self.feature_names and len(self.feature_names) != self.features.shape[1]:
            raise ValueError(
                f"feature_names has {len(self.feature_names)} names for {self.features.shape[1]} features"
            )

    # ------------------------------------------------------------------ sizes
    @property
    def n_queries(self) -> int:
        return int(self.query_ids.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def query_lengths(self) -> np.ndarray:
        """int64 [Q] number of items of each query."""
        return np.diff(self.query_offsets)

    @property
    def query_index(self) -> np.ndarray:
        """int64 [N] the query (0..Q-1) each row belongs to."""
        return np.repeat(np.arange(self.n_queries, dtype=np.int64), self.query_lengths)

    def query_slice(self, q: int) -> slice:
        return slice(int(self.query_offsets[q]), int(self.query_offsets[q + 1]))

    # ------------------------------------------------------------ derivations
    def with_features(self, features: np.ndarray, feature_names: Sequence[str] | None = None) -> RankingData:
        """A copy with another feature matrix (same rows), e.g. after a transform."""
        names = tuple(feature_names) if feature_names is not None else self.feature_names
        if names and len(names) != features.shape[1]:
            names = ()
        return replace(self, features=np.ascontiguousarray(features, dtype=np.float32), feature_names=names)

    def subset(self, queries: Sequence[int] | np.ndarray) -> RankingData:
        """The queries at the given positions (in the given order), rows kept contiguous per query."""
        queries = np.asarray(queries, dtype=np.int64)
        if queries.ndim != 1 or queries.size == 0:
            raise ValueError("subset needs a non-empty 1-d list of query positions")
        if queries.min() < 0 or queries.max() >= self.n_queries:
            raise ValueError(
                f"query positions must lie in [0, {self.n_queries}), got {queries.min()}..{queries.max()}"
            )
        rows = self.query_rows(queries)
        offsets = np.concatenate([[0], np.cumsum(self.query_lengths[queries])])
        return replace(
            self,
            features=self.features[rows],
            labels=self.labels[rows],
            query_ids=self.query_ids[queries],
            query_offsets=offsets.astype(np.int64),
            docids=None if self.docids is None else self.docids[rows],
            categorical=None if self.categorical is None else self.categorical[rows],
            info=dict(self.info),
            group_ids=None if self.group_ids is None else self.group_ids[queries],
        )

    def query_rows(self, queries: np.ndarray) -> np.ndarray:
        """int64 row indices of the given query positions, query after query (what ``subset`` keeps)."""
        queries = np.asarray(queries, dtype=np.int64)
        lengths = self.query_lengths[queries]
        starts = self.query_offsets[queries]
        # rows = concatenation of ranges [start, start + length) without a Python loop
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        return np.arange(offsets[-1]) - np.repeat(offsets[:-1] - starts, lengths)

    @staticmethod
    def concat(parts: Sequence[RankingData], source: str = "") -> RankingData:
        """Queries of several datasets one after the other (e.g. S1 + S2 + S3 = a training fold)."""
        if not parts:
            raise ValueError("concat needs at least one RankingData")
        f = {p.n_features for p in parts}
        if len(f) != 1:
            raise ValueError(f"cannot concatenate datasets with different feature counts {sorted(f)}")
        offsets = [np.asarray([0])]
        base = 0
        for p in parts:
            offsets.append(p.query_offsets[1:] + base)
            base += p.n_items
        has_docids = all(p.docids is not None for p in parts)
        has_cat = all(p.categorical is not None for p in parts)
        has_groups = all(p.group_ids is not None for p in parts)
        first = parts[0]
        info: dict = {}
        for p in parts:
            for k, v in p.info.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    info[k] = info.get(k, 0) + v
        return RankingData(
            features=np.concatenate([p.features for p in parts]),
            labels=np.concatenate([p.labels for p in parts]),
            query_ids=np.concatenate([p.query_ids for p in parts]),
            query_offsets=np.concatenate(offsets).astype(np.int64),
            docids=np.concatenate([p.docids for p in parts]) if has_docids else None,
            categorical=np.concatenate([p.categorical for p in parts]) if has_cat else None,
            feature_names=first.feature_names,
            categorical_names=first.categorical_names if has_cat else (),
            categorical_cardinalities=(
                tuple(max(c) for c in zip(*(p.categorical_cardinalities for p in parts), strict=True))
                if has_cat
                else ()
            ),
            source=source or "+".join(p.source for p in parts),
            info=info,
            group_ids=np.concatenate([p.group_ids for p in parts]) if has_groups else None,
        )

    def label_histogram(self) -> dict[float, int]:
        values, counts = np.unique(self.labels, return_counts=True)
        return {float(v): int(c) for v, c in zip(values, counts, strict=True)}

    def queries_without_relevant(self, threshold: float = 1.0) -> int:
        """Number of queries with no item of label >= threshold."""
        best = np.maximum.reduceat(self.labels, self.query_offsets[:-1])
        return int(np.sum(best < threshold))

    def __repr__(self) -> str:
        return (
            f"RankingData(source={self.source!r}, queries={self.n_queries}, items={self.n_items}, "
            f"features={self.n_features})"
        )
