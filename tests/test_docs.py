"""The documentation's moving parts: the runnable examples, the results-page generator, the docstring hook, the README.

Each script of ``examples/`` runs in a subprocess as a user would run it, and one number it prints is checked
against an independent computation (a least-norm solve of the log-odds equations, cvxpy on the max-margin
programs, a direct minimization of Theorem 1's H(t)). The site itself is built by ``.ci/run`` with warnings
as errors; here the results extension is run on run files written into a temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import embgeo_docstrings  # noqa: E402
import embgeo_results  # noqa: E402


def _run_example(name: str) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _number(text: str, pattern: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in the output:\n{text}"
    return float(match.group(1))


# -- examples --------------------------------------------------------------------------------------------------

def test_ntp_example_matches_a_least_norm_solve_and_cvxpy():
    """||W*|| against the least-norm solution of eqs. (4) (it lies in F, so it is W*), ||W^mm|| against cvxpy's
    solution of the NTP-SVM (Def. 3) written out constraint by constraint."""
    cp = pytest.importorskip("cvxpy")
    from embgeo.ntp import synthetic

    out = _run_example("ntp_wmm.py")
    w_star_norm = _number(out, r"\|\|W\*\|\| = ([0-9.]+)")
    w_mm_norm = _number(out, r"\|\|W\^mm\|\| = ([0-9.]+)")

    data = synthetic(m=10, V=6, d=12, support_size=3, seed=0)
    H, P = np.asarray(data.embeddings), data.probs.toarray()
    V, d = data.V, data.d
    rows, rhs, ineq = [], [], []
    for j in range(data.m):
        support = np.flatnonzero(P[j] > 0)
        for z, z2 in zip(support[:-1], support[1:], strict=True):  # (w_z - w_z')ᵀh_j = log(p_z / p_z')
            a = np.zeros((V, d))
            a[z], a[z2] = H[j], -H[j]
            rows.append(a.ravel())
            rhs.append(np.log(P[j, z] / P[j, z2]))
        ineq += [(j, z, v) for z in support for v in range(V) if v not in support]
    A = np.array(rows)
    least_norm = np.linalg.lstsq(A, np.array(rhs), rcond=None)[0]
    assert w_star_norm == pytest.approx(np.linalg.norm(least_norm), rel=1e-5)

    W = cp.Variable((V, d))
    cons = [(W[z] - W[z2]) @ H[j] == 0 for j in range(data.m)
            for z, z2 in zip(np.flatnonzero(P[j] > 0)[:-1], np.flatnonzero(P[j] > 0)[1:], strict=True)]
    cons += [(W[z] - W[v]) @ H[j] >= 1 for j, z, v in ineq]
    cp.Problem(cp.Minimize(cp.sum_squares(W)), cons).solve(solver=cp.CLARABEL)
    assert w_mm_norm == pytest.approx(np.linalg.norm(W.value), rel=1e-4)
    # Prop. 1: the printed loss gaps fall towards 0 along W* + γ W^mm
    gaps = [float(g) for g in re.findall(r"CE - H = ([0-9.e+-]+)", out)]
    assert len(gaps) == 5 and all(b < a for a, b in zip(gaps, gaps[1:], strict=False)) and gaps[-1] < 1e-12


def _h(t, n_c, n_w, L, K, lam):
    """Theorem 1's H(t), written out from the paper (not embgeo's implementation)."""
    eta = n_c / (n_c - 1) / np.sqrt(n_w * K * L)
    q = K / n_c**L
    return np.log(1 - q + q * (1 + (n_c - 1) * np.exp(-eta * t)) ** L) + lam * t


def _c(n_c, n_w, L, K, lam):
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(lambda t: _h(t, n_c, n_w, L, K, lam), bounds=(0, 1e6), method="bounded",
                          options={"xatol": 1e-10})
    return np.sqrt(res.x / n_w)


def test_collapse_example_matches_a_direct_minimization_of_H():
    """c from minimizing H(t) directly (the function checked first against the paper's printed 1.42214 and
    0.61602), against the closed form and the exact-risk minimizer that the example prints."""
    assert _c(3, 1200, 15, 1000, 1e-3) == pytest.approx(1.42214, abs=1e-5)
    assert _c(3, 1200, 15, 50, 1e-3) == pytest.approx(0.61602, abs=1e-5)
    out = _run_example("collapse_scale.py")
    c = _c(3, 12, 3, 27, 1e-2)
    assert _number(out, r"c  = sqrt\(tau / n_w\)\s+= ([0-9.]+)") == pytest.approx(c, rel=1e-6)
    assert _number(out, r"mean \|\|w\|\| = ([0-9.]+)") == pytest.approx(c, rel=1e-6)
    assert _number(out, r"pairwise cosines (-?[0-9.]+)") == pytest.approx(-0.5, abs=1e-5)


def test_attention_example_matches_cvxpy_on_problem_12():
    """||p̂|| of (12) against cvxpy on the same E¹ (the example's seed and step), and GD selecting the
    important tokens."""
    cp = pytest.importorskip("cvxpy")
    from embgeo.attention.data import assumption1_data
    from embgeo.attention.model import OneLayerAttention
    from embgeo.attention.train import embedding_update

    out = _run_example("attention_selection.py")
    norm = _number(out, r"\|\|p_hat\|\| = ([0-9.]+)")

    n_pairs, T, n_irr, d = 6, 5, 6, 256
    data = assumption1_data(n_pairs, T, seed=0, n_irrelevant=n_irr, n_positive=n_pairs, n_negative=n_pairs)
    model = OneLayerAttention(n_irr + 2 * n_pairs, d, seed=0)
    dE, _ = embedding_update(model, data.X, data.y, 1000.0)
    E1 = model.E.detach().numpy() + dE
    important = set(data.important.tolist())
    p = cp.Variable(d)
    cons = []
    for row in data.X:
        (s,) = [int(t) for t in row if t in important]
        cons += [(E1[s] - E1[t]) @ p >= 1 for t in set(row.tolist()) - {s}]
    cp.Problem(cp.Minimize(cp.sum_squares(p)), cons).solve(solver=cp.CLARABEL)
    assert norm == pytest.approx(np.linalg.norm(p.value), rel=1e-5)
    assert "exactly their important token: 100%" in out
    cosines = [float(c) for c in re.findall(r"cos\(p_t, p_hat\) (-?[0-9.]+)", out)]
    assert cosines[-1] > 0.95 and cosines[-1] > cosines[1]


# -- results pages -----------------------------------------------------------------------------------------------

def _write_run(folder: Path, name: str, paper: str, claims: list, **record):
    folder.mkdir(parents=True)
    (folder / "claims.json").write_text(json.dumps(claims))
    (folder / "config.json").write_text(json.dumps({"name": name, "scale": "quick", "config": {}}))
    (folder / "record.json").write_text(json.dumps({"seconds": 1.5, "paper": paper, "title": f"{name} title",
                                                    "versions": {"embgeo": "0.1.0"}, **record}))


def _claim(name, ok, check=False, **kw):
    return {"name": name, "measured": kw.get("measured", 0.5), "ok": ok, "paper": kw.get("paper"),
            "theory": kw.get("theory"), "tolerance": kw.get("tolerance", "<= 1"), "note": kw.get("note", ""),
            "check": check}


def test_results_pages_are_generated_from_claims_files(tmp_path):
    """One page per (scale, paper) with every claim's columns and verdict; the summary tallies them as the
    runner does (checks apart, undecided apart); date and commit from record.json; no rst injected."""
    root = tmp_path / "results"
    _write_run(root / "quick" / "ntp-a", "ntp-a", "ntp",
               [_claim("holds one", True, paper=0.8811, theory=0.88, measured=0.88123456, tolerance="±0.0533466"),
                _claim("fails |S| *bold*", False, note="because `x`"),
                _claim("undecided one", None),
                _claim("a check", True, check=True)],
               date="2026-11-27T10:00:00", commit="abc1234")
    _write_run(root / "quick" / "attention-b", "attention-b", "attention", [_claim("b", True, measured=[1, 2.5])])
    out = tmp_path / "gen"
    written = embgeo_results.generate(root, out, order=["ntp-a", "attention-b"])
    assert {p.name for p in written} == {"quick-ntp.rst", "quick-attention.rst", "summary.inc"}
    ntp = (out / "quick-ntp.rst").read_text()
    assert "1/3 claims hold, 1 undecided, 1 consistency check pass" in ntp
    assert "2026-11-27T10:00:00" in ntp and "``abc1234``" in ntp and "scale: **quick**" in ntp
    assert "0.8811" in ntp and "0.8812" in ntp  # paper value; measured to 4 significant digits
    assert "±0.05335" in ntp and "0.0533466" not in ntp  # the tolerance's number too
    assert "**fails**" in ntp and "**undecided**" in ntp and "check: holds" in ntp
    assert r"fails \|S\| \*bold\*" in ntp and r"because \`x\`" in ntp  # data never read as markup
    summary = (out / "summary.inc").read_text()
    assert summary.index("quick-ntp") < summary.index("quick-attention")  # the site's paper order
    assert "1 of 3" in summary and "[1, 2.5]" in (out / "quick-attention.rst").read_text()
    # unchanged input: files are not rewritten (incremental builds); a removed run's page goes away
    mtime = (out / "quick-ntp.rst").stat().st_mtime_ns
    embgeo_results.generate(root, out, order=[])
    assert (out / "quick-ntp.rst").stat().st_mtime_ns == mtime
    shutil.rmtree(root / "quick" / "attention-b")
    embgeo_results.generate(root, out, order=[])
    assert not (out / "quick-attention.rst").exists()


def test_results_pages_count_not_applicable_claims_apart(tmp_path):
    """A claim whose premise fails ("applicable": false) is shown with its premise, out of held / failing / undecided
    on the page and in the summary (negative control: the same claim applicable counts as failing)."""
    root = tmp_path / "results"
    na = {**_claim("limit", False, note="NaN"), "applicable": False, "premise": "not NTP-separable (Farkas)"}
    _write_run(root / "quick" / "ntp-a", "ntp-a", "ntp", [_claim("one", True), na])
    out = tmp_path / "gen"
    embgeo_results.generate(root, out, order=[])
    page = (out / "quick-ntp.rst").read_text()
    assert "1/1 claims hold, 1 not applicable" in page and "**not applicable**" in page
    assert "premise fails: not NTP-separable (Farkas); NaN" in page and "**fails**" not in page
    summary = (out / "summary.inc").read_text()
    assert "     - 1 of 1" in summary and "not applicable" in summary
    shutil.rmtree(root)
    _write_run(root / "quick" / "ntp-a", "ntp-a", "ntp", [_claim("one", True), _claim("limit", False)])
    embgeo_results.generate(root, out, order=[])
    assert "1/2 claims hold" in (out / "quick-ntp.rst").read_text()


def test_results_pages_count_other_sources_statements_apart(tmp_path):
    """A claim with a "source" (not the paper's statement) keeps its verdict, labelled, out of the paper's count."""
    root = tmp_path / "results"
    other = {**_claim("collapse", False), "source": "Zhao et al. 2024"}
    _write_run(root / "quick" / "ntp-a", "ntp-a", "ntp", [_claim("one", True), other])
    out = tmp_path / "gen"
    embgeo_results.generate(root, out, order=[])
    page = (out / "quick-ntp.rst").read_text()
    assert "1/1 claims hold, 0/1 other statements hold (not the paper's)" in page
    assert "**Zhao et al. 2024: fails**" in page


def test_results_summary_without_runs(tmp_path):
    embgeo_results.generate(tmp_path / "none", tmp_path / "gen", order=[])
    text = (tmp_path / "gen" / "summary.inc").read_text()
    assert "No run files are committed" in text and "toctree" not in text


def test_provenance_file_gives_date_and_commit(tmp_path):
    root = tmp_path / "results"
    _write_run(root / "quick" / "ntp-a", "ntp-a", "ntp", [_claim("x", True)])
    (root / "quick" / "provenance.json").write_text(json.dumps({"date": "2026-11-28", "commit": "def5678",
                                                                "command": "embgeo reproduce --scale quick"}))
    embgeo_results.generate(root, tmp_path / "gen", order=[])
    text = (tmp_path / "gen" / "quick-ntp.rst").read_text()
    assert "2026-11-28" in text and "def5678" in text and "made by: embgeo reproduce --scale quick" in text


# -- docstring hook ----------------------------------------------------------------------------------------------

def test_docstring_bars_are_escaped_outside_literals():
    lines = ["|S| tokens, ``|x|`` and :math:`|y|`", "Example::", "", "    |z| kept", "after |S|"]
    assert embgeo_docstrings.escape_bars(lines) == [
        r"\|S\| tokens, ``|x|`` and :math:`|y|`", "Example::", "", "    |z| kept", r"after \|S\|"]


def test_hanging_indents_join_their_paragraph():
    lines = ["a : first entry", "b : second entry", "    continued here", "c : third", "",
             "term", "    definition", "", "Example::", "", "    code"]
    out = embgeo_docstrings.join_hanging(lines)
    assert out[:4] == ["a : first entry", "b : second entry", "continued here", "c : third"]
    assert out[5:] == lines[5:]  # a definition list and a literal block stay as they are
    table = ["Intro text", "", "====  =======", "a     b", "====  =======", "x     first", "      continued",
             "====  =======", "", "after"]
    assert embgeo_docstrings.join_hanging(table) == table  # a simple table's continuation lines are kept


def test_references_follow_an_object_to_where_it_is_defined():
    import embgeo_refs

    from embgeo.ntp import w_star

    assert embgeo_refs.canonical_name("embgeo.ntp.w_star") == f"{w_star.__module__}.w_star"
    assert embgeo_refs.canonical_name("embgeo.ntp.no_such_name") is None
    assert embgeo_refs.canonical_name("embgeo.no_such_module.x") is None


# -- README --------------------------------------------------------------------------------------------------

def test_readme_is_short_and_keeps_the_quick_start():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= 8000  # bytes, as wc -c counts them
    assert ('python3 -m venv .venv && .venv/bin/python -m pip install -c constraints.txt -e ".[test]" '
            "&& .venv/bin/embgeo reproduce --out runs/reproduce") in readme
    assert ".venv/bin/python -m pytest -q" in readme
    for name in ("CONTRIBUTING.md", "CHANGELOG.md", "benchmarks/README.md", "python -m sphinx -W -b html docs"):
        assert name in readme


def test_readme_python_examples_run_and_print_what_their_comments_say(tmp_path):
    """Every ```python block of the README runs as written (a fresh process, as a reader pastes it) and prints one
    line per ``print``; where a print's comment gives a number, the printed line starts with it (example 3 printed
    nothing as written, issue 37)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) == 3
    for i, code in enumerate(blocks):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, f"block {i + 1}:\n{proc.stderr[-2000:]}"
        printed = proc.stdout.splitlines()
        prints = [line for line in code.splitlines() if line.startswith("print(")]
        assert len(printed) == len(prints) >= 1, f"block {i + 1} printed {printed!r}"
        for line, out in zip(prints, printed, strict=True):
            comment = line.partition("#")[2]
            for number in re.findall(r"\d+\.\d{4,}", comment):  # "= 2.38748", "optimal 2.0317914..."
                half = 0.5 * 10.0 ** -len(number.partition(".")[2])  # the comment's number is rounded to its digits
                values = [float(t) for t in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", out)]
                assert any(abs(v - float(number)) <= half * (1 + 1e-9) for v in values), (line, out)


# -- API pages ---------------------------------------------------------------------------------------------------

API_CONF = """import runpy

# The site's own settings and extensions (docs/conf.py), building the API pages alone.
globals().update({{k: v for k, v in runpy.run_path({conf!r}).items() if not k.startswith("_")}})
templates_path = [{templates!r}]
html_static_path = []
exclude_patterns = []
"""

API_INDEX = """API
===

.. autosummary::
   :toctree: api
   :recursive:

   embgeo
"""


def _api_doctrees(tmp_path: Path) -> list[Path]:
    """The API pages (autosummary over ``embgeo``, with the site's conf.py) built as XML doctrees."""
    src, out = tmp_path / "src", tmp_path / "xml"
    src.mkdir()
    (src / "conf.py").write_text(API_CONF.format(conf=str(ROOT / "docs" / "conf.py"),
                                                 templates=str(ROOT / "docs" / "_templates")))
    (src / "index.rst").write_text(API_INDEX)
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "xml", "-d", str(tmp_path / "doctrees"),
                           str(src), str(out)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pages = sorted((out / "api").glob("embgeo*.xml"))
    assert len(pages) > 50, pages  # every module of the package has its page
    return pages


def api_problems(page: Path) -> list[str]:
    """What an API page shows that it should not: a parameter named ``_x`` in a signature or a Parameters list,
    and an attribute documented twice (in its class's Variables fields and as a member, or twice in either)."""
    import xml.etree.ElementTree as ET

    problems = []
    for desc in ET.parse(page).getroot().iter("desc"):
        sig = desc.find("desc_signature")
        if sig is None or desc.get("objtype") not in ("class", "exception", "function", "method"):
            continue
        name = sig.get("ids", "").split()[0] if sig.get("ids") else sig.get("fullname")
        params = ["".join(p.find("desc_sig_name").itertext()) for p in sig.iter("desc_parameter")
                  if p.find("desc_sig_name") is not None]
        content = desc.find("desc_content")
        fields = {}
        for field in content.findall("field_list/field") if content is not None else []:
            entries = [p.find("literal_strong") for p in field.iter("paragraph")]
            fields[field.findtext("field_name")] = ["".join(e.itertext()) for e in entries if e is not None]
        private = [p for p in params + fields.get("Parameters", []) if p.startswith("_")]
        if private:
            problems.append(f"{name}: private parameters {sorted(set(private))}")
        if desc.get("objtype") in ("class", "exception") and content is not None:
            members = [s.get("ids", "").split()[0].rsplit(".", 1)[-1] for d in content.findall("desc")
                       for s in d.findall("desc_signature") if s.get("ids")]
            listed = fields.get("Variables", []) + members
            twice = sorted({a for a in listed if listed.count(a) > 1})
            if twice:
                problems.append(f"{name}: attributes documented twice {twice}")
    return problems


@pytest.mark.slow  # builds every API page (about a minute on 2 shared cores)
def test_api_pages_show_public_parameters_and_each_attribute_once(tmp_path):
    """NTPSVM showed ``_pb=None, _out=None`` in its signature and listed its attributes twice (as Variables with
    their descriptions and again as empty members); no class or function may do either."""
    pytest.importorskip("sphinx")
    problems = [p for page in _api_doctrees(tmp_path) for p in api_problems(page)]
    assert problems == []


def test_the_api_check_sees_private_parameters_and_attributes_listed_twice(tmp_path):
    """The check above on a page with both faults (the doctree of NTPSVM's page before the fix, abridged)."""
    page = tmp_path / "page.xml"
    page.write_text("""<document><desc objtype="class"><desc_signature ids="m.NTPSVM">
        <desc_parameterlist><desc_parameter><desc_sig_name>W</desc_sig_name></desc_parameter>
        <desc_parameter><desc_sig_name>_pb</desc_sig_name></desc_parameter></desc_parameterlist></desc_signature>
        <desc_content><field_list><field><field_name>Variables</field_name><field_body><bullet_list><list_item>
        <paragraph><literal_strong>W</literal_strong> (array) -- W^mm</paragraph></list_item></bullet_list>
        </field_body></field></field_list>
        <desc objtype="attribute"><desc_signature ids="m.NTPSVM.W"/></desc></desc_content></desc></document>""")
    assert api_problems(page) == ["m.NTPSVM: private parameters ['_pb']", "m.NTPSVM: attributes documented twice ['W']"]


def test_members_that_the_class_describes_are_dropped_once():
    """The hook removes a member entry (with its index entry and domain object) that the class's Variables
    fields describe, and keeps the others."""
    pytest.importorskip("sphinx")
    from types import SimpleNamespace

    from docutils import nodes
    from sphinx import addnodes

    def member(name):
        return [addnodes.index(entries=[]), addnodes.desc("", addnodes.desc_signature(ids=[f"m.C.{name}"]),
                                                          objtype="attribute")]

    variables = nodes.field("", nodes.field_name(text="Variables"), nodes.field_body("", nodes.bullet_list(
        "", nodes.list_item("", nodes.paragraph("", "", addnodes.literal_strong(text="W"), nodes.Text(" -- W^mm"))))))
    content = addnodes.desc_content("", nodes.field_list("", variables), *member("W"), *member("other"))
    doctree = nodes.document(None, None)
    doctree += addnodes.desc("", addnodes.desc_signature(ids=["m.C"]), content, objtype="class")
    objects = {"m.C": 1, "m.C.W": 2, "m.C.other": 3}
    env = SimpleNamespace(get_domain=lambda name: SimpleNamespace(objects=objects))
    assert embgeo_docstrings.described_attributes(content) == {"W"}
    embgeo_docstrings.drop_described_members(env, doctree)
    left = [sig["ids"][0] for sig in content.findall(addnodes.desc_signature)]
    assert left == ["m.C.other"] and len(list(content.findall(addnodes.index))) == 1
    assert objects == {"m.C": 1, "m.C.other": 3}
