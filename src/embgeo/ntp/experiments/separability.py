"""Where NTP-separability sets in (the NTP paper's Remark 1): a sweep over (m, d, V, S), and its phase diagram.

Lemma 1 shows that d > m suffices for NTP-separability; Remark 1 leaves open where it really sets in.
``ntp-separability-point`` is one grid point: ``trials`` random instances (Gaussian embeddings,
uniformly random supports of size S out of V tokens; :mod:`embgeo.ntp.measure.phase`) at one (m, d, V, S),
counted as separable and compatible. ``ntp-separability`` runs those points as a sweep into a run
store (:mod:`embgeo.lab.sweep`: Dask, resumable) and reads the store back to draw the fraction of
separable instances against d/m, with binomial intervals and the probit 50 % threshold per (S, V, m).

The anchor of the method: S = 1, V = 2 is homogeneous linear separability of m Gaussian points with
random labels, whose probability is Cover's (1965) exact count 2^(1-m) Σ_{k<d} C(m-1, k): 1/2 at d/m = 1/2
for every even m. The thresholds for S > 1 are this experiment's own measurement; no paper states them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from embgeo.errors import InputError
from embgeo.lab.claims import Claim, as_check, at_least, holds
from embgeo.lab.context import DETACHED, RunContext
from embgeo.lab.registry import Experiment, Result
from embgeo.lab.store import RunStore
from embgeo.lab.sweep import make_points, run_sweep
from embgeo.ntp.experiments.settings import NTP_CONSTRAINTS, check_support_within_vocabulary

if TYPE_CHECKING:
    import pandas as pd

# matplotlib.pyplot, pandas, scipy.stats and the phase module (scipy.optimize) are imported inside the functions
# that use them: every command imports this module (`embgeo list` and every refusal read the registry), and only a
# run needs them (issue 37).

#: This module's experiments (:data:`embgeo.ntp.experiments.PAPER` lists them).
EXPERIMENTS: list[Experiment] = []
register = EXPERIMENTS.append

#: Level of every binomial and threshold interval.
LEVEL = 0.95
#: A curve agrees with Cover's when the χ² goodness-of-fit p-value over its grid points is above this.
GOF_LEVEL = 0.01


@dataclass
class SeparabilityPointConfig:
    """One grid point: ``trials`` instances with d = round(ratio · m) (at least 1)."""

    constraints: ClassVar[dict] = NTP_CONSTRAINTS  # ranges of the settings (embgeo.lab.settings)

    m: int = 40
    ratio: float = 0.5
    V: int = 2
    S: int = 1
    trials: int = 40
    seed: int = 0

    def check(self, name: str) -> None:
        """The support within the vocabulary (:mod:`embgeo.lab.settings`)."""
        check_support_within_vocabulary(name, "S", self.S, self.V)


def point_dimension(m: int, ratio: float) -> int:
    """The embedding dimension d of a grid point: round(ratio · m), at least 1."""
    return max(1, int(round(ratio * m)))


def run_point(cfg: SeparabilityPointConfig, ctx: RunContext = DETACHED) -> Result:
    """Count separable / compatible instances at one (m, d, V, S); the counts are the run's scalars."""
    from embgeo.ntp.measure import phase

    if cfg.m < 2 or cfg.trials < 1 or not cfg.ratio > 0:
        raise InputError(f"ntp-separability-point: need m >= 2, trials >= 1 and ratio > 0, got m={cfg.m}, "
                         f"trials={cfg.trials}, ratio={cfg.ratio}")
    d = point_dimension(cfg.m, cfg.ratio)
    # One stream per (seed, sizes): grid points of one sweep draw independent instances.
    seed = int(np.random.SeedSequence([cfg.seed, cfg.m, d, cfg.V, cfg.S]).generate_state(1)[0])
    # Above d = m, "auto" would decide by Lemma 1's own rank test, which cannot fail the claim it checks: the LP.
    counts = phase.trials(cfg.m, d, cfg.V, cfg.S, cfg.trials, seed, method="lp" if d > cfg.m else "auto")
    claims = []
    if d > cfg.m:
        claims.append(holds("d > m: every instance is NTP-separable (Lemma 1)", f"{counts['separable']}/{counts['n']}",
                            counts["separable"] == counts["n"], note="decided by the LP, not by Lemma 1's rank test"))
    scalars = {"d": d, "ratio_exact": d / cfg.m, **{k: counts[k] for k in ("n", "separable", "compatible", "both")},
               "solver_seconds": counts["seconds"]}
    return Result(claims, scalars=scalars)


