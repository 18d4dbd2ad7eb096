"""Training the linear NTP decoder W on fixed context embeddings.

Paper: ``ntp-implicit-bias-neurips.txt`` Sec. 4 (regularization path, Theorem 1), Sec. 5
(GD, Lemma 2 and Theorem 2; SGD in footnote 8) and App. A (Figs. 4-5: GD, normalized GD and
Adam from a LeCun initialization). Only W (V, d) is trained; the logits of context j are
W h̄_j and the loss is CE of eq. (2).

* :func:`train`: GD / normalized GD / Adam / SGD over distinct contexts, in torch float64,
  recording a :class:`~embgeo.core.trace.Trace` of the paper's Fig. 4 metrics (loss gap as a
  KL, norm, alignment with W^mm, convergence of P_F(W) to W*, NTP-margin).
* ``train(..., reduce_unseen=True)``: the same run on the seen rows plus one shared row for the tokens that are
  never a next token (exact when they start equal; see :func:`train` and :mod:`embgeo.ntp.measure.metrics`).

The recorded metrics are :mod:`embgeo.ntp.measure.metrics` (numpy float64, from the current W); the
regularization paths of Theorem 1 are :mod:`embgeo.ntp.training.regpath`.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
import torch
from numpy.typing import ArrayLike

from embgeo.core.device import device_label, resolve_device
from embgeo.core.loop import TrainingInterrupted, run_loop
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
    make_rng,
)
from embgeo.errors import InputError, ShapeError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData, check_ntp_data
from embgeo.ntp.measure.metrics import (
    ReducedProblem,
    ReducedReference,
    Reference,
    compute_reference,
    reduced_reference,
    reduced_trace_metrics,
    resolve_reference,
    trace_metrics,
)

OPTIMIZERS = ("gd", "ngd", "adam", "sgd")
#: The paper's step sizes for normalized GD and Adam (App. A, Fig. 5).
PAPER_LR = {"ngd": 0.01, "adam": 0.01}

#: A training has diverged when its loss CE exceeds this factor times the larger of the loss at step 0 and log V
#: (the loss of W = 0, which predicts every token uniformly). GD with lr ≤ 2/L never increases CE (the descent
#: lemma on an L-smooth convex loss), and no working optimizer ends ten times worse than both its start and the
#: trivial predictor. The loss's gradient is bounded (‖∇CE‖ ≤ √2 max_j ‖h̄_j‖), so an oversized step does not
#: overflow: at lr = 1e6 on the Fig. 4 data CE jumps from 2.6 to 2.8e5 at step 1 and stays there, finite, for
#: 10⁴ steps; the finiteness check alone never fires (issue 37).
DIVERGENCE_FACTOR = 10.0


class StepSizeWarning(UserWarning):
    """The step size is outside the range where the theory guarantees descent."""


# -- train -----------------------------------------------------------------------------------------

#: The multiples of each power of ten that a logarithmic record grid takes (:func:`record_steps`).
LOG_GRIDS = {"log": tuple(range(1, 10)), "log125": (1, 2, 5)}


def record_steps(steps: int, record_every: int | Literal["log", "log125"] = "log") -> list[int]:
    """The steps :func:`train` records, sorted: always 0 and ``steps``.

    ``"log"``: 0, 1, ..., 9, 10, 20, ..., 90, 100, 200, ... (the 1-9 × 10^k grid, ~10 points per
    decade); ``"log125"``: 0, 1, 2, 5, 10, 20, 50, ... (3 per decade, for runs whose records are costly);
    an int k: 0, k, 2k, ... .
    """
    steps = check_positive_int("steps", steps, 0)
    if isinstance(record_every, str):
        if record_every not in LOG_GRIDS:
            raise InputError(f"record_every: expected one of {', '.join(map(repr, LOG_GRIDS))} or a positive integer, "
                             f"got {record_every!r}")
        grid = {0, steps}
        decade = 1
        while decade <= steps:
            grid.update(k * decade for k in LOG_GRIDS[record_every] if k * decade <= steps)
            decade *= 10
        return sorted(grid)
    k = check_positive_int("record_every", record_every)
    return sorted(set(range(0, steps + 1, k)) | {steps})


def _initial_W(data: NTPData, init, seed: int) -> tuple[np.ndarray, str]:
    V, d = data.V, data.d
    if isinstance(init, str):
        if init == "lecun":
            return make_rng(seed).standard_normal((V, d)) / np.sqrt(d), "lecun"
        if init == "zeros":
            return np.zeros((V, d)), "zeros"
        raise InputError(f"init: expected 'lecun', 'zeros' or a (V, d) = ({V}, {d}) array, got {init!r}")
    W0 = as_float_array("init", init, ndim=2)
    if W0.shape != (V, d):
        raise ShapeError(f"init: expected an array of shape (V, d) = ({V}, {d}), got {W0.shape}")
    return W0.copy(), "array"


def _default_lr(optimizer: str, L: float) -> float:
    if optimizer in PAPER_LR:
        return PAPER_LR[optimizer]
    if L <= 0:
        raise InputError("lr: cannot default to 1/(2L) because the smoothness constant L is 0 (all embeddings "
                         "are zero, the loss is constant); pass lr explicitly")
    return 1.0 / (2.0 * L)


class _Loss:
    """CE of eq. (2) in torch float64 on ``device``: full batch, or the mean per-context CE of a batch of contexts.

    With ``problem`` (:class:`~embgeo.ntp.measure.metrics.ReducedProblem`) the parameter is R (k + 1, d), the seen rows
    and the shared unseen row, and the logits get the offset ``problem.bias`` (log|U| on the shared row): the softmax of
    the full W = expand(R), on k + 1 columns."""

    def __init__(self, data: NTPData, device: torch.device | str = "cpu", problem: ReducedProblem | None = None):
        self.device = device
        self.bias = None
        if problem is not None:
            data = problem.data_r
            self.bias = torch.tensor(problem.bias, dtype=torch.float64, device=device)
        self.H = torch.tensor(data.embeddings, dtype=torch.float64, device=device)
        P = data.probs
        rows = np.repeat(np.arange(data.m), data.support_sizes)
        self.rows = torch.as_tensor(rows, dtype=torch.long, device=device)
        self.cols = torch.as_tensor(P.indices.astype(np.int64), dtype=torch.long, device=device)
        # π̂_j p̂_{j,z} on the supports only: CE = -Σ coef · log_softmax(W h̄_j)_z.
        self.coef = torch.as_tensor(data.weights[rows] * P.data, dtype=torch.float64, device=device)
        # On the CPU: the SGD draws use a CPU generator, so a seed gives the same contexts on every device.
        self.weights = torch.tensor(data.weights, dtype=torch.float64)
        self.data = data
        self._pad = None

    def full(self, W: torch.Tensor) -> torch.Tensor:
        logq = torch.log_softmax(self.H @ W.T if self.bias is None else self.H @ W.T + self.bias, dim=1)  # (m, V)
        return -(self.coef * logq[self.rows, self.cols]).sum()

    def _padded(self):
        """Supports padded to S_max per context: token ids (m, S_max) and p̂ (m, S_max), 0 on padding."""
        if self._pad is None:
            data = self.data
            S = int(data.support_sizes.max())
            check_dense_size("padded supports for SGD", (data.m, S))
            cols = np.zeros((data.m, S), dtype=np.int64)
            vals = np.zeros((data.m, S))
            pos = np.arange(data.probs.nnz) - np.repeat(data.probs.indptr[:-1], data.support_sizes)
            rows = np.repeat(np.arange(data.m), data.support_sizes)
            cols[rows, pos] = data.probs.indices
            vals[rows, pos] = data.probs.data
            self._pad = (torch.as_tensor(cols, device=self.device),
                         torch.as_tensor(vals, dtype=torch.float64, device=self.device))
        return self._pad

    def batch(self, W: torch.Tensor, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Unbiased estimate of CE: contexts J_1..J_B i.i.d. ~ π̂, mean of -Σ_z p̂_{J,z} log q_{J,z}."""
        cols, vals = self._padded()
        idx = torch.multinomial(self.weights, batch_size, replacement=True, generator=generator).to(self.device)
        Z = self.H[idx] @ W.T
        logq = torch.log_softmax(Z if self.bias is None else Z + self.bias, dim=1)  # (B, V)
        return -(vals[idx] * logq.gather(1, cols[idx])).sum(dim=1).mean()


