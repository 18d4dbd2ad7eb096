"""Issue 40 §5: torch, dask and pyarrow are extras (``train``, ``sweeps``), not requirements: the theory and
``embgeo ntp analyze`` run without them, and what needs one says so in one line naming the extra. "Without them" is
a subprocess whose imports of those packages fail (a sitecustomize that blocks them), as on a machine that never
installed them; the negative controls are the same commands with them importable."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

BLOCKER = """
import sys

class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "dask", "distributed", "pyarrow"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Block())
"""


@pytest.fixture(scope="module")
def without(tmp_path_factory):
    """run(args) in a subprocess where torch, dask and pyarrow cannot be imported."""
    site = tmp_path_factory.mktemp("blocked")
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}

    def run(args, **kw):
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300,
                              cwd=site, **kw)
    return run


def test_the_theory_runs_without_torch_dask_or_pyarrow(without):
    script = textwrap.dedent("""
        import sys
        try:
            import torch  # noqa: F401
        except ModuleNotFoundError:
            pass
        else:
            raise SystemExit("the blocker let torch in")
        from embgeo.ntp import synthetic, is_compatible, is_separable, ntp_svm
        from embgeo.ntp.analysis.analyze import analyze
        from embgeo.attention.theory import max_margin_selection
        import embgeo.collapse.theory
        import numpy as np
        data = synthetic(10, 8, 7, 2, seed=0)
        res = analyze(data)
        sel = max_margin_selection(np.eye(3), np.array([[0, 1, 2]]), [0])
        print(bool(is_compatible(data)), bool(is_separable(data)), ntp_svm(data).status, res.separable, sel.status,
              "torch" in sys.modules)
    """)
    proc = without(["-c", script])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "optimal", "True", "optimal", "False"]


def test_the_squared_hinge_working_set_runs_without_torch(without):
    """The squared hinge's working set (``is_separable``'s route beyond the small LP) takes its logits by gathered rows
    where torch is absent: the same Farkas verdict, with working-set steps taken. Its run with torch installed is
    tests/ntp/test_squared_hinge.py's."""
    script = textwrap.dedent("""
        import sys
        from embgeo.ntp import synthetic, is_separable
        from embgeo.ntp.solvers import squared_hinge
        used = []
        real = squared_hinge.working_value_and_grad
        squared_hinge.working_value_and_grad = lambda *a, **k: used.append(1) or real(*a, **k)
        data = synthetic(80, 40, 6, 1, seed=0)  # not separable; ~40 % of the off-support pairs near violation
        sep = is_separable(data, method="hinge",
                           hinge_options=squared_hinge.HingeOptions(WS_PAIRS=1200, WS_SHARE=1.0, REFRESH=5))
        print(bool(sep), sep.certificate is not None, len(used) > 0, "torch" in sys.modules)
    """)
    proc = without(["-c", script])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True", "True", "False"]


def test_ntp_analyze_runs_and_a_run_names_the_extra(without):
    proc = without(["-m", "embgeo.cli", "ntp", "analyze", "--synthetic", "10,8,7,2"])
    assert proc.returncode == 0, proc.stderr
    assert "NTP margin" in proc.stdout
    proc = without(["-m", "embgeo.cli", "run", "ntp-toy2d", "--out", "r"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("embgeo: error: run: this needs the package 'torch', which is not installed: "
                                   "pip install 'embgeo[train]'")
    proc = without(["-m", "embgeo.cli", "ntp", "probe", "--model", "m", "--text", "t", "-k", "2"])
    assert proc.returncode == 2 and "ntp probe: this needs the package 'torch'" in proc.stderr


def test_the_same_run_works_where_torch_is_installed(tmp_path):
    """The negative control: the same command without the blocker runs (the error above is the blocker's)."""
    proc = subprocess.run([sys.executable, "-m", "embgeo.cli", "run", "ntp-toy2d", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr


def test_a_real_import_error_is_not_renamed_an_extra():
    from embgeo.core.lazy import lazy, missing_extra

    assert missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch")).args[0].endswith(
        "pip install 'embgeo[train]'")
    assert missing_extra(ModuleNotFoundError("No module named 'embgeo.nothing'", name="embgeo.nothing")) is None
    assert missing_extra(ImportError("cannot import name 'x' from 'torch'", name="torch")) is None
    with pytest.raises(ModuleNotFoundError, match="embgeo.nothing"):
        lazy("embgeo.nothing", "f")()


def test_require_names_what_needs_the_package_and_its_extra(monkeypatch):
    """The text room's optional packages get the same one line as torch (one hint, ``core.lazy.EXTRAS``)."""
    import importlib

    from embgeo.core import lazy
    from embgeo.errors import MissingDependencyError

    def absent(name):
        raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}", name=name.split(".")[0])

    monkeypatch.setattr(importlib, "import_module", absent)
    with pytest.raises(MissingDependencyError) as err:
        lazy.require("tokenizers", "tokenize")
    assert str(err.value) == ("tokenize needs the package 'tokenizers', which is not installed: "
                              "pip install 'embgeo[text]'")
    with pytest.raises(ModuleNotFoundError, match="embgeo_nothing"):  # not an extra's package: not renamed
        lazy.require("embgeo_nothing.x", "f")