@dataclass
class SeparabilityConfig:
    """The phase diagram: every m × d/m × (S, V) family, ``trials`` instances per grid point.

    ``supports`` and ``vocabularies`` pair up: family i has S = supports[i], V = vocabularies[i].
    How the sweep runs is not a setting of the science: the run's context says it (``embgeo run
    ntp-separability --workers N --scheduler ADDR --threads T``; the store is ``store.sqlite`` in the
    run's folder, so an interrupted diagram resumes its sweep).
    """

    constraints: ClassVar[dict] = NTP_CONSTRAINTS  # ranges of the settings (embgeo.lab.settings)

    ms: tuple = (20, 40)
    ratios: tuple = (0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)
    supports: tuple = (1, 1, 3)
    vocabularies: tuple = (2, 8, 8)
    trials: int = 40
    seed: int = 0

    def check(self, name: str) -> None:
        """Supports and vocabularies pair up, each support within its vocabulary (:mod:`embgeo.lab.settings`)."""
        s, v = self.supports, self.vocabularies
        if len(s) != len(v) or any(a > b for a, b in zip(s, v, strict=False)):
            raise InputError(f"{name}: settings supports = {list(s)} and vocabularies = {list(v)}: expected lists of "
                             "one length with each support <= its vocabulary")


def _families(cfg: SeparabilityConfig) -> list[tuple[int, int]]:
    if len(cfg.supports) != len(cfg.vocabularies) or not cfg.supports:
        raise InputError(f"ntp-separability: supports and vocabularies must pair up, got {cfg.supports} and "
                         f"{cfg.vocabularies}")
    return [(int(s), int(v)) for s, v in zip(cfg.supports, cfg.vocabularies, strict=True)]


def sweep_points(cfg: SeparabilityConfig, runs_dir: Path) -> list:
    """The sweep's points (experiment ``ntp-separability-point``), one per m × ratio × family."""
    settings = [{"m": m, "ratio": r, "S": s, "V": v, "trials": cfg.trials, "seed": cfg.seed}
                for s, v in _families(cfg) for m in cfg.ms for r in cfg.ratios]
    return make_points("ntp-separability-point", settings, runs_dir=runs_dir)


def counts_table(store, keys: list[str]) -> pd.DataFrame:
    """The sweep's counts from the store: one row per point (m, d, ratio = d/m, S, V, n, separable, ...).

    A point that failed is an error here (its traceback's last line quoted): the diagram needs all.
    """
    import pandas as pd

    with RunStore(store) as st:
        rows = [st.get(k) for k in keys]
    missing = [r for r in rows if r is None or r["status"] != "done"]
    if missing:
        bad = next((r for r in missing if r is not None and r.get("error")), None)
        why = f": {bad['error'].strip().splitlines()[-1]}" if bad else ""
        raise RuntimeError(f"{len(missing)} of {len(keys)} sweep points are not done in {store}{why}")
    table = pd.DataFrame([{**r["config"], **r["scalars"]} for r in rows])
    table["ratio"] = table["d"] / table["m"]
    return table.sort_values(["S", "V", "m", "d"]).reset_index(drop=True)


