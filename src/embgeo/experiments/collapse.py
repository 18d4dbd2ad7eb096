"""The feature-collapse paper's figures and numbers as experiments (``feature-collapse.txt``).

Printed numbers carried as claims: the accuracy table (uniform 100/100, Zipf large 100/100,
Zipf small 45/100), the norms 1.41 ± 0.13 vs 1.42214 (K=1000) and 0.61 ± 0.06 vs 0.61602 (K=50),
and the PCA singular values 34.9 / 34.7 / 0.001 (W) and 34.9 / 34.6 / 0.0003 (U) of Fig. 3.
Theorems 2 and 3 are checked exactly on fully sampled instances by minimizing the population risk
(:mod:`embgeo.collapse.population`), where the closed forms must hold to solver precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from embgeo.collapse import figures
from embgeo.collapse.data import generate, make_freqs
from embgeo.collapse.metrics import (
    equiangular_distance,
    norm_frequency_correlation,
    norm_stats,
    pca_singular_values,
    variance_ratio,
)
from embgeo.collapse.model import CollapseNet, layer_norm
from embgeo.collapse.population import PopulationRisk, minimize_population_risk
from embgeo.collapse.theory import full_latent_space, type1_constants, type2_constants, type3_magnitudes
from embgeo.collapse.train import train
from embgeo.experiments.registry import (
    Experiment,
    Result,
    at_least,
    at_most,
    checkpoint_path,
    close,
    finished,
    register,
)

#: The paper's accuracy table (Sec. 3-4, %): (frequencies, n_spl) -> (h, h*).
PAPER_ACCURACY = {("uniform", 5): (100, 100), ("zipf", 500): (100, 100), ("zipf", 5): (45, 100)}


# -- collapse-theorem2/3: the exact population risk on a fully sampled instance --------------------

@dataclass
class FullySampledConfig:
    """K = n_c^L (every latent sequence once, Assumption 1 exact), Zipf frequencies, exact risk."""

    n_concepts: int = 3
    words_per_concept: int = 6
    length: int = 3
    dim: int = 8
    weight_decay: float = 1e-2
    seed: int = 0
    tol: float = 1e-9


def _minimize_exact(cfg: FullySampledConfig, layernorm: bool):
    """(μ, Z, W, U, gradient norm, iterations) of a minimizer of the exact risk of h or h*."""
    mu, _ = make_freqs("zipf", cfg.words_per_concept)
    Z = full_latent_space(cfg.n_concepts, cfg.length)
    risk = PopulationRisk(Z, mu, cfg.n_concepts, layernorm=layernorm,
                          weight_decay_W=0.0 if layernorm else cfg.weight_decay, weight_decay_U=cfg.weight_decay)
    return (mu, Z, *minimize_population_risk(risk, cfg.dim, seed=cfg.seed, tol=cfg.tol))


def run_theorem2(cfg: FullySampledConfig) -> Result:
    """Minimize the exact risk of h (Zipf, K = n_c^L) and compare with the Theorem 2 system (7)-(8)."""
    mu, Z, W, U, grad, iters = _minimize_exact(cfg, layernorm=False)
    theory = type3_magnitudes(mu, cfg.n_concepts, cfg.length, cfg.weight_decay)
    norms = np.linalg.norm(W, axis=1).reshape(cfg.n_concepts, cfg.words_per_concept)
    r_measured = norms.mean(axis=0)
    u_norms = np.linalg.norm(U, axis=2)
    concept = np.repeat(np.arange(cfg.n_concepts), cfg.words_per_concept)
    note = (f"exact population risk minimized by L-BFGS to gradient norm {grad:.1e} ({iters} iterations); "
            "tolerance: relative 1e-5, far above the solver's precision")
    claims = [
        close("word norms r_β solve the Theorem 2 system (max relative error)",
              float(np.max(np.abs(norms / theory.r - 1))), 0.0, 1e-5, theory=0.0, note=note),
        close("u-block norms equal c of Theorem 2 (max relative error)",
              float(np.max(np.abs(u_norms / theory.c - 1))), 0.0, 1e-5, theory=0.0, note=f"c = {theory.c:.6f}"),
        at_most("frequent words get larger embeddings: r_β decreasing in rank",
                float(np.max(np.diff(r_measured))), 0.0, theory="r_1 > r_2 > ...",
                note="max of r_{β+1} − r_β over ranks (must be < 0)"),
        at_most("directional collapse of W onto n_c equiangular directions",
                equiangular_distance(W / np.linalg.norm(W, axis=1, keepdims=True), concept), 1e-6, theory=0.0,
                note="distance of the normalized concept-mean Gram matrix of the unit word directions"),
    ]
    fig, ax = plt.subplots(figsize=(6, 4.3), layout="constrained")
    figures.norm_vs_frequency(mu, r_measured, ax, theory=theory.r, spread=norms.std(axis=0),
                              label="minimizer of the exact risk")
    ax.set_title(f"Theorem 2: n_c={cfg.n_concepts}, L={cfg.length}, K={len(Z)}, Zipf s_c={cfg.words_per_concept}, "
                 f"λ={cfg.weight_decay:g}", fontsize=9)
    return Result(claims, {"theorem2_norms": fig},
                  notes=[f"Smallness condition: λ = {cfg.weight_decay:g} < {theory.lambda_max:.4g}."])


def run_theorem3(cfg: FullySampledConfig) -> Result:
    """Minimize the exact risk of h* (Zipf, K = n_c^L): full collapse with c = τ*/√(KL) (Theorem 3)."""
    mu, Z, W, U, grad, iters = _minimize_exact(cfg, layernorm=True)
    const = type2_constants(cfg.n_concepts, cfg.length, len(Z), cfg.dim, cfg.weight_decay)
    phi = layer_norm(torch.tensor(W)).numpy()
    concept = np.repeat(np.arange(cfg.n_concepts), cfg.words_per_concept)
    u = U.reshape(-1, cfg.dim)
    z = Z.reshape(-1)
    note = f"exact risk minimized to gradient norm {grad:.1e} ({iters} L-BFGS iterations)"
    claims = [
        close("u-block norms equal c = τ*/√(KL) (max relative error)",
              float(np.max(np.abs(np.linalg.norm(u, axis=1) / const.c - 1))), 0.0, 1e-5, theory=0.0,
              note=f"c = {const.c:.6f}; " + note),
        at_most("word representations φ(w) collapse whatever the frequency (variance ratio)",
                variance_ratio(phi, concept), 1e-8, theory=0.0, note="within/between-concept variance of φ(W)"),
        at_most("φ(w) concept means are equiangular", equiangular_distance(phi, concept), 1e-6, theory=0.0),
        at_most("u_{k,ℓ} collapse by concept z_{k,ℓ}", variance_ratio(u, z), 1e-8, theory=0.0),
    ]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.3), layout="constrained")
    figures.pca_scatter(phi, concept, a, "φ(W): LayerNormed word representations")
    figures.pca_scatter(u, z, b, "$u_{k,ℓ}$ coloured by $z_{k,ℓ}$")
    return Result(claims, {"theorem3_pca": fig})


# -- SGD experiments: Figs. 3-4 and the norm check ------------------------------------------------

@dataclass
class SGDConfig:  # noqa: D101 - documented below
    """One training run of h or h* on the paper's data model (digest §5.1 protocol).

    The defaults are the quick scale; the ``paper`` presets set the paper's sizes. ``paper_numbers``
    adds the claims that compare with the printed numbers (only meaningful at the paper's sizes).
    """

    n_concepts: int = 3
    words_per_concept: int = 40  # quick: ~67 draws per word, as in the paper (62)
    length: int = 8
    n_classes: int = 200
    dim: int = 32
    freqs: str = "uniform"
    n_train_per_class: int = 5
    n_test_per_class: int = 5
    latent: str = "distinct"  # quick: a small latent space; the paper preset draws at random as the paper
    layernorm: bool = False
    ln_eps: float = 1e-5
    epochs: int = 2000
    epochs_hstar: int = 0  # Fig. 3's h* run (0: a third of ``epochs``); the paper preset uses Fig. 4c's 500
    lr: float = 0.1
    batch_size: int = 100
    weight_decay_W: float = 1e-3
    weight_decay_U: float = 1e-3
    seed: int = 0
    log_every: int = 50
    paper_numbers: bool = False


def _train(cfg: SGDConfig):
    """Generate the data, train the network, return (data, model, trace DataFrame)."""
    data = generate(cfg.n_concepts, cfg.words_per_concept, cfg.length, cfg.n_classes, freqs=cfg.freqs,
                    n_train_per_class=cfg.n_train_per_class, n_test_per_class=cfg.n_test_per_class,
                    latent=cfg.latent, seed=cfg.seed)
    model = CollapseNet(data.n_words, cfg.dim, cfg.length, cfg.n_classes, layernorm=cfg.layernorm,
                        ln_eps=cfg.ln_eps if cfg.layernorm else 0.0, seed=cfg.seed)
    trace = train(model, data, cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size, weight_decay_W=cfg.weight_decay_W,
                  weight_decay_U=cfg.weight_decay_U, seed=cfg.seed, log_every=cfg.log_every, progress=True,
                  checkpoint=checkpoint_path("sgd", cfg))
    return data, model, finished(trace).to_frame()


def _scatter_figure(data, model, df, title: str):
    """The paper's two PCA panels (W or φ(W) by concept; u_{k,ℓ} by z_{k,ℓ}) and the accuracy curves."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), layout="constrained")
    name = "φ(W) (LayerNormed)" if model.layernorm else "W"
    figures.pca_scatter(model.word_representations(), data.word_concept, axes[0], f"{title}: words, {name}")
    figures.pca_scatter(model.u_blocks().reshape(-1, model.dim), data.latent.reshape(-1), axes[1],
                        f"{title}: $u_{{k,ℓ}}$ by $z_{{k,ℓ}}$")
    figures.accuracy_curves(df, axes[2], f"{title}: accuracy")
    return fig


def _accuracy_claims(cfg: SGDConfig, df, net: str) -> list:
    """The accuracy table entry of this run: the paper's number (paper scale) or its phenomenon."""
    acc = 100 * float(df["test_acc"].iloc[-1])
    best = 100 * float(df["test_acc"].max())
    paper = PAPER_ACCURACY.get((cfg.freqs, cfg.n_train_per_class), (None, None))[1 if cfg.layernorm else 0]
    note = f"final test accuracy {acc:.1f}% (best {best:.1f}%) after {cfg.epochs} epochs"
    if cfg.paper_numbers and paper is not None:
        # The paper prints whole percents; its 45% is one run (the authors' notebook ends at 43.7%, a
        # re-run at 46.4%), so that entry gets ±3 points, the others their printed precision.
        tol = 3.0 if paper == 45 else 0.5
        return [close(f"{net} test accuracy (paper's table)", acc, paper, tol, paper=paper, note=note)]
    if paper == 45:
        return [at_most(f"{net} does not generalize: test accuracy well below 100% (paper: 45%)", acc, 90.0,
                        paper=paper, note=note + "; quick scale: the phenomenon, not the number")]
    where = f" (paper: {paper}%)" if paper is not None else ""
    return [at_least(f"{net} generalizes: test accuracy 100%{where}", acc, 99.5, paper=paper,
                     note=note + "; 99.5 is the printed precision of 100%")]


def _norm_claims(cfg: SGDConfig, model, printed=None) -> tuple[list, str]:
    """‖w‖ mean ± std against c = √(τ/n_w) of Theorem 1 (uniform frequencies, network h)."""
    const = type1_constants(cfg.n_concepts, cfg.n_concepts * cfg.words_per_concept, cfg.length, cfg.n_classes,
                            cfg.weight_decay_W)
    mean, std = norm_stats(model.word_embeddings())
    if printed is not None and cfg.paper_numbers:
        paper_mean, paper_std = printed
        claim = close("mean word-embedding norm vs Theorem 1's c", mean, const.c, paper_std, paper=paper_mean,
                      theory=const.c, note=f"measured {mean:.3f} ± {std:.3f}; tolerance: the paper's spread "
                                            f"±{paper_std} over words")
    else:
        claim = close("mean word-embedding norm vs Theorem 1's c", mean, const.c, std, paper=None if printed is None
                      else printed[0], theory=const.c, note=f"measured {mean:.3f} ± {std:.3f}; tolerance: the "
                                                             "measured spread over words (as the paper's ±)")
    return [claim], f"Theorem 1: τ = {const.tau:.4g}, c = {const.c:.5f}, c' = {const.c_prime:.5f}"


def _pca_claims(cfg: SGDConfig, model, data) -> list:
    """Fig. 3's PCA singular values of W and of the u_{k,ℓ} against √(τ/2), √(τ/2), 0 (Theorem 1)."""
    const = type1_constants(cfg.n_concepts, cfg.n_concepts * cfg.words_per_concept, cfg.length, cfg.n_classes,
                            cfg.weight_decay_W)
    target = float(np.sqrt(const.tau / 2))
    claims = []
    printed = {"W": (34.9, 34.7, 0.001), "U": (34.9, 34.6, 0.0003)}
    for name, X in (("W", model.word_embeddings()), ("U", model.u_blocks().reshape(-1, cfg.dim))):
        s = pca_singular_values(X)
        paper = printed[name] if cfg.paper_numbers else (None, None, None)
        for i in (0, 1):
            claims.append(close(f"PCA σ{i + 1} of {name} = √(τ/2)", float(s[i]), target, 0.01, relative=True,
                                paper=paper[i], theory=target,
                                note="tolerance 1%: the paper's printed values deviate from √(τ/2) by up to 0.7%"))
        if cfg.paper_numbers:  # the printed σ3, at its printed precision
            claims.append(close(f"PCA σ3 of {name} (Fig. 3)", float(s[2]), paper[2], paper[2] / 2, paper=paper[2],
                                theory=0.0, note="the authors' own saved notebook run reached σ3 ≈ 0.18 after "
                                                 "1200 epochs (digest), far from the printed value"))
        else:
            claims += _plane_claim(f"{name} collapses onto a plane (σ3/σ1)", X)
    return claims


#: The largest σ3/σ1 among the runs the authors show as collapsed: their Fig. 4c notebook printed
#: σ = 238.7 / 237.5 / 5.23 for LN(W) (digest, appendix). A run "collapses onto the n_c − 1 = 2
#: dimensional simplex" by the paper's own standard when σ3/σ1 is at most this.
COLLAPSED_SIGMA_RATIO = 5.23 / 238.7


def _plane_claim(name: str, X, collapsed: bool = True) -> list:
    """σ3/σ1 of the rows of X against the paper's own collapse standard (n_c = 3)."""
    s = pca_singular_values(X)
    ratio = float(s[2] / s[0])
    note = (f"σ = {s[0]:.4g} / {s[1]:.4g} / {s[2]:.3g}; threshold: the authors' Fig. 4c run, "
            f"σ3/σ1 = {COLLAPSED_SIGMA_RATIO:.4f}")
    if collapsed:
        return [at_most(name, ratio, COLLAPSED_SIGMA_RATIO, theory=0.0, note=note)]
    return [at_least(name, ratio, COLLAPSED_SIGMA_RATIO, note=note)]


def run_uniform(cfg: SGDConfig) -> Result:
    """Fig. 3: h and h* on uniform frequencies; norms and PCA values against Theorem 1."""
    data, model, df = _train(cfg)
    claims = _accuracy_claims(cfg, df, "h")
    norm_claims, note = _norm_claims(cfg, model, printed=(1.41, 0.13))
    claims += norm_claims + _pca_claims(cfg, model, data)
    ln_epochs = cfg.epochs_hstar or max(1, cfg.epochs // 3)
    ln_cfg, data_ln, model_ln, df_ln = _train_hstar(cfg, ln_epochs)
    claims += _accuracy_claims(ln_cfg, df_ln, "h*")
    claims += _plane_claim("h*: word representations φ(w) collapse (σ3/σ1)", model_ln.word_representations())
    figs = {"fig3_h": _scatter_figure(data, model, df, "h, uniform"),
            "fig3_hstar": _scatter_figure(data_ln, model_ln, df_ln, "h*, uniform")}
    trace = pd.concat([df.assign(net="h"), df_ln.assign(net="h*")], ignore_index=True)
    return Result(claims, figs, trace, [note, f"h* is trained for {ln_epochs} epochs (Fig. 4c's 500 at paper scale, "
                                              "a third of h's at quick scale): LayerNorm escapes the "
                                              "small-initialization plateau at once (digest §7.1)."])


def _train_hstar(cfg: SGDConfig, epochs: int):
    """h* on the same data as ``cfg``: LayerNorm, no weight decay on W (Fig. 4c's settings).

    The official notebooks have no h* run on uniform or large Zipf data, whose accuracies the
    paper's table prints; the digest (§5) infers Fig. 4c's settings. Returns (cfg, data, model, frame).
    """
    ln_cfg = SGDConfig(**{**cfg.__dict__, "layernorm": True, "weight_decay_W": 0.0, "epochs": epochs})
    return (ln_cfg, *_train(ln_cfg))


def run_zipf_large(cfg: SGDConfig) -> Result:
    """Fig. 4a: h on the large Zipf training set: directional collapse of W, norms grow with frequency.

    Also h* on the same data, for the accuracy table's h* entry (100%), trained for as many epochs.
    """
    data, model, df = _train(cfg)
    W = model.word_embeddings()
    unit = W / np.linalg.norm(W, axis=1, keepdims=True)
    claims = _accuracy_claims(cfg, df, "h")
    claims.append(at_least("word norm increases with frequency (Theorem 2, type III)",
                           norm_frequency_correlation(W, data.freqs[data.word_rank]), 0.5, theory=1.0,
                           note="Spearman correlation of ‖w‖ with μ_β"))
    claims += _plane_claim("directions of W collapse (σ3/σ1 of w/‖w‖)", unit)
    claims += _plane_claim("u_{k,ℓ} collapse (σ3/σ1)", model.u_blocks().reshape(-1, cfg.dim))
    ln_cfg, data_ln, model_ln, df_ln = _train_hstar(cfg, cfg.epochs_hstar or cfg.epochs)
    claims += _accuracy_claims(ln_cfg, df_ln, "h*")
    s = pca_singular_values(model_ln.word_representations())
    figs = {"fig4a": _scatter_figure(data, model, df, "h, Zipf, large n_spl"),
            "fig4a_hstar": _scatter_figure(data_ln, model_ln, df_ln, "h*, Zipf, large n_spl")}
    trace = pd.concat([df.assign(net="h"), df_ln.assign(net="h*")], ignore_index=True)
    return Result(claims, figs, trace, [f"h*: {ln_cfg.epochs} epochs; PCA σ of φ(W) = {s[0]:.4g} / {s[1]:.4g} / "
                                        f"{s[2]:.3g} (Theorem 3 predicts full collapse, σ3 = 0)"])


def run_zipf_small(cfg: SGDConfig) -> Result:
    """Fig. 4b (h) or 4c (h*): Zipf with few samples per class."""
    data, model, df = _train(cfg)
    net = "h*" if cfg.layernorm else "h"
    claims = _accuracy_claims(cfg, df, net)
    u = model.u_blocks().reshape(-1, cfg.dim)
    if cfg.layernorm:
        claims += _plane_claim("h*: u_{k,ℓ} collapse (Fig. 4c, σ3/σ1)", u)
    else:
        claims += _plane_claim("h: u_{k,ℓ} stay dispersed (Fig. 4b, σ3/σ1)", u, collapsed=False)
    label = "fig4c" if cfg.layernorm else "fig4b"
    return Result(claims, {label: _scatter_figure(data, model, df, f"{net}, Zipf, n_spl={cfg.n_train_per_class}")},
                  df)


def run_norms(cfg: SGDConfig) -> Result:
    """The K=50, n_spl=100 norm check of Sec. 3: 0.61 ± 0.06 measured vs 0.61602 predicted."""
    data, model, df = _train(cfg)
    claims, note = _norm_claims(cfg, model, printed=(0.61, 0.06))
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    norms = np.linalg.norm(model.word_embeddings(), axis=1)
    const = type1_constants(cfg.n_concepts, data.n_words, cfg.length, cfg.n_classes, cfg.weight_decay_W)
    ax.hist(norms, bins=40, color="0.5", edgecolor="black")
    ax.axvline(const.c, color="k", linestyle="--", label=f"Theorem 1: c = {const.c:.5f}")
    ax.set_xlabel("word-embedding norm ‖w‖")
    ax.set_ylabel("number of words")
    ax.legend()
    return Result(claims, {"norms": fig}, df, [note])


_PAPER = {"words_per_concept": 400, "length": 15, "n_classes": 1000, "dim": 100, "paper_numbers": True,
          "latent": "random"}
# Quick Fig. 3 is the fully sampled case (all 3^5 = 243 latent sequences), where Assumption 1 holds
# exactly: with K = 200 random or distinct latents the concept counts per position are unbalanced
# and σ2 sits 2% below √(τ/2). It uses n_spl = 20: five samples per class leave SGD at a partly
# collapsed empirical minimizer at this size (σ3/σ1 ≈ 0.06); twenty show the collapse.
register(Experiment("collapse-uniform", "collapse", "Fig. 3: h and h* on uniform frequencies (n_spl=5)",
                    SGDConfig, run_uniform, {"quick": {"n_train_per_class": 20, "epochs": 1000, "latent": "all",
                                                       "length": 5, "n_classes": 243},
                                             "paper": {**_PAPER, "epochs": 1200, "epochs_hstar": 500,
                                                       "log_every": 100}},
                    "about 35 min"))
register(Experiment("collapse-zipf-large", "collapse", "Fig. 4a: h on Zipf frequencies, n_spl=500",
                    SGDConfig, run_zipf_large,
                    {"quick": {"freqs": "zipf", "n_train_per_class": 500, "epochs": 10, "log_every": 1},
                     "paper": {**_PAPER, "freqs": "zipf", "n_train_per_class": 500, "epochs": 10, "log_every": 1}},
                    "about 20 min"))
register(Experiment("collapse-zipf-small", "collapse", "Fig. 4b: h on Zipf frequencies, n_spl=5 (fails to generalize)",
                    SGDConfig, run_zipf_small, {"quick": {"freqs": "zipf", "words_per_concept": 100, "epochs": 3000,
                                                          "log_every": 100},
                                                "paper": {**_PAPER, "freqs": "zipf", "epochs": 3000,
                                                          "log_every": 100}},
                    "about 60 min"))
# Quick Fig. 4c keeps the paper's K, L, d and random latents with s_c = 40 and 50 epochs: at K=200,
# L=8, d=32 the u_{k,ℓ} stop at σ3/σ1 ≈ 0.022-0.11 whatever the epochs (more epochs: worse), short
# of the authors' standard; here 0.0127 (seeds 0 and 1) in about a minute.
register(Experiment("collapse-zipf-small-ln", "collapse", "Fig. 4c: h* (LayerNorm) on Zipf frequencies, n_spl=5",
                    SGDConfig, run_zipf_small,
                    {"quick": {"freqs": "zipf", "layernorm": True, "weight_decay_W": 0.0, "epochs": 50,
                               "n_classes": 1000, "length": 15, "dim": 100, "latent": "random"},
                     "paper": {**_PAPER, "freqs": "zipf", "layernorm": True, "weight_decay_W": 0.0, "epochs": 500}},
                    "about 10 min"))
register(Experiment("collapse-norms", "collapse", "Sec. 3 norm check: K=50, n_spl=100, uniform",
                    SGDConfig, run_norms,
                    {"quick": {"n_classes": 50, "n_train_per_class": 100, "epochs": 300},
                     "paper": {**_PAPER, "n_classes": 50, "n_train_per_class": 100, "epochs": 1200}},
                    "about 5 min"))
register(Experiment("collapse-theorem2", "collapse",
                    "Theorem 2: embedding norm vs frequency on a fully sampled Zipf instance (exact risk)",
                    FullySampledConfig, run_theorem2, {"paper": {"length": 4, "words_per_concept": 10, "dim": 12}},
                    "about 7 min"))
register(Experiment("collapse-theorem3", "collapse",
                    "Theorem 3: h* collapses fully (type II) on a fully sampled Zipf instance (exact risk)",
                    FullySampledConfig, run_theorem3, {"paper": {"length": 4, "words_per_concept": 10, "dim": 12}},
                    "about 10 min (estimate)"))
