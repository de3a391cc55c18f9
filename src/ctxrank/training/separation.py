"""Does a conditional logit's maximum likelihood exist? Complete and quasi-complete separation.

With utilities linear in the parameters, ``v_qj = z_qj . theta`` (``z_qj``: the design row of
alternative j of situation q), the log-likelihood of the chosen alternatives is concave and bounded
above by 0. Its maximum is attained at a finite ``theta`` unless there is a **direction of recession**
``d``::

    (z_qc - z_qj) . d >= 0   for every situation q, chosen c and unchosen j      (rows of D)
    (z_qc - z_qc') . d = 0   for two chosen alternatives c, c' of one situation   (rows of E)

with at least one row of ``D d`` > 0 (Albert & Anderson 1984, Biometrika 71(1), for the binary logit;
the same argument for the conditional logit). Along such a ``d`` every chosen alternative gains on every
other one, the likelihood increases strictly towards its supremum and never reaches it: the estimate
runs off to infinity (e.g. the constant of a categorical level that is present but never chosen goes
to minus infinity), and where the solver stops decides the scores. A ``d`` with ``D d = 0`` leaves the
likelihood unchanged (a coefficient that is not identified, such as the constant of a level that is the
same for every alternative of a situation): it does not prevent a maximum.

The check (:func:`find_separation`) is exact up to the LP solver's tolerance, not a heuristic on the
solver's path: a linear program (``scipy.optimize.linprog``, HiGHS) per round::

    maximize  sum_r w_r (D d)_r   subject to   D d >= 0,  E d = 0,  -1 <= d_i <= 1

on the columns of ``D`` and ``E`` scaled to a largest absolute value of 1 (which changes ``d``, not
whether it exists). Its optimum is > 0 iff a direction of recession exists. The rows found positive get
weight 0 in the next round, until a round finds none: the rows found are then every row some
direction separates (the sum of the rounds' directions separates them all at once). A last LP names the
coefficients: the direction of smallest L1 norm that moves every separated row.

The check itself never ends a fit. A program that fails (HiGHS status 4, numerical trouble; an
"infeasible" or "unbounded" answer, impossible for these programs) is solved again by the other HiGHS
method; a round whose new rows move by :data:`SURE` at most, within reach of the solver's tolerances, is
solved again with tighter ones. A doubt that remains goes to the dual program (Stiemke's theorem of the
alternative: weights ``y >= 1`` on the rows not found with ``D' y + E' u = 0``, checked on the data),
which says whether any further row can be separated; when it fails too the answer is
:class:`Undetermined`, naming the program that failed and why. At the sizes of the
real choice datasets (12,000-14,000 rows, up to 306 coefficients) a round takes well under a second; a
cheaper special case (a level never chosen) would miss separation by numeric features or combinations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

__all__ = ["Separation", "Undetermined", "find_separation"]

#: a row of ``D d`` above this (columns scaled to 1, ``|d_i| <= 1``) is separated; rounding leaves ~1e-12
TOL = 1e-6
#: a round whose largest new row is at most this (but above :data:`TOL`) is in doubt: the solver's own
#: tolerances (1e-7 per constraint) can add up to it, so the dual program decides (:func:`_overlap`)
SURE = 1e-3
#: LP rounds at most (each finds at least one new separated row)
MAX_ROUNDS = 50
#: the HiGHS solvers tried in turn when one reports trouble (its choice: simplex; interior point)
METHODS = ("highs", "highs-ipm")
#: tighter feasibility tolerances than HiGHS's defaults (1e-7), for a round in doubt
TIGHT = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


@dataclass(frozen=True)
class Separation:
    """A direction of recession: ``rows`` (int, every row of ``D`` some direction makes > 0; only some
    of them when ``complete`` is false: :data:`MAX_ROUNDS` rounds were not enough) and ``direction``
    (the sparsest one that moves them all, in the unscaled coefficients: its non-zero entries are the
    coefficients that run off to infinity, its signs the way they go; ``note`` says when the sparsest
    program failed and the direction is the sum of the rounds' ones instead)."""

    rows: np.ndarray
    direction: np.ndarray
    complete: bool = True
    note: str | None = None

    def coefficients(self, rel: float = 1e-6) -> np.ndarray:
        """Indices of the coefficients that move along the direction, largest move first."""
        size = np.abs(self.direction)
        top = size.max(initial=0.0)
        moving = np.flatnonzero(size > rel * top) if top > 0 else np.zeros(0, dtype=np.int64)
        return moving[np.argsort(-size[moving], kind="stable")]


@dataclass(frozen=True)
class Undetermined:
    """The check could not decide: ``reason`` names the linear program that failed and why."""

    reason: str


def find_separation(d_rows, e_rows=None) -> Separation | Undetermined | None:
    """The direction of recession of the rows ``D`` (inequalities, a SciPy sparse or dense ``(R, P)``
    matrix) and ``E`` (equalities, ``(R', P)`` or None); None when the maximum likelihood exists;
    :class:`Undetermined` when the solver cannot tell (never an exception: the caller goes on).

    A round's program that fails (any HiGHS status but 0: the programs are feasible, ``d = 0``, and
    bounded, so every failure is numerical) is solved again by the other HiGHS methods; a round whose
    new rows move by at most :data:`SURE` is re-solved with tighter tolerances. Either way, when the
    doubt remains, the dual program (:func:`_overlap`, Stiemke's alternative) decides: feasible, no
    further row is separated; infeasible, the rows are; failed as well, the answer is undetermined.
    """
    d_rows = sp.csr_matrix(d_rows, dtype=np.float64)
    n_rows, n_cols = d_rows.shape
    if n_rows == 0 or n_cols == 0:
        return None
    e_rows = sp.csr_matrix((0, n_cols)) if e_rows is None else sp.csr_matrix(e_rows, dtype=np.float64)
    scale = abs(sp.vstack([d_rows, e_rows])).max(axis=0).toarray().ravel()
    scale[scale == 0] = 1.0
    d_scaled, e_scaled = d_rows @ sp.diags(1.0 / scale), e_rows @ sp.diags(1.0 / scale)
    found, complete = np.zeros(n_rows, dtype=bool), True
    total = np.zeros(n_cols)  # the sum of the rounds' directions: it moves every row found
    for round_no in range(1, MAX_ROUNDS + 1):
        x, failures = _round(d_scaled, e_scaled, found, {})
        new, peak = _new_rows(d_scaled, x, found)
        if x is not None and TOL < peak <= SURE:  # in doubt: tighter tolerances
            x_tight, more = _round(d_scaled, e_scaled, found, TIGHT)
            failures += more
            if x_tight is not None:
                x = x_tight
                new, peak = _new_rows(d_scaled, x, found)
        if x is not None and (peak <= TOL or peak > SURE):
            if not new.any():
                break
            found |= new
            total += x
            continue
        # the round failed, or its new rows moved too little to trust: the dual program decides
        what = f"round {round_no}'s program (maximize the rows not yet separated) " + (
            "failed: " + "; ".join(failures)
            if x is None
            else f"moved its new rows by {peak:.2g} at most (<= {SURE:g}: in doubt)"
        )
        overlap, why = _overlap(d_scaled, e_scaled, found)
        if overlap is True:  # no further row can be separated: the doubtful rows were rounding
            break
        if overlap is False and x is not None and new.any():  # the dual confirms the rows
            found |= new
            total += x
            continue
        return Undetermined(f"{what}, and the dual program (Stiemke's alternative) {why}")
    else:
        complete = False
    if not found.any():
        return None
    direction, note = _sparsest(d_scaled, e_scaled, found)
    if direction is None:
        direction = total
    return Separation(np.flatnonzero(found), direction / scale, complete, note)


def _solve(c, a_ub, b_ub, a_eq, b_eq, bounds, options) -> tuple[np.ndarray | None, list[str]]:
    """``linprog`` with each of :data:`METHODS` until one reports an optimum (status 0); its ``x`` (None
    when none did) and what each failed one said."""
    failures = []
    for method in METHODS:
        res = linprog(
            c,
            A_ub=a_ub,
            b_ub=b_ub,
            A_eq=a_eq if a_eq.shape[0] else None,
            b_eq=b_eq if a_eq.shape[0] else None,
            bounds=bounds,
            method=method,
            options=options,
        )
        if res.status == 0 and res.x is not None and np.isfinite(res.x).all():
            return res.x, failures
        failures.append(f"HiGHS ({method}) status {res.status}: {res.message}")
    return None, failures


def _round(d_scaled, e_scaled, found: np.ndarray, options: dict) -> tuple[np.ndarray | None, list[str]]:
    """One round: ``max sum_{r not found} (D d)_r  s.t.  D d >= 0, E d = 0, -1 <= d <= 1``."""
    weight = (~found).astype(np.float64)
    return _solve(
        -(d_scaled.T @ weight),
        -d_scaled,
        np.zeros(d_scaled.shape[0]),
        e_scaled,
        np.zeros(e_scaled.shape[0]),
        (-1.0, 1.0),
        options,
    )


def _new_rows(d_scaled, x: np.ndarray | None, found: np.ndarray) -> tuple[np.ndarray, float]:
    """The rows ``x`` moves by more than :data:`TOL` that were not found yet, and the largest move."""
    if x is None:
        return np.zeros_like(found), 0.0
    moved = np.where(found, 0.0, d_scaled @ x)
    return (moved > TOL) & ~found, float(moved.max(initial=0.0))


def _overlap(d_scaled, e_scaled, found: np.ndarray) -> tuple[bool | None, str]:
    """Whether no row but those ``found`` can be separated, by the dual program (Motzkin / Stiemke's
    theorem of the alternative): some ``y`` with ``y_r >= 1`` for the rows not found, ``y_r >= 0`` for
    the others, and a free ``u`` with ``D' y + E' u = 0``. True: such ``y`` exists (checked on the
    data: the residual is at most 1e-6 of ``|y|``), False: the program is infeasible, None: it failed;
    and what it found."""
    n_rows, n_eq = d_scaled.shape[0], e_scaled.shape[0]
    a_eq = sp.hstack([d_scaled.T, e_scaled.T]).tocsr()
    lower = np.where(found, 0.0, 1.0)
    bounds = [(lo, None) for lo in lower] + [(None, None)] * n_eq
    for method in METHODS:
        res = linprog(
            np.concatenate([np.ones(n_rows), np.zeros(n_eq)]),  # the smallest y: a certificate in scale
            A_eq=a_eq,
            b_eq=np.zeros(a_eq.shape[0]),
            bounds=bounds,
            method=method,
        )
        if res.status == 2:
            return False, "is infeasible (some further row is separated, but not which)"
        if res.status == 0 and res.x is not None:
            residual = float(np.abs(a_eq @ res.x).max(initial=0.0))
            size = float(np.abs(res.x).max(initial=1.0))
            if residual <= 1e-6 * size:
                return True, "holds"
            return None, f"found a certificate that does not hold on the data (residual {residual:.2g})"
    return None, f"failed as well (HiGHS status {res.status}: {res.message})"


def _sparsest(d_scaled, e_scaled, found: np.ndarray) -> tuple[np.ndarray | None, str | None]:
    """The direction of smallest L1 norm that moves every separated row by at least 1 (and, as every
    direction of recession, no other row): ``d = d+ - d-``, one more linear program. Its non-zero
    entries are the coefficients that must run off; a flat direction (e.g. one constant added to every
    level of a categorical column) is left out, where a least-squares direction would spread over it.
    (None, why) when the program fails."""
    n_cols = d_scaled.shape[1]
    split = sp.hstack([d_scaled, -d_scaled]).tocsr()
    equal = sp.hstack([e_scaled, -e_scaled]).tocsr()
    moved = -found.astype(np.float64)
    x, failures = _solve(np.ones(2 * n_cols), -split, moved, equal, np.zeros(equal.shape[0]), (0.0, None), {})
    if x is None:
        return None, (
            "the program for the sparsest direction failed (" + "; ".join(failures) + "): the coefficients "
            "named are those of the sum of the rounds' directions"
        )
    return x[:n_cols] - x[n_cols:], None
