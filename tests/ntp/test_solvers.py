"""The structured solvers of the t-form rewrite (issue 9) against independent computations.

Each block tests one piece of :mod:`embgeo.ntp.solvers` / :mod:`embgeo.ntp.solvers.constraints` (or the
theory routes that use it) against something that does not share its code: the dense KKT system
of the same QP solved with ``numpy.linalg.lstsq``, cvxpy + Clarabel (``reference.py``), brute
force over dense arrays, the definitions of the paper's certificates, or the previous solvers
(:mod:`reference.ntp_previous`). Module constants are monkeypatched to force the large-data code paths
(conjugate gradients, the working-set dual) on small instances.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import scipy.sparse as sp

from embgeo.core import validate
from embgeo.errors import InputError, SolverError, TooLargeError
from embgeo.ntp import NTPData, is_compatible, is_separable, ntp_svm, synthetic
from embgeo.ntp.data import synthetic_large
from embgeo.ntp.solvers import dual_set, equality, pair_certificates, scan, separability_lp, svm_dual
from embgeo.ntp.solvers.constraints import coordinates, token_groups
from embgeo.ntp.theory import estimate_memory, separability, subspace
from reference import ntp_previous as previous
from reference.ntp import (
    INFEASIBLE,
    dense_projector_F,
    equality_constraint_matrix,
    equality_kkt,
    equality_kkt_matrix,
    kesler_values,
    logits,
    pair_values,
    ref_ntp_svm,
    ref_project_dual,
    ref_w_star,
    spanning_matrix,
    supports_of,
)

#: The routes of ``auto`` with neither the small LP nor the pair LP (either would decide small instances first), so that
#: a test reaches the dual or the ALM.
NO_CHEAP_ROUTES = separability.RouteOptions(LP_SMALL_NNZ=0, pair=pair_certificates.PairOptions(MAX_PAIRS=0))


def pattern(pats):
    """(grp, ctx) of a pattern given as one list of contexts per group, sorted by (grp, ctx)."""
    grp = np.concatenate([np.full(len(p), g) for g, p in enumerate(pats)]).astype(np.int64)
    ctx = np.concatenate([np.sort(p) for p in pats]).astype(np.int64)
    return grp, ctx


def scale_of(data) -> float:
    """M = √2 max_j ‖h̄_j‖, the scale of one term (e_z − e_v) h̄_jᵀ."""
    return math.sqrt(2) * float(np.max(np.linalg.norm(data.embeddings, axis=1)))


def off_mask(data) -> np.ndarray:
    mask = np.ones((data.m, data.V), dtype=bool)
    for j, supp in enumerate(supports_of(data)):
        mask[j, supp] = False
    return mask


def combination(data, mu: np.ndarray) -> np.ndarray:
    """Σ_{j,v} μ_{j,v} (e_{z_j} − e_v) h̄_jᵀ with z_j the anchor (dense (m, V) μ)."""
    C = np.zeros((data.V, data.d))
    for j, v in zip(*np.nonzero(mu), strict=True):
        C[data.anchors[j]] += mu[j, v] * data.embeddings[j]
        C[v] -= mu[j, v] * data.embeddings[j]
    return C


def assert_farkas_certificate(data, sep, *, atol=1e-9, nonzero_combination=True):
    """The checks of test_theory_properties.test_farkas_certificate_of_non_separability, from the
    definitions: μ ≥ 0 off the supports with Σμ = 1, P⊥(Σ μ (e_z − e_v) h̄_jᵀ) ≈ 0 (dense projector),
    and the complete Ψ balanced per context with ‖ΨᵀH̄‖ = perp_norm ≈ 0.

    ``nonzero_combination`` also asks Σ μ (e_z − e_v) h̄_jᵀ ≠ 0, so that the projector check is not
    vacuous; a combination that is exactly 0 is still a valid certificate (every W gives Σ μ·margin = 0)."""
    scale = scale_of(data)
    mu = sep.farkas.toarray()
    off = off_mask(data)
    assert np.all(mu >= 0) and np.all(mu[~off] == 0)
    assert mu.sum() == pytest.approx(1.0, abs=1e-12)
    C = combination(data, mu)
    assert np.linalg.norm(C - (dense_projector_F(data) @ C.ravel()).reshape(C.shape)) <= atol * scale
    if nonzero_combination:
        assert np.linalg.norm(C) > 1e-3 * scale
    Psi = sep.certificate.toarray()
    np.testing.assert_array_equal(Psi[off], -mu[off])
    np.testing.assert_allclose(Psi.sum(axis=1), 0.0, rtol=0, atol=1e-12)
    perp = np.linalg.norm(Psi.T @ data.embeddings)
    assert sep.residuals["perp_norm"] == pytest.approx(perp, rel=1e-6, abs=1e-15)
    assert perp <= atol * scale


def assert_compatibility_certificate(data, comp):
    """λ on the support pairs, balanced per context, ⟨λ, log p̂⟩ = −1, Σ_j λ_{j,v} h̄_j ≈ 0 per token
    (so no W solves (4)); ``certificate_norm`` is that norm."""
    lam = comp.certificate.toarray()
    P = data.probs.toarray()
    assert np.all(lam[P == 0] == 0)
    np.testing.assert_allclose(lam.sum(axis=1), 0.0, rtol=0, atol=1e-12 * np.abs(lam).max())
    assert np.sum(lam[P > 0] * np.log(P[P > 0])) == pytest.approx(-1.0, abs=1e-9)
    norm = np.linalg.norm(lam.T @ data.embeddings)
    assert comp.certificate_norm == pytest.approx(norm, rel=1e-6, abs=1e-14)
    assert norm <= 1e-9 * scale_of(data)
    assert comp.residual > comp.tolerance
    return lam


# == 1. EqualitySystem ==============================================================================

def _ec_light(rng):
    K = rng.standard_normal((9, 4))
    return K, [[0, 1, 2], [2, 3, 4, 5], [5, 6], [7, 8, 0], [1, 3, 6, 7], [4]], None


def _ec_deficient(rng):
    K = rng.standard_normal((8, 3))  # groups 0, 2, 3 have more pairs than r = 3
    return K, [[0, 1, 2, 3, 4], [2, 5], [5, 6, 7, 0], [1, 3, 6, 7], [4, 6]], "consistent"


def _ec_dependent_rows(rng):
    K = rng.standard_normal((7, 4))
    K[6] = K[0] - 2 * K[1]  # group 0 has q = 3 ≤ r = 4 pairs but rank 2
    return K, [[0, 1, 6], [1, 2, 3], [3, 4, 5], [5, 6, 0]], "consistent"


def _ec_overdetermined(rng):
    K = rng.standard_normal((6, 2))  # groups 0, 1: 4 null directions each, 8 constraints on 6 t's
    return K, [list(range(6)), list(range(6)), [0, 1], [2, 5], [3]], "consistent"


def _ec_overdetermined_dependent_rows(rng):
    K = rng.standard_normal((6, 3))
    K[2] = K[0] + 0.5 * K[1]  # groups 0-3 have q = 3 = r pairs but rank 2: one constraint each
    return K, [[0, 1, 2], [0, 1, 2], [0, 1, 2], [0, 1, 2], [3, 4], [2, 5]], "consistent"


def _ec_nearly_dependent(eps):
    def make(rng):
        K = rng.standard_normal((7, 4))
        K[5] = K[4] + eps * rng.standard_normal(4)  # σ_min/σ_max < 1e-4 in group 1: the SVD branch
        return K, [[0, 1, 2], [4, 5], [2, 3, 6], [0, 5, 6]], None
    return make


#: name: (builder, relative tolerance on X and t). The nearly dependent block loses ~κ(K_g)²·eps
#: (see test_equality_system_nearly_dependent_block_is_accurate): 4e-8 here.
EQUALITY_CASES = {"light": (_ec_light, 1e-10), "deficient": (_ec_deficient, 1e-10),
                  "dependent-rows": (_ec_dependent_rows, 1e-10), "overdetermined": (_ec_overdetermined, 1e-10),
                  "overdetermined-dependent-rows": (_ec_overdetermined_dependent_rows, 1e-10),
                  "nearly-dependent-5e-5": (_ec_nearly_dependent(5e-5), 1e-6)}


def equality_instance(name: str, seed: int = 0):
    """(K, grp, ctx, weights, c): random uneven weights; c from a feasible (X0, t0) when the case has
    rank-deficient groups (else every c is reachable and c is random)."""
    rng = np.random.default_rng(seed)
    K, pats, rhs = EQUALITY_CASES[name][0](rng)
    grp, ctx = pattern(pats)
    w = rng.uniform(0.2, 5.0, len(pats))
    if rhs == "consistent":
        X0, t0 = rng.standard_normal((len(pats), K.shape[1])), rng.standard_normal(K.shape[0])
        c = np.einsum("ij,ij->i", X0[grp], K[ctx]) - t0[ctx]
    else:
        c = rng.standard_normal(len(grp))
    return K, grp, ctx, w, c


def assert_multipliers(K, grp, ctx, w, X, lam, rtol=1e-10):
    """n_g x_g = Σ_j λ_{gj} k_j for every group and Σ_g λ_{gj} = 0 for every context."""
    G, m = len(w), K.shape[0]
    rows = np.zeros((G, K.shape[1]))
    np.add.at(rows, grp, lam[:, None] * K[ctx])
    scale = np.abs(lam).max() * np.abs(K).max()
    np.testing.assert_allclose(w[:, None] * X, rows, rtol=0, atol=rtol * scale)
    np.testing.assert_allclose(np.bincount(ctx, weights=lam, minlength=m), 0.0, rtol=0, atol=rtol * np.abs(lam).max())


@pytest.mark.parametrize("use_gram", [False, True], ids=["no-gram", "gram"])
@pytest.mark.parametrize("name", list(EQUALITY_CASES))
def test_equality_system_matches_dense_kkt(name, use_gram):
    """X and t equal the dense KKT solution (lstsq) of min ½Σ n_g‖x_g‖² s.t. x_gᵀk_j − t_j = c_{gj}; the
    multipliers satisfy stationarity. A wrong weight, block inverse, null-space constraint or sign
    moves X or t by O(1)."""
    K, grp, ctx, w, c = equality_instance(name)
    tol = EQUALITY_CASES[name][1]
    system = equality.EqualitySystem(K, grp, ctx, w, K @ K.T if use_gram else None)
    sol = system.solve(c)
    X, t, lam, kkt_res = equality_kkt(K, grp, ctx, w, c)
    assert kkt_res <= 1e-8 * max(1.0, np.abs(c).max())  # the reference itself is consistent
    assert sol.consistent
    assert np.linalg.norm(sol.X - X) <= tol * np.linalg.norm(X)
    assert np.linalg.norm(sol.t - t) <= tol * np.linalg.norm(t)
    assert_multipliers(K, grp, ctx, w, sol.X, sol.lam, rtol=tol)
    assert sol.residuals["equality"] <= 1e-12 and sol.residuals["balance"] <= max(1e-9, 10 * tol)
    if name == "light":  # every group's rows independent: the multipliers are unique
        np.testing.assert_allclose(sol.lam, lam, rtol=0, atol=1e-10 * np.abs(lam).max())
    if name.startswith(("deficient", "dependent", "overdetermined")):
        assert system.n_constraints > 0  # the null-space path ran
    if name.startswith("nearly"):
        s = np.linalg.svd(K[[4, 5]], compute_uv=False)
        assert s[-1] < 1e-4 * s[0]  # the SVD branch of shaky blocks ran


def test_equality_system_nearly_dependent_block_is_accurate():
    """A group whose two contexts are nearly parallel (σ_min/σ_max ≈ 2.4e-7) in an otherwise benign
    problem: the dense KKT matrix has condition number ≈ 19, so X and t are determined to ~1e-14
    and 1e-6 is a generous tolerance.

    The reduction to t puts n_g (K_g K_gᵀ)⁺ ~ 1/σ_min² into the t-system, which alone left X off by
    1.1e-3 here; the solver detects such stiff groups by the multipliers' balance and re-solves
    the whole KKT system (EqualitySystem._solve_kkt).
    """
    K, grp, ctx, w, c = equality_instance("nearly-dependent-5e-5")
    K = K.copy()
    K[5] = K[4] + 1e-6 * np.random.default_rng(0).standard_normal(4)
    X, t, _, _ = equality_kkt(K, grp, ctx, w, c)
    assert np.linalg.cond(equality_kkt_matrix(K, grp, ctx, w)) < 100  # a well-conditioned QP
    sol = equality.EqualitySystem(K, grp, ctx, w).solve(c)
    assert np.linalg.norm(sol.X - X) <= 1e-6 * np.linalg.norm(X)
    assert np.linalg.norm(sol.t - t) <= 1e-6 * np.linalg.norm(t)


@pytest.mark.parametrize("name", ["overdetermined", "overdetermined-dependent-rows"])
def test_equality_system_inconsistent_certificate(name):
    """Random c on groups with more pairs than rank: no solution. ``consistent`` is False and the
    certificate λ is zero on full-rank groups and in the left null space of the dense constraint
    matrix A (λ_gᵀK_g = 0, balanced per context) with ⟨λ, c⟩ = −1, so c ∉ range A."""
    K, grp, ctx, w, _ = equality_instance(name)
    c = np.random.default_rng(7).standard_normal(len(grp))
    A = equality_constraint_matrix(K, grp, ctx, len(w))
    z = np.linalg.lstsq(A, c, rcond=None)[0]
    assert np.linalg.norm(A @ z - c) > 1e-3  # independently: the equalities have no solution
    sol = equality.EqualitySystem(K, grp, ctx, w).solve(c)
    assert not sol.consistent
    lam = sol.certificate
    assert lam is not None and lam.shape == c.shape
    assert lam @ c == pytest.approx(-1.0, abs=1e-9)
    assert np.linalg.norm(A.T @ lam) <= 1e-9 * np.abs(lam).max() * max(1.0, np.abs(K).max())
    for g in range(len(w)):
        rows = grp == g
        if np.linalg.matrix_rank(K[ctx[rows]]) == rows.sum():
            assert np.all(np.abs(lam[rows]) <= 1e-12 * np.abs(lam).max())


def test_equality_system_conjugate_gradients_agree_with_dense(monkeypatch):
    """With DENSE_T_MAX = 0 the t-system is solved by CG on the sparse S: same X, t, λ as the dense
    Cholesky and as the dense KKT reference. A deficient pattern still goes dense (CG cannot carry
    the constraints C t = d)."""
    rng = np.random.default_rng(3)
    m, r = 40, 6
    K = rng.standard_normal((m, r))
    pats = [rng.choice(m, size=rng.integers(1, r + 1), replace=False) for _ in range(30)]
    pats.append(np.arange(m)[:: 2][: r])
    pats.append(np.arange(1, m, 2)[: r])
    pats += [[j] for j in range(m)]  # every context in the pattern
    grp, ctx = pattern(pats)
    w = rng.uniform(0.2, 5.0, len(pats))
    c = rng.standard_normal(len(grp))
    dense = equality.EqualitySystem(K, grp, ctx, w)
    assert dense.mode == "dense"
    ref = dense.solve(c)
    monkeypatch.setattr(equality, "DENSE_T_MAX", 0)  # read by EqualitySystem
    cg = equality.EqualitySystem(K, grp, ctx, w)
    assert cg.mode == "cg"
    sol = cg.solve(c)
    np.testing.assert_allclose(sol.X, ref.X, rtol=0, atol=1e-9 * np.abs(ref.X).max())
    np.testing.assert_allclose(sol.t, ref.t, rtol=0, atol=1e-9 * np.abs(ref.t).max())
    np.testing.assert_allclose(sol.lam, ref.lam, rtol=0, atol=1e-9 * np.abs(ref.lam).max())
    X, t, _, _ = equality_kkt(K, grp, ctx, w, c)
    assert np.linalg.norm(sol.X - X) <= 1e-9 * np.linalg.norm(X)
    assert np.linalg.norm(sol.t - t) <= 1e-9 * np.linalg.norm(t)
    # Rank-deficient groups: dense even above DENSE_T_MAX, and still right.
    K2, grp2, ctx2, w2, c2 = equality_instance("deficient")
    deficient = equality.EqualitySystem(K2, grp2, ctx2, w2)
    assert deficient.mode == "dense"
    X2, t2, _, _ = equality_kkt(K2, grp2, ctx2, w2, c2)
    sol2 = deficient.solve(c2)
    assert np.linalg.norm(sol2.X - X2) <= 1e-10 * np.linalg.norm(X2)


def _sparse_instance(m: int = 300, r: int = 8, seed: int = 5):
    """Groups of 2-6 random contexts out of m (q ≤ r: none rank deficient), every context in some group: S has
    about Σ q² ≪ m² entries."""
    rng = np.random.default_rng(seed)
    K = rng.standard_normal((m, r))
    pats = [rng.choice(m, size=rng.integers(2, 7), replace=False) for _ in range(m // 2)]
    pats += [[j] for j in range(m)]
    grp, ctx = pattern(pats)
    return K, grp, ctx, rng.uniform(0.2, 5.0, len(pats)), rng.standard_normal(len(grp))


def test_equality_system_sparse_route_by_cost(monkeypatch):
    """Between SPARSE_T_MIN and DENSE_T_MAX contexts a sparse S goes to conjugate gradients (the cost rule m³/3 against
    SPARSE_T_ITERATIONS products) with the dense answer; below SPARSE_T_MIN, or where S is not sparse enough, dense.
    Negative control: with SPARSE_T_COST = 0 no S is cheap enough."""
    K, grp, ctx, w, c = _sparse_instance()
    m = K.shape[0]
    assert equality.EqualitySystem(K, grp, ctx, w).mode == "dense"  # m = 300 < SPARSE_T_MIN
    ref = equality.EqualitySystem(K, grp, ctx, w).solve(c)
    monkeypatch.setattr(equality, "SPARSE_T_MIN", 100)
    monkeypatch.setattr(equality, "SPARSE_T_ITERATIONS", 20)
    q = np.bincount(grp).astype(float)
    assert 20 * 2 * np.sum(q * q) < equality.SPARSE_T_COST * m**3 / 3  # the rule's arithmetic, by hand
    sparse = equality.EqualitySystem(K, grp, ctx, w)
    assert sparse.mode == "cg" and sp.issparse(sparse.S)
    sol = sparse.solve(c)
    for a, b in ((sol.X, ref.X), (sol.t, ref.t), (sol.lam, ref.lam)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9 * np.abs(b).max())
    X, t, _, _ = equality_kkt(K, grp, ctx, w, c)
    assert np.linalg.norm(sol.X - X) <= 1e-9 * np.linalg.norm(X)
    monkeypatch.setattr(equality, "SPARSE_T_COST", 0.0)
    assert equality.EqualitySystem(K, grp, ctx, w).mode == "dense"


def test_equality_system_falls_back_to_dense_when_cg_falls_short(monkeypatch):
    """Conjugate gradients that do not reach CG_RTOL (here: replaced by a stand-in that reports failure with a wrong
    t) below DENSE_T_MAX give way to the dense factorization: the exact answer, and the system stays dense after;
    above DENSE_T_MAX the same failure is a SolverError naming the residual."""
    K, grp, ctx, w, c = _sparse_instance()
    ref = equality.EqualitySystem(K, grp, ctx, w).solve(c)
    monkeypatch.setattr(equality, "SPARSE_T_MIN", 100)
    monkeypatch.setattr(equality, "SPARSE_T_ITERATIONS", 20)
    monkeypatch.setattr(equality, "cg", lambda A, b, **kw: (np.ones_like(b), 7))
    system = equality.EqualitySystem(K, grp, ctx, w)
    assert system.mode == "cg"
    sol = system.solve(c)
    assert system.mode == "dense"
    np.testing.assert_allclose(sol.t, ref.t, rtol=0, atol=1e-12 * np.abs(ref.t).max())
    np.testing.assert_allclose(sol.X, ref.X, rtol=0, atol=1e-12 * np.abs(ref.X).max())
    # the fallback is a factorization: under the construction's deadline, as the construction is
    late = equality.EqualitySystem(K, grp, ctx, w, deadline=time.perf_counter() + 3600)
    late._factor_deadline = time.perf_counter() - 1.0  # (as if the hour had passed since)
    with pytest.raises(SolverError, match=r"time limit was reached before the t-system's assembly"):
        late.solve(c)
    monkeypatch.setattr(equality, "DENSE_T_MAX", 0)
    with pytest.raises(SolverError, match="conjugate gradients on the sparse t-system stopped at relative residual"):
        equality.EqualitySystem(K, grp, ctx, w).solve(c)


def test_equality_system_refuses_above_memory_budget(monkeypatch):
    """The documented size 8·(Σ_g (q_g² + q_g r) + 2 m²) bytes (light groups, dense t-system) is the
    threshold: one byte less and the constructor raises TooLargeError naming the pairs and contexts."""
    K, grp, ctx, w, c = equality_instance("light")
    m, r = K.shape
    q = np.bincount(grp).astype(float)
    need = 8.0 * (np.sum(q * q + q * r) + 2.0 * m * m)
    assert equality.equality_system_bytes(np.bincount(grp), r, m) == need
    monkeypatch.setattr(validate, "DENSE_BUDGET_BYTES", int(need) - 1)  # read when the system is built
    with pytest.raises(TooLargeError, match=rf"GiB for {len(grp)} pairs on {m} contexts \(one group is in 4 of them"):
        equality.EqualitySystem(K, grp, ctx, w)
    monkeypatch.setattr(validate, "DENSE_BUDGET_BYTES", int(need))
    assert equality.EqualitySystem(K, grp, ctx, w).solve(c).consistent


def test_equality_system_needs_every_context():
    """A context without any pair leaves t_j undetermined: refused."""
    K = np.random.default_rng(0).standard_normal((3, 2))
    with pytest.raises(SolverError, match="every context"):
        equality.EqualitySystem(K, np.array([0, 0]), np.array([0, 1]), np.ones(1))


# == 2. projection onto the dual set =================================================================

def assert_projection_kkt(x, z, w, ctx, off, m, tol=1e-12):
    """KKT of argmin Σ (x − z)²/w s.t. column sums 0, x ≤ 0 on ``off``: one τ_j per context with
    x = z − τ_j w on free entries and x = min(0, z − τ_j w) on off entries."""
    free = ~off
    scale = tol * max(1.0, np.abs(z).max())
    np.testing.assert_allclose(np.bincount(ctx, weights=x, minlength=m), 0.0, rtol=0, atol=scale)
    assert np.all(x[off] <= 0)
    tau = np.bincount(ctx, weights=((z - x) / w) * free, minlength=m) / np.bincount(ctx, weights=free, minlength=m)
    model = z - tau[ctx] * w
    np.testing.assert_allclose(x[free], model[free], rtol=0, atol=scale * 10)
    np.testing.assert_allclose(x[off], np.minimum(model[off], 0.0), rtol=0, atol=scale * 10)


def dual_instance(seed: int):
    """Sparse entries in 8 contexts (shuffled order), ~40% off-support; context 0 sums to 0 with
    negative off entries (nothing clipped), context 1 has off entries far above (all clipped),
    context 2 no off entry, context 3 one free entry only."""
    rng = np.random.default_rng(seed)
    m = 8
    sizes = rng.integers(2, 7, m)
    ctx = np.repeat(np.arange(m), sizes)
    off = rng.random(len(ctx)) < 0.4
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    off[first] = False  # every context has a free entry
    off[ctx == 2] = False
    off[(ctx == 3)] = True
    off[first[3]] = False
    z = rng.standard_normal(len(ctx))
    z[(ctx == 0) & off] = -1.0 - rng.random(np.sum((ctx == 0) & off))
    z[first[0]] -= np.sum(z[ctx == 0])  # Σz = 0 in context 0: τ = 0, x = z, nothing clipped
    z[(ctx == 1) & off] = 50.0 + rng.standard_normal(np.sum((ctx == 1) & off))
    w = rng.uniform(0.1, 3.0, len(ctx))
    perm = rng.permutation(len(ctx))
    return z[perm], w[perm], ctx[perm], off[perm], m


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_project_dual_matches_cvxpy_and_kkt(seed):
    """The sparse projection equals Clarabel's solution of the same QP and satisfies its KKT
    conditions; the two designed columns are indeed unclipped / fully clipped."""
    z, w, ctx, off, m = dual_instance(seed)
    x = dual_set.project_dual(z, w, ctx, off, m)
    assert_projection_kkt(x, z, w, ctx, off, m)
    np.testing.assert_allclose(x, ref_project_dual(z, w, ctx, off, m), rtol=0, atol=1e-7 * np.abs(z).max())
    assert np.all(x[(ctx == 0) & off] < 0)  # nothing clipped
    assert np.all(x[(ctx == 1) & off] == 0)  # everything clipped


@pytest.mark.parametrize("tau0", ["none", "exact", "far-left", "far-right", "random"])
@pytest.mark.parametrize("seed", [0, 1])
def test_project_dual_dense_matches_cvxpy_and_kkt(seed, tau0):
    """The dense (G, m) projection, from any warm start τ, equals cvxpy on the flattened problem and
    the sparse projection, satisfies the KKT conditions, and returns the τ of its solution."""
    rng = np.random.default_rng(10 + seed)
    G, m = 7, 5
    z = rng.standard_normal((G, m))
    off = rng.random((G, m)) < 0.6
    off[rng.integers(0, G, m), np.arange(m)] = False  # a free entry per column
    off[:, 0] = True
    off[2, 0] = False
    z[off[:, 0], 0] = -1.0 - rng.random(G - 1)
    z[2, 0] = -np.sum(z[off[:, 0], 0])  # column 0 sums to 0: τ = 0, nothing clipped
    off[:, 1] = True
    off[4, 1] = False
    z[off[:, 1], 1] = 40.0  # column 1: everything clipped
    w = rng.uniform(0.1, 3.0, G)
    gi, ji = np.nonzero(np.ones((G, m), bool))
    x_sparse = dual_set.project_dual(z[gi, ji], w[gi], ji, off[gi, ji], m)
    start = {"none": None, "far-left": np.full(m, -1e3), "far-right": np.full(m, 1e3),
             "random": rng.standard_normal(m) * 10, "exact": dual_set.project_dual_dense(z, w, off)[1]}[tau0]
    x, tau = dual_set.project_dual_dense(z, w, off, None if start is None else start.copy())
    assert_projection_kkt(x.ravel(), z.ravel(), np.repeat(w, m), np.tile(np.arange(m), G), off.ravel(), m)
    np.testing.assert_allclose(x[gi, ji], x_sparse, rtol=0, atol=1e-12 * 40)
    ref = ref_project_dual(z.ravel(), np.repeat(w, m), np.tile(np.arange(m), G), off.ravel(), m)
    np.testing.assert_allclose(x.ravel(), ref, rtol=0, atol=1e-7 * 40)
    free = ~off
    np.testing.assert_allclose(x[free], (z - tau * w[:, None])[free], rtol=0, atol=1e-10 * 40)
    assert np.all(x[off[:, 0], 0] < 0) and np.all(x[off[:, 1], 1] == 0)


# == 3. full pass over the off-support margins =======================================================

@pytest.mark.parametrize(("G", "m", "r", "top", "below", "every"), [
    (12, 9, 3, 2, 0.5, -np.inf),
    (12, 9, 3, 20, 0.5, -np.inf),  # top ≥ G: the argsort branch
    (5, 30, 4, 3, np.inf, -np.inf),
    (7, 6, 2, 0, 0.5, -np.inf),  # top = 0: only the minimum
    (7, 6, 2, 3, -np.inf, -np.inf),  # no threshold: only the minimum
    (45_000, 200, 2, 3, -2.0, -np.inf),  # G·m above the 64 MB block: the margins are scanned in two column blocks
    (12, 9, 3, 2, 1.5, 0.0),  # every pair below 0 as well as the two smallest below 1.5
    (12, 9, 3, 2, -1.0, 0.5),  # every_below above below: the top pairs are a subset of the rest
    (7, 6, 2, 0, 0.5, 0.0),  # every_below alone
    (45_000, 200, 2, 3, -2.0, -1.0),  # the same in two column blocks
])
def test_scan_off_support_brute_force(G, m, r, top, below, every):
    """min over off-support (g, j) of t_j − x_gᵀk_j, per context the ``top`` smallest margins below ``below``,
    and every pair below ``every_below``, each pair once, equal a dense brute force."""
    rng = np.random.default_rng(G + m)
    X, K, t = rng.standard_normal((G, r)), rng.standard_normal((m, r)), rng.standard_normal(m)
    supp = rng.random((G, m)) < 0.3
    M = t[None, :] - X @ K.T
    M[supp] = np.inf
    out = scan.scan_off_support(X, t, K, sp.csc_matrix(supp.astype(float)), below=below, top=top,
                                every_below=every)
    assert out.min_margin == M.min()
    expected = set()
    if top and below > -np.inf:
        for j in range(m):
            for g in np.argsort(M[:, j], kind="stable")[:top]:
                if M[g, j] < below:
                    expected.add((int(g), j))
    if every > -np.inf:
        expected |= {(int(g), int(j)) for g, j in zip(*np.nonzero(M < every), strict=True)}
    if (top and below > -np.inf) or every > -np.inf:
        assert len(expected) > 0
    got = list(zip(out.groups.tolist(), out.contexts.tolist(), strict=True))
    assert len(got) == len(set(got))  # each pair once
    assert set(got) == expected
    np.testing.assert_array_equal(out.margins, M[out.groups, out.contexts])


# == 4. the separability LP and its relaxation on a subset of pairs ===================================

def lp_setup(data):
    coords, groups = coordinates(data.embeddings), token_groups(data)
    gi, ji = np.nonzero(groups.pattern.toarray() == 0)
    return coords.K, groups, gi, ji


def token_mu(data, groups, og, oj, mu) -> np.ndarray:
    """Group-level weights on off pairs as a dense (m, V) μ at the groups' representative tokens."""
    out = np.zeros((data.m, data.V))
    np.add.at(out, (oj, groups.representative[og]), mu)
    return out


