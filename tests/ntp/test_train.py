import warnings

import numpy as np
import pytest
import torch

from embgeo.errors import InputError, NotSeparableError, ShapeError
from embgeo.ntp import NTPData, synthetic, theory
from embgeo.ntp.measure.metrics import compute_reference
from embgeo.ntp.training import train as train_mod
from embgeo.ntp.training.regpath import regularization_path, ridge_path
from embgeo.ntp.training.train import StepSizeWarning, TrainingInterrupted, record_steps, train


@pytest.fixture(scope="module")
def data():
    return synthetic(m=20, V=8, d=30, support_size=4, seed=0)


@pytest.fixture(scope="module")
def ref(data):
    return compute_reference(data)


@pytest.fixture(scope="module")
def wide():
    """d > m, so the embeddings leave a non-trivial null space in R^d."""
    return synthetic(m=6, V=5, d=12, support_size=2, seed=1)


def _null_projector(data):
    """I - Π with Π the orthogonal projector of R^d onto span{h̄_j}."""
    H = data.embeddings
    return np.eye(data.d) - np.linalg.pinv(H) @ H


# -- schedule, loss ------------------------------------------------------------------------------

def test_record_steps():
    assert record_steps(1000) == [*range(10), *range(10, 100, 10), *range(100, 1000, 100), 1000]
    assert record_steps(250) == [*range(10), *range(10, 100, 10), 100, 200, 250]
    assert record_steps(20, 7) == [0, 7, 14, 20]
    assert record_steps(1000, "log125") == [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert record_steps(300, "log125") == [0, 1, 2, 5, 10, 20, 50, 100, 200, 300]
    with pytest.raises(InputError, match="record_every"):
        record_steps(10, "log2")
    assert record_steps(0) == [0]


def test_torch_loss_matches_theory(data):
    rng = np.random.default_rng(1)
    W = 3 * rng.standard_normal((data.V, data.d))
    loss = train_mod._Loss(data)
    Wt = torch.tensor(W, requires_grad=True)
    value = loss.full(Wt)
    value.backward()
    assert value.dtype == torch.float64
    assert value.item() == pytest.approx(theory.cross_entropy(data, W), rel=1e-13)
    np.testing.assert_allclose(Wt.grad.numpy(), theory.gradient(data, W), rtol=1e-11, atol=1e-14)


def test_sgd_batch_loss_is_unbiased(data):
    rng = np.random.default_rng(2)
    W = rng.standard_normal((data.V, data.d))
    loss = train_mod._Loss(data)
    gen = torch.Generator().manual_seed(0)
    batch = 20000
    estimate = loss.batch(torch.tensor(W), batch, gen).item()
    logq = theory.log_probs(data, W)
    per_context = -np.asarray(data.probs.multiply(logq).sum(axis=1)).ravel()  # CE_j
    ce = theory.cross_entropy(data, W)
    assert data.weights @ per_context == pytest.approx(ce, rel=1e-12)
    sigma = np.sqrt(data.weights @ (per_context - ce) ** 2 / batch)
    assert abs(estimate - ce) < 5 * sigma
    # weights matter: with all mass on context 0 the estimate is that context's CE
    skewed = NTPData(data.embeddings, data.probs, np.r_[1 - 1e-12, np.full(data.m - 1, 1e-12 / (data.m - 1))])
    one = train_mod._Loss(skewed).batch(torch.tensor(W), 50, gen).item()
    assert one == pytest.approx(per_context[0], rel=1e-12)


# -- optimizers ------------------------------------------------------------------------------------

def test_gd_and_ngd_updates_match_their_formulas(data):
    W0 = np.random.default_rng(3).standard_normal((data.V, data.d)) / np.sqrt(data.d)
    lr = 0.1
    W = W0.copy()
    for _ in range(3):
        W = W - lr * theory.gradient(data, W)
    gd = train(data, "gd", lr=lr, steps=3, init=W0, reference=False, progress=False)
    np.testing.assert_allclose(gd.W, W, rtol=1e-12, atol=1e-14)
    # normalized GD: each step has length lr (up to eps), in the direction -∇CE
    ngd = train(data, "ngd", lr=0.05, steps=1, init=W0, reference=False, progress=False)
    g = theory.gradient(data, W0)
    np.testing.assert_allclose(ngd.W, W0 - 0.05 * g / (np.linalg.norm(g) + 1e-8), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("optimizer", ["gd", "ngd", "adam"])
def test_tiny_lr_decreases_ce_monotonically(data, optimizer):
    lr = 1e-3 / theory.smoothness(data)
    tr = train(data, optimizer, lr=lr, steps=200, record_every=1, reference=False, progress=False)
    ce = tr["ce"]
    assert tr["step"].tolist() == list(range(201))
    assert np.all(np.diff(ce) < 0)
    assert tr.meta["lr"] == lr and tr.meta["optimizer"] == optimizer


@pytest.mark.parametrize("optimizer", ["gd", "ngd"])
def test_gd_and_ngd_freeze_null_space_and_column_sums(wide, optimizer):
    W0 = np.random.default_rng(5).standard_normal((wide.V, wide.d)) / np.sqrt(wide.d)
    N = _null_projector(wide)
    assert np.linalg.norm(W0 @ N) > 0.5  # the frozen component is there to be kept
    tr = train(wide, optimizer, steps=200, init=W0, record_every=200, reference=False, progress=False)
    assert np.linalg.norm(tr.W - W0) > 1.0  # W did move
    np.testing.assert_allclose(tr.W @ N, W0 @ N, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tr.W.sum(axis=0), W0.sum(axis=0), rtol=0, atol=1e-12)


def test_adam_moves_the_null_space_component(wide):
    W0 = np.random.default_rng(5).standard_normal((wide.V, wide.d)) / np.sqrt(wide.d)
    N = _null_projector(wide)
    tr = train(wide, "adam", steps=200, init=W0, record_every=200, reference=False, progress=False)
    assert np.linalg.norm(tr.W @ N - W0 @ N) > 0.5


def test_gd_from_zero_follows_the_theory_qualitatively(data, ref):
    L = theory.smoothness(data)
    tr = train(data, "gd", steps=1000, init="zeros", reference=ref, progress=False)
    assert tr.meta["lr"] == pytest.approx(1 / (2 * L))
    assert tr.meta["reference"] == "given"
    assert tr.meta["entropy"] == pytest.approx(theory.entropy(data))
    kl, norm, cos = tr["kl_gap"], tr["norm"], tr["cos_mm"]
    assert np.all(np.diff(kl) < 0)
    assert np.all(np.diff(norm) > 0)
    assert np.isnan(cos[0])  # W_0 = 0 has no direction
    step = tr["step"]
    early = cos[step == 10][0]
    assert cos[-1] > early + 0.2 and cos[-1] > 0.8
    assert np.all(np.diff(tr["subspace_error"]) < 0)
    assert tr["subspace_error"][0] == pytest.approx(1.0)  # P_F(0) = 0
    assert tr["margin"][-1] > 0  # P_perp(W) separates in- from out-of-support tokens
    # the recorded numbers are those of the returned W, and the gap is a KL, not CE - H
    last = tr.last
    assert last["step"] == 1000
    assert last["ce"] == theory.cross_entropy(data, tr.W)
    assert last["kl_gap"] == theory.kl_gap(data, tr.W)
    assert last["kl_gap"] == pytest.approx(last["ce"] - tr.meta["entropy"], abs=1e-12)
    assert last["norm"] == pytest.approx(np.linalg.norm(tr.W), rel=1e-14)
    Ws, Wmm, W = ref.w_star, ref.w_mm, tr.W

    def cos(a, b):
        return np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b))

    assert last["cos_mm"] == pytest.approx(cos(W, Wmm), rel=1e-12)
    assert last["cos_corrected"] == pytest.approx(cos(W - Ws, Wmm), rel=1e-12)
    assert last["subspace_error"] == pytest.approx(
        np.linalg.norm(ref.F.project(W) - Ws) / np.linalg.norm(Ws), rel=1e-10)
    assert last["margin"] == pytest.approx(theory.ntp_margin(data, W, ref.F), rel=1e-12)
    # as in the digest's ballpark table: subtracting W* improves the alignment
    assert last["cos_corrected"] > last["cos_mm"]


