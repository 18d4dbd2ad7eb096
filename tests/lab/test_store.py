"""The run store of sweeps: its round trip, its keys, and its survival of killed and concurrent writers.

The crash and concurrency cases run real writer processes (``sys.executable -c``) against one file,
since that is where SQLite's locking and WAL recovery matter; a store written in-process only
would not exercise them.
"""

import io
import json
import signal
import sqlite3
import subprocess
import sys
import time

import pandas as pd
import pytest

from embgeo.errors import InputError
from embgeo.lab.store import STATUSES, RunStore, point_key, results, write_results

# A writer process: queue + running + done for N keys named by PREFIX, as fast as it can.
WRITER = """
import sys
from embgeo.lab.store import RunStore, point_key
path, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with RunStore(path) as store:
    print("open", flush=True)
    for i in range(n):
        config = {"i": i, "prefix": prefix}
        key = point_key("writer", "quick", config)
        store.queue(key, experiment="writer", scale="quick", seed=i, config=config)
        store.mark_running(key, worker=prefix)
        store.mark_done(key, seconds=0.01, claims=[{"name": "c", "measured": float(i), "ok": True}],
                        scalars={"i": i}, run_dir=f"runs/{prefix}{i}", figures=["fig"], versions={"python": "x"})
"""

CLAIMS = [
    {"name": "gap", "measured": 0.25, "ok": True, "paper": 0.3, "theory": None, "tolerance": "±0.1", "note": ""},
    {"name": "rank", "measured": 3.0, "ok": False, "paper": None, "theory": 4, "tolerance": ">= 4", "note": "low"},
]
TRACEBACK = 'ValueError: boom\nTraceback (most recent call last):\n  File "x.py", line 1\nValueError: boom'


def _writer(path, prefix, n):
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), prefix, str(n)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def store_path(tmp_path):
    """A store with one done run (two claims), one failed run, and one queued run of another experiment."""
    path = tmp_path / "deep" / "store.db"
    with RunStore(path) as store:
        done = point_key("ntp-gd", "quick", {"lr": 0.1, "dims": (2, 3)})
        store.queue(done, experiment="ntp-gd", scale="quick", seed=0, config={"lr": 0.1, "dims": (2, 3)}, sweep="s1")
        store.mark_running(done, worker="host:1")
        store.mark_done(done, seconds=1.5, claims=CLAIMS, scalars={"loss": 0.01}, run_dir="runs/a",
                        figures=["fig1"], versions={"python": "3.11"}, trace="runs/a/trace.csv")
        failed = point_key("ntp-gd", "quick", {"lr": 10.0, "dims": (2, 3)})
        store.queue(failed, experiment="ntp-gd", scale="quick", seed=1, config={"lr": 10.0, "dims": (2, 3)})
        store.mark_running(failed)
        store.mark_failed(failed, error=TRACEBACK)
        store.mark_running(failed, worker="dask")
        store.mark_failed(failed, error=TRACEBACK, worker="host:2")
        other = point_key("collapse-uniform", "quick", {"n": 4})
        store.queue(other, experiment="collapse-uniform", scale="quick", seed=None, config={"n": 4})
    return path


def test_round_trip(store_path):
    done = point_key("ntp-gd", "quick", {"lr": 0.1, "dims": (2, 3)})
    failed = point_key("ntp-gd", "quick", {"lr": 10.0, "dims": (2, 3)})
    other = point_key("collapse-uniform", "quick", {"n": 4})
    with RunStore(store_path) as store:
        row = store.get(done)
        assert row["status"] == "done" and row["attempts"] == 1 and row["worker"] == "host:1"
        assert row["claims"] == CLAIMS and row["scalars"] == {"loss": 0.01} and row["figures"] == ["fig1"]
        assert row["config"] == {"lr": 0.1, "dims": [2, 3]} and row["versions"] == {"python": "3.11"}
        assert (row["run_dir"], row["trace"], row["sweep"], row["seconds"], row["error"]) == (
            "runs/a", "runs/a/trace.csv", "s1", 1.5, None)
        assert row["queued_at"] <= row["started_at"] <= row["finished_at"]
        assert row["finished_at"].endswith("+00:00")
        # Queueing a done key again is refused and changes nothing.
        assert not store.queue(done, experiment="ntp-gd", scale="paper", seed=9, config={})
        assert store.get(done) == row
        bad = store.get(failed)
        assert bad["status"] == "failed" and bad["error"] == TRACEBACK and bad["attempts"] == 2
        assert bad["worker"] == "host:2" and bad["claims"] is None
        assert store.get("no-such-key") is None
        assert store.statuses() == {done: "done", failed: "failed", other: "queued"}
        assert store.statuses([other, "no-such-key"]) == {other: "queued"}
        assert [r["key"] for r in store.rows(experiment="ntp-gd")] == [done, failed]
        assert [r["key"] for r in store.rows(status="queued")] == [other]
        assert store.rows(experiment="ntp-gd", status="queued") == []
        with pytest.raises(InputError, match="status"):
            store.rows(status="finished")
        with pytest.raises(InputError, match="no run with key"):
            store.mark_running("no-such-key")
    assert set(STATUSES) == {"queued", "running", "done", "failed", "interrupted"}

    frame = results(store_path)
    assert list(frame.columns[:11]) == ["key", "experiment", "scale", "seed", "status", "attempts", "seconds",
                                        "started_at", "finished_at", "run_dir", "error"]
    assert list(frame.columns[11:]) == ["config.lr", "config.dims", "config.n", "scalar.loss",
                                        "claim.gap", "ok.gap", "claim.rank", "ok.rank"]
    by_key = frame.set_index("key")
    assert by_key.loc[done, "claim.gap"] == 0.25 and by_key.loc[done, "ok.gap"] == True  # noqa: E712
    assert by_key.loc[done, "claim.rank"] == 3.0 and by_key.loc[done, "ok.rank"] == False  # noqa: E712
    assert frame["ok.gap"].dtype == "boolean" and frame["seed"].dtype == "Int64"
    assert by_key.loc[done, "config.dims"] == "[2, 3]" and by_key.loc[done, "scalar.loss"] == 0.01
    assert by_key.loc[failed, "error"] == TRACEBACK  # the whole traceback (issue 24: it was the first line)
    assert by_key.loc[failed, "attempts"] == 2 and by_key.loc[failed, "config.lr"] == 10.0
    assert by_key.loc[failed, "ok.gap"] is pd.NA and pd.isna(by_key.loc[other, "config.lr"])
    assert by_key.loc[other, "config.n"] == 4 and pd.isna(by_key.loc[other, "seed"])
    assert list(results(store_path, "collapse-uniform")["key"]) == [other]


