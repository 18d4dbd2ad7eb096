"""The NTP paper's own commands: ``embgeo ntp analyze`` (the paper's objects for a dataset) and ``embgeo ntp probe``
(for a causal LM's hidden states and head on a text).

Registered with the CLI by the paper itself (``PAPER.commands`` is :func:`add_commands`), through the same
``embgeo.papers`` entry point as its experiments: the CLI core knows no paper. Module-level imports stay light (every
command builds the parser); what a command needs is imported when it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from embgeo.errors import InputError
from embgeo.lab.registry import duration_text as _duration

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
        _check_answer_size(V, d)  # before generating: the generator's per-token arrays grow with V too
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


def _check_answer_size(V: int, d: int) -> None:
    """Refuse sizes whose answers (W*, W^mm, a certificate: V × d each) exceed the dense budget."""
    from embgeo.core.validate import check_dense_size

    if V >= 1 and d >= 1:  # smaller sizes are refused by the generator with its own message
        check_dense_size("W* and W^mm (V × d each)", (V, d), "use a smaller V or d in --synthetic m,V,d,S")


def _read_sequences(args) -> tuple[list[list[int]], list[str] | None, dict]:
    """Token-id sequences of --text or --tokens, the tokens' names (None for plain ids) and the
    reading counts (words, types, <unk>) of :func:`embgeo.ntp.data.limit_vocabulary`."""
    from embgeo.core.validate import DENSE_BUDGET_BYTES
    from embgeo.ntp.data import limit_vocabulary, read_text_file, read_token_file

    if args.text:
        return read_text_file(args.text, max_vocab=args.max_vocab)
    # Without --max-vocab the ids are V's rows: an id whose V could not hold even one float64 per token (the
    # smallest answer, V × 1) is refused at its line while reading; the analysis checks the real V × d later.
    max_id = None if args.max_vocab is not None else DENSE_BUDGET_BYTES // 8 - 1
    sequences = read_token_file(args.tokens, max_id=max_id)
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


def ntp_analyze(args: argparse.Namespace) -> dict:
    """Compute every theory object of the NTP paper on one dataset (:func:`embgeo.ntp.analysis.analyze.analyze`, the
    analysis ``ntp probe`` also makes), print each stage as it finishes, and write them to --out.

    --out was checked writable before anything was loaded (:func:`check_out_dir`). The analysis runs in a
    worker thread so that Ctrl-C stops the command at once whatever the solvers are doing (LAPACK and HiGHS
    would otherwise hold the interrupt until they return). Returns summary.json's contents.
    """
    from embgeo.ntp.analysis.analyze import Analysis, analyze

    t_load = time.perf_counter()
    data, source, info = _analyze_data(args)
    t_load = time.perf_counter() - t_load
    _print_data(data, source, info, t_load)
    result = Analysis(data, meta={"source": source}, input=info, seconds={"load": t_load})
    hooks = _hooks(plain=not sys.stdout.isatty())
    heartbeat = hooks.pop("heartbeat")
    hooks.pop("on_batch", None)
    hooks.pop("progress", None)
    _interruptible(lambda: analyze(data, max_seconds=args.max_seconds, result=result, **hooks), tick=heartbeat)
    _print_totals(result)
    if args.out:
        written = result.save(args.out, save_arrays=True)  # W*, W^mm: V × d, small at the sizes analyze accepts
        print(f"written      {args.out}/" + ", ".join(written))
    return result.to_dict()


def _interruptible(fn, *args, tick=None):
    """``fn(*args)`` in a daemon thread, waited for in short joins: Ctrl-C reaches the main thread within a
    fraction of a second and the process exits (the thread dies with it); the thread's exception is re-raised.
    ``tick()``, if given, is called by the main thread after every join (the heartbeat of :func:`_hooks`)."""
    import contextvars
    import threading

    out: dict = {}
    context = contextvars.copy_context()  # the thread count and device set by main() hold in the thread too

    def target():
        try:
            out["value"] = context.run(fn, *args)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as it is
            out["error"] = exc

    worker = threading.Thread(target=target, name="embgeo-analysis", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
            if tick is not None:
                tick()
    except KeyboardInterrupt:
        # The worker may be inside native code (a torch forward pass): tearing the interpreter down around it
        # aborts the process ("terminate called without an active exception", exit 134, measured on SmolLM2).
        # So once main() has said what happened, the process leaves without that teardown, with Ctrl-C's status.
        import atexit

        atexit.register(_leave_now, 130)
        raise
    if "error" in out:
        raise out["error"]
    return out["value"]


def _leave_now(status: int) -> None:
    """Exit at once with ``status`` after flushing the standard streams (see :func:`_interruptible`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _print_plan(data, plan) -> None:
    """The memory the analysis will take (its :class:`~embgeo.ntp.analysis.analyze.MemoryPlan`), printed before any
    solver runs."""
    from embgeo.core.validate import DENSE_BUDGET_BYTES

    system, room, svm = plan.equality_system, plan.available, plan.svm
    why = "" if plan.equality_system_built else (
        f" — above the {_gib(DENSE_BUDGET_BYTES)} budget" if system > DENSE_BUDGET_BYTES
        else f" — above the {_gib(room)} this process can still allocate") + \
        ": not built, dim F bounded, W* only from certificates"
    print(f"memory       peak ≈ {_gib(plan.peak_estimate)}: the process now {_gib(plan.process)} + F's exact "
          f"system {_gib(system)}{why}; the NTP-SVM, only if no certificate decides separability, up to {_gib(svm)} "
          "more", flush=True)
    if plan.process + svm > room and not data.support_sizes.min() == data.V:
        print(f"             (the NTP-SVM's bound is above the {_gib(room)} left: if it runs it may be refused)")


#: The printed verdict names the tokens of a non-separability certificate when at most this many carry its weight.
CONFLICT_TOKENS = 6


def _not_separable_line(sep, labels=None) -> str:
    """The line of a Farkas certificate of non-separability (ntp analyze and ntp probe), with what it involves: how
    many contexts and tokens carry its weight, and the tokens by name (``labels``, one per row of W) when at most
    CONFLICT_TOKENS do — issue 38 asks the verdict to say which tokens make the data non-separable."""
    line = (f"separable    False ({sep.method}): Farkas certificate with residual {sep.residuals['perp_norm']:.1e} "
            "(every separator would have NTP-margin <= that)")
    if sep.certificate is None:
        return line
    cert = sep.certificate.tocoo()
    contexts, tokens = np.unique(cert.row[cert.data != 0]), np.unique(cert.col[cert.data != 0])
    named = ""
    if labels is not None and 0 < len(tokens) <= CONFLICT_TOKENS:
        named = ": " + " ".join(repr(str(labels[v])) for v in tokens)
    return line + f"; on {len(contexts):,} contexts and {len(tokens):,} tokens{named}"


def _margin_line(svm) -> str:
    """The line of the NTP-SVM's margin with its status, gap and certified error bound (ntp analyze and probe);
    '~' marks a margin that is not certified optimal."""
    from embgeo.core.status import Status

    label = "NTP margin  " if svm.status == Status.OPTIMAL else "NTP margin ~"
    return (f"{label} {svm.margin:.6f} (= 1/||W^mm||, {svm.status}, relative duality gap "
            f"{svm.residuals['duality_gap']:.1e}, certified ||W - W^mm||/||W^mm|| <= "
            f"{svm.residuals['error_bound']:.1e}; {svm.method})" + (f"\n             {svm.note}" if svm.note else ""))


def _gib(nbytes: float) -> str:
    from embgeo.ntp.analysis.analyze import gib

    return gib(nbytes)


def ntp_probe(args: argparse.Namespace) -> None:
    """The NTP geometry of a causal LM checkpoint on a text (:func:`embgeo.ntp.analysis.probe.probe_model`), printed
    stage by stage; --out gets summary.json, vocabulary.txt, the figure and the small arrays (the dense H, W,
    W*, W^mm with --save-arrays).

    The whole probe runs in :func:`_interruptible` (Ctrl-C is answered within a fraction of a second, whatever
    the forward pass or a solver is doing). When stdout is not a terminal, ``progress`` lines (each stage's start
    and end, the forward passes every ~10 % of batches, with the seconds since the start) replace the bars."""
    if args.max_contexts is not None and args.max_contexts < 1:
        raise InputError(f"--max-contexts: expected an integer >= 1, got {args.max_contexts}")
    if args.batch_size is not None and args.batch_size < 1:
        raise InputError(f"--batch-size: expected an integer >= 1, got {args.batch_size}")
    if not args.max_seconds > 0 or args.max_seconds == float("inf"):
        raise InputError(f"--max-seconds: expected a finite number of seconds > 0, got {args.max_seconds}")
    _check_probe_context_length(args.model, args.context_length)
    head = _head_options(args)
    if not sys.stderr.isatty():
        # transformers' own bars (a GGUF file's conversion, the weights' loading) write carriage-return updates that a
        # log keeps as one long line; off a terminal the probe prints progress lines instead. tqdm reads TQDM_* once,
        # when first imported (below, with transformers): a variable the user set is kept (TQDM_DISABLE= shows them).
        os.environ.setdefault("TQDM_DISABLE", "1")
    from embgeo.ntp.analysis.probe import probe_model, train_head  # torch and transformers: after the checks above

    hooks = _hooks(plain=not sys.stdout.isatty())
    heartbeat = hooks.pop("heartbeat")
    # --max-seconds is one wall for the whole probe: with --train-head the measurement gets all but the last
    # HEAD_TIME_SHARE of it, and the head's runs stop at the wall (what the measurement leaves unused is theirs too)
    wall = time.perf_counter() + args.max_seconds
    measure_seconds = args.max_seconds * (1.0 - HEAD_TIME_SHARE if head is not None else 1.0)
    if head is not None:
        print(f"train head   {head['steps']} steps of {', '.join(head['optimizers'])} after the measurement, within "
              f"the last {_duration(args.max_seconds - measure_seconds)} of --max-seconds (and whatever the "
              "measurement leaves); a run that reaches the limit stops there, its trends judged on the steps made",
              flush=True)
    result = _interruptible(lambda: probe_model(
        args.model, args.text, context_length=args.context_length, prefixes=args.prefixes,
        max_contexts=args.max_contexts, sample=args.sample, seed=args.seed, units=args.units,
        batch_size=args.batch_size, device=args.device, dtype=args.dtype, head_bias=args.head_bias,
        start=args.start_tokens, max_seconds=measure_seconds, separability_method=args.separability_method,
        **hooks), tick=heartbeat)
    if head is not None:
        # summary.json keeps the user's limit, and the measurement's share of it beside
        result.meta.update(max_seconds=args.max_seconds, measurement_max_seconds=measure_seconds)
        _interruptible(lambda: train_head(result, **head, report=hooks["report"], started=hooks.get("started"),
                                          deadline=wall), tick=heartbeat)
    _print_totals(result)
    if args.out:
        written = result.save(args.out, save_arrays=args.save_arrays)
        print(f"written      {args.out}/" + ", ".join(written))


def _head_options(args: argparse.Namespace) -> dict | None:
    """``--train-head``'s settings for :func:`embgeo.ntp.analysis.probe.train_head`, checked before anything is loaded
    (None without --train-head; --head-* options without it are refused)."""
    given = args.head_optimizer is not None or args.head_steps is not None or args.head_lr is not None
    if not args.train_head:
        if given:
            raise InputError("--head-optimizer, --head-steps, --head-lr: only with --train-head")
        return None
    opts = [o.strip() for arg in (args.head_optimizer or ["gd"]) for o in arg.split(",") if o.strip()]
    bad = [o for o in opts if o not in ("gd", "ngd", "adam")]
    if bad or not opts:
        raise InputError(f"--head-optimizer: expected gd, ngd or adam (repeatable, or a comma list), got "
                         f"{','.join(bad) or 'nothing'}")
    steps = 1000 if args.head_steps is None else args.head_steps
    if steps < 1:
        raise InputError(f"--head-steps: expected an integer >= 1, got {steps}")
    if args.head_lr is not None and not (0 < args.head_lr < float("inf")):
        raise InputError(f"--head-lr: expected a finite step size > 0, got {args.head_lr}")
    return {"optimizers": list(dict.fromkeys(opts)), "steps": steps, "lr": args.head_lr}


#: ``ntp probe --train-head``: the part of --max-seconds kept for the head's runs (the measurement gets the rest).
HEAD_TIME_SHARE = 0.25

#: ``ntp probe`` off a terminal: a solver's progress line at most this often (seconds).
SOLVER_LINE_SECONDS = 10.0

#: ``ntp probe`` / ``ntp analyze`` off a terminal: a stage that has printed nothing for this many seconds says that it
#: is still running (the loss pass ran 253 s, the geometry 109 s, without a line at m = 100,000: issue 38).
HEARTBEAT_SECONDS = 60.0

#: The solvers' names in progress lines and bars (a ProgressEvent's ``solver``).
SOLVER_NAMES = {"alm": "NTP-SVM (augmented Lagrangian)", "dual": "NTP-SVM dual", "ipm": "NTP-SVM (interior point)",
                "hinge": "squared hinge"}


def _hooks(plain: bool) -> dict:
    """The callbacks of ``ntp probe`` and ``ntp analyze``: ``report`` (the stage's lines), ``solver_progress`` (a bar
    on a terminal), and where output is not a terminal (``plain``) ``started``, ``on_batch`` and ``solver_progress``:
    progress lines, flushed (the solver's at most every SOLVER_LINE_SECONDS); and ``heartbeat``, which the caller pops
    and hands to :func:`_interruptible` (not a hook of the analysis): off a terminal, a line saying which stage is still
    running once nothing has been printed for HEARTBEAT_SECONDS."""
    from tqdm import tqdm

    t0 = time.perf_counter()
    bars = {}  # one bar per solver stage, opened when the solver first reports (a terminal only)
    now = {"stage": None, "since": t0, "said": t0}  # the stage running, since when, and the last progress line

    def say(text: str) -> None:
        now["said"] = time.perf_counter()
        # one write per line: the heartbeat prints from the main thread while the analysis runs in another
        sys.stdout.write(f"progress     {text} ({now['said'] - t0:.1f} s since the start)\n")
        sys.stdout.flush()

    def started(stage: str) -> None:
        now["stage"], now["since"] = stage, time.perf_counter()
        say(f"{stage} started")

    def heartbeat() -> None:
        if plain and now["stage"] is not None and time.perf_counter() - now["said"] >= HEARTBEAT_SECONDS:
            say(f"{now['stage']} still running ({time.perf_counter() - now['since']:.0f} s in it)")

    def solver_progress(event):  # a ProgressEvent (embgeo.ntp.solvers.outcome)
        if plain:  # a line at most every SOLVER_LINE_SECONDS: a logged solver stage is not silent for minutes
            now = time.perf_counter()
            if now - bars.get("said", -np.inf) >= SOLVER_LINE_SECONDS:
                bars["said"] = now
                shown = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                  for k, v in {"gap": event.gap, **event.values}.items()
                                  if isinstance(v, (int, float)) and v == v)
                say(f"{SOLVER_NAMES.get(event.solver, event.solver)} step {event.iteration}: {shown}")
            return
        bar = bars.get("bar")
        if bar is None or event.solver != bars.get("solver") or event.iteration < bar.n:  # a new solver
            if bar is not None:
                bar.close()
            bars["solver"] = event.solver
            bar = bars["bar"] = tqdm(desc=SOLVER_NAMES.get(event.solver, event.solver), unit="step", leave=False,
                                     mininterval=1.0, disable=None)
        bar.update(event.iteration - bar.n)
        bar.set_postfix(gap=f"{event.gap:.1e}", refresh=False)

    def report(stage, result):
        if "bar" in bars:
            bars.pop("bar").close()
        _print_stage(stage, result)
        if plain:
            say(f"{stage} done in {result.seconds.get(stage, 0.0):.2f} s")

    def on_batch(done, total):
        step = max(1, round(total / 10))
        if done % step == 0 or done == total:
            say(f"forward pass {done}/{total} batches ({100 * done / total:.0f}%)")

    hooks = {"report": report, "solver_progress": solver_progress, "heartbeat": heartbeat}
    if plain:
        hooks.update(started=started, on_batch=on_batch, progress=False)
    return hooks


