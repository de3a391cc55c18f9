"""Ranking metrics over padded, masked batches of lists, plus per-query vectors for whole datasets.

Every metric is a pure function ``(scores, labels, mask, *, options..., reduction="none") -> Tensor``
over padded lists:

* ``scores``  float ``(B, L)``: model scores, higher = ranked first.
* ``labels``  float ``(B, L)``: graded relevance labels (``0`` on padding).
* ``mask``    bool  ``(B, L)``: ``True`` = real item. Padded positions never affect a result, whatever
  score or label they hold.

``reduction="none"`` (the default) returns one value per list, ``(B,)``; ``reduction="mean"`` returns
the mean over the lists that are not skipped (``no_relevant="skip"``).

Conventions (all named, all recordable through :class:`MetricConvention.to_dict`):

* **Ranking and ties.** Items are sorted by descending score with a *stable* sort, so equal scores keep
  their input order (earlier position first). For data read from a LETOR file this is file order, the
  rule of Microsoft's evaluation scripts.
* **Gain.** ``"exp2"``: ``2^y - 1`` (Burges et al. 2005; the LETOR scripts' table ``{0:0, 1:1, 2:3}``);
  ``"linear"``: ``y`` (trec_eval / pytrec_eval ``ndcg_cut``).
* **Discount.** ``convention="standard"``: ``1 / log2(1 + r)`` for rank ``r = 1, 2, ...``
  (Järvelin & Kekäläinen 2002, in the form of ARSM-L2R eq. 9). ``"letor4"`` / ``"letor3"``: ranks 1 and
  2 undiscounted, rank ``r >= 3`` divided by ``log2(r)`` (the original J&K 2002 form with ``b = 2``).
* **Cutoff beyond the list.** ``k=None`` or ``k > len(list)`` means the whole list (standard). Precision
  in the standard convention divides by ``min(k, n)`` where ``n`` is the query length, so a query with
  3 items all relevant has P@10 = 1 (trec_eval and LETOR 4.0 divide by ``k``; compare with care).
* **No relevant item.** ``no_relevant=0.0`` (default) | ``1.0`` | ``"skip"``: value of a list whose query
  has no relevant item (NDCG: ideal DCG = 0; AP / RR / P: no label ``>= threshold``; ERR: no label > 0).
  ``"skip"`` gives NaN in the per-list vector and excludes the list from means. A list with no real
  item at all is a list with no relevant item.
* **NaN inputs are never hidden.** A NaN score or label on a real item makes that list's value NaN.
* **Labels** are graded relevance ``>= 0``; a negative label is a ``ValueError`` (:func:`check_labels`,
  used by every metric and by :func:`evaluate_queries`). With the ``2^y - 1`` gain a label is refused
  when the gain summed over a list could overflow the work dtype (float64: ``y <= 1023 - log2(L)``,
  float32: ``y <= 127 - log2(L)``): the message gives the largest usable label and suggests
  ``gain="linear"`` (``--gain linear``), whose values stay finite.
* **ERR's maximum grade** (``max_label``) is a named convention: the largest grade of the label scale
  (2 for MQ2007/MQ2008/OHSUMED, 4 for MSLR/Istella/Yahoo; ``ctxrank.data.registry.get_spec(name).max_label``),
  never the largest label of whatever data is evaluated, so a query's ERR does not depend on the
  other queries. :func:`evaluate_queries` requires it for ERR.

LETOR presets (``convention="letor4"`` and ``"letor3"``), reproducing Microsoft's scripts
``Eval-Score-4.0.pl`` (LETOR 4.0: MQ2007, MQ2008) and ``Eval-Score-3.0.pl`` (LETOR 3.0: OHSUMED, .gov).
The files once hosted at research.microsoft.com were not reachable here; the rules were read from
copies in public repositories:
``diogofreitasribeiro/PG-Rank:Eval-Score-4.0.pl``, ``JuniorZilles/tcc_learning_to_rank:Eval-Score-4.0.pl``,
``gcmgomes/L2R-Framework:Eval-Score-3.0.pl``, ``JuniorZilles/tcc_learning_to_rank:Eval-Score-3.0.pl`` (the
metric subroutines are identical between the copies of each version). What the scripts do:

1. Documents of a query are first sorted by line number, then by prediction with ``sort { $b <=> $a }``
   (Perl's sort is a stable merge sort since 5.8): ties keep file order. Same rule here.
2. ``%hsNdcgRelScore = (2 => 3, 1 => 1, 0 => 0)``: gain ``2^y - 1`` for labels {0, 1, 2}.
   ``%hsPrecisionRel = (2 => 1, 1 => 1, 0 => 0)``: relevant means label >= 1. Both are lookup tables, so
   a label outside {0, 1, 2} would silently get gain 0 and count as irrelevant; here such labels raise
   ``ValueError`` under a LETOR preset instead.
3. ``sub DCG``: ``dcg[0] = gain(rates[0])``; position ``iPos = 1`` adds the gain undiscounted;
   ``iPos >= 2`` adds ``gain * log(2.0) / log(iPos + 1.0)``, i.e. rank ``r = iPos + 1 >= 3`` is divided
   by ``log2(r)``.
4. ``sub NDCG``: the ideal DCG sorts *all* the query's labels; NDCG = 0 when the ideal DCG is 0.
5. ``sub MAP``: average of ``numRelevant / (iPos + 1)`` over relevant positions of the whole list,
   divided by the number of relevant documents; 0 when there is none. Identical in 3.0 and 4.0.
6. Every query is in the mean (``$map /= ($#qids + 1)``), so no-relevant queries count as 0.
7. LETOR 4.0, ``sub PrecisionAtN`` (modified by Jun Xu, 2009-4-24, "if # retrieved doc < $topN, the P@N
   will consider the hole as irrelevant"): P@k = (relevant in top k) / k, also for queries shorter than k.
8. LETOR 4.0, NDCG@k of a query shorter than k: ``EvalQuery`` calls ``NDCG($#rates + 1, @rates)``, so
   the per-query NDCG array has only n entries; ``OuputResults`` reads ``$ndcg_q[$iPos]`` for
   ``iPos < 10`` and the missing entries are ``undef`` = 0 (printed ``0.0000``, added as 0 to the mean).
   So NDCG@k = 0 for n < k.
9. LETOR 3.0, k > n: ``PrecisionAtN`` and ``NDCG`` loop only over ``iPos < $topN && iPos < n``; the
   per-query arrays are shorter than k, and ``OuputResults`` adds what is there and divides by the
   number of *all* queries. A query shorter than k therefore contributes 0 to both P@k and NDCG@k; this
   module gives it the per-query value 0 so that means agree with the script.
10. LETOR 4.0, ``MeanNDCG`` (:func:`mean_ndcg`, metric name ``mean_ndcg``): ``EvalQuery`` computes
    ``@Ndcg = NDCG($#rates + 1, @rates)``, the NDCG at every position ``iPos < n`` (each 0 where the
    ideal DCG at that position is 0), and ``$meanNdcg`` is their sum divided by ``$#Ndcg + 1 = n``;
    ``OuputResults`` averages it over all queries. Eval-Score-3.0.pl has no MeanNDCG.

Checked by running those scripts (``perl``) against :func:`evaluate_queries` on 30 random datasets of 60
queries with heavy ties, short and no-relevant queries: letor4 agrees to the 4 printed decimals, letor3
to 1e-15, per query and in the means (``tests/test_metrics.py::test_against_microsoft_script``, which
runs when ``CTXRANK_EVAL_SCORE_4`` / ``CTXRANK_EVAL_SCORE_3`` give the scripts' paths).

Not confirmable from the scripts: ERR and reciprocal rank (the scripts do not compute them; the presets
use the standard formulas with label >= 1 as relevant and no-relevant = 0), and the exact text of the
files once hosted at research.microsoft.com (only third-party copies were available).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ctxrank._checks import MAX_INT, check_choice, check_int, check_no_relevant, parse_int

__all__ = [
    "CHOICE_METRICS",
    "CONVENTIONS",
    "METRICS",
    "METRIC_ALIASES",
    "MetricConvention",
    "average_precision",
    "check_labels",
    "choice_log_likelihood",
    "dcg",
    "err",
    "evaluate_queries",
    "format_metric",
    "is_choice_data",
    "mean_metrics",
    "mean_ndcg",
    "mean_over_queries",
    "metric_convention",
    "ndcg",
    "parse_metric",
    "precision",
    "reciprocal_rank",
]

CONVENTIONS: tuple[str, ...] = ("standard", "letor4", "letor3")
GAINS: tuple[str, ...] = ("exp2", "linear")
REDUCTIONS: tuple[str, ...] = ("none", "mean")

_DISCOUNT_TEXT = {
    "standard": "1/log2(1+r)",
    "letor4": "1 for r in {1,2}, 1/log2(r) for r >= 3",
    "letor3": "1 for r in {1,2}, 1/log2(r) for r >= 3",
}
_K_BEYOND_TEXT = {
    "standard": "k > list length means the whole list; P@k divides by min(k, query length)",
    "letor4": "holes count as irrelevant: P@k divides by k; NDCG@k = 0 for a query shorter than k",
    "letor3": "P@k = 0 and NDCG@k = 0 for a query shorter than k (absent from the script's per-query "
    "arrays, counted as 0 in its means)",
}
_SOURCE_TEXT = {
    "standard": "Järvelin & Kekäläinen 2002 (DCG), ARSM-L2R eq. 8-9 (AP, NDCG), Chapelle et al. 2009 (ERR)",
    "letor4": "Microsoft LETOR 4.0 Eval-Score-4.0.pl (MQ2007/MQ2008)",
    "letor3": "Microsoft LETOR 3.0 Eval-Score-3.0.pl (OHSUMED)",
}
TIE_RULE = "stable: equal scores keep input order (earlier position ranked first)"


# ----------------------------------------------------------------------------------------------------
# Conventions
# ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MetricConvention:
    """All the choices that change a metric's value, in one recordable object.

    Args:
        name: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        gain: ``"exp2"`` (``2^y - 1``) or ``"linear"`` (``y``).
        no_relevant: value for a query without relevant items: ``0.0``, ``1.0`` or ``"skip"`` (NaN,
            excluded from means).
        threshold: binary relevance for P, AP, RR is ``label >= threshold``.
        discount: text of the rank discount (filled in from ``name``).
        tie_rule: text of the tie rule.
        k_beyond_list: text of what a cutoff larger than the list means.
        source: where the formulas come from.
        max_label: ERR's maximum grade (stop probability ``(2^y - 1) / 2^max_label``), the largest
            grade of the label scale; ``None`` when no ERR is computed. Recorded in ``to_dict()``.
    """

    name: str = "standard"
    gain: str = "exp2"
    no_relevant: float | str = 0.0
    threshold: float = 1.0
    discount: str = ""
    tie_rule: str = TIE_RULE
    k_beyond_list: str = ""
    source: str = ""
    max_label: float | None = None

    def __post_init__(self) -> None:
        check_choice("convention", self.name, CONVENTIONS)
        check_choice("gain", self.gain, GAINS)
        object.__setattr__(self, "no_relevant", check_no_relevant("no_relevant", self.no_relevant))
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int | float):
            raise TypeError(f"threshold must be a number, got {type(self.threshold).__name__}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be finite, got {self.threshold!r}")
        object.__setattr__(self, "threshold", float(self.threshold))
        if self.max_label is not None:
            object.__setattr__(self, "max_label", _check_max_label(self.max_label))
        if self.name != "standard":
            problems = []
            if self.gain != "exp2":
                problems.append(f"gain='exp2' (got {self.gain!r})")
            if self.no_relevant != 0.0:
                problems.append(f"no_relevant=0.0 (got {self.no_relevant!r})")
            if self.threshold != 1.0:
                problems.append(f"threshold=1.0 (got {self.threshold!r})")
            if problems:
                raise ValueError(
                    f"convention={self.name!r} reproduces the LETOR script, which fixes "
                    + ", ".join(problems)
                )
        for field, table in (
            ("discount", _DISCOUNT_TEXT),
            ("k_beyond_list", _K_BEYOND_TEXT),
            ("source", _SOURCE_TEXT),
        ):
            if not getattr(self, field):
                object.__setattr__(self, field, table[self.name])

    @property
    def is_letor(self) -> bool:
        return self.name != "standard"

    @property
    def skip(self) -> bool:
        return self.no_relevant == "skip"

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready) for results files."""
        return dataclasses.asdict(self)


