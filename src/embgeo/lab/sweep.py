"""Sweeps: one experiment over a grid of settings and seeds, run on Dask, indexed in a :class:`RunStore`.

A sweep is a list of :class:`Point` objects (experiment, scale, settings, seed). :func:`run_sweep` skips
the points the store already has as done, runs the others on a Dask cluster (a ``LocalCluster`` of
single-threaded worker processes by default, an existing scheduler with ``scheduler="tcp://HOST:PORT"``,
or in this process with ``scheduler="inline"``) and records each result as it arrives.

Why the client alone writes the store: SQLite must not be shared over a network filesystem, and a
cluster's workers need not see the client's disk. A worker runs the point into its run folder (where
:func:`embgeo.lab.runner.run_safely` with ``resume=True`` reuses a finished run, so a point whose result was
lost with a killed client is recovered at once) and returns the record; the client stores it in one
transaction. A killed worker's task is re-run by the Dask scheduler on another worker; a point is keyed
by its config hash, so it is stored once however often it runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
import tomllib
import traceback
import typing
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sized
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from embgeo.errors import InputError
from embgeo.lab.record import RunRecord, config_dict
from embgeo.lab.registry import get
from embgeo.lab.runner import run_safely
from embgeo.lab.settings import field_kind
from embgeo.lab.store import RunStore, owner_alive, point_key, this_process

#: Seconds between progress lines when stdout is not a terminal (the bar is shown on a terminal).
PROGRESS_EVERY = 30.0

#: The most points one sweep may have. Every point's config is built and checked before the first run, so the
#: count is checked before that: a grid of 10^8 points took gigabytes and printed nothing (issue 37). A larger
#: study is several sweeps into one store.
MAX_POINTS = 100_000


@dataclass(frozen=True)
class Point:
    """One run of a sweep. ``overrides`` are the ``--set`` values of the run (typed by the config)."""

    experiment: str
    scale: str
    overrides: tuple[tuple[str, object], ...]
    seed: int | None
    key: str
    config: Mapping
    run_dir: str


@dataclass(frozen=True)
class PointClaim:
    """A claim that does not hold in every finished run of one grid point (the point's settings without the
    seed): in how many of those ``runs`` it fails and is undecided. ``check``: a consistency check (a bug
    when it does not hold)."""

    experiment: str
    settings: tuple[tuple[str, object], ...]
    claim: str
    runs: int
    fails: int
    undecided: int
    check: bool = False


@dataclass
class SweepSummary:
    """What :func:`run_sweep` did: points in all, skipped (done before), this call's outcomes, the points
    another sweep finished while this one waited (``elsewhere``), and each failure with its last line.

    ``claims``: read from the store after the sweep, over every finished run of the sweep's points (this
    call's and earlier ones): each claim that fails or is undecided in some run of a grid point, as a
    :class:`PointClaim`; ``finished``: how many finished runs that is over."""

    total: int
    skipped: int
    done: int = 0
    failed: int = 0
    seconds: float = 0.0
    elsewhere: int = 0
    failures: list = dataclasses.field(default_factory=list)
    claims: list[PointClaim] = dataclasses.field(default_factory=list)
    finished: int = 0


def parse_grid(items: Iterable[str] | None) -> dict[str, list[str]]:
    """``["m=20,40", "S=1"]`` → ``{"m": ["20", "40"], "S": ["1"]}`` (values typed later by the config)."""
    grid: dict[str, list[str]] = {}
    for item in items or []:
        key, sep, values = item.partition("=")
        key = key.strip()
        count = values.count(",") + 1  # before splitting: the values would each become a string
        if count > MAX_POINTS:
            raise InputError(f"--grid {key}: {count:,} values, above the {MAX_POINTS:,} points one sweep may have; "
                             "use fewer values, or several sweeps into one --store")
        parts = [v.strip() for v in values.split(",")]
        if not sep or not key or not all(parts):
            raise InputError(f"--grid: expected KEY=V1,V2,..., got {item!r}")
        if key in grid:
            raise InputError(f"--grid {key}: given twice; list every value in one --grid")
        grid[key] = parts
    return grid


def grid_points(experiment: str, grid: Mapping[str, Iterable] | None = None, fixed: Mapping | None = None,
                seeds: int = 1, scale: str = "quick", runs_dir: str | Path = "sweep-runs") -> list[Point]:
    """The points of the product of ``grid``'s values, each with ``fixed`` settings and seeds 0..seeds-1.

    ``seeds == 1`` keeps the config's own seed; ``seeds > 1`` sets ``seed`` (the experiment must have one).
    Every point's config is built (and validated) here, before anything runs.
    """
    grid = {key: list(values) for key, values in (grid or {}).items()}
    fixed = dict(fixed or {})
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise InputError(f"--seeds: expected a positive integer, got {seeds!r}")
    check_grid_size(grid, seeds)
    if seeds > 1 and ("seed" in grid or "seed" in fixed):
        raise InputError("--seeds N sets the seed of each run; do not also give seed in --grid or --set")
    _check_grid_keys(experiment, grid, fixed)
    settings = []
    for values in itertools.product(*grid.values()):
        base = {**fixed, **dict(zip(grid, values, strict=True))}
        settings += [base] if seeds == 1 else [{**base, "seed": s} for s in range(seeds)]
    return make_points(experiment, settings, scale=scale, runs_dir=runs_dir)


def grid_size(grid: Mapping[str, Sized], seeds: int = 1) -> int:
    """The number of points of a grid: the product of its value counts, times ``seeds``."""
    return math.prod(len(values) for values in grid.values()) * seeds


def check_grid_size(grid: Mapping[str, Sized], seeds: int = 1) -> None:
    """Refuse a grid of more than :data:`MAX_POINTS` points, naming its size, before any point is built."""
    size = grid_size(grid, seeds)
    if size > MAX_POINTS:
        factors = [f"{key}: {len(values):,} values" for key, values in grid.items()]
        factors += [f"{seeds:,} seeds"] if seeds > 1 else []
        raise InputError(f"the sweep would have {size:,} points ({' × '.join(factors)}), above the {MAX_POINTS:,} one "
                         "sweep may have; use fewer values, or several sweeps into one --store")


def _check_grid_keys(experiment: str, grid: Mapping, fixed: Mapping) -> None:
    """A setting in both grid and --set is ambiguous; a comma-split grid over a tuple setting (dims=64,128)
    would silently sweep one-element tuples, so those need a TOML spec's arrays."""
    hints = typing.get_type_hints(get(experiment).config_cls)
    for key, values in grid.items():
        if key in fixed:
            raise InputError(f"{key}: given in both --grid and --set")
        if key in hints and field_kind(hints[key])[0] is tuple and any(isinstance(v, str) for v in values):
            raise InputError(f"--grid {key}: {key} is a list setting, so commas cannot separate grid values; "
                             f"use a TOML spec (--spec FILE) with grid = {{ {key} = [[64, 128], [256]] }}")


