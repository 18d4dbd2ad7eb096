"""The NTP solvers as they were before the t-form rewrite (issue 9), kept as an exact reference.

They build the subspace F from a dense eigendecomposition of the Σ_j (S_j − 1) anchor rows'
Gram matrix and solve the NTP-SVM dual over the full V × m matrix Ψ by accelerated projected
gradient with an active-set polish (capped at 2,500 rows). Exact and certified, but cubic in
Σ_j S_j: tests compare the new solvers with them on small instances, and
``benchmarks/bench_ntp_solvers.py`` times them side by side with the new ones.
"""

from .theory import Subspace, is_compatible, is_separable, ntp_margin, ntp_svm, subspace, w_star

__all__ = ["Subspace", "is_compatible", "is_separable", "ntp_margin", "ntp_svm", "subspace", "w_star"]
