"""NTP with learned context embeddings: the unconstrained-features model, an LSTM and a transformer.

The paper (Thrampoulidis 2024) fixes the context embeddings h̄_j and trains only the decoder W (V, d).
Here the embeddings are learned too. Every model maps the m distinct contexts to H (m, d), one row
h(x̄_j) per context, and has a decoder ``decoder`` = W (V, d) without bias, so the logits are
H Wᵀ and the loss is the paper's eq. (2) on the m distinct contexts,

    CE(H, W) = -Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log 𝕊_z(W h_j).

* :class:`UFM`: H is a free parameter (the unconstrained-features / log-bilinear model, paper Sec. 6-7).
* :class:`LSTMModel`: token embedding → ``nn.LSTM`` → hidden state of the last step.
* :class:`TransformerModel`: token + learned position embeddings → causal pre-LN encoder → final
  LayerNorm of the last position.

:func:`train_learned` trains any of them by GD, Adam or minibatch SGD on CE plus explicit L2 terms
λ_e/2 ‖θ_e‖² (embedding parameters) and λ_W/2 ‖W‖² (decoder), recording CE, its gap to the entropy and
the norms of W and H on the :func:`embgeo.ntp.training.train.record_steps` grid. :func:`ufm_gradient` is the
closed-form gradient of the UFM objective.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Callable, Iterator
from os import PathLike
from typing import Literal

import numpy as np
import torch
from scipy.special import softmax

from embgeo.core.device import device_label, resolve_device
from embgeo.core.loop import Checkpoint, TrainingInterrupted, run_loop
from embgeo.core.threads import limit_threads
from embgeo.core.trace import Trace
from embgeo.core.validate import (
    as_float_array,
    check_bool,
    check_dense_size,
    check_float,
    check_positive_int,
    check_seed,
    check_threads,
)
from embgeo.errors import InputError, ShapeError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData, check_ntp_data
from embgeo.ntp.training.train import DIVERGENCE_FACTOR, StepSizeWarning, record_steps

OPTIMIZERS = ("gd", "adam", "sgd")
#: Adam's (β1, β2) and ε: the paper's values, as in :func:`embgeo.ntp.training.train.train`.
ADAM_BETAS = (0.9, 0.99)
ADAM_EPS = 1e-8
#: The ``kind`` of this trainer's checkpoint files (:class:`embgeo.core.loop.Checkpoint`).
CHECKPOINT_KIND = "embgeo.ntp.training.learned"
#: The metrics every trace row has (``measure`` may not reuse these names).
BASE_METRICS = ("step", "ce", "kl_gap", "objective", "norm_W", "norm_H")
DTYPES = {torch.float32: "float32", torch.float64: "float64"}


# -- models ----------------------------------------------------------------------------------------

def _check_dtype(dtype: object) -> torch.dtype:
    if dtype not in DTYPES:
        raise InputError(f"dtype: expected torch.float32 or torch.float64, got {dtype!r}")
    return dtype


def _lecun_decoder(V: int, d: int, generator: torch.Generator, dtype: torch.dtype) -> torch.nn.Parameter:
    """W (V, d) with entries N(0, 1/d), so that ‖w_v‖ ≈ 1 (LeCun normal, as ntp.train's default)."""
    return torch.nn.Parameter(torch.randn(V, d, generator=generator, dtype=dtype) / d ** 0.5)


class _LearnedModel(torch.nn.Module):
    """What the trainer needs from a model: ``decoder`` W (V, d), ``embeddings``, ``config``."""

    decoder: torch.nn.Parameter
    V: int
    d: int
    config: dict

    def embeddings(self, contexts: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def logits(self, contexts: torch.Tensor | None = None) -> torch.Tensor:
        """H Wᵀ: (m, V) logits of the contexts, with H = ``embeddings(contexts)`` (m, d)."""
        return self.embeddings(contexts) @ self.decoder.T

    def embedding_parameters(self) -> list[torch.nn.Parameter]:
        """Every parameter but the decoder W: the ones ``weight_decay_embed`` acts on."""
        return [p for p in self.parameters() if p is not self.decoder]

    def forward(self, contexts: torch.Tensor | None = None) -> torch.Tensor:
        return self.logits(contexts)


class UFM(_LearnedModel):
    """Unconstrained features: free context embeddings H (m, d) and decoder W (V, d) (log-bilinear model).

    Both are ``nn.Parameter`` with i.i.d. N(0, init_scale²/d) entries drawn from a ``torch.Generator``
    seeded with ``seed`` (H first), so rows have norm ≈ ``init_scale``. The contexts are the rows of H:
    :meth:`embeddings` ignores its argument.
    """

    def __init__(self, m: int, V: int, d: int, *, seed: int = 0, dtype: torch.dtype = torch.float64,
                 init_scale: float = 1.0):
        super().__init__()
        self.m = check_positive_int("m", m)
        self.V = check_positive_int("V", V, 2)
        self.d = check_positive_int("d", d)
        seed = check_seed(seed)
        dtype = _check_dtype(dtype)
        init_scale = check_float("init_scale", init_scale)
        gen = torch.Generator().manual_seed(seed)
        self.H = torch.nn.Parameter(init_scale * torch.randn(m, d, generator=gen, dtype=dtype) / d ** 0.5)
        self.decoder = torch.nn.Parameter(init_scale * _lecun_decoder(V, d, gen, dtype).data)
        self.config = {"model": "UFM", "m": self.m, "V": self.V, "d": self.d, "seed": seed, "dtype": DTYPES[dtype],
                       "init_scale": init_scale}

    def embeddings(self, contexts: torch.Tensor | None = None) -> torch.Tensor:
        """H (m, d); ``contexts`` is ignored (context j is row j)."""
        return self.H


def _check_context_tensor(contexts: object, V: int, max_length: int | None = None) -> torch.Tensor:
    """A LongTensor (m, L) of ids in [0, V), L ≥ 1 (≤ max_length when given)."""
    if not isinstance(contexts, torch.Tensor) or contexts.dtype != torch.long or contexts.ndim != 2:
        what = (f"a {contexts.dtype} tensor of shape {tuple(contexts.shape)}" if isinstance(contexts, torch.Tensor)
                else type(contexts).__name__)
        raise InputError(f"contexts: expected a 2-D torch.long tensor (m, k) of token ids, got {what}")
    if contexts.shape[1] == 0 or (max_length is not None and contexts.shape[1] > max_length):
        raise ShapeError(f"contexts: expected 1 to {max_length or 'any'} tokens per context, got "
                         f"{contexts.shape[1]}")
    if contexts.numel() and (int(contexts.min()) < 0 or int(contexts.max()) >= V):
        raise InputError(f"contexts: token ids must be in [0, {V}), got the range [{int(contexts.min())}, "
                         f"{int(contexts.max())}]")
    return contexts


class LSTMModel(_LearnedModel):
    """h(x) = last hidden state of an ``nn.LSTM(d, d, layers, batch_first=True)`` over token embeddings.

    Input and output vocabularies are the same V: token embedding (V, d), decoder W (V, d). The LSTM
    and embedding use PyTorch's default initialization, W LeCun normal, all drawn with the global
    torch RNG forked and seeded with ``seed`` (the caller's RNG state is left untouched).
    """

    def __init__(self, V: int, d: int = 64, layers: int = 2, *, seed: int = 0, dtype: torch.dtype = torch.float64):
        super().__init__()
        self.V = check_positive_int("V", V, 2)
        self.d = check_positive_int("d", d)
        self.layers = check_positive_int("layers", layers)
        seed = check_seed(seed)
        dtype = _check_dtype(dtype)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.token_embedding = torch.nn.Embedding(V, d, dtype=dtype)
            self.lstm = torch.nn.LSTM(d, d, layers, batch_first=True, dtype=dtype)
            gen = torch.Generator().manual_seed(seed)
            self.decoder = _lecun_decoder(V, d, gen, dtype)
        self.config = {"model": "LSTMModel", "V": self.V, "d": self.d, "layers": self.layers, "seed": seed,
                       "dtype": DTYPES[dtype]}

    def embeddings(self, contexts: torch.Tensor) -> torch.Tensor:
        """contexts LongTensor (m, k) → H (m, d): the top layer's hidden state after the last token."""
        contexts = _check_context_tensor(contexts, self.V)
        out, _ = self.lstm(self.token_embedding(contexts))  # (m, k, d)
        return out[:, -1]


class TransformerModel(_LearnedModel):
    """h(x) = final LayerNorm of the last position of a causal, pre-LN transformer encoder.

    Token embedding (V, d) + learned position embedding (k, d) → ``nn.TransformerEncoder`` of
    ``layers`` pre-LN layers (``heads`` heads, GELU, feed-forward width 4d, no dropout so that a run is
    a deterministic function of its seeds) with a causal mask → ``nn.LayerNorm(d)``. ``k`` is the
    longest context the position table holds. Initialization as :class:`LSTMModel` (PyTorch defaults
    under a forked RNG seeded with ``seed``; W LeCun normal).
    """

    def __init__(self, V: int, d: int = 64, layers: int = 2, heads: int = 4, k: int = 8, *, seed: int = 0,
                 dtype: torch.dtype = torch.float64):
        super().__init__()
        self.V = check_positive_int("V", V, 2)
        self.d = check_positive_int("d", d)
        self.layers = check_positive_int("layers", layers)
        self.heads = check_positive_int("heads", heads)
        self.k = check_positive_int("k", k)
        if d % heads:
            raise InputError(f"heads: the width d={d} must be divisible by the number of heads, got heads={heads}")
        seed = check_seed(seed)
        dtype = _check_dtype(dtype)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.token_embedding = torch.nn.Embedding(V, d, dtype=dtype)
            self.position_embedding = torch.nn.Embedding(k, d, dtype=dtype)
            layer = torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0,
                                                     activation="gelu", batch_first=True, norm_first=True,
                                                     dtype=dtype)
            # enable_nested_tensor is a padding fast path that pre-LN layers cannot use (and warn about).
            self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.final_norm = torch.nn.LayerNorm(d, dtype=dtype)
            gen = torch.Generator().manual_seed(seed)
            self.decoder = _lecun_decoder(V, d, gen, dtype)
        self.config = {"model": "TransformerModel", "V": self.V, "d": self.d, "layers": self.layers,
                       "heads": self.heads, "k": self.k, "seed": seed, "dtype": DTYPES[dtype]}

    def hidden_states(self, contexts: torch.Tensor) -> torch.Tensor:
        """contexts LongTensor (m, L), L ≤ k → final-LayerNorm'd states of every position (m, L, d).

        Causal: the state at position t depends on tokens 0..t only.
        """
        contexts = _check_context_tensor(contexts, self.V, self.k)
        L = contexts.shape[1]
        x = self.token_embedding(contexts) + self.position_embedding.weight[:L]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=x.dtype)  # -inf above the diagonal
        return self.final_norm(self.encoder(x, mask=mask, is_causal=True))

    def embeddings(self, contexts: torch.Tensor) -> torch.Tensor:
        """contexts LongTensor (m, L), L ≤ k → H (m, d): the state of the last position."""
        return self.hidden_states(contexts)[:, -1]