def train(data: NTPData, optimizer: str = "gd", lr: float | None = None, steps: int = 1000, *,
          init: Literal["lecun", "zeros"] | ArrayLike = "lecun", seed: int = 0,
          record_every: int | Literal["log"] = "log", batch_size: int | None = None,
          betas: tuple[float, float] = (0.9, 0.99), eps: float = 1e-8,
          reference: Reference | ReducedReference | Literal[False] | None = None,
          progress: bool = True, threads: int | None = None, device: str | torch.device | None = None,
          reduce_unseen: bool = False, expand: bool = False, deadline: float | None = None) -> Trace:
    """Train the decoder W (V, d) on CE of eq. (2) and record the paper's Fig. 4-5 metrics.

    Parameters
    ----------
    data : NTPData
        m contexts with embeddings (m, d), probabilities (m, V), weights π̂ (m,).
    optimizer : {"gd", "ngd", "adam", "sgd"}
        * ``gd``: full-batch W ← W - lr ∇CE(W) (Sec. 5, Fig. 4).
        * ``ngd``: normalized GD, W ← W - lr ∇CE / (‖∇CE‖_F + eps) (Fig. 5; the paper does not
          define the normalization, this is the usual one).
        * ``adam``: ``torch.optim.Adam(lr, betas, eps)`` on the full-batch loss (Fig. 5).
          (gd, ngd and sgd are plain in-place updates of W, no momentum.)
        * ``sgd``: SGD over distinct contexts (NeurIPS footnote 8): each step draws
          ``batch_size`` contexts i.i.d. with probability π̂_j (with replacement) and steps on the
          mean of their per-context CE -Σ_z p̂_{j,z} log q_{j,z}, an unbiased estimate of CE.
          Sampling uses a ``torch.Generator`` seeded with ``seed``.
    lr : float, optional
        Step size. Default: 1/(2L) with L = :func:`theory.smoothness` for gd/sgd (the proofs'
        condition, Lemma 3); 0.01 for ngd and adam (the paper's values). For gd/sgd a
        :class:`StepSizeWarning` is issued when lr > 2/L.
    steps : int
        Number of updates (≥ 0).
    init : "lecun" | "zeros" | array (V, d)
        Initial W: LeCun normal (entries N(0, 1/d), seeded by ``seed``), zeros, or a copy of
        the given array.
    seed : int
        Seed of the LeCun initialization and of the SGD sampling.
    record_every : "log" | int
        Recorded steps, see :func:`record_steps`; step k means W after k updates.
    batch_size : int, optional
        SGD batch size (contexts per step, default 1); only valid with ``optimizer="sgd"``.
    betas : (float, float)
        Adam's (β1, β2); the paper's (0.9, 0.99).
    eps : float
        Adam's ε and NGD's ε in the normalization.
    reference : None | False | Reference
        W*, W^mm and F as returned by :func:`embgeo.ntp.measure.metrics.compute_reference`. None: computed
        here; if the data are not compatible or not separable the alignment metrics are skipped
        and the reason is stored in ``trace.meta["reference"]``. False: skip them.
    progress : bool
        Show a tqdm progress bar (only when stderr is a terminal).
    threads : int, optional
        torch's intra-op thread count during training, and the BLAS threads of the numpy
        metrics (both restored afterwards); None (default): one, or ``embgeo --threads N``
        (:func:`embgeo.core.threads.default_threads`).
    device : "cpu" | "cuda" | "cuda:N", optional
        Where the updates run (:func:`embgeo.core.device.resolve_device`; None: "cpu", or the device of
        ``embgeo run --set device=...``). Still float64 on CUDA; the metrics are computed in numpy from W
        copied to the CPU at the recorded steps. An unavailable device is an :class:`InputError`.
    reduce_unseen : bool
        Train the seen rows and ONE shared row for the tokens that are never a next token (see Notes): exact when
        the init has equal rows for them, O(m (k + 1) d) per step instead of O(m V d). Default False.
    expand : bool
        With ``reduce_unseen``: also return the (V, d) W as ``trace.W`` (default False: ``trace.W`` is None and
        ``trace.W_reduced`` holds the k + 1 rows). Ignored without ``reduce_unseen``.
    deadline : float, optional
        A ``time.perf_counter()`` value: past it the run stops after the step in progress, records that step and
        sets ``trace.meta["time_limit_at_step"]`` (a time limit is a wall: ``embgeo ntp probe --train-head``).

    Returns
    -------
    Trace
        Rows with ``step``, ``ce`` (eq. 2), ``kl_gap`` (CE - 𝓗 computed as a KL),
        ``norm`` (‖W‖_F) and, with a reference, ``cos_mm`` = cos(W, W^mm),
        ``cos_corrected`` = cos(W - W*, W^mm), ``subspace_error`` = ‖P_F(W) - W*‖/‖W*‖
        (absolute if W* = 0) and ``margin`` = :func:`theory.ntp_margin` (NaN cosines at W = 0).
        ``trace.W`` is the final W (V, d); ``trace.meta`` holds the settings, ``smoothness``
        (L), ``entropy`` (𝓗) and ``reference`` (status). Ctrl-C stops the loop: the current step
        is recorded, ``trace.interrupted`` is set, a :class:`TrainingInterrupted` warning is
        issued and the partial trace is returned.

        With ``reduce_unseen``: the rows also hold the constrained-row cosines ``rows_cos_mm``,
        ``rows_cos_corrected`` and their bands ``_lo``/``_hi``
        (:func:`embgeo.ntp.measure.metrics.reduced_trace_metrics`), ``trace.W_reduced`` is the final R (k + 1, d),
        ``trace.reduced`` the
        :class:`~embgeo.ntp.measure.metrics.ReducedProblem` (its ``expand`` gives W), and ``trace.W`` the expanded (V,
        d) W only when ``expand`` (else None); ``meta["reduced"]`` has k and |U|. Divergence is judged as without it.

        Divergence stops the loop at the first recorded step where W or CE is no longer finite, or CE
        exceeds :data:`DIVERGENCE_FACTOR` × max(CE at step 0, log V): ``meta["diverged_at_step"]`` is
        that step, ``meta["diverged_reason"]`` says which, a :class:`StepSizeWarning` is issued and the
        trace ends at the last good record (:func:`embgeo.lab.registry.finished` makes it an error).

    Notes
    -----
    Reduced training (``reduce_unseen=True``). Let U be the tokens in no support (never a next token), k the others.
    If W's rows on U are equal, they stay equal under every optimizer here (:mod:`embgeo.ntp.measure.metrics`, (iii)):
    each unseen row v gets the gradient g_u = Σ_j π̂_j 𝕊_v(W h̄_j) h̄_j, the same for all v in U. So the run is carried
    by R = [seen rows; u]: the logits are R h̄_j plus log|U| on u (|U| equal terms e^{uᵀh̄} in the softmax's sum),
    autograd gives the seen rows' gradients and |U| g_u on u, which is divided by |U| (each copy's own gradient),
    and then

    * gd / sgd: R ← R − lr G (each row as its copies in W move);
    * ngd: R ← R − lr G / (‖∇CE(W)‖_F + eps) with the FULL gradient's norm ‖∇CE(W)‖² = Σ_seen ‖g_z‖² + |U| ‖g_u‖²;
    * adam: ``torch.optim.Adam`` on R with the per-row gradient G: Adam is per-coordinate, so every copy of u has
      the same moments and the same update.

    The init must have equal unseen rows: ``"zeros"`` or such an array (``"lecun"`` is refused). ``reference``:
    None / False / a :class:`Reference` (made reduced here) or a :class:`~embgeo.ntp.measure.metrics.ReducedReference`
    (W* and W^mm may be absent: their metrics are NaN). Cost per step O(m (k + 1) d) instead of O(m V d); memory
    (m, k + 1) logits, and no (V, d) matrix unless ``expand``. The trajectories equal those of the full run to
    rounding (tests/ntp/test_train_reduced.py).
    """
    check_ntp_data(data)
    if optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer: expected one of {OPTIMIZERS}, got {optimizer!r}")
    steps = check_positive_int("steps", steps, 0)
    seed = check_seed(seed)
    threads = check_threads(threads)
    dev = resolve_device(device)
    check_bool("progress", progress)
    schedule = record_steps(steps, record_every)
    if batch_size is not None and optimizer != "sgd":
        raise InputError(f"batch_size: only used by optimizer='sgd', got batch_size={batch_size!r} with "
                         f"optimizer={optimizer!r}")
    if optimizer == "sgd":
        batch_size = 1 if batch_size is None else check_positive_int("batch_size", batch_size)
    eps = check_float("eps", eps)
    betas = _check_betas(betas)
    L = theory.smoothness(data)
    lr = _default_lr(optimizer, L) if lr is None else check_float("lr", lr)
    if optimizer in ("gd", "sgd") and L > 0 and lr > 2.0 / L:
        warnings.warn(StepSizeWarning(
            f"lr={lr:.4g} exceeds 2/L = {2.0 / L:.4g} (L = smoothness(data) = {L:.4g}): above 2/L gradient descent "
            f"is not guaranteed to decrease the loss, and the theory assumes lr <= 1/(2L) = {0.5 / L:.4g} "
            "(Lemma 3). The paper's eta=0.5 (App. A.2) presumes an embedding scale it does not state; choose lr "
            "from L (lr=None) or rescale the embeddings."), stacklevel=2)
    check_bool("reduce_unseen", reduce_unseen)
    check_bool("expand", expand)
    problem = rref = None
    if reduce_unseen:
        problem = ReducedProblem(data)
        if isinstance(init, str) and init == "lecun":
            raise InputError("init: reduce_unseen=True needs equal rows for the never-next tokens: init='zeros' or a "
                             "(V, d) array with equal unseen rows, got 'lecun' (every row different)")
        W0, init_name = _initial_W(data, init, seed)
        if problem.n_unseen and not np.all(W0[problem.unseen] == W0[problem.unseen[0]]):
            raise InputError("init: reduce_unseen=True needs the rows of the never-next tokens to be equal, and the "
                             "given array's differ")
        W0 = problem.reduce(W0)
        check_dense_size("logits", (data.m, problem.rows), "train on a subset of contexts")
    else:
        W0, init_name = _initial_W(data, init, seed)
        check_dense_size("logits", (data.m, data.V), "train on a subset of contexts")

    if reduce_unseen and isinstance(reference, ReducedReference):
        ref, ref_status = None, "given (reduced)"
        rref = reference
    else:
        ref, ref_status = resolve_reference(data, reference)
        if reduce_unseen and ref is not None:
            rref = reduced_reference(problem, ref.w_star, ref.w_mm, ref.error_bound)
    meta = {"optimizer": optimizer, "lr": lr, "steps": steps, "seed": seed, "init": init_name,
            "record_every": record_every, "smoothness": L, "entropy": theory.entropy(data),
            "reference": ref_status, "threads": threads, "dtype": "float64", "device": device_label(dev)}
    if optimizer == "sgd":
        meta["batch_size"] = batch_size
    if optimizer == "adam":
        meta["betas"] = betas
    if optimizer in ("adam", "ngd"):
        meta["eps"] = eps
    if ref is not None:
        meta["w_mm_norm"] = float(np.linalg.norm(ref.w_mm))
        meta["w_star_norm"] = float(np.linalg.norm(ref.w_star))
        if meta["w_star_norm"] == 0:
            meta["subspace_error"] = "absolute (W* = 0)"
    elif rref is not None:
        meta["w_mm_norm"], meta["w_star_norm"] = rref.w_mm_norm, rref.w_star_norm
        if meta["w_star_norm"] == 0:
            meta["subspace_error"] = "absolute (W* = 0)"
    if reduce_unseen:
        meta["reduced"] = {"seen_tokens": problem.k, "unseen_tokens": problem.n_unseen, "rows": problem.rows}
    trace = Trace(meta)

    with limit_threads(threads):
        _run(trace, data, optimizer, lr, steps, W0, schedule, batch_size, betas, eps, seed, ref, progress, dev,
             problem, rref, deadline)
    if reduce_unseen:
        trace.reduced = problem
        trace.W_reduced = trace.W
        trace.W = problem.expand(trace.W) if expand and trace.W is not None else None
    return trace


