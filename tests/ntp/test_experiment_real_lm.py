"""The ``ntp-real-lm`` experiment (issue 38's study) on a tiny llama written to a GGUF file by the test: one probe and
one head training per k, Theorem 2's trends as claims only where the theorem applies, the CE split adding up, and
no checkpoint meaning a skipped run that says what to give."""

from __future__ import annotations

import math

import pytest

from embgeo.lab.runner import run
from embgeo.ntp.experiments import real_lm

from .test_probe_inputs import one_thread, text_file, tiny_gguf  # noqa: F401  (fixtures)


def test_without_a_checkpoint_the_run_is_skipped_and_says_what_to_give(tmp_path):
    rec = run("ntp-real-lm", "quick", {}, out=tmp_path / "r", scheduler="inline", threads=1)
    assert rec.error is None and rec.claims == []
    assert rec.notes[0].startswith("skipped:") and "--set model=" in rec.notes[0]


def test_a_gguf_checkpoint_end_to_end(tiny_gguf, text_file, tmp_path):  # noqa: F811
    path, _ = tiny_gguf
    settings = {"model": str(path), "text": str(text_file), "units": "lines", "context_lengths": (1, 2),
                "max_contexts": 50, "head_steps": 20, "head_optimizers": "gd,ngd", "prefixes": False}
    rec = run("ntp-real-lm", "quick", settings, out=tmp_path / "r", scheduler="inline", threads=1)
    assert rec.error is None and (tmp_path / "r" / "head_training.png").exists()
    result = real_lm.run_real_lm(real_lm.RealLMConfig(**settings))
    assert [c.name for c in result.claims] == [c.name for c in rec.claims]
    rows = result.trace
    assert set(rows["k"]) == {"1", "2"} and set(rows["optimizer"]) == {"gd", "ngd"}
    # every claim is one of GD's Theorem 2 trends, and every trend that is not a claim is a note saying why
    n_claims = len(result.claims)
    n_notes = sum("not applicable" in n for n in result.notes)
    assert n_claims + n_notes == 2 * len(real_lm.THEOREM2)
    for c in result.claims:
        assert "(Thm. 2)" in c.name and c.ok == real_lm.TREND_VERDICT[c.note.split(":")[0]]
    assert set(result.figures) == {"head_training"}


def test_the_full_contexts_are_a_probe_of_their_own(tiny_gguf, text_file):  # noqa: F811
    """prefixes=True adds "k = full": the probe of every prefix (--prefixes), with its own row, trace and notes —
    the same numbers as probe_model(prefixes=True) called directly."""
    from embgeo.ntp.analysis.probe import probe_model

    path, _ = tiny_gguf
    cfg = real_lm.RealLMConfig(model=str(path), text=str(text_file), units="lines", context_lengths=(2,),
                               max_contexts=40, head_steps=5, head_optimizers="gd")
    assert cfg.prefixes  # the study's default: k = 2, 4, 8 and full
    result = real_lm.run_real_lm(cfg)
    assert set(result.trace["k"]) == {"2", real_lm.FULL}
    assert any(n.startswith("k = full: m = ") for n in result.notes)
    direct = probe_model(str(path), str(text_file), prefixes=True, max_contexts=40, units="lines", progress=False)
    assert result.scalars["kfull_m"] == direct.data.m
    assert result.scalars["kfull_entropy"] == pytest.approx(direct.entropy, abs=1e-12)
    assert result.scalars["kfull_ce"] == pytest.approx(direct.ce, abs=1e-9)
    two = probe_model(str(path), str(text_file), context_length=2, max_contexts=40, units="lines", progress=False)
    assert result.scalars["k2_entropy"] == pytest.approx(two.entropy, abs=1e-12)
    assert direct.data.m != two.data.m or direct.entropy != pytest.approx(two.entropy)  # two different cuts


