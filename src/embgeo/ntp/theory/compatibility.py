"""NTP_H-compatibility (Def. 1): the log-odds equations (4), their minimum-norm solution W* ∈ F, and a
certificate when they have no solution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from embgeo.core.status import Status, certified_dict
from embgeo.errors import NotCompatibleError, SolverError
from embgeo.ntp.data import NTPData
from embgeo.ntp.solvers.constraints import anchor_rows, row_dots
from embgeo.ntp.solvers.pair_certificates import heavy_pairs
from embgeo.ntp.solvers.svm_dual import FARKAS_RTOL, farkas_scale
from embgeo.ntp.theory.subspace import Subspace

#: Relative tolerance for accepting the log-odds equations (4) as solved.
COMPAT_RTOL = 1e-7


@dataclass
class Compatibility:
    """Result of :func:`is_compatible`; truthy iff the log-odds equations (4) are solvable.

    Attributes
    ----------
    compatible : bool
    W : (V, d) array or None
        W* ∈ F, the minimum-norm solution of (4), when compatible.
    residual : float
        max over the anchor rows of |(e_{z_j} − e_z)ᵀ W h̄_j − log(p̂_{j,z_j}/p̂_{j,z})| at W (at the
        least-squares point when not compatible; when a pair certificate decided, a lower bound on
        this maximum that holds for every W).
    tolerance : float
        The threshold ``residual`` was held to: COMPAT_RTOL · max(1, max |log-odds|).
    certificate : scipy.sparse.csr_matrix (m, V) or None
        When not compatible: weights λ on the support pairs, balanced per context, with
        ⟨λ, log p̂⟩ = −1 and λ H̄ ≈ 0 (per token). Any W solving (4) would satisfy
        ⟨λ, W H̄ᵀ − t − log p̂⟩ = 0, i.e. −⟨λ H̄, W⟩ = 1, so ‖W‖ ≥ 1/‖λ H̄‖.
    certificate_norm : float or None
        ‖λ H̄‖ (the bound above is 1/certificate_norm).
    method : str
    """

    compatible: bool
    W: np.ndarray | None
    residual: float
    tolerance: float
    certificate: sp.csr_matrix | None = None
    certificate_norm: float | None = None
    method: str = ""

    def __bool__(self) -> bool:
        return self.compatible

    @property
    def status(self) -> Status:
        """OPTIMAL when W* solves (4) (it is the minimum-norm solution), INFEASIBLE when ``certificate`` proves
        that no W does (:class:`~embgeo.core.status.Certified`)."""
        return Status.OPTIMAL if self.compatible else Status.INFEASIBLE

    @property
    def residuals(self) -> dict:
        """``residual`` (of (4) at W*, or the bound every W misses (4) by), ``tolerance``, ``certificate_norm``
        ‖λ H̄‖ (NaN when compatible)."""
        return {"residual": float(self.residual), "tolerance": float(self.tolerance),
                "certificate_norm": math.nan if self.certificate_norm is None else float(self.certificate_norm)}

    def to_dict(self) -> dict:
        """Status, method, residuals and ‖W*‖ as strict JSON (the arrays are not in it)."""
        proof = ("W*, solving the log-odds equations (4)" if self.compatible else
                 "λ on support pairs with ⟨λ, log p̂⟩ = −1 and λ H̄ ≈ 0" if self.certificate is not None else None)
        return certified_dict(self, proof, compatible=self.compatible,
                              w_star_norm=float(np.linalg.norm(self.W)) if self.W is not None else None)


def is_compatible(data: NTPData, subspace_: Subspace | None = None) -> Compatibility:
    """Check NTP_H-compatibility (Def. 1): does some W satisfy eq. (4)? Returns W* when it does.

    When rank H̄ < m, two tokens tied on more contexts than their span holds usually make (4)
    overdetermined: such a pair is looked for first (O(N) plus one QR per candidate) and its
    least-squares residual is the certificate. Otherwise the equality problem in t-form is solved
    exactly; its constraint residual decides and gives the certificate. Compatible iff the anchor
    residual of (4) at the solution is ≤ ``COMPAT_RTOL · max(1, max |log-odds|)``.
    """
    F = subspace_ or Subspace(data)
    *_, b = anchor_rows(data)
    tol = COMPAT_RTOL * max(1.0, float(np.max(np.abs(b), initial=0.0)))
    if F.coords.rank < data.m:
        pair = _pair_compatibility_certificate(data, F, tol)
        if pair is not None:
            return Compatibility(False, None, *pair[:1], tol, *pair[1:], method="pair of tokens tied on more "
                                 "contexts than their span (least-squares residual)")
    sol = F.solve(F.pair_log_probs, check=False)  # the anchor residual below is the certificate
    residual = _anchor_residual(data, F, sol.X)
    if residual <= tol:
        return Compatibility(True, F.coords.to_w(F.token_rows(sol.X)) / F.scale, residual, tol,
                             method="t-form equality solve")
    if sol.certificate is None:
        raise SolverError(f"is_compatible: the residual of (4) is {residual:.3g} > {tol:.3g} but the equality "
                          "solve found no inconsistency; the embeddings are too ill-conditioned to decide")
    cert, norm = _token_certificate(data, F, sol.certificate)
    return Compatibility(False, None, residual, tol, cert, norm, method="t-form equality solve (inconsistent)")


def _anchor_residual(data: NTPData, F: Subspace, X: np.ndarray) -> float:
    """max |(x_{z_j} − x_z)ᵀ k_j − log(p̂_{j,z_j}/p̂_{j,z})| over the anchor rows; X has one row per support token."""
    ctx, a, z, b = anchor_rows(data)
    row = np.searchsorted(F.tokens, np.concatenate([a, z]))
    both = row_dots(X, F.coords.K, row, np.concatenate([ctx, ctx]))
    return float(np.max(np.abs(both[:len(ctx)] - both[len(ctx):] - b), initial=0.0))


def _token_certificate(data: NTPData, F: Subspace, lam: np.ndarray) -> tuple[sp.csr_matrix, float]:
    """λ on the support pairs as a sparse (m, V) matrix, and ‖λ H̄‖ computed per token."""
    A = sp.csr_matrix((lam, (F.pair_groups, F.pair_contexts)), shape=(len(F.tokens), data.m))
    norm = float(np.linalg.norm(A @ F.coords.K)) * F.scale  # ‖λ H̄‖ in the caller's units
    return sp.csr_matrix((lam, (F.pair_contexts, F.pair_tokens)), shape=(data.m, data.V)), norm


def _pair_compatibility_certificate(data: NTPData, F: Subspace, tol: float):
    """Two tokens u, v in the supports of the same contexts J, |J| > r: (4) asks
    (x_u − x_v)ᵀk_j = log(p̂_{j,u}/p̂_{j,v}) on J, overdetermined. If the right-hand side leaves
    range K_J by y ≠ 0, λ = ∓y/‖y‖² on (u, J), (v, J) is a certificate (balanced, ⟂ K_J, ⟨λ, log p̂⟩ = −1).

    Every W then has ‖pair residuals on J‖₂ ≥ ‖y‖, so some pair equation is off by ≥ ‖y‖/√|J| and,
    as a pair equation is the difference of two anchor equations, some anchor residual of (4) is
    ≥ ‖y‖/(2√|J|): returned as the residual, and the certificate is used only if that bound
    exceeds ``tol``. Returns (residual bound, certificate, certificate norm) or None.
    """
    K, r = F.coords.K, F.coords.rank
    Pt = data.probs.T.tocsr()
    scale = farkas_scale(K)
    for u, v, J in heavy_pairs(Pt, r):
        lu = np.log(np.asarray(Pt[u, J].todense()).ravel())
        lv = np.log(np.asarray(Pt[v, J].todense()).ravel())
        y = _out_of_range(K[J], lu - lv)
        yy = float(y @ y)
        bound = float(np.sqrt(yy / len(J)) / 2)
        if not bound > tol:
            continue
        lam = np.concatenate([-y, y]) / yy
        rows, cols = np.concatenate([J, J]), np.concatenate([np.full(len(J), u), np.full(len(J), v)])
        cert = sp.csr_matrix((lam, (rows, cols)), shape=(data.m, data.V))
        norm = float(np.sqrt(2.0) * np.linalg.norm(y @ K[J]) / yy)
        if norm * max(1.0, float(np.max(np.abs(lu - lv)))) <= FARKAS_RTOL * scale:
            return bound, cert, norm * F.scale  # ‖λ H̄‖ in the caller's units
    return None


def _out_of_range(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """b − Π_{range A} b via a thin SVD of A (rank threshold of numpy.linalg.matrix_rank)."""
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    U = U[:, s > (s[0] if s.size else 0.0) * max(A.shape) * np.finfo(float).eps]
    y = b - U @ (U.T @ b)
    return y - U @ (U.T @ y)  # a second pass removes the rounding left in range A


def w_star(data: NTPData, subspace_: Subspace | None = None) -> np.ndarray:
    """W* ∈ F (V, d): the unique solution of the log-odds equations (4) inside F (Def. 1, fn. 6).

    Raises :class:`NotCompatibleError` when (4) has no solution.
    """
    res = is_compatible(data, subspace_)
    if not res:
        raise NotCompatibleError(_not_compatible_message(res))
    return res.W


def _not_compatible_message(res: Compatibility) -> str:
    how = "every W leaves a residual ≥" if res.method.startswith("pair") else "the least-squares residual is"
    return (f"the data are not NTP_H-compatible (Def. 1): the log-odds equations (4) have no solution ({how} "
            f"{res.residual:.3g} > {res.tolerance:.3g}; {res.method}), so W* does not exist")
