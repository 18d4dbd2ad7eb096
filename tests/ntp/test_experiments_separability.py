"""ntp-separability: the phase diagram from a sweep, its anchors (Lemma 1, Cover's count), negative controls."""

from __future__ import annotations

import pandas as pd
import pytest

from embgeo.lab.runner import run
from embgeo.lab.store import RunStore, results
from embgeo.ntp.experiments.separability import (
    SeparabilityConfig,
    _claims,
    counts_table,
    cover_fit,
    sweep_points,
    thresholds,
)

SMALL = {"ms": "20", "trials": "30", "supports": "1,1", "vocabularies": "2,8",
         "ratios": "0.15,0.25,0.35,0.45,0.5,0.55,0.65,0.8,1.1"}


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sep")
    return out, run("ntp-separability", overrides=SMALL, out=out, scheduler="inline")


def _by_name(record):
    return {c.name: c for c in record.claims}


BELOW = "separability sets in below d = m at every grid point beyond Cover's case (certified fits)"


def test_claims_hold_on_the_measured_diagram(small_run):
    out, record = small_run
    claims = _by_name(record)
    assert claims["d > m: every instance NTP-separable (Lemma 1)"].ok
    cover = [c for name, c in claims.items() if name.startswith("S=1, V=2")]
    assert len(cover) == 2 and all(c.ok for c in cover), cover
    # beyond Cover's case the "sets in below d = m" statement is one consistency check (issue 39: a restatement)
    below = claims[BELOW]
    assert below.check and below.ok and below.measured == "1/1"
    v8 = thresholds(_table(out)).query("V == 8").iloc[0]
    assert v8["low"] <= v8["threshold"] <= v8["high"] < 0.5  # eight classes separate well before Cover's 1/2
    assert (out / "phase_diagram.png").exists() and (out / "thresholds.png").exists()


def test_the_diagram_is_read_from_the_store_and_a_second_run_reuses_every_point(small_run):
    out, _ = small_run
    store = out / "store.sqlite"
    before = results(store)
    assert len(before) == 9 * 2 and (before["status"] == "done").all()
    run("ntp-separability", overrides=SMALL, out=out, scheduler="inline")  # not resumed: it runs, its sweep skips
    after = results(store)
    assert (after["attempts"] == 1).all() and after["finished_at"].tolist() == before["finished_at"].tolist()


def _table(out):
    cfg = SeparabilityConfig(ms=(20,), trials=30, supports=(1, 1), vocabularies=(2, 8),
                             ratios=(0.15, 0.25, 0.35, 0.45, 0.5, 0.55, 0.65, 0.8, 1.1))
    return counts_table(out / "store.sqlite", [p.key for p in sweep_points(cfg, out / "points")])


def test_negative_control_wrong_curve_fails_the_cover_claims(small_run):
    """The eight-class counts presented as the binary family: Cover's threshold and curve must both fail."""
    out, _ = small_run
    table = _table(out)
    v2, v8 = table[table["V"] == 2].copy(), table[table["V"] == 8]
    v2["separable"] = v8["separable"].to_numpy()
    pval, used = cover_fit(v2)
    assert used >= 3 and pval < 1e-6
    wrong = pd.concat([v2, v8])
    claims = {c.name: c for c in _claims(wrong, thresholds(wrong))}
    cover = [c for name, c in claims.items() if name.startswith("S=1, V=2")]
    assert len(cover) == 2 and not any(c.ok for c in cover)
    # the true table passes the same functions
    assert all(c.ok for c in _claims(table, thresholds(table)) if c.name.startswith("S=1, V=2"))


def test_negative_control_lemma_1_and_below_m_claims_can_fail(small_run):
    out, _ = small_run
    table = _table(out)
    broken = table.copy()
    over = broken["d"] > broken["m"]
    broken.loc[over, "separable"] -= 1  # one instance with d > m not separable
    claims = {c.name: c for c in _claims(broken, thresholds(table))}
    assert not claims["d > m: every instance NTP-separable (Lemma 1)"].ok
    # a family whose transition sits above d = m: none separable up to 0.8, half of them at d/m = 1.1
    late = table.copy()
    v8 = late["V"] == 8
    late.loc[v8, "separable"] = 0
    late.loc[v8 & (late["ratio"] > 1.0), "separable"] = 15
    (claim,) = [c for c in _claims(late, thresholds(late)) if c.name == BELOW]
    assert claim.check and not claim.ok and "S=1 V=8 m=20" in claim.note


def test_a_failed_point_stops_the_diagram_with_its_reason(small_run, tmp_path):
    out, _ = small_run
    cfg = SeparabilityConfig(ms=(20,), trials=30, supports=(1,), vocabularies=(2,), ratios=(0.15,))
    (point,) = sweep_points(cfg, tmp_path / "points")
    store = tmp_path / "s.sqlite"
    with RunStore(store) as st:
        st.queue(point.key, experiment=point.experiment, scale="quick", seed=0, config=dict(point.config))
        st.mark_running(point.key)
        st.mark_failed(point.key, error="Traceback ...\nValueError: the solver broke")
    with pytest.raises(RuntimeError, match="1 of 1 sweep points are not done.*the solver broke"):
        counts_table(store, [point.key])


def test_one_hot_check_reads_back_f_zero_and_zero_entropy_and_fails_with_a_shared_support(monkeypatch):
    """Remark 1's reduction as a check: F = {0} and 𝓗 = 0 on an S = 1 instance; an instance with S = 2 (the
    generator patched to draw two-token supports) fails it."""
    from embgeo.ntp.experiments.separability import one_hot_check
    from embgeo.ntp.measure import phase

    check = one_hot_check(10)
    assert check.check and check.ok and check.measured == 0
    real = phase.random_instance
    monkeypatch.setattr(phase, "random_instance", lambda m, d, V, S, seed: real(m, d, 3, 2, seed))
    assert not one_hot_check(10).ok
