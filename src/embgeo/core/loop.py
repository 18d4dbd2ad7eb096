"""The training loop shared by the three papers' trainers: recording, progress, Ctrl-C, checkpoints.

Each trainer supplies what is specific to it — one unit of work (an update, an epoch), how to
record a row of its :class:`~embgeo.core.trace.Trace`, what to save — and :func:`run_loop` does
the rest the same way everywhere: a tqdm bar (only on a terminal) with the last recorded values,
a record at the start and at the requested units, a progress line every 30 s with the ETA when stderr
is not a terminal (and "resumed from ..." when a checkpoint is continued), and on Ctrl-C a :class:`TrainingInterrupted`
warning with the partial trace returned (``trace.interrupted`` set). :class:`Checkpoint` writes a
trainer's state atomically, in a form ``torch.load(weights_only=True)`` reads back (or refuses it when writing),
and reads it back only into a run with the same settings; :func:`saved_progress` says where a file stands.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from os import PathLike
from pathlib import Path

import torch
from tqdm.auto import tqdm

from embgeo.core.checkpoint import save_atomic
from embgeo.core.deadline import past
from embgeo.core.status import Status
from embgeo.core.trace import Trace
from embgeo.errors import InputError

#: Version of every embgeo checkpoint file (one format: version, kind, settings, then the trainer's state).
CHECKPOINT_VERSION = 2


#: Seconds between progress lines when stderr is not a terminal.
LINE_SECONDS = 30.0


def _clock(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``12s``."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class TrainingInterrupted(UserWarning):
    """Training was stopped by Ctrl-C; the partial trace was returned."""


def run_loop(trace: Trace, total: int, step: Callable[[int], None], record: Callable[[int], dict | None], *,
             record_at: Callable[[int], bool], start: int = 0, desc: str = "train", unit: str = "step",
             progress: bool = True, on_interrupt: Callable[[int], None] | None = None,
             deadline: float | None = None) -> int:
    """Run ``step(i)`` for i = start, ..., total − 1 and record along the way; returns the units done.

    ``record(done)`` appends the row after ``done`` units to ``trace`` and returns the values to
    show on the progress bar, or None to stop early (e.g. the iterate diverged). It is called at
    ``start`` when the trace is empty, after every unit where ``record_at(done)`` is true, and after
    the last one. Ctrl-C: ``trace.interrupted`` is set, ``on_interrupt(done)`` may record the
    partial state, a :class:`TrainingInterrupted` warning is issued and the loop returns normally. Past
    ``deadline`` (a ``time.perf_counter()`` value) the loop stops after the unit in progress: that state is recorded
    and ``trace.meta["time_limit_at_step"]`` says after how many units.
    """
    done = start
    bar = tqdm(total=total, initial=start, desc=desc, disable=None if progress else True, leave=False)
    # Off a terminal (a log file, a batch job) tqdm is silent: a line every LINE_SECONDS instead.
    lines = progress and not sys.stderr.isatty()
    t0 = last_line = time.monotonic()
    latest: dict = {}
    if progress and start > 0:
        print(f"{desc}: resumed from {unit} {start} of {total} (checkpoint)", file=sys.stderr, flush=True)

    def show(values: dict | None) -> bool:
        if values is None:
            return False
        latest.update(values)
        bar.set_postfix({k: f"{v:.4g}" for k, v in values.items()}, refresh=False)
        return True

    def line(now: float) -> None:
        nonlocal last_line
        last_line = now
        rate = (done - start) / max(now - t0, 1e-9)
        eta = f", ETA {_clock((total - done) / rate)}" if rate > 0 and done < total else ""
        values = "".join(f", {k} {v:.4g}" for k, v in latest.items())
        print(f"{desc}: {done}/{total} {unit}s{values}, {_clock(now - t0)} elapsed{eta}", file=sys.stderr, flush=True)

    try:
        if start == 0 and not trace.rows and not show(record(0)):
            return done
        for i in range(start, total):
            step(i)
            done = i + 1
            recorded = record_at(done) or done == total
            if recorded and not show(record(done)):
                return done
            if done < total and past(deadline):
                trace.meta["time_limit_at_step"] = done
                if not recorded:
                    show(record(done))
                return done
            bar.update(1)
            if lines and (done == total or time.monotonic() - last_line >= LINE_SECONDS):
                line(time.monotonic())
    except KeyboardInterrupt:
        trace.interrupted = True
        if on_interrupt is not None:
            on_interrupt(done)
        warnings.warn(TrainingInterrupted(f"training interrupted by Ctrl-C after {done} of {total} {unit}s; "
                                          "returning the partial trace (trace.interrupted is True)"), stacklevel=3)
    finally:
        bar.close()
    return done


class Checkpoint:
    """One trainer's resumable state in one file, tied to the settings that produced it.

    ``kind`` names the trainer (e.g. "embgeo.collapse"); ``settings`` are the values a resumed run
    must share (sizes, step sizes, seeds). :meth:`load` returns the saved state, or None when the
    file does not exist; a foreign, corrupt or differently configured file is an :class:`InputError`.
    """

    def __init__(self, path: str | PathLike | None, kind: str, settings: dict):
        if path is not None and not isinstance(path, (str, PathLike)):
            raise InputError(f"checkpoint: expected None or a file path, got {type(path).__name__}")
        self.path = None if path is None else Path(path)
        self.kind = kind
        self.settings = settings

    def load(self) -> dict | None:
        if self.path is None or not self.path.exists():
            return None
        try:
            # onto the CPU: a checkpoint written on a GPU resumes anywhere (load_state_dict moves it to the model).
            # Status is allowed for the files written before save_atomic reduced it to a str (an ntp-real trace
            # row held one): rebuilding it only looks a value up among its members, so it runs no code.
            with torch.serialization.safe_globals([Status]):
                state = torch.load(self.path, weights_only=True, map_location="cpu")
        except Exception as exc:  # corrupt or foreign file
            raise InputError(f"checkpoint: cannot read {str(self.path)!r} ({exc})") from None
        if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION or state.get("kind") != self.kind:
            raise InputError(f"checkpoint: {str(self.path)!r} is not an {self.kind} checkpoint (version "
                             f"{CHECKPOINT_VERSION})")
        saved = state["settings"]
        diff = {k: (saved.get(k), v) for k, v in self.settings.items() if saved.get(k) != v}
        if diff:
            detail = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
            raise InputError(f"checkpoint: {str(self.path)!r} was written by a run with other settings ({detail}); "
                             "use another path or the same settings to resume")
        return state

    def save(self, state: dict) -> None:
        """Write ``state`` (with version, kind and settings) atomically; nothing without a path.

        The file holds only what :meth:`load` reads back (:func:`embgeo.core.checkpoint.loadable`: a str enum
        is written as its string, a numpy scalar as the Python scalar); a value that cannot be read back is an
        :class:`InputError` naming its key now, not when a resumed run reads the file.
        """
        if self.path is not None:
            save_atomic(self.path, {"version": CHECKPOINT_VERSION, "kind": self.kind, "settings": self.settings,
                                    **state})


def saved_progress(path: str | PathLike) -> str | None:
    """Where the checkpoint file at ``path`` stands: ``"epoch 40"`` (epoch trainers) or ``"step 120"``; None if the
    file cannot be read or records neither. Its tensors are mapped, not read, so this is cheap for any size."""
    try:
        with torch.serialization.safe_globals([Status]):
            state = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
    except Exception:  # noqa: BLE001 - only a message depends on it
        return None
    for unit in ("epoch", "step"):  # the unit run_loop counts in: epochs where a trainer has them
        if isinstance(state, dict) and isinstance(state.get(unit), int):
            return f"{unit} {state[unit]}"
    return None
