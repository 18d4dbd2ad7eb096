"""The regularization paths of Theorem 1: norm-constrained minimizers Ŵ_B and ridge minimizers Ŵ_λ.

Paper: ``ntp-implicit-bias-neurips.txt`` Sec. 4 (Theorem 1, eq. 8); the ridge path is the NeurIPS
"Contributions" wording. numpy/scipy float64: FISTA on the Frobenius ball, and L-BFGS with a
Newton-CG polish for ridge. Each point is measured by :mod:`embgeo.ntp.measure.metrics`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.optimize import minimize
from scipy.sparse.linalg import LinearOperator, cg

from embgeo.core.threads import limit_threads
from embgeo.core.validate import as_float_array, check_float, check_positive_int, check_threads
from embgeo.errors import InputError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData, check_ntp_data
from embgeo.ntp.measure.metrics import REFERENCE_METRICS, Reference, reference_metrics, resolve_reference


class ConvergenceWarning(UserWarning):
    """A path solver stopped at ``max_iter`` before reaching its tolerance."""


@dataclass
class PathPoint:
    """One point of a regularization path.

    Attributes
    ----------
    param : float
        The norm bound B (:func:`regularization_path`) or the ridge weight λ (:func:`ridge_path`).
    W : (V, d) array
        The minimizer.
    norm : float
        ‖W‖_F.
    ce, kl_gap : float
        CE(W) (eq. 2) and CE(W) - 𝓗 computed as a KL.
    cos_mm, cos_corrected, subspace_error, margin : float
        As in :func:`train` (NaN without a reference).
    iterations : int
        Solver iterations for this point (after the warm start).
    residual : float
        Convergence measure: the projected-gradient norm L‖W - Proj_B(W - ∇CE(W)/L)‖_F for the
        norm path, ‖∇CE(W) + λW‖_F for the ridge path.
    converged : bool
        Whether the solver met its tolerance.
    """

    param: float
    W: np.ndarray = field(repr=False)
    norm: float
    ce: float
    kl_gap: float
    cos_mm: float
    cos_corrected: float
    subspace_error: float
    margin: float
    iterations: int
    residual: float
    converged: bool


@dataclass
class RegPath:
    """A regularization path: the list of :class:`PathPoint` plus run facts.

    ``kind`` is ``"norm"`` (param = B) or ``"ridge"`` (param = λ). Iterating, ``len`` and
    indexing act on ``points``; :meth:`to_frame` gives one row per point without the W's.
    """

    kind: str
    points: list[PathPoint]
    meta: dict

    def __len__(self) -> int:
        return len(self.points)

    def __iter__(self) -> Iterator[PathPoint]:
        return iter(self.points)

    def __getitem__(self, i) -> PathPoint:
        return self.points[i]

    @property
    def Ws(self) -> list[np.ndarray]:
        """The minimizers, each (V, d)."""
        return [p.W for p in self.points]

    def column(self, name: str) -> np.ndarray:
        """One field over the path as a 1-D array, e.g. ``path.column("cos_mm")``."""
        if name == "W" or name not in PathPoint.__dataclass_fields__:
            raise InputError(f"name: expected a scalar field of PathPoint, got {name!r}")
        return np.array([getattr(p, name) for p in self.points])

    def to_frame(self) -> pd.DataFrame:
        """One row per point; the first column is ``B`` or ``lambda``."""
        key = "B" if self.kind == "norm" else "lambda"
        names = [f for f in PathPoint.__dataclass_fields__ if f not in ("param", "W")]
        return pd.DataFrame({key: self.column("param"), **{n: self.column(n) for n in names}})


def _check_grid(name: str, values, increasing: bool) -> np.ndarray:
    grid = as_float_array(name, values, ndim=1)
    if grid.size == 0:
        raise InputError(f"{name}: expected at least one value")
    if np.any(grid <= 0):
        raise InputError(f"{name}: expected positive values, got {grid[grid <= 0][0]}")
    diffs = np.diff(grid)
    if increasing and np.any(diffs <= 0):
        raise InputError(f"{name}: expected a strictly increasing grid (warm starts go from small to large B)")
    if not increasing and np.any(diffs >= 0):
        raise InputError(f"{name}: expected a strictly decreasing grid (warm starts go from large to small λ), "
                         "e.g. numpy.logspace(-1, -8, 8)")
    return grid


def _path_point(data: NTPData, param: float, W: np.ndarray, ref: Reference | None, iterations: int, residual: float,
                converged: bool) -> PathPoint:
    nan = math.nan
    rm = reference_metrics(data, W, ref) if ref is not None else dict.fromkeys(REFERENCE_METRICS, nan)
    return PathPoint(float(param), W, float(np.linalg.norm(W)), theory.cross_entropy(data, W),
                     theory.kl_gap(data, W), rm["cos_mm"], rm["cos_corrected"], rm["subspace_error"], rm["margin"],
                     int(iterations), float(residual), bool(converged))


def _project_ball(W: np.ndarray, B: float) -> np.ndarray:
    n = np.linalg.norm(W)
    return W * (B / n) if n > B else W


def _fista_ball(data: NTPData, x: np.ndarray, B: float, L: float, tol: float,
                max_iter: int) -> tuple[np.ndarray, int, float, bool]:
    """min CE over ‖W‖_F ≤ B from x: FISTA (step 1/L) with adaptive restart (O'Donoghue & Candès).

    Returns (W, iterations, residual, converged) with residual the projected-gradient norm
    L‖W - Proj_B(W - ∇CE(W)/L)‖_F at the returned W.
    """
    def grad_map_norm(X):
        return L * float(np.linalg.norm(X - _project_ball(X - theory.gradient(data, X) / L, B)))

    x = x.copy()
    y, t, it = x.copy(), 1.0, 0
    for it in range(1, max_iter + 1):
        x_new = _project_ball(y - theory.gradient(data, y) / L, B)
        if L * np.linalg.norm(y - x_new) <= tol:  # the gradient map at y is free; confirm at x_new
            residual = grad_map_norm(x_new)
            if residual <= tol:
                return x_new, it, residual, True
        if np.sum((y - x_new) * (x_new - x)) > 0:  # momentum points uphill: restart
            y, t = x_new, 1.0
        else:
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            y = x_new + ((t - 1.0) / t_next) * (x_new - x)
            t = t_next
        x = x_new
    residual = grad_map_norm(x)
    return x, it, residual, residual <= tol


def regularization_path(data: NTPData, norms: ArrayLike, *, tol: float = 1e-10, max_iter: int = 20000,
                        reference: Reference | Literal[False] | None = None, threads: int | None = None) -> RegPath:
    """The norm-constrained minimizers Ŵ_B = argmin_{‖W‖_F ≤ B} CE(W) of Theorem 1 (eq. 8).

    Each Ŵ_B is computed by accelerated projected gradient (FISTA, step 1/L with
    L = :func:`theory.smoothness`, projection onto the Frobenius ball, adaptive restart),
    warm-started from the previous B's solution scaled to the new radius. Theorem 1: under
    compatibility and separability ‖Ŵ_B‖ = B (the infimum of CE is not attained, so no
    minimizer is interior), cos(Ŵ_B, W^mm) → 1 and P_F(Ŵ_B) → W* as B → ∞.

    Parameters
    ----------
    norms : 1-D array of B > 0, strictly increasing.
    tol : float
        Stop when the projected-gradient norm L‖W - Proj_B(W - ∇CE(W)/L)‖_F ≤ tol.
    max_iter : int
        Iterations per B; a :class:`ConvergenceWarning` is issued if reached.
    reference : None | False | Reference
        As in :func:`embgeo.ntp.training.train.train` (for cos_mm, cos_corrected, subspace_error, margin).
    threads : int, optional
        BLAS threads (through threadpoolctl); None: :func:`embgeo.core.threads.default_threads`.

    Returns
    -------
    RegPath with ``kind="norm"``, one :class:`PathPoint` per B.
    """
    check_ntp_data(data)
    grid = _check_grid("norms", norms, increasing=True)
    tol = check_float("tol", tol)
    max_iter = check_positive_int("max_iter", max_iter)
    threads = check_threads(threads)
    L = theory.smoothness(data)
    if L <= 0:
        raise InputError("data: the smoothness constant L is 0 (all embeddings are zero); the loss is constant")
    ref, status = resolve_reference(data, reference)
    points, W = [], np.zeros((data.V, data.d))
    unconverged = []
    with limit_threads(threads):
        for B in grid:
            n = np.linalg.norm(W)
            W, iterations, residual, converged = _fista_ball(data, W * (B / n) if n > 0 else W, B, L, tol, max_iter)
            if not converged:
                unconverged.append(float(B))
            points.append(_path_point(data, B, W, ref, iterations, residual, converged))
    if unconverged:
        warnings.warn(ConvergenceWarning(f"regularization_path: projected-gradient norm above tol={tol:g} after "
                                         f"max_iter={max_iter} iterations at B = {unconverged}"), stacklevel=2)
    meta = {"method": "FISTA with adaptive restart, step 1/L, projection onto the Frobenius ball",
            "smoothness": L, "tol": tol, "max_iter": max_iter, "reference": status,
            "entropy": theory.entropy(data)}
    return RegPath("norm", points, meta)


def _ridge_hessian(data: NTPData, W: np.ndarray, lam: float) -> LinearOperator:
    """∇²(CE + λ/2‖·‖²) at W as an operator on vec(W) (row-major): U ↦ Σ_j π̂_j J_j(U h̄_j) h̄_jᵀ + λU.

    J_j = diag(s_j) - s_j s_jᵀ is the softmax Jacobian at the logits of context j.
    """
    V, d, H, pi = data.V, data.d, data.embeddings, data.weights
    S = np.exp(theory.log_probs(data, W))  # (m, V)

    def matvec(u):
        A = H @ u.reshape(V, d).T  # directional logits (m, V)
        SA = S * A
        JA = SA - S * SA.sum(axis=1, keepdims=True)
        return ((JA * pi[:, None]).T @ H).ravel() + lam * np.ravel(u)

    return LinearOperator((V * d, V * d), matvec=matvec, dtype=np.float64)


def _newton_polish(data: NTPData, W: np.ndarray, lam: float, gtol: float, max_steps: int = 50,
                   max_cg: int = 10_000) -> tuple[np.ndarray, int]:
    """Newton-CG on ∇CE(W) + λW = 0 with backtracking on ‖gradient‖ (no function values).

    Near the optimum the loss value no longer resolves the remaining decrease (it is below the
    rounding of CE), so a line search on f stalls around ‖∇‖ ~ 1e-9; the gradient is still
    accurate, and the Newton direction p (H p = -g) decreases ‖g‖² for small steps. Returns the
    polished W and the number of Newton steps taken.
    """
    def grad(X):
        return theory.gradient(data, X) + lam * X

    g = grad(W)
    steps = 0
    for steps in range(1, max_steps + 1):
        if float(np.max(np.abs(g))) <= gtol:
            return W, steps - 1
        p, _ = cg(_ridge_hessian(data, W, lam), -g.ravel(), rtol=1e-3, maxiter=max_cg)
        p = p.reshape(W.shape)
        gnorm, alpha = np.linalg.norm(g), 1.0
        for _ in range(30):  # backtrack until the gradient norm decreases
            W_new = W + alpha * p
            g_new = grad(W_new)
            if np.linalg.norm(g_new) < gnorm:
                break
            alpha *= 0.5
        else:
            return W, steps - 1  # no decrease possible at this precision
        W, g = W_new, g_new
    return W, steps


def ridge_path(data: NTPData, lambdas: ArrayLike, *, gtol: float = 1e-10, max_iter: int = 50000,
               reference: Reference | Literal[False] | None = None, threads: int | None = None) -> RegPath:
    """The ridge minimizers Ŵ_λ = argmin_W CE(W) + λ/2 ‖W‖_F² along a decreasing λ grid.

    The NeurIPS "Contributions" paragraph states Theorem 1 for Ŵ_λ as λ → 0; it coincides with
    the norm-constrained path by Lagrangian duality. Each point is computed by
    ``scipy.optimize.minimize(method="L-BFGS-B", jac=True)`` on vec(W) in float64, warm-started
    from the previous λ's solution (the first from W = 0), then polished by a few Newton-CG
    steps. The objective value is evaluated as kl_gap(W) + λ/2‖W‖² (CE minus the constant 𝓗,
    computed as a KL, so the line search resolves decreases far below 𝓗's rounding); the
    gradient is :func:`theory.gradient` + λW.

    Why the polish: a line search needs f to resolve the decrease, which stops at
    ‖∇‖ ~ sqrt(eps · f · curvature) ~ 1e-9, above the default ``gtol``. L-BFGS-B therefore runs
    to max(gtol, min(1e-5, sqrt(gtol))) and Newton-CG (Hessian-vector products, backtracking on
    the gradient norm, which needs no function values) finishes to ``gtol`` in a few steps.

    Parameters
    ----------
    lambdas : 1-D array of λ > 0, strictly decreasing (e.g. ``numpy.logspace(-1, -8, 8)``).
    gtol : float
        Tolerance on max |∇CE(W) + λW| (L-BFGS-B's criterion); ``converged`` uses the same test.
    max_iter : int
        L-BFGS-B iterations per λ (small λ needs thousands; our observation, not the paper's); a
        :class:`ConvergenceWarning` is issued if the tolerance is not met.
    reference : None | False | dict
        As in :func:`train`.
    threads : int, optional
        BLAS threads (through threadpoolctl); None: :func:`embgeo.core.threads.default_threads`.

    Returns
    -------
    RegPath with ``kind="ridge"``, one :class:`PathPoint` per λ; ``residual`` is ‖∇CE(W) + λW‖_F
    and ``iterations`` counts L-BFGS-B iterations plus Newton steps.
    """
    check_ntp_data(data)
    grid = _check_grid("lambdas", lambdas, increasing=False)
    gtol = check_float("gtol", gtol)
    max_iter = check_positive_int("max_iter", max_iter)
    threads = check_threads(threads)
    ref, status = resolve_reference(data, reference)
    shape = (data.V, data.d)
    stage1_gtol = max(gtol, min(1e-5, math.sqrt(gtol)))
    points, w = [], np.zeros(data.V * data.d)
    unconverged = []
    with limit_threads(threads):
        for lam in grid:
            def fun(v: np.ndarray, lam: float = lam) -> tuple[float, np.ndarray]:
                W = v.reshape(shape)
                return (theory.kl_gap(data, W) + 0.5 * lam * float(v @ v),
                        theory.gradient(data, W).ravel() + lam * v)

            res = minimize(fun, w, jac=True, method="L-BFGS-B",
                           options={"gtol": stage1_gtol, "ftol": 0.0, "maxiter": max_iter, "maxfun": 2 * max_iter})
            W, newton_steps = _newton_polish(data, res.x.reshape(shape).copy(), lam, gtol)
            g = theory.gradient(data, W) + lam * W
            converged = float(np.max(np.abs(g))) <= gtol
            if not converged:
                unconverged.append((float(lam), float(np.max(np.abs(g))), str(res.message)))
            w = W.ravel().copy()
            points.append(_path_point(data, lam, W, ref, res.nit + newton_steps, float(np.linalg.norm(g)),
                                      converged))
    if unconverged:
        warnings.warn(ConvergenceWarning(f"ridge_path: max |gradient| above gtol={gtol:g} at (λ, max|grad|, "
                                         f"L-BFGS-B message) = {unconverged}"), stacklevel=2)
    meta = {"method": "L-BFGS-B (scipy) + Newton-CG polish, warm starts along decreasing λ", "gtol": gtol,
            "max_iter": max_iter, "reference": status, "entropy": theory.entropy(data)}
    return RegPath("ridge", points, meta)
