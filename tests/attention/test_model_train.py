"""Tests of embgeo.attention.model and embgeo.attention.train (fast; each checks a formula)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from embgeo.attention.model import (
    OneLayerAttention,
    TwoLayerAttention,
    logistic_loss,
    masked_softmax,
    one_layer_forward_naive,
    one_layer_gradients,
    prepare_batch,
)
from embgeo.attention.train import (
    TrainingInterrupted,
    drop_padding,
    embedding_update,
    minibatch_loss,
    one_step,
    predict,
    train_adamw,
    two_stage,
)
from embgeo.errors import InputError, ShapeError

PAD = 10_000  # a pad id outside the vocabulary: pads must be ignored, never gathered


def _data(n=12, T=7, V=9, seed=0, padded=True):
    """X (n, T) padded with PAD at the end of each row, y (n,), and the real-token mask (for the tests only)."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, V, size=(n, T))
    y = rng.choice([-1, 1], size=n)
    lengths = rng.integers(2, T + 1, size=n) if padded else np.full(n, T)
    lengths[0] = T
    real = np.arange(T)[None, :] < lengths[:, None]
    X[~real] = PAD
    return X, y, real


def _autograd_naive(model, X, y):
    E = model.E.detach().clone().requires_grad_(True)
    p = model.p.detach().clone().requires_grad_(True)
    f = one_layer_forward_naive(E, p, model.v, X, pad_id=PAD)
    loss = logistic_loss(f, torch.as_tensor(y, dtype=E.dtype))
    gE, gp = torch.autograd.grad(loss, (E, p))
    return loss, gE, gp


def test_fast_forward_matches_naive_with_padding():
    X, y, real = _data()
    model = OneLayerAttention(9, 16, seed=1)
    with torch.no_grad():
        model.E.mul_(3.0)  # larger scores: non-trivial softmax
    f_fast = model(X, pad_id=PAD)
    f_naive = one_layer_forward_naive(model.E, model.p, model.v, X, pad_id=PAD)
    torch.testing.assert_close(f_fast, f_naive, rtol=1e-12, atol=1e-12)
    # explicit formula on one padded row: Σ_t softmax_t(⟨E_x, p⟩) ⟨E_x, v⟩ over its real tokens only
    b = int(np.argmin(real.sum(1)))
    toks = torch.as_tensor(X[b][real[b]])
    a = model.E[toks] @ model.p
    expected = (torch.softmax(a, 0) * (model.E[toks] @ model.v)).sum()
    torch.testing.assert_close(f_fast[b], expected, rtol=1e-12, atol=1e-12)


def test_padding_is_excluded_and_validated():
    X, y, real = _data(V=8)  # id 8 of the 9 is free for padding
    model = OneLayerAttention(9, 8, seed=0)
    q = model.attention(X, pad_id=PAD)
    assert torch.all(q[~torch.as_tensor(real)] == 0)
    torch.testing.assert_close(q.sum(1), torch.ones(len(X), dtype=q.dtype))
    # another pad id, inside the vocabulary (an id that occurs nowhere else), gives the same outputs
    X2 = X.copy()
    X2[~real] = 8
    assert not np.isin(8, X[real])
    torch.testing.assert_close(model(X2, pad_id=8), model(X, pad_id=PAD))
    two = TwoLayerAttention(9, 8, seed=0)
    torch.testing.assert_close(two(X2, pad_id=8), two(X, pad_id=PAD))
    with pytest.raises(InputError, match=r"X: sequence 0 contains only padding \(pad_id=3\)"):
        model(np.full((2, 3), 3), pad_id=3)
    with pytest.raises(InputError, match="token ids"):
        model(X)  # without pad_id the pads are ids outside the vocabulary
    with pytest.raises(InputError, match="pad_id"):
        model(X, pad_id=1.5)
    with pytest.raises(InputError, match="pad_id"):
        one_layer_gradients(model.E, model.p, model.v, X, y, pad_id="0")
    with pytest.raises(ShapeError):
        model(X[0])
    with pytest.raises(InputError, match="labels"):
        model.loss(X, np.zeros(len(X)), pad_id=PAD)


