"""The device option of the trainers and of `embgeo run --set device=...` (CPU is the default and the tested path).

On a machine without CUDA, asking for it is one clear error before any work, from every trainer and from the
runner (which reaches the trainers through DEFAULT_DEVICE). On a machine with CUDA, the same training runs
there in float64 and agrees with the CPU run.
"""

import json

import numpy as np
import pytest
import torch

from embgeo.attention.model import OneLayerAttention
from embgeo.attention.train import train_adamw, two_stage
from embgeo.collapse.data import generate
from embgeo.collapse.model import CollapseNet
from embgeo.collapse.train import train as train_collapse
from embgeo.core.device import DEFAULT_DEVICE, resolve_device
from embgeo.core.threads import limit_threads
from embgeo.errors import InputError
from embgeo.ntp import NTPData, synthetic
from embgeo.ntp.training.learned import UFM, TransformerModel, train_learned
from embgeo.ntp.training.train import train as train_ntp

CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with limit_threads(1):
        yield


def _runs():
    """Each trainer once, tiny, as f(device) -> the trained weights (numpy float64) and the trace's meta."""
    ntp = synthetic(m=6, V=5, d=8, support_size=2, seed=0)
    seq = np.random.default_rng(0).integers(0, 5, size=40).tolist()
    corpus = NTPData.from_sequences([seq], 3, windows=True)
    collapse = generate(n_concepts=2, words_per_concept=2, length=2, n_classes=3, n_train_per_class=2,
                        n_test_per_class=1, seed=0)
    X = np.random.default_rng(1).integers(0, 6, size=(8, 4))
    y = np.where(np.arange(8) % 2, 1.0, -1.0)

    def ntp_gd(device):
        t = train_ntp(ntp, "sgd", lr=0.1, steps=5, batch_size=3, reference=False, progress=False, device=device)
        return t.W, t.meta

    def ufm(device):
        t = train_learned(UFM(ntp.m, ntp.V, 4, seed=0), ntp, optimizer="sgd", lr=0.1, steps=5, batch_size=3,
                          progress=False, device=device)
        return t.W, t.meta

    def transformer(device):
        model = TransformerModel(corpus.V, d=8, layers=1, heads=2, k=3, seed=0)
        t = train_learned(model, corpus, optimizer="adam", lr=1e-2, steps=3, progress=False, device=device)
        return t.W, t.meta

    def collapse_sgd(device):
        model = CollapseNet(collapse.n_words, 4, collapse.length, collapse.n_classes, seed=0, dtype=torch.float64)
        t = train_collapse(model, collapse, 2, batch_size=2, progress=False, device=device)
        return t.W, t.meta

    def attention_adamw(device):
        t = train_adamw(OneLayerAttention(6, 4, seed=0), X, y, 2, batch_size=4, progress=False, device=device)
        return t.W, t.meta

    def attention_two_stage(device):
        t = two_stage(OneLayerAttention(6, 4, seed=0), X, y, 0.5, 3, 0.1, device=device)
        return t.W, t.meta

    return [ntp_gd, ufm, transformer, collapse_sgd, attention_adamw, attention_two_stage]


RUNS = _runs()


@pytest.mark.parametrize("fit", RUNS, ids=lambda f: f.__name__)
def test_cpu_by_name_is_the_default_and_recorded(fit):
    W_default, meta_default = fit(None)
    W_cpu, meta_cpu = fit("cpu")
    assert np.array_equal(W_default, W_cpu)
    assert meta_default["device"] == meta_cpu["device"] == "cpu"


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
@pytest.mark.parametrize("fit", RUNS, ids=lambda f: f.__name__)
def test_an_unavailable_device_is_one_clear_error(fit):
    with pytest.raises(InputError, match="CUDA is not available"):
        fit("cuda")
    token = DEFAULT_DEVICE.set("cuda")  # what `embgeo run --set device=cuda` sets for the trainers
    try:
        with pytest.raises(InputError, match="CUDA is not available"):
            fit(None)
    finally:
        DEFAULT_DEVICE.reset(token)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("fit", RUNS, ids=lambda f: f.__name__)
def test_cuda_runs_the_same_training_in_float64(fit):
    W_cpu, _ = fit("cpu")
    W_gpu, meta = fit("cuda")
    assert meta["device"].startswith("cuda:")
    assert np.allclose(W_gpu, W_cpu, rtol=1e-9, atol=1e-12)  # float64 both; only the kernels' rounding differs


@pytest.mark.parametrize("name", ["cpu", "cuda", "cuda:0", "CPU"])
def test_resolve_device_names(name):
    if name.lower() == "cpu":
        assert resolve_device(name) == torch.device("cpu")
    elif CUDA:
        assert resolve_device(name).type == "cuda"
    else:
        with pytest.raises(InputError, match=f"device '{name}': CUDA is not available"):
            resolve_device(name)


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "", 3, "mps"])
def test_resolve_device_refuses_other_names(bad):
    with pytest.raises(InputError, match="expected 'cpu', 'cuda' or 'cuda:N'"):
        resolve_device(bad)


def test_run_records_the_device_and_refuses_an_unavailable_one(tmp_path, capsys):
    from embgeo.cli import main

    args = ["run", "ntp-toy2d", "--set", "steps=20", "--out", str(tmp_path / "toy")]
    if not CUDA:
        assert main([*args, "--set", "device=cuda"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["embgeo: error: device 'cuda': CUDA is not available on this machine "
                       f"(torch {torch.__version__}, built without CUDA); use device='cpu' (the default)"]
        assert not (tmp_path / "toy").exists()  # refused before any work
    assert main([*args, "--set", "device=cpu"]) == 0
    assert json.loads((tmp_path / "toy" / "record.json").read_text())["device"] == "cpu"