def test_the_ce_split_adds_up(tiny_gguf, text_file):  # noqa: F811
    """CE(pretrained) − 𝓗 = [CE(pretrained) − CE(GD head)] + [CE(GD head) − 𝓗], each part computed on its own."""
    from embgeo.ntp.analysis.probe import probe_model, train_head

    res = probe_model(tiny_gguf[0], str(text_file), context_length=2, units="lines", progress=False)
    head = train_head(res, "gd", steps=10)
    row = real_lm._row(2, res, head)
    assert row["gap_pretrained_vs_head"] + row["gap_head_vs_entropy"] == pytest.approx(row["kl_gap"], abs=1e-9)
    assert row["gap_head_vs_entropy"] >= -1e-12  # no head beats the empirical entropy
    assert not math.isnan(row["entropy"])


def _head(statuses: dict) -> dict:
    rows = [{"step": s, "kl_gap": 1.0 / s, "subspace_error": 0.5, "rows_cos_corrected": 0.1 * s} for s in (1, 10)]
    return {"runs": {"gd": {"rows": rows, "claims": {n: {"status": st, "why": f"why {n}"}
                                                      for n, st in statuses.items()}}}}


def test_theorem2_claims_follow_the_trends_and_skip_what_does_not_apply():
    """Toward holds, away fails, no trend is undecided; not applicable is a note, never a claim (a negative control
    for each mapping)."""
    claims, notes = real_lm._theorem2(4, _head({"loss": "trend toward", "subspace": "trend away",
                                                "direction": "not applicable"}))
    assert [c.ok for c in claims] == [True, False]
    assert claims[0].measured == pytest.approx(0.1) and claims[1].measured == 0.5
    assert len(notes) == 1 and "not applicable" in notes[0] and "k = 4" in notes[0]
    claims, notes = real_lm._theorem2(4, _head({"loss": "no trend", "subspace": "not applicable",
                                                "direction": "trend toward"}))
    assert [c.ok for c in claims] == [None, True] and len(notes) == 1
    claims, notes = real_lm._theorem2(2, {"runs": {"ngd": {}}})
    assert claims == [] and "no GD head" in notes[0]


def test_each_probe_is_freed_before_the_next_one_loads(tiny_gguf, text_file, monkeypatch):  # noqa: F811
    """A probe's result holds several V × d arrays (five of 1.25 GiB at Gemma 3's V = 262,144): the study must let it go
    before the next probe loads the model again (found: the second probe refused for want of memory)."""
    import weakref

    from embgeo.ntp.analysis import probe as P

    real, alive = P.probe_model, []

    def spy(*args, **kwargs):
        alive.append([ref() is not None for ref in refs])  # the earlier results, as the next probe begins
        res = real(*args, **kwargs)
        refs.append(weakref.ref(res))
        return res

    refs = []
    monkeypatch.setattr(P, "probe_model", spy)
    cfg = real_lm.RealLMConfig(model=str(tiny_gguf[0]), text=str(text_file), units="lines", context_lengths=(1, 2),
                               max_contexts=30, head_steps=3, head_optimizers="gd")
    real_lm.run_real_lm(cfg)
    assert alive == [[], [False], [False, False]]  # k = 1, 2 and full: none of the earlier ones still held


def test_the_model_is_loaded_once_for_every_probe(tiny_gguf, text_file, monkeypatch):  # noqa: F811
    """One load for the study's probes (Gemma 3 took 56 s a load), and each probe the numbers of probe_model called
    alone."""
    from embgeo.ntp.analysis import probe as P

    real, loads = P.load_causal_lm, []

    def counted(*args, **kwargs):
        loads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(P, "load_causal_lm", counted)
    cfg = real_lm.RealLMConfig(model=str(tiny_gguf[0]), text=str(text_file), units="lines", context_lengths=(1, 2),
                               max_contexts=30, head_steps=3, head_optimizers="gd")
    result = real_lm.run_real_lm(cfg)
    assert loads == [str(tiny_gguf[0])]  # k = 1, 2 and full
    alone = P.probe_model(str(tiny_gguf[0]), str(text_file), context_length=2, max_contexts=30, units="lines",
                          progress=False)
    assert result.scalars["k2_ce"] == pytest.approx(alone.ce, abs=1e-12)
    assert result.scalars["k2_entropy"] == pytest.approx(alone.entropy, abs=1e-12)
