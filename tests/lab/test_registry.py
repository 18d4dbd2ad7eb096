"""The registry of papers and experiments, over every registered experiment; the machinery apart from the papers.

One common test per experiment: both scales build their config, every preset key is a setting, and a smoke run
(the experiment's own ``smoke`` settings, seconds) goes through the runner and writes its files. Then: papers come
from the ``embgeo.papers`` entry points (a fourth paper appears in ``embgeo list``, ``--paper`` and the report with
nothing else changed), the lab imports no paper, and the lab's modules import each other without a cycle.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import textwrap
import typing
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from embgeo.errors import InputError
from embgeo.lab import registry
from embgeo.lab.runner import run

SRC = Path(__file__).resolve().parents[2] / "src" / "embgeo"
ALL = registry.experiments()
#: The longest smoke runs (9-14 s each on the shared 2-core machine, the others 1-8 s): left to the full suite.
SLOW_SMOKE = {"ntp-toy2d", "ntp-ngd-adam", "ntp-real-ufm", "ntp-real-ufm-gd", "ntp-real-lstm", "ntp-real-transformer",
              "collapse-theorem3", "attention-selection"}
CLAIM_KEYS = {"name", "paper", "theory", "measured", "tolerance", "ok", "note", "check"}


def test_the_three_papers_are_registered_in_their_order():
    assert [p.name for p in registry.papers()] == ["ntp", "collapse", "attention"]
    for paper in registry.papers():
        assert paper.title and paper.citation and paper.experiments
        assert all(e.paper == paper.name for e in paper.experiments)
    assert sorted(registry.paper_names()) == ["attention", "collapse", "ntp"]


@pytest.mark.parametrize("name", list(ALL))
def test_both_scales_build_and_every_preset_key_is_a_setting(name):
    exp = ALL[name]
    fields = {f.name for f in dataclasses.fields(exp.config_cls)}
    assert set(exp.presets) <= set(registry.SCALES), exp.presets.keys()
    for scale in registry.SCALES:
        assert set(exp.presets.get(scale, {})) <= fields, scale
        assert isinstance(exp.config(scale), exp.config_cls)
    assert set(exp.smoke) <= fields
    assert not ({"workers", "scheduler", "store"} & fields)  # how a sweep runs is the run's context, not science


@pytest.mark.parametrize("name", list(ALL))
def test_every_numeric_setting_has_a_range_declared_by_its_config(name):
    """Issue 40 §4: the ranges sit beside the config's fields (``constraints``), none is left out by omission, and
    they are the paper's own table (no two papers share one)."""
    from embgeo.lab.settings import constraints_of, field_kind

    cls = ALL[name].config_cls
    ranges = constraints_of(cls)
    hints = typing.get_type_hints(cls)
    numeric = [f.name for f in dataclasses.fields(cls) if field_kind(hints[f.name])[0] in (int, float, tuple)]
    assert [k for k in numeric if k not in ranges] == []
    from embgeo.attention.experiments import ATTENTION_CONSTRAINTS
    from embgeo.collapse.experiments.settings import COLLAPSE_CONSTRAINTS
    from embgeo.ntp.experiments.settings import NTP_CONSTRAINTS

    own = {"ntp": NTP_CONSTRAINTS, "collapse": COLLAPSE_CONSTRAINTS, "attention": ATTENTION_CONSTRAINTS}
    assert ranges is own[ALL[name].paper]


