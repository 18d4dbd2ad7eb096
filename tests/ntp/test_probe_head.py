"""The probe's alignment on the constrained rows and ``ntp probe --train-head`` (issue 38).

* the constrained-row numbers do not move when W → W + 1cᵀ (the softmax's invariance), the all-rows cosine stays
  below its bound, and the bands hold for an exact W^mm perturbed by a known amount;
* the trained-head records of the probe equal those of :func:`embgeo.ntp.training.train.train` run directly on the same
H,
  on a tiny causal model built here, and the CLI prints the table and writes it to summary.json.
"""

import json
import math

import numpy as np
import pytest
import torch

from embgeo.core.threads import limit_threads
from embgeo.errors import InputError
from embgeo.ntp.analysis.analyze import analyze as measure
from embgeo.ntp.analysis.probe import probe, train_head
from embgeo.ntp.measure.metrics import Reference, compute_reference, constrained_alignment, cosine, equal_rows_bound
from embgeo.ntp.training.train import train

from .test_train_reduced import _data as reduced_data


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with limit_threads(1):
        yield


def _data(m=20, V=30, seen=8, d=24, S=3, seed=0):
    """m contexts whose supports are drawn from `seen` scattered token ids of V (V − seen never-next tokens)."""
    return reduced_data(m=m, V=V, seen=seen, d=d, S=S, seed=seed)


@pytest.fixture(scope="module")
def wide():
    data = _data()
    return data, compute_reference(data)


