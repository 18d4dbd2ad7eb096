"""Properties of the NTP theory objects that follow from the paper's definitions and results.

Everything is checked from first principles: constraint values, margins and projections are
recomputed with plain numpy from the definitions (``reference.py``), not read from the solver's
own residuals. Tolerances are rounding-level (1e-9 relative and below) unless stated.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch

from embgeo.ntp import (
    NTPData,
    cross_entropy,
    entropy,
    gradient,
    is_compatible,
    is_separable,
    kl_gap,
    ntp_margin,
    ntp_svm,
    smoothness,
    synthetic,
    toy2d,
    w_star,
)
from embgeo.ntp.theory import subspace
from reference.ntp import (
    dense_projector_F,
    kesler_values,
    logits,
    make_data,
    make_shared_pattern_data,
    pair_values,
    spanning_matrix,
    supports_of,
)

EPS = np.finfo(float).eps


def inner(A, B) -> float:
    return float(np.sum(np.asarray(A) * np.asarray(B)))


def project_dense(Pi: np.ndarray, X: np.ndarray) -> np.ndarray:
    return (Pi @ np.asarray(X).ravel()).reshape(np.shape(X))


def combination(data, mu: np.ndarray) -> np.ndarray:
    """Σ_{j,v} μ_{j,v} (e_{z_j} - e_v) h̄_jᵀ with z_j = data.anchors[j] (a (V, d) matrix)."""
    C = np.zeros((data.V, data.d))
    for j in range(data.m):
        h = data.embeddings[j]
        for v in range(data.V):
            if mu[j, v] != 0.0:
                C[data.anchors[j]] += mu[j, v] * h
                C[v] -= mu[j, v] * h
    return C


def assert_satisfies_6a_6b(data, W, *, rtol=1e-9):
    """(6a) over all pairs z ≠ z' in S_j and (6b) over all z ∈ S_j, v ∉ S_j, recomputed here."""
    scale = max(1.0, float(np.max(np.abs(logits(data, W)))))
    pv = pair_values(data, W)
    if pv.size:
        assert np.max(np.abs(pv)) <= rtol * scale
    kv = kesler_values(data, W)
    assert kv.min() >= 1.0 - rtol * scale
    return kv


# instances: separable, covering d > m, d < m (LP path), uneven weights and varying supports
KKT_CASES = [
    pytest.param(lambda: synthetic(6, 5, 9, 2, seed=0), id="d>m-S2"),
    pytest.param(lambda: synthetic(10, 8, 14, 4, seed=0), id="d>m-S4"),
    pytest.param(lambda: synthetic(8, 10, 6, 3, seed=1), id="d<m-S3"),
    pytest.param(lambda: synthetic(6, 6, 4, 2, seed=2), id="d<m-S2"),
    pytest.param(lambda: make_data([1, 2, 3, 4, 2, 3], V=6, d=9, weights=[0.05, 0.3, 0.1, 0.25, 0.2, 0.1], seed=0),
                 id="d>m-varying-S"),
    pytest.param(lambda: make_data([3, 1, 2, 4, 2, 3], V=6, d=4, seed=2), id="d<m-varying-S"),
    pytest.param(toy2d, id="toy2d"),
]


# -- KKT of the NTP-SVM ---------------------------------------------------------------------------

