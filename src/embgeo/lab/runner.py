"""Run one registered experiment into its folder and return its :class:`~embgeo.lab.record.RunRecord`.

:func:`run` resumes: with ``resume=True`` a finished run whose ``config.json`` matches is loaded, not
re-run; inside a run, long trainings keep checkpoints in ``DIR/checkpoints`` (removed when the run
ends; :meth:`~embgeo.lab.context.RunContext.checkpoint`), so an interrupted experiment resumes its
training too. :func:`run_safely` is the one place where an experiment's exception becomes a failed
record (``reproduce`` and every sweep point go through it).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
import traceback
from pathlib import Path

from embgeo.core.device import DEFAULT_DEVICE, check_device_name, device_label, resolve_device
from embgeo.lab.claims import Claim
from embgeo.lab.context import RunContext
from embgeo.lab.record import RunRecord, config_dict, jsonable_scalars, load, package_versions, save
from embgeo.lab.registry import Experiment, get


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C inside an experiment's run (:func:`run`): which experiment, and what the same call does next.

    A :class:`KeyboardInterrupt`, so whatever lets Ctrl-C through (:func:`run_safely`, reproductions, sweeps) lets
    it through; the CLI prints :attr:`resume_hint`. ``checkpoints`` are the run's checkpoint files
    (``DIR/checkpoints/*.pt``) with where each stands ("epoch 40", "step 120"; None if unreadable).
    """

    def __init__(self, name: str, out: Path, checkpoints: list[tuple[Path, str | None]],
                 stores: list[Path] | None = None):
        self.name, self.out, self.checkpoints = name, Path(out), checkpoints
        #: The inner sweeps' run stores in the run's folder (an experiment that is a sweep, ntp-separability).
        self.stores = sorted(self.out.glob("*.sqlite")) if stores is None else stores
        super().__init__(self.resume_hint)

    def __reduce__(self):  # a Dask worker sends it back pickled: rebuilt from these, not from the message
        return type(self), (self.name, self.out, self.checkpoints, self.stores)

    @property
    def resume_hint(self) -> str:
        """One sentence: where the interrupted run's state is kept and what the same command does with it."""
        said = []
        if len(self.checkpoints) == 1:
            path, at = self.checkpoints[0]
            said.append(f"the checkpoint of {self.name} is kept in {path.parent}: the same command resumes its "
                        f"training from {at or 'there'}")
        elif self.checkpoints:
            listed = "; ".join(f"{path.name} at {at or 'an unreadable point'}" for path, at in self.checkpoints)
            said.append(f"the checkpoints of {self.name} are kept in {self.checkpoints[0][0].parent} ({listed}): the "
                        "same command resumes its trainings from them")
        if self.stores:
            said.append(f"the finished points of the {self.name} sweep are kept in {', '.join(map(str, self.stores))}: "
                        "the same command runs only the rest")
        if not said:
            said.append(f"{self.name} wrote no checkpoint (only long trainings keep one): the same command runs it "
                        "again from the start")
        return "; ".join(said)


def _checkpoints_of(out: Path) -> list[tuple[Path, str | None]]:
    """The checkpoint files in the run's folder (``out/checkpoints/*.pt``), each with where it stands
    (:func:`~embgeo.core.loop.saved_progress`).

    All of them, not only those named with the run's config: an experiment may checkpoint a training of a derived
    config (collapse-uniform's h*, with LayerNorm), and a file of another config (an earlier interrupted run with
    other settings in the same folder) is only left unused.
    """
    files = sorted((Path(out) / "checkpoints").glob("*.pt"))
    if not files:
        return []
    from embgeo.core.loop import saved_progress  # torch: only when there is a checkpoint to read

    return [(p, saved_progress(p)) for p in files]


