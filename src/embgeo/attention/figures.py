"""Figures of the attention paper's experiments (Lemma 4.1, Figs. 1-3, Theorem 4.3), with matplotlib.

Every function draws into the axes it is given and returns them; the caller makes the figure
(no backend is chosen here: the CLI picks Agg, a notebook keeps its own). Legends are at least 8 pt
(:data:`LEGEND_PT` where they have room) and titles keep matplotlib's default size, so that a two-panel figure
scaled down to the report's width still reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from numpy.typing import ArrayLike

#: Legend text (pt).
LEGEND_PT = 9


def lemma41_panels(rows: pd.DataFrame, alpha: ArrayLike, dE: ArrayLike, v: ArrayLike, eta0: float,
                   axes: Sequence[Axes]) -> Sequence[Axes]:
    """Lemma 4.1: (left) the relative errors across d against their theory levels; (right) the step-1
    update along v against α_s at the largest d, with the predicted slope η0/2.

    ``rows`` is :func:`embgeo.attention.metrics.lemma41_table`; ``dE`` (|S|, d) and ``v`` (d,) belong
    to its last d; ``axes`` a pair.
    """
    a, b = axes
    a.loglog(rows["d"], rows["relative_residual"], "o", color="C0", label="residual vs (η0/2)α_s v, relative")
    a.loglog(rows["d"], rows["first_order"], "-", color="C0", label="first order √2‖p⁰‖/√d")
    a.loglog(rows["d"], np.abs(rows["slope_ratio"] - 1).clip(lower=1e-12), "s", color="C1",
             label="|slope/(η0/2) − 1|")
    a.loglog(rows["d"], rows["slope_bound"], "--", color="C1", label="bound ‖p⁰‖/√d")
    a.set_xscale("log", base=2)
    a.set_xlabel("embedding dimension d")
    a.set_ylabel("relative error (dimensionless)")
    a.set_title("Lemma 4.1 across d")
    a.legend(fontsize=LEGEND_PT)
    alpha, dE, v = np.asarray(alpha), np.asarray(dE), np.asarray(v)
    b.scatter(alpha, dE @ v / (v @ v), s=6, color="0.3", label="tokens")
    grid = np.linspace(alpha.min(), alpha.max(), 2)
    b.plot(grid, eta0 / 2 * grid, "k--", label="theory: slope η0/2")
    b.set_xlabel("signed frequency α_s")
    b.set_ylabel("(E¹_s − E⁰_s)·v / ‖v‖²")
    b.set_title(f"d = {int(rows['d'].iloc[-1])}")
    b.legend()
    return axes


def score_panels(post: ArrayLike, Ep: ArrayLike, Ev: ArrayLike, axes: Sequence[Axes], *, colour: ArrayLike,
                 colour_label: str,
                 levels: ArrayLike | None = None, deltas: Sequence[float] | None = None,
                 centre: float | None = None) -> Sequence[Axes]:
    """Figs. 1-3: ⟨E_s, p⟩ (left) and ⟨E_s, v⟩ (right) against the posterior difference (18), one dot per token.

    ``colour`` (|S|,) colours the dots (colour bar ``colour_label`` on the right panel). With the
    K-level data, ``levels`` (signed, 0 irrelevant) and ``deltas`` draw the level centres ±(1 − 2δ_k)
    as grey lines and each level's median as a cross; on real text, ``centre`` (the corpus base
    rate) is drawn as the vertex of the V of ⟨E_s, p⟩.
    """
    post, Ep, Ev = (np.asarray(a, dtype=np.float64) for a in (post, Ep, Ev))
    v_theory = "signed, increasing" if levels is not None else "increasing"
    sc = None
    for ax, values, name, title in ((axes[0], Ep, "⟨E_s, p⟩", "cls scores ⟨E_s, p⟩ (theory: V-shaped)"),
                                    (axes[1], Ev, "⟨E_s, v⟩", f"values ⟨E_s, v⟩ (theory: {v_theory})")):
        if levels is not None:
            centres = 1.0 - 2.0 * np.asarray(deltas)
            for c in centres:
                for sign in (-1, 1):
                    ax.axvline(sign * c, color="0.85", lw=0.6, zorder=0)
        if centre is not None:
            ax.axvline(centre, color="0.6", ls="--", lw=1, label=f"base rate {centre:.2f} (V centre)")
        sc = ax.scatter(post, values, c=colour, s=6, cmap="viridis")
        if levels is not None:
            for k in range(len(centres) + 1):
                for sign in ((1,) if k == 0 else (-1, 1)):
                    sel = np.asarray(levels) == sign * k
                    ax.plot(np.median(post[sel]), np.median(values[sel]), "k+", ms=9)
        ax.set_xlabel("posterior difference p(1|s) − p(0|s) (eq. 18)")
        ax.set_ylabel(name)
        ax.set_title(title)
    if centre is not None:
        axes[0].legend(fontsize=LEGEND_PT)
    axes[1].figure.colorbar(sc, ax=axes[1], label=colour_label)
    return axes


def selection_panels(rows: Sequence[dict], traces: Sequence[pd.DataFrame], threshold: float, steps: int,
                     level: Callable[[int], float], axes: Sequence[Axes]) -> Sequence[Axes]:
    """Theorem 4.3 over seeds: (left) 1 − cos(p_t, p̂) with the direction level ``level(t)``; (right)
    ‖p_t‖/‖p̂‖ against ln t with a slope-1 guide.

    ``rows[i]`` holds the seed's ``seed``, ``min_loss`` and ``norm_p_hat``; ``traces[i]`` its
    stage-2 trace (``step``, ``cos_p_hat``, ``norm_p``). Seeds whose loss never gets below
    ``threshold`` (1/(2n)) are dotted.
    """
    a, b = axes
    for i, (row, df) in enumerate(zip(rows, traces, strict=True)):
        color = f"C{i % 10}"
        rec = df[df["step"] > 0]
        style = "-" if row["min_loss"] < threshold else ":"
        a.loglog(rec["step"], 1 - rec["cos_p_hat"].clip(upper=1 - 1e-16), style, color=color,
                 label=f"seed {row['seed']}")
        b.semilogx(rec["step"], rec["norm_p"] / row["norm_p_hat"], style, color=color)
    grid = np.geomspace(16, steps, 50) if steps >= 16 else np.array([])
    a.loglog(grid, [1 - level(int(t)) for t in grid], "k--", lw=1, label="level ½(ln ln t/ln t)²")
    if steps >= 16:
        b.semilogx(grid, np.log(grid) - np.log(grid[-1]) + float(np.median(
            [df["norm_p"].iloc[-1] / r["norm_p_hat"] for r, df in zip(rows, traces, strict=True)])),
            "k--", lw=1, label="slope 1: ‖p_t‖ ≈ ‖p̂‖ ln t + c")
    a.set_xlabel("GD step t on p (E = E¹ frozen)")
    a.set_ylabel("1 − cos(p_t, p̂)")
    a.set_title("direction (dotted: loss never below 1/(2n))")
    b.set_xlabel("GD step t on p")
    b.set_ylabel("‖p_t‖ / ‖p̂‖")
    b.set_title("norm: unbounded, logarithmic")
    b.legend(fontsize=LEGEND_PT)
    if len(rows) <= 10:  # up to ten seeds and the level: 8 pt keeps the legend off the curves
        a.legend(fontsize=8)
    return axes
