"""Trained or measured vs predicted: the quantities the attention paper's claims are made of.

Pure numpy/scipy/pandas (no torch; tensors are accepted where noted and converted):

* Lemma 4.1: :func:`lemma41_slope` (the fitted slope of the step-1 update along v on α_s),
  :func:`lemma41_residual` (the update against the prediction (η0/2)α_s v of
  :func:`~embgeo.attention.theory.lemma41_prediction`) and :func:`lemma41_table` (both across d,
  beside the first-order error and the paper's bound).
* Figs. 1-3: :func:`rank_test` (Spearman ρ with a one-sided p-value, exact for at most
  :data:`EXACT_RANK_TEST` tokens), :func:`base_rate_centre` (the vertex of the V of ⟨E_s, p⟩),
  :func:`excess_signed_frequency` (|α_s| about a label-independent token's, for "more frequent tokens have
  a higher attention score"), :func:`level_summary` and :func:`level_statistics` (Fig. 2 per level of the
  K-level data).
* Theorem 4.3: :func:`direction_measures` (the last iterate p_T against the max-margin p̂ and
  other candidates' directions, and the growth of ‖p_t‖).

Padding follows the package convention (``pad_id``, :mod:`embgeo.attention`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.stats import rankdata, spearmanr

from embgeo.attention.data import check_dataset, token_counts
from embgeo.attention.theory import as_vector, lemma41_bound, lemma41_error_scale, lemma41_prediction
from embgeo.core.validate import as_float_array
from embgeo.errors import InputError, ShapeError

__all__ = ["EXACT_RANK_TEST", "LevelStatistics", "RankTest", "base_rate_centre", "direction_measures",
           "excess_signed_frequency", "lemma41_residual", "lemma41_slope", "lemma41_table", "level_statistics",
           "level_summary", "rank_test"]


# -- Lemma 4.1 ----------------------------------------------------------------------------------------

def _update_arrays(dE: ArrayLike, alpha: ArrayLike, v: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    dE = as_float_array("dE", dE, ndim=2)
    alpha = as_vector("alpha", alpha)
    v = as_vector("v", v)
    if alpha.shape != (dE.shape[0],) or v.shape != (dE.shape[1],):
        raise ShapeError(f"dE (|S|, d), alpha (|S|,), v (d,): got shapes {dE.shape}, {alpha.shape}, {v.shape}")
    return dE, alpha, v


def lemma41_slope(dE: ArrayLike, alpha: ArrayLike, v: ArrayLike) -> dict:
    """Least-squares fit of the projections ``(E¹_s − E⁰_s)·v/‖v‖²`` on α_s (prediction: slope η0/2, intercept 0).

    ``dE`` (|S|, d) the step-1 update, ``alpha`` (|S|,), ``v`` (d,). Returns dict ``slope``,
    ``intercept``, ``corr`` (Pearson) and ``max_residual_norm`` = max_s ‖dE_s − slope·α_s v‖
    (residual against the FITTED slope; for the residual against the lemma's prediction use
    :func:`lemma41_residual`).
    """
    dE, alpha, v = _update_arrays(dE, alpha, v)
    proj = dE @ v / (v @ v)
    slope, intercept = np.polyfit(alpha, proj, 1)
    res = dE - slope * alpha[:, None] * v[None, :]
    return {"slope": float(slope), "intercept": float(intercept), "corr": float(np.corrcoef(alpha, proj)[0, 1]),
            "max_residual_norm": float(np.linalg.norm(res, axis=1).max())}


def lemma41_residual(dE: ArrayLike, alpha: ArrayLike, v: ArrayLike, eta0: float) -> dict:
    """The update's residual against Lemma 4.1's prediction ``(η0/2) α_s v`` (eq. 6), not a fitted slope.

    With ``P = (η0/2) α vᵀ`` (|S|, d) and ``R = dE − P``:

    - ``relative`` = ‖R‖_F / ‖P‖_F, the residual relative to the prediction (RMS over tokens,
      weighted by the signal); compare with :func:`~embgeo.attention.theory.lemma41_error_scale`;
    - ``relative_along_v`` = the same for the components along v only;
    - ``max_residual_norm`` = max_s ‖R_s‖ (the quantity bounded by eq. 7) and
      ``max_prediction_norm`` = max_s ‖P_s‖.

    ``eta0`` is the step size whose half is the predicted slope; passing a wrong one (e.g. 2η0,
    i.e. a slope of η0) makes ``relative`` ≈ 1/2 instead of O(d^(−1/2)).
    """
    dE, alpha, v = _update_arrays(dE, alpha, v)
    P = lemma41_prediction(alpha, v, eta0)
    R = dE - P
    p_norm = float(np.linalg.norm(P))
    if p_norm == 0:
        raise InputError("alpha: every α_s is 0, so the prediction is 0 and no relative residual exists")
    u = v / np.linalg.norm(v)
    return {"relative": float(np.linalg.norm(R)) / p_norm,
            "relative_along_v": float(np.linalg.norm(R @ u) / np.linalg.norm(P @ u)),
            "max_residual_norm": float(np.linalg.norm(R, axis=1).max()),
            "max_prediction_norm": float(np.linalg.norm(P, axis=1).max())}


def lemma41_table(dims: Sequence[int], updates: Sequence[ArrayLike], alpha: ArrayLike, vs: Sequence[ArrayLike],
                  p0_norms: Sequence[float], eta0: float, p_updates: Sequence[ArrayLike] | None = None) -> pd.DataFrame:
    """Per d, the step-1 update ``dE`` (|S|, d) measured against Lemma 4.1's prediction (η0/2)α_s v.

    ``updates[i]``, ``vs[i]`` and ``p0_norms[i]`` belong to ``dims[i]``; ``eta0`` is the reference:
    the step size whose half is the predicted slope (pass a wrong one to see the claims fail).
    Columns: ``d``, ``slope_ratio`` = fitted slope/(η0/2), ``corr``, ``relative_residual``
    (:func:`lemma41_residual`), ``first_order`` (:func:`~embgeo.attention.theory.lemma41_error_scale`),
    ``slope_bound`` = ‖p⁰‖/√d, ``max_residual_norm``, ``max_prediction_norm``, ``paper_bound``
    (11·η0·d^(−1/4), eq. 7) and ``m_eff`` = (Σα²)²/Σα⁴. With ``p_updates`` (p¹ − p⁰ (d,) per d), also
    ``p_update_relative`` = ‖p¹ − p⁰‖/‖p⁰‖ (eq. 6: p¹ = p⁰ + err_p, ‖err_p‖ ≤ 11·η0·d^(−1/4)).
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    m_eff = float(np.sum(alpha**2) ** 2 / np.sum(alpha**4))
    rows = []
    for d, dE, v, norm_p0 in zip(dims, updates, vs, p0_norms, strict=True):
        fit = lemma41_slope(dE, alpha, v)
        res = lemma41_residual(dE, alpha, v, eta0)
        rows.append({"d": int(d), "slope_ratio": fit["slope"] / (eta0 / 2), "corr": fit["corr"],
                     "relative_residual": res["relative"], "first_order": lemma41_error_scale(int(d), norm_p0),
                     "slope_bound": float(norm_p0) / np.sqrt(d), "max_residual_norm": res["max_residual_norm"],
                     "max_prediction_norm": res["max_prediction_norm"], "paper_bound": lemma41_bound(eta0, int(d)),
                     "m_eff": m_eff})
    table = pd.DataFrame(rows)
    if p_updates is not None:
        if len(p_updates) != len(table):
            raise ShapeError(f"p_updates: expected one per d ({len(table)}), got {len(p_updates)}")
        table["p_update_relative"] = [float(np.linalg.norm(np.asarray(dp, dtype=np.float64))) / float(norm)
                                      for dp, norm in zip(p_updates, p0_norms, strict=True)]
    return table


