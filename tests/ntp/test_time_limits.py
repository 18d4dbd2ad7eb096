"""Every limit a wall (issue 38): the NTP solvers stop at ``max_seconds`` plus at most one iteration, and HiGHS
always gets the time left.

No timed assertions: the clock is fake (``time.perf_counter`` replaced by a counter that the test advances at
chosen events: a Newton direction, a gradient iteration, a check), so each test asserts *which* stages ran after
the deadline, and how many iterations ran before it.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from embgeo.core.status import Status
from embgeo.ntp import ntp_svm, synthetic, theory
from embgeo.ntp.solvers import separability_lp as L
from embgeo.ntp.solvers import svm_alm as A
from embgeo.ntp.solvers import svm_dual as D
from embgeo.ntp.theory import separability
from embgeo.ntp.theory import svm as S
from reference.ntp import kesler_values, planted

from .test_svm_alm import newton_instance


class FakeClock:
    """A time.perf_counter() that moves only when told (``advance``), and a log of (event, time)."""

    def __init__(self):
        self.now = 1000.0
        self.log: list[tuple[str, float]] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def at(self, event: str) -> list[float]:
        return [t for e, t in self.log if e == event]


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(time, "perf_counter", c)
    return c


def spy(monkeypatch, clock: FakeClock, owner, name: str, cost: float = 0.0, event: str | None = None):
    """Wrap owner.name: log its start time on the fake clock, then let it cost ``cost`` fake seconds."""
    real = getattr(owner, name)

    def wrapped(*args, **kwargs):
        clock.log.append((event or name, clock.now))
        clock.advance(cost)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapped)


def _problem(data):
    return separability.make_problem(data, None)


# == the augmented Lagrangian ===================================================================================

def test_alm_begins_no_newton_step_or_certificate_after_its_deadline(clock, monkeypatch):
    """Each Newton direction costs 1 s (everything else nothing): with max_seconds = 40.5 the directions begin at
    0, 1, ..., 40 s, the step that ends at 41 s is the last, and no certificate (full scan) begins after
    40.5 s + CERTIFICATE_GRACE · 40.5 s (the one at 41 s is within it)."""
    pb = _problem(planted(60, 12, 5, seed=0))
    spy(monkeypatch, clock, A.SVMALM, "_newton_direction", cost=1.0)
    spy(monkeypatch, clock, A, "scan_off_support")
    t0 = clock.now
    out = A.SVMALM(pb.K, pb.groups.pattern, pb.groups.size).solve(tol=1e-14, max_seconds=40.5)
    assert out.status == Status.TIME_LIMIT
    starts = [t - t0 for t in clock.at("_newton_direction")]
    assert starts == [float(k) for k in range(41)]
    assert all(t - t0 <= 40.5 * (1 + A.DEFAULT_OPTIONS.CERTIFICATE_GRACE) for t in clock.at("scan_off_support"))
    assert clock.now - t0 == 41.0  # one step past the deadline, nothing after it
    assert out.X is not None and np.isfinite(out.primal) and np.isfinite(out.dual) and 0 <= out.gap < 1


def test_alm_leaves_its_certificate_the_time_it_last_took(clock, monkeypatch):
    """A certificate (tie projection + full scan) costs 2 s, a Newton direction 1 s, max_seconds = 60: the Newton
    steps stop by 60 − 2 s, so that the last certificate ends by the deadline (not 2 s after it)."""
    pb = _problem(planted(60, 12, 5, seed=0))
    spy(monkeypatch, clock, A.SVMALM, "_newton_direction", cost=1.0)
    spy(monkeypatch, clock, A.SVMALM, "feasible_point", cost=2.0)
    t0 = clock.now
    out = A.SVMALM(pb.K, pb.groups.pattern, pb.groups.size).solve(tol=1e-14, max_seconds=60.0)
    assert out.status == Status.TIME_LIMIT and out.X is not None
    assert all(t - t0 <= 58.0 for t in clock.at("_newton_direction"))  # each began before 60 − 2 s
    assert clock.at("feasible_point")[-1] - t0 <= 58.0 + 1.0  # the last certificate began by then (+ one step)
    assert clock.now - t0 <= 60.0 + 1.0  # so the solve ends within one Newton step (1 s) of the wall
    assert out.check_seconds == 2.0


def test_alm_skips_a_certificate_that_would_end_far_past_the_deadline(clock, monkeypatch):
    """A Newton direction begun after 46 s takes 8 s where 2 s were left before the certificate (2 s as measured) of a
    50 s limit: that certificate would end 6 s past it, beyond the grace: it is skipped, an earlier step's point comes
    back, and the reason says so."""
    pb = _problem(planted(60, 12, 5, seed=0))
    t0 = clock.now
    real_dir = A.SVMALM._newton_direction

    def direction(self, *args):
        clock.log.append(("_newton_direction", clock.now))
        clock.advance(8.0 if clock.now - t0 >= 46.0 else 1.0)
        return real_dir(self, *args)

    monkeypatch.setattr(A.SVMALM, "_newton_direction", direction)
    spy(monkeypatch, clock, A.SVMALM, "feasible_point", cost=2.0)
    out = A.SVMALM(pb.K, pb.groups.pattern, pb.groups.size).solve(tol=1e-14, max_seconds=50.0)
    assert out.status == Status.TIME_LIMIT and out.X is not None
    assert "before the certificate" in out.reason
    assert clock.at("feasible_point")[-1] - t0 < 50.0  # none began after the long step
    assert clock.now - t0 <= 48.0 + 8.0  # the long step itself, begun before 50 − 2 s, and nothing after it


def test_newton_cg_stops_at_the_deadline_with_a_descent_direction(clock, monkeypatch):
    """The Jacobi conjugate gradients of a Newton system check the deadline before every product with T: with
    each product costing 1 s and 3.5 s left, four products, then the last iterate (not CGFailed, no factorization)."""
    K, n, g, j = newton_instance(0, True)
    system = A.NewtonSystem(K, n, g, j, 1e3)
    rhs = np.random.default_rng(0).standard_normal(system.c)
    spy(monkeypatch, clock, system, "_tmul", cost=1.0)
    system.deadline = clock.now + 3.5
    x = system._tsolve(rhs, rtol=1e-300, maxiter=300)
    assert system.timed_out and not system.inexact and system.chol is None
    assert len(clock.at("_tmul")) == 4
    assert float(rhs @ x) > 0  # a CG iterate from 0: xᵀTx = rhsᵀx > 0, a descent direction of the model


def test_alm_begins_no_factorization_expected_to_end_past_the_deadline(clock):
    """With the last factorization's rate known, a factorization of T that would end past the inner loop's
    deadline is not begun (_OutOfTime, which ends the inner loop)."""
    pb = _problem(planted(60, 12, 5, seed=0))
    solver = A.SVMALM(pb.K, pb.groups.pattern, pb.groups.size)
    st = solver.start()
    act = np.ones(len(st.wg), bool)
    solver._factor_rate = 1.0  # one flop a second: any T takes ages
    solver._deadline = clock.now + 10.0
    with pytest.raises(A._OutOfTime):
        solver._system(st, act, factor=True)
    assert solver.factorizations == 0
    solver._deadline = None  # no limit: factored as before
    assert solver._system(st, act, factor=True).dense and solver.factorizations == 1


def test_alm_inner_loop_ends_when_a_factorization_would_overrun(clock, monkeypatch):
    pb = _problem(planted(60, 12, 5, seed=0))
    solver = A.SVMALM(pb.K, pb.groups.pattern, pb.groups.size)
    st = solver.start()

    def refuse(self, *args, **kwargs):
        raise A._OutOfTime

    monkeypatch.setattr(A.SVMALM, "_newton_direction", refuse)
    assert solver._inner(st, 1e-3, clock.now + 1.0) == 0  # no step, no exception


def test_ntp_svm_skips_the_final_rescan_after_the_deadline(clock, monkeypatch):
    """The solver comes back past the limit (its last certificate took 30 s of a 10 s budget): ntp_svm does not
    scan every margin once more (twice: the certificate's and the residuals'); the point is the certified one."""
    data = planted(60, 12, 5, seed=0)

    real = A.SVMALM.solve

    def late(self, **kw):
        out = real(self, **kw)
        clock.advance(30.0)
        out.check_seconds = 30.0
        return out

    monkeypatch.setattr(A.SVMALM, "solve", late)
    spy(monkeypatch, clock, S, "scan_off_support")
    res = ntp_svm(data, method="alm", max_seconds=10.0)
    assert not clock.at("scan_off_support")
    assert "re-scan of the margins was skipped" in res.note
    assert res.residuals["min_margin"] == 0.0
    assert kesler_values(data, res.W).min() == pytest.approx(1.0, abs=1e-9)  # the skipped scan would say so too


# == the dual ===================================================================================================

def test_dense_dual_forces_its_last_check_early_enough(clock, monkeypatch):
    """d > m (the dense dual): an iteration costs 1 s, a check 3 s (its tie projection), check_every = 1000: the
    last check is forced at the deadline less the last check's cost, so the solve ends within one iteration of the
    20 s limit; no exact active-set solve begins after it."""
    data = synthetic(10, 8, 14, 4, seed=0)
    pb = _problem(data)
    solver = D.SVMDual(pb.K, pb.groups.pattern, pb.groups.size)
    spy(monkeypatch, clock, D, "project_dual_dense", cost=1.0, event="iteration")
    spy(monkeypatch, clock, solver, "primal_from", cost=3.0, event="check")
    spy(monkeypatch, clock, solver, "_polish_pairs")
    t0 = clock.now
    out = solver.solve(tol=1e-14, check_every=5, max_iter=10**6, max_seconds=20.0)
    assert out.status == Status.TIME_LIMIT
    assert clock.now - t0 <= 20.0 + 1.0
    assert all(t - t0 <= 20.0 for t in clock.at("_polish_pairs"))
    assert out.check_seconds == 3.0


def test_dense_dual_stops_at_the_first_iteration_past_the_deadline(clock, monkeypatch):
    data = synthetic(10, 8, 14, 4, seed=0)
    pb = _problem(data)
    solver = D.SVMDual(pb.K, pb.groups.pattern, pb.groups.size)
    spy(monkeypatch, clock, D, "project_dual_dense", cost=1.0, event="iteration")
    out = solver.solve(tol=1e-14, check_every=1000, max_iter=10**6, max_seconds=10.5)
    assert out.status == Status.TIME_LIMIT and out.iterations == 11 and len(clock.at("iteration")) == 11


def test_working_set_dual_neither_grows_nor_polishes_after_the_deadline(clock, monkeypatch):
    """The working-set dual at its time limit: before issue 38 a timed-out round still ran the exact active-set solve,
    and when the full scan found violated pairs it grew the working set and began another round (each again one
    iteration, a solve and a scan past the deadline), until no pair was violated."""
    pb = _problem(planted(60, 12, 5, seed=0))
    solver = D.SVMDual(pb.K, pb.groups.pattern, pb.groups.size, options=D.DualOptions(DENSE_DUAL_MAX=0))
    spy(monkeypatch, clock, D, "project_dual", cost=1.0, event="iteration")
    for name in ("_polish_pairs", "_grow", "_layout"):
        spy(monkeypatch, clock, solver, name)
    t0 = clock.now
    out = solver.solve(tol=1e-14, check_every=10, max_iter=10**6, max_seconds=30.5)
    assert out.status == Status.TIME_LIMIT
    for name in ("_polish_pairs", "_grow", "_layout"):
        assert all(t - t0 <= 30.5 for t in clock.at(name)), name
    assert clock.now - t0 == 31.0  # the iteration that crossed the deadline, then its check and scan (free here)


# == HiGHS ======================================================================================================

def _spy_linprog(monkeypatch, result=None):
    import scipy.optimize

    calls = []
    real = scipy.optimize.linprog

    def linprog(*args, options=None, **kw):
        calls.append(dict(options or {}))
        return real(*args, options=options, **kw) if result is None else result

    monkeypatch.setattr(scipy.optimize, "linprog", linprog)
    return calls


def test_ntp_svm_gives_highs_the_time_left(monkeypatch):
    """d < m and small: ntp_svm's separability LP (and the pair LPs before it) run under HiGHS's time limit (before
    the ALM; "auto" takes the interior point here, which decides separability itself and asks no LP)."""
    calls = _spy_linprog(monkeypatch)
    data = planted(30, 6, 3, seed=1)
    res = ntp_svm(data, max_seconds=50.0, method="alm")
    assert res.status in (Status.OPTIMAL, Status.TIME_LIMIT)
    assert calls and all(0 < c.get("time_limit", np.inf) <= 50.0 for c in calls)
    # presolve off: HiGHS's presolve does not check the limit (751 s past a 30 s limit on a pair LP at m = 100,000)
    assert all(c.get("presolve") is False for c in calls)
    calls.clear()
    assert ntp_svm(data, max_seconds=50.0).method.startswith("interior point") and not calls


def test_separability_lp_says_time_limit_when_highs_stops_there(monkeypatch):
    from scipy.optimize import OptimizeResult

    calls = _spy_linprog(monkeypatch, OptimizeResult(status=1, message="Time limit reached.", x=None, fun=None))
    pb = _problem(planted(30, 6, 3, seed=1))
    gi, ji = np.nonzero(pb.groups.pattern.toarray() == 0)
    lp = L.separability_lp(pb.K, pb.groups.pattern, gi, ji, time_limit=2.0)
    assert lp.status == Status.TIME_LIMIT and calls[-1]["time_limit"] == 2.0
    with pytest.raises(Exception, match="undecided"):
        _ = lp.separable
    calls.clear()
    assert L.separability_lp(pb.K, pb.groups.pattern, gi, ji, time_limit=0.0).status == Status.TIME_LIMIT
    assert not calls  # no time left: HiGHS not called
    # ntp_svm: an LP stopped by its limit decides nothing, the solver's route does
    res = ntp_svm(planted(30, 6, 3, seed=1), max_seconds=50.0, method="alm")  # (the route that asks the LP)
    assert calls and res.status in (Status.OPTIMAL, Status.TIME_LIMIT) and res.W is not None


def test_pair_farkas_respects_a_budget(clock, monkeypatch):
    """The span pair certificate (one least-squares solve per pair, about a second each at m = 10,000, r = 576)
    stops at its budget, checked before every pair."""
    from embgeo.ntp import NTPData
    from embgeo.ntp.solvers import pair_certificates as P

    m = 12
    P_ = np.zeros((m, 5))
    P_[:, 0] = 1.0  # token 0 follows every context; 1: 0..8, 2: 9..11, 3: 0..5, 4: 6..11 (many pairs share > 2)
    P_[:9, 1] = P_[9:, 2] = P_[:6, 3] = P_[6:, 4] = 1.0
    data = NTPData(np.random.default_rng(0).standard_normal((m, 2)), P_ / P_.sum(axis=1, keepdims=True))
    pb = _problem(data)
    assert len(list(P.heavy_pairs(pb.groups.pattern, pb.coords.rank))) >= 3
    monkeypatch.setattr(P.np.linalg, "lstsq", _costly(clock, P.np.linalg.lstsq, 5.0))
    monkeypatch.setattr(P, "FARKAS_RTOL", -1.0)  # no pair certifies: every pair is tried until the budget is spent
    assert P.pair_farkas(pb.K, pb.coords.rank, pb.groups.pattern, max_seconds=7.0) is None
    assert len(clock.log) == 2  # pairs began at 0 and 5 s; at 10 s the budget (7 s) was spent


def _costly(clock, fn, cost):
    def wrapped(*args, **kwargs):
        clock.log.append(("lstsq", clock.now))
        clock.advance(cost)
        return fn(*args, **kwargs)

    return wrapped


# == a real clock: a tiny limit returns, never raises ===========================================================

def _planted_decoder(V: int, d: int, seed: int) -> np.ndarray:
    """The decoder W_p that :func:`planted` draws first (it separates its data: the supports are its top logits)."""
    return np.random.default_rng(seed).standard_normal((V, d))


@pytest.mark.parametrize("method", ["alm", "alm-warm", "dual"])
def test_tiny_limit_on_a_moderate_problem_returns_finite_bounds(method, clock, monkeypatch):
    """A limit spent by the solver's first iteration (a fake clock: setup is free, each dual iteration or ALM inner
    solve costs 1 s of a 0.5 s limit; on a real clock a 1 ms limit was spent before or after the setup depending on
    the machine's load, so the test took one branch or the other between runs): status time_limit with a certified
    point (the solver's, or the separability certificate when the limit came before the solver's first), a finite
    margin and gap. Without a warm start the ALM has no feasible point after its one inner solve and separability is
    undecided: the refusal names the limit (never another error)."""
    from embgeo.errors import SolverError

    spy(monkeypatch, clock, D, "project_dual_dense", cost=1.0)
    spy(monkeypatch, clock, A.SVMALM, "_inner", cost=1.0)
    if method == "dual":
        data = synthetic(60, 30, 80, 3, seed=0)
        res = ntp_svm(data, method="dual", max_seconds=0.5)
    else:
        data = planted(600, 40, 8, seed=2)
        warm = _planted_decoder(40, 8, 2) if method == "alm-warm" else None
        if warm is None:
            with pytest.raises(SolverError, match="max_seconds"):
                ntp_svm(data, method="alm", max_seconds=0.5)
            return
        res = ntp_svm(data, method="alm", max_seconds=0.5, warm_start=warm)
    assert res.status == Status.TIME_LIMIT
    assert res.W is not None and np.isfinite(res.margin) and res.margin > 0
    gap = res.residuals["duality_gap"]
    assert np.isfinite(gap) and 0 <= gap <= 1  # (1 where only the separability certificate was in time)
    assert kesler_values(data, res.W).min() == pytest.approx(1.0, abs=1e-7)


# == no stage of setup begins after the deadline ===============================================================

def test_a_spent_limit_runs_nothing(clock, monkeypatch):
    """max_seconds = 0 (a caller whose own limit is spent): is_separable and ntp_svm build nothing (before issue 38's
    mend their setup alone took 27 s and 48 s when given 1 ms at m = 10,000, V = 49,152) and say 'not run';
    negative control: with time they decide. A negative limit is refused."""
    from embgeo.errors import InputError, SolverError

    data = planted(60, 12, 5, seed=0)
    spy(monkeypatch, clock, S, "make_problem")
    spy(monkeypatch, clock, separability, "make_problem")
    for call in (lambda: separability.is_separable(data, max_seconds=0), lambda: ntp_svm(data, max_seconds=0)):
        with pytest.raises(SolverError, match="not run"):
            call()
    assert not clock.at("make_problem")
    with pytest.raises(InputError, match="max_seconds"):
        separability.is_separable(data, max_seconds=-1.0)
    assert separability.is_separable(data, max_seconds=10.0)
    assert ntp_svm(data, max_seconds=10.0).status == Status.OPTIMAL


def test_is_separable_begins_no_route_after_the_deadline(clock, monkeypatch):
    """The candidate's projection and scan (tried after the span pair certificate, which decides nothing here) cost
    5 s of a 2 s limit: the pair LPs and the iterative routes are not begun and the verdict is undecided, naming the
    stage; negative control: with 10 s the pair LPs run."""
    from embgeo.errors import SolverError

    data = planted(60, 12, 5, seed=0)
    W = np.zeros((data.V, data.d))  # no margin at all: the candidate decides nothing
    spy(monkeypatch, clock, separability, "pair_farkas")
    spy(monkeypatch, clock, separability, "separable_from_candidate", cost=5.0)
    spy(monkeypatch, clock, separability, "pair_lp_farkas")
    with pytest.raises(SolverError, match="before the pair LPs"):
        separability.is_separable(data, candidate=W, max_seconds=2.0)
    assert [name for name, _ in clock.log] == ["pair_farkas", "separable_from_candidate"]
    separability.is_separable(data, candidate=W, max_seconds=10.0)
    assert len(clock.at("pair_lp_farkas")) == 1


def test_ntp_svm_returns_the_certificate_when_no_time_is_left_for_its_solver(clock, monkeypatch):
    """The warm start separates (the planted decoder) but its check took 5 s of a 2 s limit: the ALM is not started;
    the result is the certified separator, status time_limit, relative gap 1 (no dual point); negative control: with
    time left the ALM runs and reaches the optimum."""
    data = planted(60, 12, 5, seed=0)
    warm = _planted_decoder(12, 5, 0)
    spy(monkeypatch, clock, S, "separable_from_candidate", cost=5.0)
    spy(monkeypatch, clock, A.SVMALM, "solve", event="alm")
    res = ntp_svm(data, method="alm", warm_start=warm, max_seconds=2.0)
    assert not clock.at("alm") and res.status == Status.TIME_LIMIT
    assert res.residuals["duality_gap"] == 1.0
    assert kesler_values(data, res.W).min() == pytest.approx(1.0, abs=1e-9)
    res = ntp_svm(data, method="alm", warm_start=warm, max_seconds=100.0)
    assert len(clock.at("alm")) == 1 and res.status == Status.OPTIMAL


def test_dense_dual_begins_no_farkas_completion_after_the_deadline(clock, monkeypatch):
    """Non-separable data, dense dual: a check past the deadline ends the solve (time_limit) without the Farkas
    completion, which at m = 10,000 was 17 s of the 1 ms it was given; negative control: with time, it completes
    one and proves infeasibility."""
    data = synthetic(30, 8, 2, 3, seed=0)  # d = 2 ≪ m: not separable, a Farkas matrix at the first check
    pb = _problem(data)
    assert not separability.is_separable(data, method="lp")  # the premise: these data are not separable
    solver = D.SVMDual(pb.K, pb.groups.pattern, pb.groups.size)
    spy(monkeypatch, clock, D, "project_dual_dense", cost=1.0, event="iteration")
    spy(monkeypatch, clock, solver, "_infeasibility")
    out = solver.solve(tol=1e-12, check_every=1000, max_iter=10**6, max_seconds=3.5)
    assert out.status == Status.TIME_LIMIT and not clock.at("_infeasibility")
    solver = D.SVMDual(pb.K, pb.groups.pattern, pb.groups.size)
    spy(monkeypatch, clock, solver, "_infeasibility")
    out = solver.solve(tol=1e-12, check_every=5, max_iter=10**6, max_seconds=10**6)
    assert out.status == Status.INFEASIBLE and clock.at("_infeasibility")


def test_the_probe_leaves_its_solvers_to_say_not_run(monkeypatch):
    """measure's --max-seconds is a wall through the solvers' own: when separability used up the time (undecided), the
    NTP-SVM is called with none left and builds nothing ('not run', no ALM step); negative control: with time left
    it runs."""
    import time as _time

    from embgeo.errors import SolverError
    from embgeo.ntp import theory
    from embgeo.ntp.analysis.analyze import analyze as measure

    data = synthetic(12, 10, 6, 2, seed=3)
    W = np.random.default_rng(0).standard_normal((data.V, data.d))
    alm = []
    real = A.SVMALM.solve
    monkeypatch.setattr(A.SVMALM, "solve", lambda self, **kw: alm.append(1) or real(self, **kw))

    def undecided(*args, max_seconds=None, **kwargs):
        _time.sleep(max_seconds)  # uses up the time it is given
        raise SolverError("is_separable: undecided (test)")

    monkeypatch.setattr(theory, "is_separable", undecided)
    res = measure(data, W, max_seconds=0.5)
    assert "not run" in res.errors["svm"] and not alm and res.svm is None
    monkeypatch.setattr(theory, "is_separable", lambda *a, **k: (_ for _ in ()).throw(SolverError("undecided")))
    res = measure(data, W, max_seconds=60.0)
    assert alm and "svm" not in res.errors


def test_the_probe_with_no_time_for_its_solvers(clock, monkeypatch):
    """A limit spent by the stages before them (a fake clock: the loss's pass costs 1 s of a 0.5 s limit; a real 1 ms
    could be left over on a fast machine) leaves separability and the NTP-SVM undecided, each saying its limit was
    spent, and the cheap measurements still reported."""
    from embgeo.ntp.analysis.analyze import analyze as measure
    from embgeo.ntp.measure import alignment as probe_align

    spy(monkeypatch, clock, probe_align, "blockwise_kl", cost=1.0)
    data = synthetic(12, 10, 6, 2, seed=3)
    W = np.random.default_rng(0).standard_normal((data.V, data.d))
    res = measure(data, W, max_seconds=0.5)
    assert "max_seconds spent" in res.errors["separability"]
    assert "max_seconds spent" in res.errors["svm"]
    assert res.separability is None and res.svm is None and np.isfinite(res.kl_gap)


# == The exact equality solve behind W*, dim F and the projections (issue 38: 41 s at m = 10,000 with no limit) =

def test_equality_factorization_begins_no_step_after_its_deadline(clock, monkeypatch):
    """Each group size's SVDs cost 1 s of a 2.5 s limit: the third size is not begun, and the error names it; with
    no deadline every size is factored (the negative control) and the same system solves."""
    from embgeo.ntp.solvers import equality as E

    from .test_solvers import _frequent_tokens

    K, grp, ctx, w = _frequent_tokens("disjoint")
    sizes = len(np.unique(np.bincount(grp)))
    assert sizes >= 4  # the instance has steps to stop between
    spy(monkeypatch, clock, E.EqualitySystem, "_bucket", cost=1.0)
    with pytest.raises(E.SolverError, match=r"before the SVDs of the tokens in \d+ contexts \(max_seconds spent\)"):
        E.EqualitySystem(K, grp, ctx, w, deadline=clock.now + 2.5)
    assert len(clock.at("_bucket")) == 3  # begun at 0, 1 and 2 s; the fourth would begin at 3 s
    clock.log.clear()
    system = E.EqualitySystem(K, grp, ctx, w)
    assert len(clock.at("_bucket")) == sizes and system.null_space_route


def test_equality_factorization_stops_before_the_null_space_and_the_cholesky(clock, monkeypatch):
    """Past the deadline after the SVDs, the constraints' null space is not begun; past it after the null space,
    the t-system's Cholesky factorization is not."""
    from embgeo.ntp.solvers import equality as E

    from .test_solvers import _frequent_tokens

    K, grp, ctx, w = _frequent_tokens("disjoint")
    spy(monkeypatch, clock, E.EqualitySystem, "_bucket", cost=1.0)
    sizes = len(np.unique(np.bincount(grp)))
    with pytest.raises(E.SolverError, match="before the t-system's assembly"):
        E.EqualitySystem(K, grp, ctx, w, deadline=clock.now + sizes - 0.5)
    monkeypatch.undo()
    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    spy(monkeypatch, clock, E.EqualitySystem, "_constraint_null_space", cost=1.0)
    with pytest.raises(E.SolverError, match="before the t-system's Cholesky factorization"):
        E.EqualitySystem(K, grp, ctx, w, deadline=clock.now + 0.5)
    assert len(clock.at("_constraint_null_space")) == 1


