"""Training protocols of *Attention with Trained Embeddings Provably Selects Important Tokens*.

* Theory protocol (Sec. 4, eqs. 4 and 9): :func:`one_step` (one full-batch GD step of size η0 on E
  and p from the 𝒩(0, I/d) init), :func:`embedding_update` (E¹ − E⁰ for Lemma 4.1) with the
  prediction :func:`lemma41_prediction`, its residual :func:`lemma41_residual` and first-order size
  :func:`lemma41_error_scale`, the paper's bound :func:`lemma41_bound`, and :func:`two_stage`
  (step 1, then GD on p with E = E¹ frozen, a discretisation of gradient flow (9)).
* Experimental protocol (App. D): :func:`train_adamw`, AdamW on all trainable parameters,
  MultiStepLR ×0.1 at epochs 100 and 200, batch 128, seeded, checkpoint/resume.
"""

from __future__ import annotations

import math
import warnings
from os import PathLike
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from embgeo.attention.model import OneLayerAttention, _labels, one_layer_gradients, prepare_batch
from embgeo.core.checkpoint import save_atomic
from embgeo.core.threads import limit_threads
from embgeo.core.trace import Trace
from embgeo.core.validate import check_positive_int
from embgeo.errors import InputError, ShapeError

__all__ = ["one_step", "embedding_update", "lemma41_alpha", "lemma41_prediction", "lemma41_bound",
           "lemma41_slope", "lemma41_residual", "lemma41_error_scale", "two_stage", "train_adamw"]

CHECKPOINT_VERSION = 1


def _check_float(name: str, value, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name}: expected a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or (value <= 0 if positive else value < 0):
        raise InputError(f"{name}: expected a finite {'positive' if positive else 'non-negative'} number, "
                         f"got {value}")
    return value


def _check_one_layer(model) -> None:
    if not isinstance(model, OneLayerAttention):
        raise InputError(f"model: expected a OneLayerAttention, got {type(model).__name__}")


# -- theory protocol: step 1 -----------------------------------------------------------------------

@torch.no_grad()
def one_step(model: OneLayerAttention, X, y, eta0: float, mask=None, keep_p0: bool = False) -> dict:
    """Eq. (4): one full-batch GD step of size η0 on E and p (v fixed), applied to ``model`` in place.

    ``p¹ = p⁰ − η0 ∇_p L(E⁰, p⁰)``, ``E¹_s = E⁰_s − η0 ∇_{E_s} L(E⁰, p⁰)``; the gradients are the
    exact ones of :func:`~embgeo.attention.model.one_layer_gradients`. With ``keep_p0`` the
    cls embedding stays at p⁰ (digest §7.1.5).

    Returns
    -------
    dict with ``"dE"`` = E¹ − E⁰ (|S|, d), ``"dp"`` = p¹ − p⁰ (d,) (zero with keep_p0), ``"loss0"``
    = L(E⁰, p⁰) (float), all tensors detached copies.
    """
    _check_one_layer(model)
    eta0 = _check_float("eta0", eta0)
    grads = one_layer_gradients(model.E, model.p, model.v, X, y, mask)
    dE = -eta0 * grads["E"]
    dp = torch.zeros_like(model.p) if keep_p0 else -eta0 * grads["p"]
    model.E.add_(dE)
    model.p.add_(dp)
    return {"dE": dE.clone(), "dp": dp.clone(), "loss0": float(grads["loss"])}


