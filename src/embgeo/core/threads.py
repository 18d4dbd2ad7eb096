"""Explicit thread counts for torch and BLAS (DESIGN.md, "Threads").

On a 2-core machine with another busy process, PyTorch with 2 threads was measured ~9x slower
than with 1, so every training loop and solver that may run beside another sets its count.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from threadpoolctl import threadpool_limits


@contextmanager
def limit_threads(threads: int | None):
    """Run the block with ``threads`` torch intra-op threads and BLAS/OpenMP threads.

    Both are restored afterwards. ``None`` leaves the caller's settings alone (what ``embgeo
    --threads N`` or the user set), which is the default of every trainer and solver.
    """
    if threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            yield
    finally:
        torch.set_num_threads(previous)
