"""Time limits as walls: a deadline is a ``time.perf_counter()`` value, and no stage of work begins after it.

Every solver of embgeo that takes ``max_seconds`` turns it into a deadline once (:func:`deadline_of`), hands
what is left to the solvers it calls (:func:`time_left`), and checks it before each stage of setup or solve
(:func:`stop_if_spent`, :func:`past`). Issue 38: given 1 ms at m = 10,000, V = 49,152, the stages that did not
check took 27-48 s.
"""

from __future__ import annotations

import time

from embgeo.core.validate import check_float
from embgeo.errors import SolverError


def deadline_of(max_seconds: float | None, who: str) -> float | None:
    """The ``time.perf_counter()`` value at which ``max_seconds`` (None: no limit) from now is spent; 0 is allowed
    (a caller whose own limit is spent: the solver is then not run, :func:`stop_if_spent`)."""
    if max_seconds is None:
        return None
    return time.perf_counter() + check_float(f"{who}: max_seconds", max_seconds, positive=False)


def time_left(deadline: float | None) -> float | None:
    """Seconds left before ``deadline`` (None: no limit), never negative."""
    return None if deadline is None else max(deadline - time.perf_counter(), 0.0)


def past(deadline: float | None) -> bool:
    """Whether ``deadline`` (None: no limit) has been reached."""
    return deadline is not None and time.perf_counter() >= deadline


def stop_if_spent(deadline: float | None, who: str, before: str) -> None:
    """Raise :class:`SolverError` (undecided) when ``deadline`` has passed. ``before`` names the stage not begun;
    "started" means nothing was done ("not run")."""
    if past(deadline):
        what = "not run" if before == "started" else f"undecided: the time limit was reached before {before}"
        raise SolverError(f"{who}: {what} (max_seconds spent)")
