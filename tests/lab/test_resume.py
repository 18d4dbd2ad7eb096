"""Ctrl-C and the same command again: every experiment that keeps a checkpoint resumes from it (issue 37).

For each experiment whose training keeps a checkpoint (``ctx.checkpoint``), a run is interrupted right after its
second checkpoint (at a step > 0) and run again: the second run must read the checkpoint back ("resumed from ...",
no saved step done twice) and end with the claims and trace of an uninterrupted run. One case goes the way a user
does it: SIGINT to ``embgeo run`` in a subprocess, then the same command. Then what the CLI says on Ctrl-C: resume
from step k where a checkpoint was kept, a run from the start where none was (ntp-gd).
"""

from __future__ import annotations

import pickle
import re
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from embgeo.core import loop
from embgeo.core.status import Status
from embgeo.lab.registry import get
from embgeo.lab.runner import RunInterrupted, run

SRC = Path(__file__).resolve().parents[2] / "src" / "embgeo"

#: Small NTP corpora on which H_t is NTP-separable from step 0 (d = 64 > m), so the trace rows carry the
#: NTP-SVM's Status: the value that made ntp-real-lstm's checkpoint unreadable. The smoke corpus never is.
_REAL = {"n_lines": 5, "max_vocab": 40, "d": 64, "steps": 30, "track_seconds": 5.0}

#: Every experiment that keeps a checkpoint, with the settings of a run of seconds (the registry's smoke
#: settings, except the NTP ones above). test_every_checkpointing_experiment_is_listed keeps the list complete.
RESUMABLE = {
    "ntp-real-ufm": _REAL,
    "ntp-real-ufm-gd": {**_REAL, "lr": 3.0},
    "ntp-real-lstm": _REAL,
    "ntp-real-transformer": _REAL,
    **{name: get(name).smoke for name in (
        "collapse-uniform", "collapse-zipf-large", "collapse-zipf-small", "collapse-zipf-small-ln", "collapse-norms",
        "collapse-no-decay", "attention-synthetic", "attention-reviews", "attention-two-layer")},
}


def test_every_checkpointing_experiment_is_listed():
    """A tripwire: the experiments reach a checkpoint through these ``ctx.checkpoint`` calls. A new call means a new
    checkpointing experiment (or a changed one): add it to RESUMABLE, then update the counts here."""
    papers = [path for path in SRC.rglob("*.py") if path.relative_to(SRC).parts[0] not in ("lab", "core")]
    calls = {path.relative_to(SRC).as_posix(): len(re.findall(r"ctx\.checkpoint\(", path.read_text()))
             for path in papers}
    assert {k: v for k, v in calls.items() if v} == {"ntp/experiments/real.py": 1, "collapse/experiments/sgd.py": 1,
                                                     "attention/experiments.py": 2}


class _Saves:
    """Checkpoint.save, counted: each save with a path is recorded as (file name, "epoch k" / "step k", state);
    with ``interrupt_after=n`` the n-th raises KeyboardInterrupt once the file is written (a Ctrl-C in training)."""

    def __init__(self, monkeypatch, interrupt_after: int | None = None):
        self.saved: list[tuple[str, str, dict]] = []
        real = loop.Checkpoint.save

        def save(ck, state):
            real(ck, state)
            if ck.path is None:
                return
            unit = "epoch" if "epoch" in state else "step"
            self.saved.append((ck.path.name, f"{unit} {state[unit]}", state))
            if len(self.saved) == interrupt_after:
                raise KeyboardInterrupt

        monkeypatch.setattr(loop.Checkpoint, "save", save)


@pytest.mark.parametrize("name", list(RESUMABLE))  # 1-8 s each on the shared 2-core machine
def test_an_interrupted_run_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_run(name, tmp_path,
                                                                                          monkeypatch, capsys):
    overrides = RESUMABLE[name]
    with monkeypatch.context() as m:
        reference = _Saves(m)
        expected = run(name, overrides=overrides, out=tmp_path / "reference", threads=1)
    assert len(reference.saved) >= 3, "the test interrupts after the second save and needs one after it"
    if name.startswith("ntp-real"):  # the case of issue 37: a Status in the saved trace rows
        assert any(isinstance(v, Status) for _, _, st in reference.saved for r in st["rows"] for v in r.values())

    out = tmp_path / "run"
    with monkeypatch.context() as m, warnings.catch_warnings():
        warnings.simplefilter("ignore", loop.TrainingInterrupted)
        interrupted = _Saves(m, interrupt_after=2)
        with pytest.raises(RunInterrupted) as stop:
            run(name, overrides=overrides, out=out, threads=1)
    file, at, _ = interrupted.saved[-1]
    assert int(at.split()[1]) > 0 and not (out / "claims.json").exists()
    # The file as written reads back under the safe load alone, with no class allowed beside torch's defaults
    # (Checkpoint.load also allows Status, for files written before issue 37): what was a Status is a str now.
    state = torch.load(out / "checkpoints" / file, weights_only=True)
    assert not any(isinstance(v, Status) for r in state["rows"] for v in r.values())
    assert stop.value.checkpoints == [(out / "checkpoints" / file, at)]  # what the CLI's message says
    assert stop.value.resume_hint.endswith(f"the same command resumes its training from {at}")
    capsys.readouterr()

    with monkeypatch.context() as m:
        resumed = _Saves(m)
        record = run(name, overrides=overrides, out=out, threads=1)
    assert f"resumed from {at} of " in capsys.readouterr().err  # (a) it read its checkpoint back ...
    assert len(resumed.saved) == len(reference.saved) - 2  # ... and did none of the saved work again
    assert not (out / "checkpoints").exists()
    assert [c.to_dict() for c in record.claims] == [c.to_dict() for c in expected.claims]  # (b) the same results
    assert (out / "trace.csv").read_text() == (tmp_path / "reference" / "trace.csv").read_text()


