"""The durable run store of embgeo sweeps: an SQLite index of experiment runs.

Each run's outputs live in its run folder (written by :func:`embgeo.lab.runner.run`);
the store keeps one row per *point* (experiment, scale, config) with its status, timings, claims,
scalars and where the folder is. A point's key is :func:`point_key`, so a sweep that is started
again finds the points already done and skips them.

The store is one SQLite file in WAL mode: readers never block the writer, several processes may
write at once (each waits up to 60 s for the write lock), and a process killed in the middle of a
write leaves the file consistent, because every change of a row is one transaction. A sweep *claims*
a point before running it (:meth:`RunStore.claim`, one transaction), so two sweeps on one store never
run a point twice; a point whose claiming process has died (on this host) may be claimed again, and a
sweep stopped by Ctrl-C marks its claimed points ``interrupted``. Reading (:func:`results`) opens the
file read-only, so an archived store on read-only media can be read.

>>> with RunStore("runs/store.sqlite") as store:                        # doctest: +SKIP
...     key = point_key("ntp-gd", "quick", {"lr": 0.1})
...     store.queue(key, experiment="ntp-gd", scale="quick", seed=0, config={"lr": 0.1})
...     store.mark_running(key, worker="host:1234")
...     store.mark_done(key, seconds=1.5, claims=[...], scalars={}, run_dir="runs/x", figures=[], versions={})
>>> results("runs/store.sqlite")                                        # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embgeo.errors import InputError

if TYPE_CHECKING:
    import pandas

STATUSES = ("queued", "running", "done", "failed", "interrupted")
FORMATS = ("csv", "parquet", "json")
#: 2: status 'interrupted' and the column ``owner`` (the sweep process that claimed a running point); a
#: version-1 store is migrated when opened for writing and read as it is.
SCHEMA_VERSION = 2
#: Written into ``meta`` so that a foreign database that happens to have a ``meta`` table is refused.
APPLICATION = "embgeo run store"
BUSY_TIMEOUT_S = 60.0

#: The leading columns of :func:`results`, present even when the store is empty.
RESULT_COLUMNS = ("key", "experiment", "scale", "seed", "status", "attempts", "seconds",
                  "started_at", "finished_at", "run_dir", "error")

_JSON_COLUMNS = {"config_json": "config", "claims_json": "claims", "scalars_json": "scalars",
                 "figures_json": "figures", "versions_json": "versions"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    scale TEXT NOT NULL,
    seed INTEGER,
    sweep TEXT,
    config_json TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed', 'interrupted')),
    attempts INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    queued_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    seconds REAL,
    error TEXT,
    claims_json TEXT,
    scalars_json TEXT,
    run_dir TEXT,
    trace TEXT,
    figures_json TEXT,
    versions_json TEXT,
    owner TEXT
);
CREATE INDEX IF NOT EXISTS runs_experiment ON runs (experiment);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status);
"""


