import warnings

import numpy as np
import pytest
import torch

from embgeo.core.loop import TrainingInterrupted
from embgeo.core.threads import limit_threads
from embgeo.errors import InputError, ShapeError
from embgeo.ntp import NTPData, synthetic, theory
from embgeo.ntp.training.learned import (
    UFM,
    LSTMModel,
    TransformerModel,
    ntp_loss,
    train_learned,
    ufm_gradient,
)
from embgeo.ntp.training.train import StepSizeWarning


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with limit_threads(1):
        yield


@pytest.fixture(scope="module")
def tiny():
    """m=6 contexts, V=5, S_j=2 (the embeddings are unused by the learned models)."""
    return synthetic(m=6, V=5, d=3, support_size=2, seed=1)


@pytest.fixture(scope="module")
def corpus():
    """Sliding windows of k=3 tokens over a random sequence of 6 token types."""
    seq = np.random.default_rng(0).integers(0, 6, size=90).tolist()
    data = NTPData.from_sequences([seq], 3, windows=True)
    return data, np.array(data.contexts)


def _copy_params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# -- loss and gradient ---------------------------------------------------------------------------

def test_ntp_loss_matches_theory(tiny):
    model = UFM(tiny.m, tiny.V, 4, seed=3, init_scale=2.0)
    H, W = model.H.detach().numpy(), model.decoder.detach().numpy()
    value = ntp_loss(model.logits(), tiny)
    assert value.dtype == torch.float64
    expected = theory.cross_entropy(NTPData(H, tiny.probs, tiny.weights), W)
    assert value.item() == pytest.approx(expected, rel=1e-13)
    with pytest.raises(ShapeError, match="logits"):
        ntp_loss(model.logits()[:, :-1], tiny)


@pytest.mark.parametrize("lam_H, lam_W", [(0.0, 0.0), (0.3, 0.0), (0.0, 0.7), (0.3, 0.7)])
def test_ufm_gradient_matches_autograd(tiny, lam_H, lam_W):
    rng = np.random.default_rng(4)
    H, W = rng.standard_normal((tiny.m, 4)), 2 * rng.standard_normal((tiny.V, 4))
    Ht, Wt = torch.tensor(H, requires_grad=True), torch.tensor(W, requires_grad=True)
    obj = ntp_loss(Ht @ Wt.T, tiny) + lam_H / 2 * Ht.pow(2).sum() + lam_W / 2 * Wt.pow(2).sum()
    obj.backward()
    dH, dW = ufm_gradient(H, W, tiny, lam_H, lam_W)
    np.testing.assert_allclose(dH, Ht.grad.numpy(), rtol=1e-8, atol=1e-14)
    np.testing.assert_allclose(dW, Wt.grad.numpy(), rtol=1e-8, atol=1e-14)


def test_ufm_gradient_finite_differences():
    data = NTPData(np.zeros((3, 1)), [[0.5, 0.5, 0, 0], [0, 0.2, 0.3, 0.5], [0, 0, 0, 1.0]], [0.2, 0.3, 0.5])
    rng = np.random.default_rng(5)
    H, W = rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
    lam_H, lam_W = 0.1, 0.2

    def objective(H, W):
        ce = theory.cross_entropy(NTPData(H.copy(), data.probs, data.weights), W)  # NTPData freezes its H
        return ce + lam_H / 2 * np.sum(H**2) + lam_W / 2 * np.sum(W**2)

    dH, dW = ufm_gradient(H, W, data, lam_H, lam_W)
    eps = 1e-6
    for X, dX in ((H, dH), (W, dW)):
        fd = np.zeros_like(X)
        for idx in np.ndindex(X.shape):
            orig = X[idx]
            X[idx] = orig + eps
            up = objective(H, W)
            X[idx] = orig - eps
            down = objective(H, W)
            X[idx] = orig
            fd[idx] = (up - down) / (2 * eps)
        np.testing.assert_allclose(dX, fd, rtol=1e-6, atol=1e-9)


def test_ufm_gradient_bad_shapes(tiny):
    with pytest.raises(ShapeError, match="H, W"):
        ufm_gradient(np.zeros((tiny.m, 3)), np.zeros((tiny.V, 4)), tiny)
    with pytest.raises(InputError, match="weight_decay_H"):
        ufm_gradient(np.zeros((tiny.m, 3)), np.zeros((tiny.V, 3)), tiny, -1.0)


# -- the UFM's implicit bias -----------------------------------------------------------------------

