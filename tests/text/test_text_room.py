"""The shared text room (embgeo.text): what both papers read, and that neither paper imports the other for it."""

import subprocess
import sys

import pytest

from embgeo.errors import InputError
from embgeo.text import reading, tweets, wordpiece


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


NTP_MODULES = ["embgeo.ntp", "embgeo.ntp.data", "embgeo.ntp.corpus", "embgeo.ntp.theory", "embgeo.ntp.analysis.probe",
               "embgeo.ntp.training.learned", "embgeo.ntp.measure.geometry", "embgeo.ntp.analysis.analyze",
               "embgeo.ntp.training.regpath"]


@pytest.mark.parametrize("module", NTP_MODULES)
def test_ntp_does_not_import_the_attention_paper(module):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('embgeo.attention')))"
    assert _python(code) == "[]"


def test_ntp_text_paths_do_not_import_the_attention_paper():
    """Reading the tweets and building a word-piece corpus, not only importing, stays out of embgeo.attention."""
    code = ("import sys\nfrom embgeo.ntp.corpus import build_corpus, read_lines\n"
            "build_corpus(read_lines(None, 40)[0], 2, 60, tokenizer='wordpiece')\n"
            "print(sorted(m for m in sys.modules if m.startswith('embgeo.attention')))")
    assert _python(code) == "[]"


def test_the_text_room_imports_no_paper():
    code = "import sys, embgeo.text; print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('embgeo.')}))"
    assert _python(code) == str(sorted(["core", "errors", "text"]))


def test_the_attention_loaders_are_the_shared_ones():
    from embgeo.attention import text

    assert text.load_tweets is tweets.load_tweets and text.tweets_path is tweets.tweets_path
    assert text.tokenize is wordpiece.tokenize and text.train_wordpiece is wordpiece.train_wordpiece
    assert text.TokenizedCorpus is wordpiece.TokenizedCorpus


def test_ntp_reading_is_the_shared_one():
    from embgeo.ntp import corpus, data

    assert data.split_words is reading.split_words and data.WORD_PATTERN == reading.WORD_PATTERN
    assert corpus.tweet_lines is tweets.tweet_lines


def test_read_utf8_names_file_and_line_of_the_first_bad_byte(tmp_path):
    p = tmp_path / "latin1.txt"
    p.write_bytes("first line\nsecond caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1\.txt:2: not UTF-8 text \(byte 0xe9 at offset 21\)"):
        reading.read_utf8(p, "text file")
    with pytest.raises(InputError, match=r"text file: cannot read .*missing\.txt"):
        reading.read_utf8(tmp_path / "missing.txt", "text file")


def test_read_text_lines_drops_the_byte_order_mark_and_keeps_blank_lines(tmp_path):
    p = tmp_path / "bom.txt"
    p.write_bytes(b"\xef\xbb\xbfone\r\n\ntwo")
    assert reading.read_text_lines(p) == ["one", "", "two"]


def test_split_words_follows_the_documented_pattern():
    assert reading.split_words("Don’t PANIC: it's 42_ok! #tag") == ["don't", "panic", "it's", "42", "ok", "tag"]


def test_tweet_lines_are_the_text_column_of_every_row():
    lines = tweets.tweet_lines()
    texts, y = tweets.load_tweets()
    assert len(lines) == 16186 + 15018 + 6954  # every sentiment, neutral included
    assert len(texts) == len(y) == 16186 + 6954
    assert set(texts) <= set(lines)
