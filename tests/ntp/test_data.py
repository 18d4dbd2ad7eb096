"""NTPData validation, NTPData.from_sequences counting, reading text and token files, and the
synthetic / toy2d generators."""

from __future__ import annotations

import codecs
import math
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp

from embgeo.errors import DistributionError, InputError, ShapeError
from embgeo.ntp import NTPData, entropy, synthetic, toy2d
from embgeo.ntp.data import UNK, WORD_PATTERN, limit_vocabulary, read_text_file, read_token_file, split_words

H2 = np.eye(2)
P_OK = [[0.5, 0.5, 0.0], [0.0, 0.2, 0.8]]


# -- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("embeddings", "probs", "weights", "error", "match"),
    [
        pytest.param(H2, [[0.5, 0.5, 0.0], [0.0, 0.2, 0.7]], None, DistributionError, r"probs: row 1 sums to 0\.9",
                     id="row-sum"),
        pytest.param(H2, [[1.5, -0.5, 0.0], [0.0, 0.2, 0.8]], None, DistributionError, "probs: row 0 has a negative",
                     id="negative"),
        pytest.param(H2, [[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]], None, DistributionError,
                     "probs: row 1 has an empty support", id="empty-support"),
        pytest.param(H2, [[0.5, 0.5, 0.0], [0.0, np.nan, 1.0]], None, InputError, "probs: entries must be finite",
                     id="nan-probs"),
        pytest.param(H2, [[0.5, 0.5, 0.0], [0.0, np.inf, 1.0]], None, InputError, "probs: entries must be finite",
                     id="inf-probs"),
        pytest.param(np.array([[1.0, np.nan], [0.0, 1.0]]), P_OK, None, InputError,
                     "embeddings: entries must be finite", id="nan-embeddings"),
        pytest.param(np.array([[1.0, 0.0], [-np.inf, 1.0]]), P_OK, None, InputError,
                     "embeddings: entries must be finite", id="inf-embeddings"),
        pytest.param(np.eye(3), P_OK, None, ShapeError, "probs: expected 3 rows", id="probs-rows-vs-embeddings"),
        pytest.param(H2, P_OK, [0.5, 0.3, 0.2], ShapeError, r"weights: expected shape \(2,\)", id="weights-length"),
        pytest.param(H2, P_OK, [[0.5, 0.5]], ShapeError, "weights: expected a 1-D array", id="weights-2d"),
        pytest.param(H2, P_OK, [1.0, 0.0], DistributionError, "weights: entry 1 is 0.0", id="zero-weight"),
        pytest.param(H2, P_OK, [1.2, -0.2], DistributionError, "weights: entry 1 is -0.2", id="negative-weight"),
        pytest.param(H2, P_OK, [0.6, 0.6], DistributionError, r"weights: sum to 1\.2", id="weights-sum"),
        pytest.param(H2, P_OK, [np.nan, 0.5], InputError, "weights: entries must be finite", id="nan-weights"),
        pytest.param(np.ones(2), P_OK, None, ShapeError, "embeddings: expected a 2-D array", id="1d-embeddings"),
        pytest.param(np.ones((2, 0)), P_OK, None, ShapeError, "embeddings: expected shape", id="d=0"),
        pytest.param(np.eye(1), [[1.0]], None, ShapeError, "probs: the vocabulary needs at least 2 tokens", id="V<2"),
        pytest.param(H2, [0.5, 0.5], None, ShapeError, "probs: expected a 2-D array", id="1d-probs"),
        pytest.param(H2, P_OK, "abc", InputError, "weights: expected a numeric array", id="non-numeric-weights"),
    ],
)
def test_ntpdata_validation(embeddings, probs, weights, error, match):
    with pytest.raises(error, match=match):
        NTPData(embeddings, probs, weights)


def test_errors_are_value_errors():
    with pytest.raises(ValueError, match="probs"):
        NTPData(H2, [[0.5, 0.4, 0.0], [0.0, 0.2, 0.8]])


