"""NTP implicit bias (Thrampoulidis, NeurIPS 2024): data, theory, training, metrics."""

from embgeo.ntp.data import NTPData, synthetic, toy2d
from embgeo.ntp.theory import (
    NTPSVM,
    Compatibility,
    Separability,
    Subspace,
    cross_entropy,
    entropy,
    gradient,
    is_compatible,
    is_separable,
    kl_gap,
    ntp_margin,
    ntp_svm,
    smoothness,
    subspace,
    w_star,
)
from embgeo.ntp.train import compute_reference, regularization_path, ridge_path, train

__all__ = [
    "NTPData", "synthetic", "toy2d",
    "NTPSVM", "Compatibility", "Separability", "Subspace",
    "cross_entropy", "entropy", "gradient", "is_compatible", "is_separable", "kl_gap",
    "ntp_margin", "ntp_svm", "smoothness", "subspace", "w_star",
    "compute_reference", "regularization_path", "ridge_path", "train",
]
