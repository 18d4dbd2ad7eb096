"""The one status vocabulary of every solver in embgeo (ntp, attention): :class:`Status`.

A :class:`Status` is a :class:`str` (an :class:`enum.StrEnum`): it compares equal to its value
(``Status.OPTIMAL == "optimal"``), prints as it (``f"{status}"``, ``str(status)``) and serialises to it in
JSON, CSV and the run records, so results read the same as when statuses were bare strings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Protocol, runtime_checkable


class Status(StrEnum):
    """How a solver ended.

    The final results of the theory functions (:class:`~embgeo.ntp.theory.NTPSVM`,
    :class:`~embgeo.attention.theory.MaxMarginSelection`) use OPTIMAL, OPTIMAL_INACCURATE, TIME_LIMIT and
    INFEASIBLE; the inner solvers' outcomes (:class:`~embgeo.ntp.solvers.outcome.SVMOutcome`, the interior point of
    :mod:`embgeo.attention.solvers`) also MAX_ITER, STALLED, SEPARABLE, CONVERGED and DIVERGED; ``ntp analyze``
    reports UNDECIDED when no solver could decide within its budget.
    """

    #: Certified optimal: the relative duality gap is within the tolerance (or an exact KKT point).
    OPTIMAL = "optimal"
    #: A certified feasible point whose gap is above the tolerance (the solver stalled or ran out of iterations).
    OPTIMAL_INACCURATE = "optimal_inaccurate"
    #: Stopped by the time limit (a final result then carries its best certified point).
    TIME_LIMIT = "time_limit"
    #: Stopped by the iteration limit.
    MAX_ITER = "max_iter"
    #: Stopped because the iterates no longer improved.
    STALLED = "stalled"
    #: A point separating every constraint was found (the separability-only mode of the NTP-SVM dual).
    SEPARABLE = "separable"
    #: No feasible point exists: a Farkas certificate was found.
    INFEASIBLE = "infeasible"
    #: Neither a solution nor a certificate within the budget.
    UNDECIDED = "undecided"
    #: An inner iteration (interior point) met its stopping rule.
    CONVERGED = "converged"
    #: An inner iteration (interior point) diverged (the sign of infeasibility).
    DIVERGED = "diverged"

    @property
    def has_solution(self) -> bool:
        """Whether a result with this status carries a certified point: OPTIMAL, OPTIMAL_INACCURATE, TIME_LIMIT.

        For the final results (NTPSVM, MaxMarginSelection) this is a guarantee (``W`` / ``p`` is set). An inner
        solver outcome stopped at TIME_LIMIT may not have found a feasible point yet: its ``X`` says.
        """
        return self in _WITH_SOLUTION


_WITH_SOLUTION = frozenset({Status.OPTIMAL, Status.OPTIMAL_INACCURATE, Status.TIME_LIMIT})


@runtime_checkable
class Certified(Protocol):
    """The one shape of every result of a theory function that decides or solves with a certificate
    (:class:`~embgeo.ntp.theory.Compatibility`, :class:`~embgeo.ntp.theory.Separability`,
    :class:`~embgeo.ntp.theory.NTPSVM`, :class:`~embgeo.attention.theory.MaxMarginSelection`).

    ``status``: how it ended (a :class:`Status`); ``certificate``: what proves a negative verdict (a Farkas
    certificate) or a solution's optimality (its multipliers) — None where the solution itself is the proof (W*, a
    separating W); ``residuals``: the numbers a reader checks the
    certificate by, each a float (NaN where it does not apply); ``method``: how it was found; ``to_dict()``: all of
    it but the arrays, as strict JSON (NaN and inf as None).
    """

    status: Status
    method: str

    @property
    def certificate(self) -> object | None: ...

    @property
    def residuals(self) -> Mapping[str, float]: ...

    def to_dict(self) -> dict: ...


def certified_dict(result: Certified, proof: str | None, **extra) -> dict:
    """``result.to_dict()``'s common part — status, method, what the certificate is (``proof``, in words; None when
    there is none), the residuals — plus ``extra`` scalars, as strict JSON (NaN and inf as None; numpy scalars as
    Python numbers)."""
    def plain(v):
        v = v.item() if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 else v
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return {"status": str(result.status), "method": result.method, "certificate": proof,
            "residuals": {k: plain(v) for k, v in result.residuals.items()},
            **{k: plain(v) for k, v in extra.items()}}
