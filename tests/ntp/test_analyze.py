"""embgeo.ntp.analysis.analyze.analyze, directly: its result fields against the theory functions called
independently, without a model's W (``ntp analyze``; with one, ``ntp probe``: tests/ntp/test_probe*.py)."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from embgeo.errors import TooLargeError
from embgeo.ntp import NTPData, synthetic, theory
from embgeo.ntp.analysis.analyze import MODEL_STAGES, STAGES, Analysis, MemoryPlan, analyze


@pytest.mark.parametrize("case", [(12, 6, 15, 3, 0), (8, 10, 6, 3, 1)], ids=["rank=m", "rank<m"])
def test_fields_are_the_theory_objects(case):
    m, V, d, S, seed = case
    data = synthetic(m, V, d, S, seed=seed)
    seen, began = [], []
    res = analyze(data, report=lambda stage, a: seen.append((stage, a)), started=began.append,
                  solver_progress=lambda event: None)
    assert isinstance(res, Analysis) and res.data is data and res.W is None
    ran = [stage for stage in STAGES if stage not in MODEL_STAGES]  # without W: no geometry, no alignment
    assert [stage for stage, _ in seen] == ran == began and all(a is res for _, a in seen)
    assert np.isnan(res.ce) and np.isnan(res.kl_gap) and not res.alignment and not res.logits
    assert res.entropy == theory.entropy(data)
    # F and W*
    assert res.dim_F == theory.subspace(data).dim and res.dim_F_bounds is None
    compat = theory.is_compatible(data)
    assert res.errors == {}
    assert res.compatibility.compatible == compat.compatible
    np.testing.assert_array_equal(res.compatibility.W, compat.W)
    # separability and W^mm
    svm = theory.ntp_svm(data)
    assert res.ran_svm and res.separability is res.svm.separability
    assert res.svm.status == svm.status == "optimal"
    assert bool(res.svm.separability) and res.svm.separability.method == svm.separability.method
    np.testing.assert_array_equal(res.svm.W, svm.W)
    assert res.svm.margin == svm.margin
    # memory plan and times
    assert isinstance(res.plan, MemoryPlan) and res.plan.parts == theory.estimate_memory(data) == res.memory
    assert res.plan.equality_system == res.subspace.system_bytes() and res.plan.equality_system_built
    assert res.plan.peak_measured > 0 and res.plan.peak_estimate > res.plan.process
    assert set(res.seconds) == {*ran, "dim_F"} and min(res.seconds.values()) >= 0
    # the JSON-ready summary: strict JSON
    summary = res.to_dict()
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary
    assert summary["dim_F"] == res.dim_F and summary["dim_F_perp"] == V * d - res.dim_F
    assert summary["compatible"] is compat.compatible and summary["w_star_norm"] == np.linalg.norm(compat.W)
    assert summary["separable"] is True and summary["svm_status"] == "optimal"
    assert summary["ntp_margin"] == svm.margin and summary["w_mm_norm"] == np.linalg.norm(svm.W)
    assert summary["svm_residuals"] == svm.residuals and "parts" not in summary["memory"]
    assert summary["ce_nats"] is None and summary["separability_verdict"] == "True"
    assert summary["verdicts"]["svm"]["status"] == "optimal" and summary["verdicts"]["separability"]["separable"]


def test_full_supports_have_no_svm_and_no_error():
    rng = np.random.default_rng(0)
    P = rng.random((4, 3)) + 0.1
    data = NTPData(rng.standard_normal((4, 5)), sp.csr_matrix(P / P.sum(axis=1, keepdims=True)))
    res = analyze(data)
    assert res.svm is None and res.separability is None and not res.ran_svm
    assert set(res.errors) == {"separability"} and "no separability constraints" in res.errors["separability"]
    summary = res.to_dict()
    assert summary["svm_status"] is None and summary["separable"] is None and summary["separability_verdict"] == "n/a"


def test_undecided_stages_say_why_instead_of_raising(monkeypatch):
    from embgeo.errors import SolverError
    from embgeo.ntp.analysis import analyze as module

    def refuse(*args, **kw):
        raise SolverError("no time")

    monkeypatch.setattr(module.theory, "ntp_svm", refuse)  # what analyze calls
    res = analyze(synthetic(8, 10, 6, 3, seed=1))
    assert res.svm is None and res.errors["svm"] == "no time" and res.separable is None
    assert res.to_dict()["svm_status"] == "undecided" and res.separability_verdict == "undecided"


def test_answers_beyond_the_budget_are_refused_before_any_solver(monkeypatch):
    from embgeo.core import validate

    data = synthetic(8, 10, 6, 3, seed=1)
    monkeypatch.setattr(validate, "DENSE_BUDGET_BYTES", 8 * data.V * data.d - 1)
    stages = []
    with pytest.raises(TooLargeError, match="W\\* and W\\^mm are V × d"):
        analyze(data, report=lambda stage, a: stages.append(stage))
    assert stages == ["loss"]


def test_the_analysis_of_a_model_holds_rho_while_the_working_set_is_incomplete(monkeypatch):
    """With a model's head (``ntp probe``) the NTP-SVM is the ALM warm-started from it with HOLD_SET (ρ held while
    the pairs joining the working set are violated more than its own: a real LM's W^mm needs 90–130 off pairs per
    context); without one, ntp_svm's defaults."""
    from embgeo.ntp.analysis import analyze as module
    from embgeo.ntp.solvers.svm_alm import HOLD_SET

    calls = []
    real = theory.ntp_svm
    monkeypatch.setattr(module.theory, "ntp_svm", lambda data, **kw: calls.append(kw) or real(data, **kw))
    data = synthetic(10, 8, 7, 2, seed=0)
    W = np.random.default_rng(1).standard_normal((data.V, data.d))
    analyze(data)
    analyze(data, W)
    assert "alm_options" not in calls[0]
    assert calls[1]["alm_options"] is HOLD_SET and calls[1]["method"] == "alm" and calls[1]["warm_start"] is W


