"""Structured solver behind :func:`embgeo.attention.theory.max_margin_selection` (problem (12)).

Paper: ``shared/papers/attention-trained-embeddings.txt``, eqs. (10)–(12), Lemmas 4.2, 4.5, C.7 and C.8;
the solver itself is our construction, not the paper's (``docs/internals/attention-solver.rst``).

Problem (12) for a given selection, with E (V × d) the token embeddings::

    min ‖p‖₂  s.t.  (E_s − E_t)ᵀp ≥ 1   for every sequence X, s ∈ 𝒮_X, t ∈ X \\ 𝒮_X,
                    (E_s − E_s')ᵀp = 0  for s, s' ∈ 𝒮_X.

Every constraint is a difference of token scores a_s = E_sᵀp (a_s − a_t ≥ 1, a_s = a_s'), so the
constraints are a graph on tokens and the solver never forms the (pairs × d) difference matrix:
it works with graph incidences and Laplacians, a QR of the involved tokens' rows and, when those
are independent, their Gram K = F Fᵀ in score space.

**Reduction** (exact).

1. Pairs are deduplicated: a pair (s, t) occurring in many sequences is one constraint.
2. Tie classes: the tie pairs are the edges of a graph on tokens; its connected components are
   the classes (scores are equal inside a class). A pair with both tokens in one class is a
   *direct conflict* (0 ≥ 1).
3. The pairs become edges (C(s) → C(t)) of a *class graph* on the g classes that carry an
   inequality, deduplicated again (r edges). A directed cycle C₁ → C₂ → … → C₁ sums to
   0 ≥ length: infeasible, with an exact Farkas vector (uniform on the cycle).
4. Class embeddings: with P⊥ the projection onto the orthogonal complement of the tie rows
   E_s − E_s' (the p allowed by the ties), class C gets the row P⊥E_root(C). A rank-revealing
   QR of these rows, P⊥E_rootsᵀ Π = Z R, gives (classes renumbered in pivot order) F = Rᵀ
   (g × k, k = rank, lower-trapezoidal) and p = Z y with y ∈ R^k: problem (12) becomes
   min ½‖y‖²  s.t.  (f_i − f_j)ᵀy ≥ 1  for every edge (i, j).

**Interior point** (Mehrotra predictor–corrector, primal–dual) on the reduced problem, in one
of two coordinate systems, chosen so that the Newton matrix is min(g, k) square:

* *score space* when F has full row rank (g = k, e.g. d ≥ V with generic E): the variable is
  the class-score vector a = F y ∈ R^g, the objective ½ aᵀMa with M = K⁻¹ = (F Fᵀ)⁻¹ = R⁻¹R⁻ᵀ
  (formed once, g³), every a is reachable, so an acyclic class graph is always feasible. The
  Newton matrix is M + Bᵀ W B: M plus a weighted graph Laplacian (B the r × g edge incidence,
  W diagonal), assembled in O(r + g²) and factored by Cholesky in g³/3 per iteration.
* *embedding space* when g > k: the variable is y ∈ R^k, the Newton matrix I + Fᵀ(Bᵀ W B)F with
  the Laplacian kept sparse (cost O(r k + g k²) per iteration, k³/3 for the Cholesky).

Infeasibility beyond conflicts and cycles can only happen in embedding space (a ∈ range F is
then a real restriction). There the multipliers λ of the interior point diverge along a Farkas
direction; w = λ/Σλ is polished into an exact Farkas vector by Lawson–Hanson NNLS on the LDP
dual restricted to the support of w (a few rows, exact; LDP: Lawson & Hanson 1974, ch. 23).

**Exact finish** (active set). The interior point is stopped at a relative accuracy of 1e-10 and
its active edges (slack < multiplier) define an equality problem that is solved exactly: the
active edges fix the scores up to one constant per connected component of the active graph
(heights h: a_i − a_j = 1 along every active edge, integer and checked on every edge), and the
constants τ minimise ½(h + Pτ)ᵀM(h + Pτ) (score space), or y = argmin ‖y‖ s.t. the rows of a
spanning forest of the active graph (embedding space; the other active rows are implied by the
heights). The multipliers are the interior point's, corrected by the minimum-norm flow that
makes stationarity exact (a graph-Laplacian solve), negative round-off clipped. The answer is
accepted only as a KKT point of the *original* problem, recomputed from E (:func:`certify`):
margins from E p, ties, multipliers ≥ 0, complementarity, stationarity p = Σμ(E_s − E_t) + Σν
(E_s − E_s') with ν by least squares on a spanning forest of the tie pairs, and the duality gap
½‖p‖² − (Σμ − ½‖Σμ(E_s − E_t) + Σν(E_s − E_s')‖²). If the finish fails its checks (a wrong
active set), the interior-point point itself is certified or a SolverError is raised.

**Cost.** Pairs: O(Σ_X |𝒮_X||X|) to enumerate (deduplicated in chunks, so memory is O(r) plus
a chunk). Reduction: one QR of a d × g matrix (d g min(d, g)) and one SVD of the tie rows.
Interior point: ~20–40 iterations of O(r + g²) + g³/3 (score space) or O(r k + g k²) + k³/3
(embedding space). Memory: O(m) for the m distinct pairs, then O(r + g d + min(g, d)²) doubles,
estimated (:func:`estimate_bytes`) before anything dense is allocated; above MEMORY_BUDGET a
:class:`~embgeo.errors.TooLargeError` names the sizes. The Fig. 2 size (V = d = 2048, n = 10,000
sequences of 256 tokens, ~400k distinct pairs) takes ~10 s and < 1 GB on one core
(benchmarks/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components, minimum_spanning_tree

from embgeo.core.status import Status
from embgeo.core.validate import DENSE_BUDGET_BYTES
from embgeo.errors import SolverError, TooLargeError

#: Relative tolerance of the KKT certificate (margins ≥ 1 − KKT_RTOL; complementarity, duality gap).
KKT_RTOL = 1e-8
#: A Farkas vector w is accepted when ‖P⊥ Σ w_j (E_s − E_t)‖ ≤ FARKAS_RTOL · max_s ‖E_s‖ (over the
#: tokens of the pairs): then every p meeting the ties has a margin below FARKAS_RTOL times the data's scale.
FARKAS_RTOL = 1e-9
#: Stationarity, complementarity and duality gap (relative) accepted by :func:`certified`.
CERT_RTOL = 1e-6
#: Memory budget (bytes) of one solve; a larger estimate raises TooLargeError.
MEMORY_BUDGET = 2 * DENSE_BUDGET_BYTES
#: Interior point: relative duality gap and residuals at which the exact finish takes over. The
#: finish only needs the active set, and the residuals of the normal equations stall near 1e-8 as
#: the weights λ/s reach 1e20, so they are asked less; when the Newton matrix stops being
#: numerically positive definite, a point within IPM_LATE × these tolerances is handed over too.
IPM_GAP = 1e-10
IPM_RES = 1e-6
IPM_LATE = 100.0
IPM_MAX_ITER = 200
#: Σλ above this (the rows scaled to max norm 1, so ‖y‖² = Σλ at an optimum) is read as divergence:
#: an infeasible problem, or one whose margin is below ~3e-7 of the data's scale.
IPM_DIVERGE = 1e13
#: Raw pair codes are deduplicated every PAIR_CHUNK codes (bounds the temporary memory), in two
#: V² boolean bitmaps while V² ≤ PAIR_BITMAP_MAX (2 × 128 MB at most), else by sorting.
PAIR_CHUNK = 1 << 22
PAIR_BITMAP_MAX = 1 << 27
#: Numerical rank of the class rows (scaled to max norm 1): |R_jj| > RANK_RTOL · max(g, d) in the pivoted QR.
RANK_RTOL = 1e-13
#: Score space (Newton matrix M + Laplacian, M = (F Fᵀ)⁻¹) only while cond(F) ≲ 1/SCORE_MIN_DIAG
#: (|R_jj| ≥ SCORE_MIN_DIAG · |R_00|); beyond, M would lose the digits the finish needs: embedding space.
SCORE_MIN_DIAG = 1e-6


# -- 1. constraint pairs ---------------------------------------------------------------------------

def constraint_pairs(tokens: list[np.ndarray], sel: list[np.ndarray], V: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Distinct inequality pairs (s, t), distinct tie pairs (s < s') and the raw inequality count.

    tokens[i] : sorted distinct token ids of sequence i; sel[i] : its sorted selected ids.
    Returns ``pairs`` (m, 2), ``eq_pairs`` (k, 2) int64 sorted by code s·V + t, and
    n_raw = Σ_X |𝒮_X|·|X \\ 𝒮_X|. Codes s·V + t are deduplicated in a V² bitmap when V² ≤
    PAIR_BITMAP_MAX (no sorting: O(raw + V²)), else by sorting every PAIR_CHUNK codes.
    """
    bitmap = V * V <= PAIR_BITMAP_MAX
    seen_ineq = np.zeros(V * V if bitmap else 0, dtype=bool)
    seen_eq = np.zeros(V * V if bitmap else 0, dtype=bool)
    ineq, eq = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ineq_parts, eq_parts, buffered, n_raw = [], [], 0, 0

    def flush() -> None:
        nonlocal ineq, eq, ineq_parts, eq_parts, buffered
        for parts, seen in ((ineq_parts, seen_ineq), (eq_parts, seen_eq)):
            if parts and bitmap:
                seen[np.concatenate(parts)] = True
        if not bitmap:
            ineq = np.union1d(ineq, np.concatenate(ineq_parts)) if ineq_parts else ineq
            eq = np.union1d(eq, np.concatenate(eq_parts)) if eq_parts else eq
        ineq_parts, eq_parts, buffered = [], [], 0

    for u, S in zip(tokens, sel, strict=True):
        rest = u[~np.isin(u, S, assume_unique=True)]
        n_raw += S.size * rest.size
        if rest.size:
            ineq_parts.append((S[:, None] * V + rest[None, :]).ravel())
        if S.size > 1:
            i, j = np.triu_indices(S.size, k=1)
            eq_parts.append(S[i] * V + S[j])
        buffered += S.size * (rest.size + S.size)
        if buffered >= PAIR_CHUNK:
            flush()
    flush()
    if bitmap:
        ineq, eq = np.flatnonzero(seen_ineq), np.flatnonzero(seen_eq)
    return np.stack([ineq // V, ineq % V], axis=1), np.stack([eq // V, eq % V], axis=1), int(n_raw)


# -- 2.–3. tie classes and the class graph ---------------------------------------------------------

@dataclass
class ClassGraph:
    """Tie classes and the deduplicated class graph of the pairs.

    label : (V,) tie class of every token (a token without ties is its own class).
    tree : indices into eq_pairs of a spanning forest of the tie graph (its rows span the ties).
    conflict : index of a pair inside one tie class, or -1.
    nodes : (g,) the class labels that carry an inequality; edges : (r, 2) node indices (i, j),
        meaning a_i − a_j ≥ 1; rep : (r,) one pair per edge; edge_of : (m,) the edge of each pair.
    roots : (g,) one token per node (its class's smallest id).
    """

    label: np.ndarray
    tree: np.ndarray
    conflict: int
    nodes: np.ndarray
    edges: np.ndarray
    rep: np.ndarray
    edge_of: np.ndarray
    roots: np.ndarray


def class_graph(pairs: np.ndarray, eq_pairs: np.ndarray, V: int) -> ClassGraph:
    """Tie classes (connected components of the tie pairs) and the class graph. O(V + m + k)."""
    if len(eq_pairs):
        T = sp.coo_matrix((np.ones(len(eq_pairs)), (eq_pairs[:, 0], eq_pairs[:, 1])), shape=(V, V)).tocsr()
        _, label = connected_components(T, directed=False)
        forest = minimum_spanning_tree(T).tocoo()  # unit weights: any spanning forest
        lo, hi = np.minimum(forest.row, forest.col), np.maximum(forest.row, forest.col)
        tree = np.searchsorted(eq_pairs[:, 0] * V + eq_pairs[:, 1], lo.astype(np.int64) * V + hi)
    else:
        label, tree = np.arange(V), np.zeros(0, dtype=np.int64)
    label = label.astype(np.int64)
    root_of = np.full(label.max() + 1, V, dtype=np.int64)
    np.minimum.at(root_of, label, np.arange(V))
    cs, ct = label[pairs[:, 0]], label[pairs[:, 1]]
    same = np.flatnonzero(cs == ct)
    if same.size:
        empty = np.zeros(0, dtype=np.int64)
        return ClassGraph(label, tree, int(same[0]), empty, np.zeros((0, 2), dtype=np.int64), empty, empty, empty)
    nodes, idx = np.unique(np.concatenate([cs, ct]), return_inverse=True)
    g = len(nodes)
    i, j = idx[:len(pairs)], idx[len(pairs):]
    keys, rep, edge_of = np.unique(i * g + j, return_index=True, return_inverse=True)
    edges = np.stack([keys // g, keys % g], axis=1)
    return ClassGraph(label, tree, -1, nodes, edges, rep, edge_of.ravel(), root_of[nodes])


def find_cycle(g: int, edges: np.ndarray) -> np.ndarray | None:
    """Edge indices of a directed cycle of the class graph, or None when it is acyclic.

    Strongly connected components (O(g + r)); inside a non-trivial one, a breadth-first search from
    one node v and an edge back into v give a shortest cycle through v.
    """
    A = sp.csr_matrix((np.arange(1, len(edges) + 1), (edges[:, 0], edges[:, 1])), shape=(g, g))
    n_scc, scc = connected_components(A, directed=True, connection="strong")
    if n_scc == g:
        return None
    big = np.flatnonzero(np.bincount(scc) > 1)[0]
    members = np.flatnonzero(scc == big)
    sub = A[members][:, members]
    _, pred = breadth_first_order(sub, 0, directed=True, return_predecessors=True)
    into_root = sub[:, [0]].tocoo().row  # x with an edge x → v (all reachable from v inside the SCC)
    depth = np.array([_depth(pred, x) for x in into_root])
    x = int(into_root[np.argmin(depth)])
    path = [x]
    while path[-1] != 0:
        path.append(int(pred[path[-1]]))
    path = path[::-1] + [0]  # v → … → x → v
    return np.array([int(sub[a, b]) - 1 for a, b in zip(path[:-1], path[1:], strict=True)], dtype=np.int64)


def _depth(pred: np.ndarray, x: int) -> int:
    k = 0
    while x != 0:
        x, k = int(pred[x]), k + 1
    return k


# -- 4. class embeddings ---------------------------------------------------------------------------

def estimate_bytes(g: int, d: int, r: int, n_tie_rows: int) -> int:
    """Peak memory of :func:`reduce_embeddings` plus the interior point, in bytes (an upper estimate).

    F and its QR: 3 g·d; the tie rows and their SVD: 2 n_tie_rows·d; Newton-side dense matrices:
    6 min(g, d)² (M, the Newton matrix, R⁻¹, the finish's Laplacian and products) plus 2 g·min(g, d)
    in embedding space; per-edge vectors: 40 r.
    """
    q = min(g, d)
    return 8 * (3 * g * d + 2 * n_tie_rows * d + 6 * q * q + 2 * g * q + 40 * r)


@dataclass
class Reduced:
    """The reduced problem min ½‖y‖² s.t. (f_i − f_j)ᵀy ≥ 1, y ∈ R^k, p = Z y (see module docstring).

    F : (g, k) class rows in pivot order (F[q] belongs to node perm[q]); F = Rᵀ with R (k, g) from
    the pivoted QR, so F is lower-trapezoidal. Z : (d, k) orthonormal. scale : the rows were
    divided by it (max ‖E_s‖ over the roots), so the interior point's thresholds are scale-free;
    p = Z y / scale and the multipliers of E are those of F divided by scale².
    """

    F: np.ndarray
    Z: np.ndarray
    R: np.ndarray
    perm: np.ndarray
    scale: float

    @property
    def k(self) -> int:
        return self.F.shape[1]


def tie_basis(E: np.ndarray, eq_pairs: np.ndarray, tree: np.ndarray) -> np.ndarray:
    """Orthonormal basis (rank × d) of the tie rows E_s − E_s' (a spanning forest spans them all)."""
    if not len(tree):
        return np.zeros((0, E.shape[1]))
    D = E[eq_pairs[tree, 0]] - E[eq_pairs[tree, 1]]
    _, sv, Vt = np.linalg.svd(D, full_matrices=False)
    rank = int(np.sum(sv > sv[0] * max(D.shape) * np.finfo(float).eps)) if sv.size and sv[0] > 0 else 0
    return Vt[:rank]


def reduce_embeddings(E: np.ndarray, roots: np.ndarray, ties: np.ndarray) -> Reduced:
    """Class rows P⊥E_roots (g × d) → rank-revealing QR → F = Rᵀ (g × k, pivot order), p = Z y.

    ties : orthonormal rows spanning the tie directions (:func:`tie_basis`). Cost d·g·min(d, g).
    """
    F0 = E[roots]
    if len(ties):
        F0 = F0 - (F0 @ ties.T) @ ties  # ties: orthonormal rows
    scale = float(np.max(np.linalg.norm(E[roots], axis=1)))
    scale = scale if scale > 0 else 1.0
    Z, R, perm = sla.qr(F0.T / scale, mode="economic", pivoting=True)
    # Absolute threshold: the unprojected rows have norm ≤ 1 here, so a class row that the ties
    # annihilate comes out at round-off size (a few eps per tie direction) whatever the other rows are.
    k = int(np.sum(np.abs(np.diag(R)) > RANK_RTOL * max(F0.shape)))
    R = np.ascontiguousarray(R[:k])
    return Reduced(F=np.ascontiguousarray(R.T), Z=np.ascontiguousarray(Z[:, :k]), R=R, perm=perm, scale=scale)


# -- 5. the two coordinate systems of the interior point --------------------------------------------

def _edge_diff(a: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """B a: a_i − a_j per edge, (r,)."""
    return a[edges[:, 0]] - a[edges[:, 1]]


def _edge_sum(lam: np.ndarray, edges: np.ndarray, g: int) -> np.ndarray:
    """Bᵀλ: Σ_{edges out of i} λ − Σ_{edges into i} λ, (g,)."""
    return np.bincount(edges[:, 0], lam, g) - np.bincount(edges[:, 1], lam, g)


def _laplacian_dense(w: np.ndarray, edges: np.ndarray, g: int) -> np.ndarray:
    """Bᵀ diag(w) B as a dense (g, g) array, O(r + g²)."""
    i, j = edges[:, 0], edges[:, 1]
    idx = np.concatenate([i * g + j, j * g + i, i * (g + 1), j * (g + 1)])
    return np.bincount(idx, np.concatenate([-w, -w, w, w]), g * g).reshape(g, g)


def _laplacian_sparse(w: np.ndarray, edges: np.ndarray, g: int) -> sp.csr_matrix:
    """Bᵀ diag(w) B as a sparse (g, g) matrix."""
    i, j = edges[:, 0], edges[:, 1]
    rows, cols = np.concatenate([i, j, i, j]), np.concatenate([j, i, i, j])
    return sp.csr_matrix((np.concatenate([-w, -w, w, w]), (rows, cols)), shape=(g, g))


class ScoreSpace:
    """Variables a ∈ R^g (class scores); objective ½ aᵀMa, M = (F Fᵀ)⁻¹ = R⁻¹R⁻ᵀ (F = Rᵀ square).

    Both spaces offer: n (number of variables), g (classes), hess(x) = Hx, scores(x) = a (g,),
    scores_t(c) = Gᵀc, newton(w, edges) → Cholesky factor of H + GᵀBᵀWBG, y_of(x) → y (k,).
    """

    name = "score space"

    def __init__(self, red: Reduced):
        self.red = red
        self.g = self.n = red.F.shape[0]
        Rinv = sla.solve_triangular(red.R, np.eye(self.g))
        self.M = Rinv @ Rinv.T

    def hess(self, x: np.ndarray) -> np.ndarray:
        return self.M @ x

    def scores(self, x: np.ndarray) -> np.ndarray:
        return x

    def scores_t(self, c: np.ndarray) -> np.ndarray:
        return c

    def newton(self, w: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, bool]:
        """Cholesky factor of M + Bᵀ diag(w) B (g × g)."""
        N = _laplacian_dense(w, edges, self.g)
        N += self.M
        return sla.cho_factor(N, overwrite_a=True, check_finite=False)

    def y_of(self, x: np.ndarray) -> np.ndarray:
        """y = Fᵀ M a = R⁻ᵀ a (min-norm y with F y = a)."""
        return sla.solve_triangular(self.red.R, x, trans="T")

    def dual(self, a: np.ndarray) -> np.ndarray:
        """c = M a = R⁻¹R⁻ᵀ a by two triangular solves (backward stable, unlike the product with M)."""
        return sla.solve_triangular(self.red.R, self.y_of(a))


class EmbeddingSpace:
    """Variables y ∈ R^k; objective ½‖y‖², scores a = F y."""

    name = "embedding space"

    def __init__(self, red: Reduced):
        self.red = red
        self.F = red.F
        self.g, self.n = red.F.shape

    def hess(self, x: np.ndarray) -> np.ndarray:
        return x

    def scores(self, x: np.ndarray) -> np.ndarray:
        return self.F @ x

    def scores_t(self, c: np.ndarray) -> np.ndarray:
        return self.F.T @ c

    def newton(self, w: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, bool]:
        """Cholesky factor of I + Fᵀ(Bᵀ diag(w) B)F (k × k)."""
        N = self.F.T @ (_laplacian_sparse(w, edges, self.g) @ self.F)
        N[np.diag_indices_from(N)] += 1.0
        return sla.cho_factor(N, overwrite_a=True, check_finite=False)

    def y_of(self, x: np.ndarray) -> np.ndarray:
        return x


# -- 6. interior point ---------------------------------------------------------------------------

@dataclass
class IPMResult:
    """x (n,), slacks s (r,), multipliers lam (r,); status "converged", "diverged" or "stalled"."""

    x: np.ndarray
    s: np.ndarray
    lam: np.ndarray
    status: Status
    iterations: int


def _step_to_boundary(v: np.ndarray, dv: np.ndarray) -> float:
    neg = dv < 0
    return float(min(1.0, np.min(-v[neg] / dv[neg]))) if np.any(neg) else 1.0


def _direction(space, edges, state, rc):
    """Newton direction (Δx, Δs, Δλ) for the complementarity target rc (see :func:`interior_point`)."""
    factor, s, lam, rp, rd = state
    rhs = -rd + space.scores_t(_edge_sum(rc / s - (lam / s) * rp, edges, space.g))
    dx = sla.cho_solve(factor, rhs, check_finite=False)
    ds = _edge_diff(space.scores(dx), edges) + rp
    return dx, ds, (rc - lam * ds) / s


def interior_point(space: ScoreSpace | EmbeddingSpace, edges: np.ndarray, max_iter: int = IPM_MAX_ITER) -> IPMResult:
    """Mehrotra predictor–corrector for min ½xᵀHx s.t. B G x − s = 1, s ≥ 0 (multipliers λ ≥ 0).

    Newton system (normal equations): (H + Gᵀ Bᵀ W B G) Δx = −r_d + GᵀBᵀ(S⁻¹r_c − W r_p), W = Λ S⁻¹,
    with r_p = BGx − s − 1, r_d = Hx − GᵀBᵀλ, r_c the complementarity target.
    Stops when ‖r_p‖∞ and ‖r_d‖∞/max(1, ‖Hx‖∞) are ≤ IPM_RES and sᵀλ/max(1, xᵀHx) ≤ IPM_GAP
    ("converged"; also when the Newton matrix stops being numerically positive definite within
    IPM_LATE times these tolerances, the usual end of the normal equations); when
    Σλ exceeds IPM_DIVERGE (the multipliers of an infeasible problem grow without bound: "diverged");
    or after max_iter iterations or a failed step ("stalled").
    """
    g, r = space.g, len(edges)
    x, s, lam = np.zeros(space.n), np.ones(r), np.ones(r)  # infeasible start
    status, it = Status.STALLED, 0
    while it < max_iter:
        it += 1
        Hx = space.hess(x)
        rp = _edge_diff(space.scores(x), edges) - s - 1.0
        rd = Hx - space.scores_t(_edge_sum(lam, edges, g))
        gap = float(s @ lam) / max(1.0, float(x @ Hx))
        residual = max(float(np.max(np.abs(rp))), float(np.max(np.abs(rd))) / max(1.0, float(np.max(np.abs(Hx)))))
        if residual <= IPM_RES and gap <= IPM_GAP:
            status = Status.CONVERGED
            break
        if lam.sum() > IPM_DIVERGE:
            status = Status.DIVERGED
            break
        try:
            factor = space.newton(lam / s, edges)
        except (np.linalg.LinAlgError, ValueError):
            if residual <= IPM_LATE * IPM_RES and gap <= IPM_LATE * IPM_GAP:
                status = Status.CONVERGED
            break
        state = (factor, s, lam, rp, rd)
        dx, ds, dl = _direction(space, edges, state, -s * lam)  # predictor (affine scaling)
        alpha = min(_step_to_boundary(s, ds), _step_to_boundary(lam, dl))
        mu = float(s @ lam) / r
        mu_aff = float((s + alpha * ds) @ (lam + alpha * dl)) / r
        sigma = (mu_aff / mu) ** 3 if mu > 0 else 0.0
        dx, ds, dl = _direction(space, edges, state, -s * lam - ds * dl + sigma * mu)  # corrector
        alpha = min(1.0, 0.99 * min(_step_to_boundary(s, ds), _step_to_boundary(lam, dl)))
        if not np.all(np.isfinite(dx)) or alpha <= 1e-14:
            break
        x, s, lam = x + alpha * dx, s + alpha * ds, lam + alpha * dl
    return IPMResult(x, s, lam, status, it)


# -- 7. exact finish on the active set -------------------------------------------------------------

@dataclass
class Heights:
    """Integer heights of the active graph: a_i − a_j = 1 on every active edge ⇔ a = h + τ[comp].

    comp : (g,) connected component of every node (isolated nodes are their own component).
    h : (g,) int64 heights, 0 at each component's root. pred : (g,) BFS parent (−1 at roots).
    delta : (g,) h[node] − h[pred] (the RHS of the spanning-forest row f_node − f_pred).
    bad : indices into the active edges whose heights disagree (h_i − h_j ≠ 1).
    """

    comp: np.ndarray
    h: np.ndarray
    pred: np.ndarray
    delta: np.ndarray
    bad: np.ndarray


def heights(g: int, act: np.ndarray) -> Heights:
    """Heights of the active edges ``act`` (q, 2) by one breadth-first search from a virtual root."""
    i, j = act[:, 0], act[:, 1]
    _, comp = connected_components(sp.csr_matrix((np.ones(len(act)), (i, j)), shape=(g, g)), directed=False)
    first = np.unique(comp, return_index=True)[1]  # one root per component, joined to a virtual node g
    rows = np.concatenate([i, j, np.full(first.size, g)])
    cols = np.concatenate([j, i, first])
    G = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(g + 1, g + 1))
    order, pred = breadth_first_order(G, g, directed=True, return_predecessors=True)
    pred = pred[:g].astype(np.int64)
    pred[first] = -1
    down = np.isin(pred * (g + 1) + np.arange(g), i * (g + 1) + j)  # edge pred → node: h drops by 1
    delta = np.where(pred < 0, 0, np.where(down, -1, 1)).astype(np.int64)
    h = np.zeros(g, dtype=np.int64)
    hl, pl, dl = [0] * g, pred.tolist(), delta.tolist()
    for node in order[1:].tolist():  # parents come first in BFS order
        if pl[node] >= 0:
            hl[node] = hl[pl[node]] + dl[node]
    h[:] = hl
    bad = np.flatnonzero(h[i] - h[j] != 1)
    return Heights(comp.astype(np.int64), h, pred, delta, bad)


def _grounded_solve(L: np.ndarray, rhs: np.ndarray, hts: Heights) -> np.ndarray:
    """ζ with L ζ = rhs on every non-trivial component (ζ = 0 at the roots); L a dense Laplacian."""
    keep = np.flatnonzero(hts.pred >= 0)
    zeta = np.zeros(L.shape[0])
    if keep.size:
        zeta[keep] = sla.cho_solve(sla.cho_factor(L[np.ix_(keep, keep)]), rhs[keep])
    return zeta


def finish_score(space: ScoreSpace, act: np.ndarray, lam_act: np.ndarray
                 ) -> tuple[tuple[np.ndarray, np.ndarray] | None, np.ndarray | None]:
    """Exact solution of the active equalities ``act`` (q, 2) in score space.

    Returns ((a, μ on act), None), or (None, indices into act of edges whose heights disagree).

    a = h + τ[comp] with (PᵀMP)τ = −PᵀMh (P the component indicator): the minimum of ½aᵀMa over
    the scores meeting every active equality. Its dual vector c = M a satisfies Σ_comp c = 0, so
    the flow equation Bₐᵀμ = c is consistent; μ = λ + Bₐζ with Lₐζ = c − Bₐᵀλ (minimum-norm change).
    M is ill-conditioned (cond F²), so c is computed by triangular solves and τ refined twice on
    the residual Pᵀc (iterative refinement): stationarity then holds to ~cond(F)·eps, not cond(F)²·eps.
    """
    g = space.g
    hts = heights(g, act)
    if hts.bad.size:
        return None, hts.bad
    n_comp = int(hts.comp.max()) + 1
    P = sp.csr_matrix((np.ones(g), (np.arange(g), hts.comp)), shape=(g, n_comp))
    h = hts.h.astype(float)
    PtM = (P.T @ space.M)  # (n_comp, g)
    PtMP = np.asarray((P.T @ PtM.T).T)
    factor = sla.cho_factor(PtMP)
    tau = -sla.cho_solve(factor, PtM @ h)
    for _ in range(2):
        c = space.dual(h + tau[hts.comp])
        tau -= sla.cho_solve(factor, np.bincount(hts.comp, c, n_comp))
    a = h + tau[hts.comp]
    c = space.dual(a)
    L = _laplacian_dense(np.ones(len(act)), act, g)
    zeta = _grounded_solve(L, c - _edge_sum(lam_act, act, g), hts)
    return (a, lam_act + _edge_diff(zeta, act)), None


def finish_embedding(space: EmbeddingSpace, act: np.ndarray, lam_act: np.ndarray
                     ) -> tuple[tuple[np.ndarray, np.ndarray] | None, np.ndarray | None]:
    """Exact solution of the active equalities ``act`` (q, 2) in embedding space.

    y = argmin ‖y‖ s.t. (f_node − f_pred)ᵀy = h_node − h_pred on a spanning forest of the active
    graph (least squares, exact when consistent); μ = λ + Bₐ F z with (Fᵀ Lₐ F) z = y − FᵀBₐᵀλ.
    Returns ((y, μ on act), None), or (None, indices into act to drop): the edges whose heights
    disagree, or — when more forest rows than dimensions cannot all hold — the smallest multiplier.
    """
    F, g = space.F, space.g
    hts = heights(g, act)
    if hts.bad.size:
        return None, hts.bad
    child = np.flatnonzero(hts.pred >= 0)
    rows = F[child] - F[hts.pred[child]]
    rhs = hts.delta[child].astype(float)
    y = np.linalg.lstsq(rows, rhs, rcond=None)[0] if child.size else np.zeros(space.n)
    if child.size and np.max(np.abs(rows @ y - rhs)) > 1e-9:
        return None, np.array([int(np.argmin(lam_act))])
    ry = y - F.T @ _edge_sum(lam_act, act, g)
    N = F.T @ (_laplacian_sparse(np.ones(len(act)), act, g) @ F)
    z = np.linalg.lstsq(N, ry, rcond=None)[0]
    return (y, lam_act + _edge_diff(F @ z, act)), None


def exact_finish(space: ScoreSpace | EmbeddingSpace, edges: np.ndarray, ipm: IPMResult,
                 rounds: int = 6) -> tuple[np.ndarray, np.ndarray] | None:
    """Active-set finish: (y, μ per edge) with every edge's margin ≥ 1, or None.

    Start from the edges with slack < multiplier; remove edges whose heights disagree or whose
    corrected multiplier is clearly negative, add violated edges, and repeat.
    """
    r = len(edges)
    active = ipm.s < ipm.lam
    lam = ipm.lam
    for _ in range(rounds):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            return None
        act = edges[idx]
        out, bad = (finish_score if isinstance(space, ScoreSpace) else finish_embedding)(space, act, lam[idx])
        if out is None:  # inconsistent equalities: of the offending edges, the smallest multiplier leaves
            active[idx[bad[np.argmin(lam[idx[bad]])]]] = False
            continue
        x, mu_act = out
        margin = _edge_diff(space.scores(x), edges)
        violated = np.flatnonzero(margin < 1.0 - 1e-10)
        negative = idx[mu_act < -1e-8 * max(float(np.max(np.abs(mu_act))), 1e-300)]
        if violated.size == 0 and negative.size == 0:
            mu = np.zeros(r)
            mu[idx] = np.maximum(mu_act, 0.0)
            return space.y_of(x), mu
        active[violated] = True
        active[negative] = False
    return None


# -- 8. Farkas finish (embedding space) ------------------------------------------------------------

def farkas_finish(space: EmbeddingSpace, edges: np.ndarray, lam: np.ndarray) -> np.ndarray | None:
    """An exact Farkas vector w ≥ 0 (per edge, Σw = 1, Σ w_e (f_i − f_j) = 0), or None.

    The diverging multipliers point along a Farkas direction; the LDP dual of the edges in their
    support, min_{u ≥ 0} ‖[Gᵀ; 1ᵀ]u − e_last‖ (G the support's rows f_i − f_j), is solved exactly
    by NNLS: zero residual means u/Σu is a Farkas vector. Tried on the 1e-6 and 1e-10 supports.
    """
    from scipy.optimize import nnls  # imported where used: `embgeo list` loads this package, not the solvers

    F = space.F
    for cut in (1e-6, 1e-10):
        support = np.flatnonzero(lam >= cut * lam.max())
        support = support[np.argsort(-lam[support])][: max(4 * (space.red.k + 1), 2000)]
        G = F[edges[support, 0]] - F[edges[support, 1]]
        A = np.vstack([G.T, np.ones((1, support.size))])
        f = np.zeros(A.shape[0])
        f[-1] = 1.0
        u, _ = nnls(A, f, maxiter=max(50 * support.size, 1000))
        total = float(u.sum())
        if total > 0 and np.linalg.norm(G.T @ u) / total <= 0.1 * FARKAS_RTOL:
            w = np.zeros(len(edges))
            w[support] = u / total
            return w
    return None


# -- 9. certificate in the original coordinates ----------------------------------------------------

def _tie_rows(E, eq_pairs, tree):
    return E[eq_pairs[tree, 0]] - E[eq_pairs[tree, 1]] if len(tree) else np.zeros((0, E.shape[1]))


def _combination(E, pairs, w) -> np.ndarray:
    """Σ_j w_j (E_s − E_t) as E_Uᵀ(coefficients per token): O(m + |U| d), never the m × d matrix."""
    V = E.shape[0]
    coef = np.bincount(pairs[:, 0], w, V) - np.bincount(pairs[:, 1], w, V)
    nz = np.flatnonzero(coef)
    return E[nz].T @ coef[nz]


def embedding_scale(E: np.ndarray, pairs: np.ndarray, eq_pairs: np.ndarray) -> float:
    """max ‖E_s‖ over the tokens of the pairs (the scale of FARKAS_RTOL and of the tie residual)."""
    toks = np.unique(np.concatenate([pairs.ravel(), eq_pairs.ravel()]))
    return float(np.max(np.linalg.norm(E[toks], axis=1)))


def certify(E: np.ndarray, pairs: np.ndarray, eq_pairs: np.ndarray, tree: np.ndarray, p: np.ndarray,
            mu: np.ndarray) -> dict:
    """The KKT certificate of (p, μ), recomputed from E (independent of how p and μ were found).

    margins = (E_s − E_t)ᵀp from the scores E p; ν = least squares of p − Σμ_j(E_s − E_t) on the
    rows of a spanning forest of the tie pairs (zero on the other tie pairs); q = Σμ(E_s − E_t) +
    Σν(E_s − E_s'). Returns margins, ν and min_margin, eq_residual (max |(E_s − E_s')ᵀp| /
    (‖p‖ max‖E_s‖)), stationarity ‖p − q‖/max(‖p‖, 1), complementarity max μ|margin − 1| /
    max(max μ, 1) and gap |½‖p‖² − (Σμ − ½‖q‖²)| / ½‖p‖² (weak duality: Σμ − ½‖q‖² ≤ ½‖p̂‖²).
    """
    a = E @ p
    margins = a[pairs[:, 0]] - a[pairs[:, 1]]
    norm = float(np.linalg.norm(p))
    q = _combination(E, pairs, mu)
    D = _tie_rows(E, eq_pairs, tree)
    nu = np.zeros(len(eq_pairs))
    if len(D):
        nu[tree] = np.linalg.lstsq(D.T, p - q, rcond=None)[0]
        q = q + D.T @ nu[tree]
    eq_res = 0.0
    if len(eq_pairs):
        eq_res = float(np.max(np.abs(a[eq_pairs[:, 0]] - a[eq_pairs[:, 1]])))
        eq_res /= max(norm * embedding_scale(E, pairs, eq_pairs), 1e-300)
    primal = 0.5 * norm**2
    dual = float(mu.sum()) - 0.5 * float(q @ q)
    return dict(margins=margins, eq_multipliers=nu, min_margin=float(margins.min()), eq_residual=eq_res,
                stationarity=float(np.linalg.norm(p - q)) / max(norm, 1.0),
                complementarity=float(np.max(mu * np.abs(margins - 1.0))) / max(float(mu.max()), 1.0),
                gap=abs(primal - dual) / primal)


def certified(cert: dict, mu: np.ndarray) -> bool:
    """Whether a certificate meets the tolerances (KKT_RTOL on margins and ties, CERT_RTOL on the rest)."""
    return bool(cert["min_margin"] >= 1 - KKT_RTOL and cert["eq_residual"] <= 10 * KKT_RTOL
                and cert["stationarity"] <= CERT_RTOL and cert["complementarity"] <= CERT_RTOL
                and cert["gap"] <= CERT_RTOL and np.all(mu >= 0))


def farkas_residual(E: np.ndarray, pairs: np.ndarray, eq_pairs: np.ndarray, tree: np.ndarray, w: np.ndarray) -> float:
    """‖P⊥ Σ_j w_j (E_s − E_t)‖ with P⊥ the projection off the span of the tie rows (from E)."""
    v = _combination(E, pairs, w)
    D = _tie_rows(E, eq_pairs, tree)
    if len(D):
        v = v - D.T @ np.linalg.lstsq(D.T, v, rcond=None)[0]
    return float(np.linalg.norm(v))


# -- 10. the driver --------------------------------------------------------------------------------

def _infeasible(d: int, w: np.ndarray, residual: float, method: str, **info) -> dict:
    return dict(status=Status.INFEASIBLE, p=np.full(d, np.nan), norm=np.inf, margin=0.0, farkas=w,
                farkas_residual=residual, method=method, **info)


def solve_max_margin(E: np.ndarray, tokens: list[np.ndarray], sel: list[np.ndarray]) -> dict:
    """Problem (12) for validated inputs; the fields of ``MaxMarginSelection`` as a dict.

    E : (V, d) float64; tokens[i] : sorted distinct non-pad ids of sequence i; sel[i] : its sorted
    selected ids (a subset). Raises TooLargeError before a reduction above MEMORY_BUDGET, and
    SolverError when no certificate can be produced (never returns an uncertified p).
    """
    V, d = E.shape
    pairs, eq_pairs, n_raw = constraint_pairs(tokens, sel, V)
    m = len(pairs)
    info = dict(pairs=pairs, eq_pairs=eq_pairs, n_raw=n_raw)
    if m == 0:  # every sequence selects all its tokens: only ties, p̂ = 0 (cf. Lemma 4.4)
        return dict(status=Status.OPTIMAL, p=np.zeros(d), norm=0.0, margin=np.inf, n_rows=0, margins=np.zeros(0),
                    multipliers=np.zeros(0), eq_multipliers=np.zeros(len(eq_pairs)), min_margin=np.inf,
                    eq_residual=0.0, stationarity=0.0, complementarity=0.0, gap=0.0, method="no inequality", **info)

    cg = class_graph(pairs, eq_pairs, V)
    if cg.conflict >= 0:  # s and t tied (through a chain of ties) yet s > t is required
        w = np.zeros(m)
        w[cg.conflict] = 1.0
        return _infeasible(d, w, 0.0, "direct conflict", n_rows=0, **info)
    g, r = len(cg.nodes), len(cg.edges)
    info.update(n_rows=r, n_classes=g)

    def per_pair(vec: np.ndarray) -> np.ndarray:  # a vector over edges onto one representative pair each
        out = np.zeros(m)
        out[cg.rep] = vec
        return out

    cycle = find_cycle(g, cg.edges)
    if cycle is not None:  # a_1 > a_2 > … > a_1: Σ over the cycle of (e_i − e_j) = 0 exactly
        w = per_pair(np.bincount(cycle, minlength=r) / cycle.size)
        return _infeasible(d, w, farkas_residual(E, pairs, eq_pairs, cg.tree, w), "directed cycle", **info)

    need = estimate_bytes(g, d, r, len(cg.tree))
    if need > MEMORY_BUDGET:
        raise TooLargeError(
            f"max_margin_selection: the reduced problem has {g} token classes, d={d}, {r} distinct pairs and "
            f"would need ~{need / 1024**3:.1f} GiB (budget {MEMORY_BUDGET / 1024**3:.1f} GiB; dense parts "
            f"{g}x{d} class rows and {min(g, d)}x{min(g, d)} Newton matrices); (12) only sees the tokens that occur "
            f"in the sequences, so merge rare token ids into one or solve on fewer sequences")
    red = reduce_embeddings(E, cg.roots, tie_basis(E, eq_pairs, cg.tree))
    info.update(rank=red.k)
    pos = np.empty(g, dtype=np.int64)
    pos[red.perm] = np.arange(g)
    edges = pos[cg.edges]  # node q of the reduced problem is F's row q

    if red.k == 0:  # the ties leave p = 0 only: every margin is 0
        w = per_pair(np.eye(1, r).ravel())
        res = farkas_residual(E, pairs, eq_pairs, cg.tree, w)
        if res <= FARKAS_RTOL * embedding_scale(E, pairs, eq_pairs):
            return _infeasible(d, w, res, "ties span the space", **info)
        raise SolverError("max_margin_selection: rank-0 reduction without a certified Farkas vector")

    diag = np.abs(np.diag(red.R))
    score = red.k == g and diag[-1] >= SCORE_MIN_DIAG * diag[0]
    space = ScoreSpace(red) if score else EmbeddingSpace(red)
    ipm = interior_point(space, edges)
    info.update(iterations=ipm.iterations, method=f"interior point ({space.name})")

    if ipm.status == Status.CONVERGED:
        candidates = []
        fin = exact_finish(space, edges, ipm)
        if fin is not None:
            candidates.append((*fin, " + exact active-set finish"))
        candidates.append((space.y_of(ipm.x), ipm.lam, ""))
        for y, mu_edges, how in candidates:
            p = red.Z @ y / red.scale
            mu = per_pair(mu_edges) / red.scale**2
            a = E @ p
            gamma = float(np.min(a[pairs[:, 0]] - a[pairs[:, 1]]))
            if not gamma > 0:
                continue
            p, mu = p / gamma, mu / gamma  # exact feasibility (γ = 1 up to rounding)
            cert = certify(E, pairs, eq_pairs, cg.tree, p, mu)
            if certified(cert, mu):
                norm = float(np.linalg.norm(p))
                info["method"] += how
                return dict(status=Status.OPTIMAL, p=p, norm=norm, margin=1.0 / norm, multipliers=mu,
                            active=np.flatnonzero(cert["margins"] <= 1 + 1e-6), **cert, **info)
    elif isinstance(space, EmbeddingSpace):  # diverged or stalled: λ/Σλ may point along a Farkas direction
        w_edges = farkas_finish(space, edges, ipm.lam)
        if w_edges is not None:
            w = per_pair(w_edges)
            res = farkas_residual(E, pairs, eq_pairs, cg.tree, w)
            if res <= FARKAS_RTOL * embedding_scale(E, pairs, eq_pairs):
                info["method"] += " + exact Farkas finish (NNLS on the support)"
                return _infeasible(d, w, res, info.pop("method"), **info)
    raise SolverError(f"max_margin_selection: no certified answer ({info['method']} {ipm.status} after "
                      f"{ipm.iterations} iterations; {g} classes, rank {red.k}, {r} distinct pairs); the problem "
                      f"is probably nearly infeasible or ill-conditioned")


# -- 11. an independent solve, for cross-checks on small problems -----------------------------------

#: SLSQP's stopping tolerance on the objective ½‖p‖² (absolute) in :func:`solve_max_margin_slsqp`.
SLSQP_FTOL = 1e-12
SLSQP_MAX_ITER = 500
#: The largest dense constraint matrix ((pairs + ties) × k entries) :func:`solve_max_margin_slsqp` builds.
SLSQP_MAX_ENTRIES = 1 << 22


def solve_max_margin_slsqp(E: np.ndarray, pairs: np.ndarray, eq_pairs: np.ndarray, start: np.ndarray) -> dict:
    """Problem (12) for the constraint pairs of :func:`constraint_pairs`, by scipy's SLSQP from ``start`` (d,).

    Shares nothing with :func:`solve_max_margin` but the pairs: a cross-check of its p̂ on small problems.
    The minimum-norm p lies in the span of the rows E_s of the tokens of the constraints (a component
    orthogonal to them changes no constraint and only adds norm), so with Q (d × k) an orthonormal basis
    of that span, p = Q c and (12) is min ½‖c‖² s.t. A c ≥ 1, D c = 0, A = (E_s − E_t)Q, D = (E_s − E_s')Q,
    both dense. Returns dict p (d,), success, message, iterations. Cost: a QR of d × |tokens|, then SLSQP's
    O(k³) per iteration; refuses (TooLargeError) above SLSQP_MAX_ENTRIES constraint entries.
    """
    from scipy.optimize import minimize

    toks = np.unique(np.concatenate([pairs.ravel(), eq_pairs.ravel()]))
    if toks.size == 0:  # no constraint: p̂ = 0
        return dict(p=np.zeros(E.shape[1]), success=True, message="no constraint", iterations=0)
    if (len(pairs) + len(eq_pairs)) * toks.size > SLSQP_MAX_ENTRIES:
        raise TooLargeError(f"solve_max_margin_slsqp: {len(pairs)} pairs and {len(eq_pairs)} ties over {toks.size} "
                            f"tokens exceed the dense cross-check's {SLSQP_MAX_ENTRIES} entries; use "
                            "max_margin_selection")
    Q, _ = np.linalg.qr(E[toks].T)  # (d, k)
    A = (E[pairs[:, 0]] - E[pairs[:, 1]]) @ Q
    constraints = [{"type": "ineq", "fun": lambda c: A @ c - 1.0, "jac": lambda c: A}]
    if len(eq_pairs):
        D = (E[eq_pairs[:, 0]] - E[eq_pairs[:, 1]]) @ Q
        constraints.append({"type": "eq", "fun": lambda c: D @ c, "jac": lambda c: D})
    out = minimize(lambda c: 0.5 * float(c @ c), Q.T @ start, jac=lambda c: c, method="SLSQP",
                   constraints=constraints, options={"ftol": SLSQP_FTOL, "maxiter": SLSQP_MAX_ITER})
    return dict(p=Q @ out.x, success=bool(out.success), message=str(out.message), iterations=int(out.nit))