def make_points(experiment: str, settings: Iterable[Mapping], scale: str = "quick",
                runs_dir: str | Path = "sweep-runs") -> list[Point]:
    """One :class:`Point` per settings dict (duplicates, i.e. equal configs, kept once, in order)."""
    exp = get(experiment)
    has_seed = exp.has_seed()
    out, seen = [], set()
    for overrides in settings:
        overrides = {k: _toml_value(v) for k, v in overrides.items()}
        if "seed" in overrides and not has_seed:
            raise InputError(f"{experiment} has no 'seed' setting, so it cannot be swept over seeds")
        config = config_dict(exp.config(scale, overrides))
        key = point_key(experiment, scale, config)
        if key in seen:
            continue
        seen.add(key)
        out.append(Point(experiment, scale, tuple(overrides.items()), config.get("seed"), key, config,
                         str(Path(runs_dir) / experiment / key)))
    return out


def load_spec(path: str | Path, runs_dir: str | Path | None = None) -> list[Point]:
    """The points of a TOML sweep file: one ``[[sweep]]`` table per grid, e.g.::

        [[sweep]]
        experiment = "ntp-separability-point"
        scale = "quick"            # optional
        seeds = 3                  # optional
        grid = { m = [20, 40], ratio = [0.3, 0.5, 0.7] }
        set = { V = 2, S = 1 }     # optional

    Several tables (several grids, even several experiments) make one sweep.
    """
    path = Path(path)
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"--spec {path}: cannot read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"--spec {path}: not valid TOML ({exc})") from None
    tables = spec.get("sweep")
    if not isinstance(tables, list) or not tables:
        raise InputError(f"--spec {path}: expected one or more [[sweep]] tables")
    runs_dir = runs_dir if runs_dir is not None else path.with_suffix("").name + "-runs"
    sizes = []
    for i, table in enumerate(tables, start=1):
        unknown = set(table) - {"experiment", "scale", "seeds", "grid", "set"}
        if unknown or "experiment" not in table:
            raise InputError(f"--spec {path}: [[sweep]] #{i} needs 'experiment' and may have scale, seeds, grid, "
                             f"set" + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else ""))
        grid = table.get("grid", {})
        if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
            raise InputError(f"--spec {path}: [[sweep]] #{i}: grid must map each setting to a non-empty list")
        seeds = table.get("seeds", 1)  # a bad one is refused by grid_points, with its message
        sizes.append(grid_size(grid, seeds if isinstance(seeds, int) and seeds > 1 else 1))
    if sum(sizes) > MAX_POINTS:  # all tables counted before any point is built
        raise InputError(f"--spec {path}: the sweep would have {sum(sizes):,} points ("
                         + " + ".join(f"{n:,}" for n in sizes) + f" over its [[sweep]] tables), above the "
                         f"{MAX_POINTS:,} one sweep may have; use fewer values, or several sweeps into one --store")
    points: list[Point] = []
    for table in tables:
        points += grid_points(table["experiment"], table.get("grid", {}), table.get("set", {}),
                              table.get("seeds", 1), table.get("scale", "quick"), runs_dir)
    keys = set()
    return [p for p in points if not (p.key in keys or keys.add(p.key))]


