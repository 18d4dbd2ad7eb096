import math

import numpy as np
import pytest

from embgeo.collapse import CollapseData, generate, make_freqs, symmetry_diagnostic
from embgeo.errors import DistributionError, InputError, ShapeError, TooLargeError


def test_shapes_ids_and_concepts():
    d = generate(3, 7, 5, 11, n_train_per_class=4, n_test_per_class=2, seed=1)
    assert d.train_x.shape == (44, 5) and d.train_y.shape == (44,)
    assert d.test_x.shape == (22, 5) and d.test_y.shape == (22,)
    assert d.train_x.dtype == np.int64 and d.latent.shape == (11, 5)
    assert d.n_words == 21 and d.n_classes == 11
    assert np.array_equal(d.word_concept * 7 + d.word_rank, np.arange(21))
    # the concept of every word of a class-k sentence equals z_k at that position
    for x, y in ((d.train_x, d.train_y), (d.test_x, d.test_y)):
        assert np.array_equal(d.word_concept[x], d.latent[y])
        assert np.array_equal(np.bincount(y), np.full(11, len(y) // 11))
    assert not d.train_x.flags.writeable


def test_seeded_and_reproducible():
    a = generate(3, 20, 6, 30, freqs="zipf", seed=5)
    b = generate(3, 20, 6, 30, freqs="zipf", seed=5)
    c = generate(3, 20, 6, 30, freqs="zipf", seed=6)
    assert np.array_equal(a.train_x, b.train_x) and np.array_equal(a.test_x, b.test_x)
    assert np.array_equal(a.latent, b.latent)
    assert not np.array_equal(a.train_x, c.train_x)
    # test sentences are fresh draws from the same latent sequences
    assert not np.array_equal(a.train_x[:30], a.test_x[:30])


@pytest.mark.parametrize("freqs", ["uniform", "zipf", ("power", 2.0), "explicit"])
def test_word_frequencies_match_mu(freqs):
    s_c = 8
    if freqs == "explicit":
        freqs = np.array([0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])
    d = generate(2, s_c, 10, 20, freqs=freqs, n_train_per_class=500, n_test_per_class=0, seed=3)
    ranks = d.word_rank[d.train_x].ravel()
    n = ranks.size
    counts = np.bincount(ranks, minlength=s_c)
    expected = n * d.freqs
    # 5-sigma binomial bound per rank, and a chi-square statistic far below its 1e-6 quantile
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(n * d.freqs * (1 - d.freqs)))
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 45.0  # chi2(7) has P(> 45) < 1e-6


def test_freq_laws():
    mu, name = make_freqs("zipf", 400)
    assert name == "zipf" and math.isclose(mu.sum(), 1.0)
    assert math.isclose(mu[0], 0.152209, rel_tol=1e-5) and math.isclose(mu[-1], 3.805e-4, rel_tol=1e-3)
    mu2, _ = make_freqs(("power", 1), 400)
    assert np.allclose(mu, mu2)
    assert np.allclose(make_freqs("uniform", 4)[0], 0.25)
    assert np.allclose(make_freqs(("power", 0), 4)[0], 0.25)


def test_distinct_latents_have_disjoint_supports():
    d = generate(2, 3, 4, 16, latent="distinct", n_train_per_class=3, seed=0)  # all 16 = 2^4 sequences
    assert len(np.unique(d.latent, axis=0)) == 16
    d = generate(3, 5, 6, 200, latent="distinct", n_train_per_class=3, seed=0)
    assert len(np.unique(d.latent, axis=0)) == 200
    assert symmetry_diagnostic(d.latent, 3).n_duplicate_pairs == 0
    # supports disjoint: a sentence determines its class through its concept sequence
    concepts = d.word_concept[d.train_x]
    keys = {tuple(z): k for k, z in enumerate(d.latent)}
    assert all(keys[tuple(c)] == y for c, y in zip(concepts, d.train_y, strict=True))


def test_all_latents_satisfy_assumption_1_exactly():
    d = generate(3, 2, 4, 81, latent="all", n_train_per_class=1, seed=0)
    assert len(np.unique(d.latent, axis=0)) == 81
    rep = symmetry_diagnostic(d.latent, 3)
    assert rep.max_rel_deviation == 0.0 and rep.mean_rel_deviation == 0.0 and rep.exact
    assert rep.n_duplicate_pairs == 0
    rep = symmetry_diagnostic(generate(2, 2, 5, 32, latent="all", seed=0).latent, 2)
    assert rep.exact


def test_random_latents_duplicates_counted_and_deviation_positive():
    d = generate(2, 3, 3, 40, latent="random", seed=0)  # 40 draws from 8 sequences
    rep = symmetry_diagnostic(d.latent, 2)
    _, counts = np.unique(d.latent, axis=0, return_counts=True)
    assert rep.n_duplicate_pairs == int(np.sum(counts * (counts - 1) // 2)) > 0
    assert rep.max_rel_deviation > 0
    # hand-made example: two identical rows and one other
    Z = np.array([[0, 1], [0, 1], [1, 1]])
    assert symmetry_diagnostic(Z, 2).n_duplicate_pairs == 1


def test_symmetry_counts_by_brute_force():
    rng = np.random.default_rng(0)
    Z = rng.integers(0, 3, size=(12, 4))
    K, L, n_c = 12, 4, 3
    devs = []
    for k in range(K):
        for r in range(1, L + 1):
            for ell in range(L):
                for a in range(n_c):
                    cnt = sum(1 for j in range(K) if np.sum(Z[j] != Z[k]) == r and Z[j, ell] == a)
                    if Z[k, ell] == a:
                        ideal = K / n_c**L * math.comb(L - 1, r) * (n_c - 1) ** r
                    else:
                        ideal = K / n_c**L * math.comb(L - 1, r - 1) * (n_c - 1) ** (r - 1)
                    if ideal > 0:
                        devs.append(abs(cnt - ideal) / ideal)
    rep = symmetry_diagnostic(Z, 3)
    assert math.isclose(rep.max_rel_deviation, max(devs)) and math.isclose(rep.mean_rel_deviation, np.mean(devs))


@pytest.mark.parametrize(("kwargs", "err", "field"), [
    ({"n_concepts": 0}, InputError, "n_concepts"),
    ({"words_per_concept": 2.5}, InputError, "words_per_concept"),
    ({"length": -1}, InputError, "length"),
    ({"n_classes": True}, InputError, "n_classes"),
    ({"n_train_per_class": 0}, InputError, "n_train_per_class"),
    ({"n_test_per_class": -1}, InputError, "n_test_per_class"),
    ({"freqs": "zipff"}, InputError, "freqs"),
    ({"freqs": ("power", -1)}, InputError, "freqs"),
    ({"freqs": [0.5, 0.5]}, ShapeError, "freqs"),
    ({"freqs": [0.5, 0.5, 0.0, 0.0]}, DistributionError, "freqs"),
    ({"freqs": [0.5, 0.5, 0.5, 0.5]}, DistributionError, "freqs"),
    ({"freqs": [0.5, np.nan, 0.0, 0.5]}, InputError, "freqs"),
    ({"latent": "unique"}, InputError, "latent"),
    ({"latent": "all"}, InputError, "n_classes"),
    ({"latent": "distinct", "n_classes": 100}, InputError, "n_classes"),
    ({"seed": None}, InputError, "seed"),
])
def test_bad_inputs_name_the_field(kwargs, err, field):
    base = {"n_concepts": 3, "words_per_concept": 4, "length": 4, "n_classes": 10}
    with pytest.raises(err, match=field):
        generate(**{**base, **kwargs})


def test_all_refuses_huge():
    with pytest.raises(TooLargeError, match="latent"):
        generate(3, 4, 15, 3**15, latent="all")


def test_symmetry_diagnostic_bad_inputs():
    with pytest.raises(InputError, match="latent"):
        symmetry_diagnostic(np.array([[0, 3]]), 3)
    with pytest.raises(ShapeError, match="latent"):
        symmetry_diagnostic(np.array([0, 1]), 3)
    with pytest.raises(InputError, match="n_concepts"):
        symmetry_diagnostic(np.array([[0, 1]]), 0)


def test_collapsedata_validates():
    d = generate(3, 4, 5, 6, seed=0)
    with pytest.raises(InputError, match="train_x"):
        CollapseData(3, 4, 5, d.freqs, d.latent, d.train_x + 100, d.train_y, d.test_x, d.test_y)
    with pytest.raises(ShapeError, match="train_y"):
        CollapseData(3, 4, 5, d.freqs, d.latent, d.train_x, d.train_y[:-1], d.test_x, d.test_y)
    with pytest.raises(ShapeError, match="freqs"):
        CollapseData(3, 4, 5, d.freqs[:2], d.latent, d.train_x, d.train_y, d.test_x, d.test_y)