#: The experiments that train twice (h then h*; the two-layer then the one-layer model), a checkpoint each.
TWO_TRAININGS = ("collapse-uniform", "collapse-zipf-large", "attention-two-layer")


@pytest.mark.parametrize("name", TWO_TRAININGS)
def test_a_run_interrupted_in_its_second_training_does_not_train_the_first_again(name, tmp_path, monkeypatch,
                                                                                 capsys):
    """Ctrl-C right after the second training's first checkpoint: the message lists both checkpoints, and the same
    command takes the first training from its final checkpoint (no step of it again) and ends as uninterrupted."""
    overrides = RESUMABLE[name]
    with monkeypatch.context() as m:
        reference = _Saves(m)
        expected = run(name, overrides=overrides, out=tmp_path / "reference", threads=1)
    files = list(dict.fromkeys(file for file, _, _ in reference.saved))
    assert len(files) == 2, files
    first_end = [at for file, at, _ in reference.saved if file == files[0]][-1]
    second = 1 + [file for file, _, _ in reference.saved].index(files[1])  # the second training's first save

    out = tmp_path / "run"
    with monkeypatch.context() as m, warnings.catch_warnings():
        warnings.simplefilter("ignore", loop.TrainingInterrupted)
        _Saves(m, interrupt_after=second)
        with pytest.raises(RunInterrupted) as stop:
            run(name, overrides=overrides, out=out, threads=1)
    assert sorted((p.name, at) for p, at in stop.value.checkpoints) == sorted(
        [(files[0], first_end), (files[1], reference.saved[second - 1][1])])
    assert stop.value.resume_hint.endswith("the same command resumes its trainings from them")
    capsys.readouterr()

    with monkeypatch.context() as m:
        resumed = _Saves(m)
        record = run(name, overrides=overrides, out=out, threads=1)
    assert f"resumed from {first_end} of {first_end.split()[1]} (checkpoint)" in capsys.readouterr().err
    assert len(resumed.saved) == len(reference.saved) - second and {f for f, _, _ in resumed.saved} == {files[1]}
    assert [c.to_dict() for c in record.claims] == [c.to_dict() for c in expected.claims]
    assert (out / "trace.csv").read_text() == (tmp_path / "reference" / "trace.csv").read_text()


# -- the way a user does it: Ctrl-C to `embgeo run`, then the same command ------------------------------------

#: collapse-norms at its smoke settings: 6 epochs, checkpoints at epochs 0, 2, 4 and 6.
_NORMS = ["run", "collapse-norms", "--threads", "1",
          *(f"--set={k}={v}" for k, v in get("collapse-norms").smoke.items())]