def _cli_advice(text: str) -> str:
    """A library message as the CLI's advice: a Python keyword it names becomes the option that sets it."""
    return (text.replace("use method='hinge' or method='lp'", "use --separability-method lp")
            .replace("use method='lp'", "use --separability-method lp")
            .replace("max_seconds", "--max-seconds").replace("max_contexts", "--max-contexts"))


def _check_probe_context_length(model: str, k: int | None) -> None:
    """Refuse ``ntp probe -k`` below 1 or above the model's window, read from ``model``/config.json
    (``max_position_embeddings`` or ``n_positions``, as :func:`embgeo.ntp.analysis.probe.probe_model` reads it) before
    torch, the model and the tokenizer are loaded; a folder without a readable window is left to the probe."""
    if k is None:  # --prefixes
        return
    if k < 1:
        raise InputError(f"--context-length: expected an integer >= 1, got {k}")
    try:
        config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    window = (config.get("max_position_embeddings") or config.get("n_positions")) if isinstance(config, dict) else None
    if isinstance(window, int) and k > window:
        raise InputError(f"--context-length {k}: longer than the model's window of {window} positions "
                         f"({Path(model) / 'config.json'}); use k <= {window}")


def _print_stage(stage: str, r) -> None:
    """One stage of the analysis (:func:`embgeo.ntp.analysis.analyze.analyze`, ``ntp analyze`` and ``ntp probe``
    alike) as lines, with its time (flushed: the next can be long)."""
    sec = r.seconds.get(stage, 0.0)
    if stage == "contexts":
        _print_probe_plan(r)
    elif stage == "hidden":
        print(f"forward      H = final hidden states at the last position, {r.data.m} × {r.data.d}, computed in "
              f"{r.meta.get('dtype', '?')} and kept in float64, in {r.seconds['hidden']:.2f} s", flush=True)
    elif stage == "loss":
        print(f"entropy      𝓗 = {r.entropy:.6f} nats")
        if r.W is not None:
            share = f"; {r.kl_gap / r.entropy:.3g} × 𝓗" if r.entropy > 0 else ""
            print(f"model loss   CE = {r.ce:.6f} nats, CE - 𝓗 = {r.kl_gap:.6e} nats (a KL{share})")
        sys.stdout.flush()
    elif stage == "memory":
        _print_plan(r.data, r.plan)
    elif stage == "compatibility":
        comp = r.compatibility
        took = f" ({sec - r.seconds.get('dim_F', 0.0):.2f} s)"
        if comp is None:
            print(f"compatible   undecided: {_cli_advice(r.errors['compatibility'])}{took}")
        elif comp:
            print(f"compatible   True: W* solves the log-odds equations (4) to {comp.residual:.1e}; "
                  f"||W*|| = {np.linalg.norm(comp.W):.6f}{took}")
        else:
            print(f"compatible   False ({comp.method}): every W leaves a residual of (4) >= {comp.residual:.2e}; "
                  f"certificate norm {comp.certificate_norm:.1e}{took}")
        took = f"{r.seconds.get('dim_F', 0.0):.2f} s"
        if r.dim_F is not None:
            print(f"subspace F   dim F = {r.dim_F}, dim F_perp = {r.subspace.ambient_dim - r.dim_F} ({took})",
                  flush=True)
        else:
            low, high = r.dim_F_bounds if r.dim_F_bounds is not None else ("?", "?")
            print(f"subspace F   {low} <= dim F <= {high} ({_cli_advice(r.errors.get('dim_F', ''))}; {took})",
                  flush=True)
    elif stage == "separability":
        if r.separable is None and r.svm is None and not r.no_constraints:  # the NTP-SVM decides next
            print(f"separability not decided by the direct routes ({_cli_advice(r.errors['separability'])}); the "
                  f"NTP-SVM decides it next ({sec:.2f} s)", flush=True)
        else:
            print(f"{_separable_line(r)} ({sec:.2f} s)", flush=True)
    elif stage == "svm":
        # the verdict the NTP-SVM settled: without a model's W (no separability stage), or after the direct routes
        # stopped undecided (not when there is no constraint: the separability stage said so already)
        if "separability" not in r.seconds or ("separability" in r.errors and not r.no_constraints):
            print(_separable_line(r) + ("" if r.svm is not None and r.svm.W is not None else f" ({sec:.2f} s)"))
        if r.svm is not None and r.svm.W is not None:
            print(f"{_margin_line(r.svm)} ({sec:.2f} s)", flush=True)
        elif "svm" in r.errors and r.W is not None:
            print(f"NTP-SVM      undecided: {_cli_advice(r.errors['svm'])}", flush=True)
        sys.stdout.flush()
    elif stage == "alignment":
        _print_probe_alignment(r)
    elif stage == "geometry":
        _print_probe_geometry(r)
    elif stage == "train_head":
        _print_probe_head(r)


