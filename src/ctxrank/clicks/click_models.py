"""Click models: how a simulated user clicks on a list shown in order.

Each model is a frozen dataclass of its parameters (checked when built) with two methods over ``S``
sessions, each shown ``K`` items in order (position ``r = 1..K``):

- ``sample(relevance, mask, rng) -> clicks``: bool ``(S, K)``, drawn with a ``np.random.Generator``,
  vectorised over sessions (the sequential models loop over the ``K`` positions only);
- ``click_probability(relevance, mask) -> p``: float64 ``(S, K)``, the exact marginal probability of a
  click at each position (closed form for PBM and cascade, the models' forward recursion for DCM and
  DBN). The offline estimators and the tests check sampled logs against it.

``relevance`` is float ``(S, K)`` in ``[0, 1]``; ``mask`` bool ``(S, K)``, True = an item was shown there
(padding is never clicked and, in the sequential models, passed over without stopping). Graded labels
are mapped to ``[0, 1]`` by :func:`label_relevance`. Every model turns relevance ``r`` into the
probability that an examined item is clicked (its attractiveness) by the noisy linear rule

    ``a = eps_minus + (eps_plus - eps_minus) * r``

so that binary relevance gives ``eps_plus`` for a relevant item and ``eps_minus`` (click noise) for a
non-relevant one, and the exponential mapping of graded labels with ``eps_plus = 1`` gives the rule of
Chuklin et al. (2015) and Ai et al. (2018), ``a = eps + (1 - eps) (2^y - 1) / (2^y_max - 1)``.

Registry: :data:`CLICK_MODELS` (name -> class); :func:`click_model` builds one by name with its
parameters, refusing unknown names and parameters with the valid ones listed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ctxrank._propensity import curve

__all__ = [
    "CLICK_MODELS",
    "RELEVANCE_RULES",
    "CascadeModel",
    "DependentClickModel",
    "DynamicBayesianNetwork",
    "PositionBasedModel",
    "click_model",
    "label_relevance",
]

RELEVANCE_RULES = ("exponential", "linear", "binary")


def label_relevance(
    labels: Any, max_label: float, rule: str = "exponential", threshold: float = 1.0
) -> np.ndarray:
    """float64 relevance in ``[0, 1]`` of graded labels (any shape).

    Rules: ``exponential`` ``(2^y - 1) / (2^y_max - 1)`` (Chuklin, Markov & de Rijke 2015, "Click Models
    for Web Search"; Ai et al. 2018, "Unbiased learning to rank with unbiased propensity
    estimation"), ``linear`` ``y / y_max``, ``binary`` ``1`` where ``y >= threshold`` else ``0``.

    Raises:
        ValueError: an unknown rule (the valid ones listed), ``max_label <= 0``, or labels outside
            ``[0, max_label]``.
    """
    if rule not in RELEVANCE_RULES:
        raise ValueError(f"relevance rule must be one of {list(RELEVANCE_RULES)}, got {rule!r}")
    y = np.asarray(labels, dtype=np.float64)
    if not max_label > 0:
        raise ValueError(f"max_label must be > 0, got {max_label}")
    if y.size and (not np.isfinite(y).all() or y.min() < 0 or y.max() > max_label):
        raise ValueError(f"labels must lie in [0, {max_label}], got {np.nanmin(y)}..{np.nanmax(y)}")
    if rule == "exponential":
        return (np.exp2(y) - 1.0) / (2.0**max_label - 1.0)
    if rule == "linear":
        return y / max_label
    return (y >= threshold).astype(np.float64)


def _unit(name: str, value: float) -> None:
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")


def _inputs(relevance: Any, mask: Any) -> tuple[np.ndarray, np.ndarray]:
    """Checked float64 relevance and bool mask of one shape (S, K)."""
    rel = np.asarray(relevance, dtype=np.float64)
    m = np.asarray(mask)
    if rel.ndim != 2 or m.shape != rel.shape:
        raise ValueError(f"relevance and mask must both be (S, K), got {rel.shape} and {m.shape}")
    if m.dtype != np.bool_:
        raise TypeError(f"mask must be bool (True = an item was shown), got {m.dtype}")
    if rel.size and (not np.isfinite(rel).all() or rel.min() < 0 or rel.max() > 1):
        raise ValueError("relevance must lie in [0, 1] (map graded labels with label_relevance)")
    return rel, m


@dataclass(frozen=True)
class _ClickModel:
    """Attractiveness ``a = eps_minus + (eps_plus - eps_minus) * relevance`` shared by every model."""

    name: ClassVar[str] = ""
    eps_minus: float = 0.1
    eps_plus: float = 1.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name not in ("eta", "continuation"):  # checked by their models
                _unit(f.name, getattr(self, f.name))

    def attractiveness(self, relevance: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """float64 (S, K) click probability of an examined item; 0 where nothing was shown."""
        return np.where(mask, self.eps_minus + (self.eps_plus - self.eps_minus) * relevance, 0.0)

    def sample(self, relevance: Any, mask: Any, rng: np.random.Generator) -> np.ndarray:
        """bool (S, K) clicks of S sessions."""
        rel, m = _inputs(relevance, mask)
        return self._sample(self.attractiveness(rel, m), rng)

    def click_probability(self, relevance: Any, mask: Any) -> np.ndarray:
        """float64 (S, K) exact probability of a click at each position."""
        rel, m = _inputs(relevance, mask)
        return self._probability(self.attractiveness(rel, m))

    def _sample(self, a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def _probability(self, a: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class PositionBasedModel(_ClickModel):
    """Position-based model (PBM): ``P(C_r = 1) = P(E_r = 1) * a = (1 / r)^eta * a``.

    Examination depends on the position only, attractiveness on the item only. Richardson, Dominowska &
    Ragno (2007), "Predicting clicks: estimating the click-through rate for new ads"; Craswell et al.
    (2008), "An experimental comparison of click position-bias models"; the examination curve
    ``(1/r)^eta`` and click noise of Joachims, Swaminathan & Schnabel (2017), "Unbiased learning-to-rank
    with biased feedback".
    """

    name: ClassVar[str] = "pbm"
    eta: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.eta, bool) or not (
            isinstance(self.eta, (int, float)) and 0.0 <= self.eta < float("inf")
        ):
            raise ValueError(f"eta must be a finite number >= 0, got {self.eta!r}")

    def examination(self, k: int) -> np.ndarray:
        """float64 (K,) ``(1 / r)^eta`` for r = 1..K."""
        return curve(None, self.eta, k)

    def _probability(self, a: np.ndarray) -> np.ndarray:
        return self.examination(a.shape[1]) * a

    def _sample(self, a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rng.random(a.shape) < self._probability(a)


@dataclass(frozen=True)
class CascadeModel(_ClickModel):
    """Cascade model: the user scans down, clicks the first attractive item and stops, so at most one
    click: ``P(C_r = 1) = a_r * prod_{j < r} (1 - a_j)``. Craswell, Zoeter, Taylor & Ramsey (2008), "An
    experimental comparison of click position-bias models"."""

    name: ClassVar[str] = "cascade"

    def _probability(self, a: np.ndarray) -> np.ndarray:
        reached = np.cumprod(np.hstack([np.ones((a.shape[0], 1)), 1.0 - a[:, :-1]]), axis=1)
        return reached * a

    def _sample(self, a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        attractive = rng.random(a.shape) < a
        first = np.argmax(attractive, axis=1)
        clicks = np.zeros(a.shape, dtype=bool)
        hit = attractive.any(axis=1)
        clicks[np.flatnonzero(hit), first[hit]] = True
        return clicks


@dataclass(frozen=True)
class DependentClickModel(_ClickModel):
    """Dependent click model (DCM): the user scans down; an examined item is clicked with probability
    ``a_r``; after a click at position r the user goes on with probability ``lambda_r``, after no click
    always. Forward recursion: ``P(E_1) = 1``, ``P(C_r) = P(E_r) a_r``,
    ``P(E_{r+1}) = P(E_r) (1 - a_r + a_r lambda_r)``. Guo, Liu & Wang (2009), "Efficient multiple-click
    models in web search".

    ``continuation``: ``lambda_1, lambda_2, ...``; positions past its end use its last value.
    """

    name: ClassVar[str] = "dcm"
    continuation: tuple[float, ...] = (0.6, 0.5, 0.4)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.continuation, tuple) or not self.continuation:
            raise ValueError(
                f"continuation must be a non-empty tuple of probabilities, got {self.continuation!r}"
            )
        for i, v in enumerate(self.continuation, 1):
            _unit(f"continuation[{i}]", v)

    def lambdas(self, k: int) -> np.ndarray:
        """float64 (K,) continuation probability after a click at r = 1..K."""
        lam = np.asarray(self.continuation, dtype=np.float64)
        return lam[np.minimum(np.arange(k), lam.size - 1)]

    def _go_on(self, a: np.ndarray) -> np.ndarray:
        """(S, K) probability of examining r + 1 given r examined and clicked."""
        return np.broadcast_to(self.lambdas(a.shape[1]), a.shape)

    def _probability(self, a: np.ndarray) -> np.ndarray:
        go_on = self._go_on(a)
        examined = np.cumprod(np.hstack([np.ones((a.shape[0], 1)), (1 - a + a * go_on)[:, :-1]]), axis=1)
        return examined * a

    def _sample(self, a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        go_on = self._go_on(a)
        s, k = a.shape
        u = rng.random((s, k, 2))  # [.., 0]: click, [.., 1]: go on after it
        clicks = np.zeros((s, k), dtype=bool)
        examining = np.ones(s, dtype=bool)
        for r in range(k):
            clicks[:, r] = examining & (u[:, r, 0] < a[:, r])
            examining &= ~clicks[:, r] | (u[:, r, 1] < go_on[:, r])
        return clicks


@dataclass(frozen=True)
class DynamicBayesianNetwork(_ClickModel):
    """Dynamic Bayesian network model (DBN): the user scans down with perseverance ``gamma``; an
    examined item is clicked with probability ``a_r``; a clicked item satisfies with probability
    ``s_r = sat_minus + (sat_plus - sat_minus) * relevance`` and a satisfied user stops. Forward
    recursion: ``P(E_1) = 1``, ``P(C_r) = P(E_r) a_r``,
    ``P(E_{r+1}) = P(E_r) gamma (1 - a_r s_r)``. Chapelle & Zhang (2009), "A dynamic Bayesian network
    click model for web search ranking"."""

    name: ClassVar[str] = "dbn"
    gamma: float = 0.9
    sat_minus: float = 0.0
    sat_plus: float = 0.7

    def satisfaction(self, relevance: np.ndarray) -> np.ndarray:
        return self.sat_minus + (self.sat_plus - self.sat_minus) * relevance

    def sample(self, relevance: Any, mask: Any, rng: np.random.Generator) -> np.ndarray:
        rel, m = _inputs(relevance, mask)
        a, s = self.attractiveness(rel, m), self.satisfaction(rel)
        k = a.shape[1]
        u = rng.random((a.shape[0], k, 3))  # click, satisfied, persevere
        clicks = np.zeros(a.shape, dtype=bool)
        examining = np.ones(a.shape[0], dtype=bool)
        for r in range(k):
            clicks[:, r] = examining & (u[:, r, 0] < a[:, r])
            satisfied = clicks[:, r] & (u[:, r, 1] < s[:, r])
            # padding is passed over: the user neither stops nor loses perseverance there
            examining = examining & ~satisfied & ((u[:, r, 2] < self.gamma) | ~m[:, r])
        return clicks

    def click_probability(self, relevance: Any, mask: Any) -> np.ndarray:
        rel, m = _inputs(relevance, mask)
        a, s = self.attractiveness(rel, m), self.satisfaction(rel)
        step = np.where(m, self.gamma * (1.0 - a * s), 1.0)
        examined = np.cumprod(np.hstack([np.ones((a.shape[0], 1)), step[:, :-1]]), axis=1)
        return examined * a


#: name -> click model class
CLICK_MODELS: dict[str, type[_ClickModel]] = {
    m.name: m for m in (PositionBasedModel, CascadeModel, DependentClickModel, DynamicBayesianNetwork)
}


def click_model(name: str, **params: Any) -> _ClickModel:
    """The click model ``name`` (one of :data:`CLICK_MODELS`) with ``params`` (the others default).

    Raises:
        ValueError: an unknown name or parameter (the valid ones listed), or a parameter out of range.
    """
    if name not in CLICK_MODELS:
        raise ValueError(f"unknown click model {name!r}; valid: {sorted(CLICK_MODELS)}")
    cls = CLICK_MODELS[name]
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ValueError(f"click model {name!r} has no parameter(s) {unknown}; valid: {valid}")
    return cls(**params)