def assert_lp_farkas(data, groups, og, oj, mu, atol):
    """μ ≥ 0, Σμ = 1, and Σ μ (e_z − e_v) h̄_jᵀ ∈ F (dense projector): a Farkas vector."""
    M = token_mu(data, groups, og, oj, mu)
    assert np.all(mu >= 0) and mu.sum() == pytest.approx(1.0, abs=1e-9)
    assert np.all(M[~off_mask(data)] == 0)
    C = combination(data, M)
    perp = C - (dense_projector_F(data) @ C.ravel()).reshape(C.shape)
    assert np.linalg.norm(perp) <= atol * scale_of(data)
    assert np.linalg.norm(C) > 1e-3 * scale_of(data)


def assert_lp_point(K, groups, og, oj, lp):
    """s = 1: x_gᵀk_j = t_j on the supports of the LP's contexts, x_gᵀk_j − t_j ≤ −1 on its pairs."""
    P = groups.pattern.toarray() > 0
    scale = max(1.0, np.abs(lp.X @ K.T).max())
    for j in np.unique(oj):
        g = np.flatnonzero(P[:, j])
        np.testing.assert_allclose(lp.X[g] @ K[j] - lp.t[j], 0.0, rtol=0, atol=1e-7 * scale)
    assert np.all(np.einsum("ij,ij->i", lp.X[og], K[oj]) - lp.t[oj] <= -1 + 1e-7 * scale)