@pytest.mark.parametrize("optimizer, lr", [("gd", 2.0), ("adam", 0.05)])
def test_ufm_reaches_entropy_with_growing_W(tiny, optimizer, lr):
    """d >= m: CE -> 𝓗 (kl_gap -> 0) only as ‖W‖ -> ∞ (off-support probabilities -> 0)."""
    trace = train_learned(UFM(tiny.m, tiny.V, 8, seed=0), tiny, optimizer=optimizer, lr=lr, steps=300,
                          progress=False)
    gap, norm_W = trace["kl_gap"], trace["norm_W"]
    assert gap[0] > 1.0
    assert 0 < gap[-1] < 1e-2
    assert norm_W[-1] > 2 * norm_W[0]
    tail = norm_W[trace["step"] >= 50]
    assert np.all(np.diff(tail) > 0)  # still growing at the end
    np.testing.assert_allclose(trace["ce"] - trace["kl_gap"], theory.entropy(tiny), rtol=1e-12)
    if optimizer == "gd":
        assert np.all(np.diff(trace["ce"]) < 0)


def test_ufm_weight_decay_keeps_norms_bounded(tiny):
    lam = 1e-2
    kw = dict(optimizer="gd", lr=2.0, steps=1000, record_every=250, progress=False)
    free = train_learned(UFM(tiny.m, tiny.V, 8, seed=0), tiny, **kw)
    decayed = train_learned(UFM(tiny.m, tiny.V, 8, seed=0), tiny, weight_decay_embed=lam,
                            weight_decay_decoder=lam, **kw)
    obj = decayed["objective"]
    assert np.all(np.diff(obj) <= 1e-12)  # GD descends the regularized objective ...
    # ... so λ/2 (‖W‖² + ‖H‖²) <= objective(0) at every step, whatever the number of steps.
    assert np.all(lam / 2 * (decayed["norm_W"] ** 2 + decayed["norm_H"] ** 2) <= obj[0])
    np.testing.assert_allclose(decayed["norm_W"][-2:], decayed["norm_W"][-1], rtol=1e-6)  # converged
    np.testing.assert_allclose(decayed["norm_H"][-2:], decayed["norm_H"][-1], rtol=1e-6)
    assert decayed["kl_gap"][-1] > 1e-2  # the regularized optimum stays off the entropy
    assert free["norm_W"][-1] > 1.5 * decayed["norm_W"][-1]
    assert free["kl_gap"][-1] < 1e-3


