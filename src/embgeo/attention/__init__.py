"""Attention with trained embeddings (Wu, Shevchenko, Oymak, Mondelli 2025; ``attention-trained-embeddings.txt``).

Rooms, as in every paper package: :mod:`~embgeo.attention.data` (token statistics, the K-level and
Assumption-1 generators) and :mod:`~embgeo.attention.text` (IMDB, Yelp, tweets; preprocessing and
WordPiece); :mod:`~embgeo.attention.theory` (Lemma 4.1's prediction and bound, the selection (10),
the max-margin problem (12), Lemmas 4.4/4.5; solver in :mod:`~embgeo.attention.solvers`);
:mod:`~embgeo.attention.model` (models (1) and (17)) and :mod:`~embgeo.attention.train` (the
two-stage theory protocol, AdamW); :mod:`~embgeo.attention.metrics` (Lemma 4.1's slope and
residual, rank tests, per-level statistics, the direction of p_t); :mod:`~embgeo.attention.figures`.
Training is not re-exported here, as in :mod:`embgeo.ntp`; the package, its data, text, theory,
metrics and figures import without torch (the models are loaded on first access).

Padding convention (every module)
---------------------------------
A batch or dataset is ``X`` (n, T) of integer token ids. Sequences shorter than T are padded
with ``pad_id``, a keyword argument of every function that takes ``X`` (``None``, the default:
no padding). Entries equal to ``pad_id`` are not tokens: they are not counted (α_s, eq. 18),
not selected (eq. 10, 12), get attention weight exactly 0 in the models and no gradient.
``pad_id`` may lie inside ``[0, |S|)`` — :class:`~embgeo.attention.text.TokenizedCorpus` pads
with 0, an id reserved for ``[PAD]`` that never occurs as a token — or outside it (e.g. −1).
Every sequence needs at least one real token. A ``pad_id`` that is not an integer, a sequence
that is only padding, or a real id outside ``[0, |S|)`` raises an
:class:`~embgeo.errors.InputError` naming ``pad_id`` or ``X``.
"""

from importlib import import_module

from embgeo.attention.data import assumption1_data, posterior_difference, signed_frequency, synthetic_levels
from embgeo.attention.theory import (
    compare_selections,
    lemma41_alpha,
    lemma41_bound,
    lemma41_error_scale,
    lemma41_prediction,
    max_margin_selection,
    selection,
)

#: Names that need torch, and the submodule each comes from (imported on first access, so that the
#: package, its data, theory and metrics import without torch).
_TORCH_NAMES = {"OneLayerAttention": "model", "TwoLayerAttention": "model"}

__all__ = ["OneLayerAttention", "TwoLayerAttention", "assumption1_data", "compare_selections", "lemma41_alpha",
           "lemma41_bound", "lemma41_error_scale", "lemma41_prediction", "max_margin_selection",
           "posterior_difference", "selection", "signed_frequency", "synthetic_levels"]


def __getattr__(name: str):
    if name in _TORCH_NAMES:
        return getattr(import_module(f"embgeo.attention.{_TORCH_NAMES[name]}"), name)
    raise AttributeError(f"module 'embgeo.attention' has no attribute {name!r}")