def test_sparse_nan_is_rejected():
    P = sp.csr_matrix(np.array([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]]))
    P.data[1] = np.nan
    with pytest.raises(DistributionError, match="probs: entries must be finite; row 0 has a NaN or infinite entry"):
        NTPData(H2, P)


def test_dense_nan_probs_raise_distribution_error():
    with pytest.raises(DistributionError):
        NTPData(H2, [[0.5, 0.5, 0.0], [0.0, np.nan, 1.0]])


def test_sparse_probs_accepted_and_equal_to_dense():
    rng = np.random.default_rng(0)
    P = np.where(rng.random((5, 7)) < 0.4, rng.random((5, 7)), 0.0)
    P[:, 0] += 0.1  # every row non-empty
    P /= P.sum(axis=1, keepdims=True)
    H = rng.standard_normal((5, 3))
    dense = NTPData(H, P)
    for fmt in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.lil_matrix):
        other = NTPData(H, fmt(P))
        assert sp.issparse(other.probs)
        np.testing.assert_array_equal(other.probs.toarray(), dense.probs.toarray())
        assert [s.tolist() for s in other.supports] == [s.tolist() for s in dense.supports]
        np.testing.assert_array_equal(other.anchors, dense.anchors)
    # Explicit zeros and duplicate entries in the sparse input: dropped and summed.
    coo = sp.coo_matrix((np.array([0.5, 0.5, 0.0, 1.0]), (np.array([0, 0, 0, 1]), np.array([1, 1, 2, 0]))),
                        shape=(2, 3))
    data = NTPData(H2, coo)
    assert [s.tolist() for s in data.supports] == [[1], [0]]
    np.testing.assert_array_equal(data.probs.toarray(), [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_rows_within_tolerance_are_renormalised():
    off = 5e-9  # below SIMPLEX_ATOL = 1e-8
    P = np.array([[0.5 + off, 0.5, 0.0], [0.25, 0.75 - off, 0.0]])
    data = NTPData(H2, P, [0.5 + off, 0.5])
    np.testing.assert_allclose(np.asarray(data.probs.sum(axis=1)).ravel(), 1.0, rtol=0, atol=4 * np.finfo(float).eps)
    np.testing.assert_allclose(data.probs.toarray(), P / P.sum(axis=1, keepdims=True), rtol=1e-15)
    assert data.weights.sum() == pytest.approx(1.0, abs=2 * np.finfo(float).eps)
    with pytest.raises(DistributionError, match="probs: row 0 sums to"):
        NTPData(H2, [[0.5 + 2e-8, 0.5, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(DistributionError, match="weights: sum to"):
        NTPData(H2, P_OK, [0.5 + 2e-8, 0.5])


def test_attributes_supports_anchors_and_read_only():
    P = [[0.2, 0.0, 0.5, 0.3], [0.0, 1.0, 0.0, 0.0], [0.1, 0.6, 0.0, 0.3]]
    data = NTPData(np.arange(6.0).reshape(3, 2), P, [0.5, 0.25, 0.25])
    assert (data.m, data.V, data.d) == (3, 4, 2)
    assert [s.tolist() for s in data.supports] == [[0, 2, 3], [1], [0, 1, 3]]
    assert data.support_sizes.tolist() == [3, 1, 3]
    assert data.anchors.tolist() == [2, 1, 1]  # most probable in-support token
    np.testing.assert_array_equal(data.support_mask(), np.array(P) > 0)
    np.testing.assert_array_equal(data.weights, [0.5, 0.25, 0.25])
    np.testing.assert_array_equal(NTPData(H2, P_OK).weights, [0.5, 0.5])  # uniform default
    with pytest.raises(ValueError, match="read-only"):
        data.embeddings[0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        data.weights[0] = 1.0
    with pytest.raises(ShapeError, match="token_labels: expected 4 labels"):
        NTPData(np.arange(6.0).reshape(3, 2), P, token_labels=["a", "b"])


# -- from_sequences -----------------------------------------------------------------------------

SEQS = [[1, 2, 3], [1, 2, 3], [1, 2, 4], [0, 2, 3], [5, 1, 2, 3]]


def test_from_sequences_last_token_counts():
    data = NTPData.from_sequences(SEQS, 2)
    # Pairs: (1,2)->3, (1,2)->3, (1,2)->4, (0,2)->3, and (1,2)->3 from the last two tokens of [5,1,2,3].
    assert data.contexts == [(1, 2), (0, 2)]  # deduplicated, in order of first appearance
    assert data.context_labels == ["1 2", "0 2"]
    assert data.n_samples == 5
    assert data.V == 6  # max token id 5, +1
    np.testing.assert_allclose(data.weights, [4 / 5, 1 / 5], rtol=1e-15)
    expected = np.zeros((2, 6))
    expected[0, 3], expected[0, 4] = 3 / 4, 1 / 4
    expected[1, 3] = 1.0
    np.testing.assert_allclose(data.probs.toarray(), expected, rtol=1e-15)
    np.testing.assert_array_equal(data.embeddings, np.eye(2))  # default embed="onehot"


def test_from_sequences_autoregressive_counts():
    data = NTPData.from_sequences([[1, 2, 3], [1, 2], [1, 3, 3, 0]], 2, autoregressive=True)
    # Pairs (z_<t, z_t) for t = 1..min(k, len-1):
    #   [1,2,3]:   (1,)->2, (1,2)->3;   [1,2]: (1,)->2;   [1,3,3,0]: (1,)->3, (1,3)->3
    assert data.contexts == [(1,), (1, 2), (1, 3)]
    assert data.n_samples == 5
    assert data.V == 4
    np.testing.assert_allclose(data.weights, [3 / 5, 1 / 5, 1 / 5], rtol=1e-15)
    np.testing.assert_allclose(data.probs.toarray(), [[0, 0, 2 / 3, 1 / 3], [0, 0, 0, 1], [0, 0, 0, 1]], rtol=1e-15)
    # Longer k: every prefix is a context.
    data = NTPData.from_sequences([[1, 3, 3, 0]], 5, autoregressive=True)
    assert data.contexts == [(1,), (1, 3), (1, 3, 3)]


def test_from_sequences_entropy_matches_counts():
    # H = -Σ_j π_j Σ_z p log p = (4/5)·H(3/4, 1/4) + (1/5)·0
    data = NTPData.from_sequences(SEQS, 2)
    assert entropy(data) == pytest.approx(0.8 * -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), rel=1e-14)


def test_from_sequences_vocab_size_and_numpy_input():
    data = NTPData.from_sequences(np.array([[0, 1, 2], [0, 1, 1]]), 2, vocab_size=10)
    assert data.V == 10
    assert data.contexts == [(0, 1)]
    np.testing.assert_allclose(data.probs.toarray()[0, :3], [0, 0.5, 0.5])


def test_from_sequences_random_embeddings_are_seeded():
    a = NTPData.from_sequences(SEQS, 2, embed="random:5", seed=3)
    b = NTPData.from_sequences(SEQS, 2, embed="random:5", seed=3)
    c = NTPData.from_sequences(SEQS, 2, embed="random:5", seed=4)
    assert a.embeddings.shape == (2, 5)
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    assert not np.allclose(a.embeddings, c.embeddings)
    assert np.all(np.isfinite(a.embeddings)) and np.std(a.embeddings) > 0


def test_from_sequences_callable_embedding():
    seen = []

    def embed(contexts):
        seen.append(list(contexts))
        return np.array([[float(sum(c)), float(len(c)), 1.0] for c in contexts])

    data = NTPData.from_sequences(SEQS, 2, embed=embed)
    assert seen == [[(1, 2), (0, 2)]]
    np.testing.assert_array_equal(data.embeddings, [[3.0, 2.0, 1.0], [2.0, 2.0, 1.0]])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param({"tokens": [[1, 2], [3, 4]]}, InputError,
                     "tokens: no training pairs: all 2 sequence.* fewer than the 3 tokens that context_length=2",
                     id="all-short"),
        pytest.param({"tokens": [[1, 2], [3, 4]], "windows": True}, InputError, "tokens: no training pairs",
                     id="all-short-windows"),
        pytest.param({"tokens": [[1], []], "autoregressive": True}, InputError,
                     "no training pairs.*2 tokens that the autoregressive setting needs",
                     id="all-short-autoregressive"),
        pytest.param({"windows": True, "autoregressive": True}, InputError, "windows, autoregressive: choose one",
                     id="windows-and-autoregressive"),
        pytest.param({"token_labels": ["a", "b"], "vocab_size": 6}, ShapeError, "token_labels: expected 6 labels",
                     id="labels-length"),
        pytest.param({"token_labels": ["a", "b"]}, InputError, "token id 5 is out of range for the 2 token_labels",
                     id="labels-too-few"),
        pytest.param({"tokens": [[1, -2, 3]]}, InputError, "tokens: sequence 0 has a negative token id", id="negative"),
        pytest.param({"tokens": [[1.5, 2, 3]]}, InputError, "tokens: sequence 0 must be a 1-D sequence of integers",
                     id="float-tokens"),
        pytest.param({"tokens": []}, InputError, "tokens: no sequences given", id="no-sequences"),
        pytest.param({"tokens": "abc"}, InputError, "tokens: expected a list", id="string"),
        pytest.param({"embed": "rnd"}, InputError, "embed: expected 'onehot', 'random:D' or a callable",
                     id="bad-embed"),
        pytest.param({"embed": "random:x"}, InputError, "embed: expected 'random:D' with an integer D",
                     id="bad-random-dim"),
        pytest.param({"embed": "random:0"}, InputError, "embed dimension D", id="zero-random-dim"),
        pytest.param({"embed": lambda c: np.ones((len(c) + 1, 2))}, ShapeError,
                     r"embed\(contexts\): expected 2 rows", id="callable-wrong-rows"),
        pytest.param({"embed": lambda c: np.ones(len(c))}, ShapeError, r"embed\(contexts\): expected a 2-D array",
                     id="callable-1d"),
        pytest.param({"embed": lambda c: np.full((len(c), 2), np.nan)}, InputError,
                     r"embed\(contexts\): entries must be finite", id="callable-nan"),
        pytest.param({"vocab_size": 4}, InputError, "tokens: token id 5 is out of range for vocab_size=4",
                     id="vocab-too-small"),
        pytest.param({"vocab_size": 1}, InputError, "vocab_size: expected an integer >= 2", id="vocab-1"),
        pytest.param({"context_length": 0}, InputError, "context_length: expected an integer >= 1", id="k=0"),
    ],
)
def test_from_sequences_errors(kwargs, error, match):
    kwargs = dict(kwargs)
    tokens = kwargs.pop("tokens", SEQS)
    k = kwargs.pop("context_length", 2)
    with pytest.raises(error, match=match):
        NTPData.from_sequences(tokens, k, **kwargs)


def test_from_sequences_windows_counts():
    seqs = [[1, 2, 3, 1, 2, 4], [2, 3], [1, 2, 3]]
    data = NTPData.from_sequences(seqs, 2, windows=True)
    # Windows of [1,2,3,1,2,4]: (1,2)->3, (2,3)->1, (3,1)->2, (1,2)->4; [2,3] is too short (skipped);
    # [1,2,3]: (1,2)->3.
    assert data.contexts == [(1, 2), (2, 3), (3, 1)]
    assert data.n_samples == 5 and data.n_skipped_sequences == 1
    assert data.V == 5
    np.testing.assert_allclose(data.weights, [3 / 5, 1 / 5, 1 / 5], rtol=1e-15)
    expected = np.zeros((3, 5))
    expected[0, 3], expected[0, 4], expected[1, 1], expected[2, 2] = 2 / 3, 1 / 3, 1.0, 1.0
    np.testing.assert_allclose(data.probs.toarray(), expected, rtol=1e-15)


def test_from_sequences_skips_short_sequences_in_every_mode():
    seqs = [[1, 2, 3], [1, 2], [], [0, 1, 2, 3], [4]]
    last = NTPData.from_sequences(seqs, 2)
    assert (last.n_samples, last.n_skipped_sequences) == (2, 3)  # [1,2], [], [4]
    assert last.contexts == [(1, 2)]
    windows = NTPData.from_sequences(seqs, 2, windows=True)
    assert (windows.n_samples, windows.n_skipped_sequences) == (3, 3)  # 1 + 2 windows
    auto = NTPData.from_sequences(seqs, 2, autoregressive=True)
    assert (auto.n_samples, auto.n_skipped_sequences) == (5, 2)  # [] and [4] have no pair
    assert auto.contexts == [(1,), (1, 2), (0,), (0, 1)]


def _brute_force_windows(seqs, k):
    """(context -> Counter of next tokens) over every k+1 window, by plain Python."""
    table: dict[tuple[int, ...], Counter] = {}
    for seq in seqs:
        for i in range(len(seq) - k):
            table.setdefault(tuple(seq[i:i + k]), Counter())[seq[i + k]] += 1
    return table


@pytest.mark.parametrize("seed", range(5))
def test_from_sequences_windows_probabilities_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 4))
    seqs = [rng.integers(0, 6, size=rng.integers(0, 12)).tolist() for _ in range(30)]
    data = NTPData.from_sequences(seqs, k, windows=True, vocab_size=6)
    table = _brute_force_windows(seqs, k)
    n = sum(sum(c.values()) for c in table.values())
    assert data.n_samples == n and data.m == len(table)
    assert data.n_skipped_sequences == sum(len(s) < k + 1 for s in seqs)
    for j, ctx in enumerate(data.contexts):
        counts = table[ctx]
        n_j = sum(counts.values())
        assert data.weights[j] == pytest.approx(n_j / n, rel=1e-14)
        expected = np.zeros(6)
        for z, c in counts.items():
            expected[z] = c / n_j
        np.testing.assert_allclose(data.probs.toarray()[j], expected, rtol=1e-14)


def _reference_from_sequences(seqs, k, mode):
    """The straightforward construction (a Counter over tuple contexts, a loop per context), as
    before vectorisation: the vectorised one must give identical objects."""
    pairs = []
    for seq in seqs:
        if mode == "autoregressive":
            pairs.extend((tuple(seq[:t]), seq[t]) for t in range(1, min(k, len(seq) - 1) + 1))
        elif mode == "windows":
            pairs.extend((tuple(seq[i:i + k]), seq[i + k]) for i in range(len(seq) - k))
        elif len(seq) >= k + 1:
            pairs.append((tuple(seq[-k - 1:-1]), seq[-1]))
    V = max(max(s) for s in seqs if s) + 1
    index: dict[tuple[int, ...], int] = {}
    for ctx, _ in pairs:
        index.setdefault(ctx, len(index))
    counts = Counter((index[ctx], z) for ctx, z in pairs)
    rows, cols = zip(*counts.keys(), strict=True)
    C = sp.csr_matrix((np.fromiter(counts.values(), float), (rows, cols)), shape=(len(index), V))
    n_j = np.asarray(C.sum(axis=1)).ravel()
    ref = NTPData(np.ones((len(index), 1)), sp.diags(1.0 / n_j) @ C, n_j / n_j.sum())  # NTPData's canonical form
    P = ref.probs
    anchors = [P.indices[P.indptr[j] + np.argmax(P.data[P.indptr[j]:P.indptr[j + 1]])] for j in range(len(index))]
    return list(index), P, ref.weights, anchors


@pytest.mark.parametrize("mode", ["last", "windows", "autoregressive"])
@pytest.mark.parametrize("max_id", [5, 10**6])  # 10**6 with k = 4 takes the np.unique(axis=0) path
def test_vectorised_from_sequences_equals_reference(mode, max_id):
    rng = np.random.default_rng(max_id + len(mode))
    for trial in range(12):
        k = 1 + trial % 4
        ids = rng.choice(max_id + 1, size=6, replace=False)  # few distinct ids: repeated contexts, ties
        seqs = [ids[rng.integers(0, 6, size=rng.integers(0, 10))].tolist() for _ in range(25)] + [[max_id] * 8]
        data = NTPData.from_sequences(seqs, k, windows=mode == "windows", autoregressive=mode == "autoregressive")
        contexts, P, weights, anchors = _reference_from_sequences(seqs, k, mode)
        assert data.contexts == contexts
        assert data.context_labels == [" ".join(map(str, c)) for c in contexts]
        np.testing.assert_array_equal(data.weights, weights)
        np.testing.assert_array_equal(data.probs.indptr, P.indptr)
        np.testing.assert_array_equal(data.probs.indices, P.indices)
        np.testing.assert_array_equal(data.probs.data, P.data)
        np.testing.assert_array_equal(data.anchors, anchors)


def test_anchors_are_the_first_most_probable_token():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 3, size=(200, 7)).astype(float)  # many ties within rows
    counts[:, 3] += 0.5 * (counts.sum(axis=1) == 0)  # no empty row
    data = NTPData(np.ones((200, 1)), counts / counts.sum(axis=1, keepdims=True))
    expected = [int(np.argmax(row)) for row in data.probs.toarray()]
    np.testing.assert_array_equal(data.anchors, expected)


