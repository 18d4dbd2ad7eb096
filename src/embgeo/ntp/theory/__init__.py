"""Every theoretical object of the NTP implicit-bias paper, computed exactly in float64.

Paper: ``ntp-implicit-bias-neurips.txt`` (NeurIPS 2024 version; the short version's numbers
differ: Def. 3.1/3.2 there are Defs. 1/2 here). Equation numbers below are the NeurIPS ones.

Formulation (:mod:`embgeo.ntp.solvers.constraints` and the solvers below): the constraints (4) and
(6) are written in *t-form* (one scalar t_j per context: x_zᵀk_j − t_j = log p̂_{j,z} on the
support, x_vᵀk_j − t_j ≤ −1 off it) over the coordinates K (m × r) of the contexts in their own
span, r = rank H̄. For fixed t everything splits by token, so:

* F (eq. 5), W* (Def. 1) and the projections onto F / F⊥ are one equality-constrained least-norm
  problem, reduced exactly to an m × m system in t (one small SVD per token, one Cholesky).
  Its dimension count gives dim F. Data that are not compatible get a *certificate*: multipliers
  λ with ⟨λ, log p̂⟩ = −1 that are orthogonal to every solution, so no W solves (4).
* Separability (Def. 2) and the NTP-SVM (Def. 3) only depend on the supports: tokens with the same
  support pattern are one group (a 50k vocabulary collapses to a few thousand rows). When
  rank H̄ = m the data are separable by Lemma 1 (certificate written down); when r < m a
  non-separable pair of tokens (two tokens tied on more than r contexts that span the space,
  split on another one) gives a one-entry Farkas certificate at once; otherwise an LP (small
  problems) or the NTP-SVM dual decides. The NTP-SVM dual is solved on a working set of the
  off-support constraints, checked by full passes over all logits and finished by an exact
  active-set solve accepted only as a KKT point. Every answer carries its certificate.

This module is the theory's public face: every name below is defined in the module of its concept and
re-exported here, so ``from embgeo.ntp.theory import w_star`` (or ``theory.w_star``) keeps working.

=================================  ==================================================================
concept (paper)                    module
=================================  ==================================================================
units (H̄ scaled to order one)      :mod:`embgeo.ntp.units` — :func:`unit_scale`
loss, entropy, gradient (eq. 2)    :mod:`embgeo.ntp.theory.loss` — :func:`entropy`, :func:`cross_entropy`,
                                   :func:`kl_gap`, :func:`gradient`, :func:`smoothness`, :func:`log_probs`
the data subspace F (eq. 5)        :mod:`embgeo.ntp.theory.subspace` — :class:`Subspace`, :func:`subspace`,
                                   :func:`estimate_memory`
compatibility and W* (Def. 1)      :mod:`embgeo.ntp.theory.compatibility` — :func:`is_compatible`, :func:`w_star`
separability (Def. 2)              :mod:`embgeo.ntp.theory.separability` — :func:`is_separable`
the NTP-SVM (Def. 3)               :mod:`embgeo.ntp.theory.svm` — :func:`ntp_svm`, :class:`NTPSVM`
margins                            :mod:`embgeo.ntp.theory.margins` — :func:`ntp_margin`
=================================  ==================================================================

Solvers: :mod:`embgeo.ntp.solvers.equality` (the equality problem), :mod:`embgeo.ntp.solvers.scan` (full passes over the
off-support logits), :mod:`embgeo.ntp.solvers.dual_set` (projection onto the dual set),
:mod:`embgeo.ntp.solvers.svm_dual` (the working-set dual), :mod:`embgeo.ntp.solvers.svm_alm` (the augmented
Lagrangian), :mod:`embgeo.ntp.solvers.svm_ipm` (the interior point), :mod:`embgeo.ntp.solvers.separability_lp` (the
separability LP),
:mod:`embgeo.ntp.solvers.pair_certificates` (Farkas matrices from two token groups). The solvers' tuning is
data, frozen dataclasses passed by keyword: :class:`~embgeo.ntp.solvers.svm_alm.ALMOptions` (``ntp_svm``'s
``alm_options``), :class:`~embgeo.ntp.solvers.svm_dual.DualOptions` (``dual_options``),
:class:`~embgeo.ntp.solvers.svm_ipm.IPMOptions` (``ipm_options``),
:class:`~embgeo.ntp.solvers.squared_hinge.HingeOptions` (``is_separable``'s ``hinge_options``) and the routes'
:class:`~embgeo.ntp.theory.separability.RouteOptions` with the pair certificates'
:class:`~embgeo.ntp.solvers.pair_certificates.PairOptions` (``route_options`` of both).
"""

from embgeo.ntp.theory.compatibility import COMPAT_RTOL, Compatibility, is_compatible, w_star
from embgeo.ntp.theory.loss import cross_entropy, entropy, gradient, kl_gap, log_probs, smoothness
from embgeo.ntp.theory.margins import ntp_margin
from embgeo.ntp.theory.separability import MARGIN_ATOL, SEPARABILITY_METHODS, Separability, is_separable
from embgeo.ntp.theory.subspace import Subspace, estimate_memory, subspace
from embgeo.ntp.theory.svm import NTPSVM, SVM_METHODS, ntp_svm
from embgeo.ntp.units import unit_scale

__all__ = [
    "COMPAT_RTOL", "MARGIN_ATOL", "NTPSVM", "SEPARABILITY_METHODS", "SVM_METHODS",
    "Compatibility", "Separability", "Subspace",
    "cross_entropy", "entropy", "estimate_memory", "gradient", "is_compatible", "is_separable", "kl_gap",
    "log_probs", "ntp_margin", "ntp_svm", "smoothness", "subspace", "unit_scale", "w_star",
]
