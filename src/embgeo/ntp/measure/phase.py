"""Where NTP-separability sets in below overparameterization: random instances, trials, thresholds.

Paper: ``ntp-implicit-bias-neurips.txt`` Sec. 3.1. Lemma 1: d > m (with rank H̄ = m) is sufficient
for NTP-separability (Def. 2). Remark 1: for one-hot data (S_j = 1) separability is ordinary linear
separability, where Cover (1965) gives the exact answer for two classes; exact thresholds for
NTP-separability with d < m are open. This module measures them empirically:

* :func:`random_instance` draws a dataset of m contexts (Gaussian embeddings, random supports of
  size S, Dirichlet(1) probabilities); :func:`trial` / :func:`trials` decide NTP-separability
  (Def. 2) and NTP_H-compatibility (Def. 1) on such draws with :mod:`embgeo.ntp.theory`.
* :func:`cover_probability` is the exact two-class one-hot answer (S = 1, V = 2), a ground truth
  for the whole pipeline.
* :func:`binomial_interval` (Clopper-Pearson) and :func:`threshold` (probit fit of P(separable)
  against d/m, profile-likelihood interval) turn counts into a threshold with an uncertainty.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike
from scipy import optimize, stats
from scipy.special import log_ndtr

from embgeo.core.validate import check_dense_size, check_positive_int, check_seed
from embgeo.errors import InputError
from embgeo.ntp.data import NTPData
from embgeo.ntp.theory import is_compatible, is_separable
from embgeo.ntp.theory.separability import check_separability_method

#: Φ⁻¹(0.9): a probit curve Φ((x − t)/s) goes from 10% to 90% over 2 · Z90 · s.
Z90 = float(stats.norm.ppf(0.9))


# -- random instances and trials --------------------------------------------------------------

def _check_sizes(m: int, d: int, V: int, S: int) -> tuple[int, int, int, int]:
    """Validated (m, d, V, S): m, d >= 1, V >= 2, 1 <= S <= V."""
    m = check_positive_int("m", m)
    d = check_positive_int("d", d)
    V = check_positive_int("V", V, 2)
    S = check_positive_int("S", S)
    if S > V:
        raise InputError(f"S: the support size must be <= V={V}, got {S}")
    return m, d, V, S


def random_instance(m: int, d: int, V: int, S: int, seed: int) -> NTPData:
    """A random NTP dataset of m contexts in R^d over V tokens, every support of size S.

    * embeddings (m, d): rows h_j ~ N(0, I_d / d) i.i.d., so ‖h_j‖ ≈ 1 whatever d and, almost
      surely, any min(m, d) of them are linearly independent (general position, as Cover assumes);
    * supports: for each context independently a uniformly random S-subset of the V tokens;
    * probabilities on the support: Dirichlet(1, ..., 1), uniform on the simplex, so in-support
      log-odds are generic (no accidental ties that would make (4) easier than it should be).

    Returns an :class:`NTPData` with uniform weights π̂_j = 1/m. Same arguments, same data.
    """
    m, d, V, S = _check_sizes(m, d, V, S)
    rng = np.random.default_rng(check_seed(seed))
    check_dense_size("embeddings", (m, d))
    H = rng.standard_normal((m, d)) / np.sqrt(d)
    # rng.choice(..., replace=False) per context: an exactly uniform S-subset, O(V) memory per row.
    cols = np.concatenate([rng.choice(V, size=S, replace=False) for _ in range(m)])
    vals = rng.dirichlet(np.ones(S), size=m).ravel()
    P = sp.csr_matrix((vals, cols, np.arange(0, m * S + 1, S)), shape=(m, V))
    return NTPData(H, P)


def trial(m: int, d: int, V: int, S: int, seed: int, *, method: str = "auto") -> dict:
    """Decide NTP-separability (Def. 2) and NTP_H-compatibility (Def. 1) of ``random_instance(m, d, V, S, seed)``.

    Returns ``{"separable": bool, "compatible": bool, "separability_method": str, "seconds": float}``;
    ``seconds`` is the wall time of the whole trial (drawing the data and both decisions).
    ``method`` is passed to :func:`~embgeo.ntp.theory.is_separable`: "auto" (closed form when d >= m,
    else HiGHS's LP when small, else the iterative NTP-SVM dual) or "lp" (always the LP: no iteration
    limit; measured at m = 160 it was up to ~10x faster than the dual near the transition, at m = 320
    about 2x slower).

    S == V (every support is the whole vocabulary): there are no constraints (6b), so Def. 2 holds
    vacuously (W = 0 satisfies (6a)); :func:`embgeo.ntp.theory.is_separable` refuses such data
    (W^mm is undefined and the paper assumes some S_j < V), so it is not called and the trial
    reports ``separable=True`` with method ``"vacuous: S = V, no constraints (6b)"``.
    """
    check_separability_method(method)
    t0 = time.perf_counter()
    data = random_instance(m, d, V, S, seed)
    if S == V:
        separable, how = True, "vacuous: S = V, no constraints (6b)"
    else:
        sep = is_separable(data, method=method)
        separable, how = bool(sep), sep.method
    compatible = bool(is_compatible(data))
    return {"separable": separable, "compatible": compatible, "separability_method": how,
            "seconds": time.perf_counter() - t0}


def trial_seed(seed: int, i: int) -> int:
    """The seed of trial i of ``trials(..., seed=seed)``: a 63-bit integer from numpy's
    ``SeedSequence(seed, spawn_key=(i,))``, the documented way to get independent streams
    (numpy "Parallel random number generation"). ``trial(m, d, V, S, trial_seed(seed, i))`` re-runs it."""
    seed = check_seed(seed)
    i = check_seed(i)
    state = np.random.SeedSequence(seed, spawn_key=(i,)).generate_state(1, dtype=np.uint64)[0]
    return int(state >> np.uint64(1))  # 63 bits: a non-negative Python int for check_seed


def trials(m: int, d: int, V: int, S: int, n: int, seed: int, *, method: str = "auto") -> dict:
    """n independent trials (:func:`trial`, with its ``method``) with seeds ``trial_seed(seed, i)``, i = 0..n-1.

    Returns ``{"n": n, "separable": count, "compatible": count, "both": count, "seconds": total}``.
    """
    n = check_positive_int("n", n)
    _check_sizes(m, d, V, S)
    counts = {"n": n, "separable": 0, "compatible": 0, "both": 0, "seconds": 0.0}
    for i in range(n):
        out = trial(m, d, V, S, trial_seed(seed, i), method=method)
        counts["separable"] += out["separable"]
        counts["compatible"] += out["compatible"]
        counts["both"] += out["separable"] and out["compatible"]
        counts["seconds"] += out["seconds"]
    return counts


# -- exact and statistical reference points ----------------------------------------------------

def cover_probability(m: int, d: int) -> float:
    """Probability that m points in general position in R^d with independent uniform ±1 labels are
    linearly separable by a hyperplane through the origin (Cover 1965, function counting theorem):

        P(m, d) = 2^(1−m) · Σ_{k=0}^{d−1} C(m−1, k)   (= 1 for d >= m),

    i.e. the Binomial(m−1, ½) CDF at d−1, evaluated by scipy (no 2^m overflow). NTP-separability
    with S = 1, V = 2 is exactly this problem: (6b) asks y_j uᵀh_j >= 1 for u = w_1 − w_2.
    """
    m = check_positive_int("m", m)
    d = check_positive_int("d", d)
    if d >= m:
        return 1.0
    return float(stats.binom.cdf(d - 1, m - 1, 0.5))


def _check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0 < level < 1:
        raise InputError(f"level: expected a confidence level in (0, 1), got {level!r}")
    return float(level)


def binomial_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson ("exact") confidence interval of a binomial proportion from k successes in n
    trials (Clopper & Pearson 1934; ``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``).
    The lower end is 0 when k = 0 and the upper end 1 when k = n."""
    n = check_positive_int("n", n)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= n:
        raise InputError(f"k: expected an integer number of successes in [0, n={n}], got {k!r}")
    ci = stats.binomtest(int(k), n).proportion_ci(confidence_level=_check_level(level), method="exact")
    return float(ci.low), float(ci.high)


