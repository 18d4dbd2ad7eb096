"""Checks of an experiment's settings, made when its config is built (before anything runs).

:meth:`~embgeo.lab.registry.Experiment.config` calls :func:`check_config` on every config it builds, so
``embgeo run``, ``reproduce`` and every point of a sweep (``--grid``, ``--set`` or a TOML spec) are refused in
one line before the first run starts, instead of running and being stored as failed.

Two kinds of checks:

* **types**, from each field's annotation: an ``int`` setting takes an integer (not 50.5, not a bool, not a
  list: a TOML list given where one value is expected is named as such), a ``float`` setting a finite number,
  a ``bool`` True/False, a ``tuple`` setting a list of numbers;
* **ranges**, by the setting's name: the experiments give these names one meaning (m contexts, V tokens, a
  learning rate ``lr``, a ``seed``, a ``weight_decay``, ...), collected in :data:`RULES`; plus the relations
  between settings (a support cannot be larger than the vocabulary). A test builds every registered
  experiment's presets through these checks, so a rule that would refuse a preset fails the suite.
"""

from __future__ import annotations

import dataclasses
import math
import typing

from embgeo.errors import InputError

#: name -> (kind, lower bound, inclusive): the range of every setting with that name, in every experiment.
#: Sizes and counts are ≥ 1 where 0 has no meaning; ``n``, ``max_length``, ``level_size`` may be 0 ("all" /
#: "the paper's default" in the experiments that have them).
RULES: dict[str, tuple[str, float]] = {
    **dict.fromkeys(("m", "d", "steps", "epochs", "entropy_seeds", "points", "max_iter", "trials", "n_concepts",
                     "words_per_concept", "length", "n_classes", "dim", "n_train_per_class", "batch_size",
                     "log_every", "T", "n_pairs", "layers", "heads", "context_length", "support_size", "S",
                     "epochs_hstar", "n_lines", "max_vocab"), ("int", 1)),
    "V": ("int", 2),
    **dict.fromkeys(("seed", "n", "max_length", "level_size", "n_irrelevant", "min_count", "n_test_per_class"),
                    ("int", 0)),
    **dict.fromkeys(("lr", "lr_gd", "lr_ngd", "lr_adam", "eta0", "b_min", "b_max", "ratio", "ln_eps", "tol",
                     "track_seconds", "svm_seconds"), ("positive", 0)),
    **dict.fromkeys(("weight_decay", "weight_decay_W", "weight_decay_U", "weight_decay_embed",
                     "weight_decay_decoder"), ("float", 0)),
    **dict.fromkeys(("dims", "ms", "supports"), ("ints", 1)),
    "vocabularies": ("ints", 2),
    "seeds": ("ints", 0),
    "ratios": ("positives", 0),
}


def check_config(name: str, cfg) -> None:
    """Raise :class:`InputError` naming the first setting of ``cfg`` (experiment ``name``) with a wrong type or
    out of its range, or two settings that contradict each other."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        kind, optional = field_kind(hints[f.name])
        if value is None and optional:
            continue
        _check_type(name, f.name, value, kind)
        if f.name in RULES:
            _check_range(name, f.name, value, *RULES[f.name])
    _check_relations(name, cfg)


def field_kind(hint) -> tuple[type, bool]:
    """(the value type, whether None is allowed) of a config field's annotation, e.g. ``float | None``."""
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint) or hint
    return (origin if isinstance(origin, type) else str), optional


def _fail(name: str, key: str, value, expected: str) -> typing.NoReturn:
    shown = list(value) if isinstance(value, tuple) else value
    raise InputError(f"{name}: setting {key} = {shown!r}: expected {expected}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_type(name: str, key: str, value, kind: type) -> None:
    if isinstance(value, tuple) and kind is not tuple:
        _fail(name, key, value, f"one value, not a list (to run several values, sweep over them: --grid "
                                f"{key}=V1,V2 or grid = {{ {key} = [...] }} in a TOML spec)")
    if kind is bool and not isinstance(value, bool):
        _fail(name, key, value, "true or false")
    if kind is int and not _is_int(value):
        _fail(name, key, value, "an integer")
    if kind is float and not (_is_number(value) and math.isfinite(value)):
        _fail(name, key, value, "a finite number")
    if kind is str and not isinstance(value, str):
        _fail(name, key, value, "a string")
    if kind is tuple and not (isinstance(value, tuple) and all(_is_number(v) and math.isfinite(v) for v in value)):
        _fail(name, key, value, "a list of finite numbers")


def _check_range(name: str, key: str, value, kind: str, low: float) -> None:
    if kind == "int" and not (_is_int(value) and value >= low):
        _fail(name, key, value, f"an integer >= {low:g}")
    if kind == "positive" and not (value > 0):
        _fail(name, key, value, "a finite number > 0")
    if kind == "float" and not (value >= low):
        _fail(name, key, value, f"a finite number >= {low:g}")
    if kind == "ints" and not (value and all(_is_int(v) and v >= low for v in value)):
        _fail(name, key, value, f"a non-empty list of integers >= {low:g}")
    if kind == "positives" and not (value and all(v > 0 for v in value)):
        _fail(name, key, value, "a non-empty list of numbers > 0")


def _check_relations(name: str, cfg) -> None:
    """Settings that bound each other: a support within the vocabulary, a path's ends in order."""
    get = lambda key: getattr(cfg, key, None)  # noqa: E731 - a short local accessor
    for support in ("support_size", "S"):
        if get(support) is not None and get("V") is not None and get(support) > get("V"):
            raise InputError(f"{name}: setting {support} = {get(support)} is larger than V = {get('V')}: a support "
                             "holds at most V tokens")
    if get("b_min") is not None and get("b_max") is not None and not get("b_min") < get("b_max"):
        raise InputError(f"{name}: setting b_min = {get('b_min')} must be below b_max = {get('b_max')}")
    if get("supports") is not None and get("vocabularies") is not None:
        s, v = get("supports"), get("vocabularies")
        if len(s) != len(v) or any(a > b for a, b in zip(s, v, strict=False)):
            raise InputError(f"{name}: settings supports = {list(s)} and vocabularies = {list(v)}: expected lists of "
                             "one length with each support <= its vocabulary")
