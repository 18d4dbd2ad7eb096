"""What importing the attention package's own rooms does to a fresh interpreter (the checks every paper shares —
theory and data without torch, the experiments keeping the matplotlib backend — are tests/test_papers_import.py)."""

import subprocess
import sys

import pytest


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize("module", ["embgeo.attention.metrics", "embgeo.attention.text", "embgeo.attention.figures"])
def test_numpy_rooms_do_not_import_torch(module):
    assert _python(f"import sys, {module}; print('torch' in sys.modules)") == "False"


def test_models_are_still_reachable_from_the_package():
    out = _python("import sys, embgeo.attention as a; names = (a.OneLayerAttention.__module__, "
                  "a.TwoLayerAttention.__name__); print('torch' in sys.modules, *names)")
    assert out == "True embgeo.attention.model TwoLayerAttention"


def test_importing_figures_keeps_the_callers_matplotlib_backend():
    code = "import matplotlib; matplotlib.use('pdf'); import embgeo.attention.figures; print(matplotlib.get_backend())"
    assert _python(code) == "pdf"
