"""Sweeps that tell the truth (issue 24): every point checked before anything runs, a non-zero exit status and
the failures listed when a point fails, one store shared by two sweeps without running a point twice, read-only
stores readable, and every bad address or unwritable store one line. The CLI is the subject where it says so
(subprocesses); the points are seconds each (``ntp-separability-point`` with few trials, ``--scheduler inline``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from embgeo.errors import InputError
from embgeo.lab.store import RunStore, point_key, results
from embgeo.lab.sweep import grid_points, load_spec
from test_cli_errors import _one_error_line  # the CLI tests' one-error-line check (tests/ is on the path)

EMBGEO = [sys.executable, "-m", "embgeo.cli"]
EXP = "ntp-separability-point"
ROOT = Path(__file__).resolve().parents[2]


def _run(args, cwd, timeout=300):
    return subprocess.run([*EMBGEO, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


# -- every point checked before anything runs -------------------------------------------------------------------

@pytest.mark.parametrize("grid, fixed, needle", [
    ({"lr": ["0"]}, {}, "lr = 0.0: expected a finite number > 0"),
    ({"lr": ["-1"]}, {}, "lr = -1.0: expected a finite number > 0"),
    ({"lr": ["nan"]}, {}, "lr = nan: expected a finite number"),
    ({"lr": ["inf"]}, {}, "lr = inf: expected a finite number"),
    ({"m": ["0"]}, {}, "m = 0: expected an integer >= 1"),
    ({"steps": ["0"]}, {}, "steps = 0: expected an integer >= 1"),
    ({"support_size": ["11"]}, {}, "support_size = 11 is larger than V = 10"),
    ({"m": [50.5]}, {}, "m = 50.5: expected an integer"),  # a TOML float
    ({"seed": ["-3"]}, {}, "seed = -3: expected an integer >= 0"),
    ({}, {"m": [50, 100]}, "m = [50, 100]: expected one value, not a list"),  # a TOML list in `set`
])
def test_every_point_is_checked_before_anything_runs(tmp_path, grid, fixed, needle):
    """A bad value anywhere in the grid refuses the whole sweep when its points are built (nothing is queued or
    run), naming the setting; the good values beside it do not let it through."""
    grid = {k: ["0.5", *v] if k == "lr" else v for k, v in grid.items()}
    with pytest.raises(InputError, match=re.escape(needle)):
        grid_points("ntp-gd", grid, fixed, runs_dir=tmp_path)


def test_every_preset_passes_the_checks():
    """The rules by setting name hold for every registered experiment's own presets (so none refuses a preset)."""
    from embgeo.lab.registry import experiments

    for exp in experiments().values():
        for scale in ("quick", "paper"):
            exp.config(scale)


def test_a_toml_spec_with_bad_values_is_refused_in_one_line_and_queues_nothing(tmp_path):
    """Through the CLI: m = 50.5 and a list where one value goes; no store is created."""
    for bad in ('set = { m = 50.5 }', 'set = { m = [50, 100] }'):
        (tmp_path / "s.toml").write_text(f'[[sweep]]\nexperiment = "ntp-gd"\ngrid = {{ lr = [0.1, 0.5] }}\n{bad}\n')
        proc = _run(["sweep", "--spec", "s.toml", "--store", "s.sqlite", "--scheduler", "inline"], tmp_path)
        _one_error_line(proc, "ntp-gd: setting m = ")
        assert not (tmp_path / "s.sqlite").exists()
        with pytest.raises(InputError, match="ntp-gd: setting m = "):
            load_spec(tmp_path / "s.toml")  # the same check in Python


def test_run_with_a_negative_seed_is_one_line(tmp_path):
    _one_error_line(_run(["run", "ntp-gd", "--set", "seed=-3"], tmp_path), "seed = -3")
    assert not (tmp_path / "runs").exists()


# -- failures: exit status, listed, whole tracebacks ------------------------------------------------------------