def test_one_analysis_for_data_alone_and_for_a_model():
    """Issue 40 §2: ``ntp analyze`` (data alone) and ``ntp probe`` (data and a head W) are one analysis: the same
    verdicts and objects — W^mm from the two solvers (the default, and the ALM warm-started from W) agrees within
    their certified error bounds — and one summary shape (the same keys; strict JSON). What only a model has is NaN /
    empty without one."""
    data = synthetic(10, 8, 7, 2, seed=0)  # rank H = d < m, separable: a solver decides it
    W = np.random.default_rng(1).standard_normal((data.V, data.d))
    alone, model = analyze(data), analyze(data, W)
    assert model.W is W or np.array_equal(model.W, W)
    assert bool(alone.compatibility) == bool(model.compatibility) and alone.dim_F == model.dim_F
    assert alone.separable == model.separable is True
    eps = alone.svm.residuals["error_bound"] + model.svm.residuals["error_bound"]
    assert np.linalg.norm(alone.w_mm - model.w_mm) <= 2 * eps * np.linalg.norm(alone.w_mm)
    assert abs(alone.svm.margin - model.svm.margin) <= 2 * eps * alone.svm.margin
    a, m = alone.to_dict(), model.to_dict()
    assert set(a) == set(m) and json.loads(json.dumps(m, allow_nan=False)) == m
    assert a["ce_nats"] is None and m["ce_nats"] == pytest.approx(theory.cross_entropy(data, W), rel=1e-12)
    assert not alone.alignment and set(model.alignment) >= {"rows_cos_mm", "subspace_error", "margin"}
    assert set(model.seconds) - set(alone.seconds) == {"geometry", "separability", "alignment"}


def test_save_writes_the_certificates_for_data_and_for_a_model(tmp_path):
    """One writer: both write summary.json, the certificates and π̂; the figure and the per-context arrays only with
    a model; the dense answers only when asked. The certificate's verdicts are summary.json's, and a not-separable
    verdict lists its Farkas matrix: off-support weights ≤ 0 summing to −1 (Def. 2's certificate)."""
    rng = np.random.default_rng(0)
    P = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=float))
    data = NTPData(np.array([[1.0], [2.0], [3.0], [4.0]]), P)  # d = 1, token 0 next at both ends: not separable
    alone = analyze(data)
    assert alone.separable is False
    written = alone.save(tmp_path / "a")
    assert {"summary.json", "certificate.txt", "certificate.json", "weights.npy"} <= set(written)
    assert not {"probe.png", "W_mm.npy", "H.npy"} & set(written)
    doc = json.loads((tmp_path / "a" / "certificate.json").read_text())
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert doc["separability"]["verdict"] is summary["separable"] is False
    off = [e["weight"] for e in doc["separability"]["entries"] if not e["in_support"]]
    assert off and max(off) <= 0 and sum(off) == pytest.approx(-1.0, abs=1e-9)
    model = analyze(data, rng.standard_normal((3, 1)))
    written = model.save(tmp_path / "m", save_arrays=True)
    assert {"probe.png", "context_margins.npy", "certificate.json", "H.npy", "W.npy"} <= set(written)
    assert json.loads((tmp_path / "m" / "certificate.json").read_text())["separability"]["verdict"] is False


