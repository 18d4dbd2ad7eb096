"""Papers and their experiments, found through the ``embgeo.papers`` entry points.

An experiment is a figure or table of a paper: a config dataclass (defaults are the ``quick`` scale;
``presets["paper"]`` holds the paper's sizes) and a ``run(config, ctx) -> Result`` function that checks
the paper's claims (:mod:`embgeo.lab.claims`) inside a :class:`~embgeo.lab.context.RunContext`. A
:class:`Paper` gathers a paper's experiments with its title, citation and place in the report.

Each paper package registers itself with one line of ``pyproject.toml``::

    [project.entry-points."embgeo.papers"]
    ntp = "embgeo.ntp.experiments:PAPER"

This module imports no paper: :func:`papers` loads the entry points on first use, so ``embgeo list``,
``--paper``, a paper's own commands (``Paper.commands``), the report's sections and their order all come from what
is installed (CONTRIBUTING.md).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from embgeo.errors import InputError
from embgeo.lab.claims import Claim
from embgeo.lab.settings import check_config, field_kind

if TYPE_CHECKING:
    from embgeo.core.trace import Trace
    from embgeo.lab.context import RunContext

SCALES = ("quick", "paper")

#: The entry-point group a paper registers its :class:`Paper` under.
ENTRY_POINT_GROUP = "embgeo.papers"


@dataclass
class Result:
    """What an experiment's ``run`` returns: claims, matplotlib figures, an optional trace table."""

    claims: list[Claim]
    figures: dict[str, Any] = field(default_factory=dict)
    trace: Any = None  # a pandas DataFrame
    notes: list[str] = field(default_factory=list)
    #: Named numbers of the run beyond its claims (e.g. counts of a sweep point), stored by sweeps.
    scalars: dict[str, float] = field(default_factory=dict)


def finished(trace: Trace) -> Trace:
    """``trace`` of a completed training; a Ctrl-C'd one (``trace.interrupted``) re-raises KeyboardInterrupt,
    a diverged one (``trace.meta["diverged_at_step"]``) is an :class:`InputError` saying so.

    Training functions return a partial trace on Ctrl-C or divergence; an experiment must not turn it
    into results (or into figures of non-finite values). Whether a checkpoint was kept is not known here (a
    trainer keeps one only when given a path, inside a run): the runner says it
    (:class:`embgeo.lab.runner.RunInterrupted`).
    """
    if getattr(trace, "interrupted", False):
        raise KeyboardInterrupt("training interrupted by Ctrl-C; a partial training is not turned into results")
    step = getattr(trace, "meta", {}).get("diverged_at_step")
    if step is not None:
        # The trainer says why when it has a rule of its own (embgeo.ntp.training.train: the loss grew tenfold).
        why = trace.meta.get("diverged_reason", "the iterate or the loss is no longer finite")
        raise InputError(f"training diverged at step {step} ({why}, lr = {trace.meta.get('lr')}); lower the step "
                         "size (--set lr=...) or an oversized weight decay")
    return trace


@dataclass(frozen=True)
class Experiment:
    """A registered experiment. ``config_cls`` defaults are the quick scale; ``run(config, ctx)`` makes it."""

    name: str
    paper: str
    title: str
    config_cls: type
    run: Callable[[Any, RunContext], Result]
    presets: dict = field(default_factory=dict)
    paper_runtime: str = ""
    #: Built from other runs' outputs (e.g. a table gathered from sibling runs): never reused on
    #: resume, since the runs it reads may have been re-made since.
    derived: bool = False
    #: A building block of another experiment's sweep (one grid point): listed and runnable, but not
    #: part of ``embgeo reproduce``.
    sweep_point: bool = False
    #: ``--set`` values (over the quick preset) of a run of seconds that exercises the whole experiment: the
    #: registry's common test runs every experiment with them (tests/lab/test_registry.py). Not a scale: its
    #: claims need not hold.
    smoke: dict = field(default_factory=dict)
    #: Seconds of a quick run measured on one core (``taskset -c 0 embgeo reproduce``, :data:`QUICK_MEASURED`):
    #: ``reproduce`` adds them up into its estimate before it starts, and the README's time is their sum.
    quick_seconds: float | None = None
    #: A setting the user must give (e.g. ``"model"``, a checkpoint's path) that no preset can: a run without it is
    #: skipped — its result has no claims and a note that starts with "skipped:" and says what to give.
    requires: str = ""

    def config(self, scale: str = "quick", overrides: dict | None = None) -> Any:
        """The config at ``scale`` with ``overrides`` (values may be strings from ``--set``), its settings checked
        (:func:`embgeo.lab.settings.check_config`): a wrong type or range is an InputError here."""
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
            values[key] = _coerce(key, value, *field_kind(hints[key]))
        cfg = self.config_cls(**values)
        check_config(self.name, cfg)  # types and ranges before anything runs (a sweep checks every point)
        return cfg

    def has_seed(self) -> bool:
        """Whether the config has a ``seed`` setting (a sweep over seeds needs one)."""
        return any(f.name == "seed" for f in dataclasses.fields(self.config_cls))


