"""The CLI as a new user meets it: bad input, odd --out paths and Ctrl-C give one line, never a traceback.

Each case runs ``embgeo`` in a subprocess and checks the exit status (2 for bad input, 130 for
Ctrl-C), that stderr is one ``embgeo: error: ...`` line naming the input, and that nothing was
computed or half-written first.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EMBGEO = [sys.executable, "-m", "embgeo.cli"]


def _run(args, cwd):
    return subprocess.run([*EMBGEO, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def _one_error_line(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("embgeo: error:")]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "latin1.txt").write_bytes(b"1 2 3\n4 \xff 5\n")
    (tmp_path / "superscript.txt").write_text("1 2 3\n4 \u00b2 5\n", encoding="utf-8")
    (tmp_path / "ten.txt").write_text("".join(f"{i} {i + 1}\n" for i in range(10)), encoding="utf-8")
    (tmp_path / "words.txt").write_text("the cat sat\non the mat\n", encoding="utf-8")
    (tmp_path / "bigid.txt").write_text("1 2 3\n\n4 99999999999 6\n", encoding="utf-8")  # line 3, after a blank one
    (tmp_path / "lm").mkdir()  # a model folder as far as its window goes: ntp probe reads it before loading the model
    (tmp_path / "lm" / "config.json").write_text('{"model_type": "gpt2", "n_positions": 1024}', encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("args, needles", [
    (["run", "ntp-gd", "--out", "afile"], ["--out afile", "is a file"]),
    (["run", "ntp-gd", "--out", "afile/sub"], ["afile is a file"]),
    (["reproduce", "--paper", "ntp", "--out", "afile"], ["--out afile"]),
    (["ntp", "analyze", "--out", "afile"], ["--out afile"]),
    (["ntp", "analyze", "--tokens", "latin1.txt", "-k", "1"], ["latin1.txt:2", "UTF-8"]),
    (["ntp", "analyze", "--tokens", "superscript.txt", "-k", "1"], ["superscript.txt:2", "'\u00b2'"]),
    (["ntp", "analyze", "--seed", "-1"], ["--seed", "-1"]),
    (["ntp", "analyze", "--synthetic", "100000,100000,100000,5"], ["GiB"]),
    (["ntp", "analyze", "--tokens", "ten.txt", "-k", "1", "--embeddings", "random:100000000"], ["embeddings", "GiB"]),
    (["run", "ntp-gd", "--set", "stepz=3"], ["did you mean 'steps'"]),
    (["run", "ntp-overparam", "--set", "ratios=[0.5,1]"], ["ratios=64,128"]),
    (["run", "ntp-gd", "--set", "lr=1e300", "--set", "steps=20"], ["diverged at step", "lower the step size"]),
    # issue 37: sizes that hung, blew up or crashed, each refused in one line naming the size
    (["ntp", "analyze", "--text", "words.txt", "-k", "1000000000"], ["context_length=1000000000", "longest: 3"]),
    (["ntp", "analyze", "--tokens", "ten.txt", "-k", "1000000000", "--windows"], ["context_length=1000000000"]),
    (["ntp", "probe", "--model", "lm", "--text", "words.txt", "-k", "1000000000"],
     ["--context-length 1000000000", "window of 1024"]),
    (["ntp", "analyze", "--tokens", "bigid.txt", "-k", "1"], ["bigid.txt:3", "token id 99999999999", "--max-vocab"]),
    (["--threads", "100000", "list"], ["--threads 100000", "at most"]),
    (["run", "ntp-gd", "--set", "steps=1000000000000"], ["ntp-gd would take", "× 1e+08 for steps = 1000000000000",
                                                          "30-day limit"]),
    (["sweep", "ntp-gd", "--seeds", "1000000000", "--store", "s.sqlite"], ["1,000,000,000 points", "100,000"]),
    (["run", "ntp-gd", "--set", "lr=1e6"], ["diverged at step 1", "exceeds 10 × max(CE at step 0, log V)",
                                            "lower the step size"]),
])
def test_bad_input_is_one_line_and_exit_2(files, args, needles):
    _one_error_line(_run(args, files), *needles)


def _limit_memory():
    """An address-space limit of 3 GiB in the child: whatever allocates in proportion to the bad value (8 GB for
    np.arange(10**9)) fails there with a MemoryError traceback instead of the one-line refusal."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024**3, 3 * 1024**3))


