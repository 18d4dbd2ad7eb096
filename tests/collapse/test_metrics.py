"""Collapse metrics: exact values at the theory's configurations, and sensitivity off them."""

import numpy as np
import pytest

from embgeo.collapse.metrics import (
    collapse_scores,
    equiangular_distance,
    equiangular_gram,
    norm_frequency_correlation,
    pca_singular_values,
    variance_ratio,
)
from embgeo.errors import InputError, ShapeError


def simplex(n, d, seed=0):
    """n unit vectors with pairwise cosine -1/(n-1), in a random n-1 dim subspace of R^d."""
    E = np.eye(n) - 1.0 / n  # centered basis: rank n-1, equiangular after normalisation
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, n)))
    return E @ Q.T


def type1_rows(n_c=3, s_c=40, d=10, c=1.4):
    F = simplex(n_c, d)
    return c * np.repeat(F, s_c, axis=0), np.repeat(np.arange(n_c), s_c)


def test_equiangular_gram():
    G = equiangular_gram(4)
    assert np.allclose(np.diag(G), 1) and np.allclose(G[0, 1:], -1 / 3)
    F = simplex(4, 7)
    assert np.allclose(F @ F.T, G)


def test_collapsed_configuration_scores_zero():
    X, labels = type1_rows()
    assert variance_ratio(X, labels) == pytest.approx(0, abs=1e-28)
    assert equiangular_distance(X, labels) == pytest.approx(0, abs=1e-12)


def test_scores_grow_off_the_configuration():
    X, labels = type1_rows()
    noisy = X + 0.1 * np.random.default_rng(1).standard_normal(X.shape)
    assert variance_ratio(noisy, labels) > 1e-3
    # A shifted triangle is no longer equiangular about the origin.
    assert equiangular_distance(X + 0.5 * X[0], labels) > 0.05
    # Within-group spread of known size: ratio = within / between exactly.
    two = np.array([[1.0, 0], [1.0, 0.2], [-1.0, 0], [-1.0, 0.2]])
    assert variance_ratio(two, [0, 0, 1, 1]) == pytest.approx(0.01 / 1.0)


def test_pca_singular_values_of_type1_are_sqrt_tau_over_two():
    """n_w rows c·f_α, ‖W‖² = n_w c² = τ: two singular values √(τ/2), the third 0 (n_c = 3)."""
    X, _ = type1_rows(s_c=400, d=100, c=1.42214)
    tau = np.sum(X**2)
    s = pca_singular_values(X)
    assert s[:2] == pytest.approx([np.sqrt(tau / 2)] * 2, rel=1e-12)
    assert s[2] == pytest.approx(0, abs=1e-9)


def test_pca_matches_centered_svd_convention():
    X = np.random.default_rng(2).standard_normal((50, 6)) + 3.0
    ref = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)[:3]
    assert np.allclose(pca_singular_values(X), ref)
    assert not np.allclose(pca_singular_values(X), np.linalg.svd(X, compute_uv=False)[:3])


def test_norm_frequency_correlation():
    freqs = 1.0 / np.arange(1, 21)
    F = simplex(3, 5)
    X = np.outer(freqs, F[0])  # type III within one concept: r_β increasing in μ_β
    assert norm_frequency_correlation(X, freqs) == pytest.approx(1.0)
    assert norm_frequency_correlation(X[::-1], freqs) == pytest.approx(-1.0)


def test_collapse_scores_keys():
    X, labels = type1_rows()
    scores = collapse_scores(X, labels, frequency=np.linspace(1, 2, len(X)))
    assert {"variance_ratio", "equiangular_distance", "norm_mean", "norm_std", "sigma1", "sigma2", "sigma3",
            "norm_frequency_spearman"} <= set(scores)
    assert scores["norm_mean"] == pytest.approx(1.4) and scores["norm_std"] == pytest.approx(0, abs=1e-12)


def test_bad_inputs():
    X, labels = type1_rows()
    with pytest.raises(ShapeError, match="labels"):
        variance_ratio(X, labels[:-1])
    with pytest.raises(InputError, match="labels"):
        variance_ratio(X, np.zeros(len(X)))
    with pytest.raises(InputError, match="frequency"):
        norm_frequency_correlation(X, np.ones(len(X)))
    with pytest.raises(InputError, match="X"):
        variance_ratio(np.full((4, 2), np.nan), [0, 0, 1, 1])