def test_sigint_to_embgeo_run_then_the_same_command_resumes(tmp_path):
    """SIGINT, as Ctrl-C sends it, while `embgeo run` trains; the same command again resumes from the checkpoint.

    The interrupted process is `embgeo run` itself, with one change: after its second checkpoint (epoch 2) the
    training waits for the signal (instead of the test guessing when a checkpoint exists), so the signal lands
    inside the training, as a user's Ctrl-C does, with no timing in the test."""
    out = tmp_path / "run"
    script = textwrap.dedent(f"""
        import sys, time
        from embgeo.core import loop
        from embgeo.cli import main

        real, saved = loop.Checkpoint.save, []

        def save(ck, state):
            real(ck, state)
            saved.append(state["epoch"])
            print(f"saved epoch {{state['epoch']}}", flush=True)
            if len(saved) == 2:
                time.sleep(600)  # Ctrl-C comes here

        loop.Checkpoint.save = save
        sys.exit(main({[*_NORMS, "--out", str(out)]!r}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            # a background job inherits SIGINT ignored: restore the default, as a terminal has it
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:
            if line.strip() == "saved epoch 2":
                break
        else:
            raise AssertionError(f"no second checkpoint: {proc.communicate()[1]}")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:  # never leave a training running behind a failed test
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"embgeo: interrupted (Ctrl-C); the checkpoint of collapse-norms is kept in {out / 'checkpoints'}: the same "
        "command resumes its training from epoch 2")

    again = subprocess.run([sys.executable, "-m", "embgeo.cli", *_NORMS, "--out", str(out)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "train[collapse]: resumed from epoch 2 of 6 (checkpoint)" in again.stderr
    run("collapse-norms", overrides=get("collapse-norms").smoke, out=tmp_path / "reference", threads=1)
    assert (out / "claims.json").read_text() == (tmp_path / "reference" / "claims.json").read_text()
    assert not (out / "checkpoints").exists()


# -- what the CLI says on Ctrl-C ------------------------------------------------------------------------------

def _ctrl_c(monkeypatch, capsys, argv: list[str]) -> str:
    """``embgeo ARGV`` in this process: exit 130 and its last line on stderr."""
    from embgeo import cli

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # main() sets its own: restored after
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", loop.TrainingInterrupted)
        assert cli.main(argv) == 130
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_ctrl_c_in_an_experiment_without_checkpoint_says_it_runs_again_from_the_start(tmp_path, monkeypatch, capsys):
    """ntp-gd keeps no checkpoint: a Ctrl-C inside its training must not promise a resume."""
    import embgeo.ntp.training.train as train_mod

    real, calls = train_mod._Loss.full, []

    def interrupting(self, W):  # the fifth loss evaluation meets Ctrl-C
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(self, W)

    monkeypatch.setattr(train_mod._Loss, "full", interrupting)
    out = tmp_path / "gd"
    last = _ctrl_c(monkeypatch, capsys, ["run", "ntp-gd", "--threads", "1", "--out", str(out)])
    assert len(calls) == 5  # it was the training that was interrupted
    assert last == ("embgeo: interrupted (Ctrl-C); ntp-gd wrote no checkpoint (only long trainings keep one): the "
                    "same command runs it again from the start")
    assert not (out / "checkpoints").exists() and not (out / "claims.json").exists()


def _interrupted_at(out: Path, name: str, steps: list[int]) -> RunInterrupted:
    """The RunInterrupted of ``name`` in ``out`` holding real checkpoint files of its config at ``steps``."""
    from embgeo.lab.context import RunContext
    from embgeo.lab.runner import _checkpoints_of

    ctx, cfg = RunContext(out_dir=out), get(name).config("quick")
    for i, step in enumerate(steps):
        loop.Checkpoint(ctx.checkpoint(f"part{i}", cfg), "embgeo.test", {}).save({"step": step})
    return RunInterrupted(name, out, _checkpoints_of(out))


def test_ctrl_c_in_reproduce_says_finished_experiments_are_reused_and_where_the_training_resumes(
        tmp_path, monkeypatch, capsys):
    import embgeo.lab.reproduce as reproduce_mod

    out = tmp_path / "repro"
    stop = _interrupted_at(out / "ntp-real-lstm", "ntp-real-lstm", [20])

    def interrupted(*args, **kwargs):
        raise stop

    monkeypatch.setattr(reproduce_mod, "reproduce", interrupted)
    last = _ctrl_c(monkeypatch, capsys, ["reproduce", "--paper", "ntp", "--out", str(out)])
    assert last == (f"embgeo: interrupted (Ctrl-C); finished experiments in {out} are kept and reused by the same "
                    f"command; the checkpoint of ntp-real-lstm is kept in {out / 'ntp-real-lstm' / 'checkpoints'}: "
                    "the same command resumes its training from step 20")
    last = _ctrl_c(monkeypatch, capsys, ["reproduce", "--paper", "ntp", "--out", str(out), "--fresh"])
    assert "finished experiments in" in last and "--fresh runs them all again: leave it out to reuse them" in last


def test_several_checkpoints_are_listed_and_a_sweep_says_its_store_keeps_the_finished_points(tmp_path, monkeypatch,
                                                                                             capsys):
    import embgeo.lab.sweep as sweep_mod

    out = tmp_path / "point"
    stop = _interrupted_at(out, "collapse-uniform", [40, 3])
    assert [at for _, at in stop.checkpoints] == ["step 40", "step 3"]
    assert stop.resume_hint.startswith(f"the checkpoints of collapse-uniform are kept in {out / 'checkpoints'} (part0-")
    assert stop.resume_hint.endswith("at step 3): the same command resumes its trainings from them")

    assert pickle.loads(pickle.dumps(stop)).resume_hint == stop.resume_hint  # as a Dask worker would send it
    (out / "store.sqlite").touch()  # an experiment that is a sweep (ntp-separability) keeps its finished points
    assert RunInterrupted("ntp-separability", out, []).resume_hint == (
        f"the finished points of the ntp-separability sweep are kept in {out / 'store.sqlite'}: the same command "
        "runs only the rest")

    def interrupted(*args, **kwargs):
        raise stop

    monkeypatch.setattr(sweep_mod, "run_sweep", interrupted)
    store = tmp_path / "store.sqlite"
    last = _ctrl_c(monkeypatch, capsys, ["sweep", "collapse-uniform", "--grid", "seed=0,1", "--store", str(store)])
    assert last == f"embgeo: interrupted (Ctrl-C); every finished point is kept in {store}: the same command runs " \
                   f"only the rest; {stop.resume_hint}"
