"""Attention experiments registered so far: quick presets run and their claims hold."""

import json

from embgeo.experiments import names, run


def test_one_step_quick_claims_hold(tmp_path):
    assert names("attention") == ["attention-one-step"]
    record = run("attention-one-step", out=tmp_path)
    claims = json.loads((tmp_path / "claims.json").read_text())
    assert len(claims) == 3 and record.passed == 3, claims
    assert (tmp_path / "lemma41.png").exists() and (tmp_path / "trace.csv").exists()
