"""Thread control shared by the benchmarks.

BLAS and OpenMP read their thread counts when they are loaded, so :func:`set_thread_env` must run
*before* numpy (or anything importing it) is imported; :func:`limit_threads` then also applies the
limit with threadpoolctl to libraries that were loaded anyway, and :func:`blas_threads` reports
the counts actually in effect, for the benchmark's header.
"""

import os

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS", "RAYON_NUM_THREADS")


def set_thread_env(n: int) -> None:
    """Write ``n`` to every thread-count environment variable (call before importing numpy)."""
    for var in THREAD_VARS:
        os.environ[var] = str(n)


def limit_threads(n: int) -> None:
    """Apply the limit to the loaded BLAS/OpenMP libraries as well (threadpoolctl)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n)


def blas_threads() -> str:
    """Effective thread counts of the loaded BLAS/OpenMP libraries, e.g. ``"blas=1, openmp=1"``."""
    from threadpoolctl import threadpool_info

    return ", ".join(f"{i['internal_api']}={i['num_threads']}" for i in threadpool_info()) or "no BLAS loaded"
