"""Structured solvers behind :func:`embgeo.ntp.theory.is_separable` and :func:`~embgeo.ntp.theory.ntp_svm`.

The NTP-SVM (Def. 3)  min ½‖W‖²  s.t.  A_eq(W) = 0 (6a),  A_in(W) ≥ 1 (6b)  has the dual

    max_{μ ≥ 0, ν}  1ᵀμ - ½‖A_inᵀμ + A_eqᵀν‖².

Scattering (μ, ν) into Ψ ∈ R^{V×m} (see :mod:`embgeo.ntp.solvers.constraints`) maps the dual variables
onto K = {Ψ : 1ᵀΨ = 0, Ψ_{v,j} ≤ 0 for v ∉ S_j} with μ_{j,v} = -Ψ_{v,j}, and the dual becomes

    min_{Ψ ∈ K}  f(Ψ) = ½ tr(Ψ G Ψᵀ) + Σ_{v∉S_j} Ψ_{v,j},      G = H̄ᵀH̄ (m × m),

a QP with a cheap exact projection, solved by accelerated projected gradient with adaptive
restart. The same iterations decide separability:

* any iterate whose primal image P_⊥(Ψ H̄ᵀ) has a positive minimum margin γ is a separating
  direction (rescaled by 1/γ it satisfies (6) exactly) — and a feasible primal point, so
  ½‖W‖² - (-f(Ψ)) ≥ ½‖W - W^mm‖² certifies its distance to W^mm;
* when the data are not separable the dual is unbounded and the iterate differences converge to
  a recession direction: normalised, their off-support part is a Farkas vector μ ≥ 0, Σμ = 1,
  with P_⊥(Σ μ_{j,v} (e_{z_j} - e_v) h̄_jᵀ) ≈ 0. For any W ∈ F⊥ with all margins ≥ 1,
  1 ≤ ⟨P_⊥(A_inᵀμ), W⟩ ≤ ‖P_⊥(A_inᵀμ)‖ ‖W‖, so the NTP-margin of the data is at most
  ``perp = ‖P_⊥(A_inᵀμ)‖``: the certificate is quantitative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.optimize import linprog

from embgeo.errors import SolverError

from .constraints import Rows

#: A Farkas vector is accepted when ‖P_⊥(A_inᵀμ)‖ ≤ FARKAS_RTOL · max_j ‖(e_a − e_v) h̄_jᵀ‖,
#: i.e. when any separator would have an NTP-margin below this fraction of the data's scale.
FARKAS_RTOL = 1e-9


@dataclass
class DualOutcome:
    """What :meth:`DualProblem.solve` found.

    status: "optimal" (relative gap ≤ tol, or an exact KKT point from the active-set polish),
    "separable" (a separating direction was found and the caller only wanted that),
    "infeasible" (a Farkas vector was found), "stalled" (the gap stopped improving above tol) or
    "max_iter".
    """

    status: str
    psi: np.ndarray | None = None  # primal W = Ψ H̄ᵀ, feasible with min margin exactly 1
    Z: np.ndarray | None = None  # its logits (V, m)
    primal: float = np.inf  # ½‖W‖²
    dual_point: np.ndarray | None = None  # a point of K
    dual_value: float = -np.inf
    farkas: np.ndarray | None = None  # μ over the inequality rows, when infeasible
    farkas_perp: float = np.inf
    iterations: int = 0
    polished: bool = False

    @property
    def gap(self) -> float:
        """Relative duality gap (½‖W‖² - dual value) / ½‖W‖²."""
        return max(self.primal - self.dual_value, 0.0) / self.primal if np.isfinite(self.primal) else np.inf


class DualProblem:
    """The dual of the NTP-SVM over Ψ ∈ K for one dataset (see the module docstring)."""

    def __init__(self, data, F, ineq: Rows):
        self.data, self.F, self.ineq, self.G = data, F, ineq, F.G
        self.off = np.zeros((data.V, data.m), dtype=bool)
        self.off[ineq.minus, ineq.ctx] = True
        self.lipschitz = float(np.linalg.eigvalsh(self.G)[-1])  # Hessian of f is I_V ⊗ G
        self.scale = np.sqrt(2.0) * float(np.max(np.linalg.norm(data.embeddings, axis=1)))

    def objective(self, psi: np.ndarray) -> float:
        """f(Ψ); the dual value is -f(Ψ) for Ψ ∈ K."""
        return 0.5 * float(np.sum(psi * (psi @ self.G))) + float(np.sum(psi[self.off]))

    def perp_norm(self, psi: np.ndarray) -> float:
        """‖P_⊥(Ψ H̄)‖ computed in W-space (a quadratic form would floor at sqrt(eps))."""
        H = self.data.embeddings
        return float(np.linalg.norm((psi - self.F.psi_of(psi @ self.G)) @ H))

    def primal_from(self, psi: np.ndarray):
        """(Ψ_p, Z, ½‖W‖²) of the feasible point P_⊥(Ψ H̄)/γ, or None if its min margin γ ≤ 0."""
        psi_perp = psi - self.F.psi_of(psi @ self.G)
        Z = psi_perp @ self.G
        gamma = float(np.min(self.ineq.values(Z)))
        if not gamma > 0:
            return None
        psi_perp /= gamma
        Z /= gamma
        return psi_perp, Z, 0.5 * float(np.sum(psi_perp * Z))

    def solve(self, *, tol: float, max_iter: int, check_every: int = 20, stop_when_separable: bool = False,
              detect_infeasible: bool = True, polish_rows: int = 2500) -> DualOutcome:
        """Accelerated projected gradient on f over K, with the checks of the module docstring."""
        x = np.zeros((self.data.V, self.data.m))
        y, t_k = x.copy(), 1.0
        best = DualOutcome("max_iter")
        gaps: list[float] = []
        next_polish = 1e-6
        it = 0
        for it in range(1, max_iter + 1):
            x_new = project_dual_set(y - (y @ self.G + self.off) / self.lipschitz, self.off)
            if np.sum((y - x_new) * (x_new - x)) > 0:  # adaptive restart (O'Donoghue & Candès)
                t_k, y = 1.0, x_new
            else:
                t_next = 0.5 * (1 + np.sqrt(1 + 4 * t_k * t_k))
                y = x_new + ((t_k - 1) / t_next) * (x_new - x)
                t_k = t_next
            step, x = x_new - x, x_new
            if it % check_every:
                continue
            candidate = self.primal_from(x)
            if candidate is None:
                if detect_infeasible:
                    farkas = self._farkas_from(step)
                    if farkas is not None:
                        return DualOutcome("infeasible", farkas=farkas[0], farkas_perp=farkas[1], iterations=it)
                continue
            if candidate[2] < best.primal:
                best.psi, best.Z, best.primal = candidate
            dual_value = -self.objective(x)
            if dual_value > best.dual_value:
                best.dual_point, best.dual_value = x.copy(), dual_value
            best.iterations = it
            if stop_when_separable:
                best.status = "separable"
                return best
            gap = best.gap
            if gap <= tol:
                best.status = "optimal"
                return best
            if gap <= next_polish:
                # The active set is usually identified long before the gap closes: solve the
                # equality-constrained problem on it exactly; keep it if it is a KKT point.
                next_polish = gap / 100
                polished = self._polish(best.Z, polish_rows)
                if polished is not None:
                    polished.iterations = it
                    return polished
            gaps.append(gap)
            # Stalled: close to the optimum but no halving of the gap in the last 500 checks —
            # the rounding floor of an ill-conditioned problem, not slow progress.
            if gap < 1e-6 and len(gaps) > 500 and gaps[-1] > 0.5 * gaps[-501]:
                best.status = "stalled"
                return best
        best.iterations = it
        return best

    def _farkas_from(self, step: np.ndarray):
        """(μ, perp) if the last step's off-support part is a Farkas direction, else None."""
        mu = np.maximum(-step[self.ineq.minus, self.ineq.ctx], 0.0)
        total = mu.sum()
        if not total > 0:
            return None
        mu /= total
        perp = self.perp_norm(self.ineq.adjoint(mu, self.data.V, self.data.m))
        return (mu, perp) if perp <= FARKAS_RTOL * self.scale else None

    def _polish(self, Z: np.ndarray, max_rows: int) -> DualOutcome | None:
        """Exact solve on the active set guessed from the logits Z (V, m) of a near-optimal W.

        Solves min ‖W‖ s.t. A_eq(W) = 0 and A_act(W) = 1 through the Gram matrix of those rows
        and accepts it only as a KKT point: residuals, margins and multiplier signs within
        δ = max(1e-10, 1e3 · eps · cond), cond estimated from the Cholesky factor (an
        ill-conditioned active set cannot be solved more accurately than that).
        """
        F, ineq = self.F, self.ineq
        act = np.flatnonzero(ineq.values(Z) <= 1.0 + 1e-6)
        n_eq = len(F.rows)
        if act.size + n_eq > max_rows:
            return None
        rows = Rows(np.concatenate([F.rows.ctx, ineq.ctx[act]]), np.concatenate([F.rows.plus, ineq.plus[act]]),
                    np.concatenate([F.rows.minus, ineq.minus[act]]))
        b = np.concatenate([np.zeros(n_eq), np.ones(act.size)])
        M = rows.gram(rows, self.G)
        try:  # Cholesky (n³/3) when the active rows are independent, the generic case
            factor = cho_factor(M)
            y = cho_solve(factor, b)
            diag = np.abs(np.diag(factor[0]))
            cond = (diag.max() / diag.min()) ** 2
        except LinAlgError:
            lam, U = np.linalg.eigh(M)
            keep = lam > lam[-1] * len(rows) * np.finfo(float).eps
            y = U[:, keep] @ ((U[:, keep].T @ b) / lam[keep])
            cond = lam[-1] / lam[keep][0]
        delta = max(1e-10, 1e3 * np.finfo(float).eps * cond)
        psi = rows.adjoint(y, self.data.V, self.data.m)
        Zp = psi @ self.G
        y_act = y[n_eq:]
        if (np.max(np.abs(rows.values(Zp) - b)) > delta or np.min(ineq.values(Zp)) < 1 - delta
                or np.min(y_act, initial=0.0) < -delta * max(np.max(np.abs(y_act), initial=0.0), 1e-300)):
            return None
        candidate = self.primal_from(psi)  # exact feasibility: remove the F part, rescale to margin 1
        if candidate is None:
            return None
        # The multipliers are a dual point: Ψ = A_eqᵀν + A_actᵀμ scattered has off-support
        # entries -μ; clipping rounding-level positive entries keeps it in K.
        dual = psi.copy()
        dual[self.off] = np.minimum(dual[self.off], 0.0)
        out = DualOutcome("optimal", *candidate, dual_point=dual, dual_value=-self.objective(dual), polished=True)
        return out


