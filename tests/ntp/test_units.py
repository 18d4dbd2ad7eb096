"""Verdicts and certificates do not depend on the units of H̄ (issue 24).

One separable, compatible dataset (m = 5, d = 3) and one that is neither, multiplied by 10^e for e from −300 to
300: the theory objects are computed on H̄ divided by a power of two (:func:`embgeo.ntp.theory.unit_scale`) and
returned in the caller's units. Before, 1e-10 … 1e-16 gave "separable False" with a Farkas "certificate",
1e-160 a SolverError with a NaN residual, 1e-200 "compatible False" and 1e20 "HiGHS Model error".
"""

from __future__ import annotations

import numpy as np
import pytest

from embgeo.ntp import NTPData, is_compatible, is_separable, ntp_margin, ntp_svm, w_star
from embgeo.ntp.theory import subspace, unit_scale

EXPONENTS = [-300, -250, -200, -160, -100, -16, -13, -10, 0, 20, 100, 160, 200, 250, 300]


def _planted(seed: int, m: int = 5, d: int = 3, V: int = 4) -> NTPData:
    """Supports of 1 or 2 tokens, the top tokens of a planted decoder's logits, probabilities its softmax there:
    compatible by construction (W* exists); separable for seed 2's draw (checked at unit scale below)."""
    rng = np.random.default_rng(seed)
    H, W0 = rng.standard_normal((m, d)), rng.standard_normal((V, d))
    L = H @ W0.T
    P = np.zeros((m, V))
    for j in range(m):
        S = np.argsort(-L[j])[: [2, 1, 2, 2, 1][j]]
        p = np.exp(L[j, S])
        P[j, S] = p / p.sum()
    return NTPData(H, P)


@pytest.fixture(scope="module")
def separable_data() -> NTPData:
    return _planted(2)


@pytest.fixture(scope="module")
def unit_results(separable_data):
    data = separable_data
    comp, sep, svm = is_compatible(data), is_separable(data), ntp_svm(data)
    assert comp and sep and svm.status == "optimal"  # the instance is what the test needs
    return comp, sep, svm


def _scaled(data: NTPData, exponent: int) -> NTPData:
    return NTPData(data.embeddings * 10.0**exponent, data.probs)


@pytest.mark.parametrize("exponent", EXPONENTS)
def test_compatible_separable_at_every_scale(separable_data, unit_results, exponent):
    """Same verdicts; W* and W^mm in the caller's units (W·a = the unit-scale W), the margin a times larger;
    the multipliers a⁻² times; every certificate residual as at unit scale."""
    comp1, sep1, svm1 = unit_results
    a = 10.0**exponent
    data = _scaled(separable_data, exponent)
    comp, sep, svm = is_compatible(data), is_separable(data), ntp_svm(data)
    assert comp and sep and svm.status == "optimal"
    assert comp.residual <= comp.tolerance
    np.testing.assert_allclose(comp.W * a, comp1.W, rtol=1e-9, atol=1e-9 * np.abs(comp1.W).max())
    np.testing.assert_allclose(w_star(data) * a, comp1.W, rtol=1e-9, atol=1e-9 * np.abs(comp1.W).max())
    np.testing.assert_allclose(svm.W * a, svm1.W, rtol=1e-8, atol=1e-8 * np.abs(svm1.W).max())
    assert svm.margin / a == pytest.approx(svm1.margin, rel=1e-8)
    assert sep.residuals["min_margin"] == pytest.approx(1.0) and sep.residuals["equality"] <= 1e-9
    # the separator separates the scaled data: its logits are those of unit scale
    logits = data.embeddings @ sep.W.T
    for j in range(data.m):
        on = data.probs[j].indices
        off = np.setdiff1d(np.arange(data.V), on)
        assert logits[j, on].min() - logits[j, off].max() >= 1 - 1e-7
    if abs(exponent) < 150:  # beyond, the multipliers (∝ H̄⁻²) over- or underflow float64
        np.testing.assert_allclose(svm.multipliers.toarray() * a**2, svm1.multipliers.toarray(), rtol=1e-6,
                                   atol=1e-8 * abs(svm1.multipliers).max())
    assert ntp_margin(data, svm.W) / a == pytest.approx(svm1.margin, rel=1e-8)
    assert subspace(data).dim == subspace(separable_data).dim


