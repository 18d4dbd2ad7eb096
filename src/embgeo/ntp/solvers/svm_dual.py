"""The NTP-SVM (Def. 3) through its dual on a working set of the off-support constraints (:class:`SVMDual`).

In the t-form of :mod:`embgeo.ntp.solvers.constraints`. Notation: K (m × r) the context coordinates, groups g
of tokens with weights n_g and rows x_g ∈ R^r, a pattern Q of pairs (g, j), one scalar t_j per context.

**The NTP-SVM** (:class:`SVMDual`). Its dual, over Ψ ∈ K = {Σ_g Ψ_{gj} = 0, Ψ_{gj} ≤ 0 off the
supports}, is min f(Ψ) = ½ Σ_g ‖ψ_g K‖² / n_g + Σ_off Ψ, with x_g = ψ_g K / n_g. Almost all of the
G × m off-support constraints are inactive, so the dual is solved on a *working set* W of them
(accelerated projected gradient in a group-scaled metric, on the sparse Ψ), a full pass over all
logits adds the violated ones, and the active set is then solved exactly with the equality
solver and accepted only as a KKT point. Every answer is certified on the full problem: a primal
point feasible for all constraints and a dual point of K give the duality gap, and
½‖W‖² − dual ≥ ½‖W − W^mm‖² bounds the distance to W^mm.

**Non-separability** is certified by a Farkas matrix Ψ ∈ K with Σ_off Ψ = −1 and Ψ K ≈ 0: for any
separating (X, t), 0 ≈ Σ_g ψ_g K x_g = Σ Ψ_{gj}(x_gᵀ k_j − t_j) ≥ 1, so every separator has
‖W‖ ≥ 1/‖Ψ H̄‖ (the NTP-margin is at most ‖Ψ H̄‖).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from embgeo.core.deadline import past, time_left
from embgeo.core.status import Status
from embgeo.core.validate import check_options
from embgeo.errors import SolverError, TooLargeError
from embgeo.ntp.solvers.constraints import row_dots
from embgeo.ntp.solvers.dual_set import project_dual, project_dual_dense
from embgeo.ntp.solvers.equality import EqualitySolution, EqualitySystem
from embgeo.ntp.solvers.outcome import ProgressEvent, ProgressFn, SVMOutcome
from embgeo.ntp.solvers.scan import scan_off_support
from embgeo.ntp.solvers.separability_lp import separability_lp
from embgeo.ntp.solvers.svm_alm import TieProjection

#: A Farkas matrix is accepted when ‖Ψ H̄‖ ≤ FARKAS_RTOL · √2 max_j ‖h̄_j‖ (with Σ_off Ψ = −1): every
#: separator would then have an NTP-margin below this fraction of the data's scale.
FARKAS_RTOL = 1e-9


def farkas_scale(K: np.ndarray) -> float:
    """√2 max_j ‖k_j‖ for context coordinates K (m, r): the data's scale in FARKAS_RTOL's acceptance rule."""
    return np.sqrt(2.0) * float(np.max(np.linalg.norm(K, axis=1)))
@dataclass(frozen=True)
class DualOptions:
    """The working-set dual's tuning, as data (:class:`SVMDual` ``options``; :func:`embgeo.ntp.theory.ntp_svm` and
    :func:`embgeo.ntp.theory.is_separable` ``dual_options``): a test or a study passes its own instead of patching the
    module (``DualOptions(DENSE_DUAL_MAX=0)`` forces the working set)."""

    #: Margins ≤ 1 + ACTIVE_RTOL of a near-optimal point form the guessed active set of the exact solve.
    ACTIVE_RTOL: float = 1e-6
    #: Pairs per context added to the working set in one round of the full pass.
    ADD_PER_CONTEXT: int = 8
    #: Up to this many group × context pairs the dual is a dense array (about ten copies are alive).
    DENSE_DUAL_MAX: int = 40_000_000
    #: At most this many off-support pairs go into the LP that certifies a diverging dual.
    LP_MAX_PAIRS: int = 5000
    #: The dense dual tries the exact active-set solve when it costs less than this many iterations.
    POLISH_ITERATIONS: int = 50
    #: The exact active-set solve is first tried at this relative duality gap, then at every 100-fold decrease.
    POLISH_FIRST_GAP: float = 1e-2
    #: Under ``max_seconds``, the full scan that certifies the last candidate is still run when it is expected to end
    #: within this fraction of ``max_seconds`` past the deadline (by the last scan measured); else skipped and said so.
    CERTIFICATE_GRACE: float = 0.05


#: The tuning every solve uses unless given other options.
DEFAULT_OPTIONS = DualOptions()


#: The inner loop's request for an exact active-set solve (a control signal, not a :class:`Status`).
_POLISH = "polish"


class SVMDual:
    """The NTP-SVM in t-form on token groups, solved through its dual on a working set.

    Parameters
    ----------
    K : (m, r) context coordinates.
    support : (G, m) csr 0/1 matrix, row g = the contexts J_g where group g is in the support.
    weights : (G,) n_g, the number of tokens in each group.
    gram : optional (m, m) K Kᵀ (see :class:`EqualitySystem`).
    """

    def __init__(self, K: np.ndarray, support: sp.csr_matrix, weights: np.ndarray, gram: np.ndarray | None = None,
                 options: DualOptions | None = None):
        self.opt = check_options(options, DualOptions)
        self.K, self.gram = K, gram
        self.G, self.m = support.shape
        self.support = support.tocsr()
        self.support.sort_indices()
        self.support_csc = self.support.tocsc()
        self.weights = np.asarray(weights, dtype=np.float64)
        coo = self.support.tocoo()
        self.pg, self.pj = coo.row.astype(np.int64), coo.col.astype(np.int64)  # sorted by (g, j)

        self.EP = TieProjection(K, self.pg, self.pj, self.weights)  # weighted projection onto F⊥
        self._EP1 = None
        self.scale = farkas_scale(K)

    # -- layout of the working set -------------------------------------------------------------
    def _layout(self, wg: np.ndarray, wj: np.ndarray) -> dict:
        """Q = supports ∪ W sorted by (g, j), with per-entry step weights 1/L_g."""
        g = np.concatenate([self.pg, wg])
        j = np.concatenate([self.pj, wj])
        off = np.concatenate([np.zeros(len(self.pg), bool), np.ones(len(wg), bool)])
        order = np.lexsort((j, g))
        g, j, off = g[order], j[order], off[order]
        counts = np.bincount(g, minlength=self.G)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        L = self._group_lipschitz(g, j, ptr, counts)
        return {"g": g, "j": j, "off": off, "ptr": ptr, "order": order, "step": 1.0 / L[g]}

    def _group_lipschitz(self, g, j, ptr, counts) -> np.ndarray:
        """L_g = σ_max(K[J_g ∪ W_g])² / n_g, the Lipschitz constant of ∇f on group g's block."""
        L = np.full(self.G, 1e-300)
        for q in np.unique(counts[counts > 0]):
            groups = np.flatnonzero(counts == q)
            idx = ptr[groups][:, None] + np.arange(q)
            s = np.linalg.svd(self.K[j[idx]], compute_uv=False)[:, 0]
            L[groups] = np.maximum(s * s, 1e-300) / self.weights[groups]
        return L

    def _rows(self, lay: dict, psi: np.ndarray) -> np.ndarray:
        """x_g = ψ_g K / n_g for every group: (G, r)."""
        A = sp.csr_matrix((psi / self.weights[lay["g"]], lay["j"], lay["ptr"]), shape=(self.G, self.m))
        return A @ self.K

    def _objective(self, lay: dict, psi: np.ndarray, X: np.ndarray) -> float:
        """f(Ψ) = ½ Σ_g n_g ‖x_g‖² + Σ_W Ψ (the dual value is −f)."""
        return 0.5 * float(np.sum(self.weights * np.sum(X * X, axis=1))) + float(np.sum(psi[lay["off"]]))

    # -- primal points ---------------------------------------------------------------------------
    def primal_from(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The weighted projection of X onto F⊥ (supports tied): (X̃, t)."""
        Xt, t, _ = self.EP.project(X)
        return Xt, t

    # -- the solver ------------------------------------------------------------------------------
    def solve(self, *, tol: float = 1e-12, max_iter: int = 100_000, check_every: int = 25,
              detect_infeasible: bool = True, separate_only: bool = False, max_seconds: float | None = None,
              progress: ProgressFn | None = None) -> SVMOutcome:
        """Working-set rounds: accelerated projected gradient on the restricted dual, an exact solve on
        the guessed active set, a full pass that adds the violated pairs; until certified.

        ``separate_only``: return as soon as a point separates every constraint (status "separable",
        for :func:`~embgeo.ntp.theory.is_separable`). ``progress(event)`` is called at
        every check with a :class:`~embgeo.ntp.solvers.outcome.ProgressEvent` (gap; working_set, rounds).

        ``max_seconds`` is a wall (issue 38): a check (a tie projection and, in the working-set mode, the full
        scan that certifies its candidate) is forced early enough to end by the deadline, by the costs last
        measured; after the deadline no exact active-set solve, working-set growth or further round begins, and
        the LP of :meth:`_infeasibility` gets the time left as HiGHS's limit.
        """
        deadline = None if max_seconds is None else time.perf_counter() + max_seconds
        self._grace = 0.0 if max_seconds is None else self.opt.CERTIFICATE_GRACE * max_seconds
        self._check_cost = self._scan_cost = 0.0  # measured costs of a check and of a full scan (none yet)
        self.next_polish = self.opt.POLISH_FIRST_GAP
        self._failed_checks, self._next_lp = 0, 4
        if self.G * self.m <= self.opt.DENSE_DUAL_MAX:
            return self._solve_dense(tol=tol, max_iter=max_iter, check_every=check_every,
                                     detect_infeasible=detect_infeasible, separate_only=separate_only,
                                     deadline=deadline, progress=progress)
        lay = self._layout(*self._initial_working_set())
        psi = np.zeros(len(lay["g"]))
        best = SVMOutcome(Status.MAX_ITER)
        while True:
            best.rounds += 1
            best.working_set = int(np.sum(lay["off"]))
            res = self._inner(lay, psi, tol=0.5 if separate_only else tol, max_iter=max_iter - best.iterations,
                              check_every=check_every, detect_infeasible=detect_infeasible, deadline=deadline,
                              progress=progress, best=best)
            psi = res["psi"]
            best.iterations += res["iterations"]
            if res["status"] == Status.INFEASIBLE:
                best.status, best.farkas = Status.INFEASIBLE, res["farkas"]
                return best
            cand = res.get("candidate")  # (X̃, t̃) tied on the supports, working-set margins ≥ 1
            timed_out = res["status"] == Status.TIME_LIMIT
            if cand is not None:
                if not separate_only and not timed_out and not past(deadline):
                    polished = self._polish(lay, *cand, deadline=deadline)
                    if polished is not None and polished.gap <= max(tol, 1e-10):
                        polished.iterations, polished.rounds = best.iterations, best.rounds
                        polished.working_set = best.working_set
                        return polished
                if (deadline is not None and best.X is not None
                        and time.perf_counter() + self._scan_cost > deadline + self._grace):
                    best.status = Status.TIME_LIMIT
                    best.reason = (f"the time limit came before the full scan (about {self._scan_cost:.2g} s) that "
                                   f"would certify round {best.rounds}'s point: the bounds are an earlier round's")
                    return best
                tic = time.perf_counter()
                scan = scan_off_support(cand[0], cand[1], self.K, self.support_csc, below=1.0 - 1e-9,
                                        top=self.opt.ADD_PER_CONTEXT)
                self._scan_cost = time.perf_counter() - tic
                best.check_seconds = self._check_cost + self._scan_cost
                self._offer(best, lay, psi, cand, scan.min_margin)
                if separate_only and scan.min_margin > 0:
                    best.status = Status.SEPARABLE
                    return best
                if scan.groups.size == 0 and res["status"] == Status.OPTIMAL:
                    best.status = Status.OPTIMAL
                    return best
                if timed_out or past(deadline):  # no growth (a new layout) and no further round after the deadline
                    best.status = Status.TIME_LIMIT
                    return best
                if scan.groups.size:
                    lay, psi = self._grow(lay, psi, scan.groups, scan.contexts)
                    continue
            if res["status"] in (Status.TIME_LIMIT, Status.MAX_ITER, Status.STALLED):
                best.status = res["status"]
                return best

    def _solve_dense(self, *, tol, max_iter, check_every, detect_infeasible, separate_only, deadline,
                     progress) -> SVMOutcome:
        """The dual on every off-support pair, Ψ a dense (G, m) array: two GEMMs per iteration (one
        with the m × m Gram when r ≥ m/2). Used when the off-support pairs are few enough to store;
        with rank H̄ close to m most of them are active and a working set would not save anything."""
        K, n = self.K, self.weights
        off = self.support.toarray() == 0
        offf = off.astype(np.float64)
        gram = (self.gram if self.gram is not None else K @ K.T) if 2 * K.shape[1] >= self.m else None
        w = n / max(_sigma_max(K) ** 2, 1e-300)  # 1/L_g, L_g = σ_max(K)²/n_g
        wcol, inv_n = w[:, None], (1.0 / n)[:, None]
        iteration_flops = 2.0 * self.G * self.m * (self.m if gram is not None else 2 * K.shape[1])

        def gradient_step(Psi):
            """Ψ − w ∘ ∇f(Ψ), ∇f = logits of x = Ψ K / n plus 1 off the supports (in place where possible)."""
            A = Psi * inv_n
            Z = A @ gram if gram is not None else (A @ K) @ K.T
            Z += offf
            Z *= wcol
            return np.subtract(Psi, Z, out=Z)

        x = np.zeros((self.G, self.m))
        y, tk, last, tau = x.copy(), 1.0, x.copy(), None
        best = SVMOutcome(Status.MAX_ITER, working_set=int(off.sum()), rounds=1, mode="dense")
        best_x = None
        gaps: list[tuple[int, float]] = []  # (iteration, relative gap) at the checks
        next_check = check_every
        stop_at = deadline  # a check is forced from here on: the deadline less the last check's cost
        for it in range(1, max_iter + 1):
            x_new, tau = project_dual_dense(gradient_step(y), w, off, tau)
            step = np.subtract(x_new, x, out=x)  # x is not needed any more: reuse its memory
            y -= x_new
            if np.dot(np.einsum("ij,ij->i", y, step), 1.0 / w) > 0:  # adaptive restart: ⟨y − x⁺, x⁺ − x⟩ > 0
                tk, y = 1.0, x_new.copy()
            else:
                t_next = 0.5 * (1 + np.sqrt(1 + 4 * tk * tk))
                step *= (tk - 1) / t_next
                y = np.add(x_new, step, out=y)
                tk = t_next
            x = x_new
            # a check (and with it the certified best point) as soon as the time is up, not at the next check: from
            # the deadline less the last check's cost on, so that it ends by the deadline
            if it < next_check and it != max_iter and not (stop_at is not None and time.perf_counter() > stop_at):
                continue
            next_check = it + _check_interval(gaps, check_every, tol)
            best.iterations = it
            tic = time.perf_counter() if deadline is not None else 0.0
            Xd = (x / n[:, None]) @ K
            dual = -(0.5 * float(np.sum(n * np.sum(Xd * Xd, axis=1))) + float(np.sum(x[off])))
            Xp, tp = self.primal_from(Xd)
            gamma = scan_off_support(Xp, tp, K, self.support_csc).min_margin
            timed_out = False
            if deadline is not None:
                now = time.perf_counter()
                timed_out = tic > stop_at or now > deadline
                best.check_seconds = now - tic
                stop_at = deadline - best.check_seconds
            if progress is not None:
                progress(ProgressEvent("dual", it, best.gap, {"restricted_margin": gamma, "dual": dual,
                                                             "working_set": best.working_set, "rounds": 1}))
            if not gamma > 0:
                if detect_infeasible and not timed_out:  # (no Farkas completion begins after the deadline)
                    gi, ji = np.nonzero(off & (x < last))
                    far = self._infeasibility(gi, ji, (last - x)[gi, ji], deadline)
                    if far is not None:
                        best.status, best.farkas = Status.INFEASIBLE, far
                        return best
                last = x.copy()
                if timed_out:
                    best.status = Status.TIME_LIMIT
                    return _with_dual_point(best, best_x)
                continue
            last = x.copy()
            Xp, tp = Xp / gamma, tp / gamma
            primal = 0.5 * float(np.sum(n * np.sum(Xp * Xp, axis=1)))
            if primal < best.primal:
                best.X, best.t, best.primal = Xp, tp, primal
            if dual > best.dual:
                best.dual, best_x = dual, x.copy()
            if separate_only:
                best.status = Status.SEPARABLE
                return _with_dual_point(best, best_x)
            gap = best.gap
            if gap <= tol:
                best.status = Status.OPTIMAL
                return _with_dual_point(best, best_x)
            if gap <= self.next_polish and not timed_out:  # (no exact solve begins after the deadline)
                self.next_polish = gap / 100
                # Guessed active set: the support of the dual point, and the tight pairs of the primal one.
                # Worth it when its (about three) rounds cost less than POLISH_ITERATIONS iterations;
                # the cost grows with the set, so the dual support alone may already rule it out
                # (and spare the GEMM of the tight pairs).
                budget = self.opt.POLISH_ITERATIONS * iteration_flops
                in_dual = off & (x < -1e-9 * np.max(np.abs(x)))
                ag = np.nonzero(in_dual)[0]
                if 3 * self._polish_cost(ag) <= budget:
                    ag, aj = np.nonzero(in_dual | (off & (tp[None, :] - Xp @ K.T <= 1.0 + self.opt.ACTIVE_RTOL)))
                if 3 * self._polish_cost(ag) <= budget:
                    polished = self._polish_pairs(ag, aj, deadline=deadline)
                    if polished is not None and polished.gap <= max(tol, 1e-10):
                        polished.iterations, polished.rounds, polished.working_set = it, 1, best.working_set
                        polished.mode = "dense"
                        return polished
            gaps.append((it, gap))
            if timed_out:
                best.status = Status.TIME_LIMIT
                return _with_dual_point(best, best_x)
            if gap < 1e-6 and len(gaps) > 400 and gaps[-1][1] > 0.5 * gaps[-401][1]:
                best.status = Status.STALLED
                return _with_dual_point(best, best_x)
        return _with_dual_point(best, best_x)

    def _initial_working_set(self) -> tuple[np.ndarray, np.ndarray]:
        """The empty group against every context, and each context's strongest competitors under a
        class-mean guess x_g ∝ Σ_{j∈J_g} k_j / ‖k_j‖² tied on the supports (projected onto F⊥)."""
        knorm2 = np.maximum(np.sum(self.K * self.K, axis=1), 1e-300)
        X0 = self.support @ (self.K / knorm2[:, None])
        X0, t0 = self.primal_from(X0)
        scan = scan_off_support(X0, t0, self.K, self.support_csc, below=np.inf, top=4)
        wg, wj = [scan.groups], [scan.contexts]
        empty = np.flatnonzero(np.diff(self.support.indptr) == 0)
        for g in empty:
            wg.append(np.full(self.m, g))
            wj.append(np.arange(self.m))
        return _unique_pairs(np.concatenate(wg), np.concatenate(wj), self.m)

    def _grow(self, lay: dict, psi: np.ndarray, g_new: np.ndarray, j_new: np.ndarray):
        """Add pairs to the working set; the dual point keeps its values (new entries 0 stay in K)."""
        old_w = lay["off"]
        wg = np.concatenate([lay["g"][old_w], g_new])
        wj = np.concatenate([lay["j"][old_w], j_new])
        wg, wj = _unique_pairs(wg, wj, self.m)
        new = self._layout(wg, wj)
        keys_old = lay["g"] * self.m + lay["j"]
        keys_new = new["g"] * self.m + new["j"]
        pos = np.searchsorted(keys_new, keys_old)
        out = np.zeros(len(keys_new))
        out[pos] = psi
        return new, out

    def _inner(self, lay, psi, *, tol, max_iter, check_every, detect_infeasible, deadline, progress, best) -> dict:
        """Accelerated projected gradient on the restricted dual (metric diag(L_g)), adaptive restart."""
        step, off, j = lay["step"], lay["off"], lay["j"]
        x, y, tk = psi.copy(), psi.copy(), 1.0
        last_check = x.copy()
        gaps: list[float] = []
        for it in range(1, max_iter + 1):
            Y = self._rows(lay, y)
            grad = row_dots(Y, self.K, lay["g"], j) + off
            x_new = project_dual(y - step * grad, step, j, off, self.m)
            if np.sum((y - x_new) * (x_new - x) / step) > 0:  # restart (O'Donoghue & Candès)
                tk, y = 1.0, x_new
            else:
                t_next = 0.5 * (1 + np.sqrt(1 + 4 * tk * tk))
                y = x_new + ((tk - 1) / t_next) * (x_new - x)
                tk = t_next
            x = x_new
            # a check as soon as it and the full scan after it would otherwise end past the deadline (last costs)
            stop_at = None if deadline is None else deadline - self._check_cost - self._scan_cost
            if it % check_every and it != max_iter and not (stop_at is not None and time.perf_counter() > stop_at):
                continue
            tic = time.perf_counter() if deadline is not None else 0.0
            X = self._rows(lay, x)
            dual = -self._objective(lay, x, X)
            Xp, tp = self.primal_from(X)
            marg = tp[j[off]] - row_dots(Xp, self.K, lay["g"][off], j[off])
            gamma = float(marg.min()) if marg.size else np.inf
            if progress is not None:
                progress(ProgressEvent("dual", best.iterations + it, best.gap,
                                       {"restricted_margin": gamma, "dual": dual, "working_set": int(np.sum(off)),
                                        "rounds": best.rounds}))
            timed_out = False
            if deadline is not None:
                now = time.perf_counter()
                timed_out = tic > stop_at or now > deadline
                self._check_cost = now - tic
            if not gamma > 0:
                if detect_infeasible and not timed_out:  # (no Farkas completion begins after the deadline)
                    far = self._infeasibility(lay["g"][off], j[off], (last_check - x)[off], deadline)
                    if far is not None:
                        return {"status": Status.INFEASIBLE, "psi": x, "iterations": it, "farkas": far}
                last_check = x.copy()
                if timed_out:
                    return {"status": Status.TIME_LIMIT, "psi": x, "iterations": it}
                continue
            last_check = x.copy()
            if not np.isfinite(gamma):  # no off-support pair in the working set yet
                return {"status": Status.OPTIMAL, "psi": x, "iterations": it, "candidate": (Xp, tp)}
            Xp, tp = Xp / gamma, tp / gamma
            primal = 0.5 * float(np.sum(self.weights * np.sum(Xp * Xp, axis=1)))
            gap = abs(primal - dual) / primal  # (as SVMOutcome.gap: a dual above the primal is no certificate)
            cand = (Xp, tp)
            if gap <= tol:
                return {"status": Status.OPTIMAL, "psi": x, "iterations": it, "candidate": cand}
            if gap <= self.next_polish:  # the active set is usually right long before the gap closes
                self.next_polish = gap / 100
                return {"status": _POLISH, "psi": x, "iterations": it, "candidate": cand}
            gaps.append(gap)
            if timed_out:
                return {"status": Status.TIME_LIMIT, "psi": x, "iterations": it, "candidate": cand}
            if gap < 1e-6 and len(gaps) > 400 and gaps[-1] > 0.5 * gaps[-401]:
                return {"status": Status.STALLED, "psi": x, "iterations": it, "candidate": cand}
        return {"status": Status.MAX_ITER, "psi": x, "iterations": max_iter}

    def _offer(self, best: SVMOutcome, lay, psi, cand, full_min_margin: float) -> None:
        """Keep the best certified pair: a fully feasible primal point and a dual point of K."""
        if not full_min_margin > 0:
            return
        Xp, tp = cand[0] / full_min_margin, cand[1] / full_min_margin
        primal = 0.5 * float(np.sum(self.weights * np.sum(Xp * Xp, axis=1)))
        if primal < best.primal:
            best.X, best.t, best.primal = Xp, tp, primal
        dual = -self._objective(lay, psi, self._rows(lay, psi))
        if dual > best.dual:
            best.dual, best.dual_point = dual, (lay["g"].copy(), lay["j"].copy(), psi.copy())

    def _polish(self, lay: dict, Xc: np.ndarray, tc: np.ndarray, deadline: float | None = None) -> SVMOutcome | None:
        """Exact solve with the working-set pairs that are (nearly) tight at (Xc, tc) as equalities."""
        off = lay["off"]
        wg, wj = lay["g"][off], lay["j"][off]
        act = tc[wj] - row_dots(Xc, self.K, wg, wj) <= 1.0 + self.opt.ACTIVE_RTOL
        return self._polish_pairs(wg[act], wj[act], deadline=deadline)

    def _polish_pairs(self, ag: np.ndarray, aj: np.ndarray, rounds: int = 6,
                      deadline: float | None = None) -> SVMOutcome | None:
        """Solve min ½Σ n_g‖x_g‖² with (6a) and the pairs (ag, aj) tight as equalities; accept it only
        as a KKT point of the full problem (multipliers of the sign of (6b), every margin ≥ 1).

        A guessed active set is usually right up to a few weakly active pairs: pairs whose
        multiplier comes out with the wrong sign are dropped and violated pairs added, and the
        solve repeated (a primal-dual active-set step), at most ``rounds`` times, none begun after ``deadline``.
        """
        for _ in range(rounds):
            if past(deadline):
                return None
            g = np.concatenate([self.pg, ag])
            j = np.concatenate([self.pj, aj])
            c = np.concatenate([np.zeros(len(self.pg)), -np.ones(len(ag))])
            is_off = np.concatenate([np.zeros(len(self.pg), bool), np.ones(len(ag), bool)])
            order = np.lexsort((j, g))
            g, j, c, is_off = g[order], j[order], c[order], is_off[order]
            try:
                system = EqualitySystem(self.K, g, j, self.weights, self.gram)
            except (SolverError, TooLargeError):
                return None
            sol = system.solve(c)
            if not sol.consistent or sol.residuals["equality"] > 1e-9 or sol.residuals["balance"] > 1e-9:
                return None
            lam = sol.lam
            wrong = is_off & (lam > 1e-9 * max(float(np.max(np.abs(lam), initial=0.0)), 1e-300))
            scan = scan_off_support(sol.X, sol.t, self.K, self.support_csc, below=1.0 - 1e-9,
                                    top=self.opt.ADD_PER_CONTEXT)
            if not wrong.any() and scan.min_margin >= 1.0 - 1e-9:
                return self._certified_point(sol, g, j, is_off, system.ptr, scan.min_margin)
            keep = is_off & ~wrong
            ag = np.concatenate([g[keep], scan.groups])
            aj = np.concatenate([j[keep], scan.contexts])
        return None

    def _certified_point(self, sol: EqualitySolution, g, j, is_off, ptr, min_margin: float) -> SVMOutcome:
        """The exact solve as primal point (scaled to margin exactly 1) and its multipliers as dual point."""
        X, t = sol.X / min_margin, sol.t / min_margin
        primal = 0.5 * float(np.sum(self.weights * np.sum(X * X, axis=1)))
        # The multipliers are a dual point: clip rounding-level positive off entries, rebalance.
        psi = np.where(is_off, np.minimum(sol.lam, 0.0), sol.lam)
        resid = np.bincount(j, weights=psi, minlength=self.m)
        first = np.full(self.m, -1)
        first[j[~is_off][::-1]] = np.flatnonzero(~is_off)[::-1]
        psi[first] -= resid
        lay = {"g": g, "j": j, "off": is_off, "ptr": ptr}
        dual = -self._objective(lay, psi, self._rows(lay, psi))
        return SVMOutcome(Status.OPTIMAL, X, t, primal, dual, (g, j, psi), polished=True)

    def _polish_cost(self, ag: np.ndarray) -> float:
        """Flops of the per-group factorizations of an exact solve with the active pairs of groups
        ``ag``: eigendecompositions of q × q Gram blocks when the m × m Gram is kept, else SVDs."""
        q = (np.diff(self.support.indptr) + np.bincount(ag, minlength=self.G)).astype(float)
        r = self.K.shape[1]
        light = q[q <= r]
        per_group = 10 * light**3 if self.gram is not None else 4 * light**2 * r
        return float(np.sum(per_group) + np.sum(4 * q[q > r] ** 2 * r))

    # -- infeasibility -----------------------------------------------------------------------------
    def _infeasibility(self, g: np.ndarray, j: np.ndarray, mu: np.ndarray, deadline: float | None = None):
        """A Farkas matrix from a dual that does not separate, or None.

        μ = the decrease of the off-support dual entries since the last check (the recession
        direction of an unbounded dual, in the limit). First completed by projection
        (:meth:`farkas_from`); when that is not yet exact and the iterates have failed to separate
        at 4, 8, 16, ... consecutive checks, the LP of :func:`separability_lp` is solved on the
        pairs carrying the direction (at most LP_MAX_PAIRS, the heaviest first): a relaxation, so
        s* = 0 there proves the data non-separable, and its dual values are the Farkas weights.
        The LP gets the time left before ``deadline`` (none left: it is not tried).
        """
        self._failed_checks += 1
        keep = mu > 0
        if not keep.any():
            return None
        g, j, mu = g[keep], j[keep], mu[keep]
        far = self.farkas_from(g, j, mu / mu.sum())
        if far is not None or self._failed_checks < self._next_lp:
            return far
        self._next_lp *= 2
        time_limit = time_left(deadline)
        if time_limit == 0.0:
            return None
        order = np.argsort(-mu, kind="stable")[:self.opt.LP_MAX_PAIRS]
        mass = np.cumsum(mu[order])
        order = order[:int(np.searchsorted(mass, (1 - 1e-12) * mass[-1])) + 1]
        # Tie the supports of every context the involved groups follow: a Farkas matrix may balance
        # its columns through the ties of contexts that carry no off-support weight.
        contexts = np.unique(self.support[np.unique(g[order])].indices)
        lp = separability_lp(self.K, self.support, g[order], j[order], contexts=contexts, time_limit=time_limit)
        if lp.status == Status.TIME_LIMIT or lp.separable:
            return None
        return self.farkas_from(g[order], j[order], lp.mu / lp.mu.sum(), accept_any=True)

    def farkas_from(self, wg: np.ndarray, wj: np.ndarray, mu: np.ndarray,
                    accept_any: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
        """Complete μ ≥ 0 (Σμ = 1) on off-support pairs into Ψ ∈ K with the smallest ‖Ψ K‖.

        Ψ = −μ off the supports, plus balancing entries on the supports chosen by the (unweighted)
        projection onto F⊥. Returns (grp, ctx, Ψ, perp = ‖Ψ K‖) if perp ≤ FARKAS_RTOL · scale (or
        always, with ``accept_any``, when another method has decided infeasibility, e.g. an LP).
        """
        keep = mu > 0
        wg, wj, mu = wg[keep], wj[keep], mu[keep]
        if self._EP1 is None:

            self._EP1 = TieProjection(self.K, self.pg, self.pj, np.ones(self.G))
        # Λ⁰: the column sums of −μ compensated on the first support pair of each context.
        colsum = np.bincount(wj, weights=mu, minlength=self.m)
        first = np.full(self.m, -1)
        first[self.pj[::-1]] = np.arange(len(self.pj))[::-1]
        lam0 = np.zeros(len(self.pg))
        lam0[first] = colsum
        A_off = sp.csr_matrix((-mu, (wg, wj)), shape=(self.G, self.m))
        A_sup = sp.csr_matrix((lam0, (self.pg, self.pj)), shape=(self.G, self.m))
        X1 = (A_off + A_sup) @ self.K
        _, _, lam = self._EP1.project(X1)  # the balancing λ on the supports: Ψ K = X1 + λ K, minimal
        g = np.concatenate([self.pg, wg])
        j = np.concatenate([self.pj, wj])
        psi = np.concatenate([lam0 + lam, -mu])
        perp = float(np.linalg.norm(sp.csr_matrix((psi, (g, j)), shape=(self.G, self.m)) @ self.K))  # ‖Ψ K‖
        if perp > FARKAS_RTOL * self.scale and not accept_any:
            return None
        return g, j, psi, perp


def _unique_pairs(g: np.ndarray, j: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    keys = np.unique(g.astype(np.int64) * m + j)
    return keys // m, keys % m


def _check_interval(gaps: list[tuple[int, float]], check_every: int, tol: float) -> int:
    """Iterations to the next check: ``check_every``, or fewer when the linear rate of the gap over
    the last two checks says ``tol`` will be reached sooner (so a solve stops close to where it
    converges instead of up to ``check_every`` iterations later)."""
    if len(gaps) < 2:
        return check_every
    (i0, g0), (i1, g1) = gaps[-2:]
    if not (0 < g1 < g0 and np.isfinite(g0)):
        return check_every
    need = np.log(g1 / tol) / (np.log(g0 / g1) / (i1 - i0))
    return int(min(check_every, max(3, np.ceil(need))))


def _sigma_max(K: np.ndarray) -> float:
    """σ_max(K) by Lanczos on K Kᵀ or Kᵀ K (the smaller), with a relative margin of 1e-6 upward."""
    from scipy.sparse.linalg import eigsh

    small = K.T if K.shape[0] >= K.shape[1] else K
    n = small.shape[0]
    if n <= 64:
        return float(np.linalg.norm(K, 2))
    op = LinearOperator((n, n), matvec=lambda v: small @ (small.T @ v), dtype=np.float64)
    lam = eigsh(op, k=1, which="LA", tol=1e-10, return_eigenvectors=False)[0]
    return float(np.sqrt(lam * (1 + 1e-6)))


def _with_dual_point(out: SVMOutcome, Psi: np.ndarray | None) -> SVMOutcome:
    """Attach a dense dual point (G, m) as its nonzero pairs."""
    if Psi is not None:
        g, j = np.nonzero(Psi)
        out.dual_point = (g, j, Psi[g, j])
    return out
