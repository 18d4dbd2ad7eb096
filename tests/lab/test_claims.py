"""The claim helpers and the runner's paper column: the verdicts every experiment relies on."""

import math
from dataclasses import replace

import pytest

from embgeo.errors import InputError
from embgeo.lab.claims import (
    Claim,
    as_check,
    at_least,
    at_most,
    banded,
    close,
    counted,
    holds,
    not_applicable,
    others_statement,
    significant,
    tally,
    verdict,
)
from embgeo.lab.runner import paper_column


def test_close_absolute_and_relative():
    assert close("c", 1.05, 1.0, 0.1).ok
    assert not close("c", 1.2, 1.0, 0.1).ok
    assert close("c", 0.75, 1.0, 0.25).ok  # the bound itself is inside (exact in binary)
    assert close("c", 10.0, 8.0, 0.25, relative=True).ok  # 25% of 8
    assert not close("c", 1.06, 1.0, 0.05, relative=True).ok
    assert not close("c", 1e-9, 0.0, 0.5, relative=True).ok  # relative to 0: only 0 is close
    assert close("c", 1.0, 1.0, 0.1, relative=True).tolerance == "±0.1 (relative)"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_measurements_fail(bad):
    assert not close("c", bad, 1.0, 10.0).ok
    assert not close("c", 1.0, bad, 10.0).ok
    if math.isnan(bad):  # ±inf compares as it should; NaN must not pass either side
        assert not at_least("c", bad, 0.0).ok
        assert not at_most("c", bad, 0.0).ok


def test_close_refuses_a_meaningless_tolerance():
    with pytest.raises(ValueError, match="tolerance"):
        close("c", 1.0, 1.0, -0.1)
    with pytest.raises(ValueError, match="tolerance"):
        close("c", 1.0, 1.0, math.nan)


def test_bounds_and_statements():
    assert at_least("c", 1.0, 1.0).ok and not at_least("c", 0.999, 1.0).ok
    assert at_most("c", 1.0, 1.0).ok and not at_most("c", 1.001, 1.0).ok
    assert holds("c", 3, True).ok and not holds("c", 3, False).ok
    assert at_least("c", 2.0, 1.0).tolerance == ">= 1"


def test_significance_keeps_underflowed_p_values_positive():
    c = significant("rank test", 0.0, 1e-3)
    assert c.ok and c.measured > 0 and "underflowed" in c.note and "p-value" in c.tolerance
    assert not significant("rank test", 0.2, 1e-3).ok


def test_to_dict_has_the_report_keys_and_jsonable_values():
    d = close("c", math.nan, 1.0, 0.1, paper=1.0, any_scale=True).to_dict()
    assert set(d) == {"name", "paper", "theory", "measured", "tolerance", "ok", "note", "check"}
    assert d["measured"] == "nan" and d["ok"] is False


def test_paper_column_only_beside_the_papers_configuration():
    claims = [close("printed", 1.43, 1.47, 0.1, paper=0.61, note="measured on a small run"),
              close("generator", 0.87, 0.83, 0.1, paper=0.8811, any_scale=True),
              at_least("no paper value", 1.0, 0.0)]
    kept = paper_column(claims, at_paper_config=True)
    assert [c.paper for c in kept] == [0.61, 0.8811, None]
    moved = paper_column(claims, at_paper_config=False)
    assert [c.paper for c in moved] == [None, 0.8811, None]
    assert moved[0].note == "measured on a small run; paper, at its own configuration: 0.61"
    assert moved[0].ok == claims[0].ok and claims[0].paper == 0.61  # verdict unchanged, input untouched
    assert isinstance(moved[2], Claim) and moved[2].note == ""


def test_set_reads_the_annotation_of_computed_defaults():
    """`lr: float | None = None` (None → 1/(2L)) is settable from --set as a float, and back to None."""
    from embgeo.lab.registry import get

    exp = get("ntp-toy2d")
    assert exp.config("quick").lr is None
    assert exp.config("quick", {"lr": "0.3"}).lr == 0.3
    assert exp.config("quick", {"lr": "none"}).lr is None
    with pytest.raises(InputError, match="lr=fast"):
        exp.config("quick", {"lr": "fast"})
    assert get("ntp-overparam").config("quick", {"ratios": "0.5,1.5"}).ratios == (0.5, 1.5)