@pytest.mark.parametrize("which", ["embed", "decoder"])
def test_each_weight_decay_reaches_its_parameters(tiny, which):
    """One GD step equals the manual update with ufm_gradient: λ acts on H only, or on W only."""
    lam, lr = 0.5, 0.3
    model = UFM(tiny.m, tiny.V, 4, seed=2)
    H0, W0 = model.H.detach().numpy().copy(), model.decoder.detach().numpy().copy()
    lam_H, lam_W = (lam, 0.0) if which == "embed" else (0.0, lam)
    train_learned(model, tiny, optimizer="gd", lr=lr, steps=1, weight_decay_embed=lam_H, weight_decay_decoder=lam_W,
                  progress=False)
    dH0, dW0 = ufm_gradient(H0, W0, tiny)  # no decay
    H1, W1 = model.H.detach().numpy(), model.decoder.detach().numpy()
    # Against the update without decay: only the decayed block moves, by exactly -lr λ X0.
    np.testing.assert_allclose(H1, H0 - lr * dH0 - lr * lam_H * H0, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(W1, W0 - lr * dW0 - lr * lam_W * W0, rtol=1e-12, atol=1e-15)
    moved = H1 - (H0 - lr * dH0) if which == "embed" else W1 - (W0 - lr * dW0)
    assert np.abs(moved).max() > 1e-3


@pytest.mark.parametrize("which", ["embed", "decoder"])
def test_weight_decay_reaches_lstm_parameters(corpus, which):
    data, ctx = corpus
    lam, lr = 0.5, 0.1
    model = LSTMModel(data.V, 8, 1, seed=1)
    before = _copy_params(model)
    loss = ntp_loss(model.logits(torch.as_tensor(ctx)), data)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    lam_e, lam_W = (lam, 0.0) if which == "embed" else (0.0, lam)
    train_learned(model, data, ctx, optimizer="gd", lr=lr, steps=1, weight_decay_embed=lam_e,
                  weight_decay_decoder=lam_W, progress=False)
    for name, p in model.named_parameters():
        decay = lam_W if name == "decoder" else lam_e
        expected = before[name] - lr * (grads[name] + decay * before[name])
        torch.testing.assert_close(p.detach(), expected, rtol=1e-10, atol=1e-14)


# -- LSTM and transformer --------------------------------------------------------------------------

def test_lstm_and_transformer_shapes_and_dtype(corpus):
    data, ctx = corpus
    ids = torch.as_tensor(ctx)
    for model in (LSTMModel(data.V, 8, 2, seed=0), TransformerModel(data.V, 8, 2, 2, k=3, seed=0)):
        H = model.embeddings(ids)
        assert H.shape == (data.m, 8) and H.dtype == torch.float64
        assert model.logits(ids).shape == (data.m, data.V)
        assert model.decoder.shape == (data.V, 8)
        assert all(p.dtype == torch.float64 for p in model.parameters())
        assert not any(p is model.decoder for p in model.embedding_parameters())
        assert len(model.embedding_parameters()) == len(list(model.parameters())) - 1
        # Every position of the context reaches h(x) (readout at the last one).
        changed = ids.clone()
        changed[:, 0] = (changed[:, 0] + 1) % data.V
        assert (model.embeddings(changed) - H).abs().max() > 1e-6
    assert LSTMModel(data.V, 8, 1, dtype=torch.float32).embeddings(ids).dtype == torch.float32
    # Seeded initialization, independent of the global RNG.
    torch.manual_seed(123)
    a = TransformerModel(data.V, 8, 1, 2, k=3, seed=7)
    torch.manual_seed(456)
    b = TransformerModel(data.V, 8, 1, 2, k=3, seed=7)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def test_transformer_is_causal():
    model = TransformerModel(7, 8, 2, 2, k=5, seed=0)
    ids = torch.as_tensor(np.random.default_rng(1).integers(0, 7, size=(4, 5)))
    states = model.hidden_states(ids)
    t = 2
    later = ids.clone()
    later[:, t + 1:] = (later[:, t + 1:] + 3) % 7
    changed = model.hidden_states(later)
    torch.testing.assert_close(changed[:, :t + 1], states[:, :t + 1], rtol=0, atol=1e-12)
    assert (changed[:, t + 1:] - states[:, t + 1:]).abs().max() > 1e-3  # later positions do see them
    # A prefix of length t+1 gives the state at position t as its context embedding.
    torch.testing.assert_close(model.embeddings(ids[:, :t + 1]), states[:, t], rtol=0, atol=1e-12)


@pytest.mark.parametrize("make", [lambda V: LSTMModel(V, 16, 1, seed=0),
                                  lambda V: TransformerModel(V, 16, 1, 2, k=3, seed=0)], ids=["lstm", "transformer"])
def test_loss_decreases(corpus, make):
    data, ctx = corpus
    trace = train_learned(make(data.V), data, ctx, optimizer="adam", lr=1e-2, steps=100, record_every=50,
                          progress=False)
    ce = trace["ce"]
    assert np.all(np.diff(ce) < 0) and ce[-1] < 0.7 * ce[0]
    assert trace.meta["dtype"] == "float64" and trace.W.shape == (data.V, 16)


def test_contexts_default_to_data_contexts(corpus):
    data, ctx = corpus
    kw = dict(optimizer="gd", lr=0.1, steps=3, progress=False)
    a = train_learned(LSTMModel(data.V, 4, 1), data, **kw)
    b = train_learned(LSTMModel(data.V, 4, 1), data, ctx, **kw)
    assert a.rows == b.rows
    c = train_learned(LSTMModel(data.V, 4, 1), data, ctx[:, ::-1].copy(), **kw)  # the contexts reach the model
    assert c.rows[0]["ce"] != a.rows[0]["ce"]


# -- trainer ---------------------------------------------------------------------------------------

def test_meta_and_measure(tiny):
    calls = []

    def measure(H, W, step):
        calls.append((H.shape, W.shape, H.dtype, W.dtype, step))
        return {"mean_norm_h": np.float64(np.linalg.norm(H, axis=1).mean())}

    trace = train_learned(UFM(tiny.m, tiny.V, 4, seed=0, dtype=torch.float32), tiny, optimizer="adam", lr=0.01,
                          steps=5, weight_decay_embed=0.1, weight_decay_decoder=0.2, measure=measure, progress=False)
    assert calls == [((tiny.m, 4), (tiny.V, 4), np.float64, np.float64, step) for step in trace["step"]]
    assert trace.to_frame().columns.tolist() == ["step", "ce", "kl_gap", "objective", "norm_W", "norm_H",
                                                 "mean_norm_h"]
    assert type(trace.rows[-1]["mean_norm_h"]) is float
    meta = trace.meta
    assert (meta["model"], meta["m"], meta["V"], meta["d"], meta["optimizer"], meta["lr"]) == \
        ("UFM", tiny.m, tiny.V, 4, "adam", 0.01)
    assert (meta["weight_decay_embed"], meta["weight_decay_decoder"], meta["dtype"]) == (0.1, 0.2, "float32")
    assert meta["entropy"] == theory.entropy(tiny)
    with pytest.raises(InputError, match="measure"):
        train_learned(UFM(tiny.m, tiny.V, 4), tiny, steps=1, measure=lambda H, W, step: {"ce": 0.0}, progress=False)


def test_sgd_samples_with_its_seed(tiny):
    kw = dict(optimizer="sgd", lr=0.5, steps=200, batch_size=3, record_every=100, progress=False)
    a = train_learned(UFM(tiny.m, tiny.V, 8), tiny, seed=0, **kw)
    b = train_learned(UFM(tiny.m, tiny.V, 8), tiny, seed=0, **kw)
    c = train_learned(UFM(tiny.m, tiny.V, 8), tiny, seed=1, **kw)
    assert a.rows == b.rows and a.rows != c.rows
    assert a["ce"][-1] < 0.5 * a["ce"][0]
    assert a.meta["batch_size"] == 3


def test_divergence_stops(tiny):
    with pytest.warns(StepSizeWarning, match="diverged"):
        trace = train_learned(UFM(tiny.m, tiny.V, 4), tiny, optimizer="gd", lr=1e12, steps=100, record_every=1000,
                              progress=False)
    at = trace.meta["diverged_at_step"]
    assert 0 < at < 100 and trace.last["step"] < at


def test_a_finite_loss_ten_times_its_start_is_divergence(tiny):
    # GD at lr = 100 takes CE from 1.8 to 344, finite: the finiteness check alone would train on (ntp-real-ufm-gd
    # at lr 30 on the quick corpus ended at CE = 7.6e15, reported as a run with failing claims; issue 37).
    with pytest.warns(StepSizeWarning, match="exceeds 10 × max"):
        trace = train_learned(UFM(tiny.m, tiny.V, 4), tiny, optimizer="gd", lr=100.0, steps=100, record_every=1,
                              progress=False)
    assert trace.meta["diverged_at_step"] == 1 and "exceeds" in trace.meta["diverged_reason"]
    assert trace.last["step"] == 0
    calm = train_learned(UFM(tiny.m, tiny.V, 4), tiny, optimizer="gd", lr=1.0, steps=100, record_every=1,
                         progress=False)  # negative control: a step size that descends is not stopped
    assert "diverged_at_step" not in calm.meta and calm.last["step"] == 100


def test_ctrl_c_returns_partial_trace(tiny):
    state = {"raised": False}

    def measure(H, W, step):
        if len(calls) == 5 and not state["raised"]:
            state["raised"] = True
            raise KeyboardInterrupt
        calls.append(1)
        return {}

    calls = []
    with pytest.warns(TrainingInterrupted):
        trace = train_learned(UFM(tiny.m, tiny.V, 4), tiny, optimizer="gd", lr=1.0, steps=50, measure=measure,
                              progress=False)
    assert trace.interrupted and trace.last["step"] == 5 == trace.meta["interrupted_at_step"]


@pytest.mark.parametrize("kind", ["ufm-adam", "lstm-sgd"])
def test_checkpoint_resume_equals_uninterrupted(tmp_path, corpus, tiny, kind):
    if kind == "ufm-adam":
        data, ctx, make = tiny, None, lambda: UFM(tiny.m, tiny.V, 4, seed=3)
        kw = dict(optimizer="adam", lr=0.05, weight_decay_embed=0.01)
    else:
        data, ctx = corpus
        make = lambda: LSTMModel(data.V, 4, 1, seed=3)  # noqa: E731
        kw = dict(optimizer="sgd", lr=0.2, batch_size=4, weight_decay_decoder=0.01, seed=5)
    kw.update(record_every=5, progress=False)
    full_model = make()
    full = train_learned(full_model, data, ctx, steps=20, **kw)
    path = tmp_path / "run.pt"
    first = train_learned(make(), data, ctx, steps=10, checkpoint=path, **kw)
    assert first.last["step"] == 10
    resumed_model = make()  # a fresh process: the state comes from the file
    resumed = train_learned(resumed_model, data, ctx, steps=20, checkpoint=path, **kw)
    assert resumed.meta["resumed_from_step"] == 10
    assert resumed.rows == full.rows
    for x, y in zip(resumed_model.parameters(), full_model.parameters(), strict=True):
        assert torch.equal(x, y)
    with pytest.raises(InputError, match="other settings"):
        train_learned(make(), data, ctx, steps=20, checkpoint=path, **{**kw, "lr": 0.123})
    with pytest.raises(InputError, match="already at step"):
        train_learned(make(), data, ctx, steps=5, checkpoint=path, **kw)


def test_checkpoint_refuses_other_model_or_data(tmp_path, tiny):
    path = tmp_path / "run.pt"
    train_learned(UFM(tiny.m, tiny.V, 4, seed=0), tiny, steps=2, checkpoint=path, progress=False)
    with pytest.raises(InputError, match="other settings"):
        train_learned(UFM(tiny.m, tiny.V, 5, seed=0), tiny, steps=4, checkpoint=path, progress=False)
    other = NTPData(tiny.embeddings, tiny.probs, np.full(tiny.m, 1 / tiny.m))
    with pytest.raises(InputError, match="other settings"):
        train_learned(UFM(tiny.m, tiny.V, 4, seed=0), other, steps=4, checkpoint=path, progress=False)


def test_bad_inputs(tiny, corpus):
    data, ctx = corpus
    lstm = LSTMModel(data.V, 4, 1)
    ufm = UFM(tiny.m, tiny.V, 4)
    kw = dict(steps=1, progress=False)
    with pytest.raises(InputError, match="optimizer"):
        train_learned(ufm, tiny, optimizer="rmsprop", **kw)
    with pytest.raises(InputError, match="lr"):
        train_learned(ufm, tiny, lr=-0.1, **kw)
    with pytest.raises(InputError, match="weight_decay_embed"):
        train_learned(ufm, tiny, weight_decay_embed=-1.0, **kw)
    with pytest.raises(InputError, match="batch_size"):
        train_learned(ufm, tiny, optimizer="adam", batch_size=2, **kw)
    with pytest.raises(ShapeError, match="contexts"):
        train_learned(lstm, data, ctx[:-1], **kw)
    with pytest.raises(ShapeError, match="contexts"):
        train_learned(lstm, data, ctx[:, 0], **kw)
    bad = ctx.copy()
    bad[0, 0] = data.V
    with pytest.raises(InputError, match="out of range"):
        train_learned(lstm, data, bad, **kw)
    bad[0, 0] = -1
    with pytest.raises(InputError, match="out of range"):
        train_learned(lstm, data, bad, **kw)
    with pytest.raises(InputError, match="integer"):
        train_learned(lstm, data, ctx.astype(float), **kw)
    with pytest.raises(ShapeError, match="k = 2"):
        train_learned(TransformerModel(data.V, 4, 1, 2, k=2), data, ctx, **kw)
    with pytest.raises(ShapeError, match="model.V"):
        train_learned(LSTMModel(data.V + 1, 4, 1), data, ctx, **kw)
    with pytest.raises(ShapeError, match="model.m"):
        train_learned(UFM(tiny.m + 1, tiny.V, 4), tiny, **kw)
    with pytest.raises(InputError, match="model"):
        train_learned(torch.nn.Linear(2, 2), tiny, **kw)
    no_ctx = NTPData(data.embeddings, data.probs, data.weights)
    with pytest.raises(InputError, match="contexts"):
        train_learned(lstm, no_ctx, **kw)
    with pytest.raises(InputError, match="heads"):
        TransformerModel(10, 6, 1, 4)
    with pytest.raises(InputError, match="dtype"):
        UFM(3, 4, 2, dtype=torch.int64)
    with pytest.raises(InputError, match="contexts"):
        lstm.embeddings(torch.as_tensor(ctx, dtype=torch.float64))
    with pytest.raises(InputError, match="token ids"):
        TransformerModel(data.V, 4, 1, 2, k=3).embeddings(torch.as_tensor(ctx) + data.V)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train_learned(ufm, tiny, **kw)  # the valid call passes without warnings
