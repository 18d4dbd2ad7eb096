"""embgeo.ntp.measure.geometry: support groups, rank measures, group collapse / subspaces, logit structure and
the paper's reference objects for moving embeddings.

Each expected value is computed independently of the module: by hand, by a brute-force dense
computation, from a known distribution (the F law of within/between scatter under pure noise), or
from :func:`embgeo.ntp.measure.metrics.compute_reference`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from threadpoolctl import threadpool_limits

from embgeo.errors import InputError, ShapeError, TooLargeError
from embgeo.ntp import NTPData
from embgeo.ntp.measure.geometry import (
    effective_rank,
    group_collapse,
    group_subspaces,
    logit_structure,
    numerical_rank,
    support_groups,
    track_reference,
)
from embgeo.ntp.measure.metrics import compute_reference


@pytest.fixture(autouse=True)
def _one_thread():
    # The machine's cores are busy with long runs: keep BLAS to one thread.
    with threadpool_limits(limits=1):
        yield


def random_data(rng, m, V, sizes, d=3, weights=None):
    """NTPData with random supports of the given sizes, Dirichlet(1) probabilities, random embeddings."""
    P = np.zeros((m, V))
    for j, S in enumerate(sizes):
        P[j, rng.choice(V, S, replace=False)] = rng.dirichlet(np.ones(S))
    return NTPData(rng.normal(size=(m, d)), sp.csr_matrix(P), weights)


# -- support_groups ----------------------------------------------------------------------------

def test_support_groups_by_set_in_order_of_first_appearance():
    P = [[0.0, 0.0, 1.0, 0.0],  # {2}      -> group 0
         [0.5, 0.5, 0.0, 0.0],  # {0, 1}   -> group 1
         [0.3, 0.7, 0.0, 0.0],  # {0, 1}, other probabilities -> group 1
         [0.0, 0.2, 0.8, 0.0],  # {1, 2}   -> group 2
         [0.0, 0.0, 1.0, 0.0]]  # {2}      -> group 0
    data = NTPData(np.ones((5, 2)), P)
    groups = support_groups(data)
    assert groups.tolist() == [0, 1, 1, 2, 0]
    assert groups.shape == (5,) and np.issubdtype(groups.dtype, np.integer)


def test_support_groups_refuses_other_input():
    with pytest.raises(InputError, match="NTPData"):
        support_groups(np.eye(3))


# -- effective_rank, numerical_rank ------------------------------------------------------------

def test_effective_rank_known_values():
    rng = np.random.default_rng(0)
    assert effective_rank(np.eye(5)) == pytest.approx(5.0, rel=1e-12)
    assert effective_rank(np.outer(rng.normal(size=6), rng.normal(size=4))) == pytest.approx(1.0, rel=1e-9)
    assert effective_rank(np.diag([1.0, 1.0, 0.0])) == pytest.approx(2.0, rel=1e-12)
    # diag(3, 1): p = (3/4, 1/4), exp(H(p)) by hand.
    p = np.array([0.75, 0.25])
    assert effective_rank(np.diag([3.0, 1.0])) == pytest.approx(math.exp(-np.sum(p * np.log(p))), rel=1e-12)
    assert effective_rank(np.zeros((3, 4))) == 0.0


def test_effective_rank_is_scale_and_rotation_invariant():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(7, 5))
    Q, _ = np.linalg.qr(rng.normal(size=(7, 7)))
    assert effective_rank(12.5 * A) == pytest.approx(effective_rank(A), rel=1e-12)
    assert effective_rank(Q @ A) == pytest.approx(effective_rank(A), rel=1e-10)
    assert 1.0 < effective_rank(A) < 5.0


def test_numerical_rank():
    A = np.diag([1.0, 1e-3, 1e-9])
    assert numerical_rank(A) == 2
    assert numerical_rank(A, rtol=1e-2) == 1
    assert numerical_rank(A, rtol=1e-12) == 3
    assert numerical_rank(1e-20 * A) == 2  # relative to s_max
    assert numerical_rank(np.zeros((3, 3))) == 0
    with pytest.raises(ShapeError, match="A: expected a 2-D"):
        numerical_rank(np.ones(3))
    with pytest.raises(InputError, match="rtol"):
        numerical_rank(A, rtol=-1.0)


# -- group_collapse ----------------------------------------------------------------------------

def test_group_collapse_hand_computed():
    # 1-D: group 0 = {0, 2} (mean 1), group 1 = {10, 11, 12} (mean 11), group 2 a singleton (left out).
    # within = mean(1, 1, 1, 0, 1) = 0.8 (per member); mean of the group means = 6 (unweighted; the
    # member-weighted 7 would give between 26); between = mean(25, 25) = 25.
    H = np.array([[0.0], [2.0], [10.0], [11.0], [12.0], [100.0]])
    out = group_collapse(H, np.array([0, 0, 1, 1, 1, 2]))
    assert out["ratio"] == pytest.approx(0.8 / 25, rel=1e-12)
    assert out["groups_used"] == 2 and out["contexts_used"] == 5


def test_group_collapse_collapsed_configuration_is_zero():
    rng = np.random.default_rng(2)
    points = rng.normal(size=(6, 8))
    groups = rng.permutation(np.repeat(np.arange(6), 4))
    out = group_collapse(points[groups], groups)
    assert out["ratio"] < 1e-20
    assert out["ratio_directions"] < 1e-20
    assert out["groups_used"] == 6 and out["contexts_used"] == 24


def test_group_collapse_pure_noise_follows_the_f_law():
    # Derivation. Rows i.i.d. N(0, I_d) in G groups of n. Σ_i ‖h_i − μ_g‖² ~ χ²_a with a = dG(n−1), and
    # n Σ_g ‖μ_g − μ̄‖² ~ χ²_b with b = d(G−1), independent (Cochran). With within = χ²_a/(Gn) and
    # between = χ²_b/(nG): ratio = χ²_a/χ²_b = (a/b) F(a, b), i.e. ratio ≈ G(n−1)/(G−1) (here 5),
    # NOT 1 (a group mean's variance is 1/n of a member's). The band is F's [1e-6, 1 − 1e-6] quantiles
    # (about ±8%), narrow enough to reject a G/(G−1) = 1.25 or n/(n−1) slip.
    G, n, d = 5, 5, 2000
    rng = np.random.default_rng(3)
    H = rng.normal(size=(G * n, d))
    groups = np.repeat(np.arange(G), n)
    a, b = d * G * (n - 1), d * (G - 1)
    low, high = (a / b) * stats.f.ppf([1e-6, 1 - 1e-6], a, b)
    out = group_collapse(H, groups)
    assert low < out["ratio"] < high
    # Unit rows are isotropic with covariance I/d, so within and between have the same expectations;
    # with d = 2000 normalising changes each row by ~1/sqrt(2d), so the same band applies (approximately).
    assert low < out["ratio_directions"] < high


def test_group_collapse_scaled_members_collapse_in_direction_only():
    rng = np.random.default_rng(4)
    directions = rng.normal(size=(5, 6))
    groups = np.repeat(np.arange(5), 4)
    scales = rng.uniform(0.5, 2.0, size=groups.size)
    out = group_collapse(scales[:, None] * directions[groups], groups)
    assert out["ratio"] > 0.01
    assert out["ratio_directions"] < 1e-20


def test_group_collapse_nan_with_fewer_than_two_groups_and_bad_input():
    H = np.arange(10.0).reshape(5, 2)
    out = group_collapse(H, np.array([0, 0, 0, 1, 2]))
    assert math.isnan(out["ratio"]) and math.isnan(out["ratio_directions"])
    assert out["groups_used"] == 1 and out["contexts_used"] == 3
    with pytest.raises(ShapeError, match="groups"):
        group_collapse(H, np.zeros(4, dtype=int))
    with pytest.raises(InputError, match="integer"):
        group_collapse(H, np.zeros(5))
    with pytest.raises(InputError, match="min_size"):
        group_collapse(H, np.zeros(5, dtype=int), min_size=0)


# -- group_subspaces ---------------------------------------------------------------------------

def brute_within_cos(H, groups):
    vals = []
    for g in np.unique(groups):
        rows = H[groups == g]
        for i in range(len(rows)):
            for j in range(i + 1, len(rows)):
                vals.append(abs(rows[i] @ rows[j]) / (np.linalg.norm(rows[i]) * np.linalg.norm(rows[j])))
    return float(np.mean(vals))


def test_group_subspaces_orthogonal_planted_planes():
    # Group g lives in a random 2-plane inside coordinates 3g..3g+2: orthogonal across groups.
    rng = np.random.default_rng(5)
    G, n, d = 4, 30, 12
    H = np.zeros((G * n, d))
    groups = np.repeat(np.arange(G), n)
    for g in range(G):
        basis, _ = np.linalg.qr(rng.normal(size=(3, 2)))
        H[groups == g, 3 * g:3 * g + 3] = rng.normal(size=(n, 2)) @ basis.T
    out = group_subspaces(H, groups, energy=0.999)
    assert out["within_dim"] == 2.0
    assert out["between_cos"] < 1e-12
    assert out["groups_used"] == G and out["pairs_between"] == G * (G - 1) // 2
    assert out["within_cos"] == pytest.approx(brute_within_cos(H, groups), rel=1e-12)
    # With a small energy only the top direction of each plane is kept (the top one holds < 90%).
    assert group_subspaces(H, groups, energy=0.3)["within_dim"] == 1.0
    # Sampled pairs: still orthogonal, and exactly max_pairs of them.
    sampled = group_subspaces(H, groups, energy=0.999, max_pairs=4)
    assert sampled["pairs_between"] == 4 and sampled["between_cos"] < 1e-12
    assert sampled["pairs_within"] == 4


def test_group_subspaces_shared_direction():
    # Every group spans {e_0, e_(g+1)}: orthogonal except for the shared e_0, smallest angle 0.
    rng = np.random.default_rng(6)
    G, n, d = 5, 20, 8
    groups = np.repeat(np.arange(G), n)
    H = np.zeros((G * n, d))
    H[:, 0] = rng.normal(size=G * n)
    H[np.arange(G * n), groups + 1] = rng.normal(size=G * n)
    out = group_subspaces(H, groups, energy=0.999)
    assert out["within_dim"] == 2.0
    assert out["between_cos"] == pytest.approx(1.0, abs=1e-10)


def test_group_subspaces_members_on_one_line():
    rng = np.random.default_rng(7)
    groups = np.repeat(np.arange(3), 5)
    H = rng.choice([-2.0, 0.5, 3.0], size=(15, 1)) * rng.normal(size=(3, 4))[groups]
    out = group_subspaces(H, groups)
    assert out["within_dim"] == 1.0
    assert out["within_cos"] == pytest.approx(1.0, rel=1e-12)


# -- logit_structure ---------------------------------------------------------------------------

@pytest.fixture
def mixed_data():
    """m = 5 contexts, V = 7, supports of sizes 3, 1, 2, 4, 2, non-uniform weights."""
    rng = np.random.default_rng(8)
    return random_data(rng, 5, 7, [3, 1, 2, 4, 2], weights=[0.1, 0.3, 0.2, 0.25, 0.15])


def w_star_like_logits(data, rng):
    """On each support log p̂ + a per-row shift; off the supports about −50."""
    L = -50.0 + 0.1 * rng.normal(size=(data.m, data.V))
    shift = rng.normal(size=data.m)
    for j, S in enumerate(data.supports):
        L[j, S] = np.log(data.probs[j, S].toarray().ravel()) + shift[j]
    return L


def brute_margin(L, data):
    return min(L[j, S].min() - np.delete(L[j], S).max() for j, S in enumerate(data.supports))


def test_logit_structure_w_star_like_logits(mixed_data):
    rng = np.random.default_rng(9)
    L = w_star_like_logits(mixed_data, rng)
    out = logit_structure(L, mixed_data)
    assert out["support_residual"] < 1e-13
    assert out["margin"] > 0
    assert out["margin"] == pytest.approx(brute_margin(L, mixed_data), rel=1e-12)
    assert out["margin_normalized"] == pytest.approx(out["margin"] / np.linalg.norm(L), rel=1e-12)

    # One off-support logit of context 3 raised 1 above its lowest support logit: margin −1 exactly.
    S = mixed_data.supports[3]
    v = next(v for v in range(mixed_data.V) if v not in S)
    L[3, v] = L[3, S].min() + 1.0
    out = logit_structure(L, mixed_data)
    assert out["margin"] == pytest.approx(-1.0, rel=1e-12)


def test_logit_structure_support_residual_brute_force(mixed_data):
    rng = np.random.default_rng(10)
    L = rng.normal(size=(mixed_data.m, mixed_data.V))
    num = den = 0.0
    for j, S in enumerate(mixed_data.supports):
        logp = np.log(mixed_data.probs[j, S].toarray().ravel())
        c = logp - logp.mean()
        r = (L[j, S] - L[j, S].mean()) - c
        num += mixed_data.weights[j] * np.sum(r**2)
        den += mixed_data.weights[j] * np.sum(c**2)
    out = logit_structure(L, mixed_data)
    assert out["support_residual"] == pytest.approx(math.sqrt(num / den), rel=1e-12)
    assert out["support_residual_abs"] == pytest.approx(math.sqrt(num), rel=1e-12)
    # Adding any per-row shift to L changes nothing on the supports (the softmax ignores it).
    shifted = logit_structure(L + rng.normal(size=(mixed_data.m, 1)), mixed_data)
    assert shifted["support_residual"] == pytest.approx(out["support_residual"], rel=1e-10)


def test_logit_structure_sparse_low_rank_split_brute_force(mixed_data):
    rng = np.random.default_rng(11)
    L = rng.normal(size=(mixed_data.m, mixed_data.V))
    L[:, -1] = L[:, 0]  # make L rank-deficient so that the ranks are not all trivially full
    mask = np.zeros(L.shape, dtype=bool)
    for j, S in enumerate(mixed_data.supports):
        mask[j, S] = True
    row_mean = np.where(mask, L, 0.0).sum(axis=1) / mask.sum(axis=1)
    S_dense = np.where(mask, L - row_mean[:, None], 0.0)
    R = L - S_dense

    def erank(A):
        s = np.linalg.svd(A, compute_uv=False)
        p = s[s > 0] / s.sum()
        return math.exp(-np.sum(p * np.log(p)))

    out = logit_structure(L, mixed_data)
    assert out["sparse_energy"] == pytest.approx(np.sum(S_dense**2) / np.sum(L**2), rel=1e-12)
    assert out["effective_rank"] == pytest.approx(erank(L), rel=1e-10)
    assert out["effective_rank_rest"] == pytest.approx(erank(R), rel=1e-10)
    smax = np.linalg.svd(R, compute_uv=False)[0]
    assert out["rank_rest"] == np.linalg.matrix_rank(R, tol=1e-6 * smax)


def test_logit_structure_one_hot_supports_have_no_residual():
    data = NTPData(np.eye(3), np.eye(3, 4))  # S_j = {j}, token 3 never follows
    L = np.random.default_rng(12).normal(size=(3, 4))
    out = logit_structure(L, data)
    assert math.isnan(out["support_residual"]) and math.isnan(out["support_residual_abs"])
    assert out["sparse_energy"] == 0.0  # a centred single logit is 0
    assert out["margin"] == pytest.approx(brute_margin(L, data), rel=1e-12)


def test_logit_structure_refuses_large_and_misshapen_logits(mixed_data):
    m, V = 40, 2**23  # 40 · 2^23 · 8 bytes = 2.5 GiB > 2 GiB
    huge = NTPData(np.eye(m), sp.csr_matrix((np.ones(m), (np.arange(m), np.arange(m))), shape=(m, V)))
    with pytest.raises(TooLargeError, match="2.5 GiB"):
        logit_structure(np.zeros((2, 2)), huge)  # refused before L is even looked at
    with pytest.raises(ShapeError, match=r"L: expected .* \(5, 7\)"):
        logit_structure(np.zeros((5, 6)), mixed_data)


# -- track_reference ---------------------------------------------------------------------------

def test_track_reference_one_hot_embeddings_match_compute_reference():
    rng = np.random.default_rng(13)
    m, V = 6, 5
    # The data's own embeddings are 2-D; the CURRENT embeddings H = I_m must be the ones used.
    data = random_data(rng, m, V, [2, 3, 1, 2, 2, 3], d=2)
    H = np.eye(m)
    ref = compute_reference(NTPData(H, data.probs, data.weights))
    assert np.linalg.norm(ref.w_star) > 0  # a non-trivial W* makes the cos_corrected check bite

    out = track_reference(H, ref.w_mm, data)
    assert out["compatible"] is True and out["separable"] is True
    assert out["svm_status"] == "optimal"
    assert out["cos_mm"] == pytest.approx(1.0, abs=1e-9)
    assert out["margin"] == pytest.approx(1 / np.linalg.norm(ref.w_mm), rel=1e-7)

    out = track_reference(H, ref.w_star + 10 * ref.w_mm, data)
    assert out["cos_corrected"] == pytest.approx(1.0, abs=1e-9)
    assert out["subspace_error"] < 1e-7  # P_F(W* + 10 W^mm) = W*
    assert out["cos_mm"] < 1 - 1e-6  # the W* part tilts the raw cosine


def test_track_reference_without_the_svm_keeps_w_star_and_reports_the_bound():
    rng = np.random.default_rng(13)
    data = random_data(rng, 6, 5, [2, 3, 1, 2, 2, 3], d=2)
    H = np.eye(6)
    ref = compute_reference(NTPData(H, data.probs, data.weights))
    W = ref.w_star + 10 * ref.w_mm + 0.1 * rng.normal(size=ref.w_mm.shape)
    full = track_reference(H, W, data)
    assert full["svm_status"] == "optimal" and full["svm_error_bound"] < 1e-5
    lean = track_reference(H, W, data, svm=False)
    assert lean["svm_status"] == "not run" and math.isnan(lean["svm_error_bound"])
    assert math.isnan(lean["cos_mm"]) and math.isnan(lean["cos_corrected"])
    # W*(H) needs no NTP-SVM: the subspace error is the same number either way, and not 0 for this W
    assert lean["subspace_error"] == pytest.approx(full["subspace_error"], rel=1e-12) and lean["subspace_error"] > 1e-3
    assert (lean["compatible"], lean["separable"]) == (True, True)


def test_track_reference_low_dimensional_embeddings_are_neither():
    # m = 30 contexts in d = 2 with supports of size 2 from V = 5 (10 possible pairs): by pigeonhole
    # one pair {u, v} is the support of >= 3 contexts. Checked below on this instance, independently:
    # (4) then asks (x_u − x_v)ᵀh_j = log(p̂_ju/p̂_jv) on 3+ contexts in R^2 (inconsistent: nonzero
    # least-squares residual), and (6a) forces x_u = x_v when those contexts span R^2, so a context
    # with u ∈ S_j, v ∉ S_j has margin 0 < 1: not separable.
    rng = np.random.default_rng(14)
    m, V, d = 30, 5, 2
    data = random_data(rng, m, V, [2] * m, d=d)
    H = rng.normal(size=(m, d))
    pairs = [tuple(S) for S in data.supports]
    u, v = max(set(pairs), key=pairs.count)
    J = [j for j, p in enumerate(pairs) if p == (u, v)]
    assert len(J) >= 3 and np.linalg.matrix_rank(H[J]) == d
    rhs = np.log(data.probs[J, u].toarray().ravel() / data.probs[J, v].toarray().ravel())
    _, residual, *_ = np.linalg.lstsq(H[J], rhs, rcond=None)
    assert residual[0] > 1e-6
    assert any((u in S) != (v in S) for S in data.supports)

    out = track_reference(H, rng.normal(size=(V, d)), data)
    assert out["compatible"] is False and out["separable"] is False
    for key in ("cos_mm", "cos_corrected", "subspace_error", "margin"):
        assert math.isnan(out[key])
    assert out["svm_status"] == "not run"


def test_track_reference_checks_shapes():
    rng = np.random.default_rng(15)
    data = random_data(rng, 4, 5, [2, 2, 1, 3])
    with pytest.raises(ShapeError, match="H: expected one embedding per context"):
        track_reference(np.eye(3), np.zeros((5, 3)), data)
    with pytest.raises(ShapeError, match=r"W: expected shape \(V, d\) = \(5, 4\)"):
        track_reference(np.eye(4), np.zeros((5, 3)), data)