@dataclass(frozen=True)
class Paper:
    """A paper: its key (``--paper NAME``), title and citation (the report's section head), its place among the
    papers (``order``: the report's and ``embgeo list``'s order), its experiments, in the order they run, and
    optionally its own CLI commands.

    ``commands(sub, common)`` adds the paper's subcommands to the CLI's argparse subparsers ``sub`` (``common`` is
    the parent parser of the options every command takes, ``--threads``), e.g. ``embgeo ntp analyze``. It comes
    with the paper, through the same entry point, so a paper is one folder and one ``pyproject.toml`` line."""

    name: str
    title: str
    citation: str
    order: int
    experiments: tuple[Experiment, ...]
    commands: Callable[[Any, Any], None] | None = None

    def __post_init__(self):
        object.__setattr__(self, "experiments", tuple(self.experiments))
        seen = set()
        for exp in self.experiments:
            if exp.paper != self.name:
                raise ValueError(f"paper {self.name!r}: experiment {exp.name!r} says it belongs to {exp.paper!r}")
            if exp.name in seen:
                raise ValueError(f"paper {self.name!r}: experiment {exp.name!r} listed twice")
            seen.add(exp.name)

    def experiment(self, name: str) -> Experiment:
        """This paper's experiment ``name`` (KeyError otherwise): a paper looks up its own experiments here,
        without the registry."""
        for exp in self.experiments:
            if exp.name == name:
                return exp
        raise KeyError(f"{self.name} has no experiment {name!r}")


#: The discovered papers by name (None until first used; tests may set it).
_PAPERS: dict[str, Paper] | None = None


def _discover() -> dict[str, Paper]:
    """Load every ``embgeo.papers`` entry point (a :class:`Paper` each); refuse none, a non-Paper, or two papers
    sharing an experiment name."""
    found: dict[str, Paper] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found:
            continue  # the same distribution seen twice on sys.path
        paper = ep.load()
        if not isinstance(paper, Paper):
            raise TypeError(f"entry point {ep.name} = {ep.value!r} of group {ENTRY_POINT_GROUP}: expected a "
                            f"embgeo.lab.registry.Paper, got {type(paper).__name__}")
        if paper.name != ep.name:
            raise ValueError(f"entry point {ep.name} = {ep.value!r}: the Paper is called {paper.name!r}")
        if paper.commands is not None and not callable(paper.commands):
            raise TypeError(f"paper {paper.name!r}: commands must be a function (sub, common) -> None, got "
                            f"{type(paper.commands).__name__}")
        found[paper.name] = paper
    if not found:
        raise InputError(f"no paper registered (no '{ENTRY_POINT_GROUP}' entry points): install embgeo with "
                         "pip install -e .")
    owner: dict[str, str] = {}
    for paper in found.values():
        for exp in paper.experiments:
            if exp.name in owner:
                raise ValueError(f"experiment {exp.name!r} registered by both {owner[exp.name]!r} and {paper.name!r}")
            owner[exp.name] = paper.name
    return found


def papers() -> list[Paper]:
    """The registered papers in their order (loaded from the entry points on first use)."""
    global _PAPERS
    if _PAPERS is None:
        _PAPERS = _discover()
    return sorted(_PAPERS.values(), key=lambda p: (p.order, p.name))


def paper(name: str) -> Paper:
    """The paper called ``name``; :class:`InputError` listing the known papers otherwise."""
    found = {p.name: p for p in papers()}
    if name not in found:
        raise InputError(f"--paper: expected 'all' or one of {list(found)}, got {name!r}")
    return found[name]


def paper_names() -> list[str]:
    """The papers' names, read from the entry points without importing them (e.g. to parametrize tests at
    collection; the CLI loads the papers anyway, for their commands)."""
    if _PAPERS is not None:
        return [p.name for p in papers()]
    return list(dict.fromkeys(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)))


def experiments() -> dict[str, Experiment]:
    """Every registered experiment by name, papers in their order, each paper's experiments in its order."""
    return {exp.name: exp for p in papers() for exp in p.experiments}


def get(name: str) -> Experiment:
    """The experiment called ``name``; :class:`InputError` listing the known names otherwise."""
    found = experiments()
    if name not in found:
        raise InputError(f"unknown experiment {name!r}; known: {', '.join(sorted(found))}")
    return found[name]