def run(name: str, scale: str = "quick", overrides: dict | None = None, out: str | Path | None = None,
        resume: bool = False, *, threads: int | None = None, workers: int | None = None,
        scheduler: str | None = None) -> RunRecord:
    """Run experiment ``name`` at ``scale`` and write its outputs to ``out`` (default runs/NAME).

    With ``resume=True`` a previous run in ``out`` with the same config is loaded, not re-run.
    Exceptions inside the experiment propagate (:func:`run_safely` records them instead).

    ``threads``, ``workers`` and ``scheduler`` are how a sweep the experiment runs inside itself is run (its
    :class:`~embgeo.lab.context.RunContext`); they never change a result.

    ``overrides["device"]`` ("cpu", "cuda", "cuda:N"; ``--set device=cuda``) is not a config field of any
    experiment: it sets :data:`embgeo.core.device.DEFAULT_DEVICE` for the run, so every trainer the
    experiment calls without a device runs there; it is checked first (an unavailable device is an
    :class:`InputError` before any work) and recorded in record.json. Results do not depend on it beyond
    rounding, so a finished run is reused on any device.
    """
    exp = get(name)
    overrides = dict(overrides or {})
    device_name = check_device_name(overrides.pop("device", "cpu"))  # a misspelt name is refused without torch
    cfg = exp.config(scale, overrides)  # bad settings are refused before torch is imported (resolve_device)
    device = resolve_device(device_name)
    out = Path(out) if out is not None else Path("runs") / name
    config = config_dict(cfg)
    if resume and not exp.derived:
        previous = load(out)
        if previous is not None and previous.error is None and (previous.name, previous.scale, previous.config) == (
                name, scale, config):
            previous.reused = True
            return previous
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("claims.json", "record.json"):  # a crash must not leave an old result looking current
        (out / stale).unlink(missing_ok=True)
    ctx = RunContext(out_dir=out, threads=threads, workers=workers, scheduler=scheduler)
    t0 = time.perf_counter()
    device_token = DEFAULT_DEVICE.set(str(device))
    try:
        result = exp.run(cfg, ctx)
    except KeyboardInterrupt as exc:  # say what the same call will do: resume from checkpoints, or start over
        raise RunInterrupted(name, out, _checkpoints_of(out)) from exc
    finally:
        DEFAULT_DEVICE.reset(device_token)
    figures = _save_figures(result.figures, out)
    seconds = time.perf_counter() - t0  # with the figures' files: a few seconds of a quick run are PNG and PDF
    claims = paper_column(result.claims, scale == "paper" and at_paper_config(exp, cfg))
    claims = [Claim.from_dict(c.to_dict()) for c in claims]  # the values claims.json holds: a reused run reads alike
    if result.trace is not None:
        result.trace.to_csv(out / "trace.csv", index=False)
    record = RunRecord(name=name, paper=exp.paper, title=exp.title, scale=scale, config=config, claims=claims,
                       figures=figures, seconds=seconds, versions=package_versions(), out=str(out),
                       notes=list(result.notes), scalars=jsonable_scalars(result.scalars),
                       device=device_label(device))
    save(record)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the results are written: nothing left to resume
    return record


def run_safely(name: str, scale: str = "quick", overrides: dict | None = None, out: str | Path | None = None,
               resume: bool = False, **context) -> RunRecord:
    """:func:`run`, with an exception inside the experiment returned as a failed record (its traceback, ending with
    the exception, in ``error``; the experiment's paper and title kept, so the report files it under its paper).
    KeyboardInterrupt propagates: finished runs are kept and the caller says so."""
    t0 = time.perf_counter()
    try:
        return run(name, scale, overrides, out, resume, **context)
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - one broken experiment must not hide the others
        return failed_record(name, scale, Path(out) if out is not None else Path("runs") / name,
                             traceback.format_exc(), seconds=time.perf_counter() - t0)


def failed_record(name: str, scale: str, out: str | Path, error: str, seconds: float = 0.0,
                  config: dict | None = None) -> RunRecord:
    """The record of a run of ``name`` that did not finish: ``error`` says why; paper and title from the registry
    when it knows the name."""
    try:
        exp = get(name)
        paper, title = exp.paper, exp.title
    except Exception:  # noqa: BLE001 - an unknown name still gets its record
        paper, title = "", ""
    return RunRecord(name=name, paper=paper, title=title, scale=scale, config=dict(config or {}), seconds=seconds,
                     versions=package_versions(), out=str(out), error=error)


def at_paper_config(exp: Experiment, cfg) -> bool:
    """Whether ``cfg`` is the paper preset, up to the seed (a paper fixes sizes and settings, not our seed)."""
    paper = exp.config("paper")
    if dataclasses.is_dataclass(cfg) and any(f.name == "seed" for f in dataclasses.fields(cfg)):
        cfg = dataclasses.replace(cfg, seed=paper.seed)
    return cfg == paper


def paper_column(claims: list[Claim], at_paper_config: bool) -> list[Claim]:
    """The claims with their ``paper`` (and ``reference``) values kept only where the run has the paper's configuration.

    A printed number beside a run of other sizes or settings reads as a (failed) comparison; off the
    paper's configuration it moves into the note ("paper, at its configuration: …") unless the claim
    says its printed value holds at any scale (``Claim.any_scale``).
    """
    out = []
    for c in claims:
        if c.paper is not None and not at_paper_config and not c.any_scale:
            moved = f"paper, at its own configuration: {c.paper}"
            c = dataclasses.replace(c, paper=None, note=f"{c.note}; {moved}" if c.note else moved)
        if c.reference is not None and not at_paper_config and not c.any_scale:  # the same for other sources
            moved = f"{c.reference_source}, at the paper's configuration: {c.reference}"
            c = dataclasses.replace(c, reference=None, note=f"{c.note}; {moved}" if c.note else moved)
        out.append(c)
    return out


def _save_figures(figures: dict, out: Path) -> list[str]:
    import matplotlib.pyplot as plt

    saved = []
    for fname, fig in figures.items():
        for ext in ("png", "pdf"):
            fig.savefig(out / f"{fname}.{ext}", dpi=120, bbox_inches="tight")
        plt.close(fig)
        saved.append(fname)
    return saved
