"""Input validation shared by all modules: clear errors instead of deep numpy tracebacks."""

from __future__ import annotations

import numpy as np

from embgeo.errors import InputError, ShapeError, TooLargeError

#: Default budget for one dense float64 object built by embgeo (bytes). Above it we refuse
#: with a :class:`TooLargeError` rather than let the process be killed by the OOM killer.
DENSE_BUDGET_BYTES = 4 * 1024**3


def as_float_array(name: str, x: object, ndim: int | None = None) -> np.ndarray:
    """Return ``x`` as a finite float64 array, checking its number of dimensions.

    Raises :class:`ShapeError` on the wrong ``ndim`` and :class:`InputError` on non-numeric,
    NaN or infinite entries; the message names ``name``.
    """
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: expected a numeric array, got {type(x).__name__} ({exc})") from None
    if ndim is not None and arr.ndim != ndim:
        raise ShapeError(f"{name}: expected a {ndim}-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        where = tuple(int(i) for i in bad)
        raise InputError(f"{name}: entries must be finite; found {arr[where]} at index {where}")
    return arr


def check_dense_size(what: str, shape: tuple[int, ...], hint: str = "", budget: int | None = None) -> None:
    """Refuse to allocate a dense float64 array of ``shape`` above ``budget`` bytes (default: the module's
    DENSE_BUDGET_BYTES, read at call time)."""
    budget = DENSE_BUDGET_BYTES if budget is None else budget
    nbytes = 8 * int(np.prod([int(s) for s in shape], dtype=np.float64))
    if nbytes > budget:
        gib = nbytes / 1024**3
        msg = f"{what} would need a dense {shape} float64 array ({gib:.1f} GiB > {budget / 1024**3:.1f} GiB budget)"
        raise TooLargeError(msg + (f"; {hint}" if hint else ""))


def available_memory_bytes() -> float:
    """Bytes this process can still allocate: the free physical memory, and under an address-space limit
    (``ulimit -v``, RLIMIT_AS) the room left below it; inf when neither can be read."""
    import resource

    import psutil

    room = float(psutil.virtual_memory().available)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        room = min(room, soft - psutil.Process().memory_info().vms)
    return room


def check_positive_int(name: str, value: object, minimum: int = 1) -> int:
    """Return ``value`` as an int, requiring ``value >= minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise InputError(f"{name}: expected an integer >= {minimum}, got {value}")
    return int(value)


def make_rng(seed: object) -> np.random.Generator:
    """A numpy Generator from an explicit seed (int or Generator); ``None`` is refused."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed: expected an integer (seeds are explicit), got {seed!r}")
    return np.random.default_rng(int(seed))


def check_float(name: str, value: object, *, positive: bool = True) -> float:
    """Return ``value`` as a finite float, > 0 (``positive``) or ≥ 0; the message names ``name``.

    The one float check of every trainer and solver (bools and strings are refused, not coerced).
    """
    want = "> 0" if positive else ">= 0"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name}: expected a finite number {want}, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        raise InputError(f"{name}: expected a finite number {want}, got {value}")
    return value


def check_seed(seed: object) -> int:
    """A non-negative integer seed (seeds are explicit: None and bools are refused)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed: expected a non-negative integer (seeds are explicit), got {seed!r}")
    return int(seed)


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is True or False (not 0/1 or a string)."""
    if not isinstance(value, bool):
        raise InputError(f"{name}: expected True or False, got {value!r}")
    return value


def check_threads(threads: object) -> int | None:
    """None (embgeo's default, :func:`embgeo.core.threads.default_threads`) or a positive thread count."""
    return None if threads is None else check_positive_int("threads", threads)


def check_options(options, cls: type):
    """A solver's tuning: ``options`` if it is a ``cls`` (a frozen dataclass of the solver's settings), ``cls()``
    (its defaults) when None; anything else is a TypeError (a dict of settings is not silently ignored)."""
    if options is None:
        return cls()
    if not isinstance(options, cls):
        article = "an" if cls.__name__[0] in "AEIOU" else "a"
        raise TypeError(f"options: expected {article} {cls.__name__}, got {type(options).__name__}")
    return options
