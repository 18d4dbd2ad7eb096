"""Accuracy of the compatibility decision on random instances of the separability sweep.

A random instance of `ntp-separability`'s quick grid (m = 20, d = 7, V = 8, S = 3; trial 9 of its point) is
NTP-compatible: the t-form equality solve of commit a244ea6's parent solved (4) to a residual of 5.7e-11. After
a244ea6 ("F's equality system without null-space bases") the same solve left 1.04e-6, above its tolerance 7.8e-7,
and `is_compatible` raised SolverError ("too ill-conditioned to decide") — which failed the quick sweep's point.
"""

import numpy as np

from embgeo.ntp.measure import phase
from embgeo.ntp.theory import is_compatible


def test_sweep_instance_is_decided_compatible_to_rounding():
    data = phase.random_instance(20, 7, 8, 3, 7159817342727512676)
    result = is_compatible(data)
    assert bool(result)
    assert result.residual <= 1e-9


def test_every_trial_of_the_quick_sweep_point_is_decided():
    """The whole point (40 trials) that failed: every instance decided, none raising."""
    seed = int(np.random.SeedSequence([0, 20, 7, 8, 3]).generate_state(1)[0])
    counts = phase.trials(20, 7, 8, 3, 40, seed)
    assert counts["n"] == 40 and counts["compatible"] == 40