def _print_totals(r) -> None:
    """The time of every stage and the measured memory peak beside the plan's estimate, after the analysis."""
    t = r.seconds
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.2f} s" for k, v in t.items() if k != "dim_F")
    total = sum(v for k, v in t.items() if k != "dim_F")  # dim_F is part of the compatibility stage
    print(f"time         {parts}; total {total:.2f} s")
    if r.plan is not None and r.plan.peak_measured is not None:
        print(f"memory       peak {_gib(r.plan.peak_measured)} measured (estimated {_gib(r.plan.peak_estimate)} for "
              "the stages that ran)", flush=True)


def _separable_line(r) -> str:
    """The separability verdict, from :attr:`~embgeo.ntp.analysis.analyze.Analysis.separable` — the value
    summary.json writes — with why it is undecided (the direct routes', then the NTP-SVM's reason)."""
    sep = r.separability
    if r.separable is None:
        why = [_cli_advice(r.errors["separability"])] if "separability" in r.errors else []
        if "svm" in r.errors:
            why.append(("the NTP-SVM: " if why else "") + _cli_advice(r.errors["svm"]))
        return f"separable    {r.separability_verdict}: {'; '.join(why)}"
    if not r.separable:
        return _not_separable_line(sep, r.names)
    own = " — the model's own W separates H" if "candidate" in sep.method else ""
    by = " (decided by the NTP-SVM)" if "separability" in r.errors else ""
    return f"separable    {r.separability_verdict} ({sep.method}){own}{by}"


