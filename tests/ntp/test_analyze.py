"""embgeo.ntp.analysis.analyze.analyze, directly: its result fields against the theory functions called
independently."""

import contextlib

import numpy as np
import pytest
import scipy.sparse as sp

from embgeo.errors import TooLargeError
from embgeo.ntp import NTPData, synthetic, theory
from embgeo.ntp.analysis.analyze import STAGES, Analysis, analyze


@pytest.mark.parametrize("case", [(12, 6, 15, 3, 0), (8, 10, 6, 3, 1)], ids=["rank=m", "rank<m"])
def test_fields_are_the_theory_objects(case):
    m, V, d, S, seed = case
    data = synthetic(m, V, d, S, seed=seed)
    seen, entered = [], []

    @contextlib.contextmanager
    def bar():
        entered.append(True)
        yield lambda iteration, info: None

    res = analyze(data, report=lambda stage, a: seen.append((stage, a)), svm_progress=bar)
    assert isinstance(res, Analysis) and res.data is data
    assert [stage for stage, _ in seen] == list(STAGES) and all(a is res for _, a in seen)
    assert entered == [True]
    assert res.entropy == theory.entropy(data)
    # F and W*
    assert res.dim_F == theory.subspace(data).dim and res.dim_F_bounds is None and res.dim_F_note == ""
    compat = theory.is_compatible(data)
    assert res.compatibility_error is None
    assert res.compatibility.compatible == compat.compatible
    np.testing.assert_array_equal(res.compatibility.W, compat.W)
    # separability and W^mm
    svm = theory.ntp_svm(data)
    assert res.svm_error is None and res.ran_svm
    assert res.svm.status == svm.status == "optimal"
    assert bool(res.svm.separability) and res.svm.separability.method == svm.separability.method
    np.testing.assert_array_equal(res.svm.W, svm.W)
    assert res.svm.margin == svm.margin
    # memory plan and times
    assert res.plan["parts"] == theory.estimate_memory(data)
    assert res.plan["equality_system"] == res.subspace.system_bytes() and res.plan["equality_system_built"]
    assert res.plan["peak_measured"] > 0 and res.plan["peak_estimate"] > res.plan["process"]
    assert set(res.seconds) == {"w_star", "dim_F", "separability_and_svm"} and min(res.seconds.values()) >= 0
    # the JSON-ready summary
    summary = res.summary()
    assert summary["dim_F"] == res.dim_F and summary["dim_F_perp"] == V * d - res.dim_F
    assert summary["compatible"] is compat.compatible and summary["w_star_norm"] == np.linalg.norm(compat.W)
    assert summary["separable"] is True and summary["svm_status"] == "optimal"
    assert summary["ntp_margin"] == svm.margin and summary["w_mm_norm"] == np.linalg.norm(svm.W)
    assert summary["svm_residuals"] == svm.residuals and "parts" not in summary["memory"]


def test_full_supports_have_no_svm_and_no_error():
    rng = np.random.default_rng(0)
    P = rng.random((4, 3)) + 0.1
    data = NTPData(rng.standard_normal((4, 5)), sp.csr_matrix(P / P.sum(axis=1, keepdims=True)))
    res = analyze(data)
    assert res.svm is None and res.svm_error is None and not res.ran_svm
    assert res.summary()["svm_status"] is None and res.summary()["separable"] is None


def test_undecided_stages_say_why_instead_of_raising(monkeypatch):
    from embgeo.errors import SolverError
    from embgeo.ntp.analysis import analyze as module

    def refuse(*args, **kw):
        raise SolverError("no time")

    monkeypatch.setattr(module, "ntp_svm", refuse)  # what analyze calls
    res = analyze(synthetic(8, 10, 6, 3, seed=1))
    assert res.svm is None and res.svm_error == "no time"
    assert res.summary()["svm_status"] == "undecided"


def test_answers_beyond_the_budget_are_refused_before_any_solver(monkeypatch):
    from embgeo.core import validate

    data = synthetic(8, 10, 6, 3, seed=1)
    monkeypatch.setattr(validate, "DENSE_BUDGET_BYTES", 8 * data.V * data.d - 1)
    stages = []
    with pytest.raises(TooLargeError, match="W\\* and W\\^mm are V × d"):
        analyze(data, report=lambda stage, a: stages.append(stage))
    assert stages == ["entropy"]
