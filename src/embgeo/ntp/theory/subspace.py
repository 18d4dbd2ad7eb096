"""The data subspace F of eq. (5), its complement F⊥, the projections onto both and dim F.

F⊥ is the set of W whose in-support logits are equal within every context; projecting onto it is the
t-form equality problem of :mod:`embgeo.ntp.solvers.equality` with one group per token. Also
:func:`estimate_memory`, what every theory object of a dataset needs before anything is solved.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from embgeo.core.validate import check_dense_size
from embgeo.ntp.data import NTPData, check_W
from embgeo.ntp.solvers.constraints import Coordinates, anchor_rows, coordinates, row_dots, token_groups, token_pattern
from embgeo.ntp.solvers.equality import DENSE_T_MAX, EqualitySolution, EqualitySystem, equality_system_bytes
from embgeo.ntp.solvers.svm_dual import DEFAULT_OPTIONS as DUAL_DEFAULTS
from embgeo.ntp.units import unit_scale


class Subspace:
    """The data subspace F = span{(e_z − e_z') h̄_jᵀ : z ≠ z' ∈ S_j} of eq. (5) and its complement.

    F⊥ is the set of W whose in-support logits are equal within every context, so projecting onto
    F⊥ is the t-form equality problem with right-hand side "minus the logits" (one group per
    token, :class:`~embgeo.ntp.solvers.equality.EqualitySystem`); it is factored on first use and reused.

    Attributes
    ----------
    dim : int
        dim F = Σ_j S_j − m − dim{λ on the supports, balanced per context, λ_v ⟂ range K_v for
        every token}: Σ_j S_j − m whenever each token's contexts are linearly independent (always
        when rank H̄ = m), less when a token follows more contexts than their span holds.
    ambient_dim : int
        V · d.
    coords : :class:`~embgeo.ntp.solvers.constraints.Coordinates` of the contexts in unit scale (H̄ / scale).
    scale : float
        The power of two H̄ is divided by (:func:`unit_scale`); projections do not depend on it.
    contexts : (m',) int
        The contexts with at least two next tokens (the others constrain nothing in F).
    pair_tokens, pair_contexts, pair_log_probs : (N',) arrays
        The support pairs (v, j) of those contexts, sorted by (v, j), with log p̂_{j,v}: the pattern of the
        equality problem (:attr:`system`) and the right-hand side of (4).
    tokens : (T,) int
        The tokens in some support of ≥ 2 (the others have zero rows in F); ``pair_groups`` indexes it.
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
        self.pair_tokens, self.pair_contexts, self.pair_log_probs = tok[keep], ctx[keep], logp[keep]
        self.tokens = np.unique(self.pair_tokens)  # the tokens in some support of ≥ 2; the others have zero rows in F
        self.pair_groups = np.searchsorted(self.tokens, self.pair_tokens)
        self.ambient_dim = data.V * data.d
        #: A ``time.perf_counter()`` value after which :attr:`system` begins no step of its factorization (it raises
        #: SolverError instead, and is built again on the next use); None: no limit. Set by a caller with a limit.
        self.deadline: float | None = None

    @cached_property
    def system(self) -> EqualitySystem | None:
        """The factored equality problem on the pairs of the contexts with ≥ 2 next tokens (one group per token,
        weights 1); None when no context has two (then F = {0})."""
        if self.contexts.size == 0:
            return None
        local = np.searchsorted(self.contexts, self.pair_contexts)
        K = self.coords.K[self.contexts]
        # The m × m Gram saves the per-token Gram blocks' products only when r = m (d ≥ m); with r < m they cost
        # no more than gathering from it, and the Gram and its copy on the kept contexts would be 2 m² doubles.
        gram = context_gram(self.coords) if self.coords.rank == self.data.m else None
        if gram is not None and self.contexts.size < self.data.m:
            gram = gram[np.ix_(self.contexts, self.contexts)]
        return EqualitySystem(K, self.pair_groups, local, np.ones(len(self.tokens)), gram, deadline=self.deadline)

    def system_bytes(self) -> float:
        """Bytes :attr:`system` allocates (:func:`~embgeo.ntp.solvers.equality.equality_system_bytes` on the kept pairs,
        plus the Gram's copy on the kept contexts when r = m), before building it. O(Σ_j S_j)."""
        if self.contexts.size == 0:
            return 0.0
        q = np.bincount(self.pair_groups, minlength=len(self.tokens))
        r, m = self.coords.rank, self.contexts.size
        touched = np.unique(self.pair_contexts[q[self.pair_groups] > r]).size
        gram_copy = 8.0 * m * m if r == self.data.m and m < self.data.m else 0.0
        return equality_system_bytes(q, r, m, touched) + gram_copy

    def dim_bounds(self) -> tuple[int, int]:
        """(low, high) with low ≤ dim F ≤ high, from each token's rank alone (no equality system; equal when no
        token's contexts are linearly dependent).

        dim F = Σ_v rank K_v − m' + rank M (K_v the coordinates of token v's contexts among the m' contexts with
        ≥ 2 next tokens, M = Σ_v E_vᵀ (I − P_v) E_v the Gram of the constraints that the dependent tokens put on
        t; see :mod:`embgeo.ntp.solvers.equality`). rank M is at least the largest single term, q_v − rank K_v, and at
        most both Σ_v (q_v − rank K_v) and m_t − rank K[touched] (every t = K x on the m_t touched contexts is
        in its null space). Cost: one SVD of each token's contexts, Σ_v q_v min(q_v, r)².
        """
        if self.contexts.size == 0:
            return 0, 0
        K, grp, ctx = self.coords.K, self.pair_groups, self.pair_contexts  # pairs sorted by token, then context
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
        return int(len(self.pair_tokens) - self.contexts.size - (s.n_constraints - getattr(s, "constraint_rank", 0)))

    def solve(self, c: np.ndarray, check: bool = True) -> EqualitySolution:
        """The equality problem for right-hand sides ``c`` (one per pair of :attr:`pair_tokens`) on the kept pairs
        (the zero solution when F = {0})."""
        if self.system is None:
            zero = np.zeros(0)
            return EqualitySolution(np.zeros((0, self.coords.rank)), zero, zero, True, {})
        return self.system.solve(c, check=check)

    @property
    def perp_dim(self) -> int:
        """dim F⊥ = V·d − dim F."""
        return self.ambient_dim - self.dim

    def token_rows(self, X: np.ndarray) -> np.ndarray:
        """(V, r) with the rows of the support tokens set from X (|tokens|, r), zeros elsewhere."""
        check_dense_size("a (V, r) matrix", (self.data.V, self.coords.rank))
        out = np.zeros((self.data.V, self.coords.rank))
        out[self.tokens] = X
        return out

    def project(self, W: ArrayLike) -> np.ndarray:
        """P_F(W): orthogonal projection of W (V, d) onto F; O(Σ_j S_j · r + m² + T·d·r) after the factorization
        (T = len(tokens)).

        Only the rows of :attr:`tokens` (in some support of ≥ 2) take part: every other row of P_F(W) is zero and
        no equation reads it, so the change of coordinates and back is made on T rows, not V (issue 38: at
        V = 50,257, d = 768 the two V × d × r products took 5.3 s of the probe's alignment, where T was ~2,000)."""
        W = check_W(self.data, W)
        rows = self.tokens
        X0 = self.coords.to_coords(W[rows])  # (T, r)
        sol = self.solve(-row_dots(X0, self.coords.K, self.pair_groups, self.pair_contexts))
        # P_⊥(W) = W + Δ with Δ the least-norm change that ties the in-support logits; P_F(W) = −Δ.
        out = np.zeros_like(W)
        if len(rows):
            out[rows] = -self.coords.to_w(sol.X)
        return out

    def project_perp(self, W: ArrayLike) -> np.ndarray:
        """P_⊥(W) = W − P_F(W): orthogonal projection onto F⊥."""
        W = check_W(self.data, W)
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


def context_gram(coords: Coordinates) -> np.ndarray | None:
    """The m × m Gram of the contexts when it is small enough to keep (m ≤ DENSE_T_MAX)."""
    return coords.gram if coords.K.shape[0] <= DENSE_T_MAX else None


def subspace(data: NTPData) -> Subspace:
    """The data subspace F of eq. (5), with projections onto F and F⊥ and its dimension."""
    return Subspace(data)


def estimate_memory(data: NTPData) -> dict:
    """Bytes the theory objects of ``data`` need at most, by part, before anything is solved.

    ``coordinates`` (K, and the m × m Gram when d > m), ``equality_system`` (the exact path of W*
    and the projections: per-token factors and the m × m t-system, see
    :func:`~embgeo.ntp.solvers.equality.equality_system_bytes`; above the memory budget it is refused and
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
    groups = token_groups(data)
    G = groups.n_groups
    part = {
        "coordinates": 8 * (m * r + (m * m if d > m else 0)),
        "equality_system": equality_system_bytes(J_multi, r, len(multi), touched)
        + (8 * len(multi) ** 2 if d >= m and len(multi) < m else 0),
        "svm_dual": 8 * (10 * G * m if G * m <= DUAL_DEFAULTS.DENSE_DUAL_MAX else (float(J.sum()) + 20 * m) * (r + 8)),
        "outputs": 8 * 3 * V * d,
    }
    part = {k: int(v) for k, v in part.items()}
    part["total"] = int(sum(part.values()))
    return part