def _print_probe_plan(r) -> None:
    """The model, the pairs, the sizes, and the memory and time estimates, before any forward pass."""
    meta, info = r.meta, r.contexts.info
    print(f"model        {meta['model']} ({meta['architecture']}, {meta['parameters']:,} parameters, head "
          f"{'tied to the input embeddings' if meta['tied_head'] else 'untied'}, bias {meta['head_bias']}; "
          f"tokenizer {meta['tokenizer_size']} tokens, window {meta['window']}"
          + (f" after the start tokens {' '.join(meta['start_tokens'])}" if meta.get("start_tokens") else "")
          + (f"; its logits are {meta['logit_scale']:.6g} × W h, so W is that multiple of the head's weight"
             if meta.get("logit_scale", 1.0) != 1.0 else "")
          + f") in {meta['dtype']} on "
          f"{meta['device']}, loaded in {meta.get('load_seconds', 0.0):.1f} s")
    how = f"windows of k={meta['context_length']}" if meta["mode"] == "windows" else \
        f"every prefix up to {meta['window']} tokens"
    units = f"{meta['unit_count']} {meta['units']}" + (f" cut into {meta['sequences']} windows"
                                                       if meta["units"] == "stream" else "")
    print(f"pairs        n={info['pairs']} (context, next token) pairs ({how}) from {units}; skipped "
          f"{info['skipped_sequences']} too short"
          + (f", {info['truncated_sequences']} longer than the window" if info["truncated_sequences"] else "")
          + (f"; --max-contexts kept {r.contexts.m} of {r.contexts.m + info['contexts_dropped']} contexts "
             f"({_sample_words(info)}; {info['pairs_dropped']} pairs dropped)" if info["contexts_dropped"] else ""))
    d = r.W.shape[1] + (meta["head_bias"] != "none")
    print(f"sizes        m={r.contexts.m} contexts, V={r.W.shape[0]} tokens, d={d}")
    mem = r.memory
    model = (f"model {_gib(mem['model'])}, the rest of the process {_gib(mem['process'])}, forward pass "
             f"{_gib(mem['forward_activations'])} per batch, " if "model" in mem else "")
    unbuilt = ("" if mem.get("equality_system_built", 1)
               else " not built: above the dense budget or the memory left, dim F bounded")
    print(f"memory       up to {_gib(mem['total'])} ({model}H {_gib(mem['hidden_states'])}, W {_gib(mem['head'])}, "
          f"P_F(W) and a difference {_gib(mem['head_work'])}, "
          f"equality system {_gib(mem['equality_system'])}{unbuilt}, SVM dual {_gib(mem['svm_dual'])}, "
          f"W*/W^mm/certificate {_gib(mem['outputs'])})")
    from embgeo.ntp.analysis.probe import LOGIT_PASSES

    est = r.estimate
    fwd = est["forward"]
    fwd = "< 1 s" if fwd < 1 else _duration(fwd)
    rates = est["rates"]
    print(f"time         ≈ {_duration(est['total'])} from here: forward passes ≈ {fwd} ({est['batches']} batches, "
          f"{est['tokens']:,} token positions to run), {LOGIT_PASSES} passes over the m × V logits ≈ "
          f"{_duration(est['logit_passes'])}, solvers ≤ {_duration(est['solvers'])} (what is left of the limit for "
          f"the whole probe, --max-seconds); not included: the exact equality solve of W* and F (it begins no step "
          f"past the solvers' share); timed here on the first batch's first rows and contexts: "
          f"{1e3 * rates['forward']:.2g} ms per token position, a pass over the logits "
          f"{1e3 * rates['margins']:.2g} ms per context (the loss's "
          f"{1e3 * rates['loss']:.2g})", flush=True)
    if est["solvers"] == 0.0:
        print(f"warning      the forward passes and the passes over the logits alone (≈ "
              f"{_duration(est['total'])}) take the whole limit by this estimate: separability and the NTP-SVM will "
              "not run unless those passes, timed again before the solvers, are faster; allow more time "
              "(--max-seconds) or fewer contexts (--max-contexts)", flush=True)


