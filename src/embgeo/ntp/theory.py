"""Every theoretical object of the NTP implicit-bias paper, computed exactly in float64.

Paper: ``ntp-implicit-bias-neurips.txt`` (NeurIPS 2024 version; the short version's numbers
differ: Def. 3.1/3.2 there are Defs. 1/2 here). Equation numbers below are the NeurIPS ones.

Formulation (:mod:`embgeo.ntp.constraints`, :mod:`embgeo.ntp.solvers`): the constraints (4) and
(6) are written in *t-form* (one scalar t_j per context: x_zᵀk_j − t_j = log p̂_{j,z} on the
support, x_vᵀk_j − t_j ≤ −1 off it) over the coordinates K (m × r) of the contexts in their own
span, r = rank H̄. For fixed t everything splits by token, so:

* F (eq. 5), W* (Def. 1) and the projections onto F / F⊥ are one equality-constrained least-norm
  problem, reduced exactly to an m × m system in t (one small SVD per token, one Cholesky).
  Its dimension count gives dim F. Data that are not compatible get a *certificate*: multipliers
  λ with ⟨λ, log p̂⟩ = −1 that are orthogonal to every solution, so no W solves (4).
* Separability (Def. 2) and the NTP-SVM (Def. 3) only depend on the supports: tokens with the same
  support pattern are one group (a 50k vocabulary collapses to a few thousand rows). When
  rank H̄ = m the data are separable by Lemma 1 (certificate written down); when r < m a
  non-separable pair of tokens (two tokens tied on more than r contexts that span the space,
  split on another one) gives a one-entry Farkas certificate at once; otherwise an LP (small
  problems) or the NTP-SVM dual decides. The NTP-SVM dual is solved on a working set of the
  off-support constraints, checked by full passes over all logits and finished by an exact
  active-set solve accepted only as a KKT point. Every answer carries its certificate.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike
from scipy.special import log_softmax, logsumexp

from embgeo.core.validate import as_float_array, check_dense_size
from embgeo.errors import InputError, NotCompatibleError, ShapeError, SolverError
from embgeo.ntp.constraints import (
    Coordinates,
    SupportGroups,
    anchor_rows,
    coordinates,
    support_groups,
    token_pattern,
)
from embgeo.ntp.data import NTPData
from embgeo.ntp.solvers import (
    DENSE_DUAL_MAX,
    DENSE_T_MAX,
    FARKAS_RTOL,
    EqualitySolution,
    EqualitySystem,
    SVMDual,
    SVMOutcome,
    equality_system_bytes,
    farkas_scale,
    row_dots,
    scan_off_support,
    separability_lp,
)

#: Relative tolerance for accepting the log-odds equations (4) as solved.
COMPAT_RTOL = 1e-7
#: Tolerance on the margins of a separability / SVM certificate (target margin is 1).
MARGIN_ATOL = 1e-7


# -- units ---------------------------------------------------------------------------------

def unit_scale(data: NTPData) -> tuple[NTPData, float]:
    """``data`` with H̄ divided by s = 2^e, the power of two with max |h̄_ij| / s in [0.5, 1), and s.

    Every tolerance of the solvers is stated for embeddings of order one (margins of 1, rank thresholds,
    HiGHS's feasibility tolerances, Grams that must neither underflow nor overflow), so the theory objects
    are computed on the rescaled data and returned in the caller's units: W / s, margins · s, certificate
    norms ‖λ H̄‖ · s; logit residuals and relative gaps have no units. Dividing by a power of two is exact,
    so the verdicts are those of unit scale at every scale (H̄ · 1e-300 … 1e300). The copy shares probs.
    """
    top = float(np.max(np.abs(data.embeddings), initial=0.0))
    exponent = math.frexp(top)[1] if top > 0 else 0
    if exponent == 0:
        return data, 1.0
    unit = copy.copy(data)
    H = np.ldexp(data.embeddings, -exponent)
    H.setflags(write=False)
    unit.embeddings = H
    return unit, math.ldexp(1.0, exponent)


# -- loss, entropy, gradient (eq. 2) -------------------------------------------------------

def entropy(data: NTPData) -> float:
    """Empirical T-gram entropy 𝓗 = -Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log p̂_{j,z} (Sec. 2), in nats."""
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    return float(-np.sum(data.weights[rows] * P.data * np.log(P.data)))


def log_probs(data: NTPData, W: ArrayLike) -> np.ndarray:
    """log 𝕊(W h̄_j) for every context: array (m, V), computed with log-sum-exp."""
    W = _check_W(data, W)
    check_dense_size("logits", (data.m, data.V), "evaluate the loss on a subset of contexts")
    return log_softmax(data.embeddings @ W.T, axis=1)


def cross_entropy(data: NTPData, W: ArrayLike) -> float:
    """CE(W) = -Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log 𝕊_z(W h̄_j), eq. (2). W: (V, d)."""
    logq = log_probs(data, W)
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    return float(-np.sum(data.weights[rows] * P.data * logq[rows, P.indices]))


def kl_gap(data: NTPData, W: ArrayLike) -> float:
    """CE(W) - 𝓗 computed as Σ_j π̂_j KL(p̂_j ‖ 𝕊(W h̄_j)) (Sec. 2), never as a difference.

    Per context the KL splits exactly into an in-support part and an off-support part,

        KL_j = [log Σ_{z∈S} p̂_z e^{r_z} − Σ_{z∈S} p̂_z r_z] + log(1 + Σ_{v∉S} e^{ℓ_v − lse_S(ℓ)}),

    with ℓ the logits and r_z = (ℓ_z − ℓ_{z_j}) − log(p̂_z / p̂_{z_j}) the log-odds residuals of (4).
    The first bracket is evaluated as log1p(Σ p̂ expm1(r)) − Σ p̂ r (second order in r), the second
    with log1p, so the result keeps its relative precision when the gap is far below the rounding
    of 𝓗 (e.g. 1e-17 at W* + γ W^mm), where CE − 𝓗 or a term-by-term sum would be rounding noise.
    """
    W = _check_W(data, W)
    check_dense_size("logits", (data.m, data.V), "evaluate the loss on a subset of contexts")
    P = data.probs
    ctx = np.repeat(np.arange(data.m), data.support_sizes)
    Z = data.embeddings @ W.T  # (m, V)
    Zrel = Z - Z[np.arange(data.m), data.anchors][:, None]  # logits relative to the anchor
    p_anchor = P.max(axis=1).toarray().ravel()
    r = Zrel[ctx, P.indices] - (np.log(P.data) - np.log(p_anchor[ctx]))
    # log Σ_S p̂ e^r: as log1p(Σ p̂ expm1(r)) for the precision near W*, shifted by max r where r is
    # large (far from W*, e.g. a diverging run) so that nothing overflows.
    rmax = np.maximum.reduceat(r, P.indptr[:-1])  # per context (CSR rows, every support non-empty)
    far = rmax > 1.0
    with np.errstate(over="ignore"):
        s1 = np.bincount(ctx, weights=P.data * np.expm1(np.minimum(r, 1.0)), minlength=data.m)
    log_in = np.log1p(s1)
    if far.any():
        shifted = np.bincount(ctx, weights=P.data * np.exp(r - rmax[ctx]), minlength=data.m)
        log_in[far] = rmax[far] + np.log(shifted[far])
    s2 = np.bincount(ctx, weights=P.data * r, minlength=data.m)
    in_support = np.maximum(log_in - s2, 0.0)  # a KL between two distributions on S_j: ≥ 0
    # lse_S(ℓ) − ℓ_anchor = log Σ_S e^{Zrel} = log(Σ p̂ e^r / p̂_anchor) = log1p(s1) − log p̂_anchor
    lse_in = log_in - np.log(p_anchor)
    off = np.ones((data.m, data.V), dtype=bool)
    off[ctx, P.indices] = False
    X = np.where(off, Zrel - lse_in[:, None], -np.inf)
    with np.errstate(divide="ignore"):
        off_support = np.logaddexp(0.0, logsumexp(X, axis=1))  # log(1 + Σ_off e^x), exact for tiny sums
    return float(np.sum(data.weights * (in_support + off_support)))


def gradient(data: NTPData, W: ArrayLike) -> np.ndarray:
    """∇CE(W) = Σ_j π̂_j (𝕊(W h̄_j) - p̂_j) h̄_jᵀ, shape (V, d) (simplified form of eq. 24)."""
    R = np.exp(log_probs(data, W))
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    R[rows, P.indices] -= P.data
    return (R * data.weights[:, None]).T @ data.embeddings


def smoothness(data: NTPData) -> float:
    """A smoothness constant of CE: L = ½ λ_max(Σ_j π̂_j h̄_j h̄_jᵀ) (digest §8; softmax Hessian ≤ ½ I).

    GD with step η ≤ 1/(2L) satisfies the paper's step condition (Lemma 3); η < 2/L still
    decreases the loss monotonically.
    """
    H = data.embeddings
    Hw = H * np.sqrt(data.weights)[:, None]
    small = Hw @ Hw.T if data.m <= data.d else Hw.T @ Hw
    return 0.5 * float(np.linalg.eigvalsh(small)[-1])



# -- the data subspace F (eq. 5) ------------------------------------------------------------

class Subspace:
    """The data subspace F = span{(e_z − e_z') h̄_jᵀ : z ≠ z' ∈ S_j} of eq. (5) and its complement.

    F⊥ is the set of W whose in-support logits are equal within every context, so projecting onto
    F⊥ is the t-form equality problem with right-hand side "minus the logits" (one group per
    token, :class:`~embgeo.ntp.solvers.EqualitySystem`); it is factored on first use and reused.

    Attributes
    ----------
    dim : int
        dim F = Σ_j S_j − m − dim{λ on the supports, balanced per context, λ_v ⟂ range K_v for
        every token}: Σ_j S_j − m whenever each token's contexts are linearly independent (always
        when rank H̄ = m), less when a token follows more contexts than their span holds.
    ambient_dim : int
        V · d.
    coords : :class:`~embgeo.ntp.constraints.Coordinates` of the contexts in unit scale (H̄ / scale).
    scale : float
        The power of two H̄ is divided by (:func:`unit_scale`); projections do not depend on it.
    """

    def __init__(self, data: NTPData):
        self.data = data
        self._unit, self.scale = unit_scale(data)
        self.coords = coordinates(self._unit.embeddings)
        tok, ctx, logp = token_pattern(data)
        # A context with one next token has no equation in (4) and no generator of F: its pair (v, j) only
        # defines t_j = x_vᵀk_j, a free variable. Dropping those pairs is exact and keeps a frequent
        # token's group from outgrowing r (which would make the t-system rank-deficient and dense).
        self.contexts = np.flatnonzero(data.support_sizes >= 2)  # the contexts that constrain F
        keep = data.support_sizes[ctx] >= 2
        self._tok, self._ctx, self._logp = tok[keep], ctx[keep], logp[keep]
        self.tokens = np.unique(self._tok)  # the tokens in some support of ≥ 2; the others have zero rows in F
        self._grp = np.searchsorted(self.tokens, self._tok)
        self.ambient_dim = data.V * data.d

    @cached_property
    def system(self) -> EqualitySystem | None:
        """The factored equality problem on the pairs of the contexts with ≥ 2 next tokens (one group per token,
        weights 1); None when no context has two (then F = {0})."""
        if self.contexts.size == 0:
            return None
        local = np.searchsorted(self.contexts, self._ctx)
        K = self.coords.K[self.contexts]
        # The m × m Gram saves the per-token Gram blocks' products only when r = m (d ≥ m); with r < m they cost
        # no more than gathering from it, and the Gram and its copy on the kept contexts would be 2 m² doubles.
        gram = _gram(self.coords) if self.coords.rank == self.data.m else None
        if gram is not None and self.contexts.size < self.data.m:
            gram = gram[np.ix_(self.contexts, self.contexts)]
        return EqualitySystem(K, self._grp, local, np.ones(len(self.tokens)), gram)

    def system_bytes(self) -> float:
        """Bytes :attr:`system` allocates (:func:`~embgeo.ntp.solvers.equality_system_bytes` on the kept pairs,
        plus the Gram's copy on the kept contexts when r = m), before building it. O(Σ_j S_j)."""
        if self.contexts.size == 0:
            return 0.0
        q = np.bincount(self._grp, minlength=len(self.tokens))
        r, m = self.coords.rank, self.contexts.size
        touched = np.unique(self._ctx[q[self._grp] > r]).size
        gram_copy = 8.0 * m * m if r == self.data.m and m < self.data.m else 0.0
        return equality_system_bytes(q, r, m, touched) + gram_copy

    def dim_bounds(self) -> tuple[int, int]:
        """(low, high) with low ≤ dim F ≤ high, from each token's rank alone (no equality system; equal when no
        token's contexts are linearly dependent).

        dim F = Σ_v rank K_v − m' + rank M (K_v the coordinates of token v's contexts among the m' contexts with
        ≥ 2 next tokens, M = Σ_v E_vᵀ (I − P_v) E_v the Gram of the constraints that the dependent tokens put on
        t; see :mod:`embgeo.ntp.solvers`). rank M is at least the largest single term, q_v − rank K_v, and at
        most both Σ_v (q_v − rank K_v) and m_t − rank K[touched] (every t = K x on the m_t touched contexts is
        in its null space). Cost: one SVD of each token's contexts, Σ_v q_v min(q_v, r)².
        """
        if self.contexts.size == 0:
            return 0, 0
        K, grp, ctx = self.coords.K, self._grp, self._ctx  # pairs sorted by token, then context
        q = np.bincount(grp, minlength=len(self.tokens))
        start = np.concatenate([[0], np.cumsum(q)])
        ranks = np.empty(len(q), dtype=np.int64)
        for size in np.unique(q):
            groups = np.flatnonzero(q == size)
            s = np.linalg.svd(K[ctx[start[groups][:, None] + np.arange(size)]], compute_uv=False)
            ranks[groups] = np.sum(s > s[:, :1] * max(size, K.shape[1]) * np.finfo(float).eps, axis=1)
        null = q - ranks  # Σ of these: the constraints' count
        base = int(ranks.sum()) - self.contexts.size
        if not null.any():
            return base, base
        touched = np.unique(ctx[null[grp] > 0])
        high = min(int(null.sum()), touched.size - int(np.linalg.matrix_rank(K[touched])))
        return max(base + int(null.max()), 0), base + high  # dim F ≥ 0 whatever the weak lower bound says

    @cached_property
    def dim(self) -> int:
        s = self.system
        if s is None:
            return 0
        return int(len(self._tok) - self.contexts.size - (s.n_constraints - getattr(s, "constraint_rank", 0)))

    def _solve(self, c: np.ndarray, check: bool = True) -> EqualitySolution:
        """The equality problem for right-hand sides c on the kept pairs (the zero solution when F = {0})."""
        if self.system is None:
            zero = np.zeros(0)
            return EqualitySolution(np.zeros((0, self.coords.rank)), zero, zero, True, {})
        return self.system.solve(c, check=check)

    @property
    def perp_dim(self) -> int:
        """dim F⊥ = V·d − dim F."""
        return self.ambient_dim - self.dim

    def _token_rows(self, X: np.ndarray) -> np.ndarray:
        """(V, r) with the rows of the support tokens set from X (|tokens|, r), zeros elsewhere."""
        check_dense_size("a (V, r) matrix", (self.data.V, self.coords.rank))
        out = np.zeros((self.data.V, self.coords.rank))
        out[self.tokens] = X
        return out

    def project(self, W: ArrayLike) -> np.ndarray:
        """P_F(W): orthogonal projection of W (V, d) onto F; O(Σ_j S_j · r + m²) after the factorization."""
        W = _check_W(self.data, W)
        X0 = self.coords.to_coords(W)
        sol = self._solve(-row_dots(X0, self.coords.K, self._tok, self._ctx))
        # P_⊥(W) = W + Δ with Δ the least-norm change that ties the in-support logits; P_F(W) = −Δ.
        return -self.coords.to_w(self._token_rows(sol.X))

    def project_perp(self, W: ArrayLike) -> np.ndarray:
        """P_⊥(W) = W − P_F(W): orthogonal projection onto F⊥."""
        W = _check_W(self.data, W)
        return W - self.project(W)

    def basis(self) -> np.ndarray:
        """Orthonormal basis of F as an array (dim F, V, d), from an SVD of the anchor rows (small data)."""
        V, d = self.data.V, self.data.d
        ctx, a, z, _ = anchor_rows(self.data)
        check_dense_size("anchor rows of F", (len(ctx), V * d), "use project() instead of a dense basis")
        A = np.zeros((len(ctx), V, d))
        A[np.arange(len(ctx)), a] += self._unit.embeddings[ctx]  # F depends on span H̄ only: unit scale
        A[np.arange(len(ctx)), z] -= self._unit.embeddings[ctx]
        if self.dim == 0:
            return np.zeros((0, V, d))
        _, _, Vt = np.linalg.svd(A.reshape(len(ctx), V * d), full_matrices=False)
        return Vt[:self.dim].reshape(self.dim, V, d)


def _gram(coords: Coordinates) -> np.ndarray | None:
    """The m × m Gram of the contexts when it is small enough to keep (m ≤ DENSE_T_MAX)."""
    return coords.gram if coords.K.shape[0] <= DENSE_T_MAX else None


def subspace(data: NTPData) -> Subspace:
    """The data subspace F of eq. (5), with projections onto F and F⊥ and its dimension."""
    return Subspace(data)


def estimate_memory(data: NTPData) -> dict:
    """Bytes the theory objects of ``data`` need at most, by part, before anything is solved.

    ``coordinates`` (K, and the m × m Gram when d > m), ``equality_system`` (the exact path of W*
    and the projections: per-token factors and the m × m t-system, see
    :func:`~embgeo.ntp.solvers.equality_system_bytes`; above the memory budget it is refused and
    only certificates can decide), ``svm_dual`` (about ten (G, m) arrays for the dense dual, else
    the working set), ``outputs`` (W*, W^mm and the separability certificate, V × d each) and
    ``total``. Cost O(Σ_j S_j + V): it only counts.
    """
    m, V, d = data.m, data.V, data.d
    r = min(m, d)
    J = np.bincount(data.probs.indices, minlength=V)  # |J_v| per token
    multi = np.flatnonzero(data.support_sizes >= 2)  # the contexts of W*'s and F's equality system (Subspace)
    kept = data.probs[multi]
    J_multi = np.bincount(kept.indices, minlength=V)
    heavy_rows = np.repeat(np.arange(len(multi)), np.diff(kept.indptr))[J_multi[kept.indices] > r]
    touched = np.unique(heavy_rows).size  # the contexts of tokens in more of them than r (their constraints' Gram)
    groups = support_groups(data)
    G = groups.n_groups
    part = {
        "coordinates": 8 * (m * r + (m * m if d > m else 0)),
        "equality_system": equality_system_bytes(J_multi, r, len(multi), touched)
        + (8 * len(multi) ** 2 if d >= m and len(multi) < m else 0),
        "svm_dual": 8 * (10 * G * m if G * m <= DENSE_DUAL_MAX else (float(J.sum()) + 20 * m) * (r + 8)),
        "outputs": 8 * 3 * V * d,
    }
    part = {k: int(v) for k, v in part.items()}
    part["total"] = int(sum(part.values()))
    return part


# -- compatibility and W* (Def. 1, eq. 4) ----------------------------------------------------

@dataclass
class Compatibility:
    """Result of :func:`is_compatible`; truthy iff the log-odds equations (4) are solvable.

    Attributes
    ----------
    compatible : bool
    W : (V, d) array or None
        W* ∈ F, the minimum-norm solution of (4), when compatible.
    residual : float
        max over the anchor rows of |(e_{z_j} − e_z)ᵀ W h̄_j − log(p̂_{j,z_j}/p̂_{j,z})| at W (at the
        least-squares point when not compatible; when a pair certificate decided, a lower bound on
        this maximum that holds for every W).
    tolerance : float
        The threshold ``residual`` was held to: COMPAT_RTOL · max(1, max |log-odds|).
    certificate : scipy.sparse.csr_matrix (m, V) or None
        When not compatible: weights λ on the support pairs, balanced per context, with
        ⟨λ, log p̂⟩ = −1 and λ H̄ ≈ 0 (per token). Any W solving (4) would satisfy
        ⟨λ, W H̄ᵀ − t − log p̂⟩ = 0, i.e. −⟨λ H̄, W⟩ = 1, so ‖W‖ ≥ 1/‖λ H̄‖.
    certificate_norm : float or None
        ‖λ H̄‖ (the bound above is 1/certificate_norm).
    method : str
    """

    compatible: bool
    W: np.ndarray | None
    residual: float
    tolerance: float
    certificate: sp.csr_matrix | None = None
    certificate_norm: float | None = None
    method: str = ""

    def __bool__(self) -> bool:
        return self.compatible


def is_compatible(data: NTPData, subspace_: Subspace | None = None) -> Compatibility:
    """Check NTP_H-compatibility (Def. 1): does some W satisfy eq. (4)? Returns W* when it does.

    When rank H̄ < m, two tokens tied on more contexts than their span holds usually make (4)
    overdetermined: such a pair is looked for first (O(N) plus one QR per candidate) and its
    least-squares residual is the certificate. Otherwise the equality problem in t-form is solved
    exactly; its constraint residual decides and gives the certificate. Compatible iff the anchor
    residual of (4) at the solution is ≤ ``COMPAT_RTOL · max(1, max |log-odds|)``.
    """
    F = subspace_ or Subspace(data)
    *_, b = anchor_rows(data)
    tol = COMPAT_RTOL * max(1.0, float(np.max(np.abs(b), initial=0.0)))
    if F.coords.rank < data.m:
        pair = _pair_compatibility_certificate(data, F, tol)
        if pair is not None:
            return Compatibility(False, None, *pair[:1], tol, *pair[1:], method="pair of tokens tied on more "
                                 "contexts than their span (least-squares residual)")
    sol = F._solve(F._logp, check=False)  # the anchor residual below is the certificate
    residual = _anchor_residual(data, F, sol.X)
    if residual <= tol:
        return Compatibility(True, F.coords.to_w(F._token_rows(sol.X)) / F.scale, residual, tol,
                             method="t-form equality solve")
    if sol.certificate is None:
        raise SolverError(f"is_compatible: the residual of (4) is {residual:.3g} > {tol:.3g} but the equality "
                          "solve found no inconsistency; the embeddings are too ill-conditioned to decide")
    cert, norm = _token_certificate(data, F, sol.certificate)
    return Compatibility(False, None, residual, tol, cert, norm, method="t-form equality solve (inconsistent)")


def _anchor_residual(data: NTPData, F: Subspace, X: np.ndarray) -> float:
    """max |(x_{z_j} − x_z)ᵀ k_j − log(p̂_{j,z_j}/p̂_{j,z})| over the anchor rows; X has one row per support token."""
    ctx, a, z, b = anchor_rows(data)
    row = np.searchsorted(F.tokens, np.concatenate([a, z]))
    both = row_dots(X, F.coords.K, row, np.concatenate([ctx, ctx]))
    return float(np.max(np.abs(both[:len(ctx)] - both[len(ctx):] - b), initial=0.0))


def _token_certificate(data: NTPData, F: Subspace, lam: np.ndarray) -> tuple[sp.csr_matrix, float]:
    """λ on the support pairs as a sparse (m, V) matrix, and ‖λ H̄‖ computed per token."""
    A = sp.csr_matrix((lam, (F._grp, F._ctx)), shape=(len(F.tokens), data.m))
    norm = float(np.linalg.norm(A @ F.coords.K)) * F.scale  # ‖λ H̄‖ in the caller's units
    return sp.csr_matrix((lam, (F._ctx, F._tok)), shape=(data.m, data.V)), norm


def _pair_compatibility_certificate(data: NTPData, F: Subspace, tol: float):
    """Two tokens u, v in the supports of the same contexts J, |J| > r: (4) asks
    (x_u − x_v)ᵀk_j = log(p̂_{j,u}/p̂_{j,v}) on J, overdetermined. If the right-hand side leaves
    range K_J by y ≠ 0, λ = ∓y/‖y‖² on (u, J), (v, J) is a certificate (balanced, ⟂ K_J, ⟨λ, log p̂⟩ = −1).

    Every W then has ‖pair residuals on J‖₂ ≥ ‖y‖, so some pair equation is off by ≥ ‖y‖/√|J| and,
    as a pair equation is the difference of two anchor equations, some anchor residual of (4) is
    ≥ ‖y‖/(2√|J|): returned as the residual, and the certificate is used only if that bound
    exceeds ``tol``. Returns (residual bound, certificate, certificate norm) or None.
    """
    K, r = F.coords.K, F.coords.rank
    Pt = data.probs.T.tocsr()
    scale = farkas_scale(K)
    for u, v, J in _heavy_pairs(Pt, r):
        lu = np.log(np.asarray(Pt[u, J].todense()).ravel())
        lv = np.log(np.asarray(Pt[v, J].todense()).ravel())
        y = _out_of_range(K[J], lu - lv)
        yy = float(y @ y)
        bound = float(np.sqrt(yy / len(J)) / 2)
        if not bound > tol:
            continue
        lam = np.concatenate([-y, y]) / yy
        rows, cols = np.concatenate([J, J]), np.concatenate([np.full(len(J), u), np.full(len(J), v)])
        cert = sp.csr_matrix((lam, (rows, cols)), shape=(data.m, data.V))
        norm = float(np.sqrt(2.0) * np.linalg.norm(y @ K[J]) / yy)
        if norm * max(1.0, float(np.max(np.abs(lu - lv)))) <= FARKAS_RTOL * scale:
            return bound, cert, norm * F.scale  # ‖λ H̄‖ in the caller's units
    return None


def _out_of_range(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """b − Π_{range A} b via a thin SVD of A (rank threshold of numpy.linalg.matrix_rank)."""
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    U = U[:, s > (s[0] if s.size else 0.0) * max(A.shape) * np.finfo(float).eps]
    y = b - U @ (U.T @ b)
    return y - U @ (U.T @ y)  # a second pass removes the rounding left in range A


def _heavy_pairs(Pt: sp.csr_matrix, r: int, limit: int = 50):
    """Pairs of rows of Pt (tokens or groups × contexts) sharing more than r columns, most shared
    first (at most ``limit``), with the shared columns. Only rows with more than r columns count."""
    sizes = np.diff(Pt.indptr)
    heavy = np.flatnonzero(sizes > r)
    if heavy.size < 2:
        return
    B = Pt[heavy]
    B.data = np.ones_like(B.data)  # counts of shared columns, whatever the entries
    co = sp.triu(B @ B.T, k=1).tocoo()
    keep = co.data > r
    order = np.argsort(-co.data[keep], kind="stable")[:limit]
    for a, b in zip(co.row[keep][order], co.col[keep][order], strict=True):
        u, v = int(heavy[a]), int(heavy[b])
        J = np.intersect1d(Pt.indices[Pt.indptr[u]:Pt.indptr[u + 1]], Pt.indices[Pt.indptr[v]:Pt.indptr[v + 1]])
        yield u, v, J


def w_star(data: NTPData, subspace_: Subspace | None = None) -> np.ndarray:
    """W* ∈ F (V, d): the unique solution of the log-odds equations (4) inside F (Def. 1, fn. 6).

    Raises :class:`NotCompatibleError` when (4) has no solution.
    """
    res = is_compatible(data, subspace_)
    if not res:
        raise NotCompatibleError(_not_compatible_message(res))
    return res.W


def _not_compatible_message(res: Compatibility) -> str:
    how = "every W leaves a residual ≥" if res.method.startswith("pair") else "the least-squares residual is"
    return (f"the data are not NTP_H-compatible (Def. 1): the log-odds equations (4) have no solution ({how} "
            f"{res.residual:.3g} > {res.tolerance:.3g}; {res.method}), so W* does not exist")


# -- separability (Def. 2, eq. 6) ------------------------------------------------------------

@dataclass
class Separability:
    """Result of :func:`is_separable`; truthy iff the data are NTP-separable (Def. 2).

    Attributes
    ----------
    separable : bool
    W : (V, d) array or None
        A certificate W^d ∈ F⊥ with every (6b) margin ≥ 1 (checked on all constraints), when separable.
    farkas : scipy.sparse.csr_matrix (m, V) or None
        When not separable: weights μ ≥ 0 on off-support pairs (j, v ∉ S_j), summing to 1.
    certificate : scipy.sparse.csr_matrix (m, V) or None
        The complete Farkas matrix Ψ: −μ off the supports plus balancing entries on them, every
        column summing to 0, with Ψᵀ H̄ ≈ 0 (per token: Σ_j Ψ_{j,v} h̄_j ≈ 0). For any W ∈ F⊥ with all
        margins ≥ 1, 0 ≈ ⟨ΨᵀH̄, W⟩ = Σ μ_{j,v} · margin_{j,v} ≥ 1: the data's NTP-margin is at most
        ``residuals["perp_norm"]`` = ‖ΨᵀH̄‖ ≥ ‖P_⊥(Σ μ_{j,v}(e_{z_j} − e_v) h̄_jᵀ)‖.
    residuals : dict
        For W: ``min_margin`` and ``equality`` (max |A_eq W|); for the Farkas matrix: ``perp_norm``.
    method : str
    """

    separable: bool
    W: np.ndarray | None
    farkas: sp.csr_matrix | None
    residuals: dict
    method: str
    certificate: sp.csr_matrix | None = None

    def __bool__(self) -> bool:
        return self.separable


SEPARABILITY_METHODS = ("auto", "dual", "lp")
#: Up to this many nonzeros in the separability LP, "auto" asks HiGHS first.
LP_SMALL_NNZ = 100_000


@dataclass
class _Problem:
    """What the separability and SVM solvers share for one dataset."""

    data: NTPData  # in unit scale (:func:`unit_scale`): H̄ / scale
    coords: Coordinates
    groups: SupportGroups
    scale: float = 1.0

    @property
    def K(self) -> np.ndarray:
        return self.coords.K

    def token_w(self, Xg: np.ndarray) -> np.ndarray:
        """W (V, d) in the caller's units from group rows (G, r) in unit scale."""
        return self.caller_w(self.groups.expand(Xg))

    def caller_w(self, X: np.ndarray) -> np.ndarray:
        """W (V, d) in the caller's units from token rows (V, r) in unit scale (logits X Kᵀ equal W H̄ᵀ)."""
        check_dense_size("W (V, d)", (self.data.V, self.data.d))
        return self.coords.to_w(X) / self.scale


def _problem(data: NTPData, subspace_: Subspace | None) -> _Problem:
    if np.all(data.support_sizes == data.V):
        raise InputError("probs: every context has full support (S_j = V for all j), so there are no "
                         "separability constraints (6b) and W^mm is undefined; the paper assumes some S_j < V")
    unit, scale = unit_scale(data)
    coords = subspace_.coords if subspace_ is not None else coordinates(unit.embeddings)
    return _Problem(unit, coords, support_groups(data), scale)


def is_separable(data: NTPData, subspace_: Subspace | None = None, *, method: str = "auto",
                 max_iter: int = 20_000, max_seconds: float | None = None,
                 progress: Callable[[int, dict], object] | None = None,
                 candidate: ArrayLike | None = None) -> Separability:
    """Check NTP-separability (Def. 2): ∃ W with (6a) A_eq(W) = 0 and (6b) A_in(W) ≥ 1?

    * rank H̄ = m (any method): separable (Lemma 1's argument, valid for d ≥ m): the logits equal
      to 1 on the supports and 0 elsewhere are reached by X = Z K⁻ᵀ; checked on every constraint.
    * rank H̄ = r < m: first a *pair certificate* — two token groups u, v in the supports of more
      than r common contexts whose embeddings span R^r must have equal rows (their logits are tied
      there), so a context i with u ∈ S_i, v ∉ S_i cannot give v a margin: Ψ = ±(e_i − Σ β_j e_j)
      with k_i = Σ_j β_j k_j is a Farkas matrix. Cheap, and it decides real text with d ≪ m.
      Then a *pair LP* (:func:`_pair_lp_farkas`) on the largest groups: any separator makes
      u = x_a − x_b an r-dimensional separator of a's contexts from b's (tied where both follow),
      whose infeasibility is an LP of r + 1 rows; its Farkas weights are a Farkas matrix of the
      whole problem. It decides real text whose tokens share few contexts (V in the thousands)
      in milliseconds per pair, within ``max_seconds``.
    * ``method="lp"``: the LP max s s.t. (6a), x_gᵀk_j − t_j + s ≤ 0 off the supports, s ≤ 1, over
      token groups, solved by HiGHS; s* = 1 separable, s* = 0 not (its dual values give μ).
    * ``method="dual"``: the NTP-SVM dual on a working set (:class:`~embgeo.ntp.solvers.SVMDual`)
      until a point separates every constraint or a Farkas matrix appears; at most ``max_iter``
      iterations and ``max_seconds`` seconds (then :class:`SolverError`).
    * ``method="auto"``: the closed form / pair certificate above when they decide, else "lp" when
      the LP has at most ``LP_SMALL_NNZ`` nonzeros, else "dual". An explicit "lp" or "dual" skips
      the shortcuts (an independent check of Lemma 1, e.g.).
    * ``candidate`` (V, d), with "auto" only: a W to try first, e.g. a trained decoder. P_⊥(W) ties
      every support exactly; if its smallest (6b) margin γ is > 0, P_⊥(W)/γ is the certificate
      (O(projection + m V r)). Otherwise the routes above decide as without it.
    """
    if method not in SEPARABILITY_METHODS:
        raise InputError(f"method: expected one of {SEPARABILITY_METHODS}, got {method!r}")
    if candidate is not None and method != "auto":
        raise InputError(f"candidate: only used with method='auto' (an explicit method={method!r} is the independent "
                         "route), got both")
    if candidate is not None:
        candidate = _check_W(data, candidate)
    pb = _problem(data, subspace_)
    if candidate is not None:
        sep = _separable_from_candidate(pb, candidate)
        if sep is not None:
            return sep
    if method == "auto":
        start = time.perf_counter()
        sep = _decide_cheaply(pb, max_seconds)
        if sep is not None:
            return sep
        method = "lp" if _lp_nnz(pb) <= LP_SMALL_NNZ else "dual"
        if max_seconds is not None:
            max_seconds = max(max_seconds - (time.perf_counter() - start), 1e-3)
    if method == "lp":
        return _separability_by_lp(pb)
    solver = SVMDual(pb.K, pb.groups.pattern, pb.groups.size, _gram(pb.coords))
    out = solver.solve(tol=1e-12, max_iter=max_iter, separate_only=True, max_seconds=max_seconds, progress=progress)
    if out.status == "infeasible":
        return _farkas_result(pb, out.farkas, "NTP-SVM dual: Farkas direction")
    if out.X is None:
        raise SolverError(f"is_separable: the dual iterations neither separated nor found a Farkas matrix "
                          f"({out.status} after {out.iterations} iterations); use method='lp' or allow more time")
    return _separable_result(pb, out.X, out.t, "NTP-SVM dual: separating point")


def _separable_from_candidate(pb: _Problem, W: np.ndarray) -> Separability | None:
    """P_⊥(W)/γ when γ, the smallest (6b) margin of P_⊥(W), is > 0 and its (6a) ties are exact; else None.

    Tokens are their own groups here (the rows of a given W need not be equal within a group). P_⊥ in
    coordinates is the least change of the rows that ties every support — the unweighted
    :class:`~embgeo.ntp.svm_alm.TieProjection` (F⊥ is the set of W whose supports tie): no equality
    system, which at m = 100,000 would have needed 9 GiB for the frequent tokens' contexts."""
    from embgeo.ntp.svm_alm import TieProjection

    data = pb.data
    coo = data.probs.tocoo()
    X, t, _ = TieProjection(pb.K, coo.col.astype(np.int64), coo.row.astype(np.int64),
                            np.ones(data.V)).project(pb.coords.to_coords(W))  # (V, r), t: each context's tie
    # the CSR arrays of probs (m, V) read as CSC are its transpose: column j lists the tokens of S_j
    support = sp.csc_matrix((np.ones(data.probs.nnz), data.probs.indices, data.probs.indptr), shape=(data.V, data.m))
    gamma = scan_off_support(X, t, pb.K, support).min_margin
    if not gamma > 0:
        return None
    X, t = X / gamma, t / gamma
    eq = float(np.max(np.abs(row_dots(X, pb.K, coo.col, coo.row) - t[coo.row]), initial=0.0))
    if eq > MARGIN_ATOL:
        return None  # the projection's rounding is not small against the margin: decide otherwise
    return Separability(True, pb.caller_w(X), None, {"min_margin": 1.0, "equality": eq},
                        "the given candidate projected onto F⊥, scaled to margin 1")


def _decide_cheaply(pb: _Problem, max_seconds: float | None = None) -> Separability | None:
    """Lemma 1's closed form when rank H̄ = m; a pair certificate or a pair LP when r < m; else None."""
    if pb.coords.rank == pb.data.m:
        Z = pb.groups.pattern.toarray()  # (G, m): logit 1 on the supports, 0 off them
        X = pb.coords.solve_logits(Z)  # X Kᵀ = Z
        sep = _separable_result(pb, X, np.ones(pb.data.m), "closed form (rank H = m, Lemma 1)")
        if sep and sep.residuals["equality"] <= MARGIN_ATOL:
            return sep
        return None  # K too ill-conditioned for the closed form: decide numerically
    pair = _pair_farkas(pb)
    if pair is not None:
        return _farkas_result(pb, pair, "pair of token groups tied on more contexts than their span")
    pair = _pair_lp_farkas(pb, max_seconds=max_seconds)
    if pair is not None:
        return _farkas_result(pb, pair, "pair of token groups whose contexts no direction separates (pair LP)")
    return None


#: The pair LP tries pairs among this many largest groups (most contexts), largest pairs first ...
PAIR_LP_GROUPS = 40
#: ... and at most this many pairs (each an LP with r + 1 rows and |J_a ∪ J_b| columns) ...
PAIR_LP_MAX_PAIRS = 200
#: ... within this many seconds in all (each LP gets what is left as HiGHS's time limit): at m = 100,000
#: the pair of the two most frequent groups alone is an LP in tens of thousands of columns, and an
#: unbounded attempt held ntp_svm past its max_seconds for minutes before its own solver started.
PAIR_LP_SECONDS = 20.0


def _pair_lp_farkas(pb: _Problem, max_pairs: int | None = None, max_seconds: float | None = None):
    """(grp, ctx, Ψ, perp) from two token groups a, b whose contexts admit no separating direction, or None.

    A separator of Def. 2 gives u = x_a − x_b with uᵀk_j ≥ 1 on P = J_a ∖ J_b (a in the support, b not),
    uᵀk_j ≤ −1 on N = J_b ∖ J_a and uᵀk_j = 0 on E = J_a ∩ J_b (tied in the support). If this system in
    R^r has no solution, Farkas' lemma gives λ ≥ 0 on P, μ ≥ 0 on N, ν on E with
    Σ_P λ_j k_j − Σ_N μ_j k_j + Σ_E ν_j k_j = 0 and Σλ + Σμ = 1, found by HiGHS as a vertex of that LP
    (at most r + 1 nonzeros) and then re-solved exactly on its support. Ψ = (λ, −λ) on P for (a, b),
    (−μ, μ) on N, (ν, −ν) on E balances every context, is ≤ 0 off the supports with Σ_off Ψ = −1, and
    Σ_j Ψ_{g,j} k_j = ±ρ, the residual above: a Farkas matrix of the whole problem when ‖ρ‖ is at
    rounding level. Pairs among the PAIR_LP_GROUPS largest groups, by |J_a| + |J_b| descending (the
    ones with the most constraints per dimension), at most ``max_pairs`` of them (default
    PAIR_LP_MAX_PAIRS) within ``max_seconds`` (at most PAIR_LP_SECONDS, HiGHS's time limit on each).
    Cost per pair: an LP in r + 1 rows and |J_a ∪ J_b| columns.
    """
    from scipy.optimize import linprog

    max_pairs = PAIR_LP_MAX_PAIRS if max_pairs is None else max_pairs
    max_seconds = PAIR_LP_SECONDS if max_seconds is None else min(max_seconds, PAIR_LP_SECONDS)
    start = time.perf_counter()
    K, r, P = pb.K, pb.coords.rank, pb.groups.pattern
    sizes = np.diff(P.indptr)
    top = np.argsort(-sizes, kind="stable")[:PAIR_LP_GROUPS]
    top = top[sizes[top] > 0]
    pairs = [(int(a), int(b)) for i, a in enumerate(top) for b in top[i + 1:]]
    pairs.sort(key=lambda ab: -(sizes[ab[0]] + sizes[ab[1]]))
    scale = farkas_scale(K)
    for a, b in pairs[:max_pairs]:
        left = max_seconds - (time.perf_counter() - start)
        if left <= 0:
            return None
        Ja, Jb = P.indices[P.indptr[a]:P.indptr[a + 1]], P.indices[P.indptr[b]:P.indptr[b + 1]]
        Pj, Nj, Ej = np.setdiff1d(Ja, Jb), np.setdiff1d(Jb, Ja), np.intersect1d(Ja, Jb)
        if Pj.size + Nj.size == 0:
            continue
        ctx = np.concatenate([Pj, Nj, Ej])
        sign = np.concatenate([np.ones(Pj.size), -np.ones(Nj.size), np.ones(Ej.size)])
        A = np.vstack([(K[ctx] * sign[:, None]).T, np.r_[np.ones(Pj.size + Nj.size), np.zeros(Ej.size)]])
        rhs = np.r_[np.zeros(r), 1.0]
        bounds = [(0, None)] * (Pj.size + Nj.size) + [(None, None)] * Ej.size
        res = linprog(np.zeros(ctx.size), A_eq=A, b_eq=rhs, bounds=bounds, method="highs",
                      options={"time_limit": left})
        if res.status != 0:
            continue  # the pair is separable (or HiGHS could not tell): no certificate from it
        z = _polish_vertex(A, rhs, res.x, Pj.size + Nj.size)
        rho = (z * sign) @ K[ctx]
        perp = float(np.sqrt(2.0) * np.linalg.norm(rho))
        if perp > FARKAS_RTOL * scale:
            continue
        # Ψ_{a,j} = sign_j z_j, Ψ_{b,j} = −sign_j z_j (λ on P, −μ on N, ν on E for a; the opposite for b)
        nz = z != 0
        g = np.concatenate([np.full(nz.sum(), a), np.full(nz.sum(), b)])
        j = np.concatenate([ctx[nz], ctx[nz]])
        psi = np.concatenate([(sign * z)[nz], -(sign * z)[nz]])
        return g, j, psi, perp
    return None


def _polish_vertex(A: np.ndarray, rhs: np.ndarray, x: np.ndarray, n_signed: int) -> np.ndarray:
    """An LP vertex x of A x = rhs re-solved by least squares on its support; the first ``n_signed``
    entries must stay ≥ 0 (else HiGHS's x, with its tiny negative entries zeroed, is kept)."""
    x = np.where(np.abs(x) > 1e-12 * max(float(np.max(np.abs(x))), 1e-300), x, 0.0)
    x[:n_signed] = np.maximum(x[:n_signed], 0.0)
    support = np.flatnonzero(x)
    polished = np.zeros_like(x)
    polished[support] = np.linalg.lstsq(A[:, support], rhs, rcond=None)[0]
    ok = np.all(polished[:n_signed] >= 0) and (np.linalg.norm(A @ polished - rhs) <= np.linalg.norm(A @ x - rhs))
    return polished if ok else x


def _pair_farkas(pb: _Problem):
    """(grp, ctx, Ψ, perp) from two groups tied on > r contexts spanning R^r, or None."""
    K, r, P = pb.K, pb.coords.rank, pb.groups.pattern
    scale = farkas_scale(K)
    for u, v, J in _heavy_pairs(P, r):
        Ju, Jv = P.indices[P.indptr[u]:P.indptr[u + 1]], P.indices[P.indptr[v]:P.indptr[v + 1]]
        only_u = np.setdiff1d(Ju, J)
        if only_u.size == 0:
            u, v, only_u = v, u, np.setdiff1d(Jv, J)
        if only_u.size == 0:
            continue
        i = int(only_u[0])  # u ∈ S_i, v ∉ S_i
        beta = np.linalg.lstsq(K[J].T, K[i], rcond=None)[0]
        perp = float(np.sqrt(2.0) * np.linalg.norm(K[i] - K[J].T @ beta))
        if perp > FARKAS_RTOL * scale:
            continue
        g = np.concatenate([[u, v], np.full(len(J), u), np.full(len(J), v)])
        j = np.concatenate([[i, i], J, J])
        psi = np.concatenate([[1.0, -1.0], -beta, beta])
        return g, j, psi, perp
    return None


def _separable_result(pb: _Problem, X: np.ndarray, t: np.ndarray, method: str) -> Separability:
    """Certificate W from group rows X tied on the supports: scaled so that its smallest margin is 1.

    ``residuals["min_margin"]`` is the smallest (6b) margin after scaling (one full pass before
    it), ``equality`` the largest (6a) violation |x_zᵀk_j − t_j| on the supports.
    """
    gamma = scan_off_support(X, t, pb.K, pb.groups.pattern.tocsc()).min_margin
    if gamma > 0:
        X, t = X / gamma, t / gamma
    coo = pb.groups.pattern.tocoo()
    eq = row_dots(X, pb.K, coo.row, coo.col) - t[coo.col]
    residuals = {"min_margin": 1.0 if gamma > 0 else float(gamma), "equality": float(np.max(np.abs(eq), initial=0.0))}
    return Separability(bool(gamma > 0), pb.token_w(X) if gamma > 0 else None, None, residuals, method)


def _in_support(pattern: sp.csr_matrix, g: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Whether each pair (g_i, j_i) is in the (G, m) support pattern."""
    coo = pattern.tocoo()
    keys = np.sort(coo.row.astype(np.int64) * pattern.shape[1] + coo.col)
    q = g.astype(np.int64) * pattern.shape[1] + j
    pos = np.minimum(np.searchsorted(keys, q), max(len(keys) - 1, 0))
    return (keys[pos] == q) if len(keys) else np.zeros(len(q), bool)


def _farkas_result(pb: _Problem, farkas: tuple, method: str, **extra) -> Separability:
    """Token-level μ and Ψ (sparse (m, V)) from a group-level Farkas matrix at the representatives."""
    g, j, psi, perp = farkas
    tok = pb.groups.representative[g]
    off = ~_in_support(pb.groups.pattern, g, j)
    m, V = pb.data.m, pb.data.V
    mu = sp.csr_matrix((-psi[off], (j[off], tok[off])), shape=(m, V))
    cert = sp.csr_matrix((psi, (j, tok)), shape=(m, V))
    # ‖Ψᵀ H̄‖ in the caller's units (Ψ itself is normalised by Σ_off μ = 1 and has none)
    return Separability(False, None, mu, {"perp_norm": float(perp) * pb.scale, **extra}, method, certificate=cert)


def _lp_nnz(pb: _Problem) -> int:
    G, m, r = pb.groups.n_groups, pb.data.m, pb.coords.rank
    return (r + 2) * G * m


def _separability_by_lp(pb: _Problem) -> Separability:
    """The LP of :func:`is_separable` over (X, t, s) on every off-support pair, solved by HiGHS."""
    solver = SVMDual(pb.K, pb.groups.pattern, pb.groups.size, _gram(pb.coords))
    gi, ji = np.nonzero(pb.groups.pattern.toarray() == 0)
    lp = separability_lp(pb.K, pb.groups.pattern, gi, ji, contexts=np.arange(pb.data.m))
    method = "LP (HiGHS) over token groups"
    if lp.separable:
        # Remove the LP's rounding-level F component exactly (weighted projection), then rescale.
        return _separable_result(pb, *solver.primal_from(lp.X), method)
    farkas = solver.farkas_from(gi, ji, lp.mu / lp.mu.sum(), accept_any=True)
    return _farkas_result(pb, farkas, method, lp_value=lp.value)


# -- the NTP-SVM (Def. 3) --------------------------------------------------------------------

@dataclass
class NTPSVM:
    """Solution of the NTP-SVM (Def. 3): W^mm = argmin ‖W‖ s.t. (6a), (6b).

    Attributes
    ----------
    W : (V, d) array or None
        W^mm (None when infeasible). In F⊥ up to rounding, with min (6b) margin exactly 1. With
        ``status`` "time_limit" or "optimal_inaccurate" the best feasible point found, within
        ``residuals["error_bound"]`` of W^mm.
    margin : float
        The NTP-margin 1/‖W‖ (0.0 when infeasible).
    status : "optimal" | "optimal_inaccurate" | "time_limit" | "infeasible"
        "optimal": certified relative gap ≤ tol (or an exact active-set solve that passed the KKT check);
        "optimal_inaccurate": a certified point whose gap is above tol (the solver stalled or ran out of
        iterations); "time_limit": likewise, stopped by ``max_seconds``.
    multipliers : scipy.sparse.csr_matrix (m, V) or None
        Dual weights μ_{j,v} ≥ 0 of the (6b) rows (zero on supports); tokens of one support-pattern
        group share their group's weight equally. Built on first access.
    active : (k, 2) int array
        The (context j, token v ∉ S_j) pairs whose constraint (6b) is tight (margin ≤ 1 + 1e-7).
        Built on first access (one full pass over the logits).
    residuals : dict
        ``equality`` max |x_zᵀk_j − t_j| over the supports (the (6a) violation); ``min_margin`` min
        (6b) value − 1; ``duality_gap`` relative gap (½‖W‖² − dual value)/(½‖W‖²); ``error_bound``
        the certified bound on ‖W − W^mm_exact‖/‖W^mm_exact‖, √(gap/(1 − gap)) ≈ √gap (not √(2·gap):
        ½‖W − W^mm‖² ≤ ½‖W‖² − D with the *absolute* gap, see :func:`_error_bound`); ``stationarity``
        ‖W − W(Ψ)‖/‖W‖ with W(Ψ) the primal image of the dual point; ``complementarity``
        max μ_i · (margin_i − 1) / max μ.
    separability : Separability
    iterations, rounds : int (dual iterations or Newton steps; working-set rounds or outer steps)
    seconds : float
    method : str
    """

    W: np.ndarray | None
    margin: float
    status: str
    residuals: dict
    separability: Separability
    iterations: int = 0
    seconds: float = 0.0
    method: str = ""
    rounds: int = 0
    _pb: _Problem | None = field(default=None, repr=False)
    _out: SVMOutcome | None = field(default=None, repr=False)

    @cached_property
    def multipliers(self) -> sp.csr_matrix | None:
        if self._out is None or self._out.dual_point is None:
            return None
        g, j, psi = self._out.dual_point
        off = ~_in_support(self._pb.groups.pattern, g, j)
        g, j, mu = g[off], j[off], -np.minimum(psi[off], 0.0)
        members = np.argsort(self._pb.groups.token_group, kind="stable")
        start = np.concatenate([[0], np.cumsum(self._pb.groups.size)])
        n = self._pb.groups.size[g]
        tok = members[np.repeat(start[g], n) + _ranges(n)]
        # W = Σ μ (e_z − e_v) h̄ᵀ: μ of the unit-scale problem over scale² (inf where that overflows float64,
        # i.e. for H̄ in units below ~1e-154; the verdicts, W and the margins do not)
        with np.errstate(over="ignore"):
            mu = mu / self._pb.scale / self._pb.scale
        return sp.csr_matrix((np.repeat(mu / n, n), (np.repeat(j, n), tok)), shape=(self._pb.data.m, self._pb.data.V))

    @cached_property
    def active(self) -> np.ndarray:
        if self._out is None or self._out.X is None:
            return np.zeros((0, 2), dtype=np.int64)
        pb = self._pb
        scan = scan_off_support(self._out.X, self._out.t, pb.K, pb.groups.pattern.tocsc(), below=1.0 + MARGIN_ATOL,
                                top=pb.groups.n_groups)
        members = np.argsort(pb.groups.token_group, kind="stable")
        start = np.concatenate([[0], np.cumsum(pb.groups.size)])
        n = pb.groups.size[scan.groups]
        tok = members[np.repeat(start[scan.groups], n) + _ranges(n)]
        pairs = np.column_stack([np.repeat(scan.contexts, n), tok])
        return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


def _ranges(n: np.ndarray) -> np.ndarray:
    """Concatenated aranges 0..n_i−1."""
    total = int(n.sum())
    return np.arange(total) - np.repeat(np.cumsum(n) - n, n)


SVM_METHODS = ("auto", "alm", "dual")


def ntp_svm(data: NTPData, *, tol: float = 1e-10, max_iter: int = 200_000, check_every: int = 25,
            subspace_: Subspace | None = None, separability: Separability | None = None,
            max_seconds: float | None = None, progress: Callable[[int, dict], object] | None = None,
            method: str = "auto", warm_start: ArrayLike | NTPSVM | None = None) -> NTPSVM:
    """Solve the NTP-SVM (Def. 3) and certify the solution.

    Separability is decided first (:func:`is_separable`'s cheap routes: Lemma 1, pair
    certificates, the LP when small); non-separable data give ``status == "infeasible"`` and
    ``W is None``. Then W^mm by one of two solvers (``method``):

    * ``"alm"``: the augmented Lagrangian method with semismooth Newton steps of
      :mod:`embgeo.ntp.svm_alm`, on the primal. For rank H̄ < m (d ≪ m, e.g. learned embeddings).
    * ``"dual"``: the accelerated projected gradient on the dual of :class:`~embgeo.ntp.solvers.SVMDual`
      with an exact active-set finish. For rank H̄ = m (d ≥ m), where almost every off-support pair
      is active and the dual is two GEMMs with the m × m Gram per iteration.
    * ``"auto"`` (default): "dual" when rank H̄ = m, else "alm".

    Both stop when the relative duality gap g = (½‖W‖² − D)/(½‖W‖²) of a point W feasible for every
    constraint and a dual value D is ≤ ``tol``; then ‖W − W^mm‖/‖W^mm‖ ≤ √(g/(1 − g))
    (``residuals["error_bound"]``; see :mod:`embgeo.ntp.svm_alm` for the derivation). The default
    1e-10 is reached on every well-posed instance we measured (the ALM's exact finish ends at
    1e-11…1e-15). Where ``tol`` is not reached but a certified point exists, it is returned, never an
    exception: ``status`` "time_limit" (``max_seconds`` spent) or "optimal_inaccurate" (the solver
    stalled or ran out of iterations), with its gap and error bound; callers decide what is accurate
    enough. :class:`SolverError` only when no feasible point was found and separability is undecided.

    ``warm_start``: a decoder W (V, d) close to W^mm (e.g. the trained one: it starts the ALM from
    P_⊥(W) scaled to margin 1, and is tried first as a separability certificate), or an earlier
    :class:`NTPSVM` on data with the same supports (e.g. the previous record of a training run: its
    multipliers and W start the ALM). Only the ALM uses it. ``progress(iteration, info)`` is called
    after every check / outer step with ``info["gap"]`` and ``info["working_set"]``. A
    ``separability`` result of :func:`is_separable` on the same data is reused instead of deciding again.
    """
    t0 = time.perf_counter()
    if not (0 < tol < 1):
        raise InputError(f"tol: expected a relative gap in (0, 1), got {tol}")
    if method not in SVM_METHODS:
        raise InputError(f"method: expected one of {SVM_METHODS}, got {method!r}")
    pb = _problem(data, subspace_)
    if separability is not None and not isinstance(separability, Separability):
        raise InputError(f"separability: expected the result of is_separable, got {type(separability).__name__}")
    warm_W, warm_dual = _warm_start(data, pb, warm_start)
    sep = separability
    if sep is None and warm_W is not None:
        sep = _separable_from_candidate(pb, warm_W)
    if sep is None:  # the pair LPs get at most a quarter of max_seconds
        sep = _decide_cheaply(pb, None if max_seconds is None else max_seconds / 4)
    if sep is None and pb.coords.rank < data.m and _lp_nnz(pb) <= LP_SMALL_NNZ:
        sep = _separability_by_lp(pb)
    if sep is not None and not sep:
        return NTPSVM(None, 0.0, "infeasible", dict(sep.residuals), sep, 0, time.perf_counter() - t0, sep.method,
                      _pb=pb)
    if method == "auto":
        method = "dual" if pb.coords.rank == data.m else "alm"
    if method == "alm":
        from embgeo.ntp.svm_alm import SVMALM

        X0 = None if warm_W is None or warm_dual is not None else _group_rows(pb, warm_W)
        left = None if max_seconds is None else max(max_seconds - (time.perf_counter() - t0), 1e-3)
        out = SVMALM(pb.K, pb.groups.pattern, pb.groups.size).solve(tol=tol, max_seconds=left, X0=X0,
                                                                    dual=warm_dual, progress=progress)
        if out.X is None and sep is None:  # no feasible point: ask the dual route for a Farkas matrix
            left = None if max_seconds is None else max(max_seconds - (time.perf_counter() - t0), 1e-3)
            try:
                sep = is_separable(data, subspace_, method="dual", max_seconds=left, max_iter=max_iter)
            except SolverError as err:
                raise SolverError(_undecided_message(pb, out, max_seconds) + f" ({err})") from None
            if not sep:
                return NTPSVM(None, 0.0, "infeasible", dict(sep.residuals), sep, out.iterations,
                              time.perf_counter() - t0, sep.method, out.rounds, _pb=pb)
            out = SVMALM(pb.K, pb.groups.pattern, pb.groups.size).solve(
                tol=tol, X0=_group_rows(pb, sep.W), progress=progress,
                max_seconds=None if max_seconds is None else max(max_seconds - (time.perf_counter() - t0), 1e-3))
        name = (f"augmented Lagrangian with semismooth Newton steps ({out.factorizations} factorizations, "
                f"{out.rounds} outer steps, {out.working_set} off-support pairs in the working set)")
    else:
        solver = SVMDual(pb.K, pb.groups.pattern, pb.groups.size, _gram(pb.coords))
        out = solver.solve(tol=tol, max_iter=max_iter, check_every=check_every, detect_infeasible=sep is None,
                           max_seconds=max_seconds, progress=progress)
        if out.status == "infeasible":
            sep = _farkas_result(pb, out.farkas, "NTP-SVM dual: Farkas direction", iterations=out.iterations)
            return NTPSVM(None, 0.0, "infeasible", dict(sep.residuals), sep, out.iterations,
                          time.perf_counter() - t0, sep.method, out.rounds, _pb=pb)
        name = (f"dual on {'every off-support pair' if out.mode == 'dense' else 'a working set'} (accelerated "
                "projected gradient)" + (" + exact active-set solve" if out.polished else ""))
    if out.X is None:
        raise SolverError(_undecided_message(pb, out, max_seconds))
    status = out.status if out.status in ("optimal", "time_limit") else "optimal_inaccurate"
    if out.status == "optimal" and out.gap > tol:  # an exact active-set solve accepted as a KKT point
        status = "optimal"
    if sep is None:
        sep = _separable_result(pb, out.X, out.t, "NTP-SVM: a feasible point")
    W = pb.token_w(out.X)
    norm_W = float(np.sqrt(2 * out.primal)) / pb.scale  # ‖W‖ in the caller's units
    return NTPSVM(W, 1.0 / norm_W, status, _svm_residuals(pb, out), sep, out.iterations, time.perf_counter() - t0,
                  name, out.rounds, _pb=pb, _out=out)


def _undecided_message(pb: _Problem, out, max_seconds: float | None) -> str:
    """Why ntp_svm has nothing to return, with the problem's size (the user decides what to change)."""
    data = pb.data
    within = f"within max_seconds={max_seconds:g}" if max_seconds is not None else f"after {out.iterations} iterations"
    return (f"ntp_svm: no point feasible for every constraint {within} ({out.status}) and separability "
            f"undecided, at m = {data.m} contexts, V = {data.V} tokens in {pb.groups.n_groups} groups, "
            f"d = {data.d} (rank {pb.coords.rank}), {data.probs.nnz} support pairs; pass warm_start= a "
            "separating decoder (e.g. the trained one) or allow more time")


def _group_rows(pb: _Problem, W: np.ndarray) -> np.ndarray:
    """Group rows (G, r) in unit scale of a decoder W (V, d) in the caller's units: the mean coordinates of
    each group's tokens, times the scale (so that the logits stay those of W)."""
    X = pb.coords.to_coords(W) * pb.scale
    out = np.zeros((pb.groups.n_groups, X.shape[1]))
    np.add.at(out, pb.groups.token_group, X)
    return out / pb.groups.size[:, None]


def _warm_start(data: NTPData, pb: _Problem, warm) -> tuple[np.ndarray | None, tuple | None]:
    """(W, dual point or None) from ``warm_start`` of :func:`ntp_svm`."""
    if warm is None:
        return None, None
    if isinstance(warm, NTPSVM):
        if warm.W is None:
            raise InputError("warm_start: the NTPSVM given has no W (status " + repr(warm.status) + ")")
        W = _check_W(data, warm.W)
        other = warm._pb
        same = (other is not None and other.groups.pattern.shape == pb.groups.pattern.shape
                and (other.groups.pattern != pb.groups.pattern).nnz == 0
                and np.array_equal(other.groups.size, pb.groups.size))
        dual = warm._out.dual_point if same and warm._out is not None else None
        if dual is not None and other.scale != pb.scale:  # multipliers scale as H̄⁻²: into this problem's unit scale
            g, j, psi = dual
            dual = (g, j, psi * (pb.scale / other.scale) ** 2)
        return W, dual
    return _check_W(data, warm), None


def _error_bound(gap: float) -> float:
    """Certified ‖W − W^mm‖/‖W^mm‖ from the relative duality gap g = (P − D)/P of a feasible W (P = ½‖W‖²):
    ½‖W − W^mm‖² ≤ P − ½‖W^mm‖² ≤ P − D and ½‖W^mm‖² ≥ D give ‖W − W^mm‖²/‖W^mm‖² ≤ (P − D)/D = g/(1 − g)."""
    return float(np.sqrt(gap / (1.0 - gap))) if gap < 1 else math.inf


def _svm_residuals(pb: _Problem, out: SVMOutcome) -> dict:
    """The KKT residuals of (X, t) and the dual point, all from the definitions (group level, weighted)."""
    K, n = pb.K, pb.groups.size.astype(float)
    coo = pb.groups.pattern.tocoo()
    eq = row_dots(out.X, K, coo.row, coo.col) - out.t[coo.col]
    g, j, psi = out.dual_point
    Xpsi = sp.csr_matrix((psi / n[g], (g, j)), shape=(pb.groups.n_groups, pb.data.m)) @ K
    norm_W = float(np.sqrt(2 * out.primal))
    off = ~_in_support(pb.groups.pattern, g, j)
    mu = -np.minimum(psi[off], 0.0)
    margins = out.t[j[off]] - row_dots(out.X, K, g[off], j[off])
    scan = scan_off_support(out.X, out.t, K, pb.groups.pattern.tocsc())
    return {
        "equality": float(np.max(np.abs(eq), initial=0.0)),
        "min_margin": float(scan.min_margin - 1.0),
        "duality_gap": float(out.gap),
        "error_bound": _error_bound(out.gap),
        "stationarity": float(np.sqrt(np.sum(n * np.sum((out.X - Xpsi) ** 2, axis=1))) / norm_W),
        "complementarity": float(np.max(mu * (margins - 1.0), initial=0.0) / max(float(mu.max(initial=0.0)), 1e-300)),
    }


# -- margins -----------------------------------------------------------------------------------

def ntp_margin(data: NTPData, W: ArrayLike, subspace_: Subspace | None = None) -> float:
    """Normalized NTP-margin of P_⊥(W) (Def. 3, max-margin form):

    min_{j, z∈S_j, v∉S_j} (e_z - e_v)ᵀ P_⊥(W) h̄_j / ‖P_⊥(W)‖.

    Equals 1/‖W^mm‖ at W = W^mm and is at most that for every W. Returns 0.0 when P_⊥(W) = 0.
    Evaluated in blocks of contexts (never an (m, V) array), on H̄ in unit scale and P_⊥(W) divided by its
    largest entry (the margin is homogeneous of degree 0 in W and 1 in H̄): no overflow at any units.
    """
    F = subspace_ or Subspace(data)
    Wp = F.project_perp(W)
    top = float(np.max(np.abs(Wp), initial=0.0))
    if top == 0:
        return 0.0
    Wp = Wp / top
    norm = np.linalg.norm(Wp)
    if np.all(data.support_sizes == data.V):
        raise InputError("probs: every context has full support (S_j = V), the NTP-margin is undefined")
    P = data.probs
    unit, scale = unit_scale(data)
    H = unit.embeddings
    block = max(1, (64 * 1024**2) // (8 * data.V))
    best = np.inf
    for s in range(0, data.m, block):
        e = min(s + block, data.m)
        Z = H[s:e] @ Wp.T  # (e - s, V) logits
        rows = np.repeat(np.arange(e - s), data.support_sizes[s:e])
        cols = P.indices[P.indptr[s]:P.indptr[e]]
        lowest_in = np.full(e - s, np.inf)
        np.minimum.at(lowest_in, rows, Z[rows, cols])
        Z[rows, cols] = -np.inf
        highest_off = Z.max(axis=1)
        has_off = data.support_sizes[s:e] < data.V
        if has_off.any():
            best = min(best, float(np.min((lowest_in - highest_off)[has_off])))
    return float(best / norm * scale)


def _check_W(data: NTPData, W) -> np.ndarray:
    W = as_float_array("W", W, ndim=2)
    if W.shape != (data.V, data.d):
        raise ShapeError(f"W: expected shape (V, d) = ({data.V}, {data.d}), got {W.shape}")
    return W
