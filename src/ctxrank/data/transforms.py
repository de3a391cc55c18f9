"""Feature normalizers: fitted on the training split only, applied to any split.

The API follows scikit-learn: ``fit(data) -> self`` learns statistics from a :class:`RankingData`,
``transform(data) -> RankingData`` returns a copy with normalized ``features`` (float32 (N, F));
learned attributes end with ``_``. ``to_dict()`` / ``Transform.from_dict()`` give a JSON-safe form
(plain lists of floats, no pickle) so a saved model can carry its normalizer.

Normalizers (``TRANSFORMS`` registry name in brackets):

* :class:`Identity` (``"none"``): features unchanged.
* :class:`GlobalMinMax` (``"minmax"``): ``(x - min) / (max - min)`` with min and max over the training
  rows, as in the QILCM paper; values outside the training range are clipped to [0, 1] by default.
* :class:`QueryMinMax` (``"query-minmax"``): LETOR's "QueryLevelNorm", the same formula with min and
  max taken within each query (stateless: nothing is learned, every split is normalized by itself).
* :class:`ZScore` (``"zscore"``): ``(x - mean) / std`` with the training mean and population std.
* :class:`Log1pZScore` (``"log1p-zscore"``): z-score of ``sign(x) * log1p(|x|)``, for heavy-tailed
  count-like features (e.g. MSLR-WEB's BM25 and link counts): the log1p input transformation of DASALC
  (Qin et al. 2021, ICLR: ``log_e(1 + |x|) (.) sign(x)`` of the raw features), then standardized as the
  authors' code does with a batch norm (DASALC's default, ``ctxrank.models.dasalc``).
* :class:`ZScoreLog1p` (``"zscore-log1p"``): ``sign(z) * log1p(|z|)`` of the training z-score ``z``: the
  same signed log1p applied after standardization instead (not DASALC's order).
* :class:`QueryZScore` (``"query-zscore"``): per-query standardization, ``(x - mean_q) / std_q`` with the
  mean and population std within each query (stateless, like ``query-minmax``).

Streaming fit (data larger than memory, :mod:`ctxrank.data.stream`): :meth:`Transform.fit_stream` learns
the same statistics as ``fit`` of the concatenated chunks in ONE pass, holding one chunk at a time: a
running min / max (``minmax``: exactly ``fit``'s), or per feature a running count, mean and sum of squared
deviations merged chunk by chunk with Chan, Golub & LeVeque's pairwise update (the z-scores: ``fit``'s
within float64 rounding; ``fit`` itself makes two passes). The per-chunk statistics are mergeable, so
data-parallel ranks each read their own shards and merge what they found (``merge``). The per-query
normalizers learn nothing and only record the feature count.

Guards shared by all of them:

* A feature that is constant (zero range, zero std) on the data it was fitted on maps to 0 everywhere;
  nothing ever divides by zero. "Constant" is decided exactly (``max == min``), not with a tolerance.
* Arithmetic is done in float64, in blocks of rows to bound memory, and the float32 result is clipped
  to the finite float32 range: every finite input gives a finite output (never NaN or inf).
* An inf in the input is an error (``ValueError``), never hidden. A NaN is a missing value (kept by
  ``null_fill = "keep"``, for ``train.missing = "indicator"``): the global normalizers fit on the values
  present and pass NaN through, for the model to fill (:mod:`ctxrank.models.missing`); the per-query
  ones refuse it (a list's statistics would depend on which items are missing).
* Only ``features`` change: labels, categorical codes, docids, offsets are shared with the input.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from functools import reduce
from typing import Any, ClassVar

import numpy as np

from ctxrank.data.gathered import is_gathered
from ctxrank.data.ranking_data import RankingData

__all__ = [
    "TRANSFORMS",
    "GlobalMinMax",
    "Identity",
    "Log1pZScore",
    "QueryMinMax",
    "QueryZScore",
    "Transform",
    "ZScore",
    "ZScoreLog1p",
    "make_transform",
]

_F32_MAX = float(np.finfo(np.float32).max)
_BLOCK_ELEMENTS = 1 << 22  # about 32 MB of float64 per block of rows


def _row_step(n_features: int) -> int:
    return max(1, _BLOCK_ELEMENTS // max(n_features, 1))


def _signed_log1p(x: Any, xp: Any = np) -> Any:
    """``sign(x) * log1p(|x|)``: odd, monotone, identity near 0, logarithmic for large |x|."""
    return xp.sign(x) * xp.log1p(xp.abs(x))


# The equations below are written once for both array libraries: ``xp`` is ``numpy`` (``transform``)
# or ``torch`` (the exported graph, ctxrank.export); only functions both spell alike are used.
def _affine_map(x: Any, shift: Any, scale: Any, lo: float, hi: float, log: bool, xp: Any) -> Any:
    """``clip((g(x) - shift) * scale, lo, hi)``, ``g`` = :func:`_signed_log1p` if ``log`` else identity;
    float64 ``x`` (..., F) with ``shift``, ``scale`` broadcasting to it."""
    if log:
        x = _signed_log1p(x, xp)
    return xp.clip((x - shift) * scale, lo, hi)


def _inverse(divisor: Any, xp: Any) -> Any:
    """``1 / divisor`` where ``divisor > 0``, else 0 (a constant feature maps to 0; no division by 0)."""
    nonconst = divisor > 0
    return xp.where(nonconst, 1.0 / xp.where(nonconst, divisor, 1.0), 0.0)


def _minmax_map(x: Any, lo: Any, scale: Any, xp: Any) -> Any:
    """Query-level min-max: ``clip((x - lo) * scale, 0, 1)`` with ``scale = _inverse(max - min)``;
    exactly 0 where ``scale`` is 0 (a feature constant in the query, or a list with no real item,
    whose infinite ``lo`` must not enter)."""
    return _affine_map(x, xp.where(scale > 0, lo, x), scale, 0.0, 1.0, False, xp)


def _check_finite(block: np.ndarray, start: int | None, data: RankingData, *, missing: bool = True) -> None:
    """No inf in ``block`` (rows ``start`` ..., None: rows read out of order); no NaN either unless
    ``missing`` (a missing value)."""
    bad = np.isinf(block) if missing else ~np.isfinite(block)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        name = data.feature_names[c] if data.feature_names else f"column {c}"
        nan = np.isnan(block[r, c])
        what = "a per-query normalizer reads no missing value (NaN)" if nan else "features must be finite"
        row = "a row" if start is None else f"row {start + r}"
        where = f"{data.source or 'data'}: feature {name} of {row}"
        raise ValueError(f"{where} is {block[r, c]}; {what}")


def _blocks(data: RankingData, *, missing: bool = True) -> Iterator[np.ndarray]:
    """The feature rows of ``data`` in blocks of :func:`_row_step` rows, each checked by
    :func:`_check_finite` before it is yielded."""
    x = data.features
    step = _row_step(x.shape[1])
    for a in range(0, x.shape[0], step):
        _check_finite(x[a : a + step], a, data, missing=missing)
        yield x[a : a + step]


class Transform:
    """Base class of the feature normalizers (see the module docstring).

    Subclasses set ``name`` (the registry key), may set ``stateless = True`` (nothing learned: usable
    without ``fit``), and implement ``_apply`` and the streaming statistics (``_stream_*``) that
    ``_fit_state`` fits from.

    Attributes (after ``fit``):
        n_features_in_: F, the feature count seen by ``fit``; ``transform`` requires the same.
        feature_names_in_: the feature names seen by ``fit`` (may be empty); ``transform`` rejects
            data whose names are non-empty and differ.
    """

    name: ClassVar[str] = ""
    stateless: ClassVar[bool] = False
    _state_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.n_features_in_: int | None = None
        self.feature_names_in_: tuple[str, ...] = ()

    # ---------------------------------------------------------------------------------- public
    @property
    def is_fitted(self) -> bool:
        return self.n_features_in_ is not None

    def fit(self, data: RankingData) -> Transform:
        """Learn the statistics from ``data`` (the training split). Returns self."""
        if data.n_items == 0:
            raise ValueError(f"cannot fit {type(self).__name__} on data without rows")
        self._fit_state(data)
        self.n_features_in_ = data.n_features
        self.feature_names_in_ = tuple(data.feature_names)
        return self

    def transform(self, data: RankingData, *, in_place: bool = False) -> RankingData:
        """A copy of ``data`` with normalized features (float32 (N, F)); other fields shared.

        ``in_place``: write the normalized values over ``data.features`` (no second (N, F) array; the
        same numbers), for data the caller owns and no longer needs raw, e.g. the top-k lists a
        re-ranking run cuts for itself; ``data`` then holds the normalized features too.

        Raises:
            ValueError: not fitted (unless stateless), a feature count or names other than at fit
                time, or a non-finite feature value.
        """
        if self.is_fitted:
            if data.n_features != self.n_features_in_:
                raise ValueError(
                    f"{type(self).__name__} was fitted on {self.n_features_in_} features, "
                    f"got data with {data.n_features}"
                )
            fitted, given = self.feature_names_in_ or (), data.feature_names or ()
            differ = [  # "" = an unnamed feature (fitted on arrays): its position is its name
                i for i, (a, b) in enumerate(zip(fitted, given, strict=False)) if a and b and a != b
            ]
            if differ:
                diff = differ[0]
                raise ValueError(
                    f"{type(self).__name__} was fitted on other features: feature {diff} is "
                    f"{data.feature_names[diff]!r}, expected {self.feature_names_in_[diff]!r}"
                )
        elif not self.stateless:
            raise ValueError(f"{type(self).__name__} is not fitted: call fit(train) first")
        x = data.features
        if is_gathered(x):  # rows gathered when read: a row-wise map goes with them, nothing is copied
            if self.row_wise and x.normalize is None:
                return replace(data, features=x.with_normalize(functools.partial(self._map_rows, data=data)))
            x, in_place = np.asarray(x), True  # a per-query normalizer reads whole lists: the copy
            data = replace(data, features=x)
        writable = in_place and x.flags.c_contiguous and x.flags.writeable
        return data.with_features(self._apply(data, x if writable else np.empty(x.shape, np.float32)))

    def fit_stream(
        self,
        chunks: Iterable[RankingData],
        *,
        merge: Callable[[np.ndarray], Sequence[np.ndarray]] | None = None,
    ) -> Transform:
        """Learn :meth:`fit`'s statistics from ``chunks`` (whole queries each; together the training
        split) in one pass, holding one chunk at a time (module docstring). Returns self.

        Args:
            chunks: RankingData pieces of the same features (count and names).
            merge: for data-parallel ranks, each with its own chunks: ``merge(v)`` returns every rank's
                float64 vector ``v`` of this rank's statistics, in rank order (an all-gather); the
                statistics of all ranks are combined so every rank fits the same transform.

        Raises:
            ValueError: no rows, chunks whose features differ, an inf (or a NaN for a per-query one).
        """
        acc, names, n_features = None, (), 0
        for chunk in chunks:
            if acc is None:
                n_features, names = chunk.n_features, tuple(chunk.feature_names)
                acc = self._stream_start(n_features)
            elif chunk.n_features != n_features or (names and chunk.feature_names not in ((), names)):
                raise ValueError(
                    f"{chunk.source or 'a chunk'}: {chunk.n_features} features "
                    f"{tuple(chunk.feature_names)[:5]}..., but the first chunk has {n_features} "
                    f"({names[:5]}...): every chunk needs the same features"
                )
            if chunk.n_items:
                acc = self._stream_add(acc, chunk)
        if acc is None:
            raise ValueError(f"cannot fit {type(self).__name__} on a stream without rows")
        if merge is not None:
            acc = reduce(self._stream_merge, [np.asarray(v, dtype=np.float64) for v in merge(acc)])
        self._stream_finish(acc)
        self.n_features_in_ = n_features
        self.feature_names_in_ = names
        return self

    def fit_transform(self, data: RankingData) -> RankingData:
        """``fit(data)`` then ``transform(data)``."""
        return self.fit(data).transform(data)

    def get_params(self) -> dict[str, Any]:
        """Constructor arguments (JSON-safe)."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe description: ``{"name", "params", "n_features_in", "feature_names_in", "state"}``.

        ``state`` maps each learned array attribute (e.g. ``"min_"``) to a list of floats, or is None
        when not fitted. Floats survive ``json.dumps``/``json.loads`` exactly.
        """
        state = None
        if self.is_fitted:
            state = {k: [float(v) for v in getattr(self, k)] for k in self._state_names}
        return {
            "name": self.name,
            "params": self.get_params(),
            "n_features_in": self.n_features_in_,
            "feature_names_in": list(self.feature_names_in_),
            "state": state,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Transform:
        """Rebuild a transform from :meth:`to_dict` output.

        Called on ``Transform`` it dispatches on ``d["name"]``; called on a subclass the name must
        match that subclass.
        """
        if not isinstance(d, dict) or "name" not in d:
            raise ValueError(f"expected a dict from Transform.to_dict(), got {type(d).__name__}")
        obj = make_transform(d["name"], **d.get("params", {}))
        klass = type(obj)
        if cls is not Transform and klass is not cls:
            raise ValueError(f"{cls.__name__}.from_dict got a dict for {klass.__name__} ({d['name']!r})")
        if d.get("state") is not None:
            n = d.get("n_features_in")
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"n_features_in must be an integer >= 0, got {n!r}")
            state = d.get("state") or {}
            for k in klass._state_names:
                if k not in state:
                    raise ValueError(f"{klass.__name__} state lacks {k!r}")
                arr = np.asarray(state[k], dtype=np.float64)
                if arr.shape != (n,) or not np.isfinite(arr).all():
                    raise ValueError(f"{klass.__name__} state {k!r} must be {n} finite numbers")
                setattr(obj, k, arr)
            obj.n_features_in_ = n
            obj.feature_names_in_ = tuple(d.get("feature_names_in") or ())
        return obj

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    # ------------------------------------------------------------------- padded lists (export)
    @classmethod
    def has_list_form(cls) -> bool:
        """Whether :meth:`normalize_lists` is implemented (the normalizers ctxrank can export)."""
        return cls.normalize_lists is not Transform.normalize_lists

    def list_params(self) -> dict[str, np.ndarray]:
        """The fitted float64 arrays :meth:`normalize_lists` reads (the export stores them as buffers)."""
        return {}

    def normalize_lists(self, x: Any, mask: Any, params: dict[str, Any], xp: Any) -> Any:
        """The normalization of padded lists, traceable: float64 ``x`` (B, L, F), ``mask`` bool (B, L)
        (True = real item) -> float64 (B, L, F), equal on real items to :meth:`transform` of the same
        rows. ``params``: :meth:`list_params` as arrays of ``xp`` (``numpy`` or ``torch``). Values at
        padded positions are arbitrary, and never change a real item's.

        Raises:
            NotImplementedError: a normalizer without a list form (it cannot be exported).
        """
        raise NotImplementedError(f"{type(self).__name__} has no list form")

    def raw_lists(self, y: Any, params: dict[str, Any], xp: Any) -> Any:
        """Raw float64 features that :meth:`normalize_lists` maps to ``y`` (..., F) in [0, 1] (for
        checks; the identity where any raw value will do)."""
        return y

    # -------------------------------------------------------------------------------- subclass
    def _fit_state(self, data: RankingData) -> None:
        """Set the learned arrays from ``data``: its streaming statistics, in one pass (a normalizer
        whose statistics need a second pass over the rows overrides it)."""
        self._stream_finish(self._stream_add(self._stream_start(data.n_features), data))

    # A streaming fit's statistics are one float64 vector (so ranks can all-gather them): a stateless
    # normalizer keeps none; the per-query ones still check their input, as ``transform`` will.
    def _stream_start(self, n_features: int) -> np.ndarray:
        return np.zeros(0)

    def _stream_add(self, acc: np.ndarray, chunk: RankingData) -> np.ndarray:
        return acc

    def _stream_merge(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a

    def _stream_finish(self, acc: np.ndarray) -> None:
        """Set the learned arrays from the (merged) statistics."""

    def _apply(self, data: RankingData, out: np.ndarray) -> np.ndarray:
        """float32 (N, F) normalized features written into ``out`` (which may be ``data.features``
        itself: every block is read before its rows are written) and returned."""
        raise NotImplementedError

    #: whether each row is normalized on its own (``_map_rows``), so rows gathered when read
    #: (:class:`~ctxrank.data.gathered.GatheredRows`) can be normalized as they are read
    row_wise: ClassVar[bool] = False

    def _map_rows(self, block: np.ndarray, *, data: RankingData) -> np.ndarray:
        """float32 (n, F) rows normalized (a row-wise normalizer); ``data``: whose rows, for messages."""
        raise NotImplementedError


class Identity(Transform):
    """No normalization (registry name ``"none"``); features are returned as they are."""

    name = "none"
    stateless = True

    def transform(self, data: RankingData, *, in_place: bool = False) -> RankingData:
        """Returns ``data`` itself (after the same feature-count checks as other transforms)."""
        if self.is_fitted and data.n_features != self.n_features_in_:
            raise ValueError(
                f"Identity was fitted on {self.n_features_in_} features, got data with {data.n_features}"
            )
        return data

    def _apply(self, data: RankingData, out: np.ndarray) -> np.ndarray:
        out[...] = data.features
        return out

    def normalize_lists(self, x: Any, mask: Any, params: dict[str, Any], xp: Any) -> Any:
        return x


class _Affine(Transform):
    """Feature-wise ``clip((g(x) - shift) * scale, lo, hi)`` (:func:`_affine_map`) with ``scale =
    1 / divisor`` (0 where constant); ``[lo, hi]`` = [0, 1] with ``_clip01``, else the float32 range."""

    _log: ClassVar[bool] = False  # g = signed log1p instead of identity
    _post_log: ClassVar[bool] = False  # signed log1p of the affine map's result (zscore-log1p)
    _clip01: bool = False

    def _g(self, block: np.ndarray) -> np.ndarray:
        x = block.astype(np.float64)
        return _signed_log1p(x) if self._log else x

    def _shift_divisor(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _bounds(self) -> tuple[float, float]:
        return (0.0, 1.0) if self._clip01 else (-_F32_MAX, _F32_MAX)

    def list_params(self) -> dict[str, np.ndarray]:
        """``shift`` and ``scale``, float64 (F,)."""
        if not self.is_fitted:
            raise ValueError(f"{type(self).__name__} is not fitted: call fit(train) first")
        shift, divisor = self._shift_divisor()
        return {"shift": np.asarray(shift, dtype=np.float64), "scale": _inverse(divisor, np)}

    def normalize_lists(self, x: Any, mask: Any, params: dict[str, Any], xp: Any) -> Any:
        out = _affine_map(x, params["shift"], params["scale"], *self._bounds(), self._log, xp)
        return _signed_log1p(out, xp) if self._post_log else out

    def raw_lists(self, y: Any, params: dict[str, Any], xp: Any) -> Any:
        """``g^-1(shift + y / scale)`` (``y`` itself for a constant feature), ``|g(x)|`` kept <= 80."""
        scale = params["scale"]
        if self._post_log:  # inverse of the signed log1p applied last
            y = xp.sign(y) * xp.expm1(xp.abs(y))
        x = params["shift"] + y / xp.where(scale > 0, scale, 1.0)
        if self._log:  # inverse of the signed log1p
            x = xp.sign(x) * xp.expm1(xp.clip(xp.abs(x), 0.0, 80.0))
        return xp.clip(x, -_F32_MAX, _F32_MAX)

    row_wise = True

    def _mapped(self, block: np.ndarray, start: int | None, data: RankingData) -> np.ndarray:
        """float64 normalized values of the float32 rows ``block`` (rows ``start`` ... of ``data``)."""
        _check_finite(block, start, data)
        params = self.list_params()
        lo, hi = self._bounds()
        x = _affine_map(block.astype(np.float64), params["shift"], params["scale"], lo, hi, self._log, np)
        return _signed_log1p(x) if self._post_log else x

    def _apply(self, data: RankingData, out: np.ndarray) -> np.ndarray:
        x = data.features
        step = _row_step(x.shape[1])
        for a in range(0, x.shape[0], step):
            out[a : a + step] = self._mapped(x[a : a + step], a, data)
        return out

    def _map_rows(self, block: np.ndarray, *, data: RankingData) -> np.ndarray:
        return self._mapped(block, None, data).astype(np.float32)


class GlobalMinMax(_Affine):
    """Global min-max scaling to [0, 1] with the training split's min and max (QILCM paper).

    ``y = (x - min_) / (max_ - min_)`` per feature; a feature constant on the training split
    (``max_ == min_``) gives 0.

    Args:
        clip: clip the result to [0, 1] (default True). Validation/test values outside the training
            range would otherwise go below 0 or above 1, into a region the model never saw during
            training. With ``clip=False`` they are kept (only clipped to the finite float32 range).

    Attributes:
        min_: float64 (F,) per-feature minimum on the training rows.
        max_: float64 (F,) per-feature maximum on the training rows.
    """

    name = "minmax"
    _state_names = ("min_", "max_")

    def __init__(self, clip: bool = True) -> None:
        super().__init__()
        if not isinstance(clip, bool):
            raise TypeError(f"clip must be a bool, got {clip!r}")
        self.clip = clip
        self._clip01 = clip
        self.min_: np.ndarray | None = None
        self.max_: np.ndarray | None = None

    def get_params(self) -> dict[str, Any]:
        return {"clip": self.clip}

    def _stream_start(self, n_features: int) -> np.ndarray:
        return np.concatenate([np.full(n_features, np.inf), np.full(n_features, -np.inf)])  # [lo, hi]

    def _stream_add(self, acc: np.ndarray, chunk: RankingData) -> np.ndarray:
        lo, hi = np.split(acc.copy(), 2)
        for block in _blocks(chunk):
            np.fmin(lo, np.fmin.reduce(block, axis=0), out=lo)  # fmin / fmax: a NaN (missing) is skipped
            np.fmax(hi, np.fmax.reduce(block, axis=0), out=hi)
        return np.concatenate([lo, hi])

    def _stream_merge(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        (lo_a, hi_a), (lo_b, hi_b) = np.split(a, 2), np.split(b, 2)
        return np.concatenate([np.fmin(lo_a, lo_b), np.fmax(hi_a, hi_b)])

    def _stream_finish(self, acc: np.ndarray) -> None:
        lo, hi = (v.copy() for v in np.split(acc, 2))
        empty = lo > hi  # every value of the feature missing: a constant 0
        lo[empty] = hi[empty] = 0.0
        self.min_, self.max_ = lo, hi

    def _shift_divisor(self) -> tuple[np.ndarray, np.ndarray]:
        return self.min_, self.max_ - self.min_


class ZScore(_Affine):
    """Standardization with the training split's mean and (population) standard deviation.

    ``y = (x - mean_) / std_`` per feature; a feature constant on the training split gives 0
    (its ``std_`` is stored as 0). Statistics are computed in float64 with two passes over the rows.

    Attributes:
        mean_: float64 (F,) per-feature mean on the training rows.
        std_: float64 (F,) per-feature population std (ddof = 0) on the training rows; 0 where constant.
    """

    name = "zscore"
    _state_names = ("mean_", "std_")

    def __init__(self) -> None:
        super().__init__()
        self.mean_: np.ndarray | None = None
        self.std_: np.ndarray | None = None

    def _fit_state(self, data: RankingData) -> None:
        x = data.features
        n, f = x.shape
        step = _row_step(f)
        total = np.zeros(f)
        count = np.zeros(f)  # values present per feature (a NaN is missing and skipped)
        lo = np.full(f, np.inf)
        hi = np.full(f, -np.inf)
        for block in _blocks(data):
            g = self._g(block)
            total += np.nansum(g, axis=0)
            count += np.count_nonzero(~np.isnan(g), axis=0)
            np.fmin(lo, np.fmin.reduce(g, axis=0), out=lo)
            np.fmax(hi, np.fmax.reduce(g, axis=0), out=hi)
        present = np.maximum(count, 1.0)
        mean = total / present
        m2 = np.zeros(f)
        for a in range(0, n, step):
            m2 += np.nansum(np.square(self._g(x[a : a + step]) - mean), axis=0)
        self._stream_finish(np.concatenate([count, mean, m2, lo, hi]))

    # streaming: per feature [count, mean, M2 (sum of squared deviations), min, max] of g(x)
    def _stream_start(self, n_features: int) -> np.ndarray:
        f = n_features
        return np.concatenate([np.zeros(3 * f), np.full(f, np.inf), np.full(f, -np.inf)])

    def _stream_add(self, acc: np.ndarray, chunk: RankingData) -> np.ndarray:
        for block in _blocks(chunk):
            g = self._g(block)
            count = np.count_nonzero(~np.isnan(g), axis=0).astype(np.float64)
            mean = np.nansum(g, axis=0) / np.maximum(count, 1.0)
            m2 = np.nansum(np.square(g - mean), axis=0)
            lo, hi = np.fmin.reduce(g, axis=0), np.fmax.reduce(g, axis=0)
            acc = self._stream_merge(acc, np.concatenate([count, mean, m2, lo, hi]))
        return acc

    def _stream_merge(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Chan, Golub & LeVeque (1979) pairwise update of (count, mean, M2); min / max by fmin / fmax:
        ``delta = mean_b - mean_a``, ``mean = mean_a + delta n_b / n``,
        ``M2 = M2_a + M2_b + delta^2 n_a n_b / n``."""
        (n_a, mean_a, m2_a, lo_a, hi_a), (n_b, mean_b, m2_b, lo_b, hi_b) = np.split(a, 5), np.split(b, 5)
        n = n_a + n_b
        safe = np.maximum(n, 1.0)
        delta = mean_b - mean_a
        mean = mean_a + delta * (n_b / safe)
        m2 = m2_a + m2_b + delta * delta * (n_a * n_b / safe)
        return np.concatenate([n, mean, m2, np.fmin(lo_a, lo_b), np.fmax(hi_a, hi_b)])

    def _stream_finish(self, acc: np.ndarray) -> None:
        count, mean, m2, lo, hi = np.split(acc, 5)
        std = np.sqrt(m2 / np.maximum(count, 1.0))
        std[~(hi > lo)] = 0.0  # exactly constant (or never present): never divide by a rounding residue
        self.mean_, self.std_ = mean.copy(), std

    def _shift_divisor(self) -> tuple[np.ndarray, np.ndarray]:
        return self.mean_, self.std_