def _sample_words(info: dict) -> str:
    return {"random": f"a random sample, --seed {info['seed']}", "frequent": "the most frequent",
            "first": "the first ones"}.get(info.get("sample"), str(info.get("sample")))


def _cos_band(a: dict, key: str) -> str:
    """A constrained-row cosine with its certified interval, e.g. ``0.8123 in [0.8011, 0.8230]`` (the interval
    only when it is visible at four decimals: summary.json has it always); n/a when NaN."""
    c, lo, hi = (a.get(k, float("nan")) for k in (key, f"{key}_lo", f"{key}_hi"))
    if c != c:
        return "n/a"
    return f"{c:.4f}" + (f" in [{lo:.4f}, {hi:.4f}]" if lo == lo and hi - lo >= 5e-5 else "")


def _print_probe_alignment(r) -> None:
    """The alignment on the constrained rows (seen rows + the unseen mean, centred), the unseen block apart, and the
    old all-rows cosines beside their bounds."""
    a = r.alignment
    eps = a["svm_error_bound"]

    def band(c: float) -> str:
        # |cos(W, Ŵ) − cos(W, W^mm)| ≤ 2ε for ‖Ŵ − W^mm‖ ≤ ε‖W^mm‖; shown as an interval inside [−1, 1], since a
        # "± 5.2" on an uncertified W^mm would read as a number.
        if eps != eps:
            return ""
        if 2 * eps < 1e-3:
            return f" ± {2 * eps:.1e}"
        return f" in [{max(c - 2 * eps, -1.0):.4f}, {min(c + 2 * eps, 1.0):.4f}]"

    k, nu = a.get("seen_tokens"), a.get("unseen_tokens")
    rows = [f"cos(T W, T W^mm) = {_cos_band(a, 'rows_cos_mm')}",
            f"cos(T(W - W*), T W^mm) = {_cos_band(a, 'rows_cos_corrected')}",
            f"||P_F(W) - W*||/||W*|| = {a['subspace_error']:.4f}" if a["subspace_error"] == a["subspace_error"]
            else "||P_F(W) - W*|| n/a",
            f"cos(P_F(W), W*) = {a['star_cos']:.4f}" if _finite(a.get("star_cos"))
            else "cos(P_F(W), W*) n/a"]
    print(f"alignment    on the constrained rows (T: the {k} seen rows and the mean of the {nu} never-next rows, "
          "centred; unchanged by W -> W + 1c^T): " + "; ".join(rows)
          + (f" (not computed: {_cli_advice(r.errors['alignment'])})" if "alignment" in r.errors else ""))
    if nu and "unseen_share" in a:
        print(f"unseen rows  {nu} never-next tokens hold {100 * a['unseen_share']:.1f}% of ||W||^2 "
              f"({100 * a['unseen_spread_share']:.1f}% in their differences from their mean, which no constraint "
              f"sees); their mean row's logit minus the in-support logits: {a['unseen_logit_vs_support']:.4g} "
              + (f"(W^mm: {a['unseen_logit_vs_support_mm']:.4g})" if a.get("unseen_logit_vs_support_mm") ==
                 a.get("unseen_logit_vs_support_mm") else ""))
    old = [f"cos(W, W^mm) = {a['cos_mm']:.4f}{band(a['cos_mm'])} (at most {a['cos_mm_bound']:.4f} for any W^mm "
           "with equal unseen rows)" if a["cos_mm"] == a["cos_mm"] else "cos(W, W^mm) n/a",
           f"cos(W - W*, W^mm) = {a['cos_corrected']:.4f}{band(a['cos_corrected'])} "
           f"(at most {a['cos_corrected_bound']:.4f})"
           if a["cos_corrected"] == a["cos_corrected"] else "cos(W - W*, W^mm) n/a",
           f"NTP-margin of P_perp(W) = {a['margin']:.3e}" if a["margin"] == a["margin"] else "NTP-margin n/a"]
    print("all rows     " + "; ".join(old), flush=True)


