"""Attention experiments registered so far: quick presets run and their claims hold."""

import json

import pytest

from embgeo.experiments import names, run


def test_registered_attention_experiments():
    assert names("attention") == ["attention-one-step", "attention-synthetic"]


@pytest.mark.parametrize("name, figure, n_claims", [("attention-one-step", "lemma41", 3),
                                                    ("attention-synthetic", "fig2_synthetic", 3)])
def test_quick_claims_hold(tmp_path, name, figure, n_claims):
    record = run(name, out=tmp_path)
    claims = json.loads((tmp_path / "claims.json").read_text())
    assert len(claims) == n_claims and record.passed == n_claims, claims
    assert (tmp_path / f"{figure}.png").exists() and (tmp_path / "trace.csv").exists()
