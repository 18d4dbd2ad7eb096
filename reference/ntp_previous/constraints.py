"""The anchor-form constraint operators of the compatibility (4) and separability (6) conditions.

Paper: ``ntp-implicit-bias-neurips.txt`` Sec. 3. Every constraint row i reads
``(e_{a_i} - e_{b_i})ᵀ W h̄_{j_i}``: the logit of token a_i minus the logit of token b_i at
context j_i. With an anchor z_j ∈ S_j per context (Sec. 3, "independence of the constraints"):

* equality rows (4)/(6a): a = z_j, b ∈ S_j \\ {z_j}, right-hand side log(p̂_{j,a} / p̂_{j,b});
* inequality rows (6b): a = z_j, b = v ∉ S_j, right-hand side ≥ 1.

Structure we exploit (never building the dense (#rows × V·d) matrix):

* A row only sees W through the logits Z = W H̄ (V × m), so applying the operator costs one
  matrix product and a gather.
* The adjoint of a row vector y is ``Aᵀy = Ψ H`` with Ψ ∈ R^{V×m} a scatter of y
  (Ψ[a_i, j_i] += y_i, Ψ[b_i, j_i] -= y_i). Every solution we compute (W*, P_F, W^mm) is of the
  form Ψ H, so the solvers work with Ψ and the m × m Gram matrix G = H Hᵀ: d disappears.
* The Gram matrix of two row sets is ``(D_a D_bᵀ) ∘ G[j_a][:, j_b]`` with D the ±1 token-difference
  rows, since ⟨(e_a - e_b) h_jᵀ, (e_c - e_e) h_lᵀ⟩ = (δ_ac - δ_ae - δ_bc + δ_be) h_jᵀh_l.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embgeo.core.validate import check_dense_size
from embgeo.ntp.data import NTPData


@dataclass(frozen=True)
class Rows:
    """A set of constraint rows ``(e_plus - e_minus)ᵀ W h̄_ctx``; arrays of equal length."""

    ctx: np.ndarray
    plus: np.ndarray
    minus: np.ndarray

    def __len__(self) -> int:
        return len(self.ctx)

    def values(self, Z: np.ndarray) -> np.ndarray:
        """Row values from the logits Z = W H̄ of shape (V, m)."""
        return Z[self.plus, self.ctx] - Z[self.minus, self.ctx]

    def adjoint(self, y: np.ndarray, V: int, m: int) -> np.ndarray:
        """Ψ (V, m) with Aᵀy = Ψ H: the scatter of the row weights y."""
        flat = np.bincount(self.plus * m + self.ctx, weights=y, minlength=V * m)
        flat -= np.bincount(self.minus * m + self.ctx, weights=y, minlength=V * m)
        return flat.reshape(V, m)

    def gram(self, other: Rows, G: np.ndarray) -> np.ndarray:
        """Dense Gram matrix ⟨row_i, other_k⟩ of shape (len(self), len(other))."""
        check_dense_size("constraint Gram matrix", (len(self), len(other)),
                         "the problem has too many constraint rows for the dense route")
        pa, ma = self.plus[:, None], self.minus[:, None]
        pb, mb = other.plus[None, :], other.minus[None, :]
        tokens = (pa == pb).astype(float) - (pa == mb) - (ma == pb) + (ma == mb)
        return tokens * G[np.ix_(self.ctx, other.ctx)]


def equality_rows(data: NTPData) -> tuple[Rows, np.ndarray]:
    """The Σ_j (S_j - 1) anchor rows of (4)/(6a) and their right-hand sides log(p̂_{j,z_j}/p̂_{j,z'})."""
    P = data.probs
    ctx = np.repeat(np.arange(data.m), data.support_sizes)
    tok = P.indices.astype(np.int64)
    anchor = data.anchors[ctx]
    keep = tok != anchor
    p_anchor = P.max(axis=1).toarray().ravel()[ctx]  # the anchor is the most probable token
    rhs = np.log(p_anchor[keep]) - np.log(P.data[keep])
    return Rows(ctx[keep], anchor[keep], tok[keep]), rhs


def inequality_rows(data: NTPData) -> Rows:
    """The Σ_j (V - S_j) anchor rows of (6b): anchor z_j against every off-support v."""
    off = ~data.support_mask()
    ctx, v = np.nonzero(off)
    return Rows(ctx.astype(np.int64), data.anchors[ctx], v.astype(np.int64))


def gram(data: NTPData) -> np.ndarray:
    """G = H̄ᵀH̄ (m, m): the inner products of the context embeddings."""
    check_dense_size("embedding Gram matrix", (data.m, data.m))
    H = data.embeddings
    return H @ H.T
