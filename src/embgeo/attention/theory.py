"""Max-margin token selection of "Attention with Trained Embeddings Provably Selects Important Tokens".

Paper: ``shared/papers/attention-trained-embeddings.txt`` (Wu, Shevchenko, Oymak, Mondelli 2025);
digest with errata: ``shared/notes/attention-trained-embeddings.md`` §3.3 and §3.5.

* :func:`selection` — the selection 𝒮_X(p) = argmax_{s ∈ X} pᵀE_s of eq. (10), per sequence, over
  token *types*, with ties up to a tolerance.
* :func:`max_margin_selection` — the max-margin problem (12) for a given selection:

      min ‖p‖₂  s.t.  (E_s − E_t)ᵀp ≥ 1   for every sequence X, s ∈ 𝒮_X, t ∈ X \\ 𝒮_X,
                      (E_s − E_s')ᵀp = 0  for every sequence X, s, s' ∈ 𝒮_X.

  The equalities encode p ∈ 𝒫_{p∘} (the solution must reproduce the ties of the selection; the
  inequalities already make the non-selected tokens strictly lower).
* :func:`compare_selections` — the Lemma 4.4/4.5 experiment: enumerate every selection of a
  small dataset, solve (12) for each, and check whether the important-only selection has the
  largest margin 1/‖p̂‖.

Solver (structured, see :func:`max_margin_selection`): the constraint pairs are deduplicated (a
pair (s, t) occurring in many sequences is one constraint), the tie equalities are merged into
tie classes (union-find) and eliminated by projecting onto the null space of their rows, pairs
that become identical modulo the ties are merged again, and the remaining least-distance
program min ‖p‖ s.t. Ãp ≥ 1 is solved *exactly* through its dual by Lawson–Hanson NNLS
(LDP, Lawson & Hanson 1974, ch. 23). The NNLS residual decides feasibility: it is zero exactly
when a Farkas vector w ≥ 0, 1ᵀw = 1, Ãᵀw = 0 exists. Every answer carries its certificate.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from embgeo.core.validate import as_float_array
from embgeo.errors import InputError, ShapeError, SolverError, TooLargeError

#: Relative tolerance of the KKT certificate (margins, complementarity, duality gap).
KKT_RTOL = 1e-8
#: A Farkas vector w is accepted when ‖Ãᵀw‖ ≤ FARKAS_RTOL · max_j ‖E_s − E_t‖ (unprojected rows):
#: then every p meeting the constraints has ‖p‖ ≥ 1/‖Ãᵀw‖, i.e. a margin below FARKAS_RTOL times the data's scale.
FARKAS_RTOL = 1e-9


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
    if pad_id is not None:
        if isinstance(pad_id, bool) or not isinstance(pad_id, (int, np.integer)):
            raise InputError(f"pad_id: expected an integer or None, got {pad_id!r}")
        pad_id = int(pad_id)
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


def selection(E, X, p, *, pad_id=None, tol: float = 1e-9) -> list[frozenset[int]]:
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
    status : "optimal" or "infeasible".
    p : (d,) the minimum-norm p̂ (all NaN when infeasible).
    norm : ‖p̂‖₂ (inf when infeasible).
    margin : 1/‖p̂‖ — the margin of the direction p̂/‖p̂‖ (inf when there is no inequality, 0 when
        infeasible).
    pairs : (m, 2) the distinct inequality pairs (s, t): s selected, t not, in some sequence.
    eq_pairs : (k, 2) the distinct tie pairs (s, s'), s < s', selected together in some sequence.
    n_raw : number of inequality constraints before deduplication, Σ_X |𝒮_X|·|X \\ 𝒮_X|.
    n_rows : number of rows of the reduced program actually solved (after merging tie classes).
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
    """

    status: str
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

    @property
    def direction(self) -> np.ndarray:
        """p_* = p̂/‖p̂‖ (the paper's normalised max-margin direction)."""
        if self.status != "optimal" or not self.norm > 0:
            raise InputError(f"direction: undefined for status={self.status!r}, norm={self.norm}")
        return self.p / self.norm