MODELS = (UFM, LSTMModel, TransformerModel)


# -- loss and the UFM gradient ---------------------------------------------------------------------

def _targets(data: NTPData, dtype: torch.dtype,
             device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CSR entries of P as (rows, cols, π̂_j p̂_{j,z}): CE = -Σ coef · log_softmax(logits)[rows, cols]."""
    P = data.probs
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    coef = data.weights[rows] * P.data
    return (torch.as_tensor(rows, dtype=torch.long, device=device),
            torch.as_tensor(P.indices.astype(np.int64), device=device),
            torch.as_tensor(coef, dtype=dtype, device=device))


def _ce(logits: torch.Tensor, targets: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    rows, cols, coef = targets
    logq = torch.log_softmax(logits, dim=1)
    return -(coef * logq[rows, cols]).sum()


def ntp_loss(logits: torch.Tensor, data: NTPData) -> torch.Tensor:
    """CE of eq. (2): -Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log 𝕊_z(logits_j), a 0-d tensor (differentiable).

    ``logits`` (m, V) in the row order of ``data``. Only the nnz = Σ_j S_j entries of the sparse P
    are gathered; P is never densified.
    """
    check_ntp_data(data)
    if not isinstance(logits, torch.Tensor) or logits.shape != (data.m, data.V):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ShapeError(f"logits: expected a tensor of shape (m, V) = ({data.m}, {data.V}), got {shape}")
    return _ce(logits, _targets(data, logits.dtype, logits.device))


def ufm_gradient(H: np.ndarray, W: np.ndarray, data: NTPData, weight_decay_H: float = 0.0,
                 weight_decay_W: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form gradient of the UFM objective CE(H, W) + λ_H/2 ‖H‖² + λ_W/2 ‖W‖² (Frobenius norms).

    With G = diag(π̂) (𝕊(H Wᵀ) - P) (m, V), the softmax taken row-wise:

        ∂/∂H = G W + λ_H H   (m, d),        ∂/∂W = Gᵀ H + λ_W W   (V, d).

    H (m, d) are the context embeddings in the row order of ``data``, W (V, d) the decoder. Returns
    (dH, dW), numpy float64.
    """
    check_ntp_data(data)
    H = as_float_array("H", H, ndim=2)
    W = as_float_array("W", W, ndim=2)
    if H.shape[0] != data.m or W.shape[0] != data.V or H.shape[1] != W.shape[1]:
        raise ShapeError(f"H, W: expected shapes (m, d) and (V, d) with m={data.m}, V={data.V} and a common d, got "
                         f"{H.shape} and {W.shape}")
    lam_H = check_float("weight_decay_H", weight_decay_H, positive=False)
    lam_W = check_float("weight_decay_W", weight_decay_W, positive=False)
    check_dense_size("logits", (data.m, data.V))
    G = softmax(H @ W.T, axis=1)
    rows = np.repeat(np.arange(data.m), data.support_sizes)
    G[rows, data.probs.indices] -= data.probs.data  # 𝕊 - P on the supports only
    G *= data.weights[:, None]
    return G @ W + lam_H * H, G.T @ H + lam_W * W


# -- training --------------------------------------------------------------------------------------

def _check_model(model: object, data: NTPData) -> _LearnedModel:
    if not isinstance(model, MODELS):
        raise InputError(f"model: expected an embgeo.ntp.training.learned UFM, LSTMModel or TransformerModel, got "
                         f"{type(model).__name__}")
    if model.V != data.V:
        raise ShapeError(f"model.V: is {model.V} but the data have V = {data.V} tokens")
    if isinstance(model, UFM) and model.m != data.m:
        raise ShapeError(f"model.m: the UFM has {model.m} context embeddings but the data have m = {data.m} contexts")
    return model


def _context_ids(model: _LearnedModel, data: NTPData, contexts: object) -> torch.Tensor | None:
    """The (m, k) LongTensor of context token ids (None for the UFM, which ignores them)."""
    if isinstance(model, UFM):
        return None
    if contexts is None:
        lengths = {len(c) for c in data.contexts or []}
        if len(lengths) != 1:
            raise InputError("contexts: an LSTM or transformer needs the (m, k) token ids of the contexts; pass "
                             "contexts= (data.contexts is " + ("not set)" if data.contexts is None else
                                                               f"of lengths {sorted(lengths)})"))
        contexts = data.contexts
    try:
        ids = np.asarray(contexts)
    except (TypeError, ValueError) as exc:
        raise InputError(f"contexts: expected an (m, k) integer array, got {type(contexts).__name__} ({exc})") from None
    if ids.ndim != 2 or ids.shape[0] != data.m or ids.shape[1] == 0:
        raise ShapeError(f"contexts: expected an (m, k) array with m = {data.m} rows (one per context) and k >= 1, "
                         f"got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise InputError(f"contexts: expected integer token ids, got dtype {ids.dtype}")
    if ids.min() < 0 or ids.max() >= model.V:
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise InputError(f"contexts: token id {bad} is out of range for the model's V = {model.V}")
    if isinstance(model, TransformerModel) and ids.shape[1] > model.k:
        raise ShapeError(f"contexts: length {ids.shape[1]} exceeds the transformer's position table k = {model.k}")
    return torch.as_tensor(ids.astype(np.int64))


def _fingerprint(data: NTPData, ids: torch.Tensor | None) -> str:
    """A short hash of P, π̂ and the context ids: a checkpoint resumes only on the same data."""
    h = hashlib.sha256()
    for a in (data.probs.indptr, data.probs.indices, data.probs.data, data.weights):
        h.update(np.ascontiguousarray(a).tobytes())
    if ids is not None:
        h.update(ids.numpy().tobytes())
    return h.hexdigest()[:16]


def _penalty(model: _LearnedModel, lam_e: float, lam_W: float) -> torch.Tensor | float:
    """λ_e/2 Σ ‖θ_e‖² + λ_W/2 ‖W‖²: explicit L2 terms of the objective (coupled, not AdamW's decay)."""
    total = 0.0
    if lam_e:
        total = total + lam_e / 2 * sum(p.pow(2).sum() for p in model.embedding_parameters())
    if lam_W:
        total = total + lam_W / 2 * model.decoder.pow(2).sum()
    return total


def _plain(value: object) -> object:
    """numpy scalars → Python scalars: a row reads the same before and after a resume (a checkpoint stores the
    Python scalar, :func:`embgeo.core.checkpoint.loadable`, which also writes a Status as its string)."""
    return value.item() if isinstance(value, np.generic) else value


def train_learned(model: _LearnedModel, data: NTPData, contexts: np.ndarray | None = None, *,
                  optimizer: str = "adam", lr: float = 1e-3, steps: int = 1000, weight_decay_embed: float = 0.0,
                  weight_decay_decoder: float = 0.0, batch_size: int | None = None,
                  record_every: int | Literal["log", "log125"] = "log",
                  measure: Callable[[np.ndarray, np.ndarray, int], dict] | None = None, seed: int = 0,
                  threads: int | None = None, checkpoint: str | PathLike | None = None,
                  progress: bool = True, device: str | torch.device | None = None) -> Trace:
    """Train ``model`` (in place) on CE of eq. (2) with learned context embeddings; record the geometry.

    Objective: CE(H(θ_e), W) + λ_e/2 Σ‖θ_e‖² + λ_W/2 ‖W‖², with θ_e = ``model.embedding_parameters()``
    (H itself for the UFM), λ_e = ``weight_decay_embed`` and λ_W = ``weight_decay_decoder``. The L2 terms
    are part of the objective, so with Adam they pass through its normalization (not AdamW).

    Parameters
    ----------
    model : UFM | LSTMModel | TransformerModel
        ``model.V`` must be data.V (and ``model.m`` = data.m for the UFM).
    data : NTPData
        The m distinct contexts: probs P (m, V) sparse, weights π̂ (m,). Its ``embeddings`` are unused.
    contexts : int array (m, k), optional
        Token ids of the contexts in the row order of ``data`` (ids < V); default ``data.contexts`` when
        all have the same length. Ignored by the UFM.
    optimizer : {"gd", "adam", "sgd"}
        * ``gd``: θ ← θ - lr ∇(objective), full batch over the m contexts.
        * ``adam``: ``torch.optim.Adam(lr, betas=ADAM_BETAS, eps=ADAM_EPS)`` on the full-batch objective.
        * ``sgd``: each step draws ``batch_size`` contexts i.i.d. with probability π̂_j (with replacement,
          a ``torch.Generator`` seeded with ``seed``) and steps on their mean per-context CE
          -Σ_z p̂_{j,z} log q_{j,z} (an unbiased estimate of CE) plus the full L2 terms.
    lr : float
        Step size (> 0).
    steps : int
        Number of updates (≥ 0).
    weight_decay_embed, weight_decay_decoder : float
        λ_e and λ_W (≥ 0).
    batch_size : int, optional
        SGD batch size (default 1); only valid with ``optimizer="sgd"``.
    record_every : "log" | "log125" | int
        Recorded steps, :func:`embgeo.ntp.training.train.record_steps`.
    measure : callable, optional
        ``measure(H, W, step) -> dict`` of scalar metrics, called at every recorded step with the current
        embeddings H (m, d) and decoder W (V, d) as float64 numpy arrays and the number of updates done;
        merged into the row.
    seed : int
        Seed of the SGD sampling (models carry their own initialization seed).
    threads : int, optional
        torch / BLAS thread count during training (restored afterwards); None: one, or
        ``embgeo --threads N`` (:func:`embgeo.core.threads.default_threads`).
    checkpoint : path, optional
        Save model, optimizer state, sampling generator and trace rows there atomically at every
        recorded step (:class:`embgeo.core.loop.Checkpoint`, kind ``"embgeo.ntp.training.learned"``). If the file
        exists, training RESUMES from it; it must come from the same model configuration, data and
        settings (``steps`` may grow), else :class:`InputError`.
    progress : bool
        tqdm progress bar (only on a terminal).
    device : "cpu" | "cuda" | "cuda:N", optional
        Where training runs (:func:`embgeo.core.device.resolve_device`; None: "cpu", or the device of
        ``embgeo run --set device=...``): ``model`` is moved there (in place) and stays there; its dtype is
        kept (float64 on CUDA too). The recorded metrics and ``measure`` get float64 numpy copies on the CPU.
        A checkpoint resumes on any device. An unavailable device is an :class:`InputError`.

    Returns
    -------
    Trace
        Rows: ``step``, ``ce`` (eq. 2 on all m contexts, no L2 term), ``kl_gap`` = ce - 𝓗 with 𝓗 =
        :func:`theory.entropy` (a difference: rounding noise ~1e-16·𝓗), ``objective`` (ce + L2 terms),
        ``norm_W`` = ‖W‖_F, ``norm_H`` = ‖H‖_F of the current embeddings (m, d), then ``measure``'s
        values. All are computed in float64 from the model's H and W. ``trace.W`` is the final W (V, d);
        ``meta`` holds the model configuration, sizes, optimizer, lr, decays, dtype and 𝓗.

        Divergence: when the loss or the parameters are no longer finite, training stops,
        ``meta["diverged_at_step"]`` is set and a :class:`~embgeo.ntp.training.train.StepSizeWarning` is issued.
        Ctrl-C: the current state is recorded (not checkpointed), ``trace.interrupted`` is set and the
        partial trace is returned.
    """
    check_ntp_data(data)
    model = _check_model(model, data)
    ids = _context_ids(model, data, contexts)
    if optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer: expected one of {OPTIMIZERS}, got {optimizer!r}")
    lr = check_float("lr", lr)
    steps = check_positive_int("steps", steps, 0)
    lam_e = check_float("weight_decay_embed", weight_decay_embed, positive=False)
    lam_W = check_float("weight_decay_decoder", weight_decay_decoder, positive=False)
    if batch_size is not None and optimizer != "sgd":
        raise InputError(f"batch_size: only used by optimizer='sgd', got batch_size={batch_size!r} with "
                         f"optimizer={optimizer!r}")
    if optimizer == "sgd":
        batch_size = 1 if batch_size is None else check_positive_int("batch_size", batch_size)
    schedule = record_steps(steps, record_every)
    if measure is not None and not callable(measure):
        raise InputError(f"measure: expected None or a callable measure(H, W, step) -> dict, got "
                         f"{type(measure).__name__}")
    seed = check_seed(seed)
    threads = check_threads(threads)
    progress = check_bool("progress", progress)
    dev = resolve_device(device)
    check_dense_size("logits", (data.m, data.V), "train on a subset of contexts")

    settings = {"model": dict(model.config), "m": data.m, "V": data.V, "data": _fingerprint(data, ids),
                "optimizer": optimizer, "lr": lr, "weight_decay_embed": lam_e, "weight_decay_decoder": lam_W,
                "batch_size": batch_size, "record_every": record_every, "seed": seed}
    ckpt = Checkpoint(checkpoint, CHECKPOINT_KIND, settings)
    meta = {**settings, "model": model.config["model"], "model_config": dict(model.config), "d": model.d,
            "k": None if ids is None else ids.shape[1], "steps": steps, "threads": threads,
            "dtype": model.config["dtype"], "entropy": theory.entropy(data),
            "n_parameters": sum(p.numel() for p in model.parameters()), "device": device_label(dev)}
    if optimizer == "adam":
        meta.update(betas=ADAM_BETAS, eps=ADAM_EPS)
    trace = Trace(meta)

    model.to(dev)
    ids = None if ids is None else ids.to(dev)
    with limit_threads(threads):
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS) if optimizer == "adam" \
            else None
        gen = torch.Generator().manual_seed(seed)
        start = 0
        state = ckpt.load()
        if state is not None:
            if state["step"] > steps:
                raise InputError(f"steps: the checkpoint {str(ckpt.path)!r} is already at step {state['step']} > "
                                 f"{steps}")
            model.load_state_dict(state["model"])
            if opt is not None:
                opt.load_state_dict(state["optimizer"])
            gen.set_state(state["generator"])
            trace.rows.extend(dict(r) for r in state["rows"])
            start = int(state["step"])
            trace.meta["resumed_from_step"] = start
        _run(trace, model, data, ids, optimizer, opt, lr, steps, start, lam_e, lam_W, batch_size, schedule,
             measure, gen, ckpt, progress)
    trace.W = model.decoder.detach().to("cpu", torch.float64).numpy().copy()
    return trace


def _batches(data: NTPData, batch_size: int, gen: torch.Generator, dtype: torch.dtype,
             device: torch.device) -> Iterator:
    """Endless SGD batches on ``device``: (idx (B,), (rows, cols, p̂)) of contexts drawn i.i.d. ~ π̂.

    The draws are made on the CPU (the generator's device), so a seed gives the same batches everywhere."""
    weights = torch.tensor(data.weights)  # a copy: data.weights is read-only
    while True:
        idx = torch.multinomial(weights, batch_size, replacement=True, generator=gen)
        sub = data.probs[idx.numpy()]  # (B, V) CSR: the drawn contexts' rows of P, repeats kept
        rows = np.repeat(np.arange(batch_size), np.diff(sub.indptr))
        yield idx.to(device), (torch.as_tensor(rows, device=device),
                               torch.as_tensor(sub.indices.astype(np.int64), device=device),
                               torch.as_tensor(sub.data, dtype=dtype, device=device))


def _run(trace: Trace, model: _LearnedModel, data: NTPData, ids: torch.Tensor | None, optimizer: str,
         opt: torch.optim.Optimizer | None, lr: float, steps: int, start: int, lam_e: float, lam_W: float,
         batch_size: int | None, schedule: list[int], measure, gen: torch.Generator, ckpt: Checkpoint,
         progress: bool) -> None:
    """The step loop (:func:`embgeo.core.loop.run_loop`, one unit = one update); fills ``trace``."""
    dtype, device = model.decoder.dtype, model.decoder.device
    targets = _targets(data, dtype, device)
    targets64 = _targets(data, torch.float64, device)
    entropy = trace.meta["entropy"]
    params = list(model.parameters())
    batches = _batches(data, batch_size, gen, dtype, device) if optimizer == "sgd" else None
    to_record = set(schedule)
    run = {"diverged": None}

    def batch_loss() -> torch.Tensor:
        """Full CE, or the SGD estimate: mean over the batch of -Σ_z p̂_{j,z} log q_{j,z}."""
        if batches is None:
            return _ce(model.logits(ids), targets)
        idx, (rows, cols, p) = next(batches)
        H = model.H[idx] if isinstance(model, UFM) else model.embeddings(ids[idx])
        logq = torch.log_softmax(H @ model.decoder.T, dim=1)
        return -(p * logq[rows, cols]).sum() / batch_size

    def step(i: int) -> None:
        for p in params:
            p.grad = None
        value = batch_loss() + _penalty(model, lam_e, lam_W)
        if not torch.isfinite(value):
            run["diverged"] = i  # the parameters after i updates give a non-finite loss: stop, no update
            return
        value.backward()
        if opt is not None:
            opt.step()
        else:  # gd, sgd: θ <- θ - lr ∇
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p.sub_(p.grad, alpha=lr)

    @torch.no_grad()
    def row(done: int) -> dict | None:
        """The metrics after ``done`` updates, in float64; None if they are not finite."""
        H = model.embeddings(ids).to(torch.float64)
        W = model.decoder.to(torch.float64)
        ce = float(_ce(H @ W.T, targets64))
        values = {"ce": ce, "kl_gap": ce - entropy, "objective": ce + float(_penalty(model, lam_e, lam_W)),
                  "norm_W": float(torch.linalg.vector_norm(W)), "norm_H": float(torch.linalg.vector_norm(H))}
        if not all(np.isfinite(v) for v in values.values()):
            return None
        if trace.rows:  # the rule of embgeo.ntp.training.train: a loss far above its start and the trivial predictor's
            limit = DIVERGENCE_FACTOR * max(trace.rows[0]["ce"], math.log(data.V))
            if ce > limit:
                run["reason"] = (f"the loss CE = {ce:.3g} exceeds {DIVERGENCE_FACTOR:g} × max(CE at step 0, log V) = "
                                 f"{limit:.3g}")
                return None
        if measure is not None:
            extra = measure(H.cpu().numpy().copy(), W.cpu().numpy().copy(), done)
            if not isinstance(extra, dict) or any(k in BASE_METRICS for k in extra):
                raise InputError(f"measure: expected a dict of metrics whose names are not in {BASE_METRICS}, got "
                                 f"{extra!r}")
            values.update({k: _plain(v) for k, v in extra.items()})
        return values

    def diverge(at: int) -> None:
        reason = run.get("reason") or "the loss or the parameters are no longer finite"
        trace.meta["diverged_at_step"] = at
        trace.meta["diverged_reason"] = reason
        warnings.warn(StepSizeWarning(f"training diverged at step {at}: {reason} (optimizer={optimizer}, lr={lr:g}); "
                                      "stopping"), stacklevel=5)

    def record(done: int, save: bool = True) -> dict | None:
        """Append the row after ``done`` updates and checkpoint; None (stop) on divergence."""
        if run["diverged"] is not None:
            diverge(run["diverged"])
            return None
        values = row(done)
        if values is None:
            diverge(done)
            return None
        trace.record(done, **values)
        if save:
            ckpt.save({"step": done, "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                       "optimizer": None if opt is None else opt.state_dict(), "generator": gen.get_state(),
                       "rows": [dict(r) for r in trace.rows]})
        return {"kl_gap": values["kl_gap"], "norm_W": values["norm_W"]}

    def on_interrupt(done: int) -> None:
        # Not checkpointed: a Ctrl-C inside a step may leave that update half-applied.
        trace.meta["interrupted_at_step"] = done
        if trace.last is None or trace.last["step"] != done:
            record(done, save=False)

    run_loop(trace, steps, step, record, record_at=lambda done: done in to_record or run["diverged"] is not None,
             start=start, desc=f"train[{type(model).__name__}, {optimizer}]", progress=progress,
             on_interrupt=on_interrupt)


__all__ = ["ADAM_BETAS", "ADAM_EPS", "BASE_METRICS", "CHECKPOINT_KIND", "LSTMModel", "OPTIMIZERS",
           "StepSizeWarning", "TrainingInterrupted", "TransformerModel", "UFM", "ntp_loss", "train_learned",
           "ufm_gradient"]