def test_rerun_clears_the_previous_attempt(tmp_path):
    with RunStore(tmp_path / "s.db") as store:
        store.queue("k", experiment="e", scale="quick", seed=0, config={})
        store.mark_running("k")
        store.mark_done("k", seconds=1.0, claims=CLAIMS, scalars={}, run_dir="r", figures=[], versions={})
        store.mark_running("k", worker="w2")
        row = store.get("k")
        assert row["status"] == "running" and row["attempts"] == 2 and row["worker"] == "w2"
        assert row["claims"] is None and row["run_dir"] is None and row["finished_at"] is None
        store.mark_done("k", seconds=2.0, claims=[], scalars={}, run_dir="r2", figures=[], versions={}, worker="w3")
        assert (store.get("k")["worker"], store.get("k")["run_dir"]) == ("w3", "r2")


def test_point_key_is_stable_across_processes_and_sensitive_to_each_part():
    config = {"lr": 0.5, "dims": (2, 3), "name": "x", "nested": {"b": 1, "a": [1, 2]}}
    key = point_key("ntp-gd", "quick", config)
    code = ("from embgeo.lab.store import point_key; "
            "print(point_key('ntp-gd', 'quick', {'nested': {'a': [1, 2], 'b': 1}, 'name': 'x', 'dims': [2, 3], "
            "'lr': 0.5}))")
    other_process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other_process.stdout.strip() == key
    assert len(key) == 16 and int(key, 16) >= 0
    variants = [point_key("ntp-overparam", "quick", config), point_key("ntp-gd", "paper", config),
                point_key("ntp-gd", "quick", {**config, "lr": 0.25}),
                point_key("ntp-gd", "quick", {**config, "nested": {"b": 2, "a": [1, 2]}}),
                point_key("ntp-gd", "quick", {k: v for k, v in config.items() if k != "name"})]
    assert key not in variants and len(set(variants)) == len(variants)


def _kill_while_writing(path, prefix, delay):
    """Start a writer on ``path``, SIGKILL it ``delay`` seconds after it opened the store."""
    proc = _writer(path, prefix, 10**7)
    try:
        assert proc.stdout.readline().strip() == "open", proc.stderr.read()
        time.sleep(delay)
        assert proc.poll() is None, "the writer finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_killed_writer_leaves_a_consistent_store(tmp_path):
    # Several kills at different moments (each on the store the previous one left behind), so that one
    # lands inside a run's update often enough that a mark_done split over two transactions is caught.
    path = tmp_path / "store.db"
    for round_, delay in enumerate((0.5, 0.15, 0.25, 0.35, 0.45)):
        _kill_while_writing(path, f"r{round_}-", delay)
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            counts = dict(conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())
            half_done = conn.execute("SELECT count(*) FROM runs WHERE status = 'done' AND (claims_json IS NULL "
                                     "OR run_dir IS NULL OR finished_at IS NULL)").fetchone()[0]
        finally:
            conn.close()
        assert counts.get("done", 0) > 10 * (round_ + 1), counts  # it really was writing when it died
        assert half_done == 0, f"round {round_}: {half_done} done rows without their results"
    frame = results(path)
    assert len(frame) == sum(counts.values())
    assert frame.loc[frame["status"] == "done", "ok.c"].all()
    # The lock died with the writer: a new process can write at once.
    with RunStore(path) as store:
        assert store.queue("after", experiment="e", scale="quick", seed=None, config={})


