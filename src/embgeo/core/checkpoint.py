"""Atomic checkpoint files shared by the training loops."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def save_atomic(path: Path, state: dict) -> None:
    """``torch.save(state)`` to ``path`` through ``path.tmp`` and a rename, creating missing parent folders.

    The rename is atomic, so a Ctrl-C or crash during the write leaves the previous checkpoint intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
