"""The quantities a training run or a regularization path is measured by (the paper's Figs. 4-5).

* :class:`Reference`: the theory objects W* (Def. 1), W^mm (Def. 3) and the subspace F (eq. 5)
  that iterates are compared against; :func:`compute_reference` builds it from the data.
* :func:`reference_metrics`: cos(W, W^mm), cos(W − W*, W^mm), ‖P_F(W) − W*‖/‖W*‖ and the
  NTP-margin of one W.
* :func:`trace_metrics`: CE, CE − 𝓗 (as a KL) and ‖W‖, plus the above with a reference.

Everything is numpy float64 through :mod:`embgeo.ntp.theory`.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from embgeo.core.status import Status
from embgeo.core.validate import as_float_array
from embgeo.errors import InputError, NotCompatibleError, NotSeparableError, ShapeError, SolverError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData, check_ntp_data


@dataclass(frozen=True)
class Reference:
    """W* (V, d), W^mm (V, d) and F of one dataset: what training metrics compare against.

    Build it with :func:`compute_reference`; a deliberately different reference (a perturbed W^mm,
    a scaled W*) is ``dataclasses.replace(ref, w_mm=...)``. Construction checks the shapes.
    """

    w_star: np.ndarray
    w_mm: np.ndarray
    F: theory.Subspace

    def __post_init__(self):
        w_star = as_float_array("reference.w_star", self.w_star, ndim=2)
        w_mm = as_float_array("reference.w_mm", self.w_mm, ndim=2)
        if not isinstance(self.F, theory.Subspace):
            raise InputError(f"reference.F: expected an embgeo.ntp.theory.Subspace, got {type(self.F).__name__}")
        shape = (self.F.data.V, self.F.data.d)
        for name, arr in (("w_star", w_star), ("w_mm", w_mm)):
            if arr.shape != shape:
                raise ShapeError(f"reference.{name}: expected shape (V, d) = {shape} of its subspace F, "
                                 f"got {arr.shape}")
        if not np.any(w_mm):
            raise InputError("reference.w_mm: is zero; expected the NTP-SVM solution W^mm")
        object.__setattr__(self, "w_star", w_star)
        object.__setattr__(self, "w_mm", w_mm)

    def replace(self, **changes: Any) -> Reference:
        """A copy with some fields changed (e.g. a wrong W^mm for a negative control)."""
        return dataclasses.replace(self, **changes)


def compute_reference(data: NTPData) -> Reference:
    """The theory objects the training metrics compare against (Def. 1, Def. 3, eq. 5).

    Raises :class:`NotCompatibleError` / :class:`NotSeparableError` when W* / W^mm do not exist,
    :class:`InputError` when every support is full (no separability constraints). Compute it once
    and pass it as ``reference=`` to several trainings on the same data.
    """
    check_ntp_data(data)
    F = theory.subspace(data)
    comp = theory.is_compatible(data, F)
    if not comp:
        raise NotCompatibleError(f"the data are not NTP_H-compatible (Def. 1): the log-odds equations (4) have "
                                 f"residual {comp.residual:.3g} > {comp.tolerance:.3g}, so W* does not exist")
    svm = theory.ntp_svm(data, subspace_=F)
    if svm.status != Status.OPTIMAL:
        raise NotSeparableError("the data are not NTP-separable (Def. 2), so W^mm does not exist")
    return Reference(comp.W, svm.W, F)


def resolve_reference(data: NTPData, reference: Reference | Literal[False] | None) -> tuple[Reference | None, str]:
    """(reference or None, status text) for the ``reference=`` argument of the trainers and paths.

    None: computed here (a property of the data that makes it impossible, e.g. no W^mm, skips the
    metrics with the reason as status); False: skipped; a :class:`Reference`: checked against the data.
    """
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
    if not isinstance(reference, Reference):
        raise InputError(f"reference: expected None, False or an embgeo.ntp.metrics.Reference (from "
                         f"compute_reference), got {type(reference).__name__}")
    F = reference.F
    if (F.data.m, F.data.V, F.data.d) != (data.m, data.V, data.d):
        raise ShapeError(f"reference: built for data with (m, V, d) = ({F.data.m}, {F.data.V}, {F.data.d}), "
                         f"expected ({data.m}, {data.V}, {data.d})")
    return reference, "given"


def cosine(A: np.ndarray, B: np.ndarray) -> float:
    """Frobenius cosine ⟨A, B⟩ / (‖A‖ ‖B‖); NaN when either is zero."""
    na, nb = np.linalg.norm(A), np.linalg.norm(B)
    if na == 0 or nb == 0:
        return math.nan
    return float(np.sum(A * B) / (na * nb))


def reference_metrics(data: NTPData, W: np.ndarray, ref: Reference) -> dict:
    """cos_mm = cos(W, W^mm), cos_corrected = cos(W − W*, W^mm), subspace_error = ‖P_F(W) − W*‖/‖W*‖
    (absolute if W* = 0) and margin = :func:`theory.ntp_margin` of W (V, d)."""
    ns = np.linalg.norm(ref.w_star)
    err = np.linalg.norm(ref.F.project(W) - ref.w_star)
    return {
        "cos_mm": cosine(W, ref.w_mm),
        "cos_corrected": cosine(W - ref.w_star, ref.w_mm),
        "subspace_error": float(err / ns) if ns > 0 else float(err),
        "margin": theory.ntp_margin(data, W, ref.F),
    }


#: The reference metrics' names, NaN where no reference is available.
REFERENCE_METRICS = ("cos_mm", "cos_corrected", "subspace_error", "margin")


def trace_metrics(data: NTPData, W: np.ndarray, ref: Reference | None) -> dict:
    """ce (eq. 2), kl_gap (CE − 𝓗 as a KL), norm ‖W‖_F, and with a reference :func:`reference_metrics`."""
    out = {"ce": theory.cross_entropy(data, W), "kl_gap": theory.kl_gap(data, W),
           "norm": float(np.linalg.norm(W))}
    if ref is not None:
        out.update(reference_metrics(data, W, ref))
    return out
