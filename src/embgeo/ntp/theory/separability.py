"""NTP-separability (Def. 2, eq. 6): is there a W ∈ F⊥ with every off-support margin (6b) ≥ 1? Decided with a
certificate either way: a separating W, or a Farkas matrix Ψ.

Routes, cheapest first: Lemma 1's closed form when rank H̄ = m, the pair certificates of
:mod:`embgeo.ntp.solvers.pair_certificates` when rank H̄ < m, the LP of :mod:`embgeo.ntp.solvers.separability_lp` on
small problems, the squared hinge of :mod:`embgeo.ntp.solvers.squared_hinge` otherwise (a real LM's size); the NTP-SVM
dual of :mod:`embgeo.ntp.solvers.svm_dual` on request. :class:`Problem` is what these routes
and the NTP-SVM (:mod:`embgeo.ntp.theory.svm`) share for one dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from embgeo.core.deadline import deadline_of, past, stop_if_spent, time_left
from embgeo.core.status import Status, certified_dict
from embgeo.core.validate import check_dense_size, check_options
from embgeo.errors import InputError, SolverError
from embgeo.ntp.data import NTPData, check_W
from embgeo.ntp.solvers.constraints import Coordinates, TokenGroups, coordinates, row_dots, token_groups
from embgeo.ntp.solvers.outcome import ProgressFn
from embgeo.ntp.solvers.pair_certificates import PairOptions, pair_farkas, pair_lp_farkas
from embgeo.ntp.solvers.scan import scan_off_support
from embgeo.ntp.solvers.separability_lp import separability_lp
from embgeo.ntp.solvers.svm_dual import SVMDual
from embgeo.ntp.theory.subspace import Subspace, context_gram
from embgeo.ntp.units import unit_scale

#: Tolerance on the margins of a separability / SVM certificate (target margin is 1).
MARGIN_ATOL = 1e-7


class SeparabilityResiduals(TypedDict, total=False):
    """:attr:`Separability.residuals`: of the certificate W when separable, of the Farkas matrix when not."""

    min_margin: float  # smallest (6b) margin of W (1.0 after scaling)
    equality: float  # largest (6a) violation of W
    perp_norm: float  # ‖Ψᵀ H̄‖ of the Farkas matrix (an upper bound on every separator's NTP-margin)
    iterations: int  # dual iterations that found the Farkas matrix (the NTP-SVM dual route)
    lp_value: float  # the LP's optimal s* (the LP route)


@dataclass
class Separability:
    """Result of :func:`is_separable`; truthy iff the data are NTP-separable (Def. 2).

    Attributes
    ----------
    separable : bool
    W : (V, d) array or None
        A certificate W^d ∈ F⊥ with every (6b) margin ≥ 1 (checked on all constraints), when separable.
    farkas : scipy.sparse.csr_matrix (m, V) or None
        When not separable: weights μ ≥ 0 on off-support pairs (j, v ∉ S_j), summing to 1.
    certificate : scipy.sparse.csr_matrix (m, V) or None
        The complete Farkas matrix Ψ: −μ off the supports plus balancing entries on them, every
        column summing to 0, with Ψᵀ H̄ ≈ 0 (per token: Σ_j Ψ_{j,v} h̄_j ≈ 0). For any W ∈ F⊥ with all
        margins ≥ 1, 0 ≈ ⟨ΨᵀH̄, W⟩ = Σ μ_{j,v} · margin_{j,v} ≥ 1: the data's NTP-margin is at most
        ``residuals["perp_norm"]`` = ‖ΨᵀH̄‖ ≥ ‖P_⊥(Σ μ_{j,v}(e_{z_j} − e_v) h̄_jᵀ)‖.
    residuals : dict
        For W: ``min_margin`` and ``equality`` (max |A_eq W|); for the Farkas matrix: ``perp_norm``.
    method : str
    """

    separable: bool
    W: np.ndarray | None
    farkas: sp.csr_matrix | None
    residuals: SeparabilityResiduals
    method: str
    certificate: sp.csr_matrix | None = None

    def __bool__(self) -> bool:
        return self.separable

    @property
    def status(self) -> Status:
        """SEPARABLE when ``W`` separates, INFEASIBLE when the Farkas matrix proves nothing does
        (:class:`~embgeo.core.status.Certified`)."""
        return Status.SEPARABLE if self.separable else Status.INFEASIBLE

    def to_dict(self) -> dict:
        """Status, method and residuals as strict JSON (the arrays are not in it)."""
        proof = ("a separating W with every (6b) margin ≥ 1" if self.separable else
                 "a Farkas matrix Ψ (−μ off the supports, Ψᵀ H̄ ≈ 0)")
        return certified_dict(self, proof, separable=self.separable)




@dataclass(frozen=True)
class RouteOptions:
    """How :func:`is_separable` (and :func:`~embgeo.ntp.theory.svm.ntp_svm`'s separability step) chooses and bounds its
    routes, as data: the problem carries them (:func:`make_problem`), and a test or a study passes its own
    (``is_separable(route_options=RouteOptions(LP_SMALL_NNZ=0))``) instead of patching the module."""

    #: Up to this many nonzeros in the separability LP, "auto" asks HiGHS first.
    LP_SMALL_NNZ: int = 100_000
    #: The squared-hinge route gives up (undecided) after this many stalls that neither Newton nor the LP decided.
    MAX_STALLS: int = 3
    #: Certificate ties are refined (projected onto the ties again, then rescaled to margin 1) while they are off by
    #: more than TIE_TARGET, at most TIE_ROUNDS times. Scaling by 1/γ magnifies the projection's rounding, and one
    #: projection gains a factor of 60–100 on a real LM's states (SmolLM2, m = 10,000): one certificate's ties were off
    #: by 7.8e-8, then 3.1e-9, 6.3e-11, 1.0e-12; another's (2026-11-29) by 3.4e-4, then 5.7e-6, 6.3e-8, 9.5e-10,
    #: 1.8e-11 (about 1 s each with its scan), where three rounds had left a third run at 4.5e-9, over issue 38's
    #: 1e-9. The rounds end at TIE_TARGET, so the bound costs nothing where fewer do.
    TIE_TARGET: float = 1e-10
    TIE_ROUNDS: int = 8
    #: Ties still off by more than TIE_TARGET after those rounds are projected exactly (a QR of the tie rows:
    #: :func:`~embgeo.ntp.solvers.svm_ipm.project_on_ties`) where its 2 G r n_E² flops (n_E the support pairs past each
    #: context's first) are at most this. SmolLM2's states relaxed to 10 tokens (G r = 6,336, 1,088 ties, a group tight
    #: in 915 contexts > r = 576: the weighted projection's systems are singular there) kept the squared hinge's
    #: separator at ties 1.4e-8 after the rounds, over issue 38's 1e-9 (measured 2026-11-30). E is dense: at most
    #: EXACT_TIE_ENTRIES doubles (256 MB; there 6.9M).
    EXACT_TIE_FLOPS: float = 1e11
    EXACT_TIE_ENTRIES: int = 32_000_000
    #: A candidate W (:func:`decide_cheaply`) is tried before the pair LPs where its scan costs at most this many
    #: flops (2 m V r: the logits of every context and token, tokens being their own groups there), after them
    #: otherwise. Why: the pair LPs are bounded by ``pair.SECONDS`` and decide a real LM's samples in about a second
    #: since their Newton steps (2026-11-30), where a pretrained head never separates and its scan took ~17 s of the
    #: probe's 18.5 s of separability at m = 10,000 and ~50 s of 55.9 s at m = 30,000 (SmolLM2, one thread); a
    #: trained decoder on small data is still tried first.
    CANDIDATE_FIRST_FLOPS: float = 1e10
    #: The pair certificates' bounds (groups, pairs, seconds).
    pair: PairOptions = field(default_factory=PairOptions)


@dataclass
class Problem:
    """What the separability and SVM solvers share for one dataset."""

    data: NTPData  # in unit scale (:func:`unit_scale`): H̄ / scale
    coords: Coordinates
    groups: TokenGroups
    scale: float = 1.0
    options: RouteOptions = field(default_factory=RouteOptions)

    @property
    def K(self) -> np.ndarray:
        return self.coords.K

    def token_w(self, Xg: np.ndarray) -> np.ndarray:
        """W (V, d) in the caller's units from group rows (G, r) in unit scale."""
        return self.caller_w(self.groups.expand(Xg))

    def caller_w(self, X: np.ndarray) -> np.ndarray:
        """W (V, d) in the caller's units from token rows (V, r) in unit scale (logits X Kᵀ equal W H̄ᵀ)."""
        check_dense_size("W (V, d)", (self.data.V, self.data.d))
        return self.coords.to_w(X) / self.scale


def make_problem(data: NTPData, subspace_: Subspace | None, options: RouteOptions | None = None) -> Problem:
    """The problem the separability and SVM solvers share; ``options``: :class:`RouteOptions` (defaults if None)."""
    options = check_options(options, RouteOptions)
    if np.all(data.support_sizes == data.V):
        raise InputError("probs: every context has full support (S_j = V for all j), so there are no "
                         "separability constraints (6b) and W^mm is undefined; the paper assumes some S_j < V")
    unit, scale = unit_scale(data)
    coords = subspace_.coords if subspace_ is not None else coordinates(unit.embeddings)
    return Problem(unit, coords, token_groups(data), scale, options)


def is_separable(data: NTPData, subspace_: Subspace | None = None, *, method: str = "auto",
                 max_iter: int = 20_000, max_seconds: float | None = None,
                 progress: ProgressFn | None = None,
                 candidate: ArrayLike | None = None, hinge_options=None, dual_options=None,
                 route_options: RouteOptions | None = None) -> Separability:
    """Check NTP-separability (Def. 2): ∃ W with (6a) A_eq(W) = 0 and (6b) A_in(W) ≥ 1?

    * rank H̄ = m (any method): separable (Lemma 1's argument, valid for d ≥ m): the logits equal
      to 1 on the supports and 0 elsewhere are reached by X = Z K⁻ᵀ; checked on every constraint.
    * rank H̄ = r < m: first a *pair certificate* — two token groups u, v in the supports of more
      than r common contexts whose embeddings span R^r must have equal rows (their logits are tied
      there), so a context i with u ∈ S_i, v ∉ S_i cannot give v a margin: Ψ = ±(e_i − Σ β_j e_j)
      with k_i = Σ_j β_j k_j is a Farkas matrix. Cheap, and it decides real text with d ≪ m.
      Then a *pair LP* (:func:`~embgeo.ntp.solvers.pair_certificates.pair_lp_farkas`) on the largest groups: any
      separator makes u = x_a − x_b an r-dimensional separator of a's contexts from b's (tied where both follow),
      whose infeasibility is an LP of r + 1 rows; its Farkas weights are a Farkas matrix of the
      whole problem. Each pair is first decided by semismooth Newton steps on its squared hinge in r unknowns
      (:func:`~embgeo.ntp.solvers.pair_certificates.pair_hinge`; HiGHS only where they do not settle). It decides
      real text whose tokens share few contexts (V in the thousands) in milliseconds per pair, and SmolLM2's own
      random 10,000 contexts of the Vim documentation (groups of 425 and 905 contexts, r = 576) in 0.4 s, within
      ``max_seconds``.
    * ``method="lp"``: the LP max s s.t. (6a), x_gᵀk_j − t_j + s ≤ 0 off the supports, s ≤ 1, over
      token groups, solved by HiGHS; s* = 1 separable, s* = 0 not (its dual values give μ).
    * ``method="hinge"``: L-BFGS on the squared hinge φ ≥ 0 of :mod:`~embgeo.ntp.solvers.squared_hinge` (zero exactly
      at the separators) in whitened coordinates, until an iterate, tie-projected, separates every
      constraint, or φ stalls above zero and the LP on the pairs it leaves violated is infeasible (its
      duals are a Farkas matrix of the whole problem); within ``max_seconds`` (then :class:`SolverError`).
    * ``method="dual"``: the NTP-SVM dual on a working set (:class:`~embgeo.ntp.solvers.svm_dual.SVMDual`)
      until a point separates every constraint or a Farkas matrix appears; at most ``max_iter``
      iterations and ``max_seconds`` seconds (then :class:`SolverError`).
    * ``method="auto"``: the closed form / pair certificate above when they decide, else "lp" when
      the LP has at most ``LP_SMALL_NNZ`` nonzeros, else "hinge", and "dual" with the time left where the hinge gives
      up undecided (:func:`_hinge_then_dual` says why). An explicit method skips
      the shortcuts (an independent check of Lemma 1, e.g.).
    * ``candidate`` (V, d), with "auto" only: a W to try, e.g. a trained decoder — first when rank H̄ = m, after the
      span pair certificate and before the pair LPs when r < m (:func:`decide_cheaply`). P_⊥(W) ties
      every support exactly; if its smallest (6b) margin γ is > 0, P_⊥(W)/γ is the certificate
      (O(projection + m V r)). Otherwise the routes above decide as without it.
    * ``hinge_options``, ``dual_options``: the squared hinge's and the dual's tuning
      (:class:`~embgeo.ntp.solvers.squared_hinge.HingeOptions`, :class:`~embgeo.ntp.solvers.svm_dual.DualOptions`;
      their defaults when None), for a study of a route or a test that forces one of its paths.
    """
    if method != "auto" and method not in SEPARABILITY_ROUTES:
        raise InputError(f"method: expected one of {('auto', *SEPARABILITY_ROUTES)}, got {method!r}")
    if candidate is not None and method != "auto":
        raise InputError(f"candidate: only used with method='auto' (an explicit method={method!r} is the independent "
                         "route), got both")
    if candidate is not None:
        candidate = check_W(data, candidate)
    deadline = deadline_of(max_seconds, "is_separable")
    stop_if_spent(deadline, "is_separable", "started")
    pb = make_problem(data, subspace_, route_options)
    if method == "auto":
        stop_if_spent(deadline, "is_separable", "the pair certificates")
        sep = decide_cheaply(pb, time_left(deadline), candidate)
        if sep is not None:
            return sep
        if lp_is_small(pb):
            method = "lp"
        else:
            return _hinge_then_dual(pb, deadline, max_iter, progress, hinge_options, dual_options)
    stop_if_spent(deadline, "is_separable", f"the {method} route")
    return SEPARABILITY_ROUTES[method](RouteRequest(pb, deadline, max_seconds, max_iter, progress, hinge_options,
                                                    dual_options))


@dataclass
class RouteRequest:
    """What :func:`is_separable` hands the route of its ``method`` (the one interface of
    :data:`SEPARABILITY_ROUTES`): the problem, the deadline (perf_counter seconds; None for none) and the limit it
    came from, the iteration limit, ``progress`` and the routes' options (None: their defaults)."""

    pb: Problem
    deadline: float | None
    max_seconds: float | None
    max_iter: int
    progress: ProgressFn | None
    hinge_options: object | None
    dual_options: object | None


def _route_lp(req: RouteRequest) -> Separability:
    sep = separability_by_lp(req.pb, time_left(req.deadline))
    if sep is None:
        limit = "" if req.max_seconds is None else f" ({req.max_seconds:.3g} s)"
        raise SolverError(f"is_separable: undecided: the LP reached its time limit{limit}, or the point HiGHS returned "
                          "as separating does not separate once tied exactly (an ill-conditioned LP)")
    return sep


def _route_hinge(req: RouteRequest) -> Separability:
    return separability_by_hinge(req.pb, time_left(req.deadline), req.progress, req.hinge_options)


def _route_dual(req: RouteRequest) -> Separability:
    sep, out = _separability_by_dual(req.pb, time_left(req.deadline), req.max_iter, req.progress, req.dual_options)
    if sep is None:
        raise SolverError(f"is_separable: the dual iterations neither separated nor found a Farkas matrix "
                          f"({out.status} after {out.iterations} iterations); use method='hinge' or method='lp', "
                          "or allow more time")
    return sep


#: The separability routes by ``method`` name, each a function (:class:`RouteRequest`) → :class:`Separability`
#: (a separator or a Farkas certificate; :class:`SolverError` when undecided). "auto" tries the cheap certificates
#: and then chooses among them. A new route is one function and one entry here (docs/internals/architecture.rst).
SEPARABILITY_ROUTES = {"hinge": _route_hinge, "dual": _route_dual, "lp": _route_lp}

#: The ``method`` names :func:`is_separable` accepts (``embgeo ntp probe --separability-method``).
SEPARABILITY_METHODS = ("auto", *SEPARABILITY_ROUTES)


def check_separability_method(method: str, name: str = "method") -> None:
    """Refuse a route :func:`is_separable` does not have: "auto" or a name of :data:`SEPARABILITY_ROUTES` (read
    when called, so a route registered later is accepted). The check of the phase sweep,
    :func:`~embgeo.ntp.analysis.analyze.analyze` and the probe (before its forward passes), made before their work
    reaches ``is_separable``; ``name`` is the argument's name in the error."""
    if method != "auto" and method not in SEPARABILITY_ROUTES:
        raise InputError(f"{name}: expected one of {', '.join(('auto', *SEPARABILITY_ROUTES))}, got {method!r}")


def _separability_by_dual(pb: Problem, max_seconds: float | None, max_iter: int,
                          progress: ProgressFn | None, options=None):
    """The NTP-SVM dual in its separability-only mode: (a Farkas or separating :class:`Separability`, or None when it
    decided nothing within ``max_seconds`` / ``max_iter``; the solver's outcome). ``options``: its
    :class:`~embgeo.ntp.solvers.svm_dual.DualOptions` (the defaults when None)."""
    solver = SVMDual(pb.K, pb.groups.pattern, pb.groups.size, context_gram(pb.coords), options)
    out = solver.solve(tol=1e-12, max_iter=max_iter, separate_only=True, max_seconds=max_seconds, progress=progress)
    if out.status == Status.INFEASIBLE:
        return farkas_result(pb, out.farkas, "NTP-SVM dual: Farkas direction"), out
    if out.X is None:
        return None, out
    return separable_result(pb, out.X, out.t, "NTP-SVM dual: separating point"), out


def separable_from_candidate(pb: Problem, W: np.ndarray) -> Separability | None:
    """P_⊥(W)/γ when γ, the smallest (6b) margin of P_⊥(W), is > 0 and its (6a) ties are exact; else None.

    Tokens are their own groups here (the rows of a given W need not be equal within a group). P_⊥ in
    coordinates is the least change of the rows that ties every support — the unweighted
    :class:`~embgeo.ntp.solvers.svm_alm.TieProjection` (F⊥ is the set of W whose supports tie): no equality
    system, which at m = 100,000 would have needed 9 GiB for the frequent tokens' contexts. It moves only the rows of
    tokens in some support, so it runs on those rows alone; a token in no support enters only through its logits,
    t_j − max_v x_vᵀk_j ≥ γ, which scale with the certificate (:func:`largest_logits`). Issue 38: on Gemma 3
    (V = 262,144) the projection of all V rows held several V × r copies, 5.3 GiB above the rest of the probe."""
    from embgeo.ntp.solvers.scan import largest_logits
    from embgeo.ntp.solvers.svm_alm import TieProjection

    data = pb.data
    coo = data.probs.tocoo()
    seen = np.unique(coo.col)  # the tokens in some support: the only rows the ties move
    tokens, contexts = np.searchsorted(seen, coo.col).astype(np.int64), coo.row.astype(np.int64)
    X_all = pb.coords.to_coords(W)  # (V, r)
    projection = TieProjection(pb.K, tokens, contexts, np.ones(seen.size))
    X, t, _ = projection.project(X_all[seen])  # (|seen|, r), t: each context's tie
    # the CSR arrays of probs (m, V) read as CSC are its transpose: column j lists the tokens of S_j
    support = sp.csc_matrix((np.ones(data.probs.nnz), np.searchsorted(seen, data.probs.indices), data.probs.indptr),
                            shape=(seen.size, data.m))
    if not scan_off_support(X, t, pb.K, support).min_margin > 0:
        return None  # no margin among the seen tokens already: the scan of the others (O(V m r)) would not help
    outside = largest_logits(X_all, pb.K, exclude=seen)  # (m,): the largest logit of a token in no support
    X, t, eq, gamma, scale = _scaled_and_refined(pb, tokens, contexts, np.ones(seen.size), support, X, t, projection,
                                                 outside=outside)
    if not gamma > 0 or eq > MARGIN_ATOL:
        return None  # no margin, or the projection's rounding is not small against it: decide otherwise
    X_all = X_all * scale  # a copy: to_coords may return W itself
    X_all[seen] = X
    return Separability(True, pb.caller_w(X_all), None, {"min_margin": 1.0, "equality": eq},
                        "the given candidate projected onto F⊥, scaled to margin 1")


def decide_cheaply(pb: Problem, max_seconds: float | None = None,
                   candidate: np.ndarray | None = None) -> Separability | None:
    """``candidate`` (V, d; a W to try as the separator, :func:`separable_from_candidate`), then Lemma 1's closed
    form when rank H̄ = m; when r < m a span pair certificate, then the candidate and the pair LPs — the candidate
    first only where its scan is cheap (``CANDIDATE_FIRST_FLOPS`` of the problem's :class:`RouteOptions`); else None.

    Why the candidate after the span pairs when r < m: it costs a tie projection and a scan of every (context, token)
    pair (at m = 100,000 and V = 49,152 several minutes), the span pairs a least-squares solve per heavy pair (0.3 s
    there, where they decided: not separable, which no candidate can change)."""
    deadline = deadline_of(max_seconds, "is_separable (pair certificates)")
    if pb.coords.rank == pb.data.m:
        sep = None if candidate is None else separable_from_candidate(pb, candidate)
        if sep is not None:
            return sep
        Z = pb.groups.pattern.toarray()  # (G, m): logit 1 on the supports, 0 off them
        X = pb.coords.solve_logits(Z)  # X Kᵀ = Z
        sep = separable_result(pb, X, np.ones(pb.data.m), "closed form (rank H = m, Lemma 1)")
        if sep and sep.residuals["equality"] <= MARGIN_ATOL:
            return sep
        return None  # K too ill-conditioned for the closed form: decide numerically
    pair = pair_farkas(pb.K, pb.coords.rank, pb.groups.pattern, max_seconds=max_seconds, options=pb.options.pair)
    if pair is not None:
        return farkas_result(pb, pair, "pair of token groups tied on more contexts than their span")
    first = candidate is not None and 2.0 * pb.data.m * pb.data.V * pb.coords.rank <= pb.options.CANDIDATE_FIRST_FLOPS
    if first:
        stop_if_spent(deadline, "is_separable", "the candidate was tried")
        sep = separable_from_candidate(pb, candidate)
        if sep is not None:
            return sep
        stop_if_spent(deadline, "is_separable", "the pair LPs")
    pair = pair_lp_farkas(pb.K, pb.coords.rank, pb.groups.pattern, max_seconds=time_left(deadline),
                          options=pb.options.pair)
    if pair is not None:
        return farkas_result(pb, pair, "pair of token groups whose contexts no direction separates (pair LP)")
    if candidate is not None and not first:
        stop_if_spent(deadline, "is_separable", "the candidate was tried")
        return separable_from_candidate(pb, candidate)
    return None


def separable_result(pb: Problem, X: np.ndarray, t: np.ndarray, method: str) -> Separability:
    """Certificate W from group rows X tied on the supports: scaled so that its smallest margin is 1.

    ``residuals["min_margin"]`` is the smallest (6b) margin after scaling (one full pass before
    it), ``equality`` the largest (6a) violation |x_zᵀk_j − t_j| on the supports. Ties off by more than TIE_TARGET
    after scaling are refined by up to TIE_ROUNDS further weighted projections (:func:`_scaled_and_refined`).
    """
    coo = pb.groups.pattern.tocoo()
    X, t, eq, gamma, _ = _scaled_and_refined(pb, coo.row, coo.col, pb.groups.size, pb.groups.pattern.tocsc(), X, t)
    if not gamma > 0:
        return Separability(False, None, None, {"min_margin": float(gamma), "equality": eq}, method)
    return Separability(True, pb.token_w(X), None, {"min_margin": 1.0, "equality": eq}, method)


def _scaled_and_refined(pb: Problem, rows: np.ndarray, cols: np.ndarray, weights: np.ndarray,
                        support: sp.csc_matrix, X: np.ndarray, t: np.ndarray, projection=None,
                        outside: np.ndarray | None = None):
    """(X/γ, t/γ, the largest tie violation |x_rowᵀk_col − t_col| on the support pairs (rows, cols), γ, the factor
    applied to X in all) for rows X
    tied on the supports, γ the smallest off-support margin (one full pass over ``support``, (rows of X, m) in CSC;
    with ``outside`` (m,), the largest logit of each context among rows left out of X, in X's units, also
    t_j − outside_j: rows that no projection moves, so they only scale);
    when γ > 0 and the ties are off by more than TIE_TARGET, up to TIE_ROUNDS (``pb.options``) further projections
    onto the ties (``projection``, a :class:`~embgeo.ntp.solvers.svm_alm.TieProjection` of these pairs and
    ``weights``, built when None), each rescaled and kept only while it improves the ties: a projection of a nearly
    tied point changes it little, so its rounding is that much smaller (SmolLM2, m = 10,000: 7.8e-8 → 1.0e-12); then,
    where they are still off and it is small enough (EXACT_TIE_FLOPS), one exact orthogonal projection. X unscaled
    when γ ≤ 0."""

    K, opt = pb.K, pb.options
    factor = 1.0  # what X has been divided by so far, which the left-out rows share

    def scaled(X, t):
        gamma = scan_off_support(X, t, K, support).min_margin
        if outside is not None:
            gamma = min(gamma, float(np.min(t - outside / factor, initial=np.inf)))
        if gamma > 0:
            X, t = X / gamma, t / gamma
        return X, t, float(np.max(np.abs(row_dots(X, K, rows, cols) - t[cols]), initial=0.0)), gamma

    X, t, eq, gamma = scaled(X, t)
    if not gamma > 0:
        return X, t, eq, gamma, 1.0
    factor = gamma
    for _ in range(opt.TIE_ROUNDS):
        if eq <= opt.TIE_TARGET:
            break
        if projection is None:
            from embgeo.ntp.solvers.svm_alm import TieProjection

            projection = TieProjection(K, rows.astype(np.int64), cols.astype(np.int64), weights.astype(np.float64))
        Xr, tr, _ = projection.project(X)
        Xr, tr, eq_r, gamma_r = scaled(Xr, tr)
        if not (gamma_r > 0 and eq_r < eq):
            break  # the refinement gains nothing (rounding reached): keep the certificate before it
        X, t, eq, factor = Xr, tr, eq_r, factor * gamma_r
    n_ties = len(rows) - len(np.unique(cols)) if eq > opt.TIE_TARGET else 0  # (counted only where needed)
    if n_ties and 2.0 * X.size * n_ties**2 <= opt.EXACT_TIE_FLOPS and X.size * n_ties <= opt.EXACT_TIE_ENTRIES:
        from embgeo.ntp.solvers.svm_ipm import project_on_ties

        Xr, tr, eq_r, gamma_r = scaled(*project_on_ties(K, rows, cols, X))
        if gamma_r > 0 and eq_r < eq:
            X, t, eq, factor = Xr, tr, eq_r, factor * gamma_r
    return X, t, eq, 1.0, 1.0 / factor


def in_support(pattern: sp.csr_matrix, g: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Whether each pair (g_i, j_i) is in the (G, m) support pattern."""
    coo = pattern.tocoo()
    keys = np.sort(coo.row.astype(np.int64) * pattern.shape[1] + coo.col)
    q = g.astype(np.int64) * pattern.shape[1] + j
    pos = np.minimum(np.searchsorted(keys, q), max(len(keys) - 1, 0))
    return (keys[pos] == q) if len(keys) else np.zeros(len(q), bool)


def farkas_result(pb: Problem, farkas: tuple, method: str, **extra) -> Separability:
    """Token-level μ and Ψ (sparse (m, V)) from a group-level Farkas matrix at the representatives."""
    g, j, psi, perp = farkas
    tok = pb.groups.representative[g]
    off = ~in_support(pb.groups.pattern, g, j)
    m, V = pb.data.m, pb.data.V
    mu = sp.csr_matrix((-psi[off], (j[off], tok[off])), shape=(m, V))
    cert = sp.csr_matrix((psi, (j, tok)), shape=(m, V))
    # ‖Ψᵀ H̄‖ in the caller's units (Ψ itself is normalised by Σ_off μ = 1 and has none)
    return Separability(False, None, mu, {"perp_norm": float(perp) * pb.scale, **extra}, method, certificate=cert)


def _lp_nnz(pb: Problem) -> int:
    G, m, r = pb.groups.n_groups, pb.data.m, pb.coords.rank
    return (r + 2) * G * m


def lp_is_small(pb: Problem) -> bool:
    """Whether the separability LP has at most ``pb.options.LP_SMALL_NNZ`` nonzeros (then "auto" asks HiGHS)."""
    return _lp_nnz(pb) <= pb.options.LP_SMALL_NNZ


def separability_by_lp(pb: Problem, max_seconds: float | None = None) -> Separability | None:
    """The LP of :func:`is_separable` over (X, t, s) on every off-support pair, solved by HiGHS within
    ``max_seconds`` (its time limit); None (undecided) when it reaches it, or when the point HiGHS calls separating
    does not separate once its ties are made exact and every margin is scanned: HiGHS's word alone is no verdict (on
    an ill-conditioned LP — SmolLM2's two token groups of 425 and 905 contexts, presolve off — it returned "optimal,
    s = 1" with ties off by 115, for a system that has no solution, 2026-11-30)."""
    solver = SVMDual(pb.K, pb.groups.pattern, pb.groups.size, context_gram(pb.coords))
    gi, ji = np.nonzero(pb.groups.pattern.toarray() == 0)
    lp = separability_lp(pb.K, pb.groups.pattern, gi, ji, contexts=np.arange(pb.data.m), time_limit=max_seconds)
    if lp.status == Status.TIME_LIMIT:
        return None
    method = "LP (HiGHS) over token groups"
    if lp.separable:
        # Remove the LP's rounding-level F component exactly (weighted projection), then rescale.
        sep = separable_result(pb, *solver.primal_from(lp.X), method)
        return sep if sep.separable else None
    farkas = solver.farkas_from(gi, ji, lp.mu / lp.mu.sum(), accept_any=True)
    return farkas_result(pb, farkas, method, lp_value=lp.value)


def _hinge_then_dual(pb: Problem, deadline: float | None, max_iter: int,
                     progress: ProgressFn | None, hinge_options=None,
                     dual_options=None) -> Separability:
    """"auto" beyond the small LP: the squared hinge with the time left, then, where it gives up undecided (its
    MAX_STALLS) before ``deadline``, the NTP-SVM dual with the rest.

    Why this order (measured 2026-11-29, one thread, each route alone with a limit of 120–200 s, two runs side by side):
    the hinge decided every shape we tried, and before the dual where both did — SmolLM2's own states at m = 2000
    (benchmarks/README.md: 5.1 s, where the dual was undecided after 303 s, and "auto" with the dual first took 65 s);
    the GPT-2-sized gpt2-2048 of bench_ntp_scale, separable: 10.9 s against 43.7 s; planted d ≪ m data, separable
    (m = 4000, V = 2000, d = 64, S = 3): 9.7 s against undecided at 120 s; not separable (m = 1000, V = 200, d = 32,
    S = 2 and m = 600, V = 300, d = 16, S = 2): Farkas matrices in 0.8 s and 0.4 s against 92.7 s and 118.6 s. Until
    then the dual had gone first for a quarter of the limit (at most 60 s)."""
    try:
        return separability_by_hinge(pb, time_left(deadline), progress, hinge_options)
    except SolverError as err:
        if past(deadline):
            raise
        gave_up = err
    sep, out = _separability_by_dual(pb, time_left(deadline), max_iter, progress, dual_options)
    if sep is None:
        raise SolverError(f"is_separable: undecided: the squared hinge gave up ({gave_up}), and the dual iterations "
                          f"neither separated nor found a Farkas matrix ({out.status} after {out.iterations} "
                          "iterations)")
    return sep


def separability_by_hinge(pb: Problem, max_seconds: float | None = None,
                          progress: ProgressFn | None = None, options=None) -> Separability:
    """The squared-hinge route of :func:`is_separable` (:mod:`embgeo.ntp.solvers.squared_hinge`), certified either way.

    L-BFGS (float32 products until they stall, then float64), run on while φ falls by NEWTON_WHEN_DROP per
    NEWTON_EVERY steps. Every CHECK_EVERY steps the iterate is tie-projected exactly and scanned in full: a positive
    smallest margin γ makes it the certificate (scaled by 1/γ). Only when L-BFGS slows (far from the minimiser a
    Newton step on the wrong active set gains little for its cost: 890 → 818 in 34 s at m = 10,000, r = 576, where
    20 more L-BFGS steps took 17 s to reach 645), and when φ's active pairs number at most NEWTON_MAX_ROWS,
    semismooth Newton steps (the least-squares minimiser on the active pairs, :func:`squared_hinge.newton_step`)
    either separate, or land on φ's minimiser, whose residuals complete to a Farkas matrix accepted at
    FARKAS_RTOL; otherwise L-BFGS goes on from the better point. When φ stalls with too many active pairs, the LP
    on the LP_PAIRS largest violations decides if it is infeasible (a subsystem with no solution). These constants
    are the fields of ``options`` (:class:`~embgeo.ntp.solvers.squared_hinge.HingeOptions`; its defaults when None).
    """
    from embgeo.ntp.solvers import squared_hinge as sh

    deadline = deadline_of(max_seconds, "is_separable (squared hinge)")
    solver = SVMDual(pb.K, pb.groups.pattern, pb.groups.size, context_gram(pb.coords))
    hp = sh.whiten(pb.K, pb.groups.pattern, options)
    found: dict = {}

    def check(Y: np.ndarray, t: np.ndarray) -> bool:
        gamma, X, tt = sh.separating_margin(pb, hp, Y)
        if not gamma > 0:
            return False
        sep = separable_result(pb, X, tt, "squared hinge (L-BFGS + semismooth Newton), tie-projected and scaled "
                               "to margin 1")
        # a small γ magnifies the projection's rounding in the ties: accept only ties exact to MARGIN_ATOL (as
        # separable_from_candidate does), else go on descending (a larger γ comes with more steps)
        if sep.residuals["equality"] > MARGIN_ATOL:
            return False
        found["sep"] = sep
        return True

    start, steps, single, value, stalls, tried = None, 0, True, np.inf, 0, set()
    while True:
        run = sh.minimise(hp, deadline=deadline, check=check, progress=progress, start=start, single=single,
                          slow=(hp.opt.NEWTON_EVERY, hp.opt.NEWTON_WHEN_DROP), working=True)
        steps += run.steps
        if "sep" in found or (run.phi == 0.0 and check(run.Y, run.t)):
            return found["sep"]
        if run.stalled and single:
            single = False  # float32 sees no further: go on in float64
        slow = run.stalled or run.slowed  # the active set has about settled: time for a Newton step
        start, value = (run.Y, run.t), run.phi
        violated = None  # (g, j, λ) of every violated pair at the run's point: one pass, for all three below
        if slow and not past(deadline):
            violated = sh.off_residuals(hp, run.Y, run.t, np.iinfo(np.int64).max)
            sep = _residual_pairs(pb, hp, run, violated, tried, deadline)
            if sep is not None:
                return sep
        newton = None if violated is None or past(deadline) else _newton_rounds(pb, solver, hp, run, check, deadline,
                                                                                violated[:2])
        if "sep" in found:
            return found["sep"]
        if isinstance(newton, Separability):
            return newton
        if newton is not None and newton[2] < value:
            start, value = newton[:2], newton[2]
        elif run.stalled and not single and violated is not None and not past(deadline):
            sep = _lp_on_violations(pb, solver, hp, run, violated, deadline)
            if sep is not None:
                return sep
            stalls += 1
        if past(deadline) or stalls >= pb.options.MAX_STALLS:
            raise SolverError(f"is_separable: undecided after {steps} L-BFGS steps of the squared hinge "
                              f"(φ = {value:.3g}, {stalls} stalls)"
                              + ("" if max_seconds is None else f" within max_seconds = {max_seconds:.3g} s"))


def _residual_pairs(pb: Problem, hp, run, violated: tuple, tried: set, deadline) -> Separability | None:
    """The pair certificates (:func:`~embgeo.ntp.solvers.pair_certificates.pairs_farkas`) among the GUIDED_GROUPS token
    groups that carry most of φ at a slowed or stalled ``run`` (squared residuals of the LP_PAIRS largest of its
    ``violated`` pairs (g, j, λ) and of every tie), the pairs in ``tried`` skipped and added to it. Where a pair is
    the reason for non-separability its two groups are left with the residual, wherever they rank by size (the pair
    routes try the largest only)."""
    from embgeo.ntp.solvers import squared_hinge as sh
    from embgeo.ntp.solvers.pair_certificates import pairs_farkas

    G = hp.shape[1]
    g, j, lam = sh.largest(*violated, hp.opt.LP_PAIRS)
    tie_j, tie_g = hp.support.nonzero()
    nu = row_dots(run.Y, hp.Q, tie_g, tie_j) - run.t[tie_j]
    mass = np.bincount(g, weights=lam**2, minlength=G) + np.bincount(tie_g, weights=nu**2, minlength=G)
    top = np.argsort(-mass, kind="stable")[:hp.opt.GUIDED_GROUPS]
    top = top[mass[top] > 0]
    pairs = [(int(min(a, b)), int(max(a, b))) for i, a in enumerate(top) for b in top[i + 1:]]
    pairs = [ab for ab in pairs if ab not in tried]
    tried.update(pairs)
    if not pairs:
        return None
    cert = pairs_farkas(pb.K, pb.coords.rank, pb.groups.pattern, pairs, time_left(deadline), pb.options.pair)
    return None if cert is None else farkas_result(
        pb, cert, "pair of token groups whose contexts no direction separates (pair LP; the groups carrying the "
        "squared hinge's residual)")


def _newton_rounds(pb: Problem, solver: SVMDual, hp, run, check, deadline, active: tuple):
    """Up to NEWTON_ROUNDS semismooth Newton steps from ``run``'s point, whose violated pairs (g, j) are ``active``: a
    :class:`Separability` when they decide, else (Y, t, φ) of the last point, or None when the active pairs are too
    many for the least-squares matrix."""
    from embgeo.ntp.solvers import squared_hinge as sh

    # φ in float64 at the start (run.phi may come from float32 products, too coarse for the line search's test)
    Y, t = run.Y, run.t
    phi = sh.value_and_grad(hp, Y, t)[0]
    for _ in range(hp.opt.NEWTON_ROUNDS):
        step = sh.newton_step(hp, Y, t, phi, active=active, deadline=deadline)
        if step is None:
            return None
        Y, t, phi = step
        if check(Y, t):
            return None  # the caller returns the separator ``check`` stored
        g, j, lam = sh.off_residuals(hp, Y, t, np.iinfo(np.int64).max)
        farkas = solver.farkas_from(g, j, lam / lam.sum()) if lam.size else None
        if farkas is not None:
            return farkas_result(pb, farkas, f"squared hinge: the residuals of its minimiser on {len(g)} pairs "
                                 "(L-BFGS + semismooth Newton) are a Farkas matrix")
        active = (g, j)  # the next step's active pairs: this point's, found just now
        if past(deadline):
            break
    return Y, t, phi


def _lp_on_violations(pb: Problem, solver: SVMDual, hp, run, violated: tuple, deadline) -> Separability | None:
    """The separability LP on the LP_PAIRS largest of a stalled run's ``violated`` pairs (g, j, λ): a Farkas matrix
    when infeasible."""
    from embgeo.ntp.solvers import squared_hinge as sh

    g, j, _ = sh.largest(*violated, hp.opt.LP_PAIRS)
    lp = separability_lp(pb.K, pb.groups.pattern, g, j, time_limit=time_left(deadline))
    if lp.status == Status.OPTIMAL and not lp.separable:
        farkas = solver.farkas_from(g, j, lp.mu / lp.mu.sum(), accept_any=True)
        return farkas_result(pb, farkas, f"squared hinge stalled at φ = {run.phi:.3g}; the LP on its "
                             f"{len(g)} violated pairs is infeasible (HiGHS)", lp_value=lp.value)
    return None
