"""embgeo.ntp.theory against the independent cvxpy/Clarabel references of ``reference.py``.

The package solves everything in the anchor form on m × m Gram matrices; the references solve
the paper's all-pairs constraints directly on the (V, d) matrix W. Agreement therefore checks
the constraint sets, the anchor reduction and the solvers at once.

Tolerances
----------
* W^mm: relative Frobenius error ≤ 1e-5. The reference is solved with Clarabel at relative
  duality gap ≤ 1e-12 (see ``reference.CLARABEL_SETTINGS``); strong convexity of ‖W‖² turns that
  into a certified relative distance ≤ sqrt(1e-12) = 1e-6 from the exact W^mm. ``ntp_svm`` stops
  at a relative gap ≤ 1e-12 too (its certified distance is ≤ sqrt(2e-12) ≈ 1.4e-6) or at an
  exact active-set solution. 1e-5 is thus a certified bound with headroom, while any error in
  a constraint (a wrong pair, a wrong sign, a missing context) moves W by O(1) relative.
  (With Clarabel's *default* 1e-8 gap the certified bound would only be 1e-4, and default-
  tolerance references do drift 4e-6 .. 1.4e-5 away on ill-conditioned instances.)
* W*: relative ≤ 1e-6. It is the min-norm solution of a consistent linear system; both sides
  solve it to near machine precision (observed ≤ 1e-14), the equality-constrained QP converges
  in a couple of interior-point steps.
"""

from __future__ import annotations

import numpy as np
import pytest

from embgeo.errors import NotCompatibleError
from embgeo.ntp import NTPData, is_compatible, is_separable, ntp_svm, synthetic, w_star
from embgeo.ntp.theory import subspace
from reference.ntp import INFEASIBLE, make_data, ref_multiclass_svm, ref_ntp_svm, ref_w_star

SVM_RTOL = 1e-5
WSTAR_RTOL = 1e-6


def rel_err(A, B) -> float:
    return float(np.linalg.norm(np.asarray(A) - np.asarray(B)) / np.linalg.norm(B))


# (m, V, d, support_size, seed) of synthetic() instances, sorted by regime. Separability of the
# d < m ones was established once (and is asserted again by each test, so a change of the
# generator shows up as a failure, not as a silently different test).
SEPARABLE = [
    pytest.param((6, 5, 9, 2, 0), id="d>m-m6-V5-d9-S2"),
    pytest.param((8, 10, 12, 3, 0), id="d>m-m8-V10-d12-S3"),
    pytest.param((10, 8, 14, 4, 0), id="d>m-m10-V8-d14-S4"),
    pytest.param((50, 10, 60, 6, 0), id="d>m-paper-size-m50-V10-d60-S6"),
    pytest.param((6, 6, 4, 2, 2), id="d<m-m6-V6-d4-S2"),
    pytest.param((8, 8, 6, 2, 0), id="d<m-m8-V8-d6-S2"),
    pytest.param((8, 10, 6, 3, 1), id="d<m-m8-V10-d6-S3"),
    pytest.param((7, 6, 5, 3, 5), id="d<m-m7-V6-d5-S3"),
]
NON_SEPARABLE = [
    pytest.param((7, 6, 5, 3, 0), id="m7-V6-d5-S3"),
    pytest.param((6, 6, 4, 2, 0), id="m6-V6-d4-S2"),
    pytest.param((10, 5, 3, 2, 0), id="m10-V5-d3-S2-not-compatible"),
    pytest.param((10, 6, 3, 3, 0), id="m10-V6-d3-S3-not-compatible"),
]
NOT_COMPATIBLE = [
    pytest.param((10, 5, 3, 2, 0), id="m10-V5-d3-S2"),
    pytest.param((10, 6, 3, 3, 0), id="m10-V6-d3-S3"),
    pytest.param((8, 6, 2, 3, 1), id="m8-V6-d2-S3"),
]

UNEVEN = np.array([0.05, 0.3, 0.1, 0.25, 0.2, 0.1])


def hand_built():
    """Uneven π̂ and varying S_j, on both sides of d = m."""
    return [
        pytest.param(make_data([1, 2, 3, 4, 2, 3], V=6, d=9, weights=UNEVEN, seed=0), id="d>m-S1..4-uneven"),
        pytest.param(make_data([1, 2, 3, 2, 1, 2, 2], V=7, d=5, weights=np.arange(1, 8) / 28, seed=0),
                     id="d<m-S1..3-uneven"),
        pytest.param(make_data([3, 1, 2, 4, 2, 3], V=6, d=4, weights=UNEVEN, seed=2), id="d<m-S1..4-uneven"),
    ]