def test_reference_is_computed_when_not_given(data, ref):
    tr = train(data, "ngd", steps=5, reference=None, progress=False)
    assert tr.meta["reference"] == "computed"
    assert tr.meta["w_mm_norm"] == pytest.approx(np.linalg.norm(ref.w_mm), rel=1e-6)
    assert {"cos_mm", "cos_corrected", "subspace_error", "margin"} <= set(tr.last)


def test_not_separable_skips_alignment_metrics():
    # two contexts with the same embedding but different supports: no W separates them
    bad = NTPData([[1.0, 0.0], [1.0, 0.0]], [[0.7, 0.3, 0.0], [0.0, 0.4, 0.6]])
    with pytest.raises(NotSeparableError):
        compute_reference(bad)
    tr = train(bad, "gd", steps=20, progress=False)
    assert tr.meta["reference"].startswith("skipped") and "separable" in tr.meta["reference"]
    assert set(tr.last) == {"step", "ce", "kl_gap", "norm"}


def test_init_options(data):
    a = train(data, "gd", steps=0, seed=3, progress=False, reference=False)
    b = train(data, "gd", steps=0, seed=3, progress=False, reference=False)
    c = train(data, "gd", steps=0, seed=4, progress=False, reference=False)
    assert len(a) == 1 and a.last["step"] == 0 and a.W.shape == (data.V, data.d)
    np.testing.assert_array_equal(a.W, b.W)
    assert not np.allclose(a.W, c.W)
    assert np.std(a.W) == pytest.approx(1 / np.sqrt(data.d), rel=0.2)  # LeCun normal N(0, 1/d)
    W0 = np.ones((data.V, data.d))
    tr = train(data, "gd", steps=3, init=W0, progress=False, reference=False)
    assert np.all(W0 == 1.0)  # the given array is copied, not trained in place
    assert tr.rows[0]["norm"] == pytest.approx(np.linalg.norm(W0))
    z = train(data, "gd", steps=0, init="zeros", progress=False, reference=False)
    assert not np.any(z.W)