def _check_betas(betas) -> tuple[float, float]:
    try:
        b1, b2 = (float(b) for b in betas)
    except (TypeError, ValueError):
        raise InputError(f"betas: expected two numbers in [0, 1), got {betas!r}") from None
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise InputError(f"betas: expected two numbers in [0, 1), got ({b1}, {b2})")
    return b1, b2


def _run(trace: Trace, data: NTPData, optimizer: str, lr: float, steps: int, W0: np.ndarray, schedule: list[int],
         batch_size: int | None, betas, eps: float, seed: int, ref: Reference | None, progress: bool,
         device: torch.device, problem: ReducedProblem | None = None, rref: ReducedReference | None = None,
         deadline: float | None = None) -> None:
    """The training loop (:func:`embgeo.core.loop.run_loop`, one unit = one update); fills ``trace``.

    With ``problem``, W is the reduced R (k + 1, d) and ``trace.W`` is R (expanded by :func:`train`)."""
    loss = _Loss(data, device, problem)
    W = torch.tensor(W0, dtype=torch.float64, device=device, requires_grad=True)
    shared = None  # reduced: the shared unseen row's index, |U|, and the multiplicity of each row
    if problem is not None and problem.n_unseen:
        shared = (problem.k, float(problem.n_unseen),
                  torch.tensor(problem.multiplicity, dtype=torch.float64, device=device)[:, None])
    # GD/SGD/NGD are written out (one in-place update); constructing a torch.optim optimizer
    # costs seconds on first use in a process, which only Adam pays.
    opt = torch.optim.Adam([W], lr=lr, betas=betas, eps=eps) if optimizer == "adam" else None
    gen = torch.Generator().manual_seed(seed) if optimizer == "sgd" else None
    to_record = set(schedule)
    ce_limit = []  # DIVERGENCE_FACTOR × max(CE at step 0, log V), set by the first record

    def step(_k: int) -> None:
        W.grad = None
        value = loss.batch(W, batch_size, gen) if optimizer == "sgd" else loss.full(W)
        value.backward()
        if shared is not None:  # autograd gives |U| g_u on the shared row: one copy's gradient is g_u
            with torch.no_grad():
                W.grad[shared[0]].div_(shared[1])
        if opt is not None:
            opt.step()
        elif optimizer == "ngd":
            with torch.no_grad():
                if shared is None:
                    norm = float(torch.linalg.vector_norm(W.grad))
                else:  # the full gradient's norm: |U| copies of the shared row's gradient
                    norm = float(torch.sqrt(torch.sum(shared[2] * W.grad**2)))
                W.sub_(W.grad, alpha=lr / (norm + eps))
        else:  # gd, sgd: W <- W - lr * gradient (of the full loss or of the batch estimate)
            with torch.no_grad():
                W.sub_(W.grad, alpha=lr)

    def record(done: int) -> dict | None:
        """The row after ``done`` updates; None (stop) if W is no longer finite (diverged)."""
        Wn = W.detach().cpu().numpy().copy()
        with np.errstate(over="ignore", invalid="ignore"):
            values = None if not np.all(np.isfinite(Wn)) else (
                trace_metrics(data, Wn, ref) if problem is None else reduced_trace_metrics(problem, Wn, rref))
        if values is None or not (np.isfinite(values["ce"]) and np.isfinite(values["norm"])):
            reason = "the iterate or the loss is no longer finite"
        elif ce_limit and values["ce"] > ce_limit[0]:
            reason = (f"the loss CE = {values['ce']:.3g} exceeds {DIVERGENCE_FACTOR:g} × max(CE at step 0, log V) "
                      f"= {ce_limit[0]:.3g}")
        else:
            reason = None
        if reason is not None:
            trace.meta["diverged_at_step"] = done
            trace.meta["diverged_reason"] = reason
            warnings.warn(StepSizeWarning(f"training diverged at step {done}: {reason} (lr={lr:g}); stopping"),
                          stacklevel=5)
            return None
        if not ce_limit:
            ce_limit.append(DIVERGENCE_FACTOR * max(values["ce"], float(np.log(data.V))))
        row = trace.record(done, **values)
        trace.W = Wn
        return {"kl_gap": row["kl_gap"], "norm": row["norm"]}

    def on_interrupt(done: int) -> None:
        trace.meta["interrupted_at_step"] = done
        if trace.last is None or trace.last["step"] != done:
            record(done)

    try:
        run_loop(trace, steps, step, record, record_at=to_record.__contains__, desc=f"train[{optimizer}]",
                 progress=progress, on_interrupt=on_interrupt, deadline=deadline)
    finally:
        if trace.W is None:  # e.g. interrupted while recording: keep the current W
            trace.W = W.detach().cpu().numpy().copy()


__all__ = ["OPTIMIZERS", "PAPER_LR", "StepSizeWarning", "TrainingInterrupted", "Reference", "compute_reference",
           "record_steps", "train"]
