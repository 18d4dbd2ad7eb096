"""``collapse-accuracy``: the paper's accuracy table read from finished runs of the other experiments (nothing is
trained); the runs are found and checked by :func:`embgeo.lab.record.preset_run`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import ClassVar

from embgeo.collapse.experiments.settings import COLLAPSE_CONSTRAINTS
from embgeo.collapse.experiments.standards import PAPER_ACCURACY
from embgeo.errors import InputError
from embgeo.lab.claims import Claim, as_check, holds
from embgeo.lab.context import DETACHED, RunContext
from embgeo.lab.record import config_dict, preset_run
from embgeo.lab.registry import Result, get

# -- collapse-accuracy: the paper's accuracy table from the runs above ------------------------------

#: The table's settings: (frequencies, n_spl) -> row label.
SETTINGS = {("uniform", 5): "uniform, n_spl=5", ("zipf", 500): "Zipf, n_spl=500", ("zipf", 5): "Zipf, n_spl=5"}
#: Where each cell of the table is measured: (row, net) -> (experiment, net column of its trace or None).
TABLE_SOURCES = {("uniform", 5, "h"): ("collapse-uniform", "h"), ("uniform", 5, "h*"): ("collapse-uniform", "h*"),
                 ("zipf", 500, "h"): ("collapse-zipf-large", "h"), ("zipf", 500, "h*"): ("collapse-zipf-large", "h*"),
                 ("zipf", 5, "h"): ("collapse-zipf-small", None), ("zipf", 5, "h*"): ("collapse-zipf-small-ln", None)}


@dataclass
class AccuracyTableConfig:
    """The accuracy table of Secs. 2.1-2.2 read from finished runs of the other experiments (no training).

    ``runs_dir``: the directory holding ``collapse-uniform/``, ``collapse-zipf-large/``, ... (None:
    the directory of this run's parent, i.e. the other experiments of the same reproduction).
    ``scale``: the scale those runs must have been made at (``paper`` compares with the printed values).
    """

    constraints: ClassVar[dict] = COLLAPSE_CONSTRAINTS  # ranges of the settings (embgeo.lab.settings)

    runs_dir: str | None = None
    scale: str = "quick"


#: How runs recorded before a "computed" default became None spelled it: field -> old value. Such a
#: run computed the same setting, so it still matches the preset.
LEGACY_COMPUTED = {"epochs_hstar": 0}


def read_accuracy(run_dir: str | PathLike, name: str, net: str | None, scale: str) -> tuple[float | None, str]:
    """(final test accuracy in %, note) of experiment ``name``'s run in ``run_dir``, or (None, why not).

    The run must be finished (``claims.json``), have a ``trace.csv`` with ``test_acc`` (rows of
    ``net`` when given), and have been made at ``scale`` with that scale's preset (no ``--set``).
    """
    import pandas as pd

    path = Path(run_dir)
    record, why = preset_run(path, name, scale, config_dict(get(name).config(scale)), LEGACY_COMPUTED)
    if record is None:
        return None, why
    if not (path / "trace.csv").exists():
        return None, f"no finished run of {name} in {path} (run it first; nothing is re-trained here)"
    df = pd.read_csv(path / "trace.csv")
    if net is not None:
        df = df[df["net"] == net]
    if df.empty or "test_acc" not in df:
        return None, f"{path}/trace.csv has no test accuracy for {net or name}"
    last = df.iloc[-1]
    return 100 * float(last["test_acc"]), (f"{name} ({scale}): epoch {int(last['epoch'])}, best "
                                           f"{100 * float(df['test_acc'].max()):.1f}%")


def source_verdict(run_dir: str | PathLike, net: str) -> str:
    """How the run in ``run_dir`` judged its own accuracy claim for ``net`` ("holds", "fails", ... with the name).

    The claim is the one whose name starts with "``net`` test accuracy" or, for h on Fig. 4b's data off the
    paper's sizes, the relative one ("h* generalizes and h does not", :func:`gap_claim`).
    """
    path = Path(run_dir) / "claims.json"
    if not path.exists():
        return "no claims.json"
    own = (f"{net} test accuracy", "h* generalizes and h does not") if net == "h" else (f"{net} test accuracy",)
    found = [Claim.from_dict(c) for c in json.loads(path.read_text()) if c["name"].startswith(own)]
    return "; ".join(f"'{c.name}' {c.verdict}" for c in found) or "no accuracy claim"


def run_accuracy_table(cfg: AccuracyTableConfig, ctx: RunContext = DETACHED) -> Result:
    """The paper's table: h / h* × {uniform n_spl=5, Zipf n_spl=500, Zipf n_spl=5} = 100/100, 100/100, 45/100.

    Nothing is trained: each cell is the final test accuracy of a finished run of another collapse
    experiment (:data:`TABLE_SOURCES`, read by :func:`read_accuracy`) in ``cfg.runs_dir``, made at
    ``cfg.scale`` with that scale's preset. Each of those runs claims its own accuracy, so the table's
    lines are consistency checks (issue 21: one run counts once): "the cell was read from a finished run
    of the preset", with the source run's verdict in the note; a missing or differently configured run
    fails its check with a note saying why.
    """
    import pandas as pd

    from embgeo.collapse import figures

    if cfg.scale not in ("quick", "paper"):
        raise InputError(f"scale: expected 'quick' or 'paper', got {cfg.scale!r}")
    if cfg.runs_dir is not None:
        base = Path(cfg.runs_dir)
    else:
        base = ctx.runs_dir("collapse-accuracy")
    claims, rows = [], []
    for (freqs, n_spl, net), (name, column) in TABLE_SOURCES.items():
        printed = PAPER_ACCURACY[(freqs, n_spl)][1 if net == "h*" else 0]
        acc, note = read_accuracy(base / name, name, column, cfg.scale)
        setting = SETTINGS[(freqs, n_spl)]
        if acc is not None:
            note += f"; counted in {name}: {source_verdict(base / name, net)}"
        claim = holds(f"{net} test accuracy, {setting}: the cell read from {name}", acc, acc is not None,
                      paper=printed, note=note)
        # The source run was checked to be the paper preset, so its printed value stays beside it even when this
        # table is built with --set (e.g. runs_dir).
        claim.any_scale = cfg.scale == "paper" and acc is not None
        claims.append(as_check(claim, f"the final test accuracy of {name}'s run, whose own claim counts it (one "
                                      "run counts once); this line checks that the table read it"))
        rows.append({"setting": setting, "net": net, "measured": acc, "printed": printed, "source": name,
                     "scale": cfg.scale, "note": note})
    table = pd.DataFrame(rows)
    return Result(claims, {"accuracy_table": figures.accuracy_table(table, cfg.scale)}, table,
                  [f"Read from the runs in {base} (scale {cfg.scale}); no network is trained here."])
