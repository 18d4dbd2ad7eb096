"""Training h / h* with the paper's protocol (Sec. 2 and the official notebooks), with a hand-written SGD step.

Protocol (official notebooks): plain SGD (no momentum), constant lr 0.1, minibatches of 100
from a fresh random permutation each epoch, mean cross-entropy over the batch, weight decay per
parameter group with PyTorch's convention (gradient += λθ, i.e. the paper's penalty (λ/2)‖θ‖²),
applied to every row of W and U at every step, as ``torch.optim.SGD`` does.

Speed: :func:`sgd_step` does one step without autograd: three GEMMs (X Uᵀ, Gᵀ X, G U) plus
O(B·(K + L·d) + n_w·d) work; the weight decay and update of U are fused into one ``addmm_``
(U ← (1 − lr λ_U) U − (lr/B) Gᵀ X) and W is updated by a scale and an ``index_add_``. It is
checked against ``torch.optim.SGD`` on an ``nn.Embedding`` + ``nn.Linear`` model in the tests.
"""

from __future__ import annotations

import math
import warnings
from os import PathLike

import numpy as np
import torch
from numpy.typing import ArrayLike

from embgeo.collapse.data import CollapseData
from embgeo.collapse.model import CollapseNet
from embgeo.core.device import device_label, resolve_device
from embgeo.core.loop import Checkpoint, TrainingInterrupted, run_loop
from embgeo.core.threads import limit_threads
from embgeo.core.trace import Trace
from embgeo.core.validate import check_bool, check_float, check_positive_int, check_seed, check_threads
from embgeo.errors import InputError, ShapeError

#: Batch size used to evaluate the full train / test sets (exact; independent of training).
EVAL_BATCH = 1000
#: The ``kind`` of the collapse trainer's checkpoint files (:class:`embgeo.core.loop.Checkpoint`).
CHECKPOINT_KIND = "embgeo.collapse"


class DivergenceWarning(UserWarning):
    """Training stopped because the loss or the weights are no longer finite (the step size is too large)."""


# -- one step --------------------------------------------------------------------------------------

