"""Run registered experiments, write their outputs, and reproduce a paper into one report.

Output of one run in ``DIR``: ``config.json`` (name, scale, the config), ``claims.json`` (a list
of claim objects), ``trace.csv`` when the experiment has a trace, each figure as ``NAME.png`` and
``NAME.pdf``, and ``record.json`` (run time, package versions, notes). :func:`reproduce` reuses a
finished run whose ``config.json`` matches, so an interrupted reproduction resumes where it stopped;
inside a run, long trainings keep checkpoints in ``DIR/checkpoints`` (removed when the run ends), so
an interrupted experiment resumes its training too.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from embgeo.core.device import DEFAULT_DEVICE, device_label, resolve_device
from embgeo.errors import InputError
from embgeo.experiments.registry import RUN_DIR, _jsonable, counted, get, is_check, names


@dataclass
class RunRecord:
    """A finished (or failed) run as stored on disk."""

    name: str
    scale: str
    config: dict
    claims: list[dict]
    figures: list[str]
    seconds: float
    versions: dict
    out: str
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    reused: bool = False
    scalars: dict = field(default_factory=dict)
    device: str = "cpu"

    @property
    def total(self) -> int:
        """Claims that count: every claim but the consistency checks (:func:`~embgeo.experiments.registry.as_check`)."""
        return len(counted(self.claims))

    @property
    def passed(self) -> int:
        """Counted claims that hold (undecided ones are apart: see :func:`~embgeo.experiments.registry.banded`)."""
        return sum(c.get("ok") is True for c in counted(self.claims))

    @property
    def undecided(self) -> int:
        return sum(c.get("ok") is None for c in counted(self.claims))

    @property
    def checks(self) -> int:
        return sum(is_check(c) for c in self.claims)

    @property
    def checks_failing(self) -> int:
        """Consistency checks that do not hold: each one is a bug of the code, not a finding."""
        return sum(is_check(c) and c.get("ok") is not True for c in self.claims)

    def summary(self) -> str:
        """"5/6 claims hold, 1 undecided, 2 consistency checks pass" (the parts that apply)."""
        text = f"{self.passed}/{self.total} claims hold" + (f", {self.undecided} undecided" if self.undecided else "")
        if self.checks:
            text += (f", {self.checks} consistency check{'s' if self.checks > 1 else ''} "
                     + (f"({self.checks_failing} FAILING)" if self.checks_failing else "pass"))
        return text


def package_versions() -> dict:
    """Versions of Python and of the libraries results depend on."""
    out = {"python": platform.python_version()}
    for pkg in ("embgeo", "numpy", "scipy", "torch", "matplotlib", "pandas"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def run(name: str, scale: str = "quick", overrides: dict | None = None, out: str | Path | None = None,
        resume: bool = False) -> RunRecord:
    """Run experiment ``name`` at ``scale`` and write its outputs to ``out`` (default runs/NAME).

    With ``resume=True`` a previous run in ``out`` with the same config is loaded, not re-run.
    Exceptions inside the experiment propagate; :func:`reproduce` records them instead.

    ``overrides["device"]`` ("cpu", "cuda", "cuda:N"; ``--set device=cuda``) is not a config field of any
    experiment: it sets :data:`embgeo.core.device.DEFAULT_DEVICE` for the run, so every trainer the
    experiment calls without a device runs there; it is checked first (an unavailable device is an
    :class:`InputError` before any work) and recorded in record.json. Results do not depend on it beyond
    rounding, so a finished run is reused on any device.
    """
    exp = get(name)
    overrides = dict(overrides or {})
    device_name = overrides.pop("device", "cpu")
    cfg = exp.config(scale, overrides)  # bad settings are refused before torch is imported (resolve_device)
    device = resolve_device(device_name)
    out = Path(out) if out is not None else Path("runs") / name
    config_doc = {"name": name, "scale": scale, "config": _config_dict(cfg)}
    if resume and not exp.derived:
        previous = load(out)
        if previous is not None and previous.error is None and {
                "name": previous.name, "scale": previous.scale, "config": previous.config} == config_doc:
            previous.reused = True
            return previous
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("claims.json", "record.json"):  # a crash must not leave an old result looking current
        (out / stale).unlink(missing_ok=True)
    t0 = time.perf_counter()
    token = RUN_DIR.set(out)  # long trainings checkpoint under out/checkpoints (checkpoint_path)
    device_token = DEFAULT_DEVICE.set(str(device))
    try:
        result = exp.run(cfg)
    finally:
        DEFAULT_DEVICE.reset(device_token)
        RUN_DIR.reset(token)
    seconds = time.perf_counter() - t0
    figures = _save_figures(result.figures, out)
    claims = [c.to_dict() for c in paper_column(result.claims, scale == "paper" and _paper_config(exp, cfg))]
    if result.trace is not None:
        result.trace.to_csv(out / "trace.csv", index=False)
    scalars = {k: _jsonable(v) for k, v in result.scalars.items()}
    record = RunRecord(name, scale, config_doc["config"], claims, figures, seconds, package_versions(), str(out),
                       list(result.notes), scalars=scalars, device=device_label(device))
    _write_json(out / "config.json", config_doc)
    _write_json(out / "claims.json", claims)
    _write_json(out / "record.json", {"seconds": seconds, "versions": record.versions, "figures": figures,
                                      "notes": record.notes, "title": exp.title, "paper": exp.paper,
                                      "scalars": scalars, "device": record.device})
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the results are written: nothing left to resume
    return record


def _paper_config(exp, cfg) -> bool:
    """Whether ``cfg`` is the paper preset, up to the seed (a paper fixes sizes and settings, not our seed)."""
    paper = exp.config("paper")
    if dataclasses.is_dataclass(cfg) and any(f.name == "seed" for f in dataclasses.fields(cfg)):
        cfg = dataclasses.replace(cfg, seed=paper.seed)
    return cfg == paper


def paper_column(claims: list, at_paper_config: bool) -> list:
    """The claims with their ``paper`` values kept only where the run has the paper's configuration.

    A printed number beside a run of other sizes or settings reads as a (failed) comparison; off the
    paper's configuration it moves into the note ("paper, at its configuration: …") unless the claim
    says its printed value holds at any scale (``Claim.any_scale``).
    """
    out = []
    for c in claims:
        if c.paper is not None and not at_paper_config and not c.any_scale:
            moved = f"paper, at its own configuration: {c.paper}"
            c = dataclasses.replace(c, paper=None, note=f"{c.note}; {moved}" if c.note else moved)
        out.append(c)
    return out


def load(out: str | Path) -> RunRecord | None:
    """The run stored in ``out``, or None if it is missing or incomplete."""
    out = Path(out)
    try:
        config_doc = json.loads((out / "config.json").read_text())
        claims = json.loads((out / "claims.json").read_text())
        rec = json.loads((out / "record.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return RunRecord(config_doc["name"], config_doc["scale"], config_doc["config"], claims, rec["figures"],
                     rec["seconds"], rec["versions"], str(out), rec.get("notes", []), rec.get("error"),
                     scalars=rec.get("scalars", {}), device=rec.get("device", "cpu"))


def reproduce(paper: str = "all", scale: str = "quick", out: str | Path = "runs/reproduce",
              resume: bool = True, echo: Callable[[str], object] = print,
              experiments: list[str] | None = None) -> Path:
    """Run every experiment of ``paper`` (or only ``experiments``) and write ``out/report.html``.

    Returns the report path. A failing experiment is recorded with its traceback and reported, not
    fatal to the others.
    """
    from embgeo.report.html import write_report

    out = Path(out)
    records = []
    selected = names(paper)
    if experiments is not None:
        unknown = sorted(set(experiments) - set(selected))
        if unknown:
            raise InputError(f"experiments: not experiments of {paper!r}: {', '.join(unknown)}")
        selected = [n for n in selected if n in experiments]
    for i, name in enumerate(selected, start=1):
        echo(f"[{i}/{len(selected)}] {name} ({scale}) ...")
        try:
            record = run(name, scale, out=out / name, resume=resume)
        except KeyboardInterrupt:  # finished experiments are kept; the caller says so (the CLI in one line)
            raise
        except Exception as exc:  # noqa: BLE001 - one broken experiment must not hide the others
            record = RunRecord(name, scale, {}, [], [], 0.0, package_versions(), str(out / name),
                               error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        status = f"error: {record.error.splitlines()[0]}" if record.error else record.summary()
        echo(f"    {status}, {record.seconds:.1f} s" + (" (reused)" if record.reused else ""))
        records.append(record)
    path = write_report(records, out / "report.html", title=f"embgeo reproduction: {paper}, {scale} scale")
    return path


def _config_dict(cfg) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def _save_figures(figures: dict, out: Path) -> list[str]:
    import matplotlib.pyplot as plt

    saved = []
    for fname, fig in figures.items():
        for ext in ("png", "pdf"):
            fig.savefig(out / f"{fname}.{ext}", dpi=120, bbox_inches="tight")
        plt.close(fig)
        saved.append(fname)
    return saved


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use the embgeo command")
