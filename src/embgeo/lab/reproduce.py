"""Reproduce papers: run their experiments (once, or over seeds as a sweep) and write one HTML report.

``embgeo reproduce`` is :func:`reproduce`. With one seed and no cluster the experiments run one after
another in this process into ``OUT/NAME`` (a finished run is reused, so an interrupted reproduction
resumes); with ``seeds > 1`` or a cluster (``workers``, ``scheduler``) they run as one sweep
(:mod:`embgeo.lab.sweep`) into ``OUT/seed-I/NAME``, recorded in ``OUT/store.sqlite``, and each claim is
reported over the seeds. Either way every experiment gets a :class:`~embgeo.lab.record.RunRecord` —
a failed one with its error — and the report is written from those records: at the start, after each
experiment (one after another) or before and after the sweep (over seeds), and at the end, each time with
the experiments still to run named at its top, so a stopped reproduction leaves a report of what it did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from embgeo.errors import InputError
from embgeo.lab.claims import aggregate_claims
from embgeo.lab.record import RunRecord, load
from embgeo.lab.registry import get, names
from embgeo.lab.report import write_report
from embgeo.lab.runner import failed_record, run_safely
from embgeo.lab.store import RunStore
from embgeo.lab.sweep import make_points, run_sweep


@dataclass
class Reproduction:
    """What :func:`reproduce` made: one record per experiment (over seeds: claims aggregated) and the report."""

    records: list[RunRecord]
    report: Path

    @property
    def errors(self) -> list[str]:
        """The experiments that failed to run."""
        return [r.name for r in self.records if r.error]


def reproduce(paper: str = "all", scale: str = "quick", out: str | Path = "runs/reproduce", *, seeds: int = 1,
              resume: bool = True, experiments: list[str] | None = None, workers: int | None = None,
              scheduler: str | None = None, threads: int | None = None,
              echo: Callable[[str], object] = print) -> Reproduction:
    """Run every experiment of ``paper`` (or only ``experiments``) and write ``out/report.html``.

    The report is there from the start and rewritten as experiments finish (those still to run named at its
    top), so it can be opened while the reproduction runs and is left behind if it is stopped.
    ``seeds``: run each experiment with seeds 0..seeds-1 (as a sweep; experiments without a seed setting run
    once). ``workers``/``scheduler``: the sweep's Dask cluster (giving either runs the reproduction as a sweep even
    with one seed). ``threads``: torch/BLAS threads of each run. ``resume`` False runs finished experiments again.
    A failing experiment is recorded with its traceback and reported under its paper, not fatal to the others.
    """
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise InputError(f"--seeds: expected a positive integer, got {seeds}")
    out = Path(out)
    selected = _select(paper, experiments)
    over_seeds = seeds > 1 or workers is not None or scheduler is not None
    title = f"embgeo reproduction: {paper}, {scale} scale" + (f", {seeds} seeds" if over_seeds else "")

    def report(records: list[RunRecord]) -> Path:
        """The report of ``records`` so far, the other selected experiments named as still to run."""
        done = {r.name for r in records}
        return write_report(records, out / "report.html", title=title,
                            pending=[n for n in selected if n not in done])

    report([])
    if over_seeds:
        records = _over_seeds(selected, scale, out, seeds, workers, scheduler, threads, resume, echo, report)
    else:
        records = _in_order(selected, scale, out, resume, threads, echo, report)
    return Reproduction(records, report(records))


def _select(paper: str, experiments: list[str] | None) -> list[str]:
    selected = names(paper)
    if experiments is not None:
        unknown = sorted(set(experiments) - set(selected))
        if unknown:
            raise InputError(f"experiments: not experiments of {paper!r}: {', '.join(unknown)}")
        selected = [n for n in selected if n in experiments]
    return selected


def _in_order(selected: list[str], scale: str, out: Path, resume: bool, threads: int | None,
              echo: Callable[[str], object], report: Callable[[list[RunRecord]], object]) -> list[RunRecord]:
    """One run per experiment, one after another, into ``out/NAME``; ``report(records)`` after each."""
    records = []
    for i, name in enumerate(selected, start=1):
        echo(f"[{i}/{len(selected)}] {name} ({scale}) ...")
        record = run_safely(name, scale, out=out / name, resume=resume, threads=threads)
        echo(f"    {record.status()}, {record.seconds:.1f} s" + (" (reused)" if record.reused else ""))
        records.append(record)
        report(records)
    return records


def _over_seeds(selected: list[str], scale: str, out: Path, seeds: int, workers: int | None, scheduler: str | None,
                threads: int | None, resume: bool, echo: Callable[[str], object],
                report: Callable[[list[RunRecord]], object]) -> list[RunRecord]:
    """Every experiment with seeds 0..seeds-1 as one sweep, then one record per experiment over its seeds;
    ``report(records)`` after the sweep (the derived experiments still to run) and after each derived one.

    Runs go to ``out/seed-I/NAME`` (so a table built from sibling runs finds those of its seed) and are recorded
    in ``out/store.sqlite``; a repeated call runs only what is missing (``resume`` False empties the store and
    marks the run folders unfinished first, so everything runs again). Tables built from other runs (derived
    experiments) are made per seed after the sweep.
    """
    if not resume:
        for stale in out.glob("store.sqlite*"):
            stale.unlink()
    points, derived = [], []
    for name in selected:
        exp = get(name)
        if exp.derived:
            derived.append(name)
            continue
        settings = [{"seed": s} for s in range(seeds)] if exp.has_seed() else [{}]
        for i, p in enumerate(make_points(name, settings, scale=scale)):
            points.append(dataclasses.replace(p, run_dir=str(out / f"seed-{i}" / name)))
    if not resume:  # a finished run folder would be reused by the worker (resume=True): make it unfinished
        for p in points:
            (Path(p.run_dir) / "record.json").unlink(missing_ok=True)
    run_sweep(points, out / "store.sqlite", workers=workers, scheduler=scheduler, threads=threads,
              sweep=f"reproduce --seeds {seeds}", echo=echo)
    with RunStore(out / "store.sqlite") as st:
        rows = {p.key: st.get(p.key) for p in points}
    by_name: dict[str, list[RunRecord]] = {}
    for p in points:
        row = rows[p.key]
        rec = load(p.run_dir) if row and row["status"] == "done" else None
        if rec is None:
            rec = failed_record(p.experiment, scale, p.run_dir, (row or {}).get("error") or "not run",
                                config=dict(p.config))
        by_name.setdefault(p.experiment, []).append(rec)
    report([_one_record(by_name[name]) for name in selected if name in by_name])
    for name in derived:  # after the sweep: they read their seed's sibling runs
        for i in range(seeds):
            by_name.setdefault(name, []).append(run_safely(name, scale, out=out / f"seed-{i}" / name,
                                                           threads=threads))
        report([_one_record(by_name[n]) for n in selected if n in by_name])
    return [_one_record(by_name[name]) for name in selected]


def _one_record(recs: list[RunRecord]) -> RunRecord:
    """One record of an experiment's per-seed records: claims aggregated, figures of the first seed that ran."""
    ok = [r for r in recs if not r.error]
    if not ok:
        return recs[0]
    first = ok[0]
    notes = list(first.notes)
    if len(recs) > 1:
        notes.insert(0, f"{len(ok)} seeds (0..{len(recs) - 1}); figures and notes of seed {recs.index(first)}; "
                        "measured = mean over seeds, ± the sample standard deviation.")
    failed = [i for i, r in enumerate(recs) if r.error]
    if failed:
        notes.insert(0, f"seeds {failed} failed to run: {recs[failed[0]].error_line}")
    return dataclasses.replace(first, claims=aggregate_claims([r.claims for r in ok]),
                               seconds=sum(r.seconds for r in ok), notes=notes)
