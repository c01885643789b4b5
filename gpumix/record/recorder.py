"""Recording: the hub's ticks into one SQLite file that replay, export and scripts read.

Tables (times `t` are the snapshots' wall-clock `timestamp_s`):

- `gpu_samples`: per GPU per tick, the numeric fields of the snapshot's GPU row;
- `rank_metrics`: per rank per tick, the training figures (step time, share of comm, ...);
- `events`: power-cap changes, findings appearing and clearing, plans, restarts,
  and whatever a caller passes to `Recorder.event(kind, payload)`;
- `snapshots`: each tick's full snapshot, JSON compressed with zlib (with a preset
  dictionary: the recorder's first snapshot), so a replay shows the same screens.

Each data row has `res`, the seconds it stands for (1 as recorded; more once
thinned). The file is WAL with synchronous=NORMAL, committed at least every
`commit_interval_s` (0.5 s): a killed hub loses at most its last second.

The size bound: the database, its WAL and its shared-memory index together stay
within `max_bytes`. The WAL gets a fixed reserve (checkpointed at a quarter of it and
cut back to it), the rest holds the data. The file is never VACUUMed (that writes
a second copy of it into the WAL): thinned rows free pages that later rows reuse,
so the database file stops growing at its data budget. When the data passes 90 %
of it, rows are thinned to 70 % (see `retention_bands`): the newest minutes whole,
older data at a resolution that halves with each doubling of age, events kept
(only the oldest dropped, when they alone pass a quarter of the budget). Deletes
run in slices small enough for the WAL reserve. A rank's metrics are recorded
when it reports a new step, not every tick (a rank gone stays in snapshots).
Files are created 0600 (they hold command lines and environments); SQLite gives
the WAL and its index the database file's mode.

The hub's sampling thread only appends the snapshot to a bounded queue; a writer
thread serialises, compresses and writes. A full queue drops the oldest entry and
counts it (`Recorder.drops`).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import sqlite3
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumix.wire.snapshot_types import Snapshot

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DEFAULT_MAX_BYTES = 512 * 1024**2
MIN_MAX_BYTES = 256 * 1024  # below this the WAL reserve, the index and the schema leave no room for data
MAX_MAX_BYTES = 2**50  # a petabyte: any larger figure is a typo
COMMIT_INTERVAL_S = 0.5
QUEUE_SIZE = 256
ZLIB_LEVEL = 6

# The numeric fields of a snapshot's GPU row that change from tick to tick (static facts
# such as the name or the power-limit range live in the snapshots and the `gpus` table).
GPU_FIELDS = (
    "util_gpu_pct", "util_mem_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "power_cap_w",
    "power_cap_enforced_w", "temperature_c", "fan_pct", "clock_sm_mhz", "clock_mem_mhz",
    "pcie_link_gen_current", "pcie_link_width_current", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s",
    "pcie_replay_count", "energy_j", "pcie_link_bytes_per_s_current", "pcie_rx_link_share",
    "pcie_tx_link_share", "lost",
)
RANK_FIELDS = (
    "step", "step_time_s", "samples_per_s", "comm_share", "data_wait_share", "loss", "mem_peak_bytes",
    "straggler",
)

# Thinning (compact): the newest KEEP_WHOLE_S at full resolution; data older than that in bands
# that double in length, each at a resolution double the one before (base, 2 base, 4 base, ...):
# each band holds about as many rows as the one before, so a week costs little more than a day.
# While the data does not fit, the base grows ×4 up to the whole window, then the window halves.
KEEP_WHOLE_S = 300.0
FIRST_BASE_S = 1.0
MIN_WHOLE_S = 0.01
MAX_GROWTH = 2.0**21  # bands this much longer than the one before: one band of history, about
COMPACT_AT = 0.9  # of the data budget: thin when the rows in use pass this
COMPACT_TO = 0.7  # ... down to this
EVENTS_SHARE = 0.25  # of the data budget: events past it lose their oldest
WAL_SHARE = 0.15  # of max_bytes: the WAL's reserve (checkpointed at half, cut back to it)
MAX_WAL_BYTES = 64 * 1024**2
SHM_BLOCK_BYTES = 32 * 1024  # the WAL index grows in blocks of this per 4096 WAL frames
SMALL_PAGE_BELOW = 64 * 1024**2  # budgets under this use 1 KiB pages: less per index and WAL frame
MAX_BLOB_SHARE = 1 / 16  # of the budget (and at most a quarter of the WAL reserve): a larger snapshot or event is not stored whole

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gpus (
    uuid TEXT PRIMARY KEY, gpu INTEGER, name TEXT, model TEXT, tier TEXT, pci_bus_id TEXT,
    mem_total_bytes INTEGER, power_limit_min_w REAL, power_limit_max_w REAL, power_limit_default_w REAL,
    pcie_gen_max INTEGER, pcie_width_max INTEGER, hostname TEXT);
CREATE TABLE IF NOT EXISTS gpu_samples (
    t REAL NOT NULL, gpu INTEGER NOT NULL, res REAL NOT NULL DEFAULT 1,
    {", ".join(f"{name} REAL" for name in GPU_FIELDS)});
CREATE INDEX IF NOT EXISTS gpu_samples_gpu_t ON gpu_samples (gpu, t);
CREATE TABLE IF NOT EXISTS rank_metrics (
    t REAL NOT NULL, job TEXT, rank INTEGER NOT NULL, gpu_uuid TEXT, res REAL NOT NULL DEFAULT 1,
    {", ".join(f"{name} REAL" for name in RANK_FIELDS)});
CREATE INDEX IF NOT EXISTS rank_metrics_t ON rank_metrics (t);
CREATE TABLE IF NOT EXISTS events (t REAL NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_t ON events (t);
CREATE TABLE IF NOT EXISTS zdicts (id INTEGER PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
    t REAL NOT NULL, zdict INTEGER, res REAL NOT NULL DEFAULT 1, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS snapshots_t ON snapshots (t);
"""