@pytest.mark.parametrize("make", KKT_CASES)
def test_ntp_svm_kkt(make):
    data = make()
    res = ntp_svm(data, tol=1e-14)
    assert res.status == "optimal"
    # What the certificate promises for the multipliers: with relative gap g = (P − D)/P and W(μ) the
    # primal image of the dual point, ½‖W(μ) − W^mm‖² ≤ P* − D ≤ gP and ‖W − W^mm‖ ≤ √g‖W‖, so
    # ‖W − W(μ)‖ ≤ 2√g‖W‖ and |‖W‖² − Σμ| ≤ (g + 4√g)‖W‖² (+ rounding). The dual solver's exact
    # active-set finish reaches rounding; the augmented Lagrangian's multipliers converge linearly and
    # sit at this bound's scale (1e-8 at g = 1e-14). g is the difference of two float64 sums of size P, so
    # below a few dozen ulps it is rounding (and the solver clips it at 0): the bound uses g no smaller than
    # that. With the +1e-12 floor used before, a rounding-level g = 0 asked ‖W − W(μ)‖ ≤ 1e-12‖W‖, which
    # held by 1.4× (7.2e-13) and failed at 1.1e-12 once the Newton matrices summed their entries in
    # another order (d<m-varying-S, 2026-11-26); a nonzero rounding-level g gives 1e-10 (d<m-S2).
    kkt_tol = 2 * np.sqrt(max(res.residuals["duality_gap"], 64 * np.finfo(float).eps))
    W = res.W
    nW = np.linalg.norm(W)
    Pi = dense_projector_F(data)

    # Primal feasibility: W ∈ F⊥ (by the package's projection and by the dense one), (6a), (6b).
    assert np.linalg.norm(subspace(data).project(W)) <= 1e-9 * nW
    assert np.linalg.norm(project_dense(Pi, W)) <= 1e-9 * nW
    kv = assert_satisfies_6a_6b(data, W)
    # The minimum margin is exactly 1 (else W/min-margin would be feasible with smaller norm).
    assert kv.min() == pytest.approx(1.0, abs=1e-9)

    # Dual feasibility: μ ≥ 0, μ = 0 on the supports (a sparse (m, V) matrix).
    mu = res.multipliers.toarray()
    assert mu.shape == (data.m, data.V)
    assert np.all(mu >= 0)
    for j, supp in enumerate(supports_of(data)):
        assert np.all(mu[j, supp] == 0)
    assert mu.max() > 0

    # Complementary slackness: μ_{j,v} = 0 wherever the (anchor, v) margin is inactive. On F⊥
    # all in-support logits of a context coincide, so the anchor margin is the (z, v) margin.
    Z = logits(data, W)
    margin = Z[np.arange(data.m), data.anchors][:, None] - Z  # (m, V): margin of (z_j, v)
    off = np.ones((data.m, data.V), dtype=bool)
    for j, supp in enumerate(supports_of(data)):
        off[j, supp] = False
    inactive = off & (margin > 1 + 1e-6)
    assert np.all(mu[inactive] <= 1e-9 * mu.max())
    # The reported active set is the set of tight constraints.
    tight = {(j, v) for j, v in zip(*np.nonzero(off & (margin <= 1 + 1e-7)), strict=True)}
    assert {tuple(map(int, jv)) for jv in res.active} == tight
    # Every positive multiplier sits on a tight constraint.
    assert np.all(margin[mu > 1e-9 * mu.max()] <= 1 + 1e-7)

    # Stationarity of ½‖W‖²: W = P⊥(Σ μ_{j,v} (e_{z_j} - e_v) h̄_jᵀ); the equality multipliers
    # contribute an element of F, which P⊥ removes.
    C = combination(data, mu)
    assert np.linalg.norm(subspace(data).project_perp(C) - W) <= kkt_tol * nW
    assert np.linalg.norm(C - project_dense(Pi, C) - W) <= kkt_tol * nW
    # Strong duality: ‖W‖² = Σ μ (the dual objective at the optimum, since every μ_i > 0 has margin 1).
    assert nW**2 == pytest.approx(mu.sum(), rel=2 * kkt_tol + res.residuals["duality_gap"])


# -- W* -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", KKT_CASES)
def test_w_star_in_F_solves_log_odds_and_is_orthogonal_to_w_mm(make):
    data = make()
    Ws = w_star(data)
    nS = np.linalg.norm(Ws)
    assert np.linalg.norm(subspace(data).project_perp(Ws)) <= 1e-9 * nS
    assert np.linalg.norm(Ws - project_dense(dense_projector_F(data), Ws)) <= 1e-9 * nS
    # eq. (4) for ALL pairs z ≠ z' in each support.
    P = data.probs.toarray()
    Z = logits(data, Ws)
    for j, supp in enumerate(supports_of(data)):
        for z in supp:
            for zp in supp:
                assert Z[j, z] - Z[j, zp] == pytest.approx(math.log(P[j, z] / P[j, zp]), abs=1e-9)
    Wm = ntp_svm(data).W
    assert abs(inner(Ws, Wm)) <= 1e-9 * nS * np.linalg.norm(Wm)


# -- the data subspace F ----------------------------------------------------------------------------

SUBSPACE_CASES = [
    pytest.param(lambda: synthetic(6, 5, 9, 2, seed=0), id="d>m"),
    pytest.param(lambda: synthetic(10, 6, 3, 3, seed=0), id="d<m-rank-deficient"),
    pytest.param(lambda: synthetic(8, 10, 6, 3, seed=1), id="d<m"),
    pytest.param(lambda: make_data([1, 2, 3, 4, 2, 3], V=6, d=9, seed=0), id="varying-S"),
    pytest.param(lambda: make_data([1, 5, 1, 2], V=6, d=2, seed=3), id="d=2-varying-S"),
    pytest.param(lambda: synthetic(5, 4, 8, 1, seed=0), id="one-hot"),
]


