"""Tests of embgeo.ntp.measure.phase: random instances, trials, Cover's probability, intervals, thresholds.

The separability verdicts are checked against ground truths built here: a brute-force count over
every labeling (Cover 1965) and an LP written directly from Def. 2 (scipy's linprog, not the
theory module's LP).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import linprog

from embgeo.errors import InputError
from embgeo.ntp import NTPData, is_separable
from embgeo.ntp.measure.phase import (
    Threshold,
    binomial_interval,
    cover_probability,
    random_instance,
    threshold,
    trial,
    trial_seed,
    trials,
)

# -- independent references --------------------------------------------------------------------


def margin_lp(H: np.ndarray, y: np.ndarray) -> float:
    """max t s.t. y_j uᵀh_j >= t, |u|_inf <= 1 (variables u, t): > 0 iff strictly separable through 0."""
    m, d = H.shape
    c = np.zeros(d + 1)
    c[-1] = -1.0  # maximize t
    A = np.hstack([-(y[:, None] * H), np.ones((m, 1))])  # t − y_j uᵀh_j <= 0
    res = linprog(c, A_ub=A, b_ub=np.zeros(m), bounds=[(-1, 1)] * d + [(None, 1)], method="highs")
    assert res.status == 0
    return float(-res.fun)


def separable_by_definition(data: NTPData) -> bool:
    """Def. 2 as an LP feasibility problem over W (V, d), every pair written out:
    (w_z − w_v)ᵀh_j >= 1 for z ∈ S_j, v ∉ S_j and (w_z − w_z')ᵀh_j = 0 for z, z' ∈ S_j."""
    H, V = data.embeddings, data.V
    d = H.shape[1]
    A_ub, A_eq = [], []
    for j, h in enumerate(H):
        support = set(data.supports[j].tolist())
        for z in support:
            for v in range(V):
                row = np.zeros((V, d))
                row[z] += h
                row[v] -= h
                if v not in support:
                    A_ub.append(-row.ravel())  # −(w_z − w_v)ᵀh <= −1
                elif v > z:
                    A_eq.append(row.ravel())
    res = linprog(np.zeros(V * d), A_ub=np.array(A_ub), b_ub=-np.ones(len(A_ub)),
                  A_eq=np.array(A_eq) if A_eq else None, b_eq=np.zeros(len(A_eq)) if A_eq else None,
                  bounds=(None, None), method="highs")
    assert res.status in (0, 2), res.message  # 0 feasible, 2 infeasible
    return res.status == 0


def one_hot(labels: np.ndarray, V: int = 2) -> np.ndarray:
    P = np.zeros((len(labels), V))
    P[np.arange(len(labels)), labels] = 1.0
    return P


# -- Cover's probability ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_cover_probability_matches_brute_force_count(d):
    m = 7
    H = np.random.default_rng(123).standard_normal((m, d))
    count, lp_checked = 0, 0
    for bits in itertools.product([0, 1], repeat=m):
        labels = np.array(bits)
        verdict = bool(is_separable(NTPData(H, one_hot(labels))))
        count += verdict
        if sum(bits) in (2, 3) and bits[0] == 0:  # a few dozen verdicts checked by the margin LP
            assert verdict == (margin_lp(H, 1 - 2 * labels) > 1e-9)
            lp_checked += 1
    assert lp_checked > 10
    expected = 2**m * cover_probability(m, d)
    assert count == round(expected) and abs(expected - round(expected)) < 1e-9


def test_cover_probability_closed_values():
    for m in (2, 10, 40, 200):
        assert cover_probability(m, m // 2) == pytest.approx(0.5, abs=1e-12)  # symmetry of Binomial(m-1, 1/2)
    for m, d in ((5, 5), (5, 9), (1, 1), (300, 300)):
        assert cover_probability(m, d) == 1.0
    # Small cases by hand: m = 3, d = 1: 2 of 8 labelings; d = 2: 6 of 8.
    assert cover_probability(3, 1) == pytest.approx(2 / 8, abs=1e-15)
    assert cover_probability(3, 2) == pytest.approx(6 / 8, abs=1e-15)
    # Summing to d instead of d−1 would give these values instead; they must differ.
    wrong = 2.0 ** (1 - 10) * sum(math.comb(9, k) for k in range(0, 5 + 1))
    assert abs(cover_probability(10, 5) - wrong) > 0.1
    # Large m: no overflow, monotone in d.
    p = [cover_probability(2000, d) for d in (900, 1000, 1100)]
    assert 0 < p[0] < p[1] < p[2] < 1
    with pytest.raises(InputError):
        cover_probability(0, 1)


# -- random instances and trials -------------------------------------------------------------------


def test_random_instance_properties():
    data = random_instance(30, 7, 9, 4, seed=5)
    assert data.embeddings.shape == (30, 7) and data.probs.shape == (30, 9)
    assert np.all(data.support_sizes == 4)
    assert np.allclose(np.asarray(data.probs.sum(axis=1)).ravel(), 1.0, atol=1e-12)
    assert np.all(data.probs.data > 0)
    assert np.allclose(data.weights, 1 / 30)
    # N(0, I_d/d): squared norms have mean 1.
    big = random_instance(2000, 50, 2, 1, seed=0)
    assert np.mean(np.sum(big.embeddings**2, axis=1)) == pytest.approx(1.0, abs=0.02)
    # Reproducible, and different seeds give different data.
    again = random_instance(30, 7, 9, 4, seed=5)
    other = random_instance(30, 7, 9, 4, seed=6)
    assert np.array_equal(data.embeddings, again.embeddings)
    assert (data.probs != again.probs).nnz == 0
    assert not np.allclose(data.embeddings, other.embeddings)


def test_random_instance_supports_and_probabilities_are_uniform():
    # Each token lies in a support with probability S/V: 3/6 over 3000 contexts.
    data = random_instance(3000, 2, 6, 3, seed=1)
    freq = np.bincount(data.probs.indices, minlength=6) / 3000
    assert np.allclose(freq, 0.5, atol=0.04)
    # Dirichlet(1, 1, 1): every coordinate is Beta(1, 2) (Kolmogorov-Smirnov on the pooled entries).
    assert stats.kstest(data.probs.data, stats.beta(1, 2).cdf).pvalue > 1e-3


@pytest.mark.parametrize("args", [(0, 2, 3, 1), (3, 0, 3, 1), (3, 2, 1, 1), (3, 2, 3, 0), (3, 2, 3, 4)])
def test_random_instance_refuses_bad_sizes(args):
    with pytest.raises(InputError):
        random_instance(*args, seed=0)
    with pytest.raises(InputError):
        trial(*args, seed=0)


def test_trial_refuses_unknown_method():
    with pytest.raises(InputError, match="method"):
        trial(5, 2, 3, 1, seed=0, method="simplex")


def test_trial_matches_lp_from_the_definition():
    verdicts = []
    for m, d, V, S in ((8, 5, 5, 2), (10, 8, 6, 3)):
        for seed in range(10):
            out = trial(m, d, V, S, seed)
            assert set(out) == {"separable", "compatible", "separability_method", "seconds"}
            assert out["separable"] == separable_by_definition(random_instance(m, d, V, S, seed)), (m, d, seed)
            assert trial(m, d, V, S, seed, method="lp")["separable"] == out["separable"]
            verdicts.append(out["separable"])
    assert any(verdicts) and not all(verdicts)  # both outcomes occur in this range of d/m


def test_lemma_1_overparameterized_is_separable():
    for m, d, V, S in ((5, 6, 4, 2), (10, 11, 8, 3), (20, 25, 5, 4), (6, 7, 3, 1)):
        for seed in range(3):
            out = trial(m, d, V, S, seed)
            assert out["separable"] and out["compatible"]  # compatibility too holds when rank H = m (Sec. 3.1)


def test_trial_full_support_is_vacuously_separable():
    out = trial(5, 2, 3, 3, seed=0)
    assert out["separable"] is True and "vacuous" in out["separability_method"]
    assert isinstance(out["compatible"], bool)


def test_trials_counts_and_seeds():
    res = trials(8, 5, 5, 2, n=12, seed=3)
    assert set(res) == {"n", "separable", "compatible", "both", "seconds"} and res["n"] == 12
    singles = [trial(8, 5, 5, 2, trial_seed(3, i)) for i in range(12)]
    assert res["separable"] == sum(o["separable"] for o in singles)
    assert res["compatible"] == sum(o["compatible"] for o in singles)
    assert res["both"] == sum(o["separable"] and o["compatible"] for o in singles)
    assert 0 < res["separable"] < 12  # d/m = 5/8 is inside the transition here
    seeds = {trial_seed(s, i) for s in range(3) for i in range(50)}
    assert len(seeds) == 150  # distinct streams
    assert trial_seed(3, 0) == trial_seed(3, 0)


# -- binomial interval -------------------------------------------------------------------------------


def test_binomial_interval():
    low, high = binomial_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 10), rel=1e-9)  # closed form at k = 0
    low, high = binomial_interval(10, 10)
    assert high == 1.0 and low == pytest.approx(0.025 ** (1 / 10), rel=1e-9)
    for k, n in ((1, 10), (37, 100), (499, 1000)):
        low, high = binomial_interval(k, n)
        assert low < k / n < high
    assert np.subtract(*binomial_interval(50, 100, 0.99)) < np.subtract(*binomial_interval(50, 100, 0.9))
    with pytest.raises(InputError):
        binomial_interval(11, 10)
    with pytest.raises(InputError):
        binomial_interval(3, 10, level=1.5)


# -- threshold ------------------------------------------------------------------------------------------

GRID = np.arange(0.2, 0.6001, 0.025)


def simulated_counts(t: float, s: float, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).binomial(n, stats.norm.cdf((GRID - t) / s))


def test_threshold_recovers_a_known_probit_curve():
    hits = 0
    for seed in range(20):
        fit = threshold(GRID, simulated_counts(0.4, 0.05, 400, seed), 400)
        assert isinstance(fit, Threshold) and fit.converged
        assert fit.high - fit.low < 0.02
        assert fit.width == pytest.approx(2 * 1.2816 * 0.05, rel=0.2)
        hits += fit.low <= 0.4 <= fit.high
    assert hits >= 15  # nominal coverage 95%: P(Binomial(20, 0.95) < 15) ≈ 0.003


def wald_half_width(x: np.ndarray, n: int, t: float, s: float, level: float = 0.95) -> float:
    """z_level · SE(t̂) from the probit Fisher information Σ n φ(z)² / (P(1 − P)) ∇z ∇zᵀ, ∇z = −(1, z)/s."""
    z = (x - t) / s
    P = stats.norm.cdf(z)
    w = n * stats.norm.pdf(z) ** 2 / (P * (1 - P))
    grad = -np.stack([np.ones_like(z), z]) / s
    info = (grad * w) @ grad.T
    return float(stats.norm.ppf(0.5 + level / 2) * np.sqrt(np.linalg.inv(info)[0, 0]))


def test_threshold_interval_matches_asymptotic_standard_error():
    # The profile-likelihood interval and the Wald interval agree to first order (Wilks); a wrong
    # χ² cut (or a deviance without its factor 2) would change the width by a constant factor.
    for level in (0.8, 0.95, 0.99):
        for seed in range(3):
            fit = threshold(GRID, simulated_counts(0.4, 0.05, 400, seed), 400, level=level)
            s_hat = fit.width / (2 * 1.2815515655446004)
            expected = wald_half_width(GRID, 400, fit.ratio, s_hat, level)
            assert (fit.high - fit.low) / 2 == pytest.approx(expected, rel=0.15)


def test_threshold_interval_shrinks_with_n():
    widths = [(lambda f: f.high - f.low)(threshold(GRID, simulated_counts(0.4, 0.05, n, 0), n))
              for n in (50, 400, 3200)]
    assert widths[0] > widths[1] > widths[2]
    assert widths[0] / widths[2] == pytest.approx(8.0, rel=0.5)  # ∝ 1/sqrt(n)


def test_threshold_on_cover_curve_and_negative_control():
    m, n = 40, 400
    d = np.arange(1, 61)
    expected = n * np.array([cover_probability(m, k) for k in d])
    fit = threshold(d / m, expected, n)
    assert abs(fit.ratio - 0.5) < 0.02 and fit.low < 0.5 < fit.high
    assert fit.width == pytest.approx(2 * 1.2816 * math.sqrt(m - 1) / (2 * m), rel=0.1)  # de Moivre-Laplace
    shifted = threshold(GRID, simulated_counts(0.6, 0.05, n, 1), n)
    assert shifted.low > 0.5


def test_threshold_refuses_data_without_transition():
    with pytest.raises(InputError, match="no transition inside the grid"):
        threshold(GRID, np.zeros(GRID.size), 100)
    with pytest.raises(InputError, match="no transition inside the grid"):
        threshold(GRID, np.full(GRID.size, 100), 100)
    with pytest.raises(InputError):
        threshold(GRID, np.full(GRID.size, 101), 100)
    with pytest.raises(InputError):
        threshold([0.5, 0.5], [1, 2], 10)


def test_threshold_step_data_is_flagged():
    # A step between two grid points: s runs to its lower bound, t is only known to lie in the gap.
    fit = threshold([0.1, 0.2, 0.3, 0.4], [0, 0, 50, 50], 50)
    assert not fit.converged
    assert 0.2 <= fit.low <= fit.ratio <= fit.high <= 0.3


def _with_minimize(monkeypatch, change):
    """Run threshold with scipy's L-BFGS-B result passed through ``change`` (what a different exit looks like)."""
    from embgeo.ntp.measure import phase

    real = phase.optimize.minimize

    def patched(*args, **kwargs):
        return change(real, *args, **kwargs)

    monkeypatch.setattr(phase.optimize, "minimize", patched)


def test_threshold_verdict_does_not_hang_on_the_optimizers_exit_code(monkeypatch):
    # L-BFGS-B reported ABNORMAL at a correct optimum on a fresh clone (issue 37): the same point must be
    # certified, and a run stopped after one iteration far from the optimum must still reach it.
    counts = simulated_counts(0.4, 0.05, 40, 3)
    reference = threshold(GRID, counts, 40)
    assert reference.converged and reference.decrement <= 1e-9

    def abnormal(real, *args, **kwargs):
        res = real(*args, **kwargs)
        res.success, res.message = False, "ABNORMAL: "
        return res

    _with_minimize(monkeypatch, abnormal)
    fit = threshold(GRID, counts, 40)
    assert fit.converged and fit.ratio == pytest.approx(reference.ratio, abs=1e-9)

    def one_iteration(real, fun, x0, **kwargs):
        kwargs["options"] = {**kwargs["options"], "maxiter": 1}
        res = real(fun, x0, **kwargs)
        res.success = False
        return res

    _with_minimize(monkeypatch, one_iteration)
    fit = threshold(GRID, counts, 40)
    assert fit.converged and fit.ratio == pytest.approx(reference.ratio, abs=1e-7)
    assert (fit.low, fit.high) == pytest.approx((reference.low, reference.high), abs=1e-6)


def test_threshold_fit_is_the_maximum_of_the_likelihood():
    # Independent check of the certificate: no point of a fine grid around (t̂, ŝ) has a larger likelihood.
    from embgeo.ntp.measure.phase import _loglik

    counts = simulated_counts(0.45, 0.04, 60, 7)
    fit = threshold(GRID, counts, 60)
    ls_hat = math.log(fit.width / (2 * stats.norm.ppf(0.9)))
    best = _loglik(fit.ratio, ls_hat, GRID, counts, np.full(GRID.size, 60.0))
    ts = fit.ratio + np.linspace(-0.01, 0.01, 41)
    lss = ls_hat + np.linspace(-0.2, 0.2, 41)
    grid = max(_loglik(t, ls, GRID, counts, np.full(GRID.size, 60.0)) for t in ts for ls in lss)
    assert grid <= best + 1e-9


def test_uncertified_threshold_claims_are_undecided():
    # An uncertified fit decides nothing: the claim is undecided (not failed), and says why; a certified one
    # is decided by its statement, either way (negative control: a statement that is false fails).
    import pandas as pd

    from embgeo.ntp.experiments.separability import _threshold_claim

    row = pd.Series({"threshold": 0.6, "low": 0.59, "high": 0.61, "converged": False, "decrement": 3e-4})
    claim = _threshold_claim("sets in below d = m", row, lambda r: r["high"] < 1)
    assert claim.ok is None and "not certified" in claim.note
    row["converged"] = True
    assert _threshold_claim("sets in below d = m", row, lambda r: r["high"] < 1).ok is True
    assert _threshold_claim("sets in above d = m", row, lambda r: r["low"] > 1).ok is False


def test_below_d_equals_m_is_one_check_over_the_certified_fits():
    """The twelve "sets in below d = m" statements are one consistency check (a restatement of Lemma 1 being only
    sufficient, not a paper's result): held when every certified interval is below 1, failed when one is not
    (negative control), uncertified fits named and left out."""
    import pandas as pd

    from embgeo.ntp.experiments.separability import _below_d_equals_m

    rows = pd.DataFrame({"S": [3, 3, 6], "V": [8, 8, 8], "m": [20, 40, 20], "threshold": [0.6, 0.5, 0.9],
                         "low": [0.59, 0.45, 0.8], "high": [0.61, 0.55, 1.2], "converged": [True, True, False]})
    check = _below_d_equals_m(rows)
    assert check.check and check.ok is True and check.measured == "2/2"
    assert "not certified (undecided): S=6 V=8 m=20" in check.note
    rows.loc[2, "converged"] = True
    failed = _below_d_equals_m(rows)
    assert failed.ok is False and failed.measured == "2/3" and "above 1: S=6 V=8 m=20" in failed.note
    assert _below_d_equals_m(rows.assign(converged=False)).ok is None
