"""`embgeo ntp probe`'s inputs and outputs (issue 38): GGUF files, the model's dtype, sampled contexts, text
units, --save-arrays, one separability verdict, the estimates, the messages and the progress lines.

The GGUF file is written by the test with the ``gguf`` package's GGUFWriter: a tiny llama (V = 38, d = 16, two
layers, grouped-query attention, F32 tensors) whose byte-level BPE tokenizer is stored in the file's metadata.
Its weights come from a LlamaForCausalLM built in torch, written the way llama.cpp's converter writes them
(q and k rows permuted per head); the reference is that torch model's own forward pass.
"""

import json

import numpy as np
import pytest
import torch

from embgeo.core.threads import limit_threads
from embgeo.errors import InputError, MissingDependencyError, SolverError, TooLargeError
from embgeo.ntp import synthetic
from embgeo.ntp.analysis.analyze import analyze as measure
from embgeo.ntp.analysis.probe import (
    count_contexts,
    cut_stream,
    model_dtype,
    probe,
    probe_model,
    read_units,
    select_contexts,
)

transformers = pytest.importorskip("transformers")

#: The GGUF tokenizer: byte-level BPE over a-z and the space (Ġ), with a few merges; token 0 is a control token.
TOKENS = ["<|endoftext|>", *"abcdefghijklmnopqrstuvwxyz", "Ġ", "th", "Ġt", "Ġa", "he", "Ġthe", "in", "er", "an",
          "on", "re"]
MERGES = ["t h", "Ġ t", "Ġ a", "h e", "Ġt he", "i n", "e r", "a n", "o n", "r e"]
D, LAYERS, HEADS, KV_HEADS, FF, WINDOW = 16, 2, 4, 2, 32, 24

TEXT = """the rain in the plain
stays mainly there

a cat sat on the mat
then the cat ran

another one
"""


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with limit_threads(1):
        yield


