"""`embgeo ntp probe` and embgeo.ntp.analysis.probe: the NTP geometry of a causal LM checkpoint, read from disk.

A tiny GPT-2 (2 layers, width 16) with a WordPiece tokenizer trained on the tweets is trained for a few
Adam steps inside the tests and saved with ``save_pretrained``; every probe reads it back from that folder.
The references are independent: the model's own forward pass (hidden states, logits, its CE in torch),
brute-force counting of contexts, the dense logit matrix, and cvxpy for the multiclass SVM.
"""

import json
import math
import re
from collections import Counter, defaultdict

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from embgeo.core.device import resolve_device
from embgeo.core.threads import limit_threads
from embgeo.errors import InputError, ShapeError
from embgeo.ntp import synthetic, theory
from embgeo.ntp.analysis.probe import (
    count_contexts,
    hidden_states,
    load_causal_lm,
    probe,
    probe_model,
)
from embgeo.ntp.measure.geometry import logit_structure, logit_structure_factored
from embgeo.ntp.measure.metrics import cosine

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
cp = pytest.importorskip("cvxpy")

from reference.ntp import CLARABEL_SETTINGS  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with limit_threads(1):
        yield


@pytest.fixture(scope="module")
def tweets():
    from embgeo.ntp.corpus import tweet_lines

    return tweet_lines()