def test_a_config_without_ranges_takes_none_from_another_paper():
    """Negative control of the move from ranges by name: a new paper's ``n = -1`` (a name the attention paper ranges
    at >= 0) passes the lab's checks unless its own config declares the range; declared, it is refused; a
    relation lives in the config's check()."""
    from embgeo.errors import InputError
    from embgeo.lab.settings import check_config

    @dataclasses.dataclass
    class Plain:
        n: int = -1

    check_config("new-paper", Plain())  # types only: the lab holds no range of its own

    @dataclasses.dataclass
    class Ranged:
        constraints: typing.ClassVar[dict] = {"n": ("int", 0)}
        n: int = -1

    with pytest.raises(InputError, match=r"new-paper: setting n = -1: expected an integer >= 0"):
        check_config("new-paper", Ranged())

    @dataclasses.dataclass
    class Related:
        low: float = 2.0
        high: float = 1.0

        def check(self, name):
            if not self.low < self.high:
                raise InputError(f"{name}: low must be below high")

    with pytest.raises(InputError, match="new-paper: low must be below high"):
        check_config("new-paper", Related())

    @dataclasses.dataclass
    class Malformed:
        constraints: typing.ClassVar[dict] = {"n": ("whole", 0)}
        n: int = 1

    with pytest.raises(TypeError, match="expected \\(kind, lower bound\\)"):
        check_config("new-paper", Malformed())


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SMOKE else n for n in ALL])
def test_smoke_run(name, tmp_path):
    """The experiment runs end to end at its smoke settings: a record with claims, and the run folder's files."""
    exp = ALL[name]
    out = tmp_path / name
    rec = run(name, "quick", exp.smoke, out=out, scheduler="inline", threads=1)
    assert rec.error is None and rec.paper == exp.paper and rec.title == exp.title
    if exp.requires and exp.requires not in exp.smoke:  # skipped, saying what to give
        assert rec.claims == [] and rec.notes[0].startswith("skipped:") and f"--set {exp.requires}=" in rec.notes[0]
        return
    assert rec.claims and all(c.ok in (True, False, None) for c in rec.claims)
    claims = json.loads((out / "claims.json").read_text())
    assert [c["name"] for c in claims] == [c.name for c in rec.claims]
    # the optional keys: a premise that fails, a number from another source, a statement not the paper's
    assert all(set(c) - {"applicable", "premise", "reference", "reference_source", "source"} == CLAIM_KEYS
               for c in claims)
    for fig in rec.figures:
        assert (out / f"{fig}.png").exists() and (out / f"{fig}.pdf").exists()
    assert not (out / "checkpoints").exists()


# -- papers from entry points: nothing registered, a fourth paper -------------------------------------------------

def test_no_paper_registered_is_one_clear_error(monkeypatch, capsys):
    from embgeo import cli

    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    monkeypatch.setattr(registry, "_PAPERS", None)
    with pytest.raises(InputError, match=r"no paper registered .*pip install -e \."):
        registry.papers()
    assert cli.main(["list"]) == 2
    assert capsys.readouterr().err.startswith("embgeo: error: no paper registered")


#: A fourth paper as a contributor would write it (CONTRIBUTING.md, "Adding a paper"): one module with its config,
#: its run function and its PAPER, found through one entry point.
FOURTH = '''
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from embgeo.lab.claims import close
from embgeo.lab.context import DETACHED, RunContext
from embgeo.lab.registry import Experiment, Paper, Result


@dataclass
class CoinConfig:
    constraints: ClassVar[dict] = {"n": ("int", 1), "seed": ("int", 0)}
    n: int = 2000
    seed: int = 0


def run_coin(cfg: CoinConfig, ctx: RunContext = DETACHED) -> Result:
    heads = float(np.random.default_rng(cfg.seed).integers(0, 2, cfg.n).mean())
    tol = 5 * 0.5 / np.sqrt(cfg.n)  # five standard errors
    return Result([close("fraction of heads", heads, 0.5, tol, paper=0.5)], notes=[f"{cfg.n} tosses"])




def toss(args) -> None:
    print(f"heads {run_coin(CoinConfig(n=args.n)).claims[0].measured:.4f} of {args.n}")


def add_commands(sub, common) -> None:
    """The paper's own command, `embgeo coins toss`, as embgeo.ntp.cli:add_commands adds `embgeo ntp ...`."""
    coins = sub.add_parser("coins", help="a fair coin").add_subparsers(dest="coins_command", required=True)
    cmd = coins.add_parser("toss", help="toss the coin n times", parents=[common])
    cmd.add_argument("--n", type=int, default=10)
    cmd.set_defaults(func=toss)


PAPER = Paper(name="coins", title="A <Fair> Coin", citation="A. Nonymous, J. Coins 1 (2026)", order=4,
              experiments=[Experiment("coins-fair", "coins", "Heads come up half the time", CoinConfig, run_coin,
                                      {"paper": {"n": 100_000}}, "seconds", smoke={"n": 200})],
              commands=add_commands)
'''


@pytest.fixture
def fourth_paper(tmp_path, monkeypatch):
    """The installed papers and 'coins', registered by an entry point (its module written to a folder on sys.path)."""
    package = tmp_path / "site" / "coins_paper"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "experiments.py").write_text(textwrap.dedent(FOURTH))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    installed = registry.entry_points
    extra = EntryPoint("coins", "coins_paper.experiments:PAPER", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [*installed(group=group), extra])
    monkeypatch.setattr(registry, "_PAPERS", None)
    yield
    for name in ("coins_paper.experiments", "coins_paper"):
        sys.modules.pop(name, None)