def _canonical(obj: Any) -> str:
    """JSON text that is the same for equal inputs in every process (sorted keys, no spaces)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _digest(obj: Any) -> str:
    return hashlib.sha256(_canonical(obj).encode()).hexdigest()[:16]


def point_key(experiment: str, scale: str, config: dict) -> str:
    """The key of one sweep point: the first 16 hex digits of the sha256 of its canonical JSON.

    Built from ``{"experiment", "scale", "config"}`` only (not from the seed or the sweep name, which a
    sweep puts into the config when they matter), so the same point gets the same key in every process.
    """
    if not isinstance(config, dict):
        raise InputError(f"point_key: config must be a dict, got {type(config).__name__}")
    return _digest({"experiment": experiment, "scale": scale, "config": config})


#: The columns of a version-1 store, copied into the version-2 table by the migration.
_V1_COLUMNS = ("key, experiment, scale, seed, sweep, config_json, config_hash, status, attempts, worker, queued_at, "
               "started_at, finished_at, seconds, error, claims_json, scalars_json, run_dir, trace, figures_json, "
               "versions_json")
#: SQLite errors that mean the file cannot be written (permissions, an immutable or read-only file or mount, a
#: full disk, a lock held past the busy timeout): bad input to report in one line, not a bug.
_UNWRITABLE = ("readonly", "read-only", "unable to open", "disk i/o", "locked", "full", "permission")


def this_process() -> str:
    """``host:pid`` of this process: the owner a sweep writes into the points it claims."""
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str | None) -> bool:
    """Whether the process ``host:pid`` may still be running: False only for a pid of this host that is gone
    (another host's process cannot be checked from here and counts as alive)."""
    import os
    import socket

    host, _, pid = (owner or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return bool(owner)
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _now() -> str:
    """The current time as an ISO 8601 UTC string (sortable as text)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class RunStore:
    """One connection to the run store at ``path`` (created with its schema unless ``create=False``).

    Every process opens its own :class:`RunStore`: SQLite connections must not cross processes.
    Bad input (a directory, a file that is not an embgeo store, an unknown key) is an
    :class:`~embgeo.errors.InputError` with a one-line message.
    """

    def __init__(self, path: str | Path, *, create: bool = True, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        create = create and not readonly
        if self.path.is_dir():
            raise InputError(f"run store {self.path} is a directory; expected a file such as {self.path / 'runs.db'}")
        if not self.path.exists():
            if not create:
                raise InputError(f"run store {self.path} does not exist")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(f"run store {self.path}: cannot create its folder ({exc.strerror or exc})") from None
        # One connection may be used from several threads (check_same_thread=False); the lock keeps their
        # transactions from interleaving on it.
        self._lock = threading.RLock()
        try:
            # isolation_level=None: no implicit transactions; writes use BEGIN IMMEDIATE (see _write).
            self._conn = self._connect()
        except sqlite3.Error as exc:
            if "not a database" in str(exc):
                raise InputError(f"{self.path} is not an embgeo run store (not an SQLite database)") from None
            raise InputError(f"run store {self.path}: cannot open it ({exc})") from None
        self._conn.row_factory = sqlite3.Row
        try:
            self._open(create)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            if "not a database" in str(exc):
                raise InputError(f"{self.path} is not an embgeo run store (not an SQLite database)") from None
            raise InputError(f"run store {self.path}: {exc}") from None
        except InputError:
            self._conn.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        """A connection; read-only (``mode=ro``) for a reader, which then never writes the file. A WAL file whose
        shared-memory file cannot be created (a read-only directory or mount) is opened as immutable."""
        kwargs = {"timeout": BUSY_TIMEOUT_S, "isolation_level": None, "check_same_thread": False}
        if not self.readonly:
            return sqlite3.connect(self.path, **kwargs)
        from urllib.parse import quote

        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, **kwargs)
        try:
            conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.OperationalError as exc:
            if "unable to open" not in str(exc):
                raise
            conn.close()
            conn = sqlite3.connect(uri + "&immutable=1", uri=True, **kwargs)
        return conn

    def _open(self, create: bool) -> None:
        """Refuse foreign databases, switch to WAL, and create the schema in an empty database (a reader only
        checks the schema)."""
        self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        empty = not self._tables()  # reading the header is also what refuses a file that is not SQLite
        if not empty or not create:
            self._check_schema()  # before any change: a foreign database is left exactly as it was
        if self.readonly:
            return
        self._switch_to_wal()
        if not empty and self._version() == "1":
            self._migrate()
        if empty:
            # Two processes may create the same store at once: the write lock serialises them and IF NOT
            # EXISTS / INSERT OR IGNORE make the second a no-op. (executescript would commit early.)
            with self._write() as conn:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.executemany("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                                 [("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION))])
            self._check_schema()

    def _switch_to_wal(self) -> None:
        """Put the file in WAL mode, retrying while another process holds a lock.

        WAL is a property of the file: set once, it is only read on later opens. The switch needs
        exclusive access and SQLite does not run the busy handler for it (``PRAGMA journal_mode = WAL``
        fails at once with "database is locked" while another process creates the same store), so it
        is retried with a short random back-off until BUSY_TIMEOUT_S has passed.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                if self._conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))

    def _tables(self) -> set[str]:
        rows = self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {r[0] for r in rows}

    def _check_schema(self) -> None:
        """Refuse a database that is not an embgeo run store, or one of another schema version."""
        tables = self._tables()
        if not tables:
            raise InputError(f"{self.path} is not an embgeo run store (an empty database)")
        if not {"meta", "runs"} <= tables:
            raise InputError(f"{self.path} is an SQLite database but not an embgeo run store (no meta/runs tables)")
        meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("application") != APPLICATION:
            raise InputError(f"{self.path} is an SQLite database but not an embgeo run store")
        readable = {str(SCHEMA_VERSION), "1"}  # version 1 is migrated on the first write
        if meta.get("schema_version") not in readable:
            raise InputError(f"run store {self.path} has schema version {meta.get('schema_version')}; "
                             f"this embgeo reads versions 1 and {SCHEMA_VERSION}")

    def _version(self) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return None if row is None else row[0]

    def _migrate(self) -> None:
        """Version 1 → 2 in one transaction: the runs table rebuilt with the 'interrupted' status and the owner
        column (SQLite cannot change a CHECK constraint in place); a concurrent opener finds it done."""
        with self._write() as conn:
            if self._version() != "1":
                return
            conn.execute(_SCHEMA.split(";")[1].replace("CREATE TABLE IF NOT EXISTS runs", "CREATE TABLE runs_v2"))
            conn.execute(f"INSERT INTO runs_v2 ({_V1_COLUMNS}) SELECT {_V1_COLUMNS} FROM runs")
            conn.execute("DROP TABLE runs")
            conn.execute("ALTER TABLE runs_v2 RENAME TO runs")
            for statement in _SCHEMA.split(";")[2:]:
                if statement.strip():
                    conn.execute(statement)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE takes the write lock up front (waiting up to the busy
        timeout), so a transaction never fails half-way on a lock; any error rolls it back. A file that
        cannot be written (read-only, immutable, a full disk) is an InputError naming the store."""
        if self.readonly:
            raise InputError(f"run store {self.path}: opened read-only")
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                except BaseException:
                    if self._conn.in_transaction:  # SQLite may already have rolled back (e.g. on a full disk)
                        self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if not any(word in str(exc).lower() for word in _UNWRITABLE):
                    raise
                raise InputError(f"run store {self.path}: cannot write it ({exc})") from None

    # -- writing ---------------------------------------------------------------------------------------

    def queue(self, key: str, *, experiment: str, scale: str, seed: int | None, config: dict,
              sweep: str | None = None) -> bool:
        """Add point ``key`` with status ``queued``; True if it was added, False if the key was already there.

        An existing row (done, failed, running or queued) is left exactly as it is: a finished run is never
        thrown away by queueing it again.
        """
        if not isinstance(config, dict):
            raise InputError(f"queue {key}: config must be a dict, got {type(config).__name__}")
        if seed is not None and not isinstance(seed, int):
            raise InputError(f"queue {key}: seed must be an int or None, got {seed!r}")
        with self._write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO runs (key, experiment, scale, seed, sweep, config_json, config_hash, status,"
                " attempts, queued_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?)",
                (key, experiment, scale, seed, sweep, json.dumps(config, default=str), _digest(config), _now()))
            return cur.rowcount == 1

    def mark_running(self, key: str, *, worker: str = "") -> None:
        """Status ``running``: ``started_at`` now, ``attempts`` + 1, ``worker`` recorded.

        The results of an earlier attempt are cleared, so that a row never shows a failure beside the
        claims of a previous run, or a running run with an old error.
        """
        self._update(key, "status = 'running', started_at = ?, attempts = attempts + 1, worker = ?, "
                          "finished_at = NULL, seconds = NULL, error = NULL, claims_json = NULL, "
                          "scalars_json = NULL, run_dir = NULL, trace = NULL, figures_json = NULL, "
                          "versions_json = NULL", (_now(), worker))

    def claim(self, key: str, *, owner: str, worker: str = "") -> bool:
        """Take point ``key`` to run it: True if this call made it ``running`` (with ``owner`` and
        :meth:`mark_running`'s bookkeeping), False if it is done or another live process holds it.

        One transaction, so of two sweeps on one store exactly one claims a point. A ``running`` point whose
        owner is a dead process of this host (a killed sweep) is claimed again; one running elsewhere is not.
        """
        with self._write() as conn:
            row = conn.execute("SELECT status, owner FROM runs WHERE key = ?", (key,)).fetchone()
            if row is None:
                raise InputError(f"run store {self.path}: no run with key {key!r} (queue it first)")
            status, holder = row
            if status == "done" or (status == "running" and holder != owner and owner_alive(holder)):
                return False
            conn.execute("UPDATE runs SET status = 'running', started_at = ?, attempts = attempts + 1, worker = ?, "
                         "owner = ?, finished_at = NULL, seconds = NULL, error = NULL, claims_json = NULL, "
                         "scalars_json = NULL, run_dir = NULL, trace = NULL, figures_json = NULL, "
                         "versions_json = NULL WHERE key = ?", (_now(), worker, owner, key))
            return True

    def mark_interrupted(self, keys: Iterable[str], *, owner: str, why: str = "interrupted (Ctrl-C)") -> int:
        """Status ``interrupted`` for the points of ``keys`` that ``owner`` still holds as running (a finished
        one keeps its result); returns how many. They run again when the sweep is repeated."""
        keys = list(keys)
        with self._write() as conn:
            changed = 0
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                marks = ",".join("?" * len(chunk))
                cur = conn.execute(f"UPDATE runs SET status = 'interrupted', finished_at = ?, error = ? WHERE key IN "
                                   f"({marks}) AND status = 'running' AND owner = ?", (_now(), why, *chunk, owner))
                changed += cur.rowcount
            return changed

    def holders(self, keys: Iterable[str]) -> dict[str, str | None]:
        """``key -> owner`` of the points of ``keys`` that are running."""
        with self._lock:
            keys = list(keys)
            out: dict[str, str | None] = {}
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                marks = ",".join("?" * len(chunk))
                out.update(self._conn.execute(f"SELECT key, owner FROM runs WHERE status = 'running' AND key IN "
                                              f"({marks})", chunk).fetchall())
            return out

    def mark_done(self, key: str, *, seconds: float, claims: list[dict], scalars: dict, run_dir: str,
                  figures: list[str], versions: dict, trace: str | None = None, worker: str | None = None) -> None:
        """Status ``done`` with the run's results, all in one transaction (a reader never sees half of it).

        ``claims`` are :meth:`Claim.to_dict` dicts (at least ``name``, ``measured``, ``ok``); ``scalars``
        named numbers of the run; ``run_dir`` its folder, ``trace`` its trace.csv if any. ``worker``, if
        given, replaces the one of :meth:`mark_running` (on a cluster only the finished task knows where it ran).
        """
        if not isinstance(claims, list) or not all(isinstance(c, dict) and "name" in c for c in claims):
            raise InputError(f"mark_done {key}: claims must be a list of dicts with a 'name' (Claim.to_dict)")
        if not isinstance(scalars, dict):
            raise InputError(f"mark_done {key}: scalars must be a dict, got {type(scalars).__name__}")
        self._update(key, "status = 'done', finished_at = ?, seconds = ?, claims_json = ?, scalars_json = ?, "
                          "run_dir = ?, trace = ?, figures_json = ?, versions_json = ?, error = NULL, "
                          "worker = coalesce(?, worker)",
                     (_now(), float(seconds), _canonical(claims), _canonical(scalars), str(run_dir),
                      None if trace is None else str(trace), _canonical(list(figures)), _canonical(versions),
                      worker))

    def mark_failed(self, key: str, *, error: str, worker: str | None = None) -> None:
        """Status ``failed`` with ``error`` (the full traceback text) and ``finished_at`` now (and ``worker``
        if given, as in :meth:`mark_done`)."""
        self._update(key, "status = 'failed', finished_at = ?, error = ?, worker = coalesce(?, worker)",
                     (_now(), str(error), worker))

    def _update(self, key: str, assignments: str, values: tuple) -> None:
        """UPDATE the row of ``key`` in one transaction; an unknown key is an error, not a silent no-op."""
        with self._write() as conn:
            cur = conn.execute(f"UPDATE runs SET {assignments} WHERE key = ?", (*values, key))
            if cur.rowcount != 1:
                raise InputError(f"run store {self.path}: no run with key {key!r} (queue it first)")

    # -- reading ---------------------------------------------------------------------------------------

    def get(self, key: str) -> dict | None:
        """The row of ``key`` as a dict, or None. JSON columns are decoded and named without ``_json``
        (``config``, ``claims``, ``scalars``, ``figures``, ``versions``; None until the run is done)."""
        with self._lock:
            row = self._conn.execute("SELECT * FROM runs WHERE key = ?", (key,)).fetchone()
        return None if row is None else _decode(row)

    def statuses(self, keys: Iterable[str] | None = None) -> dict[str, str]:
        """``key -> status`` of every run, or of ``keys`` (keys not in the store are left out)."""
        with self._lock:
            if keys is None:
                return dict(self._conn.execute("SELECT key, status FROM runs ORDER BY rowid").fetchall())
            keys = list(keys)
            out: dict[str, str] = {}
            for i in range(0, len(keys), 500):  # stay far below SQLite's limit on bound parameters
                chunk = keys[i:i + 500]
                marks = ",".join("?" * len(chunk))
                out.update(self._conn.execute(f"SELECT key, status FROM runs WHERE key IN ({marks})", chunk).fetchall())
            return out

    def rows_of(self, keys: Iterable[str]) -> dict[str, dict]:
        """``key -> row`` (as :meth:`get` returns it) of ``keys``, in one query per 500 keys; keys not in the store
        are left out."""
        keys = list(keys)
        out: dict[str, dict] = {}
        with self._lock:
            for i in range(0, len(keys), 500):  # stay far below SQLite's limit on bound parameters
                chunk = keys[i:i + 500]
                marks = ",".join("?" * len(chunk))
                for row in self._conn.execute(f"SELECT * FROM runs WHERE key IN ({marks})", chunk).fetchall():
                    out[row["key"]] = _decode(row)
        return out

    def rows(self, experiment: str | None = None, status: str | None = None) -> list[dict]:
        """Every row (as :meth:`get` returns it) in the order queued, optionally of one experiment/status."""
        if status is not None and status not in STATUSES:
            raise InputError(f"status: expected one of {', '.join(STATUSES)}, got {status!r}")
        where, args = [], []
        if experiment is not None:
            where.append("experiment = ?")
            args.append(experiment)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY rowid"
        with self._lock:
            fetched = self._conn.execute(sql, args).fetchall()
        return [_decode(r) for r in fetched]

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"


def _decode(row: sqlite3.Row) -> dict:
    """A ``runs`` row as a plain dict with its JSON columns decoded."""
    out = {}
    for name in row.keys():
        value = row[name]
        if name in _JSON_COLUMNS:
            out[_JSON_COLUMNS[name]] = None if value is None else json.loads(value)
        else:
            out[name] = value
    return out


# -- tables of results -------------------------------------------------------------------------------------


def _cell(value: Any) -> Any:
    """A value for one table cell: lists, tuples and dicts as their JSON text, anything else as is."""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def _result_row(run: dict) -> dict:
    """One run as a flat dict: fixed columns, then config., scalar., claim./ok. columns."""
    row = {c: run[c] for c in RESULT_COLUMNS}  # ``error``: the whole traceback (multi-line cells are quoted)
    for name, value in (run["config"] or {}).items():
        row[f"config.{name}"] = _cell(value)
    for name, value in (run["scalars"] or {}).items():
        row[f"scalar.{name}"] = _cell(value)
    for claim in run["claims"] or []:
        row[f"claim.{claim['name']}"] = _cell(claim.get("measured"))
        row[f"ok.{claim['name']}"] = None if claim.get("ok") is None else bool(claim["ok"])
    return row


def results(store: str | Path | RunStore, experiment: str | None = None) -> pandas.DataFrame:
    """One row per run (every status) of the store, optionally of one ``experiment``.

    Columns: :data:`RESULT_COLUMNS` (``error`` is the whole traceback of a failed run), then
    ``config.<name>`` (lists as JSON text), ``scalar.<name>``, and per claim ``claim.<name>`` (the
    measured value) and ``ok.<name>`` (the verdict); None where a run has no such value. A path that does
    not exist is an :class:`InputError`: reading never creates or changes a store (it is opened read-only).
    """
    import pandas as pd

    if isinstance(store, RunStore):
        runs = store.rows(experiment)
    else:
        with RunStore(store, readonly=True) as opened:
            runs = opened.rows(experiment)
    flat = [_result_row(r) for r in runs]
    frame = pd.DataFrame(flat, columns=_columns(flat))
    # Nullable dtypes: integers stay integers and verdicts stay booleans where some runs lack the value.
    frame["seed"] = frame["seed"].astype("Int64")
    for name in frame.columns:
        if name.startswith("ok."):
            frame[name] = frame[name].astype("boolean")
    return frame


def _columns(flat: list[dict]) -> list[str]:
    """The fixed columns, then config., scalar. and claim./ok. columns, each group in order of first use."""
    seen: dict[str, None] = {}  # an ordered set
    for row in flat:
        seen.update(dict.fromkeys(row))
    extra = [name for name in seen if name not in RESULT_COLUMNS]

    def group(name: str) -> int:
        return 0 if name.startswith("config.") else 1 if name.startswith("scalar.") else 2

    return list(RESULT_COLUMNS) + sorted(extra, key=group)  # a stable sort keeps each claim beside its ok


def _parquet_safe(frame: pandas.DataFrame) -> pandas.DataFrame:
    """``frame`` with each column that mixes kinds of values (say a number in one run and a string in
    another, which parquet cannot store) turned into text; uniform columns are kept as they are."""
    frame = frame.copy()
    for name in frame.columns:
        if frame[name].dtype != object:
            continue
        values = frame[name].dropna()
        kinds = {bool if isinstance(v, bool) else float if isinstance(v, (int, float)) else type(v) for v in values}
        if len(kinds) > 1:
            frame[name] = [None if v is None else _cell(v) if isinstance(v, (list, dict)) else str(v)
                           for v in frame[name]]
    return frame


def write_results(store: str | Path, out: str | Path | None, fmt: str = "csv", experiment: str | None = None) -> str:
    """Write :func:`results` as ``fmt`` (csv, parquet or json records) to ``out``; returns the path.

    With ``out`` None the csv/json text is returned instead (for stdout); parquet needs a file.
    """
    if fmt not in FORMATS:
        raise InputError(f"format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "parquet" and out is None:
        raise InputError("parquet needs --out FILE (it is a binary format, not for stdout)")
    frame = results(store, experiment)
    if out is None:
        return frame.to_csv(index=False) if fmt == "csv" else frame.to_json(orient="records", indent=2) + "\n"
    out = Path(out)
    if out.is_dir():
        raise InputError(f"--out {out} is a directory; expected a file name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "csv":
            frame.to_csv(out, index=False)
        elif fmt == "json":
            out.write_text(frame.to_json(orient="records", indent=2) + "\n")
        else:
            _parquet_safe(frame).to_parquet(out, index=False)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot write it ({exc.strerror or exc})") from None
    return str(out)