def _finite(x) -> bool:
    """Whether ``x`` is a number other than NaN (None: False)."""
    return x is not None and x == x


def _print_probe_head(r) -> None:
    """--train-head: per optimizer a short table on a 1-2-5 grid of the recorded steps, then Theorem 2's claims."""
    ht = r.head_training
    st = ht["settings"]
    print(f"train head   a linear head from W = 0 on the model's H, {st['steps']} steps, reduced to "
          f"{st['reduced']['seen_tokens']} seen rows + 1 shared row for {st['reduced']['unseen_tokens']} never-next "
          "tokens (exact from zero)")
    for opt, run in ht["runs"].items():
        print(f"  {opt} (lr {run['lr']:.4g}, {run['seconds']:.1f} s)"
              + (f" diverged at step {run['diverged']}" if run["diverged"] is not None else "")
              + (f" stopped by {run['stopped']}" if run.get("stopped") else ""))
        print(f"  {'step':>8}  {'CE - H (KL)':>12}  {'||P_F W-W*||/||W*||':>19}  cos(T(W-W*), T W^mm)")
        rows = run["rows"]
        show = [x for x in rows if _one_two_five(x["step"])] + ([rows[-1]] if not _one_two_five(rows[-1]["step"])
                                                                  else [])
        for x in show:
            se = f"{x['subspace_error']:.4g}" if x["subspace_error"] == x["subspace_error"] else "n/a"
            print(f"  {x['step']:>8}  {x['kl_gap']:>12.4e}  {se:>19}  {_cos_band(x, 'rows_cos_corrected')}")
        for claim, v in run["claims"].items():
            print(f"  Theorem 2 {claim:<9} {v['status']}: {v['why']}" + (f" ({v['note']})" if "note" in v else ""))
    sys.stdout.flush()


