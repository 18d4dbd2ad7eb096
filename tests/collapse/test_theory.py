"""Tests of embgeo.collapse.theory against the paper's printed numbers, brute force, and the exact risk.

The tiny instances are fully sampled (K = n_c^L, {z_k} = all of [n_c]^L), where Assumption A holds
exactly and Theorems 1-3 apply without idealisation. The exact risk :func:`true_risk` is checked
against a brute-force evaluation of eqs. (5)/(10) written from the paper's definitions (one sentence
and one class at a time, plain Python floats), and its gradient :func:`true_risk_gradient` against
central finite differences of it; the critical-point tests then use that gradient.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar, root

from embgeo.collapse.theory import (
    PCASingularValues,
    TheoremD,
    assumption_b,
    bilinear_form,
    equiangular_frame,
    full_latent_space,
    h_objective,
    h_star_objective,
    layer_norm,
    predicted_pca_singular_values,
    theorem_d,
    theorem_d_g,
    true_risk,
    true_risk_gradient,
    type1_configuration,
    type1_constants,
    type1_risk,
    type2_configuration,
    type2_constants,
    type2_risk,
    type3_configuration,
    type3_lambda_max,
    type3_magnitudes,
    type3_risk,
)
from embgeo.errors import DistributionError, InputError, ShapeError, TooLargeError


def zipf(s_c: int) -> np.ndarray:
    mu = 1.0 / np.arange(1, s_c + 1)
    return mu / mu.sum()


# -- a brute-force evaluation of the true risks (eqs. 5, 10) ---------------------------------

def brute_force_risk(W, U, Z, freqs, lam, layernorm=False):
    """R(W, U) (or R* with layernorm) from the definitions, one sentence and one class at a time.

    (1/K) Σ_k Σ_{β_1..β_L} Π_ℓ μ_{β_ℓ} · (−log softmax_k(h(x))), h(x)_j = Σ_ℓ ⟨u_{j,ℓ}, v(x_ℓ)⟩ with
    x_ℓ = z_{k,ℓ}·s_c + β_ℓ and v = w, or φ(w) = (w − mean)/σ for h*; plus (λ/2)(‖W‖² + ‖U‖²), or
    (λ/2)‖U‖² for h*.
    """
    K, L, d = U.shape
    s_c = len(freqs)

    def rep(v):
        v = [float(x) for x in v]
        if not layernorm:
            return v
        mean = sum(v) / d
        sd = math.sqrt(sum((x - mean) ** 2 for x in v) / d)
        return [(x - mean) / sd for x in v]

    reps = [rep(w) for w in W]
    total = 0.0
    for k in range(K):
        for betas in itertools.product(range(s_c), repeat=L):
            words = [int(Z[k][ell]) * s_c + b for ell, b in enumerate(betas)]
            logits = [sum(sum(float(U[j][ell][i]) * reps[words[ell]][i] for i in range(d)) for ell in range(L))
                      for j in range(K)]
            top = max(logits)
            lse = top + math.log(sum(math.exp(z - top) for z in logits))
            total += math.prod(float(freqs[b]) for b in betas) * (lse - logits[k])
    reg = float((U**2).sum()) + (0.0 if layernorm else float((W**2).sum()))
    return total / K + 0.5 * lam * reg


def grad_norm(W, U, Z, freqs, n_c, lam, layernorm=False) -> float:
    _, dW, dU = true_risk_gradient(W, U, Z, freqs, n_c, lam, layernorm)
    return math.sqrt(float((dW**2).sum() + (dU**2).sum()))


def perturb(W, U, rng, eps):
    dW, dU = rng.standard_normal(W.shape), rng.standard_normal(U.shape)
    scale = eps / math.sqrt((dW**2).sum() + (dU**2).sum())
    return W + scale * dW, U + scale * dU


# -- Theorem 1: printed numbers and brute force ---------------------------------------------

def test_type1_paper_numbers():
    assert round(type1_constants(3, 1200, 15, 1000, 1e-3).c, 5) == 1.42214
    assert round(type1_constants(3, 1200, 15, 50, 1e-3).c, 5) == 0.61602


def naive_H(t, n_c, n_w, L, K, lam):
    eta = (n_c / (n_c - 1)) / math.sqrt(n_w * K * L)
    q = K / n_c**L
    return np.log(1 - q + q * (1 + (n_c - 1) * np.exp(-eta * t)) ** L) + lam * t


def brute_argmin(f, lo=1e-3, hi=1e7):
    grid = np.geomspace(lo, hi, 40001)
    i = int(np.argmin(f(grid)))
    res = minimize_scalar(f, bounds=(grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]), method="bounded",
                          options={"xatol": 1e-10})
    return res.x


@pytest.mark.parametrize("args", [(3, 1200, 15, 1000, 1e-3), (3, 1200, 15, 50, 1e-3), (4, 40, 6, 300, 1e-2)])
def test_type1_tau_brute_force(args):
    n_c, n_w, L, K, lam = args
    const = type1_constants(*args)
    tau = brute_argmin(lambda t: naive_H(t, *args))
    assert const.tau == pytest.approx(tau, rel=1e-6)
    assert const.c == pytest.approx(math.sqrt(tau / n_w), rel=1e-6)
    assert const.c_prime == pytest.approx(math.sqrt(tau / (K * L)), rel=1e-6)
    assert h_objective(const.tau, *args) == pytest.approx(naive_H(const.tau, *args), rel=1e-12, abs=1e-12)
    assert const.risk == pytest.approx(type1_risk(const.c, *args), rel=1e-12)
    assert abs(const.residual) < 1e-12


def naive_H_star(t, n_c, L, K, d, lam):
    eta = (n_c / (n_c - 1)) * math.sqrt(d / (K * L))
    q = K / n_c**L
    return np.log(1 - q + q * (1 + (n_c - 1) * np.exp(-eta * t)) ** L) + 0.5 * lam * t * t


@pytest.mark.parametrize("args", [(3, 15, 1000, 100, 1e-3), (2, 5, 20, 4, 1e-2), (5, 3, 125, 8, 0.3)])
def test_type2_tau_brute_force(args):
    n_c, L, K, d, lam = args
    const = type2_constants(*args)
    tau = brute_argmin(lambda t: naive_H_star(t, *args))
    assert const.tau == pytest.approx(tau, rel=1e-6)
    assert const.c == pytest.approx(tau / math.sqrt(K * L), rel=1e-6)
    assert const.word_norm == pytest.approx(math.sqrt(d))
    assert h_star_objective(const.tau, *args) == pytest.approx(naive_H_star(const.tau, *args), rel=1e-12)
    assert const.risk == pytest.approx(type2_risk(const.c, *args), rel=1e-12)


def test_type2_digest_numbers():
    const = type2_constants(3, 15, 1000, 100, 1e-3)
    assert const.tau == pytest.approx(11.947, abs=5e-4)
    assert const.c == pytest.approx(0.09755, abs=5e-6)


def test_type1_large_weight_decay_gives_zero():
    # H'(0) >= 0: the minimiser of H over t >= 0 is 0 (W = U = 0)
    const = type1_constants(2, 4, 2, 4, 10.0)
    assert const.tau == 0.0 and const.c == 0.0


def test_log_space_no_overflow():
    # n_c^L = 10^400 overflows float64; K/n_c^L is tiny but the log-space formulas stay finite
    const = type1_constants(10, 1000, 400, 10**6, 1e-4)
    assert np.isfinite(const.tau) and const.tau > 0 and abs(const.residual) < 1e-12
    const2 = type2_constants(10, 400, 10**6, 64, 1e-4)
    assert np.isfinite(const2.tau) and const2.tau > 0


# -- Theorem 2: the system (7)-(8) ----------------------------------------------------------

def system_residual(x, mu, n_c, L, lam):
    c, r = np.exp(x[0]), np.exp(x[1:])
    # log of each side of (7) and of (8), so that a wandering iterate cannot overflow
    eq7 = np.log(lam / L) + np.log(r / c) + np.logaddexp(np.log(n_c - 1), (n_c / (n_c - 1)) * c * r) - np.log(mu)
    eq8 = np.log(np.sum((r / c) ** 2)) - np.log(L * n_c ** (L - 1))
    return np.concatenate([[eq8], eq7])


@pytest.mark.parametrize("n_c,L,s_c,lam", [(3, 4, 10, 1e-3), (2, 3, 5, 1e-2), (4, 2, 6, 0.05)])
def test_type3_against_full_system_root(n_c, L, s_c, lam):
    mu = zipf(s_c)
    sol = type3_magnitudes(mu, n_c, L, lam)
    assert sol.residual < 1e-12
    x0 = np.concatenate([[math.log(0.5)], np.full(s_c, math.log(2.0))])
    res = root(system_residual, x0, args=(mu, n_c, L, lam), method="hybr", options={"xtol": 1e-13})
    assert np.max(np.abs(system_residual(res.x, mu, n_c, L, lam))) < 1e-12
    assert math.exp(res.x[0]) == pytest.approx(sol.c, rel=1e-9)
    np.testing.assert_allclose(np.exp(res.x[1:]), sol.r, rtol=1e-9)
    assert np.all(np.diff(sol.r) < 0)  # more frequent words get larger embeddings


def test_type3_digest_example():
    sol = type3_magnitudes(zipf(10), 3, 4, 1e-3)
    assert round(sol.c, 4) == 0.9605
    np.testing.assert_allclose(sol.r[:5], [4.01, 3.60, 3.37, 3.20, 3.07], atol=5e-3)
    assert round(sol.r[-1], 2) == 2.67
    assert sol.lambda_max == pytest.approx(0.0545, abs=5e-5)


def test_type3_uniform_is_type1_like():
    # uniform μ: all r_β equal (type-I is the special case r_β ≡ const)
    sol = type3_magnitudes(np.full(4, 0.25), 2, 3, 1e-2)
    np.testing.assert_allclose(sol.r, sol.r[0], rtol=1e-12)


def test_type3_smallness_condition_error():
    mu = zipf(10)
    bound = type3_lambda_max(mu, 3, 4)
    with pytest.raises(InputError, match=r"weight_decay.*0\.0545"):
        type3_magnitudes(mu, 3, 4, 1.01 * bound)
    type3_magnitudes(mu, 3, 4, 0.99 * bound)  # just inside: solvable


# -- fully sampled tiny instances ------------------------------------------------------------

N_C, L_, S_C, D, LAM = 3, 2, 3, 3, 0.01
Z_FULL = full_latent_space(N_C, L_)
K_FULL = N_C**L_


def test_full_latent_space():
    Z = full_latent_space(3, 3)
    assert Z.shape == (27, 3) and len({tuple(z) for z in Z}) == 27
    with pytest.raises(TooLargeError, match="length"):
        full_latent_space(3, 20)


def test_true_risk_matches_brute_force():
    rng = np.random.default_rng(0)
    mu = zipf(S_C)
    W = rng.standard_normal((N_C * S_C, D))
    U = rng.standard_normal((K_FULL, L_, D))
    for ln in (False, True):
        ref = brute_force_risk(W, U, Z_FULL, mu, LAM, ln)
        assert true_risk(W, U, Z_FULL, mu, N_C, LAM, layernorm=ln) == pytest.approx(ref, rel=1e-12)
    # random (non fully sampled) latent variables, too
    Z = rng.integers(0, N_C, size=(5, 3))
    U = rng.standard_normal((5, 3, D))
    assert true_risk(W, U, Z, mu, N_C, LAM) == pytest.approx(brute_force_risk(W, U, Z, mu, LAM), rel=1e-12)


@pytest.mark.parametrize("layernorm", [False, True])
def test_true_risk_gradient_matches_finite_differences(layernorm):
    rng = np.random.default_rng(1)
    mu = zipf(S_C)
    Z = rng.integers(0, N_C, size=(4, 3))
    W = rng.standard_normal((N_C * S_C, D))
    U = rng.standard_normal((4, 3, D))
    value, dW, dU = true_risk_gradient(W, U, Z, mu, N_C, LAM, layernorm)
    assert value == true_risk(W, U, Z, mu, N_C, LAM, layernorm)
    h = 1e-6

    def risk(W, U):
        return true_risk(W, U, Z, mu, N_C, LAM, layernorm)

    num_W, num_U = np.zeros_like(W), np.zeros_like(U)
    for i in np.ndindex(W.shape):
        E = np.zeros_like(W)
        E[i] = h
        num_W[i] = (risk(W + E, U) - risk(W - E, U)) / (2 * h)
    for i in np.ndindex(U.shape):
        E = np.zeros_like(U)
        E[i] = h
        num_U[i] = (risk(W, U + E) - risk(W, U - E)) / (2 * h)
    np.testing.assert_allclose(dW, num_W, atol=1e-7)
    np.testing.assert_allclose(dU, num_U, atol=1e-7)


def test_theorem2_type3_is_critical_and_wrong_r_is_not():
    mu = zipf(S_C)
    sol = type3_magnitudes(mu, N_C, L_, LAM)
    frame = equiangular_frame(N_C, D, seed=3)
    W, U = type3_configuration(Z_FULL, N_C, sol.r, sol.c, frame=frame)
    g_star = grad_norm(W, U, Z_FULL, mu, N_C, LAM)
    g_pert = grad_norm(*perturb(W, U, np.random.default_rng(1), 1e-2), Z_FULL, mu, N_C, LAM)
    assert g_star < 1e-7 * g_pert
    W_bad, U_bad = type3_configuration(Z_FULL, N_C, 1.1 * sol.r, sol.c, frame=frame)
    assert grad_norm(W_bad, U_bad, Z_FULL, mu, N_C, LAM) > 1e-1 * g_pert
    # a type-I configuration is never critical for non-uniform μ (corollary of Thm 2)
    W_I, U_I = type3_configuration(Z_FULL, N_C, np.full(S_C, np.sqrt(np.mean(sol.r**2))), sol.c, frame=frame)
    assert grad_norm(W_I, U_I, Z_FULL, mu, N_C, LAM) > 1e-1 * g_pert
    # closed form (fully sampled) equals the exact risk
    assert true_risk(W, U, Z_FULL, mu, N_C, LAM) == pytest.approx(type3_risk(sol.c, sol.r, mu, N_C, L_, LAM),
                                                                 rel=1e-12)


def assert_local_min(risk, W, U, n_dirs=60, eps=1e-3, seed=0):
    r0 = risk(W, U)
    rng = np.random.default_rng(seed)
    gains = [risk(*perturb(W, U, rng, eps)) - r0 for _ in range(n_dirs)]
    assert min(gains) > -1e-13
    for s in (1 + eps, 1 - eps):  # the radial direction (where a wrong scale c would show first)
        assert risk(s * W, s * U) - r0 > 0


def test_theorem1_type1_is_minimizer_of_exact_risk():
    mu = np.full(S_C, 1.0 / S_C)
    const = type1_constants(N_C, N_C * S_C, L_, K_FULL, LAM)
    W, U = type1_configuration(Z_FULL, N_C, S_C, const.c, const.c_prime, dim=D, frame=equiangular_frame(N_C, D, seed=5))

    def risk(W, U):
        return true_risk(W, U, Z_FULL, mu, N_C, LAM)

    assert risk(W, U) == pytest.approx(type1_risk(const.c, N_C, N_C * S_C, L_, K_FULL, LAM), abs=1e-10)
    assert risk(W, U) == pytest.approx(const.risk, abs=1e-10)
    assert_local_min(risk, W, U)
    assert grad_norm(W, U, Z_FULL, mu, N_C, LAM) < 1e-10
    # wrong constants: a scaled configuration is beaten by some direction
    W2, U2 = 1.05 * W, 1.05 * U
    assert risk(0.999 * W2, 0.999 * U2) < risk(W2, U2)


def test_theorem3_type2_is_minimizer_of_exact_risk():
    mu = zipf(S_C)  # Theorem 3 holds for any frequencies
    d = 4
    const = type2_constants(N_C, L_, K_FULL, d, LAM)
    W, U = type2_configuration(Z_FULL, N_C, S_C, const.c, dim=d, frame=equiangular_frame(N_C, d, mean_zero=True,
                                                                                          seed=2), word_scale=0.7)
    np.testing.assert_allclose(np.linalg.norm(layer_norm(W), axis=1), math.sqrt(d))

    def risk(W, U):
        return true_risk(W, U, Z_FULL, mu, N_C, LAM, layernorm=True)

    assert risk(W, U) == pytest.approx(type2_risk(const.c, N_C, L_, K_FULL, d, LAM), abs=1e-10)
    assert_local_min(risk, W, U)
    for s in (1.001, 0.999):  # U alone carries the scale for h*
        assert risk(W, s * U) > risk(W, U)
    assert grad_norm(W, U, Z_FULL, mu, N_C, LAM, layernorm=True) < 1e-10


def test_closed_form_minimised_over_t_gives_tau():
    n_w = N_C * S_C
    const = type1_constants(N_C, n_w, L_, K_FULL, LAM)
    frame = equiangular_frame(N_C, D)
    mu = np.full(S_C, 1.0 / S_C)

    def exact_along_family(t):
        W, U = type1_configuration(Z_FULL, N_C, S_C, math.sqrt(t / n_w), math.sqrt(t / (K_FULL * L_)), frame=frame)
        return true_risk(W, U, Z_FULL, mu, N_C, LAM)

    opts = {"xatol": 1e-9}
    t_exact = minimize_scalar(exact_along_family, bounds=(0, 10 * const.tau), method="bounded", options=opts).x
    assert t_exact == pytest.approx(const.tau, rel=1e-5)
    c_min = minimize_scalar(lambda c: type1_risk(c, N_C, n_w, L_, K_FULL, LAM), bounds=(0, 10 * const.c),
                            method="bounded", options=opts).x
    assert n_w * c_min**2 == pytest.approx(const.tau, rel=1e-5)

    c2 = type2_constants(N_C, L_, K_FULL, 4, LAM)
    c_min = minimize_scalar(lambda c: type2_risk(c, N_C, L_, K_FULL, 4, LAM), bounds=(0, 10 * c2.c),
                            method="bounded", options=opts).x
    assert math.sqrt(K_FULL * L_) * c_min == pytest.approx(c2.tau, rel=1e-5)


# -- PCA prediction --------------------------------------------------------------------------

def centred_singular_values(X, k=3):
    X = X - X.mean(axis=0)
    return np.linalg.svd(X, compute_uv=False)[:k]


def test_predicted_pca_paper_value():
    pred = predicted_pca_singular_values(type1_constants(3, 1200, 15, 1000, 1e-3))
    assert isinstance(pred, PCASingularValues)
    np.testing.assert_allclose(pred.W, [34.84, 34.84, 0.0], atol=5e-3)
    np.testing.assert_allclose(pred.U, pred.W)


def test_predicted_pca_matches_configurations():
    n_w = N_C * S_C
    c1 = type1_constants(N_C, n_w, L_, K_FULL, LAM)
    W, U = type1_configuration(Z_FULL, N_C, S_C, c1.c, c1.c_prime, dim=D, frame=equiangular_frame(N_C, D, seed=1))
    pred = predicted_pca_singular_values(c1)
    np.testing.assert_allclose(centred_singular_values(W), pred.W, atol=1e-10)
    np.testing.assert_allclose(centred_singular_values(U.reshape(-1, D)), pred.U, atol=1e-10)

    c2 = type2_constants(N_C, L_, K_FULL, 4, LAM)
    W, U = type2_configuration(Z_FULL, N_C, S_C, c2.c, dim=4)
    pred = predicted_pca_singular_values(c2, n_words=n_w)
    np.testing.assert_allclose(centred_singular_values(layer_norm(W)), pred.W, atol=1e-10)
    np.testing.assert_allclose(centred_singular_values(U.reshape(-1, 4)), pred.U, atol=1e-10)

    c3 = type3_magnitudes(zipf(S_C), N_C, L_, LAM)
    W, U = type3_configuration(Z_FULL, N_C, c3.r, c3.c, dim=D)
    pred = predicted_pca_singular_values(c3)
    np.testing.assert_allclose(centred_singular_values(W), pred.W, atol=1e-10)
    np.testing.assert_allclose(centred_singular_values(U.reshape(-1, D)), pred.U, atol=1e-10)


# -- frames ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,dim,mean_zero,seed", [
    (2, None, False, None), (3, 2, False, None), (3, 3, False, None), (4, 10, False, None),
    (5, 7, False, 0), (3, 3, True, None), (4, 9, True, None), (6, 8, True, 4),
])
def test_equiangular_frame(n, dim, mean_zero, seed):
    F = equiangular_frame(n, dim, mean_zero=mean_zero, seed=seed)
    assert F.shape == (n, n if dim is None else dim)
    np.testing.assert_allclose(np.linalg.norm(F, axis=1), 1.0, atol=1e-12)
    G = F @ F.T
    cos = G[~np.eye(n, dtype=bool)]
    np.testing.assert_allclose(cos, -1.0 / (n - 1), atol=1e-12)
    np.testing.assert_allclose(G, (n / (n - 1)) * np.eye(n) - np.ones((n, n)) / (n - 1), atol=1e-12)
    np.testing.assert_allclose(F.sum(axis=0), 0.0, atol=1e-12)
    if mean_zero:
        np.testing.assert_allclose(F.mean(axis=1), 0.0, atol=1e-12)
        np.testing.assert_allclose(np.linalg.norm(layer_norm(math.sqrt(F.shape[1]) * F), axis=1),
                                   math.sqrt(F.shape[1]))


def test_equiangular_frame_dim_errors():
    with pytest.raises(InputError, match="dim"):
        equiangular_frame(4, 2)
    with pytest.raises(InputError, match="dim"):
        equiangular_frame(4, 3, mean_zero=True)
    with pytest.raises(InputError, match="n"):
        equiangular_frame(1)


def test_configuration_layout():
    F = equiangular_frame(3, 3)
    r = np.array([3.0, 2.0])
    Z = np.array([[0, 2], [1, 1]])
    W, U = type3_configuration(Z, 3, r, 0.5, frame=F)
    assert W.shape == (6, 3) and U.shape == (2, 2, 3)
    np.testing.assert_allclose(W[1 * 2 + 1], 2.0 * F[1])  # row α·s_c + β
    np.testing.assert_allclose(U[0, 1], 0.5 * F[2])


# -- bad inputs --------------------------------------------------------------------------------

def test_bad_inputs_name_the_field():
    with pytest.raises(InputError, match="n_words"):
        type1_constants(3, 1201, 15, 1000, 1e-3)
    with pytest.raises(InputError, match="weight_decay"):
        type1_constants(3, 1200, 15, 1000, 0.0)
    with pytest.raises(InputError, match="n_classes"):
        type1_constants(3, 1200, 2, 10, 1e-3)
    with pytest.raises(InputError, match="n_concepts"):
        type2_constants(1, 15, 1, 100, 1e-3)
    with pytest.raises(InputError, match="dim"):
        type2_constants(3, 15, 1000, 2, 1e-3)
    with pytest.raises(InputError, match="length"):
        type1_constants(3, 1200, 0, 1000, 1e-3)
    with pytest.raises(DistributionError, match="freqs"):
        type3_magnitudes([0.5, 0.4], 3, 2, 1e-3)
    with pytest.raises(DistributionError, match="freqs"):
        type3_magnitudes([1.2, -0.2], 3, 2, 1e-3)
    with pytest.raises(InputError, match="weight_decay"):
        type3_magnitudes([0.5, 0.5], 3, 2, float("nan"))
    mu = np.full(S_C, 1.0 / S_C)
    W, U = type1_configuration(Z_FULL, N_C, S_C, 1.0, 1.0, dim=D)
    with pytest.raises(ShapeError, match="W"):
        true_risk(W[:-1], U, Z_FULL, mu, N_C, LAM)
    with pytest.raises(ShapeError, match="Z"):
        true_risk(W, U, Z_FULL[:-1], mu, N_C, LAM)
    with pytest.raises(InputError, match="Z"):
        true_risk(W, U, Z_FULL + 1, mu, N_C, LAM)
    with pytest.raises(TooLargeError, match="sentences"):
        true_risk(np.zeros((3 * 40, 2)), np.zeros((9, 4, 2)), np.zeros((9, 4), dtype=int), np.full(40, 1 / 40), 3,
                  LAM)
    with pytest.raises(InputError, match="frame"):
        type1_configuration(Z_FULL, N_C, S_C, 1.0, 1.0, frame=np.eye(3))
    with pytest.raises(InputError, match="frame"):
        type2_configuration(Z_FULL, N_C, S_C, 1.0, dim=2, frame=equiangular_frame(3, 2))
    with pytest.raises(InputError, match="constant"):
        layer_norm(np.ones((2, 3)))
    with pytest.raises(InputError, match="constants"):
        predicted_pca_singular_values(object())


# -- Assumption B (App. B.2) --------------------------------------------------------------------

def exact_solution_dimension(Z, n_c):
    """Dimension of the symmetric solutions of eqs. (44), independently: every quadruplet (j, k, j', k') with
    dist(z_j, z_k) = dist(z_j', z_k'), Γ^{(j,k)} = Z_j(Z_j − Z_k)ᵀ written from the one-hot matrices, unknowns the
    upper triangle of A (A symmetric), rank in exact rational arithmetic (sympy)."""
    import sympy

    Z = np.asarray(Z)
    K, L = Z.shape
    onehot = [np.eye(n_c, dtype=np.int64)[:, Z[k]] for k in range(K)]  # Z_k: (n_c, L)
    gamma = {(j, k): onehot[j] @ (onehot[j] - onehot[k]).T for j in range(K) for k in range(K)}
    dist = {(j, k): int(np.sum(Z[j] != Z[k])) for j in range(K) for k in range(K)}
    upper = [(a, b) for a in range(n_c) for b in range(a, n_c)]
    rows = set()
    for p, q in itertools.product(gamma, repeat=2):
        if dist[p] == dist[q]:
            G = gamma[p] - gamma[q]  # ⟨A, G⟩ for symmetric A: A_aa G_aa + A_ab (G_ab + G_ba)
            rows.add(tuple(int(G[a, b] + (G[b, a] if a != b else 0)) for a, b in upper))
    rank = sympy.Matrix(sorted(rows)).rank() if rows else 0
    return len(upper) - rank, sympy.Matrix(sorted(rows)) if rows else None, upper


@pytest.mark.parametrize("n_c,L", [(2, 2), (2, 3), (3, 2), (3, 3), (4, 2)])
def test_assumption_b_holds_on_the_full_latent_space_lemma_c(n_c, L):
    b = assumption_b(full_latent_space(n_c, L), n_c)
    assert b.holds and b.dimension == 2 and b.n_unknowns == n_c * (n_c + 1) // 2
    assert b.rank == b.n_unknowns - 2 and b.n_equations == (n_c**L) ** 2
    assert b.smallest_retained > 1e6 * b.tolerance and b.largest_discarded <= b.tolerance  # a clear gap
    assert "dimension 2" in b.certificate()
    if n_c**L <= 9:  # sympy's exact rank over every quadruplet agrees (K⁴ quadruplets: only the small ones)
        assert exact_solution_dimension(full_latent_space(n_c, L), n_c)[0] == 2


@pytest.mark.parametrize("Z,n_c", [
    ([[0, 1], [1, 0]], 3),                      # concept 2 never appears: A_22 is free
    ([[0, 1, 2], [1, 2, 0], [2, 0, 1]], 3),     # three cyclic shifts: every concept at every position, yet too few
    ([[0, 1, 2, 3], [1, 2, 3, 0]], 4),          # two latent variables, 10 unknowns
])
def test_assumption_b_fails_for_few_latent_variables_and_sympy_agrees(Z, n_c):
    b = assumption_b(Z, n_c)
    dim, M, upper = exact_solution_dimension(Z, n_c)
    assert not b.holds and b.dimension == dim > 2
    # a PSD solution outside 𝒜 exists: A = I + εB, B a solution orthogonal to I and 11ᵀ
    null = M.nullspace() if M is not None else [None]
    basis = np.array([[float(x) for x in v] for v in null]) if M is not None else np.eye(len(upper))
    a_coords = [[1.0 if a == b_ else 0.0 for a, b_ in upper], [1.0] * len(upper)]  # I and 11ᵀ in these coordinates
    for v in basis:
        B = np.zeros((n_c, n_c))
        for x, (a, b_) in zip(v, upper, strict=True):
            B[a, b_] = B[b_, a] = x
        inside = np.linalg.lstsq(np.array(a_coords).T, v, rcond=None)
        if np.linalg.norm(np.array(a_coords).T @ inside[0] - v) > 1e-9:  # v is not in 𝒜
            A = np.eye(n_c) + 0.5 * B / np.abs(np.linalg.eigvalsh(B)).max()
            assert np.linalg.eigvalsh(A).min() > 0  # PSD, not in 𝒜, and it solves every equation (44):
            if M is not None:
                np.testing.assert_allclose(np.array(M, dtype=float) @ [A[a, b_] for a, b_ in upper], 0, atol=1e-12)
            break
    else:
        pytest.fail("no solution outside 𝒜")


@pytest.mark.parametrize("seed,K,L,n_c,dim", [(0, 2, 3, 3, 5), (1, 3, 2, 3, 2), (2, 3, 3, 3, 3), (3, 4, 3, 3, 2),
                                             (5, 3, 2, 4, 7), (6, 6, 3, 3, 2)])
def test_assumption_b_agrees_with_exact_rank_on_small_random_latents(seed, K, L, n_c, dim):
    """Random latents, some satisfying B and some not: the float rank equals sympy's exact one."""
    Z = np.random.default_rng(seed).integers(0, n_c, (K, L))
    b = assumption_b(Z, n_c)
    assert b.dimension == exact_solution_dimension(Z, n_c)[0] == dim and b.holds == (dim == 2)