def project_dual_set(Y: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Euclidean projection of Y (V, m) onto K = {1ᵀΨ = 0, Ψ[off] ≤ 0}, column by column.

    For a column y the projection is x = y - τ with the off entries clipped at 0, where τ is the
    unique root of the decreasing g(τ) = Σ_S (y - τ) + Σ_{v∉S} min(y_v - τ, 0). If exactly the
    k smallest off entries lie below τ, then τ = (Σ_S y + their sum)/(S + k): we try every k at
    once and keep the consistent one.
    """
    n_in = np.sum(~off, axis=0)
    sum_in = np.sum(np.where(off, 0.0, Y), axis=0)
    s = np.sort(np.where(off, Y, np.inf), axis=0)
    with np.errstate(invalid="ignore"):
        csum = np.vstack([np.zeros((1, Y.shape[1])), np.cumsum(s, axis=0)])
        k = np.arange(Y.shape[0] + 1)[:, None]
        tau = (sum_in + csum) / (n_in + k)
        lower = np.vstack([np.full((1, Y.shape[1]), -np.inf), s])
        upper = np.vstack([s, np.full((1, Y.shape[1]), np.inf)])
        valid = (lower < tau) & (tau <= upper)
    tau_col = tau[np.argmax(valid, axis=0), np.arange(Y.shape[1])]
    X = Y - tau_col
    X[off] = np.minimum(X[off], 0.0)
    return X


def separability_lp(data, F, ineq: Rows, K: np.ndarray):
    """The LP  max t  s.t. A_eq(W) = 0, A_in(W) ≥ t, t ≤ 1  with W = C Vᵣᵀ, by HiGHS.

    ``K`` (m, r) holds the contexts' coordinates in an orthonormal basis Vᵣ of their span, so
    the variables are C (V, r). Returns (t*, C, μ): t* = 1 when separable (C then separates),
    t* = 0 when not, with μ ≥ 0 the dual values of the (6b) rows (a Farkas vector after
    normalisation).
    """
    V, r = data.V, K.shape[1]
    n_var = V * r + 1  # vec(C) row-major, then t

    def rows_matrix(rows: Rows) -> sp.csr_matrix:
        n = len(rows)
        i = np.repeat(np.arange(n), 2 * r)
        cols = np.concatenate([rows.plus[:, None] * r + np.arange(r), rows.minus[:, None] * r + np.arange(r)], axis=1)
        vals = np.concatenate([K[rows.ctx], -K[rows.ctx]], axis=1)
        return sp.csr_matrix((vals.ravel(), (i, cols.ravel())), shape=(n, n_var))

    n_in = len(ineq)
    A_in = rows_matrix(ineq) - sp.csr_matrix((np.ones(n_in), (np.arange(n_in), np.full(n_in, n_var - 1))),
                                             shape=(n_in, n_var))
    c = np.zeros(n_var)
    c[-1] = -1.0  # maximise t
    bounds = [(None, None)] * (V * r) + [(None, 1.0)]
    kw = {"A_eq": rows_matrix(F.rows), "b_eq": np.zeros(len(F.rows))} if len(F.rows) else {}
    res = linprog(c, A_ub=-A_in, b_ub=np.zeros(n_in), bounds=bounds, method="highs", **kw)
    if res.status != 0:
        raise SolverError(f"separability LP: HiGHS ended with status {res.status} ({res.message})")
    mu = np.maximum(-res.ineqlin.marginals, 0.0)
    return -res.fun, res.x[:-1].reshape(V, r), mu
