"""NTP-separability (Def. 2) at a real LM's size by the squared hinge, decided with a certificate either way.

In the t-form of :mod:`embgeo.ntp.constraints` over token groups g (tokens with the same contexts J_g; every
token that is never a next token falls in one group, so the problem's size is the number of distinct next
tokens, not V). With whitened context coordinates Q = K R⁻¹ (m × r, K = QR, scaled so that QᵀQ = (m/r)·I)
and rows y_g = R x_g, the logits are unchanged (y_gᵀq_j = x_gᵀk_j), and

    φ(Y, t) = ½ Σ_{(g,j): g ∉ S_j} (1 − t_j + y_gᵀq_j)₊²  +  ½ Σ_{(g,j): g ∈ S_j} (y_gᵀq_j − t_j)²

is ≥ 0 and vanishes exactly at the separators: tied supports (6a) and every off-support margin ≥ 1 (6b).
So min φ = 0 iff the data are NTP-separable. At a minimiser with φ > 0 the residuals λ_gj = (1 − t_j +
y_gᵀq_j)₊ ≥ 0 off the supports and ν_gj = y_gᵀq_j − t_j on them satisfy ∇φ = 0:

    Σ_j λ_gj q_j + Σ_j ν_gj q_j = 0 for every g,  and  Σ_g λ_gj + Σ_g ν_gj = 0 for every j,

which is a Farkas matrix Ψ = (−λ off, −ν on) of :mod:`embgeo.ntp.svm_dual`'s form (Σ_off λ = 2φ +
‖ν‖² > 0). The whitening changes neither question nor certificate (Ψ Q = 0 ⟺ Ψ K = 0); it only
makes the minimisation as well conditioned as the supports allow (a real LM's final states have a
condition number in the hundreds, which slowed L-BFGS on K a hundredfold).

The minimisation (L-BFGS, each step one pass over the m × G logits in blocks of contexts) is not the
certificate; every answer is checked on the full problem by the existing routes:

* separable: the iterate's rows, tie-projected exactly (:meth:`SVMDual.primal_from`), have a positive
  smallest margin on a full scan, and are rescaled to margin 1 (:func:`separability.separable_result`);
* not separable: the LP of :mod:`embgeo.ntp.separability_lp` restricted to the off-support pairs with
  λ > 0 at the iterate (a few thousand at most where the run stalls) is infeasible; its duals, completed
  by :meth:`SVMDual.farkas_from`, are a Farkas matrix of the whole problem (a subsystem that has no
  solution certifies the system).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.optimize as so
import scipy.sparse as sp

#: Logit blocks of at most this many entries (8 bytes each) in one pass of φ and its gradient.
BLOCK_ENTRIES = 8_000_000
#: Try the separating certificate (a tie projection and a full scan) every this many L-BFGS steps.
CHECK_EVERY = 10
#: L-BFGS memory.
MEMORY = 20
#: φ has stalled (a Farkas certificate is tried) when it fell less than this fraction over the last
#: ``STALL_WINDOW`` steps while staying above zero.
STALL_DROP = 1e-3
STALL_WINDOW = 30
#: At most this many off-support pairs in the restricted LP that certifies non-separability.
LP_PAIRS = 20_000


@dataclass
class HingeProblem:
    """φ over whitened coordinates: Q (m, r), the support pattern by context, its pairs."""

    Q: np.ndarray  # (m, r), QᵀQ = (m/r)·I
    R: np.ndarray  # (r, r), K = Q R / s (the thin QR of K)
    support: sp.csr_matrix  # (m, G) 0/1: the supports S_j by context
    s: float

    @property
    def shape(self) -> tuple[int, int, int]:
        m, r = self.Q.shape
        return m, self.support.shape[1], r


def whiten(K: np.ndarray, pattern: sp.csr_matrix) -> HingeProblem:
    """Q = K R⁻¹ · sqrt(m/r) from the thin QR of K (m, r); ``pattern`` (G, m) the token groups' contexts."""
    m, r = K.shape
    Q, R = np.linalg.qr(K)
    s = np.sqrt(m / r)
    support = sp.csr_matrix(pattern.T)
    support.sort_indices()
    return HingeProblem(Q * s, R, support, s)


def to_k_rows(hp: HingeProblem, Y: np.ndarray) -> np.ndarray:
    """Rows X (G, r) in K's coordinates with the same logits as Y in Q's: X Kᵀ = Y Qᵀ."""
    # K = Q_0 R with Q = s Q_0: Y Qᵀ = s Y Q_0ᵀ = s Y R⁻ᵀ Kᵀ, so X = s Y R⁻ᵀ, i.e. Xᵀ = s R⁻¹ Yᵀ.
    from scipy.linalg import solve_triangular

    return hp.s * solve_triangular(hp.R, Y.T, lower=False).T