#: χ²'s validity rule: a grid point enters the goodness of fit only with expected counts of at least this many
#: separable and non-separable instances. Points with a tiny expected count would each add far less than
#: their expected 1 to χ² nearly always, and make the test pass whatever the curve.
MIN_EXPECTED = 5


def cover_fit(table: pd.DataFrame) -> tuple[float, int]:
    """χ² goodness of fit of separable counts to Cover's exact probabilities: (p-value, points used).

    Only points with n·P ≥ 5 and n·(1 − P) ≥ 5 enter (:data:`MIN_EXPECTED`); the others, P near 0 or 1,
    are where the χ² approximation fails.
    """
    from scipy import stats

    from embgeo.ntp.measure import phase

    p = np.array([phase.cover_probability(int(m), int(d)) for m, d in zip(table["m"], table["d"], strict=True)])
    n, k = table["n"].to_numpy(float), table["separable"].to_numpy(float)
    inside = (n * p >= MIN_EXPECTED) & (n * (1 - p) >= MIN_EXPECTED)
    if not inside.any():
        return float("nan"), 0
    chi2 = float(np.sum((k[inside] - n[inside] * p[inside]) ** 2 / (n[inside] * p[inside] * (1 - p[inside]))))
    return float(stats.chi2.sf(chi2, int(inside.sum()))), int(inside.sum())


def thresholds(table: pd.DataFrame, column: str = "separable") -> pd.DataFrame:
    """Per (S, V, m): the probit 50 % threshold of ``column`` in d/m with its interval and 10–90 % width."""
    import pandas as pd

    from embgeo.ntp.measure import phase

    out = []
    for (s, v, m), g in table.groupby(["S", "V", "m"]):
        row = {"S": s, "V": v, "m": m}
        try:
            t = phase.threshold(g["ratio"], g[column], g["n"], level=LEVEL)
            row.update(threshold=t.ratio, low=t.low, high=t.high, width=t.width, converged=t.converged,
                       decrement=t.decrement)
        except InputError as exc:  # all 0 or all 1: no transition inside the grid
            row.update(threshold=np.nan, low=np.nan, high=np.nan, width=np.nan, converged=False,
                       decrement=np.nan, why=str(exc))
        out.append(row)
    return pd.DataFrame(out)


def run_separability(cfg: SeparabilityConfig, ctx: RunContext = DETACHED) -> Result:
    """Sweep the grid into the store (``store.sqlite`` in the run's folder), read it back, draw the phase diagram
    and check the anchors. The sweep runs as the context says (workers, scheduler, threads per point)."""
    run_dir = ctx.folder("ntp-separability")
    points = sweep_points(cfg, run_dir / "points")
    inside = _inside_dask_worker()  # a worker cannot start a cluster: its points run inline
    run_sweep(points, run_dir / "store.sqlite", workers=None if inside else ctx.workers,
              scheduler="inline" if inside else ctx.scheduler, threads=ctx.threads, sweep="ntp-separability")
    table = counts_table(run_dir / "store.sqlite", [p.key for p in points])
    sep, comp = thresholds(table), thresholds(table, "compatible")
    claims, notes = _claims(table, sep), _notes(table, sep, comp)
    figures = {"phase_diagram": _phase_figure(table, sep), "thresholds": _threshold_figure(sep)}
    trace = table.merge(sep, on=["S", "V", "m"], how="left", suffixes=("", "_threshold"))
    return Result(claims, figures, trace=trace, notes=notes)


