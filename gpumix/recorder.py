"""Recording: the hub's ticks into one SQLite file that replay, export and scripts read.

Tables (times `t` are the snapshots' wall-clock `timestamp_s`):

- `gpu_samples`: per GPU per tick, the numeric fields of the snapshot's GPU row;
- `rank_metrics`: per rank per tick, the training figures (step time, share of comm, ...);
- `events`: power-cap changes, findings appearing and clearing, plans, restarts,
  and whatever a caller passes to `Recorder.event(kind, payload)`;
- `snapshots`: each tick's full snapshot, JSON compressed with zlib (with a preset
  dictionary: the recorder's first snapshot), so a replay shows the same screens.

Each data row has `res`, the seconds it stands for (1 as recorded; 10 or 60 once
downsampled). The file is WAL with synchronous=NORMAL, committed at least every
`commit_interval_s` (0.5 s): a killed hub loses at most its last second. Size stays
under `max_bytes`: when the file nears it, older data is thinned (one row per 10 s
past an hour, one per minute past a day; then harder) and the freed pages given back.

The hub's sampling thread only appends the snapshot to a bounded queue; a writer
thread serialises, compresses and writes. A full queue drops the oldest entry and
counts it (`Recorder.drops`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DEFAULT_MAX_BYTES = 512 * 1024**2
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

# Downsampling ladders, mildest first: (older than this many seconds, keep one row per this many).
# The first is the normal policy; the later ones only run when the file is still too big.
LADDERS: tuple[tuple[tuple[float, float], ...], ...] = (
    ((3600, 10), (86400, 60)),
    ((600, 10), (3600, 60), (86400, 600)),
    ((60, 10), (600, 60), (3600, 600)),
)
COMPACT_AT = 0.9  # of max_bytes: thin the file when it grows past this
COMPACT_TO = 0.7  # ... down to this
COMMIT_SHARE = 0.02  # commit early once a transaction holds this share of max_bytes

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


def connect(path: str | Path, readonly: bool = False) -> sqlite3.Connection:
    """A connection to a recording. Read-only opens never create or change the file."""
    path = Path(path)
    if readonly:
        if not path.exists():
            raise RecordingError(f"no recording at {path}")
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as error:
            raise RecordingError(f"{path} is not a gpumix recording ({error})") from None
        return conn
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    return conn


def open_for_writing(path: str | Path, max_bytes: int) -> sqlite3.Connection:
    conn = connect(path)
    try:
        # auto_vacuum must be set before the first table exists; on an old file it stays as it was
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise RecordingError(f"{path}: SQLite refused WAL mode (journal_mode={mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        # the WAL counts toward the budget: checkpoint it often enough and cut it back after
        conn.execute(f"PRAGMA wal_autocheckpoint = {max(16, min(1000, max_bytes // page_size // 20))}")
        conn.execute(f"PRAGMA journal_size_limit = {max(64 * 1024, max_bytes // 20)}")
        conn.executescript(_SCHEMA)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('created_s', ?)", (repr(time.time()),))
    except sqlite3.DatabaseError as error:
        conn.close()
        raise RecordingError(f"cannot record to {path}: {error}") from None
    return conn


def file_bytes(conn: sqlite3.Connection, path: str | Path) -> int:
    """The recording's size on disk: database pages in use plus the WAL."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
    try:
        wal = os.path.getsize(f"{path}-wal")
    except OSError:
        wal = 0
    return pages + wal


def downsample(conn: sqlite3.Connection, now_s: float, ladder: Iterable[tuple[float, float]]) -> int:
    """Thin rows older than each step's age to one per `res` seconds per series; returns rows deleted."""
    deleted = 0
    for age_s, res_s in ladder:
        cut = now_s - age_s
        for table, keys in SERIES_KEYS.items():
            group = ", ".join((*keys, f"CAST(t / {float(res_s)!r} AS INTEGER)"))
            cursor = conn.execute(
                f"DELETE FROM {table} WHERE t < ? AND res < ? AND rowid NOT IN "
                f"(SELECT MIN(rowid) FROM {table} WHERE t < ? AND res < ? GROUP BY {group})",
                (cut, res_s, cut, res_s),
            )
            deleted += cursor.rowcount
            conn.execute(f"UPDATE {table} SET res = ? WHERE t < ? AND res < ?", (res_s, cut, res_s))
    return deleted