@pytest.mark.parametrize("make", SUBSPACE_CASES)
def test_subspace_dimension_and_basis(make):
    data = make()
    F = subspace(data)
    A = spanning_matrix(data)
    rank = int(np.linalg.matrix_rank(A)) if A.size else 0
    assert F.dim == rank
    assert F.ambient_dim == data.V * data.d
    assert F.perp_dim == data.V * data.d - rank
    assert F.dim <= int(np.sum(data.support_sizes - 1))
    B = F.basis()
    assert B.shape == (F.dim, data.V, data.d)
    Bf = B.reshape(F.dim, data.V * data.d)
    np.testing.assert_allclose(Bf @ Bf.T, np.eye(F.dim), rtol=0, atol=1e-10)
    # ... and it spans F: same projector as the SVD of the spanning set.
    np.testing.assert_allclose(Bf.T @ Bf, dense_projector_F(data), rtol=0, atol=1e-10)


@pytest.mark.parametrize("make", SUBSPACE_CASES)
def test_subspace_projections(make):
    data = make()
    F = subspace(data)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((data.V, data.d))
    Y = rng.standard_normal((data.V, data.d))
    PX, PY = F.project(X), F.project(Y)
    scale = np.linalg.norm(X) * np.linalg.norm(Y)
    np.testing.assert_allclose(F.project(PX), PX, rtol=0, atol=1e-12 * np.linalg.norm(X))
    assert abs(inner(PX, Y) - inner(X, PY)) <= 1e-12 * scale
    np.testing.assert_allclose(PX + F.project_perp(X), X, rtol=0, atol=1e-14 * np.linalg.norm(X))
    assert abs(inner(PX, F.project_perp(Y))) <= 1e-12 * scale
    # Against the dense projector built from all pairs.
    np.testing.assert_allclose(PX, project_dense(dense_projector_F(data), X), rtol=0, atol=1e-10 * np.linalg.norm(X))
    # Every spanning element (e_z - e_z') h̄_jᵀ is in F.
    for row in spanning_matrix(data):
        E = row.reshape(data.V, data.d)
        assert np.linalg.norm(F.project_perp(E)) <= 1e-12 * np.linalg.norm(E)


# -- Prop. 1: CE(W* + γ W^mm) → H ----------------------------------------------------------------

def off_support_closed_form(data, Ws, Wm, gamma):
    """Σ_j π̂_j log(1 + s_j(γ)) with s_j(γ) = Σ_{v∉S_j} exp(a_{j,v} - γ μ_{j,v}).

    For W = W* + γ W^mm: W* reproduces the in-support log-odds (4) and W^mm adds the same amount
    to every in-support logit (6a), so the in-support part of 𝕊(W h̄_j) is exactly p̂_j (1 - ε_j)
    with ε_j = s_j / (1 + s_j), where a_{j,v} = (W* h̄_j)_v - logsumexp_{z∈S_j}(W* h̄_j)_z and
    μ_{j,v} ≥ 1 is the (6b) margin of W^mm. Then KL(p̂_j ‖ 𝕊) = -log(1 - ε_j) = log(1 + s_j).
    """
    Zs, Zm = logits(data, Ws), logits(data, Wm)
    total = 0.0
    for j, supp in enumerate(supports_of(data)):
        off = np.setdiff1d(np.arange(data.V), supp)
        lse = np.logaddexp.reduce(Zs[j, supp])
        mu = Zm[j, supp[0]] - Zm[j, off]
        s = np.sum(np.exp(Zs[j, off] - lse - gamma * mu))
        total += data.weights[j] * math.log1p(s)
    return total


