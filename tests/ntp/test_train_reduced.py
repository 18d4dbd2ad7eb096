"""Reduced training (``train(..., reduce_unseen=True)``): the seen rows plus one shared row for the tokens that
are never a next token, against full training of W (V, d) on the same data (issue 38).

The instances have V = 30 tokens of which only 8 are ever a next token (22 never are): the shared row carries
|U| = 22 copies, which the softmax (log|U| offset), the NGD norm and the metrics' norms must all count.
"""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from embgeo.errors import InputError
from embgeo.ntp import NTPData
from embgeo.ntp.measure import metrics as metrics_mod
from embgeo.ntp.measure.metrics import REFERENCE_METRICS, compute_reference, constrained_alignment
from embgeo.ntp.training import train as train_mod
from embgeo.ntp.training.train import train


def _data(m=20, V=30, seen=8, d=6, S=3, seed=0):
    """m contexts whose supports (S tokens each) are drawn from `seen` scattered token ids of V."""
    rng = np.random.default_rng(seed)
    tokens = np.sort(rng.choice(V, size=seen, replace=False))
    rows, cols, vals = [], [], []
    for j in range(m):
        sup = rng.choice(tokens, size=S, replace=False)
        rows += [j] * S
        cols += list(sup)
        vals += list(rng.dirichlet(np.ones(S)))
    P = sp.csr_matrix((vals, (rows, cols)), shape=(m, V))
    H = rng.standard_normal((m, d))
    return NTPData(H, P, rng.dirichlet(np.ones(m) * 5))


@pytest.fixture(scope="module")
def small():
    """d = 6 < m = 20: no W*, no W^mm to compare with; the trajectories and the loss alone."""
    return _data()


@pytest.fixture(scope="module")
def wide():
    """d = 24 > m = 20: compatible and separable (Lemma 1), so every reference metric exists."""
    data = _data(d=24)
    return data, compute_reference(data)


OPTS = [("gd", None, {}), ("ngd", 0.05, {}), ("adam", 0.05, {}), ("sgd", None, {"batch_size": 3})]
COLUMNS = ("ce", "kl_gap", "norm", *REFERENCE_METRICS)


def _close(a, b, tol=1e-10):
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def _compare(full, red, columns):
    assert [r["step"] for r in full.rows] == [r["step"] for r in red.rows]
    for rf, rr in zip(full.rows, red.rows, strict=True):
        for c in columns:
            assert _close(rf[c], rr[c]), (rf["step"], c, rf[c], rr[c])


@pytest.mark.parametrize("opt, lr, kw", OPTS)
def test_reduced_trajectories_equal_full_training(small, opt, lr, kw):
    assert small.V - np.unique(small.probs.indices).size == 22
    full = train(small, opt, lr, steps=60, init="zeros", reference=False, progress=False, **kw)
    red = train(small, opt, lr, steps=60, init="zeros", reference=False, progress=False, reduce_unseen=True,
                expand=True, **kw)
    _compare(full, red, ("ce", "kl_gap", "norm"))
    scale = max(1.0, float(np.abs(full.W).max()))
    np.testing.assert_allclose(red.W, full.W, rtol=0, atol=1e-10 * scale)
    seen, unseen = red.reduced.seen, red.reduced.unseen
    assert red.W_reduced.shape == (9, 6)
    # (iii) in the full run: the unseen rows get the same updates, so they stay equal — to rounding, not bitwise: the
    # GEMM kernel may sum two rows in different orders (on an AVX-512 machine they were 1e-17–1e-16 apart after 60
    # steps, on the earlier machines bitwise equal); an update that differed between them would part them by far more
    np.testing.assert_allclose(full.W[unseen], np.broadcast_to(full.W[unseen[0]], full.W[unseen].shape), rtol=0,
                               atol=1e-12 * scale)
    np.testing.assert_allclose(red.W_reduced[:8], full.W[seen], atol=1e-10)
    assert red.meta["reduced"] == {"seen_tokens": 8, "unseen_tokens": 22, "rows": 9}


