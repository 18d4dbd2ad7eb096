"""The true (population) risk of h and h* on small fully enumerable instances, and its minimizer.

Paper: ``feature-collapse.txt`` eqs. (5) and (10). Theorems 1-3 are statements about the *true*
risk, an expectation over x ~ D_{z_k}; a finite training set only approximates it. When s_c^L is
small the expectation is a finite sum over every sentence of every class, so the risk, its
gradient and its minimizer can be computed exactly (torch, float64, autograd) and compared with
the closed forms of :mod:`embgeo.collapse.theory` without sampling noise.

Shapes: W (n_w, d) with word rows w_(α,β) at index α·s_c + β; U (K, L, d) with blocks u_{k,ℓ};
Z (K, L) latent concepts; freqs (s_c,) the within-concept law μ.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from embgeo.collapse.model import layer_norm
from embgeo.core.threads import limit_threads
from embgeo.core.validate import check_dense_size, make_rng
from embgeo.errors import InputError, SolverError

#: Refuse instances with more (class, sentence, position, dim) entries than this.
MAX_ENTRIES = 50_000_000


class PopulationRisk:
    """R(W, U) of eq. (5) (``layernorm=False``) or R*(W, U) of eq. (10) (``layernorm=True``), exactly.

    Every class k contributes E_{x~D_{z_k}} ℓ(h(x), k) = Σ_x D_{z_k}(x) ℓ(h(x), k), a sum over the
    s_c^L sentences whose concepts follow z_k, each with probability Π_ℓ μ_{β_ℓ}.
    """

    def __init__(self, Z, freqs, n_concepts: int, *, layernorm: bool = False, weight_decay_W: float = 0.0,
                 weight_decay_U: float = 0.0, ln_eps: float = 0.0):
        Z = np.asarray(Z)
        freqs = np.asarray(freqs, dtype=np.float64)
        if Z.ndim != 2 or not np.issubdtype(Z.dtype, np.integer) or Z.min() < 0 or Z.max() >= n_concepts:
            raise InputError(f"Z: expected a (K, L) integer array with entries in [0, {n_concepts})")
        if freqs.ndim != 1 or np.any(freqs <= 0) or abs(freqs.sum() - 1) > 1e-9:
            raise InputError("freqs: expected a positive (s_c,) vector summing to 1")
        K, L = Z.shape
        s_c = freqs.size
        n_sent = s_c**L
        if K * n_sent * L * 1 > MAX_ENTRIES:
            raise InputError(f"Z, freqs: {K} classes × {s_c}^{L} sentences is too many to enumerate "
                             "(use the sampled training of embgeo.collapse.train)")
        ranks = np.array(list(itertools.product(range(s_c), repeat=L)), dtype=np.int64)  # (S, L)
        self.words = torch.as_tensor(Z[:, None, :] * s_c + ranks[None, :, :])  # (K, S, L) word ids
        self.prob = torch.as_tensor(np.prod(freqs[ranks], axis=1))  # (S,)
        self.K, self.L, self.s_c, self.n_words = K, L, s_c, n_concepts * s_c
        self.layernorm, self.ln_eps = layernorm, ln_eps
        self.wd_W, self.wd_U = weight_decay_W, weight_decay_U

    def __call__(self, W: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
        """The risk at W (n_w, d), U (K, L, d): a 0-d tensor (differentiable)."""
        check_dense_size("enumerated representations", (self.K, len(self.prob), self.L, W.shape[1]))
        reps = layer_norm(W, self.ln_eps) if self.layernorm else W
        X = reps[self.words]  # (K, S, L, d): sentence x of class k
        logits = torch.einsum("ksld,jld->ksj", X, U)  # (K, S, K): h(x)_j
        nll = torch.logsumexp(logits, dim=2) - logits[torch.arange(self.K), :, torch.arange(self.K)]
        risk = (nll * self.prob).sum(dim=1).mean()
        return risk + 0.5 * self.wd_W * (W**2).sum() + 0.5 * self.wd_U * (U**2).sum()


def minimize_population_risk(risk: PopulationRisk, dim: int, *, init_scale: float = 0.1, seed: int = 0,
                             tol: float = 1e-10, max_iter: int = 20_000, threads: int = 1):
    """A local minimizer of the exact risk by L-BFGS from a small random start (float64).

    Returns (W (n_w, d), U (K, L, d), gradient norm, iterations) as numpy arrays; raises
    :class:`SolverError` if the gradient norm does not reach ``tol``.
    """
    rng = make_rng(seed)
    W = torch.tensor(init_scale * rng.standard_normal((risk.n_words, dim)), requires_grad=True)
    U = torch.tensor(init_scale * rng.standard_normal((risk.K, risk.L, dim)), requires_grad=True)
    with limit_threads(threads):
        opt = torch.optim.LBFGS([W, U], lr=1.0, max_iter=max_iter, tolerance_grad=tol, tolerance_change=0,
                                history_size=50, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            value = risk(W, U)
            value.backward()
            return value

        opt.step(closure)
        closure()
        grad = float(torch.sqrt((W.grad**2).sum() + (U.grad**2).sum()))
    iterations = opt.state[opt._params[0]]["n_iter"]
    if grad > 100 * tol:
        raise SolverError(f"minimize_population_risk: gradient norm {grad:.3g} after {iterations} L-BFGS iterations")
    return W.detach().numpy(), U.detach().numpy(), grad, iterations
