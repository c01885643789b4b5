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

This module is the writer (queue, thread, rows); the file's schema is in `gpumix.record.schema`,
the size budget in `gpumix.record.size_budget`, the events that follow from two snapshots in
`gpumix.record.events`, thinning to the budget in `gpumix.record.thinning`.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumix.record.events import SnapshotEvents
from gpumix.record.schema import (  # RecordingError: raised to callers, who import it from here too
    GPU_FIELDS,
    RANK_FIELDS,
    RecordingError,
    file_bytes,
    open_for_writing,
    used_bytes,
)
from gpumix.record.size_budget import DEFAULT_MAX_BYTES, check_max_bytes, parse_size, split_budget
from gpumix.record.thinning import COMPACT_AT, KEEP_WHOLE_S, Thinning
from gpumix.wire.snapshot_types import Snapshot

__all__ = ["COMMIT_INTERVAL_S", "DEFAULT_MAX_BYTES", "QUEUE_SIZE", "Recorder", "RecordingError", "parse_size"]
log = logging.getLogger(__name__)
COMMIT_INTERVAL_S = 0.5
QUEUE_SIZE = 256
ZLIB_LEVEL = 6


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    return None


class Recorder(Thinning):
    """Writes a hub's snapshots and events to a recording; see the module docstring."""

    def __init__(self, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES,
                 commit_interval_s: float = COMMIT_INTERVAL_S, queue_size: int = QUEUE_SIZE,
                 wall_clock: Callable[[], float] = time.time, keep_whole_s: float = KEEP_WHOLE_S) -> None:
        check_max_bytes(max_bytes)
        self.path = Path(path)
        self.max_bytes = int(max_bytes)
        self.keep_whole_s = keep_whole_s
        self.commit_interval_s = commit_interval_s
        self._wall_clock = wall_clock
        self._conn = open_for_writing(self.path, self.max_bytes)
        budget = split_budget(self.max_bytes, self._conn.execute("PRAGMA page_size").fetchone()[0])
        self.wal_bytes, self.data_bytes = budget.wal_bytes, budget.data_bytes
        self._commit_bytes, self._max_blob_bytes = budget.commit_bytes, budget.max_blob_bytes
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
        self._events = SnapshotEvents()
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
        """Record this hub: every tick's snapshot and its power controls. A recording is viewed later (a
        replay is the dashboard): the hub reads busy GPUs' PCIe each tick, as for a dashboard."""
        self._wall_clock = getattr(hub, "_wall_clock", self._wall_clock)
        hub.viewing = True
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
        for kind, payload in self._events.diff(snapshot):
            self._event_row(t, kind, payload)

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