def _one_two_five(step: int) -> bool:
    """Whether ``step`` is 0 or 1, 2 or 5 times a power of ten (the printed grid of --train-head)."""
    if step == 0:
        return True
    while step % 10 == 0:
        step //= 10
    return step in (1, 2, 5)


def _print_probe_geometry(r) -> None:
    lg, fq = r.logits, r.frequency
    rest = (f", off-support part {lg['effective_rank_rest']:.2f} (rank {lg['rank_rest']})"
            if lg["effective_rank_rest"] is not None else ", off-support part not computed (m and V above "
            "the Gram limit)")
    print(f"logits       effective rank {lg['effective_rank']:.2f}{rest}; on-support energy "
          f"{lg['on_support_energy']:.3g} (centred {lg['sparse_energy']:.3g}); log-odds residual "
          f"{lg['support_residual']:.3g}; margin {lg['margin']:.3g} "
          f"({100 * lg['contexts_ranked_right']:.1f}% of contexts rank their support first)")
    print(f"row norms    Spearman(||w_v||, frequency) = {fq['spearman_norm_frequency']:.3f} over "
          f"{fq['tokens_seen']} next tokens; mean ||w_v|| {fq['mean_norm_seen']:.4g} (next tokens), "
          f"{fq['mean_norm_unseen']:.4g} (never a next token)", flush=True)


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    """Add ``ntp analyze`` and ``ntp probe`` to the CLI's subparsers ``sub``; ``common`` carries the options every
    command accepts (``--threads``)."""
    ntp = sub.add_parser("ntp", help="NTP implicit bias (Thrampoulidis 2024)")
    ntp_sub = ntp.add_subparsers(dest="ntp_command", required=True)
    an = ntp_sub.add_parser("analyze", help="H, F, W*, separability, NTP-SVM of a dataset", parents=[common])
    an.add_argument("--synthetic", metavar="m,V,d,S",
                    help=f"the paper's Fig. 3-4 generator at these sizes (the default data; default sizes: the "
                         f"paper's {SYNTHETIC_DEFAULT})")
    an.add_argument("--text", metavar="FILE",
                    help="UTF-8 raw text, one sentence per line, lowercased and split into words by the regex "
                         "[^\\W_]+(?:'[^\\W_]+)* (letters/digits with inner apostrophes, ’ read as '; "
                         "everything else separates words)")
    an.add_argument("--tokens", metavar="FILE", help="text file: one sequence of integer token ids per line")
    an.add_argument("--context-length", "-k", type=int, metavar="k",
                    help="context length k (required with --text/--tokens)")
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
    an.add_argument("--max-seconds", type=float, metavar="S",
                    help="stop the NTP-SVM after S seconds with its best certified point (duality gap and "
                         "error bound reported)")
    an.add_argument("--out", metavar="DIR", help="write summary.json, W_star.npy, W_mm.npy and, when tokens have names "
                                                     "(--text, --max-vocab), vocabulary.txt here")
    an.set_defaults(func=ntp_analyze)
    pr = ntp_sub.add_parser("probe", parents=[common],
                            help="the NTP geometry of a causal LM (a local folder or a GGUF file) on a text",
                            description="Load a causal language model and its tokenizer from a local folder or a "
                                        "GGUF file (transformers; pip install 'embgeo[lm]'; nothing is downloaded), "
                                        "take its final hidden states H and LM head W on the distinct contexts of a "
                                        "text, and compute the NTP paper's objects for them.")
    pr.add_argument("--model", required=True, metavar="PATH",
                    help="a folder written by save_pretrained (model + tokenizer), or a GGUF file (*.gguf: weights "
                         "dequantized, tokenizer from its metadata)")
    pr.add_argument("--text", required=True, metavar="FILE", help="UTF-8 text, tokenized with the model's tokenizer "
                                                                  "one unit (--units) at a time")
    pr.add_argument("--units", choices=["paragraphs", "lines", "stream"], default="paragraphs",
                    help="what one sequence is: paragraphs (default; blocks separated by blank lines, their lines "
                         "joined by a space), lines (every non-blank line), stream (the whole text, cut into pieces "
                         "of the model's window)")
    how = pr.add_mutually_exclusive_group(required=True)
    how.add_argument("--context-length", "-k", type=int, metavar="k",
                     help="contexts are the windows of k consecutive tokens of a sequence")
    how.add_argument("--prefixes", action="store_true", help="contexts are every prefix of a sequence, up to the "
                                                              "model's window")
    pr.add_argument("--max-contexts", type=int, metavar="N", help="keep N distinct contexts, chosen by --sample")
    pr.add_argument("--sample", choices=["random", "frequent", "first"], default="random",
                    help="which N contexts --max-contexts keeps: random (default; a uniform sample of the distinct "
                         "contexts drawn with --seed), frequent (the N most frequent; ties: first appearance), "
                         "first (the first N to appear)")
    pr.add_argument("--seed", type=int, default=0, help="seed of --sample random (default 0)")
    pr.add_argument("--batch-size", type=int, default=None, metavar="B",
                    help="sequences per forward pass (default 32, or max(32, 512 // k) windows of k tokens)")
    pr.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N for the forward passes")
    pr.add_argument("--dtype", choices=["bfloat16", "float32", "float64"], default=None,
                    help="the forward passes' dtype (default: the model's own — its config's for a folder, float32 "
                         "for a GGUF file); H is cast to float64 for the theory")
    pr.add_argument("--head-bias", choices=["refuse", "append"], default="refuse",
                    help="a head with a bias b: refuse (default) or append it as a coordinate (h -> [h, 1])")
    pr.add_argument("--start-tokens", choices=["model", "none"], default="model",
                    help="what runs before every context: model (default: the tokens the model's tokenizer puts "
                         "before a text, e.g. <bos> for Gemma and Llama 2, none for GPT-2; not part of the "
                         "contexts) or none (the contexts alone)")
    pr.add_argument("--separability-method", choices=["auto", "hinge", "dual", "lp"], default="auto",
                    help="auto (default: cheap certificates and the model's W as one, the LP when small, "
                         "else the squared hinge, and the NTP-SVM dual with the time left where the hinge gives up), "
                         "hinge or dual alone, or lp (the LP alone: decides, at the memory of every constraint)")
    pr.add_argument("--max-seconds", type=float, default=600.0, metavar="S",
                    help="time limit of the whole probe (default 600): loading, the forward passes, then the "
                         "iterative solvers share what is left; with --train-head the head's runs get the last "
                         "quarter (and what the measurement leaves) and stop at the limit")
    pr.add_argument("--save-arrays", action="store_true",
                    help="with --out, also write the dense matrices H (m × d), W, W* and W^mm (V × d each)")
    pr.add_argument("--out", metavar="DIR", help="write summary.json, vocabulary.txt, probe.png/pdf and the small "
                                                 "arrays (the dense ones with --save-arrays)")
    pr.add_argument("--train-head", action="store_true",
                    help="after the measurement, train a linear head from zero on the model's H (the seen rows and "
                         "one shared row for the never-next tokens: exact) and print CE - H, ||P_F(W) - W*||/||W*|| "
                         "and cos(T(W - W*), T W^mm) along the run, with Theorem 2's verdicts")
    pr.add_argument("--head-optimizer", action="append", metavar="OPT",
                    help="gd (default), ngd or adam; repeatable or a comma list (gd,ngd,adam)")
    pr.add_argument("--head-steps", type=int, metavar="N", help="updates of --train-head (default 1000)")
    pr.add_argument("--head-lr", type=float, metavar="LR",
                    help="step size of --train-head (default: 1/(2L) for gd, 0.01 for ngd and adam)")
    pr.set_defaults(func=ntp_probe)