class Log1pZScore(ZScore):
    """Z-score of ``sign(x) * log1p(|x|)``, fitted on the training split.

    The signed log compresses heavy tails (counts, BM25, PageRank) before standardizing; it is odd
    and monotone, so the order of values within a feature is kept. ``sign(x) * log1p(|x|)`` of the raw
    features is DASALC's log1p input transformation (Qin et al. 2021, ICLR, "Are Neural Rankers still
    Outperformed by Gradient Boosted Decision Trees?"); the standardization that follows is what the
    authors' code does with a batch norm, with the training split's statistics here. DASALC's default.

    Attributes:
        mean_: float64 (F,) mean of ``sign(x) * log1p(|x|)`` on the training rows.
        std_: float64 (F,) population std of the same; 0 where constant.
    """

    name = "log1p-zscore"
    _log = True


class ZScoreLog1p(ZScore):
    """The signed log1p after standardization: ``sign(z) * log1p(|z|)``, ``z = (x - mean_) / std_`` with
    the training split's statistics. DASALC's log1p transformation (Qin et al. 2021, ICLR) applies to the
    raw features, before any standardization: that is :class:`Log1pZScore`.

    The order differs from :class:`Log1pZScore` (log first, then standardize): here every feature is
    first put on one scale, then its tails are compressed, so outliers of validation/test splits far
    beyond the training range are damped (``|y| <= log1p(|z|)``) rather than passed on linearly. A
    feature constant on the training split gives 0.

    Attributes:
        mean_: float64 (F,) per-feature mean on the training rows.
        std_: float64 (F,) per-feature population std; 0 where constant.
    """

    name = "zscore-log1p"
    _post_log = True


