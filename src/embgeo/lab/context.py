"""The context of one run, handed to an experiment's ``run(config, ctx)`` by the runner.

It says where the run writes (its folder, its checkpoints, the folder of its sibling runs) and how a sweep
that the experiment runs inside itself is run (threads per point, local workers, a scheduler). These are
settings of *running*, not of the science: they never change a result, so they are not fields of an
experiment's config (whose values are recorded and compared on resume).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunContext:
    """Where a run writes and how it runs its inner sweeps.

    ``out_dir``: the run's folder (None when an experiment function is called directly, outside any run:
    nothing is checkpointed then). ``threads``: torch/BLAS threads of each point of a sweep the experiment
    runs (None: the thread count of the enclosing block, :func:`embgeo.core.threads.default_threads`).
    ``workers`` and ``scheduler``: the Dask cluster of such a sweep (:func:`embgeo.lab.sweep.run_sweep`).
    """

    out_dir: Path | None = None
    threads: int | None = None
    workers: int | None = None
    scheduler: str | None = None

    def folder(self, name: str) -> Path:
        """The run's folder, or ``runs/NAME`` outside a run (where a direct call writes what must be written)."""
        return Path(self.out_dir) if self.out_dir is not None else Path("runs") / name

    def runs_dir(self, name: str) -> Path:
        """The folder holding this run's sibling runs (the parent of :meth:`folder`): where an experiment built
        from other runs' outputs finds them."""
        return self.folder(name).parent

    def checkpoint(self, tag: str, cfg: Any) -> Path | None:
        """The checkpoint file of a long training inside this run, or None outside a run.

        ``OUT/checkpoints/TAG-HASH.pt`` with HASH a digest of the config, so that a run repeated with the same
        config resumes where it was interrupted and one with another config starts afresh. The runner deletes
        the directory once the run's results are written.
        """
        if self.out_dir is None:
            return None
        text = json.dumps(dataclasses.asdict(cfg), sort_keys=True, default=str)
        return Path(self.out_dir) / "checkpoints" / f"{tag}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.pt"


#: The context of an experiment function called directly (no run folder, the enclosing thread setting).
DETACHED = RunContext()