@pytest.mark.parametrize("case", [(10, 5, 3, 2, 0), (7, 6, 5, 3, 0), (6, 6, 4, 2, 0)])
def test_separability_lp_full_and_subset_on_non_separable_data(case):
    """Non-separable data (cvxpy agrees): the full LP has s* = 0 and its dual values μ are a Farkas
    vector (checked with the dense projector onto F, and completed by SVMDual.farkas_from into a
    balanced Ψ with ‖ΨK‖ ≈ 0). The LP restricted to the pairs carrying μ, every context's supports
    still tied, keeps s* = 0 and gives a certificate again; restricted to one pair it is feasible,
    s* = 1 (a relaxation proves nothing when it separates), and its point satisfies that pair."""
    m, V, d, Ssz, seed = case
    data = synthetic(m, V, d, Ssz, seed=seed)
    assert ref_ntp_svm(data)[0] in INFEASIBLE
    K, groups, gi, ji = lp_setup(data)
    full = separability_lp.separability_lp(K, groups.pattern, gi, ji, contexts=np.arange(m))
    assert not full.separable and full.value == pytest.approx(0.0, abs=1e-7)
    assert_lp_farkas(data, groups, gi, ji, full.mu, atol=1e-7)
    solver = svm_dual.SVMDual(K, groups.pattern, groups.size)
    g, j, psi, perp = solver.farkas_from(gi, ji, full.mu / full.mu.sum(), accept_any=True)
    Psi = np.zeros((groups.n_groups, m))
    np.add.at(Psi, (g, j), psi)
    np.testing.assert_allclose(Psi.sum(axis=0), 0.0, rtol=0, atol=1e-12)
    assert np.all(Psi[groups.pattern.toarray() == 0] <= 0)
    assert perp == pytest.approx(np.linalg.norm(Psi @ K), rel=1e-6, abs=1e-14)
    assert perp <= 1e-7 * scale_of(data)

    # Only the pairs carrying μ, with every context's supports tied: still s* = 0, still a certificate.
    carry = full.mu > 1e-9 * full.mu.max()
    sub = separability_lp.separability_lp(K, groups.pattern, gi[carry], ji[carry], contexts=np.arange(m))
    assert not sub.separable
    assert_lp_farkas(data, groups, gi[carry], ji[carry], sub.mu, atol=1e-7)
    # Without the other contexts' supports it is a weaker relaxation: either it still certifies, or
    # it is feasible and its point satisfies the constraints it was given.
    weak = separability_lp.separability_lp(K, groups.pattern, gi[carry], ji[carry])
    if weak.separable:
        assert_lp_point(K, groups, gi[carry], ji[carry], weak)
    else:
        assert_lp_farkas(data, groups, gi[carry], ji[carry], weak.mu, atol=1e-7)

    one = separability_lp.separability_lp(K, groups.pattern, gi[:1], ji[:1])
    assert one.separable and one.value == pytest.approx(1.0)
    assert_lp_point(K, groups, gi[:1], ji[:1], one)