def test_prop1_loss_tends_to_entropy():
    data = synthetic(8, 6, 12, 3, seed=0)
    Ws, Wm = w_star(data), ntp_svm(data).W
    gammas = [1, 2, 4, 8, 16, 32]
    gaps = [kl_gap(data, Ws + g * Wm) for g in gammas]
    assert all(a > b for a, b in zip(gaps, gaps[1:], strict=False))
    # From the closed form, gap(γ) = Σ_j π̂_j log(1 + s_j(γ)) ≤ Σ_j π̂_j s_j(γ) ≤ C e^{-γ} with
    # C = Σ_j π̂_j Σ_{v∉S_j} e^{a_{j,v}}, because every margin μ_{j,v} of W^mm is ≥ 1.
    # At γ = 32, e^{-32} ≈ 1.3e-14, so the gap is below 1e-6 whenever C < 7.9e7, i.e. unless the
    # off-support logits of W* exceed the in-support log-sum-exp by more than ~18 nats.
    Zs = logits(data, Ws)
    C = sum(data.weights[j] * np.sum(np.exp(Zs[j, np.setdiff1d(np.arange(data.V), s)] - np.logaddexp.reduce(Zs[j, s])))
            for j, s in enumerate(supports_of(data)))
    assert C * math.exp(-32) < 1e-6  # premise of the bound on this instance (C is O(1) here)
    assert 0 < gaps[-1] < 1e-6
    for g, gap in zip(gammas, gaps, strict=True):
        assert gap <= C * math.exp(-g) + rounding_bound(data, Ws + g * Wm)
    # And CE → H itself, from above.
    H = entropy(data)
    ce = [cross_entropy(data, Ws + g * Wm) for g in gammas]
    assert all(c > H for c in ce[:4])
    assert ce[-1] == pytest.approx(H, abs=1e-12)


def rounding_bound(data, W) -> float:
    """First-order rounding bound on Σ π̂ p̂ (log p̂ - log q): 8 eps per unit magnitude of each term."""
    Z = logits(data, W)
    lse = np.logaddexp.reduce(Z, axis=1)
    P = data.probs.toarray()
    mag = np.where(P > 0, np.abs(np.log(np.where(P > 0, P, 1))) + np.abs(Z) + np.abs(lse)[:, None], 0)
    return 8 * EPS * float(np.sum(data.weights[:, None] * P * mag))


@pytest.mark.parametrize("gamma", [1, 2, 4, 8, 16])
def test_kl_gap_matches_closed_form_along_ray(gamma):
    data = synthetic(8, 6, 12, 3, seed=0)
    Ws, Wm = w_star(data), ntp_svm(data).W
    W = Ws + gamma * Wm
    expected = off_support_closed_form(data, Ws, Wm, gamma)
    # W* and W^mm satisfy (4) / (6a) to ~1e-14, which perturbs the gap at second order only.
    assert kl_gap(data, W) == pytest.approx(expected, abs=rounding_bound(data, W) + 1e-12 * expected)


def kl_gap_mpmath(data, W, dps=50) -> float:
    """Σ_j π̂_j KL(p̂_j ‖ 𝕊(W h̄_j)) in 50-digit arithmetic from the float64 inputs."""
    with mpmath.workdps(dps):
        H = [[mpmath.mpf(float(x)) for x in row] for row in data.embeddings]
        Wm = [[mpmath.mpf(float(x)) for x in row] for row in W]
        P = data.probs.toarray()
        total = mpmath.mpf(0)
        for j in range(data.m):
            z = [mpmath.fsum(a * b for a, b in zip(Wm[v], H[j], strict=True)) for v in range(data.V)]
            lse = mpmath.log(mpmath.fsum(mpmath.exp(x) for x in z))
            for v in np.flatnonzero(P[j] > 0):
                p = mpmath.mpf(float(P[j, v]))
                total += mpmath.mpf(float(data.weights[j])) * p * (mpmath.log(p) - (z[v] - lse))
        return float(total)


def test_kl_gap_equals_ce_minus_entropy_on_moderate_w():
    data = make_data([1, 2, 3, 4, 2, 3], V=6, d=9, weights=[0.05, 0.3, 0.1, 0.25, 0.2, 0.1], seed=0)
    rng = np.random.default_rng(1)
    for scale in (0.0, 0.3, 1.0, 3.0):
        W = scale * rng.standard_normal((data.V, data.d))
        assert kl_gap(data, W) == pytest.approx(cross_entropy(data, W) - entropy(data), abs=1e-12)
        assert kl_gap(data, W) == pytest.approx(kl_gap_mpmath(data, W), rel=1e-12, abs=1e-14)
    # At W = 0 the model is uniform: KL = Σ π̂ (log V - H(p̂_j)).
    assert kl_gap(data, np.zeros((data.V, data.d))) == pytest.approx(math.log(data.V) - entropy(data), rel=1e-13)


