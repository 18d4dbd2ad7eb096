"""Scalar collapse metrics of trained weights, compared with the configurations of Theorems 1-3.

Paper: ``feature-collapse.txt``. The paper measures collapse by PCA scatters, their singular
values and the mean ± std of the embedding norms; the other metrics here are ours (not in the paper),
each 0 (or 1) exactly at the theory's configurations:

* :func:`variance_ratio` — within-group over between-group variance (0 at full collapse: every
  group at one point, in direction *and* magnitude);
* :func:`norm_spread` — coefficient of variation of the row norms about their group's mean norm
  (0 when every member of a group has the same norm; the paper's "1.41 ± 0.13" is 0.13/1.41);
* :func:`direction_spread` — rms distance of the unit directions x/‖x‖ from their group's mean
  direction (0 at directional collapse, Theorem 2's type III; ≈ the rms angle in radians when small);
* :func:`equiangular_distance` — distance of the group means' normalized Gram matrix from the
  equiangular (simplex) one, 1 on the diagonal and −1/(n−1) off it (0 at types I-III);
* :func:`pca_singular_values` — singular values of the centered matrix (scikit-learn's
  ``PCA.singular_values_`` convention, which the paper's 34.9 / 34.7 / 0.001 use); :func:`sigma_gap`
  1 − σ2/σ1 (0 for three groups on an equilateral triangle) and :func:`pca_plane` the plane of the
  figures, with :func:`plane_direction_spread` the direction spread measured in it;
* :func:`variance_ratio_se` — a bootstrap standard error of the variance ratio over sampling blocks;
* :func:`norm_frequency_correlation` — Spearman correlation of ‖w‖ with the word frequency (about
  0 for type I, 1 for type III: frequent words get longer embeddings, Theorem 2);
* :func:`norm_stats` — mean and std of the row norms, to compare with c, c' and τ*/√(KL);
* :func:`type1_distance` — relative distance of (W, U) from the type-I configurations with given (c, c')
  (0 exactly on them: words at c·f_α, blocks at c'·f_z, the same equiangular f).

Arrays hold one vector per row: word embeddings (n_w, d), LayerNormed representations (n_w, d),
or the blocks u_{k,ℓ} reshaped to (K·L, d) with labels z_{k,ℓ}.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import spearmanr

from embgeo.core.validate import as_float_array
from embgeo.errors import InputError, ShapeError


def _rows_and_labels(X, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X = as_float_array("X", X, ndim=2)
    labels = np.asarray(labels)
    if labels.shape != (X.shape[0],):
        raise ShapeError(f"labels: expected shape ({X.shape[0]},) (one per row of X), got {labels.shape}")
    groups = np.unique(labels)
    if groups.size < 2:
        raise InputError(f"labels: need at least 2 groups, got {groups.size}")
    return X, labels, groups


def group_means(X: ArrayLike, labels: ArrayLike) -> np.ndarray:
    """Mean vector of each group, in sorted label order: array (n_groups, d)."""
    X, labels, groups = _rows_and_labels(X, labels)
    return np.stack([X[labels == g].mean(axis=0) for g in groups])


def variance_ratio(X: ArrayLike, labels: ArrayLike) -> float:
    """Within-group variance / between-group variance of the rows of X (an NC1-like score).

    within = mean over rows of ‖x − mean of its group‖², between = mean over rows of
    ‖mean of its group − overall mean‖². 0 when every group sits at one point.
    """
    X, labels, groups = _rows_and_labels(X, labels)
    means = group_means(X, labels)
    idx = np.searchsorted(groups, labels)
    within = np.mean(np.sum((X - means[idx]) ** 2, axis=1))
    between = np.mean(np.sum((means[idx] - X.mean(axis=0)) ** 2, axis=1))
    if between == 0:
        raise InputError("X: the group means coincide (no between-group variance); the ratio is undefined")
    return float(within / between)


def norm_spread(X: ArrayLike, labels: ArrayLike | None = None) -> float:
    """Pooled coefficient of variation of the row norms of X within groups.

    X is (n, d) with one vector per row, labels (n,) (``None``: one group). With ``m_g`` the mean
    row norm of group g, the spread is ``sqrt(mean_i (‖x_i‖/m_{g(i)} − 1)²)``, i.e. std/mean of the
    norms for a single group (the paper's "1.41 ± 0.13" is a spread of 0.13/1.41 = 0.092,
    ``feature-collapse.txt`` Sec. 3). 0 exactly when the norms are equal within every group, as in
    the type I and II configurations (all w_(α,β) = c f_α, all u_{k,ℓ} = c' f_α); type III has a
    positive spread whenever the frequencies differ (Theorem 2, r_β depends on μ_β).
    """
    if labels is None:
        X = as_float_array("X", X, ndim=2)
        labels = np.zeros(X.shape[0], dtype=np.int64)
        groups = np.zeros(1, dtype=np.int64)
    else:
        X, labels, groups = _rows_and_labels(X, labels)
    norms = np.linalg.norm(X, axis=1)
    idx = np.searchsorted(groups, labels)
    mean = np.bincount(idx, weights=norms) / np.bincount(idx)
    if np.any(mean == 0):
        raise InputError("X: every row of a group is zero; the coefficient of variation is undefined")
    return float(np.sqrt(np.mean((norms / mean[idx] - 1.0) ** 2)))


def direction_spread(X: ArrayLike, labels: ArrayLike) -> float:
    """Rms distance of the unit directions x/‖x‖ from their group's mean direction, pooled over groups.

    X is (n, d) with one (non-zero) vector per row, labels (n,). For group g with unit rows x̂_i and
    mean m_g = mean x̂_i, the mean of ‖x̂_i − m_g‖² is 1 − ‖m_g‖²; the spread is the square root of its
    average over all rows, in [0, 1]. It is 0 exactly when the directions agree within every group
    (directional collapse, type III of Theorem 2 in ``feature-collapse.txt``: w_(α,β) = r_β f_α), and for
    small spreads it is the rms angle to the group direction, in radians (a relative deviation s
    perpendicular to x tilts it by s). The norms play no part: frequent and rare words count alike.
    """
    X, labels, groups = _rows_and_labels(X, labels)
    norms = np.linalg.norm(X, axis=1)
    if np.any(norms == 0):
        raise InputError(f"X: row {int(np.argmin(norms))} is zero; its direction is undefined")
    unit = X / norms[:, None]
    means = group_means(unit, labels)
    # ‖x̂ − m_g‖² summed directly (not as 1 − ‖m_g‖², which cancels to rounding noise near collapse)
    return float(np.sqrt(np.mean(np.sum((unit - means[np.searchsorted(groups, labels)]) ** 2, axis=1))))


def equiangular_gram(n: int) -> np.ndarray:
    """The Gram matrix of n unit vectors of a simplex equiangular frame (paper eq. 4)."""
    return (n / (n - 1)) * np.eye(n) - np.ones((n, n)) / (n - 1)


def equiangular_distance(X: ArrayLike, labels: ArrayLike) -> float:
    """‖Ĝ − G_eq‖_F / ‖G_eq‖_F, Ĝ the normalized Gram matrix of the (uncentered) group means.

    The theory's configurations put the group means at c·f_α with (f_α) an equiangular frame, whose
    vectors also sum to zero, so no centering is applied: a shifted triangle is not collapsed.
    """
    means = group_means(X, labels)
    norms = np.linalg.norm(means, axis=1)
    if np.any(norms == 0):
        raise InputError("X: a group mean is zero; the normalized Gram matrix is undefined")
    G = (means @ means.T) / np.outer(norms, norms)
    target = equiangular_gram(len(means))
    return float(np.linalg.norm(G - target) / np.linalg.norm(target))


def pca_singular_values(X: ArrayLike, k: int = 3) -> np.ndarray:
    """The k largest singular values of the column-centered X (scikit-learn PCA convention)."""
    X = as_float_array("X", X, ndim=2)
    s = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)
    return s[:k]


def pca_plane(X: ArrayLike) -> np.ndarray:
    """The rows of X (n, d) projected on the plane of the first two principal components: (n, 2).

    What the paper's figures show (a scatter of PC1 against PC2 of the column-centered rows, scikit-learn's
    PCA): the coordinates of each centered row along the two leading right singular vectors.
    """
    X = as_float_array("X", X, ndim=2)
    centered = X - X.mean(axis=0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    return centered @ vt[:2].T


def plane_direction_spread(X: ArrayLike, labels: ArrayLike) -> float:
    """:func:`direction_spread` of the rows of X in the 2-D PCA plane of the paper's figures (:func:`pca_plane`).

    Fig. 4b's evidence for the words' directional collapse is that plane: a word whose direction leaves it
    (a third component, σ3 > 0) is seen only through its projection. ≈ the rms in-plane angle (radians) of
    each word about its concept's direction.
    """
    X, labels, _ = _rows_and_labels(X, labels)
    return direction_spread(pca_plane(X), labels)


def sigma_gap(X: ArrayLike) -> float:
    """1 − σ2/σ1 of the PCA singular values of the rows of X: 0 for three groups on an equilateral triangle.

    For n_c = 3 groups of equal size whose means sum to zero, the two leading singular values are equal
    exactly when the means form an equilateral triangle (Σ m m^T isotropic in its plane ⟺ the complex
    coordinates z_α satisfy Σ z_α² = 0 ⟺ z_1/z_2 is a primitive cube root of unity), i.e. an equiangular
    frame up to scale (paper eq. 4). The paper prints these singular values (Fig. 3), so the gap can be
    compared with the authors' own runs.
    """
    s = pca_singular_values(X, k=2)
    if s[0] == 0:
        raise InputError("X: all rows are equal; the singular values are 0")
    return float(1.0 - s[1] / s[0])


def variance_ratio_se(X: ArrayLike, labels: ArrayLike, blocks: ArrayLike, n_boot: int = 200, seed: int = 0) -> float:
    """Bootstrap standard error of :func:`variance_ratio`, resampling whole blocks of rows with replacement.

    ``blocks`` (n,) names the unit of sampling of each row, e.g. the class k of u_{k,ℓ} (its L blocks are
    trained on the same sentences, so they are not independent). The spread of the ratio over resamples of
    the K classes is its sampling error at this K (an error bar of the measured ratio, not of the theory).
    """
    X, labels, _ = _rows_and_labels(X, labels)
    blocks = np.asarray(blocks)
    if blocks.shape != labels.shape:
        raise ShapeError(f"blocks: expected shape {labels.shape} (one per row of X), got {blocks.shape}")
    names, index = np.unique(blocks, return_inverse=True)
    members = [np.flatnonzero(index == b) for b in range(names.size)]
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(n_boot):
        rows = np.concatenate([members[b] for b in rng.integers(0, names.size, size=names.size)])
        if np.unique(labels[rows]).size < 2:
            continue
        ratios.append(variance_ratio(X[rows], labels[rows]))
    return float(np.std(ratios, ddof=1))


def norm_stats(X: ArrayLike) -> tuple[float, float]:
    """(mean, standard deviation) of the row norms of X."""
    norms = np.linalg.norm(as_float_array("X", X, ndim=2), axis=1)
    return float(norms.mean()), float(norms.std())


def norm_frequency_correlation(X: ArrayLike, frequency: ArrayLike) -> float:
    """Spearman rank correlation between the row norms of X (n_w, d) and the words' frequencies (n_w,)."""
    X = as_float_array("X", X, ndim=2)
    frequency = as_float_array("frequency", frequency, ndim=1)
    if frequency.shape != (X.shape[0],):
        raise ShapeError(f"frequency: expected shape ({X.shape[0]},) (one per row of X), got {frequency.shape}")
    if np.ptp(frequency) == 0:
        raise InputError("frequency: all words have the same frequency; the correlation is undefined")
    return float(spearmanr(np.linalg.norm(X, axis=1), frequency).statistic)


