"""Command-line interface: ``embgeo ...``.

The core commands (list, show, run, reproduce, sweep, results) know no paper: a paper's own commands (``embgeo ntp
analyze``) come with its :class:`~embgeo.lab.registry.Paper` (``commands``), from its ``embgeo.papers`` entry point
as its experiments do. Errors
caused by bad input are printed as one line ``embgeo: error: ...`` with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from embgeo.errors import InputError
from embgeo.lab.registry import duration_text


def cmd_list(args: argparse.Namespace) -> None:
    """Print every registered experiment with its paper-scale run time."""
    from embgeo.lab.registry import experiments

    for name, exp in experiments().items():
        where = " (a sweep's grid point; not in reproduce)" if exp.sweep_point else (
            f" (paper scale: {exp.paper_runtime})" if exp.paper_runtime else "")
        print(f"{name:<22} [{exp.paper}] {exp.title}{where}")


def cmd_show(args: argparse.Namespace) -> None:
    """Print one experiment's title, paper-scale run time and every setting at both scales."""
    import dataclasses

    from embgeo.lab.registry import get

    exp = get(args.name)
    quick, paper = exp.config("quick"), exp.config("paper")
    print(f"{exp.name} [{exp.paper}]: {exp.title}")
    if exp.paper_runtime:
        print(f"paper scale: {exp.paper_runtime}")
    print(f"{'setting (--set KEY=VALUE)':<28} {'quick':<24} paper")
    for f in dataclasses.fields(quick):
        q, p = getattr(quick, f.name), getattr(paper, f.name)
        print(f"{f.name:<28} {q!s:<24} {'(same)' if p == q else p}")


def _print_claims(claims: list) -> None:
    """One line per claim: its verdict, name, and the measured, paper and theory values (numbers to 4 significant
    digits, as in the report; ``claims.json`` has them whole)."""
    from embgeo.lab.report import cell_text

    for c in claims:
        word = "FAILS" if c.verdict == "fails" else c.verdict
        print(f"  [{'check: ' + word if c.check else word}] {c.name}: measured {cell_text(c.measured)}"
              + (f", paper {cell_text(c.paper)}" if c.paper is not None else "")
              + (f", {c.reference_source} {cell_text(c.reference)}" if c.reference is not None else "")
              + (f", theory {cell_text(c.theory)}" if c.theory is not None else ""))


#: Runs estimated above this many seconds print their estimate before they start.
ESTIMATE_ABOVE_S = 600.0


def _print_estimate(selected: list[str], scale: str, runs_each: int = 1, *, always: bool = False) -> None:
    """The estimated run time of ``selected`` at ``scale`` (the registry's measured times), printed before anything
    starts when above ten minutes, so that an hour-long preset is not a surprise, or ``always`` (``reproduce``:
    the total of a reproduction is its first line)."""
    from embgeo.lab.registry import get, runtime_estimate, runtime_seconds

    total, unknown = runtime_estimate(selected, scale)
    total *= runs_each
    if total <= ESTIMATE_ABOVE_S and not always:
        return
    after = ("Ctrl-C stops, the same command resumes from the finished experiments" if len(selected) > 1 else
             "Ctrl-C stops and says what the same command resumes")
    if len(unknown) == len(selected):
        print(f"estimate: none (no registered run time at {scale} scale for {', '.join(unknown[:3])}"
              + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "") + f"); {after}", flush=True)
        return
    longest = sorted(((runtime_seconds(get(n), scale) or 0.0, n) for n in selected), reverse=True)[:3]
    parts = ", ".join(f"{n} {duration_text(t)}" for t, n in longest if t)
    print(f"estimate: about {duration_text(total)} on one core at {scale} scale"
          + (f" ({runs_each} runs each)" if runs_each > 1 else "")
          + f", from the registry's run times (the longest: {parts}"
          + (f"; {len(unknown)} more without one" if unknown else "") + f"); {after}",
          flush=True)


#: A run whose settings make it longer than this (estimated) is refused: --set steps=10**12 was accepted and ran
#: with an ETA of 430,883 h (issue 37).
REFUSE_ABOVE_S = 30 * 86400.0


