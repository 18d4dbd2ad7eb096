"""Error classes of embgeo.

Every error caused by bad input is a subclass of :class:`ValueError`, so callers that
already catch ``ValueError`` keep working; the subclasses let them tell the cases apart.
Messages name the offending field and say what was expected.
"""


class EmbgeoError(Exception):
    """Base class of every error raised by embgeo."""


class InputError(EmbgeoError, ValueError):
    """An argument has the wrong type, value or content."""


class ShapeError(InputError):
    """An array has the wrong number of dimensions or inconsistent sizes."""


class DistributionError(InputError):
    """A probability vector is not on the simplex (negative, NaN/inf, sum != 1, empty support)."""


class NotCompatibleError(InputError):
    """The data are not NTP_H-compatible (Def. 1): the log-odds equations (4) have no solution."""


class NotSeparableError(InputError):
    """The data are not NTP-separable (Def. 2): no W satisfies (6a)-(6b)."""


class TooLargeError(InputError):
    """A dense object would exceed the memory budget; the message points at the scalable path."""


class SolverError(EmbgeoError, RuntimeError):
    """A numerical solver did not reach its certified accuracy."""


class MissingDependencyError(EmbgeoError, ImportError):
    """An optional dependency (or data package) is not installed; the message names the extra."""
