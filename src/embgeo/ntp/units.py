"""Units: the theory objects are computed on H̄ scaled to order one and returned in the caller's units."""

from __future__ import annotations

import copy
import math

import numpy as np

from embgeo.ntp.data import NTPData


def unit_scale(data: NTPData) -> tuple[NTPData, float]:
    """``data`` with H̄ divided by s = 2^e, the power of two with max |h̄_ij| / s in [0.5, 1), and s.

    Every tolerance of the solvers is stated for embeddings of order one (margins of 1, rank thresholds,
    HiGHS's feasibility tolerances, Grams that must neither underflow nor overflow), so the theory objects
    are computed on the rescaled data and returned in the caller's units: W / s, margins · s, certificate
    norms ‖λ H̄‖ · s; logit residuals and relative gaps have no units. Dividing by a power of two is exact,
    so the verdicts are those of unit scale at every scale (H̄ · 1e-300 … 1e300). The copy shares probs.
    """
    top = float(np.max(np.abs(data.embeddings), initial=0.0))
    exponent = math.frexp(top)[1] if top > 0 else 0
    if exponent == 0:
        return data, 1.0
    unit = copy.copy(data)
    H = np.ldexp(data.embeddings, -exponent)
    H.setflags(write=False)
    unit.embeddings = H
    return unit, math.ldexp(1.0, exponent)
