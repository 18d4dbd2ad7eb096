"""Benchmark: embgeo's max-margin token selection vs a generic cvxpy/Clarabel reference, same run.

Problem (12) of the attention paper (digest ``/work/shared/notes/attention-trained-embeddings.md``
§3.3, §3.5), solved by ``embgeo.attention.theory.max_margin_selection``:

    min ‖p‖₂  s.t.  (E_s − E_t)ᵀp ≥ 1   for every sequence X_i, s ∈ selected[i], t ∈ X_i \\ selected[i],
                    (E_s − E_s')ᵀp = 0  for s < s' both in selected[i].

Reference: cvxpy + Clarabel on the *raw* constraint set (one row per sequence and pair, no
deduplication), minimize sum_squares(p) s.t. A_in p ≥ 1, A_eq p == 0, where A_in (rows E_s − E_t)
and A_eq (rows E_s − E_s') are scipy sparse matrices built vectorised (the (sequence, s, t) triples
come from index arithmetic on the sorted rows of X; no Python loop over scalar constraints).

Instances ("real-review-like"; token ids are frequency ranks):

* ``zipf``: X (n, T) drawn from a Zipf law P(s) ∝ 1/(s+1) over V tokens, balanced labels y, and a
  class tilt P(s|y) ∝ P(s)(1 + y b_s) with b_s ~ U(−0.9, 0.9) for 20% of the tokens outside the
  max(10, V//64) most frequent ones ("stop words", b = 0). α = signed frequency (eq. 3) of X, y.
  E = E⁰ + c α v with E⁰ ~ 𝒩(0, I/d), v a random unit vector and c = 1/max|α| (the shape of one GD
  step, Lemma 4.1: E¹_s ≈ E⁰_s + (η0/2) α_s v). selected[i] = the token(s) of X_i with the largest
  |α_s| (exact ties of the integer counts |pos − neg| give two selected tokens in a few sequences).
* ``zipf-ties``: the same data, but |α| is first rounded down to a geometric grid of ratio 1 + ρ,
  ρ = 0.2, and selected[i] = every token of X_i in the top cell ("equally important" tokens), so
  that many sequences carry tie equalities. (A grid keeps "tied" transitive; a rule such as
  |α_s| ≥ (1 − ρ) max_{X_i}|α| is not, and makes (12) infeasible through direct conflicts: s ~ s'
  tied in one sequence, s > s' in another.)
* ``assumption1``: ``embgeo.attention.data.assumption1_data`` (one completely positive/negative
  token per sequence, the rest irrelevant), E = E¹ after one full-batch GD step
  (``embgeo.attention.train.one_step`` on ``OneLayerAttention``), selected[i] = its important token.

Fig. 2 instances (``--fig2 [n ...]``, default n = 100, 1000, 10000; the size of the issue that
asked for the structured solver): ``embgeo.attention.data.synthetic_levels(n, seed=K)`` with the
paper's Figure-2 defaults (|S| = V = 2048 tokens: 964 irrelevant + 8 levels of 4 + 2^k tokens per
class, T = 256, δ̃ = 0.05, corrected reading), d = 2048, and E = E⁰ + c·α·v exactly as in ``zipf``:
rng = default_rng(K), E⁰ = rng.normal(size=(V, d))/√d, then v = rng.normal(size=d)/‖·‖, α = eq. (3)
of (X, y), c = 1/max|α|. The selection of sequence X_i with label y_i, over its distinct tokens u
with signed levels ℓ_u (0 irrelevant, ±k for 𝒮_k^{±1}):

* ``own`` (the issue's instance): the token of the highest level of the sequence's own class,
  argmax ℓ_u·y_i, the smallest id among equals. n = 100 gives 21,539 distinct pairs (the issue:
  "21k"), n = 1000 142,257 (issue: 138k), n = 10,000 393,362 (issue: 386k; the issue's seed is not
  known, seeds 0–3 give 139k–142k and 386k–393k). From n = 1000 on the class graph has a cycle: a
  top token of the other class occurs in a sequence (δ_8 = 0.02) and is selected elsewhere, so
  s > t and t > s are both asked — infeasible, with an exact Farkas vector.
* ``own-ties``: every token of that own-class top level (ties) — infeasible for the same reason
  at every n here (a cycle through the tie classes).
* ``abs``: the token of the largest |ℓ_u|, smallest id among equals: a fixed total order of the
  vocabulary, so the class graph is acyclic and (E having full row rank) (12) is feasible at
  every n — the instances that exercise the interior point at full size.
* ``abs-ties``: every token of the largest |ℓ_u| (feasible: classes are whole levels).

Each Fig. 2 solve runs in its own subprocess (same thread settings); the child builds the
instance, reads its peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) before and after the
solve, and reports both: "peak" is the whole process (python, numpy, the instance: E is 32 MB, X
20 MB at n = 10,000), "solve" the increase during the solve. The previous solver (dense LDP by NNLS,
``reference/attention_selection.py``) runs side by side for n ≤ ``--fig2-old-max`` (default
100: at 1000 the issue saw it killed at 600 s / 11 GB). Certificates: for "optimal" the KKT
numbers recomputed from E (min margin − 1, relative duality gap, stationarity, complementarity);
for "infeasible" the Farkas residual ‖P⊥ Σ w_j (E_s − E_t)‖ and how it was found.

Times are wall-clock ``time.perf_counter``: ours is the best of 3 calls, the reference is run once
and includes building A_in/A_eq and the cvxpy problem (the Clarabel-only time is in brackets).
Accuracy: ‖p_ours − p_ref‖/‖p_ref‖, both norms, and the reference's minimum margin min A_in p_ref
(should be 1) and tie residual max |A_eq p_ref|. A reference that fails or reports infeasible is
printed, not raised; so is a SolverError of ours.

Threads: ``--threads N`` (default 1) is written to OMP/OPENBLAS/MKL/... environment variables
*before* numpy is imported (that is why argument parsing happens at the top of this file), is also
applied with threadpoolctl when installed, and is passed to Clarabel as ``max_threads``.

Run (from the repository root, with the project's venv):

    python benchmarks/bench_attention_selection.py [--large] [--sizes n,T,V,d ...] [--threads N] [--seed K]

Default: zipf (1000, 64, 1000, 128), zipf (2000, 64, 2000, 256), zipf-ties (1000, 64, 1000, 128) and
assumption1 (n = 1000, T = 64, V = 1000 + 20, d = 128) with the reference; zipf (4000, 128, 4000, 256)
with ours only unless ``--large`` (the reference then took ~16 min and ~16 GB RSS on a loaded 2-core
machine). ``--sizes`` replaces the default list by zipf instances of the given sizes and runs the
reference on each.

    python benchmarks/bench_attention_selection.py --fig2                 # n = 100 (old solver too), 1000, 10000
    python benchmarks/bench_attention_selection.py --fig2 100 1000 --fig2-rules abs abs-ties
"""

