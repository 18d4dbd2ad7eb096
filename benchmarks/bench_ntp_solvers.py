"""Benchmark: embgeo's structured NTP solvers vs a generic cvxpy/HiGHS reference, same run.

What is compared (digest ``/work/shared/notes/ntp-implicit-bias.md`` §2), on
``embgeo.ntp.synthetic(m, V, d, S, seed=...)`` data:

* W* (Def. 1): ``embgeo.ntp.w_star`` vs cvxpy + Clarabel on vec(W):
  minimize ‖W‖_F² s.t. A_eq vec(W) = b, where the anchor-form rows are
  (e_a - e_z) ⊗ h_j (row-major vec(W)) and b_i = log(p_{j,a}/p_{j,z}), z ∈ S_j \\ {a}.
* NTP-SVM W^mm (Def. 3): ``embgeo.ntp.ntp_svm`` vs cvxpy + Clarabel:
  minimize ‖W‖_F² s.t. A_eq vec(W) = 0, A_in vec(W) ≥ 1 (anchor a vs every v ∉ S_j).
* Separability (Def. 2): ``embgeo.ntp.is_separable`` vs the feasibility LP
  ``scipy.optimize.linprog(method="highs")``: zero objective, A_eq x = 0, A_in x ≥ 1, free x.

A_eq and A_in are built vectorised as scipy sparse matrices (one call to ``cp.vec(W, order="C")``,
no scalar constraints in Python loops). Times are wall-clock ``time.perf_counter``: ours is the
best of 3 calls, the reference is run once and includes building A and the cvxpy problem
(the Clarabel-only time is shown in brackets). Accuracy: relative Frobenius difference
‖W_ours - W_ref‖ / ‖W_ref‖, and agreement of the separability verdicts.

Threads: ``--threads N`` (default 1) is written to OMP/OPENBLAS/MKL/... environment variables
*before* numpy is imported (that is why argument parsing happens at the top of this file), is
also applied with threadpoolctl when that package is installed, and is passed to Clarabel as
``max_threads``. HiGHS via linprog has no thread option (its simplex runs serially). The
effective BLAS thread count is printed in the header.

``--planted [m,V,d,seed ...]`` instead runs W^mm on ``reference.ntp.planted(m, V, d, seed)``: d ≪ m with supports of
one token or two tied exactly, whose margin is tiny next to the embeddings' scale (issue 38: the augmented Lagrangian
stalls there). Sides: ``ntp_svm`` as a user calls it ("auto"), the augmented Lagrangian alone (``method="alm"``,
under ``--alm-seconds``), the interior point alone (``method="ipm"``), each once, against cvxpy + Clarabel on every
constraint, and against Clarabel told the answer's active set (the ties and only the (6b) pairs active at the interior
point's answer, tolerances 1e-10, as ``cvxpy-active`` of ``bench_ntp_learned.py``).

Run (from the repository root, with the project's venv):

    python benchmarks/bench_ntp_solvers.py [--large] [--sizes m,V,d,S ...] [--threads N] [--seed K]
    python benchmarks/bench_ntp_solvers.py --planted [m,V,d,seed ...] [--alm-seconds 60] [--threads N]

Default sizes: (100, 50, 120, 5) and (100, 50, 80, 5) (d < m) with the reference, and
(200, 100, 250, 5) where the reference
(~10 min) only runs with ``--large``. ``--sizes 50,10,60,6 ...`` replaces the default list and runs
the reference on every size given.
"""

import argparse
import os
import sys

from bench_threads import blas_threads, limit_threads, set_thread_env

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root: reference/
from reference.ntp_constraints import reference_constraints


def _four_ints(text: str, names: str) -> tuple[int, int, int, int]:
    try:
        a, b, c, e = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {names} (four integers), got {text!r}") from None
    return a, b, c, e


def _size(text: str) -> tuple[int, int, int, int]:
    m, V, d, S = _four_ints(text, "m,V,d,S")
    if min(m, V, d, S) < 1 or S >= V:
        raise argparse.ArgumentTypeError(f"need positive sizes with S < V, got {text!r}")
    return m, V, d, S


