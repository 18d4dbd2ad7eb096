"""Checks of an experiment's settings, made when its config is built (before anything runs).

:meth:`~embgeo.lab.registry.Experiment.config` calls :func:`check_config` on every config it builds, so
``embgeo run``, ``reproduce`` and every point of a sweep (``--grid``, ``--set`` or a TOML spec) are refused in
one line before the first run starts, instead of running and being stored as failed.

Three kinds of checks:

* **types**, from each field's annotation (here, the same for every paper): an ``int`` setting takes an integer
  (not 50.5, not a bool, not a list: a TOML list given where one value is expected is named as such), a
  ``float`` setting a finite number, a ``bool`` True/False, a ``tuple`` setting a list of numbers;
* **ranges**, declared by the config class itself beside its fields, as a class attribute
  ``constraints: ClassVar[dict]`` mapping a field's name to one of the :data:`KINDS` and its lower bound (the
  way scikit-learn's estimators declare ``_parameter_constraints``). A paper keeps one such table for the names
  its experiments share; the lab holds none, so one paper's ``n`` or ``T`` never takes another's range;
* **relations** between a config's own settings (a support within the vocabulary, a path's ends in order), in
  the config's ``check(name)`` method when it has one.

A test builds every registered experiment's presets through these checks (a rule that would refuse a preset
fails the suite), and requires a range for every numeric setting (none is left unchecked by omission).
"""

from __future__ import annotations

import dataclasses
import math
import typing

from embgeo.errors import InputError

#: The range kinds of a ``constraints`` entry (kind, lower bound): "int" an integer ≥ the bound; "positive" a
#: number > 0; "float" a number ≥ the bound; "ints" a non-empty list of integers ≥ the bound; "positives" a
#: non-empty list of numbers > 0.
KINDS = ("int", "positive", "float", "ints", "positives")


def check_config(name: str, cfg) -> None:
    """Raise :class:`InputError` naming the first setting of ``cfg`` (experiment ``name``) with a wrong type or
    out of the range its class declares, or two settings that contradict each other (``cfg.check(name)``)."""
    hints = typing.get_type_hints(type(cfg))
    ranges = constraints_of(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        kind, optional = field_kind(hints[f.name])
        if value is None and optional:
            continue
        _check_type(name, f.name, value, kind)
        if f.name in ranges:
            _check_range(name, f.name, value, *ranges[f.name])
    check = getattr(cfg, "check", None)
    if callable(check):
        check(name)


def constraints_of(cls) -> dict[str, tuple[str, float]]:
    """The ranges a config class declares (``constraints``), checked to be well formed."""
    ranges = getattr(cls, "constraints", {})
    for key, rule in ranges.items():
        if not (isinstance(rule, tuple) and len(rule) == 2 and rule[0] in KINDS):
            raise TypeError(f"{cls.__name__}.constraints[{key!r}] = {rule!r}: expected (kind, lower bound) with kind "
                            f"one of {', '.join(KINDS)}")
    return ranges


def fail(name: str, key: str, value, expected: str) -> typing.NoReturn:
    """Raise the one-line InputError of a setting: ``NAME: setting KEY = VALUE: expected EXPECTED``."""
    shown = list(value) if isinstance(value, tuple) else value
    raise InputError(f"{name}: setting {key} = {shown!r}: expected {expected}")


def field_kind(hint) -> tuple[type, bool]:
    """(the value type, whether None is allowed) of a config field's annotation, e.g. ``float | None``."""
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint) or hint
    return (origin if isinstance(origin, type) else str), optional


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_type(name: str, key: str, value, kind: type) -> None:
    if isinstance(value, tuple) and kind is not tuple:
        fail(name, key, value, f"one value, not a list (to run several values, sweep over them: --grid "
                               f"{key}=V1,V2 or grid = {{ {key} = [...] }} in a TOML spec)")
    if kind is bool and not isinstance(value, bool):
        fail(name, key, value, "true or false")
    if kind is int and not _is_int(value):
        fail(name, key, value, "an integer")
    if kind is float and not (_is_number(value) and math.isfinite(value)):
        fail(name, key, value, "a finite number")
    if kind is str and not isinstance(value, str):
        fail(name, key, value, "a string")
    if kind is tuple and not (isinstance(value, tuple) and all(_is_number(v) and math.isfinite(v) for v in value)):
        fail(name, key, value, "a list of finite numbers")


def _check_range(name: str, key: str, value, kind: str, low: float) -> None:
    if kind == "int" and not (_is_int(value) and value >= low):
        fail(name, key, value, f"an integer >= {low:g}")
    if kind == "positive" and not (value > 0):
        fail(name, key, value, "a finite number > 0")
    if kind == "float" and not (value >= low):
        fail(name, key, value, f"a finite number >= {low:g}")
    if kind == "ints" and not (value and all(_is_int(v) and v >= low for v in value)):
        fail(name, key, value, f"a non-empty list of integers >= {low:g}")
    if kind == "positives" and not (value and all(v > 0 for v in value)):
        fail(name, key, value, "a non-empty list of numbers > 0")
