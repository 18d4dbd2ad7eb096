"""Training the linear NTP decoder W on fixed context embeddings, and the regularization paths.

Paper: ``ntp-implicit-bias-neurips.txt`` Sec. 4 (regularization path, Theorem 1), Sec. 5
(GD, Lemma 2 and Theorem 2; SGD in footnote 8) and App. A (Figs. 4-5: GD, normalized GD and
Adam from a LeCun initialization). Only W (V, d) is trained; the logits of context j are
W h̄_j and the loss is CE of eq. (2).

* :func:`train`: GD / normalized GD / Adam / SGD over distinct contexts, in torch float64,
  recording a :class:`~embgeo.core.trace.Trace` of the paper's Fig. 4 metrics (loss gap as a
  KL, norm, alignment with W^mm, convergence of P_F(W) to W*, NTP-margin).
* :func:`regularization_path`: the norm-constrained minimizers Ŵ_B of Theorem 1.
* :func:`ridge_path`: the ridge minimizers Ŵ_λ (the NeurIPS "Contributions" wording).

Metrics are computed in numpy float64 with :mod:`embgeo.ntp.theory` from the current W.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from scipy.optimize import minimize
from scipy.sparse.linalg import LinearOperator, cg
from tqdm.auto import tqdm

from embgeo.core.threads import limit_threads
from embgeo.core.trace import Trace
from embgeo.core.validate import as_float_array, check_dense_size, check_positive_int, make_rng
from embgeo.errors import InputError, NotCompatibleError, NotSeparableError, ShapeError, SolverError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData

OPTIMIZERS = ("gd", "ngd", "adam", "sgd")
#: The paper's step sizes for normalized GD and Adam (App. A, Fig. 5).
PAPER_LR = {"ngd": 0.01, "adam": 0.01}


class StepSizeWarning(UserWarning):
    """The step size is outside the range where the theory guarantees descent."""


class TrainingInterrupted(UserWarning):
    """Training was stopped by Ctrl-C; the partial trace was returned."""


class ConvergenceWarning(UserWarning):
    """A path solver stopped at ``max_iter`` before reaching its tolerance."""


# -- reference solutions -------------------------------------------------------------------------

def compute_reference(data: NTPData) -> dict:
    """The theory objects the training metrics compare against.

    Returns ``{"w_star": W* (V, d), "w_mm": W^mm (V, d), "F": Subspace}`` (Def. 1, Def. 3,
    eq. 5). Raises :class:`NotCompatibleError` / :class:`NotSeparableError` when W* / W^mm do
    not exist, :class:`InputError` when every support is full (no separability constraints).
    Compute it once and pass it as ``reference=`` to several :func:`train` calls on the same data.
    """
    _check_data(data)
    F = theory.subspace(data)
    comp = theory.is_compatible(data, F)
    if not comp:
        raise NotCompatibleError(f"the data are not NTP_H-compatible (Def. 1): the log-odds equations (4) have "
                                 f"residual {comp.residual:.3g} > {comp.tolerance:.3g}, so W* does not exist")
    svm = theory.ntp_svm(data, subspace_=F)
    if svm.status != "optimal":
        raise NotSeparableError("the data are not NTP-separable (Def. 2), so W^mm does not exist")
    return {"w_star": comp.W, "w_mm": svm.W, "F": F}


def _resolve_reference(data: NTPData, reference) -> tuple[dict | None, str]:
    """(reference dict or None, status string for meta)."""
    if reference is False:
        return None, "skipped: reference=False"
    if reference is None:
        try:
            return compute_reference(data), "computed"
        except InputError as exc:  # not compatible / not separable / full supports: a property of the data
            return None, f"skipped: {exc}"
        except SolverError as exc:  # a numerical failure: say so loudly, but let training go on
            warnings.warn(f"reference solutions failed ({exc}); training without alignment metrics", stacklevel=3)
            return None, f"skipped: {exc}"
    if not isinstance(reference, dict):
        raise InputError(f"reference: expected None, False or a dict with keys 'w_star', 'w_mm', 'F', "
                         f"got {type(reference).__name__}")
    missing = {"w_star", "w_mm", "F"} - set(reference)
    if missing:
        raise InputError(f"reference: missing key(s) {sorted(missing)}; expected 'w_star', 'w_mm' and 'F'")
    out = {}
    for key in ("w_star", "w_mm"):
        arr = as_float_array(f"reference['{key}']", reference[key], ndim=2)
        if arr.shape != (data.V, data.d):
            raise ShapeError(f"reference['{key}']: expected shape (V, d) = ({data.V}, {data.d}), got {arr.shape}")
        out[key] = arr
    F = reference["F"]
    if not isinstance(F, theory.Subspace):
        raise InputError(f"reference['F']: expected an embgeo.ntp.theory.Subspace, got {type(F).__name__}")
    if (F.data.m, F.data.V, F.data.d) != (data.m, data.V, data.d):
        raise ShapeError(f"reference['F']: built for data with (m, V, d) = ({F.data.m}, {F.data.V}, {F.data.d}), "
                         f"expected ({data.m}, {data.V}, {data.d})")
    if not np.any(out["w_mm"]):
        raise InputError("reference['w_mm']: is zero; expected the NTP-SVM solution W^mm")
    out["F"] = F
    return out, "given"


def _cos(A: np.ndarray, B: np.ndarray) -> float:
    """Frobenius cosine ⟨A, B⟩ / (‖A‖ ‖B‖); NaN when either is zero."""
    na, nb = np.linalg.norm(A), np.linalg.norm(B)
    if na == 0 or nb == 0:
        return math.nan
    return float(np.sum(A * B) / (na * nb))


def _reference_metrics(data: NTPData, W: np.ndarray, ref: dict) -> dict:
    """cos_mm, cos_corrected, subspace_error, margin of W against the reference."""
    Ws, Wmm, F = ref["w_star"], ref["w_mm"], ref["F"]
    ns = np.linalg.norm(Ws)
    err = np.linalg.norm(F.project(W) - Ws)
    return {
        "cos_mm": _cos(W, Wmm),
        "cos_corrected": _cos(W - Ws, Wmm),
        "subspace_error": float(err / ns) if ns > 0 else float(err),
        "margin": theory.ntp_margin(data, W, F),
    }


def _metrics(data: NTPData, W: np.ndarray, ref: dict | None) -> dict:
    out = {"ce": theory.cross_entropy(data, W), "kl_gap": theory.kl_gap(data, W),
           "norm": float(np.linalg.norm(W))}
    if ref is not None:
        out.update(_reference_metrics(data, W, ref))
    return out


# -- train -----------------------------------------------------------------------------------------

def record_steps(steps: int, record_every="log") -> list[int]:
    """The steps :func:`train` records, sorted: always 0 and ``steps``.

    ``"log"``: 0, 1, ..., 9, 10, 20, ..., 90, 100, 200, ... (the 1-9 × 10^k grid, ~10 points per
    decade); an int k: 0, k, 2k, ... .
    """
    steps = check_positive_int("steps", steps, 0)
    if isinstance(record_every, str):
        if record_every != "log":
            raise InputError(f"record_every: expected 'log' or a positive integer, got {record_every!r}")
        grid = {0, steps}
        decade = 1
        while decade <= steps:
            grid.update(k * decade for k in range(1, 10) if k * decade <= steps)
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


def _check_data(data) -> None:
    if not isinstance(data, NTPData):
        raise InputError(f"data: expected an embgeo.ntp.NTPData, got {type(data).__name__}")


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed: expected a non-negative integer (seeds are explicit), got {seed!r}")
    return int(seed)


def _check_positive_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name}: expected a positive finite number, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{name}: expected a positive finite number, got {value}")
    return value


def _default_lr(optimizer: str, L: float) -> float:
    if optimizer in PAPER_LR:
        return PAPER_LR[optimizer]
    if L <= 0:
        raise InputError("lr: cannot default to 1/(2L) because the smoothness constant L is 0 (all embeddings "
                         "are zero, the loss is constant); pass lr explicitly")
    return 1.0 / (2.0 * L)


class _Loss:
    """CE of eq. (2) in torch float64: full batch, or the mean per-context CE of a batch of contexts."""

    def __init__(self, data: NTPData):
        self.H = torch.tensor(data.embeddings, dtype=torch.float64)
        P = data.probs
        rows = np.repeat(np.arange(data.m), data.support_sizes)
        self.rows = torch.as_tensor(rows, dtype=torch.long)
        self.cols = torch.as_tensor(P.indices.astype(np.int64), dtype=torch.long)
        # π̂_j p̂_{j,z} on the supports only: CE = -Σ coef · log_softmax(W h̄_j)_z.
        self.coef = torch.as_tensor(data.weights[rows] * P.data, dtype=torch.float64)
        self.weights = torch.tensor(data.weights, dtype=torch.float64)
        self.data = data
        self._pad = None

    def full(self, W: torch.Tensor) -> torch.Tensor:
        logq = torch.log_softmax(self.H @ W.T, dim=1)  # (m, V)
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
            self._pad = (torch.as_tensor(cols), torch.as_tensor(vals, dtype=torch.float64))
        return self._pad

    def batch(self, W: torch.Tensor, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Unbiased estimate of CE: contexts J_1..J_B i.i.d. ~ π̂, mean of -Σ_z p̂_{J,z} log q_{J,z}."""
        cols, vals = self._padded()
        idx = torch.multinomial(self.weights, batch_size, replacement=True, generator=generator)
        logq = torch.log_softmax(self.H[idx] @ W.T, dim=1)  # (B, V)
        return -(vals[idx] * logq.gather(1, cols[idx])).sum(dim=1).mean()