def type1_distance(W: ArrayLike, U: ArrayLike, Z: ArrayLike, n_concepts: int, c: float, c_prime: float) -> float:
    """Relative distance of (W, U) from the type-I set with constants (c, c′) (Def. 1 / C; Ω^I_c of eq. 64 when
    c′ = c√(n_w/(KL))): 0 exactly when W = c𝔉P and Ū = c′𝔉Z for one equiangular 𝔉.

    W (n_c s_c, d) with rows α·s_c + β, U (K, L, d), Z (K, L) concepts in [0, n_c), n_c = ``n_concepts``. The
    frame is read off the words, F = (concept means of W)/c (n_c, d); the distance is the largest of
    ‖W − cFP‖_F/(c√n_w) (words off their concept's point), ‖FFᵀ − G_eq‖_F/‖G_eq‖_F (F not equiangular with unit
    vectors: a wrong c or frame, eq. 4) and ‖U − c′F[Z]‖_F/(c′√(KL)) (blocks off c′f_z, or on another frame).
    """
    W = as_float_array("W", W, ndim=2)
    U = as_float_array("U", U, ndim=3)
    Z = np.asarray(Z)
    n_c = int(n_concepts)
    if Z.shape != U.shape[:2] or W.shape[1] != U.shape[2] or not np.issubdtype(Z.dtype, np.integer):
        raise ShapeError(f"W, U, Z: expected (n_w, d), (K, L, d) and integer (K, L), got {W.shape}, {U.shape}, "
                         f"{Z.shape} ({Z.dtype})")
    if not (c > 0 and c_prime > 0):
        raise InputError(f"c, c_prime: expected positive constants, got {c}, {c_prime}")
    if n_c < 2 or W.shape[0] % n_c or Z.min() < 0 or Z.max() >= n_c:
        raise ShapeError(f"W, Z: expected n_c = {n_c} >= 2 equal concepts of W's {W.shape[0]} rows and Z in "
                         f"[0, {n_c})")
    blocks = W.reshape(n_c, -1, W.shape[1])
    F = blocks.mean(axis=1) / c
    gram = equiangular_gram(n_c)
    off_words = np.linalg.norm(blocks - c * F[:, None, :]) / (c * np.sqrt(W.shape[0]))
    off_frame = np.linalg.norm(F @ F.T - gram) / np.linalg.norm(gram)
    off_blocks = np.linalg.norm(U - c_prime * F[Z]) / (c_prime * np.sqrt(Z.size))
    return float(max(off_words, off_frame, off_blocks))


def collapse_scores(X: ArrayLike, labels: ArrayLike, frequency: ArrayLike | None = None) -> dict:
    """All scalar metrics of one set of vectors, as a flat dict (for claims tables and CSV)."""
    mean, std = norm_stats(X)
    out = {"variance_ratio": variance_ratio(X, labels), "equiangular_distance": equiangular_distance(X, labels),
           "norm_mean": mean, "norm_std": std, "norm_spread": norm_spread(X, labels),
           "direction_spread": direction_spread(X, labels)}
    out.update({f"sigma{i + 1}": float(s) for i, s in enumerate(pca_singular_values(X))})
    if frequency is not None:
        out["norm_frequency_spearman"] = norm_frequency_correlation(X, frequency)
    return out
