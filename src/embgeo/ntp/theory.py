"""Every theoretical object of the NTP implicit-bias paper, computed exactly in float64.

Paper: ``ntp-implicit-bias-neurips.txt`` (NeurIPS 2024 version; the short version's numbers
differ: Def. 3.1/3.2 there are Defs. 1/2 here). Equation numbers below are the NeurIPS ones.

Formulation (see :mod:`embgeo.ntp.constraints` for the operator structure). All solutions are of
the form W = Ψ H̄ᵀ with Ψ ∈ R^{V×m} (rows of W in the span of the contexts), so every solver
works on m × m Gram matrices and never on the (#constraints × V·d) matrix:

* F (eq. 5) is the row space of the equality operator A_eq; P_F(W) = A_eqᵀ M⁺ A_eq(W) with
  M = A_eq A_eqᵀ of size Σ_j (S_j - 1).
* W* (Def. 1) is the minimum-norm solution of A_eq(W) = b, i.e. A_eqᵀ M⁺ b: the min-norm
  solution lies in the row space, which is F, and is the only solution there.
* Separability (Def. 2): when rank H̄ = m every logit matrix is reachable and a certificate is
  written down in closed form (Lemma 1); otherwise an LP (HiGHS) in the r = rank H̄ coordinates
  of the contexts, whose dual values give a Farkas certificate when infeasible.
* NTP-SVM (Def. 3): solved through its dual, min_{Ψ∈K} ½ tr(Ψ G Ψᵀ) + Σ_{v∉S_j} Ψ_{v,j} over
  K = {Ψ : 1ᵀΨ = 0, Ψ_{v,j} ≤ 0 for v ∉ S_j} (G = H̄ᵀH̄), by accelerated projected gradient
  with adaptive restart; the projection onto K is exact (one sort per column). Each check
  turns the dual iterate into a primal-feasible W̃ (project onto F⊥, rescale to margin 1) and
  the duality gap certifies it: ‖W̃ - W^mm‖ ≤ sqrt(2 · gap).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.optimize import linprog
from scipy.special import log_softmax

from embgeo.core.validate import as_float_array, check_dense_size
from embgeo.errors import InputError, NotCompatibleError, ShapeError, SolverError
from embgeo.ntp.constraints import Rows, equality_rows, gram, inequality_rows
from embgeo.ntp.data import NTPData

#: Relative tolerance for accepting the log-odds equations (4) as solved.
COMPAT_RTOL = 1e-7
#: Tolerance on the margins of a separability / SVM certificate (target margin is 1).
MARGIN_ATOL = 1e-7


# -- loss, entropy, gradient (eq. 2) -------------------------------------------------------

def entropy(data: NTPData) -> float:
    """Empirical T-gram entropy 𝓗 = -Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log p̂_{j,z} (Sec. 2), in nats."""
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    return float(-np.sum(data.weights[rows] * P.data * np.log(P.data)))


def log_probs(data: NTPData, W) -> np.ndarray:
    """log 𝕊(W h̄_j) for every context: array (m, V), computed with log-sum-exp."""
    W = _check_W(data, W)
    check_dense_size("logits", (data.m, data.V), "evaluate the loss on a subset of contexts")
    return log_softmax(data.embeddings @ W.T, axis=1)


def cross_entropy(data: NTPData, W) -> float:
    """CE(W) = -Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log 𝕊_z(W h̄_j), eq. (2). W: (V, d)."""
    logq = log_probs(data, W)
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    return float(-np.sum(data.weights[rows] * P.data * logq[rows, P.indices]))


def kl_gap(data: NTPData, W) -> float:
    """CE(W) - 𝓗 computed as Σ_j π̂_j KL(p̂_j ‖ 𝕊(W h̄_j)) (Sec. 2), never as a difference.

    Summing p̂ (log p̂ - log q) term by term keeps full relative precision when the gap is far
    below 𝓗 (e.g. 1e-12 against 𝓗 ≈ 1.4), where CE - 𝓗 would be pure rounding error.
    """
    logq = log_probs(data, W)
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    return float(np.sum(data.weights[rows] * P.data * (np.log(P.data) - logq[rows, P.indices])))


def gradient(data: NTPData, W) -> np.ndarray:
    """∇CE(W) = Σ_j π̂_j (𝕊(W h̄_j) - p̂_j) h̄_jᵀ, shape (V, d) (simplified form of eq. 24)."""
    R = np.exp(log_probs(data, W))
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    R[rows, P.indices] -= P.data
    return (R * data.weights[:, None]).T @ data.embeddings


def smoothness(data: NTPData) -> float:
    """A smoothness constant of CE: L = ½ λ_max(Σ_j π̂_j h̄_j h̄_jᵀ) (digest §8; softmax Hessian ≤ ½ I).

    GD with step η ≤ 1/(2L) satisfies the paper's step condition (Lemma 3); η < 2/L still
    decreases the loss monotonically.
    """
    H = data.embeddings
    Hw = H * np.sqrt(data.weights)[:, None]
    small = Hw @ Hw.T if data.m <= data.d else Hw.T @ Hw
    return 0.5 * float(np.linalg.eigvalsh(small)[-1])


# -- the data subspace F (eq. 5) ------------------------------------------------------------

class Subspace:
    """The data subspace F = span{(e_z - e_z') h̄_jᵀ : z ≠ z' ∈ S_j} of eq. (5) and its complement.

    Attributes
    ----------
    dim : int
        dim F (≤ Σ_j (S_j - 1)); computed as the rank of the anchor rows' Gram matrix with the
        threshold λ > λ_max · n · eps used by ``numpy.linalg.matrix_rank``.
    ambient_dim : int
        V · d.
    """

    def __init__(self, data: NTPData):
        self.data = data
        self.rows, self.rhs = equality_rows(data)
        self.G = gram(data)
        n = len(self.rows)
        if n:
            lam, U = np.linalg.eigh(self.rows.gram(self.rows, self.G))
            keep = lam > lam[-1] * n * np.finfo(float).eps
            self._lam, self._U = lam[keep], U[:, keep]
        else:
            self._lam, self._U = np.zeros(0), np.zeros((0, 0))
        self.dim = int(self._lam.size)
        self.ambient_dim = data.V * data.d

    @property
    def perp_dim(self) -> int:
        """dim F⊥ = V·d - dim F."""
        return self.ambient_dim - self.dim

    def _solve(self, r: np.ndarray) -> np.ndarray:
        """y = M⁺ r for the Gram matrix M of the anchor rows (one refinement step)."""
        if self.dim == 0:
            return np.zeros_like(r)
        y = self._U @ ((self._U.T @ r) / self._lam)
        # One step of iterative refinement (M y evaluated through the operator, not the Gram).
        resid = r - self.rows.values(self.rows.adjoint(y, self.data.V, self.data.m) @ self.G)
        return y + self._U @ ((self._U.T @ resid) / self._lam)

    def psi_of(self, Z: np.ndarray) -> np.ndarray:
        """Ψ_F (V, m) with P_F(W) = Ψ_F H̄ᵀ, from the logits Z = W H̄ (V, m) of W."""
        y = self._solve(self.rows.values(Z))
        return self.rows.adjoint(y, self.data.V, self.data.m)

    def project(self, W) -> np.ndarray:
        """P_F(W): orthogonal projection of W (V, d) onto F."""
        W = _check_W(self.data, W)
        return self.psi_of(W @ self.data.embeddings.T) @ self.data.embeddings

    def project_perp(self, W) -> np.ndarray:
        """P_⊥(W) = W - P_F(W): orthogonal projection onto F⊥."""
        W = _check_W(self.data, W)
        return W - self.project(W)

    def basis(self) -> np.ndarray:
        """Orthonormal basis of F as an array (dim F, V, d)."""
        check_dense_size("basis of F", (self.dim, self.data.V, self.data.d), "use project() instead")
        V, m, H = self.data.V, self.data.m, self.data.embeddings
        out = np.empty((self.dim, V, self.data.d))
        for i in range(self.dim):
            out[i] = self.rows.adjoint(self._U[:, i] / np.sqrt(self._lam[i]), V, m) @ H
        return out


def subspace(data: NTPData) -> Subspace:
    """The data subspace F of eq. (5), with projections onto F and F⊥ and its dimension."""
    return Subspace(data)


# -- compatibility and W* (Def. 1, eq. 4) ----------------------------------------------------

@dataclass
class Compatibility:
    """Result of :func:`is_compatible`; truthy iff the log-odds equations (4) are solvable.

    ``W`` is the min-norm solution W* ∈ F when compatible (else the least-squares one);
    ``residual`` is max_i |A_eq(W)_i - b_i| and ``tolerance`` the threshold it was held to.
    """

    compatible: bool
    W: np.ndarray
    residual: float
    tolerance: float

    def __bool__(self) -> bool:
        return self.compatible


def is_compatible(data: NTPData, subspace_: Subspace | None = None) -> Compatibility:
    """Check NTP_H-compatibility (Def. 1): does some W satisfy eq. (4)?

    Solved as the minimum-norm least-squares problem A_eq(W) = b (anchor form, Σ_j (S_j - 1)
    equations); compatible iff the residual is below ``COMPAT_RTOL · max(1, ‖b‖_∞)``.
    """
    F = subspace_ or Subspace(data)
    y = F._solve(F.rhs)
    psi = F.rows.adjoint(y, data.V, data.m)
    residual = float(np.max(np.abs(F.rows.values(psi @ F.G) - F.rhs), initial=0.0))
    tol = COMPAT_RTOL * max(1.0, float(np.max(np.abs(F.rhs), initial=0.0)))
    return Compatibility(residual <= tol, psi @ data.embeddings, residual, tol)


def w_star(data: NTPData, subspace_: Subspace | None = None) -> np.ndarray:
    """W* ∈ F (V, d): the unique solution of the log-odds equations (4) inside F (Def. 1, fn. 6).

    Raises :class:`NotCompatibleError` when (4) has no solution.
    """
    res = is_compatible(data, subspace_)
    if not res:
        raise NotCompatibleError(f"the data are not NTP_H-compatible (Def. 1): the log-odds equations (4) "
                                 f"have least-squares residual {res.residual:.3g} > {res.tolerance:.3g}, "
                                 "so W* does not exist")
    return res.W


# -- separability (Def. 2, eq. 6) ------------------------------------------------------------

@dataclass
class Separability:
    """Result of :func:`is_separable`; truthy iff the data are NTP-separable (Def. 2).

    Attributes
    ----------
    separable : bool
    W : (V, d) array or None
        A certificate W^d ∈ F⊥ with every (6b) margin ≥ 1 (checked), when separable.
    farkas : (m, V) array or None
        When not separable: weights μ ≥ 0 on the (j, v ∉ S_j) Kesler points, summing to 1, with
        Σ μ_{j,v} (e_{z_j} - e_v) h̄_jᵀ ∈ F, so no W ∈ F⊥ can give them all a positive margin.
    residuals : dict
        For W: ``min_margin`` and ``equality`` (max |A_eq W|); for farkas: ``perp_norm``
        (‖P_⊥ of the combination‖, 0 for an exact certificate).
    method : str
    """

    separable: bool
    W: np.ndarray | None
    farkas: np.ndarray | None
    residuals: dict
    method: str

    def __bool__(self) -> bool:
        return self.separable


def is_separable(data: NTPData, subspace_: Subspace | None = None) -> Separability:
    """Check NTP-separability (Def. 2): ∃ W with (6a) A_eq(W) = 0 and (6b) A_in(W) ≥ 1?

    * rank H̄ = m: separable (Lemma 1's argument, valid for d ≥ m): the logits Z with
      Z_{z,j} = 1 on S_j and 0 elsewhere are reached by W = Z G⁻¹ H̄ᵀ.
    * otherwise: the LP  max t  s.t. A_eq(W) = 0, A_in(W) ≥ t, t ≤ 1  over W = C Vᵣᵀ
      (Vᵣ: the right singular vectors of the embeddings), solved by HiGHS. t* = 1 means
      separable; t* = 0 means not, and the LP's dual values are the Farkas weights μ.
    """
    F = subspace_ or Subspace(data)
    ineq = inequality_rows(data)
    if len(ineq) == 0:
        raise InputError("probs: every context has full support (S_j = V for all j), so there are no "
                         "separability constraints (6b); the paper assumes some S_j < V")
    H = data.embeddings
    U, s, Vt = np.linalg.svd(H, full_matrices=False)
    r = int(np.sum(s > s[0] * max(H.shape) * np.finfo(float).eps))
    if r == data.m:
        Z = np.zeros((data.V, data.m))
        for j, supp in enumerate(data.supports):
            Z[supp, j] = 1.0
        psi = np.linalg.solve(F.G, Z.T).T  # Ψ = Z G⁻¹ (G symmetric)
        cert = _certify_direction(data, F, ineq, psi @ F.G)
        if cert["min_margin"] >= 1 - MARGIN_ATOL and cert["equality"] <= MARGIN_ATOL:
            return Separability(True, psi @ H, None, cert, "closed form (rank H = m, Lemma 1)")
    return _separability_lp(data, F, ineq, U[:, :r] * s[:r], Vt[:r])


def _certify_direction(data: NTPData, F: Subspace, ineq: Rows, Z: np.ndarray) -> dict:
    """Min (6b) margin and max (6a) violation of the W whose logits are Z (V, m)."""
    return {"min_margin": float(np.min(ineq.values(Z))),
            "equality": float(np.max(np.abs(F.rows.values(Z)), initial=0.0))}


def _separability_lp(data: NTPData, F: Subspace, ineq: Rows, K: np.ndarray, basis: np.ndarray) -> Separability:
    """The LP of :func:`is_separable` in the r-dim coordinates K (m, r) of the contexts."""
    V, r = data.V, K.shape[1]
    n_var = V * r + 1  # vec(C) row-major, then t

    def rows_matrix(rows: Rows) -> sp.csr_matrix:
        n = len(rows)
        i = np.repeat(np.arange(n), 2 * r)
        cols = np.concatenate([rows.plus[:, None] * r + np.arange(r), rows.minus[:, None] * r + np.arange(r)], axis=1)
        vals = np.concatenate([K[rows.ctx], -K[rows.ctx]], axis=1)
        return sp.csr_matrix((vals.ravel(), (i, cols.ravel())), shape=(n, n_var))

    A_in = rows_matrix(ineq)
    A_in = A_in - sp.csr_matrix((np.ones(len(ineq)), (np.arange(len(ineq)), np.full(len(ineq), n_var - 1))),
                                shape=A_in.shape)
    c = np.zeros(n_var)
    c[-1] = -1.0  # maximise t
    bounds = [(None, None)] * (V * r) + [(None, 1.0)]
    kw = {}
    if len(F.rows):
        kw = {"A_eq": rows_matrix(F.rows), "b_eq": np.zeros(len(F.rows))}
    res = linprog(c, A_ub=-A_in, b_ub=np.zeros(len(ineq)), bounds=bounds, method="highs", **kw)
    if res.status != 0:
        raise SolverError(f"separability LP: HiGHS ended with status {res.status} ({res.message})")
    t = -res.fun
    C = res.x[:-1].reshape(V, r)
    if t > 0.5:
        Z = (C / t) @ K.T
        cert = _certify_direction(data, F, ineq, Z)
        W = (C / t) @ basis
        # Remove the LP's rounding-level F component exactly, then rescale to margin 1.
        W = F.project_perp(W)
        Zp = W @ data.embeddings.T
        W /= np.min(ineq.values(Zp))
        cert = _certify_direction(data, F, ineq, W @ data.embeddings.T)
        return Separability(True, W, None, cert, "LP (HiGHS) in rank-r coordinates")
    mu = np.maximum(-res.ineqlin.marginals, 0.0)
    mu /= mu.sum()
    farkas = np.zeros((data.m, V))
    farkas[ineq.ctx, ineq.minus] = mu
    psi = ineq.adjoint(mu, V, data.m)
    psi_perp = psi - F.psi_of(psi @ F.G)
    perp_norm = float(np.sqrt(max(np.sum(psi_perp * (psi_perp @ F.G)), 0.0)))
    return Separability(False, None, farkas, {"perp_norm": perp_norm, "lp_value": float(t)},
                        "LP (HiGHS) in rank-r coordinates")


# -- the NTP-SVM (Def. 3) --------------------------------------------------------------------

@dataclass
class NTPSVM:
    """Solution of the NTP-SVM (Def. 3): W^mm = argmin ‖W‖ s.t. (6a), (6b).

    Attributes
    ----------
    W : (V, d) array or None
        W^mm (None when infeasible). Exactly in F⊥ up to rounding, with min (6b) margin exactly 1.
    margin : float
        The optimal NTP-margin 1/‖W^mm‖ (0.0 when infeasible).
    status : "optimal" | "infeasible"
    active : (k, 2) int array
        The (context j, token v ∉ S_j) pairs whose constraint (6b) is tight (margin ≤ 1 + 1e-7).
    multipliers : (m, V) array or None
        Dual weights μ_{j,v} ≥ 0 of the (6b) rows (zero on supports).
    residuals : dict
        ``equality`` max |A_eq W^mm|; ``min_margin`` min (6b) value - 1; ``duality_gap`` relative
        gap (½‖W‖² - dual value)/(½‖W‖²); ``error_bound`` the certified bound on
        ‖W - W^mm_exact‖/‖W‖, i.e. sqrt(2·gap)/‖W‖; ``stationarity`` ‖W - P_⊥(A_inᵀμ)‖/‖W‖;
        ``complementarity`` max μ_i · (margin_i - 1) / max μ.
    separability : Separability
    iterations : int
    seconds : float
    """

    W: np.ndarray | None
    margin: float
    status: str
    active: np.ndarray
    multipliers: np.ndarray | None
    residuals: dict
    separability: Separability
    iterations: int = 0
    seconds: float = 0.0
    method: str = ""


def ntp_svm(data: NTPData, *, tol: float = 1e-12, max_iter: int = 200_000, check_every: int = 20,
            subspace_: Subspace | None = None) -> NTPSVM:
    """Solve the NTP-SVM (Def. 3) and certify the solution.

    Separability is checked first (:func:`is_separable`); non-separable data give
    ``status == "infeasible"`` and ``W is None``. Otherwise the dual (see module docstring) is
    solved until the relative duality gap of the rescaled primal point is ≤ ``tol`` (so that
    ‖W - W^mm‖/‖W^mm‖ ≤ sqrt(2·tol)); :class:`SolverError` if ``max_iter`` is reached first.
    """
    t0 = time.perf_counter()
    if not (0 < tol < 1):
        raise InputError(f"tol: expected a relative gap in (0, 1), got {tol}")
    F = subspace_ or Subspace(data)
    sep = is_separable(data, F)
    if not sep:
        return NTPSVM(None, 0.0, "infeasible", np.zeros((0, 2), dtype=int), None, dict(sep.residuals), sep,
                      0, time.perf_counter() - t0)
    ineq = inequality_rows(data)
    G = F.G
    off = np.ones((data.V, data.m), dtype=bool)
    off[data.probs.indices, np.repeat(np.arange(data.m), data.support_sizes)] = False
    lipschitz = float(np.linalg.eigvalsh(G)[-1])

    def dual_objective(psi):  # f(Ψ) = ½ tr(Ψ G Ψᵀ) + Σ_off Ψ; the dual value is -f
        return 0.5 * np.sum(psi * (psi @ G)) + np.sum(psi[off])

    def primal_from(psi):
        """Feasible primal point from a dual iterate: P_⊥, then rescale to min margin 1."""
        Zraw = psi @ G
        psi_perp = psi - F.psi_of(Zraw)
        Z = psi_perp @ G
        gamma = float(np.min(ineq.values(Z)))
        if gamma <= 0:
            return None, None, np.inf
        psi_perp /= gamma
        return psi_perp, Z / gamma, 0.5 * np.sum(psi_perp * (Z / gamma))

    x = np.zeros((data.V, data.m))
    y, t_k = x.copy(), 1.0
    best, polished, next_polish = None, None, 1e-6
    it = 0
    for it in range(1, max_iter + 1):
        x_new = _project_dual_set(y - (y @ G + off) / lipschitz, off)
        if np.sum((y - x_new) * (x_new - x)) > 0:  # adaptive restart (O'Donoghue & Candès)
            t_k, y = 1.0, x_new
        else:
            t_next = 0.5 * (1 + np.sqrt(1 + 4 * t_k * t_k))
            y = x_new + ((t_k - 1) / t_next) * (x_new - x)
            t_k = t_next
        x = x_new
        if it % check_every == 0:
            psi_p, Z, p_val = primal_from(x)
            d_val = -dual_objective(x)
            if psi_p is not None and (best is None or p_val < best[2]):
                best = (psi_p, Z, p_val)
            if best is None:
                continue
            gap = (best[2] - d_val) / best[2]
            if gap <= tol:
                break
            if gap <= next_polish:
                # The active set is usually identified long before the gap closes: solve the
                # equality-constrained problem on it exactly and accept it if it satisfies KKT.
                next_polish = gap / 100
                polished = _polish(data, F, ineq, best[1])
                if polished is not None:
                    break
    else:
        gap = np.inf if best is None else (best[2] + dual_objective(x)) / best[2]
        raise SolverError(f"ntp_svm: relative duality gap {gap:.3g} > tol={tol:g} after {max_iter} iterations")
    if polished is not None:
        best = polished[:3]
        x = polished[3]
        method = "dual accelerated projected gradient + exact active-set polish"
    else:
        method = "dual accelerated projected gradient"

    psi_p, Z, p_val = best
    W = psi_p @ data.embeddings
    mu = -np.where(off, x, 0.0)
    values = ineq.values(Z)
    gap = max(p_val + dual_objective(x), 0.0)
    stat_psi = ineq.adjoint(mu[ineq.minus, ineq.ctx], data.V, data.m)
    stat_psi -= F.psi_of(stat_psi @ G)
    diff = stat_psi - psi_p
    norm_W = np.sqrt(2 * p_val)
    residuals = {
        "equality": float(np.max(np.abs(F.rows.values(Z)), initial=0.0)),
        "min_margin": float(values.min() - 1.0),
        "duality_gap": float(gap / p_val),
        "error_bound": float(np.sqrt(2 * gap) / norm_W),
        "stationarity": float(np.sqrt(max(np.sum(diff * (diff @ G)), 0.0)) / norm_W),
        "complementarity": float(np.max(mu[ineq.minus, ineq.ctx] * (values - 1.0)) / max(mu.max(), 1e-300)),
    }
    tight = values <= 1.0 + MARGIN_ATOL
    active = np.column_stack([ineq.ctx[tight], ineq.minus[tight]])
    return NTPSVM(W, float(1.0 / norm_W), "optimal", active, mu.T.copy(), residuals, sep, it,
                  time.perf_counter() - t0, method)


def _polish(data: NTPData, F: Subspace, ineq: Rows, Z: np.ndarray, max_rows: int = 2500):
    """Exact solve on the active set guessed from the logits Z (V, m) of a near-optimal W.

    Solves min ‖W‖ s.t. A_eq(W) = 0 and A_act(W) = 1 (min-norm via the Gram matrix) and accepts
    the result only if it is KKT-exact: every (6b) margin ≥ 1 and every multiplier of the active
    rows ≥ 0 (up to 1e-10 relative). Returns (Ψ, Z, ½‖W‖², Ψ_dual) or None.
    """
    values = ineq.values(Z)
    act = np.flatnonzero(values <= 1.0 + 1e-6)
    n_eq = len(F.rows)
    if act.size + n_eq > max_rows:
        return None
    rows = Rows(np.concatenate([F.rows.ctx, ineq.ctx[act]]), np.concatenate([F.rows.plus, ineq.plus[act]]),
                np.concatenate([F.rows.minus, ineq.minus[act]]))
    b = np.concatenate([np.zeros(n_eq), np.ones(act.size)])
    M = rows.gram(rows, F.G)
    try:  # Cholesky (n³/3) when the active rows are independent, the generic case
        y = cho_solve(cho_factor(M), b)
    except LinAlgError:
        lam, U = np.linalg.eigh(M)
        keep = lam > lam[-1] * len(rows) * np.finfo(float).eps
        y = U[:, keep] @ ((U[:, keep].T @ b) / lam[keep])
    psi = rows.adjoint(y, data.V, data.m)
    Zp = psi @ F.G
    y_act = y[n_eq:]
    if (np.max(np.abs(rows.values(Zp) - b)) > 1e-10 or np.min(ineq.values(Zp)) < 1 - 1e-10
            or np.min(y_act) < -1e-10 * max(np.max(np.abs(y_act)), 1e-300)):
        return None
    # The multipliers y are themselves a dual point: Ψ = A_eqᵀν + A_actᵀμ scattered, whose
    # off-support entries are -μ (clip rounding-level positive entries to stay in K).
    dual = psi.copy()
    dual[ineq.minus, ineq.ctx] = np.minimum(dual[ineq.minus, ineq.ctx], 0.0)
    return psi, Zp, 0.5 * float(np.sum(psi * Zp)), dual


def _project_dual_set(Y: np.ndarray, off: np.ndarray) -> np.ndarray:
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


# -- margins -----------------------------------------------------------------------------------

def ntp_margin(data: NTPData, W, subspace_: Subspace | None = None) -> float:
    """Normalized NTP-margin of P_⊥(W) (Def. 3, max-margin form):

    min_{j, z∈S_j, v∉S_j} (e_z - e_v)ᵀ P_⊥(W) h̄_j / ‖P_⊥(W)‖.

    Equals 1/‖W^mm‖ at W = W^mm and is at most that for every W. Returns 0.0 when P_⊥(W) = 0.
    """
    F = subspace_ or Subspace(data)
    Wp = F.project_perp(W)
    norm = np.linalg.norm(Wp)
    if norm == 0:
        return 0.0
    Z = Wp @ data.embeddings.T  # (V, m)
    mask = data.support_mask().T
    if mask.all():
        raise InputError("probs: every context has full support (S_j = V), the NTP-margin is undefined")
    lowest_in = np.min(np.where(mask, Z, np.inf), axis=0)
    highest_off = np.max(np.where(mask, -np.inf, Z), axis=0)
    return float(np.min((lowest_in - highest_off)[~mask.all(axis=0)]) / norm)


def _check_W(data: NTPData, W) -> np.ndarray:
    W = as_float_array("W", W, ndim=2)
    if W.shape != (data.V, data.d):
        raise ShapeError(f"W: expected shape (V, d) = ({data.V}, {data.d}), got {W.shape}")
    return W
