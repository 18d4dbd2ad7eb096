"""The HTML report as a reproduction writes it: there after the first experiment, rewritten after each one with
the experiments still to run named, left behind by a stopped run; and the table cells' display formatting
(rounded tolerances, values that do not wrap, long notes folded). tests/lab/test_report_browser.py renders it."""

from __future__ import annotations

import dataclasses
import re

import pytest

from embgeo.lab.claims import Claim, close, holds
from embgeo.lab.record import RunRecord
from embgeo.lab.registry import paper
from embgeo.lab.report import SHORT_VALUE, round_numbers, tolerance_text, write_report
from embgeo.lab.reproduce import reproduce

TWO = ["ntp-examples", "ntp-overparam"]  # a second or two each


def _progress(page: str) -> str | None:
    """The report's "N of M experiments done; still to run: ..." line as text, or None."""
    found = re.search(r"<p id='progress'>(.*?)</p>", page, re.S)
    return re.sub(r"<[^>]+>", "", found.group(1)) if found else None


def test_report_is_written_before_and_after_each_experiment(tmp_path):
    seen = {}

    def echo(line: str) -> None:  # called as each experiment starts: the report must already be there
        if line.startswith("["):
            seen[line.split()[0]] = (tmp_path / "report.html").read_text(encoding="utf-8")

    made = reproduce("ntp", "quick", tmp_path, experiments=TWO, echo=echo)
    first, second = seen["[1/2]"], seen["[2/2]"]
    assert _progress(first).startswith("0 of 2 experiments done; still to run: ntp-examples, ntp-overparam.")
    assert "id='ntp-examples'" not in first
    assert _progress(second).startswith("1 of 2 experiments done; still to run: ntp-overparam.")
    assert "id='ntp-examples'" in second and "id='ntp-overparam'" not in second
    assert 'src="data:image/png;base64,' in second  # the finished experiment's figure is on the page
    final = made.report.read_text(encoding="utf-8")
    assert _progress(final) is None and "id='ntp-overparam'" in final
    assert not list(tmp_path.glob(".report.html.*"))  # written by rename: no temporary file left


def test_a_stopped_reproduction_leaves_the_report_of_what_ran(tmp_path, with_papers):
    """Ctrl-C during the second experiment: report.html has the first one's results and names the second."""
    def interrupted(cfg, ctx):
        raise KeyboardInterrupt

    ntp = paper("ntp")
    stopped = dataclasses.replace(ntp.experiment("ntp-overparam"), run=interrupted)
    with_papers(dataclasses.replace(ntp, experiments=(ntp.experiment("ntp-examples"), stopped)))
    with pytest.raises(KeyboardInterrupt):
        reproduce("ntp", "quick", tmp_path, experiments=TWO, echo=lambda _: None)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "id='ntp-examples'" in page and "0 of 0 claims hold" in page and "besides 2 consistency checks" in page
    assert _progress(page).startswith("1 of 2 experiments done; still to run: ntp-overparam.")


def test_report_over_seeds_is_written_before_the_sweep(tmp_path):
    seen = []

    def echo(line: str) -> None:
        if line.startswith("sweep: 2 points"):  # the sweep's first line: nothing has run yet
            seen.append((tmp_path / "report.html").read_text(encoding="utf-8"))

    made = reproduce("ntp", "quick", tmp_path, experiments=["ntp-examples"], seeds=2, scheduler="inline", echo=echo)
    assert len(seen) == 1 and _progress(seen[0]).startswith("0 of 1 experiments done; still to run: ntp-examples.")
    final = made.report.read_text(encoding="utf-8")
    assert _progress(final) is None and "holds in 2/2 seeds" in final


# -- display formatting ---------------------------------------------------------------------------------------

def test_numbers_in_tolerances_are_rounded_for_display_only():
    assert round_numbers("±0.0533466") == "±0.05335"
    assert round_numbers("±0.0243982 (relative)") == "±0.0244 (relative)"
    assert round_numbers("<= 2.77344e-08") == "<= 2.773e-08"
    assert round_numbers(">= 0.92, decided outside ± 1.5e-05 (2ε, Fig. 3-4, eq. 12)") == (
        ">= 0.92, decided outside ± 1.5e-05 (2ε, Fig. 3-4, eq. 12)")  # short numbers and integers as written
    assert round_numbers("<= 18.0315 and 100.0") == "<= 18.03 and 100.0"
    assert tolerance_text(0.012345678) == "0.01235" and tolerance_text(None) == "–"
    claim = close("x", 1.0, 1.0, 0.0533466)
    assert claim.tolerance == "±0.0533466" and claim.to_dict()["tolerance"] == "±0.0533466"  # the file keeps it


def test_claims_table_cells(tmp_path):
    """Short values in nowrap cells, a bound glued to its number, each number in a nowrap span, a long list in a
    cell that may wrap between its items, a long note folded after its first words, text escaped; the file's
    values untouched."""
    long_note = "word " * 120
    ten = [250.9, 74.94, 15.78, 4.142, 1.639, 1.152, 1.049, 1.015, 1.008, 1.036]
    claims = [Claim("tolerance <b>", 1.0, True, tolerance="<= 1.42941", note="short note"),
              holds("a list", ten, True, note=long_note)]
    rec = RunRecord(name="exp", claims=claims, seconds=1.0, out=str(tmp_path / "exp"))
    (tmp_path / "exp").mkdir()
    page = write_report([rec], tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<td class='value'>&lt;=\u00a0<span class='n'>1.429</span></td>" in page
    listed = "[" + ", ".join(f"<span class='n'>{v:.4g}</span>" for v in ten) + "]"
    assert len(re.sub("<[^>]+>", "", listed)) > SHORT_VALUE and f"<td class='value long'>{listed}</td>" in page
    assert "<td class='note'>short note</td>" in page
    folded = re.search(r"<td class='note'><details><summary>(.*?) …</summary>(.*?)</details></td>", page, re.S)
    assert folded and (folded.group(1) + " " + folded.group(2)).split() == long_note.split()
    assert len(folded.group(1)) < len(long_note) / 2
    assert "<td class='claim'>tolerance &lt;b&gt;</td>" in page  # names (and notes) are text, never markup
    assert claims[0].tolerance == "<= 1.42941"