@pytest.fixture(scope="module")
def tokenizer(tweets):
    """A WordPiece tokenizer of 250 pieces trained on 2000 tweets, as a transformers tokenizer."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    trainer = tokenizers.trainers.WordPieceTrainer(vocab_size=250, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator(tweets[:2000], trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def _gpt2(V, d=16, layers=2, window=16, seed=0):
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=window, n_embd=d, n_layer=layers, n_head=2,
                                  bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(cfg)


#: The fitted text: one tweet's first ten words (its @handle cut), where every 5-token context has one next token.
K_FIT = 5


@pytest.fixture(scope="module")
def fit_text(tweets):
    return [" ".join(re.sub(r"^@\w+:?\s*", "", tweets[3000]).split()[:10])]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer, fit_text):
    """The tiny GPT-2 trained by Adam to fit the 5-token windows of ``fit_text``, saved with save_pretrained."""
    seqs = tokenizer(fit_text)["input_ids"]
    ctx = count_contexts(seqs, len(tokenizer), context_length=K_FIT)
    X = torch.tensor(np.stack([ctx.tokens(j) for j in range(ctx.m)]))
    y = torch.tensor(ctx.counts.indices.astype(np.int64))
    model = _gpt2(len(tokenizer))
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X).logits[:, -1], y).backward()
        opt.step()
    path = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


#: Contexts kept by most probes: at most d = 16 (and the trained LayerNorm's offset makes them independent), so
#: rank H = m and the theory is decided at once by Lemma 1 — these tests are about H and W, not the solvers.
FEW = 12


@pytest.fixture
def text_file(tmp_path, tweets):
    """Three short lines (their first three words) and a long one (longer than the window of 16), a blank line."""
    lines = [" ".join(re.sub(r"^@\w+:?\s*", "", t).split()[:3]) for t in tweets[3001:3004]] + [tweets[3005]]
    path = tmp_path / "text.txt"
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    return path


# -- contexts -----------------------------------------------------------------------------------------

def _brute_force(seqs, k=None, window=None):
    """Next-token counts per distinct context, in order of first appearance, by plain Python."""
    counts = defaultdict(Counter)
    for s in seqs:
        if k is not None:
            pairs = [(tuple(s[i:i + k]), s[i + k]) for i in range(len(s) - k)]
        else:
            pairs = [(tuple(s[:t]), s[t]) for t in range(1, min(len(s) - 1, window) + 1)]
        for c, z in pairs:
            counts[c][z] += 1
    return counts


@pytest.mark.parametrize("k, window", [(2, None), (3, None), (None, 4), (None, 50)])
def test_contexts_and_counts_match_brute_force(k, window):
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 5, size=n).tolist() for n in (9, 1, 12, 3, 7)] + [[0, 1, 2, 3, 4, 0, 1]]
    ctx = count_contexts(seqs, 6, context_length=k, prefixes=k is None, window=window)
    ref = _brute_force(seqs, k, window)
    assert [tuple(ctx.tokens(j).tolist()) for j in range(ctx.m)] == list(ref)
    for j, c in enumerate(ref):
        assert dict(zip(ctx.counts[j].indices.tolist(), ctx.counts[j].data.tolist(), strict=True)) == ref[c]
    assert ctx.info["pairs"] == sum(sum(c.values()) for c in ref.values())
    P, pi = ctx.probs_and_weights()
    assert np.allclose(P.sum(axis=1), 1) and math.isclose(pi.sum(), 1)


def test_max_contexts_keeps_the_first_ones_with_all_their_counts():
    seqs = [[0, 1, 2, 0, 1, 3, 0, 1, 2], [4, 4, 4, 0, 1, 2]]
    full = count_contexts(seqs, 5, context_length=2)
    cut = count_contexts(seqs, 5, context_length=2, max_contexts=2)
    assert cut.m == 2 and (cut.counts != full.counts[:2]).nnz == 0
    assert cut.info["contexts_dropped"] == full.m - 2
    assert cut.info["pairs"] + cut.info["pairs_dropped"] == full.info["pairs"]
    pre = count_contexts(seqs, 5, prefixes=True, window=8, max_contexts=3)
    assert pre.m == 3 and pre.info["contexts_dropped"] == count_contexts(seqs, 5, prefixes=True, window=8).m - 3


@pytest.mark.parametrize("kwargs, match", [
    ({}, "give one"),
    ({"context_length": 2, "prefixes": True, "window": 4}, "give one"),
    ({"prefixes": True}, "window"),
    ({"context_length": 9, "window": 4}, "exceed the model's window"),
    ({"context_length": 20}, "no \\(context, next token\\) pair"),
])
def test_count_contexts_refuses_bad_settings(kwargs, match):
    with pytest.raises(InputError, match=match):
        count_contexts([[0, 1, 2, 3]], 5, **kwargs)
    with pytest.raises(InputError, match="outside the vocabulary"):
        count_contexts([[0, 1, 7]], 5, context_length=1)


# -- H is the model's own, W its head -------------------------------------------------------------------

@pytest.mark.parametrize("mode", [{"context_length": 3}, {"prefixes": True}])
def test_probe_reads_the_models_own_hidden_states_and_head(trained, text_file, tokenizer, mode):
    res = probe_model(trained, text_file, progress=False, batch_size=2, max_contexts=FEW, units="lines",
                      sample="first", dtype="float64", **mode)
    assert res.contexts.m == FEW and len(set(res.contexts.line.tolist())) > 1  # several lines, padded together
    model = transformers.AutoModelForCausalLM.from_pretrained(trained, local_files_only=True).double().eval()
    W = model.lm_head.weight.detach().numpy()
    assert np.array_equal(res.W, W) and res.meta["tied_head"] and res.data.d == W.shape[1]
    ctx = res.contexts
    if "prefixes" in mode:  # the last line is longer than the window of 16 tokens
        assert ctx.info["truncated_sequences"] == 1 and ctx.info["contexts_dropped"] > 0
    logq = np.empty((ctx.m, W.shape[0]))
    with torch.no_grad():
        for j in range(ctx.m):
            out = model(torch.as_tensor(ctx.tokens(j))[None], output_hidden_states=True)
            h = out.hidden_states[-1][0, -1].numpy()  # GPT-2's last entry is after the final LayerNorm ln_f
            assert np.allclose(res.data.embeddings[j], h, rtol=1e-10, atol=1e-12)
            assert np.allclose(res.data.embeddings[j] @ W.T, out.logits[0, -1].numpy(), rtol=1e-10, atol=1e-10)
            logq[j] = torch.log_softmax(out.logits[0, -1], dim=0).numpy()
    # the model's CE on these contexts, from its own logits in torch, and the gap as a KL
    P, pi = ctx.probs_and_weights()
    rows = np.repeat(np.arange(ctx.m), np.diff(P.indptr))
    ce = -float(np.sum(pi[rows] * P.data * logq[rows, P.indices]))
    assert res.ce == pytest.approx(ce, rel=1e-10)
    assert res.kl_gap == pytest.approx(theory.kl_gap(res.data, W), rel=1e-10)  # blocks vs one dense pass
    assert res.kl_gap == pytest.approx(ce - res.entropy, rel=1e-6)


def test_hidden_states_of_any_callable_and_its_checks():
    """The generic API: a plain torch module; a non-causal one and a wrong shape are refused."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(7, 4, dtype=torch.float64)

    def causal(tokens):  # h_t = mean of the embeddings of tokens 0..t
        e = emb(tokens)
        return torch.cumsum(e, dim=1) / torch.arange(1, tokens.shape[1] + 1, dtype=e.dtype)[None, :, None]

    seqs = [[1, 2, 3, 4, 5], [1, 2, 6], [3, 3]]
    ctx = count_contexts(seqs, 7, prefixes=True, window=10)
    H = hidden_states(causal, ctx, d=4, batch_size=2, progress=False)
    E = emb.weight.detach().numpy()
    for j in range(ctx.m):
        assert np.allclose(H[j], E[ctx.tokens(j)].mean(axis=0), rtol=1e-14)
    with pytest.raises(InputError, match="not causal"):
        hidden_states(lambda t: emb(t).mean(dim=1, keepdim=True).expand(-1, t.shape[1], -1), ctx, progress=False)
    with pytest.raises(ShapeError, match="hidden\\(tokens\\)"):
        hidden_states(lambda t: emb(t)[:, -1], ctx, progress=False)
    with pytest.raises(ShapeError, match="\\(B, L, d\\) = \\(2, 4, 3\\)"):
        hidden_states(causal, ctx, d=3, batch_size=2, progress=False)
    res = probe(causal, np.random.default_rng(0).normal(size=(7, 4)), seqs, prefixes=True, window=10,
                bias=np.arange(7.0), progress=False)
    assert res.data.d == 5 and np.all(res.data.embeddings[:, -1] == 1) and np.array_equal(res.W[:, -1], np.arange(7.0))


