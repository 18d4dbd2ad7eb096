"""Every theoretical object of the NTP implicit-bias paper, computed exactly in float64.

Paper: ``ntp-implicit-bias-neurips.txt`` (NeurIPS 2024 version; the short version's numbers
differ: Def. 3.1/3.2 there are Defs. 1/2 here). Equation numbers below are the NeurIPS ones.

Formulation (see :mod:`embgeo.ntp.solvers.constraints` for the operator structure). All solutions are of
the form W = Ψ H̄ᵀ with Ψ ∈ R^{V×m} (rows of W in the span of the contexts), so every solver
works on m × m Gram matrices and never on the (#constraints × V·d) matrix:

* F (eq. 5) is the row space of the equality operator A_eq; P_F(W) = A_eqᵀ M⁺ A_eq(W) with
  M = A_eq A_eqᵀ of size Σ_j (S_j - 1).
* W* (Def. 1) is the minimum-norm solution of A_eq(W) = b, i.e. A_eqᵀ M⁺ b: the min-norm
  solution lies in the row space, which is F, and is the only solution there.
* Separability (Def. 2): when rank H̄ = m every logit matrix is reachable and a certificate is
  written down in closed form (Lemma 1); otherwise the NTP-SVM dual iterations decide it (a
  separating iterate, or a Farkas direction from the diverging dual), with an LP (HiGHS) in the
  r = rank H̄ coordinates of the contexts as the last resort.
* NTP-SVM (Def. 3): solved through its dual over Ψ (:mod:`embgeo.ntp.solvers`) by accelerated
  projected gradient; each check turns the dual iterate into a primal-feasible W̃ (project onto
  F⊥, rescale to margin 1) whose duality gap certifies ‖W̃ - W^mm‖ ≤ sqrt(2 · gap), and an
  exact solve on the guessed active set finishes when it passes a KKT check.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from embgeo.core.validate import as_float_array, check_dense_size
from embgeo.errors import InputError, NotCompatibleError, ShapeError, SolverError
from embgeo.ntp.data import NTPData

from .constraints import Rows, equality_rows, gram, inequality_rows
from .solvers import DualOutcome, DualProblem, separability_lp

#: Relative tolerance for accepting the log-odds equations (4) as solved.
COMPAT_RTOL = 1e-7
#: Tolerance on the margins of a separability / SVM certificate (target margin is 1).
MARGIN_ATOL = 1e-7


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
        P_⊥(Σ μ_{j,v} (e_{z_j} - e_v) h̄_jᵀ) = 0 up to ``residuals["perp_norm"]``. Since every
        separator W ∈ F⊥ with margins ≥ 1 has 1 ≤ perp_norm · ‖W‖, the data's NTP-margin is at most
        ``perp_norm``: "not separable" means "not separable with a margin above perp_norm" (at most
        1e-9 of the scale √2 max‖h̄_j‖ for the dual route, HiGHS's tolerances for the LP route).
    residuals : dict
        For W: ``min_margin`` and ``equality`` (max |A_eq W|); for farkas: ``perp_norm``.
    method : str
    """

    separable: bool
    W: np.ndarray | None
    farkas: np.ndarray | None
    residuals: dict
    method: str

    def __bool__(self) -> bool:
        return self.separable


SEPARABILITY_METHODS = ("auto", "dual", "lp")


def is_separable(data: NTPData, subspace_: Subspace | None = None, *, method: str = "auto",
                 max_iter: int = 20_000) -> Separability:
    """Check NTP-separability (Def. 2): ∃ W with (6a) A_eq(W) = 0 and (6b) A_in(W) ≥ 1?

    * rank H̄ = m (any method): separable (Lemma 1's argument, valid for d ≥ m): the logits
      Z with Z_{z,j} = 1 on S_j and 0 elsewhere are reached by W = Z G⁻¹ H̄ᵀ; checked.
    * ``method="dual"``: the NTP-SVM dual iterations (:mod:`embgeo.ntp.solvers`) until an iterate
      gives a separating direction or a Farkas vector, for at most ``max_iter`` iterations.
    * ``method="lp"``: the LP  max t  s.t. A_eq(W) = 0, A_in(W) ≥ t, t ≤ 1  over W = C Vᵣᵀ
      (Vᵣ: the right singular vectors of the embeddings), solved by HiGHS; t* = 1 means
      separable, t* = 0 not, and the LP's dual values are the Farkas weights.
    * ``method="auto"``: "lp" when the LP is small (≤ ``LP_SMALL_NNZ`` nonzeros, where HiGHS
      takes well under a second), otherwise "dual", then "lp" if the dual is undecided after
      ``max_iter`` (HiGHS needed ~90 s at (m, V, d, S) = (100, 50, 80, 5), the dual 0.2 s).
    """
    if method not in SEPARABILITY_METHODS:
        raise InputError(f"method: expected one of {SEPARABILITY_METHODS}, got {method!r}")
    F = subspace_ or Subspace(data)
    ineq = _inequality_rows_or_error(data)
    if _full_row_rank(data.embeddings):
        sep = _separable_by_construction(data, F, ineq)
        if sep is not None:
            return sep
    if method == "auto" and _lp_is_small(data, F, ineq):
        method = "lp"
    if method in ("auto", "dual"):
        outcome = DualProblem(data, F, ineq).solve(tol=1e-12, max_iter=max_iter, stop_when_separable=True)
        if outcome.status != "max_iter":
            return _separability_from_dual(data, F, ineq, outcome)
        if method == "dual":
            raise SolverError(f"is_separable: the dual iterations neither separated nor found a Farkas vector in "
                              f"{max_iter} iterations; use method='lp'")
    return _separability_by_lp(data, F, ineq)