def test_sizes_are_refused_before_anything_of_their_size_is_allocated(files):
    """Issue 37: a context length of 10**9 (7.7 GB and minutes), a 103-million-point grid (4.3 GB and growing), a
    token id of 10**11 (std::bad_alloc) and steps = 10**12 (started, ETA 430,883 h) are each refused in one line
    under a 3 GiB memory limit, before anything is created (no store, no run folder)."""
    values = ",".join(str(i) for i in range(1, 471))  # three grids of 470 values: 103,823,000 points
    cases = [
        (["ntp", "analyze", "--tokens", "ten.txt", "-k", "1000000000"], "context_length=1000000000"),
        (["sweep", "ntp-gd", "--grid", f"lr={values}", "--grid", f"steps={values}", "--grid", f"m={values}",
          "--store", "s.sqlite"], "103,823,000 points (lr: 470 values × steps: 470 values × m: 470 values)"),
        (["ntp", "analyze", "--tokens", "bigid.txt", "-k", "1"], "token id 99999999999"),
        (["run", "ntp-gd", "--set", "steps=1000000000000", "--out", "gd"], "30-day limit"),
    ]
    for args, needle in cases:
        proc = subprocess.run([*EMBGEO, *args], cwd=files, capture_output=True, text=True, timeout=300,
                              preexec_fn=_limit_memory)
        _one_error_line(proc, needle)
    assert not (files / "s.sqlite").exists() and not (files / "gd").exists()


def test_autoregressive_context_length_beyond_every_line_is_handled(files):
    """With --autoregressive a k above the longest line still gives every prefix: it runs (under a 3 GiB limit),
    with the contexts of k = the longest line − 1, instead of padding every context to 10**9 tokens."""
    proc = subprocess.run([*EMBGEO, "ntp", "analyze", "--tokens", "ten.txt", "-k", "1000000000", "--autoregressive"],
                          cwd=files, capture_output=True, text=True, timeout=300, preexec_fn=_limit_memory)
    assert proc.returncode == 0, proc.stderr
    assert "k=1000000000" in proc.stdout and "m=10 contexts" in proc.stdout


