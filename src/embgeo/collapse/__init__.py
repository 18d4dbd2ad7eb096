"""Feature collapse (Laurent, von Brecht, Bresson, arXiv:2305.16162): data, model, training, theory.

Training lives in the submodule :mod:`embgeo.collapse.train` (``from embgeo.collapse.train import
train``); the function is not re-exported here so that ``embgeo.collapse.train`` keeps meaning the
module (as in :mod:`embgeo.ntp`).
"""

from embgeo.collapse.data import (
    CollapseData,
    SymmetryReport,
    generate,
    make_freqs,
    symmetry_diagnostic,
)
from embgeo.collapse.model import CollapseNet, layer_norm, layer_norm_np
from embgeo.collapse.theory import type1_constants, type2_constants, type3_magnitudes
from embgeo.collapse.train import TrainingInterrupted, evaluate, sgd_step

__all__ = [
    "CollapseData", "SymmetryReport", "generate", "make_freqs", "symmetry_diagnostic",
    "CollapseNet", "layer_norm", "layer_norm_np",
    "TrainingInterrupted", "evaluate", "sgd_step",
    "type1_constants", "type2_constants", "type3_magnitudes",
]