def _planted(text: str) -> tuple[int, int, int, int]:
    m, V, d, seed = _four_ints(text, "m,V,d,seed")
    if min(m, V, d) < 1 or seed < 0:
        raise argparse.ArgumentTypeError(f"need positive sizes and a seed ≥ 0, got {text!r}")
    return m, V, d, seed


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--large", action="store_true", help="also run the slow reference at (200, 100, 250, 5)")
    p.add_argument("--sizes", type=_size, nargs="+", metavar="m,V,d,S",
                   help="custom sizes (replace the defaults; reference always runs)")
    p.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP/Clarabel threads (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of embgeo.ntp.synthetic (default 0)")
    p.add_argument("--planted", type=_planted, nargs="*", metavar="m,V,d,seed",
                   help="W^mm on reference.ntp.planted instances instead (no values: PLANTED_DEFAULT)")
    p.add_argument("--alm-seconds", type=float, default=60.0, help="max_seconds of the ALM-alone side (default 60)")
    return p.parse_args()


ARGS = _parse_args()
set_thread_env(ARGS.threads)  # before numpy is imported

import platform  # noqa: E402
import time  # noqa: E402

import clarabel  # noqa: E402
import cvxpy as cp  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
from scipy.optimize import linprog  # noqa: E402

from embgeo.errors import NotCompatibleError, SolverError  # noqa: E402
from embgeo.ntp import is_separable, ntp_svm, synthetic, w_star  # noqa: E402

# (size, reference by default). d > m sizes are the issue's; (100, 50, 80, 5) has d < m, where
# separability is decided numerically (dual iterations) instead of by Lemma 1's closed form.
DEFAULT_SIZES = [((100, 50, 120, 5), True), ((100, 50, 80, 5), True), ((200, 100, 250, 5), False)]
# --planted: the four seeds of the tests' size, a smaller and two larger draws of the shape
PLANTED_DEFAULT = [(600, 40, 8, 0), (600, 40, 8, 1), (600, 40, 8, 2), (600, 40, 8, 3), (300, 20, 6, 0),
                   (1000, 60, 16, 0), (2000, 100, 12, 0)]
REPEATS = 3


# -- threads and header ------------------------------------------------------------------------

def header() -> None:
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print("NTP solvers: embgeo (structured) vs reference (cvxpy+Clarabel / scipy linprog HiGHS)")
    print(f"python {platform.python_version()}  numpy {np.__version__}  scipy {scipy.__version__}  "
          f"cvxpy {cp.__version__}  clarabel {clarabel.__version__}  nproc {nproc}")
    how = "env vars before numpy import + threadpoolctl"
    print(f"threads: {ARGS.threads} ({how}; Clarabel max_threads={ARGS.threads}; HiGHS serial)")
    print(f"effective BLAS threads: {blas_threads()}")
    ours = "each side once" if ARGS.planted is not None else f"ours best of {REPEATS}"
    print(f"timing: perf_counter, {ours}, reference once (incl. building A and the "
          f"cvxpy problem; [Clarabel solve only]); seed {ARGS.seed}")


# -- reference route on vec(W) -----------------------------------------------------------------

def _clarabel(prob: cp.Problem, settings: dict | None = None) -> float:
    prob.solve(solver=cp.CLARABEL, max_threads=ARGS.threads, **(settings or {}))
    return prob.solver_stats.solve_time or float("nan")


def ref_w_star(data):
    A_eq, b, _ = reference_constraints(data)
    W = cp.Variable((data.V, data.d))
    prob = cp.Problem(cp.Minimize(cp.sum_squares(W)), [A_eq @ cp.vec(W, order="C") == b])
    solve = _clarabel(prob)
    return (W.value if prob.status == cp.OPTIMAL else None), prob.status, solve


def ref_svm(data, told=None):
    """W^mm by cvxpy + Clarabel on vec(W); ``told`` (an answer W): only the (6b) pairs active there (margin ≤ 1 +
    bench_ntp_learned.ACTIVE_TOL), i.e. Clarabel told the answer's active set, at tolerances 1e-10."""
    from bench_ntp_learned import active_pairs

    A_eq, _, A_in = reference_constraints(data, None if told is None else active_pairs(data, told))
    W = cp.Variable((data.V, data.d))
    x = cp.vec(W, order="C")
    prob = cp.Problem(cp.Minimize(cp.sum_squares(W)), [A_eq @ x == 0, A_in @ x >= 1])
    solve = _clarabel(prob, {} if told is None else {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10})
    return (W.value if prob.status == cp.OPTIMAL else None), prob.status, solve


def ref_separable(data):
    A_eq, _, A_in = reference_constraints(data)
    n = A_eq.shape[1]
    res = linprog(np.zeros(n), A_ub=-A_in, b_ub=-np.ones(A_in.shape[0]), A_eq=A_eq, b_eq=np.zeros(A_eq.shape[0]),
                  bounds=(None, None), method="highs")
    verdict = {0: True, 2: False}.get(res.status)  # 0: feasible, 2: infeasible, else: solver trouble
    return verdict, res.message, None


# -- ours ----------------------------------------------------------------------------------------

def ours_w_star(data):
    try:
        return w_star(data)
    except NotCompatibleError:
        return None


def ours_svm(data):
    return ntp_svm(data)  # .W is None when not separable


def ours_separable(data):
    return bool(is_separable(data))


# -- driver --------------------------------------------------------------------------------------

def best_of(fn, data, repeats=REPEATS):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(data)
        times.append(time.perf_counter() - t0)
    return out, min(times)


def once(fn, data):
    t0 = time.perf_counter()
    out = fn(data)
    return out, time.perf_counter() - t0


def rel_diff(W_ours, W_ref) -> str:
    if W_ours is None or W_ref is None:
        return f"no comparison (ours: {'W' if W_ours is not None else 'none'}, ref: " \
               f"{'W' if W_ref is not None else 'none'})"
    return f"rel. Frobenius diff {np.linalg.norm(W_ours - W_ref) / np.linalg.norm(W_ref):.2e}"


def run_size(size, with_reference: bool) -> None:
    m, V, d, S = size
    data = synthetic(m, V, d, S, seed=ARGS.seed)
    n_eq, n_in = int(np.sum(data.support_sizes - 1)), int(np.sum(V - data.support_sizes))
    print(f"\n== m={m} V={V} d={d} S={S}: vec(W) has {V * d} variables, {n_eq} equalities, {n_in} inequalities")
    print(f"  {'problem':<13}{'ours [s]':>10}{'reference [s]':>15}{'[Clarabel]':>12}{'ref/ours':>10}   accuracy")
    cases = [("W*", ours_w_star, ref_w_star), ("NTP-SVM", ours_svm, ref_svm),
             ("separability", ours_separable, ref_separable)]
    for name, ours, ref in cases:
        out, t_ours = best_of(ours, data)
        row = f"  {name:<13}{t_ours:>10.4f}"
        if not with_reference:
            print(f"{row}{'-':>15}{'-':>12}{'-':>10}   reference skipped (use --large)")
            continue
        (ref_out, status, t_solve), t_ref = once(ref, data)
        solve = "-" if t_solve is None else f"{t_solve:.3f}"
        if name == "separability":
            acc = f"verdict ours={out} ref={ref_out} ({'agree' if out == ref_out else 'DISAGREE'})"
            if ref_out is None:
                acc += f"; HiGHS: {status}"
        elif name == "NTP-SVM":
            acc = rel_diff(out.W, ref_out)
            if out.W is not None and ref_out is not None:  # both feasible: the smaller norm is closer to W^mm
                excess = np.linalg.norm(ref_out) / np.linalg.norm(out.W) - 1
                acc += f"; |W_ref|/|W_ours|-1 = {excess:+.1e}, ours duality gap {out.residuals['duality_gap']:.1e}"
            acc += "" if status == cp.OPTIMAL else f"; cvxpy status {status}"
        else:
            acc = rel_diff(out, ref_out) + ("" if status == cp.OPTIMAL else f"; cvxpy status {status}")
        print(f"{row}{t_ref:>15.3f}{solve:>12}{t_ref / t_ours:>9.1f}x   {acc}")
        sys.stdout.flush()


def run_planted(size) -> None:
    """W^mm on reference.ntp.planted(m, V, d, seed): auto, ALM alone, interior point alone, cvxpy + Clarabel."""
    from reference.ntp import planted

    m, V, d, seed = size
    data = planted(m, V, d, seed)
    print(f"\n== planted(m={m}, V={V}, d={d}, seed={seed}): vec(W) has {V * d} variables, "
          f"{int(data.probs.nnz)} support pairs")
    (W_ref, status, t_solve), t_ref = once(ref_svm, data)
    norm_ref = np.linalg.norm(W_ref) if W_ref is not None else float("nan")
    print(f"  {'cvxpy':<6} {t_ref:8.2f} s (Clarabel {t_solve:.2f} s)  {status}  |W| {norm_ref:.6f}")
    sides = [("auto", {}), ("alm", {"method": "alm", "max_seconds": ARGS.alm_seconds}), ("ipm", {"method": "ipm"})]
    answer = None
    for name, kw in sides:
        t0 = time.perf_counter()
        try:
            res = ntp_svm(data, **kw)
        except SolverError as err:  # (an undecided ALM: reported as the side's outcome)
            print(f"  {name:<6} {time.perf_counter() - t0:8.2f} s  {type(err).__name__}: {str(err)[:100]}")
            continue
        t = time.perf_counter() - t0
        diff = np.linalg.norm(res.W - W_ref) / norm_ref if W_ref is not None and res.W is not None else float("nan")
        print(f"  {name:<6} {t:8.2f} s  {res.status:<18} gap {res.residuals.get('duality_gap', float('nan')):.1e}  "
              f"|W| {np.linalg.norm(res.W):.6f}  vs cvxpy {diff:.1e}  ratio Clarabel/ours {t_solve / t:5.2f}  "
              f"[{res.method[:100]}]")
        sys.stdout.flush()
        if name == "ipm" and res.status == "optimal":
            answer = (res.W, t)
    if answer is not None:  # the generic solver told the answer's active set (issue 38's comparison)
        (W_act, status, t_solve), t_ref = once(lambda d: ref_svm(d, answer[0]), data)
        print(f"  {'cvxpy told the active set':<6} {t_ref:.2f} s (Clarabel {t_solve:.2f} s)  {status}  "
              f"|W| {np.linalg.norm(W_act):.6f}  ratio Clarabel's solve / interior point {t_solve / answer[1]:5.2f}")


def main() -> None:
    limit_threads(ARGS.threads)
    header()
    if ARGS.planted is not None:
        for size in ARGS.planted or PLANTED_DEFAULT:
            run_planted(size)
        return
    sizes = [(s, True) for s in ARGS.sizes] if ARGS.sizes else [(s, ref or ARGS.large) for s, ref in DEFAULT_SIZES]
    for size, with_reference in sizes:
        run_size(size, with_reference)


if __name__ == "__main__":
    main()