#: Up to this many nonzeros in the separability LP, "auto" asks HiGHS first.
LP_SMALL_NNZ = 100_000


def _lp_is_small(data: NTPData, F: Subspace, ineq: Rows) -> bool:
    """Whether the LP of :func:`is_separable` has at most LP_SMALL_NNZ nonzeros (2r per row)."""
    return 2 * min(data.m, data.d) * (len(ineq) + len(F.rows)) <= LP_SMALL_NNZ


def _inequality_rows_or_error(data: NTPData) -> Rows:
    ineq = inequality_rows(data)
    if len(ineq) == 0:
        raise InputError("probs: every context has full support (S_j = V for all j), so there are no "
                         "separability constraints (6b) and W^mm is undefined; the paper assumes some S_j < V")
    return ineq


def _full_row_rank(H: np.ndarray) -> bool:
    """rank H̄ = m, judged by numpy.linalg.matrix_rank's threshold."""
    return H.shape[0] <= H.shape[1] and np.linalg.matrix_rank(H) == H.shape[0]


def _certify_direction(data: NTPData, F: Subspace, ineq: Rows, W: np.ndarray) -> dict:
    """Min (6b) margin and max (6a) violation of W (V, d)."""
    Z = W @ data.embeddings.T
    return {"min_margin": float(np.min(ineq.values(Z))),
            "equality": float(np.max(np.abs(F.rows.values(Z)), initial=0.0))}


def _separable_by_construction(data: NTPData, F: Subspace, ineq: Rows) -> Separability | None:
    Z = np.zeros((data.V, data.m))
    for j, supp in enumerate(data.supports):
        Z[supp, j] = 1.0
    W = np.linalg.solve(F.G, Z.T).T @ data.embeddings  # W = Z G⁻¹ H̄ᵀ (G symmetric)
    cert = _certify_direction(data, F, ineq, W)
    if cert["min_margin"] >= 1 - MARGIN_ATOL and cert["equality"] <= MARGIN_ATOL:
        return Separability(True, W, None, cert, "closed form (rank H = m, Lemma 1)")
    return None  # G too ill-conditioned for the closed form: decide numerically


def _farkas_result(data: NTPData, F: Subspace, ineq: Rows, mu: np.ndarray, method: str, **extra) -> Separability:
    farkas = np.zeros((data.m, data.V))
    farkas[ineq.ctx, ineq.minus] = mu
    perp = float(np.linalg.norm(F.project_perp(ineq.adjoint(mu, data.V, data.m) @ data.embeddings)))
    return Separability(False, None, farkas, {"perp_norm": perp, **extra}, method)


def _separability_from_dual(data: NTPData, F: Subspace, ineq: Rows, outcome: DualOutcome) -> Separability:
    if outcome.status == "infeasible":
        return _farkas_result(data, F, ineq, outcome.farkas, "NTP-SVM dual: Farkas direction",
                              iterations=outcome.iterations)
    W = outcome.psi @ data.embeddings
    return Separability(True, W, None, _certify_direction(data, F, ineq, W),
                        "NTP-SVM dual: separating iterate")


