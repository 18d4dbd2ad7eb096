"""Attention experiments registered so far: quick presets run and their claims hold."""

import json
from pathlib import Path

import numpy as np
import pytest

from embgeo.errors import InputError
from embgeo.experiments import names, run

FIXTURES = Path(__file__).parent / "attention" / "fixtures"


def test_registered_attention_experiments():
    assert names("attention") == ["attention-one-step", "attention-synthetic", "attention-reviews",
                                  "attention-two-layer", "attention-selection"]


@pytest.mark.parametrize("name, figure, n_claims", [("attention-one-step", "lemma41", 3),
                                                    ("attention-synthetic", "fig2_synthetic", 3),
                                                    ("attention-reviews", "fig3_reviews", 2),
                                                    ("attention-two-layer", "fig1_two_layer", 2)])
def test_quick_claims_hold(tmp_path, name, figure, n_claims):
    record = run(name, out=tmp_path)
    claims = json.loads((tmp_path / "claims.json").read_text())
    assert len(claims) == n_claims and record.passed == n_claims, claims
    assert (tmp_path / f"{figure}.png").exists() and (tmp_path / "trace.csv").exists()


@pytest.mark.parametrize("name, architecture, paper", [("attention-reviews", "one-layer", 0.1),
                                                      ("attention-two-layer", "two-layer", 1e-5)])
def test_reviews_on_a_user_file_adds_the_loss_claim_and_names_the_data(tmp_path, name, architecture, paper):
    """With an IMDB file the paper's final-loss claim is made (its verdict depends on the run)."""
    overrides = {"data": str(FIXTURES / "imdb_small.csv"), "min_count": "2", "n": "0", "epochs": "3", "dim": "8"}
    record = run(name, overrides=overrides, out=tmp_path)
    claims = {c["name"]: c for c in json.loads((tmp_path / "claims.json").read_text())}
    loss = claims[f"final training loss, {architecture} model (order of magnitude)"]
    assert loss["paper"] == paper and loss["tolerance"] == "±0.5"
    assert loss["ok"] == (abs(loss["measured"] - np.log10(paper)) <= 0.5)
    assert "IMDB reviews from" in record.notes[0]


def test_selection_claims_hold_except_the_sufficient_condition(tmp_path):
    """Thm 4.3 / Lemma 4.5 hold on the qualifying runs; Lemma 4.5's sufficient condition fails and is reported."""
    record = run("attention-selection", overrides={"seeds": "0,2", "steps": "3000"}, out=tmp_path)
    claims = {c["name"]: c for c in json.loads((tmp_path / "claims.json").read_text())}
    failing = {name for name, c in claims.items() if not c["ok"]}
    assert failing == {name for name in claims if name.startswith("Lemma 4.5's sufficient condition")}
    assert claims["Lemma 4.5: only the important token is selected"]["measured"] == 1.0
    assert "1 of 2 seeds have the loss below 1/(2n) = 0.025" in record.notes[1]  # seed 2 stalls at ~0.27
    assert "selections contain every important token" in record.notes[2]
    assert (tmp_path / "selection.png").exists()


def test_selection_needs_seeds(tmp_path):
    with pytest.raises(InputError, match="seeds"):
        run("attention-selection", overrides={"seeds": ""}, out=tmp_path)
