"""Tests of the structured solver of problem (12), ``embgeo.attention.solvers`` (via ``max_margin_selection``).

References, all in this run: the previous exact dense LDP/NNLS solver
(:mod:`reference.attention_selection`) and cvxpy + Clarabel on the raw constraints. Every
certificate is re-derived here from E and the constraints enumerated naively from X (one pair per sequence
and (s, t)), never from the solver's own pair list.
No timings: speed lives in ``benchmarks/bench_attention_selection.py``.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from embgeo.attention import solvers
from embgeo.attention.data import synthetic_levels
from embgeo.attention.theory import max_margin_selection, selection
from embgeo.errors import TooLargeError
from reference.attention_selection import cvxpy_selection, reference_max_margin_selection

INFEASIBLE = (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE)


# -- independent helpers -------------------------------------------------------------------------

def naive_constraints(X, selected, pad_id=None):
    """Sets of inequality pairs (s, t) and tie pairs (s < s'), enumerated sequence by sequence."""
    ineq, ties = set(), set()
    for x, S in zip(X, selected, strict=True):
        present = {int(t) for t in x if pad_id is None or t != pad_id}
        S = {int(s) for s in S}
        ineq |= {(s, t) for s in S for t in present - S}
        ties |= {(s, s2) for s in S for s2 in S if s < s2}
    return ineq, ties




def tie_projector(E, ties):
    """Residual map v ↦ v − (its least-squares fit on the tie rows), i.e. P⊥ v."""
    D = np.array([E[s] - E[s2] for s, s2 in sorted(ties)]).reshape(-1, E.shape[1])
    if not len(D):
        return lambda v: v
    return lambda v: v - D.T @ np.linalg.lstsq(D.T, v, rcond=None)[0]


def check_optimal(E, X, selected, res, pad_id=None, tol=1e-7):
    """KKT of (12) at res.p, from E: feasibility, a tight pair, μ ≥ 0, complementarity, stationarity, duality."""
    ineq, ties = naive_constraints(X, selected, pad_id)
    assert {tuple(map(int, q)) for q in res.pairs} == ineq
    assert {tuple(map(int, q)) for q in res.eq_pairs} == ties
    p, mu = res.p, res.multipliers
    A = E[res.pairs[:, 0]] - E[res.pairs[:, 1]]
    margins = A @ p
    scale = max(np.linalg.norm(p), 1.0)
    np.testing.assert_allclose(res.margins, margins, atol=1e-12 * scale)
    assert margins.min() >= 1 - tol and margins.min() == pytest.approx(1.0, abs=tol)  # Lemma C.7
    for s, s2 in ties:
        assert abs((E[s] - E[s2]) @ p) <= tol * scale
    assert np.all(mu >= 0)
    assert np.max(mu * np.abs(margins - 1)) <= tol * max(mu.max(), 1.0)
    residual = tie_projector(E, ties)(p - A.T @ mu)  # p = Aᵀμ + Dᵀν for some ν
    assert np.linalg.norm(residual) <= tol * scale
    if len(res.eq_pairs):  # the solver's own ν works too
        D = E[res.eq_pairs[:, 0]] - E[res.eq_pairs[:, 1]]
        assert np.linalg.norm(p - A.T @ mu - D.T @ res.eq_multipliers) <= tol * scale
    assert np.linalg.norm(p) ** 2 == pytest.approx(mu.sum(), rel=tol)  # strong duality
    assert res.norm == pytest.approx(np.linalg.norm(p), rel=1e-14) and res.margin == pytest.approx(1 / res.norm)
    assert res.gap <= 1e-8 and res.stationarity <= 1e-8 and res.complementarity <= 1e-8
    assert set(np.flatnonzero(mu > 1e-9 * mu.max())) <= set(res.active.tolist())


def check_infeasible(E, X, selected, res, pad_id=None):
    """Farkas: w ≥ 0, Σw = 1, Σ w_j (E_s − E_t) in the span of the tie rows (up to 1e-9 · max‖E_s‖)."""
    ineq, ties = naive_constraints(X, selected, pad_id)
    assert {tuple(map(int, q)) for q in res.pairs} == ineq
    assert np.all(np.isnan(res.p)) and res.norm == np.inf and res.margin == 0.0
    w = res.farkas
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-12)
    v = tie_projector(E, ties)((E[res.pairs[:, 0]] - E[res.pairs[:, 1]]).T @ w)
    assert np.linalg.norm(v) <= 1e-9 * np.max(np.linalg.norm(E, axis=1))


