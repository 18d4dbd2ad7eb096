"""What importing the collapse package does (and does not do) to a fresh interpreter."""

import subprocess
import sys

import pytest


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize("module", ["embgeo.collapse.theory", "embgeo.collapse", "embgeo.collapse.data",
                                    "embgeo.collapse.metrics"])
def test_theory_imports_do_not_import_torch(module):
    assert _python(f"import sys, {module}; print('torch' in sys.modules)") == "False"


def test_torch_names_are_still_reachable_from_the_package():
    out = _python("import sys, embgeo.collapse as c; names = (c.CollapseNet.__module__, "
                  "c.TrainingInterrupted.__name__); print('torch' in sys.modules, *names)")
    assert out == "True embgeo.collapse.model TrainingInterrupted"


def test_importing_figures_keeps_the_callers_matplotlib_backend():
    code = ("import matplotlib; matplotlib.use('pdf'); import embgeo.collapse.figures, embgeo.collapse.experiments; "
            "print(matplotlib.get_backend())")
    assert _python(code) == "pdf"


def test_importing_all_experiments_keeps_the_callers_matplotlib_backend():
    """The brief's check, over every paper's experiments (attention's included)."""
    code = ("import matplotlib; matplotlib.use('pdf'); import embgeo.collapse.figures; "
            "from embgeo.lab.registry import papers; papers(); print(matplotlib.get_backend())")
    assert _python(code) == "pdf"
