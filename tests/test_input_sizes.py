"""The library side of issue 37's size checks: each refuses (or handles) a size before anything of that size is
allocated, with a message naming it, and leaves every accepted input's result as it was."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from embgeo.errors import InputError, TooLargeError
from embgeo.ntp.data import NTPData, read_token_file

# -- context length (NTPData.from_sequences) ----------------------------------------------------------------------


def test_a_context_length_without_pairs_is_refused_before_anything_of_size_k():
    """k = 10**12 once built np.arange(k) before finding that no sequence is long enough (8 TB: a MemoryError);
    the count of pairs is checked first."""
    for mode in ({}, {"windows": True}):
        with pytest.raises(InputError, match=r"context_length=1000000000000 needs \(longest: 4\)"):
            NTPData.from_sequences([[1, 2, 3], [4, 5, 6, 7]], 10**12, **mode)


def test_autoregressive_contexts_beyond_the_longest_sequence_are_the_same_data():
    """Prefix contexts are padded to one width; beyond the longest sequence only padding is added, so a larger k
    gives the same contexts, probabilities and embeddings (and no (n, k) array of padding)."""
    seqs = [[0, 1, 2, 3], [0, 1, 4], [2, 0, 1, 2, 3], [4, 4]]
    base = NTPData.from_sequences(seqs, 4, autoregressive=True)  # the longest sequence has 5 tokens
    for k in (5, 1000, 10**12):
        data = NTPData.from_sequences(seqs, k, autoregressive=True)
        assert data.contexts == base.contexts and data.n_samples == base.n_samples
        assert (data.probs != base.probs).nnz == 0 and np.array_equal(data.embeddings, base.embeddings)
        np.testing.assert_array_equal(data.weights, base.weights)


def test_contexts_above_the_dense_budget_are_refused(monkeypatch):
    from embgeo.core import validate

    monkeypatch.setattr(validate, "DENSE_BUDGET_BYTES", 8 * 5 * 3 - 1)  # 5 windows × k = 3: one byte too many
    with pytest.raises(TooLargeError, match=r"the training contexts \(5 pairs × k = 3 tokens\)"):
        NTPData.from_sequences([list(range(8))], 3, windows=True)


# -- token ids ------------------------------------------------------------------------------------------------------


def test_a_token_id_above_max_id_is_refused_at_its_line(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_text("1 2 3\n\n4 99999999999 6\n")
    assert read_token_file(path) == [[1, 2, 3], [4, 99999999999, 6]]  # no limit asked: read as before
    assert read_token_file(path, max_id=99999999999)[1][1] == 99999999999
    with pytest.raises(TooLargeError, match=r"ids.txt:3: token id 99999999999 would make V = 100,000,000,000 tokens "
                                            r".*above the 1,000 .*--max-vocab"):
        read_token_file(path, max_id=999)


def test_from_sequences_refuses_a_vocabulary_above_the_budget():
    """V = largest id + 1 sizes the work arrays of the sparse probabilities: id 10**11 was std::bad_alloc."""
    with pytest.raises(TooLargeError, match=r"V = 100000000000 tokens \(largest id \+ 1\)"):
        NTPData.from_sequences([[1, 2, 3], [4, 99999999999, 6]], 1)


# -- sweeps ---------------------------------------------------------------------------------------------------------


def test_grids_are_counted_before_any_point_is_built(monkeypatch):
    from embgeo.lab import sweep

    def no_points(*args, **kwargs):
        raise AssertionError("points were built before the grid was counted")

    monkeypatch.setattr(sweep, "make_points", no_points)
    values = list(range(1, 471))
    with pytest.raises(InputError, match=r"103,823,000 points \(lr: 470 values × steps: 470 values × m: 470 values\), "
                                         r"above the 100,000"):
        sweep.grid_points("ntp-gd", {"lr": values, "steps": values, "m": values})
    with pytest.raises(InputError, match=r"200,000 points \(steps: 2 values × 100,000 seeds\)"):
        sweep.grid_points("ntp-gd", {"steps": [1, 2]}, seeds=100_000)
    with pytest.raises(InputError, match=r"--grid steps: 100,001 values"):
        sweep.parse_grid(["steps=" + ",".join(["1"] * 100_001)])
    assert sweep.grid_size({"a": [1, 2], "b": [1, 2, 3]}, seeds=4) == 24


def test_a_spec_is_counted_over_all_its_tables(tmp_path, monkeypatch):
    from embgeo.lab import sweep

    monkeypatch.setattr(sweep, "grid_points", lambda *a, **k: pytest.fail("a table was built before the count"))
    table = '[[sweep]]\nexperiment = "ntp-gd"\nseeds = 2\ngrid = {{ steps = [{}] }}\n'
    spec = tmp_path / "big.toml"
    spec.write_text(table.format(", ".join(map(str, range(1, 30_001)))) * 2)  # 2 × 60,000 points
    with pytest.raises(InputError, match=r"120,000 points \(60,000 \+ 60,000 over its \[\[sweep\]\] tables\)"):
        sweep.load_spec(spec)


# -- run-time estimates ---------------------------------------------------------------------------------------------


def test_estimates_scale_with_the_settings_a_run_repeats():
    from embgeo.lab.registry import get, scaled_runtime

    gd = get("ntp-gd")  # quick = paper = 10,000 steps, its measured quick time
    est = scaled_runtime(gd, "quick", {"steps": "20000", "lr": "0.25"})
    assert est.seconds == pytest.approx(2 * gd.quick_seconds) and not est.upper_bound
    assert "steps = 20000 against 10000" in est.how
    assert scaled_runtime(gd, "quick", {"lr": "0.25"}) is None  # no work setting changed: the preset's estimate
    # without a measured quick time: reckoned from the larger paper preset ("about 5 min"), an upper bound
    norms = dataclasses.replace(get("collapse-norms"), quick_seconds=None)
    est = scaled_runtime(norms, "quick", {"epochs": "2400"})
    assert est.seconds == pytest.approx(600.0) and est.upper_bound
    with pytest.raises(InputError, match="steps"):  # the work settings are checked like any --set value
        scaled_runtime(gd, "quick", {"steps": "0"})


# -- threads --------------------------------------------------------------------------------------------------------


def test_thread_counts_far_above_the_cores_are_refused():
    from embgeo.core.threads import MAX_THREADS_PER_CORE, available_cores, check_thread_count

    cap = MAX_THREADS_PER_CORE * available_cores()
    check_thread_count(cap)  # up to the cap: a warning at most (warn_if_oversubscribed)
    with pytest.raises(InputError, match=rf"--threads {cap + 1}: at most {cap} "):
        check_thread_count(cap + 1)


# -- divergence of the NTP trainers ---------------------------------------------------------------------------------


def test_a_loss_ten_times_its_start_is_divergence():
    """At lr = 1e6 the loss stays finite (its gradient is bounded) but jumps from 2.6 to ~10^5 at step 1: the
    trainer stops there, and the experiments' finished() makes it the documented error."""
    import warnings

    from embgeo.lab.registry import finished
    from embgeo.ntp import synthetic
    from embgeo.ntp.training.train import StepSizeWarning, train

    data = synthetic(50, 10, 60, 6, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StepSizeWarning)
        trace = train(data, "gd", 1e6, 50, progress=False, reference=False)
    assert trace.meta["diverged_at_step"] == 1 and "exceeds 10 × max(CE at step 0, log V)" in trace.meta[
        "diverged_reason"]
    assert [row["step"] for row in trace.rows] == [0]  # the trace ends at the last good record
    with pytest.raises(InputError, match=r"training diverged at step 1 \(the loss CE = .* exceeds 10 × .*lower the "
                                         r"step size"):
        finished(trace)
    good = train(data, "gd", 0.5, 200, progress=False, reference=False)  # ntp-gd's step size: no divergence
    assert "diverged_at_step" not in good.meta and good.last["step"] == 200
