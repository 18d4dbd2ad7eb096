"""Figures of the NTP paper (Figs. 1-5) and of our extra experiments, with matplotlib.

Every curve has its own line style and marker as well as its colour, so the figures read in
grayscale. Functions draw into the axes they are given and return them. Text is at least 8 pt (legends,
:data:`LEGEND_PT`) and titles keep matplotlib's default size, so that a figure scaled down to the report's
width (about 1250 px) still reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from embgeo.ntp.data import NTPData

STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"), ((0, (1, 1)), "x")]
#: Legend text (pt); crowded legends (four panels, long labels) use 8.
LEGEND_PT = 9


def style(i: int) -> dict:
    """Line style, marker and colour of the i-th curve (distinct in grayscale too)."""
    ls, mk = STYLES[i % len(STYLES)]
    return {"linestyle": ls, "marker": mk, "color": f"C{i % 10}", "markevery": 0.1, "markersize": 4}


def toy_geometry(data: NTPData, W_mm: np.ndarray, ax: Axes) -> Axes:
    """Fig. 1 (left): context embeddings with their supports, the rows w_v of W^mm and their hyperplanes.

    H (m, 2), W_mm (V, 2); rows of W^mm that coincide are drawn once with a joint label ("w_1 = w_5").
    """
    H = data.embeddings
    labels = data.context_labels or [str(j) for j in range(data.m)]
    tokens = data.token_labels or [str(v) for v in range(data.V)]
    lim = 1.25 * max(np.abs(H).max(), np.abs(W_mm).max())
    t = np.linspace(-lim, lim, 2)
    # Rows that coincide (same support pattern, e.g. w_1 = w_5) are drawn once and labelled together.
    tol = 1e-8 * max(float(np.abs(W_mm).max()), 1e-300)
    drawn: list[int] = []
    for v, w in enumerate(W_mm):
        if any(np.abs(W_mm[u] - w).max() <= tol for u in drawn):
            continue
        same = [u for u in range(len(W_mm)) if np.abs(W_mm[u] - w).max() <= tol]
        drawn.append(v)
        st = style(v)
        if np.linalg.norm(w) > 0:  # hyperplane {x : <w_v, x> = 0}
            normal = np.array([-w[1], w[0]]) / np.linalg.norm(w)
            ax.plot(t * normal[0], t * normal[1], color=st["color"], linestyle=st["linestyle"], linewidth=0.8)
        ax.annotate("", xy=w, xytext=(0, 0), arrowprops={"arrowstyle": "-|>", "color": st["color"], "lw": 1.6})
        label = " = ".join(f"$w_{{{tokens[u]}}}$" for u in same)
        ax.plot(*w, marker="*", color=st["color"], markersize=11, linestyle="none", label=label)
    for j, h in enumerate(H):
        supp = ",".join(tokens[z] for z in data.supports[j])
        ax.plot(*h, "o", color="black", markersize=8)
        ax.annotate(f"{labels[j]}\n{{{supp}}}", h, textcoords="offset points", xytext=(6, -22), fontsize=LEGEND_PT)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.axhline(0, color="0.8", lw=0.5)
    ax.axvline(0, color="0.8", lw=0.5)
    ax.set_xlabel("coordinate 1 (embedding units)")
    ax.set_ylabel("coordinate 2 (embedding units)")
    ax.set_title("contexts (•) and rows of $W^{mm}$ (★) with hyperplanes")
    ax.legend(fontsize=LEGEND_PT, loc="upper right")
    return ax


def probability_matrix(data: NTPData, ax: Axes) -> Axes:
    """Fig. 2 (left): P with contexts as rows, tokens as columns; off-support entries black."""
    P = data.probs.toarray()
    shown = np.ma.masked_where(P == 0, P)
    im = ax.imshow(shown, cmap=plt.get_cmap("viridis").with_extremes(bad="black"), vmin=0, vmax=1)
    for j, z in zip(*np.nonzero(P), strict=True):
        ax.text(z, j, f"{P[j, z]:.2g}", ha="center", va="center", fontsize=LEGEND_PT,
                color="white" if P[j, z] < .5 else "k")
    ax.set_xticks(range(data.V), data.token_labels or range(data.V))
    ax.set_yticks(range(data.m), data.context_labels or range(data.m))
    ax.set_xlabel("next token z")
    ax.set_ylabel("context j")
    ax.set_title("$\\hat p_{j,z}$ (black: off-support)")
    plt.colorbar(im, ax=ax, fraction=0.046, label="probability")
    return ax


def token_rows(W: np.ndarray, ax: Axes, title: str, labels: Sequence[str] | None = None) -> Axes:
    """Fig. 2 (middle/right): the rows w_z of a (V, 2) matrix as vectors from the origin."""
    lim = 1.2 * max(np.abs(W).max(), 1e-12)
    for v, w in enumerate(W):
        st = style(v)
        ax.annotate("", xy=w, xytext=(0, 0), arrowprops={"arrowstyle": "-|>", "color": st["color"], "lw": 1.4})
        ax.plot(*w, marker=st["marker"], color=st["color"], linestyle="none",
                label=f"$w_{{{labels[v] if labels else v}}}$")
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.set_xlabel("coordinate 1")
    ax.set_ylabel("coordinate 2")
    ax.set_title(title)
    ax.legend(fontsize=LEGEND_PT)
    return ax


def training_panels(frames: dict, entropy: float, axes: np.ndarray) -> None:
    """Figs. 1 (right), 4 and 5: loss vs 𝓗, ‖W_k‖, the two alignments, ‖P_F(W_k) − W*‖/‖W*‖.

    ``frames`` maps a label (e.g. "GD η=0.5") to a trace DataFrame; ``axes`` is a 2x2 array.
    """
    (a_loss, a_norm), (a_cos, a_sub) = axes
    for i, (label, df) in enumerate(frames.items()):
        df = df[df["step"] > 0]
        st = style(i)
        a_loss.loglog(df["step"], df["kl_gap"], label=f"{label}", **st)
        a_norm.semilogx(df["step"], df["norm"], label=label, **st)
        if "cos_mm" in df:
            a_cos.semilogx(df["step"], df["cos_mm"], label=f"{label}: cos($W_k$, $W^{{mm}}$)", **st)
            st2 = dict(st, linestyle=":", marker="x")
            a_cos.semilogx(df["step"], df["cos_corrected"], label=f"{label}: cos($W_k-W^*$, $W^{{mm}}$)", **st2)
            a_sub.loglog(df["step"], df["subspace_error"], label=label, **st)
    a_loss.set_title(f"loss gap CE($W_k$) − $\\mathcal{{H}}$ ($\\mathcal{{H}}$ = {entropy:.4f} nats)")
    a_loss.set_ylabel("CE − $\\mathcal{H}$ (nats)")
    a_norm.set_title("parameter norm")
    a_norm.set_ylabel("$\\|W_k\\|_F$")
    a_cos.set_title("alignment with $W^{mm}$")
    a_cos.set_ylabel("cosine")
    a_sub.set_title("subspace component")
    a_sub.set_ylabel("$\\|P_F(W_k) - W^*\\| / \\|W^*\\|$")
    for ax in (a_loss, a_norm, a_cos, a_sub):
        ax.set_xlabel("iteration k")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)


def next_token_examples(data: NTPData, contexts: Iterable[int], axes: np.ndarray | Sequence[Axes]) -> None:
    """Fig. 3: next-token distributions p̂_j of the given contexts as bar charts."""
    for ax, j in zip(np.ravel(axes), contexts, strict=False):
        p = data.probs[j].toarray().ravel()
        ax.bar(np.arange(data.V), p, color="0.35", edgecolor="black")
        ax.set_xticks(np.arange(data.V))
        ax.set_title(f"context {j}: $S_j$ = {{{','.join(map(str, data.supports[j]))}}}")
        ax.set_xlabel("token z")
        ax.set_ylabel("$\\hat p_{j,z}$")
        ax.set_ylim(0, 1)


def probe_figure(result) -> plt.Figure:
    """A language model's geometry on a text (:class:`embgeo.ntp.analysis.analyze.Analysis` of a model), three panels.

    (a) ‖w_v‖ against the next-token frequency f_v (log scale; tokens never seen as a next token apart, at
    the left edge); (b) the in-support logits against the log-odds, both centred per context (eq. (4) is the
    diagonal, which W* would reach); (c) the singular values of the logits L = H Wᵀ and of their off-support
    part, relative to the largest (the effective ranks in the legend). Black and grey markers only.
    """
    arr, lg = result.arrays, result.logits
    fig, (a_norm, a_odds, a_sv) = plt.subplots(1, 3, figsize=(14, 4.2))
    norms, freq = arr["row_norms"], arr["token_frequency"]
    seen = freq > 0
    a_norm.scatter(freq[seen], norms[seen], s=6, color="black", marker="o", label=f"next tokens ({seen.sum()})")
    if (~seen).any():
        left = freq[seen].min() / 3 if seen.any() else 1e-6
        a_norm.scatter(np.full((~seen).sum(), left), norms[~seen], s=6, color="0.6", marker="x",
                       label=f"never a next token ({(~seen).sum()}), drawn at the left")
    a_norm.set_xscale("log")
    rho = result.frequency.get("spearman_norm_frequency")
    a_norm.set_title("row norms of W against frequency" + (f" (Spearman {rho:.2f})" if rho == rho else ""))
    a_norm.set_xlabel("next-token frequency $f_v = \\sum_j \\hat\\pi_j \\hat p_{j,v}$")
    a_norm.set_ylabel("$\\|w_v\\|$")
    a_norm.legend(fontsize=8)

    logits_c, logp_c = arr["support_logits_centred"], arr["support_log_probs_centred"]
    multi = np.repeat(result.data.support_sizes > 1, result.data.support_sizes)
    if multi.any():
        a_odds.scatter(logp_c[multi], logits_c[multi], s=5, color="black", alpha=0.5, label="support entries")
        lo = float(min(logp_c[multi].min(), logits_c[multi].min()))
        hi = float(max(logp_c[multi].max(), logits_c[multi].max()))
        a_odds.plot([lo, hi], [lo, hi], color="0.5", linestyle="--", label="eq. (4): logits = log-odds")
        a_odds.legend(fontsize=8)
    else:
        a_odds.text(0.5, 0.5, "every context has one next token:\nno log-odds to fit", ha="center", va="center",
                    transform=a_odds.transAxes)
    res = lg.get("support_residual")
    a_odds.set_title("in-support logits vs log-odds" + (f" (relative residual {res:.2f})" if res == res else ""))
    a_odds.set_xlabel("$\\log \\hat p_{j,z}$, centred per context (nats)")
    a_odds.set_ylabel("logit $w_z^\\top h_j$, centred per context")

    s = arr["logit_singular_values"]
    if s.size and s[0] > 0:
        a_sv.semilogy(np.arange(1, s.size + 1), s / s[0], color="black", linestyle="-", marker="o", markevery=0.1,
                      markersize=4, label=f"logits L (effective rank {lg['effective_rank']:.1f})")
    if "rest_singular_values" in arr and arr["rest_singular_values"][0] > 0:
        r = arr["rest_singular_values"]
        label = f"off-support part (effective rank {lg['effective_rank_rest']:.1f})"
        a_sv.semilogy(np.arange(1, r.size + 1), np.maximum(r / r[0], 1e-17), color="0.5", linestyle="--", marker="s",
                      markevery=0.1, markersize=4, label=label)
    a_sv.set_title("spectrum of the logits")
    a_sv.set_xlabel("index i")
    a_sv.set_ylabel("singular value $s_i / s_1$")
    a_sv.legend(fontsize=8)
    for ax in (a_norm, a_odds, a_sv):
        ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return fig