def _pretrained_like(data, seed=1):
    """A head whose never-next rows are large and all different (as a pretrained head's), plus a common shift."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((data.V, data.d))
    unseen = np.setdiff1d(np.arange(data.V), data.probs.indices)
    W[unseen] *= 5.0
    return W + rng.standard_normal(data.d)[None, :]


# -- task 1: the constrained rows ------------------------------------------------------------------------

ROW_KEYS = ("rows_cos_mm", "rows_cos_mm_lo", "rows_cos_mm_hi", "rows_dist_mm", "rows_cos_corrected",
            "rows_cos_corrected_lo", "rows_cos_corrected_hi", "star_cos", "subspace_error",
            "unseen_logit_vs_support", "unseen_logit_vs_seen", "unseen_spread_share")


def test_the_constrained_rows_ignore_a_common_shift(wide):
    data, ref = wide
    W = _pretrained_like(data)
    c = 3.0 * np.random.default_rng(2).standard_normal(data.d)
    a = measure(data, W).alignment
    b = measure(data, W + c[None, :]).alignment
    for k in ROW_KEYS:
        assert math.isfinite(a[k]), k
        assert b[k] == pytest.approx(a[k], rel=1e-9, abs=1e-10), k
    assert abs(b["cos_mm"] - a["cos_mm"]) > 1e-4  # the all-rows cosine is not shift-free: ‖W‖ moves ...
    # ... but it never exceeds its bound, which the never-next rows' spread makes small
    assert abs(a["cos_mm"]) <= a["cos_mm_bound"] + 1e-12 and a["cos_mm_bound"] < 0.6
    assert abs(a["cos_corrected"]) <= a["cos_corrected_bound"] + 1e-12
    assert a["unseen_share"] > 0.8 and a["unseen_tokens"] == 22 and a["seen_tokens"] == 8


@pytest.mark.parametrize("equal_unseen", [False, True])
def test_the_unseen_block_from_sums_equals_the_block_itself(wide, equal_unseen):
    """unseen_block takes the never-next block's sums as all rows' less the seen rows' (no copy of the block, nearly
    all of W at a real V): the same numbers as the block written out, for a pretrained-like W and one whose unseen
    rows are equal (spread 0, as a head trained from zero keeps them)."""
    from embgeo.ntp.measure.metrics import unseen_block

    data, _ = wide
    seen, unseen = np.unique(data.probs.indices), np.setdiff1d(np.arange(data.V), data.probs.indices)
    W = _pretrained_like(data)
    if equal_unseen:
        W[unseen] = W[unseen[0]]
    got = unseen_block(data, W, seen, unseen)
    WU, mu = W[unseen], W.mean(axis=0)
    u = WU.mean(axis=0)
    n2, c2 = float(np.sum(W**2)), float(np.sum((W - mu) ** 2))
    H, P = data.embeddings, data.probs.toarray()
    L = H @ W.T
    assert got["unseen_share"] == pytest.approx(float(np.sum(WU**2)) / n2, rel=1e-12)
    assert got["unseen_share_centred"] == pytest.approx(float(np.sum((WU - mu) ** 2)) / c2, rel=1e-12)
    assert got["unseen_spread_share"] == pytest.approx(float(np.sum((WU - u) ** 2)) / c2, rel=1e-9, abs=1e-13)
    assert got["unseen_logit_vs_support"] == pytest.approx(
        float(data.weights @ (H @ u - np.sum(P * L, axis=1))), rel=1e-12)
    assert got["unseen_logit_vs_seen"] == pytest.approx(float(data.weights @ (H @ (u - W[seen].mean(axis=0)))),
                                                        rel=1e-12)


def test_the_bound_is_the_largest_cosine_with_equal_unseen_rows(wide):
    """cos(W, M) ≤ equal_rows_bound(W) for every M with equal unseen rows and zero column sums; equality at P(W)."""
    data, ref = wide
    W = _pretrained_like(data)
    seen, unseen = np.unique(data.probs.indices), np.setdiff1d(np.arange(data.V), data.probs.indices)
    bound = equal_rows_bound(W, seen, unseen)
    P = W.copy()
    P[unseen] = W[unseen].mean(axis=0)
    P -= W.mean(axis=0)
    assert cosine(W, P) == pytest.approx(bound, rel=1e-12)
    rng = np.random.default_rng(4)
    for _ in range(20):
        M = rng.standard_normal((data.V, data.d))
        M[unseen] = M[unseen[0]]
        M -= M.mean(axis=0)
        assert cosine(W, M) <= bound + 1e-12
    assert cosine(W, ref.w_mm) <= bound + 1e-9


@pytest.mark.parametrize("eps", [1e-3, 0.05, 0.3])
def test_the_band_holds_for_a_perturbed_exact_w_mm(wide, eps):
    data, ref = wide
    W = _pretrained_like(data)
    exact = constrained_alignment(data, W, w_star=ref.w_star, w_mm=ref.w_mm, F=ref.F)
    assert exact["rows_cos_mm_lo"] == exact["rows_cos_mm"] == exact["rows_cos_mm_hi"]  # ε = 0: a point
    rng = np.random.default_rng(5)
    widths = []
    for trial in range(10):
        E = rng.standard_normal(ref.w_mm.shape)
        if trial == 0:  # the worst direction for the constrained rows: E within the equal-rows, centred subspace
            E = ref.w_mm - W
        E *= eps * np.linalg.norm(ref.w_mm) / np.linalg.norm(E)  # ‖Ŵ − W^mm‖ = ε ‖W^mm‖ exactly
        got = constrained_alignment(data, W, w_star=ref.w_star, w_mm=ref.w_mm + E, F=ref.F, error_bound=eps)
        for k in ("rows_cos_mm", "rows_cos_corrected"):
            assert got[f"{k}_lo"] - 1e-12 <= exact[k] <= got[f"{k}_hi"] + 1e-12, (k, trial)
            assert got[f"{k}_lo"] <= got[k] <= got[f"{k}_hi"]
        widths.append(got["rows_cos_mm_hi"] - got["rows_cos_mm_lo"])
    assert 0 < min(widths) and (eps > 0.1 or max(widths) < 0.5)


def test_the_probe_reports_the_band_of_its_certified_w_mm(wide):
    data, _ = wide
    a = measure(data, _pretrained_like(data)).alignment
    assert a["svm_error_bound"] >= 0 and a["rows_error_bound"] >= a["svm_error_bound"] - 1e-15
    assert a["rows_cos_corrected_lo"] <= a["rows_cos_corrected"] <= a["rows_cos_corrected_hi"]


# -- task 3: a head trained on the model's H ----------------------------------------------------------------

V_TINY, D_TINY, WORDS = 40, 24, 6


class _Tiny(torch.nn.Module):
    """A causal toy model: token embeddings, a running mean over positions, a linear map and tanh."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = torch.nn.Embedding(V_TINY, D_TINY, dtype=torch.float64)
        self.lin = torch.nn.Linear(D_TINY, D_TINY, dtype=torch.float64)

    def forward(self, tokens):
        x = torch.cumsum(self.emb(tokens), dim=1) / torch.arange(1, tokens.shape[1] + 1, dtype=torch.float64)[:, None]
        return torch.tanh(self.lin(x))


@pytest.fixture(scope="module")
def tiny_probe():
    """6 words of a 40-token vocabulary (34 never a next token), contexts of one token: m ≤ 6 < d = 24."""
    rng = np.random.default_rng(0)
    words = rng.choice(V_TINY, size=WORDS, replace=False)
    sequences = [list(rng.choice(words, size=12)) for _ in range(8)]
    model = _Tiny()
    W = np.random.default_rng(1).standard_normal((V_TINY, D_TINY))
    with torch.no_grad():
        res = probe(model, W, sequences, context_length=1, progress=False, max_seconds=None)
    return res


