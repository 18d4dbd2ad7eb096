"""The NTP-SVM (Def. 3) by a semismooth Newton augmented Lagrangian method, for data with rank H̄ < m.

Paper: ``ntp-implicit-bias-neurips.txt`` Def. 3. Problem in t-form on token groups
(:mod:`embgeo.ntp.solvers.constraints`), K (m × r) the context coordinates, n_g the group sizes:

    min ½ Σ_g n_g ‖x_g‖²  s.t.  a_{gj} := x_gᵀk_j − t_j = 0  on the support pairs S   (6a)
                                a_{gj} + 1 ≤ 0              on the off-support pairs  (6b)

Once a model has learned its context embeddings they are separable with d ≪ m, and then the
dual first-order methods of :mod:`embgeo.ntp.solvers.svm_dual` stall: the dual is the hard-margin limit of a
multiclass SVM, flat in most directions. This module solves the primal instead, by the method of
multipliers (Rockafellar's augmented Lagrangian; the proximal point method on the dual), with
multipliers ν on S and μ ≥ 0 on a working set W of off pairs and a penalty ρ:

    φ(X, t) = ½ Σ_g n_g ‖x_g‖² + Σ_S (ν a + ρ/2 a²) + 1/(2ρ) Σ_W ([μ + ρ(a + 1)]₊² − μ²),

* **inner**: φ is strongly convex and piecewise quadratic. Newton steps with its generalised Hessian
  D + ρ Σ_P a′a′ᵀ (P = S and the pairs of W with μ + ρ(a + 1) > 0; D = diag(n_g I) on X, 0 on t)
  minimise it, each step of length 1 where that decreases φ enough (Armijo; up to UNIT_STEP_RHO) and
  else the exact minimiser along the line (φ′ is piecewise linear there); a unit step that keeps P is
  exact. The Newton matrix is solved by :class:`NewtonSystem`.
* **outer**: ν ← ν + ρa, μ ← [μ + ρ(a + 1)]₊; ρ grows tenfold when the constraint violation did not
  fall twofold on the pairs of the previous outer step (tenfold where T is solved by Jacobi CG: CG_DECREASE;
  up to RHO_MAX), but, with HOLD_SET, not while the pairs joining the working set are violated more than
  those in it (the set is still incomplete: HOLD_OUTSIDE); an inner loop that ran out of Newton steps short
  of its tolerance updates neither (UNCONVERGED_HOLDS: the next outer step goes on minimising the same φ).
  Once P stops changing, an outer
  step is one back-solve with the factorization in hand, so the last digits cost almost nothing.
* **working set**: the off pairs that the current iterate violates, found by a full pass over all
  G × m logits (one GEMM per block of contexts), at most ADD_PER_CONTEXT per context and round; once
  the iterate is nearly feasible, those of the tied iterate with margin < 1 + SLACK, from the pass that
  certifies it, and every violated pair, however many its context has (ADD_EVERY_VIOLATED).
* **certificate** at every outer step, on the whole problem: the multipliers, balanced per context on
  its first support pair and taken at their best multiple (:meth:`SVMALM.dual_point`), are a dual point
  with value D ≤ ½‖W^mm‖²; the iterate with its ties
  restored exactly (:meth:`SVMALM.tie`) and divided by its smallest margin over *every* off pair is a
  feasible point with value P. Then ½‖W − W^mm‖² ≤ P − D (strong convexity of ½‖·‖² and the
  optimality of W^mm on a convex set), i.e. with the relative gap g = (P − D)/P,
  ‖W − W^mm‖ ≤ √g ‖W‖ and ‖W − W^mm‖/‖W^mm‖ ≤ √(g/(1 − g)) (since ‖W^mm‖² ≥ 2D).

The data are scaled to max_j ‖k_j‖ = 1 inside (the answer is returned in the caller's units), so ρ
and every tolerance are independent of the units of H̄.

Cost: per Newton step O(|W|) plus O(r) per pair that could switch on along it (:meth:`SVMALM._off_step`;
the others of W are inactive with a bound on their a) plus, when P changed, one factorization of
Σ_g q_g² min(q_g, r) + c³/3 flops (c ≤ m contexts with ≥ 2 pairs in P, q_g the group's pairs there; in single
precision, refined by a few conjugate-gradient steps: SINGLE_RTOL); per outer step one full pass, O(G m r).
Memory: c² doubles for the Schur complement where it is factored, and c² singles for the factor (only within the
dense budget and half the memory left; else conjugate gradients), an r × r block
per heavy group, Σ q_g² ≤ |P| r for the light groups' blocks and O(|W| + G r + m r).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from embgeo.core import validate
from embgeo.core.deadline import past
from embgeo.core.status import Status
from embgeo.core.validate import check_dense_size
from embgeo.errors import SolverError, TooLargeError
from embgeo.ntp.solvers.constraints import group_dots, row_chunk, row_dots
from embgeo.ntp.solvers.outcome import ProgressEvent, ProgressFn, SVMOutcome
from embgeo.ntp.solvers.scan import Scan, scan_off_support


@dataclass(frozen=True)
class ALMOptions:
    """The augmented Lagrangian's tuning, as data: every solve reads these (:class:`SVMALM` ``options``,
    :func:`embgeo.ntp.theory.ntp_svm` ``alm_options``), and a test or a study passes its own instead of patching
    the module (``dataclasses.replace(ALMOptions(), CG_CONTEXTS=0)``). The defaults are the measured choices below;
    the names are those the docs and benchmarks cite."""

    #: Off pairs per context in the first working set (the smallest margins of the starting point) and added
    #: per context and round (the violated or nearly tight ones). Measured on trained embeddings (m = 3011,
    #: r = 64): larger working sets cost little (inactive pairs are not in the Newton matrix) and save Newton
    #: steps; 4 instead of 16 needed twice the factorizations. Added per round: 8 (2026-11-27). Where no Newton matrix
    #: is factored, every step's cost is proportional to |W| (paper-cs, m = 10,833: 460,000 pairs with 16, of which a
    #: sixteenth active at the end); with 8, paper-cs 30.1 → 23.5 s in one bench run (42 Newton / 17 outer steps
    #: instead of 43 / 20), the quick models 4–22 % faster at 67–77 Newton steps, and on paper-planted 132 / 59 and 110
    #: / 39 Newton steps / factorizations against 133 / 56 and 151 / 78 with 16 (the data scaled by 1 and by 1 + 1e-7:
    #: that count is chaotic: CHANGELOG.md, benchmark history, session 32). 8 in the first working set too made some
    #: paper-planted solves diverge.
    INITIAL_PER_CONTEXT: int = 16
    ADD_PER_CONTEXT: int = 8
    #: Pairs with margin < 1 + SLACK join the working set once the iterate is nearly feasible (its certified
    #: point has margin > 1/2 before scaling); before that only violated pairs do.
    SLACK: float = 1.0
    #: Once the iterate is nearly feasible (as for SLACK), every violated pair joins the working set, not only the
    #: ADD_PER_CONTEXT worst of its context. On the paper-like instance (m = 15,012, r = 128; 2026-11-27) the iterate
    #: had settled on its working set (violation there 1e-7, ‖X‖² within 0.2 % of its final value) while its smallest
    #: margin over every pair rose only from 0.70 to 0.99 over 16 outer steps (each 3–7 s), 50–500 pairs joining per
    #: step: contexts with more violated pairs outside W than ADD_PER_CONTEXT took them 16 at a time. Until its margin
    #: reaches 1 the scaled feasible point, and so the certified gap (0.42 → 0.017 over those steps), lags.
    ADD_EVERY_VIOLATED: bool = True
    #: Penalty: start, growth factor, cap (in the unit scale max ‖k_j‖ = 1).
    RHO0: float = 1.0
    RHO_UP: float = 10.0
    RHO_MAX: float = 1e10
    #: ρ grows when the violation did not fall below this fraction of its previous value on the same pairs (S and the
    #: pairs W had at the previous outer step). Measured on the quick UFM / LSTM / transformer (cold, 2026-11-26): 0.25
    #: with the comparison on the same pairs took 0 / 8 / 17 factorizations (ρ up to 10⁶), 0.5 took 0 / 1 / 0 (ρ ≤ 10⁴):
    #: the ALM converges at any fixed ρ, and below ρ ≈ 10⁴ T is solved by conjugate gradients without a factorization.
    DECREASE: float = 0.5
    #: Where the last Newton system was solved by Jacobi-preconditioned conjugate gradients (no factor, none borrowed)
    #: and they have not failed at ten times ρ, a larger ρ costs only CG iterations: ρ grows there unless the violation
    #: fell below this fraction (the ALM's rate improves about tenfold with it). Measured cold, one thread (2026-11-27):
    #: paper-cs (m = 10,833, r = 128) 17 → 11 outer steps, 17.6 → 16.0 s (the violation fell 7× per step at ρ = 10³ and
    #: stayed there); quick UFM / LSTM / transformer 6.2 / 6.4 / 7.1 → 5.5 / 5.9 / 5.8 s (0 / 1 / 0 → 0 / 10 / 10 small
    #: factorizations); paper-planted unchanged (the same 122 Newton steps, 49 factorizations).
    CG_DECREASE: float = 0.1
    #: The inner Newton iterations stop at ‖∇φ‖ ≤ GTOL_FACTOR · violation · ‖X‖ (inexact early, exact late).
    GTOL_FACTOR: float = 0.5
    MAX_NEWTON: int = 30
    #: An inner loop that ran all MAX_NEWTON steps without reaching its tolerance has not minimised φ: its iterate's
    #: multiplier estimates are not the method of multipliers' update, and its violation says nothing about ρ. With
    #: UNCONVERGED_HOLDS, the next outer step goes on minimising the same φ (same multipliers, same ρ) after the
    #: certificate and the working set's growth. Measured 2026-12-01 (one thread): on the mixed-ties draws (m = 3000,
    #: V = 400, d = 32; seeds 1 / 2 / 3) every inner loop at ρ = 10⁴–10⁷ had ended at the cap with ‖∇φ‖ 10³–10⁷
    #: times its tolerance; holding took the factorizations from 155 / 96 / 187 to 108 / 90 / 97.
    UNCONVERGED_HOLDS: bool = True
    #: ρ is not raised while the pairs that joined the working set at this outer step (at least HOLD_GROWTH of it) are
    #: violated by the iterate by more than HOLD_OUTSIDE times the violation on W (:meth:`SVMALM._incomplete`): W still
    #: lacks pairs that W^mm needs, and a larger ρ only enforces the incomplete set harder. Off by default (inf);
    #: :data:`HOLD_SET` (HOLD_OUTSIDE = 1) is what the analysis of a model's own states passes (``ntp probe``).
    #: Measured 2026-12-01 (one thread, k = 2, m = 2000 of a real LM's states): Gemma 3 270M (r = 640) cold ended at
    #: gap 0.70 after 532 s without it (ρ raised to 10⁹ while W's violation was 10⁻⁴ and pairs outside it had margins
    #: −0.4 to −1.1; 213 factorizations), optimal in 155 s with 1 beside two runs; warm-started from its head, gap 0.73
    #: after 391 s → optimal in 70–105 s. SmolLM2-135M cold 403–428 s → 196 s beside two runs; warm 117.7 s (185
    #: factorizations; 10 did not fire there, W's own violation being 0.48) → 83–126 s, none. Not the
    #: default: on paper-planted (m = 15,012, r = 128) 1 took the factorizations from 47 to 79–92 (93–104 s → 135–149
    #: s), and 3, with 44 there, no longer held where the real LMs need it (SmolLM2 warm 163 s; Gemma warm at gap 0.76
    #: and ρ = 10⁸ after 129 s). HOLD_GROWTH: Gemma warm with 1 and no growth threshold held ρ at 10² for outer steps
    #: that each added 200–300 pairs to W's 142,000, its violation falling 3 % a step. Not adopted either: holding
    #: only while W's own violation is below ½ (SmolLM2 warm at m = 10,000 held ρ at 10 for ten outer steps while W grew
    #: from 160,000 to 949,000 pairs at a violation of 1.2–1.3; but at m = 2000, too, W^mm needs 90–130 pairs per
    #: context): it let ρ rise to 10⁸ at a certified gap of 0.9 (Gemma / SmolLM2 warm, 31 / 23 outer steps → 37 / 32).
    HOLD_OUTSIDE: float = math.inf
    HOLD_GROWTH: float = 0.01
    #: Penalty of the tie projection (the method of multipliers on the equalities alone; ρ only sets its speed).
    TIE_RHO: float = 1e6
    #: Conjugate-gradient iterations per round of the tie projection where its T cannot be factored.
    TIE_CG_MAXITER: int = 1000
    #: T is solved by conjugate gradients above this many coupled contexts (a Cholesky factorization costs c³/3),
    #: to a relative residual CG_RTOL in at most CG_MAXITER iterations, at every penalty below the smallest one at
    #: which they failed (T's condition grows with ρ: a frequent token tight in more contexts than r dimensions puts
    #: ρ on the complement of its contexts' span); from there on T is factored. On trained embeddings (m = 3011,
    #: r = 64) the conjugate gradients converge up to ρ = 10²–10³, and trying them first at every size took 54
    #: factorizations down to 17 and the solve from 35 s to 21 s (measured 2026-11-26; with a threshold of 3000
    #: contexts, the early c ≈ 3000 systems at ρ = 1 were each factored). Small systems are factored at once.
    #: CG_RTOL is loose (an inexact Newton method: the line search is exact along any descent direction, and the
    #: inner loop still stops on ‖∇φ‖ only). Measured on the quick UFM / LSTM / transformer (cold, same runs,
    #: 2026-11-26): CG_RTOL = 1e-6 / 1e-4 / 1e-3 / 1e-2 / 1e-1 took 52 / 48 / 44 / 44 / 51 s for the three
    #: together; 1e-3 had the fewest Newton steps (61 / 74 / 85 against 61 / 101 / 84 at 1e-6), 1e-1 the most
    #: (86 / 140 / 161). Looser also means the Jacobi CG fails at fewer penalties, so fewer factorizations.
    CG_CONTEXTS: int = 300
    CG_RTOL: float = 1e-3
    CG_MAXITER: int = 300
    #: Iterations of the conjugate gradients preconditioned by an earlier factorization before T is factored anew.
    PCG_MAXITER: int = 30
    #: An earlier factorization is borrowed only when P changed in at most this many pairs and this many heavy
    #: groups since (:meth:`NewtonSystem.changes_from`); else T is factored at once. A heavy group's T_g changes by
    #: a rank up to 2r, and the preconditioned CG needs about one iteration per outlying eigenvalue. Counted on the
    #: quick LSTM and transformer (2026-11-26, every borrowed solve of a cold solve): the 33 attempts after a change
    #: of ≥ 7 heavy groups or > 60 pairs all failed their PCG_MAXITER iterations (30 wasted products with the
    #: factor each, then factored anyway); every successful one had ≤ 6 heavy groups and ≤ 59 pairs changed.
    BORROW_MAX_PAIRS: int = 60
    BORROW_MAX_HEAVY: int = 6
    #: The Newton solver's T is factored in single precision (:meth:`NewtonSystem.factor` with ``single``): `spotrf`
    #: takes about half of `dpotrf`'s time (0.57–0.63 s against 1.02–1.20 s at c = 5001 and 5136, the 20th and 5th
    #: factored T of paper-planted, ρ = 10⁶ and 10⁵; 2026-11-27), and T⁻¹b is then found by conjugate gradients
    #: preconditioned with that factor, to a relative residual SINGLE_RTOL in at most SINGLE_MAXITER iterations (on
    #: those two T: 6 and 4 iterations to 9e-15 and 2e-14, where the direct double-precision solve leaves 7.7e-12 and
    #: 6.7e-13). Where they do not reach it, or T rounded to single precision is not positive definite, T is factored
    #: in double precision. T is assembled in double precision either way: ρI − ρ²U_gU_gᵀ cancels about log10 ρ digits.
    SINGLE_RTOL: float = 1e-13
    SINGLE_MAXITER: int = 20
    #: An inner loop whose line search returned α = 0 this many times in a row is stuck: its Newton directions are not
    #: descent directions (φ′(0) > 0), which happens where T's factor has lost its accuracy. On the paper-like instance
    #: (m = 15,012, r = 128; 2026-11-26) that was every direction at ρ = 10⁹–10¹⁰ and most at 10⁸ (φ′(0) up to 1e16),
    #: where the violation then jumped from 5e-8 to 0.08 and the solve stalled; at 10⁷ one of 60 (φ′(0) = 8e-15, zero
    #: to rounding). The solve then returns to the state before that inner loop and holds ρ below its penalty (a fixed
    #: cap does not do: a small test instance needs ρ = 10¹⁰).
    STUCK_STEPS: int = 3
    #: The inner loop ends when a Newton step that kept P did not lower ‖∇φ‖ below this fraction: on an unchanged P the
    #: step solves the quadratic model (to CG_RTOL), so a gradient that stays is at the rounding floor, which gtol
    #: (down to 1e-13 ‖X‖) may lie under. On the paper-like instance (m = 15,012, r = 128; 2026-11-27) the last five
    #: inner loops had run all MAX_NEWTON steps there, at α = 0.95–0.97 and ∇φ·Δ ≈ 1e-12 after their third step. Any
    #: α > 0 counts: limited to nearly unit steps (|α − 1| ≤ 0.1), the rule let the 12-context test case go on at the
    #: floor to three steps of α = 0, where STUCK_STEPS took the floor for an inaccurate factor and lowered ρ
    #: (optimal_inaccurate).
    FLOOR_DECREASE: float = 0.5
    #: Stalled: the certified gap has not halved over this many outer steps at ρ = RHO_MAX (or the lower cap) ...
    STALL_OUTER: int = 8
    #: ... or, with no feasible point yet, the violation has reached no new low over this many (:func:`_stalled`). At 8,
    #: ``synthetic(8, 10, 6, 3, seed=1)`` at RHO_MAX = 1 would have stopped: its violation rose over the first outer
    #: steps (0.80 → 0.83, the working set growing) and took 13 to fall below its first value, 49 to a feasible point.
    NO_POINT_OUTER: int = 20
    #: ``solve(handover=True)`` (``ntp_svm`` "auto" where the interior point fits and can take over): with no feasible
    #: point yet, the solve also stops (stalled) once ρ has reached HANDOVER_RHO and either the violation is still at
    #: least HANDOVER_FAR (half the unit margin) or it has not halved over HANDOVER_OUTER outer steps since
    #: (:func:`_no_point_progress`). Measured 2026-11-30, one thread, the violation at the first outer step at
    #: ρ = 10⁴ (outer step 6): SmolLM2's states relaxed to 2 / 5 / 10 tokens 0.53 / 0.98 / 1.25 with no feasible point
    #: (the 5-token solve then stayed at 0.77–0.86 for 45 outer steps at ρ = 10⁵ before NO_POINT_OUTER stopped it;
    #: the interior point reaches W^mm on all three), the mixed-ties draws (m = 3000, V = 400, d = 32; seeds 1–3),
    #: where the ALM is optimal in 15–27 s and the interior point took 241 s, 0.17 / 0.17 / 0.23 *with* a feasible point
    #: from that step on, the violation halving every one or two steps after it (0.17 → 0.028 → 0.012 → 0.008). Until
    #: 2026-11-30 (late) HANDOVER_RHO was 10⁵ with the halving rule alone: ~20 s later at 5 tokens, ~33 s at 10.
    HANDOVER_RHO: float = 1e4
    HANDOVER_FAR: float = 0.5
    HANDOVER_OUTER: int = 3
    #: Up to this penalty the unit Newton step is taken where it lowers φ by at least ARMIJO times its first-order
    #: prediction (the standard sufficient-decrease test); else, and above it, the exact minimiser along the line.
    #: The exact minimiser stops at the first breakpoints where pairs switch: on the paper-like instance (m = 15,012,
    #: r = 128; 2026-11-27) each inner loop after a tenfold rise of ρ took 28–30 Newton steps at α = 0.1–0.8, P
    #: changing by 50–150 pairs per step and T factored anew almost every time; with the unit step where it decreases
    #: φ enough, 132 Newton steps and 57 factorizations in all instead of 226 and 124 (with ADD_EVERY_VIOLATED in both).
    #: Not above 10⁶: at every ρ, unit steps stalled the planted m = 90 test case at ρ = 10¹⁰, which it needs
    #: (gap 4.8e-5, the next directions at rounding), and without ADD_EVERY_VIOLATED the paper-like solve diverged at
    #: ρ = 10⁸ (violation 3e-5 → 4e-2); T's factor is no longer accurate there (STUCK_STEPS), and the exact minimiser
    #: is safe.
    UNIT_STEP_RHO: float = 1e6
    ARMIJO: float = 1e-4
    #: A Newton system stores the heavy groups' rows U_g = K_gR_g⁻ᵀ (one r-vector per tight pair) up to this size, and
    #: otherwise reads them from K at each product. On synthetic-100k (m = 100,000, r = 128; 2026-11-27) the first
    #: systems had 1.9 million heavy pairs: the U_g (1.9 GB), a gathered copy of K_g to make them and the previous
    #: system's U_g in the block cache peaked at 11.6 GB (6.5 GB reading from K). Stored rows are faster on the quick
    #: models (the transformer's solve 8.8 s against 9.8 s reading from K).
    HEAVY_ROWS_BYTES: int = 2**28
    #: Blocks C_g, H_g of at least this many rows are inverted one by one through LAPACK (:func:`_spd_inverse`), smaller
    #: ones in one batched numpy call. Measured on stacks of random blocks (one thread, 2026-11-27): per block potrf +
    #: potri against numpy's batched Cholesky, inverse and product, 3.6 / 1.2 / 0.9 / 1.6 / 2.4 ms against 0.56 / 0.72 /
    #: 1.0 / 2.2 / 5.7 ms for 2000 / 500 / 200 / 100 / 10 blocks of 2 / 8 / 16 / 32 / 128 rows. Over every call of a
    #: paper-planted solve (m = 15,012, r = 128; both ways timed on the same stacks): 4.13 s against 5.93 s.
    LAPACK_BLOCK: int = 16
    #: Under ``max_seconds``, the certificate of an outer step (a tie projection and a full scan) is still computed when
    #: it is expected to end within this fraction of ``max_seconds`` past the deadline (its cost estimated by the last
    #: one measured); else the solve stops with the bounds of the previous outer step and says so in its ``reason``.
    #: The inner Newton steps stop early enough to leave the certificate its time (issue 38: every limit a wall).
    CERTIFICATE_GRACE: float = 0.05


#: The tuning every solve uses unless given other options.
DEFAULT_OPTIONS = ALMOptions()
#: The defaults with ρ held while the working set lacks binding pairs (HOLD_OUTSIDE = 1): what the analysis of a
#: model's own states uses (a real LM's W^mm needs 90–130 off pairs per context, far beyond the first working set).
HOLD_SET = ALMOptions(HOLD_OUTSIDE=1.0)


# -- the Newton matrix ----------------------------------------------------------------------------------

class NewtonSystem:
    """Solves (D + ρ Σ_{(g,j) ∈ P} a′a′ᵀ) Δ = b for Δ = (ΔX (G, r), Δt (m)), a′ = (k_j in row g, −1 at t_j).

    D = diag(n_g I_r) on X and 0 on t. A context with one pair in P only fixes its own Δt_j through
    it; the others ("coupled", c of them) keep Δt in a Schur complement. Per group, with K_g (q × r)
    the rows of its coupled pairs, H_g = n_g I + ρ K_gᵀK_g is eliminated, which leaves

        T = Σ_g E_gᵀ T_g E_g,   T_g = ρ I − ρ² K_g H_g⁻¹ K_gᵀ = n_g (n_g/ρ I + K_gK_gᵀ)⁻¹   (q × q).

    Groups with q ≤ r ("light") go through the q × q matrix C_g = n_g/ρ I + K_gK_gᵀ (Woodbury:
    H_g⁻¹ = (I − K_gᵀC_g⁻¹K_g)/n_g), kept as one sparse block-diagonal matrix over their pairs (their
    T_g are that matrix times n_g, scattered to the contexts of the pairs); groups with q > r ("heavy":
    a frequent token tight in many contexts) through the r × r H_g⁻¹, which stays well defined however
    many contexts it has. T is then either factored densely (:meth:`factor`: c³/3 flops, c² memory)
    or applied group by group for Jacobi-preconditioned conjugate gradients (:meth:`solve` with
    ``rtol``): O(Σ_light q² + Σ_heavy q r) per product, no c × c array. Every operation is
    vectorised over all pairs at once. Setup cost Σ_g q_g² min(q_g, r) flops.
    """

    def __init__(self, K: np.ndarray, n: np.ndarray, g: np.ndarray, j: np.ndarray, rho: float,
                 cache: BlockCache | None = None, opt: ALMOptions = DEFAULT_OPTIONS):
        self.opt = opt
        G, (m, r) = len(n), K.shape
        self.K, self.n, self.rho, self.G, self.m = K, n, rho, G, m
        self.keys = np.sort(g * m + j)  # the pairs of P (to count what changed between two systems)
        count = np.bincount(j, minlength=m)
        coupled = count[j] >= 2
        self.gs, self.js = g[~coupled], j[~coupled]  # contexts with one pair: t_j follows that pair
        gc, jc = g[coupled], j[coupled]
        order = np.lexsort((jc, gc))
        gc, jc = gc[order], jc[order]
        self.ctx = np.flatnonzero(count >= 2)
        self.c = len(self.ctx)
        self.chol = None
        self._borrowed = None
        self.cg_iterations = 0
        self.refactored = 0  # factored again in double precision where the single-precision factor did not do
        self.inexact = False  # the last solve stopped short of rtol (allowed only where T cannot be factored)
        #: a time.perf_counter() value: the Jacobi / borrowed conjugate gradients stop there with their last
        #: iterate (``timed_out``), a descent direction all the same; None: no limit (set by :class:`SVMALM`)
        self.deadline: float | None = None
        self.timed_out = False
        q = np.bincount(gc, minlength=G)
        light = q[gc] <= r
        # light groups: C_g⁻¹ batched by q, assembled into a block-diagonal matrix over their pairs
        self.gl, self.jl = gc[light], jc[light]
        self.ll = np.searchsorted(self.ctx, self.jl)  # position in T
        starts = np.flatnonzero(np.r_[True, self.gl[1:] != self.gl[:-1]]) if len(self.gl) else np.zeros(0, int)
        sizes = np.diff(np.r_[starts, len(self.gl)])
        # C_g⁻¹ written straight into CSR arrays: row p of group g's block holds that group's q columns, in
        # order (no COO → CSR conversion and sort, which cost a quarter of a build on trained embeddings)
        qrow = np.repeat(sizes, sizes)  # q of each light pair's group
        indptr = np.r_[0, np.cumsum(qrow)]
        data, indices = np.empty(indptr[-1]), np.empty(indptr[-1], np.int64)
        cache = BlockCache() if cache is None else cache
        cache.begin(rho)
        for qq in np.unique(sizes):
            first = starts[sizes == qq]
            idx = first[:, None] + np.arange(qq)  # (nb, q) pair positions
            keys = [(int(self.gl[f]), self.jl[f:f + qq].tobytes()) for f in first]
            blocks = cache.take("light", keys)
            todo = np.array([b is None for b in blocks], bool)
            if todo.any():
                Kb = K[self.jl[idx[todo]]]
                C = Kb @ Kb.swapaxes(1, 2)
                C[:, np.arange(qq), np.arange(qq)] += (n[self.gl[first[todo]]] / rho)[:, None]
                inverses = _spd_inverse(C, lapack_block=self.opt.LAPACK_BLOCK)
                for i, block in zip(np.flatnonzero(todo), inverses, strict=True):
                    blocks[i] = block
                    cache.put("light", keys[i], block)
            pos = indptr[idx][:, :, None] + np.arange(qq)  # (nb, q, q) positions in data
            data[pos] = np.stack(blocks)
            indices[pos] = idx[:, None, :]
        nl = len(self.gl)
        self.Cinv = sp.csr_matrix((data, indices, indptr), shape=(nl, nl))
        # T of the light groups is n_g C_g⁻¹ scattered to the contexts of the pairs: T_light v =
        # Σ_p e_{ll[p]} (n C⁻¹ v[ll])_p, applied in that form (as fast as an assembled T_light, which
        # cost another quarter of a build to sum its duplicates)
        self.NCinv = sp.csr_matrix((data * np.repeat(n[self.gl], qrow), indices, indptr), shape=(nl, nl))
        self.ptr_l = np.searchsorted(self.gl, np.arange(G + 1))  # the light pairs are sorted by group
        # heavy groups: H_g⁻¹ (r × r) each
        self.gh, self.jh = gc[~light], jc[~light]
        self.lh = np.searchsorted(self.ctx, self.jh)
        self.heavy = np.unique(self.gh)
        hpos = np.searchsorted(self.heavy, self.gh)  # index of each heavy pair's group in self.heavy
        # the pairs are sorted by group: each heavy group's pairs are one slice. U_g = K_g R_g⁻ᵀ with H_g = R_gR_gᵀ,
        # so that ρ²K_gH_g⁻¹K_gᵀ = ρ²U_gU_gᵀ, kept (q_g × r each) where all of them fit HEAVY_ROWS_BYTES;
        # beyond, only H_g⁻¹ is kept and K_g read from K where it is needed (slower per product: 9.8 s instead of
        # 8.8 s for the quick transformer's solve)
        self.hslices = np.searchsorted(hpos, np.arange(len(self.heavy) + 1))
        spans = list(zip(self.hslices[:-1], self.hslices[1:], strict=True))
        rows = 8 * len(self.jh) * r <= self.opt.HEAVY_ROWS_BYTES
        keys = [(int(gg), rows, self.jh[a:b].tobytes()) for gg, (a, b) in zip(self.heavy, spans, strict=True)]
        blocks = cache.take("heavy", keys)  # (H_g⁻¹, U_g or None) of a group whose pairs and ρ did not change
        todo = [i for i, b in enumerate(blocks) if b is None]
        if todo:
            H = np.empty((len(todo), r, r))
            Kgs = []  # the gathered rows, kept for U_g only where they fit HEAVY_ROWS_BYTES
            for i, k in enumerate(todo):  # else one group's rows at a time: at most max_g q_g × r gathered
                Kg = K[self.jh[spans[k][0]:spans[k][1]]]
                np.matmul(Kg.T, Kg, out=H[i])
                if rows:
                    Kgs.append(Kg)
            H *= rho
            H[:, np.arange(r), np.arange(r)] += n[self.heavy[todo]][:, None]
            # with H_g = R Rᵀ, H_g⁻¹ = R⁻ᵀR⁻¹, so U_g = K_g R⁻ᵀ (no second factorization, of H_g⁻¹), made in place of
            # the gathered rows as U_gᵀ = R⁻¹K_gᵀ by a triangular product (trmm: 14 against 22 ms for a general one
            # at q = 20,000, r = 128; the same values)
            Hinv, Rinv = _spd_inverse(H, factor=True, lapack_block=self.opt.LAPACK_BLOCK)
            trmm = sla.blas.get_blas_funcs("trmm", (H,))
            for i, k in enumerate(todo):
                blocks[k] = (Hinv[i], trmm(1.0, Rinv[i], Kgs[i].T, lower=1, overwrite_b=1).T if rows else None)
                cache.put("heavy", keys[k], blocks[k])
        self.Hinv = np.stack([b[0] for b in blocks]) if blocks else np.empty((0, r, r))
        # per group, not concatenated: the products below go group by group (one matrix-vector product each way,
        # no gathered copy of z per pair), and a concatenation cost a copy of every U_g per system
        self.U = [b[1] for b in blocks] if blocks and rows else None
        self.reused = cache.hits  # blocks taken from the previous system (for tests and profiles)

    # -- pieces ------------------------------------------------------------------------------------------
    def _light_sum(self, w: np.ndarray) -> np.ndarray:
        """Σ over each group's light pairs of w_p k_{j_p}: (G, r), one sparse product (no gathered copy of K)."""
        return sp.csr_matrix((w, self.jl, self.ptr_l), shape=(self.G, self.m)) @ self.K

    def _heavy_sum(self, w: np.ndarray) -> np.ndarray:
        """Σ over each heavy group's pairs of w_p k_{j_p}: (number of heavy groups, r)."""
        return sp.csr_matrix((w, self.jh, self.hslices), shape=(len(self.heavy), self.m)) @ self.K

    def _apply_hinv(self, B: np.ndarray) -> np.ndarray:
        """H_g⁻¹ b_g for every group g (rows of B, (G, r))."""
        out = B / self.n[:, None]
        if len(self.gl):
            u = group_dots(B, self.K, self.ptr_l, self.jl)
            out -= self._light_sum(self.Cinv @ u) / self.n[:, None]
        if len(self.heavy):
            out[self.heavy] = np.einsum("nij,nj->ni", self.Hinv, B[self.heavy])
        return out

    def _tmul(self, v: np.ndarray) -> np.ndarray:
        """T v over the coupled contexts (no c × c array)."""
        # (no light pairs: bincount of empty weights is an int array, which the heavy part cannot add into)
        out = np.bincount(self.ll, weights=self.NCinv @ v[self.ll], minlength=self.c) if len(self.gl) \
            else np.zeros(self.c)
        if len(self.heavy):
            vh = v[self.lh]
            if self.U is not None:  # u_g = U_g U_gᵀ v_g, two matrix-vector products per group
                u = np.empty(len(vh))
                for Ug, a, b in zip(self.U, self.hslices[:-1], self.hslices[1:], strict=True):
                    u[a:b] = Ug @ (vh[a:b] @ Ug)
            else:
                z = np.einsum("nij,nj->ni", self.Hinv, self._heavy_sum(vh))  # H_g⁻¹ K_gᵀ v_g
                u = group_dots(z, self.K, self.hslices, self.jh)
            out += np.bincount(self.lh, weights=self.rho * vh - self.rho ** 2 * u, minlength=self.c)
        return out

    def _tdiag(self) -> np.ndarray:
        """The diagonal of T (Jacobi preconditioner)."""
        d = np.bincount(self.ll, weights=self.NCinv.diagonal(), minlength=self.c)
        if len(self.heavy):
            quad = np.concatenate([np.einsum("pr,pr->p", Ug, Ug) for Ug in self.U]) if self.U is not None \
                else self._heavy_quad()
            d = d + np.bincount(self.lh, weights=self.rho - self.rho ** 2 * quad, minlength=self.c)
        return d

    def _heavy_quad(self) -> np.ndarray:
        """k_jᵀ H_g⁻¹ k_j for every heavy pair, in chunks of a group's pairs (no |P| × r temporary)."""
        out = np.empty(len(self.jh))
        step = row_chunk(self.K.shape[1])
        for i, (a, b) in enumerate(zip(self.hslices[:-1], self.hslices[1:], strict=True)):
            for s in range(a, b, step):
                Kc = self.K[self.jh[s:min(s + step, b)]]
                out[s:s + len(Kc)] = np.einsum("pr,pr->p", Kc @ self.Hinv[i], Kc)
        return out

    def precondition(self, r: np.ndarray) -> np.ndarray:
        """M⁻¹ r for the conjugate gradients: Jacobi, or, where :meth:`borrow` gave one, an earlier system's
        factored T on the contexts the two share (a principal submatrix of an SPD inverse is SPD) and Jacobi
        on the others."""
        if self._borrowed is None:
            return r / self._diag
        other, mine, theirs = self._borrowed
        z = r / self._diag
        rr = np.zeros(other.c)
        rr[theirs] = r[mine]
        z[mine] = _cho_solve(other.chol, rr)[theirs]
        return z

    def changes_from(self, other: NewtonSystem) -> tuple[int, int]:
        """(pairs, heavy groups): how many pairs of P are in one system and not the other, and how many of
        the groups that own them are heavy in either (their T_g change by a rank up to 2r)."""
        changed = np.setxor1d(self.keys, other.keys, assume_unique=True)
        groups = np.unique(changed // self.m)
        return len(changed), int(np.count_nonzero(np.isin(groups, np.union1d(self.heavy, other.heavy))))

    def borrow(self, other: NewtonSystem) -> None:
        """Precondition with ``other``'s Cholesky factor (a factored system at the same ρ whose pairs differ
        in few places: T⁻¹_other T is then the identity plus a low-rank part, and CG needs few steps)."""
        _, mine, theirs = np.intersect1d(self.ctx, other.ctx, assume_unique=True, return_indices=True)
        self._borrowed = (other, mine, theirs)

    def factor(self, single: bool = False) -> None:
        """T's Cholesky factor, in double precision or, with ``single``, in single precision where T rounded to it
        is positive definite (then :meth:`_tsolve` refines with conjugate gradients; SINGLE_RTOL)."""
        # T is symmetric, so its transpose, a Fortran-ordered view, is T: LAPACK factors it in place (given the
        # C-ordered array, f2py first copies it: 0.54 s against 0.43 s at c = 5001 in single precision)
        if single:
            T32 = self._assemble().astype(np.float32)  # the double T freed before the factorization
            try:
                self.chol = sla.cho_factor(T32.T, lower=True, check_finite=False, overwrite_a=True)
                return
            except np.linalg.LinAlgError:
                del T32  # not positive definite in single precision: in double below
        try:
            self.chol = sla.cho_factor(self._assemble().T, lower=True, check_finite=False, overwrite_a=True)
        except np.linalg.LinAlgError:
            raise SolverError("NTP-SVM Newton matrix: the Schur complement is numerically singular (contexts "
                              "nearly dependent at this penalty)") from None

    def _assemble(self) -> np.ndarray:
        """T as a dense c × c array: the light part from its sparse form, each heavy group's ρI − ρ²K_gH_g⁻¹K_gᵀ added
        in place."""
        c, rho = self.c, self.rho
        check_dense_size("Schur complement of the NTP-SVM's Newton matrix (coupled contexts²)", (c, c),
                         "too many contexts are tight at once for the exact Newton path")
        coo = self.NCinv.tocoo()
        T = sp.coo_matrix((coo.data, (self.ll[coo.row], self.ll[coo.col])), shape=(c, c)).toarray()
        for i, (a, b) in enumerate(zip(self.hslices[:-1], self.hslices[1:], strict=True)):
            lg = self.lh[a:b]
            if self.U is not None:
                U = self.U[i]
                T[np.ix_(lg, lg)] -= (rho * rho) * (U @ U.T)
            else:
                Kg = self.K[self.jh[a:b]]
                T[np.ix_(lg, lg)] -= (rho * rho) * ((Kg @ self.Hinv[i]) @ Kg.T)
            T[lg, lg] += rho
        return T

    @property
    def dense(self) -> bool:
        return self.chol is not None

    def _tsolve(self, rhs: np.ndarray, rtol: float, maxiter: int, inexact_ok: bool = False) -> np.ndarray:
        """T⁻¹ rhs: the Cholesky factor when there is one, else Jacobi-preconditioned conjugate gradients
        (:class:`CGFailed` if they do not reach ``rtol`` in ``maxiter`` iterations, or, with ``inexact_ok``,
        their last iterate: it still lowers the quadratic model, so the step is a descent direction)."""
        self.inexact = self.timed_out = False
        if self.chol is not None:
            if self.chol[0].dtype == np.float64:
                return _cho_solve(self.chol, rhs)
            x, done = self._cg(rhs, lambda r: _cho_solve(self.chol, r), self.opt.SINGLE_RTOL, self.opt.SINGLE_MAXITER)
            if done:
                return x
            self.factor()  # the single-precision factor preconditions too poorly: in double precision
            self.refactored += 1
            return _cho_solve(self.chol, rhs)
        if not hasattr(self, "_diag"):
            self._diag = self._tdiag()
        x, done = self._cg(rhs, self.precondition, rtol, maxiter, self.deadline)
        if done or self.timed_out:  # (cut by the deadline: the last iterate still lowers the quadratic model)
            return x
        if inexact_ok:
            self.inexact = True
            return x
        raise CGFailed

    def _cg(self, rhs: np.ndarray, precond: Callable, rtol: float, maxiter: int,
            deadline: float | None = None) -> tuple[np.ndarray, bool]:
        """(x, converged): preconditioned conjugate gradients on T x = rhs from 0, to ‖r‖ ≤ rtol ‖rhs‖; stopped
        (``timed_out`` set) at ``deadline`` (a time.perf_counter() value), checked before every product with T."""
        norm = float(np.linalg.norm(rhs))
        x = np.zeros_like(rhs)
        if norm == 0:
            return x, True
        r = rhs.copy()
        z = precond(r)
        p = z.copy()
        rz = float(r @ z)
        for _ in range(maxiter):
            if past(deadline):
                self.timed_out = True
                return x, False
            self.cg_iterations += 1
            q = self._tmul(p)
            alpha = rz / float(p @ q)
            x += alpha * p
            r -= alpha * q
            if np.linalg.norm(r) <= rtol * norm:
                return x, True
            z = precond(r)
            rz, rz_old = float(r @ z), rz
            p = z + (rz / rz_old) * p
        return x, False

    def solve(self, bx: np.ndarray, bt: np.ndarray, rtol: float = 1e-10, maxiter: int = 500,
              inexact_ok: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(ΔX, Δt) for the right-hand side (bx (G, r), bt (m,)); ``rtol``, ``maxiter`` and ``inexact_ok``
        for the conjugate gradients when T is not factored (:meth:`_tsolve`)."""
        K, rho = self.K, self.rho
        bx = bx.copy()
        np.add.at(bx, self.gs, K[self.js] * bt[self.js][:, None])  # eliminated single-pair contexts
        dt = np.zeros(self.m)
        if self.c:
            y = self._apply_hinv(bx)
            rhs = bt[self.ctx].copy()
            if len(self.gl):
                rhs += rho * np.bincount(self.ll, weights=group_dots(y, K, self.ptr_l, self.jl), minlength=self.c)
            if len(self.gh):
                rhs += rho * np.bincount(self.lh, weights=group_dots(y[self.heavy], K, self.hslices, self.jh),
                                         minlength=self.c)
            dtc = self._tsolve(rhs, rtol, maxiter, inexact_ok)
            dt[self.ctx] = dtc
            if len(self.gl):
                bx += rho * self._light_sum(dtc[self.ll])
            if len(self.gh):
                bx[self.heavy] += rho * self._heavy_sum(dtc[self.lh])
        dx = self._apply_hinv(bx)
        dt[self.js] = row_dots(dx, K, self.gs, self.js) + bt[self.js] / rho
        return dx, dt


class BlockCache:
    """The per-group blocks (C_g⁻¹ of a light group, H_g⁻¹ and U_g of a heavy one) of the last Newton system
    built, for the next: between two Newton steps P changes in a few tens of the ~1000 groups, and a block
    depends only on ρ and its group's coupled pairs, so the others are taken as they are. Holds one system's
    blocks at a time (those it used); a change of ρ empties it."""

    def __init__(self):
        self.rho, self.hits = None, 0
        self._old: dict = {}
        self._new: dict = {}

    def begin(self, rho: float) -> None:
        """Start a system at ρ: the previous system's blocks become the ones to take from."""
        self._old = self._new if rho == self.rho else {}
        self._new, self.rho, self.hits = {}, rho, 0

    def take(self, kind: str, keys: list) -> list:
        """The blocks of the previous system under these keys (None where it had none), kept for the next."""
        out = [self._old.get((kind, k)) for k in keys]
        for k, b in zip(keys, out, strict=True):
            if b is not None:
                self._new[(kind, k)] = b
                self.hits += 1
        return out

    def put(self, kind: str, key, block) -> None:
        self._new[(kind, key)] = block


class CGFailed(Exception):
    """The conjugate gradients on T did not converge: factor T instead."""


class _OutOfTime(Exception):
    """A factorization of T would end past the inner loop's deadline (estimated from the last one measured)."""


def _cho_solve(chol: tuple, r: np.ndarray) -> np.ndarray:
    """T⁻¹r in double precision from a lower Cholesky factor (``cho_factor``'s) in single or double precision: two
    triangular solves (BLAS trsv), with r in the factor's precision (mixed, the factor would first be copied).
    Measured at c = 5001 (2026-11-27): 4.7 ms in single and 14.6 ms in double precision, against 22 ms for
    ``cho_solve`` in either (LAPACK potrs, a triangular solve with one right-hand side through trsm)."""
    L, lower = chol
    assert lower, "a lower factor is expected"
    trsv = sla.blas.get_blas_funcs("trsv", (L,))
    y = trsv(L, r.astype(L.dtype, copy=False), lower=1)
    return trsv(L, y, lower=1, trans=1).astype(np.float64, copy=False)


def _scatter(K: np.ndarray, G: int, g: np.ndarray, j: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ_j w_{gj} k_j for every group: (G, r), from pairs (g, j) in any order (K (m, r))."""
    return sp.csr_matrix((w, (g, j)), shape=(G, K.shape[0])) @ K


class NewtonTooLarge(MemoryError):
    """A Newton system whose per-group blocks (:func:`newton_bytes`) would not fit the memory room (:func:`_room`):
    the solve stops with its best certified point, and this message is its reason; ``dense``: because the pairs the
    iterate violates are that many (the outcome's ``dense_active``)."""

    def __init__(self, message: str, dense: bool = False):
        super().__init__(message)
        self.dense = dense


def newton_bytes(g: np.ndarray, G: int, r: int, heavy_rows_bytes: float = np.inf) -> float:
    """An upper bound on the bytes of :class:`NewtonSystem`'s per-group blocks over pairs of groups ``g`` (every pair
    counted as coupled), the previous system's kept beside them (:class:`BlockCache`): per group of q pairs, when
    q ≤ r, C_g⁻¹ in the cache and in the system's two sparse matrices with their column indices (32 q² bytes), else
    H_g, R_g⁻¹ and H_g⁻¹ (24 r²) and the rows U_g (8 q r, kept only where they all fit ``heavy_rows_bytes``, as
    HEAVY_ROWS_BYTES rules).

    Why: at gpt2-2048 of ``bench_ntp_scale`` (m = 2048, 5284 groups, r = 768) every violated pair joined the working
    set at once, 4.5 million pairs, whose Newton system asked for 23 GiB of H_g in one array, and the process was
    killed for memory rather than stopped."""
    q = np.bincount(g, minlength=G).astype(np.float64)
    light = q <= r
    rows = 8.0 * r * float(np.sum(q[~light]))
    return (32.0 * float(np.sum(q[light] ** 2)) + 24.0 * r * r * np.count_nonzero(~light)
            + (rows if rows <= heavy_rows_bytes else 0.0))


def _room() -> float:
    """Bytes a Newton system may take: the dense budget and half the memory left to the process (the other half
    leaves room for the previous system, held while the next is built, and the rest of the solve)."""
    return min(validate.DENSE_BUDGET_BYTES, 0.5 * validate.available_memory_bytes())


def _fits_dense(c: int) -> bool:
    """Whether T (c × c) may be factored: within the dense budget and, with room for the rest, the memory
    left to the process (``ulimit -v`` included). Where not, the conjugate gradients' last iterate is used."""
    nbytes = 8.0 * c * c
    return nbytes <= validate.DENSE_BUDGET_BYTES and nbytes <= 0.5 * validate.available_memory_bytes()


def _kept_ptr(on: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """The group pointers (G + 1,) of the pairs where ``on``, of pairs sorted by group with pointers ``ptr``."""
    return np.concatenate([[0], np.cumsum(on)])[ptr]


def _violation(aS: np.ndarray, aW: np.ndarray) -> float:
    """The largest violation of the ties (|a| on S) and of the margins (a + 1 > 0 on the given W pairs)."""
    return max(float(np.max(np.abs(aS), initial=0.0)), float(np.max(aW + 1.0, initial=0.0)))


def _stalled(gaps_at_max: list[float], outer: int, violations_at_max: list[float] | None = None,
             no_point_outer: int = DEFAULT_OPTIONS.NO_POINT_OUTER) -> bool:
    """Whether the certified gap has not halved over the last ``outer`` (STALL_OUTER) outer steps, counting only the
    steps at ρ = RHO_MAX (``gaps_at_max``, oldest first): the steps before, at a smaller ρ, are not a stall. Where no
    feasible point has been found yet (the gap still infinite: ∞ > ½·∞ is false), whether the violation of the
    multipliers' constraints (``violations_at_max``, the same steps) has reached no new low over the last
    ``no_point_outer`` (NO_POINT_OUTER): until 2026-11-30 such a solve ran on to its time limit (SmolLM2's states
    relaxed to 10 tokens: 90 outer steps at ρ capped at 10³–10⁴, violation 0.9–1.2, where the interior point reaches
    W^mm). A violation that falls, however slowly, is on its way to a feasible point (``synthetic(8, 10, 6, 3,
    seed=1)`` at RHO_MAX = 1: 0.80 → 0.69 over 49 outer steps, then feasible)."""
    if math.isinf(gaps_at_max[-1] if gaps_at_max else 0.0):
        v = violations_at_max or []
        return len(v) > no_point_outer and min(v[-no_point_outer:]) >= min(v[:-no_point_outer])
    return len(gaps_at_max) > outer and gaps_at_max[-1] > 0.5 * gaps_at_max[-1 - outer]


def _no_point_progress(violations: list[float], outer: int, far: float) -> str | None:
    """Why the outer steps since ρ reached HANDOVER_RHO (their violations, oldest first), with no feasible point yet,
    show the multipliers a tiny margin needs out of the method of multipliers' reach, so that the interior point can
    take over (:attr:`ALMOptions.HANDOVER_RHO`): the last violation still at least ``far`` (HANDOVER_FAR), or none of
    the last ``outer`` (HANDOVER_OUTER) half the one before them; None while neither holds."""
    if violations and violations[-1] >= far:
        return f"still {violations[-1]:.2g} ≥ {far:.2g}"
    if len(violations) > outer and min(violations[-outer:]) > 0.5 * violations[-1 - outer]:
        return f"not halved over {outer} outer steps"
    return None


def _close(changes: tuple[int, int], opt: ALMOptions) -> bool:
    """Whether P changed little enough, in (pairs, heavy groups), for a borrowed factor to precondition T."""
    pairs, heavy = changes
    return pairs <= opt.BORROW_MAX_PAIRS and heavy <= opt.BORROW_MAX_HEAVY


def _spd_inverse(A: np.ndarray, factor: bool = False,
                 lapack_block: int = DEFAULT_OPTIONS.LAPACK_BLOCK):
    """Inverses of a stack (n, k, k) of symmetric positive definite matrices, through their Cholesky factors
    A = R Rᵀ; with ``factor``, (A⁻¹, R⁻¹) (A⁻¹ = R⁻ᵀR⁻¹). Blocks of at least ``lapack_block`` rows go one by one through
    LAPACK (potrf, potri and for R⁻¹ trtri: about k³ flops), smaller ones batched through numpy (Cholesky, a general
    inverse of R and the product: about 4k³, but one call for the whole stack)."""
    if A.shape[1] >= lapack_block:
        return _spd_inverse_lapack(A, factor)
    try:
        Rinv = np.linalg.inv(np.linalg.cholesky(A))
    except np.linalg.LinAlgError:
        raise SolverError(_SINGULAR_BLOCK) from None
    inverse = Rinv.swapaxes(1, 2) @ Rinv
    return (inverse, Rinv) if factor else inverse


def _spd_inverse_lapack(A: np.ndarray, factor: bool):
    """:func:`_spd_inverse` block by block through LAPACK."""
    potrf, potri, trtri = sla.lapack.get_lapack_funcs(("potrf", "potri", "trtri"), (A,))
    inverse = np.empty_like(A)
    Rinv = np.empty_like(A) if factor else None
    for i in range(len(A)):
        R, info = potrf(A[i], lower=1, clean=1)
        if info != 0:
            raise SolverError(_SINGULAR_BLOCK)
        if factor:
            Rinv[i], info = trtri(R, lower=1)
        inverse[i], info = potri(R, lower=1, overwrite_c=1)
    upper = np.triu_indices(A.shape[1], 1)  # potri writes the lower triangle only
    inverse[:, upper[0], upper[1]] = inverse[:, upper[1], upper[0]]
    return (inverse, Rinv) if factor else inverse


_SINGULAR_BLOCK = "NTP-SVM Newton matrix: a token's block is numerically singular"


def _line_search(c0: float, c1: float, eq_d: np.ndarray, eq_w: np.ndarray, rho: float, off_d: np.ndarray,
                 off_u: np.ndarray) -> float:
    """The α ≥ 0 where φ′(α) = c0 + c1 α + Σ eq_d (eq_w + αρ eq_d) + Σ off_d [off_u + αρ off_d]₊ vanishes.

    φ′ is nondecreasing and piecewise linear (φ′(0) < 0 along a descent direction); its pieces change
    at the breakpoints β_i = −off_u_i/(ρ off_d_i), where a term switches on (off_d > 0) or off
    (off_d < 0). O(n log n) for n terms.
    """
    a0 = c0 + float(eq_d @ eq_w)
    a1 = c1 + rho * float(eq_d @ eq_d)
    nz = off_d != 0
    d, u = off_d[nz], off_u[nz]
    on = (u > 0) | ((u == 0) & (d > 0))  # the terms active just right of α = 0
    a0 += float(d[on] @ u[on])
    a1 += rho * float(d[on] @ d[on])
    beta = -u / (rho * d)
    ev = (beta > 0) & ((d > 0) != on)
    order = np.argsort(beta[ev])
    bs, ds, us = beta[ev][order], d[ev][order], u[ev][order]
    sign = np.where(ds > 0, 1.0, -1.0)
    # intercept and slope of φ′ on the piece before breakpoint k (k = len: the last piece)
    s0 = a0 + np.concatenate([[0.0], np.cumsum(sign * ds * us)])
    s1 = a1 + np.concatenate([[0.0], np.cumsum(sign * rho * ds * ds)])
    at_break = s0[:-1] + s1[:-1] * bs
    k = int(np.argmax(at_break >= 0)) if np.any(at_break >= 0) else len(bs)
    if s1[k] <= 0:  # cannot happen for a descent direction of a strongly convex φ; stay safe
        return float(bs[k - 1]) if k else 0.0
    return max(float(-s0[k] / s1[k]), 0.0)


def _step_length(c0: float, c1: float, eq_d: np.ndarray, eq_w: np.ndarray, rho: float, off_d: np.ndarray,
                 off_u: np.ndarray, opt: ALMOptions = DEFAULT_OPTIONS) -> float:
    """α = 1 where ρ ≤ UNIT_STEP_RHO and φ(1) − φ(0) ≤ ARMIJO · φ′(0), else :func:`_line_search`'s exact minimiser
    (same arguments).

    φ(α) − φ(0) = c0 α + c1 α²/2 + Σ eq_d eq_w α + ρ/2 Σ (α eq_d)² + 1/(2ρ) Σ ([off_u + αρ off_d]₊² − [off_u]₊²),
    the integral of :func:`_line_search`'s φ′; O(n) for n terms.
    """
    lo, ew = np.maximum(off_u, 0.0), float(eq_d @ eq_w)
    slope = c0 + ew + float(off_d @ lo)
    if rho <= opt.UNIT_STEP_RHO and slope < 0:
        hi = np.maximum(off_u + rho * off_d, 0.0)
        change = (c0 + 0.5 * c1 + ew + 0.5 * rho * float(eq_d @ eq_d)
                  + float(np.sum((hi - lo) * (hi + lo))) / (2.0 * rho))
        if change <= opt.ARMIJO * slope:
            return 1.0
    return _line_search(c0, c1, eq_d, eq_w, rho, off_d, off_u)


# -- the ties (6a) ---------------------------------------------------------------------------------------------

class TieProjection:
    """The weighted projection onto the ties (6a): for group rows X (G, r),

        min ½ Σ_g n_g ‖δ_g‖²  s.t.  (x_g + δ_g)ᵀk_j = t_j  for every support pair (g, j), t free,

    and its multipliers λ (n_g δ_g = Σ_j λ_{gj} k_j, Σ_g λ_{gj} = 0 per context). A context with one support
    group ties itself (t_j = its logit, λ = 0 there); the others go through the method of multipliers on their
    pairs, with one :class:`NewtonSystem` factored once (in the unit scale max ‖k_j‖ = 1, penalty TIE_RHO;
    solved by conjugate gradients instead where T does not fit in memory) and iterated until the ties hold
    to rounding or stop improving (the certificate reports what remains). Used for the primal points of both
    NTP-SVM solvers and the Farkas completion of :class:`~embgeo.ntp.solvers.svm_dual.SVMDual`: no per-group SVD, so a
    frequent token in more contexts than dimensions costs r × r, not q × q. Cost: setup Σ_g q_g² min(q_g, r)
    + c³/3 (c contexts with ≥ 2 support groups), then O(|pairs| r + c²) per round.
    """

    def __init__(self, K: np.ndarray, sg: np.ndarray, sj: np.ndarray, n: np.ndarray,
                 opt: ALMOptions = DEFAULT_OPTIONS):
        self.opt = opt
        self.scale = float(np.max(np.linalg.norm(K, axis=1))) or 1.0
        self.K = K / self.scale
        self.m, self.G = K.shape[0], len(n)
        self.sg, self.sj, self.n = sg, sj, np.asarray(n, dtype=np.float64)
        self.first = np.full(self.m, -1)
        self.first[sj[::-1]] = np.arange(len(sj))[::-1]
        self.multi = np.bincount(sj, minlength=self.m)[sj] >= 2
        self.tg, self.tj = sg[self.multi], sj[self.multi]
        self._system = None

    def project(self, X: np.ndarray, rounds: int = 30) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(X̃, t, λ) in the caller's units: X̃ = X + δ tied on every support pair (t_j the tied logit, exactly
        that of the context's first support group) and λ (one per support pair, in the order of sg, sj)."""
        Xn = X * self.scale
        t = row_dots(Xn, self.K, self.sg[self.first], np.arange(self.m))
        lam = np.zeros(len(self.sg))
        if len(self.tg) == 0:
            return X, t, lam
        if self._system is None:
            self._system = NewtonSystem(self.K, self.n, self.tg, self.tj, self.opt.TIE_RHO, opt=self.opt)
            if _fits_dense(self._system.c):  # else conjugate gradients (m = 100,000: c = 19,864 did not fit)
                self._system.factor()
        system, rho = self._system, self.opt.TIE_RHO
        nu = np.zeros(len(self.tg))
        D = np.zeros_like(Xn)
        best = np.inf
        for _ in range(rounds):
            a = row_dots(Xn + D, self.K, self.tg, self.tj) - t[self.tj]
            size = float(np.max(np.abs(a)))
            if size <= 1e-15 * max(1.0, float(np.max(np.abs(t)))) or size >= 0.5 * best:
                break  # at rounding, or no longer decreasing
            best = size
            w = nu + rho * a
            dx, dt = system.solve(-(self.n[:, None] * D + _scatter(self.K, self.G, self.tg, self.tj, w)),
                                  np.bincount(self.tj, weights=w, minlength=self.m),
                                  rtol=1e-13, maxiter=self.opt.TIE_CG_MAXITER, inexact_ok=True)
            D, t = D + dx, t + dt
            nu = nu + rho * (row_dots(Xn + D, self.K, self.tg, self.tj) - t[self.tj])
        Xn = Xn + D
        lam[self.multi] = -nu / self.scale ** 2  # stationarity: n_g δ_g + Σ_j ν_{gj} k_j = 0 (caller's units)
        # balanced exactly per context (the last solve leaves rounding): on each context's first support pair
        lam[self.first] -= np.bincount(self.sj, weights=lam, minlength=self.m)
        return Xn / self.scale, row_dots(Xn, self.K, self.sg[self.first], np.arange(self.m)), lam


# -- the solver --------------------------------------------------------------------------------------------

@dataclass
class _State:
    X: np.ndarray  # (G, r)
    t: np.ndarray  # (m,)
    nu: np.ndarray  # (|S|,) multipliers of the ties
    mu: np.ndarray  # (|W|,) multipliers of the working off pairs, ≥ 0
    wg: np.ndarray  # (|W|,) working set: groups, sorted ...
    wj: np.ndarray  # ... and contexts, sorted within a group
    wptr: np.ndarray  # (G + 1,) group g's pairs of W are wptr[g]:wptr[g + 1]
    fresh: np.ndarray  # (|W|,) bool: the pair joined W at the last outer step
    rho: float
    a: tuple | None = None  # (a_S, a_W) at (X, t) after the inner loop, None when not computed


def _working_set(G: int, m: int, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(wg, wj, wptr) of the pairs with sorted keys g·m + j: sorted by group, so that each group's pairs are one
    slice (:func:`~embgeo.ntp.solvers.constraints.group_dots`, and a CSR matrix without a sort)."""
    wg = keys // m
    return wg, keys % m, np.searchsorted(wg, np.arange(G + 1))


@dataclass
class _Run:
    """One :meth:`SVMALM.solve`'s state across its outer steps, read and updated by its named steps: the iterate
    (``st``), the best certified outcome and dual point so far, the deadline and the certificate's grace, the last
    certificate's and scan's measured costs, and the penalty's bookkeeping (the previous violation, the inner
    tolerance, the gaps by outer step, where ρ reached its cap, the tied iterate's last smallest margin)."""

    st: _State
    best: SVMOutcome
    deadline: float | None
    grace: float
    cert_cost: float
    scan_cost: float
    late: dict
    rho_cap: float
    best_dual: tuple | None = None
    prev_violation: float = np.inf
    gtol: float | None = None
    history: list = field(default_factory=list)
    violations: list = field(default_factory=list)  # (the violation at each outer step of history)
    at_max: int = 0
    handover: bool = False  # (solve's handover: stop early where no feasible point comes at a large ρ)
    at_handover: int | None = None  # (the first outer step at ρ ≥ HANDOVER_RHO)
    gamma: float = -np.inf
    hold: bool = False  # (this outer step keeps the multipliers and ρ: UNCONVERGED_HOLDS)


class SVMALM:
    """The NTP-SVM of one problem by the augmented Lagrangian method of the module docstring.

    Parameters
    ----------
    K : (m, r) context coordinates.
    support : (G, m) sparse 0/1 pattern, row g = the contexts J_g whose support holds group g.
    weights : (G,) group sizes n_g.
    """

    def __init__(self, K: np.ndarray, support: sp.csr_matrix, weights: np.ndarray,
                 options: ALMOptions | None = None):
        self.opt = validate.check_options(options, ALMOptions)
        self.scale = float(np.max(np.linalg.norm(K, axis=1)))
        if not self.scale > 0:
            raise SolverError("NTP-SVM: every context embedding is zero")
        self.K = K / self.scale
        self.support = sp.csr_matrix(support)
        self.support.sort_indices()
        self.support_csc = self.support.tocsc()
        self.G, self.m = self.support.shape
        self.n = np.asarray(weights, dtype=np.float64)
        coo = self.support.tocoo()
        order = np.lexsort((coo.col, coo.row))
        self.sg, self.sj = coo.row[order].astype(np.int64), coo.col[order].astype(np.int64)
        self.sptr = np.searchsorted(self.sg, np.arange(self.G + 1))  # group g's support pairs: sptr[g]:sptr[g + 1]
        self.first = np.full(self.m, -1)  # the first support pair of each context (balances the dual)
        self.first[self.sj[::-1]] = np.arange(len(self.sj))[::-1]
        self.ties = TieProjection(self.K, self.sg, self.sj, self.n, opt=self.opt)
        self._cache = None  # (key of P and ρ, NewtonSystem) of the last Newton matrix
        self._blocks = BlockCache()  # the last Newton matrix's per-group blocks, for the next
        self._stuck = False  # the last inner loop found no descent direction (STUCK_STEPS)
        self._unconverged = False  # the last inner loop ran all MAX_NEWTON steps short of its tolerance
        self._factored = None  # the last NewtonSystem whose T was factored
        self.factorizations = 0
        self.cg_solves = 0
        self.inexact_solves = 0  # Newton directions from unconverged conjugate gradients (T too large to factor)
        self._cg_failed: set[float] = set()  # penalties at which the conjugate gradients failed
        self._deadline: float | None = None  # the current inner loop's deadline (time.perf_counter()), or None
        self._factor_rate: float | None = None  # flops per second (c³/3 over its time) of the last factorization
        self._start_point: tuple | None = None  # (X, t) of the start when it separates (set by :meth:`start`)

    # -- pieces ------------------------------------------------------------------------------------
    def _a(self, X, t, ptr, j):
        """x_gᵀk_j − t_j for pairs sorted by group (``ptr`` (G + 1,): group g's pairs are ptr[g]:ptr[g + 1])."""
        return group_dots(X, self.K, ptr, j) - t[j]

    def _scatter_sw(self, st: _State, wS, wW):
        """Σ_j w_{gj} k_j over S and W (each sorted by group: two CSR matrices made without a sort), (G, r).

        W's pairs of weight 0 are left out (the same sums): once W has grown, most of its pairs are inactive (on
        paper-cs 28,003 of 379,370 at the end), and the product's cost is one row of K per pair kept."""
        shape = (self.G, self.m)
        on = wW != 0
        return (sp.csr_matrix((wS, self.sj, self.sptr), shape=shape) @ self.K
                + sp.csr_matrix((wW[on], st.wj[on], _kept_ptr(on, st.wptr)), shape=shape) @ self.K)

    def _norm2(self, X) -> float:
        """Σ_g n_g ‖x_g‖² = ‖W‖² of the token matrix."""
        return float(np.sum(self.n * np.einsum("ij,ij->i", X, X)))

    def _weights(self, st: _State, X, t, a: tuple | None = None):
        """(a_S, a_W, the multiplier estimates on S and W); ``a`` = (a_S, a_W) at (X, t) when already known."""
        aS, aW = a if a is not None else (self._a(X, t, self.sptr, self.sj), self._a(X, t, st.wptr, st.wj))
        return aS, aW, st.nu + st.rho * aS, np.maximum(st.mu + st.rho * (aW + 1.0), 0.0)

    def _gradient(self, st: _State, X, wS, wW):
        gx = self.n[:, None] * X + self._scatter_sw(st, wS, wW)
        return gx, -np.bincount(np.concatenate([self.sj, st.wj]), weights=np.concatenate([wS, wW]), minlength=self.m)

    def _system(self, st: _State, act: np.ndarray, factor: bool = False) -> NewtonSystem:
        """The Newton matrix of P = S ∪ {active pairs of W}, built only when P or ρ changed. T is factored when
        small (c ≤ CG_CONTEXTS) or when ``factor``; else solved by conjugate gradients: Jacobi-preconditioned
        below the smallest ρ at which they failed (T's condition grows with ρ), and from there on
        preconditioned by the last factored T at the same ρ where P changed in few pairs since (T_old⁻¹T is
        then the identity plus a low-rank part), or factored where there is none or P changed more."""
        key = (st.rho, len(act), act.tobytes())
        if self._cache is None or self._cache[0] != key:
            g = np.concatenate([self.sg, st.wg[act]])
            need, room = newton_bytes(g, self.G, self.K.shape[1], self.opt.HEAVY_ROWS_BYTES), _room()
            if need > room:
                raise NewtonTooLarge(
                    f"NTP-SVM (augmented Lagrangian): beyond this solver's memory at m = {self.m} contexts ({self.G} "
                    f"token groups, rank {self.K.shape[1]}): its Newton system over {len(g)} tight pairs would need "
                    f"{need / 2**30:.1f} GiB of per-group blocks, more than the {room / 2**30:.1f} GiB it may take "
                    "(the dense budget and half the memory left), so the solve stops with its best certified point")
            system = NewtonSystem(self.K, self.n, g,
                                  np.concatenate([self.sj, st.wj[act]]), st.rho, self._blocks, opt=self.opt)
            hard = bool(self._cg_failed) and st.rho >= min(self._cg_failed)
            last = self._factored
            if system.c <= self.opt.CG_CONTEXTS:
                factor = True
            elif hard and _fits_dense(system.c):
                if last is not None and last.rho == st.rho and _close(system.changes_from(last), self.opt):
                    system.borrow(last)
                else:
                    factor = True
            self._cache = (key, system)
        system = self._cache[1]
        if factor and not system.dense:
            flops = max(system.c, 1) ** 3 / 3.0
            if self._deadline is not None:  # a factorization cannot be interrupted: not begun where it would overrun
                now = time.perf_counter()
                if self._factor_rate is not None and now + flops / self._factor_rate > self._deadline:
                    raise _OutOfTime
            tic = time.perf_counter() if self._deadline is not None else None
            system.factor(single=True)
            if tic is not None:
                self._factor_rate = flops / max(time.perf_counter() - tic, 1e-9)
            self.factorizations += 1
            self._factored = system
        return system

    def _newton_direction(self, st: _State, act: np.ndarray, gx: np.ndarray, gt: np.ndarray):
        """(ΔX, Δt): the Newton direction of the inner loop; :class:`_OutOfTime` where a factorization of T would
        end past the inner loop's deadline (its conjugate gradients stop there with their last iterate)."""
        system = self._system(st, act)
        system.deadline = self._deadline
        if not system.dense:
            borrowed = system._borrowed is not None
            try:  # where T is too large to factor, an inexact direction rather than an exception
                opt = self.opt
                out = system.solve(-gx, -gt, rtol=opt.CG_RTOL, maxiter=opt.PCG_MAXITER if borrowed else opt.CG_MAXITER,
                                   inexact_ok=not _fits_dense(system.c))
                self.cg_solves += 1
                self.inexact_solves += system.inexact
                return out
            except CGFailed:
                if not borrowed:
                    self._cg_failed.add(st.rho)
                system = self._system(st, act, factor=True)
                system.deadline = self._deadline
        before = system.refactored  # a single-precision factor that did not do is replaced: one more factorization
        out = system.solve(-gx, -gt)
        self.factorizations += system.refactored - before
        return out

    def _inner(self, st: _State, gtol: float, deadline: float | None) -> int:
        """Minimise φ over (X, t) for fixed multipliers; returns the Newton steps taken. ``deadline`` (a
        time.perf_counter() value): checked after every step, and inside the steps (the conjugate gradients stop
        there; a factorization expected to end past it is not begun, and the loop ends)."""
        X, t = st.X, st.t
        steps, a, zero, kept, last_gnorm = 0, None, 0, False, np.inf
        self._stuck = self._unconverged = False
        self._deadline = deadline
        for _ in range(self.opt.MAX_NEWTON):
            aS, aW, wS, wW = self._weights(st, X, t, a)
            if a is None:
                bounded = np.zeros(len(aW), bool)  # W's pairs where aW is an upper bound (< −1), not the value
            a = (aS, aW)
            gx, gt = self._gradient(st, X, wS, wW)
            gnorm = np.sqrt(float(np.sum(gx * gx) + gt @ gt))
            # at least one step after a multiplier update: a context with a small embedding moves the
            # gradient little, and its violation would otherwise never be acted on
            if gnorm <= (gtol if steps else 1e-14 * gtol):
                break
            if kept and gnorm > self.opt.FLOOR_DECREASE * last_gnorm:
                break  # a Newton step on an unchanged P that did not halve ‖∇φ‖: the gradient is at rounding
            last_gnorm = gnorm
            act = wW > 0
            try:
                dx, dt = self._newton_direction(st, act, gx, gt)
            except _OutOfTime:
                break
            steps += 1
            dS = self._a(dx, dt, self.sptr, self.sj)
            alpha, dW, near = self._off_step(st, X, t, aW, bounded, dx, dt,
                                             partial(_step_length, float(np.sum(self.n[:, None] * X * dx)),
                                                     self._norm2(dx), dS, wS, st.rho, opt=self.opt))
            zero = zero + 1 if alpha == 0 else 0
            if zero >= self.opt.STUCK_STEPS:  # the directions are not descent directions: more steps change nothing
                self._stuck = True
                break
            X, t = X + alpha * dx, t + alpha * dt
            # a is linear in (X, t): no new pass over the pairs; off the near pairs a bound that stays below −1
            aW = aW + alpha * dW
            bounded |= ~near
            a = (aS + alpha * dS, aW)
            exact = self._cache[1].dense  # solved through T's factor, not by conjugate gradients to CG_RTOL
            # (a step of α = 0 keeps P too, but says that the direction does not descend: STUCK_STEPS decides there)
            kept = alpha > 0 and np.array_equal(st.mu + st.rho * (a[1] + 1) > 0, act)
            if exact and abs(alpha - 1.0) < 1e-12 and kept:
                break  # a unit step that kept P: the quadratic model was exact (and solved exactly)
            if past(deadline):
                break
        else:  # every step taken and no test passed: φ is not minimised (UNCONVERGED_HOLDS)
            self._unconverged = True
        st.X, st.t = X, t
        st.a = a
        self._deadline = None
        return steps

    def _off_step(self, st: _State, X, t, aW, bounded, dx, dt, step_length: Callable):
        """(α, ΔW, near): the step length along (ΔX, Δt) with W's terms, computed only on the pairs that could be
        active before α ("near"); elsewhere ΔW holds reach_p ≥ |Δa_p| = |Δx_gᵀk_j − Δt_j| (‖k_j‖ ≤ 1 in the unit
        scale), so that a_W + αΔW stays an upper bound, below −1 (an inactive pair's term of φ is 0 while
        a ≤ −1 and μ = 0). ``aW`` is made exact in place where a bounded pair comes near (``bounded`` updated).
        ``step_length(ΔW, μ + ρ(a + 1))`` is :func:`_step_length` over the given pairs.

        Once W has grown, most of its pairs are inactive with margins well above 1 while the late steps are short:
        on paper-cs (379,370 pairs, 28,003 active at the end) Δa over every pair cost 1.4 of 16 s. Far from the
        optimum the steps are long and nearly every pair is near: then this costs a few O(|W|) passes more."""
        # (1 + 1e-9: room for the rounding of reach itself and of the a it is compared with)
        reach = (1.0 + 1e-9) * (np.sqrt(np.einsum("ij,ij->i", dx, dx))[st.wg] + np.abs(dt)[st.wj])
        near = np.zeros(len(aW), bool)
        dW = reach.copy()
        horizon = 1.0
        while True:
            new = ~near & ((st.mu > 0) | (aW + horizon * reach >= -1.0))
            stale = new & bounded
            if stale.any():  # was only bounded: its value first
                aW[stale] = self._a_on(X, t, st, stale)
                bounded &= ~stale
            if new.any():
                dW[new] = self._a_on(dx, dt, st, new)
                near |= new
            alpha = step_length(dW[near], (st.mu + st.rho * (aW + 1.0))[near])
            if not alpha > horizon:  # (a NaN from NaN data ends here too, as it did before)
                return alpha, dW, near
            horizon = alpha  # a longer step than assumed: the pairs that could switch on before it join

    def _a_on(self, X, t, st: _State, on: np.ndarray) -> np.ndarray:
        """:meth:`_a` on the pairs of W where ``on``."""
        return self._a(X, t, _kept_ptr(on, st.wptr), st.wj[on])

    def _cheap_rise(self, st: _State, inexact_before: int) -> bool:
        """Whether a tenfold ρ would cost only conjugate-gradient iterations (CG_DECREASE): the last Newton system
        was solved by Jacobi CG to CG_RTOL, and they have not failed at ρ·RHO_UP or below."""
        system = self._cache[1] if self._cache is not None else None
        if system is None or system.dense or system._borrowed is not None or self.inexact_solves > inexact_before:
            return False
        return not self._cg_failed or st.rho * self.opt.RHO_UP < min(self._cg_failed)

    def _join(self, st: _State, g: np.ndarray, j: np.ndarray) -> None:
        """Add the pairs (g, j) not yet in W to it, at μ = 0, merged in order (W stays sorted by group); ``st.fresh``
        then marks them. The pairs listed must be distinct (a scan lists a pair once)."""
        keys = st.wg * self.m + st.wj
        found = g * self.m + j
        # both key sets are free of repeats: without assume_unique, np.isin first made each unique (80 ms a call on
        # the quick transformer's 114k pairs)
        new = found[~np.isin(found, keys, assume_unique=True)]
        merged = np.concatenate([keys, new])
        order = np.argsort(merged, kind="stable")
        st.wg, st.wj, st.wptr = _working_set(self.G, self.m, merged[order])
        st.mu = np.concatenate([st.mu, np.zeros(len(new))])[order]
        st.fresh = order >= len(keys)

    def _beyond_size(self, st: _State, inexact: int, before: float, after: float) -> str:
        """Why the solve stops where T can neither be factored nor solved by conjugate gradients, with the sizes."""
        c = self._cache[1].c if self._cache is not None else self.m
        room = min(validate.DENSE_BUDGET_BYTES, 0.5 * validate.available_memory_bytes())
        return (f"NTP-SVM (augmented Lagrangian): beyond this solver at m = {self.m} contexts ({self.G} token groups, "
                f"rank {self.K.shape[1]}, {len(st.wg)} off-support pairs in the working set): its Newton systems "
                f"couple c = {c} contexts, whose Schur complement ({8.0 * c * c / 2**30:.1f} GiB) cannot be factored "
                f"within {room / 2**30:.1f} GiB (the dense budget and half the memory left), and at ρ = {st.rho:.0e} "
                f"the conjugate gradients on it no longer converge ({inexact} inexact Newton directions in the last "
                f"inner loop; the violation went {before:.2g} → {after:.2g}). A larger ρ only worsens their "
                "condition, so the solve stops with its best certified point")

    # -- certificates ----------------------------------------------------------------------------------
    def tie(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(X̃, t): X (G, r, unit scale) projected onto the ties (6a) (:class:`TieProjection`)."""
        Xt, t, _ = self.ties.project(X)
        return Xt, t

    def dual_point(self, st: _State) -> tuple[float, np.ndarray, float]:
        """(D, ν̃, s): the multipliers balanced per context on its first support pair (Σ_g λ_{gj} = 0), the multiple
        s ≥ 0 of them with the largest dual value, and that value D = s Σ_W μ − ½ s² Σ_g ‖Σ_j λ_{gj} k_j‖²/n_g, a
        lower bound on ½‖W^mm‖². The dual set is a cone (μ ≥ 0, the balances are linear), so every s·λ is a dual
        point; D(s) is a concave parabola with its top at s = Σμ / Σ‖·‖²/n_g (1 at W^mm's multipliers, by
        stationarity). Far from the optimum the ALM's multipliers overshoot and D(1) < 0; D(s) > 0 whenever Σμ > 0."""
        resid = np.bincount(np.concatenate([self.sj, st.wj]), weights=np.concatenate([st.nu, st.mu]),
                            minlength=self.m)
        nu = st.nu.copy()
        nu[self.first] -= resid
        Y = self._scatter_sw(st, nu, st.mu)
        linear, quad = float(np.sum(st.mu)), float(np.sum(np.einsum("ij,ij->i", Y, Y) / self.n))
        scale = max(linear, 0.0) / quad if quad > 0 else 1.0
        return scale * linear - 0.5 * scale * scale * quad, nu, scale

    def feasible_point(self, X: np.ndarray, **select) -> tuple[np.ndarray | None, np.ndarray | None, float, Scan]:
        """(X̃, t̃, γ, scan): X tied and divided by γ, its smallest off-support margin over every pair (X̃, t̃ None if
        γ ≤ 0), and the full scan of the tied X that found γ, with the pairs that ``select`` (the keywords ``below``,
        ``top``, ``every_below`` of :func:`scan_off_support`) asks for."""
        Xp, tp = self.tie(X)
        scan = scan_off_support(Xp, tp, self.K, self.support_csc, **select)
        gamma = scan.min_margin
        if not gamma > 0:
            return None, None, float(gamma), scan
        return Xp / gamma, tp / gamma, float(gamma), scan

    # -- the method -----------------------------------------------------------------------------------------
    def start(self, X0: np.ndarray | None = None, dual: tuple | None = None) -> _State:
        """The starting point: a dual point (grp, ctx, Ψ) in the caller's units (multipliers −Ψ; X = ΨK/n),
        or a primal guess X0 (G, r) in the caller's units (default: the class means Σ_{j∈J_g} k_j/‖k_j‖²),
        tied and scaled to margin 1 when it separates. The working set: the dual point's off pairs and the
        INITIAL_PER_CONTEXT smallest margins of every context."""
        nu = np.zeros(len(self.sg))
        off_g = off_j = np.zeros(0, np.int64)
        off_mu = np.zeros(0)
        if dual is not None:
            g, j, psi = (np.asarray(a) for a in dual)
            psi = psi * self.scale ** 2
            X0 = _scatter(self.K, self.G, g, j, psi / self.n[g])
            keys_s = self.sg * self.m + self.sj
            keys = g * self.m + j
            pos = np.minimum(np.searchsorted(keys_s, keys), len(keys_s) - 1)
            on = keys_s[pos] == keys
            nu[pos[on]] = -psi[on]
            off_g, off_j, off_mu = g[~on], j[~on], np.maximum(-psi[~on], 0.0)
        elif X0 is None:
            X0 = self.support @ (self.K / np.maximum(np.sum(self.K * self.K, axis=1), 1e-300)[:, None])
        else:
            X0 = X0 * self.scale
        X0, t0 = self.tie(X0)
        # one full pass for both: the smallest margins of each context are the same pairs after a positive scaling
        scan = scan_off_support(X0, t0, self.K, self.support_csc, below=np.inf, top=self.opt.INITIAL_PER_CONTEXT)
        self._start_point = None  # the start, tied and scanned in full: certified when it separates
        if dual is None and scan.min_margin > 0:
            X0, t0 = X0 / scan.min_margin, t0 / scan.min_margin
            self._start_point = (X0, t0)
        keys, first = np.unique(np.concatenate([off_g * self.m + off_j, scan.groups * self.m + scan.contexts]),
                                return_index=True)
        mu = np.concatenate([off_mu, np.zeros(len(scan.groups))])[first]
        return _State(X0, t0, nu, mu, *_working_set(self.G, self.m, keys), np.ones(len(keys), bool), self.opt.RHO0)

    def solve(self, *, tol: float = 1e-10, max_outer: int = 500, max_seconds: float | None = None,
              X0: np.ndarray | None = None, dual: tuple | None = None,
              progress: ProgressFn | None = None, handover: bool = False) -> SVMOutcome:
        """Outer steps until the certified relative gap is ≤ ``tol``, or a stop (``max_seconds``,
        ``max_outer``, a stall); the best certified point found is returned either way (in the caller's
        units; ``X`` None only when no feasible point was found). ``progress(event)`` after every
        outer step (a :class:`~embgeo.ntp.solvers.outcome.ProgressEvent`: the certified gap; the working set, ρ and
        the factorizations so far).

        Beyond this solver's size: where T cannot be factored (its c × c array beyond the dense budget or half the
        memory left) the Newton directions come from conjugate gradients, and when an inner loop's directions were
        inexact (short of CG_RTOL in CG_MAXITER iterations) and the violation on the previous outer step's pairs grew,
        the solve stops (status ``stalled``, ``reason`` naming the sizes) rather than raise ρ, which only worsens T's
        condition. On synthetic-100k (m = 100,000, r = 128, T over c ≈ 22,000 contexts: 3.7 GiB, beyond the 1.8 GiB
        left under an 8 GiB cap) the conjugate gradients first fell short at ρ = 10⁷ (4 of 30 directions, violation
        0.25 → 0.16); in session 32 the solve then ran to its 900 s limit while the violation grew to 3.6 at
        ρ = 10⁸–10⁹, ending at gap 1.0 all the same; now it stops at the first growth (0.16 → 0.50, 626 s).

        ``max_seconds`` is a wall (issue 38): each outer step's certificate (a tie projection and a full scan) is
        budgeted by the last one measured (``check_seconds`` of the outcome); the Newton steps stop that long
        before the deadline, inside their conjugate gradients too, and begin no factorization expected to end past
        it; no outer step begins whose certificate could not end by the deadline; a certificate expected to end
        more than CERTIFICATE_GRACE · max_seconds past it is skipped (``reason`` says so) unless there is no certified
        point yet. The first outer step always runs (at least one Newton step: its multipliers are the dual bound).

        ``handover``: another solver can take over (``ntp_svm`` "auto" where the interior point fits), so a solve with
        no feasible point stops at ρ ≥ HANDOVER_RHO as soon as its violation is at least HANDOVER_FAR or stops halving
        (:attr:`ALMOptions.HANDOVER_RHO`) rather than after NO_POINT_OUTER outer steps at its largest ρ."""
        run = self._begin(X0, dual, max_seconds)
        run.handover = handover
        try:
            for outer in range(1, max_outer + 1):
                if self._outer_step(run, outer, tol, progress):
                    break
        except MemoryError as err:
            self._out_of_memory(run, err)
        return self._finish(run)

    def _begin(self, X0: np.ndarray | None, dual: tuple | None, max_seconds: float | None) -> _Run:
        """The solve's state at its start: the starting point (:meth:`start`), and a separating start (e.g. a trained
        decoder) certified as it is; the first certificate's cost is measured on it."""
        begun = time.perf_counter()
        deadline = None if max_seconds is None else begun + max_seconds
        grace = 0.0 if max_seconds is None else self.opt.CERTIFICATE_GRACE * max_seconds
        st = self.start(X0, dual)
        # the start's tie projection and full scan are what a certificate costs (its first tie also builds the
        # projection's system: an overestimate, for the first outer step only)
        cert_cost = time.perf_counter() - begun
        best = SVMOutcome(Status.MAX_ITER, mode="augmented Lagrangian")
        if X0 is not None or dual is not None:
            tic = time.perf_counter()
            Xf, tf, _, _ = self.feasible_point(st.X)
            cert_cost = time.perf_counter() - tic
            if Xf is not None:
                best.X, best.t, best.primal = Xf, tf, 0.5 * self._norm2(Xf)
        opt = self.opt
        late = {"below": 1.0 + opt.SLACK, "top": opt.ADD_PER_CONTEXT,
                "every_below": 1.0 if opt.ADD_EVERY_VIOLATED else -np.inf}
        # the scan for violated pairs far from feasibility is measured when it runs; ρ's cap is lowered where the
        # Newton directions stop being descent directions
        return _Run(st, best, deadline, grace, cert_cost, scan_cost=cert_cost, late=late, rho_cap=opt.RHO_MAX)

    def _outer_step(self, run: _Run, outer: int, tol: float, progress) -> bool:
        """One outer step: the inner Newton loop, the dual bound, the certificate, the stop tests, the working set's
        growth and the penalty's update. True when the solve stops (``run.best.status`` says why)."""
        st, best = run.st, run.best
        xnorm = np.sqrt(self._norm2(st.X)) + 1.0
        if run.gtol is None:
            run.gtol = 1e-2 * xnorm
        inexact_before = self.inexact_solves
        if not self._inner_step(run):
            return False
        # an inner loop that ran out of Newton steps short of its tolerance: the next outer step goes on minimising
        # the same φ, its multipliers and ρ kept (UNCONVERGED_HOLDS; not at the first, whose multipliers start the dual)
        run.hold = self.opt.UNCONVERGED_HOLDS and self._unconverged and outer > 1
        violation, same = self._dual_bound(run)
        if run.deadline is not None and best.X is not None and \
                time.perf_counter() + run.cert_cost > run.deadline + run.grace:
            best.status = Status.TIME_LIMIT
            best.reason = (f"the time limit came before the certificate of outer step {outer} (a tie "
                           f"projection and a full scan, about {run.cert_cost:.2g} s): the primal bound is that "
                           "of an earlier outer step")
            return True
        # once the iterate is nearly feasible, the pairs that join W come from the same full scan (selected
        # only where it was so at the previous step: far from feasible, nearly every pair is below 1)
        select = run.late if run.gamma > 0.5 else {}
        Xf, tf, scan = self._certify(run, select)
        best.rounds, best.working_set = outer, len(st.wg)
        run.history.append(best.gap)
        run.violations.append(violation)
        if progress is not None:
            progress(ProgressEvent("alm", outer, best.gap, {
                "working_set": len(st.wg), "rounds": outer, "rho": st.rho, "factorizations": self.factorizations,
                "violation": violation, "cg_solves": self.cg_solves, "inexact_solves": self.inexact_solves}))
        if self._stops(run, tol, same, inexact_before):
            return True
        self._grow_working_set(run, scan, Xf, tf, select)
        self._update_penalty(run, violation, same, inexact_before, xnorm)
        return False

    def _inner_step(self, run: _Run) -> bool:
        """The inner Newton loop at this ρ; False (state and ρ rolled back, ρ capped below for the rest of the solve)
        when it found no descent direction above the first ρ (T's factor too inaccurate)."""
        st = run.st
        saved = (st.X, st.t, st.nu, st.mu)  # the inner loop makes new arrays; these stay as they are
        run.best.iterations += self._inner(st, run.gtol, None if run.deadline is None else run.deadline - run.cert_cost)
        if self._stuck and st.rho > self.opt.RHO0:
            st.X, st.t, st.nu, st.mu = saved
            st.a, st.rho = None, st.rho / self.opt.RHO_UP
            run.rho_cap = st.rho
            return False
        return True

    def _dual_bound(self, run: _Run) -> tuple[float, float]:
        """The multipliers' dual value kept when it improves the lower bound (valid whatever the primal point: kept
        before the certificate); returns the violation on the working set and on the previous outer step's pairs."""
        st, best = run.st, run.best
        held = (st.nu, st.mu)
        aS, aW, st.nu, st.mu = self._weights(st, st.X, st.t, st.a)
        violation = _violation(aS, aW)
        # the violation on the pairs of the previous outer step: S and W as it was then (~fresh; W only grows)
        same = _violation(aS, aW[~st.fresh])
        dual_value, nu_bal, dual_scale = self.dual_point(st)
        if dual_value > best.dual:
            best.dual = dual_value
            run.best_dual = (np.concatenate([self.sg, st.wg]), np.concatenate([self.sj, st.wj]),
                             -dual_scale * np.concatenate([nu_bal, st.mu]))
        if run.hold:  # the estimates served the bound (any multipliers do); the update waits (UNCONVERGED_HOLDS)
            st.nu, st.mu = held
        return violation, same

    def _certify(self, run: _Run, select: dict):
        """The iterate tied and scaled to margin 1 (:meth:`feasible_point`: a tie projection and a full scan, its cost
        measured for the deadline), kept when its primal is the best yet; returns (X_f, t_f, the scan)."""
        tic = time.perf_counter()
        Xf, tf, run.gamma, scan = self.feasible_point(run.st.X, **select)
        run.cert_cost = time.perf_counter() - tic
        if Xf is not None:
            primal = 0.5 * self._norm2(Xf)
            if primal < run.best.primal:
                run.best.X, run.best.t, run.best.primal = Xf, tf, primal
        return Xf, tf, scan

    def _stops(self, run: _Run, tol: float, same: float, inexact_before: int) -> bool:
        """The stop tests after a certificate: optimal (gap ≤ ``tol``), no time for the next outer step, stalled at
        the largest ρ allowed, or beyond this solver's size (see :meth:`solve`); ``run.best.status`` says which."""
        st, best, opt = run.st, run.best, self.opt
        if best.gap <= tol:
            best.status = Status.OPTIMAL
            return True
        # the next outer step: its inner loop, the scan for violated pairs far from feasibility and its
        # certificate; none begins whose certificate could not end by the deadline
        if run.deadline is not None and (time.perf_counter() + run.cert_cost
                                         + (run.scan_cost if run.gamma <= 0.5 else 0.0) > run.deadline):
            best.status = Status.TIME_LIMIT
            return True
        if st.rho < run.rho_cap:
            run.at_max = len(run.history)  # the outer steps from here on are the ones at the largest ρ allowed
        if _stalled(run.history[run.at_max:], opt.STALL_OUTER, run.violations[run.at_max:], opt.NO_POINT_OUTER):
            best.status = Status.STALLED
            if best.X is None:
                best.reason = (f"no feasible point, its violation at no new low over {opt.NO_POINT_OUTER} outer "
                               f"steps at the largest penalty allowed (ρ = {st.rho:.2g})")
            return True
        if run.handover and run.at_handover is None and st.rho >= opt.HANDOVER_RHO:
            run.at_handover = len(run.violations) - 1
        why = (_no_point_progress(run.violations[run.at_handover:], opt.HANDOVER_OUTER, opt.HANDOVER_FAR)
               if run.handover and best.X is None and run.at_handover is not None else None)
        if why is not None:
            best.status = Status.STALLED
            best.reason = f"no feasible point at ρ ≥ {opt.HANDOVER_RHO:.2g}, its violation {why} (handed over)"
            return True
        if self.inexact_solves > inexact_before and same > run.prev_violation:
            # T could not be factored and its conjugate gradients no longer converge at this ρ, and the
            # violation grew: the remedy, a larger ρ, only worsens T's condition (see the docstring)
            best.status = Status.STALLED
            best.reason = self._beyond_size(st, self.inexact_solves - inexact_before, run.prev_violation, same)
            return True
        return False

    def _grow_working_set(self, run: _Run, scan, Xf, tf, select: dict) -> None:
        """The pairs outside W that the iterate violates, or nearly once it is close to feasible: then those of the
        tied iterate, which the certificate's scan listed (one full pass per outer step, not two; on paper-cs,
        m = 10,833, the second pass cost 3.8 of 32 s)."""
        st = run.st
        if run.gamma <= 0.5:  # far from feasible: the iterate's violated pairs
            tic = time.perf_counter()
            scan = scan_off_support(st.X, st.t, self.K, self.support_csc, below=1.0, top=self.opt.ADD_PER_CONTEXT)
            run.scan_cost = time.perf_counter() - tic
        elif not select:  # nearly feasible for the first time: the tied iterate's pairs
            scan = scan_off_support(Xf * run.gamma, tf * run.gamma, self.K, self.support_csc, **run.late)
        # else the certifying scan selected them already
        g, j = scan.groups, scan.contexts
        tight = np.concatenate([self.sg, st.wg[st.mu > 0], g])  # the pairs the next Newton systems will hold
        if len(g) and not self._fits(tight):
            # nearly every pair active: the Newton systems cannot hold them (at gpt2-2048 of bench_ntp_scale, 4.5
            # million of 10.8 million pairs violated at once, 23 GiB of blocks). Growing the working set by each
            # context's smallest margins instead ran its whole 1200 s to a gap of 0.15 there (2026-11-29), where the
            # dual, whose regime this is, reached 6.4e-11 in 366 s: stop, and the caller turns to the dual
            need = newton_bytes(tight, self.G, self.K.shape[1], self.opt.HEAVY_ROWS_BYTES)
            raise NewtonTooLarge(
                f"NTP-SVM (augmented Lagrangian): nearly every pair active at m = {self.m} contexts ({self.G} token "
                f"groups, rank {self.K.shape[1]}): the {len(g)} pairs its iterate violates would make Newton systems "
                f"of {need / 2**30:.1f} GiB, more than the {_room() / 2**30:.1f} GiB they may take", dense=True)
        self._join(st, g, j)

    def _fits(self, g: np.ndarray) -> bool:
        """Whether a Newton system over pairs of groups ``g``, all tight, fits the room (:func:`newton_bytes`)."""
        return newton_bytes(g, self.G, self.K.shape[1], self.opt.HEAVY_ROWS_BYTES) <= _room()

    def _update_penalty(self, run: _Run, violation: float, same: float, inexact_before: int, xnorm: float) -> None:
        """ρ grows when the violation did not fall twofold on the same pairs: those of the previous outer step
        (``same``). Pairs that joined W since then violated and are not a failure of the penalty: with them in the
        comparison, every large addition raised ρ, and on the paper-like instance ρ ran up to RHO_MAX, where the
        Newton steps thrash (see DECREASE). The inner tolerance then halves at least: with a tolerance tied to the
        violation alone, an inexact iterate could hold the violation up forever."""
        st, opt = run.st, self.opt
        if run.hold:
            return
        # (the rise test first: the hold's pass over the joining pairs only where ρ would rise)
        if same > (opt.CG_DECREASE if self._cheap_rise(st, inexact_before) else opt.DECREASE) * run.prev_violation \
                and not self._incomplete(st, violation):
            st.rho = min(st.rho * opt.RHO_UP, run.rho_cap)
        run.prev_violation = violation
        run.gtol = max(min(0.5 * run.gtol, opt.GTOL_FACTOR * violation * xnorm), 1e-13 * xnorm)

    def _incomplete(self, st: _State, violation: float) -> bool:
        """Whether the pairs that just joined W (at least HOLD_GROWTH of it) are violated by the iterate more than
        HOLD_OUTSIDE times W's own violation: the working set lacked pairs that bind, so ρ waits for them. Measured on
        the pairs that joined, not on the certificate's γ: the tie projection can lower margins where the ties are
        badly conditioned (planted(600, 40, 8, seed=2): every pair in W, γ ≈ 0.2 against a violation of 0.02)."""
        joined = int(np.count_nonzero(st.fresh))
        if joined == 0 or joined < self.opt.HOLD_GROWTH * len(st.fresh) or not math.isfinite(self.opt.HOLD_OUTSIDE):
            return False
        return float(np.max(self._a_on(st.X, st.t, st, st.fresh))) + 1.0 > self.opt.HOLD_OUTSIDE * violation

    def _out_of_memory(self, run: _Run, err: MemoryError | None = None) -> None:
        """A Newton system or a working set larger than the memory left (e.g. m = 100,000 contexts under a cap): the
        best certified point so far is the answer, with its gap (status STALLED: the caller reports it as
        optimal_inaccurate); without one there is nothing to return (TooLargeError)."""
        best, st = run.best, run.st
        self._cache = self._factored = None
        self._blocks = BlockCache()
        dense = isinstance(err, NewtonTooLarge) and err.dense
        if best.X is None and not dense:  # (the dense case goes to the dual, which needs no point of this solver's)
            raise TooLargeError(f"NTP-SVM (augmented Lagrangian): out of memory after {best.rounds} outer steps "
                                f"with {len(st.wg)} off-support pairs in the working set ({self.G} token groups, "
                                f"m = {self.m} contexts, rank {self.K.shape[1]}), before any feasible point; "
                                "its Newton systems do not fit the memory left to the process") from None
        best.status = Status.STALLED
        if isinstance(err, NewtonTooLarge):
            best.reason, best.dense_active = str(err), err.dense
        if run.best_dual is None:  # stopped before the first outer step: the zero multipliers, dual value 0
            best.dual = max(best.dual, 0.0)
            run.best_dual = (self.sg, self.sj, np.zeros(len(self.sg)))

    def _finish(self, run: _Run) -> SVMOutcome:
        """The outcome in the caller's units; stopped by the time before any certified step, the start (if any) with
        the zero multipliers' dual bound."""
        best = run.best
        if best.status == Status.TIME_LIMIT:
            if best.X is None and self._start_point is not None:
                best.X, best.t = self._start_point
                best.primal = 0.5 * self._norm2(best.X)
            if best.X is not None and run.best_dual is None:
                best.dual = max(best.dual, 0.0)
                run.best_dual = (self.sg, self.sj, np.zeros(len(self.sg)))
        best.factorizations = self.factorizations
        best.check_seconds = run.cert_cost
        return self._in_caller_units(best, run.best_dual)

    def _in_caller_units(self, out: SVMOutcome, dual: tuple | None) -> SVMOutcome:
        s2 = self.scale ** 2
        if out.X is not None:
            out.X = out.X / self.scale
            out.primal /= s2
        out.dual /= s2
        if dual is not None:
            out.dual_point = (dual[0], dual[1], dual[2] / s2)
        return out