def embedding_update(model: OneLayerAttention, X, y, eta0: float, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """``(E¹ − E⁰, p¹ − p⁰)`` as float64 numpy arrays (|S|, d) and (d,), WITHOUT changing ``model``.

    For Lemma 4.1: compare with :func:`lemma41_prediction` (:func:`lemma41_residual`).
    """
    _check_one_layer(model)
    eta0 = _check_float("eta0", eta0)
    grads = one_layer_gradients(model.E.detach(), model.p.detach(), model.v.detach(), X, y, mask)
    return (-eta0 * grads["E"]).double().numpy(), (-eta0 * grads["p"]).double().numpy()


def lemma41_alpha(X, y, n_tokens: int, mask=None) -> np.ndarray:
    """The signed frequency that the first GD step actually sees, (|S|,).

    ``α_s = (1/n) Σ_k y_k c_{k,s} / T_k`` (c = count of s in X_k, T_k its real length)
    [inference: at initialization the attention is ≈ 1/T_k, so the step-1 gradient weights each
    sequence by its own length]. For equal lengths it equals eq. (3), i.e.
    :func:`embgeo.attention.data.signed_frequency`; with padding that function normalises by the
    total token count instead (the digest's reading of eq. 3 for variable lengths).
    """
    n_tokens = check_positive_int("n_tokens", n_tokens)
    X, mask = prepare_batch(X, mask, n_tokens)
    yt = _labels(y, X.shape[0], torch.float64)
    w = (yt / mask.sum(dim=1).double())[:, None] * mask.double()        # (B, T)
    alpha = torch.zeros(n_tokens, dtype=torch.float64).index_add_(0, X.reshape(-1), w.reshape(-1))
    return (alpha / X.shape[0]).numpy()


def lemma41_prediction(alpha, v, eta0: float) -> np.ndarray:
    """Lemma 4.1, eq. (6): the predicted update ``E¹_s − E⁰_s ≈ (η0/2) α_s v``, shape (|S|, d)."""
    alpha = np.asarray(alpha, dtype=np.float64)
    v = np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v, dtype=np.float64)
    if alpha.ndim != 1 or v.ndim != 1:
        raise ShapeError(f"alpha, v: expected 1-D arrays, got shapes {alpha.shape} and {v.shape}")
    return 0.5 * _check_float("eta0", eta0) * alpha[:, None] * v[None, :]


def lemma41_bound(eta0: float, dim: int) -> float:
    """Lemma 4.1, eq. (7): ``max(‖err_s‖, ‖err_p‖) ≤ 11 η0 d^(−1/4)`` (holds w.h.p. under condition (5)).

    Far above the signal at any practical d: |α_s| ≤ 1, so the prediction itself,
    ‖(η0/2)α_s v‖ ≤ η0/2, is below the bound for every d < 22⁴ ≈ 2.3·10⁵ and a zero update
    satisfies it too. Report it; test the update with :func:`lemma41_residual` instead.
    """
    return 11.0 * _check_float("eta0", eta0) * check_positive_int("dim", dim) ** -0.25


def _as_vector(v) -> np.ndarray:
    return np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v, dtype=np.float64)


