"""NTP implicit bias (Thrampoulidis, NeurIPS 2024): data, theory, training, metrics.

Training lives in the submodule :mod:`embgeo.ntp.train` (``from embgeo.ntp.train import train``);
it is not re-exported here so that the name ``embgeo.ntp.train`` keeps meaning the module.
"""

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

__all__ = [
    "NTPData", "synthetic", "toy2d",
    "NTPSVM", "Compatibility", "Separability", "Subspace",
    "cross_entropy", "entropy", "gradient", "is_compatible", "is_separable", "kl_gap",
    "ntp_margin", "ntp_svm", "smoothness", "subspace", "w_star",
]
