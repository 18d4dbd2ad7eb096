"""The NTP paper's objects for one set of contexts: the one analysis behind ``ntp analyze`` and ``ntp probe``.

:func:`analyze` takes the embeddings H = ``data.embeddings`` (m, d) with p̂ and π̂ (Sec. 2) and, when a model is
measured, its head W (V, d). It plans the memory first (and refuses what cannot fit), then computes, stage by
stage (:data:`STAGES`): 𝓗 and, with W, CE(W) − 𝓗 (eq. 2); F (eq. 5), W* or the certificate that it does not exist
(Def. 1) and dim F (or its bounds); with W, the logits' structure and P_F(W); separability (Def. 2) with its
certificate either way; W^mm (Def. 3); with W, where W sits relative to W* and W^mm (Thm. 2). It returns one
:class:`Analysis`, which prints nothing and writes itself (:meth:`Analysis.to_dict`, :meth:`Analysis.save`).
``ntp probe`` (:mod:`embgeo.ntp.analysis.probe`) is contexts of a text + a model's hidden states + this analysis.

A stage that cannot decide within its time or memory leaves its object None and says why in
:attr:`Analysis.errors`, never by raising: the analysis always comes back unless the sizes are refused up front
(:class:`~embgeo.errors.TooLargeError`, before any solver). Inputs are checked here, once, at the public boundary.
numpy/scipy only (no torch: ``ntp analyze`` starts light).
"""

from __future__ import annotations

import json
import math
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from os import PathLike
from pathlib import Path

import numpy as np

from embgeo.core import validate
from embgeo.core.deadline import time_left
from embgeo.core.status import Status
from embgeo.core.validate import as_float_array, check_float
from embgeo.errors import InputError, ShapeError, SolverError, TooLargeError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData
from embgeo.ntp.measure import alignment as _align
from embgeo.ntp.measure.geometry import logit_structure_factored, row_norms_frequency
from embgeo.ntp.solvers.outcome import ProgressFn
from embgeo.ntp.solvers.svm_alm import HOLD_SET
from embgeo.ntp.theory.separability import check_separability_method

#: The stages of :func:`analyze`, in order, as passed to its ``report`` and ``started`` callbacks.
STAGES = ("loss", "memory", "compatibility", "geometry", "separability", "svm", "alignment")

#: The stages that need a model's head W: without one they are not run. Without W there is no candidate to try
#: first, so the NTP-SVM decides separability itself (its cheap routes, then its solver), in stage "svm".
MODEL_STAGES = ("geometry", "separability", "alignment")

#: Why separability has no verdict when every support is the whole vocabulary.
NO_CONSTRAINTS = "every support is the whole vocabulary: no separability constraints (6b)"


def gib(nbytes: float) -> str:
    """``nbytes`` in GiB with two decimals, as the analysis writes sizes."""
    return f"{nbytes / 1024**3:.2f} GiB"


def check_memory(V: int, d: int, need: float, what: str, advice: str) -> int:
    """The one memory guard of an analysis: refuse a V × d answer (W*, W^mm, a certificate) above the dense budget,
    or ``need`` bytes (``what``) above what this process can still allocate; returns those bytes (the room)."""
    budget, room = validate.DENSE_BUDGET_BYTES, validate.available_memory_bytes()
    one_w = 8 * V * d
    if one_w > budget:  # every answer is one such matrix: refuse up front
        raise TooLargeError(f"W* and W^mm are V × d = {V} × {d} float64 matrices of {gib(one_w)} each (budget "
                            f"{gib(budget)}): {advice}")
    if need > room:  # under a memory limit (ulimit -v, a container): refuse rather than be killed
        raise TooLargeError(f"{what} need {gib(need)} but this process can allocate only {gib(room)} more (free "
                            f"memory or the address-space limit): {advice}")
    return room


@dataclass
class MemoryPlan:
    """The memory an analysis will take, in bytes, planned before any solver (:func:`memory_plan`).

    ``process``: resident before the solvers; ``equality_system``: F's exact system, ``equality_system_built``:
    whether it fits the dense budget and the memory left (else dim F is bounded and W* comes from certificates
    only); ``svm``: the NTP-SVM's bound with the answers; ``parts``:
    :func:`~embgeo.ntp.theory.subspace.estimate_memory`; ``available``: what the process can still allocate;
    ``peak_estimate``: for the stages that ran; ``peak_measured``: the process's peak once done (None before).
    """

    process: int
    equality_system: int
    equality_system_built: bool
    svm: int
    parts: dict
    available: int
    peak_estimate: int
    peak_measured: int | None = None

    def to_dict(self) -> dict:
        """The plan without its parts (summary.json has them apart, as ``memory_estimate_bytes``)."""
        out = asdict(self)
        out.pop("parts")
        return out


