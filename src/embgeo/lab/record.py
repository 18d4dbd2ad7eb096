"""The record of one run, in memory (:class:`RunRecord`) and in its folder.

A run folder ``DIR`` holds ``config.json`` (name, scale, the config), ``claims.json`` (a list of claim
dicts, :meth:`~embgeo.lab.claims.Claim.to_dict`), ``trace.csv`` when the experiment has a trace, each
figure as ``NAME.png`` and ``NAME.pdf``, and ``record.json`` (run time, package versions, figures, notes,
the experiment's title and paper, scalars, device). :func:`save` writes them, :func:`load` reads them back.
"""

from __future__ import annotations

import dataclasses
import json
import platform
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from embgeo.lab.claims import Claim, counted, jsonable, others


@dataclass(kw_only=True)
class RunRecord:
    """A finished (or failed) run: which experiment of which paper, at what scale and config, its claims, figures,
    notes and scalars, how long it took, where it ran and where its files are.

    A run that failed has ``error`` (its traceback, ending with the exception; :attr:`error_line`) and no claims;
    it is reported under its paper like any other. ``reused``: a finished run found in its folder on resume, not
    run again.
    """

    name: str
    paper: str = ""
    title: str = ""
    scale: str = "quick"
    config: dict = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    versions: dict = field(default_factory=dict)
    out: str = ""
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    reused: bool = False
    scalars: dict = field(default_factory=dict)
    device: str = "cpu"

    @property
    def seed(self) -> int | None:
        """The config's seed (None for an experiment without one)."""
        return self.config.get("seed")

    @property
    def total(self) -> int:
        """Claims that count: every claim but the consistency checks (:func:`~embgeo.lab.claims.as_check`)."""
        return len(counted(self.claims))

    @property
    def passed(self) -> int:
        """Counted claims that hold (undecided ones are apart: see :func:`~embgeo.lab.claims.banded`)."""
        return sum(c.ok is True for c in counted(self.claims))

    @property
    def undecided(self) -> int:
        return sum(c.ok is None for c in counted(self.claims))

    @property
    def others(self) -> int:
        """Statements that are not the paper's (:func:`~embgeo.lab.claims.others_statement`): counted apart."""
        return len(others(self.claims))

    @property
    def others_holding(self) -> int:
        return sum(c.ok is True for c in others(self.claims))

    @property
    def not_applicable(self) -> int:
        """Claims whose premise fails in this run (:func:`~embgeo.lab.claims.not_applicable`): counted apart."""
        return sum(not c.applicable for c in self.claims)

    @property
    def checks(self) -> int:
        return sum(c.check for c in self.claims)

    @property
    def checks_failing(self) -> int:
        """Consistency checks that do not hold: each one is a bug of the code, not a finding."""
        return sum(c.check and c.ok is not True for c in self.claims)

    def summary(self) -> str:
        """"5/6 claims hold, 1 undecided, 1 not applicable, 2 consistency checks pass" (the parts that apply)."""
        text = f"{self.passed}/{self.total} claims hold" + (f", {self.undecided} undecided" if self.undecided else "")
        if self.not_applicable:
            text += f", {self.not_applicable} not applicable"
        if self.others:
            text += f", {self.others_holding}/{self.others} other statements hold (not the paper's)"
        if self.checks:
            text += (f", {self.checks} consistency check{'s' if self.checks > 1 else ''} "
                     + (f"({self.checks_failing} FAILING)" if self.checks_failing else "pass"))
        return text

    @property
    def error_line(self) -> str | None:
        """The last line of ``error`` (the exception and its message), None for a run that did not fail."""
        if self.error is None:
            return None
        lines = [ln.strip() for ln in self.error.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else "failed"

    def status(self) -> str:
        """One line: the exception of a failed run, else :meth:`summary`."""
        return f"error: {self.error_line}" if self.error else self.summary()


def package_versions() -> dict:
    """Versions of Python and of the libraries results depend on."""
    out = {"python": platform.python_version()}
    for pkg in ("embgeo", "numpy", "scipy", "torch", "matplotlib", "pandas"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def config_dict(cfg) -> dict:
    """A config dataclass as the JSON dict ``config.json`` stores (tuples as lists, other objects as text)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def save(record: RunRecord) -> None:
    """Write ``config.json``, ``claims.json`` and ``record.json`` of ``record`` into its folder."""
    out = Path(record.out)
    _write_json(out / "config.json", {"name": record.name, "scale": record.scale, "config": record.config})
    _write_json(out / "claims.json", [c.to_dict() for c in record.claims])
    _write_json(out / "record.json", {"seconds": record.seconds, "versions": record.versions,
                                      "figures": record.figures, "notes": record.notes, "title": record.title,
                                      "paper": record.paper, "scalars": jsonable_scalars(record.scalars),
                                      "device": record.device})


def jsonable_scalars(scalars: dict) -> dict:
    """A run's scalars as JSON can hold them (numpy numbers as Python's, non-finite floats as text)."""
    return {k: jsonable(v) for k, v in scalars.items()}


def load(out: str | Path) -> RunRecord | None:
    """The run stored in ``out``, or None if it is missing or incomplete."""
    out = Path(out)
    try:
        config_doc = json.loads((out / "config.json").read_text())
        claims = json.loads((out / "claims.json").read_text())
        rec = json.loads((out / "record.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return RunRecord(name=config_doc["name"], paper=rec.get("paper", ""), title=rec.get("title", ""),
                     scale=config_doc["scale"], config=config_doc["config"],
                     claims=[Claim.from_dict(c) for c in claims], figures=rec["figures"], seconds=rec["seconds"],
                     versions=rec["versions"], out=str(out), notes=rec.get("notes", []), error=rec.get("error"),
                     scalars=rec.get("scalars", {}), device=rec.get("device", "cpu"))


def preset_run(out: str | Path, name: str, scale: str, preset: dict,
               legacy: dict | None = None) -> tuple[RunRecord | None, str]:
    """The finished run of experiment ``name`` in ``out`` when it was made at ``scale`` with exactly that scale's
    settings ``preset`` (:func:`config_dict` of the preset config: no ``--set``), else (None, why not) — for an
    experiment that reads other runs instead of re-running them (the collapse paper's accuracy table).

    ``legacy``: setting -> the value older records wrote for a setting whose preset is now None ("computed"); such a
    run computed the same setting, so it still matches the preset."""
    out = Path(out)
    record = load(out)
    if record is None:
        return None, f"no finished run of {name} in {out} (run it first; nothing is re-trained here)"
    legacy = legacy or {}
    config = {k: None if legacy.get(k, ...) == v and preset.get(k) is None else v for k, v in record.config.items()}
    if record.scale != scale or config != preset:
        changed = sorted(k for k in preset if config.get(k) != preset[k])
        return None, (f"{out} holds {name} at scale {record.scale!r}"
                      + (f" with settings differing from the {scale} preset ({', '.join(changed)})" if changed else "")
                      + f"; the table needs the {scale} preset")
    return record, ""


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n")
