"""Replay a recording: a snapshot source for gpumix-top that serves recorded snapshots in time order.

`ReplaySource` has what the app reads from a live hub (snapshot(), series(),
control()) plus the controls of a player: pause, seek, speed. Positions are the
recording's own times (the snapshots' `timestamp_s`); playing moves the position
at `speed` recorded seconds per real second. Controls are refused: a replay is
read-only. A recording still being written is followed: every REFRESH_S the
index of snapshots is read again, so the end moves on and a player at the end
shows the newest (as `tail -f` does).
"""

from __future__ import annotations

import bisect
import json
import math
import sqlite3
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumix.record.schema import GPU_FIELDS, RecordingError, connect
from gpumix.wire.snapshot_types import Snapshot

SPEEDS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
HISTORY_S = 600.0  # recorded seconds behind the position that the charts show
REFRESH_S = 2.0  # how often a replay looks for snapshots recorded since (the index is a few ms to read)
READ_ONLY_REPLY = {"type": "power_result", "ok": False, "message": "replay: read-only", "changes": []}


class ReplaySource:
    replay = True  # the app shows the player's bindings and status line for such a source

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.monotonic,
                 history_s: float = HISTORY_S) -> None:
        self.path = Path(path)
        self._clock = clock
        self.history_s = history_s
        self._lock = threading.Lock()
        self._conn = connect(self.path, readonly=True)
        try:
            self._read_index()
        except sqlite3.DatabaseError as error:
            raise RecordingError(f"{self.path} is not a gpumix recording ({error})") from None
        if not self.times:
            raise RecordingError(f"{self.path} holds no snapshots yet")
        if self._decode(self._rowids[0]) is None:
            self._conn.close()
            raise RecordingError(f"{self.path}: its first snapshot cannot be read (not a gpumix recording, or damaged)")
        self._last_good: dict[str, Any] | None = None
        self.speed = 1.0
        self.paused = False
        self._anchor_pos = self.times[0]
        self._anchor_clock = clock()
        self._refreshed_at = clock()

    def _read_index(self) -> None:
        # times that are numbers and finite only: a damaged or hostile file must not break the player
        rows = self._conn.execute("SELECT t, rowid FROM snapshots WHERE typeof(t) IN ('real', 'integer')"
                                  " AND t BETWEEN -1e15 AND 1e15 ORDER BY t, rowid").fetchall()
        self._zdicts = dict(self._conn.execute("SELECT id, data FROM zdicts").fetchall())
        self.times = [row[0] for row in rows]
        self._rowids = [row[1] for row in rows]
        self._cache: OrderedDict[int, dict[str, Any]] = OrderedDict()

    def refresh(self) -> bool:
        """Read the index again if REFRESH_S passed: the recorder may have added snapshots, or
        thinned old ones (which renumbers). True if it changed."""
        now = self._clock()
        with self._lock:
            if now - self._refreshed_at < REFRESH_S:
                return False
            self._refreshed_at = now
            position, count, last = self._position(), len(self.times), self._rowids[-1]
            try:
                self._read_index()
            except sqlite3.DatabaseError:  # the writer holds a lock this moment: next time
                return False
            if not self.times:  # emptied under us: nothing better to show than before
                return False
            self._anchor_pos, self._anchor_clock = position, now  # the same place, playing on from here
            return len(self.times) != count or self._rowids[-1] != last

    # -- the player --------------------------------------------------------------------

    @property
    def start_s(self) -> float:
        return self.times[0]

    @property
    def end_s(self) -> float:
        return self.times[-1]

    @property
    def position_s(self) -> float:
        with self._lock:
            return self._position()

    def _position(self) -> float:
        pos = self._anchor_pos
        if not self.paused:
            pos += (self._clock() - self._anchor_clock) * self.speed
        return min(max(pos, self.start_s), self.end_s)

    def _reanchor(self, position: float) -> None:
        self._anchor_pos = min(max(position, self.start_s), self.end_s)
        self._anchor_clock = self._clock()

    @property
    def at_end(self) -> bool:
        return self.position_s >= self.end_s

    def toggle_pause(self) -> bool:
        with self._lock:
            self._reanchor(self._position())
            self.paused = not self.paused
            return self.paused

    def seek(self, delta_s: float) -> float:
        with self._lock:
            self._reanchor(self._position() + delta_s)
            return self._anchor_pos

    def seek_to(self, position_s: float) -> float:
        with self._lock:
            self._reanchor(position_s)
            return self._anchor_pos

    def faster(self) -> float:
        return self._set_speed(+1)

    def slower(self) -> float:
        return self._set_speed(-1)

    def _set_speed(self, step: int) -> float:
        with self._lock:
            self._reanchor(self._position())
            index = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - self.speed))
            self.speed = SPEEDS[min(max(index + step, 0), len(SPEEDS) - 1)]
            return self.speed

    def status_line(self) -> str:
        position = self.position_s
        state = "paused" if self.paused else ("end" if position >= self.end_s else "playing")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(position))
        return (f"REPLAY {stamp} {_clock_text(position - self.start_s)}/{_clock_text(self.end_s - self.start_s)}"
                f" {state} {self.speed:g}×")  # the banner's second line says what the keys do

    # -- what the app reads ------------------------------------------------------------------

    def snapshot(self) -> Snapshot | None:
        """The last recorded snapshot at or before the position (the same object until it changes)."""
        self.refresh()
        index = max(0, bisect.bisect_right(self.times, self.position_s) - 1)
        return self.snapshot_at(index)

    def snapshot_at(self, index: int) -> dict[str, Any]:
        """The snapshot at this index; one that cannot be read (a damaged row) shows the last
        one that could, rather than stopping the player."""
        with self._lock:
            cached = self._cache.get(index)
            if cached is not None:
                self._cache.move_to_end(index)
                return cached
            exists = self._conn.execute("SELECT 1 FROM snapshots WHERE rowid = ?", (self._rowids[index],)).fetchone()
            if exists is None:  # the recorder thinned old snapshots since the index was read
                self._read_index()
                index = min(max(0, bisect.bisect_right(self.times, self._position()) - 1), len(self.times) - 1)
        snapshot = self._decode(self._rowids[index])
        if snapshot is None:
            return self._last_good or self._decode(self._rowids[0]) or {"gpus": [], "ranks": []}
        with self._lock:
            self._cache[index] = snapshot
            self._last_good = snapshot
            while len(self._cache) > 8:
                self._cache.popitem(last=False)
        return snapshot

    def _decode(self, rowid: int) -> dict[str, Any] | None:
        """The snapshot in this row, or None if it is not one (bad zlib, JSON or shape)."""
        with self._lock:
            row = self._conn.execute("SELECT zdict, data FROM snapshots WHERE rowid = ?", (rowid,)).fetchone()
        if row is None or not isinstance(row[1], bytes):
            return None
        zdict = self._zdicts.get(row[0])
        try:
            decompressor = zlib.decompressobj(zdict=zdict) if isinstance(zdict, bytes) else zlib.decompressobj()
            snapshot = json.loads(decompressor.decompress(row[1], 256 * 1024**2) + decompressor.flush())
        except (zlib.error, ValueError, RecursionError):
            return None
        if not isinstance(snapshot, dict) or not isinstance(snapshot.get("gpus"), list):
            return None
        rows = [*snapshot["gpus"], *(snapshot.get("ranks") or [])]
        if not isinstance(snapshot.get("ranks", []), list) or not all(isinstance(row, dict) for row in rows):
            return None
        return snapshot

    def series(self, index: int, name: str) -> list[float | None]:
        """One GPU's recorded values of `name` over the `history_s` before the position."""
        if name not in GPU_FIELDS:
            return []
        position = self.position_s
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {name} FROM gpu_samples WHERE gpu = ? AND t > ? AND t <= ? ORDER BY t",
                (index, position - self.history_s, position),
            ).fetchall()
        return [value if isinstance(value, int | float) and math.isfinite(value) else None for value, in rows]

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        return dict(READ_ONLY_REPLY)

    def events(self, until_s: float | None = None) -> list[dict[str, Any]]:
        """Recorded events up to a time (default: the position)."""
        until = self.position_s if until_s is None else until_s
        with self._lock:
            rows = self._conn.execute("SELECT t, kind, payload FROM events WHERE t <= ? ORDER BY t", (until,)).fetchall()
        return [{"t": t, "kind": str(kind), "payload": _payload(payload)} for t, kind, payload in rows]

    def close(self) -> None:
        self._conn.close()


def _payload(text: Any) -> Any:
    """An event's JSON payload; text that is not JSON is kept as the text."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return {"text": str(text)}


def _clock_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
