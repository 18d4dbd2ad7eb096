"""The command line: ``embgeo ntp analyze`` on synthetic data and on a token file; the end of ``run`` and
``reproduce``."""

import dataclasses
import json
from dataclasses import dataclass

import numpy as np
import pytest

from embgeo.cli import main
from embgeo.lab.claims import as_check, at_least, at_most, banded
from embgeo.lab.context import DETACHED, RunContext
from embgeo.lab.registry import Experiment, Paper, Result
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


# -- real text: --text, --windows, --max-vocab --------------------------------------------------

def test_analyze_text_windows_max_vocab(tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    # Counts: the 6, cat 3, sat 2, dog 2, on 1, mat 1, ran 1, hi 1. With --max-vocab 3 the kept words
    # are the, cat, sat (ties with dog broken by first appearance); dog, on, mat, ran, hi (5 types,
    # 6 occurrences) become <unk>.
    text.write_text("The cat sat on the mat.\nThe dog sat.\nHi!\n\nthe cat ran; the dog... the cat\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["ntp", "analyze", "--text", str(text), "--context-length", "2", "--windows", "--max-vocab", "3",
                 "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    # Windows: 4 + 1 + 0 + 5 = 10 pairs; "Hi!" has one word and is skipped; the blank line is ignored.
    assert summary["n_samples"] == 10 and summary["V"] == 4 and summary["d"] == 64
    assert summary["input"] | {"word_pattern": None} == {
        "lines": 4, "blank_lines": 1, "tokens": 17, "types": 8, "max_vocab": 3, "unk_tokens": 6, "unk_types": 5,
        "word_pattern": None, "pairs": "windows", "context_length": 2, "sequences": 4, "skipped_sequences": 1}
    assert (out / "vocabulary.txt").read_text().split("\n") == ["the", "cat", "sat", "<unk>", ""]
    printed = capsys.readouterr().out
    assert "<unk> replaced 6 words (35.3%) of 5 types" in printed
    assert "skipped 1 lines" in printed
    # The sizes come before any solver output.
    assert printed.index("sizes        m=") < printed.index("entropy")


def test_analyze_tokens_max_vocab_renumbers_ids(tmp_path):
    tokens = tmp_path / "ids.txt"
    tokens.write_text("7 3 3 9\n3 7 3 3\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["ntp", "analyze", "--tokens", str(tokens), "--context-length", "1", "--windows", "--max-vocab", "2",
                 "--embeddings", "onehot", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["V"] == 3 and summary["n_samples"] == 6
    assert (summary["input"]["unk_tokens"], summary["input"]["unk_types"]) == (1, 1)
    assert (out / "vocabulary.txt").read_text().split() == ["3", "7", "<unk>"]


def test_analyze_tokens_skips_short_lines(tmp_path):
    tokens = tmp_path / "ids.txt"
    tokens.write_text("1 2 3\n4\n1 2 4\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["ntp", "analyze", "--tokens", str(tokens), "--context-length", "2", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_samples"] == 2 and summary["input"]["skipped_sequences"] == 1
    assert summary["input"]["pairs"] == "last"


def test_text_help_shows_the_word_pattern(capsys):
    from embgeo.ntp.data import WORD_PATTERN

    with pytest.raises(SystemExit):
        main(["ntp", "analyze", "--help"])
    assert WORD_PATTERN in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("content, argv, message", [
    ("caf\u00e9 au lait\n".encode("latin-1"), ["--text", "{f}", "--context-length", "1"],
     "in.txt:1: not UTF-8 text (byte 0xe9"),
    (b"one two\nthree\n", ["--text", "{f}", "--context-length", "2"], "no training pairs"),
    (b"one two\nthree\n", ["--text", "{f}", "--context-length", "2", "--windows"], "no training pairs"),
    (b" ... !\n", ["--text", "{f}", "--context-length", "1"], "no words"),
    (b"", ["--text", "{f}", "--context-length", "1"], "no words"),
    (b"a b c\n", ["--text", "{f}", "--tokens", "{f}", "--context-length", "1"],
     "--text and --tokens are mutually exclusive"),
    (b"a b c\n", ["--text", "{f}"], "--context-length is required with --text"),
    (b"a b c\n", ["--text", "{f}", "--context-length", "1", "--windows", "--autoregressive"],
     "--windows and --autoregressive are mutually exclusive"),
    (b"a b c\n", ["--text", "{f}", "--context-length", "1", "--max-vocab", "0"], "--max-vocab: expected an integer"),
    (b"a b c\n", ["--text", "{f}", "--context-length", "1", "--synthetic", "5,4,3,2"],
     "--synthetic and --text are mutually exclusive"),
    (b"", ["--windows"], "--windows applies to --text or --tokens only"),
    (b"", ["--max-vocab", "5"], "--max-vocab applies to --text or --tokens only"),
])
def test_text_bad_input_is_one_line_error(tmp_path, capsys, content, argv, message):
    path = tmp_path / "in.txt"
    path.write_bytes(content)
    assert main(["ntp", "analyze", *[a.replace("{f}", str(path)) for a in argv]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("embgeo: error:") and err.count("\n") == 1
    assert message in err


@pytest.mark.parametrize("argv", [["--threads", "2", "run", "ntp-gd"], ["run", "ntp-gd", "--threads", "2"]])
def test_threads_reach_torch_inside_training(tmp_path, monkeypatch, argv):
    """`embgeo --threads 2` (before or after the subcommand) is the thread count torch trains with."""
    import torch

    from embgeo.ntp.training import train as ntp_train

    seen = []
    original = ntp_train._run

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(ntp_train, "_run", spy)
    before = torch.get_num_threads()
    assert main([*argv, "--set", "steps=3", "--out", str(tmp_path / "gd")]) == 0
    assert seen == [2]
    assert torch.get_num_threads() == before  # restored afterwards



def test_show_lists_every_setting_at_both_scales(capsys):
    assert main(["show", "ntp-regpath"]) == 0
    out = capsys.readouterr().out
    assert "b_max" in out and "30.0" in out and "points" in out  # paper preset: b_max 30, 12 points
    assert main(["show", "ntp-nope"]) == 2


# -- the end of `run` and `reproduce`: failing claims one per line, then a one-line tally -----------------------

@dataclass
class ManyClaimsConfig:
    """How many claims fail (each with a long name)."""

    failing: int = 3


def run_many_claims(cfg: ManyClaimsConfig, ctx: RunContext = DETACHED) -> Result:
    """``failing`` failing claims with 150-character names, one holding, one undecided, a failing check."""
    long = " and a very long statement" * 5
    claims = [at_least(f"claim {i}{long}", 0.0, 1.0) for i in range(cfg.failing)]
    claims += [at_least("holds", 2.0, 1.0), banded("undecided one", 0.91, 0.02, 0.9),
               as_check(at_most("identity", 1.0, 1e-10), "true by construction")]
    return Result(claims)


MANY = Paper(name="many", title="Many claims", citation="", order=9, experiments=[
    Experiment("many-claims", "many", "Many claims", ManyClaimsConfig, run_many_claims)])


def test_run_ends_with_failing_claims_one_per_line_and_a_tally(tmp_path, with_papers, capsys):
    """No 600-character line: a head, one short indented line per failing claim (the check marked), the undecided
    counted, and a last line that tallies holds / failing / undecided / checks."""
    from embgeo.cli import LINE_WIDTH

    with_papers(MANY)
    assert main(["run", "many-claims", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out.splitlines()
    head = out.index("3 failing claims and 1 failing consistency check in 1 experiment:")
    listed = out[head + 1:head + 5]
    assert [line.split(":")[0] for line in listed] == ["  many-claims"] * 4
    assert all(line.startswith(f"  many-claims: claim {i} and a very long") and line.endswith("…")
               and len(line) == LINE_WIDTH for i, line in enumerate(listed[:3]))
    assert listed[3] == "  many-claims: identity (consistency check, fails)"
    assert out[head + 5:] == [
        "1 undecided claim (a certified band straddles its level), listed in the lines above and claims.json",
        "claims: 1 of 5 hold, 3 failing, 1 undecided; consistency checks: 0 of 1 pass"]
    assert max(len(line) for line in out[head:]) <= LINE_WIDTH + len(" (consistency check, fails)")


def test_reproduce_names_its_report_first_and_lists_at_most_twenty_failing_claims(tmp_path, with_papers, capsys):
    from embgeo.lab.registry import paper

    # 25 failing claims: 20 listed, the rest counted, pointing at the report that lists them all
    with_papers(dataclasses.replace(MANY, experiments=[dataclasses.replace(
        MANY.experiments[0], presets={"quick": {"failing": 25}})]))
    assert paper("many").experiments[0].config("quick").failing == 25
    out_dir = tmp_path / "rep"
    assert main(["reproduce", "--paper", "many", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("estimate: none (no registered run time at quick scale for many-claims)")
    assert out[1] == f"report: {(out_dir / 'report.html').resolve()} (rewritten as each experiment finishes)"
    head = out.index("25 failing claims and 1 failing consistency check in 1 experiment:")
    assert len([line for line in out[head + 1:] if line.startswith("  many-claims: ")]) == 20
    assert out[-3:] == ["  ... and 6 more, listed in report.html",
                        "1 undecided claim (a certified band straddles its level), listed in report.html",
                        "claims: 1 of 27 hold, 25 failing, 1 undecided; consistency checks: 0 of 1 pass"]