# -- threshold of P(separable) against d/m -----------------------------------------------------

@dataclass(frozen=True)
class Threshold:
    """Result of :func:`threshold`: the fitted 50% point of P(separable) as a function of x = d/m.

    Attributes
    ----------
    ratio : float
        t̂, the maximum-likelihood 50% point of the probit curve Φ((x − t)/s).
    low, high : float
        Profile-likelihood interval of t at the requested level; ±inf when the deviance does not
        reach the cut within the search range (the data do not bound t on that side).
    width : float
        2 · Φ⁻¹(0.9) · ŝ ≈ 2.563 ŝ: the x-range over which the fitted curve rises from 10% to 90%.
    converged : bool
        The fit is certified the maximum (Newton decrement λ²/2 ≤ :data:`STATIONARY_NATS` where the
        log-likelihood is concave; never the optimizer's exit code), ŝ is not at a bound of its search range
        (at the lower bound the data look like a step: no grid point inside the transition) and both
        interval ends were found.
    decrement : float
        λ²/2 at (t̂, ŝ): the log-likelihood (nats) a Newton step would still gain; inf where none was computed.
    """

    ratio: float
    low: float
    high: float
    width: float
    converged: bool
    decrement: float = math.inf


def _as_counts(ratios: ArrayLike, successes: ArrayLike, n: ArrayLike) -> tuple[np.ndarray, ...]:
    """(x, k, n) as float arrays of one length: finite x, n > 0, 0 <= k <= n (k may be an expected count)."""
    try:
        x = np.asarray(ratios, dtype=np.float64)
        k = np.asarray(successes, dtype=np.float64)
        nn = np.asarray(n, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"ratios, successes, n: expected numeric arrays ({exc})") from None
    if x.ndim != 1 or k.shape != x.shape:
        raise InputError(f"ratios, successes: expected 1-D arrays of one length, got shapes {x.shape} and {k.shape}")
    if nn.ndim == 0:
        nn = np.full(x.shape, float(nn))
    if nn.shape != x.shape:
        raise InputError(f"n: expected a number or an array of shape {x.shape}, got shape {nn.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(k)) and np.all(np.isfinite(nn))):
        raise InputError("ratios, successes, n: entries must be finite")
    if np.any(nn <= 0):
        raise InputError(f"n: trial counts must be > 0, got {nn[nn <= 0][0]}")
    if np.any(k < 0) or np.any(k > nn):
        i = int(np.flatnonzero((k < 0) | (k > nn))[0])
        raise InputError(f"successes: entry {i} is {k[i]}, expected a count in [0, n={nn[i]:g}]")
    if np.unique(x).size < 2:
        raise InputError("ratios: need at least two distinct ratios to fit a transition")
    if np.all(k == 0):
        raise InputError("no transition inside the grid: no success at any ratio (P = 0 everywhere); "
                         "extend the grid to larger d/m")
    if np.all(k == nn):
        raise InputError("no transition inside the grid: every trial succeeded at every ratio (P = 1 "
                         "everywhere); extend the grid to smaller d/m")
    return x, k, nn


def _loglik(t: float, log_s: float, x: np.ndarray, k: np.ndarray, n: np.ndarray) -> float:
    """Binomial log-likelihood (without the constant log C(n, k)) of P(x) = Φ((x − t)/s).
    log Φ by ``log_ndtr``: exact in the tails, where log(norm.cdf) would give −inf."""
    z = (x - t) / np.exp(log_s)
    return float(np.sum(k * log_ndtr(z) + (n - k) * log_ndtr(-z)))


def _loglik_grad(t: float, log_s: float, x: np.ndarray, k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Gradient of :func:`_loglik` in (t, log s): dz/dt = −1/s, dz/d(log s) = −z."""
    s = np.exp(log_s)
    z = (x - t) / s
    logphi = stats.norm.logpdf(z)
    dz = k * np.exp(logphi - log_ndtr(z)) - (n - k) * np.exp(logphi - log_ndtr(-z))
    return np.array([float(np.sum(dz)) * -1.0 / s, float(np.sum(dz * -z))])


def threshold(ratios: ArrayLike, successes: ArrayLike, n: ArrayLike | int, level: float = 0.95) -> Threshold:
    """The 50% point of P(separable) against x = d/m, from successes[i] of n[i] trials at ratios[i].

    Model: P(x) = Φ((x − t)/s), s > 0 (probit). Why probit: Cover's curve (:func:`cover_probability`)
    is the Binomial(m−1, ½) CDF in d, which tends to a normal CDF in x (de Moivre-Laplace), with
    t = 1/2 and s = sqrt(m−1)/(2m) for two classes.

    * (t̂, ŝ) maximize the binomial log-likelihood (``scipy.optimize.minimize``, L-BFGS-B in
      (t, log s), started from the best point of a coarse grid so a local optimum cannot trap it);
    * the interval of t is the profile-likelihood one (Wilks): {t : 2 (logL(t̂, ŝ) − max_s logL(t, s))
      <= χ²₁ quantile at ``level``}, its ends found by ``brentq``;
    * ``width`` = 2 · Φ⁻¹(0.9) · ŝ, the 10%-90% width of the fitted curve.

    ``n`` is a number or one count per ratio; ``successes`` may be non-integer expected counts.
    Data with no success, or only successes, have no transition inside the grid: :class:`InputError`.
    t is searched in [min x − span, max x + span] and s in [1e-4, 10] · span (span = max x − min x).
    """
    x, k, nn = _as_counts(ratios, successes, n)
    level = _check_level(level)
    span = float(x.max() - x.min())
    t_bounds = (float(x.min()) - span, float(x.max()) + span)
    ls_bounds = (math.log(1e-4 * span), math.log(10.0 * span))

    def neg(p: np.ndarray) -> float:
        return -_loglik(p[0], p[1], x, k, nn)

    def neg_grad(p: np.ndarray) -> np.ndarray:
        return -_loglik_grad(p[0], p[1], x, k, nn)

    # Coarse grid start: t over the data range, s over its whole search range (log-spaced).
    grid = [(t, ls) for t in np.linspace(x.min(), x.max(), 41) for ls in np.linspace(*ls_bounds, 25)]
    start = min(grid, key=lambda p: neg(np.array(p)))
    fit = optimize.minimize(neg, np.array(start), jac=neg_grad, method="L-BFGS-B", bounds=[t_bounds, ls_bounds],
                            options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 1000})
    # L-BFGS-B's exit code is not a verdict: it reports ABNORMAL at correct optima when the line search cannot
    # improve on rounding. Polish by Newton's method where the problem is concave and certify the point there.
    t_hat, ls_hat, decrement = _probit_newton(float(fit.x[0]), float(fit.x[1]), x, k, nn)
    if not (t_bounds[0] <= t_hat <= t_bounds[1]) or not (ls_bounds[0] <= ls_hat <= ls_bounds[1]):
        t_hat, ls_hat, decrement = float(fit.x[0]), float(fit.x[1]), math.inf  # left the search box: not certified

    def profile(t: float) -> float:
        """max over log s of logL(t, s): unimodal in log s (logL is concave in 1/s at fixed t)."""
        res = optimize.minimize_scalar(lambda ls: -_loglik(t, ls, x, k, nn), bounds=ls_bounds, method="bounded",
                                       options={"xatol": 1e-9})
        return -float(res.fun)

    l_max = max(-neg(np.array([t_hat, ls_hat])), profile(t_hat))
    cut = float(stats.chi2.ppf(level, 1))

    def excess(t: float) -> float:
        return 2.0 * (l_max - profile(t)) - cut

    low = _interval_end(excess, t_hat, t_bounds[0])
    high = _interval_end(excess, t_hat, t_bounds[1])
    at_bound = min(ls_hat - ls_bounds[0], ls_bounds[1] - ls_hat) < 1e-6
    stationary = decrement <= STATIONARY_NATS
    converged = stationary and not at_bound and math.isfinite(low) and math.isfinite(high)
    return Threshold(ratio=t_hat, low=low, high=high, width=2.0 * Z90 * math.exp(ls_hat), converged=converged,
                     decrement=decrement)


#: The largest Newton decrement λ²/2 (nats of log-likelihood) at which :func:`threshold` calls its fit the maximum.
#: The interval's cut is χ²₁(0.95)/2 = 1.92 nats; a point within 1e-9 nats of stationarity moves it by nothing
#: that the printed digits show.
STATIONARY_NATS = 1e-9


def _probit_newton(t: float, log_s: float, x: np.ndarray, k: np.ndarray, n: np.ndarray,
                   steps: int = 100) -> tuple[float, float, float]:
    """Newton's method on the probit log-likelihood from (t, log s): (t, log s, λ²/2) at the end.

    In the coordinates (a, b) = (−t/s, 1/s) the curve is Φ(a + b x) and the log-likelihood
    Σ k log Φ(z) + (n − k) log Φ(−z), z = a + b x, is concave (log Φ is concave: probit regression), so a
    stationary point is the global maximum. λ² = gᵀ(−H)⁻¹g (g, H: gradient and Hessian in (a, b)) is the
    Newton decrement; λ²/2 is the gain the quadratic model still predicts, the certificate returned.
    Steps are halved until the log-likelihood does not decrease and b stays > 0. λ²/2 = inf when the
    Hessian is singular or b cannot stay positive (no interior maximum: the data look like a step).
    """
    a, b = -t / math.exp(log_s), math.exp(-log_s)

    def value(a: float, b: float) -> float:
        z = a + b * x
        return float(np.sum(k * log_ndtr(z) + (n - k) * log_ndtr(-z)))

    def derivatives(a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
        z = a + b * x
        lam_p = np.exp(stats.norm.logpdf(z) - log_ndtr(z))  # d/dz log Φ(z)
        lam_m = np.exp(stats.norm.logpdf(z) - log_ndtr(-z))  # −d/dz log Φ(−z)
        g1 = k * lam_p - (n - k) * lam_m
        g2 = -k * lam_p * (z + lam_p) - (n - k) * lam_m * (lam_m - z)  # second derivatives in z, both <= 0
        grad = np.array([g1.sum(), (g1 * x).sum()])
        hess = np.array([[g2.sum(), (g2 * x).sum()], [(g2 * x).sum(), (g2 * x * x).sum()]])
        return grad, hess

    current = value(a, b)
    half = math.inf
    for _ in range(steps):
        grad, hess = derivatives(a, b)
        try:
            step = np.linalg.solve(-hess, grad)
        except np.linalg.LinAlgError:
            return t, log_s, math.inf
        half = 0.5 * float(grad @ step)
        if not (math.isfinite(half) and half >= 0):
            return t, log_s, math.inf
        if half <= STATIONARY_NATS * 1e-3:
            break
        alpha = 1.0
        while alpha > 1e-12:
            a_new, b_new = a + alpha * step[0], b + alpha * step[1]
            if b_new > 0 and (new := value(a_new, b_new)) >= current:
                a, b, current = a_new, b_new, new
                break
            alpha *= 0.5
        else:
            break  # no step improves on rounding: the decrement computed above is the certificate
    return float(-a / b), float(-math.log(b)), half


def _interval_end(excess, t_hat: float, limit: float) -> float:
    """The root of ``excess`` between t̂ (where it is < 0) and ``limit``, by doubling steps then brentq;
    ±inf when ``excess`` stays <= 0 up to ``limit``."""
    direction = 1.0 if limit > t_hat else -1.0
    step = 1e-3 * abs(limit - t_hat)
    inner = t_hat
    while True:
        outer = t_hat + direction * min(step, abs(limit - t_hat))
        if excess(outer) > 0:
            return float(optimize.brentq(excess, min(inner, outer), max(inner, outer), xtol=1e-10))
        if outer == limit:
            return direction * math.inf
        inner, step = outer, 2.0 * step


__all__ = [
    "Threshold", "binomial_interval", "cover_probability", "random_instance", "threshold", "trial",
    "trial_seed", "trials",
]
