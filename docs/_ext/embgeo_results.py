"""Results pages generated from committed runs: one claims table per paper and scale.

On ``builder-inited`` this extension reads every ``docs/results/<scale>/<experiment>/claims.json`` (with the
``record.json`` and ``config.json`` that ``embgeo run`` writes beside it, when present) and writes
``docs/results/_generated/<scale>-<paper>.rst`` — a table per experiment with each claim's paper value,
theory value, measured value, tolerance and verdict (holds / fails / undecided, consistency checks marked) —
and ``docs/results/_generated/summary.inc`` (included by ``results/index.rst``), the tally per scale and
paper with the pages' toctree. The numbers on the site are
therefore always those of the committed run files, never copied by hand.

It reads the run files as JSON and takes only the papers' titles and the experiments' order from embgeo's
registry (the entry points), so a fourth paper's results need no edit here, and the cells' formatting from the
HTML report's (``embgeo.lab.report.cell_text`` and ``tolerance_text``). Where a
file carries them, the pages say the date, commit and scale of the run: ``record.json`` keys ``date`` (or
``finished``/``started``/``timestamp``) and ``commit`` (or ``git_commit``), or a ``provenance.json`` /
``PROVENANCE`` file in the scale's folder (``{"date": ..., "commit": ..., "command": ...}``) for all of its
runs. Files are rewritten only when their text changes, so incremental builds stay incremental.

Configuration (``conf.py``): ``embgeo_results_dir``, the folder of ``<scale>/<experiment>/`` run folders
(default ``"."``: ``docs/results`` itself; relative to ``docs/results`` or absolute, e.g.
``-D embgeo_results_dir=/tmp/runs`` to preview runs that are not committed).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

#: Scales in display order (others follow alphabetically).
SCALES = ("quick", "paper")
NOT_APPLICABLE = "not applicable"  # a claim whose premise fails in the run (``"applicable": false`` in claims.json)
GENERATED = "_generated"
DATE_KEYS = ("date", "finished", "started", "timestamp", "created")
COMMIT_KEYS = ("commit", "git_commit", "revision")


@dataclass
class Run:
    """One run folder: its experiment, paper and claims, and what is known of where it came from."""

    name: str
    paper: str
    scale: str
    claims: list[dict]
    title: str = ""
    seconds: float | None = None
    date: str | None = None
    commit: str | None = None
    version: str | None = None
    device: str | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    path: str = ""
    command: str | None = None

    def tally(self) -> dict:
        """:func:`embgeo.lab.claims.tally` of the run's claims (the one definition of what counts), with ``total``
        the number of claims that count as the paper's."""
        from embgeo.lab.claims import counted, tally

        claims = [_claim(c) for c in self.claims]
        return {**tally(claims), "total": len(counted(claims))}


def _claim(claim: dict):
    """A claims.json entry as a :class:`embgeo.lab.claims.Claim` (older files' missing keys read as defaults)."""
    from embgeo.lab.claims import Claim

    return Claim.from_dict(claim)


def _verdict(claim: dict) -> str:
    from embgeo.lab.claims import verdict

    return verdict(_claim(claim))


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _first(doc: dict | None, keys) -> str | None:
    for k in keys:
        if isinstance(doc, dict) and doc.get(k) not in (None, ""):
            return str(doc[k])
    return None


def _provenance(scale_dir: Path) -> dict:
    doc = _read_json(scale_dir / "provenance.json")
    if isinstance(doc, dict):
        return doc
    text = scale_dir / "PROVENANCE"
    if text.is_file():
        out = {}
        for line in text.read_text(encoding="utf-8").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip():
                out[key.strip().lower()] = value.strip()
        return out
    return {}


def committed(path: Path) -> str | None:
    """"2026-11-27, commit abc1234": the last commit that changed ``path`` (None outside git or uncommitted)."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%cs, commit %h", "--", path.name], cwd=path.parent,
                             capture_output=True, text=True, timeout=20, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def collect(root: Path) -> dict[str, list[Run]]:
    """{scale: [Run, ...]} from ``root/<scale>/<experiment>/claims.json``."""
    out: dict[str, list[Run]] = {}
    if not root.is_dir():
        return out
    for scale_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        prov = _provenance(scale_dir)
        runs = []
        for claims_file in sorted(scale_dir.glob("*/claims.json")):
            run_dir = claims_file.parent
            claims = _read_json(claims_file)
            if not isinstance(claims, list) or run_dir.name.startswith(("_", ".")):
                continue
            record = _read_json(run_dir / "record.json") or {}
            config = _read_json(run_dir / "config.json") or {}
            name = config.get("name") or run_dir.name
            paper = record.get("paper") or name.split("-", 1)[0]
            runs.append(Run(
                name=name, paper=paper, scale=config.get("scale") or scale_dir.name,
                claims=[c for c in claims if isinstance(c, dict)], title=record.get("title", ""),
                seconds=record.get("seconds"),
                date=_first(record, DATE_KEYS) or _first(prov, DATE_KEYS),
                commit=_first(record, COMMIT_KEYS) or _first(prov, COMMIT_KEYS),
                version=(record.get("versions") or {}).get("embgeo"), device=record.get("device"),
                notes=list(record.get("notes") or []), error=record.get("error"),
                path=str(run_dir.relative_to(root.parent)), command=_first(prov, ("command",)),
            ))
        if runs:
            out[scale_dir.name] = runs
    return out


# -- rst ----------------------------------------------------------------------------------------------------------

def fmt(value) -> str:
    """A table cell of a claim's value, as the HTML report writes it (full precision in the file)."""
    from embgeo.lab.report import cell_text

    return cell_text(value)


