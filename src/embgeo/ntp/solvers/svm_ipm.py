"""The NTP-SVM (Def. 3) by a primal-dual interior-point method on the ties' null space, for small problems.

Paper: ``ntp-implicit-bias-neurips.txt`` Def. 3. Problem in t-form on token groups
(:mod:`embgeo.ntp.solvers.constraints`), z = (X, t) with X (G × r) the group rows, t (m) one tie value per context,
K (m × r) the context coordinates, n_g the group sizes:

    min ½ zᵀDz = ½ Σ_g n_g ‖x_g‖²   s.t.   A_S z = 0   (6a: x_gᵀk_j − t_j = 0 on the support pairs)
                                           A_O z ≥ 1   (6b: t_j − x_gᵀk_j ≥ 1 on every off-support pair)

The ties are eliminated exactly. Each context's first support group f(j) fixes t_j = k_jᵀx_{f(j)}; its other support
pairs ask k_jᵀ(x_g − x_{f(j)}) = 0, the rows of E (n_E × G r), and x = vec(X) = N u with N an orthonormal basis of
null(E) (from E's SVD). Every iterate then ties its supports to rounding, and the problem is the QP

    min ½ uᵀQu  s.t.  Bu ≥ 1,     Q = Nᵀ diag(n_g I) N,  (Bu)_{gj} = k_jᵀ(x_{f(j)} − x_g)  on the off pairs,

in p = dim null(E) ≤ G r unknowns. Q is positive definite (N has orthonormal columns and n_g ≥ 1). It is solved by
Mehrotra's predictor-corrector (Nocedal & Wright, *Numerical Optimization*, 2nd ed., §16.6): slacks s = Bu − 1 ≥ 0,
multipliers λ ≥ 0, and per iteration one Cholesky factorization of the p × p matrix Q + Bᵀ diag(λ/s) B, solved
twice (the affine predictor, then the centred corrector with σ = (μ_aff/μ)³). B is never formed: the matrix is
assembled by r × r blocks in X (each off pair (g, j) couples x_g and x_{f(j)} through k_j k_jᵀ) and projected on N.

**Two ways to keep the ties** (``IPMOptions.NEWTON``). The projection Nᵀ H N of the matrix H in X costs
2 (G r)² p + 2 G r p² flops, most of an iteration when the ties are few (p close to G r). The same step solves the
KKT system in X with the ties as equality rows, V_r an orthonormal basis of E's rows (from the same SVD):

    H Δx + V_r ν = rhs,   V_rᵀ Δx = 0    ⇔    Nᵀ(H Δx − rhs) = 0, Δx = N Δu,

by a Cholesky factorization H = RᵀR ((G r)³/3) and the Schur complement S = V_rᵀ H⁻¹ V_r = YᵀY, Y = R⁻ᵀ V_r, of the
k ≤ n_S − m tie directions ((G r)² k + 2 G r k² + k³/3): ν = S⁻¹ YᵀR⁻ᵀ rhs, Δx = R⁻¹(R⁻ᵀ rhs − Y ν), projected on
null(E) so that the iterates tie their supports to rounding (u is then vec(X) itself). H in X is worse conditioned
than on the null space (its weights λ/s span 1e-12–1e12 late in the solve, and the directions across the ties are
not damped by the projection), so each such solve is followed by iterative refinement on the null space (at most
:data:`REFINE` steps). "auto" takes the way with fewer flops (:func:`newton_flops`): the range space where the ties
are fewer than about half the unknowns. Both solve the same Newton system (tested against each other), and on the
planted shapes reach the same gaps (≤ 2e-11) in the same number of iterations or up to three more. On SmolLM2's states
relaxed to 5 tokens (G r = 3,456, 444 ties) the solve took 49.9 s (34 iterations) instead of 157.8 s (38), relaxed to
10 tokens (G r = 6,336, 1,088 ties) 265 s (43) instead of 865 s (42) (benchmarks/README.md, ``bench_ntp_real_lm``).

**Start** (:meth:`SVMIPM._warm`). Given a separator (``solve(X0=...)``: ``ntp_svm`` hands the separability
certificate, or the augmented Lagrangian's best point when it hands over), the iterations start strictly feasible: the
separator on the ties at smallest margin 2, λ = μ₀/s with sᵀλ = Σ_g n_g‖x_g‖². Else Mehrotra's start, infeasible.

**Exact finish** (:meth:`SVMIPM.finish`). Where the iterations stall short of ``tol`` (the Newton steps' accuracy
runs out before the optimum when the weights λ/s span 1e-12–1e12; ``CERTIFICATE_LAG`` notices when the iterates'
own gap has passed the certified one), the pairs with λ > s at the last iterate are taken as the active set and solved
as equalities with the ties — min ½ Σ_g n_g‖x_g‖² s.t. V_rᵀx = 0, B_A x = 1 — by a QR (backward stable whatever the
weights were; updated by Givens rotations from round to round), pairs with negative multipliers dropped and violated
ones added for a few rounds, and accepted only as a KKT point of the whole problem with a smaller certified gap.

Measured 2026-11-30 (late), one thread, ``ntp_svm(method="ipm")`` handed the squared hinge's verdict: SmolLM2's states
relaxed to 5 tokens 25.3 s (22 iterations from the separator, the finish ~2 s) against 65.6 s before (34 iterations
from Mehrotra's start, 9 of them past the certificate, six pivoted QRs); relaxed to 10 tokens 136.2 s (24 iterations)
against 362.8 s (43), the same W^mm (‖W^mm‖ = 167.43397 and 584.82061) at gaps 7.8e-13 and 2.4e-12.

**Why a second method** (issue 38). On data whose margin is tiny next to the embeddings' scale (‖W^mm‖ in the
hundreds to tens of thousands in units where max ‖h̄_j‖ = 1: planted d ≪ m instances with exact ties), the
augmented Lagrangian of :mod:`~embgeo.ntp.solvers.svm_alm` converges linearly at penalties of 10⁸–10⁹ and stalls,
or finds no feasible point at all, while an interior-point method's iteration count does not depend on that
conditioning (at m = 600, V = 40, d = 8: cvxpy + Clarabel on every constraint in 1.4–1.8 s, where the ALM ended
``optimal_inaccurate`` on three seeds of four and undecided on the fourth). It is used where its dense (G r)² Newton
matrix and the G × m pairs fit (:func:`ipm_fits`): by ``ntp_svm(method="auto")`` first where an iteration is cheap
(:func:`ipm_cheap`), else after the augmented Lagrangian stopped short of the tolerance.

**Certificate**, as the other solvers': the iterate (already tied) divided by its smallest off-support margin
min(Bu) is feasible for every constraint, with value P; the multipliers λ on the off pairs, on each context's first
support pair minus the sum of its other multipliers (stationarity in t_j), and on the other support pairs ν solving
stationarity in X in least squares (Eᵀν = −(the rest), by E's SVD), taken at their best multiple, are a dual point
with value D ≤ ½‖W^mm‖² (:meth:`SVMIPM.dual_point`). The relative gap (P − D)/P bounds ‖W − W^mm‖
(:func:`embgeo.ntp.theory.svm._error_bound`).

Cost: the SVD of E (the n_S − m support pairs past each context's first, × G r) once; per iteration the Newton
matrix's r × r blocks in X (3 G m r² flops), its factorization (:func:`newton_flops`: on the null space its
projection, 2 (G r)² p + 2 G r p², and Cholesky, p³/3; in the range space (G r)³/3 + (G r)² k + 2 G r k² + k³/3),
and a few passes over the G × m margins. Memory: a few (G r)² doubles, a few G × m arrays, the SVD of E
(n_S − m rows × G r; in the range space without the (G r)² null-space basis) and at most KK_MAX_ENTRIES doubles for
the r × r blocks' sums. Until 2026-11-30 every k_jk_jᵀ was
kept, m r² doubles whatever their size: 26 GB at m = 10,000, r = 576 (a real LM's states, three tokens), which the
route's size checks did not see.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from embgeo.core.deadline import past
from embgeo.core.status import Status
from embgeo.core.validate import check_options
from embgeo.ntp.solvers.outcome import ProgressEvent, ProgressFn, SVMOutcome


@dataclass(frozen=True)
class IPMOptions:
    """The interior-point method's settings (:class:`SVMIPM` ``options``, :func:`embgeo.ntp.theory.ntp_svm`
    ``ipm_options``)."""

    #: Largest G·r (the unknowns X; the null space's dimension p is at most this) the route takes: its (G r)² Newton
    #: matrix is dense (a few copies of it: 0.5 GB each at 8,000), and an iteration costs up to ~1.3 (G r)³ flops
    #: (:func:`newton_flops`). 2,500 until 2026-11-30, when the range space made an iteration with few ties ~5× cheaper:
    #: SmolLM2's states relaxed to 10 tokens (G r = 6,336) took ~5 s an iteration and 2.1 GB at peak.
    MAX_UNKNOWNS: int = 8000
    #: Largest G·m (every pair, as dense G × m arrays: slacks, multipliers, weights).
    MAX_PAIRS: int = 4_000_000
    #: ``ntp_svm(method="auto")`` takes this route first (not the augmented Lagrangian) when an iteration's flops
    #: (:func:`iteration_flops`) are at most this. Measured 2026-11-29, one thread: where the margin is tiny
    #: (``reference.ntp.planted``) the ALM stalled on 6 of 7 instances and this was 4.5–26× faster than Clarabel
    #: (benchmarks/README.md, ``--planted``); on well-separated planted draws (every margin of the planted decoder
    #: ≥ 1 or ≥ 3) at 1.1e9–2.2e9 flops it took 2.9–3.9 s against the ALM's 2.3–9.1 s, at 1.2e10–1.3e10 7.8–8.5 s
    #: against 4.3–9.0 s. Larger problems that fit go to the ALM first, and here when it stops short of the tolerance.
    AUTO_FLOPS: float = 3e9
    #: Above this many flops an iteration, ``ntp_svm`` asks the cheap separability routes (Lemma 1, the pair
    #: certificates and pair LPs; not the LP of the whole problem) before this route: on non-separable ``synthetic``
    #: draws they decide in 0.01–0.02 s, where this route's multipliers take ~8 iterations to diverge (0.6–1.5 s at
    #: 5e8–1.5e9 flops); on separable data they cost 0.12–0.24 s at m = 300–600. Below, it decides alone.
    ROUTES_FLOPS: float = 2e8
    MAX_ITER: int = 100
    #: How the Newton systems keep the ties (module docstring, "Two ways to keep the ties"): "null space" (the
    #: matrix projected on N), "range space" (a Cholesky of the matrix in X and a Schur complement in the ties) or
    #: "auto", the one with fewer flops by :func:`newton_flops`.
    NEWTON: str = "auto"
    #: A stall short of ``tol`` is finished exactly (:meth:`SVMIPM.finish`) in at most this many rounds: a QR of the
    #: active constraints (the ties and the pairs with λ > s) of 2 G r c² flops, c their number, tried while it costs
    #: at most FINISH_FLOPS_PER_ITERATION times an iteration's bound (:func:`iteration_flops`), then its updates for
    #: the pairs that leave and join (O(G r c) a pair). 6 until 2026-11-30, when every round was a pivoted QR of its
    #: own: SmolLM2's states relaxed to 5 tokens needed all six (3 s each), relaxed to 10 tokens three (30 s each).
    FINISH_ROUNDS: int = 20
    FINISH_FLOPS_PER_ITERATION: float = 1.0
    #: Fraction of the step to the boundary of s, λ ≥ 0 (Mehrotra's η).
    STEP_TO_BOUNDARY: float = 0.995
    #: Once the certified gap is below 1e-3, the iterations stop when the complementarity μ = sᵀλ/M has not fallen
    #: below this fraction of its value five iterations earlier (the factorization has run out of digits).
    STALL: float = 0.5
    #: Once the certified gap is below 1e-3, the iterations also stop as stalled when the iterate's own gap — its
    #: complementarity sᵀλ over ½Σ_g n_g‖x_g‖² (primal minus dual value where the residuals vanish) plus twice its
    #: largest margin residual |Bu − s − 1| (what scaling it to margin 1 costs) — is below this fraction of the
    #: certified gap, and the certified gap did not halve over the last two iterations: the iterates have converged
    #: past their certificate, whose dual point is limited by the Newton solves' accuracy, and further iterations do
    #: not move it (:meth:`SVMIPM.finish` takes over). (A certificate that lags but still falls is following: on
    #: ``make_data([3, 1, 2, 4, 2, 3], V=6, d=4, seed=2)`` of the tests, at tol = 1e-14, it stayed at 1.3e-10 for one
    #: iteration, 100× behind the iterates' own gap, then fell to 1.8e-14 and 9.7e-15.) Measured
    #: 2026-11-30, one thread: SmolLM2's states relaxed to 5 / 10 tokens ran 11 / 9 iterations (~15 s / ~60 s) with
    #: the certified gap fixed at 3.3e-8 / 2.4e-6 while μ fell to 1e-15, before the STALL test above ended them.
    CERTIFICATE_LAG: float = 1e-2
    #: A separator handed to :meth:`SVMIPM.solve` (``X0``) starts the iterations scaled to this smallest margin
    #: (:meth:`SVMIPM._warm`): strictly inside the feasible set, s ≥ WARM_MARGIN − 1. Measured 2026-11-30, one thread,
    #: SmolLM2's states relaxed to 5 tokens from the squared hinge's separator: 1.2 / 2 / 5 / 20 took 22 / 22 / 24 /
    #: 26 iterations (23.6–28.8 s), the same W^mm; the start's distance from the boundary matters little.
    WARM_MARGIN: float = 2.0

    def __post_init__(self):
        # (the two settings whose wrong values would not fail loudly: a start on the boundary, λ = μ₀/0)
        if not self.WARM_MARGIN > 1:
            raise ValueError(f"IPMOptions.WARM_MARGIN: expected a margin > 1 (s = margin − 1 > 0), "
                             f"got {self.WARM_MARGIN}")
        if not 0 <= self.CERTIFICATE_LAG < 1:
            raise ValueError(f"IPMOptions.CERTIFICATE_LAG: expected a fraction in [0, 1), got {self.CERTIFICATE_LAG}")


def iteration_flops(pattern: sp.spmatrix, r: int) -> float:
    """Flops of one iteration, bounded: the Newton matrix's blocks (3 G m r²) and its factorization, 2 (G r)³ (the
    cheaper of the two ways in :func:`newton_flops` is at most 1.3 (G r)³ whatever the number of ties)."""
    G, m = pattern.shape
    return 3.0 * G * m * r * r + 2.0 * float(G * r) ** 3


def newton_flops(unknowns: int, ties: int) -> dict[str, float]:
    """Flops of one factorization of the Newton system by each way of keeping the ties, with n = G·r unknowns and k
    tie rows (the support pairs past each context's first; rank E ≤ k, p = n − k): "null space" projects the n × n
    matrix on N (2 n² p + 2 n p²) and factors the p × p result (p³/3), or factors the n × n matrix alone where there
    are no ties (N = I); "range space" factors the n × n matrix (n³/3), solves it for E's k range directions
    (n² k), forms their k × k Schur complement (2 n k²) and factors it (k³/3)."""
    n, k = float(unknowns), float(min(ties, unknowns))
    p = n - k
    null = n**3 / 3 if k == 0 else 2 * n * n * p + 2 * n * p * p + p**3 / 3
    return {"null space": null, "range space": n**3 / 3 + n * n * k + 2 * n * k * k + k**3 / 3}


def ipm_fits(pattern: sp.spmatrix, r: int, options: IPMOptions | None = None) -> bool:
    """Whether the interior-point route takes this problem: G·r ≤ ``MAX_UNKNOWNS`` and G·m ≤ ``MAX_PAIRS``."""
    opt = check_options(options, IPMOptions)
    G, m = pattern.shape
    return G * r <= opt.MAX_UNKNOWNS and G * m <= opt.MAX_PAIRS


def ipm_cheap(pattern: sp.spmatrix, r: int, options: IPMOptions | None = None) -> bool:
    """Whether ``ntp_svm(method="auto")`` takes the interior point first: it fits and an iteration costs at most
    ``AUTO_FLOPS``."""
    opt = check_options(options, IPMOptions)
    return ipm_fits(pattern, r, opt) and iteration_flops(pattern, r) <= opt.AUTO_FLOPS


#: :meth:`SVMIPM.hessian`'s weighted Gram sums Σ_j w_gj k_j k_jᵀ: from the rows k_j k_jᵀ kept once (one product,
#: m r² doubles) where m r² is at most KK_MAX_ENTRIES (128 MB), else by blocks of b contexts, G·b·r ≤ GRAM_BLOCK_ENTRIES
#: doubles (32 MB) at a time. Measured 2026-11-30, one thread: on SmolLM2's states relaxed to 2 tokens (m = 1,476,
#: r = 576, G = 3; m r² = 3.9 GB) the blocks took the solve from 67.9 s and 6.5 GB to 14.6–15.0 s and 0.33 GB; on
#: planted(1000, 60, 16) (m r² = 256,000) they were 22 % slower than the kept rows, which stay there.
KK_MAX_ENTRIES = 16_000_000
GRAM_BLOCK_ENTRIES = 4_000_000


#: The iterations end as diverged when Σλ exceeds this multiple of uᵀQu = Σ_g n_g‖x_g‖²: at W^mm the two are equal
#: (strong duality), and an infeasible QP's multipliers grow without bound. Measured (2026-11-30): on separable data
#: the ratio peaked at 17–3.4e3 (planted(1000, 60, 16), planted(300, 20, 6), planted(600, 40, 8, seed=1)); on two
#: non-separable draws of ``synthetic`` it passed 1e10 at the 8th and 9th iteration and 1e99 by the 20th. A false
#: alarm costs time, not a wrong answer: the separability routes and the augmented Lagrangian then take over.
DIVERGED_RATIO = 1e10

#: Most steps of iterative refinement of a range-space solve (:meth:`SVMIPM._solve`); they stop once the reduced
#: residual is below 1e-15 of the right-hand side or no longer falls. Measured 2026-11-30, one thread: without them the
#: range space stalled at gaps 1e-8–1e-4 on planted(60, 12, 5), planted(300, 20, 6), planted(600, 40, 8, seeds 0, 2)
#: and planted(1000, 60, 16), where the null space reached 1e-11 (its late residuals 1e-8–1e-7 of the right-hand side:
#: the weights λ/s span 1e-12–1e12, and H in X is worse conditioned than on the null space); with at most 3,
#: planted(600, 40, 8, seed=2) still stalled at 3e-8; with 10, all reached gaps ≤ 2e-11. Stopping as soon as a step
#: did not halve the residual, SmolLM2's states relaxed to 10 tokens stalled at gap 2.4e-6; stopping only when it no
#: longer falls, at 6.4e-8 (the null space: 4.8e-8), in about the same time.
REFINE = 10


class SVMIPM:
    """Mehrotra's predictor-corrector with the ties kept on their null space or in their range space (module
    docstring, :attr:`newton`). ``K`` (m, r) the context
    coordinates, ``support`` the (G, m) 0/1 pattern of the groups in each support, ``weights`` (G,) the group sizes."""

    def __init__(self, K: np.ndarray, support: sp.spmatrix, weights: np.ndarray, options: IPMOptions | None = None):
        self.opt = check_options(options, IPMOptions)
        self.K = np.asarray(K, dtype=np.float64)
        self.support = sp.csr_matrix(support)
        self.n = np.asarray(weights, dtype=np.float64)
        self.G, self.m = self.support.shape
        self.r = self.K.shape[1]
        coo = self.support.tocoo()
        order = np.lexsort((coo.row, coo.col))  # by context, then group: each context's first support pair first
        self.sg, self.sj = coo.row[order].astype(np.int64), coo.col[order].astype(np.int64)
        self.first = np.searchsorted(self.sj, np.arange(self.m))  # index of each context's first support pair
        off = self.support.toarray() == 0
        self.og, self.oj = (a.astype(np.int64) for a in np.nonzero(off))
        ways = newton_flops(self.G * self.r, len(self.sg) - self.m)
        if self.opt.NEWTON not in ("auto", *ways):
            raise ValueError("IPMOptions.NEWTON: expected 'auto', 'null space' or 'range space', "
                             f"got {self.opt.NEWTON!r}")
        #: "null space" or "range space": how the Newton systems keep the ties (module docstring)
        self.newton = min(ways, key=ways.get) if self.opt.NEWTON == "auto" else self.opt.NEWTON
        self.warm = False  #: whether the last solve started from a separator (:meth:`_warm`)
        self._null_space()

    # -- the reduced problem ------------------------------------------------------------------------------------
    def _null_space(self) -> None:
        """The ties eliminated: t_j = k_jᵀx_{f(j)} by each context's first support group f(j), and x = vec(X) = N u
        with N (G r, p) an orthonormal basis of null(E), E the other support pairs' rows k_jᵀ(x_g − x_{f(j)}) = 0
        (from E's SVD, kept for the multipliers: :meth:`dual_point`). B's row for the off pair (g, j) is its margin
        t_j − k_jᵀx_g = k_jᵀ(x_{f(j)} − x_g) in u; B is never formed (:meth:`margins`, :meth:`b_t`)."""
        G, m, r = self.G, self.m, self.r
        self.f = self.sg[self.first]  # (m,) each context's first support group
        self.F = np.zeros((G, m))  # first-group incidence (dense: the pairs' G × m arrays are, too)
        self.F[self.f, np.arange(m)] = 1.0
        rest = np.ones(len(self.sg), bool)
        rest[self.first] = False
        self.eg, self.ej = self.sg[rest], self.sj[rest]
        E, _ = tie_matrix(self.K, G, self.sg, self.sj)  # (its rows: the pairs (eg, ej), in this order)
        self._U, self._sv, self._Vr, self.N = _null_space_of(E, basis=self.newton == "null space")
        self.p = G * r if self.N is None else self.N.shape[1]  # (range space: u is vec(X) itself)
        self._by_first = [np.flatnonzero(self.f == a) for a in range(G)]
        # the rows k_j k_jᵀ, where they are small enough to keep (KK_MAX_ENTRIES)
        self._KK = (self.K[:, :, None] * self.K[:, None, :]).reshape(m, r * r) if m * r * r <= KK_MAX_ENTRIES else None

    def _x(self, u: np.ndarray) -> np.ndarray:
        return (u if self.N is None else self.N @ u).reshape(self.G, self.r)

    def _reduce(self, v: np.ndarray) -> np.ndarray:
        """A vector over vec(X) (G r,) in u's coordinates: Nᵀv, or v itself in the range space."""
        return v if self.N is None else self.N.T @ v

    def tie(self, u: np.ndarray) -> np.ndarray:
        """The point u moved onto the ties: itself on the null space (every u is tied), its projection on null(E)
        in the range space (where the iterates are tied by the Newton steps: :meth:`_solve`)."""
        return u if self.N is not None else u - self._Vr @ (self._Vr.T @ u)

    def z_of(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(X (G, r), t (m)) of the reduced point u (p,)."""
        X = self._x(u)
        return X, self._ties_of(X)

    def _ties_of(self, X: np.ndarray) -> np.ndarray:
        """t (m,): each context's tie value k_jᵀx_{f(j)} for the group rows X (G, r)."""
        return np.einsum("jk,jk->j", self.K, X[self.f])

    def margins(self, u: np.ndarray) -> np.ndarray:
        """B u: the off-support margins t_j − x_gᵀk_j of the point u, in the order of (og, oj)."""
        return self._margins_of(self._x(u))

    def _margins_of(self, X: np.ndarray) -> np.ndarray:
        """The off-support margins of the group rows X (G, r), t_j tied to x_{f(j)}."""
        return (self._ties_of(X)[None, :] - X @ self.K.T)[self.og, self.oj]

    def b_t(self, v: np.ndarray) -> np.ndarray:
        """Bᵀ v (p,) for v over the off pairs: in X, −Σ_j v_gj k_j on x_g and Σ_g v_gj k_j on x_{f(j)}."""
        Vd = self._dense(v)
        return self._reduce(((self.F * Vd.sum(axis=0) - Vd) @ self.K).ravel())

    def _dense(self, v: np.ndarray) -> np.ndarray:
        """(G, m) array of the values v over the off pairs, 0 on the supports."""
        out = np.zeros((self.G, self.m))
        out[self.og, self.oj] = v
        return out

    def hessian(self, w: np.ndarray) -> np.ndarray:
        """Q + Bᵀ diag(w) B (p, p), assembled in X by r × r blocks (each off pair (g, j) couples x_g and x_{f(j)}
        through w_gj k_j k_jᵀ) and projected on N (not in the range space, where p = G r): O(G m r² + (G r)² p)
        flops."""
        G, r = self.G, self.r
        Wd = self._dense(w)
        H = np.zeros((G, r, G, r))
        diag = self.n[:, None, None] * np.eye(r)  # Q's part: n_g I
        for a, J in enumerate(self._by_first):
            if len(J):
                C = self._weighted_grams(Wd, J)  # pairs (g, j) with f(j) = a
                H[a, :, :, :] -= C.transpose(1, 0, 2)
                H[:, :, a, :] -= C
                diag[a] += C.sum(axis=0)
                diag += C  # Σ_j w_gj k_j k_jᵀ on (g, g), summed over the first groups (they partition the contexts)
        H[np.arange(G), :, np.arange(G), :] += diag
        H = H.reshape(G * r, G * r)
        return H if self.N is None or not len(self._sv) else self.N.T @ H @ self.N  # (rank E = 0: N = I)

    def _weighted_grams(self, Wd: np.ndarray, J: np.ndarray | None = None) -> np.ndarray:
        """(G, r, r): Σ_{j ∈ J} Wd[g, j] k_j k_jᵀ for every group g (J: every context when None), with Wd (G, m) the
        weights: one product with the kept rows k_j k_jᵀ, or by blocks of b contexts, G·b·r ≤ GRAM_BLOCK_ENTRIES doubles
        at a time (KK_MAX_ENTRIES; G m r² flops either way)."""
        G, r = self.G, self.r
        if self._KK is not None:  # (all contexts without indexing: a fancy index would copy the m r² rows)
            return (Wd @ self._KK if J is None else Wd[:, J] @ self._KK[J]).reshape(G, r, r)
        J = np.arange(self.m) if J is None else J
        out = np.zeros((G, r, r))
        b = max(1, GRAM_BLOCK_ENTRIES // (G * r))
        for lo in range(0, len(J), b):
            block = J[lo:lo + b]
            Kb = self.K[block]
            out += np.matmul(Kb.T, Wd[:, block, None] * Kb)  # (r, b) @ (G, b, r): one r × r Gram per group
        return out

    # -- the certificate --------------------------------------------------------------------------------------
    def dual_point(self, X: np.ndarray, lam: np.ndarray) -> tuple[float, tuple]:
        """(D, (grp, ctx, Ψ)): the dual point of the off-support multipliers λ at the primal X (module docstring).
        The multipliers of each context sum to zero (stationarity in t_j) when its first support pair carries
        ν_{f(j)j} = −Σ(its other multipliers); the other support pairs' ν then solve stationarity in X,
        n_g x_g + Σ_j (multiplier_gj) k_j = 0, in least squares (Eᵀν = −rhs, by E's SVD). The whole is taken at its
        best multiple s ≥ 0: D = s Σλ − ½ s² Σ_g ‖Σ_j (multiplier_gj) k_j‖²/n_g ≤ ½‖W^mm‖²."""
        G, m = self.G, self.m
        L = self._dense(lam)
        off_sum = L.sum(axis=0)  # Σ_off λ per context
        fixed = self.n[:, None] * X + (L - self.F * off_sum) @ self.K  # stationarity in X with ν_rest = 0
        # Eᵀν = −fixed in least squares: ν = −U σ⁻¹ V_rᵀ fixed, with V_r = the rows of E's range (⊥ N)
        nu_rest = -(self._U @ ((self._Vr.T @ fixed.ravel()) / self._sv)) if len(self._sv) else np.zeros(len(self.eg))
        rest_sum = np.bincount(self.ej, weights=nu_rest, minlength=m)
        nu_first = -off_sum - rest_sum
        g = np.concatenate([self.f, self.eg, self.og])
        j = np.concatenate([np.arange(m), self.ej, self.oj])
        mult = np.concatenate([nu_first, nu_rest, lam])
        Y = sp.csr_matrix((mult, (g, j)), shape=(G, m)) @ self.K  # Σ_j multiplier_gj k_j per group
        linear, quad = float(np.sum(lam)), float(np.sum(np.einsum("ij,ij->i", Y, Y) / self.n))
        s = max(linear, 0.0) / quad if quad > 0 else 0.0
        return s * linear - 0.5 * s * s * quad, (g, j, -s * mult)

    def _quad(self, X: np.ndarray) -> float:
        """Σ_g n_g‖x_g‖² = uᵀQu of the group rows X (G, r): twice the objective."""
        return float(np.sum(self.n * np.einsum("ij,ij->i", X, X)))

    def _scaled(self, X: np.ndarray, margins: np.ndarray) -> tuple[np.ndarray, np.ndarray, float] | None:
        """(X/γ, its ties t, its value ½Σ_g n_g‖x_g‖²) for tied group rows X (G, r) with off-support ``margins``, γ
        the smallest (feasible for every constraint); None when γ ≤ 0."""
        gamma = float(np.min(margins, initial=np.inf))
        if not gamma > 0:
            return None
        Xf = X / gamma
        return Xf, self._ties_of(Xf), 0.5 * self._quad(Xf)

    def _certify(self, u: np.ndarray, X: np.ndarray, Bu: np.ndarray, lam: np.ndarray, best: SVMOutcome,
                 best_dual: list) -> None:
        """The iterate u (its group rows X and margins Bu) divided by its smallest margin (feasible for every
        constraint, when that margin is positive) and the dual point of λ (a lower bound whatever the iterate), each
        kept when it improves ``best``."""
        scaled = self._scaled(X, Bu)
        if scaled is not None and scaled[2] < best.primal:
            best.X, best.t, best.primal = scaled
        dual, point = self.dual_point(X, lam)
        if dual > best.dual:
            best.dual, best_dual[0] = dual, point

    # -- the method -------------------------------------------------------------------------------------------
    def _start(self, X0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The starting point. From a separator X0 (G, r) (:meth:`_warm`) where it has every margin positive; else
        Mehrotra's: u fitting the margins Bu = 1 in least squares (with Q), s and λ shifted positive and balanced
        (Nocedal & Wright §14.2, for the QP)."""
        warm = None if X0 is None else self._warm(X0)
        self.warm = warm is not None
        if warm is not None:
            return warm
        factor = self._factor(self.hessian(np.ones(len(self.og))))  # (≥ n_g I: positive definite, to rounding)
        if factor is None:
            raise np.linalg.LinAlgError("the interior point's first Newton matrix is not positive definite")
        u = self._solve(factor, self.b_t(np.ones(len(self.og))))
        s = self.margins(u) - 1.0
        lam = np.ones(len(s))
        s = s + max(-1.5 * float(s.min(initial=0.0)), 0.0)
        s += 0.5 * float(s @ lam) / float(lam.sum()) + 1e-12
        lam += 0.5 * float(s @ lam) / float(s.sum())
        return u, s, lam

    def _warm(self, X0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """A strictly feasible start from a separator X0 (G, r): X0 on the ties, scaled to smallest margin
        WARM_MARGIN (s = Bu − 1 ≥ WARM_MARGIN − 1 > 0), and λ = μ₀/s with sᵀλ = Σ_g n_g‖x_g‖² (= uᵀQu: the
        complementarity as large as the objective, so that neither dominates the first steps); None where X0 has a
        margin ≤ 0 on the ties. Why: from Mehrotra's start the iterations spend their first ~20 steps reducing the
        margins' infeasibility (SmolLM2's states relaxed to 10 tokens: μ rising 3.6 → 804 over 19 iterations, steps
        0.007–0.35); from the squared hinge's separator the gap fell below 1e-6 after 22 iterations instead of 35."""
        X0 = np.asarray(X0, dtype=np.float64)
        if X0.shape != (self.G, self.r) or not np.all(np.isfinite(X0)):
            raise ValueError(f"X0: expected finite group rows of shape ({self.G}, {self.r}), got {X0.shape}")
        x = self.tie(X0.ravel()) if self.N is None else self.N @ (self.N.T @ X0.ravel())  # on the ties
        Bu = self._margins_of(x.reshape(self.G, self.r))
        gamma = float(np.min(Bu, initial=np.inf))
        if not (np.isfinite(gamma) and gamma > 0):
            return None
        scale = self.opt.WARM_MARGIN / gamma
        u = self._reduce(x) * scale
        s = Bu * scale - 1.0
        quad = self._quad(x.reshape(self.G, self.r)) * scale**2
        return u, s, (quad / len(s)) / s

    def _factor(self, H: np.ndarray):
        """The Newton matrix H (from :meth:`hessian`) factored for :meth:`_solve`, or None where it (or, in the range
        space, the ties' Schur complement) is not positive definite. In the range space: H = RᵀR, Y = R⁻ᵀV_r for E's
        range directions V_r (G r, rank E), and the Schur complement S = YᵀY = V_rᵀH⁻¹V_r factored."""
        chol = _regularized_cholesky(H)
        if chol is None or self.N is not None or not len(self._sv):
            return chol if chol is None else (chol, None, None, None)
        Y = sla.solve_triangular(chol[0], self._Vr, trans="T", lower=chol[1], check_finite=False)
        schur = _regularized_cholesky(Y.T @ Y)
        return None if schur is None else (chol, Y, schur, H)

    def _solve(self, factor, rhs: np.ndarray) -> np.ndarray:
        """Δu with (Newton matrix) Δu = rhs on the ties. On the null space, one Cholesky solve. In the range space,
        the KKT system H Δx + V_r ν = rhs, V_rᵀΔx = 0: ν = S⁻¹ YᵀR⁻ᵀrhs, Δx = R⁻¹(R⁻ᵀrhs − Y ν), then Δx
        projected on null(E) so that every iterate ties its supports to rounding, however inexact the solve."""
        chol, Y, schur, H = factor
        if Y is None:
            return sla.cho_solve(chol, rhs, check_finite=False)
        (c, lower) = chol

        def once(b):
            z = sla.solve_triangular(c, b, trans="T", lower=lower, check_finite=False)
            z -= Y @ sla.cho_solve(schur, Y.T @ z, check_finite=False)
            return self.tie(sla.solve_triangular(c, z, lower=lower, check_finite=False))

        dx, last = once(rhs), np.inf
        for _ in range(REFINE):  # iterative refinement on the ties' null space: P(rhs − H Δx) → 0
            res = self.tie(rhs - H @ dx)
            size = np.linalg.norm(res)
            if not (size > 1e-15 * np.linalg.norm(rhs) and size < last):  # (solved, or no longer shrinking)
                break
            dx, last = dx + once(res), size
        return dx

    def _direction(self, factor, rd: np.ndarray, rp: np.ndarray, s: np.ndarray, lam: np.ndarray, rc: np.ndarray):
        """(Δu, Δs, Δλ) of the Newton system Q Δu − BᵀΔλ = −r_d, B Δu − Δs = −r_p, Λ Δs + S Δλ = r_c."""
        du = self._solve(factor, -rd + self.b_t((rc - lam * rp) / s))
        ds = self.margins(du) + rp
        dl = (rc - lam * ds) / s
        return du, ds, dl

    def solve(self, *, tol: float = 1e-10, deadline: float | None = None, progress: ProgressFn | None = None,
              X0: np.ndarray | None = None) -> SVMOutcome:
        """Iterate until the certified relative gap is ≤ ``tol`` (status "optimal"), the complementarity stalls
        ("stalled"), ``MAX_ITER`` ("max_iter") or ``deadline`` (a perf_counter value: "time_limit", no iteration
        begun that would end past it by the last one's time). The best certified point and dual point are returned
        (X None when no iterate had every margin positive)."""
        opt = self.opt
        best, best_dual = SVMOutcome(Status.MAX_ITER, mode="interior point"), [None]
        u, s, lam = self._start(X0)
        X, Bu = self._x(u), self.margins(u)
        M = len(s)
        mus, gaps, last = [], [np.inf, np.inf], 0.0
        for it in range(1, opt.MAX_ITER + 1):
            if deadline is not None and time.perf_counter() + last >= deadline:
                best.status = Status.TIME_LIMIT
                break
            tic = time.perf_counter()
            rd = self._reduce((self.n[:, None] * X).ravel()) - self.b_t(lam)
            rp = Bu - s - 1.0
            mu = float(s @ lam) / M
            H = self.hessian(lam / s)
            factor = self._factor(H)
            if factor is None:
                best.status = Status.STALLED
                best.reason = f"the interior-point matrix lost definiteness at μ = {mu:.2g}"
                break
            du, ds, dl = self._direction(factor, rd, rp, s, lam, -s * lam)
            alpha = min(_to_boundary(s, ds), _to_boundary(lam, dl))
            mu_aff = float((s + alpha * ds) @ (lam + alpha * dl)) / M
            sigma = (mu_aff / mu) ** 3
            du, ds, dl = self._direction(factor, rd, rp, s, lam, -s * lam + sigma * mu - ds * dl)
            alpha = min(1.0, opt.STEP_TO_BOUNDARY * min(_to_boundary(s, ds), _to_boundary(lam, dl)))
            u, s, lam = u + alpha * du, s + alpha * ds, lam + alpha * dl
            X = self._x(u)
            Bu = self._margins_of(X)
            quad = self._quad(X)
            if not (np.all(np.isfinite(u)) and float(lam.sum()) <= DIVERGED_RATIO * max(quad, 1e-300)):
                # no feasible point: the multipliers of an infeasible QP grow without bound (a Farkas direction)
                best.status = Status.STALLED
                best.reason = (f"the interior-point multipliers diverged (Σλ = {float(lam.sum()):.2g} against "
                               f"Σ n_g‖x_g‖² = {quad:.2g}): the data may not be NTP-separable")
                break
            best.iterations = it
            self._certify(u, X, Bu, lam, best, best_dual)
            last = time.perf_counter() - tic
            mus.append(float(s @ lam) / M)
            if progress is not None:
                progress(ProgressEvent("ipm", it, best.gap, {"mu": mus[-1], "step": alpha,
                                                             "infeasibility": float(np.max(np.abs(rp)))}))
            if best.gap <= tol:
                best.status = Status.OPTIMAL
                break
            if past(deadline):
                best.status = Status.TIME_LIMIT
                break
            if len(mus) > 5 and mus[-1] > opt.STALL * mus[-6] and best.X is not None and best.gap < 1e-3:
                best.status = Status.STALLED
                best.reason = f"the interior-point iterations stalled at μ = {mus[-1]:.2g} (gap {best.gap:.2g})"
                break
            own = float(s @ lam) / (0.5 * max(quad, 1e-300)) + 2.0 * float(np.max(np.abs(Bu - s - 1.0), initial=0.0))
            gaps.append(best.gap)
            if (best.X is not None and best.gap < 1e-3 and own < opt.CERTIFICATE_LAG * best.gap
                    and gaps[-1] > 0.5 * gaps[-3]):  # (a certificate that lags but still halves is following)
                best.status = Status.STALLED
                best.reason = (f"the interior-point iterates converged past their certificate (their own gap "
                               f"{own:.2g}, the certified {best.gap:.2g})")
                break
        self.last = (X, lam, Bu)  # the last iterate's rows, multipliers and margins (:meth:`finish`)
        best.rounds = best.iterations
        best.working_set = M
        best.dual_point = best_dual[0]
        if best.X is not None and best.dual_point is None:  # (a feasible point before any useful dual: D = 0)
            best.dual = max(best.dual, 0.0)
            best.dual_point = (self.sg, self.sj, np.zeros(len(self.sg)))
        return best


    # -- the exact finish -------------------------------------------------------------------------------------
    def _active_columns(self, pairs: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """(G r, len(pairs)): the off pairs' rows k_jᵀ(x_{f(j)} − x_g) over vec(X), as columns, times D^{-1/2}
        (``scale``)."""
        j = self.oj[pairs]
        return (_difference_rows(self.K, self.G, self.f[j], self.og[pairs], j) * scale).T

    def finish(self, best: SVMOutcome, deadline: float | None = None) -> bool:
        """A stalled solve finished exactly on its active set: the pairs A with λ > s at the last iterate
        (:attr:`last`) as equalities with the ties, min ½ Σ_g n_g‖x_g‖² s.t. V_rᵀx = 0, B_A x = 1 — its least-norm
        solution in the metric D = diag(n_g I) by a QR of (C D^{-1/2})ᵀ, C = [V_rᵀ; B_A], and its
        multipliers μ from D x = Cᵀμ. Pairs with μ < 0 leave A, pairs the solution violates (margin < 1 − 1e-9) join
        it, for at most ``FINISH_ROUNDS`` rounds. The QR is LAPACK's unpivoted one, updated between rounds by Givens
        rotations for the columns that leave and join (:func:`_qr_update`), where the columns have full rank; a
        pivoted QR on its first k columns, every round, where they do not. At a KKT point (μ_A ≥ 0, every margin
        ≥ 1 − 1e-9) its certificate (the point projected on the ties and divided by its smallest margin; the dual
        point of μ_A, :meth:`dual_point`) replaces ``best``'s where its gap is smaller. Returns whether it did.

        Why: the iterates' accuracy stops short of the optimum where the weights λ/s span 1e-12–1e12 (SmolLM2's
        states relaxed to 10 tokens stalled at gap 6.4e-8, the range space's Newton steps limited by H's conditioning),
        while the active set is already right there; a QR is backward stable whatever the weights were."""
        X, lam, Bu = self.last
        A = np.flatnonzero(lam > Bu - 1.0)
        G, r, rank = self.G, self.r, self._Vr.shape[1]
        budget = self.opt.FINISH_FLOPS_PER_ITERATION * iteration_flops(self.support, r)
        scale = 1.0 / np.sqrt(np.repeat(self.n, r))  # D^{-1/2} over vec(X)
        factor = None  # (Q, R) of the columns [ties, A in order] where they have full rank: updated, not redone
        for _ in range(self.opt.FINISH_ROUNDS):
            c = rank + len(A)
            if not len(A) or past(deadline) or (factor is None and 2.0 * G * r * c * c > budget):
                return False
            if factor is None:
                M = np.hstack([self._Vr * scale[:, None], self._active_columns(A, scale)])  # (C D^{-1/2})ᵀ, (G r, c)
                factor = _full_rank_qr(M)
            if factor is not None:  # least-norm y with Mᵀy = b: y = Q R⁻ᵀ b; multipliers μ = R⁻¹Qᵀy = R⁻¹ R⁻ᵀ b
                Q, R = factor
                z = sla.solve_triangular(R, np.r_[np.zeros(rank), np.ones(len(A))], trans="T", check_finite=False)
                y, mu = Q @ z, sla.solve_triangular(R, z, check_finite=False)
            else:  # rank-deficient (ties and pairs dependent): a pivoted QR, its first k columns, every round
                y, mu = _pivoted_least_norm(M, rank)
            x = y * scale
            x -= self._Vr @ (self._Vr.T @ x)  # the ties to rounding
            Xn = x.reshape(G, r)
            margins = self._margins_of(Xn)
            wrong, violated = mu[rank:] < 0, np.flatnonzero(margins < 1.0 - 1e-9)
            if not wrong.any() and not len(violated):
                lam_A = np.zeros(len(self.og))
                lam_A[A] = mu[rank:]
                scaled = self._scaled(Xn, margins)
                if scaled is None:
                    return False
                trial = SVMOutcome(best.status, *scaled)
                trial.dual, trial.dual_point = self.dual_point(Xn, lam_A)
                if not trial.gap < best.gap:
                    return False
                best.X, best.t, best.primal, best.dual, best.dual_point = (trial.X, trial.t, trial.primal, trial.dual,
                                                                           trial.dual_point)
                return True
            join = np.setdiff1d(violated, A)  # (none in A where the columns had full rank: those have margin 1)
            A = np.r_[A[~wrong], join]
            if factor is not None:  # the columns that leave (from the last) and those that join (at the end)
                factor = _qr_update(factor, rank + np.flatnonzero(wrong), self._active_columns(join, scale))
        return False


def _numerical_rank(diag: np.ndarray, shape: tuple[int, int]) -> int:
    """How many of ``diag`` (a triangular factor's diagonal or the singular values of a matrix of ``shape``) exceed
    max(shape)·eps times the largest in magnitude: the rank to working precision."""
    d = np.abs(diag)
    return int(np.sum(d > d.max(initial=0.0) * max(shape) * np.finfo(float).eps))


def _full_rank_qr(M: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The economic QR (Q, R) of M (n, c) without pivoting (LAPACK's blocked dgeqrf: several times a pivoted QR's
    speed), or None where M's c columns are not of full rank to working precision (:func:`_numerical_rank` of R's
    diagonal; also where c > n)."""
    Q, R = sla.qr(M, mode="economic", check_finite=False)
    return (Q, R) if _numerical_rank(np.diag(R), M.shape) == M.shape[1] else None


def _pivoted_least_norm(M: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(y, μ) for a rank-deficient M (n, c) whose first ``rank`` columns are the ties: by a pivoted QR, on its first
    k columns (k the numerical rank), y the least-norm solution of M_kᵀy = b (b: 0 on the ties, 1 on the pairs) and
    μ (c,) its multipliers (0 on the columns left out)."""
    c = M.shape[1]
    Q, R, P = sla.qr(M, mode="economic", pivoting=True, check_finite=False)
    k = _numerical_rank(np.diag(R), M.shape)
    b = np.r_[np.zeros(rank), np.ones(c - rank)][P[:k]]
    z = sla.solve_triangular(R[:k, :k], b, trans="T", check_finite=False)
    mu = np.zeros(c)
    mu[P[:k]] = sla.solve_triangular(R[:k, :k], z, check_finite=False)
    return Q[:, :k] @ z, mu


def _qr_update(factor: tuple[np.ndarray, np.ndarray], leave: np.ndarray, join: np.ndarray):
    """The economic QR of M with the columns ``leave`` (indices) deleted and the columns ``join`` (n, p) appended, by
    Givens updates (scipy's qr_delete / qr_insert, O(n c) a column against a new factorization's O(n c²)); None where
    a joining column lies in the span of the others to working precision (the caller factors afresh)."""
    Q, R = factor
    for i in np.sort(leave)[::-1]:
        Q, R = sla.qr_delete(Q, R, int(i), 1, "col", check_finite=False)
    if join.shape[1]:
        try:
            Q, R = sla.qr_insert(Q, R, join, R.shape[1], "col", rcond=max(Q.shape) * np.finfo(float).eps,
                                 check_finite=False)
        except np.linalg.LinAlgError:
            return None
    return Q, R


def tie_matrix(K: np.ndarray, G: int, groups: np.ndarray, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E (n_E, G r), f (m,)): the ties (6a) of the support pairs (``groups``, ``contexts``) over vec(X), X (G, r) the
    group rows, with t eliminated by each context's first support group f(j) (its smallest; −1 where a context has
    none): one row k_jᵀ(x_g − x_{f(j)}) = 0 per other support pair, in the order of (context, group)."""
    m, r = K.shape
    order = np.lexsort((groups, contexts))
    g, j = np.asarray(groups, np.int64)[order], np.asarray(contexts, np.int64)[order]
    first = np.r_[True, j[1:] != j[:-1]] if len(j) else np.zeros(0, bool)
    f = np.full(m, -1, dtype=np.int64)
    f[j[first]] = g[first]
    eg, ej = g[~first], j[~first]
    return _difference_rows(K, G, eg, f[ej], ej), f


def _difference_rows(K: np.ndarray, G: int, a: np.ndarray, b: np.ndarray, j: np.ndarray) -> np.ndarray:
    """(n, G r): row i is k_{j_i}ᵀ(x_{a_i} − x_{b_i}) over vec(X), X (G, r) the group rows: a tie (6a) where a_i and
    b_i both support context j_i, an off-support margin where a_i = f(j_i) and b_i is off its support."""
    r = K.shape[1]
    out = np.zeros((len(j), G * r))
    rows = np.arange(len(j))[:, None]
    out[rows, np.asarray(a)[:, None] * r + np.arange(r)] += K[j]
    out[rows, np.asarray(b)[:, None] * r + np.arange(r)] -= K[j]
    return out


def project_on_ties(K: np.ndarray, groups: np.ndarray, contexts: np.ndarray, X: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(X', t'): the group rows X (G, r) projected orthogonally onto the ties of the support pairs (``groups``,
    ``contexts``) — vec(X') = (I − Q Qᵀ) vec(X), Q an orthonormal basis of the rows of E (:func:`tie_matrix`, by a
    QR of Eᵀ with column pivoting for its rank) — and t'_j = k_jᵀx'_{f(j)} (0 where a context has no support pair).
    Exact to rounding, whatever the rank of the ties: 2 G r n_E² flops, n_E G r doubles."""
    G, r = X.shape
    E, f = tie_matrix(K, G, groups, contexts)
    x = np.asarray(X, dtype=np.float64).ravel().copy()
    if len(E):
        Q, R, _ = sla.qr(E.T, mode="economic", pivoting=True)
        Q = Q[:, :_numerical_rank(np.diag(R), E.shape)]
        x -= Q @ (Q.T @ x)
    Xp = x.reshape(G, r)
    has = f >= 0
    t = np.zeros(K.shape[0])
    t[has] = np.einsum("jk,jk->j", K[has], Xp[f[has]])
    return Xp, t


def _regularized_cholesky(H: np.ndarray):
    """cho_factor of H, or of H + δI with δ = 1e-14, 1e-12, ... 1e-8 times its largest diagonal entry where rounding has
    made it indefinite (late iterations: the weights λ/s span 1e-12 to 1e12); None if none of them factors. The
    interior-point direction need not be exact: each step is measured by the certificate, not by this solve."""
    try:
        return sla.cho_factor(H)
    except np.linalg.LinAlgError:
        pass
    top = float(np.max(np.diag(H), initial=1.0))
    for k in range(14, 7, -2):
        try:
            return sla.cho_factor(H + (10.0**-k * top) * np.eye(len(H)))
        except np.linalg.LinAlgError:
            continue
    return None


def _to_boundary(v: np.ndarray, dv: np.ndarray) -> float:
    """The largest α ≤ 1 with v + α dv ≥ 0 (v > 0)."""
    neg = dv < 0
    return min(1.0, float(np.min(-v[neg] / dv[neg], initial=np.inf)))


def _null_space_of(E: np.ndarray, basis: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(U, σ, V_r, N) of E (n × c): E = U diag(σ) V_rᵀ on its range (rank σ > 0 entries) and N (c, c − rank) an
    orthonormal basis of null(E), the identity where E has rank 0; N None when not ``basis`` (the range space: then
    no c × c factor is formed where n < c). Through a QR of E first where n > c (then only the c × c triangle's SVD: no
    n × n U)."""
    n, c = E.shape
    if n == 0:
        return np.zeros((0, 0)), np.zeros(0), np.zeros((c, 0)), np.eye(c) if basis else None
    if n > c:
        Qe, R = sla.qr(E, mode="economic")
        Ur, sv, Vt = sla.svd(R)
        U = Qe @ Ur
    else:
        U, sv, Vt = sla.svd(E, full_matrices=basis)
    rank = _numerical_rank(sv, E.shape)
    if not basis:
        return U[:, :rank], sv[:rank], Vt[:rank].T, None
    if rank == 0:  # (E = 0: every direction is free, and N = I lets SVMIPM.hessian skip the projection)
        return U[:, :0], sv[:0], Vt[:0].T, np.eye(c)
    return U[:, :rank], sv[:rank], Vt[:rank].T, Vt[rank:].T
