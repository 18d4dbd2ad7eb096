"""Functions and classes imported where they are first used.

The experiment modules are imported by every command (``embgeo list`` and ``show`` read the registry they
fill), but only a run needs torch and the trainers built on it; importing them up front cost every command,
and every error message, about 2 s on the 2-core VM (issue 24). :func:`lazy` stands in for such a name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy(module: str, name: str) -> Callable:
    """A callable that imports ``module`` on its first call and calls (or instantiates) its ``name``."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f":func:`{module}.{name}`, imported on first use (torch loads only when a run needs it)."
    return call
