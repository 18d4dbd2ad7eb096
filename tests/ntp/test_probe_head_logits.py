"""Models whose logits are not their head's W h (issue 38): a scale is folded into W, a soft cap refused.

Granite divides the head's output by ``logits_scaling`` and Cohere multiplies it by ``logit_scale``: the model's own
linear head is then s W, and the probe must analyse that one (its CE is the model's). Gemma 2 caps it softly,
c·tanh(z / c): no linear head gives those logits, and the probe says so instead of measuring W h. Tiny models of each
architecture are built here, saved beside a word-level tokenizer.
"""

import numpy as np
import pytest
import torch

from embgeo.core.threads import limit_threads
from embgeo.errors import InputError
from embgeo.ntp.analysis.probe import probe_model

from .test_probe_start_tokens import _tokenizer, text_file  # noqa: F401  (text_file: a fixture)

transformers = pytest.importorskip("transformers")

COMMON = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=16, tie_word_embeddings=False, bos_token_id=1, eos_token_id=0)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with limit_threads(1):
        yield


def _saved(tmp_path, config_cls, model_cls, **extra):
    tok = _tokenizer(bos=False)
    torch.manual_seed(0)
    model = model_cls(config_cls(vocab_size=len(tok), **COMMON, **extra)).eval()
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    return tmp_path / "m", model.double()


def _own_logits(model, tokens) -> np.ndarray:
    with torch.no_grad():
        return model(torch.as_tensor(tokens)[None]).logits[0, -1].numpy()


def test_a_plain_head_is_read_as_it_is(tmp_path, text_file):  # noqa: F811
    path, model = _saved(tmp_path, transformers.LlamaConfig, transformers.LlamaForCausalLM)
    res = probe_model(path, text_file, context_length=2, dtype="float64", units="lines", progress=False)
    assert res.meta["logit_scale"] == 1.0
    assert np.array_equal(res.W, model.lm_head.weight.detach().numpy())


def test_a_scaled_head_is_folded_into_w(tmp_path, text_file):  # noqa: F811
    """Granite's logits are (W h) / logits_scaling: the probe's W is the weight over 4, and H Wᵀ equals the model's
    own logits at every context (so CE is the model's)."""
    path, model = _saved(tmp_path, transformers.GraniteConfig, transformers.GraniteForCausalLM, logits_scaling=4.0)
    res = probe_model(path, text_file, context_length=2, dtype="float64", units="lines", progress=False)
    assert res.meta["logit_scale"] == pytest.approx(0.25, rel=1e-12)
    np.testing.assert_allclose(res.W, model.lm_head.weight.detach().numpy() / 4.0, rtol=1e-12)
    ctx = res.contexts
    for j in range(ctx.m):
        np.testing.assert_allclose(res.data.embeddings[j] @ res.W.T, _own_logits(model, ctx.tokens(j)),
                                   rtol=1e-9, atol=1e-12)


def test_the_cli_says_the_scale(tmp_path, text_file, capsys):  # noqa: F811
    from embgeo.cli import main

    path, _ = _saved(tmp_path, transformers.GraniteConfig, transformers.GraniteForCausalLM, logits_scaling=4.0)
    assert main(["ntp", "probe", "--model", str(path), "--text", str(text_file), "-k", "2", "--units", "lines"]) == 0
    model_line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("model "))
    assert "its logits are 0.25 × W h, so W is that multiple of the head's weight" in model_line


def test_a_soft_capped_head_is_refused(tmp_path, text_file):  # noqa: F811
    """Gemma 2's 30·tanh(z / 30), here with c = 0.5 so that the tiny model's logits reach the curved part."""
    path, _ = _saved(tmp_path, transformers.Gemma2Config, transformers.Gemma2ForCausalLM, head_dim=4,
                     final_logit_softcapping=0.5)
    with pytest.raises(InputError, match=r"not a linear function W h \+ b .*final_logit_softcapping = 0.5"):
        probe_model(path, text_file, context_length=2, dtype="float64", units="lines", progress=False)