def agree(E, X, selected, pad_id=None):
    """Solve with ours, the old NNLS reference and cvxpy; check every certificate; return ours."""
    res = max_margin_selection(E, X, selected, pad_id=pad_id)
    old = reference_max_margin_selection(E, X, selected, pad_id=pad_id)
    status, p_ref = cvxpy_selection(E, X, selected, pad_id)
    assert res.status == old.status
    if res.status == "optimal":
        check_optimal(E, X, selected, res, pad_id)
        np.testing.assert_allclose(res.p, old.p, atol=1e-8 * max(1.0, old.norm))
        if res.norm > 0:
            assert status == cp.OPTIMAL
            np.testing.assert_allclose(res.p, p_ref, atol=1e-5 * max(1.0, res.norm))
    else:
        check_infeasible(E, X, selected, res, pad_id)
        assert status in INFEASIBLE
    return res


# -- instances -------------------------------------------------------------------------------------

def instance(seed, V, d, n, T, kind, pad=None):
    """Random (E, X, selected) with a duplicated (shuffled) sequence and a repeated token.

    kind: "random" (random non-empty selections: often infeasible), "ordered" (the first token of
    a fixed random order: acyclic, feasible when the rows are independent), "cells" (every token of
    the top cell of that order, cells of 3: ties), "realized" (the selection of a random p, with
    two exact ties built into E: always feasible).
    """
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(V, d)) / np.sqrt(d)
    E += rng.normal(size=V)[:, None] * rng.normal(size=d)[None, :] / np.sqrt(d)  # a common direction (Lemma 4.1)
    X = rng.integers(0, V, size=(n, T))
    X[0, 0] = X[0, 1]
    X[-1] = rng.permutation(X[0])
    rank = np.argsort(rng.permutation(V))
    if kind == "realized":
        p = rng.normal(size=d)
        for a, b in [(0, 1), (2, 3)]:
            z = rng.normal(size=d)
            E[b] = E[a] + z - (z @ p) / (p @ p) * p  # equal scores under p, different embeddings
        X[1, :4] = [0, 1, 2, 3]
        sel = [set(S) for S in selection(E, X, p, tol=1e-9)]
    else:
        sel = []
        for x in X:
            u = np.unique(x)
            if kind == "random":
                sel.append(set(rng.choice(u, int(rng.integers(1, min(3, u.size) + 1)), replace=False).tolist()))
            elif kind == "ordered":
                sel.append({int(u[np.argmin(rank[u])])})
            else:
                cell = rank[u] // 3
                sel.append(set(u[cell == cell.min()].tolist()))
        sel[-1] = set(sel[0])
    if pad is not None:
        X = np.hstack([X, np.full((n, 2), pad)])
    return E, X, sel


SHAPES = {"d>V": (8, 14), "d=V": (10, 10), "d<V": (14, 6)}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("kind", ["random", "ordered", "cells", "realized"])
def test_every_shape_and_kind_agrees_with_nnls_and_cvxpy(shape, kind):
    V, d = SHAPES[shape]
    statuses = set()
    for seed in range(6):
        res = agree(*instance(seed, V, d, n=6, T=5, kind=kind))
        statuses.add(res.status)
    if kind in ("realized",) or (kind in ("ordered", "cells") and shape != "d<V"):
        assert statuses == {"optimal"}


def test_both_coordinate_systems_and_both_outcomes_are_exercised():
    methods = set()
    for seed in range(12):
        for V, d in SHAPES.values():
            methods.add(agree(*instance(100 + seed, V, d, n=8, T=5, kind="random")).method)
            methods.add(agree(*instance(200 + seed, V, d, n=8, T=5, kind="ordered")).method)
    assert "interior point (score space) + exact active-set finish" in methods
    assert "interior point (embedding space) + exact active-set finish" in methods
    assert "interior point (embedding space) + exact Farkas finish (NNLS on the support)" in methods
    assert "direct conflict" in methods


