"""Feature collapse (Laurent, von Brecht, Bresson, arXiv:2305.16162): data, theory, model, training.

Rooms, as in every paper package: :mod:`~embgeo.collapse.data` (the paper's data model),
:mod:`~embgeo.collapse.theory` (Theorems 1-3, the configurations, the exact population risk and the
paper's LayerNorm φ, numpy only), :mod:`~embgeo.collapse.solvers` (minimizing the exact risk),
:mod:`~embgeo.collapse.model` (the networks h and h*, torch), :mod:`~embgeo.collapse.train` (the
paper's SGD protocol), :mod:`~embgeo.collapse.metrics` (collapse scores) and
:mod:`~embgeo.collapse.figures`.

Importing this package, or its data, theory and metrics, does not import torch: the torch names
re-exported here (:class:`CollapseNet`, :func:`evaluate`, :func:`sgd_step`, ``TrainingInterrupted``)
are loaded on first use.
Training lives in the submodule :mod:`embgeo.collapse.train` (``from embgeo.collapse.train import
train``); the function is not re-exported here so that ``embgeo.collapse.train`` keeps meaning the
module (as in :mod:`embgeo.ntp`).
"""

from importlib import import_module

from embgeo.collapse.data import (
    CollapseData,
    SymmetryReport,
    generate,
    make_freqs,
    symmetry_diagnostic,
)
from embgeo.collapse.theory import layer_norm, true_risk, type1_constants, type2_constants, type3_magnitudes

#: Names that need torch, and the submodule each comes from (imported on first access).
_TORCH_NAMES = {"CollapseNet": "model", "TrainingInterrupted": "train", "evaluate": "train", "sgd_step": "train"}

__all__ = [
    "CollapseData", "SymmetryReport", "generate", "make_freqs", "symmetry_diagnostic",
    "layer_norm", "true_risk", "type1_constants", "type2_constants", "type3_magnitudes",
    "CollapseNet", "TrainingInterrupted", "evaluate", "sgd_step",
]


def __getattr__(name: str):
    if name in _TORCH_NAMES:
        return getattr(import_module(f"embgeo.collapse.{_TORCH_NAMES[name]}"), name)
    raise AttributeError(f"module 'embgeo.collapse' has no attribute {name!r}")
