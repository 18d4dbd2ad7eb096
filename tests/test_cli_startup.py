"""What a new user's first commands import (issue 37): ``embgeo list``, ``show`` and every refusal read the
registry, which imports every paper's experiment modules, and must not pay for what only a run needs.

One fresh interpreter runs the commands through :func:`embgeo.cli.main` and checks ``sys.modules`` after each:
torch, matplotlib.pyplot, pandas, scipy.stats and scipy.optimize are never imported. A test of imports, not of
time (no timed assertions: the CPU time was measured by hand, see the issue).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

#: The modules that made `embgeo list` cost ~2.2 s of CPU before issue 37.
HEAVY = ("torch", "matplotlib.pyplot", "pandas", "scipy.stats", "scipy.optimize")

#: (argv, exit status, a piece of the error line or None): listing, showing, and refusals of every kind.
CALLS = [
    (["list"], 0, None),
    (["show", "ntp-gd"], 0, None),
    (["show", "collapse-norms"], 0, None),
    (["show", "attention-synthetic"], 0, None),
    (["run", "ntp-gdd"], 2, "unknown experiment 'ntp-gdd'"),
    (["run", "ntp-gd", "--set", "device=banana"], 2, "got 'banana'"),
    (["run", "ntp-gd", "--set", "lr=abc"], 2, "--set lr=abc"),
    (["run", "ntp-gd", "--set", "stepz=3"], 2, "did you mean 'steps'"),
    (["run", "ntp-gd", "--set", "steps=1000000000000"], 2, "30-day limit"),
    (["--threads", "100000", "list"], 2, "--threads 100000"),
    (["sweep", "ntp-gd", "--seeds", "1000000000", "--store", "s.sqlite"], 2, "1,000,000,000 points"),
    (["ntp", "analyze", "--tokens", "big.txt", "-k", "1"], 2, "big.txt:3: token id 99999999999"),
    (["ntp", "analyze", "--tokens", "short.txt", "-k", "1000000000"], 2, "context_length=1000000000"),
    (["ntp", "probe", "--model", "lm", "--text", "short.txt", "-k", "5000"], 2, "window of 1024"),
]


def test_list_show_and_refusals_import_no_heavy_module(tmp_path):
    (tmp_path / "big.txt").write_text("1 2 3\n\n4 99999999999 6\n")
    (tmp_path / "short.txt").write_text("1 2 3\n4 5 6 7\n")
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 1024}))
    script = textwrap.dedent(f"""
        import contextlib, io, json, sys
        from embgeo.cli import main
        out = []
        for argv, expected, needle in {CALLS!r}:
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                rc = main(argv)
            out.append([argv, rc, err.getvalue(), [m for m in {HEAVY!r} if m in sys.modules]])
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for (argv, expected, needle), (_, rc, err, loaded) in zip(CALLS, results, strict=True):
        assert rc == expected, (argv, err)
        assert loaded == [], (argv, loaded)  # checked after each command: the first to import one is named
        if needle is not None:
            errors = [line for line in err.splitlines() if line.startswith("embgeo: error:")]
            assert len(errors) == 1 and needle in errors[0], (argv, err)
    assert not (tmp_path / "s.sqlite").exists()  # the refused sweep created no store


def test_collapse_constants_are_computed_on_first_use():
    """The collapse experiments' tolerances that solve Theorems 1 and 3 (scipy.optimize) are computed when first
    read, not when the registry imports the module, and read as the same numbers as before."""
    script = textwrap.dedent("""
        import sys
        import embgeo.collapse.experiments
        import embgeo.collapse.experiments.standards as C
        assert "scipy.optimize" not in sys.modules
        import numpy as np
        tau3 = C.type2_constants(3, 15, 1000, 100, 1e-3).tau
        tau1 = C.type1_constants(3, 1200, 15, 1000, 1e-3).tau
        assert C._FIG4C_SCALE == tau3 / np.sqrt(2)
        assert C.FIG4C_SCALE_TOL == max(abs(a / (tau3 / np.sqrt(2)) - 1) for a in C.AUTHORS_FIG4C_U[:2])
        assert C.SIGMA_TAU_TOL == max(abs(v / float(np.sqrt(tau1 / 2)) - 1) for v in C._FIG3_SIGMAS)
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
