"""Collapse metrics: exact values at the theory's configurations, and sensitivity off them."""

import numpy as np
import pytest

from embgeo.collapse.metrics import (
    collapse_scores,
    direction_spread,
    equiangular_distance,
    equiangular_gram,
    norm_frequency_correlation,
    norm_spread,
    pca_plane,
    pca_singular_values,
    plane_direction_spread,
    sigma_gap,
    type1_distance,
    variance_ratio,
    variance_ratio_se,
)
from embgeo.collapse.theory import equiangular_frame, full_latent_space, type1_configuration
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
            "norm_frequency_spearman", "norm_spread", "direction_spread"} <= set(scores)
    assert scores["norm_mean"] == pytest.approx(1.4) and scores["norm_std"] == pytest.approx(0, abs=1e-12)


def type3_rows(n_c=3, s_c=40, d=10):
    """w_(α,β) = r_β f_α with r_β decreasing in β: directional collapse, norms not collapsed (Theorem 2)."""
    F = simplex(n_c, d)
    r = 1.0 / np.arange(1, s_c + 1) ** 0.5
    return (r[None, :, None] * F[:, None, :]).reshape(n_c * s_c, d), np.repeat(np.arange(n_c), s_c), r


def dispersed_rows(n_c=3, s_c=200, d=10, seed=3):
    """Isotropic Gaussian rows, labels unrelated to them: no collapse of any kind."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n_c * s_c, d)), np.repeat(np.arange(n_c), s_c)


def test_norm_and_direction_spread_vanish_at_point_collapse():
    X, labels = type1_rows()
    assert norm_spread(X, labels) == pytest.approx(0, abs=1e-14)
    assert direction_spread(X, labels) == pytest.approx(0, abs=1e-7)
    assert variance_ratio(X, labels) == pytest.approx(0, abs=1e-28)


def test_type3_collapses_in_direction_not_in_norm():
    X, labels, r = type3_rows()
    assert direction_spread(X, labels) == pytest.approx(0, abs=1e-7)
    # Every concept has the norms r_β: the spread is their coefficient of variation.
    assert norm_spread(X, labels) == pytest.approx(r.std() / r.mean(), rel=1e-12)
    assert variance_ratio(X, labels) > 0.05  # not point collapse


def test_norm_spread_known_values():
    X = np.array([[1.0, 0], [3.0, 0], [0, 10.0], [0, 10.0]])
    # group 0: norms 1, 3 (mean 2, relative deviations ±0.5); group 1: equal norms
    assert norm_spread(X, [0, 0, 1, 1]) == pytest.approx(np.sqrt((0.25 + 0.25 + 0 + 0) / 4))
    assert norm_spread(X[:2]) == pytest.approx(0.5)  # one group: std/mean, the paper's "±" over the mean
    paper = 1.41 + 0.13 * np.array([-1.0, 1.0])  # mean 1.41, std 0.13
    assert norm_spread(np.c_[paper, np.zeros(2)]) == pytest.approx(0.13 / 1.41)


def test_direction_spread_known_value():
    """Two unit vectors at ±θ about e1: mean cos θ·e1, distance of each to it sin θ."""
    theta = 0.1
    X = np.array([[np.cos(theta), np.sin(theta)], [np.cos(theta), -np.sin(theta)],
                  [-5.0, 0.0], [-2.0, 0.0]])  # second group: same direction, different norms
    spread = direction_spread(X, [0, 0, 1, 1])
    assert spread == pytest.approx(np.sqrt(2 * np.sin(theta) ** 2 / 4))
    assert direction_spread(X[:2] * [[3.0], [0.5]], [0, 1]) == pytest.approx(0, abs=1e-15)  # singletons
    # Small angles: the rms angle in radians.
    assert direction_spread(np.r_[X[:2], X[:2] * -1], [0, 0, 1, 1]) == pytest.approx(theta, rel=2e-3)


def test_dispersed_rows_score_large():
    X, labels = dispersed_rows()
    assert variance_ratio(X, labels) > 10  # between ~ d/s_c, within ~ d
    assert direction_spread(X, labels) > 0.9  # ≈ √(1 − 1/s_c): no common direction
    assert norm_spread(X, labels) > 0.15  # chi distribution with 10 degrees of freedom: std/mean ≈ 0.23


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
    with pytest.raises(InputError, match="row 1 is zero"):
        direction_spread(np.array([[1.0, 0], [0, 0], [0, 1.0], [0, 2.0]]), [0, 0, 1, 1])
    with pytest.raises(InputError, match="every row of a group is zero"):
        norm_spread(np.zeros((3, 2)))
    with pytest.raises(ShapeError, match="labels"):
        norm_spread(X, labels[:-1])


def test_sigma_gap_is_zero_exactly_for_an_equilateral_triangle():
    X, _ = type1_rows(n_c=3, s_c=40, d=10)
    assert sigma_gap(X) == pytest.approx(0.0, abs=1e-12)
    assert sigma_gap(3.0 * X + 5.0) == pytest.approx(0.0, abs=1e-12)  # scale and a common offset: PCA centres
    # an isosceles triangle (one vertex moved 10% outward along its own direction) is not equiangular
    F = simplex(3, 10)
    bent = np.repeat(F * np.array([[1.1], [1.0], [1.0]]), 40, axis=0)
    assert sigma_gap(bent) > 0.03
    with pytest.raises(InputError, match="equal"):
        sigma_gap(np.ones((5, 3)))


def test_pca_plane_and_the_direction_spread_in_it():
    X, labels = type1_rows(n_c=3, s_c=40, d=10)
    plane = pca_plane(X)
    assert plane.shape == (120, 2)
    assert np.allclose(np.linalg.norm(plane, axis=1), np.linalg.norm(X - X.mean(axis=0), axis=1))  # X is planar
    axes = np.linalg.svd(X - X.mean(axis=0))[2]
    # deviations of ±0.5 out of the triangle's plane, balanced in each group: invisible in the figure, seen in the
    # full space (an angle of atan(0.5/1.4) ≈ 0.34 rad)
    sign = np.tile([1.0, -1.0], 60)[:, None]
    lifted = X + 0.5 * sign * axes[5]
    assert plane_direction_spread(lifted, labels) < 1e-9 and direction_spread(lifted, labels) > 0.3
    # the same deviations within the plane are seen in both
    turned = X + 0.5 * sign * axes[0]
    assert plane_direction_spread(turned, labels) > 0.2


def test_variance_ratio_se_shrinks_with_more_blocks():
    rng = np.random.default_rng(1)

    def rows(K, L=4):
        labels = rng.integers(0, 3, size=K * L)
        X = simplex(3, 6)[labels] + 0.3 * rng.standard_normal((K * L, 6))
        return X, labels, np.repeat(np.arange(K), L)

    small, large = rows(50), rows(800)
    se_small, se_large = variance_ratio_se(*small), variance_ratio_se(*large)
    assert se_large < se_small / 2  # ~ 1/√K: 4× fewer errors for 16× the blocks
    assert variance_ratio_se(*large) == se_large  # seeded
    with pytest.raises(ShapeError, match="blocks"):
        variance_ratio_se(large[0], large[1], large[2][:-1])


def test_type1_distance_is_zero_on_type1_and_sees_each_way_off_it():
    Z = full_latent_space(3, 2)
    W, U = type1_configuration(Z, 3, 4, 1.3, 0.6, dim=5, frame=equiangular_frame(3, 5, seed=2))
    assert type1_distance(W, U, Z, 3, 1.3, 0.6) < 1e-14
    assert type1_distance(W, U, Z, 3, 1.3 * 1.01, 0.6) > 5e-3  # wrong c: the frame read off W is not unit
    assert type1_distance(W, U, Z, 3, 1.3, 0.6 * 1.01) > 5e-3  # wrong c′
    W2 = W.copy()
    W2[0] *= 1.1  # one word off its concept's point
    assert type1_distance(W2, U, Z, 3, 1.3, 0.6) > 1e-2
    assert type1_distance(W, U[:, ::-1], Z, 3, 1.3, 0.6) > 0.1  # blocks on the wrong concepts
    with pytest.raises(InputError, match="c_prime"):
        type1_distance(W, U, Z, 3, 1.3, 0.0)
    with pytest.raises(ShapeError, match="Z"):
        type1_distance(W, U, Z[:, :1], 3, 1.3, 0.6)