def value_and_grad(hp: HingeProblem, Y: np.ndarray, t: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """φ(Y, t) and its gradient ((G, r), (m,)), in blocks of contexts (at most BLOCK_ENTRIES logits)."""
    m, G, r = hp.shape
    rows = max(1, BLOCK_ENTRIES // max(G, 1))
    val, gY, gt = 0.0, np.zeros((G, r)), np.empty(m)
    for lo in range(0, m, rows):
        hi = min(m, lo + rows)
        Qb = hp.Q[lo:hi]
        L = Qb @ Y.T  # (b, G) logits
        on = hp.support[lo:hi]
        ri, ci = on.nonzero()
        tie = L[ri, ci] - t[lo + ri]  # ν on the supports
        np.subtract(L, t[lo:hi, None] - 1.0, out=L)
        np.maximum(L, 0.0, out=L)  # λ off the supports (the support entries are overwritten next)
        L[ri, ci] = 0.0
        val += 0.5 * (np.vdot(L, L) + tie @ tie)
        L[ri, ci] = tie
        gt[lo:hi] = -L.sum(axis=1)
        gY += L.T @ Qb
    return val, gY, gt


def off_residuals(hp: HingeProblem, Y: np.ndarray, t: np.ndarray, limit: int) -> tuple[np.ndarray, ...]:
    """The off-support pairs with λ_gj > 0 (at most ``limit`` largest): (groups, contexts, λ)."""
    m, G, _ = hp.shape
    rows = max(1, BLOCK_ENTRIES // max(G, 1))
    gs, js, ls = [], [], []
    for lo in range(0, m, rows):
        hi = min(m, lo + rows)
        L = hp.Q[lo:hi] @ Y.T
        np.subtract(L, t[lo:hi, None] - 1.0, out=L)
        on = hp.support[lo:hi]
        ri, ci = on.nonzero()
        L[ri, ci] = 0.0
        jj, gg = np.nonzero(L > 0)
        gs.append(gg)
        js.append(jj + lo)
        ls.append(L[jj, gg])
    g, j, lam = np.concatenate(gs), np.concatenate(js), np.concatenate(ls)
    if len(lam) > limit:
        keep = np.argpartition(-lam, limit - 1)[:limit]
        g, j, lam = g[keep], j[keep], lam[keep]
    return g, j, lam


@dataclass
class HingeRun:
    """Where the minimisation of φ stopped: rows Y (G, r) in whitened coordinates, ties t (m,), φ, steps."""

    Y: np.ndarray
    t: np.ndarray
    value: float
    steps: int
    stalled: bool
    seconds: float


def minimise(hp: HingeProblem, *, deadline: float | None = None, check: Callable[[np.ndarray, np.ndarray], bool]
             | None = None, progress: Callable[[int, dict], object] | None = None,
             start: tuple[np.ndarray, np.ndarray] | None = None) -> HingeRun:
    """L-BFGS on φ from zero (or ``start``) until φ = 0, a stall, the deadline, or ``check(Y, t)`` says stop.

    ``check`` is called every CHECK_EVERY steps (e.g. the separating certificate); ``progress(step, info)``
    likewise, with info = {"phi": φ, "seconds": elapsed}.
    """
    m, G, r = hp.shape
    t0 = time.perf_counter()
    z0 = np.zeros(G * r + m) if start is None else np.concatenate([start[0].ravel(), start[1]])
    history: list[float] = []
    state = {"z": z0, "value": np.inf, "stop": None, "steps": 0}

    def fun(z):
        val, gY, gt = value_and_grad(hp, z[:G * r].reshape(G, r), z[G * r:])
        return val, np.concatenate([gY.ravel(), gt])

    def callback(intermediate_result):
        state["steps"] += 1
        z, val = intermediate_result.x, float(intermediate_result.fun)
        state["z"], state["value"] = z, val
        history.append(val)
        if val == 0.0:
            state["stop"] = "zero"
        elif len(history) > STALL_WINDOW and history[-1] > (1 - STALL_DROP) * history[-1 - STALL_WINDOW]:
            state["stop"] = "stalled"
        elif state["steps"] % CHECK_EVERY == 0:
            if progress is not None:
                progress(state["steps"], {"phi": val, "seconds": time.perf_counter() - t0})
            if check is not None and check(z[:G * r].reshape(G, r), z[G * r:]):
                state["stop"] = "check"
        if state["stop"] is None and deadline is not None and time.perf_counter() > deadline:
            state["stop"] = "deadline"
        if state["stop"] is not None:
            raise StopIteration

    res = so.minimize(fun, z0, jac=True, method="L-BFGS-B", callback=callback,
                      options={"maxiter": 10**9, "maxfun": 10**9, "gtol": 0.0, "ftol": 0.0, "maxcor": MEMORY})
    z = res.x if state["steps"] == 0 else state["z"]
    # L-BFGS ending on its own (no step decreases φ: a line-search failure or a zero projected gradient) is a
    # stall too: the iterate is a minimiser to the precision that the line search can see
    stalled = state["stop"] in ("stalled", None)
    return HingeRun(z[:G * r].reshape(G, r), z[G * r:], float(res.fun if state["steps"] == 0 else state["value"]),
                    state["steps"], stalled, time.perf_counter() - t0)


def separating_margin(pb, solver, hp: HingeProblem, Y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The smallest off-support margin of the iterate after the exact tie projection (one full scan), with
    the projected rows X (G, r) in K's coordinates and ties t (m,): γ > 0 makes X/γ a certificate."""
    from embgeo.ntp.scan import scan_off_support

    X, t = solver.primal_from(to_k_rows(hp, Y))
    gamma = scan_off_support(X, t, pb.K, pb.groups.pattern.tocsc()).min_margin
    return float(gamma), X, t