def test_derived_experiments_are_never_reused(tmp_path):
    """collapse-accuracy reads its sibling runs, which may have been re-made: resume must re-run it."""
    from embgeo.lab.registry import get
    from embgeo.lab.runner import run

    assert get("collapse-accuracy").derived and not get("ntp-examples").derived
    first = run("collapse-accuracy", out=tmp_path / "collapse-accuracy")
    again = run("collapse-accuracy", out=tmp_path / "collapse-accuracy", resume=True)
    assert not again.reused and first.claims == again.claims
    examples = run("ntp-examples", out=tmp_path / "ntp-examples")
    assert run("ntp-examples", out=tmp_path / "ntp-examples", resume=True).reused and examples.claims


# -- the third verdict: undecided ------------------------------------------------------------------

@pytest.mark.parametrize(("measured", "band", "expected"), [
    (0.95, 0.02, True),    # band [0.93, 0.97] above 0.9: holds
    (0.85, 0.02, False),   # band [0.83, 0.87] below: fails
    (0.91, 0.02, None),    # band [0.89, 0.93] straddles: undecided
    (0.89, 0.02, None),    # measured below but the band reaches the level: undecided, not failing
    (0.90, 0.0, True),     # no band: the plain inequality
    (0.95, math.inf, None),  # an unbounded band decides nothing
    (math.nan, 0.01, False),  # nothing measured fails
])
def test_banded_three_verdicts(measured, band, expected):
    c = banded("cos", measured, band, 0.9)
    assert c.ok is expected
    assert verdict(c) == {True: "holds", False: "fails", None: "undecided"}[expected]
    assert "decided outside" in c.tolerance


def test_banded_below_and_bad_band():
    assert banded("err", 0.10, 0.05, 0.25, above=False).ok is True
    assert banded("err", 0.40, 0.05, 0.25, above=False).ok is False
    assert banded("err", 0.22, 0.05, 0.25, above=False).ok is None
    with pytest.raises(ValueError, match="band"):
        banded("err", 0.1, -1.0, 0.25)


def test_undecided_is_counted_apart_everywhere(tmp_path):
    """tally, the run record, the CLI's last line, the report and the seed aggregate all keep undecided
    claims out of 'holds' and out of 'fails'."""
    from embgeo.cli import _claims_summary
    from embgeo.lab.claims import aggregate_claims
    from embgeo.lab.record import RunRecord
    from embgeo.lab.report import write_report

    claims = [at_least("a", 1.0, 0.5), at_least("b", 0.0, 0.5), banded("c", 0.91, 0.02, 0.9)]
    assert tally(claims) == {"holds": 1, "fails": 1, "undecided": 1, "not applicable": 0, "others": 0,
                             "others holding": 0, "checks": 0, "checks failing": 0}
    rec = RunRecord(name="exp", claims=claims, seconds=1.0, out=str(tmp_path / "exp"))
    assert rec.passed == 1 and rec.undecided == 1
    assert _claims_summary({"exp": claims}, "report.html") == [
        "1 failing claim in 1 experiment:", "  exp: b",
        "1 undecided claim (a certified band straddles its level), listed in report.html",
        "claims: 1 of 3 hold, 1 failing, 1 undecided"]
    (tmp_path / "exp").mkdir()
    text = write_report([rec], tmp_path / "report.html").read_text()
    assert "1 of 3 claims hold" in text and "1 undecided" in text and "Undecided claims (1)" in text
    assert '<span class="undecided">undecided</span>' in text
    # over seeds: holds only if it holds in every seed, fails if it fails in one, else undecided
    held, open_, failed = (replace(c, ok=v) for c, v in ((claims[0], True), (claims[2], None), (claims[1], False)))
    assert aggregate_claims([[held], [replace(held, ok=None)]])[0].ok is None
    assert aggregate_claims([[held], [held]])[0].ok is True
    assert aggregate_claims([[open_], [replace(open_, ok=False)]])[0].ok is False
    assert aggregate_claims([[failed]])[0].seeds.undecided == 0


# -- consistency checks: shown, not counted --------------------------------------------------------------