def test_from_sequences_token_labels_name_contexts():
    data = NTPData.from_sequences([[0, 1, 2], [2, 1, 0]], 2, token_labels=["a", "b", "c"])
    assert data.token_labels == ["a", "b", "c"]
    assert data.context_labels == ["a b", "c b"]
    assert data.V == 3


# -- reading text -------------------------------------------------------------------------------

def test_split_words_pattern():
    assert split_words("Don’t PANIC: it's 42_ok! 'quoted' rock'n'roll -- e-mail #tag") == [
        "don't", "panic", "it's", "42", "ok", "quoted", "rock'n'roll", "e", "mail", "tag"]
    assert split_words("Ça coûte 3€") == ["ça", "coûte", "3"]


def test_read_text_file_vocabulary_by_frequency(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("The cat sat.\n\n  ...  \nthe DOG sat; the cat ran\n", encoding="utf-8")
    seqs, vocab, info = read_text_file(path)
    # Counts: the 3, cat 2, sat 2, dog 1, ran 1; ties in order of first appearance.
    assert vocab == ["the", "cat", "sat", "dog", "ran"]
    assert seqs == [[0, 1, 2], [0, 3, 2, 0, 1, 4]]
    assert info == {"lines": 2, "blank_lines": 2, "tokens": 9, "types": 5, "max_vocab": None, "unk_tokens": 0,
                    "unk_types": 0, "word_pattern": WORD_PATTERN}


def test_read_text_file_max_vocab_maps_the_rest_to_unk(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("b a c\nd a b e\nc\n", encoding="utf-8")
    # Counts: a 2, b 2, c 2, d 1, e 1. Ties broken by first appearance: b, a, c, d, e.
    seqs, vocab, info = read_text_file(path, max_vocab=2)
    assert vocab == ["b", "a", UNK]  # <unk> does not count within max_vocab: V = N + 1
    assert seqs == [[0, 1, 2], [2, 1, 0, 2], [2]]
    assert (info["unk_tokens"], info["unk_types"], info["tokens"], info["types"]) == (4, 3, 8, 5)
    _, vocab, info = read_text_file(path, max_vocab=5)  # nothing dropped: no <unk>
    assert vocab == ["b", "a", "c", "d", "e"] and info["unk_tokens"] == 0
    with pytest.raises(InputError, match="max_vocab: expected an integer >= 1"):
        read_text_file(path, max_vocab=0)


def test_text_file_to_ntpdata_names_tokens(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b c a b d\nc\na b a\n", encoding="utf-8")  # a 4, b 3, c 2, d 1
    seqs, vocab, info = read_text_file(path, max_vocab=3)
    data = NTPData.from_sequences(seqs, 2, windows=True, token_labels=vocab)
    assert data.token_labels == ["a", "b", "c", UNK]
    # Windows: (a b)->c, (b c)->a, (c a)->b, (a b)->d=<unk>; "c" is skipped; (a b)->a.
    assert data.context_labels == ["a b", "b c", "c a"]
    assert (data.n_samples, data.n_skipped_sequences) == (5, 1)
    np.testing.assert_allclose(data.probs.toarray()[0], [1 / 3, 0, 1 / 3, 1 / 3], rtol=1e-15)


def test_limit_vocabulary_on_integer_ids():
    seqs, vocab, info = limit_vocabulary([[7, 3, 3], [9, 7, 3]], max_vocab=1)
    assert vocab == [3, UNK]
    assert seqs == [[1, 0, 0], [1, 1, 0]]
    assert (info["unk_tokens"], info["unk_types"]) == (3, 2)


@pytest.mark.parametrize("reader", [read_text_file, read_token_file])
def test_non_utf8_file_is_an_input_error_naming_the_line(tmp_path, reader):
    path = tmp_path / "latin1.txt"
    path.write_bytes("1 2 3\n4 5 6 caf\u00e9\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1\.txt:2: not UTF-8 text \(byte 0xe9 at offset 15\)"):
        reader(path)
    path.write_bytes(codecs.BOM_UTF8 + "1 2 3\n4 5 6 caf\u00e9\n".encode("latin-1"))  # offsets count the BOM
    with pytest.raises(InputError, match=r"latin1\.txt:2: not UTF-8 text \(byte 0xe9 at offset 18\)"):
        reader(path)
    path.write_bytes(codecs.BOM_UTF8 + b"1 2 3\n")  # a byte-order mark is not text
    assert reader(path)[0] == [[0, 1, 2]] if reader is read_text_file else reader(path) == [[1, 2, 3]]


def test_read_text_file_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n -- !!\n", encoding="utf-8")
    with pytest.raises(InputError, match="empty.txt: no words"):
        read_text_file(empty)
    with pytest.raises(InputError, match="text file: cannot read"):
        read_text_file(tmp_path / "missing.txt")


# -- synthetic ----------------------------------------------------------------------------------

def test_synthetic_shapes_and_supports():
    data = synthetic(12, 9, 7, 4, seed=0)
    assert (data.m, data.V, data.d) == (12, 9, 7)
    assert data.embeddings.shape == (12, 7)
    assert data.probs.shape == (12, 9)
    assert np.all(data.support_sizes == 4)
    np.testing.assert_allclose(data.weights, np.full(12, 1 / 12))
    np.testing.assert_allclose(np.asarray(data.probs.sum(axis=1)).ravel(), 1.0, rtol=0, atol=1e-15)
    default = synthetic(seed=0)  # the paper's Figs. 3-4 sizes
    assert (default.m, default.V, default.d) == (50, 10, 60)
    assert np.all(default.support_sizes == 6)


def test_synthetic_is_reproducible_and_seed_dependent():
    a, b, c = synthetic(8, 6, 5, 3, seed=11), synthetic(8, 6, 5, 3, seed=11), synthetic(8, 6, 5, 3, seed=12)
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    np.testing.assert_array_equal(a.probs.toarray(), b.probs.toarray())
    assert not np.allclose(a.embeddings, c.embeddings)
    assert not np.allclose(a.probs.toarray(), c.probs.toarray())


def test_synthetic_embedding_scale():
    a = synthetic(8, 6, 5, 3, seed=1)
    b = synthetic(8, 6, 5, 3, seed=1, embedding_scale=2.5)
    np.testing.assert_allclose(b.embeddings, 2.5 * a.embeddings, rtol=1e-15)
    np.testing.assert_array_equal(a.probs.toarray(), b.probs.toarray())


def test_synthetic_n_samples_weights_from_counts():
    n = 400
    data = synthetic(20, 8, 5, 4, seed=2, n_samples=n)
    assert data.n_samples == n
    counts_ctx = data.weights * n
    np.testing.assert_allclose(counts_ctx, np.round(counts_ctx), rtol=0, atol=1e-9)
    assert np.all(np.round(counts_ctx) >= 1)
    assert np.round(counts_ctx).sum() == n
    counts = data.probs.toarray() * counts_ctx[:, None]
    np.testing.assert_allclose(counts, np.round(counts), rtol=0, atol=1e-9)
    assert np.all(data.support_sizes <= 4)  # supports can only shrink
    # Not the uniform π̂ of the exact mode (multinomial counts over 20 contexts differ).
    assert np.ptp(data.weights) > 0
    # Unseen contexts are dropped: with n = 3 at most 3 contexts remain.
    tiny = synthetic(20, 8, 5, 4, seed=2, n_samples=3)
    assert tiny.m <= 3 and tiny.n_samples == 3
    np.testing.assert_allclose(tiny.weights * 3, np.round(tiny.weights * 3), atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"support_size": 7, "V": 6}, "support_size: must be <= V=6"),
        ({"alpha": 0.0}, "alpha"),
        ({"embedding_scale": -1.0}, "embedding_scale"),
        ({"m": 0}, "m: expected an integer >= 1"),
        ({"V": 1}, "V: expected an integer >= 2"),
        ({"seed": None}, "seed: expected an integer"),
        ({"n_samples": 0}, "n_samples"),
    ],
)
def test_synthetic_errors(kwargs, match):
    args = {"m": 5, "V": 6, "d": 4, "support_size": 2, "seed": 0} | kwargs
    with pytest.raises(InputError, match=match):
        synthetic(**args)


