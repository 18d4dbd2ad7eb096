"""Geometry of a trained model's context embeddings H_t and decoder W_t at one moment of training.

Paper: ``ntp-implicit-bias-neurips.txt`` (Thrampoulidis 2024). The paper fixes the embeddings H̄ and
trains only W; here the embeddings move too (issue "NTP geometry on real language"), so every
quantity below is a snapshot of (H_t, W_t) on the dataset's supports:

* :func:`support_groups`: which contexts share a support set S_j (the sparsity pattern that drives
  W^mm, Def. 2-3);
* :func:`effective_rank`, :func:`numerical_rank`: rank measures of a matrix;
* :func:`group_collapse`, :func:`group_subspaces`: do contexts with the same support collapse
  onto shared points / directions / subspaces? [our reading: the paper has no such quantity;
  it is the question the moving embeddings raise];
* :func:`logit_structure`: how far the logits L = H Wᵀ are from the paper's limit picture
  (in-support log-odds equal to log p̂, eq. (4); supports ranked above the rest, Def. 2);
* :func:`track_reference`: the paper's W*(H_t), W^mm(H_t) and F(H_t) for the current embeddings,
  and the alignment of W_t with them (:func:`embgeo.ntp.measure.metrics.reference_metrics`).

Conventions as in :mod:`embgeo.ntp.data`: H is (m, d) with one context per row, W is (V, d),
logits L = H Wᵀ are (m, V). numpy/scipy only, float64.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from numpy.typing import ArrayLike

from embgeo.core.validate import as_float_array, check_dense_size, check_float, check_positive_int, check_seed
from embgeo.errors import InputError, ShapeError, SolverError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData, check_ntp_data
from embgeo.ntp.measure.metrics import REFERENCE_METRICS, Reference, reference_metrics
from embgeo.ntp.solvers.constraints import row_dots

#: Largest dense logit matrix L (m, V) that :func:`logit_structure` accepts, in bytes.
LOGIT_BUDGET_BYTES = 2 * 1024**3

#: Bytes of logits (a block of rows of L, or of H Wᵀ) formed at once in the block passes (bounds the temporaries).
BLOCK_BYTES = 64 * 1024**2


# -- support groups --------------------------------------------------------------------------

def support_groups(data: NTPData) -> np.ndarray:
    """Group id (m,) int64 of each context: contexts with the same support set S_j share a group.

    Ids are 0, 1, 2, ... in order of first appearance (context 0 is in group 0). Only the SET S_j
    counts, not the probabilities on it: the support pattern is what W^mm depends on (Def. 3).
    (The solvers' :func:`embgeo.ntp.solvers.constraints.token_groups` groups the *tokens* by their contexts instead.)
    """
    check_ntp_data(data)
    ids: dict[bytes, int] = {}
    out = np.empty(data.m, dtype=np.int64)
    for j, S in enumerate(data.supports):
        # Supports are sorted int arrays of one dtype, so their bytes identify the set.
        out[j] = ids.setdefault(S.tobytes(), len(ids))
    return out


# -- rank measures ---------------------------------------------------------------------------

def _singular_values(name: str, A: ArrayLike) -> np.ndarray:
    A = as_float_array(name, A, ndim=2)
    if A.size == 0:
        return np.zeros(0)
    return np.linalg.svd(A, compute_uv=False)


def effective_rank_of(s: np.ndarray) -> float:
    total = float(s.sum())
    if total == 0.0:
        return 0.0
    p = s[s > 0] / total
    return float(np.exp(-np.sum(p * np.log(p))))


def numerical_rank_of(s: np.ndarray, rtol: float) -> int:
    if s.size == 0 or s[0] == 0.0:
        return 0
    return int(np.sum(s > rtol * s[0]))


def effective_rank(A: ArrayLike) -> float:
    """Effective rank of a 2-D matrix (Roy & Vetterli 2007): exp(H(p)), p_i = s_i / Σ s.

    s are the singular values and H(p) = −Σ p_i log p_i the Shannon entropy (nats). Between 1 and
    rank A; equals k for k equal nonzero singular values; invariant to scaling A. 0.0 for a zero
    (or empty) matrix. Cost: one SVD without vectors.
    """
    return effective_rank_of(_singular_values("A", A))


def numerical_rank(A: ArrayLike, rtol: float = 1e-6) -> int:
    """Number of singular values of a 2-D matrix above ``rtol`` · s_max (0 for a zero matrix)."""
    rtol = check_float("rtol", rtol)
    return numerical_rank_of(_singular_values("A", A), rtol)


# -- collapse of support groups --------------------------------------------------------------

def _check_groups(H: ArrayLike, groups: ArrayLike, min_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(H (m, d), group index (m,) in 0..G-1, member counts (G,)) after the shape checks."""
    H = as_float_array("H", H, ndim=2)
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != H.shape[0]:
        raise ShapeError(f"groups: expected shape (m,) = ({H.shape[0]},), one id per row of H, got {g.shape}")
    if g.size and not np.issubdtype(g.dtype, np.integer):
        raise InputError(f"groups: expected integer group ids (e.g. from support_groups), got dtype {g.dtype}")
    check_positive_int("min_size", min_size)
    _, index, counts = np.unique(g, return_inverse=True, return_counts=True)
    return H, index.ravel(), counts


def _unit_rows(H: np.ndarray) -> np.ndarray:
    """H with each row divided by its norm; a zero row has no direction and stays zero [our choice]."""
    norms = np.linalg.norm(H, axis=1, keepdims=True)
    return np.divide(H, norms, out=np.zeros_like(H), where=norms > 0)


def _within_between(X: np.ndarray, index: np.ndarray, n_groups: int) -> float:
    """within / between for rows X (n, d) in groups ``index`` (n,) in 0..n_groups-1, all non-empty."""
    counts = np.bincount(index, minlength=n_groups).astype(float)
    means = np.zeros((n_groups, X.shape[1]))
    np.add.at(means, index, X)
    means /= counts[:, None]
    within = float(np.mean(np.sum((X - means[index]) ** 2, axis=1)))
    # The mean of the group MEANS (each group counts once), as the between term is over groups.
    between = float(np.mean(np.sum((means - means.mean(axis=0)) ** 2, axis=1)))
    if between == 0.0:
        return math.nan if within == 0.0 else math.inf
    return within / between


def group_collapse(H: ArrayLike, groups: ArrayLike, min_size: int = 2) -> dict:
    """Within-group over between-group scatter of the context embeddings [our reading].

    The neural-collapse ratio (Papyan et al. 2020) with support groups as classes; the NTP paper
    has no such quantity. Only groups with at least ``min_size`` members are used (a singleton
    is trivially collapsed).

    Parameters
    ----------
    H : (m, d) context embeddings, one per row.
    groups : (m,) int group ids, e.g. :func:`support_groups`.
    min_size : int ≥ 1.

    Returns
    -------
    dict with
    ``ratio``: within / between, where within = mean over the members i of the used groups of
        ‖h_i − μ_g(i)‖² (μ_g the group mean) and between = mean over the used groups of ‖μ_g − μ̄‖²
        (μ̄ the unweighted mean of the group means). 0 iff every group sits on one point. For
        i.i.d. isotropic Gaussian rows in G groups of n it is about G(n−1)/(G−1), not 1 (a group
        mean's variance is 1/n of a member's). inf if the group means coincide but the members
        do not, NaN if both scatters are zero.
    ``ratio_directions``: the same on the rows scaled to unit length: 0 iff the members of every
        group point the same way (collapse onto shared rays / 1-D subspaces, whatever their norms).
    ``groups_used``, ``contexts_used``: the groups with ≥ ``min_size`` members and their members.
    Both ratios are NaN when fewer than 2 groups are used.
    """
    H, index, counts = _check_groups(H, groups, min_size)
    used = counts >= min_size
    keep = used[index]
    out = {"ratio": math.nan, "ratio_directions": math.nan,
           "groups_used": int(used.sum()), "contexts_used": int(keep.sum())}
    if out["groups_used"] < 2:
        return out
    # Renumber the used groups 0..G'-1 so that every group in the computation is non-empty.
    sub_index = np.cumsum(used)[index[keep]] - 1
    out["ratio"] = _within_between(H[keep], sub_index, out["groups_used"])
    out["ratio_directions"] = _within_between(_unit_rows(H[keep]), sub_index, out["groups_used"])
    return out


def _group_basis(X: np.ndarray, energy: float) -> np.ndarray:
    """(d, k) orthonormal basis of the top-k right singular directions of X holding ``energy`` of Σ s²."""
    _, s, Vt = np.linalg.svd(X, full_matrices=False)
    s2 = s**2
    total = float(s2.sum())
    if total == 0.0:
        return np.zeros((X.shape[1], 0))
    # Relative slack so that energy=1.0 is not missed by rounding in the cumulative sum.
    k = int(np.searchsorted(np.cumsum(s2), energy * total * (1 - 1e-12))) + 1
    return Vt[:min(k, s.size)].T


def _sample_pairs(n: int, max_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """All pairs i < j of 0..n-1 if there are at most ``max_pairs``, else ``max_pairs`` random pairs
    i ≠ j (uniform, with replacement)."""
    if n * (n - 1) // 2 <= max_pairs:
        i, j = np.triu_indices(n, k=1)
        return i, j
    i = rng.integers(n, size=max_pairs)
    j = rng.integers(n - 1, size=max_pairs)
    return i, j + (j >= i)


def group_subspaces(H: ArrayLike, groups: ArrayLike, min_size: int = 2, energy: float = 0.9,
                    max_pairs: int = 2000, seed: int = 0) -> dict:
    """Do support groups live in their own low-dimensional subspaces, and do they share them? [our reading]

    For each group with ≥ ``min_size`` members, its subspace is the span of the top right singular
    vectors of its (uncentered, so through the origin) rows H_g, as many as hold ``energy`` of Σ s².

    Returns
    -------
    dict with
    ``within_dim``: mean dimension of those subspaces (NaN if no group is used).
    ``between_cos``: mean over pairs of groups of cos θ_min, θ_min the SMALLEST principal angle
        between the two subspaces (:func:`scipy.linalg.subspace_angles`): 1 when two groups share a
        direction, 0 when their subspaces are orthogonal. All pairs when there are at most
        ``max_pairs``, else ``max_pairs`` random pairs (seeded). NaN with fewer than 2 groups.
        Groups whose rows are all zero have no subspace and are left out of the pairs.
    ``within_cos``: mean |cos| between two distinct members of one group, over all within-group
        pairs when there are at most ``max_pairs``, else over ``max_pairs`` pairs drawn uniformly
        from them. A zero row counts as |cos| = 0. NaN if no group is used.
    ``groups_used``, ``pairs_between``, ``pairs_within``: what the means are over.

    Cost: one SVD per group (n_g × d) and one subspace_angles per sampled pair.
    """
    H, index, counts = _check_groups(H, groups, min_size)
    energy = check_float("energy", energy)
    if energy > 1:
        raise InputError(f"energy: expected a fraction in (0, 1], got {energy}")
    max_pairs = check_positive_int("max_pairs", max_pairs)
    rng = np.random.default_rng(check_seed(seed))
    used = np.flatnonzero(counts >= min_size)
    members = [np.flatnonzero(index == g) for g in used]
    bases = [_group_basis(H[rows], energy) for rows in members]
    dims = np.array([b.shape[1] for b in bases], dtype=float)

    spanned = [b for b in bases if b.shape[1] > 0]
    between = []
    if len(spanned) >= 2:
        for a, b in zip(*_sample_pairs(len(spanned), max_pairs, rng), strict=True):
            between.append(math.cos(float(np.min(scipy.linalg.subspace_angles(spanned[a], spanned[b])))))

    within = _within_group_cosines(_unit_rows(H), members, max_pairs, rng)
    return {
        "within_dim": float(dims.mean()) if dims.size else math.nan,
        "between_cos": float(np.mean(between)) if between else math.nan,
        "within_cos": float(np.mean(within)) if within.size else math.nan,
        "groups_used": len(members),
        "pairs_between": len(between),
        "pairs_within": int(within.size),
    }


def _within_group_cosines(U: np.ndarray, members: list[np.ndarray], max_pairs: int,
                          rng: np.random.Generator) -> np.ndarray:
    """|cos| of member pairs of the groups (unit rows U): all pairs, or ``max_pairs`` drawn uniformly."""
    n = np.array([len(r) for r in members], dtype=np.int64)
    n_pairs = n * (n - 1) // 2
    if n_pairs.sum() <= max_pairs:
        a, b = [], []
        for rows in members:
            i, j = np.triu_indices(len(rows), k=1)
            a.append(rows[i])
            b.append(rows[j])
        a = np.concatenate(a) if a else np.zeros(0, dtype=np.int64)
        b = np.concatenate(b) if b else np.zeros(0, dtype=np.int64)
    else:
        # A group with probability ∝ its number of pairs, then two distinct members: uniform over all pairs.
        g = rng.choice(len(members), size=max_pairs, p=n_pairs / n_pairs.sum())
        i = rng.integers(n[g])
        j = rng.integers(n[g] - 1)
        j = j + (j >= i)
        a = np.array([members[gg][ii] for gg, ii in zip(g, i, strict=True)], dtype=np.int64)
        b = np.array([members[gg][jj] for gg, jj in zip(g, j, strict=True)], dtype=np.int64)
    return np.abs(np.sum(U[a] * U[b], axis=1))


# -- logits on the supports ------------------------------------------------------------------

def _support_entries(L: np.ndarray, data: NTPData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row of each support entry, row-centred logits on the supports, row-centred log p̂), CSR order."""
    P = data.probs
    S = data.support_sizes
    rows = np.repeat(np.arange(data.m), S)
    logits = L[rows, P.indices]
    logp = np.log(P.data)
    # Centring per row removes the per-context shift that the softmax ignores (eq. (4) only fixes differences).
    logits_c = logits - (np.bincount(rows, weights=logits, minlength=data.m) / S)[rows]
    logp_c = logp - (np.bincount(rows, weights=logp, minlength=data.m) / S)[rows]
    return rows, logits_c, logp_c


def _support_margin(L: np.ndarray, data: NTPData) -> float:
    """min_j (min_{z∈S_j} L_jz − max_{v∉S_j} L_jv) over contexts with S_j < V; NaN if there are none."""
    margins = _margins_in_blocks(data, lambda s, e: L[s:e].copy())  # (the support entries are overwritten)
    has_off = data.support_sizes < data.V
    return float(margins[has_off].min()) if has_off.any() else math.nan


def logit_structure(L: ArrayLike, data: NTPData) -> dict:
    """How the logits L = H Wᵀ (m, V) sit against the paper's picture of the NTP limit.

    Returns
    -------
    dict with
    ``support_residual``: relative error of the in-support log-odds, eq. (4) read on the logits:
        with r_jz = L̃_jz − c_jz, L̃ and c the logits and log p̂ centred over each support S_j,
        sqrt(Σ_j π̂_j Σ_{z∈S_j} r_jz²) / sqrt(Σ_j π̂_j Σ_{z∈S_j} c_jz²). 0 iff the softmax restricted
        to every support equals p̂_j (what W* achieves, Def. 1). NaN if every S_j = 1 (nothing to
        fit) or if every p̂_j is uniform on its support (c = 0; see the absolute value).
    ``support_residual_abs``: the numerator alone [our addition, for the uniform case].
    ``margin``: min_j (min_{z∈S_j} L_jz − max_{v∉S_j} L_jv) over contexts with S_j < V: > 0 iff the
        logits rank every support above the rest (the NTP-margin's numerator, Def. 2; 1 for
        W^mm's logits). NaN if every S_j = V.
    ``margin_normalized``: margin / ‖L‖_F.
    ``sparse_energy``: ‖S‖_F² / ‖L‖_F², for the split L = S + R [our reading of the sparse plus
        low-rank picture of Zhao et al. 2024]: S holds, on each support, the row-centred logits L̃
        (zero elsewhere), R = L − S the rest (per-row shifts on the supports, the off-support logits).
    ``effective_rank``: of L; ``effective_rank_rest``, ``rank_rest``: effective and numerical rank of R.
    The ratios are NaN when L = 0.

    L is a dense (m, V) array: refused with :class:`~embgeo.errors.TooLargeError` above
    ``LOGIT_BUDGET_BYTES`` (2 GiB) before anything is computed. Peak memory is about three times L
    (L, R and the SVD's copy); the cost is two SVDs without vectors, O(m V min(m, V)).
    """
    check_ntp_data(data)
    m, V = data.m, data.V
    check_dense_size("logit_structure: the logits L", (m, V), "measure a subset of the contexts",
                     budget=LOGIT_BUDGET_BYTES)
    L = as_float_array("L", L, ndim=2)
    if L.shape != (m, V):
        raise ShapeError(f"L: expected the logits H Wᵀ of shape (m, V) = ({m}, {V}), got {L.shape}")

    rows, logits_c, logp_c = _support_entries(L, data)
    pi = data.weights[rows]
    num = math.sqrt(float(np.sum(pi * (logits_c - logp_c) ** 2)))
    den = math.sqrt(float(np.sum(pi * logp_c**2)))
    fits = np.any(data.support_sizes > 1) and den > 0

    norm_L = float(np.linalg.norm(L))
    margin = _support_margin(L, data)
    R = L.copy()
    R[rows, data.probs.indices] -= logits_c
    s_L = np.linalg.svd(L, compute_uv=False)
    s_R = np.linalg.svd(R, compute_uv=False)
    return {
        "support_residual": num / den if fits else math.nan,
        "support_residual_abs": num if np.any(data.support_sizes > 1) else math.nan,
        "margin": margin,
        "margin_normalized": margin / norm_L if norm_L > 0 else math.nan,
        "sparse_energy": float(np.sum(logits_c**2)) / norm_L**2 if norm_L > 0 else math.nan,
        "effective_rank": effective_rank_of(s_L),
        "effective_rank_rest": effective_rank_of(s_R),
        "rank_rest": numerical_rank_of(s_R, 1e-6),
    }


# -- the paper's objects for the current embeddings ------------------------------------------

def track_reference(H: ArrayLike, W: ArrayLike, data: NTPData, max_seconds: float | None = 60.0, *,
                    svm: bool = True, warm_start: theory.NTPSVM | None = None,
                    svm_seconds: float | None = None) -> dict:
    """W*(H), W^mm(H), F(H) for the CURRENT embeddings H (m, d), and W's (V, d) alignment with them.

    The paper's objects are functions of the embeddings; with H_t moving they move too. The data
    are rebuilt as NTPData(H, data.probs, data.weights) and decided exactly:
    compatibility (Def. 1, :func:`~embgeo.ntp.theory.is_compatible`) and separability (Def. 2,
    :func:`~embgeo.ntp.theory.is_separable` with ``max_seconds``, trying P_⊥(W) as the separator
    first). When compatible, subspace_error = ‖P_F(W) − W*‖/‖W*‖. When also separable, W^mm is the
    NTP-SVM (Def. 3, :func:`~embgeo.ntp.theory.ntp_svm`, with the time left) and the metrics are
    :func:`~embgeo.ntp.measure.metrics.reference_metrics` of W: cos_mm = cos(W, W^mm),
    cos_corrected = cos(W − W*, W^mm), subspace_error and margin (the normalized NTP-margin of
    P_⊥(W)).

    ``max_seconds`` is one budget for the whole call (``svm_seconds``, when given, is the NTP-SVM's own
    budget instead: deciding separability and solving W^mm are then timed apart), but only the iterative
    solvers can stop early (separability's dual iterations, the NTP-SVM); the exact compatibility solve and, for
    small problems, HiGHS's separability LP run to the end. ``svm=False`` skips the NTP-SVM (W^mm and
    the metrics that need it stay NaN, ``svm_status`` "not run"): it is the costly part when H is
    separable with d ≪ m.

    A W^mm from a time-limited NTP-SVM is its best certified point: ``svm_error_bound`` ε bounds
    ‖W − W^mm‖/‖W^mm‖, so a cosine against it is within 2ε of the exact one (the unit vectors of two
    matrices at relative distance ε are at most 2ε apart).

    ``warm_start``: the NTP-SVM of an earlier record (same supports; ``out["svm_result"]`` of the previous
    call): its multipliers start the solver, as W^mm(H_t) moves little between records. Without it the
    decoder W starts it.

    "Not compatible" and "not separable" are measurements, not errors: they give False and NaN
    metrics. A solver that cannot decide (time limit, ill-conditioning) gives None.

    Returns
    -------
    dict with ``compatible``, ``separable`` (bool or None), ``compatibility_residual`` (Compatibility.residual:
    the max residual of (4) at the least-squares point, NaN if undecided), ``cos_mm``, ``cos_corrected``,
    ``subspace_error``, ``margin`` (NaN without a reference), ``svm_status`` (the NTP-SVM's status:
    "optimal", "time_limit" (the best certified point is used), "not run" or "failed: ..."),
    ``svm_error_bound`` (its certified relative distance from the exact W^mm; NaN when not run),
    ``seconds`` and ``svm_result`` (the :class:`~embgeo.ntp.theory.NTPSVM` or None: not a scalar, for the
    next record's ``warm_start``).
    """
    t0 = time.perf_counter()
    check_ntp_data(data)
    if max_seconds is not None:
        max_seconds = check_float("max_seconds", max_seconds)
    H = as_float_array("H", H, ndim=2)
    if H.shape[0] != data.m:
        raise ShapeError(f"H: expected one embedding per context, shape (m, d) with m = {data.m}, got {H.shape}")
    W = as_float_array("W", W, ndim=2)
    if W.shape != (data.V, H.shape[1]):
        raise ShapeError(f"W: expected shape (V, d) = ({data.V}, {H.shape[1]}) to match data and H, got {W.shape}")

    current = NTPData(H, data.probs, data.weights)
    F = theory.subspace(current)
    out: dict = {"compatible": None, "separable": None, "compatibility_residual": math.nan,
                 **dict.fromkeys(REFERENCE_METRICS, math.nan),
                 "svm_status": "not run", "svm_error_bound": math.nan, "svm_result": None}

    def left() -> float | None:
        return None if max_seconds is None else max_seconds - (time.perf_counter() - t0)

    try:
        comp = theory.is_compatible(current, F)
        out["compatible"] = bool(comp)
        # How far (4) is from solvable for these embeddings: max |residual| of the log-odds equations at the
        # least-squares point (a lower bound for every W when a pair certificate decided); see Compatibility.
        out["compatibility_residual"] = float(comp.residual)
    except SolverError:  # too ill-conditioned to decide: undecided, not an error of the caller
        comp = None
    try:
        # the trained decoder is tried as a separator of H_t (exact when its projection's margins are > 0)
        sep = theory.is_separable(current, F, max_seconds=_positive(left()), candidate=W)
        out["separable"] = bool(sep)
        out["separability_method"] = sep.method  # the certificate behind the verdict, for the claims' premises
    except SolverError:  # no decision within max_seconds
        sep = None

    if out["compatible"]:  # W*(H) exists: the subspace error needs nothing else
        ns, err = np.linalg.norm(comp.W), np.linalg.norm(F.project(W) - comp.W)
        out["subspace_error"] = float(err / ns) if ns > 0 else float(err)
    if out["compatible"] and out["separable"] and svm:
        try:
            warm = warm_start if warm_start is not None and warm_start.W is not None else W
            budget = _positive(left()) if svm_seconds is None else check_float("svm_seconds", svm_seconds)
            svm_ = theory.ntp_svm(current, subspace_=F, separability=sep, max_seconds=budget, warm_start=warm)
            out["svm_status"] = svm_.status
            out["svm_result"] = svm_
            out["svm_error_bound"] = float(svm_.residuals.get("error_bound", math.nan))
            if svm_.W is not None:
                out.update(reference_metrics(current, W, Reference(comp.W, svm_.W, F)))
        except SolverError as exc:
            out["svm_status"] = f"failed: {exc}"
    out["seconds"] = time.perf_counter() - t0
    return out


def _positive(seconds: float | None) -> float | None:
    """A time budget for a solver: None stays None, a spent budget becomes a token 1 ms."""
    return None if seconds is None else max(seconds, 1e-3)


#: Largest side of the Gram matrix (m × m or V × V) whose eigenvalues give the singular values of the
#: logits' off-support part R (:func:`logit_structure_factored`); above it those ranks are not computed.
GRAM_MAX = 5000


def logit_structure_factored(H: np.ndarray, W: np.ndarray, data: NTPData,
                             gram_max: int = GRAM_MAX) -> tuple[dict, dict]:
    """The measures of :func:`embgeo.ntp.measure.geometry.logit_structure` for L = H Wᵀ without forming L (m, V).

    H (m, d), W (V, d). ``‖L‖_F² = ⟨HᵀH, WᵀW⟩``; the singular values of L are those of R_H R_Wᵀ (d × d) from
    the QR factors of H and W; the logits on the supports are Σ_j S_j dot products; the margin
    min_j (min_{z∈S_j} L_jz − max_{v∉S_j} L_jv) comes from one pass over row blocks of L. The off-support
    part R = L − S (S: the row-centred in-support logits) is not low rank; its singular values come from the
    Gram R Rᵀ (m × m) or RᵀR (V × V), built from H, W and the sparse S, when its side is ≤ ``gram_max``
    (else ``effective_rank_rest`` and ``rank_rest`` are None). ``on_support_energy`` [our addition]:
    Σ_{z∈S_j} L_jz² / ‖L‖_F², the share of the logits' energy on the supports.

    Returns (scalars, arrays): arrays ``logit_singular_values``, ``rest_singular_values`` (when computed),
    ``support_logits_centred`` and ``support_log_probs_centred`` (CSR order of p̂), ``context_margins`` (m,).
    Cost O((m + V) d² + m V d), memory O((m + V) d) plus the blocks and the Gram.
    """
    m, V = data.m, data.V
    P, S = data.probs, data.support_sizes
    rows, cols = np.repeat(np.arange(m), S), P.indices
    logits = row_dots(W, H, cols, rows)  # w_zᵀ h_j on the supports
    logp = np.log(P.data)
    logits_c = logits - (np.bincount(rows, weights=logits, minlength=m) / S)[rows]
    logp_c = logp - (np.bincount(rows, weights=logp, minlength=m) / S)[rows]
    pi = data.weights[rows]
    num = math.sqrt(float(np.sum(pi * (logits_c - logp_c) ** 2)))
    den = math.sqrt(float(np.sum(pi * logp_c**2)))
    multi = bool(np.any(S > 1))
    HtH, WtW = H.T @ H, W.T @ W  # (d, d) each; the rest's Gram reuses them (WᵀW is O(V d²))
    norm2 = float(np.sum(HtH * WtW))
    s_L = np.linalg.svd(r_factor(H) @ r_factor(W).T, compute_uv=False)
    margins = context_margins(H, W, data)
    has_off = S < V
    margin = float(margins[has_off].min()) if has_off.any() else math.nan
    norm_L = math.sqrt(norm2)
    scalars = {
        "support_residual": num / den if multi and den > 0 else math.nan,
        "support_residual_abs": num if multi else math.nan,
        "margin": margin,
        "margin_normalized": margin / norm_L if norm_L > 0 else math.nan,
        "contexts_ranked_right": float(np.mean(margins[has_off] > 0)) if has_off.any() else math.nan,
        "sparse_energy": float(np.sum(logits_c**2)) / norm2 if norm2 > 0 else math.nan,
        "on_support_energy": float(np.sum(logits**2)) / norm2 if norm2 > 0 else math.nan,
        "effective_rank": effective_rank_of(s_L),
        "effective_rank_rest": None, "rank_rest": None,
    }
    arrays = {"logit_singular_values": s_L, "support_logits_centred": logits_c, "support_log_probs_centred": logp_c,
              "context_margins": margins}
    if min(m, V) <= gram_max:
        s_R = rest_singular_values(H, W, sp.csr_matrix((logits_c, P.indices, P.indptr), shape=(m, V)), (HtH, WtW))
        scalars.update(effective_rank_rest=effective_rank_of(s_R), rank_rest=numerical_rank_of(s_R, 1e-6))
        arrays["rest_singular_values"] = s_R
    return scalars, arrays


def r_factor(A: np.ndarray, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """R with AᵀA = RᵀR (at most d × d) for A (n, d), from the QR factors of row blocks of ``block_bytes`` stacked and
    factored again (a tall-skinny QR: as stable as one QR of A). ``np.linalg.qr`` of the whole A copies it, and a head
    of V = 262,144 rows (Gemma 3) is 1.25 GiB in float64 (issue 38)."""
    n, d = A.shape
    rows = max(2 * d, block_bytes // (8 * max(d, 1)))  # ≥ 2d rows a block: each pass at least halves the rows
    if n <= rows:
        return np.linalg.qr(A, mode="r")
    return r_factor(np.vstack([np.linalg.qr(A[s:s + rows], mode="r") for s in range(0, n, rows)]), block_bytes)


def context_margins(H: np.ndarray, W: np.ndarray, data: NTPData) -> np.ndarray:
    """min_{z∈S_j} L_jz − max_{v∉S_j} L_jv per context (m,), +inf where S_j = V; L = H Wᵀ in row blocks."""
    return _margins_in_blocks(data, lambda s, e: H[s:e] @ W.T)


def _margins_in_blocks(data: NTPData, block) -> np.ndarray:
    """Per-context margins (m,) of the logits that ``block(s, e)`` gives for contexts s..e − 1 (a writable (e − s, V)
    array), BLOCK_BYTES at a time: the one kernel of :func:`logit_structure` (L given) and
    :func:`logit_structure_factored` (L = H Wᵀ never formed)."""
    P = data.probs
    out = np.full(data.m, np.inf)
    rows_per = max(1, BLOCK_BYTES // (8 * data.V))
    for s in range(0, data.m, rows_per):
        e = min(s + rows_per, data.m)
        Z = block(s, e)
        rows = np.repeat(np.arange(e - s), data.support_sizes[s:e])
        cols = P.indices[P.indptr[s]:P.indptr[e]]
        lowest_in = np.full(e - s, np.inf)
        np.minimum.at(lowest_in, rows, Z[rows, cols])
        Z[rows, cols] = -np.inf
        out[s:e] = lowest_in - Z.max(axis=1)
    return out


def rest_singular_values(H: np.ndarray, W: np.ndarray, Sc: sp.csr_matrix,
                          grams: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Singular values of R = H Wᵀ − Sc (descending) from the smaller of the Grams R Rᵀ, RᵀR; ``grams`` (HᵀH, WᵀW)
    when the caller has them (WᵀW costs O(V d²)).

    R Rᵀ = H (WᵀW) Hᵀ − (Sc W) Hᵀ − H (Sc W)ᵀ + Sc Scᵀ (and the same with the roles of H and W swapped);
    each of the four terms is at most (‖L‖_F + ‖Sc‖_F)² ≤ 4‖L‖_F² (Sc is centred entries of L), so G and its
    eigenvalues carry an absolute rounding error of about n·ε·4‖L‖_F² (n the Gram's side): singular values
    below √(4 n ε)·‖L‖_F (≈ 2e-7‖L‖_F at n = 5000) cannot be told from rounding and are set to 0.
    """
    m, V = Sc.shape
    HtH, WtW = grams if grams is not None else (H.T @ H, W.T @ W)
    if m <= V:
        A, B, S, GA, GB = H, W, Sc, HtH, WtW
    else:
        A, B, S, GA, GB = W, H, sp.csr_matrix(Sc.T), WtW, HtH
    n = A.shape[0]
    check_dense_size("the Gram of the logits' off-support part", (n, n))
    cross = (S @ B) @ A.T
    G = A @ GB @ A.T - cross - cross.T + (S @ S.T).toarray()
    ev = np.linalg.eigvalsh((G + G.T) / 2)[::-1]
    norm_L2 = float(np.sum(GA * GB))
    ev[ev < 4 * n * np.finfo(float).eps * norm_L2] = 0.0
    return np.sqrt(ev)


def row_norms_frequency(data: NTPData, W: np.ndarray) -> tuple[dict, dict]:
    """Row norms ‖w_v‖ against the next-token frequency f_v = Σ_j π̂_j p̂_{j,v} (Spearman over tokens with f_v > 0)."""
    from scipy.stats import spearmanr

    freq = np.asarray(data.probs.T @ data.weights).ravel()
    norms = np.sqrt(np.einsum("ij,ij->i", W, W))  # no V × d temporary, as np.linalg.norm(W, axis=1) makes
    seen = freq > 0
    rho = math.nan
    if seen.sum() >= 3 and np.ptp(freq[seen]) > 0 and np.ptp(norms[seen]) > 0:
        rho = float(spearmanr(norms[seen], freq[seen]).statistic)
    scalars = {"tokens_seen": int(seen.sum()), "spearman_norm_frequency": rho,
               "mean_norm_seen": float(norms[seen].mean()),
               "mean_norm_unseen": float(norms[~seen].mean()) if (~seen).any() else math.nan}
    return scalars, {"row_norms": norms, "token_frequency": freq}