def _print_scaled_estimate(name: str, scale: str, overrides: dict) -> bool:
    """The estimate of a run whose ``--set`` values change a setting its time grows with (steps, epochs, trials,
    ...: :data:`embgeo.lab.registry.WORK_SETTINGS`, :func:`~embgeo.lab.registry.scaled_runtime`): printed above
    ten minutes, refused above :data:`REFUSE_ABOVE_S` before anything runs. False when no such setting is changed
    (or no time is known): the preset's estimate (:func:`_print_estimate`) applies."""
    from embgeo.lab.registry import get, scaled_runtime

    est = scaled_runtime(get(name), scale, overrides)
    if est is None:
        return False
    about = "at most about" if est.upper_bound else "about"
    if est.seconds > REFUSE_ABOVE_S:
        hours, days = (f"{x:,.0f}" if x < 1e9 else f"{x:.3g}" for x in (est.seconds / 3600, est.seconds / 86400))
        raise InputError(f"{name} would take {about} {hours} h ({days} days) "
                         f"on one core with these settings ({est.how}), above the {REFUSE_ABOVE_S / 86400:.0f}-day "
                         "limit; use a smaller value")
    if est.seconds > ESTIMATE_ABOVE_S:
        print(f"estimate: {about} {duration_text(est.seconds)} on one core at {scale} scale, from the registry's run "
              f"time scaled by the settings ({name}: {est.how}); Ctrl-C stops and says what the same command resumes",
              flush=True)
    return True


def cmd_run(args: argparse.Namespace) -> None:
    """Run one experiment and write config.json, claims.json, trace.csv and figures to --out."""
    from embgeo.lab.registry import parse_overrides
    from embgeo.lab.runner import run

    overrides = parse_overrides(args.set)
    if not _print_scaled_estimate(args.name, args.scale, overrides):
        _print_estimate([args.name], args.scale)

    record = run(args.name, args.scale, overrides, out=args.out, threads=args.threads,
                 workers=args.workers, scheduler=args.scheduler)
    print(f"{args.name} ({args.scale}): {record.summary()}, {record.seconds:.1f} s, written to {record.out}")
    _print_claims(record.claims)
    print("\n".join(_claims_summary({args.name: record.claims}, "the lines above and claims.json")))


#: Failing claims named at the end of ``run`` / ``reproduce``; the report lists every one.
FAILING_SHOWN = 20
#: A failing claim's line is cut to this many characters (the report has the whole name).
LINE_WIDTH = 100


def _claims_summary(claims_by_run: dict, listed_in: str) -> list[str]:
    """The end of ``run`` / ``reproduce``: the failing claims, the undecided ones counted, and a last line.

    The failing claims come under a head ("3 failing claims in 2 experiments:"), one indented line each
    ("  EXPERIMENT: NAME", cut at :data:`LINE_WIDTH` characters, at most :data:`FAILING_SHOWN` of them); a
    consistency check that does not hold is a bug and is listed with them, marked. Undecided claims (their
    certified band straddles the level) are counted, with where they are listed (``listed_in``). The last
    line tallies every run's claims: "claims: 27 of 31 hold, 3 failing, 1 undecided, 2 not applicable (a premise
    fails); consistency checks: 12 of 12 pass" (the part on premises only when some claim's premise fails).
    """
    from embgeo.lab.claims import counted, counts, tally

    def cut(text: str) -> str:
        return text if len(text) <= LINE_WIDTH else text[:LINE_WIDTH - 1] + "…"

    # the paper's failing claims (counted) and, as bugs, the failing checks, in the runs' order
    failing = [(run, c) for run, claims in claims_by_run.items() for c in claims
               if (c.check and c.ok is not True) or (counts(c) and c.verdict == "fails")]
    undecided = sum(c.verdict == "undecided" for claims in claims_by_run.values() for c in counted(claims))
    lines = []
    if failing:
        n_checks = sum(c.check for _, c in failing)
        n_runs = len({run for run, _ in failing})
        head = (f"{len(failing) - n_checks} failing claim{'' if len(failing) - n_checks == 1 else 's'}"
                + (f" and {n_checks} failing consistency check{'' if n_checks == 1 else 's'}" if n_checks else "")
                + f" in {n_runs} experiment{'' if n_runs == 1 else 's'}:")
        lines.append(head)
        for run, c in failing[:FAILING_SHOWN]:
            mark = f" (consistency check, {c.verdict})" if c.check else ""
            lines.append(cut(f"  {run}: {c.name}") + mark)
        if len(failing) > FAILING_SHOWN:
            lines.append(f"  ... and {len(failing) - FAILING_SHOWN} more, listed in {listed_in}")
    if undecided:
        lines.append(f"{undecided} undecided claim{'' if undecided == 1 else 's'} (a certified band straddles its "
                     f"level), listed in {listed_in}")
    t = tally(c for claims in claims_by_run.values() for c in claims)
    total = t["holds"] + t["fails"] + t["undecided"]
    last = f"claims: {t['holds']} of {total} hold, {t['fails']} failing, {t['undecided']} undecided"
    if t["not applicable"]:
        last += f", {t['not applicable']} not applicable (a premise fails)"
    if t["others"]:
        last += f"; statements not the papers': {t['others holding']} of {t['others']} hold"
    if t["checks"]:
        last += f"; consistency checks: {t['checks'] - t['checks failing']} of {t['checks']} pass"
    return lines + [last]


