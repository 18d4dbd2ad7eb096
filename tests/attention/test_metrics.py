"""Tests of embgeo.attention.metrics: Lemma 4.1's slope, residual and table, rank tests, base rate,
per-level statistics (fast; each checks a formula or a known answer)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from embgeo.attention.metrics import (
    EXACT_RANK_TEST,
    base_rate_centre,
    lemma41_residual,
    lemma41_slope,
    lemma41_table,
    level_statistics,
    multiset_loss_floor,
    rank_test,
)
from embgeo.attention.model import OneLayerAttention
from embgeo.attention.theory import lemma41_alpha, lemma41_error_scale, lemma41_prediction
from embgeo.attention.train import embedding_update
from embgeo.errors import InputError, ShapeError


def test_lemma41_slope_is_eta0_over_2_at_large_d():
    """One GD step: E¹_s − E⁰_s ≈ (η0/2) α_s v (Lemma 4.1), checked on synthetic data.

    The paper's bound 11 η0 d^(-1/4) is not asserted: a zero update satisfies it at any practical d
    (lemma41_bound's docstring). The error terms are O(d^(-1/2)) (q_i = 1/T + O(d^(-1/2)),
    g = 1/2 + O(d^(-1/2))), so at d = 4096 the measured max_s ‖E¹_s − E⁰_s − (η0/2)α_s v‖ is ~4 % of
    the signal (asserted < 15 %), the slope of the projection on v against α is within 1 % of η0/2
    and the correlation > 0.999. A slope of η0 or η0/4 (or a missing 1/T) would give residuals
    ≥ 50 % of the signal and fail. At d = 16 the same residual is ~100 % of the signal (asserted
    > 30 %): the agreement is the large-d effect of the lemma, not an artefact of the data.
    """
    rng = np.random.default_rng(0)
    n, T, V, eta0 = 400, 32, 200, 2.0
    bias = rng.uniform(-1, 1, size=V)
    y = np.repeat([1, -1], n // 2)
    X = np.stack([rng.choice(V, size=T, p=(1 + 0.9 * yk * bias) / (1 + 0.9 * yk * bias).sum()) for yk in y])
    alpha = lemma41_alpha(X, y, V)
    signal = eta0 / 2 * np.abs(alpha).max()
    rel = {}
    for d in (16, 4096):
        model = OneLayerAttention(V, d, seed=1)
        dE, _ = embedding_update(model, X, y, eta0)
        err = np.linalg.norm(dE - lemma41_prediction(alpha, model.v, eta0), axis=1).max()
        rel[d] = err / signal
        if d == 4096:
            fit = lemma41_slope(dE, alpha, model.v)
            assert abs(fit["slope"] - eta0 / 2) < 0.01 * eta0 / 2, fit
            assert fit["corr"] > 0.999, fit
            assert abs(fit["intercept"]) < 0.01 * signal, fit
    assert rel[4096] < 0.15, rel
    assert rel[16] > 0.3, rel


def _first_order_update(V=300, d=1024, eta0=2.0, seed=0):
    """The first-order step-1 update (η0/2)α_s[(1 + a_s) v + b_s p⁰] of lemma41_error_scale, built directly."""
    rng = np.random.default_rng(seed)
    alpha = rng.uniform(-1e-3, 1e-3, size=V)
    E0 = rng.normal(size=(V, d)) / np.sqrt(d)
    p0 = rng.normal(size=d) / np.sqrt(d)
    v = rng.normal(size=d)
    v /= np.linalg.norm(v)
    a, b = E0 @ p0, E0 @ v
    dE = eta0 / 2 * alpha[:, None] * ((1 + a)[:, None] * v[None, :] + b[:, None] * p0[None, :])
    return dE, alpha, v, p0, eta0


def test_lemma41_residual_known_answers():
    """Exact prediction → 0; twice the prediction → 1; the wrong step size (slope η0) → 1/2."""
    rng = np.random.default_rng(1)
    alpha, v = rng.normal(size=20), rng.normal(size=7)
    P = lemma41_prediction(alpha, v, 3.0)
    res = lemma41_residual(P, alpha, v, 3.0)
    assert res["relative"] == pytest.approx(0.0, abs=1e-15) and res["max_residual_norm"] == pytest.approx(0.0)
    assert res["max_prediction_norm"] == pytest.approx(1.5 * np.abs(alpha).max() * np.linalg.norm(v))
    assert lemma41_residual(2 * P, alpha, v, 3.0)["relative"] == pytest.approx(1.0)
    assert lemma41_residual(P, alpha, v, 6.0)["relative"] == pytest.approx(0.5)  # reference slope η0, not η0/2
    assert lemma41_residual(P + np.outer(alpha, rng.normal(size=7)), alpha, v, 3.0)["relative_along_v"] > 0
    with pytest.raises(ShapeError):
        lemma41_residual(P[:, :3], alpha, v, 3.0)
    with pytest.raises(InputError, match="alpha"):
        lemma41_residual(P, np.zeros(20), v, 3.0)


@pytest.mark.parametrize("d", [256, 4096])
def test_lemma41_error_scale_matches_the_first_order_update(d):
    """The first-order update's residual is √2‖p⁰‖/√d relative to the prediction (RMS over 300 tokens: ±15 %)."""
    dE, alpha, v, p0, eta0 = _first_order_update(d=d)
    rel = lemma41_residual(dE, alpha, v, eta0)["relative"]
    scale = lemma41_error_scale(d, float(np.linalg.norm(p0)))
    assert scale == pytest.approx(np.sqrt(2) * np.linalg.norm(p0) / np.sqrt(d))
    assert rel == pytest.approx(scale, rel=0.15)
    assert abs(lemma41_slope(dE, alpha, v)["slope"] / (eta0 / 2) - 1) < np.linalg.norm(p0) / np.sqrt(d)




