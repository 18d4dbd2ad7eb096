"""Full passes over the off-support logits: every margin t_j − x_gᵀk_j of (6b), in blocks, never stored.

In the t-form of :mod:`embgeo.ntp.solvers.constraints` (group rows X, one t_j per context, coordinates K). Used to
certify a point feasible for every constraint, to find the violated pairs that grow a working set, and to read
the active set of W^mm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass
class Scan:
    """Result of :func:`scan_off_support`: the smallest off-support margin and the worst pairs.

    min_margin : min over all off-support (g, j) of t_j − x_gᵀk_j (inf if there is none).
    groups, contexts, margins : up to ``top`` pairs per context with margin < ``below``, the smallest
    first within each context, then every further pair with margin < ``every_below`` (each pair once).
    """

    min_margin: float
    groups: np.ndarray
    contexts: np.ndarray
    margins: np.ndarray


def scan_off_support(X: np.ndarray, t: np.ndarray, K: np.ndarray, support: sp.csc_matrix, *,
                     below: float = -np.inf, top: int = 0, every_below: float = -np.inf) -> Scan:
    """All off-support margins t_j − x_gᵀk_j, in column blocks (one GEMM each), never stored.

    ``support`` is the (G, m) 0/1 pattern in CSC form. ``top`` and ``below``: the ``top`` smallest margins
    of each context that are below ``below``; ``every_below``: besides those, every pair below it, however many
    a context has. Cost O(G m r); memory one (G × block) and the pairs returned.
    """
    G, m = support.shape
    block = _column_block(G, m)
    best = np.inf
    out_g, out_j, out_v = [], [], []
    for s in range(0, m, block):
        e = min(s + block, m)
        # (e - s, G) margins, one context per row: the per-context selection below then runs along contiguous
        # rows (along the columns of a (G, e - s) block it took 3× as long, a tenth of a quick ALM solve)
        M = t[s:e][:, None] - K[s:e] @ X.T
        cols = support[:, s:e]
        M[np.repeat(np.arange(e - s), np.diff(cols.indptr)), cols.indices] = np.inf
        if M.size:
            best = min(best, float(M.min()))
        if top and below > -np.inf:
            k = min(top, G)
            cand = np.argpartition(M, k - 1, axis=1)[:, :k] if k < G else np.argsort(M, axis=1)
            vals = np.take_along_axis(M, cand, axis=1)
            sel = vals < below
            jj = np.broadcast_to(np.arange(s, e)[:, None], cand.shape)
            out_g.append(cand[sel])
            out_j.append(jj[sel])
            out_v.append(vals[sel])
            if every_below > -np.inf:
                # the pairs below every_below that the per-context selection left out (it took them, if at all,
                # among each row's top k, so those are masked before the search)
                M[np.broadcast_to(np.arange(e - s)[:, None], cand.shape)[sel], cand[sel]] = np.inf
        if every_below > -np.inf:
            jr, gr = np.nonzero(M < every_below)  # (context in the block, group)
            out_g.append(gr)
            out_j.append(jr + s)
            out_v.append(M[jr, gr])
    return Scan(best, _cat(out_g, np.int64), _cat(out_j, np.int64), _cat(out_v, np.float64))


def largest_logits(X: np.ndarray, K: np.ndarray, exclude: np.ndarray | None = None) -> np.ndarray:
    """(m,): max_g x_gᵀk_j over the rows of X (G, r) but ``exclude`` (row indices) for every context j of K (m, r),
    −inf where no row is left; in column blocks as :func:`scan_off_support`, never storing G × m nor a copy of the
    rows kept. Cost O(G m r); memory one (G × block)."""
    G, m = X.shape[0], K.shape[0]
    out = np.full(m, -np.inf)
    if G == 0 or (exclude is not None and np.unique(exclude).size >= G):
        return out
    block = _column_block(G, m)
    for s in range(0, m, block):
        e = min(s + block, m)
        M = K[s:e] @ X.T
        if exclude is not None:
            M[:, exclude] = -np.inf
        out[s:e] = M.max(axis=1)
    return out


def _column_block(G: int, m: int) -> int:
    """Contexts per block of a pass over G rows' logits: a (G × block) float64 array of at most 64 MiB."""
    return max(1, min(m, (64 * 1024**2) // (8 * max(G, 1))))


def _cat(parts: list, dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)
