"""The command line: ``embgeo ntp analyze`` on synthetic data and on a token file."""

import json

import numpy as np
import pytest

from embgeo.cli import main
from embgeo.ntp import entropy, synthetic


def test_analyze_synthetic_writes_outputs(tmp_path, capsys):
    assert main(["ntp", "analyze", "--synthetic", "20,6,25,3", "--seed", "4", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    data = synthetic(20, 6, 25, 3, seed=4)
    assert (summary["m"], summary["V"], summary["d"]) == (20, 6, 25)
    assert summary["entropy_nats"] == pytest.approx(entropy(data), rel=1e-12)
    assert summary["compatible"] and summary["separable"]  # d > m: Lemma 1
    W_mm = np.load(tmp_path / "W_mm.npy")
    assert W_mm.shape == (6, 25)
    assert summary["ntp_margin"] == pytest.approx(1 / np.linalg.norm(W_mm), rel=1e-12)
    assert "NTP margin" in capsys.readouterr().out


def test_analyze_token_file(tmp_path, capsys):
    tokens = tmp_path / "corpus.txt"
    tokens.write_text("1 2 3 4\n1 2 3 5\n\n2 2 3 4\n1 2 3 4\n")
    assert main(["ntp", "analyze", "--tokens", str(tokens), "--context-length", "2", "--embeddings", "onehot",
                 "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    # One distinct context (2, 3) followed by 4 three times and by 5 once.
    assert summary["m"] == 1 and summary["n_samples"] == 4
    assert summary["entropy_nats"] == pytest.approx(-(0.75 * np.log(0.75) + 0.25 * np.log(0.25)), rel=1e-12)


def test_analyze_embeddings_file_shape_is_checked(tmp_path, capsys):
    tokens = tmp_path / "corpus.txt"
    tokens.write_text("1 2 3\n2 2 4\n")
    np.save(tmp_path / "emb.npy", np.ones((5, 3)))
    rc = main(["ntp", "analyze", "--tokens", str(tokens), "--context-length", "2",
               "--embeddings", str(tmp_path / "emb.npy")])
    assert rc == 2
    assert "expected 2 rows" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--synthetic", "1,2"], "4 comma-separated integers"),
    (["--tokens", "/nonexistent/file.txt", "--context-length", "2"], "cannot read"),
    (["--tokens", "x.txt"], "--context-length is required"),
    (["--synthetic", "5,4,3,6"], "support_size"),
])
def test_analyze_bad_input_is_one_line_error(argv, message, capsys):
    assert main(["ntp", "analyze", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("embgeo: error:") and message in err


def test_token_file_with_text_names_the_line(tmp_path, capsys):
    tokens = tmp_path / "corpus.txt"
    tokens.write_text("1 2 3\n1 two 3\n")
    assert main(["ntp", "analyze", "--tokens", str(tokens), "--context-length", "2"]) == 2
    assert "corpus.txt:2" in capsys.readouterr().err
