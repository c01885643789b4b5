"""Ended steps on their way from the training thread to the sender thread: a preallocated ring.

One writer (the training thread: put, one slot store and one counter increment, never a lock; a
wake-up only when the unsent steps reach half the ring, once per crossing) and one reader (the sender thread: oldest first). When the reader falls a whole
ring behind (no hub, a frozen hub), the writer overwrites the oldest steps: they are counted as
dropped by the reader, and memory stays bounded. Correct under the GIL: each store is atomic, and
the reader checks after reading a slot that the writer had not yet begun to come round to it.
"""

from __future__ import annotations

import threading
from typing import Any


class StepRing:
    def __init__(self, size: int) -> None:
        self.size = max(2, int(size))
        self._slots: list[Any] = [None] * self.size
        self.written = 0  # steps put so far; written by the training thread only
        # puts begun (the slot stored or about to be): one ahead of written while a put is between its slot
        # store and its count; the reader checks it, so a step overwritten mid-read is never sent for another
        self.begun = 0
        self.taken = 0  # steps taken (or dropped) so far; written by the reader only
        self._dropped = 0  # overwritten before the reader took them (counted when it came back)
        # set when the unsent steps reach half the ring: the reader (the sender) waits on it between its
        # periodic sends, so that a sudden run of fast steps goes before it is overwritten, without polling
        self.half = max(1, self.size // 2)
        self.half_full = threading.Event()

    def put(self, record: Any) -> None:
        """The training thread: O(1), no allocation, never blocks."""
        written = self.written
        self.begun = written + 1  # before the slot: a reader of a full ring sees the store coming
        self._slots[written % self.size] = record
        self.written = written = written + 1
        # the unsent count grows by one a put: it equals half once per crossing, never once per step
        if written - self.taken == self.half:
            self.half_full.set()

    @property
    def dropped(self) -> int:
        """Steps overwritten before the reader took them (also while it is away)."""
        return self._dropped + max(0, self.written - self.taken - self.size)

    @property
    def pending(self) -> int:
        """Steps put and not taken yet (at most the ring's size)."""
        return min(self.written - self.taken, self.size)

    def oldest(self, keep: int = 0) -> Any | None:
        """The reader: the oldest step not taken, leaving the newest `keep` in the ring; None if none."""
        while True:
            written = self._skip_overwritten()
            if written - self.taken <= keep:
                return None
            record = self._slots[self.taken % self.size]
            if self.begun - self.taken <= self.size:  # the writer had not come round to it yet
                return record

    def peek(self, limit: int | None = None, keep: int = 0) -> list[Any]:
        """The reader: the oldest steps not taken, oldest first, at most limit (None: all), leaving the
        newest `keep` in the ring; [] if none. One or two list slices, not a call per step (issue 13: the
        sender holds the GIL while it reads). Each step given stays until take(count) says so."""
        size = self.size
        while True:
            written = self._skip_overwritten()
            taken = self.taken
            count = written - taken - keep
            if limit is not None:
                count = min(count, limit)
            if count <= 0:
                return []
            start = taken % size
            stop = start + count
            slots = self._slots
            records = slots[start:stop] if stop <= size else slots[start:] + slots[:stop - size]
            # the writer had not come round to the oldest of them, so to none of them
            if self.begun - taken <= size:
                return records

    def _skip_overwritten(self) -> int:
        """The steps written so far, after counting as dropped those the writer has come round to."""
        written = self.written
        if written - self.taken > self.size:
            self._dropped += written - self.size - self.taken
            self.taken = written - self.size
        return written

    def take(self, count: int = 1) -> None:
        """The reader is done with the step `oldest()` gave (or the first `count` that `peek()` gave)."""
        self.taken += count