def train(data: NTPData, optimizer: str = "gd", lr: float | None = None, steps: int = 1000, *,
          init="lecun", seed: int = 0, record_every="log", batch_size: int | None = None,
          betas: tuple[float, float] = (0.9, 0.99), eps: float = 1e-8, reference=None,
          progress: bool = True, threads: int = 1) -> Trace:
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
    reference : None | False | dict
        ``{"w_star", "w_mm", "F"}`` as returned by :func:`compute_reference`. None: computed
        here; if the data are not compatible or not separable the alignment metrics are skipped
        and the reason is stored in ``trace.meta["reference"]``. False: skip them.
    progress : bool
        Show a tqdm progress bar (only when stderr is a terminal).
    threads : int
        torch's intra-op thread count during training, and the BLAS threads of the numpy
        metrics (both restored afterwards).

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
    """
    _check_data(data)
    if optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer: expected one of {OPTIMIZERS}, got {optimizer!r}")
    steps = check_positive_int("steps", steps, 0)
    seed = _check_seed(seed)
    threads = check_positive_int("threads", threads)
    if not isinstance(progress, bool):
        raise InputError(f"progress: expected True or False, got {progress!r}")
    schedule = record_steps(steps, record_every)
    if batch_size is not None and optimizer != "sgd":
        raise InputError(f"batch_size: only used by optimizer='sgd', got batch_size={batch_size!r} with "
                         f"optimizer={optimizer!r}")
    if optimizer == "sgd":
        batch_size = 1 if batch_size is None else check_positive_int("batch_size", batch_size)
    eps = _check_positive_float("eps", eps)
    betas = _check_betas(betas)
    L = theory.smoothness(data)
    lr = _default_lr(optimizer, L) if lr is None else _check_positive_float("lr", lr)
    if optimizer in ("gd", "sgd") and L > 0 and lr > 2.0 / L:
        warnings.warn(StepSizeWarning(
            f"lr={lr:.4g} exceeds 2/L = {2.0 / L:.4g} (L = smoothness(data) = {L:.4g}): above 2/L gradient descent "
            f"is not guaranteed to decrease the loss, and the theory assumes lr <= 1/(2L) = {0.5 / L:.4g} "
            "(Lemma 3). The paper's eta=0.5 presumes an embedding scale it does not state (digest §8); choose lr "
            "from L (lr=None) or rescale the embeddings."), stacklevel=2)
    W0, init_name = _initial_W(data, init, seed)
    check_dense_size("logits", (data.m, data.V), "train on a subset of contexts")

    ref, ref_status = _resolve_reference(data, reference)
    meta = {"optimizer": optimizer, "lr": lr, "steps": steps, "seed": seed, "init": init_name,
            "record_every": record_every, "smoothness": L, "entropy": theory.entropy(data),
            "reference": ref_status, "threads": threads, "dtype": "float64"}
    if optimizer == "sgd":
        meta["batch_size"] = batch_size
    if optimizer == "adam":
        meta["betas"] = betas
    if optimizer in ("adam", "ngd"):
        meta["eps"] = eps
    if ref is not None:
        meta["w_mm_norm"] = float(np.linalg.norm(ref["w_mm"]))
        meta["w_star_norm"] = float(np.linalg.norm(ref["w_star"]))
        if meta["w_star_norm"] == 0:
            meta["subspace_error"] = "absolute (W* = 0)"
    trace = Trace(meta)

    with limit_threads(threads):
        _run(trace, data, optimizer, lr, steps, W0, schedule, batch_size, betas, eps, seed, ref, progress)
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
         batch_size: int | None, betas, eps: float, seed: int, ref: dict | None, progress: bool) -> None:
    """The training loop; fills ``trace`` in place."""
    loss = _Loss(data)
    W = torch.tensor(W0, dtype=torch.float64, requires_grad=True)
    # GD/SGD/NGD are written out (one in-place update); constructing a torch.optim optimizer
    # costs seconds on first use in a process, which only Adam pays.
    opt = torch.optim.Adam([W], lr=lr, betas=betas, eps=eps) if optimizer == "adam" else None
    gen = torch.Generator().manual_seed(seed) if optimizer == "sgd" else None
    to_record = set(schedule)

    def record(step: int) -> bool:
        """Record step; False if W is no longer finite (diverged)."""
        Wn = W.detach().numpy().copy()
        if not np.all(np.isfinite(Wn)):
            trace.meta["diverged_at_step"] = step
            warnings.warn(StepSizeWarning(f"training diverged: W has non-finite entries at step {step} "
                                          f"(lr={lr:g}); stopping"), stacklevel=4)
            return False
        row = trace.record(step, **_metrics(data, Wn, ref))
        trace.W = Wn
        bar.set_postfix(kl_gap=f"{row['kl_gap']:.3e}", norm=f"{row['norm']:.3g}", refresh=False)
        return True

    done = 0
    bar = tqdm(total=steps, desc=f"train[{optimizer}]", disable=None if progress else True, leave=False)
    try:
        try:
            for k in range(steps):
                if k in to_record and not record(k):
                    return
                W.grad = None
                value = loss.batch(W, batch_size, gen) if optimizer == "sgd" else loss.full(W)
                value.backward()
                if opt is not None:
                    opt.step()
                elif optimizer == "ngd":
                    with torch.no_grad():
                        W.sub_(W.grad, alpha=lr / (float(torch.linalg.vector_norm(W.grad)) + eps))
                else:  # gd, sgd: W <- W - lr * gradient (of the full loss or of the batch estimate)
                    with torch.no_grad():
                        W.sub_(W.grad, alpha=lr)
                done = k + 1
                bar.update(1)
            record(steps)
        except KeyboardInterrupt:
            trace.interrupted = True
            trace.meta["interrupted_at_step"] = done
            if trace.last is None or trace.last["step"] != done:
                record(done)
            warnings.warn(TrainingInterrupted(f"training interrupted by Ctrl-C at step {done} of {steps}; "
                                              "returning the partial trace (trace.interrupted is True)"),
                          stacklevel=3)
    finally:
        bar.close()
        if trace.W is None:  # e.g. interrupted while recording: keep the current W
            trace.W = W.detach().numpy().copy()


# -- regularization paths ------------------------------------------------------------------------

@dataclass
class PathPoint:
    """One point of a regularization path.

    Attributes
    ----------
    param : float
        The norm bound B (:func:`regularization_path`) or the ridge weight λ (:func:`ridge_path`).
    W : (V, d) array
        The minimizer.
    norm : float
        ‖W‖_F.
    ce, kl_gap : float
        CE(W) (eq. 2) and CE(W) - 𝓗 computed as a KL.
    cos_mm, cos_corrected, subspace_error, margin : float
        As in :func:`train` (NaN without a reference).
    iterations : int
        Solver iterations for this point (after the warm start).
    residual : float
        Convergence measure: the projected-gradient norm L‖W - Proj_B(W - ∇CE(W)/L)‖_F for the
        norm path, ‖∇CE(W) + λW‖_F for the ridge path.
    converged : bool
        Whether the solver met its tolerance.
    """

    param: float
    W: np.ndarray = field(repr=False)
    norm: float
    ce: float
    kl_gap: float
    cos_mm: float
    cos_corrected: float
    subspace_error: float
    margin: float
    iterations: int
    residual: float
    converged: bool


@dataclass
class RegPath:
    """A regularization path: the list of :class:`PathPoint` plus run facts.

    ``kind`` is ``"norm"`` (param = B) or ``"ridge"`` (param = λ). Iterating, ``len`` and
    indexing act on ``points``; :meth:`to_frame` gives one row per point without the W's.
    """

    kind: str
    points: list[PathPoint]
    meta: dict

    def __len__(self) -> int:
        return len(self.points)

    def __iter__(self) -> Iterator[PathPoint]:
        return iter(self.points)

    def __getitem__(self, i) -> PathPoint:
        return self.points[i]

    @property
    def Ws(self) -> list[np.ndarray]:
        """The minimizers, each (V, d)."""
        return [p.W for p in self.points]

    def column(self, name: str) -> np.ndarray:
        """One field over the path as a 1-D array, e.g. ``path.column("cos_mm")``."""
        if name == "W" or name not in PathPoint.__dataclass_fields__:
            raise InputError(f"name: expected a scalar field of PathPoint, got {name!r}")
        return np.array([getattr(p, name) for p in self.points])

    def to_frame(self) -> pd.DataFrame:
        """One row per point; the first column is ``B`` or ``lambda``."""
        key = "B" if self.kind == "norm" else "lambda"
        names = [f for f in PathPoint.__dataclass_fields__ if f not in ("param", "W")]
        return pd.DataFrame({key: self.column("param"), **{n: self.column(n) for n in names}})


def _check_grid(name: str, values, increasing: bool) -> np.ndarray:
    grid = as_float_array(name, values, ndim=1)
    if grid.size == 0:
        raise InputError(f"{name}: expected at least one value")
    if np.any(grid <= 0):
        raise InputError(f"{name}: expected positive values, got {grid[grid <= 0][0]}")
    diffs = np.diff(grid)
    if increasing and np.any(diffs <= 0):
        raise InputError(f"{name}: expected a strictly increasing grid (warm starts go from small to large B)")
    if not increasing and np.any(diffs >= 0):
        raise InputError(f"{name}: expected a strictly decreasing grid (warm starts go from large to small λ), "
                         "e.g. numpy.logspace(-1, -8, 8)")
    return grid


def _path_point(data: NTPData, param: float, W: np.ndarray, ref: dict | None, iterations: int, residual: float,
                converged: bool) -> PathPoint:
    nan = math.nan
    rm = _reference_metrics(data, W, ref) if ref is not None else dict.fromkeys(
        ("cos_mm", "cos_corrected", "subspace_error", "margin"), nan)
    return PathPoint(float(param), W, float(np.linalg.norm(W)), theory.cross_entropy(data, W),
                     theory.kl_gap(data, W), rm["cos_mm"], rm["cos_corrected"], rm["subspace_error"], rm["margin"],
                     int(iterations), float(residual), bool(converged))


def _project_ball(W: np.ndarray, B: float) -> np.ndarray:
    n = np.linalg.norm(W)
    return W * (B / n) if n > B else W


def _fista_ball(data: NTPData, x: np.ndarray, B: float, L: float, tol: float,
                max_iter: int) -> tuple[np.ndarray, int, float, bool]:
    """min CE over ‖W‖_F ≤ B from x: FISTA (step 1/L) with adaptive restart (O'Donoghue & Candès).

    Returns (W, iterations, residual, converged) with residual the projected-gradient norm
    L‖W - Proj_B(W - ∇CE(W)/L)‖_F at the returned W.
    """
    def grad_map_norm(X):
        return L * float(np.linalg.norm(X - _project_ball(X - theory.gradient(data, X) / L, B)))

    x = x.copy()
    y, t, it = x.copy(), 1.0, 0
    for it in range(1, max_iter + 1):
        x_new = _project_ball(y - theory.gradient(data, y) / L, B)
        if L * np.linalg.norm(y - x_new) <= tol:  # the gradient map at y is free; confirm at x_new
            residual = grad_map_norm(x_new)
            if residual <= tol:
                return x_new, it, residual, True
        if np.sum((y - x_new) * (x_new - x)) > 0:  # momentum points uphill: restart
            y, t = x_new, 1.0
        else:
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            y = x_new + ((t - 1.0) / t_next) * (x_new - x)
            t = t_next
        x = x_new
    residual = grad_map_norm(x)
    return x, it, residual, residual <= tol


def regularization_path(data: NTPData, norms, *, tol: float = 1e-10, max_iter: int = 20000,
                        reference=None, threads: int = 1) -> RegPath:
    """The norm-constrained minimizers Ŵ_B = argmin_{‖W‖_F ≤ B} CE(W) of Theorem 1 (eq. 8).

    Each Ŵ_B is computed by accelerated projected gradient (FISTA, step 1/L with
    L = :func:`theory.smoothness`, projection onto the Frobenius ball, adaptive restart),
    warm-started from the previous B's solution scaled to the new radius. Theorem 1: under
    compatibility and separability ‖Ŵ_B‖ = B (the infimum of CE is not attained, so no
    minimizer is interior), cos(Ŵ_B, W^mm) → 1 and P_F(Ŵ_B) → W* as B → ∞.

    Parameters
    ----------
    norms : 1-D array of B > 0, strictly increasing.
    tol : float
        Stop when the projected-gradient norm L‖W - Proj_B(W - ∇CE(W)/L)‖_F ≤ tol.
    max_iter : int
        Iterations per B; a :class:`ConvergenceWarning` is issued if reached.
    reference : None | False | dict
        As in :func:`train` (for cos_mm, cos_corrected, subspace_error, margin).
    threads : int
        BLAS threads (through threadpoolctl).

    Returns
    -------
    RegPath with ``kind="norm"``, one :class:`PathPoint` per B.
    """
    _check_data(data)
    grid = _check_grid("norms", norms, increasing=True)
    tol = _check_positive_float("tol", tol)
    max_iter = check_positive_int("max_iter", max_iter)
    threads = check_positive_int("threads", threads)
    L = theory.smoothness(data)
    if L <= 0:
        raise InputError("data: the smoothness constant L is 0 (all embeddings are zero); the loss is constant")
    ref, status = _resolve_reference(data, reference)
    points, W = [], np.zeros((data.V, data.d))
    unconverged = []
    with limit_threads(threads):
        for B in grid:
            n = np.linalg.norm(W)
            W, iterations, residual, converged = _fista_ball(data, W * (B / n) if n > 0 else W, B, L, tol, max_iter)
            if not converged:
                unconverged.append(float(B))
            points.append(_path_point(data, B, W, ref, iterations, residual, converged))
    if unconverged:
        warnings.warn(ConvergenceWarning(f"regularization_path: projected-gradient norm above tol={tol:g} after "
                                         f"max_iter={max_iter} iterations at B = {unconverged}"), stacklevel=2)
    meta = {"method": "FISTA with adaptive restart, step 1/L, projection onto the Frobenius ball",
            "smoothness": L, "tol": tol, "max_iter": max_iter, "reference": status,
            "entropy": theory.entropy(data)}
    return RegPath("norm", points, meta)


def _ridge_hessian(data: NTPData, W: np.ndarray, lam: float) -> LinearOperator:
    """∇²(CE + λ/2‖·‖²) at W as an operator on vec(W) (row-major): U ↦ Σ_j π̂_j J_j(U h̄_j) h̄_jᵀ + λU.

    J_j = diag(s_j) - s_j s_jᵀ is the softmax Jacobian at the logits of context j.
    """
    V, d, H, pi = data.V, data.d, data.embeddings, data.weights
    S = np.exp(theory.log_probs(data, W))  # (m, V)

    def matvec(u):
        A = H @ u.reshape(V, d).T  # directional logits (m, V)
        SA = S * A
        JA = SA - S * SA.sum(axis=1, keepdims=True)
        return ((JA * pi[:, None]).T @ H).ravel() + lam * np.ravel(u)

    return LinearOperator((V * d, V * d), matvec=matvec, dtype=np.float64)


def _newton_polish(data: NTPData, W: np.ndarray, lam: float, gtol: float, max_steps: int = 50,
                   max_cg: int = 10_000) -> tuple[np.ndarray, int]:
    """Newton-CG on ∇CE(W) + λW = 0 with backtracking on ‖gradient‖ (no function values).

    Near the optimum the loss value no longer resolves the remaining decrease (it is below the
    rounding of CE), so a line search on f stalls around ‖∇‖ ~ 1e-9; the gradient is still
    accurate, and the Newton direction p (H p = -g) decreases ‖g‖² for small steps. Returns the
    polished W and the number of Newton steps taken.
    """
    def grad(X):
        return theory.gradient(data, X) + lam * X

    g = grad(W)
    steps = 0
    for steps in range(1, max_steps + 1):
        if float(np.max(np.abs(g))) <= gtol:
            return W, steps - 1
        p, _ = cg(_ridge_hessian(data, W, lam), -g.ravel(), rtol=1e-3, maxiter=max_cg)
        p = p.reshape(W.shape)
        gnorm, alpha = np.linalg.norm(g), 1.0
        for _ in range(30):  # backtrack until the gradient norm decreases
            W_new = W + alpha * p
            g_new = grad(W_new)
            if np.linalg.norm(g_new) < gnorm:
                break
            alpha *= 0.5
        else:
            return W, steps - 1  # no decrease possible at this precision
        W, g = W_new, g_new
    return W, steps


def ridge_path(data: NTPData, lambdas, *, gtol: float = 1e-10, max_iter: int = 50000, reference=None,
               threads: int = 1) -> RegPath:
    """The ridge minimizers Ŵ_λ = argmin_W CE(W) + λ/2 ‖W‖_F² along a decreasing λ grid.

    The NeurIPS "Contributions" paragraph states Theorem 1 for Ŵ_λ as λ → 0; it coincides with
    the norm-constrained path by Lagrangian duality. Each point is computed by
    ``scipy.optimize.minimize(method="L-BFGS-B", jac=True)`` on vec(W) in float64, warm-started
    from the previous λ's solution (the first from W = 0), then polished by a few Newton-CG
    steps. The objective value is evaluated as kl_gap(W) + λ/2‖W‖² (CE minus the constant 𝓗,
    computed as a KL, so the line search resolves decreases far below 𝓗's rounding); the
    gradient is :func:`theory.gradient` + λW.

    Why the polish: a line search needs f to resolve the decrease, which stops at
    ‖∇‖ ~ sqrt(eps · f · curvature) ~ 1e-9, above the default ``gtol``. L-BFGS-B therefore runs
    to max(gtol, min(1e-5, sqrt(gtol))) and Newton-CG (Hessian-vector products, backtracking on
    the gradient norm, which needs no function values) finishes to ``gtol`` in a few steps.

    Parameters
    ----------
    lambdas : 1-D array of λ > 0, strictly decreasing (e.g. ``numpy.logspace(-1, -8, 8)``).
    gtol : float
        Tolerance on max |∇CE(W) + λW| (L-BFGS-B's criterion); ``converged`` uses the same test.
    max_iter : int
        L-BFGS-B iterations per λ (small λ needs thousands, digest §8); a
        :class:`ConvergenceWarning` is issued if the tolerance is not met.
    reference : None | False | dict
        As in :func:`train`.
    threads : int
        BLAS threads (through threadpoolctl).

    Returns
    -------
    RegPath with ``kind="ridge"``, one :class:`PathPoint` per λ; ``residual`` is ‖∇CE(W) + λW‖_F
    and ``iterations`` counts L-BFGS-B iterations plus Newton steps.
    """
    _check_data(data)
    grid = _check_grid("lambdas", lambdas, increasing=False)
    gtol = _check_positive_float("gtol", gtol)
    max_iter = check_positive_int("max_iter", max_iter)
    threads = check_positive_int("threads", threads)
    ref, status = _resolve_reference(data, reference)
    shape = (data.V, data.d)
    stage1_gtol = max(gtol, min(1e-5, math.sqrt(gtol)))
    points, w = [], np.zeros(data.V * data.d)
    unconverged = []
    with limit_threads(threads):
        for lam in grid:
            def fun(v, lam=lam):
                W = v.reshape(shape)
                return (theory.kl_gap(data, W) + 0.5 * lam * float(v @ v),
                        theory.gradient(data, W).ravel() + lam * v)

            res = minimize(fun, w, jac=True, method="L-BFGS-B",
                           options={"gtol": stage1_gtol, "ftol": 0.0, "maxiter": max_iter, "maxfun": 2 * max_iter})
            W, newton_steps = _newton_polish(data, res.x.reshape(shape).copy(), lam, gtol)
            g = theory.gradient(data, W) + lam * W
            converged = float(np.max(np.abs(g))) <= gtol
            if not converged:
                unconverged.append((float(lam), float(np.max(np.abs(g))), str(res.message)))
            w = W.ravel().copy()
            points.append(_path_point(data, lam, W, ref, res.nit + newton_steps, float(np.linalg.norm(g)),
                                      converged))
    if unconverged:
        warnings.warn(ConvergenceWarning(f"ridge_path: max |gradient| above gtol={gtol:g} at (λ, max|grad|, "
                                         f"L-BFGS-B message) = {unconverged}"), stacklevel=2)
    meta = {"method": "L-BFGS-B (scipy) + Newton-CG polish, warm starts along decreasing λ", "gtol": gtol,
            "max_iter": max_iter, "reference": status, "entropy": theory.entropy(data)}
    return RegPath("ridge", points, meta)
