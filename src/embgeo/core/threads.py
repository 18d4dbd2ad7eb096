"""Explicit thread counts for torch and BLAS: one thread unless the caller or the environment says otherwise.

On a 2-core machine with another busy process, PyTorch with 2 threads was measured ~9x slower
than with 1 (10k GD steps: 131 s with 2 threads against 8 s with one; 1000 threads were 350x
slower), and torch takes every core by default. So embgeo's trainers and solvers run with
**one thread** unless told otherwise:

* ``threads=N`` of a trainer, ``embgeo --threads N``, or an enclosing ``limit_threads(N)`` sets N;
* otherwise ``OMP_NUM_THREADS`` when the environment sets it (a deliberate choice of the caller);
* otherwise 1 (:data:`DEFAULT_THREADS`) — also in Python and notebooks, where torch alone would use all
  cores. Training is at most a few times slower with one thread on an idle machine with many cores
  (the problems are small), and never the ~10x slower that oversubscription costs on a busy one.

torch is imported here only when it is already loaded or about to be used: ``embgeo list`` and every
error path stay free of its ~2 s import.
"""

from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager
from contextvars import ContextVar

from threadpoolctl import threadpool_limits

from embgeo.errors import InputError

#: Threads of embgeo's trainers and solvers when neither the caller nor the environment says otherwise.
DEFAULT_THREADS = 1

#: ``--threads`` above this many per usable core is refused (:func:`check_thread_count`).
MAX_THREADS_PER_CORE = 4

#: The thread count of the enclosing :func:`limit_threads` block (None outside any).
_CURRENT: ContextVar[int | None] = ContextVar("embgeo_threads", default=None)


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, so a container's or taskset's limit counts)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """The thread count a trainer uses when none is given: the enclosing block's, else ``OMP_NUM_THREADS``
    when set to a positive integer, else :data:`DEFAULT_THREADS`."""
    current = _CURRENT.get()
    if current is not None:
        return current
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else DEFAULT_THREADS


def check_thread_count(threads: int) -> None:
    """Refuse ``--threads`` above :data:`MAX_THREADS_PER_CORE` × the cores this process may use, in one line.

    Up to that, more threads than cores is a warning (:func:`warn_if_oversubscribed`): slow, but it runs. Far beyond
    it nothing is gained and the runtimes fail: ``--threads 100000`` gave "can't start new thread" and a segfault
    (exit 139) inside the OpenMP/BLAS pools (issue 37).
    """
    cores = available_cores()
    cap = MAX_THREADS_PER_CORE * cores
    if threads > cap:
        raise InputError(f"--threads {threads}: at most {cap} ({MAX_THREADS_PER_CORE} per core; this process can use "
                         f"{cores} core{'s' if cores > 1 else ''}); threads beyond the cores only wait, use --threads "
                         f"{cores} or fewer")


def warn_if_oversubscribed(threads: int) -> None:
    """A warning when ``threads`` exceeds the cores this process may use (each extra thread only waits)."""
    cores = available_cores()
    if threads > cores:
        warnings.warn(f"--threads {threads} exceeds the {cores} core{'s' if cores > 1 else ''} this process can use: "
                      f"threads beyond the cores only wait for each other (measured up to 350x slower); use "
                      f"--threads {cores} or fewer", stacklevel=2)


@contextmanager
def limit_threads(threads: int | None):
    """Run the block with ``threads`` torch intra-op threads and BLAS/OpenMP threads (None: :func:`default_threads`).

    Both are restored afterwards. If torch is not loaded yet it is not imported here; ``OMP_NUM_THREADS`` is
    set for the block instead, which torch reads when a trainer inside it imports torch.
    """
    n = default_threads() if threads is None else threads
    token = _CURRENT.set(n)
    torch = sys.modules.get("torch")
    previous_torch = torch.get_num_threads() if torch is not None else None
    previous_env = os.environ.get("OMP_NUM_THREADS")
    try:
        if torch is not None:
            torch.set_num_threads(n)
        else:
            os.environ["OMP_NUM_THREADS"] = str(n)
        with threadpool_limits(limits=n):
            yield
    finally:
        _CURRENT.reset(token)
        if previous_torch is not None:
            torch.set_num_threads(previous_torch)
        elif "torch" in sys.modules:  # imported inside the block: back to what the enclosing context asks for
            sys.modules["torch"].set_num_threads(default_threads())
        if previous_env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = previous_env


@contextmanager
def flush_denormals():
    """Run the block with the CPU's subnormal floats flushed to zero (``torch.set_flush_denormal``: FTZ/DAZ), and
    switch that off again after (torch's default).

    Why: arithmetic on subnormal numbers (below 1.2e-38 in float32) is many times slower on x86. The attention
    trainer's backward passes make them within its first epoch. Measured on the tweets (two-layer model, d = 2048,
    one thread, 2026-11-29): a step went from 51 ms to 110-157 ms over the first 540 steps, and stayed at 51-59 ms with
    them flushed. Values that small carry no weight beside the O(1) losses and gradients of these models. Where the
    CPU cannot flush (torch returns False), the block runs as it would have."""
    import torch

    flushed = torch.set_flush_denormal(True)
    try:
        yield flushed
    finally:
        if flushed:
            torch.set_flush_denormal(False)