def lemma41_slope(dE, alpha, v) -> dict:
    """Least-squares fit of the projections ``(E¹_s − E⁰_s)·v/‖v‖²`` on α_s (prediction: slope η0/2, intercept 0).

    Returns dict ``slope``, ``intercept``, ``corr`` (Pearson) and ``max_residual_norm`` =
    max_s ‖dE_s − slope·α_s v‖ (residual against the FITTED slope; for the residual against the
    lemma's prediction use :func:`lemma41_residual`).
    """
    dE = np.asarray(dE, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    v = _as_vector(v)
    proj = dE @ v / (v @ v)
    slope, intercept = np.polyfit(alpha, proj, 1)
    res = dE - slope * alpha[:, None] * v[None, :]
    return {"slope": float(slope), "intercept": float(intercept), "corr": float(np.corrcoef(alpha, proj)[0, 1]),
            "max_residual_norm": float(np.linalg.norm(res, axis=1).max())}


def lemma41_residual(dE, alpha, v, eta0: float) -> dict:
    """The update's residual against Lemma 4.1's prediction ``(η0/2) α_s v`` (eq. 6), not a fitted slope.

    With ``P = (η0/2) α vᵀ`` (|S|, d) and ``R = dE − P``:

    - ``relative`` = ‖R‖_F / ‖P‖_F, the residual relative to the prediction (RMS over tokens,
      weighted by the signal); compare with :func:`lemma41_error_scale`;
    - ``relative_along_v`` = the same for the components along v only;
    - ``max_residual_norm`` = max_s ‖R_s‖ (the quantity bounded by eq. 7) and
      ``max_prediction_norm`` = max_s ‖P_s‖.

    ``eta0`` is the step size whose half is the predicted slope; passing a wrong one (e.g. 2η0,
    i.e. a slope of η0) makes ``relative`` ≈ 1/2 instead of O(d^(−1/2)).
    """
    dE = np.asarray(dE, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    v = _as_vector(v)
    if dE.ndim != 2 or alpha.shape != (dE.shape[0],) or v.shape != (dE.shape[1],):
        raise ShapeError(f"dE (|S|, d), alpha (|S|,), v (d,): got shapes {dE.shape}, {alpha.shape}, {v.shape}")
    P = lemma41_prediction(alpha, v, eta0)
    R = dE - P
    p_norm = float(np.linalg.norm(P))
    if p_norm == 0:
        raise InputError("alpha: every α_s is 0, so the prediction is 0 and no relative residual exists")
    u = v / np.linalg.norm(v)
    return {"relative": float(np.linalg.norm(R)) / p_norm,
            "relative_along_v": float(np.linalg.norm(R @ u) / np.linalg.norm(P @ u)),
            "max_residual_norm": float(np.linalg.norm(R, axis=1).max()),
            "max_prediction_norm": float(np.linalg.norm(P, axis=1).max())}


def lemma41_error_scale(dim: int, norm_p0: float = 1.0) -> float:
    """First-order size of Lemma 4.1's error relative to the prediction: ``√2 ‖p⁰‖ / √d`` [inference].

    At the init, q_i(X) = (1/T)(1 + a_{x_i} − ā_X + …) and g = 1/2 + O(f), with the scores
    a_s = p⁰·E⁰_s ~ 𝒩(0, ‖p⁰‖²/d) and values b_s = v·E⁰_s ~ 𝒩(0, ‖v‖²/d). To first order the
    step-1 update of E_s is (η0/2)α_s[(1 + a_s) v + b_s p⁰] (the terms in ā_X and f average
    over the T tokens of a sequence and are smaller by √T). Both error terms are independent of
    α and have relative size ‖p⁰‖/√d, so ‖R‖_F/‖P‖_F ≈ √2 ‖p⁰‖/√d (compare
    :func:`lemma41_residual`), and the fitted slope has no first-order bias: its relative error is
    ‖p⁰‖/√d divided by √m_eff, m_eff = (Σα²)²/Σα⁴ the number of tokens that carry the signal.
    """
    return math.sqrt(2.0) * _check_float("norm_p0", norm_p0) / math.sqrt(check_positive_int("dim", dim))


# -- theory protocol: step 1 + GD on p ------------------------------------------------------------

def two_stage(model: OneLayerAttention, X, y, eta0: float, steps: int, lr: float, *, mask=None,
              normalized: bool = False, keep_p0: bool = False, p_hat=None, record_every: int = 1,
              threads: int = 1, progress: bool = False) -> Trace:
    """The two-stage theory protocol (Sec. 4): step (4), then GD on p with E = E¹ frozen (eq. 9).

    ``model`` must hold the initialization (E⁰, p⁰ ~ 𝒩(0, I/d), unit v fixed) and is updated in
    place: afterwards ``model.E`` = E¹ and ``model.p`` = p after ``steps`` GD steps from p¹.
    Stage 2 step: ``p ← p − lr ∇_p L(E¹, p)``, or with ``normalized`` ``p ← p − lr ∇/‖∇‖``.
    Gradient flow is approximated by small ``lr`` (digest §7.1.4); use float64.

    Parameters
    ----------
    X (n, T), y (n,), mask (n, T) : the full training set.
    eta0 : float   step size of stage 1.
    steps : int    number of stage-2 steps (≥ 0).
    lr : float     stage-2 step size.
    keep_p0 : bool stage 1 leaves p at p⁰.
    p_hat : array (d,), optional   reference direction (e.g. the max-margin solution of (12)).
    record_every : int   record every this many stage-2 steps (plus step 0 = p¹ and the last).

    Returns
    -------
    Trace
        Rows ``step`` (stage-2 step), ``loss`` = L(E¹, p_t), ``norm_p`` = ‖p_t‖, ``grad_norm`` and,
        with p_hat, ``cos_p_hat`` = cos(p_t, p̂). ``meta`` holds the settings, ``loss0`` = L(E⁰, p⁰),
        ``norm_dp1`` = ‖p¹ − p⁰‖ and ``max_norm_dE1`` = max_s ‖E¹_s − E⁰_s‖; ``trace.W`` = E¹ (numpy).
    """
    _check_one_layer(model)
    eta0 = _check_float("eta0", eta0)
    steps = check_positive_int("steps", steps, 0)
    lr = _check_float("lr", lr)
    record_every = check_positive_int("record_every", record_every)
    threads = check_positive_int("threads", threads)
    for name, val in (("normalized", normalized), ("keep_p0", keep_p0), ("progress", progress)):
        if not isinstance(val, bool):
            raise InputError(f"{name}: expected True or False, got {val!r}")
    X, mask = prepare_batch(X, mask, model.n_tokens)
    y = _labels(y, X.shape[0], model.E.dtype)
    if p_hat is not None:
        p_hat = torch.as_tensor(np.asarray(p_hat, dtype=np.float64)).to(model.E.dtype)
        if p_hat.shape != (model.dim,) or not torch.isfinite(p_hat).all() or float(p_hat.norm()) == 0:
            raise InputError(f"p_hat: expected a finite non-zero vector of shape ({model.dim},)")
    trace = Trace({"protocol": "two_stage", "eta0": eta0, "steps": steps, "lr": lr, "normalized": normalized,
                   "keep_p0": keep_p0, "n": int(X.shape[0]), "T": int(X.shape[1]), "n_tokens": model.n_tokens,
                   "dim": model.dim, "dtype": str(model.E.dtype), "threads": threads})
    with limit_threads(threads), torch.no_grad():
        s1 = one_step(model, X, y, eta0, mask, keep_p0=keep_p0)
        trace.meta.update(loss0=s1["loss0"], norm_dp1=float(s1["dp"].norm()),
                          max_norm_dE1=float(s1["dE"].norm(dim=1).max()))
        E, v, p = model.E, model.v, model.p.detach().clone()

        def record(t: int, grads: dict) -> None:
            row = {"loss": float(grads["loss"]), "norm_p": float(p.norm()), "grad_norm": float(grads["p"].norm())}
            if p_hat is not None:
                row["cos_p_hat"] = float(p @ p_hat / (p.norm() * p_hat.norm()))
            trace.record(t, **row)

        bar = tqdm(total=steps, desc="two_stage[p]", disable=None if progress else True, leave=False)
        try:
            for t in range(steps + 1):
                grads = one_layer_gradients(E, p, v, X, y, mask)
                if t % record_every == 0 or t == steps:
                    record(t, grads)
                if t == steps:
                    break
                gp = grads["p"]
                if normalized:
                    gn = gp.norm()
                    gp = gp / gn if gn > 0 else gp
                p -= lr * gp
                bar.update(1)
        finally:
            bar.close()
        model.p.copy_(p)
    trace.W = model.E.detach().double().numpy().copy()
    return trace


# -- experimental protocol -------------------------------------------------------------------------

def _save_checkpoint(path: Path, state: dict) -> None:
    save_atomic(path, state)


def train_adamw(model: torch.nn.Module, X, y, epochs: int, *, mask=None, lr: float = 0.01,
                weight_decay: float = 1e-8, batch_size: int = 128, milestones=(100, 200), gamma: float = 0.1,
                seed: int = 0, log_every: int = 1, checkpoint: str | PathLike | None = None,
                progress: bool = True, threads: int = 1) -> Trace:
    """Experimental protocol (App. D): AdamW on all trainable parameters of ``model``, in place.

    ``torch.optim.AdamW(lr, weight_decay)`` with PyTorch default betas/eps,
    ``MultiStepLR(milestones, gamma)`` stepped once per epoch, minibatches of ``batch_size`` from
    a fresh seeded permutation each epoch (the last one may be smaller). Paper: IMDB/Yelp
    lr 0.01, wd 1e-8, 500 epochs; synthetic lr 1e-4, wd 1e-4, 196 epochs; batch 128, d = 2048.
    Pass ``train_v=True`` to the model to train v too ("all the parameters").

    Parameters
    ----------
    model : OneLayerAttention or TwoLayerAttention (anything with ``loss(X, y, mask)``).
    X (N, T), y (N,) in {±1}, mask (N, T) : training set.
    epochs : int
        Total epochs to reach (≥ 0).
    checkpoint : path, optional
        Model, optimizer, scheduler, generator state, trace rows and epoch are saved there
        atomically (write to ``.tmp`` then rename) at every recorded epoch. If the file exists,
        training RESUMES from it (settings must match) and ends with the same weights as an
        uninterrupted run.
    log_every : int
        Record every this many epochs (plus epoch 0 and the last epoch).
    progress : bool
        tqdm bar over epochs (shown only on a terminal).
    threads : int
        torch / BLAS threads during training.

    Returns
    -------
    Trace
        Rows ``step`` (optimizer steps), ``epoch``, ``loss`` (full training set, after the epoch),
        ``acc`` (sign(f) = y), ``lr``. ``trace.W`` is the final E (numpy). Ctrl-C stops early
        with ``trace.interrupted`` set (the last checkpoint stays valid).
    """
    if not hasattr(model, "loss") or not isinstance(model, torch.nn.Module):
        raise InputError(f"model: expected an attention model with a loss(X, y, mask) method, "
                         f"got {type(model).__name__}")
    epochs = check_positive_int("epochs", epochs, 0)
    lr = _check_float("lr", lr)
    weight_decay = _check_float("weight_decay", weight_decay, positive=False)
    gamma = _check_float("gamma", gamma)
    batch_size = check_positive_int("batch_size", batch_size)
    log_every = check_positive_int("log_every", log_every)
    threads = check_positive_int("threads", threads)
    seed = check_positive_int("seed", seed, 0)
    milestones = [check_positive_int("milestones", m) for m in milestones]
    if not isinstance(progress, bool):
        raise InputError(f"progress: expected True or False, got {progress!r}")
    if checkpoint is not None and not isinstance(checkpoint, (str, PathLike)):
        raise InputError(f"checkpoint: expected None or a file path, got {type(checkpoint).__name__}")
    X, mask = prepare_batch(X, mask, model.n_tokens)
    y = _labels(y, X.shape[0], model.E.dtype)
    N = X.shape[0]
    settings = {"model": type(model).__name__, "n_tokens": model.n_tokens, "dim": model.dim,
                "train_v": model.train_v, "dtype": str(model.E.dtype), "lr": lr, "weight_decay": weight_decay,
                "batch_size": batch_size, "milestones": milestones, "gamma": gamma, "seed": seed,
                "log_every": log_every, "n_train": N}
    trace = Trace({**settings, "epochs": epochs, "optimizer": "AdamW", "scheduler": "MultiStepLR",
                   "threads": threads})
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=gamma)
    gen = torch.Generator().manual_seed(seed)
    start = steps_done = 0
    path = None if checkpoint is None else Path(checkpoint)
    if path is not None and path.exists():
        try:
            state = torch.load(path, weights_only=True)
        except Exception as exc:  # corrupt or foreign file
            raise InputError(f"checkpoint: cannot read {str(path)!r} ({exc})") from None
        if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
            raise InputError(f"checkpoint: {str(path)!r} is not an embgeo.attention checkpoint")
        diff = {k: (state["settings"].get(k), v) for k, v in settings.items() if state["settings"].get(k) != v}
        if diff:
            detail = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
            raise InputError(f"checkpoint: {str(path)!r} was written with other settings ({detail})")
        if state["epoch"] > epochs:
            raise InputError(f"epochs: the checkpoint is already at epoch {state['epoch']} > {epochs}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        gen.set_state(state["generator"])
        trace.rows.extend(dict(r) for r in state["rows"])
        start, steps_done = int(state["epoch"]), int(state["step"])
        trace.meta["resumed_from_epoch"] = start

    def save(epoch: int) -> None:
        if path is not None:
            _save_checkpoint(path, {"version": CHECKPOINT_VERSION, "epoch": epoch, "step": steps_done,
                                    "settings": settings,
                                    "model": {k: t.detach().clone() for k, t in model.state_dict().items()},
                                    "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                                    "generator": gen.get_state(), "rows": [dict(r) for r in trace.rows]})

    def record(epoch: int) -> None:
        with torch.no_grad():
            f = torch.cat([model(X[i:i + 1024], mask[i:i + 1024]) for i in range(0, N, 1024)])
            loss = float(torch.nn.functional.softplus(-y * f).mean())
            acc = float((torch.sign(f) == y).double().mean())
        trace.record(steps_done, epoch=epoch, loss=loss, acc=acc, lr=opt.param_groups[0]["lr"])
        bar.set_postfix(loss=f"{loss:.4g}", acc=f"{acc:.3f}", refresh=False)

    bar = tqdm(total=epochs, initial=start, desc="train[attention]", disable=None if progress else True,
               leave=False)
    try:
        with limit_threads(threads):
            if start == 0 and not trace.rows:
                record(0)
                save(0)
            for epoch in range(start, epochs):
                perm = torch.randperm(N, generator=gen)
                for i in range(0, N, batch_size):
                    idx = perm[i:i + batch_size]
                    opt.zero_grad(set_to_none=True)
                    model.loss(X[idx], y[idx], mask[idx]).backward()
                    opt.step()
                    steps_done += 1
                sched.step()
                e = epoch + 1
                if e % log_every == 0 or e == epochs:
                    record(e)
                    save(e)
                bar.update(1)
    except KeyboardInterrupt:
        trace.interrupted = True
        trace.meta["interrupted_at_step"] = steps_done
        warnings.warn(f"training interrupted by Ctrl-C at step {steps_done}; returning the partial trace",
                      RuntimeWarning, stacklevel=2)
    finally:
        bar.close()
    trace.W = model.E.detach().double().numpy().copy()
    return trace