def test_synthetic_entropy_matches_dirichlet_expectation():
    """Dirichlet(1) on S = 6 tokens: E[-Σ p log p] = ψ(S + 1) - ψ(2) = H_6 - 1 = 1/2 + ... + 1/6
    ≈ 1.45 nats (digest Sec. 4, Fig. 4: "uniform on the simplex" matches the paper's 1.445). Each
    synthetic(seed) averages 50 such entropies (uniform π̂); the mean over 20 seeds must be
    within 3 standard errors of the expectation."""
    expected = sum(1 / k for k in range(2, 7))
    assert expected == pytest.approx(1.45, abs=1e-12)
    H = np.array([entropy(synthetic(seed=s)) for s in range(20)])
    se = H.std(ddof=1) / np.sqrt(H.size)
    assert abs(H.mean() - expected) <= 3 * se
    # The alternative the digest rules out (normalised Uniform(0,1) weights, ≈1.61) is far away.
    assert abs(H.mean() - 1.61) > 10 * se


# -- toy2d --------------------------------------------------------------------------------------

def test_toy2d_shape_and_supports():
    data = toy2d()
    assert (data.d, data.m, data.V) == (2, 3, 5)
    assert np.all(data.support_sizes == 3)
    assert [s.tolist() for s in data.supports] == [[1, 2, 3], [0, 1, 4], [0, 3, 4]]
    np.testing.assert_allclose(np.linalg.norm(data.embeddings, axis=1), 1.0, rtol=1e-15)
    # Cones of 110° (A-B), 120° (B-C), 130° (C-A); angles=(90, 210, 330) is the equiangular toy.
    G = data.embeddings @ data.embeddings.T
    np.testing.assert_allclose([G[0, 1], G[1, 2], G[2, 0]], np.cos(np.deg2rad([110, 120, 130])), atol=1e-15)
    E = toy2d(angles=(90, 210, 330)).embeddings
    np.testing.assert_allclose((E @ E.T)[~np.eye(3, dtype=bool)], -0.5, atol=1e-15)
    with pytest.raises(InputError, match="angles"):
        toy2d(angles=(0, 1))
    assert data.context_labels == ["A", "B", "C"]
    assert data.token_labels == ["1", "2", "3", "4", "5"]
    np.testing.assert_array_equal(toy2d(seed=4).probs.toarray(), toy2d(seed=4).probs.toarray())
    assert not np.allclose(toy2d(seed=0).probs.toarray(), toy2d(seed=1).probs.toarray())
