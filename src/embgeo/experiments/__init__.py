"""The experiment registry: every figure or table of the papers as a named, configurable run.

Importing this package registers all experiments. Use :func:`run` for one and
:func:`reproduce` for a whole paper with its HTML report.
"""

# Importing the paper modules registers their experiments, in the papers' order.
from embgeo.experiments import ntp  # noqa: F401, I001
from embgeo.experiments import ntp_separability  # noqa: F401, I001
from embgeo.experiments import ntp_real  # noqa: F401, I001
from embgeo.experiments import collapse  # noqa: F401, I001
from embgeo.experiments import attention  # noqa: F401, I001
from embgeo.experiments.registry import REGISTRY, Claim, Experiment, Result, get, names, parse_overrides
from embgeo.experiments.runner import RunRecord, load, reproduce, run

__all__ = ["REGISTRY", "Claim", "Experiment", "Result", "RunRecord", "get", "load", "names", "parse_overrides",
           "reproduce", "run"]
