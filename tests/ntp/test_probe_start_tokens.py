"""The tokenizer's start tokens in `embgeo ntp probe` (issue 38, found on Gemma 3 270M): a model whose tokenizer puts
``<bos>`` before every text is run with it before every context, and the contexts themselves never hold it.

The model is a tiny Llama saved with ``save_pretrained`` beside a word-level tokenizer whose post-processor adds
``<bos>``; the reference is that model's own forward pass on ``[<bos>] + context`` (or the context alone).
"""

import numpy as np
import pytest
import torch

from embgeo.core.threads import limit_threads
from embgeo.errors import InputError
from embgeo.ntp.analysis.probe import probe_model, start_tokens

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = """the rain in the plain stays mainly in the plain
a cat sat on the mat and the cat ran
the cat in the rain
"""
WINDOW = 8


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with limit_threads(1):
        yield


def _tokenizer(bos: bool):
    """A word-level tokenizer of TEXT's words; with ``bos`` its post-processor puts <bos> (id 1) before a text."""
    words = sorted(set(TEXT.split()))
    vocab = {"<unk>": 0, "<bos>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    if bos:
        tok.post_processor = tokenizers.processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<bos>")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """(folder with a tiny Llama and the <bos> tokenizer, the model in float64)."""
    tok = _tokenizer(bos=True)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=WINDOW,
                                   tie_word_embeddings=False, bos_token_id=1, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    path = tmp_path_factory.mktemp("bos")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, model.double()


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def _state(model, tokens) -> np.ndarray:
    """The model's own final state (after the last norm) at the last of ``tokens``."""
    with torch.no_grad():
        out = model(torch.as_tensor(tokens)[None], output_hidden_states=True)
    return out.hidden_states[-1][0, -1].numpy()


def test_start_tokens_are_what_the_tokenizer_puts_before_a_text():
    assert start_tokens(_tokenizer(bos=True)) == [1]
    assert start_tokens(_tokenizer(bos=False)) == []


@pytest.mark.parametrize("mode", [{"context_length": 2}, {"prefixes": True}])
def test_bos_runs_before_every_context_and_is_not_one_of_its_tokens(folder, text_file, mode):
    path, model = folder
    res = probe_model(path, text_file, dtype="float64", progress=False, units="lines", **mode)
    ctx = res.contexts
    assert res.meta["start_tokens"] == ["<bos>"]
    assert ctx.m > 10 and all(1 not in ctx.tokens(j) for j in range(ctx.m))
    assert 1 not in ctx.counts.indices  # nor a next token
    if "prefixes" in mode:  # <bos> takes one position of the window
        assert res.meta["window"] == WINDOW - 1 and max(len(ctx.tokens(j)) for j in range(ctx.m)) == WINDOW - 1
    for j in range(ctx.m):
        toks = list(ctx.tokens(j))
        assert np.allclose(res.data.embeddings[j], _state(model, [1, *toks]), rtol=1e-10, atol=1e-12)


def test_start_none_runs_the_contexts_alone(folder, text_file):
    path, model = folder
    res = probe_model(path, text_file, dtype="float64", progress=False, units="lines", context_length=2, start="none")
    with_bos = probe_model(path, text_file, dtype="float64", progress=False, units="lines", context_length=2)
    ctx = res.contexts
    assert res.meta["start_tokens"] == []
    # the same contexts either way (the text's own tokens); only what precedes them in the model differs
    assert [list(ctx.tokens(j)) for j in range(ctx.m)] == \
        [list(with_bos.contexts.tokens(j)) for j in range(with_bos.contexts.m)]
    for j in range(ctx.m):
        assert np.allclose(res.data.embeddings[j], _state(model, list(ctx.tokens(j))), rtol=1e-10, atol=1e-12)
    assert not np.allclose(res.data.embeddings, with_bos.data.embeddings, atol=1e-3)


def test_a_bad_start_is_refused(folder, text_file):
    with pytest.raises(InputError, match="start: expected one of model, none"):
        probe_model(folder[0], text_file, context_length=2, start="bos", progress=False)


@pytest.mark.parametrize("flag", [[], ["--start-tokens", "none"]])
def test_cli_says_what_runs_before_the_contexts(folder, text_file, tmp_path, capsys, flag):
    import json

    from embgeo.cli import main

    out = tmp_path / "out"
    assert main(["ntp", "probe", "--model", str(folder[0]), "--text", str(text_file), "-k", "2", "--units", "lines",
                 "--out", str(out), *flag]) == 0
    model_line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("model "))
    summary = json.loads((out / "summary.json").read_text())
    if flag:
        assert "start tokens" not in model_line and summary["meta"]["start_tokens"] == []
    else:
        assert f"window {WINDOW - 1} after the start tokens <bos>)" in model_line
        assert summary["meta"]["start_tokens"] == ["<bos>"]
