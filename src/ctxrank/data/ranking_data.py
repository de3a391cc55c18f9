"""`RankingData`: the in-memory form of a learning-to-rank dataset.

Every query's rows are contiguous: query ``q`` owns rows ``query_offsets[q]:query_offsets[q + 1]``.
This is the contract every reader produces and every later stage (transforms, list batching,
LightGBM groups, metrics) relies on.

In-memory data: :meth:`RankingData.from_arrays` (NumPy arrays, any numeric dtype, rows in any order)
and :meth:`RankingData.from_frame` (a pandas DataFrame with query, label, numeric and categorical
columns); :func:`group_by_query` is the row grouping both use (stable: queries in order of first
appearance, rows in their order within a query).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ctxrank.data.categorical import CategoricalEncoder

__all__ = [
    "RankingData",
    "check_feature_count",
    "check_finite_rows",
    "feature_hash",
    "feature_hash_multipliers",
    "group_by_query",
    "missing_message",
    "order_by_score",
    "padded_rows",
    "text_label_error",
]


@dataclass(frozen=True, eq=False)
class RankingData:
    """A set of queries, each with a list of items (documents).

    Attributes:
        features: float32 (N, F) dense feature matrix, never inf; NaN only where a value is missing
            and was kept so (``null_fill = "keep"``, ``allow_missing=True``): only a model that reads
            missing values (LambdaMART) accepts it (:func:`missing_message`).
        labels: float32 (N,) graded relevance labels.
        query_ids: str (Q,) query identifiers, in file order.
        query_offsets: int64 [Q + 1]; query q owns rows ``query_offsets[q]:query_offsets[q+1]``.
        docids: str (N,) document identifiers (``#docid = ...`` comments), or None.
        categorical: int64 (N, C) integer codes of categorical columns (0 = reserved "unknown"), or None.
        feature_names: F names (``"f1".."fF"`` for LETOR files: the file's 1-based feature indices).
        categorical_names: C names of the categorical columns.
        categorical_cardinalities: C vocabulary sizes, each including the reserved code 0.
        source: where the data came from (a path or a dataset name), for messages.
        info: reader statistics, e.g. ``{"null_filled": 12}``.
        group_ids: str (Q,) the group (decision maker, user) each query belongs to, or None. Several
            queries of one person share a group id; ``ctxrank.data.split`` can split by group so that
            no person is both in the training and the test split.
        shown_positions: int32 (N,) the 1-based position at which each item was shown, for an interaction
            log (one query = one logged session, its label = the interaction); None for labelled data.
            The learners from clicks (``ctxrank.clicks``) turn positions into propensity weights or a
            position tower; no model reads them as a feature and the served model takes none.
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
    shown_positions: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = self.labels.shape[0]
        if self.features.ndim != 2 or self.features.shape[0] != n:
            raise ValueError(f"features must be (N, F) with N = {n} labels, got shape {self.features.shape}")
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
        if self.shown_positions is not None:
            if self.shown_positions.shape != (n,) or self.shown_positions.dtype != np.int32:
                raise ValueError(
                    f"shown_positions must be int32 with N = {n} entries, got {self.shown_positions.dtype} "
                    f"{self.shown_positions.shape}"
                )
            if n and int(self.shown_positions.min()) < 1:
                raise ValueError(f"shown_positions are 1-based, got {int(self.shown_positions.min())}")
        if self.docids is not None and self.docids.shape != (n,):
            raise ValueError(f"docids must have N = {n} entries, got {self.docids.shape}")
        if self.categorical is not None:
            if self.categorical.ndim != 2 or self.categorical.shape[0] != n:
                raise ValueError(f"categorical must be (N, C), got {self.categorical.shape}")
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
        """int64 (Q,) number of items of each query."""
        return np.diff(self.query_offsets)

    @property
    def query_index(self) -> np.ndarray:
        """int64 (N,) the query (0..Q-1) each row belongs to."""
        return np.repeat(np.arange(self.n_queries, dtype=np.int64), self.query_lengths)

    def query_slice(self, q: int) -> slice:
        return slice(int(self.query_offsets[q]), int(self.query_offsets[q + 1]))

    # ----------------------------------------------------------- constructors
    @classmethod
    def from_arrays(
        cls,
        X: Any,
        y: Any = None,
        qid: Any = None,
        *,
        group: Any = None,
        feature_names: Sequence[str] = (),
        categorical: Any = None,
        categorical_names: Sequence[str] = (),
        categorical_cardinalities: Sequence[int] = (),
        source: str = "arrays",
        allow_missing: bool = False,
        position: Any = None,
    ) -> RankingData:
        """A RankingData from NumPy arrays; rows need not be grouped by query (they are, stably).

        Args:
            X: (N, F) numbers of any real dtype (converted to float32; NaN / inf / values beyond float32
                are refused, naming the row; with ``allow_missing`` a NaN is kept as a missing value).
            y: (N,) graded labels (ints or floats); None = no labels (data to score: all 0).
            qid: (N,) query id of each row (ints or strings). Or ``group``: the sizes of consecutive
                queries (LightGBM's ``group``), summing to N. Exactly one of the two.
            categorical: (N, C) int codes (0 = unknown) with ``categorical_names`` and
                ``categorical_cardinalities`` (see ``CategoricalEncoder``), or None.
            position: (N,) the 1-based position each item was shown at (an interaction log, where
                ``y`` holds the interactions and ``qid`` the sessions), or None.

        Raises:
            ValueError: naming the argument: shapes or lengths that differ, non-finite values, both or
                neither of ``qid`` / ``group``, group sizes that do not sum to N.
        """
        features = _as_matrix(X, "X", allow_missing)
        n = features.shape[0]
        labels = np.zeros(n, np.float32) if y is None else _as_vector(y, n, "y")
        qid = query_ids_of(n, qid, group)
        uniques, offsets, order = group_by_query(qid)
        codes = None
        if categorical is not None:
            codes = np.asarray(categorical, dtype=np.int64)
            if codes.ndim != 2 or codes.shape[0] != n:
                raise ValueError(f"categorical: expected ({n}, C) codes, got shape {codes.shape}")
        positions = None if position is None else _as_positions(position, n)
        if order is not None:
            features, labels = features[order], labels[order]
            codes = None if codes is None else codes[order]
            positions = None if positions is None else positions[order]
        return cls(
            features=np.ascontiguousarray(features),
            labels=labels,
            query_ids=uniques,
            query_offsets=offsets,
            categorical=codes,
            feature_names=tuple(str(c) for c in feature_names),
            categorical_names=tuple(categorical_names),
            categorical_cardinalities=tuple(int(c) for c in categorical_cardinalities),
            source=source,
            info={"regrouped": int(order is not None)},
            shown_positions=positions,
        )

    @classmethod
    def from_frame(
        cls,
        df: Any,
        *,
        query: str,
        label: str | None = None,
        categorical: Sequence[str] | None = None,
        numeric: Sequence[str] | None = None,
        encoder: Any = None,
        allow_missing: bool = False,
    ) -> RankingData:
        """A RankingData from a pandas DataFrame with one row per (query, item), in any row order
        (``allow_missing``: a missing numeric value, NaN / None / NA, is kept as NaN).

        Args:
            query: the query-id column. label: the label column (None: data to score, labels 0).
            categorical: columns encoded to integer codes (learned embeddings in the neural models,
                LightGBM categorical features in LambdaMART); None = every other column whose dtype
                is ``category``, ``object``, ``string`` or ``bool``.
            numeric: the numeric feature columns in order; None = every remaining column.
            encoder: a fitted ``CategoricalEncoder`` (the training one: unseen categories get code 0),
                or None / an unfitted one to fit here (kept in ``info["categorical_encoder"]``).

        Raises:
            ValueError: absent or repeated columns, a numeric column that is not numeric, NaN / inf
                (naming the column and row), a missing query id or label (naming the column and row),
                a label column holding text (naming a few values and how to map them to numbers), an
                encoder fitted on other columns.
        """
        numeric, categorical = frame_columns(df, query, label, categorical, numeric)
        qid = _frame_query_ids(df, query)
        labels = None if label is None else _frame_labels(df, label)
        features = _frame_numeric(df, numeric, allow_missing)
        codes, cards = None, ()
        enc = encoder if encoder is not None else CategoricalEncoder()
        if categorical:
            if enc.is_fitted and set(enc.columns_) != set(categorical):
                raise ValueError(
                    f"categorical: the encoder was fitted on {list(enc.columns_)}, got {list(categorical)}"
                )
            cols = {c: df[c] for c in categorical}
            codes = (enc if enc.is_fitted else enc.fit(cols)).transform(cols)
            categorical, cards = tuple(enc.columns_), enc.cardinalities_
        data = cls.from_arrays(
            features,
            labels,
            qid,
            feature_names=numeric,
            categorical=codes,
            categorical_names=categorical,
            categorical_cardinalities=cards,
            source="DataFrame",
            allow_missing=allow_missing,
        )
        if categorical:
            data.info["categorical_encoder"] = enc.to_dict()
        return data

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
            query_ids=self.query_ids[queries],
            query_offsets=offsets.astype(np.int64),
            info=dict(self.info),
            group_ids=None if self.group_ids is None else self.group_ids[queries],
            **self.row_fields(rows),
        )

    def row_fields(self, rows: np.ndarray) -> dict[str, np.ndarray | None]:
        """Every per-row field but ``features`` (labels, docids, categorical codes, shown positions)
        at ``rows``: the one list of what moves with a row, for ``replace`` by whoever reorders,
        filters or truncates rows."""
        return {
            "labels": self.labels[rows],
            "docids": None if self.docids is None else self.docids[rows],
            "categorical": None if self.categorical is None else self.categorical[rows],
            "shown_positions": None if self.shown_positions is None else self.shown_positions[rows],
        }

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
        has_positions = {p.shown_positions is not None for p in parts}
        if len(has_positions) > 1:
            raise ValueError("cannot concatenate an interaction log (with positions) and labelled data")
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
            shown_positions=(
                np.concatenate([p.shown_positions for p in parts]) if True in has_positions else None
            ),
        )

    def to_frame(self, *, query: str = "qid", label: str = "label", docid: str = "docid") -> Any:
        """A pandas DataFrame, one row per item in this data's row order: the query id, the label, the
        docid (when known), the features by name and the categorical codes (the inverse of
        :meth:`from_frame` up to the categorical encoding; ``RankingData.from_frame(df, query=query,
        label=label, numeric=..., categorical=...)`` reads it back).

        Raises:
            ValueError: a feature or categorical name equal to one of the key columns' names.
        """
        import pandas as pd

        names = list(self.feature_names) or [f"f{i}" for i in range(1, self.n_features + 1)]
        keys = [query, label] + ([docid] if self.docids is not None else [])
        clash = sorted(set(keys) & set(names + list(self.categorical_names)))
        if clash:
            raise ValueError(f"to_frame: {clash} name both a key column and a feature; pass other names")
        columns: dict[str, Any] = {
            query: np.repeat(self.query_ids, self.query_lengths),
            label: self.labels,
        }
        if self.docids is not None:
            columns[docid] = self.docids
        columns.update({name: self.features[:, j] for j, name in enumerate(names)})
        if self.categorical is not None:
            columns.update({name: self.categorical[:, j] for j, name in enumerate(self.categorical_names)})
        return pd.DataFrame(columns)

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


