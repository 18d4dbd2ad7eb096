"""NTP-separability (Def. 2) at a real LM's size by the squared hinge, decided with a certificate either way.

In the t-form of :mod:`embgeo.ntp.solvers.constraints` over token groups g (tokens with the same contexts J_g; every
token that is never a next token falls in one group, so the problem's size is the number of distinct next
tokens, not V). With whitened context coordinates Q = K R⁻¹ (m × r, K = QR, scaled so that QᵀQ = (m/r)·I)
and rows y_g = R x_g, the logits are unchanged (y_gᵀq_j = x_gᵀk_j), and

    φ(Y, t) = ½ Σ_{(g,j): g ∉ S_j} (1 − t_j + y_gᵀq_j)₊²  +  ½ Σ_{(g,j): g ∈ S_j} (y_gᵀq_j − t_j)²

is ≥ 0 and vanishes exactly at the separators: tied supports (6a) and every off-support margin ≥ 1 (6b).
So min φ = 0 iff the data are NTP-separable. At a minimiser with φ > 0 the residuals λ_gj = (1 − t_j +
y_gᵀq_j)₊ ≥ 0 off the supports and ν_gj = y_gᵀq_j − t_j on them satisfy ∇φ = 0:

    Σ_j λ_gj q_j + Σ_j ν_gj q_j = 0 for every g,  and  Σ_g λ_gj + Σ_g ν_gj = 0 for every j,

which is a Farkas matrix Ψ = (−λ off, −ν on) of :mod:`embgeo.ntp.solvers.svm_dual`'s form (Σ_off λ = 2φ +
‖ν‖² > 0). The whitening changes neither question nor certificate (Ψ Q = 0 ⟺ Ψ K = 0); it only
makes the minimisation as well conditioned as the supports allow (a real LM's final states have a
condition number in the hundreds, which slowed L-BFGS on K a hundredfold).

The minimisation (L-BFGS, each step one pass over the m × G logits in blocks of contexts) is not the
certificate; every answer is checked on the full problem by the existing routes:

* separable: the iterate's rows, tie-projected exactly in Q's coordinates (:func:`separating_margin`), have a positive
  smallest margin on a full scan, and are rescaled to margin 1 (:func:`separability.separable_result`);
* not separable: the LP of :mod:`embgeo.ntp.solvers.separability_lp` restricted to the off-support pairs with
  λ > 0 at the iterate (a few thousand at most where the run stalls) is infeasible; its duals, completed
  by :meth:`SVMDual.farkas_from`, are a Farkas matrix of the whole problem (a subsystem that has no
  solution certifies the system).
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import daxpy, saxpy

from embgeo.core.deadline import past
from embgeo.core.validate import check_options
from embgeo.ntp.solvers.constraints import row_dots
from embgeo.ntp.solvers.outcome import ProgressEvent, ProgressFn


@dataclass(frozen=True)
class HingeOptions:
    """The squared hinge's tuning, as data: a :class:`HingeProblem` carries them (:func:`whiten` ``options``;
    :func:`embgeo.ntp.theory.is_separable` ``hinge_options``), and a test or a study passes its own instead of
    patching the module (``dataclasses.replace(HingeOptions(), NEWTON_ROUNDS=0)``)."""

    #: Logit blocks of at most this many entries (8 bytes each) in one pass of φ and its gradient.
    BLOCK_ENTRIES: int = 8_000_000
    #: Try the separating certificate (a tie projection and a full scan) every this many L-BFGS steps.
    CHECK_EVERY: int = 10
    #: L-BFGS memory.
    MEMORY: int = 20
    #: φ has stalled (a Farkas certificate is tried) when it fell less than this fraction over the last
    #: ``STALL_WINDOW`` steps while staying above zero.
    STALL_DROP: float = 1e-3
    STALL_WINDOW: int = 30
    #: Semismooth Newton steps (each a new active set) tried after every NEWTON_EVERY L-BFGS steps.
    NEWTON_ROUNDS: int = 4
    NEWTON_EVERY: int = 50
    #: ... that lowered φ by less than this fraction (L-BFGS runs on, keeping its curvature pairs, while it does better:
    #: restarting it every 50 steps left φ = 630 after 200 steps at m = 10,000 where one run reached 172).
    NEWTON_WHEN_DROP: float = 0.1
    #: The least-squares matrix of a Newton step holds at most this many rows (active pairs and ties; r + 1 nonzeros
    #: each: 2 million rows of r = 576 are about 14 GB, so 400,000 rows about 2.8 GB).
    NEWTON_MAX_ROWS: int = 400_000
    #: At most this many off-support pairs in the restricted LP that certifies non-separability.
    LP_PAIRS: int = 20_000
    #: Armijo's sufficient-decrease constant and the most halvings of a step before the line search gives up (a stall).
    ARMIJO: float = 1e-4
    MAX_HALVINGS: int = 40
    #: The working set (:class:`WorkingSet`): the off-support pairs within SLACK of violation (hinge argument > −SLACK),
    #: at most WS_PAIRS of them (the largest), taken anew every REFRESH steps; it replaces the full pass once at most
    #: WS_PAIRS / 2 pairs are violated, and while the set holds at most WS_SHARE of all pairs (a pair costs the
    #: sampled product several times what it costs the dense one: at m = 2000, G = 1190 a working set of 300,000 pairs,
    #: 12 % of them, made the steps slower than full passes).
    SLACK: float = 1.0
    WS_SHARE: float = 0.05
    WS_PAIRS: int = 300_000
    REFRESH: int = 20
    #: The separating check (a tie projection and a full scan) is skipped at its turn while less than this many times
    #: its last duration has passed since it ended: it then costs at most 1/(1 + CHECK_SPACING) of the run.
    CHECK_SPACING: float = 4.0
    #: Steps 1, ½, ¼, … tried along a Newton direction.
    LINE_SEARCH_STEPS: int = 8
    #: LSQR iterations between two looks at the deadline in :func:`newton_step`.
    LSQR_CHUNK: int = 50
    #: In the working-set phase, L-BFGS's initial inverse Hessian is D^−p times the usual scalar, D φ's Gauss–Newton
    #: diagonal on its active terms (:func:`active_curvature`, floored at CURVATURE_FLOOR of its largest entry) and p
    #: this exponent (0: the scalar alone, as before 2026-11-30). Measured 2026-11-30, one thread, two runs side by
    #: side, `is_separable(method="hinge")` on SmolLM2's m = 10,000 samples of the user manual / of the whole Vim
    #: documentation (L-BFGS steps in brackets): p = 0 71–73 s (460–500) / 498–508 s; p = 1 188 s (1,080) / 226–246 s;
    #: p = 1 with the floor at 0.1 57 s (280) / 287 s (1,840); **p = ½ 74 s (480) / 180 s (1,000)**; p = ½ with the
    #: floor at 0.1 64 s (380) / –. The full diagonal overshoots where one scalar undershoots; its square root
    #: helps the one sample without costing the other.
    DIAGONAL_SCALING: float = 0.5
    CURVATURE_FLOOR: float = 1e-3
    #: When a run slows or stalls, the pair certificates are tried among the this many token groups that carry most of
    #: φ (:func:`embgeo.ntp.theory.separability.separability_by_hinge`; 0 or 1: not). At φ's minimiser the Farkas
    #: matrix lives on the groups left with residuals: SmolLM2's random 10,000 contexts of the Vim documentation
    #: levelled off at φ ≈ 36 with 95 % of it on the groups of "," and ".", whose pair is its certificate.
    GUIDED_GROUPS: int = 6

    def __post_init__(self):
        # (the two settings whose wrong values would not fail loudly: a growing or a zero initial inverse Hessian)
        if not self.DIAGONAL_SCALING >= 0:
            raise ValueError(f"HingeOptions.DIAGONAL_SCALING: expected an exponent ≥ 0, got {self.DIAGONAL_SCALING}")
        if not 0 < self.CURVATURE_FLOOR <= 1:
            raise ValueError(f"HingeOptions.CURVATURE_FLOOR: expected a fraction in (0, 1], got {self.CURVATURE_FLOOR}")
        if not self.GUIDED_GROUPS >= 0:  # (a negative count would slice from the end: the wrong groups, silently)
            raise ValueError(f"HingeOptions.GUIDED_GROUPS: expected a count ≥ 0, got {self.GUIDED_GROUPS}")


#: The tuning every problem uses unless given other options.
DEFAULT_OPTIONS = HingeOptions()


@dataclass
class HingeProblem:
    """φ over whitened coordinates: Q (m, r), the support pattern by context, its pairs."""

    Q: np.ndarray  # (m, r), QᵀQ = (m/r)·I
    R: np.ndarray  # (r, r), K = Q R / s (the thin QR of K)
    support: sp.csr_matrix  # (m, G) 0/1: the supports S_j by context
    s: float
    Q32: np.ndarray | None = None  # Q in float32 for the bulk passes (see :func:`value_and_grad`)
    opt: HingeOptions = DEFAULT_OPTIONS  # the tuning of every function that takes this problem
    ties: object = None  # the tie projection in Q's coordinates (:func:`separating_margin`), made on first use
    qq: np.ndarray | None = None  # (m,) ‖q_j‖²/r (:func:`active_curvature`), made on first use

    @property
    def shape(self) -> tuple[int, int, int]:
        m, r = self.Q.shape
        return m, self.support.shape[1], r

    def factors(self, Y: np.ndarray, single: bool) -> tuple[np.ndarray, np.ndarray]:
        """(Q, Y) for a pass's products: as they are, or both in float32 when ``single`` (Q32 made on first use)."""
        if not single:
            return self.Q, Y
        if self.Q32 is None:
            self.Q32 = self.Q.astype(np.float32)
        return self.Q32, Y.astype(np.float32)


