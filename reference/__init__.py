"""Independent and previous solvers that embgeo's tests and benchmarks compare the current ones with.

One home, outside the installed package (nothing here is part of the toolkit or its API docs):

* :mod:`reference.ntp` — the NTP theory objects written from the paper's definitions in cvxpy + Clarabel on
  vec(W) over all pairs (W*, W^mm, multiclass SVMs), dense projectors and small data makers; the tests' oracle.
* :mod:`reference.ntp_constraints` — the paper's constraints (anchor form) on vec(W) as sparse matrices, the
  generic reference of the NTP benchmarks (cvxpy told the answer's active set).
* :mod:`reference.ntp_previous` — the NTP solvers before the t-form rewrite (issue 9; a dense
  eigendecomposition of the anchor rows' Gram, the dual over the full V × m matrix Ψ) and the equality system
  before issue 24 (a dense basis of each frequent token's null space).
* :mod:`reference.attention_selection` — problem (12) of the attention paper as solved before
  :mod:`embgeo.attention.solvers` (dense LDP by NNLS), and the same problem written directly in cvxpy.

Importing it: the tests have the repository root on their path (``pythonpath = ["."]`` in pyproject.toml's
pytest options); the benchmarks, which run as scripts, put it there from ``benchmarks/bench_threads.py``.

The previous solvers are frozen: their tuning constants are copied here with the values they had (a change of
embgeo's constants does not move them); fix a bug in them only to keep them the exact reference they were. They
import embgeo's data types and input checks (``NTPData``, the attention paper's ``_check_*``) so that both sides
read the same inputs.
"""
