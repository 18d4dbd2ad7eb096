"""Closed-form theory of the feature-collapse paper, computed exactly in float64.

Paper: ``feature-collapse.txt`` (Laurent, von Brecht, Bresson, arXiv:2305.16162 v1), Sec. 3 and Apps. A-G;
formulas garbled in the text are rebuilt from the lemmas each docstring names. Notation: n_c concepts of s_c words
each (n_w = n_c s_c words), sentences of L words, K classes with latent variables z_k ∈ [n_c]^L,
within-concept word frequencies μ_β, weight decay λ, γ = 1/(n_c − 1).

Array conventions (0-based, as in the authors' notebooks):

* ``W``: (n_w, d), row ``α·s_c + β`` is the embedding w_(α,β) of the β-th word of concept α;
* ``U``: (K, L, d), ``U[k, ℓ]`` is the block u_{k,ℓ} of row k of the linear layer (eq. 1);
* ``Z``: (K, L) integers in [0, n_c), ``Z[k, ℓ]`` = z_{k,ℓ};
* a frame ``F``: (n_c, d), row α is f_α.

Contents:

* Theorem 1 / E (type-I, network h, uniform μ): :func:`h_objective`, :func:`type1_constants`,
  :func:`type1_risk` (Lemma K).
* Theorem 3 / F (type-II, network h* with LayerNorm): :func:`h_star_objective`, :func:`type2_constants`,
  :func:`type2_risk` (Lemma R).
* Theorem 2 / Prop. D (type-III, network h, any μ, K = n_c^L): :func:`type3_magnitudes`,
  :func:`type3_risk`.
* Frames and configurations (eq. 4, Defs. 1-3): :func:`equiangular_frame`, :func:`layer_norm`,
  :func:`type1_configuration`, :func:`type2_configuration`, :func:`type3_configuration`,
  :func:`full_latent_space`, :func:`predicted_pca_singular_values`.
* The exact population risks (5) and (10) by enumeration: :func:`true_risk`, :func:`true_risk_gradient`
  (minimized in :mod:`embgeo.collapse.solvers`).
* Assumption B (App. B.2) and Theorem D (App. C, the sharp lower bound of the unregularized risk):
  :func:`assumption_b`, :func:`theorem_d_g`, :func:`bilinear_form`, :func:`theorem_d`.

Everything involving n_c^L or (1 + (n_c − 1)e^{−a})^L is evaluated in log space (our choice, against overflow).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import logsumexp

from embgeo.core.validate import as_float_array, check_bool, check_float, check_positive_int, make_rng
from embgeo.errors import DistributionError, InputError, ShapeError, SolverError, TooLargeError

#: :func:`true_risk` refuses to enumerate more sentences than this (all classes together).
MAX_SENTENCES = 10**6
#: ... and more (class, sentence) logit evaluations than this.
MAX_LOGITS = 2 * 10**8
#: Tolerance for accepting a user-supplied frame as equiangular (eq. 4).
FRAME_ATOL = 1e-8
#: Largest argument of expm1 before switching to logaddexp in the log-partition term.
_EXP_SAFE = 700.0


# -- validation ------------------------------------------------------------------------------

def _check_concepts(n_concepts) -> int:
    """n_c >= 2 (γ = 1/(n_c − 1) must exist)."""
    return check_positive_int("n_concepts", n_concepts, minimum=2)


def _check_classes(n_classes, n_concepts: int, length: int) -> int:
    """K distinct latent variables need K <= n_c^L (Thms 1, 3: z_k mutually distinct)."""
    K = check_positive_int("n_classes", n_classes)
    if math.log(K) > length * math.log(n_concepts) + 1e-12:
        raise InputError(f"n_classes: K = {K} distinct latent variables need K <= n_c^L = "
                         f"{n_concepts}^{length}")
    return K


def _check_freqs(freqs) -> np.ndarray:
    """μ: (s_c,) positive, summing to 1 (§1.1; the non-degenerate condition μ_β > 0 of Thm 3)."""
    mu = as_float_array("freqs", freqs, ndim=1)
    if mu.size == 0:
        raise DistributionError("freqs: expected at least one word frequency, got an empty array")
    if np.any(mu <= 0):
        i = int(np.argmin(mu))
        raise DistributionError(f"freqs: every word frequency must be > 0; freqs[{i}] = {mu[i]}")
    if abs(mu.sum() - 1.0) > 1e-9:
        raise DistributionError(f"freqs: frequencies must sum to 1, got sum {mu.sum()!r}")
    return mu


def _check_latents(Z, n_concepts: int) -> np.ndarray:
    """Z: (K, L) integer array with entries in [0, n_c)."""
    arr = np.asarray(Z)
    if arr.ndim != 2 or arr.size == 0:
        raise ShapeError(f"Z: expected a non-empty 2-D (K, L) array of concepts, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or np.any(arr != np.round(arr)):
            raise InputError(f"Z: expected integer concept indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.min() < 0 or arr.max() >= n_concepts:
        raise InputError(f"Z: concept indices must lie in [0, {n_concepts}); found range "
                         f"[{arr.min()}, {arr.max()}]")
    return arr


# -- log-space building blocks (against overflow of n_c^L) ------------------------------------

def _log_q(n_classes: int, n_concepts: int, length: int) -> float:
    """log(K/n_c^L) = log K − L log n_c, never forming n_c^L."""
    return math.log(n_classes) - length * math.log(n_concepts)


def _log_partition(a, n_concepts: int, length: int, log_q: float) -> np.ndarray:
    """log(1 − q + q(1 + (n_c − 1)e^{−a})^L), q = K/n_c^L, elementwise in the margin unit a.

    This is g of Thm D at an equimargin point: log(1 + Σ_{r≥1} |S_r| e^{−a r}) with
    |S_r| = q C(L, r)(n_c − 1)^r (Lemma B(i)), the bracket of H, H* and Lemmas K, R.
    """
    a = np.asarray(a, dtype=np.float64)
    q = math.exp(log_q)
    big = length * np.log1p((n_concepts - 1) * np.exp(-a))
    small = np.log1p(q * np.expm1(np.minimum(big, _EXP_SAFE)))
    with np.errstate(divide="ignore"):
        log_one_minus_q = math.log1p(-q) if q < 1 else -np.inf
    return np.where(big < _EXP_SAFE, small, np.logaddexp(log_one_minus_q, log_q + big))


def _minus_dlog_partition(a, n_concepts: int, length: int, log_q: float) -> np.ndarray:
    """−d/da of :func:`_log_partition`: L q e (1 + e)^{L−1} / S with e = (n_c − 1)e^{−a}."""
    a = np.asarray(a, dtype=np.float64)
    log_e = math.log(n_concepts - 1) - a
    log_num = math.log(length) + log_q + log_e + (length - 1) * np.log1p(np.exp(log_e))
    return np.exp(log_num - _log_partition(a, n_concepts, length, log_q))


def _argmin_convex(dfun, what: str) -> float:
    """Minimiser over t >= 0 of a convex function from its derivative ``dfun`` (bracket by doubling)."""
    from scipy.optimize import brentq  # imported where used: `embgeo list` loads this package, not the solvers

    if dfun(0.0) >= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(2100):
        if dfun(hi) > 0:
            break
        lo, hi = hi, 2.0 * hi
    else:
        raise SolverError(f"{what}: could not bracket the minimiser (derivative stays negative)")
    return float(brentq(dfun, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))


# -- Theorem 1 / E: type-I collapse of h ----------------------------------------------------

def _eta(n_concepts: int, n_words: int, length: int, n_classes: int) -> float:
    """η = (n_c/(n_c − 1)) / √(n_w K L) (Thm 1)."""
    return (n_concepts / (n_concepts - 1)) / math.sqrt(n_words * n_classes * length)


def _check_type1(n_concepts, n_words, length, n_classes, weight_decay):
    n_c = _check_concepts(n_concepts)
    n_w = check_positive_int("n_words", n_words)
    if n_w % n_c:
        raise InputError(f"n_words: must be a multiple of n_concepts = {n_c} (equal-size concepts), got {n_w}")
    L = check_positive_int("length", length)
    K = _check_classes(n_classes, n_c, L)
    lam = check_float("weight_decay", weight_decay)
    return n_c, n_w, L, K, lam


def h_objective(t: ArrayLike, n_concepts: int, n_words: int, length: int, n_classes: int,
                weight_decay: float) -> float | np.ndarray:
    """H(t) = log(1 − K/n_c^L + (K/n_c^L)(1 + (n_c − 1)e^{−ηt})^L) + λt (Theorem 1).

    ``t``: scalar or array (any shape, t >= 0 meaningful); returns the same shape (float or ndarray).
    At t = n_w c² this is the risk of a type-I configuration (Lemma K).
    """
    n_c, n_w, L, K, lam = _check_type1(n_concepts, n_words, length, n_classes, weight_decay)
    t = np.asarray(t, dtype=np.float64)
    val = _log_partition(_eta(n_c, n_w, L, K) * t, n_c, L, _log_q(K, n_c, L)) + lam * t
    return float(val) if val.ndim == 0 else val


@dataclass(frozen=True)
class Type1Constants:
    """Solution of Theorem 1: τ = argmin H, c = √(τ/n_w) (‖w‖), c' = √(τ/(KL)) (‖u‖).

    ``risk`` = H(τ) is the minimal true risk (5) (Lemma K); ``residual`` = H'(τ) certifies the
    minimiser. ``tau == 0`` means λ is so large that W = U = 0 is the minimiser.
    """

    tau: float
    c: float
    c_prime: float
    eta: float
    risk: float
    residual: float
    n_concepts: int
    n_words: int
    length: int
    n_classes: int
    weight_decay: float


def type1_constants(n_concepts: int, n_words: int, length: int, n_classes: int, weight_decay: float) -> Type1Constants:
    """Theorem 1 constants τ, c, c' for network h with uniform frequencies.

    Solves H'(τ) = 0 by bracketing (H is strictly convex), with H' = λ − η·L q e(1+e)^{L−1}/S in
    log space. Paper check: (3, 1200, 15, 1000, 1e-3) → c = 1.42214; K = 50 → c = 0.61602.
    """
    n_c, n_w, L, K, lam = _check_type1(n_concepts, n_words, length, n_classes, weight_decay)
    eta, log_q = _eta(n_c, n_w, L, K), _log_q(K, n_c, L)

    def dH(t: float) -> float:
        return lam - eta * float(_minus_dlog_partition(eta * t, n_c, L, log_q))

    tau = _argmin_convex(dH, "type1_constants")
    risk = float(_log_partition(eta * tau, n_c, L, log_q)) + lam * tau
    return Type1Constants(tau=tau, c=math.sqrt(tau / n_w), c_prime=math.sqrt(tau / (K * L)), eta=eta,
                          risk=risk, residual=dH(tau), n_concepts=n_c, n_words=n_w, length=L,
                          n_classes=K, weight_decay=lam)


def type1_risk(c: float, n_concepts: int, n_words: int, length: int, n_classes: int, weight_decay: float) -> float:
    """Lemma K: true risk (5) of a type-I configuration w = c f, u = c√(n_w/(KL)) f (set Ω^I_c).

    R = log(1 − K/n_c^L + (K/n_c^L)(1 + (n_c − 1)e^{−η n_w c²})^L) + λ n_w c² = H(n_w c²).
    Exact under Assumption A (e.g. K = n_c^L, all latent variables used) with uniform μ.
    """
    c = check_float("c", c, positive=False)
    return float(h_objective(n_words * c * c, n_concepts, n_words, length, n_classes, weight_decay))


# -- Theorem 3 / F: type-II collapse of h* --------------------------------------------------

def _eta_star(n_concepts: int, length: int, n_classes: int, dim: int) -> float:
    """η* = (n_c/(n_c − 1)) √(d/(KL)) (Thm 3; ω* = √d n_c/(n_c − 1) = √(KL) η*, Lemma R)."""
    return (n_concepts / (n_concepts - 1)) * math.sqrt(dim / (n_classes * length))


def _check_type2(n_concepts, length, n_classes, dim, weight_decay):
    n_c = _check_concepts(n_concepts)
    L = check_positive_int("length", length)
    K = _check_classes(n_classes, n_c, L)
    d = check_positive_int("dim", dim)
    if d < n_c:
        raise InputError(f"dim: a mean-zero equiangular frame of {n_c} vectors needs dim >= n_concepts = {n_c}, "
                         f"got {d}")
    lam = check_float("weight_decay", weight_decay)
    return n_c, L, K, d, lam


def h_star_objective(t: ArrayLike, n_concepts: int, length: int, n_classes: int, dim: int,
                     weight_decay: float) -> float | np.ndarray:
    """H*(t) = log(1 − K/n_c^L + (K/n_c^L)(1 + (n_c − 1)e^{−η* t})^L) + (λ/2)t² (Theorem 3).

    ``t``: scalar or array; returns the same shape. t = √(KL) c = ‖U‖_F at a type-II point (Lemma R).
    """
    n_c, L, K, d, lam = _check_type2(n_concepts, length, n_classes, dim, weight_decay)
    t = np.asarray(t, dtype=np.float64)
    val = _log_partition(_eta_star(n_c, L, K, d) * t, n_c, L, _log_q(K, n_c, L)) + 0.5 * lam * t * t
    return float(val) if val.ndim == 0 else val


@dataclass(frozen=True)
class Type2Constants:
    """Solution of Theorem 3: τ* = argmin H*, c = τ*/√(KL) = ‖u_{k,ℓ}‖; ‖φ(w)‖ = √d = ``word_norm``.

    ``risk`` = H*(τ*) (Lemma R), ``residual`` = H*'(τ*).
    """

    tau: float
    c: float
    eta: float
    word_norm: float
    risk: float
    residual: float
    n_concepts: int
    length: int
    n_classes: int
    dim: int
    weight_decay: float


def type2_constants(n_concepts: int, length: int, n_classes: int, dim: int, weight_decay: float) -> Type2Constants:
    """Theorem 3 constants τ*, c for network h* (LayerNorm); independent of μ.

    Example (computed here; the paper prints no value): d = 100, K = 1000, L = 15, n_c = 3, λ = 1e-3 → τ* ≈ 11.947,
    c ≈ 0.09755.
    """
    n_c, L, K, d, lam = _check_type2(n_concepts, length, n_classes, dim, weight_decay)
    eta, log_q = _eta_star(n_c, L, K, d), _log_q(K, n_c, L)

    def dH(t: float) -> float:
        return lam * t - eta * float(_minus_dlog_partition(eta * t, n_c, L, log_q))

    tau = _argmin_convex(dH, "type2_constants")
    risk = float(_log_partition(eta * tau, n_c, L, log_q)) + 0.5 * lam * tau * tau
    return Type2Constants(tau=tau, c=tau / math.sqrt(K * L), eta=eta, word_norm=math.sqrt(d), risk=risk,
                          residual=dH(tau), n_concepts=n_c, length=L, n_classes=K, dim=d, weight_decay=lam)


def type2_risk(c: float, n_concepts: int, length: int, n_classes: int, dim: int, weight_decay: float) -> float:
    """Lemma R: true risk (10) of a type-II configuration φ(w) = √d f, u = c f.

    R* = log(1 − K/n_c^L + (K/n_c^L)(1 + (n_c − 1)e^{−η*√(KL) c})^L) + (λ/2)KL c² = H*(√(KL) c).
    """
    c = check_float("c", c, positive=False)
    _, L, K, _, _ = _check_type2(n_concepts, length, n_classes, dim, weight_decay)
    return float(h_star_objective(math.sqrt(K * L) * c, n_concepts, length, n_classes, dim, weight_decay))


# -- Theorem 2 / Prop. D: type-III directional collapse of h ---------------------------------

@dataclass(frozen=True)
class Type3Magnitudes:
    """Solution (c, r_1..r_{s_c}) of the Theorem 2 system (7)-(8); ‖u‖ = c, ‖w_(α,β)‖ = r_β.

    ``residual``: max relative residual of the s_c + 1 equations; ``lambda_max``: the bound of
    condition (9), λ < √((L/n_c^{L+1}) Σ μ_β²).
    """

    c: float
    r: np.ndarray
    residual: float
    lambda_max: float
    n_concepts: int
    length: int
    weight_decay: float


def type3_lambda_max(freqs: ArrayLike, n_concepts: int, length: int) -> float:
    """Largest λ allowed by condition (9): λ² < (L/n_c^{L+1}) Σ_β μ_β² (Thm 2; Φ(0) > L n_c^{L−1}, Prop. D)."""
    mu = _check_freqs(freqs)
    n_c = _check_concepts(n_concepts)
    L = check_positive_int("length", length)
    return math.exp(0.5 * (math.log(L) - (L + 1) * math.log(n_c) + math.log(float(np.sum(mu * mu)))))


def _type3_p(c: float, mu: np.ndarray, n_c: int, L: int, lam: float) -> np.ndarray:
    """p_β = r_β/c solving (λ/L) p (n_c − 1 + e^{(1+γ)c² p}) = μ_β for fixed c (Prop. D), shape (s_c,).

    Each equation is solved for u = log p by brentq on u + logaddexp(log(n_c−1), (1+γ)c²e^u) = log(Lμ/λ),
    bracketed explicitly: at p = Lμ/(λ n_c) the left side is too large, and slope >= 1 in u.
    """
    from scipy.optimize import brentq  # imported where used: `embgeo list` loads this package, not the solvers

    k = (n_c / (n_c - 1)) * c * c
    log_nm1 = math.log(n_c - 1)
    out = np.empty_like(mu)
    for i, m in enumerate(mu):
        target = math.log(L * m / lam)
        u_hi = target - math.log(n_c)
        u_lo = target - float(np.logaddexp(log_nm1, k * math.exp(u_hi))) - 1e-3

        def f(u: float, target=target) -> float:
            return u + float(np.logaddexp(log_nm1, k * math.exp(u))) - target

        out[i] = math.exp(brentq(f, u_lo, u_hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500))
    return out


def type3_magnitudes(freqs: ArrayLike, n_concepts: int, length: int, weight_decay: float) -> Type3Magnitudes:
    """Solve the Theorem 2 system for the type-III magnitudes (c, r), as in Prop. D.

    Equations (7)-(8), for 1 <= β <= s_c:
        (λ/L)(r_β/c)(n_c − 1 + exp((n_c/(n_c − 1)) c r_β)) = μ_β,      Σ_β (r_β/c)² = L n_c^{L−1}.
    For fixed c each p_β = r_β/c is found by brentq; Φ(c) = Σ p_β(c)² is strictly decreasing from
    Φ(0) = Σ(Lμ_β/(λ n_c))² to 0, so c is the root of log Φ(c) = log(L n_c^{L−1}) in log c (doubling
    brackets). Requires condition (9); raises :class:`InputError` naming ``weight_decay`` otherwise.

    ``freqs``: (s_c,) positive, sum 1, in the word order β used by W. Returns r of shape (s_c,).
    """
    from scipy.optimize import brentq  # imported where used: `embgeo list` loads this package, not the solvers

    mu = _check_freqs(freqs)
    n_c = _check_concepts(n_concepts)
    L = check_positive_int("length", length)
    lam = check_float("weight_decay", weight_decay)
    lam_max = type3_lambda_max(mu, n_c, L)
    if not lam < lam_max:
        raise InputError(f"weight_decay: Theorem 2 needs the smallness condition (9) λ² < (L/n_c^(L+1)) Σ μ_β², "
                         f"i.e. λ < {lam_max:.6g} for these freqs, n_concepts = {n_c}, length = {L}; got {lam}")
    log_target = math.log(L) + (L - 1) * math.log(n_c)

    def g(x: float) -> float:
        p = _type3_p(math.exp(x), mu, n_c, L, lam)
        return math.log(float(np.sum(p * p))) - log_target

    x_lo, x_hi = _bracket_decreasing(g)
    x = brentq(g, x_lo, x_hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    c = math.exp(x)
    r = c * _type3_p(c, mu, n_c, L, lam)
    return Type3Magnitudes(c=c, r=r, residual=_type3_residual(c, r, mu, n_c, L, lam), lambda_max=lam_max,
                           n_concepts=n_c, length=L, weight_decay=lam)


def _bracket_decreasing(g) -> tuple[float, float]:
    """(lo, hi) with g(lo) > 0 > g(hi) for a decreasing g, by doubling steps from 0 in each direction."""
    lo, hi, step = 0.0, 0.0, 1.0
    for _ in range(60):
        if g(lo) > 0:
            break
        lo, step = lo - step, 2 * step
    else:
        raise SolverError("type3_magnitudes: could not bracket c from below")
    step = 1.0
    for _ in range(60):
        if g(hi) < 0:
            break
        hi, step = hi + step, 2 * step
    else:
        raise SolverError("type3_magnitudes: could not bracket c from above")
    return lo, hi


def _type3_residual(c: float, r: np.ndarray, mu: np.ndarray, n_c: int, L: int, lam: float) -> float:
    """Max relative residual of (7) (each β) and (8)."""
    lhs7 = (lam / L) * (r / c) * (n_c - 1 + np.exp((n_c / (n_c - 1)) * c * r))
    lhs8 = float(np.sum((r / c) ** 2)) / math.exp(math.log(L) + (L - 1) * math.log(n_c))
    return float(max(np.max(np.abs(lhs7 / mu - 1)), abs(lhs8 - 1)))


def type3_risk(c: float, r: ArrayLike, freqs: ArrayLike, n_concepts: int, length: int, weight_decay: float) -> float:
    """True risk (5) of a type-III configuration w_(α,β) = r_β f_α, u = c f, when K = n_c^L and {z} = Z.

    [inference, derived here] With all n_c^L latent variables the softmax sum factorises over positions:
    R = L Σ_β μ_β log(1 + (n_c − 1)e^{−(n_c/(n_c−1)) c r_β}) + (λ/2)(n_c Σ_β r_β² + n_c^L L c²).
    Its stationarity in (c, r) is exactly the system (7)-(8) of Theorem 2.
    """
    mu = _check_freqs(freqs)
    n_c = _check_concepts(n_concepts)
    L = check_positive_int("length", length)
    lam = check_float("weight_decay", weight_decay, positive=False)
    c = check_float("c", c, positive=False)
    r = as_float_array("r", r, ndim=1)
    if r.shape != mu.shape:
        raise ShapeError(f"r: expected shape {mu.shape} (one magnitude per word rank), got {r.shape}")
    a = (n_c / (n_c - 1)) * c * r
    loss = L * float(np.sum(mu * np.log1p((n_c - 1) * np.exp(-a))))
    return loss + 0.5 * lam * (n_c * float(np.sum(r * r)) + n_c**L * L * c * c)


# -- frames and configurations (eq. 4, Defs. 1-3) -------------------------------------------

def _helmert(m: int) -> np.ndarray:
    """(m − 1, m) orthonormal rows spanning 1_m^⊥ (Helmert contrasts)."""
    H = np.zeros((m - 1, m))
    for i in range(1, m):
        H[i - 1, :i] = 1.0
        H[i - 1, i] = -float(i)
        H[i - 1] /= math.sqrt(i * (i + 1))
    return H


def equiangular_frame(n: int, dim: int | None = None, *, mean_zero: bool = False,
                      seed: int | np.random.Generator | None = None) -> np.ndarray:
    """n equiangular unit vectors (simplex ETF, eq. 4): Σ_α f_α = 0, ⟨f_α, f_α'⟩ = −1/(n − 1) for α ≠ α'.

    Returns F: (n, dim), row α = f_α, with Gram F Fᵀ = (n/(n−1)) I − (1/(n−1)) 11ᵀ (Def. D/F).
    ``dim`` defaults to n and must be >= n − 1; with ``mean_zero=True`` every f_α also has zero mean
    over its coordinates (⟨f_α, 1_d⟩ = 0, needed for LayerNorm outputs φ(w) = √d f_α, Def. 2) and
    ``dim`` must be >= n. Default embedding: F = √(n/(n−1))(e_α − 1/n) padded with zeros (already
    mean-zero) or, for dim = n − 1, its Helmert coordinates. ``seed``: apply a random isometry.
    """
    n = check_positive_int("n", n, minimum=2)
    d = n if dim is None else check_positive_int("dim", dim)
    need = n if mean_zero else n - 1
    if d < need:
        raise InputError(f"dim: {'a mean-zero' if mean_zero else 'an'} equiangular frame of {n} vectors needs "
                         f"dim >= {need}, got {d}")
    H = _helmert(n)
    coords = math.sqrt(n / (n - 1)) * (np.eye(n) - 1.0 / n) @ H.T  # (n, n-1), an ETF in R^{n-1}
    if seed is not None:
        G = make_rng(seed).standard_normal((d, n - 1))
        if mean_zero:
            G -= G.mean(axis=0)
        E = np.linalg.qr(G)[0].T  # (n-1, d) orthonormal rows (in 1^⊥ if mean_zero)
    elif mean_zero:
        E = _helmert(d)[: n - 1]
    elif d >= n:
        E = np.hstack([H, np.zeros((n - 1, d - n))])
    else:
        E = np.eye(n - 1)
    return coords @ E


def _check_frame(F, n_c: int, dim: int | None, mean_zero: bool) -> np.ndarray:
    """Validate or build a frame (n_c, d)."""
    if F is None:
        if dim is None:
            dim = n_c if mean_zero else max(n_c - 1, 1)
        return equiangular_frame(n_c, dim, mean_zero=mean_zero)
    F = as_float_array("frame", F, ndim=2)
    if F.shape[0] != n_c or (dim is not None and F.shape[1] != dim):
        raise ShapeError(f"frame: expected shape ({n_c}, {dim if dim is not None else 'd'}), got {F.shape}")
    gram = (n_c / (n_c - 1)) * np.eye(n_c) - 1.0 / (n_c - 1)
    if not np.allclose(F @ F.T, gram, rtol=0, atol=FRAME_ATOL):
        raise InputError("frame: rows are not equiangular unit vectors (F Fᵀ ≠ (n/(n−1))I − (1/(n−1))11ᵀ, eq. 4)")
    if mean_zero and np.max(np.abs(F.mean(axis=1))) > FRAME_ATOL:
        raise InputError("frame: rows must have zero mean over coordinates (mean-zero frame, Def. 2)")
    return F


def _word_rows(frame: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """W: (n_c s_c, d) with row α·s_c + β = scales[β] f_α."""
    return (frame[:, None, :] * scales[None, :, None]).reshape(-1, frame.shape[1])


def type1_configuration(Z: ArrayLike, n_concepts: int, words_per_concept: int, c: float, c_prime: float, *,
                        dim: int | None = None, frame: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Type-I configuration (Def. 1): w_(α,β) = c f_α, u_{k,ℓ} = c' f_{z_{k,ℓ}}.

    ``Z``: (K, L) concepts; ``frame``: (n_c, d) equiangular rows (default :func:`equiangular_frame`
    with ``dim``, default n_c − 1). Returns (W (n_c s_c, d), U (K, L, d)). Use c, c' from
    :func:`type1_constants` for the Theorem 1 minimiser.
    """
    n_c = _check_concepts(n_concepts)
    s_c = check_positive_int("words_per_concept", words_per_concept)
    Z = _check_latents(Z, n_c)
    c = check_float("c", c, positive=False)
    c_prime = check_float("c_prime", c_prime, positive=False)
    F = _check_frame(frame, n_c, dim, mean_zero=False)
    return _word_rows(F, np.full(s_c, c)), c_prime * F[Z]


