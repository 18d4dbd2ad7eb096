import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import embgeo.collapse.train as train_mod
from embgeo.collapse import CollapseNet, generate, theory
from embgeo.collapse.model import layer_norm
from embgeo.collapse.train import CHECKPOINT_KIND, DivergenceWarning, TrainingInterrupted, evaluate, sgd_step, train
from embgeo.core.loop import CHECKPOINT_VERSION, Checkpoint
from embgeo.core.threads import limit_threads
from embgeo.errors import InputError, ShapeError

F64 = torch.float64


@pytest.fixture(scope="module")
def small():
    # distinct latents -> disjoint supports -> every sentence has one correct class
    return generate(3, 10, 4, 20, n_train_per_class=5, n_test_per_class=5, latent="distinct", seed=0)


def test_shapes_and_init(small):
    m = CollapseNet(30, 16, 4, 20, seed=3)
    assert m.W.shape == (30, 16) and m.U.shape == (20, 64) and m.W.dtype == torch.float32
    assert m.word_embeddings().shape == (30, 16) and m.word_embeddings().dtype == np.float64
    assert m.u_blocks().shape == (20, 4, 16)
    assert m(torch.from_numpy(np.array(small.train_x[:7]))).shape == (7, 20)
    big = CollapseNet(2000, 50, 4, 300, init_scale=1.0, seed=0, dtype=F64)
    W, U = big.word_embeddings(), big.u_matrix()
    assert abs(W.mean()) < 0.01 and abs(W.std() - 1) < 0.01  # N(0, 1)
    bound = 1 / math.sqrt(200)
    assert U.max() <= bound and U.min() >= -bound and abs(U.std() - bound / math.sqrt(3)) < 0.01 * bound
    m2 = CollapseNet(30, 16, 4, 20, seed=3)
    assert np.array_equal(m.word_embeddings(), m2.word_embeddings()) and np.array_equal(m.u_matrix(), m2.u_matrix())
    assert np.allclose(np.abs(CollapseNet(30, 16, 4, 20, seed=3, init_scale=1e-3).word_embeddings()).max(),
                       1e-3 * np.abs(CollapseNet(30, 16, 4, 20, seed=3, init_scale=1.0).word_embeddings()).max(),
                       rtol=1e-6)