def test_trained_head_equals_train_on_the_same_H(tiny_probe):
    res = tiny_probe
    assert res.separable and bool(res.compatibility) and res.svm.W is not None
    ht = train_head(res, ["gd", "ngd", "adam"], steps=60)
    assert res.to_dict()["head_training"]["settings"]["steps"] == 60 and "train_head" in res.seconds
    F = res.compatibility  # the reference the probe used, as a full Reference
    from embgeo.ntp import theory

    ref = Reference(res.w_star, res.w_mm, theory.subspace(res.data), error_bound=res.alignment["svm_error_bound"])
    assert F
    for opt in ("gd", "ngd", "adam"):
        direct = train(res.data, opt, None, 60, init="zeros", reference=ref, progress=False, reduce_unseen=True,
                       expand=True)
        rows = ht["runs"][opt]["rows"]
        assert [r["step"] for r in rows] == [r["step"] for r in direct.rows]
        for mine, theirs in zip(rows, direct.rows, strict=True):
            for k in ("kl_gap", "ce", "norm", "subspace_error", "rows_cos_corrected", "rows_cos_corrected_lo",
                      "rows_cos_corrected_hi", "cos_corrected"):
                assert mine[k] == pytest.approx(theirs[k], rel=1e-12, abs=1e-14) or (
                    math.isnan(mine[k]) and math.isnan(theirs[k])), (opt, mine["step"], k)
        # and the last record's constrained-row cosine is the probe's own measurement of the trained W
        a = constrained_alignment(res.data, direct.W, w_star=res.w_star, w_mm=res.w_mm,
                                  F=theory.subspace(res.data), error_bound=res.alignment["svm_error_bound"])
        assert rows[-1]["rows_cos_corrected"] == pytest.approx(a["rows_cos_corrected"], abs=1e-10)
    gd = ht["runs"]["gd"]["claims"]
    assert gd["loss"]["status"] == "trend toward" and gd["subspace"]["status"] in ("trend toward", "no trend")
    assert ht["runs"]["adam"]["claims"]["direction"]["status"] == "not covered"
    assert "the paper shows Adam empirically" in ht["runs"]["adam"]["claims"]["loss"]["note"]  # its name, as printed
    assert "the paper shows NGD empirically" in ht["runs"]["ngd"]["claims"]["loss"]["note"]
    assert "note" not in gd["loss"]  # GD is Theorem 2's own optimizer
    assert json.loads(json.dumps(res.to_dict(), allow_nan=False))["head_training"]["runs"]["gd"]["rows"]


def test_a_spent_deadline_stops_every_run_after_one_step(tiny_probe):
    """A deadline already past: each optimizer makes the step in progress, records it and says so; its claims are
    judged on those records and carry the stop. Without a deadline the same call runs every step (the control)."""
    import time

    ht = train_head(tiny_probe, ["gd", "ngd"], steps=50, deadline=time.perf_counter() - 1.0)
    for run in ht["runs"].values():
        assert [r["step"] for r in run["rows"]] == [0, 1]
        assert run["stopped"] == "the time limit after 1 of 50 steps"
        assert all("(the time limit after 1 of 50 steps)" in c["why"] for c in run["claims"].values())
    full = train_head(tiny_probe, ["gd"], steps=50)["runs"]["gd"]
    assert full["rows"][-1]["step"] == 50 and full["stopped"] is None


def test_train_stops_at_its_deadline_and_records_the_step():
    import time

    data = _data()
    trace = train(data, "gd", None, 40, init="zeros", reference=False, progress=False, record_every=10,
                  deadline=time.perf_counter() - 1.0)
    assert [r["step"] for r in trace.rows] == [0, 1] and trace.meta["time_limit_at_step"] == 1
    trace = train(data, "gd", None, 40, init="zeros", reference=False, progress=False, record_every=10,
                  deadline=time.perf_counter() + 3600.0)
    assert [r["step"] for r in trace.rows] == [0, 10, 20, 30, 40] and "time_limit_at_step" not in trace.meta


def test_an_uncertified_w_mm_makes_the_direction_not_applicable(tiny_probe):
    """A W^mm known only to a relative error ε ≥ 1 (a time limit before the NTP-SVM's first certified point: SmolLM2's
    stream probe printed ε = 20) leaves its direction anywhere, so the direction claim is not applicable — not "no
    trend"; just below 1 the claim stands (its bands are wide, not the whole of [−1, 1])."""
    import copy

    res = copy.deepcopy(tiny_probe)
    res.alignment["svm_error_bound"] = 20.0
    claims = train_head(res, ["gd"], steps=20)["runs"]["gd"]["claims"]
    assert claims["direction"]["status"] == "not applicable" and "20 ≥ 1" in claims["direction"]["why"]
    assert claims["loss"]["status"] != "not applicable" and claims["subspace"]["status"] != "not applicable"
    res.alignment["svm_error_bound"] = 0.9
    claims = train_head(res, ["gd"], steps=20)["runs"]["gd"]["claims"]
    assert claims["direction"]["status"] != "not applicable"


