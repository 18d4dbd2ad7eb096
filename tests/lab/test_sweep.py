"""Sweeps on a real Dask LocalCluster (loopback, 2 workers): the store against the expected points, a killed
worker's task re-run, an interrupted sweep resumed without losing or duplicating a finished point; the summary's
claims that fail per grid point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embgeo.errors import InputError
from embgeo.lab.claims import Claim, aggregate_claims, banded, close, holds
from embgeo.lab.context import DETACHED, RunContext
from embgeo.lab.registry import Experiment, Paper, Result
from embgeo.lab.store import RunStore, point_key, results
from embgeo.lab.sweep import grid_points, load_spec, parse_grid, run_sweep
from embgeo.ntp.experiments.separability import point_dimension

EXP = "ntp-separability-point"


def _points(tmp_path, trials=3, ms=("10", "12"), ratios=("0.3", "1.2"), seeds=2):
    return grid_points(EXP, {"m": list(ms), "ratio": list(ratios)}, {"trials": str(trials)}, seeds=seeds,
                       runs_dir=tmp_path / "runs")


def test_grid_points_are_the_product_with_seeds_and_validated_configs(tmp_path):
    points = _points(tmp_path)
    assert len(points) == 2 * 2 * 2
    combos = {(p.config["m"], p.config["ratio"], p.config["seed"]) for p in points}
    assert combos == {(m, r, s) for m in (10, 12) for r in (0.3, 1.2) for s in (0, 1)}
    for p in points:  # the key is the store's hash of the typed config; the folder is named by it
        assert p.key == point_key(EXP, "quick", dict(p.config))
        assert Path(p.run_dir) == tmp_path / "runs" / EXP / p.key
        assert p.config["trials"] == 3 and isinstance(p.config["m"], int)
    # a grid repeating a value gives one point per config
    assert len(grid_points(EXP, {"m": ["10", "10"]}, runs_dir=tmp_path)) == 1


def test_grid_input_errors(tmp_path):
    with pytest.raises(InputError, match="KEY=V1,V2"):
        parse_grid(["m"])
    with pytest.raises(InputError, match="given twice"):
        parse_grid(["m=1", "m=2"])
    with pytest.raises(InputError, match="did you mean 'ratio'"):
        grid_points(EXP, {"ratoi": ["0.5"]}, runs_dir=tmp_path)
    with pytest.raises(InputError, match="both --grid and --set"):
        grid_points(EXP, {"m": ["10"]}, {"m": "12"}, runs_dir=tmp_path)
    with pytest.raises(InputError, match="seed"):
        grid_points(EXP, {"m": ["10"]}, {"seed": "3"}, seeds=2, runs_dir=tmp_path)
    with pytest.raises(InputError, match="no 'seed' setting"):
        grid_points("attention-selection", {}, seeds=2, runs_dir=tmp_path)
    with pytest.raises(InputError, match="list setting"):  # dims=64,128 would sweep one-element tuples
        grid_points("attention-one-step", {"dims": ["64", "128"]}, runs_dir=tmp_path)
    with pytest.raises(InputError, match="--seeds"):
        grid_points(EXP, {}, seeds=0, runs_dir=tmp_path)


def test_toml_spec_with_several_grids(tmp_path):
    spec = tmp_path / "sweep.toml"
    spec.write_text('[[sweep]]\nexperiment = "ntp-separability-point"\ngrid = { m = [10, 12], ratio = [0.5] }\n'
                    'set = { trials = 2 }\n\n[[sweep]]\nexperiment = "ntp-separability-point"\nseeds = 2\n'
                    'grid = { S = [2] }\nset = { V = 4, m = 10, trials = 2 }\n'
                    '[[sweep]]\nexperiment = "attention-one-step"\ngrid = { dims = [[16, 32], [64]] }\n')
    points = load_spec(spec, runs_dir=tmp_path / "runs")
    assert [(p.config["m"], p.config["S"], p.config["V"], p.config["seed"]) for p in points[:4]] == [
        (10, 1, 2, 0), (12, 1, 2, 0), (10, 2, 4, 0), (10, 2, 4, 1)]
    assert [p.config["dims"] for p in points[4:]] == [[16, 32], [64]]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[sweep]]\nexperiment = "ntp-separability-point"\ngird = { m = [1] }\n')
    with pytest.raises(InputError, match="unknown: gird"):
        load_spec(bad)
    bad.write_text("[[sweep]\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_spec(bad)


def test_inline_sweep_stores_every_point_and_skips_them_the_second_time(tmp_path):
    points = _points(tmp_path, seeds=1)
    store = tmp_path / "s.sqlite"
    lines = []
    summary = run_sweep(points, store, scheduler="inline", echo=lines.append)
    assert (summary.total, summary.done, summary.failed, summary.skipped) == (4, 4, 0, 0)
    df = results(store)
    assert sorted(df["key"]) == sorted(p.key for p in points) and (df["status"] == "done").all()
    for p in points:  # the stored counts are the run's own, for the point's d
        row = df[df["key"] == p.key].iloc[0]
        assert row["scalar.d"] == point_dimension(p.config["m"], p.config["ratio"])
        assert row["scalar.n"] == 3 and 0 <= row["scalar.separable"] <= 3
        if row["scalar.d"] > p.config["m"]:  # Lemma 1's claim is a column of the table
            assert row["scalar.separable"] == 3 and row["ok.d > m: every instance is NTP-separable (Lemma 1)"]
    lines.clear()
    again = run_sweep(points, store, scheduler="inline", echo=lines.append)
    assert (again.done, again.skipped) == (0, 4)
    assert "4 already done (skipped), 0 to run" in lines[0]
    assert results(store)["attempts"].tolist() == [1, 1, 1, 1]  # nothing ran twice


def test_a_failed_point_is_stored_with_its_traceback_and_the_sweep_goes_on(tmp_path):
    good = _points(tmp_path, ms=("10",), ratios=("0.5",), seeds=1)
    # a valid config whose data turn out not separable (m = 100 > d = 60): it fails when it runs
    bad = grid_points("ntp-gd", {}, {"m": "100", "steps": "20"}, runs_dir=tmp_path / "runs")
    store = tmp_path / "s.sqlite"
    summary = run_sweep(bad + good, store, scheduler="inline", echo=lambda _: None)
    assert (summary.done, summary.failed) == (1, 1)
    with RunStore(store) as st:
        row = st.get(bad[0].key)
    assert row["status"] == "failed" and "Traceback" in row["error"] and "NotSeparableError" in row["error"]
    assert [(p.key, line) for p, line in summary.failures] == [(bad[0].key, row["error"].strip().splitlines()[-1])]
    assert "not NTP-separable" in summary.failures[0][1]
    assert results(store).set_index("key").loc[bad[0].key, "error"] == row["error"]  # the whole traceback
    # the same sweep again re-runs the failed point only (and it fails again, stored once)
    summary = run_sweep(bad + good, store, scheduler="inline", echo=lambda _: None)
    assert (summary.skipped, summary.failed) == (1, 1) and len(results(store)) == 2


def _local_cluster():
    from distributed import LocalCluster

    return LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                        host="127.0.0.1")


def test_local_cluster_sweep_reaches_the_workers_with_one_thread_each(tmp_path):
    points = _points(tmp_path, seeds=1)
    store = tmp_path / "s.sqlite"
    summary = run_sweep(points, store, workers=2, echo=lambda _: None)
    assert (summary.done, summary.failed) == (4, 0)
    df = results(store)
    with RunStore(store) as st:
        workers = {st.get(k)["worker"] for k in df["key"]}
    # run in other processes than this one, each with the thread setting applied (torch.get_num_threads)
    assert all(w.endswith("threads=1") and f":{os.getpid()} " not in w for w in workers)
    assert set(df["key"]) == {p.key for p in points}


def test_killed_worker_task_is_rerun_and_stored_once(tmp_path):
    """Every point takes a few seconds; one worker is SIGKILLed while both are busy: its task runs again."""
    from distributed import Client

    points = grid_points(EXP, {"seed": ["0", "1", "2", "3"]}, {"m": "40", "ratio": "0.5", "trials": "60"},
                         runs_dir=tmp_path / "runs")
    store = tmp_path / "s.sqlite"
    with _local_cluster() as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        victim = next(iter(pids.values()))

        def kill_when_busy():
            deadline = time.time() + 60
            while time.time() < deadline:  # both workers have a task: processing counts per worker
                busy = client.processing()
                if sum(len(v) for v in busy.values()) >= 2 and all(busy.values()):
                    time.sleep(0.3)
                    os.kill(victim, signal.SIGKILL)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        summary = run_sweep(points, store, scheduler=cluster.scheduler_address, echo=lambda _: None)
        killer.join()
    assert (summary.done, summary.failed) == (4, 0)
    with RunStore(store) as st:
        rows = [st.get(p.key) for p in points]
    assert all(r["status"] == "done" for r in rows)
    # the killed worker finished nothing: every result came from a live (or restarted) worker
    assert all(f":{victim} " not in r["worker"] for r in rows)
    assert len(results(store)) == 4


SWEEP_CMD = [sys.executable, "-m", "embgeo.cli", "sweep", EXP, "--grid", "seed=0,1,2,3,4,5,6,7", "--set", "m=40",
             "--set", "ratio=0.5", "--set", "trials=30", "--workers", "2"]


def _wait_for_done(store: Path, n: int, seconds: float = 120) -> None:
    """Poll the store until ``n`` points are done (the sweep is then mid-way), or ``seconds`` pass."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if store.exists() and (results(store)["status"] == "done").sum() >= n:
                return
        except InputError:  # the file exists but the sweep has not written its schema yet
            pass
        time.sleep(0.2)