def _inside_dask_worker() -> bool:
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def _claims(table: pd.DataFrame, sep: pd.DataFrame) -> list:
    claims = []
    over = table[table["d"] > table["m"]]
    if len(over):
        n, k = int(over["n"].sum()), int(over["separable"].sum())
        claims.append(holds("d > m: every instance NTP-separable (Lemma 1)", f"{k}/{n}", k == n,
                            theory="all", note=f"{len(over)} grid points with d > m; decided by the LP, not by "
                                               "Lemma 1's rank test"))
    cover = table[(table["S"] == 1) & (table["V"] == 2)]
    for m, g in cover.groupby("m"):
        row = sep[(sep["S"] == 1) & (sep["V"] == 2) & (sep["m"] == m)].iloc[0]
        claims.append(_threshold_claim(
            f"S=1, V=2, m={m}: Cover's 1/2 inside the {LEVEL:.0%} interval of the 50% threshold", row,
            lambda r: r["low"] <= 0.5 <= r["high"], theory=0.5,
            note="measured: threshold d*/m, interval low, high (probit fit, profile likelihood)"))
        pval, used = cover_fit(g)
        claims.append(at_least(f"S=1, V=2, m={m}: separable fraction follows Cover's exact curve (χ² p-value)",
                               pval, GOF_LEVEL, theory="2^(1-m) Σ_{k<d} C(m-1,k)",
                               note=f"χ² over the {used} grid points with n·P and n·(1 − P) ≥ {MIN_EXPECTED}, each of "
                                    f"n={int(g['n'].iloc[0])}"))
    if len(cover):
        claims.append(one_hot_check(int(cover["m"].min())))
    rest = sep[~((sep["S"] == 1) & (sep["V"] == 2))]
    if len(rest):
        claims.append(_below_d_equals_m(rest))
    return claims