def test_a_single_grid_is_refused_from_its_count(files, monkeypatch, capsys):
    """One --grid with more values than a sweep may have points is refused from its count, before its values are
    split (an argument list cannot be that long on Linux, so in-process)."""
    from embgeo import cli

    monkeypatch.chdir(files)
    values = ",".join(["1"] * 200_001)
    assert cli.main(["sweep", "ntp-gd", "--grid", f"steps={values}", "--store", "s.sqlite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["embgeo: error: --grid steps: 200,001 values, above the 100,000 points one sweep may have; use "
                   "fewer values, or several sweeps into one --store"]


def test_unwritable_out_is_refused_before_computing(files):
    locked = files / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # e.g. running as root: permissions are not enforced
            pytest.skip("this user can write to a read-only directory (root); nothing to test")
        proc = _run(["run", "ntp-gd", "--out", str(locked / "gd")], files)
        _one_error_line(proc, "not writable")
        assert not (locked / "gd").exists()
    finally:
        locked.chmod(0o700)


def test_ctrl_c_is_one_line_and_exit_130(files):
    # A background job inherits SIGINT as ignored (and Python then installs no handler): restore the default
    # in the child, as a terminal's Ctrl-C would find it.
    proc = subprocess.Popen([*EMBGEO, "run", "ntp-gd", "--set", "steps=100000000", "--out", str(files / "gd")],
                            cwd=files, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while not (files / "gd").exists() and time.time() < deadline:  # the run has started once its folder exists
        time.sleep(0.2)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    finally:  # never leave a training running behind a failed test
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("embgeo:")]
    assert lines[-1].startswith("embgeo: interrupted") and not any("error" in line for line in lines)
    assert not Path(files / "gd" / "claims.json").exists()  # nothing half-written as a result


def test_missing_optional_dependency_is_one_line(monkeypatch, capsys):
    """A MissingDependencyError (e.g. the text extra) is reported like bad input, not as a traceback."""
    from embgeo import cli
    from embgeo.errors import MissingDependencyError

    def missing(args):
        raise MissingDependencyError("attention text pipeline: install the text extra (pip install -e '.[text]')")

    monkeypatch.setattr(cli, "cmd_list", missing)
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["embgeo: error: attention text pipeline: install the text extra (pip install -e '.[text]')"]


def test_unwritable_out_is_refused_even_as_root(files, monkeypatch, capsys):
    """The same refusal in-process, with the permission check answering "not writable" (root bypasses
    file permissions, so the subprocess test above skips there): nothing is computed or created."""
    from embgeo import cli

    locked = files / "locked"
    locked.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != locked)
    monkeypatch.chdir(files)
    assert cli.main(["run", "ntp-gd", "--out", str(locked / "gd")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"embgeo: error: --out {locked / 'gd'}: {locked} is not writable"]
    assert not (locked / "gd").exists()


def test_answers_larger_than_the_budget_are_refused_before_they_are_allocated(files, monkeypatch, capsys):
    """Every answer of ntp analyze is a V × d matrix: above the dense budget it is refused up front (one line,
    nothing solved), and the library's own conversion to W refuses too (the issue's random:100000000 under an
    8 GiB cap died with a MemoryError inside is_compatible's to_w)."""
    import numpy as np

    from embgeo import cli
    from embgeo.core import validate
    from embgeo.errors import TooLargeError
    from embgeo.ntp import synthetic
    from embgeo.ntp.solvers.constraints import coordinates

    monkeypatch.setattr(validate, "DENSE_BUDGET_BYTES", 8 * 10 * 50)  # H (10 × 50) fits, W (11 × 50) does not
    monkeypatch.chdir(files)
    assert cli.main(["ntp", "analyze", "--tokens", "ten.txt", "-k", "1", "--embeddings", "random:50"]) == 2
    err = capsys.readouterr()
    assert err.err.strip().splitlines()[-1].startswith("embgeo: error: W* and W^mm are V × d = 11 × 50")
    assert "compatible" not in err.out  # nothing was solved
    data = synthetic(4, 10, 50, 2)
    with pytest.raises(TooLargeError, match="W"):
        coordinates(data.embeddings).to_w(np.zeros((11, 4)))  # (11, 50): one row over the budget


def test_sizes_beyond_the_memory_left_are_refused(files, monkeypatch, capsys):
    """Under a memory limit (ulimit -v, a container) the estimate is held against what the process can still
    allocate, and a size it cannot hold is refused in one line instead of a MemoryError traceback (the answers;
    F's exact system is then not built, see tests/ntp/test_cli_analyze.py)."""
    from embgeo import cli
    from embgeo.core import validate

    monkeypatch.setattr(validate, "available_memory_bytes", lambda: 1024.0)
    monkeypatch.chdir(files)
    assert cli.main(["ntp", "analyze", "--tokens", "ten.txt", "-k", "1", "--embeddings", "random:8"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("embgeo: error: the answers (W*, W^mm, a certificate: V × d each) need") \
        and "can allocate only" in line
    assert validate.available_memory_bytes() == 1024.0


def test_a_closed_pipe_ends_quietly():
    """`embgeo list | head -1`: the reader has gone before embgeo writes. The command stops with the
    shell's SIGPIPE status and no traceback (nor Python's 'Exception ignored' at its exit flush)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to write_end now fails with EPIPE
    try:
        proc = subprocess.run([*EMBGEO, "list"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
