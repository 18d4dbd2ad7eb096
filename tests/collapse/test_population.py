"""The exact population risk in torch: against the numpy enumeration and against Theorems 1-3."""

import numpy as np
import pytest
import torch

from embgeo.collapse.population import PopulationRisk, minimize_population_risk
from embgeo.collapse.theory import full_latent_space, true_risk, type1_constants, type3_magnitudes
from embgeo.errors import InputError


@pytest.mark.parametrize("layernorm", [False, True])
def test_matches_numpy_enumeration(layernorm):
    """Two independent enumerations of eq. (5)/(10): torch einsum vs theory.true_risk."""
    rng = np.random.default_rng(0)
    Z = full_latent_space(3, 2)
    mu = np.array([0.5, 0.3, 0.2])
    W, U = rng.standard_normal((9, 4)), rng.standard_normal((9, 2, 4))
    lam = 1e-3
    risk = PopulationRisk(Z, mu, 3, layernorm=layernorm, weight_decay_W=0.0 if layernorm else lam,
                          weight_decay_U=lam)
    ours = float(risk(torch.tensor(W), torch.tensor(U)))
    assert ours == pytest.approx(true_risk(W, U, Z, mu, 3, lam, layernorm=layernorm), rel=1e-12)


def test_minimizer_is_the_theorem2_configuration():
    """Fully sampled Zipf instance: GD-free exact minimization lands on type III with (c, r) of eqs. (7)-(8)."""
    n_c, L, s_c, lam = 3, 3, 6, 1e-2
    mu = 1 / np.arange(1, s_c + 1)
    mu /= mu.sum()
    risk = PopulationRisk(full_latent_space(n_c, L), mu, n_c, weight_decay_W=lam, weight_decay_U=lam)
    W, U, grad, _ = minimize_population_risk(risk, dim=8, tol=1e-9)
    theory = type3_magnitudes(mu, n_c, L, lam)
    norms = np.linalg.norm(W, axis=1).reshape(n_c, s_c)
    np.testing.assert_allclose(norms, np.tile(theory.r, (n_c, 1)), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(U, axis=2), theory.c, rtol=1e-6)


def test_minimizer_uniform_is_type1():
    """Uniform frequencies: every word norm equals c = √(τ/n_w) of Theorem 1, every u-block c'."""
    n_c, L, s_c, lam = 3, 2, 3, 1e-2
    Z = full_latent_space(n_c, L)
    risk = PopulationRisk(Z, np.full(s_c, 1 / s_c), n_c, weight_decay_W=lam, weight_decay_U=lam)
    W, U, _, _ = minimize_population_risk(risk, dim=6, tol=1e-10)
    const = type1_constants(n_c, n_c * s_c, L, len(Z), lam)
    np.testing.assert_allclose(np.linalg.norm(W, axis=1), const.c, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(U, axis=2), const.c_prime, rtol=1e-6)


def test_bad_inputs():
    with pytest.raises(InputError, match="freqs"):
        PopulationRisk(full_latent_space(2, 2), [0.5, 0.6], 2)
    with pytest.raises(InputError, match="Z"):
        PopulationRisk(np.array([[0, 5]]), [0.5, 0.5], 2)
    with pytest.raises(InputError, match="too many"):
        PopulationRisk(full_latent_space(3, 6), np.full(40, 1 / 40), 3)