import argparse
import os
import sys

from bench_threads import blas_threads, limit_threads, set_thread_env

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root: reference/


def _size(text: str) -> tuple[int, int, int, int]:
    try:
        n, T, V, d = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected n,T,V,d (four integers), got {text!r}") from None
    if min(n, T, V, d) < 1 or V < 2 or T < 2:
        raise argparse.ArgumentTypeError(f"need positive sizes with T, V >= 2, got {text!r}")
    return n, T, V, d


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--large", action="store_true",
                   help="also run the slow reference at (4000, 128, 4000, 256); ~16 min, ~16 GB")
    p.add_argument("--sizes", type=_size, nargs="+", metavar="n,T,V,d",
                   help="custom zipf sizes (replace the defaults; reference always runs)")
    p.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP/Clarabel threads (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the instances (default 0)")
    p.add_argument("--fig2", type=int, nargs="*", metavar="n",
                   help="run only the Fig. 2 instances at these n (default 100 1000 10000)")
    p.add_argument("--fig2-rules", nargs="+", default=list(FIG2_RULES), choices=FIG2_RULES,
                   help="selection rules of the Fig. 2 instances (default: all)")
    p.add_argument("--fig2-old-max", type=int, default=100,
                   help="run the previous NNLS solver side by side for n up to this (default 100)")
    p.add_argument("--fig2-timeout", type=float, default=1800.0, help="seconds per Fig. 2 solve (default 1800)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: one Fig. 2 solve, JSON on stdout
    return p.parse_args()


FIG2_RULES = ("own", "own-ties", "abs", "abs-ties")
ARGS = _parse_args()
set_thread_env(ARGS.threads)  # before numpy is imported

import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import clarabel  # noqa: E402
import cvxpy as cp  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from embgeo.attention.data import assumption1_data, signed_frequency, synthetic_levels  # noqa: E402
from embgeo.attention.theory import max_margin_selection  # noqa: E402
from embgeo.errors import SolverError  # noqa: E402

# (kind, size, reference by default); assumption1's size is (n = 2·n_pairs, T, n_irrelevant, d).
DEFAULT_CASES = [("zipf", (1000, 64, 1000, 128), True), ("zipf", (2000, 64, 2000, 256), True),
                 ("zipf-ties", (1000, 64, 1000, 128), True), ("assumption1", (1000, 64, 1000, 128), True),
                 ("zipf", (4000, 128, 4000, 256), False)]
REPEATS = 3
TIE_RHO = 0.2           # zipf-ties: |α| rounded down to a geometric grid of ratio 1 + TIE_RHO
POLAR_SHARE = 0.2       # zipf: share of non-stop-word tokens with a class tilt
A1_IMPORTANT = 10       # assumption1: completely positive (and as many negative) tokens


# -- threads and header ------------------------------------------------------------------------

def header() -> None:
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print("Max-margin token selection (12): embgeo (structured interior point + exact finish) vs cvxpy+Clarabel (raw)")
    print(f"python {platform.python_version()}  numpy {np.__version__}  scipy {scipy.__version__}  "
          f"cvxpy {cp.__version__}  clarabel {clarabel.__version__}  nproc {nproc}")
    how = "env vars before numpy import + threadpoolctl"
    print(f"threads: {ARGS.threads} ({how}; Clarabel max_threads={ARGS.threads})")
    print(f"effective BLAS threads: {blas_threads()}")
    print(f"timing: perf_counter, ours best of {REPEATS}, reference once (incl. building A and the "
          f"cvxpy problem; [Clarabel solve only]); seed {ARGS.seed}")


# -- instances -----------------------------------------------------------------------------------

def zipf_instance(n: int, T: int, V: int, d: int, seed: int, ties: bool):
    """(E, X, selected, note) of the ``zipf`` / ``zipf-ties`` instances (module docstring)."""
    rng = np.random.default_rng(seed)
    freq = 1.0 / np.arange(1, V + 1)
    tilt = np.where(rng.random(V) < POLAR_SHARE, rng.uniform(-0.9, 0.9, size=V), 0.0)
    tilt[:max(10, V // 64)] = 0.0
    y = rng.permutation(np.repeat([1, -1], [n - n // 2, n // 2]))
    X = np.empty((n, T), dtype=np.int64)
    for label in (1, -1):
        law = freq * (1 + label * tilt)
        rows = np.flatnonzero(y == label)
        X[rows] = rng.choice(V, size=(rows.size, T), p=law / law.sum())
    alpha = signed_frequency(X, y, V)
    E0 = rng.normal(size=(V, d)) / np.sqrt(d)
    v = rng.normal(size=d)
    v /= np.linalg.norm(v)
    c = 1.0 / np.abs(alpha).max()
    E = E0 + c * alpha[:, None] * v[None, :]
    if ties:  # cell of |α| on a geometric grid (tokens that never occur get the lowest cell)
        mag = np.abs(alpha)
        cell = np.full(V, np.iinfo(np.int64).min)
        cell[mag > 0] = np.floor(np.log(mag[mag > 0]) / np.log1p(TIE_RHO)).astype(np.int64)
        score = cell[X]
        keep = score == score.max(axis=1, keepdims=True)
    else:
        score = np.abs(np.rint(alpha * X.size)).astype(np.int64)[X]  # |pos − neg|, exact integers
        keep = score == score.max(axis=1, keepdims=True)
    selected = [np.unique(x[k]) for x, k in zip(X, keep, strict=True)]
    return E, X, selected, f"one-step shift c={c:.3g}, max|α|={np.abs(alpha).max():.2e}"


def assumption1_instance(n: int, T: int, n_irrelevant: int, d: int, seed: int):
    """(E, X, selected, note): Assumption-1 data, E = E¹ after one GD step, selected = important token."""
    import torch

    from embgeo.attention.model import OneLayerAttention
    from embgeo.attention.train import one_step

    torch.set_num_threads(ARGS.threads)
    n_pairs = max(n // 2, A1_IMPORTANT)
    data = assumption1_data(n_pairs, T, seed=seed, n_irrelevant=n_irrelevant, n_positive=A1_IMPORTANT,
                            n_negative=A1_IMPORTANT)
    V = n_irrelevant + 2 * A1_IMPORTANT
    alpha = signed_frequency(data.X, data.y, V)
    eta0 = 2.0 / np.abs(alpha).max()  # (η0/2)·max|α| = 1 = typical ‖E⁰_s‖
    model = OneLayerAttention(V, d, seed=seed)
    one_step(model, data.X, data.y, eta0)
    E = model.E.detach().numpy().copy()
    important = np.isin(data.X, data.important)
    selected = [np.unique(x[k]) for x, k in zip(data.X, important, strict=True)]
    return E, data.X, selected, f"V={V}, {2 * A1_IMPORTANT} important tokens, η0={eta0:.3g}"


# -- reference: raw constraints, cvxpy + Clarabel ------------------------------------------------

def _pair_within(seq_a: np.ndarray, seq_b: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """All index pairs (i, j) with seq_a[i] == seq_b[j]; seq_a, seq_b sorted (non-decreasing)."""
    cnt_b = np.bincount(seq_b, minlength=n)
    start_b = np.concatenate([[0], np.cumsum(cnt_b)[:-1]])
    rep = cnt_b[seq_a]
    i = np.repeat(np.arange(seq_a.size), rep)
    offset = np.arange(i.size) - np.repeat(np.cumsum(rep) - rep, rep)
    return i, start_b[seq_a][i] + offset


def raw_constraints(E: np.ndarray, X: np.ndarray, selected) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """A_in (rows E_s − E_t, one per sequence and pair) and A_eq (rows E_s − E_s', s < s'), not deduplicated."""
    n, V = X.shape[0], E.shape[0]
    Xs = np.sort(X, axis=1)
    first = np.ones(Xs.shape, dtype=bool)
    first[:, 1:] = Xs[:, 1:] != Xs[:, :-1]
    seq, col = np.nonzero(first)  # distinct tokens of each sequence, grouped by sequence
    tok = Xs[seq, col]
    sizes = np.fromiter((len(S) for S in selected), dtype=np.int64, count=n)
    sel_codes = np.repeat(np.arange(n), sizes) * V + np.concatenate([np.asarray(S, dtype=np.int64) for S in selected])
    is_sel = np.isin(seq * V + tok, sel_codes)
    s_seq, s_tok = seq[is_sel], tok[is_sel]
    r_seq, r_tok = seq[~is_sel], tok[~is_sel]
    i, j = _pair_within(s_seq, r_seq, n)
    A_in = sp.csr_matrix(E[s_tok[i]] - E[r_tok[j]])
    i, j = _pair_within(s_seq, s_seq, n)
    keep = s_tok[i] < s_tok[j]
    A_eq = sp.csr_matrix(E[s_tok[i[keep]]] - E[s_tok[j[keep]]], shape=(int(keep.sum()), E.shape[1]))
    return A_in, A_eq


def reference(E, X, selected):
    """(p or None, status, Clarabel time, A_in, A_eq) — never raises on solver trouble."""
    A_in, A_eq = raw_constraints(E, X, selected)
    p = cp.Variable(E.shape[1])
    cons = [A_in @ p >= 1]
    if A_eq.shape[0]:
        cons.append(A_eq @ p == 0)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(p)), cons)
    try:
        prob.solve(solver=cp.CLARABEL, max_threads=ARGS.threads)
    except (cp.SolverError, MemoryError) as exc:
        return None, f"failed: {type(exc).__name__}: {exc}", None, A_in, A_eq
    solve = prob.solver_stats.solve_time if prob.solver_stats is not None else None
    ok = prob.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) and p.value is not None
    return (p.value if ok else None), prob.status, solve, A_in, A_eq


# -- driver --------------------------------------------------------------------------------------

def ours(E, X, selected):
    try:
        return max_margin_selection(E, X, selected)
    except SolverError as exc:
        return exc


def best_of(fn, *args, repeats=REPEATS):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - t0)
    return out, min(times)


def run_case(kind: str, size, with_reference: bool) -> dict:
    """Run one instance, print its block, return its summary row."""
    n, T, V, d = size
    if kind == "assumption1":
        E, X, selected, note = assumption1_instance(n, T, V, d, ARGS.seed)
        n, V = X.shape[0], E.shape[0]
    else:
        E, X, selected, note = zipf_instance(n, T, V, d, ARGS.seed, ties=kind == "zipf-ties")
    sizes = np.array([len(S) for S in selected])
    n_eq_raw = int(np.sum(sizes * (sizes - 1) // 2))
    row = dict(kind=kind, n=n, T=T, V=V, d=d, raw="?", rows="?", ours="-", ref="-", solve="-", ratio="-",
               rel="-", n_ours="-", n_ref="-", ref_margin="-")
    print(f"\n== {kind} n={n} T={T} V={V} d={d} ({note})")
    print(f"  selection: {len(np.unique(np.concatenate(selected)))} distinct selected tokens, "
          f"{int(np.sum(sizes > 1))} sequences with ties (max {sizes.max()} selected)")
    res, t_ours = best_of(ours, E, X, selected)
    row["ours"] = f"{t_ours:.3f}"
    if isinstance(res, SolverError):
        print(f"  ours: SolverError: {res}")
        p_ours = None
        row["n_ours"] = "error"
        print(f"  raw constraints: ? ineq + {n_eq_raw} eq")
    else:
        p_ours = res.p if res.status == "optimal" else None
        row.update(raw=f"{res.n_raw}+{n_eq_raw}", rows=str(res.n_rows),
                   n_ours=f"{res.norm:.6g}" if p_ours is not None else res.status)
        print(f"  raw constraints: {res.n_raw} ineq + {n_eq_raw} eq; ours: {len(res.pairs)} distinct pairs, "
              f"{len(res.eq_pairs)} distinct tie pairs, n_rows {res.n_rows} after dedup/ties; "
              f"status {res.status}" + (f", gap {res.gap:.1e}" if res.status == "optimal" else ""))
    sys.stdout.flush()
    line = f"  ours {t_ours:.3f} s"
    if not with_reference:
        print(f"{line}; reference skipped (use --large); |p_ours| {row['n_ours']}")
        row["ref"] = "skipped"
        return row
    t0 = time.perf_counter()
    p_ref, status, t_solve, A_in, A_eq = reference(E, X, selected)
    t_ref = time.perf_counter() - t0
    solve = "-" if t_solve is None else f"{t_solve:.2f}"
    row.update(ref=f"{t_ref:.2f}", solve=solve, ratio=f"{t_ref / t_ours:.0f}x")
    print(f"{line}, reference {t_ref:.2f} s [{solve}], ref/ours {t_ref / t_ours:.0f}x; cvxpy status {status}; "
          f"A_in {A_in.shape[0]}x{A_in.shape[1]} ({A_in.nnz} nnz), A_eq {A_eq.shape[0]} rows")
    if not isinstance(res, SolverError) and A_in.shape[0] != res.n_raw:
        print(f"  WARNING: raw inequality counts differ (reference {A_in.shape[0]}, ours n_raw {res.n_raw})")
    if p_ref is None:
        row["n_ref"] = str(status)
        print(f"  reference gave no solution (status {status}); ours: "
              f"{'error' if isinstance(res, SolverError) else res.status}")
        return row
    ref_margin = float((A_in @ p_ref).min()) if A_in.shape[0] else np.inf
    ref_eq = float(np.abs(A_eq @ p_ref).max()) if A_eq.shape[0] else 0.0
    row.update(n_ref=f"{np.linalg.norm(p_ref):.6g}", ref_margin=f"{ref_margin - 1:+.1e}")
    acc = (f"  |p_ref| {np.linalg.norm(p_ref):.8g}, ref min margin - 1 = {ref_margin - 1:+.1e}, "
           f"ref max|A_eq p| {ref_eq:.1e}")
    if p_ours is not None:
        rel = np.linalg.norm(p_ours - p_ref) / np.linalg.norm(p_ref)
        row["rel"] = f"{rel:.1e}"
        ours_margin = float((A_in @ p_ours).min()) if A_in.shape[0] else np.inf
        ours_eq = float(np.abs(A_eq @ p_ours).max()) if A_eq.shape[0] else 0.0
        excess = np.linalg.norm(p_ref) / np.linalg.norm(p_ours) - 1
        print(f"  rel. diff |p_ours - p_ref|/|p_ref| {rel:.2e}; |p_ours| {np.linalg.norm(p_ours):.8g}, "
              f"|p_ref|/|p_ours| - 1 = {excess:+.1e}, "
              f"ours min margin - 1 = {ours_margin - 1:+.1e}, ours max|A_eq p| {ours_eq:.1e}")
    print(acc)
    sys.stdout.flush()
    return row


COLUMNS = [("kind", "kind"), ("n", "n"), ("T", "T"), ("V", "V"), ("d", "d"), ("raw", "raw in+eq"),
           ("rows", "n_rows"), ("ours", "ours [s]"), ("ref", "ref [s]"), ("solve", "[Clarabel]"),
           ("ratio", "ref/ours"), ("rel", "rel diff"), ("n_ours", "|p_ours|"), ("n_ref", "|p_ref|"),
           ("ref_margin", "ref min-1")]


def summary(rows: list[dict]) -> None:
    width = {k: max(len(title), *(len(str(r[k])) for r in rows)) for k, title in COLUMNS}
    print("\nsummary")
    print("  " + "  ".join(f"{title:>{width[k]}}" for k, title in COLUMNS))
    for r in rows:
        print("  " + "  ".join(f"{r[k]!s:>{width[k]}}" for k, _ in COLUMNS))


# -- Fig. 2 instances (issue size), one subprocess per solve ---------------------------------------

FIG2_D = 2048
HERE = Path(__file__).resolve().parent


def fig2_instance(n: int, rule: str, seed: int):
    """(E, X, selected) of the Fig. 2 instances (module docstring): K-level data, E = E⁰ + c·α·v."""
    data = synthetic_levels(n, seed=seed)
    V = len(data.levels)
    rng = np.random.default_rng(seed)
    alpha = signed_frequency(data.X, data.y, V)
    E = rng.normal(size=(V, FIG2_D)) / np.sqrt(FIG2_D)
    v = rng.normal(size=FIG2_D)
    v /= np.linalg.norm(v)
    E += (1.0 / np.abs(alpha).max()) * alpha[:, None] * v[None, :]
    selected = []
    for x, y in zip(data.X, data.y, strict=True):
        u = np.unique(x)
        score = data.levels[u] * y if rule.startswith("own") else np.abs(data.levels[u])
        top = u[score == score.max()]  # sorted ids: top[0] is the smallest
        selected.append(top if rule.endswith("ties") else top[:1])
    return E, data.X, selected


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def fig2_child(spec: dict) -> None:
    """One solve (spec: n, rule, seed, solver "new"/"old", save) → a JSON line on stdout."""
    limit_threads(ARGS.threads)
    E, X, selected = fig2_instance(spec["n"], spec["rule"], spec["seed"])
    if spec["solver"] == "old":
        from reference.attention_selection import reference_max_margin_selection as solve
    else:
        solve = max_margin_selection
    rss0 = _rss_gb()
    t0 = time.perf_counter()
    try:
        res = solve(E, X, selected)
    except SolverError as exc:
        print("RESULT " + json.dumps({"status": f"SolverError: {exc}", "time": time.perf_counter() - t0}))
        return
    out = {"time": time.perf_counter() - t0, "rss0": rss0, "rss": _rss_gb(), "status": res.status,
           "norm": res.norm, "pairs": len(res.pairs), "n_raw": res.n_raw, "eq_pairs": len(res.eq_pairs),
           "rows": res.n_rows, "method": res.method or "dense LDP by NNLS", "farkas_residual": res.farkas_residual}
    if spec["solver"] == "new":  # fields the previous solver does not fill
        out.update(classes=res.n_classes, rank=res.rank, iterations=res.iterations)
    if res.status == "optimal":
        out.update(min_margin=res.min_margin, gap=res.gap, stationarity=res.stationarity,
                   complementarity=res.complementarity, eq_residual=res.eq_residual, active=len(res.active))
        if spec.get("save"):
            np.save(spec["save"], res.p)
    print("RESULT " + json.dumps(out))


def fig2_run(spec: dict) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--threads", str(ARGS.threads), "--child", json.dumps(spec)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=ARGS.fig2_timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"killed after {ARGS.fig2_timeout:.0f} s", "time": time.perf_counter() - t0}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"status": f"failed (exit {proc.returncode}): {tail}", "time": time.perf_counter() - t0}
    return json.loads(lines[-1][len("RESULT "):])


def _certificate(r: dict) -> str:
    if r.get("status") == "optimal":
        return (f"margin-1 {r['min_margin'] - 1:+.0e} gap {r['gap']:.0e} stat {r['stationarity']:.0e} "
                f"compl {r['complementarity']:.0e}")
    if r.get("status") == "infeasible":
        return f"Farkas residual {r['farkas_residual']:.0e}"
    return "-"


def fig2_main() -> None:
    sizes = ARGS.fig2 or [100, 1000, 10000]
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print("Max-margin token selection (12) on the Fig. 2 data (K-level model, V = 2048, T = 256, d = 2048)")
    print(f"python {platform.python_version()}  numpy {np.__version__}  scipy {scipy.__version__}  "
          f"{platform.processor() or platform.machine()}  nproc {nproc}  threads {ARGS.threads} "
          f"(BLAS: {blas_threads()})  seed {ARGS.seed}")
    print("time: perf_counter of the solve only (one run); peak: ru_maxrss of the solving subprocess "
          "(incl. python, numpy and the instance), +solve: its increase during the solve")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rule in ARGS.fig2_rules:
            for n in sizes:
                solvers = ["new"] + (["old"] if n <= ARGS.fig2_old_max else [])
                found = {}
                for solver in solvers:
                    load = os.getloadavg()[0]
                    save = str(Path(tmp) / f"{rule}-{n}-{solver}.npy")
                    r = fig2_run({"n": n, "rule": rule, "seed": ARGS.seed, "solver": solver, "save": save})
                    found[solver] = (r, save)
                    row = {"rule": rule, "n": n, "solver": "embgeo" if solver == "new" else "old NNLS",
                           "load": f"{load:.1f}", "pairs": r.get("pairs", "-"), "raw": r.get("n_raw", "-"),
                           "rows": r.get("rows", "-"), "classes": r.get("classes", "-"), "it": r.get("iterations", "-"),
                           "time": f"{r['time']:.2f}", "peak": f"{r['rss']:.2f}" if "rss" in r else "-",
                           "solve": f"{r['rss'] - r['rss0']:.2f}" if "rss" in r else "-",
                           "status": r["status"], "norm": f"{r['norm']:.10g}" if "norm" in r else "-",
                           "cert": _certificate(r), "rel": "-"}
                    rows.append(row)
                    print(f"  {rule} n={n} {row['solver']}: {r['status']} in {row['time']} s, peak {row['peak']} GB, "
                          f"{r.get('method', '')}; {row['cert']}")
                    sys.stdout.flush()
                new, old = found["new"], found.get("old")
                if old and new[0].get("status") == old[0].get("status") == "optimal":
                    p_new, p_old = np.load(new[1]), np.load(old[1])
                    rows[-1]["rel"] = f"{np.linalg.norm(p_new - p_old) / np.linalg.norm(p_old):.1e}"
    cols = [("rule", "rule"), ("n", "n"), ("solver", "solver"), ("load", "load"), ("raw", "raw pairs"),
            ("pairs", "pairs"), ("rows", "class pairs"), ("classes", "classes"), ("it", "IPM it"),
            ("time", "time [s]"), ("peak", "peak [GB]"), ("solve", "+solve [GB]"), ("status", "status"),
            ("norm", "|p|"), ("rel", "|p-p_old|/|p_old|"), ("cert", "certificate")]
    width = {k: max(len(t), *(len(str(r[k])) for r in rows)) for k, t in cols}
    print("\nsummary")
    print("  " + "  ".join(f"{t:>{width[k]}}" for k, t in cols))
    for r in rows:
        print("  " + "  ".join(f"{r[k]!s:>{width[k]}}" for k, _ in cols))


def main() -> None:
    if ARGS.child:
        fig2_child(json.loads(ARGS.child))
        return
    limit_threads(ARGS.threads)
    if ARGS.fig2 is not None:
        fig2_main()
        return
    header()
    if ARGS.sizes:
        cases = [("zipf", s, True) for s in ARGS.sizes]
    else:
        cases = [(k, s, ref or ARGS.large) for k, s, ref in DEFAULT_CASES]
    summary([run_case(kind, size, with_reference) for kind, size, with_reference in cases])


if __name__ == "__main__":
    main()
