"""The collapse experiments' claim builders: collapse to points, to directions, on an equiangular frame, the norms,
the accuracies and Fig. 4b's peak and decline, each with the standard of :mod:`.standards` it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from embgeo.collapse.experiments.heavy import (
    direction_spread,
    norm_spread,
    pca_singular_values,
    plane_direction_spread,
    sigma_gap,
    variance_ratio,
)
from embgeo.collapse.experiments.standards import (
    AUTHORS_FIG4C_U,
    AUTHORS_SIGMA_GAPS,
    DIRECTION_SPREAD,
    DISPERSED_NORM_SPREAD,
    DISPERSED_RATIO,
    EQUIANGULAR_GAP,
    FIG4B_DROP,
    FIG4B_DROP_TOL,
    FIG4B_EPOCH_TOL,
    FIG4B_PEAK,
    FIG4B_PEAK_EPOCH,
    FIG4B_SIGMA,
    FIG4B_TOL,
    FIG4C_PLANARITY,
    PAPER_NORM_SPREAD,
    POINT_RATIO,
    PRINTED_NORM_TOL,
    _fig4c_scale,
    fig4c_scale_tolerance,
    norm_tolerance,
)
from embgeo.lab.claims import Claim, at_least, at_most, close, with_reference

if TYPE_CHECKING:
    import pandas as pd

def point_collapse_claims(what: str, X: ArrayLike, labels: ArrayLike, *, norms: bool = True, note: str = "") -> list:
    """Claims that the rows of X (n, d) collapse to one point per label (n,): types I / II of the paper.

    Two claims: the within/between variance ratio ≤ :data:`POINT_RATIO` and (``norms``) the pooled
    norm spread ≤ :data:`PAPER_NORM_SPREAD`, both derived from the paper's own "1.41 ± 0.13"
    (``feature-collapse.txt`` Sec. 2.1; Figs. 3, 4a right, 4c). σ3/σ1 only tests that the rows lie in
    a plane; it is printed in the note. ``norms=False`` for LayerNormed rows, whose norms are √d by
    construction.
    """
    s = pca_singular_values(X)
    sv = f"PCA σ = {s[0]:.4g} / {s[1]:.4g} / {s[2]:.3g} (σ3/σ1 = {s[2] / s[0]:.2g}, planarity only)"
    extra = f"; {note}" if note else ""
    claims = [at_most(f"{what} collapse to points: within/between variance ratio", variance_ratio(X, labels),
                      POINT_RATIO, theory=0.0,
                      note=f"bound 2·s², s = {PAPER_NORM_SPREAD:.3f} the paper's norm spread (0.06/0.61) in norm "
                           f"and in angle; {sv}{extra}")]
    if norms:
        claims.append(at_most(f"{what}: equal norms within a group (norm spread std/mean)", norm_spread(X, labels),
                              PAPER_NORM_SPREAD, theory=0.0,
                              note="bound: the paper's own spread in collapsed runs, 0.13/1.41 = 0.092 and "
                                   f"0.06/0.61 = 0.098{extra}"))
    return claims


def dispersed_claims(what: str, X: ArrayLike, labels: ArrayLike, *, note: str = "") -> list:
    """Claims that the rows of X (n, d) do NOT collapse by label (n,): Fig. 4b's dispersed u_{k,ℓ}.

    The variance ratio ≥ :data:`DISPERSED_RATIO` and the norm spread ≥ :data:`DISPERSED_NORM_SPREAD`
    (the paper's explanation: the u_{k,ℓ} of one concept get different magnitudes).
    """
    s = pca_singular_values(X)
    extra = f"; {note}" if note else ""
    return [at_least(f"{what} stay dispersed: within/between variance ratio", variance_ratio(X, labels),
                     DISPERSED_RATIO,
                     note=f"bound: 10× the collapse bound {POINT_RATIO:.4f}; PCA σ = {s[0]:.4g} / {s[1]:.4g} / "
                          f"{s[2]:.3g}{extra}"),
            at_least(f"{what}: magnitudes differ within a concept (norm spread std/mean)", norm_spread(X, labels),
                     DISPERSED_NORM_SPREAD,
                     note=f"bound: √10 × the paper's collapsed spread {PAPER_NORM_SPREAD:.3f}; the paper's "
                          f"mechanism: u_{{k,ℓ}} of one concept get different magnitudes{extra}")]


def direction_collapse_claim(what: str, X: ArrayLike, labels: ArrayLike, bound: float = DIRECTION_SPREAD,
                             note: str = "", why: str = "") -> list:
    """Claim that the unit directions of the rows of X (n, d) agree within each label (type III).

    Measured: :func:`~embgeo.collapse.metrics.direction_spread` (rms angle about the group
    direction, radians), against ``bound`` (default: the paper's relative spread, as an angle);
    ``why`` replaces the default justification of the bound, ``note`` is appended.
    """
    where = why or (f"bound: the paper's relative spread {PAPER_NORM_SPREAD:.3f} as an angle; each word counts "
                    "alike, rare or frequent")
    where += f"; {note}" if note else ""
    return [at_most(f"{what}: directions collapse within each concept (rms angle, rad)",
                    direction_spread(X, labels), bound, theory=0.0, note=where)]


def plane_direction_claim(what: str, X: ArrayLike, labels: ArrayLike, note: str = "") -> list:
    """Directional collapse as the paper's figure shows it: the rms angle of each row's direction about its
    group's, measured in the 2-D PCA plane of the figure (:func:`~embgeo.collapse.metrics.plane_direction_spread`),
    against :data:`DIRECTION_SPREAD`; the full-space angle and σ3/σ1 go in the note.

    Fig. 4b's evidence for "W looks as in (a)" is that plane (PC1 against PC2); a spread of directions
    out of it (σ3 > 0) is invisible there and is reported, not claimed.
    """
    s = pca_singular_values(X)
    full = direction_spread(X, labels)
    extra = f"; {note}" if note else ""
    return [at_most(f"{what}: directions collapse within each concept in the figure's PCA plane (rms angle, rad)",
                    plane_direction_spread(X, labels), DIRECTION_SPREAD, theory=0.0,
                    note=(f"bound: the paper's relative spread {PAPER_NORM_SPREAD:.3f} as an angle; measured on the "
                          f"projections onto PC1-PC2, as the figure shows them; in the full space the rms angle is "
                          f"{full:.3g} rad and σ3/σ1 = {s[2] / s[0]:.2g} (PCA σ = {s[0]:.4g} / {s[1]:.4g} / "
                          f"{s[2]:.3g}){extra}"))]


def equiangular_claim(what: str, X: ArrayLike, note: str = "") -> Claim:
    """Figs. 3 and 4a: the groups sit on an equiangular frame (for n_c = 3, an equilateral triangle):
    1 − σ2/σ1 of the rows' PCA singular values (:func:`~embgeo.collapse.metrics.sigma_gap`) at most
    :data:`EQUIANGULAR_GAP`, the largest gap among the spectra the authors present as equilateral."""
    s = pca_singular_values(X)
    extra = f"; {note}" if note else ""
    return at_most(f"{what}: the concepts form an equiangular frame (1 − σ2/σ1)", sigma_gap(X), EQUIANGULAR_GAP,
                   theory=0.0,
                   note=(f"PCA σ = {s[0]:.4g} / {s[1]:.4g} / {s[2]:.3g}; 0 exactly for three equal groups on an "
                         f"equilateral triangle; bound: the authors' spectra called equilateral, "
                         + ", ".join(f"{k} {a}/{b}" for k, (a, b) in AUTHORS_SIGMA_GAPS.items())
                         + f", gaps up to {EQUIANGULAR_GAP:.4f} (Fig. 3's saved notebook run); the PCA centres the "
                           f"rows, so where the triangle's centre lies is not tested{extra}"))


def equiangular_claims(cfg, items) -> tuple[list, list]:
    """(claims, notes): :func:`equiangular_claim` for each (what, X) of ``items`` where the authors' standard applies.

    The standard :data:`EQUIANGULAR_GAP` was measured on the authors' K = 1000 runs, whose random latents
    satisfy Assumption 1 (equal concept counts at every position, under which the theorems put the concepts
    on an equiangular frame) to about 1%. It is claimed at the paper's sizes and on a fully sampled latent
    space (``latent="all"``, where Assumption 1 is exact); at smaller random or distinct latents the counts
    are unbalanced by several percent and so is the frame, so the gap is reported in a note instead.
    """
    if cfg.paper_numbers or cfg.latent == "all":
        return [equiangular_claim(what, X) for what, X in items], []
    return [], [f"{what}: 1 − σ2/σ1 = {sigma_gap(X):.3g} (not claimed: with {cfg.n_classes} {cfg.latent} latent "
                "sequences Assumption 1's concept counts are unbalanced by several percent, and the authors' "
                f"standard {EQUIANGULAR_GAP:.4f} comes from K = 1000)" for what, X in items]


def fig4c_u_claims(U: ArrayLike, tau_star: float, note: str = "", seed: int | None = None) -> list:
    """Fig. 4c's u_{k,ℓ} (K·L, d) against the authors' saved run and Theorem 3.

    Planarity: σ3/σ1 ≤ :data:`FIG4C_PLANARITY`, the authors' own collapsed u (8.387 / 8.377 / 0.115).
    Scale: σ1 and σ2 = τ*/√2 (K·L blocks of norm c = τ*/√(KL) on an equilateral triangle have
    σ1² + σ2² = KL·c² = τ*²), within the authors' own agreement with it (0.84%) plus two standard deviations over
    paper-scale seeds (:func:`fig4c_scale_tolerance`; ``seed``: the run's, left out of that spread). Neither tests
    that the blocks are points within the plane: the authors' run gives no number for that. ``note`` is appended to
    the scale claims.
    """
    s = pca_singular_values(U)
    target = float(tau_star / np.sqrt(2))
    extra = f"; {note}" if note else ""
    claims = [at_most("h*: u_{k,ℓ} as planar as in the authors' saved run (σ3/σ1)", float(s[2] / s[0]),
                      FIG4C_PLANARITY, theory=0.0,
                      note=(f"PCA σ = {s[0]:.4g} / {s[1]:.4g} / {s[2]:.3g}; bound: the authors' saved Fig. 4c run, "
                            f"{AUTHORS_FIG4C_U[2]}/{AUTHORS_FIG4C_U[0]} = {FIG4C_PLANARITY:.4f}; within the plane "
                            f"the blocks' spread has no standard from the authors"))]
    for i in (0, 1):
        tol, made = fig4c_scale_tolerance(i, seed)
        claims.append(close(f"h*: PCA σ{i + 1} of the u_{{k,ℓ}} = τ*/√2 (Theorem 3's scale)", float(s[i]), target,
                            tol, relative=True, theory=target,
                            note=(f"τ* = {tau_star:.5g} minimizes H*(t) (Theorem 3), c = τ*/√(KL); tolerance "
                                  f"{tol:.2%}: {made}; the authors' σ = {AUTHORS_FIG4C_U[0]} / {AUTHORS_FIG4C_U[1]} "
                                  f"against τ*/√2 = {_fig4c_scale():.4g} at the paper's sizes{extra}")))
    return claims


def u_contrast_claim(ratio_small: float, se_small: float, ratio_large: float, se_large: float,
                     n_small: int, n_large: int) -> Claim:
    """Fig. 4b against 4a on the same sizes: the u_{k,ℓ} are more dispersed with few samples per class.

    The paper: with n_spl = 500 the u_{k,ℓ} collapse (Fig. 4a), with n_spl = 5 they stay dispersed
    (Fig. 4b); the collapse standard (:data:`POINT_RATIO`) comes from paper-size runs, so at other sizes
    the claim is the contrast: the within/between variance ratio at n_spl = ``n_small`` exceeds that at
    ``n_large`` by three standard errors of the difference (bootstrap over the K classes,
    :func:`~embgeo.collapse.metrics.variance_ratio_se`). Equal ratios fail it.
    """
    se = float(np.sqrt(se_small**2 + se_large**2))
    return at_least(f"h: u_{{k,ℓ}} more dispersed at n_spl = {n_small} than at n_spl = {n_large} on the same sizes "
                    "(Fig. 4b vs 4a): difference of the variance ratios", ratio_small - ratio_large, 3 * se,
                    note=(f"variance ratio {ratio_small:.4g} ± {se_small:.2g} (n_spl = {n_small}) and "
                          f"{ratio_large:.4g} ± {se_large:.2g} (n_spl = {n_large}, Fig. 4a's protocol: 10 epochs); "
                          f"bound: 3 standard "
                          f"errors of the difference, bootstrap over the K classes (the L blocks of a class share "
                          f"its sentences)"))


def norm_claim(name: str, mean: float, std: float, c: float, paper: float | None = None, what: str = "‖w‖",
               seed: int | None = None) -> Claim:
    """Mean norm (``what``) against Theorem 1's c (or c′), relative tolerance :func:`norm_tolerance` of the run's
    ``seed``.

    The tolerance is the paper's printed precision (a printed "0.61" allows 1.79% below c) plus two standard
    deviations of the mean over seeds of the paper-scale collapse-norms run, leaving out the seed judged.
    """
    tol, spread = norm_tolerance(seed)
    return close(name, mean, c, tol, relative=True, paper=paper, theory=c,
                 note=(f"measured {what} {mean:.4f} ± {std:.3f} over the vectors (spread {std / mean:.3f}); "
                       f"tolerance {tol:.2%} = {PRINTED_NORM_TOL:.2%} (the paper's printed precision: "
                       f"\"0.61\" is any mean in [0.605, 0.615), up to 1.79% below 0.61602) + 2 × {spread} of the "
                       f"paper-scale collapse-norms run, relative to c)"))


def accuracy_claim(net: str, setting: str, acc: float, printed: float, paper_numbers: bool,
                   note: str = "") -> Claim:
    """One entry of the paper's accuracy table at the paper's sizes, or a 100% entry's phenomenon.

    ``acc`` in %. At the paper's sizes: |acc − printed| within the printed precision (0.5 points), plus
    :data:`FIG4B_TOL` (3σ of the authors' two runs) for the 45% of Fig. 4b. At other sizes the 100%
    entries are claimed as ≥ 99.5% (the printed precision); the 45% entry has no meaning at other sizes
    (the quick sizes generalize better) and is claimed relatively instead (:func:`gap_claim`).
    """
    label = f"{net} test accuracy, {setting}"
    if paper_numbers:
        tol = 0.5 + FIG4B_TOL if printed == 45 else 0.5
        why = (f"the printed precision 0.5 + 3σ = {FIG4B_TOL:.2f}, σ = {FIG4B_SIGMA:.2f} points from the authors' "
               f"two runs read at the same epochs (65.5/66.3 at 400, 44.8/46.4 at 2200)" if printed == 45
               else "the printed precision of 100%")
        return close(f"{label} (paper's table)", acc, printed, tol, paper=printed,
                     note=f"{note}; tolerance: {why}" if note else f"tolerance: {why}")
    if printed == 45:
        raise ValueError("accuracy_claim: the 45% of Fig. 4b is a paper-size number; off the paper's sizes use "
                         "gap_claim (h against h* on the same data)")
    return at_least(f"{label}: generalizes", acc, 99.5, paper=printed,
                    note=(f"{note}; " if note else "") + "99.5 is the printed precision of 100%")


def gap_claim(acc_h: float, acc_hstar: float, n_test: int, note: str = "") -> Claim:
    """Fig. 4b vs 4c off the paper's sizes: on the same data h* generalizes and h does not (accuracy gap, points).

    The paper's 45% (h) against 100% (h*) on the Zipf n_spl = 5 data is a number of its sizes; what any size
    can test is the contrast, read against the printed 100%: h* reaches it (≥ 99.5%, its printed precision)
    and h stays below it by more than three binomial standard errors of h's accuracy on ``n_test``
    sentences. Measured: acc(h*) − acc(h). Networks that generalize alike, or both short of 100%, fail it.
    """
    p = acc_h / 100
    se = 100 * float(np.sqrt(p * (1 - p) / n_test))
    ok = bool(acc_hstar >= 99.5 and acc_h + 3 * se < 99.5)
    return Claim("h* generalizes and h does not, on the same data: test-accuracy gap, points", acc_hstar - acc_h,
                 ok, 55.0, None, f"h* >= 99.5 and h + 3 SE < 99.5 (SE = {se:.2g})",
                 f"h {acc_h:.1f}%, h* {acc_hstar:.1f}% (final); 99.5: the printed precision of the paper's 100%; SE: "
                 f"the binomial standard error of h's accuracy (n_test = {n_test}); the paper's sizes: 45% vs 100%"
                 + (f"; {note}" if note else ""))


def peak_decline_claims(df: pd.DataFrame, paper_numbers: bool) -> list:
    """Fig. 4b's non-monotone test accuracy from a trace (columns ``epoch``, ``test_acc`` in [0, 1]).

    Paper scale: the peak (65.9 ± 3σ, the authors' runs 65.5% and 66.3%), its epoch (400 ± 100) and the
    drop from the peak to the last epoch (21.8 ± 3√2σ points, the authors' saved run, 65.5% → 43.7%), with
    σ = :data:`FIG4B_SIGMA` the run-to-run spread of the authors' two runs at the same epochs.
    Otherwise: the phenomenon, a drop from the peak of at least three binomial standard errors of
    the test accuracy at the peak (``n_test`` from the trace's ``n_test`` column or attribute
    ``attrs["n_test"]``), which a monotone curve fails.
    """
    acc = 100 * np.asarray(df["test_acc"], dtype=float)
    epochs = np.asarray(df["epoch"])
    i = int(np.nanargmax(acc))
    peak, final = float(acc[i]), float(acc[-1])
    drop = peak - final
    curve = f"peak {peak:.1f}% at epoch {int(epochs[i])}, {final:.1f}% at epoch {int(epochs[-1])}"
    if paper_numbers:
        sigma = (f"σ = {FIG4B_SIGMA:.2f} points, the run-to-run spread of the authors' saved run and re-run at the "
                 "epochs both report (65.5/66.3 at 400, 44.8/46.4 at 2200)")
        # the paper prints none of these numbers (its text: 45% at the end, Fig. 4b): they come from the authors'
        # notebook and a re-run of their code, and are shown as such, not in the paper column
        runs = "the authors' runs"
        return [with_reference(close("h test accuracy peaks near 66% (Fig. 4b)", peak, FIG4B_PEAK, FIG4B_TOL,
                                     note=f"{curve}; the authors' notebook ('climbs to ~67% then goes down'), the "
                                          f"mean of their saved run (65.5%) and a re-run (66.3%); tolerance 3σ, "
                                          f"{sigma}"), FIG4B_PEAK, runs),
                with_reference(close("epoch of the peak (Fig. 4b)", float(epochs[i]), FIG4B_PEAK_EPOCH, FIG4B_EPOCH_TOL,
                                     note="both authors' runs peak at epoch 400; tolerance: their logging interval "
                                          "of 100 epochs"), FIG4B_PEAK_EPOCH, runs),
                with_reference(close("test accuracy declines after the peak (points lost by the last epoch)", drop,
                                     FIG4B_DROP, FIG4B_DROP_TOL,
                                     note=f"{curve}; the authors' saved run, 65.5% at 400 → 43.7% at 3000; tolerance "
                                          f"3√2σ (a difference of two accuracies), {sigma}"), round(FIG4B_DROP, 1),
                               "the authors' saved run")]
    n_test = int(df.attrs.get("n_test", 0)) if hasattr(df, "attrs") else 0
    if n_test <= 0:
        raise ValueError("peak_decline_claims: the trace needs attrs['n_test'] (test-set size) off the paper scale")
    se = 100 * float(np.sqrt(peak / 100 * (1 - peak / 100) / n_test))
    return [at_least("h test accuracy peaks then declines (points lost after the peak)", drop, 3 * se,
                     note=f"{curve}; bound: 3 binomial standard errors of the accuracy at the peak "
                          f"(n_test = {n_test}); the paper's run: 65.5% → 43.7% (21.8 points)")]