def _rows(conn: sqlite3.Connection) -> int:
    return sum(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in SERIES_KEYS)


def drop_oldest(conn: sqlite3.Connection, fraction: float = 0.5) -> int:
    """The last resort: delete the oldest `fraction` of the recorded time span (events included)."""
    low, high = conn.execute("SELECT MIN(t), MAX(t) FROM snapshots").fetchone()
    if low is None or high is None or high <= low:
        low, high = conn.execute("SELECT MIN(t), MAX(t) FROM gpu_samples").fetchone()
    if low is None or high is None or high <= low:
        return 0
    cut = low + (high - low) * fraction
    deleted = 0
    for table in ("gpu_samples", "rank_metrics", "snapshots", "events"):
        deleted += conn.execute(f"DELETE FROM {table} WHERE t < ?", (cut,)).rowcount
    return deleted


class Recorder:
    """Writes a hub's snapshots and events to a recording; see the module docstring."""

    def __init__(self, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES,
                 commit_interval_s: float = COMMIT_INTERVAL_S, queue_size: int = QUEUE_SIZE,
                 wall_clock: Callable[[], float] = time.time) -> None:
        if max_bytes < 256 * 1024:
            raise RecordingError("a recording needs a budget of at least 256 KiB")
        self.path = Path(path)
        self.max_bytes = int(max_bytes)
        self.commit_interval_s = commit_interval_s
        self._wall_clock = wall_clock
        self._conn = open_for_writing(self.path, self.max_bytes)
        self._queue: deque[tuple[Any, ...]] = deque()
        self._queue_size = queue_size
        self._cond = threading.Condition()
        self._closing = False
        self.drops = 0  # entries dropped because the writer fell behind
        self.written = 0  # snapshots written
        self.compactions = 0
        self.errors = 0
        self._pending_bytes = 0  # written since the last commit (roughly)
        self._zdict_id: int | None = None
        self._zdict: bytes | None = None
        self._known_gpus: set[str] = set()
        self._findings: dict[tuple[str, tuple[int, ...]], dict[str, Any]] | None = None
        self._plan: Any = None
        self._jobs: dict[str, dict[str, Any]] = {}
        self._thread = threading.Thread(target=self._run, name="gpumix-recorder", daemon=True)
        self._thread.start()

    # -- what the hub calls (cheap: append to the queue) -----------------------------

    def attach(self, hub: Any) -> Recorder:
        """Record this hub: every tick's snapshot and its power controls."""
        self._wall_clock = getattr(hub, "_wall_clock", self._wall_clock)
        hub.on_snapshot.append(self.on_snapshot)
        hub.on_control.append(self.on_control)
        return self

    def on_snapshot(self, snapshot: dict[str, Any]) -> None:
        self._put(("snapshot", snapshot))

    def on_control(self, request: dict[str, Any], reply: dict[str, Any]) -> None:
        if reply.get("ok") and reply.get("changes") and not request.get("dry_run"):
            for change in reply["changes"]:
                self.event("power_cap", {**change, "action": request.get("action")})

    def event(self, kind: str, payload: dict[str, Any] | None = None, t: float | None = None) -> None:
        """Record one event (`kind`: 'power_cap', 'plan', 'restart', ... or your own)."""
        self._put(("event", self._wall_clock() if t is None else t, str(kind), payload or {}))

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
                    if self._pending_bytes > COMMIT_SHARE * self.max_bytes:  # fast ticks: keep the WAL small
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
        self._bound_size()

    def _write(self, entry: tuple[Any, ...]) -> None:
        if entry[0] == "snapshot":
            self._write_snapshot(entry[1])
        else:
            _, t, kind, payload = entry
            self._conn.execute("INSERT INTO events VALUES (?, ?, ?)", (t, kind, json.dumps(payload, default=str)))

    def _write_snapshot(self, snapshot: dict[str, Any]) -> None:
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
        ranks = snapshot.get("ranks") or []
        if ranks:
            conn.executemany(
                f"INSERT INTO rank_metrics (t, job, rank, gpu_uuid, {', '.join(RANK_FIELDS)})"
                f" VALUES (?, ?, ?, ?{', ?' * len(RANK_FIELDS)})",
                [(t, r.get("job"), r["rank"], r.get("gpu_uuid"), *(_number(r.get(name)) for name in RANK_FIELDS))
                 for r in ranks],
            )
        data = json.dumps(snapshot, separators=(",", ":"), default=str).encode()
        if self._zdict is None:
            self._zdict = data[-32768:]  # zlib looks back 32 KiB at most
            self._zdict_id = conn.execute("INSERT INTO zdicts (data) VALUES (?)", (self._zdict,)).lastrowid
        compressor = zlib.compressobj(ZLIB_LEVEL, zdict=self._zdict)
        blob = compressor.compress(data) + compressor.flush()
        conn.execute("INSERT INTO snapshots (t, zdict, data) VALUES (?, ?, ?)", (t, self._zdict_id, blob))
        self.written += 1
        self._pending_bytes += len(blob) + 250 * (len(snapshot["gpus"]) + len(ranks))
        self._diff_events(t, snapshot)

    def _diff_events(self, t: float, snapshot: dict[str, Any]) -> None:
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
        for job, status in (snapshot.get("jobs") or {}).items():
            before = self._jobs.get(job)
            if before is not None and status.get("restarts") != before.get("restarts"):
                self._event_row(t, "restart", {"job": job, "restarts": status.get("restarts"),
                                               "state": status.get("state"), "message": status.get("message")})
            elif before is not None and status.get("state") != before.get("state"):
                self._event_row(t, "job_state", {"job": job, "state": status.get("state"), "message": status.get("message")})
            self._jobs[job] = {"restarts": status.get("restarts"), "state": status.get("state")}

    def _event_row(self, t: float, kind: str, payload: dict[str, Any]) -> None:
        self._conn.execute("INSERT INTO events VALUES (?, ?, ?)", (t, kind, json.dumps(payload, default=str)))

    # -- the size bound ---------------------------------------------------------------

    def size_bytes(self) -> int:
        return file_bytes(self._conn, self.path)

    def _bound_size(self) -> None:
        if self.size_bytes() <= COMPACT_AT * self.max_bytes:
            return
        self.compact()

    def compact(self, target_bytes: float | None = None) -> None:
        """Thin older data until the file is under `target_bytes` (default 70 % of max_bytes).

        Deleting every ninth row of ten leaves pages part full, so the size after each step is
        estimated from the rows kept (ticks are thinned alike in every table); once the estimate
        fits, VACUUM rewrites the file compactly.
        """
        target = COMPACT_TO * self.max_bytes if target_bytes is None else target_bytes
        conn = self._conn
        now = conn.execute("SELECT MAX(t) FROM snapshots").fetchone()[0]
        if now is None:
            return
        self.compactions += 1
        self._give_back_pages()
        size_before = self.size_bytes()
        rows_before = _rows(conn)
        steps: list[Callable[[], object]] = [lambda ladder=ladder: downsample(conn, now, ladder) for ladder in LADDERS]
        steps += [lambda: drop_oldest(conn)] * 8
        for step in steps:
            conn.execute("BEGIN")
            step()
            conn.execute("COMMIT")
            if rows_before and size_before * _rows(conn) / rows_before <= target:
                break
        conn.execute("VACUUM")
        self._give_back_pages()

    def _give_back_pages(self) -> None:
        self._conn.execute("PRAGMA incremental_vacuum")
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

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
                "compactions": self.compactions, "max_bytes": self.max_bytes}


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
    if value <= 0:
        raise ValueError(f"must be positive: {text!r}")
    return int(value)
