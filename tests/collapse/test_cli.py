"""The collapse experiments from the command line: a diverged training or an uncovered setting is one line.

Each case runs ``embgeo`` in a subprocess and checks exit status 2, one ``embgeo: error: ...`` line
naming what went wrong, and no traceback (issue 12), with the checks of ``tests/test_cli_errors.py``.
"""

import pytest

from test_cli_errors import _one_error_line, _run


@pytest.mark.parametrize("args, needles", [
    (["run", "collapse-norms", "--set", "lr=1e6", "--set", "epochs=3"], ["diverged at step", "lower the step size"]),
    (["run", "collapse-norms", "--set", "weight_decay_W=1e9", "--set", "weight_decay_U=1e9", "--set", "epochs=3"],
     ["diverged at step"]),
    (["run", "collapse-zipf-small-ln", "--set", "weight_decay_W=1e9", "--set", "epochs=3"], ["diverged at step"]),
    (["run", "collapse-norms", "--set", "weight_decay_W=1e9"], ["weight_decay_W", "Theorem 1", "same value"]),
    (["run", "collapse-uniform", "--set", "weight_decay_U=0"], ["weight_decay_U", "Theorem 1"]),
])
def test_one_error_line_and_exit_2(tmp_path, args, needles):
    _one_error_line(_run([*args, "--out", str(tmp_path / "run")], tmp_path), *needles)
    assert not (tmp_path / "run" / "claims.json").exists()
