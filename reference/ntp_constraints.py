"""The generic reference of the NTP benchmarks: the paper's constraints on vec(W) as sparse matrices.

Anchor form (``ntp-implicit-bias-neurips.txt`` Sec. 3): for each context j, the anchor a_j (its most likely
token) against the rest of S_j in (4)/(6a), and against every v ∉ S_j in (6b); each row is
(e_plus − e_minus) ⊗ h̄_j in row-major vec(W). Nothing of embgeo's t-form, groups or coordinates is used.
"""

import numpy as np
import scipy.sparse as sp


def kron_rows(H: np.ndarray, ctx: np.ndarray, plus: np.ndarray, minus: np.ndarray, V: int) -> sp.csr_matrix:
    """Sparse rows (e_plus - e_minus) ⊗ h_ctx in row-major vec(W) coordinates, shape (n, V·d)."""
    n, d = len(ctx), H.shape[1]
    cols = np.concatenate([plus[:, None] * d + np.arange(d), minus[:, None] * d + np.arange(d)], axis=1)
    vals = np.concatenate([H[ctx], -H[ctx]], axis=1)
    return sp.csr_matrix((vals.ravel(), (np.repeat(np.arange(n), 2 * d), cols.ravel())), shape=(n, V * d))


def reference_constraints(data, pairs: tuple[np.ndarray, np.ndarray] | None = None
                          ) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix]:
    """A_eq, b (anchor vs the rest of S_j) and A_in (anchor vs every v ∉ S_j), built from the data.

    ``pairs`` = (j, v): the rows of A_in for these off-support pairs only (e.g. the active set of a known answer)."""
    P = data.probs.tocsr()
    V, H = data.V, data.embeddings
    ctx = np.repeat(np.arange(data.m), np.diff(P.indptr))
    tok, anchor = P.indices, data.anchors[ctx]
    keep = tok != anchor
    p_anchor = np.asarray(P[ctx, anchor]).ravel()
    b = np.log(p_anchor[keep] / P.data[keep])
    A_eq = kron_rows(H, ctx[keep], anchor[keep], tok[keep], V)
    if pairs is None:
        off = np.ones((data.m, V), dtype=bool)
        off[ctx, tok] = False
        j_in, v_in = np.nonzero(off)
    else:
        j_in, v_in = pairs
    A_in = kron_rows(H, j_in, data.anchors[j_in], v_in, V)
    return A_eq, b, A_in
