"""Named experiments, their typed configs and their claims.

An experiment is a figure or table of a paper: a config dataclass (defaults are the ``quick``
scale; ``presets["paper"]`` holds the paper's sizes), a ``run(config) -> Result`` function, and
the claims it checks. A :class:`Claim` puts the paper's printed value, the theory's prediction and
the measured value side by side with the tolerance it was held to and the verdict.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import re
import typing
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embgeo.errors import InputError

if TYPE_CHECKING:
    from embgeo.core.trace import Trace

SCALES = ("quick", "paper")

#: Output directory of the run in progress (set by :func:`embgeo.experiments.runner.run`).
RUN_DIR: ContextVar[Path | None] = ContextVar("embgeo_run_dir", default=None)


def checkpoint_path(tag: str, cfg: Any) -> Path | None:
    """The checkpoint file of a long training inside the current run, or None outside a run.

    ``RUN_DIR/checkpoints/TAG-HASH.pt`` with HASH a digest of the config, so that a run repeated
    with the same config resumes where it was interrupted and one with another config starts
    afresh. The runner deletes the directory once the run's results are written.
    """
    run_dir = RUN_DIR.get()
    if run_dir is None:
        return None
    text = json.dumps(dataclasses.asdict(cfg), sort_keys=True, default=str)
    return Path(run_dir) / "checkpoints" / f"{tag}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.pt"


def finished(trace: Trace) -> Trace:
    """``trace`` of a completed training; a Ctrl-C'd one (``trace.interrupted``) re-raises KeyboardInterrupt,
    a diverged one (``trace.meta["diverged_at_step"]``) is an :class:`InputError` saying so.

    Training functions return a partial trace on Ctrl-C or divergence; an experiment must not turn it
    into results (or into figures of non-finite values).
    """
    if getattr(trace, "interrupted", False):
        raise KeyboardInterrupt("training interrupted; its checkpoint is kept, run again to resume")
    step = getattr(trace, "meta", {}).get("diverged_at_step")
    if step is not None:
        raise InputError(f"training diverged at step {step} (the iterate or the loss is no longer finite, "
                         f"lr = {trace.meta.get('lr')}); lower the step size (--set lr=...) or an oversized "
                         "weight decay")
    return trace


#: The three verdicts of a claim, from its ``ok``: True, False, None.
VERDICTS = {True: "holds", False: "fails", None: "undecided"}


@dataclass
class Claim:
    """One checked statement: ``ok`` says whether ``measured`` agrees with the paper/theory.

    ``ok`` is True (holds), False (fails) or None (undecided: the measured value is only known within a
    certified band — a solver's error bound, a binomial interval, a spread over seeds — and the band
    straddles the level, so the run cannot say; see :func:`banded`). Undecided claims are counted apart,
    never as holding or failing.

    ``tolerance`` documents where the bound comes from (the paper's printed precision, a spread
    over seeds, or the statement's own inequality); ``note`` explains a failure or a reading.

    ``paper`` is shown only beside a run of the paper's configuration: the runner moves it into the
    note otherwise (:func:`embgeo.experiments.runner.paper_column`), unless ``any_scale`` says the
    printed value does not depend on the settings a scale or ``--set`` changes (e.g. the entropy of
    the paper's data generator). ``any_scale`` is an instruction to the runner, not stored.

    ``check`` marks a **consistency check**: a statement that holds by construction of the code or of the
    chosen data (an identity of the solvers' output, a setting read back), so it cannot fail if the paper
    were wrong. It stays in the tables — a failing check is a bug — but is counted apart from the claims
    (:func:`counted`, :func:`as_check`).
    """

    name: str
    measured: Any
    ok: bool | None
    paper: Any = None
    theory: Any = None
    tolerance: Any = None
    note: str = ""
    any_scale: bool = False
    check: bool = False

    def to_dict(self) -> dict:
        return {k: _jsonable(v) for k, v in dataclasses.asdict(self).items() if k != "any_scale"}


def as_check(claim: Claim, why: str) -> Claim:
    """``claim`` as a consistency check (counted apart), its note saying ``why`` it cannot fail."""
    note = f"consistency check, not counted: {why}" + (f"; {claim.note}" if claim.note else "")
    return dataclasses.replace(claim, check=True, note=note)


def is_check(claim: Claim | dict) -> bool:
    """Whether a claim (or its dict; records written before checks existed have none) is a consistency check."""
    return bool(claim.check if isinstance(claim, Claim) else claim.get("check", False))


def counted(claims) -> list:
    """The claims that count (consistency checks removed), claims or claim dicts."""
    return [c for c in claims if not is_check(c)]


def verdict(claim: Claim | dict) -> str:
    """"holds", "fails" or "undecided" for a claim or its dict (``ok`` True / False / None)."""
    ok = claim.ok if isinstance(claim, Claim) else claim.get("ok")
    return VERDICTS[None if ok is None else bool(ok)]


def tally(claims) -> dict:
    """{"holds": n, "fails": n, "undecided": n} over the counted claims (or claim dicts), and
    {"checks": n, "checks failing": n} over the consistency checks."""
    out = dict.fromkeys(VERDICTS.values(), 0)
    for c in counted(claims):
        out[verdict(c)] += 1
    checks = [c for c in claims if is_check(c)]
    out["checks"] = len(checks)
    out["checks failing"] = sum(verdict(c) != "holds" for c in checks)
    return out


def banded(name: str, measured: float, band: float, level: float, *, above: bool = True, paper: Any = None,
           theory: Any = None, note: str = "", band_source: str = "the certified band") -> Claim:
    """Claim ``measured ≥ level`` (``above``) or ``≤ level`` for a value known only within ± ``band``.

    Holds when the whole interval [measured − band, measured + band] is on the claimed side, fails when it
    is entirely on the other side, and is undecided (``ok`` None) when it straddles the level. A NaN
    measured value or band fails (nothing was measured); ``band`` must be ≥ 0 (inf: always undecided
    for a finite value). ``band_source`` names where the band comes from, for the tolerance column.
    """
    measured, band = float(measured), float(band)
    if band < 0:
        raise ValueError(f"banded({name!r}): the band must be >= 0, got {band}")
    if not (math.isfinite(measured) and not math.isnan(band)):
        ok: bool | None = False
    else:
        lo, hi = measured - band, measured + band
        ok = (lo >= level) if above else (hi <= level)
        if not ok and ((hi >= level) if above else (lo <= level)):
            ok = None  # the band straddles the level
    op = ">=" if above else "<="
    return Claim(name, measured, ok, paper, theory, f"{op} {level:g}, decided outside ± {band:.2g} ({band_source})",
                 note)


def close(name: str, measured: float, target: float, tol: float, *, paper: Any = None, theory: Any = None,
          note: str = "", relative: bool = False, any_scale: bool = False) -> Claim:
    """Claim ``|measured - target| <= tol`` (``tol`` relative to ``|target|`` if ``relative``).

    A NaN or infinite ``measured`` (or ``target``) fails; ``tol`` must be finite and ≥ 0.
    """
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"close({name!r}): tolerance must be finite and >= 0, got {tol}")
    bound = tol * abs(target) if relative else tol
    ok = bool(math.isfinite(measured) and math.isfinite(target) and abs(measured - target) <= bound)
    tol_text = f"±{tol:g}" + (" (relative)" if relative else "")
    return Claim(name, float(measured), ok, paper, theory, tol_text, note, any_scale)


def at_least(name: str, measured: float, bound: float, *, paper: Any = None, theory: Any = None, note: str = "",
             any_scale: bool = False) -> Claim:
    """Claim ``measured >= bound`` (a NaN fails)."""
    return Claim(name, float(measured), bool(measured >= bound), paper, theory, f">= {bound:g}", note, any_scale)


def at_most(name: str, measured: float, bound: float, *, paper: Any = None, theory: Any = None, note: str = "",
            any_scale: bool = False) -> Claim:
    """Claim ``measured <= bound`` (a NaN fails)."""
    return Claim(name, float(measured), bool(measured <= bound), paper, theory, f"<= {bound:g}", note, any_scale)


def significant(name: str, p_value: float, level: float, *, note: str = "") -> Claim:
    """Claim a test's ``p_value`` ≤ ``level``; measured is the p-value and the tolerance says so.

    A p-value that underflowed to 0 is recorded as the smallest positive float with the fact in the
    note, so the report never prints a bare 0.
    """
    p = float(p_value)
    if p == 0.0:
        p = float(np.finfo(float).tiny)
        note = (f"{note}; " if note else "") + f"p-value underflowed: p < {p:.3g}"
    return Claim(name, p, bool(p <= level), None, None, f"p-value <= {level:g}", note)


def holds(name: str, measured: Any, ok: bool, *, paper: Any = None, theory: Any = None, note: str = "",
          any_scale: bool = False) -> Claim:
    """A claim whose verdict is a yes/no statement (e.g. equal rows, every run qualifies)."""
    return Claim(name, measured, bool(ok), paper, theory, "exact statement", note, any_scale)


@dataclass
class Result:
    """What an experiment's ``run`` returns: claims, matplotlib figures, an optional trace table."""

    claims: list[Claim]
    figures: dict[str, Any] = field(default_factory=dict)
    trace: Any = None  # a pandas DataFrame
    notes: list[str] = field(default_factory=list)
    #: Named numbers of the run beyond its claims (e.g. counts of a sweep point), stored by sweeps.
    scalars: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    """A registered experiment. ``config_cls`` defaults are the quick scale."""

    name: str
    paper: str
    title: str
    config_cls: type
    run: Callable[[Any], Result]
    presets: dict = field(default_factory=dict)
    paper_runtime: str = ""
    #: Built from other runs' outputs (e.g. a table gathered from sibling runs): never reused on
    #: resume, since the runs it reads may have been re-made since.
    derived: bool = False
    #: A building block of another experiment's sweep (one grid point): listed and runnable, but not
    #: part of ``embgeo reproduce``.
    sweep_point: bool = False

    def config(self, scale: str = "quick", overrides: dict | None = None) -> Any:
        """The config at ``scale`` with ``overrides`` (values may be strings from ``--set``), its settings checked
        (:func:`embgeo.experiments.settings.check_config`): a wrong type or range is an InputError here."""
        if scale not in SCALES:
            raise InputError(f"scale: expected one of {SCALES}, got {scale!r}")
        values = dict(self.presets.get(scale, {}))
        fields = {f.name: f for f in dataclasses.fields(self.config_cls)}
        hints = typing.get_type_hints(self.config_cls)
        for key, value in (overrides or {}).items():
            if key not in fields:
                close_names = difflib.get_close_matches(key, list(fields), n=1)
                hint = f"did you mean {close_names[0]!r}? " if close_names else ""
                raise InputError(f"--set {key}: {self.name} has no such setting; {hint}known: {', '.join(fields)}")
            values[key] = _coerce(key, value, *_field_kind(hints[key]))
        cfg = self.config_cls(**values)
        from embgeo.experiments.settings import check_config

        check_config(self.name, cfg)  # types and ranges before anything runs (a sweep checks every point)
        return cfg


REGISTRY: dict[str, Experiment] = {}


def register(experiment: Experiment) -> Experiment:
    """Add an experiment to the registry (names are unique)."""
    if experiment.name in REGISTRY:
        raise ValueError(f"experiment {experiment.name!r} registered twice")
    REGISTRY[experiment.name] = experiment
    return experiment


def get(name: str) -> Experiment:
    """The experiment called ``name``; :class:`InputError` listing the known names otherwise."""
    if name not in REGISTRY:
        raise InputError(f"unknown experiment {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def names(paper: str = "all") -> list[str]:
    """The experiments ``reproduce`` runs, in registration order, optionally of one paper (sweep points,
    the building blocks of another experiment, are left out)."""
    papers = {e.paper for e in REGISTRY.values()}
    if paper != "all" and paper not in papers:
        raise InputError(f"--paper: expected 'all' or one of {sorted(papers)}, got {paper!r}")
    return [n for n, e in REGISTRY.items() if paper in ("all", e.paper) and not e.sweep_point]


def parse_overrides(items: list[str] | None) -> dict:
    """``["steps=100", "lr=0.5"]`` → ``{"steps": "100", "lr": "0.5"}`` (typed later by the config)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--set: expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _field_kind(hint) -> tuple[type, bool]:
    """(the value type, whether None is allowed) of a config field's annotation, e.g. ``float | None``."""
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint) or hint
    return (origin if isinstance(origin, type) else str), optional


def _coerce(key: str, value, kind: type, optional: bool = False):
    if not isinstance(value, str):
        return value
    if optional and value.strip().lower() in ("none", ""):
        return None  # "computed" defaults (e.g. lr = None → 1/(2L)) can be asked for from --set
    try:
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if kind is tuple:
            return tuple(float(v) if "." in v or "e" in v else int(v) for v in value.split(",") if v)
        return kind(value)
    except ValueError:
        if kind is tuple:
            raise InputError(f"--set {key}={value}: expected comma-separated numbers without brackets or spaces, "
                             f"e.g. {key}=64,128") from None
        raise InputError(f"--set {key}={value}: expected a value of type {kind.__name__}"
                         + (" or 'none'" if optional else "")) from None


def _jsonable(value):
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if np is not None and isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# -- run times ----------------------------------------------------------------------------------------------

#: Durations named by a word in ``paper_runtime`` (the lower end of what the word means).
_DURATION_WORDS = {"seconds": 10.0, "minutes": 120.0, "hours": 2 * 3600.0, "days": 86400.0}
_UNITS = {"s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(?:\s*[-–]\s*(\d+(?:\.\d+)?))?\s*(s|sec|min|hours|hour|h)\b")


def runtime_seconds(exp: Experiment, scale: str) -> float | None:
    """Seconds a run of ``exp`` at ``scale`` takes, read from its ``paper_runtime`` text: at paper scale the first
    duration before any parenthesis ("about 60-75 min (measured)" → 4500, the upper end of a range; "hours" →
    7200, "days" → 86400), at quick scale the one after "quick:" inside it; None where it says nothing."""
    text = exp.paper_runtime or ""
    if scale == "quick":
        found = re.search(r"quick:\s*([^;)]*)", text)
        part = found.group(1) if found else ""
    else:
        part = text.split("(")[0]
    match = _DURATION.search(part)
    if match:
        return float(match.group(2) or match.group(1)) * _UNITS[match.group(3)]
    for word, seconds in _DURATION_WORDS.items():
        if re.search(rf"\b{word}\b", part):
            return seconds
    return None


def runtime_estimate(names_: list[str], scale: str) -> tuple[float, list[str]]:
    """(total seconds of the experiments whose run time is known, the names without one)."""
    total, unknown = 0.0, []
    for name in names_:
        seconds = runtime_seconds(get(name), scale)
        if seconds is None:
            unknown.append(name)
        else:
            total += seconds
    return total, unknown