def one_hot_check(m: int, seed: int = 0) -> Claim:
    """Remark 1's reduction read back on an S = 1, V = 2 instance of the sweep (d = m/2): F = {0} (no two tokens share
    a support, so (5) spans nothing) and 𝓗 = 0 (every p̂_j is one-hot). Both restate the definitions: a check. What
    the remark says of separability — it becomes ordinary linear separability — is the Cover claims above."""
    from embgeo.ntp.measure import phase
    from embgeo.ntp.theory import entropy, subspace

    data = phase.random_instance(m, max(1, m // 2), 2, 1, seed)
    dim, h = subspace(data).dim, entropy(data)
    return as_check(holds("S_j = 1: F = {0} and 𝓗 = 0 (Remark 1)", dim, dim == 0 and h == 0.0, theory=0,
                          note=f"dim F = {dim}, 𝓗 = {h:g} on one instance (m = {m}, d = {max(1, m // 2)})"),
                    "both follow from the definitions when every support has one token")


def _below_d_equals_m(rows: pd.DataFrame):
    """One consistency check over the grid points beyond Cover's case: the certified 50 % threshold's interval lies
    below d = m. It restates Lemma 1 (d > m suffices) being sufficient and not necessary, which no paper states as a
    result (and ``ntp-overparam`` checks): not counted, one line rather than one per point. Uncertified fits decide
    nothing and are named."""
    certified = rows[rows["converged"].astype(bool)]
    below = certified[certified["high"] < 1]
    named = lambda df: ", ".join(f"S={r.S} V={r.V} m={r.m}" for r in df.itertuples()) or "none"  # noqa: E731
    ok = None if certified.empty else len(below) == len(certified)
    note = (f"threshold intervals (d*/m) of the certified fits above 1: {named(certified[certified['high'] >= 1])}; "
            f"fits not certified (undecided): {named(rows[~rows['converged'].astype(bool)])}")
    claim = Claim("separability sets in below d = m at every grid point beyond Cover's case (certified fits)",
                  f"{len(below)}/{len(certified)}", ok, None, "all", "exact statement", note)
    return as_check(claim, "Lemma 1's d > m is sufficient, not necessary: a restatement, not a result of the papers "
                           "(ntp-overparam checks Lemma 1 itself)")


def _threshold_claim(name: str, row, statement, *, theory=None, note: str = ""):
    """A claim on a fitted threshold: ``statement(row)`` when the fit is certified the maximum with a finite
    interval (``row["converged"]``, :func:`embgeo.ntp.measure.phase.threshold`), else undecided, saying why — an
    uncertified fit decides nothing either way."""
    measured = [row["threshold"], row["low"], row["high"]]
    if row["converged"]:
        return holds(name, measured, bool(statement(row)), theory=theory, note=note)
    why = row.get("why") if isinstance(row.get("why"), str) else (
        f"the probit fit is not certified (Newton decrement {row.get('decrement', float('nan')):.1e} nats, or ŝ at "
        "its bound, or an open interval)")
    return Claim(name, measured, None, None, theory, "exact statement", f"undecided: {why}; {note}")


def _notes(table: pd.DataFrame, sep: pd.DataFrame, comp: pd.DataFrame) -> list[str]:
    notes = [f"{len(table)} grid points, {int(table['n'].sum())} instances; intervals are {LEVEL:.0%} "
             "(Clopper–Pearson per point, profile likelihood for thresholds)."]
    for (s, v), g in sep.groupby(["S", "V"]):
        parts = [f"m={r.m}: d*/m = {r.threshold:.3f} [{r.low:.3f}, {r.high:.3f}], 10–90% width {r.width:.3f}"
                 for r in g.itertuples() if np.isfinite(r.threshold)]
        slope = width_exponent(g)
        scaling = (f"; width ∝ m^{slope:.2f} over m = {', '.join(str(m) for m in g['m'])} (Cover: m^-0.5)"
                   if np.isfinite(slope) else "")
        notes.append(f"S={s}, V={v} separability: " + "; ".join(parts or ["no transition inside the grid"]) + scaling)
    for (s, v), g in comp.groupby(["S", "V"]):
        sub = table[(table["S"] == s) & (table["V"] == v)]
        if (sub["compatible"] == sub["n"]).all():
            notes.append(f"S={s}, V={v}: every instance NTP-compatible at every d/m of the grid.")
        else:
            parts = [f"m={r.m}: {r.threshold:.3f} [{r.low:.3f}, {r.high:.3f}]" for r in g.itertuples()
                     if np.isfinite(r.threshold)]
            notes.append(f"S={s}, V={v} compatibility threshold: " + "; ".join(parts or ["not inside the grid"]))
    return notes


def _phase_figure(table: pd.DataFrame, sep: pd.DataFrame):
    import matplotlib.pyplot as plt
    from scipy import stats

    from embgeo.ntp.measure import phase

    families = list(table.groupby(["S", "V"]).groups)
    # At most three panels a row (four families: 2 x 2), so the figure is not scaled down to unreadable text
    # in the report; each m has its own marker as well as its colour (grayscale).
    nrows = int(np.ceil(len(families) / 3))
    ncols = int(np.ceil(len(families) / nrows))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.8 * nrows), squeeze=False, sharey=True)
    for ax in axes.flat[len(families):]:
        fig.delaxes(ax)
    markers = ["o", "s", "^", "D", "v", "x"]
    for ax, (s, v) in zip(axes.flat, families, strict=False):
        sub = table[(table["S"] == s) & (table["V"] == v)]
        for i, (m, g) in enumerate(sub.groupby("m")):
            color = f"C{i}"
            frac = g["separable"] / g["n"]
            lo, hi = np.array([phase.binomial_interval(int(k), int(n), LEVEL)
                               for k, n in zip(g["separable"], g["n"], strict=True)]).T
            ax.errorbar(g["ratio"], frac, yerr=[frac - lo, hi - frac], fmt=markers[i % len(markers)], ms=4,
                        color=color, capsize=2, label=f"m={m}")
            ax.plot(g["ratio"], g["compatible"] / g["n"], ":", color=color, lw=1)
            row = sep[(sep["S"] == s) & (sep["V"] == v) & (sep["m"] == m)].iloc[0]
            if np.isfinite(row["threshold"]):
                x = np.linspace(g["ratio"].min(), g["ratio"].max(), 200)
                ax.plot(x, stats.norm.cdf((x - row["threshold"]) / (row["width"] / (2 * 1.2816))), color=color, lw=1)
            if (s, v) == (1, 2):
                ax.plot(g["ratio"], [phase.cover_probability(int(m), int(d)) for d in g["d"]], "k--", lw=0.8,
                        label="Cover (exact)" if i == 0 else None)
        ax.axvline(1.0, color="grey", lw=0.6)
        ax.set(title=f"S={s}, V={v}", xlabel="d / m")
        ax.legend(fontsize=8)
    for row in axes:
        row[0].set_ylabel("fraction NTP-separable\n(dotted: compatible)")
    fig.suptitle(f"NTP-separability phase diagram ({LEVEL:.0%} Clopper–Pearson bars, probit fits)")
    fig.tight_layout()
    return fig