def builds_equality_system(system: float, room: float = math.inf) -> bool:
    """Whether the analysis builds F's exact equality system of ``system`` bytes: within the dense budget
    (``validate.DENSE_BUDGET_BYTES``, read at call time) and ``room``, what the process can still allocate; else dim F
    is bounded and W* comes from certificates only (:func:`memory_plan`; the probe's estimate,
    :func:`~embgeo.ntp.analysis.probe.memory_estimate`, leaves an unbuilt system out of its total)."""
    return system <= min(validate.DENSE_BUDGET_BYTES, room)


#: V × d float64 arrays an analysis with a model's head holds beside W and the answers: P_F(W) (from before the solvers
#: to the alignment) and one difference in the alignment (W − W*). Measured on Gemma 3 (V = 262,144, d = 640, issue 38):
#: six V × d arrays alive at the alignment's peak — W, W*, the certificate, W^mm and these two.
HEAD_WORK_COPIES = 2


def head_work_bytes(V: int, d: int) -> int:
    """Bytes of the :data:`HEAD_WORK_COPIES` V × d float64 arrays (the probe's estimate and :func:`memory_plan`)."""
    return HEAD_WORK_COPIES * 8 * V * d


def memory_plan(data: NTPData, F: theory.Subspace, head: bool = False) -> MemoryPlan:
    """The memory the analysis of ``data`` will take; refuses what cannot fit before any solver (:func:`check_memory`).

    Stages: the process as it is (data loaded, coordinates built), F's exact equality system (dim F, W* when no
    certificate decides; built only when it fits the dense budget and the memory left, else dim F is bounded),
    and the NTP-SVM, which runs only when no certificate decides separability (bounded by the dual's size). With a
    model's ``head`` W, two more V × d arrays (:data:`HEAD_WORK_COPIES`): P_F(W), held from before the solvers to the
    alignment, and one difference of V × d matrices there.
    """
    import psutil

    parts = theory.estimate_memory(data)
    room = check_memory(data.V, data.d, parts["outputs"], "the answers (W*, W^mm, a certificate: V × d each)",
                        "use a smaller d or fewer tokens (--embeddings random:D, --max-vocab, --max-contexts)")
    now = psutil.Process().memory_info().rss
    system = F.system_bytes()
    fits = builds_equality_system(system, room)
    work = head_work_bytes(data.V, data.d) if head else 0
    return MemoryPlan(process=now, equality_system=system, equality_system_built=fits,
                      svm=parts["svm_dual"] + parts["outputs"], parts=parts, available=room,
                      peak_estimate=now + (system if fits else 0) + parts["outputs"] + work)


