"""The shared training loop and checkpoint file (embgeo.core.loop)."""

import collections
import enum
from collections import namedtuple

import numpy as np
import pytest
import torch

from embgeo.core.loop import CHECKPOINT_VERSION, Checkpoint, TrainingInterrupted, run_loop, saved_progress
from embgeo.core.status import Status
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


class _Level(enum.IntEnum):
    HIGH = 3


def test_checkpoint_writes_plain_values_that_the_safe_load_reads_back(tmp_path):
    """Issue 37: a Status (a str enum) in a trace row made ntp-real-lstm's checkpoint unreadable under
    torch.load(weights_only=True). Enum members and numpy scalars are written as the plain values they stand for,
    in any container, keys included; the file reads back under the safe load with no class allowed."""
    path = tmp_path / "run.pt"
    rows = [{"step": np.int64(5), "svm_status": Status.OPTIMAL, "cos": np.float64(0.5), "ok": np.bool_(True),
             "level": _Level.HIGH, "name": np.str_("x"), "pair": (np.float32(0.25), None), Status.STALLED: {1, 2}}]
    Checkpoint(path, "embgeo.test", {"tag": Status.SEPARABLE}).save({
        "rows": rows, "milestones": collections.Counter({10: 1}), "ordered": collections.OrderedDict(a=1),
        "w": torch.ones(2), "shape": torch.Size([2]), "dtype": torch.float64})
    state = torch.load(path, weights_only=True)  # the safe load alone: no class allowed beside torch's defaults
    row = state["rows"][0]
    assert row == {"step": 5, "svm_status": "optimal", "cos": 0.5, "ok": True, "level": 3, "name": "x",
                   "pair": (0.25, None), "stalled": {1, 2}}
    assert [type(row[k]) for k in ("step", "svm_status", "cos", "ok", "level", "name")] == [int, str, float, bool,
                                                                                              int, str]
    assert all(type(k) is str for k in row) and state["settings"] == {"tag": "separable"}
    assert type(state["milestones"]) is collections.Counter and state["milestones"][20] == 0  # still a Counter
    assert type(state["ordered"]) is collections.OrderedDict and torch.equal(state["w"], torch.ones(2))
    assert Checkpoint(path, "embgeo.test", {"tag": "separable"}).load()["rows"] == state["rows"]


@pytest.mark.parametrize(("value", "kind"), [(np.zeros(2), "numpy.ndarray"),
                                             (namedtuple("Pair", "a b")(1, 2), "Pair"),
                                             (object(), "builtins.object")])
def test_checkpoint_refuses_a_value_the_safe_load_cannot_read_when_writing(tmp_path, value, kind):
    """Found when the file is written, naming the key, not when a resumed run reads it hours later; the
    previous checkpoint is left as it was."""
    path = tmp_path / "run.pt"
    ck = Checkpoint(path, "embgeo.test", {})
    ck.save({"step": 1, "rows": [{"x": 1.0}]})
    with pytest.raises(InputError, match=rf"checkpoint: state\['rows'\]\[1\]\['x'\] is a \S*{kind}, which "
                                         r"torch.load\(weights_only=True\) cannot read back"):
        ck.save({"step": 2, "rows": [{"x": 1.0}, {"x": value}]})
    assert ck.load()["step"] == 1 and not path.with_name("run.pt.tmp").exists()


def test_a_checkpoint_written_before_issue_37_with_a_status_still_loads(tmp_path):
    """Files written by torch.save as it was (a Status object in a row) resume: Checkpoint.load allows Status, and
    nothing else beside torch's defaults (a foreign class is still refused)."""
    path = tmp_path / "old.pt"
    state = {"version": CHECKPOINT_VERSION, "kind": "embgeo.test", "settings": {}, "step": 4,
             "rows": [{"step": 4, "svm_status": Status.OPTIMAL}]}
    torch.save(state, path)
    with pytest.raises(Exception, match="Status"):  # what users met: the safe load alone refuses it
        torch.load(path, weights_only=True)
    assert Checkpoint(path, "embgeo.test", {}).load()["rows"][0]["svm_status"] == "optimal"
    assert saved_progress(path) == "step 4"
    torch.save({**state, "rows": [{"step": 4, "odd": collections.defaultdict(int)}]}, path)
    with pytest.raises(InputError, match="cannot read"):
        Checkpoint(path, "embgeo.test", {}).load()


def test_saved_progress_says_where_a_checkpoint_stands(tmp_path):
    Checkpoint(tmp_path / "a.pt", "embgeo.test", {}).save({"epoch": 40, "step": 800})
    Checkpoint(tmp_path / "b.pt", "embgeo.test", {}).save({"step": 120})
    (tmp_path / "c.pt").write_bytes(b"junk")
    assert saved_progress(tmp_path / "a.pt") == "epoch 40"  # epochs, the unit an epoch trainer counts in
    assert saved_progress(tmp_path / "b.pt") == "step 120"
    assert saved_progress(tmp_path / "c.pt") is None and saved_progress(tmp_path / "missing.pt") is None
