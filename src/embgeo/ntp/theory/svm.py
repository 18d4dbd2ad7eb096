"""The NTP-SVM (Def. 3): W^mm = argmin ‖W‖ s.t. (6a), (6b), the direction GD's iterates diverge along,
solved and certified (duality gap, error bound, KKT residuals).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TypedDict

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from embgeo.core.deadline import deadline_of, past, stop_if_spent, time_left
from embgeo.core.status import Status, certified_dict
from embgeo.core.validate import check_options
from embgeo.errors import InputError, SolverError, TooLargeError
from embgeo.ntp.data import NTPData, check_W
from embgeo.ntp.solvers.constraints import row_dots
from embgeo.ntp.solvers.outcome import ProgressFn, SVMOutcome
from embgeo.ntp.solvers.scan import scan_off_support
from embgeo.ntp.solvers.svm_alm import SVMALM, ALMOptions
from embgeo.ntp.solvers.svm_dual import DualOptions, SVMDual
from embgeo.ntp.solvers.svm_ipm import SVMIPM, IPMOptions, ipm_cheap, ipm_fits, iteration_flops
from embgeo.ntp.theory.separability import (
    MARGIN_ATOL,
    Problem,
    RouteOptions,
    Separability,
    decide_cheaply,
    farkas_result,
    in_support,
    is_separable,
    lp_is_small,
    make_problem,
    separability_by_lp,
    separable_from_candidate,
    separable_result,
)
from embgeo.ntp.theory.subspace import Subspace, context_gram

#: Under ``max_seconds``, the final re-scan of the returned point's margins (the separability certificate's and the
#: residuals', each a full pass over the logits) runs only when expected to end within this fraction of
#: ``max_seconds`` past the limit (by the solver's last certificate cost); else the solver's own certifying scan
#: stands (its point is scaled to smallest margin exactly 1) and ``note`` says so (issue 38).
RESCAN_GRACE = 0.05
#: A stalled ALM's point: its off-support pairs with margin ≤ 1 + FINISH_RTOL guess the active set of the exact finish
#: (:func:`_active_set_finish`; at the stall we measured, 1e-4 to 1e-2 all gave the same nine pairs).
FINISH_RTOL = 1e-3
#: ... and the finish is tried when its factorizations cost at most this many full scans of the margins (flops),
FINISH_SCANS = 20
#: ... or, after the interior point, this many of its iterations (:func:`~embgeo.ntp.solvers.svm_ipm.iteration_flops`):
#: its iterations cost far more than a scan. Measured 2026-11-30, one thread: SmolLM2's states relaxed to 5 tokens
#: (2,319 contexts, r = 576; ``benchmarks/bench_ntp_real_lm.py --top-tokens 5``) stalled at gap 3.3e-8 after 36
#: iterations and 49 s; its 1,539 nearly tight pairs, 2.7e10 flops by the estimate (20 scans: 3.2e8; an iteration's
#: bound 9.6e10; three rounds of the per-group factorizations), solved exactly in 15.3 s to gap 9.2e-11.
FINISH_IPM_ITERATIONS = 1


class SVMResiduals(TypedDict, total=False):
    """:attr:`NTPSVM.residuals`: the KKT residuals of W^mm; when infeasible, the Farkas matrix's
    (:class:`~embgeo.ntp.theory.separability.SeparabilityResiduals`)."""

    equality: float
    min_margin: float
    duality_gap: float
    error_bound: float
    stationarity: float
    complementarity: float
    perp_norm: float
    iterations: int
    lp_value: float


@dataclass
class NTPSVM:
    """Solution of the NTP-SVM (Def. 3): W^mm = argmin ‖W‖ s.t. (6a), (6b).

    Attributes
    ----------
    W : (V, d) array or None
        W^mm (None when infeasible). In F⊥ up to rounding, with min (6b) margin exactly 1. With
        ``status`` "time_limit" or "optimal_inaccurate" the best feasible point found, within
        ``residuals["error_bound"]`` of W^mm.
    margin : float
        The NTP-margin 1/‖W‖ (0.0 when infeasible).
    status : :class:`~embgeo.core.status.Status` — "optimal" | "optimal_inaccurate" | "time_limit" | "infeasible"
        (a str; ``status.has_solution`` is true exactly when ``W`` is set).
        "optimal": certified relative gap ≤ tol (or an exact active-set solve that passed the KKT check);
        "optimal_inaccurate": a certified point whose gap is above tol (the solver stalled or ran out of
        iterations); "time_limit": likewise, stopped by ``max_seconds``.
    multipliers : scipy.sparse.csr_matrix (m, V) or None
        Dual weights μ_{j,v} ≥ 0 of the (6b) rows (zero on supports); tokens of one support-pattern
        group share their group's weight equally. Built on first access.
    active : (k, 2) int array
        The (context j, token v ∉ S_j) pairs whose constraint (6b) is tight (margin ≤ 1 + 1e-7).
        Built on first access (one full pass over the logits).
    residuals : dict
        ``equality`` max |x_zᵀk_j − t_j| over the supports (the (6a) violation); ``min_margin`` min
        (6b) value − 1; ``duality_gap`` relative gap (½‖W‖² − dual value)/(½‖W‖²); ``error_bound``
        the certified bound on ‖W − W^mm_exact‖/‖W^mm_exact‖, √(gap/(1 − gap)) ≈ √gap (not √(2·gap):
        ½‖W − W^mm‖² ≤ ½‖W‖² − D with the *absolute* gap, see :func:`_error_bound`); ``stationarity``
        ‖W − W(Ψ)‖/‖W‖ with W(Ψ) the primal image of the dual point; ``complementarity``
        max μ_i · (margin_i − 1) / max μ.
    separability : Separability
    iterations : int
        Dual iterations or Newton steps.
    rounds : int
        Working-set rounds or outer steps.
    seconds : float
    method : str
    note : str
        Why the tolerance was not reached, where the status alone does not say (e.g. a problem beyond the
        ALM's size, naming it); empty otherwise.
    """

    W: np.ndarray | None
    margin: float
    status: Status
    residuals: SVMResiduals
    separability: Separability
    iterations: int = 0
    seconds: float = 0.0
    method: str = ""
    rounds: int = 0
    note: str = ""
    # The solver's problem and outcome, for the lazy ``multipliers`` / ``active`` and a warm start: set by
    # :meth:`_solved`, not constructor parameters (they are no part of the public signature).
    _pb: Problem | None = field(default=None, init=False, repr=False)
    _out: SVMOutcome | None = field(default=None, init=False, repr=False)

    @classmethod
    def _solved(cls, *args, pb: Problem, out: SVMOutcome | None = None, **kwargs) -> NTPSVM:
        """An NTPSVM of ``args``/``kwargs`` (the public fields) with the problem ``pb`` and outcome ``out``
        it was solved from."""
        svm = cls(*args, **kwargs)
        svm._pb, svm._out = pb, out
        return svm

    @property
    def certificate(self) -> sp.csr_matrix | None:
        """The multipliers μ (the dual point certifying W^mm's gap) when a W was found; else the Farkas matrix of
        non-separability (:class:`~embgeo.core.status.Certified`)."""
        return self.multipliers if self.W is not None else self.separability.certificate

    def to_dict(self) -> dict:
        """Status, method, residuals, margin and ‖W^mm‖ as strict JSON (the arrays are not in it)."""
        proof = ("the dual multipliers μ (the duality gap in residuals)" if self.W is not None else
                 "a Farkas matrix Ψ of non-separability" if not self.separability else None)
        return certified_dict(self, proof, margin=self.margin, note=self.note, iterations=self.iterations,
                              w_mm_norm=None if self.W is None else float(np.linalg.norm(self.W)))

    @cached_property
    def multipliers(self) -> sp.csr_matrix | None:
        if self._out is None or self._out.dual_point is None:
            return None
        g, j, psi = self._out.dual_point
        off = ~in_support(self._pb.groups.pattern, g, j)
        g, j, mu = g[off], j[off], -np.minimum(psi[off], 0.0)
        members = np.argsort(self._pb.groups.token_group, kind="stable")
        start = np.concatenate([[0], np.cumsum(self._pb.groups.size)])
        n = self._pb.groups.size[g]
        tok = members[np.repeat(start[g], n) + _ranges(n)]
        # W = Σ μ (e_z − e_v) h̄ᵀ: μ of the unit-scale problem over scale² (inf where that overflows float64,
        # i.e. for H̄ in units below ~1e-154; the verdicts, W and the margins do not)
        with np.errstate(over="ignore"):
            mu = mu / self._pb.scale / self._pb.scale
        return sp.csr_matrix((np.repeat(mu / n, n), (np.repeat(j, n), tok)), shape=(self._pb.data.m, self._pb.data.V))

    @cached_property
    def active(self) -> np.ndarray:
        if self._out is None or self._out.X is None:
            return np.zeros((0, 2), dtype=np.int64)
        pb = self._pb
        scan = scan_off_support(self._out.X, self._out.t, pb.K, pb.groups.pattern.tocsc(), below=1.0 + MARGIN_ATOL,
                                top=pb.groups.n_groups)
        members = np.argsort(pb.groups.token_group, kind="stable")
        start = np.concatenate([[0], np.cumsum(pb.groups.size)])
        n = pb.groups.size[scan.groups]
        tok = members[np.repeat(start[scan.groups], n) + _ranges(n)]
        pairs = np.column_stack([np.repeat(scan.contexts, n), tok])
        return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


def _ranges(n: np.ndarray) -> np.ndarray:
    """Concatenated aranges 0..n_i−1."""
    total = int(n.sum())
    return np.arange(total) - np.repeat(np.cumsum(n) - n, n)


@dataclass
class SVMRequest:
    """What :func:`ntp_svm` hands the solver of its ``method`` (the one interface of :data:`SVM_SOLVERS`): the data and
    their problem (``pb``: unit scale, coordinates, token groups), the relative-gap ``tol``, the iteration and time
    limits (``deadline``: perf_counter seconds, None for none), ``progress``, the warm start (``warm_W`` (V, d) in
    the caller's units, or an earlier solution's ``warm_dual``), the separability verdict so far (None: undecided)
    and each solver's options (None: its defaults)."""

    data: NTPData
    subspace: Subspace | None
    pb: Problem
    tol: float
    max_iter: int
    check_every: int
    deadline: float | None
    max_seconds: float | None
    progress: ProgressFn | None
    warm_W: np.ndarray | None
    warm_dual: tuple | None
    separability: Separability | None
    alm_options: ALMOptions | None
    dual_options: DualOptions | None
    ipm_options: IPMOptions | None = None
    #: "auto" only: an ALM that stops short of ``tol`` hands over to the interior point where that fits (an explicit
    #: ``method`` runs its solver alone)
    rescue: bool = False


@dataclass
class SVMSolved:
    """What a solver of :data:`SVM_SOLVERS` returns: its outcome (group level, unit scale), the name that
    ``NTPSVM.method`` reports, and the separability verdict as it now stands (a Farkas certificate when the solver
    found one; the request's when it did not decide)."""

    outcome: SVMOutcome
    name: str
    separability: Separability | None


def _solve_alm(req: SVMRequest) -> SVMSolved:
    """The augmented Lagrangian (:class:`~embgeo.ntp.solvers.svm_alm.SVMALM`) from the warm start; when it finds no
    feasible point and separability is undecided, the dual route looks for a Farkas matrix (and, separable after
    all, the ALM starts again from its separator); a stall is finished by an exact active-set solve. Where nearly every
    pair is active (``dense_active``: the violated pairs' Newton systems beyond the memory room), the dual takes the
    time left, and its answer is kept where it certifies a smaller gap."""
    pb, tol, deadline, progress, sep = req.pb, req.tol, req.deadline, req.progress, req.separability
    X0 = None if req.warm_W is None or req.warm_dual is not None else _group_rows(pb, req.warm_W)
    alm = SVMALM(pb.K, pb.groups.pattern, pb.groups.size, options=req.alm_options)
    handover = req.rescue and ipm_fits(pb.groups.pattern, pb.K.shape[1], req.ipm_options)  # (see _rescue)
    out = alm.solve(tol=tol, max_seconds=time_left(deadline), X0=X0, dual=req.warm_dual, progress=progress,
                    handover=handover)
    if out.dense_active and not past(deadline):  # (svm_alm's NewtonTooLarge: the dual's regime)
        dual = _solve_dual(req)
        if dual.outcome.status == Status.INFEASIBLE or dual.outcome.gap < out.gap or out.X is None:
            return SVMSolved(dual.outcome, f"{dual.name}, after the augmented Lagrangian stopped: {out.reason}",
                             dual.separability)
    if out.X is None:  # no feasible point: the interior point where "auto" may hand over and it fits
        rescued = _rescue(req, out, sep)
        if rescued is not None:
            return rescued
        req = replace(req, rescue=False)  # (tried: its answer would be the same after the restart below)
    if out.X is None and sep is None:  # no feasible point: ask the dual route for a Farkas matrix
        stop_if_spent(deadline, "ntp_svm", "the dual route could look for a Farkas matrix, after the "
                      f"augmented Lagrangian found no feasible point ({out.status})")
        try:
            sep = is_separable(req.data, req.subspace, method="dual", max_seconds=time_left(deadline),
                               max_iter=req.max_iter, dual_options=req.dual_options, route_options=pb.options)
        except SolverError as err:
            raise SolverError(_undecided_message(pb, out, req.max_seconds) + f" ({err})") from None
        if not sep:
            return SVMSolved(out, sep.method, sep)
        alm = SVMALM(pb.K, pb.groups.pattern, pb.groups.size, options=alm.opt)
        out = alm.solve(tol=tol, X0=_group_rows(pb, sep.W), progress=progress, max_seconds=time_left(deadline))
    name = (f"augmented Lagrangian with semismooth Newton steps ({out.factorizations} factorizations, "
            f"{out.rounds} outer steps, {out.working_set} off-support pairs in the working set)")
    if out.status == Status.STALLED and out.X is not None and out.gap > tol and not past(deadline):
        out, finished = _active_set_finish(pb, out, tol, deadline)
        name += " + exact active-set solve" if finished else ""
    if out.status != Status.OPTIMAL:
        rescued = _rescue(req, out, sep)
        if rescued is not None:
            return rescued
    return SVMSolved(out, name, sep)


def _rescue(req: SVMRequest, out: SVMOutcome, sep: Separability | None) -> SVMSolved | None:
    """Under "auto" (``req.rescue``), an ALM that stopped short of ``tol`` (``out``: stalled, or no feasible point)
    hands the time left to the interior point where the problem fits it: its iteration count does not depend on the
    conditioning that stalls the ALM (planted d ≪ m data with a tiny margin, :mod:`~embgeo.ntp.solvers.svm_ipm`).
    Its result when it certifies a smaller gap (or the only point), else None."""
    pb = req.pb
    if not req.rescue or past(req.deadline) or not ipm_fits(pb.groups.pattern, pb.K.shape[1], req.ipm_options):
        return None
    ipm, ipm_name = _interior_point(req, out.X)  # (from the ALM's best point, where it has one)
    if ipm.X is None or (out.X is not None and not ipm.gap < out.gap):
        return None
    ended = f"the augmented Lagrangian ended {out.status}" + (f" at gap {out.gap:.2g}" if out.X is not None else "")
    ipm.reason = "; ".join(filter(None, [ended + (f" ({out.reason})" if out.reason else ""), ipm.reason]))
    return SVMSolved(ipm, f"{ipm_name}, after {ended}", sep)


def _interior_point(req: SVMRequest, X0: np.ndarray | None = None) -> tuple[SVMOutcome, str]:
    """The interior-point method (:class:`~embgeo.ntp.solvers.svm_ipm.SVMIPM`) with the time left, started from the
    group rows ``X0`` of a feasible point, else from the separability certificate where there is one (a strictly
    feasible start: :meth:`~embgeo.ntp.solvers.svm_ipm.SVMIPM._warm`), a stall finished by the exact active-set
    solve; returns its outcome and name."""
    pb, tol, deadline, sep = req.pb, req.tol, req.deadline, req.separability
    if X0 is None and sep is not None and sep.W is not None:
        X0 = _group_rows(pb, sep.W)
    ipm = SVMIPM(pb.K, pb.groups.pattern, pb.groups.size, options=req.ipm_options)
    out = ipm.solve(tol=tol, deadline=deadline, progress=req.progress, X0=X0)
    name = (f"interior point (Mehrotra predictor-corrector, the ties by their {ipm.newton}, {out.iterations} "
            f"iterations{', from a separator' if ipm.warm else ''})")
    if out.status == Status.STALLED and out.X is not None and out.gap > tol and not past(deadline):
        stalled_at = out.gap
        if ipm.finish(out, deadline):  # its own KKT system on its active pairs
            out.status = Status.OPTIMAL if out.gap <= tol else Status.STALLED
            out.reason = (f"the interior point stalled at gap {stalled_at:.2g}; its active pairs (λ > s) as equalities "
                          "with the ties, solved by a QR, gave a KKT point of the whole problem")
            return out, name + " + exact solve on its active pairs"
        budget = FINISH_IPM_ITERATIONS * iteration_flops(pb.groups.pattern, pb.K.shape[1])
        out, finished = _active_set_finish(pb, out, tol, deadline, budget)
        name += " + exact active-set solve" if finished else ""
    return out, name


def _solve_ipm(req: SVMRequest) -> SVMSolved:
    """The interior-point method on problems within its size (:func:`~embgeo.ntp.solvers.svm_ipm.ipm_fits`; beyond
    it, :class:`TooLargeError` naming the size). It decides separability itself: ntp_svm runs no separability LP before
    it (a feasible point certifies it; at planted(300, 20, 6) the pair LPs and the LP took 0.53 s of a 0.61 s call,
    the interior point 0.07 s), and the pair routes only above ``IPMOptions.ROUTES_FLOPS``. Where its multipliers
    diverge (no feasible point), the cheap routes and the small LP are asked for a Farkas certificate, then the
    augmented Lagrangian's route takes over (its Farkas search included)."""
    pb = req.pb
    G, r = pb.groups.n_groups, pb.K.shape[1]
    if not ipm_fits(pb.groups.pattern, r, req.ipm_options):
        opt = check_options(req.ipm_options, IPMOptions)
        raise TooLargeError(f"ntp_svm(method='ipm'): {G} token groups × r = {r} coordinates = {G * r} unknowns and "
                            f"{G} × {pb.data.m} pairs, beyond the interior point's size (IPMOptions.MAX_UNKNOWNS = "
                            f"{opt.MAX_UNKNOWNS}, MAX_PAIRS = {opt.MAX_PAIRS}); use method='alm' (or 'auto')")
    out, name = _interior_point(req)
    if out.X is None and out.status != Status.TIME_LIMIT:
        sep = req.separability
        if sep is None and not past(req.deadline):  # its multipliers diverged: the routes ntp_svm left to it
            sep = _decide_before(pb, req.deadline, time_left(req.deadline),
                                 cheap=not _pair_routes_first(pb, req.ipm_options))
            if sep is not None and not sep:
                return SVMSolved(out, sep.method, sep)
        alm = _solve_alm(replace(req, rescue=False, separability=sep))
        alm.name += f", after the interior point found no feasible point ({out.reason or out.status})"
        return alm
    return SVMSolved(out, name, req.separability)


def _solve_dual(req: SVMRequest) -> SVMSolved:
    """The accelerated projected gradient on the dual (:class:`~embgeo.ntp.solvers.svm_dual.SVMDual`) with an exact
    active-set finish; it looks for a Farkas direction when separability is undecided."""
    pb = req.pb
    solver = SVMDual(pb.K, pb.groups.pattern, pb.groups.size, context_gram(pb.coords), options=req.dual_options)
    out = solver.solve(tol=req.tol, max_iter=req.max_iter, check_every=req.check_every,
                       detect_infeasible=req.separability is None, max_seconds=time_left(req.deadline),
                       progress=req.progress)
    if out.status == Status.INFEASIBLE:
        sep = farkas_result(pb, out.farkas, "NTP-SVM dual: Farkas direction", iterations=out.iterations)
        return SVMSolved(out, sep.method, sep)
    name = (f"dual on {'every off-support pair' if out.mode == 'dense' else 'a working set'} (accelerated "
            "projected gradient)" + (" + exact active-set solve" if out.polished else ""))
    return SVMSolved(out, name, req.separability)


#: The NTP-SVM's solvers by ``method`` name, each a function (:class:`SVMRequest`) → :class:`SVMSolved`. A new
#: solver is one module in ``embgeo.ntp.solvers`` and one entry here (docs/internals/architecture.rst).
SVM_SOLVERS: dict[str, Callable[[SVMRequest], SVMSolved]] = {"alm": _solve_alm, "dual": _solve_dual, "ipm": _solve_ipm}

#: The ``method`` names :func:`ntp_svm` accepts: "auto" (dual when rank H̄ = m; else ipm where its iterations are cheap,
#: :func:`~embgeo.ntp.solvers.svm_ipm.ipm_cheap`; else alm) and :data:`SVM_SOLVERS`.
SVM_METHODS = ("auto", *SVM_SOLVERS)


def ntp_svm(data: NTPData, *, tol: float = 1e-10, max_iter: int = 200_000, check_every: int = 25,
            subspace_: Subspace | None = None, separability: Separability | None = None,
            max_seconds: float | None = None, progress: ProgressFn | None = None,
            method: str = "auto", warm_start: ArrayLike | NTPSVM | None = None,
            alm_options: ALMOptions | None = None, dual_options: DualOptions | None = None,
            route_options: RouteOptions | None = None, ipm_options: IPMOptions | None = None) -> NTPSVM:
    """Solve the NTP-SVM (Def. 3) and certify the solution.

    Separability is decided first (:func:`is_separable`'s cheap routes: Lemma 1, pair
    certificates, the LP when small; for "ipm", the LP only where its multipliers diverge, and the pair routes where
    an iteration is not cheap: a feasible point of its own decides it); non-separable data give
    ``status == "infeasible"`` and ``W is None``. Then W^mm by the solver named ``method`` (:data:`SVM_SOLVERS`, one
    interface: :class:`SVMRequest` → :class:`SVMSolved`):

    * ``"alm"``: the augmented Lagrangian method with semismooth Newton steps of
      :mod:`embgeo.ntp.solvers.svm_alm`, on the primal. For rank H̄ < m (d ≪ m, e.g. learned embeddings).
    * ``"dual"``: the accelerated projected gradient on the dual of :class:`~embgeo.ntp.solvers.svm_dual.SVMDual`
      with an exact active-set finish. For rank H̄ = m (d ≥ m), where almost every off-support pair
      is active and the dual is two GEMMs with the m × m Gram per iteration.
    * ``"ipm"``: the interior-point method of :mod:`embgeo.ntp.solvers.svm_ipm` (Mehrotra's predictor-corrector,
      the ties kept on their null space or in their range space; strictly feasible from a separator where
      separability was decided by one), for problems with G·r and G·m small enough for its dense Newton matrix
      (:class:`~embgeo.ntp.solvers.svm_ipm.IPMOptions`); its iteration count does not depend on the conditioning
      that stalls the ALM on data whose margin is tiny next to the embeddings' scale.
    * ``"auto"`` (default): "dual" when rank H̄ = m; else "ipm" where an iteration of it is cheap
      (:func:`~embgeo.ntp.solvers.svm_ipm.ipm_cheap`), else "alm", handing over to "ipm" where the ALM stops short
      of ``tol`` and the problem fits it.

    Both stop when the relative duality gap g = (½‖W‖² − D)/(½‖W‖²) of a point W feasible for every
    constraint and a dual value D is ≤ ``tol``; then ‖W − W^mm‖/‖W^mm‖ ≤ √(g/(1 − g))
    (``residuals["error_bound"]``; see :mod:`embgeo.ntp.solvers.svm_alm` for the derivation). The default
    1e-10 is reached on every well-posed instance we measured (the ALM's exact finish ends at
    1e-11…1e-15). Where ``tol`` is not reached but a certified point exists, it is returned, never an
    exception: ``status`` "time_limit" (``max_seconds`` spent) or "optimal_inaccurate" (the solver
    stalled or ran out of iterations), with its gap and error bound; callers decide what is accurate
    enough. :class:`SolverError` only when no feasible point was found and separability is undecided.

    ``warm_start``: a decoder W (V, d) close to W^mm (e.g. the trained one: it starts the ALM from
    P_⊥(W) scaled to margin 1, and is tried first as a separability certificate), or an earlier
    :class:`NTPSVM` on data with the same supports (e.g. the previous record of a training run: its
    multipliers and W start the ALM). The interior point starts from the separability certificate instead (this W
    where it separates the data, else the separator of the route that decided; a cold start where there is none).
    ``progress(event)`` is called after every check / outer step with a
    :class:`~embgeo.ntp.solvers.outcome.ProgressEvent` (``event.gap``, ``event.values["working_set"]``). A
    ``separability`` result of :func:`is_separable` on the same data is reused instead of deciding again.

    ``alm_options``, ``dual_options``, ``ipm_options``: the augmented Lagrangian's, the dual's and the interior
    point's tuning (:class:`~embgeo.ntp.solvers.svm_alm.ALMOptions`, :class:`~embgeo.ntp.solvers.svm_dual.DualOptions`,
    :class:`~embgeo.ntp.solvers.svm_ipm.IPMOptions`; their defaults when None), for a study of a solver or a test
    that forces one of its paths; ``route_options``: how the separability step chooses its routes
    (:class:`~embgeo.ntp.theory.separability.RouteOptions`).

    ``max_seconds`` is a wall for the whole call (issue 38): each stage gets the time left (HiGHS as its time
    limit), the solvers stop early enough to certify their last point by then, and the final re-scan of the margins
    is skipped when it would end past it (RESCAN_GRACE; ``note`` says so).
    """
    t0 = time.perf_counter()
    if not (0 < tol < 1):
        raise InputError(f"tol: expected a relative gap in (0, 1), got {tol}")
    if method != "auto" and method not in SVM_SOLVERS:
        raise InputError(f"method: expected one of {('auto', *SVM_SOLVERS)}, got {method!r}")
    if separability is not None and not isinstance(separability, Separability):
        raise InputError(f"separability: expected the result of is_separable, got {type(separability).__name__}")
    ipm_options = check_options(ipm_options, IPMOptions)
    deadline = deadline_of(max_seconds, "ntp_svm")
    stop_if_spent(deadline, "ntp_svm", "started")
    pb = make_problem(data, subspace_, route_options)
    warm_W, warm_dual = _warm_start(data, pb, warm_start)
    rescue = method == "auto"
    if method == "auto":
        method = ("dual" if pb.coords.rank == data.m else
                  "ipm" if ipm_cheap(pb.groups.pattern, pb.K.shape[1], ipm_options) else "alm")
    sep = separability
    if sep is None and warm_W is not None:
        stop_if_spent(deadline, "ntp_svm", "the warm start was tried as a separability certificate")
        sep = separable_from_candidate(pb, warm_W)
    if sep is None and method != "ipm":
        sep = _decide_before(pb, deadline, max_seconds)
    elif sep is None and _pair_routes_first(pb, ipm_options):
        # the interior point decides feasibility itself; the cheap routes before it settle non-separable data sooner
        sep = _decide_before(pb, deadline, max_seconds, lp=False)
    if sep is not None and not sep:
        return NTPSVM._solved(None, 0.0, Status.INFEASIBLE, dict(sep.residuals), sep, 0, time.perf_counter() - t0,
                              sep.method, pb=pb)
    if sep is None:
        stop_if_spent(deadline, "ntp_svm", "the solver started, and separability is undecided")
    if past(deadline):  # separable, but no time for the solver
        out = SVMOutcome(Status.TIME_LIMIT, check_seconds=math.inf)  # (the certificate's margins are checked)
        name = "none: the time limit was spent before the solver started"
    else:
        got = SVM_SOLVERS[method](SVMRequest(data, subspace_, pb, tol, max_iter, check_every, deadline, max_seconds,
                                             progress, warm_W, warm_dual, sep, alm_options, dual_options,
                                             ipm_options, rescue))
        out, name, sep = got.outcome, got.name, got.separability
        if sep is not None and not sep:  # the solver found a Farkas certificate
            return NTPSVM._solved(None, 0.0, Status.INFEASIBLE, dict(sep.residuals), sep, out.iterations,
                                  time.perf_counter() - t0, sep.method, out.rounds, pb=pb)
    if out.X is None and sep is not None and sep.W is not None:
        out = _certificate_point(pb, sep, out)  # stopped before a certified point of its own: the separator
    if out.X is None:
        raise SolverError(_undecided_message(pb, out, max_seconds))
    status = out.status if out.status in (Status.OPTIMAL, Status.TIME_LIMIT) else Status.OPTIMAL_INACCURATE
    if out.status == Status.OPTIMAL and out.gap > tol:  # an exact active-set solve accepted as a KKT point
        status = Status.OPTIMAL
    scans = 2 if sep is None else 1  # full passes left: the certificate's (when undecided) and the residuals'
    rescan = deadline is None or (time.perf_counter() + scans * out.check_seconds
                                  <= deadline + RESCAN_GRACE * max_seconds)
    note = out.reason
    if not rescan:
        note = "; ".join(filter(None, [note, (
            "the final re-scan of the margins was skipped at the time limit (about "
            f"{scans * out.check_seconds:.2g} s): min_margin is the solver's, whose certifying scan scaled the "
            "point to smallest margin exactly 1")]))
    if sep is None:
        sep = (separable_result(pb, out.X, out.t, "NTP-SVM: a feasible point") if rescan
               else _separable_as_certified(pb, out.X, out.t, "NTP-SVM: a feasible point"))
    W = pb.token_w(out.X)
    norm_W = float(np.sqrt(2 * out.primal)) / pb.scale  # ‖W‖ in the caller's units
    return NTPSVM._solved(W, 1.0 / norm_W, status, _svm_residuals(pb, out, rescan), sep, out.iterations,
                          time.perf_counter() - t0, name, out.rounds, note, pb=pb, out=out)


def _decide_before(pb: Problem, deadline: float | None, max_seconds: float | None, *, cheap: bool = True,
                   lp: bool = True) -> Separability | None:
    """Separability by the cheap routes (``cheap``: Lemma 1, pair certificates, at most a quarter of ``max_seconds``)
    and (``lp``), rank H̄ < m, the LP where it is small; None when they leave it undecided."""
    stop_if_spent(deadline, "ntp_svm", "separability was decided")
    sep = decide_cheaply(pb, None if max_seconds is None else max_seconds / 4) if cheap else None
    if lp and sep is None and pb.coords.rank < pb.data.m and lp_is_small(pb):
        stop_if_spent(deadline, "ntp_svm", "separability was decided")
        sep = separability_by_lp(pb, time_left(deadline))
    return sep


def _pair_routes_first(pb: Problem, options: IPMOptions | None) -> bool:
    """Whether ntp_svm asks the cheap separability routes before the interior point: an iteration of it costs more than
    ``IPMOptions.ROUTES_FLOPS``."""
    return iteration_flops(pb.groups.pattern, pb.K.shape[1]) > check_options(options, IPMOptions).ROUTES_FLOPS


def _active_set_finish(pb: Problem, out: SVMOutcome, tol: float, deadline: float | None,
                       budget: float = 0.0) -> tuple[SVMOutcome, bool]:
    """A stalled ALM's (or interior point's) best point finished exactly: the off-support pairs within FINISH_RTOL of
    margin 1 there, with (6a), as equalities of min ½Σ n_g‖x_g‖² (:meth:`SVMDual._polish_pairs`, which drops pairs
    whose multiplier has the wrong sign and adds violated ones), accepted only as a KKT point of the whole problem and
    only when its certified gap is smaller; tried when about three rounds of its factorizations cost at most
    FINISH_SCANS scans of the margins or ``budget`` flops. Returns (the outcome, whether the exact solve was taken).

    Why: on nearly degenerate instances (planted d ≪ m data with mixed supports and exact ties, W^mm's norm ~100
    times the embeddings') the ALM's multipliers converge linearly at ρ = 10⁸–10⁹ and it stalls; on one of twelve
    draws at m = 40, V = 10, d = 4 at gap 1.1e-5, ‖W − W^mm‖/‖W^mm‖ = 1.1e-5 against cvxpy + Clarabel, where the
    exact solve on its 9 nearly tight pairs gave gap 3.0e-8 (the absolute gap over P: the dual came out above the
    primal) and 2.5e-7."""
    scan = scan_off_support(out.X, out.t, pb.K, pb.groups.pattern.tocsc(), every_below=1.0 + FINISH_RTOL)
    solver = SVMDual(pb.K, pb.groups.pattern, pb.groups.size, context_gram(pb.coords))
    G, m, r = pb.groups.n_groups, pb.data.m, pb.K.shape[1]
    if 3 * solver._polish_cost(scan.groups) > max(FINISH_SCANS * 2.0 * G * m * r, budget):  # (~3 factorization rounds)
        return out, False
    try:
        exact = solver._polish_pairs(scan.groups, scan.contexts, deadline=deadline)
    except MemoryError:  # (the ALM may have stalled for want of memory itself: keep its point)
        return out, False
    if exact is None or not exact.gap < out.gap:
        return out, False
    exact.iterations, exact.rounds, exact.factorizations = out.iterations, out.rounds, out.factorizations
    exact.working_set, exact.mode, exact.check_seconds = out.working_set, out.mode, out.check_seconds
    exact.status = Status.OPTIMAL if exact.gap <= tol else Status.STALLED  # (a better point, still short of tol)
    solver_name = "interior point" if out.mode == "interior point" else "augmented Lagrangian"
    exact.reason = (f"the {solver_name} stalled at gap {out.gap:.2g}; its {len(scan.groups)} nearly tight pairs "
                    "(margin within FINISH_RTOL of 1) as equalities gave a KKT point of the whole problem")
    return exact, True


def _certificate_point(pb: Problem, sep: Separability, out: SVMOutcome) -> SVMOutcome:
    """The separability certificate W (in F⊥, smallest margin 1, checked on every constraint) as the point of an
    outcome that stopped (a time limit, or a solver that found no feasible point) before a certified point of its own;
    without a dual point, the zero multipliers (dual value 0, relative gap 1). Until 2026-11-30 only a time limit did
    this: a separable verdict handed to ``ntp_svm`` whose solver stalled with no feasible point (SmolLM2's states
    relaxed to 5 tokens, ``method="alm"``) raised "separability undecided" instead."""
    X = _group_rows(pb, sep.W)
    coo = pb.groups.pattern.tocoo()
    first = np.full(pb.data.m, -1)
    first[coo.col[::-1]] = coo.row[::-1]  # each context's first support group: its tie value
    out.X, out.t = X, row_dots(X, pb.K, first, np.arange(pb.data.m))
    out.primal = 0.5 * float(np.sum(pb.groups.size * np.einsum("ij,ij->i", X, X)))
    if out.dual_point is None:
        out.dual = max(out.dual, 0.0)
        out.dual_point = (coo.row.astype(np.int64), coo.col.astype(np.int64), np.zeros(len(coo.row)))
    stopped = ("the time limit came" if out.status == Status.TIME_LIMIT else f"the solver stopped ({out.status})")
    out.reason = "; ".join(filter(None, [out.reason, f"{stopped} before the solver's first certified point: "
                                         f"the point is the separability certificate ({sep.method})"]))
    return out


def _separable_as_certified(pb: Problem, X: np.ndarray, t: np.ndarray, method: str) -> Separability:
    """:func:`~embgeo.ntp.theory.separability.separable_result` of a solver's point, already scaled by its certifying
    full scan to smallest margin 1, without scanning again (the ties (6a) are re-checked: O(support pairs · r))."""
    coo = pb.groups.pattern.tocoo()
    eq = row_dots(X, pb.K, coo.row, coo.col) - t[coo.col]
    return Separability(True, pb.token_w(X), None, {"min_margin": 1.0, "equality": float(np.max(np.abs(eq),
                        initial=0.0))}, method + " (margins as certified by the solver's scan)")


def _undecided_message(pb: Problem, out, max_seconds: float | None) -> str:
    """Why ntp_svm has nothing to return, with the problem's size (the user decides what to change)."""
    data = pb.data
    within = f"within max_seconds={max_seconds:g}" if max_seconds is not None else f"after {out.iterations} iterations"
    return (f"ntp_svm: no point feasible for every constraint {within} ({out.status}) and separability "
            f"undecided, at m = {data.m} contexts, V = {data.V} tokens in {pb.groups.n_groups} groups, "
            f"d = {data.d} (rank {pb.coords.rank}), {data.probs.nnz} support pairs; pass warm_start= a "
            "separating decoder (e.g. the trained one) or allow more time"
            + (f". {out.reason}" if out.reason else ""))


def _group_rows(pb: Problem, W: np.ndarray) -> np.ndarray:
    """Group rows (G, r) in unit scale of a decoder W (V, d) in the caller's units: the mean coordinates of
    each group's tokens, times the scale (so that the logits stay those of W)."""
    X = pb.coords.to_coords(W) * pb.scale
    out = np.zeros((pb.groups.n_groups, X.shape[1]))
    np.add.at(out, pb.groups.token_group, X)
    return out / pb.groups.size[:, None]


def _warm_start(data: NTPData, pb: Problem, warm) -> tuple[np.ndarray | None, tuple | None]:
    """(W, dual point or None) from ``warm_start`` of :func:`ntp_svm`."""
    if warm is None:
        return None, None
    if isinstance(warm, NTPSVM):
        if warm.W is None:
            raise InputError(f"warm_start: the NTPSVM given has no W (status '{warm.status}')")
        W = check_W(data, warm.W)
        other = warm._pb
        same = (other is not None and other.groups.pattern.shape == pb.groups.pattern.shape
                and (other.groups.pattern != pb.groups.pattern).nnz == 0
                and np.array_equal(other.groups.size, pb.groups.size))
        dual = warm._out.dual_point if same and warm._out is not None else None
        if dual is not None and other.scale != pb.scale:  # multipliers scale as H̄⁻²: into this problem's unit scale
            g, j, psi = dual
            dual = (g, j, psi * (pb.scale / other.scale) ** 2)
        return W, dual
    return check_W(data, warm), None


def _error_bound(gap: float) -> float:
    """Certified ‖W − W^mm‖/‖W^mm‖ from the relative duality gap g = (P − D)/P of a feasible W (P = ½‖W‖²):
    ½‖W − W^mm‖² ≤ P − ½‖W^mm‖² ≤ P − D and ½‖W^mm‖² ≥ D give ‖W − W^mm‖²/‖W^mm‖² ≤ (P − D)/D = g/(1 − g)."""
    return float(np.sqrt(gap / (1.0 - gap))) if gap < 1 else math.inf


def _svm_residuals(pb: Problem, out: SVMOutcome, rescan: bool = True) -> SVMResiduals:
    """The KKT residuals of (X, t) and the dual point, all from the definitions (group level, weighted); without
    ``rescan``, ``min_margin`` is the solver's (0: its certifying scan scaled the point to smallest margin 1)."""
    K, n = pb.K, pb.groups.size.astype(float)
    coo = pb.groups.pattern.tocoo()
    eq = row_dots(out.X, K, coo.row, coo.col) - out.t[coo.col]
    g, j, psi = out.dual_point
    Xpsi = sp.csr_matrix((psi / n[g], (g, j)), shape=(pb.groups.n_groups, pb.data.m)) @ K
    norm_W = float(np.sqrt(2 * out.primal))
    off = ~in_support(pb.groups.pattern, g, j)
    mu = -np.minimum(psi[off], 0.0)
    margins = out.t[j[off]] - row_dots(out.X, K, g[off], j[off])
    min_margin = scan_off_support(out.X, out.t, K, pb.groups.pattern.tocsc()).min_margin if rescan else 1.0
    return {
        "equality": float(np.max(np.abs(eq), initial=0.0)),
        "min_margin": float(min_margin - 1.0),
        "duality_gap": float(out.gap),
        "error_bound": _error_bound(out.gap),
        "stationarity": float(np.sqrt(np.sum(n * np.sum((out.X - Xpsi) ** 2, axis=1))) / norm_W),
        "complementarity": float(np.max(mu * (margins - 1.0), initial=0.0) / max(float(mu.max(initial=0.0)), 1e-300)),
    }
