"""Theory of "Attention with Trained Embeddings Provably Selects Important Tokens": every quantity exactly.

Paper: ``shared/papers/attention-trained-embeddings.txt`` (Wu, Shevchenko, Oymak, Mondelli 2025);
Sec. 4.2 (eqs. 10–12, Theorem 4.3, Lemmas 4.2, 4.4, 4.5) and App. C; errata in ``docs/papers/attention/readings.rst``.

Step 1 (Lemma 4.1), pure numpy:

* :func:`lemma41_alpha` — the signed frequency α_s the first GD step sees (eq. 3 with each sequence
  weighted by its own length).
* :func:`lemma41_prediction` — eq. (6): ``E¹_s − E⁰_s ≈ (η0/2) α_s v``.
* :func:`lemma41_bound` — eq. (7): the paper's error bound 11·η0·d^(−1/4).
* :func:`lemma41_error_scale` — the first-order size of the error, √2‖p⁰‖/√d [inference].

Initialization (eq. 22, App. A), pure numpy:

* :func:`init_concentration_bound` — the bound √(2 log(|S|²/δ))/√d on the inner products at init.
* :func:`init_concentration` — (22) measured on one draw (E⁰, p⁰, v): the largest inner product and the
  extreme norms against 1/2 ≤ ‖E_s‖, ‖p‖ ≤ 2.

Step 2 (Theorem 4.3, Lemmas 4.2, 4.4/4.5):

* :func:`selection` — the selection 𝒮_X(p) = argmax_{s ∈ X} pᵀE_s of eq. (10), per sequence, over
  token *types*, with ties up to a tolerance.
* :func:`max_margin_selection` — the max-margin problem (12) for a given selection:

      min ‖p‖₂  s.t.  (E_s − E_t)ᵀp ≥ 1   for every sequence X, s ∈ 𝒮_X, t ∈ X \\ 𝒮_X,
                      (E_s − E_s')ᵀp = 0  for every sequence X, s, s' ∈ 𝒮_X.

  The equalities encode p ∈ 𝒫_{p∘} (the solution must reproduce the ties of the selection; the
  inequalities already make the non-selected tokens strictly lower).
* :func:`lemma42_point` — Lemma 4.2's proof: p∘/τ (τ the smallest selection gap of p∘) evaluated on
  (12) for the selection of p∘; :func:`max_margin_slsqp` — (12) by scipy's SLSQP, an independent
  cross-check of the unique solution on small problems.
* :func:`compare_selections` — the Lemma 4.4/4.5 experiment: enumerate every selection of a
  small dataset, solve (12) for each, and check whether the important-only selection has the
  largest margin 1/‖p̂‖.

Solver (structured, in :mod:`embgeo.attention.solvers`; this module validates the inputs and
wraps the result): the constraint pairs are deduplicated, the ties merged into classes, conflicts
and cycles of the class graph detected combinatorially (with exact Farkas vectors), and the
reduced problem solved in score space by a primal–dual interior point with an exact active-set
finish, using only Grams and graph Laplacians of at most min(#classes, d) square — never the
pairs × d difference matrix. Every answer carries its certificate, recomputed from E. (The
previous dense LDP/NNLS solver survives as a test reference, ``reference.attention_selection``.)

Padding: ``X`` is padded with ``pad_id`` (the package convention, :mod:`embgeo.attention`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from embgeo.attention.data import check_dataset, check_pad_id
from embgeo.attention.solvers import (
    FARKAS_RTOL,
    KKT_RTOL,
    constraint_pairs,
    solve_max_margin,
    solve_max_margin_slsqp,
)
from embgeo.core.status import Status, certified_dict
from embgeo.core.validate import as_float_array, check_dense_size, check_float, check_positive_int
from embgeo.errors import InputError, ShapeError, SolverError, TooLargeError

__all__ = ["FARKAS_RTOL", "KKT_RTOL", "NORM_MAX", "NORM_MIN", "InitConcentration", "Lemma42Point", "MaxMarginSelection",
           "SelectionComparison", "as_vector", "compare_selections", "init_concentration", "init_concentration_bound",
           "lemma41_alpha", "lemma41_bound", "lemma41_error_scale", "lemma41_prediction", "lemma42_point",
           "max_margin_selection", "max_margin_slsqp", "selection"]


def as_vector(name: str, v: ArrayLike) -> np.ndarray:
    """A finite float64 1-D array from a list, numpy array or torch tensor (detached; torch is not imported)."""
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return as_float_array(name, v, ndim=1)


# ---------------------------------------------------------------------------------------------
# Lemma 4.1: the first GD step


def lemma41_alpha(X: ArrayLike, y: ArrayLike, n_tokens: int, *, pad_id: int | None = None) -> np.ndarray:
    """The signed frequency that the first GD step actually sees, (|S|,).

    ``α_s = (1/n) Σ_k y_k c_{k,s} / T_k`` (c = count of s in X_k, T_k its number of real tokens)
    [inference: at initialization the attention is ≈ 1/T_k, so the step-1 gradient weights each
    sequence by its own length]. For equal lengths it equals eq. (3), i.e.
    :func:`embgeo.attention.data.signed_frequency`; with padding that function normalises by the
    total token count instead (our reading of eq. 3 for variable lengths; the paper's all have length T).

    ``X`` (n, T) int token ids padded with ``pad_id``; ``y`` (n,) in ±1. Every sequence needs a
    real token. Cost O(nT).
    """
    n_tokens = check_positive_int("n_tokens", n_tokens)
    X, y, _, real = check_dataset(X, y, n_tokens, pad_id)
    lengths = real.sum(axis=1)
    if np.any(lengths == 0):
        raise InputError(f"X: sequence {int(np.argmin(lengths))} contains only padding (pad_id={pad_id})")
    w = (y.astype(np.float64) / lengths.astype(np.float64))[:, None] * real.astype(np.float64)   # (n, T)
    alpha = np.bincount(np.where(real, X, 0).ravel(), weights=w.ravel(), minlength=n_tokens)
    return alpha / X.shape[0]


def lemma41_prediction(alpha: ArrayLike, v: ArrayLike, eta0: float) -> np.ndarray:
    """Lemma 4.1, eq. (6): the predicted update ``E¹_s − E⁰_s ≈ (η0/2) α_s v``, shape (|S|, d).

    ``alpha`` (|S|,) from :func:`lemma41_alpha`, ``v`` (d,) the head (numpy or torch).
    """
    alpha = as_vector("alpha", alpha)
    v = as_vector("v", v)
    return 0.5 * check_float("eta0", eta0) * alpha[:, None] * v[None, :]


def lemma41_bound(eta0: float, dim: int) -> float:
    """Lemma 4.1, eq. (7): ``max(‖err_s‖, ‖err_p‖) ≤ 11 η0 d^(−1/4)`` (holds w.h.p. under condition (5)).

    Far above the signal at any practical d: |α_s| ≤ 1, so the prediction itself,
    ‖(η0/2)α_s v‖ ≤ η0/2, is below the bound for every d < 22⁴ ≈ 2.3·10⁵ and a zero update
    satisfies it too. Report it; test the update with
    :func:`embgeo.attention.metrics.lemma41_residual` instead.
    """
    return 11.0 * check_float("eta0", eta0) * check_positive_int("dim", dim) ** -0.25


def lemma41_error_scale(dim: int, norm_p0: float = 1.0) -> float:
    """First-order size of Lemma 4.1's error relative to the prediction: ``√2 ‖p⁰‖ / √d`` [inference].

    At the init, q_i(X) = (1/T)(1 + a_{x_i} − ā_X + …) and g = 1/2 + O(f), with the scores
    a_s = p⁰·E⁰_s ~ 𝒩(0, ‖p⁰‖²/d) and values b_s = v·E⁰_s ~ 𝒩(0, ‖v‖²/d). To first order the
    step-1 update of E_s is (η0/2)α_s[(1 + a_s) v + b_s p⁰] (the terms in ā_X and f average
    over the T tokens of a sequence and are smaller by √T). Both error terms are independent of
    α and have relative size ‖p⁰‖/√d, so ‖R‖_F/‖P‖_F ≈ √2 ‖p⁰‖/√d (compare
    :func:`embgeo.attention.metrics.lemma41_residual`), and the fitted slope has no first-order
    bias: its relative error is ‖p⁰‖/√d divided by √m_eff, m_eff = (Σα²)²/Σα⁴ the number of tokens
    that carry the signal.
    """
    return math.sqrt(2.0) * check_float("norm_p0", norm_p0) / math.sqrt(check_positive_int("dim", dim))


# ---------------------------------------------------------------------------------------------
# eq. (22): concentration at initialization


def init_concentration_bound(n_tokens: int, dim: int, delta: float) -> float:
    """Eq. (22)'s bound on the inner products at initialization: ``√(2 log(|S|²/δ)) / √d``.

    ``n_tokens`` = |S|, ``dim`` = d, ``delta`` ∈ (0, 1) the failure probability of (22).
    """
    n_tokens = check_positive_int("n_tokens", n_tokens)
    dim = check_positive_int("dim", dim)
    delta = check_float("delta", delta)
    if delta >= 1:
        raise InputError(f"delta: expected a probability in (0, 1), got {delta}")
    return math.sqrt(2.0 * math.log(n_tokens**2 / delta)) / math.sqrt(dim)


#: Eq. (22)'s norm bounds: ‖E_s‖, ‖p‖ ≤ NORM_MAX and ‖E_s‖ ≥ NORM_MIN.
NORM_MAX, NORM_MIN = 2.0, 0.5


@dataclass(frozen=True)
class InitConcentration:
    """The quantities of eq. (22) for one initialization (E⁰, p⁰, v), from :func:`init_concentration`.

    max_inner : max{|E_sᵀE_s'| (s ≠ s'), |E_sᵀv|, |E_sᵀp|, |pᵀv|}.
    bound : √(2 log(|S|²/δ)) / √d (:func:`init_concentration_bound`).
    max_norm : max{max_s ‖E_s‖, ‖p‖} (eq. 22: ≤ 2);  min_norm : min_s ‖E_s‖ (eq. 22: ≥ 1/2).
    """

    max_inner: float
    bound: float
    max_norm: float
    min_norm: float

    @property
    def ratio(self) -> float:
        """max_inner / bound (≤ 1 where the inner-product bound holds)."""
        return self.max_inner / self.bound

    @property
    def holds(self) -> bool:
        """Every bound of (22) holds for this draw."""
        return bool(self.max_inner <= self.bound and self.max_norm <= NORM_MAX and self.min_norm >= NORM_MIN)


def init_concentration(E: ArrayLike, p: ArrayLike, v: ArrayLike, delta: float) -> InitConcentration:
    """Eq. (22) measured on one initialization: E (|S|, d), p (d,), v (d,) (numpy or torch), δ ∈ (0, 1).

    The paper draws E⁰_s, p⁰ i.i.d. 𝒩(0, I/d) and v of unit norm (Sec. 4.1), and conditions every result
    that holds with probability ≥ 1 − δ on (22) (App. A). Cost O(|S|² d) for the Gram E Eᵀ, memory |S|²
    (refused above the dense budget).
    """
    E = _check_embeddings(E.detach().cpu().numpy() if hasattr(E, "detach") else E)
    p, v = as_vector("p", p), as_vector("v", v)
    if p.shape != (E.shape[1],) or v.shape != (E.shape[1],):
        raise ShapeError(f"p, v: expected shape ({E.shape[1]},) to match E's d, got {p.shape} and {v.shape}")
    check_dense_size("init_concentration", (E.shape[0], E.shape[0]), "measure (22) on fewer tokens")
    gram = E @ E.T
    np.fill_diagonal(gram, 0.0)  # (22) bounds the cross products s ≠ s' only
    inner = max(float(np.max(np.abs(gram))), float(np.max(np.abs(E @ v))), float(np.max(np.abs(E @ p))),
                abs(float(p @ v)))
    norms = np.linalg.norm(E, axis=1)
    return InitConcentration(inner, init_concentration_bound(E.shape[0], E.shape[1], delta),
                             max(float(norms.max()), float(np.linalg.norm(p))), float(norms.min()))


# ---------------------------------------------------------------------------------------------
# validation helpers


def _check_embeddings(E) -> np.ndarray:
    E = as_float_array("E", E, ndim=2)
    if E.shape[0] < 1 or E.shape[1] < 1:
        raise ShapeError(f"E: expected a non-empty (V, d) array, got shape {E.shape}")
    return E


def _check_tokens(X, V: int, pad_id) -> tuple[np.ndarray, list[np.ndarray]]:
    """X as an (n, T) int array plus, per sequence, its sorted distinct non-pad token ids."""
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise ShapeError(f"X: expected a 2-D (n, T) array of token ids, got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ShapeError(f"X: expected at least one sequence and one position, got shape {arr.shape}")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise InputError(f"X: expected integer token ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    pad_id = check_pad_id(pad_id)
    real = arr != pad_id if pad_id is not None else np.ones(arr.shape, dtype=bool)
    bad = real & ((arr < 0) | (arr >= V))
    if np.any(bad):
        i, j = (int(k) for k in np.argwhere(bad)[0])
        raise InputError(f"X: token ids must lie in [0, V={V}) (E has V rows); found X[{i}, {j}] = {arr[i, j]}")
    tokens = []
    for i in range(arr.shape[0]):
        u = np.unique(arr[i][real[i]])
        if u.size == 0:
            raise InputError(f"X: sequence X[{i}] contains only padding (pad_id={pad_id})")
        tokens.append(u)
    return arr, tokens


def _check_selected(selected, tokens: list[np.ndarray], name: str = "selected") -> list[np.ndarray]:
    n = len(tokens)
    if isinstance(selected, (str, bytes)) or not hasattr(selected, "__len__"):
        raise InputError(f"{name}: expected a sequence of n={n} token-id sets, got {type(selected).__name__}")
    if len(selected) != n:
        raise ShapeError(f"{name}: expected one set per sequence (n={n}), got {len(selected)}")
    out = []
    for i, S in enumerate(selected):
        if isinstance(S, (int, np.integer)) and not isinstance(S, bool):
            S = [S]
        try:
            ids = np.asarray(sorted({int(s) for s in S}), dtype=np.int64)
        except (TypeError, ValueError):
            raise InputError(f"{name}[{i}]: expected an iterable of integer token ids, got {S!r}") from None
        if ids.size == 0:
            raise InputError(f"{name}[{i}]: a selection must be non-empty (eq. 10 takes an argmax)")
        missing = ids[~np.isin(ids, tokens[i])]
        if missing.size:
            raise InputError(f"{name}[{i}]: token {int(missing[0])} does not occur in X[{i}] "
                             f"(tokens present: {tokens[i].tolist()})")
        out.append(ids)
    return out


# ---------------------------------------------------------------------------------------------
# eq. (10)


def selection(E: ArrayLike, X: ArrayLike, p: ArrayLike, *, pad_id: int | None = None,
              tol: float = 1e-9) -> list[frozenset[int]]:
    """The selection 𝒮_X(p) = argmax_{s ∈ X} pᵀE_s of eq. (10), for every sequence of X.

    Parameters
    ----------
    E : (V, d) token embeddings.
    X : (n, T) integer token ids; entries equal to ``pad_id`` are ignored.
    p : (d,) the ⟨cls⟩ embedding.
    tol : ties — token s is selected when max − pᵀE_s ≤ tol · ‖p‖ · max_s ‖E_s‖ (for p = 0 every
        token of the sequence is selected).

    Returns a list of n frozensets of token ids (token types, not positions).
    """
    E = _check_embeddings(E)
    p = as_float_array("p", p, ndim=1)
    if p.shape[0] != E.shape[1]:
        raise ShapeError(f"p: expected shape ({E.shape[1]},) to match E's d, got {p.shape}")
    if not (np.isfinite(tol) and tol >= 0):
        raise InputError(f"tol: expected a finite number >= 0, got {tol!r}")
    _, tokens = _check_tokens(X, E.shape[0], pad_id)
    scores = E @ p
    atol = tol * float(np.linalg.norm(p)) * float(np.max(np.linalg.norm(E, axis=1)))
    out = []
    for u in tokens:
        a = scores[u]
        out.append(frozenset(int(s) for s in u[a >= a.max() - atol]))
    return out


# ---------------------------------------------------------------------------------------------
# eq. (12)


@dataclass
class MaxMarginSelection:
    """Solution of the max-margin problem (12) for one selection, with its certificate.

    Attributes
    ----------
    status : :class:`~embgeo.core.status.Status`, "optimal" or "infeasible" (a str).
    p : (d,) the minimum-norm p̂ (all NaN when infeasible).
    norm : ‖p̂‖₂ (inf when infeasible).
    margin : 1/‖p̂‖ — the margin of the direction p̂/‖p̂‖ (inf when there is no inequality, 0 when
        infeasible).
    pairs : (m, 2) the distinct inequality pairs (s, t): s selected, t not, in some sequence.
    eq_pairs : (k, 2) the distinct tie pairs (s, s'), s < s', selected together in some sequence.
    n_raw : number of inequality constraints before deduplication, Σ_X |𝒮_X|·|X \\ 𝒮_X|.
    n_rows : number of distinct class pairs of the reduced program (pairs merged modulo the ties).
    margins : (m,) (E_s − E_t)ᵀp̂ per pair (≥ 1 at the optimum).
    multipliers : (m,) KKT multipliers μ ≥ 0 of the pairs; p̂ = Σ μ_j (E_s − E_t) + Dᵀν.
    eq_multipliers : (k,) multipliers ν of the tie pairs (sign free).
    active : indices into ``pairs`` with margin ≤ 1 + KKT_RTOL (Lemma C.7: never empty).
    min_margin, eq_residual, stationarity, complementarity, gap : the KKT certificate —
        min_j margins_j, max |(E_s − E_s')ᵀp̂|, ‖p̂ − Aᵀμ − Dᵀν‖ / max(‖p̂‖, 1),
        max_j μ_j |margins_j − 1| / max(max μ, 1), relative duality gap (½‖p̂‖² − dual)/½‖p̂‖².
    farkas : (m,) when infeasible, w ≥ 0 with Σw = 1 over the pairs and Σ w_j (E_s − E_t) in the
        span of the tie rows; ``farkas_residual`` = ‖P_⊥ Σ w_j (E_s − E_t)‖. Any p satisfying the
        ties has min_j (E_s − E_t)ᵀp ≤ farkas_residual · ‖p‖, so the margins cannot all reach 1
        unless ‖p‖ ≥ 1/farkas_residual (exactly 0 for a direct conflict such as s > t and t > s).
        Accepted when ≤ FARKAS_RTOL · max_s ‖E_s‖ over the tokens of the pairs.
    n_classes : number of tie classes carrying an inequality (nodes of the class graph; 0 if not built).
    rank : dimension k of the reduced problem (rank of the class rows after removing the tie
        directions; −1 if not reached).
    iterations : interior-point iterations (0 when decided combinatorially).
    method : how the answer was found, e.g. "interior point (score space) + exact active-set
        finish", "directed cycle", "direct conflict" (the certificate does not depend on it).
    """

    status: Status
    p: np.ndarray
    norm: float
    margin: float
    pairs: np.ndarray
    eq_pairs: np.ndarray
    n_raw: int
    n_rows: int
    margins: np.ndarray | None = None
    multipliers: np.ndarray | None = None
    eq_multipliers: np.ndarray | None = None
    active: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    min_margin: float = np.nan
    eq_residual: float = np.nan
    stationarity: float = np.nan
    complementarity: float = np.nan
    gap: float = np.nan
    farkas: np.ndarray | None = None
    farkas_residual: float = np.nan
    n_classes: int = 0
    rank: int = -1
    iterations: int = 0
    method: str = ""

    @property
    def certificate(self) -> np.ndarray | None:
        """The KKT multipliers μ when optimal, the Farkas vector w when infeasible
        (:class:`~embgeo.core.status.Certified`)."""
        return self.multipliers if self.status == Status.OPTIMAL else self.farkas

    @property
    def residuals(self) -> dict:
        """The certificate's numbers: ``min_margin``, ``eq_residual``, ``stationarity``, ``complementarity``,
        ``gap`` (optimal), ``farkas_residual`` (infeasible); NaN where they do not apply."""
        return {k: float(getattr(self, k)) for k in ("min_margin", "eq_residual", "stationarity", "complementarity",
                                                     "gap", "farkas_residual")}

    def to_dict(self) -> dict:
        """Status, method, residuals, norm, margin and the problem's sizes as strict JSON (the arrays are not in it)."""
        proof = ("KKT multipliers μ ≥ 0 of the pairs (and ν of the ties)" if self.status == Status.OPTIMAL else
                 "a Farkas vector w ≥ 0 over the pairs" if self.farkas is not None else None)
        return certified_dict(self, proof, norm=self.norm, margin=self.margin, pairs=len(self.pairs),
                              ties=len(self.eq_pairs), iterations=self.iterations)

    @property
    def direction(self) -> np.ndarray:
        """p_* = p̂/‖p̂‖ (the paper's normalised max-margin direction)."""
        if self.status != Status.OPTIMAL or not self.norm > 0:
            raise InputError(f"direction: undefined for status='{self.status}', norm={self.norm}")
        return self.p / self.norm


def max_margin_selection(E: ArrayLike, X: ArrayLike, selected: Sequence[Iterable[int] | int], *,
                         pad_id: int | None = None) -> MaxMarginSelection:
    """Solve the max-margin problem (12) of the paper for a given selection.

    ::

        min ‖p‖₂  s.t.  (E_s − E_t)ᵀp ≥ 1   ∀ X, s ∈ selected(X), t ∈ X \\ selected(X)
                        (E_s − E_s')ᵀp = 0  ∀ X, s, s' ∈ selected(X)

    Parameters
    ----------
    E : (V, d) token embeddings (e.g. E¹ after the first GD step).
    X : (n, T) integer token ids; positions equal to ``pad_id`` are ignored.
    selected : length-n sequence; ``selected[i]`` is the non-empty set of token ids of X[i] that
        are selected (a single int is accepted for a one-token selection).
    pad_id : optional padding id.

    Method (:mod:`embgeo.attention.solvers`, in score space a_s = E_sᵀp; never the pairs × d matrix)
    ------
    1. Deduplicate: every (s, t) pair is one constraint however many sequences contain it.
    2. Tie classes: connected components of the tie pairs. A pair inside one class is a direct
       conflict (0 ≥ 1): infeasible with a one-pair Farkas certificate.
    3. Class graph: pairs become edges C(s) → C(t), deduplicated; a directed cycle is infeasible
       with an exact Farkas vector (uniform on the cycle).
    4. Reduce: class rows P⊥E_root (P⊥ removes the tie directions), a rank-revealing QR gives k
       coordinates; the problem is min ½‖y‖² s.t. (f_i − f_j)ᵀy ≥ 1, p = Z y.
    5. Primal–dual interior point with a min(g, k)-square Newton matrix: in score space
       (M + weighted graph Laplacian, M = (F Fᵀ)⁻¹) when the g class rows are independent, else in
       embedding space; then an exact finish on the active set (scores fixed by the active edges up
       to one constant per component, the constants by a small solve, the multipliers by a
       Laplacian solve). Infeasible in embedding space: the diverging multipliers give a Farkas
       vector, made exact by NNLS on their support.
    6. Certify from E in the original coordinates: margins, tie residuals, multipliers ≥ 0,
       complementarity, stationarity (ν by least squares on a spanning forest of the tie pairs) and
       the duality gap — or the Farkas residual. An uncertified answer raises
       :class:`~embgeo.errors.SolverError`; a wrong p is never returned.

    Cost: O(Σ_X |𝒮_X||X|) to build the pairs, d·g·min(d, g) for the reduction, then ~20–40
    interior-point iterations of O(r + g²) + g³/3 (score space) or O(r k + g k²) + k³/3 (embedding
    space), r distinct pairs, g classes. Memory O(r + g d + min(g, d)²), estimated first: above
    ``solvers.MEMORY_BUDGET`` a :class:`~embgeo.errors.TooLargeError` names the sizes.
    """
    E = _check_embeddings(E)
    _, tokens = _check_tokens(X, E.shape[0], pad_id)
    sel = _check_selected(selected, tokens)
    return MaxMarginSelection(**solve_max_margin(E, tokens, sel))


# ---------------------------------------------------------------------------------------------
# Lemma 4.2


@dataclass(frozen=True)
class Lemma42Point:
    """Lemma 4.2's feasible point p∘/τ, evaluated on problem (12) built for a selection (:func:`lemma42_point`).

    tau : p∘'s smallest selection gap, min over X and s ∈ 𝒮_X(p∘), s' ∈ X \\ 𝒮_X(p∘) of p∘ᵀ(E_s − E_s')
        (App. C.2; > 0 by eq. 10; inf when no sequence has a non-selected token).
    p : (d,) the point p∘/τ (zeros when τ = inf: (12) then has no inequality).
    min_margin : min over (12)'s inequality pairs (s, t) of (E_s − E_t)ᵀp (inf without pairs; ≥ 1 if feasible).
    tie_residual : max over (12)'s tie pairs of |(E_s − E_s')ᵀp| / (‖p‖ max_s ‖E_s‖) (0 without ties), the
        equalities that keep p in the class 𝒫_{p∘}, measured as the solver's certificate does.
    same_selection : 𝒮_X(p) equals the problem's selection for every X (eq. 11, read directly).
    n_tied : number of sequences in which p∘ selects several tokens.
    selected : the selection (12) is built for (n frozensets of token ids).
    pairs, eq_pairs : (12)'s constraints, as :func:`max_margin_selection` builds them.
    """

    tau: float
    p: np.ndarray
    min_margin: float
    tie_residual: float
    same_selection: bool
    n_tied: int
    selected: list
    pairs: np.ndarray
    eq_pairs: np.ndarray

    @property
    def feasible(self) -> bool:
        """p∘/τ meets every constraint of (12) up to the solver's certificate tolerance (KKT_RTOL)."""
        return bool(self.min_margin >= 1 - KKT_RTOL and self.tie_residual <= 10 * KKT_RTOL and self.same_selection)


def _selection_gap(scores: np.ndarray, tokens: list[np.ndarray], sel: list[frozenset[int]]) -> float:
    """min over sequences of (lowest selected score − highest non-selected score); inf if none has both."""
    gaps = [min(scores[s] for s in S) - float(np.max(scores[np.setdiff1d(u, list(S))]))
            for u, S in zip(tokens, sel, strict=True) if len(S) < u.size]
    return min(gaps, default=math.inf)


def lemma42_point(E: ArrayLike, X: ArrayLike, p_circ: ArrayLike, selected: Sequence[Iterable[int] | int] | None = None,
                  *, pad_id: int | None = None, tol: float = 1e-9) -> Lemma42Point:
    """Lemma 4.2's proof (App. C.2): p∘/τ is feasible for the max-margin problem (12) of p∘'s selection.

    Parameters
    ----------
    E : (V, d) token embeddings;  X : (n, T) token ids padded with ``pad_id``;  p_circ : (d,), p∘ ≠ 0.
    selected : the selection (12) is built for (as in :func:`max_margin_selection`); default 𝒮_X(p∘) of
        eq. (10), the lemma's case. Another selection gives the point of a wrong problem (tests).
    tol : ties in 𝒮_X(p∘), as in :func:`selection`; tied tokens are all selected, so (12) then has their
        equalities, and τ runs over every selected token.

    Cost O(Σ_X |X|) plus (12)'s pairs.
    """
    E = _check_embeddings(E)
    p_circ = as_vector("p_circ", p_circ)
    if p_circ.shape != (E.shape[1],):
        raise ShapeError(f"p_circ: expected shape ({E.shape[1]},) to match E's d, got {p_circ.shape}")
    if not np.any(p_circ):
        raise InputError("p_circ: Lemma 4.2 needs p∘ ≠ 0 (every token is selected by p = 0)")
    _, tokens = _check_tokens(X, E.shape[0], pad_id)
    own = selection(E, X, p_circ, pad_id=pad_id, tol=tol)
    sel = own if selected is None else [frozenset(int(s) for s in S) for S in _check_selected(selected, tokens)]
    pairs, eq_pairs, _ = constraint_pairs(tokens, [np.asarray(sorted(S), dtype=np.int64) for S in sel], E.shape[0])
    tau = _selection_gap(E @ p_circ, tokens, own)
    p = p_circ / tau if math.isfinite(tau) else np.zeros_like(p_circ)
    a = E @ p
    min_margin = float(np.min(a[pairs[:, 0]] - a[pairs[:, 1]])) if len(pairs) else math.inf
    tie = 0.0
    if len(eq_pairs):  # relative to ‖p‖ max‖E_s‖, as the solver's certificate (solvers.certify)
        tie = float(np.max(np.abs(a[eq_pairs[:, 0]] - a[eq_pairs[:, 1]])))
        tie /= max(float(np.linalg.norm(p)) * float(np.max(np.linalg.norm(E, axis=1))), 1e-300)
    same = selection(E, X, p, pad_id=pad_id, tol=tol) == list(sel) if np.any(p) else all(
        len(S) == u.size for S, u in zip(sel, tokens, strict=True))
    return Lemma42Point(tau, p, min_margin, tie, bool(same), sum(len(S) > 1 for S in own), list(sel), pairs, eq_pairs)


def max_margin_slsqp(E: ArrayLike, X: ArrayLike, selected: Sequence[Iterable[int] | int], start: ArrayLike, *,
                     pad_id: int | None = None) -> np.ndarray:
    """Problem (12) solved by scipy's SLSQP from ``start`` (d,) — an independent cross-check of
    :func:`max_margin_selection` on small problems (Lemma 4.2: the solution is unique, so they must agree).

    Same inputs as :func:`max_margin_selection`; returns p̂ (d,). Dense in the constraints × involved tokens
    (refused above ``solvers.SLSQP_MAX_ENTRIES``); raises :class:`~embgeo.errors.SolverError` if SLSQP fails.
    """
    E = _check_embeddings(E)
    _, tokens = _check_tokens(X, E.shape[0], pad_id)
    sel = _check_selected(selected, tokens)
    start = as_vector("start", start)
    if start.shape != (E.shape[1],):
        raise ShapeError(f"start: expected shape ({E.shape[1]},) to match E's d, got {start.shape}")
    pairs, eq_pairs, _ = constraint_pairs(tokens, sel, E.shape[0])
    out = solve_max_margin_slsqp(E, pairs, eq_pairs, start)
    if not out["success"]:
        raise SolverError(f"max_margin_slsqp: SLSQP failed after {out['iterations']} iterations: {out['message']}")
    return out["p"]


# ---------------------------------------------------------------------------------------------
# Lemmas 4.4 / 4.5


@dataclass
class SelectionComparison:
    """Result of :func:`compare_selections`.

    selections : every enumerated selection (tuple of frozensets, one per sequence).
    norms : ‖p̂‖ per selection (inf when (12) is infeasible for it, 0 for the all-tokens one).
    important_index : index of the important-only selection in ``selections``.
    important_norm : its ‖p̂‖.
    best_other_norm : min ‖p̂′‖ over the other feasible, non-trivial selections (inf if none).
    mu : the largest μ with ‖p̂‖ ≤ (1 − μ)‖p̂′‖ for every such p̂′, i.e. 1 − important/best_other
        (≤ 0 when the condition fails).
    important_is_best : the important-only selection is feasible and has the strictly largest
        margin 1/‖p̂‖ among the feasible non-trivial selections (μ > 0).
    n_feasible : number of feasible selections (the trivial all-tokens one included).
    """

    selections: list
    norms: np.ndarray
    important_index: int
    important_norm: float
    best_other_norm: float
    mu: float
    important_is_best: bool
    n_feasible: int


def compare_selections(E: ArrayLike, X: ArrayLike, important: Sequence[Iterable[int] | int], *,
                       pad_id: int | None = None, candidates: str = "containing",
                       max_selections: int = 4096) -> SelectionComparison:
    """Lemma 4.4/4.5 check: does the important-only selection have the largest margin?

    Enumerates the candidate selections, solves (12) for each with :func:`max_margin_selection`,
    and compares ‖p̂‖ of the important-only selection with every other feasible one.

    Which selections compete (``candidates``):

    * ``"containing"`` (default, Lemma 4.5's reading): each sequence selects its important
      token(s) plus any subset of its other tokens. Theorem 4.3 (1) shows that the directional
      limit selects every important token, and the proof of Lemma 4.5 (App. C.4) uses exactly
      this ("By Theorem 4.3, s_*^X ∈ 𝒮_X(p̂′)"), so only these selections are candidate limits.
    * ``"all"``: every non-empty subset of each sequence's distinct tokens. After one GD step
      selections that drop an important token can have far larger margins (p ∝ v separates the
      classes through the value direction), so μ < 0 here says nothing about Lemma 4.5.

    The trivial selection that picks every token of every sequence has no margin constraint
    (p̂ = 0); by Lemma 4.4 it is never the limit of gradient flow, so it is excluded from the
    comparison (reported with norm 0).

    **Erratum (Lemma 4.5).** The statement prints ‖p̂′‖₂ < (1 − μ)‖p̂‖₂; its proof uses
    ‖p̂‖/‖p̂′‖ = 1 − μ < 1 and the prose says the important-only direction "has a larger margin".
    The intended condition, checked here, is ‖p̂‖₂ ≤ (1 − μ)‖p̂′‖₂ for every other feasible
    selection, with μ > 0 (our reading of the proof in App. C.4; ``docs/papers/attention/readings.rst``).

    Parameters
    ----------
    important : length-n; the important token(s) of each sequence (an int or a set per sequence).
    candidates : "containing" or "all" (above).
    max_selections : refuse (TooLargeError) when the number of candidate selections exceeds this
        (Π_X 2^{|X \\ important_X|} for "containing", Π_X (2^{|X|} − 1) for "all").
    """
    if candidates not in ("containing", "all"):
        raise InputError(f"candidates: expected 'containing' or 'all', got {candidates!r}")
    E = _check_embeddings(E)
    if isinstance(max_selections, bool) or not isinstance(max_selections, (int, np.integer)) or max_selections < 1:
        raise InputError(f"max_selections: expected an integer >= 1, got {max_selections!r}")
    _, tokens = _check_tokens(X, E.shape[0], pad_id)
    imp = tuple(frozenset(int(s) for s in S) for S in _check_selected(important, tokens, name="important"))
    # per sequence: the fixed part (its important tokens, or nothing) and the free tokens
    fixed = list(imp) if candidates == "containing" else [frozenset()] * len(tokens)
    free = [[int(s) for s in u if int(s) not in f] for u, f in zip(tokens, fixed, strict=True)]
    count = 1
    for f, rest in zip(fixed, free, strict=True):
        count *= 2 ** len(rest) - (0 if f else 1)
        if count > max_selections:
            raise TooLargeError(f"compare_selections: the number of {candidates!r} selections exceeds "
                                f"max_selections={max_selections}; use fewer/shorter sequences or raise the cap")
    per_seq = [[f | frozenset(c) for k in range(0 if f else 1, len(rest) + 1)
                for c in itertools.combinations(rest, k)] for f, rest in zip(fixed, free, strict=True)]
    selections = list(itertools.product(*per_seq))
    trivial = tuple(frozenset(int(s) for s in u) for u in tokens)
    norms = np.empty(len(selections))
    for k, S in enumerate(selections):
        res = max_margin_selection(E, X, S, pad_id=pad_id)
        norms[k] = res.norm
    important_index = selections.index(imp)
    others = [k for k, S in enumerate(selections) if k != important_index and S != trivial and np.isfinite(norms[k])]
    best_other = float(np.min(norms[others])) if others else np.inf
    imp_norm = float(norms[important_index])
    if not np.isfinite(imp_norm):
        mu = -np.inf
    elif np.isfinite(best_other):
        mu = 1.0 - imp_norm / best_other
    else:
        mu = 1.0
    return SelectionComparison(selections=selections, norms=norms, important_index=important_index,
                               important_norm=imp_norm, best_other_norm=best_other, mu=float(mu),
                               important_is_best=bool(np.isfinite(imp_norm) and imp != trivial and mu > 0),
                               n_feasible=int(np.sum(np.isfinite(norms))))
