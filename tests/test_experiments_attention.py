"""Attention experiments registered so far: quick presets run and their claims hold."""

import json
from pathlib import Path

import pytest

from embgeo.experiments import names, run

FIXTURES = Path(__file__).parent / "attention" / "fixtures"


def test_registered_attention_experiments():
    assert names("attention") == ["attention-one-step", "attention-synthetic", "attention-reviews"]


@pytest.mark.parametrize("name, figure, n_claims", [("attention-one-step", "lemma41", 3),
                                                    ("attention-synthetic", "fig2_synthetic", 3),
                                                    ("attention-reviews", "fig3_reviews", 2)])
def test_quick_claims_hold(tmp_path, name, figure, n_claims):
    record = run(name, out=tmp_path)
    claims = json.loads((tmp_path / "claims.json").read_text())
    assert len(claims) == n_claims and record.passed == n_claims, claims
    assert (tmp_path / f"{figure}.png").exists() and (tmp_path / "trace.csv").exists()


def test_reviews_on_a_user_file_adds_the_loss_claim_and_names_the_data(tmp_path):
    """With an IMDB file the paper's final-loss claim is made (its verdict depends on the run)."""
    overrides = {"data": str(FIXTURES / "imdb_small.csv"), "min_count": "2", "n": "0", "epochs": "3", "dim": "8"}
    record = run("attention-reviews", overrides=overrides, out=tmp_path)
    claims = {c["name"]: c for c in json.loads((tmp_path / "claims.json").read_text())}
    loss = claims["final training loss, one-layer model (order of magnitude)"]
    assert loss["paper"] == 0.1 and loss["tolerance"] == "±0.5"
    assert "IMDB reviews from" in record.notes[0]
