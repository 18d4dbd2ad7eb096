"""The NTP experiments' claims can fail: each theory comparison fed a wrong reference (negative control).

The right references pass the same claims in ``test_experiments.py`` (the quick reproduction);
here a perturbed W^mm, a scaled W*, a bounded norm, swapped optimizers and a shifted loss must
make them fail.
"""

import numpy as np
import pandas as pd
import pytest

from embgeo.experiments.ntp import (
    ALIGN_LEVEL,
    GDConfig,
    convergence_claims,
    faster_claims,
    gd_loss_claim,
    toy_geometry_claims,
)
from embgeo.ntp.data import synthetic, toy2d
from embgeo.ntp.metrics import compute_reference
from embgeo.ntp.theory import is_separable, kl_gap, ntp_svm, smoothness
from embgeo.ntp.train import train


@pytest.fixture(scope="module")
def fig4():
    """The ntp-gd setting (10⁴ GD steps, η = 0.5) with its true reference and its trace."""
    cfg = GDConfig()
    data = cfg.make_data()
    ref = compute_reference(data)
    df = train(data, "gd", cfg.lr, cfg.steps, init="lecun", seed=cfg.seed, progress=False, reference=ref).to_frame()
    return cfg, data, ref, df


def _by_name(claims, part):
    return next(c for c in claims if part in c.name)


def test_true_reference_passes(fig4):
    _, _, _, df = fig4
    assert all(c.ok for c in convergence_claims("GD", df, "Thm. 2"))


def test_perturbed_w_mm_fails_the_alignment_level(fig4):
    cfg, data, ref, _ = fig4
    rng = np.random.default_rng(1)
    noise = rng.normal(size=ref.w_mm.shape)
    wrong = ref.w_mm + 1.3 * np.linalg.norm(ref.w_mm) * noise / np.linalg.norm(noise)
    cos = np.sum(wrong * ref.w_mm) / (np.linalg.norm(wrong) * np.linalg.norm(ref.w_mm))
    assert 0.4 < cos < 0.8  # a plausible-looking but wrong W^mm
    df = train(data, "gd", cfg.lr, cfg.steps, init="lecun", seed=cfg.seed, progress=False,
               reference=ref.replace(w_mm=wrong)).to_frame()
    claim = _by_name(convergence_claims("GD", df, "Thm. 2"), "cos(W_k − W*, W^mm)")
    assert not claim.ok and claim.measured < ALIGN_LEVEL


def test_scaled_w_star_fails_both_subspace_claims(fig4):
    cfg, data, ref, _ = fig4
    df = train(data, "gd", cfg.lr, cfg.steps, init="lecun", seed=cfg.seed, progress=False,
               reference=ref.replace(w_star=1.5 * ref.w_star)).to_frame()
    claims = convergence_claims("GD", df, "Thm. 2")
    assert not _by_name(claims, "≤ 0.25 at the last step").ok
    assert not _by_name(claims, "halved over the last decade").ok


def _frame(norm, **columns):
    steps = np.array([0, 1, 10, 100, 1000, 10000])
    base = {"step": steps, "norm": norm(steps), "cos_mm": np.full(6, 0.95), "cos_corrected": np.full(6, 0.95),
            "subspace_error": np.array([1, 0.9, 0.5, 0.3, 0.1, 0.01]),
            "kl_gap": np.array([1, 0.5, 0.1, 1e-2, 1e-3, 1e-4])}
    return pd.DataFrame({**base, **columns})


def test_norm_growth_like_log_passes_and_a_bounded_norm_fails():
    grows = _by_name(convergence_claims("X", _frame(lambda k: 2 * np.log1p(k)), "ref"), "grows without bound")
    assert grows.ok and grows.measured == pytest.approx(1.0, rel=0.01)
    bounded = _by_name(convergence_claims("X", _frame(lambda k: 5 - 5 / (1 + k)), "ref"), "grows without bound")
    assert not bounded.ok


