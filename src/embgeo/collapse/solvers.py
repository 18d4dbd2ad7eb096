"""Minimizing the exact population risk of the feature-collapse paper on small, fully enumerable instances.

Paper: ``feature-collapse.txt`` eqs. (5) and (10). Theorems 1-3 are statements about the *true* risk,
an expectation over x ~ D_{z_k}; a finite training set only approximates it. When s_c^L is small the
expectation is a finite sum over every sentence of every class, computed exactly with its gradient
by :func:`embgeo.collapse.theory.true_risk_gradient` (numpy, float64). :func:`minimize_true_risk`
finds a local minimizer by L-BFGS, to compare with the closed forms of :mod:`embgeo.collapse.theory`
without sampling noise.

Shapes: W (n_w, d) with word rows w_(α,β) at index α·s_c + β; U (K, L, d) with blocks u_{k,ℓ};
Z (K, L) latent concepts; freqs (s_c,) the within-concept law μ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike

from embgeo.collapse.theory import true_risk_gradient
from embgeo.core.threads import limit_threads
from embgeo.core.validate import check_bool, check_float, check_positive_int, check_threads, make_rng
from embgeo.errors import SolverError


@dataclass(frozen=True)
class RiskMinimum:
    """A local minimizer of the exact risk and its certificate.

    ``W`` (n_w, d), ``U`` (K, L, d); ``risk`` the risk there; ``grad_norm`` the Euclidean norm of the
    full gradient (∂R/∂W, ∂R/∂U) there; ``iterations`` the L-BFGS iterations taken.
    """

    W: np.ndarray
    U: np.ndarray
    risk: float
    grad_norm: float
    iterations: int


def minimize_true_risk(Z: ArrayLike, freqs: ArrayLike, n_concepts: int, weight_decay: float, dim: int, *,
                       layernorm: bool = False, init_scale: float = 0.1, seed: int = 0, tol: float = 1e-10,
                       max_iter: int = 20_000, threads: int | None = None) -> RiskMinimum:
    """A local minimizer of R (eq. 5) or R* (eq. 10, ``layernorm=True``) by L-BFGS from a small random start.

    The risk and its gradient are :func:`~embgeo.collapse.theory.true_risk_gradient` (penalty
    (λ/2)(‖W‖² + ‖U‖²) for h, (λ/2)‖U‖² for h*); the iterations are ``torch.optim.LBFGS`` (strong
    Wolfe line search, history 50) until the largest gradient entry is at most ``tol``. The start is
    W, U = ``init_scale`` × N(0, 1) entries, drawn in that order from ``numpy.random.default_rng(seed)``.

    Parameters
    ----------
    Z : (K, L) int, freqs : (s_c,), n_concepts : int
        The instance (fully sampled when Z is :func:`~embgeo.collapse.theory.full_latent_space`).
    weight_decay : float
        λ ≥ 0 of the paper's penalty.
    dim : int
        d, the embedding dimension.
    threads : int, optional
        torch / BLAS threads during the solve; None (default): one, or ``embgeo --threads N``
        (:func:`embgeo.core.threads.default_threads`).

    Returns
    -------
    RiskMinimum
        Raises :class:`SolverError` if the gradient norm stays above 100·``tol``. Cost per
        iteration: one or a few evaluations of the risk and its gradient, O(K² s_c^L) each.
    """
    dim = check_positive_int("dim", dim)
    init_scale = check_float("init_scale", init_scale)
    tol = check_float("tol", tol)
    max_iter = check_positive_int("max_iter", max_iter)
    layernorm = check_bool("layernorm", layernorm)
    threads = check_threads(threads)
    rng = make_rng(seed)
    Z = np.asarray(Z)
    K, L = Z.shape if Z.ndim == 2 else (0, 0)
    n_words = check_positive_int("n_concepts", n_concepts, 2) * np.size(freqs)
    W = torch.tensor(init_scale * rng.standard_normal((n_words, dim)))
    U = torch.tensor(init_scale * rng.standard_normal((K, L, dim)))
    risk_args = (Z, freqs, n_concepts, weight_decay, layernorm)

    def closure() -> float:
        value, dW, dU = true_risk_gradient(W.numpy(), U.numpy(), *risk_args)
        W.grad, U.grad = torch.from_numpy(dW), torch.from_numpy(dU)
        return value

    closure()  # validates the instance before any iteration
    with limit_threads(threads):
        opt = torch.optim.LBFGS([W, U], lr=1.0, max_iter=max_iter, tolerance_grad=tol, tolerance_change=0,
                                history_size=50, line_search_fn="strong_wolfe")
        opt.step(closure)
        value = closure()
    grad = math.sqrt(float((W.grad**2).sum() + (U.grad**2).sum()))
    iterations = int(opt.state_dict()["state"][0]["n_iter"])
    if grad > 100 * tol:
        raise SolverError(f"minimize_true_risk: gradient norm {grad:.3g} after {iterations} L-BFGS iterations")
    return RiskMinimum(W.numpy().copy(), U.numpy().copy(), value, grad, iterations)