def test_lemma41_slope_accepts_torch_tensors_and_names_bad_shapes():
    dE, alpha, v, p0, eta0 = _first_order_update(V=50, d=64)
    from_numpy = lemma41_slope(dE, alpha, v)
    assert lemma41_slope(torch.as_tensor(dE), alpha, torch.tensor(v, requires_grad=True)) == from_numpy
    with pytest.raises(ShapeError, match="alpha"):
        lemma41_slope(dE, alpha[:-1], v)
    with pytest.raises(InputError, match="dE"):
        lemma41_slope(np.full_like(dE, np.nan), alpha, v)


def test_lemma41_table_one_row_per_d_against_the_definitions():
    dims = (64, 256)
    updates, vs, norms = [], [], []
    for d in dims:
        dE, alpha, v, p0, eta0 = _first_order_update(d=d)
        updates.append(dE)
        vs.append(v)
        norms.append(float(np.linalg.norm(p0)))
    rows = lemma41_table(dims, updates, alpha, vs, norms, eta0)
    assert rows["d"].tolist() == list(dims)
    last = rows.iloc[-1]
    assert last["slope_ratio"] == lemma41_slope(updates[-1], alpha, vs[-1])["slope"] / (eta0 / 2)
    assert last["relative_residual"] == lemma41_residual(updates[-1], alpha, vs[-1], eta0)["relative"]
    assert last["first_order"] == lemma41_error_scale(256, norms[-1])
    assert last["slope_bound"] == pytest.approx(norms[-1] / 16)
    assert last["paper_bound"] == pytest.approx(11 * eta0 / 4)  # 11·η0·256^(−1/4)
    assert last["m_eff"] == pytest.approx(np.sum(alpha**2) ** 2 / np.sum(alpha**4))


def test_rank_test_exact_for_few_tokens_and_nan_when_undefined():
    x = np.arange(5.0)
    few = rank_test(x, x)
    assert few.exact and few.rho == pytest.approx(1.0) and few.pvalue == pytest.approx(1 / 120)  # 1 of 5! pairings
    assert rank_test(x, -x).rho == pytest.approx(-1.0) and rank_test(x, -x).pvalue == pytest.approx(1.0)
    many = rank_test(np.arange(50.0), np.arange(50.0))
    assert not many.exact and many.n == 50 and many.rho == pytest.approx(1.0) and many.pvalue < 1e-30
    assert EXACT_RANK_TEST == 8 and rank_test(np.arange(8.0), np.arange(8.0)).exact
    flat = rank_test(np.ones(10), np.arange(10.0))
    assert np.isnan(flat.rho) and np.isnan(flat.pvalue)
    with pytest.raises(ShapeError, match="x, y"):
        rank_test(np.arange(5.0), np.arange(6.0))


def test_base_rate_centre():
    X = np.array([[1, 2, 2], [3, 0, 0]])
    y = np.array([1, -1])
    assert base_rate_centre(X, y, 4) == pytest.approx((3 - 3) / 6)
    assert base_rate_centre(X, y, 4, pad_id=0) == pytest.approx((3 - 1) / 4)