# table -> the columns that tell one series from another (downsampling keeps one row per bucket of each)
SERIES_KEYS = {"gpu_samples": ("gpu",), "rank_metrics": ("job", "rank"), "snapshots": ()}


class RecordingError(RuntimeError):
    """A file that cannot be recorded to or read; str() is one line for the user."""


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    return None


# What a reader needs: each table and its columns (a file without them is not a recording).
REQUIRED_COLUMNS = {
    "meta": ("key", "value"),
    "gpus": ("uuid", "gpu", "tier"),
    "gpu_samples": ("t", "gpu", "res", *GPU_FIELDS),
    "rank_metrics": ("t", "job", "rank", "gpu_uuid", "res", *RANK_FIELDS),
    "events": ("t", "kind", "payload"),
    "zdicts": ("id", "data"),
    "snapshots": ("t", "zdict", "res", "data"),
}


def _shown(value: object) -> str:
    """A value from a file for a one-line message: its repr, control characters escaped, short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """RecordingError (one line) unless this is a recording of the schema version we read."""
    def not_ours(why: str) -> RecordingError:
        return RecordingError(f"{path} is not a gpumix recording ({why})")

    tables = {name for name, in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "meta" not in tables:
        raise not_ours("no table meta")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        raise not_ours("no schema version")
    if str(row[0]) != str(SCHEMA_VERSION):
        raise RecordingError(f"{path}: a recording of schema version {_shown(row[0])};"
                             f" this gpumix reads version {SCHEMA_VERSION}")
    for table, columns in REQUIRED_COLUMNS.items():
        if table not in tables:
            raise not_ours(f"no table {table}")
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        missing = [c for c in columns if c not in present]
        if missing:
            raise not_ours(f"table {table} lacks {', '.join(missing[:3])}")


def connect(path: str | Path, readonly: bool = False) -> sqlite3.Connection:
    """A connection to a recording. Read-only opens never create or change the file, and check
    that it is a recording of our schema (RecordingError, one line, if not)."""
    path = Path(path)
    if readonly:
        if not path.exists():
            raise RecordingError(f"no recording at {path}")
        if not path.is_file():
            raise RecordingError(f"{path} is not a gpumix recording (not a file)")
        conn = None
        try:  # a URI of the absolute path: a '?' or '#' in a name stays part of the name
            conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, check_same_thread=False)
            check_schema(conn, path)
        except sqlite3.Error as error:
            if conn is not None:
                conn.close()
            raise RecordingError(f"{path} is not a gpumix recording ({error})") from None
        except RecordingError:
            if conn is not None:
                conn.close()
            raise
        return conn
    try:
        return sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    except sqlite3.Error as error:
        raise RecordingError(f"cannot record to {path}: {error}") from None


def _create_private(path: Path) -> None:
    """Create the file 0600 if it is new (it will hold command lines and environments); an
    existing file keeps its mode. OSError becomes RecordingError, one line."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError as error:
        raise RecordingError(f"cannot record to {path}: {error.strerror or error}") from None
    os.close(fd)