def _synthetic(case):
    m, V, d, S, seed = case
    return synthetic(m, V, d, S, seed=seed)


def check_svm_against_reference(data):
    res = ntp_svm(data)
    status, W_ref = ref_ntp_svm(data)
    assert status == "optimal"
    assert res.status == "optimal"
    assert rel_err(res.W, W_ref) <= SVM_RTOL
    # The optimal NTP-margin is 1/‖W^mm‖ (max-margin form of Def. 3).
    assert res.margin == pytest.approx(1.0 / np.linalg.norm(res.W), rel=1e-12)
    assert res.margin == pytest.approx(1.0 / np.linalg.norm(W_ref), rel=SVM_RTOL)
    return res


def check_w_star_against_reference(data):
    W = w_star(data)
    status, W_ref = ref_w_star(data)
    assert status == "optimal"
    assert rel_err(W, W_ref) <= WSTAR_RTOL
    return W


# -- W^mm ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", SEPARABLE)
def test_ntp_svm_matches_reference_on_synthetic(case):
    data = _synthetic(case)
    assert is_separable(data)
    check_svm_against_reference(data)


@pytest.mark.parametrize("data", hand_built())
def test_ntp_svm_matches_reference_uneven_weights_varying_supports(data):
    assert len(set(data.support_sizes.tolist())) >= 3
    assert is_separable(data)
    check_svm_against_reference(data)


@pytest.mark.parametrize("case", NON_SEPARABLE)
def test_non_separable_agrees_with_reference(case):
    data = _synthetic(case)
    assert data.d < data.m
    sep = is_separable(data)
    assert not sep
    status, W_ref = ref_ntp_svm(data)
    assert status in INFEASIBLE and W_ref is None
    res = ntp_svm(data)
    assert res.status == "infeasible"
    assert res.W is None and res.margin == 0.0


# -- W* ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", SEPARABLE + NON_SEPARABLE[:2])
def test_w_star_matches_reference_on_synthetic(case):
    data = _synthetic(case)
    assert is_compatible(data)
    check_w_star_against_reference(data)


@pytest.mark.parametrize("data", hand_built())
def test_w_star_matches_reference_uneven_weights_varying_supports(data):
    check_w_star_against_reference(data)


@pytest.mark.parametrize("case", NOT_COMPATIBLE)
def test_not_compatible_agrees_with_reference(case):
    data = _synthetic(case)
    comp = is_compatible(data)
    assert not comp
    assert comp.residual > comp.tolerance
    status, W_ref = ref_w_star(data)
    assert status in INFEASIBLE and W_ref is None
    with pytest.raises(NotCompatibleError, match="NTP_H-compatible"):
        w_star(data)


# -- independence of π̂ --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1])
def test_w_star_and_w_mm_do_not_depend_on_weights(seed):
    """W* depends on the supports and in-support probabilities, W^mm on the supports only;
    neither on π̂ (eq. 4 and (6) do not contain π̂)."""
    base = synthetic(6, 6, 9, 3, seed=seed)
    P = base.probs.toarray()
    uneven = NTPData(base.embeddings, P, UNEVEN)
    skewed = NTPData(base.embeddings, P, np.array([0.9, 0.02, 0.02, 0.02, 0.02, 0.02]))
    W0, W1, W2 = (w_star(x) for x in (base, uneven, skewed))
    np.testing.assert_allclose(W1, W0, rtol=0, atol=1e-12 * np.linalg.norm(W0))
    np.testing.assert_allclose(W2, W0, rtol=0, atol=1e-12 * np.linalg.norm(W0))
    M0, M1, M2 = (ntp_svm(x).W for x in (base, uneven, skewed))
    np.testing.assert_allclose(M1, M0, rtol=0, atol=1e-9 * np.linalg.norm(M0))
    np.testing.assert_allclose(M2, M0, rtol=0, atol=1e-9 * np.linalg.norm(M0))
    # ... and the unweighted references agree with the weighted solutions.
    check_w_star_against_reference(skewed)
    check_svm_against_reference(skewed)


def test_w_mm_depends_on_supports_only():
    """Same supports, different in-support probabilities: same W^mm, different W*."""
    base = synthetic(6, 6, 9, 3, seed=3)
    P = base.probs.toarray()
    rng = np.random.default_rng(7)
    Q = np.where(P > 0, rng.random(P.shape) + 0.05, 0.0)
    Q /= Q.sum(axis=1, keepdims=True)
    other = NTPData(base.embeddings, Q)
    Mb, Mo = ntp_svm(base).W, ntp_svm(other).W
    np.testing.assert_allclose(Mo, Mb, rtol=0, atol=1e-9 * np.linalg.norm(Mb))
    assert rel_err(w_star(other), w_star(base)) > 0.1


