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
#: Semismooth Newton steps (each a new active set) tried after every NEWTON_EVERY L-BFGS steps.
NEWTON_ROUNDS = 4
NEWTON_EVERY = 50
#: ... that lowered φ by less than this fraction (L-BFGS runs on, keeping its curvature pairs, while it does better:
#: restarting it every 50 steps left φ = 630 after 200 steps at m = 10,000 where one run reached 172).
NEWTON_WHEN_DROP = 0.1
#: The least-squares matrix of a Newton step holds at most this many rows (active pairs and ties; r + 1 nonzeros
#: each: 2 million rows of r = 576 are about 14 GB, so 400,000 rows about 2.8 GB).
NEWTON_MAX_ROWS = 400_000
#: At most this many off-support pairs in the restricted LP that certifies non-separability.
LP_PAIRS = 20_000


@dataclass
class HingeProblem:
    """φ over whitened coordinates: Q (m, r), the support pattern by context, its pairs."""

    Q: np.ndarray  # (m, r), QᵀQ = (m/r)·I
    R: np.ndarray  # (r, r), K = Q R / s (the thin QR of K)
    support: sp.csr_matrix  # (m, G) 0/1: the supports S_j by context
    s: float
    Q32: np.ndarray | None = None  # Q in float32 for the bulk passes (see :func:`value_and_grad`)

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