# -- Figs. 1-3: rank tests --------------------------------------------------------------------------

#: Up to this many tokens the rank test's p-value is exact (all n! pairings); above, scipy's t approximation.
EXACT_RANK_TEST = 8


@dataclass(frozen=True)
class RankTest:
    """Spearman ρ of (x, y) and the one-sided p-value of ρ > 0 (NaN for < 3 values or a constant side)."""

    rho: float
    pvalue: float
    n: int
    exact: bool


def _exact_spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Spearman ρ and its exact one-sided p-value P(ρ* ≥ ρ) over all n! pairings (small n only)."""
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    perms = np.array(list(itertools.permutations(range(ry.size))))
    stats = (ry[perms] @ rx) / (np.linalg.norm(rx) * np.linalg.norm(ry))
    rho = float(rx @ ry / (np.linalg.norm(rx) * np.linalg.norm(ry)))
    return rho, float(np.mean(stats >= rho - 1e-12))


def rank_test(x: ArrayLike, y: ArrayLike) -> RankTest:
    """Does x increase with y? Spearman ρ and the one-sided p-value of ρ > 0.

    Exact over all pairings for at most :data:`EXACT_RANK_TEST` values (scipy's t approximation would
    call ρ = 1 over 5 values significant at 1e-24); scipy's t approximation above. x and y are 1-D
    of one length.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise ShapeError(f"x, y: expected two 1-D arrays of one length, got shapes {x.shape} and {y.shape}")
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return RankTest(float("nan"), float("nan"), int(x.size), False)
    if x.size <= EXACT_RANK_TEST:
        rho, p = _exact_spearman(x, y)
        return RankTest(rho, p, int(x.size), True)
    res = spearmanr(x, y, alternative="greater")
    return RankTest(float(res.statistic), float(res.pvalue), int(x.size), False)