def test_consistency_checks_are_counted_apart_everywhere(tmp_path):
    """A check keeps its verdict (a failing check is a bug and is named with the failing claims) but is out of
    the held/total count of tally, the run record, the CLI, the report and the seed aggregate."""
    from embgeo.cli import _claims_summary
    from embgeo.lab.claims import aggregate_claims
    from embgeo.lab.record import RunRecord
    from embgeo.lab.report import write_report

    ok_check = as_check(holds("read back", 3, True), "the generator's parameter")
    bad_check = as_check(at_most("identity", 1.0, 1e-10), "true by construction")
    assert ok_check.check and "consistency check, not counted: the generator's parameter" in ok_check.note
    claims = [at_least("a", 1.0, 0.5), at_least("b", 0.0, 0.5), ok_check, bad_check]
    assert [c.name for c in counted(claims)] == ["a", "b"]
    assert tally(claims) == {"holds": 1, "fails": 1, "undecided": 0, "not applicable": 0, "others": 0,
                             "others holding": 0, "checks": 2, "checks failing": 1}
    rec = RunRecord(name="exp", claims=claims, seconds=1.0, out=str(tmp_path / "exp"))
    assert (rec.passed, rec.total, rec.checks, rec.checks_failing) == (1, 2, 2, 1)
    assert rec.summary() == "1/2 claims hold, 2 consistency checks (1 FAILING)"
    assert "  exp: identity (consistency check, fails)" in _claims_summary({"exp": claims}, "report.html")
    (tmp_path / "exp").mkdir()
    text = write_report([rec], tmp_path / "report.html").read_text()
    assert "1 of 2 claims hold" in text and "besides 2 consistency checks" in text
    assert "check: holds" in text and "check: fails" in text
    assert aggregate_claims([[claims[2]], [claims[2]]])[0].check is True
    # a record written before checks existed counts every claim
    old = [Claim.from_dict({k: v for k, v in c.to_dict().items() if k != "check"}) for c in claims]
    assert RunRecord(name="exp", claims=old, seconds=1.0, out=str(tmp_path)).total == 4


# -- not applicable: a premise fails, neither held nor failed ------------------------------------------------

def test_not_applicable_is_its_own_state_everywhere(tmp_path):
    """A claim whose premise fails keeps its measured value but is neither held nor failed: out of tally's held /
    failing / undecided, the run record's count, the CLI's failing list, the report's failing list and the seed
    aggregate's verdict; counted apart with the premise shown. Negative control: the same claim applicable fails."""
    from embgeo.cli import _claims_summary
    from embgeo.lab.claims import aggregate_claims
    from embgeo.lab.record import RunRecord
    from embgeo.lab.report import write_report

    limit = at_most("subspace error -> 0", float("nan"), 0.33)
    assert verdict(limit) == "fails"  # applicable, a NaN fails (the negative control)
    na = not_applicable(limit, "the data are not NTP-separable (Farkas certificate, perp 2.1e-3)")
    assert verdict(na) == "not applicable" and na.verdict == "not applicable"
    claims = [at_least("a", 1.0, 0.5), na]
    assert counted(claims) == [claims[0]]
    assert tally(claims) == {"holds": 1, "fails": 0, "undecided": 0, "not applicable": 1, "others": 0,
                             "others holding": 0, "checks": 0, "checks failing": 0}
    rec = RunRecord(name="exp", claims=claims, seconds=1.0, out=str(tmp_path / "exp"))
    assert (rec.passed, rec.total, rec.not_applicable) == (1, 1, 1)
    assert rec.summary() == "1/1 claims hold, 1 not applicable"
    assert _claims_summary({"exp": claims}, "report.html") == [
        "claims: 1 of 1 hold, 0 failing, 0 undecided, 1 not applicable (a premise fails)"]
    (tmp_path / "exp").mkdir()
    text = write_report([rec], tmp_path / "report.html").read_text()
    assert "1 of 1 claims hold" in text and "1 not applicable" in text
    assert "Claims not applicable (a premise fails) (1)" in text and "Failing claims (0)" in text
    assert "premise fails: the data are not NTP-separable" in text
    # the file keeps the state and the premise; older files (no key) are applicable
    back = Claim.from_dict(na.to_dict())
    assert not back.applicable and back.premise == na.premise
    assert "applicable" not in claims[0].to_dict() and Claim.from_dict(claims[0].to_dict()).applicable
    # over seeds: the seeds whose premise fails are left out of the verdict; in every seed: not applicable
    held = claims[0]
    agg = aggregate_claims([[held], [not_applicable(held, "premise")]])[0]
    assert agg.ok is True and agg.applicable and agg.seeds.not_applicable == 1 and agg.seeds.n == 2
    assert agg.measured == 1.0  # the mean over the applicable seeds only
    assert not aggregate_claims([[na], [na]])[0].applicable
    with pytest.raises(ValueError, match="premise"):
        not_applicable(held, "")
    with pytest.raises(ValueError, match="consistency check"):
        not_applicable(as_check(held, "by construction"), "premise")