def metric_convention(
    convention: str = "standard",
    *,
    gain: str = "exp2",
    no_relevant: float | str = 0.0,
    threshold: float = 1.0,
    max_label: float | None = None,
) -> MetricConvention:
    """Build and validate the :class:`MetricConvention` that the metric functions use.

    ``max_label``: ERR's maximum grade (see :class:`MetricConvention`); give it whenever ERR is reported.

    Raises:
        ValueError: unknown convention / gain / no_relevant, or a LETOR preset with options the script
            does not allow (it fixes gain ``exp2``, threshold 1 and no-relevant = 0).
    """
    if not isinstance(convention, str):
        raise TypeError(
            f"convention must be a str, one of {list(CONVENTIONS)}, got {type(convention).__name__}"
        )
    return MetricConvention(
        name=convention, gain=gain, no_relevant=no_relevant, threshold=threshold, max_label=max_label
    )


def _check_max_label(max_label: Any) -> float:
    if isinstance(max_label, bool) or not isinstance(max_label, int | float | np.integer | np.floating):
        raise TypeError(f"max_label must be a number (the largest grade), got {type(max_label).__name__}")
    value = float(max_label)
    top = largest_exp2_label(torch.float64)
    if not 0 <= value <= top:  # also refuses NaN
        raise ValueError(
            f"max_label must lie in [0, {top}] (ERR divides by 2^max_label, finite in float64 up to "
            f"{top}), got {max_label!r}"
        )
    return value


def largest_exp2_label(dtype: torch.dtype | np.dtype | type = torch.float64, list_len: int = 1) -> int:
    """The largest label ``y`` whose gain ``2^y - 1``, summed over a list of ``list_len`` items (each
    discount <= 1), stays finite in ``dtype``: ``floor(log2(max / list_len))`` (1023 for one float64
    item, 127 for float32; 1022 for three float64 items)."""
    if isinstance(dtype, torch.dtype):
        big = torch.finfo(dtype).max
    else:
        big = float(np.finfo(dtype).max)
    max_exp = math.frexp(big)[1]  # big < 2^max_exp: 1024 for float64, 128 for float32
    return math.ceil(max_exp - math.log2(max(int(list_len), 1))) - 1


