"""Every theory object of the NTP paper on one dataset, as ``embgeo ntp analyze`` computes it.

:func:`analyze` plans the memory first (and refuses what cannot fit), then finds W* (or the certificate that it
does not exist), dim F (or bounds on it when F's exact system does not fit), separability and the NTP-SVM, each
timed. It returns an :class:`Analysis` holding the result objects with their certificates and statuses; it
prints nothing. Callers that show the stages as they finish (the CLI does) pass ``report``, called after each
stage with its name and the analysis so far. Solvers that cannot decide within their budget leave their field
None and say why in the matching ``*_error`` field, never by raising: the analysis always comes back unless the
sizes are refused up front (:class:`~embgeo.errors.TooLargeError`).
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from embgeo.core import validate
from embgeo.core.status import Status
from embgeo.errors import SolverError, TooLargeError
from embgeo.ntp.data import NTPData
from embgeo.ntp.theory.compatibility import Compatibility, is_compatible
from embgeo.ntp.theory.loss import entropy
from embgeo.ntp.theory.subspace import Subspace, estimate_memory, subspace
from embgeo.ntp.theory.svm import NTPSVM, ntp_svm

#: The stages of :func:`analyze`, in order, as passed to its ``report`` callback.
STAGES = ("entropy", "memory", "compatibility", "dimension", "separability")


def gib(nbytes: float) -> str:
    """``nbytes`` in GiB with two decimals, as the analysis writes sizes."""
    return f"{nbytes / 1024**3:.2f} GiB"


@dataclass
class Analysis:
    """What :func:`analyze` found on one dataset.

    Attributes
    ----------
    data : NTPData
    entropy : float
        The empirical T-gram entropy 𝓗 in nats (eq. 2).
    subspace : Subspace
        F (eq. 5), with its coordinates; its exact equality system is built only when ``plan`` says it fits.
    plan : dict
        The memory plan, in bytes: ``process`` (resident before the solvers), ``equality_system`` (F's exact
        system) and ``equality_system_built`` (whether it fits the dense budget and the memory left), ``svm``
        (the NTP-SVM's bound, with the answers), ``parts`` (:func:`~embgeo.ntp.theory.subspace.estimate_memory`),
        ``available``, ``peak_estimate`` (for the stages that ran) and, once done, ``peak_measured``.
    compatibility : Compatibility or None
        Def. 1 with W* or its certificate; None when undecided (``compatibility_error`` says why).
    dim_F : int or None
        dim F, exact or from the tokens' ranks when their bounds meet; None when only ``dim_F_bounds`` are known
        (``dim_F_note`` says why).
    svm : NTPSVM or None
        The NTP-SVM (Def. 3) with its separability decision (``svm.separability``), status and residuals;
        None when every support is the whole vocabulary (no constraint (6b)) or when undecided
        (``svm_error`` says why).
    seconds : dict
        ``w_star`` (F and compatibility), ``dim_F``, ``separability_and_svm``.
    """

    data: NTPData
    entropy: float
    subspace: Subspace | None = None
    plan: dict = field(default_factory=dict)
    compatibility: Compatibility | None = None
    compatibility_error: str | None = None
    dim_F: int | None = None
    dim_F_bounds: tuple[int, int] | None = None
    dim_F_note: str = ""
    svm: NTPSVM | None = None
    svm_error: str | None = None
    seconds: dict = field(default_factory=dict)

    @property
    def ran_svm(self) -> bool:
        """Whether a W^mm was found (the data are separable and the NTP-SVM returned a certified point)."""
        return self.svm is not None and self.svm.W is not None

    def summary(self) -> dict:
        """The results as JSON-ready fields (``ntp analyze``'s summary.json, beside the source and the times)."""
        compat, svm, F, dim_F = self.compatibility, self.svm, self.subspace, self.dim_F
        return {
            "dim_F": dim_F, "dim_F_perp": None if dim_F is None else F.ambient_dim - dim_F,
            "dim_F_bounds": list(self.dim_F_bounds) if self.dim_F_bounds is not None else None,
            "compatible": None if compat is None else bool(compat),
            "compatibility_error": self.compatibility_error,
            "compatibility_residual": None if compat is None else compat.residual,
            "compatibility_method": None if compat is None else compat.method,
            "compatibility_certificate_norm": None if compat is None else compat.certificate_norm,
            "w_star_norm": float(np.linalg.norm(compat.W)) if compat else None,
            "separable": None if svm is None else bool(svm.separability),
            "separability_method": None if svm is None else svm.separability.method,
            "separability_residuals": None if svm is None else svm.separability.residuals,
            "svm_status": svm.status if svm is not None else (Status.UNDECIDED if self.svm_error else None),
            "svm_error": self.svm_error,
            "svm_note": svm.note if self.ran_svm else None,
            "ntp_margin": svm.margin if self.ran_svm else None,
            "w_mm_norm": float(np.linalg.norm(svm.W)) if self.ran_svm else None,
            "svm_residuals": svm.residuals if self.ran_svm else None,
            "memory_estimate_bytes": self.plan["parts"],
            "memory": {k: v for k, v in self.plan.items() if k != "parts"},
        }


def analyze(data: NTPData, max_seconds: float | None = None, *,
            report: Callable[[str, Analysis], object] | None = None,
            svm_progress: Callable[[], contextlib.AbstractContextManager] | None = None) -> Analysis:
    """The entropy, F, W* (or its certificate), dim F (or its bounds), separability and the NTP-SVM of ``data``.

    ``max_seconds`` bounds the NTP-SVM, which then returns its best certified point. ``report(stage, analysis)``
    is called after each of :data:`STAGES`. ``svm_progress()``, when given, is entered around the NTP-SVM and
    yields its ``progress`` callback (e.g. a progress bar). Raises :class:`~embgeo.errors.TooLargeError` before
    any solver runs when the answers (V × d each) exceed the dense budget or the memory this process can still
    allocate. Cost: that of :func:`~embgeo.ntp.theory.is_compatible`, :attr:`~embgeo.ntp.theory.Subspace.dim`
    and :func:`~embgeo.ntp.theory.ntp_svm` on ``data``.
    """
    out = Analysis(data, entropy(data))
    _report(report, "entropy", out)
    t0 = time.perf_counter()
    out.subspace = F = subspace(data)
    out.plan = memory_plan(data, F)
    _report(report, "memory", out)
    out.compatibility, out.compatibility_error = _compatibility(data, F)
    out.seconds["w_star"] = time.perf_counter() - t0
    _report(report, "compatibility", out)
    t1 = time.perf_counter()
    out.dim_F, out.dim_F_bounds, out.dim_F_note = _dimension(F, out.plan)
    out.seconds["dim_F"] = time.perf_counter() - t1
    _report(report, "dimension", out)
    t2 = time.perf_counter()
    out.svm, out.svm_error = _separability(data, F, max_seconds, svm_progress)
    out.seconds["separability_and_svm"] = time.perf_counter() - t2
    out.plan["peak_estimate"] += out.plan["svm"] if out.ran_svm else 0
    out.plan["peak_measured"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
    _report(report, "separability", out)
    return out


def _report(report, stage: str, out: Analysis) -> None:
    if report is not None:
        report(stage, out)


def memory_plan(data: NTPData, F: Subspace) -> dict:
    """The memory the analysis will take (see :attr:`Analysis.plan`); refuses what cannot fit.

    Stages: the process as it is (data loaded, coordinates built), F's exact equality system (dim F, W* when no
    certificate decides; built only when it fits the dense budget and the memory left, else dim F is bounded),
    and the NTP-SVM, which runs only when no certificate decides separability (bounded by the dual's size).
    """
    import psutil

    budget, room = validate.DENSE_BUDGET_BYTES, validate.available_memory_bytes()
    one_w = 8 * data.V * data.d
    if one_w > budget:  # every answer (W*, W^mm, a certificate) is one such matrix: refuse up front
        raise TooLargeError(f"W* and W^mm are V × d = {data.V} × {data.d} matrices of {gib(one_w)} each (budget "
                            f"{gib(budget)}): use a smaller d in --embeddings random:D")
    parts = estimate_memory(data)
    now = psutil.Process().memory_info().rss
    if parts["outputs"] > room:  # under a memory limit (ulimit -v, a container): refuse rather than be killed
        raise TooLargeError(f"the answers (W*, W^mm, a certificate: V × d each) need {gib(parts['outputs'])} but this "
                            f"process can allocate only {gib(room)} more (free memory or the address-space limit): "
                            "use a smaller d or fewer tokens")
    system = F.system_bytes()
    fits = system <= min(budget, room)
    svm = parts["svm_dual"] + parts["outputs"]
    plan = {"process": now, "equality_system": system, "equality_system_built": fits, "svm": svm,
            "parts": parts, "available": room}
    plan["peak_estimate"] = now + (system if fits else 0) + parts["outputs"]
    return plan


def _compatibility(data: NTPData, F: Subspace) -> tuple[Compatibility | None, str | None]:
    """(Compatibility or None, why undecided): W*'s exact system may be too large when no certificate decides."""
    try:
        return is_compatible(data, F), None
    except (SolverError, TooLargeError) as exc:
        return None, str(exc)


def _dimension(F: Subspace, plan: dict) -> tuple[int | None, tuple[int, int] | None, str]:
    """(dim F, None, "") from the exact system when it was planned to fit, or from the tokens' ranks when their
    bounds (:meth:`~embgeo.ntp.theory.Subspace.dim_bounds`) meet; else (None, the bounds, why)."""
    if plan["equality_system_built"]:
        try:
            return F.dim, None, ""
        except (SolverError, TooLargeError) as exc:
            note = f"the exact count failed: {exc}"
    else:
        note = f"the exact count needs F's equality system, {gib(plan['equality_system'])}"
    low, high = F.dim_bounds()
    return (low, None, "") if low == high else (None, (low, high), note)


def _separability(data: NTPData, F: Subspace, max_seconds: float | None, svm_progress) -> tuple[NTPSVM | None,
                                                                                                 str | None]:
    """(NTPSVM or None, why undecided); None, None when every support is the whole vocabulary."""
    if data.support_sizes.min() >= data.V:
        return None, None
    with (svm_progress or _no_progress)() as progress:
        try:
            return ntp_svm(data, subspace_=F, max_seconds=max_seconds, progress=progress), None
        except (SolverError, TooLargeError) as exc:  # undecided: say why, keep what was found
            return None, str(exc)


def _no_progress() -> contextlib.AbstractContextManager:
    return contextlib.nullcontext(None)