def test_gradients_match_autograd_of_naive():
    X, y, _ = _data(seed=3)
    model = OneLayerAttention(9, 16, seed=2)
    with torch.no_grad():
        model.E.mul_(2.0)
        model.p.mul_(3.0)
    loss, gE, gp = _autograd_naive(model, X, y)
    g = one_layer_gradients(model.E.detach(), model.p.detach(), model.v, X, y, pad_id=PAD)
    torch.testing.assert_close(g["loss"], loss.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g["E"], gE, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(g["p"], gp, rtol=1e-10, atol=1e-13)
    # Lemma A.1's matrix form: ∇_p L = −Ê[g 𝐄_Xᵀ (Diag(q) − q qᵀ) γ],  γ_i = y E_{x_i}ᵀ v
    Xc, m = prepare_batch(X, PAD, 9)
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
    X, y, _ = _data(seed=4)
    model = OneLayerAttention(9, 6, seed=5, train_v=True)
    loss = model.loss(X, y, pad_id=PAD)
    loss.backward()
    g = one_layer_gradients(model.E.detach(), model.p.detach(), model.v.detach(), X, y, pad_id=PAD, with_v=True)
    for name in ("E", "p", "v"):
        torch.testing.assert_close(g[name], getattr(model, name).grad, rtol=1e-10, atol=1e-13)


def test_one_step_update_matches_autograd():
    X, y, _ = _data(seed=6)
    model = OneLayerAttention(9, 16, seed=7)
    E0, p0 = model.E.detach().clone(), model.p.detach().clone()
    _, gE, gp = _autograd_naive(model, X, y)
    eta0 = 3.5
    dE, dp = embedding_update(model, X, y, eta0, pad_id=PAD)
    torch.testing.assert_close(model.E.detach(), E0)  # embedding_update leaves the model alone
    np.testing.assert_allclose(dE, (-eta0 * gE).numpy(), rtol=1e-10, atol=1e-13)
    out = one_step(model, X, y, eta0, pad_id=PAD)
    torch.testing.assert_close(model.E.detach(), E0 - eta0 * gE, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(model.p.detach(), p0 - eta0 * gp, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(out["dp"].numpy(), dp, rtol=1e-10, atol=1e-13)
    model2 = OneLayerAttention(9, 16, seed=7)
    one_step(model2, X, y, eta0, pad_id=PAD, keep_p0=True)
    torch.testing.assert_close(model2.p.detach(), p0)


def test_two_stage_trace_and_gd_on_p():
    X, y, _ = _data(n=10, T=5, V=6, seed=8)
    model = OneLayerAttention(6, 32, seed=3)
    E0 = model.E.detach().clone()
    ref = OneLayerAttention(6, 32, seed=3)
    one_step(ref, X, y, 20.0, pad_id=PAD)
    p_hat = np.ones(32)
    trace = two_stage(model, X, y, 20.0, steps=30, lr=0.5, pad_id=PAD, p_hat=p_hat, record_every=10)
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
        p -= 0.5 * one_layer_gradients(ref.E.detach(), p, ref.v, X, y, pad_id=PAD)["p"]
    torch.testing.assert_close(model.p.detach(), p)
    # normalized GD moves p by exactly lr per step
    m2 = OneLayerAttention(6, 32, seed=3)
    t2 = two_stage(m2, X, y, 20.0, steps=1, lr=0.25, pad_id=PAD, normalized=True)
    assert float((m2.p.detach() - ref.p.detach()).norm()) == pytest.approx(0.25)
    assert t2.W.shape == (6, 32)


def test_two_layer_matches_explicit_formula():
    X, y, real = _data(seed=9)
    model = TwoLayerAttention(9, 8, seed=4)
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-0.2, 0.2)
    f = model(X, pad_id=PAD)
    Xc, m = prepare_batch(X, PAD, 9)
    for k in range(len(Xc)):
        EX = model.E[Xc[k][m[k]]]                                     # (T_k, d): real tokens only
        H = torch.softmax(EX @ EX.T, dim=1) @ EX + EX
        mu, var = H.mean(1, keepdim=True), H.var(1, unbiased=False, keepdim=True)
        Ep = (H - mu) / torch.sqrt(var + 1e-5) * model.norm.weight + model.norm.bias
        expected = (torch.softmax(Ep @ model.p, 0) * (Ep @ model.v)).sum()
        torch.testing.assert_close(f[k], expected, rtol=1e-10, atol=1e-12)
    q = model.attention(X, pad_id=PAD)
    assert torch.all(q[~torch.as_tensor(real)] == 0)
    assert masked_softmax(torch.zeros(2, 3), torch.tensor([[1, 0, 1], [1, 1, 1]]).bool())[0, 1] == 0


@pytest.mark.parametrize("cls", [OneLayerAttention, TwoLayerAttention])
def test_cutting_padding_keeps_outputs_loss_and_gradients(cls):
    X, y, real = _data(n=30, T=9, V=9, seed=11)
    X[:, -2:] = PAD  # no row uses the last two columns: they are dropped
    X[:, 3] = np.where(real[:, 3], PAD, X[:, 3])  # a column of padding inside the rows (no positions: still dropped)
    Xt = torch.as_tensor(X)
    cut = drop_padding(Xt, PAD)
    assert cut.shape == (30, 6) and drop_padding(cut, PAD) is cut and drop_padding(Xt, None) is Xt
    model = cls(9, 8, seed=2, train_v=True)
    f = model(Xt, pad_id=PAD)
    torch.testing.assert_close(model(cut, pad_id=PAD), f, rtol=1e-12, atol=1e-12)
    # predict takes the rows shortest first in chunks of 7 and gives f back in the order of X
    torch.testing.assert_close(predict(model, Xt, PAD, chunk=7), f, rtol=1e-12, atol=1e-12)
    full = torch.as_tensor(_data(n=11, T=5, V=9, seed=3, padded=False)[0])
    torch.testing.assert_close(predict(model, full, None, chunk=4), model(full), rtol=1e-12, atol=1e-12)
    yt = torch.as_tensor(y, dtype=torch.float64)
    grads = []
    for groups in (1, 4, 30, 50):
        model.zero_grad()
        loss = minibatch_loss(model, Xt, yt, PAD, groups)
        loss.backward()
        torch.testing.assert_close(loss, model.loss(Xt, yt, pad_id=PAD), rtol=1e-12, atol=0)
        grads.append([q.grad.clone() for q in model.parameters() if q.requires_grad])
    for other in grads[1:]:
        for a, b in zip(grads[0], other, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-14)
    # a negative control: dropping a real token's column is not the same model output
    assert not torch.allclose(model(Xt[:, 1:], pad_id=PAD), f)


@pytest.mark.parametrize("cls", [OneLayerAttention, TwoLayerAttention])
def test_adamw_resume_gives_same_weights(tmp_path, cls):
    X, y, _ = _data(n=40, T=6, V=9, seed=10)
    kw = dict(lr=0.01, weight_decay=1e-4, batch_size=16, milestones=(2, 3), seed=5, progress=False)
    full = cls(9, 8, seed=0, train_v=True)
    t_full = train_adamw(full, X, y, 4, pad_id=PAD, **kw)
    ck = tmp_path / "run.pt"
    part = cls(9, 8, seed=0, train_v=True)
    train_adamw(part, X, y, 2, pad_id=PAD, checkpoint=ck, **kw)
    assert ck.exists() and not (tmp_path / "run.pt.tmp").exists()
    resumed = cls(9, 8, seed=0, train_v=True)  # fresh weights: everything must come from the checkpoint
    t_res = train_adamw(resumed, X, y, 4, pad_id=PAD, checkpoint=ck, **kw)
    assert t_res.meta["resumed_from_epoch"] == 2
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    np.testing.assert_array_equal(t_full["loss"], t_res["loss"])
    # lr schedule: ×0.1 after epochs 2 and 3
    np.testing.assert_allclose(t_full["lr"], [0.01, 0.01, 0.001, 0.0001, 0.0001])
    assert list(t_full["step"]) == [0, 3, 6, 9, 12]
    assert t_full["loss"][-1] < t_full["loss"][0]
    with pytest.raises(InputError, match="other settings"):
        train_adamw(cls(9, 8, seed=0, train_v=True), X, y, 4, pad_id=PAD, checkpoint=ck, **{**kw, "seed": 6})


def test_adamw_is_seeded_and_trains_fixed_v_only_when_asked():
    X, y, _ = _data(n=20, T=5, V=9, seed=11)
    a, b = OneLayerAttention(9, 4, seed=0), OneLayerAttention(9, 4, seed=0)
    v0 = a.v.clone()
    train_adamw(a, X, y, 2, pad_id=PAD, batch_size=8, seed=1, progress=False)
    train_adamw(b, X, y, 2, pad_id=PAD, batch_size=8, seed=1, progress=False)
    torch.testing.assert_close(a.E, b.E, rtol=0, atol=0)
    torch.testing.assert_close(a.v, v0, rtol=0, atol=0)


def _subnormal_survives() -> bool:
    """Whether a float32 subnormal survives arithmetic (it is flushed to 0 under FTZ/DAZ)."""
    return float(torch.tensor([1e-39], dtype=torch.float32) * 2.0) != 0.0


def test_flush_denormals_inside_the_block_only():
    """flush_denormals flushes subnormal floats inside the block (where the CPU can) and not after: the attention
    trainer's steps ran 2-3x slower on them (core/threads.py)."""
    from embgeo.core.threads import flush_denormals

    assert _subnormal_survives()  # torch's default (the negative control)
    with flush_denormals() as flushed:
        if not flushed:
            pytest.skip("this CPU cannot flush subnormal floats")
        assert not _subnormal_survives()
    assert _subnormal_survives()


def test_adamw_trains_with_subnormals_flushed(monkeypatch):
    """train_adamw runs its epochs inside flush_denormals (seen from inside its loop), and leaves them as they were."""
    import embgeo.attention.train as train_mod

    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormal floats")
    seen = []
    real = train_mod.run_loop

    def watching(*args, **kwargs):
        seen.append(_subnormal_survives())
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "run_loop", watching)
    X, y, _ = _data(n=20, T=5, V=9, seed=11)
    train_adamw(OneLayerAttention(9, 4, seed=0), X, y, 1, pad_id=PAD, batch_size=8, seed=1, progress=False)
    assert seen == [False]
    assert _subnormal_survives()


# -- the shared loop: Ctrl-C, threads, checkpoints, inputs ----------------------------------------

class _InterruptedModel(OneLayerAttention):
    """Raises KeyboardInterrupt (as Ctrl-C does) in the ``at``-th call of ``loss``."""

    def __init__(self, *args, at: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls, self.at = 0, at

    def loss(self, X, y, *, pad_id=None):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return super().loss(X, y, pad_id=pad_id)


def test_adamw_ctrl_c_warns_training_interrupted_and_keeps_the_checkpoint(tmp_path):
    X, y, _ = _data(n=40, T=6, V=9, seed=12)
    ck = tmp_path / "run.pt"
    model = _InterruptedModel(9, 8, seed=0, train_v=True, at=8)  # 3 steps per epoch: the 2nd step of epoch 3
    with pytest.warns(TrainingInterrupted, match="after 2 of 5 epochs"):
        tr = train_adamw(model, X, y, 5, pad_id=PAD, batch_size=16, checkpoint=ck, progress=False)
    assert tr.interrupted and tr.meta["interrupted_at_step"] == 7
    assert [r["epoch"] for r in tr.rows] == [0, 1, 2]
    resumed = _InterruptedModel(9, 8, seed=0, train_v=True, at=0)  # same class (a checkpoint setting), no Ctrl-C
    full = OneLayerAttention(9, 8, seed=0, train_v=True)
    kw = dict(pad_id=PAD, batch_size=16, progress=False)
    t_res = train_adamw(resumed, X, y, 5, checkpoint=ck, **kw)
    t_full = train_adamw(full, X, y, 5, **kw)
    assert t_res.meta["resumed_from_epoch"] == 2 and not t_res.interrupted
    torch.testing.assert_close(resumed.E, full.E, rtol=0, atol=0)
    np.testing.assert_array_equal(t_res["loss"], t_full["loss"])


@pytest.mark.parametrize(("call", "steps"), [(12, [0, 5, 10]), (10, [0, 5, 8])])
def test_two_stage_ctrl_c_warns_training_interrupted(monkeypatch, call, steps):
    """Gradient calls: 1 is step (4), then call t + 2 is the one at p_t (shared by its record and its update):
    call 12 is the record of step 10, call 10 the update from p_8."""
    from embgeo.attention import train as train_mod

    X, y, _ = _data(n=10, T=5, V=6, seed=8)
    calls = {"n": 0}
    original = train_mod.batch_gradients

    def interrupting(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(train_mod, "batch_gradients", interrupting)
    model = OneLayerAttention(6, 16, seed=3)
    with pytest.warns(TrainingInterrupted, match=f"after {steps[-1]} of 50 steps"):
        tr = two_stage(model, X, y, 20.0, steps=50, lr=0.5, pad_id=PAD, record_every=5)
    assert tr.interrupted and tr.meta["interrupted_at_step"] == steps[-1]
    assert list(tr["step"]) == steps  # the iterate reached is recorded last
    assert tr["norm_p"][-1] == pytest.approx(float(model.p.detach().norm()))  # and model.p holds it
    monkeypatch.setattr(train_mod, "batch_gradients", original)
    ref = OneLayerAttention(6, 16, seed=3)
    full = two_stage(ref, X, y, 20.0, steps=steps[-1], lr=0.5, pad_id=PAD, record_every=5)
    torch.testing.assert_close(model.p, ref.p, rtol=0, atol=0)
    assert full.rows == tr.rows


@pytest.mark.parametrize("threads, within, expected", [(None, None, 1), (None, 2, 2), (1, 2, 1), (3, None, 3)])
def test_threads_default_to_one_unless_set_and_a_count_reaches_torch(threads, within, expected, monkeypatch):
    """threads=None is one thread (torch alone would take every core: 16x slower on a shared machine, issue 24)
    unless an enclosing limit_threads (embgeo --threads) sets a count; torch's own setting comes back after."""
    from embgeo.core.threads import limit_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    X, y, _ = _data(n=10, T=5, V=6, seed=8)
    seen = []

    class Spy(OneLayerAttention):
        def loss(self, X, y, *, pad_id=None):
            seen.append(torch.get_num_threads())
            return super().loss(X, y, pad_id=pad_id)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with limit_threads(within) if within else contextlib.nullcontext():
            train_adamw(Spy(6, 4, seed=0), X, y, 1, pad_id=PAD, batch_size=5, progress=False, threads=threads)
        assert set(seen) == {expected}
        assert torch.get_num_threads() == 2  # restored
    finally:
        torch.set_num_threads(before)


def test_adamw_checkpoint_of_another_kind_is_refused(tmp_path):
    from embgeo.core.loop import Checkpoint

    X, y, _ = _data(n=20, T=5, V=9, seed=11)
    ck = tmp_path / "other.pt"
    Checkpoint(ck, "embgeo.collapse", {}).save({"epoch": 1})
    with pytest.raises(InputError, match="not an embgeo.attention checkpoint"):
        train_adamw(OneLayerAttention(9, 4, seed=0), X, y, 2, pad_id=PAD, checkpoint=ck, progress=False)
    ck.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot read"):
        train_adamw(OneLayerAttention(9, 4, seed=0), X, y, 2, pad_id=PAD, checkpoint=ck, progress=False)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"lr": 0.0}, "lr"), ({"weight_decay": -1.0}, "weight_decay"), ({"gamma": float("nan")}, "gamma"),
    ({"batch_size": 0}, "batch_size"), ({"log_every": 0}, "log_every"), ({"threads": 0}, "threads"),
    ({"seed": -1}, "seed"), ({"seed": None}, "seed"), ({"milestones": 100}, "milestones"),
    ({"progress": 1}, "progress"), ({"pad_id": "pad"}, "pad_id"), ({"checkpoint": 3}, "checkpoint"),
])
def test_adamw_bad_inputs_name_the_field(kwargs, field):
    X, y, _ = _data(n=8, T=5, V=9, seed=1)
    with pytest.raises(InputError, match=field):
        train_adamw(OneLayerAttention(9, 4, seed=0), X, y, 1, **{"pad_id": PAD, "progress": False, **kwargs})


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"eta0": 0.0}, "eta0"), ({"lr": -1.0}, "lr"), ({"steps": -1}, "steps"), ({"record_every": 0}, "record_every"),
    ({"threads": 0}, "threads"), ({"normalized": "yes"}, "normalized"), ({"p_hat": np.zeros(16)}, "p_hat"),
])
def test_two_stage_bad_inputs_name_the_field(kwargs, field):
    X, y, _ = _data(n=8, T=5, V=6, seed=1)
    args = {"eta0": 1.0, "steps": 2, "lr": 0.1, "pad_id": PAD, **kwargs}
    with pytest.raises(InputError, match=field):
        two_stage(OneLayerAttention(6, 16, seed=0), X, y, **args)
