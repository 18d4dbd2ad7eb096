"""The equality problem behind W*, the projections onto F and F⊥, and the NTP-SVM's exact active-set solve.

In the t-form of :mod:`embgeo.ntp.solvers.constraints`. Notation: K (m × r) the context coordinates, groups g
of tokens with weights n_g and rows x_g ∈ R^r, a pattern Q of pairs (g, j), one scalar t_j per context.

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
Cholesky and the m_t × m_t pivoted one (or conjugate gradients on the sparse S when no group is rank
deficient and m is large, or S sparse enough that they cost less: DENSE_T_MAX, SPARSE_T_MIN), and per
solve O(|Q| r + m²). Never a constraint matrix in V·d, never d.
The multipliers λ (one per pair, n_g x_g = Σ_j λ_{gj} k_j, Σ_g λ_{gj} = 0) come out exactly: they
are the certificate of optimality and, for the NTP-SVM, the dual point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg

from embgeo.core import validate
from embgeo.core.deadline import stop_if_spent
from embgeo.core.validate import check_dense_size
from embgeo.errors import SolverError, TooLargeError
from embgeo.ntp.solvers.constraints import row_dots

#: Above this many contexts the t-system S is kept sparse and solved by conjugate gradients
#: (when no group is rank deficient); below, it is factored densely (m² doubles: 512 MB at 8000) unless it is
#: sparse enough for SPARSE_T_MIN and SPARSE_T_COST.
DENSE_T_MAX = 8000
#: From this many contexts up to DENSE_T_MAX a t-system without rank-deficient groups is solved by conjugate
#: gradients where they are expected to cost under SPARSE_T_COST of the dense Cholesky factorization (m³/3 flops),
#: counting SPARSE_T_ITERATIONS products with S at 2 Σ_g q_g² flops each; where they fall short of CG_RTOL, the
#: dense factorization is built after all, so the exact answer costs at most about twice the dense route. Why:
#: dropping the contexts with one next token from F's system (:mod:`embgeo.ntp.theory.subspace`) brought
#: bench_ntp_scale's large-uniform from m = 20,000 (sparse, W* in 0.5 s) to m = 7,702 (S 1.5 % full), where the
#: dense factorization took 4.5 s alone and conjugate gradients 24 products (2026-11-29).
SPARSE_T_MIN = 4000
SPARSE_T_ITERATIONS = 200
SPARSE_T_COST = 0.1
#: A group whose kept singular values span more than 1/STIFF_RATIO is "stiff": eliminating it puts
#: 1/σ_min² into the t-system; when the multipliers' balance is then worse than STIFF_BALANCE the
#: solve is redone on the whole (well-conditioned) KKT system.
STIFF_RATIO = 1e-4
STIFF_BALANCE = 1e-10
#: Relative residual asked of conjugate gradients on the sparse t-system.
CG_RTOL = 1e-13


class EqualityResiduals(TypedDict, total=False):
    """:attr:`EqualitySolution.residuals` (empty for the trivial solution when F = {0})."""

    equality: float  # max |x_gᵀk_j − t_j − c_gj| relative to max(1, |c|)
    balance: float  # max_j |Σ_g λ_gj| relative to max |λ|
    constraints: float  # least-squares residual of the rank-deficient groups' constraints


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
    residuals: EqualityResiduals
    certificate: np.ndarray | None = None


class EqualitySystem:
    """min ½ Σ_g n_g ‖x_g‖² s.t. x_gᵀ k_j − t_j = c_{gj} on a pattern Q (see the module docstring).

    Parameters
    ----------
    K : (m, r) context coordinates.
    grp, ctx : (|Q|,) int arrays, the pattern, sorted by (grp, ctx), every context present.
    weights : (G,) positive group weights n_g.
    gram : optional (m, m) K Kᵀ, to read the per-group Gram blocks from.
    deadline : optional ``time.perf_counter()`` value after which no step of the factorization begins (a group
        size's SVDs, the t-system's assembly, the constraints' null space, the Cholesky factorization): past it,
        :class:`SolverError` (issue 38: at m = 10,000 the factorization was the 41 s no time limit covered).

    The factorization depends on the pattern and the weights only; :meth:`solve` takes c.
    """

    def __init__(self, K: np.ndarray, grp: np.ndarray, ctx: np.ndarray, weights: np.ndarray,
                 gram: np.ndarray | None = None, deadline: float | None = None):
        self.K, self.grp, self.ctx, self.gram = K, grp, ctx, gram
        self._deadline = deadline
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
        self.buckets = []
        for q in np.unique(counts[counts > 0]):
            self._stop_if_spent(f"the SVDs of the tokens in {q} contexts")
            self.buckets.append(self._bucket(np.flatnonzero(counts == q), q))
        self._factor()
        # the limit was the factorization's; solves are the caller's to time, except the dense factorization that
        # conjugate gradients falling short may still need (_solve_cg), which keeps it
        self._factor_deadline, self._deadline = self._deadline, None

    def _stop_if_spent(self, before: str) -> None:
        stop_if_spent(self._deadline, "the exact equality solve (W*, F)", before)

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
        self.null_space_route = ""  # how null M was found (_constraint_null_space); none without such groups
        self.mode = "cg" if not self.deficient and (m > DENSE_T_MAX or self._sparse_pays()) else "dense"
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
        self._factor_dense()

    def _sparse_pays(self) -> bool:
        """Whether conjugate gradients on the sparse S are expected to cost under SPARSE_T_COST of the dense
        factorization (for SPARSE_T_MIN ≤ m ≤ DENSE_T_MAX; see SPARSE_T_ITERATIONS)."""
        if self.m < SPARSE_T_MIN:
            return False
        nnz = sum(len(b["groups"]) * float(b["q"]) ** 2 for b in self.buckets)  # Σ_g q_g², S's entries at most
        return SPARSE_T_ITERATIONS * 2.0 * nnz < SPARSE_T_COST * self.m ** 3 / 3.0

    def _factor_dense(self) -> None:
        """S assembled densely and factored (Cholesky), or reduced to the null space of the rank-deficient groups'
        constraints first."""
        m = self.m
        check_dense_size("t-system of the equality constraints", (m, m),
                         "too many contexts for the exact dense path")
        self._stop_if_spent("the t-system's assembly")
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
            self._stop_if_spent("the t-system's Cholesky factorization")
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
        self._stop_if_spent("the constraints' null space")
        Z = self._constraint_null_space(M, self.K[touched])
        del M
        free = np.setdiff1d(np.arange(m), touched)
        # T maps the reduced variables (t_free, s) to t.
        T = np.zeros((m, len(free) + Z.shape[1]))
        T[free, np.arange(len(free))] = 1.0
        T[np.ix_(touched, np.arange(len(free), T.shape[1]))] = Z
        self.T = T
        self._stop_if_spent("the t-system's Cholesky factorization")
        self.chol = self._cholesky(_reduced(S, free, touched, Z))
        del Z

    def _constraint_null_space(self, M: np.ndarray, Kt: np.ndarray) -> np.ndarray:
        """An orthonormal basis Z of null M (the feasible directions of t on the touched contexts); sets
        ``constraint_rank`` and the factor behind :meth:`_m_solve`. M is overwritten.

        M = Cᵀ C for C the stacked orthonormal bases of the complements, so its nonzero eigenvalues are the
        squared singular values of C and what rounding leaves on null M is ~ m_t · eps · max M_jj (the rank
        threshold below). A candidate basis N of null M is accepted when M + α NNᵀ (α = max M_jj) is positive
        definite and well conditioned, shown by one Cholesky factorization with a condition estimate: then
        null M = range N. Candidates in order of cost:

        1. range K_t: every t = K_t x lies in null M (t[J_g] = K_g x ∈ range K_g), and when one rank-deficient
           token's contexts cover all the touched ones that is all of it;
        2. the null space read off a pivoted Cholesky factorization of M (LAPACK's dpstrf, stopped at the rank
           threshold): tokens with contexts of their own, as in any text (issue 38: a random GPT-2 at k = 2, where
           candidate 1 failed, took 1 s here against 10 s for the eigendecomposition at m_t = 3,683);
        3. an eigendecomposition, which decides whatever the pivoting does (at m_t = 4,889: 30 s).
        """
        mt = M.shape[0]
        scale = max(float(np.max(np.diag(M))), 1.0)
        tol = 16 * max(mt, 1) * np.finfo(float).eps * scale
        U, sv, _ = np.linalg.svd(Kt, full_matrices=False)
        N0 = U[:, sv > sv[0] * max(Kt.shape) * np.finfo(float).eps] if sv.size else U[:, :0]
        if self._accept_null_space(M, N0, scale):
            self.null_space_route = "range K_t"
            return N0
        N = _pivoted_null_space(M, tol)
        if N is not None and self._accept_null_space(M, N, scale):
            self.null_space_route = "pivoted Cholesky"
            return N
        self.null_space_route = "eigendecomposition"
        ev, vecs = np.linalg.eigh(M)
        kept = ev > tol
        self.constraint_rank = int(kept.sum())
        self._m_factor = ("eigen", ev[kept], vecs[:, kept], M)
        return vecs[:, ~kept]

    def _accept_null_space(self, M: np.ndarray, N: np.ndarray, scale: float) -> bool:
        """Whether range N = null M: M + α NNᵀ factored by Cholesky with reciprocal condition > 1e-8 (λ_min ≥ ~1e-9 ·
        λ_max, far above the rank threshold). When it is, keeps the factor for :meth:`_m_solve` and M + α NNᵀ (the
        same as M on range M) for its refinement; when not, leaves M as it was (but for ~eps · α of rounding, below
        the threshold)."""
        mt = M.shape[0]
        _add_outer(M, N, scale)
        try:
            L = np.linalg.cholesky(M)  # numpy's, which lets Ctrl-C through
            rcond, info = sla.lapack.dpocon(L.T, np.max(np.abs(M).sum(axis=0)))  # O(m_t²); L.T: the upper factor
        except np.linalg.LinAlgError:
            rcond = 0.0
        if rcond > 1e-8:
            self.constraint_rank = mt - N.shape[1]
            self._m_factor = ("cholesky", L, N, M)
            return True
        _add_outer(M, N, -scale)
        return False

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
        # a batched matmul: the three-operand einsum it replaces ran unblocked (14 s of 47 at m = 6,597, issue 38)
        return (U * b["inv2"][rows][:, None, :]) @ U.swapaxes(1, 2)

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
        """t from S t = rhs by Jacobi-preconditioned conjugate gradients; at most DENSE_T_MAX contexts, where they
        fall short of CG_RTOL within about a dense factorization's flops, by the dense factorization instead (the
        system switches to it for later solves)."""
        inv_diag = 1.0 / self.diag
        M = LinearOperator(self.S.shape, matvec=lambda x: inv_diag * x, dtype=np.float64)
        fallback = self.m <= DENSE_T_MAX
        maxiter = 20 * self.m
        if fallback:  # no more products than the dense factorization's flops
            maxiter = int(min(maxiter, max(100.0, self.m ** 3 / 3.0 / (2.0 * max(self.S.nnz, 1)))))
        t, info = cg(self.S, rhs, rtol=CG_RTOL, atol=0.0, maxiter=maxiter, M=M)
        if info == 0:
            return t
        if fallback:
            self._deadline = self._factor_deadline
            self._factor_dense()  # (SolverError past the construction's deadline, as during the construction)
            self.mode, self._deadline = "dense", None
            return sla.cho_solve(self.chol, rhs, check_finite=False)
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

    def _residuals(self, X, t, lam, c, c_res) -> EqualityResiduals:
        vals = row_dots(X, self.K, self.grp, self.ctx) - t[self.ctx] - c
        scale = max(1.0, float(np.max(np.abs(c), initial=0.0)))
        return {"equality": float(np.max(np.abs(vals), initial=0.0)) / scale,
                "balance": _balance(lam, self.ctx, self.m), "constraints": c_res}


def _add_outer(M: np.ndarray, N: np.ndarray, alpha: float, rows: int = 1024) -> None:
    """M += α N Nᵀ in place, in blocks of ``rows`` rows (no second n × n array)."""
    for i in range(0, M.shape[0], rows):
        M[i:i + rows] += alpha * (N[i:i + rows] @ N.T)


def _pivoted_null_space(M: np.ndarray, tol: float) -> np.ndarray | None:
    """An orthonormal basis of null M for M ⪰ 0 (n × n), from a Cholesky factorization with complete pivoting
    stopped at pivots ≤ tol: with P the pivoting, PᵀMP = [[A, B], [Bᵀ, D]] and A = L₁₁L₁₁ᵀ, Bᵀ = L₂₁L₁₁ᵀ (rank k),
    the null vectors are P [−L₁₁⁻ᵀL₂₁ᵀ z; z], orthonormalised. None when the factorization fails."""
    n = M.shape[0]
    c, piv, k, info = sla.lapack.dpstrf(M, tol=tol, lower=1)
    if info < 0 or k >= n:
        return None
    piv = piv - 1  # LAPACK's pivots count from 1
    X = np.zeros((n, n - k))
    # L₁₁ is read from c's lower triangle (what lies above it is M's); c is dropped before the QR (memory: M, X, Q)
    X[piv[:k]] = -sla.solve_triangular(c[:k, :k], c[k:, :k].T, lower=True, trans="T", check_finite=False)
    del c
    X[piv[k:], np.arange(n - k)] = 1.0
    return np.linalg.qr(X)[0]


def _reduced(S: np.ndarray, free: np.ndarray, touched: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Tᵀ S T for T = [I on the free contexts; Z on the touched ones] (m × (f + z)), by blocks:
    [[S_ff, S_ft Z], [Zᵀ S_tf, Zᵀ S_tt Z]]. The dense product multiplied T's identity block too: 12 s against
    2 at m = 6,597 with 3,683 contexts touched (issue 38)."""
    f = len(free)
    SZ = S[np.ix_(free, touched)] @ Z  # (f, z)
    out = np.empty((f + Z.shape[1],) * 2)
    out[:f, :f] = S[np.ix_(free, free)]
    out[:f, f:] = SZ
    out[f:, :f] = SZ.T
    out[f:, f:] = Z.T @ (S[np.ix_(touched, touched)] @ Z)
    return out


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
