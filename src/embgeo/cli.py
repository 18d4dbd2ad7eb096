"""Command-line interface: ``embgeo ...``.

Each paper has a subcommand group (``embgeo ntp analyze``); errors caused by bad input are
printed as one line ``embgeo: error: ...`` with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from embgeo.errors import InputError

#: Sizes m,V,d,S of ``ntp analyze`` without a data file: the paper's Figs. 3-4.
SYNTHETIC_DEFAULT = "50,10,60,6"


def _parse_ints(text: str, n: int, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise InputError(f"{what}: expected {n} comma-separated integers, got {text!r}") from None
    if len(values) != n:
        raise InputError(f"{what}: expected {n} comma-separated integers, got {text!r}")
    return values


def _embed_spec(spec: str):
    """'onehot' / 'random:D' pass through; a path to .npy becomes a callable checked by NTPData."""
    if spec == "onehot" or spec.startswith("random:"):
        return spec
    path = Path(spec)
    if path.suffix != ".npy":
        raise InputError(f"--embeddings: expected 'onehot', 'random:D' or a .npy file, got {spec!r}")
    try:
        H = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"--embeddings: cannot load {path} ({exc})") from None
    return lambda contexts: H


def _analyze_data(args) -> tuple:
    """Load the dataset of ``ntp analyze``: ``(data, source, info)``.

    ``--text`` (words) or ``--tokens`` (integer ids) with ``--context-length``, else the
    ``--synthetic`` generator. ``info`` holds what loading did, for the printout and
    summary.json: for files the pair mode, skipped lines and (with --text or --max-vocab) the
    word counts and ``<unk>`` statistics; empty for synthetic data.
    """
    from embgeo.ntp import NTPData, synthetic

    if args.text and args.tokens:
        raise InputError("--text and --tokens are mutually exclusive: give one input file")
    path = args.text or args.tokens
    if path is None:
        for flag, value in (("--context-length", args.context_length), ("--windows", args.windows),
                            ("--autoregressive", args.autoregressive), ("--max-vocab", args.max_vocab)):
            if value not in (None, False):
                raise InputError(f"{flag} applies to --text or --tokens only, not to --synthetic data")
        m, V, d, S = _parse_ints(args.synthetic or SYNTHETIC_DEFAULT, 4, "--synthetic m,V,d,S")
        data = synthetic(m, V, d, S, seed=args.seed)
        return data, f"synthetic(m={m}, V={V}, d={d}, S={S}, seed={args.seed})", {}
    flag = "--text" if args.text else "--tokens"
    if args.synthetic is not None:
        raise InputError(f"--synthetic and {flag} are mutually exclusive: give one data source")
    if args.context_length is None:
        raise InputError(f"--context-length is required with {flag}")
    if args.windows and args.autoregressive:
        raise InputError("--windows and --autoregressive are mutually exclusive: choose one way to form pairs")
    if args.max_vocab is not None and args.max_vocab < 1:
        raise InputError(f"--max-vocab: expected an integer >= 1, got {args.max_vocab}")

    sequences, labels, info = _read_sequences(args)
    mode = "windows" if args.windows else "autoregressive" if args.autoregressive else "last"
    data = NTPData.from_sequences(sequences, args.context_length, embed=_embed_spec(args.embeddings),
                                  autoregressive=args.autoregressive, windows=args.windows,
                                  token_labels=labels, seed=args.seed)
    info = {**info, "pairs": mode, "context_length": args.context_length, "sequences": len(sequences),
            "skipped_sequences": data.n_skipped_sequences}
    return data, f"{flag[2:]}:{path}", info


def _read_sequences(args) -> tuple[list[list[int]], list[str] | None, dict]:
    """Token-id sequences of --text or --tokens, the tokens' names (None for plain ids) and the
    reading counts (words, types, <unk>) of :func:`embgeo.ntp.data.limit_vocabulary`."""
    from embgeo.ntp.data import limit_vocabulary, read_text_file, read_token_file

    if args.text:
        return read_text_file(args.text, max_vocab=args.max_vocab)
    sequences = read_token_file(args.tokens)
    if args.max_vocab is None:
        return sequences, None, {}
    # Ids are renumbered by frequency to make V = N + 1; the labels keep the original ids.
    sequences, labels, info = limit_vocabulary(sequences, args.max_vocab)
    return sequences, [str(t) for t in labels], info


def _print_data(data, source: str, info: dict, seconds: float) -> None:
    """Print what was loaded and its sizes, before any solver runs (flushed: solvers can be long)."""
    print(f"data         {source} (loaded in {seconds:.2f} s)")
    words = "words" if "word_pattern" in info else "tokens"
    if "types" in info:
        lines = f" on {info['lines']} lines" if "lines" in info else ""
        print(f"read         {info['tokens']} {words} of {info['types']} types{lines}")
    if info.get("unk_types"):
        print(f"max vocab    {info['max_vocab']} kept + <unk>: <unk> replaced {info['unk_tokens']} {words} "
              f"({100 * info['unk_tokens'] / info['tokens']:.1f}%) of {info['unk_types']} types")
    elif info.get("max_vocab") is not None:
        print(f"max vocab    {info['max_vocab']} >= {info['types']} types: nothing replaced by <unk>")
    if "pairs" in info:
        need = 2 if info["pairs"] == "autoregressive" else info["context_length"] + 1
        print(f"pairs        n={data.n_samples} training pairs ({info['pairs']}, k={info['context_length']}) "
              f"from {info['sequences']} lines; skipped {info['skipped_sequences']} lines with < {need} tokens")
    print(f"sizes        m={data.m} contexts, V={data.V} tokens, d={data.d}", flush=True)


def ntp_analyze(args) -> dict:
    """Compute every theory object of the NTP paper on one dataset and write them to --out."""
    from embgeo.ntp import entropy, ntp_svm, subspace
    from embgeo.ntp.theory import is_compatible

    t_load = time.perf_counter()
    data, source, info = _analyze_data(args)
    t_load = time.perf_counter() - t_load
    _print_data(data, source, info, t_load)
    # -- solving: the solvers' memory estimate and progress report belong here, after the sizes.
    t0 = time.perf_counter()
    F = subspace(data)
    compat = is_compatible(data, F)
    t_compat = time.perf_counter() - t0
    svm = ntp_svm(data, subspace_=F) if data.support_sizes.min() < data.V else None
    sep = svm.separability if svm is not None else None
    if svm is None:
        sep_text = "n/a (every support is the whole vocabulary)"
    else:
        sep_text = f"{bool(sep)} ({sep.method})"
    summary = {
        "source": source, "m": data.m, "V": data.V, "d": data.d,
        "n_samples": data.n_samples, "entropy_nats": entropy(data),
        "dim_F": F.dim, "dim_F_perp": F.perp_dim,
        "compatible": bool(compat), "compatibility_residual": compat.residual,
        "separable": None if sep is None else bool(sep),
        "w_star_norm": float(np.linalg.norm(compat.W)) if compat else None,
        "ntp_margin": svm.margin if svm is not None and svm.status == "optimal" else None,
        "w_mm_norm": float(np.linalg.norm(svm.W)) if svm is not None and svm.status == "optimal" else None,
        "svm_status": None if svm is None else svm.status,
        "svm_residuals": None if svm is None else svm.residuals,
        "seconds": {"load": t_load, "subspace_and_w_star": t_compat,
                    "separability_and_svm": 0.0 if svm is None else svm.seconds},
        "input": info,
    }
    print(f"entropy      H = {summary['entropy_nats']:.6f} nats")
    print(f"subspace F   dim F = {F.dim}, dim F_perp = {F.perp_dim}")
    print(f"compatible   {bool(compat)} (residual {compat.residual:.2e})")
    print(f"separable    {sep_text}")
    if compat:
        print(f"||W*||       {summary['w_star_norm']:.6f}")
    if summary["ntp_margin"] is not None:
        print(f"NTP margin   {summary['ntp_margin']:.6f} (= 1/||W^mm||, relative duality gap "
              f"{svm.residuals['duality_gap']:.1e})")
    t_svm = summary["seconds"]["separability_and_svm"]
    print(f"solver time  W*: {t_compat:.3f} s, separability + NTP-SVM: {t_svm:.3f} s")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        if compat:
            np.save(out / "W_star.npy", compat.W)
        if summary["ntp_margin"] is not None:
            np.save(out / "W_mm.npy", svm.W)
        if data.token_labels is not None:  # row z of W*, W^mm is the token on line z + 1
            (out / "vocabulary.txt").write_text("".join(f"{w}\n" for w in data.token_labels), encoding="utf-8")
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(f"written      {out}/summary.json" + (", W_star.npy" if compat else "")
              + (", W_mm.npy" if summary["ntp_margin"] is not None else "")
              + (", vocabulary.txt" if data.token_labels is not None else ""))
    return summary


def cmd_list(args) -> None:
    """Print every registered experiment with its paper-scale run time."""
    from embgeo.experiments import REGISTRY

    for name, exp in REGISTRY.items():
        print(f"{name:<22} [{exp.paper}] {exp.title}" + (f" (paper scale: {exp.paper_runtime})"
                                                          if exp.paper_runtime else ""))


def _print_claims(claims: list[dict]) -> None:
    for c in claims:
        verdict = "holds" if c["ok"] else "FAILS"
        print(f"  [{verdict}] {c['name']}: measured {c['measured']}"
              + (f", paper {c['paper']}" if c.get("paper") is not None else "")
              + (f", theory {c['theory']}" if c.get("theory") is not None else ""))


def cmd_run(args) -> None:
    """Run one experiment and write config.json, claims.json, trace.csv and figures to --out."""
    from embgeo.experiments import parse_overrides, run

    record = run(args.name, args.scale, parse_overrides(args.set), out=args.out)
    print(f"{args.name} ({args.scale}): {record.passed}/{len(record.claims)} claims hold, "
          f"{record.seconds:.1f} s, written to {record.out}")
    _print_claims(record.claims)


def cmd_reproduce(args) -> None:
    """Run every experiment of a paper and write one self-contained HTML report."""
    from embgeo.experiments import reproduce

    path = reproduce(args.paper, args.scale, args.out, resume=not args.fresh)
    print(f"report: {path.resolve()}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embgeo", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="torch and BLAS threads (default 1; DESIGN.md: one per process on small machines)")
    sub = parser.add_subparsers(dest="command", required=True)

    ntp = sub.add_parser("ntp", help="NTP implicit bias (Thrampoulidis 2024)")
    ntp_sub = ntp.add_subparsers(dest="ntp_command", required=True)
    an = ntp_sub.add_parser("analyze", help="H, F, W*, separability, NTP-SVM of a dataset")
    an.add_argument("--synthetic", metavar="m,V,d,S",
                    help=f"the paper's Fig. 3-4 generator at these sizes (the default data; default sizes: the "
                         f"paper's {SYNTHETIC_DEFAULT})")
    an.add_argument("--text", metavar="FILE",
                    help="UTF-8 raw text, one sentence per line, lowercased and split into words by the regex "
                         "[^\\W_]+(?:'[^\\W_]+)* (letters/digits with inner apostrophes, ’ read as '; "
                         "everything else separates words)")
    an.add_argument("--tokens", metavar="FILE", help="text file: one sequence of integer token ids per line")
    an.add_argument("--context-length", type=int, metavar="k", help="context length k (required with --text/--tokens)")
    an.add_argument("--windows", action="store_true",
                    help="every window of k+1 consecutive tokens of a line is a training pair (sliding window; "
                         "default: one pair per line, its last token after the k before it)")
    an.add_argument("--autoregressive", action="store_true", help="use all prefixes up to length k (paper App. C)")
    an.add_argument("--max-vocab", type=int, metavar="N",
                    help="keep the N most frequent tokens (ties: first appearance), map all others to one extra "
                         "token <unk> (V = N + 1); with --tokens the kept ids are renumbered by frequency")
    an.add_argument("--embeddings", default="random:64", metavar="SPEC",
                    help="context embeddings with --text/--tokens: random:D, onehot or FILE.npy (m, d) "
                         "(default random:64)")
    an.add_argument("--seed", type=int, default=0, help="seed of the generator / random embeddings (default 0)")
    an.add_argument("--out", metavar="DIR", help="write summary.json, W_star.npy, W_mm.npy and, when tokens have names "
                                                     "(--text, --max-vocab), vocabulary.txt here")
    an.set_defaults(func=ntp_analyze)

    ls = sub.add_parser("list", help="list the registered experiments")
    ls.set_defaults(func=cmd_list)
    rn = sub.add_parser("run", help="run one experiment")
    rn.add_argument("name", help="experiment name (see 'embgeo list')")
    rn.add_argument("--scale", choices=["quick", "paper"], default="quick")
    rn.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value (repeatable)")
    rn.add_argument("--out", metavar="DIR", help="output directory (default runs/NAME)")
    rn.set_defaults(func=cmd_run)
    rp = sub.add_parser("reproduce", help="run every experiment of a paper and write report.html")
    rp.add_argument("--paper", default="all", help="ntp or all (default all)")
    rp.add_argument("--scale", choices=["quick", "paper"], default="quick")
    rp.add_argument("--out", default="runs/reproduce", metavar="DIR", help="output directory (default runs/reproduce)")
    rp.add_argument("--fresh", action="store_true", help="re-run experiments that already finished in DIR")
    rp.set_defaults(func=cmd_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads: expected a positive integer, got {args.threads}")
    from embgeo.core.threads import limit_threads

    try:
        with limit_threads(args.threads):
            args.func(args)
    except InputError as exc:
        print(f"embgeo: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
