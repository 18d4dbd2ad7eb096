"""Figures of the feature-collapse paper (Figs. 3-4) and of the theorem checks, with matplotlib.

PCA scatters are coloured by concept and also use one marker shape per concept, so they read in
grayscale; singular values are printed in the titles as in the paper. Functions draw into the axes
they are given and return them. No backend is chosen here (the CLI chooses Agg; a notebook keeps its own).
Titles keep matplotlib's default size and legends are 9 pt, so that a three-panel figure scaled down to the
report's width (about 1250 px) still reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from embgeo.collapse.metrics import pca_singular_values

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MARKERS = ["o", "s", "^", "D", "v", "x"]
#: Legend text (pt).
LEGEND_PT = 9


def pca_scatter(X: ArrayLike, labels: ArrayLike, ax: Axes, title: str, max_points: int = 20_000,
                seed: int = 0) -> Axes:
    """Scatter of the first two principal components of the rows of X, one colour/marker per label."""
    X, P, idx = _pca_points(X, max_points, seed)
    labels = np.asarray(labels)
    for i, g in enumerate(np.unique(labels)):
        sel = idx[labels[idx] == g]
        ax.scatter(P[sel, 0], P[sel, 1], s=4, marker=MARKERS[i % len(MARKERS)], color=f"C{i}",
                   label=f"concept {g}", alpha=0.6, linewidths=0.5)
    return _pca_axes(ax, X, title, markerscale=3)


def _pca_points(X: ArrayLike, max_points: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X as floats (n, d), its first two principal components (n, 2), the indices of the rows to draw).

    Above ``max_points`` rows a fixed random subset is drawn; the singular values use every row.
    """
    X = np.asarray(X, dtype=float)
    centered = X - X.mean(axis=0)
    _, _, Vt = np.linalg.svd(centered, full_matrices=False)
    P = centered @ Vt[:2].T
    idx = np.arange(len(X))
    if len(X) > max_points:
        idx = np.random.default_rng(seed).choice(len(X), max_points, replace=False)
    return X, P, idx


def _pca_axes(ax: Axes, X: np.ndarray, title: str, markerscale: float) -> Axes:
    """Title with the top singular values of centred X, PC axis labels, equal aspect and the legend."""
    sv = pca_singular_values(X)
    ax.set_title(f"{title}\nσ = " + " / ".join(f"{v:.3g}" for v in sv))
    ax.set_xlabel("PC 1 (embedding units)")
    ax.set_ylabel("PC 2 (embedding units)")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=LEGEND_PT, markerscale=markerscale)
    return ax


def norm_vs_frequency(freqs: ArrayLike, measured: ArrayLike, ax: Axes, theory: ArrayLike | None = None,
                      spread: ArrayLike | None = None, label: str = "measured ‖w‖") -> Axes:
    """Word-embedding norm against within-concept frequency μ_β (Theorem 2: increasing)."""
    ax.errorbar(freqs, measured, yerr=spread, fmt="o", markersize=4, color="C0", label=label, capsize=2)
    if theory is not None:
        order = np.argsort(freqs)
        ax.plot(np.asarray(freqs)[order], np.asarray(theory)[order], "--", color="k", label="Theorem 2: $r_β$")
    ax.set_xscale("log")
    ax.set_xlabel("word frequency $μ_β$ within its concept")
    ax.set_ylabel("embedding norm")
    ax.legend(fontsize=LEGEND_PT)
    return ax


def accuracy_curves(df: pd.DataFrame, ax: Axes, title: str) -> Axes:
    """Train and test accuracy (%) against epoch from a training trace DataFrame."""
    ax.plot(df["epoch"], 100 * df["train_acc"], "-", marker="o", markevery=0.1, label="train", color="C0")
    ax.plot(df["epoch"], 100 * df["test_acc"], "--", marker="s", markevery=0.1, label="test", color="C1")
    return _accuracy_axes(ax, "accuracy (%)", title)


def _accuracy_axes(ax: Axes, ylabel: str, title: str) -> Axes:
    """Epoch on x, an accuracy in % on y (−2 to 102), the title and the legend."""
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.set_ylim(-2, 102)
    ax.set_title(title)
    ax.legend(fontsize=LEGEND_PT)
    return ax