def cover_width(m: int) -> float:
    """The 10–90 % width in d/m of Cover's curve in the normal approximation: d ~ N((m−1)/2, (m−1)/4) + 1,
    so 2·1.2816·√(m−1)/(2m). Shrinks like 1/√m: the transition sharpens as m grows."""
    return 2 * 1.2816 * np.sqrt(m - 1) / (2 * m)


def width_exponent(g: pd.DataFrame) -> float:
    """The slope of log(10–90 % width) on log m over a family's m values (Cover: −1/2); NaN if < 2 usable."""
    g = g[np.isfinite(g["width"]) & g["converged"]]
    if len(g) < 2:
        return float("nan")
    return float(np.polyfit(np.log(g["m"].astype(float)), np.log(g["width"].astype(float)), 1)[0])


def _threshold_figure(sep: pd.DataFrame):
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    ms = np.array(sorted(sep["m"].unique()), float)
    markers = ["o", "s", "^", "D", "v", "x"]  # one per family, besides its colour (grayscale)
    for i, ((s, v), g) in enumerate(sep.groupby(["S", "V"])):
        g = g[np.isfinite(g["threshold"])]
        yerr = [g["threshold"] - g["low"], g["high"] - g["threshold"]]
        fmt = markers[i % len(markers)] + "-"
        ax.errorbar(g["m"] * (1 + 0.02 * i), g["threshold"], yerr=yerr, fmt=fmt, capsize=3, label=f"S={s}, V={v}")
        bx.plot(g["m"], g["width"], fmt, label=f"S={s}, V={v}")
    ax.axhline(0.5, color="k", ls="--", lw=0.8, label="Cover: 1/2")
    ax.set(xscale="log", xlabel="m (contexts)", ylabel="threshold d*/m", title="50% threshold against m")
    bx.plot(ms, [cover_width(int(m)) for m in ms], "k--", lw=0.8, label="Cover (normal approx.)")
    bx.set(xscale="log", yscale="log", xlabel="m (contexts)", ylabel="10–90% width in d/m",
           title="finite-size scaling of the transition width")
    ax.legend(fontsize=8)
    bx.legend(fontsize=8)
    fig.tight_layout()
    return fig


register(Experiment("ntp-separability-point", "ntp", "One grid point of the NTP-separability sweep (counts)",
                    SeparabilityPointConfig, run_point, {}, "seconds", sweep_point=True,
                    smoke={"m": 10, "ratio": 1.5, "trials": 2}))
register(Experiment("ntp-separability", "ntp", "Remark 1: where NTP-separability sets in, against d/m (a sweep)",
                    SeparabilityConfig, run_separability,
                    {"paper": {"ms": (25, 50, 100, 200), "trials": 100,
                               "ratios": tuple(np.round(np.arange(0.05, 1.251, 0.05), 2).tolist()),
                               "supports": (1, 1, 2, 3), "vocabularies": (2, 8, 8, 8)}},
                    "59 min on one worker (3555 CPU-seconds: about 3555/N s on N workers)",
                    smoke={"ms": (10,), "ratios": (0.5, 1.2), "supports": (1,), "vocabularies": (2,), "trials": 2},
                    quick_seconds=51.4))
