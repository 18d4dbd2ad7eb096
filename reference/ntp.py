"""Independent reference solvers for the NTP theory objects (cvxpy + Clarabel, plain vec(W) form).

Nothing here uses embgeo's constraint operators, anchors, Gram-matrix tricks or projections:
the constraints are written directly from the paper's definitions (``ntp-implicit-bias-neurips.txt``
Sec. 3) over *all* pairs, with a cvxpy Variable of shape (V, d) holding W:

* eq. (4):  (e_z - e_z')ᵀ W h̄_j = log(p̂_{j,z} / p̂_{j,z'})   for every j and every pair z ≠ z' in S_j;
* (6a):     (e_z - e_z')ᵀ W h̄_j = 0                          for every j and every pair z ≠ z' in S_j;
* (6b):     (e_z - e_v)ᵀ W h̄_j ≥ 1                           for every j, z ∈ S_j, v ∉ S_j.

A pair {z, z'} is listed once (z < z'): the equation for (z', z) is the negation of the one for
(z, z'), so listing both would only duplicate rows. The all-pairs system is still redundant
(its rank is Σ_j (S_j - 1), not Σ_j C(S_j, 2)); Clarabel copes with that through its regularised
KKT solves.

Only the supports and the probabilities are read from the data object (``data.probs`` as a dense
array, ``data.embeddings``); supports are recomputed here as the positive entries.
"""

from __future__ import annotations

import itertools

import cvxpy as cp
import numpy as np

#: Statuses cvxpy reports for a problem without a feasible point.
INFEASIBLE = ("infeasible", "infeasible_inaccurate")

#: Clarabel stopping tolerances used by every reference solve (its defaults are 1e-8).
#:
#: Why tighter than the defaults: for min ‖W‖² over a convex set C with minimiser W°, every
#: W ∈ C satisfies ‖W‖² - ‖W°‖² ≥ ‖W - W°‖² (strong convexity + first-order optimality), so a
#: relative objective gap ε only certifies ‖W - W°‖/‖W°‖ ≤ sqrt(ε). At the default ε = 1e-8 that
#: is 1e-4, and the bound is approached in practice: on ``synthetic(7, 6, 5, 3, seed=1)`` the
#: default-tolerance reference is 4e-6 away (relative) from the tight one, on
#: ``synthetic(6, 6, 4, 2, seed=1)`` 1.4e-5. At 1e-12 the certified distance is ≤ 1e-6, which
#: is what lets the tests compare W^mm at a relative 1e-5 (observed agreement: ≤ 1e-9).
CLARABEL_SETTINGS = {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12}


def dense_probs(data) -> np.ndarray:
    """p̂ as a dense (m, V) float64 array."""
    P = data.probs
    return np.asarray(P.toarray() if hasattr(P, "toarray") else P, dtype=np.float64)


def supports_of(data) -> list[np.ndarray]:
    """S_j recomputed from the dense probabilities (sorted token ids with p̂_{j,z} > 0)."""
    return [np.flatnonzero(row > 0) for row in dense_probs(data)]


def pair_rows(data):
    """All (j, z, z') with z < z' in S_j, and log(p̂_{j,z} / p̂_{j,z'}) for each."""
    P = dense_probs(data)
    rows, rhs = [], []
    for j, supp in enumerate(supports_of(data)):
        for z, zp in itertools.combinations(supp.tolist(), 2):
            rows.append((j, z, zp))
            rhs.append(np.log(P[j, z]) - np.log(P[j, zp]))
    return rows, np.array(rhs)


def kesler_rows(data):
    """All (j, z, v) with z ∈ S_j and v ∉ S_j: the (6b) constraints (Kesler points)."""
    rows = []
    for j, supp in enumerate(supports_of(data)):
        off = np.setdiff1d(np.arange(data.V), supp)
        rows.extend((j, z, v) for z in supp.tolist() for v in off.tolist())
    return rows


def _difference_expr(W: cp.Variable, H: np.ndarray, rows, V: int):
    """The vector of (e_a - e_b)ᵀ W h̄_j over rows (j, a, b), as one cvxpy expression."""
    D = np.zeros((len(rows), V))
    ctx = np.empty(len(rows), dtype=int)
    for i, (j, a, b) in enumerate(rows):
        D[i, a] += 1.0
        D[i, b] -= 1.0
        ctx[i] = j
    # row i of (D W) is (e_a - e_b)ᵀ W; its inner product with h̄_j is the constraint value.
    return cp.sum(cp.multiply(D @ W, H[ctx]), axis=1)


def _solve(objective, constraints):
    problem = cp.Problem(cp.Minimize(objective), constraints)
    problem.solve(solver="CLARABEL", **CLARABEL_SETTINGS)
    return problem.status


def ref_w_star(data):
    """min ‖W‖_F² s.t. eq. (4) for all pairs; returns (status, W or None).

    The minimum-norm solution of a consistent linear system lies in the row space of its
    matrix, which for (4) is the data subspace F of eq. (5): it is W* (Def. 1, footnote 6).
    """
    H = np.asarray(data.embeddings, dtype=np.float64)
    W = cp.Variable((data.V, data.d))
    rows, rhs = pair_rows(data)
    constraints = [_difference_expr(W, H, rows, data.V) == rhs] if rows else []
    status = _solve(cp.sum_squares(W), constraints)
    return status, (None if status in INFEASIBLE or W.value is None else np.asarray(W.value))