def _llama_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of the q / k rows (rotary halves interleaved per head)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """(path of the GGUF file, the torch LlamaForCausalLM in float64 with the same — float32 — weights)."""
    gguf = pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    cfg = transformers.LlamaConfig(vocab_size=len(TOKENS), hidden_size=D, intermediate_size=FF,
                                   num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                                   max_position_embeddings=WINDOW, rms_norm_eps=1e-5, rope_theta=10000.0,
                                   tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(cfg).eval()  # float32: the weights the file holds exactly
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))  # norms away from 1, so a norm read wrongly shows
    sd = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(WINDOW)
    w.add_embedding_length(D)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(D // HEADS)
    w.add_vocab_size(len(TOKENS))
    w.add_tokenizer_model("gpt2")
    w.add_token_list(TOKENS)
    w.add_token_types([3] + [1] * (len(TOKENS) - 1))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj"}
    for i in range(LAYERS):
        hf = f"model.layers.{i}."
        for g, h in names.items():
            w.add_tensor(f"blk.{i}.{g}.weight", sd[hf + h + ".weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _llama_permute(sd[hf + "self_attn.q_proj.weight"], HEADS))
        w.add_tensor(f"blk.{i}.attn_k.weight", _llama_permute(sd[hf + "self_attn.k_proj.weight"], KV_HEADS))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, ref.double()


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def _causal(V=9, d=4, seed=0):
    """A plain causal torch 'model': h_t = the mean of the embeddings of tokens 0..t, and a random head W."""
    torch.manual_seed(seed)
    emb = torch.nn.Embedding(V, d, dtype=torch.float64)

    def hidden(tokens):
        e = emb(tokens)
        return torch.cumsum(e, dim=1) / torch.arange(1, tokens.shape[1] + 1, dtype=e.dtype)[None, :, None]

    return hidden, np.random.default_rng(seed).normal(size=(V, d))


def _recorded(hidden):
    """(hidden that records the shape of every batch it is called on, that list of shapes)."""
    calls = []

    def spy(tokens):
        calls.append(tuple(tokens.shape))
        return hidden(tokens)

    return spy, calls


# -- 1. GGUF files ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [{"context_length": 3}, {"prefixes": True}])
def test_a_gguf_file_is_probed_with_its_own_hidden_states_and_head(tiny_gguf, text_file, mode):
    path, ref = tiny_gguf
    res = probe_model(path, text_file, dtype="float64", progress=False, batch_size=2, **mode)
    assert res.meta["format"] == "gguf" and res.meta["dtype"] == "float64" and res.meta["architecture"] == \
        "LlamaForCausalLM"
    W = ref.lm_head.weight.detach().numpy()
    assert np.array_equal(res.W, W) and not res.meta["tied_head"]
    ctx = res.contexts
    assert ctx.m > 10
    with torch.no_grad():
        for j in range(ctx.m):
            out = ref(torch.as_tensor(ctx.tokens(j))[None], output_hidden_states=True)
            h = out.hidden_states[-1][0, -1].numpy()  # Llama's last entry is after the final RMSNorm
            assert np.allclose(res.data.embeddings[j], h, rtol=1e-10, atol=1e-12)
            assert np.allclose(res.data.embeddings[j] @ W.T, out.logits[0, -1].numpy(), rtol=1e-10, atol=1e-10)


def test_a_gguf_file_computes_in_float32_by_default(tiny_gguf, text_file):
    path, ref = tiny_gguf
    assert model_dtype(path) == "float32"
    res = probe_model(path, text_file, context_length=2, progress=False)
    assert res.meta["dtype"] == "float32" and res.data.embeddings.dtype == np.float64
    X = torch.as_tensor(np.stack([res.contexts.tokens(j) for j in range(res.contexts.m)]))
    with torch.no_grad():
        h = ref(X, output_hidden_states=True).hidden_states[-1][:, -1].numpy()
    assert np.allclose(res.data.embeddings, h, rtol=1e-4, atol=1e-5)  # float32 rounding, not an error
    assert not np.array_equal(res.data.embeddings, h)
    res16 = probe_model(path, text_file, context_length=2, progress=False, dtype="bfloat16")
    assert res16.meta["dtype"] == "bfloat16" and np.allclose(res16.data.embeddings, h, rtol=0.1, atol=0.1)


def test_gguf_without_its_packages_or_file_is_one_clear_error(tiny_gguf, text_file, monkeypatch, tmp_path):
    import importlib.util

    with pytest.raises(InputError, match="is not a file; expected a GGUF file"):
        probe_model(tmp_path / "missing.gguf", text_file, context_length=2)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(MissingDependencyError, match=r"gguf: pip install 'embgeo\[lm\]'"):
        probe_model(tiny_gguf[0], text_file, context_length=2)


def test_a_folder_computes_in_its_configs_dtype(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "bfloat16"}))
    assert model_dtype(tmp_path) == "bfloat16"
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    assert model_dtype(tmp_path) == "float32"  # float16 is slow or missing on CPUs


# -- 3. which contexts --max-contexts keeps --------------------------------------------------------------------

def test_select_contexts_random_frequent_first():
    n_j = np.array([1, 5, 2, 5, 9, 1, 3, 2])
    a, b = select_contexts(n_j, 4, "random", seed=0), select_contexts(n_j, 4, "random", seed=0)
    assert np.array_equal(a, b) and a.size == 4 and np.all(np.diff(a) > 0)
    assert any(not np.array_equal(a, select_contexts(n_j, 4, "random", seed=s)) for s in range(1, 4))
    assert select_contexts(n_j, 3, "frequent").tolist() == [1, 3, 4]  # 9, 5, 5
    assert select_contexts(n_j, 4, "frequent").tolist() == [1, 3, 4, 6]
    assert select_contexts(n_j, 5, "frequent").tolist() == [1, 2, 3, 4, 6]  # the tie 2 = 2: the first, context 2
    assert select_contexts(n_j, 3, "first").tolist() == [0, 1, 2]
    assert select_contexts(n_j, None, "random").tolist() == list(range(8))


@pytest.mark.parametrize("how", [{"context_length": 2}, {"prefixes": True, "window": 6}])
def test_sampled_contexts_keep_their_counts_from_the_whole_text(how):
    rng = np.random.default_rng(3)
    seqs = [rng.integers(0, 4, size=n).tolist() for n in (12, 9, 15, 7)]
    full = count_contexts(seqs, 4, **how)
    key = {tuple(full.tokens(j)): full.counts[j].toarray() for j in range(full.m)}
    for sample in ("random", "frequent", "first"):
        for seed in (0, 1):
            part = count_contexts(seqs, 4, max_contexts=5, sample=sample, seed=seed, **how)
            assert part.m == 5 and part.info["contexts_dropped"] == full.m - 5
            assert part.info["pairs"] + part.info["pairs_dropped"] == full.info["pairs"]
            for j in range(part.m):
                assert np.array_equal(part.counts[j].toarray(), key[tuple(part.tokens(j))])
    first = count_contexts(seqs, 4, max_contexts=5, sample="first", **how)
    assert [tuple(first.tokens(j)) for j in range(5)] == [tuple(full.tokens(j)) for j in range(5)]  # the old way
    n_full = np.asarray(full.counts.sum(axis=1)).ravel()
    frequent = count_contexts(seqs, 4, max_contexts=5, sample="frequent", **how)
    assert sorted(np.asarray(frequent.counts.sum(axis=1)).ravel(), reverse=True) == sorted(n_full, reverse=True)[:5]
    r0, r0b, r1 = (count_contexts(seqs, 4, max_contexts=5, sample="random", seed=s, **how) for s in (0, 0, 7))
    assert [tuple(r0.tokens(j)) for j in range(5)] == [tuple(r0b.tokens(j)) for j in range(5)]
    assert [tuple(r0.tokens(j)) for j in range(5)] != [tuple(r1.tokens(j)) for j in range(5)]
    with pytest.raises(InputError, match="sample: expected one of random, frequent, first"):
        count_contexts(seqs, 4, max_contexts=5, sample="best", **how)


# -- 4. text units --------------------------------------------------------------------------------------------

def test_text_units(text_file):
    assert read_units(text_file) == ["the rain in the plain stays mainly there",
                                     "a cat sat on the mat then the cat ran", "another one"]
    assert read_units(text_file, "lines") == ["the rain in the plain", "stays mainly there", "a cat sat on the mat",
                                              "then the cat ran", "another one"]
    assert read_units(text_file, "stream") == [TEXT.strip()]
    with pytest.raises(InputError, match="units: expected one of paragraphs, lines, stream"):
        read_units(text_file, "words")


def test_cut_stream_keeps_every_pair_once():
    toks = list(range(30))
    pieces = cut_stream(toks, 7)
    assert all(len(p) <= 8 for p in pieces) and pieces[0] == list(range(8)) and pieces[-1][-1] == 29
    assert sorted(t for p in pieces for t in p[1:]) == list(range(1, 30))  # every next token once
    k = 3
    pairs = {(tuple(p[i:i + k]), p[i + k]) for p in cut_stream(toks, 7, overlap=k) for i in range(len(p) - k)}
    assert pairs == {(tuple(toks[i:i + k]), toks[i + k]) for i in range(len(toks) - k)}
    assert cut_stream([1, 2], 7) == [[1, 2]]


def test_units_through_the_model(tiny_gguf, text_file):
    path, _ = tiny_gguf
    by = {u: probe_model(path, text_file, prefixes=True, units=u, progress=False) for u in ("lines", "paragraphs",
                                                                                            "stream")}
    assert by["lines"].meta["sequences"] == 5 and by["paragraphs"].meta["sequences"] == 3
    stream = by["stream"]
    assert stream.meta["unit_count"] == 1 and stream.meta["sequences"] > 1  # longer than the window of 24
    assert all(len(s) <= WINDOW + 1 for s in stream.contexts.sequences)
    assert stream.contexts.info["truncated_sequences"] == 0


# -- 5. --save-arrays -----------------------------------------------------------------------------------------

def test_dense_arrays_only_with_save_arrays(tmp_path):
    hidden, W = _causal()
    res = probe(hidden, W, [[1, 2, 3, 4, 5, 1, 2, 6], [3, 3, 1, 2, 7]], context_length=2, progress=False,
                token_labels=[f"t{v}" for v in range(9)])
    written = res.save(tmp_path / "a")
    assert {"summary.json", "vocabulary.txt", "probe.png", "row_norms.npy"} <= set(written)
    assert not {"H.npy", "W.npy", "W_star.npy", "W_mm.npy"} & set(written)
    assert not (tmp_path / "a" / "W.npy").exists()
    written = res.save(tmp_path / "b", save_arrays=True)
    assert {"H.npy", "W.npy"} <= set(written) and np.array_equal(np.load(tmp_path / "b" / "W.npy"), W)


def test_the_timed_rows_are_not_run_again():
    """forward_rate's states of the first batch's first rows go into hidden_states (``first``): H is the same as
    without them, and the forward passes run only the rest of that batch (a long stream's timed row is 8,192
    positions)."""
    import torch

    from embgeo.ntp.analysis.probe import count_contexts, forward_rate, hidden_states

    hidden, _ = _causal()
    spy, calls = _recorded(hidden)
    seqs = np.random.default_rng(1).integers(1, 9, size=(7, 300)).tolist()
    contexts = count_contexts(seqs, 9, prefixes=True, window=400)
    timing = forward_rate(spy, contexts, 4, torch.device("cpu"), 4)
    assert timing.rows == 2 and calls == [(1, 8), (2, 299)]
    calls.clear()
    H = hidden_states(spy, contexts, d=4, batch_size=4, progress=False, first=timing)
    assert calls == [(2, 299), (1, 1), (3, 299)]  # the first batch's other 2 rows, the causal check, the last batch
    assert np.allclose(H, hidden_states(hidden, contexts, d=4, batch_size=4, progress=False), rtol=1e-12, atol=0)


def test_default_batch_holds_512_positions_of_short_windows():
    """Without batch_size, windows of k tokens go max(32, 512 // k) to a pass (a pass of 32 × 2 positions was mostly
    per-call overhead on a real LM); prefixes 32 lines; a given batch_size is kept."""
    from embgeo.ntp.analysis.probe import count_contexts, default_batch_size

    seqs = [list(range(1, 40)), list(range(5, 30))]
    assert default_batch_size(count_contexts(seqs, 50, context_length=2)) == 256
    assert default_batch_size(count_contexts(seqs, 50, context_length=4)) == 128
    assert default_batch_size(count_contexts(seqs, 50, context_length=30)) == 32
    assert default_batch_size(count_contexts(seqs, 50, prefixes=True, window=64)) == 32
    hidden, W = _causal()
    spy, calls = _recorded(hidden)
    seqs = np.random.default_rng(0).integers(1, 9, size=(6, 60)).tolist()  # nearly all 64 windows of 2 tokens
    res = probe(spy, W, seqs, context_length=2, progress=False, max_seconds=None)
    assert res.data.m > 32  # so that the old default of 32 would have shown
    assert res.meta["batch_size"] == 256 and max(b for b, _ in calls) == res.data.m  # all in one pass
    calls.clear()
    res = probe(spy, W, seqs, context_length=2, progress=False, max_seconds=None, batch_size=5)
    assert res.meta["batch_size"] == 5 and max(b for b, _ in calls) == 5


# -- 6. one separability verdict ------------------------------------------------------------------------------

def _measured(capsys) -> tuple:
    """measure() on separable data (rank H = m) with the CLI's printing as its report: (result, printed)."""
    from embgeo.ntp.cli import _print_stage

    res = measure(synthetic(8, 6, 12, 2, seed=1), np.random.default_rng(0).normal(size=(6, 12)),
                  report=_print_stage)
    return res, capsys.readouterr().out


def test_the_ntp_svm_decides_separability_and_print_and_summary_agree(monkeypatch, capsys):
    """The user's case: the direct routes stop undecided, the NTP-SVM then finds a separating point."""
    import embgeo.ntp.analysis.probe as probe_module

    def undecided(*args, **kwargs):
        raise SolverError("is_separable: the dual iterations neither separated nor found a Farkas matrix "
                          "(max_seconds after 9 iterations); use method='lp' or allow more time")

    monkeypatch.setattr(probe_module.theory, "is_separable", undecided)
    res, out = _measured(capsys)
    assert res.to_dict()["separable"] is True and res.to_dict()["separability_verdict"] == "True"
    verdicts = [s for s in out.splitlines() if s.startswith("separable ")]
    assert len(verdicts) == 1 and verdicts[0].startswith("separable    True") and "NTP-SVM" in verdicts[0]
    assert "not decided by the direct routes" in out and "--separability-method lp" in out and "method='lp'" not in out


def test_undecided_separability_is_null_and_printed_undecided(monkeypatch, capsys):
    import embgeo.ntp.analysis.probe as probe_module

    def fail(*args, **kwargs):
        raise SolverError("out of time")

    monkeypatch.setattr(probe_module.theory, "is_separable", fail)
    monkeypatch.setattr(probe_module.theory, "ntp_svm", fail)
    res, out = _measured(capsys)
    summary = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert summary["separable"] is None and summary["separability_verdict"] == "undecided"
    verdicts = [s for s in out.splitlines() if s.startswith("separable ")]
    assert len(verdicts) == 1 and verdicts[0].startswith("separable    undecided: out of time")


# -- 7-9. estimates, messages, the time limit and progress lines on the command line -------------------------

def test_cli_estimates_messages_and_progress_lines(tiny_gguf, text_file, tmp_path, capsys):
    from embgeo.cli import main

    out = tmp_path / "out"
    # three passes of 4 windows: the rate is timed on the first (kept), so two are left to estimate
    assert main(["ntp", "probe", "--model", str(tiny_gguf[0]), "--text", str(text_file), "-k", "2",
                 "--max-contexts", "12", "--batch-size", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    memory = next(s for s in lines if s.startswith("memory "))
    timing = next(s for s in lines if s.startswith("time "))
    assert "model " in memory and "forward pass " in memory
    assert "forward passes ≈" in timing and "what is left of the limit for the whole probe, --max-seconds" in timing
    assert "(3 batches, 16 token positions to run)" in timing  # 24 positions, 8 of them timed and kept
    assert "passes over the m × V logits ≈" in timing and "ms per context" in timing
    assert not any(s.startswith("warning ") for s in lines)
    assert lines.index(timing) < lines.index(next(s for s in lines if s.startswith("forward ")))
    assert any("× 𝓗)" in s for s in lines if s.startswith("model loss")) and " of H" not in printed
    progress = [s for s in lines if s.startswith("progress ")]  # stdout is not a terminal here
    assert any("forward pass 1/" in s for s in progress) and any("hidden started" in s for s in progress)
    assert any("geometry done in" in s for s in progress) and all("since the start)" in s for s in progress)
    assert "--sample" not in printed and "a random sample, --seed 0" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["max_seconds"] == 600.0 and summary["meta"]["dtype"] == "float32"
    assert summary["memory_estimate_bytes"]["model"] > 0 and summary["time_estimate_seconds"]["forward"] > 0
    assert summary["separability_verdict"] in ("True", "False", "undecided")
    assert any(s.startswith(f"separable    {summary['separability_verdict']}") for s in lines)
    assert not (out / "W.npy").exists() and (out / "summary.json").exists() and (out / "probe.png").exists()


def test_cli_train_head_stops_at_the_wall(tiny_gguf, text_file, tmp_path, capsys):
    """--max-seconds is one wall with --train-head too: 10⁸ steps cannot finish in 6 s, so each run stops at the
    limit with its steps recorded, and the measurement got three quarters of the limit (HEAD_TIME_SHARE)."""
    from embgeo.cli import main
    from embgeo.ntp.cli import HEAD_TIME_SHARE

    out = tmp_path / "out"
    assert main(["ntp", "probe", "--model", str(tiny_gguf[0]), "--text", str(text_file), "-k", "2",
                 "--max-contexts", "12", "--max-seconds", "6", "--train-head", "--head-optimizer", "gd,ngd",
                 "--head-steps", "100000000", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    announce = next(s for s in lines if s.startswith("train head ") and "--max-seconds" in s)
    assert "within the last 2 s of --max-seconds" in announce
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["max_seconds"] == 6.0
    assert summary["meta"]["measurement_max_seconds"] == pytest.approx(6 * (1 - HEAD_TIME_SHARE))
    for opt in ("gd", "ngd"):
        run = summary["head_training"]["runs"][opt]
        done = run["rows"][-1]["step"]
        assert 1 <= done < 100000000 and run["stopped"] == f"the time limit after {done} of 100000000 steps"
        assert any(s.strip().startswith(opt) and "stopped by the time limit" in s for s in lines)


def test_cli_warns_when_the_estimate_leaves_the_solvers_nothing(tiny_gguf, text_file, tmp_path, capsys,
                                                                 monkeypatch):
    """Passes over the logits estimated at 100 s per context (a stand-in for a slow machine) take the whole limit: a
    warning line before the forward passes says the solvers will not run unless the passes, timed again before the
    solvers, are faster — and here they are (the estimate was the stand-in; the run's own passes take milliseconds),
    so the solvers get the time the measured passes leave and decide; negative control: the unpatched run of
    test_cli_estimates_messages_and_progress_lines prints no warning."""
    from embgeo.cli import main
    from embgeo.ntp.analysis import probe as P

    monkeypatch.setattr(P, "pass_rates", lambda *a, **k: {"loss": 100.0, "margins": 100.0, "fixed": 0.0})
    out = tmp_path / "out"
    assert main(["ntp", "probe", "--model", str(tiny_gguf[0]), "--text", str(text_file), "-k", "2",
                 "--max-contexts", "12", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    warning = [s for s in lines if s.startswith("warning ")]
    assert len(warning) == 1 and "separability and the NTP-SVM will not run unless" in warning[0]
    assert lines.index(warning[0]) < lines.index(next(s for s in lines if s.startswith("forward ")))
    summary = json.loads((out / "summary.json").read_text())
    assert "separability" not in summary["errors"] and summary["separable"] is not None


def test_the_time_limit_stops_the_forward_passes(tiny_gguf, text_file):
    with pytest.raises(InputError, match="ran out of the time limit after 0 of"):
        probe_model(tiny_gguf[0], text_file, context_length=2, max_seconds=1e-9, progress=False)


def test_cli_refuses_a_bad_max_seconds(tiny_gguf, text_file, capsys):
    from embgeo.cli import main

    assert main(["ntp", "probe", "--model", str(tiny_gguf[0]), "--text", str(text_file), "-k", "2",
                 "--max-seconds", "0"]) == 2
    assert "--max-seconds" in capsys.readouterr().err


def test_solver_progress_lines_off_a_terminal(capsys, monkeypatch):
    """Off a terminal a solver stage prints a flushed line at most every SOLVER_LINE_SECONDS (the NTP-SVM ran for
    minutes without one on a real LM), with the numbers it reports; on a terminal it is a bar, not lines."""
    from embgeo.ntp import cli
    from embgeo.ntp.solvers.outcome import ProgressEvent

    hooks = cli._hooks(plain=True)
    hooks["solver_progress"](ProgressEvent("alm", 3, 0.5, {"working_set": 10, "rho": 100.0}))
    hooks["solver_progress"](ProgressEvent("alm", 4, 0.25))  # within 10 s of the first: no line
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("progress     NTP-SVM (augmented Lagrangian) step 3: gap 0.5, "
                                               "working_set 10, rho 100")
    monkeypatch.setattr(cli, "SOLVER_LINE_SECONDS", 0.0)
    hooks["solver_progress"](ProgressEvent("hinge", 5, values={"phi": 12.5}))
    assert "squared hinge step 5: phi 12.5" in (out := capsys.readouterr().out) and "gap" not in out  # NaN: none


@pytest.mark.parametrize("user", [None, ""])
def test_no_third_party_bars_in_a_logged_probe(tiny_gguf, text_file, tmp_path, user):
    """Off a terminal (here: pipes) transformers' bars — the GGUF conversion's, written with carriage returns — are
    off and the probe's own progress lines are there; a TQDM_DISABLE the user set is kept (tqdm reads any non-empty
    value as "disable", so the empty one asks for the bars). A fresh process: tqdm reads its environment once, when
    first imported."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    if user is not None:
        env["TQDM_DISABLE"] = user
    run = "import sys; from embgeo.cli import main; sys.exit(main(sys.argv[1:]))"
    args = ["ntp", "probe", "--model", str(tiny_gguf[0]), "--text", str(text_file), "-k", "2", "--max-contexts", "12",
            "--max-seconds", "120"]
    proc = subprocess.run([sys.executable, "-c", run, *args], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "progress     hidden started" in proc.stdout
    bars = "Converting and de-quantizing GGUF tensors" in proc.stderr
    assert bars == (user == "")  # the bar is there only where the user asked for it


def test_a_silent_stage_says_it_is_still_running_off_a_terminal(capsys, monkeypatch):
    """Off a terminal, a stage that has printed nothing for HEARTBEAT_SECONDS gets a line naming it (the loss pass ran
    253 s without one at m = 100,000); never before that, never on a terminal, and _interruptible ticks it while the
    work runs in its thread."""
    import threading

    from embgeo.ntp import cli

    hooks = cli._hooks(plain=True)
    beat = hooks.pop("heartbeat")
    hooks["started"]("loss")
    beat()  # just started: within HEARTBEAT_SECONDS of its own line
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("progress     loss started (")  # its own line only
    monkeypatch.setattr(cli, "HEARTBEAT_SECONDS", 0.0)
    beat()
    out = capsys.readouterr().out
    assert out.startswith("progress     loss still running (") and "s in it)" in out
    terminal = cli._hooks(plain=False).pop("heartbeat")
    terminal()
    assert capsys.readouterr().out == ""  # a terminal has bars, not lines
    ticks, ticked = [], threading.Event()

    def tick():
        ticks.append(1)
        if len(ticks) >= 3:
            ticked.set()

    def work():  # returns only once the main thread has ticked three times (no timing assumed: a busy machine too)
        assert ticked.wait(60)
        return 7

    assert cli._interruptible(work, tick=tick) == 7 and len(ticks) >= 3


def test_time_estimate_from_timed_kernels(monkeypatch):
    """The estimate is the counted work at the rates timed on this machine: the forward passes' token positions, the
    loss's pass and LOGIT_PASSES − 1 margin passes per context, and the solvers get what the limit leaves (0 when
    nothing is left); a wrong count of positions or passes would move these numbers. The rates are timed with the
    code that runs them, here only checked to be seconds (no assertion on their values: a test is not timed)."""
    import torch

    from embgeo.ntp.analysis.probe import LOGIT_PASSES, count_contexts, forward_rate, pass_rates, time_estimate

    rates = {"forward": 1e-3, "loss": 2e-3, "margins": 1e-3, "fixed": 0.5}
    plan = {"tokens": 1000, "batches": 4}
    est = time_estimate(plan, 100, 10.0, rates)
    assert est["forward"] == pytest.approx(1.0)
    assert est["logit_passes"] == pytest.approx(100 * (2e-3 + (LOGIT_PASSES - 1) * 1e-3) + 0.5)
    assert est["after_solvers"] == pytest.approx(100 * (LOGIT_PASSES - 1) * 1e-3 + 0.5)  # the fixed work comes after
    assert est["solvers"] == pytest.approx(10.0 - est["forward"] - est["logit_passes"])
    assert est["total"] == pytest.approx(10.0) and est["limit"] == 10.0
    tight = time_estimate({"tokens": 10**5, "batches": 4}, 100, 10.0, rates)  # forward 100 s > 10 s
    assert tight["solvers"] == 0.0 and tight["total"] == pytest.approx(tight["forward"] + tight["logit_passes"])
    hidden, calls = _recorded(lambda tokens: torch.zeros(*tokens.shape, 8))
    contexts = count_contexts([[1, 2, 3, 4, 5, 6]] * 3, 10, context_length=2)
    assert 0 < forward_rate(hidden, contexts, 2, torch.device("cpu"), 8).rate < 1.0
    assert calls == [(1, 2), (2, 2)]  # a warm-up on the first row, then the first batch timed
    # long prefixes: only the first rows holding RATE_POSITIONS positions are timed, not the whole first batch
    calls.clear()
    long = count_contexts([list(range(1, 301 + i)) for i in range(6)], 400, prefixes=True, window=1000)
    timing = forward_rate(hidden, long, 4, torch.device("cpu"), 8)
    assert 0 < timing.rate < 1.0 and timing.rows == 2 and tuple(timing.states.shape) == (2, 304, 8)
    assert calls == [(1, 8), (2, 304)]  # the first batch is (4, 304): its first 2 rows hold the 512 positions
    data = synthetic(80, 50, 8, 3, seed=0)
    timed = pass_rates(data.probs, data.weights, np.ones((50, 8)), min_seconds=0.01)
    assert set(timed) == {"loss", "margins", "fixed"} and all(0 < v < 1.0 for v in timed.values())  # seconds

    import embgeo.ntp.analysis.probe as P

    # the fixed work is timed on FIXED_SAMPLE_ROWS rows and scaled to V (a kernel costing 1 s on the sample)
    monkeypatch.setattr(P, "_seconds_per_call", lambda fn, min_seconds: (fn(), 1.0)[1])
    monkeypatch.setattr(P, "FIXED_SAMPLE_ROWS", 10)
    assert P._fixed_seconds(np.ones((40, 8)), 0.01) == pytest.approx(4.0)
    assert P._fixed_seconds(np.ones((7, 8)), 0.01) == pytest.approx(1.0)  # a head shorter than the sample: itself




def test_the_limit_counts_what_follows_the_load(tiny_gguf, text_file, monkeypatch):
    """probe_model's limit runs from its call: the work between loading and the forward passes (the head, the
    tokenizer's pass, the labels) counts too. On a fake clock where that work costs 100 s of a 50 s limit the forward
    passes get nothing; negative control: at 1 s they run."""
    import time as _time

    from embgeo.ntp.analysis import probe as P

    from .test_time_limits import FakeClock, spy

    class Ticking(FakeClock):
        """Moves 1 ms at every reading, so that the rate timings (which run until some time has passed) end."""

        def __call__(self) -> float:
            self.now += 1e-3
            return self.now

    clock = Ticking()
    monkeypatch.setattr(_time, "perf_counter", clock)
    spy(monkeypatch, clock, P, "model_info", cost=100.0)
    with pytest.raises(InputError, match="ran out of the time limit after 0 of"):
        probe_model(tiny_gguf[0], text_file, context_length=2, max_seconds=50, progress=False)
    monkeypatch.undo()
    monkeypatch.setattr(_time, "perf_counter", clock)
    spy(monkeypatch, clock, P, "model_info", cost=1.0)
    res = probe_model(tiny_gguf[0], text_file, context_length=2, max_seconds=50, progress=False)
    assert res.data is not None and res.data.m > 0


def test_one_window_count_for_the_probe_and_ntpdata():
    """Issue 40 §2: the probe's contexts and NTPData.from_sequences(windows=True) count windows with one function
    (embgeo.ntp.data.window_pairs): the same contexts in the same order (first appearance), the same p̂ and π̂ —
    against a direct count with a dict."""
    import numpy as np

    from embgeo.ntp import NTPData

    rng = np.random.default_rng(0)
    seqs = [list(rng.integers(0, 6, size=n)) for n in (1, 2, 7, 12, 3, 9)]
    k, V = 2, 6
    ctx = count_contexts(seqs, V, context_length=k)
    data = NTPData.from_sequences(seqs, k, windows=True, vocab_size=V)
    counts: dict = {}
    for s in seqs:
        for t in range(len(s) - k):
            counts.setdefault(tuple(s[t:t + k]), {}).setdefault(int(s[t + k]), 0)
            counts[tuple(s[t:t + k])][int(s[t + k])] += 1
    order = list(counts)  # first appearance
    assert [tuple(ctx.tokens(j)) for j in range(ctx.m)] == order == [tuple(c) for c in data.contexts]
    probs, weights = ctx.probs_and_weights()
    expected = np.zeros((len(order), V))
    for j, c in enumerate(order):
        for z, n in counts[c].items():
            expected[j, z] = n
    n_j = expected.sum(axis=1)
    np.testing.assert_allclose(probs.toarray(), expected / n_j[:, None], rtol=0, atol=1e-15)
    np.testing.assert_allclose(data.probs.toarray(), expected / n_j[:, None], rtol=0, atol=1e-15)
    np.testing.assert_allclose(weights, n_j / n_j.sum(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(data.weights, n_j / n_j.sum(), rtol=0, atol=1e-15)


def test_a_bad_separability_method_is_refused_before_any_forward_pass():
    """Validated once, at the probe's own boundary (the analysis it hands over to does not check again): before the
    model runs, not after its forward passes."""
    import numpy as np
    import torch

    calls = []

    def hidden(tokens):
        calls.append(tokens.shape)
        return torch.zeros(tokens.shape[0], tokens.shape[1], 3)

    with pytest.raises(InputError, match="separability_method: expected one of auto, hinge, dual, lp"):
        probe(hidden, np.ones((5, 3)), [[0, 1, 2, 3]], context_length=2, separability_method="simplex")
    assert calls == []


def test_no_constraints_give_one_verdict_line_n_a(capsys):
    """Every support the whole vocabulary: no constraint (6b). With a model's W the separability stage says "n/a"
    once, and the NTP-SVM's stage does not repeat it (it did, after the two printers became one)."""
    import numpy as np
    import scipy.sparse as sp

    from embgeo.ntp import NTPData
    from embgeo.ntp.cli import _print_stage

    rng = np.random.default_rng(0)
    P = rng.random((4, 3)) + 0.1
    data = NTPData(rng.standard_normal((4, 5)), sp.csr_matrix(P / P.sum(axis=1, keepdims=True)))
    res = measure(data, rng.standard_normal((3, 5)), report=_print_stage)
    verdicts = [s for s in capsys.readouterr().out.splitlines() if s.startswith("separable ")]
    assert res.no_constraints and res.separability_verdict == "n/a"
    assert len(verdicts) == 1 and verdicts[0].startswith("separable    n/a: every support is the whole vocabulary")


def test_memory_estimate_leaves_out_an_equality_system_it_will_not_build(monkeypatch):
    """The analysis builds F's equality system only within the dense budget (analyze.memory_plan); above it the
    probe's total must not count it, nor refuse for it (issue 38: at m = 100,000 a 31.7 GiB system that would
    never be built refused a probe of a few GiB)."""
    from embgeo.core import validate
    from embgeo.ntp.analysis import probe as P

    data = synthetic(60, 12, 4, 3, seed=0)  # S_j = 3: the system of W* and F is not empty
    full = P.memory_estimate(data.probs, data.d)
    assert full["equality_system"] > 0 and full["equality_system_built"] == 1
    assert full["total"] == sum(v for k, v in full.items() if k not in ("total", "equality_system_built"))
    monkeypatch.setattr(validate, "DENSE_BUDGET_BYTES", full["equality_system"] - 1)
    skip = P.memory_estimate(data.probs, data.d)
    assert skip["equality_system_built"] == 0 and skip["equality_system"] == full["equality_system"]
    assert skip["total"] == full["total"] - full["equality_system"]
    # a room between the two totals: refused with the system counted, accepted without it
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: (skip["total"] + full["total"]) / 2)
    P.check_memory(skip, data.V, data.d)
    with pytest.raises(TooLargeError, match="exact paths"):
        P.check_memory(full, data.V, data.d)


def test_attention_scores_are_counted_only_where_the_kernel_forms_them():
    """B × heads × L × L scores: counted for eager attention and an unknown one, not for "sdpa" on the CPU (float32 or
    float64: its fused kernel never forms them), counted again for float64 on CUDA (the fallback kernel)."""
    import torch

    from embgeo.ntp.analysis import probe as P

    held = P.attention_scores_held
    assert held("eager", "cpu", torch.float32) and held(None, "cpu", torch.float32)
    assert held("eager", "cuda", torch.float16)
    assert not held("sdpa", "cpu", torch.float32) and not held("sdpa", "cpu", torch.float64)
    assert not held("sdpa", "cuda", torch.bfloat16) and held("sdpa", "cuda", torch.float64)
    data = synthetic(20, 12, 4, 3, seed=0)
    model = {"dtype_bytes": 4, "hidden_size": 8, "intermediate_size": 16, "heads": 2, "parameter_bytes": 100}
    plan = {"largest": 64, "longest": 32}
    eager = P.memory_estimate(data.probs, data.d, {**model, "attention_scores": True}, plan)["forward_activations"]
    fused = P.memory_estimate(data.probs, data.d, {**model, "attention_scores": False}, plan)["forward_activations"]
    assert fused == 4 * 64 * (6 * 8 + 2 * 16) and eager == fused + 4 * 64 * 2 * 32


def test_memory_estimate_leaves_out_an_equality_system_that_does_not_fit_the_memory_left():
    """Within the dense budget but beyond the memory left beside the other parts, the analysis does not build F's
    system either (analyze.memory_plan, room): the estimate must not count it, so the probe does not refuse a run
    the analysis would do without it; one byte more room and it is built and counted."""
    from embgeo.ntp.analysis import probe as P

    data = synthetic(60, 12, 4, 3, seed=0)
    full = P.memory_estimate(data.probs, data.d)
    others = full["total"] - full["equality_system"]
    exact = P.memory_estimate(data.probs, data.d, room=others + full["equality_system"])
    assert exact["equality_system_built"] == 1 and exact["total"] == full["total"]
    short = P.memory_estimate(data.probs, data.d, room=others + full["equality_system"] - 1)
    assert short["equality_system_built"] == 0 and short["total"] == others
    # the model is loaded already: its bytes are not taken from the room
    model = {"dtype_bytes": 4, "hidden_size": 8, "intermediate_size": 16, "heads": 2, "parameter_bytes": 10**9}
    plan = {"largest": 4, "longest": 3}
    with_model = P.memory_estimate(data.probs, data.d, model, plan, room=others + full["equality_system"] + 4 * 4 * (
        6 * 8 + 2 * 16 + 2 * 3))
    assert with_model["equality_system_built"] == 1


def test_memory_estimate_counts_the_process_and_the_heads_work(monkeypatch):
    """Issue 38 on Gemma 3 (V = 262,144): the first estimate had left out the process besides the model's parameters
    (3.3 GiB resident after loading a 1.0 GiB model) and the two V × d arrays an analysis with a head holds beside W
    and the answers (P_F(W), one difference): 6.4 GiB estimated against 13.6 measured. ``process`` is the resident
    memory less the parameters, ``head_work`` two V × d float64 arrays; both in the total, neither taken from the
    room (already allocated, or counted with the rest)."""
    import psutil

    from embgeo.ntp.analysis import probe as P

    class Info:
        rss = 5 * 2**30

    monkeypatch.setattr(psutil.Process, "memory_info", lambda self: Info())
    data = synthetic(60, 12, 4, 3, seed=0)
    model = {"dtype_bytes": 4, "hidden_size": 8, "intermediate_size": 16, "heads": 2, "parameter_bytes": 2**30,
             "attention_scores": False}
    mem = P.memory_estimate(data.probs, data.d, model, {"largest": 4, "longest": 3})
    assert mem["process"] == 4 * 2**30 and mem["head_work"] == 2 * 8 * data.V * data.d
    assert mem["total"] == sum(v for k, v in mem.items() if k not in ("total", "equality_system_built"))
    bare = P.memory_estimate(data.probs, data.d)  # a probe with no model info: no process part
    assert "process" not in bare and bare["head_work"] == mem["head_work"]
    # the room decides the equality system beside the other parts, the model and the process not taken from it
    others = mem["total"] - mem["equality_system"] - mem["model"] - mem["process"]
    assert P.memory_estimate(data.probs, data.d, model, {"largest": 4, "longest": 3},
                             room=others + mem["equality_system"])["equality_system_built"] == 1
    # nor is the resident process refused against the memory left (found: the study's second probe, its first one's
    # arrays still resident, refused as "15.80 GiB need, 13.10 GiB left")
    from embgeo.core import validate

    need = mem["total"] - mem["model"] - mem["process"]
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: need + 1.0)
    P.check_memory(mem, data.V, data.d)
    monkeypatch.setattr(validate, "available_memory_bytes", lambda: need - 1.0)
    with pytest.raises(TooLargeError, match="exact paths"):
        P.check_memory(mem, data.V, data.d)


def test_memory_plan_counts_the_heads_work_with_a_head(monkeypatch):
    """The plan before the solvers (the "peak ≈" line): two V × d arrays more when the analysis has a model's head."""
    import psutil

    from embgeo.ntp import theory
    from embgeo.ntp.analysis.analyze import memory_plan

    class Info:
        rss = 2**30

    monkeypatch.setattr(psutil.Process, "memory_info", lambda self: Info())
    data = synthetic(60, 12, 4, 3, seed=0)
    F = theory.subspace(data)
    assert memory_plan(data, F, head=True).peak_estimate - memory_plan(data, F).peak_estimate == 2 * 8 * data.V * data.d


def test_the_peak_estimate_counts_w_mm_once():
    """After the NTP-SVM ran, the estimate for the stages that ran adds the dual's arrays only: W^mm is one of the
    answers counted before (it had been added twice)."""
    data = synthetic(8, 8, 6, 2, seed=0)  # separable: the NTP-SVM runs
    res = measure(data)
    assert res.ran_svm
    plan = res.plan
    before = plan.process + (plan.equality_system if plan.equality_system_built else 0) + plan.parts["outputs"]
    assert plan.peak_estimate == before + plan.parts["svm_dual"]