@dataclass
class PointResult:
    """What one point's run hands back to the client (from a worker, or inline): the record of the run (a failed
    one has ``record.error``), where it ran and with how many torch threads (``worker``), and its trace file."""

    record: RunRecord
    worker: str = ""
    trace: str | None = None

    @property
    def failed(self) -> bool:
        return self.record.error is not None


def run_point(point: Point, threads: int | None = 1) -> PointResult:
    """Run one point into its run folder and return its result (on a worker, or inline).

    An exception inside the experiment is a failed record with its traceback (the sweep goes on;
    :func:`~embgeo.lab.runner.run_safely`); KeyboardInterrupt propagates. ``threads`` is the torch/BLAS thread
    count the point runs with, and that of any sweep the experiment runs inside itself; ``worker`` says where it
    ran and with how many torch threads, so a test can see that the setting reached the worker.
    """
    import matplotlib

    matplotlib.use("Agg")  # a worker writes figures to files, often from a non-main thread
    import torch

    from embgeo.core.threads import limit_threads

    with limit_threads(threads):
        where = f"{socket.gethostname()}:{os.getpid()} threads={torch.get_num_threads()}"
        record = run_safely(point.experiment, point.scale, dict(point.overrides), out=point.run_dir, resume=True,
                            threads=threads)
    trace = Path(record.out) / "trace.csv"
    return PointResult(record, where, str(trace) if not record.error and trace.exists() else None)


