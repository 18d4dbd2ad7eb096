"""Projection onto the dual set of the NTP-SVM: {Ψ : Σ_g Ψ_{gj} = 0 per context j, Ψ_{gj} ≤ 0 off the supports}.

The projection step of the accelerated projected gradient in :mod:`embgeo.ntp.solvers.svm_dual`, on a sparse working
set (:func:`project_dual`) or on every group × context pair (:func:`project_dual_dense`).
"""

from __future__ import annotations

import numpy as np


def project_dual(z: np.ndarray, weight: np.ndarray, ctx: np.ndarray, off: np.ndarray, m: int,
                 max_newton: int = 100) -> np.ndarray:
    """argmin_x Σ_i w_i⁻¹ (x_i − z_i)² s.t. Σ_{i: ctx_i = j} x_i = 0 for every j, x_i ≤ 0 where ``off``.

    (``weight`` = 1/L_i, the inverse metric.) The solution is x_i = z_i − τ_j w_i, clipped at 0 on
    off entries, with τ_j the root of the decreasing, concave, piecewise linear
    g_j(τ) = Σ_i x_i(τ). Newton's method started right of the root (τ₀ = the root without
    clipping, where g ≤ 0) stays right of it and ends in finitely many steps; O(|z|) per step,
    vectorised over all contexts, no sorting. Every context needs an entry that is not ``off``.
    """
    free = ~off
    w_free = np.bincount(ctx, weights=weight * free, minlength=m)
    tau = np.bincount(ctx, weights=z * free, minlength=m) / w_free
    for _ in range(max_newton):
        x = z - tau[ctx] * weight
        neg = free | (x < 0)
        x = np.where(neg, x, 0.0)
        g = np.bincount(ctx, weights=x, minlength=m)
        slope = np.bincount(ctx, weights=weight * neg, minlength=m)
        step = g / slope
        if not np.any(np.abs(step) > 1e-15 * (np.abs(tau) + 1e-300)):
            break
        tau = tau + step
    # Remove the rounding residue of the column sums on the free entries (keeps x ∈ K exactly).
    resid = np.bincount(ctx, weights=x, minlength=m) / w_free
    return x - np.where(free, resid[ctx] * weight, 0.0)



def project_dual_dense(z: np.ndarray, weight: np.ndarray, off: np.ndarray, tau: np.ndarray | None = None,
                       max_newton: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """:func:`project_dual` for a dense (G, m) array: columns are contexts, ``weight`` (G,) = 1/L_g.

    The same Newton iterations on every column at once, O(G m) per step, no sorting. Since each
    g_j is concave and decreasing, Newton converges from any start (a step from the left of the
    root lands right of it, from where it decreases monotonically), so ``tau`` from the previous
    call is a good start. A column stops when its step moves no entry of x by more than rounding
    (relative to τ_j, or to max |z| in absolute terms, so that a root at τ_j = 0 stops too), and the
    iterations go on over the columns still moving only (most stop after one to three steps).
    Returns (x, τ).
    """
    free = ~off
    w = weight[:, None]
    w_free = np.sum(np.where(free, w, 0.0), axis=0)
    tau = (np.sum(np.where(free, z, 0.0), axis=0) / w_free) if tau is None else np.array(tau, dtype=np.float64)
    atol = 1e-15 * max(float(np.max(np.abs(z), initial=0.0)), 1e-300) / max(float(np.max(weight)), 1e-300)
    cols = None  # all columns; else the indices of the columns still moving
    zc, offc, freec, wfc = z, off, free, w_free
    x = np.empty_like(z)
    for _ in range(max_newton):
        tc = tau if cols is None else tau[cols]
        xc = x if cols is None else np.empty_like(zc)
        np.multiply(tc, w, out=xc)
        np.subtract(zc, xc, out=xc)
        neg = xc < 0
        neg |= freec
        xc *= neg
        step = np.sum(xc, axis=0) / (wfc + np.sum(np.where(neg & offc, w, 0.0), axis=0))
        tc = tc + step
        if cols is None:
            tau = tc
        else:
            tau[cols] = tc
        moving = np.abs(step) > np.maximum(1e-15 * np.abs(tc), atol)
        if not moving.any():
            break
        if moving.sum() <= 0.5 * moving.size:  # gather the columns still moving
            cols = np.flatnonzero(moving) if cols is None else cols[moving]
            zc, offc, wfc = z[:, cols], off[:, cols], w_free[cols]
            freec = ~offc
    np.multiply(tau, w, out=x)
    np.subtract(z, x, out=x)
    x[off] = np.minimum(x[off], 0.0)
    x -= np.where(free, (np.sum(x, axis=0) / w_free) * w, 0.0)  # exact column sums
    return x, tau
