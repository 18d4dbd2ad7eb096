"""Theorem 1's closed-form collapse scale against a numerical minimization of the exact risk.

Feature collapse (Laurent, von Brecht, Bresson 2023), Theorem 1: for the network h (word embeddings W,
linear classifier U, weight decay λ on both) on data with uniform word frequencies that satisfy the latent
symmetry of Assumption 1, the global minimizers are type-I configurations: every word of concept α sits at
c·f_α on an equiangular frame, every u_{k,ℓ} at c'·f_z, with c = √(τ/n_w), c' = √(τ/(KL)) and τ the
minimizer of the scalar function H(t) of the theorem.

This script computes τ, c, c' from the closed form (:func:`embgeo.collapse.theory.type1_constants`), then
minimizes the exact population risk (eq. 5; every sentence enumerated) by L-BFGS from a random start and
compares the norms, directions and risk it reaches with the theorem's.

Run:  python examples/collapse_scale.py     (about 3 s on one core)
"""

import numpy as np

from embgeo.collapse.metrics import direction_spread, norm_spread, variance_ratio
from embgeo.collapse.solvers import minimize_true_risk
from embgeo.collapse.theory import full_latent_space, h_objective, type1_constants

n_c, s_c, L, d, lam = 3, 4, 3, 8, 1e-2  # concepts, words per concept, sentence length, dimension, λ
n_w = n_c * s_c
Z = full_latent_space(n_c, L)  # all n_c^L latent sequences: Assumption 1 holds exactly
K = len(Z)
print(f"instance: n_c = {n_c} concepts x {s_c} words (n_w = {n_w}), L = {L}, K = n_c^L = {K} classes, "
      f"d = {d}, weight decay {lam:g}")

theory = type1_constants(n_c, n_w, L, K, lam)
print(f"Theorem 1: tau = argmin H = {theory.tau:.8f} (H'(tau) = {theory.residual:.1e})")
print(f"Theorem 1: c  = sqrt(tau / n_w)   = {theory.c:.8f}  (norm of every word embedding)")
print(f"Theorem 1: c' = sqrt(tau / (K L)) = {theory.c_prime:.8f}  (norm of every u_k,l)")
print(f"Theorem 1: minimal risk H(tau) = {h_objective(theory.tau, n_c, n_w, L, K, lam):.10f}")

uniform = np.full(s_c, 1.0 / s_c)
found = minimize_true_risk(Z, uniform, n_c, lam, d, seed=0)  # L-BFGS on the exact risk (5)
W, U = found.W, found.U.reshape(-1, d)
concept = np.repeat(np.arange(n_c), s_c)  # word (α, β) -> its concept α
w_norms = np.linalg.norm(W, axis=1)
print(f"L-BFGS from a random start: {found.iterations} iterations, gradient norm {found.grad_norm:.1e}")
print(f"numerical: risk = {found.risk:.10f}")
print(f"numerical: mean ||w|| = {w_norms.mean():.8f} (spread {w_norms.std():.1e}), "
      f"relative error against c: {abs(w_norms.mean() - theory.c) / theory.c:.1e}")
print(f"numerical: mean ||u|| = {np.linalg.norm(U, axis=1).mean():.8f}, "
      f"relative error against c': {abs(np.linalg.norm(U, axis=1).mean() - theory.c_prime) / theory.c_prime:.1e}")
print(f"collapse of W: variance ratio {variance_ratio(W, concept):.1e}, norm spread {norm_spread(W, concept):.1e}, "
      f"direction spread {direction_spread(W, concept):.1e} rad")
means = np.stack([W[concept == a].mean(axis=0) for a in range(n_c)])
cosines = (means @ means.T) / np.outer(np.linalg.norm(means, axis=1), np.linalg.norm(means, axis=1))
off = cosines[~np.eye(n_c, dtype=bool)]
print(f"concept directions: pairwise cosines {off.min():.6f} .. {off.max():.6f} "
      f"(equiangular frame: -1/(n_c - 1) = {-1 / (n_c - 1):.6f})")
