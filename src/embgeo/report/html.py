"""One self-contained HTML page for a set of runs: figures embedded, claims tables, configs.

The page needs no network and no other files: PNG figures are embedded as base64 data URIs.
"""

from __future__ import annotations

import base64
import html
import json
from datetime import UTC, datetime
from pathlib import Path

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#111}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.92em}
th,td{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#eee} .ok{color:#05620b;font-weight:bold} .fail{color:#a40000;font-weight:bold}
img{max-width:100%;border:1px solid #ddd;margin:.3em 0} pre{background:#f5f5f5;padding:.5em;overflow-x:auto}
section{border-top:2px solid #333;margin-top:2em}
"""


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value)
    return str(value)


def _claims_table(claims: list[dict]) -> str:
    head = "<tr><th>claim</th><th>paper</th><th>theory</th><th>measured</th><th>tolerance</th><th>verdict</th>" \
           "<th>note</th></tr>"
    rows = []
    for c in claims:
        verdict = '<span class="ok">holds</span>' if c["ok"] else '<span class="fail">fails</span>'
        cells = [c["name"], _fmt(c.get("paper")), _fmt(c.get("theory")), _fmt(c.get("measured")),
                 _fmt(c.get("tolerance")), None, c.get("note", "")]
        rows.append("<tr>" + "".join(f"<td>{verdict if v is None else html.escape(str(v))}</td>" for v in cells)
                    + "</tr>")
    return f'<table class="claims">{head}{"".join(rows)}</table>'


def _figure(out: Path, name: str) -> str:
    data = base64.b64encode((out / f"{name}.png").read_bytes()).decode("ascii")
    return f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">' \
           f"<figcaption>{html.escape(name)} (PDF: {html.escape(name)}.pdf)</figcaption></figure>"


def write_report(records, path: str | Path, title: str = "embgeo report") -> Path:
    """Write the report of ``records`` (RunRecord objects) to ``path`` and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    total = sum(len(r.claims) for r in records)
    passed = sum(r.passed for r in records)
    errors = [r.name for r in records if r.error]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p id='summary'><b>{passed} of {total} claims hold</b> across {len(records)} experiments"
             + (f"; <span class='fail'>{len(errors)} experiment(s) failed to run: {', '.join(errors)}</span>"
                if errors else "") + f". Generated {datetime.now(UTC):%Y-%m-%d %H:%M UTC}.</p>",
             "<table><tr><th>experiment</th><th>claims holding</th><th>run time</th></tr>"]
    for r in records:
        state = "error" if r.error else f"{r.passed}/{len(r.claims)}"
        parts.append(f"<tr><td><a href='#{r.name}'>{r.name}</a></td><td>{state}</td><td>{r.seconds:.1f} s</td></tr>")
    parts.append("</table>")
    for r in records:
        out = Path(r.out)
        meta = {}
        try:
            meta = json.loads((out / "record.json").read_text())
        except (OSError, json.JSONDecodeError):
            pass
        parts.append(f"<section id='{r.name}'><h2>{html.escape(r.name)}</h2>")
        if meta.get("title"):
            parts.append(f"<p>{html.escape(meta['title'])}</p>")
        if r.error:
            parts.append(f"<p class='fail'>The experiment failed to run:</p><pre>{html.escape(r.error)}</pre>")
        for name in r.figures:
            parts.append(_figure(out, name))
        if r.claims:
            parts.append(_claims_table(r.claims))
        for note in r.notes:
            parts.append(f"<p>{html.escape(note)}</p>")
        parts.append(f"<details><summary>config ({html.escape(r.scale)} scale), run time {r.seconds:.1f} s, "
                     "versions</summary>"
                     f"<pre>{html.escape(json.dumps(r.config, indent=2))}</pre>"
                     f"<pre>{html.escape(json.dumps(r.versions, indent=2))}</pre></details></section>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