def test_a_failing_point_makes_the_exit_status_1_and_is_listed(tmp_path):
    """m = 100 > d = 60: valid settings whose data are not separable, so ntp-gd raises when it runs."""
    proc = _run(["sweep", "ntp-gd", "--grid", "m=20,100", "--set", "steps=20", "--store", "s.sqlite",
                 "--scheduler", "inline"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "sweep: 1 done, 1 failed" in proc.stdout
    listed = [line for line in proc.stdout.splitlines() if line.strip().startswith("failed:")]
    assert len(listed) == 1 and "ntp-gd steps=20 m=100:" in listed[0] and "not NTP-separable" in listed[0]
    frame = results(tmp_path / "s.sqlite").set_index("config.m")
    error = frame.loc[100, "error"]
    assert error.startswith("Traceback (most recent call last):") and error.count("\n") > 5  # all of it


@pytest.mark.slow  # the README's 12 points, ~3 s each even at 20 steps (data, W*, W^mm, figures): 20-40 s
def test_the_readme_sweep_example_works(tmp_path):
    """The README's first sweep command, as printed (only shortened with --set steps=20 and run inline, which
    change neither the configs nor their data): every point done, exit status 0. Its previous example swept
    m = 50, 100 at d = 60 and 15 of its 30 points failed (m = 100: not separable)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in readme.splitlines() if ln.startswith("embgeo sweep ") and "--grid" in ln)
    args = shlex.split(line.split("#")[0])[1:]
    proc = _run([*args, "--set", "steps=20", "--scheduler", "inline"], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = tmp_path / args[args.index("--store") + 1]
    frame = results(store)
    assert len(frame) > 1 and (frame["status"] == "done").all()


# -- one store, two sweeps --------------------------------------------------------------------------------------

def test_a_point_held_by_a_live_sweep_is_not_claimed_again(tmp_path):
    """claim(): one transaction; a running point of a live process (here: our parent) is not taken, one of a
    process that is gone (a killed sweep) is; a done point never."""
    from embgeo.lab.store import this_process

    path = tmp_path / "s.sqlite"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = this_process().rpartition(":")[0]
    with RunStore(path) as st:
        keys = [point_key(EXP, "quick", {"i": i}) for i in range(3)]
        for k in keys:
            st.queue(k, experiment=EXP, scale="quick", seed=0, config={})
        assert st.claim(keys[0], owner=f"{host}:{os.getppid()}")
        assert st.claim(keys[1], owner=f"{host}:{dead.pid}")
        assert not st.claim(keys[0], owner=this_process())  # live holder
        assert st.claim(keys[1], owner=this_process())  # dead holder
        assert st.get(keys[1])["attempts"] == 2 and st.get(keys[1])["owner"] == this_process()
        st.mark_done(keys[1], seconds=1.0, claims=[], scalars={}, run_dir="x", figures=[], versions={})
        assert not st.claim(keys[1], owner=this_process())
        assert st.mark_interrupted(keys, owner=this_process()) == 0  # only what this owner holds as running
        assert st.claim(keys[2], owner=this_process()) and st.mark_interrupted(keys, owner=this_process()) == 1
        assert st.get(keys[2])["status"] == "interrupted"


def test_two_sweeps_on_one_store_run_each_point_once(tmp_path):
    """Two CLI sweeps of the same six points on one store, started together: each point runs once (attempts 1;
    before, every point ran in both), both share the work and exit 0, and a sweep that met the other's running
    point says it waited for it."""
    cmd = [*EMBGEO, "sweep", EXP, "--grid", "seed=0,1,2,3,4,5", "--set", "m=40", "--set", "ratio=0.5", "--set",
           "trials=40", "--store", "s.sqlite", "--scheduler", "inline"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    try:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert [p.returncode for p in procs] == [0, 0], outputs
    with RunStore(tmp_path / "s.sqlite") as st:
        rows = st.rows()
    assert len(rows) == 6 and all(r["status"] == "done" for r in rows)
    assert all(r["attempts"] == 1 for r in rows), [(r["key"], r["attempts"]) for r in rows]
    owners = {r["owner"] for r in rows}
    assert owners == {f"{socket.gethostname()}:{p.pid}" for p in procs}, owners  # both ran points
    assert any("being run by another sweep" in out for out in outputs)


# -- reading an archived store; unwritable stores and bad addresses ---------------------------------------------

def _sweep_into(store: Path) -> None:
    from embgeo.lab.sweep import run_sweep

    run_sweep(grid_points(EXP, {"ratio": ["0.5"]}, {"m": "10", "trials": "2"}, runs_dir=store.parent / "runs"),
              store, scheduler="inline", echo=lambda _: None)


def test_results_never_writes_the_store(tmp_path):
    """Reading opens the file read-only: not a byte of it changes (SQLite may leave an empty write-ahead log
    and its index beside it where the folder is writable; nothing is written into them)."""
    store = tmp_path / "s.sqlite"
    _sweep_into(store)
    before = store.read_bytes()
    proc = _run(["results", "--store", str(store)], tmp_path)
    assert proc.returncode == 0 and "done" in proc.stdout
    assert store.read_bytes() == before
    wal = tmp_path / "s.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def _immutable(*paths: Path) -> bool:
    """chattr +i (root on ext4 can; elsewhere the tests that need it skip)."""
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True).returncode == 0


def test_an_archived_store_is_read_and_an_unwritable_one_is_one_line(tmp_path):
    """A store whose file and folder are immutable (chattr +i: read-only even for root, which chmod is not):
    ``results`` reads it (before: 'unable to open database file'); a sweep into it, or into an immutable store
    file in a writable folder (before: a traceback), is one error line."""
    archive = tmp_path / "archive"
    archive.mkdir()
    store = archive / "s.sqlite"
    _sweep_into(store)
    if not _immutable(store, archive):
        pytest.skip("chattr +i is not available here (needs root and ext2/3/4 or similar)")
    sweep = ["sweep", EXP, "--set", "m=10", "--set", "trials=2", "--store", str(store), "--runs",
             str(tmp_path / "runs"), "--scheduler", "inline"]
    try:
        proc = _run(["results", "--store", str(store)], tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "done" in proc.stdout
        _one_error_line(_run(sweep, tmp_path), f"--store {archive}", "not writable")
        subprocess.run(["chattr", "-i", str(archive)], check=True)  # the folder writable, the file immutable
        _one_error_line(_run(sweep, tmp_path), f"run store {store}", "readonly")
    finally:
        subprocess.run(["chattr", "-i", str(store), str(archive)], check=True)


def test_an_unwritable_store_is_one_line_without_chattr(tmp_path, monkeypatch, capsys):
    """The same refusal where chattr is not available: SQLite's 'attempt to write a readonly database' (what an
    immutable or read-only-mounted file gives) on the first write is one line, exit 2."""
    import sqlite3

    from embgeo import cli
    from embgeo.lab import store as store_module

    class ReadOnly(sqlite3.Connection):
        def execute(self, sql, *args):
            if sql.startswith("BEGIN IMMEDIATE"):
                raise sqlite3.OperationalError("attempt to write a readonly database")
            return super().execute(sql, *args)

    path = tmp_path / "s.sqlite"
    _sweep_into(path)
    real = sqlite3.connect
    monkeypatch.setattr(store_module.sqlite3, "connect", lambda *a, **k: real(*a, **k, factory=ReadOnly))
    assert cli.main(["sweep", EXP, "--grid", "ratio=0.7", "--set", "m=10", "--set", "trials=2", "--store", str(path),
                     "--scheduler", "inline"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"embgeo: error: run store {path}: cannot write it (attempt to write a readonly database)"]


@pytest.mark.parametrize("address, needle", [
    ("foo", "expected a Dask scheduler address tcp://HOST:PORT"),
    ("tcp://127.0.0.1", "the port is missing"),
    ("http://127.0.0.1:8787", "http:// is the scheduler's dashboard"),
])
def test_a_bad_scheduler_address_is_one_line_and_leaves_no_queued_row(tmp_path, address, needle):
    for args in (["sweep", EXP, "--set", "m=10", "--store", "s.sqlite", "--scheduler", address],
                 ["reproduce", "--seeds", "2", "--out", "rep", "--scheduler", address]):
        _one_error_line(_run(args, tmp_path), f"--scheduler {address}", needle)
    assert not (tmp_path / "s.sqlite").exists() and not (tmp_path / "rep" / "store.sqlite").exists()


# -- threads reach the points -----------------------------------------------------------------------------------

def test_threads_reach_the_sweep_points_and_reproduce_seeds(tmp_path, only_experiments):
    """--threads N is the thread count each point runs with (recorded by the worker in the store), in a sweep and
    in reproduce --seeds (which before ran every point with 1 whatever --threads said)."""
    from embgeo import cli

    store = tmp_path / "s.sqlite"
    assert cli.main(["--threads", "2", "sweep", EXP, "--set", "m=10", "--set", "trials=2", "--store", str(store),
                     "--scheduler", "inline"]) == 0
    with RunStore(store) as st:
        (row,) = st.rows()
    assert row["worker"].endswith("threads=2")
    only_experiments("ntp-examples")
    assert cli.main(["--threads", "2", "reproduce", "--seeds", "2", "--scheduler", "inline", "--out",
                     str(tmp_path / "r")]) == 0
    with RunStore(tmp_path / "r" / "store.sqlite") as st:
        rows = st.rows()
    assert len(rows) == 2 and all(r["worker"].endswith("threads=2") for r in rows)


def test_threads_reach_the_points_of_a_sweep_inside_an_experiment(tmp_path):
    """ntp-separability runs its grid as a sweep inside the run: ``embgeo --threads 2 run`` reaches those points
    through the run's context (before, that inner sweep ran every point with 1 thread), and its cluster is the
    run's --scheduler, not a setting of the science config."""
    from embgeo import cli

    out = tmp_path / "sep"
    assert cli.main(["--threads", "2", "run", "ntp-separability", "--set", "ms=10", "--set", "ratios=0.5,1.2",
                     "--set", "supports=1", "--set", "vocabularies=2", "--set", "trials=2", "--scheduler", "inline",
                     "--out", str(out)]) == 0
    with RunStore(out / "store.sqlite") as st:
        rows = st.rows()
    assert len(rows) == 2 and all(r["worker"] == f"{socket.gethostname()}:{os.getpid()} threads=2" for r in rows)
    assert cli.main(["run", "ntp-separability", "--set", "scheduler=inline", "--out", str(out)]) == 2


# -- estimates before long runs ---------------------------------------------------------------------------------

def test_runs_estimated_above_ten_minutes_print_the_estimate_first(monkeypatch, capsys, tmp_path):
    """reproduce --paper ntp --scale paper starts hour-long presets (the separability sweep, the real-text
    models): it prints the registry's estimate before anything runs; a seconds-long run prints none."""
    import embgeo.lab.reproduce
    import embgeo.lab.runner
    from embgeo import cli
    from embgeo.lab.registry import get, runtime_seconds

    assert runtime_seconds(get("collapse-zipf-small"), "paper") == 75 * 60  # "about 60-75 min"
    assert runtime_seconds(get("ntp-real-ufm"), "quick") == get("ntp-real-ufm").quick_seconds  # measured
    unmeasured = dataclasses.replace(get("ntp-real-ufm"), quick_seconds=None, paper_runtime="52 min (quick: 2.4 min)")
    assert runtime_seconds(unmeasured, "quick") == 2.4 * 60  # without a measured time: the text after "quick:"

    assert runtime_seconds(get("attention-two-layer"), "paper") == 1.5 * 3600  # "about 1.5 h on one core (...)"
    days = dataclasses.replace(get("attention-two-layer"), paper_runtime="days on 2 cores (estimate)",
                               quick_seconds=None)
    assert runtime_seconds(days, "paper") == 86400 and runtime_seconds(days, "quick") is None

    def stop(*args, **kwargs):
        raise KeyboardInterrupt  # nothing runs: only what was printed before matters

    monkeypatch.setattr(embgeo.lab.reproduce, "reproduce", stop)
    monkeypatch.setattr(embgeo.lab.runner, "run", stop)
    assert cli.main(["reproduce", "--paper", "ntp", "--scale", "paper", "--out", str(tmp_path / "r")]) == 130
    first = capsys.readouterr().out.splitlines()[0]
    assert re.match(r"estimate: about 4\.\d h on one core at paper scale, from the registry's run times \(the longest: "
                    r"ntp-real-ufm-gd 60 min, ntp-separability 59 min, ntp-real-ufm 52 min\)", first), first
    assert cli.main(["run", "ntp-gd", "--out", str(tmp_path / "gd")]) == 130
    assert "estimate" not in capsys.readouterr().out