def check_labels(
    labels: torch.Tensor | np.ndarray,
    mask: torch.Tensor | np.ndarray | None = None,
    *,
    gain: str | None = "exp2",
    list_len: int | None = None,
    dtype: torch.dtype | np.dtype | type | None = None,
    where: Callable[[int], str] | None = None,
) -> None:
    """Refuse labels a metric (or a loss) cannot use; the one label check of the library.

    * a negative label (graded relevance is ``>= 0``; a negative one would give negative gains and
      NDCG below 0);
    * with ``gain="exp2"``, a label above :func:`largest_exp2_label` for ``dtype`` and lists of
      ``list_len`` items: its gain ``2^y - 1`` (or their sum) would be inf and the metric NaN. The
      message gives the largest usable label and suggests the linear gain (``gain="linear"``,
      ``--gain linear``). ``gain=None`` checks the sign only.

    NaN labels pass (they make their list NaN, never hidden). Padding (``mask`` False) is ignored.

    Args:
        labels: ``(B, L)`` tensor or ``(N,)`` array.
        mask: bool, same shape, True = real item; ``None`` = every entry.
        gain: ``"exp2"``, ``"linear"`` or ``None``.
        list_len: longest list (default: ``labels.shape[-1]``).
        dtype: the work dtype (default: ``labels``' floating dtype, at least float32).
        where: maps the flat position of the offending label (among the real ones for a tensor with
            ``mask``) to a description, e.g. ``"row 5 (query 'a')"``.

    Raises:
        ValueError: as above, naming the offending value and where it is.
    """
    if isinstance(labels, torch.Tensor):
        if dtype is None:
            dtype = _work_dtype(labels)
        t = labels.detach()
        t = t[mask] if mask is not None else t.reshape(-1)
        y = t.double().cpu().numpy()  # the real labels only: B * L values at most
    else:
        y = np.asarray(labels, dtype=np.float64)
        if mask is not None:
            y = np.where(np.asarray(mask, dtype=bool), y, 0.0)
        y = y.reshape(-1)
        if dtype is None:
            dtype = np.float64
    with np.errstate(invalid="ignore"):
        negative = y < 0  # NaN compares False
        low = bool(negative.any())

    def first(bad: np.ndarray) -> tuple[int, float]:
        i = int(np.flatnonzero(bad)[0])
        return i, float(y[i])

    def at(i: int) -> str:
        return f" at {where(i)}" if where is not None else ""

    if low:
        i, v = first(negative)
        raise ValueError(
            f"labels must be >= 0 (graded relevance), got {v:g}{at(i)}; shift or re-map the label scale"
        )
    if gain == "exp2":
        n = labels.shape[-1] if list_len is None else list_len
        top = largest_exp2_label(dtype, n)
        with np.errstate(invalid="ignore"):
            too_big = y > top
        if too_big.any():
            i, v = first(too_big)
            name = str(dtype).replace("torch.", "").replace("<class 'numpy.", "").rstrip("'>")
            raise ValueError(
                f"label {v:g}{at(i)} is too large for the gain 2^y - 1: its gain over a list of {n} "
                f"item(s) is not finite in {name}; the largest usable label is {top}. Use the linear "
                "gain (gain='linear', on the command line --gain linear) for large labels"
            )


# ----------------------------------------------------------------------------------------------------
# Shared machinery
# ----------------------------------------------------------------------------------------------------


def check_score_inputs(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, *, floating: bool = False
) -> None:
    """``scores``, ``labels``, ``mask`` tensors of one shape ``(B, L)``, ``mask`` bool (and with
    ``floating``, ``scores`` floating point); else TypeError / ValueError."""
    for name, t in (("scores", scores), ("labels", labels), ("mask", mask)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = real item), got dtype {mask.dtype}")
    if floating and not scores.dtype.is_floating_point:
        raise TypeError(f"scores must be a floating-point tensor, got dtype {scores.dtype}")
    if scores.dim() != 2:
        raise ValueError(f"scores must have shape (B, L), got {tuple(scores.shape)}")
    if labels.shape != scores.shape or mask.shape != scores.shape:
        raise ValueError(
            f"scores, labels, mask must have the same shape (B, L); got {tuple(scores.shape)}, "
            f"{tuple(labels.shape)}, {tuple(mask.shape)}"
        )


