"""``ctxrank.training.separation``: the existence check of a conditional logit's maximum likelihood, on
tiny row sets with a known answer and against Stiemke's theorem of the alternative (an independent LP)."""

import numpy as np
import pytest
from scipy.optimize import linprog

from ctxrank.training.separation import find_separation


def test_separation_on_rows_with_a_known_answer():
    # one coefficient always favours the chosen alternative: it runs off to +inf
    found = find_separation(np.array([[1.0], [2.0]]))
    assert found is not None and list(found.rows) == [0, 1] and found.direction[0] > 0
    # overlap: the same coefficient favours the chosen one in one situation, the other in another
    assert find_separation(np.array([[1.0], [-1.0]])) is None
    # quasi-complete: d = (1, 1) moves rows 0 and 1 and leaves row 2 at zero (not strictly everywhere)
    found = find_separation(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0], [-1.0, 1.0]]))
    assert found is not None and list(found.rows) == [0, 1]
    # a flat column (a constant the same for every alternative) is not separation, and is not named
    assert find_separation(np.array([[1.0, 0.0], [-1.0, 0.0]])) is None
    found = find_separation(np.array([[0.0, 1.0, 0.0], [0.0, 3.0, 0.0]]))
    assert list(found.coefficients()) == [1]
    # equalities (two chosen alternatives of one situation) forbid the direction that splits them
    assert find_separation(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0]])) is None
    found = find_separation(np.array([[1.0, 1.0]]), np.array([[1.0, 0.0]]))
    assert found is not None and list(found.coefficients()) == [1]
    # columns on very different scales (a raw price next to a 0/1 flag): found all the same
    found = find_separation(np.array([[1000.0, 0.0], [-1000.0, 0.001], [0.0, 0.002]]))
    assert found is not None and list(found.coefficients()) == [1]
    # no rows, no coefficients: nothing to separate
    assert find_separation(np.zeros((0, 3))) is None and find_separation(np.zeros((3, 0))) is None


def test_the_named_direction_is_the_sparsest_one_and_moves_only_separated_rows():
    """Never-chosen levels of one categorical column: one constant added to every level changes no
    utility difference, so a least-squares direction would move all ten levels; the sparsest one names
    the never-chosen levels (and any level chosen only against them), not the others."""
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(60):  # situations of 3 alternatives with levels 0..9; levels 7-9 are never chosen
        levels = rng.choice(10, size=3, replace=False)
        chosen = next((k for k in levels if k < 7), None)
        if chosen is None:
            continue
        for k in levels:
            if k != chosen:
                rows.append(np.eye(10)[chosen] - np.eye(10)[k])
    d = np.array(rows)
    found = find_separation(d)
    assert found is not None
    moved = d @ found.direction
    assert moved.min() > -1e-7 and (moved[found.rows] > 1e-7).all()
    assert np.abs(np.delete(moved, found.rows)).max() < 1e-7
    never_chosen = set(np.flatnonzero((d.min(axis=0) < 0) & (d.max(axis=0) <= 0)))
    named = set(found.coefficients())
    assert never_chosen == {7, 8, 9} and never_chosen <= named and len(named) < 10  # not spread out
    assert all(found.direction[k] < 0 for k in never_chosen)


def _stiemke_overlap(d: np.ndarray, e: np.ndarray) -> bool:
    """Stiemke's theorem: no ``x`` with ``D x >= 0, E x = 0, D x != 0`` iff some ``y >= 1`` and free
    ``u`` give ``D' y + E' u = 0`` (a feasibility LP in the dual variables: independent of the check)."""
    r, m = d.shape[0], e.shape[0]
    res = linprog(
        np.zeros(r + m),
        A_eq=np.hstack([d.T, e.T]),
        b_eq=np.zeros(d.shape[1]),
        bounds=[(1.0, None)] * r + [(None, None)] * m,
        method="highs",
    )
    return res.status == 0


