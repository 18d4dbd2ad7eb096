"""Attention with trained embeddings: token statistics, generators, models, the two-stage theory.

Training lives in the submodule :mod:`embgeo.attention.train` (not re-exported, as in
:mod:`embgeo.ntp`).
"""

from embgeo.attention.data import assumption1_data, posterior_difference, signed_frequency, synthetic_levels
from embgeo.attention.model import OneLayerAttention, TwoLayerAttention
from embgeo.attention.theory import compare_selections, max_margin_selection, selection

__all__ = ["OneLayerAttention", "TwoLayerAttention", "assumption1_data", "compare_selections",
           "max_margin_selection", "posterior_difference", "selection", "signed_frequency", "synthetic_levels"]