def test_solvers_report_typed_progress_events():
    """Issue 40 §3: every iterative solver reports one ProgressEvent type — the ALM, the dual and the squared hinge
    each with its name, a step count that does not go down within a run, and its numbers by name (the gap where
    the solver has one: finite once a feasible point is certified, NaN for the hinge)."""
    from embgeo.ntp.solvers.outcome import ProgressEvent

    data = synthetic(30, 10, 12, 2, seed=1)  # rank H = d < m, separable: every solver runs
    for solver, call in [("alm", lambda p: theory.ntp_svm(data, method="alm", progress=p)),
                         ("dual", lambda p: theory.ntp_svm(data, method="dual", progress=p)),
                         ("hinge", lambda p: theory.is_separable(data, method="hinge", progress=p))]:
        events = []
        call(events.append)
        assert events and all(isinstance(e, ProgressEvent) and e.solver == solver for e in events), solver
        steps = [e.iteration for e in events]
        assert steps == sorted(steps) and all(isinstance(v, (int, float)) for e in events for v in e.values.values())
        if solver == "hinge":
            assert all(np.isnan(e.gap) for e in events) and "phi" in events[-1].values
        else:
            assert np.isfinite(events[-1].gap) and "working_set" in events[-1].values


def test_a_solver_is_one_registry_entry(monkeypatch):
    """Issue 40 §3: ntp_svm runs whatever SVM_SOLVERS names — a solver added by one entry (here the dual under
    another name, counting its calls) is accepted as ``method``, gets the request, and gives the dual's W^mm; an
    unknown method names the registered ones."""
    from embgeo.errors import InputError
    from embgeo.ntp.theory import svm as S

    calls = []

    def mine(req: S.SVMRequest) -> S.SVMSolved:
        calls.append((req.tol, req.pb.data.m))
        return S._solve_dual(req)

    monkeypatch.setitem(S.SVM_SOLVERS, "mine", mine)
    data = synthetic(10, 8, 7, 2, seed=0)
    got, dual = theory.ntp_svm(data, method="mine", tol=1e-9), theory.ntp_svm(data, method="dual", tol=1e-9)
    assert calls == [(1e-9, 10)] and got.status == dual.status == "optimal"
    np.testing.assert_allclose(got.W, dual.W, rtol=0, atol=1e-12 * np.abs(dual.W).max())
    with pytest.raises(InputError, match=r"'auto', 'alm', 'dual', 'ipm', 'mine'"):
        theory.ntp_svm(data, method="nothing")


def test_a_separability_route_is_one_registry_entry(monkeypatch):
    """The same for is_separable: a route added to SEPARABILITY_ROUTES (here the LP under another name) is accepted
    as ``method`` and decides as the LP does, with the certificate; an unknown method names the registered ones."""
    from embgeo.errors import InputError
    from embgeo.ntp.theory import separability as P

    seen = []
    monkeypatch.setitem(P.SEPARABILITY_ROUTES, "mine", lambda req: seen.append(req.pb.data.m) or P._route_lp(req))
    for data in (synthetic(10, 8, 7, 2, seed=0), synthetic(10, 8, 6, 2, seed=3)):  # separable, then not
        got, lp = theory.is_separable(data, method="mine"), theory.is_separable(data, method="lp")
        assert bool(got) == bool(lp) and got.method == lp.method
    assert [bool(theory.is_separable(synthetic(10, 8, 6, 2, seed=3), method="mine"))] == [False] and len(seen) == 3
    with pytest.raises(InputError, match=r"'auto', 'hinge', 'dual', 'lp', 'mine'"):
        theory.is_separable(synthetic(10, 8, 7, 2, seed=0), method="nothing")