def test_not_separable_data_make_the_claims_not_applicable(capsys):
    data = _data(m=20, V=12, seen=8, d=2, S=2, seed=3)
    res = measure(data, np.zeros((12, 2)) + 0.1)
    train_head(res, optimizers=["gd"], steps=10)
    assert res.separable is False
    claims = res.head_training["runs"]["gd"]["claims"]
    assert {v["status"] for v in claims.values()} == {"not applicable"}
    assert "not NTP-separable" in claims["direction"]["why"]
    from embgeo.ntp.cli import _print_probe_head

    _print_probe_head(res)  # the status once, then the reason (it had printed "not applicable: not applicable: ...")
    lines = [s.strip() for s in capsys.readouterr().out.splitlines() if s.strip().startswith("Theorem 2 ")]
    assert len(lines) == 3 and all(s.count("not applicable") == 1 for s in lines)
    assert all("not applicable: the data are not NTP-separable" in s for s in lines)


def test_train_head_refuses_bad_settings(tiny_probe):
    with pytest.raises(InputError, match="optimizers"):
        train_head(tiny_probe, ["sgd"], steps=5)
    with pytest.raises(InputError, match="steps"):
        train_head(tiny_probe, ["gd"], steps=0)


# -- the command line ---------------------------------------------------------------------------------------

def test_cli_prints_the_trained_head_table(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    words = [f"w{i}" for i in range(30)]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    cfg = transformers.GPT2Config(vocab_size=len(vocab), n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    path = tmp_path / "tiny"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    rng = np.random.default_rng(0)
    used = words[:6]  # 6 of 31 tokens are ever next tokens
    text = tmp_path / "t.txt"
    text.write_text("\n".join(" ".join(rng.choice(used, size=10)) for _ in range(6)) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    from embgeo.cli import main

    assert main(["ntp", "probe", "--model", str(path), "--text", str(text), "-k", "1", "--units", "lines",
                 "--train-head", "--head-optimizer", "gd,ngd", "--head-optimizer", "adam", "--head-steps", "20",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert any(s.startswith("train head ") for s in lines)
    assert any(s.startswith("unseen rows ") for s in lines) and any(s.startswith("all rows ") for s in lines)
    assert sum("CE - H (KL)" in s for s in lines) == 3
    assert any(s.strip().startswith("20 ") for s in lines)  # the last step's row
    assert sum(s.strip().startswith("Theorem 2 direction") for s in lines) == 3
    summary = json.loads((out / "summary.json").read_text())
    runs = summary["head_training"]["runs"]
    assert set(runs) == {"gd", "ngd", "adam"} and runs["gd"]["rows"][-1]["step"] == 20
    assert "rows_cos_corrected" in summary["alignment"] and "cos_mm_bound" in summary["alignment"]


@pytest.mark.parametrize("eps, expect", [(1e-6, "0.3000 ± 2.0e-06"), (0.05, "0.3000 in [0.2000, 0.4000]"),
                                          (2.6, "0.3000 in [-1.0000, 1.0000]")])
def test_the_all_rows_band_stays_a_cosine_interval(capsys, eps, expect):
    """cos(W, Ŵ) is within 2ε of cos(W, W^mm) when ‖Ŵ − W^mm‖ ≤ ε‖W^mm‖; an uncertified W^mm (ε = 2.6, as the
    prefix probe on SmolLM2 printed "± 5.2e+00") gives the whole of [−1, 1], never a band wider than a cosine."""
    from types import SimpleNamespace

    from embgeo.ntp.cli import _print_probe_alignment

    a = {"svm_error_bound": eps, "seen_tokens": 3, "unseen_tokens": 0, "rows_cos_mm": 0.3,
         "rows_cos_corrected": 0.3, "subspace_error": 0.1, "star_cos": 0.9, "cos_mm": 0.3, "cos_mm_bound": 0.5,
         "cos_corrected": 0.3, "cos_corrected_bound": 0.5, "margin": 0.01}
    _print_probe_alignment(SimpleNamespace(alignment=a, errors={}))
    line = [s for s in capsys.readouterr().out.splitlines() if s.startswith("all rows ")][0]
    assert line.count(expect) == 2, line


def test_cli_head_options_need_train_head(tmp_path, capsys):
    from embgeo.cli import main

    assert main(["ntp", "probe", "--model", str(tmp_path), "--text", "t.txt", "-k", "1", "--head-steps", "5"]) == 2
    assert "--train-head" in capsys.readouterr().err
    assert main(["ntp", "probe", "--model", str(tmp_path), "--text", "t.txt", "-k", "1", "--train-head",
                 "--head-optimizer", "sgd"]) == 2
    assert "--head-optimizer" in capsys.readouterr().err
