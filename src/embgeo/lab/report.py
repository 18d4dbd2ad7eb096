"""One self-contained HTML page for a set of runs: figures embedded, claims tables, configs.

The page needs no network and no other files: PNG figures are embedded as base64 data URIs (the
PDFs are linked by relative path, next to each run). Layout: a table of contents and the failing
claims at the top, then one section per paper (title, citation, summary table; the papers of the
registry in their order) with a subsection per experiment (figures with captions, the claims table,
notes, config). A run that failed sits under its paper with its error. Measured values, and the numbers
inside tolerances, are rounded to 4 significant digits on the page; ``claims.json`` keeps full precision.
A reproduction rewrites the page after each experiment, listing those still to run (``pending``), so a
stopped run leaves a page to open.

Readability (checked in Chromium by ``tests/lab/test_report_browser.py`` at 1280 and 800 px): the value columns
(paper, theory, measured, tolerance, verdict) keep a short value on one line and break a long one (a list,
a tolerance in words) only between its items, never inside a number (below 1000 px short ones may wrap
between words too); the note column takes the remaining width and wraps between words, a long note folded
after its first words. Figures are shown at their own
pixels, scaled down to fit the page's width and at most ``IMAGE_MAX_HEIGHT_PX`` tall, never enlarged.

The page is rendered from the records it is given (nothing is re-read from the run folders but the
figures) by the Jinja2 template ``templates/report.html.j2``, with autoescape on.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from embgeo.lab import registry
from embgeo.lab.claims import NOT_APPLICABLE, Claim, verdict
from embgeo.lab.record import RunRecord
from embgeo.lab.registry import Paper

#: Figures are shown at most this tall (CSS pixels): a single panel keeps its own size instead of
#: stretching to the page's width, and a 2 x 2 grid of panels still fits a laptop's screen.
IMAGE_MAX_HEIGHT_PX = 720
#: A value cell (paper, theory, measured, tolerance) up to this many characters never wraps; a longer one
#: (a list of numbers, a tolerance in words) wraps between its items only.
SHORT_VALUE = 32
#: A note longer than this many characters shows its first words, the rest folded (a click unfolds it).
NOTE_FOLD = 360

# Table cells wrap only between words (overflow-wrap:normal): "anywhere" would let the browser squeeze a
# column until numbers break mid-token ("2. 77 1"). Short value cells are nowrap, so the auto table layout
# gives them their full width and the note column the rest; on a narrow screen (a phone, a half-width window)
# they may wrap between words and list items too, still never inside a number, rather than overflow.
STYLE = f"""
body{{font-family:system-ui,sans-serif;margin:0;color:#111;line-height:1.4}}
nav{{position:sticky;top:0;background:#fafafa;border-bottom:1px solid #ccc;padding:.4em 1em;z-index:1;
    font-size:.9em;overflow-x:auto;white-space:nowrap}}
nav a{{margin-right:1em}}
main{{max-width:1400px;margin:0 auto;padding:0 1em 3em}}
table{{border-collapse:collapse;margin:.5em 0 1em;font-size:.9em;width:100%;table-layout:auto}}
th,td{{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top;overflow-wrap:normal}}
th{{background:#eee;white-space:nowrap}} .ok{{color:#05620b;font-weight:bold}} .fail{{color:#a40000;font-weight:bold}}
.undecided{{color:#8a5a00;font-weight:bold}} .na{{color:#555;font-style:italic}}
td.value{{white-space:nowrap}} td.value.long{{white-space:normal;min-width:8em}} span.n{{white-space:nowrap}}
@media (max-width:1000px){{td.value,td.value.long{{white-space:normal;min-width:0}}}}
td.claim{{min-width:7em}} td.note{{min-width:8em}}
td.note details summary{{cursor:pointer}} td.note details[open] summary{{margin-bottom:.3em}}
#progress{{background:#fff7e0;border:1px solid #e0c070;padding:.4em 1em}}
figure{{margin:1em 0}}
figure img{{display:block;box-sizing:border-box;max-width:100%;max-height:{IMAGE_MAX_HEIGHT_PX}px;width:auto;
    height:auto;border:1px solid #ddd}}
figcaption{{font-size:.9em;color:#333}}
pre{{background:#f5f5f5;padding:.5em;overflow-x:auto;white-space:pre-wrap}}
section.paper{{border-top:3px solid #333;margin-top:2em}} section.run{{border-top:1px solid #999;margin-top:1.5em}}
.legend{{font-size:.88em;background:#f7f7f0;border:1px solid #ddd;padding:.5em 1em}}
"""

LEGEND = """<div class='legend'><b>Reading the claims tables.</b>
<i>paper</i>: the number the paper prints, shown only beside a run of the paper's configuration (otherwise it
is in the note); <i>other source</i>: a number from elsewhere (the authors' notebook, a re-run of their code),
named; <i>theory</i>: the value the theory predicts for this run's configuration; <i>measured</i>:
what this run gave (rounded here; full precision in <code>claims.json</code>); <i>tolerance</i>: the bound the
measured value is held to and where it comes from — <i>exact statement</i> means a yes/no statement (an
ordering, an equality of rows, every run qualifying) with no numeric slack; <i>verdict</i>: whether the
claim holds. A failing claim is reported with its reason in the note, never tuned away. Over several seeds
(<code>reproduce --seeds N</code>), <i>measured</i> is the mean ± the standard deviation over seeds and the
verdict says in how many seeds the claim holds; it counts as holding only if it holds in every seed.
<i>undecided</i>: the measured value is known only within a certified band (a solver's error bound, an
interval) that straddles the level, so this run cannot say; such claims are counted apart.
A verdict prefixed by a source ("the toolkit's own: holds", "Zhao et al. 2024: fails") is a statement that is not
the paper's: shown, counted apart.
<i>not applicable</i>: a premise of the statement fails in this run (e.g. a theorem about NTP-separable data on
data certified not separable); the note names the premise and its certificate; neither held nor failed, counted
apart.
<i>check</i>: a consistency check — a statement true by construction of the code or of the chosen data (an
identity of the solvers' output, a setting read back), which could not fail were the paper wrong; shown so a
bug would be seen, not counted among the claims.</div>"""


def cell_text(value) -> str:
    """A table cell of a claim's value (the HTML report and the docs' results pages): numbers to 4
    significant digits, booleans as yes/no, None as a dash, lists in brackets, dicts as {key: value}."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, list):
        return "[" + ", ".join(cell_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {cell_text(v)}" for k, v in value.items()) + "}"
    return str(value)


#: A decimal number inside a text (a tolerance such as "±0.0533466 (relative)" or "<= 2.77344e-08").
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE][-+]?\d))(?:[eE][-+]?\d+)?")
#: A comparison or ± followed by a space and a number: joined by a no-break space, so they stay on one line.
_BOUND = re.compile(r"(<=|>=|[<>=±≈≤≥]) (?=[-+.\d])")


def round_numbers(text: str, digits: int = 4) -> str:
    """``text`` with every decimal number of more than ``digits`` significant digits rounded to ``digits``
    ("±0.0533466 (relative)" → "±0.05335 (relative)"); integers, shorter numbers and words stay as written."""
    def rounded(m: re.Match) -> str:
        token = m.group(0)
        mantissa = re.split("[eE]", token)[0].lstrip("+-").replace(".", "").lstrip("0")
        return f"{float(token):.{digits}g}" if len(mantissa) > digits else token

    return _NUMBER.sub(rounded, text)


def tolerance_text(value) -> str:
    """A claim's tolerance as shown (the HTML report and the docs' results pages): a number as
    :func:`cell_text` writes it; a text (what the claim helpers write, e.g. "±0.0533466", "<= 1.42941") with
    its numbers rounded to 4 significant digits (:func:`round_numbers`). ``claims.json`` keeps the text whole."""
    return round_numbers(value) if isinstance(value, str) else cell_text(value)


def unbroken(text: str) -> Markup:
    """``text`` as HTML (escaped) whose decimal numbers never break across lines: each in a ``nowrap`` span (a
    browser may otherwise break "2.773e-08" after its "e-"), and a bound kept with its number ("<= 0.5" joined
    by a no-break space)."""
    html = str(escape(_BOUND.sub("\\1\u00a0", text)))
    return Markup(_NUMBER.sub(lambda m: f"<span class='n'>{m.group(0)}</span>", html))


def _value(text: str) -> dict:
    """A value cell: its text (numbers unbroken) and whether it is long enough to wrap between its items."""
    return {"text": unbroken(text), "long": len(text) > SHORT_VALUE}


def _fold(note: str) -> tuple[str, str]:
    """A long note split after its first words (the rest is folded on the page); a short one whole."""
    if len(note) <= NOTE_FOLD:
        return note, ""
    cut = note.rfind(" ", 0, NOTE_FOLD // 2)
    cut = cut if cut > 0 else NOTE_FOLD // 2
    return note[:cut], note[cut:].lstrip()


_CSS = {"holds": "ok", "fails": "fail", "undecided": "undecided", NOT_APPLICABLE: "na"}


def _claim_row(c: Claim) -> dict:
    """The cells of one claim: measured as mean ± spread over seeds, the verdict with the seeds' count."""
    word = verdict(c)
    measured, seeds = cell_text(c.measured), ""
    if c.seeds is not None:  # over seeds (reproduce --seeds N): mean ± spread, verdict counted per seed
        if c.seeds.std is not None:
            measured = f"{cell_text(c.seeds.mean)} ± {cell_text(c.seeds.std)}"
        seeds = f": holds in {c.seeds.holds}/{c.seeds.n} seeds"
        if c.seeds.undecided:
            seeds += f", undecided in {c.seeds.undecided}"
        if c.seeds.not_applicable:
            seeds += f", not applicable in {c.seeds.not_applicable}"
    note = f"premise fails: {c.premise}" + (f"; {c.note}" if c.note else "") if not c.applicable else c.note
    head, rest = _fold(note)
    reference = "–" if c.reference is None else f"{cell_text(c.reference)} ({c.reference_source})"
    return {"name": unbroken(c.name), "paper": _value(cell_text(c.paper)), "theory": _value(cell_text(c.theory)),
            "reference": _value(reference),
            "measured": _value(measured), "tolerance": _value(tolerance_text(c.tolerance)), "css": _CSS[word],
            "verdict": ("check: " if c.check else f"{c.source}: " if c.source else "") + word, "seeds": seeds,
            "note": unbroken(head),
            "note_rest": unbroken(rest)}


def _run_view(r: RunRecord, report_dir: Path) -> dict:
    out = Path(r.out)
    try:
        rel = out.resolve().relative_to(report_dir.resolve()).as_posix()
    except ValueError:
        rel = out.resolve().as_uri()
    figures = [{"name": name, "data": base64.b64encode((out / f"{name}.png").read_bytes()).decode("ascii"),
                "pdf": f"{rel}/{name}.pdf"} for name in r.figures]
    apart = [f"{n} {word}" for n, word in ((r.undecided, "undecided"), (r.not_applicable, NOT_APPLICABLE),
                                           (r.others, "not the paper's")) if n]
    state = "error" if r.error else f"{r.passed}/{r.total}" + (f" ({', '.join(apart)})" if apart else "")
    return {"name": r.name, "title": r.title, "scale": r.scale, "seconds": f"{r.seconds:.1f}", "state": state,
            "error": r.error, "figures": figures, "claims": [_claim_row(c) for c in r.claims], "notes": r.notes,
            "config": json.dumps(r.config, indent=2), "versions": json.dumps(r.versions, indent=2)}


def _sections(records: Sequence[RunRecord], papers: Sequence[Paper], report_dir: Path) -> list[dict]:
    """One section per paper that has records: the registry's papers in their order, then any other paper the
    records name (e.g. of a package no longer installed), titled by its name."""
    by_paper: dict[str, list[RunRecord]] = {}
    for r in records:
        by_paper.setdefault(r.paper or "other", []).append(r)
    known = {p.name: p for p in papers}
    order = [p.name for p in papers if p.name in by_paper] + [n for n in by_paper if n not in known]
    sections = []
    for name in order:
        runs = by_paper[name]
        head = known.get(name)
        sections.append({"name": name, "title": head.title if head else name, "citation": head.citation if head
                         else "", "passed": sum(r.passed for r in runs), "total": sum(r.total for r in runs),
                         "undecided": sum(r.undecided for r in runs),
                         "not_applicable": sum(r.not_applicable for r in runs),
                         "runs": [_run_view(r, report_dir) for r in runs]})
    return sections


def _listings(records: Sequence[RunRecord]) -> list[dict]:
    """The failing claims (always listed, 'None.' when there are none), the undecided ones and those not applicable
    (when any)."""
    out = []
    for word, anchor, heading in (("fails", "failing", "Failing claims"), ("undecided", "undecided",
                                                                           "Undecided claims"),
                                  (NOT_APPLICABLE, "not-applicable", "Claims not applicable (a premise fails)")):
        items = [{"run": r.name, "index": i, "name": c.name, "check": c.check}
                 for r in records for i, c in enumerate(r.claims) if verdict(c) == word and not c.source]
        if word != "fails" and not items:
            continue
        out.append({"anchor": anchor, "heading": heading, "entries": items})
    return out


def _environment() -> Environment:
    return Environment(loader=PackageLoader("embgeo.lab", "templates"), autoescape=select_autoescape(["j2", "html"]),
                       keep_trailing_newline=True)


def write_report(records: Sequence[RunRecord], path: str | Path, title: str = "embgeo report",
                 papers: Sequence[Paper] | None = None, pending: Sequence[str] = ()) -> Path:
    """Write the report of ``records`` to ``path`` and return it.

    ``papers``: the papers whose titles, citations and order head the sections (default: the registry's,
    :func:`embgeo.lab.registry.papers`). ``pending``: experiments of the same reproduction not run yet, named
    at the top ("2 of 5 experiments done; still to run: ...") while a reproduction rewrites the page after
    each experiment. The page is written to a temporary file and renamed over ``path``, so a browser
    reloading it mid-run never reads half a page.
    """
    papers = registry.papers() if papers is None else papers
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    totals = {"passed": sum(r.passed for r in records), "total": sum(r.total for r in records),
              "undecided": sum(r.undecided for r in records), "runs": len(records),
              "not_applicable": sum(r.not_applicable for r in records),
              "checks": sum(r.checks for r in records), "checks_failing": sum(r.checks_failing for r in records)}
    page = _environment().get_template("report.html.j2").render(
        title=title, style=Markup(STYLE), legend=Markup(LEGEND), totals=totals,
        errors=[r.name for r in records if r.error], generated=f"{datetime.now(UTC):%Y-%m-%d %H:%M UTC}",
        pending=list(pending), listings=_listings(records), sections=_sections(records, papers, path.parent))
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(page, encoding="utf-8")
    os.replace(partial, path)
    return path