@pytest.mark.parametrize("layernorm", [False, True])
def test_logits_equal_blockwise_sum(layernorm):
    """(h(x))_k = Σ_ℓ <u_{k,ℓ}, w_{x_ℓ}> with u_{k,ℓ} = u_blocks()[k, ℓ] (digest §7.1 item 11)."""
    n_w, d, L, K = 9, 5, 3, 4
    m = CollapseNet(n_w, d, L, K, layernorm=layernorm, init_scale=1.0, seed=1, dtype=F64)
    blocks = np.arange(K * L * d, dtype=np.float64).reshape(K, L, d) / 10 - 3  # u_{k,ℓ} known by construction
    with torch.no_grad():
        m.U.copy_(torch.from_numpy(blocks.reshape(K, L * d)))
    assert np.array_equal(m.u_blocks(), blocks)
    x = np.array([[0, 4, 8], [3, 3, 1]])
    logits = m(torch.from_numpy(x)).detach().numpy()
    R = m.word_representations()
    direct = np.array([[sum(blocks[k, ell] @ R[x[i, ell]] for ell in range(L)) for k in range(K)] for i in range(2)])
    assert np.allclose(logits, direct, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eps", [0.0, 1e-5])
def test_lemma_L(eps):
    """h*_{W,U} = h_{φ(W),U}."""
    hs = CollapseNet(12, 8, 5, 6, layernorm=True, ln_eps=eps, init_scale=1.0, seed=2, dtype=F64)
    h = CollapseNet(12, 8, 5, 6, layernorm=False, init_scale=1.0, seed=2, dtype=F64)
    with torch.no_grad():
        h.W.copy_(layer_norm(hs.W, eps))
    x = torch.randint(0, 12, (20, 5), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(hs(x), h(x), rtol=1e-12, atol=1e-12)
    assert np.allclose(hs.word_representations(), h.word_embeddings())
    if eps == 0:
        assert np.allclose(np.linalg.norm(hs.word_representations(), axis=1), math.sqrt(8))
    ref = nn.functional.layer_norm(hs.W, (8,), eps=eps)  # PyTorch's LayerNorm without affine parameters
    assert torch.allclose(layer_norm(hs.W, eps), ref, rtol=1e-10, atol=1e-12)
    # the numpy φ of the theory is the same function (one LayerNorm per backend)
    np.testing.assert_allclose(theory.layer_norm(hs.word_embeddings(), eps), ref.detach().numpy(), rtol=1e-10,
                               atol=1e-12)


def _reference_step(m, x, y, lr, wd_W, wd_U):
    """torch.optim.SGD with two weight-decay groups on nn.Embedding + nn.Linear (the notebooks' code)."""
    emb = nn.Embedding(m.n_words, m.dim, dtype=F64)
    lin = nn.Linear(m.length * m.dim, m.n_classes, bias=False, dtype=F64)
    with torch.no_grad():
        emb.weight.copy_(m.W)
        lin.weight.copy_(m.U)
    opt = torch.optim.SGD([{"params": emb.parameters(), "weight_decay": wd_W},
                           {"params": lin.parameters(), "weight_decay": wd_U}], lr=lr)
    v = emb(x)
    if m.layernorm:
        v = nn.functional.layer_norm(v, (m.dim,), eps=m.ln_eps)
    loss = nn.functional.cross_entropy(lin(v.reshape(len(x), -1)), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item(), emb.weight.detach(), lin.weight.detach()


@pytest.mark.parametrize(("layernorm", "eps", "wd_W"), [(False, 0.0, 1e-3), (True, 0.0, 0.0), (True, 1e-5, 2e-2)])
def test_hand_step_equals_autograd_sgd(small, layernorm, eps, wd_W):
    m = CollapseNet(30, 16, 4, 20, layernorm=layernorm, ln_eps=eps, init_scale=1.0, seed=4, dtype=F64)
    x = torch.from_numpy(np.array(small.train_x[:13]))  # repeated words in the batch exercise index_add
    y = torch.from_numpy(np.array(small.train_y[:13]))
    for lr, wd_U in ((0.1, 1e-3), (0.7, 5e-2)):
        ref_loss, W_ref, U_ref = _reference_step(m, x, y, lr, wd_W, wd_U)
        loss, correct = sgd_step(m, x, y, lr, wd_W, wd_U)
        assert abs(float(loss) - ref_loss) < 1e-10
        assert torch.allclose(m.W, W_ref, atol=1e-6, rtol=0) and torch.allclose(m.U, U_ref, atol=1e-6, rtol=0)
        assert (m.W - W_ref).abs().max() < 1e-12 and (m.U - U_ref).abs().max() < 1e-12


def test_evaluate_matches_forward(small):
    m = CollapseNet(30, 16, 4, 20, init_scale=1.0, seed=0, dtype=F64)
    loss, acc = evaluate(m, small.test_x, small.test_y, batch_size=7)
    logits = m(torch.from_numpy(np.array(small.test_x)))
    y = torch.from_numpy(np.array(small.test_y))
    assert math.isclose(loss, nn.functional.cross_entropy(logits, y).item(), rel_tol=1e-12)
    assert acc == float((logits.argmax(1) == y).double().mean())


def test_small_run_reaches_full_train_accuracy(small):
    """Distinct latents make the supports disjoint, and an equiangular (type-I) configuration
    separates every sentence with margin ∝ dist(z_k, z_j) ≥ 1 (d = 16 ≥ n_c − 1), so the data are
    realizable; with 100 sentences and ~1.8k parameters from a unit-scale init, SGD (lr 0.1,
    λ = 1e-3) memorizes the training set within ~100 epochs."""
    m = CollapseNet(30, 16, 4, 20, init_scale=1.0, seed=0)
    tr = train(m, small, 200, log_every=50, progress=False)
    df = tr.to_frame()
    assert df.columns.tolist() == ["step", "epoch", "train_loss", "train_acc", "test_acc"]
    assert df["epoch"].tolist() == [0, 50, 100, 150, 200] and df["step"].tolist() == [0, 50, 100, 150, 200]
    assert df["train_acc"].iloc[-1] == 1.0 and evaluate(m, small.train_x, small.train_y)[1] == 1.0
    assert df["train_loss"].iloc[-1] < df["train_loss"].iloc[0]
    assert tr.W.shape == (30, 16) and not tr.interrupted and tr.meta["best_test_acc"] == df["test_acc"].max()


def test_reproducible_and_seed_matters(small):
    runs = []
    for seed in (0, 0, 1):
        m = CollapseNet(30, 16, 4, 20, init_scale=1.0, seed=0)
        runs.append((train(m, small, 6, batch_size=30, seed=seed, log_every=2, progress=False), m.u_matrix()))
    assert runs[0][0].rows == runs[1][0].rows and np.array_equal(runs[0][1], runs[1][1])
    assert not np.array_equal(runs[0][1], runs[2][1])
    # partial last batch: 100 = 3·30 + 10 -> 4 steps per epoch
    assert runs[0][0].to_frame()["step"].tolist() == [0, 8, 16, 24]


def test_resume_from_checkpoint_equals_uninterrupted(small, tmp_path):
    kw = {"batch_size": 32, "seed": 7, "log_every": 2, "progress": False}
    m_full = CollapseNet(30, 16, 4, 20, layernorm=True, init_scale=1.0, seed=1)
    full = train(m_full, small, 10, weight_decay_W=0.0, **kw)
    path = tmp_path / "ck.pt"
    m1 = CollapseNet(30, 16, 4, 20, layernorm=True, init_scale=1.0, seed=1)
    first = train(m1, small, 4, weight_decay_W=0.0, checkpoint=path, **kw)
    assert path.exists() and len(first) == 3
    m2 = CollapseNet(30, 16, 4, 20, layernorm=True, init_scale=1.0, seed=99)  # weights are replaced by the checkpoint
    resumed = train(m2, small, 10, weight_decay_W=0.0, checkpoint=path, **kw)
    assert resumed.meta["resumed_from_epoch"] == 4
    assert np.array_equal(m2.word_embeddings(), m_full.word_embeddings())
    assert np.array_equal(m2.u_matrix(), m_full.u_matrix())
    assert resumed.rows == full.rows
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(InputError, match="checkpoint"):  # other settings
        train(CollapseNet(30, 16, 4, 20, layernorm=True, seed=1), small, 10, lr=0.2, weight_decay_W=0.0,
              checkpoint=path, **kw)


def test_ctrl_c_returns_partial_trace(small, monkeypatch):
    calls = {"n": 0}
    real = train_mod.sgd_step

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 12:  # inside epoch 3 (4 steps per epoch with batch 30)
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "sgd_step", flaky)
    m = CollapseNet(30, 16, 4, 20, init_scale=1.0, seed=0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tr = train(m, small, 50, batch_size=30, progress=False)
    assert any(issubclass(x.category, TrainingInterrupted) for x in w)
    assert tr.interrupted and tr.meta["interrupted_at_step"] == 11
    df = tr.to_frame()
    assert df["epoch"].tolist() == [0, 1, 2, 2] and df["step"].tolist() == [0, 4, 8, 11]
    assert np.isfinite(df["train_loss"].iloc[-1]) and tr.W is not None


def test_zero_epochs_and_bad_inputs(small):
    m = CollapseNet(30, 16, 4, 20)
    tr = train(m, small, 0, progress=False)
    assert len(tr) == 1 and tr.last["epoch"] == 0
    for kwargs, field in (({"lr": 0}, "lr"), ({"batch_size": 0}, "batch_size"),
                          ({"weight_decay_W": -1}, "weight_decay_W"), ({"weight_decay_U": math.nan}, "weight_decay_U"),
                          ({"seed": None}, "seed"), ({"log_every": 0}, "log_every"), ({"threads": 0}, "threads"),
                          ({"checkpoint": 3}, "checkpoint"), ({"progress": "yes"}, "progress")):
        with pytest.raises(InputError, match=field):
            train(m, small, 1, **kwargs)
    with pytest.raises(InputError, match="epochs"):
        train(m, small, -1)
    with pytest.raises(ShapeError, match="n_words"):
        train(CollapseNet(31, 16, 4, 20), small, 1)
    with pytest.raises(InputError, match="model"):
        train("net", small, 1)
    with pytest.raises(InputError, match="data"):
        train(m, None, 1)
    for kwargs, field in (({"dim": 0}, "dim"), ({"ln_eps": -1.0}, "ln_eps"), ({"layernorm": 1}, "layernorm"),
                          ({"dtype": torch.float16}, "dtype"), ({"seed": 1.5}, "seed")):
        with pytest.raises(InputError, match=field):
            CollapseNet(**{"n_words": 30, "dim": 16, "length": 4, "n_classes": 20, **kwargs})
    with pytest.raises(InputError, match="x"):
        m(torch.zeros(3, 5, dtype=torch.long))


def test_checkpoint_is_a_core_checkpoint_of_kind_collapse(small, tmp_path):
    path = tmp_path / "ck.pt"
    train(CollapseNet(30, 16, 4, 20, seed=1), small, 2, batch_size=50, checkpoint=path, progress=False)
    state = torch.load(path, weights_only=True)
    assert (state["version"], state["kind"], state["epoch"]) == (CHECKPOINT_VERSION, CHECKPOINT_KIND, 2)
    other = tmp_path / "other.pt"
    Checkpoint(other, "embgeo.attention", {}).save({"epoch": 0})
    with pytest.raises(InputError, match="not an embgeo.collapse checkpoint"):
        train(CollapseNet(30, 16, 4, 20, seed=1), small, 2, checkpoint=other, progress=False)


@pytest.mark.parametrize("kwargs", [{"lr": 1e6}, {"weight_decay_W": 1e9}])
def test_divergence_stops_and_says_where(small, kwargs):
    """A step size (or decay) far too large: the loss or the weights overflow; training stops there."""
    m = CollapseNet(30, 16, 4, 20, seed=0)
    with pytest.warns(DivergenceWarning, match="diverged"):
        tr = train(m, small, 50, batch_size=10, progress=False, **kwargs)
    k = tr.meta["diverged_at_step"]
    assert 0 < k < 50 * 10 and not tr.interrupted
    df = tr.to_frame()
    assert (df["step"] <= k).all() and np.isfinite(df["train_loss"]).all()  # no row of non-finite values
    assert df["step"].iloc[-1] < k  # the last row is a recorded epoch before the divergence


def test_threads_none_keeps_the_callers_setting(small, monkeypatch):
    seen = []
    real = train_mod.sgd_step

    def step(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "sgd_step", step)
    before = torch.get_num_threads()
    with limit_threads(2):
        train(CollapseNet(30, 16, 4, 20), small, 1, batch_size=50, progress=False)  # threads=None
    with limit_threads(2):
        train(CollapseNet(30, 16, 4, 20), small, 1, batch_size=50, progress=False, threads=1)
    assert seen == [2, 2, 1, 1] and torch.get_num_threads() == before
