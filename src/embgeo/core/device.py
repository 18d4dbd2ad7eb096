"""Where torch runs: the ``device=`` option of every trainer and of the probe's forward passes.

CPU is the default and the tested path. ``"cuda"`` (or ``"cuda:N"``) runs the same code on a GPU;
the dtype does not change with the device (float64 stays float64 on CUDA, where the theory
comparisons need it). A device that this machine does not have is an :class:`InputError` at once,
before any work, never a CUDA traceback in the middle of a run.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import TYPE_CHECKING

from embgeo.errors import InputError

if TYPE_CHECKING:  # torch is imported where a device is resolved: the runner imports this module for every command
    import torch

#: The device names accepted: cpu, cuda, cuda:N.
_DEVICE_RE = re.compile(r"cpu|cuda(?::(\d+))?")

#: The device of a trainer called with ``device=None``: "cpu", or what ``embgeo run NAME --set device=cuda``
#: set for the run (:func:`embgeo.lab.runner.run`), so every experiment's training follows it without
#: a device field in each config.
DEFAULT_DEVICE: ContextVar[str] = ContextVar("embgeo_device", default="cpu")


def check_device_name(device: object) -> str:
    """``device`` as a lower-case name if it reads as a device ("cpu", "cuda", "cuda:N"), without importing
    torch: a misspelt ``--set device=...`` is refused in one line before torch's ~2 s import (issue 37); whether
    this machine has that device is :func:`resolve_device`'s question.

    Raises :class:`InputError` naming the value otherwise.
    """
    if not isinstance(device, str) or not _DEVICE_RE.fullmatch(device.strip().lower()):
        raise InputError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return device.strip().lower()


def resolve_device(device: object = None) -> torch.device:
    """``device`` ("cpu", "cuda", "cuda:N" or a torch.device; None: :data:`DEFAULT_DEVICE`) as a torch.device
    this machine has.

    Raises :class:`InputError` naming the device when the name is not one of those (:func:`check_device_name`),
    when CUDA is not available (a CPU-only torch build, no driver, no GPU) or when the index is out of range.
    """
    import torch

    if device is None:
        device = DEFAULT_DEVICE.get()
    if isinstance(device, torch.device):
        device = str(device)
    name = check_device_name(device)
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", built without CUDA")
        raise InputError(f"device {device!r}: CUDA is not available on this machine ({build}); use device='cpu' "
                         "(the default)")
    index = _DEVICE_RE.fullmatch(name).group(1)
    count = torch.cuda.device_count()
    if index is not None and int(index) >= count:
        raise InputError(f"device {device!r}: this machine has {count} CUDA device(s), 0..{count - 1}")
    return torch.device(name)


def device_label(device: torch.device) -> str:
    """A human-readable name for run records: 'cpu' or 'cuda:0 (NVIDIA H100 ...)'."""
    if device.type != "cuda":
        return str(device)
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
