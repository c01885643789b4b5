"""Thinning a recording to its budget: which bands of history keep which resolution
(`retention_bands`), thinning one band (`thin`), and the compaction a Recorder runs when its data
passes COMPACT_AT of the budget (`Thinning`, a part of the Recorder).

What it may import: the standard library, gpumix.record.schema."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable

from gpumix.record.schema import SERIES_KEYS, used_bytes

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


class Thinning:
    """Compaction, for the Recorder: needs its `_conn`, `data_bytes`, `wal_bytes`, `keep_whole_s`, `kept`,
    `compactions` and `_database_bytes()`."""

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
