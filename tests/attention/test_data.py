"""Token statistics (eqs. 3, 18) and the generators (eqs. 14-16, Assumption 1) of the attention paper."""

from __future__ import annotations

import numpy as np
import pytest

from embgeo.attention.data import (
    PAPER_DELTA_TILDE,
    PAPER_DELTAS,
    PAPER_N_IRRELEVANT,
    assumption1_data,
    level_sizes,
    level_token_law,
    posterior_difference,
    signed_frequency,
    synthetic_levels,
    token_counts,
)
from embgeo.errors import InputError, ShapeError

# Hand example: V = 5, n = 3, T = 4, N = nT = 12 tokens.
#   pos counts (rows 0, 2): token 0: 1+2, token 1: 2+1, token 2: 1+1  -> [3, 3, 2, 0, 0]
#   neg counts (row 1):     token 1: 1, token 2: 1, token 3: 2        -> [0, 1, 1, 2, 0]
X_HAND = np.array([[0, 1, 1, 2], [1, 2, 3, 3], [0, 0, 2, 1]])
Y_HAND = np.array([1, -1, 1])
ALPHA_HAND = np.array([3, 2, 1, -2, 0]) / 12
POSTDIFF_HAND = np.array([1.0, 2 / 4, 1 / 3, -1.0, 0.0])


# -- token statistics ---------------------------------------------------------------------------

def test_token_counts_hand_example():
    pos, neg = token_counts(X_HAND, Y_HAND, 5)
    assert pos.tolist() == [3, 3, 2, 0, 0]
    assert neg.tolist() == [0, 1, 1, 2, 0]


def test_signed_frequency_hand_example():
    alpha = signed_frequency(X_HAND, Y_HAND, 5)
    assert alpha.dtype == np.float64 and alpha.shape == (5,)
    np.testing.assert_allclose(alpha, ALPHA_HAND, rtol=0, atol=1e-15)


def test_signed_frequency_accepts_float_labels_and_lists():
    alpha = signed_frequency(X_HAND.tolist(), [1.0, -1.0, 1.0], 5)
    np.testing.assert_allclose(alpha, ALPHA_HAND, rtol=0, atol=1e-15)


def test_posterior_difference_hand_example():
    post = posterior_difference(X_HAND, Y_HAND, 5)
    # token 4 never occurs: 0 by convention, not NaN
    np.testing.assert_allclose(post, POSTDIFF_HAND, rtol=0, atol=1e-15)
    assert np.all(np.isfinite(post))


@pytest.mark.parametrize("pad_id", [-1, 7, 4])
def test_padding_is_ignored(pad_id):
    # pad_id outside the vocabulary (-1, 7) or inside it (4, a token that never occurs anyway)
    X_pad = np.full((3, 7), pad_id)
    X_pad[:, [0, 2, 3, 6]] = X_HAND
    alpha = signed_frequency(X_pad, Y_HAND, 5, pad_id=pad_id)
    np.testing.assert_allclose(alpha, ALPHA_HAND, rtol=0, atol=1e-15)  # divides by 12, not 21
    post = posterior_difference(X_pad, Y_HAND, 5, pad_id=pad_id)
    np.testing.assert_allclose(post, POSTDIFF_HAND, rtol=0, atol=1e-15)