def names(paper_name: str = "all") -> list[str]:
    """The experiments ``reproduce`` runs, in order, optionally of one paper (sweep points, the building blocks
    of another experiment, are left out)."""
    chosen = papers() if paper_name == "all" else [paper(paper_name)]
    return [e.name for p in chosen for e in p.experiments if not e.sweep_point]


def parse_overrides(items: list[str] | None) -> dict:
    """``["steps=100", "lr=0.5"]`` → ``{"steps": "100", "lr": "0.5"}`` (typed later by the config)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--set: expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


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


# -- run times ----------------------------------------------------------------------------------------------

#: Durations named by a word in ``paper_runtime`` (the lower end of what the word means).
_DURATION_WORDS = {"seconds": 10.0, "minutes": 120.0, "hours": 2 * 3600.0, "days": 86400.0}
_UNITS = {"s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(?:\s*[-–]\s*(\d+(?:\.\d+)?))?\s*(s|sec|min|hours|hour|h)\b")


#: When and how the registry's ``quick_seconds`` were measured.
QUICK_MEASURED = ("2026-11-29 at ea8aec7, taskset -c 0 embgeo reproduce --out runs/quick (one core; the other ran a "
                  "one-core paper-scale run: 6 min 51 s, where 2026-11-28 at 01dafa3, the other core idle, took 8 min "
                  "53 s)")


def duration_text(seconds: float) -> str:
    """Seconds as the estimates print them: "40 s", "12 min", "2.5 h"."""
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min" if seconds >= 90 else \
        f"{seconds:.0f} s"


def runtime_seconds(exp: Experiment, scale: str) -> float | None:
    """Seconds a run of ``exp`` at ``scale`` takes: at quick scale its measured ``quick_seconds``; otherwise read
    from its ``paper_runtime`` text: at paper scale the first duration before any parenthesis ("about 60-75 min
    (measured)" → 4500, the upper end of a range; "hours" → 7200, "days" → 86400), at quick scale the one after
    "quick:" inside it; None where it says nothing."""
    if scale == "quick" and exp.quick_seconds is not None:
        return float(exp.quick_seconds)
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


#: The settings a run's time grows in proportion to: the length of its training (steps, epochs) and the number of
#: things it repeats (trials: random instances; entropy_seeds: realizations; points: path points). A run that
#: changes one is estimated from the registry's time of a preset scaled by value / preset value
#: (:func:`scaled_runtime`; above the preset, an upper bound when part of the time is fixed), so that
#: ``--set steps=10**12`` is not started blind (issue 37). Iteration caps (max_iter) are left out: a solver
#: usually stops well before its cap.
WORK_SETTINGS = ("steps", "epochs", "trials", "entropy_seeds", "points")


@dataclass(frozen=True)
class ScaledRuntime:
    """:func:`scaled_runtime`: ``seconds`` of the run; ``upper_bound`` when reckoned from a paper preset that differs
    from the quick one (whose other sizes are at most the paper's); ``how`` says it in words ("5 s at paper scale ×
    1e+08 for steps = 1000000000000 against 10000")."""

    seconds: float
    upper_bound: bool
    how: str


def scaled_runtime(exp: Experiment, scale: str, overrides: dict | None) -> ScaledRuntime | None:
    """The run time of ``exp`` at ``scale`` with ``overrides`` (``--set`` values) that change a setting of
    :data:`WORK_SETTINGS`: the registry's time of the preset (:func:`runtime_seconds`) times value / preset value of
    each. A quick run whose registry entry has no quick time is reckoned from the paper preset's time and values: an
    upper bound, since a quick preset is no larger than the paper's. None when the overrides change no such setting,
    or no time is known to scale. The work settings are typed and range-checked here (:meth:`Experiment.config`)."""
    changed = {k: v for k, v in (overrides or {}).items() if k in WORK_SETTINGS}
    if not changed:
        return None
    cfg = exp.config(scale, changed)
    ref_scale = scale
    seconds = runtime_seconds(exp, scale)
    if seconds is None and scale == "quick":
        ref_scale, seconds = "paper", runtime_seconds(exp, "paper")
    if seconds is None:
        return None
    ref = exp.config(ref_scale)
    factor, parts = 1.0, []
    for key in changed:
        given, preset = getattr(cfg, key), getattr(ref, key)
        if isinstance(given, int) and isinstance(preset, int) and preset > 0:
            factor *= given / preset
            parts.append(f"{key} = {given} against {preset}")
    if not parts:
        return None
    how = f"{seconds:g} s at {ref_scale} scale × {factor:.3g} for {', '.join(parts)}"
    return ScaledRuntime(seconds * factor, ref_scale != scale and exp.config(scale) != ref, how)