@pytest.mark.parametrize("exponent", [-300, -160, -10, 0, 20, 300])
def test_incompatible_inseparable_certificates_at_every_scale(exponent):
    """Data that are neither compatible nor separable (a token tied with another on more contexts than d, split
    on one more): the same verdicts by the same certificates, whose norms ‖λ H̄‖, ‖Ψᵀ H̄‖ scale with H̄."""
    rng = np.random.default_rng(3)
    m, d, V = 8, 2, 3
    H = rng.standard_normal((m, d))
    P = np.zeros((m, V))
    P[:6, 0], P[:6, 1] = rng.uniform(0.2, 0.8, 6), 0.0
    P[:6, 1] = 1 - P[:6, 0]
    P[6:, 0] = 1.0  # token 0 without token 1: the tie of the first six contexts cannot separate them
    base = NTPData(H, P)
    data = _scaled(base, exponent)
    a = 10.0**exponent
    comp1, comp = is_compatible(base), is_compatible(data)
    sep1, sep = is_separable(base), is_separable(data)
    assert not comp1 and not comp and comp.method == comp1.method
    assert comp.residual == pytest.approx(comp1.residual, rel=1e-9)
    assert comp.certificate_norm / a == pytest.approx(comp1.certificate_norm, rel=1e-6, abs=1e-14)
    np.testing.assert_allclose(comp.certificate.toarray(), comp1.certificate.toarray(), rtol=1e-9, atol=1e-12)
    assert not sep1 and not sep and sep.method == sep1.method
    assert sep.residuals["perp_norm"] / a == pytest.approx(sep1.residuals["perp_norm"], rel=1e-6, abs=1e-14)
    svm = ntp_svm(data)
    assert svm.status == "infeasible" and svm.W is None


def test_unit_scale_is_an_exact_power_of_two(separable_data):
    """The divisor is 2^e with max |h̄_ij| / 2^e in [0.5, 1): dividing changes no bit of the mantissas."""
    for exponent in (-300, 0, 300):
        data = _scaled(separable_data, exponent)
        unit, s = unit_scale(data)
        assert np.frexp(s)[0] == 0.5  # a power of two
        assert 0.5 <= np.abs(unit.embeddings).max() < 1.0
        np.testing.assert_array_equal(unit.embeddings * s, data.embeddings)
        assert unit.probs is data.probs
    unit, s = unit_scale(_scaled(separable_data, 0) if np.abs(separable_data.embeddings).max() < 1 else
                         NTPData(separable_data.embeddings / 4, separable_data.probs))
    assert unit_scale(unit)[1] == 1.0  # idempotent


@pytest.mark.parametrize("exponent", [-300, -250, -120, -100, -50, 0, 50, 100, 120, 250, 300])
def test_ntp_margin_does_not_depend_on_the_units_of_w(separable_data, unit_results, exponent):
    """The NTP-margin of P_⊥(W) is homogeneous of degree 0 in W: the same at W·10^e whether or not its largest entry
    is far enough from 1 for ntp_margin to rescale it (no copy of W between 1e-100 and 1e100), and equal at e = 0 to
    the margin written out from the logits of P_⊥(W)."""
    data = separable_data
    W = unit_results[2].W + np.random.default_rng(0).standard_normal((data.V, data.d))
    base = ntp_margin(data, W)
    assert ntp_margin(data, W * 10.0**exponent) == pytest.approx(base, rel=1e-12)
    Wp = subspace(data).project_perp(W)
    L = data.embeddings @ Wp.T
    direct = min(L[j, z] - L[j, v] for j in range(data.m) for z in data.supports[j]
                 for v in range(data.V) if v not in data.supports[j])
    assert base == pytest.approx(direct / np.linalg.norm(Wp), rel=1e-12)
