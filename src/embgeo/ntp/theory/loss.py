"""The NTP loss (eq. 2): cross-entropy, the empirical T-gram entropy 𝓗, the gap CE − 𝓗 as a KL, the gradient
and a smoothness constant.

Paper: ``ntp-implicit-bias-neurips.txt`` Sec. 2 (NeurIPS numbering).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_softmax, logsumexp

from embgeo.core.validate import check_dense_size
from embgeo.ntp.data import NTPData, check_W


def entropy(data: NTPData) -> float:
    """Empirical T-gram entropy 𝓗 = -Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log p̂_{j,z} (Sec. 2), in nats."""
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    return float(-np.sum(data.weights[rows] * P.data * np.log(P.data)))


def log_probs(data: NTPData, W: ArrayLike) -> np.ndarray:
    """log 𝕊(W h̄_j) for every context: array (m, V), computed with log-sum-exp."""
    W = check_W(data, W)
    check_dense_size("logits", (data.m, data.V), "evaluate the loss on a subset of contexts")
    return log_softmax(data.embeddings @ W.T, axis=1)


def cross_entropy(data: NTPData, W: ArrayLike) -> float:
    """CE(W) = -Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log 𝕊_z(W h̄_j), eq. (2). W: (V, d)."""
    logq = log_probs(data, W)
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    return float(-np.sum(data.weights[rows] * P.data * logq[rows, P.indices]))


def kl_gap(data: NTPData, W: ArrayLike) -> float:
    """CE(W) - 𝓗 computed as Σ_j π̂_j KL(p̂_j ‖ 𝕊(W h̄_j)) (Sec. 2), never as a difference.

    Per context the KL splits exactly into an in-support part and an off-support part,

        KL_j = [log Σ_{z∈S} p̂_z e^{r_z} − Σ_{z∈S} p̂_z r_z] + log(1 + Σ_{v∉S} e^{ℓ_v − lse_S(ℓ)}),

    with ℓ the logits and r_z = (ℓ_z − ℓ_{z_j}) − log(p̂_z / p̂_{z_j}) the log-odds residuals of (4).
    The first bracket is evaluated as log1p(Σ p̂ expm1(r)) − Σ p̂ r (second order in r), the second
    with log1p, so the result keeps its relative precision when the gap is far below the rounding
    of 𝓗 (e.g. 1e-17 at W* + γ W^mm), where CE − 𝓗 or a term-by-term sum would be rounding noise.
    """
    W = check_W(data, W)
    check_dense_size("logits", (data.m, data.V), "evaluate the loss on a subset of contexts")
    P = data.probs
    ctx = np.repeat(np.arange(data.m), data.support_sizes)
    Z = data.embeddings @ W.T  # (m, V)
    Zrel = Z - Z[np.arange(data.m), data.anchors][:, None]  # logits relative to the anchor
    p_anchor = P.max(axis=1).toarray().ravel()
    r = Zrel[ctx, P.indices] - (np.log(P.data) - np.log(p_anchor[ctx]))
    # log Σ_S p̂ e^r: as log1p(Σ p̂ expm1(r)) for the precision near W*, shifted by max r where r is
    # large (far from W*, e.g. a diverging run) so that nothing overflows.
    rmax = np.maximum.reduceat(r, P.indptr[:-1])  # per context (CSR rows, every support non-empty)
    far = rmax > 1.0
    with np.errstate(over="ignore"):
        s1 = np.bincount(ctx, weights=P.data * np.expm1(np.minimum(r, 1.0)), minlength=data.m)
    log_in = np.log1p(s1)
    if far.any():
        shifted = np.bincount(ctx, weights=P.data * np.exp(r - rmax[ctx]), minlength=data.m)
        log_in[far] = rmax[far] + np.log(shifted[far])
    s2 = np.bincount(ctx, weights=P.data * r, minlength=data.m)
    in_support = np.maximum(log_in - s2, 0.0)  # a KL between two distributions on S_j: ≥ 0
    # lse_S(ℓ) − ℓ_anchor = log Σ_S e^{Zrel} = log(Σ p̂ e^r / p̂_anchor) = log1p(s1) − log p̂_anchor
    lse_in = log_in - np.log(p_anchor)
    off = np.ones((data.m, data.V), dtype=bool)
    off[ctx, P.indices] = False
    X = np.where(off, Zrel - lse_in[:, None], -np.inf)
    with np.errstate(divide="ignore"):
        off_support = np.logaddexp(0.0, logsumexp(X, axis=1))  # log(1 + Σ_off e^x), exact for tiny sums
    return float(np.sum(data.weights * (in_support + off_support)))


def gradient(data: NTPData, W: ArrayLike) -> np.ndarray:
    """∇CE(W) = Σ_j π̂_j (𝕊(W h̄_j) - p̂_j) h̄_jᵀ, shape (V, d) (simplified form of eq. 24)."""
    R = np.exp(log_probs(data, W))
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    R[rows, P.indices] -= P.data
    return (R * data.weights[:, None]).T @ data.embeddings


def smoothness(data: NTPData) -> float:
    """A smoothness constant of CE: L = ½ λ_max(Σ_j π̂_j h̄_j h̄_jᵀ) (derived here: softmax Hessian ≤ ½ I).

    GD with step η ≤ 1/(2L) satisfies the paper's step condition (Lemma 3); η < 2/L still
    decreases the loss monotonically.
    """
    H = data.embeddings
    Hw = H * np.sqrt(data.weights)[:, None]
    small = Hw @ Hw.T if data.m <= data.d else Hw.T @ Hw
    return 0.5 * float(np.linalg.eigvalsh(small)[-1])