@pytest.mark.parametrize("gamma", [16, 24])
def test_kl_gap_accurate_in_the_small_gap_regime(gamma):
    """Gap 1.6e-7 and 5e-11: kl_gap stays positive and within the rounding bound of the exact value."""
    data = synthetic(8, 6, 12, 3, seed=0)
    Ws, Wm = w_star(data), ntp_svm(data).W
    W = Ws + gamma * Wm
    exact = kl_gap_mpmath(data, W)
    # The closed form only involves off-support exponentials and log1p: full relative precision.
    assert off_support_closed_form(data, Ws, Wm, gamma) == pytest.approx(exact, rel=1e-9)
    got = kl_gap(data, W)
    assert got > 0
    assert got == pytest.approx(exact, abs=rounding_bound(data, W))


def test_kl_gap_full_relative_precision_far_below_rounding_of_ce():
    """kl_gap's docstring promises full relative precision for gaps far below 𝓗; a KL is never < 0.

    At W = W* + 40 W^mm the exact gap of the float64 W is ~3.8e-17 (mpmath, 50 digits). The
    in-support logits are ~40 c_j, so log q = Z - logsumexp(Z) carries an absolute rounding
    error ~1e-14 that the term-by-term sum does not remove.
    """
    data = synthetic(8, 6, 12, 3, seed=0)
    W = w_star(data) + 40 * ntp_svm(data).W
    exact = kl_gap_mpmath(data, W)
    assert 0 < exact < 1e-15
    got = kl_gap(data, W)
    assert got > 0
    assert got == pytest.approx(exact, rel=1e-6)


# -- Lemma 1 and separability certificates ---------------------------------------------------------

