"""The structure of the compatibility (4) and separability (6) constraints, in the form the solvers use.

Paper: ``ntp-implicit-bias-neurips.txt`` Sec. 3. Two reformulations, both exact, make the problems
small enough for real data (m ≫ d, V up to 50k):

**Context coordinates.** Every constraint sees W only through the logits W h̄_j, and every
solution we compute (W*, W^mm, projections onto F) has its rows in span{h̄_j}. With an orthonormal
basis B (d × r) of that span, r = rank H̄ ≤ min(m, d), we write H̄ = K Bᵀ (K: m × r, the context
coordinates) and W = X Bᵀ (X: V × r). Norms, logits and constraints are the same in X, so the
solvers work with K and never with d (:class:`Coordinates`).

**The t-form.** "All in-support logits of context j differ by the log-odds" (4) is the same as
"there is a number t_j with x_zᵀ k_j − t_j = log p̂_{j,z} for every z ∈ S_j"; (6a) is the same with
right-hand side 0, and (6b) then reads x_vᵀ k_j − t_j ≤ −1 for v ∉ S_j. So every problem is over
(X, t) with one scalar t_j per context, and a constraint touches one token row and one t_j. This
is the anchor form of the paper with the anchor's logit given its own name; it makes the
structure visible: for fixed t the problems split into one small problem per token.

**Token groups.** Tokens with the same support pattern J_v = {j : v ∈ S_j} are interchangeable in
(6): W^mm gives them equal rows (the problem is symmetric under swapping them and W^mm is
unique) and separability depends only on the patterns. The SVM and separability solvers
therefore work with one row per *group* of tokens, weighted by the group's size
(:class:`TokenGroups`, :func:`token_groups`); tokens in no support form one group (J = ∅), which at a
GPT-2-sized vocabulary holds most of the 50k tokens. W* and the projections onto F depend on the
probabilities, so they use one group per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from embgeo.core.validate import check_dense_size
from embgeo.ntp.data import NTPData


class Coordinates:
    """H̄ = K Bᵀ with K (m × r) the contexts' coordinates and B (d × r) orthonormal, r = rank H̄.

    B is held in one of three ways (the solvers only see K; :meth:`to_w` and :meth:`to_coords`
    map between W and X = W B):

    * identity (K = H̄, r = d) when d ≤ m and H̄ has full column rank, the usual real-data case;
    * Cholesky: K = chol(H̄ H̄ᵀ), lower triangular (r = m), and B = H̄ᵀ K⁻ᵀ, never formed, when
      d > m and cond(H̄) ≤ CHOLESKY_MAX_COND (forming the Gram then costs at most ~1e-8 relative);
    * explicit B from a pivoted QR of H̄ᵀ otherwise (rank-deficient or ill-conditioned H̄).
    """

    def __init__(self, K: np.ndarray, *, basis: np.ndarray | None = None, H: np.ndarray | None = None):
        self.K = K
        self.basis = basis  # explicit B, or None
        self._H = H  # set in the Cholesky representation

    @property
    def rank(self) -> int:
        """r = rank H̄."""
        return self.K.shape[1]

    @cached_property
    def gram(self) -> np.ndarray:
        """G = K Kᵀ = H̄ H̄ᵀ (m × m), computed once."""
        return self.K @ self.K.T

    def to_coords(self, W: np.ndarray) -> np.ndarray:
        """X = W B (V × r): the part of W that the constraints see."""
        if self._H is not None:
            return sla.solve_triangular(self.K, (W @ self._H.T).T, lower=True, check_finite=False).T
        return W if self.basis is None else W @ self.basis

    @property
    def d(self) -> int:
        """The embedding dimension d of H̄ (m × d)."""
        if self._H is not None:
            return self._H.shape[1]
        return self.K.shape[1] if self.basis is None else self.basis.shape[0]

    def to_w(self, X: np.ndarray) -> np.ndarray:
        """W = X Bᵀ (V × d); refused (TooLargeError) before it is allocated when above the dense budget."""
        check_dense_size("W (V × d) in the embedding space", (X.shape[0], self.d),
                         "the theory objects are matrices of the embeddings' size; use a smaller d")
        if self._H is not None:
            return sla.solve_triangular(self.K, X.T, lower=True, trans="T", check_finite=False).T @ self._H
        return X if self.basis is None else X @ self.basis.T

    def solve_logits(self, Z: np.ndarray) -> np.ndarray:
        """X (n, m) with X Kᵀ = Z, when r = m (K square and invertible)."""
        if self._H is not None:
            return sla.solve_triangular(self.K, Z.T, lower=True, check_finite=False).T
        return np.linalg.solve(self.K, Z.T).T


#: The Cholesky representation of :class:`Coordinates` is used up to this condition number of H̄.
CHOLESKY_MAX_COND = 1e4


def coordinates(H: np.ndarray) -> Coordinates:
    """Context coordinates of the embeddings H̄ (m, d); cost O(m d min(m, d)).

    Rank decisions use the threshold of ``numpy.linalg.matrix_rank`` (σ > σ_max · max(m, d) · eps,
    read off the diagonal of a QR or Cholesky factor).
    """
    m, d = H.shape
    eps_rank = max(m, d) * np.finfo(float).eps
    if d <= m:
        diag = np.abs(np.diag(np.linalg.qr(H, mode="r")))
        if diag.size and diag.min() > diag.max() * eps_rank:
            return Coordinates(H)
    else:
        try:
            gram = H @ H.T
            K = np.linalg.cholesky(gram)
            rcond = sla.lapack.dtrcon(K, uplo="L")[0]
            if rcond > 1.0 / CHOLESKY_MAX_COND:
                coords = Coordinates(K, H=H)
                coords.gram = gram  # K Kᵀ = H̄ H̄ᵀ: keep the one already computed
                return coords
        except np.linalg.LinAlgError:
            pass  # rank H̄ < m
    Q, R, piv = sla.qr(H.T, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    r = int(np.sum(diag > diag[0] * eps_rank)) if diag.size and diag[0] > 0 else 0
    K = np.empty((m, r))
    K[piv] = R[:r].T
    return Coordinates(K, basis=Q[:, :r])


@dataclass(frozen=True)
class TokenGroups:
    """Tokens grouped by support pattern J_v = {j : v ∈ S_j}.

    Attributes
    ----------
    token_group : (V,) int, the group of each token.
    size : (G,) int, the number of tokens n_g in each group (its weight in ‖W‖²).
    representative : (G,) int, the smallest token id of each group.
    pattern : scipy.sparse.csr_matrix (G, m), 0/1 with sorted indices: row g is J_g.
    empty : int or None, the group of the tokens that are in no support (J = ∅).
    """

    token_group: np.ndarray
    size: np.ndarray
    representative: np.ndarray
    pattern: sp.csr_matrix
    empty: int | None

    @property
    def n_groups(self) -> int:
        return len(self.size)

    def expand(self, Xg: np.ndarray) -> np.ndarray:
        """Token rows (V, r) from group rows (G, r): every token gets its group's row."""
        return Xg[self.token_group]