@pytest.mark.parametrize("pad", [-1, 3])
def test_padding_is_ignored(pad):
    """pad_id outside [0, V) or a real id (then that id is no token anywhere)."""
    E, X, sel = instance(5, 9, 12, 5, 4, "ordered")
    X = np.where(X == pad, (pad + 1) % 9, X)
    sel = [{(s + 1) % 9 if s == pad else s for s in S} for S in sel]
    Xp = np.hstack([X, np.full((5, 3), pad)])
    plain = max_margin_selection(E, X, sel)
    padded = agree(E, Xp, sel, pad_id=pad)
    np.testing.assert_allclose(padded.p, plain.p, atol=1e-12 * plain.norm)


def test_duplicate_pairs_across_sequences_are_one_constraint():
    E, X, sel = instance(3, 10, 16, 6, 5, "cells")
    base = max_margin_selection(E, X, sel)
    rng = np.random.default_rng(0)
    X3 = np.vstack([X, rng.permuted(X, axis=1), X[::-1]])
    big = agree(E, X3, sel + sel + sel[::-1])
    np.testing.assert_array_equal(big.pairs, base.pairs)
    assert big.n_raw == 3 * base.n_raw and big.n_rows == base.n_rows
    np.testing.assert_allclose(big.p, base.p, atol=1e-12 * base.norm)


# -- infeasible by construction ------------------------------------------------------------------

def test_cycle_gives_an_exact_farkas_vector():
    E = np.random.default_rng(0).normal(size=(3, 10))
    X, sel = np.array([[0, 1], [1, 2], [2, 0]]), [{0}, {1}, {2}]  # 0 > 1 > 2 > 0
    res = agree(E, X, sel)
    assert res.method == "directed cycle" and np.count_nonzero(res.farkas) == 3


def test_cycle_through_a_tie_class():
    E = np.random.default_rng(1).normal(size=(4, 12))
    X = np.array([[0, 1, 3], [1, 2, 3], [2, 0, 3]])
    sel = [{0, 1}, {1}, {2}]  # 0 = 1 (tie), 1 > 2, 2 > 0: the classes {0, 1} and {2} form a 2-cycle
    res = agree(E, X, sel)
    assert res.method == "directed cycle"
    assert {tuple(map(int, q)) for q in res.pairs[res.farkas > 0]} == {(1, 2), (2, 0)}


def test_direct_conflict_through_a_chain_of_ties():
    E = np.random.default_rng(2).normal(size=(5, 9))
    X = np.array([[0, 1, 4], [1, 2, 4], [0, 2, 3]])
    sel = [{0, 1}, {1, 2}, {0}]  # 0 = 1 = 2 through two ties, yet 0 > 2 in the third sequence
    res = agree(E, X, sel)
    assert res.method == "direct conflict" and res.farkas_residual == 0.0
    assert tuple(map(int, res.pairs[np.argmax(res.farkas)])) == (0, 2)


def test_ties_spanning_the_space():
    E = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [2.0, 3.0]])
    X = np.array([[0, 1, 2, 3]])
    res = agree(E, X, [{0, 1, 2}])  # the ties force p ⊥ R², so p = 0
    assert res.method == "ties span the space" and res.rank == 0


def test_acyclic_but_infeasible_in_embedding_space():
    # d = 1: 0 > 1 asks −p ≥ 1, 2 > 1 asks p ≥ 1; the class graph 0 → 1 ← 2 is acyclic.
    E = np.array([[1.0], [2.0], [3.0]])
    X = np.array([[0, 1], [2, 1]])
    res = agree(E, X, [{0}, {2}])
    assert res.method.startswith("interior point (embedding space)") and "Farkas" in res.method
    np.testing.assert_allclose(res.farkas, [0.5, 0.5], atol=1e-12)


# -- numerics and structure ------------------------------------------------------------------------

def test_ill_conditioned_full_rank_rows_use_embedding_space():
    """Independent rows with cond ≈ 1e8: score space would need M = (FFᵀ)⁻¹ ~ 1e16; embedding space is used."""
    rng = np.random.default_rng(4)
    E = rng.normal(size=(8, 10))
    E[1] = E[0] + 1e-8 * rng.normal(size=10)
    X = np.array([[0, 2, 3], [1, 4, 5], [6, 0, 7]])
    res = agree(E, X, [{0}, {1}, {6}])
    assert res.rank == res.n_classes and "embedding space" in res.method