@pytest.mark.parametrize("shape", [(5, 6, 6, 2), (8, 10, 12, 3), (20, 10, 25, 6), (12, 7, 13, 1), (4, 3, 30, 2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lemma1_overparameterized_is_compatible_and_separable(shape, seed):
    m, V, d, S = shape
    data = synthetic(m, V, d, S, seed=seed)
    assert d > m
    comp = is_compatible(data)
    assert comp
    assert comp.residual <= comp.tolerance
    P = data.probs.toarray()
    rhs = np.array([math.log(P[j, z] / P[j, zp]) for j, s in enumerate(supports_of(data))
                    for i, z in enumerate(s) for zp in s[i + 1:]])
    if rhs.size:
        np.testing.assert_allclose(pair_values(data, comp.W), rhs, rtol=0, atol=1e-9)
    sep = is_separable(data)
    assert sep and sep.separable and sep.farkas is None
    assert_satisfies_6a_6b(data, sep.W)


NON_SEPARABLE = [
    pytest.param((7, 6, 5, 3, 0), id="m7-V6-d5-S3"),
    pytest.param((6, 6, 4, 2, 0), id="m6-V6-d4-S2"),
    pytest.param((10, 5, 3, 2, 0), id="m10-V5-d3-S2"),
    pytest.param((10, 6, 3, 3, 0), id="m10-V6-d3-S3"),
]


@pytest.mark.parametrize("method", ["lp", "dual"])
@pytest.mark.parametrize("case", NON_SEPARABLE)
def test_farkas_certificate_of_non_separability(case, method):
    m, V, d, S, seed = case
    data = synthetic(m, V, d, S, seed=seed)
    sep = is_separable(data, method=method)
    assert not sep and sep.W is None
    mu = sep.farkas.toarray()
    assert mu.shape == (data.m, data.V)
    assert np.all(mu >= 0)
    assert mu.sum() == pytest.approx(1.0, abs=1e-12)
    for j, supp in enumerate(supports_of(data)):
        assert np.all(mu[j, supp] == 0)
    # Σ μ (e_{z_j} - e_v) h̄_jᵀ ∈ F: every W ∈ F⊥ has ⟨W, C⟩ = Σ μ · margin = 0, so the margins
    # cannot all be ≥ 1 (Σ μ = 1). The scale of C's terms is ‖(e_z - e_v) h̄_jᵀ‖ = √2 ‖h̄_j‖.
    C = combination(data, mu)
    scale = math.sqrt(2) * float(np.max(np.linalg.norm(data.embeddings, axis=1)))
    assert np.linalg.norm(subspace(data).project_perp(C)) <= 1e-9 * scale
    assert np.linalg.norm(C - project_dense(dense_projector_F(data), C)) <= 1e-9 * scale
    assert np.linalg.norm(C) > 1e-3 * scale  # not the trivial combination
    # The complete certificate Ψ: −μ off the supports, every context's weights summing to 0, and
    # ‖Ψᵀ H̄‖ (per token Σ_j Ψ_{j,v} h̄_j) is the reported perp_norm, an upper bound on ‖P⊥(C)‖.
    Psi = sep.certificate.toarray()
    off = np.ones_like(mu, dtype=bool)
    for j, supp in enumerate(supports_of(data)):
        off[j, supp] = False
    np.testing.assert_array_equal(Psi[off], -mu[off])
    np.testing.assert_allclose(Psi.sum(axis=1), 0.0, rtol=0, atol=1e-12)
    perp = np.linalg.norm(Psi.T @ data.embeddings)
    assert sep.residuals["perp_norm"] == pytest.approx(perp, rel=1e-6, abs=1e-15)
    assert np.linalg.norm(subspace(data).project_perp(C)) <= perp * (1 + 1e-6) + 1e-13 * scale  # rounding
    assert perp <= 1e-9 * scale


def rank_deficient_wide():
    """d ≥ m but rank H̄ < m: the closed form of Lemma 1 does not apply, the LP must decide."""
    rng = np.random.default_rng(5)
    base = synthetic(6, 8, 4, 2, seed=1)
    H = base.embeddings @ rng.standard_normal((4, 9))  # (6, 9), rank 4
    return NTPData(H, base.probs)


LP_SEPARABLE = [
    pytest.param(lambda: synthetic(6, 6, 4, 2, seed=2), id="d<m-S2"),
    pytest.param(lambda: synthetic(8, 8, 6, 2, seed=0), id="d<m-S2-m8"),
    pytest.param(lambda: synthetic(7, 6, 5, 3, seed=5), id="d<m-S3"),
    pytest.param(lambda: synthetic(6, 5, 4, 1, seed=0), id="d<m-one-hot"),
    pytest.param(lambda: make_data([3, 1, 2, 4, 2, 3], V=6, d=4, seed=2), id="d<m-varying-S"),
    pytest.param(toy2d, id="toy2d"),
    pytest.param(rank_deficient_wide, id="d>=m-rank-deficient"),
]


@pytest.mark.parametrize("method, label", [("lp", "LP"), ("dual", "dual"), ("auto", "LP")])  # small: auto → LP
@pytest.mark.parametrize("make", LP_SEPARABLE)
def test_rank_deficient_separability_certificate(make, method, label):
    """Both routes (LP, NTP-SVM dual iterations) return a certificate satisfying (6a)-(6b)."""
    data = make()
    assert np.linalg.matrix_rank(data.embeddings) < data.m
    sep = is_separable(data, method=method)
    assert sep
    assert label in sep.method
    assert sep.farkas is None
    assert np.linalg.norm(project_dense(dense_projector_F(data), sep.W)) <= 1e-9 * np.linalg.norm(sep.W)
    assert_satisfies_6a_6b(data, sep.W)


# -- Fig. 2: W^mm depends on the support pattern only ----------------------------------------------

def test_toy2d_words_1_and_5_share_w_mm_rows():
    data = toy2d()
    assert is_separable(data)
    mask = data.probs.toarray() > 0
    assert np.array_equal(mask[:, 0], mask[:, 4])  # paper words 1 and 5: same support pattern
    assert all(not np.array_equal(mask[:, 0], mask[:, v]) for v in (1, 2, 3))
    Wm, Ws = ntp_svm(data).W, w_star(data)
    np.testing.assert_allclose(Wm[0], Wm[4], rtol=0, atol=1e-7)
    assert np.linalg.norm(Ws[0] - Ws[4]) > 0.1 * np.linalg.norm(Ws)
    # Rows with different patterns differ in W^mm.
    assert np.linalg.norm(Wm[0] - Wm[1]) > 0.1 * np.linalg.norm(Wm)


@pytest.mark.parametrize(("m", "V", "d", "pair", "seed"), [(8, 7, 10, (1, 5), 0), (6, 6, 9, (0, 3), 2),
                                                           (6, 6, 4, (1, 4), 1)])
def test_tokens_with_same_support_pattern_have_equal_w_mm_rows(m, V, d, pair, seed):
    data = make_shared_pattern_data(m, V, d, pair=pair, seed=seed)
    assert is_separable(data)
    a, b = pair
    Wm = ntp_svm(data).W
    np.testing.assert_allclose(Wm[a], Wm[b], rtol=0, atol=1e-7 * np.linalg.norm(Wm))
    Ws = w_star(data)
    assert np.linalg.norm(Ws[a] - Ws[b]) > 1e-2 * np.linalg.norm(Ws)


# -- NTP-margin -------------------------------------------------------------------------------------

def margin_from_definition(data, W, Pi) -> float:
    """min_{j, z∈S_j, v∉S_j} (e_z - e_v)ᵀ P⊥(W) h̄_j / ‖P⊥(W)‖ with the dense projector Pi onto F."""
    Wp = np.asarray(W) - project_dense(Pi, W)
    return float(np.min(kesler_values(data, Wp)) / np.linalg.norm(Wp))


@pytest.mark.parametrize("make", KKT_CASES[:5])
def test_ntp_margin(make):
    data = make()
    res = ntp_svm(data)
    Wm = res.W
    assert ntp_margin(data, Wm) == pytest.approx(res.margin, rel=1e-10)
    # P⊥ removes the F component: adding W* does not change the margin.
    assert ntp_margin(data, Wm + w_star(data)) == pytest.approx(res.margin, rel=1e-9)
    rng = np.random.default_rng(0)
    Pi = dense_projector_F(data)
    for _ in range(20):
        W = rng.standard_normal((data.V, data.d))
        g = ntp_margin(data, W)
        assert g <= res.margin * (1 + 1e-12)
        assert g == pytest.approx(margin_from_definition(data, W, Pi), rel=1e-9, abs=1e-12)
        for c in (1e-3, 0.5, 7.0, 1e4):
            assert ntp_margin(data, c * W) == pytest.approx(g, rel=1e-12, abs=1e-15)
    # Any feasible (6) point has margin ≤ the optimum; a perturbed W^mm is strictly worse.
    W = Wm + 0.1 * np.linalg.norm(Wm) * rng.standard_normal(Wm.shape) / math.sqrt(Wm.size)
    assert ntp_margin(data, W) < res.margin * (1 - 1e-6)


# -- loss, gradient, entropy, smoothness -------------------------------------------------------------

def ce_torch(data, W: torch.Tensor) -> torch.Tensor:
    H = torch.tensor(np.array(data.embeddings), dtype=torch.float64)
    P = torch.tensor(data.probs.toarray(), dtype=torch.float64)
    pi = torch.tensor(np.array(data.weights), dtype=torch.float64)
    logq = torch.log_softmax(H @ W.T, dim=1)
    return -(pi[:, None] * P * logq).sum()


GRAD_CASES = [
    pytest.param(lambda: synthetic(8, 6, 5, 3, seed=0), id="synthetic"),
    pytest.param(lambda: make_data([1, 2, 3, 4, 2, 3], V=6, d=9, weights=[0.05, 0.3, 0.1, 0.25, 0.2, 0.1], seed=0),
                 id="uneven"),
    pytest.param(toy2d, id="toy2d"),
]


@pytest.mark.parametrize("make", GRAD_CASES)
def test_cross_entropy_and_gradient_match_torch(make):
    data = make()
    rng = np.random.default_rng(3)
    for scale in (0.1, 1.0, 5.0):
        W = scale * rng.standard_normal((data.V, data.d))
        Wt = torch.tensor(W, dtype=torch.float64, requires_grad=True)
        loss = ce_torch(data, Wt)
        loss.backward()
        assert cross_entropy(data, W) == pytest.approx(loss.item(), rel=1e-12)
        g = gradient(data, W)
        assert g.shape == (data.V, data.d)
        np.testing.assert_allclose(g, Wt.grad.numpy(), rtol=0, atol=1e-12 * max(1.0, np.abs(g).max()))


def test_gradient_matches_central_finite_differences():
    data = NTPData(np.array([[1.0, -0.5], [0.3, 2.0], [-1.2, 0.4]]),
                   [[0.7, 0.3, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.2, 0.2, 0.2, 0.4]], [0.5, 0.2, 0.3])
    W = np.random.default_rng(0).standard_normal((4, 2))
    # Central differences: truncation ~ h² |f'''| / 6 ≈ 1e-11 and rounding ~ eps |f| / h ≈ 1e-11 at h = 1e-5.
    h = 1e-5
    fd = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        E = np.zeros_like(W)
        E[idx] = h
        fd[idx] = (cross_entropy(data, W + E) - cross_entropy(data, W - E)) / (2 * h)
    np.testing.assert_allclose(gradient(data, W), fd, rtol=0, atol=1e-8)


def test_entropy_hand_computed():
    # H = -Σ_j π_j Σ_z p log p = 0.25·log 2 + 0.75·(0.5 log 4 + 0.5 log 2) = 1.375 log 2
    data = NTPData(np.eye(2), [[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]], [0.25, 0.75])
    assert entropy(data) == pytest.approx(1.375 * math.log(2), rel=1e-15)
    # One-hot supports: H = 0 (Remark 1).
    assert entropy(NTPData(np.eye(2), [[1.0, 0.0], [0.0, 1.0]])) == 0.0
    # Uniform on the whole vocabulary: H = log V.
    assert entropy(NTPData(np.ones((1, 3)), [[1 / 3, 1 / 3, 1 / 3]])) == pytest.approx(math.log(3), rel=1e-15)


def hessian_torch(data, W) -> np.ndarray:
    Wt = torch.tensor(W, dtype=torch.float64)
    Hs = torch.autograd.functional.hessian(lambda x: ce_torch(data, x), Wt)
    n = W.size
    return Hs.reshape(n, n).numpy()


SMOOTH_CASES = [
    pytest.param(lambda: synthetic(5, 4, 8, 2, seed=0), id="d>m"),
    pytest.param(lambda: make_data([1, 2, 3, 2, 1, 2, 2], V=7, d=5, weights=np.arange(1, 8) / 28, seed=0),
                 id="d<m-uneven"),
]


@pytest.mark.parametrize("make", SMOOTH_CASES)
def test_smoothness_constant_descent_lemma(make):
    """L = ½ λ_max(Σ π̂_j h̄_j h̄_jᵀ) bounds the Hessian (softmax Jacobian ≼ ½ I by Gershgorin:
    2 s_i (1 - s_i) ≤ ½), so the descent lemma CE(W2) ≤ CE(W1) + ⟨∇CE(W1), W2 - W1⟩ + (L/2)‖W2 - W1‖²
    holds. (This is the standard form with L/2; it implies the weaker one with L.)"""
    data = make()
    L = smoothness(data)
    Hw = data.embeddings * np.sqrt(data.weights)[:, None]
    assert L == pytest.approx(0.5 * np.linalg.eigvalsh(Hw.T @ Hw)[-1], rel=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(200):
        W1 = rng.standard_normal((data.V, data.d)) * rng.choice([0.1, 1.0, 5.0])
        W2 = W1 + rng.standard_normal(W1.shape) * rng.choice([1e-2, 0.3, 3.0])
        D = W2 - W1
        lhs = cross_entropy(data, W2)
        rhs = cross_entropy(data, W1) + inner(gradient(data, W1), D) + 0.5 * L * inner(D, D)
        assert lhs <= rhs + 1e-12 * max(1.0, abs(rhs))
    for _ in range(3):
        W = rng.standard_normal((data.V, data.d))
        assert np.linalg.eigvalsh(hessian_torch(data, W))[-1] <= L * (1 + 1e-10)


def test_smoothness_constant_is_tight():
    """With d ≥ m, pick W whose logits put two tokens at +R and the rest at 0 in every context:
    each softmax Jacobian tends to the two-token one, whose top eigenvalue is exactly ½, so the
    Hessian's top eigenvalue tends to L. A constant off by a factor 2 either way fails here or in
    the descent-lemma test."""
    data = synthetic(5, 4, 8, 2, seed=0, embedding_scale=0.7)
    L = smoothness(data)
    Zt = np.zeros((data.V, data.m))
    Zt[:2] = 30.0
    H = data.embeddings
    W = Zt @ np.linalg.solve(H @ H.T, H)  # W h̄_j = column j of Zt
    np.testing.assert_allclose(W @ H.T, Zt, atol=1e-9)
    top = np.linalg.eigvalsh(hessian_torch(data, W))[-1]
    assert top <= L * (1 + 1e-10)
    assert top >= L * (1 - 1e-9)
    # The second-order descent-lemma remainder along the top direction reaches (L/2) t² ‖Δ‖².
    u = np.linalg.eigh(H.T @ np.diag(data.weights) @ H)[1][:, -1]
    D = np.zeros_like(W)
    D[0], D[1] = u, -u
    t = 1e-3
    rem = cross_entropy(data, W + t * D) - cross_entropy(data, W) - t * inner(gradient(data, W), D)
    assert rem == pytest.approx(0.5 * L * t**2 * inner(D, D), rel=1e-4)


def test_gd_step_below_2_over_L_decreases_loss():
    """The docstring's claim: a GD step η < 2/L decreases CE (a consequence of the descent lemma)."""
    data = synthetic(8, 6, 5, 3, seed=0)
    L = smoothness(data)
    rng = np.random.default_rng(2)
    for _ in range(50):
        W = rng.standard_normal((data.V, data.d))
        g = gradient(data, W)
        for eta in (0.1 / L, 1 / L, 1.9 / L):
            assert cross_entropy(data, W - eta * g) < cross_entropy(data, W)