def fmt_tolerance(value) -> str:
    """A claim's tolerance as the HTML report writes it: its numbers to 4 significant digits."""
    from embgeo.lab.report import tolerance_text

    return tolerance_text(value)


def _cell(text: str) -> str:
    """Text safe inside a list-table cell: one line, no rst markup read from the data."""
    text = " ".join(str(text).split())
    for ch in "\\*`|_":
        text = text.replace(ch, "\\" + ch)
    return text or "\\ "


def _summary_text(t: dict) -> str:
    text = f"{t['holds']}/{t['total']} claims hold"
    if t["undecided"]:
        text += f", {t['undecided']} undecided"
    if t[NOT_APPLICABLE]:
        text += f", {t[NOT_APPLICABLE]} not applicable"
    if t["others"]:
        text += f", {t['others holding']}/{t['others']} other statements hold (not the paper's)"
    if t["checks"]:
        s = "s" if t["checks"] > 1 else ""
        text += f", {t['checks']} consistency check{s} " + (
            f"({t['checks failing']} FAILING)" if t["checks failing"] else "pass")
    return text


def _sum(tallies) -> dict:
    out = {k: 0 for k in ("holds", "fails", "undecided", NOT_APPLICABLE, "others", "others holding", "total", "checks",
                          "checks failing")}
    for t in tallies:
        for k in out:
            out[k] += t[k]
    return out


def _heading(text: str, char: str) -> list[str]:
    return [text, char * max(len(text), 3), ""]


def _provenance_lines(runs: list[Run], scale: str, scale_dir: Path | None = None) -> list[str]:
    dates = sorted({r.date for r in runs if r.date})
    commits = sorted({r.commit for r in runs if r.commit})
    versions = sorted({r.version for r in runs if r.version})
    devices = sorted({r.device for r in runs if r.device})
    date = (dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}") if dates else "not recorded in the run files"
    commit = ", ".join(f"``{c}``" for c in commits) if commits else "not recorded in the run files"
    lines = [f"- scale: **{scale}**", f"- date of the run{'s' if len(runs) > 1 else ''}: {date}",
             f"- commit of the code that ran: {commit}"]
    commands = sorted({r.command for r in runs if r.command})
    if commands:
        lines.append("- made by: " + "; ".join(_cell(c) for c in commands))
    when = committed(scale_dir) if scale_dir is not None else None
    if when:
        lines.append(f"- run files committed: {when}")
    if versions:
        lines.append("- embgeo version: " + ", ".join(versions))
    if devices:
        lines.append("- device: " + ", ".join(devices))
    lines.append(f"- files: ``docs/results/{scale}/<experiment>/claims.json`` ({len(runs)} run"
                 f"{'s' if len(runs) > 1 else ''})")
    return lines + [""]


def paper_page(scale: str, paper: str, runs: list[Run], scale_dir: Path | None = None) -> str:
    title = f"{_titles_and_keys()[0].get(paper, paper)} — {scale} scale"
    total = _sum(r.tally() for r in runs)
    lines = [f".. Generated by docs/_ext/embgeo_results.py from docs/results/{scale}/*/claims.json; do not edit.",
             "", f".. _results-{scale}-{paper}:", ""]
    lines += _heading(title, "=")
    lines += ["Generated at build time from the committed run files, not copied by hand:", ""]
    lines += _provenance_lines(runs, scale, scale_dir)
    lines += [f"**{_summary_text(total)}** over {len(runs)} experiment{'s' if len(runs) > 1 else ''}"
              + (f"; {total['fails']} fail." if total["fails"] else "."), "",
              "Columns: *paper* is the printed value (only beside a run of the paper's configuration), *theory* "
              "the prediction for this run's configuration, *measured* this run's value (4 significant digits), "
              "*tolerance* the bound it is held to; a *check* is a consistency check, counted apart. See "
              ":doc:`/results/index` for how to read the verdicts.", ""]
    for run in runs:
        lines += _heading(run.name, "-")
        if run.title:
            lines += [f"*{_cell(run.title)}*", ""]
        t = run.tally()
        meta = _summary_text(t)
        if run.seconds is not None:
            meta += f"; {run.seconds:.1f} s"
        lines += [meta + ".", ""]
        if run.error:
            lines += ["The run failed: ``" + _cell(str(run.error).splitlines()[0]).replace("``", "") + "``", ""]
        if run.claims:
            lines += [".. list-table::", "   :header-rows: 1", "   :class: claims",
                      "   :widths: 26 8 9 8 9 10 10 20", "",
                      "   * - claim", "     - paper", "     - other source", "     - theory", "     - measured",
                      "     - tolerance", "     - verdict", "     - note"]
            for c in run.claims:
                v = _verdict(c)
                verdict = f"check: {v}" if c.get("check") else f"{c['source']}: {v}" if c.get("source") else v
                if v != "holds":
                    verdict = f"**{verdict}**"
                note = c.get("note") or ""
                if v == NOT_APPLICABLE:
                    note = f"premise fails: {c.get('premise', '')}" + (f"; {note}" if note else "")
                ref = c.get("reference")
                other = "–" if ref is None else f"{fmt(ref)} ({c.get('reference_source', '')})"
                row = [_cell(c.get("name", "")), _cell(fmt(c.get("paper"))), _cell(other),
                       _cell(fmt(c.get("theory"))), _cell(fmt(c.get("measured"))),
                       _cell(fmt_tolerance(c.get("tolerance"))), verdict, _cell(note)]
                lines.append("   * - " + row[0])
                lines += ["     - " + x for x in row[1:]]
            lines.append("")
        if run.notes:
            lines += ["Notes of the run:", ""] + [f"- {_cell(n)}" for n in run.notes] + [""]
    return "\n".join(lines) + "\n"


