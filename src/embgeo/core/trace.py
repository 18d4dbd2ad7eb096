"""A minimal record of a training run: one row of metrics per recorded step.

No framework: a :class:`Trace` is a list of dicts plus a ``meta`` dict, convertible to a
pandas DataFrame or a CSV file. Training loops (e.g. :func:`embgeo.ntp.training.train.train`) fill it
and return it.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd

from embgeo.errors import InputError


class Trace:
    """Metrics recorded along a training run.

    Parameters
    ----------
    meta : dict, optional
        Run settings and run-level facts (optimizer, lr, seed, ...); copied.

    Attributes
    ----------
    rows : list of dict
        One dict per :meth:`record` call, in call order; each has the key ``"step"`` (int)
        first, then the metrics passed to :meth:`record`.
    meta : dict
        Run settings and run-level facts.
    interrupted : bool
        True when the run was stopped early by Ctrl-C (KeyboardInterrupt); the rows then end
        at the step reached.
    W : numpy array or None
        The final parameter array of the run (e.g. the (V, d) decoder of the NTP model), or
        None if the run has not stored one.

    Examples
    --------
    >>> t = Trace({"optimizer": "gd"})
    >>> t.record(0, loss=1.0)
    {'step': 0, 'loss': 1.0}
    >>> t.record(10, loss=0.5)["loss"], len(t), t.last["step"]
    (0.5, 2, 10)
    >>> t.to_frame().columns.tolist()
    ['step', 'loss']
    """

    def __init__(self, meta: dict | None = None):
        if meta is not None and not isinstance(meta, dict):
            raise InputError(f"meta: expected a dict or None, got {type(meta).__name__}")
        self.rows: list[dict] = []
        self.meta: dict = dict(meta or {})
        self.interrupted: bool = False
        self.W: np.ndarray | None = None

    def record(self, step: int, **metrics) -> dict:
        """Append the row ``{"step": step, **metrics}`` and return it.

        ``step`` must be a non-negative integer; metric values are stored as given (floats,
        ints, strings; use scalars if the trace is to be written to CSV).
        """
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise InputError(f"step: expected a non-negative integer, got {step!r}")
        row = {"step": int(step), **metrics}
        self.rows.append(row)
        return row

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def last(self) -> dict | None:
        """The last recorded row (a dict), or None if nothing was recorded."""
        return self.rows[-1] if self.rows else None

    def column(self, name: str) -> np.ndarray:
        """The values of metric ``name`` over the rows as a 1-D array (NaN where a row lacks it)."""
        if not any(name in row for row in self.rows):
            raise InputError(f"name: no recorded row has the metric {name!r}; "
                             f"available: {sorted({k for row in self.rows for k in row})}")
        return np.array([row.get(name, np.nan) for row in self.rows])

    def __getitem__(self, name: str) -> np.ndarray:
        """``trace["ce"]`` is ``trace.column("ce")``."""
        return self.column(name)

    def to_frame(self) -> pd.DataFrame:
        """The rows as a DataFrame, shape (len(self), n_metrics + 1); ``step`` is the first column.

        Columns follow the order in which metrics first appear; a row without some metric
        gets NaN there.
        """
        if not self.rows:
            return pd.DataFrame(columns=["step"])
        return pd.DataFrame(self.rows)

    def to_csv(self, path: str | PathLike) -> Path:
        """Write :meth:`to_frame` to ``path`` as CSV (no index column) and return the path.

        Only the rows are written; ``meta`` and ``W`` are not. Read back with
        ``pandas.read_csv(path)``.
        """
        path = Path(path)
        self.to_frame().to_csv(path, index=False)
        return path

    def __repr__(self) -> str:
        last = "" if not self.rows else f", last step {self.rows[-1]['step']}"
        flag = ", interrupted" if self.interrupted else ""
        return f"Trace({len(self.rows)} rows{last}{flag}, meta keys {sorted(self.meta)})"
