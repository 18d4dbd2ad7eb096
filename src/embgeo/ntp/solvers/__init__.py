"""The numerical methods of the NTP paper's objects, and their certificates.

All work in the t-form of :mod:`~embgeo.ntp.solvers.constraints` (context coordinates K, token groups, one tie
value t_j per context) and know no theory object: :mod:`~embgeo.ntp.theory` builds its problems on them.

- :mod:`~embgeo.ntp.solvers.equality`: the exact equality problem behind W*, the projections onto F and F⊥ and
  the NTP-SVM's active-set solve;
- :mod:`~embgeo.ntp.solvers.scan`: the off-support margins, blockwise;
- :mod:`~embgeo.ntp.solvers.svm_dual`, :mod:`~embgeo.ntp.solvers.dual_set`: the NTP-SVM's dual (working set);
- :mod:`~embgeo.ntp.solvers.svm_alm`: its augmented Lagrangian;
- :mod:`~embgeo.ntp.solvers.outcome`: the outcome both return;
- :mod:`~embgeo.ntp.solvers.separability_lp`, :mod:`~embgeo.ntp.solvers.squared_hinge`,
  :mod:`~embgeo.ntp.solvers.pair_certificates`: separability's LP, squared hinge and pair certificates.
"""
