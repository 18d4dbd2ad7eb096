"""The separability LP of Def. 2 over token groups, solved by HiGHS (small problems, or a subset of pairs).

max s s.t. (6a) in t-form, x_gᵀk_j − t_j + s ≤ 0 off the supports, s ≤ 1: s* = 1 when the data are
NTP-separable, s* = 0 when not, and then its dual values are the Farkas weights μ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from embgeo.core.status import Status
from embgeo.errors import SolverError


@dataclass
class LPResult:
    """:func:`separability_lp`: ``value`` s* ∈ {0, 1}; X (G, r), t (m) when separable (rows and
    contexts outside the LP are 0); ``mu`` (≥ 0, one per given off pair) the dual values when not.
    ``status`` "optimal", or "time_limit" when HiGHS stopped at its time limit (or none was left): then
    ``value`` is NaN, nothing else is set, and the LP decided nothing (``separable`` raises)."""

    value: float
    X: np.ndarray | None
    t: np.ndarray | None
    mu: np.ndarray | None
    status: Status = Status.OPTIMAL

    @property
    def separable(self) -> bool:
        if self.status != Status.OPTIMAL:
            raise SolverError(f"separability LP: undecided ({self.status}), it has no verdict")
        return self.value > 0.5


def separability_lp(K: np.ndarray, support: sp.csr_matrix, og: np.ndarray, oj: np.ndarray,
                    contexts: np.ndarray | None = None, time_limit: float | None = None) -> LPResult | None:
    """max s s.t. x_gᵀk_j = t_j on the supports of the contexts involved, x_gᵀk_j − t_j + s ≤ 0 on the
    given off-support pairs (og, oj), s ≤ 1, over group rows X and t; solved by HiGHS.

    With every off-support pair this is the separability LP of Def. 2 (s* = 1 iff separable, else
    s* = 0). With a subset it is a relaxation on the contexts C = {oj}: s* = 0 still proves the
    data non-separable, and the dual values μ of the given pairs are the Farkas weights.
    Size: (groups involved · r + |C| + 1) variables, one row per pair; for small problems or
    small subsets only. ``contexts`` adds contexts to C (all of them for the full LP, so that the
    supports of contexts without off pairs are tied too). ``time_limit`` (seconds) is passed to
    HiGHS; reaching it (or none left, ≤ 0: HiGHS is not called) returns status "time_limit" (undecided).
    """
    from scipy.optimize import linprog  # here, not at the top: importing the package must stay light (`embgeo list`)

    if time_limit is not None and not time_limit > 0:
        return _timed_out()
    G, m = support.shape
    r = K.shape[1]
    ctx = np.unique(oj if contexts is None else np.concatenate([oj, contexts]))
    sub = support[:, ctx].tocoo()
    ge, je = sub.row.astype(np.int64), ctx[sub.col]  # support pairs of the involved contexts
    groups = np.unique(np.concatenate([ge, og]))
    gpos = np.searchsorted(groups, np.arange(G))  # valid for the involved groups only
    cpos = np.searchsorted(ctx, np.arange(m))
    nx, nt = len(groups) * r, len(ctx)
    n_var = nx + nt + 1  # vec(X_involved) row-major, t_C, s

    def rows(g: np.ndarray, j: np.ndarray, s_coef: float) -> sp.csr_matrix:
        n = len(g)
        cols = [gpos[g][:, None] * r + np.arange(r), (nx + cpos[j])[:, None]]
        vals = [K[j], -np.ones((n, 1))]
        if s_coef:
            cols.append(np.full((n, 1), n_var - 1))
            vals.append(np.full((n, 1), s_coef))
        cols, vals = np.hstack(cols), np.hstack(vals)
        return sp.csr_matrix((vals.ravel(), (np.repeat(np.arange(n), cols.shape[1]), cols.ravel())),
                             shape=(n, n_var))

    c = np.zeros(n_var)
    c[-1] = -1.0  # maximise s
    bounds = [(None, None)] * (n_var - 1) + [(None, 1.0)]
    res = linprog(c, A_ub=rows(og, oj, 1.0), b_ub=np.zeros(len(og)), A_eq=rows(ge, je, 0.0),
                  b_eq=np.zeros(len(ge)), bounds=bounds, method="highs", options=highs_options(time_limit))
    if res.status == 1 and time_limit is not None:  # HiGHS stopped at the time limit
        return _timed_out()
    if res.status != 0:
        raise SolverError(f"separability LP: HiGHS ended with status {res.status} ({res.message})")
    value = float(-res.fun)
    if value > 0.5:
        X = np.zeros((G, r))
        X[groups] = res.x[:nx].reshape(len(groups), r)
        t = np.zeros(m)
        t[ctx] = res.x[nx:nx + nt]
        return LPResult(value, X, t, None)
    return LPResult(value, None, None, np.maximum(-res.ineqlin.marginals, 0.0))


def highs_options(time_limit: float | None) -> dict:
    """HiGHS's options (``linprog(method="highs", options=…)``) for a call under ``time_limit`` seconds (None: none):
    the limit, and presolve off, so that the limit is a wall.

    Why without presolve: HiGHS does not check its time limit everywhere in presolve (HiGHS issues #1501, #2021).
    Measured 2026-11-30 (scipy 1.17's HiGHS 1.12, one thread) on the pair LP of the two most frequent token groups at
    m = 100,000 (SmolLM2's states; 577 dense rows, 14,583 columns, 8.4 million nonzeros), under a limit of 30 s: with
    presolve HiGHS returned "time limit reached" after 751 s, without it the dual simplex stopped at 30.07 s (an
    iteration there is about 20 ms). These LPs gain nothing from presolve: the pair LPs' rows are dense, and the
    separability LP's rows are r-dense blocks of K. ``is_separable(method="lp")`` with presolve on / off, the same
    day: the same verdicts in the same time (``synthetic`` (200, 40, 8, 2), (600, 100, 16, 2): 0.35 / 0.27 s,
    27.3 / 26.6 s; ``planted`` (300, 20, 6), (600, 40, 8), (1000, 60, 16): 0.18 / 0.24 s, 1.65 / 1.45 s,
    45.4 / 45.1 s; ``synthetic`` (1000, 200, 32, 2): both stopped at a 300 s limit, after 301.9 / 301.2 s)."""
    return {"presolve": False} if time_limit is None else {"time_limit": float(time_limit), "presolve": False}


def _timed_out() -> LPResult:
    return LPResult(math.nan, None, None, None, Status.TIME_LIMIT)