def run_sweep(points: list[Point], store: str | Path, *, workers: int | None = None, scheduler: str | None = None,
              threads: int | None = 1, retries: int = 1, sweep: str | None = None,
              echo: Callable[[str], object] = print) -> SweepSummary:
    """Run every point the store does not have as done; returns the counts and the failures.

    ``scheduler``: None starts a LocalCluster of ``workers`` processes (default: the number of cores)
    with one thread each; ``"tcp://HOST:PORT"`` uses a running Dask scheduler; ``"inline"`` runs in this
    process, one point after another. The scheduler is checked and connected before the store is touched.
    ``threads``: torch/BLAS threads of each point (where it runs). ``retries``: Dask re-runs of a task whose
    worker raised outside the experiment (a task on a killed worker is re-scheduled by Dask itself).

    A point is claimed in the store before it runs (:meth:`RunStore.claim`): a point that another live
    sweep is running is not run again but waited for (and run here if that sweep dies or is interrupted).
    Ctrl-C cancels the remaining tasks, marks this sweep's unfinished points ``interrupted`` and stops the
    cluster; finished points are in the store and the same call resumes.
    """
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise InputError(f"--workers: expected a positive integer, got {workers!r}")
    check_scheduler(scheduler)
    if workers is not None and scheduler is not None:
        raise InputError("--workers applies to the local cluster only; an existing cluster has its own workers")
    t0 = time.perf_counter()
    with _dask_client(workers, scheduler) as client, RunStore(store) as st:
        before = st.statuses([p.key for p in points])
        for p in points:
            st.queue(p.key, experiment=p.experiment, scale=p.scale, seed=p.seed, config=dict(p.config), sweep=sweep)
        todo = [p for p in points if before.get(p.key) != "done"]
        summary = SweepSummary(total=len(points), skipped=len(points) - len(todo))
        again = Counter(before.get(p.key) for p in todo if before.get(p.key) in ("failed", "running", "interrupted"))
        echo(f"sweep: {len(points)} point{'' if len(points) == 1 else 's'}, {summary.skipped} already done (skipped), "
             f"{len(todo)} to run" + (" (" + ", ".join(f"{n} {status} before" for status, n in sorted(again.items()))
                                      + ")" if again else ""))
        runner = _run_inline if client is None else _run_dask
        ctx = _Run(st, summary, this_process(), threads, retries, client)
        while todo:
            runner(todo, ctx)
            todo = _wait_for_others(ctx, echo)
        rows = st.rows_of([p.key for p in points])
    summary.claims, summary.finished = point_claims(points, rows)
    summary.seconds = time.perf_counter() - t0
    echo(f"sweep: {summary.done} done, {summary.failed} failed, {summary.skipped} skipped"
         + (f" ({summary.elsewhere} finished by another sweep)" if summary.elsewhere else "")
         + f", {summary.seconds:.1f} s; store {store}")
    for p, line in summary.failures[:FAILURES_SHOWN]:
        echo(f"  failed: {p.experiment} {_settings_text(p)}: {line}")
    if len(summary.failures) > FAILURES_SHOWN:
        echo(f"  ... and {len(summary.failures) - FAILURES_SHOWN} more")
    for line in claims_lines(summary, points, store):
        echo(line)
    return summary


def _point_of(p: Point) -> tuple:
    """The grid point of a run: its experiment, scale and config without the seed."""
    config = {k: v for k, v in p.config.items() if k != "seed"}
    return p.experiment, p.scale, json.dumps(config, sort_keys=True, default=str)