def test_two_writers_at_once_do_not_corrupt_the_store(tmp_path):
    path = tmp_path / "fresh" / "store.db"  # both create it: the schema creation races too
    procs = [_writer(path, prefix, 300) for prefix in ("a", "b")]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    with RunStore(path) as store:
        statuses = store.statuses()
        assert len(statuses) == 600 and set(statuses.values()) == {"done"}
        assert {r["worker"] for r in store.rows()} == {"a", "b"}
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    frame = results(path)
    assert sorted(frame["scalar.i"]) == sorted(list(range(300)) * 2)


def _typed_like(reread, expected):
    """``reread`` with the nullable dtypes of ``expected``: csv and json text do not carry dtypes."""
    return reread.astype({name: expected[name].dtype for name in expected.columns
                          if str(expected[name].dtype) in ("boolean", "Int64")})


def test_write_results_files_reread_equal(store_path, tmp_path):
    expected = results(store_path)
    csv = write_results(store_path, tmp_path / "out" / "r.csv", "csv")
    pd.testing.assert_frame_equal(_typed_like(pd.read_csv(csv), expected), expected, check_dtype=False)
    js = write_results(store_path, tmp_path / "out" / "r.json", "json")
    assert len(json.loads(open(js).read())) == 3
    pd.testing.assert_frame_equal(_typed_like(pd.read_json(js, orient="records", dtype=False), expected), expected,
                                  check_dtype=False)
    pq = write_results(store_path, tmp_path / "out" / "r.parquet", "parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(pq), expected)  # parquet keeps the dtypes too
    text = write_results(store_path, None, "csv", experiment="collapse-uniform")
    assert text.splitlines()[0].startswith("key,experiment,scale,seed,status")
    assert len(text.splitlines()) == 2
    assert len(json.loads(write_results(store_path, None, "json"))) == 3


def test_parquet_takes_a_claim_measured_as_number_in_one_run_and_text_in_another(tmp_path):
    path = tmp_path / "s.db"
    with RunStore(path) as store:
        for key, measured in (("k1", 0.5), ("k2", "rows equal")):
            store.queue(key, experiment="e", scale="quick", seed=0, config={})
            store.mark_done(key, seconds=1.0, claims=[{"name": "c", "measured": measured, "ok": True}],
                            scalars={}, run_dir="r", figures=[], versions={})
    out = write_results(path, tmp_path / "r.parquet", "parquet")
    assert list(pd.read_parquet(out)["claim.c"]) == ["0.5", "rows equal"]


def test_empty_and_unknown(tmp_path):
    path = tmp_path / "s.db"
    RunStore(path).close()
    frame = results(path)
    assert frame.empty and list(frame.columns) == ["key", "experiment", "scale", "seed", "status", "attempts",
                                                   "seconds", "started_at", "finished_at", "run_dir", "error"]
    assert pd.read_csv(io.StringIO(write_results(path, None, "csv"))).columns.tolist() == list(frame.columns)
    assert results(path, "no-such-experiment").empty


def test_bad_input_is_an_input_error(store_path, tmp_path):
    (tmp_path / "text.txt").write_text("not a database at all\n")
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    conn.close()
    cases = [
        (lambda: write_results(store_path, None, "xlsx"), "csv, parquet, json"),
        (lambda: write_results(store_path, None, "parquet"), "parquet needs --out FILE"),
        (lambda: write_results(tmp_path / "missing.db", None), "does not exist"),
        (lambda: results(tmp_path), "is a directory"),
        (lambda: RunStore(tmp_path), "is a directory"),
        (lambda: results(tmp_path / "text.txt"), "not an SQLite database"),
        (lambda: RunStore(tmp_path / "text.txt"), "not an SQLite database"),
        (lambda: RunStore(foreign), "not an embgeo run store"),
    ]
    for call, message in cases:
        with pytest.raises(InputError, match=message) as info:
            call()
        assert "\n" not in str(info.value)
    assert not (tmp_path / "missing.db").exists()  # reading never creates a store
    assert (tmp_path / "text.txt").read_text() == "not a database at all\n"
    with sqlite3.connect(foreign) as conn:  # the refused database was not touched (not even switched to WAL)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["meta"]
    conn.close()


def test_opening_waits_for_the_wal_switch_while_another_process_holds_a_lock(tmp_path):
    """PRAGMA journal_mode = WAL needs exclusive access and SQLite runs no busy handler for it: while another
    connection holds a write lock on the (still rollback-journal) file, the open must wait, not fail."""
    import threading

    path = tmp_path / "store.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # a RESERVED lock: reads go on, the switch to WAL cannot
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        t0 = time.perf_counter()
        store = RunStore(path)
        waited = time.perf_counter() - t0
    finally:
        release.join()
        holder.close()
    assert waited >= 0.4  # it did meet the lock
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    store.close()