def test_the_probe_gives_the_exact_solve_its_deadline(clock, monkeypatch):
    """A compatibility stage whose factorization would begin past the solvers' deadline is undecided and says so;
    W* is then absent (dim F comes from the tokens' rank bounds where they meet), the alignment (under the whole
    limit, also spent) reports that it could not
    project, and the probe's other numbers are there. Without a limit, the same data give W*."""
    from embgeo.ntp.analysis.analyze import analyze as measure
    from embgeo.ntp.measure import alignment as probe_align
    from embgeo.ntp.solvers import equality as E

    data = synthetic(12, 10, 6, 2, seed=3)
    W = np.random.default_rng(0).standard_normal((data.V, data.d))
    spy(monkeypatch, clock, probe_align, "blockwise_kl", cost=1.0)
    spy(monkeypatch, clock, E.EqualitySystem, "_bucket", cost=1.0)
    res = measure(data, W, max_seconds=1.5)
    assert "the exact equality solve (W*, F)" in res.errors["compatibility"]
    assert "max_seconds spent" in res.errors["compatibility"]
    assert res.compatibility is None and "max_seconds spent" in res.errors["alignment"]
    assert len(clock.at("_bucket")) == 1  # begun at 1 s, before the deadline; nothing after it
    # dim F without the exact solve: the tokens' rank bounds meet here, and give the exact count
    assert res.dim_F == theory.subspace(data).dim and "dim_F" not in res.errors
    assert np.isfinite(res.kl_gap)
    assert measure(data, W).compatibility is not None  # the control: no limit, W* computed