@pytest.mark.parametrize("case", [(6, 6, 4, 2, 2), (8, 8, 6, 2, 0)])
def test_separability_lp_on_separable_data(case):
    """Separable data: s* = 1 on the full LP and on random subsets, and the returned X, t satisfy the
    constraints of the pairs given (equalities on the supports of their contexts, margin ≥ 1)."""
    m, V, d, Ssz, seed = case
    data = synthetic(m, V, d, Ssz, seed=seed)
    K, groups, gi, ji = lp_setup(data)
    full = separability_lp.separability_lp(K, groups.pattern, gi, ji, contexts=np.arange(m))
    assert full.separable and full.mu is None
    assert_lp_point(K, groups, gi, ji, full)
    rng = np.random.default_rng(0)
    for _ in range(3):
        pick = np.sort(rng.choice(len(gi), size=len(gi) // 3, replace=False))
        lp = separability_lp.separability_lp(K, groups.pattern, gi[pick], ji[pick])
        assert lp.separable
        assert_lp_point(K, groups, gi[pick], ji[pick], lp)


# == 5. the working-set path of SVMDual ================================================================

SVM_CASES = [
    pytest.param((6, 5, 9, 2, 0), id="d>m-m6-d9"),
    pytest.param((10, 8, 14, 4, 0), id="d>m-m10-d14-S4"),
    pytest.param((8, 10, 6, 3, 1), id="d<m-m8-d6-S3"),
    pytest.param((8, 8, 6, 2, 0), id="d<m-m8-d6-S2"),
    pytest.param((7, 6, 5, 3, 5), id="d<m-m7-d5-S3"),
]


@pytest.mark.parametrize("case", SVM_CASES)
def test_working_set_svm_matches_cvxpy(case):
    """With DENSE_DUAL_MAX = 0 the dual runs on a working set; W^mm agrees with Clarabel at 1e-5
    (relative), and satisfies (6a)/(6b) with minimum margin 1."""
    m, V, d, Ssz, seed = case
    data = synthetic(m, V, d, Ssz, seed=seed)
    res = ntp_svm(data, method="dual", dual_options=svm_dual.DualOptions(DENSE_DUAL_MAX=0))
    assert res.status == "optimal"
    assert "dual on a working set" in res.method
    status, W = ref_ntp_svm(data)
    assert status == "optimal"
    assert np.linalg.norm(res.W - W) <= 1e-5 * np.linalg.norm(W)
    kv = kesler_values(data, res.W)
    assert kv.min() == pytest.approx(1.0, abs=1e-9)
    assert np.abs(pair_values(data, res.W)).max(initial=0.0) <= 1e-9 * max(1.0, np.abs(logits(data, res.W)).max())


@pytest.mark.parametrize("route", ["is_separable", "ntp_svm"])
@pytest.mark.parametrize("case", [(7, 6, 5, 3, 0), (6, 6, 4, 2, 0)])
def test_working_set_dual_certifies_non_separability(case, route, monkeypatch):
    """Non-separable data (cvxpy: infeasible) decided by the working-set dual (its LP shortcut
    disabled): status "infeasible" / False with a Farkas certificate valid from the definitions."""
    working_set = svm_dual.DualOptions(DENSE_DUAL_MAX=0)
    m, V, d, Ssz, seed = case
    data = synthetic(m, V, d, Ssz, seed=seed)
    assert ref_ntp_svm(data)[0] in INFEASIBLE
    if route == "is_separable":
        sep = is_separable(data, method="dual", dual_options=working_set)
    else:
        # no small LP and no pair LP (either would decide these first)
        res = ntp_svm(data, dual_options=working_set, route_options=NO_CHEAP_ROUTES)
        assert res.status == "infeasible" and res.W is None and res.margin == 0.0
        sep = res.separability
    assert not sep
    assert "dual" in sep.method
    assert_farkas_certificate(data, sep)


# == 6. context coordinates ============================================================================

def _matrix_with_cond(rng, m, d, cond):
    U = np.linalg.qr(rng.standard_normal((m, m)))[0]
    Vt = np.linalg.qr(rng.standard_normal((d, d)))[0]
    k = min(m, d)
    return U[:, :k] @ np.diag(np.geomspace(1.0, 1.0 / cond, k)) @ Vt[:, :k].T


def _h(name):
    rng = np.random.default_rng(4)
    return {
        "identity-tall": lambda: rng.standard_normal((9, 4)),
        "identity-square": lambda: rng.standard_normal((5, 5)),
        "identity-tall-cond1e6": lambda: _matrix_with_cond(rng, 9, 4, 1e6),
        "cholesky-wide": lambda: rng.standard_normal((5, 9)),
        "qr-wide-cond1e6": lambda: _matrix_with_cond(rng, 5, 9, 1e6),
        "qr-wide-duplicated-rows": lambda: np.vstack([rng.standard_normal((4, 9))] * 2)[:6],
        "qr-tall-rank2": lambda: rng.standard_normal((9, 2)) @ rng.standard_normal((2, 4)),
        "qr-square-duplicated": lambda: np.vstack([rng.standard_normal((4, 5)), np.zeros((1, 5))])[[0, 1, 2, 3, 0]],
    }[name]()


@pytest.mark.parametrize("name", ["identity-tall", "identity-square", "identity-tall-cond1e6", "cholesky-wide",
                                  "qr-wide-cond1e6", "qr-wide-duplicated-rows", "qr-tall-rank2",
                                  "qr-square-duplicated"])
def test_coordinates_representations(name):
    """H = K Bᵀ with B orthonormal (B read off as to_w(I)ᵀ), r = matrix_rank(H), to_coords(W) = W B,
    to_coords ∘ to_w = id, solve_logits inverts X ↦ X Kᵀ when r = m; and the representation is the
    documented one for the regime (identity when d ≤ m full rank, Cholesky when d > m well
    conditioned, pivoted QR otherwise)."""
    H = _h(name)
    m, d = H.shape
    c = coordinates(H)
    r = c.rank
    assert r == np.linalg.matrix_rank(H)
    kind = "identity" if c.basis is None and c._H is None else "cholesky" if c._H is not None else "qr"
    assert name.startswith(kind)
    if kind == "cholesky":
        np.testing.assert_array_equal(c.K, np.tril(c.K))
    B = c.to_w(np.eye(r)).T
    assert B.shape == (d, r)
    np.testing.assert_allclose(B.T @ B, np.eye(r), rtol=0, atol=1e-10)
    np.testing.assert_allclose(c.K @ B.T, H, rtol=0, atol=1e-12 * np.abs(H).max())
    rng = np.random.default_rng(1)
    W = rng.standard_normal((3, d))
    np.testing.assert_allclose(c.to_coords(W), W @ B, rtol=0, atol=1e-10 * np.abs(W).max())
    X = rng.standard_normal((3, r))
    np.testing.assert_allclose(c.to_coords(c.to_w(X)), X, rtol=0, atol=1e-10)
    np.testing.assert_allclose(c.gram, H @ H.T, rtol=0, atol=1e-12 * np.abs(H).max() ** 2 * d)
    if r == m:
        Z = rng.standard_normal((4, m))
        Xs = c.solve_logits(Z)
        np.testing.assert_allclose(Xs @ c.K.T, Z, rtol=0, atol=1e-8)


# == 7. pair certificates ================================================================================

def pair_data(shared=(0, 1, 2), seed=0, collinear=False) -> NTPData:
    """d = 2, m = 5, V = 5: tokens 0 and 1 are both in the supports of the ``shared`` contexts, and
    token 0 (not 1) follows context 3. No other pair of tokens shares more than 2 contexts."""
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((5, 2))
    if collinear:
        H[list(shared)] = np.outer(rng.uniform(0.5, 2.0, len(shared)), H[shared[0]] / np.linalg.norm(H[shared[0]]))
    supports = [set() for _ in range(5)]
    for j in shared:
        supports[j] |= {0, 1}
    supports[3] |= {0, 2}
    supports[4] |= {3}
    supports[2] |= {4}
    for j in range(5):
        if not supports[j]:
            supports[j] = {2, 3}
    P = np.zeros((5, 5))
    for j, s in enumerate(supports):
        p = rng.uniform(0.2, 1.0, len(s))
        P[j, sorted(s)] = p / p.sum()
    data = NTPData(H, P)
    mask = P > 0
    co = mask.T.astype(int) @ mask
    np.fill_diagonal(co, 0)
    assert co[0, 1] == len(shared) and np.sort(co.ravel())[-3] <= 2  # only (0, 1) shares more than d
    return data


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pair_farkas_certificate(seed):
    """Tokens 0, 1 tied on 3 > d = 2 contexts spanning R² and split on context 3: is_separable says no
    through the pair route, with the one-entry μ at (3, token 1), a Farkas matrix valid from the
    definitions, and cvxpy agrees that the NTP-SVM is infeasible (as does ntp_svm)."""
    data = pair_data(seed=seed)
    sep = is_separable(data)
    assert not sep and "pair" in sep.method
    mu = sep.farkas.toarray()
    assert sep.farkas.nnz == 1 and mu[3, 1] == pytest.approx(1.0)
    assert_farkas_certificate(data, sep, atol=1e-12)
    assert ref_ntp_svm(data)[0] in INFEASIBLE
    res = ntp_svm(data)
    assert res.status == "infeasible" and "pair" in res.method


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pair_compatibility_certificate(seed):
    """The same tokens with different log-odds on the 3 shared contexts (2 unknowns): is_compatible
    says no through the pair route; the certificate satisfies the definition checks; the reported
    residual lower-bounds the largest anchor residual of (4) at the least-squares W; cvxpy finds (4)
    infeasible and the previous solvers agree."""
    data = pair_data(seed=seed)
    comp = is_compatible(data)
    assert not comp and comp.method.startswith("pair")
    lam = assert_compatibility_certificate(data, comp)
    assert set(np.nonzero(lam)[1].tolist()) == {0, 1}
    assert ref_w_star(data)[0] in INFEASIBLE
    assert not previous.is_compatible(data)
    # "every W leaves an anchor residual ≥ residual": check at the least-squares W of the anchor rows.
    P = data.probs.toarray()
    rows, rhs = [], []
    for j, supp in enumerate(supports_of(data)):
        a = data.anchors[j]
        for z in supp:
            if z != a:
                M = np.zeros((data.V, data.d))
                M[a], M[z] = data.embeddings[j], -data.embeddings[j]
                rows.append(M.ravel())
                rhs.append(np.log(P[j, a] / P[j, z]))
    A, b = np.array(rows), np.array(rhs)
    w = np.linalg.lstsq(A, b, rcond=None)[0]
    assert np.abs(A @ w - b).max() >= comp.residual * (1 - 1e-9)


def test_pair_certificates_not_used_when_shared_contexts_do_not_exceed_d():
    """Negative controls: tokens sharing only d = 2 contexts, or 3 contexts whose embeddings are
    collinear (they do not span R²), are not a pair certificate of non-separability; the answer
    then comes from another route and agrees with cvxpy."""
    for data in (pair_data(shared=(0, 1)), pair_data(collinear=True)):
        sep = is_separable(data)
        assert "tied on more contexts" not in sep.method
        assert bool(sep) == (ref_ntp_svm(data)[0] not in INFEASIBLE)
        if not sep:  # decided by another route (e.g. the pair LP): its certificate from the definitions
            assert_farkas_certificate(data, sep, nonzero_combination=False)
    comp = is_compatible(pair_data(shared=(0, 1)))
    assert "pair" not in comp.method


def _text_like(m: int, V: int, d: int, seed: int) -> NTPData:
    """d ≪ m data shaped like real text: mostly one next token per context, Zipf-distributed tokens, so that
    no two tokens share more than d contexts (the span pair certificate cannot apply)."""
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, V + 1)
    P = np.zeros((m, V))
    for j in range(m):
        S = rng.choice(V, size=1 + (rng.random() < 0.2), replace=False, p=zipf / zipf.sum())
        P[j, S] = rng.dirichlet(np.ones(S.size)) + 0.05
    return NTPData(rng.standard_normal((m, d)), P / P.sum(axis=1, keepdims=True))


def _pair_lp(pb, **kw):
    return pair_certificates.pair_lp_farkas(pb.K, pb.coords.rank, pb.groups.pattern, **kw)


@pytest.mark.parametrize("seed", range(6))
def test_pair_lp_certificate_is_valid_and_agrees_with_the_full_lp_and_cvxpy(seed):
    """Text-like data, d ≪ m: where the pair LP decides, its Farkas matrix passes the checks from the
    definitions, and HiGHS on the whole problem and cvxpy (all pairs, on W) agree that no separator exists."""
    data = _text_like(150, 12, 4, seed)
    assert not any(True for _ in pair_certificates.heavy_pairs(token_groups(data).pattern, 4))  # no span certificate
    sep = is_separable(data)
    assert not sep and sep.method.endswith("(pair LP)")
    assert_farkas_certificate(data, sep, nonzero_combination=False)
    assert not is_separable(data, method="lp")
    assert ref_ntp_svm(data)[0] in INFEASIBLE
    # the certificate involves two token groups only
    assert len(np.unique(np.nonzero(sep.certificate.toarray())[1])) == 2


@pytest.mark.parametrize("case", [(8, 8, 6, 2, 0), (8, 10, 6, 3, 1), (7, 6, 5, 3, 5), (6, 6, 4, 2, 2)])
def test_pair_lp_finds_nothing_on_separable_data(case):
    """Negative control: on data cvxpy finds separable (d < m), no pair of groups yields a certificate."""
    data = synthetic(*case[:4], seed=case[4])
    assert ref_ntp_svm(data)[0] == "optimal"
    pb = separability.make_problem(data, None)
    assert _pair_lp(pb, options=pair_certificates.PairOptions(MAX_PAIRS=10**6)) is None
    assert is_separable(data)


def _pair_sets(pb, a, b):
    P = pb.groups.pattern.tocsr()
    Ja, Jb = P.indices[P.indptr[a]:P.indptr[a + 1]], P.indices[P.indptr[b]:P.indptr[b + 1]]
    return np.setdiff1d(Ja, Jb), np.setdiff1d(Jb, Ja), np.intersect1d(Ja, Jb)


@pytest.mark.parametrize("data", [_text_like(150, 12, 4, 0), _text_like(150, 12, 4, 3), _text_like(150, 12, 8, 1),
                                  synthetic(8, 10, 6, 3, seed=1), synthetic(7, 6, 5, 3, seed=5)],
                         ids=["text0", "text3", "text-d8", "synth1", "synth5"])
def test_pair_least_squares_shortcut_only_skips_feasible_pairs(data):
    """The least-squares shortcut of the pair LP skips a pair only when its system (uᵀk ≥ 1 on P, ≤ −1 on N,
    = 0 on E) is feasible, checked by HiGHS on that system written from the definition; and the pair of the
    text-like certificate (infeasible) is never skipped."""
    from scipy.optimize import linprog

    pb = separability.make_problem(data, None)
    K, G = pb.K, pb.groups.n_groups
    for a in range(G):
        for b in range(a + 1, G):
            Pj, Nj, Ej = _pair_sets(pb, a, b)
            if Pj.size + Nj.size == 0:
                continue
            A_ub = np.vstack([-K[Pj], K[Nj]])
            res = linprog(np.zeros(K.shape[1]), A_ub=A_ub, b_ub=-np.ones(len(A_ub)),
                          A_eq=K[Ej] if Ej.size else None, b_eq=np.zeros(Ej.size) if Ej.size else None,
                          bounds=[(None, None)] * K.shape[1], method="highs")
            if pair_certificates._separated_by_least_squares(K, Pj, Nj, Ej):
                assert res.status == 0, (a, b)
    cert = _pair_lp(pb, options=pair_certificates.PairOptions(MAX_PAIRS=10**6))
    if cert is not None:
        a, b = np.unique(cert[0])
        assert not pair_certificates._separated_by_least_squares(K, *_pair_sets(pb, a, b))


@pytest.mark.parametrize("rows", [3, 40])
def test_least_squares_shortcut_by_either_solve_answers_by_the_definition(rows):
    """The shortcut solves the normal equations where A is tall (40 rows in R⁵) and lstsq where AᵀA is singular
    (3 rows): either way it claims a pair separated only where it is. Contexts split by a planted direction are;
    a context in P and its copy in N are not, whatever the rank (also when the copy makes AᵀA singular)."""
    rng = np.random.default_rng(0)
    K = rng.standard_normal((rows + 1, 5))
    side = K[:rows] @ rng.standard_normal(5) > 0
    Pj, Nj = np.flatnonzero(side), np.flatnonzero(~side)
    none = np.zeros(0, np.int64)
    assert pair_certificates._separated_by_least_squares(K, Pj, Nj, none)
    K[rows] = K[Pj[0]]  # P's first context again, in N
    assert not pair_certificates._separated_by_least_squares(K, Pj, np.r_[Nj, rows], none)


#: The pair LPs alone (no Newton steps on the pairs' squared hinges first): what the tests of the LP path measure.
LP_ONLY = pair_certificates.PairOptions(MAX_PAIRS=10**6, NEWTON_STEPS=0)


def test_pair_lp_skips_the_lp_where_least_squares_separates(monkeypatch):
    """On separable data whose pairs the least-squares direction already separates, no LP is solved, and
    the answer (no certificate) is the LP's: with the shortcut disabled every pair goes to HiGHS."""
    import scipy.optimize

    calls = []
    real = scipy.optimize.linprog

    def spy(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(scipy.optimize, "linprog", spy)
    pb = separability.make_problem(synthetic(8, 10, 6, 3, seed=1), None)
    assert _pair_lp(pb, options=LP_ONLY) is None
    with_shortcut = len(calls)
    monkeypatch.setattr(pair_certificates, "_separated_by_least_squares", lambda *a: False)
    assert _pair_lp(pb, options=LP_ONLY) is None
    assert len(calls) - with_shortcut > with_shortcut


def _pair_systems(seed: int, n: int, r: int, solvable: bool):
    """A pair system in R^r (signed rows A[:n_signed], tied rows after them) that is solvable (rows on the sides of a
    planted direction, the tied ones orthogonal to it) or not (one signed row also negated: uᵀa ≥ 1 and −uᵀa ≥ 1)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(r)
    A = rng.standard_normal((n, r))
    n_tied = r // 3
    A[:n - n_tied] *= np.sign(A[:n - n_tied] @ w)[:, None]  # signed rows on w's positive side
    A[n - n_tied:] -= np.outer(A[n - n_tied:] @ w, w) / (w @ w)  # tied rows orthogonal to w
    if not solvable:
        A[1] = -A[0]
    return A, n - n_tied


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("solvable", [True, False])
def test_pair_hinge_decides_as_highs_does_and_its_weights_are_farkas(seed, solvable):
    """The pair's squared hinge (semismooth Newton) against HiGHS on the pair system written from the definition
    (uᵀa ≥ 1 on the signed rows, = 0 on the tied): "separated" exactly where HiGHS finds a solution; otherwise Farkas
    weights, nonnegative on the signed rows, summing to 1 there, with Σ z_i a_i = 0 to rounding."""
    from scipy.optimize import linprog

    A, n_signed = _pair_systems(seed, 60, 12, solvable)
    res = linprog(np.zeros(A.shape[1]), A_ub=-A[:n_signed], b_ub=-np.ones(n_signed), A_eq=A[n_signed:],
                  b_eq=np.zeros(len(A) - n_signed), bounds=[(None, None)] * A.shape[1], method="highs")
    assert res.status == (0 if solvable else 2)
    verdict, z = pair_certificates.pair_hinge(A, n_signed, 50)
    if solvable:
        assert verdict == "separated" and z is None
        return
    assert verdict == "farkas"
    assert np.all(z[:n_signed] >= 0) and z[:n_signed].sum() == pytest.approx(1.0, abs=1e-12)
    assert np.linalg.norm(z @ A) <= 1e-12 * np.abs(A).max()


def test_pair_hinge_gives_up_rather_than_guess():
    """One Newton step settles nothing, and a deadline already past allows none: no verdict either way (the caller's LP
    decides, within what is left), neither "separated" nor weights; the same system with 50 steps and no deadline gives
    its weights (the test above)."""
    A, n_signed = _pair_systems(0, 60, 12, solvable=False)
    assert pair_certificates.pair_hinge(A, n_signed, 1) == (None, None)
    assert pair_certificates.pair_hinge(A, n_signed, 50, deadline=time.perf_counter() - 1.0) == (None, None)
    assert pair_certificates.pair_hinge(A, n_signed, 50, deadline=time.perf_counter() + 60.0)[0] == "farkas"


def test_pair_certificates_by_newton_and_by_the_lp_agree(monkeypatch):
    """The text-like certificate's pair found by the Newton steps without any LP, and by the LPs alone: both valid
    Farkas matrices of the whole problem, on the same two groups."""
    import scipy.optimize

    calls = []
    real = scipy.optimize.linprog
    monkeypatch.setattr(scipy.optimize, "linprog", lambda *a, **k: calls.append(1) or real(*a, **k))
    data = _text_like(150, 12, 4, 0)
    pb = separability.make_problem(data, None)
    by_newton = _pair_lp(pb)
    assert by_newton is not None and not calls
    by_lp = _pair_lp(pb, options=LP_ONLY)
    assert by_lp is not None and calls
    assert set(np.unique(by_newton[0])) == set(np.unique(by_lp[0]))
    for cert in (by_newton, by_lp):
        g, j, psi, perp = cert
        Psi = sp.csr_matrix((psi, (g, j)), shape=(pb.groups.n_groups, data.m)).toarray()
        assert np.abs(Psi.sum(axis=0)).max() <= 1e-12  # balanced in every context
        assert np.linalg.norm(Psi @ pb.K) == pytest.approx(perp, abs=1e-15) and perp <= 1e-12
        off = pb.groups.pattern.toarray() == 0
        assert Psi[off].max() <= 0 and Psi[off].sum() == pytest.approx(-1.0)


def test_the_hinge_route_tries_the_pairs_that_carry_its_residual():
    """method="hinge" runs no pair route, yet where a pair is the reason (text-like data, d ≪ m) its stalled φ rests on
    that pair's two groups, and it returns their pair certificate, valid from the definitions; negative control: with
    GUIDED_GROUPS = 0 the route decides by its own means (no pair certificate), and a negative count is refused."""
    from embgeo.ntp.solvers.squared_hinge import HingeOptions

    data = _text_like(150, 12, 4, 0)
    sep = is_separable(data, method="hinge")
    assert not sep and "carrying the squared hinge's residual" in sep.method
    assert_farkas_certificate(data, sep, nonzero_combination=False)
    assert len(np.unique(np.nonzero(sep.certificate.toarray())[1])) == 2
    other = is_separable(data, method="hinge", hinge_options=HingeOptions(GUIDED_GROUPS=0))
    assert not other and "carrying" not in other.method and "pair of token groups" not in other.method
    with pytest.raises(ValueError, match="GUIDED_GROUPS"):
        HingeOptions(GUIDED_GROUPS=-1)


def test_pair_lp_respects_its_budget():
    pb = separability.make_problem(_text_like(150, 12, 4, 0), None)
    assert _pair_lp(pb, max_seconds=0.0) is None  # the budget is checked before every pair
    assert _pair_lp(pb, options=pair_certificates.PairOptions(MAX_PAIRS=0)) is None
    assert _pair_lp(pb) is not None


def test_pair_lp_gives_highs_what_is_left_of_its_budget(monkeypatch):
    """One pair LP can be large (the two most frequent groups at m = 100,000): each gets the budget left as
    HiGHS's time limit, never more than PairOptions.SECONDS, also when ntp_svm was given no max_seconds."""
    import scipy.optimize

    limits, presolve = [], []
    real = scipy.optimize.linprog

    def spy(*args, options=None, **kw):
        limits.append((options or {}).get("time_limit"))
        presolve.append((options or {}).get("presolve"))
        return real(*args, options=options, **kw)

    monkeypatch.setattr(scipy.optimize, "linprog", spy)
    pb = separability.make_problem(_text_like(150, 12, 4, 0), None)
    lp_only = pair_certificates.PairOptions(SECONDS=7.0, NEWTON_STEPS=0)
    assert _pair_lp(pb, options=lp_only) is not None
    assert limits and all(0 < t <= 7.0 for t in limits)
    assert all(p is False for p in presolve)  # a wall: HiGHS's presolve does not check the limit (highs_options)
    limits.clear()
    assert _pair_lp(pb, max_seconds=3.0, options=lp_only) is not None
    assert limits and all(0 < t <= 3.0 for t in limits)


# == 8. incompatibility decided by the equality solve ===================================================

@pytest.mark.parametrize("case", [(10, 8, 2, 2, 6), (12, 10, 3, 3, 0), (9, 8, 2, 2, 39)])
def test_incompatibility_through_the_equality_solve(case):
    """No pair of tokens shares more than d contexts, yet tokens following more than d contexts
    make (4) overdetermined: is_compatible decides through the t-form solve (not a pair). Its
    certificate is zero on tokens with independent contexts, balanced, orthogonal to each token's
    contexts, ⟨λ, log p̂⟩ = −1; cvxpy and the previous solvers agree (4) has no solution."""
    m, V, d, Ssz, seed = case
    data = synthetic(m, V, d, Ssz, seed=seed)
    mask = data.probs.toarray() > 0
    co = mask.T.astype(int) @ mask
    np.fill_diagonal(co, 0)
    assert co.max() <= d and mask.sum(axis=0).max() > d  # the premise: no pair, but deficient tokens
    comp = is_compatible(data)
    assert not comp and not comp.method.startswith("pair") and "equality" in comp.method
    lam = assert_compatibility_certificate(data, comp)
    for v in range(V):
        J = np.flatnonzero(mask[:, v])
        if np.linalg.matrix_rank(data.embeddings[J]) == len(J):
            assert np.all(np.abs(lam[J, v]) <= 1e-12 * np.abs(lam).max())
    assert ref_w_star(data)[0] in INFEASIBLE
    assert not previous.is_compatible(data)


# == 9. dim F with rank-deficient tokens ===================================================================

@pytest.mark.parametrize("case", [(10, 5, 3, 2, 0), (10, 8, 2, 2, 6), (12, 10, 3, 3, 0), (8, 6, 2, 3, 1)])
def test_subspace_dim_with_deficient_tokens(case):
    """Tokens following more contexts than d: dim F = rank of the dense spanning matrix of eq. (5)
    (and the previous solver's dim), strictly less than Σ_j S_j − m."""
    m, V, d, Ssz, seed = case
    data = synthetic(m, V, d, Ssz, seed=seed)
    assert (data.probs.toarray() > 0).sum(axis=0).max() > d
    F = subspace(data)
    rank = int(np.linalg.matrix_rank(spanning_matrix(data)))
    assert F.dim == rank == previous.subspace(data).dim
    assert F.dim < int(np.sum(data.support_sizes)) - m
    assert F.system.n_constraints > 0


# == 10. the time limit ======================================================================================

@pytest.mark.parametrize(("case", "must_time_out"), [
    pytest.param((6, 5, 9, 2, 0), True, id="d>m-m6-d9"),
    pytest.param((10, 8, 14, 4, 0), True, id="d>m-m10-d14"),
    pytest.param((8, 10, 6, 3, 1), False, id="d<m-m8-d6"),
])
def test_ntp_svm_time_limit(case, must_time_out, monkeypatch):
    """A limit spent by the first iteration (a fake clock: each dual iteration, ALM inner solve or interior-point
    Newton direction costs 1 s of a 0.5 s limit; setup is free, as no stage begins after the deadline) stops at the
    first check (check_every=1):
    either status "time_limit" with a W
    feasible for (6a)/(6b) (min margin 1), a dual value below the independently computed dual bound
    Σμ − ½‖P⊥(Σ μ (e_z − e_v)h̄_jᵀ)‖² ≤ ½‖W‖², the reported gap = (½‖W‖² − dual)/(½‖W‖²) and
    ‖W − W^mm‖² ≤ gap·‖W‖² and ‖W − W^mm‖ ≤ error_bound·‖W^mm‖; or SolverError when no feasible point
    existed yet. Nothing else."""
    import time

    from embgeo.ntp.solvers import svm_alm, svm_dual, svm_ipm

    from .test_time_limits import FakeClock, spy

    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    spy(monkeypatch, clock, svm_dual, "project_dual_dense", cost=1.0)
    spy(monkeypatch, clock, svm_alm.SVMALM, "_inner", cost=1.0)
    spy(monkeypatch, clock, svm_ipm.SVMIPM, "_direction", cost=1.0)
    m, V, d, Ssz, seed = case
    data = synthetic(m, V, d, Ssz, seed=seed)
    try:
        res = ntp_svm(data, max_seconds=0.5, check_every=1)
    except SolverError as exc:
        assert not must_time_out, exc
        assert "time_limit" in str(exc)
        return
    assert res.status == "time_limit"
    W = res.W
    half = 0.5 * np.linalg.norm(W) ** 2
    kv = kesler_values(data, W)
    assert kv.min() == pytest.approx(1.0, abs=1e-9)
    assert np.abs(pair_values(data, W)).max() <= 1e-9 * max(1.0, np.abs(logits(data, W)).max())
    gap = res.residuals["duality_gap"]
    assert 0 < gap < 1
    dual = half * (1 - gap)
    mu = res.multipliers.toarray()
    assert np.all(mu >= 0) and np.all(mu[~off_mask(data)] == 0)
    C = combination(data, mu)
    Cp = C - (dense_projector_F(data) @ C.ravel()).reshape(C.shape)
    bound = mu.sum() - 0.5 * np.linalg.norm(Cp) ** 2
    assert dual <= bound * (1 + 1e-9) + 1e-12
    assert bound <= half * (1 + 1e-9)
    W_mm = ntp_svm(data).W
    assert np.linalg.norm(W - W_mm) ** 2 <= gap * np.linalg.norm(W) ** 2 * (1 + 1e-9)
    # ½‖W − W^mm‖² ≤ ½‖W‖² − D and ½‖W^mm‖² ≥ D: the bound relative to ‖W^mm‖ is √(gap/(1 − gap))
    assert res.residuals["error_bound"] == pytest.approx(math.sqrt(gap / (1 - gap)), rel=1e-9)
    assert np.linalg.norm(W - W_mm) <= res.residuals["error_bound"] * np.linalg.norm(W_mm) * (1 + 1e-9)


# == 11. synthetic_large and estimate_memory ===============================================================

def test_synthetic_large_mean_support_and_token_laws():
    """The mean support is within 10% of ``mean_support`` at m = 20000; the most frequent token is
    far more frequent under the Zipf law than under the uniform one."""
    zipf = synthetic_large(20_000, V=5_000, d=8, mean_support=5.0, token_law="zipf", seed=0)
    unif = synthetic_large(20_000, V=5_000, d=8, mean_support=5.0, token_law="uniform", seed=0)
    for data in (zipf, unif):
        assert data.m == 20_000 and data.V == 5_000 and data.d == 8
        assert abs(data.support_sizes.mean() - 5.0) <= 0.5
        np.testing.assert_allclose(np.asarray(data.probs.sum(axis=1)).ravel(), 1.0, rtol=0, atol=1e-12)
    top_zipf = np.bincount(zipf.probs.indices, minlength=zipf.V).max()
    top_unif = np.bincount(unif.probs.indices, minlength=unif.V).max()
    assert top_zipf > 20 * top_unif
    low = synthetic_large(20_000, V=1_000, d=4, mean_support=2.0, seed=1)
    assert abs(low.support_sizes.mean() - 2.0) <= 0.2


def test_synthetic_large_single_token_supports_follow_the_zipf_law():
    """A support of size 1 "drawn without replacement from P(v) ∝ 1/(v+1)" is one draw from that law,
    so among the ~12k contexts with S_j = 1 token 0 should have frequency 1/H_V ≈ 0.110 (binomial
    standard error ≈ 0.003).

    KNOWN BUG (src/embgeo/ntp/data.py, synthetic_large): a support is a uniformly random subset
    (rng.permutation of np.unique) of the distinct tokens among 4S + 8 draws, not the first S
    distinct draws, which flattens the law: token 0 gets ≈ 0.073 here.
    """
    data = synthetic_large(20_000, V=5_000, d=4, mean_support=5.0, token_law="zipf", seed=0)
    one = data.support_sizes == 1
    tokens = data.probs.indices[data.probs.indptr[:-1][one]]
    p0 = 1.0 / np.sum(1.0 / np.arange(1, data.V + 1))
    se = math.sqrt(p0 * (1 - p0) / one.sum())
    assert abs(np.mean(tokens == 0) - p0) <= 5 * se


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"mean_support": 0.5}, "mean_support"),
    ({"mean_support": 25.0}, "mean_support"),  # must be < V/2
    ({"mean_support": float("nan")}, "mean_support"),
    ({"token_law": "pareto"}, "token_law"),
    ({"alpha": 0.0}, "alpha"),
    ({"m": 0}, "m"),
    ({"V": 1}, "V"),
    ({"d": 2.5}, "d"),
])
def test_synthetic_large_rejects_bad_arguments(kwargs, field):
    """Bad arguments raise InputError whose message starts with the field's name."""
    with pytest.raises(InputError, match=rf"^{field}:"):
        synthetic_large(**{"m": 100, "V": 50, "d": 4, "mean_support": 3.0, **kwargs})


