"""Training protocols of *Attention with Trained Embeddings Provably Selects Important Tokens*.

* Theory protocol (Sec. 4, eqs. 4 and 9): :func:`one_step` (one full-batch GD step of size η0 on E
  and p from the 𝒩(0, I/d) init), :func:`embedding_update` (E¹ − E⁰, to compare with Lemma 4.1's
  prediction in :mod:`embgeo.attention.theory` through :mod:`embgeo.attention.metrics`) and
  :func:`two_stage` (step 1, then GD on p with E = E¹ frozen, a discretisation of gradient flow (9)).
* Experimental protocol (App. D): :func:`train_adamw`, AdamW on all trainable parameters,
  MultiStepLR ×0.1 at epochs 100 and 200, batch 128, seeded, checkpoint/resume.

Both loops run on :func:`embgeo.core.loop.run_loop` (progress bar, Ctrl-C → a
:class:`~embgeo.core.loop.TrainingInterrupted` warning and the partial trace); :func:`train_adamw`
checkpoints through :class:`embgeo.core.loop.Checkpoint` (kind ``"embgeo.attention"``). Padding:
``pad_id`` (the package convention, :mod:`embgeo.attention`). ``threads=None`` (the default) is one
torch/BLAS thread, or the count of an enclosing ``limit_threads`` (``embgeo --threads N``): see
:mod:`embgeo.core.threads`.
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike

import numpy as np
import torch
from numpy.typing import ArrayLike

from embgeo.attention.model import (
    OneLayerAttention,
    Tokens,
    TwoLayerAttention,
    batch_gradients,
    check_labels,
    prepare_batch,
)
from embgeo.core.device import device_label, resolve_device
from embgeo.core.loop import Checkpoint, TrainingInterrupted, run_loop
from embgeo.core.threads import flush_denormals, limit_threads
from embgeo.core.trace import Trace
from embgeo.core.validate import check_bool, check_float, check_positive_int, check_seed, check_threads
from embgeo.errors import InputError

__all__ = ["CHECKPOINT_KIND", "TrainingInterrupted", "embedding_update", "one_step", "train_adamw", "two_stage"]

#: The ``kind`` of the attention trainer's checkpoint files (:class:`embgeo.core.loop.Checkpoint`).
CHECKPOINT_KIND = "embgeo.attention"


def _check_one_layer(model) -> None:
    if not isinstance(model, OneLayerAttention):
        raise InputError(f"model: expected a OneLayerAttention, got {type(model).__name__}")


# -- theory protocol: step 1 -----------------------------------------------------------------------

@torch.no_grad()
def _step1(model: OneLayerAttention, X: torch.Tensor, y: torch.Tensor, real: torch.Tensor, eta0: float,
           keep_p0: bool) -> dict:
    """Eq. (4) on a prepared batch (see :func:`one_step`)."""
    grads = batch_gradients(model.E, model.p, model.v, X, y, real)
    dE = -eta0 * grads["E"]
    dp = torch.zeros_like(model.p) if keep_p0 else -eta0 * grads["p"]
    model.E.add_(dE)
    model.p.add_(dp)
    return {"dE": dE.clone(), "dp": dp.clone(), "loss0": float(grads["loss"])}


def _prepare(model: OneLayerAttention, X: Tokens, y: ArrayLike | torch.Tensor,
             pad_id: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    X, real = prepare_batch(X, pad_id, model.n_tokens)
    return X, check_labels(y, X.shape[0], model.E.dtype), real


def one_step(model: OneLayerAttention, X: Tokens, y: ArrayLike | torch.Tensor, eta0: float, *,
             pad_id: int | None = None, keep_p0: bool = False) -> dict:
    """Eq. (4): one full-batch GD step of size η0 on E and p (v fixed), applied to ``model`` in place.

    ``p¹ = p⁰ − η0 ∇_p L(E⁰, p⁰)``, ``E¹_s = E⁰_s − η0 ∇_{E_s} L(E⁰, p⁰)``; the gradients are the
    exact ones of :func:`~embgeo.attention.model.one_layer_gradients`. With ``keep_p0`` the
    cls embedding stays at p⁰ (our option, not the paper's: ``docs/papers/attention/readings.rst``).
    ``X`` (n, T) padded with ``pad_id``, ``y`` (n,) ±1.

    Returns
    -------
    dict with ``"dE"`` = E¹ − E⁰ (|S|, d), ``"dp"`` = p¹ − p⁰ (d,) (zero with keep_p0), ``"loss0"``
    = L(E⁰, p⁰) (float), all tensors detached copies.
    """
    _check_one_layer(model)
    eta0 = check_float("eta0", eta0)
    keep_p0 = check_bool("keep_p0", keep_p0)
    return _step1(model, *_prepare(model, X, y, pad_id), eta0, keep_p0)


def embedding_update(model: OneLayerAttention, X: Tokens, y: ArrayLike | torch.Tensor, eta0: float, *,
                     pad_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(E¹ − E⁰, p¹ − p⁰)`` as float64 numpy arrays (|S|, d) and (d,), WITHOUT changing ``model``.

    For Lemma 4.1: compare with :func:`embgeo.attention.theory.lemma41_prediction`
    (:func:`embgeo.attention.metrics.lemma41_residual`).
    """
    _check_one_layer(model)
    eta0 = check_float("eta0", eta0)
    X, y, real = _prepare(model, X, y, pad_id)
    grads = batch_gradients(model.E.detach(), model.p.detach(), model.v.detach(), X, y, real)
    return (-eta0 * grads["E"]).double().numpy(), (-eta0 * grads["p"]).double().numpy()


# -- theory protocol: step 1 + GD on p ------------------------------------------------------------

def two_stage(model: OneLayerAttention, X: Tokens, y: ArrayLike | torch.Tensor, eta0: float, steps: int, lr: float,
              *, pad_id: int | None = None, normalized: bool = False, keep_p0: bool = False,
              p_hat: ArrayLike | None = None, record_every: int = 1, threads: int | None = None,
              progress: bool = False, device: str | torch.device | None = None) -> Trace:
    """The two-stage theory protocol (Sec. 4): step (4), then GD on p with E = E¹ frozen (eq. 9).

    ``model`` must hold the initialization (E⁰, p⁰ ~ 𝒩(0, I/d), unit v fixed) and is updated in
    place: afterwards ``model.E`` = E¹ and ``model.p`` = p after ``steps`` GD steps from p¹.
    Stage 2 step: ``p ← p − lr ∇_p L(E¹, p)``, or with ``normalized`` ``p ← p − lr ∇/‖∇‖``.
    Gradient flow is approximated by small ``lr`` (Sec. 4.2: "small enough step size"); use float64.

    Parameters
    ----------
    X (n, T) padded with ``pad_id``, y (n,) : the full training set.
    eta0 : float   step size of stage 1.
    steps : int    number of stage-2 steps (≥ 0).
    lr : float     stage-2 step size.
    keep_p0 : bool stage 1 leaves p at p⁰.
    p_hat : array (d,), optional   reference direction (e.g. the max-margin solution of (12)).
    record_every : int   record every this many stage-2 steps (plus step 0 = p¹ and the last).
    threads : int, optional   torch/BLAS threads during the run; None: :func:`embgeo.core.threads.default_threads`.
    progress : bool   tqdm bar over the stage-2 steps (only on a terminal).
    device : "cpu" | "cuda" | "cuda:N", optional   where it runs (None: "cpu", or ``embgeo run --set
        device=...``); ``model`` is moved there in place, in its dtype. Unavailable: :class:`InputError`.

    Returns
    -------
    Trace
        Rows ``step`` (stage-2 step), ``loss`` = L(E¹, p_t), ``norm_p`` = ‖p_t‖, ``grad_norm`` and,
        with p_hat, ``cos_p_hat`` = cos(p_t, p̂). ``meta`` holds the settings, ``loss0`` = L(E⁰, p⁰),
        ``norm_dp1`` = ‖p¹ − p⁰‖ and ``max_norm_dE1`` = max_s ‖E¹_s − E⁰_s‖; ``trace.W`` = E¹ (numpy).
        Ctrl-C stops stage 2: a :class:`TrainingInterrupted` warning, ``trace.interrupted`` set,
        ``meta["interrupted_at_step"]``, the iterate reached recorded last, and ``model.p`` holds it.
    """
    _check_one_layer(model)
    eta0 = check_float("eta0", eta0)
    steps = check_positive_int("steps", steps, 0)
    lr = check_float("lr", lr)
    record_every = check_positive_int("record_every", record_every)
    threads = check_threads(threads)
    normalized, keep_p0, progress = (check_bool(name, val) for name, val in
                                     (("normalized", normalized), ("keep_p0", keep_p0), ("progress", progress)))
    dev = resolve_device(device)
    X, y, real = (t.to(dev) for t in _prepare(model, X, y, pad_id))
    model.to(dev)
    if p_hat is not None:
        p_hat = torch.as_tensor(np.asarray(p_hat, dtype=np.float64)).to(dev, model.E.dtype)
        if p_hat.shape != (model.dim,) or not torch.isfinite(p_hat).all() or float(p_hat.norm()) == 0:
            raise InputError(f"p_hat: expected a finite non-zero vector of shape ({model.dim},)")
    trace = Trace({"protocol": "two_stage", "eta0": eta0, "steps": steps, "lr": lr, "normalized": normalized,
                   "keep_p0": keep_p0, "n": int(X.shape[0]), "T": int(X.shape[1]), "n_tokens": model.n_tokens,
                   "dim": model.dim, "dtype": str(model.E.dtype), "threads": threads, "device": device_label(dev)})
    with limit_threads(threads), torch.no_grad():
        s1 = _step1(model, X, y, real, eta0, keep_p0)
        trace.meta.update(loss0=s1["loss0"], norm_dp1=float(s1["dp"].norm()),
                          max_norm_dE1=float(s1["dE"].norm(dim=1).max()))
        E, v, p = model.E, model.v, model.p.detach().clone()
        at = {}  # the gradient at p_t, shared by the record of step t and the update t → t + 1

        def gradients(t: int) -> dict:
            if at.get("t") != t:
                at.update(t=t, grads=batch_gradients(E, p, v, X, y, real))
            return at["grads"]

        def step(t: int) -> None:
            gp = gradients(t)["p"]
            if normalized:
                gn = gp.norm()
                gp = gp / gn if gn > 0 else gp
            p.sub_(lr * gp)

        def record(t: int) -> dict:
            grads = gradients(t)
            row = {"loss": float(grads["loss"]), "norm_p": float(p.norm()), "grad_norm": float(grads["p"].norm())}
            if p_hat is not None:
                row["cos_p_hat"] = float(p @ p_hat / (p.norm() * p_hat.norm()))
            trace.record(t, **row)
            return {"loss": row["loss"], "norm_p": row["norm_p"]}

        def on_interrupt(done: int) -> None:
            trace.meta["interrupted_at_step"] = done
            if trace.last is None or trace.last["step"] != done:
                record(done)

        try:
            run_loop(trace, steps, step, record, record_at=lambda t: t % record_every == 0, desc="two_stage[p]",
                     progress=progress, on_interrupt=on_interrupt)
        finally:
            model.p.copy_(p)
    trace.W = model.E.detach().to("cpu", torch.float64).numpy().copy()
    return trace


# -- experimental protocol -------------------------------------------------------------------------

def drop_padding(X: torch.Tensor, pad_id: int | None) -> torch.Tensor:
    """X (B, T) without the columns that are ``pad_id`` in every row: (B, T′), T′ the most real tokens of a row.

    Both models give a padded key weight exactly 0 and have no positions, so their output is the same up to
    rounding (the sums skip zeros); the work scales with T′ instead of the corpus' longest sequence (tweets:
    T′ ≈ 17 in a minibatch of 128 against T = 85: a two-layer step at d = 2048 takes 80 ms against 1027 ms,
    ``benchmarks/bench_attention_text.py``).
    """
    if pad_id is None:
        return X
    keep = (X != pad_id).any(dim=0)
    return X if bool(keep.all()) else X[:, keep]


def predict(model: OneLayerAttention | TwoLayerAttention, X: torch.Tensor, pad_id: int | None,
            chunk: int = 1024) -> torch.Tensor:
    """Model outputs f (N,) over X (N, T), in chunks of ``chunk`` sequences of similar length.

    The rows are taken shortest first, so each chunk's padding (:func:`drop_padding`) is cut to its own
    longest row; f comes back in the order of X.
    """
    lengths = (X != pad_id).sum(dim=1) if pad_id is not None else torch.zeros(X.shape[0], device=X.device)
    order = torch.argsort(lengths, stable=True)
    f = torch.empty(X.shape[0], dtype=model.E.dtype, device=X.device)
    for i in range(0, X.shape[0], chunk):
        rows = order[i:i + chunk]
        f[rows] = model(drop_padding(X[rows], pad_id), pad_id=pad_id)
    return f


def minibatch_loss(model: OneLayerAttention | TwoLayerAttention, X: torch.Tensor, y: torch.Tensor,
                   pad_id: int | None, groups: int = 1) -> torch.Tensor:
    """Loss (2) over the minibatch X (B, T), computed in ``groups`` parts of similar length.

    Each part is cut to its longest sequence (:func:`drop_padding`) and weighted by its share of B, so the
    value and gradient are the mean over the whole minibatch, as in one part (up to rounding). The two-layer
    model's layer 1 costs T′² per sequence: four parts of the tweets' minibatches take 46 ms a step at
    d = 2048 against 80 ms in one (``benchmarks/bench_attention_text.py``, one thread); the one-layer model
    is fastest in one part (8 ms against 16 ms in four).
    """
    if groups == 1 or pad_id is None:
        return model.loss(drop_padding(X, pad_id), y, pad_id=pad_id)
    order = torch.argsort((X != pad_id).sum(dim=1), stable=True)
    loss = X.new_zeros((), dtype=model.E.dtype)
    for rows in torch.tensor_split(order, min(groups, X.shape[0])):
        loss = loss + model.loss(drop_padding(X[rows], pad_id), y[rows], pad_id=pad_id) * (len(rows) / X.shape[0])
    return loss


def train_adamw(model: OneLayerAttention | TwoLayerAttention, X: Tokens, y: ArrayLike | torch.Tensor, epochs: int, *,
                pad_id: int | None = None, lr: float = 0.01, weight_decay: float = 1e-8, batch_size: int = 128,
                milestones: Sequence[int] = (100, 200), gamma: float = 0.1, seed: int = 0, log_every: int = 1,
                checkpoint: str | PathLike | None = None, progress: bool = True,
                threads: int | None = None, device: str | torch.device | None = None,
                length_groups: int | None = None) -> Trace:
    """Experimental protocol (App. D): AdamW on all trainable parameters of ``model``, in place.

    ``torch.optim.AdamW(lr, weight_decay)`` with PyTorch default betas/eps,
    ``MultiStepLR(milestones, gamma)`` stepped once per epoch, minibatches of ``batch_size`` from
    a fresh seeded permutation each epoch (the last one may be smaller), each cut to its longest sequence
    (:func:`drop_padding`: the same outputs, less work). Paper: IMDB/Yelp
    lr 0.01, wd 1e-8, 500 epochs; synthetic lr 1e-4, wd 1e-4, 196 epochs; batch 128, d = 2048.
    Pass ``train_v=True`` to the model to train v too ("all the parameters").

    Parameters
    ----------
    model : OneLayerAttention or TwoLayerAttention (anything with ``loss(X, y, pad_id=...)``).
    X (N, T) padded with ``pad_id``, y (N,) in {±1} : training set.
    epochs : int
        Total epochs to reach (≥ 0).
    checkpoint : path, optional
        Model, optimizer, scheduler, generator state, trace rows and epoch are saved there
        atomically (:class:`embgeo.core.loop.Checkpoint`, kind ``"embgeo.attention"``) at every
        recorded epoch. If the file exists, training RESUMES from it (settings must match) and
        ends with the same weights as an uninterrupted run.
    log_every : int
        Record every this many epochs (plus epoch 0 and the last epoch).
    progress : bool
        tqdm bar over epochs (shown only on a terminal).
    threads : int, optional
        torch / BLAS threads during training; None (default): one, or ``embgeo --threads N``
        (:func:`embgeo.core.threads.default_threads`).
    length_groups : int, optional
        Each minibatch is computed in this many parts of similar length (:func:`minibatch_loss`; the same
        loss and gradient, less padding). None (default): 4 for the two-layer model, 1 for the one-layer one.
    device : "cpu" | "cuda" | "cuda:N", optional
        Where training runs (:func:`embgeo.core.device.resolve_device`; None: "cpu", or the device of
        ``embgeo run --set device=...``): ``model`` is moved there (in place) and stays there, in its dtype.
        The permutations are drawn on the CPU (the same minibatches on every device); a checkpoint resumes
        on any device. An unavailable device is an :class:`InputError`.

    Returns
    -------
    Trace
        Rows ``step`` (optimizer steps), ``epoch``, ``loss`` (full training set, after the epoch),
        ``acc`` (sign(f) = y), ``lr``. ``trace.W`` is the final E (numpy). Ctrl-C stops early: a
        :class:`TrainingInterrupted` warning, ``trace.interrupted`` set and
        ``meta["interrupted_at_step"]`` (the last checkpoint stays valid).
    """
    if not isinstance(model, torch.nn.Module) or not all(hasattr(model, a) for a in ("loss", "n_tokens", "E")):
        raise InputError(f"model: expected an attention model with a loss(X, y, pad_id=...) method, "
                         f"got {type(model).__name__}")
    epochs = check_positive_int("epochs", epochs, 0)
    lr = check_float("lr", lr)
    weight_decay = check_float("weight_decay", weight_decay, positive=False)
    gamma = check_float("gamma", gamma)
    batch_size = check_positive_int("batch_size", batch_size)
    log_every = check_positive_int("log_every", log_every)
    threads = check_threads(threads)
    seed = check_seed(seed)
    if isinstance(milestones, (str, bytes)) or not isinstance(milestones, Sequence):
        raise InputError(f"milestones: expected a sequence of positive epoch numbers, got {milestones!r}")
    milestones = [check_positive_int("milestones", m) for m in milestones]
    progress = check_bool("progress", progress)
    if length_groups is None:
        length_groups = 4 if isinstance(model, TwoLayerAttention) else 1
    length_groups = check_positive_int("length_groups", length_groups)
    dev = resolve_device(device)
    X_raw = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X)
    Xp, _ = prepare_batch(X_raw, pad_id, model.n_tokens)  # validates all of X once
    y = check_labels(y, Xp.shape[0], model.E.dtype).to(dev)
    X_raw = X_raw.to(dev)
    model.to(dev)
    N = Xp.shape[0]
    settings = {"model": type(model).__name__, "n_tokens": model.n_tokens, "dim": model.dim,
                "train_v": model.train_v, "dtype": str(model.E.dtype), "lr": lr, "weight_decay": weight_decay,
                "batch_size": batch_size, "milestones": milestones, "gamma": gamma, "seed": seed,
                "log_every": log_every, "n_train": N, "pad_id": pad_id}
    trace = Trace({**settings, "epochs": epochs, "optimizer": "AdamW", "scheduler": "MultiStepLR",
                   "threads": threads, "device": device_label(dev)})
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=gamma)
    gen = torch.Generator().manual_seed(seed)
    ckpt = Checkpoint(checkpoint, CHECKPOINT_KIND, settings)
    start, done_steps = 0, [0]  # epochs and optimizer steps done
    state = ckpt.load()
    if state is not None:
        if state["epoch"] > epochs:
            raise InputError(f"epochs: the checkpoint is already at epoch {state['epoch']} > {epochs}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        gen.set_state(state["generator"])
        trace.rows.extend(dict(r) for r in state["rows"])
        start, done_steps[0] = int(state["epoch"]), int(state["step"])
        trace.meta["resumed_from_epoch"] = start

    def epoch(_e: int) -> None:
        perm = torch.randperm(N, generator=gen).to(dev)  # drawn on the CPU: the same on every device
        for i in range(0, N, batch_size):
            idx = perm[i:i + batch_size]
            opt.zero_grad(set_to_none=True)
            minibatch_loss(model, X_raw[idx], y[idx], pad_id, length_groups).backward()
            opt.step()
            done_steps[0] += 1
        sched.step()

    def record(e: int) -> dict:
        with torch.no_grad():
            f = predict(model, X_raw, pad_id)
            loss = float(torch.nn.functional.softplus(-y * f).mean())
            acc = float((torch.sign(f) == y).double().mean())
        trace.record(done_steps[0], epoch=e, loss=loss, acc=acc, lr=opt.param_groups[0]["lr"])
        ckpt.save({"epoch": e, "step": done_steps[0],
                   "model": {k: t.detach().clone() for k, t in model.state_dict().items()},
                   "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "generator": gen.get_state(),
                   "rows": [dict(r) for r in trace.rows]})
        return {"loss": loss, "acc": acc}

    def on_interrupt(_done: int) -> None:
        trace.meta["interrupted_at_step"] = done_steps[0]

    with limit_threads(threads), flush_denormals():  # (subnormal floats in the backward pass: 2-3x slower steps)
        run_loop(trace, epochs, epoch, record, record_at=lambda e: e % log_every == 0, start=start,
                 desc="train[attention]", unit="epoch", progress=progress, on_interrupt=on_interrupt)
    trace.W = model.E.detach().to("cpu", torch.float64).numpy().copy()
    return trace
