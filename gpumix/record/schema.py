"""A recording's file: its schema, opening it (0600, WAL, a page size for its budget), checking that a
file is a recording of this schema, and what it takes on disk.

What it may import: the standard library."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

SCHEMA_VERSION = 1

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

WAL_SHARE = 0.15  # of max_bytes: the WAL's reserve (checkpointed at half, cut back to it)
MAX_WAL_BYTES = 64 * 1024**2
SHM_BLOCK_BYTES = 32 * 1024  # the WAL index grows in blocks of this per 4096 WAL frames
SMALL_PAGE_BELOW = 64 * 1024**2  # budgets under this use 1 KiB pages: less per index and WAL frame

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
