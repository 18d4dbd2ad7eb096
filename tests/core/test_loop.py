"""The shared training loop and checkpoint file (embgeo.core.loop)."""

import pytest
import torch

from embgeo.core.loop import CHECKPOINT_VERSION, Checkpoint, TrainingInterrupted, run_loop
from embgeo.core.trace import Trace
from embgeo.errors import InputError


def _counting(trace, stop_at=None, interrupt_at=None):
    state = {"x": 0}

    def step(i):
        if i == interrupt_at:
            raise KeyboardInterrupt
        state["x"] += 1

    def record(done):
        if done == stop_at:
            return None
        trace.record(done, x=state["x"])
        return {"x": state["x"]}

    return step, record


def test_records_at_start_at_requested_units_and_at_the_end():
    trace = Trace({})
    step, record = _counting(trace)
    done = run_loop(trace, 10, step, record, record_at=lambda d: d % 4 == 0, progress=False)
    assert done == 10 and trace.column("step").tolist() == [0, 4, 8, 10]
    assert trace.column("x").tolist() == [0, 4, 8, 10] and not trace.interrupted


def test_record_returning_none_stops_the_loop():
    trace = Trace({})
    step, record = _counting(trace, stop_at=3)
    assert run_loop(trace, 10, step, record, record_at=lambda d: True, progress=False) == 3
    assert trace.column("step").tolist() == [0, 1, 2]


def test_resume_from_start_does_not_rerecord_and_ctrl_c_returns_the_partial_trace():
    trace = Trace({})
    trace.record(5, x=5)
    step, record = _counting(trace, interrupt_at=7)
    seen = []
    with pytest.warns(TrainingInterrupted, match="after 7 of 10 epochs"):
        done = run_loop(trace, 10, step, record, record_at=lambda d: True, start=5, unit="epoch", progress=False,
                        on_interrupt=seen.append)
    assert done == 7 and seen == [7] and trace.interrupted
    assert trace.column("step").tolist() == [5, 6, 7]  # no second record of the start


def test_checkpoint_round_trip_and_refusals(tmp_path):
    path = tmp_path / "sub" / "run.pt"
    ck = Checkpoint(path, "embgeo.test", {"lr": 0.1})
    assert ck.load() is None
    ck.save({"epoch": 3, "w": torch.ones(2)})
    state = ck.load()
    assert state["epoch"] == 3 and state["version"] == CHECKPOINT_VERSION and torch.equal(state["w"], torch.ones(2))
    with pytest.raises(InputError, match="lr: saved 0.1, now 0.2"):
        Checkpoint(path, "embgeo.test", {"lr": 0.2}).load()
    with pytest.raises(InputError, match="not an embgeo.other checkpoint"):
        Checkpoint(path, "embgeo.other", {"lr": 0.1}).load()
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot read"):
        Checkpoint(tmp_path / "junk.pt", "embgeo.test", {}).load()
    with pytest.raises(InputError, match="file path"):
        Checkpoint(3, "embgeo.test", {})
    Checkpoint(None, "embgeo.test", {}).save({"epoch": 1})  # no path: nothing written


def test_progress_lines_off_a_terminal(capsys, monkeypatch):
    """Off a terminal: 'resumed from ...' and a line with the units done, the last values and the ETA."""
    import embgeo.core.loop as loop

    monkeypatch.setattr(loop, "LINE_SECONDS", 0.0)  # a line after every unit
    trace = Trace({})
    trace.record(2, x=2)
    step, record = _counting(trace)
    run_loop(trace, 4, step, record, record_at=lambda d: True, start=2, desc="train[x]", unit="epoch", progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "train[x]: resumed from epoch 2 of 4 (checkpoint)"
    assert err[1].startswith("train[x]: 3/4 epochs, x 1,") and "ETA" in err[1]
    assert err[2].startswith("train[x]: 4/4 epochs, x 2,") and "ETA" not in err[2]
    run_loop(Trace({}), 2, *_counting(Trace({})), record_at=lambda d: True, progress=False)
    assert capsys.readouterr().err == ""  # progress=False: silent