def test_sgd_is_reproducible_from_its_seed(data):
    kw = dict(steps=50, batch_size=4, init="zeros", record_every=10, reference=False, progress=False)
    a = train(data, "sgd", seed=7, **kw)
    b = train(data, "sgd", seed=7, **kw)
    c = train(data, "sgd", seed=8, **kw)
    assert a.rows == b.rows
    np.testing.assert_array_equal(a.W, b.W)
    assert not np.allclose(a.W, c.W)  # same init: only the sampled contexts differ
    assert a.meta["batch_size"] == 4
    assert a.last["ce"] < a.rows[0]["ce"]


def test_threads_are_restored(data):
    before = torch.get_num_threads()
    train(data, "gd", steps=2, threads=1, reference=False, progress=False)
    assert torch.get_num_threads() == before


# -- warnings, errors, interruption ---------------------------------------------------------------

def test_lr_above_two_over_L_warns(data):
    L = theory.smoothness(data)
    with pytest.warns(StepSizeWarning, match=r"2/L") as rec:
        train(data, "gd", lr=2.5 / L, steps=1, reference=False, progress=False)
    assert "embedding scale" in str(rec[0].message)
    with pytest.warns(StepSizeWarning):
        train(data, "sgd", lr=2.5 / L, steps=1, batch_size=2, reference=False, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepSizeWarning)
        train(data, "gd", lr=1.9 / L, steps=1, reference=False, progress=False)  # below 2/L: quiet
        train(data, "ngd", lr=10.0, steps=1, reference=False, progress=False)  # NGD: no such bound


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"optimizer": "sgdm"}, InputError, "optimizer"),
    ({"lr": -0.1}, InputError, "lr"),
    ({"lr": 0.0}, InputError, "lr"),
    ({"lr": float("nan")}, InputError, "lr"),
    ({"init": np.zeros((3, 3))}, ShapeError, "init"),
    ({"init": "xavier"}, InputError, "init"),
    ({"steps": -1}, InputError, "steps"),
    ({"record_every": 0}, InputError, "record_every"),
    ({"record_every": "linear"}, InputError, "record_every"),
    ({"seed": None}, InputError, "seed"),
    ({"batch_size": 4}, InputError, "batch_size"),  # only for sgd
    ({"optimizer": "sgd", "batch_size": 0}, InputError, "batch_size"),
    ({"betas": (1.0, 0.9)}, InputError, "betas"),
    ({"eps": 0.0}, InputError, "eps"),
    ({"threads": 0}, InputError, "threads"),
    ({"reference": {"w_star": 0}}, InputError, "reference"),
])
def test_bad_inputs_name_the_field(data, kwargs, error, field):
    with pytest.raises(error, match=field):
        train(data, **{"steps": 1, "progress": False, **kwargs})


def test_reference_shapes_are_checked(data, ref):
    with pytest.raises(ShapeError, match=r"reference.w_mm"):
        ref.replace(w_mm=np.zeros((data.V + 1, data.d)))
    with pytest.raises(InputError, match=r"reference.w_mm: is zero"):
        ref.replace(w_mm=np.zeros_like(ref.w_mm))
    other = compute_reference(synthetic(m=20, V=8, d=31, support_size=4, seed=0))
    with pytest.raises(ShapeError, match="reference: built for data"):
        train(data, steps=1, reference=other, progress=False)
    with pytest.raises(InputError, match="Reference"):  # the old dict form is refused with the new name
        train(data, steps=1, reference={"w_star": ref.w_star, "w_mm": ref.w_mm, "F": ref.F}, progress=False)