def test_the_probe_keeps_for_the_alignment_what_its_passes_measure(clock, monkeypatch):
    """The solvers get the limit less the alignment's passes with W^mm as timed before them (on W standing in): when
    those cost 1 s of a 1.5 s limit the solvers begin nothing ('max_seconds spent'), and the logits' structure and the
    NTP-margin are there, measured before the solvers; negative control: at 0.1 s the same limit leaves them time and
    they decide the data (separable: d > m)."""
    from embgeo.ntp.analysis.analyze import analyze as measure
    from embgeo.ntp.measure import alignment as probe_align

    data = synthetic(12, 10, 16, 2, seed=3)
    W = np.random.default_rng(0).standard_normal((data.V, data.d))
    spy(monkeypatch, clock, probe_align, "alignment", cost=1.0)
    res = measure(data, W, max_seconds=1.5)
    assert "max_seconds spent" in res.errors["separability"] and res.separability is None
    assert res.logits is not None and np.isfinite(res.alignment["margin"])
    assert len(clock.at("alignment")) == 2  # the stand-in before the solvers, the real one after
    monkeypatch.undo()
    monkeypatch.setattr(time, "perf_counter", clock)
    spy(monkeypatch, clock, probe_align, "alignment", cost=0.1)
    res = measure(data, W, max_seconds=1.5)
    assert "separability" not in res.errors and res.separability


def test_a_costly_candidate_is_tried_after_the_pair_lps(clock, monkeypatch):
    """Where the candidate's scan costs more than CANDIDATE_FIRST_FLOPS (here 0) the pair LPs come before it, and it is
    still tried when they decide nothing; with the default bound this small problem tries it first (the test above)."""
    from embgeo.ntp.theory.separability import RouteOptions

    data = planted(60, 12, 5, seed=0)
    W = np.zeros((data.V, data.d))  # no margin at all: the candidate decides nothing
    spy(monkeypatch, clock, separability, "pair_farkas")
    spy(monkeypatch, clock, separability, "separable_from_candidate")
    spy(monkeypatch, clock, separability, "pair_lp_farkas")
    separability.is_separable(data, candidate=W, route_options=RouteOptions(CANDIDATE_FIRST_FLOPS=0.0))
    assert [name for name, _ in clock.log][:3] == ["pair_farkas", "pair_lp_farkas", "separable_from_candidate"]