def pca_scatter_by_frequency(X: ArrayLike, labels: ArrayLike, freqs: ArrayLike, ax: Axes, title: str,
                             max_points: int = 20_000, seed: int = 0) -> Axes:
    """PCA scatter of the rows of X (n_w, d), coloured by word frequency μ_β (log scale), marker by concept.

    Fig. 4a of ``feature-collapse.txt``: the norm of w grows with the word's frequency, so frequent
    words sit far from the origin and rare ones near it. The colour map (viridis) is monotone in
    lightness and reads in grayscale; ``labels`` (n_w,) give the concept, ``freqs`` (n_w,) the μ_β.
    """
    from matplotlib.colors import LogNorm

    X, P, idx = _pca_points(X, max_points, seed)
    freqs = np.asarray(freqs, dtype=float)
    labels = np.asarray(labels)
    norm = LogNorm(vmin=freqs.min(), vmax=freqs.max()) if freqs.min() < freqs.max() else None
    sc = None
    for i, g in enumerate(np.unique(labels)):
        sel = idx[labels[idx] == g]
        sel = sel[np.argsort(freqs[sel])]  # frequent words drawn last, on top
        sc = ax.scatter(P[sel, 0], P[sel, 1], c=freqs[sel], cmap="viridis", norm=norm, s=8,
                        marker=MARKERS[i % len(MARKERS)], label=f"concept {g}", linewidths=0.3, edgecolors="k")
    _pca_axes(ax, X, title, markerscale=1.5)
    if sc is not None:
        ax.figure.colorbar(sc, ax=ax, label="word frequency $μ_β$ (log scale)")
    return ax


def plot_test_accuracy(df: pd.DataFrame, ax: Axes, title: str, reference: dict | None = None) -> Axes:
    """Test accuracy (%) against epoch from a trace, its peak marked; ``reference`` {epoch: %} overlaid.

    Fig. 4b of ``feature-collapse.txt``: h's test accuracy is not monotone (the authors' saved run:
    65.5% at epoch 400, 43.7% at epoch 3000), which a final value alone hides.
    """
    epochs = np.asarray(df["epoch"], dtype=float)
    acc = 100 * np.asarray(df["test_acc"], dtype=float)
    ax.plot(epochs, acc, "-", color="k", label="test accuracy (this run)")
    i = int(np.nanargmax(acc))
    ax.plot([epochs[i]], [acc[i]], "v", color="k", markersize=8, label=f"peak {acc[i]:.1f}% at epoch {epochs[i]:.0f}")
    if reference:
        ep = np.array(sorted(reference), dtype=float)
        ax.plot(ep, [reference[e] for e in sorted(reference)], "--", marker="s", color="0.5", markersize=4,
                label="authors' saved run (notebook log)")
    return _accuracy_axes(ax, "test accuracy (%)", title)


def accuracy_table(table: pd.DataFrame, scale: str = "paper") -> Figure:
    """The paper's accuracy table as a figure: rows = settings, columns = h / h*, cells "measured (printed)".

    ``table``: DataFrame with columns ``setting``, ``net``, ``measured`` (% or None), ``printed`` (%).
    Off the paper's scale the printed value is labelled as belonging to the paper's sizes.
    """
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys(table["setting"]))
    nets = list(dict.fromkeys(table["net"]))
    ref = "paper" if scale == "paper" else "paper, at its sizes"
    cells = []
    for s in settings:
        row = []
        for n in nets:
            r = table[(table["setting"] == s) & (table["net"] == n)].iloc[0]
            m = r["measured"]
            row.append(("missing" if m is None or m != m else f"{m:.1f}%") + f"  ({ref}: {r['printed']:g}%)")
        cells.append(row)
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.45 * len(settings)), layout="constrained")
    ax.axis("off")
    t = ax.table(cellText=cells, rowLabels=settings, colLabels=nets, loc="center", cellLoc="center")
    t.scale(1, 1.4)
    title = "test accuracy: measured (printed in the paper)" if scale == "paper" else (
        f"test accuracy at the {scale} scale (rows: the paper's settings; the runs use the {scale} presets' sizes)")
    ax.set_title(title)
    return fig