def base_rate_centre(X: ArrayLike, y: ArrayLike, n_tokens: int, pad_id: int | None = None) -> float:
    """(P − N)/(P + N) over all token occurrences: the posterior difference (18) of a token that occurs
    independently of the label, where the V of ⟨E_s, p⟩ has its vertex (0 only for a corpus whose
    positive and negative sequences hold equally many tokens)."""
    pos, neg = token_counts(X, y, n_tokens, pad_id=pad_id)
    return float((pos.sum() - neg.sum()) / (pos.sum() + neg.sum()))


def excess_signed_frequency(X: ArrayLike, y: ArrayLike, n_tokens: int, pad_id: int | None = None) -> np.ndarray:
    """|α_s − α⁰_s| per token: the average signed frequency (3) beyond that of a label-independent token.

    ``α_s = (pos_s − neg_s)/N`` (eq. 3, N the number of tokens); a token that occurs independently of the
    label has ``α⁰_s = c·(pos_s + neg_s)/N`` with c = :func:`base_rate_centre` (0 for a balanced corpus).
    The paper's "more frequent tokens have a higher attention score" (Sec. 1, of Fig. 1) ranks tokens by
    how often they occur in their label's sequences, i.e. by α_s, which grows with the count as well as the
    polarity; for an imbalanced corpus the reference is α⁰_s, as the V's vertex is the base rate. (|S|,).
    """
    pos, neg = token_counts(X, y, n_tokens, pad_id=pad_id)
    total = float(pos.sum() + neg.sum())
    centre = float((pos.sum() - neg.sum()) / total)
    return np.abs((pos - neg) - centre * (pos + neg)) / total


def multiset_loss_floor(X: ArrayLike, y: ArrayLike, n_tokens: int, pad_id: int | None = None) -> tuple[float, int]:
    """The smallest mean logistic loss (2) that any function of a sequence's token multiset reaches on (X, y).

    Both attention models ((1) and (17)) have no positions and give each token the same map, so f(X) depends
    only on the multiset of X's tokens, and sequences with the same multiset share one f. For a group of n₊
    positive and n₋ negative such sequences, min_f n₊ log(1 + e^−f) + n₋ log(1 + e^f) = (n₊ + n₋)·h(n₊/(n₊ + n₋))
    with h the binary entropy in nats (at f = log(n₊/n₋)); the floor is their sum over N. A corpus whose floor
    is above a target loss cannot be trained to it by either model. X (N, T) padded with ``pad_id``, ids in
    [0, n_tokens), y (N,) in {±1} (validated by :func:`embgeo.attention.data.check_dataset`). Returns (floor,
    number of sequences in groups with both labels).
    """
    X, y, _, real = check_dataset(X, y, n_tokens, pad_id)
    # pads sort after every token, so two rows with the same multiset are the same sorted row
    rows = np.sort(np.where(real, X, np.iinfo(np.int64).max), axis=1)
    _, group = np.unique(rows, axis=0, return_inverse=True)
    pos = np.bincount(group.ravel(), weights=(y == 1).astype(float))
    neg = np.bincount(group.ravel(), weights=(y == -1).astype(float))
    both = (pos > 0) & (neg > 0)
    p, n = pos[both], neg[both]
    floor = float(-np.sum(p * np.log(p / (p + n)) + n * np.log(n / (p + n)))) / len(y)
    return floor, int(np.sum(p + n))


# -- Fig. 2: per level --------------------------------------------------------------------------------

