"""Figures of the feature-collapse paper (Figs. 3-4) and of the theorem checks, with matplotlib.

PCA scatters are coloured by concept and also use one marker shape per concept, so they read in
grayscale; singular values are printed in the titles as in the paper.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402

from embgeo.collapse.metrics import pca_singular_values  # noqa: E402

MARKERS = ["o", "s", "^", "D", "v", "x"]


def pca_scatter(X: np.ndarray, labels: np.ndarray, ax, title: str, max_points: int = 20_000, seed: int = 0):
    """Scatter of the first two principal components of the rows of X, one colour/marker per label."""
    X = np.asarray(X, dtype=float)
    centered = X - X.mean(axis=0)
    _, s, Vt = np.linalg.svd(centered, full_matrices=False)
    P = centered @ Vt[:2].T
    idx = np.arange(len(X))
    if len(X) > max_points:  # draw a fixed random subset; the singular values use every row
        idx = np.random.default_rng(seed).choice(len(X), max_points, replace=False)
    for i, g in enumerate(np.unique(labels)):
        sel = idx[labels[idx] == g]
        ax.scatter(P[sel, 0], P[sel, 1], s=4, marker=MARKERS[i % len(MARKERS)], color=f"C{i}",
                   label=f"concept {g}", alpha=0.6, linewidths=0.5)
    sv = pca_singular_values(X)
    ax.set_title(f"{title}\nσ = " + " / ".join(f"{v:.3g}" for v in sv), fontsize=9)
    ax.set_xlabel("PC 1 (embedding units)")
    ax.set_ylabel("PC 2 (embedding units)")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=7, markerscale=3)
    return ax


def norm_vs_frequency(freqs: np.ndarray, measured: np.ndarray, ax, theory: np.ndarray | None = None,
                      spread: np.ndarray | None = None, label: str = "measured ‖w‖"):
    """Word-embedding norm against within-concept frequency μ_β (Theorem 2: increasing)."""
    ax.errorbar(freqs, measured, yerr=spread, fmt="o", markersize=4, color="C0", label=label, capsize=2)
    if theory is not None:
        order = np.argsort(freqs)
        ax.plot(np.asarray(freqs)[order], np.asarray(theory)[order], "--", color="k", label="Theorem 2: $r_β$")
    ax.set_xscale("log")
    ax.set_xlabel("word frequency $μ_β$ within its concept")
    ax.set_ylabel("embedding norm")
    ax.legend(fontsize=8)
    return ax


def accuracy_curves(df, ax, title: str):
    """Train and test accuracy (%) against epoch from a training trace DataFrame."""
    ax.plot(df["epoch"], 100 * df["train_acc"], "-", marker="o", markevery=0.1, label="train", color="C0")
    ax.plot(df["epoch"], 100 * df["test_acc"], "--", marker="s", markevery=0.1, label="test", color="C1")
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(-2, 102)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return ax