def _separability_by_lp(data: NTPData, F: Subspace, ineq: Rows) -> Separability:
    H = data.embeddings
    U, s, Vt = np.linalg.svd(H, full_matrices=False)
    r = int(np.sum(s > s[0] * max(H.shape) * np.finfo(float).eps))
    t, C, mu = separability_lp(data, F, ineq, U[:, :r] * s[:r])
    method = "LP (HiGHS) in rank-r coordinates"
    if t > 0.5:
        # Remove the LP's rounding-level F component exactly, then rescale to margin 1.
        W = F.project_perp((C / t) @ Vt[:r])
        W /= np.min(ineq.values(W @ H.T))
        return Separability(True, W, None, _certify_direction(data, F, ineq, W), method)
    return _farkas_result(data, F, ineq, mu / mu.sum(), method, lp_value=float(t))


# -- the NTP-SVM (Def. 3) --------------------------------------------------------------------

@dataclass
class NTPSVM:
    """Solution of the NTP-SVM (Def. 3): W^mm = argmin ‖W‖ s.t. (6a), (6b).

    Attributes
    ----------
    W : (V, d) array or None
        W^mm (None when infeasible). In F⊥ up to rounding, with min (6b) margin exactly 1.
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
    method : str
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

    Solved through its dual (:mod:`embgeo.ntp.solvers`) until the relative duality gap of a
    feasible primal point is ≤ ``tol`` (so ‖W - W^mm‖/‖W^mm‖ ≤ sqrt(2·tol)) or an exact KKT point
    is found on the guessed active set. Separability is decided on the way (Lemma 1 when
    rank H̄ = m; a separating iterate or a Farkas direction otherwise, with the LP of
    :func:`is_separable` as the last resort): non-separable data give ``status == "infeasible"``
    and ``W is None``. :class:`SolverError` if the gap stalls above ``tol`` or ``max_iter`` runs out.
    """
    t0 = time.perf_counter()
    if not (0 < tol < 1):
        raise InputError(f"tol: expected a relative gap in (0, 1), got {tol}")
    F = subspace_ or Subspace(data)
    ineq = _inequality_rows_or_error(data)
    sep = None
    if _full_row_rank(data.embeddings):
        sep = _separable_by_construction(data, F, ineq)
    elif _lp_is_small(data, F, ineq):
        sep = _separability_by_lp(data, F, ineq)
    problem = DualProblem(data, F, ineq)
    outcome = DualOutcome("not run")
    if sep is None or sep:
        outcome = problem.solve(tol=tol, max_iter=max_iter, check_every=check_every, detect_infeasible=sep is None)
        if outcome.status == "infeasible":
            sep = _separability_from_dual(data, F, ineq, outcome)
        elif outcome.psi is None:  # no iterate ever separated: let the LP decide
            sep = _separability_by_lp(data, F, ineq)
    if sep is not None and not sep:
        return NTPSVM(None, 0.0, "infeasible", np.zeros((0, 2), dtype=int), None, dict(sep.residuals), sep,
                      outcome.iterations, time.perf_counter() - t0, sep.method)
    if outcome.status != "optimal":
        raise SolverError(f"ntp_svm: relative duality gap {outcome.gap:.3g} > tol={tol:g} after {outcome.iterations} "
                          f"iterations ({outcome.status}); the data may be ill-conditioned, try a larger tol")
    if sep is None:
        sep = _separability_from_dual(data, F, ineq, outcome)
    W = outcome.psi @ data.embeddings
    mu = -np.where(problem.off, outcome.dual_point, 0.0)
    values = ineq.values(outcome.Z)
    mu_rows = mu[ineq.minus, ineq.ctx]
    norm_W = float(np.sqrt(2 * outcome.primal))
    stationary = F.project_perp(ineq.adjoint(mu_rows, data.V, data.m) @ data.embeddings)
    residuals = {
        "equality": float(np.max(np.abs(F.rows.values(outcome.Z)), initial=0.0)),
        "min_margin": float(values.min() - 1.0),
        "duality_gap": float(outcome.gap),
        "error_bound": float(np.sqrt(2 * outcome.gap * outcome.primal) / norm_W),
        "stationarity": float(np.linalg.norm(stationary - W) / norm_W),
        "complementarity": float(np.max(mu_rows * (values - 1.0)) / max(mu.max(), 1e-300)),
    }
    tight = values <= 1.0 + MARGIN_ATOL
    active = np.column_stack([ineq.ctx[tight], ineq.minus[tight]])
    method = "dual accelerated projected gradient" + (" + exact active-set polish" if outcome.polished else "")
    return NTPSVM(W, 1.0 / norm_W, "optimal", active, mu.T.copy(), residuals, sep, outcome.iterations,
                  time.perf_counter() - t0, method)


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
