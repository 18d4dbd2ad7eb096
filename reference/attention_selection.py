"""The previous exact solver of problem (12), kept as a reference for the tests (not for production).

This is ``embgeo.attention.theory.max_margin_selection`` as it was before the structured solver of
:mod:`embgeo.attention.solvers`: deduplicated pairs, tie classes by union-find, the ties
eliminated by projecting onto the null space of their rows (an SVD of the dense tie rows), the
merged pairs' *dense* r × d matrix Ã, and the least-distance program min ‖p‖ s.t. Ãp ≥ 1 solved
exactly through its dual by Lawson–Hanson NNLS (LDP, Lawson & Hanson 1974, ch. 23) on [R; 1ᵀ]
with Ãᵀ = UR. Exact, but one NNLS outer iteration per active pair and O(r d) memory: fine for the
small instances of the tests, hopeless at the paper's Fig. 2 size (see benchmarks/README.md).
It returns the same :class:`~embgeo.attention.theory.MaxMarginSelection` object.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from embgeo.attention.theory import MaxMarginSelection, _check_embeddings, _check_selected, _check_tokens
from embgeo.errors import SolverError

# Frozen at the values embgeo.attention's tolerances had when this reference was taken.
KKT_RTOL = 1e-8
FARKAS_RTOL = 1e-9


class _UnionFind:
    def __init__(self, n: int):
        self.parent = np.arange(n)

    def find(self, a: int) -> int:
        root = a
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[a] != root:
            self.parent[a], a = root, self.parent[a]
        return int(root)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _constraint_pairs(tokens: list[np.ndarray], sel: list[np.ndarray], V: int):
    """Distinct inequality pairs (s, t), distinct tie pairs (s < s'), and the raw count."""
    ineq_codes, eq_codes, n_raw = [], [], 0
    for u, S in zip(tokens, sel, strict=True):
        rest = u[~np.isin(u, S)]
        n_raw += S.size * rest.size
        if rest.size:
            ineq_codes.append((S[:, None] * V + rest[None, :]).ravel())
        if S.size > 1:
            i, j = np.triu_indices(S.size, k=1)
            eq_codes.append(S[i] * V + S[j])
    ineq = np.unique(np.concatenate(ineq_codes)) if ineq_codes else np.zeros(0, dtype=np.int64)
    eq = np.unique(np.concatenate(eq_codes)) if eq_codes else np.zeros(0, dtype=np.int64)
    return np.stack([ineq // V, ineq % V], axis=1), np.stack([eq // V, eq % V], axis=1), n_raw


def reference_max_margin_selection(E, X, selected, *, pad_id=None) -> MaxMarginSelection:
    """Problem (12) for a given selection, as the previous solver did it (same arguments and result
    as :func:`embgeo.attention.theory.max_margin_selection`).

    Method
    ------
    1. Deduplicate: every (s, t) pair is one constraint however many sequences contain it.
    2. Tie classes: union-find over the tie pairs; D holds one row E_s − E_root per non-root
       member. An inequality pair whose two tokens fall in one tie class is a direct conflict
       (0 ≥ 1): infeasible with a one-pair Farkas certificate.
    3. Eliminate the equalities: with Q an orthonormal basis of row(D), the feasible p lie in
       row(D)^⊥ and there (E_s − E_t)ᵀp = ã_jᵀp with ã_j = (I − QQᵀ)(E_s − E_t). Pairs with equal
       (class(s), class(t)) give equal ã_j and are merged.
    4. Solve the least-distance program min ‖p‖ s.t. Ãp ≥ 1 exactly by NNLS: with Ãᵀ = UR
       (thin QR), u = argmin_{u ≥ 0} ‖[R; 1ᵀ]u − e_last‖. If σ = 1 − 1ᵀu > 0 then μ = u/σ are
       the KKT multipliers and p̂ = Ãᵀμ; if σ = 0, w = u/1ᵀu is a Farkas vector (Ãᵀw = 0).
    5. Certify: margins, tie residuals, multipliers ≥ 0, complementarity, stationarity in the
       original coordinates (ν by least squares on D) and the duality gap. An uncertified answer
       raises :class:`~embgeo.errors.SolverError`; a wrong p is never returned.
    """
    E = _check_embeddings(E)
    V, d = E.shape
    _, tokens = _check_tokens(X, V, pad_id)
    sel = _check_selected(selected, tokens)
    pairs, eq_pairs, n_raw = _constraint_pairs(tokens, sel, V)
    m = len(pairs)

    # tie classes
    uf = _UnionFind(V)
    for s, s2 in eq_pairs:
        uf.union(int(s), int(s2))
    involved = np.unique(np.concatenate([pairs.ravel(), eq_pairs.ravel()])).astype(np.int64)
    root = np.arange(V)
    root[involved] = [uf.find(int(s)) for s in involved]
    members = involved[root[involved] != involved]
    D = E[members] - E[root[members]]  # spanning rows of the ties
    D_all = E[eq_pairs[:, 0]] - E[eq_pairs[:, 1]] if len(eq_pairs) else np.zeros((0, d))

    base = dict(pairs=pairs, eq_pairs=eq_pairs, n_raw=int(n_raw))
    if m == 0:  # every sequence selects all its tokens: only ties, p̂ = 0 (cf. Lemma 4.4)
        return MaxMarginSelection("optimal", np.zeros(d), 0.0, np.inf, n_rows=0, margins=np.zeros(0),
                                  multipliers=np.zeros(0), eq_multipliers=np.zeros(len(eq_pairs)),
                                  min_margin=np.inf, eq_residual=0.0, stationarity=0.0, complementarity=0.0,
                                  gap=0.0, **base)

    conflict = np.flatnonzero(root[pairs[:, 0]] == root[pairs[:, 1]])
    if conflict.size:
        w = np.zeros(m)
        w[conflict[0]] = 1.0
        return MaxMarginSelection("infeasible", np.full(d, np.nan), np.inf, 0.0, n_rows=0, farkas=w,
                                  farkas_residual=0.0, **base)

    # eliminate ties: orthonormal basis of row(D)
    if len(D):
        _, sv, Vt = np.linalg.svd(D, full_matrices=False)
        rank = int(np.sum(sv > sv[0] * max(D.shape) * np.finfo(float).eps)) if sv.size else 0
        Q = Vt[:rank].T
    else:
        Q = np.zeros((d, 0))
    keys = root[pairs[:, 0]] * V + root[pairs[:, 1]]
    ukeys, rep, inv = np.unique(keys, return_index=True, return_inverse=True)
    A = E[pairs[rep, 0]] - E[pairs[rep, 1]]  # (r, d) one row per merged pair
    At = A - (A @ Q) @ Q.T
    r_rows = len(ukeys)
    U, R = np.linalg.qr(At.T)  # At.T = U R,  ‖Ãᵀμ‖ = ‖Rμ‖
    M = np.vstack([R, np.ones((1, r_rows))])
    f = np.zeros(M.shape[0])
    f[-1] = 1.0
    u, _ = nnls(M, f, maxiter=max(50 * r_rows, 1000))
    total = float(u.sum())
    sigma = 1.0 - total
    row_scale = float(np.max(np.linalg.norm(A, axis=1)))  # scale of the unprojected rows

    def to_pairs(vec):  # scatter a vector over merged rows onto one representative pair each
        out = np.zeros(m)
        out[rep] = vec
        return out

    if sigma > 0:
        mu_rows = u / sigma
        p = U @ (R @ mu_rows)
        a_all = (E[pairs[:, 0]] - E[pairs[:, 1]]) @ p
        gamma = float(a_all.min())
        if gamma > 0:
            p, a_all = p / gamma, a_all / gamma  # exact feasibility (γ = 1 up to rounding)
            norm = float(np.linalg.norm(p))
            mu = to_pairs(mu_rows)
            resid = p - (E[pairs[:, 0]] - E[pairs[:, 1]]).T @ mu
            if len(D_all):
                nu = np.linalg.lstsq(D_all.T, resid, rcond=None)[0]
                resid = resid - D_all.T @ nu
                eq_res = float(np.max(np.abs(D_all @ p))) / max(norm * float(np.max(np.linalg.norm(E, axis=1))), 1e-300)
            else:
                nu, eq_res = np.zeros(0), 0.0
            primal = 0.5 * norm**2
            dual = float(mu_rows.sum()) - 0.5 * float(np.sum((R @ mu_rows) ** 2))
            cert = dict(
                min_margin=float(a_all.min()),
                eq_residual=eq_res,
                stationarity=float(np.linalg.norm(resid)) / max(norm, 1.0),
                complementarity=float(np.max(mu * np.abs(a_all - 1.0))) / max(float(mu.max()), 1.0),
                gap=max(primal - dual, 0.0) / primal,
            )
            ok = (cert["min_margin"] >= 1 - KKT_RTOL and cert["eq_residual"] <= KKT_RTOL * 10
                  and cert["stationarity"] <= 1e-6 and cert["complementarity"] <= 1e-6
                  and cert["gap"] <= 1e-6 and np.all(mu >= 0))
            if ok:
                return MaxMarginSelection("optimal", p, norm, 1.0 / norm, n_rows=r_rows, margins=a_all,
                                          multipliers=mu, eq_multipliers=nu,
                                          active=np.flatnonzero(a_all <= 1 + 1e-6), **cert, **base)
    if total > 0:
        w_rows = u / total
        farkas_residual = float(np.linalg.norm(R @ w_rows))
        if farkas_residual <= FARKAS_RTOL * row_scale:
            return MaxMarginSelection("infeasible", np.full(d, np.nan), np.inf, 0.0, n_rows=r_rows,
                                      farkas=to_pairs(w_rows), farkas_residual=farkas_residual, **base)
    raise SolverError(f"reference_max_margin_selection: NNLS answer could not be certified (sigma={sigma:.3e}, "
                      f"{r_rows} reduced rows); the problem is probably nearly infeasible or ill-conditioned")


def cvxpy_selection(E, X, selected, pad_id=None):
    """(status, p) of (12) written out naively over every sequence and pair, solved by Clarabel."""
    import cvxpy as cp

    p = cp.Variable(E.shape[1])
    cons = []
    for x, S in zip(X, selected, strict=True):
        present = {int(t) for t in x if pad_id is None or t != pad_id}
        S = {int(s) for s in S}
        for s in S:
            cons += [(E[s] - E[t]) @ p >= 1 for t in present - S]
            cons += [(E[s] - E[s2]) @ p == 0 for s2 in S if s2 > s]
    prob = cp.Problem(cp.Minimize(cp.sum_squares(p)), cons)
    prob.solve(solver=cp.CLARABEL)
    return prob.status, p.value