def whiten(K: np.ndarray, pattern: sp.csr_matrix, options: HingeOptions | None = None) -> HingeProblem:
    """Q = K R⁻¹ · sqrt(m/r) from the thin QR of K (m, r); ``pattern`` (G, m) the token groups' contexts; ``options``
    the tuning (:class:`HingeOptions`; its defaults when None)."""
    options = check_options(options, HingeOptions)
    m, r = K.shape
    Q, R = np.linalg.qr(K)
    s = np.sqrt(m / r)
    support = sp.csr_matrix(pattern.T)
    support.sort_indices()
    return HingeProblem(Q * s, R, support, s, opt=options)


def to_k_rows(hp: HingeProblem, Y: np.ndarray) -> np.ndarray:
    """Rows X (G, r) in K's coordinates with the same logits as Y in Q's: X Kᵀ = Y Qᵀ."""
    # K = Q_0 R with Q = s Q_0: Y Qᵀ = s Y Q_0ᵀ = s Y R⁻ᵀ Kᵀ, so X = s Y R⁻ᵀ, i.e. Xᵀ = s R⁻¹ Yᵀ.
    from scipy.linalg import solve_triangular

    return hp.s * solve_triangular(hp.R, Y.T, lower=False).T


def value_and_grad(hp: HingeProblem, Y: np.ndarray, t: np.ndarray, *,
                   single: bool = False) -> tuple[float, np.ndarray, np.ndarray]:
    """φ(Y, t) and its gradient ((G, r), (m,)), in blocks of contexts (at most BLOCK_ENTRIES logits).

    ``single``: the two products (logits and gradient) in float32 — half the time of float64 on one core, with
    relative errors ~1e-6 in φ and ∇φ: for the bulk of the descent, never for a certificate (the certificates
    are float64 passes of their own). Sums are accumulated in float64 either way."""
    m, G, r = hp.shape
    rows = max(1, hp.opt.BLOCK_ENTRIES // max(G, 1))
    val, gY, gt = 0.0, np.zeros((G, r)), np.empty(m)
    Qs, Ys = hp.factors(Y, single)
    ts = t.astype(Ys.dtype)
    for lo in range(0, m, rows):
        hi = min(m, lo + rows)
        Qb = Qs[lo:hi]
        L = Qb @ Ys.T  # (b, G) logits
        on = hp.support[lo:hi]
        ri, ci = on.nonzero()
        tie = (L[ri, ci] - ts[lo + ri]).astype(np.float64)  # ν on the supports
        np.subtract(L, ts[lo:hi, None] - 1.0, out=L)
        np.maximum(L, 0.0, out=L)  # λ off the supports (the support entries are overwritten next)
        L[ri, ci] = 0.0
        flat = L.ravel()
        val += 0.5 * ((float(np.einsum("i,i->", flat, flat, dtype=np.float64)) if single else float(flat @ flat))
                      + tie @ tie)
        L[ri, ci] = tie
        gt[lo:hi] = -L.sum(axis=1, dtype=np.float64)
        gY += L.T @ Qb
    return val, gY, gt


def off_residuals(hp: HingeProblem, Y: np.ndarray, t: np.ndarray, limit: int, *,
                  floor: float = 0.0, counts: dict | None = None, single: bool = False) -> tuple[np.ndarray, ...]:
    """The off-support pairs whose hinge argument 1 − t_j + y_gᵀq_j exceeds ``floor`` (at most ``limit`` largest):
    (groups, contexts, arguments). With ``floor`` = 0 these are the pairs with λ_gj > 0 and their λ.

    Memory O(limit + one block): the largest are kept block by block (at m = 100,000, G = 12,576 a billion pairs can
    be above the floor early in a run; collecting them all before choosing took 22 GB). ``counts``, when given,
    receives how many pairs were above the floor ("above") and how many had a positive argument ("positive").
    ``single``: the logits in float32 (half the time; errors ~1e-6 relative), for choosing a working set, whose
    margin SLACK dwarfs them — never for a certificate or an active set."""
    m, G, _ = hp.shape
    rows = max(1, hp.opt.BLOCK_ENTRIES // max(G, 1))
    Qs, Ys = hp.factors(Y, single)
    ts = t.astype(Ys.dtype, copy=False)
    gs, js, ls = [], [], []
    kept = above = positive = 0
    for lo in range(0, m, rows):
        hi = min(m, lo + rows)
        L = Qs[lo:hi] @ Ys.T
        np.subtract(L, ts[lo:hi, None] - 1.0, out=L)
        on = hp.support[lo:hi]
        ri, ci = on.nonzero()
        L[ri, ci] = -np.inf
        jj, gg = np.nonzero(L > floor)
        vals = L[jj, gg].astype(np.float64)
        above += len(vals)
        positive += int(np.count_nonzero(vals > 0))
        gs.append(gg)
        js.append(jj + lo)
        ls.append(vals)
        kept += len(vals)
        if kept > 2 * limit:  # trim to the largest now and then (linear time, memory O(limit + one block))
            gs, js, ls = ([a] for a in largest(np.concatenate(gs), np.concatenate(js), np.concatenate(ls), limit))
            kept = limit
    if counts is not None:
        counts.update(above=above, positive=positive)
    return largest(np.concatenate(gs), np.concatenate(js), np.concatenate(ls), limit)


def largest(g: np.ndarray, j: np.ndarray, lam: np.ndarray, limit: int) -> tuple[np.ndarray, ...]:
    """(g, j, λ) of the ``limit`` largest λ (all of them when there are no more)."""
    if len(lam) <= limit:
        return g, j, lam
    keep = np.argpartition(-lam, limit - 1)[:limit]
    return g[keep], j[keep], lam[keep]


@dataclass
class WorkingSet:
    """φ restricted to a working set of pairs: every tie (g ∈ S_j) and the off-support pairs W, one (m, G) pattern.

    φ_W ≤ φ, with equality and equal gradients wherever no off-support pair outside W is violated; so a minimiser of
    φ_W at which a full pass finds no violation outside W minimises φ. One evaluation costs O(|W| r) (the logits at
    the pattern's entries by a sampled product, the gradient by a sparse product) instead of the full pass's
    O(m G r): a real LM's violated pairs are a few in a thousand once the descent is under way (about 10,000 of 26
    million at m = 10,000 after 150 steps), so the working set of the pairs within SLACK of violation is ~100×
    smaller than the logits."""

    mask: sp.csr_matrix  # (m, G) the pattern; data 1.0 off the supports, 2.0 on them
    off: np.ndarray  # (n,) bool, entry order: an off-support pair
    j: np.ndarray  # (n,) the context of each entry
    torch_mask: object = None  # the pattern as a torch sparse CSR tensor (for sampled_addmm); None without torch
    torch_mask32: object = None  # the same in float32, made on first use

    @property
    def size(self) -> int:
        return int(self.off.sum())

    def logits(self, Q: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """q_jᵀy_g at the pattern's entries (its CSR order), in float64, in the precision of Q and Y: torch's sampled
        product where torch is installed, else :func:`~embgeo.ntp.solvers.constraints.row_dots` (the squared hinge
        is part of the theory, which runs without torch: issue 40)."""
        if self.torch_mask is None:
            return row_dots(Y, Q, self.mask.indices, self.j)
        import torch

        if Q.dtype == np.float32 and self.torch_mask32 is None:
            self.torch_mask32 = self.torch_mask.to(torch.float32)
        mask = self.torch_mask32 if Q.dtype == np.float32 else self.torch_mask
        return torch.sparse.sampled_addmm(mask, torch.from_numpy(Q), torch.from_numpy(Y).T,
                                          beta=0.0).values().numpy().astype(np.float64)


def working_set(hp: HingeProblem, g: np.ndarray, j: np.ndarray) -> WorkingSet:
    """The working set of the off-support pairs (g, j) and every tie."""
    m, G, _ = hp.shape
    tie_j, tie_g = hp.support.nonzero()
    rows = np.concatenate([j, tie_j])
    cols = np.concatenate([g, tie_g])
    flag = np.concatenate([np.ones(len(g)), np.full(len(tie_g), 2.0)])
    mask = sp.csr_matrix((flag, (rows, cols)), shape=(m, G))
    mask.sum_duplicates()  # (g, j) pairs are distinct and off the supports, so nothing is summed
    mask.sort_indices()
    off = mask.data == 1.0
    j_of = np.repeat(np.arange(m), np.diff(mask.indptr))
    try:
        import torch
    except ModuleNotFoundError:  # the theory without the `train` extra: WorkingSet.logits gathers rows instead
        return WorkingSet(mask, off, j_of)
    with warnings.catch_warnings():  # torch's note that sparse CSR tensors are a beta feature
        warnings.simplefilter("ignore", UserWarning)
        tm = torch.sparse_csr_tensor(torch.from_numpy(mask.indptr.astype(np.int64)),
                                     torch.from_numpy(mask.indices.astype(np.int64)),
                                     torch.ones(mask.nnz, dtype=torch.float64), size=(m, G), check_invariants=False)
    return WorkingSet(mask, off, j_of, tm)


def working_value_and_grad(hp: HingeProblem, ws: WorkingSet, Y: np.ndarray, t: np.ndarray, *,
                           single: bool = False, curvature: bool = False) -> tuple:
    """φ_W(Y, t) and its gradient ((G, r), (m,)): the terms of :func:`value_and_grad` on W's pairs (its products in
    float32 when ``single``, as there); with ``curvature``, also :func:`active_curvature` of the same terms."""
    m = hp.shape[0]
    Q, Ys = hp.factors(Y, single)
    res = ws.logits(Q, Ys) - t[ws.j]
    res[ws.off] = np.maximum(res[ws.off] + 1.0, 0.0)  # λ off the supports, ν (the tie) on them
    S = sp.csr_matrix((res.astype(Q.dtype), ws.mask.indices, ws.mask.indptr), shape=ws.mask.shape)
    out = (0.5 * float(res @ res), np.asarray(S.T @ Q, dtype=np.float64), -np.bincount(ws.j, weights=res,
                                                                                         minlength=m))
    if not curvature:
        return out
    active = ~ws.off | (res > 0)  # the terms of φ_W that are quadratic here: every tie, the violated pairs
    return (*out, active_curvature(hp, ws.mask.indices[active], ws.j[active]))


def active_curvature(hp: HingeProblem, g: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The diagonal of φ's Gauss–Newton matrix on the active terms (g, j) (the ties and the violated pairs), averaged
    over each group's r coordinates: Σ_j ‖q_j‖²/r for every coordinate of y_g, the number of its active terms for
    t_j; floored at CURVATURE_FLOOR of the largest (G r + m,). Raised to DIAGONAL_SCALING, L-BFGS's initial inverse
    Hessian (:class:`LBFGS` ``scaling``): the groups' curvatures differ by their numbers of contexts (1 to 915 on
    SmolLM2's m = 10,000 sample of the whole Vim documentation), which one scalar cannot match."""
    m, G, r = hp.shape
    if hp.qq is None:  # (a property of the data: once, not at every working-set evaluation)
        hp.qq = np.einsum("ij,ij->i", hp.Q, hp.Q) / r
    d = np.concatenate([np.repeat(np.bincount(g, weights=hp.qq[j], minlength=G), r),
                        np.bincount(j, minlength=m).astype(np.float64)])
    return np.maximum(d, hp.opt.CURVATURE_FLOOR * float(np.max(d, initial=0.0)) or 1.0)


@dataclass
class HingeRun:
    """Where the minimisation of φ stopped: rows Y (G, r) in whitened coordinates, ties t (m,), φ there, steps."""

    Y: np.ndarray
    t: np.ndarray
    phi: float
    steps: int
    stalled: bool
    elapsed_seconds: float
    slowed: bool = False


class LBFGS:
    """L-BFGS directions −H g by the two-loop recursion over the last ``memory`` curvature pairs (s, y).

    Written here rather than taken from scipy because its cost per step matters at a real LM's size: scipy's L-BFGS-B
    spends 0.34 s per step in its own bookkeeping at n = 1.5 million variables with 20 pairs (measured; the squared
    hinge's working-set evaluation takes 0.14 s), and it cannot keep its pairs when the function changes — a working
    set that grows changes φ_W only on the pairs it adds, so the pairs stay good curvature information.

    ``dtype`` float32 keeps the pairs and the recursion in single precision: the recursion reads every pair twice per
    direction, so its cost is memory traffic (0.10–0.18 s a direction at n = 1.7 million, m = 10,000 on a real LM,
    a third of the run), and float32 halves it. The direction comes back in float64; it is a search direction
    (the line search checks descent), used where the gradient itself comes from float32 products."""

    def __init__(self, memory: int, dtype=np.float64):
        self.pairs: deque = deque(maxlen=memory)
        self.dtype = np.dtype(dtype)
        self._axpy = saxpy if self.dtype == np.float32 else daxpy
        #: a positive diagonal D (n,) of the curvature where known (:func:`active_curvature`): the initial inverse
        #: Hessian is then (sᵀy / yᵀD⁻¹y) D⁻¹ instead of (sᵀy / yᵀy) I (Nocedal & Wright §7.2 allow any H₀ per step)
        self.scaling: np.ndarray | None = None

    def direction(self, g: np.ndarray) -> np.ndarray:
        axpy = self._axpy
        q = -np.asarray(g, dtype=self.dtype)  # a new array: the in-place updates below (BLAS axpy) leave g alone
        alphas = []
        for s, y, rho in reversed(self.pairs):
            a = rho * float(s @ q)
            q = axpy(y, q, a=-a)
            alphas.append(a)
        if self.pairs:
            s, y, _ = self.pairs[-1]
            if self.scaling is not None:
                inverse = (1.0 / self.scaling).astype(self.dtype)
                q *= inverse * (float(s @ y) / float(y @ (inverse * y)))
            else:
                q *= float(s @ y) / float(y @ y)
        for (s, y, rho), a in zip(self.pairs, reversed(alphas), strict=True):
            q = axpy(s, q, a=a - rho * float(y @ q))
        return q.astype(np.float64, copy=False)

    def update(self, s: np.ndarray, y: np.ndarray) -> None:
        # φ is convex: sᵀy ≥ 0; skip the flat pairs, whose sᵀy the stored precision cannot resolve (float32 keeps
        # about 7 digits of a product whose terms are ‖s‖‖y‖ in size)
        flat = 1e-12 if self.dtype == np.float64 else 1e-5
        s, y = np.asarray(s, dtype=self.dtype), np.asarray(y, dtype=self.dtype)
        sy = float(np.dot(s, y))
        if sy > flat * float(np.sqrt(float(np.dot(s, s)) * float(np.dot(y, y)))):
            self.pairs.append((s, y, 1.0 / sy))


def minimise(hp: HingeProblem, *, deadline: float | None = None, check: Callable[[np.ndarray, np.ndarray], bool]
             | None = None, progress: ProgressFn | None = None,
             start: tuple[np.ndarray, np.ndarray] | None = None, single: bool = False,
             max_steps: int | None = None, slow: tuple[int, float] | None = None,
             working: bool = False) -> HingeRun:
    """L-BFGS (:class:`LBFGS`, Armijo backtracking) on φ from zero (or ``start``) until φ = 0, a stall, the deadline,
    or ``check(Y, t)`` says stop.

    ``single``: φ and ∇φ with float32 products (:func:`value_and_grad`); a stall then only means that float32
    cannot see further (the caller goes on in float64). ``slow`` = (window, drop): also stop (``slowed``) when φ fell
    by less than ``drop`` over the last ``window`` steps — the caller's cue for a Newton step, without restarting
    L-BFGS (and losing its curvature pairs) while it still makes progress.

    ``working``: once few pairs are violated, minimise φ_W over a working set refreshed every REFRESH steps
    (:class:`WorkingSet`, in float32 too when ``single``) instead of φ; the run's φ is then the full φ at its end
    (one float64 pass), and ``check`` is called at the refreshes only (it costs a full scan, several working-set
    steps). A refresh that finds φ_W = 0 and no new pair near violation ends the run with φ = 0.

    ``check`` is called every CHECK_EVERY steps (e.g. the separating certificate; skipped at its turn until
    CHECK_SPACING times its last duration has passed); ``progress(event)`` likewise, a
    :class:`~embgeo.ntp.solvers.outcome.ProgressEvent` with ``values`` {"phi": φ, "seconds": elapsed}.
    """
    m, G, r = hp.shape
    t0 = time.perf_counter()
    z = np.zeros(G * r + m) if start is None else np.concatenate([start[0].ravel(), start[1]])
    ws: WorkingSet | None = None

    def split(z):
        return z[:G * r].reshape(G, r), z[G * r:]

    precision = np.float32 if single else np.float64  # the pairs as precise as the gradients they come from
    mem, history, steps, stop, next_check = LBFGS(hp.opt.MEMORY, precision), [], 0, None, 0.0
    curvature = [None]  # D^p at the last point evaluated (the working-set phase; p = DIAGONAL_SCALING)

    def fun(z):
        if ws is None:
            val, gY, gt = value_and_grad(hp, *split(z), single=single)
            curvature[0] = None
        elif hp.opt.DIAGONAL_SCALING > 0:
            val, gY, gt, diag = working_value_and_grad(hp, ws, *split(z), single=single, curvature=True)
            curvature[0] = diag ** hp.opt.DIAGONAL_SCALING
        else:
            val, gY, gt = working_value_and_grad(hp, ws, *split(z), single=single)
        return val, np.concatenate([gY.ravel(), gt])

    f, g = fun(z)
    while stop is None:
        mem.scaling = curvature[0]  # (that of z: the line search's last evaluation is the point it accepted)
        d = mem.direction(g)
        gd = float(g @ d)
        if not gd < 0:  # not a descent direction (rounding in float32): start over from the gradient
            mem = LBFGS(hp.opt.MEMORY, precision)
            d, gd = -g, -float(g @ g)
        if gd == 0.0:  # a zero gradient: φ's minimum (φ_W's: then a refresh says whether it is φ's)
            new = ws if ws is None else _refresh(hp, ws, *split(z), single=single)
            if new is ws:
                stop = "zero" if f == 0.0 else "line search"
                break
            ws = new
            f, g = fun(z)
            continue
        step = 1.0 if mem.pairs else min(1.0, 1.0 / np.sqrt(-gd))
        for _ in range(hp.opt.MAX_HALVINGS):
            zn = z + step * d
            fn, gn = fun(zn)
            if fn <= f + hp.opt.ARMIJO * step * gd:
                break
            step /= 2
        else:
            stop = "line search"  # no step along a descent direction decreases φ: a minimiser to rounding
            break
        mem.update(zn - z, gn - g)
        z, f, g = zn, fn, gn
        steps += 1
        history.append(f)
        refresh = working and (steps % hp.opt.REFRESH == 0 or (f == 0.0 and ws is not None))
        if f == 0.0 and ws is None:
            stop = "zero"
        elif (len(history) > hp.opt.STALL_WINDOW
              and history[-1] > (1 - hp.opt.STALL_DROP) * history[-1 - hp.opt.STALL_WINDOW]):
            stop = "stalled"
        elif (refresh if ws is not None else steps % hp.opt.CHECK_EVERY == 0):
            if progress is not None:
                progress(ProgressEvent("hinge", steps, values={"phi": f, "seconds": time.perf_counter() - t0}))
            if check is not None and time.perf_counter() >= next_check:
                c0 = time.perf_counter()
                if check(*split(z)):
                    stop = "check"
                next_check = time.perf_counter() + hp.opt.CHECK_SPACING * (time.perf_counter() - c0)
        if stop is None and past(deadline):
            stop = "deadline"
        if stop is None and max_steps is not None and steps >= max_steps:
            stop = "steps"
        if stop is None and slow is not None and len(history) > slow[0] and history[-1] > (1 - slow[1]) * history[
                -1 - slow[0]]:
            stop = "slowed"
        if stop is None and refresh:
            new = _refresh(hp, ws, *split(z), single=single)
            if new is not ws:
                ws = new
                before = f
                f, g = fun(z)  # the same point under the new function; the curvature pairs are kept
                # φ_W's values are comparable across working sets up to the pairs that joined violated: the history
                # is shifted by that jump rather than cleared. (Cleared, it never held more than REFRESH = 20 steps
                # where the set changed at every refresh, so neither the stall test (30 steps) nor the slow one (50)
                # could fire and the Newton steps and the LP were never asked: SmolLM2's states of a sample of the
                # whole Vim documentation stayed at φ = 33.5 for 1,800 steps until the probe's limit, 2026-11-30.)
                history[:] = [value + (f - before) for value in history]
            elif f == 0.0:
                stop = "zero"  # φ_W = 0 and no pair outside W near violation: φ = 0
    if ws is not None:
        f = value_and_grad(hp, *split(z))[0]
    stalled = stop in ("stalled", "line search")
    Y, t = split(z)
    return HingeRun(Y, t, float(f), steps, stalled, time.perf_counter() - t0, stop == "slowed")


def _refresh(hp: HingeProblem, ws: WorkingSet | None, Y: np.ndarray, t: np.ndarray, *,
             single: bool = False) -> WorkingSet | None:
    """The working set at (Y, t): None (the full pass) while more than WS_PAIRS / 2 pairs are violated or the set
    would hold more than WS_SHARE of all pairs, else the WS_PAIRS off-support pairs nearest to violation (hinge argument
    > −SLACK; ``ws`` itself when they are the same). A pair that leaves the set is at least SLACK from violation,
    so φ_W and its gradient at (Y, t) are φ's either way (``single``: its logits in float32, whose errors are far
    below SLACK)."""
    m, G, _ = hp.shape
    counts: dict = {}
    g, j, _ = off_residuals(hp, Y, t, hp.opt.WS_PAIRS, floor=-hp.opt.SLACK, counts=counts, single=single)
    if len(g) > hp.opt.WS_SHARE * m * G or (ws is None and counts["positive"] > hp.opt.WS_PAIRS // 2):
        return None  # a working set this large a share of all pairs is not much cheaper than the full pass
    if ws is not None and len(g) == ws.size:
        key = np.sort(j.astype(np.int64) * G + g)
        if np.array_equal(key, ws.j[ws.off].astype(np.int64) * G + ws.mask.indices[ws.off]):
            return ws
    return working_set(hp, g, j)


def separating_margin(pb, hp: HingeProblem, Y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The smallest off-support margin of the iterate after the exact tie projection (one full scan), with
    the projected rows X (G, r) in K's coordinates and ties t (m,): γ > 0 makes X/γ a certificate.

    The projection is orthogonal in Q's coordinates, min Σ_g ‖δ_g‖² (a :class:`~embgeo.ntp.solvers.svm_alm.
    TieProjection` of Q with unit weights, made on first use and kept in ``hp.ties``). Any point on the ties with
    every margin positive certifies, and how far a projection moves the margins grows with the conditioning of its
    metric: with the contexts whitened it is well conditioned on real states, where the dual's metric (K's
    coordinates, weights n_g: :meth:`SVMDual.primal_from`, used here until 2026-11-30) is not. On SmolLM2's m = 10,000
    sample of the whole Vim documentation, an iterate at φ = 0.098 with every margin ≥ 0.87 before the projection
    kept a smallest margin of 0.36 after this one and fell to −242 after the dual's (2026-11-30, one thread; 1.8 s
    for the projection, its factor included), and the sample, undecided in 3,307 s before, was separable."""
    from embgeo.ntp.solvers.scan import scan_off_support
    from embgeo.ntp.solvers.svm_alm import TieProjection

    if hp.ties is None:
        pairs = hp.support.tocoo()  # (m, G): rows are contexts, columns groups
        hp.ties = TieProjection(hp.Q, pairs.col.astype(np.int64), pairs.row.astype(np.int64), np.ones(hp.shape[1]))
    Yp, t, _ = hp.ties.project(Y)
    X = to_k_rows(hp, Yp)  # (the logits, so t, are the same in K's coordinates)
    gamma = scan_off_support(X, t, pb.K, pb.groups.pattern.tocsc()).min_margin
    return float(gamma), X, t


def active_rows(hp: HingeProblem, g: np.ndarray, j: np.ndarray) -> sp.csr_matrix:
    """The rows of φ's residuals on the pairs (g, j) as a sparse (n, G·r + m) matrix: q_j at y_g, −1 at t_j.

    Off the supports the residual is this row times (Y, t) plus 1, on them (a tie) the row times (Y, t)."""
    m, G, r = hp.shape
    n = len(g)
    data = np.hstack([hp.Q[j], -np.ones((n, 1))])
    cols = np.hstack([g[:, None].astype(np.int64) * r + np.arange(r), (G * r + j)[:, None].astype(np.int64)])
    return sp.csr_matrix((data.ravel(), cols.ravel(), np.arange(0, n * (r + 1) + 1, r + 1)), shape=(n, G * r + m))


def newton_step(hp: HingeProblem, Y: np.ndarray, t: np.ndarray, phi: float, *,
                active: tuple[np.ndarray, np.ndarray] | None = None, deadline: float | None = None,
                max_iter: int = 300) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The semismooth Newton step of φ at (Y, t): on the pairs active there (λ > 0 off the supports, every tie)
    φ is the quadratic ½‖A z − b‖², whose minimiser is a linear least-squares problem (LSQR, warm-started at
    the current point, up to ``max_iter`` iterations or the deadline). When the active set is that of a minimiser
    this is the minimiser itself; its residuals are then the Farkas weights (Aᵀρ = 0) to LSQR's precision.
    ``phi`` is φ(Y, t); ``active`` the off-support pairs (g, j) with λ > 0 at (Y, t) when the caller has them (else
    one pass finds them). Returns (Y, t, φ) of the point :func:`_line_search` picks, or None when the active pairs
    and ties are more than NEWTON_MAX_ROWS."""
    m, G, r = hp.shape
    from scipy.sparse.linalg import lsqr

    g, j = active if active is not None else off_residuals(hp, Y, t, limit=np.iinfo(np.int64).max)[:2]
    tie_j, tie_g = hp.support.nonzero()
    if len(g) + len(tie_g) > hp.opt.NEWTON_MAX_ROWS:
        return None
    A = active_rows(hp, np.concatenate([g, tie_g]), np.concatenate([j, tie_j]))
    b = np.concatenate([-np.ones(len(g)), np.zeros(len(tie_g))])
    z = np.concatenate([Y.ravel(), t])
    done = 0
    if not np.any(A @ z - b):
        return Y, t, phi  # every active residual is already zero: the least-squares minimiser is here
    while done < max_iter:
        with np.errstate(divide="ignore", invalid="ignore"):  # LSQR divides by a residual that can reach 0
            out = lsqr(A, b, atol=1e-15, btol=1e-15, iter_lim=hp.opt.LSQR_CHUNK, x0=z)
        if not np.all(np.isfinite(out[0])):
            break
        z, done = out[0], done + out[2]
        if out[1] in (1, 2, 4, 5) or past(deadline):
            break  # 1, 2, 4, 5: LSQR's tolerances met (the least-squares solution to rounding)
    return _line_search(hp, Y, t, phi, z[:G * r].reshape(G, r), z[G * r:])


def _line_search(hp: HingeProblem, Y: np.ndarray, t: np.ndarray, phi0: float, Yn: np.ndarray, tn: np.ndarray):
    """(Y, t, φ) of the point on the segment from (Y, t) (where φ = ``phi0``) to the Newton point with the least φ
    among steps 1, ½, ¼, … (φ is convex, so the first step that decreases it after a larger one that did not is near
    the best): the Newton point of a wrong active set can be far worse than its start (semismooth Newton needs this
    globalisation)."""
    best = None
    step = 1.0
    for _ in range(hp.opt.LINE_SEARCH_STEPS):
        Ya, ta = Y + step * (Yn - Y), t + step * (tn - t)
        val = value_and_grad(hp, Ya, ta)[0]
        if val < phi0 and (best is None or val < best[2]):
            best = (Ya, ta, val)
        elif best is not None:
            break  # past the best along the segment
        step /= 2
    return (Y, t, phi0) if best is None else best