# -- the measurements on a text the model fits: the multiclass SVM -------------------------------------

def _multiclass_svm(H: np.ndarray, y: np.ndarray, V: int) -> np.ndarray:
    """min ‖W‖² s.t. (w_{y_j} − w_v)ᵀ h_j ≥ 1 for every j and v ≠ y_j (Crammer–Singer without bias), by cvxpy."""
    j, v = np.nonzero(np.arange(V)[None, :] != y[:, None])
    D = sp.csr_matrix((np.r_[np.ones(j.size), -np.ones(j.size)], (np.r_[np.arange(j.size), np.arange(j.size)],
                                                                    np.r_[y[j], v])), shape=(j.size, V))
    W = cp.Variable((V, H.shape[1]))
    problem = cp.Problem(cp.Minimize(cp.sum_squares(W)), [cp.sum(cp.multiply(D @ W, H[j]), axis=1) >= 1])
    problem.solve(solver="CLARABEL", **CLARABEL_SETTINGS)
    assert problem.status == "optimal"
    return W.value


def test_on_a_fitted_one_next_token_text_the_measurements_are_the_multiclass_svm(trained, fit_text, tmp_path):
    text = tmp_path / "fit.txt"
    text.write_text(fit_text[0] + "\n", encoding="utf-8")
    res = probe_model(trained, text, context_length=K_FIT, progress=False)
    data = res.data
    assert (data.support_sizes == 1).all() and data.m > data.d  # one next token each; d < m: no Lemma 1
    assert res.kl_gap < 0.01  # the model fits the text ...
    assert "candidate" in res.separability.method  # ... and its own W is the separability certificate
    assert bool(res.compatibility) and np.linalg.norm(res.w_star) == 0 and res.dim_F == 0  # F = {0}, W* = 0
    assert res.svm.status == "optimal" and res.svm.residuals["error_bound"] < 1e-4
    y = data.probs.indices
    W_ref = _multiclass_svm(data.embeddings, y, data.V)
    assert np.linalg.norm(res.w_mm - W_ref) <= 1e-6 * np.linalg.norm(W_ref)
    a = res.alignment
    assert a["cos_mm"] == pytest.approx(cosine(res.W, W_ref), abs=1e-8)
    assert a["cos_corrected"] == pytest.approx(a["cos_mm"], abs=1e-12)  # W* = 0
    assert a["subspace_error"] == 0.0
    # the normalized NTP-margin of W (F⊥ is everything here) from the logits directly
    L = data.embeddings @ res.W.T
    off = L.copy()
    off[np.arange(data.m), y] = -np.inf
    assert a["margin"] == pytest.approx(np.min(L[np.arange(data.m), y] - off.max(axis=1)) / np.linalg.norm(res.W),
                                        rel=1e-10)
    assert res.logits["contexts_ranked_right"] == 1.0 and res.logits["margin"] > 0
    assert math.isnan(res.logits["support_residual"])  # no log-odds to fit: NaN, written as null (strict JSON)
    assert json.loads(json.dumps(res.to_dict(), allow_nan=False))["logits"]["support_residual"] is None