def type3_configuration(Z: ArrayLike, n_concepts: int, r: ArrayLike, c: float, *, dim: int | None = None,
                        frame: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Type-III configuration (Def. 3): w_(α,β) = r_β f_α, u_{k,ℓ} = c f_{z_{k,ℓ}}.

    ``r``: (s_c,) positive magnitudes (from :func:`type3_magnitudes` for the Theorem 2 critical point).
    Returns (W (n_c s_c, d), U (K, L, d)).
    """
    n_c = _check_concepts(n_concepts)
    r = as_float_array("r", r, ndim=1)
    if r.size == 0 or np.any(r < 0):
        raise InputError("r: expected a non-empty array of non-negative magnitudes")
    Z = _check_latents(Z, n_c)
    c = check_float("c", c, positive=False)
    F = _check_frame(frame, n_c, dim, mean_zero=False)
    return _word_rows(F, r), c * F[Z]


def type2_configuration(Z: ArrayLike, n_concepts: int, words_per_concept: int, c: float, *, dim: int,
                        frame: ArrayLike | None = None, word_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Type-II configuration (Def. 2) for h*: φ(w_(α,β)) = √d f_α, u_{k,ℓ} = c f_{z_{k,ℓ}}.

    f is a mean-zero equiangular frame in R^d (d >= n_c). W is returned as ``word_scale`` √d f_α
    (any positive scale gives the same φ(W)). Returns (W (n_c s_c, d), U (K, L, d)).
    """
    n_c = _check_concepts(n_concepts)
    s_c = check_positive_int("words_per_concept", words_per_concept)
    d = check_positive_int("dim", dim)
    Z = _check_latents(Z, n_c)
    c = check_float("c", c, positive=False)
    scale = check_float("word_scale", word_scale)
    F = _check_frame(frame, n_c, d, mean_zero=True)
    return _word_rows(F, np.full(s_c, scale * math.sqrt(d))), c * F[Z]


def full_latent_space(n_concepts: int, length: int, max_classes: int = MAX_SENTENCES) -> np.ndarray:
    """All n_c^L latent variables (the fully sampled case K = n_c^L, {z_k} = Z): (n_c^L, L) int64."""
    n_c = _check_concepts(n_concepts)
    L = check_positive_int("length", length)
    if n_c**L > max_classes:
        raise TooLargeError(f"length: n_c^L = {n_c}^{L} latent variables exceed max_classes = {max_classes}")
    return np.array(list(itertools.product(range(n_c), repeat=L)), dtype=np.int64).reshape(-1, L)


@dataclass(frozen=True)
class PCASingularValues:
    """Predicted top singular values of the centred word matrix (W, or φ(W) for h*) and of the u_{k,ℓ}."""

    W: np.ndarray
    U: np.ndarray


def predicted_pca_singular_values(constants: Type1Constants | Type2Constants | Type3Magnitudes, n_components: int = 3,
                                  *, n_words: int | None = None) -> PCASingularValues:
    """Top singular values of centred W (or φ(W)) and of the K·L vectors u_{k,ℓ} at a collapse point.

    [inference, derived here, not printed in the paper] Words sit on n_c equiangular directions, each concept
    equally often (Lemma B(ii) for the u's), so both matrices have n_c − 1 equal non-zero singular values:
    * Type1Constants: √(τ/(n_c − 1)) for W and U (n_c = 3: √(τ/2) ≈ 34.84 in Fig. 3);
    * Type2Constants: √(d n_w/(n_c − 1)) for φ(W) (needs ``n_words``), c√(KL/(n_c − 1)) for U;
    * Type3Magnitudes (K = n_c^L): √(n_c Σ r_β²/(n_c − 1)) for W, c√(n_c^L L/(n_c − 1)) for U.
    Returns arrays of length ``n_components``, zeros after the first n_c − 1.
    """
    k = check_positive_int("n_components", n_components)
    if isinstance(constants, Type1Constants):
        n_c = constants.n_concepts
        sw = su = math.sqrt(constants.tau / (n_c - 1))
    elif isinstance(constants, Type2Constants):
        n_c = constants.n_concepts
        n_w = check_positive_int("n_words", n_words)
        sw = math.sqrt(constants.dim * n_w / (n_c - 1))
        su = constants.c * math.sqrt(constants.n_classes * constants.length / (n_c - 1))
    elif isinstance(constants, Type3Magnitudes):
        n_c, L = constants.n_concepts, constants.length
        sw = math.sqrt(n_c * float(np.sum(constants.r**2)) / (n_c - 1))
        su = constants.c * math.sqrt(n_c**L * L / (n_c - 1))
    else:
        raise InputError(f"constants: expected Type1Constants, Type2Constants or Type3Magnitudes, "
                         f"got {type(constants).__name__}")
    mask = np.arange(k) < n_c - 1
    return PCASingularValues(W=np.where(mask, sw, 0.0), U=np.where(mask, su, 0.0))


# -- exact population risk (eqs. 5, 10) -----------------------------------------------------

def layer_norm(V: ArrayLike, eps: float = 0.0) -> np.ndarray:
    """Parameter-free LayerNorm φ(v) = (v − mean v)/√(var v + ε) over the last axis (§2.3; biased variance).

    ``eps = 0`` is the paper's φ (‖φ(v)‖ = √d; a constant row is an :class:`InputError`, φ being
    undefined); ``eps = 1e-5`` is PyTorch's LayerNorm default, used by the trained h*. ``V``: (..., d),
    returned as float64 of the same shape. The torch version, for training, is
    :func:`embgeo.collapse.model.layer_norm`.
    """
    V = as_float_array("V", V)
    eps = check_float("eps", eps, positive=False)
    if V.ndim == 0 or V.shape[-1] == 0:
        raise ShapeError(f"V: expected an array of shape (..., d) with d >= 1, got shape {V.shape}")
    C = V - V.mean(axis=-1, keepdims=True)
    sd = np.sqrt(np.mean(C * C, axis=-1, keepdims=True) + eps)
    if eps == 0 and np.any(sd == 0):
        row = tuple(int(i) for i in np.argwhere(sd[..., 0] == 0)[0])
        raise InputError(f"V: row {row} is constant, LayerNorm φ(w) = (w − mean)/σ is undefined (σ = 0)")
    return C / sd


def _layer_norm_backward(V: np.ndarray, dY: np.ndarray) -> np.ndarray:
    """∂/∂V of ⟨dY, φ(V)⟩ for φ = :func:`layer_norm` (ε = 0): (dY − mean dY − φ·mean(dY·φ))/σ, row-wise."""
    C = V - V.mean(axis=-1, keepdims=True)
    sd = np.sqrt(np.mean(C * C, axis=-1, keepdims=True))
    Y = C / sd
    return (dY - dY.mean(axis=-1, keepdims=True) - Y * np.mean(dY * Y, axis=-1, keepdims=True)) / sd


def true_risk(W: ArrayLike, U: ArrayLike, Z: ArrayLike, freqs: ArrayLike, n_concepts: int, weight_decay: float,
              layernorm: bool = False, max_sentences: int = MAX_SENTENCES) -> float:
    """Exact population risk R (eq. 5) or R* (eq. 10, ``layernorm=True``) by enumerating all sentences.

    h(x)_j = Σ_ℓ ⟨u_{j,ℓ}, v_{x_ℓ}⟩ with v = w (h) or φ(w) (h*, Lemma L). The loss is the cross-entropy
    averaged over k uniformly and x ~ D_{z_k} (D_{z_k}(x) = Π_ℓ μ_{β_ℓ} on the s_c^L sentences of class
    k), plus (λ/2)(‖W‖² + ‖U‖²) for h or (λ/2)‖U‖² for h*.

    Shapes: W (n_c s_c, d), U (K, L, d), Z (K, L), freqs (s_c,). Refuses (TooLargeError) more than
    ``max_sentences`` sentences over all classes or more than MAX_LOGITS logits. Cost: K² s_c^L
    logits. Its gradient: :func:`true_risk_gradient`; its minimizer:
    :func:`embgeo.collapse.solvers.minimize_true_risk`.
    """
    return _true_risk(W, U, Z, freqs, n_concepts, weight_decay, layernorm, max_sentences, gradient=False)[0]


def true_risk_gradient(W: ArrayLike, U: ArrayLike, Z: ArrayLike, freqs: ArrayLike, n_concepts: int,
                       weight_decay: float, layernorm: bool = False,
                       max_sentences: int = MAX_SENTENCES) -> tuple[float, np.ndarray, np.ndarray]:
    """(R, ∂R/∂W (n_w, d), ∂R/∂U (K, L, d)) of :func:`true_risk`, exactly (same arguments, same value).

    The derivative of the cross-entropy in the logit h(x)_j is D_{z_k}(x)(softmax_j(h(x)) − δ_jk);
    summed over the sentences with word v at position ℓ it gives ∂R/∂⟨u_{j,ℓ}, v_v⟩, hence the
    gradients in U and in the word representations (through φ for h*). Twice the cost of the value.
    """
    return _true_risk(W, U, Z, freqs, n_concepts, weight_decay, layernorm, max_sentences, gradient=True)


def _true_risk(W, U, Z, freqs, n_concepts, weight_decay, layernorm: bool, max_sentences: int, gradient: bool):
    """The risk, and with ``gradient`` its derivatives in W and U: (R, dW, dU) or (R, None, None)."""
    n_c = _check_concepts(n_concepts)
    mu = _check_freqs(freqs)
    s_c = mu.size
    W = as_float_array("W", W, ndim=2)
    U = as_float_array("U", U, ndim=3)
    Z = _check_latents(Z, n_c)
    lam = check_float("weight_decay", weight_decay, positive=False)
    layernorm = check_bool("layernorm", layernorm)
    K, L, d = U.shape
    if W.shape != (n_c * s_c, d):
        raise ShapeError(f"W: expected shape ({n_c * s_c}, {d}) = (n_concepts·len(freqs), U.shape[2]), got {W.shape}")
    if Z.shape != (K, L):
        raise ShapeError(f"Z: expected shape {(K, L)} = U.shape[:2], got {Z.shape}")
    n_sent = K * s_c**L
    if n_sent > max_sentences or K * n_sent > MAX_LOGITS:
        raise TooLargeError(f"true_risk: K·s_c^L = {K}·{s_c}^{L} sentences (× {K} logits each) exceed the "
                            f"enumeration budget ({max_sentences} sentences, {MAX_LOGITS} logits); "
                            "estimate the risk by sampling sentences instead")
    V = layer_norm(W) if layernorm else W
    G = np.einsum("kld,vd->klv", U, V)  # G[j, ℓ, v] = ⟨u_{j,ℓ}, v_v⟩
    dG = np.zeros_like(G) if gradient else None
    prob = _sentence_probs(mu, L)
    total = 0.0
    for k in range(K):
        logits = np.zeros((K, 1))
        for ell in range(L):
            start = Z[k, ell] * s_c
            block = G[:, ell, start:start + s_c]
            logits = (logits[:, :, None] + block[:, None, :]).reshape(K, -1)  # sentences in row-major (β_1..β_ℓ)
        lse = logsumexp(logits, axis=0)
        total += float(prob @ (lse - logits[k]))
        if gradient:  # A[j, x] = D(x)(softmax_j(h(x)) − δ_jk), then summed over all positions but ℓ
            A = np.exp(logits - lse) * prob
            A[k] -= prob
            A = A.reshape((K,) + (s_c,) * L)
            for ell in range(L):
                start = Z[k, ell] * s_c
                dG[:, ell, start:start + s_c] += A.sum(axis=tuple(1 + m for m in range(L) if m != ell))
    reg = float(np.sum(U * U)) + (0.0 if layernorm else float(np.sum(W * W)))
    risk = total / K + 0.5 * lam * reg
    if not gradient:
        return risk, None, None
    dG /= K
    dU = np.einsum("klv,vd->kld", dG, V) + lam * U
    dV = np.einsum("klv,kld->vd", dG, U)
    dW = _layer_norm_backward(W, dV) if layernorm else dV + lam * W
    return risk, dW, dU


def _sentence_probs(mu: np.ndarray, L: int) -> np.ndarray:
    """Π_ℓ μ_{β_ℓ} over all (β_1..β_L) in row-major order: (s_c^L,)."""
    p = np.ones(1)
    for _ in range(L):
        p = np.outer(p, mu).ravel()
    return p


# -- Assumption B (App. B.2) and Theorem D (App. C) --------------------------------------------

#: :func:`assumption_b` builds Γ^{(j,k)} for chunks of pairs holding at most this many entries (16 MB; memory only).
_ENTRIES_PER_CHUNK = 2_000_000


def _one_hot(Z: np.ndarray, n_c: int) -> np.ndarray:
    """(K, L, n_c) with [k, ℓ, α] = 1 iff z_{k,ℓ} = α: row ℓ of the one-hot Z_kᵀ (Z_k ∈ R^{n_c×L}, eq. 22)."""
    K, L = Z.shape
    O = np.zeros((K, L, n_c))
    O[np.arange(K)[:, None], np.arange(L)[None, :], Z] = 1.0
    return O


def _sym_coordinates(n_c: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (rows, cols) of the n_c(n_c + 1)/2 coordinates of a symmetric matrix: diagonal first, then α < α'."""
    iu = np.triu_indices(n_c, 1)
    return (np.concatenate([np.arange(n_c), iu[0]]), np.concatenate([np.arange(n_c), iu[1]]))


@dataclass(frozen=True)
class AssumptionB:
    """Whether latent variables satisfy Assumption B (App. B.2), with its certificate.

    ``dimension``: dimension of the space of symmetric A (n_c × n_c) solving the equations (44); always >= 2
    (𝒜 = {aI + b11ᵀ} solves them), and Assumption B holds iff it is exactly 2. ``n_equations``: stacked
    equations, K², one per ordered pair (j, k): Γ^{(j,k)} minus the Γ of its distance's representative pair;
    ``n_unknowns`` = n_c(n_c + 1)/2; ``rank`` = n_unknowns − dimension. ``smallest_retained``: the smallest
    singular value counted in the rank (nan if the rank is 0); ``largest_discarded``: the largest one below
    ``tolerance`` (0 if none), so ``smallest_retained / largest_discarded`` is the gap the rank decision rests on.
    Singular values are those of the stacked equations in Frobenius-orthonormal coordinates of symmetric matrices.
    """

    holds: bool
    dimension: int
    n_equations: int
    n_unknowns: int
    rank: int
    smallest_retained: float
    largest_discarded: float
    tolerance: float

    def certificate(self) -> str:
        """One line for a claim's premise or note."""
        return (f"solutions of eqs. (44) among symmetric {self.n_unknowns}-coordinate matrices: dimension "
                f"{self.dimension} (Assumption B needs 2 = dim 𝒜) from {self.n_equations} equations of rank "
                f"{self.rank}; smallest singular value kept {self.smallest_retained:.3g}, largest dropped "
                f"{self.largest_discarded:.3g} (rank tolerance {self.tolerance:.3g})")


def assumption_b(Z: ArrayLike, n_concepts: int) -> AssumptionB:
    """Decide the paper's Assumption B (App. B.2, eq. 44) for latent variables ``Z`` (K, L) in [0, n_c).

    With Z_k ∈ R^{n_c×L} the one-hot matrix of z_k and Γ^{(j,k)} = Z_j (Z_j − Z_k)ᵀ, Assumption B says: every PSD
    A with ⟨A, Γ^{(j,k)} − Γ^{(j',k')}⟩_F = 0 whenever dist(z_j, z_k) = dist(z_j', z_k') lies in
    𝒜 = {aI + b11ᵀ}. Derivation of the test:

    * 𝒜 always solves the equations: ⟨I, Γ^{(j,k)}⟩ = ⟨Z_j, Z_j − Z_k⟩ = L − (L − dist) = dist(z_j, z_k), and
      ⟨11ᵀ, Γ^{(j,k)}⟩ = (1ᵀZ_j)(Z_j − Z_k)ᵀ1 = 1_Lᵀ(1_L − 1_L) = 0, since each column of Z_j is one-hot.
    * The solution set is a linear space S; PSD matrices are symmetric, and ⟨A, Γ⟩ = ⟨A, sym Γ⟩ for symmetric A.
      If S (among symmetric matrices) contains B ∉ 𝒜, then I + εB is PSD for small ε (I is interior to the
      PSD cone), solves the equations and is not in 𝒜. So Assumption B holds iff dim S = 2 = dim 𝒜.
    * The equations for one distance r are spanned by the differences against a single pair at that distance,
      so S is the null space of those differences, stacked over all r.

    dim S is n_c(n_c + 1)/2 minus the numerical rank of the stacked equations, written in the coordinates
    (A_αα, √2 A_αα' for α < α') where ⟨A, Γ⟩ is a dot product with (Γ_αα, (Γ_αα' + Γ_α'α)/√2). Rank tolerance:
    numpy's ``matrix_rank`` default, max(n_equations, n_unknowns)·ε·σ_max, with σ the singular values of the
    stack (accumulated as the R factor of a QR over chunks of pairs, which has the same singular values).
    The entries are integers, so the retained singular values sit far above it (see the certificate).

    Cost: O(K² (L n_c² + n_c⁴)) time over the K² pairs (about 1 s for K = 1000, n_c = 3, L = 15), memory bounded
    by chunks of pairs. Lemma C: all n_c^L latent variables (K = n_c^L) satisfy it.
    """
    n_c = _check_concepts(n_concepts)
    Z = _check_latents(Z, n_c)
    K, L = Z.shape
    O = _one_hot(Z, n_c)
    counts = O.sum(axis=1)  # (K, n_c): n_j[α] = #{ℓ : z_{j,ℓ} = α}, the diagonal of Z_j Z_jᵀ
    rows, cols = _sym_coordinates(n_c)
    half = np.where(rows == cols, 0.5, 1.0 / math.sqrt(2.0))  # (Γ + Γᵀ)_αα'/2 on the diagonal, /√2 off it
    m = rows.size
    reps = np.zeros((L + 1, m))  # one equation vector per distance r = 0..L: the first pair met at that distance
    seen = np.zeros(L + 1, dtype=bool)
    R = np.zeros((0, m))
    n_eq = 0
    step = max(1, _ENTRIES_PER_CHUNK // (K * n_c * n_c))
    for start in range(0, K, step):
        J = slice(start, min(K, start + step))
        C = np.einsum("jla,klb->jkab", O[J], O)  # Z_j Z_kᵀ: how often α in z_j meets α' in z_k at one position
        G = -C
        G[..., np.arange(n_c), np.arange(n_c)] += counts[J][:, None, :]  # Γ^{(j,k)} = diag(n_j) − Z_j Z_kᵀ
        v = ((G[..., rows, cols] + G[..., cols, rows]) * half).reshape(-1, m)
        dist = np.rint(L - np.trace(C, axis1=2, axis2=3)).astype(np.int64).reshape(-1)
        for r in np.unique(dist[~seen[dist]]):
            reps[r], seen[r] = v[np.argmax(dist == r)], True
        D = v - reps[dist]
        n_eq += D.shape[0]
        R = np.linalg.qr(np.vstack([R, D]), mode="r")
    s = np.zeros(m)
    sv = np.linalg.svd(R, compute_uv=False)
    s[:sv.size] = sv
    tol = float(max(n_eq, m) * np.finfo(float).eps * s[0])
    rank = int(np.sum(s > tol)) if s[0] > 0 else 0
    return AssumptionB(holds=(m - rank == 2), dimension=m - rank, n_equations=n_eq, n_unknowns=m, rank=rank,
                       smallest_retained=float(s[rank - 1]) if rank else math.nan,
                       largest_discarded=float(s[rank]) if rank < m else 0.0, tolerance=tol)


def theorem_d_g(x: ArrayLike, n_concepts: int, length: int, n_classes: int) -> float | np.ndarray:
    """g(x) = log(1 + Σ_{r=1}^L |S_r| e^{θ_r x/K}) of Theorem D (eq. 49), elementwise in ``x`` (any shape).

    |S_r| = (K/n_c^L) C(L, r)(n_c − 1)^r and θ_r = n_c r/((n_c − 1)L) are Lemma B's (i) and (iii). The OCR of
    eq. (49) lost the exponent; this is the reading rebuilt from Lemma E, 𝔐(r) = (θ_r/K)⟨Ū, WQᵀZ⟩_F, so that
    Lemma D's log(1 + Σ_r |S_r| e^{−𝔐(r)}) is g(−⟨Ū, WQᵀZ⟩_F) (App. C, Theorem D). With a = −n_c x/((n_c − 1)LK)
    the sum is q((1 + (n_c − 1)e^{−a})^L − 1), q = K/n_c^L, evaluated in log space as H's bracket. Strictly
    increasing; g(0) = log K.
    """
    n_c = _check_concepts(n_concepts)
    L = check_positive_int("length", length)
    K = _check_classes(n_classes, n_c, L)
    a = -np.asarray(x, dtype=np.float64) * n_c / ((n_c - 1) * L * K)
    val = _log_partition(a, n_c, L, _log_q(K, n_c, L))
    return float(val) if val.ndim == 0 else val


@dataclass(frozen=True)
class TheoremD:
    """Both sides of Theorem D (eqs. 50-51) at one (W, U).

    ``risk``: R_0(W, U), the unregularized risk (eq. 45, :func:`true_risk` with λ = 0); ``inner``: ⟨Ū, WQᵀZ⟩_F;
    ``bound``: g(−inner) (:func:`theorem_d_g`); ``gap`` = risk − bound (0 on 𝒩 ∩ ℰ, > 0 on 𝒩 ∩ ℰᶜ);
    ``u_sum``: ‖Σ_k Ū_k‖_F / ‖U‖_F, 0 exactly on 𝒩 (the theorem's premise; nan if U = 0).
    """

    risk: float
    inner: float
    bound: float
    gap: float
    u_sum: float


def bilinear_form(W: ArrayLike, U: ArrayLike, Z: ArrayLike, freqs: ArrayLike, n_concepts: int) -> float:
    """⟨Ū, WQᵀZ⟩_F (App. A.3, Lemma E; Lemma F's objective) = Σ_{k,ℓ} ⟨u_{k,ℓ}, Σ_β μ_β w_(z_{k,ℓ}, β)⟩.

    Column (k, ℓ) of WQᵀZ is the μ-weighted mean embedding of concept z_{k,ℓ} (Q ζ(α, β) = μ_β e_α). Shapes as
    :func:`true_risk`: W (n_c s_c, d), U (K, L, d), Z (K, L), freqs (s_c,).
    """
    n_c = _check_concepts(n_concepts)
    mu = _check_freqs(freqs)
    W = as_float_array("W", W, ndim=2)
    U = as_float_array("U", U, ndim=3)
    Z = _check_latents(Z, n_c)
    if W.shape != (n_c * mu.size, U.shape[2]) or Z.shape != U.shape[:2]:
        raise ShapeError(f"W, U, Z: expected shapes ({n_c * mu.size}, d), (K, L, d), (K, L); got {W.shape}, "
                         f"{U.shape}, {Z.shape}")
    concept_means = np.einsum("b,abd->ad", mu, W.reshape(n_c, mu.size, -1))  # (n_c, d): row α of (WQᵀ)ᵀ
    return float(np.einsum("kld,kld->", U, concept_means[Z]))


def theorem_d(W: ArrayLike, U: ArrayLike, Z: ArrayLike, freqs: ArrayLike, n_concepts: int) -> TheoremD:
    """Theorem D (App. C): R_0(W, U) against its lower bound g(−⟨Ū, WQᵀZ⟩_F) at one (W, U) of network h.

    Under Assumption A, R_0 = g(−⟨Ū, WQᵀZ⟩_F) on 𝒩 ∩ ℰ and R_0 > g(−⟨Ū, WQᵀZ⟩_F) on 𝒩 ∩ ℰᶜ, where 𝒩 = {Σ_k Ū_k = 0}
    and ℰ is the equimargin set (Def. B); any frequencies μ (Lemma E uses Q, not uniformity). This function
    evaluates both sides for any inputs; whether the premises (Assumption A, 𝒩) hold is the caller's to check
    (:func:`embgeo.collapse.data.symmetry_diagnostic`, ``u_sum``). R_0 is :func:`true_risk` with λ = 0 (same
    shapes and enumeration budget), g is :func:`theorem_d_g` with K, L from ``Z``.
    """
    n_c = _check_concepts(n_concepts)
    Z = _check_latents(Z, n_c)
    risk = true_risk(W, U, Z, freqs, n_c, 0.0)
    inner = bilinear_form(W, U, Z, freqs, n_c)
    bound = theorem_d_g(-inner, n_c, Z.shape[1], Z.shape[0])
    U = np.asarray(U, dtype=np.float64)
    norm = float(np.linalg.norm(U))
    u_sum = float(np.linalg.norm(U.sum(axis=0))) / norm if norm > 0 else math.nan
    return TheoremD(risk=risk, inner=inner, bound=bound, gap=risk - bound, u_sum=u_sum)