def test_scale_invariance():
    E, X, sel = instance(7, 10, 10, 6, 5, "ordered")
    a = max_margin_selection(E, X, sel)
    b = max_margin_selection(1e-3 * E, X, sel)
    np.testing.assert_allclose(b.p, 1e3 * a.p, rtol=1e-9)
    np.testing.assert_allclose(b.multipliers, 1e6 * a.multipliers, rtol=1e-6, atol=1e-9 * b.multipliers.max())


@pytest.mark.parametrize("bitmap_max", [0, 1 << 27])  # sorting, or V² bitmaps
def test_pair_deduplication_in_chunks(monkeypatch, bitmap_max):
    E, X, sel = instance(8, 12, 6, 9, 6, "cells")
    ineq, ties = naive_constraints(X, sel)
    monkeypatch.setattr(solvers, "PAIR_BITMAP_MAX", bitmap_max)
    for chunk in (5, 1 << 22):
        monkeypatch.setattr(solvers, "PAIR_CHUNK", chunk)
        res = max_margin_selection(E, X, sel)
        assert [tuple(q) for q in res.pairs.tolist()] == sorted(ineq)
        assert [tuple(q) for q in res.eq_pairs.tolist()] == sorted(ties)
        assert res.n_raw == sum(len(S) * (len(set(x.tolist())) - len(S)) for x, S in zip(X, sel, strict=True))


def test_find_cycle_returns_a_closed_directed_walk():
    rng = np.random.default_rng(0)
    for _ in range(20):
        g = int(rng.integers(3, 30))
        edges = np.unique(rng.integers(0, g, size=(3 * g, 2)), axis=0)
        edges = edges[edges[:, 0] != edges[:, 1]]
        cycle = solvers.find_cycle(g, edges)
        dag = edges[edges[:, 0] < edges[:, 1]]  # oriented by index: acyclic
        assert solvers.find_cycle(g, dag) is None
        if cycle is not None:
            walk = edges[cycle]
            np.testing.assert_array_equal(walk[1:, 0], walk[:-1, 1])
            assert walk[-1, 1] == walk[0, 0]


def test_too_large_is_refused_before_allocating(monkeypatch):
    E, X, sel = instance(9, 10, 10, 6, 5, "ordered")
    monkeypatch.setattr(solvers, "MEMORY_BUDGET", 10_000)
    with pytest.raises(TooLargeError, match=r"token classes.*GiB.*merge rare token ids"):
        max_margin_selection(E, X, sel)


# -- the paper's Fig. 2 data, scaled down ---------------------------------------------------------

def fig2_small(n, seed, rule, d=None):
    """K-level data (eq. 15; 3 levels of 6/8/12 tokens per class, 40 irrelevant), E = E⁰ + c·α·v.

    rule "own": the own-class top-level token (level·y largest, smallest id) — the benchmark's
    issue instance, cyclic once a top token of the other class shows up; "abs": the largest
    |level|, smallest id (a fixed order: acyclic); "abs-ties": every token of the largest |level|.
    """
    from embgeo.attention.data import signed_frequency

    data = synthetic_levels(n, seed=seed, T=24, K=3, n_irrelevant=40, deltas=(0.3, 0.2, 0.05), delta_tilde=0.3)
    V = len(data.levels)
    d = V if d is None else d
    rng = np.random.default_rng(seed)
    alpha = signed_frequency(data.X, data.y, V)
    v = rng.normal(size=d)
    E = rng.normal(size=(V, d)) / np.sqrt(d) + alpha[:, None] * v[None, :] / (np.linalg.norm(v) * np.abs(alpha).max())
    sel = []
    for x, y in zip(data.X, data.y, strict=True):
        u = np.unique(x)
        score = data.levels[u] * y if rule == "own" else np.abs(data.levels[u])
        top = u[score == score.max()]
        sel.append(top if rule == "abs-ties" else top[:1])
    return E, data.X, sel


@pytest.mark.parametrize("rule, d", [("abs", None), ("abs-ties", None), ("abs", 24), ("own", None)])
def test_fig2_like_instances_match_the_nnls_reference(rule, d):
    E, X, sel = fig2_small(80, 0, rule, d)
    res = max_margin_selection(E, X, sel)
    old = reference_max_margin_selection(E, X, sel)
    assert res.status == old.status
    if res.status == "optimal":
        check_optimal(E, X, sel, res)
        np.testing.assert_allclose(res.p, old.p, atol=1e-9 * old.norm)
    else:
        check_infeasible(E, X, sel, res)
    if rule == "own":
        assert res.method == "directed cycle"
