"""Tests of embgeo.attention.model and embgeo.attention.train (fast; each checks a formula)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embgeo.attention.data import signed_frequency
from embgeo.attention.model import (
    OneLayerAttention,
    TwoLayerAttention,
    logistic_loss,
    masked_softmax,
    one_layer_forward_naive,
    one_layer_gradients,
    padding_mask,
    prepare_batch,
)
from embgeo.attention.train import (
    embedding_update,
    lemma41_alpha,
    lemma41_bound,
    lemma41_error_scale,
    lemma41_prediction,
    lemma41_residual,
    lemma41_slope,
    one_step,
    train_adamw,
    two_stage,
)
from embgeo.errors import InputError, ShapeError


def _data(n=12, T=7, V=9, seed=0, padded=True):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, V, size=(n, T))
    y = rng.choice([-1, 1], size=n)
    lengths = rng.integers(2, T + 1, size=n) if padded else np.full(n, T)
    lengths[0] = T
    mask = padding_mask(lengths, T)
    X[~mask.numpy()] = 10_000  # garbage ids at pads must be ignored
    return X, y, mask


def _autograd_naive(model, X, y, mask):
    E = model.E.detach().clone().requires_grad_(True)
    p = model.p.detach().clone().requires_grad_(True)
    f = one_layer_forward_naive(E, p, model.v, X, mask)
    loss = logistic_loss(f, torch.as_tensor(y, dtype=E.dtype))
    gE, gp = torch.autograd.grad(loss, (E, p))
    return loss, gE, gp


def test_fast_forward_matches_naive_with_padding():
    X, y, mask = _data()
    model = OneLayerAttention(9, 16, seed=1)
    with torch.no_grad():
        model.E.mul_(3.0)  # larger scores: non-trivial softmax
    f_fast = model(X, mask)
    f_naive = one_layer_forward_naive(model.E, model.p, model.v, X, mask)
    torch.testing.assert_close(f_fast, f_naive, rtol=1e-12, atol=1e-12)
    # explicit formula on one padded row: Σ_t softmax_t(⟨E_x, p⟩) ⟨E_x, v⟩ over its real tokens only
    b = int(np.argmin(mask.sum(1).numpy()))
    toks = torch.as_tensor(X[b][mask[b].numpy()])
    a = model.E[toks] @ model.p
    expected = (torch.softmax(a, 0) * (model.E[toks] @ model.v)).sum()
    torch.testing.assert_close(f_fast[b], expected, rtol=1e-12, atol=1e-12)


def test_masks_exclude_pads_and_validate():
    X, y, mask = _data()
    model = OneLayerAttention(9, 8, seed=0)
    q = model.attention(X, mask)
    assert torch.all(q[~mask] == 0)
    torch.testing.assert_close(q.sum(1), torch.ones(len(X), dtype=q.dtype))
    # changing the ids at pads changes nothing
    X2 = X.copy()
    X2[~mask.numpy()] = 3
    torch.testing.assert_close(model(X2, mask), model(X, mask))
    two = TwoLayerAttention(9, 8, seed=0)
    torch.testing.assert_close(two(X2, mask), two(X, mask))
    with pytest.raises(InputError, match="no real token"):
        model(X, torch.zeros(X.shape, dtype=torch.bool))
    with pytest.raises(InputError, match="token ids"):
        model(X)  # garbage ids are real positions without the mask
    with pytest.raises(ShapeError):
        model(X[0])
    with pytest.raises(InputError, match="labels"):
        model.loss(X, np.zeros(len(X)), mask)


def test_gradients_match_autograd_of_naive():
    X, y, mask = _data(seed=3)
    model = OneLayerAttention(9, 16, seed=2)
    with torch.no_grad():
        model.E.mul_(2.0)
        model.p.mul_(3.0)
    loss, gE, gp = _autograd_naive(model, X, y, mask)
    g = one_layer_gradients(model.E.detach(), model.p.detach(), model.v, X, y, mask)
    torch.testing.assert_close(g["loss"], loss.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g["E"], gE, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(g["p"], gp, rtol=1e-10, atol=1e-13)
    # Lemma A.1's matrix form: ∇_p L = −Ê[g 𝐄_Xᵀ (Diag(q) − q qᵀ) γ],  γ_i = y E_{x_i}ᵀ v
    Xc, m = prepare_batch(X, mask, 9)
    yt = torch.as_tensor(y, dtype=torch.float64)
    gp_paper = torch.zeros(16, dtype=torch.float64)
    for k in range(len(Xc)):
        EX = model.E.detach()[Xc[k][m[k]]]
        q = torch.softmax(EX @ model.p.detach(), 0)
        gam = yt[k] * (EX @ model.v)
        f = (q * (EX @ model.v)).sum()
        gk = torch.sigmoid(-yt[k] * f)
        gp_paper -= gk * EX.T @ ((torch.diag(q) - torch.outer(q, q)) @ gam) / len(Xc)
    torch.testing.assert_close(g["p"], gp_paper, rtol=1e-10, atol=1e-13)


def test_v_gradient_and_autograd_through_fast_path():
    X, y, mask = _data(seed=4)
    model = OneLayerAttention(9, 6, seed=5, train_v=True)
    loss = model.loss(X, y, mask)
    loss.backward()
    g = one_layer_gradients(model.E.detach(), model.p.detach(), model.v.detach(), X, y, mask, with_v=True)
    for name in ("E", "p", "v"):
        torch.testing.assert_close(g[name], getattr(model, name).grad, rtol=1e-10, atol=1e-13)


def test_one_step_update_matches_autograd():
    X, y, mask = _data(seed=6)
    model = OneLayerAttention(9, 16, seed=7)
    E0, p0 = model.E.detach().clone(), model.p.detach().clone()
    _, gE, gp = _autograd_naive(model, X, y, mask)
    eta0 = 3.5
    dE, dp = embedding_update(model, X, y, eta0, mask)
    torch.testing.assert_close(model.E.detach(), E0)  # embedding_update leaves the model alone
    np.testing.assert_allclose(dE, (-eta0 * gE).numpy(), rtol=1e-10, atol=1e-13)
    out = one_step(model, X, y, eta0, mask)
    torch.testing.assert_close(model.E.detach(), E0 - eta0 * gE, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(model.p.detach(), p0 - eta0 * gp, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(out["dp"].numpy(), dp, rtol=1e-10, atol=1e-13)
    model2 = OneLayerAttention(9, 16, seed=7)
    one_step(model2, X, y, eta0, mask, keep_p0=True)
    torch.testing.assert_close(model2.p.detach(), p0)


def test_lemma41_alpha_eq3_and_padding():
    X = np.array([[0, 1, 1], [2, 1, 0]])
    y = np.array([1, -1])
    alpha = lemma41_alpha(X, y, 4)
    np.testing.assert_allclose(alpha, np.array([1 - 1, 2 - 1, -1, 0]) / 6)  # (1/(nT)) Σ y Σ_i 1{x_i=s}
    np.testing.assert_allclose(alpha, signed_frequency(X, y, 4))  # equal lengths: eq. (3) of data.py
    mask = torch.tensor([[True, True, False], [True, True, True]])
    alpha = lemma41_alpha(X, y, 4, mask)
    np.testing.assert_allclose(alpha, np.array([1 / 2 - 1 / 3, 1 / 2 - 1 / 3, -1 / 3, 0]) / 2)


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


def test_lemma41_bound_formula_and_why_it_is_not_a_test():
    """eq. (7): 11 η0 d^(-1/4); the prediction itself (|α_s| ≤ 1) is below it for d < 22⁴."""
    assert lemma41_bound(2.0, 16) == pytest.approx(11.0)
    assert lemma41_bound(1.0, 22**4 - 1) > 0.5  # a zero update's error, (η0/2)·max|α_s| ≤ η0/2
    with pytest.raises(InputError, match="eta0"):
        lemma41_bound(0.0, 16)


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


def test_two_stage_trace_and_gd_on_p():
    X, y, mask = _data(n=10, T=5, V=6, seed=8, padded=False)
    model = OneLayerAttention(6, 32, seed=3)
    E0 = model.E.detach().clone()
    ref = OneLayerAttention(6, 32, seed=3)
    one_step(ref, X, y, 20.0, mask)
    p_hat = np.ones(32)
    trace = two_stage(model, X, y, 20.0, steps=30, lr=0.5, mask=mask, p_hat=p_hat, record_every=10)
    assert list(trace["step"]) == [0, 10, 20, 30]
    torch.testing.assert_close(model.E.detach(), ref.E.detach())  # E frozen at E¹
    assert not torch.allclose(model.E.detach(), E0)
    assert trace["norm_p"][0] == pytest.approx(float(ref.p.detach().norm()))
    assert np.all(np.diff(trace["loss"]) < 0)  # small GD steps decrease the loss
    assert trace["norm_p"][-1] == pytest.approx(float(model.p.detach().norm()))
    cos = float(model.p.detach() @ torch.ones(32, dtype=torch.float64) / (model.p.detach().norm() * np.sqrt(32)))
    assert trace["cos_p_hat"][-1] == pytest.approx(cos)
    # manual GD on p from p¹ reproduces the final p
    p = ref.p.detach().clone()
    for _ in range(30):
        p -= 0.5 * one_layer_gradients(ref.E.detach(), p, ref.v, X, y, mask)["p"]
    torch.testing.assert_close(model.p.detach(), p)
    # normalized GD moves p by exactly lr per step
    m2 = OneLayerAttention(6, 32, seed=3)
    t2 = two_stage(m2, X, y, 20.0, steps=1, lr=0.25, mask=mask, normalized=True)
    assert float((m2.p.detach() - ref.p.detach()).norm()) == pytest.approx(0.25)
    assert t2.W.shape == (6, 32)


def test_two_layer_matches_explicit_formula():
    X, y, mask = _data(seed=9)
    model = TwoLayerAttention(9, 8, seed=4)
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-0.2, 0.2)
    f = model(X, mask)
    Xc, m = prepare_batch(X, mask, 9)
    for k in range(len(Xc)):
        EX = model.E[Xc[k][m[k]]]                                     # (T_k, d): real tokens only
        H = torch.softmax(EX @ EX.T, dim=1) @ EX + EX
        mu, var = H.mean(1, keepdim=True), H.var(1, unbiased=False, keepdim=True)
        Ep = (H - mu) / torch.sqrt(var + 1e-5) * model.norm.weight + model.norm.bias
        expected = (torch.softmax(Ep @ model.p, 0) * (Ep @ model.v)).sum()
        torch.testing.assert_close(f[k], expected, rtol=1e-10, atol=1e-12)
    q = model.attention(X, mask)
    assert torch.all(q[~mask] == 0)
    assert masked_softmax(torch.zeros(2, 3), torch.tensor([[1, 0, 1], [1, 1, 1]]).bool())[0, 1] == 0


@pytest.mark.parametrize("cls", [OneLayerAttention, TwoLayerAttention])
def test_adamw_resume_gives_same_weights(tmp_path, cls):
    X, y, mask = _data(n=40, T=6, V=9, seed=10)
    kw = dict(lr=0.01, weight_decay=1e-4, batch_size=16, milestones=(2, 3), seed=5, progress=False)
    full = cls(9, 8, seed=0, train_v=True)
    t_full = train_adamw(full, X, y, 4, mask=mask, **kw)
    ck = tmp_path / "run.pt"
    part = cls(9, 8, seed=0, train_v=True)
    train_adamw(part, X, y, 2, mask=mask, checkpoint=ck, **kw)
    assert ck.exists() and not (tmp_path / "run.pt.tmp").exists()
    resumed = cls(9, 8, seed=0, train_v=True)  # fresh weights: everything must come from the checkpoint
    t_res = train_adamw(resumed, X, y, 4, mask=mask, checkpoint=ck, **kw)
    assert t_res.meta["resumed_from_epoch"] == 2
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    np.testing.assert_array_equal(t_full["loss"], t_res["loss"])
    # lr schedule: ×0.1 after epochs 2 and 3
    np.testing.assert_allclose(t_full["lr"], [0.01, 0.01, 0.001, 0.0001, 0.0001])
    assert list(t_full["step"]) == [0, 3, 6, 9, 12]
    assert t_full["loss"][-1] < t_full["loss"][0]
    with pytest.raises(InputError, match="other settings"):
        train_adamw(cls(9, 8, seed=0, train_v=True), X, y, 4, mask=mask, checkpoint=ck, **{**kw, "seed": 6})


def test_adamw_is_seeded_and_trains_fixed_v_only_when_asked():
    X, y, mask = _data(n=20, T=5, V=9, seed=11)
    a, b = OneLayerAttention(9, 4, seed=0), OneLayerAttention(9, 4, seed=0)
    v0 = a.v.clone()
    train_adamw(a, X, y, 2, mask=mask, batch_size=8, seed=1, progress=False)
    train_adamw(b, X, y, 2, mask=mask, batch_size=8, seed=1, progress=False)
    torch.testing.assert_close(a.E, b.E, rtol=0, atol=0)
    torch.testing.assert_close(a.v, v0, rtol=0, atol=0)