def jsonable(value):
    """NaN/inf → None, numpy scalars → Python, recursively: summary.json is strict JSON (one treatment of NaN)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class Analysis:
    """What :func:`analyze` found on one set of contexts (and, for a model, its head W).

    Attributes
    ----------
    data : NTPData or None
        H (m, d) as ``data.embeddings``, p̂ and π̂ (None in a probe until its forward passes are done).
    W : (V, d) float64 or None
        The model's head (with its bias as a last column when it was appended); None for data alone.
    contexts : :class:`~embgeo.ntp.analysis.probe.ProbeContexts` or None — a probe's contexts (their tokens and
        next-token counts; typed loosely here: this module imports no torch).
    meta : dict — where the data came from: ``source`` (ntp analyze), or the model, device, dtype and options.
    input : dict — what reading the input did (pairs, skipped lines, ``<unk>``, the contexts a sample kept).
    memory : dict — bytes by part: a probe's estimate before its forward passes, else the plan's ``parts``.
    estimate : dict — a probe's seconds estimated before its forward passes.
    plan : MemoryPlan or None — the memory plan made before the solvers.
    subspace : theory.Subspace or None — F (eq. 5), with its coordinates.
    entropy, ce, kl_gap : float — 𝓗, CE(W) (eq. 2) and CE − 𝓗 computed as a KL (nats); NaN without W.
    compatibility : theory.Compatibility or None — Def. 1, with W* when compatible; None when undecided.
    dim_F : int or None; dim_F_bounds : (low, high) or None — when only bounds are known (``errors["dim_F"]``).
    separability : theory.Separability or None — Def. 2 with its certificate; None when undecided or when every
        support is the whole vocabulary.
    svm : theory.NTPSVM or None — Def. 3 with its status and residuals.
    alignment, logits, frequency : dict — with W: :func:`embgeo.ntp.measure.alignment.alignment`,
        :func:`~embgeo.ntp.measure.geometry.logit_structure_factored`'s and
        :func:`~embgeo.ntp.measure.geometry.row_norms_frequency`'s scalars.
    arrays : dict — per-context and per-token arrays of those (written by :meth:`save`).
    head_training : dict — :func:`embgeo.ntp.analysis.probe.train_head`'s runs (empty unless it ran).
    errors : dict — stage → why it was not decided (time limit, memory budget, no constraints).
    seconds : dict — time per stage (and ``dim_F``, ``load``, ``hidden`` where they ran).
    token_labels : list of str or None — the name of each row of W (else ``data.token_labels``).
    """

    data: NTPData | None
    W: np.ndarray | None = None
    contexts: object | None = None
    meta: dict = field(default_factory=dict)
    input: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    estimate: dict = field(default_factory=dict)
    plan: MemoryPlan | None = None
    subspace: theory.Subspace | None = None
    entropy: float = math.nan
    ce: float = math.nan
    kl_gap: float = math.nan
    compatibility: theory.Compatibility | None = None
    dim_F: int | None = None
    dim_F_bounds: tuple[int, int] | None = None
    separability: theory.Separability | None = None
    svm: theory.NTPSVM | None = None
    alignment: dict = field(default_factory=dict)
    logits: dict = field(default_factory=dict)
    frequency: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)
    head_training: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    token_labels: list[str] | None = None

    @property
    def w_star(self) -> np.ndarray | None:
        """W* (V, d), when the data are compatible."""
        return self.compatibility.W if self.compatibility else None

    @property
    def w_mm(self) -> np.ndarray | None:
        """W^mm (V, d) (the best certified point; see ``svm.residuals['error_bound']``), when separable."""
        return None if self.svm is None else self.svm.W

    @property
    def ran_svm(self) -> bool:
        """Whether a W^mm was found (separable, and the NTP-SVM returned a certified point)."""
        return self.w_mm is not None

    @property
    def separable(self) -> bool | None:
        """The one separability verdict (Def. 2) that is printed and written: True, False, or None (undecided or not
        applicable). Decided by :func:`~embgeo.ntp.theory.is_separable` or, when that stopped undecided (or there
        was no model W to try first), by the NTP-SVM: a feasible point certifies separability, a Farkas matrix the
        opposite."""
        return None if self.separability is None else bool(self.separability)

    @property
    def no_constraints(self) -> bool:
        """Whether every support is the whole vocabulary: no constraint (6b), so neither separability nor the NTP-SVM
        applies (:data:`NO_CONSTRAINTS` in ``errors``, set by :func:`analyze`)."""
        return self.errors.get("separability") == NO_CONSTRAINTS

    @property
    def separability_verdict(self) -> str:
        """:attr:`separable` as a word: "True", "False", "n/a" (no constraint (6b)) or "undecided"."""
        if self.separable is not None:
            return str(self.separable)
        return "n/a" if self.no_constraints else "undecided"

    @property
    def names(self) -> list[str] | None:
        """The names of the rows of W, ``token_labels`` or else ``data.token_labels`` (None when neither is known)."""
        if self.token_labels is not None:
            return self.token_labels
        return None if self.data is None else self.data.token_labels

    def context_text(self, j: int) -> str:
        """Context j as its tokens (their names when known), space-separated; ``context j`` when no tokens."""
        if self.contexts is not None:
            tokens = self.contexts.tokens(j)
        elif self.data is not None and self.data.contexts is not None:
            tokens = self.data.contexts[j]
        else:
            return f"context {j}"
        names = self.names
        return " ".join(names[v] if names is not None else str(v) for v in tokens)

    def to_dict(self) -> dict:
        """Every scalar as strict JSON (NaN and inf as None): summary.json."""
        comp, sep, svm, data, F = self.compatibility, self.separability, self.svm, self.data, self.subspace
        V, d = (self.W.shape if self.W is not None else (None, None)) if data is None else (data.V, data.d)
        out = {
            "meta": self.meta, "input": self.input,
            "m": None if data is None else data.m, "V": V, "d": d,
            "n_samples": None if data is None else data.n_samples,
            "memory_estimate_bytes": self.memory, "memory": None if self.plan is None else self.plan.to_dict(),
            "time_estimate_seconds": self.estimate,
            "entropy_nats": self.entropy, "ce_nats": self.ce, "kl_gap_nats": self.kl_gap,
            "compatible": None if comp is None else bool(comp),
            "compatibility_residual": None if comp is None else comp.residual,
            "compatibility_method": None if comp is None else comp.method,
            "compatibility_certificate_norm": None if comp is None else comp.certificate_norm,
            "w_star_norm": float(np.linalg.norm(comp.W)) if comp else None,
            "dim_F": self.dim_F,
            "dim_F_perp": None if self.dim_F is None or F is None else F.ambient_dim - self.dim_F,
            "dim_F_bounds": None if self.dim_F_bounds is None else list(self.dim_F_bounds),
            "separable": self.separable, "separability_verdict": self.separability_verdict,
            "separability_method": None if sep is None else sep.method,
            "separability_residuals": None if sep is None else sep.residuals,
            "svm_status": svm.status if svm is not None else (Status.UNDECIDED if "svm" in self.errors else None),
            "svm_note": svm.note if self.ran_svm else None,
            "ntp_margin": svm.margin if self.ran_svm else None,
            "w_mm_norm": float(np.linalg.norm(svm.W)) if self.ran_svm else None,
            "svm_residuals": svm.residuals if self.ran_svm else None,
            "verdicts": {name: None if r is None else r.to_dict()  # each in the one certified shape
                         for name, r in (("compatibility", comp), ("separability", sep), ("svm", svm))},
            "alignment": self.alignment, "logits": self.logits, "frequency": self.frequency,
            "head_training": self.head_training, "errors": self.errors, "seconds": self.seconds,
        }
        return jsonable(out)

    def save(self, out: str | PathLike, *, save_arrays: bool = False) -> list[str]:
        """Write the analysis to the folder ``out``; returns the names written.

        Always: ``summary.json`` (:meth:`to_dict`); ``certificate.txt`` (the largest entries, in words) and
        ``certificate.json`` (all of them) of the compatibility and separability verdicts
        (:func:`~embgeo.ntp.analysis.certificates.certificates`); ``weights.npy`` π̂ (m,); ``vocabulary.txt``
        (line z names row z of W) and ``contexts.txt`` (line j names context j: row j of H) where tokens and
        contexts are known; the per-context and per-token vectors of :attr:`arrays`. With a model: the figure
        ``probe.png``/``probe.pdf``; with a probe's contexts, ``next_token_counts.npz`` (sparse (m, V) counts) and
        ``contexts.npz`` (``tokens`` concatenated, ``offsets`` (m + 1,)). With ``save_arrays``: the dense
        ``W_star.npy``, ``W_mm.npy`` (V, d) where they exist and, with a model, ``H.npy`` (m, d) and ``W.npy``
        (V, d) — at V = 49,152, d = 576 each V × d matrix is 226 MB.
        """
        from embgeo.ntp.analysis.certificates import certificates

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []

        def npy(name: str, arr) -> None:
            np.save(out / f"{name}.npy", arr)
            written.append(f"{name}.npy")

        data = self.data
        if save_arrays:
            if self.W is not None:
                if data is not None:
                    npy("H", data.embeddings)
                npy("W", self.W)
            if self.w_star is not None:
                npy("W_star", self.w_star)
            if self.w_mm is not None:
                npy("W_mm", self.w_mm)
        if data is not None:
            npy("weights", data.weights)
        for name, arr in self.arrays.items():
            npy(name, arr)
        if self.contexts is not None:
            ctx = self.contexts
            import scipy.sparse as sp

            sp.save_npz(out / "next_token_counts.npz", ctx.counts)
            tokens = [ctx.tokens(j) for j in range(ctx.m)]
            np.savez(out / "contexts.npz", tokens=np.concatenate(tokens),
                     offsets=np.concatenate([[0], np.cumsum([t.size for t in tokens])]))
            written += ["next_token_counts.npz", "contexts.npz"]
        labels = self.names
        if labels is not None:
            (out / "vocabulary.txt").write_text("".join(f"{w}\n" for w in labels), encoding="utf-8")
            written.append("vocabulary.txt")
        if data is not None and (self.contexts is not None or data.contexts is not None):
            (out / "contexts.txt").write_text("".join(f"{self.context_text(j)}\n" for j in range(data.m)),
                                              encoding="utf-8")
            written.append("contexts.txt")
        if data is not None:
            text, doc = certificates(data, self.compatibility, self.separability, self.svm,
                                     lambda _, j: self.context_text(j))
            (out / "certificate.txt").write_text(text, encoding="utf-8")
            (out / "certificate.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
            written += ["certificate.txt", "certificate.json"]
        if data is not None and self.W is not None:
            import matplotlib.pyplot as plt

            from embgeo.ntp.measure.figures import probe_figure

            fig = probe_figure(self)
            for ext in ("png", "pdf"):
                fig.savefig(out / f"probe.{ext}", dpi=120, bbox_inches="tight")
            plt.close(fig)
            written += ["probe.png", "probe.pdf"]
        (out / "summary.json").write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return ["summary.json", *written]


def analyze(data: NTPData, W=None, *, max_seconds: float | None = None,
            report: Callable[[str, Analysis], object] | None = None,
            started: Callable[[str], object] | None = None,
            solver_progress: ProgressFn | None = None,
            separability_method: str = "auto", after_solvers: float = 0.0,
            result: Analysis | None = None) -> Analysis:
    """The NTP paper's objects for the embeddings H = ``data.embeddings`` (m, d) and, when given, a decoder W (V, d).

    In order (:data:`STAGES`; ``started(stage)`` is called before each that runs and ``report(stage, result)``
    after it, for printing):

    ``"loss"``: 𝓗 (eq. 2) and, with W, CE(W) − 𝓗 as a KL (:func:`~embgeo.ntp.measure.alignment.blockwise_kl`, over
    row blocks of the logits) and CE(W) as 𝓗 + KL;
    ``"memory"``: F (eq. 5) and the memory plan (:func:`memory_plan`: refuses what cannot fit, before any solver);
    ``"compatibility"``: Def. 1 (W* or the certificate that (4) has no solution) and dim F (exact when F's system
    was planned to fit, else from the tokens' ranks when their bounds meet, else the bounds);
    ``"geometry"`` (with W): the logits' structure and the rows' norms against token frequency, with P_F(W) and
    the normalized NTP-margin of P_⊥(W) (:func:`~embgeo.ntp.measure.alignment.alignment_prep`) — what needs no
    solver, done and timed before the solvers;
    ``"separability"`` (with W): Def. 2 — with ``separability_method="auto"`` the cheap routes, W tried as the
    certificate among them (exact when P_⊥(W) has all margins > 0; after the span pair certificate when r < m), the
    LP when small, else the squared hinge and the dual; ``"hinge"``, ``"dual"`` or ``"lp"`` is that route alone
    (:func:`theory.is_separable`);
    ``"svm"``: W^mm (Def. 3). With W: the augmented Lagrangian warm-started from W, when separable or undecided;
    without W: :func:`theory.ntp_svm`, which decides separability itself. When separability was undecided, the
    NTP-SVM's outcome decides it (:attr:`Analysis.separable`, the one verdict printed and written);
    ``"alignment"`` (with W): W against W* and W^mm on the constrained rows
    (:func:`~embgeo.ntp.measure.alignment.alignment`). A linear head trained on H from zero (Thm. 2 on the model's
    own embeddings) is :func:`embgeo.ntp.analysis.probe.train_head`, on this analysis.

    ``max_seconds`` bounds the whole analysis. The exact equality solve of the compatibility stage begins no step
    of its factorization past the limit less ``after_solvers`` (the caller's estimate of the passes after it); the
    iterative solvers (separability's, the NTP-SVM) together get what is left of the limit less the seconds that
    the alignment's passes with W^mm take — measured before they start, on W standing in for W^mm — so that the
    whole ends within the limit. They call ``solver_progress(event)`` (a
    :class:`~embgeo.ntp.solvers.outcome.ProgressEvent`: the solver, its step, the relative duality gap and its other
    numbers). ``result``: an :class:`Analysis` to fill (a probe's, with its contexts and estimates).

    Raises :class:`~embgeo.errors.TooLargeError` before any solver when the answers (V × d each) exceed the dense
    budget or the memory this process can still allocate; :class:`~embgeo.errors.InputError` /
    :class:`~embgeo.errors.ShapeError` for bad input. Cost: that of :func:`theory.is_compatible`,
    :attr:`theory.Subspace.dim`, :func:`theory.is_separable` and :func:`theory.ntp_svm` on ``data``, and with W a
    few passes over the m × V logits in row blocks (never an m × V array).
    """
    if not isinstance(data, NTPData):
        raise InputError(f"data: expected an embgeo.ntp.NTPData, got {type(data).__name__}")
    if W is not None:
        W = as_float_array("W", W, ndim=2)
        if W.shape != (data.V, data.d):
            raise ShapeError(f"W: expected shape (V, d) = ({data.V}, {data.d}) to match the data, got {W.shape}")
    if max_seconds is not None:  # 0 is allowed: the stages before spent the caller's limit, the solvers are not run
        max_seconds = check_float("max_seconds", max_seconds, positive=False)
    check_separability_method(separability_method, "separability_method")
    return analyze_checked(data, W, max_seconds=max_seconds, report=report, started=started,
                           solver_progress=solver_progress, separability_method=separability_method,
                           after_solvers=after_solvers, result=result)


def analyze_checked(data: NTPData, W: np.ndarray | None, *, max_seconds: float | None,
                    report: Callable[[str, Analysis], object] | None = None,
                    started: Callable[[str], object] | None = None, solver_progress: ProgressFn | None = None,
                    separability_method: str = "auto", after_solvers: float = 0.0,
                    result: Analysis | None = None) -> Analysis:
    """:func:`analyze` on inputs its caller has already checked (W a finite float64 (V, d) array or None,
    ``max_seconds`` a number or None, the method one of the routes): the probe, which checked them at its own public
    boundary, calls this so that nothing is validated twice (a V × d finiteness pass is 28 M entries at SmolLM2's
    size)."""
    res = result if result is not None else Analysis(data, W)
    res.data, res.W = data, W
    model = W is not None
    if started is not None:
        started("loss")
    t = time.perf_counter()
    # the solvers stop early enough for the passes after them (``after_solvers`` seconds, estimated by the caller)
    deadline = None if max_seconds is None else t + max(max_seconds - after_solvers, 0.0)
    wall = None if max_seconds is None else t + max_seconds  # the whole analysis's

    res.entropy = theory.entropy(data)
    if model:
        res.kl_gap = _align.blockwise_kl(data, W)
        res.ce = res.entropy + res.kl_gap  # a sum of two non-negative terms: exact to rounding, one pass fewer
    t = stage_done(res, report, "loss", t, started, "memory")

    res.subspace = F = theory.subspace(data)
    res.plan = memory_plan(data, F, head=model)
    if not res.memory:
        res.memory = dict(res.plan.parts)
    t = stage_done(res, report, "memory", t, started, "compatibility")

    F.deadline = deadline  # the exact solve behind W*, dim F and every projection begins no step past it
    try:
        res.compatibility = theory.is_compatible(data, F)
    except (SolverError, TooLargeError) as exc:
        res.errors["compatibility"] = str(exc)
    begun = time.perf_counter()
    res.dim_F, res.dim_F_bounds, note = _dimension(F, res.plan)
    res.seconds["dim_F"] = time.perf_counter() - begun
    if note:
        res.errors["dim_F"] = note
    t = stage_done(res, report, "compatibility", t, started, "geometry" if model else "svm")

    full = bool(np.all(data.support_sizes == data.V))
    if full:
        res.errors["separability"] = NO_CONSTRAINTS
    if model:
        deadline, prep = _geometry(res, data, W, F, deadline, wall)
        t = stage_done(res, report, "geometry", t, started, "separability")
        if not full:
            try:
                how = {"candidate": W} if separability_method == "auto" else {"method": separability_method}
                res.separability = theory.is_separable(data, F, max_seconds=time_left(deadline),
                                                       progress=solver_progress, **how)
            except (SolverError, TooLargeError) as exc:
                res.errors["separability"] = str(exc)
        t = stage_done(res, report, "separability", t, started, "svm")

    if not full and (res.separability is None or res.separability):
        # With W: the ALM at every rank — it is the solver the warm start W reaches (the dual route ignores it), and
        # on a trained model's H (separable by W itself) it was 50-100x faster than the dual even with rank H = m.
        # Its ρ held while the working set lacks binding pairs (HOLD_SET): on SmolLM2's and Gemma 3's states at
        # m = 2000, W^mm in 83–126 s and 70–105 s without a factorization, against 117.7 s and gap 0.73 after 391 s.
        how = {"separability": res.separability, "warm_start": W, "method": "alm",
               "alm_options": HOLD_SET} if model else {}
        try:
            res.svm = theory.ntp_svm(data, subspace_=F, max_seconds=time_left(deadline), progress=solver_progress,
                                     **how)
        except (SolverError, TooLargeError) as exc:
            res.errors["svm"] = str(exc)
        if res.separability is None and res.svm is not None:
            res.separability = res.svm.separability  # the NTP-SVM decided it: the one verdict from here on
    # the dual's arrays only: W^mm is one of the answers (``outputs``) the estimate counts already (it had been
    # counted twice: Gemma 3, m = 500, 13.1 GiB "estimated for the stages that ran" against 9.4 measured)
    res.plan.peak_estimate += res.plan.parts["svm_dual"] if res.ran_svm else 0
    t = stage_done(res, report, "svm", t, started, "alignment" if model else None)

    if model:
        eps = math.nan if res.svm is None or res.svm.W is None else float(res.svm.residuals.get("error_bound",
                                                                                                  math.nan))
        res.alignment = _align.alignment(data, W, res.w_star, res.w_mm, eps, prep)
        stage_done(res, report, "alignment", t)
    res.plan.peak_measured = _peak_bytes()
    return res


def _geometry(res: Analysis, data: NTPData, W: np.ndarray, F: theory.Subspace, deadline: float | None,
              wall: float | None) -> tuple[float | None, _align.AlignmentPrep]:
    """Stage "geometry": what needs no solver's output — P_F(W), the NTP-margin of P_⊥(W), the logits' structure,
    the rows' norms — and the alignment's passes with W^mm timed on W standing in for it. Returns the solvers'
    deadline (the limit less those measured seconds, not estimated ones: issue 38, where the estimate had left out
    the m × m Gram and the row passes and the probe ended 18 % past its limit at m = 2000) and the prepared parts."""
    F.deadline = wall  # unless the compatibility stage built it, the projection needs the solve
    prep = _align.alignment_prep(data, W, F, res.w_star)
    if prep.error is not None:
        res.errors["alignment"] = prep.error
    res.logits, arrays = logit_structure_factored(data.embeddings, W, data)
    res.frequency, freq_arrays = row_norms_frequency(data, W)
    res.arrays = {**arrays, **freq_arrays}
    if wall is not None:
        begun = time.perf_counter()
        _align.alignment(data, W, res.w_star, W, 0.0, prep)
        deadline = wall - (time.perf_counter() - begun)  # the solvers end in time for the alignment's passes
    F.deadline = deadline
    return deadline, prep


def stage_done(res: Analysis, report, name: str, t0: float, started=None, following: str | None = None) -> float:
    """Record the stage's time, tell ``report``, then ``started(following)``; returns the clock for the next stage."""
    res.seconds[name] = time.perf_counter() - t0
    if report is not None:
        report(name, res)
    if started is not None and following is not None:
        started(following)
    return time.perf_counter()


def _peak_bytes() -> int:
    """The process's peak resident memory so far, in bytes (ru_maxrss is in kB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _dimension(F: theory.Subspace, plan: MemoryPlan) -> tuple[int | None, tuple[int, int] | None, str]:
    """(dim F, None, "") from the exact system when it was planned to fit, or from the tokens' ranks when their
    bounds (:meth:`~embgeo.ntp.theory.Subspace.dim_bounds`) meet; else (None, the bounds, why)."""
    if plan.equality_system_built:
        try:
            return F.dim, None, ""
        except (SolverError, TooLargeError) as exc:
            note = f"the exact count failed: {exc}"
    else:
        note = f"the exact count needs F's equality system, {gib(plan.equality_system)}"
    low, high = F.dim_bounds()
    return (low, None, "") if low == high else (None, (low, high), note)
