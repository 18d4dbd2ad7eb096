"""Structured solvers behind :mod:`embgeo.ntp.theory`, in the t-form of :mod:`embgeo.ntp.constraints`.

Notation: K (m × r) the context coordinates, groups g of tokens with weights n_g and rows
x_g ∈ R^r, a pattern Q of pairs (g, j), one scalar t_j per context.

**Equality problems** (:class:`EqualitySystem`). W*, the projections onto F and F⊥, and the exact
active-set solve of the NTP-SVM are all instances of

    min ½ Σ_g n_g ‖x_g‖²   s.t.   x_gᵀ k_j − t_j = c_{gj}   for (g, j) ∈ Q.

For fixed t the problem splits by group: with K_g = K[J_g] (q_g × r, J_g the contexts of g in Q)
and y_g = t[J_g] + c_g, the group needs K_g x_g = y_g, whose minimum-norm solution is x_g = K_g⁺ y_g
at cost ½ n_g y_gᵀ (K_g K_gᵀ)⁺ y_g. When K_g has full row rank (q_g ≤ r, the usual case) every y_g
is reachable; otherwise y_g must lie in range K_g, i.e. (I − P_g) y_g = 0 with P_g = U_g U_gᵀ the
projector onto range K_g (U_g: its kept left singular vectors, q_g × rank K_g) — linear constraints
on t. Minimising over t is then the m × m problem

    min_t ½ tᵀ S t + bᵀ t  s.t.  (I − P_g)(t[J_g] + c_g) = 0 for every deficient g,
    S = Σ_g n_g E_gᵀ (K_g K_gᵀ)⁺ E_g,

with E_g the selection of J_g. The constraints are handled through their Gram matrix on the contexts
they touch, M = Σ_g E_gᵀ (I − P_g) E_g (m_t × m_t): a pivoted Cholesky factorization of M gives the
constraints' rank, the null space that parametrises the feasible t and a least-squares t when they
cannot all hold (the certificate). S is positive definite on the feasible directions when every
context is in Q (tᵀ S t = 0 forces t[J_g] = 0 for every g). A frequent token in q ≫ r contexts costs
a thin q × r SVD and one q × q block at a time, never a basis of its (q − r)-dimensional null space
(which at bigrams of 1M words made a 60,000 × 4,900 constraint matrix whose full SVD needed tens of
GB). Cost: one SVD per group (Σ_g q_g min(q_g, r)²), Σ_g q_g² r to assemble S and M, an m × m
Cholesky and the m_t × m_t pivoted one (or conjugate gradients on the sparse S when m is large and
no group is rank deficient), and per solve O(|Q| r + m²). Never a constraint matrix in V·d, never d.
The multipliers λ (one per pair, n_g x_g = Σ_j λ_{gj} k_j, Σ_g λ_{gj} = 0) come out exactly: they
are the certificate of optimality and, for the NTP-SVM, the dual point.

**The NTP-SVM** (:class:`SVMDual`). Its dual, over Ψ ∈ K = {Σ_g Ψ_{gj} = 0, Ψ_{gj} ≤ 0 off the
supports}, is min f(Ψ) = ½ Σ_g ‖ψ_g K‖² / n_g + Σ_off Ψ, with x_g = ψ_g K / n_g. Almost all of the
G × m off-support constraints are inactive, so the dual is solved on a *working set* W of them
(accelerated projected gradient in a group-scaled metric, on the sparse Ψ), a full pass over all
logits adds the violated ones, and the active set is then solved exactly with the equality
solver and accepted only as a KKT point. Every answer is certified on the full problem: a primal
point feasible for all constraints and a dual point of K give the duality gap, and
½‖W‖² − dual ≥ ½‖W − W^mm‖² bounds the distance to W^mm.

**Non-separability** is certified by a Farkas matrix Ψ ∈ K with Σ_off Ψ = −1 and Ψ K ≈ 0: for any
separating (X, t), 0 ≈ Σ_g ψ_g K x_g = Σ Ψ_{gj}(x_gᵀ k_j − t_j) ≥ 1, so every separator has
‖W‖ ≥ 1/‖Ψ H̄‖ (the NTP-margin is at most ‖Ψ H̄‖).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.optimize import linprog
from scipy.sparse.linalg import LinearOperator, cg

from embgeo.core import validate
from embgeo.core.validate import check_dense_size
from embgeo.errors import SolverError, TooLargeError

#: Above this many contexts the t-system S is kept sparse and solved by conjugate gradients
#: (when no group is rank deficient); below, it is factored densely (m² doubles: 512 MB at 8000).
DENSE_T_MAX = 8000
#: A group whose kept singular values span more than 1/STIFF_RATIO is "stiff": eliminating it puts
#: 1/σ_min² into the t-system; when the multipliers' balance is then worse than STIFF_BALANCE the
#: solve is redone on the whole (well-conditioned) KKT system.
STIFF_RATIO = 1e-4
STIFF_BALANCE = 1e-10
#: Relative residual asked of conjugate gradients on the sparse t-system.
CG_RTOL = 1e-13
#: Rows of the chunks in which logits are evaluated (bounds temporary memory at chunk · r doubles).
CHUNK = 8192


# -- the equality problem ---------------------------------------------------------------------------

@dataclass
class EqualitySolution:
    """Solution of :class:`EqualitySystem`.

    X : (G, r) group rows; t : (m,); lam : (|Q|,) multipliers with n_g x_g = Σ_j λ_{gj} k_j.
    consistent : whether the constraints (I − P_g)(t[J_g] + c_g) = 0 of the rank-deficient groups could be
    met (always true for projections; false means the equalities have no solution).
    residuals : ``equality`` max |x_gᵀk_j − t_j − c_{gj}| relative to max(1, |c|); ``balance``
    max_j |Σ_g λ_{gj}| relative to max |λ| (optimality in t); ``constraints`` the least-squares residual
    (Σ_g ‖(I − P_g)(t[J_g] + c_g)‖²)^½ of those constraints.
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
        touched = np.unique(ctx[counts[grp] > self.r]).size  # the contexts of groups with more pairs than r
        need = equality_system_bytes(counts, self.r, self.m, touched)
        # the budget and the memory left are read now (a caller may have lowered them, ulimit -v may apply)
        limit = min(validate.DENSE_BUDGET_BYTES, validate.available_memory_bytes())
        if need > limit:
            raise TooLargeError(
                f"the exact equality solve would need about {need / 1024**3:.2f} GiB for {len(grp)} pairs on "
                f"{self.m} contexts (one group is in {counts.max()} of them; budget "
                f"{validate.DENSE_BUDGET_BYTES / 1024**3:.2f} GiB, {limit / 1024**3:.2f} GiB available); data with "
                "d ≪ m are usually decided by the pair certificates of embgeo.ntp.theory instead")
        self.ptr = np.concatenate([[0], np.cumsum(counts)])
        self.stiff = False  # some group has contexts nearly dependent (see _solve_kkt)
        self.buckets = [self._bucket(np.flatnonzero(counts == q), q) for q in np.unique(counts[counts > 0])]
        self._factor()

    # -- per-group SVDs ------------------------------------------------------------------------
    def _bucket(self, groups: np.ndarray, q: int) -> dict:
        """Factors of K_g K_gᵀ for the groups with q pairs: U (n, q, k), inv2 = n_g/σ² (0 on null directions),
        ``keep`` (n, k) the singular values above the rank threshold; U[:, :, keep] spans range K_g.

        Well-conditioned blocks (the usual case) come from an eigendecomposition of the q × q Gram
        K_g K_gᵀ (gathered from the m × m Gram when it is given), k = q; blocks with σ_min/σ_max < 1e-4,
        where squaring would cost accuracy, from an SVD of K_g itself; blocks with q > r from the thin SVD
        of K_g (k = r: range K_g is all that is kept, its complement stays implicit as I − U Uᵀ).
        """
        r = self.r
        idx = self.ptr[groups][:, None] + np.arange(q)  # (n, q) positions in the pattern
        c = self.ctx[idx]
        if q > r:  # more pairs than dimensions: y_g is constrained to range K_g (rank ≤ r < q)
            U, s, _ = np.linalg.svd(self.K[c], full_matrices=False)
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
                "deficient": np.flatnonzero(keep.sum(axis=1) < q)}  # rank K_g < q_g

    def _complement(self, bi: int, li: int, y: np.ndarray) -> np.ndarray:
        """(I − P_g) y for group li of bucket bi: y minus its projection onto range K_g."""
        b = self.buckets[bi]
        U = b["U"][li][:, b["keep"][li]]
        return y - U @ (U.T @ y)

    def _apply_block(self, b: dict, y: np.ndarray) -> np.ndarray:
        """n_g (K_g K_gᵀ)⁺ y_g for every group of bucket b; y (n, q)."""
        U = b["U"]
        return np.einsum("nij,nj->ni", U, b["inv2"] * np.einsum("nji,nj->ni", U, y))

    # -- the t-system --------------------------------------------------------------------------
    def _factor(self) -> None:
        m = self.m
        # rank-deficient groups (rank K_g < q_g): their t[J_g] + c_g must lie in range K_g
        self.deficient = [(bi, int(li)) for bi, b in enumerate(self.buckets) for li in b["deficient"]]
        self.n_constraints = sum(self.buckets[bi]["q"] - int(self.buckets[bi]["keep"][li].sum())
                                 for bi, li in self.deficient)  # Σ_g (q_g − rank K_g)
        self.constraint_rank = 0
        self.mode = "cg" if (not self.deficient and m > DENSE_T_MAX) else "dense"
        if self.mode == "cg":
            rows, cols, vals = [], [], []
            for b in self.buckets:
                c = self.ctx[b["idx"]]
                rows.append(np.repeat(c, b["q"], axis=1).ravel())
                cols.append(np.tile(c, (1, b["q"])).ravel())
                vals.append(self._blocks(b).ravel())
            self.S = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                                   shape=(m, m)).tocsr()
            self.diag = self.S.diagonal()
            return
        check_dense_size("t-system of the equality constraints", (m, m),
                         "too many contexts for the exact dense path")
        S = np.zeros((m, m))
        for b in self.buckets:  # n_g (K_g K_gᵀ)⁺ added in place, ≤ 32 MB of blocks at a time (no Σ q² COO arrays)
            c = self.ctx[b["idx"]]
            step = max(1, 2**22 // b["q"] ** 2)
            for lo in range(0, len(c), step):
                cc, blocks = c[lo:lo + step], self._blocks(b, slice(lo, lo + step))
                if len(cc) == 1:  # one group: its contexts are distinct, a plain in-place add is exact
                    S[np.ix_(cc[0], cc[0])] += blocks[0]
                else:
                    np.add.at(S, (cc[:, :, None], cc[:, None, :]), blocks)
        self.S = S
        if not self.deficient:
            self.T = None
            self.chol = self._cholesky(S)
            return
        # The constraints through their Gram on the touched contexts: M = Σ_g E_gᵀ (I − P_g) E_g.
        touched = np.unique(np.concatenate([self.ctx[self.buckets[bi]["idx"][li]] for bi, li in self.deficient]))
        mt = len(touched)
        check_dense_size("Gram matrix of the rank-deficient tokens' constraints (touched contexts²)", (mt, mt),
                         "too many contexts are touched by tokens with more contexts than dimensions")
        pos = np.full(m, -1)
        pos[touched] = np.arange(mt)
        M = np.zeros((mt, mt))
        for bi, li in self.deficient:
            b = self.buckets[bi]
            p = pos[self.ctx[b["idx"][li]]]
            U = b["U"][li][:, b["keep"][li]]
            block = -(U @ U.T)
            block[np.diag_indices_from(block)] += 1.0
            M[np.ix_(p, p)] += block
        self.touched, self.pos = touched, pos
        Z = self._constraint_null_space(M, self.K[touched])
        del M
        free = np.setdiff1d(np.arange(m), touched)
        # T maps the reduced variables (t_free, s) to t.
        T = np.zeros((m, len(free) + Z.shape[1]))
        T[free, np.arange(len(free))] = 1.0
        T[np.ix_(touched, np.arange(len(free), T.shape[1]))] = Z
        del Z
        self.T = T
        self.chol = self._cholesky(T.T @ S @ T)

    def _constraint_null_space(self, M: np.ndarray, Kt: np.ndarray) -> np.ndarray:
        """An orthonormal basis Z of null M (the feasible directions of t on the touched contexts); sets
        ``constraint_rank`` and the factor behind :meth:`_m_solve`. M is overwritten.

        M = Cᵀ C for C the stacked orthonormal bases of the complements, so its nonzero eigenvalues are the
        squared singular values of C and what rounding leaves on null M is ~ m_t · eps · max M_jj (the rank
        threshold below). Every t = K_t x lies in null M (t[J_g] = K_g x ∈ range K_g), and for tokens in
        general position that is all of it: then M + α N₀N₀ᵀ (N₀ an orthonormal basis of range K_t, α = max
        M_jj) is positive definite, one Cholesky factorization with a condition estimate shows it, and null M
        = range N₀. Otherwise an eigendecomposition decides (both through numpy, which lets Ctrl-C through;
        at m_t = 4,889 the Cholesky took 2 s, the eigendecomposition 30 s).
        """
        mt = M.shape[0]
        scale = max(float(np.max(np.diag(M))), 1.0)
        tol = 16 * max(mt, 1) * np.finfo(float).eps * scale
        U, sv, _ = np.linalg.svd(Kt, full_matrices=False)
        N0 = U[:, sv > sv[0] * max(Kt.shape) * np.finfo(float).eps] if sv.size else U[:, :0]
        for i in range(0, mt, 1024):  # M += α N₀N₀ᵀ in row blocks (no second m_t × m_t array)
            M[i:i + 1024] += scale * (N0[i:i + 1024] @ N0.T)
        try:
            L = np.linalg.cholesky(M)
            rcond, info = sla.lapack.dpocon(L.T, np.max(np.abs(M).sum(axis=0)))  # O(m_t²); L.T: the upper factor
        except np.linalg.LinAlgError:
            rcond = 0.0
        if rcond > 1e-8:  # λ_min ≥ ~1e-9 · λ_max, far above the rank threshold: null M = range N₀
            self.constraint_rank = mt - N0.shape[1]
            self._m_factor = ("cholesky", L, N0, M)  # M (+ α N₀N₀ᵀ, the same on range M) for refinement
            return N0
        L = None
        for i in range(0, mt, 1024):  # back to M (the rounding this leaves, ~eps · α, is below the threshold)
            M[i:i + 1024] -= scale * (N0[i:i + 1024] @ N0.T)
        ev, vecs = np.linalg.eigh(M)
        kept = ev > tol
        self.constraint_rank = int(kept.sum())
        self._m_factor = ("eigen", ev[kept], vecs[:, kept], M)
        return vecs[:, ~kept]

    def _m_solve(self, h: np.ndarray) -> np.ndarray:
        """The solution w ∈ range M of M w = h for h ∈ range M (any solution would do: two differ by z ∈ null M,
        on which every (I − P_g) z[J_g] vanishes), with two steps of iterative refinement: M = CᵀC squares the
        constraints' condition number (a near-dependent pair of tokens put an eigenvalue of 7.7e-7 into M on a
        sweep instance and left (4) solved to only 1e-6)."""
        kind, a, b, M = self._m_factor

        def solve(r):
            if kind == "eigen":
                return b @ ((b.T @ r) / a)
            y = sla.solve_triangular(a, r, lower=True, check_finite=False)  # (M + α N₀N₀ᵀ) w = r, then w ⟂ N₀
            w = sla.solve_triangular(a, y, lower=True, trans="T", check_finite=False)
            return w - b @ (b.T @ w)

        w = solve(h)
        for _ in range(2):
            w = w + solve(h - M @ w)
        return w

    def _blocks(self, b: dict, rows: slice = slice(None)) -> np.ndarray:
        """n_g (K_g K_gᵀ)⁺ for the groups ``rows`` of bucket b: (n, q, q)."""
        U = b["U"][rows]
        return np.einsum("nij,nj,nkj->nik", U, b["inv2"][rows], U)

    @staticmethod
    def _cholesky(M: np.ndarray):
        """The lower Cholesky factor as cho_solve takes it; numpy's, which releases the GIL (Ctrl-C gets through)."""
        try:
            return np.linalg.cholesky(M), True
        except np.linalg.LinAlgError:
            raise SolverError("EqualitySystem: the t-system is numerically singular (the contexts' embeddings are "
                              "too close to dependent for an exact solve)") from None

    # -- solving -------------------------------------------------------------------------------
    def solve(self, c: np.ndarray, check: bool = True) -> EqualitySolution:
        """Solve for the right-hand sides c (|Q|,) of x_gᵀ k_j − t_j = c_{gj}.

        ``check=False`` skips the residuals (an extra pass over the pattern) for internal use.

        If the rank-deficient groups' constraints (I − P_g)(t[J_g] + c_g) = 0 cannot all hold, returns
        ``consistent=False`` with the least-squares t (x_g = K_g⁺ y_g then minimises the residual of every
        group) and a certificate λ: zero on full-rank groups, λ_g ∈ null K_gᵀ, Σ_g λ_{gj} = 0 for every j
        and ⟨λ, c⟩ = −1. For any (X, t) meeting all equalities, ⟨λ, [x_gᵀk_j − t_j − c_{gj}]⟩ would be
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
            # A least-squares t on the touched contexts: M t = h with h = −Σ_g E_gᵀ (I − P_g) c_g ∈ range M (the
            # null directions of M are optimised below; they leave every residual (I − P_g)(t[J_g] + c_g) as it is).
            h, d2 = np.zeros(len(self.touched)), 0.0
            for bi, li in self.deficient:
                cg_ = c[self.buckets[bi]["idx"][li]]
                pc = self._complement(bi, li, cg_)
                np.add.at(h, self.pos[self.ctx[self.buckets[bi]["idx"][li]]], -pc)
                d2 += float(pc @ pc)
            t = np.zeros(self.m)
            t[self.touched] = self._m_solve(h)
            rho = [self._complement(bi, li, t[self.ctx[self.buckets[bi]["idx"][li]]] + c[self.buckets[bi]["idx"][li]])
                   for bi, li in self.deficient]
            c_res = float(np.sqrt(sum(float(x @ x) for x in rho)))
            if c_res > 1e-9 * max(1.0, float(np.sqrt(d2))):
                consistent = False
                cert = self._certificate(rho)
            rhs = -(self.T.T @ (self.S @ t + b))
            t = t + self.T @ sla.cho_solve(self.chol, rhs, check_finite=False)
            # Multipliers of the constraints from stationarity S t + b + Σ_g E_gᵀ (I − P_g) η_g = 0 on the touched
            # contexts: η_g = (I − P_g) w[J_g] with M w = −g (g = (S t + b) on them lies in range M at the optimum).
            g = (self.S @ t + b)[self.touched]
            nu = self._m_solve(-g)
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
        if 8 * 3 * nnz > validate.DENSE_BUDGET_BYTES:
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

    def _certificate(self, rho: list[np.ndarray]) -> np.ndarray:
        """λ_g = −ρ_g / ‖ρ‖² on the deficient groups (0 elsewhere), ρ_g = (I − P_g)(t[J_g] + c_g) at the
        least-squares t: ⟨λ, c⟩ = −1.

        λ_g ∈ range(I − P_g) = null K_gᵀ; Σ_g E_gᵀ ρ_g = M t − h = 0 at the least-squares optimum makes λ
        balanced per context; ρ_gᵀ c_g = ‖ρ_g‖² − ρ_gᵀ t[J_g] and the last terms sum to tᵀ Σ_g E_gᵀ ρ_g = 0.
        """
        lam = np.zeros(len(self.ctx))
        total = sum(float(x @ x) for x in rho)
        for (bi, li), x in zip(self.deficient, rho, strict=True):
            lam[self.buckets[bi]["idx"][li]] = -x / total
        return lam

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
        """x_g = K_g⁺ y_g (via K_gᵀ (K_gK_gᵀ)⁺ y_g) and λ_g = n_g (K_gK_gᵀ)⁺ y_g + (I − P_g) ν[J_g]."""
        lam = np.empty(len(self.ctx))
        for bk in self.buckets:
            y = t[self.ctx[bk["idx"]]] + c[bk["idx"]]
            lam[bk["idx"]] = self._apply_block(bk, y)
        # x_g = Σ_j λ_{gj} k_j / n_g; the constraints' part of λ_g contributes nothing ((I − P_g) K_g = 0), so it
        # is left out of X: added, its rounding (it is large where the constraints are nearly dependent) would not be
        A = sp.csr_matrix((lam / self.weights[self.grp], self.ctx, self.ptr), shape=(len(self.weights), self.m))
        X = A @ self.K
        if nu is not None:  # the constraints' multipliers (I − P_g) w[J_g], w on the touched contexts
            for bi, li in self.deficient:
                idx = self.buckets[bi]["idx"][li]
                lam[idx] += self._complement(bi, li, nu[self.pos[self.ctx[idx]]])
        return X, lam

    def _residuals(self, X, t, lam, c, c_res) -> dict:
        vals = row_dots(X, self.K, self.grp, self.ctx) - t[self.ctx] - c
        scale = max(1.0, float(np.max(np.abs(c), initial=0.0)))
        return {"equality": float(np.max(np.abs(vals), initial=0.0)) / scale,
                "balance": _balance(lam, self.ctx, self.m), "constraints": c_res}


def equality_system_bytes(counts: np.ndarray, r: int, m: int, touched: int | None = None) -> float:
    """Bytes an :class:`EqualitySystem` allocates for groups with ``counts`` pairs each: the per-group
    factors (q² + q r for q ≤ r; the thin q × r for q > r, plus three q × q temporaries for the largest
    such group while S and M are assembled), the t-system (S and its factor, 2 m², up to DENSE_T_MAX or
    with groups of q > r; else sparse with Σ q² entries) and, with groups of q > r, their constraints'
    Gram M and its factor or eigendecomposition (3 m_t², ``touched`` = m_t contexts, default m)."""
    q = counts[counts > 0].astype(np.float64)
    light, heavy = q[q <= r], q[q > r]
    blocks = np.sum(light * light + light * r) + np.sum(heavy * r) + (3 * float(heavy.max()) ** 2 if heavy.size else 0)
    t_system = 2.0 * m * m if m <= DENSE_T_MAX or heavy.size else 3 * np.sum(q * q)
    mt = float(m if touched is None else touched)
    constraints = 3 * mt * mt if heavy.size else 0.0
    return 8.0 * float(blocks + t_system + constraints)


def _balance(lam: np.ndarray, ctx: np.ndarray, m: int) -> float:
    """max_j |Σ_g λ_{gj}| / max |λ|: how far the multipliers are from optimality in t."""
    scale = max(float(np.max(np.abs(lam), initial=0.0)), 1e-300)
    return float(np.max(np.abs(np.bincount(ctx, weights=lam, minlength=m)), initial=0.0)) / scale


def row_dots(X: np.ndarray, K: np.ndarray, grp: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """x_{grp_i}ᵀ k_{ctx_i} for every pair i, in chunks (no |Q| × r temporary)."""
    out = np.empty(len(grp))
    step = max(64, 2**17 // max(K.shape[1], 1))  # chunks of ~1 MB stay in cache
    for s in range(0, len(grp), step):
        e = min(s + step, len(grp))
        out[s:e] = np.einsum("ij,ij->i", X[grp[s:e]], K[ctx[s:e]])
    return out


# -- full passes over the off-support logits ----------------------------------------------------------

@dataclass
class Scan:
    """Result of :func:`scan_off_support`: the smallest off-support margin and the worst pairs.

    min_margin : min over all off-support (g, j) of t_j − x_gᵀk_j (inf if there is none).
    groups, contexts, margins : up to ``top`` pairs per context with margin < ``below``,
    the smallest first within each context.
    """

    min_margin: float
    groups: np.ndarray
    contexts: np.ndarray
    margins: np.ndarray


def scan_off_support(X: np.ndarray, t: np.ndarray, K: np.ndarray, support: sp.csc_matrix, *,
                     below: float = -np.inf, top: int = 0) -> Scan:
    """All off-support margins t_j − x_gᵀk_j, in column blocks (one GEMM each), never stored.

    ``support`` is the (G, m) 0/1 pattern in CSC form. Cost O(G m r); memory one (G × block).
    """
    G, m = support.shape
    block = max(1, min(m, (64 * 1024**2) // (8 * max(G, 1))))
    best = np.inf
    out_g, out_j, out_v = [], [], []
    for s in range(0, m, block):
        e = min(s + block, m)
        M = t[s:e][None, :] - X @ K[s:e].T  # (G, e - s) margins
        cols = support[:, s:e]
        M[cols.indices, np.repeat(np.arange(e - s), np.diff(cols.indptr))] = np.inf
        if M.size:
            best = min(best, float(M.min()))
        if top and below > -np.inf:
            k = min(top, G)
            cand = np.argpartition(M, k - 1, axis=0)[:k] if k < G else np.argsort(M, axis=0)
            vals = np.take_along_axis(M, cand, axis=0)
            sel = vals < below
            jj = np.broadcast_to(np.arange(s, e), cand.shape)
            out_g.append(cand[sel])
            out_j.append(jj[sel])
            out_v.append(vals[sel])
    return Scan(best, _cat(out_g, np.int64), _cat(out_j, np.int64), _cat(out_v, np.float64))


def _cat(parts: list, dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


# -- projection onto the dual set ------------------------------------------------------------------------

def project_dual(z: np.ndarray, weight: np.ndarray, ctx: np.ndarray, off: np.ndarray, m: int,
                 max_newton: int = 100) -> np.ndarray:
    """argmin_x Σ_i w_i⁻¹ (x_i − z_i)² s.t. Σ_{i: ctx_i = j} x_i = 0 for every j, x_i ≤ 0 where ``off``.

    (``weight`` = 1/L_i, the inverse metric.) The solution is x_i = z_i − τ_j w_i, clipped at 0 on
    off entries, with τ_j the root of the decreasing, concave, piecewise linear
    g_j(τ) = Σ_i x_i(τ). Newton's method started right of the root (τ₀ = the root without
    clipping, where g ≤ 0) stays right of it and ends in finitely many steps; O(|z|) per step,
    vectorised over all contexts, no sorting. Every context needs an entry that is not ``off``.
    """
    free = ~off
    w_free = np.bincount(ctx, weights=weight * free, minlength=m)
    tau = np.bincount(ctx, weights=z * free, minlength=m) / w_free
    for _ in range(max_newton):
        x = z - tau[ctx] * weight
        neg = free | (x < 0)
        x = np.where(neg, x, 0.0)
        g = np.bincount(ctx, weights=x, minlength=m)
        slope = np.bincount(ctx, weights=weight * neg, minlength=m)
        step = g / slope
        if not np.any(np.abs(step) > 1e-15 * (np.abs(tau) + 1e-300)):
            break
        tau = tau + step
    # Remove the rounding residue of the column sums on the free entries (keeps x ∈ K exactly).
    resid = np.bincount(ctx, weights=x, minlength=m) / w_free
    return x - np.where(free, resid[ctx] * weight, 0.0)



def project_dual_dense(z: np.ndarray, weight: np.ndarray, off: np.ndarray, tau: np.ndarray | None = None,
                       max_newton: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """:func:`project_dual` for a dense (G, m) array: columns are contexts, ``weight`` (G,) = 1/L_g.

    The same Newton iterations on every column at once, O(G m) per step, no sorting. Since each
    g_j is concave and decreasing, Newton converges from any start (a step from the left of the
    root lands right of it, from where it decreases monotonically), so ``tau`` from the previous
    call is a good start. A column stops when its step moves no entry of x by more than rounding
    (relative to τ_j, or to max |z| in absolute terms, so that a root at τ_j = 0 stops too), and the
    iterations go on over the columns still moving only (most stop after one to three steps).
    Returns (x, τ).
    """
    free = ~off
    w = weight[:, None]
    w_free = np.sum(np.where(free, w, 0.0), axis=0)
    tau = (np.sum(np.where(free, z, 0.0), axis=0) / w_free) if tau is None else np.array(tau, dtype=np.float64)
    atol = 1e-15 * max(float(np.max(np.abs(z), initial=0.0)), 1e-300) / max(float(np.max(weight)), 1e-300)
    cols = None  # all columns; else the indices of the columns still moving
    zc, offc, freec, wfc = z, off, free, w_free
    x = np.empty_like(z)
    for _ in range(max_newton):
        tc = tau if cols is None else tau[cols]
        xc = x if cols is None else np.empty_like(zc)
        np.multiply(tc, w, out=xc)
        np.subtract(zc, xc, out=xc)
        neg = xc < 0
        neg |= freec
        xc *= neg
        step = np.sum(xc, axis=0) / (wfc + np.sum(np.where(neg & offc, w, 0.0), axis=0))
        tc = tc + step
        if cols is None:
            tau = tc
        else:
            tau[cols] = tc
        moving = np.abs(step) > np.maximum(1e-15 * np.abs(tc), atol)
        if not moving.any():
            break
        if moving.sum() <= 0.5 * moving.size:  # gather the columns still moving
            cols = np.flatnonzero(moving) if cols is None else cols[moving]
            zc, offc, wfc = z[:, cols], off[:, cols], w_free[cols]
            freec = ~offc
    np.multiply(tau, w, out=x)
    np.subtract(z, x, out=x)
    x[off] = np.minimum(x[off], 0.0)
    x -= np.where(free, (np.sum(x, axis=0) / w_free) * w, 0.0)  # exact column sums
    return x, tau

# -- the NTP-SVM dual on a working set ------------------------------------------------------------------

#: A Farkas matrix is accepted when ‖Ψ H̄‖ ≤ FARKAS_RTOL · √2 max_j ‖h̄_j‖ (with Σ_off Ψ = −1): every
#: separator would then have an NTP-margin below this fraction of the data's scale.
FARKAS_RTOL = 1e-9


def farkas_scale(K: np.ndarray) -> float:
    """√2 max_j ‖k_j‖ for context coordinates K (m, r): the data's scale in FARKAS_RTOL's acceptance rule."""
    return np.sqrt(2.0) * float(np.max(np.linalg.norm(K, axis=1)))
#: Margins ≤ 1 + ACTIVE_RTOL of a near-optimal point form the guessed active set of the exact solve.
ACTIVE_RTOL = 1e-6
#: Pairs per context added to the working set in one round of the full pass.
ADD_PER_CONTEXT = 8
#: Up to this many group × context pairs the dual is a dense array (about ten copies are alive).
DENSE_DUAL_MAX = 40_000_000
#: At most this many off-support pairs go into the LP that certifies a diverging dual.
LP_MAX_PAIRS = 5000
#: The dense dual tries the exact active-set solve when it costs less than this many iterations.
POLISH_ITERATIONS = 50
#: The exact active-set solve is first tried at this relative duality gap, then at every 100-fold decrease.
POLISH_FIRST_GAP = 1e-2


@dataclass
class SVMOutcome:
    """What :meth:`SVMDual.solve` found (group level).

    status : "optimal" (relative duality gap ≤ tol, or an exact KKT point), "infeasible" (a Farkas
    matrix was found), "time_limit" / "max_iter" (stopped early; ``X`` is then the best primal
    point feasible for every constraint, when one was found).
    X, t : (G, r), (m,) the primal point, min off-support margin exactly 1 and in F⊥.
    primal : ½ Σ_g n_g ‖x_g‖²; dual : the dual value of ``dual_point`` (a lower bound on primal).
    dual_point : (grp, ctx, psi) a point of K on the working set (the multipliers, sign −μ off supports).
    farkas : (grp, ctx, psi, perp) when infeasible: Ψ ∈ K on those pairs, Σ_off Ψ = −1, ‖Ψ K‖ = perp.
    """

    status: str
    X: np.ndarray | None = None
    t: np.ndarray | None = None
    primal: float = np.inf
    dual: float = -np.inf
    dual_point: tuple | None = None
    farkas: tuple | None = None
    iterations: int = 0
    rounds: int = 0
    working_set: int = 0
    polished: bool = False
    mode: str = "working set"  # or "dense": how the dual was stored; "augmented Lagrangian" (svm_alm)
    factorizations: int = 0

    @property
    def gap(self) -> float:
        """Relative duality gap (primal − dual) / primal."""
        return max(self.primal - self.dual, 0.0) / self.primal if np.isfinite(self.primal) else np.inf


class SVMDual:
    """The NTP-SVM in t-form on token groups, solved through its dual on a working set.

    Parameters
    ----------
    K : (m, r) context coordinates.
    support : (G, m) csr 0/1 matrix, row g = the contexts J_g where group g is in the support.
    weights : (G,) n_g, the number of tokens in each group.
    gram : optional (m, m) K Kᵀ (see :class:`EqualitySystem`).
    """

    def __init__(self, K: np.ndarray, support: sp.csr_matrix, weights: np.ndarray, gram: np.ndarray | None = None):
        self.K, self.gram = K, gram
        self.G, self.m = support.shape
        self.support = support.tocsr()
        self.support.sort_indices()
        self.support_csc = self.support.tocsc()
        self.weights = np.asarray(weights, dtype=np.float64)
        coo = self.support.tocoo()
        self.pg, self.pj = coo.row.astype(np.int64), coo.col.astype(np.int64)  # sorted by (g, j)
        from embgeo.ntp.svm_alm import TieProjection  # (svm_alm imports this module)

        self.EP = TieProjection(K, self.pg, self.pj, self.weights)  # weighted projection onto F⊥
        self._EP1 = None
        self.scale = farkas_scale(K)

    # -- layout of the working set -------------------------------------------------------------
    def _layout(self, wg: np.ndarray, wj: np.ndarray) -> dict:
        """Q = supports ∪ W sorted by (g, j), with per-entry step weights 1/L_g."""
        g = np.concatenate([self.pg, wg])
        j = np.concatenate([self.pj, wj])
        off = np.concatenate([np.zeros(len(self.pg), bool), np.ones(len(wg), bool)])
        order = np.lexsort((j, g))
        g, j, off = g[order], j[order], off[order]
        counts = np.bincount(g, minlength=self.G)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        L = self._group_lipschitz(g, j, ptr, counts)
        return {"g": g, "j": j, "off": off, "ptr": ptr, "order": order, "step": 1.0 / L[g]}

    def _group_lipschitz(self, g, j, ptr, counts) -> np.ndarray:
        """L_g = σ_max(K[J_g ∪ W_g])² / n_g, the Lipschitz constant of ∇f on group g's block."""
        L = np.full(self.G, 1e-300)
        for q in np.unique(counts[counts > 0]):
            groups = np.flatnonzero(counts == q)
            idx = ptr[groups][:, None] + np.arange(q)
            s = np.linalg.svd(self.K[j[idx]], compute_uv=False)[:, 0]
            L[groups] = np.maximum(s * s, 1e-300) / self.weights[groups]
        return L

    def _rows(self, lay: dict, psi: np.ndarray) -> np.ndarray:
        """x_g = ψ_g K / n_g for every group: (G, r)."""
        A = sp.csr_matrix((psi / self.weights[lay["g"]], lay["j"], lay["ptr"]), shape=(self.G, self.m))
        return A @ self.K

    def _objective(self, lay: dict, psi: np.ndarray, X: np.ndarray) -> float:
        """f(Ψ) = ½ Σ_g n_g ‖x_g‖² + Σ_W Ψ (the dual value is −f)."""
        return 0.5 * float(np.sum(self.weights * np.sum(X * X, axis=1))) + float(np.sum(psi[lay["off"]]))

    # -- primal points ---------------------------------------------------------------------------
    def primal_from(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The weighted projection of X onto F⊥ (supports tied): (X̃, t)."""
        Xt, t, _ = self.EP.project(X)
        return Xt, t

    # -- the solver ------------------------------------------------------------------------------
    def solve(self, *, tol: float = 1e-12, max_iter: int = 100_000, check_every: int = 25,
              detect_infeasible: bool = True, separate_only: bool = False, max_seconds: float | None = None,
              progress: Callable[[int, dict], object] | None = None) -> SVMOutcome:
        """Working-set rounds: accelerated projected gradient on the restricted dual, an exact solve on
        the guessed active set, a full pass that adds the violated pairs; until certified.

        ``separate_only``: return as soon as a point separates every constraint (status "separable",
        for :func:`~embgeo.ntp.theory.is_separable`). ``progress(iteration, info)`` is called at
        every check with a dict (gap, working_set, rounds).
        """
        deadline = None if max_seconds is None else time.perf_counter() + max_seconds
        self.next_polish = POLISH_FIRST_GAP
        self._failed_checks, self._next_lp = 0, 4
        if self.G * self.m <= DENSE_DUAL_MAX:
            return self._solve_dense(tol=tol, max_iter=max_iter, check_every=check_every,
                                     detect_infeasible=detect_infeasible, separate_only=separate_only,
                                     deadline=deadline, progress=progress)
        lay = self._layout(*self._initial_working_set())
        psi = np.zeros(len(lay["g"]))
        best = SVMOutcome("max_iter")
        while True:
            best.rounds += 1
            best.working_set = int(np.sum(lay["off"]))
            res = self._inner(lay, psi, tol=0.5 if separate_only else tol, max_iter=max_iter - best.iterations,
                              check_every=check_every, detect_infeasible=detect_infeasible, deadline=deadline,
                              progress=progress, best=best)
            psi = res["psi"]
            best.iterations += res["iterations"]
            if res["status"] == "infeasible":
                best.status, best.farkas = "infeasible", res["farkas"]
                return best
            cand = res.get("candidate")  # (X̃, t̃) tied on the supports, working-set margins ≥ 1
            if cand is not None:
                if not separate_only:
                    polished = self._polish(lay, *cand)
                    if polished is not None and polished.gap <= max(tol, 1e-10):
                        polished.iterations, polished.rounds = best.iterations, best.rounds
                        polished.working_set = best.working_set
                        return polished
                scan = scan_off_support(cand[0], cand[1], self.K, self.support_csc, below=1.0 - 1e-9,
                                        top=ADD_PER_CONTEXT)
                self._offer(best, lay, psi, cand, scan.min_margin)
                if separate_only and scan.min_margin > 0:
                    best.status = "separable"
                    return best
                if scan.groups.size == 0 and res["status"] == "optimal":
                    best.status = "optimal"
                    return best
                if scan.groups.size:
                    lay, psi = self._grow(lay, psi, scan.groups, scan.contexts)
                    continue
            if res["status"] in ("time_limit", "max_iter", "stalled"):
                best.status = res["status"]
                return best

    def _solve_dense(self, *, tol, max_iter, check_every, detect_infeasible, separate_only, deadline,
                     progress) -> SVMOutcome:
        """The dual on every off-support pair, Ψ a dense (G, m) array: two GEMMs per iteration (one
        with the m × m Gram when r ≥ m/2). Used when the off-support pairs are few enough to store;
        with rank H̄ close to m most of them are active and a working set would not save anything."""
        K, n = self.K, self.weights
        off = self.support.toarray() == 0
        offf = off.astype(np.float64)
        gram = (self.gram if self.gram is not None else K @ K.T) if 2 * K.shape[1] >= self.m else None
        w = n / max(_sigma_max(K) ** 2, 1e-300)  # 1/L_g, L_g = σ_max(K)²/n_g
        wcol, inv_n = w[:, None], (1.0 / n)[:, None]
        iteration_flops = 2.0 * self.G * self.m * (self.m if gram is not None else 2 * K.shape[1])

        def gradient_step(Psi):
            """Ψ − w ∘ ∇f(Ψ), ∇f = logits of x = Ψ K / n plus 1 off the supports (in place where possible)."""
            A = Psi * inv_n
            Z = A @ gram if gram is not None else (A @ K) @ K.T
            Z += offf
            Z *= wcol
            return np.subtract(Psi, Z, out=Z)

        x = np.zeros((self.G, self.m))
        y, tk, last, tau = x.copy(), 1.0, x.copy(), None
        best = SVMOutcome("max_iter", working_set=int(off.sum()), rounds=1, mode="dense")
        best_x = None
        gaps: list[tuple[int, float]] = []  # (iteration, relative gap) at the checks
        next_check = check_every
        for it in range(1, max_iter + 1):
            x_new, tau = project_dual_dense(gradient_step(y), w, off, tau)
            step = np.subtract(x_new, x, out=x)  # x is not needed any more: reuse its memory
            y -= x_new
            if np.dot(np.einsum("ij,ij->i", y, step), 1.0 / w) > 0:  # adaptive restart: ⟨y − x⁺, x⁺ − x⟩ > 0
                tk, y = 1.0, x_new.copy()
            else:
                t_next = 0.5 * (1 + np.sqrt(1 + 4 * tk * tk))
                step *= (tk - 1) / t_next
                y = np.add(x_new, step, out=y)
                tk = t_next
            x = x_new
            # a check (and with it the certified best point) as soon as the time is up, not at the next check
            if it < next_check and it != max_iter and not (deadline is not None and time.perf_counter() > deadline):
                continue
            next_check = it + _check_interval(gaps, check_every, tol)
            best.iterations = it
            Xd = (x / n[:, None]) @ K
            dual = -(0.5 * float(np.sum(n * np.sum(Xd * Xd, axis=1))) + float(np.sum(x[off])))
            Xp, tp = self.primal_from(Xd)
            gamma = scan_off_support(Xp, tp, K, self.support_csc).min_margin
            timed_out = deadline is not None and time.perf_counter() > deadline
            if progress is not None:
                progress(it, {"restricted_margin": gamma, "dual": dual, "gap": best.gap,
                              "working_set": best.working_set, "rounds": 1})
            if not gamma > 0:
                if detect_infeasible:
                    gi, ji = np.nonzero(off & (x < last))
                    far = self._infeasibility(gi, ji, (last - x)[gi, ji], deadline)
                    if far is not None:
                        best.status, best.farkas = "infeasible", far
                        return best
                last = x.copy()
                if timed_out:
                    best.status = "time_limit"
                    return _with_dual_point(best, best_x)
                continue
            last = x.copy()
            Xp, tp = Xp / gamma, tp / gamma
            primal = 0.5 * float(np.sum(n * np.sum(Xp * Xp, axis=1)))
            if primal < best.primal:
                best.X, best.t, best.primal = Xp, tp, primal
            if dual > best.dual:
                best.dual, best_x = dual, x.copy()
            if separate_only:
                best.status = "separable"
                return _with_dual_point(best, best_x)
            gap = best.gap
            if gap <= tol:
                best.status = "optimal"
                return _with_dual_point(best, best_x)
            if gap <= self.next_polish:
                self.next_polish = gap / 100
                # Guessed active set: the support of the dual point, and the tight pairs of the primal one.
                # Worth it when its (about three) rounds cost less than POLISH_ITERATIONS iterations;
                # the cost grows with the set, so the dual support alone may already rule it out
                # (and spare the GEMM of the tight pairs).
                budget = POLISH_ITERATIONS * iteration_flops
                in_dual = off & (x < -1e-9 * np.max(np.abs(x)))
                ag = np.nonzero(in_dual)[0]
                if 3 * self._polish_cost(ag) <= budget:
                    ag, aj = np.nonzero(in_dual | (off & (tp[None, :] - Xp @ K.T <= 1.0 + ACTIVE_RTOL)))
                if 3 * self._polish_cost(ag) <= budget:
                    polished = self._polish_pairs(ag, aj)
                    if polished is not None and polished.gap <= max(tol, 1e-10):
                        polished.iterations, polished.rounds, polished.working_set = it, 1, best.working_set
                        polished.mode = "dense"
                        return polished
            gaps.append((it, gap))
            if timed_out:
                best.status = "time_limit"
                return _with_dual_point(best, best_x)
            if gap < 1e-6 and len(gaps) > 400 and gaps[-1][1] > 0.5 * gaps[-401][1]:
                best.status = "stalled"
                return _with_dual_point(best, best_x)
        return _with_dual_point(best, best_x)

    def _initial_working_set(self) -> tuple[np.ndarray, np.ndarray]:
        """The empty group against every context, and each context's strongest competitors under a
        class-mean guess x_g ∝ Σ_{j∈J_g} k_j / ‖k_j‖² tied on the supports (projected onto F⊥)."""
        knorm2 = np.maximum(np.sum(self.K * self.K, axis=1), 1e-300)
        X0 = self.support @ (self.K / knorm2[:, None])
        X0, t0 = self.primal_from(X0)
        scan = scan_off_support(X0, t0, self.K, self.support_csc, below=np.inf, top=4)
        wg, wj = [scan.groups], [scan.contexts]
        empty = np.flatnonzero(np.diff(self.support.indptr) == 0)
        for g in empty:
            wg.append(np.full(self.m, g))
            wj.append(np.arange(self.m))
        return _unique_pairs(np.concatenate(wg), np.concatenate(wj), self.m)

    def _grow(self, lay: dict, psi: np.ndarray, g_new: np.ndarray, j_new: np.ndarray):
        """Add pairs to the working set; the dual point keeps its values (new entries 0 stay in K)."""
        old_w = lay["off"]
        wg = np.concatenate([lay["g"][old_w], g_new])
        wj = np.concatenate([lay["j"][old_w], j_new])
        wg, wj = _unique_pairs(wg, wj, self.m)
        new = self._layout(wg, wj)
        keys_old = lay["g"] * self.m + lay["j"]
        keys_new = new["g"] * self.m + new["j"]
        pos = np.searchsorted(keys_new, keys_old)
        out = np.zeros(len(keys_new))
        out[pos] = psi
        return new, out

    def _inner(self, lay, psi, *, tol, max_iter, check_every, detect_infeasible, deadline, progress, best) -> dict:
        """Accelerated projected gradient on the restricted dual (metric diag(L_g)), adaptive restart."""
        step, off, j = lay["step"], lay["off"], lay["j"]
        x, y, tk = psi.copy(), psi.copy(), 1.0
        last_check = x.copy()
        gaps: list[float] = []
        for it in range(1, max_iter + 1):
            Y = self._rows(lay, y)
            grad = row_dots(Y, self.K, lay["g"], j) + off
            x_new = project_dual(y - step * grad, step, j, off, self.m)
            if np.sum((y - x_new) * (x_new - x) / step) > 0:  # restart (O'Donoghue & Candès)
                tk, y = 1.0, x_new
            else:
                t_next = 0.5 * (1 + np.sqrt(1 + 4 * tk * tk))
                y = x_new + ((tk - 1) / t_next) * (x_new - x)
                tk = t_next
            x = x_new
            if it % check_every and it != max_iter and not (deadline is not None and time.perf_counter() > deadline):
                continue
            X = self._rows(lay, x)
            dual = -self._objective(lay, x, X)
            Xp, tp = self.primal_from(X)
            marg = tp[j[off]] - row_dots(Xp, self.K, lay["g"][off], j[off])
            gamma = float(marg.min()) if marg.size else np.inf
            if progress is not None:
                progress(best.iterations + it, {"restricted_margin": gamma, "dual": dual, "gap": best.gap,
                                                "working_set": int(np.sum(off)), "rounds": best.rounds})
            timed_out = deadline is not None and time.perf_counter() > deadline
            if not gamma > 0:
                if detect_infeasible:
                    far = self._infeasibility(lay["g"][off], j[off], (last_check - x)[off], deadline)
                    if far is not None:
                        return {"status": "infeasible", "psi": x, "iterations": it, "farkas": far}
                last_check = x.copy()
                if timed_out:
                    return {"status": "time_limit", "psi": x, "iterations": it}
                continue
            last_check = x.copy()
            if not np.isfinite(gamma):  # no off-support pair in the working set yet
                return {"status": "optimal", "psi": x, "iterations": it, "candidate": (Xp, tp)}
            Xp, tp = Xp / gamma, tp / gamma
            primal = 0.5 * float(np.sum(self.weights * np.sum(Xp * Xp, axis=1)))
            gap = max(primal - dual, 0.0) / primal
            cand = (Xp, tp)
            if gap <= tol:
                return {"status": "optimal", "psi": x, "iterations": it, "candidate": cand}
            if gap <= self.next_polish:  # the active set is usually right long before the gap closes
                self.next_polish = gap / 100
                return {"status": "polish", "psi": x, "iterations": it, "candidate": cand}
            gaps.append(gap)
            if timed_out:
                return {"status": "time_limit", "psi": x, "iterations": it, "candidate": cand}
            if gap < 1e-6 and len(gaps) > 400 and gaps[-1] > 0.5 * gaps[-401]:
                return {"status": "stalled", "psi": x, "iterations": it, "candidate": cand}
        return {"status": "max_iter", "psi": x, "iterations": max_iter}

    def _offer(self, best: SVMOutcome, lay, psi, cand, full_min_margin: float) -> None:
        """Keep the best certified pair: a fully feasible primal point and a dual point of K."""
        if not full_min_margin > 0:
            return
        Xp, tp = cand[0] / full_min_margin, cand[1] / full_min_margin
        primal = 0.5 * float(np.sum(self.weights * np.sum(Xp * Xp, axis=1)))
        if primal < best.primal:
            best.X, best.t, best.primal = Xp, tp, primal
        dual = -self._objective(lay, psi, self._rows(lay, psi))
        if dual > best.dual:
            best.dual, best.dual_point = dual, (lay["g"].copy(), lay["j"].copy(), psi.copy())

    def _polish(self, lay: dict, Xc: np.ndarray, tc: np.ndarray) -> SVMOutcome | None:
        """Exact solve with the working-set pairs that are (nearly) tight at (Xc, tc) as equalities."""
        off = lay["off"]
        wg, wj = lay["g"][off], lay["j"][off]
        act = tc[wj] - row_dots(Xc, self.K, wg, wj) <= 1.0 + ACTIVE_RTOL
        return self._polish_pairs(wg[act], wj[act])

    def _polish_pairs(self, ag: np.ndarray, aj: np.ndarray, rounds: int = 6) -> SVMOutcome | None:
        """Solve min ½Σ n_g‖x_g‖² with (6a) and the pairs (ag, aj) tight as equalities; accept it only
        as a KKT point of the full problem (multipliers of the sign of (6b), every margin ≥ 1).

        A guessed active set is usually right up to a few weakly active pairs: pairs whose
        multiplier comes out with the wrong sign are dropped and violated pairs added, and the
        solve repeated (a primal-dual active-set step), at most ``rounds`` times.
        """
        for _ in range(rounds):
            g = np.concatenate([self.pg, ag])
            j = np.concatenate([self.pj, aj])
            c = np.concatenate([np.zeros(len(self.pg)), -np.ones(len(ag))])
            is_off = np.concatenate([np.zeros(len(self.pg), bool), np.ones(len(ag), bool)])
            order = np.lexsort((j, g))
            g, j, c, is_off = g[order], j[order], c[order], is_off[order]
            try:
                system = EqualitySystem(self.K, g, j, self.weights, self.gram)
            except (SolverError, TooLargeError):
                return None
            sol = system.solve(c)
            if not sol.consistent or sol.residuals["equality"] > 1e-9 or sol.residuals["balance"] > 1e-9:
                return None
            lam = sol.lam
            wrong = is_off & (lam > 1e-9 * max(float(np.max(np.abs(lam), initial=0.0)), 1e-300))
            scan = scan_off_support(sol.X, sol.t, self.K, self.support_csc, below=1.0 - 1e-9, top=ADD_PER_CONTEXT)
            if not wrong.any() and scan.min_margin >= 1.0 - 1e-9:
                return self._certified_point(sol, g, j, is_off, system.ptr, scan.min_margin)
            keep = is_off & ~wrong
            ag = np.concatenate([g[keep], scan.groups])
            aj = np.concatenate([j[keep], scan.contexts])
        return None

    def _certified_point(self, sol: EqualitySolution, g, j, is_off, ptr, min_margin: float) -> SVMOutcome:
        """The exact solve as primal point (scaled to margin exactly 1) and its multipliers as dual point."""
        X, t = sol.X / min_margin, sol.t / min_margin
        primal = 0.5 * float(np.sum(self.weights * np.sum(X * X, axis=1)))
        # The multipliers are a dual point: clip rounding-level positive off entries, rebalance.
        psi = np.where(is_off, np.minimum(sol.lam, 0.0), sol.lam)
        resid = np.bincount(j, weights=psi, minlength=self.m)
        first = np.full(self.m, -1)
        first[j[~is_off][::-1]] = np.flatnonzero(~is_off)[::-1]
        psi[first] -= resid
        lay = {"g": g, "j": j, "off": is_off, "ptr": ptr}
        dual = -self._objective(lay, psi, self._rows(lay, psi))
        return SVMOutcome("optimal", X, t, primal, dual, (g, j, psi), polished=True)

    def _polish_cost(self, ag: np.ndarray) -> float:
        """Flops of the per-group factorizations of an exact solve with the active pairs of groups
        ``ag``: eigendecompositions of q × q Gram blocks when the m × m Gram is kept, else SVDs."""
        q = (np.diff(self.support.indptr) + np.bincount(ag, minlength=self.G)).astype(float)
        r = self.K.shape[1]
        light = q[q <= r]
        per_group = 10 * light**3 if self.gram is not None else 4 * light**2 * r
        return float(np.sum(per_group) + np.sum(4 * q[q > r] ** 2 * r))

    # -- infeasibility -----------------------------------------------------------------------------
    def _infeasibility(self, g: np.ndarray, j: np.ndarray, mu: np.ndarray, deadline: float | None = None):
        """A Farkas matrix from a dual that does not separate, or None.

        μ = the decrease of the off-support dual entries since the last check (the recession
        direction of an unbounded dual, in the limit). First completed by projection
        (:meth:`farkas_from`); when that is not yet exact and the iterates have failed to separate
        at 4, 8, 16, ... consecutive checks, the LP of :func:`separability_lp` is solved on the
        pairs carrying the direction (at most LP_MAX_PAIRS, the heaviest first): a relaxation, so
        s* = 0 there proves the data non-separable, and its dual values are the Farkas weights.
        The LP gets the time left before ``deadline`` (none left: it is not tried).
        """
        self._failed_checks += 1
        keep = mu > 0
        if not keep.any():
            return None
        g, j, mu = g[keep], j[keep], mu[keep]
        far = self.farkas_from(g, j, mu / mu.sum())
        if far is not None or self._failed_checks < self._next_lp:
            return far
        self._next_lp *= 2
        time_limit = None if deadline is None else deadline - time.perf_counter()
        if time_limit is not None and time_limit <= 0:
            return None
        order = np.argsort(-mu, kind="stable")[:LP_MAX_PAIRS]
        mass = np.cumsum(mu[order])
        order = order[:int(np.searchsorted(mass, (1 - 1e-12) * mass[-1])) + 1]
        # Tie the supports of every context the involved groups follow: a Farkas matrix may balance
        # its columns through the ties of contexts that carry no off-support weight.
        contexts = np.unique(self.support[np.unique(g[order])].indices)
        lp = separability_lp(self.K, self.support, g[order], j[order], contexts=contexts, time_limit=time_limit)
        if lp is None or lp.separable:
            return None
        return self.farkas_from(g[order], j[order], lp.mu / lp.mu.sum(), accept_any=True)

    def farkas_from(self, wg: np.ndarray, wj: np.ndarray, mu: np.ndarray,
                    accept_any: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
        """Complete μ ≥ 0 (Σμ = 1) on off-support pairs into Ψ ∈ K with the smallest ‖Ψ K‖.

        Ψ = −μ off the supports, plus balancing entries on the supports chosen by the (unweighted)
        projection onto F⊥. Returns (grp, ctx, Ψ, perp = ‖Ψ K‖) if perp ≤ FARKAS_RTOL · scale (or
        always, with ``accept_any``, when another method has decided infeasibility, e.g. an LP).
        """
        keep = mu > 0
        wg, wj, mu = wg[keep], wj[keep], mu[keep]
        if self._EP1 is None:
            from embgeo.ntp.svm_alm import TieProjection

            self._EP1 = TieProjection(self.K, self.pg, self.pj, np.ones(self.G))
        # Λ⁰: the column sums of −μ compensated on the first support pair of each context.
        colsum = np.bincount(wj, weights=mu, minlength=self.m)
        first = np.full(self.m, -1)
        first[self.pj[::-1]] = np.arange(len(self.pj))[::-1]
        lam0 = np.zeros(len(self.pg))
        lam0[first] = colsum
        A_off = sp.csr_matrix((-mu, (wg, wj)), shape=(self.G, self.m))
        A_sup = sp.csr_matrix((lam0, (self.pg, self.pj)), shape=(self.G, self.m))
        X1 = (A_off + A_sup) @ self.K
        _, _, lam = self._EP1.project(X1)  # the balancing λ on the supports: Ψ K = X1 + λ K, minimal
        g = np.concatenate([self.pg, wg])
        j = np.concatenate([self.pj, wj])
        psi = np.concatenate([lam0 + lam, -mu])
        perp = float(np.linalg.norm(sp.csr_matrix((psi, (g, j)), shape=(self.G, self.m)) @ self.K))  # ‖Ψ K‖
        if perp > FARKAS_RTOL * self.scale and not accept_any:
            return None
        return g, j, psi, perp


def _unique_pairs(g: np.ndarray, j: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    keys = np.unique(g.astype(np.int64) * m + j)
    return keys // m, keys % m


def _check_interval(gaps: list[tuple[int, float]], check_every: int, tol: float) -> int:
    """Iterations to the next check: ``check_every``, or fewer when the linear rate of the gap over
    the last two checks says ``tol`` will be reached sooner (so a solve stops close to where it
    converges instead of up to ``check_every`` iterations later)."""
    if len(gaps) < 2:
        return check_every
    (i0, g0), (i1, g1) = gaps[-2:]
    if not (0 < g1 < g0 and np.isfinite(g0)):
        return check_every
    need = np.log(g1 / tol) / (np.log(g0 / g1) / (i1 - i0))
    return int(min(check_every, max(3, np.ceil(need))))


def _sigma_max(K: np.ndarray) -> float:
    """σ_max(K) by Lanczos on K Kᵀ or Kᵀ K (the smaller), with a relative margin of 1e-6 upward."""
    from scipy.sparse.linalg import eigsh

    small = K.T if K.shape[0] >= K.shape[1] else K
    n = small.shape[0]
    if n <= 64:
        return float(np.linalg.norm(K, 2))
    op = LinearOperator((n, n), matvec=lambda v: small @ (small.T @ v), dtype=np.float64)
    lam = eigsh(op, k=1, which="LA", tol=1e-10, return_eigenvectors=False)[0]
    return float(np.sqrt(lam * (1 + 1e-6)))


def _with_dual_point(out: SVMOutcome, Psi: np.ndarray | None) -> SVMOutcome:
    """Attach a dense dual point (G, m) as its nonzero pairs."""
    if Psi is not None:
        g, j = np.nonzero(Psi)
        out.dual_point = (g, j, Psi[g, j])
    return out


# -- the separability LP -----------------------------------------------------------------------------------

@dataclass
class LPResult:
    """:func:`separability_lp`: ``value`` s* ∈ {0, 1}; X (G, r), t (m) when separable (rows and
    contexts outside the LP are 0); ``mu`` (≥ 0, one per given off pair) the dual values when not."""

    value: float
    X: np.ndarray | None
    t: np.ndarray | None
    mu: np.ndarray | None

    @property
    def separable(self) -> bool:
        return self.value > 0.5


def separability_lp(K: np.ndarray, support: sp.csr_matrix, og: np.ndarray, oj: np.ndarray,
                    contexts: np.ndarray | None = None, time_limit: float | None = None) -> LPResult | None:
    """max s s.t. x_gᵀk_j = t_j on the supports of the contexts involved, x_gᵀk_j − t_j + s ≤ 0 on the
    given off-support pairs (og, oj), s ≤ 1, over group rows X and t; solved by HiGHS.

    With every off-support pair this is the separability LP of Def. 2 (s* = 1 iff separable, else
    s* = 0). With a subset it is a relaxation on the contexts C = {oj}: s* = 0 still proves the
    data non-separable, and the dual values μ of the given pairs are the Farkas weights.
    Size: (groups involved · r + |C| + 1) variables, one row per pair; for small problems or
    small subsets only. ``contexts`` adds contexts to C (all of them for the full LP, so that the
    supports of contexts without off pairs are tied too). ``time_limit`` (seconds) is passed to
    HiGHS; reaching it returns None (undecided).
    """
    G, m = support.shape
    r = K.shape[1]
    ctx = np.unique(oj if contexts is None else np.concatenate([oj, contexts]))
    sub = support[:, ctx].tocoo()
    ge, je = sub.row.astype(np.int64), ctx[sub.col]  # support pairs of the involved contexts
    groups = np.unique(np.concatenate([ge, og]))
    gpos = np.searchsorted(groups, np.arange(G))  # valid for the involved groups only
    cpos = np.searchsorted(ctx, np.arange(m))
    nx, nt = len(groups) * r, len(ctx)
    n_var = nx + nt + 1  # vec(X_involved) row-major, t_C, s

    def rows(g: np.ndarray, j: np.ndarray, s_coef: float) -> sp.csr_matrix:
        n = len(g)
        cols = [gpos[g][:, None] * r + np.arange(r), (nx + cpos[j])[:, None]]
        vals = [K[j], -np.ones((n, 1))]
        if s_coef:
            cols.append(np.full((n, 1), n_var - 1))
            vals.append(np.full((n, 1), s_coef))
        cols, vals = np.hstack(cols), np.hstack(vals)
        return sp.csr_matrix((vals.ravel(), (np.repeat(np.arange(n), cols.shape[1]), cols.ravel())),
                             shape=(n, n_var))

    c = np.zeros(n_var)
    c[-1] = -1.0  # maximise s
    bounds = [(None, None)] * (n_var - 1) + [(None, 1.0)]
    res = linprog(c, A_ub=rows(og, oj, 1.0), b_ub=np.zeros(len(og)), A_eq=rows(ge, je, 0.0),
                  b_eq=np.zeros(len(ge)), bounds=bounds, method="highs",
                  options={} if time_limit is None else {"time_limit": float(time_limit)})
    if res.status == 1 and time_limit is not None:  # HiGHS stopped at the time limit
        return None
    if res.status != 0:
        raise SolverError(f"separability LP: HiGHS ended with status {res.status} ({res.message})")
    value = float(-res.fun)
    if value > 0.5:
        X = np.zeros((G, r))
        X[groups] = res.x[:nx].reshape(len(groups), r)
        t = np.zeros(m)
        t[ctx] = res.x[nx:nx + nt]
        return LPResult(value, X, t, None)
    return LPResult(value, None, None, np.maximum(-res.ineqlin.marginals, 0.0))