def point_claims(points: list[Point], rows: Mapping[str, dict]) -> tuple[list[PointClaim], int]:
    """The claims that fail or are undecided in some finished run of a grid point, and the number of finished
    runs read. ``rows``: the store's rows of the points (:meth:`RunStore.rows_of`); a run that failed or did not
    finish has no claims and is not counted. Points and claims keep their order."""
    groups: dict[tuple, list[Point]] = {}
    for p in points:
        groups.setdefault(_point_of(p), []).append(p)
    out, finished = [], 0
    for members in groups.values():
        claims = [rows[p.key]["claims"] or [] for p in members if (rows.get(p.key) or {}).get("status") == "done"]
        finished += len(claims)
        counts: dict[str, list] = {}  # name -> [fails, undecided, check]
        for run in claims:
            for c in run:
                entry = counts.setdefault(c["name"], [0, 0, bool(c.get("check"))])
                if not c.get("applicable", True):
                    continue  # its premise fails in this run: neither a failure nor undecided
                entry[0] += c.get("ok") is False
                entry[1] += c.get("ok") is None
        settings = tuple((k, v) for k, v in members[0].overrides if k != "seed")
        out += [PointClaim(members[0].experiment, settings, name, len(claims), fails, undecided, check)
                for name, (fails, undecided, check) in counts.items() if fails or undecided]
    return out, finished


#: Claims listed by point at the end of a sweep (the store has every run's: ``embgeo results``).
CLAIMS_SHOWN = 30
#: A claim's name is cut to this many characters in that list.
CLAIM_WIDTH = 80


def claims_lines(summary: SweepSummary, points: list[Point], store: str | Path) -> list[str]:
    """The summary's claims as lines: "point lr=0.5, d=60: 'NAME' fails in 3/3 seeds" per claim that does not hold
    in every run of a grid point, or that every claim holds in every finished run.

    A point is named by the settings that vary between the sweep's points of its experiment (the seed left out;
    the --set ones are the same everywhere), and with several experiments by the experiment too."""
    if not summary.finished:
        return []
    if not summary.claims:
        return [f"sweep: every claim holds in every finished run ({summary.finished})"]
    experiments = {p.experiment for p in points}
    varying = {e: _varying(p for p in points if p.experiment == e) for e in experiments}
    lines = [f"sweep: claims that do not hold in every run of their grid point (of {summary.finished} finished "
             "runs):"]
    for pc in summary.claims[:CLAIMS_SHOWN]:
        shown = [f"{k}={v}" for k, v in pc.settings if k in varying[pc.experiment]]
        name = " ".join(([pc.experiment] if len(experiments) > 1 else []) + [", ".join(shown) or "(defaults)"])
        # A point's runs differ only by their seed: one run is just "fails", several are counted.
        counts = [word if pc.runs == 1 else f"{word} in {n}/{pc.runs} seeds"
                  for word, n in (("fails", pc.fails), ("undecided", pc.undecided)) if n]
        claim = pc.claim if len(pc.claim) <= CLAIM_WIDTH else pc.claim[:CLAIM_WIDTH - 1] + "…"
        lines.append(f"  point {name}: '{claim}'" + (" (consistency check)" if pc.check else "") + " "
                     + ", ".join(counts))
    if len(summary.claims) > CLAIMS_SHOWN:
        lines.append(f"  ... and {len(summary.claims) - CLAIMS_SHOWN} more: embgeo results --store {store} "
                     "(columns ok.*)")
    return lines


def _varying(points: Iterable[Point]) -> set[str]:
    """The settings (not the seed) whose values differ between ``points``; all of them when none differ."""
    values: dict[str, set] = {}
    for p in points:
        for k, v in p.overrides:
            if k != "seed":
                values.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    differ = {k for k, vs in values.items() if len(vs) > 1}
    return differ or set(values)


#: Failed points listed by name at the end of a sweep (the store has every traceback).
FAILURES_SHOWN = 20
#: Seconds between looks at the store while points of another sweep are running.
POLL_SECONDS = 2.0
_SCHEDULER = re.compile(r"^(tcp|tls)://(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):\d{1,5}$")


