"""Previous solvers kept as references for tests and benchmarks.

* :mod:`~embgeo.testing.reference.ntp_previous` — the NTP solvers before the t-form rewrite (issue 9; a dense
  eigendecomposition of the anchor rows' Gram, the dual over the full V × m matrix Ψ) and the equality system
  before issue 24 (a dense basis of each frequent token's null space).
* :mod:`~embgeo.testing.reference.attention_selection` — problem (12) of the attention paper as solved before
  :mod:`embgeo.attention.solvers` (dense LDP by NNLS), and the same problem written directly in cvxpy.

Both ``tests/`` and ``benchmarks/`` compare the current solvers with these: the tests for agreement on small
instances, the benchmarks for time ratios in one run. They live here, in the installed package, rather than
under ``tests/`` or ``benchmarks/`` because that is the one place both can import by an ordinary absolute
import, with no ``sys.path`` edits, no ``conftest.py`` tricks and no dependence on the current directory (the
benchmarks run as scripts, the tests under pytest's rootdir; neither folder is a package the other can see).
They are frozen: fix a bug in them only to keep them the exact reference they were; they are not maintained as
features. They import the current package's data types and small helpers (``NTPData``, ``row_dots``, the
equality constants) so that both sides read the same inputs, and need the test extra for cvxpy (imported only
by :func:`~embgeo.testing.reference.attention_selection.cvxpy_selection`).
"""