@pytest.mark.parametrize("make", [lambda: synthetic(6, 5, 9, 2, seed=0), lambda: synthetic(10, 8, 2, 2, seed=6),
                                  lambda: synthetic_large(500, V=200, d=8, seed=0)])
def test_estimate_memory_parts(make):
    """The documented keys, integers, total = sum of the parts; coordinates and outputs as documented
    (8·(m·min(m, d) + m² if d > m) and 8·3·V·d)."""
    data = make()
    est = estimate_memory(data)
    assert set(est) == {"coordinates", "equality_system", "svm_dual", "outputs", "total"}
    assert all(isinstance(v, int) and v >= 0 for v in est.values())
    assert est["total"] == sum(v for k, v in est.items() if k != "total")
    m, V, d = data.m, data.V, data.d
    assert est["coordinates"] == 8 * (m * min(m, d) + (m * m if d > m else 0))
    assert est["outputs"] == 8 * 3 * V * d


# == 12. synthetic() draws as before the rewrite ==============================================================

def old_synthetic(m, V, d, S, seed):
    """The construction before the rewrite: per context a Dirichlet(1) draw, then the support, dense."""
    rng = np.random.default_rng(seed)
    P = np.zeros((m, V))
    for j in range(m):
        p = rng.dirichlet(np.ones(S))
        P[j, rng.choice(V, size=S, replace=False)] = p
    return P, rng.standard_normal((m, d))