# -- one-hot supports (S_j = 1): plain multiclass SVM ----------------------------------------------

ONE_HOT = [
    pytest.param(synthetic(5, 4, 8, 1, seed=0), id="d>m-m5-V4-d8"),
    pytest.param(synthetic(6, 5, 4, 1, seed=0), id="d<m-m6-V5-d4"),
    pytest.param(synthetic(10, 5, 6, 1, seed=0), id="d<m-m10-V5-d6"),
    pytest.param(make_data([1] * 8, V=4, d=5, weights=np.arange(1, 9) / 36, seed=1), id="d<m-m8-V4-d5-uneven"),
]


@pytest.mark.parametrize("data", ONE_HOT)
def test_one_hot_reduces_to_multiclass_svm(data):
    assert np.all(data.support_sizes == 1)
    F = subspace(data)
    assert F.dim == 0
    assert F.perp_dim == data.V * data.d
    Ws = w_star(data)
    assert Ws.shape == (data.V, data.d)
    assert np.all(Ws == 0.0)  # F = {0}, so W* is exactly zero
    labels = [int(np.flatnonzero(row)[0]) for row in data.probs.toarray()]
    status, W_ref = ref_multiclass_svm(data.embeddings, labels, data.V)
    assert status == "optimal"
    res = ntp_svm(data)
    assert res.status == "optimal"
    assert rel_err(res.W, W_ref) <= SVM_RTOL
    assert res.margin == pytest.approx(1.0 / np.linalg.norm(res.W), rel=1e-12)
    # The general NTP reference coincides with the multiclass one here as well.
    _, W_ntp_ref = ref_ntp_svm(data)
    assert rel_err(W_ntp_ref, W_ref) <= SVM_RTOL


def _many_singletons(seed: int) -> NTPData:
    """d ≪ m text-like data: 30 contexts in d = 3, 22 of them with one next token (token 0 follows 14 of
    them, more than the rank), 8 with two or three. Only the 8 constrain (4) and F."""
    rng = np.random.default_rng(seed)
    V, d = 6, 3
    P = np.zeros((30, V))
    P[:14, 0] = 1.0
    P[np.arange(14, 22), rng.integers(1, V, size=8)] = 1.0
    for j in range(22, 30):
        S = rng.choice(V, size=2 + j % 2, replace=False)
        p = rng.dirichlet(np.ones(S.size)) + 0.05
        P[j, S] = p / p.sum()
    return NTPData(rng.standard_normal((30, d)), P)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_singleton_contexts_do_not_constrain_w_star_or_F(seed):
    """Dropping the one-next-token contexts from W*'s and F's equality system is exact: W* against the
    all-pairs cvxpy reference, dim F against the rank of the spanning matrix, P_F against the dense
    projector, and the same answers with the singleton contexts removed from the data altogether."""
    from reference.ntp import dense_projector_F, spanning_matrix

    data = _many_singletons(seed)
    F = subspace(data)
    assert F.contexts.tolist() == list(range(22, 30))
    status, ref = ref_w_star(data)
    assert status not in INFEASIBLE
    Ws = w_star(data, F)
    assert rel_err(Ws, ref) <= WSTAR_RTOL
    assert F.dim == np.linalg.matrix_rank(spanning_matrix(data))
    W = np.random.default_rng(seed + 10).standard_normal((data.V, data.d))
    dense = (dense_projector_F(data) @ W.ravel()).reshape(W.shape)
    assert np.linalg.norm(F.project(W) - dense) <= 1e-10 * np.linalg.norm(W)
    multi = NTPData(data.embeddings[22:], data.probs.toarray()[22:])
    assert rel_err(w_star(multi), Ws) <= 1e-12 and subspace(multi).dim == F.dim


def test_only_singleton_contexts_give_F_zero_and_w_star_zero():
    data = NTPData(np.random.default_rng(0).standard_normal((5, 2)), np.eye(5)[:, :4][[0, 1, 2, 3, 0]])
    F = subspace(data)
    assert F.dim == 0 and F.contexts.size == 0
    comp = is_compatible(data, F)
    assert comp and np.all(comp.W == 0) and comp.residual == 0.0
    W = np.ones((4, 2))
    assert np.all(F.project(W) == 0) and np.all(F.project_perp(W) == W)
