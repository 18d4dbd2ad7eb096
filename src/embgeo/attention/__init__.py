"""Attention with trained embeddings: token statistics, generators, models, the two-stage theory.

Training lives in the submodule :mod:`embgeo.attention.train` (not re-exported, as in
:mod:`embgeo.ntp`).
"""

from embgeo.attention.data import assumption1_data, posterior_difference, signed_frequency, synthetic_levels
from embgeo.attention.model import OneLayerAttention, TwoLayerAttention

__all__ = ["OneLayerAttention", "TwoLayerAttention", "assumption1_data", "posterior_difference",
           "signed_frequency", "synthetic_levels"]