def cmd_reproduce(args: argparse.Namespace) -> int:
    """Run every experiment of a paper and write one self-contained HTML report (over seeds: a sweep); exit
    status 1 when an experiment failed to run (a failing claim is a result, not a failure)."""
    from embgeo.lab.registry import names
    from embgeo.lab.reproduce import reproduce

    if args.seeds < 1:
        raise InputError(f"--seeds: expected a positive integer, got {args.seeds}")
    _print_estimate(names(args.paper), args.scale, args.seeds, always=True)
    print(f"report: {(Path(args.out) / 'report.html').resolve()} (rewritten as each experiment finishes)", flush=True)
    made = reproduce(args.paper, args.scale, args.out, seeds=args.seeds, resume=not args.fresh, workers=args.workers,
                     scheduler=args.scheduler, threads=args.threads)
    print(f"report: {made.report.resolve()}")
    lines = _claims_summary({r.name: r.claims for r in made.records if not r.error}, "report.html")
    lines[-1] += f"; experiments that failed to run: {', '.join(made.errors)}" if made.errors else ""
    print("\n".join(lines))
    return 1 if made.errors else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run an experiment over a grid of settings and seeds on Dask, recording every run in --store; exit status 1
    when a point failed (the failures are listed, their tracebacks are in the store)."""
    from embgeo.lab.registry import parse_overrides
    from embgeo.lab.sweep import grid_points, load_spec, parse_grid, run_sweep

    runs = args.runs or str(Path(args.store).with_name(Path(args.store).stem + "-runs"))
    if args.spec:
        if args.name or args.grid or args.set or args.seeds != 1 or args.scale != "quick":
            raise InputError("--spec FILE holds the whole sweep: give no EXPERIMENT, --grid, --set, --seeds or --scale "
                             "beside it")
        points = load_spec(args.spec, runs_dir=runs)
    else:
        if not args.name:
            raise InputError("give an EXPERIMENT (see 'embgeo list') or --spec FILE")
        points = grid_points(args.name, parse_grid(args.grid), parse_overrides(args.set), args.seeds, args.scale, runs)
    summary = run_sweep(points, args.store, workers=args.workers, scheduler=args.scheduler, threads=args.threads,
                        sweep=args.name or args.spec)
    if summary.failed:
        print(f"{summary.failed} runs failed; their tracebacks: embgeo results --store {args.store} (column error)")
        return 1
    return 0


def cmd_results(args: argparse.Namespace) -> None:
    """Print or write the run store's table: one row per run, settings, scalars and claims as columns."""
    from embgeo.lab.store import write_results

    text = write_results(args.store, args.out, args.format, args.experiment)
    if args.out:
        print(f"written {text}")
    else:
        sys.stdout.write(text)


