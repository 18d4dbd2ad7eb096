"""Certificates from two token groups: the cheap Farkas searches that decide separability (Def. 2) before any
large solver runs, and the pairs of tokens they start from.

When rank H̄ = r < m, two token groups u, v whose contexts overlap in more than r contexts spanning R^r must
have equal rows in any separator (their logits are tied there), so a context where only one of them follows
cannot give the other a margin (:func:`pair_farkas`, one least-squares solve). Failing that, any separator
makes u = x_a − x_b an r-dimensional separator of a's contexts from b's: the infeasibility of that LP in r + 1
rows gives a Farkas matrix of the whole problem (:func:`pair_lp_farkas`; each pair's system is first decided by
semismooth Newton on its squared hinge, :func:`pair_hinge`, whose minimiser either solves it or gives the Farkas
weights, and HiGHS only gets the pairs that does not settle). Both return the group-level Farkas
matrix (grp, ctx, Ψ, ‖Ψ K‖) that :func:`embgeo.ntp.theory.separability.farkas_result` turns into a certificate.
:func:`heavy_pairs` also gives :func:`embgeo.ntp.theory.compatibility.is_compatible` its overdetermined pairs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.linalg import null_space

from embgeo.core.deadline import past
from embgeo.core.validate import check_options
from embgeo.ntp.solvers.separability_lp import highs_options
from embgeo.ntp.solvers.svm_dual import FARKAS_RTOL, farkas_scale


@dataclass(frozen=True)
class PairOptions:
    """The pair certificates' bounds, as data (:func:`pair_lp_farkas`, :func:`pair_farkas`; the separability routes
    carry them in :class:`embgeo.ntp.theory.separability.RouteOptions` ``pair``)."""

    #: The pair LP tries pairs among this many largest groups (most contexts), largest pairs first ...
    GROUPS: int = 40
    #: ... and at most this many pairs (each an LP with r + 1 rows and |J_a ∪ J_b| columns) ...
    MAX_PAIRS: int = 200
    #: ... within this many seconds in all (each LP gets what is left as HiGHS's time limit; also the cap of
    #: :func:`pair_farkas`): at m = 100,000 the pair of the two most frequent groups alone is an LP in tens of
    #: thousands of columns, and an unbounded attempt held ntp_svm past its max_seconds for minutes before its own
    #: solver started.
    SECONDS: float = 20.0
    #: Semismooth Newton steps on the pair's squared hinge (:func:`pair_hinge`) before its LP: most pairs are decided
    #: there, either way, at the cost of a few r × r factorizations; the LP only gets pairs where they do not settle
    #: (0: the LP alone, as before 2026-11-30). Why: on SmolLM2's own random sample of 10,000 contexts of the whole
    #: Vim documentation, the certificate is the pair of groups with 425 and 905 contexts (1,152 contexts, r = 576),
    #: whose LP HiGHS had not solved in 20 s without presolve (16 s with it); the Newton steps decide it in about a
    #: second.
    NEWTON_STEPS: int = 50


def pair_lp_farkas(K: np.ndarray, r: int, P: sp.csr_matrix, max_seconds: float | None = None,
                   options: PairOptions | None = None):
    """(grp, ctx, Ψ, perp) from two token groups a, b whose contexts admit no separating direction, or None.

    K (m, r): the context coordinates, r their rank; P (G, m): the groups' support pattern (CSR, row g is J_g).

    A separator of Def. 2 gives u = x_a − x_b with uᵀk_j ≥ 1 on P = J_a ∖ J_b (a in the support, b not),
    uᵀk_j ≤ −1 on N = J_b ∖ J_a and uᵀk_j = 0 on E = J_a ∩ J_b (tied in the support). If this system in
    R^r has no solution, Farkas' lemma gives λ ≥ 0 on P, μ ≥ 0 on N, ν on E with
    Σ_P λ_j k_j − Σ_N μ_j k_j + Σ_E ν_j k_j = 0 and Σλ + Σμ = 1, found by HiGHS as a vertex of that LP
    (at most r + 1 nonzeros) and then re-solved exactly on its support. Ψ = (λ, −λ) on P for (a, b),
    (−μ, μ) on N, (ν, −ν) on E balances every context, is ≤ 0 off the supports with Σ_off Ψ = −1, and
    Σ_j Ψ_{g,j} k_j = ±ρ, the residual above: a Farkas matrix of the whole problem when ‖ρ‖ is at
    rounding level. Pairs among the ``options.GROUPS`` largest groups, by |J_a| + |J_b| descending (the
    ones with the most constraints per dimension), at most ``options.MAX_PAIRS`` of them within ``max_seconds``
    (at most ``options.SECONDS``, HiGHS's time limit on each); ``options``: :class:`PairOptions` (defaults if None).
    Cost per pair: up to ``options.NEWTON_STEPS`` factorizations of r × r matrices (:func:`pair_hinge`, which decides
    most pairs either way), and an LP in r + 1 rows and |J_a ∪ J_b| columns for the pairs they leave open.
    """
    opt = check_options(options, PairOptions)
    sizes = np.diff(P.indptr)
    top = np.argsort(-sizes, kind="stable")[:opt.GROUPS]
    top = top[sizes[top] > 0]
    pairs = [(int(a), int(b)) for i, a in enumerate(top) for b in top[i + 1:]]
    pairs.sort(key=lambda ab: -(sizes[ab[0]] + sizes[ab[1]]))
    return pairs_farkas(K, r, P, pairs[:opt.MAX_PAIRS], max_seconds, opt)


def pairs_farkas(K: np.ndarray, r: int, P: sp.csr_matrix, pairs: list[tuple[int, int]],
                 max_seconds: float | None = None, options: PairOptions | None = None):
    """(grp, ctx, Ψ, perp) from the first of ``pairs`` (group pairs (a, b), tried in that order) whose system has no
    solution, or None: every pair's Newton steps first (:func:`pair_hinge`), then the LPs of those they leave open, all
    within ``max_seconds`` (at most ``options.SECONDS``). :func:`pair_lp_farkas` gives it the largest groups' pairs; the
    squared-hinge route the pairs of the groups that carry its residual."""
    from scipy.optimize import linprog  # looked up at each call (tests spy on scipy.optimize.linprog)

    opt = check_options(options, PairOptions)
    max_seconds = opt.SECONDS if max_seconds is None else min(max_seconds, opt.SECONDS)
    start = time.perf_counter()
    scale = farkas_scale(K)
    open_pairs = []  # the pairs the Newton steps leave to the LP, which runs after every pair had its Newton steps
    for a, b in pairs:
        if max_seconds - (time.perf_counter() - start) <= 0:
            return None
        system = _pair_system(K, P, a, b)
        if system is None:
            continue
        ctx, sign, n_signed = system
        verdict, z = pair_hinge(K[ctx] * sign[:, None], n_signed, opt.NEWTON_STEPS, deadline=start + max_seconds)
        if verdict == "separated":
            continue  # the pair's system has a solution: no certificate from it
        cert = None if verdict is None else _pair_certificate(K, a, b, ctx, sign, z, scale)
        if cert is not None:
            return cert
        open_pairs.append((a, b, system))  # not settled, or weights that do not balance to FARKAS_RTOL
    for a, b, (ctx, sign, n_signed) in open_pairs:  # (cheap pairs first: an LP can take the whole budget)
        left = max_seconds - (time.perf_counter() - start)
        if left <= 0:
            return None
        A = np.vstack([(K[ctx] * sign[:, None]).T, np.r_[np.ones(n_signed), np.zeros(ctx.size - n_signed)]])
        rhs = np.r_[np.zeros(r), 1.0]
        bounds = [(0, None)] * n_signed + [(None, None)] * (ctx.size - n_signed)
        res = linprog(np.zeros(ctx.size), A_eq=A, b_eq=rhs, bounds=bounds, method="highs", options=highs_options(left))
        if res.status != 0:  # (status 1: HiGHS stopped at its time limit, the budget's rest: the loop ends next)
            continue  # the pair is separable (or HiGHS could not tell): no certificate from it
        cert = _pair_certificate(K, a, b, ctx, sign, _polish_vertex(A, rhs, res.x, n_signed), scale)
        if cert is not None:
            return cert
    return None


def _pair_system(K: np.ndarray, P: sp.csr_matrix, a: int, b: int):
    """(contexts P, N, E in that order, their signs +1, −1, +1, |P| + |N|) of the pair (a, b), or None when it has no
    signed context or its least-squares direction already solves it (:func:`_separated_by_least_squares`)."""
    Ja, Jb = P.indices[P.indptr[a]:P.indptr[a + 1]], P.indices[P.indptr[b]:P.indptr[b + 1]]
    Pj, Nj, Ej = np.setdiff1d(Ja, Jb), np.setdiff1d(Jb, Ja), np.intersect1d(Ja, Jb)
    if Pj.size + Nj.size == 0 or _separated_by_least_squares(K, Pj, Nj, Ej):
        return None
    sign = np.concatenate([np.ones(Pj.size), -np.ones(Nj.size), np.ones(Ej.size)])
    return np.concatenate([Pj, Nj, Ej]), sign, Pj.size + Nj.size


def _pair_certificate(K: np.ndarray, a: int, b: int, ctx: np.ndarray, sign: np.ndarray, z: np.ndarray, scale: float):
    """The group-level Farkas matrix (grp, ctx, Ψ, perp) of the pair LP's weights z, or None when they do not balance
    to FARKAS_RTOL: Ψ_{a,j} = sign_j z_j, Ψ_{b,j} = −sign_j z_j (λ on P, −μ on N, ν on E for a; the opposite for b)."""
    perp = float(np.sqrt(2.0) * np.linalg.norm((z * sign) @ K[ctx]))
    if perp > FARKAS_RTOL * scale:
        return None
    nz = z != 0
    g = np.concatenate([np.full(nz.sum(), a), np.full(nz.sum(), b)])
    j = np.concatenate([ctx[nz], ctx[nz]])
    psi = np.concatenate([(sign * z)[nz], -(sign * z)[nz]])
    return g, j, psi, perp


def pair_hinge(A: np.ndarray, n_signed: int, max_steps: int,
               deadline: float | None = None) -> tuple[str | None, np.ndarray | None]:
    """The pair's system (uᵀa_i ≥ 1 for the first ``n_signed`` rows of A, uᵀa_i = 0 for the rest; A (n, r) the
    contexts' coordinates signed +1 on P, −1 on N, +1 on E) decided through its squared hinge

        φ(u) = ½ Σ_{i < n_signed} (1 − uᵀa_i)₊² + ½ Σ_{i ≥ n_signed} (uᵀa_i)²,

    convex and piecewise quadratic in r variables, minimised by semismooth Newton steps (the r × r Gauss–Newton
    matrix of the active rows, factored; Armijo backtracking). φ = 0 iff the system has a solution: ("separated",
    None). At a minimiser with φ > 0, ∇φ = 0 reads Σ_i z_i a_i = 0 with z_i = ℓ_i = (1 − uᵀa_i)₊ ≥ 0 on the signed
    rows and z_i = −uᵀa_i on the others — Farkas weights of the pair LP of :func:`pair_lp_farkas` once scaled to
    Σ ℓ = 1, and re-projected onto Σ_i z_i a_i = 0 exactly (:func:`_projected_weights`): ("farkas", z). (None, None)
    when ``max_steps`` steps do not settle it (the caller's LP decides then) or ``deadline`` (a
    ``time.perf_counter()`` value) passes first: at m = 100,000 one step of a pair of frequent groups forms a Gram
    matrix of ~10,000 rows, about a second."""
    n, r = A.shape
    u = np.zeros(r)

    def value(u):
        s = A @ u
        lo = np.maximum(1.0 - s[:n_signed], 0.0)
        return 0.5 * (float(lo @ lo) + float(s[n_signed:] @ s[n_signed:])), s, lo

    def met(u, s):
        # u, moved onto the tied rows' null space (uᵀa_i = 0 there), has every signed margin positive: scaled, it solves
        # the system. (φ only tends to 0 on a solvable pair: each step puts its active rows at margin 1, to rounding,
        # and others slip just under it, so "φ = 0" would wait for many steps.)
        if not float(np.min(s[:n_signed], initial=1.0)) > 0:
            return False
        tied = s[n_signed:]
        if tied.size and float(np.max(np.abs(tied))) > 1e-6 * float(np.max(np.abs(s))):
            return False  # (far from tied yet: no solve)
        if tied.size:
            u = u - np.linalg.lstsq(A[n_signed:], tied, rcond=None)[0]
        return bool(float(np.min(A[:n_signed] @ u, initial=1.0)) > 0)

    f, s, lo = value(u)
    settled = False
    for _ in range(max_steps):
        if met(u, s):
            return "separated", None
        if past(deadline):
            return None, None
        active = np.concatenate([lo > 0, np.ones(n - n_signed, dtype=bool)])
        w = np.concatenate([-lo, s[n_signed:]])  # the residuals whose squares make φ, signed as ∇φ = Aᵀ w needs
        grad = A[active].T @ w[active]
        H = A[active].T @ A[active]
        ridge = 1e-12 * max(float(np.trace(H)) / r, 1e-300)  # H is singular while fewer than r rows are active
        try:
            step = -sla.cho_solve(sla.cho_factor(H + ridge * np.eye(r), check_finite=False), grad, check_finite=False)
        except np.linalg.LinAlgError:
            return None, None
        gd = float(grad @ step)
        if not gd < 0:
            settled = True  # no descent left to rounding: the minimiser
            break
        alpha = 1.0
        while alpha > 1e-12:
            fn, sn, lon = value(u + alpha * step)
            if fn <= f + 1e-4 * alpha * gd:
                break
            alpha /= 2
        else:
            break
        u, f, s, lo = u + alpha * step, fn, sn, lon
        if alpha == 1.0 and np.array_equal(lo > 0, active[:n_signed]):
            settled = True  # a full step on an unchanged active set: the exact minimiser of φ
            break
    if met(u, s):
        return "separated", None
    if not settled or not lo.sum() > 0:
        return None, None
    # rows a full step put at margin 1 exactly are active by rounding only (ℓ ~ 1e-14): their weight is 0, and kept, the
    # projection below would make it slightly negative
    lo = np.where(lo > 1e-10 * float(lo.max()), lo, 0.0)
    z = _projected_weights(A, np.concatenate([lo, -s[n_signed:]]) / float(lo.sum()), n_signed)
    return ("farkas", z) if z is not None else (None, None)


def _projected_weights(A: np.ndarray, z: np.ndarray, n_signed: int) -> np.ndarray | None:
    """Weights z (n,) moved the least (orthogonally, on their support) onto Σ_i z_i a_i = 0 and Σ_{i < n_signed} z_i
    = 1, or None when that makes a signed weight negative. A Newton point's weights balance to the factorization's
    rounding (κ(H) times eps); this solve in r + 1 unknowns brings them to the rounding of a product where the support's
    rows span R^r (the caller checks the balance either way)."""
    support = np.flatnonzero(z)
    B = np.vstack([A[support].T, (support < n_signed).astype(np.float64)])  # (r + 1, |support|)
    rhs = np.r_[np.zeros(A.shape[1]), 1.0]
    y = np.linalg.lstsq(B @ B.T, B @ z[support] - rhs, rcond=None)[0]
    out = np.zeros_like(z)
    out[support] = z[support] - B.T @ y
    return out if np.all(out[:n_signed] >= 0) else None


def _separated_by_least_squares(K: np.ndarray, Pj: np.ndarray, Nj: np.ndarray, Ej: np.ndarray) -> bool:
    """Whether the least-squares u of uᵀk_j = 1 on P, −1 on N, within the null space of K_E (so uᵀk_j = 0 on
    E), already has every uᵀk_j > 0 on P and < 0 on N: then u, scaled, solves the pair's system, the LP is
    feasible and the pair gives no certificate. One SVD and one r × r solve (the normal equations) instead
    of an LP (on trained embeddings, m = 3011, r = 64: all 200 pairs settled so, in 0.16 s instead of 2 s)."""
    basis = null_space(K[Ej], rcond=1e-10) if Ej.size else np.eye(K.shape[1])  # directions with uᵀk_j = 0 on E
    if basis.shape[1] == 0:
        return False
    A = np.vstack([K[Pj], -K[Nj]]) @ basis
    # the normal equations by Cholesky where A is tall (0.11 s for the 200 pairs of the 2000-tweet Crammer–Singer
    # instance against 0.67 s for lstsq's SVD): any y will do, since z = Ay is checked below, so squaring A's
    # condition risks nothing but a pair sent to the LP. Where A has fewer than twice as many rows as columns AᵀA
    # may be singular or nearly (fewer rows than columns: always), and lstsq is cheap there anyway
    y = None
    if len(A) >= 2 * A.shape[1]:
        try:
            y = sla.cho_solve(sla.cho_factor(A.T @ A, check_finite=False), A.sum(axis=0), check_finite=False)
        except np.linalg.LinAlgError:
            pass
    if y is None:
        y = np.linalg.lstsq(A, np.ones(len(A)), rcond=None)[0]
    z = A @ y
    # strictly positive beyond rounding: only then is the direction a proof (a near-zero value is decided by the LP)
    return bool(z.size) and float(z.min()) > 1e-9 * float(np.max(np.abs(z)))


def _polish_vertex(A: np.ndarray, rhs: np.ndarray, x: np.ndarray, n_signed: int) -> np.ndarray:
    """An LP vertex x of A x = rhs re-solved by least squares on its support; the first ``n_signed``
    entries must stay ≥ 0 (else HiGHS's x, with its tiny negative entries zeroed, is kept)."""
    x = np.where(np.abs(x) > 1e-12 * max(float(np.max(np.abs(x))), 1e-300), x, 0.0)
    x[:n_signed] = np.maximum(x[:n_signed], 0.0)
    support = np.flatnonzero(x)
    polished = np.zeros_like(x)
    polished[support] = np.linalg.lstsq(A[:, support], rhs, rcond=None)[0]
    ok = np.all(polished[:n_signed] >= 0) and (np.linalg.norm(A @ polished - rhs) <= np.linalg.norm(A @ x - rhs))
    return polished if ok else x


def pair_farkas(K: np.ndarray, r: int, P: sp.csr_matrix, max_seconds: float | None = None,
                options: PairOptions | None = None):
    """(grp, ctx, Ψ, perp) from two groups tied on > r contexts spanning R^r, or None.

    Cost per pair: a least-squares solve in |J| × r (|J| up to m); at most heavy_pairs' ``limit`` pairs within
    ``max_seconds`` (at most ``options.SECONDS`` of :class:`PairOptions`, checked before every pair: at m = 10,000,
    r = 576 one pair is about a second)."""
    opt = check_options(options, PairOptions)
    max_seconds = opt.SECONDS if max_seconds is None else min(max_seconds, opt.SECONDS)
    start = time.perf_counter()
    scale = farkas_scale(K)
    for u, v, J in heavy_pairs(P, r):
        if time.perf_counter() - start > max_seconds:
            return None
        Ju, Jv = P.indices[P.indptr[u]:P.indptr[u + 1]], P.indices[P.indptr[v]:P.indptr[v + 1]]
        only_u = np.setdiff1d(Ju, J)
        if only_u.size == 0:
            u, v, only_u = v, u, np.setdiff1d(Jv, J)
        if only_u.size == 0:
            continue
        i = int(only_u[0])  # u ∈ S_i, v ∉ S_i
        beta = np.linalg.lstsq(K[J].T, K[i], rcond=None)[0]
        perp = float(np.sqrt(2.0) * np.linalg.norm(K[i] - K[J].T @ beta))
        if perp > FARKAS_RTOL * scale:
            continue
        g = np.concatenate([[u, v], np.full(len(J), u), np.full(len(J), v)])
        j = np.concatenate([[i, i], J, J])
        psi = np.concatenate([[1.0, -1.0], -beta, beta])
        return g, j, psi, perp
    return None


def heavy_pairs(Pt: sp.csr_matrix, r: int, limit: int = 50):
    """Pairs of rows of Pt (tokens or groups × contexts) sharing more than r columns, most shared
    first (at most ``limit``), with the shared columns. Only rows with more than r columns count."""
    sizes = np.diff(Pt.indptr)
    heavy = np.flatnonzero(sizes > r)
    if heavy.size < 2:
        return
    B = Pt[heavy]
    B.data = np.ones_like(B.data)  # counts of shared columns, whatever the entries
    co = sp.triu(B @ B.T, k=1).tocoo()
    keep = co.data > r
    order = np.argsort(-co.data[keep], kind="stable")[:limit]
    for a, b in zip(co.row[keep][order], co.col[keep][order], strict=True):
        u, v = int(heavy[a]), int(heavy[b])
        J = np.intersect1d(Pt.indices[Pt.indptr[u]:Pt.indptr[u + 1]], Pt.indices[Pt.indptr[v]:Pt.indptr[v + 1]])
        yield u, v, J