def test_assumption_b_chunks_give_the_same_answer(monkeypatch):
    import embgeo.collapse.theory as T

    Z = full_latent_space(3, 3)
    whole = assumption_b(Z, 3)
    monkeypatch.setattr(T, "_ENTRIES_PER_CHUNK", 27 * 9 * 2)  # 2 rows j per chunk: representatives carry over
    chunked = assumption_b(Z, 3)
    assert (chunked.dimension, chunked.n_equations) == (whole.dimension, whole.n_equations)
    assert chunked.smallest_retained == pytest.approx(whole.smallest_retained, rel=1e-10)


def test_assumption_b_bad_inputs():
    with pytest.raises(InputError, match="Z"):
        assumption_b([[0, 3]], 3)
    with pytest.raises(ShapeError, match="Z"):
        assumption_b([0, 1], 3)


# -- Theorem D (App. C) ---------------------------------------------------------------------------

def test_theorem_d_g_is_the_sum_over_spheres():
    """g(x) = log(1 + Σ_r |S_r| e^{θ_r x/K}) with |S_r|, θ_r of Lemma B, summed term by term; g(0) = log K."""
    n_c, L, K = 3, 4, 81
    S = [math.comb(L, r) * (n_c - 1) ** r for r in range(1, L + 1)]
    theta = [n_c * r / ((n_c - 1) * L) for r in range(1, L + 1)]
    for x in (-50.0, -3.0, 0.0, 7.5, 400.0):
        direct = math.log(1 + sum(s * math.exp(t * x / K) for s, t in zip(S, theta, strict=True)))
        assert theorem_d_g(x, n_c, L, K) == pytest.approx(direct, rel=1e-13)
    assert theorem_d_g(0.0, n_c, L, K) == pytest.approx(math.log(K), rel=1e-15)
    assert theorem_d_g(np.array([[0.0, 1.0]]), n_c, L, K).shape == (1, 2)


