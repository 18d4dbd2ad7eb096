"""Pinned trace values of every paper's trainers at a fixed seed.

Recorded before the package restructuring of issue 11 so that moving code (metrics, loops, paths)
cannot silently change what is computed. float64 paths are pinned to 1e-9 relative, float32 paths
(torch defaults in collapse and the AdamW protocol) to 1e-5, which covers BLAS differences between
CPUs but not a changed formula, order of operations in the loss, or RNG stream.
"""

import numpy as np
import pytest
import torch

from embgeo.attention.data import assumption1_data, synthetic_levels
from embgeo.attention.model import OneLayerAttention
from embgeo.attention.train import train_adamw, two_stage
from embgeo.collapse.data import generate
from embgeo.collapse.model import CollapseNet
from embgeo.collapse.train import train as train_collapse
from embgeo.ntp.data import synthetic
from embgeo.ntp.training.regpath import regularization_path, ridge_path
from embgeo.ntp.training.train import train

NTP_COLUMNS = ["kl_gap", "norm", "cos_mm", "subspace_error"]
PINNED_NTP = {
    "gd": [0.11447272951373323, 3.8207147032349673, 0.6543566333987273, 0.25240713611418647],
    "ngd": [1.0405908674181126, 1.8975237156082312, -0.01200235459623996, 1.0636202572354816],
    "adam": [0.2732558429932421, 2.8519814263912213, 0.5133480911190206, 0.5290568249905092],
    "sgd": [0.2257140290010261, 2.967246874170499, 0.5215075825892135, 0.4445849423765814],
}


@pytest.fixture(scope="module")
def ntp_data():
    return synthetic(12, 6, 15, 3, seed=0)


@pytest.mark.parametrize("optimizer", list(PINNED_NTP))
def test_ntp_trainers(ntp_data, optimizer):
    kw = {"batch_size": 4} if optimizer == "sgd" else {}
    df = train(ntp_data, optimizer, 0.5 if optimizer == "gd" else None, 50, seed=1, progress=False, **kw).to_frame()
    np.testing.assert_allclose(df[NTP_COLUMNS].iloc[-1].to_numpy(), PINNED_NTP[optimizer], rtol=1e-9)


def test_ntp_paths(ntp_data):
    rp = regularization_path(ntp_data, [1.0, 3.0]).to_frame()
    np.testing.assert_allclose(rp[["kl_gap", "cos_mm"]].iloc[-1], [0.14539841992845526, 0.7739913444586416], rtol=1e-7)
    rd = ridge_path(ntp_data, [1e-1, 1e-2]).to_frame()
    np.testing.assert_allclose(rd[["kl_gap", "cos_mm"]].iloc[-1], [0.07217916163335254, 0.833172700154809], rtol=1e-7)


def test_collapse_trainer():
    data = generate(3, 4, 3, 6, n_train_per_class=3, n_test_per_class=2, seed=0)
    model = CollapseNet(data.n_words, 5, 3, 6, seed=0)
    df = train_collapse(model, data, 3, lr=0.1, batch_size=5, progress=False).to_frame()
    last = df.iloc[-1]
    assert int(last["step"]) == 12
    np.testing.assert_allclose(last[["train_loss", "train_acc", "test_acc"]].to_numpy(dtype=float),
                               [1.7917587757110596, 0.5555555555555556, 0.3333333333333333], rtol=1e-5)


def test_attention_trainers():
    data = synthetic_levels(40, seed=0, T=8)
    model = OneLayerAttention(int(data.levels.size), 8, seed=0, train_v=True, dtype=torch.float32)
    df = train_adamw(model, data.X, data.y, 2, lr=1e-2, batch_size=16, progress=False).to_frame()
    np.testing.assert_allclose(df[["step", "loss", "acc"]].iloc[-1].to_numpy(dtype=float),
                               [6.0, 0.6597567200660706, 0.725], rtol=1e-5)
    a1 = assumption1_data(3, 4, seed=0, n_irrelevant=2, n_positive=3, n_negative=3)
    stage = two_stage(OneLayerAttention(8, 16, seed=0), a1.X, a1.y, 100.0, 20, 1.0).to_frame()
    np.testing.assert_allclose(stage[["loss", "norm_p", "grad_norm"]].iloc[-1].to_numpy(dtype=float),
                               [0.35031391636102, 2.5774899522816543, 0.01746059812130058], rtol=1e-9)
