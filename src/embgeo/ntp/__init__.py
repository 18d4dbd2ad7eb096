"""NTP implicit bias (Thrampoulidis, NeurIPS 2024).

The package in layers, each importing only those below it (a test holds the rule,
``tests/lab/test_registry.py``):

1. the data: :mod:`~embgeo.ntp.data` (NTPData, generators, text contexts), :mod:`~embgeo.ntp.corpus`,
   :mod:`~embgeo.ntp.units`;
2. :mod:`embgeo.ntp.solvers`: the numerical methods and their certificates, in the t-form of
   :mod:`~embgeo.ntp.solvers.constraints` (equality solves, scans, the NTP-SVM's dual and augmented Lagrangian,
   the separability LP and squared hinge, pair certificates); they know no theory object;
3. :mod:`embgeo.ntp.theory`: the paper's objects — loss and entropy (eq. 2), F (eq. 5), compatibility and W*
   (Def. 1), separability (Def. 2), W^mm (Def. 3), margins — its ``__init__`` the public face;
4. :mod:`embgeo.ntp.measure`: measurements of a W against them (alignment metrics, logit geometry, the phase
   diagram, figures);
5. :mod:`embgeo.ntp.training`: GD / NGD / Adam / SGD (:mod:`~embgeo.ntp.training.train`), Theorem 1's paths
   (:mod:`~embgeo.ntp.training.regpath`), learned embeddings (:mod:`~embgeo.ntp.training.learned`);
6. :mod:`embgeo.ntp.analysis`: the one analysis behind ``ntp analyze`` and ``ntp probe`` (a probe adds contexts of a
   text and a model's hidden states);
7. :mod:`embgeo.ntp.experiments`: the paper's experiments and claims; :mod:`embgeo.ntp.cli`: the paper's own
   commands, ``embgeo ntp analyze`` and ``embgeo ntp probe`` (``PAPER.commands``: they come with the paper's
   entry point).

Training is not re-exported here, so that ``embgeo.ntp.training.train`` keeps meaning the module.
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