@pytest.mark.parametrize("seed", range(40))
def test_separation_agrees_with_stiemkes_theorem_of_the_alternative(seed):
    rng = np.random.default_rng(seed)
    n_rows, n_cols = int(rng.integers(2, 12)), int(rng.integers(1, 5))
    d = rng.normal(size=(n_rows, n_cols)).round(1)
    if seed % 2:  # push many rows one way: separation becomes likely
        d[:, 0] = np.abs(d[:, 0])
    e = rng.normal(size=(int(rng.integers(0, 2)), n_cols)).round(1)
    found = find_separation(d, e)
    assert (found is None) == _stiemke_overlap(d, e), (d, e)
    if found is not None:  # a true direction of recession: >= 0 everywhere, > 0 somewhere, E d = 0
        moved = d @ found.direction
        assert moved.min() > -1e-7 and moved.max() > 1e-7
        assert np.abs(e @ found.direction).max(initial=0.0) < 1e-7


def _failing(real, fail_when):
    """``linprog`` that reports HiGHS's numerical trouble (status 4) on the calls ``fail_when(kw)``
    picks and solves the others."""
    from scipy.optimize import OptimizeResult

    def solve(c, **kw):
        if fail_when(kw):
            return OptimizeResult(status=4, x=None, message="Numerical difficulties encountered")
        return real(c, **kw)

    return solve


def test_a_failed_program_is_solved_again_else_the_answer_is_undetermined_and_says_which(monkeypatch):
    """HiGHS's numerical trouble on one method: the other HiGHS method gives the answer. On every
    method: no exception, :class:`Undetermined` naming the round's program, the status, and the dual
    program's verdict."""
    from ctxrank.training import separation
    from ctxrank.training.separation import Undetermined

    d = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0], [-1.0, 1.0]])
    monkeypatch.setattr(separation, "linprog", _failing(linprog, lambda kw: kw["method"] == "highs"))
    found = find_separation(d)
    assert list(found.rows) == [0, 1] and found.note is None
    rounds = lambda kw: kw.get("bounds") == (-1.0, 1.0)  # noqa: E731 - a round's program, not the dual's
    monkeypatch.setattr(separation, "linprog", _failing(linprog, rounds))
    found = find_separation(d)
    assert isinstance(found, Undetermined)
    assert "round 1's program (maximize the rows not yet separated) failed" in found.reason
    assert "HiGHS (highs) status 4: Numerical difficulties" in found.reason
    assert "the dual program (Stiemke's alternative) is infeasible" in found.reason
    # every program failing, the dual's too: still an answer, not an exception
    monkeypatch.setattr(separation, "linprog", _failing(linprog, lambda kw: True))
    found = find_separation(d)
    assert isinstance(found, Undetermined)
    assert "the dual program (Stiemke's alternative) failed" in found.reason
    # the sparsest direction's program failing: the sum of the rounds' directions, and a note saying so
    sparsest = lambda kw: kw.get("bounds") == (0.0, None)  # noqa: E731
    monkeypatch.setattr(separation, "linprog", _failing(linprog, sparsest))
    found = find_separation(d)
    assert list(found.rows) == [0, 1] and "sum of the rounds' directions" in found.note
    assert (d @ found.direction)[:2].min() > 0 and (d @ found.direction).min() > -1e-7


def test_a_tiny_move_of_a_round_is_checked_by_the_dual_program(monkeypatch):
    """A round whose rows move by 4e-5 (a solution within the solver's tolerances of a problem where
    only d = 0 is feasible, replayed here) is no separation: the dual program holds, the check says the
    maximum exists (it took the rows as separated, and the next round's program failed). A true
    separation by a small margin is confirmed by the same dual program."""
    from scipy.optimize import OptimizeResult

    from ctxrank.training import separation

    d = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])  # overlap: only d = 0
    first = None

    def noisy(c, **kw):
        nonlocal first
        if kw.get("bounds") != (-1.0, 1.0):
            return linprog(c, **kw)
        first = c if first is None else first
        if np.array_equal(c, first):  # the first round: a solution off by 4e-5
            return OptimizeResult(status=0, x=np.array([4e-5, 0.0]), message="Optimization terminated")
        return OptimizeResult(status=2, x=None, message="The problem is infeasible")

    monkeypatch.setattr(separation, "linprog", noisy)
    assert find_separation(d) is None
    monkeypatch.undo()
    tiny = np.array([[1.0, 1.0], [-1.0, -(1.0 - 1e-4)]])  # d = (-1 + 5e-5, 1) moves both rows by 5e-5
    found = find_separation(tiny)
    assert found is not None and list(found.rows) == [0, 1]