def test_variable_lengths_use_actual_token_count():
    # lengths 2 and 1 -> N = 3 tokens; pos = [1, 1], neg = [0, 1]
    X = [[0, 1, -1], [1, -1, -1]]
    np.testing.assert_allclose(signed_frequency(X, [1, -1], 2, pad_id=-1), [1 / 3, 0.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(posterior_difference(X, [1, -1], 2, pad_id=-1), [1.0, 0.0], rtol=0, atol=1e-15)


def test_pad_id_inside_vocabulary_gets_zero():
    # id 0 is the pad: its many occurrences must not count, and alpha divides by the 3 real tokens
    X = [[1, 1, 0, 0], [2, 0, 0, 0]]
    alpha = signed_frequency(X, [1, -1], 3, pad_id=0)
    np.testing.assert_allclose(alpha, [0.0, 2 / 3, -1 / 3], rtol=0, atol=1e-15)


# -- bad inputs ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("X", "y", "vocab_size", "pad_id", "error", "match"),
    [
        pytest.param(X_HAND, [1, 0, 1], 5, None, InputError, r"y: expected labels in \{-1, \+1\}.*2\*y - 1",
                     id="zero-one-labels"),
        pytest.param(X_HAND, [1, 2, 1], 5, None, InputError, r"y: expected labels", id="label-2"),
        pytest.param(X_HAND, np.array([True, False, True]), 5, None, InputError, r"y: .*boolean", id="bool-y"),
        pytest.param(X_HAND, [1, -1], 5, None, ShapeError, r"y: expected 3 labels", id="y-length"),
        pytest.param(X_HAND, [1, np.nan, 1], 5, None, InputError, r"y: entries must be finite", id="nan-y"),
        pytest.param(X_HAND.astype(float), Y_HAND, 5, None, InputError, r"X: expected an integer array",
                     id="float-X"),
        pytest.param(X_HAND[0], Y_HAND[:1], 5, None, ShapeError, r"X: expected a 2-D", id="1d-X"),
        pytest.param([[0, 1], [1]], [1, -1], 5, None, ShapeError, r"X: .*pad_id", id="ragged-X"),
        pytest.param(X_HAND, Y_HAND, 3, None, InputError, r"X: token ids must lie in \[0, vocab_size=3\)",
                     id="id-too-large"),
        pytest.param([[0, -1]], [1], 5, None, InputError, r"X: token ids .* found -1", id="negative-id"),
        pytest.param([[-1, -1]], [1], 5, -1, InputError, r"X: every entry equals pad_id", id="all-pad"),
        pytest.param(X_HAND, Y_HAND, 0, None, InputError, r"vocab_size", id="vocab-size-0"),
        pytest.param(X_HAND, Y_HAND, 5, 1.5, InputError, r"pad_id", id="float-pad"),
    ],
)
@pytest.mark.parametrize("fn", [signed_frequency, posterior_difference, token_counts])
def test_bad_inputs_name_the_field(fn, X, y, vocab_size, pad_id, error, match):
    with pytest.raises(error, match=match):
        fn(X, y, vocab_size, pad_id=pad_id)


# -- K-level model (eqs. 14-16) -----------------------------------------------------------------

def test_level_sizes_add_up_corrected_and_printed():
    corrected = level_sizes(8, "corrected")
    printed = level_sizes(8, "printed")
    assert corrected.tolist() == [6, 8, 12, 20, 36, 68, 132, 260]
    assert printed.tolist() == [5, 6, 8, 12, 20, 36, 68, 132]
    assert PAPER_N_IRRELEVANT + 2 * corrected.sum() == 2048  # |S| stated in the paper
    assert PAPER_N_IRRELEVANT + 2 * printed.sum() == 1538


@pytest.mark.parametrize(("reading", "vocab"), [("corrected", 2048), ("printed", 1538)])
def test_level_labels_layout(reading, vocab):
    _, levels = level_token_law(reading=reading)
    assert levels.shape == (vocab,)
    assert np.sum(levels == 0) == PAPER_N_IRRELEVANT
    sizes = level_sizes(8, reading)
    for k in range(1, 9):
        assert np.sum(levels == k) == np.sum(levels == -k) == sizes[k - 1]


def test_corrected_law_matches_eq15_and_posterior_eq16():
    probs, levels = level_token_law()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    N = 542
    d, dt = np.asarray(PAPER_DELTAS), PAPER_DELTA_TILDE
    s1p = np.flatnonzero(levels == 1)[0]  # a token of S_1^{+1}
    s8m = np.flatnonzero(levels == -8)[0]  # a token of S_8^{-1}
    np.testing.assert_allclose(probs[1, 0], (1 - dt) / PAPER_N_IRRELEVANT, rtol=1e-12)
    np.testing.assert_allclose(probs[1, s1p], dt * (1 - d[0]) / N, rtol=1e-12)
    np.testing.assert_allclose(probs[0, s1p], dt * d[0] / N, rtol=1e-12)  # the δ̃ factor restored
    np.testing.assert_allclose(probs[0, s8m], dt * (1 - d[7]) / N, rtol=1e-12)
    # posterior (16) with uniform label prior: p(y=+1|s) = 1/2, 1 - δ_k, δ_k
    post_pos = probs[1] / probs.sum(axis=0)
    k = np.abs(levels)
    expected = np.where(levels == 0, 0.5, np.where(levels > 0, 1 - d[k - 1], d[k - 1]))
    np.testing.assert_allclose(post_pos, expected, rtol=1e-12)


def test_printed_law_is_renormalised_and_has_wrong_posterior():
    probs, levels = level_token_law(reading="printed")
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    d, dt = np.asarray(PAPER_DELTAS), PAPER_DELTA_TILDE
    s1p = np.flatnonzero(levels == 1)[0]
    post = probs[1, s1p] / (probs[0, s1p] + probs[1, s1p])
    np.testing.assert_allclose(post, dt * (1 - d[0]) / (dt * (1 - d[0]) + d[0]), rtol=1e-12)
    assert post < 0.1  # far from the 1 - δ_1 = 0.55 claimed by (16)
    # un-normalised mass of the printed law: 1 + (1 - δ̃) Σ_k |S_k| δ_k / N
    sizes = level_sizes(8, "printed")
    mass = 1 + (1 - dt) * np.dot(sizes, d) / sizes.sum()
    np.testing.assert_allclose(probs[1, 0], (1 - dt) / PAPER_N_IRRELEVANT / mass, rtol=1e-12)


def test_synthetic_levels_shapes_seed_and_posterior():
    data = synthetic_levels(2000, seed=3)
    X, y, levels = data
    assert X.shape == (2000, 256) and y.shape == (2000,) and levels.shape == (2048,)
    assert set(np.unique(y).tolist()) == {-1, 1}
    assert X.min() >= 0 and X.max() < 2048
    again = synthetic_levels(2000, seed=3)
    assert np.array_equal(again.X, X) and np.array_equal(again.y, y)
    assert not np.array_equal(synthetic_levels(2000, seed=4).X, X)
    # pooled posterior difference per level: sign(level) * (1 - 2 δ_k); 0 for S̃
    pos, neg = token_counts(X, y, 2048)
    for k in range(0, 9):
        for sign in ((1,) if k == 0 else (1, -1)):
            sel = levels == sign * k
            diff = (pos[sel].sum() - neg[sel].sum()) / (pos[sel].sum() + neg[sel].sum())
            expected = 0.0 if k == 0 else sign * (1 - 2 * PAPER_DELTAS[k - 1])
            assert abs(diff - expected) < 0.15, (k, sign, diff, expected)


def test_synthetic_levels_printed_reading_is_selectable():
    X, y, levels = synthetic_levels(50, seed=0, T=32, reading="printed")
    assert X.shape == (50, 32) and levels.shape == (1538,)
    assert X.max() < 1538


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reading": "typo"}, r"reading: expected one of"),
        ({"deltas": (0.1, 0.2)}, r"deltas: expected K=8"),
        ({"deltas": (0.0,) + PAPER_DELTAS[1:]}, r"deltas: expected values in \(0, 1\)"),
        ({"delta_tilde": 1.5}, r"delta_tilde"),
        ({"n_irrelevant": 0}, r"n_irrelevant"),
        ({"sizes": (1, 2)}, r"sizes: expected K=8"),
        ({"T": 0}, r"T: expected an integer"),
        ({"seed": None}, r"seed"),
    ],
)
def test_synthetic_levels_bad_inputs(kwargs, match):
    kwargs = {"seed": 0, **kwargs}
    with pytest.raises(InputError, match=match):
        synthetic_levels(10, **kwargs)