def _check_k(k: int | None, *, required: bool = False) -> int | None:
    if k is None:
        if required:
            raise ValueError("this metric needs a cutoff k (an int >= 1), got None")
        return None
    if isinstance(k, bool) or not isinstance(k, int | np.integer):
        raise TypeError(f"k must be an int >= 1 or None, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return int(k)


def _work_dtype(labels: torch.Tensor) -> torch.dtype:
    if labels.dtype.is_floating_point:
        return torch.promote_types(labels.dtype, torch.float32)
    return torch.float32


def _ideal(
    labels: torch.Tensor,
    mask: torch.Tensor,
    ideal_labels: torch.Tensor | None,
    ideal_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The full judged list of each query: ``ideal_labels``/``ideal_mask`` if given, else the list."""
    if ideal_labels is None:
        if ideal_mask is not None:
            raise ValueError("ideal_mask given without ideal_labels")
        return labels, mask
    if not isinstance(ideal_labels, torch.Tensor):
        raise TypeError(f"ideal_labels must be a torch.Tensor, got {type(ideal_labels).__name__}")
    if ideal_labels.dim() != 2 or ideal_labels.shape[0] != labels.shape[0]:
        raise ValueError(
            f"ideal_labels must have shape (B, M) with B = {labels.shape[0]}, got {tuple(ideal_labels.shape)}"
        )
    if ideal_mask is None:
        ideal_mask = torch.ones(ideal_labels.shape, dtype=torch.bool, device=ideal_labels.device)
    if ideal_mask.dtype != torch.bool or ideal_mask.shape != ideal_labels.shape:
        raise ValueError(
            f"ideal_mask must be a bool tensor of shape {tuple(ideal_labels.shape)}, "
            f"got {ideal_mask.dtype} {tuple(ideal_mask.shape)}"
        )
    return ideal_labels, ideal_mask


def _check_letor_labels(conv: MetricConvention, *pairs: tuple[torch.Tensor, torch.Tensor]) -> None:
    if not conv.is_letor:
        return
    for labels, mask in pairs:
        real = labels[mask]
        ok = (real == 0) | (real == 1) | (real == 2)
        if not bool(ok.all()):
            bad = torch.unique(real[~ok])[:5].tolist()
            raise ValueError(
                f"convention={conv.name!r} reproduces the LETOR script, whose tables only know labels "
                f"0, 1, 2; got labels {bad}. Use convention='standard' for other label sets."
            )


class _Ranked:
    """Labels in ranked order.

    Attributes:
        labels: ``(B, L)`` labels sorted by descending score (stable), padding zeroed and moved last.
        valid:  ``(B, L)`` bool, True on the first ``n`` positions (real items).
        n:      ``(B,)`` number of real items.
        ranks:  ``(L,)`` 1-based ranks in the work dtype.
        nan:    ``(B,)`` bool, a real item has a NaN score or label.
    """

    def __init__(self, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype):
        _, L = scores.shape
        # Stable sort by descending score, then stable sort real items before padding: ties keep
        # input order and padding goes last whatever its score (-inf, NaN, ...).
        order = torch.sort(scores, dim=-1, descending=True, stable=True).indices  # (B, L)
        pad_sorted = (~torch.gather(mask, -1, order)).to(torch.uint8)  # (B, L)
        order = torch.gather(order, -1, torch.sort(pad_sorted, dim=-1, stable=True).indices)
        lab = torch.where(mask, labels.to(dtype), torch.zeros((), dtype=dtype, device=labels.device))
        self.labels = torch.gather(lab, -1, order)  # (B, L)
        self.n = mask.sum(-1)  # (B,)
        self.ranks = torch.arange(1, L + 1, device=scores.device, dtype=dtype)  # (L,)
        self.valid = torch.arange(L, device=scores.device)[None, :] < self.n[:, None]  # (B, L)
        bad = torch.isnan(scores) if scores.dtype.is_floating_point else torch.zeros_like(mask)
        if labels.dtype.is_floating_point:
            bad = bad | torch.isnan(labels)
        self.nan = (bad & mask).any(-1)  # (B,)

    def topk(self, k: int | None) -> torch.Tensor:
        """``(B, L)`` bool: real item at rank <= k."""
        if k is None:
            return self.valid
        return self.valid & (self.ranks <= k)[None, :]


def _gain(y: torch.Tensor, gain: str) -> torch.Tensor:
    if gain == "exp2":
        return torch.expm1(y * math.log(2.0))  # 2^y - 1, exact near 0
    return y


def _discount(ranks: torch.Tensor, conv: MetricConvention) -> torch.Tensor:
    """``(L,)`` discount per rank (multiplier of the gain)."""
    if conv.is_letor:
        # LETOR: ranks 1, 2 undiscounted, rank r >= 3 divided by log2(r).
        return torch.where(ranks <= 2, torch.ones_like(ranks), 1.0 / torch.log2(ranks.clamp(min=2.0)))
    return 1.0 / torch.log2(1.0 + ranks)


def _finish(
    values: torch.Tensor, no_rel: torch.Tensor, nan_rows: torch.Tensor, conv: MetricConvention, reduction: str
) -> torch.Tensor:
    """Apply the no-relevant policy, NaN propagation and the reduction.

    Args:
        values: ``(B,)`` metric value where the query has a relevant item (anything elsewhere).
        no_rel: ``(B,)`` bool, query has no relevant item.
        nan_rows: ``(B,)`` bool, NaN in the input.
    """
    check_choice("reduction", reduction, REDUCTIONS)
    nan = torch.full((), float("nan"), dtype=values.dtype, device=values.device)
    fill = (
        nan
        if conv.skip
        else torch.full((), float(conv.no_relevant), dtype=values.dtype, device=values.device)
    )
    out = torch.where(no_rel, fill, values)
    out = torch.where(nan_rows, nan, out)
    if reduction == "none":
        return out
    keep = ~no_rel | nan_rows if conv.skip else torch.ones_like(no_rel)
    if not bool(keep.any()):
        return nan.clone()
    return out[keep].mean()


def _dcg_at(gains_sorted: torch.Tensor, within: torch.Tensor, disc: torch.Tensor) -> torch.Tensor:
    """``sum_r gain_r * disc_r`` over positions where ``within`` -> ``(B,)``."""
    zero = torch.zeros((), dtype=gains_sorted.dtype, device=gains_sorted.device)
    return torch.where(within, gains_sorted * disc[None, :], zero).sum(-1)


# ----------------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------------


@torch.no_grad()
def dcg(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int | None = None,
    gain: str = "exp2",
    convention: str = "standard",
    reduction: str = "none",
) -> torch.Tensor:
    """Discounted cumulative gain at cutoff k (Järvelin & Kekäläinen 2002).

    ``DCG@k = sum_{r=1}^{min(k, n)} g(y_(r)) * d(r)`` with ``y_(r)`` the label at rank ``r`` (stable sort by
    descending score), ``g(y) = 2^y - 1`` (``gain="exp2"``) or ``y`` (``"linear"``), and
    ``d(r) = 1/log2(1 + r)`` (standard) or ``1`` for ``r <= 2``, ``1/log2(r)`` after (LETOR presets).

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels.
        mask: ``(B, L)`` bool, True = real item.
        k: cutoff, ``None`` = whole list; ``k > n`` = whole list.
        gain: ``"exp2"`` or ``"linear"``.
        convention: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        reduction: ``"none"`` -> ``(B,)``; ``"mean"`` -> scalar.

    Returns:
        ``(B,)`` DCG per list (0 for an all-masked list), or its mean.
    """
    check_score_inputs(scores, labels, mask)
    k = _check_k(k)
    conv = metric_convention(convention, gain=gain)
    _check_letor_labels(conv, (labels, mask))
    check_labels(labels, mask, gain=conv.gain)
    rk = _Ranked(scores, labels, mask, _work_dtype(labels))
    value = _dcg_at(_gain(rk.labels, conv.gain), rk.topk(k), _discount(rk.ranks, conv))
    return _finish(value, torch.zeros_like(rk.nan), rk.nan, conv, reduction)


@torch.no_grad()
def ndcg(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int | None = None,
    gain: str = "exp2",
    no_relevant: float | str = 0.0,
    ideal_labels: torch.Tensor | None = None,
    ideal_mask: torch.Tensor | None = None,
    convention: str = "standard",
    reduction: str = "none",
) -> torch.Tensor:
    """Normalized DCG at cutoff k (Järvelin & Kekäläinen 2002; ARSM-L2R eq. 9).

    ``NDCG@k = DCG@k / IDCG@k`` where ``IDCG@k`` is the DCG@k of the query's judged labels sorted in
    descending order. The ideal list is ``labels`` itself, or ``ideal_labels`` when ``labels`` is only a
    truncation of the query (re-ranking the top items of a first stage): items cut off still count in
    the ideal DCG. ``IDCG = 0`` (no relevant item, or no item) gives ``no_relevant``.

    LETOR presets: the script's NDCG@k is 0 for a query with fewer than k items (query length = ideal list
    length when ``ideal_labels`` is given).

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels.
        mask: ``(B, L)`` bool, True = real item.
        k: cutoff, ``None`` = whole list.
        gain: ``"exp2"`` or ``"linear"``.
        no_relevant: ``0.0``, ``1.0`` or ``"skip"``.
        ideal_labels: ``(B, M)`` all judged labels of each query (optional).
        ideal_mask: ``(B, M)`` bool mask of ``ideal_labels`` (default all True).
        convention: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        reduction: ``"none"`` -> ``(B,)``; ``"mean"`` -> scalar over non-skipped lists.

    Returns:
        ``(B,)`` NDCG per list, or its mean.
    """
    check_score_inputs(scores, labels, mask)
    k = _check_k(k)
    conv = metric_convention(convention, gain=gain, no_relevant=no_relevant)
    il, im = _ideal(labels, mask, ideal_labels, ideal_mask)
    _check_letor_labels(conv, (labels, mask), (il, im))
    check_labels(labels, mask, gain=conv.gain)
    check_labels(il, im, gain=conv.gain, dtype=_work_dtype(labels))
    dtype = _work_dtype(labels)
    rk = _Ranked(scores, labels, mask, dtype)
    disc_l = _discount(rk.ranks, conv)
    dcg_v = _dcg_at(_gain(rk.labels, conv.gain), rk.topk(k), disc_l)  # (B,)

    # Ideal: labels sorted descending, padding last.
    M = il.shape[-1]
    ideal_sorted = torch.sort(
        torch.where(im, il.to(dtype), torch.full((), -math.inf, dtype=dtype, device=il.device)),
        dim=-1,
        descending=True,
    ).values  # (B, M)
    n_query = im.sum(-1)  # (B,)
    ranks_m = torch.arange(1, M + 1, device=il.device, dtype=dtype)
    within = torch.arange(M, device=il.device)[None, :] < n_query[:, None]
    if k is not None:
        within = within & (ranks_m <= k)[None, :]
    ideal_gains = _gain(
        torch.where(within, ideal_sorted, torch.zeros((), dtype=dtype, device=il.device)), conv.gain
    )
    idcg = _dcg_at(ideal_gains, within, _discount(ranks_m, conv))  # (B,)

    no_rel = ~(idcg > 0)
    value = dcg_v / torch.where(no_rel, torch.ones_like(idcg), idcg)
    if conv.is_letor and k is not None:
        value = torch.where(n_query < k, torch.zeros_like(value), value)
    nan_rows = rk.nan | (torch.isnan(il) & im).any(-1) if il.dtype.is_floating_point else rk.nan
    return _finish(value, no_rel, nan_rows, conv, reduction)


@torch.no_grad()
def mean_ndcg(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int | None = None,
    gain: str = "exp2",
    no_relevant: float | str = 0.0,
    convention: str = "standard",
    reduction: str = "none",
) -> torch.Tensor:
    """Mean NDCG over positions: ``MeanNDCG = (1/m) sum_{j=1}^{m} NDCG@j`` with ``m = n`` (the list
    length) or ``min(k, n)`` when ``k`` is given (LETOR 4.0's ``MeanNDCG``).

    ``convention="letor4"`` reproduces Eval-Score-4.0.pl (module docstring, item 10): ``EvalQuery`` calls
    ``NDCG($#rates + 1, @rates)``, i.e. NDCG at every position ``1..n`` (every ``j <= n``, so the
    short-query rule of NDCG@k never applies), each 0 where the ideal DCG@j is 0, and averages those n
    values; a query without relevant item gives 0 and every query counts in the mean. The script has
    no cutoff: ``k`` (not in the script) averages only the first ``min(k, n)`` positions.
    ``"letor3"``: Eval-Score-3.0.pl computes no MeanNDCG; its per-position NDCG for ``j <= n`` is the
    4.0 script's, so the value is the same as under ``"letor4"``. ``"standard"``: the same mean with
    the standard discount, gain and ``no_relevant`` policy.

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels.
        mask: ``(B, L)`` bool, True = real item.
        k: average positions ``1..min(k, n)``; ``None`` (the script's MeanNDCG) = every position.
        gain: ``"exp2"`` or ``"linear"``.
        no_relevant: ``0.0``, ``1.0`` or ``"skip"``: value of a list without a relevant item (ideal DCG
            0) or without items.
        convention: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        reduction: ``"none"`` -> ``(B,)``; ``"mean"`` -> scalar over non-skipped lists.

    Returns:
        ``(B,)`` mean NDCG per list, or its mean.
    """
    check_score_inputs(scores, labels, mask)
    k = _check_k(k)
    conv = metric_convention(convention, gain=gain, no_relevant=no_relevant)
    _check_letor_labels(conv, (labels, mask))
    check_labels(labels, mask, gain=conv.gain)
    dtype = _work_dtype(labels)
    rk = _Ranked(scores, labels, mask, dtype)
    disc = _discount(rk.ranks, conv)[None, :]  # (1, L)
    zero = torch.zeros((), dtype=dtype, device=rk.labels.device)
    # DCG@j and ideal DCG@j for every position j: cumulative sums over the ranked / sorted labels
    dcg_j = torch.cumsum(torch.where(rk.valid, _gain(rk.labels, conv.gain), zero) * disc, dim=-1)  # (B, L)
    ideal = torch.sort(torch.where(rk.valid, rk.labels, zero), dim=-1, descending=True).values
    idcg_j = torch.cumsum(_gain(ideal, conv.gain) * disc, dim=-1)  # (B, L)
    ndcg_j = torch.where(idcg_j > 0, dcg_j / torch.where(idcg_j > 0, idcg_j, torch.ones_like(idcg_j)), zero)
    within = rk.topk(k)  # (B, L) positions 1..min(k, n)
    m = within.sum(-1)  # (B,)
    value = torch.where(within, ndcg_j, zero).sum(-1) / m.clamp(min=1).to(dtype)
    no_rel = ~(idcg_j[:, -1] > 0) if idcg_j.shape[-1] else torch.ones_like(rk.nan)
    return _finish(value, no_rel, rk.nan, conv, reduction)


def _binary_context(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    conv: MetricConvention,
    ideal_labels: torch.Tensor | None,
    ideal_mask: torch.Tensor | None,
) -> tuple[_Ranked, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shared by P, AP, RR: ranked lists, relevance and the query's relevant count."""
    check_score_inputs(scores, labels, mask)
    il, im = _ideal(labels, mask, ideal_labels, ideal_mask)
    _check_letor_labels(conv, (labels, mask), (il, im))
    check_labels(labels, mask, gain=None)
    check_labels(il, im, gain=None)
    dtype = _work_dtype(labels)
    rk = _Ranked(scores, labels, mask, dtype)
    rel = (rk.labels >= conv.threshold) & rk.valid  # (B, L)
    q_rel = ((il >= conv.threshold) & im).sum(-1)  # (B,)
    n_query = im.sum(-1)  # (B,)
    nan_rows = rk.nan | (torch.isnan(il) & im).any(-1) if il.dtype.is_floating_point else rk.nan
    return rk, rel, q_rel, n_query, nan_rows, il, im


@torch.no_grad()
def precision(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int,
    threshold: float = 1.0,
    no_relevant: float | str = 0.0,
    ideal_labels: torch.Tensor | None = None,
    ideal_mask: torch.Tensor | None = None,
    convention: str = "standard",
    reduction: str = "none",
) -> torch.Tensor:
    """Precision at k: share of relevant (``label >= threshold``) items among the top k.

    Denominator, by convention:

    * ``"standard"``: ``min(k, n)`` with ``n`` the query length (the ideal list's length when
      ``ideal_labels`` is given, else the number of real items), so a short query is not penalized for
      having fewer than k items. trec_eval's ``P_k`` divides by ``k``: multiply by ``min(k, n) / k``
      to compare.
    * ``"letor4"``: ``k`` always (holes count as irrelevant; Eval-Score-4.0.pl ``PrecisionAtN``).
    * ``"letor3"``: ``k``, and a query shorter than k gets 0 (Eval-Score-3.0.pl leaves it out of its
      per-query array and divides the sum by all queries).

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels.
        mask: ``(B, L)`` bool, True = real item.
        k: cutoff (required, >= 1).
        threshold: relevance threshold.
        no_relevant: value for a query with no relevant item: ``0.0``, ``1.0`` or ``"skip"``.
        ideal_labels: ``(B, M)`` all judged labels of each query (optional; decides "no relevant" and
            the query length).
        ideal_mask: ``(B, M)`` bool mask of ``ideal_labels``.
        convention: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        reduction: ``"none"`` -> ``(B,)``; ``"mean"`` -> scalar.

    Returns:
        ``(B,)`` P@k per list, or its mean.
    """
    k = _check_k(k, required=True)
    conv = metric_convention(convention, no_relevant=no_relevant, threshold=threshold)
    rk, rel, q_rel, n_query, nan_rows, _, _ = _binary_context(
        scores, labels, mask, conv, ideal_labels, ideal_mask
    )
    hits = (rel & rk.topk(k)).sum(-1).to(rk.ranks.dtype)  # (B,)
    if conv.is_letor:
        value = hits / k
        if conv.name == "letor3":
            value = torch.where(n_query < k, torch.zeros_like(value), value)
    else:
        denom = n_query.clamp(max=k, min=1).to(hits.dtype)
        value = hits / denom
    return _finish(value, q_rel == 0, nan_rows, conv, reduction)


@torch.no_grad()
def recall(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int,
    threshold: float = 1.0,
    no_relevant: float | str = 0.0,
    ideal_labels: torch.Tensor | None = None,
    ideal_mask: torch.Tensor | None = None,
    convention: str = "standard",
    reduction: str = "none",
) -> torch.Tensor:
    """Recall at k: share of the query's relevant (``label >= threshold``) items that are in the top k.

    With one relevant item per list (a user-choice session) this is the hit rate: 1 when the chosen
    item is among the top k. The QILCM paper's airline "P@5" (0.6958 for QILCM, Table 2) can only be
    this quantity (precision@5 with one chosen item is at most 0.2). The same formula under every
    convention (the LETOR scripts have no recall). Arguments as :func:`precision`.

    Returns:
        ``(B,)`` recall@k per list, or its mean.
    """
    k = _check_k(k, required=True)
    conv = metric_convention(convention, no_relevant=no_relevant, threshold=threshold)
    rk, rel, q_rel, _, nan_rows, _, _ = _binary_context(scores, labels, mask, conv, ideal_labels, ideal_mask)
    hits = (rel & rk.topk(k)).sum(-1).to(rk.ranks.dtype)  # (B,)
    value = hits / q_rel.clamp(min=1).to(hits.dtype)
    return _finish(value, q_rel == 0, nan_rows, conv, reduction)


@torch.no_grad()
def average_precision(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int | None = None,
    threshold: float = 1.0,
    graded: bool = False,
    no_relevant: float | str = 0.0,
    ideal_labels: torch.Tensor | None = None,
    ideal_mask: torch.Tensor | None = None,
    convention: str = "standard",
    reduction: str = "none",
) -> torch.Tensor:
    """Average precision, ARSM-L2R eq. 8.

    ``AP = sum_j w_j y_j / sum_j y_j`` with ``w_j = (sum_{l: r_l <= r_j} y_l) / r_j`` and ``r_j`` the rank
    of item j. With binary ``y = [label >= threshold]`` (default) this is the usual AP
    (mean of P@r over the ranks of relevant items); ``graded=True`` plugs the raw labels into eq. 8,
    which is then *not* bounded by 1 (``w_j`` is a mean label, up to the largest label: labels [4, 1]
    ranked in that order give (4·4 + 2.5·1) / 5 = 3.7).
    The denominator sums ``y`` over the query's judged items (``ideal_labels`` when given, so relevant
    items cut off from ``labels`` count as not retrieved). ``k`` limits the numerator to the top k
    (trec_eval ``map_cut``); ``None`` = whole list. LETOR presets: same formula, label >= 1 relevant.

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels.
        mask: ``(B, L)`` bool, True = real item.
        k: optional cutoff.
        threshold: relevance threshold (binary mode).
        graded: use raw labels in eq. 8 instead of binary relevance.
        no_relevant: value for a query whose denominator is 0: ``0.0``, ``1.0`` or ``"skip"``.
        ideal_labels: ``(B, M)`` all judged labels of each query (optional).
        ideal_mask: ``(B, M)`` bool mask of ``ideal_labels``.
        convention: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        reduction: ``"none"`` -> ``(B,)``; ``"mean"`` -> scalar.

    Returns:
        ``(B,)`` AP per list, or its mean.
    """
    k = _check_k(k)
    conv = metric_convention(convention, no_relevant=no_relevant, threshold=threshold)
    rk, rel, q_rel, _, nan_rows, il, im = _binary_context(
        scores, labels, mask, conv, ideal_labels, ideal_mask
    )
    dtype = rk.ranks.dtype
    if graded:
        y = torch.where(rk.valid, rk.labels, torch.zeros((), dtype=dtype, device=rk.labels.device))
        den = torch.where(im, il.to(dtype), torch.zeros((), dtype=dtype, device=il.device)).sum(-1)
    else:
        y = rel.to(dtype)
        den = q_rel.to(dtype)
    w = torch.cumsum(y, dim=-1) / rk.ranks[None, :]  # (B, L)
    num = torch.where(rk.topk(k), w * y, torch.zeros((), dtype=dtype, device=y.device)).sum(-1)
    no_rel = ~(den > 0)
    value = num / torch.where(no_rel, torch.ones_like(den), den)
    return _finish(value, no_rel, nan_rows, conv, reduction)


@torch.no_grad()
def reciprocal_rank(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int | None = None,
    threshold: float = 1.0,
    no_relevant: float | str = 0.0,
    ideal_labels: torch.Tensor | None = None,
    ideal_mask: torch.Tensor | None = None,
    convention: str = "standard",
    reduction: str = "none",
) -> torch.Tensor:
    """Reciprocal rank of the first relevant item (``label >= threshold``); its mean is MRR.

    ``RR = 1 / r_first`` if the first relevant item is within the top k (``None`` = whole list), else 0.
    A query with no relevant item (in ``ideal_labels`` when given) gets ``no_relevant``. The LETOR scripts
    do not compute RR; under their presets the standard formula is used (label >= 1 relevant).

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels.
        mask: ``(B, L)`` bool, True = real item.
        k: optional cutoff.
        threshold: relevance threshold.
        no_relevant: ``0.0``, ``1.0`` or ``"skip"``.
        ideal_labels: ``(B, M)`` all judged labels of each query (optional).
        ideal_mask: ``(B, M)`` bool mask of ``ideal_labels``.
        convention: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        reduction: ``"none"`` -> ``(B,)``; ``"mean"`` -> scalar.

    Returns:
        ``(B,)`` RR per list, or its mean.
    """
    k = _check_k(k)
    conv = metric_convention(convention, no_relevant=no_relevant, threshold=threshold)
    rk, rel, q_rel, _, nan_rows, _, _ = _binary_context(scores, labels, mask, conv, ideal_labels, ideal_mask)
    hit = rel & rk.topk(k)  # (B, L)
    dtype = rk.ranks.dtype
    if hit.shape[-1] == 0:
        value = torch.zeros(hit.shape[0], dtype=dtype, device=hit.device)
    else:
        first = torch.argmax(hit.to(torch.uint8), dim=-1)  # first True (0 if none)
        value = torch.where(
            hit.any(-1), 1.0 / rk.ranks[first], torch.zeros((), dtype=dtype, device=hit.device)
        )
    return _finish(value, q_rel == 0, nan_rows, conv, reduction)


@torch.no_grad()
def err(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int | None = None,
    max_label: float | None = None,
    no_relevant: float | str = 0.0,
    ideal_labels: torch.Tensor | None = None,
    ideal_mask: torch.Tensor | None = None,
    convention: str = "standard",
    reduction: str = "none",
) -> torch.Tensor:
    """Expected reciprocal rank (Chapelle, Metzler, Zhang & Grinspan 2009, CIKM).

    ``ERR@k = sum_{r=1}^{min(k,n)} (1/r) R_r prod_{i<r} (1 - R_i)`` with stop probability
    ``R = (2^y - 1) / 2^max_label``.

    ``max_label=None`` uses the largest real label **in this batch**, so results then depend on which
    lists share a batch (acceptable inside a training objective such as ARSM's, never for reported
    values); pass the label scale's maximum grade (e.g. 2 for MQ2007, 4 for MSLR) for values that are
    independent of batching (:func:`evaluate_queries` requires it). A real label above ``max_label``
    raises ``ValueError``, and so do labels refused by :func:`check_labels` (negative, or beyond the
    largest one whose ``2^y - 1`` is finite). A query with no label > 0 (in ``ideal_labels`` when given)
    gets ``no_relevant``. The LETOR scripts do not compute ERR; the presets use this same formula.

    Args:
        scores: ``(B, L)`` scores.
        labels: ``(B, L)`` graded labels.
        mask: ``(B, L)`` bool, True = real item.
        k: optional cutoff.
        max_label: the largest possible grade; ``None`` = batch maximum.
        no_relevant: ``0.0``, ``1.0`` or ``"skip"``.
        ideal_labels: ``(B, M)`` all judged labels of each query (optional; decides "no relevant").
        ideal_mask: ``(B, M)`` bool mask of ``ideal_labels``.
        convention: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        reduction: ``"none"`` -> ``(B,)``; ``"mean"`` -> scalar.

    Returns:
        ``(B,)`` ERR per list, or its mean.
    """
    check_score_inputs(scores, labels, mask)
    k = _check_k(k)
    conv = metric_convention(convention, no_relevant=no_relevant)
    il, im = _ideal(labels, mask, ideal_labels, ideal_mask)
    _check_letor_labels(conv, (labels, mask), (il, im))
    check_labels(labels, mask, gain="exp2", list_len=1)  # ERR never sums gains
    check_labels(il, im, gain=None)
    if max_label is not None:
        max_label = _check_max_label(max_label)
    dtype = _work_dtype(labels)
    rk = _Ranked(scores, labels, mask, dtype)
    real = labels[mask]
    real = real[~torch.isnan(real)] if real.dtype.is_floating_point else real
    batch_max = float(real.max()) if real.numel() else 0.0
    if max_label is None:
        max_label = batch_max
    elif batch_max > max_label:
        raise ValueError(f"max_label={max_label} is below the largest label in the batch ({batch_max})")
    zero = torch.zeros((), dtype=dtype, device=rk.labels.device)
    y = torch.where(rk.valid, rk.labels, zero)
    stop = _gain(y, "exp2") / (2.0 ** float(max_label))  # (B, L) R_r
    cont = torch.cumprod(1.0 - stop, dim=-1)  # prod_{i<=r}(1 - R_i)
    before = torch.cat([torch.ones_like(cont[:, :1]), cont[:, :-1]], dim=-1)  # prod_{i<r}
    value = torch.where(rk.topk(k), stop * before / rk.ranks[None, :], zero).sum(-1)
    no_rel = ~((il > 0) & im).any(-1)
    nan_rows = rk.nan | (torch.isnan(il) & im).any(-1) if il.dtype.is_floating_point else rk.nan
    return _finish(value, no_rel, nan_rows, conv, reduction)


# ----------------------------------------------------------------------------------------------------
# Choice metrics (one chosen alternative per situation)
# ----------------------------------------------------------------------------------------------------

#: what ``ctxrank train`` and ``ctxrank experiment`` report on choice data (:func:`is_choice_data`):
#: top-1 accuracy, the hit rate at 3 (recall@3 = hit@3 with one chosen item), MRR, and the mean
#: log-likelihood of the chosen alternative under ``softmax(scores)``
CHOICE_METRICS = ("p@1", "recall@3", "mrr", "loglik")


@torch.no_grad()
def choice_log_likelihood(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int | None = None,
    threshold: float = 1.0,
    no_relevant: float | str = 0.0,
    convention: str = "standard",
    reduction: str = "none",
) -> torch.Tensor:
    """Log-likelihood of the chosen alternative: ``log softmax(scores)_j`` over the list's real items,
    averaged over its chosen items (``label >= threshold``; one in choice data). Computed with
    ``log_softmax`` (no overflow for large scores); padding never enters the softmax. It takes the scores
    as utilities: meaningful for models trained with a softmax likelihood (mnl, DCM's softmax loss,
    ListNet), not for scores on another scale (LambdaMART), whose value depends on that scale. Higher is
    better (0 = certain and right), so it can be ``train.metric``. A list with no chosen item gets
    ``no_relevant``. ``k`` does not apply. Infinite scores: the items scored ``+inf`` share the
    probability equally, and a probability that is exactly 0 (an item scored ``-inf``, or below a
    ``+inf``) counts as the smallest normal float (``log`` = -708.4 in float64), so the value stays finite.
    """
    if _check_k(k) is not None:
        raise ValueError("loglik takes no cutoff (it uses the whole list)")
    conv = metric_convention(convention, no_relevant=no_relevant, threshold=threshold)
    check_score_inputs(scores, labels, mask)
    check_labels(labels, mask, gain=None)
    dtype = _work_dtype(labels)
    v = scores.to(dtype).masked_fill(~mask, -torch.inf)
    logp = torch.log_softmax(v, dim=-1)  # (B, L); a list with no real item is all NaN, masked below
    top = torch.isposinf(v)  # +inf scores share the whole probability (log_softmax gives NaN there)
    n_top = top.sum(-1, keepdim=True)
    logp = torch.where(n_top > 0, torch.where(top, -torch.log(n_top.to(dtype)), -torch.inf), logp)
    floor = math.log(torch.finfo(dtype).tiny)  # P = 0 exactly (infinite scores): the smallest normal
    logp = torch.where(torch.isneginf(logp), torch.full((), floor, dtype=dtype), logp)
    chosen = (labels >= conv.threshold) & mask
    n = chosen.sum(-1)
    value = torch.where(chosen, logp, torch.zeros((), dtype=dtype)).sum(-1) / n.clamp_min(1)
    nan_rows = (torch.isnan(scores) & mask).any(-1) | (torch.isnan(labels) & mask).any(-1)
    return _finish(value, n == 0, nan_rows, conv, reduction)


def is_choice_data(labels: np.ndarray, query_offsets: np.ndarray) -> bool:
    """Labels 0/1 with exactly one label 1 in every query: a choice among alternatives."""
    y = np.asarray(labels)
    if y.size == 0 or not np.isin(y, (0, 1)).all():
        return False
    return bool(np.all(np.add.reduceat(y, np.asarray(query_offsets)[:-1]) == 1))


# ----------------------------------------------------------------------------------------------------
# Names and registry
# ----------------------------------------------------------------------------------------------------

METRICS: dict[str, Callable[..., torch.Tensor]] = {
    "ndcg": ndcg,
    "mean_ndcg": mean_ndcg,
    "dcg": dcg,
    "p": precision,
    "recall": recall,
    "map": average_precision,
    "mrr": reciprocal_rank,
    "err": err,
    "loglik": choice_log_likelihood,
}
METRIC_ALIASES: dict[str, str] = {"precision": "p", "ap": "map", "meanndcg": "mean_ndcg"}
_NEEDS_K = {"p", "recall"}
_METRIC_RE = re.compile(r"\s*([A-Za-z_]+)\s*(?:@\s*(\S+))?\s*")


def parse_metric(name: str) -> tuple[str, int | None]:
    """Parse ``"ndcg@10"`` -> ``("ndcg", 10)``, ``"map"`` -> ``("map", None)``.

    Names (case-insensitive): ndcg, mean_ndcg (alias meanndcg, LETOR 4.0's MeanNDCG), dcg, p (alias
    precision), recall, map (alias ap), mrr, err, loglik (the choice log-likelihood, no cutoff); ``@k``
    optional except for p and recall.

    Raises:
        ValueError: unknown name (the message lists the valid ones), bad or missing cutoff.
    """
    if not isinstance(name, str):
        raise TypeError(f"metric name must be a str like 'ndcg@10', got {type(name).__name__}")
    valid = sorted(METRICS) + sorted(METRIC_ALIASES)
    m = _METRIC_RE.fullmatch(name)
    if m is None:
        raise ValueError(f"cannot parse metric {name!r}; expected NAME or NAME@K with NAME in {valid}")
    base = m.group(1).lower()
    base = METRIC_ALIASES.get(base, base)
    if base not in METRICS:
        raise ValueError(f"unknown metric {m.group(1)!r} in {name!r}; valid names: {valid}")
    k: int | None = None
    if m.group(2) is not None:
        k = parse_int(f"cutoff in {name[:40]!r}", m.group(2), 1, MAX_INT)
    if base in _NEEDS_K and k is None:
        raise ValueError(f"metric {name!r} needs a cutoff, e.g. '{base}@10'")
    if base == "loglik" and k is not None:
        raise ValueError(f"metric {name!r}: loglik takes no cutoff (it uses the whole list)")
    return base, k


def format_metric(base: str, k: int | None) -> str:
    """Canonical name: ``format_metric("ndcg", 10) == "ndcg@10"``."""
    return base if k is None else f"{base}@{k}"


def metric_sort_key(name: str) -> tuple[tuple[int, int, str], ...]:
    """The key that orders metric names naturally, numbers by value: ``ndcg@3`` before ``ndcg@10``
    (text order puts ``ndcg@10`` first), ``ndcg`` before ``ndcg@1``; any name (a run file's, an
    ir-measures name) has one. The one order of every list or table of metric columns."""
    parts = re.split(r"(\d+)", name)
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in parts if t)


# ----------------------------------------------------------------------------------------------------
# Whole datasets
# ----------------------------------------------------------------------------------------------------


def _chunks(lengths_sorted: np.ndarray, budget: int) -> Iterable[tuple[int, int]]:
    """Split queries sorted by length into ``[i, j)`` chunks with ``(j - i) * max_len <= budget``."""
    Q = len(lengths_sorted)
    i = 0
    while i < Q:
        cand = np.arange(i + 1, min(Q, i + budget) + 1)
        cost = (cand - i) * np.maximum(lengths_sorted[cand - 1], 1)
        j = i + max(1, int(np.count_nonzero(cost <= budget)))
        yield i, j
        i = j


def evaluate_queries(
    scores: np.ndarray | Sequence[float],
    labels: np.ndarray | Sequence[float],
    query_offsets: np.ndarray | Sequence[int],
    metrics: Sequence[str] = ("ndcg@10",),
    *,
    convention: str = "standard",
    no_relevant: float | str = 0.0,
    threshold: float = 1.0,
    gain: str = "exp2",
    max_label: float | None = None,
    max_chunk_elements: int = 1 << 20,
) -> dict[str, np.ndarray]:
    """Per-query metric vectors for a whole dataset (the input of paired t-tests).

    Queries are padded into ``(B, L)`` tensors, in chunks of queries of similar length (at most
    ``max_chunk_elements`` padded entries each), and passed to the batched metrics in float64.

    Args:
        scores: ``(N,)`` scores in file order.
        labels: ``(N,)`` labels in file order.
        query_offsets: ``(Q + 1,)`` int, query ``q`` is rows ``offsets[q]:offsets[q + 1]``.
        metrics: names such as ``"ndcg@10"``, ``"map"``, ``"p@5"`` (see :func:`parse_metric`).
        convention: ``"standard"``, ``"letor4"`` or ``"letor3"``.
        no_relevant: ``0.0``, ``1.0`` or ``"skip"``.
        threshold: relevance threshold of P, MAP, MRR.
        gain: ``"exp2"`` or ``"linear"`` (NDCG, MeanNDCG, DCG).
        max_label: ERR's maximum grade, the largest grade of the label scale (required when ERR is
            asked for: 2 for MQ2007/MQ2008/OHSUMED, 4 for MSLR/Istella/Yahoo, i.e.
            ``ctxrank.data.registry.get_spec(name).max_label``; record it with
            ``metric_convention(..., max_label=...)``). A label above it is an error.
        max_chunk_elements: memory bound per chunk.

    Labels are checked first with :func:`check_labels` (negative labels and, with the ``2^y - 1``
    gain of NDCG, DCG and ERR, labels whose gain is not finite are a ``ValueError`` naming the row).

    Returns:
        ``{canonical_name: (Q,) float64 array}`` (NaN for skipped queries), keyed by
        :func:`format_metric` of the parsed name, e.g. ``"p@5"`` for ``"precision@5"``.
    """
    parsed = [parse_metric(m) for m in metrics]
    metric_convention(  # validate early
        convention, gain=gain, no_relevant=no_relevant, threshold=threshold, max_label=max_label
    )
    s, y, off = _check_flat_inputs(scores, labels, query_offsets, max_chunk_elements)
    bases = {b for b, _ in parsed}
    max_label = _check_flat_labels(y, off, bases, gain, max_label)
    options = {
        "gain": gain,
        "no_relevant": no_relevant,
        "threshold": threshold,
        "max_label": max_label,
        "convention": convention,
    }
    lengths = np.diff(off)
    out = {format_metric(b, k): np.full(off.size - 1, np.nan, dtype=np.float64) for b, k in parsed}
    order = np.argsort(lengths, kind="stable")
    for i, j in _chunks(lengths[order], max_chunk_elements):
        qs = order[i:j]  # (B,)
        s_t, y_t, m_t = _padded_queries(s, y, off, qs)
        for base, k in parsed:
            out[format_metric(base, k)][qs] = _batched_metric(base, k, s_t, y_t, m_t, options).numpy()
    return out


def _check_flat_inputs(
    scores: np.ndarray | Sequence[float],
    labels: np.ndarray | Sequence[float],
    query_offsets: np.ndarray | Sequence[int],
    max_chunk_elements: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(scores float64 (N,), labels float64 (N,), offsets int64 (Q + 1,))`` of
    :func:`evaluate_queries`, after checking shapes, offsets and the chunk bound."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    off = np.asarray(query_offsets)
    if s.ndim != 1 or y.shape != s.shape:
        raise ValueError(f"scores and labels must be 1-D arrays of the same length, got {s.shape}, {y.shape}")
    if off.ndim != 1 or off.size < 1 or not np.issubdtype(off.dtype, np.integer):
        raise ValueError(
            f"query_offsets must be a 1-D int array of length Q + 1, got {off.dtype} {off.shape}"
        )
    off = off.astype(np.int64)
    if off[0] != 0 or off[-1] != s.size or np.any(np.diff(off) < 0):
        raise ValueError(
            f"query_offsets must start at 0, end at N = {s.size} and be non-decreasing; "
            f"got first {off[0]}, last {off[-1]}"
        )
    check_int("max_chunk_elements", max_chunk_elements)
    return s, y, off


def _check_flat_labels(
    y: np.ndarray, off: np.ndarray, bases: set[str], gain: str, max_label: float | None
) -> float | None:
    """Refuse labels the asked metrics cannot use (naming the row); returns ERR's checked max_label."""
    lengths = np.diff(off)

    def where(i: int) -> str:
        return f"row {i} (query position {int(np.searchsorted(off, i, side='right')) - 1})"

    summing = bases & {"ndcg", "mean_ndcg", "dcg"}
    uses_exp2 = "err" in bases or (gain == "exp2" and bool(summing))
    longest = int(lengths.max()) if lengths.size else 1
    # ERR's gains are not summed (list_len 1); NDCG/DCG sum a list's gains
    sums = bool(summing) and gain == "exp2"
    check_labels(
        y, gain="exp2" if uses_exp2 else None, list_len=longest if sums else 1, dtype=np.float64, where=where
    )
    if "err" not in bases:
        return max_label
    if max_label is None:
        raise ValueError(
            "ERR needs max_label, the largest grade of the label scale (2 for MQ2007/MQ2008/OHSUMED, "
            "4 for MSLR/Istella/Yahoo: ctxrank.data.registry.get_spec(name).max_label); the largest "
            "label of the evaluated data would make a query's ERR depend on the other queries. Pass "
            "max_label=N (on the command line --max-label N)"
        )
    max_label = _check_max_label(max_label)
    with np.errstate(invalid="ignore"):
        above = y > max_label
    if above.any():
        i = int(np.flatnonzero(above)[0])
        raise ValueError(f"label {y[i]:g} at {where(i)} is above max_label = {max_label:g} (ERR)")
    return max_label


def _padded_queries(
    s: np.ndarray, y: np.ndarray, off: np.ndarray, qs: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries ``qs`` as padded ``(B, L)`` scores, labels (0 on padding) and bool mask."""
    lens = off[qs + 1] - off[qs]
    L = int(lens.max()) if lens.size else 0
    pos = np.arange(L)[None, :]  # (1, L)
    valid = pos < lens[:, None]  # (B, L)
    idx = np.where(valid, off[qs][:, None] + pos, 0)  # (B, L)
    s_t = torch.from_numpy(np.where(valid, s[idx], 0.0))
    y_t = torch.from_numpy(np.where(valid, y[idx], 0.0))
    return s_t, y_t, torch.from_numpy(valid)


def _batched_metric(
    base: str, k: int | None, s_t: torch.Tensor, y_t: torch.Tensor, m_t: torch.Tensor, options: dict
) -> torch.Tensor:
    """One metric over a padded chunk, given the options each metric takes."""
    convention, no_relevant, gain = options["convention"], options["no_relevant"], options["gain"]
    if base == "dcg":
        return dcg(s_t, y_t, m_t, k=k, gain=gain, convention=convention)
    if base in ("ndcg", "mean_ndcg"):
        return METRICS[base](s_t, y_t, m_t, k=k, gain=gain, no_relevant=no_relevant, convention=convention)
    if base == "err":
        return err(
            s_t, y_t, m_t, k=k, max_label=options["max_label"], no_relevant=no_relevant, convention=convention
        )
    return METRICS[base](
        s_t, y_t, m_t, k=k, threshold=options["threshold"], no_relevant=no_relevant, convention=convention
    )


def mean_metrics(per_query: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Mean of each per-query vector, ignoring NaN (skipped queries); NaN if nothing is left."""
    result = {}
    for name, values in per_query.items():
        v = np.asarray(values, dtype=np.float64)
        kept = v[~np.isnan(v)]
        result[name] = float(kept.mean()) if kept.size else float("nan")
    return result


def mean_over_queries(scores: np.ndarray, data: Any, metric: str, no_relevant: float | str) -> float:
    """Mean ``metric`` of ``scores`` (N,) over the queries of ``data`` (a ``RankingData``), leaving out
    the queries where it is not finite (NaN under ``no_relevant = "skip"``); NaN when none is left: a
    fit's validation metric (``train_metric`` of its summary, what ``ctxrank tune`` maximizes)."""
    per = evaluate_queries(
        np.asarray(scores, dtype=np.float64),
        data.labels,
        data.query_offsets,
        [metric],
        no_relevant=no_relevant,
    )[metric]
    ok = np.isfinite(per)
    return float(per[ok].mean()) if ok.any() else float("nan")