def check_scheduler(scheduler: str | None) -> None:
    """None, 'inline' or a Dask scheduler's address tcp://HOST:PORT (or tls://); anything else is refused here,
    before a cluster is looked for or the store is written."""
    if scheduler is None or scheduler == "inline" or _SCHEDULER.match(scheduler):
        return
    hint = (" (http:// is the scheduler's dashboard; its address is tcp://HOST:8786)"
            if scheduler.startswith(("http://", "https://")) else
            " (the port is missing)" if re.match(r"^(tcp|tls)://[^:/]+$", scheduler) else "")
    raise InputError(f"--scheduler {scheduler}: expected a Dask scheduler address tcp://HOST:PORT as 'dask scheduler' "
                     f"prints it, or 'inline'{hint}")


@contextmanager
def _dask_client(workers: int | None, scheduler: str | None):
    """None for 'inline', else a connected distributed Client (on a new LocalCluster when ``scheduler`` is
    None); the cluster is closed on exit."""
    if scheduler == "inline":
        yield None
        return
    from distributed import Client, LocalCluster

    cluster = None
    if scheduler is None:
        # Stopping on Ctrl-C makes Dask log warnings and heartbeat tracebacks from every worker; the sweep says
        # it in one line. A task's own error is stored with its traceback, a lost worker's as KilledWorker, so
        # the local cluster's log adds nothing. Worker processes inherit this environment variable, and start
        # with SIGINT ignored: Ctrl-C at a terminal reaches the whole process group, and the client alone stops
        # them (each would otherwise print a KeyboardInterrupt traceback).
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")
        logging.getLogger("distributed").setLevel(logging.CRITICAL)
        with _sigint_ignored():
            cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                                   dashboard_address=":0")
    try:
        try:
            client = Client(cluster if cluster is not None else scheduler, timeout="20s")
        except (OSError, ValueError) as exc:
            raise InputError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
        try:
            yield client
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()


@contextmanager
def _sigint_ignored():
    """SIGINT ignored while child processes start (they keep it ignored); restored after. Only the main thread
    may change handlers: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass
class _Run:
    """What the runners share: the store, the counts, who claims (``owner``), the thread setting, the client."""

    st: RunStore
    summary: SweepSummary
    owner: str
    threads: int | None
    retries: int
    client: object = None
    elsewhere: list = dataclasses.field(default_factory=list)  # points another live sweep holds


def _settings_text(p: Point) -> str:
    return " ".join(f"{k}={v}" for k, v in p.overrides) or "(defaults)"


def _record(st: RunStore, point: Point, result: PointResult, summary: SweepSummary) -> None:
    """Store one point's result (the store holds claims as dicts: :meth:`~embgeo.lab.claims.Claim.to_dict`)."""
    rec = result.record
    if not result.failed:
        st.mark_done(point.key, seconds=rec.seconds, claims=[c.to_dict() for c in rec.claims], scalars=rec.scalars,
                     run_dir=rec.out, figures=rec.figures, versions=rec.versions, trace=result.trace,
                     worker=result.worker)
        summary.done += 1
    else:
        st.mark_failed(point.key, error=rec.error, worker=result.worker)
        summary.failed += 1
        summary.failures.append((point, rec.error_line))


def _run_inline(todo: list[Point], ctx: _Run) -> None:
    """One point after another in this process, each claimed just before it runs."""
    current = None
    try:
        with _Progress(len(todo)) as progress:
            for p in todo:
                if not ctx.st.claim(p.key, owner=ctx.owner, worker="inline"):
                    ctx.elsewhere.append(p)
                    continue
                current = p.key
                _record(ctx.st, p, run_point(p, ctx.threads), ctx.summary)
                current = None
                progress.update(ctx.summary)
    except KeyboardInterrupt:
        if current is not None:
            ctx.st.mark_interrupted([current], owner=ctx.owner)
        raise