# -- the logits' structure without the logit matrix ---------------------------------------------------

@pytest.mark.parametrize("m, V, d, S", [(30, 12, 5, 3), (12, 30, 8, 2), (10, 6, 20, 6)])
def test_factored_logit_structure_matches_the_dense_one(m, V, d, S):
    data = synthetic(m, V, d, S, seed=1)
    W = np.random.default_rng(2).normal(size=(V, d))
    dense = logit_structure(data.embeddings @ W.T, data)
    scalars, arrays = logit_structure_factored(data.embeddings, W, data)
    for key, value in dense.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(scalars[key]), key
        else:
            assert scalars[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    L = data.embeddings @ W.T
    assert np.allclose(arrays["logit_singular_values"][:min(m, V, d)],
                       np.linalg.svd(L, compute_uv=False)[:min(m, V, d)], rtol=1e-10)
    mask = data.support_mask()
    assert scalars["on_support_energy"] == pytest.approx(np.sum(L[mask] ** 2) / np.sum(L**2), rel=1e-12)
    scalars, _ = logit_structure_factored(data.embeddings, W, data, gram_max=1)
    assert scalars["effective_rank_rest"] is None and scalars["rank_rest"] is None


@pytest.mark.parametrize("n, d, block_rows", [(1000, 7, 50), (200, 30, 30), (64, 16, 100)])
def test_r_factor_in_row_blocks(n, d, block_rows):
    """The tall-skinny QR of row blocks (no copy of a V × d head): RᵀR = AᵀA, so the singular values are A's."""
    from embgeo.ntp.measure.geometry import r_factor

    A = np.random.default_rng(n).normal(size=(n, d)) * np.logspace(0, -6, d)  # columns of very different scales
    R = r_factor(A, block_bytes=8 * d * block_rows)
    assert R.shape == (d, d)
    np.testing.assert_allclose(np.linalg.svd(R, compute_uv=False), np.linalg.svd(A, compute_uv=False), rtol=1e-11)
    np.testing.assert_allclose(R.T @ R, A.T @ A, rtol=0, atol=1e-12 * np.sum(A**2))


# -- the full GPT-2 vocabulary ---------------------------------------------------------------------------

def test_a_gpt2_sized_vocabulary(tmp_path, tokenizer, tweets):
    """V = 50,257 rows (the tokenizer's 250 plus unused ones, as a padded head): every stage runs, nothing dense."""
    model = _gpt2(50257, d=16, layers=1)
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    (tmp_path / "t.txt").write_text("\n".join(tweets[3000:3004]), encoding="utf-8")
    res = probe_model(tmp_path / "m", tmp_path / "t.txt", context_length=2, progress=False, max_contexts=FEW,
                      units="lines", sample="first")
    assert res.W.shape == (50257, 16) and res.data.V == 50257 and not res.errors
    assert res.to_dict()["V"] == 50257 and res.token_labels[-1].startswith("<row 50256")
    assert res.frequency["tokens_seen"] <= 250 and res.arrays["row_norms"].shape == (50257,)
    assert bool(res.compatibility) and bool(res.separability) and res.svm.status == "optimal"  # rank H = m
    assert res.w_star.shape == res.w_mm.shape == (50257, 16) and math.isfinite(res.alignment["cos_corrected"])
    assert math.isfinite(res.kl_gap) and res.kl_gap > 0 and res.logits["rank_rest"] is not None


# -- bad input ---------------------------------------------------------------------------------------------

def test_bad_checkpoints_and_texts_are_clear_errors(tmp_path, trained, tokenizer, text_file):
    with pytest.raises(InputError, match="is not a folder"):
        probe_model(tmp_path / "missing", text_file, context_length=2)
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        probe_model(tmp_path / "empty_dir", text_file, context_length=2)
    (tmp_path / "blank.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(InputError, match="no text"):
        probe_model(trained, tmp_path / "blank.txt", context_length=2)
    (tmp_path / "short.txt").write_text("hi\n", encoding="utf-8")
    with pytest.raises(InputError, match="no \\(context, next token\\) pair"):
        probe_model(trained, tmp_path / "short.txt", context_length=8)
    with pytest.raises(InputError, match="exceed the model's window"):
        probe_model(trained, text_file, context_length=17)
    # a tokenizer of another model: more tokens than the head has rows
    small = _gpt2(100)
    small.save_pretrained(tmp_path / "mismatch")
    tokenizer.save_pretrained(tmp_path / "mismatch")
    with pytest.raises(InputError, match="tokenizer/model mismatch: the tokenizer has 250 tokens but the LM head has "
                                         "100 rows"):
        probe_model(tmp_path / "mismatch", text_file, context_length=2)
    # no tokenizer saved
    small.save_pretrained(tmp_path / "no_tokenizer")
    with pytest.raises(InputError, match="tokenizer"):
        probe_model(tmp_path / "no_tokenizer", text_file, context_length=2)
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="CUDA is not available"):
            probe_model(trained, text_file, context_length=2, device="cuda")


def test_a_head_with_a_bias_is_refused_or_appended(tmp_path, tokenizer, text_file):
    cfg = transformers.GPTJConfig(vocab_size=len(tokenizer), n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                  rotary_dim=4, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPTJForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.bias.normal_()  # GPT-J's head has a bias (initialised at zero)
    model.save_pretrained(tmp_path / "gptj")
    tokenizer.save_pretrained(tmp_path / "gptj")
    with pytest.raises(InputError, match="the LM head has a bias"):
        probe_model(tmp_path / "gptj", text_file, context_length=2)
    res = probe_model(tmp_path / "gptj", text_file, context_length=2, head_bias="append", progress=False,
                      dtype="float64")
    loaded, _ = load_causal_lm(tmp_path / "gptj", dtype="float64")
    b = loaded.lm_head.bias.detach().numpy()
    assert res.data.d == 17 and np.all(res.data.embeddings[:, -1] == 1) and np.array_equal(res.W[:, -1], b)
    ids = torch.as_tensor(np.stack([res.contexts.tokens(j) for j in range(res.contexts.m)]))
    with torch.no_grad():
        logits = loaded(ids).logits[:, -1].numpy()
    assert np.allclose(res.data.embeddings @ res.W.T, logits, rtol=1e-10, atol=1e-10)  # [h, 1]·[w, b] = w·h + b


def test_devices():
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(InputError, match="expected 'cpu', 'cuda' or 'cuda:N'"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="CUDA is not available"):
            resolve_device("cuda:0")


# -- the command line --------------------------------------------------------------------------------------

def test_cli_probe_writes_the_summary_arrays_and_figure(trained, text_file, tmp_path, capsys):
    from embgeo.cli import main

    out = tmp_path / "out"
    assert main(["ntp", "probe", "--model", str(trained), "--text", str(text_file), "-k", "2", "--max-contexts",
                 str(FEW), "--units", "lines", "--sample", "first", "--save-arrays", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for line in ("model ", "pairs ", "sizes ", "memory ", "entropy ", "model loss ", "compatible ", "separable ",
                 "alignment ", "logits ", "row norms ", "written "):
        assert any(s.startswith(line) for s in printed.splitlines()), line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["device"] == "cpu" and summary["V"] == 250 and summary["input"]["pairs"] > 0
    assert summary["kl_gap_nats"] > 0 and summary["logits"]["effective_rank"] > 1
    H = np.load(out / "H.npy")
    assert H.shape == (summary["m"], 16) and np.load(out / "W.npy").shape == (250, 16)
    counts = sp.load_npz(out / "next_token_counts.npz")
    assert counts.shape == (summary["m"], 250) and counts.sum() == summary["input"]["pairs"]
    for name in ("probe.png", "probe.pdf", "vocabulary.txt", "contexts.npz", "row_norms.npy"):
        assert (out / name).stat().st_size > 0


@pytest.mark.parametrize("args, needle", [
    (["--model", "nowhere", "--text", "t.txt", "-k", "2"], "'nowhere' is not a folder"),
    (["--model", "M", "--text", "blank.txt", "-k", "2"], "no text"),
    (["--model", "M", "--text", "t.txt", "-k", "2", "--device", "cuda:7"], "cuda:7"),
    (["--model", "M", "--text", "t.txt", "-k", "2", "--max-contexts", "0"], "--max-contexts"),
])
def test_cli_bad_input_is_one_line_and_exit_2(trained, tmp_path, capsys, monkeypatch, args, needle):
    from embgeo.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("a b c d e\n", encoding="utf-8")
    (tmp_path / "blank.txt").write_text("\n", encoding="utf-8")
    args = [str(trained) if a == "M" else a for a in args]
    assert main(["ntp", "probe", *args]) == 2
    err = capsys.readouterr().err
    lines = [s for s in err.splitlines() if s.startswith("embgeo: error:")]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err



@pytest.mark.parametrize("m, V", [(30, 50), (60, 20)])
def test_rest_singular_values_from_the_smaller_gram_match_an_svd(m, V):
    """The off-support part's singular values from the Gram R Rᵀ (m ≤ V) or RᵀR (m > V), with the d × d Grams
    computed here or passed in (the structure pass reuses its WᵀW): numpy's SVD of the dense R; a wrong Gram (HᵀH
    given as WᵀW) moves them."""
    import scipy.sparse as sp

    from embgeo.ntp.measure.geometry import rest_singular_values as _rest_singular_values

    rng = np.random.default_rng(0)
    H, W = rng.standard_normal((m, 8)), rng.standard_normal((V, 8))
    Sc = sp.random(m, V, density=0.1, random_state=1, format="csr")
    ref = np.linalg.svd(H @ W.T - Sc.toarray(), compute_uv=False)
    k = min(m, V)
    for got in (_rest_singular_values(H, W, Sc), _rest_singular_values(H, W, Sc, (H.T @ H, W.T @ W))):
        np.testing.assert_allclose(got[:k], ref[:k], rtol=0, atol=1e-12 * ref[0])
    wrong = _rest_singular_values(H, W, Sc, (W.T @ W, H.T @ H))
    assert np.abs(wrong[:k] - ref[:k]).max() > 1e-3 * ref[0]