def test_cell_text_is_the_one_formatter_of_report_and_docs(monkeypatch):
    """The HTML report and the docs' results pages write a claim's value through one function."""
    import importlib
    from pathlib import Path

    from embgeo.lab.report import cell_text

    assert cell_text(None) == "–"
    assert cell_text(True) == "yes" and cell_text(False) == "no"
    assert cell_text(3) == "3" and cell_text(0.123456) == "0.1235" and cell_text(float("inf")) == "inf"
    assert cell_text([1, 0.5]) == "[1, 0.5]" and cell_text({"a": 2.0}) == "{a: 2}"
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs" / "_ext"))
    ext = importlib.import_module("embgeo_results")
    for value in (None, True, 7, 1.23456e-7, [1.0, None], {"k": [2, 3.0]}):
        assert ext.fmt(value) == cell_text(value)


# -- numbers from outside the paper's text: their own column ---------------------------------------------------

def test_reference_values_have_their_own_labelled_column(tmp_path):
    """A number from the authors' notebook or a re-run is not a printed value: it is kept out of the paper column,
    shown labelled in its own, written to claims.json, and moved into the note off the paper's configuration like a
    printed value (negative control: the paper column stays empty)."""
    from embgeo.lab.claims import with_reference
    from embgeo.lab.record import RunRecord
    from embgeo.lab.report import write_report

    claim = with_reference(close("peak accuracy", 66.0, 65.9, 2.7), 65.9, "the authors' runs")
    assert claim.paper is None and claim.reference == 65.9
    d = claim.to_dict()
    assert d["reference"] == 65.9 and d["reference_source"] == "the authors' runs" and d["paper"] is None
    assert Claim.from_dict(d).reference_source == "the authors' runs"
    assert "reference" not in close("x", 1.0, 1.0, 0.1).to_dict()
    (tmp_path / "exp").mkdir()
    text = write_report([RunRecord(name="exp", claims=[claim], seconds=1.0, out=str(tmp_path / "exp"))],
                        tmp_path / "report.html").read_text()
    assert "<th>other source</th>" in text and "65.9</span> (the authors&#39; runs)" in text
    moved = paper_column([claim], at_paper_config=False)[0]
    assert moved.reference is None and "the authors' runs, at the paper's configuration: 65.9" in moved.note
    assert paper_column([claim], at_paper_config=True)[0].reference == 65.9
    with pytest.raises(ValueError, match="where the number comes from"):
        with_reference(claim, 1.0, "")


# -- statements that are not the paper's: shown, counted apart ---------------------------------------------------

def test_other_sources_statements_are_counted_apart(tmp_path):
    """A statement of the toolkit's own or of another paper keeps its verdict but is out of the paper's count in
    tally, the record, the CLI's failing list and last line, and the report; negative control: the same claim
    without a source counts (and fails)."""
    from embgeo.cli import _claims_summary
    from embgeo.lab.record import RunRecord
    from embgeo.lab.report import write_report

    theirs = at_most("equal-support collapse", 2.0, 0.5)
    assert verdict(theirs) == "fails" and counted([theirs]) == [theirs]  # the control: counted as the paper's
    other = others_statement(theirs, "Zhao et al. 2024")
    claims = [at_least("a", 1.0, 0.5), other, others_statement(at_least("gate", 1.0, 0.5), "the toolkit's gate")]
    assert counted(claims) == [claims[0]] and verdict(other) == "fails"
    t = tally(claims)
    assert (t["holds"], t["fails"], t["others"], t["others holding"]) == (1, 0, 2, 1)
    rec = RunRecord(name="exp", claims=claims, seconds=1.0, out=str(tmp_path / "exp"))
    assert rec.summary() == "1/1 claims hold, 1/2 other statements hold (not the paper's)"
    assert _claims_summary({"exp": claims}, "report.html") == [
        "claims: 1 of 1 hold, 0 failing, 0 undecided; statements not the papers': 1 of 2 hold"]
    (tmp_path / "exp").mkdir()
    text = write_report([rec], tmp_path / "report.html").read_text()
    assert "1 of 1 claims hold" in text and "Zhao et al. 2024: fails" in text and "Failing claims (0)" in text
    back = Claim.from_dict(other.to_dict())
    assert back.source == "Zhao et al. 2024" and "source" not in claims[0].to_dict()
    with pytest.raises(ValueError, match="whose statement"):
        others_statement(theirs, "")
