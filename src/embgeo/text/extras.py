"""Optional dependencies of the text room (the ``text`` extra), imported on first use."""

from __future__ import annotations

import importlib

from embgeo.errors import MissingDependencyError

#: What to install when an optional text dependency is missing.
EXTRA_HINT = "install the text extra: pip install 'embgeo[text]'"


def require(module: str, what: str):
    """``module`` imported, or :class:`MissingDependencyError` saying that ``what`` needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(f"{what} needs the package {module.split('.')[0]!r}; {EXTRA_HINT}") from None