# ------------------------------------------------------------------------------- array helpers
_TIE_SEED = 0x6374787261  # fixed: the tie rule is part of the data's meaning, not a run's randomness


def feature_hash_multipliers(n_features: int) -> np.ndarray:
    """uint64 (F,) the odd constants of the tie rule's hash (:func:`feature_hash`), drawn once from a
    fixed seed; the exported re-ranking pipeline (``ctxrank.export.pipeline``) stores them."""
    draws = np.random.default_rng(_TIE_SEED).integers(1, 2**63, size=n_features, dtype=np.uint64)
    return draws | np.uint64(1)


def feature_hash(features: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """uint64 (n,) a fixed hash of each row's float32 feature bits (sum of bits x odd constants mod 2^64,
    the constants drawn once from a fixed seed); equal rows hash equally, wherever they are. ``rows``:
    hash only these rows of ``features`` (gathered a block at a time, not copied all at once)."""
    f = features.shape[1]
    rows = np.arange(features.shape[0]) if rows is None else np.asarray(rows)
    mult = feature_hash_multipliers(f)
    h = np.zeros(rows.size, dtype=np.uint64)
    step = max(1, (1 << 19) // max(f, 1))  # row blocks bound the gathered rows and the uint64 temporary
    for r0 in range(0, rows.size, step):
        bits = np.ascontiguousarray(features[rows[r0 : r0 + step]], dtype=np.float32).view(np.uint32)
        for c0 in range(0, f, 64):  # column blocks too
            block = bits[:, c0 : c0 + 64].astype(np.uint64) * mult[c0 : c0 + 64]
            h[r0 : r0 + step] += block.sum(axis=1, dtype=np.uint64)
    return h


def order_by_score(query_index: np.ndarray, scores: np.ndarray, features: np.ndarray) -> np.ndarray:
    """int64 (N,) rows grouped by ``query_index`` (ascending), each query by descending ``scores``.

    **Tie rule** (independent of file position): items of a query with equal scores are ordered by a
    fixed hash of their float32 feature values (:func:`feature_hash`), then, only for items whose
    features are identical too (interchangeable for any model that reads features), by position. Only
    the rows involved in a tie are hashed. The re-ranking protocol's initial order, its top-k cut, the
    exported pipeline graph and the server's rankings all order by this rule.
    """
    s = np.asarray(scores, dtype=np.float64)
    position = np.arange(s.size, dtype=np.int64)
    order = np.lexsort((position, -s, query_index))
    same = (query_index[order][1:] == query_index[order][:-1]) & (s[order][1:] == s[order][:-1])
    if not same.any():
        return order
    tied = np.zeros(s.size, dtype=bool)
    tied[order[1:][same]] = True
    tied[order[:-1][same]] = True
    key = np.zeros(s.size, dtype=np.uint64)
    key[tied] = feature_hash(features, np.flatnonzero(tied))
    return np.lexsort((position, key, -s, query_index))


def group_by_query(qid: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Queries in order of first appearance: ``(query ids str (Q,), offsets int64 (Q + 1,), order)``,
    where ``order`` int64 (N,) gathers each query's rows stably (``rows[order]`` is grouped), or None
    when the rows are grouped already."""
    import pandas as pd

    codes, uniques = pd.factorize(np.asarray(qid), sort=False)
    codes = codes.astype(np.int64)
    if codes.size and codes.min() < 0:  # factorize's code of a missing value (None, NaN, NA)
        missing = codes < 0
        raise ValueError(
            f"qid: row {int(np.argmax(missing))} has a missing query id (None, NaN or NA; "
            f"{int(missing.sum())} row(s) in all); every row needs one"
        )
    order = None
    if codes.size > 1 and np.any(codes[1:] < codes[:-1]):
        order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=len(uniques))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return np.asarray(uniques, dtype=object).astype(str), offsets, order


def padded_rows(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """int64 (B, L) row indices of B lists padded to L = ``max(lengths)``: list b holds rows
    ``starts[b] + j`` for ``j < lengths[b]`` (real items first), -1 after (padding). The one padding
    layout of ``ctxrank.data.lists`` (training batches) and ``ctxrank.serving.padding`` (serving)."""
    starts, lengths = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    width = int(lengths.max()) if lengths.size else 0
    col = np.arange(width, dtype=np.int64)
    rows = starts[:, None] + col[None, :]  # (B, L)
    return np.where(col[None, :] < lengths[:, None], rows, -1)


def query_ids_of(n: int, qid: Any, group: Any) -> np.ndarray:
    """The (N,) query id of each of ``n`` rows from ``qid`` (ids) or ``group`` (consecutive sizes)."""
    if (qid is None) == (group is None):
        raise ValueError(
            "qid: give the query id of every row (qid=...) or the query sizes (group=...), exactly one"
        )
    if qid is not None:
        ids = np.asarray(qid)
        if ids.ndim != 1 or ids.shape[0] != n:
            raise ValueError(f"qid: expected {n} query ids (one per row of X), got shape {ids.shape}")
        if ids.dtype.kind == "f" and not np.isfinite(ids).all():
            raise ValueError(f"qid: row {int(np.argmin(np.isfinite(ids)))} has a missing query id")
        return ids  # a None / NaN / NA among other ids: group_by_query names its row
    sizes = np.asarray(group)
    if sizes.ndim != 1 or sizes.dtype.kind not in "iu" or (sizes < 1).any() or int(sizes.sum()) != n:
        raise ValueError(
            f"group: expected positive integer query sizes summing to {n} rows (X), got {group!r}"
        )
    return np.repeat(np.arange(sizes.size), sizes)


def require_ranking_data(data: Any, what: str = "data") -> RankingData:
    """``data`` when it is a :class:`RankingData`; else a TypeError (the one message of every model
    object that scores RankingData, e.g. what ``ctxrank.load_model`` returns), which tells a caller with
    a DataFrame or arrays what takes them."""
    if isinstance(data, RankingData):
        return data
    hint = ""
    if hasattr(data, "columns") or hasattr(data, "shape") or isinstance(data, list | tuple):
        hint = (
            ": a DataFrame or arrays are scored by an estimator (ctxrank.QILCMRanker(...), "
            "ctxrank.LambdaMARTRanker(...)) or by a model directory loaded with ctxrank.api.load(PATH), "
            "which read them as fit did; or read a table with ctxrank.read_table first"
        )
    raise TypeError(f"{what} must be a RankingData, got {type(data).__name__}{hint}")


def check_feature_count(data: RankingData, n_features: int) -> None:
    """A model trained on ``n_features`` features refuses ``data`` of another width, saying how to
    give it the training layout (the one message of every model)."""
    require_ranking_data(data)
    if data.n_features == n_features:
        return
    raise ValueError(
        f"the model was trained on {n_features} features but {data.source or 'the data'} has "
        f"{data.n_features}: score data with the training feature layout (the same columns in the same "
        "order: a table is read with the table spec saved with the model, so give the model directory, "
        "e.g. `ctxrank predict --model DIR`, and no column options; a LETOR file needs the same feature "
        "indices)"
    )


def missing_message(data: RankingData, reader: str, fix: str) -> str | None:
    """Why ``reader`` cannot use ``data``: its NaN cells (missing values), the first one named, and
    ``fix``; None when there is none."""
    if data.features.size == 0 or not np.isnan(data.features.min()):  # NaN propagates; no (N, F) mask
        return None
    nan = np.isnan(data.features)
    r, c = np.argwhere(nan)[0]
    name = (data.feature_names[c] if data.feature_names else "") or f"column {c}"
    return (
        f"{data.source or 'data'}: {int(nan.sum()):,} missing feature value(s) (NaN; first: feature {name} "
        f"of row {int(r)}); {reader}: {fix}"
    )


def check_finite_rows(values: np.ndarray, name: str) -> None:
    """ValueError naming ``name`` and the first row with a NaN or infinite value."""
    bad = ~np.isfinite(values)
    if bad.any():
        rows = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1))
        col = f", column {int(np.argmax(bad[rows[0]]))}" if values.ndim == 2 else ""
        raise ValueError(
            f"{name}: row {int(rows[0])}{col} is NaN or infinite (or beyond float32) "
            f"({rows.size} row(s) in all); clean or impute it first"
        )


def _as_matrix(X: Any, name: str, allow_missing: bool = False) -> np.ndarray:
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not a numeric array ({exc})") from None
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-d array (rows, features), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name}: needs at least one row and one feature, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(arr, dtype=np.float32)
    check_finite_rows(np.where(np.isnan(out), np.float32(0), out) if allow_missing else out, name)
    return out


def _as_positions(position: Any, n: int) -> np.ndarray:
    """int32 (N,) 1-based shown positions: whole numbers >= 1, one per row."""
    values = np.asarray(position)
    if values.shape != (n,):
        raise ValueError(f"position: expected {n} values (one per row), got shape {values.shape}")
    if values.dtype.kind not in "iuf" or (values.dtype.kind == "f" and not np.all(np.isfinite(values))):
        raise ValueError(f"position: expected whole numbers >= 1, got dtype {values.dtype}")
    whole = values.astype(np.int64)
    bad = np.flatnonzero((whole != values) | (whole < 1) | (whole > np.iinfo(np.int32).max))
    if bad.size:
        row = int(bad[0])
        raise ValueError(f"position: expected whole numbers >= 1, got {values[row]!r} at row {row}")
    return whole.astype(np.int32)


def _as_vector(y: Any, n: int, name: str) -> np.ndarray:
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name}: expected {n} values (one per row of X), got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected numbers, got dtype {arr.dtype}")
    out = arr.astype(np.float32)
    check_finite_rows(out, name)
    return out


def frame_columns(
    df: Any,
    query: str | None,
    label: str | None,
    categorical: Sequence[str] | None,
    numeric: Sequence[str] | None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(numeric, categorical)`` column names of a DataFrame (see :meth:`RankingData.from_frame`)."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(df).__name__}")
    columns = [str(c) for c in df.columns]
    if len(set(columns)) != len(columns):
        raise ValueError("the DataFrame has repeated column names")
    special = [c for c in (query, label) if c is not None]
    for what, names in (
        ("query/label", special),
        ("categorical", categorical or ()),
        ("numeric", numeric or ()),
    ):
        absent = [c for c in names if c not in columns]
        if absent:
            raise ValueError(f"{what}: no column(s) {absent} in the DataFrame; it has {columns[:40]}")
    rest = [c for c in columns if c not in special]
    if categorical is None:
        categorical = [c for c in rest if _is_categorical_dtype(df[c].dtype) and c not in (numeric or ())]
    if numeric is None:
        numeric = [c for c in rest if c not in set(categorical)]
    clash = sorted((set(numeric) & set(categorical)) | (set(special) & (set(numeric) | set(categorical))))
    if clash:
        raise ValueError(f"categorical: columns {clash} are given more than one role")
    return tuple(numeric), tuple(categorical)


def _is_categorical_dtype(dtype: Any) -> bool:
    import pandas as pd

    return (
        isinstance(dtype, pd.CategoricalDtype)
        or pd.api.types.is_object_dtype(dtype)
        or pd.api.types.is_bool_dtype(dtype)
        or pd.api.types.is_string_dtype(dtype)
    )


def _index(df: Any, i: int) -> str:
    """The index label of row ``i`` as the user wrote it (``12``, ``'a'``; not ``np.int64(12)``)."""
    return repr(df.index[i : i + 1].tolist()[0])


def _frame_query_ids(df: Any, query: str) -> np.ndarray:
    """object (N,) the query id of each row as text; a missing one (None, NaN, NA) is an error."""
    column = df[query]
    missing = column.isna().to_numpy()
    if missing.any():
        i = int(np.argmax(missing))
        raise ValueError(
            f"query column {query!r}: row {i} (index {_index(df, i)}) has no query id (None, NaN or NA; "
            f"{int(missing.sum())} row(s) in all); every row needs one"
        )
    return column.astype(str).to_numpy(dtype=object)


def _frame_labels(df: Any, label: str) -> np.ndarray:
    """float64 (N,) labels of a DataFrame column: numbers (text that spells numbers is read as them);
    text, or a missing label, is an error naming the column (and the row)."""
    import pandas as pd

    column = df[label]
    if not (pd.api.types.is_numeric_dtype(column.dtype) or pd.api.types.is_bool_dtype(column.dtype)):
        cells = column.astype(object)
        numbers = pd.to_numeric(cells, errors="coerce")
        text = (numbers.isna() & cells.notna()).to_numpy()
        if text.any():
            how = f"map {{what}} to {{to}} first: df[{label!r}] = df[{label!r}].map({{mapping}})"
            raise text_label_error(f"label column {label!r}", cells[text].astype(str).unique(), how)
        column = numbers
    values = column.to_numpy(dtype=np.float64, na_value=np.nan)
    missing = np.isnan(values)
    if missing.any():
        i = int(np.argmax(missing))
        raise ValueError(
            f"label column {label!r}: row {i} (index {_index(df, i)}) has no label (None, NaN or NA; "
            f"{int(missing.sum())} row(s) in all); every row needs one"
        )
    return values


#: text labels of a choice: what a yes/no column maps to (``text_label_error``'s example)
_CHOICE_WORDS = {"yes": 1, "y": 1, "true": 1, "t": 1, "chosen": 1, "no": 0, "n": 0, "false": 0, "f": 0}


def text_label_error(where: str, values: Sequence[str], how: str) -> ValueError:
    """The error of a label column holding text: ``where`` (e.g. ``"label column 'y'"``), a few of
    its distinct text ``values``, and ``how`` to map them to numbers: a template formatted with ``what``,
    ``to`` and ``mapping`` (a dict literal: 1 / 0 for a yes/no choice column, else ``<grade>`` each),
    e.g. ``"map {what} to {to} first: df['y'] = df['y'].map({mapping})"``."""
    distinct = sorted({str(v) for v in values})
    shown = ", ".join(repr(v) for v in distinct[:5]) + (", ..." if len(distinct) > 5 else "")
    grades = {v: _CHOICE_WORDS.get(v.strip().lower()) for v in distinct}
    if None in grades.values():
        pairs = [f"{v!r}: <grade>" for v in distinct[:3]] + (["..."] if distinct[3:] else [])
        what, to = "each value", "its grade"
    else:  # a yes/no choice column
        pairs = [f"{v!r}: {g}" for v, g in sorted(grades.items(), key=lambda x: -x[1])]  # type: ignore[arg-type,return-value]
        what, to = "them", "1 (chosen) and 0"
    fix = how.format(what=what, to=to, mapping="{" + ", ".join(pairs) + "}")
    return ValueError(
        f"{where} holds text ({shown}): labels must be numbers: relevance grades (0, 1, 2, ...; higher = "
        f"more relevant) or 1/0 for a choice (chosen / not chosen); {fix}"
    )


def _frame_numeric(df: Any, numeric: Sequence[str], allow_missing: bool = False) -> np.ndarray:
    """float32 (N, F) numeric columns; ValueError naming a non-numeric column."""
    import pandas as pd

    out = np.empty((len(df), len(numeric)), dtype=np.float32)
    for j, col in enumerate(numeric):
        s = df[col]
        if not (pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype)):
            raise ValueError(
                f"X: column {col!r} has dtype {s.dtype}, not numbers; name it in categorical_features "
                "to embed it"
            )
        with np.errstate(over="ignore"):
            out[:, j] = s.to_numpy(dtype=np.float32, na_value=np.nan)
    bad = np.isinf(out) if allow_missing else ~np.isfinite(out)
    if bad.any():
        rows, cols = np.nonzero(bad)
        raise ValueError(
            f"X: row {int(rows[0])} (index {_index(df, int(rows[0]))}), column {numeric[cols[0]]!r} is NaN, "
            f"missing or infinite ({np.unique(rows).size} row(s) in all); clean or impute it first"
        )
    return out