def test_faster_claims_fail_for_the_slower_optimizer():
    slow = _frame(lambda k: np.log1p(k))
    fast = _frame(lambda k: np.log1p(k), kl_gap=slow["kl_gap"] / 10, cos_corrected=1 - (1 - slow["cos_corrected"]) / 2,
                  subspace_error=slow["subspace_error"] / 3)
    assert all(c.ok for c in faster_claims("A", fast, "B", slow))
    assert not any(c.ok for c in faster_claims("B", slow, "A", fast))
    ratios = [c.measured for c in faster_claims("A", fast, "B", slow)]
    assert ratios == pytest.approx([0.1, 0.5, 1 / 3])
    with pytest.raises(ValueError, match="same steps"):
        faster_claims("A", fast.iloc[1:], "B", slow)


def test_gd_loss_bound_holds_at_every_record_and_catches_a_wrong_entropy(fig4):
    cfg, data, ref, df = fig4
    for k in (10, 100, 1000):  # the bound is a theorem at every step, not only the last
        claim = gd_loss_claim(data, ref, df[df["step"] <= k], cfg.lr)[0]
        assert claim.ok, claim
    # CE − 𝓗 against an entropy 0.05 nats too small: the gap no longer fits under the GD rate bound
    shifted = df.assign(kl_gap=df["kl_gap"] + 0.05)
    assert not gd_loss_claim(data, ref, shifted, cfg.lr)[0].ok


def test_gd_loss_bound_at_its_comparator_matches_kl(fig4):
    """The bound's first term is KL at W* + s W^mm: at s = 0 it is KL(W*), the off-support mass of W*."""
    _, data, ref, _ = fig4
    assert kl_gap(data, ref.w_star) > kl_gap(data, ref.w_star + 10 * ref.w_mm) > 0


def test_gd_loss_bound_is_a_consistency_check_a_wrong_reference_meets(fig4):
    """Issue 21: the descent lemma holds for any comparator, so the bound built from a wrong W^mm (or W*) is still
    met; the claim cannot test the theory's objects and is counted as a consistency check."""
    cfg, data, ref, df = fig4
    claim = gd_loss_claim(data, ref, df, cfg.lr)[0]
    assert claim.check and claim.ok
    wrong = gd_loss_claim(data, ref.replace(w_mm=-ref.w_mm, w_star=1.5 * ref.w_star), df, cfg.lr)[0]
    assert wrong.ok  # met with the wrong reference too: why it is not counted


def test_gd_loss_claim_says_when_the_step_is_too_large(fig4):
    _, data, ref, df = fig4
    claim = gd_loss_claim(data, ref, df, 2.0 / smoothness(data))[0]
    assert "no rate bound" in claim.name


def test_lemma1_by_the_lp_agrees_with_the_closed_form():
    """ntp-overparam decides separability by the LP; for d > m it must agree with Lemma 1's construction."""
    for seed in range(3):
        data = synthetic(8, 5, 10, 3, seed=seed)
        by_lp, by_lemma = is_separable(data, method="lp"), is_separable(data)
        assert bool(by_lp) and bool(by_lemma)
        assert "LP" in by_lp.method and "Lemma 1" in by_lemma.method


def testtoy_geometry_claims_fail_for_a_wrong_w_mm():
    data = toy2d(angles=(90, 210, 330))  # equiangular: equal cones, w_3 exactly along A
    W = ntp_svm(data).W
    separates, cones = toy_geometry_claims(data, W)
    assert separates.ok and cones.ok
    wrong = W.copy()
    wrong[2] *= -1  # w_3 pointing away from A
    assert not toy_geometry_claims(data, wrong)[0].ok
    unequal = toy2d()  # cones 110° (w_2), 120° (w_1 = w_5), 130° (w_4)
    W = ntp_svm(unequal).W
    ordered = W.copy()
    ordered[1] *= 0.5  # make w_2 (the narrowest cone) the shortest
    assert toy_geometry_claims(unequal, ordered)[1].ok
    assert not toy_geometry_claims(unequal, W)[1].ok  # the solver's own W^mm: w_2 > w_1 (reported failing)
