"""The attention paper's theory checks as experiments (``attention-trained-embeddings.txt``, Sec. 4).

So far one experiment (the others of the issue are open work):

* ``attention-one-step`` — Lemma 4.1 across d: one GD step moves E_s along v by (η0/2)·α_s.

The paper prints no numbers for these; the claims are its statements checked on finite runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from embgeo.attention.data import synthetic_levels
from embgeo.attention.model import OneLayerAttention
from embgeo.attention.train import embedding_update, lemma41_alpha, lemma41_bound, lemma41_slope
from embgeo.experiments.registry import Experiment, Result, at_most, holds, register


@dataclass
class OneStepConfig:
    """The K-level data of Fig. 2 (eqs. 14-16, corrected reading: |S| = 2048) at a smaller n and T."""

    dims: tuple = (64, 256, 1024, 4096)
    n: int = 1000
    T: int = 32
    eta0: float = 1.0
    seed: int = 0


def run_one_step(cfg: OneStepConfig) -> Result:
    """Lemma 4.1: slope of (E¹_s − E⁰_s)·v on α_s → η0/2, correlation → 1, error within 11·η0·d^(−1/4)."""
    data = synthetic_levels(cfg.n, seed=cfg.seed, T=cfg.T)
    n_tokens = int(data.levels.size)
    alpha = lemma41_alpha(data.X, data.y, n_tokens)
    rows = []
    for d in cfg.dims:
        model = OneLayerAttention(n_tokens, int(d), seed=cfg.seed)
        dE, _ = embedding_update(model, data.X, data.y, cfg.eta0)
        fit = lemma41_slope(dE, alpha, model.v)
        rows.append({"d": int(d), **fit, "bound": lemma41_bound(cfg.eta0, int(d))})
    slope_err = np.array([abs(r["slope"] / (cfg.eta0 / 2) - 1) for r in rows])
    corr = np.array([r["corr"] for r in rows])
    worst = max(r["max_residual_norm"] / r["bound"] for r in rows)
    claims = [
        holds("slope of the update on α_s → η0/2 as d grows (Lemma 4.1)", float(slope_err[-1]),
              bool(slope_err[-1] < slope_err[0]), theory=0.0,
              note="relative slope error at d = " + ", ".join(f"{r['d']}: {e:.3g}" for r, e in zip(rows, slope_err,
                                                                                                   strict=True))),
        holds("correlation of the update with α_s → 1 as d grows (Lemma 4.1)", float(corr[-1]),
              bool(np.all(np.diff(corr) > 0)), theory=1.0,
              note="correlation at each d: " + ", ".join(f"{c:.4f}" for c in corr)),
        at_most("worst error within the bound 11·η0·d^(−1/4) (Lemma 4.1)", float(worst), 1.0, theory="≤ 1",
                note="max over d of max_s ‖E¹_s − E⁰_s − (η0/2)α_s v‖ / bound"),
    ]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.3), layout="constrained")
    a.semilogx([r["d"] for r in rows], slope_err, "o-", color="C0", label="|slope/(η0/2) − 1|")
    a.semilogx([r["d"] for r in rows], 1 - corr, "s--", color="C1", label="1 − correlation")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("embedding dimension d")
    a.set_ylabel("error (dimensionless)")
    a.set_title("Lemma 4.1 across d")
    a.legend()
    model = OneLayerAttention(n_tokens, int(cfg.dims[-1]), seed=cfg.seed)
    dE, _ = embedding_update(model, data.X, data.y, cfg.eta0)
    v = model.v.detach().numpy()
    b.scatter(alpha, dE @ v / (v @ v), s=6, color="0.3", label="tokens")
    grid = np.linspace(alpha.min(), alpha.max(), 2)
    b.plot(grid, cfg.eta0 / 2 * grid, "k--", label="theory: slope η0/2")
    b.set_xlabel("signed frequency α_s")
    b.set_ylabel("(E¹_s − E⁰_s)·v / ‖v‖²")
    b.set_title(f"d = {cfg.dims[-1]}")
    b.legend()
    return Result(claims, {"lemma41": fig}, pd.DataFrame(rows))


register(Experiment("attention-one-step", "attention", "Lemma 4.1: one GD step aligns E_s with v in proportion to α_s",
                    OneStepConfig, run_one_step, {"paper": {"dims": (256, 1024, 4096, 16384), "n": 5000}},
                    "about 2 min (estimate)"))