def build_parser() -> argparse.ArgumentParser:
    from embgeo.lab.registry import papers

    parser = argparse.ArgumentParser(
        prog="embgeo", description="Reproduce three papers on the geometry of learned embeddings, and compute "
                                   "their theoretical objects on your own data.")
    threads_help = "torch and BLAS threads (default 1: one per process is fastest on small shared machines)"
    parser.add_argument("--threads", type=int, default=1, help=threads_help)
    # --threads is accepted after the subcommand too; given there, it wins (SUPPRESS: absent = not set).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--threads", type=int, default=argparse.SUPPRESS, help=threads_help)
    sub = parser.add_subparsers(dest="command", required=True)

    # each paper's own commands (Paper.commands: e.g. ntp analyze / ntp probe). Loading the papers costs ~0.15 s
    # here: their modules keep torch and the other heavy imports inside the functions that run (test_cli_startup).
    registered = papers()
    for p in registered:
        if p.commands is not None:
            p.commands(sub, common)

    ls = sub.add_parser("list", help="list the registered experiments", parents=[common])
    ls.set_defaults(func=cmd_list)
    sh = sub.add_parser("show", help="one experiment: its settings at quick and paper scale", parents=[common])
    sh.add_argument("name", help="experiment name (see 'embgeo list')")
    sh.set_defaults(func=cmd_show)
    rn = sub.add_parser("run", help="run one experiment", parents=[common])
    rn.add_argument("name", help="experiment name (see 'embgeo list')")
    scale_help = "quick (minutes, the default) or paper (the paper's sizes; see 'embgeo show NAME')"
    rn.add_argument("--scale", choices=["quick", "paper"], default="quick", help=scale_help)
    rn.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value (repeatable)")
    rn.add_argument("--out", metavar="DIR", help="output directory (default runs/NAME)")
    rn.add_argument("--workers", type=int, metavar="N",
                    help="an experiment that runs a sweep (ntp-separability): its local Dask workers (default: the "
                         "cores)")
    rn.add_argument("--scheduler", metavar="ADDR",
                    help="an experiment that runs a sweep: tcp://HOST:PORT of a running Dask scheduler, or 'inline'")
    rn.set_defaults(func=cmd_run)
    rp = sub.add_parser("reproduce", help="run every experiment of a paper and write report.html", parents=[common])
    names = [p.name for p in registered]  # in the papers' order
    rp.add_argument("--paper", default="all", choices=["all", *names],
                    help=f"all (default) or one paper: {', '.join(names)} (see 'embgeo list')")
    rp.add_argument("--scale", choices=["quick", "paper"], default="quick", help=scale_help)
    rp.add_argument("--out", default="runs/reproduce", metavar="DIR", help="output directory (default runs/reproduce)")
    rp.add_argument("--fresh", action="store_true", help="re-run experiments that already finished in DIR")
    rp.add_argument("--seeds", type=int, default=1, metavar="N",
                    help="run each experiment with seeds 0..N-1 (a sweep on Dask into DIR/store.sqlite); the report "
                         "shows each claim's mean ± spread and in how many seeds it holds")
    rp.add_argument("--workers", type=int, metavar="N", help="local Dask workers with --seeds (default: the cores)")
    rp.add_argument("--scheduler", metavar="ADDR", help="an existing Dask scheduler (tcp://HOST:PORT) for --seeds")
    rp.set_defaults(func=cmd_reproduce)
    sw = sub.add_parser("sweep", help="run an experiment over a grid of settings and seeds (Dask, resumable)",
                        parents=[common], description="Run an experiment over a grid of settings and seeds on Dask; "
                        "every run is recorded in --store, and the same command again runs only what is missing.")
    sw.add_argument("name", nargs="?", metavar="EXPERIMENT", help="experiment name (see 'embgeo list')")
    sw.add_argument("--grid", action="append", metavar="KEY=V1,V2,...",
                    help="a setting and its values (repeatable; the sweep is the product of the grids)")
    sw.add_argument("--set", action="append", metavar="KEY=VALUE", help="a setting fixed for every run (repeatable)")
    sw.add_argument("--seeds", type=int, default=1, metavar="N", help="seeds 0..N-1 per grid point (default: the "
                                                                      "config's own seed)")
    sw.add_argument("--spec", metavar="FILE", help="a TOML file of [[sweep]] tables (several grids) instead")
    sw.add_argument("--store", required=True, metavar="PATH", help="the SQLite run store (created if missing)")
    sw.add_argument("--runs", metavar="DIR", help="run folders (default: STORE's name + '-runs' beside it); "
                                                  "on a cluster, a directory every worker can write")
    sw.add_argument("--scale", choices=["quick", "paper"], default="quick", help=scale_help)
    sw.add_argument("--workers", type=int, metavar="N", help="local Dask workers, one thread each (default: the cores)")
    sw.add_argument("--scheduler", metavar="ADDR",
                    help="tcp://HOST:PORT of a running Dask scheduler ('dask scheduler'); "
                                                        "'inline' runs in this process")
    sw.set_defaults(func=cmd_sweep)
    rs = sub.add_parser("results", help="the run store as a table (csv, parquet or json)", parents=[common])
    rs.add_argument("--store", required=True, metavar="PATH", help="the SQLite run store of 'embgeo sweep'")
    rs.add_argument("--experiment", metavar="NAME", help="only this experiment's runs")
    rs.add_argument("--format", choices=["csv", "parquet", "json"], default="csv", help="csv (default), parquet, json")
    rs.add_argument("--out", metavar="FILE", help="write here (default: print csv/json to stdout)")
    rs.set_defaults(func=cmd_results)
    return parser


