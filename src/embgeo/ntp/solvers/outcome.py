"""The outcome of the NTP-SVM's solvers (the dual, the augmented Lagrangian, the interior point): one type, in a
module of its own so that no solver imports another for it; and the one progress event every iterative solver of
the NTP package reports (:class:`ProgressEvent`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from embgeo.core.status import Status


@dataclass
class SVMOutcome:
    """What an NTP-SVM solver found (group level): :meth:`~embgeo.ntp.solvers.svm_dual.SVMDual.solve` and
    :meth:`~embgeo.ntp.solvers.svm_alm.SVMALM.solve` both return it.

    status : "optimal" (relative duality gap ≤ tol, or an exact KKT point), "infeasible" (a Farkas
    matrix was found), "time_limit" / "max_iter" (stopped early; ``X`` is then the best primal
    point feasible for every constraint, when one was found).
    X, t : (G, r), (m,) the primal point, min off-support margin exactly 1 and in F⊥.
    primal : ½ Σ_g n_g ‖x_g‖²; dual : the dual value of ``dual_point`` (a lower bound on primal).
    dual_point : (grp, ctx, psi) a point of K on the working set (the multipliers, sign −μ off supports).
    farkas : (grp, ctx, psi, perp) when infeasible: Ψ ∈ K on those pairs, Σ_off Ψ = −1, ‖Ψ K‖ = perp.
    """

    status: Status
    X: np.ndarray | None = None
    t: np.ndarray | None = None
    primal: float = np.inf
    dual: float = -np.inf
    dual_point: tuple | None = None
    farkas: tuple | None = None
    iterations: int = 0
    rounds: int = 0
    working_set: int = 0
    polished: bool = False
    mode: str = "working set"  # or "dense": how the dual was stored; "augmented Lagrangian" (svm_alm)
    factorizations: int = 0
    reason: str = ""  # why the solve stopped short of tol, where the status alone does not say (svm_alm)
    #: svm_alm: stopped because the pairs its iterate violates, all tight, would make a Newton system beyond its memory
    #: room (nearly every pair active: the dual's regime)
    dense_active: bool = False
    check_seconds: float = 0.0  # the last certificate's measured cost (a tie projection and a full scan)

    @property
    def gap(self) -> float:
        """Relative duality gap: the absolute difference of primal and dual over the primal. A dual value above the
        primal breaks weak duality: only rounding, or a point that is not quite feasible (ties off by 1e-10 on a
        nearly degenerate instance, issue 38, put the dual 3e-8 above), can make it so, and its size is how far the
        certificate can be trusted — not a gap of 0 (which certified ‖W − W^mm‖ ≤ 0 there, while W was 2.5e-7 from
        cvxpy + Clarabel's point)."""
        return abs(self.primal - self.dual) / self.primal if np.isfinite(self.primal) else np.inf


@dataclass(frozen=True)
class ProgressEvent:
    """One report of an iterative solver to its ``progress`` callback (``progress(event)``).

    solver : which solver reports: "alm" (the augmented Lagrangian), "dual" (the NTP-SVM dual), "ipm" (the interior
        point), "hinge" (the squared hinge of the separability route).
    iteration : its step count: the ALM's outer steps, the dual's iterations, the hinge's steps (each solver counts
        from its own start, so a count that goes down means a new solver).
    gap : the relative duality gap of the best certified point (inf before one was found; NaN for the hinge, which
        has no dual).
    values : the solver's other numbers, by name — the ALM's ``working_set``, ``rounds``, ``rho``,
        ``factorizations``, ``violation``, ``cg_solves``, ``inexact_solves``; the dual's ``restricted_margin``,
        ``dual``, ``working_set``, ``rounds``; the interior point's ``mu`` (complementarity sᵀλ/M), ``step`` and
        ``infeasibility`` (max |Bu − s − 1|); the hinge's ``phi`` and ``seconds``.
    """

    solver: str
    iteration: int
    gap: float = math.nan
    values: Mapping[str, float] = field(default_factory=dict)


#: The type of a solver's ``progress`` callback.
ProgressFn = Callable[[ProgressEvent], object]