def test_keyboard_interrupt_returns_partial_trace(data, monkeypatch):
    calls = {"n": 0}
    original = train_mod._Loss.full

    def interrupting(self, W):
        calls["n"] += 1
        if calls["n"] == 50:  # Ctrl-C during the 50th update, i.e. after 49 completed steps
            raise KeyboardInterrupt
        return original(self, W)

    monkeypatch.setattr(train_mod._Loss, "full", interrupting)
    threads = torch.get_num_threads()
    with pytest.warns(TrainingInterrupted, match="after 49 of 500 steps"):
        tr = train(data, "gd", steps=500, record_every=10, reference=False, progress=False)
    assert tr.interrupted is True
    assert tr.last["step"] == 49 < 500
    assert [r["step"] for r in tr.rows] == [0, 10, 20, 30, 40, 49]
    assert torch.get_num_threads() == threads
    monkeypatch.setattr(train_mod._Loss, "full", original)
    full = train(data, "gd", steps=49, record_every=10, reference=False, progress=False)
    assert not full.interrupted
    np.testing.assert_array_equal(tr.W, full.W)  # the partial trace holds W after 49 steps
    assert tr.last == full.last


# -- regularization paths -------------------------------------------------------------------------

def test_regularization_path_on_the_boundary_and_aligning(data, ref):
    norms = [0.5, 1.0, 2.0, 4.0, 8.0]
    path = regularization_path(data, norms, reference=ref)
    assert len(path) == 5 and path.kind == "norm"
    assert all(p.converged for p in path)
    np.testing.assert_allclose(path.column("norm"), norms, rtol=1e-6)
    assert np.all(np.diff(path.column("cos_mm")) > 0)
    assert np.all(np.diff(path.column("kl_gap")) < 0)
    assert np.all(np.diff(path.column("subspace_error")) < 0)
    for p in path:
        # KKT of min CE s.t. ‖W‖ ≤ B on the boundary: -∇CE(Ŵ_B) is a positive multiple of Ŵ_B
        g = theory.gradient(data, p.W)
        assert np.sum(g * p.W) / (np.linalg.norm(g) * p.norm) < -1 + 1e-8
        assert p.kl_gap == pytest.approx(theory.kl_gap(data, p.W))
    df = path.to_frame()
    assert df.columns[0] == "B" and "W" not in df.columns and len(df) == 5


def test_ridge_path_aligns_and_is_optimal(data, ref):
    lambdas = np.logspace(-1, -4, 4)
    path = ridge_path(data, lambdas, reference=ref)
    assert path.kind == "ridge" and all(p.converged for p in path)
    assert np.all(np.diff(path.column("cos_mm")) > 0)
    assert np.all(np.diff(path.column("norm")) > 0)
    for lam, p in zip(lambdas, path, strict=True):
        residual = np.linalg.norm(theory.gradient(data, p.W) + lam * p.W)
        assert residual < 1e-8
        assert p.residual == pytest.approx(residual, rel=1e-6, abs=1e-15)
    assert path.to_frame().columns[0] == "lambda"


def test_ridge_and_norm_paths_agree(data):
    """Lagrangian duality: Ŵ_λ is the norm-constrained minimizer for B = ‖Ŵ_λ‖."""
    ridge = ridge_path(data, [1e-2], reference=False)[0]
    ball = regularization_path(data, [ridge.norm], reference=False)[0]
    assert np.isnan(ball.cos_mm)  # reference=False: no alignment metrics
    np.testing.assert_allclose(ball.W, ridge.W, atol=1e-7 * ridge.norm)


@pytest.mark.parametrize("norms", [[1.0, 1.0], [2.0, 1.0], [-1.0, 2.0], [1.0, np.inf], []])
def test_regularization_path_validates_norms(data, norms):
    with pytest.raises(InputError, match="norms"):
        regularization_path(data, norms, reference=False)


@pytest.mark.parametrize("lambdas", [[1e-3, 1e-2], [0.0], [1e-2, -1e-3]])
def test_ridge_path_validates_lambdas(data, lambdas):
    with pytest.raises(InputError, match="lambdas"):
        ridge_path(data, lambdas, reference=False)