class _UnionFind:
    def __init__(self, n: int):
        self.parent = np.arange(n)

    def find(self, a: int) -> int:
        root = a
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[a] != root:
            self.parent[a], a = root, self.parent[a]
        return int(root)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _constraint_pairs(tokens: list[np.ndarray], sel: list[np.ndarray], V: int):
    """Distinct inequality pairs (s, t), distinct tie pairs (s < s'), and the raw count."""
    ineq_codes, eq_codes, n_raw = [], [], 0
    for u, S in zip(tokens, sel, strict=True):
        rest = u[~np.isin(u, S)]
        n_raw += S.size * rest.size
        if rest.size:
            ineq_codes.append((S[:, None] * V + rest[None, :]).ravel())
        if S.size > 1:
            i, j = np.triu_indices(S.size, k=1)
            eq_codes.append(S[i] * V + S[j])
    ineq = np.unique(np.concatenate(ineq_codes)) if ineq_codes else np.zeros(0, dtype=np.int64)
    eq = np.unique(np.concatenate(eq_codes)) if eq_codes else np.zeros(0, dtype=np.int64)
    return np.stack([ineq // V, ineq % V], axis=1), np.stack([eq // V, eq % V], axis=1), n_raw


def max_margin_selection(E, X, selected, *, pad_id=None) -> MaxMarginSelection:
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

    Method
    ------
    1. Deduplicate: every (s, t) pair is one constraint however many sequences contain it.
    2. Tie classes: union-find over the tie pairs; D holds one row E_s − E_root per non-root
       member. An inequality pair whose two tokens fall in one tie class is a direct conflict
       (0 ≥ 1): infeasible with a one-pair Farkas certificate.
    3. Eliminate the equalities: with Q an orthonormal basis of row(D), the feasible p lie in
       row(D)^⊥ and there (E_s − E_t)ᵀp = ã_jᵀp with ã_j = (I − QQᵀ)(E_s − E_t). Pairs with equal
       (class(s), class(t)) give equal ã_j and are merged.
    4. Solve the least-distance program min ‖p‖ s.t. Ãp ≥ 1 exactly by NNLS: with Ãᵀ = UR
       (thin QR), u = argmin_{u ≥ 0} ‖[R; 1ᵀ]u − e_last‖. If σ = 1 − 1ᵀu > 0 then μ = u/σ are
       the KKT multipliers and p̂ = Ãᵀμ; if σ = 0, w = u/1ᵀu is a Farkas vector (Ãᵀw = 0).
    5. Certify: margins, tie residuals, multipliers ≥ 0, complementarity, stationarity in the
       original coordinates (ν by least squares on D) and the duality gap. An uncertified answer
       raises :class:`~embgeo.errors.SolverError`; a wrong p is never returned.
    """
    E = _check_embeddings(E)
    V, d = E.shape
    _, tokens = _check_tokens(X, V, pad_id)
    sel = _check_selected(selected, tokens)
    pairs, eq_pairs, n_raw = _constraint_pairs(tokens, sel, V)
    m = len(pairs)

    # tie classes
    uf = _UnionFind(V)
    for s, s2 in eq_pairs:
        uf.union(int(s), int(s2))
    involved = np.unique(np.concatenate([pairs.ravel(), eq_pairs.ravel()])).astype(np.int64)
    root = np.arange(V)
    root[involved] = [uf.find(int(s)) for s in involved]
    members = involved[root[involved] != involved]
    D = E[members] - E[root[members]]  # spanning rows of the ties
    D_all = E[eq_pairs[:, 0]] - E[eq_pairs[:, 1]] if len(eq_pairs) else np.zeros((0, d))

    base = dict(pairs=pairs, eq_pairs=eq_pairs, n_raw=int(n_raw))
    if m == 0:  # every sequence selects all its tokens: only ties, p̂ = 0 (cf. Lemma 4.4)
        return MaxMarginSelection("optimal", np.zeros(d), 0.0, np.inf, n_rows=0, margins=np.zeros(0),
                                  multipliers=np.zeros(0), eq_multipliers=np.zeros(len(eq_pairs)),
                                  min_margin=np.inf, eq_residual=0.0, stationarity=0.0, complementarity=0.0,
                                  gap=0.0, **base)

    conflict = np.flatnonzero(root[pairs[:, 0]] == root[pairs[:, 1]])
    if conflict.size:
        w = np.zeros(m)
        w[conflict[0]] = 1.0
        return MaxMarginSelection("infeasible", np.full(d, np.nan), np.inf, 0.0, n_rows=0, farkas=w,
                                  farkas_residual=0.0, **base)

    # eliminate ties: orthonormal basis of row(D)
    if len(D):
        _, sv, Vt = np.linalg.svd(D, full_matrices=False)
        rank = int(np.sum(sv > sv[0] * max(D.shape) * np.finfo(float).eps)) if sv.size else 0
        Q = Vt[:rank].T
    else:
        Q = np.zeros((d, 0))
    keys = root[pairs[:, 0]] * V + root[pairs[:, 1]]
    ukeys, rep, inv = np.unique(keys, return_index=True, return_inverse=True)
    A = E[pairs[rep, 0]] - E[pairs[rep, 1]]  # (r, d) one row per merged pair
    At = A - (A @ Q) @ Q.T
    r_rows = len(ukeys)
    U, R = np.linalg.qr(At.T)  # At.T = U R,  ‖Ãᵀμ‖ = ‖Rμ‖
    M = np.vstack([R, np.ones((1, r_rows))])
    f = np.zeros(M.shape[0])
    f[-1] = 1.0
    u, _ = nnls(M, f, maxiter=max(50 * r_rows, 1000))
    total = float(u.sum())
    sigma = 1.0 - total
    row_scale = float(np.max(np.linalg.norm(A, axis=1)))  # scale of the unprojected rows

    def to_pairs(vec):  # scatter a vector over merged rows onto one representative pair each
        out = np.zeros(m)
        out[rep] = vec
        return out

    if sigma > 0:
        mu_rows = u / sigma
        p = U @ (R @ mu_rows)
        a_all = (E[pairs[:, 0]] - E[pairs[:, 1]]) @ p
        gamma = float(a_all.min())
        if gamma > 0:
            p, a_all = p / gamma, a_all / gamma  # exact feasibility (γ = 1 up to rounding)
            norm = float(np.linalg.norm(p))
            mu = to_pairs(mu_rows)
            resid = p - (E[pairs[:, 0]] - E[pairs[:, 1]]).T @ mu
            if len(D_all):
                nu = np.linalg.lstsq(D_all.T, resid, rcond=None)[0]
                resid = resid - D_all.T @ nu
                eq_res = float(np.max(np.abs(D_all @ p))) / max(norm * float(np.max(np.linalg.norm(E, axis=1))), 1e-300)
            else:
                nu, eq_res = np.zeros(0), 0.0
            primal = 0.5 * norm**2
            dual = float(mu_rows.sum()) - 0.5 * float(np.sum((R @ mu_rows) ** 2))
            cert = dict(
                min_margin=float(a_all.min()),
                eq_residual=eq_res,
                stationarity=float(np.linalg.norm(resid)) / max(norm, 1.0),
                complementarity=float(np.max(mu * np.abs(a_all - 1.0))) / max(float(mu.max()), 1.0),
                gap=max(primal - dual, 0.0) / primal,
            )
            ok = (cert["min_margin"] >= 1 - KKT_RTOL and cert["eq_residual"] <= KKT_RTOL * 10
                  and cert["stationarity"] <= 1e-6 and cert["complementarity"] <= 1e-6
                  and cert["gap"] <= 1e-6 and np.all(mu >= 0))
            if ok:
                return MaxMarginSelection("optimal", p, norm, 1.0 / norm, n_rows=r_rows, margins=a_all,
                                          multipliers=mu, eq_multipliers=nu,
                                          active=np.flatnonzero(a_all <= 1 + 1e-6), **cert, **base)
    if total > 0:
        w_rows = u / total
        farkas_residual = float(np.linalg.norm(R @ w_rows))
        if farkas_residual <= FARKAS_RTOL * row_scale:
            return MaxMarginSelection("infeasible", np.full(d, np.nan), np.inf, 0.0, n_rows=r_rows,
                                      farkas=to_pairs(w_rows), farkas_residual=farkas_residual, **base)
    raise SolverError(f"max_margin_selection: NNLS answer could not be certified (sigma={sigma:.3e}, "
                      f"{r_rows} reduced rows); the problem is probably nearly infeasible or ill-conditioned")


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


def compare_selections(E, X, important, *, pad_id=None, candidates: str = "containing",
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
    selection, with μ > 0 (digest §3.5).

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