def test_level_statistics_known_values():
    """Two levels (δ = 0.4, 0.1: centres 0.2, 0.8), two tokens per level and sign, four irrelevant tokens."""
    deltas = np.array([0.4, 0.1])
    levels = np.array([0, 0, 0, 0, 1, 1, -1, -1, 2, 2, -2, -2])
    post = np.array([0.0, 0.0, 0.0, 0.0, 0.2, 0.2, -0.2, -0.2, 0.8, 0.8, -0.8, -0.8])
    Ep = np.array([0.1, -0.1, 0.2, -0.2, 1.0, 1.2, 1.1, 0.9, 3.0, 3.2, 2.8, 3.0])
    Ev = np.array([0.0, 0.1, -0.1, 0.0, 0.5, 0.6, -0.5, 0.4, 2.0, 2.0, -2.0, -2.0])  # one level-1 sign wrong
    st = level_statistics(Ep, Ev, post, levels, deltas)
    assert isinstance(st.table, pd.DataFrame) and st.cluster == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(st.median_p, [1.05, 3.0])
    assert st.median_p_irrelevant == 0.0 and st.rising == 1.0
    np.testing.assert_allclose(st.sign_fraction, [0.75, 1.0])
    assert st.wrong_sign.tolist() == [7]
    assert st.irrelevant_bound == pytest.approx(0.2 / 0.5)  # (1 − 2δ_1) / median of 0.2, 0.2, 0.2, 0.2, 0.8 × 4
    irr_v, lev_v = st.abs_medians["v"]
    assert irr_v == pytest.approx(0.05) and lev_v == pytest.approx(1.3)
    irr_p, lev_p = st.abs_medians["p"]  # about the vertex, the irrelevant median 0.0
    assert irr_p == pytest.approx(0.15) and lev_p == pytest.approx(2.0)
    # the values are read from the irrelevant tokens' median (0 here): a common offset (a bias of f) changes nothing
    shifted = level_statistics(Ep, Ev + 5.0, post, levels, deltas)
    assert st.median_v_irrelevant == 0.0 and shifted.median_v_irrelevant == pytest.approx(5.0)
    np.testing.assert_allclose(shifted.sign_fraction, st.sign_fraction)
    assert shifted.wrong_sign.tolist() == [7]
    np.testing.assert_allclose(shifted.abs_medians["v"], st.abs_medians["v"])
    # but moving the irrelevant tokens alone does: they no longer sit at the reference of the level tokens
    apart = level_statistics(Ep, Ev + np.where(levels == 0, 0.55, 0.0), post, levels, deltas)
    assert apart.median_v_irrelevant == pytest.approx(0.55)
    assert apart.wrong_sign.tolist() == [4]  # read from 0.55, token 4 (0.5) turns negative and token 7 (0.4) right
    lifted = level_statistics(Ep + np.where(levels == 0, 1.1, 0.0), Ev, post, levels, deltas)
    assert lifted.median_p_irrelevant == pytest.approx(1.1) and lifted.rising == pytest.approx(1 / 2)
    assert lifted.abs_medians["p"][1] == pytest.approx(0.95)  # median |Ep − 1.1| over the level tokens
    with pytest.raises(ShapeError, match="levels"):
        level_statistics(Ep, Ev, post, levels[:-1], deltas)


def test_multiset_loss_floor_against_per_group_minimisation_and_training():
    """The floor is Σ over groups of one token multiset of min_f Σ logistic losses, over N: checked by a numerical
    minimisation per group, by its invariances, and as a bound a trained model cannot beat."""
    from scipy.optimize import minimize_scalar

    P = 9
    X = np.array([[1, 2, P], [2, 1, P], [1, 2, P],  # {1, 2}: two positive, one negative (order does not matter)
                  [3, 3, 4], [3, 4, 3],  # {3, 3, 4}: one each
                  [3, 4, 4],  # {3, 4, 4}: another multiset (a repeat counts), alone
                  [5, P, P], [5, 6, P]])  # different multisets, opposite labels: no floor
    y = np.array([1, 1, -1, 1, -1, -1, 1, -1])
    floor, conflicted = multiset_loss_floor(X, y, 10, pad_id=P)
    expected = 0.0
    for counts in ((2, 1), (1, 1)):
        res = minimize_scalar(lambda f, c=counts: c[0] * np.logaddexp(0, -f) + c[1] * np.logaddexp(0, f),
                              bounds=(-20, 20), method="bounded", options={"xatol": 1e-10})
        expected += res.fun
    assert conflicted == 5
    assert floor == pytest.approx(expected / len(y), rel=1e-8)
    # padding placed elsewhere and rows shuffled: the same floor; labels made consistent: none
    perm = np.random.default_rng(0).permutation(len(y))
    assert multiset_loss_floor(X[perm][:, ::-1], y[perm], 10, pad_id=P)[0] == pytest.approx(floor, rel=1e-12)
    assert multiset_loss_floor(X, np.array([1, 1, 1, 1, 1, -1, 1, -1]), 10, pad_id=P) == (0.0, 0)
    # without a pad id the pad is a token: [5, P, P] and [5, 6, P] still differ, and nothing else changes
    assert multiset_loss_floor(X, y, 10)[0] == pytest.approx(floor, rel=1e-12)
    # a model of the multiset cannot go below it; trained long enough, it gets close
    model = OneLayerAttention(10, 16, seed=0, train_v=True)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(300):
        opt.zero_grad()
        loss = model.loss(X, y, pad_id=P)
        loss.backward()
        opt.step()
    with torch.no_grad():
        final = float(model.loss(X, y, pad_id=P))
    assert floor - 1e-9 <= final < floor + 0.01
    with pytest.raises(InputError, match="labels"):
        multiset_loss_floor(X, np.zeros(len(y)), 10, pad_id=P)
    with pytest.raises(ShapeError):
        multiset_loss_floor(X, y[:3], 10, pad_id=P)
    with pytest.raises(ShapeError):
        multiset_loss_floor(X[:0], y[:0], 10, pad_id=P)
    with pytest.raises(InputError, match="integer"):
        multiset_loss_floor(X + 0.5, y, 10, pad_id=P)