def value_and_grad(hp: HingeProblem, Y: np.ndarray, t: np.ndarray, *,
                   single: bool = False) -> tuple[float, np.ndarray, np.ndarray]:
    """φ(Y, t) and its gradient ((G, r), (m,)), in blocks of contexts (at most BLOCK_ENTRIES logits).

    ``single``: the two products (logits and gradient) in float32 — half the time of float64 on one core, with
    relative errors ~1e-6 in φ and ∇φ: for the bulk of the descent, never for a certificate (the certificates
    are float64 passes of their own). Sums are accumulated in float64 either way."""
    m, G, r = hp.shape
    rows = max(1, BLOCK_ENTRIES // max(G, 1))
    val, gY, gt = 0.0, np.zeros((G, r)), np.empty(m)
    if single and hp.Q32 is None:
        hp.Q32 = hp.Q.astype(np.float32)
    Qs, Ys = (hp.Q32, Y.astype(np.float32)) if single else (hp.Q, Y)
    ts = t.astype(Ys.dtype)
    for lo in range(0, m, rows):
        hi = min(m, lo + rows)
        Qb = Qs[lo:hi]
        L = Qb @ Ys.T  # (b, G) logits
        on = hp.support[lo:hi]
        ri, ci = on.nonzero()
        tie = (L[ri, ci] - ts[lo + ri]).astype(np.float64)  # ν on the supports
        np.subtract(L, ts[lo:hi, None] - 1.0, out=L)
        np.maximum(L, 0.0, out=L)  # λ off the supports (the support entries are overwritten next)
        L[ri, ci] = 0.0
        flat = L.ravel()
        val += 0.5 * ((float(np.einsum("i,i->", flat, flat, dtype=np.float64)) if single else float(flat @ flat))
                      + tie @ tie)
        L[ri, ci] = tie
        gt[lo:hi] = -L.sum(axis=1, dtype=np.float64)
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
    """Where the minimisation of φ stopped: rows Y (G, r) in whitened coordinates, ties t (m,), φ there, steps."""

    Y: np.ndarray
    t: np.ndarray
    phi: float
    steps: int
    stalled: bool
    elapsed_seconds: float
    slowed: bool = False


def minimise(hp: HingeProblem, *, deadline: float | None = None, check: Callable[[np.ndarray, np.ndarray], bool]
             | None = None, progress: Callable[[int, dict], object] | None = None,
             start: tuple[np.ndarray, np.ndarray] | None = None, single: bool = False,
             max_steps: int | None = None, slow: tuple[int, float] | None = None) -> HingeRun:
    """L-BFGS on φ from zero (or ``start``) until φ = 0, a stall, the deadline, or ``check(Y, t)`` says stop.

    ``single``: φ and ∇φ with float32 products (:func:`value_and_grad`); a stall then only means that float32
    cannot see further (the caller goes on in float64). ``slow`` = (window, drop): also stop (``slowed``) when φ fell
    by less than ``drop`` over the last ``window`` steps — the caller's cue for a Newton step, without restarting
    L-BFGS (and losing its curvature pairs) while it still makes progress.

    ``check`` is called every CHECK_EVERY steps (e.g. the separating certificate); ``progress(step, info)``
    likewise, with info = {"phi": φ, "seconds": elapsed}.
    """
    m, G, r = hp.shape
    t0 = time.perf_counter()
    z0 = np.zeros(G * r + m) if start is None else np.concatenate([start[0].ravel(), start[1]])
    history: list[float] = []
    state = {"z": z0, "value": np.inf, "stop": None, "steps": 0}

    def fun(z):
        val, gY, gt = value_and_grad(hp, z[:G * r].reshape(G, r), z[G * r:], single=single)
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
        if state["stop"] is None and max_steps is not None and state["steps"] >= max_steps:
            state["stop"] = "steps"
        if (state["stop"] is None and slow is not None and len(history) > slow[0]
                and history[-1] > (1 - slow[1]) * history[-1 - slow[0]]):
            state["stop"] = "slowed"
        if state["stop"] is not None:
            raise StopIteration

    res = so.minimize(fun, z0, jac=True, method="L-BFGS-B", callback=callback,
                      options={"maxiter": 10**9, "maxfun": 10**9, "gtol": 0.0, "ftol": 0.0, "maxcor": MEMORY})
    z = res.x if state["steps"] == 0 else state["z"]
    # L-BFGS ending on its own (no step decreases φ: a line-search failure or a zero projected gradient) is a
    # stall too: the iterate is a minimiser to the precision that the line search can see
    stalled = state["stop"] in ("stalled", None)
    return HingeRun(z[:G * r].reshape(G, r), z[G * r:], float(res.fun if state["steps"] == 0 else state["value"]),
                    state["steps"], stalled, time.perf_counter() - t0, state["stop"] == "slowed")


def separating_margin(pb, solver, hp: HingeProblem, Y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The smallest off-support margin of the iterate after the exact tie projection (one full scan), with
    the projected rows X (G, r) in K's coordinates and ties t (m,): γ > 0 makes X/γ a certificate."""
    from embgeo.ntp.scan import scan_off_support

    X, t = solver.primal_from(to_k_rows(hp, Y))
    gamma = scan_off_support(X, t, pb.K, pb.groups.pattern.tocsc()).min_margin
    return float(gamma), X, t


#: Steps 1, ½, ¼, … tried along a Newton direction.
LINE_SEARCH_STEPS = 8
#: LSQR iterations between two looks at the deadline in :func:`newton_step`.
LSQR_CHUNK = 50


def active_rows(hp: HingeProblem, g: np.ndarray, j: np.ndarray) -> sp.csr_matrix:
    """The rows of φ's residuals on the pairs (g, j) as a sparse (n, G·r + m) matrix: q_j at y_g, −1 at t_j.

    Off the supports the residual is this row times (Y, t) plus 1, on them (a tie) the row times (Y, t)."""
    m, G, r = hp.shape
    n = len(g)
    data = np.hstack([hp.Q[j], -np.ones((n, 1))])
    cols = np.hstack([g[:, None].astype(np.int64) * r + np.arange(r), (G * r + j)[:, None].astype(np.int64)])
    return sp.csr_matrix((data.ravel(), cols.ravel(), np.arange(0, n * (r + 1) + 1, r + 1)), shape=(n, G * r + m))


def newton_step(hp: HingeProblem, Y: np.ndarray, t: np.ndarray, phi: float, *,
                active: tuple[np.ndarray, np.ndarray] | None = None, deadline: float | None = None,
                max_iter: int = 300) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The semismooth Newton step of φ at (Y, t): on the pairs active there (λ > 0 off the supports, every tie)
    φ is the quadratic ½‖A z − b‖², whose minimiser is a linear least-squares problem (LSQR, warm-started at
    the current point, up to ``max_iter`` iterations or the deadline). When the active set is that of a minimiser
    this is the minimiser itself; its residuals are then the Farkas weights (Aᵀρ = 0) to LSQR's precision.
    ``phi`` is φ(Y, t); ``active`` the off-support pairs (g, j) with λ > 0 at (Y, t) when the caller has them (else
    one pass finds them). Returns (Y, t, φ) of the point :func:`_line_search` picks, or None when the active pairs
    and ties are more than NEWTON_MAX_ROWS."""
    m, G, r = hp.shape
    from scipy.sparse.linalg import lsqr

    g, j = active if active is not None else off_residuals(hp, Y, t, limit=np.iinfo(np.int64).max)[:2]
    tie_j, tie_g = hp.support.nonzero()
    if len(g) + len(tie_g) > NEWTON_MAX_ROWS:
        return None
    A = active_rows(hp, np.concatenate([g, tie_g]), np.concatenate([j, tie_j]))
    b = np.concatenate([-np.ones(len(g)), np.zeros(len(tie_g))])
    z = np.concatenate([Y.ravel(), t])
    done = 0
    if not np.any(A @ z - b):
        return Y, t, phi  # every active residual is already zero: the least-squares minimiser is here
    while done < max_iter:
        with np.errstate(divide="ignore", invalid="ignore"):  # LSQR divides by a residual that can reach 0
            out = lsqr(A, b, atol=1e-15, btol=1e-15, iter_lim=LSQR_CHUNK, x0=z)
        if not np.all(np.isfinite(out[0])):
            break
        z, done = out[0], done + out[2]
        if out[1] in (1, 2, 4, 5) or (deadline is not None and time.perf_counter() > deadline):
            break  # 1, 2, 4, 5: LSQR's tolerances met (the least-squares solution to rounding)
    return _line_search(hp, Y, t, phi, z[:G * r].reshape(G, r), z[G * r:])


def _line_search(hp: HingeProblem, Y: np.ndarray, t: np.ndarray, phi0: float, Yn: np.ndarray, tn: np.ndarray):
    """(Y, t, φ) of the point on the segment from (Y, t) (where φ = ``phi0``) to the Newton point with the least φ
    among steps 1, ½, ¼, … (φ is convex, so the first step that decreases it after a larger one that did not is near
    the best): the Newton point of a wrong active set can be far worse than its start (semismooth Newton needs this
    globalisation)."""
    best = None
    step = 1.0
    for _ in range(LINE_SEARCH_STEPS):
        Ya, ta = Y + step * (Yn - Y), t + step * (tn - t)
        val = value_and_grad(hp, Ya, ta)[0]
        if val < phi0 and (best is None or val < best[2]):
            best = (Ya, ta, val)
        elif best is not None:
            break  # past the best along the segment
        step /= 2
    return (Y, t, phi0) if best is None else best
