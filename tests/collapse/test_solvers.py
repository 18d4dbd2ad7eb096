"""Minimizing the exact population risk: the minimizers are the Theorem 1 and 2 configurations."""

import numpy as np
import pytest

from embgeo.collapse.solvers import RiskMinimum, minimize_true_risk
from embgeo.collapse.theory import full_latent_space, true_risk, true_risk_gradient, type1_constants, type3_magnitudes
from embgeo.errors import InputError, SolverError, TooLargeError


def test_minimizer_is_the_theorem2_configuration():
    """Fully sampled Zipf instance: exact minimization lands on type III with (c, r) of eqs. (7)-(8)."""
    n_c, L, s_c, lam = 3, 3, 6, 1e-2
    mu = 1 / np.arange(1, s_c + 1)
    mu /= mu.sum()
    Z = full_latent_space(n_c, L)
    m = minimize_true_risk(Z, mu, n_c, lam, 8, tol=1e-9)
    assert isinstance(m, RiskMinimum) and m.iterations > 0 and m.grad_norm <= 1e-7
    theory = type3_magnitudes(mu, n_c, L, lam)
    norms = np.linalg.norm(m.W, axis=1).reshape(n_c, s_c)
    np.testing.assert_allclose(norms, np.tile(theory.r, (n_c, 1)), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(m.U, axis=2), theory.c, rtol=1e-6)
    # the certificate is the risk's own: value and gradient at the returned point
    value, dW, dU = true_risk_gradient(m.W, m.U, Z, mu, n_c, lam)
    assert m.risk == value == true_risk(m.W, m.U, Z, mu, n_c, lam)
    assert m.grad_norm == pytest.approx(np.sqrt((dW**2).sum() + (dU**2).sum()), rel=1e-12)


def test_minimizer_uniform_is_type1():
    """Uniform frequencies: every word norm equals c = √(τ/n_w) of Theorem 1, every u-block c'."""
    n_c, L, s_c, lam = 3, 2, 3, 1e-2
    Z = full_latent_space(n_c, L)
    m = minimize_true_risk(Z, np.full(s_c, 1 / s_c), n_c, lam, 6, tol=1e-10)
    const = type1_constants(n_c, n_c * s_c, L, len(Z), lam)
    np.testing.assert_allclose(np.linalg.norm(m.W, axis=1), const.c, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(m.U, axis=2), const.c_prime, rtol=1e-6)
    assert m.risk == pytest.approx(const.risk, abs=1e-12)


def test_same_seed_same_minimizer_and_unreachable_tolerance():
    Z = full_latent_space(3, 2)
    mu = np.array([0.5, 0.3, 0.2])
    a = minimize_true_risk(Z, mu, 3, 1e-2, 4, layernorm=True, tol=1e-8, seed=3)
    b = minimize_true_risk(Z, mu, 3, 1e-2, 4, layernorm=True, tol=1e-8, seed=3)
    assert np.array_equal(a.W, b.W) and np.array_equal(a.U, b.U) and a.iterations == b.iterations
    with pytest.raises(SolverError, match="gradient norm"):
        minimize_true_risk(Z, mu, 3, 1e-2, 4, tol=1e-8, max_iter=2)


def test_bad_inputs():
    with pytest.raises(InputError, match="freqs"):
        minimize_true_risk(full_latent_space(2, 2), [0.5, 0.6], 2, 1e-2, 3)
    with pytest.raises(InputError, match="Z"):
        minimize_true_risk(np.array([[0, 5]]), [0.5, 0.5], 2, 1e-2, 3)
    with pytest.raises(TooLargeError, match="sentences"):
        minimize_true_risk(full_latent_space(3, 6), np.full(40, 1 / 40), 3, 1e-2, 3)
    for kwargs, field in (({"tol": 0}, "tol"), ({"threads": 0}, "threads"), ({"layernorm": 1}, "layernorm"),
                          ({"seed": None}, "seed"), ({"init_scale": -1.0}, "init_scale")):
        with pytest.raises(InputError, match=field):
            minimize_true_risk(full_latent_space(2, 2), [0.5, 0.5], 2, 1e-2, 3, **kwargs)
    with pytest.raises(InputError, match="dim"):
        minimize_true_risk(full_latent_space(2, 2), [0.5, 0.5], 2, 1e-2, 0)


def test_type1_converse_on_minimizers_from_random_starts_and_a_perturbed_one():
    """E(ii) as the experiment checks it, on a small instance (d = 9 = min(n_w, KL)): L-BFGS minimizers of the exact
    uniform risk from two starts are type I with Theorem 1's (c, c′); the same minimizer perturbed fails."""
    from embgeo.collapse.experiments import exact as EX

    Z, lam = full_latent_space(3, 2), 1e-2
    const = type1_constants(3, 9, 2, 9, lam)
    minima = [minimize_true_risk(Z, np.full(3, 1 / 3), 3, lam, 9, seed=s, tol=1e-9) for s in range(2)]
    pairs = [(m.W, m.U) for m in minima]
    claim = EX.type1_converse_claim(pairs, Z, 3, const.c, const.c_prime, 9, 9)
    assert claim.ok and claim.measured < 1e-6
    W, U = pairs[0]
    perturbed = (W, U + 1e-4 * np.random.default_rng(0).standard_normal(U.shape))
    assert not EX.type1_converse_claim([*pairs, perturbed], Z, 3, const.c, const.c_prime, 9, 9).ok