def _own_group_with_default_sigint():
    """In the child: its own process group (so the test can signal the group as a terminal's Ctrl-C does: the
    client and every Dask worker process) and the default SIGINT (a background job inherits it ignored)."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_interrupted_sweep_resumes_without_losing_or_duplicating_points(tmp_path):
    """Ctrl-C reaches the client and the workers (the whole process group): one line and exit 130, no worker
    tracebacks (before issue 24 each worker printed a KeyboardInterrupt traceback), the unfinished points
    marked interrupted (they stayed 'running'), and the same command resumes them."""
    store = tmp_path / "s.sqlite"
    cmd = SWEEP_CMD + ["--store", str(store)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_own_group_with_default_sigint)
    try:
        _wait_for_done(store, 2)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, output
    assert "interrupted" in output and "Traceback" not in output and "KeyboardInterrupt" not in output
    before = results(store).set_index("key")
    finished = before[before["status"] == "done"]
    assert 2 <= len(finished) < 8, "the sweep must be interrupted mid-way for this test to mean anything"
    assert set(before["status"]) == {"done", "interrupted"}  # nothing left 'running'
    assert (before.loc[before["status"] == "interrupted", "error"] == "interrupted (Ctrl-C)").all()
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"{len(finished)} already done (skipped), {8 - len(finished)} to run ({8 - len(finished)} interrupted " \
           "before)" in again.stdout
    after = results(store).set_index("key")
    assert len(after) == 8 and (after["status"] == "done").all()
    # the points finished before the interrupt were not run again
    assert (after.loc[finished.index, "finished_at"] == finished["finished_at"]).all()
    assert (after.loc[finished.index, "attempts"] == 1).all()


def test_ctrl_c_between_a_result_and_its_store_write_leaves_nothing_running(tmp_path, monkeypatch):
    """The race CI met once: Ctrl-C after a finished task left the futures but before its row was written left
    that point 'running' for good. A client stand-in hands back one finished task; the store write raises
    KeyboardInterrupt as a Ctrl-C landing there would. Every point this sweep claimed ends 'interrupted'."""
    import distributed

    from embgeo.lab import sweep as sweep_mod

    class Client:  # submit hands back a token; as_completed (below) yields the first one only
        def submit(self, fn, point, *args, **kwargs):
            return point.key

        def cancel(self, futures):
            self.cancelled = list(futures)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(distributed, "as_completed", lambda futures: iter(list(futures)[:1]))
    monkeypatch.setattr(sweep_mod, "_result", lambda fut, point: None)
    monkeypatch.setattr(sweep_mod, "_record", interrupted)
    points = _points(tmp_path, ms=("10",), ratios=("0.3",), seeds=3)
    with RunStore(tmp_path / "s.sqlite") as st:
        for p in points:
            st.queue(p.key, experiment=p.experiment, scale=p.scale, seed=p.seed, config=dict(p.config))
        ctx = sweep_mod._Run(st, sweep_mod.SweepSummary(total=3, skipped=0), "here:1", 1, 0, Client())
        with pytest.raises(KeyboardInterrupt):
            sweep_mod._run_dask(points, ctx)
        assert set(st.statuses([p.key for p in points]).values()) == {"interrupted"}
        assert len(ctx.client.cancelled) == 2  # the two tasks still out were cancelled


def test_aggregate_claims_over_seeds():
    seeds = [[Claim("a", 1.0, True), Claim("b", "2/2", True)],
             [Claim("a", 3.0, False), Claim("b", "1/2", False)],
             [Claim("a", 2.0, True), Claim("b", "2/2", True)]]
    a, b = aggregate_claims(seeds)
    assert a.measured == pytest.approx(2.0) and a.seeds.std == pytest.approx(1.0)
    assert (a.seeds.holds, a.seeds.n, a.ok) == (2, 3, False)
    assert b.measured == "2/2" and "std" not in b.to_dict()["seeds"] and b.seeds.holds == 2
    (only,) = aggregate_claims([[Claim("a", 5, True)]])
    assert only.ok and only.seeds.std == 0.0
    assert Claim.from_dict(a.to_dict()) == a  # over seeds, through a file and back


def test_reproduce_over_seeds_aggregates_claims_and_resumes(tmp_path, monkeypatch, only_experiments):
    from embgeo.lab.registry import Experiment
    from embgeo.lab.reproduce import reproduce

    only_experiments("ntp-examples", "attention-selection")
    settings = {"attention-selection": {"seeds": (0,), "steps": 200}}
    original = Experiment.config

    def small(self, scale="quick", overrides=None):  # attention-selection has no 'seed': it runs once
        return original(self, scale, {**settings.get(self.name, {}), **(overrides or {})})

    monkeypatch.setattr(Experiment, "config", small)
    lines = []
    made = reproduce("all", "quick", tmp_path, seeds=2, scheduler="inline", echo=lines.append)
    path, records = made.report, made.records
    examples, selection = records
    assert all(c.seeds.n == 2 for c in examples.claims)
    assert all(c.seeds.n == 1 for c in selection.claims)
    for seed in (0, 1):
        assert (tmp_path / f"seed-{seed}" / "ntp-examples" / "claims.json").exists()
    df = results(tmp_path / "store.sqlite")
    assert len(df) == 3 and sorted(df["seed"].dropna().tolist()) == [0, 1]
    text = path.read_text()
    assert "/2 seeds" in text and "/1 seeds" in text
    # per-seed values are those of the two runs
    from embgeo.lab.record import load

    per_seed = [load(tmp_path / f"seed-{s}" / "ntp-examples").claims for s in (0, 1)]
    for i, claim in enumerate(examples.claims):
        assert claim.seeds.values == [per_seed[0][i].measured, per_seed[1][i].measured]
        assert claim.seeds.holds == per_seed[0][i].ok + per_seed[1][i].ok
    lines.clear()
    reproduce("all", "quick", tmp_path, seeds=2, scheduler="inline", echo=lines.append)
    assert "3 already done (skipped), 0 to run" in lines[0]


def test_paper_column_kept_across_seeds_but_not_for_other_settings():
    from embgeo.lab.registry import get
    from embgeo.lab.runner import at_paper_config

    exp = get("ntp-toy2d")  # quick: fewer steps than the paper's
    assert at_paper_config(exp, exp.config("paper"))
    assert at_paper_config(exp, exp.config("paper", {"seed": "3"}))
    assert not at_paper_config(exp, exp.config("paper", {"steps": "5"}))
    assert not at_paper_config(exp, exp.config("quick"))


def test_cli_sweep_and_results_errors_are_one_line(tmp_path, capsys):
    from embgeo.cli import main

    assert main(["results", "--store", str(tmp_path / "missing.sqlite")]) == 2
    assert main(["sweep", "--store", str(tmp_path / "s.sqlite")]) == 2
    assert main(["sweep", EXP, "--grid", "m", "--store", str(tmp_path / "s.sqlite")]) == 2
    assert main(["sweep", EXP, "--store", str(tmp_path)]) == 2  # a directory
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("embgeo: error: ") for line in err), err
    assert "does not exist" in err[0] or "no such" in err[0].lower() or "missing" in err[0]
    assert "EXPERIMENT" in err[1] and "KEY=V1,V2" in err[2] and "directory" in err[3]


def test_cli_sweep_then_results_csv(tmp_path, capsys):
    from embgeo.cli import main

    store = tmp_path / "s.sqlite"
    assert main(["sweep", EXP, "--grid", "ratio=0.5,1.2", "--set", "m=10", "--set", "trials=2", "--store",
                 str(store), "--scheduler", "inline"]) == 0
    assert (tmp_path / "s-runs" / EXP).is_dir()  # run folders beside the store by default
    capsys.readouterr()
    assert main(["results", "--store", str(store)]) == 0
    import io

    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert sorted(df["config.ratio"]) == [0.5, 1.2] and (df["status"] == "done").all()
    assert main(["results", "--store", str(store), "--format", "parquet", "--out", str(tmp_path / "r.parquet")]) == 0
    assert len(pd.read_parquet(tmp_path / "r.parquet")) == 2


def test_killed_sweep_client_scheduler_and_workers_loses_and_duplicates_nothing(tmp_path):
    """SIGKILL to the whole process group (client, in-process scheduler, worker processes) mid-sweep."""
    store = tmp_path / "s.sqlite"
    cmd = SWEEP_CMD + ["--store", str(store)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        _wait_for_done(store, 2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    before = results(store).set_index("key")
    finished = before[before["status"] == "done"]
    assert 2 <= len(finished) < 8
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"{len(finished)} already done (skipped)" in again.stdout
    after = results(store).set_index("key")
    assert len(after) == 8 and (after["status"] == "done").all()
    assert (after.loc[finished.index, "finished_at"] == finished["finished_at"]).all()


def test_cli_reproduce_over_seeds(tmp_path, only_experiments, capsys):
    from embgeo.cli import main

    only_experiments("ntp-examples")
    assert main(["reproduce", "--seeds", "2", "--scheduler", "inline", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "report:" in out and out.strip().splitlines()[-1] == (
        "claims: 0 of 0 hold, 0 failing, 0 undecided; consistency checks: 2 of 2 pass")  # Fig. 3: checks only
    assert "holds in 2/2 seeds" in (tmp_path / "report.html").read_text()
    assert main(["reproduce", "--seeds", "0", "--out", str(tmp_path)]) == 2


def test_reproduce_over_seeds_fresh_runs_again(tmp_path, only_experiments):
    from embgeo.lab.reproduce import reproduce

    only_experiments("ntp-examples")
    reproduce("all", "quick", tmp_path, seeds=1, scheduler="inline", echo=lambda _: None)
    record = tmp_path / "seed-0" / "ntp-examples" / "record.json"
    written = record.stat().st_mtime_ns
    lines = []
    reproduce("all", "quick", tmp_path, seeds=1, scheduler="inline", resume=False, echo=lines.append)
    assert "0 already done (skipped), 1 to run" in lines[0]
    assert record.stat().st_mtime_ns != written  # run again, not reused from its folder


# -- the summary: claims that fail, per grid point ----------------------------------------------------------------

@dataclass
class BiasedCoinConfig:
    """A coin of probability ``bias`` of heads, tossed ``n`` times."""

    bias: float = 0.5
    n: int = 4000
    seed: int = 0


def run_biased_coin(cfg: BiasedCoinConfig, ctx: RunContext = DETACHED) -> Result:
    """Three claims whose verdicts the settings decide: a fair coin (fails at bias 0.9 in every seed), an
    even seed (fails in odd seeds), and a banded one, failing at seed 0 and undecided at seed 1."""
    heads = float((np.random.default_rng(cfg.seed).random(cfg.n) < cfg.bias).mean())
    return Result([close("fraction of heads is 1/2", heads, 0.5, 5 * 0.5 / np.sqrt(cfg.n)),
                   holds("the seed is even", cfg.seed, cfg.seed % 2 == 0),
                   banded("seed within a band", cfg.seed, 0.5, 0.75)])


COIN = Experiment("coins-biased", "coins", "A biased coin", BiasedCoinConfig, run_biased_coin)
COINS = Paper(name="coins", title="Coins", citation="", order=9, experiments=[COIN])


def test_sweep_summary_names_the_claims_that_fail_per_point(tmp_path, with_papers, capsys):
    """'12 done, 0 failed' is not the whole story: the claims that fail in some seeds of a grid point are listed
    per point (settings without the seed) with their counts, and returned in the summary."""
    with_papers(COINS)
    from embgeo.cli import main

    store = tmp_path / "s.sqlite"
    assert main(["sweep", "coins-biased", "--grid", "bias=0.5,0.9", "--set", "n=4000", "--seeds", "2", "--store",
                 str(store), "--scheduler", "inline"]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("sweep: claims that do not hold in every run of their grid point (of 4 finished runs):")
    assert out[start + 1:] == [
        "  point bias=0.5: 'the seed is even' fails in 1/2 seeds",
        "  point bias=0.5: 'seed within a band' fails in 1/2 seeds, undecided in 1/2 seeds",
        "  point bias=0.9: 'fraction of heads is 1/2' fails in 2/2 seeds",
        "  point bias=0.9: 'the seed is even' fails in 1/2 seeds",
        "  point bias=0.9: 'seed within a band' fails in 1/2 seeds, undecided in 1/2 seeds"]
    # the summary object holds the same, read from the store: a second call runs nothing and says the same
    points = grid_points("coins-biased", {"bias": ["0.5", "0.9"]}, {"n": "4000"}, seeds=2, runs_dir=tmp_path / "r")
    lines = []
    summary = run_sweep(points, store, scheduler="inline", echo=lines.append)
    assert summary.done == 0 and summary.finished == 4
    assert [(pc.settings, pc.claim, pc.runs, pc.fails, pc.undecided) for pc in summary.claims] == [
        ((("n", "4000"), ("bias", "0.5")), "the seed is even", 2, 1, 0),
        ((("n", "4000"), ("bias", "0.5")), "seed within a band", 2, 1, 1),
        ((("n", "4000"), ("bias", "0.9")), "fraction of heads is 1/2", 2, 2, 0),
        ((("n", "4000"), ("bias", "0.9")), "the seed is even", 2, 1, 0),
        ((("n", "4000"), ("bias", "0.9")), "seed within a band", 2, 1, 1)]
    assert lines[-5:] == out[start + 1:]


def test_sweep_summary_of_single_runs_and_when_every_claim_holds(tmp_path, with_papers):
    with_papers(COINS)
    lines = []
    points = grid_points("coins-biased", {"bias": ["0.5"]}, runs_dir=tmp_path / "r")  # seed 0: the band fails
    summary = run_sweep(points, tmp_path / "s.sqlite", scheduler="inline", echo=lines.append)
    assert [(pc.claim, pc.runs, pc.fails, pc.undecided) for pc in summary.claims] == [("seed within a band", 1, 1, 0)]
    assert lines[-1] == "  point bias=0.5: 'seed within a band' fails"  # one run: no count
    lines.clear()
    points = grid_points("coins-biased", {"bias": ["0.5"]}, {"seed": "2"}, runs_dir=tmp_path / "r")
    summary = run_sweep(points, tmp_path / "t.sqlite", scheduler="inline", echo=lines.append)
    assert summary.claims == [] and lines[-1] == "sweep: every claim holds in every finished run (1)"