def _run_dask(todo: list[Point], ctx: _Run) -> None:
    """Every point claimed and submitted at once; results stored as they arrive."""
    from distributed import as_completed

    client, futures, claimed = ctx.client, {}, []
    try:
        for p in todo:
            if not ctx.st.claim(p.key, owner=ctx.owner, worker="dask"):
                ctx.elsewhere.append(p)
                continue
            claimed.append(p.key)
            futures[client.submit(run_point, p, ctx.threads, key=f"embgeo-{p.key}-{uuid.uuid4().hex[:8]}",
                                  pure=False, retries=ctx.retries)] = p
        with _Progress(len(futures)) as progress:
            for fut in as_completed(futures):
                point = futures.pop(fut)
                _record(ctx.st, point, _result(fut, point), ctx.summary)
                progress.update(ctx.summary)
    except KeyboardInterrupt:
        # Every point this call claimed, not only those still in ``futures``: Ctrl-C can land between a
        # result's pop and its store write, and that point would stay 'running'. The store changes only the
        # points still running under this owner, so a point already stored as done or failed keeps its row.
        ctx.st.mark_interrupted(claimed, owner=ctx.owner)
        client.cancel(list(futures))
        raise


def _wait_for_others(ctx: _Run, echo: Callable[[str], object]) -> list[Point]:
    """Wait while another live sweep runs points of this one (a point it finishes, done or failed, is counted
    as such); returns the points to run here after all: those whose sweep died or was interrupted."""
    pending, ctx.elsewhere = ctx.elsewhere, []
    if not pending:
        return []
    echo(f"sweep: {len(pending)} point{'' if len(pending) == 1 else 's'} being run by another sweep on this store: "
         "waiting for them")
    while True:
        statuses = ctx.st.statuses([p.key for p in pending])
        holders = ctx.st.holders([p.key for p in pending])
        finished = [p for p in pending if statuses.get(p.key) in ("done", "failed")]
        for p in finished:
            if statuses[p.key] == "failed":
                row = ctx.st.get(p.key)
                lines = [ln for ln in (row["error"] or "").strip().splitlines() if ln.strip()]
                ctx.summary.failed += 1
                ctx.summary.failures.append((p, lines[-1].strip() if lines else "failed"))
            else:
                ctx.summary.elsewhere += 1
        free = [p for p in pending if statuses.get(p.key) not in ("done", "failed", "running")
                or (p.key in holders and not owner_alive(holders[p.key]))]
        pending = [p for p in pending if p not in finished and p not in free]
        if free or not pending:
            return free
        time.sleep(POLL_SECONDS)


def _result(fut, point: Point) -> PointResult:
    """A task's result; a task Dask gave up on (e.g. its workers kept dying) is a failed point."""
    try:
        return fut.result()
    except Exception:  # noqa: BLE001 - KilledWorker and the like: stored, the sweep goes on
        error = f"the task did not finish on the cluster:\n{traceback.format_exc()}"
        return PointResult(RunRecord(name=point.experiment, scale=point.scale, config=dict(point.config),
                                     out=point.run_dir, error=error))


class _Progress:
    """A tqdm bar done/total on a terminal; off a terminal, one line every PROGRESS_EVERY seconds."""

    def __init__(self, total: int):
        from tqdm import tqdm

        self.total, self.last = total, time.monotonic()
        self.tty = sys.stderr.isatty()
        self.bar = tqdm(total=total, desc="sweep", unit="run", disable=not self.tty)

    def __enter__(self):
        return self

    def update(self, summary: SweepSummary) -> None:
        finished = summary.done + summary.failed
        self.bar.update(finished - self.bar.n)
        self.bar.set_postfix(failed=summary.failed, refresh=False)
        if not self.tty and time.monotonic() - self.last >= PROGRESS_EVERY:
            self.last = time.monotonic()
            print(f"sweep: {finished}/{self.total} runs finished ({summary.failed} failed)", flush=True)

    def __exit__(self, *exc):
        self.bar.close()


def _toml_value(value):
    """TOML arrays as tuples (the configs' sequence type); everything else as given."""
    return tuple(value) if isinstance(value, list) else value