class _PerQuery(Transform):
    """A per-query normalizer: nothing learned, and features without inf or NaN (a query's statistics
    read every value); subclasses implement ``_apply_checked``."""

    stateless = True

    def _apply(self, data: RankingData, out: np.ndarray) -> np.ndarray:
        for _ in _blocks(data, missing=False):
            pass
        return self._apply_checked(data, out)


class QueryMinMax(_PerQuery):
    """Per-query min-max scaling to [0, 1] (LETOR "QueryLevelNorm").

    Within each query q and feature j: ``y = (x - min_q,j) / (max_q,j - min_q,j)``; a feature constant
    within a query (in particular every feature of a one-item query) gives 0. Nothing is learned:
    ``fit`` only records the feature count, and ``transform`` works without it. Vectorized with
    ``np.minimum.reduceat`` / ``np.maximum.reduceat`` over ``query_offsets`` (no loop over queries).
    """

    name = "query-minmax"

    def _apply_checked(self, data: RankingData, out: np.ndarray) -> np.ndarray:
        x = data.features
        step = _row_step(x.shape[1])
        starts = data.query_offsets[:-1]
        lo = np.minimum.reduceat(x, starts, axis=0).astype(np.float64)  # (Q, F)
        scale = _inverse(np.maximum.reduceat(x, starts, axis=0).astype(np.float64) - lo, np)  # (Q, F)
        qidx = data.query_index  # (N,)
        for a in range(0, x.shape[0], step):
            q = qidx[a : a + step]
            out[a : a + step] = _minmax_map(x[a : a + step].astype(np.float64), lo[q], scale[q], np)
        return out

    def normalize_lists(self, x: Any, mask: Any, params: dict[str, Any], xp: Any) -> Any:
        """Min and max over the REAL items of each list (padding enters neither)."""
        real = mask[:, :, None]  # (B, L, 1)
        lo = xp.amin(xp.where(real, x, float("inf")), 1)[:, None]  # (B, 1, F)
        hi = xp.amax(xp.where(real, x, float("-inf")), 1)[:, None]  # (B, 1, F)
        return _minmax_map(x, lo, _inverse(hi - lo, xp), xp)