def wal_reserve_bytes(max_bytes: int) -> int:
    return int(min(MAX_WAL_BYTES, WAL_SHARE * max_bytes))


def shm_reserve_bytes(max_bytes: int, page_size: int) -> int:
    frames = wal_reserve_bytes(max_bytes) // page_size + 1
    return SHM_BLOCK_BYTES * (frames // 4096 + 1)


def open_for_writing(path: str | Path, max_bytes: int) -> sqlite3.Connection:
    path = Path(path)
    _create_private(path)
    conn = connect(path)
    try:
        if conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]:
            check_schema(conn, path)  # a file of another version, or not ours: refused, untouched
        # page size and auto_vacuum hold only before the first table exists; an old file keeps its own
        conn.execute(f"PRAGMA page_size = {1024 if max_bytes < SMALL_PAGE_BELOW else 4096}")
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise RecordingError(f"{path}: SQLite refused WAL mode (journal_mode={mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        # the WAL counts toward the budget: checkpoint at a quarter of its reserve (a transaction
        # adds up to about as much again: each touches a few pages of every table and index)
        reserve = wal_reserve_bytes(max_bytes)
        conn.execute(f"PRAGMA wal_autocheckpoint = {max(4, min(1000, reserve // 4 // page_size))}")
        conn.execute(f"PRAGMA journal_size_limit = {reserve}")
        conn.executescript(_SCHEMA)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('created_s', ?)", (repr(time.time()),))
    except sqlite3.Error as error:
        conn.close()
        raise RecordingError(f"cannot record to {path}: {error}") from None
    except RecordingError:
        conn.close()
        raise
    return conn


def file_bytes(conn: sqlite3.Connection, path: str | Path) -> int:
    """The recording's size on disk: the database file, its WAL and the WAL's index."""
    del conn  # kept for callers; the files say it all
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += os.path.getsize(f"{path}{suffix}")
        except OSError:
            pass
    return total


def used_bytes(conn: sqlite3.Connection) -> int:
    """Bytes of the database's pages in use (free pages are reused before the file grows)."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]
    return pages * conn.execute("PRAGMA page_size").fetchone()[0]


def retention_bands(now_s: float, oldest_s: float, whole_s: float, base_s: float, growth: float = 2.0
                    ) -> list[tuple[float, float, float]]:
    """(start, end, res): what thinning keeps of the data between oldest and now. Everything
    newer than now - whole_s stays whole; the band [now - g^(j+1) whole, now - g^j whole) keeps
    one row per base * (g - 1) g^j seconds per series (per GPU, per rank, snapshots): with g = 2,
    bands of doubling length at doubling resolution, each about whole / base rows. A larger
    growth g makes fewer bands (for a budget that holds only a few rows of history)."""
    bands = []
    end, length = now_s - whole_s, whole_s * (growth - 1)
    res = base_s * (growth - 1)
    while end > oldest_s:
        bands.append((max(oldest_s, end - length), end, res))
        end, length, res = end - length, length * growth, res * growth
    return bands


def thin(conn: sqlite3.Connection, start_s: float, end_s: float, res_s: float,
         part: tuple[float, float] | None = None) -> int:
    """Keep one row per `res_s` bucket per series (the first) of the rows in [start, end);
    returns rows deleted. With `part`, delete only within that part of the range (a slice, so
    one transaction stays small) while the first row of each bucket is still sought in the
    whole range: slice after slice thins exactly as one pass. (Events are never thinned.)"""
    low, high = part or (start_s, end_s)
    deleted = 0
    for table, keys in SERIES_KEYS.items():
        group = ", ".join((*keys, f"CAST(t / {float(res_s)!r} AS INTEGER)"))
        cursor = conn.execute(
            f"DELETE FROM {table} WHERE t >= ? AND t < ? AND rowid NOT IN "
            f"(SELECT MIN(rowid) FROM {table} WHERE t >= ? AND t < ? GROUP BY {group})",
            (low, high, start_s, end_s),
        )
        deleted += cursor.rowcount
        conn.execute(f"UPDATE {table} SET res = ? WHERE t >= ? AND t < ? AND res < ?", (res_s, low, high, res_s))
    return deleted


class Recorder:
    """Writes a hub's snapshots and events to a recording; see the module docstring."""

    def __init__(self, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES,
                 commit_interval_s: float = COMMIT_INTERVAL_S, queue_size: int = QUEUE_SIZE,
                 wall_clock: Callable[[], float] = time.time, keep_whole_s: float = KEEP_WHOLE_S) -> None:
        if not MIN_MAX_BYTES <= max_bytes <= MAX_MAX_BYTES:
            raise RecordingError(f"a recording's size budget must be {MIN_MAX_BYTES // 1024} KiB to 1 PiB"
                                 f" (the WAL, its index and the schema need room), got {max_bytes} bytes")
        self.path = Path(path)
        self.max_bytes = int(max_bytes)
        self.keep_whole_s = keep_whole_s
        self.commit_interval_s = commit_interval_s
        self._wall_clock = wall_clock
        self._conn = open_for_writing(self.path, self.max_bytes)
        page_size = self._conn.execute("PRAGMA page_size").fetchone()[0]
        # The budget: the WAL's reserve, its index, one transaction's growth (the file grows by
        # that much past the check that starts thinning), and the data.
        self.wal_bytes = wal_reserve_bytes(self.max_bytes)
        rest = self.max_bytes - self.wal_bytes - shm_reserve_bytes(self.max_bytes, page_size)
        self._commit_bytes = max(page_size, self.wal_bytes // 8)  # a transaction's payload, well inside the WAL
        self._max_blob_bytes = int(min(self.wal_bytes / 4, rest * MAX_BLOB_SHARE))
        self.data_bytes = rest - (self._commit_bytes + self._max_blob_bytes + 16 * page_size)
        self._queue: deque[tuple[Any, ...]] = deque()
        self._queue_size = queue_size
        self._cond = threading.Condition()
        self._closing = False
        self.drops = 0  # entries dropped because the writer fell behind
        self.written = 0  # snapshots written
        self.oversized = 0  # snapshots too large to store whole (their GPU and rank rows are kept)
        self.compactions = 0
        self.errors = 0
        self.kept: dict[str, float] = {}  # the last compaction's whole_s and base_s
        self._pending_bytes = 0  # written since the last commit (roughly)
        self._zdict_id: int | None = None
        self._zdict: bytes | None = None
        self._known_gpus: set[str] = set()
        self._rank_marks: dict[tuple[Any, Any], tuple[Any, Any]] = {}  # (job, rank) -> (pid, step) last recorded
        self._findings: dict[tuple[str, tuple[int, ...]], dict[str, Any]] | None = None
        self._plan: Any = None
        self._jobs: dict[str, dict[str, Any]] = {}
        try:
            if self._database_bytes() > self.data_bytes:  # reopened with a smaller budget
                self.compact()
                self._give_back_pages()
        except sqlite3.Error as error:
            self._conn.close()
            raise RecordingError(f"cannot record to {self.path}: {error}") from None
        self._thread = threading.Thread(target=self._run, name="gpumix-recorder", daemon=True)
        self._thread.start()

    # -- what the hub calls (cheap: append to the queue) -----------------------------

    def attach(self, hub: Any) -> Recorder:
        """Record this hub: every tick's snapshot and its power controls."""
        self._wall_clock = getattr(hub, "_wall_clock", self._wall_clock)
        hub.on_snapshot.append(self.on_snapshot)
        hub.on_control.append(self.on_control)
        return self

    def on_snapshot(self, snapshot: Snapshot) -> None:
        self._put(("snapshot", snapshot))

    def on_control(self, request: dict[str, Any], reply: dict[str, Any]) -> None:
        if reply.get("ok") and reply.get("changes") and not request.get("dry_run"):
            for change in reply["changes"]:
                self.event("power_cap", {**change, "action": request.get("action")})

    def event(self, kind: str, payload: dict[str, Any] | None = None, t: float | None = None) -> None:
        """Record one event (`kind`: 'power_cap', 'plan', 'restart', ... or your own)."""
        self._put(("event", self._wall_clock() if t is None else t, str(kind)[:64], payload or {}))

    def _put(self, entry: tuple[Any, ...]) -> None:
        with self._cond:
            if self._closing:
                return
            if len(self._queue) >= self._queue_size:
                oldest = next((i for i, queued in enumerate(self._queue) if queued[0] != "flush"), None)
                if oldest is not None:
                    del self._queue[oldest]
                    self.drops += 1
            self._queue.append(entry)
            self._cond.notify()

    # -- the writer thread ------------------------------------------------------------

    def _run(self) -> None:
        dirty = False
        last_commit = time.monotonic()
        while True:
            with self._cond:
                if not self._queue and not self._closing:
                    wait = self.commit_interval_s - (time.monotonic() - last_commit) if dirty else None
                    if wait is None or wait > 0:
                        self._cond.wait(wait)
                entries = list(self._queue)
                self._queue.clear()
                closing = self._closing
            flushed = [entry[1] for entry in entries if entry[0] == "flush"]
            try:
                for entry in entries:
                    if entry[0] == "flush":
                        continue
                    if not dirty:
                        self._conn.execute("BEGIN")
                        dirty = True
                    self._write(entry)
                    if self._pending_bytes > self._commit_bytes:  # fast ticks: keep the WAL small
                        self._commit()
                        dirty = False
                        last_commit = time.monotonic()
                if dirty and (closing or flushed or time.monotonic() - last_commit >= self.commit_interval_s):
                    self._commit()
                    dirty = False
                    last_commit = time.monotonic()
            except sqlite3.DatabaseError:
                self.errors += 1
                log.exception("recording to %s failed", self.path)
                if self._conn.in_transaction:
                    try:
                        self._conn.execute("ROLLBACK")
                    except sqlite3.DatabaseError:
                        pass
                dirty = False
                time.sleep(0.2)  # a full disk: don't spin
            for done in flushed:
                done.set()
            if closing:
                with self._cond:
                    if not self._queue:
                        return

    def _commit(self) -> None:
        self._conn.execute("COMMIT")
        self._pending_bytes = 0
        if used_bytes(self._conn) > COMPACT_AT * self.data_bytes:
            self.compact()

    def _write(self, entry: tuple[Any, ...]) -> None:
        if entry[0] == "snapshot":
            self._write_snapshot(entry[1])
        else:
            _, t, kind, payload = entry
            self._event_row(t, kind, payload)

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        t = float(snapshot["timestamp_s"])
        conn = self._conn
        hostname = snapshot.get("hostname")
        for gpu in snapshot["gpus"]:
            if gpu["uuid"] not in self._known_gpus:
                self._known_gpus.add(gpu["uuid"])
                conn.execute(
                    "INSERT OR REPLACE INTO gpus VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (gpu["uuid"], gpu["index"], gpu.get("name"), gpu.get("model"), gpu.get("tier"), gpu.get("pci_bus_id"),
                     gpu.get("mem_total_bytes"), gpu.get("power_limit_min_w"), gpu.get("power_limit_max_w"),
                     gpu.get("power_limit_default_w"), gpu.get("pcie_gen_max"), gpu.get("pcie_width_max"), hostname),
                )
        conn.executemany(
            f"INSERT INTO gpu_samples (t, gpu, {', '.join(GPU_FIELDS)}) VALUES (?, ?{', ?' * len(GPU_FIELDS)})",
            [(t, gpu["index"], *(_number(gpu.get(name)) for name in GPU_FIELDS)) for gpu in snapshot["gpus"]],
        )
        ranks = self._ranks_with_a_new_step(snapshot.get("ranks") or [])
        if ranks:
            conn.executemany(
                f"INSERT INTO rank_metrics (t, job, rank, gpu_uuid, {', '.join(RANK_FIELDS)})"
                f" VALUES (?, ?, ?, ?{', ?' * len(RANK_FIELDS)})",
                [(t, r.get("job"), r["rank"], r.get("gpu_uuid"), *(_number(r.get(name)) for name in RANK_FIELDS))
                 for r in ranks],
            )
        data = json.dumps(snapshot, separators=(",", ":"), default=str).encode()
        if self._zdict is None:
            self._zdict = data[-min(32768, self._max_blob_bytes):]  # zlib looks back 32 KiB at most
            self._zdict_id = conn.execute("INSERT INTO zdicts (data) VALUES (?)", (self._zdict,)).lastrowid
        compressor = zlib.compressobj(ZLIB_LEVEL, zdict=self._zdict)
        blob = compressor.compress(data) + compressor.flush()
        if len(blob) <= self._max_blob_bytes:
            conn.execute("INSERT INTO snapshots (t, zdict, data) VALUES (?, ?, ?)", (t, self._zdict_id, blob))
        else:  # one snapshot would crowd out the rest: its GPU and rank rows stand for it
            self.oversized += 1
        self.written += 1
        self._pending_bytes += min(len(blob), self._max_blob_bytes) + 250 * (len(snapshot["gpus"]) + len(ranks))
        self._diff_events(t, snapshot)

    def _ranks_with_a_new_step(self, ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The ranks whose step (or process) changed since last recorded: a rank gone, or one
        between steps, is not written again every tick. Ranks no longer in the snapshot are forgotten."""
        marks, fresh = {}, []
        for r in ranks:
            key, mark = (r.get("job"), r.get("rank")), (r.get("pid"), r.get("step"))
            marks[key] = mark
            if r.get("step") is not None and self._rank_marks.get(key) != mark:
                fresh.append(r)
        self._rank_marks = marks
        return fresh

    def _diff_events(self, t: float, snapshot: Snapshot) -> None:
        """Events that follow from two snapshots: findings appearing or clearing, plans, restarts."""
        findings = {(f["id"], tuple(f.get("gpus") or ())): f for f in snapshot.get("findings") or []}
        if self._findings is not None:
            for key in findings.keys() - self._findings.keys():
                f = findings[key]
                self._event_row(t, "finding_appeared", {k: f.get(k) for k in ("id", "severity", "title", "evidence", "gpus")})
            for key in self._findings.keys() - findings.keys():
                f = self._findings[key]
                self._event_row(t, "finding_cleared", {k: f.get(k) for k in ("id", "severity", "title", "gpus")})
        self._findings = findings
        plan = snapshot.get("plan")
        if plan is not None and plan != self._plan:
            self._event_row(t, "plan", {"plan": plan})
        self._plan = plan
        jobs = snapshot.get("jobs") or {}
        for job, status in jobs.items():
            before = self._jobs.get(job)
            if before is not None and status.get("restarts") != before.get("restarts"):
                self._event_row(t, "restart", {"job": job, "restarts": status.get("restarts"),
                                               "state": status.get("state"), "message": status.get("message")})
            elif before is not None and status.get("state") != before.get("state"):
                self._event_row(t, "job_state", {"job": job, "state": status.get("state"), "message": status.get("message")})
        self._jobs = {job: {"restarts": status.get("restarts"), "state": status.get("state")}
                      for job, status in jobs.items()}  # jobs the hub forgot are forgotten here too

    def _event_row(self, t: float, kind: str, payload: dict[str, Any]) -> None:
        text = json.dumps(payload, default=str)
        if len(text) > self._max_blob_bytes:  # the event stays, its payload would crowd out the rest
            text = json.dumps({"truncated": True, "bytes": len(text)})
        self._conn.execute("INSERT INTO events VALUES (?, ?, ?)", (t, kind, text))
        self._pending_bytes += len(text) + 32

    # -- the size bound ---------------------------------------------------------------

    def size_bytes(self) -> int:
        """On disk now: the database, its WAL and the WAL's index."""
        return file_bytes(self._conn, self.path)

    def _database_bytes(self) -> int:
        conn = self._conn
        return conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]

    def compact(self, target_bytes: float | None = None) -> None:
        """Thin the data until the pages in use are under `target_bytes` (default 70 % of the
        data budget): the oldest events past their share first, then `retention_bands` with a
        coarser base, then fewer bands of history, then a shorter whole window; at the very end
        only the first and the newest tick stay."""
        target = COMPACT_TO * self.data_bytes if target_bytes is None else target_bytes
        conn = self._conn
        now = conn.execute("SELECT MAX(t) FROM gpu_samples").fetchone()[0]
        if now is None:
            return
        self.compactions += 1
        self._trim_events()
        # from one step milder than last time: a steady stream does not start over at every compaction
        whole_s = min(self.keep_whole_s, 2 * self.kept.get("whole_s", self.keep_whole_s))
        base_s = max(FIRST_BASE_S, self.kept.get("base_s", FIRST_BASE_S) / 4)
        growth = max(2.0, self.kept.get("growth", 2.0) / 4)
        while used_bytes(conn) > target:
            oldest = conn.execute("SELECT MIN(t) FROM gpu_samples").fetchone()[0]
            for start, end, res in retention_bands(now, oldest, whole_s, base_s, growth):
                self._thin_in_slices(start, end, res)
            if used_bytes(conn) <= target:
                break
            if base_s * 4 <= whole_s:
                base_s *= 4  # older data coarser first ...
            elif growth < MAX_GROWTH:
                growth *= 4  # ... then fewer bands of it ...
            elif whole_s > MIN_WHOLE_S:
                whole_s /= 2  # ... then fewer minutes whole
            else:  # the first tick and the newest alone
                self._in_slices(oldest, now, lambda a, b, first=oldest: self._delete_between(a, b, first))
                break
        self.kept = {"whole_s": whole_s, "base_s": base_s, "growth": growth}

    def _thin_in_slices(self, start_s: float, end_s: float, res_s: float) -> None:
        self._in_slices(start_s, end_s, lambda a, b: thin(self._conn, start_s, end_s, res_s, part=(a, b)))

    def _in_slices(self, start_s: float, end_s: float, change: Callable[[float, float], object]) -> None:
        """Run `change(a, b)` over [start, end) in slices that each hold about half the WAL's
        reserve of rows (one transaction each, so a checkpoint can follow): the edges are the
        times of every n-th GPU row in the range, so dense and thinned stretches alike fit."""
        conn = self._conn
        rows = conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0]
        bytes_per_row = used_bytes(conn) / max(1, rows)  # a GPU row and its share of the rest
        every = max(1, int(self.wal_bytes / 4 / bytes_per_row))
        times = [t for t, in conn.execute("SELECT t FROM gpu_samples WHERE t >= ? AND t < ? ORDER BY t",
                                          (start_s, end_s))]
        edges = [start_s, *sorted({times[i] for i in range(every, len(times), every)} - {start_s}), end_s]
        for low, high in itertools.pairwise(edges):
            conn.execute("BEGIN")
            change(low, high)
            conn.execute("COMMIT")

    def _delete_between(self, start_s: float, end_s: float, keep_s: float) -> None:
        for table in SERIES_KEYS:
            self._conn.execute(f"DELETE FROM {table} WHERE t >= ? AND t < ? AND t != ?", (start_s, end_s, keep_s))

    def _trim_events(self) -> None:
        """Events are kept before data, up to EVENTS_SHARE of the budget: past it, the oldest go."""
        conn = self._conn
        room = EVENTS_SHARE * self.data_bytes
        total, cut = 0, None
        for t, size in conn.execute("SELECT t, length(payload) + length(kind) + 32 FROM events ORDER BY t DESC"):
            total += size
            if total > room:
                cut = t
                break
        if cut is not None:  # the oldest, a contiguous range: whole pages freed, little WAL written
            conn.execute("BEGIN")
            conn.execute("DELETE FROM events WHERE t <= ?", (cut,))
            conn.execute("COMMIT")

    def _give_back_pages(self) -> None:
        """Shrink the file to the pages in use, a WAL reserve at a time (a file reopened with a
        smaller budget)."""
        conn = self._conn
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        step = max(1, self.wal_bytes // 2 // page_size)
        while conn.execute("PRAGMA freelist_count").fetchone()[0] > 0:
            before = self._database_bytes()
            conn.execute(f"PRAGMA incremental_vacuum({step})").fetchall()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if self._database_bytes() >= before:  # not an incremental-vacuum file
                break

    # -- stopping ------------------------------------------------------------------------

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Commit everything queued so far now; True once it is in the file."""
        done = threading.Event()
        with self._cond:
            if self._closing:
                return False
            self._queue.append(("flush", done))  # never dropped for room (_put skips it)
            self._cond.notify()
        return done.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.DatabaseError:
                pass
            self._conn.close()

    def stats(self) -> dict[str, Any]:
        return {"path": str(self.path), "snapshots": self.written, "drops": self.drops, "errors": self.errors,
                "compactions": self.compactions, "oversized": self.oversized, "max_bytes": self.max_bytes}


def parse_size(text: str) -> int:
    """'512M', '2G', '300k', '1048576' -> bytes (binary units)."""
    units = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        value = float(number) * scale
    except ValueError:
        raise ValueError(f"not a size: {text!r} (e.g. 512M, 2G)") from None
    if not 0 < value <= MAX_MAX_BYTES:  # inf and nan fail this too
        raise ValueError(f"must be a size above 0 and at most 1 PiB: {text!r}")
    return int(value)
