"""One self-contained HTML page for a set of runs: figures embedded, claims tables, configs.

The page needs no network and no other files: PNG figures are embedded as base64 data URIs (the
PDFs are linked by relative path, next to each run). Layout: a table of contents and the failing
claims at the top, then one section per paper (title, citation, summary table) with a subsection
per experiment (figures with captions, the claims table, notes, config). Measured values are
rounded to 4 significant digits on the page; ``claims.json`` keeps full precision.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from embgeo.experiments.registry import verdict as verdict_of

if TYPE_CHECKING:
    from embgeo.experiments.runner import RunRecord

#: Paper key (Experiment.paper) → (title, citation).
PAPERS = {
    "ntp": ("Implicit Optimization Bias of Next-Token Prediction in Linear Models",
            "C. Thrampoulidis, NeurIPS 2024"),
    "collapse": ("Feature Collapse", "T. Laurent, J. H. von Brecht, X. Bresson, arXiv:2305.16162 (2023)"),
    "attention": ("Attention with Trained Embeddings Provably Selects Important Tokens",
                  "D. Wu, A. Shevchenko, S. Oymak, M. Mondelli"),
}

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#111;line-height:1.4}
nav{position:sticky;top:0;background:#fafafa;border-bottom:1px solid #ccc;padding:.4em 1em;z-index:1;
    font-size:.9em;overflow-x:auto;white-space:nowrap}
nav a{margin-right:1em}
main{max-width:1400px;margin:0 auto;padding:0 1em 3em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.9em;width:100%;table-layout:auto}
th,td{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#eee} .ok{color:#05620b;font-weight:bold} .fail{color:#a40000;font-weight:bold}
.undecided{color:#8a5a00;font-weight:bold}
figure{margin:1em 0} figure img{width:100%;height:auto;border:1px solid #ddd}
figcaption{font-size:.9em;color:#333}
pre{background:#f5f5f5;padding:.5em;overflow-x:auto;white-space:pre-wrap}
section.paper{border-top:3px solid #333;margin-top:2em} section.run{border-top:1px solid #999;margin-top:1.5em}
.legend{font-size:.88em;background:#f7f7f0;border:1px solid #ddd;padding:.5em 1em}
"""

LEGEND = """<div class='legend'><b>Reading the claims tables.</b>
<i>paper</i>: the number the paper prints, shown only beside a run of the paper's configuration (otherwise it
is in the note); <i>theory</i>: the value the theory predicts for this run's configuration; <i>measured</i>:
what this run gave (rounded here; full precision in <code>claims.json</code>); <i>tolerance</i>: the bound the
measured value is held to and where it comes from — <i>exact statement</i> means a yes/no statement (an
ordering, an equality of rows, every run qualifying) with no numeric slack; <i>verdict</i>: whether the
claim holds. A failing claim is reported with its reason in the note, never tuned away. Over several seeds
(<code>reproduce --seeds N</code>), <i>measured</i> is the mean ± the standard deviation over seeds and the
verdict says in how many seeds the claim holds; it counts as holding only if it holds in every seed.
<i>undecided</i>: the measured value is known only within a certified band (a solver's error bound, an
interval) that straddles the level, so this run cannot say; such claims are counted apart.
<i>check</i>: a consistency check — a statement true by construction of the code or of the chosen data (an
identity of the solvers' output, a setting read back), which could not fail were the paper wrong; shown so a
bug would be seen, not counted among the claims.</div>"""