def ref_ntp_svm(data):
    """The NTP-SVM (Def. 3): min ‖W‖_F² s.t. (6a) for all pairs and (6b); returns (status, W or None)."""
    H = np.asarray(data.embeddings, dtype=np.float64)
    W = cp.Variable((data.V, data.d))
    eq_rows, _ = pair_rows(data)
    constraints = []
    if eq_rows:
        constraints.append(_difference_expr(W, H, eq_rows, data.V) == 0)
    constraints.append(_difference_expr(W, H, kesler_rows(data), data.V) >= 1)
    status = _solve(cp.sum_squares(W), constraints)
    return status, (None if status in INFEASIBLE or W.value is None else np.asarray(W.value))


def ref_multiclass_svm(H: np.ndarray, labels, V: int):
    """Brute-force multiclass hard-margin SVM (Crammer-Singer form, no bias).

    min ‖W‖_F² s.t. (e_{y_j} - e_v)ᵀ W h_j ≥ 1 for every j and every v ≠ y_j, with one scalar
    cvxpy constraint per (j, v). This is what NTP-SVM must reduce to when every S_j = {y_j}
    (paper Remark 1): there are no equalities and (6b) is exactly this constraint set.
    """
    H = np.asarray(H, dtype=np.float64)
    W = cp.Variable((V, H.shape[1]))
    constraints = []
    for j, y in enumerate(labels):
        for v in range(V):
            if v != y:
                constraints.append((W[int(y), :] - W[v, :]) @ H[j] >= 1)
    status = _solve(cp.sum_squares(W), constraints)
    return status, (None if status in INFEASIBLE or W.value is None else np.asarray(W.value))


# -- plain numpy evaluations of the definitions (no embgeo operators) ---------------------------

def logits(data, W) -> np.ndarray:
    """Z (m, V): row j holds the logits W h̄_j."""
    return np.asarray(data.embeddings) @ np.asarray(W).T


def pair_values(data, W) -> np.ndarray:
    """(e_z - e_z')ᵀ W h̄_j over all pairs z < z' in S_j (the left-hand sides of (4)/(6a))."""
    Z = logits(data, W)
    rows, _ = pair_rows(data)
    return np.array([Z[j, z] - Z[j, zp] for j, z, zp in rows])


def kesler_values(data, W) -> np.ndarray:
    """(e_z - e_v)ᵀ W h̄_j over all j, z ∈ S_j, v ∉ S_j (the left-hand sides of (6b))."""
    Z = logits(data, W)
    return np.array([Z[j, z] - Z[j, v] for j, z, v in kesler_rows(data)])


def spanning_matrix(data) -> np.ndarray:
    """Dense matrix whose rows are vec((e_z - e_z') h̄_jᵀ) (row-major) over all pairs: F = its row space."""
    H = np.asarray(data.embeddings)
    rows, _ = pair_rows(data)
    A = np.zeros((len(rows), data.V * data.d))
    for i, (j, z, zp) in enumerate(rows):
        M = np.zeros((data.V, data.d))
        M[z] += H[j]
        M[zp] -= H[j]
        A[i] = M.ravel()
    return A


def dense_projector_F(data) -> np.ndarray:
    """The (Vd × Vd) orthogonal projector onto F, from an SVD of the spanning matrix."""
    A = spanning_matrix(data)
    if A.shape[0] == 0:
        return np.zeros((data.V * data.d, data.V * data.d))
    _, s, Vt = np.linalg.svd(A, full_matrices=False)
    r = np.linalg.matrix_rank(A)
    Q = Vt[:r]
    assert r == 0 or s[r - 1] > 1e-6 * s[0], "spanning matrix has no clear numerical rank"
    return Q.T @ Q


# -- hand-built instances -------------------------------------------------------------------------

def make_data(support_sizes, V: int, d: int, *, weights=None, seed: int = 0):
    """NTPData with the given support size per context: random supports, Dirichlet(1) probabilities
    (floored at 0.05 and renormalised, so that log-odds stay moderate) and N(0, 1) embeddings."""
    from embgeo.ntp import NTPData

    rng = np.random.default_rng(seed)
    m = len(support_sizes)
    P = np.zeros((m, V))
    for j, S in enumerate(support_sizes):
        p = rng.dirichlet(np.ones(S)) + 0.05
        P[j, rng.choice(V, size=S, replace=False)] = p / p.sum()
    H = rng.standard_normal((m, d))
    return NTPData(H, P, weights)


def make_shared_pattern_data(m: int, V: int, d: int, pair=(0, 1), *, seed: int = 0):
    """NTPData whose tokens ``pair[0]`` and ``pair[1]`` follow exactly the same contexts."""
    from embgeo.ntp import NTPData

    a, b = pair
    rng = np.random.default_rng(seed)
    while True:
        mask = rng.random((m, V)) < 0.4
        mask[:, b] = mask[:, a]
        sizes = mask.sum(axis=1)
        if np.all(sizes >= 1) and np.all(sizes < V) and mask[:, a].any() and not mask[:, a].all():
            break
    P = np.where(mask, rng.random((m, V)) + 0.1, 0.0)
    P /= P.sum(axis=1, keepdims=True)
    return NTPData(rng.standard_normal((m, d)), P)