def test_theorem_d_the_sphere_counts_are_those_of_the_full_latent_space():
    """Lemma B(i) and (iii) on Z_FULL: |S_r(k)| counted, and the mean-value property with θ_r, A_r."""
    dist = (Z_FULL[:, None, :] != Z_FULL[None, :, :]).sum(axis=2)
    onehot = np.eye(N_C)[Z_FULL].transpose(0, 2, 1)  # (K, n_c, L): Z_k
    for r in range(1, L_ + 1):
        sizes = (dist == r).sum(axis=1)
        assert np.all(sizes == math.comb(L_, r) * (N_C - 1) ** r)
        theta = N_C * r / ((N_C - 1) * L_)
        for k in range(K_FULL):
            mean = onehot[dist[k] == r].mean(axis=0)
            np.testing.assert_allclose(onehot[k] - mean, theta * onehot[k] - r / ((N_C - 1) * L_), atol=1e-12)


def test_theorem_d_equality_on_type1_and_strict_off_equimargin():
    mu = zipf(S_C)  # Theorem D holds for any frequencies
    for c, cp in [(0.5, 0.3), (1.0, 1.0), (2.0, 0.7)]:
        W, U = type1_configuration(Z_FULL, N_C, S_C, c, cp, dim=D, frame=equiangular_frame(N_C, D, seed=4))
        t = theorem_d(W, U, Z_FULL, mu, N_C)
        assert isinstance(t, TheoremD) and t.u_sum < 1e-14
        assert t.risk == pytest.approx(true_risk(W, U, Z_FULL, mu, N_C, 0.0), rel=0)  # R_0 is the risk, λ = 0
        assert t.inner == pytest.approx(K_FULL * L_ * c * cp, rel=1e-12)  # ⟨Ū, WQᵀZ⟩ = KL c c′ at type I
        assert abs(t.gap) < 1e-12 * t.risk
        assert bilinear_form(W, U, Z_FULL, mu, N_C) == t.inner
    rng = np.random.default_rng(0)
    for _ in range(5):
        W, U = rng.standard_normal((N_C * S_C, D)), rng.standard_normal((K_FULL, L_, D))
        t = theorem_d(W, U - U.mean(axis=0), Z_FULL, mu, N_C)
        assert t.u_sum < 1e-14 and t.gap > 1e-3 * t.risk


