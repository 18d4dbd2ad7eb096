"""The normalized NTP-margin of a decoder (Def. 3, max-margin form): how well P_⊥(W) separates the supports."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from embgeo.errors import InputError
from embgeo.ntp.data import NTPData, check_W
from embgeo.ntp.theory.subspace import Subspace
from embgeo.ntp.units import unit_scale


def ntp_margin(data: NTPData, W: ArrayLike, subspace_: Subspace | None = None, *,
               perp: np.ndarray | None = None) -> float:
    """Normalized NTP-margin of P_⊥(W) (Def. 3, max-margin form):

    min_{j, z∈S_j, v∉S_j} (e_z - e_v)ᵀ P_⊥(W) h̄_j / ‖P_⊥(W)‖.

    Equals 1/‖W^mm‖ at W = W^mm and is at most that for every W. Returns 0.0 when P_⊥(W) = 0.
    Evaluated in blocks of contexts (never an (m, V) array), on H̄ in unit scale and, when its largest entry is far
    from 1, P_⊥(W) divided by it (the margin is homogeneous of degree 0 in W and 1 in H̄): no overflow at any units,
    and no V × d copy at ordinary ones (1.25 GiB at Gemma 3's V = 262,144; issue 38).
    ``perp``: P_⊥(W) (V, d) when the caller has it already (the probe's alignment projects W once for both).
    """
    if perp is None:
        Wp = (subspace_ or Subspace(data)).project_perp(W)
    else:
        Wp = check_W(data, perp)
    top = max(float(np.max(Wp, initial=0.0)), -float(np.min(Wp, initial=0.0)))  # no |Wp| temporary (V × d)
    if top == 0:
        return 0.0
    if not 1e-100 <= top <= 1e100:
        Wp = Wp / top  # the norm's squares and the logits kept from overflow and underflow (a copy)
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
