"""The quantities a training run or a regularization path is measured by (the paper's Figs. 4-5).

* :class:`Reference`: the theory objects W* (Def. 1), W^mm (Def. 3) and the subspace F (eq. 5)
  that iterates are compared against; :func:`compute_reference` builds it from the data.
* :func:`reference_metrics`: cos(W, W^mm), cos(W − W*, W^mm), ‖P_F(W) − W*‖/‖W*‖ and the
  NTP-margin of one W.
* :func:`trace_metrics`: CE, CE − 𝓗 (as a KL) and ‖W‖, plus the above with a reference.
* The never-next ("unseen") tokens (issue 38): :func:`token_split`, :func:`constrained_rows` (W modulo the shift
  1cᵀ on the seen rows and one unseen representative), :func:`constrained_alignment` (the probe's alignment on
  those rows, with certified bands), :class:`ReducedProblem` and :func:`reduced_trace_metrics` (the metrics of
  :func:`embgeo.ntp.training.train.train` with ``reduce_unseen=True``, on k + 1 rows instead of V).

Everything is numpy float64 through :mod:`embgeo.ntp.theory`.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from embgeo.core.status import Status
from embgeo.core.validate import as_float_array
from embgeo.errors import InputError, NotCompatibleError, NotSeparableError, ShapeError, SolverError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData, check_ntp_data


@dataclass(frozen=True)
class Reference:
    """W* (V, d), W^mm (V, d) and F of one dataset: what training metrics compare against.

    Build it with :func:`compute_reference`; a deliberately different reference (a perturbed W^mm,
    a scaled W*) is ``dataclasses.replace(ref, w_mm=...)``. Construction checks the shapes.
    """

    w_star: np.ndarray
    w_mm: np.ndarray
    F: theory.Subspace
    #: ε with ‖w_mm − W^mm‖ ≤ ε ‖W^mm‖ (the NTP-SVM's certified ``residuals["error_bound"]``): the width of the
    #: bands of the constrained-row cosines of :func:`reduced_trace_metrics`; 0 for an exact W^mm.
    error_bound: float = 0.0

    def __post_init__(self):
        w_star = as_float_array("reference.w_star", self.w_star, ndim=2)
        w_mm = as_float_array("reference.w_mm", self.w_mm, ndim=2)
        if not isinstance(self.F, theory.Subspace):
            raise InputError(f"reference.F: expected an embgeo.ntp.theory.Subspace, got {type(self.F).__name__}")
        shape = (self.F.data.V, self.F.data.d)
        for name, arr in (("w_star", w_star), ("w_mm", w_mm)):
            if arr.shape != shape:
                raise ShapeError(f"reference.{name}: expected shape (V, d) = {shape} of its subspace F, "
                                 f"got {arr.shape}")
        if not np.any(w_mm):
            raise InputError("reference.w_mm: is zero; expected the NTP-SVM solution W^mm")
        object.__setattr__(self, "w_star", w_star)
        object.__setattr__(self, "w_mm", w_mm)

    def replace(self, **changes: Any) -> Reference:
        """A copy with some fields changed (e.g. a wrong W^mm for a negative control)."""
        return dataclasses.replace(self, **changes)


def compute_reference(data: NTPData) -> Reference:
    """The theory objects the training metrics compare against (Def. 1, Def. 3, eq. 5).

    Raises :class:`NotCompatibleError` / :class:`NotSeparableError` when W* / W^mm do not exist,
    :class:`InputError` when every support is full (no separability constraints). Compute it once
    and pass it as ``reference=`` to several trainings on the same data.
    """
    check_ntp_data(data)
    F = theory.subspace(data)
    comp = theory.is_compatible(data, F)
    if not comp:
        raise NotCompatibleError(f"the data are not NTP_H-compatible (Def. 1): the log-odds equations (4) have "
                                 f"residual {comp.residual:.3g} > {comp.tolerance:.3g}, so W* does not exist")
    svm = theory.ntp_svm(data, subspace_=F)
    if svm.status != Status.OPTIMAL:
        raise NotSeparableError("the data are not NTP-separable (Def. 2), so W^mm does not exist")
    return Reference(comp.W, svm.W, F)


def resolve_reference(data: NTPData, reference: Reference | Literal[False] | None) -> tuple[Reference | None, str]:
    """(reference or None, status text) for the ``reference=`` argument of the trainers and paths.

    None: computed here (a property of the data that makes it impossible, e.g. no W^mm, skips the
    metrics with the reason as status); False: skipped; a :class:`Reference`: checked against the data.
    """
    if reference is False:
        return None, "skipped: reference=False"
    if reference is None:
        try:
            return compute_reference(data), "computed"
        except InputError as exc:  # not compatible / not separable / full supports: a property of the data
            return None, f"skipped: {exc}"
        except SolverError as exc:  # a numerical failure: say so loudly, but let training go on
            warnings.warn(f"reference solutions failed ({exc}); training without alignment metrics", stacklevel=3)
            return None, f"skipped: {exc}"
    if not isinstance(reference, Reference):
        raise InputError(f"reference: expected None, False or an embgeo.ntp.measure.metrics.Reference (from "
                         f"compute_reference), got {type(reference).__name__}")
    F = reference.F
    if (F.data.m, F.data.V, F.data.d) != (data.m, data.V, data.d):
        raise ShapeError(f"reference: built for data with (m, V, d) = ({F.data.m}, {F.data.V}, {F.data.d}), "
                         f"expected ({data.m}, {data.V}, {data.d})")
    return reference, "given"


def cosine(A: np.ndarray, B: np.ndarray) -> float:
    """Frobenius cosine ⟨A, B⟩ / (‖A‖ ‖B‖); NaN when either is zero."""
    na, nb = np.linalg.norm(A), np.linalg.norm(B)
    if na == 0 or nb == 0:
        return math.nan
    return float(np.vdot(A, B) / (na * nb))  # no A * B temporary: a V × d copy at Gemma's V = 262,144 (1.25 GiB)


def reference_metrics(data: NTPData, W: np.ndarray, ref: Reference) -> dict:
    """cos_mm = cos(W, W^mm), cos_corrected = cos(W − W*, W^mm), subspace_error = ‖P_F(W) − W*‖/‖W*‖
    (absolute if W* = 0) and margin = :func:`theory.ntp_margin` of W (V, d)."""
    ns = np.linalg.norm(ref.w_star)
    err = np.linalg.norm(ref.F.project(W) - ref.w_star)
    return {
        "cos_mm": cosine(W, ref.w_mm),
        "cos_corrected": cosine(W - ref.w_star, ref.w_mm),
        "subspace_error": float(err / ns) if ns > 0 else float(err),
        "margin": theory.ntp_margin(data, W, ref.F),
    }


#: The reference metrics' names, NaN where no reference is available.
REFERENCE_METRICS = ("cos_mm", "cos_corrected", "subspace_error", "margin")


def trace_metrics(data: NTPData, W: np.ndarray, ref: Reference | None) -> dict:
    """ce (eq. 2), kl_gap (CE − 𝓗 as a KL), norm ‖W‖_F, and with a reference :func:`reference_metrics`."""
    out = {"ce": theory.cross_entropy(data, W), "kl_gap": theory.kl_gap(data, W),
           "norm": float(np.linalg.norm(W))}
    if ref is not None:
        out.update(reference_metrics(data, W, ref))
    return out


# -- the never-next tokens and the constrained rows (issue 38) --------------------------------------------
#
# A token that is in no support S_j ("unseen": never a next token in the data) enters Defs. 1-3 only as an
# out-of-support token v ∉ S_j of every context, the same role for every such token. Three consequences, used below:
#
# (i) Interchangeable rows. The NTP-SVM (Def. 3) is symmetric under any permutation of the unseen tokens and its
#     solution is unique, so W^mm's unseen rows are equal; W* lies in F (eq. 5), whose generators (e_z − e_z') h̄_jᵀ
#     only involve support tokens, so W*'s unseen rows are zero (equal too), and so are P_F(W)'s for every W.
# (ii) Shift invariance. 𝕊(W h) = 𝕊((W + 1cᵀ) h) for every c ∈ ℝ^d, so CE, every constraint of (4) and (6) and the
#     NTP-margin see W only modulo 1cᵀ; 1cᵀ ⊥ F (elements of F have zero column sums) and W^mm, being of least norm,
#     has 1ᵀW^mm = 0. A comparison of a trained W with W^mm is meaningful only modulo 1cᵀ: on centred rows or on
#     logit differences.
# (iii) Training keeps equal unseen rows equal. Unseen row v receives ∂CE/∂w_v = Σ_j π̂_j 𝕊_v(W h̄_j) h̄_j, and
#     𝕊_v(W h̄_j) = e^{w_vᵀh̄_j}/Σ e^{…} is the same for all v in U when their rows are equal: GD, SGD (the same
#     formula on a batch) and normalized GD (one common scalar) move them identically, and Adam is per-coordinate
#     (each copy sees the same gradient, so the same moments). From zero, or any init with equal unseen rows, the
#     iterate is determined by the k seen rows and ONE shared unseen row u, whose logit uᵀh enters the softmax
#     |U| times (log Σ_V e^{ℓ} = log(Σ_seen e^{ℓ_z} + e^{log|U| + uᵀh})) and whose square counts |U| times in ‖W‖².

def token_split(data: NTPData) -> tuple[np.ndarray, np.ndarray]:
    """(seen, unseen): the sorted token ids that are in some support S_j, and those in none (never a next token)."""
    seen = np.unique(data.probs.indices).astype(np.int64)
    return seen, np.setdiff1d(np.arange(data.V), seen).astype(np.int64)


def reduce_rows(W: np.ndarray, seen: np.ndarray, unseen: np.ndarray) -> np.ndarray:
    """R(W) = [W_seen; mean of W's unseen rows] ((k + 1, d); (k, d) when every token is seen).

    On a W with equal unseen rows this is lossless (:func:`expand_rows` inverts it); on any W it is the rows of the
    orthogonal projection of W onto {equal unseen rows}, the unseen block written once."""
    if unseen.size == 0:
        return W[seen]
    return np.vstack([W[seen], unseen_mean(W, seen, unseen)[None]])


def unseen_mean(W: np.ndarray, seen: np.ndarray, unseen: np.ndarray) -> np.ndarray:
    """(d,): the mean of W's unseen rows, as (all rows' sum − the seen rows' sum) / |U|: no copy of the unseen block
    (W[unseen] is nearly all of W: 1.25 GiB at Gemma 3's V = 262,144)."""
    return (W.sum(axis=0) - W[seen].sum(axis=0)) / unseen.size


def expand_rows(R: np.ndarray, seen: np.ndarray, unseen: np.ndarray, V: int) -> np.ndarray:
    """The (V, d) matrix whose seen rows are R[:k] and whose unseen rows all equal R[k] (inverse of
    :func:`reduce_rows`)."""
    W = np.empty((V, R.shape[1]))
    W[seen] = R[:seen.size]
    if unseen.size:
        W[unseen] = R[seen.size]
    return W


def _centre(R: np.ndarray) -> np.ndarray:
    return R - R.mean(axis=0, keepdims=True)


def constrained_rows(W: np.ndarray, seen: np.ndarray, unseen: np.ndarray) -> np.ndarray:
    """T(W) = C R(W): the seen rows and the unseen representative, centred by their unweighted mean.

    Why this rule: T(W + 1cᵀ) = T(W) (every row of R(W) moves by c, and C removes it), so T sees W modulo the shift
    (ii); and ‖C R‖² = (1 / (2(k + 1))) Σ_{a,b} ‖r_a − r_b‖², so the Frobenius geometry of T is that of all pairwise
    row differences r_a − r_b — the directions of the logit differences (r_a − r_b)ᵀh̄ that Defs. 1-3 constrain (in-
    support pairs, and support-versus-unseen pairs) — each token counted once and the unseen block once. Counting the
    unseen row |U| times instead would weight the ~46k rows a pretrained head leaves free (and never trains) above
    the constrained ones, the defect of the all-rows cosine. ‖T‖ ≤ 1 as an operator (R and C are contractions).
    On F (W*, P_F(W)), whose unseen rows are 0 and columns sum to 0, T is an isometry: T(A) = [A_seen; 0]."""
    return _centre(reduce_rows(W, seen, unseen))


def cosine_band(X: np.ndarray, Y_hat: np.ndarray, rel_error: float) -> tuple[float, float, float]:
    """cos(X, Y) and an interval that contains cos(X, Y_true) whenever ‖Y_hat − Y_true‖ ≤ rel_error ‖Y_hat‖.

    The angle between Y_hat and Y_true is at most δ = asin(rel_error) (Y_true lies in a ball of that relative radius
    around Y_hat), so the angle θ between X and Y_true is within θ̂ ± δ: cos in [cos(min(θ̂ + δ, π)),
    cos(max(θ̂ − δ, 0))]. rel_error ≥ 1 (or NaN) gives [-1, 1]; rel_error = 0 the point itself."""
    c = cosine(X, Y_hat)
    if math.isnan(c):
        return c, math.nan, math.nan
    if not rel_error >= 0 or rel_error >= 1:
        return c, -1.0, 1.0
    if rel_error == 0:
        return c, c, c
    theta, delta = math.acos(max(-1.0, min(1.0, c))), math.asin(rel_error)
    return c, math.cos(min(theta + delta, math.pi)), math.cos(max(theta - delta, 0.0))


def _transported_error(w_mm: np.ndarray, t_mm: np.ndarray, error_bound: float) -> float:
    """The relative error of T(Ŵ^mm) from ε = ‖Ŵ − W^mm‖/‖W^mm‖ (the NTP-SVM's certified bound, relative to the
    true W^mm): ‖TŴ − TW^mm‖ ≤ ‖Ŵ − W^mm‖ ≤ ε‖W^mm‖ ≤ ε‖Ŵ‖/(1 − ε) (‖T‖ ≤ 1), divided by ‖TŴ‖."""
    if not error_bound >= 0:
        return math.nan
    if error_bound >= 1:
        return math.inf
    nt = float(np.linalg.norm(t_mm))
    return math.inf if nt == 0 else error_bound * float(np.linalg.norm(w_mm)) / ((1 - error_bound) * nt)


def equal_rows_bound(W: np.ndarray, seen: np.ndarray, unseen: np.ndarray) -> float:
    """The largest |cos(W, M)| over every M with equal unseen rows and zero column sums (W^mm is one: (i), (ii)).

    Such M form a subspace; the largest cosine with W is ‖P(W)‖/‖W‖, P the orthogonal projection onto it: seen rows
    w_z − μ, unseen rows ū − μ (ū their mean, μ the mean row of W), so ‖P(W)‖² = Σ_seen ‖w_z − μ‖² + |U| ‖ū − μ‖².
    For a pretrained head, whose unseen rows differ from one another, this is about ‖W_seen‖/‖W‖ (≈ 0.06-0.1 at
    V = 49,152): cos(W, W^mm) cannot exceed it, whatever the model."""
    n = float(np.linalg.norm(W))
    if n == 0:
        return math.nan
    mu = W.mean(axis=0)
    s = float(np.sum((W[seen] - mu) ** 2))
    if unseen.size:
        s += unseen.size * float(np.sum((unseen_mean(W, seen, unseen) - mu) ** 2))
    return math.sqrt(s) / n


def unseen_block(data: NTPData, W: np.ndarray, seen: np.ndarray, unseen: np.ndarray) -> dict:
    """The never-next rows of W, reported apart from the constrained ones.

    ``unseen_share``: ‖W_U‖²/‖W‖²; ``unseen_share_centred``: the same after removing W's mean row (the shift (ii));
    ``unseen_spread_share``: Σ_U ‖w_v − ū‖²/‖W − 1μᵀ‖² (μ the mean row; shift-free), the part of W that no
    statement of Defs. 1-3 constrains and that training from equal rows never changes;
    ``unseen_logit_vs_support``: Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} (ū − w_z)ᵀh̄_j,
    the mean unseen row's logit against the in-support logits (negative: the unseen tokens rank below the next ones,
    what (6b) asks of W^mm with a margin ≥ 1); ``unseen_logit_vs_seen``: Σ_j π̂_j (ū − mean_seen w_z)ᵀh̄_j."""
    out = {"unseen_tokens": int(unseen.size), "seen_tokens": int(seen.size)}
    keys = ("unseen_share", "unseen_share_centred", "unseen_spread_share", "unseen_logit_vs_support",
            "unseen_logit_vs_seen")
    if unseen.size == 0:
        return {**out, **dict.fromkeys(keys, math.nan)}
    n2 = float(np.einsum("ij,ij->", W, W))
    mu = W.mean(axis=0)
    # the unseen block's sums as all rows' less the seen rows': no copy of the block (nearly all of W)
    WS = W[seen]
    nu = unseen.size
    u = unseen_mean(W, seen, unseen)
    sum_u = nu * u
    s_u = max(n2 - float(np.einsum("ij,ij->", WS, WS)), 0.0)
    c2 = n2 - W.shape[0] * float(mu @ mu)  # ‖W − 1μᵀ‖²
    around_mu = s_u - 2.0 * float(mu @ sum_u) + nu * float(mu @ mu)  # Σ_U ‖w_v − μ‖²
    spread = max(s_u - nu * float(u @ u), 0.0)  # Σ_U ‖w_v − ū‖²
    H, P = data.embeddings, data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    from embgeo.ntp.solvers.constraints import row_dots

    support = np.bincount(rows, weights=P.data * row_dots(W, H, P.indices, rows), minlength=data.m)
    out.update(
        unseen_share=s_u / n2 if n2 > 0 else math.nan,
        unseen_share_centred=around_mu / c2 if c2 > 0 else math.nan,
        unseen_spread_share=spread / c2 if c2 > 0 else math.nan,
        unseen_logit_vs_support=float(data.weights @ (H @ u - support)),
        unseen_logit_vs_seen=float(data.weights @ (H @ (u - WS.mean(axis=0)))),
    )
    return out


def constrained_alignment(data: NTPData, W: np.ndarray, *, w_star: np.ndarray | None = None,
                          w_mm: np.ndarray | None = None, F: theory.Subspace | None = None,
                          error_bound: float = 0.0, PFW: np.ndarray | None = None) -> dict:
    """Where W sits relative to W* and W^mm on the constrained rows (:func:`constrained_rows`), invariant under
    W → W + 1cᵀ.

    ``rows_cos_mm`` = cos(T W, T W^mm), ``rows_dist_mm`` = ‖T W/‖T W‖ − T W^mm/‖T W^mm‖‖ (= √(2 − 2 cos)),
    ``rows_cos_corrected`` = cos(T(W − W*), T W^mm) (Thm. 2's direction; W* = 0 where it does not exist is not used:
    NaN), each with ``_lo``/``_hi``: the interval that holds for the true W^mm when the given one is certified to
    ‖Ŵ − W^mm‖ ≤ ``error_bound`` ‖W^mm‖ (:func:`cosine_band` with the relative error carried through T,
    ``rows_error_bound``). ``star_cos`` = cos(P_F(W), W*) and ``subspace_error`` = ‖P_F(W) − W*‖/‖W*‖ (F is
    invariant: T is an isometry there, and 1cᵀ ⊥ F). The old all-rows ``cos_mm`` = cos(W, W^mm) is kept with
    ``cos_mm_bound`` (:func:`equal_rows_bound`), the most it can be; plus :func:`unseen_block`."""
    seen, unseen = token_split(data)
    out = {k: math.nan for k in ("rows_cos_mm", "rows_cos_mm_lo", "rows_cos_mm_hi", "rows_dist_mm",
                                 "rows_cos_corrected", "rows_cos_corrected_lo", "rows_cos_corrected_hi",
                                 "rows_error_bound", "star_cos", "subspace_error", "cos_mm", "cos_mm_bound")}
    out["cos_mm_bound"] = equal_rows_bound(W, seen, unseen)
    TW = constrained_rows(W, seen, unseen)
    if w_mm is not None:
        Tm = constrained_rows(w_mm, seen, unseen)
        eps_t = _transported_error(w_mm, Tm, error_bound)
        out["rows_error_bound"] = eps_t
        out["rows_cos_mm"], out["rows_cos_mm_lo"], out["rows_cos_mm_hi"] = cosine_band(TW, Tm, eps_t)
        if not math.isnan(out["rows_cos_mm"]):
            out["rows_dist_mm"] = math.sqrt(max(0.0, 2.0 - 2.0 * out["rows_cos_mm"]))
        out["cos_mm"] = cosine(W, w_mm)
        if w_star is not None:
            X = TW - constrained_rows(w_star, seen, unseen)
            c = cosine_band(X, Tm, eps_t)
            out["rows_cos_corrected"], out["rows_cos_corrected_lo"], out["rows_cos_corrected_hi"] = c
    if w_star is not None and (F is not None or PFW is not None):
        P = F.project(W) if PFW is None else PFW
        ns = float(np.linalg.norm(w_star))
        err = float(np.linalg.norm(P - w_star))
        out["subspace_error"] = err / ns if ns > 0 else err
        out["star_cos"] = cosine(P, w_star)
    out.update(unseen_block(data, W, seen, unseen))
    return out


class ReducedProblem:
    """The seen rows plus one shared unseen row: the NTP problem of a W with equal unseen rows, on k + 1 rows.

    Attributes: ``data`` (the full data), ``seen`` (k,), ``unseen`` (|U|,) token ids (:func:`token_split`),
    ``multiplicity`` (k + 1,) (1 for a seen row, |U| for the shared row; (k,) ones when every token is seen),
    ``data_r``: the same contexts on k + 1 tokens (p̂ on the seen columns, the last column never a next token),
    whose F (eq. 5) is F restricted to those rows (F's generators involve only support tokens) and gives P_F and W*
    (zero on the shared row); ``data_lse``: H with a constant coordinate, on which [Θ, b] with b = log|U| on the
    shared row has exactly the softmax of the full W: e^{uᵀh + log|U|} = |U| e^{uᵀh} (iii), so CE and the KL are
    :func:`theory.cross_entropy` / :func:`theory.kl_gap` of the full problem. Cost: O(m (k + 1) d) per evaluation
    instead of O(m V d).
    """

    def __init__(self, data: NTPData):
        import scipy.sparse as sp

        check_ntp_data(data)
        self.data = data
        self.seen, self.unseen = token_split(data)
        k, nu = self.seen.size, self.unseen.size
        self.k, self.n_unseen, self.V = k, nu, data.V
        self.rows = k + (nu > 0)
        self.multiplicity = np.ones(self.rows)
        if nu:
            self.multiplicity[k] = nu
        col = np.full(data.V, -1, dtype=np.int64)
        col[self.seen] = np.arange(k)
        P = data.probs
        Pr = sp.csr_matrix((P.data, col[P.indices], P.indptr), shape=(data.m, self.rows))
        self.data_r = NTPData(data.embeddings, Pr, data.weights)
        H1 = np.hstack([data.embeddings, np.ones((data.m, 1))])
        self.data_lse = NTPData(H1, Pr, data.weights)
        self.bias = np.zeros(self.rows)
        if nu:
            self.bias[k] = math.log(nu)
        self._F = None

    @property
    def F(self) -> theory.Subspace:
        if self._F is None:
            self._F = theory.subspace(self.data_r)
        return self._F

    def reduce(self, W: np.ndarray) -> np.ndarray:
        return reduce_rows(W, self.seen, self.unseen)

    def expand(self, R: np.ndarray) -> np.ndarray:
        return expand_rows(R, self.seen, self.unseen, self.V)

    def inner(self, A: np.ndarray, B: np.ndarray) -> float:
        """⟨expand(A), expand(B)⟩ = Σ_rows multiplicity · (row of A)·(row of B)."""
        return float(self.multiplicity @ np.sum(A * B, axis=1))

    def norm(self, A: np.ndarray) -> float:
        return math.sqrt(max(self.inner(A, A), 0.0))


@dataclass(frozen=True)
class ReducedReference:
    """W* and W^mm on the reduced rows (:meth:`ReducedProblem.reduce`): ``w_star`` (its shared row is 0),
    ``w_mm`` (its shared row the mean of W^mm's unseen rows: exact in every inner product with a W of equal unseen
    rows), ``w_mm_norm`` = ‖W^mm‖ of the full matrix, ``w_star_norm``, ``error_bound`` ε, and ``rows_error_bound``
    (ε carried to the centred rows, :func:`_transported_error`); ``w_star``/``w_mm`` may be None (not available)."""

    w_star: np.ndarray | None
    w_mm: np.ndarray | None
    w_mm_norm: float
    w_star_norm: float
    error_bound: float
    rows_error_bound: float


def reduced_reference(problem: ReducedProblem, w_star: np.ndarray | None, w_mm: np.ndarray | None,
                      error_bound: float = 0.0) -> ReducedReference:
    """:class:`ReducedReference` from the full (V, d) W* and W^mm (either may be None)."""
    ws = None if w_star is None else problem.reduce(np.asarray(w_star, dtype=float))
    wm = None if w_mm is None else problem.reduce(np.asarray(w_mm, dtype=float))
    nm = math.nan if w_mm is None else float(np.linalg.norm(w_mm))
    ns = math.nan if w_star is None else float(np.linalg.norm(w_star))
    rows_eps = math.nan if w_mm is None else _transported_error(w_mm, _centre(wm), error_bound)
    return ReducedReference(ws, wm, nm, ns, float(error_bound), rows_eps)


#: The metrics of :func:`reduced_trace_metrics` beyond those of :func:`trace_metrics`.
ROWS_METRICS = ("rows_cos_mm", "rows_cos_mm_lo", "rows_cos_mm_hi", "rows_cos_corrected", "rows_cos_corrected_lo",
                "rows_cos_corrected_hi")


def reduced_trace_metrics(problem: ReducedProblem, R: np.ndarray, ref: ReducedReference | None) -> dict:
    """:func:`trace_metrics` of W = ``problem.expand(R)`` computed on the k + 1 rows R, to rounding.

    ce, kl_gap: on ``problem.data_lse`` with the log|U| coordinate; norm = √(Σ multiplicity ‖r‖²). With W^mm and
    W*: cos_mm, cos_corrected (inner products with multiplicity, ‖W^mm‖ of the full matrix), subspace_error
    (P_F on ``data_r``: P_F(W) depends only on the seen rows), margin (:func:`theory.ntp_margin` on ``data_r``,
    renormalized by ‖P_⊥(W)‖ with multiplicity: the minimum over v ∉ S_j is the same, the unseen rows being equal),
    and the constrained-row cosines :data:`ROWS_METRICS` (:func:`constrained_rows` of W is R centred) with their
    bands. With W* only: subspace_error. Missing objects give NaN.
    """
    X = np.hstack([R, problem.bias[:, None]])
    out = {"ce": theory.cross_entropy(problem.data_lse, X), "kl_gap": theory.kl_gap(problem.data_lse, X),
           "norm": problem.norm(R)}
    if ref is None:
        return out
    nan = dict.fromkeys((*REFERENCE_METRICS, *ROWS_METRICS), math.nan)
    out.update(nan)
    P = None
    if ref.w_star is not None:
        P = problem.F.project(R)
        err = float(np.linalg.norm(P - ref.w_star))
        out["subspace_error"] = err / ref.w_star_norm if ref.w_star_norm > 0 else err
    if ref.w_mm is not None:
        nw = out["norm"]
        out["cos_mm"] = problem.inner(R, ref.w_mm) / (nw * ref.w_mm_norm) if nw > 0 else math.nan
        Tm = _centre(ref.w_mm)
        c = cosine_band(_centre(R), Tm, ref.rows_error_bound)
        out["rows_cos_mm"], out["rows_cos_mm_lo"], out["rows_cos_mm_hi"] = c
        if ref.w_star is not None:
            D = R - ref.w_star
            nd = problem.norm(D)
            out["cos_corrected"] = problem.inner(D, ref.w_mm) / (nd * ref.w_mm_norm) if nd > 0 else math.nan
            c = cosine_band(_centre(D), Tm, ref.rows_error_bound)
            out["rows_cos_corrected"], out["rows_cos_corrected_lo"], out["rows_cos_corrected_hi"] = c
            Wp = R - P
            npl, nmult = float(np.linalg.norm(Wp)), problem.norm(Wp)
            out["margin"] = 0.0 if nmult == 0 else theory.ntp_margin(problem.data_r, R, problem.F) * npl / nmult
    return out
