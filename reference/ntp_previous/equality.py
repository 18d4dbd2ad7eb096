"""The equality system of :mod:`embgeo.ntp.solvers.equality` as it was before issue 24, kept as an exact reference.

Rank-deficient groups (a frequent token in more contexts than r = rank H̄) were handled with their
explicit null-space bases: a full q × q SVD per such group and a dense SVD of the stacked constraint
matrix C (Σ_g (q_g − r) rows × the touched contexts). Exact, but at bigrams of 1M words of text (V = 5001,
d = 64) that matrix alone is 60,000 × 4,900 and its full SVD tens of GB. ``benchmarks/bench_ntp_text.py``
times it beside the current one, and tests compare the two on instances where both fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg

from embgeo.core.validate import DENSE_BUDGET_BYTES, check_dense_size
from embgeo.errors import SolverError, TooLargeError

# Frozen at the values embgeo.ntp.solvers.equality had when this reference was taken (issue 24).
DENSE_T_MAX = 8000
STIFF_RATIO = 1e-4
STIFF_BALANCE = 1e-10
CG_RTOL = 1e-13


def row_dots(X: np.ndarray, K: np.ndarray, grp: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """x_{grp_i}ᵀ k_{ctx_i} for every pair i."""
    return np.einsum("ij,ij->i", X[grp], K[ctx])


@dataclass
class EqualitySolution:
    """Solution of :class:`EqualitySystem`.

    X : (G, r) group rows; t : (m,); lam : (|Q|,) multipliers with n_g x_g = Σ_j λ_{gj} k_j.
    consistent : whether the constraints C t = d of the rank-deficient groups could be met
    (always true for projections; false means the equalities have no solution).
    residuals : ``equality`` max |x_gᵀk_j − t_j − c_{gj}| relative to max(1, |c|); ``balance``
    max_j |Σ_g λ_{gj}| relative to max |λ| (optimality in t); ``constraints`` ‖C t − d‖.
    certificate : when not consistent, multipliers (|Q|,) that are zero on full-rank groups,
    balanced per context and orthogonal to range K_g per group, with ⟨λ, c⟩ = −1 (a proof that
    no solution exists; see :meth:`EqualitySystem.solve`).
    """

    X: np.ndarray
    t: np.ndarray
    lam: np.ndarray
    consistent: bool
    residuals: dict
    certificate: np.ndarray | None = None


class EqualitySystem:
    """min ½ Σ_g n_g ‖x_g‖² s.t. x_gᵀ k_j − t_j = c_{gj} on a pattern Q (see the module docstring).

    Parameters
    ----------
    K : (m, r) context coordinates.
    grp, ctx : (|Q|,) int arrays, the pattern, sorted by (grp, ctx), every context present.
    weights : (G,) positive group weights n_g.
    gram : optional (m, m) K Kᵀ, to read the per-group Gram blocks from.

    The factorization depends on the pattern and the weights only; :meth:`solve` takes c.
    """

    def __init__(self, K: np.ndarray, grp: np.ndarray, ctx: np.ndarray, weights: np.ndarray,
                 gram: np.ndarray | None = None):
        self.K, self.grp, self.ctx, self.gram = K, grp, ctx, gram
        self.weights = np.asarray(weights, dtype=np.float64)
        self.m, self.r = K.shape
        G = len(self.weights)
        if np.any(np.bincount(ctx, minlength=self.m) == 0):
            raise SolverError("EqualitySystem: every context needs at least one pair in the pattern")
        counts = np.bincount(grp, minlength=G)
        need = equality_system_bytes(counts, self.r, self.m)
        if need > DENSE_BUDGET_BYTES:
            raise TooLargeError(
                f"the exact equality solve would need about {need / 1024**3:.1f} GiB for {len(grp)} pairs on "
                f"{self.m} contexts (one group is in {counts.max()} of them; budget "
                f"{DENSE_BUDGET_BYTES / 1024**3:.0f} GiB); data with d ≪ m are usually decided by the pair "
                "certificates of embgeo.ntp.theory instead")
        self.ptr = np.concatenate([[0], np.cumsum(counts)])
        self.stiff = False  # some group has contexts nearly dependent (see _solve_kkt)
        self.buckets = [self._bucket(np.flatnonzero(counts == q), q) for q in np.unique(counts[counts > 0])]
        self._factor()

    # -- per-group SVDs ------------------------------------------------------------------------
    def _bucket(self, groups: np.ndarray, q: int) -> dict:
        """Factors of K_g K_gᵀ for the groups with q pairs: U (n, q, q), inv2 = n_g/σ² (0 on null directions).

        Well-conditioned blocks (the usual case) come from an eigendecomposition of the q × q Gram
        K_g K_gᵀ (gathered from the m × m Gram when it is given); blocks with σ_min/σ_max < 1e-4,
        where squaring would cost accuracy, and blocks with q > r from an SVD of K_g itself.
        """
        r = self.r
        idx = self.ptr[groups][:, None] + np.arange(q)  # (n, q) positions in the pattern
        c = self.ctx[idx]
        if q > r:  # more pairs than dimensions: complete U with the null space of K_gᵀ
            check_dense_size("left singular vectors of one token's contexts", (len(groups), q, q),
                             "a token follows too many contexts for the exact path; see ntp.theory's "
                             "pair certificates for data with d ≪ m")
            U, s, _ = np.linalg.svd(self.K[c], full_matrices=True)
            s = np.concatenate([s, np.zeros((len(groups), q - r))], axis=1)
        else:
            if self.gram is not None:
                Gb = self.gram[c[:, :, None], c[:, None, :]]
            else:
                Gb = self.K[c] @ self.K[c].swapaxes(1, 2)
            lam, U = np.linalg.eigh(Gb)
            lam, U = lam[:, ::-1], U[:, :, ::-1]  # descending, as from an SVD
            s = np.sqrt(np.maximum(lam, 0.0))
            shaky = np.flatnonzero(s[:, -1] < 1e-4 * s[:, 0])
            if shaky.size:
                U[shaky], s[shaky], _ = np.linalg.svd(self.K[c[shaky]], full_matrices=False)
        tol = s[:, :1] * max(q, r) * np.finfo(float).eps
        keep = s > tol
        kept_min = np.min(np.where(keep, s, np.inf), axis=1)
        self.stiff |= bool(np.any(kept_min < STIFF_RATIO * s[:, 0]))
        inv2 = np.where(keep, 1.0 / np.where(keep, s, 1.0) ** 2, 0.0) * self.weights[groups][:, None]
        return {"groups": groups, "q": q, "idx": idx, "U": U, "inv2": inv2, "keep": keep,
                "deficient": np.flatnonzero(~keep.all(axis=1))}

    def _apply_block(self, b: dict, y: np.ndarray) -> np.ndarray:
        """n_g (K_g K_gᵀ)⁺ y_g for every group of bucket b; y (n, q)."""
        U = b["U"]
        return np.einsum("nij,nj->ni", U, b["inv2"] * np.einsum("nji,nj->ni", U, y))

    # -- the t-system --------------------------------------------------------------------------
    def _factor(self) -> None:
        m = self.m
        rows, cols, vals = [], [], []
        c_rows, c_cols, c_vals = [], [], []  # constraint matrix C: one row per null direction
        self.null_slices = []  # (bucket index, local group index, first C row, number of rows)
        n_c = 0
        for bi, b in enumerate(self.buckets):
            U, c = b["U"], self.ctx[b["idx"]]
            blocks = np.einsum("nij,nj,nkj->nik", U, b["inv2"], U)  # n_g (K_g K_gᵀ)⁺
            rows.append(np.repeat(c, b["q"], axis=1).ravel())
            cols.append(np.tile(c, (1, b["q"])).ravel())
            vals.append(blocks.ravel())
            for li in b["deficient"]:
                N = U[li][:, ~b["keep"][li]]  # (q, k) basis of null K_gᵀ
                k = N.shape[1]
                c_rows.append(np.repeat(np.arange(n_c, n_c + k), b["q"]))
                c_cols.append(np.tile(c[li], k))
                c_vals.append(N.T.ravel())
                self.null_slices.append((bi, li, n_c, k))
                n_c += k
        self.S = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                               shape=(m, m)).tocsr()
        self.n_constraints = n_c
        self.C = (sp.csr_matrix((np.concatenate(c_vals), (np.concatenate(c_rows), np.concatenate(c_cols))),
                                shape=(n_c, m)) if n_c else None)
        self.mode = "cg" if (n_c == 0 and m > DENSE_T_MAX) else "dense"
        if self.mode == "cg":
            self.diag = self.S.diagonal()
            return
        check_dense_size("t-system of the equality constraints", (m, m),
                         "too many contexts for the exact dense path")
        S = self.S.toarray()
        if n_c == 0:
            self.T = None
            self.t_free = np.arange(m)
            self.chol = self._cholesky(S)
            return
        # Null-space method on the contexts touched by constraints: t_D = t_p + Z s.
        touched = np.unique(self.C.indices)
        CD = self.C[:, touched].toarray()
        check_dense_size("constraint matrix of rank-deficient tokens", CD.shape)
        Uc, sc, Vct = np.linalg.svd(CD, full_matrices=True)
        k = int(np.sum(sc > (sc[0] if sc.size else 0.0) * max(CD.shape) * np.finfo(float).eps))
        self.constraint_rank = k
        self.touched, self.Uc, self.sc, self.Vc = touched, Uc, sc[:k], Vct.T
        free = np.setdiff1d(np.arange(m), touched)
        Z = Vct[k:].T  # (|touched|, |touched| - k) null space of C_D
        # T maps the reduced variables (t_free, s) to t.
        T = np.zeros((m, len(free) + Z.shape[1]))
        T[free, np.arange(len(free))] = 1.0
        T[np.ix_(touched, np.arange(len(free), T.shape[1]))] = Z
        self.T = T
        self.chol = self._cholesky(T.T @ S @ T)
        self.S_dense = S

    @staticmethod
    def _cholesky(M: np.ndarray):
        try:
            return sla.cho_factor(M, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            raise SolverError("EqualitySystem: the t-system is numerically singular (the contexts' embeddings are "
                              "too close to dependent for an exact solve)") from None

    # -- solving -------------------------------------------------------------------------------
    def solve(self, c: np.ndarray, check: bool = True) -> EqualitySolution:
        """Solve for the right-hand sides c (|Q|,) of x_gᵀ k_j − t_j = c_{gj}.

        ``check=False`` skips the residuals (an extra pass over the pattern) for internal use.

        If the rank-deficient groups make C t = d unsolvable, returns ``consistent=False`` with the
        least-squares t (x_g = K_g⁺ y_g then minimises the residual of every group) and a
        certificate λ: zero on full-rank groups, λ_g ∈ null K_gᵀ, Σ_g λ_{gj} = 0 for every j and
        ⟨λ, c⟩ = −1. For any (X, t) meeting all equalities, ⟨λ, [x_gᵀk_j − t_j − c_{gj}]⟩ would be
        Σ_g λ_gᵀ K_g x_g − 0 + 1 = 1 ≠ 0: a contradiction, exact up to ‖λ_gᵀ K_g‖ (reported as
        ``certificate_norm``, so no solution has ‖X‖ < 1/certificate_norm).
        """
        c = np.asarray(c, dtype=np.float64)
        b = np.zeros(self.m)
        applied = []
        for bk in self.buckets:
            a = self._apply_block(bk, c[bk["idx"]])
            applied.append(a)
            np.add.at(b, self.ctx[bk["idx"]].ravel(), a.ravel())
        consistent, cert, nu, c_res = True, None, None, 0.0
        if self.mode == "cg":
            t = self._solve_cg(-b)
        elif self.T is None:
            t = sla.cho_solve(self.chol, -b, check_finite=False)
        else:
            d = self._constraint_rhs(c)
            k = self.constraint_rank
            proj = self.Uc[:, :k].T @ d
            resid = d - self.Uc[:, :k] @ proj
            c_res = float(np.linalg.norm(resid))
            t = np.zeros(self.m)
            t[self.touched] = self.Vc[:, :k] @ (proj / self.sc)
            if c_res > 1e-9 * max(1.0, float(np.linalg.norm(d))):
                consistent = False
                cert = self._certificate(resid, c)
            rhs = -(self.T.T @ (self.S_dense @ t + b))
            t = t + self.T @ sla.cho_solve(self.chol, rhs, check_finite=False)
            # Multipliers of C t = d from stationarity S t + b + Cᵀ ν = 0 on the touched contexts.
            g = (self.S_dense @ t + b)[self.touched]
            nu = -self.Uc[:, :k] @ ((self.Vc[:, :k].T @ g) / self.sc)
        X, lam = self._recover(t, c, nu)
        if self.stiff and consistent and self.n_constraints == 0 and _balance(lam, self.ctx, self.m) > STIFF_BALANCE:
            return self._solve_kkt(c, check)
        residuals = self._residuals(X, t, lam, c, c_res) if check else {"constraints": c_res}
        return EqualitySolution(X, t, lam, consistent, residuals, cert)

    def _solve_kkt(self, c: np.ndarray, check: bool) -> EqualitySolution:
        """The whole KKT system in (X, t, μ), sparse, by LU: for groups whose contexts are nearly
        dependent (σ_min/σ_max < STIFF_RATIO), where eliminating x_g puts 1/σ_min² into the
        t-system and costs κ(K_g)² · eps, while the KKT system itself stays well-conditioned.

            [D   0   A_xᵀ] [X]   [0]      D = diag(n_g ⊗ I_r), row i of A_x = k_{j_i} in block g_i,
            [0   0   A_tᵀ] [t] = [0]      row i of A_t = −e_{j_i}; λ = −μ.
            [A_x A_t  0  ] [μ]   [c]
        """
        from scipy.sparse.linalg import splu

        G, r, n = len(self.weights), self.r, len(self.ctx)
        nx = G * r
        nnz = 2 * n * (r + 1) + nx
        if 8 * 3 * nnz > DENSE_BUDGET_BYTES:
            raise SolverError(f"EqualitySystem: some token's contexts are nearly linearly dependent and the exact "
                              f"KKT fallback is too large ({nnz} nonzeros); deduplicate near-identical contexts")
        rows = np.concatenate([np.repeat(np.arange(n), r), np.arange(n)])
        cols = np.concatenate([(self.grp[:, None] * r + np.arange(r)).ravel(), nx + self.ctx])
        vals = np.concatenate([self.K[self.ctx].ravel(), -np.ones(n)])
        A = sp.csr_matrix((vals, (rows, cols)), shape=(n, nx + self.m))
        D = sp.diags(np.concatenate([np.repeat(self.weights, r), np.zeros(self.m)]))
        M = sp.bmat([[D, A.T], [A, None]], format="csc")
        try:
            z = splu(M).solve(np.concatenate([np.zeros(nx + self.m), c]))
        except RuntimeError as exc:
            raise SolverError(f"EqualitySystem: the KKT fallback for nearly dependent contexts failed ({exc})") \
                from None
        X, t, lam = z[:nx].reshape(G, r), z[nx:nx + self.m], -z[nx + self.m:]
        residuals = self._residuals(X, t, lam, c, 0.0) if check else {"constraints": 0.0}
        return EqualitySolution(X, t, lam, True, residuals)

    def _constraint_rhs(self, c: np.ndarray) -> np.ndarray:
        """d = −N_gᵀ c_g stacked over the null directions of the rank-deficient groups."""
        d = np.empty(self.n_constraints)
        for bi, li, first, k in self.null_slices:
            b = self.buckets[bi]
            N = b["U"][li][:, ~b["keep"][li]]
            d[first:first + k] = -N.T @ c[b["idx"][li]]
        return d

    def _certificate(self, resid: np.ndarray, c: np.ndarray) -> np.ndarray:
        """λ = scatter of N_g ρ_g / ‖ρ‖², ρ = d − C t the least-squares residual: ⟨λ, c⟩ = −1.

        Cᵀρ = 0 at the least-squares optimum makes λ balanced per context (Σ_g E_gᵀ N_g ρ_g = Cᵀρ);
        λ_g ∈ range N_g = null K_gᵀ; Σ_g ρ_gᵀ N_gᵀ c_g = −ρᵀ d = −‖ρ‖² since ρᵀ C t = 0.
        """
        lam = np.zeros(len(self.ctx))
        for bi, li, first, k in self.null_slices:
            b = self.buckets[bi]
            N = b["U"][li][:, ~b["keep"][li]]
            lam[b["idx"][li]] = N @ resid[first:first + k]
        return lam / float(resid @ resid)

    def _solve_cg(self, rhs: np.ndarray) -> np.ndarray:
        inv_diag = 1.0 / self.diag
        M = LinearOperator(self.S.shape, matvec=lambda x: inv_diag * x, dtype=np.float64)
        t, info = cg(self.S, rhs, rtol=CG_RTOL, atol=0.0, maxiter=20 * self.m, M=M)
        if info != 0:
            res = np.linalg.norm(self.S @ t - rhs) / max(np.linalg.norm(rhs), 1e-300)
            if res > 1e-9:
                raise SolverError(f"EqualitySystem: conjugate gradients on the sparse t-system stopped at relative "
                                  f"residual {res:.2e} (m = {self.m}); the contexts' embeddings are ill-conditioned")
        return t

    def _recover(self, t: np.ndarray, c: np.ndarray, nu: np.ndarray | None):
        """x_g = K_g⁺ y_g (via K_gᵀ (K_gK_gᵀ)⁺ y_g) and λ_g = n_g (K_gK_gᵀ)⁺ y_g + N_g ν_g."""
        lam = np.empty(len(self.ctx))
        for bk in self.buckets:
            y = t[self.ctx[bk["idx"]]] + c[bk["idx"]]
            lam[bk["idx"]] = self._apply_block(bk, y)
        if nu is not None:
            for bi, li, first, k in self.null_slices:
                b = self.buckets[bi]
                N = b["U"][li][:, ~b["keep"][li]]
                lam[b["idx"][li]] += N @ nu[first:first + k]
        # x_g = Σ_j λ_{gj} k_j / n_g; the null part of λ_g contributes nothing (N_gᵀ K_g = 0).
        A = sp.csr_matrix((lam / self.weights[self.grp], self.ctx, self.ptr), shape=(len(self.weights), self.m))
        return A @ self.K, lam

    def _residuals(self, X, t, lam, c, c_res) -> dict:
        vals = row_dots(X, self.K, self.grp, self.ctx) - t[self.ctx] - c
        scale = max(1.0, float(np.max(np.abs(c), initial=0.0)))
        return {"equality": float(np.max(np.abs(vals), initial=0.0)) / scale,
                "balance": _balance(lam, self.ctx, self.m), "constraints": c_res}


def equality_system_bytes(counts: np.ndarray, r: int, m: int) -> float:
    """Bytes an :class:`EqualitySystem` allocates for groups with ``counts`` pairs each: the
    per-group factors (q² + q r each; q × q also for the null space when q > r), the t-system
    (m² dense up to DENSE_T_MAX, else sparse with Σ q² entries) and, for rank-deficient groups,
    the constraint rows (Σ (q − r) q) and their dense SVD."""
    q = counts[counts > 0].astype(np.float64)
    heavy = q[q > r]
    blocks = np.sum(q * q + q * r) + np.sum(heavy * heavy)
    t_system = 2.0 * m * m if m <= DENSE_T_MAX or heavy.size else 3 * np.sum(q * q)
    constraints = np.sum((heavy - r) * heavy) + (np.sum(heavy - r) * m if heavy.size else 0.0)
    return 8.0 * float(blocks + t_system + constraints)


def _balance(lam: np.ndarray, ctx: np.ndarray, m: int) -> float:
    """max_j |Σ_g λ_{gj}| / max |λ|: how far the multipliers are from optimality in t."""
    scale = max(float(np.max(np.abs(lam), initial=0.0)), 1e-300)
    return float(np.max(np.abs(np.bincount(ctx, weights=lam, minlength=m)), initial=0.0)) / scale