class QueryZScore(_PerQuery):
    """Per-query standardization: within each query q and feature j, ``y = (x - mean_q,j) / std_q,j``
    with the mean and population std (ddof = 0) over the query's items.

    A feature constant within a query (``max == min`` exactly; in particular every feature of a
    one-item query) gives 0. Nothing is learned: ``fit`` only records the feature count, and
    ``transform`` works without it. Statistics in float64, two passes, over blocks of whole queries
    (``np.add.reduceat``; no loop over single queries); the result is clipped to the float32 range.
    """

    name = "query-zscore"

    def _apply_checked(self, data: RankingData, out: np.ndarray) -> np.ndarray:
        x = data.features
        step = _row_step(x.shape[1])
        offsets = data.query_offsets
        q = 0
        while q < data.n_queries:  # blocks of whole queries, about ``step`` rows each (at least one query)
            end = int(np.searchsorted(offsets, offsets[q] + step, side="right")) - 1
            end = min(max(end, q + 1), data.n_queries)
            a, b = int(offsets[q]), int(offsets[end])
            starts = offsets[q:end] - a  # (Q,)
            qidx = np.repeat(np.arange(end - q), np.diff(offsets[q : end + 1]))  # (rows,)
            block = x[a:b].astype(np.float64)
            mean, scale = _query_stats(block, starts, qidx)
            out[a:b] = _affine_map(block, mean[qidx], scale[qidx], -_F32_MAX, _F32_MAX, False, np)
            q = end
        return out

    def normalize_lists(self, x: Any, mask: Any, params: dict[str, Any], xp: Any) -> Any:
        """Mean and std over the REAL items of each list (padding enters neither)."""
        real = mask[:, :, None]  # (B, L, 1)
        n = xp.where(mask, 1.0, 0.0).sum(1)[:, None, None]  # (B, 1, 1)
        n = xp.where(n > 0, n, 1.0)
        mean = xp.where(real, x, 0.0).sum(1)[:, None] / n  # (B, 1, F)
        var = xp.where(real, (x - mean) * (x - mean), 0.0).sum(1)[:, None] / n  # (B, 1, F)
        lo = xp.amin(xp.where(real, x, float("inf")), 1)[:, None]  # (B, 1, F)
        hi = xp.amax(xp.where(real, x, float("-inf")), 1)[:, None]
        std = xp.where(hi == lo, 0.0, xp.sqrt(var))  # exactly constant in the list -> 0
        return _affine_map(x, mean, _inverse(std, xp), -_F32_MAX, _F32_MAX, False, xp)