def test_a_fourth_paper_is_one_module_and_one_entry_point(fourth_paper, tmp_path, capsys):
    """It appears in ``--paper``'s choices, in ``embgeo list`` after the other papers, runs through ``reproduce``,
    and has its own section (title, citation; escaped) in the report, after the papers before it in order."""
    from embgeo import cli
    from embgeo.lab.record import RunRecord
    from embgeo.lab.report import write_report

    assert "coins" in registry.paper_names()  # read from the entry points, nothing imported
    assert cli.build_parser().parse_args(["reproduce", "--paper", "coins"]).paper == "coins"
    assert cli.main(["list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[-1].startswith("coins-fair") and "[coins] Heads come up half the time" in listed[-1]
    assert [p.name for p in registry.papers()] == ["ntp", "collapse", "attention", "coins"]
    assert registry.names("coins") == ["coins-fair"]

    out = tmp_path / "rep"
    assert cli.main(["reproduce", "--paper", "coins", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "claims: 1 of 1 hold, 0 failing, 0 undecided"
    page = (out / "report.html").read_text()
    assert "<section class='paper' id='paper-coins'><h2>A &lt;Fair&gt; Coin</h2>" in page
    assert "A. Nonymous, J. Coins 1 (2026)" in page and "id='coins-fair'" in page

    # its own command, from the same one entry point (Paper.commands: the CLI core knows no paper), with the common
    # options
    assert cli.main(["coins", "toss", "--n", "400", "--threads", "1"]) == 0
    assert capsys.readouterr().out.startswith("heads 0.") and "coins" in cli.build_parser().format_help()

    # the report's sections follow the papers' order, whatever the records' order
    coins = json.loads((out / "coins-fair" / "record.json").read_text())
    assert coins["paper"] == "coins" and coins["title"] == "Heads come up half the time"
    records = [RunRecord(name="coins-fair", paper="coins", title=coins["title"], out=str(out / "coins-fair")),
               RunRecord(name="ntp-x", paper="ntp", out=str(tmp_path / "x"))]
    page = write_report(records, tmp_path / "order.html").read_text()
    assert page.index("id='paper-ntp'") < page.index("id='paper-coins'")


def test_a_paper_whose_entry_point_is_not_a_paper_is_refused(monkeypatch):
    bad = EntryPoint("broken", "embgeo.lab.claims:close", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [bad])
    monkeypatch.setattr(registry, "_PAPERS", None)
    with pytest.raises(TypeError, match="expected a embgeo.lab.registry.Paper"):
        registry.papers()


def test_a_paper_whose_commands_are_not_a_function_is_refused(monkeypatch):
    exp = registry.get("ntp-examples")
    odd = registry.Paper("ntp", "NTP", "", 1, [exp], commands="embgeo.ntp.cli:add_commands")
    monkeypatch.setattr(registry, "entry_points", lambda group: [EntryPoint("ntp", "x:PAPER", group)])
    monkeypatch.setattr(EntryPoint, "load", lambda self: odd)
    monkeypatch.setattr(registry, "_PAPERS", None)
    with pytest.raises(TypeError, match="commands must be a function"):
        registry.papers()


def test_a_paper_owns_its_experiments():
    exp = registry.get("ntp-examples")
    with pytest.raises(ValueError, match="says it belongs to 'ntp'"):
        registry.Paper("other", "Other", "", 9, [exp])


# -- the machinery apart from the papers -------------------------------------------------------------------------

LAB = sorted(f"embgeo.lab.{p.stem}" for p in (SRC / "lab").glob("*.py") if p.stem != "__init__")
PAPERS = ("embgeo.ntp", "embgeo.collapse", "embgeo.attention")


@pytest.mark.parametrize("module", LAB)
def test_each_lab_module_imports_alone_and_imports_no_paper(module):
    """A fresh interpreter imports the module (an import cycle would fail or need a particular order) and no paper
    package is loaded by it."""
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith({PAPERS!r})))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _imports(path: Path, module: str) -> set[str]:
    """Every embgeo module ``module`` (at ``path``) imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                parts = module.split(".")[: -node.level]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("embgeo")}


def _graph() -> dict[str, set[str]]:
    modules = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = path
    return {name: {m for m in _imports(path, name) if m in modules and m != name} for name, path in modules.items()}


def test_no_import_cycle_through_the_lab_and_the_lab_imports_no_paper():
    """A static walk of every import (function-level ones too): the lab's modules form no cycle with anything, and
    none of them imports a paper package (the papers import the lab)."""
    graph = _graph()
    lab = {m for m in graph if m.startswith("embgeo.lab")}
    for m in lab:
        assert not {d for d in graph[m] if d.startswith(PAPERS)}, m

    cycles = sorted(m for m in lab if _reaches(graph, m, m))
    assert cycles == []
    experiments = [m for m in graph if m.endswith(".experiments") or ".experiments." in m]
    assert sorted(m for m in experiments if _reaches(graph, m, m)) == []


#: embgeo.ntp's layers, bottom up (its package docstring): a module imports only from its own layer or below.
NTP_LAYERS = (("embgeo.ntp.data", "embgeo.ntp.units", "embgeo.ntp.corpus"), ("embgeo.ntp.solvers",),
              ("embgeo.ntp.theory", "embgeo.ntp"), ("embgeo.ntp.measure",), ("embgeo.ntp.training",),
              ("embgeo.ntp.analysis",), ("embgeo.ntp.experiments", "embgeo.ntp.cli"))


def _ntp_layer(module: str) -> int:
    """The layer of an embgeo.ntp module (the package itself sits with theory: it re-exports theory's names)."""
    for level, roots in enumerate(NTP_LAYERS):
        if any(module == r or (r != "embgeo.ntp" and module.startswith(r + ".")) for r in roots):
            return level
    raise AssertionError(f"{module} is in no layer of embgeo.ntp: add it to one (NTP_LAYERS and the package docstring)")


def _ntp_upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((m, d) for m, deps in graph.items() if m.startswith("embgeo.ntp") for d in deps
                  if d.startswith("embgeo.ntp") and _ntp_layer(d) > _ntp_layer(m))


def test_ntp_layers_import_only_downwards_and_src_has_no_import_cycle():
    """Issue 40: every embgeo.ntp module is in a layer (data < solvers < theory < measure < training < analysis <
    experiments) and imports nothing above its own (function-level imports too); no module of src/ is on an import
    cycle. Negative controls: an upward import and a cycle planted in a copy of the graph are found."""
    graph = _graph()
    assert _ntp_upward_imports(graph) == []
    cycles = sorted(m for m in graph if _reaches(graph, m, m))
    assert cycles == []
    planted = {m: set(d) for m, d in graph.items()}
    planted["embgeo.ntp.solvers.scan"].add("embgeo.ntp.theory.svm")  # a solver importing a theory object
    assert _ntp_upward_imports(planted) == [("embgeo.ntp.solvers.scan", "embgeo.ntp.theory.svm")]
    planted["embgeo.ntp.theory.svm"].add("embgeo.ntp.solvers.scan")
    assert _reaches(planted, "embgeo.ntp.solvers.scan", "embgeo.ntp.solvers.scan")


def _reaches(graph: dict[str, set[str]], start: str, target: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt == target:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def test_every_reproduced_experiment_has_a_measured_quick_time_within_the_readmes_ten_minutes():
    """The quick reproduction's promise (README: at most 10 minutes on one quiet core) is the sum of the measured
    ``quick_seconds`` (not a timed test: the numbers are measurements committed with their date,
    ``registry.QUICK_MEASURED``); a new experiment must bring its measured time."""
    from embgeo.lab.registry import QUICK_MEASURED, experiments, names, runtime_estimate

    total, unknown = runtime_estimate(names(), "quick")
    assert unknown == [] and 0 < total <= 600, (total, unknown)
    assert all(e.quick_seconds is None for e in experiments().values() if e.sweep_point)
    assert "taskset -c 0" in QUICK_MEASURED


def test_preset_run_finds_another_experiments_finished_run_of_its_preset(tmp_path):
    """Issue 40 §4: reading another run is the lab's (``lab.record.preset_run``). A finished run made at the scale
    with exactly the preset is found; a missing run, another scale, a changed setting each say why not; a legacy
    spelling of a computed (None) setting still matches, another value does not."""
    from embgeo.lab.record import RunRecord, preset_run, save

    preset = {"epochs": 10, "epochs_hstar": None}

    def stored(where, scale="quick", **config):
        (tmp_path / where).mkdir()
        save(RunRecord(name="exp", scale=scale, config={**preset, **config}, out=str(tmp_path / where)))
        return tmp_path / where

    rec, why = preset_run(stored("same"), "exp", "quick", preset)
    assert rec is not None and rec.config == preset and why == ""
    assert preset_run(tmp_path / "missing", "exp", "quick", preset) == (None, f"no finished run of exp in "
                                                                       f"{tmp_path / 'missing'} (run it first; "
                                                                       "nothing is re-trained here)")
    rec, why = preset_run(stored("paper", scale="paper"), "exp", "quick", preset)
    assert rec is None and "at scale 'paper'" in why
    rec, why = preset_run(stored("changed", epochs=11), "exp", "quick", preset)
    assert rec is None and "differing from the quick preset (epochs)" in why
    legacy = {"epochs_hstar": 0}
    assert preset_run(stored("old", epochs_hstar=0), "exp", "quick", preset, legacy)[0] is not None
    assert preset_run(stored("old3", epochs_hstar=3), "exp", "quick", preset, legacy)[0] is None
    assert preset_run(tmp_path / "old", "exp", "quick", preset)[0] is None  # without the legacy map: a change
