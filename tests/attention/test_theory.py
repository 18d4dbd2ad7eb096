"""Tests of embgeo.attention.theory: Lemma 4.1's α and bound, eq. (22) at initialization, eq. (10) selections, the
max-margin problem (12), Lemma 4.2's feasible point and an independent solve, Lemma 4.5 helper."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from embgeo.attention.data import signed_frequency
from embgeo.attention.theory import (
    compare_selections,
    init_concentration,
    init_concentration_bound,
    lemma41_alpha,
    lemma41_bound,
    lemma42_point,
    max_margin_selection,
    max_margin_slsqp,
    selection,
)
from embgeo.errors import InputError, ShapeError, TooLargeError
from reference.attention_selection import cvxpy_selection as reference


def random_instance(seed, V, d, n, T, max_sel=3, dup=True):
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(V, d)) / np.sqrt(d)
    X = rng.integers(0, V, size=(n, T))
    if dup:  # a repeated token inside a sequence and a repeated (shuffled) sequence
        X[0, 0] = X[0, 1]
        X[-1] = rng.permutation(X[0])
    sel = []
    for x in X:
        u = np.unique(x)
        k = int(rng.integers(1, min(max_sel, u.size) + 1))
        sel.append(set(rng.choice(u, k, replace=False).tolist()))
    if dup:
        sel[-1] = set(sel[0])
    return E, X, sel


def realized_instance(seed, V, d, n, T):
    """A feasible instance: the selection of a random p, with exact ties built into E."""
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(V, d)) / np.sqrt(d)
    p = rng.normal(size=d)
    for a, b in [(0, 1), (2, 3)]:  # E_b = E_a + z with z ⊥ p: equal scores, different embeddings
        z = rng.normal(size=d)
        E[b] = E[a] + z - (z @ p) / (p @ p) * p
    X = rng.integers(0, V, size=(n, T))
    X[0, :4] = [0, 1, 2, 3]
    sel = [set(S) for S in selection(E, X, p, tol=1e-9)]
    return E, X, sel


def kkt_check(E, res, tol=1e-7):
    """Independent KKT check of an 'optimal' result in the original coordinates."""
    p = res.p
    A = E[res.pairs[:, 0]] - E[res.pairs[:, 1]]
    Dm = E[res.eq_pairs[:, 0]] - E[res.eq_pairs[:, 1]] if len(res.eq_pairs) else np.zeros((0, E.shape[1]))
    margins = A @ p
    scale = max(np.linalg.norm(p), 1.0)
    assert np.min(margins) >= 1 - tol  # primal feasibility
    assert np.min(margins) == pytest.approx(1.0, abs=tol)  # Lemma C.7: a tight constraint
    if len(Dm):
        assert np.max(np.abs(Dm @ p)) <= tol * scale  # ties are equalities
    mu = res.multipliers
    assert np.all(mu >= 0)
    assert np.max(mu * np.abs(margins - 1)) <= tol * max(mu.max(), 1.0)  # complementarity
    # stationarity: p = Aᵀμ + Dᵀν for some ν
    r = p - A.T @ mu
    if len(Dm):
        r = r - Dm.T @ np.linalg.lstsq(Dm.T, r, rcond=None)[0]
    assert np.linalg.norm(r) <= tol * scale
    # strong duality: ‖p‖² = 1ᵀμ
    assert np.linalg.norm(p) ** 2 == pytest.approx(mu.sum(), rel=1e-7)
    assert set(np.flatnonzero(mu > 1e-9 * mu.max())) <= set(res.active.tolist())
    assert res.active.size >= 1
    assert res.gap <= 1e-8 and res.stationarity <= 1e-8


SHAPES = [  # (seed, V, d, n, T, max_sel)
    (0, 6, 10, 4, 4, 2),
    (1, 8, 20, 6, 5, 3),
    (2, 12, 6, 5, 6, 2),  # d < V: often infeasible, or tight
    (3, 5, 40, 8, 3, 2),
    (4, 15, 30, 10, 7, 3),
    (5, 10, 10, 3, 8, 4),
]


@pytest.mark.parametrize("seed,V,d,n,T,max_sel", SHAPES)
def test_matches_cvxpy(seed, V, d, n, T, max_sel):
    E, X, sel = random_instance(seed, V, d, n, T, max_sel)
    res = max_margin_selection(E, X, sel)
    status, p_ref = reference(E, X, sel)
    if res.status == "optimal":
        assert status == cp.OPTIMAL
        np.testing.assert_allclose(res.p, p_ref, atol=1e-6 * max(1.0, np.linalg.norm(p_ref)))
        assert res.margin == pytest.approx(1 / np.linalg.norm(p_ref), rel=1e-6)
        kkt_check(E, res)
    else:
        assert status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE)


def test_many_random_instances_agree_with_cvxpy_including_ties():
    rng = np.random.default_rng(123)
    n_opt = n_inf = n_ties = 0
    for _ in range(40):
        V, d = int(rng.integers(3, 10)), int(rng.integers(2, 12))
        E, X, sel = random_instance(int(rng.integers(1 << 30)), V, d, int(rng.integers(2, 6)), 4, 3)
        res = max_margin_selection(E, X, sel)
        status, p_ref = reference(E, X, sel)
        n_ties += len(res.eq_pairs) > 0
        if res.status == "optimal":
            n_opt += 1
            assert status == cp.OPTIMAL
            np.testing.assert_allclose(res.p, p_ref, atol=1e-6 * max(1.0, np.linalg.norm(p_ref)))
        else:
            n_inf += 1
            assert status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE)
    assert n_opt >= 5 and n_inf >= 5 and n_ties >= 5  # the sample really exercises every case


def test_optimal_solution_reproduces_its_selection():
    E, X, sel = realized_instance(7, 8, 30, 6, 5)
    res = max_margin_selection(E, X, sel)
    assert res.status == "optimal" and len(res.eq_pairs) >= 1
    kkt_check(E, res)
    assert selection(E, X, res.p, tol=1e-8) == [frozenset(S) for S in sel]


def test_closed_form_orthonormal():
    # Orthonormal E, one sequence with types A (selected) and B: p̂ = (|B|ΣA − |A|ΣB)/(|A|+|B|),
    # ‖p̂‖² = |A||B|/(|A|+|B|) (digest §3.5).
    E = np.eye(7)
    X = np.array([[0, 1, 2, 3, 4, 5, 6]])
    A, B = [0, 1, 2], [3, 4, 5, 6]
    res = max_margin_selection(E, X, [set(A)])
    expected = np.zeros(7)
    expected[A] = len(B) / 7
    expected[B] = -len(A) / 7
    np.testing.assert_allclose(res.p, expected, atol=1e-12)
    assert res.norm**2 == pytest.approx(12 / 7, rel=1e-12)
    assert len(res.pairs) == 12 and len(res.eq_pairs) == 3
    assert res.n_rows == 4  # the three tied selected tokens merge into one class: 4 distinct rows


def test_infeasible_cycle_with_certificate():
    E = np.random.default_rng(0).normal(size=(3, 10))
    X = np.array([[0, 1], [1, 2], [2, 0]])
    sel = [{0}, {1}, {2}]  # 0 > 1 > 2 > 0
    res = max_margin_selection(E, X, sel)
    assert res.status == "infeasible"
    assert np.all(np.isnan(res.p)) and res.norm == np.inf and res.margin == 0.0
    w = res.farkas
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
    A = E[res.pairs[:, 0]] - E[res.pairs[:, 1]]
    assert np.linalg.norm(A.T @ w) <= 1e-9  # Farkas: Σ w (E_s − E_t) = 0
    assert reference(E, X, sel)[0] in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE)


def test_infeasible_direct_conflict_through_ties():
    E = np.random.default_rng(1).normal(size=(4, 8))
    X = np.array([[0, 1, 2], [0, 1, 3]])
    sel = [{0, 1}, {0}]  # tie 0 = 1 in the first sequence, but 0 > 1 in the second
    res = max_margin_selection(E, X, sel)
    assert res.status == "infeasible" and res.farkas_residual == 0.0
    s, t = res.pairs[np.argmax(res.farkas)]
    assert {int(s), int(t)} == {0, 1}
    assert reference(E, X, sel)[0] in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE)


def test_infeasible_because_ties_span_space():
    # d = 2: ties 0=1 and 1=2 force p ⊥ span{E0−E1, E1−E2} = R² so p = 0, no margin possible.
    E = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [2.0, 3.0]])
    X = np.array([[0, 1, 2, 3]])
    res = max_margin_selection(E, X, [{0, 1, 2}])
    assert res.status == "infeasible"
    assert res.farkas_residual <= 1e-12
    assert reference(E, X, [{0, 1, 2}])[0] in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE)


def test_deduplication_does_not_change_solution():
    E, X, sel = realized_instance(11, 9, 25, 5, 6)
    base = max_margin_selection(E, X, sel)
    assert base.status == "optimal"
    rng = np.random.default_rng(0)
    X3 = np.vstack([X, X[:, ::-1], rng.permuted(X, axis=1)])
    big = max_margin_selection(E, X3, sel * 3)
    np.testing.assert_allclose(big.p, base.p, atol=1e-10)
    np.testing.assert_array_equal(big.pairs, base.pairs)
    assert big.n_raw == 3 * base.n_raw and len(big.pairs) <= base.n_raw


def test_pad_id_is_ignored():
    E, X, sel = random_instance(3, 8, 20, 4, 4, 2, dup=False)
    pad = 8  # outside [0, V): only valid as padding
    Xp = np.hstack([X, np.full((4, 3), pad)])
    a = max_margin_selection(E, X, sel)
    b = max_margin_selection(E, Xp, sel, pad_id=pad)
    np.testing.assert_allclose(a.p, b.p, atol=1e-12)
    assert selection(E, Xp, a.p, pad_id=pad) == selection(E, X, a.p)
    with pytest.raises(InputError, match="X"):
        max_margin_selection(E, Xp, sel)  # without pad_id, 8 is out of range


def test_all_tokens_selected_gives_zero():
    E = np.random.default_rng(0).normal(size=(4, 5))
    X = np.array([[0, 1, 2], [1, 3, 3]])
    res = max_margin_selection(E, X, [{0, 1, 2}, {1, 3}])
    assert res.status == "optimal" and res.norm == 0.0 and res.margin == np.inf
    np.testing.assert_array_equal(res.p, 0.0)


def test_selection_ties_and_types():
    E = np.array([[1.0, 0.0], [1.0, 5.0], [0.5, 0.0], [1.0 + 1e-13, -2.0]])
    X = np.array([[0, 2, 2, 3], [2, 2, 2, 2], [1, 0, 2, 3]])
    p = np.array([1.0, 0.0])
    S = selection(E, X, p)
    assert S == [frozenset({0, 3}), frozenset({2}), frozenset({0, 1, 3})]  # 1e-13 gap is a tie
    assert selection(E, X, p, tol=0.0)[0] == frozenset({3})  # exact: 3 wins
    assert selection(E, X, np.zeros(2)) == [frozenset({0, 2, 3}), frozenset({2}), frozenset({0, 1, 2, 3})]
    assert selection(E, X, np.array([0.0, 1.0]))[2] == frozenset({1})


def assumption1_instance(seed, d=400):
    """Paired Assumption-1 data: one important token per sequence, shared irrelevant tokens."""
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(5, d)) / np.sqrt(d)  # 0: positive, 1: negative, 2-4 irrelevant
    X = np.array([[0, 2, 3], [1, 2, 3], [0, 3, 4]])
    return E, X, [0, 1, 0]


def test_compare_selections_important_only_wins():
    # d = 2, large important embeddings, irrelevant ones near 0: tying tokens eats the plane.
    E = np.array([[3, 1], [1, 3], [0.1, -0.1], [-0.1, 0.05], [0.05, 0.1]])
    X = np.array([[0, 2, 3], [1, 2, 3], [0, 3, 4]])
    out = compare_selections(E, X, [0, 1, 0], candidates="all")
    assert len(out.selections) == 7**3
    assert out.selections[out.important_index] == (frozenset({0}), frozenset({1}), frozenset({0}))
    assert out.important_is_best and out.mu > 0
    others = [k for k in range(len(out.norms))
              if np.isfinite(out.norms[k]) and out.norms[k] > 0 and k != out.important_index]
    assert out.best_other_norm == pytest.approx(min(out.norms[k] for k in others))
    assert out.mu == pytest.approx(1 - out.important_norm / out.best_other_norm)
    assert out.important_norm <= (1 - out.mu) * out.best_other_norm * (1 + 1e-12)  # corrected Lemma 4.5
    assert out.n_feasible < len(out.selections)
    assert out.important_norm == pytest.approx(max_margin_selection(E, X, [0, 1, 0]).norm)


def test_compare_selections_containing_is_the_subset_that_keeps_the_important_tokens():
    E = np.array([[3, 1], [1, 3], [0.1, -0.1], [-0.1, 0.05], [0.05, 0.1]])
    X = np.array([[0, 2, 3], [1, 2, 3], [0, 3, 4]])
    every = compare_selections(E, X, [0, 1, 0], candidates="all")
    mine = compare_selections(E, X, [0, 1, 0])  # "containing" is the default (Lemma 4.5's proof)
    assert len(mine.selections) == 4**3  # each sequence: its important token + any subset of the 2 others
    assert all(i in S for sel in mine.selections for S, i in zip(sel, [0, 1, 0], strict=True))
    norm_of = dict(zip(every.selections, every.norms, strict=True))
    assert all(norm_of[sel] == norm for sel, norm in zip(mine.selections, mine.norms, strict=True))
    assert mine.important_norm == every.important_norm and mine.best_other_norm >= every.best_other_norm
    with pytest.raises(InputError, match="candidates"):
        compare_selections(E, X, [0, 1, 0], candidates="some")


def test_compare_selections_all_is_won_by_dropping_an_important_token_after_one_step():
    """After step (4) E_s* carries (η0/2)α_s* v: p ∝ v separates the classes without selecting s_* everywhere.

    Such selections are excluded from Lemma 4.5's comparison by Thm 4.3 (1); "all" still shows them.
    """
    from embgeo.attention.data import assumption1_data
    from embgeo.attention.model import OneLayerAttention
    from embgeo.attention.train import one_step

    data = assumption1_data(2, 3, seed=0, n_irrelevant=2, n_positive=2, n_negative=2)
    model = OneLayerAttention(6, 1024, seed=0)
    one_step(model, data.X, data.y, 1000.0)
    imp = [[int(s) for s in row if s in set(data.important.tolist())] for row in data.X]
    every = compare_selections(model.E.detach().numpy(), data.X, imp, candidates="all")
    norms = np.where(every.norms > 0, every.norms, np.inf)
    best = every.selections[int(np.argmin(norms))]
    assert any(i not in S for S, (i,) in zip(best, imp, strict=True))
    assert every.best_other_norm < 0.1 * every.important_norm


def test_compare_selections_can_fail():
    # Generic high-d embeddings: selecting *all* tokens of one sequence drops its constraints
    # (only ties remain), which is cheaper than the important-only selection.
    E, X, imp = assumption1_instance(0)
    out = compare_selections(E, X, imp)
    assert not out.important_is_best and out.mu < 0
    best = int(np.argmin(np.where((out.norms > 0) & (np.arange(len(out.norms)) != out.important_index),
                                  out.norms, np.inf)))
    assert any(S == frozenset(np.unique(x).tolist()) for S, x in zip(out.selections[best], X, strict=True))


def test_compare_selections_cap():
    E, X, imp = assumption1_instance(0)
    with pytest.raises(TooLargeError, match="max_selections"):
        compare_selections(E, X, imp, candidates="all", max_selections=100)
    with pytest.raises(TooLargeError, match="'containing'"):
        compare_selections(E, X, imp, max_selections=63)  # 4³ = 64 candidates
    assert len(compare_selections(E, X, imp, max_selections=64).selections) == 64


def test_bad_inputs_name_the_field():
    E = np.random.default_rng(0).normal(size=(4, 3))
    X = np.array([[0, 1], [2, 3]])
    sel = [{0}, {2}]
    with pytest.raises(InputError, match="E"):
        max_margin_selection(np.full((4, 3), np.nan), X, sel)
    with pytest.raises(ShapeError, match="E"):
        max_margin_selection(E[0], X, sel)
    with pytest.raises(ShapeError, match="X"):
        max_margin_selection(E, X[0], sel)
    with pytest.raises(InputError, match="X"):
        max_margin_selection(E, X + 0.5, sel)
    with pytest.raises(InputError, match="X"):
        max_margin_selection(E, X + 4, sel)
    with pytest.raises(ShapeError, match="selected"):
        max_margin_selection(E, X, sel[:1])
    with pytest.raises(InputError, match=r"selected\[1\]"):
        max_margin_selection(E, X, [{0}, {0}])
    with pytest.raises(InputError, match=r"selected\[0\]"):
        max_margin_selection(E, X, [set(), {2}])
    with pytest.raises(InputError, match="pad_id"):
        max_margin_selection(E, X, sel, pad_id=1.5)
    with pytest.raises(InputError, match="X"):
        max_margin_selection(E, np.array([[0, 1], [9, 9]]), sel, pad_id=9)
    with pytest.raises(ShapeError, match="p"):
        selection(E, X, np.ones(4))
    with pytest.raises(InputError, match="important"):
        compare_selections(E, X, [{1}, {5}])
    with pytest.raises(InputError, match="direction"):
        _ = max_margin_selection(E, np.array([[0, 1], [1, 0]]), [{0}, {1}]).direction


def test_lemma41_alpha_eq3_and_padding():
    X = np.array([[0, 1, 1], [2, 1, 0]])
    y = np.array([1, -1])
    alpha = lemma41_alpha(X, y, 4)
    np.testing.assert_allclose(alpha, np.array([1 - 1, 2 - 1, -1, 0]) / 6)  # (1/(nT)) Σ y Σ_i 1{x_i=s}
    np.testing.assert_allclose(alpha, signed_frequency(X, y, 4))  # equal lengths: eq. (3) of data.py
    padded = np.array([[0, 1, -1], [2, 1, 0]])  # the first sequence has 2 tokens
    alpha = lemma41_alpha(padded, y, 4, pad_id=-1)
    np.testing.assert_allclose(alpha, np.array([1 / 2 - 1 / 3, 1 / 2 - 1 / 3, -1 / 3, 0]) / 2)
    with pytest.raises(InputError, match=r"X: sequence 1 contains only padding"):
        lemma41_alpha(np.array([[0, 1], [-1, -1]]), y, 4, pad_id=-1)
    with pytest.raises(InputError, match=r"X: token ids must lie in \[0, vocab_size=4\)"):
        lemma41_alpha(padded, y, 4)  # without pad_id, -1 is an id outside [0, 4)


def test_lemma41_bound_formula_and_why_it_is_not_a_test():
    """eq. (7): 11 η0 d^(-1/4); the prediction itself (|α_s| ≤ 1) is below it for d < 22⁴."""
    assert lemma41_bound(2.0, 16) == pytest.approx(11.0)
    assert lemma41_bound(1.0, 22**4 - 1) > 0.5  # a zero update's error, (η0/2)·max|α_s| ≤ η0/2
    with pytest.raises(InputError, match="eta0"):
        lemma41_bound(0.0, 16)


# -- eq. (22): concentration at initialization ------------------------------------------------------------------

def test_init_concentration_bound_formula_and_inputs():
    assert init_concentration_bound(28, 1024, 0.1) == pytest.approx(np.sqrt(2 * np.log(28**2 / 0.1)) / 32)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(InputError, match="delta"):
            init_concentration_bound(28, 1024, bad)


def test_init_concentration_known_answers():
    """Orthogonal rows: the largest inner product is the one put in by hand, and each norm bound can fail alone."""
    eye = np.eye(8)
    E = np.stack([eye[0], 2 * eye[1], 0.5 * eye[2]])
    p, v = eye[3] + 0.1 * eye[0], 0.6 * eye[0] + 0.8 * eye[5]
    c = init_concentration(E, p, v, 0.1)
    assert (c.max_inner, c.max_norm, c.min_norm) == pytest.approx((0.6, 2.0, 0.5))
    assert c.bound == pytest.approx(np.sqrt(2 * np.log(90)) / np.sqrt(8)) and c.holds  # ≈ 1.06
    assert not init_concentration(E * [[1], [1.01], [1]], p, v, 0.1).holds  # ‖E_1‖ > 2
    assert not init_concentration(E * [[1], [1], [0.99]], p, v, 0.1).holds  # ‖E_2‖ < 1/2
    crossed = E + [[0, 0, 0, 0, 0, 0, 0, 0], [0] * 8, [0, 0.6, 0, 0, 0, 0, 0, 0]]  # E_1ᵀE_2 = 1.2 > 1.06
    c = init_concentration(crossed, p, v, 0.1)
    assert c.max_inner == pytest.approx(1.2) and not c.holds


# -- Lemma 4.2 ------------------------------------------------------------------------------------------------

def tied_instance(seed=0, V=10, d=30, n=6, T=5):
    """E, X and a p under which tokens 0 and 1 tie at the top of sequence 0 (E_1 = E_0 + z, z ⊥ p)."""
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(V, d)) / np.sqrt(d)
    p = rng.normal(size=d)
    E[0] += 6 * p / (p @ p)  # token 0 scores 6 above its own noise (others: 𝒩(0, ‖p‖²/d) ≈ 𝒩(0, 1)): the top
    z = rng.normal(size=d) / np.sqrt(d)
    E[1] = E[0] + z - (z @ p) / (p @ p) * p
    X = rng.integers(2, V, size=(n, T))
    X[0, :2] = [0, 1]
    return E, X, p


def test_lemma42_point_is_feasible_with_ties_and_the_solution_is_unique():
    E, X, p = tied_instance()
    pt = lemma42_point(E, X, p)
    assert pt.feasible and pt.n_tied == 1 and pt.selected[0] == {0, 1} and [0, 1] in pt.eq_pairs.tolist()
    assert pt.min_margin == pytest.approx(1.0, abs=1e-12) and pt.tie_residual <= 1e-15
    gaps = [np.min((E @ p)[sorted(S)]) - np.max((E @ p)[np.setdiff1d(x, sorted(S))])
            for x, S in zip(X, pt.selected, strict=True)]
    assert pt.tau == pytest.approx(min(gaps))
    res = max_margin_selection(E, X, pt.selected)
    assert res.status == "optimal" and res.norm <= np.linalg.norm(pt.p)  # p∘/τ feasible: the optimum is shorter
    for start in (pt.p, np.linalg.norm(pt.p) * np.eye(E.shape[1])[0]):  # a feasible and an infeasible start
        assert max_margin_slsqp(E, X, pt.selected, start) == pytest.approx(res.p, abs=1e-8 * res.norm)


def test_lemma42_point_fails_for_another_selection_a_dropped_or_an_invented_tie():
    """Negative controls: p∘/τ is not feasible for (12) built for a selection other than p∘'s own."""
    E, X, p = tied_instance()
    own = lemma42_point(E, X, p).selected
    scores = E @ p
    k = next(i for i in range(1, len(X)) if len(own[i]) == 1 and np.unique(X[i]).size > 1)
    lowest = int(min(np.unique(X[k]), key=lambda s: scores[s]))
    for wrong in ([{0}] + own[1:],                                   # tie dropped: needs a_0 − a_1 ≥ 1
                  [{0, 1, int(X[0, 2])}] + own[1:],                  # tie invented with a lower token
                  own[:k] + [{lowest}] + own[k + 1:]):               # another token selected in sequence k
        pt = lemma42_point(E, X, p, wrong)
        assert not pt.feasible and not pt.same_selection, wrong
    assert lemma42_point(E, X, p, [{0}] + own[1:]).min_margin == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(InputError, match="p_circ"):
        lemma42_point(E, X, np.zeros(E.shape[1]))


def test_max_margin_slsqp_agrees_with_the_structured_solver_on_realized_instances():
    for seed, V, d, n, T in [(0, 8, 20, 6, 5), (1, 12, 30, 10, 6)]:
        E, X, sel = realized_instance(seed, V, d, n, T)
        res = max_margin_selection(E, X, sel)
        assert max_margin_slsqp(E, X, sel, np.zeros(d)) == pytest.approx(res.p, abs=1e-7 * res.norm)
