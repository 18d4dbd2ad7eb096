"""Where a decoder W sits relative to the paper's W* and W^mm (Thm. 2), on the rows the data constrain.

The parts of an analysis (:func:`embgeo.ntp.analysis.analyze.analyze`) that take a model's head W (V, d) beside the
embeddings H = ``data.embeddings`` (m, d): CE(W) − 𝓗 as a KL in row blocks (:func:`blockwise_kl`), the parts that
need no solver (:func:`alignment_prep`: P_F(W), the NTP-margin of P_⊥(W)) and the alignment itself
(:func:`alignment`). numpy/scipy only, float64; never an m × V array.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from embgeo.errors import SolverError, TooLargeError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData
from embgeo.ntp.measure.geometry import BLOCK_BYTES
from embgeo.ntp.measure.metrics import constrained_alignment, cosine, equal_rows_bound, token_split


def blockwise_kl(data: NTPData, W: np.ndarray) -> float:
    """CE(W) − 𝓗 of eq. (2) as Σ_j π̂_j KL(p̂_j ‖ 𝕊(W h̄_j)) (:func:`theory.kl_gap`), over row blocks of contexts
    (never an m × V array)."""
    rows = max(1, BLOCK_BYTES // (8 * data.V))
    kl = 0.0
    for s in range(0, data.m, rows):
        e = min(s + rows, data.m)
        w = data.weights[s:e]
        kl += float(w.sum()) * theory.kl_gap(NTPData(data.embeddings[s:e], data.probs[s:e], w / w.sum()), W)
    return kl


@dataclass
class AlignmentPrep:
    """The alignment's parts that need no solver: P_F(W) (V, d) when W* exists, the normalized NTP-margin of P_⊥(W),
    and the error that stopped either (SolverError / TooLargeError text)."""

    PFW: np.ndarray | None = None
    margin: float = math.nan
    error: str | None = None


def alignment_prep(data: NTPData, W: np.ndarray, F: theory.Subspace, w_star: np.ndarray | None) -> AlignmentPrep:
    """P_F(W) (V, d) (when W* ``w_star`` exists) and the NTP-margin of P_⊥(W) (:func:`theory.ntp_margin`), before
    the solvers."""
    prep = AlignmentPrep()
    try:
        prep.PFW = None if w_star is None else F.project(W)
        if not np.all(data.support_sizes == data.V):
            prep.margin = theory.ntp_margin(data, W, F, perp=None if prep.PFW is None else W - prep.PFW)
    except (SolverError, TooLargeError) as exc:  # SolverError: the limit was reached before F's exact solve
        prep.error = str(exc)
    return prep


def alignment(data: NTPData, W: np.ndarray, w_star: np.ndarray | None, w_mm: np.ndarray | None, eps: float,
               prep: AlignmentPrep) -> dict:
    """Where W sits relative to W*(H) and W^mm(H) (Thm. 2: P_F(W) → W*, W/‖W‖ → W^mm/‖W^mm‖), on the rows the
    theory constrains.

    Why not all V rows. A token that is never a next token in the data ("unseen": ~46k of SmolLM2's 49,152 at
    m = 2000) plays the same role in every constraint of Defs. 1-3, so W^mm's unseen rows are equal and W*'s are
    zero (:mod:`embgeo.ntp.measure.metrics`, (i)); the softmax ignores W → W + 1cᵀ (ii), and W^mm has zero column sums,
    so after that shift its unseen rows are ~0. A pretrained head's unseen rows differ from one another (about 90 % of
    ‖W‖² at SmolLM2's size), and that part is orthogonal to every matrix with equal unseen rows and zero column sums:
    cos(W, W^mm) ≤ ``cos_mm_bound`` = ‖P(W)‖/‖W‖ (:func:`embgeo.ntp.measure.metrics.equal_rows_bound`, ≈ ‖W_seen‖/‖W‖ ≈
    0.06-0.1), whatever the model — a statistic that cannot come out otherwise. It is kept, with its bound beside it.

    What is reported instead (:func:`embgeo.ntp.measure.metrics.constrained_alignment`): T(W), the seen rows and the
    mean unseen row, centred by their unweighted mean — invariant under W → W + 1cᵀ, and in the geometry of all pairwise
    row differences (the logit differences Defs. 1-3 constrain), each token once and the unseen block once:
    ``rows_cos_mm`` = cos(T W, T W^mm), ``rows_dist_mm``, ``rows_cos_corrected`` = cos(T(W − W*), T W^mm), each
    with the interval ``_lo``/``_hi`` that holds for the true W^mm when the NTP-SVM certifies only
    ‖Ŵ − W^mm‖ ≤ ε‖W^mm‖ (ε = ``svm_error_bound``; carried through T as ``rows_error_bound``); ``star_cos`` =
    cos(P_F(W), W*) and ``subspace_error`` = ‖P_F(W) − W*‖/‖W*‖ (already shift-free: 1cᵀ ⊥ F). The unseen block
    apart: ``unseen_share`` (of ‖W‖²), ``unseen_share_centred``, ``unseen_spread_share``, and the mean unseen row's
    logit against the in-support and seen rows (``unseen_logit_vs_support``, ``unseen_logit_vs_seen``; the same for
    W^mm as ``unseen_logit_vs_support_mm``). The old all-rows ``cos_mm``, ``cos_corrected`` (± 2ε) with
    ``cos_mm_bound``, ``cos_corrected_bound``; ``margin``: the normalized NTP-margin of P_⊥(W)
    (``prep``, :func:`_alignment_prep`). ``w_star``, ``w_mm`` (V, d) or None; ``eps``: W^mm's certified relative error
    (NaN when none).
    """
    out = {"cos_mm": math.nan, "cos_corrected": math.nan, "subspace_error": math.nan, "margin": prep.margin,
           "svm_error_bound": eps, "norm_W": float(np.linalg.norm(W)),
           "norm_w_star": math.nan if w_star is None else float(np.linalg.norm(w_star)),
           "norm_w_mm": math.nan if w_mm is None else float(np.linalg.norm(w_mm)),
           "cos_corrected_bound": math.nan, "unseen_logit_vs_support_mm": math.nan}
    seen, unseen = token_split(data)
    star = None if prep.PFW is None else w_star  # W* with P_F(W) only: the projection is not made again here
    out.update(constrained_alignment(data, W, w_star=star, w_mm=w_mm, error_bound=eps if eps == eps else 0.0,
                                     PFW=prep.PFW))
    if w_mm is not None:
        from embgeo.ntp.measure.metrics import unseen_block

        out["unseen_logit_vs_support_mm"] = unseen_block(data, w_mm, seen, unseen)["unseen_logit_vs_support"]
        if w_star is not None:
            D = W - w_star
            out["cos_corrected"] = cosine(D, w_mm)
            out["cos_corrected_bound"] = equal_rows_bound(D, seen, unseen)
    return out