def check_out_dir(option: str, path: str | Path | None) -> None:
    """Refuse an output directory that cannot be written, before any computing.

    A path that is a file, lies under a file, or sits in a directory without write permission is
    an :class:`InputError` naming ``option``; a missing directory is fine (it is created on writing).
    """
    if path is None:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path}: is a file; expected a directory (existing or to be created)")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(f"{option} {path}: {probe} is a file, so no directory can be created under it")
    import os

    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: {probe} is not writable")
    import tempfile

    try:  # os.access says yes to root everywhere (and /proc is not writable to anyone): try it
        os.rmdir(tempfile.mkdtemp(prefix=".embgeo-probe-", dir=probe))
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot write in {probe} ({exc.strerror or exc})") from None


def _check_outputs(args) -> None:
    """Every command's --out, checked up front (``run`` defaults to runs/NAME)."""
    if args.command == "run":
        check_out_dir("--out", args.out or Path("runs") / args.name)
    elif args.command not in ("list", "show", "sweep", "results"):  # reproduce and the papers' own commands
        check_out_dir("--out", getattr(args, "out", None))
    elif args.command == "sweep":
        if Path(args.store).is_dir():
            raise InputError(f"--store {args.store}: is a directory; expected a file (the SQLite store)")
        check_out_dir("--store", Path(args.store).parent)
        check_out_dir("--runs", args.runs)
    elif args.command == "results" and args.out:
        if Path(args.out).is_dir():
            raise InputError(f"--out {args.out}: is a directory; expected a file")
        check_out_dir("--out", Path(args.out).parent)


def main(argv: list[str] | None = None) -> int:
    """Run the command; bad input is one line ``embgeo: error: ...`` with exit 2, Ctrl-C one line with 130."""
    try:
        parser = build_parser()  # loads the papers, for their own commands
    except InputError as exc:  # no paper registered
        print(f"embgeo: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    # The CLI writes figures to files (Agg); library modules leave the backend to the user. matplotlib is not
    # imported for this: it costs ~0.3 s of every command, and most draw nothing (list, show, every refusal);
    # MPLBACKEND is read when a run first imports it.
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].use("Agg")
    else:
        os.environ["MPLBACKEND"] = "Agg"
    import warnings

    # Warnings as one line each, without the source line they were raised from.
    warnings.formatwarning = lambda message, category, *_, **__: f"embgeo: warning: {message}\n"
    if args.threads < 1:
        parser.error(f"--threads: expected a positive integer, got {args.threads}")
    if getattr(args, "seed", 0) < 0:  # a paper's command's --seed (ntp analyze, ntp probe: an int, default 0)
        parser.error(f"--seed: expected a non-negative integer, got {args.seed}")
    from embgeo.core.threads import check_thread_count, limit_threads, warn_if_oversubscribed
    from embgeo.errors import MissingDependencyError

    try:
        check_thread_count(args.threads)  # an absurd count is refused (one line) rather than warned about
        warn_if_oversubscribed(args.threads)
        _check_outputs(args)
        with limit_threads(args.threads):
            status = args.func(args)
            sys.stdout.flush()  # inside the try: a closed pipe is met here, not in the interpreter's exit flush
    except (InputError, MissingDependencyError) as exc:
        print(f"embgeo: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional package (torch, dask, ...): one line naming its extra
        from embgeo.core.lazy import missing_extra

        missing = missing_extra(exc)
        if missing is None:
            raise
        words = [args.command, *(v for k, v in sorted(vars(args).items()) if k.endswith("_command") and v)]
        print(f"embgeo: error: {' '.join(words)}: {missing}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # What the same command will do next, only as far as it is true: an experiment's own state comes from
        # the runner (embgeo.lab.runner.RunInterrupted: its checkpoint and step, or none kept).
        said = [exc.resume_hint] if hasattr(exc, "resume_hint") else []
        if args.command == "reproduce":
            said.insert(0, f"finished experiments in {args.out} are kept" + (
                ", but --fresh runs them all again: leave it out to reuse them" if args.fresh else
                " and reused by the same command"))
        elif args.command == "sweep":
            said.insert(0, f"every finished point is kept in {args.store}: the same command runs only the rest")
        elif args.command == "run" and not said:  # stopped before or after the experiment's own work
            said.append("the same command runs it again")
        print("; ".join(["embgeo: interrupted (Ctrl-C)", *said]), file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`embgeo list | head`): stop quietly, as Unix tools do. stdout is pointed at
        # devnull so that the interpreter's final flush does not raise a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, the shell's status for a tool killed by a closed pipe
    return status if isinstance(status, int) else 0  # 1: a sweep point or an experiment failed to run


if __name__ == "__main__":
    sys.exit(main())
