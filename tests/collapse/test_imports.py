"""What importing the collapse package's own rooms does to a fresh interpreter (the checks every paper shares —
theory and data without torch, the experiments keeping the matplotlib backend — are tests/test_papers_import.py)."""

import subprocess
import sys


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_metrics_do_not_import_torch():
    assert _python("import sys, embgeo.collapse.metrics; print('torch' in sys.modules)") == "False"


def test_torch_names_are_still_reachable_from_the_package():
    out = _python("import sys, embgeo.collapse as c; names = (c.CollapseNet.__module__, "
                  "c.TrainingInterrupted.__name__); print('torch' in sys.modules, *names)")
    assert out == "True embgeo.collapse.model TrainingInterrupted"


def test_importing_figures_keeps_the_callers_matplotlib_backend():
    code = "import matplotlib; matplotlib.use('pdf'); import embgeo.collapse.figures; print(matplotlib.get_backend())"
    assert _python(code) == "pdf"