@pytest.mark.parametrize("shape", [(6, 6, 4, 2, 0), (7, 9, 3, 4, 3), (5, 10, 12, 1, 1)])
def test_synthetic_reproduces_the_old_draws(shape):
    """Same probabilities and embeddings, bit for bit, as the old dense construction."""
    m, V, d, Ssz, seed = shape
    P, H = old_synthetic(m, V, d, Ssz, seed)
    data = synthetic(m, V, d, Ssz, seed=seed)
    np.testing.assert_array_equal(data.embeddings, H)
    np.testing.assert_array_equal(data.probs.toarray(), NTPData(H, P).probs.toarray())
    np.testing.assert_allclose(data.probs.toarray(), P, rtol=1e-15, atol=0)


def test_synthetic_pinned_values():
    """Values of synthetic(6, 6, 4, 2, seed=0) computed once with the old construction."""
    data = synthetic(6, 6, 4, 2, seed=0)
    assert [s.tolist() for s in data.supports] == [[0, 1], [0, 3], [2, 5], [3, 4], [0, 5], [2, 5]]
    P = data.probs.toarray()
    assert P[0, 0] == pytest.approx(0.40007078537325058, rel=1e-15)
    assert P[3, 3] == pytest.approx(5.6719534407102693e-04, rel=1e-14)
    assert P[5, 2] == pytest.approx(0.82931922144142545, rel=1e-15)
    np.testing.assert_allclose(data.embeddings[0], [1.3664634705496859, -0.6651946734866135, 0.3515100700930197,
                                                    0.9034701816518086], rtol=1e-15)
    np.testing.assert_allclose(data.embeddings[5], [1.5139237747390626, 1.3458754237823045, 0.7813114007004275,
                                                    0.2644556303293035], rtol=1e-15)


