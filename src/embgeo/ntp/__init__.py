"""NTP implicit bias (Thrampoulidis, NeurIPS 2024).

Rooms, as in every paper package: :mod:`~embgeo.ntp.data` (NTPData, generators, text),
:mod:`~embgeo.ntp.theory` (W*, F, separability, W^mm: the public face of :mod:`~embgeo.ntp.loss`,
:mod:`~embgeo.ntp.subspace`, :mod:`~embgeo.ntp.compatibility`, :mod:`~embgeo.ntp.separability`,
:mod:`~embgeo.ntp.svm`, :mod:`~embgeo.ntp.margins`; its solvers and their t-form in
:mod:`~embgeo.ntp.constraints`), :mod:`~embgeo.ntp.analyze` (every theory object of one dataset, as
``ntp analyze`` prints it), :mod:`~embgeo.ntp.train` (GD / NGD / Adam / SGD),
:mod:`~embgeo.ntp.regpath` (Theorem 1's paths), :mod:`~embgeo.ntp.metrics` (the reference and the
trace metrics), :mod:`~embgeo.ntp.figures`. Training is not re-exported here so that the name
``embgeo.ntp.train`` keeps meaning the module.
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
