"""Issue 40 §3: the results of every theory function that decides or solves with a certificate share one shape
(:class:`embgeo.core.status.Certified`): a status, the certificate, residuals that are numbers, a method, and a
strict-JSON ``to_dict()`` — checked here once over the NTP paper's three and the attention paper's one, each with
both verdicts, with one property of each certificate that would fail if it were the wrong object."""

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from embgeo.attention.theory import max_margin_selection
from embgeo.core.status import Certified, Status
from embgeo.ntp import NTPData, is_compatible, is_separable, ntp_svm, synthetic

#: d = 1, token 0 next after h = 1 and h = 4, tokens 1 and 2 after h = 2 and 3: not separable (w_0 > w_1 from the
#: first context, w_1 > w_0 from the second, both scaled by positive h).
NOT_SEPARABLE = NTPData(np.array([[1.0], [2.0], [3.0], [4.0]]),
                        sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=float)))


def _results():
    yes = synthetic(10, 8, 7, 2, seed=0)  # separable with rank H < m
    E = np.random.default_rng(0).standard_normal((4, 3))
    return [("compatible", is_compatible(synthetic(6, 5, 8, 2, seed=0))),
            ("incompatible", is_compatible(synthetic(40, 6, 2, 3, seed=0))),
            ("separable", is_separable(yes)), ("not separable", is_separable(NOT_SEPARABLE)),
            ("svm", ntp_svm(yes)), ("svm infeasible", ntp_svm(NOT_SEPARABLE)),
            ("selection", max_margin_selection(E, np.array([[0, 1, 2]]), [0])),
            ("selection infeasible", max_margin_selection(E, np.array([[0, 1], [1, 0]]), [0, 1]))]


@pytest.fixture(scope="module")
def results():
    return dict(_results())


def test_every_certified_result_has_the_one_shape(results):
    for name, res in results.items():
        assert isinstance(res, Certified), name
        assert isinstance(res.status, Status) and isinstance(res.method, str) and res.method, name
        assert all(isinstance(v, (int, float)) for v in res.residuals.values()) and res.residuals, name
        doc = res.to_dict()
        assert json.loads(json.dumps(doc, allow_nan=False)) == doc, name  # strict JSON, no arrays
        assert doc["status"] == res.status and set(doc["residuals"]) == set(res.residuals), name
    assert not isinstance(object(), Certified)  # the check can fail: a result without the shape is not one
    negative = {"incompatible", "not separable", "svm infeasible", "selection infeasible"}
    assert {n for n, r in results.items() if r.status == Status.INFEASIBLE} == negative


def test_each_certificate_proves_its_verdict(results):
    """A negative verdict's certificate is its Farkas object; a solution's is its multipliers (μ ≥ 0)."""
    data = synthetic(40, 6, 2, 3, seed=0)
    lam = results["incompatible"].certificate  # ⟨λ, log p̂⟩ = −1, balanced per context
    assert float(lam.multiply(_log(data.probs)).sum()) == pytest.approx(-1.0, abs=1e-9)
    assert np.abs(np.asarray(lam.sum(axis=1))).max() <= 1e-9 * np.abs(lam.data).max()
    assert results["compatible"].certificate is None and results["compatible"].W is not None
    psi = results["not separable"].certificate.toarray()
    off = psi[NOT_SEPARABLE.probs.toarray() == 0]
    assert off.max() <= 0 and off.sum() == pytest.approx(-1.0, abs=1e-12)
    assert results["separable"].certificate is None and results["separable"].W is not None
    mu = results["svm"].certificate
    assert mu is results["svm"].multipliers and mu.min() >= 0 and mu.sum() > 0
    assert results["svm infeasible"].certificate is not None and results["svm infeasible"].W is None
    sel, bad = results["selection"], results["selection infeasible"]
    assert sel.certificate is sel.multipliers and sel.certificate.min() >= 0
    assert bad.certificate is bad.farkas and bad.certificate.min() >= 0 and math.isclose(bad.certificate.sum(), 1.0)


def _log(P: sp.csr_matrix) -> sp.csr_matrix:
    out = P.copy()
    out.data = np.log(out.data)
    return out