# == the candidate separator =====================================================================================

@pytest.mark.parametrize("case", [(8, 8, 6, 2, 0), (8, 10, 6, 3, 1), (50, 10, 60, 6, 0)])
def test_candidate_separator_is_a_certificate(case):
    """W^mm of cvxpy, perturbed inside F (which does not change any margin), is accepted as a candidate: the
    certificate is in F⊥ (dense projector) with every margin ≥ 1 exactly."""
    data = synthetic(*case[:4], seed=case[4])
    status, W = ref_ntp_svm(data)
    assert status == "optimal"
    noise = np.random.default_rng(1).standard_normal(W.shape)
    candidate = 3.0 * W + (dense_projector_F(data) @ noise.ravel()).reshape(W.shape)
    sep = is_separable(data, candidate=candidate)
    assert sep and sep.method.startswith("the given candidate")
    Wc = sep.W
    assert np.linalg.norm(dense_projector_F(data) @ Wc.ravel()) <= 1e-9 * np.linalg.norm(Wc)
    assert kesler_values(data, Wc).min() == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(Wc, W / kesler_values(data, W).min(), rtol=1e-5, atol=1e-7 * np.abs(W).max())


@pytest.mark.parametrize("case", [(8, 8, 6, 2, 0), (8, 10, 6, 3, 1), (50, 10, 60, 6, 0)])
def test_candidate_projection_is_the_orthogonal_projection_onto_f_perp(case):
    """A candidate with a general perturbation (not inside F): the certificate is P_⊥(candidate)/γ with P_⊥
    the dense projector, restricted to the span of the embeddings (the rest changes no logit)."""
    data = synthetic(*case[:4], seed=case[4])
    status, W = ref_ntp_svm(data)
    candidate = 3.0 * W + 0.01 * np.linalg.norm(W) / np.sqrt(W.size) * np.random.default_rng(2).standard_normal(W.shape)
    sep = is_separable(data, candidate=candidate)
    assert sep and sep.method.startswith("the given candidate")
    Wp = candidate - (dense_projector_F(data) @ candidate.ravel()).reshape(W.shape)
    Q, _ = np.linalg.qr(data.embeddings.T)  # an orthonormal basis of the span of the h_j
    Wp = Wp @ Q @ Q.T
    np.testing.assert_allclose(sep.W, Wp / kesler_values(data, Wp).min(), atol=1e-9 * np.abs(Wp).max() / 3)


@pytest.mark.parametrize("case", [(8, 8, 6, 2, 0), (8, 10, 6, 3, 1)])
def test_candidate_with_tokens_in_no_support_that_bind_the_margin(case):
    """Tokens that follow no context (a real LM's 48k of 49k) enter the candidate's certificate only through their
    logits (the projection moves only rows in some support): the certificate is still P_⊥(candidate)/γ over every
    token, with γ set by a token in no support here — rows made to nearly copy a support token's row; the
    candidate itself is left as it was."""
    base = synthetic(*case[:4], seed=case[4])
    extra = 3
    data = NTPData(base.embeddings, sp.hstack([base.probs, sp.csr_matrix((base.m, extra))]).tocsr())
    status, W = ref_ntp_svm(data)
    assert status == "optimal"
    candidate = 3.0 * W + 0.01 * np.linalg.norm(W) / np.sqrt(W.size) * np.random.default_rng(2).standard_normal(W.shape)
    first = [int(np.flatnonzero(base.probs[j].toarray())[0]) for j in range(extra)]
    candidate[base.V:] = 0.97 * candidate[first]  # nearly the logits of a support token: the smallest margins
    given = candidate.copy()
    sep = is_separable(data, candidate=candidate)
    assert sep and sep.method.startswith("the given candidate")
    assert np.array_equal(candidate, given)
    Wp = candidate - (dense_projector_F(data) @ candidate.ravel()).reshape(W.shape)
    Q, _ = np.linalg.qr(data.embeddings.T)
    Wp = Wp @ Q @ Q.T
    np.testing.assert_allclose(sep.W, Wp / kesler_values(data, Wp).min(), atol=1e-9 * np.abs(Wp).max() / 3)
    # the smallest margin is one of a token in no support (else this test would not reach that term)
    Z = data.embeddings @ sep.W.T
    unseen = min(float(Z[j, data.supports[j][0]] - Z[j, base.V:].max()) for j in range(data.m))
    assert unseen == pytest.approx(1.0, abs=1e-9) and kesler_values(data, sep.W).min() == pytest.approx(1.0, abs=1e-9)


