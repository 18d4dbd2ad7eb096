"""Reading text files: UTF-8 with clear errors, words, lines as sentences, labelled CSV files.

Every error is an :class:`~embgeo.errors.InputError` that names the file and, for bad bytes or rows, the
line.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import re
from collections.abc import Sequence
from os import PathLike
from pathlib import Path

import numpy as np

from embgeo.errors import InputError

#: A word of a text file (:func:`split_words`, :func:`embgeo.ntp.data.read_text_file`), matched after
#: lowercasing: a run of Unicode letters and digits, possibly joined by inner apostrophes ("don't",
#: "o'clock"; "’" is read as "'"). Everything else (punctuation, "_", "#", "@", emoji) separates words.
WORD_PATTERN = r"[^\W_]+(?:'[^\W_]+)*"
#: :data:`WORD_PATTERN` compiled.
WORD_RE = re.compile(WORD_PATTERN)


def split_words(text: str) -> list[str]:
    """The words of ``text`` in order: lowercased, then every match of :data:`WORD_PATTERN`.

    >>> split_words("Don’t PANIC: it's 42_ok!")
    ["don't", 'panic', "it's", '42', 'ok']
    """
    return WORD_RE.findall(text.lower().replace("\u2019", "'"))


def read_utf8(path, what: str) -> str:
    """The whole file as text; unreadable or non-UTF-8 files are an InputError naming the file."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{what}: cannot read {path} ({exc.strerror})") from None
    skip = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0  # a byte-order mark is not text
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        pos = skip + exc.start
        lineno = raw.count(b"\n", 0, pos) + 1
        raise InputError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[pos]:02x} at offset {pos}); "
                         "convert the file to UTF-8 first (e.g. with iconv)") from None


def read_text_lines(path: str | PathLike, what: str = "text file") -> list[str]:
    """The lines of a UTF-8 text file, without their line ends: one sentence per line (:func:`read_utf8`)."""
    return read_utf8(path, what).splitlines()


def read_bytes(path, name: str) -> tuple[Path, bytes]:
    """(path, its bytes); ``name`` (the argument's name) is in the error when ``path`` is not a file path or no file."""
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"{name}: expected a file path, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{name}: file not found: {p}")
    return p, p.read_bytes()


def decode(raw: bytes, p: Path, encoding: str) -> str:
    """``raw`` (the bytes of ``p``) decoded; an InputError naming the file and line when it is not ``encoding``."""
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{p}, line {line}: not valid {encoding} text ({exc.reason})") from None


def read_labelled_csv(p: Path, text: str, text_col: str, label_col: str, labels: dict[str, int],
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
