"""The ranges of the NTP experiments' settings (:mod:`embgeo.lab.settings`): one table for the names they share,
each config class pointing at it (``constraints``), and the relations between settings as the configs' ``check``.
"""

from __future__ import annotations

from embgeo.errors import InputError

#: name -> (kind, lower bound). Sizes and counts are ≥ 1 where 0 has no meaning; ``max_length`` may be 0 (all).
NTP_CONSTRAINTS: dict[str, tuple[str, float]] = {
    **dict.fromkeys(("m", "d", "steps", "entropy_seeds", "points", "max_iter", "trials", "batch_size",
                     "context_length", "layers", "heads", "support_size", "S", "n_lines", "max_vocab", "max_contexts",
                     "head_steps"), ("int", 1)),
    "V": ("int", 2),
    **dict.fromkeys(("seed", "max_length"), ("int", 0)),
    **dict.fromkeys(("lr", "lr_gd", "lr_ngd", "lr_adam", "b_min", "b_max", "ratio", "track_seconds", "svm_seconds",
                     "max_seconds"), ("positive", 0)),
    **dict.fromkeys(("weight_decay_embed", "weight_decay_decoder"), ("float", 0)),
    **dict.fromkeys(("ms", "supports", "context_lengths"), ("ints", 1)),
    "vocabularies": ("ints", 2),
    "ratios": ("positives", 0),
}


def check_support_within_vocabulary(name: str, support_key: str, support: int, V: int) -> None:
    """A support holds at most V tokens."""
    if support > V:
        raise InputError(f"{name}: setting {support_key} = {support} is larger than V = {V}: a support holds at most "
                         "V tokens")