def test_largest_logits_against_the_logits_written_out():
    rng = np.random.default_rng(0)
    X, K = rng.standard_normal((40, 5)), rng.standard_normal((30, 5))
    L = K @ X.T
    np.testing.assert_allclose(scan.largest_logits(X, K), L.max(axis=1), rtol=1e-15)
    drop = np.array([3, 7, 7, 11])
    keep = np.setdiff1d(np.arange(40), drop)
    np.testing.assert_allclose(scan.largest_logits(X, K, exclude=drop), L[:, keep].max(axis=1), rtol=1e-15)
    assert np.all(scan.largest_logits(X, K, exclude=np.arange(40)) == -np.inf)
    assert np.all(scan.largest_logits(X[:0], K) == -np.inf)


def test_candidate_that_does_not_separate_falls_through():
    sep_data = synthetic(8, 8, 6, 2, seed=0)
    sep = is_separable(sep_data, candidate=np.zeros((sep_data.V, sep_data.d)))  # margin 0: not a certificate
    assert sep and not sep.method.startswith("the given candidate")
    non = synthetic(7, 6, 5, 3, seed=0)  # not separable (cvxpy): no candidate can make it so
    assert ref_ntp_svm(non)[0] in INFEASIBLE
    for seed in range(5):
        res = is_separable(non, candidate=np.random.default_rng(seed).standard_normal((non.V, non.d)))
        assert not res
        assert_farkas_certificate(non, res, nonzero_combination=False)


def test_candidate_input_errors():
    data = synthetic(8, 8, 6, 2, seed=0)
    with pytest.raises(InputError, match="candidate"):
        is_separable(data, method="lp", candidate=np.zeros((data.V, data.d)))
    with pytest.raises(ValueError, match="W"):
        is_separable(data, candidate=np.zeros((data.V, data.d + 1)))


# == 13. Frequent tokens: constraints through their Gram, not null-space bases (issue 24) =====================

def _frequent_tokens(kind: str, seed: int = 0):
    """(K, grp, ctx, weights): tokens in more contexts than r = 3, as frequent words are. ``overlapping``: the
    frequent tokens share contexts, so the feasible t are those of one x (t = K x: the range K_t path);
    ``disjoint``: two frequent tokens on separate contexts, so t may follow a different x on each (null M
    is larger than range K_t: the pivoted Cholesky, or the eigendecomposition, path)."""
    rng = np.random.default_rng(seed)
    m, r = 40, 3
    K = rng.standard_normal((m, r))
    if kind == "overlapping":
        pats = [rng.choice(m, size=q, replace=False) for q in (25, 18, 12, 9)]
        pats += [rng.choice(m, size=rng.integers(2, 4), replace=False) for _ in range(15)]
    else:
        pats = [np.arange(0, 12), np.arange(12, 24), [0, 12, 30], [5, 17, 31], [24, 25], [26, 27, 28], [32, 33]]
    pats += [[j] for j in range(m)]  # every context in the pattern
    grp, ctx = pattern(pats)
    return K, grp, ctx, rng.uniform(0.5, 2.0, len(pats))


@pytest.mark.parametrize("kind, path", [("overlapping", "range K_t"), ("disjoint", "pivoted Cholesky"),
                                        ("disjoint", "eigendecomposition")])
@pytest.mark.parametrize("rhs", ["random", "consistent"])
def test_equality_system_frequent_tokens_match_the_null_space_route(kind, path, rhs, monkeypatch):
    """The projector route (thin SVDs, the constraints' Gram M) gives what the route with explicit null-space
    bases gave (reference/ntp_previous/equality.py): the constraints' rank, consistency, X, t,
    the multipliers and the certificate, on the three ways of finding null M (the eigendecomposition when the
    pivoted Cholesky gives no basis); and the dense KKT reference when consistent."""
    from reference.ntp_previous.equality import EqualitySystem as NullSpaceRoute

    if path == "eigendecomposition":
        monkeypatch.setattr(equality, "_pivoted_null_space", lambda M, tol: None)
    K, grp, ctx, w = _frequent_tokens(kind)
    rng = np.random.default_rng(5)
    if rhs == "random":
        c = rng.standard_normal(len(grp))
    else:
        X0, t0 = rng.standard_normal((len(w), K.shape[1])), rng.standard_normal(K.shape[0])
        c = np.einsum("ij,ij->i", X0[grp], K[ctx]) - t0[ctx]
    new, old = equality.EqualitySystem(K, grp, ctx, w), NullSpaceRoute(K, grp, ctx, w)
    assert new.null_space_route == path
    assert (new.n_constraints, new.constraint_rank) == (old.n_constraints, old.constraint_rank)
    a, b = new.solve(c), old.solve(c)
    assert a.consistent == b.consistent
    assert np.linalg.norm(a.X - b.X) <= 1e-10 * np.linalg.norm(b.X)
    assert np.linalg.norm(a.t - b.t) <= 1e-10 * np.linalg.norm(b.t)
    assert a.residuals["constraints"] == pytest.approx(b.residuals["constraints"], rel=1e-9, abs=1e-12)
    assert_multipliers(K, grp, ctx, w, a.X, a.lam, rtol=1e-9)
    if a.consistent:
        X, t, _, _ = equality_kkt(K, grp, ctx, w, c)
        assert np.linalg.norm(a.X - X) <= 1e-10 * np.linalg.norm(X)
    else:
        assert a.certificate @ c == pytest.approx(-1.0, abs=1e-9)
        np.testing.assert_allclose(a.certificate, b.certificate, rtol=0, atol=1e-9 * np.abs(b.certificate).max())
    if kind == "overlapping" and rhs == "random":
        assert not a.consistent  # the instance exercises the certificate


@pytest.mark.parametrize("make", [lambda: synthetic(50, 10, 60, 6), lambda: synthetic(100, 20, 5, 6, seed=1),
                                  lambda: synthetic_large(500, V=200, d=8, seed=0),
                                  lambda: synthetic_large(2000, V=300, d=6, seed=1), lambda: synthetic(200, 20, 8, 3)])
def test_dim_bounds_bracket_dim_f(make):
    """Subspace.dim_bounds (per-token ranks only) brackets the exact dim F, and is exact without dependent
    tokens (d ≥ m). The last case's formula gives a negative lower bound (-11), clamped to 0."""
    F = subspace(make())
    low, high = F.dim_bounds()
    assert 0 <= low <= F.dim <= high
    if F.coords.rank == F.data.m:
        assert low == high == F.dim


def test_equality_system_bytes_bound_what_it_allocates():
    """The estimate of a system with frequent tokens is at least the arrays it keeps (S, M's factor, T) and
    within a small factor of them: what ntp analyze prints before building it."""
    K, grp, ctx, w = _frequent_tokens("overlapping")
    system = equality.EqualitySystem(K, grp, ctx, w)
    kept = sum(a.nbytes for a in (system.S, system.T, system.chol[0], *system._m_factor[1:]))
    kept += sum(b["U"].nbytes for b in system.buckets)
    est = equality.equality_system_bytes(np.bincount(grp), K.shape[1], K.shape[0], len(system.touched))
    assert kept <= est <= 4 * kept


def test_dual_options_are_data_not_module_state():
    """Issue 40 §3: the working-set dual's tuning is a frozen DualOptions given to SVMDual (no module constant left to
    patch but the shared FARKAS_RTOL acceptance rule); a wrong type is refused; DENSE_DUAL_MAX = 0 takes the working
    set (the negative control: the defaults keep the dense dual on the same data)."""
    import dataclasses

    opt = svm_dual.DualOptions()
    assert opt == svm_dual.DEFAULT_OPTIONS and opt.DENSE_DUAL_MAX == 40_000_000
    with pytest.raises(dataclasses.FrozenInstanceError):
        opt.LP_MAX_PAIRS = 1
    assert not any(hasattr(svm_dual, f.name) for f in dataclasses.fields(svm_dual.DualOptions))
    data = synthetic(12, 8, 14, 2, seed=0)
    with pytest.raises(TypeError, match="options: expected a DualOptions"):
        ntp_svm(data, method="dual", dual_options={"DENSE_DUAL_MAX": 0})
    assert "working set" in ntp_svm(data, method="dual", dual_options=svm_dual.DualOptions(DENSE_DUAL_MAX=0)).method
    assert "working set" not in ntp_svm(data, method="dual").method


def test_route_options_are_data_not_module_state():
    """Issue 40 §3: how "auto" chooses and bounds its routes is a frozen RouteOptions (with the pair certificates'
    PairOptions) that the problem carries, no module constant left to patch; a wrong type is refused; LP_SMALL_NNZ
    = 0 with no pair LP sends "auto" past the LP (the negative control: the defaults let HiGHS decide)."""
    import dataclasses

    opt = separability.RouteOptions()
    assert opt.LP_SMALL_NNZ == 100_000 and opt.pair == pair_certificates.PairOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opt.TIE_ROUNDS = 0
    assert not any(hasattr(separability, f.name) for f in dataclasses.fields(separability.RouteOptions))
    assert not any(hasattr(pair_certificates, f"PAIR_LP_{f.name}")
                   for f in dataclasses.fields(pair_certificates.PairOptions))
    data = synthetic(8, 10, 6, 3, seed=1)  # rank H̄ < m, a small LP
    with pytest.raises(TypeError, match="options: expected a RouteOptions"):
        is_separable(data, route_options={"LP_SMALL_NNZ": 0})
    with pytest.raises(TypeError, match="options: expected a PairOptions"):
        pair_certificates.pair_farkas(np.eye(2), 2, sp.csr_matrix(np.eye(2)), options=(40, 200, 20.0))
    assert is_separable(data).method.startswith("LP")
    assert not is_separable(data, route_options=NO_CHEAP_ROUTES).method.startswith("LP")


@pytest.mark.parametrize("case", [(8, 8, 6, 2, 0), (12, 10, 3, 3, 0)])
def test_a_separating_point_that_does_not_separate_is_no_verdict(case, monkeypatch):
    """HiGHS's "optimal, s = 1" is not taken at its word: a point that, tied exactly and scanned, has no positive
    margin (here all zero, as an ill-conditioned LP can return) leaves method="lp" undecided — never "not separable"
    without a certificate, which the route answered before (2026-11-30)."""
    data = synthetic(*case[:4], seed=case[4])
    pb = separability.make_problem(data, None)
    G, r = pb.groups.n_groups, pb.coords.rank

    def bogus(K, support, og, oj, contexts=None, time_limit=None):
        return separability_lp.LPResult(1.0, np.zeros((G, r)), np.zeros(data.m), None)

    monkeypatch.setattr(separability, "separability_lp", bogus)
    assert separability.separability_by_lp(pb) is None
    with pytest.raises(SolverError, match="does not separate once tied exactly"):
        is_separable(data, method="lp")