def _titles_and_keys() -> tuple[dict[str, str], list[str]]:
    """Page titles and order of the papers, from embgeo's registry (the ``embgeo.papers`` entry points).

    A paper a run file names but the registry does not know keeps its key as title and goes last."""
    from embgeo.lab.registry import papers

    registered = sorted(papers(), key=lambda p: p.order)
    return {p.name: p.title for p in registered}, [p.name for p in registered]


def _order(paper: str) -> tuple:
    keys = _titles_and_keys()[1]
    return (keys.index(paper) if paper in keys else len(keys), paper)


def _scale_order(scale: str) -> tuple:
    return (SCALES.index(scale) if scale in SCALES else len(SCALES), scale)


def experiment_order() -> list[str]:
    """The registry's order of experiments (the report's order)."""
    from embgeo.lab.registry import names

    return list(names())


def generate(root: Path, out_dir: Path, order: list[str] | None = None) -> list[Path]:
    """Write the pages for the runs under ``root`` into ``out_dir``; return the files written or kept."""
    found = collect(root)
    order = order if order is not None else experiment_order()
    rank = {n: i for i, n in enumerate(order)}
    out_dir.mkdir(parents=True, exist_ok=True)
    pages: dict[str, str] = {}
    summary = [".. Generated by docs/_ext/embgeo_results.py from docs/results/*/*/claims.json; do not edit.", ""]
    summary += _heading("The committed runs", "-")
    if not found:
        summary += ["No run files are committed under ``docs/results/`` yet: the tables appear here when "
                    "``docs/results/<scale>/<experiment>/claims.json`` files are added (see *Updating the "
                    "results* below).", ""]
    for scale in sorted(found, key=_scale_order):
        by_paper: dict[str, list[Run]] = {}
        for run in found[scale]:
            by_paper.setdefault(run.paper, []).append(run)
        summary += _heading(f"{scale} scale", "~")
        summary += _provenance_lines(found[scale], scale, root / scale)
        summary += [".. list-table::", "   :header-rows: 1", "",
                    "   * - paper", "     - experiments", "     - claims hold", "     - fail", "     - undecided",
                    "     - not applicable", "     - consistency checks"]
        for paper in sorted(by_paper, key=_order):
            runs = sorted(by_paper[paper], key=lambda r: (rank.get(r.name, len(rank)), r.name))
            page = f"{scale}-{paper}"
            pages[page] = paper_page(scale, paper, runs, root / scale)
            t = _sum(r.tally() for r in runs)
            checks = f"{t['checks']}" + (f" ({t['checks failing']} failing)" if t["checks failing"] else "")
            summary += [f"   * - :doc:`{_titles_and_keys()[0].get(paper, paper)} <{GENERATED}/{page}>`",
                        f"     - {len(runs)}",
                        f"     - {t['holds']} of {t['total']}", f"     - {t['fails']}", f"     - {t['undecided']}",
                        f"     - {t[NOT_APPLICABLE]}", f"     - {checks}"]
        summary += [""]
    if pages:
        summary += [".. toctree::", "   :hidden:", ""] + [f"   {GENERATED}/{p}" for p in pages] + [""]
    files = {f"{p}.rst": text for p, text in pages.items()}
    files["summary.inc"] = "\n".join(summary) + "\n"  # included by results/index.rst (not a page itself)
    written = []
    for fname, text in files.items():
        path = out_dir / fname
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    for stale in [*out_dir.glob("*.rst"), *out_dir.glob("*.inc")]:
        if stale not in written:
            stale.unlink()
    return written


def _builder_inited(app) -> None:
    results = Path(app.srcdir) / "results"
    generate(results / app.config.embgeo_results_dir, results / GENERATED)


def setup(app):
    app.add_config_value("embgeo_results_dir", ".", "env")
    app.connect("builder-inited", _builder_inited)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