def token_groups(data: NTPData) -> TokenGroups:
    """Group the V tokens by support pattern J_v = {j : v ∈ S_j}; O(N + V) with N = Σ_j S_j.

    Not :func:`embgeo.ntp.measure.geometry.support_groups`, which groups the *contexts* by their support set S_j."""
    Pt = data.probs.T.tocsr()
    Pt.sort_indices()
    index: dict[bytes, int] = {}
    token_group = np.empty(data.V, dtype=np.int64)
    for v in range(data.V):
        key = Pt.indices[Pt.indptr[v]:Pt.indptr[v + 1]].tobytes()
        token_group[v] = index.setdefault(key, len(index))
    G = len(index)
    size = np.bincount(token_group, minlength=G)
    representative = np.full(G, data.V, dtype=np.int64)
    np.minimum.at(representative, token_group, np.arange(data.V))
    rows = [np.frombuffer(key, dtype=Pt.indices.dtype) for key in index]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int64) if indptr[-1] else np.zeros(0, dtype=np.int64)
    pattern = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(G, data.m))
    empty = index.get(b"")
    return TokenGroups(token_group, size, representative, pattern, empty)


def token_pattern(data: NTPData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The support pairs (v, j), v ∈ S_j, sorted by (v, j), with log p̂_{j,v}: arrays (N,) each.

    This is the equality pattern of (4)/(6a) in t-form with one group per token.
    """
    P = data.probs.tocoo()
    order = np.lexsort((P.row, P.col))
    return P.col[order].astype(np.int64), P.row[order].astype(np.int64), np.log(P.data[order])


def anchor_rows(data: NTPData) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The Σ_j (S_j − 1) anchor rows of (4): (ctx, anchor, token, log(p̂_{j,anchor}/p̂_{j,token})).

    The paper's anchor form (Sec. 3, "independence of the constraints"); used to report residuals
    of (4) and (6a) in the paper's own terms.
    """
    P = data.probs
    ctx = np.repeat(np.arange(data.m), data.support_sizes)
    tok = P.indices.astype(np.int64)
    anchor = data.anchors[ctx]
    keep = tok != anchor
    p_anchor = P.max(axis=1).toarray().ravel()[ctx]
    return ctx[keep], anchor[keep], tok[keep], np.log(p_anchor[keep]) - np.log(P.data[keep])


#: :func:`group_dots` loops over the groups where they hold at least this many pairs on average.
GROUP_LOOP_PAIRS = 64


def row_chunk(r: int) -> int:
    """Rows per chunk when gathering rows of length r: chunks of ~1 MB stay in cache."""
    return max(64, 2**17 // max(r, 1))


def row_dots(X: np.ndarray, K: np.ndarray, grp: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """x_{grp_i}ᵀ k_{ctx_i} for every pair i, in chunks (no |Q| × r temporary)."""
    out = np.empty(len(grp))
    step = row_chunk(K.shape[1])
    for s in range(0, len(grp), step):
        e = min(s + step, len(grp))
        out[s:e] = np.einsum("ij,ij->i", X[grp[s:e]], K[ctx[s:e]])
    return out


def group_dots(X: np.ndarray, K: np.ndarray, ptr: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """x_gᵀk_{ctx_i} for pairs sorted by group: group g's pairs are ptr[g]:ptr[g + 1] ((G + 1,) pointers).

    Where the groups hold many pairs each, per group one gather of its contexts' rows and one matrix-vector
    product (in chunks): no gathered copy of X per pair, which made :func:`row_dots` twice as slow on 460,000
    pairs in 910 groups (81 ms against 39 ms, r = 128). With few pairs per group the loop's own cost dominates
    (30,000 pairs in 1000 groups: 6.3 ms against 2.5 ms; 100,000 in 1000: 6.5 ms against 8.6 ms), so groups of fewer
    than GROUP_LOOP_PAIRS pairs on average go to :func:`row_dots`.
    """
    sizes = np.diff(ptr)
    groups = np.flatnonzero(sizes)
    if len(ctx) < GROUP_LOOP_PAIRS * len(groups):
        return row_dots(X, K, np.repeat(np.arange(len(sizes)), sizes), ctx)
    out = np.empty(len(ctx))
    step = row_chunk(K.shape[1])
    for g in groups:
        a, b = ptr[g], ptr[g + 1]
        for s in range(a, b, step):
            e = b if b - s <= step else s + step
            out[s:e] = K[ctx[s:e]] @ X[g]
    return out
