"""Atomic checkpoint files shared by the training loops, holding only what a safe load reads back.

Checkpoints are read with ``torch.load(weights_only=True)``, which refuses to rebuild any object but tensors,
Python scalars, strings and a few containers (a file from elsewhere must not run code). :func:`save_atomic`
therefore writes the state reduced by :func:`loadable`: a value that would not load is converted (an enum that
is a ``str``, like :class:`~embgeo.core.status.Status`, to its plain string; a numpy scalar to the Python
scalar) or refused with an :class:`~embgeo.errors.InputError` naming its key, when the file is WRITTEN rather
than when a resumed run reads it back hours later.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np
import torch

from embgeo.errors import InputError

#: Exactly these types are written as they are: ``torch.load(weights_only=True)`` rebuilds them
#: (tensors, parameters and torch's own small types included).
_AS_IS = (type(None), bool, int, float, complex, str, bytes, torch.Tensor, torch.nn.Parameter, torch.Size,
          torch.dtype, torch.device)
#: Mappings rebuilt with their own type (an optimizer's state is a dict; MultiStepLR's milestones a Counter,
#: whose missing keys count 0, so it must not become a dict).
_MAPPINGS = (dict, collections.OrderedDict, collections.Counter)


def loadable(value: object, where: str = "state") -> object:
    """``value`` reduced to what ``torch.load(weights_only=True)`` reads back, recursively.

    Kept: None, bool, int, float, complex, str, bytes, tensors, ``torch.Size``/``dtype``/``device``, and
    lists, tuples, sets, dicts (also ``OrderedDict`` and ``Counter``) of them. Converted: a subclass of
    ``str``, ``int`` or ``float`` (an enum member such as :class:`~embgeo.core.status.Status`) to the plain
    value, a numpy scalar to the Python scalar. Anything else (a numpy array, a named tuple, an arbitrary
    object) is an :class:`InputError` naming ``where`` and the key path, e.g. ``state['rows'][3]['x']``:
    the trainer must store it as one of the kept types. Cost: one pass over the containers; tensors are not
    copied.
    """
    kind = type(value)
    if kind in _AS_IS:
        return value
    if isinstance(value, np.generic) and isinstance(value, (np.bool_, np.number, np.str_, np.bytes_)):
        return loadable(value.item(), where)  # np.float64 -> float, np.int64 -> int, np.str_ -> str
    if isinstance(value, str):  # a str enum (Status) or other str subclass: its characters, as a plain str
        return str.__str__(value)
    if isinstance(value, int):  # an IntEnum member (bool has no subclasses)
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if kind in (list, tuple, set):
        if kind is set:
            return {loadable(v, f"{where} element") for v in value}
        return kind(loadable(v, f"{where}[{i}]") for i, v in enumerate(value))
    if kind in _MAPPINGS:
        return kind({loadable(k, f"{where} key {k!r}"): loadable(v, f"{where}[{k!r}]") for k, v in value.items()})
    raise InputError(f"checkpoint: {where} is a {kind.__module__}.{kind.__qualname__}, which "
                     "torch.load(weights_only=True) cannot read back; store it as a tensor, a Python scalar or "
                     "string, or a list, tuple or dict of those")


def save_atomic(path: Path, state: dict) -> None:
    """``torch.save(loadable(state))`` to ``path`` through ``path.tmp`` and a rename, creating missing parent folders.

    The state is reduced (or refused, naming the key) by :func:`loadable` before anything is written, so every
    file this writes reads back with ``torch.load(weights_only=True)``. The rename is atomic, so a Ctrl-C or
    crash during the write leaves the previous checkpoint intact.
    """
    path = Path(path)
    state = loadable(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