def level_summary(post: ArrayLike, levels: ArrayLike, deltas: ArrayLike) -> pd.DataFrame:
    """Per level k = 0 (irrelevant), 1..K: centre 1 − 2δ_k (0 for k = 0), the RMS distance of its tokens'
    signed posterior differences from ±(1 − 2δ_k), and half the gap to the nearest other centre."""
    post, levels = np.asarray(post, dtype=np.float64), np.asarray(levels)
    centres = np.concatenate([[0.0], 1.0 - 2.0 * np.asarray(deltas, dtype=np.float64)])
    rows = []
    for k, c in enumerate(centres):
        sel = np.abs(levels) == k
        signed = post[sel] * (np.sign(levels[sel]) if k else 1.0)
        others = np.delete(centres, k)
        if k:
            others = np.concatenate([others, [-c]])  # the same level of the other sign
        rows.append({"level": k, "centre": c, "n_tokens": int(sel.sum()),
                     "rms": float(np.sqrt(np.mean((signed - c) ** 2))) if sel.any() else float("nan"),
                     "half_gap": float(np.min(np.abs(others - c)) / 2)})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class LevelStatistics:
    """Fig. 2's per-level numbers (:func:`level_statistics`); K levels, arrays indexed k − 1.

    table : :func:`level_summary`.
    cluster : max over the levels of RMS / half gap (< 1: the levels' posterior differences are resolved);
        worst_level, worst_rms, worst_half_gap : the level attaining it.
    median_p : (K,) median ⟨E_s, p⟩ per level; median_p_irrelevant : over the irrelevant tokens (level 0,
        δ = 1/2), the vertex of the V; median_v_irrelevant : the irrelevant tokens' median ⟨E_s, v⟩, the
        reference of the values (a common offset of every ⟨E_s, v⟩ adds to every f(X) alike, since the
        attention weights sum to 1: it is a bias of f, not a token's importance).
    rising : fraction of adjacent levels (k, k+1), k = 0..K−1, whose median ⟨E_s, p⟩ rises (level 0: the
        irrelevant tokens, which the V puts at the bottom).
    sign_fraction : (K,) fraction of each level's tokens with sign(⟨E_s, v⟩ − median_v_irrelevant) = sign(level);
        wrong_sign : indices of the level tokens with the other sign.
    separation : fraction of (positive, negative) level-token pairs whose ⟨E_s, v⟩ are ordered as their
        levels (1: every positive token's value above every negative token's; ties count ½).
    irrelevant_bound : (1 − 2δ_1) / median over the level tokens of (1 − 2δ_k), where the irrelevant
        tokens' |scores| would sit relative to the level tokens' were the scores proportional to the
        posterior difference.
    abs_medians : "v" / "p" → (median |⟨E_s, ·⟩ − c| over the irrelevant tokens, over the level tokens), with
        c = ``median_v_irrelevant`` for v and c = ``median_p_irrelevant`` (the vertex) for p. The loss is
        unchanged by E_s → E_s + u for every s with u ⟂ v (the softmax ignores the common shift ⟨u, p⟩ of the
        scores), so only ⟨E_s, p⟩ relative to a reference among the tokens is determined by training; a common
        shift of the values ⟨E_s, v⟩ changes every f(X) by the same amount, a bias of f that the paper's
        picture (values proportional to the posterior difference) does not speak about (issue 21).
    """

    table: pd.DataFrame
    cluster: float
    worst_level: int
    worst_rms: float
    worst_half_gap: float
    median_p: np.ndarray
    median_p_irrelevant: float
    median_v_irrelevant: float
    rising: float
    sign_fraction: np.ndarray
    wrong_sign: np.ndarray
    irrelevant_bound: float
    abs_medians: dict
    separation: float