@pytest.mark.parametrize("opt, lr, kw", OPTS)
def test_reduced_metrics_equal_full_metrics(wide, opt, lr, kw):
    data, ref = wide
    full = train(data, opt, lr, steps=40, init="zeros", reference=ref, progress=False, **kw)
    red = train(data, opt, lr, steps=40, init="zeros", reference=ref, progress=False, reduce_unseen=True,
                expand=True, **kw)
    assert not any(math.isnan(full.rows[-1][c]) for c in COLUMNS)
    _compare(full, red, COLUMNS)
    # the constrained-row cosines of the record are those of the probe's measurement on the expanded W
    a = constrained_alignment(data, red.W, w_star=ref.w_star, w_mm=ref.w_mm, F=ref.F)
    last = red.rows[-1]
    assert last["rows_cos_corrected"] == pytest.approx(a["rows_cos_corrected"], abs=1e-10)
    assert last["rows_cos_mm"] == pytest.approx(a["rows_cos_mm"], abs=1e-10)
    assert last["rows_cos_mm_lo"] == last["rows_cos_mm"] == last["rows_cos_mm_hi"]  # an exact W^mm: no band


def test_expand_only_on_request(small):
    red = train(small, "gd", steps=3, init="zeros", reference=False, progress=False, reduce_unseen=True)
    assert red.W is None and red.W_reduced.shape == (9, 6)
    np.testing.assert_array_equal(red.reduced.expand(red.W_reduced)[red.reduced.seen], red.W_reduced[:8])


def test_init_must_have_equal_unseen_rows(small):
    with pytest.raises(InputError, match="lecun"):
        train(small, "gd", steps=1, reduce_unseen=True, progress=False)
    W0 = np.zeros((small.V, small.d))
    unseen = np.setdiff1d(np.arange(small.V), small.probs.indices)
    W0[unseen[0], 0] = 1.0
    with pytest.raises(InputError, match="differ"):
        train(small, "gd", steps=1, init=W0, reduce_unseen=True, progress=False)
    W0[unseen] = np.arange(small.d) * 0.1  # equal unseen rows, not zero, and random seen rows: accepted and exact
    W0[np.unique(small.probs.indices)] = np.random.default_rng(3).standard_normal((8, small.d))
    full = train(small, "ngd", 0.05, steps=30, init=W0, reference=False, progress=False)
    red = train(small, "ngd", 0.05, steps=30, init=W0, reference=False, progress=False, reduce_unseen=True)
    _compare(full, red, ("ce", "kl_gap", "norm"))


class _NoLogU(metrics_mod.ReducedProblem):
    """The shared row entering the softmax once (no log|U|): the wrong problem."""

    def __init__(self, data):
        super().__init__(data)
        self.bias = np.zeros_like(self.bias)


class _NormOnce(metrics_mod.ReducedProblem):
    """The shared row counted once in the norms (the NGD normalization): the wrong problem."""

    def __init__(self, data):
        super().__init__(data)
        self.multiplicity = np.ones_like(self.multiplicity)


@pytest.mark.parametrize("wrong, opt, lr", [(_NoLogU, "gd", None), (_NoLogU, "adam", 0.05), (_NormOnce, "ngd", 0.05)])
def test_a_wrong_multiplicity_is_caught(small, monkeypatch, wrong, opt, lr):
    """Negative control: the comparison above fails when |U| is left out of the softmax or of the NGD norm."""
    full = train(small, opt, lr, steps=60, init="zeros", reference=False, progress=False)
    monkeypatch.setattr(train_mod, "ReducedProblem", wrong)
    red = train(small, opt, lr, steps=60, init="zeros", reference=False, progress=False, reduce_unseen=True,
                expand=True)
    assert np.max(np.abs(red.W - full.W)) > 1e-4