def _fmt(value) -> str:
    """A table cell: numbers to 4 significant digits, booleans as yes/no, None as a dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value)
    return str(value)


def _claims_table(run: str, claims: list[dict]) -> str:
    head = ("<tr><th>claim</th><th>paper</th><th>theory</th><th>measured</th><th>tolerance</th><th>verdict</th>"
            "<th>note</th></tr>")
    rows = []
    css = {"holds": "ok", "fails": "fail", "undecided": "undecided"}
    for i, c in enumerate(claims):
        word = verdict_of(c)
        verdict = f'<span class="{css[word]}">{"check: " if c.get("check") else ""}{word}</span>'
        measured = _fmt(c.get("measured"))
        seeds = c.get("seeds")
        if seeds:  # over seeds (reproduce --seeds N): mean ± spread, verdict counted per seed
            if "std" in seeds:
                measured = f"{_fmt(seeds['mean'])} ± {_fmt(seeds['std'])}"
            verdict += f': holds in {seeds["holds"]}/{seeds["n"]} seeds'
            if seeds.get("undecided"):
                verdict += f', undecided in {seeds["undecided"]}'

        cells = [c["name"], _fmt(c.get("paper")), _fmt(c.get("theory")), measured,
                 _fmt(c.get("tolerance")), None, c.get("note", "")]
        rows.append(f"<tr id='{run}-claim-{i}'>" + "".join(
            f"<td>{verdict if v is None else html.escape(str(v))}</td>" for v in cells) + "</tr>")
    return f'<table class="claims">{head}{"".join(rows)}</table>'


def _figure(out: Path, name: str, rel: str, title: str) -> str:
    data = base64.b64encode((out / f"{name}.png").read_bytes()).decode("ascii")
    code = f"<code>{html.escape(name)}</code>"
    caption = f"{html.escape(title)} — {code}" if title else code
    pdf = f'<a href="{html.escape(rel)}/{html.escape(name)}.pdf">PDF</a>'
    return (f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{caption} ({pdf})</figcaption></figure>")


def _meta(r) -> dict:
    try:
        return json.loads((Path(r.out) / "record.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def write_report(records: Sequence[RunRecord], path: str | Path, title: str = "embgeo report") -> Path:
    """Write the report of ``records`` (RunRecord objects) to ``path`` and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    metas = {r.name: _meta(r) for r in records}
    total = sum(r.total for r in records)
    passed = sum(r.passed for r in records)
    undecided = sum(r.undecided for r in records)
    checks, checks_failing = sum(r.checks for r in records), sum(r.checks_failing for r in records)
    errors = [r.name for r in records if r.error]
    by_paper: dict[str, list] = {}
    for r in records:
        by_paper.setdefault(metas[r.name].get("paper", "other"), []).append(r)

    nav = "".join(f"<a href='#paper-{p}'>{html.escape(PAPERS.get(p, (p,))[0])}</a>" for p in by_paper)
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
             f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body><nav><a href='#top'>top</a><a href='#failing'>failing claims</a>"
             f"{nav}</nav><main id='top'><h1>{html.escape(title)}</h1>",
             f"<p id='summary'><b>{passed} of {total} claims hold</b>"
             + (f", <span class='undecided'>{undecided} undecided</span>" if undecided else "")
             + f" across {len(records)} experiments"
             + (f" (besides {checks} consistency checks, "
                + (f"<span class='fail'>{checks_failing} failing</span>)" if checks_failing else "all passing)")
                if checks else "")
             + (f"; <span class='fail'>{len(errors)} experiment(s) failed to run: {', '.join(errors)}</span>"
                if errors else "") + f". Generated {datetime.now(UTC):%Y-%m-%d %H:%M UTC}.</p>", LEGEND]

    for word, anchor in (("fails", "failing"), ("undecided", "undecided")):
        listed = [(r.name, i, c) for r in records for i, c in enumerate(r.claims) if verdict_of(c) == word]
        if word == "undecided" and not listed:
            continue
        parts.append(f"<h2 id='{anchor}'>{'Failing' if word == 'fails' else 'Undecided'} claims ({len(listed)})</h2>")
        if listed:
            parts.append("<ul>" + "".join(
                f"<li><a href='#{name}-claim-{i}'>{html.escape(name)}: {html.escape(c['name'])}</a>"
                + (" (consistency check)" if c.get("check") else "") + "</li>"
                for name, i, c in listed) + "</ul>")
        else:
            parts.append("<p>None.</p>")

    for paper, runs in by_paper.items():
        ptitle, cite = PAPERS.get(paper, (paper, ""))
        held = sum(r.passed for r in runs)
        count = sum(r.total for r in runs)
        open_ = sum(r.undecided for r in runs)
        parts.append(f"<section class='paper' id='paper-{paper}'><h2>{html.escape(ptitle)}</h2>"
                     f"<p>{html.escape(cite)} — {held} of {count} claims hold"
                     + (f", {open_} undecided" if open_ else "") + ".</p>"
                     "<table><tr><th>experiment</th><th>what it reproduces</th><th>claims holding</th>"
                     "<th>scale</th><th>run time</th></tr>")
        for r in runs:
            state = "error" if r.error else f"{r.passed}/{r.total}" + (
                f" ({r.undecided} undecided)" if r.undecided else "")
            parts.append(f"<tr><td><a href='#{r.name}'>{r.name}</a></td>"
                         f"<td>{html.escape(metas[r.name].get('title', ''))}</td><td>{state}</td>"
                         f"<td>{html.escape(r.scale)}</td><td>{r.seconds:.1f} s</td></tr>")
        parts.append("</table>")
        for r in runs:
            parts.append(_run_section(r, metas[r.name], path.parent))
        parts.append("</section>")
    parts.append("</main></body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _run_section(r, meta: dict, report_dir: Path) -> str:
    out = Path(r.out)
    try:
        rel = out.resolve().relative_to(report_dir.resolve()).as_posix()
    except ValueError:
        rel = out.resolve().as_uri()
    parts = [f"<section class='run' id='{r.name}'><h3>{html.escape(r.name)}</h3>"]
    if meta.get("title"):
        parts.append(f"<p>{html.escape(meta['title'])}</p>")
    if r.error:
        parts.append(f"<p class='fail'>The experiment failed to run:</p><pre>{html.escape(r.error)}</pre>")
    for name in r.figures:
        parts.append(_figure(out, name, rel, meta.get("title", "")))
    if r.claims:
        parts.append(_claims_table(r.name, r.claims))
    for note in r.notes:
        parts.append(f"<p>{html.escape(note)}</p>")
    parts.append(f"<details><summary>config ({html.escape(r.scale)} scale), run time {r.seconds:.1f} s, "
                 "versions</summary>"
                 f"<pre>{html.escape(json.dumps(r.config, indent=2))}</pre>"
                 f"<pre>{html.escape(json.dumps(r.versions, indent=2))}</pre></details></section>")
    return "".join(parts)