def _query_stats(block: np.ndarray, starts: np.ndarray, qidx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-query ``mean`` and ``scale = 1 / std`` (0 where constant), float64 (Q, F), of the float64 rows
    ``block`` (rows, F) whose queries start at ``starts`` (Q,); ``qidx`` (rows,) = each row's query."""
    counts = np.diff(np.append(starts, block.shape[0]))[:, None].astype(np.float64)  # (Q, 1)
    mean = np.add.reduceat(block, starts, axis=0) / counts  # (Q, F)
    dev = block - mean[qidx]
    var = np.add.reduceat(dev * dev, starts, axis=0) / counts
    constant = np.minimum.reduceat(block, starts, axis=0) == np.maximum.reduceat(block, starts, axis=0)
    std = np.where(constant, 0.0, np.sqrt(var))
    return mean, _inverse(std, np)


TRANSFORMS: dict[str, type[Transform]] = {
    "none": Identity,
    "minmax": GlobalMinMax,
    "query-minmax": QueryMinMax,
    "zscore": ZScore,
    "log1p-zscore": Log1pZScore,
    "zscore-log1p": ZScoreLog1p,
    "query-zscore": QueryZScore,
}


def make_transform(name: str, **kwargs: Any) -> Transform:
    """A new (unfitted) transform from its registry name, e.g. ``make_transform("minmax", clip=False)``.

    Raises:
        ValueError: an unknown name (the message lists the valid names).
    """
    klass = TRANSFORMS.get(name)
    if klass is None:
        raise ValueError(f"unknown transform {name!r}; valid names: {sorted(TRANSFORMS)}")
    return klass(**kwargs)
