"""The experiment registry: every figure or table of the papers as a named, configurable run.

Importing this package registers all experiments. Use :func:`run` for one and
:func:`reproduce` for a whole paper with its HTML report.
"""

from embgeo.experiments import collapse, ntp  # noqa: F401  (registers the experiments)
from embgeo.experiments.registry import REGISTRY, Claim, Experiment, Result, get, names, parse_overrides
from embgeo.experiments.runner import RunRecord, load, reproduce, run

__all__ = ["REGISTRY", "Claim", "Experiment", "Result", "RunRecord", "get", "load", "names", "parse_overrides",
           "reproduce", "run"]