def test_synthetic_levels_custom_sizes():
    X, y, levels = synthetic_levels(20, seed=1, T=16, K=2, n_irrelevant=10, deltas=(0.4, 0.1), sizes=(3, 5))
    assert levels.tolist() == [0] * 10 + [1] * 3 + [-1] * 3 + [2] * 5 + [-2] * 5


# -- Assumption 1 -------------------------------------------------------------------------------

@pytest.mark.parametrize(("n_pairs", "T", "n_irr", "n_pos", "n_neg"), [(10, 6, 8, 1, 1), (25, 9, 5, 4, 7)])
def test_assumption1_data_satisfies_assumption(n_pairs, T, n_irr, n_pos, n_neg):
    X, y, important = assumption1_data(n_pairs, T, seed=11, n_irrelevant=n_irr, n_positive=n_pos,
                                       n_negative=n_neg)
    V = n_irr + n_pos + n_neg
    n = 2 * n_pairs
    assert X.shape == (n, T) and y.shape == (n,)
    assert np.sum(y == 1) == np.sum(y == -1) == n_pairs
    assert important.tolist() == list(range(n_irr, V))
    alpha = signed_frequency(X, y, V)
    irrelevant = np.setdiff1d(np.arange(V), important)
    assert np.all(alpha[irrelevant] == 0.0)  # exactly, not approximately
    pos, neg = token_counts(X, y, V)
    is_imp = np.isin(X, important)
    assert np.all(is_imp.sum(axis=1) == 1)  # exactly one important token per sequence
    s_star = X[is_imp]
    # its sign agrees with the label: completely positive in y=+1 rows, completely negative in y=-1
    assert np.all(np.sign(alpha[s_star]) == y)
    for s in important:
        assert (pos[s] == 0) != (neg[s] == 0)  # occurs, and in one class only
        assert alpha[s] == (pos[s] - neg[s]) / (n * T)
    assert np.all(np.abs(alpha[important]) >= 1 / (n * T))  # y α_{s*} >= 1/(nT)
    post = posterior_difference(X, y, V)
    assert np.all(np.abs(post[important]) == 1.0)
    pos_tokens = important[:n_pos]
    assert np.all(alpha[pos_tokens] > 0) and np.all(alpha[important[n_pos:]] < 0)


def test_assumption1_data_is_seeded():
    a = assumption1_data(6, 5, seed=2, n_positive=2)
    b = assumption1_data(6, 5, seed=2, n_positive=2)
    c = assumption1_data(6, 5, seed=3, n_positive=2)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)
    assert not np.array_equal(a.X, c.X)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((3, 5), {"n_positive": 4}, r"n_positive: expected at most n_pairs=3"),
        ((3, 5), {"n_negative": 9}, r"n_negative: expected at most"),
        ((0, 5), {}, r"n_pairs"),
        ((3, 1), {}, r"T: expected an integer >= 2"),
        ((3, 5), {"n_irrelevant": 0}, r"n_irrelevant"),
        ((3, 5), {"seed": None}, r"seed"),
    ],
)
def test_assumption1_data_bad_inputs(args, kwargs, match):
    kwargs = {"seed": 0, **kwargs}
    with pytest.raises(InputError, match=match):
        assumption1_data(*args, **kwargs)