# -- dense references for the structured solvers (embgeo.ntp.solvers.equality, scan, svm_dual, ...) ---------

def equality_constraint_matrix(K: np.ndarray, grp, ctx, n_groups: int) -> np.ndarray:
    """The dense matrix A of the constraints x_gᵀk_j − t_j = c_{gj}, one row per pair (g, j), over the
    variables z = (vec(X) row-major, t): row i has k_j in group g's block and −1 at t_j."""
    m, r = K.shape
    A = np.zeros((len(grp), n_groups * r + m))
    for i, (g, j) in enumerate(zip(grp, ctx, strict=True)):
        A[i, g * r:(g + 1) * r] = K[j]
        A[i, n_groups * r + j] = -1.0
    return A


def equality_kkt_matrix(K: np.ndarray, grp, ctx, weights) -> np.ndarray:
    """The KKT matrix [[D, −Aᵀ], [A, 0]] of min ½ Σ_g n_g ‖x_g‖² s.t. A z = c (see :func:`equality_kkt`)."""
    r = K.shape[1]
    w = np.asarray(weights, dtype=np.float64)
    G = len(w)
    A = equality_constraint_matrix(K, grp, ctx, G)
    n, q = A.shape[1], A.shape[0]
    D = np.zeros((n, n))
    D[:G * r, :G * r] = np.diag(np.repeat(w, r))
    return np.block([[D, -A.T], [A, np.zeros((q, q))]])


def equality_kkt(K: np.ndarray, grp, ctx, weights, c):
    """min ½ Σ_g n_g ‖x_g‖² s.t. x_gᵀk_j − t_j = c_{gj} by its dense KKT system, solved with lstsq.

    Stationarity n_g x_g = Σ_j λ_{gj} k_j and Σ_g λ_{gj} = 0, feasibility A z = c:
    [[D, −Aᵀ], [A, 0]] (z, λ) = (0, c) with D = diag(n_g ⊗ I_r, 0_m). Returns (X, t, λ, residual of
    the KKT system); λ is the minimum-norm one when the multipliers are not unique.
    """
    m, r = K.shape
    G = len(weights)
    M = equality_kkt_matrix(K, grp, ctx, weights)
    n = G * r + m
    rhs = np.concatenate([np.zeros(n), np.asarray(c, dtype=np.float64)])
    sol = np.linalg.lstsq(M, rhs, rcond=None)[0]
    return sol[:G * r].reshape(G, r), sol[G * r:n], sol[n:], float(np.linalg.norm(M @ sol - rhs))


def ref_project_dual(z, weight, ctx, off, m: int) -> np.ndarray:
    """argmin_x Σ_i (x_i − z_i)² / w_i s.t. Σ_{ctx_i = j} x_i = 0 for every j, x_i ≤ 0 where ``off`` (cvxpy)."""
    z = np.asarray(z, dtype=np.float64)
    S = np.zeros((m, len(z)))
    S[np.asarray(ctx), np.arange(len(z))] = 1.0
    x = cp.Variable(len(z))
    cons = [S @ x == 0]
    if np.any(off):
        cons.append(x[np.flatnonzero(off)] <= 0)
    status = _solve(cp.sum(cp.multiply(1.0 / np.asarray(weight), cp.square(x - z))), cons)
    assert status == "optimal", status
    return np.asarray(x.value)


def planted(m: int, V: int, d: int, seed: int = 0):
    """NTPData, separable with d ≪ m: random embeddings, a random decoder W_p, and for each context the support
    {argmax of W_p h̄_j} or, for a third of the contexts, the two largest logits after h̄_j is projected so
    that W_p ties them (kept only where W_p still ranks them above every other token). Its margin is tiny next to
    the embeddings' scale when m ≫ V·d (‖W^mm‖ = 447–17,492 at m = 600, V = 40, d = 8): the shape of issue 38 on which
    the augmented Lagrangian stalls (benchmarks/bench_ntp_solvers.py --planted)."""
    from embgeo.ntp import NTPData

    rng = np.random.default_rng(seed)
    Wp = rng.standard_normal((V, d))
    H, rows = [], []
    while len(H) < m:
        h = rng.standard_normal(d)
        z = Wp @ h
        top = np.argsort(-z)[:2]
        if len(H) % 3 == 0:
            u = Wp[top[0]] - Wp[top[1]]
            h = h - (u @ h) / (u @ u) * u
            z = Wp @ h
            others = np.delete(z, top)
            if z[top[0]] - others.max() <= 1e-3:
                continue
            rows.append(top)
        else:
            rows.append(top[:1])
        H.append(h)
    P = np.zeros((m, V))
    for j, sup in enumerate(rows):
        P[j, sup] = 1.0 / len(sup)
    return NTPData(np.array(H), P)