def test_theorem_d_type3_minimizer_is_not_equimargin():
    """Zipf μ: a type-III configuration lies in 𝒩 but its margins depend on the words (r_β), so R_0 > g strictly;
    with equal r_β (type I) the gap closes."""
    mu = zipf(S_C)
    sol = type3_magnitudes(mu, N_C, L_, LAM)
    W, U = type3_configuration(Z_FULL, N_C, sol.r, sol.c, dim=D)
    assert theorem_d(W, U, Z_FULL, mu, N_C).gap > 1e-6
    W, U = type3_configuration(Z_FULL, N_C, np.full(S_C, sol.r.mean()), sol.c, dim=D)
    assert abs(theorem_d(W, U, Z_FULL, mu, N_C).gap) < 1e-13


def test_theorem_d_needs_n_outside_it_the_bound_breaks():
    """Negative control of the premise 𝒩: with every class's Ū_k equal (Σ_k Ū_k ≠ 0) all logits tie, R_0 = log K
    = g(0), and ⟨Ū, WQᵀZ⟩ < 0 puts g above R_0."""
    mu = np.full(S_C, 1.0 / S_C)
    rng = np.random.default_rng(1)
    W = rng.standard_normal((N_C * S_C, D))
    U = np.broadcast_to(rng.standard_normal((L_, D)), (K_FULL, L_, D)).copy()
    U *= -np.sign(bilinear_form(W, U, Z_FULL, mu, N_C))
    t = theorem_d(W, U, Z_FULL, mu, N_C)
    assert t.u_sum > 1 and t.risk == pytest.approx(math.log(K_FULL), rel=1e-14)
    assert t.inner < 0 and t.gap < -1e-3