def level_statistics(Ep: ArrayLike, Ev: ArrayLike, post: ArrayLike, levels: ArrayLike,
                     deltas: ArrayLike) -> LevelStatistics:
    """Fig. 2 per level from the scores ⟨E_s, p⟩ (``Ep``), ⟨E_s, v⟩ (``Ev``), the posterior differences
    (``post``) and the signed levels of the tokens (``levels``: 0 irrelevant, ±k), all (|S|,);
    ``deltas`` (K,) the δ_k."""
    Ep, Ev = np.asarray(Ep, dtype=np.float64), np.asarray(Ev, dtype=np.float64)
    levels = np.asarray(levels)
    deltas = np.asarray(deltas, dtype=np.float64)
    post = np.asarray(post, dtype=np.float64)
    if not (Ep.shape == Ev.shape == post.shape == levels.shape) or Ep.ndim != 1:
        raise ShapeError(f"Ep, Ev, post, levels: expected four (|S|,) arrays, got shapes {Ep.shape}, {Ev.shape}, "
                         f"{post.shape}, {levels.shape}")
    K = deltas.size
    table = level_summary(post, levels, deltas)
    spread = table["rms"] / table["half_gap"]
    worst = table.loc[spread.idxmax()]
    irr, lev = levels == 0, levels != 0
    median_p = np.array([np.median(Ep[np.abs(levels) == k]) for k in range(1, K + 1)])
    vertex = float(np.median(Ep[irr]))
    offset = float(np.median(Ev[irr]))  # the values' reference: a common offset is a bias of f
    pos, neg = Ev[levels > 0], Ev[levels < 0]
    diff = pos[:, None] - neg[None, :]
    separation = float(np.mean(diff > 0) + 0.5 * np.mean(diff == 0)) if diff.size else float("nan")
    relative_v = Ev - offset
    sign_fraction = np.array([np.mean(np.sign(relative_v[np.abs(levels) == k]) == np.sign(levels[np.abs(levels) == k]))
                              for k in range(1, K + 1)])
    centre_of = (1.0 - 2.0 * deltas)[np.abs(levels[lev]) - 1]
    return LevelStatistics(
        table=table, cluster=float(spread.max()), worst_level=int(worst["level"]), worst_rms=float(worst["rms"]),
        worst_half_gap=float(worst["half_gap"]), median_p=median_p, median_p_irrelevant=vertex,
        median_v_irrelevant=offset, rising=float(np.mean(np.diff(np.r_[vertex, median_p]) > 0)),
        sign_fraction=sign_fraction, wrong_sign=np.flatnonzero(lev & (np.sign(relative_v) != np.sign(levels))),
        irrelevant_bound=float(np.min(1.0 - 2.0 * deltas) / np.median(centre_of)),
        abs_medians={what: (np.median(np.abs(values[irr] - c)), np.median(np.abs(values[lev] - c)))
                     for what, values, c in (("v", Ev, offset), ("p", Ep, vertex))},
        separation=separation)


# -- Theorem 4.3: direction and norm ----------------------------------------------------------------

def _unit(u: ArrayLike) -> np.ndarray:
    u = np.asarray(u, dtype=np.float64)
    return u / np.linalg.norm(u)


def direction_measures(p_T: ArrayLike, p_hat: ArrayLike, alternatives: Mapping[str, ArrayLike], steps: ArrayLike,
                       norms: ArrayLike) -> dict:
    """How the last iterate p_T relates to the max-margin solution p̂ of (12), and how ‖p_t‖ grows.

    Parameters
    ----------
    p_T : (d,) the last GD iterate.
    p_hat : (d,) the reference max-margin solution (its norm ‖p̂‖ matters, not only its direction).
    alternatives : name → (d,) max-margin solutions of other candidate selections.
    steps, norms : the recorded GD steps t > 0 and ‖p_t‖ there.

    Returns dict ``cos_end`` = cos(p_T, p̂); ``cos_alt_end`` = the largest cos(p_T, p̂′) and
    ``nearest_alt`` its name; ``alt_cos_hat`` = the largest cos(p̂, p̂′); ``norm_slope`` = slope of
    ‖p_t‖ against ln t over the last decade [T/10, T] and ``norm_slope_ratio`` = norm_slope/‖p̂‖
    (≈ 1 when ‖p_t‖ ≈ ‖p̂‖ ln t + const; 0 for a bounded ‖p_t‖).
    """
    u, u_hat = _unit(p_T), _unit(p_hat)
    cos_alt = {name: float(u @ _unit(q)) for name, q in alternatives.items()}
    nearest = max(cos_alt, key=cos_alt.get) if cos_alt else ""
    steps, norms = np.asarray(steps, dtype=np.float64), np.asarray(norms, dtype=np.float64)
    last = steps >= steps.max() / 10
    slope = float(np.polyfit(np.log(steps[last]), norms[last], 1)[0]) if last.sum() >= 3 else float("nan")
    return {"cos_end": float(u @ u_hat), "cos_alt_end": cos_alt.get(nearest, float("nan")), "nearest_alt": nearest,
            "alt_cos_hat": max((float(u_hat @ _unit(q)) for q in alternatives.values()), default=float("nan")),
            "norm_slope": slope, "norm_slope_ratio": slope / float(np.linalg.norm(p_hat))}