@torch.no_grad()
def sgd_step(model: CollapseNet, x: torch.Tensor, y: torch.Tensor, lr: float, weight_decay_W: float,
             weight_decay_U: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One SGD step on the mean CE of the batch (x (B, L) word ids, y (B,) labels), in place.

    Equal to ``torch.optim.SGD([{W, weight_decay_W}, {U, weight_decay_U}], lr)`` after
    ``loss.backward()`` on the same model. Returns the batch loss (0-d tensor, before the step)
    and the number of correctly classified sentences (0-d int tensor, before the step).
    """
    W, U = model.W.data, model.U.data
    B, L = x.shape
    d = model.dim
    flat = x.reshape(-1)
    X = W.index_select(0, flat)  # (B·L, d)
    if model.layernorm:  # fused φ (ATen's LayerNorm kernel without affine parameters), keeping mean / 1/s
        Xw = X
        X, ln_mean, ln_rstd = torch.native_layer_norm(Xw, (d,), None, None, model.ln_eps)
    Xf = X.view(B, L * d)
    logits = torch.mm(Xf, U.t())  # (B, K)
    top, pred = logits.max(dim=1)
    rows = torch.arange(B, device=x.device)
    picked = logits[rows, y]
    correct = (pred == y).sum()
    G = logits.sub_(top[:, None]).exp_()  # unnormalised softmax, in place of the logits
    Z = G.sum(dim=1)
    loss = (top + torch.log(Z) - picked).mean()  # mean CE = mean(logsumexp - picked logit)
    G.div_(Z[:, None])
    G[rows, y] -= 1.0  # B · ∂loss/∂logits
    dX = torch.mm(G, U)  # (B, L·d): B · ∂loss/∂X, with the old U
    U.addmm_(G.t(), Xf, beta=1.0 - lr * weight_decay_U, alpha=-lr / B)
    dX = dX.view(B * L, d)
    if model.layernorm:  # back through φ: (dY − mean(dY) − Y·mean(dY·Y)) / s, fused
        dX = torch.ops.aten.native_layer_norm_backward(dX, Xw, (d,), ln_mean, ln_rstd, None, None,
                                                       [True, False, False])[0]
    if weight_decay_W:
        W.mul_(1.0 - lr * weight_decay_W)
    W.index_add_(0, flat, dX, alpha=-lr / B)
    return loss, correct


@torch.no_grad()
def evaluate(model: CollapseNet, x: ArrayLike | torch.Tensor, y: ArrayLike | torch.Tensor,
             batch_size: int = EVAL_BATCH) -> tuple[float, float]:
    """(mean CE, accuracy) of ``model`` on word ids x (N, L) and labels y (N,), exactly, in batches, on the
    model's device.

    Accuracy counts ``argmax == y`` (ties go to the first maximal class, as ``torch.argmax``).
    """
    x = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.array(x, dtype=np.int64))
    y = y if isinstance(y, torch.Tensor) else torch.from_numpy(np.array(y, dtype=np.int64))
    x, y = x.to(model.W.device), y.to(model.W.device)
    n = len(y)
    if n == 0:
        return math.nan, math.nan
    loss_sum, correct = 0.0, 0
    for i in range(0, n, batch_size):
        logits = model(x[i:i + batch_size]).to(torch.float64)
        yb = y[i:i + batch_size]
        loss_sum += float(torch.nn.functional.cross_entropy(logits, yb, reduction="sum"))
        correct += int((logits.argmax(dim=1) == yb).sum())
    return loss_sum / n, correct / n


def _check_model_data(model: CollapseNet, data: CollapseData) -> None:
    if not isinstance(model, CollapseNet):
        raise InputError(f"model: expected an embgeo.collapse.CollapseNet, got {type(model).__name__}")
    if not isinstance(data, CollapseData):
        raise InputError(f"data: expected an embgeo.collapse.CollapseData, got {type(data).__name__}")
    for name, m, dv in (("n_words", model.n_words, data.n_words), ("length", model.length, data.length),
                        ("n_classes", model.n_classes, data.n_classes)):
        if m != dv:
            raise ShapeError(f"model.{name}: is {m} but the data have {name} = {dv}")


# -- train -----------------------------------------------------------------------------------------

def train(model: CollapseNet, data: CollapseData, epochs: int, *, lr: float = 0.1, batch_size: int = 100,
          weight_decay_W: float = 1e-3, weight_decay_U: float = 1e-3, seed: int = 0, log_every: int = 1,
          checkpoint: str | PathLike | None = None, progress: bool = True, threads: int | None = None,
          device: str | torch.device | None = None) -> Trace:
    """Train ``model`` (in place) on ``data.train_x/train_y`` with the paper's SGD protocol (Sec. 2).

    Parameters
    ----------
    model : CollapseNet
        h or h*; its sizes must match ``data``. Updated in place.
    data : CollapseData
    epochs : int
        Number of passes over the training set (≥ 0). Paper: 1200 (Fig. 3), 10 (4a), 3000 (4b),
        500 (4c).
    lr, batch_size : float, int
        Constant step size and minibatch size (paper: 0.1 and 100). Each epoch draws a fresh
        permutation and takes contiguous minibatches; the last one may be smaller.
    weight_decay_W, weight_decay_U : float
        λ of each parameter group, PyTorch convention (gradient += λθ). Paper: 1e-3 / 1e-3 for h,
        0 / 1e-3 for h*.
    seed : int
        Seed of the ``torch.Generator`` drawing the permutations (the model init has its own).
    log_every : int
        Record every ``log_every`` epochs (plus epoch 0, before training, and the last epoch).
    checkpoint : path, optional
        Save model, generator state, trace rows and epoch there atomically
        (:class:`embgeo.core.loop.Checkpoint`, kind ``"embgeo.collapse"``) at every recorded epoch.
        If the file exists, training RESUMES from it (the settings must match) and ends with the
        same weights as an uninterrupted run.
    progress : bool
        tqdm progress bar over epochs (shown only on a terminal).
    threads : int, optional
        torch / BLAS thread count during training (restored afterwards); None (default): one, or
        ``embgeo --threads N`` (:func:`embgeo.core.threads.default_threads`).
    device : "cpu" | "cuda" | "cuda:N", optional
        Where training runs (:func:`embgeo.core.device.resolve_device`; None: "cpu", or the device of
        ``embgeo run --set device=...``): ``model`` is moved there (in place) and stays there, in its dtype.
        The permutations are drawn on the CPU, so a seed gives the same minibatches on every device; a
        checkpoint resumes on any device. An unavailable device is an :class:`InputError`.

    Returns
    -------
    Trace
        Rows ``step`` (SGD steps done), ``epoch``, ``train_loss`` and ``train_acc`` (means over the
        epoch's minibatches, measured before each update; at epoch 0 the exact values on the full
        training set), ``test_acc`` (exact, full test set; NaN without test data). ``meta`` holds
        the settings and ``best_test_acc``; ``trace.W`` is the final (n_w, d) embedding table.

        Divergence: when a minibatch loss or, at the end of an epoch, W or U is no longer finite,
        training stops, ``meta["diverged_at_step"]`` is the number of SGD steps after which it was
        seen (no row is recorded for it) and a :class:`DivergenceWarning` is issued.

        Ctrl-C: the current state is recorded (epoch = completed epochs, train metrics over the
        partial epoch), ``trace.interrupted`` and ``meta["interrupted_at_step"]`` are set, a
        :class:`~embgeo.core.loop.TrainingInterrupted` warning is issued and the partial trace is
        returned (the last checkpoint stays valid; a Ctrl-C that lands inside a step may leave that
        one step half-applied in ``model``).

    Examples
    --------
    Fig. 4c of the paper (h*, Zipf, n_spl = 5; ~10 min on one core)::

        data = generate(freqs="zipf", seed=0)
        model = CollapseNet(data.n_words, 100, 15, 1000, layernorm=True, ln_eps=1e-5)
        trace = train(model, data, 500, weight_decay_W=0.0, log_every=50, checkpoint="fig4c.pt")
    """
    _check_model_data(model, data)
    epochs = check_positive_int("epochs", epochs, 0)
    lr = check_float("lr", lr)
    batch_size = check_positive_int("batch_size", batch_size)
    wd_W = check_float("weight_decay_W", weight_decay_W, positive=False)
    wd_U = check_float("weight_decay_U", weight_decay_U, positive=False)
    seed = check_seed(seed)
    log_every = check_positive_int("log_every", log_every)
    threads = check_threads(threads)
    progress = check_bool("progress", progress)
    dev = resolve_device(device)

    N = len(data.train_y)
    settings = {"lr": lr, "batch_size": batch_size, "weight_decay_W": wd_W, "weight_decay_U": wd_U,
                "seed": seed, "log_every": log_every, "n_train": N, "n_words": model.n_words, "dim": model.dim,
                "length": model.length, "n_classes": model.n_classes, "layernorm": model.layernorm,
                "ln_eps": model.ln_eps, "dtype": str(model.W.dtype)}
    ckpt = Checkpoint(checkpoint, CHECKPOINT_KIND, settings)
    steps_per_epoch = -(-N // batch_size)
    trace = Trace({**settings, "epochs": epochs, "steps_per_epoch": steps_per_epoch, "threads": threads,
                   "optimizer": "sgd (no momentum)", "init_scale": model.init_scale, "model_seed": model.seed,
                   "data": dict(data.meta), "device": device_label(dev)})
    model.to(dev)
    gen = torch.Generator().manual_seed(seed)
    start = 0
    state = ckpt.load()
    if state is not None:
        if state["epoch"] > epochs:
            raise InputError(f"epochs: the checkpoint {str(ckpt.path)!r} is already at epoch {state['epoch']} > "
                             f"{epochs}")
        model.load_state_dict(state["model"])
        gen.set_state(state["generator"])
        trace.rows.extend(dict(r) for r in state["rows"])
        start = int(state["epoch"])
        trace.meta["resumed_from_epoch"] = start

    with limit_threads(threads):
        _run(trace, model, data, epochs, start, lr, batch_size, wd_W, wd_U, log_every, gen, ckpt, progress)
    test = trace.column("test_acc") if trace.rows else np.array([])
    trace.meta["best_test_acc"] = float(np.nanmax(test)) if np.any(np.isfinite(test)) else math.nan
    trace.W = model.word_embeddings()
    return trace


def _run(trace: Trace, model: CollapseNet, data: CollapseData, epochs: int, start: int, lr: float,
         batch_size: int, wd_W: float, wd_U: float, log_every: int, gen: torch.Generator, ckpt: Checkpoint,
         progress: bool) -> None:
    """The epoch loop (:func:`embgeo.core.loop.run_loop`, one unit = one epoch); fills ``trace`` in place."""
    dev = model.W.device
    X = torch.from_numpy(np.array(data.train_x)).to(dev)
    Y = torch.from_numpy(np.array(data.train_y)).to(dev)
    Xt = torch.from_numpy(np.array(data.test_x)).to(dev)
    Yt = torch.from_numpy(np.array(data.test_y)).to(dev)
    N = len(Y)
    steps_per_epoch = -(-N // batch_size)
    # Running state of the current epoch: SGD steps done in all, the minibatches and sentences of this
    # epoch, the sums of their losses and correct predictions, and the step where training diverged.
    run = {"steps": start * steps_per_epoch, "nb": 0, "seen": 0, "diverged": None}
    loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
    correct = torch.zeros((), dtype=torch.int64, device=dev)

    def epoch(_i: int) -> None:
        loss_sum.zero_()
        correct.zero_()
        run["nb"] = run["seen"] = 0
        perm = torch.randperm(N, generator=gen).to(dev)  # drawn on the CPU: the same on every device
        for i in range(0, N, batch_size):
            idx = perm[i:i + batch_size]
            loss, c = sgd_step(model, X[idx], Y[idx], lr, wd_W, wd_U)  # loss before this step's update
            if not torch.isfinite(loss):
                run["diverged"] = run["steps"]
                run["steps"] += 1
                return
            run["steps"] += 1
            loss_sum.add_(loss)
            correct.add_(c)
            run["nb"] += 1
            run["seen"] += len(idx)
        if not (torch.isfinite(model.W).all() and torch.isfinite(model.U).all()):
            run["diverged"] = run["steps"]

    def add_row(epoch: int, loss: float, acc: float) -> dict:
        test_acc = evaluate(model, Xt, Yt)[1]
        trace.record(run["steps"], epoch=epoch, train_loss=loss, train_acc=acc, test_acc=test_acc)
        return {"loss": loss, "train": acc, "test": test_acc}

    def record(e: int) -> dict | None:
        """The row after ``e`` epochs, then the checkpoint; None (stop) if training diverged."""
        if run["diverged"] is not None:
            trace.meta["diverged_at_step"] = run["diverged"]
            warnings.warn(DivergenceWarning(f"training diverged: the loss or the weights are no longer finite at "
                                            f"step {run['diverged']} (lr={lr:g}, weight_decay_W={wd_W:g}, "
                                            f"weight_decay_U={wd_U:g}); stopping"), stacklevel=5)
            return None
        if e == 0:
            values = add_row(0, *evaluate(model, X, Y))
        else:
            values = add_row(e, float(loss_sum) / run["nb"], int(correct) / run["seen"])
        ckpt.save({"epoch": e, "step": run["steps"],
                   "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                   "generator": gen.get_state(), "rows": [dict(r) for r in trace.rows]})
        return values

    def on_interrupt(_done: int) -> None:
        steps, nb, seen = run["steps"], run["nb"], run["seen"]
        trace.meta["interrupted_at_step"] = steps
        if trace.last is None or trace.last["step"] != steps:
            add_row(steps // steps_per_epoch, float(loss_sum) / nb if nb else math.nan,
                    int(correct) / seen if seen else math.nan)

    run_loop(trace, epochs, epoch, record, record_at=lambda e: e % log_every == 0 or run["diverged"] is not None,
             start=start, desc="train[collapse]", unit="epoch", progress=progress, on_interrupt=on_interrupt)


__all__ = ["CHECKPOINT_KIND", "DivergenceWarning", "EVAL_BATCH", "TrainingInterrupted", "evaluate", "sgd_step",
           "train"]
